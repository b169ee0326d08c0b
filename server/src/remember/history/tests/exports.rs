//! Exports against a real SQLite file and a real PostgreSQL: unread exports
//! starve neither the pages nor the writer; the caps refuse the next export;
//! a stalled export ends after the idle timeout; a complete export has every
//! event in order across pages (ties at page boundaries included).

use std::sync::atomic::Ordering;

use futures::StreamExt;
use lockscope_model::charts::Frame;
use lockscope_model::history::{Draft, HistoryEvent, HistoryQuery, Kind};
use lockscope_store::testing::PgServer;

use super::super::*;

/// `n` acquisitions in fleet `f`, three per instant (so pages end inside an
/// instant), each with a `detail` of `pad` bytes.
fn many(n: usize, pad: usize) -> Vec<HistoryEvent> {
    (0..n)
        .map(|i| {
            let d = Draft {
                kind: Some(Kind::Acquired),
                lock: Some(format!("l{}", i % 7)),
                fence: Some(i as i64),
                session: Some("s".into()),
                detail: format!("{i:06} {}", "x".repeat(pad)),
                ..Draft::default()
            };
            HistoryEvent::new("f", 1_000 + (i / 3) as i64, d)
        })
        .collect()
}

fn all() -> HistoryQuery {
    HistoryQuery {
        fleet: "f".into(),
        ..HistoryQuery::default()
    }
}

/// Everything `stream` yields, as NDJSON events (the header checked and left out).
async fn drain(stream: impl futures::Stream<Item = Result<String, HistoryError>>) -> Vec<HistoryEvent> {
    let mut out = String::new();
    let mut s = std::pin::pin!(stream);
    while let Some(chunk) = s.next().await {
        out.push_str(&chunk.unwrap());
    }
    let mut lines = out.lines();
    assert!(lines.next().unwrap().contains("\"lockscope_history\":1"));
    lines.map(|l| serde_json::from_str(l).unwrap()).collect()
}

const WITHIN: Duration = Duration::from_secs(3);

async fn exports_starve_nothing(url: &str) {
    let limits = ExportLimits {
        per_identity: 2,
        total: 8,
        idle: Duration::from_secs(60),
        connections: 2,
    };
    let h = History::open_with(url, None, limits).await.unwrap();
    let log = many(4_000, 100);
    h.write(log.clone()).await.unwrap();
    // Five downloads whose readers take the header and stop reading (the
    // defect: each held one of the history's 4 connections).
    let mut held = Vec::new();
    for who in ["a", "b", "c", "d", "e"] {
        let permit = h.admit_export(who).unwrap();
        let mut s = Box::pin(stream_export(&h, &all(), Format::Ndjson, Some(permit)));
        let header = s.next().await.unwrap();
        held.push(futures::stream::iter([header]).chain(s));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(h.stats().exports_active.load(Ordering::Relaxed), 5);

    // The page's query, the charts' counts and the table at an instant answer.
    let q = HistoryQuery {
        limit: Some(10),
        ..all()
    };
    let page = tokio::time::timeout(WITHIN, h.query(&q))
        .await
        .expect("the page's query waited");
    assert_eq!(page.unwrap().len(), 10);
    let frame = Frame {
        from: 1_000,
        to: 3_000,
        bucket_ms: 1_000,
        buckets: 2,
    };
    let seen = tokio::time::timeout(WITHIN, h.seen("f", &frame))
        .await
        .expect("the charts waited");
    assert!(seen.unwrap().acquisitions.iter().sum::<u64>() > 0);
    let table = tokio::time::timeout(WITHIN, h.table_at("f", 1_100))
        .await
        .expect("time travel waited");
    assert!(table.unwrap().replayed > 0);

    // The writer writes the next events, none dropped.
    let recorder = h.recorder("f");
    for i in 0..3 {
        let d = Draft {
            kind: Some(Kind::Acquired),
            lock: Some("next".into()),
            fence: Some(100_000 + i),
            detail: "after the exports".into(),
            ..Draft::default()
        };
        recorder.record(5_000 + i, vec![d]);
    }
    assert!(h.flush(WITHIN).await, "the writer kept up");
    assert_eq!(h.written(), 3);
    assert_eq!(h.stats().dropped.load(Ordering::Relaxed), 0);
    assert_eq!(h.stats().loss(), None);

    // The held exports still complete, each with every event. docs/api.md:
    // "an event written while it runs is in it if it sorts after what was
    // already sent" (the three written meanwhile sort last).
    for s in held {
        let got = drain(s).await;
        assert_eq!(got.len(), log.len() + 3);
        assert!(got[..log.len()] == log[..], "in order, each once");
        assert!(got[log.len()..].iter().all(|e| e.detail == "after the exports"));
    }
    assert_eq!(h.stats().exports_active.load(Ordering::Relaxed), 0);
}

async fn caps_and_idle_timeout(url: &str) {
    let limits = ExportLimits {
        per_identity: 2,
        total: 3,
        idle: Duration::from_millis(400),
        connections: 2,
    };
    let h = History::open_with(url, None, limits).await.unwrap();
    // More than a page ahead of a reader that stops (one page is queued).
    h.write(many(3 * EXPORT_PAGE_ROWS as usize, 10)).await.unwrap();

    // "at most 2 running exports per identity; the next is refused (429, Retry-After)"
    let a1 = h.admit_export("alice").unwrap();
    let a2 = h.admit_export("alice").unwrap();
    let refused = h.admit_export("alice").unwrap_err();
    assert!(refused.reason.contains("alice already runs 2"), "{}", refused.reason);
    assert_eq!(refused.retry_after, RETRY_AFTER);
    let b1 = h.admit_export("bob").unwrap();
    let total = h.admit_export("carol").unwrap_err();
    assert!(total.reason.contains("at most 3"), "{}", total.reason);
    assert_eq!(h.stats().exports_refused.load(Ordering::Relaxed), 2);
    drop(a1);
    let a3 = h.admit_export("alice").expect("a finished export gives its place back");
    drop((a2, b1));

    // A reader that stops: after the idle timeout the export ends, its place
    // goes back, the stall is counted, and the reader's next reads end in an
    // error, never a clean (short) end.
    let mut s = Box::pin(stream_export(&h, &all(), Format::Ndjson, Some(a3)));
    assert!(s.next().await.unwrap().unwrap().contains("lockscope_history"));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while h.stats().exports_stalled.load(Ordering::Relaxed) == 0 {
        assert!(tokio::time::Instant::now() < deadline, "the stalled export never ended");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(h.stats().exports_stalled.load(Ordering::Relaxed), 1);
    let mut ended_in_error = false;
    while let Some(chunk) = s.next().await {
        if let Err(e) = chunk {
            assert!(e.to_string().contains("ended before its last event"), "{e}");
            ended_in_error = true;
        }
    }
    assert!(ended_in_error, "a stalled export is cut, not ended cleanly");
    // (Read once the stream has ended: the stall is counted before the export's
    // task has given its place back, on another thread.)
    assert_eq!(h.stats().exports_active.load(Ordering::Relaxed), 0);

    // Without a permit (the command line) nothing times out.
    let s = stream_export(&h, &all(), Format::Ndjson, None);
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    assert_eq!(drain(s).await.len(), 3 * EXPORT_PAGE_ROWS as usize);
    assert_eq!(h.stats().exports_stalled.load(Ordering::Relaxed), 1);
}

async fn complete_export_in_order(url: &str) {
    let h = History::open(url, None).await.unwrap();
    // Pages of EXPORT_PAGE_ROWS end inside an instant (three events each).
    let n = 2 * EXPORT_PAGE_ROWS as usize + 101;
    let log = many(n, 10);
    h.write(log.clone()).await.unwrap();
    let got = drain(stream_export(&h, &all(), Format::Ndjson, None)).await;
    assert_eq!(got.len(), n, "every event, once");
    assert!(got == log, "in the order written (time, then insertion)");
    // A limit across pages.
    let q = HistoryQuery {
        limit: Some(EXPORT_PAGE_ROWS + 7),
        ..all()
    };
    let got = drain(stream_export(&h, &q, Format::Ndjson, None)).await;
    assert!(got[..] == log[..EXPORT_PAGE_ROWS as usize + 7]);
    // CSV: the header lines, then one line per event.
    let mut s = std::pin::pin!(stream_export(&h, &all(), Format::Csv, None));
    let mut csv = String::new();
    while let Some(chunk) = s.next().await {
        csv.push_str(&chunk.unwrap());
    }
    assert_eq!(csv.lines().count(), 2 + n);
}

fn sqlite_url(dir: &tempfile::TempDir) -> String {
    format!("sqlite:{}", dir.path().join("history.db").display())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_exports_starve_nothing() {
    let dir = tempfile::tempdir().unwrap();
    exports_starve_nothing(&sqlite_url(&dir)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_exports_starve_nothing() {
    let pg = PgServer::start().await;
    exports_starve_nothing(&pg.url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_caps_and_idle_timeout() {
    let dir = tempfile::tempdir().unwrap();
    caps_and_idle_timeout(&sqlite_url(&dir)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_caps_and_idle_timeout() {
    let pg = PgServer::start().await;
    caps_and_idle_timeout(&pg.url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_complete_export_in_order() {
    let dir = tempfile::tempdir().unwrap();
    complete_export_in_order(&sqlite_url(&dir)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_complete_export_in_order() {
    let pg = PgServer::start().await;
    complete_export_in_order(&pg.url()).await;
}
