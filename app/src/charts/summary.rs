//! The window's totals above the charts: rendered by the server (readable
//! without JavaScript) and kept current with the data. Each number says which
//! source it is from; "no samples" / "no history" where a source has nothing.

use leptos::prelude::*;
use lockscope_model::charts::{Charts, Quantile};
use lockscope_model::time::{datetime, hms, human_duration, rfc3339};

use super::series::{percent, totals, window_span};

fn count(v: Option<u64>, none: &'static str) -> String {
    v.map_or_else(|| none.to_string(), |n| n.to_string())
}

fn quantile(q: Option<Quantile>) -> String {
    q.map_or_else(|| "no waits".to_string(), Quantile::label)
}

/// The window's bounds, as text and as `data-from` / `data-to` (RFC 3339).
#[component]
pub fn WindowBounds(data: RwSignal<Charts>) -> impl IntoView {
    let from = move || data.with(|c| c.frame.from);
    let to = move || data.with(|c| c.frame.to);
    view! {
        <p class="window-bounds" data-testid="charts-window" data-from=move || rfc3339(from()) data-to=move || rfc3339(to())>
            {move || data.with(|c| format!("{}: ", window_span(c.window)))}
            <time datetime=move || rfc3339(from())>{move || datetime(from())}</time>
            " – "
            <time datetime=move || rfc3339(to())>{move || format!("{}", hms(to()))}</time>
            {move || data.with(|c| format!(" · buckets of {}", human_duration(c.frame.bucket_ms)))}
        </p>
    }
    .into_any()
}

/// Totals over the window, by source.
#[component]
pub fn Summary(data: RwSignal<Charts>) -> impl IntoView {
    let t = Memo::new(move |_| data.with(totals));
    let cell = move |f: fn(&super::series::Totals) -> String| move || t.with(f);
    view! {
        <div class="wide">
            <table class="charts-summary" data-testid="charts-summary">
                <thead>
                    <tr><th>"over the window"</th><th>"sessions' counters"</th><th>"seen in history"</th></tr>
                </thead>
                <tbody>
                    <tr>
                        <th>"acquisitions"</th>
                        <td data-testid="total-acquired">{cell(|t| count(t.acquired, "no samples"))}</td>
                        <td data-testid="total-acquired-seen">{cell(|t| count(t.acquired_seen, "no history"))}</td>
                    </tr>
                    <tr>
                        <th>"conflicts · waits started"</th>
                        <td data-testid="total-conflicts">{cell(|t| count(t.conflicts, "no samples"))}" conflicts"</td>
                        <td><span data-testid="seen-waits-total">{cell(|t| count(t.waits_seen, "no history"))}</span>" waits started"</td>
                    </tr>
                    <tr>
                        <th>"conflict rate"</th>
                        <td data-testid="total-conflict-rate">
                            {cell(|t| t.conflict_rate.map_or_else(|| "no attempts".to_string(), |r| format!("{} of attempts", percent(r))))}
                        </td>
                        <td class="na">"—"</td>
                    </tr>
                    <tr>
                        <th>"wait time p50 · p95 · p99"</th>
                        <td data-testid="total-wait">
                            {cell(|t| format!("{} · {} · {}", quantile(t.p50), quantile(t.p95), quantile(t.p99)))}
                        </td>
                        <td class="na">"—"</td>
                    </tr>
                    <tr>
                        <th>"holds ended"</th>
                        <td class="na">"—"</td>
                        <td data-testid="total-holds">{cell(|t| count(t.holds_ended, "no history"))}</td>
                    </tr>
                    <tr>
                        <th>"sessions followed now"</th>
                        <td data-testid="total-sessions">{move || data.with(|c| c.sessions)}</td>
                        <td class="na">"—"</td>
                    </tr>
                </tbody>
            </table>
        </div>
        <p class="hint" data-testid="counters-span">
            {move || t.with(|t| match t.counters_ms {
                Some(ms) => format!("The counters' totals cover {} of the window (what this server sampled).", human_duration(ms)),
                None => "The counters cover none of the window: this server has no two samples in it.".to_string(),
            })}
        </p>
    }
    .into_any()
}
