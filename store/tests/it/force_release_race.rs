//! A guarded force-release (`FleetStore::release(name, fence)`, the admin's
//! compare-and-set on the fencing token it saw) never deletes an acquisition other
//! than the one it names, while the holder releases and re-acquires the same lock
//! in a tight loop — against a real etcd, a real PostgreSQL, SQLite (a file) and
//! ScyllaDB (in memory, or the cluster `SCYLLA_URI` names).
//!
//! Two loops run at once, neither sleeps. The holder: acquire `race/1` through the
//! protocol, every other round extend it once, release it with its own fence
//! (`false`: not ours anymore). The admin: read the lock's fence (`LockStore::get`;
//! when the lock is free just now it uses the last fence it saw, a stale view),
//! then force-release that fence. Checked at the end:
//! 1. every admin `Released(f)` names a fence the holder really acquired;
//! 2. every fence the holder found lost (extend `Lost` or release `false`) is one
//!    the admin reported `Released` — otherwise something else deleted it;
//! 3. fences strictly increase: no acquisition reuses a fence;
//! 4. each admin `Released(f)` is reported once and its holder then found it lost;
//!
//! and `Changed` names another acquisition of the holder's. Some `Released`, and
//! some `Changed`/`NotHeld` on a fence the admin had just read (the holder got
//! there first), must occur, or the race did not happen.
//!
//! `LOCKSCOPE_RACE_ROUNDS` admin attempts per store (default 500). The full run:
//! `LOCKSCOPE_RACE_ROUNDS=10000 cargo test -p lockscope-store --test it force_release_race -- --nocapture`

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use lockscope_store::fleet::{FleetStore, Release};
use lockscope_store::now_ms;
use lockscope_store::protocol::{Attempt, Extend, LockStore};
use lockscope_store::spec::StoreSpec;
use lockscope_store::testing::{record, EtcdServer, PgServer};

const LOCK: &str = "race/1";

fn rounds() -> usize {
    std::env::var("LOCKSCOPE_RACE_ROUNDS")
        .map(|v| v.parse().expect("LOCKSCOPE_RACE_ROUNDS: a number of rounds"))
        .unwrap_or(500)
}

/// One operation's outcome: what, the fence it was about, and the fence found
/// there instead (`Changed`, `Busy`). A read that found the lock free is about fence 0.
type Event = (&'static str, i64, Option<i64>);

/// Every operation's outcome with a logical start and end time (one counter for
/// both sides), so a failure can be told as a sequence of overlapping events.
#[derive(Default)]
struct Log {
    clock: AtomicUsize,
    events: Mutex<Vec<(usize, usize, Event)>>,
}

impl Log {
    fn tick(&self) -> usize {
        self.clock.fetch_add(1, Ordering::SeqCst)
    }

    fn push(&self, start: usize, what: &'static str, fence: i64, other: Option<i64>) {
        let end = self.tick();
        self.events.lock().unwrap().push((start, end, (what, fence, other)));
    }

    fn about(&self, f: i64) -> String {
        let events = self.events.lock().unwrap();
        let mut lines: Vec<_> = events.iter().filter(|e| e.2 .1 == f || e.2 .2 == Some(f)).collect();
        lines.sort_by_key(|e| e.0);
        lines
            .iter()
            .map(|(s, e, ev)| format!("\n    [{s}..{e}] {ev:?}"))
            .collect()
    }
}

#[derive(Default)]
struct Holder {
    rounds: usize,
    acquired: Vec<i64>,
    own_releases: usize,
    /// Fences the holder found not ours anymore (extend or release).
    lost: BTreeSet<i64>,
    lost_on_extend: usize,
    /// Extend said lost, yet the release then deleted it.
    lost_then_released: Vec<i64>,
    fence_reuse: Vec<i64>,
    busy: usize,
}

async fn holder<S: LockStore>(store: S, stop: Arc<AtomicBool>, log: Arc<Log>) -> Holder {
    let mut h = Holder::default();
    let mut last = 0;
    while !stop.load(Ordering::SeqCst) {
        h.rounds += 1;
        let mut rec = record(&format!("holder-{}", h.rounds), "race", now_ms());
        let t = log.tick();
        let fence = match store.try_acquire(LOCK, &rec).await.expect("try_acquire") {
            Attempt::Acquired { fence } => fence,
            Attempt::Busy { holder, .. } => {
                // Nobody else takes this lock, and every round ends it: a bug.
                log.push(t, "holder: busy", 0, holder.map(|e| e.fence));
                h.busy += 1;
                continue;
            }
        };
        log.push(t, "holder: acquired", fence, None);
        if fence <= last {
            h.fence_reuse.push(fence);
        }
        last = last.max(fence);
        h.acquired.push(fence);
        let mut lost = false;
        if h.rounds % 2 == 0 {
            rec.heartbeat_at = now_ms();
            let t = log.tick();
            match store.extend(LOCK, fence, &rec).await.expect("extend") {
                Extend::Extended => log.push(t, "holder: extended", fence, None),
                Extend::Lost => {
                    log.push(t, "holder: extend lost", fence, None);
                    h.lost_on_extend += 1;
                    lost = true;
                }
                Extend::Blacklisted => panic!("nobody is blacklisted in this test"),
            }
        }
        let t = log.tick();
        if store.release(LOCK, fence).await.expect("release") {
            log.push(t, "holder: released", fence, None);
            h.own_releases += 1;
            if lost {
                h.lost_then_released.push(fence);
            }
        } else {
            log.push(t, "holder: release lost", fence, None);
            lost = true;
        }
        if lost {
            h.lost.insert(fence);
        }
    }
    h
}

#[derive(Default)]
struct Admin {
    attempts: usize,
    stale: usize,
    /// `Changed`/`NotHeld` on a fence read just before: the holder won the race.
    raced: usize,
    released: Vec<i64>,
    not_held: usize,
    /// (fence released, fence found instead)
    changed: Vec<(i64, i64)>,
}

async fn admin<S: LockStore>(reader: S, fleet: Arc<dyn FleetStore>, rounds: usize, log: Arc<Log>) -> Admin {
    let mut a = Admin::default();
    let mut seen = None;
    while a.attempts < rounds {
        let t = log.tick();
        let now = reader.get(LOCK).await.expect("get").map(|e| e.fence);
        log.push(t, "admin: read", now.unwrap_or(0), None);
        let Some(fence) = now.or(seen) else {
            continue; // not acquired yet at all
        };
        seen = Some(fence);
        a.stale += now.is_none() as usize;
        a.attempts += 1;
        let t = log.tick();
        match fleet.release(LOCK, fence).await.expect("force-release") {
            Release::Released(_) => {
                log.push(t, "admin: Released", fence, None);
                a.released.push(fence);
            }
            Release::NotHeld => {
                log.push(t, "admin: NotHeld", fence, None);
                a.not_held += 1;
                a.raced += now.is_some() as usize;
            }
            Release::Changed(e) => {
                log.push(t, "admin: Changed", fence, Some(e.fence));
                a.changed.push((fence, e.fence));
                a.raced += now.is_some() as usize;
            }
        }
    }
    a
}

/// The race on one store: the holder and the reader through the protocol
/// (`StoreSpec::connect`), the admin through the dashboard's `StoreSpec::open`.
async fn race(label: &str, spec: StoreSpec) {
    let rounds = rounds();
    // One after the other: the first applies SQL migrations.
    let holder_store = spec.connect().await.expect("connect holder");
    let reader = spec.connect().await.expect("connect reader");
    let fleet = spec.open().expect("open fleet");
    let (log, stop) = (Arc::new(Log::default()), Arc::new(AtomicBool::new(false)));
    let started = Instant::now();
    let h = tokio::spawn(holder(holder_store, stop.clone(), log.clone()));
    let a = tokio::spawn(admin(reader.clone(), fleet, rounds, log.clone()));
    let a = a.await.expect("admin task");
    stop.store(true, Ordering::SeqCst);
    let h = h.await.expect("holder task");
    let took = started.elapsed();

    let acquired: BTreeSet<i64> = h.acquired.iter().copied().collect();
    let released: BTreeSet<i64> = a.released.iter().copied().collect();
    let not_acquired: Vec<i64> = released.difference(&acquired).copied().collect(); // (1)
    let deleted_by_other: Vec<i64> = h.lost.difference(&released).copied().collect(); // (2)
    let not_lost: Vec<i64> = released.difference(&h.lost).copied().collect(); // (4)
    let twice = a.released.len() - released.len(); // (4)
    let wrong_deletions = not_acquired.len() + deleted_by_other.len() + not_lost.len() + twice;
    let bad_changed: Vec<(i64, i64)> = a
        .changed
        .iter()
        .copied()
        .filter(|&(seen, now)| now == seen || !acquired.contains(&now))
        .collect();
    let left = reader.get(LOCK).await.expect("get").map(|e| e.fence);

    eprintln!(
        "{label}: {} admin attempts in {took:.2?}: released {}, changed {}, not-held {} ({} on a stale fence, {} lost the race on a fresh one); \
         holder {} rounds: {} acquisitions, {} own releases, {} lost ({} seen by extend); \
         wrong deletions {wrong_deletions}, fence reuse {}, busy {}",
        a.attempts,
        a.released.len(),
        a.changed.len(),
        a.not_held,
        a.stale,
        a.raced,
        h.rounds,
        h.acquired.len(),
        h.own_releases,
        h.lost.len(),
        h.lost_on_extend,
        h.fence_reuse.len(),
        h.busy,
    );
    let bad: BTreeSet<i64> = [
        &not_acquired,
        &deleted_by_other,
        &not_lost,
        &h.fence_reuse,
        &h.lost_then_released,
    ]
    .into_iter()
    .flatten()
    .copied()
    .chain(bad_changed.iter().map(|c| c.0))
    .collect();
    for f in bad.iter().take(5) {
        eprintln!("{label}: events about fence {f}:{}", log.about(*f));
    }
    assert!(
        h.fence_reuse.is_empty(),
        "{label}: fences not increasing (3): {:?}",
        h.fence_reuse
    );
    assert_eq!(
        wrong_deletions, 0,
        "{label}: released but never acquired (1) {not_acquired:?}; lost but not force-released (2) \
         {deleted_by_other:?}; force-released but not lost (4) {not_lost:?}; released twice {twice}"
    );
    assert!(
        h.lost_then_released.is_empty(),
        "{label}: extend said lost, release then deleted: {:?}",
        h.lost_then_released
    );
    assert!(
        bad_changed.is_empty(),
        "{label}: Changed to itself or to an unknown acquisition: {bad_changed:?}"
    );
    assert_eq!(
        h.busy, 0,
        "{label}: the lock was held by someone the holder did not know"
    );
    assert_eq!(left, None, "{label}: the lock is still held after the last round");
    assert!(
        !a.released.is_empty() && a.raced > 0,
        "{label}: no race happened (released {}, changed or not-held on a fresh fence {})",
        a.released.len(),
        a.raced
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd() {
    let etcd = EtcdServer::start().await;
    let spec = StoreSpec::Etcd {
        endpoints: vec![etcd.endpoint()],
        prefix: Some("/race/".into()),
    };
    race("etcd", spec).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres() {
    let pg = PgServer::start().await;
    race("postgres", StoreSpec::Sql { url: pg.url() }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite() {
    let dir = tempfile::tempdir().unwrap();
    race("sqlite", StoreSpec::sqlite_file(&dir.path().join("locks.db"))).await;
}

/// In memory unless `SCYLLA_URI` names a cluster (`contract_scylla`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scylla() {
    let ks = lockscope_store::testing::scylla::TestKeyspace::new("race").await;
    ks.connect().await;
    // Without a network's delay the in-memory keyspace answers so fast that,
    // on a busy machine, the admin's read and release never straddle the
    // holder's release: the race would not happen.
    ks.set_latency(std::time::Duration::from_micros(200));
    race("scylla", ks.spec()).await;
}
