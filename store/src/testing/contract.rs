//! The lock protocol's contract suite: what every store must do, written once over
//! [`LockStore`] and the client library. Each store's test file calls these
//! functions with its own store (`store/tests/it/contract_etcd.rs` for etcd); ScyllaDB
//! and SQL call the same ones.
//!
//! `connect` makes a new, independent client of the store under test, as a
//! separate worker process would have.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lockscope_model::record::{BlacklistRecord, Stored, RECORD_VERSION};
use tokio::time::Instant;

use super::take;

/// The answers to what second implementations had to guess (issue 23).
pub use super::contract_rules::*;
use crate::client::{LockOptions, LossReason, Session, SessionConfig};
use crate::protocol::{Attempt, Blacklisting, LockStore};
use crate::{now_ms, StoreError};

/// Options for contract tests: no backtrace, a generous deadline.
pub fn opts(purpose: &str) -> LockOptions {
    LockOptions::new(purpose, Duration::from_secs(60))
        .deadline(Duration::from_secs(60))
        .without_backtrace()
}

/// A session whose periodic heartbeat stays out of the way (tests call
/// `heartbeat_now` or `alive` when they want one).
pub fn quiet(service: &str) -> SessionConfig {
    let mut c = SessionConfig::new(service);
    c.heartbeat_every = Duration::from_secs(30);
    c.session_ttl = Duration::from_secs(60);
    c
}

async fn open<S: LockStore>(store: S, service: &str) -> Session<S> {
    Session::open(store, quiet(service)).await.expect("session opens")
}

/// Acquire is exclusive; release needs the acquisition's fencing token; tokens grow.
pub async fn exclusive_acquire_and_fenced_release<S: LockStore>(store: S) {
    let fence = take(&store, "x").await;
    let intruder = super::record("intruder", "t", now_ms());
    match store.try_acquire("x", &intruder).await.unwrap() {
        Attempt::Busy {
            holder: Some(holder), ..
        } => {
            assert_eq!(holder.fence, fence);
            assert_eq!(holder.record().unwrap().owner, "owner-x");
        }
        other => panic!("acquired a held lock: {other:?}"),
    }
    assert!(
        !store.release("x", fence + 1).await.unwrap(),
        "a wrong fence must not release"
    );
    assert!(store.get("x").await.unwrap().is_some());
    assert!(store.release("x", fence).await.unwrap());
    assert!(store.get("x").await.unwrap().is_none());
    let again = take(&store, "x").await;
    assert!(again > fence, "fencing token grows across acquisitions");
    assert!(
        !store.release("x", fence).await.unwrap(),
        "an old token cannot release the new holder"
    );
    assert!(matches!(
        store.try_acquire("", &intruder).await,
        Err(StoreError::InvalidName { .. })
    ));
}

/// The increments each of `mutual_exclusion`'s 16 sessions makes: 200 (3,200
/// hand-offs of one lock) unless `LOCKSCOPE_MUTEX_INCREMENTS` says otherwise. The
/// longer race (500: 8,000 hand-offs, about a minute on PostgreSQL) runs on
/// demand, as docs/protocol.md's conformance section says; CI runs the short one
/// against every store to keep a fresh machine's test command under its budget.
pub fn mutual_exclusion_increments() -> usize {
    std::env::var("LOCKSCOPE_MUTEX_INCREMENTS")
        .map(|v| v.parse().expect("LOCKSCOPE_MUTEX_INCREMENTS: a number of increments"))
        .unwrap_or(200)
}

/// `workers` sessions each increment a shared counter `increments` times under
/// one lock, with a pause between read and write. The counter is a fenced
/// resource: it rejects a token not above every token it has seen.
pub async fn mutual_exclusion<S: LockStore>(connect: impl AsyncFn() -> S, workers: usize, increments: usize) {
    #[derive(Default)]
    struct Counter {
        value: usize,
        highest_fence: i64,
    }
    let counter = Arc::new(Mutex::new(Counter::default()));
    let mut tasks = Vec::new();
    for w in 0..workers {
        let session = open(connect().await, &format!("counter-{w}")).await;
        let counter = counter.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..increments {
                let guard = session.lock("contract/counter", opts("increment")).await.expect("lock");
                let read = counter.lock().unwrap().value;
                tokio::task::yield_now().await;
                {
                    let mut c = counter.lock().unwrap();
                    assert!(
                        guard.fence() > c.highest_fence,
                        "stale token {} after {}",
                        guard.fence(),
                        c.highest_fence
                    );
                    c.highest_fence = guard.fence();
                    c.value = read + 1;
                }
                assert!(guard.unlock().await.expect("unlock"), "unlock deleted our own lock");
            }
            session.close().await.expect("close");
        }));
    }
    for t in tasks {
        t.await.expect("worker");
    }
    assert_eq!(counter.lock().unwrap().value, workers * increments);
}

/// While one session holds a lock for `hold`, `waiters` sessions block on it.
/// `requests()` counts the store's requests: during the hold the count may grow
/// by at most `max_during_hold` (a store with notifications: ~0, however long the
/// hold), then every waiter gets the lock once.
pub async fn waiting_is_not_polling<S: LockStore>(
    connect: impl AsyncFn() -> S,
    requests: impl AsyncFn() -> u64,
    waiters: usize,
    hold: Duration,
    max_during_hold: u64,
) {
    let holder = open(connect().await, "holder").await;
    let guard = holder.lock("contract/hot", opts("long job")).await.unwrap();
    let mut tasks = Vec::new();
    for w in 0..waiters {
        let session = open(connect().await, &format!("waiter-{w}")).await;
        tasks.push(tokio::spawn(async move {
            let g = session
                .lock("contract/hot", opts("queued"))
                .await
                .expect("waiter gets the lock");
            assert!(g.unlock().await.unwrap());
            let c = session.contention();
            session.close().await.unwrap();
            c
        }));
    }
    // Let every waiter make its first attempt and start waiting.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = requests().await;
    tokio::time::sleep(hold).await;
    let during = requests().await - before;
    eprintln!("waiting_is_not_polling: {during} store requests during a {hold:?} hold with {waiters} waiters");
    assert!(
        during <= max_during_hold,
        "{during} store requests during a {hold:?} hold with {waiters} waiters (at most {max_during_hold} allowed)"
    );
    assert!(guard.unlock().await.unwrap());
    for t in tasks {
        let c = t.await.unwrap();
        assert_eq!(c.acquired, 1);
        assert!(c.conflicts >= 1, "each waiter found the lock held first");
        assert_eq!(c.waits(), 1, "one lock call, one wait-time sample");
    }
}

/// Heartbeats extend `auto_unlock_at`; a blacklisted session can neither extend
/// nor acquire, its guards report the loss, and its locks are not deleted.
pub async fn heartbeat_extends_and_blacklist_refuses<S: LockStore>(store: S) {
    let session = open(store.clone(), "heartbeat").await;
    let guard = session.lock("hb/one", opts("extend me")).await.unwrap();
    let first = store.get("hb/one").await.unwrap().unwrap();
    let r1 = first.record().unwrap().clone();

    tokio::time::sleep(Duration::from_millis(20)).await;
    guard.alive().await.unwrap();
    let second = store.get("hb/one").await.unwrap().unwrap();
    let r2 = second.record().unwrap().clone();
    assert_eq!(second.fence, first.fence, "a heartbeat keeps the acquisition");
    assert_eq!(
        (r2.owner.as_str(), r2.acquired_at, r2.alert_at),
        (r1.owner.as_str(), r1.acquired_at, r1.alert_at)
    );
    assert!(r2.heartbeat_at > r1.heartbeat_at);
    assert!(r2.auto_unlock_at > r1.auto_unlock_at, "alive() extends auto_unlock_at");

    tokio::time::sleep(Duration::from_millis(20)).await;
    session.heartbeat_now().await;
    let r3 = store.get("hb/one").await.unwrap().unwrap().record().unwrap().clone();
    assert!(
        r3.auto_unlock_at > r2.auto_unlock_at,
        "the session heartbeat extends it too"
    );

    // The record carries where `lock` was called: this function, not the library.
    let mut with_bt = opts("second lock");
    with_bt.backtrace = true;
    let other = session.lock("hb/two", with_bt).await.unwrap();
    let bt = store
        .get("hb/two")
        .await
        .unwrap()
        .unwrap()
        .record()
        .unwrap()
        .backtrace
        .clone();
    assert!(
        bt.first()
            .is_some_and(|f| f.contains("heartbeat_extends_and_blacklist_refuses")),
        "backtrace starts at the caller: {bt:#?}"
    );
    let entry = BlacklistRecord {
        v: RECORD_VERSION,
        session: session.id().to_string(),
        by: "contract-suite".into(),
        reason: "runaway worker".into(),
        at: now_ms(),
    };
    assert!(
        store.session_registered(session.id()).await.unwrap(),
        "a session is registered from the moment it opens"
    );
    assert!(!store.session_registered("no-such-session").await.unwrap());
    assert_eq!(store.blacklist(&entry).await.unwrap(), Blacklisting::Written);
    // docs/api.md: "blacklist only: the session is blacklisted already (the store writes an
    // entry only where there is none) | 409 | changed": a second blacklisting is a
    // create-if-absent that finds the first entry, and keeps its author, reason and time.
    let second = BlacklistRecord {
        by: "someone-else".into(),
        reason: "a second reason".into(),
        at: entry.at + 1,
        ..entry.clone()
    };
    assert_eq!(
        store.blacklist(&second).await.unwrap(),
        Blacklisting::Exists(Some(Stored::Record(entry.clone()))),
        "the second blacklisting writes nothing and reads the first entry back"
    );
    assert_eq!(
        store.blacklist(&second).await.unwrap(),
        Blacklisting::Exists(Some(Stored::Record(entry.clone()))),
        "and the first entry is still there as it was"
    );

    assert!(matches!(guard.alive().await, Err(StoreError::Blacklisted { .. })));
    assert_eq!(guard.loss(), Some(LossReason::Blacklisted));
    assert!(
        store.get("hb/one").await.unwrap().is_some(),
        "a blacklisted holder's lock is not deleted"
    );
    session.heartbeat_now().await;
    assert_eq!(
        other.loss(),
        Some(LossReason::Blacklisted),
        "the periodic heartbeat reports the loss"
    );
    assert!(matches!(
        session.lock("hb/three", opts("refused")).await,
        Err(StoreError::Blacklisted { .. })
    ));
    let again = Session::open_as(store.clone(), quiet("heartbeat"), session.id().to_string()).await;
    assert!(
        matches!(again, Err(StoreError::Blacklisted { .. })),
        "the id cannot register again"
    );
    assert!(session.contention().lost >= 2);
}

/// Nobody releases or extends a lock they do not hold; a guard whose lock was
/// taken away reports it and its unlock deletes nothing; a dropped guard releases.
pub async fn only_the_holder_releases<S: LockStore>(store: S) {
    let a = open(store.clone(), "a").await;
    let b = open(store.clone(), "b").await;
    let ga = a.lock("own/x", opts("a's work")).await.unwrap();
    let short = opts("b wants it").deadline(Duration::from_millis(300));
    assert!(matches!(b.lock("own/x", short).await, Err(StoreError::Deadline { .. })));
    assert!(!store.release("own/x", ga.fence() + 1).await.unwrap());
    assert_eq!(store.get("own/x").await.unwrap().unwrap().fence, ga.fence());

    // An operator releases exactly the acquisition they saw, and b takes the lock.
    assert!(store.release("own/x", ga.fence()).await.unwrap());
    let gb = b.lock("own/x", opts("b's work")).await.unwrap();
    assert!(gb.fence() > ga.fence());
    assert!(matches!(ga.alive().await, Err(StoreError::Lost { .. })));
    assert_eq!(ga.loss(), Some(LossReason::TakenAway));
    assert!(!ga.unlock().await.unwrap(), "the old guard's unlock deletes nothing");
    assert_eq!(store.get("own/x").await.unwrap().unwrap().fence, gb.fence());

    drop(gb);
    let deadline = Instant::now() + Duration::from_secs(5);
    while store.get("own/x").await.unwrap().is_some() {
        assert!(Instant::now() < deadline, "a dropped guard releases its lock");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// `workers` sessions take overlapping batches at once: every name is taken by
/// exactly one; each learns what is busy, and gets it once the others are done.
pub async fn overlapping_batches<S: LockStore>(connect: impl AsyncFn() -> S, workers: usize) {
    let names: Vec<String> = (0..workers * 10).map(|i| format!("batch/{i:03}")).collect();
    let wanted: Vec<Vec<String>> = (0..workers)
        .map(|w| (0..20).map(|k| names[(w * 10 + k) % names.len()].clone()).collect())
        .collect();
    let mut sessions = Vec::new();
    for w in 0..workers {
        sessions.push(open(connect().await, &format!("batcher-{w}")).await);
    }
    let rounds = sessions.iter().zip(&wanted).map(|(s, want)| async move {
        let refs: Vec<&str> = want.iter().map(String::as_str).collect();
        s.try_lock_batch(&refs, opts("batch")).await.expect("batch")
    });
    let batches = futures::future::join_all(rounds).await;

    let mut owner: BTreeMap<String, usize> = BTreeMap::new();
    for (w, batch) in batches.iter().enumerate() {
        let mut seen: Vec<String> = batch.taken.iter().map(|g| g.name().to_string()).collect();
        for g in &batch.taken {
            if let Some(prev) = owner.insert(g.name().to_string(), w) {
                panic!("{} taken by workers {prev} and {w}", g.name());
            }
        }
        seen.extend(batch.busy.iter().map(|(n, _)| n.clone()));
        seen.sort();
        let mut want = wanted[w].clone();
        want.sort();
        assert_eq!(seen, want, "worker {w}: taken + busy = asked");
    }
    assert_eq!(owner.len(), names.len(), "every name was taken by someone");

    // Worker 0 comes back for the rest once the others let go.
    let mut batches = batches.into_iter();
    let first = batches.next().unwrap();
    for b in batches {
        for g in b.taken {
            assert!(g.unlock().await.unwrap());
        }
    }
    let rest: Vec<&str> = first.busy.iter().map(|(n, _)| n.as_str()).collect();
    let second = sessions[0].try_lock_batch(&rest, opts("the rest")).await.unwrap();
    assert!(
        second.busy.is_empty(),
        "still busy: {:?}",
        second.busy.iter().map(|b| &b.0).collect::<Vec<_>>()
    );
    assert_eq!(second.taken.len(), rest.len());
}

/// A `lock` that cannot get the lock returns at its deadline (within `slack`).
pub async fn deadlines_are_exact<S: LockStore>(store: S, slack: Duration) {
    let holder = open(store.clone(), "holder").await;
    let _held = holder.lock("dl/x", opts("hold")).await.unwrap();
    let waiter = open(store, "waiter").await;
    let deadline = Duration::from_secs(1);
    let started = Instant::now();
    let r = waiter.lock("dl/x", opts("wait").deadline(deadline)).await;
    let took = started.elapsed();
    assert!(
        matches!(r, Err(StoreError::Deadline { .. })),
        "{:?}",
        r.map(|g| g.fence())
    );
    assert!(took >= deadline && took <= deadline + slack, "returned after {took:?}");
}

/// An operator force-releases the acquisition they saw while its holder releases
/// and another worker re-acquires: the operator's compare-and-set may only ever
/// delete the acquisition it names. `rounds` races; zero wrong deletions allowed.
pub async fn force_release_races_reacquire<S: LockStore>(store: S, rounds: usize) {
    let mut wrong = 0;
    let mut operator_won = 0;
    for round in 0..rounds {
        let seen = take(&store, "race/x").await;
        let (holder, operator) = (store.clone(), store.clone());
        let reacquire = tokio::spawn(async move {
            // The holder's own release races the operator's: either may win.
            let _ = holder.release("race/x", seen).await.unwrap();
            let rec = super::record(&format!("next-{round}"), "re-acquire", now_ms());
            match holder.try_acquire("race/x", &rec).await.unwrap() {
                Attempt::Acquired { fence } => Some(fence),
                Attempt::Busy { .. } => None,
            }
        });
        let force = tokio::spawn(async move { operator.release("race/x", seen).await.unwrap() });
        let (next, forced) = (reacquire.await.unwrap(), force.await.unwrap());
        operator_won += forced as usize;
        let now = store.get("race/x").await.unwrap();
        match next {
            Some(fence) => {
                if now.as_ref().map(|e| e.fence) != Some(fence) {
                    wrong += 1;
                }
                assert!(store.release("race/x", fence).await.unwrap() || now.is_none());
            }
            None => {
                // Busy means the old acquisition was still there when we tried;
                // whoever released it, the lock must now be free or ours to clean.
                if let Some(e) = now {
                    store.release("race/x", e.fence).await.unwrap();
                }
            }
        }
    }
    eprintln!("force_release_races_reacquire: {rounds} rounds, operator won {operator_won}, {wrong} wrong deletions");
    assert_eq!(
        wrong, 0,
        "a force-release deleted a lock someone else had just acquired"
    );
}
