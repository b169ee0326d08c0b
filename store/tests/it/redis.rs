//! The `redis://` fleet against a real `redis-server` (started per test on a
//! free port), with locks taken by redis-py's `Lock` in `python3` children:
//! what the observer shows through the hub's reducer (token, TTL, the fence
//! derived from the token), release and expiry, the guarded force-release,
//! and a killed and restarted server.

use std::time::{Duration, Instant};

use lockscope_model::fleet::TokenKey;
use lockscope_model::{FleetState, LockBody, LockEntry, StoreStatus};
use lockscope_store::fleet::Release;
use lockscope_store::redis_set::fence_of;
use lockscope_store::spec::StoreSpec;
use lockscope_store::testing::{PyLock, RedisServer, Redisson};
use lockscope_store::ObserverEvent;
use tokio::sync::mpsc;

async fn raw_get(server: &RedisServer, key: &str) -> Option<String> {
    let client = ::redis::Client::open(server.url()).unwrap();
    let mut con = client.get_multiplexed_async_connection().await.unwrap();
    ::redis::cmd("GET").arg(key).query_async(&mut con).await.unwrap()
}

/// An observer feeding a reducer, as the hub runs it, keeping the last status.
pub(crate) struct Watch {
    pub(crate) state: FleetState,
    pub(crate) status: Option<StoreStatus>,
    pub(crate) rx: mpsc::Receiver<ObserverEvent>,
}

impl Watch {
    pub(crate) fn start(spec: &StoreSpec) -> Watch {
        let (tx, rx) = mpsc::channel(64);
        tokio::spawn(spec.open().unwrap().observer().run(tx));
        Watch {
            state: FleetState::default(),
            status: None,
            rx,
        }
    }

    pub(crate) fn live(&self) -> bool {
        matches!(self.status, Some(StoreStatus::Live { .. }))
    }

    /// Applies what the observer sends until `done` holds; panics after `max`.
    pub(crate) async fn until(&mut self, what: &str, max: Duration, done: impl Fn(&Watch) -> bool) -> Duration {
        let t0 = Instant::now();
        while !done(self) {
            let left = max.checked_sub(t0.elapsed()).unwrap_or_default();
            match tokio::time::timeout(left, self.rx.recv()).await {
                Ok(Some(ObserverEvent::Events(events))) => {
                    for e in events {
                        self.state.apply(e);
                    }
                }
                Ok(Some(ObserverEvent::Status(s))) => self.status = Some(s),
                Ok(Some(ObserverEvent::Missed { .. })) => panic!("history replay sent unasked"),
                Ok(Some(ObserverEvent::Looked(_))) => {}
                Ok(None) => panic!("the observer stopped"),
                Err(_) => panic!("not within {max:?}: {what} (status {:?})", self.status),
            }
        }
        t0.elapsed()
    }

    pub(crate) fn lock(&self, name: &str) -> Option<LockEntry> {
        self.state.get(name).cloned()
    }
}

pub(crate) fn token_key(e: &LockEntry) -> TokenKey {
    match &e.body {
        LockBody::Foreign { key: Some(k), .. } => (**k).clone(),
        other => panic!("not a token key: {other:?}"),
    }
}

fn spec(server: &RedisServer, query: &str) -> StoreSpec {
    StoreSpec::parse(&format!("{}{query}", server.url())).unwrap()
}

const SECOND: Duration = Duration::from_secs(1);

/// The harness itself: redis-py's lock is `SET key token NX PX ms`, and its
/// release deletes the key.
#[tokio::test]
async fn the_harness_holds_and_releases_a_redis_py_lock() {
    let server = RedisServer::start().await;
    let lock = PyLock::acquire(&server, 0, "jobs:nightly", Duration::from_secs(30));
    assert_eq!(
        raw_get(&server, "jobs:nightly").await.as_deref(),
        Some(lock.token.as_str())
    );
    assert!(lock.release(), "redis-py released its own lock");
    assert_eq!(raw_get(&server, "jobs:nightly").await, None);
}

/// A redis-py lock appears within 1 s with its token, TTL and the fence
/// derived from the token; released, it is gone within 1 s; a lock left to
/// expire is gone once its TTL runs out; keys outside `match=` are not shown.
#[tokio::test]
async fn redis_py_locks_appear_release_and_expire() {
    // Notifications of lists only: lockscope adds the classes it reads.
    let server = RedisServer::start_with(&["--notify-keyspace-events", "Kl"]).await;
    let mut w = Watch::start(&spec(&server, "?match=jobs:*"));
    w.until("live", 10 * SECOND, Watch::live).await;
    // docs/operations.md: "lockscope adds them with `CONFIG SET`, keeping what was on".
    let client = ::redis::Client::open(server.url()).unwrap();
    let mut con = client.get_multiplexed_async_connection().await.unwrap();
    let (_, flags): (String, String) = ::redis::cmd("CONFIG")
        .arg("GET")
        .arg("notify-keyspace-events")
        .query_async(&mut con)
        .await
        .unwrap();
    assert!("Kg$xel".chars().all(|c| flags.contains(c)), "{flags}");

    let lock = PyLock::acquire(&server, 0, "jobs:nightly", Duration::from_secs(30));
    let took = w
        .until("the lock shown", SECOND, |w| w.lock("jobs:nightly").is_some())
        .await;
    let e = w.lock("jobs:nightly").unwrap();
    let k = token_key(&e);
    assert_eq!(k.token, lock.token, "the holder's token");
    assert!(
        k.ttl_ms.is_some_and(|ms| (25_000..=30_000).contains(&ms)),
        "TTL left (PTTL): {k:?} after {took:?}"
    );
    assert_eq!(
        e.fence,
        fence_of(lock.token.as_bytes()),
        "the fence is derived from the token"
    );
    assert_eq!(e.holder_session(), None, "Redis keeps no sessions: none is invented");
    assert_eq!(
        w.state.waiters_of("jobs:nightly").count(),
        0,
        "this layout has no waiters"
    );

    let other = PyLock::acquire(&server, 0, "other:thing", Duration::from_secs(30));
    assert!(lock.release());
    w.until("released: gone", SECOND, |w| w.lock("jobs:nightly").is_none())
        .await;
    assert!(w.lock("other:thing").is_none(), "outside match=jobs:*");
    drop(other);

    // Held, never released: gone within 1 s of its TTL running out.
    let ttl = Duration::from_millis(1500);
    // Timed from redis-py's word that it holds the lock (its `SET … PX` is
    // done, a pipe read earlier): not from before python3 starts, which
    // under load took long enough to count against the 1 s.
    let short = PyLock::acquire(&server, 0, "jobs:short", ttl);
    let t0 = Instant::now();
    w.until("the short lock shown", SECOND, |w| w.lock("jobs:short").is_some())
        .await;
    w.until("expired: gone", 3 * SECOND, |w| w.lock("jobs:short").is_none())
        .await;
    assert!(
        t0.elapsed() < ttl + SECOND,
        "gone {:?} after its acquisition",
        t0.elapsed()
    );
    drop(short);
}

/// docs/operations.md: "Where `CONFIG` is refused and the classes are off,
/// the fleet is polled: a full scan every 1 s".
#[tokio::test]
async fn without_config_the_fleet_is_polled() {
    let server = RedisServer::start_with(&["--rename-command", "CONFIG", ""]).await;
    let mut w = Watch::start(&spec(&server, ""));
    w.until("live", 10 * SECOND, Watch::live).await;
    let lock = PyLock::acquire(&server, 0, "jobs:nightly", Duration::from_secs(30));
    let t0 = Instant::now();
    w.until("polled in", 2 * SECOND, |w| w.lock("jobs:nightly").is_some())
        .await;
    assert!(lock.release());
    w.until("polled out", 2 * SECOND, |w| w.lock("jobs:nightly").is_none())
        .await;
    assert!(t0.elapsed() < 3 * SECOND);
}

/// The guarded force-release: the fence seen deletes exactly that token's
/// key (the holder's redis-py then cannot release it); a stale fence answers
/// Changed with the current holder and deletes nothing.
#[tokio::test]
async fn the_fence_seen_releases_that_token_and_a_stale_one_is_changed() {
    let server = RedisServer::start().await;
    let spec = spec(&server, "");
    let fleet = spec.open().unwrap();
    let mut w = Watch::start(&spec);
    let first = PyLock::acquire(&server, 0, "jobs:nightly", Duration::from_secs(30));
    w.until("first shown", 10 * SECOND, |w| {
        w.live() && w.lock("jobs:nightly").is_some()
    })
    .await;
    let stale = w.lock("jobs:nightly").unwrap().fence;
    assert!(first.release());
    let second = PyLock::acquire(&server, 0, "jobs:nightly", Duration::from_secs(30));
    let neighbour = PyLock::acquire(&server, 0, "jobs:weekly", Duration::from_secs(30));
    let fence2 = fence_of(second.token.as_bytes());
    w.until("second shown", SECOND, |w| {
        w.lock("jobs:nightly").is_some_and(|e| e.fence == fence2)
    })
    .await;

    match fleet.release_seen("jobs:nightly", stale, None).await.unwrap() {
        Release::Changed(now) => {
            assert_eq!(now.fence, fence2);
            assert_eq!(token_key(&now).token, second.token, "the current holder");
        }
        other => panic!("a stale fence released: {other:?}"),
    }
    assert_eq!(
        raw_get(&server, "jobs:nightly").await.as_deref(),
        Some(second.token.as_str())
    );

    let released = fleet.release_seen("jobs:nightly", fence2, None).await.unwrap();
    assert!(matches!(released, Release::Released(_)), "{released:?}");
    assert_eq!(raw_get(&server, "jobs:nightly").await, None);
    assert_eq!(
        raw_get(&server, "jobs:weekly").await.as_deref(),
        Some(neighbour.token.as_str()),
        "only that token's key"
    );
    w.until("gone", SECOND, |w| w.lock("jobs:nightly").is_none()).await;
    assert!(!second.release(), "its holder no longer owns it");
    assert!(matches!(
        fleet.release_seen("jobs:nightly", fence2, None).await.unwrap(),
        Release::NotHeld
    ));

    let refused = fleet
        .blacklist(&lockscope_model::record::BlacklistRecord {
            v: lockscope_model::record::RECORD_VERSION,
            session: "anyone".into(),
            by: "test".into(),
            reason: "test".into(),
            at: 0,
        })
        .await
        .unwrap_err()
        .to_string();
    assert!(refused.contains("Redis has no sessions to end"), "{refused}");
}

/// A killed redis-server reads unreachable within 3 s; restarted, live again,
/// and what it holds then is scanned afresh.
#[tokio::test]
async fn a_killed_server_is_unreachable_and_a_restarted_one_live() {
    let mut server = RedisServer::start().await;
    let mut w = Watch::start(&spec(&server, ""));
    let held = PyLock::acquire(&server, 0, "jobs:nightly", Duration::from_secs(30));
    w.until("shown", 10 * SECOND, |w| w.live() && w.lock("jobs:nightly").is_some())
        .await;

    server.stop();
    let took = w
        .until("unreachable", 3 * SECOND, |w| {
            matches!(w.status, Some(StoreStatus::Unreachable { .. }))
        })
        .await;
    assert!(w.lock("jobs:nightly").is_some(), "the last known truth stays shown");
    drop(held);

    server.restart().await;
    let again = PyLock::acquire(&server, 0, "jobs:after", Duration::from_secs(30));
    w.until("live again, scanned afresh", 10 * SECOND, |w| {
        w.live() && w.lock("jobs:after").is_some() && w.lock("jobs:nightly").is_none()
    })
    .await;
    assert!(took < 3 * SECOND);
    drop(again);
}

/// docs/operations.md: "Notifications are lossy, so a full scan reconciles every 30 s all the
/// same" (here every 500 ms): a lock whose notification never came is shown by the next scan.
#[tokio::test]
async fn a_rescan_shows_what_a_lost_notification_did_not() {
    let server = RedisServer::start().await;
    let StoreSpec::Redis(target) = spec(&server, "") else {
        unreachable!()
    };
    let observer = lockscope_store::redis_set::RedisObserver::new(target).rescan_every(Duration::from_millis(500));
    let (tx, rx) = mpsc::channel(64);
    tokio::spawn(lockscope_store::Observer::run(Box::new(observer), tx));
    let mut w = Watch {
        state: FleetState::default(),
        status: None,
        rx,
    };
    w.until("live", 10 * SECOND, Watch::live).await;
    // The notifications stop (as when the subscriber's messages are lost).
    let client = ::redis::Client::open(server.url()).unwrap();
    let mut con = client.get_multiplexed_async_connection().await.unwrap();
    let () = ::redis::cmd("CONFIG")
        .arg("SET")
        .arg("notify-keyspace-events")
        .arg("")
        .query_async(&mut con)
        .await
        .unwrap();
    let lock = PyLock::acquire(&server, 0, "jobs:unnotified", Duration::from_secs(30));
    w.until("reconciled in", 2 * SECOND, |w| w.lock("jobs:unnotified").is_some())
        .await;
    assert!(lock.release());
    w.until("reconciled out", 2 * SECOND, |w| w.lock("jobs:unnotified").is_none())
        .await;
}

fn redisson(e: &LockEntry) -> lockscope_model::fleet::redis::RedissonLock {
    match &e.body {
        LockBody::Foreign { detail: Some(d), .. } => match &**d {
            lockscope_model::fleet::FamilyDetail::Redisson(r) => r.clone(),
            other => panic!("not Redisson: {other:?}"),
        },
        other => panic!("no detail: {other:?}"),
    }
}

/// Redisson's layouts, written by Redisson's own Lua (testing::REDISSON_*):
/// an `RLock` re-entered twice shows its client uuid as the session, the
/// thread and the count 2, its TTL; a fair lock's queue shows its waiters in
/// order with their deadlines; Redisson's unlock takes the count down, then
/// the lock away. The guarded release: a stale fence (another holder's
/// field) is Changed with the current holder; the fence shown deletes that
/// hash and publishes the unlock message on the lock's channel and on its
/// first waiter's, as Redisson's `forceUnlock` does, so waiters wake.
#[tokio::test]
async fn redisson_locks_are_shown_and_guardedly_released() {
    use futures::StreamExt;
    let server = RedisServer::start().await;
    let spec = spec(&server, "?match=rs:*");
    let fleet = spec.open().unwrap();
    let mut w = Watch::start(&spec);
    w.until("live", 10 * SECOND, Watch::live).await;
    let lease = Duration::from_secs(30);
    let mut a = Redisson::connect(&server, "6f1bc9e2-5a70-4b7e-9d1e-0c2f3a4b5c6d").await;
    let mut b = Redisson::connect(&server, "0d9e8f7a-1111-4222-8333-944455556666").await;
    assert_eq!(a.lock("rs:plain", 57, lease).await, None, "acquired");
    assert_eq!(a.lock("rs:plain", 57, lease).await, None, "re-entered");
    assert!(b.lock("rs:plain", 3, lease).await.is_some(), "another client waits");
    w.until("the RLock shown, count 2", SECOND, |w| {
        w.lock("rs:plain").is_some_and(|e| redisson(&e).count == 2)
    })
    .await;
    let e = w.lock("rs:plain").unwrap();
    assert_eq!(
        e.holder_session(),
        Some(a.uuid.as_str()),
        "the client uuid is the session"
    );
    assert_eq!(redisson(&e).thread, "57");
    let k = token_key(&e);
    assert_eq!(k.token, a.field(57));
    assert!(k.ttl_ms.is_some_and(|t| t > 25_000), "{k:?}");
    assert_eq!(e.fence, fence_of(a.field(57).as_bytes()));

    // Redisson's own unlock: the count goes down, then the hash goes.
    assert_eq!(a.unlock("rs:plain", 57, lease).await, Some(0));
    w.until("count 1", SECOND, |w| {
        w.lock("rs:plain").is_some_and(|e| redisson(&e).count == 1)
    })
    .await;
    assert_eq!(a.unlock("rs:plain", 57, lease).await, Some(1));
    w.until("unlocked: gone", SECOND, |w| w.lock("rs:plain").is_none())
        .await;

    // A fair lock: a holder and two queued waiters, in order.
    assert_eq!(a.fair_lock("rs:fair", 1, lease).await, None);
    assert!(b.fair_lock("rs:fair", 7, lease).await.is_some());
    assert!(b.fair_lock("rs:fair", 8, lease).await.is_some());
    w.until("the queue shown", SECOND, |w| {
        w.lock("rs:fair").is_some_and(|e| redisson(&e).queue.len() == 2)
    })
    .await;
    let fair = w.lock("rs:fair").unwrap();
    assert_eq!(redisson(&fair).queue_truncated_at, None, "the whole queue: 2 < 1000");
    // docs/operations.md: "A queue is read up to its first 1000 waiters (the
    // fleet's `queue=N`, default 1000)": past that, "more than N waiters" and
    // `queue_truncated_at` N. The same server, a fleet asking `queue=1`.
    let short_spec = StoreSpec::parse(&format!("{}?match=rs:*&queue=1", server.url())).unwrap();
    let mut short = Watch::start(&short_spec);
    short
        .until("the queue cut at 1", 10 * SECOND, |w| {
            w.lock("rs:fair")
                .is_some_and(|e| redisson(&e).queue_truncated_at == Some(1))
        })
        .await;
    let cut = redisson(&short.lock("rs:fair").unwrap());
    assert_eq!(
        cut.queue.iter().map(|q| q.id.as_str()).collect::<Vec<_>>(),
        [b.field(7)],
        "only the first waiter read and shown"
    );
    drop(short);
    let queue = redisson(&fair).queue;
    assert_eq!(
        queue.iter().map(|q| q.id.as_str()).collect::<Vec<_>>(),
        [b.field(7), b.field(8)],
        "in queue order"
    );
    assert!(queue
        .iter()
        .all(|q| q.deadline.is_some_and(|d| d > lockscope_store::now_ms())));
    assert_eq!(
        w.state.waiters_of("rs:fair").collect::<Vec<_>>(),
        [b.uuid.as_str()],
        "the waiting client's session"
    );

    // The guarded release: stale → Changed, nothing deleted.
    let stale = fence_of(b.field(7).as_bytes());
    match fleet.release_seen("rs:fair", stale, None).await.unwrap() {
        Release::Changed(now) => assert_eq!(token_key(&now).token, a.field(1), "the current holder"),
        other => panic!("a stale fence released: {other:?}"),
    }
    let client = ::redis::Client::open(server.url()).unwrap();
    let mut pubsub = client.get_async_pubsub().await.unwrap();
    pubsub.subscribe("redisson_lock__channel:{rs:fair}").await.unwrap();
    pubsub
        .subscribe(format!("redisson_lock__channel:{{rs:fair}}:{}", b.field(7)))
        .await
        .unwrap();
    let released = fleet.release_seen("rs:fair", fair.fence, None).await.unwrap();
    assert!(matches!(released, Release::Released(_)), "{released:?}");
    let mut messages = pubsub.on_message();
    let mut woken = Vec::new();
    for _ in 0..2 {
        let m = tokio::time::timeout(SECOND, messages.next()).await.unwrap().unwrap();
        woken.push((m.get_channel_name().to_string(), m.get_payload::<String>().unwrap()));
    }
    woken.sort();
    assert_eq!(
        woken,
        [
            ("redisson_lock__channel:{rs:fair}".to_string(), "0".to_string()),
            (
                format!("redisson_lock__channel:{{rs:fair}}:{}", b.field(7)),
                "0".to_string()
            ),
        ],
        "the unlock message, as Redisson publishes it"
    );
    // The first waiter proceeds by Redisson's own script.
    assert_eq!(
        b.fair_lock("rs:fair", 7, lease).await,
        None,
        "the first waiter takes it"
    );
    w.until("the next holder", SECOND, |w| {
        w.lock("rs:fair").is_some_and(|e| token_key(&e).token == b.field(7))
    })
    .await;
}

/// docs/operations.md: "a rescan sends only what changed: an unchanged
/// database emits no event" (the rescan every 300 ms here).
#[tokio::test]
async fn a_rescan_of_an_unchanged_database_emits_no_event() {
    let server = RedisServer::start().await;
    let StoreSpec::Redis(target) = spec(&server, "") else {
        unreachable!()
    };
    let observer = lockscope_store::redis_set::RedisObserver::new(target).rescan_every(Duration::from_millis(300));
    let (tx, rx) = mpsc::channel(64);
    tokio::spawn(lockscope_store::Observer::run(Box::new(observer), tx));
    let mut w = Watch {
        state: FleetState::default(),
        status: None,
        rx,
    };
    let lock = PyLock::acquire(&server, 0, "jobs:still", Duration::from_secs(30));
    let mut r = Redisson::connect(&server, "6f1bc9e2-5a70-4b7e-9d1e-0c2f3a4b5c6d").await;
    assert_eq!(r.lock("rs:still", 1, Duration::from_secs(30)).await, None);
    w.until("both shown", 10 * SECOND, |w| {
        w.live() && w.lock("jobs:still").is_some() && w.lock("rs:still").is_some()
    })
    .await;
    // Four rescans' time: nothing changed, nothing sent but that each rescan
    // ran (when it looked, for the overview).
    let until = tokio::time::Instant::now() + Duration::from_millis(1300);
    let mut looks = 0;
    while let Ok(got) = tokio::time::timeout_at(until, w.rx.recv()).await {
        match got {
            Some(ObserverEvent::Looked(p)) => {
                assert_eq!(p.every_ms, 300, "{p:?}");
                looks += 1;
            }
            other => panic!("a rescan with nothing changed sent {other:?}"),
        }
    }
    assert!(looks >= 3, "{looks} rescans in 1.3 s");
    drop(lock);
}
