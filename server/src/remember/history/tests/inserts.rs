//! The writer's multi-row INSERT (issue 26): a batch of several statements'
//! rows reads back whole, in order, each value in its column; SQLite's
//! statement has anonymous parameters (numbered ones cost n² to bind); and
//! the writer's SQLite connection keeps its statement journals in memory and
//! a page cache of its own size.

use super::*;

/// Events of every shape the columns take (NULLs included), `n` of them,
/// each with values of its own so that a value bound to the wrong row or
/// column shows.
fn many(n: usize) -> Vec<HistoryEvent> {
    (0..n)
        .map(|i| {
            let lock = held(&format!("l{i:04}"), i as i64 + 1, &format!("s{i}"));
            let mut e = events(1_000 + i as Millis, None, Some(&lock)).remove(0);
            if i % 3 == 0 {
                (e.owner, e.host, e.record) = (None, None, None);
            }
            if i % 5 == 0 {
                e.actor = Some(format!("actor {i}"));
            }
            e.detail = format!("detail {i}");
            e
        })
        .collect()
}

#[tokio::test]
async fn a_batch_of_many_statements_reads_back_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("history.db").display());
    let h = History::open(&url, None).await.unwrap();
    let n = 2 * sql::INSERT_ROWS + 7;
    let log = many(n);
    assert_eq!(h.write(log.clone()).await.unwrap(), n as u64);
    let q = HistoryQuery {
        fleet: "f".into(),
        limit: Some(10_000),
        ..HistoryQuery::default()
    };
    let back = h.query(&q).await.unwrap();
    assert_eq!(back, log, "every event, in order, each value where it was");
    assert_eq!(
        h.write(log).await.unwrap(),
        0,
        "ids already there are not written again"
    );
}

#[test]
fn sqlite_inserts_have_anonymous_parameters() {
    let text = sql::insert(Dialect::Sqlite, 3);
    assert_eq!(text.matches('?').count(), 3 * 14);
    assert!(!text.contains("?1"), "{text}");
    let text = sql::insert(Dialect::Postgres, 3);
    assert!(text.contains("$1,") && text.contains("$42)"), "{text}");
}

/// A connection's `PRAGMA name`, a number.
async fn pragma(conn: &mut sqlx::AnyConnection, name: &str) -> i64 {
    let q = format!("PRAGMA {name}");
    sqlx::query(&q).fetch_one(conn).await.unwrap().try_get(0).unwrap()
}

#[tokio::test]
async fn the_writers_sqlite_connection_has_its_cache_and_temporary_files_in_memory() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("history.db").display());
    let h = History::open(&url, None).await.unwrap();
    // docs/operations.md: "On SQLite the writer's connection has a page cache
    // of 32 MiB (`WRITER_CACHE_BYTES`; SQLite's default, which the readers
    // keep, is 2 MiB), given back a second after its last batch of 5,000
    // events or more, and keeps its temporary files (each INSERT's statement
    // journal) in memory." (The giving back: `write::tests`.)
    assert_eq!(WRITER_CACHE_BYTES, 32 << 20, "the size the docs state");
    let mut writer = h.inner.write.acquire().await.unwrap();
    // 2: MEMORY (a multi-row INSERT's statement journal was a file in the
    // system's temporary directory, a tenth of the writer's time: issue 26).
    assert_eq!(
        pragma(&mut *writer, "temp_store").await,
        2,
        "the writer's temporary files in memory"
    );
    assert_eq!(
        pragma(&mut *writer, "cache_size").await,
        -(WRITER_CACHE_BYTES >> 10),
        "the writer's page cache, in KiB (SQLite's default is 2 MiB)"
    );
    assert_eq!(
        sqlx::query("PRAGMA journal_mode")
            .fetch_one(&mut *writer)
            .await
            .unwrap()
            .try_get::<String, _>(0)
            .unwrap(),
        "wal",
        "still the lock store's WAL"
    );
    drop(writer);
    let mut reader = h.inner.pool.acquire().await.unwrap();
    assert_eq!(
        pragma(&mut *reader, "temp_store").await,
        0,
        "readers keep SQLite's defaults"
    );
}
