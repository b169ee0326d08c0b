//! The lock history over HTTP: `GET /api/v1/fleets/{fleet}/history` (events
//! as JSON, or an export streamed as CSV or NDJSON) and
//! `GET /api/v1/fleets/{fleet}/table?at=…` (the lock table at an instant).

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures::StreamExt;
use lockscope_model::history::{parse_when, HistoryEvent, HistoryQuery, TableAt, MAX_TABLE_LOCKS};
use lockscope_store::now_ms;

use super::openapi::{FleetPath, NotSignedIn};
use super::{format, hub, Caller};
use crate::remember::history::{stream_export, Format, History, HistoryError, Refused};
use crate::web::error::{AppError, ErrorBody};
use crate::web::state::AppState;

/// The history, or why there is none to read.
fn history<'a>(state: &'a AppState, caller: &Caller, fleet: &str) -> Result<&'a History, AppError> {
    caller.reader()?;
    hub(state, fleet)?;
    state
        .history
        .as_ref()
        .ok_or_else(|| AppError::api(StatusCode::NOT_FOUND, "this server keeps no history (--history off)"))
}

#[utoipa::path(get, path = "/api/v1/fleets/{fleet}/history", tag = "history",
    summary = "The fleet's lock history, oldest first",
    description = "Least role: viewer. Events as JSON (at most 16 MiB of them: past it a 400 \
saying how many fit), or an export streamed as CSV or NDJSON (`format` or `Accept`), limited per \
identity and per server (`[history_exports]`: 429 with Retry-After). Instants as for the audit \
log, plus `now`, `now-15m`, `-15m`, `-1h30m`, `-2d`.",
    params(FleetPath,
        ("from" = Option<String>, Query, description = "At or after this instant"),
        ("to" = Option<String>, Query, description = "At or before this instant"),
        ("lock" = Option<String>, Query, description = "Exactly this lock, or names starting with the text before a final `*`"),
        ("session" = Option<String>, Query, description = "Exactly this session"),
        ("service" = Option<String>, Query, description = "Exactly this service"),
        ("actor" = Option<String>, Query, description = "Exactly this actor"),
        ("kind" = Option<String>, Query, description = "One or more event kinds, comma-separated"),
        ("limit" = Option<u32>, Query, description = "At most this many: JSON default 500, taken into 1…10000; an export has none unless given"),
        ("format" = Option<String>, Query, description = "`json` (default), `csv` or `ndjson`"),
    ),
    responses(
        (status = 200, description = "The events, or the export's stream", content(
            (Vec<HistoryEvent> = "application/json"),
            (String = "text/csv"),
            (String = "application/x-ndjson"),
        )),
        (status = 400, description = "A bad filter, time or format; an answer over 16 MiB; ambiguous credentials", body = ErrorBody),
        NotSignedIn,
        (status = 404, description = "No such fleet, or this server keeps no history", body = ErrorBody),
        (status = 503, description = "The history cannot be read now", body = ErrorBody),
    ))]
pub(super) async fn events(
    State(state): State<AppState>,
    caller: Caller,
    Path(fleet): Path<String>,
    Query(pairs): Query<Vec<(String, String)>>,
) -> Result<Response, AppError> {
    let history = history(&state, &caller, &fleet)?;
    let query = HistoryQuery::from_query(&fleet, pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())), now_ms())
        .map_err(|why| AppError::api(StatusCode::BAD_REQUEST, why))?;
    let fmt = match format(&pairs, &caller.headers) {
        "json" => None,
        f => Some(Format::parse(f).ok_or_else(|| {
            AppError::api(
                StatusCode::BAD_REQUEST,
                format!("format={f:?}: use json, csv or ndjson"),
            )
        })?),
    };
    Ok(match fmt {
        // At most MAX_ANSWER_BYTES of events: past it a 400 saying how many
        // fit (an array cut short would look complete).
        None => match history.query(&query).await {
            Ok(events) => Json(events).into_response(),
            Err(e @ HistoryError::TooLarge { .. }) => {
                return Err(AppError::api(StatusCode::BAD_REQUEST, e.to_string()))
            }
            Err(e) => return Err(unavailable(&e)),
        },
        Some(f) => {
            let ext = if f == Format::Csv { "csv" } else { "ndjson" };
            let disposition = format!("attachment; filename=\"lockscope-history-{fleet}.{ext}\"");
            // At most `[history_exports] per_identity` per identity and
            // `total` in all; the next is refused with 429 and Retry-After.
            let actor = caller.reader().map(|id| id.actor.clone()).unwrap_or_default();
            let permit = history.admit_export(&actor).map_err(too_many)?;
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
    })
}

#[utoipa::path(get, path = "/api/v1/fleets/{fleet}/table", tag = "history",
    summary = "The fleet's lock table at an instant",
    description = "Least role: viewer. Rebuilt from the history: the newest checkpoint at or \
before `at`, then the events after it; at most 10000 locks and 10000 waiters, `locks_total` / \
`waiters_total` saying how many there were when more.",
    params(FleetPath,
        ("at" = String, Query, description = "The instant (as `from` of the history)"),
    ),
    responses(
        (status = 200, description = "The table", body = TableAt),
        (status = 400, description = "No `at`, or not a time in range; ambiguous credentials", body = ErrorBody),
        NotSignedIn,
        (status = 404, description = "No such fleet; no history kept; `at` before the oldest history kept", body = ErrorBody),
        (status = 503, description = "The history cannot be read now", body = ErrorBody),
    ))]
pub(super) async fn table(
    State(state): State<AppState>,
    caller: Caller,
    Path(fleet): Path<String>,
    Query(pairs): Query<Vec<(String, String)>>,
) -> Result<Json<TableAt>, AppError> {
    let history = history(&state, &caller, &fleet)?;
    let Some((_, at)) = pairs.iter().find(|(k, _)| k == "at") else {
        return Err(AppError::api(
            StatusCode::BAD_REQUEST,
            "give the instant: ?at=2026-11-23T02:17:00Z",
        ));
    };
    let at =
        parse_when(at, now_ms()).map_err(|why| AppError::api(StatusCode::BAD_REQUEST, format!("at={at:?}: {why}")))?;
    match history.table_at(&fleet, at).await {
        Ok(t) => Ok(Json(t.capped(MAX_TABLE_LOCKS))),
        Err(HistoryError::OutOfRange(why)) => Err(AppError::api(StatusCode::NOT_FOUND, why)),
        Err(e) => Err(unavailable(&e)),
    }
}

/// `429 Too Many Requests` with the reason and `Retry-After`.
fn too_many(refused: Refused) -> AppError {
    tracing::info!(reason = %refused.reason, "history export refused");
    AppError::api(StatusCode::TOO_MANY_REQUESTS, refused.reason).retry_after(refused.retry_after.as_secs().max(1))
}

fn unavailable(e: &HistoryError) -> AppError {
    tracing::warn!(error = %e, "history read failed");
    AppError::api(StatusCode::SERVICE_UNAVAILABLE, e.to_string())
}
