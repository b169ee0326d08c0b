//! The unlocker against a real etcd and a real PostgreSQL (and SQLite): a
//! holder that stops heartbeating is released within its `auto_unlock_at` plus
//! grace plus 2 s, and never before; a holder that keeps heartbeating past
//! `alert_at` is never released and is reported overdue.

use std::sync::Arc;
use std::time::Duration;

use lockscope::act::unlocker::{self, Deps, UnlockerConfig};
use lockscope::live::hub::HubHandle;
use lockscope::metrics::Metrics;
use lockscope::remember::audit::AuditLog;
use lockscope::remember::history::History;
use lockscope_model::admin::{AuditQuery, Outcome};
use lockscope_model::history::{HistoryQuery, Kind};
use lockscope_model::unlock::Mode;
use lockscope_store::client::{LockOptions, Session, SessionConfig};
use lockscope_store::now_ms;
use lockscope_store::protocol::LockStore;
use lockscope_store::spec::StoreSpec;
use lockscope_store::testing::{EtcdServer, PgServer};
use tokio::sync::watch;

const GRACE: Duration = Duration::from_secs(1);

async fn check(spec: StoreSpec) {
    let dir = tempfile::tempdir().unwrap();
    let audit = AuditLog::open(&format!("sqlite:{}", dir.path().join("audit.db").display()))
        .await
        .unwrap();
    let store = spec.open().unwrap();
    let history = History::open(&format!("sqlite:{}", dir.path().join("history.db").display()), None)
        .await
        .unwrap();
    let recorder = Some((history.recorder("f"), "test".to_string()));
    let hub = HubHandle::spawn_recording("f", "under test", store.clone(), recorder);
    let (stop_tx, stop) = watch::channel(false);
    let cfg = UnlockerConfig {
        mode: Mode::On,
        replica: "test".into(),
        grace: GRACE,
        lease: Duration::from_secs(3),
    };
    let metrics = Arc::new(Metrics::new());
    let deps = Deps {
        audit: audit.clone(),
        metrics,
    };
    tokio::spawn(unlocker::run(hub.clone(), store, cfg, deps, stop));

    let locks = spec.connect().await.unwrap();
    let mut quick = SessionConfig::new("unlocker-test");
    quick.heartbeat_every = Duration::from_millis(200);
    quick.session_ttl = Duration::from_secs(1);
    let opts = |expected: u64| {
        LockOptions::new("unlocker test", Duration::from_millis(expected)).auto_unlock_after(Duration::from_secs(2))
    };
    // A holder that keeps heartbeating past alert_at.
    let alive = Session::open(locks.clone(), quick.clone()).await.unwrap();
    let kept = alive.lock("kept", opts(300)).await.unwrap();
    // A holder that dies: its session stops heartbeating.
    let dying = Session::open(locks.clone(), quick).await.unwrap();
    let dead = dying.lock("dead", opts(300)).await.unwrap();
    let dead_fence = dead.fence();
    dead.abandon();
    drop(dying);
    let auto_unlock_at = locks
        .get("dead")
        .await
        .unwrap()
        .unwrap()
        .record()
        .unwrap()
        .auto_unlock_at;
    let due = auto_unlock_at + GRACE.as_millis() as i64;
    // Wait for the release (the store shows it gone) and time it.
    let released_at = loop {
        let now = now_ms();
        match locks.get("dead").await.unwrap() {
            Some(e) if e.fence == dead_fence => {
                assert!(
                    now <= due + 2_000,
                    "not released {} ms after auto_unlock_at + grace; the unlocker: {:?}",
                    now - due,
                    hub.summary().unlocker
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            _ => break now,
        }
    };
    // Never before its time (this host's clock is the holder's: no skew here).
    assert!(released_at >= due, "released {} ms early", due - released_at);
    eprintln!("released {} ms after auto_unlock_at + grace", released_at - due);
    // The heartbeating holder was overdue all along and is still held.
    assert_eq!(locks.get("kept").await.unwrap().map(|e| e.fence), Some(kept.fence()));
    assert!(hub.summary().counts.overdue >= 1, "{:?}", hub.summary().counts);
    assert!(!kept.is_lost());
    // The release is on record, as the unlocker's (written after the store
    // acted: the deletion can be seen a moment before it).
    let mut entries = Vec::new();
    for _ in 0..250 {
        entries = audit.query(&AuditQuery::default()).await.unwrap();
        if !entries.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert_eq!(
        (
            entries[0].actor.as_str(),
            entries[0].target.as_str(),
            entries[0].fence,
            entries[0].outcome
        ),
        ("unlocker@test", "dead", Some(dead_fence), Some(Outcome::Done))
    );
    let mut status = None;
    for _ in 0..100 {
        status = hub.summary().unlocker;
        if status.as_ref().is_some_and(|s| s.released == 1) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let status = status.expect("the unlocker publishes its status");
    // The history records the store's delete as the unlocker's release.
    let q = HistoryQuery {
        fleet: "f".into(),
        lock: Some("dead".into()),
        ..HistoryQuery::default()
    };
    let mut ends = Vec::new();
    for _ in 0..100 {
        ends = history.query(&q).await.unwrap();
        ends.retain(|e| e.kind.ends_hold());
        if !ends.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(ends.len(), 1, "{ends:?}");
    assert_eq!(
        (ends[0].kind, ends[0].actor.as_deref(), ends[0].fence),
        (Kind::AutoReleased, Some("unlocker@test"), Some(dead_fence))
    );
    assert!(status.leading && status.released == 1, "{status:?}");
    let _ = stop_tx.send(true);
    drop(kept);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd() {
    let etcd = EtcdServer::start().await;
    check(StoreSpec::Etcd {
        endpoints: vec![etcd.endpoint()],
        prefix: Some("/unlocker-it/".into()),
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres() {
    let pg = PgServer::start().await;
    check(StoreSpec::Sql { url: pg.url() }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite() {
    let dir = tempfile::tempdir().unwrap();
    check(StoreSpec::sqlite_file(&dir.path().join("locks.db"))).await;
}
