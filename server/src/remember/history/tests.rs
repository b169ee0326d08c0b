//! The history against a real SQLite file and a real PostgreSQL: writes are
//! idempotent, queries filter, the table at an instant is rebuilt (from a
//! checkpoint too), retention keeps what it promises, exports stream.

use futures::StreamExt;
use lockscope_model::fleet::{LockBody, LockEntry, Waiter};
use lockscope_model::history::{lock_events, wait_event, HistoryEvent, HistoryQuery, Kind};
use lockscope_model::record::{LockRecord, RECORD_VERSION};
use lockscope_model::session::Holder;
use lockscope_store::testing::PgServer;

use super::*;

mod budgets;
mod checkpoints;
mod exports;
mod inserts;

/// A held lock as the history's tests (and the hub's backlog tests) write it.
pub(crate) fn held(name: &str, fence: i64, session: &str) -> LockEntry {
    LockEntry {
        name: name.into(),
        fence,
        revision: fence,
        body: LockBody::Held(LockRecord {
            v: RECORD_VERSION,
            owner: format!("o{fence}"),
            session: session.into(),
            service: "billing".into(),
            host: "h".into(),
            pid: 1,
            purpose: "test".into(),
            backtrace: vec![].into(),
            acquired_at: 0,
            expected_runtime_ms: 1,
            alert_at: 1,
            auto_unlock_at: 2,
            heartbeat_at: 0,
        }),
    }
}

pub(super) fn events(at: Millis, before: Option<&LockEntry>, after: Option<&LockEntry>) -> Vec<HistoryEvent> {
    lock_events(before, after, None, Holder::Alive)
        .into_iter()
        .map(|d| HistoryEvent::new("f", at, d))
        .collect()
}

fn query(pairs: &[(&str, &str)]) -> HistoryQuery {
    HistoryQuery::from_query("f", pairs.iter().copied(), 0).unwrap()
}

async fn check(h: History) {
    let history = &h;
    let a1 = held("billing/a", 1, "s1");
    let a2 = held("billing/a", 2, "s2");
    let b1 = held("other/b", 1, "s1");
    let mut log = Vec::new();
    log.extend(events(1_000, None, Some(&a1)));
    log.extend(events(1_100, None, Some(&b1)));
    let w = Waiter {
        lock: "billing/a".into(),
        session: "s2".into(),
    };
    log.push(HistoryEvent::new("f", 1_200, wait_event(&w, true, Some(1))));
    log.extend(events(2_000, Some(&a1), Some(&a2)));
    log.push(HistoryEvent::new("f", 2_000, wait_event(&w, false, Some(1))));
    log.extend(events(3_000, Some(&b1), None));
    assert_eq!(history.write(log.clone()).await.unwrap(), 7);
    // The same events again (a second replica, a restart's snapshot), seen later.
    let later: Vec<HistoryEvent> = log
        .iter()
        .cloned()
        .map(|e| HistoryEvent { at: e.at + 50, ..e })
        .collect();
    assert_eq!(history.write(later).await.unwrap(), 0, "nothing is written twice");

    let all = history.query(&query(&[])).await.unwrap();
    assert_eq!(all, log, "everything, oldest first, exactly as written");
    let kinds = |q| async move {
        history
            .query(&q)
            .await
            .unwrap()
            .iter()
            .map(|e| (e.at, e.kind))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        kinds(query(&[("lock", "billing/*"), ("kind", "acquired,released")])).await,
        vec![
            (1_000, Kind::Acquired),
            (2_000, Kind::Released),
            (2_000, Kind::Acquired)
        ]
    );
    assert_eq!(
        kinds(query(&[("from", "1100"), ("to", "2000"), ("session", "s2")])).await,
        vec![
            (1_200, Kind::WaitStarted),
            (2_000, Kind::Acquired),
            (2_000, Kind::WaitStopped)
        ]
    );
    assert_eq!(
        kinds(query(&[("lock", "billing/")])).await,
        vec![],
        "an exact name is not a prefix"
    );
    assert_eq!(kinds(query(&[("limit", "2")])).await.len(), 2);

    // Time travel, without and then with a checkpoint.
    let table = |at| async move {
        let t = history.table_at("f", at).await.unwrap();
        let locks: Vec<(String, i64)> = t.locks.iter().map(|e| (e.name.clone(), e.fence)).collect();
        (locks, t.waiters.len(), t.checkpoint)
    };
    let a = |f| ("billing/a".to_string(), f);
    let b = ("other/b".to_string(), 1);
    assert_eq!(table(999).await, (vec![], 0, None));
    assert_eq!(table(1_250).await, (vec![a(1), b.clone()], 1, None));
    assert_eq!(table(2_500).await, (vec![a(2), b.clone()], 0, None));
    assert_eq!(history.checkpoint("f", 1_500).await.unwrap(), 3);
    assert_eq!(table(2_500).await, (vec![a(2), b.clone()], 0, Some(1_500)));
    assert_eq!(table(3_000).await, (vec![a(2)], 0, Some(1_500)));
    let t = history.table_at("f", 2_500).await.unwrap();
    assert_eq!(t.locks[0], a2, "rows come back with their records");

    // Export: header, then one line per event.
    let mut out = String::new();
    let mut s = std::pin::pin!(stream_export(history, &query(&[]), Format::Ndjson, None));
    while let Some(chunk) = s.next().await {
        out.push_str(&chunk.unwrap());
    }
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 1 + log.len());
    assert!(lines[0].contains("\"lockscope_history\":1"), "{}", lines[0]);
    let back: HistoryEvent = serde_json::from_str(lines[1]).unwrap();
    assert_eq!(back, log[0]);

    // Retention by size: the oldest go, and the table at the cut is still right.
    let kept = Retention {
        max_age: Duration::from_secs(3600 * 24 * 365 * 100),
        max_events: 3,
    };
    // Cut at the 5th oldest event's time: the three before it go (a cut never
    // splits one instant).
    assert_eq!(history.retain(&kept, 3_000).await.unwrap(), 3);
    assert_eq!(history.query(&query(&[])).await.unwrap().len(), 4);
    assert_eq!(table(2_500).await.0, vec![a(2), b]);
    assert!(matches!(
        history.table_at("f", 1_000).await,
        Err(HistoryError::OutOfRange(_))
    ));
}

#[tokio::test]
async fn sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("history.db").display());
    check(History::open(&url, None).await.unwrap()).await;
    // Reopening migrates nothing and finds what was kept.
    let again = History::open(&url, None).await.unwrap();
    assert_eq!(again.query(&query(&[])).await.unwrap().len(), 4);
}

#[tokio::test]
async fn postgres() {
    let pg = PgServer::start().await;
    check(History::open(&pg.url(), None).await.unwrap()).await;
}

/// docs/operations.md, "Several replicas": "The replicas may start together on
/// a new, empty database: each creates the tables and schemas it needs, taking
/// turns." Each creates the history's schema: `CREATE SCHEMA IF NOT EXISTS` run
/// at once by several failed one of them ("creating its schema failed", the
/// server did not start) in about one round of eight in three.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_opening_a_new_postgres_database_at_once_all_start() {
    use sqlx::Connection;
    sqlx::any::install_default_drivers();
    let pg = PgServer::start().await;
    let base = pg.url();
    let mut admin = sqlx::AnyConnection::connect(&base).await.unwrap();
    for round in 0..10 {
        sqlx::query(&format!("CREATE DATABASE together{round}"))
            .execute(&mut admin)
            .await
            .unwrap();
        let url = base.replace("/postgres", &format!("/together{round}"));
        let opens = (0..6).map(|_| History::open(&url, None));
        for (i, opened) in futures::future::join_all(opens).await.into_iter().enumerate() {
            if let Err(e) = opened {
                panic!("round {round}, replica {i}: {e}");
            }
        }
    }
}

/// Review item 8: two replicas sharing a PostgreSQL history, each writing
/// batches that move many fleets' cursors, take the cursor rows' locks in one
/// order (fleet order, after the events) and so never deadlock; in map order
/// (random per map) PostgreSQL answered one of them "deadlock detected".
#[tokio::test]
async fn replicas_sharing_postgres_never_deadlock_on_cursors() {
    let pg = PgServer::start().await;
    let a = History::open(&pg.url(), None).await.unwrap();
    let b = History::open(&pg.url(), None).await.unwrap();
    let fleets: Vec<String> = (0..24).map(|i| format!("fleet{i:02}")).collect();
    let batch = |replica: &str, round: i64| -> Vec<HistoryEvent> {
        fleets
            .iter()
            .map(|f| {
                let entry = held(&format!("{replica}/lock"), round, "s");
                let d = lock_events(None, Some(&entry), None, Holder::Alive).remove(0);
                HistoryEvent::new(f, 1_000 + round, d)
            })
            .collect()
    };
    for round in 1..=40 {
        let (ra, rb) = tokio::join!(a.write(batch("a", round)), b.write(batch("b", round)));
        ra.unwrap_or_else(|e| panic!("replica a, round {round}: {e}"));
        rb.unwrap_or_else(|e| panic!("replica b, round {round}: {e}"));
    }
    for f in &fleets {
        let c = a.cursor(f).await.unwrap().unwrap();
        assert_eq!((c.revision, c.at), (Some(40), 1_040), "{f}");
    }
}

/// Review item 10; docs/operations.md: "Where the history's end cannot be
/// read at start (its database answers the read with an error), the first
/// snapshot records a gap \"not watching from an unknown time …\" instead of
/// none" (none was recorded at all before).
#[tokio::test]
async fn an_unreadable_cursor_at_start_records_a_gap_from_an_unknown_time() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("history.db").display());
    let h = History::open(&url, None).await.unwrap();
    let rename = |from: &'static str, to: &'static str| {
        let pool = h.inner.pool.clone();
        async move {
            sqlx::query(&format!("ALTER TABLE {from} RENAME TO {to}"))
                .execute(&pool)
                .await
                .unwrap();
        }
    };
    rename("history_cursor", "cursor_away").await;
    let r = h.recorder("f");
    assert_eq!(r.cursor().await, None, "the read fails");
    rename("cursor_away", "history_cursor").await;
    r.resync(5_000, 7, std::collections::HashSet::new());
    assert!(h.flush(std::time::Duration::from_secs(10)).await);
    let gaps: Vec<HistoryEvent> = (h.query(&query(&[])).await.unwrap().into_iter())
        .filter(|e| e.kind == Kind::Gap)
        .collect();
    assert_eq!(gaps.len(), 1, "{gaps:?}");
    assert!(
        gaps[0].detail.contains("not watching from an unknown time"),
        "{}",
        gaps[0].detail
    );
}
