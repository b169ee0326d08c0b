//! The contention charts page (`/charts?fleet=&window=5m|1h|24h`): rendered
//! with the window's data ([`crate::web::charts::build`]); the browser then
//! asks `GET /api/v1/fleets/{fleet}/charts` again every
//! [`ChartWindow::refresh_ms`] and says when it last succeeded.

use axum::body::Body;
use axum::extract::{Query, Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use lockscope_model::charts::ChartWindow;
use lockscope_model::{Page, Screen};

use super::{render, signed_in, watch_page};
use crate::web::caller::Caller;
use crate::web::charts::build;
use crate::web::error::AppError;
use crate::web::state::{AppState, FleetQuery};

pub(in crate::web) async fn charts_page(
    State(state): State<AppState>,
    caller: Caller,
    Query(pairs): Query<Vec<(String, String)>>,
    req: Request<Body>,
) -> Result<Response, AppError> {
    let id = signed_in(&caller, &req)?;
    let get = |key: &str| pairs.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone());
    let hub = state.fleet(&FleetQuery { fleet: get("fleet") })?;
    let window = match ChartWindow::from_query(get("window").as_deref()) {
        Ok(w) => w,
        Err(why) => return Ok((StatusCode::BAD_REQUEST, why).into_response()),
    };
    let charts = match build(&state, hub.stats(), hub.fleet(), window).await {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(error = %e, "history read for the charts failed");
            return Ok((StatusCode::SERVICE_UNAVAILABLE, e.to_string()).into_response());
        }
    };
    let page = Page {
        screen: Screen::Charts {
            charts: Box::new(charts),
        },
        ..watch_page(hub, &state)
    };
    Ok(render(&state, id, &caller, page, req).await)
}
