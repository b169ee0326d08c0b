//! The demo fleet against real stores. On etcd: it takes locks, contends on the
//! hot lock, workers die and leave their locks behind, and live workers leave
//! nothing. On a SQLite file: a hung worker keeps its lock alive until its session
//! is blacklisted, and then leaves the lock to run out.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use lockscope::cli::demo::{self, DemoConfig, DemoStats, Keyspace};
use lockscope_model::record::{BlacklistRecord, SessionRecord};
use lockscope_model::{LockBody, LockRecord};
use lockscope_store::etcd::{EtcdConfig, EtcdLocks};
use lockscope_store::now_ms;
use lockscope_store::protocol::LockStore;
use lockscope_store::sql::SqlLocks;
use lockscope_store::testing::EtcdServer;
use lockscope_store::StoreError;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_fleet_contends_dies_and_cleans_up_after_its_live_workers() {
    let etcd = EtcdServer::start().await;
    let store = EtcdLocks::connect(EtcdConfig::new(vec![etcd.endpoint()], "/lockscope-demo-it/"))
        .await
        .unwrap();
    let cfg = DemoConfig {
        workers: 4,
        keys: 6,
        hot_keys: 1,
        hot_share: 0.5,
        hold_mean: Duration::from_millis(100),
        die_rate: 0.2,
        duration: Some(Duration::from_secs(3)),
        seed: Some(17),
        ..DemoConfig::default()
    };
    let started = Instant::now();
    let stats = demo::run(store.clone(), cfg.clone(), std::future::pending())
        .await
        .unwrap();
    let took = started.elapsed();
    println!("{stats} (swept {}) in {took:?}", stats.swept);
    assert!(took < Duration::from_secs(6), "demo took {took:?} to stop");

    assert!(stats.acquired > 0, "{stats}");
    assert!(stats.conflicts > 0, "no contention: {stats}");
    assert!(stats.deaths >= 1, "nobody died: {stats}");
    assert_eq!(stats.abandoned.len() as u64, stats.deaths);
    assert_eq!(stats.errors, 0, "{stats}");

    // Every lock a dead worker left is still held by that acquisition: it waits
    // for the unlocker.
    let dead: HashSet<&str> = stats.abandoned.iter().map(|a| a.session.as_str()).collect();
    for a in &stats.abandoned {
        let entry = store
            .get(&a.name)
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("abandoned {} is gone", a.name));
        assert_eq!(entry.fence, a.fence, "{} was re-acquired", a.name);
        let LockBody::Held(record) = &entry.body else {
            panic!("{} is malformed", a.name)
        };
        assert_eq!(*record.session, *a.session);
    }
    // And nothing else: live workers released (or swept) theirs.
    let keyspace = Keyspace::new(&cfg.name_prefix, cfg.keys, cfg.hot_keys);
    let mut held = 0;
    for key in &keyspace.keys {
        if let Some(entry) = store.get(&key.name).await.unwrap() {
            let LockBody::Held(record) = &entry.body else {
                panic!("{} is malformed", key.name)
            };
            assert!(
                dead.contains(&*record.session),
                "{} left held by live session {}",
                key.name,
                record.session
            );
            held += 1;
        }
    }
    assert_eq!(held, stats.abandoned.len(), "one abandoned lock per dead worker");
}

/// Heartbeat interval of the SQLite tests' sessions.
const HEARTBEAT: Duration = Duration::from_millis(100);

/// A one-worker demo on a fresh SQLite file, with quick heartbeats.
struct SqliteDemo {
    _dir: tempfile::TempDir,
    url: String,
    store: SqlLocks,
    cfg: DemoConfig,
    /// The one lock the worker takes.
    name: String,
    stop: Option<oneshot::Sender<()>>,
    demo: Option<JoinHandle<Result<DemoStats, StoreError>>>,
}

impl SqliteDemo {
    /// Every acquisition hangs for `hang`; the expected runtime is short.
    async fn hanging(hang: Duration) -> SqliteDemo {
        SqliteDemo::start(DemoConfig {
            hold_mean: Duration::from_millis(100),
            expected_runtime: Duration::from_millis(300),
            hang_rate: 1.0,
            hang: hang..=hang,
            ..SqliteDemo::config()
        })
        .await
    }

    /// One worker on one lock, never dying, stalling or hanging.
    fn config() -> DemoConfig {
        DemoConfig {
            workers: 1,
            keys: 1,
            hot_keys: 0,
            die_rate: 0.0,
            stall_rate: 0.0,
            hang_rate: 0.0,
            auto_unlock_after: Duration::from_secs(1),
            heartbeat_every: HEARTBEAT,
            seed: Some(3),
            ..DemoConfig::default()
        }
    }

    async fn start(cfg: DemoConfig) -> SqliteDemo {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}?mode=rwc", dir.path().join("demo.db").display());
        let store = SqlLocks::connect(&url).await.unwrap();
        let name = Keyspace::new(&cfg.name_prefix, cfg.keys, cfg.hot_keys).keys[0]
            .name
            .clone();
        let (stop, stopped) = oneshot::channel::<()>();
        let demo = tokio::spawn(demo::run(store.clone(), cfg.clone(), async {
            let _ = stopped.await;
        }));
        SqliteDemo {
            _dir: dir,
            url,
            store,
            cfg,
            name,
            stop: Some(stop),
            demo: Some(demo),
        }
    }

    /// The lock's fence and record, if held.
    async fn lock(&self) -> Option<(i64, LockRecord)> {
        let entry = self.store.get(&self.name).await.unwrap()?;
        match entry.body {
            LockBody::Held(record) => Some((entry.fence, record)),
            other => panic!("{} is malformed: {other:?}", self.name),
        }
    }

    /// Waits (up to `within`) until the lock is held with a fence above `after`.
    async fn taken_after(&self, after: i64, within: Duration) -> (i64, LockRecord) {
        let until = Instant::now() + within;
        loop {
            match self.lock().await {
                Some((fence, record)) if fence > after => return (fence, record),
                _ if Instant::now() > until => panic!("{} not taken after fence {after} within {within:?}", self.name),
                _ => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
    }

    /// Every registered session's record (as last heartbeated), by id.
    async fn sessions(&self) -> Vec<SessionRecord> {
        let pool = sqlx::SqlitePool::connect(&self.url).await.unwrap();
        let rows: Vec<(String,)> = sqlx::query_as("SELECT record FROM lockscope_sessions ORDER BY session")
            .fetch_all(&pool)
            .await
            .unwrap();
        pool.close().await;
        rows.iter().map(|r| serde_json::from_str(&r.0).unwrap()).collect()
    }

    /// Session `id`'s record as last heartbeated.
    async fn session(&self, id: &str) -> SessionRecord {
        let all = self.sessions().await;
        all.into_iter()
            .find(|s| s.session == id)
            .unwrap_or_else(|| panic!("session {id} is not registered"))
    }

    /// Stops the demo, checks that it stopped promptly, and returns its totals.
    async fn stop(&mut self) -> DemoStats {
        let _ = self.stop.take().unwrap().send(());
        let started = Instant::now();
        let stats = tokio::time::timeout(Duration::from_secs(3), self.demo.take().unwrap())
            .await
            .expect("the demo did not stop within 3 s")
            .unwrap()
            .unwrap();
        println!("{stats} (swept {}) stopped in {:?}", stats.swept, started.elapsed());
        stats
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_worker_looks_alive_until_blacklisted_and_then_leaves_its_lock_to_run_out() {
    let mut d = SqliteDemo::hanging(Duration::from_secs(60)).await;
    let (fence, taken) = d.taken_after(0, Duration::from_secs(5)).await;
    let session = taken.session.to_string();
    let first_beat = d.session(&session).await.heartbeat_at;

    // Past its expected runtime the lock is still held by the same acquisition,
    // overdue, and both the lock and the session keep being heartbeated.
    tokio::time::sleep(d.cfg.expected_runtime * 2).await;
    let (still, overdue) = d.lock().await.expect("the hung worker's lock is gone");
    assert_eq!(still, fence, "the lock changed hands while its holder hung");
    assert!(
        now_ms() > overdue.alert_at,
        "not overdue: alert_at {}",
        overdue.alert_at
    );
    assert!(
        overdue.heartbeat_at > taken.heartbeat_at,
        "the lock was not heartbeated"
    );
    assert!(
        overdue.auto_unlock_at > taken.auto_unlock_at,
        "the lock was not extended"
    );
    assert!(
        d.session(&session).await.heartbeat_at > first_beat,
        "the session did not heartbeat"
    );

    // An operator blacklists the hung worker's session. The store refuses every
    // extension from here on, so what it holds now is final.
    let blacklist = BlacklistRecord::new(&session, "on-call", "worker hung holding its lock", now_ms());
    d.store.blacklist(&blacklist).await.unwrap();
    let (_, at_blacklisting) = d.lock().await.expect("the lock is gone right after blacklisting");
    let last_beat = d.session(&session).await.heartbeat_at;

    // A few heartbeats later: the lock is neither deleted nor extended.
    tokio::time::sleep(HEARTBEAT * 6).await;
    let (after, record) = d.lock().await.expect("the blacklisted session's lock was deleted");
    assert_eq!(after, fence, "the blacklisted session's lock changed");
    assert_eq!(
        record.auto_unlock_at, at_blacklisting.auto_unlock_at,
        "the blacklisted session's lock is still extended"
    );
    assert_eq!(record.heartbeat_at, at_blacklisting.heartbeat_at);
    assert_eq!(
        d.session(&session).await.heartbeat_at,
        last_beat,
        "the session still heartbeats"
    );

    // Stopped while hanging, the worker finds its lock lost to the blacklist:
    // it leaves it to run out (for the unlocker) instead of unlocking it.
    let stats = d.stop().await;
    assert_eq!((stats.acquired, stats.hangs, stats.lost), (1, 1, 1), "{stats}");
    assert_eq!((stats.deaths, stats.errors, stats.swept), (0, 0, 0), "{stats}");
    let (left, record) = d
        .lock()
        .await
        .expect("the demo released the blacklisted session's lock");
    assert_eq!((left, &*record.session), (fence, session.as_str()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_worker_wakes_up_unlocks_and_carries_on_even_after_a_force_release() {
    let hang = Duration::from_secs(1);
    let mut d = SqliteDemo::hanging(hang).await;
    let (first, taken) = d.taken_after(0, Duration::from_secs(5)).await;
    let session = taken.session.to_string();

    // An operator force-releases the hung worker's lock; when the hang ends the
    // worker's unlock is a no-op, and it goes on taking locks in the same session.
    assert!(d.store.release(&d.name, first).await.unwrap(), "force-release");
    let (second, record) = d.taken_after(first, hang * 3).await;
    assert_eq!(*record.session, *session, "the worker replaced a session that was fine");

    // This hang runs its course: the worker unlocks and takes the lock again.
    let (_, record) = d.taken_after(second, hang * 3).await;
    assert_eq!(*record.session, *session);

    // The third take was seen in the store, but the stop can still cancel the
    // `lock` call that wrote it before the worker counts it (the client then
    // releases it, or the demo's final sweep does): counted are at least two.
    let stats = d.stop().await;
    assert!(stats.acquired >= 2 && stats.hangs == stats.acquired, "{stats}");
    assert_eq!((stats.lost, stats.errors, stats.deaths), (1, 0, 0), "{stats}");
    assert!(d.lock().await.is_none(), "the live worker left its lock held");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_blacklisted_while_holding_leaves_its_lock_and_opens_a_new_session() {
    // Holds of a few seconds (the exponential's mean far above the cap).
    let mut d = SqliteDemo::start(DemoConfig {
        hold_mean: Duration::from_secs(60),
        expected_runtime: Duration::from_secs(3),
        ..SqliteDemo::config()
    })
    .await;
    let (fence, taken) = d.taken_after(0, Duration::from_secs(5)).await;
    let session = taken.session.to_string();
    let blacklist = BlacklistRecord::new(&session, "on-call", "testing", now_ms());
    d.store.blacklist(&blacklist).await.unwrap();

    // The worker learns of the loss within a heartbeat and a loss check, and
    // does not unlock: the lock stays, unextended, for the unlocker.
    let (_, at_blacklisting) = d.lock().await.expect("the lock is gone right after blacklisting");
    tokio::time::sleep(Duration::from_millis(800)).await;
    let (after, record) = d.lock().await.expect("the blacklisted worker deleted its lock");
    assert_eq!(after, fence);
    assert_eq!(record.auto_unlock_at, at_blacklisting.auto_unlock_at);

    // It goes on in a new session (and waits for the lock its old one left).
    let until = Instant::now() + Duration::from_secs(3);
    loop {
        let ids: Vec<String> = d.sessions().await.into_iter().map(|s| s.session).collect();
        if ids.len() == 1 && ids[0] != session {
            break;
        }
        assert!(Instant::now() < until, "no new session in place of {session}: {ids:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let stats = d.stop().await;
    assert_eq!(
        (stats.acquired, stats.lost, stats.errors, stats.swept),
        (1, 1, 0, 0),
        "{stats}"
    );
    let (left, record) = d
        .lock()
        .await
        .expect("the demo released the blacklisted session's lock");
    assert_eq!((left, &*record.session), (fence, session.as_str()));
}
