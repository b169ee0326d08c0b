//! The list API (issue 29): `GET /api/v1/fleets/{fleet}/locks` (the fleet's
//! locks in the page's view: `state`, `service`, `host`, `prefix`, `contains`,
//! `sort`, `reversed`, read by [`ViewSpec::from_query`]) and
//! `GET /api/v1/fleets/{fleet}/sessions`, both paged by a cursor (`limit`,
//! `after`) and answered from the hub's current table, as JSON or, for
//! `Accept: application/x-ndjson`, one row a line and a last line with `next`.

use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use lockscope_model::detail::SessionList;
use lockscope_model::view::{sort_key, SortFields, SortKey, ViewSpec, WindowRow, MAX_WINDOW};
use lockscope_model::StoreStatus;
use lockscope_store::now_ms;
use serde::Serialize;
use utoipa::ToSchema;

use super::openapi::{FleetPath, NotSignedIn};
use super::{format, hub, hub_stopped, Caller};
use crate::live::views::ListCursor;
use crate::web::error::{AppError, ErrorBody};
use crate::web::state::AppState;

/// Rows a page holds when `limit` is not given.
/// Fixed, as is [`MAX_LIMIT`] (docs/operations.md, "Limits"): a client lists
/// a whole fleet by following `next`, so no operator needs a bigger page.
pub const DEFAULT_LIMIT: usize = 100;
/// Most rows one page holds (`limit` above it is a `400`).
pub const MAX_LIMIT: usize = 1000;

/// One page's paging: how many rows, and after which.
struct Paging {
    limit: usize,
    after: Option<String>,
}

fn bad(why: impl Into<String>) -> AppError {
    AppError::api(StatusCode::BAD_REQUEST, why)
}

/// `limit` and `after` from the query; `offset` is refused (pages go by cursor).
fn paging(pairs: &[(String, String)]) -> Result<Paging, AppError> {
    let mut paging = Paging {
        limit: DEFAULT_LIMIT,
        after: None,
    };
    for (k, v) in pairs {
        match k.as_str() {
            "limit" => {
                paging.limit = v
                    .parse()
                    .ok()
                    .filter(|n| (1..=MAX_LIMIT).contains(n))
                    .ok_or_else(|| bad(format!("limit={v}: ask for 1 to {MAX_LIMIT} rows")))?
            }
            "after" if v.is_empty() => {}
            "after" => paging.after = Some(v.clone()),
            "offset" => {
                return Err(bad(
                    "offset: this API pages by cursor: pass the last page's next as after",
                ))
            }
            _ => {}
        }
    }
    Ok(paging)
}

/// The opaque cursor naming a row's place: `SORT.A.B.HEX(NAME)`.
fn encode(key: SortKey, c: &ListCursor) -> String {
    format!("{}.{}.{}.{}", key.as_str(), c.0, c.1, hex::encode(c.2.as_bytes()))
}

fn decode(key: SortKey, text: &str) -> Result<ListCursor, AppError> {
    let not = || {
        bad(format!(
            "after={text}: not a cursor this API gave (pass a page's next unchanged)"
        ))
    };
    let mut parts = text.splitn(4, '.');
    let (Some(sort), Some(a), Some(b), Some(name)) = (parts.next(), parts.next(), parts.next(), parts.next()) else {
        return Err(not());
    };
    if sort != key.as_str() {
        return Err(bad(format!(
            "after: the cursor is for sort={sort}, this page asks for sort={}",
            key.as_str()
        )));
    }
    let name = hex::decode(name)
        .ok()
        .and_then(|n| String::from_utf8(n).ok())
        .ok_or_else(not)?;
    Ok((a.parse().map_err(|_| not())?, b.parse().map_err(|_| not())?, name))
}

/// A row's place in `key`'s order at `now`, as the hub's index keys it.
fn cursor_of(key: SortKey, row: &WindowRow, now: i64) -> ListCursor {
    let (a, b) = sort_key(
        key,
        &SortFields::of(&row.entry),
        row.state(now),
        row.waiters.len() as u32,
    );
    (a, b, row.entry.name.clone())
}

/// The page's envelope besides its rows (NDJSON's last line).
#[derive(Clone, Serialize, ToSchema)]
struct Tail {
    /// The cursor of the next page, to pass as `after` (`null`: the last page).
    next: Option<String>,
    /// When the page was read (unix ms, the server's clock).
    as_of: i64,
    /// `false` while the store is not live: the rows are the last known truth.
    live: bool,
    status: StoreStatus,
}

/// A page of the fleet's locks.
#[derive(Serialize, ToSchema)]
struct LocksPage {
    locks: Vec<WindowRow>,
    #[serde(flatten)]
    tail: Tail,
}

/// A page of the fleet's sessions.
#[derive(Serialize, ToSchema)]
struct SessionsPage {
    #[serde(flatten)]
    list: SessionList,
    #[serde(flatten)]
    tail: Tail,
}

/// JSON, or NDJSON (each row a line, then the tail) for `Accept: application/x-ndjson`.
fn answer<T: Serialize, R: Serialize>(
    headers: &HeaderMap,
    pairs: &[(String, String)],
    page: T,
    rows: &[R],
    tail: &Tail,
) -> Result<Response, AppError> {
    match format(pairs, headers) {
        "json" => Ok(Json(page).into_response()),
        "ndjson" => {
            let mut body = String::new();
            for row in rows
                .iter()
                .map(serde_json::to_string)
                .chain([serde_json::to_string(tail)])
            {
                body.push_str(&row.map_err(|e| AppError::api(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?);
                body.push('\n');
            }
            Ok(([(header::CONTENT_TYPE, "application/x-ndjson")], body).into_response())
        }
        other => Err(bad(format!("format={other:?}: use json or ndjson"))),
    }
}

#[utoipa::path(get, path = "/api/v1/fleets/{fleet}/locks", tag = "locks",
    summary = "The fleet's locks, a page at a time",
    description = "Least role: viewer. The lock table's rows in the page's view, from the live \
table, paged by cursor (pass `next` as `after`). JSON, or NDJSON for `Accept: \
application/x-ndjson` (or `format=ndjson`): one row a line, then a last line with the page's \
Tail.",
    params(FleetPath,
        ("state" = Option<String>, Query, description = "`healthy`, `overdue`, `expired`, `orphaned`, `blacklisted`, `malformed` or `foreign`"),
        ("service" = Option<String>, Query, description = "Exactly this service"),
        ("host" = Option<String>, Query, description = "Exactly this host"),
        ("prefix" = Option<String>, Query, description = "Names starting with this"),
        ("contains" = Option<String>, Query, description = "Names containing this"),
        ("sort" = Option<String>, Query, description = "`severity` (default), `name`, `age`, `expiry`, `waiters` or `fence`"),
        ("reversed" = Option<String>, Query, description = "`1`: the reverse order"),
        ("limit" = Option<u32>, Query, description = "Rows in the page: 1 to 1000, default 100"),
        ("after" = Option<String>, Query, description = "The previous page's `next`, unchanged"),
        ("format" = Option<String>, Query, description = "`json` (default) or `ndjson`"),
    ),
    responses(
        (status = 200, description = "A page of locks", content(
            (LocksPage = "application/json"),
            (String = "application/x-ndjson"),
        )),
        (status = 400, description = "A bad limit, view key, cursor or format; `offset`; ambiguous credentials", body = ErrorBody),
        NotSignedIn,
        (status = 404, description = "No such fleet", body = ErrorBody),
        (status = 503, description = "The fleet's hub is not running", body = ErrorBody),
    ))]
pub(super) async fn locks(
    State(state): State<AppState>,
    caller: Caller,
    Path(fleet): Path<String>,
    Query(pairs): Query<Vec<(String, String)>>,
) -> Result<Response, AppError> {
    caller.reader()?;
    let hub = hub(&state, &fleet)?;
    let paging = paging(&pairs)?;
    // The page's own view parser; the API spells two keys out in full.
    let view = ViewSpec::from_query(pairs.iter().filter_map(|(k, v)| match k.as_str() {
        "contains" => Some(("q", v.as_str())),
        "reversed" => Some(("rev", v.as_str())),
        "limit" | "offset" | "after" | "q" | "rev" => None,
        k => Some((k, v.as_str())),
    }))
    .map_err(bad)?;
    let key = view.sort.key;
    let mut after = paging.after.as_deref().map(|a| decode(key, a)).transpose()?;
    let mut locks: Vec<WindowRow> = Vec::new();
    let (mut as_of, mut status, mut more) = (now_ms(), None, true);
    // One window holds at most MAX_WINDOW rows: a larger page is read in turns.
    while more && locks.len() < paging.limit {
        let want = (paging.limit - locks.len()).min(MAX_WINDOW as usize);
        // One row more than wanted says whether a next page exists.
        let limit = (want + 1).min(MAX_WINDOW as usize) as u32;
        let spec = ViewSpec { limit, ..view.clone() };
        let (frame, s) = hub.render_after(spec, after.clone()).await.map_err(hub_stopped)?;
        (as_of, status) = (frame.server_time, Some(s));
        let order = frame.order.unwrap_or_default();
        let mut rows: std::collections::HashMap<String, WindowRow> =
            frame.rows.into_iter().map(|r| (r.entry.name.clone(), r)).collect();
        // A full window: more rows may follow (certainly when it was `want + 1`).
        more = order.len() == limit as usize;
        let before = locks.len();
        for name in order.into_iter().take(want) {
            if let Some(row) = rows.remove(&name) {
                after = Some(cursor_of(key, &row, as_of));
                locks.push(row);
            }
        }
        if locks.len() == before {
            break;
        }
    }
    let next = (more && !locks.is_empty())
        .then(|| after.as_ref().map(|c| encode(key, c)))
        .flatten();
    let status = status.unwrap_or_else(|| hub.summary().status);
    let tail = Tail {
        next,
        as_of,
        live: status.is_live(),
        status,
    };
    let rows = locks.clone();
    answer(
        &caller.headers,
        &pairs,
        LocksPage {
            locks,
            tail: tail.clone(),
        },
        &rows,
        &tail,
    )
}

/// The fleet's sessions by id, paged like the locks (`after` is a session id).
#[utoipa::path(get, path = "/api/v1/fleets/{fleet}/sessions", tag = "sessions",
    summary = "The fleet's sessions, a page at a time",
    description = "Least role: viewer. The sessions (live, and blacklisted ones even when gone) \
by id, paged by cursor like the locks (`after` is a session id); at most 500 rows are kept, \
`total` counts all. JSON, or NDJSON for `Accept: application/x-ndjson`.",
    params(FleetPath,
        ("limit" = Option<u32>, Query, description = "Rows in the page: 1 to 1000, default 100"),
        ("after" = Option<String>, Query, description = "The previous page's `next`, unchanged"),
        ("format" = Option<String>, Query, description = "`json` (default) or `ndjson`"),
    ),
    responses(
        (status = 200, description = "A page of sessions", content(
            (SessionsPage = "application/json"),
            (String = "application/x-ndjson"),
        )),
        (status = 400, description = "A bad limit or format; `offset`; ambiguous credentials", body = ErrorBody),
        NotSignedIn,
        (status = 404, description = "No such fleet", body = ErrorBody),
        (status = 503, description = "The fleet's hub is not running", body = ErrorBody),
    ))]
pub(super) async fn sessions(
    State(state): State<AppState>,
    caller: Caller,
    Path(fleet): Path<String>,
    Query(pairs): Query<Vec<(String, String)>>,
) -> Result<Response, AppError> {
    caller.reader()?;
    let hub = hub(&state, &fleet)?;
    let paging = paging(&pairs)?;
    let rx = hub.watch_sessions().await.map_err(hub_stopped)?;
    let mut list = rx.borrow().clone().unwrap_or_default();
    list.rows.sort_by(|a, b| a.id.cmp(&b.id));
    list.rows
        .retain(|r| paging.after.as_deref().is_none_or(|after| r.id.as_str() > after));
    let more = list.rows.len() > paging.limit;
    list.rows.truncate(paging.limit);
    let status = hub.summary().status;
    let tail = Tail {
        next: more.then(|| list.rows.last().map(|r| r.id.clone())).flatten(),
        as_of: now_ms(),
        live: status.is_live(),
        status,
    };
    let rows = list.rows.clone();
    answer(
        &caller.headers,
        &pairs,
        SessionsPage {
            list,
            tail: tail.clone(),
        },
        &rows,
        &tail,
    )
}
