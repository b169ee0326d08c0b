//! The writer's multi-row INSERT (issue 26): a batch of several statements'
//! rows reads back whole, in order, each value in its column; and SQLite's
//! statement has anonymous parameters (numbered ones cost n² to bind).

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
