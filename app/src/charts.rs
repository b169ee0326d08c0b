//! The contention charts page (`/charts?fleet=&window=5m|1h|24h`): one fleet's
//! contention over a window, from two sources shown side by side and never
//! mixed (`lockscope_model::charts` says what each can miss): the sessions'
//! own counters, and what the lock history saw.
//!
//! The server renders the window's [`Charts`]: the window picker (plain links),
//! the window's bounds, the totals and the notes are readable without
//! JavaScript. In the browser the page asks
//! `GET /api/v1/fleets/{fleet}/charts?window=` again every
//! [`ChartWindow::refresh_ms`] (`refresh`, hydrate only), replaces the data in
//! one signal, and says in words when it last succeeded or why it is not live.
//!
//! - `series`: what is drawn and summed, from the model's functions (tested natively);
//! - `plot`: the time charts (leptos-chartistry);
//! - `lists`: hold times and the most contended locks and services (HTML bars);
//! - `summary`: the window's bounds and totals;
//! - `freshness`: the "updated …" / "not live: …" sentence.

mod freshness;
mod lists;
mod plot;
#[cfg(feature = "hydrate")]
mod refresh;
mod series;
mod summary;
#[cfg(test)]
mod tests;

use leptos::prelude::*;
use lockscope_model::charts::{ChartWindow, Charts};
use lockscope_model::time::Millis;
use lockscope_model::Screen;

use crate::links::charts_href;
use crate::live::LiveView;
use freshness::{status, Freshness};
use lists::{HoldTimes, Ranked};
use plot::{AcquisitionsChart, ConflictRateChart, ConflictsChart, WaitChart};
use series::{gap_note, points, refresh_text};
use summary::{Summary, WindowBounds};

fn window_word(w: ChartWindow) -> &'static str {
    match w {
        ChartWindow::FiveMinutes => "5 min",
        ChartWindow::Hour => "1 h",
        ChartWindow::Day => "24 h",
    }
}

#[component]
pub fn ChartsPage() -> impl IntoView {
    let live = expect_context::<LiveView>();
    let initial = live.screen.with_untracked(|s| match s {
        Screen::Charts { charts } => Some((**charts).clone()),
        _ => None,
    });
    let Some(initial) = initial else {
        return view! { <p class="error" role="alert">"No chart data on this page."</p> }.into_any();
    };
    let window = initial.window;
    let fleet = initial.fleet.clone();
    let bucket_ms = initial.frame.bucket_ms;
    let seen = initial.seen.is_some();
    let data = RwSignal::new(initial);
    let fresh = RwSignal::new(Freshness::default());
    let now = RwSignal::new(0 as Millis);
    #[cfg(feature = "hydrate")]
    refresh::start(
        crate::links::charts_api_href(&fleet, window),
        window.refresh_ms(),
        data,
        fresh,
        now,
    );

    let pts = Memo::new(move |_| data.with(points));
    let pts = Signal::from(pts);
    let picks = ChartWindow::ALL
        .into_iter()
        .map(|w| {
            let here = w == window;
            view! {
                <a href=charts_href(&fleet, w) data-testid=format!("window-{}", w.as_str())
                    class:here=here aria-current=here.then_some("page")>{window_word(w)}</a>
            }
        })
        .collect_view();
    let state = move || {
        let updated = data.with(|c| c.frame.to);
        fresh.with(|f| status(updated, f, now.get(), window.refresh_ms()))
    };
    let source = |s: &'static str| view! { <span class="source-tag">{s}</span> };
    let head = view! {
        <h2>"Contention charts"</h2>
        <nav class="windows" data-testid="window-picker" aria-label="window">
            "window: " {picks}
        </nav>
        <p class="charts-status" data-testid="charts-status" data-state=move || state().0 role="status">
            {move || state().1}
            <span class="hint">{format!(" · asks again {}", refresh_text(window.refresh_ms()))}</span>
        </p>
        <WindowBounds data/>
        <Notes data/>
        <Summary data/>
    }
    .into_any();
    let history = seen.then(|| {
        view! {
            <section class="chart" data-testid="chart-holds">
                <h3>"Hold times " {source("seen in history")}</h3>
                <p class="hint">"Holds that ended in the window (their start and end both recorded), by how long they were held."</p>
                <HoldTimes data/>
            </section>
            <section class="chart" data-testid="chart-top-locks">
                <h3>"Most contended locks " {source("seen in history")}</h3>
                <p class="hint">"By waits started in the window; a lock opens its waits in the history."</p>
                <Ranked data key="lock"/>
            </section>
            <section class="chart" data-testid="chart-top-services">
                <h3>"Services that waited most " {source("seen in history")}</h3>
                <Ranked data key="service"/>
            </section>
        }
        .into_any()
    });
    let counters = view! {
            <section class="chart" data-testid="chart-acquisitions">
                <h3>"Acquisitions per second " {source("sessions' counters")} {seen.then(|| source("seen in history"))}</h3>
                <AcquisitionsChart data=pts bucket_ms seen/>
            </section>
            <section class="chart" data-testid="chart-conflicts">
                <h3>"Conflicts and waits started per second " {source("sessions' counters")} {seen.then(|| source("seen in history"))}</h3>
                <ConflictsChart data=pts bucket_ms seen/>
                <p class="hint">"A conflict is an attempt that found the lock held; a wait started is one the history saw queue for it."</p>
            </section>
            <section class="chart" data-testid="chart-conflict-rate">
                <h3>"Conflict rate " {source("sessions' counters")}</h3>
                <ConflictRateChart data=pts bucket_ms/>
            </section>
            <section class="chart" data-testid="chart-wait">
                <h3>"Wait time p50 · p95 · p99 " {source("sessions' counters")}</h3>
                <WaitChart data=pts bucket_ms/>
                <p class="hint">
                    "From the sessions' wait histograms. A percentile beyond the last bucket is drawn at its bound with a triangle: it is at least that long."
                </p>
            </section>
    }
    .into_any();
    view! {
        {head}
        <div class="charts-grid">{counters} {history}</div>
    }
    .into_any()
}

/// What the data cannot show: no history, a history writer behind, counters
/// that start inside the window.
#[component]
fn Notes(data: RwSignal<Charts>) -> impl IntoView {
    let no_history = move || data.with(|c| c.seen.is_none());
    let behind = move || data.with(|c| c.seen.as_ref().is_some_and(|s| s.behind));
    let gap = move || data.with(gap_note);
    view! {
        <Show when=no_history>
            <p class="hint not-live" data-testid="charts-no-history">
                "This server keeps no history: only the sessions' counters."
            </p>
        </Show>
        <Show when=behind>
            <p class="hint not-live" data-testid="charts-behind">
                "The history writer was behind when this was counted: the last buckets may still grow."
            </p>
        </Show>
        {move || gap().map(|g| view! { <p class="hint gap-note" data-testid="charts-gap-note">{g}</p> })}
    }
}
