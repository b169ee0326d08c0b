//! History exports against a real server and a real SQLite history: five
//! downloads whose clients stop reading leave the review page, the charts and
//! the table at an instant answering and the writer writing; the identity's
//! next export is refused with 429 and Retry-After; the stalled downloads end
//! after the idle timeout, which gives their places back, and the kernel
//! closes their connections after twice that. A JSON answer past 16 MiB is
//! refused saying how many events fit.

use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use lockscope::auth::Auth;
use lockscope::live::hub::{Fleets, HubHandle};
use lockscope::remember::audit::AuditLog;
use lockscope::remember::history::{ExportLimits, History};
use lockscope::web::AppState;
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

/// A metric's value in a scrape (a panic naming it when absent: a renamed
/// metric fails, never reads as 0).
fn metric(scrape: &str, name: &str) -> f64 {
    crate::scrape::Metrics::parse(scrape.to_string()).sample(name)
}

/// A server of `FLEET` (a SQLite store) whose history is `url`'s, with
/// `limits`, on a loopback port of its own. Keep the sender: dropping it
/// stops the server.
async fn serve(
    dir: &std::path::Path,
    url: &str,
    limits: ExportLimits,
) -> (std::net::SocketAddr, History, watch::Sender<bool>) {
    let spec = StoreSpec::sqlite_file(&dir.join("locks.db"));
    let audit = AuditLog::open(&format!("sqlite:{}", dir.join("audit.db").display()))
        .await
        .unwrap();
    let history = History::open_with(url, None, limits).await.unwrap();
    let hub = HubHandle::spawn_recording(FLEET, "sqlite under test", spec.open().unwrap(), None);
    let (stop, stop_rx) = watch::channel(false);
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
    (addr, history, stop)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unread_exports_starve_nothing_and_are_capped_and_ended() {
    let dir = tempfile::tempdir().unwrap();
    // First phase: an idle timeout no slow machine reaches, so the five held
    // downloads are still running when counted (with 4 s, the 429, the
    // pages, a replay of 6,000 events and a flush could outlast it on a
    // loaded CI).
    let limits = ExportLimits {
        per_identity: 5,
        total: 8,
        idle: Duration::from_secs(600),
        connections: 2,
    };
    let url = format!("sqlite:{}", dir.path().join("history.db").display());
    let (addr, history, _stop) = serve(dir.path(), &url, limits).await;
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
    assert_eq!(metric(&m, "lockscope_history_export_idle_timeout_seconds"), 600.0);
    assert_eq!(metric(&m, "lockscope_history_export_connections"), 2.0);
    drop(held);

    // Second phase, a server with a short idle timeout over the same history.
    // Not shorter: an export's timer starts once the buffers ahead of its
    // client are full, the kernel's (twice idle_secs) once the client's window
    // shuts, earlier; filling megabytes of buffers must take less than
    // idle_secs even on a loaded machine, or the kernel ends the connection
    // first and the export is not counted as stalled.
    let idle = Duration::from_secs(5);
    let limits = ExportLimits {
        per_identity: 5,
        total: 8,
        idle,
        connections: 2,
    };
    let (addr, _history, _stop2) = serve(dir.path(), &url, limits).await;
    let began = tokio::time::Instant::now();
    let mut held = Vec::new();
    for _ in 0..5 {
        held.push(stalled_download(addr, &export).await);
    }

    // "A download whose client reads nothing for [idle_secs] is ended": their
    // places go back and each stall is counted.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
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
    // connection". The client finds out when it sends something: a byte (the
    // start of a next request, which reads nothing of the answer, so the
    // window stays shut) every 200 ms until one is answered with a reset;
    // not before twice idle_secs (an earlier reset would be the server
    // closing for some other reason), and within a generous deadline.
    let mut conn = held.pop().unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let reset = loop {
        if let Err(e) = conn.write_all(b"G").await {
            break e;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the stalled connection was never closed"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(
        matches!(
            reset.kind(),
            std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe
        ),
        "{reset:?}"
    );
    assert!(
        began.elapsed() >= idle * 2,
        "closed after {:?}, before twice idle_secs",
        began.elapsed()
    );
    // Reading again gives no more than what was already in the client's own
    // small buffer (megabytes were queued on the server's side): never a
    // complete-looking file.
    let mut rest = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), conn.read_to_end(&mut rest))
        .await
        .expect("a closed connection answers at once");
    assert!(
        rest.len() < 1_000_000,
        "{} bytes came after the close: {read:?}",
        rest.len()
    );
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

/// An idle timeout too large to double (possible for limits built in code;
/// the file refuses it) still serves: the kernel's timeout saturates (the
/// defect: `idle * 2` overflowed and the server's task panicked).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_timeout_too_large_to_double_still_serves() {
    let dir = tempfile::tempdir().unwrap();
    let limits = ExportLimits {
        idle: Duration::MAX,
        ..ExportLimits::default()
    };
    let url = format!("sqlite:{}", dir.path().join("history.db").display());
    let (addr, _history, _stop) = serve(dir.path(), &url, limits).await;
    let r = get(addr, "/healthz").await;
    assert_eq!(r.status, 200, "{}", r.body);
}

/// docs/api.md: "A JSON answer holds at most 16 MiB of events … past it the
/// answer is `400`, saying how many events fit"; the same events export in
/// full.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_json_answer_past_16_mib_is_refused_saying_how_many_fit() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("history.db").display());
    let (addr, history, _stop) = serve(dir.path(), &url, ExportLimits::default()).await;
    // 90 lock records of 200 KiB: ~18 MiB.
    let start = now_ms() - 60_000;
    let events: Vec<HistoryEvent> = (0..90)
        .map(|i| {
            let d = Draft {
                kind: Some(Kind::Acquired),
                lock: Some(format!("l{i:02}")),
                fence: Some(i),
                record: Some(format!("{i:06}{}", "r".repeat(200 << 10))),
                ..Draft::default()
            };
            HistoryEvent::new(FLEET, start + i, d)
        })
        .collect();
    history.write(events).await.unwrap();
    let path = format!("/api/v1/fleets/{FLEET}/history?from=-1h");
    let r = get_within(addr, &path, Duration::from_secs(30)).await;
    assert_eq!(r.status, 400, "{}", &r.body[..r.body.len().min(300)]);
    let why: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    let why = why["error"].as_str().unwrap();
    assert!(why.contains("larger than 16 MiB"), "{why}");
    let fit: usize = why
        .split("ask limit=")
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("the answer says how many fit: {why}"));
    assert!((70..90).contains(&fit), "{why}");
    let r = get_within(addr, &format!("{path}&limit={fit}"), Duration::from_secs(30)).await;
    assert_eq!(r.status, 200, "{}", &r.body[..r.body.len().min(300)]);
    let got: Vec<HistoryEvent> = serde_json::from_str(&r.body).unwrap();
    assert_eq!(got.len(), fit);
    let all = get_within(addr, &format!("{path}&format=ndjson"), Duration::from_secs(30)).await;
    assert_eq!(all.status, 200);
    assert_eq!(all.body.lines().count(), 1 + 90, "the header and every event");
}
