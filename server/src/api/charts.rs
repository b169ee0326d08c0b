//! `GET /api/v1/fleets/{fleet}/charts?window=5m|1h|24h`: the contention charts'
//! data ([`Charts`]) for the window ending now: the sessions' counters as this
//! server sampled them, and what the lock history counted (absent when it
//! keeps none).

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use lockscope_model::charts::{ChartWindow, Charts};
use lockscope_store::now_ms;

use super::{error, no_fleet, Caller};
use crate::http::AppState;

/// How long a chart waits for the history's writer to catch up.
const FLUSH_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

pub(super) async fn charts(
    State(state): State<AppState>,
    caller: Caller,
    Path(fleet): Path<String>,
    Query(pairs): Query<Vec<(String, String)>>,
) -> Response {
    if let Err(refused) = caller.reader() {
        return refused.into_response();
    }
    let Some(hub) = state.fleets.get(Some(&fleet)) else {
        return no_fleet(&state, &fleet);
    };
    let window = match ChartWindow::from_query(pairs.iter().find(|(k, _)| k == "window").map(|(_, v)| v.as_str())) {
        Ok(w) => w,
        Err(why) => return error(StatusCode::BAD_REQUEST, &why),
    };
    match build(&state, hub.stats(), &fleet, window).await {
        Ok(charts) => Json(charts).into_response(),
        Err(e) => {
            tracing::warn!(error = %e, "history read for the charts failed");
            error(StatusCode::SERVICE_UNAVAILABLE, &e.to_string())
        }
    }
}

/// The charts of `fleet` for `window`, ending now.
pub async fn build(
    state: &AppState,
    stats: &crate::metrics::FleetStats,
    fleet: &str,
    window: ChartWindow,
) -> Result<Charts, crate::history::HistoryError> {
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
