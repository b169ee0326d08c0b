//! Two real `lockscope` processes as replicas of one etcd fleet, both with the
//! unlocker on: the role is held by one of them at a time, elected through etcd,
//! and every release is fenced by the leadership's term.
//!
//! - every expired lock is released exactly once (one Delete per key in etcd,
//!   one `Done` entry in the two audit logs together, by the active replica);
//! - the active replica killed (SIGKILL), the other takes over within the
//!   lease's ttl plus 2 s and releases what expires next, exactly once;
//! - the active replica paused (SIGSTOP) past its lease while due locks are in
//!   its view: the other takes over and releases them; woken (SIGCONT), the
//!   paused one releases nothing (its releases are refused as deposed) and no
//!   key is deleted twice.
//!
//! Locks are written directly through the lock protocol with a near
//! `auto_unlock_at` (no live session: the unlocker goes by `auto_unlock_at`);
//! etcd's own watch on `<prefix>locks/` counts the deletions per key.
//!
//! The tests run one after the other (a shared mutex): they are timing
//! sensitive and the machine may be small. `LOCKSCOPE_TEST_KEEP_DIRS=1` keeps
//! the replicas' logs and audit logs. The last test holds the active
//! unlocker's audit log for seconds: a healthy leader must keep its role when
//! its releases are slow (its lease is renewed by a task of its own).

#![allow(clippy::await_holding_lock)] // `serial()`: see SERIAL

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use etcd_client::{Client, EventType, GetOptions, WatchOptions};
use futures::stream::{self, StreamExt};
use lockscope::remember::audit::AuditLog;
use lockscope_model::admin::{AuditEntry, AuditQuery, Outcome, MAX_AUDIT_ROWS};
use lockscope_store::fleet::{FleetStore, UnlockerInfo};
use lockscope_store::protocol::{Attempt, LockStore};
use lockscope_store::spec::{AnyLocks, StoreSpec};
use lockscope_store::testing::{self, free_port, EtcdServer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[path = "unlocker_replicas/links.rs"]
mod links;
#[path = "unlocker_replicas/waits.rs"]
mod waits;
use waits::*;
#[path = "unlocker_replicas/keys.rs"]
mod keys;
use keys::*;
#[path = "unlocker_replicas/replica.rs"]
mod replica;
use replica::*;
#[path = "unlocker_replicas/roles.rs"]
mod roles;
use roles::*;
#[path = "unlocker_replicas/setup.rs"]
mod setup;
use setup::*;

/// `--unlocker-lease-secs`.
const LEASE_SECS: u64 = 2;
/// `--unlocker-grace-secs`.
const GRACE_SECS: u64 = 1;
/// The longest a hand-over may take: the lease's ttl plus 2 s.
const HAND_OVER_LIMIT: Duration = Duration::from_secs(LEASE_SECS + 2);
/// `--prefix` of both replicas.
const PREFIX: &str = "/replicas-it/";
/// The name the `--etcd` fleet gets (the default of `--fleet`).
const FLEET: &str = "etcd";

/// The tests here run one at a time: each holds this for its whole run. Each
/// test has its own runtime, so a std mutex held across its awaits blocks only
/// the other tests' threads, which is the point.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// 1,000 expired locks released exactly once by the active replica; then the
/// active replica killed: the other takes over within the lease plus 2 s and
/// releases the next batch exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releases_once_and_hands_over_when_the_leader_is_killed() {
    let _serial = serial();
    let Setup {
        t0,
        _etcd,
        _dir,
        store,
        fleet,
        roles,
        watch,
        a,
        b,
        first,
    } = setup().await;
    let ctx = || format!("{}{}", roles.describe(), tails(&[&a, &b]));
    eprintln!(
        "[{:>5.1?}] replicas up; {} is the active unlocker (term {})",
        t0.elapsed(),
        first.candidate,
        first.term
    );

    // 1. Exactly once: 1,000 locks expiring in about 2 s.
    const N: usize = 1000;
    let w = Instant::now();
    let batch = write_batch(&store, "p1", N, 2000).await;
    eprintln!("[{:>5.1?}] wrote {N} locks in {:?}", t0.elapsed(), w.elapsed());
    let took = wait_deleted(&watch, &batch.names, Duration::from_secs(30), &ctx).await;
    eprintln!(
        "[{:>5.1?}] all {N} deleted {took:?} after the batch was written (due ~{} s after its start)",
        t0.elapsed(),
        2 + GRACE_SECS
    );
    let done = wait_audited(&[&a, &b], "p1", N, Duration::from_secs(10), &ctx).await;
    watch.assert_exactly_once(&batch.names, &ctx);
    let by = assert_audited_once(&[&a, &b], &done, &batch.names, &ctx);
    let (early, late) = batch.lateness(&done);
    for (r, d) in [&a, &b].into_iter().zip(&done) {
        if !d.is_empty() {
            eprintln!(
                "    replica {}: {} releases over {:?} (audit times){}; past due: first {early:?}, last {late:?}",
                r.name,
                d.len(),
                span(d),
                if r.name == first.candidate {
                    " (the active one)"
                } else {
                    ""
                }
            );
        }
    }
    // Nobody was killed or paused: the role stays put, and one replica releases all.
    let terms = roles.terms_since(Duration::ZERO);
    assert!(
        terms.iter().all(|t| *t == first),
        "the role changed during the 1,000-lock batch: {terms:?}{}",
        ctx()
    );
    assert_eq!(by, [(first.candidate.clone(), N)], "all by the active replica{}", ctx());

    // 2. Hand-over on kill.
    let leading = leader(fleet.as_ref()).await.expect("someone holds the role");
    let survivor = other(&leading.candidate, ["a", "b"]).to_string();
    let killed = Instant::now();
    if leading.candidate == "a" {
        a.kill();
    } else {
        b.kill();
    }
    let next = wait_leader(fleet.as_ref(), &[&survivor], Duration::from_secs(15), &ctx).await;
    let hand_over = killed.elapsed();
    eprintln!(
        "[{:>5.1?}] killed {} (term {}); {survivor} elected (term {}) {hand_over:?} later",
        t0.elapsed(),
        leading.candidate,
        leading.term,
        next.term
    );
    assert!(
        hand_over <= HAND_OVER_LIMIT,
        "hand-over took {hand_over:?}, more than the lease plus 2 s ({HAND_OVER_LIMIT:?}){}",
        ctx()
    );
    assert!(next.term > leading.term, "terms increase: {leading:?} then {next:?}");

    const M: usize = 200;
    let batch2 = write_batch(&store, "p2", M, 2000).await;
    let took = wait_deleted(&watch, &batch2.names, Duration::from_secs(20), &ctx).await;
    let done2 = wait_audited(&[&a, &b], "p2", M, Duration::from_secs(10), &ctx).await;
    watch.assert_exactly_once(&batch2.names, &ctx);
    let by2 = assert_audited_once(&[&a, &b], &done2, &batch2.names, &ctx);
    assert_eq!(by2, [(survivor.clone(), M)], "the survivor released them all{}", ctx());
    // And the first batch is still released exactly once.
    watch.assert_exactly_once(&batch.names, &ctx);
    let (early, late) = batch2.lateness(&done2);
    eprintln!(
        "[{:>5.1?}] {survivor} released all {M} of the next batch, once each ({took:?} after writing; past due: first {early:?}, last {late:?})",
        t0.elapsed()
    );
}

/// The active replica paused past its lease while due locks are in its view:
/// the other takes over and releases them (and a batch written after the
/// election); woken, the paused one releases nothing and no key is deleted twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_leader_releases_nothing_after_waking() {
    let _serial = serial();
    let Setup {
        t0,
        _etcd,
        _dir,
        store,
        fleet,
        roles,
        watch,
        a,
        b,
        first,
    } = setup().await;
    let ctx = || format!("{}{}", roles.describe(), tails(&[&a, &b]));
    let (paused, next) = if first.candidate == "a" { (&a, &b) } else { (&b, &a) };
    eprintln!(
        "[{:>5.1?}] replicas up; {} is the active unlocker (term {})",
        t0.elapsed(),
        first.candidate,
        first.term
    );

    // Locks due (auto_unlock_at + grace) 4 s from now: after the leader is
    // paused and its lease has run out. Paused once its view holds them all.
    const N: usize = 200;
    let seen = write_batch(&store, "p3-seen", N, 3000).await;
    let deadline = Instant::now() + Duration::from_secs(5);
    while paused.held_in_view().await.unwrap_or(0) < N as u64 {
        assert!(
            Instant::now() < deadline,
            "{}'s view never showed the {N} locks (it shows {:?}){}",
            paused.name,
            paused.held_in_view().await,
            ctx()
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let metrics_before = paused.release_metrics().await;
    paused.pause();
    let paused_at = Instant::now();
    let done_before = paused.releases(Outcome::Done).await.len();
    assert_eq!(done_before, 0, "{} released before the locks were due", paused.name);
    eprintln!(
        "[{:>5.1?}] paused {} (SIGSTOP) with {N} locks in its view, due in ~{:.1?}",
        t0.elapsed(),
        paused.name,
        Duration::from_millis((seen.due - lockscope_store::now_ms()).max(0) as u64)
    );
    let elected = wait_leader(fleet.as_ref(), &[&next.name], Duration::from_secs(15), &ctx).await;
    let hand_over = paused_at.elapsed();
    let elected_at = t0.elapsed();
    eprintln!(
        "[{:>5.1?}] {} elected (term {}) {hand_over:?} after the pause",
        t0.elapsed(),
        next.name,
        elected.term
    );
    assert!(
        hand_over <= HAND_OVER_LIMIT,
        "hand-over from a paused leader took {hand_over:?}, more than {HAND_OVER_LIMIT:?}{}",
        ctx()
    );

    // A batch written after the election, due in about 2 s.
    let fresh = write_batch(&store, "p3-fresh", N, 1000).await;
    let both: Vec<String> = seen.names.iter().chain(&fresh.names).cloned().collect();
    let took = wait_deleted(&watch, &both, Duration::from_secs(25), &ctx).await;
    eprintln!(
        "[{:>5.1?}] {} released both batches ({} locks) {took:?} after the second was written",
        t0.elapsed(),
        next.name,
        both.len()
    );
    for (tag, batch) in [("p3-seen", &seen), ("p3-fresh", &fresh)] {
        let done = wait_audited(&[&a, &b], tag, N, Duration::from_secs(10), &ctx).await;
        let by = assert_audited_once(&[&a, &b], &done, &batch.names, &ctx);
        assert_eq!(by, [(next.name.clone(), N)], "{tag}: all by the new leader{}", ctx());
        let (early, late) = batch.lateness(&done);
        eprintln!("    {tag}: past due: first {early:?}, last {late:?}");
    }
    // Nobody competed with the new leader (the other one is paused): it keeps
    // the role in the term it was elected in.
    let terms = roles.terms_since(elected_at);
    assert!(
        terms.iter().all(|t| *t == elected),
        "{} lost its role (term {}) while the only other replica was paused: {terms:?}{}",
        next.name,
        elected.term,
        ctx()
    );

    // Woken: its view is stale, its clock says they are all due.
    let done_asleep = paused.releases(Outcome::Done).await.len();
    let at_wake = leader(fleet.as_ref()).await.expect("the role is held");
    assert_eq!(at_wake.candidate, next.name, "{}", ctx());
    let woke_at = t0.elapsed();
    paused.resume();
    eprintln!(
        "[{:>5.1?}] woke {} (SIGCONT) after {:?} paused; watching 5 s",
        t0.elapsed(),
        paused.name,
        paused_at.elapsed()
    );
    tokio::time::sleep(Duration::from_secs(5)).await;
    let done_awake = paused.releases(Outcome::Done).await;
    assert_eq!(
        done_awake.len(),
        done_asleep,
        "the woken replica {} released after waking: {:?}{}",
        paused.name,
        &done_awake[..done_awake.len().min(5)],
        ctx()
    );
    assert_eq!(done_asleep, 0, "{} released while paused?", paused.name);
    watch.assert_exactly_once(&both, &ctx);
    let terms = roles.terms_since(woke_at);
    assert!(
        terms.iter().all(|t| *t == at_wake),
        "the role changed after {} woke (it stays with {} in term {}): {terms:?}{}",
        paused.name,
        next.name,
        at_wake.term,
        ctx()
    );
    let changed = paused.releases(Outcome::Changed).await.len();
    let metrics_after = paused.release_metrics().await;
    let lost = notable(&paused.stderr)
        .iter()
        .filter(|l| l.contains("lost the unlocker role"))
        .count();
    eprintln!(
        "[{:>5.1?}] woken {}: 0 releases done, {changed} audited as changed; its release metrics {metrics_before:?} -> {metrics_after:?}; \"lost the unlocker role\" logged {lost} time(s)",
        t0.elapsed(),
        paused.name
    );
    assert!(lost >= 1, "the woken replica noticed it lost the role{}", ctx());
}

/// The active unlocker whose audit log stalls for a few seconds (an SQLite
/// checkpoint on a busy disk, a remote PostgreSQL hiccup; here another
/// connection holding the file's write lock) while it releases: it keeps its
/// role (its lease is renewed by a task of its own, not between releases), and
/// every lock is released soon after it is due.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_audit_log_does_not_cost_the_leader_its_role() {
    use sqlx::{Connection, Executor};
    let _serial = serial();
    let Setup {
        t0,
        _etcd,
        _dir,
        store,
        fleet: _,
        roles,
        watch,
        a,
        b,
        first,
    } = setup().await;
    let ctx = || format!("{}{}", roles.describe(), tails(&[&a, &b]));
    let (leading, other) = if first.candidate == "a" { (&a, &b) } else { (&b, &a) };
    // The other replica out of the way: only the leader can win the role.
    other.pause();

    // Its audit log's write lock, held from before the batch is due until
    // 4 s after (under sqlx's 5 s busy timeout: the appends wait, then succeed).
    let mut conn = sqlx::SqliteConnection::connect(&format!("sqlite://{}", leading.audit_path.display()))
        .await
        .unwrap();
    const N: usize = 20;
    let batch = write_batch(&store, "stall", N, 500).await;
    conn.execute("BEGIN IMMEDIATE").await.unwrap();
    let due_in = Duration::from_millis((batch.due - lockscope_store::now_ms()).max(0) as u64);
    tokio::time::sleep(due_in + Duration::from_secs(4)).await;
    conn.execute("ROLLBACK").await.unwrap();
    eprintln!(
        "[{:>5.1?}] held {}'s audit log from before the batch was due until 4 s after",
        t0.elapsed(),
        leading.name
    );

    wait_deleted(&watch, &batch.names, Duration::from_secs(20), &ctx).await;
    let done = wait_audited(&[&a, &b], "stall", N, Duration::from_secs(10), &ctx).await;
    watch.assert_exactly_once(&batch.names, &ctx);
    assert_audited_once(&[&a, &b], &done, &batch.names, &ctx);
    let (_, late) = batch.lateness(&done);
    let terms = roles.terms_since(Duration::ZERO);
    eprintln!(
        "[{:>5.1?}] terms {terms:?}; the last release {late:?} past due",
        t0.elapsed()
    );
    other.resume();
    assert!(
        terms.iter().all(|t| *t == first) && late < Duration::from_secs(6),
        "the leader lost its role while healthy ({terms:?}) and/or released a lock {late:?} past due{}",
        ctx()
    );
}
