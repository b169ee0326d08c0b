//! Routes: the server-rendered pages (`/` the lock table, `/lock?name=` one
//! lock, `/sessions`, `/audit`, `/history` ([`history_page`]), `/charts`
//! ([`charts_page`]), `/signin`), the live feed (`/ws`), the JSON API
//! ([`crate::api`]), the browser's admin forms ([`crate::forms`]), `/healthz`,
//! `/metrics` ([`crate::metrics`]),
//! the favicon, and the built site's static files (`/pkg/...`). What every
//! request meets before its route — the anonymous admin's guard, the static
//! files' errors, the net under panicking handlers — is in [`edge`].
//!
//! With authentication configured, every page and the websocket need an
//! identity: a browser without one is sent to `/signin`.

use std::path::PathBuf;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Query, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use futures::{SinkExt, StreamExt};
use leptos::prelude::{provide_context, LeptosOptions};
use lockscope_app::shell;
use lockscope_model::admin::AuditQuery;
use lockscope_model::view::ViewSpec;
use lockscope_model::{Page, Screen};
use lockscope_store::now_ms;
use tokio::sync::watch;

use crate::api::Caller;
use crate::audit::AuditLog;
use crate::auth::{Auth, Identity, Who};
use crate::history::History;
use crate::hub::{Fleets, HubHandle, HubStopped};
use crate::metrics::Metrics;
use crate::settings::Limits;
use crate::ws::limit::{Refused, Slot, Sockets};
use crate::ws::{serve_subscriber, WsIn, WsOut};

mod charts_page;
pub mod edge;
mod history_page;

#[derive(Clone)]
pub struct AppState {
    pub fleets: Fleets,
    pub leptos: LeptosOptions,
    pub shutdown: watch::Receiver<bool>,
    pub audit: AuditLog,
    pub auth: Arc<Auth>,
    /// `/metrics`; shared with whatever counts into it (the unlockers).
    pub metrics: Arc<Metrics>,
    /// The lock history (`None`: the server keeps none).
    pub history: Option<History>,
    /// The open websockets, bounded by `[limits]` ([`crate::ws::limit`]).
    pub sockets: Arc<Sockets>,
}

impl AppState {
    /// Records and serves the lock history `history` (its writer's numbers in
    /// `/metrics` too). Before anything else takes a handle on `metrics`.
    pub fn with_history(mut self, history: History) -> AppState {
        self.metrics = Arc::new(self.new_metrics().with_history(history.stats().clone()));
        // The overview says so while the history is not recording.
        tokio::spawn(crate::history::health::publish(
            history.stats().clone(),
            self.fleets.clone(),
        ));
        self.history = Some(history);
        self
    }
}

impl AppState {
    pub fn new(
        fleets: Fleets,
        site_root: PathBuf,
        shutdown: watch::Receiver<bool>,
        audit: AuditLog,
        auth: Auth,
    ) -> AppState {
        let leptos = LeptosOptions::builder()
            .output_name("lockscope")
            .site_root(site_root.to_string_lossy().as_ref())
            .site_pkg_dir("pkg")
            .build();
        let auth = Arc::new(auth);
        let sockets = Sockets::new(&Limits::default());
        let metrics = Metrics::for_fleets(&fleets).with_limits(auth.clone(), sockets.clone(), audit.clone());
        let metrics = Arc::new(metrics);
        AppState {
            fleets,
            leptos,
            shutdown,
            audit,
            auth,
            metrics,
            history: None,
            sockets,
        }
    }

    /// `/metrics` of this state's fleets, with the numbers of its limits.
    fn new_metrics(&self) -> Metrics {
        Metrics::for_fleets(&self.fleets).with_limits(self.auth.clone(), self.sockets.clone(), self.audit.clone())
    }

    /// The same state with these limits on websockets and on the audit
    /// log's tallies (the authentication's are [`Auth::with_limits`]).
    pub fn with_limits(self, limits: &Limits) -> AppState {
        self.sockets.set_limits(limits);
        self.audit.set_tally_sources(limits.audit_sources_per_minute);
        self
    }

    /// The same state counting into `metrics` (made for the same fleets) rather
    /// than its own.
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> AppState {
        self.metrics = metrics;
        self
    }

    /// The fleet a request names (`?fleet=`), or the first.
    fn fleet(&self, q: &FleetQuery) -> Result<&HubHandle, AppError> {
        self.fleets
            .get(q.fleet.as_deref())
            .ok_or_else(|| AppError::NoSuchFleet(self.fleets.unknown(q.fleet.as_deref().unwrap_or_default())))
    }
}

#[derive(Debug, Default, serde::Deserialize)]
pub struct FleetQuery {
    pub fleet: Option<String>,
}

/// Errors of the HTTP layer. Clients get a status and a short reason; details go
/// to the log.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    #[error("the fleet hub is not running")]
    HubUnavailable,
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    BadRequest(String),
    /// No such fleet: the message says which there are ([`Fleets::unknown`]).
    #[error("{0}")]
    NoSuchFleet(String),
    #[error("the audit log cannot be read now")]
    AuditUnavailable,
    /// Not signed in: go to this sign-in URL.
    #[error("sign in first")]
    SignIn(String),
}

impl IntoResponse for AppError {
    fn into_response(self) -> Response {
        if let AppError::SignIn(to) = &self {
            return axum::response::Redirect::to(to).into_response();
        }
        let status = match self {
            AppError::HubUnavailable => StatusCode::SERVICE_UNAVAILABLE,
            AppError::Forbidden(_) => StatusCode::FORBIDDEN,
            AppError::BadRequest(_) => StatusCode::BAD_REQUEST,
            AppError::NoSuchFleet(_) => StatusCode::NOT_FOUND,
            AppError::AuditUnavailable => StatusCode::SERVICE_UNAVAILABLE,
            AppError::SignIn(_) => StatusCode::UNAUTHORIZED,
        };
        tracing::warn!(%status, error = %self, "request failed");
        (status, self.to_string()).into_response()
    }
}

pub fn app(state: AppState) -> Router {
    // Leptos spawns rendering tasks through a global executor; point it at tokio
    // (an error only means it was already set).
    let _ = any_spawner::Executor::init_tokio();
    let site = PathBuf::from(state.leptos.site_root.as_ref());
    let routes = Router::new()
        .route("/", get(page))
        .route("/lock", get(lock_page))
        .route("/sessions", get(sessions_page))
        .route("/audit", get(audit_page))
        .route("/history", get(history_page::history_page))
        .route("/charts", get(charts_page::charts_page))
        .merge(crate::api::routes())
        .merge(crate::forms::routes())
        .merge(crate::metrics::routes())
        .route("/favicon.svg", get(favicon))
        .route("/ws", get(ws_upgrade))
        .route("/healthz", get(healthz))
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

/// One fleet's (`?fleet=`) view named by the URL (filter, sort, offset; see
/// [`ViewSpec::from_query`]), with every fleet's overview. The page holds one
/// window of rows, whatever the fleet's size. A view the URL gets wrong is
/// replaced by the default view, and the page says why.
async fn page(
    State(state): State<AppState>,
    caller: Caller,
    Query(q): Query<FleetQuery>,
    Query(pairs): Query<Vec<(String, String)>>,
    req: Request<Body>,
) -> Result<Response, AppError> {
    let id = signed_in(&caller, &req)?;
    let hub = state.fleet(&q)?;
    let (view, view_error) = match ViewSpec::from_query(pairs.iter().map(|(k, v)| (k.as_str(), v.as_str()))) {
        Ok(v) => (v, None),
        Err(e) => (ViewSpec::default(), Some(e)),
    };
    let (frame, status) = hub.render(view.clone()).await.map_err(|_| AppError::HubUnavailable)?;
    let page = Page {
        screen: Screen::Locks,
        server_time: now_ms(),
        fleet: hub.fleet().to_string(),
        status,
        view,
        frame: Some(frame),
        fleets: state.fleets.summaries(),
        view_error,
        ..Page::default()
    };
    Ok(render(&state, id, &caller, page, req).await)
}

#[derive(Debug, serde::Deserialize)]
struct LockQuery {
    fleet: Option<String>,
    name: Option<String>,
}

/// One lock in full (`/lock?fleet=…&name=…`), kept live by the page.
async fn lock_page(
    State(state): State<AppState>,
    caller: Caller,
    Query(q): Query<LockQuery>,
    req: Request<Body>,
) -> Result<Response, AppError> {
    let id = signed_in(&caller, &req)?;
    let hub = state.fleet(&FleetQuery { fleet: q.fleet.clone() })?;
    let name = q
        .name
        .filter(|n| !n.is_empty() && n.len() <= 512)
        .ok_or(AppError::BadRequest(
            "name the lock: /lock?fleet=FLEET&name=NAME (1 to 512 bytes)".into(),
        ))?;
    let detail = current(hub.watch_lock(&name).await)?;
    let page = Page {
        screen: Screen::Lock {
            detail: Box::new(detail),
        },
        ..watch_page(hub, &state)
    };
    Ok(render(&state, id, &caller, page, req).await)
}

/// The fleet's sessions (`/sessions?fleet=…`), kept live by the page.
async fn sessions_page(
    State(state): State<AppState>,
    caller: Caller,
    Query(q): Query<FleetQuery>,
    req: Request<Body>,
) -> Result<Response, AppError> {
    let id = signed_in(&caller, &req)?;
    let hub = state.fleet(&q)?;
    let sessions = current(hub.watch_sessions().await)?;
    let page = Page {
        screen: Screen::Sessions { sessions },
        ..watch_page(hub, &state)
    };
    Ok(render(&state, id, &caller, page, req).await)
}

/// The audit log (`/audit?fleet=&actor=&action=&outcome=&from=&to=&limit=`),
/// for admins; a scoped admin sees the fleets of their scope.
async fn audit_page(
    State(state): State<AppState>,
    caller: Caller,
    Query(pairs): Query<Vec<(String, String)>>,
    req: Request<Body>,
) -> Result<Response, AppError> {
    let id = signed_in(&caller, &req)?;
    crate::admin::may_read_audit(&id).map_err(AppError::Forbidden)?;
    let (query, error) = match AuditQuery::from_query(pairs.iter().map(|(k, v)| (k.as_str(), v.as_str()))) {
        Ok(q) => (q, None),
        Err(e) => (AuditQuery::default(), Some(e)),
    };
    let entries = crate::admin::audit_for(&state, &id, &query)
        .await
        .ok_or(AppError::AuditUnavailable)?;
    let hub = state.fleet(&FleetQuery::default())?;
    let page = Page {
        screen: Screen::Audit { entries, query, error },
        ..watch_page(hub, &state)
    };
    Ok(render(&state, id, &caller, page, req).await)
}

/// The identity a page is rendered for; without one (authentication is
/// configured and the browser has not signed in) the browser is sent to sign in.
fn signed_in(caller: &Caller, req: &Request<Body>) -> Result<Identity, AppError> {
    match &caller.who {
        Who::Known(id) => Ok(id.clone()),
        Who::Ambiguous(why) => Err(AppError::BadRequest(why.clone())),
        Who::Nobody(why) => {
            tracing::debug!(%why, "page without identity: to /signin");
            let next = req.uri().path_and_query().map_or("/", |p| p.as_str());
            Err(AppError::SignIn(format!("/signin?next={}", encode(next))))
        }
    }
}

/// Percent-encodes a query value ([`lockscope_model::url::query`]; a path segment is [`lockscope_model::url::segment`]).
pub fn encode(s: &str) -> String {
    lockscope_model::url::query(s)
}

/// The value a hub's watch channel holds now.
fn current<T: Clone + Default>(rx: Result<watch::Receiver<Option<T>>, HubStopped>) -> Result<T, AppError> {
    let rx = rx.map_err(|_| AppError::HubUnavailable)?;
    let value = rx.borrow().clone();
    Ok(value.unwrap_or_default())
}

/// What a detail or sessions page carries besides its own data.
fn watch_page(hub: &HubHandle, state: &AppState) -> Page {
    let summary = hub.summary();
    Page {
        server_time: now_ms(),
        fleet: hub.fleet().to_string(),
        status: summary.status,
        fleets: state.fleets.summaries(),
        ..Page::default()
    }
}

async fn favicon() -> Response {
    (
        [(header::CONTENT_TYPE, "image/svg+xml")],
        include_str!("../../public/favicon.svg"),
    )
        .into_response()
}

/// Renders `page` for `id` (the app reads it from context; the browser hydrates
/// from it), with the outcome of their last action when the URL names it
/// (`?audit=ID`, only their own).
pub async fn render(state: &AppState, id: Identity, caller: &Caller, mut page: Page, req: Request<Body>) -> Response {
    let (viewer, set_cookie) = state.auth.viewer(&id, &caller.headers);
    page.viewer = viewer;
    let notice = req
        .uri()
        .query()
        .and_then(|q| form_urlencoded::parse(q.as_bytes()).find(|(k, _)| k == "audit"))
        .and_then(|(_, v)| v.parse::<i64>().ok());
    if let Some(n) = notice {
        page.notice = state.audit.get(n).await.ok().flatten().filter(|e| e.actor == id.actor);
    }
    let options = state.leptos.clone();
    let render = leptos_axum::render_app_to_stream_with_context(
        move || provide_context(page.clone()),
        move || shell(options.clone()),
    );
    let mut response = render(req).await.into_response();
    if let Some(c) = set_cookie.and_then(|c| header::HeaderValue::from_str(&c).ok()) {
        response.headers_mut().append(header::SET_COOKIE, c);
    }
    response
}

/// Liveness for probes; the fleets' numbers only to those who may read them.
async fn healthz(State(state): State<AppState>, caller: Caller) -> Json<serde_json::Value> {
    match caller.who {
        Who::Known(_) => Json(serde_json::json!({ "status": "ok", "fleets": state.fleets.summaries() })),
        Who::Nobody(_) | Who::Ambiguous(_) => Json(serde_json::json!({ "status": "ok" })),
    }
}

/// `/ws`: the live feed ([`crate::ws`]). A socket past a limit of
/// `[limits]` (per identity, per address, in all) is accepted and closed at
/// once, `1008` or `1013`, with a reason naming the limit (a browser's script
/// can read that, not a refused upgrade's status); counted in `/metrics`.
async fn ws_upgrade(
    State(state): State<AppState>,
    caller: Caller,
    Query(q): Query<FleetQuery>,
    headers: HeaderMap,
    upgrade: WebSocketUpgrade,
) -> Result<Response, AppError> {
    // A page on another site must not read the lock table through the visitor's browser.
    crate::auth::same_origin(&headers).map_err(AppError::Forbidden)?;
    let actor = match caller.reader() {
        Ok(id) => id.actor.clone(),
        Err(r) => return Ok(r.into_response()),
    };
    let hub = state.fleet(&q)?.clone();
    // The place is taken before the upgrade, so a burst cannot overshoot.
    let slot = state.sockets.open(&actor, caller.client);
    if let Err(refused) = &slot {
        tracing::warn!(%actor, client = ?caller.client, reason = %refused.reason(), "websocket refused");
    }
    Ok(upgrade
        .max_message_size(crate::ws::MAX_MESSAGE_BYTES)
        .max_frame_size(crate::ws::MAX_MESSAGE_BYTES)
        // tungstenite's defaults hold 128 KiB each way per socket from the
        // start; ours grow with what is read, and every message is flushed.
        .read_buffer_size(crate::ws::READ_BUFFER_BYTES)
        .write_buffer_size(0)
        .on_upgrade(move |socket| subscriber(state, hub, socket, slot)))
}

async fn subscriber(state: AppState, hub: HubHandle, socket: WebSocket, slot: Result<Slot, Refused>) {
    let (sink, stream) = socket.split();
    let mut sink = Box::pin(sink.with(|out: WsOut| async move {
        Ok::<_, axum::Error>(match out {
            WsOut::Text(t) => Message::Text(t.as_ref().into()),
            WsOut::Close { code, reason } => Message::Close(Some(CloseFrame {
                code,
                reason: reason.into(),
            })),
        })
    }));
    let _slot = match slot {
        Ok(slot) => slot,
        Err(refused) => {
            let close = WsOut::Close {
                code: refused.code(),
                reason: refused.reason(),
            };
            let _ = sink.send(close).await;
            return;
        }
    };
    let stream = stream.filter_map(|m| async move {
        match m {
            Ok(Message::Text(t)) => Some(WsIn::Text(t.to_string())),
            Ok(Message::Binary(_)) => Some(WsIn::Binary),
            Err(e) if too_big(&e) => Some(WsIn::TooBig),
            Ok(Message::Close(_)) | Err(_) => Some(WsIn::Close),
            Ok(Message::Ping(_) | Message::Pong(_)) => None,
        }
    });
    serve_subscriber(hub, state.fleets, sink, Box::pin(stream), state.shutdown).await;
}

/// Whether reading stopped at a message or frame past
/// [`crate::ws::MAX_MESSAGE_BYTES`].
fn too_big(e: &axum::Error) -> bool {
    use tokio_tungstenite::tungstenite::Error;
    let inner = std::error::Error::source(e).and_then(|s| s.downcast_ref::<Error>());
    matches!(inner, Some(Error::Capacity(_)))
}

#[cfg(test)]
mod tests;
