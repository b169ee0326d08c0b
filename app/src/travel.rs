//! Time travel on the history page: a slider over the query's range (a GET
//! form, so it works without JavaScript; with it, letting go of the slider
//! submits), the lock table at the chosen instant drawn by the live page's own
//! table component ([`crate::table::LockTable`], from a frame the server
//! rendered with its clock at that instant, frozen: no pager, no live
//! updates), where it was rebuilt from, and what changed since the start of
//! the range.

use leptos::context::Provider;
use leptos::prelude::*;
use lockscope_model::review::{DiffRow, Holding, Review, TableDiff, Travel};
use lockscope_model::time::{datetime, rfc3339, Millis};
use lockscope_model::view::{ViewSpec, MAX_WINDOW};
use lockscope_model::{Page, Screen};

use crate::links::{history_href, resolved_pairs};
use crate::live::LiveView;
use crate::table::{Frozen, LockTable};

/// Where the table was rebuilt from, in a sentence.
pub fn source_text(t: &Travel) -> String {
    let events = match t.replayed {
        1 => "1 event".to_string(),
        n => format!("{n} events"),
    };
    match t.checkpoint {
        Some(c) => format!("Rebuilt from the checkpoint of {} and {events} after it.", datetime(c)),
        None => format!("Rebuilt from the start of the history: {events} replayed."),
    }
}

/// The slider and, when the URL names an instant, the table then.
#[component]
pub fn TimeTravel(review: Review) -> impl IntoView {
    let (from, to) = review.range();
    let fleet = review.query.fleet.clone();
    let pairs = resolved_pairs(&review);
    let at = review.travel.as_ref().map_or(to, |t| t.at).clamp(from, to);
    let chosen = RwSignal::new(at);
    let form = NodeRef::<leptos::html::Form>::new();
    let hidden = pairs
        .iter()
        .map(|(k, v)| view! { <input type="hidden" name=*k value=v.clone()/> })
        .collect_view();
    let on_change = move |_| {
        #[cfg(feature = "hydrate")]
        if let Some(f) = form.get_untracked() {
            let _ = f.request_submit();
        }
    };
    let shown = review
        .travel
        .map(|t| view! { <TableThen travel=t fleet=fleet.clone() pairs=pairs.clone()/> });
    view! {
        <section class="travel" data-testid="travel">
            <h3>"Lock table at an instant"</h3>
            <form class="controls travel-form" method="get" action="/history" node_ref=form data-testid="travel-form">
                <input type="hidden" name="fleet" value=fleet.clone()/>
                {hidden}
                <label class="slider">
                    "at "
                    <input type="range" name="at" min=from max=to step="1000" value=at data-testid="travel-slider"
                        aria-valuetext=move || datetime(chosen.get())
                        on:input=move |ev| {
                            if let Ok(v) = event_target_value(&ev).parse::<f64>() {
                                chosen.set(v as Millis);
                            }
                        }
                        on:change=on_change/>
                </label>
                <output data-testid="travel-chosen">{move || datetime(chosen.get())}</output>
                <button type="submit" data-testid="travel-show">"show the table then"</button>
            </form>
            {shown}
        </section>
    }
}

/// The table at `travel.at` (or why there is none) and the diff.
#[component]
fn TableThen(travel: Travel, fleet: String, pairs: Vec<(&'static str, String)>) -> impl IntoView {
    let title = view! {
        <h3 data-testid="travel-title">
            "Lock table at " <time datetime=rfc3339(travel.at)>{datetime(travel.at)}</time>
        </h3>
    };
    if let Some(e) = travel.error.clone() {
        return view! {
            {title}
            <p class="error" data-testid="travel-error" role="alert">
                <span class="icon" aria-hidden="true">"⚠ "</span>"No table at this instant: "{e}
            </p>
        }
        .into_any();
    }
    let Some(frame) = travel.frame.clone() else {
        return title.into_any();
    };
    let (total, shown) = (frame.total, frame.rows.len() as u64);
    // The table component reads its rows from a view of their own.
    let then = LiveView::new(Page {
        screen: Screen::Locks,
        server_time: travel.at,
        fleet: fleet.clone(),
        view: ViewSpec {
            limit: MAX_WINDOW,
            ..ViewSpec::default()
        },
        frame: Some(frame),
        ..Page::default()
    });
    let range: Vec<(&str, String)> = pairs
        .iter()
        .filter(|(k, _)| matches!(*k, "from" | "to"))
        .cloned()
        .collect();
    let frozen = Frozen {
        lock_href_prefix: format!("{}&lock=", history_href(&fleet, &range)),
    };
    // Boxed, as the other parts below: the page's view type is deep enough.
    let table = view! {
        <Provider value=then>
            <Provider value=frozen>
                {view! { <LockTable/> }.into_any()}
            </Provider>
        </Provider>
    }
    .into_any();
    let source = source_text(&travel);
    let diff = travel.diff.map(|d| view! { <Diff diff=d/> }.into_any());
    let diff_error = travel.diff_error.map(|e| {
        view! { <p class="hint" data-testid="diff-error">"No comparison with the start of the range: "{e}</p> }
            .into_any()
    });
    view! {
        {title}
        <p class="hint" data-testid="travel-source">
            {source}
            " Not live; the sessions are not in the history, so a holder's liveness is unknown and states follow the clock alone."
        </p>
        {(total > shown).then(|| view! {
            <p class="hint" data-testid="travel-cut">{format!("The first {shown} of {total} locks, worst first; the API has them all.")}</p>
        })}
        <div class="travel-table">{table}</div>
        {diff_error}
        {diff}
    }
    .into_any()
}

fn holding(h: &Option<Holding>) -> String {
    h.as_ref()
        .map(|h| format!("fence {} · {}", h.fence, h.holder))
        .unwrap_or_default()
}

/// Locks taken, released and changed hands between the start of the range and the instant.
#[component]
fn Diff(diff: TableDiff) -> impl IntoView {
    let summary = format!(
        "Since {}: {} taken, {} released, {} changed hands.",
        datetime(diff.from),
        diff.taken_total,
        diff.released_total,
        diff.changed_total
    );
    let cut = [
        (diff.taken.len() as u64, diff.taken_total),
        (diff.released.len() as u64, diff.released_total),
        (diff.changed.len() as u64, diff.changed_total),
    ]
    .iter()
    .any(|(shown, all)| shown < all);
    let rows = |change: &'static str, word: &'static str, list: Vec<DiffRow>| {
        list.into_iter()
            .map(move |r| {
                view! {
                    <tr data-testid="diff-row" data-change=change data-lock=r.lock.clone()>
                        <td class="change">{word}</td>
                        <td class="lock"><code>{r.lock.clone()}</code></td>
                        <td>{holding(&r.before)}</td>
                        <td>{holding(&r.after)}</td>
                    </tr>
                }
            })
            .collect_view()
    };
    view! {
        <section class="diff" data-testid="diff">
            <h3>"What changed"</h3>
            <p class="hint" data-testid="diff-summary">{summary}
                {cut.then_some(" Each list shows its first locks by name.")}</p>
            <div class="wide">
                <table class="history diff-table">
                    <thead>
                        <tr><th>"change"</th><th>"lock"</th><th>"before"</th><th>"then"</th></tr>
                    </thead>
                    <tbody>
                        {rows("taken", "taken", diff.taken)}
                        {rows("released", "released", diff.released)}
                        {rows("changed", "changed hands", diff.changed)}
                    </tbody>
                </table>
            </div>
        </section>
    }
}
