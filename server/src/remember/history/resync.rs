//! What a fleet's first snapshot after a start adds to its history: the ends
//! of the acquisitions the history still shows open that the store no longer
//! has, and, unless the store replayed what changed while no dashboard
//! watched, the gap from where the history stopped to the snapshot (with what
//! the store's fencing counters say was acquired unseen).

use std::collections::HashSet;

use lockscope_model::history::{Draft, Gap, HistoryEvent, Kind};
use lockscope_model::time::Millis;
use lockscope_model::LockBody;
use tracing::warn;

use super::{Cursor, History, Unseen};

/// How far before a first snapshot the history's open acquisitions are compared
/// with it (see `resync`).
const RESYNC_MARGIN_MS: Millis = 1_000;

/// The ends of the acquisitions `fleet`'s history shows open at `at` that a
/// first snapshot (`held`) no longer has; and the gap from `since` (where the
/// history stopped before, if the store did not replay since, and what its
/// fencing counters say was acquired unseen) to it.
pub(super) async fn resync(
    history: &History,
    fleet: &str,
    at: Millis,
    revision: i64,
    held: &HashSet<(String, i64)>,
    since: Option<(Cursor, Option<Unseen>, Unwatched)>,
) -> Vec<HistoryEvent> {
    // Acquisitions recorded in the last seconds may be younger than the
    // snapshot (another replica saw them after it was read): never ended here.
    // A table that cannot be read (past the time travel's caps, a database
    // error) costs the ends and the counts, never the gap itself.
    let table = match history.table_at(fleet, at - RESYNC_MARGIN_MS).await {
        Ok(t) => Some(t),
        Err(e) => {
            warn!(error = %e, %fleet, "history: could not compare the first snapshot with the history");
            None
        }
    };
    let gap = since.map(|(c, unseen, cause)| {
        let changes = table.as_ref().map(|table| {
            let open: HashSet<(&str, i64)> = table.locks.iter().map(|e| (e.name.as_str(), e.fence)).collect();
            let ended = open
                .iter()
                .filter(|(n, f)| !held.contains(&(n.to_string(), *f)))
                .count();
            let began = held.iter().filter(|(n, f)| !open.contains(&(n.as_str(), *f))).count();
            (ended, began)
        });
        unwatched(fleet, cause, c.at, at, changes, unseen)
    });
    let ends = table
        .map(|t| t.locks)
        .unwrap_or_default()
        .into_iter()
        .filter(|e| !held.contains(&(e.name.clone(), e.fence)))
        .map(|e| {
            let record = match &e.body {
                LockBody::Held(r) => Some(r),
                LockBody::Malformed { .. } | LockBody::Foreign { .. } => None,
            };
            let draft = Draft {
                kind: Some(Kind::Released),
                lock: Some(e.name.clone()),
                fence: Some(e.fence),
                revision: Some(revision),
                session: e.holder_session().map(str::to_string),
                owner: record.map(|r| r.owner.clone()),
                service: record.map(|r| r.service.to_string()),
                host: record.map(|r| r.host.to_string()),
                detail: "gone by the first snapshot after no dashboard watched (when exactly is unknown)".into(),
                ..Draft::default()
            };
            HistoryEvent::new(fleet, at, draft)
        });
    gap.into_iter().chain(ends).collect()
}

/// Why a span went unwatched: a restart, or a running server's outage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unwatched {
    /// From the last event recorded before this start to its first snapshot.
    Restart,
    /// A restart whose history's end could not be read (the database
    /// answered with an error): from an unknown time to its first snapshot.
    UnknownStart,
    /// From the store's outage (reported unreachable) to the first snapshot
    /// after the observer reconnected, where that reconnect read a fresh
    /// snapshot (etcd: compacted past the last revision seen; other stores:
    /// every reconnect) rather than resuming where it stopped.
    Outage,
}

/// The gap between `since` and the snapshot at `at` (both this server's
/// clock): nobody watched, and the store could not replay it (etcd compacted
/// past the revision, or a SQL store, which keeps no history of its changes).
/// `changes`: acquisitions the history showed open that the snapshot lacks,
/// and the reverse (`None`: unknown, the history's table could not be read);
/// `unseen`: what the store's fencing counters say.
pub fn unwatched(
    fleet: &str,
    cause: Unwatched,
    since: Millis,
    at: Millis,
    changes: Option<(usize, usize)>,
    unseen: Option<Unseen>,
) -> HistoryEvent {
    let mut changed = match changes.unwrap_or((0, 0)) {
        _ if changes.is_none() => "what changed in between is unknown (the history's table at its start could not be \
             read); locks taken and released in between are not recorded"
            .to_string(),
        (0, 0) => "the locks held at its end are the ones held at its start; locks taken and released in between, if any, are not recorded".to_string(),
        (ended, began) => format!(
            "changes happened that were not seen: {ended} acquisition{} ended (recorded at the snapshot, \
             when exactly is unknown) and {began} began; locks taken and released in between are not recorded",
            if ended == 1 { "" } else { "s" },
        ),
    };
    if let Some(u) = unseen {
        changed.push_str(&format!("; {}", u.text()));
    }
    let (start, end, replays) = match cause {
        Unwatched::Restart => (
            "the last event recorded before the restart",
            "the first snapshot after it",
            "the last revision recorded",
        ),
        Unwatched::UnknownStart => (
            "an unknown time (where the history stopped before the restart could not be read)",
            "the first snapshot after the restart",
            "the last revision recorded",
        ),
        Unwatched::Outage => (
            "the store's outage",
            "the first snapshot after the reconnect",
            "the last revision seen",
        ),
    };
    let start = match cause {
        Unwatched::UnknownStart => start.to_string(),
        _ => format!("{start} ({})", lockscope_model::time::rfc3339(since)),
    };
    let why = format!(
        "not watching from {start} to {end} ({}), both this server's clock; the store could not replay what \
         changed (etcd replays it unless it has compacted past {replays}; other stores keep no history of their \
         changes); {changed}",
        lockscope_model::time::rfc3339(at),
    );
    Gap {
        from: since,
        to: at,
        lost: None,
        why,
    }
    .event(fleet)
}
