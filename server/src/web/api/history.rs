//! The lock history over HTTP: `GET /api/v1/fleets/{fleet}/history` (events
//! as JSON, or an export streamed as CSV or NDJSON) and
//! `GET /api/v1/fleets/{fleet}/table?at=…` (the lock table at an instant).

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures::StreamExt;
use lockscope_model::history::{parse_when, HistoryQuery, MAX_TABLE_LOCKS};
use lockscope_store::now_ms;

use super::{error, format, no_fleet, Caller};
use crate::remember::history::{stream_export, Format, History, HistoryError, Refused};
use crate::web::state::AppState;

/// The history, or why there is none to read (the answer to send).
#[allow(clippy::result_large_err)] // answered at once, never propagated further
fn history<'a>(state: &'a AppState, caller: &Caller, fleet: &str) -> Result<&'a History, Response> {
    caller.reader().map_err(IntoResponse::into_response)?;
    if state.fleets.get(Some(fleet)).is_none() {
        return Err(no_fleet(state, fleet));
    }
    state
        .history
        .as_ref()
        .ok_or_else(|| error(StatusCode::NOT_FOUND, "this server keeps no history (--history off)"))
}

pub(super) async fn events(
    State(state): State<AppState>,
    caller: Caller,
    Path(fleet): Path<String>,
    Query(pairs): Query<Vec<(String, String)>>,
) -> Response {
    let history = match history(&state, &caller, &fleet) {
        Ok(h) => h,
        Err(r) => return r,
    };
    let query = match HistoryQuery::from_query(&fleet, pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())), now_ms()) {
        Ok(q) => q,
        Err(why) => return error(StatusCode::BAD_REQUEST, &why),
    };
    let fmt = match format(&pairs, &caller.headers) {
        "json" => None,
        f => match Format::parse(f) {
            Some(f) => Some(f),
            None => {
                return error(
                    StatusCode::BAD_REQUEST,
                    &format!("format={f:?}: use json, csv or ndjson"),
                )
            }
        },
    };
    match fmt {
        // At most MAX_ANSWER_BYTES of events: past it a 400 saying how many
        // fit (an array cut short would look complete).
        None => match history.query(&query).await {
            Ok(events) => Json(events).into_response(),
            Err(e @ HistoryError::TooLarge { .. }) => error(StatusCode::BAD_REQUEST, &e.to_string()),
            Err(e) => unavailable(&e),
        },
        Some(f) => {
            let ext = if f == Format::Csv { "csv" } else { "ndjson" };
            let disposition = format!("attachment; filename=\"lockscope-history-{fleet}.{ext}\"");
            // At most `[history_exports] per_identity` per identity and
            // `total` in all; the next is refused with 429 and Retry-After.
            let actor = caller.reader().map(|id| id.actor.clone()).unwrap_or_default();
            let permit = match history.admit_export(&actor) {
                Ok(p) => p,
                Err(refused) => return too_many(&refused),
            };
            // Streamed a page at a time; an error mid-way, or a reader idle
            // past the timeout, cuts the body (the client sees an incomplete
            // transfer, not a short file).
            let body =
                stream_export(history, &query, f, Some(permit)).map(|chunk| chunk.map_err(std::io::Error::other));
            (
                [
                    (header::CONTENT_TYPE, f.content_type().to_string()),
                    (header::CONTENT_DISPOSITION, disposition),
                ],
                Body::from_stream(body),
            )
                .into_response()
        }
    }
}

pub(super) async fn table(
    State(state): State<AppState>,
    caller: Caller,
    Path(fleet): Path<String>,
    Query(pairs): Query<Vec<(String, String)>>,
) -> Response {
    let history = match history(&state, &caller, &fleet) {
        Ok(h) => h,
        Err(r) => return r,
    };
    let Some((_, at)) = pairs.iter().find(|(k, _)| k == "at") else {
        return error(StatusCode::BAD_REQUEST, "give the instant: ?at=2026-11-23T02:17:00Z");
    };
    let at = match parse_when(at, now_ms()) {
        Ok(at) => at,
        Err(why) => return error(StatusCode::BAD_REQUEST, &format!("at={at:?}: {why}")),
    };
    match history.table_at(&fleet, at).await {
        Ok(t) => Json(t.capped(MAX_TABLE_LOCKS)).into_response(),
        Err(HistoryError::OutOfRange(why)) => error(StatusCode::NOT_FOUND, &why),
        Err(e) => unavailable(&e),
    }
}

/// `429 Too Many Requests` with the reason and `Retry-After`.
fn too_many(refused: &Refused) -> Response {
    tracing::info!(reason = %refused.reason, "history export refused");
    let mut response = error(StatusCode::TOO_MANY_REQUESTS, &refused.reason);
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, refused.retry_after.as_secs().max(1).into());
    response
}

fn unavailable(e: &HistoryError) -> Response {
    tracing::warn!(error = %e, "history read failed");
    error(StatusCode::SERVICE_UNAVAILABLE, &e.to_string())
}
