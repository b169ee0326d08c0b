//! The lock table page's own parts: the state and service chips, the filter
//! and sort controls, and the table itself, a virtual scroll: the scroller is as
//! tall as the whole view (spacer rows above and below the window), and only the
//! window's rows exist in the document. Without JavaScript the page shows the
//! window the URL names, with links to the previous and next windows.
//! The history page shows a past table with the same component, [`Frozen`].

use leptos::prelude::*;
use lockscope_model::view::{RowState, SortKey, ViewSpec};

use crate::links::{href, locks_href};
use crate::live::{Connection, LiveView};
use crate::rows::state_icon;

mod row;
mod steps;

use row::LockRow;

/// Changes the view on screen (the socket sends it; the URL follows).
pub(crate) fn set_view(live: LiveView, change: impl FnOnce(&mut ViewSpec)) {
    let mut v = live.view.get_untracked();
    change(&mut v);
    #[cfg(feature = "hydrate")]
    crate::socket::show(live, v);
    #[cfg(not(feature = "hydrate"))]
    let _ = v;
}

/// Height of one table row, in CSS pixels (the stylesheet fixes it too).
pub const ROW_PX: f64 = 36.0;
/// Tallest scroll area: browsers cap element heights (~33 M px in Chromium); past
/// this, a pixel of scroll stands for more than one row.
const MAX_SCROLL_PX: f64 = 8_000_000.0;
/// Rows kept beyond the visible ones on each side.
const OVERSCAN: u64 = 30;

/// The fleet's locks per state and per service; each is a link that filters the
/// table to it.
#[component]
pub fn States() -> impl IntoView {
    let live = expect_context::<LiveView>();
    let chip = move |s: RowState| {
        let link = move || {
            let mut v = live.view.get();
            v.filter.state = (v.filter.state != Some(s)).then_some(s);
            v.offset = 0;
            href(&live.fleet.get(), &v)
        };
        let on_click = move |ev: leptos::ev::MouseEvent| {
            ev.prevent_default();
            set_view(live, |v| {
                v.filter.state = (v.filter.state != Some(s)).then_some(s);
                v.offset = 0;
            });
        };
        view! {
            <a
                class="chip"
                data-testid="state-count"
                data-state=s.as_str()
                class:selected=move || live.view.with(|v| v.filter.state == Some(s))
                title=s.reason()
                href=link
                on:click=on_click
            >
                <span class="icon" aria-hidden="true">{state_icon(s)}</span>
                {s.as_str()}
                " "
                <b>{move || live.aggregates.with(|a| a.count(s))}</b>
            </a>
        }
    };
    let services = move || {
        live.aggregates.with(|a| {
            a.services
                .iter()
                .map(|(name, n)| {
                    let name = name.clone();
                    let target = name.clone();
                    let link = {
                        let name = name.clone();
                        move || {
                            let mut v = live.view.get();
                            v.filter.service = Some(name.clone());
                            v.offset = 0;
                            href(&live.fleet.get(), &v)
                        }
                    };
                    let on_click = move |ev: leptos::ev::MouseEvent| {
                        ev.prevent_default();
                        let target = target.clone();
                        set_view(live, |v| {
                            v.filter.service = Some(target);
                            v.offset = 0;
                        });
                    };
                    let label = name.clone();
                    view! {
                        <a class="service" data-testid="service-count" data-service=name href=link on:click=on_click>
                            {label}
                            " "
                            <b>{*n}</b>
                        </a>
                    }
                })
                .collect_view()
        })
    };
    view! {
        <section class="aggregates" data-testid="aggregates">
            <div class="states">{RowState::ALL.into_iter().map(chip).collect_view()}</div>
            <div class="services">
                <span class="label">"services "</span>
                {services}
                {move || {
                    let (shown, all) = live.aggregates.with(|a| (a.services.len() as u64, a.service_count));
                    (all > shown).then(|| format!("and {} more", all - shown))
                }}
            </div>
        </section>
    }
}

/// Filter and sort. A plain GET form (works without JavaScript); with it, each
/// change applies at once.
#[component]
pub fn Controls() -> impl IntoView {
    let live = expect_context::<LiveView>();
    let v = live.view.get_untracked();
    view! {
        <form class="controls" method="get" action="/" data-testid="controls" on:submit=|ev| ev.prevent_default()>
            <input type="hidden" name="fleet" prop:value=move || live.fleet.get()/>
            <label>
                "state "
                <select
                    name="state"
                    data-testid="filter-state"
                    prop:value=move || live.view.with(|v| v.filter.state.map_or("", RowState::as_str))
                    on:change=move |ev| {
                        let s = RowState::parse(&event_target_value(&ev));
                        set_view(live, |v| { v.filter.state = s; v.offset = 0; });
                    }
                >
                    <option value="" selected=v.filter.state.is_none()>"any"</option>
                    {RowState::ALL
                        .into_iter()
                        .map(|s| view! {
                            <option value=s.as_str() selected=v.filter.state == Some(s)>{s.as_str()}</option>
                        })
                        .collect_view()}
                </select>
            </label>
            <TextFilter label="service " name="service" field=|f| &mut f.service list="services"/>
            <datalist id="services">
                {move || live.aggregates.with(|a| a.services.iter().map(|(s, _)| view! { <option value=s.clone()></option> }).collect_view())}
            </datalist>
            <TextFilter label="host " name="host" field=|f| &mut f.host/>
            <TextFilter label="name starts with " name="prefix" field=|f| &mut f.prefix/>
            <TextFilter label="contains " name="q" field=|f| &mut f.contains/>
            <label>
                "sort "
                <select
                    name="sort"
                    data-testid="sort"
                    prop:value=move || live.view.with(|v| v.sort.key.as_str())
                    on:change=move |ev| {
                        let k = SortKey::parse(&event_target_value(&ev)).unwrap_or_default();
                        set_view(live, |v| { v.sort.key = k; v.offset = 0; });
                    }
                >
                    {SortKey::ALL
                        .into_iter()
                        .map(|k| view! { <option value=k.as_str() selected=v.sort.key == k>{sort_label(k)}</option> })
                        .collect_view()}
                </select>
            </label>
            <label>
                <input
                    type="checkbox"
                    name="rev"
                    value="1"
                    data-testid="reverse"
                    checked=v.sort.reverse
                    prop:checked=move || live.view.with(|v| v.sort.reverse)
                    on:change=move |ev| {
                        let r = event_target_checked(&ev);
                        set_view(live, |v| { v.sort.reverse = r; v.offset = 0; });
                    }
                />
                " reversed"
            </label>
            <noscript><button type="submit">"apply"</button></noscript>
            <a class="reset" href=move || locks_href(&live.fleet.get())>"clear"</a>
        </form>
        {move || live.view_error.get().map(|e| view! { <p class="error" data-testid="view-error">"This URL's view was not usable (" {e} "); showing the default view."</p> })}
    }
}

/// One text field of the filter: applied when it changes (Enter or leaving the
/// field), not per keystroke, since a new filter builds a new index on the server.
#[component]
fn TextFilter(
    label: &'static str,
    /// The URL query key (the form's field name).
    name: &'static str,
    field: fn(&mut lockscope_model::view::Filter) -> &mut Option<String>,
    #[prop(optional)] list: Option<&'static str>,
) -> impl IntoView {
    let live = expect_context::<LiveView>();
    let value = move || {
        live.view
            .with(|v| field(&mut v.filter.clone()).clone().unwrap_or_default())
    };
    view! {
        <label>
            {label}
            <input
                name=name
                data-testid=format!("filter-{name}")
                list=list
                size="12"
                prop:value=value
                on:change=move |ev| {
                    let s = event_target_value(&ev);
                    set_view(live, |v| {
                        *field(&mut v.filter) = (!s.is_empty()).then_some(s);
                        v.offset = 0;
                    });
                }
            />
        </label>
    }
}

fn sort_label(k: SortKey) -> &'static str {
    match k {
        SortKey::Severity => "severity, then oldest",
        SortKey::Name => "name",
        SortKey::Age => "oldest first",
        SortKey::Expiry => "expires soonest",
        SortKey::Waiters => "most waiters",
        SortKey::Fence => "highest fence",
    }
}

/// Pixels of scroll per row: one row's height, unless the view is too tall for
/// the browser.
fn px_per_row(total: u64) -> f64 {
    let full = total as f64 * ROW_PX;
    if full > MAX_SCROLL_PX {
        MAX_SCROLL_PX / total as f64
    } else {
        ROW_PX
    }
}

/// Asks for the window around the rows `el` (the scroller) shows, when they
/// are near the current window's edge or past it (and not already asked for).
fn follow_scroll(live: LiveView, el: &leptos::web_sys::HtmlElement) {
    let total = live.total.get_untracked();
    let offset = live.offset.get_untracked();
    let len = live.order.with_untracked(Vec::len) as u64;
    let ppr = px_per_row(total);
    let scroll = el.scroll_top() as f64;
    let top = offset as f64 * ppr;
    let first = if scroll >= top && scroll < top + len as f64 * ROW_PX {
        offset + ((scroll - top) / ROW_PX) as u64
    } else {
        (scroll / ppr) as u64
    };
    let visible = (el.client_height() as f64 / ROW_PX).ceil() as u64 + 1;
    let want = (
        first.saturating_sub(OVERSCAN / 3),
        (first + visible + OVERSCAN / 3).min(total),
    );
    let requested = live.view.with_untracked(|v| (v.offset, v.offset + v.limit as u64));
    let covered = |(a, b): (u64, u64)| a <= want.0 && b >= want.1.min(total);
    if covered((offset, offset + len)) || covered(requested) {
        return;
    }
    let limit = (visible + 2 * OVERSCAN).clamp(1, lockscope_model::view::MAX_WINDOW as u64) as u32;
    set_view(live, |v| {
        v.offset = first.saturating_sub(OVERSCAN);
        v.limit = limit;
    });
}

/// Context that makes [`LockTable`] a still picture of a past instant (the
/// history page's time travel): no pager and no scrolling windows (the rows
/// are all it has), and each lock links to its history rather than its live page.
#[derive(Clone, Debug)]
pub struct Frozen {
    /// A lock's link is this followed by its encoded name.
    pub lock_href_prefix: String,
}

#[component]
pub fn LockTable() -> impl IntoView {
    let live = expect_context::<LiveView>();
    let frozen = use_context::<Frozen>().is_some();
    let scroller = NodeRef::<leptos::html::Div>::new();
    let shown = steps::shown_order(live);
    let is_static = move || live.connection.with(|c| *c == Connection::Static);
    let top = move || {
        if is_static() {
            return "0px".to_string();
        }
        format!("{}px", live.offset.get() as f64 * px_per_row(live.total.get()))
    };
    let bottom = move || {
        if is_static() {
            return "0px".to_string();
        }
        let total = live.total.get();
        let below = total.saturating_sub(live.offset.get() + live.order.with(Vec::len) as u64);
        format!("{}px", below as f64 * px_per_row(total))
    };
    // Scrolling moves the window: when the visible rows get near its edge, ask for
    // the window around them.
    let on_scroll = move |_| {
        if let Some(el) = scroller.get_untracked().filter(|_| !frozen) {
            follow_scroll(live, &el);
        }
    };
    // A new filter or order starts at the top.
    Effect::new(
        move |prev: Option<(lockscope_model::view::Filter, lockscope_model::view::Sort)>| {
            let cur = live.view.with(|v| (v.filter.clone(), v.sort));
            if prev.is_some_and(|p| p != cur) {
                if let Some(el) = scroller.get_untracked() {
                    el.set_scroll_top(0);
                }
            }
            cur
        },
    );
    // A URL that names a position: scroll there once the view is live. At the
    // next animation frame, once the spacers have been drawn for the live window
    // (render effects run in queued tasks): before, the position would be
    // clamped to the rows drawn so far, and the window asked for from it.
    Effect::new(move |done: Option<bool>| {
        if done == Some(true) || live.connection.get() != Connection::Live || scroller.get_untracked().is_none() {
            return false;
        }
        request_animation_frame(move || {
            let Some(el) = scroller.get_untracked() else {
                return;
            };
            let offset = live.offset.get_untracked();
            if offset > 0 {
                el.set_scroll_top((offset as f64 * px_per_row(live.total.get_untracked())) as i32);
            }
            // The first window is the document's, made before anyone knew the
            // screen's height (model's `DEFAULT_WINDOW`): a taller scroller asks
            // for the rows it shows now, not at its first scroll.
            if !frozen {
                follow_scroll(live, &el);
            }
        });
        true
    });
    let pager = move || {
        if frozen {
            return None;
        }
        let v = live.view.get();
        let total = live.total.get();
        let offset = live.offset.get();
        let limit = v.limit as u64;
        let fleet = live.fleet.get();
        let prev = (offset > 0).then(|| {
            href(
                &fleet,
                &ViewSpec {
                    offset: offset.saturating_sub(limit),
                    ..v.clone()
                },
            )
        });
        let next = (offset + limit < total).then(|| {
            href(
                &fleet,
                &ViewSpec {
                    offset: offset + limit,
                    ..v.clone()
                },
            )
        });
        Some(view! {
            {prev.map(|h| view! { <a href=h data-testid="prev-page">"◀ previous"</a> })}
            " "
            {next.map(|h| view! { <a href=h data-testid="next-page">"next ▶"</a> })}
        })
    };
    view! {
        <div class="scroller" data-testid="scroller" node_ref=scroller on:scroll=on_scroll>
            // The table's roles are said explicitly: its parts are laid out as blocks
            // and flex lines (style/main.css), which some screen readers (Safari's
            // VoiceOver) take as the end of a table's semantics.
            <table class="locks" data-testid="lock-table" role="table">
                <thead role="rowgroup">
                    <tr role="row">
                        <th role="columnheader" class="st">"state"</th>
                        <th role="columnheader" class="name">"lock"</th>
                        <th role="columnheader" class="holder">"holder"</th>
                        <th role="columnheader" class="purpose">"purpose"</th>
                        <th role="columnheader" class="age">"held for"</th>
                        <th role="columnheader" class="expires">"expires in"</th>
                        <th role="columnheader" class="waiters">"waiters"</th>
                        <th role="columnheader" class="fence">"fence"</th>
                    </tr>
                </thead>
                <tbody role="rowgroup">
                    <tr class="spacer" aria-hidden="true"><td colspan="8" style:height=top></td></tr>
                    <For each=move || shown.get() key=|name| name.clone() let:name>
                        <LockRow name/>
                    </For>
                    <tr class="spacer" aria-hidden="true"><td colspan="8" style:height=bottom></td></tr>
                </tbody>
            </table>
        </div>
        <Show when=move || live.order.with(Vec::is_empty)>
            <p class="empty" data-testid="empty">
                {move || match (frozen, live.view.with(|v| v.filter.is_empty())) {
                    (true, _) => "No locks were held then.",
                    (false, true) => "No locks are held.",
                    (false, false) => "No locks match this view.",
                }}
            </p>
        </Show>
        <nav class="pager" data-testid="pager">{pager}</nav>
    }
}
