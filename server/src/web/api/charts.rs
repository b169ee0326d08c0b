//! `GET /api/v1/fleets/{fleet}/charts?window=5m|1h|24h`: the contention charts'
//! data ([`Charts`]) for the window ending now: the sessions' counters as this
//! server sampled them, and what the lock history counted (absent when it
//! keeps none).

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::Json;
use lockscope_model::charts::{ChartWindow, Charts};

use super::openapi::{FleetPath, NotSignedIn};
use super::{hub, Caller};
use crate::web::charts::build;
use crate::web::error::{AppError, ErrorBody};
use crate::web::state::AppState;

#[utoipa::path(get, path = "/api/v1/fleets/{fleet}/charts", tag = "charts",
    summary = "The contention charts' data for the window ending now",
    description = "Least role: viewer. The sessions' counters as this server sampled them, per \
bucket, and what the lock history counted (`seen`, absent without history).",
    params(FleetPath,
        ("window" = Option<ChartWindow>, Query, description = "`5m` (default), `1h` or `24h`"),
    ),
    responses(
        (status = 200, description = "The charts", body = Charts),
        (status = 400, description = "Another window; ambiguous credentials", body = ErrorBody),
        NotSignedIn,
        (status = 404, description = "No such fleet", body = ErrorBody),
        (status = 503, description = "The history cannot be read now", body = ErrorBody),
    ))]
pub(super) async fn charts(
    State(state): State<AppState>,
    caller: Caller,
    Path(fleet): Path<String>,
    Query(pairs): Query<Vec<(String, String)>>,
) -> Result<Json<Charts>, AppError> {
    caller.reader()?;
    let hub = hub(&state, &fleet)?;
    let window = ChartWindow::from_query(pairs.iter().find(|(k, _)| k == "window").map(|(_, v)| v.as_str()))
        .map_err(|why| AppError::api(StatusCode::BAD_REQUEST, why))?;
    match build(&state, hub.stats(), &fleet, window).await {
        Ok(charts) => Ok(Json(charts)),
        Err(e) => {
            tracing::warn!(error = %e, "history read for the charts failed");
            Err(AppError::api(StatusCode::SERVICE_UNAVAILABLE, e.to_string()))
        }
    }
}
