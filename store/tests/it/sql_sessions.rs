//! SQL's answers in docs/protocol.md ("SQL") that only SQL can show, read from
//! the tables themselves: SQLite's journal mode and change counters, and what a
//! session's row looks like after it registers again.

use std::time::Duration;

use lockscope_store::client::Session;
use lockscope_store::protocol::LockStore;
use lockscope_store::sql::SqlLocks;
use lockscope_store::testing::contract;

struct Sqlite {
    _dir: tempfile::TempDir,
    url: String,
}

fn sqlite() -> Sqlite {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("locks.db").display());
    Sqlite { _dir: dir, url }
}

async fn connect(url: &str) -> SqlLocks {
    SqlLocks::connect(url).await.unwrap()
}

/// docs/protocol.md, SQL: "`lockscope_changes` has the columns `id, counter,
/// removals, waiters, sessions`" and "`waiters` is no longer incremented since
/// version 4: a write to a session row, waits included, counts `sessions`".
#[tokio::test]
async fn sqlite_change_counters_are_the_documented_columns() {
    let db = sqlite();
    let store = connect(&db.url).await;
    let pool = sqlx::SqlitePool::connect(&db.url).await.unwrap();
    let columns: Vec<String> =
        sqlx::query_scalar("SELECT name FROM pragma_table_info('lockscope_changes') ORDER BY cid")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(columns, ["id", "counter", "removals", "waiters", "sessions"]);
    let counters = async || {
        sqlx::query_as::<_, (i64, i64, i64, i64)>(
            "SELECT counter, removals, waiters, sessions FROM lockscope_changes WHERE id = 1",
        )
        .fetch_one(&pool)
        .await
        .unwrap()
    };
    let session = Session::open(store.clone(), contract::quiet("changes")).await.unwrap();
    let before = counters().await;
    store
        .set_waiting(session.registration(), session.id(), "changes/x", true)
        .await
        .unwrap();
    let after = counters().await;
    assert_eq!(after.2, before.2, "waiters is not incremented");
    assert_eq!(after.3, before.3 + 1, "a wait counts sessions");
    assert!(after.0 > before.0);
    session.close().await.unwrap();
}

/// docs/protocol.md, SQL: "Every SQLite connection sets `PRAGMA journal_mode = WAL`
/// (readers never block the writer)". WAL is a property of the database file, so
/// a connection of another process sees it.
#[tokio::test]
async fn sqlite_runs_in_wal_mode() {
    let db = sqlite();
    let _store = connect(&db.url).await;
    let pool = sqlx::SqlitePool::connect(&db.url).await.unwrap();
    let mode: String = sqlx::query_scalar("PRAGMA journal_mode")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(mode, "wal");
}

/// docs/protocol.md, Open a session: a re-registration's "record MUST keep `session`,
/// `service`, `host`, `pid` and `started_at` as at the first Open, and the `contention`
/// counters as they are (never reset, never lower); only `heartbeat_at` (now) and
/// `waiting_for` (what the session waits for now) change".
#[tokio::test]
async fn a_reregistration_changes_only_heartbeat_at_and_waiting_for() {
    use lockscope_model::record::{Record, SessionRecord};
    let db = sqlite();
    let store = connect(&db.url).await;
    let pool = sqlx::SqlitePool::connect(&db.url).await.unwrap();
    let s = Session::open(store.clone(), contract::quiet("again")).await.unwrap();
    let g = s.lock("again/r", contract::opts("counted")).await.unwrap();
    let record = async || {
        let raw: String = sqlx::query_scalar("SELECT record FROM lockscope_sessions WHERE session = ?1")
            .bind(s.id().to_string())
            .fetch_one(&pool)
            .await
            .unwrap();
        SessionRecord::parse(raw.as_bytes()).unwrap()
    };
    s.heartbeat_now().await;
    let first = record().await;
    assert_eq!(first.contention.acquired, 1);
    store.close_session(s.registration(), s.id()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(5)).await;
    s.heartbeat_now().await;
    let again = record().await;
    assert!(again.heartbeat_at > first.heartbeat_at);
    assert_eq!(
        SessionRecord {
            heartbeat_at: first.heartbeat_at,
            ..again.clone()
        },
        first,
        "only heartbeat_at changed: {again:?}"
    );
    assert!(g.unlock().await.unwrap());
    s.close().await.unwrap();
}

/// docs/protocol.md, Session heartbeat step 1: the client registers again "and
/// `put(W, …, new lease)` for every `lock` call still waiting" — on SQL, the new row's
/// `waiting_for`. (It was put again only on the call's next attempt, which on SQL
/// never came: the registration's handle does not change there.)
#[tokio::test]
async fn a_wait_is_registered_again_with_the_session() {
    let db = sqlite();
    let store = connect(&db.url).await;
    let pool = sqlx::SqlitePool::connect(&db.url).await.unwrap();
    let quiet = contract::quiet;
    let a = Session::open(store.clone(), quiet("holder")).await.unwrap();
    let held = a.lock("again/w", contract::opts("held")).await.unwrap();
    let b = Session::open(store.clone(), quiet("waiter")).await.unwrap();
    let waiter = {
        let b = b.clone();
        tokio::spawn(async move { b.lock("again/w", contract::opts("waits")).await.map(|g| g.fence()) })
    };
    let waiting_for = async |id: &str| {
        sqlx::query_scalar::<_, Option<String>>("SELECT waiting_for FROM lockscope_sessions WHERE session = ?1")
            .bind(id.to_string())
            .fetch_optional(&pool)
            .await
            .unwrap()
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while waiting_for(b.id()).await != Some(Some("again/w".into())) {
        assert!(tokio::time::Instant::now() < deadline, "the wait shows");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    store.close_session(b.registration(), b.id()).await.unwrap();
    assert_eq!(waiting_for(b.id()).await, None, "the registration is gone");
    b.heartbeat_now().await;
    assert_eq!(
        waiting_for(b.id()).await,
        Some(Some("again/w".into())),
        "registered again, still waiting"
    );
    assert!(held.unlock().await.unwrap());
    assert!(waiter.await.unwrap().is_ok(), "and the wait goes on to take the lock");
    a.close().await.unwrap();
}
