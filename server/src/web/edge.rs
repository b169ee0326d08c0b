//! What every request meets before (or around) its route: the guard of the
//! anonymous admin ([`loopback_names_only`]), the built site's static files
//! ([`static_files`]) and the net under every handler ([`catch_panics`]).

use std::any::Any;
use std::path::PathBuf;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Router;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::services::ServeDir;

use super::error::AppError;
use super::state::AppState;

/// The headers a reverse proxy may add to what it forwards (a proxy that adds
/// none of them, such as nginx's bare `proxy_pass`, cannot be told from a local
/// client: docs/operations.md says never to put one in front of a server
/// without `[auth]`).
pub const FORWARDED: [&str; 6] = [
    "forwarded",
    "via",
    "x-forwarded-for",
    "x-real-ip",
    "x-forwarded-host",
    "x-forwarded-proto",
];

/// Without authentication the server listens on loopback only, and answers only
/// requests that name a loopback host: a page on another site whose name
/// resolves to 127.0.0.1 (DNS rebinding) would otherwise be same-origin here,
/// and its script the anonymous admin. Nor does it answer what a reverse proxy
/// forwards ([`FORWARDED`]), which would put the anonymous admin on the
/// proxy's network. Both are `403`, on every route.
pub async fn loopback_names_only(
    State(state): State<AppState>,
    req: Request<Body>,
    next: axum::middleware::Next,
) -> Response {
    if state.auth.enabled() {
        return next.run(req).await;
    }
    match refusal_without_auth(req.headers()) {
        None => next.run(req).await,
        Some(why) => AppError::Forbidden(why).into_response(),
    }
}

/// Why a request is refused when no authentication is configured, if it is.
fn refusal_without_auth(headers: &axum::http::HeaderMap) -> Option<String> {
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or("");
    if !is_loopback_name(host) {
        return Some(format!(
            "no authentication is configured, so only loopback host names are served (not {host:?})"
        ));
    }
    let forwarded = FORWARDED.iter().find(|h| headers.contains_key(**h))?;
    Some(format!(
        "no authentication is configured, so a request a reverse proxy forwards is not served \
         (it carries {forwarded}): configure [auth] to serve through a proxy"
    ))
}

/// `localhost`, `127.x.y.z` or `[::1]`, with or without a port.
pub fn is_loopback_name(host: &str) -> bool {
    let name = match host.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => host.rsplit_once(':').map_or(host, |(h, _)| h),
    };
    name.eq_ignore_ascii_case("localhost") || name.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// The files under `dir` (nested at `/pkg`). Whatever cannot be served as a
/// file — no such file, a path leaving `dir`, a name the file system refuses
/// (a NUL byte, over 255 bytes), any other error opening it — is `404 no such
/// file`, never a 500.
pub fn static_files(dir: PathBuf) -> Router {
    let files = ServeDir::new(dir);
    Router::new().fallback(move |req: Request<Body>| {
        let mut files = files.clone();
        async move {
            let path = req.uri().path().to_string();
            match files.try_call(req).await {
                Ok(found) if found.status() != StatusCode::NOT_FOUND => found.into_response(),
                Ok(_) => no_such_file(),
                Err(e) => {
                    tracing::debug!(error = %e, path, "a static file cannot be opened: 404");
                    no_such_file()
                }
            }
        }
    })
}

fn no_such_file() -> Response {
    (StatusCode::NOT_FOUND, "no such file").into_response()
}

/// A handler that panics answers `500 internal error` (the panic's message
/// goes to the log at ERROR), and the server goes on serving.
pub fn catch_panics() -> CatchPanicLayer<fn(Box<dyn Any + Send + 'static>) -> Response> {
    CatchPanicLayer::custom(internal_error as fn(Box<dyn Any + Send + 'static>) -> Response)
}

fn internal_error(panic: Box<dyn Any + Send + 'static>) -> Response {
    let message = panic
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| panic.downcast_ref::<&str>().copied())
        .unwrap_or("(no message)");
    tracing::error!(panic = message, "a request handler panicked: answered 500");
    (StatusCode::INTERNAL_SERVER_ERROR, "internal error").into_response()
}
