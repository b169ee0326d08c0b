//! The server-rendered pages: `/` the lock table, `/lock?name=` one lock,
//! `/sessions`, `/audit`, `/history` ([`history`]) and `/charts` ([`charts`]);
//! each is rendered once on the server ([`render`]) and hydrated by the browser.
//! With authentication configured, a browser without an identity is sent to
//! `/signin` ([`signed_in`]).

use axum::body::Body;
use axum::extract::{Query, Request, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use leptos::prelude::provide_context;
use lockscope_app::shell;
use lockscope_model::admin::AuditQuery;
use lockscope_model::view::ViewSpec;
use lockscope_model::{Page, Screen};
use lockscope_store::now_ms;
use tokio::sync::watch;

use super::caller::Caller;
use super::error::AppError;
use super::state::{AppState, FleetQuery};
use crate::auth::{Identity, Who};
use crate::live::hub::{HubHandle, HubStopped};

pub(super) mod charts;
pub(super) mod history;

/// One fleet's (`?fleet=`) view named by the URL (filter, sort, offset; see
/// [`ViewSpec::from_query`]), with every fleet's overview. The page holds one
/// window of rows, whatever the fleet's size. A view the URL gets wrong is
/// replaced by the default view, and the page says why.
pub(super) async fn page(
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
pub(super) struct LockQuery {
    fleet: Option<String>,
    name: Option<String>,
}

/// One lock in full (`/lock?fleet=…&name=…`), kept live by the page.
pub(super) async fn lock_page(
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
pub(super) async fn sessions_page(
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
pub(super) async fn audit_page(
    State(state): State<AppState>,
    caller: Caller,
    Query(pairs): Query<Vec<(String, String)>>,
    req: Request<Body>,
) -> Result<Response, AppError> {
    let id = signed_in(&caller, &req)?;
    crate::act::admin::may_read_audit(&id).map_err(AppError::Forbidden)?;
    let (query, error) = match AuditQuery::from_query(pairs.iter().map(|(k, v)| (k.as_str(), v.as_str()))) {
        Ok(q) => (q, None),
        Err(e) => (AuditQuery::default(), Some(e)),
    };
    let entries = crate::act::admin::audit_for(&state.audit, &id, &query)
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
