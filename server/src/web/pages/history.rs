//! The incident-review page (`/history?fleet=&from=&to=&lock=&session=&service=&actor=&kind=&limit=&at=`):
//! a query of the lock history, the timeline of one lock, and the lock table at
//! an instant rebuilt from history (time travel), drawn by the live table's own
//! component from a frame the hub's [`Views`] render with its clock set to that
//! instant. Read once: the page says when.

use std::collections::HashSet;

use axum::body::Body;
use axum::extract::{Query, Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use lockscope_model::history::{parse_when, Gap, HistoryEvent, HistoryQuery, Kind, TableAt, MAX_HISTORY_ROWS};
use lockscope_model::review::{diff_tables, Review, ReviewForm, Travel};
use lockscope_model::time::{rfc3339, Millis};
use lockscope_model::view::{ViewSpec, WindowFrame, MAX_WINDOW};
use lockscope_model::{FleetEvent, FleetState, Page, Screen, Snapshot};
use lockscope_store::now_ms;

use super::{render, signed_in, watch_page};
use crate::live::views::{Now, Views};
use crate::remember::history::{History, HistoryError};
use crate::web::caller::Caller;
use crate::web::error::AppError;
use crate::web::state::{AppState, FleetQuery};

pub(in crate::web) async fn history_page(
    State(state): State<AppState>,
    caller: Caller,
    Query(pairs): Query<Vec<(String, String)>>,
    req: Request<Body>,
) -> Result<Response, AppError> {
    let id = signed_in(&caller, &req)?;
    let fleet = pairs.iter().find(|(k, _)| k == "fleet").map(|(_, v)| v.clone());
    let hub = state.fleet(&FleetQuery { fleet })?;
    let Some(history) = state.history.as_ref() else {
        return Ok((
            StatusCode::NOT_FOUND,
            "this server keeps no lock history (--history off)",
        )
            .into_response());
    };
    let pairs = pairs.iter().map(|(k, v)| (k.as_str(), v.as_str()));
    let (review, bad_input) = review(history, hub.fleet(), ReviewForm::from_query(pairs), now_ms()).await;
    let page = Page {
        screen: Screen::History {
            review: Box::new(review),
        },
        ..watch_page(hub, &state)
    };
    let mut response = render(&state, id, &caller, page, req).await;
    if bad_input {
        *response.status_mut() = StatusCode::BAD_REQUEST;
    }
    Ok(response)
}

/// Runs what `form` asks of `fleet`'s history at `now`, and whether the URL's
/// filter or instant could not be used (the page then answers 400). Such a
/// filter is reported and the default range shown instead (a time outside
/// [`lockscope_model::time::EARLIEST`]`..=`[`lockscope_model::time::LATEST`]
/// is refused saying the range); a history that cannot be read is reported in
/// the page too.
async fn review(history: &History, fleet: &str, form: ReviewForm, now: Millis) -> (Review, bool) {
    let mut errors = Vec::new();
    let query = HistoryQuery::from_query(fleet, form.query_pairs(), now).unwrap_or_else(|e| {
        errors.push(e);
        HistoryQuery::from_query(fleet, ReviewForm::from_query([]).query_pairs(), now).unwrap_or_else(|_| {
            HistoryQuery {
                // The default range reaches before 1970 only on a clock that does.
                fleet: fleet.to_string(),
                ..HistoryQuery::default()
            }
        })
    });
    let at = match form.at.as_str() {
        "" => None,
        text => parse_when(text, now)
            .map_err(|why| errors.push(format!("at={text:?}: {why}")))
            .ok(),
    };
    let bad_input = !errors.is_empty();
    let mut form = form;
    // The slider sends unix ms: the form shows the instant.
    if let (Some(at), Ok(_)) = (at, form.at.parse::<i64>()) {
        form.at = rfc3339(at);
    }
    let mut review = Review {
        form,
        query,
        read_at: now,
        ..Review::default()
    };
    let mut read = true;
    match history.query(&review.query).await {
        Ok(events) => review.events = events.into_iter().map(without_record).collect(),
        Err(e) => {
            read = false;
            errors.push(unreadable(&e));
        }
    }
    if let Some(lock) = review.exact_lock() {
        match timeline(history, &review.query, lock).await {
            Ok(events) => review.timeline = Some(events),
            Err(e) => errors.push(unreadable(&e)),
        }
    }
    if let Some(at) = at {
        review.travel = Some(travel(history, fleet, at, review.range().0).await);
    }
    // (A history that could not be read is said once.)
    match gaps(history, fleet, review.range()).await {
        Ok(gaps) => review.gaps = gaps,
        Err(e) if read => errors.push(unreadable(&e)),
        Err(_) => {}
    }
    review.error = (!errors.is_empty()).then(|| errors.join("; "));
    review.lost = history.stats().loss();
    review.not_recording = history.stats().health.not_recording(fleet);
    (review, bad_input)
}

/// How long before a review's range a gap may start and still be found (a
/// gap is recorded at its start).
const GAP_LOOKBACK_MS: Millis = 7 * 24 * 3_600_000;

/// The gaps `fleet`'s history records in `from..=to` (those that started at
/// most [`GAP_LOOKBACK_MS`] before it), oldest first.
async fn gaps(history: &History, fleet: &str, (from, to): (Millis, Millis)) -> Result<Vec<Gap>, HistoryError> {
    let q = HistoryQuery {
        fleet: fleet.to_string(),
        from: Some(from.saturating_sub(GAP_LOOKBACK_MS)),
        to: Some(to),
        kinds: vec![Kind::Gap],
        limit: Some(MAX_HISTORY_ROWS),
        ..HistoryQuery::default()
    };
    let events = history.query(&q).await?;
    Ok(events
        .iter()
        .filter_map(Gap::of)
        .filter(|g| g.overlaps(from, to))
        .collect())
}

/// Every event of `lock` in `q`'s range (whatever its other filters), and the
/// blacklisting of the sessions among them, oldest first.
async fn timeline(history: &History, q: &HistoryQuery, lock: &str) -> Result<Vec<HistoryEvent>, HistoryError> {
    let range = |lock: Option<String>, kinds: Vec<Kind>| HistoryQuery {
        fleet: q.fleet.clone(),
        from: q.from,
        to: q.to,
        lock,
        kinds,
        limit: Some(MAX_HISTORY_ROWS),
        ..HistoryQuery::default()
    };
    let mut events = history.query(&range(Some(lock.to_string()), vec![])).await?;
    let sessions: HashSet<&str> = events.iter().filter_map(|e| e.session.as_deref()).collect();
    let blacklisted = history.query(&range(None, vec![Kind::Blacklisted])).await?;
    let theirs: Vec<HistoryEvent> = blacklisted
        .into_iter()
        .filter(|e| e.session.as_deref().is_some_and(|s| sessions.contains(s)))
        .collect();
    events.extend(theirs);
    // Stable: each part is in the order it was recorded.
    events.sort_by_key(|e| e.at);
    Ok(events.into_iter().map(without_record).collect())
}

/// The table at `at` and what changed since `from`.
async fn travel(history: &History, fleet: &str, at: Millis, from: Millis) -> Travel {
    let mut travel = Travel {
        at,
        ..Travel::default()
    };
    let table = match history.table_at(fleet, at).await {
        Ok(t) => t,
        Err(e) => {
            travel.error = Some(match e {
                HistoryError::OutOfRange(why) => why,
                e => unreadable(&e),
            });
            return travel;
        }
    };
    travel.frame = Some(frame_at(&table));
    travel.checkpoint = table.checkpoint;
    travel.replayed = table.replayed;
    if from < at {
        match history.table_at(fleet, from).await {
            Ok(before) => travel.diff = Some(diff_tables(&before, &table)),
            Err(HistoryError::OutOfRange(why)) => travel.diff_error = Some(why),
            Err(e) => travel.diff_error = Some(unreadable(&e)),
        }
    }
    travel
}

/// `table` as the live page's first frame (its default order, as many rows as
/// a window holds), every state judged at the table's instant. History keeps no
/// sessions, so holders are unknown (never "gone").
pub(crate) fn frame_at(table: &TableAt) -> WindowFrame {
    let mut state = FleetState::default();
    let revision = table.locks.iter().map(|l| l.revision).max().unwrap_or(0);
    let changes = state.apply(FleetEvent::Reset(Snapshot {
        revision,
        locks: table.locks.clone(),
        waiters: table.waiters.clone(),
        sessions: None,
        blacklist: vec![],
    }));
    let mut views = Views::new();
    for change in &changes {
        views.on_change(&state, change, table.at);
    }
    let spec = ViewSpec {
        limit: MAX_WINDOW,
        ..ViewSpec::default()
    };
    let now = Now {
        wall: table.at,
        mono: 0,
    };
    // The default order's index always exists, so the frame is at hand.
    match views.render(&state, &spec, now) {
        Ok(frame) => frame,
        Err(id) => views.render_sub(&state, id, now),
    }
}

/// Events on the page go without the stored lock value (the exports have it).
fn without_record(e: HistoryEvent) -> HistoryEvent {
    HistoryEvent { record: None, ..e }
}

fn unreadable(e: &HistoryError) -> String {
    tracing::warn!(error = %e, "history read failed");
    format!("the history could not be read: {e}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use lockscope_model::LockEntry;

    #[test]
    fn a_table_becomes_a_frame_judged_at_its_instant() {
        let rec = |auto_unlock_at: i64| {
            format!(
                r#"{{"v":1,"owner":"o","session":"s","service":"svc","host":"h","pid":1,"acquired_at":0,
                "expected_runtime_ms":10,"alert_at":10,"auto_unlock_at":{auto_unlock_at},"heartbeat_at":0}}"#
            )
        };
        let table = TableAt {
            fleet: "f".into(),
            at: 50,
            locks: vec![
                LockEntry::from_stored("late".into(), 1, 1, rec(40).as_bytes()),
                LockEntry::from_stored("fine".into(), 2, 2, rec(1_000).as_bytes()),
            ],
            ..TableAt::default()
        };
        let frame = frame_at(&table);
        assert!(frame.full);
        assert_eq!(frame.server_time, 50);
        assert_eq!(frame.total, 2);
        let mut names: Vec<_> = frame.rows.iter().map(|r| r.entry.name.as_str()).collect();
        names.sort();
        assert_eq!(names, ["fine", "late"]);
        let late = frame.rows.iter().find(|r| r.entry.name == "late").unwrap();
        assert_eq!(late.state(50).as_str(), "expired");
    }
}
