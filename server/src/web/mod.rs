//! The HTTP skin: [`app`] makes the routes, [`serve`] serves them.
//!
//! - [`pages`]: the server-rendered pages (`/` the lock table, `/lock?name=`
//!   one lock, `/sessions`, `/audit`, `/history`, `/charts`); [`forms`]: the
//!   browser's admin and sign-in forms (`/signin` too); [`api`]: the JSON API
//!   under `/api/v1`; `ws`: the `/ws` upgrade; here: `/healthz`, `/metrics`
//!   ([`crate::metrics`]), the favicon and the built site's files (`/pkg/...`).
//! - Shared by them all, and importing none of them: [`state`] ([`AppState`]),
//!   [`caller`] (who sent a request), [`error`] (one error for pages and API),
//!   [`charts`] (built once for the page and the API).
//! - What every request meets before its route — the anonymous admin's
//!   guard, the static files' errors, the net under panicking handlers — is in
//!   [`edge`]; what a listener does before any request, in [`listener`].
//!
//! With authentication configured, every page and the websocket need an
//! identity: a browser without one is sent to `/signin`. Children import
//! `state`, `caller` and `error`, never this module.

pub mod api;
pub mod caller;
pub mod charts;
pub mod edge;
pub mod error;
pub mod forms;
pub mod listener;
pub mod pages;
pub mod state;
mod ws;

use std::future::IntoFuture;
use std::path::PathBuf;
use std::time::Duration;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::auth::Who;
use caller::Caller;
use error::AppError;
use listener::{check_exposure, drop_stalled_peer_after};
pub use state::AppState;

pub fn app(state: AppState) -> Router {
    // Leptos spawns rendering tasks through a global executor; point it at tokio
    // (an error only means it was already set).
    let _ = any_spawner::Executor::init_tokio();
    let site = PathBuf::from(state.leptos.site_root.as_ref());
    let routes = Router::new()
        .route("/", get(pages::page))
        .route("/lock", get(pages::lock_page))
        .route("/sessions", get(pages::sessions_page))
        .route("/audit", get(pages::audit_page))
        .route("/history", get(pages::history::history_page))
        .route("/charts", get(pages::charts::charts_page))
        // The API and the probes, each described in /api/v1/openapi.json by
        // the route that serves it (api::openapi).
        .merge(api::openapi::served(
            api::routes()
                .routes(utoipa_axum::routes!(healthz))
                .routes(utoipa_axum::routes!(scrape)),
        ))
        .merge(forms::routes())
        .route("/favicon.svg", get(favicon))
        .route("/ws", get(ws::ws_upgrade))
        .nest_service("/pkg", edge::static_files(site.join("pkg")))
        .fallback(|| async { (StatusCode::NOT_FOUND, "no such page") });
    // A route whose handler panics, so that tests see what `app()` makes of a
    // panic (its layers, not a copy of them); in test builds only.
    #[cfg(test)]
    let routes = routes.route(tests::PANIC_ROUTE, get(tests::panics));
    routes
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            edge::loopback_names_only,
        ))
        .layer(edge::catch_panics())
        .with_state(state)
}

async fn favicon() -> Response {
    (
        [(header::CONTENT_TYPE, "image/svg+xml")],
        include_str!("../../../public/favicon.svg"),
    )
        .into_response()
}

/// Liveness for probes; the fleets' numbers only to those who may read them.
#[utoipa::path(get, path = "/healthz", tag = "probes",
    summary = "Liveness",
    description = "Least role: none (no credentials needed). `{\"status\": \"ok\"}` while the \
server answers; an authenticated caller also gets every fleet's numbers.",
    security((), ("bearer" = []), ("cookie" = [])),
    responses((status = 200, description = "Alive", body = api::openapi::Health)))]
async fn healthz(State(state): State<AppState>, caller: Caller) -> Json<serde_json::Value> {
    match caller.who {
        Who::Known(_) => Json(serde_json::json!({ "status": "ok", "fleets": state.fleets.summaries() })),
        Who::Nobody(_) | Who::Ambiguous(_) => Json(serde_json::json!({ "status": "ok" })),
    }
}

/// `GET /metrics` ([`crate::metrics`]): with authentication configured, for any
/// identity (a Prometheus bearer token); without, open (the server is on loopback only).
#[utoipa::path(get, path = "/metrics", tag = "probes",
    summary = "Prometheus metrics (OpenMetrics text)",
    description = "Least role: viewer (any identity, e.g. a Prometheus bearer token). The metrics \
docs/operations.md lists, in the OpenMetrics text format.",
    responses(
        (status = 200, description = "The metrics", body = String,
            content_type = "application/openmetrics-text; version=1.0.0; charset=utf-8"),
        (status = 400, description = "Ambiguous credentials", body = error::ErrorBody),
        api::openapi::NotSignedIn,
        (status = 500, description = "Encoding the metrics failed", body = error::ErrorBody),
        (status = 503, description = "A token could not be checked now (Retry-After)", body = error::ErrorBody),
    ))]
async fn scrape(State(state): State<AppState>, caller: Caller) -> Result<Response, AppError> {
    caller.reader()?;
    match state.metrics.encode() {
        Ok(body) => Ok(([(header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)], body).into_response()),
        Err(_) => {
            tracing::error!("encoding the metrics failed");
            Err(AppError::api(
                StatusCode::INTERNAL_SERVER_ERROR,
                "encoding the metrics failed",
            ))
        }
    }
}

/// Serves `state` on `listener` until `shutdown` turns true; open websockets are
/// told to go away, and stragglers are cut after `grace`. Without
/// authentication only a loopback listener is served: anyone who could reach
/// it would be admin.
pub async fn serve(
    listener: TcpListener,
    state: AppState,
    mut shutdown: watch::Receiver<bool>,
    grace: Duration,
) -> std::io::Result<()> {
    // Peers' addresses reach the handlers: a proxy's identity header is believed
    // only from the addresses `[auth.proxy] trusted` names.
    check_exposure(listener.local_addr()?, state.auth.enabled())?;
    // With the history on, a client that takes no data for twice the history
    // exports' idle timeout is disconnected by the kernel (its export already
    // ended at the timeout; the connection and its buffers go now). With
    // `--history off` there are no exports and nothing is set
    // (docs/operations.md, "Exports' limits", says so). Saturating: limits
    // built in code are not checked as the file's are.
    let stalled = state.history.as_ref().map(|h| h.stats().limits.idle.saturating_mul(2));
    let listener = axum::serve::ListenerExt::tap_io(listener, move |tcp| {
        if let Some(after) = stalled {
            drop_stalled_peer_after(tcp, after);
        }
    });
    let router = app(state).into_make_service_with_connect_info::<std::net::SocketAddr>();
    let mut stop = shutdown.clone();
    let server = axum::serve(listener, router).with_graceful_shutdown(async move {
        let _ = stop.wait_for(|s| *s).await.map(|_| ());
    });
    let server = std::pin::pin!(server.into_future());
    tokio::select! {
        r = server => r,
        _ = async {
            let _ = shutdown.wait_for(|s| *s).await.map(|_| ());
            tokio::time::sleep(grace).await;
        } => {
            tracing::warn!(?grace, "connections still open after the grace period; exiting");
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests;
