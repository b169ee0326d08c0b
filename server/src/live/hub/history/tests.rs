//! A first snapshot's backlog against a real SQLite history: bounded while it
//! is recorded, and the same history once it is (issue 26).

use std::collections::HashMap;
use std::time::Duration;

use futures::StreamExt;
use lockscope_model::fleet::Snapshot;
use lockscope_model::history::{HistoryQuery, Kind};

use super::*;
use crate::remember::history::{History, BACKLOG_AHEAD};

fn held(name: &str, fence: i64) -> LockEntry {
    crate::remember::history::tests::held(name, fence, "s1")
}

fn queued(history: &History) -> u64 {
    history.stats().queued.load(std::sync::atomic::Ordering::Relaxed)
}

#[tokio::test]
async fn a_first_snapshot_is_recorded_a_writers_worth_at_a_time_and_each_acquisition_once() {
    let dir = tempfile::tempdir().unwrap();
    let history = History::open(&format!("sqlite:{}", dir.path().join("h.db").display()), None)
        .await
        .unwrap();
    let recorder = history.recorder("f");
    assert_eq!(recorder.cursor().await, None, "a new history");
    let mut hub = HubHistory::new(recorder, "r".into());
    let n = 2 * BACKLOG_AHEAD as i64 + 500;
    let locks: Vec<LockEntry> = (0..n).map(|i| held(&format!("l{i:06}"), i + 1)).collect();
    let (t, mut state) = (1_000_000, FleetState::default());
    let snap = FleetEvent::Reset(Snapshot {
        revision: n + 1,
        locks,
        ..Snapshot::default()
    });
    // docs/operations.md: "A fleet's first snapshot (a live table filling from
    // empty) is recorded as a backlog: its locks' `acquired` events, each at the
    // snapshot's time, go to the history from the live table as fast as the
    // writer takes them, never more than 10,000 events queued at once [...]; a
    // lock that changes before the backlog reaches it has its acquisition
    // recorded first."
    // The writer task cannot run between these calls (one thread): what is
    // queued is what the hub queued.
    hub.before_apply(&state, &snap, t, true);
    assert!(
        queued(&history) <= BACKLOG_AHEAD,
        "a snapshot of {n} locks queued {} events at once (issue 26: a copy of the fleet in the queue)",
        queued(&history)
    );
    state.apply(snap);
    hub.pump(&state);
    hub.pump(&state);
    assert_eq!(BACKLOG_AHEAD, 10_000, "the bound docs/operations.md states");
    assert_eq!(
        queued(&history),
        BACKLOG_AHEAD,
        "as many as the writer has room for, no more"
    );
    // Before the backlog reaches them: one lock goes, one is new.
    let gone = format!("l{:06}", n - 1);
    let remove = FleetEvent::Remove {
        name: gone.clone(),
        revision: n + 2,
    };
    hub.before_apply(&state, &remove, t + 5, true);
    state.apply(remove);
    let new = FleetEvent::Upsert(held("m-new", n + 3));
    hub.before_apply(&state, &new, t + 6, true);
    state.apply(new);
    for _ in 0..100 {
        assert!(history.flush(Duration::from_secs(30)).await);
        hub.pump(&state);
        if !hub.pumping() {
            break;
        }
    }
    assert!(!hub.pumping(), "the backlog ends");
    assert!(history.flush(Duration::from_secs(30)).await);
    let q = HistoryQuery {
        fleet: "f".into(),
        ..HistoryQuery::default()
    };
    let mut acquired: HashMap<String, Vec<i64>> = HashMap::new();
    let mut ends = Vec::new();
    let mut events = std::pin::pin!(history.events(&q, None));
    while let Some(ev) = events.next().await {
        let ev = ev.unwrap();
        match ev.kind {
            Kind::Acquired => acquired.entry(ev.lock.unwrap()).or_default().push(ev.at),
            k if k.ends_hold() => ends.push((ev.lock.unwrap(), ev.at)),
            _ => {}
        }
    }
    assert_eq!(acquired.len() as i64, n + 1, "every acquisition recorded");
    assert!(
        acquired
            .iter()
            .all(|(lock, at)| *at == [if lock == "m-new" { t + 6 } else { t }]),
        "each once, the snapshot's at its time, the later one at its own"
    );
    assert_eq!(
        ends,
        vec![(gone, t + 5)],
        "the lock gone before the backlog reached it ends after its start"
    );
    let table = history.table_at("f", t + 10).await.unwrap();
    assert_eq!(
        table.locks.len() as i64,
        n,
        "the table then: the snapshot less one, plus one"
    );
}
