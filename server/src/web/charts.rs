//! The contention charts of one fleet's window ([`build`]), built once for the
//! page (`/charts`) and the API (`GET /api/v1/fleets/{fleet}/charts`).

use lockscope_model::charts::{ChartWindow, Charts};
use lockscope_store::now_ms;

use super::state::AppState;

/// How long a chart waits for the history's writer to catch up.
const FLUSH_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// The charts of `fleet` for `window`, ending now.
pub async fn build(
    state: &AppState,
    stats: &crate::live::stats::FleetStats,
    fleet: &str,
    window: ChartWindow,
) -> Result<Charts, crate::remember::history::HistoryError> {
    let frame = window.frame(now_ms());
    let counters = stats.counter_charts(&frame);
    let seen = match &state.history {
        Some(history) => {
            // What this server saw up to the window's end is counted, not just
            // what its writer had reached.
            let caught_up = history.flush(FLUSH_WAIT).await;
            let mut seen = history.seen(fleet, &frame).await?;
            seen.behind = !caught_up;
            Some(seen)
        }
        None => None,
    };
    Ok(Charts {
        fleet: fleet.to_string(),
        window,
        frame,
        counters: counters.buckets,
        counters_total: counters.total,
        counters_since: counters.since,
        sessions: counters.sessions,
        seen,
    })
}
