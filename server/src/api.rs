//! The JSON API under `/api/v1` (documented in `docs/api.md`): fleets, one
//! lock, sessions, the admin actions, the audit log with CSV and NDJSON
//! export, the lock history (`history`: events, exports, time travel) and the
//! contention charts (`charts`). Scripts and `lockscope admin` authenticate with
//! `Authorization: Bearer`; a browser's cookie works too, with the CSRF token in
//! `X-CSRF-Token` on every state-changing request.

use axum::body::Bytes;
use axum::extract::{FromRequestParts, Path, Query, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use lockscope_model::admin::{Action, AuditQuery};
use lockscope_store::now_ms;
use serde::Deserialize;

use crate::admin::{self, Attempt};
use crate::audit::{to_csv, to_ndjson};
use crate::auth::{check_csrf, Identity, TokenRefused, Via, Who, CSRF_HEADER};
use crate::http::AppState;

pub(crate) mod charts;
mod history;

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
        .route("/api/v1/fleets/{fleet}/sessions", get(sessions))
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

/// Who sent a request: resolved once per request from its headers and peer.
pub struct Caller {
    pub who: Who,
    pub headers: HeaderMap,
    /// The peer's address (`None`: not over a socket, as in tests).
    pub peer: Option<std::net::IpAddr>,
    /// The client's address, as the limits count it: the peer's, or behind a
    /// proxy of `[limits] proxies` the client it forwarded ([`crate::auth::Auth::client`]).
    pub client: Option<std::net::IpAddr>,
    /// Set when the request carried a `Bearer` token that was not accepted
    /// and its source has used up its failed checks for the minute
    /// (`[limits] auth_failures_per_minute`): answered `429` with
    /// `Retry-After` (these seconds) rather than `401`; or (with `busy`) when
    /// it could not be checked for the checks already waiting.
    pub retry_after: Option<u64>,
    /// The token could not be checked: `[limits] auth_verify_queue` checks
    /// were already waiting for a password hash (`503` with `Retry-After`).
    pub busy: bool,
}

impl FromRequestParts<AppState> for Caller {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Caller, Self::Rejection> {
        let peer = parts
            .extensions
            .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
            .map(|c| c.0.ip());
        let (mut who, refused) = state.auth.identify_why(&parts.headers, peer, now_ms()).await;
        let client = state.auth.client(&parts.headers, peer);
        // Only a refused `Bearer` token counts here: another scheme (a
        // proxy's `Basic`) is ignored, and its request is simply without
        // credentials (`401`).
        let busy = matches!(refused, Some(TokenRefused::Busy { .. }));
        let retry_after = match &refused {
            Some(TokenRefused::Busy { retry_after, .. }) => Some(*retry_after),
            Some(_) => state.auth.retry_after(client).map(crate::auth::limit::secs),
            None => None,
        };
        if let (Some(secs), false) = (retry_after, busy) {
            state.auth.count_rate_limited();
            let why = TokenRefused::TooMany {
                per_minute: state.auth.failures_per_minute(),
                retry_after: secs,
            };
            who = Who::Nobody(why.to_string());
        }
        Ok(Caller {
            who,
            headers: parts.headers.clone(),
            peer,
            client,
            retry_after,
            busy,
        })
    }
}

impl Caller {
    /// The identity of a read request, or the 401 (400: ambiguous
    /// credentials) that refuses it.
    pub fn reader(&self) -> Result<&Identity, Unauthorized> {
        self.who.identity().map_err(|(status, why)| Unauthorized {
            status: self.limited(status),
            why,
            retry_after: self.retry_after,
        })
    }

    /// `status`, or `429` when this is a `401` of a source over its failed
    /// checks ([`Caller::retry_after`]), or `503` when its token could not be
    /// checked ([`Caller::busy`]).
    fn limited(&self, status: StatusCode) -> StatusCode {
        match self.retry_after {
            Some(_) if status == StatusCode::UNAUTHORIZED && self.busy => StatusCode::SERVICE_UNAVAILABLE,
            Some(_) if status == StatusCode::UNAUTHORIZED => StatusCode::TOO_MANY_REQUESTS,
            _ => status,
        }
    }

    /// The CSRF check of a state-changing API request. Bearer tokens need none;
    /// any request a browser sent (it names an origin or carries cookies) must
    /// carry the page's token in `X-CSRF-Token`; a script on loopback without
    /// authentication sends neither and needs none.
    fn csrf(&self) -> Result<(), String> {
        let Who::Known(id) = &self.who else { return Ok(()) };
        let from_browser = matches!(id.via, Via::Session { .. })
            || [header::ORIGIN, header::COOKIE]
                .iter()
                .any(|h| self.headers.contains_key(h))
            || self.headers.contains_key("sec-fetch-site");
        if !from_browser {
            return Ok(());
        }
        let sent = self.headers.get(CSRF_HEADER).and_then(|v| v.to_str().ok());
        check_csrf(id, &self.headers, sent)
    }
}

/// A request without an identity, and why: answered 401, or 400 when its
/// credentials are ambiguous ([`Who::identity`]), or 429 with `Retry-After`
/// when its source failed too often ([`Caller::retry_after`]), or 503 with
/// `Retry-After` when its token could not be checked ([`Caller::busy`]).
pub struct Unauthorized {
    pub status: StatusCode,
    pub why: String,
    pub retry_after: Option<u64>,
}

impl IntoResponse for Unauthorized {
    fn into_response(self) -> Response {
        retry_after(error(self.status, &self.why), self.status, self.retry_after)
    }
}

/// `response` with `Retry-After: secs` when `status` is `429` or `503`.
fn retry_after(mut response: Response, status: StatusCode, secs: Option<u64>) -> Response {
    let later = [StatusCode::TOO_MANY_REQUESTS, StatusCode::SERVICE_UNAVAILABLE].contains(&status);
    if let (true, Some(secs)) = (later, secs) {
        response.headers_mut().insert(header::RETRY_AFTER, secs.into());
    }
    response
}

/// `{"error": why}` with `status`.
pub fn error(status: StatusCode, why: &str) -> Response {
    (status, Json(serde_json::json!({ "error": why }))).into_response()
}

async fn fleets(State(state): State<AppState>, caller: Caller) -> Response {
    if let Err(r) = caller.reader() {
        return r.into_response();
    }
    Json(state.fleets.summaries()).into_response()
}

async fn lock(State(state): State<AppState>, caller: Caller, Path((fleet, name)): Path<(String, String)>) -> Response {
    if let Err(r) = caller.reader() {
        return r.into_response();
    }
    let Some(hub) = state.fleets.get(Some(&fleet)) else {
        return no_fleet(&state, &fleet);
    };
    match hub.watch_lock(&name).await {
        Ok(rx) => match rx.borrow().clone() {
            Some(d) if d.entry.is_some() => Json(d).into_response(),
            _ => error(StatusCode::NOT_FOUND, &format!("{name:?} is not held")),
        },
        Err(_) => error(StatusCode::SERVICE_UNAVAILABLE, "the fleet hub is not running"),
    }
}

async fn sessions(State(state): State<AppState>, caller: Caller, Path(fleet): Path<String>) -> Response {
    if let Err(r) = caller.reader() {
        return r.into_response();
    }
    let Some(hub) = state.fleets.get(Some(&fleet)) else {
        return no_fleet(&state, &fleet);
    };
    match hub.watch_sessions().await {
        Ok(rx) => Json(rx.borrow().clone().unwrap_or_default()).into_response(),
        Err(_) => error(StatusCode::SERVICE_UNAVAILABLE, "the fleet hub is not running"),
    }
}

fn no_fleet(state: &AppState, fleet: &str) -> Response {
    error(StatusCode::NOT_FOUND, &state.fleets.unknown(fleet))
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
    let answer = admin::attempt(state, &caller.who, caller.csrf(), attempt).await;
    let status = caller.limited(answer.status);
    retry_after(
        (status, Json(answer.json())).into_response(),
        status,
        caller.retry_after,
    )
}

/// `GET /api/v1/audit`: JSON (an array), CSV or NDJSON by `?format=` or
/// `Accept`. Admins only; a scoped admin sees the fleets of their scope.
async fn audit(State(state): State<AppState>, caller: Caller, Query(pairs): Query<Vec<(String, String)>>) -> Response {
    let id = match caller.reader() {
        Ok(id) => id,
        Err(r) => return r.into_response(),
    };
    if let Err(why) = admin::may_read_audit(id) {
        return error(StatusCode::FORBIDDEN, &why);
    }
    let query = match AuditQuery::from_query(pairs.iter().map(|(k, v)| (k.as_str(), v.as_str()))) {
        Ok(q) => q,
        Err(why) => return error(StatusCode::BAD_REQUEST, &why),
    };
    let format = format(&pairs, &caller.headers);
    let Some(entries) = admin::audit_for(&state, id, &query).await else {
        return error(StatusCode::SERVICE_UNAVAILABLE, "the audit log cannot be read now");
    };
    match format {
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
        other => error(
            StatusCode::BAD_REQUEST,
            &format!("format={other:?}: use json, csv or ndjson"),
        ),
    }
}
