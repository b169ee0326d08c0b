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
use axum::Json;
use lockscope_model::admin::{Action, AuditEntry, AuditQuery};
use lockscope_model::detail::LockDetail;
use lockscope_model::FleetSummary;
use serde::Deserialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::caller::Caller;
use super::error::{retry_after, status_of, AppError, ErrorBody};
use super::state::AppState;
use crate::act::admin::{self, Attempt};
use crate::live::hub::{HubHandle, HubStopped};
use crate::remember::audit::{to_csv, to_ndjson};

mod charts;
mod history;
mod list;
pub mod openapi;

use openapi::{ActionAnswers, LockPath, NotSignedIn, SessionPath};

/// Largest request body the API (and the forms) reads. Past it axum answers
/// `413` before the handler runs, not audited (docs/api.md, "Errors"). Fixed:
/// the largest body any request needs (an action: a 512-byte name and a
/// 2000-byte reason) fits several times over.
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

/// The API's routes, each with its OpenAPI description: `routes!` adds both
/// from the handler's `#[utoipa::path]`, so a route cannot be served without
/// being documented, nor documented without being served. Add routes here
/// with `routes!`, never `.route(…)`; [`openapi::served`] makes the router.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(fleets))
        .routes(routes!(lock))
        .routes(routes!(release))
        .routes(routes!(cancel))
        .routes(routes!(list::locks))
        .routes(routes!(list::sessions))
        .routes(routes!(blacklist, unblacklist))
        .routes(routes!(audit))
        .routes(routes!(history::events))
        .routes(routes!(history::table))
        .routes(routes!(charts::charts))
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY_BYTES))
}

#[utoipa::path(get, path = "/api/v1/fleets", tag = "fleets",
    summary = "Every fleet this server watches, in configuration order",
    description = "Least role: viewer. Each fleet's source (credentials removed), store status, \
whether it takes admin actions, its unlocker and history state, and its lock counts.",
    responses(
        (status = 200, description = "The fleets", body = Vec<FleetSummary>),
        (status = 400, description = "Ambiguous credentials (two Authorization headers)", body = ErrorBody),
        NotSignedIn,
        (status = 503, description = "A token could not be checked now (Retry-After)", body = ErrorBody),
    ))]
async fn fleets(State(state): State<AppState>, caller: Caller) -> Result<Json<Vec<FleetSummary>>, AppError> {
    caller.reader()?;
    Ok(Json(state.fleets.summaries()))
}

#[utoipa::path(get, path = "/api/v1/fleets/{fleet}/locks/{name}", tag = "locks",
    summary = "One held lock in full",
    description = "Least role: viewer. The lock's entry, holder, session, blacklist entry and \
waiters (LockDetail).",
    params(LockPath),
    responses(
        (status = 200, description = "The lock", body = LockDetail),
        (status = 400, description = "Ambiguous credentials", body = ErrorBody),
        NotSignedIn,
        (status = 404, description = "No such fleet, or the lock is not held", body = ErrorBody),
        (status = 503, description = "The fleet's hub is not running", body = ErrorBody),
    ))]
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

/// A release: the acquisition the caller saw, and why.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct ReleaseBody {
    /// `entry.fence` of the lock as `GET …/locks/{name}` showed it.
    fence: i64,
    /// Required, and `null` only for a lock that shows no owner (a malformed
    /// value, a foreign schema's row): the fence and owner name one acquisition.
    #[serde(deserialize_with = "present")]
    #[schema(required = true)]
    owner: Option<String>,
    /// Why, for the audit log: 1 to 2000 bytes after trimming.
    reason: String,
}

/// A field that must be sent, possibly as `null` (serde takes a missing
/// `Option` for `None` unless told otherwise; without `default` it is an error).
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Option::<String>::deserialize(d)
}

/// A session action's reason.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct ReasonBody {
    /// Why, for the audit log: 1 to 2000 bytes after trimming.
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

#[utoipa::path(post, path = "/api/v1/fleets/{fleet}/locks/{name}/release", tag = "actions",
    summary = "Force-release one acquisition of a lock",
    description = "Least role: operator (and the lock in the caller's scope). Deletes the lock \
only if it is still the acquisition named by fence and owner (compare-and-set); else 409 with \
`outcome: changed` and `current`. Audited, allowed or refused. A browser's request needs \
X-CSRF-Token.",
    params(LockPath),
    request_body = ReleaseBody,
    responses(ActionAnswers))]
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
#[derive(Deserialize, ToSchema)]
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
#[utoipa::path(post, path = "/api/v1/fleets/{fleet}/locks/{name}/cancel", tag = "actions",
    summary = "Cancel one waiter's wait for a lock",
    description = "Least role: admin (and the lock in the caller's scope). PostgreSQL advisory \
locks: cancels the waiting backend named by pid and backend start (`pg_cancel_backend`). Audited. \
A browser's request needs X-CSRF-Token.",
    params(LockPath),
    request_body = CancelBody,
    responses(ActionAnswers))]
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

#[utoipa::path(post, path = "/api/v1/fleets/{fleet}/sessions/{session}/blacklist", tag = "actions",
    summary = "Blacklist a session",
    description = "Least role: operator (and the whole fleet in the caller's scope). Writes a \
blacklist entry if the session has none (else 409 changed): its acquires, extensions and \
heartbeats fail from its next operation. Audited. A browser's request needs X-CSRF-Token.",
    params(SessionPath),
    request_body = ReasonBody,
    responses(ActionAnswers))]
async fn blacklist(
    State(state): State<AppState>,
    caller: Caller,
    Path((fleet, session)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    session_action(state, caller, Action::Blacklist, fleet, session, body).await
}

#[utoipa::path(delete, path = "/api/v1/fleets/{fleet}/sessions/{session}/blacklist", tag = "actions",
    summary = "Lift a session's blacklist entry",
    description = "Least role: admin (and the whole fleet in the caller's scope); 409 changed \
when the session is not blacklisted. Audited. A browser's request needs X-CSRF-Token.",
    params(SessionPath),
    request_body = ReasonBody,
    responses(ActionAnswers))]
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
#[utoipa::path(get, path = "/api/v1/audit", tag = "audit",
    summary = "The audit log, newest first",
    description = "Least role: admin (a scoped admin sees its fleets' entries). JSON, CSV or \
NDJSON by `format` or `Accept`. Empty values mean any; instants are unix ms, RFC 3339, \
`2026-11-23T04:20[:13]` (UTC) or a date.",
    params(
        ("fleet" = Option<String>, Query, description = "Exactly this fleet"),
        ("actor" = Option<String>, Query, description = "Exactly this actor"),
        ("action" = Option<Action>, Query, description = "This action"),
        ("outcome" = Option<String>, Query, description = "`done`, `changed` or `refused`"),
        ("from" = Option<String>, Query, description = "At or after this instant"),
        ("to" = Option<String>, Query, description = "Before this instant"),
        ("limit" = Option<u32>, Query, description = "At most this many: default 1000, taken into 1…10000"),
        ("format" = Option<String>, Query, description = "`json` (default), `csv` or `ndjson`"),
    ),
    responses(
        (status = 200, description = "The entries", content(
            (Vec<AuditEntry> = "application/json"),
            (String = "text/csv"),
            (String = "application/x-ndjson"),
        )),
        (status = 400, description = "A bad filter or format; ambiguous credentials", body = ErrorBody),
        NotSignedIn,
        (status = 403, description = "Not an admin", body = ErrorBody),
        (status = 503, description = "The audit log cannot be read now", body = ErrorBody),
    ))]
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
