//! `GET /api/v1/fleets/{fleet}/charts?window=5m|1h|24h`: the contention charts'
//! data ([`Charts`]) for the window ending now: the sessions' counters as this
//! server sampled them, and what the lock history counted (absent when it
//! keeps none).

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use lockscope_model::charts::ChartWindow;

use super::{error, no_fleet, Caller};
use crate::web::charts::build;
use crate::web::state::AppState;

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
