//! The contract suite's answers to the questions two second implementations had
//! to guess at (issue 23, "The protocol, answered"): each case quotes the rule of
//! `docs/protocol.md` it shows, and runs on every store through
//! [`contract`](super::contract) (re-exported there).

use std::time::Duration;

use lockscope_model::record::{BlacklistRecord, MAX_RECORD_BYTES};
use lockscope_model::LockBody;
use tokio::time::Instant;

use super::contract::{opts, quiet};
use crate::client::{LockOptions, LossReason, Session, SessionConfig, MAX_PURPOSE_BYTES};
use crate::protocol::{Attempt, Blacklisting, LockStore};
use crate::{now_ms, StoreError};

async fn open<S: LockStore>(store: S, service: &str) -> Session<S> {
    Session::open(store, quiet(service)).await.expect("session opens")
}

/// docs/protocol.md, Acquire: "Locks are **not re-entrant**: a `lock` of a name the
/// same session already holds is an ordinary conflict — it waits for that hold to
/// end, normally until its deadline". A batch try-lock finds it busy, held by the
/// session itself; the first hold is untouched and still extends.
pub async fn same_session_twice_is_a_conflict<S: LockStore>(store: S) {
    let s = open(store.clone(), "twice").await;
    let first = s.lock("twice/x", opts("first")).await.unwrap();
    let again = s
        .lock("twice/x", opts("again").deadline(Duration::from_millis(300)))
        .await;
    assert!(
        matches!(again, Err(StoreError::Deadline { .. })),
        "the same session locking the same name twice is a conflict until the deadline"
    );
    let batch = s.try_lock_batch(&["twice/x"], opts("batch")).await.unwrap();
    assert!(batch.taken.is_empty());
    let holder = batch.busy[0].1.as_ref().expect("the holder is shown");
    assert_eq!(holder.fence, first.fence());
    assert_eq!(
        holder.holder_session(),
        Some(s.id()),
        "busy, held by the session itself"
    );
    first.alive().await.expect("the first hold still extends");
    assert!(s.contention().conflicts >= 2, "both refusals count as conflicts");
    assert!(first.unlock().await.unwrap());
    s.close().await.unwrap();
}

/// docs/protocol.md, Release: "**Dropping a guard** (Rust: a `LockGuard` dropped
/// without `unlock`) releases the lock at once: the Release is sent when the guard is
/// dropped, in the background".
/// And "`abandon` releases nothing and extends nothing: the lock stays until
/// `auto_unlock_at`".
pub async fn dropping_a_guard_releases_at_once<S: LockStore>(store: S) {
    let s = open(store.clone(), "drop").await;
    let g = s.lock("drop/x", opts("dropped")).await.unwrap();
    let started = Instant::now();
    drop(g);
    while store.get("drop/x").await.unwrap().is_some() {
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "a dropped guard releases its lock at once (within 1 s)"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let g = s.lock("drop/y", opts("abandoned")).await.unwrap();
    let before = store.get("drop/y").await.unwrap().unwrap();
    g.abandon();
    s.heartbeat_now().await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let after = store
        .get("drop/y")
        .await
        .unwrap()
        .expect("an abandoned lock stays held");
    assert_eq!(
        after.record().unwrap().auto_unlock_at,
        before.record().unwrap().auto_unlock_at,
        "an abandoned lock is no longer extended"
    );
    s.close().await.unwrap();
    assert!(
        store.get("drop/y").await.unwrap().is_some(),
        "close does not release an abandoned lock"
    );
    assert!(store.release("drop/y", after.fence).await.unwrap());
}

/// docs/protocol.md, Close a session: "`close` releases every lock the caller
/// still has a guard for — held, or lost to the blacklist or the trust window —
/// whether or not the session is blacklisted (Release is never refused)".
pub async fn close_releases_a_blacklisted_sessions_locks<S: LockStore>(store: S) {
    let s = open(store.clone(), "closing").await;
    let seen = s.lock("close/seen", opts("lost to the blacklist")).await.unwrap();
    let unseen = s.lock("close/unseen", opts("blacklist not seen yet")).await.unwrap();
    let entry = BlacklistRecord::new(s.id(), "contract-suite", "runaway", now_ms());
    assert_eq!(store.blacklist(&entry).await.unwrap(), Blacklisting::Written);
    assert!(matches!(seen.alive().await, Err(StoreError::Blacklisted { .. })));
    assert_eq!(seen.loss(), Some(LossReason::Blacklisted));
    assert!(unseen.loss().is_none(), "not yet told");
    assert!(
        store.get("close/seen").await.unwrap().is_some(),
        "blacklisting deletes nothing"
    );
    let id = s.id().to_string();
    s.close().await.unwrap();
    for name in ["close/seen", "close/unseen"] {
        assert!(
            store.get(name).await.unwrap().is_none(),
            "close releases {name} although the session is blacklisted"
        );
    }
    assert!(
        !store.session_registered(&id).await.unwrap(),
        "and ends the registration"
    );
    // The guards, dropped after the close, have nothing left to release.
    drop((seen, unseen));
    assert!(store.lift_blacklist(&id).await.unwrap());
}

/// docs/protocol.md, Lock record: "the limit counts the bytes of `purpose` as
/// written inside the record's JSON string, escapes included". At the boundary: a
/// purpose of 240 KiB raw bytes whose one `"` is written as 2 bytes is cut before
/// the quote; a purpose of 240 KiB of `"` (480 KiB escaped) is cut to half, and the
/// record stays readable (not malformed).
pub async fn purpose_limit_counts_escaped_bytes<S: LockStore>(store: S) {
    let s = open(store.clone(), "purpose").await;
    let exact = "a".repeat(MAX_PURPOSE_BYTES);
    let g = s.lock("purpose/exact", opts(&exact)).await.unwrap();
    let rec = store.get("purpose/exact").await.unwrap().unwrap();
    assert_eq!(rec.record().expect("readable").purpose, exact, "240 KiB is kept whole");
    drop(g);

    let mut quoted = "a".repeat(MAX_PURPOSE_BYTES - 1);
    quoted.push('"');
    let g = s.lock("purpose/quoted", opts(&quoted)).await.unwrap();
    let rec = store.get("purpose/quoted").await.unwrap().unwrap();
    assert_eq!(
        rec.record().expect("readable").purpose,
        &quoted[..MAX_PURPOSE_BYTES - 1],
        "raw 240 KiB, escaped 240 KiB + 1: the quote is cut"
    );
    drop(g);

    let quotes = "\"".repeat(MAX_PURPOSE_BYTES);
    let g = s.lock("purpose/quotes", opts(&quotes)).await.unwrap();
    let rec = store.get("purpose/quotes").await.unwrap().unwrap();
    let purpose = &rec.record().expect("never written malformed").purpose;
    assert_eq!(purpose.len(), MAX_PURPOSE_BYTES / 2);
    assert!(rec.record().unwrap().to_json().len() <= MAX_RECORD_BYTES);
    assert!(g.unlock().await.unwrap());
    s.close().await.unwrap();
}

/// docs/protocol.md, Records: "`v: 0` is malformed: there is no version 0". A
/// store keeps such a value as the lock's (it is held) and shows it malformed.
pub async fn version_zero_is_malformed<S: LockStore>(store: S) {
    let mut rec = super::record("zero", "v is 0", now_ms());
    rec.v = 0;
    let fence = match store.try_acquire("v0/x", &rec).await.unwrap() {
        Attempt::Acquired { fence } => fence,
        other => panic!("{other:?}"),
    };
    let entry = store.get("v0/x").await.unwrap().expect("held");
    match &entry.body {
        LockBody::Malformed { error, .. } => assert!(
            error.contains("there is no record version 0"),
            "v: 0 is malformed: {error}"
        ),
        other => panic!("a record with v: 0 was read as {other:?}"),
    }
    assert_eq!(entry.fence, fence);
    assert!(store.release("v0/x", fence).await.unwrap());
}

/// docs/protocol.md, Extend: "When the window passes without a success …, the
/// lock is lost (`NotExtended`) for good: no further Extend is sent". Runs on a
/// current-thread runtime, which a blocking sleep stops: no heartbeat can run.
pub async fn no_extend_after_the_trust_window<S: LockStore>(store: S) {
    assert_eq!(
        tokio::runtime::Handle::current().runtime_flavor(),
        tokio::runtime::RuntimeFlavor::CurrentThread,
        "this case stops the runtime with a blocking sleep"
    );
    let mut cfg = SessionConfig::new("late");
    cfg.heartbeat_every = Duration::from_millis(200);
    cfg.session_ttl = Duration::from_secs(10);
    let s = Session::open(store.clone(), cfg).await.unwrap();
    let lock = LockOptions::new("late", Duration::from_millis(1))
        .deadline(Duration::from_secs(10))
        .without_backtrace();
    let g = s.lock("late/x", lock).await.unwrap();
    let before = store.get("late/x").await.unwrap().unwrap();
    // auto_unlock_after = max(1 ms, 3 × 200 ms) = 600 ms; nothing runs for 800 ms.
    std::thread::sleep(Duration::from_millis(800));
    assert!(matches!(g.alive().await, Err(StoreError::Lost { .. })));
    assert_eq!(g.loss(), Some(LossReason::NotExtended));
    s.heartbeat_now().await;
    let after = store.get("late/x").await.unwrap().expect("the store still holds it");
    assert_eq!(
        after.revision, before.revision,
        "no Extend is sent after the trust window"
    );
    assert_eq!(
        g.loss(),
        Some(LossReason::NotExtended),
        "a later answer does not restore it"
    );
    s.close().await.unwrap();
    assert!(store.get("late/x").await.unwrap().is_none(), "close releases it");
    drop(g);
}

/// docs/protocol.md, Session heartbeat step 1: "The client registers again at once
/// … with the same id, `started_at` and counters"; held locks are not affected.
pub async fn reregistration_keeps_the_session<S: LockStore>(store: S) {
    let s = open(store.clone(), "again").await;
    let g = s.lock("again/x", opts("held across")).await.unwrap();
    let before = store.get("again/x").await.unwrap().unwrap();
    let counters = s.contention();
    store.close_session(s.registration(), s.id()).await.unwrap();
    assert!(!store.session_registered(s.id()).await.unwrap());
    s.heartbeat_now().await;
    assert!(
        store.session_registered(s.id()).await.unwrap(),
        "the same id registers again"
    );
    assert_eq!(s.contention(), counters, "counters are kept");
    let after = store.get("again/x").await.unwrap().unwrap();
    assert_eq!(after.fence, before.fence, "held locks are not affected");
    assert!(after.record().unwrap().auto_unlock_at >= before.record().unwrap().auto_unlock_at);
    assert!(g.loss().is_none());
    assert!(g.unlock().await.unwrap());
    s.close().await.unwrap();
}

/// docs/protocol.md, Lock record: "a location in the source of the language runtime
/// or of a runtime crate … is not the caller's — it is a macro such as
/// `tokio::select!` expanded into the caller" and "consecutive frames of one
/// function (after removing `::{{closure}}`) are collapsed into one". A `lock`
/// raced in a `select!` (as the demo's workers do) records this function, at this
/// file, once.
pub async fn backtrace_starts_at_the_callers_line<S: LockStore>(store: S) {
    let s = open(store.clone(), "backtrace").await;
    let mut with_bt = opts("inside select!");
    with_bt.backtrace = true;
    let g = tokio::select! {
        g = s.lock("bt/x", with_bt) => g.unwrap(),
        _ = tokio::time::sleep(Duration::from_secs(30)) => panic!("no lock in 30 s"),
    };
    let entry = store.get("bt/x").await.unwrap().unwrap();
    let bt = entry.record().unwrap().backtrace.clone();
    let first = bt.first().expect("a backtrace");
    assert!(
        first.starts_with("lockscope_store::testing::contract_rules::backtrace_starts_at_the_callers_line (")
            && first.contains("contract_rules.rs:"),
        "the first frame is the caller at its own line, not tokio's select!: {bt:#?}"
    );
    let functions: Vec<&str> = bt.iter().map(|f| f.split(" (").next().unwrap()).collect();
    assert!(
        functions.windows(2).all(|w| w[0] != w[1]),
        "no function twice in a row: {bt:#?}"
    );
    assert!(g.unlock().await.unwrap());
    s.close().await.unwrap();
}
