//! History exports against a real server and a real SQLite history: five
//! downloads whose clients stop reading leave the review page, the charts and
//! the table at an instant answering and the writer writing; the identity's
//! next export is refused with 429 and Retry-After; the stalled downloads end
//! after the idle timeout, which gives their places back.

use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use lockscope::audit::AuditLog;
use lockscope::auth::Auth;
use lockscope::history::{ExportLimits, History};
use lockscope::http::AppState;
use lockscope::hub::{Fleets, HubHandle};
use lockscope_model::history::{Draft, HistoryEvent, Kind};
use lockscope_store::now_ms;
use lockscope_store::spec::StoreSpec;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::watch;

const FLEET: &str = "sql";
const EVENTS: usize = 6_000;
/// Each request's answer comes within this (the defect: 5 s, then 503 or an error in the page).
const WITHIN: Duration = Duration::from_secs(3);

struct Reply {
    status: u16,
    headers: hyper::HeaderMap,
    body: String,
}

async fn get(addr: std::net::SocketAddr, path: &str) -> Reply {
    get_within(addr, path, WITHIN).await
}

async fn get_within(addr: std::net::SocketAddr, path: &str, within: Duration) -> Reply {
    let req = hyper::Request::builder()
        .uri(format!("http://{addr}{path}"))
        .body(Full::new(Bytes::new()))
        .unwrap();
    let ask = async {
        let resp = Client::builder(TokioExecutor::new())
            .build_http()
            .request(req)
            .await
            .unwrap();
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let body = resp.into_body().collect().await.map(|b| b.to_bytes());
        let body = match body {
            Ok(b) => String::from_utf8_lossy(&b).into_owned(),
            Err(e) => format!("<cut: {e}>"),
        };
        Reply { status, headers, body }
    };
    tokio::time::timeout(within, ask)
        .await
        .unwrap_or_else(|_| panic!("{path}: no answer within {within:?}"))
}

/// A download that reads its status line and then nothing (a small receive
/// buffer, so the server's side fills soon).
async fn stalled_download(addr: std::net::SocketAddr, path: &str) -> tokio::net::TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut conn = socket.connect(addr).await.unwrap();
    let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\n\r\n");
    conn.write_all(req.as_bytes()).await.unwrap();
    let mut status = [0u8; 12];
    conn.read_exact(&mut status).await.unwrap();
    assert_eq!(&status, b"HTTP/1.1 200", "{}", String::from_utf8_lossy(&status));
    conn
}

/// A metric's value in a scrape (0 when absent).
fn metric(scrape: &str, name: &str) -> f64 {
    scrape
        .lines()
        .find_map(|l| l.strip_prefix(name).and_then(|v| v.strip_prefix(' ')))
        .map_or(0.0, |v| v.trim().parse().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unread_exports_starve_nothing_and_are_capped_and_ended() {
    let dir = tempfile::tempdir().unwrap();
    let spec = StoreSpec::sqlite_file(&dir.path().join("locks.db"));
    let audit = AuditLog::open(&format!("sqlite:{}", dir.path().join("audit.db").display()))
        .await
        .unwrap();
    let limits = ExportLimits {
        per_identity: 5,
        total: 8,
        idle: Duration::from_secs(4),
        connections: 2,
    };
    let url = format!("sqlite:{}", dir.path().join("history.db").display());
    let history = History::open_with(&url, None, limits).await.unwrap();
    let start = now_ms() - 60_000;
    let events: Vec<HistoryEvent> = (0..EVENTS)
        .map(|i| {
            let d = Draft {
                kind: Some(Kind::Acquired),
                lock: Some(format!("l{}", i % 11)),
                fence: Some(i as i64),
                detail: format!("{i} {}", "x".repeat(2_000)),
                ..Draft::default()
            };
            HistoryEvent::new(FLEET, start + i as i64, d)
        })
        .collect();
    history.write(events).await.unwrap();
    let hub = HubHandle::spawn_recording(FLEET, "sqlite under test", spec.open().unwrap(), None);
    let (_stop, stop_rx) = watch::channel(false);
    let state = AppState::new(
        Fleets::new(vec![hub.clone()]),
        "target/site".into(),
        stop_rx.clone(),
        audit.clone(),
        Auth::new(None, audit),
    )
    .with_history(history.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(lockscope::serve(listener, state, stop_rx, Duration::from_secs(1)));

    let export = format!("/api/v1/fleets/{FLEET}/history?format=ndjson&from=-1h");
    let mut held = Vec::new();
    for _ in 0..5 {
        held.push(stalled_download(addr, &export).await);
    }

    // "an identity runs at most 2 exports at a time …; the next one is refused
    // with 429 and Retry-After" (here per_identity = 5; without [auth] every
    // caller is `anonymous`).
    let r = get(addr, &export).await;
    assert_eq!(r.status, 429, "{}", r.body);
    assert_eq!(r.headers.get("retry-after").unwrap(), "5");
    assert!(
        r.body.contains("anonymous already runs 5 history exports"),
        "{}",
        r.body
    );

    // The pages still answer, and the history is readable in them.
    let page = get(addr, &format!("/history?fleet={FLEET}&from=-1h&limit=5")).await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(!page.body.contains("could not be read"), "{}", page.body);
    assert!(!page.body.contains("history-lost"), "nothing lost yet");
    let charts = get(addr, &format!("/api/v1/fleets/{FLEET}/charts?window=5m")).await;
    assert_eq!(charts.status, 200, "{}", charts.body);
    let table = get(addr, &format!("/api/v1/fleets/{FLEET}/table?at=now")).await;
    assert_eq!(table.status, 200, "{}", table.body);

    // The writer writes the next events, none dropped.
    let d = Draft {
        kind: Some(Kind::Acquired),
        lock: Some("after".into()),
        fence: Some(1),
        detail: "while the exports are held".into(),
        ..Draft::default()
    };
    history.recorder(FLEET).record(now_ms(), vec![d]);
    assert!(history.flush(WITHIN).await, "the writer kept up");
    assert_eq!(history.written(), 1);
    let m = get(addr, "/metrics").await.body;
    assert_eq!(metric(&m, "lockscope_history_events_dropped_total"), 0.0);
    assert_eq!(metric(&m, "lockscope_history_exports_running"), 5.0, "{m}");
    assert_eq!(metric(&m, "lockscope_history_exports_refused_total"), 1.0);
    assert_eq!(metric(&m, "lockscope_history_export_limit_per_identity"), 5.0);
    assert_eq!(metric(&m, "lockscope_history_export_limit_total"), 8.0);
    assert_eq!(metric(&m, "lockscope_history_export_idle_timeout_seconds"), 4.0);
    assert_eq!(metric(&m, "lockscope_history_export_connections"), 2.0);

    // "A download whose client reads nothing for [idle_secs] is ended": their
    // places go back and each stall is counted.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let m = get(addr, "/metrics").await.body;
        if metric(&m, "lockscope_history_exports_stalled_total") == 5.0 {
            assert_eq!(metric(&m, "lockscope_history_exports_running"), 0.0, "{m}");
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the stalled exports never ended: {m}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // docs/operations.md: "… and after twice idle_secs the kernel closes its
    // connection": the client that reads again finds it reset, with no more
    // than what was already in its own small buffer (megabytes were queued on
    // the server's side), never a complete-looking file.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let mut conn = held.pop().unwrap();
    let mut rest = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), conn.read_to_end(&mut rest))
        .await
        .expect("a closed connection answers at once");
    assert!(read.is_err(), "the connection was reset, not ended: {read:?}");
    assert!(rest.len() < 1_000_000, "{} bytes came after the close", rest.len());
    drop(held);

    // A new export is admitted and has every event.
    let all = get_within(addr, &export, Duration::from_secs(60)).await;
    assert_eq!(all.status, 200, "{}", &all.body[..all.body.len().min(300)]);
    assert_eq!(
        all.body.lines().count(),
        1 + EVENTS + 1,
        "header, the events, the one written after"
    );
}
