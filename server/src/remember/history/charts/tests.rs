//! The charts' counts against a real SQLite file and a real PostgreSQL: per
//! bucket, hold times by the end's acquisition, the most contended locks and
//! services, and the window's waits equal to what a history query of the same
//! bounds returns.

use lockscope_model::charts::{hold_bucket, ChartWindow};
use lockscope_model::fleet::Waiter;
use lockscope_model::history::{wait_event, HistoryEvent, HistoryQuery, Kind};
use lockscope_model::time::{rfc3339, Millis};
use lockscope_store::testing::PgServer;

use super::super::tests::{events, held};
use super::super::History;

fn wait(fleet: &str, at: Millis, lock: &str, session: &str, service: &str) -> HistoryEvent {
    let w = Waiter {
        lock: lock.into(),
        session: session.into(),
    };
    let mut d = wait_event(&w, true, Some(1));
    d.service = Some(service.into());
    // A distinct revision per wait: each is its own event.
    d.revision = Some(at);
    HistoryEvent::new(fleet, at, d)
}

async fn check(h: History) {
    let now = 10_002_000;
    let frame = ChartWindow::FiveMinutes.frame(now);
    let from = frame.from;
    assert_eq!(from, 9_705_000);

    let a1 = held("billing/a", 1, "s1");
    let a2 = held("billing/a", 2, "s1");
    let b1 = held("other/b", 1, "s4");
    let mut log = Vec::new();
    // Held 50 ms, inside the window's first bucket.
    log.extend(events(from + 1_000, None, Some(&a1)));
    log.extend(events(from + 1_050, Some(&a1), None));
    // Taken in the second bucket, held 5 s.
    log.extend(events(from + 6_000, None, Some(&a2)));
    log.extend(events(from + 11_000, Some(&a2), None));
    // Taken before the window (not an acquisition in it), ended in it: 2 min.
    log.extend(events(from - 100_000, None, Some(&b1)));
    log.extend(events(from + 20_000, Some(&b1), None));
    // Waits: two in the first buckets, one at the window's very end, and one
    // just outside each end.
    log.push(wait("f", from + 1_200, "billing/a", "s2", "billing"));
    log.push(wait("f", from + 7_000, "billing/a", "s3", "search"));
    log.push(wait("f", now, "other/b", "s2", "billing"));
    log.push(wait("f", from - 1, "billing/a", "s2", "billing"));
    log.push(wait("f", now + 1, "billing/a", "s2", "billing"));
    // Another fleet's events count for it alone.
    log.push(wait("g", from + 1_200, "billing/a", "s9", "billing"));
    h.write(log).await.unwrap();

    let seen = h.seen("f", &frame).await.unwrap();
    let mut acquisitions = vec![0; 60];
    acquisitions[0] = 1;
    acquisitions[1] = 1;
    assert_eq!(seen.acquisitions, acquisitions);
    let mut waits = vec![0; 60];
    waits[0] = 1;
    waits[1] = 1;
    waits[59] = 1;
    assert_eq!(seen.waits, waits);
    let mut holds = vec![0; 8];
    for ms in [50, 5_000, 120_000] {
        holds[hold_bucket(ms)] += 1;
    }
    assert_eq!(seen.holds, holds);
    let top = |v: &[lockscope_model::charts::Contended]| -> Vec<(String, u64)> {
        v.iter().map(|c| (c.name.clone(), c.waits)).collect()
    };
    assert_eq!(
        top(&seen.top_locks),
        vec![("billing/a".into(), 2), ("other/b".into(), 1)]
    );
    assert_eq!(
        top(&seen.top_services),
        vec![("billing".into(), 2), ("search".into(), 1)]
    );

    // The chart's count is the history's, for the same bounds as a review
    // would type them.
    let q = HistoryQuery::from_query(
        "f",
        [
            ("from", rfc3339(frame.from).as_str()),
            ("to", rfc3339(frame.to).as_str()),
            ("kind", Kind::WaitStarted.as_str()),
        ],
        now,
    )
    .unwrap();
    let listed = h.query(&q).await.unwrap().len() as u64;
    assert_eq!(seen.waits.iter().sum::<u64>(), listed);

    // An empty window: zeros, not errors.
    let empty = h.seen("f", &ChartWindow::Hour.frame(now + 86_400_000)).await.unwrap();
    assert!(empty
        .acquisitions
        .iter()
        .chain(&empty.waits)
        .chain(&empty.holds)
        .all(|n| *n == 0));
    assert!(empty.top_locks.is_empty() && empty.top_services.is_empty());
}

#[tokio::test]
async fn sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("history.db").display());
    check(History::open(&url, None).await.unwrap()).await;
}

#[tokio::test]
async fn postgres() {
    let pg = PgServer::start().await;
    check(History::open(&pg.url(), None).await.unwrap()).await;
}

#[tokio::test]
async fn a_flush_waits_for_what_was_queued() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("history.db").display());
    let h = History::open(&url, None).await.unwrap();
    let recorder = h.recorder("f");
    let w = Waiter {
        lock: "l".into(),
        session: "s".into(),
    };
    for i in 0..2_000 {
        let mut d = wait_event(&w, true, Some(1));
        d.revision = Some(i);
        recorder.record(1_000 + i, vec![d]);
    }
    assert!(h.flush(std::time::Duration::from_secs(30)).await);
    assert_eq!(h.written(), 2_000, "everything queued before the flush is written");
}
