//! The JSON API under `/api/v1` (documented in `docs/api.md`): fleets, the
//! lists of locks and sessions paged by cursor (`list`), one lock, the admin actions, the audit log with CSV and NDJSON
//! export, the lock history (`history`: events, exports, time travel) and the
//! contention charts (`charts`). Scripts and `lockscope admin` authenticate with
//! `Authorization: Bearer`; a browser's cookie works too, with the CSRF token in
//! `X-CSRF-Token` on every state-changing request.

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use lockscope_model::admin::{Action, AuditQuery};
use lockscope_model::detail::LockDetail;
use lockscope_model::FleetSummary;
use serde::Deserialize;

use super::caller::Caller;
use super::error::{retry_after, status_of, AppError};
use super::state::AppState;
use crate::act::admin::{self, Attempt};
use crate::live::hub::{HubHandle, HubStopped};
use crate::remember::audit::{to_csv, to_ndjson};

mod charts;
mod history;
mod list;

/// Largest request body the API reads.
pub const MAX_BODY_BYTES: usize = 16 * 1024;

/// The answer's format: `?format=`, else what `Accept` asks for, else JSON.
fn format<'a>(pairs: &'a [(String, String)], headers: &HeaderMap) -> &'a str {
    let accept = headers.get(header::ACCEPT).and_then(|a| a.to_str().ok()).unwrap_or("");
    match pairs.iter().find(|(k, _)| k == "format") {
        Some((_, f)) => f.as_str(),
        None if accept.contains("text/csv") => "csv",
        None if accept.contains("application/x-ndjson") => "ndjson",
        None => "json",
    }
}

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/v1/fleets", get(fleets))
        .route("/api/v1/fleets/{fleet}/locks/{name}", get(lock))
        .route("/api/v1/fleets/{fleet}/locks/{name}/release", post(release))
        .route("/api/v1/fleets/{fleet}/locks/{name}/cancel", post(cancel))
        .route("/api/v1/fleets/{fleet}/locks", get(list::locks))
        .route("/api/v1/fleets/{fleet}/sessions", get(list::sessions))
        .route(
            "/api/v1/fleets/{fleet}/sessions/{session}/blacklist",
            post(blacklist).delete(unblacklist),
        )
        .route("/api/v1/audit", get(audit))
        .route("/api/v1/fleets/{fleet}/history", get(history::events))
        .route("/api/v1/fleets/{fleet}/table", get(history::table))
        .route("/api/v1/fleets/{fleet}/charts", get(charts::charts))
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY_BYTES))
}

async fn fleets(State(state): State<AppState>, caller: Caller) -> Result<Json<Vec<FleetSummary>>, AppError> {
    caller.reader()?;
    Ok(Json(state.fleets.summaries()))
}

async fn lock(
    State(state): State<AppState>,
    caller: Caller,
    Path((fleet, name)): Path<(String, String)>,
) -> Result<Json<LockDetail>, AppError> {
    caller.reader()?;
    let rx = hub(&state, &fleet)?.watch_lock(&name).await.map_err(hub_stopped)?;
    let detail = rx.borrow().clone().filter(|d| d.entry.is_some());
    detail
        .map(Json)
        .ok_or_else(|| AppError::api(StatusCode::NOT_FOUND, format!("{name:?} is not held")))
}

/// The fleet an API path names, or its `404` (which says the fleets there are).
fn hub<'a>(state: &'a AppState, fleet: &str) -> Result<&'a HubHandle, AppError> {
    state
        .fleets
        .get(Some(fleet))
        .ok_or_else(|| AppError::api(StatusCode::NOT_FOUND, state.fleets.unknown(fleet)))
}

/// The API's answer when a fleet's hub has stopped.
fn hub_stopped(_: HubStopped) -> AppError {
    AppError::api(StatusCode::SERVICE_UNAVAILABLE, "the fleet hub is not running")
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReleaseBody {
    fence: i64,
    /// Required, and `null` only for a lock that shows no owner (a malformed
    /// value, a foreign schema's row): the fence and owner name one acquisition.
    #[serde(deserialize_with = "present")]
    owner: Option<String>,
    reason: String,
}

/// A field that must be sent, possibly as `null` (serde takes a missing
/// `Option` for `None` unless told otherwise; without `default` it is an error).
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Option::<String>::deserialize(d)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReasonBody {
    reason: String,
}

/// A JSON body, or why it is not one.
fn parse<T: serde::de::DeserializeOwned>(headers: &HeaderMap, body: &Bytes) -> Result<T, String> {
    let json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|c| c.to_str().ok())
        .is_some_and(|c| c.split(';').next().is_some_and(|m| m.trim() == "application/json"));
    if !json {
        return Err("send the body as Content-Type: application/json".into());
    }
    serde_json::from_slice(body).map_err(|e| format!("the body is not what this call takes: {e}"))
}

async fn release(
    State(state): State<AppState>,
    caller: Caller,
    Path((fleet, name)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    let parsed = parse::<ReleaseBody>(&caller.headers, &body);
    let (fence, owner, reason) = match &parsed {
        Ok(b) => (Some(b.fence), Some(b.owner.clone()), b.reason.clone()),
        Err(_) => (None, None, String::new()),
    };
    let attempt = Attempt {
        fence,
        owner,
        ..attempt(Action::Release, fleet, name, reason, parsed.err())
    };
    act(&state, &caller, attempt).await
}

/// A waiter to cancel: the backend the caller saw (pid and backend start).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CancelBody {
    /// The waiting backend's pid, as the lock's page or API showed it.
    pid: i32,
    /// Its backend start (unix µs), as shown: with the pid, one backend.
    backend_start_us: i64,
    /// Why, for the audit log: 1 to 2000 bytes after trimming.
    reason: String,
}

/// `POST …/locks/{name}/cancel`: cancels one waiter's wait (docs/api.md).
async fn cancel(
    State(state): State<AppState>,
    caller: Caller,
    Path((fleet, name)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    let parsed = parse::<CancelBody>(&caller.headers, &body);
    let (waiter, reason) = match &parsed {
        Ok(b) => (Some(waiter_id(b.pid, b.backend_start_us)), b.reason.clone()),
        Err(_) => (None, String::new()),
    };
    let attempt = Attempt {
        waiter,
        ..attempt(Action::Cancel, fleet, name, reason, parsed.err())
    };
    act(&state, &caller, attempt).await
}

/// The id a waiting backend is shown as (`PID@BACKEND_START_US`), from the
/// pid and backend start the caller saw.
pub(crate) fn waiter_id(pid: i32, backend_start_us: i64) -> String {
    lockscope_store::pg_advisory::session_of(pid, backend_start_us)
}

async fn blacklist(
    State(state): State<AppState>,
    caller: Caller,
    Path((fleet, session)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    session_action(state, caller, Action::Blacklist, fleet, session, body).await
}

async fn unblacklist(
    State(state): State<AppState>,
    caller: Caller,
    Path((fleet, session)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    session_action(state, caller, Action::Unblacklist, fleet, session, body).await
}

async fn session_action(
    state: AppState,
    caller: Caller,
    action: Action,
    fleet: String,
    session: String,
    body: Bytes,
) -> Response {
    let parsed = parse::<ReasonBody>(&caller.headers, &body);
    let reason = parsed.as_ref().map(|b| b.reason.clone()).unwrap_or_default();
    act(&state, &caller, attempt(action, fleet, session, reason, parsed.err())).await
}

/// An API attempt on `target`, without a fence or owner.
fn attempt(action: Action, fleet: String, target: String, reason: String, invalid: Option<String>) -> Attempt {
    Attempt {
        action,
        fleet,
        target,
        fence: None,
        owner: None,
        waiter: None,
        revision: None,
        reason,
        via: "api",
        invalid,
        source: None,
    }
}

async fn act(state: &AppState, caller: &Caller, attempt: Attempt) -> Response {
    let attempt = Attempt {
        source: caller.client,
        ..attempt
    };
    let answer = admin::attempt(&state.door(), &caller.who, caller.csrf(), attempt).await;
    let status = caller.limited(status_of(answer.verdict));
    retry_after(
        (status, Json(answer.json())).into_response(),
        status,
        caller.retry_after,
    )
}

/// `GET /api/v1/audit`: JSON (an array), CSV or NDJSON by `?format=` or
/// `Accept`. Admins only; a scoped admin sees the fleets of their scope.
async fn audit(
    State(state): State<AppState>,
    caller: Caller,
    Query(pairs): Query<Vec<(String, String)>>,
) -> Result<Response, AppError> {
    let id = caller.reader()?;
    admin::may_read_audit(id).map_err(|why| AppError::api(StatusCode::FORBIDDEN, why))?;
    let query = AuditQuery::from_query(pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .map_err(|why| AppError::api(StatusCode::BAD_REQUEST, why))?;
    let format = format(&pairs, &caller.headers);
    let entries = admin::audit_for(&state.audit, id, &query)
        .await
        .ok_or_else(|| AppError::api(StatusCode::SERVICE_UNAVAILABLE, "the audit log cannot be read now"))?;
    Ok(match format {
        "json" => Json(entries).into_response(),
        "csv" => (
            [
                (header::CONTENT_TYPE, "text/csv; charset=utf-8"),
                (
                    header::CONTENT_DISPOSITION,
                    "attachment; filename=\"lockscope-audit.csv\"",
                ),
            ],
            to_csv(&entries),
        )
            .into_response(),
        "ndjson" => (
            [
                (header::CONTENT_TYPE, "application/x-ndjson"),
                (
                    header::CONTENT_DISPOSITION,
                    "attachment; filename=\"lockscope-audit.ndjson\"",
                ),
            ],
            to_ndjson(&entries),
        )
            .into_response(),
        other => {
            let why = format!("format={other:?}: use json, csv or ndjson");
            return Err(AppError::api(StatusCode::BAD_REQUEST, why));
        }
    })
}
