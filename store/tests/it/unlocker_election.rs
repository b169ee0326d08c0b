//! The unlocker role: dashboard replicas elect one unlocker through the fleet's
//! own store (`FleetStore::campaign`), and every release the unlocker makes is
//! fenced by its leadership's term in the same store transaction, so that a
//! deposed leader releases nothing — against a real etcd, a real PostgreSQL and
//! SQLite (a file), and ScyllaDB (in memory, where
//! the fencing is two steps, see `store/src/scylla/unlocker.rs`). Each case is written once over `FleetStore` and run per store;
//! each replica is its own `StoreSpec::open` (its own connection).
//!
//! 1. `exclusive_election`: two candidates campaign at once; exactly one is
//!    elected and `unlocker()` names it; the other is elected only after the
//!    first resigns, with a higher term.
//! 2. `lease_expiry_hands_over`: the leader stops keeping its lease (ttl 2 s)
//!    alive; the other is elected within ttl + 2 s; the old leader's
//!    `keep_alive` then says lost and its fenced release is `Deposed`, deleting
//!    nothing.
//! 3. `a_paused_leader_releases_nothing`: leader A is silent past its ttl (as
//!    if SIGSTOPped) while B campaigns and wins; A, waking, releases an
//!    expired-looking lock: `Deposed`, nothing deleted; B's release of the same
//!    (name, fence) is `Released`.
//! 4. `stale_fences_release_nothing`: a current leader's release with a fence
//!    that no longer holds the lock is `Changed` (or `NotHeld` when free) and
//!    deletes nothing.
//!
//! `-- --nocapture` prints each case's timings.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::{select, Either};
use lockscope_store::fleet::{Fenced, FleetStore, Leadership, Release, UnlockerInfo};
use lockscope_store::now_ms;
use lockscope_store::protocol::{Attempt, LockStore};
use lockscope_store::spec::{AnyLocks, StoreSpec};
use lockscope_store::testing::{record, take, EtcdServer, PgServer};
use lockscope_store::StoreError;
use tokio::task::JoinHandle;

/// A store for one case, kept running as long as the case.
struct Store {
    label: &'static str,
    spec: StoreSpec,
    _server: Server,
}

#[allow(dead_code)] // held only to be dropped at the end
enum Server {
    Etcd(EtcdServer),
    Postgres(PgServer),
    Sqlite(tempfile::TempDir),
    Scylla(lockscope_store::testing::scylla::TestKeyspace),
}

async fn etcd() -> Store {
    let etcd = EtcdServer::start().await;
    Store {
        label: "etcd",
        spec: StoreSpec::Etcd {
            endpoints: vec![etcd.endpoint()],
            prefix: Some("/unlocker-test/".into()),
        },
        _server: Server::Etcd(etcd),
    }
}

async fn postgres() -> Store {
    let pg = PgServer::start().await;
    Store {
        label: "postgres",
        spec: StoreSpec::Sql { url: pg.url() },
        _server: Server::Postgres(pg),
    }
}

async fn sqlite() -> Store {
    let dir = tempfile::tempdir().unwrap();
    Store {
        label: "sqlite",
        spec: StoreSpec::sqlite_file(&dir.path().join("locks.db")),
        _server: Server::Sqlite(dir),
    }
}

/// In memory unless `SCYLLA_URI` names a cluster (`contract_scylla`).
async fn scylla() -> Store {
    let ks = lockscope_store::testing::scylla::TestKeyspace::new("unlocker").await;
    Store {
        label: "scylla",
        spec: ks.spec(),
        _server: Server::Scylla(ks),
    }
}

impl Store {
    /// The protocol's side (takes locks, reads them); connecting first applies
    /// the SQL migrations once, before the replicas race to.
    async fn locks(&self) -> AnyLocks {
        self.spec.connect().await.expect("connect")
    }

    /// One dashboard replica's handle on the fleet.
    fn replica(&self) -> Arc<dyn FleetStore> {
        self.spec.open().expect("open fleet")
    }
}

fn campaign(
    fleet: &Arc<dyn FleetStore>,
    candidate: &'static str,
    ttl: Duration,
) -> JoinHandle<Result<Box<dyn Leadership>, StoreError>> {
    let fleet = fleet.clone();
    tokio::spawn(async move { fleet.campaign(candidate, ttl).await })
}

/// Waits for a campaign at most `max`.
async fn elected(
    label: &str,
    h: JoinHandle<Result<Box<dyn Leadership>, StoreError>>,
    max: Duration,
) -> Box<dyn Leadership> {
    tokio::time::timeout(max, h)
        .await
        .unwrap_or_else(|_| panic!("{label}: not elected within {max:?}"))
        .expect("campaign task")
        .expect("campaign")
}

fn info(l: &dyn Leadership) -> Option<UnlockerInfo> {
    Some(UnlockerInfo {
        candidate: l.candidate().to_string(),
        term: l.term(),
    })
}

/// A lock held through the protocol whose record ran out long ago (what the
/// unlocker releases); returns its fence.
async fn take_expired(locks: &AnyLocks, name: &str) -> i64 {
    let rec = record("worker", "expired", now_ms() - 300_000);
    assert!(rec.auto_unlock_at < now_ms());
    match locks.try_acquire(name, &rec).await.expect("try_acquire") {
        Attempt::Acquired { fence } => fence,
        Attempt::Busy { holder, .. } => panic!("{name} already held: {holder:?}"),
    }
}

/// The store revision `name` is at now (0: not held): what an unlocker saw.
async fn revision_of(locks: &AnyLocks, name: &str) -> i64 {
    locks.get(name).await.expect("get").map_or(0, |e| e.revision)
}

async fn fence_of(locks: &AnyLocks, name: &str) -> Option<i64> {
    locks.get(name).await.expect("get").map(|e| e.fence)
}

/// 1. Two candidates campaign at once: exactly one is elected and named; the
///    other only once the first resigns, with a higher term.
async fn exclusive_election(store: Store) {
    let label = store.label;
    let ttl = Duration::from_secs(5);
    store.locks().await;
    let (a, b) = (store.replica(), store.replica());
    assert_eq!(a.unlocker().await.unwrap(), None, "{label}: nobody elected yet");

    let started = Instant::now();
    let (first, other) = match select(campaign(&a, "replica-a", ttl), campaign(&b, "replica-b", ttl)).await {
        Either::Left((won, other)) | Either::Right((won, other)) => (won.unwrap().expect("campaign"), other),
    };
    let elected_in = started.elapsed();
    assert_eq!(
        a.unlocker().await.unwrap(),
        info(&*first),
        "{label}: unlocker() names the leader"
    );
    assert_eq!(
        b.unlocker().await.unwrap(),
        info(&*first),
        "{label}: seen from the other replica"
    );

    // The other keeps campaigning while the leader keeps its lease.
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(first.keep_alive().await.unwrap(), "{label}: the leader keeps its role");
        assert!(!other.is_finished(), "{label}: two leaders at once");
    }
    assert_eq!(b.unlocker().await.unwrap(), info(&*first));

    let (first_term, first_name) = (first.term(), first.candidate().to_string());
    let resigned = Instant::now();
    first.resign().await.expect("resign");
    let second = elected(label, other, Duration::from_secs(3)).await;
    let handed_over_in = resigned.elapsed();
    assert_ne!(second.candidate(), first_name, "{label}");
    assert!(
        second.term() > first_term,
        "{label}: term {} after {first_term}",
        second.term()
    );
    assert_eq!(
        a.unlocker().await.unwrap(),
        info(&*second),
        "{label}: names the new leader"
    );
    assert!(second.keep_alive().await.unwrap());
    let second_term = second.term();
    second.resign().await.expect("resign");
    assert_eq!(a.unlocker().await.unwrap(), None, "{label}: nobody after resigning");
    eprintln!(
        "{label}: exclusive election: first elected in {elected_in:.2?} (term {first_term}), \
         the other {handed_over_in:.2?} after the resignation (term {second_term})"
    );
}

/// 2. The leader stops keeping its lease alive: the other is elected within
///    ttl + 2 s; the old leader then learns it is deposed and releases nothing.
async fn lease_expiry_hands_over(store: Store) {
    let label = store.label;
    let ttl = Duration::from_secs(2);
    let locks = store.locks().await;
    let (a, b) = (store.replica(), store.replica());
    let old = a.campaign("replica-a", ttl).await.expect("campaign");
    let fence = take(&locks, "jobs/nightly").await;

    // The last keep-alive, then silence.
    let sent = Instant::now();
    assert!(
        old.keep_alive().await.unwrap(),
        "{label}: keep-alive of a fresh leadership"
    );
    let new = elected(label, campaign(&b, "replica-b", ttl), ttl + Duration::from_secs(3)).await;
    let took = sent.elapsed();
    assert!(
        took <= ttl + Duration::from_secs(2),
        "{label}: elected {took:.2?} after the last keep-alive (ttl {ttl:?})"
    );
    assert!(
        took >= ttl.mul_f64(0.9),
        "{label}: elected {took:.2?} after the last keep-alive, while the lease (ttl {ttl:?}) ran"
    );
    assert!(
        new.term() > old.term(),
        "{label}: term {} after {}",
        new.term(),
        old.term()
    );
    assert_eq!(b.unlocker().await.unwrap(), info(&*new));

    assert!(
        !old.keep_alive().await.unwrap(),
        "{label}: the old leader's keep-alive says lost"
    );
    assert_eq!(
        old.release("jobs/nightly", fence, revision_of(&locks, "jobs/nightly").await)
            .await
            .unwrap(),
        Fenced::Deposed,
        "{label}: a deposed leader's release"
    );
    assert_eq!(
        fence_of(&locks, "jobs/nightly").await,
        Some(fence),
        "{label}: the lock is still held"
    );
    // Still not a leader after the failed keep-alive: the role does not come back.
    assert!(!old.keep_alive().await.unwrap(), "{label}");
    assert!(
        new.keep_alive().await.unwrap(),
        "{label}: the new leader keeps its role"
    );
    eprintln!(
        "{label}: lease expiry: the other elected {took:.2?} after the last keep-alive (ttl {ttl:?}), \
         term {} -> {}",
        old.term(),
        new.term()
    );
}

/// 3. A leader paused past its lease (SIGSTOP: it simply calls nothing) wakes up
///    after another was elected: its release of an expired-looking lock is
///    `Deposed` and deletes nothing; the new leader's release of the same lock
///    and fence deletes it.
async fn a_paused_leader_releases_nothing(store: Store) {
    let label = store.label;
    let ttl = Duration::from_secs(2);
    let locks = store.locks().await;
    let (a, b) = (store.replica(), store.replica());
    let paused = a.campaign("replica-a", ttl).await.expect("campaign");
    let fence = take_expired(&locks, "reports/daily").await;
    let seen = revision_of(&locks, "reports/daily").await;

    // A is "stopped" from here on; B campaigns and wins once A's lease runs out.
    let started = Instant::now();
    let leader = elected(label, campaign(&b, "replica-b", ttl), ttl + Duration::from_secs(3)).await;
    let took = started.elapsed();
    assert_eq!(a.unlocker().await.unwrap(), info(&*leader), "{label}");

    // A wakes and, believing itself the unlocker, releases the expired lock.
    let woke = Instant::now();
    assert_eq!(
        paused.release("reports/daily", fence, seen).await.unwrap(),
        Fenced::Deposed,
        "{label}: the paused leader's release"
    );
    let fenced_in = woke.elapsed();
    assert_eq!(
        fence_of(&locks, "reports/daily").await,
        Some(fence),
        "{label}: nothing deleted"
    );
    assert!(
        !paused.keep_alive().await.unwrap(),
        "{label}: the paused leader lost its role"
    );

    assert!(
        matches!(
            leader.release("reports/daily", fence, seen).await.unwrap(),
            Fenced::Done(Release::Released(_))
        ),
        "{label}: the current leader's release"
    );
    assert_eq!(fence_of(&locks, "reports/daily").await, None, "{label}: released");
    // And the old leader's release, replayed, still does nothing.
    assert_eq!(
        paused.release("reports/daily", fence, seen).await.unwrap(),
        Fenced::Deposed,
        "{label}"
    );
    eprintln!(
        "{label}: paused leader: B elected {took:.2?} into A's silence (ttl {ttl:?}), A's release \
         refused in {fenced_in:.2?}"
    );
}

/// 4. A current leader's release with a stale fence deletes nothing and says
///    what is there instead.
async fn stale_fences_release_nothing(store: Store) {
    let label = store.label;
    let locks = store.locks().await;
    let fleet = store.replica();
    let leader = fleet
        .campaign("replica-a", Duration::from_secs(5))
        .await
        .expect("campaign");
    let started = Instant::now();

    let old = take_expired(&locks, "sweep").await;
    assert!(locks.release("sweep", old).await.unwrap());
    let new = take_expired(&locks, "sweep").await;
    assert!(new > old, "{label}");
    let seen = revision_of(&locks, "sweep").await;
    match leader.release("sweep", old, seen).await.unwrap() {
        Fenced::Done(Release::Changed(now)) => assert_eq!(now.fence, new, "{label}: names the new acquisition"),
        other => panic!("{label}: a stale fence released with {other:?}"),
    }
    assert_eq!(fence_of(&locks, "sweep").await, Some(new), "{label}: nothing deleted");
    // A fence never issued, too.
    assert!(matches!(
        leader.release("sweep", new + 1000, seen).await.unwrap(),
        Fenced::Done(Release::Changed(_))
    ));
    assert_eq!(fence_of(&locks, "sweep").await, Some(new), "{label}: nothing deleted");
    // The right fence, but extended since it was seen (its auto_unlock_at moved):
    // nothing deleted either.
    let extended = record("worker", "expired", now_ms() - 300_000);
    locks.extend("sweep", new, &extended).await.expect("extend");
    assert!(
        revision_of(&locks, "sweep").await > seen,
        "{label}: an extension moves the revision"
    );
    match leader.release("sweep", new, seen).await.unwrap() {
        Fenced::Done(Release::Changed(now)) => assert_eq!(now.fence, new, "{label}"),
        other => panic!("{label}: a lock extended since it was seen was released with {other:?}"),
    }
    assert_eq!(fence_of(&locks, "sweep").await, Some(new), "{label}: nothing deleted");

    // Free: not held.
    assert!(locks.release("sweep", new).await.unwrap());
    assert_eq!(
        leader.release("sweep", new, seen).await.unwrap(),
        Fenced::Done(Release::NotHeld),
        "{label}"
    );
    assert_eq!(
        leader.release("never-taken", 1, 1).await.unwrap(),
        Fenced::Done(Release::NotHeld),
        "{label}"
    );
    assert!(matches!(
        leader.release("", 1, 1).await,
        Err(StoreError::InvalidName { .. })
    ));
    assert!(leader.keep_alive().await.unwrap(), "{label}: still the leader");
    leader.resign().await.unwrap();
    eprintln!("{label}: stale fences: checked in {:.2?}", started.elapsed());
}

macro_rules! per_store {
    ($case:ident) => {
        mod $case {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn etcd() {
                super::$case(super::etcd().await).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres() {
                super::$case(super::postgres().await).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() {
                super::$case(super::sqlite().await).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn scylla() {
                super::$case(super::scylla().await).await;
            }
        }
    };
}

per_store!(exclusive_election);
per_store!(lease_expiry_hands_over);
per_store!(a_paused_leader_releases_nothing);
per_store!(stale_fences_release_nothing);

/// A ShedLock table is only observed: no replica may become its unlocker.
#[tokio::test]
async fn read_only_fleets_refuse() {
    let fleet = StoreSpec::parse("shedlock+sqlite:/nonexistent/shedlock.db")
        .unwrap()
        .open()
        .unwrap();
    assert!(matches!(
        fleet.campaign("replica-a", Duration::from_secs(5)).await,
        Err(StoreError::ReadOnly { .. })
    ));
    assert!(matches!(fleet.unlocker().await, Err(StoreError::ReadOnly { .. })));
}

/// A candidate must have a name to be shown by.
#[tokio::test]
async fn a_candidate_needs_a_name() {
    let dir = tempfile::tempdir().unwrap();
    let fleet = StoreSpec::sqlite_file(&dir.path().join("locks.db")).open().unwrap();
    assert!(matches!(
        fleet.campaign("", Duration::from_secs(5)).await,
        Err(StoreError::Config(_))
    ));
}
