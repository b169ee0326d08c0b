//! Byte budgets against a real SQLite file and a real PostgreSQL, with lock
//! records of 200 KiB (a record may be 256 KiB): an export's pages end at
//! [`EXPORT_PAGE_BYTES`] as well as at [`EXPORT_PAGE_ROWS`], and the next page
//! continues exactly after the last event sent; a query's answer past
//! [`MAX_ANSWER_BYTES`] is refused, saying how many events fit.

use futures::StreamExt;
use lockscope_model::history::{Draft, HistoryEvent, HistoryQuery, Kind};
use lockscope_store::testing::PgServer;

use super::super::*;

const RECORD: usize = 200 << 10;

/// `n` acquisitions in fleet `f` with a record of 200 KiB each, three per
/// instant (so pages end inside an instant).
fn large(n: usize) -> Vec<HistoryEvent> {
    (0..n)
        .map(|i| {
            let d = Draft {
                kind: Some(Kind::Acquired),
                lock: Some(format!("l{i}")),
                fence: Some(i as i64),
                record: Some(format!("{i:06}{}", "r".repeat(RECORD))),
                ..Draft::default()
            };
            HistoryEvent::new("f", 1_000 + (i / 3) as i64, d)
        })
        .collect()
}

fn all() -> HistoryQuery {
    HistoryQuery {
        fleet: "f".into(),
        limit: Some(10_000),
        ..HistoryQuery::default()
    }
}

async fn budgets(url: &str) {
    let h = History::open(url, None).await.unwrap();
    // 90 events of ~200 KiB: ~18 MiB, past both budgets.
    let log = large(90);
    h.write(log.clone()).await.unwrap();

    // Each chunk after the header is one page: at most the budget plus the
    // one event that reached it (the defect: one chunk of all 90, ~18 MiB).
    let mut s = std::pin::pin!(stream_export(&h, &all(), Format::Ndjson, None));
    let header = s.next().await.unwrap().unwrap();
    assert!(header.contains("\"lockscope_history\":1"), "{header}");
    let mut got = Vec::new();
    let mut pages = 0;
    while let Some(chunk) = s.next().await {
        let chunk = chunk.unwrap();
        assert!(
            chunk.len() <= EXPORT_PAGE_BYTES + RECORD + 4096,
            "a page of {} bytes: more than {EXPORT_PAGE_BYTES} and one record",
            chunk.len()
        );
        pages += 1;
        got.extend(chunk.lines().map(|l| serde_json::from_str::<HistoryEvent>(l).unwrap()));
    }
    assert!(pages >= 4, "~18 MiB in pages of 4 MiB: {pages} pages");
    assert_eq!(got.len(), log.len(), "every event, once");
    assert!(got == log, "in order across pages cut by bytes (ties included)");

    // The JSON answer: refused past MAX_ANSWER_BYTES, saying how many fit, and
    // that many are answered.
    let err = h.query(&all()).await.unwrap_err();
    let HistoryError::TooLarge { fit } = err else {
        panic!("not refused as too large: {err}")
    };
    let fits = log
        .iter()
        .scan(0, |bytes, e| {
            *bytes += event_bytes(e);
            Some(*bytes)
        })
        .take_while(|bytes| *bytes <= MAX_ANSWER_BYTES)
        .count();
    assert_eq!(fit, fits, "as many as fit in the budget");
    assert!((70..90).contains(&fit), "16 MiB of ~200 KiB events: {fit}");
    let why = HistoryError::TooLarge { fit }.to_string();
    assert!(
        why.contains("larger than 16 MiB") && why.contains(&format!("ask limit={fit} or less")),
        "{why}"
    );
    let q = HistoryQuery {
        limit: Some(fit as u32),
        ..all()
    };
    assert!(h.query(&q).await.unwrap() == log[..fit]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_pages_and_answers_are_bounded_in_bytes() {
    let dir = tempfile::tempdir().unwrap();
    budgets(&format!("sqlite:{}", dir.path().join("history.db").display())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_pages_and_answers_are_bounded_in_bytes() {
    let pg = PgServer::start().await;
    budgets(&pg.url()).await;
}
