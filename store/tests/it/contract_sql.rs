//! The lock protocol's contract suite (`lockscope_store::testing::contract`)
//! against SQLite (a file in a temporary directory) and a real PostgreSQL
//! (started by the test on a free port), plus the SQL schema's own guarantees.

use std::time::Duration;

use lockscope_model::{FleetEvent, FleetState, StoreStatus};
use lockscope_store::fleet::{Fenced, Leadership, Release, UnlockerInfo};
use lockscope_store::protocol::LockStore;
use lockscope_store::spec::StoreSpec;
use lockscope_store::sql::{SqlLocks, SqlObserver, SCHEMA_VERSION};
use lockscope_store::testing::take;
use lockscope_store::testing::PgServer;
use lockscope_store::testing::{contract, observer_contract};
use lockscope_store::{Observer, ObserverEvent};
use tokio::sync::mpsc;

struct Sqlite {
    _dir: tempfile::TempDir,
    url: String,
}

fn sqlite() -> Sqlite {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("locks.db").display());
    Sqlite { _dir: dir, url }
}

fn spec(url: &str) -> StoreSpec {
    StoreSpec::Sql { url: url.to_string() }
}

async fn connect(url: &str) -> SqlLocks {
    SqlLocks::connect(url).await.unwrap()
}

macro_rules! contract_tests {
    ($dialect:ident, $server:expr) => {
        mod $dialect {
            use super::*;

            #[tokio::test]
            async fn exclusive_acquire_and_fenced_release() {
                let db = $server;
                contract::exclusive_acquire_and_fenced_release(connect(&db.url()).await).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn mutual_exclusion_16_workers() {
                let db = $server;
                let increments = contract::mutual_exclusion_increments();
                contract::mutual_exclusion(async || connect(&db.url()).await, 16, increments).await;
            }

            #[tokio::test]
            async fn heartbeat_extends_and_blacklist_refuses() {
                let db = $server;
                contract::heartbeat_extends_and_blacklist_refuses(connect(&db.url()).await).await;
            }

            #[tokio::test]
            async fn only_the_holder_releases() {
                let db = $server;
                contract::only_the_holder_releases(connect(&db.url()).await).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn overlapping_batches_from_4_workers() {
                let db = $server;
                contract::overlapping_batches(async || connect(&db.url()).await, 4).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn force_release_races_reacquire_1000_rounds() {
                let db = $server;
                contract::force_release_races_reacquire(connect(&db.url()).await, 1000).await;
            }

            #[tokio::test]
            async fn same_session_twice_is_a_conflict() {
                let db = $server;
                contract::same_session_twice_is_a_conflict(connect(&db.url()).await).await;
            }

            #[tokio::test]
            async fn dropping_a_guard_releases_at_once() {
                let db = $server;
                contract::dropping_a_guard_releases_at_once(connect(&db.url()).await).await;
            }

            #[tokio::test]
            async fn close_releases_a_blacklisted_sessions_locks() {
                let db = $server;
                contract::close_releases_a_blacklisted_sessions_locks(connect(&db.url()).await).await;
            }

            #[tokio::test]
            async fn purpose_limit_counts_escaped_bytes() {
                let db = $server;
                contract::purpose_limit_counts_escaped_bytes(connect(&db.url()).await).await;
            }

            #[tokio::test]
            async fn version_zero_is_malformed() {
                let db = $server;
                contract::version_zero_is_malformed(connect(&db.url()).await).await;
            }

            #[tokio::test]
            async fn no_extend_after_the_trust_window() {
                let db = $server;
                contract::no_extend_after_the_trust_window(connect(&db.url()).await).await;
            }

            #[tokio::test]
            async fn reregistration_keeps_the_session() {
                let db = $server;
                contract::reregistration_keeps_the_session(connect(&db.url()).await).await;
            }

            #[tokio::test]
            async fn backtrace_starts_at_the_callers_line() {
                let db = $server;
                contract::backtrace_starts_at_the_callers_line(connect(&db.url()).await).await;
            }

            #[tokio::test]
            async fn the_observer_reads_only_what_changed() {
                let db = $server;
                observer_reads_only_what_changed(&db.url()).await;
            }

            #[tokio::test]
            async fn observer_snapshot() {
                let db = $server;
                observer_contract::observer_snapshot(spec(&db.url())).await;
            }

            #[tokio::test]
            async fn observer_update() {
                let db = $server;
                observer_contract::observer_update(spec(&db.url())).await;
            }

            #[tokio::test]
            async fn observer_waiter() {
                let db = $server;
                observer_contract::observer_waiter(spec(&db.url())).await;
            }

            #[tokio::test]
            async fn observer_session() {
                let db = $server;
                observer_contract::observer_session(spec(&db.url())).await;
            }

            #[tokio::test]
            async fn observer_blacklist() {
                let db = $server;
                observer_contract::observer_blacklist(spec(&db.url())).await;
            }

            #[tokio::test]
            async fn observer_blacklisted_session_goes() {
                let db = $server;
                observer_contract::observer_blacklisted_session_goes(spec(&db.url())).await;
            }

            #[tokio::test]
            async fn observer_malformed() {
                let db = $server;
                observer_contract::observer_malformed(spec(&db.url())).await;
            }

            #[tokio::test]
            async fn a_v4_database_is_upgraded() {
                let db = $server;
                super::a_v4_database_is_upgraded(&db.url()).await;
            }

            #[tokio::test]
            async fn deadlines_are_exact() {
                let db = $server;
                contract::deadlines_are_exact(connect(&db.url()).await, Duration::from_millis(500)).await;
            }
        }
    };
}

impl Sqlite {
    fn url(&self) -> String {
        self.url.clone()
    }
}

contract_tests!(sqlite_store, sqlite());
contract_tests!(postgres_store, PgServer::start().await);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_waiters_are_notified_not_polling() {
    let pg = PgServer::start().await;
    let counter = connect(&pg.url()).await;
    let url = pg.url();
    // Each waiter uses its own store; count the statements of all of them.
    let stores = std::sync::Mutex::new(Vec::new());
    contract::waiting_is_not_polling(
        async || {
            let s = connect(&url).await;
            stores.lock().unwrap().push(s.clone());
            s
        },
        async || stores.lock().unwrap().iter().map(SqlLocks::statements).sum::<u64>() + counter.statements(),
        10,
        Duration::from_secs(3),
        10,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_waiters_back_off() {
    // SQLite cannot notify: waiters poll with a jittered 25–250 ms backoff. The
    // bound says how much: about one attempt per waiter per 137 ms on average.
    let db = sqlite();
    let stores = std::sync::Mutex::new(Vec::new());
    contract::waiting_is_not_polling(
        async || {
            let s = connect(&db.url).await;
            stores.lock().unwrap().push(s.clone());
            s
        },
        async || stores.lock().unwrap().iter().map(SqlLocks::statements).sum::<u64>(),
        10,
        Duration::from_secs(3),
        10 * 3000 / 25,
    )
    .await;
}

#[tokio::test]
async fn a_newer_schema_is_refused_with_a_clear_message() {
    let db = sqlite();
    connect(&db.url).await;
    let pool = sqlx::SqlitePool::connect(&db.url).await.unwrap();
    sqlx::query("INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) VALUES (99, 'from the future', true, x'00', 0)")
        .execute(&pool)
        .await
        .unwrap();
    let err = match SqlLocks::connect(&db.url).await {
        Err(e) => e.to_string(),
        Ok(_) => panic!("opened a database with a newer schema"),
    };
    assert!(
        err.contains("version 99") && err.contains("newer than this lockscope"),
        "{err}"
    );
}

/// A database an older lockscope left at schema version 4 (before the unlocker
/// role) is upgraded on connect, its locks kept, and the new table works.
async fn a_v4_database_is_upgraded(url: &str) {
    lockscope_store::testing::sql_schema_at(url, 4).await;
    let pool = sqlx::AnyPool::connect(url).await.unwrap();
    sqlx::query(
        "INSERT INTO lockscope_locks (name, fence, owner, session, record, revision) \
         VALUES ('old/1', 7, 'o', 's', '{}', 3)",
    )
    .execute(&pool)
    .await
    .unwrap();
    let version = async || {
        sqlx::query_scalar::<_, i64>("SELECT MAX(version) FROM _sqlx_migrations")
            .fetch_one(&pool)
            .await
            .unwrap()
    };
    assert_eq!(version().await, 4);
    assert!(
        sqlx::query("SELECT 1 FROM lockscope_unlocker")
            .fetch_optional(&pool)
            .await
            .is_err(),
        "no unlocker table at version 4"
    );

    let store = connect(url).await;
    assert_eq!(version().await, SCHEMA_VERSION);
    assert_eq!(SCHEMA_VERSION, 5);
    assert_eq!(store.get("old/1").await.unwrap().map(|e| e.fence), Some(7));
    assert_eq!(store.unlocker().await.unwrap(), None);
    let leader = store.campaign("replica-a", Duration::from_secs(5)).await.unwrap();
    assert_eq!(leader.term(), 1);
    assert_eq!(
        store.unlocker().await.unwrap(),
        Some(UnlockerInfo {
            candidate: "replica-a".into(),
            term: 1
        })
    );
    assert!(matches!(
        leader
            .release("old/1", 7, store.get("old/1").await.unwrap().unwrap().revision)
            .await
            .unwrap(),
        Fenced::Done(Release::Released(_))
    ));
    assert_eq!(store.get("old/1").await.unwrap(), None);
}

/// Applies observer events until the observer is live and `done` holds (10 s at
/// most); returns the events applied.
async fn until(
    rx: &mut mpsc::Receiver<ObserverEvent>,
    state: &mut FleetState,
    live: &mut bool,
    done: impl Fn(&FleetState) -> bool,
) -> Vec<FleetEvent> {
    let mut applied = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !(*live && done(state)) {
        let next = tokio::time::timeout_at(deadline, rx.recv()).await.unwrap_or_else(|_| {
            let waiters: Vec<_> = state.waiters().collect();
            panic!(
                "observer too slow: live {live}, {} locks, waiters {waiters:?}",
                state.len()
            )
        });
        match next.unwrap() {
            ObserverEvent::Status(s) => *live = matches!(s, StoreStatus::Live { .. }),
            ObserverEvent::Events(evs) => {
                for e in evs {
                    state.apply(e.clone());
                    applied.push(e);
                }
            }
            ObserverEvent::Missed { .. } => panic!("a SQL observer replays no history"),
            ObserverEvent::Looked(_) => {}
        }
    }
    applied
}

/// After its first read, the observer sends the rows that changed, as upserts and
/// removals, not the table again; only a row deleted by hand (nothing left to
/// read) makes it read the whole table.
async fn observer_reads_only_what_changed(url: &str) {
    let store = connect(url).await;
    let mut fences = Vec::new();
    for i in 0..300 {
        fences.push(take(&store, &format!("many/{i:03}")).await);
    }
    let (tx, mut rx) = mpsc::channel(16);
    let mut observer = SqlObserver::new(url);
    observer.page = 7; // several pages per burst
    tokio::spawn(Box::new(observer).run(tx));
    let mut state = FleetState::default();
    let mut live = false;
    let first = until(&mut rx, &mut state, &mut live, |s| s.len() == 300).await;
    assert!(matches!(first.as_slice(), [FleetEvent::Reset { .. }]), "{first:?}");

    // A burst: 20 new locks, 10 released, one extended.
    for i in 0..20 {
        take(&store, &format!("more/{i:02}")).await;
    }
    for (i, fence) in fences.iter().enumerate().take(10) {
        assert!(store.release(&format!("many/{i:03}"), *fence).await.unwrap());
    }
    let held = store.get("many/100").await.unwrap().unwrap();
    let mut rec = held.record().unwrap().clone();
    rec.purpose = "extended".into();
    assert_eq!(
        store.extend("many/100", held.fence, &rec).await.unwrap(),
        lockscope_store::protocol::Extend::Extended
    );
    let events = until(&mut rx, &mut state, &mut live, |s| {
        s.len() == 310
            && s.get("many/100")
                .and_then(|e| e.record())
                .is_some_and(|r| r.purpose == "extended")
    })
    .await;
    let (mut upserts, mut removals) = (0, 0);
    for e in &events {
        match e {
            FleetEvent::Upsert(_) => upserts += 1,
            FleetEvent::Remove { .. } => removals += 1,
            FleetEvent::Reset { .. } => panic!("the whole table again after a burst of changes"),
            _ => {}
        }
    }
    assert_eq!((upserts, removals), (21, 10), "one event per changed row");
    assert!(state.get("many/005").is_none() && state.get("more/19").is_some());

    // A row deleted by hand leaves nothing to read: the table is read again.
    let pool = sqlx::AnyPool::connect(url).await.unwrap();
    sqlx::query("DELETE FROM lockscope_locks WHERE name = 'many/200'")
        .execute(&pool)
        .await
        .unwrap();
    let events = until(&mut rx, &mut state, &mut live, |s| s.get("many/200").is_none()).await;
    assert!(
        events.iter().any(|e| matches!(e, FleetEvent::Reset { .. })),
        "{events:?}"
    );
    assert_eq!(state.len(), 309);
}

/// docs/protocol.md: SQLite "cannot notify: the dashboard learns of another
/// connection's commit from `PRAGMA data_version`, read on a connection of its
/// own every 10 ms after a commit, the pause doubling while none comes up to
/// 80 ms, and reads the counter row then (and at least every 200 ms)". With the
/// counters' poll an hour apart, another connection's writes (another
/// process's, in the wild) reach the observer only through `data_version`,
/// after a quiet second too; with `data_version` read only hourly, through the
/// poll.
#[tokio::test]
async fn sqlite_observer_wakes_on_another_connections_commit() {
    let hour = Duration::from_secs(3600);
    let checks = [
        (Duration::from_millis(10), Duration::from_millis(80), hour),
        (hour, hour, Duration::from_millis(200)),
    ];
    for (commit_check, quiet_check, poll) in checks {
        let db = sqlite();
        let store = connect(&db.url).await;
        take(&store, "before").await;
        let (tx, mut rx) = mpsc::channel(16);
        let mut observer = SqlObserver::new(&db.url);
        (observer.commit_check, observer.quiet_check, observer.poll) = (commit_check, quiet_check, poll);
        tokio::spawn(Box::new(observer).run(tx));
        let (mut state, mut live) = (FleetState::default(), false);
        until(&mut rx, &mut state, &mut live, |s| s.len() == 1).await;
        for i in 0..3 {
            take(&store, &format!("after/{i}")).await;
            until(&mut rx, &mut state, &mut live, |s| s.len() == 2 + i).await;
            if i == 1 {
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}
