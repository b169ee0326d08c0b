//! The lock protocol's contract suite (`lockscope_store::testing::contract`)
//! and the observer's (`observer_contract`) on ScyllaDB.
//!
//! No ScyllaDB or Cassandra server can be installed on our machines, so by
//! default every case runs against the in-memory keyspace
//! (`lockscope_store::scylla::memory`), which executes the same CQL text with
//! LWT semantics. With `SCYLLA_URI` set, the *same* cases run against that real
//! cluster instead, each in a fresh keyspace:
//!
//! ```sh
//! SCYLLA_URI=127.0.0.1:9042 cargo test -p lockscope-store --test it contract_scylla
//! ```
//!
//! The contract is also run against the in-memory keyspace answering LWTs as
//! Cassandra does (`cassandra_shape`), and the published two-table schema's
//! cases against an in-memory keyspace holding only those tables.

use std::time::Duration;

use lockscope_model::record::{BlacklistRecord, Stored};
use lockscope_model::{FleetState, LockBody, StoreStatus};
use lockscope_store::fleet::Release;
use lockscope_store::protocol::{Blacklisting, LockStore};
use lockscope_store::scylla::cql::{Schema, Value};
use lockscope_store::scylla::memory::{MemoryCql, Shape};
use lockscope_store::scylla::{ScyllaLocks, ScyllaTarget};
use lockscope_store::spec::StoreSpec;
use lockscope_store::testing::scylla::{memory_store, TestKeyspace};
use lockscope_store::testing::{contract, observer_contract, record, take};
use lockscope_store::{now_ms, Observer, StoreError};

#[tokio::test]
async fn exclusive_acquire_and_fenced_release() {
    let ks = TestKeyspace::new("exclusive").await;
    contract::exclusive_acquire_and_fenced_release(ks.connect().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_exclusion_16_workers() {
    let ks = TestKeyspace::new("mutex").await;
    let increments = contract::mutual_exclusion_increments();
    contract::mutual_exclusion(async || ks.connect().await, 16, increments).await;
}

#[tokio::test]
async fn heartbeat_extends_and_blacklist_refuses() {
    let ks = TestKeyspace::new("heartbeat").await;
    contract::heartbeat_extends_and_blacklist_refuses(ks.connect().await).await;
}

#[tokio::test]
async fn only_the_holder_releases() {
    let ks = TestKeyspace::new("holder").await;
    contract::only_the_holder_releases(ks.connect().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlapping_batches_from_4_workers() {
    let ks = TestKeyspace::new("batches").await;
    contract::overlapping_batches(async || ks.connect().await, 4).await;
}

#[tokio::test]
async fn deadlines_are_exact() {
    let ks = TestKeyspace::new("deadline").await;
    contract::deadlines_are_exact(ks.connect().await, Duration::from_millis(600)).await;
}

// The protocol's answers (docs/protocol.md; `contract_rules`).
#[tokio::test]
async fn same_session_twice_is_a_conflict() {
    let ks = TestKeyspace::new("rule").await;
    contract::same_session_twice_is_a_conflict(ks.connect().await).await;
}

#[tokio::test]
async fn dropping_a_guard_releases_at_once() {
    let ks = TestKeyspace::new("rule").await;
    contract::dropping_a_guard_releases_at_once(ks.connect().await).await;
}

#[tokio::test]
async fn close_releases_a_blacklisted_sessions_locks() {
    let ks = TestKeyspace::new("rule").await;
    contract::close_releases_a_blacklisted_sessions_locks(ks.connect().await).await;
}

#[tokio::test]
async fn purpose_limit_counts_escaped_bytes() {
    let ks = TestKeyspace::new("rule").await;
    contract::purpose_limit_counts_escaped_bytes(ks.connect().await).await;
}

#[tokio::test]
async fn version_zero_is_malformed() {
    let ks = TestKeyspace::new("rule").await;
    contract::version_zero_is_malformed(ks.connect().await).await;
}

#[tokio::test]
async fn no_extend_after_the_trust_window() {
    let ks = TestKeyspace::new("rule").await;
    contract::no_extend_after_the_trust_window(ks.connect().await).await;
}

#[tokio::test]
async fn reregistration_keeps_the_session() {
    let ks = TestKeyspace::new("rule").await;
    contract::reregistration_keeps_the_session(ks.connect().await).await;
}

#[tokio::test]
async fn backtrace_starts_at_the_callers_line() {
    let ks = TestKeyspace::new("rule").await;
    contract::backtrace_starts_at_the_callers_line(ks.connect().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_release_races_reacquire_300_rounds() {
    let ks = TestKeyspace::new("race").await;
    contract::force_release_races_reacquire(ks.connect().await, 300).await;
}

/// No notifications on CQL: waiters look again after a jittered 50–500 ms
/// pause. The bound says what that costs: a look is at most 3 statements
/// (blacklist, lock, and the waiting mark once), one per 50 ms at worst.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_back_off() {
    let ks = TestKeyspace::new("waiters").await;
    if ks.statements().is_none() {
        eprintln!("waiters_back_off counts the in-memory keyspace's statements: skipped on a cluster");
        return;
    }
    contract::waiting_is_not_polling(
        async || ks.connect().await,
        async || ks.statements().unwrap(),
        10,
        Duration::from_secs(3),
        10 * 3000 / 50 * 3,
    )
    .await;
}

mod cassandra_shape {
    //! The same contract on a keyspace that answers LWTs as Cassandra does
    //! (no row with a successful `[applied]`, the conditioned columns only
    //! with a failed one): lockscope reads `[applied]` by name and nothing else.
    use super::*;

    #[tokio::test]
    async fn exclusive_acquire_and_fenced_release() {
        contract::exclusive_acquire_and_fenced_release(memory_store(Shape::Cassandra).await.1).await;
    }

    #[tokio::test]
    async fn heartbeat_extends_and_blacklist_refuses() {
        contract::heartbeat_extends_and_blacklist_refuses(memory_store(Shape::Cassandra).await.1).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn mutual_exclusion_8_workers_100_increments() {
        let (_, store) = memory_store(Shape::Cassandra).await;
        contract::mutual_exclusion(async || store.clone(), 8, 100).await;
    }
}

macro_rules! observer_cases {
    ($($case:ident),*) => {$(
        #[tokio::test]
        async fn $case() {
            let ks = TestKeyspace::new(stringify!($case)).await;
            // The client library creates lockscope's tables before the observer looks.
            ks.connect().await;
            observer_contract::$case(ks.spec()).await;
        }
    )*};
}

observer_cases!(
    observer_snapshot,
    observer_update,
    observer_waiter,
    observer_session,
    observer_blacklist,
    observer_blacklisted_session_goes,
    observer_malformed
);

/// A wait longer than the session's ttl stays visible: the heartbeat rewrites
/// `waiting_for` with the row's other cells (each write carries the TTL).
#[tokio::test]
async fn a_long_wait_stays_visible_past_the_session_ttl() {
    use lockscope_store::client::{Session, SessionConfig};
    let ks = TestKeyspace::new("longwait").await;
    let store = ks.connect().await;
    let config = |service: &str| {
        let mut c = SessionConfig::new(service);
        c.heartbeat_every = Duration::from_millis(300);
        c.session_ttl = Duration::from_secs(1);
        c
    };
    let holder = Session::open(store.clone(), config("holder")).await.unwrap();
    let _held = holder.lock("long/wait", contract::opts("hold")).await.unwrap();
    let waiter = Session::open(store.clone(), config("waiter")).await.unwrap();
    let id = waiter.id().to_string();
    let waiting = tokio::spawn(async move {
        let r = waiter
            .lock("long/wait", contract::opts("wait").deadline(Duration::from_secs(8)))
            .await;
        (waiter, r.map(|g| g.fence()))
    });
    let mut watched = observer_contract::Watched::start(&ks.spec());
    let is_waiting = |s: &FleetState| s.waiters().any(|w| w.session == id && w.lock == "long/wait");
    watched.until("the waiter", is_waiting).await;
    // Past the row's TTL (2 s: the 1 s ttl rounded up, plus one) and three
    // session ttls, a fresh observer still finds the wait.
    tokio::time::sleep(Duration::from_millis(3500)).await;
    let mut fresh = observer_contract::Watched::start(&ks.spec());
    fresh.until("the waiter, still", is_waiting).await;
    let (_waiter, r) = waiting.await.unwrap();
    assert!(matches!(r, Err(StoreError::Deadline { .. })), "{r:?}");
}

/// The fencing token grows across acquisitions although each release deletes
/// the row (it lives in `lockscope_fences`), and a revision grows across
/// acquisitions and extensions, as observers need.
#[tokio::test]
async fn fences_and_revisions_grow_across_deleted_rows() {
    let (_, store) = memory_store(Shape::Scylla).await;
    let mut last = (0, 0);
    for _ in 0..5 {
        let fence = take(&store, "grow").await;
        let rev = store.get("grow").await.unwrap().unwrap().revision;
        assert!(fence > last.0 && rev > last.1, "{fence}/{rev} after {last:?}");
        let rec = record("owner-grow", "extended", now_ms());
        assert_eq!(
            store.extend("grow", fence, &rec).await.unwrap(),
            lockscope_store::protocol::Extend::Extended
        );
        let extended = store.get("grow").await.unwrap().unwrap().revision;
        assert_eq!(extended, rev + 1);
        assert!(store.release("grow", fence).await.unwrap());
        last = (fence, extended);
    }
}

/// A token claimed but never used (its acquirer found the lock busy, or died)
/// is never handed out again: the next acquisition's is larger.
#[tokio::test]
async fn a_claimed_token_is_never_reused() {
    let (cql, store) = memory_store(Shape::Scylla).await;
    let first = take(&store, "overtaken").await;
    assert!(store.release("overtaken", first).await.unwrap());
    // Another acquirer claims the next token (and has not inserted yet) ...
    let claim = cql
        .execute(
            "UPDATE lockscope.lockscope_fences SET fence = ? WHERE token = ? IF fence = ?",
            vec![Value::BigInt(first + 5), Value::text("overtaken"), Value::BigInt(first)],
        )
        .unwrap();
    assert_eq!(claim[0]["[applied]"], Value::Boolean(true));
    // ... and never inserts; the next acquisition claims past it.
    let next = take(&store, "overtaken").await;
    assert_eq!(next, first + 6);
}

/// The published schema: only `tokens(token, service_session_id, timestamp)`
/// and `token_times(service_session_id, tokens, timestamp)`, written by its own
/// clients. lockscope shows what the rows hold (holder session, row time) and
/// nothing invented; releases by `DELETE … IF service_session_id = ? AND
/// timestamp = ?`; refuses to take locks or blacklist there.
#[tokio::test]
async fn the_published_schema_is_observed_and_administered() {
    let name = format!("published-{}", std::process::id());
    let cql = MemoryCql::named(&name, true);
    let at = now_ms() - 5_000;
    let published_client_locks = |token: &str, session: &str, at: i64| {
        let r = cql
            .execute(
                "INSERT INTO lockscope.tokens (token, service_session_id, timestamp) VALUES (?, ?, ?) IF NOT EXISTS",
                vec![Value::text(token), Value::text(session), Value::Timestamp(at)],
            )
            .unwrap();
        assert_eq!(r[0]["[applied]"], Value::Boolean(true));
    };
    cql.execute(
        "INSERT INTO lockscope.token_times (service_session_id, tokens, timestamp) VALUES (?, ?, ?)",
        vec![
            Value::text("svc-a"),
            Value::List(vec![Value::text("job/1"), Value::text("job/2")]),
            Value::Timestamp(at),
        ],
    )
    .unwrap();
    published_client_locks("job/1", "svc-a", at);
    published_client_locks("job/2", "svc-a", at + 1);

    let spec = StoreSpec::parse(&format!("scylla-memory:{name}?schema=published")).unwrap();
    let mut watched = observer_contract::Watched::start(&spec);
    watched
        .until("both published locks", |s: &FleetState| s.locks().count() == 2)
        .await;
    let job1 = watched.state.locks().find(|e| e.name == "job/1").unwrap().clone();
    assert_eq!(
        job1.body,
        LockBody::Foreign {
            session: Some("svc-a".into()),
            written_at: Some(at),
            lease: None,
            proposal: None,
            key: None,
            detail: None,
        },
        "only what the row holds"
    );
    assert!(job1.record().is_none(), "no lockscope record is invented");
    assert_eq!(job1.fence, at, "the row's time names the acquisition");

    let fleet = spec.open().unwrap();
    // A stale version (another row time) deletes nothing.
    assert!(matches!(
        fleet.release("job/1", at - 1).await.unwrap(),
        Release::Changed(_)
    ));
    assert!(matches!(
        fleet.release("job/1", at).await.unwrap(),
        Release::Released(_)
    ));
    assert_eq!(fleet.release("job/1", at).await.unwrap(), Release::NotHeld);
    watched
        .until("job/1 released", |s: &FleetState| s.locks().count() == 1)
        .await;

    // lockscope keeps no blacklist and elects no unlocker in tables it may not change.
    let entry = BlacklistRecord::new("svc-a", "tester", "test", now_ms());
    assert!(matches!(fleet.blacklist(&entry).await, Err(StoreError::Config(_))));
    assert!(matches!(
        ScyllaTarget::Memory {
            name: name.clone(),
            published: true
        }
        .connect(true)
        .await,
        Err(StoreError::Config(_))
    ));
    let admin = ScyllaTarget::Memory { name, published: true }
        .connect(false)
        .await
        .unwrap();
    assert_eq!(admin.schema(), Schema::Published);
    let rec = record("o", "p", now_ms());
    assert!(matches!(admin.try_acquire("x", &rec).await, Err(StoreError::Config(_))));
}

/// On lockscope's tables too, a row a published client wrote is released by
/// holder and time, and only the version named; blacklisting twice keeps the
/// first entry (docs/api.md: a second blacklisting is `409 changed`), on the
/// Cassandra shape of LWT answers too.
#[tokio::test]
async fn published_rows_on_lockscopes_tables_and_a_second_blacklisting() {
    let (cql, store) = memory_store(Shape::Cassandra).await;
    let at = now_ms();
    cql.execute(
        "INSERT INTO lockscope.tokens (token, service_session_id, timestamp) VALUES (?, ?, ?) IF NOT EXISTS",
        vec![Value::text("legacy"), Value::text("svc-old"), Value::Timestamp(at)],
    )
    .unwrap();
    let shown = store.get("legacy").await.unwrap().unwrap();
    assert!(matches!(shown.body, LockBody::Foreign { .. }), "{shown:?}");
    assert!(!store.release("legacy", at + 1).await.unwrap(), "another version");
    assert!(store.get("legacy").await.unwrap().is_some());
    assert!(store.release("legacy", at).await.unwrap());
    assert!(store.get("legacy").await.unwrap().is_none());

    let first = BlacklistRecord::new("svc-x", "tester", "first reason", now_ms());
    assert_eq!(store.blacklist(&first).await.unwrap(), Blacklisting::Written);
    assert_eq!(
        store
            .blacklist(&BlacklistRecord::new("svc-x", "other", "second reason", now_ms()))
            .await
            .unwrap(),
        Blacklisting::Exists(Some(Stored::Record(first)))
    );
    let rows = cql
        .execute(
            "SELECT record FROM lockscope.lockscope_blacklist WHERE service_session_id = ?",
            vec![Value::text("svc-x")],
        )
        .unwrap();
    let record = rows[0]["record"].as_text().unwrap().to_string();
    assert!(record.contains("first reason"), "the first entry is kept: {record}");
    assert!(store.lift_blacklist("svc-x").await.unwrap());
    assert!(!store.lift_blacklist("svc-x").await.unwrap(), "once");
}

/// A blacklisting whose entry was written but whose session mark was not (the
/// mark failed or timed out: they are two writes) is completed by the next one:
/// the second blacklisting answers `Exists` and marks the session too, so its
/// heartbeat is refused. Before, every retry answered "already blacklisted"
/// and never marked, and the session kept heartbeating.
#[tokio::test]
async fn a_second_blacklisting_completes_a_missing_session_mark() {
    let (cql, store) = memory_store(Shape::Scylla).await;
    let mut session = lockscope_model::record::SessionRecord {
        v: lockscope_model::record::RECORD_VERSION,
        session: "svc-half".into(),
        service: "svc".into(),
        host: "h".into(),
        pid: 1,
        started_at: now_ms(),
        heartbeat_at: now_ms(),
        waiting_for: None,
        contention: Default::default(),
    };
    let lease = store.open_session(&session, Duration::from_secs(30)).await.unwrap();
    // The first blacklisting's entry, without its mark.
    let first = BlacklistRecord::new("svc-half", "tester", "half done", now_ms());
    cql.execute(
        "INSERT INTO lockscope.lockscope_blacklist (service_session_id, record) VALUES (?, ?) IF NOT EXISTS",
        vec![
            Value::text("svc-half"),
            Value::text(serde_json::to_string(&first).unwrap()),
        ],
    )
    .unwrap();
    session.heartbeat_at = now_ms();
    store
        .session_heartbeat(lease, &session)
        .await
        .expect("unmarked: the heartbeat LWT only checks the mark");

    assert_eq!(
        store
            .blacklist(&BlacklistRecord::new("svc-half", "retry", "again", now_ms()))
            .await
            .unwrap(),
        Blacklisting::Exists(Some(Stored::Record(first)))
    );
    session.heartbeat_at = now_ms();
    let refused = store.session_heartbeat(lease, &session).await;
    assert!(
        matches!(refused, Err(StoreError::Blacklisted { .. })),
        "the retry marked the session: {refused:?}"
    );
}

/// The observer reads in pages: a table of more rows than a page is seen whole.
#[tokio::test]
async fn the_observer_pages_through_a_large_table() {
    let ks = TestKeyspace::new("pages").await;
    let store = ks.connect().await;
    for i in 0..25 {
        take(&store, &format!("paged/{i:02}")).await;
    }
    let spec = ks.spec();
    let StoreSpec::Scylla(target) = &spec else {
        unreachable!()
    };
    let mut observer = lockscope_store::scylla::ScyllaObserver::new(target.clone());
    observer.page = 4;
    let (tx, mut rx) = tokio::sync::mpsc::channel(16);
    tokio::spawn(Box::new(observer).run(tx));
    let mut state = FleetState::default();
    let mut live = false;
    while !(live && state.locks().count() == 25) {
        match tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await
            .unwrap()
            .unwrap()
        {
            lockscope_store::ObserverEvent::Events(events) => events.into_iter().for_each(|e| {
                state.apply(e);
            }),
            lockscope_store::ObserverEvent::Status(s) => live = matches!(s, StoreStatus::Live { .. }),
            lockscope_store::ObserverEvent::Missed { .. } => panic!("a ScyllaDB observer replays no history"),
            lockscope_store::ObserverEvent::Looked(_) => {}
        }
    }
}

/// A store that is not there is a clear error, not a hang.
#[tokio::test]
async fn a_keyspace_without_tables_is_a_clear_error() {
    let cql = MemoryCql::new("empty", Shape::Scylla);
    let err = match ScyllaLocks::over(std::sync::Arc::new(cql), "empty", false).await {
        Err(e) => e,
        Ok(_) => panic!("opened a keyspace without tables"),
    };
    assert!(err.to_string().contains("has no tokens table"), "{err}");
}
