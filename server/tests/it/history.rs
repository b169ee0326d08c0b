//! The lock history outlives the store's memory and the server: events recorded
//! from a real etcd are still there after etcd compacted its history and the
//! server restarted; the restart's snapshot adds nothing twice; a lock released
//! while no dashboard watched gets its end from the first snapshot after; and
//! the table at an instant in between is the one that stood then.

use std::time::Duration;

use lockscope::history::History;
use lockscope::hub::HubHandle;
use lockscope_model::history::{HistoryEvent, HistoryQuery, Kind};
use lockscope_model::StoreStatus;
use lockscope_store::client::{LockOptions, Session, SessionConfig};
use lockscope_store::etcd::{EtcdConfig, EtcdLocks};
use lockscope_store::now_ms;
use lockscope_store::spec::StoreSpec;
use lockscope_store::testing::EtcdServer;

const PREFIX: &str = "/history-it/";

async fn all(history: &History) -> Vec<HistoryEvent> {
    history
        .query(&HistoryQuery {
            fleet: "it".into(),
            limit: Some(10_000),
            ..HistoryQuery::default()
        })
        .await
        .unwrap()
}

fn has(events: &[HistoryEvent], kind: Kind, lock: &str) -> usize {
    events
        .iter()
        .filter(|e| e.kind == kind && e.lock.as_deref() == Some(lock))
        .count()
}

/// Polls `history` until `done` holds (10 s at most).
async fn until(history: &History, what: &str, done: impl Fn(&[HistoryEvent]) -> bool) -> Vec<HistoryEvent> {
    for _ in 0..200 {
        let events = all(history).await;
        if done(&events) {
            return events;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{what}: not in the history within 10 s: {:#?}", all(history).await);
}

fn start(spec: &StoreSpec, history: &History) -> HubHandle {
    let recorder = Some((history.recorder("it"), "replica-1".to_string()));
    HubHandle::spawn_recording("it", "etcd under test", spec.open().unwrap(), recorder)
}

async fn live(hub: &HubHandle) {
    for _ in 0..200 {
        if matches!(hub.summary().status, StoreStatus::Live { .. }) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the hub never went live: {:?}", hub.summary().status);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_survives_compaction_and_restart() {
    let etcd = EtcdServer::start().await;
    let spec = StoreSpec::Etcd {
        endpoints: vec![etcd.endpoint()],
        prefix: Some(PREFIX.into()),
    };
    let direct = EtcdLocks::connect(EtcdConfig::new(vec![etcd.endpoint()], PREFIX))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("history.db").display());
    let history = History::open(&url, None).await.unwrap();
    let hub = start(&spec, &history);
    live(&hub).await;

    let session = Session::open(spec.connect().await.unwrap(), SessionConfig::new("history-it"))
        .await
        .unwrap();
    let opts = || LockOptions::new("history test", Duration::from_secs(60));
    let a = session.lock("a", opts()).await.unwrap();
    let b = session.lock("b", opts()).await.unwrap();
    let b_fence = b.fence();
    assert!(a.unlock().await.unwrap());
    let before = until(&history, "a taken and released, b taken", |e| {
        has(e, Kind::Acquired, "a") == 1 && has(e, Kind::Released, "a") == 1 && has(e, Kind::Acquired, "b") == 1
    })
    .await;
    let b_taken_at = before.iter().find(|e| e.lock.as_deref() == Some("b")).unwrap().at;

    // The server stops; meanwhile b is released, c taken, and etcd forgets it all.
    drop(hub);
    drop(history);
    // Longer than the margin a first snapshot leaves for acquisitions another
    // replica may have recorded after it was read.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let gap = now_ms();
    assert!(b.unlock().await.unwrap());
    let c = session.lock("c", opts()).await.unwrap();
    direct.compact(c.fence()).await.unwrap();

    // The restart reads the same history and a fresh snapshot.
    let history = History::open(&url, None).await.unwrap();
    let hub = start(&spec, &history);
    live(&hub).await;
    let after = until(&history, "c taken, b's end found", |e| {
        has(e, Kind::Acquired, "c") == 1 && has(e, Kind::Released, "b") == 1
    })
    .await;
    assert_eq!(after[..before.len()], before[..], "the earlier events, unchanged");
    for (kind, lock) in [(Kind::Acquired, "a"), (Kind::Released, "a"), (Kind::Acquired, "b")] {
        assert_eq!(has(&after, kind, lock), 1, "{kind:?} {lock}: nothing recorded twice");
    }
    let b_end = after
        .iter()
        .find(|e| e.kind == Kind::Released && e.lock.as_deref() == Some("b"))
        .unwrap();
    assert_eq!(b_end.fence, Some(b_fence));
    assert!(b_end.at >= gap, "b's end is recorded when it was found, not earlier");
    assert!(b_end.detail.contains("no dashboard"), "{}", b_end.detail);

    // The table at each instant.
    let names = |t: lockscope_model::history::TableAt| t.locks.into_iter().map(|e| e.name).collect::<Vec<_>>();
    // Events of one hub turn share their time: what stood at each recorded
    // instant, worked out simply from the events (acquired at or before, not
    // ended at or before).
    for t in after.iter().flat_map(|e| [e.at - 1, e.at]) {
        let mut want: Vec<String> = after
            .iter()
            .filter(|e| e.kind == Kind::Acquired && e.at <= t)
            .filter(|a| {
                !after
                    .iter()
                    .any(|e| e.kind.ends_hold() && e.lock == a.lock && e.fence == a.fence && e.at <= t)
            })
            .filter_map(|a| a.lock.clone())
            .collect();
        want.sort();
        assert_eq!(names(history.table_at("it", t).await.unwrap()), want, "at {t}");
    }
    assert!(names(history.table_at("it", b_taken_at).await.unwrap()).contains(&"b".to_string()));
    assert_eq!(names(history.table_at("it", gap).await.unwrap()), ["b"]);
    assert_eq!(names(history.table_at("it", now_ms()).await.unwrap()), ["c"]);
    drop(c);
}
