//! The limits on what a client can make the server hold (`[limits]`,
//! docs/operations.md "Limits"), against a real server on a real socket: a
//! websocket frame past the message limit, websockets past the per-identity
//! limit, and a flood of bad tokens (429 with `Retry-After`, one audit row
//! with the count, the numbers in `/metrics`).

use std::net::SocketAddr;
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use lockscope::auth::{new_token, Auth, UNAUTHENTICATED};
use lockscope::live::hub::{Fleets, HubHandle};
use lockscope::remember::audit::AuditLog;
use lockscope::settings::{FileConfig, Limits};
use lockscope::web::AppState;
use lockscope_model::admin::{AuditQuery, Role};
use lockscope_store::ObserverEvent;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::sync::{mpsc, watch};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

struct Server {
    addr: SocketAddr,
    audit: AuditLog,
    /// An admin's API token (with `auth`).
    token: Option<String>,
    _events: mpsc::Sender<ObserverEvent>,
    _dir: tempfile::TempDir,
    _stop: watch::Sender<bool>,
}

impl Server {
    /// A server of one fleet fed by hand, with `limits`; with `auth`, one
    /// admin token configured.
    async fn start(auth: bool, limits: Limits) -> Server {
        let dir = tempfile::tempdir().unwrap();
        let audit = AuditLog::open(&format!("sqlite:{}", dir.path().join("audit.db").display()))
            .await
            .unwrap();
        let (token, auth_file) = match auth {
            false => (None, None),
            true => {
                let (token, entry) = new_token("alice", Role::Admin);
                (Some(token), FileConfig::parse(&entry).unwrap().auth)
            }
        };
        let (events, rx) = mpsc::channel(16);
        let hub = HubHandle::with_events("f", "by hand", rx);
        let (stop, stop_rx) = watch::channel(false);
        let state = AppState::new(
            Fleets::new(vec![hub]),
            "target/site".into(),
            stop_rx.clone(),
            audit.clone(),
            Auth::new(auth_file, audit.clone()).with_limits(&limits),
        )
        .with_limits(&limits);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(lockscope::serve(listener, state, stop_rx, Duration::from_secs(1)));
        Server {
            addr,
            audit,
            token,
            _events: events,
            _dir: dir,
            _stop: stop,
        }
    }

    /// A websocket, and its first message (`hello`, or a close frame).
    async fn ws(&self) -> (Ws, Message) {
        let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://{}/ws", self.addr))
            .await
            .unwrap();
        let first = next(&mut ws).await;
        (ws, first)
    }

    async fn request(&self, method: &str, path: &str, bearer: Option<&str>) -> (u16, Option<String>, String) {
        self.request_from(method, path, bearer, None).await
    }

    /// A request as a reverse proxy forwards it (`X-Forwarded-For: forwarded`).
    async fn request_from(
        &self,
        method: &str,
        path: &str,
        bearer: Option<&str>,
        forwarded: Option<&str>,
    ) -> (u16, Option<String>, String) {
        let bearer = bearer.map(|t| format!("Bearer {t}"));
        let headers: Vec<_> = [("authorization", bearer.as_deref()), ("x-forwarded-for", forwarded)]
            .into_iter()
            .filter_map(|(name, value)| Some((name, value?)))
            .collect();
        self.send(method, path, &headers).await
    }

    /// A request with these headers: its status, `Retry-After` and body.
    async fn send(&self, method: &str, path: &str, headers: &[(&str, &str)]) -> (u16, Option<String>, String) {
        let mut req = hyper::Request::builder()
            .method(method)
            .uri(format!("http://{}{path}", self.addr))
            .header("content-type", "application/json");
        for (name, value) in headers {
            req = req.header(*name, *value);
        }
        let body = r#"{"fence": 1, "owner": null, "reason": "flood"}"#;
        let req = req.body(Full::new(Bytes::from(body))).unwrap();
        let resp = Client::builder(TokioExecutor::new())
            .build_http()
            .request(req)
            .await
            .unwrap();
        let status = resp.status().as_u16();
        let retry_after = resp
            .headers()
            .get("retry-after")
            .map(|v| v.to_str().unwrap().to_string());
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        (status, retry_after, String::from_utf8_lossy(&body).into())
    }

    /// A counter's value in `/metrics` (its full sample name, labels included).
    async fn metric(&self, sample: &str) -> f64 {
        let (status, _, body) = self.request("GET", "/metrics", self.token.as_deref()).await;
        assert_eq!(status, 200, "{body}");
        crate::scrape::Metrics::parse(body).sample(sample)
    }
}

async fn next(ws: &mut Ws) -> Message {
    tokio::time::timeout(Duration::from_secs(5), ws.next())
        .await
        .expect("the server answers within 5 s")
        .expect("the socket is open")
        .unwrap()
}

/// The close frame, skipping messages before it.
async fn close_frame(ws: &mut Ws) -> (CloseCode, String) {
    loop {
        if let Message::Close(Some(f)) = next(ws).await {
            return (f.code, f.reason.to_string());
        }
    }
}

fn is_hello(m: &Message) -> bool {
    matches!(m, Message::Text(t) if t.contains(r#""type":"hello""#))
}

#[tokio::test]
async fn a_17_kib_frame_is_refused_at_its_header_and_the_server_stays_up() {
    let server = Server::start(false, Limits::default()).await;
    let (mut ws, hello) = server.ws().await;
    assert!(is_hello(&hello), "{hello:?}");
    // A masked text frame announcing 17 KiB, of which 1 KiB is sent: the
    // server must refuse it from its header, not wait to buffer it (the old
    // frame limit was 16 MiB). docs/operations.md: "the server stops reading
    // at the frame's header and closes `1009` `a message or frame longer than
    // 16384 bytes`". (All of it fits the server's first read: a client that
    // has sent more than the server read may see the connection reset
    // instead of the close frame, as the docs say.)
    let mut frame = vec![0x81, 0x80 | 127];
    frame.extend_from_slice(&(17u64 * 1024).to_be_bytes());
    frame.extend_from_slice(&[0, 0, 0, 0]);
    frame.extend(std::iter::repeat_n(b'x', 1024));
    let MaybeTlsStream::Plain(tcp) = ws.get_mut() else {
        unreachable!()
    };
    tcp.write_all(&frame).await.unwrap();
    let (code, reason) = close_frame(&mut ws).await;
    assert_eq!(code, CloseCode::Size, "1009: {reason}");
    assert!(reason.contains("longer than 16384 bytes"), "{reason}");
    let (_ws, hello) = server.ws().await;
    assert!(is_hello(&hello), "the server still serves: {hello:?}");
}

#[tokio::test]
async fn a_socket_past_the_identity_limit_is_closed_naming_the_limit_until_one_closes() {
    let limits = Limits {
        ws_per_identity: 2,
        ..Limits::default()
    };
    let server = Server::start(false, limits).await;
    let (mut first, hello) = server.ws().await;
    assert!(is_hello(&hello));
    let (_second, hello) = server.ws().await;
    assert!(is_hello(&hello));
    let refused = r#"lockscope_websockets_refused_total{limit="identity"}"#;
    assert_eq!(server.metric(refused).await, 0.0);
    // docs/operations.md: "accepted, then closed at once: `1008` `too many
    // websockets: this identity has 64 open ([limits] ws_per_identity)`".
    let (_third, closed) = server.ws().await;
    let Message::Close(Some(f)) = closed else {
        panic!("expected a close frame, got {closed:?}")
    };
    assert_eq!(f.code, CloseCode::Policy, "1008");
    assert_eq!(
        f.reason.as_str(),
        "too many websockets: this identity has 2 open ([limits] ws_per_identity)"
    );
    assert_eq!(server.metric(refused).await, 1.0);
    first.send(Message::Close(None)).await.unwrap();
    // The server gives the place back when it sees the close.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let (_ws, m) = server.ws().await;
        if is_hello(&m) {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "no place after a close: {m:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_flood_of_bad_tokens_gets_429_and_one_audit_row_with_its_count() {
    let limits = Limits {
        auth_failures_per_minute: 5,
        ..Limits::default()
    };
    let server = Server::start(true, limits).await;
    let token = server.token.clone().unwrap();
    let id = token.split_once('.').unwrap().0.to_string();
    // The admin's token verifies once (and is then known without hashing).
    assert_eq!(server.metric("lockscope_auth_verifications_total").await, 1.0);
    let mut statuses = Vec::new();
    for i in 0..12 {
        // Known and unknown ids alike.
        let bad = if i % 2 == 0 {
            format!("{id}.bad{i}")
        } else {
            format!("0000.bad{i}")
        };
        let (status, retry_after, body) = server
            .request("POST", "/api/v1/fleets/f/locks/some-lock/release", Some(&bad))
            .await;
        match status {
            401 => assert!(retry_after.is_none() && body.contains("not valid"), "{body}"),
            429 => {
                let secs: u64 = retry_after.expect("429 says when to retry").parse().unwrap();
                assert!((1..=60).contains(&secs), "{secs}");
                assert!(body.contains("too many failed token checks"), "{body}");
            }
            other => panic!("{other}: {body}"),
        }
        statuses.push(status);
    }
    // docs/operations.md: "the failure that uses up the minute, and every
    // request with a token from that source until the minute is over, is
    // answered `429` with `Retry-After: SECONDS`".
    assert_eq!(
        statuses,
        [[401; 4].as_slice(), &[429; 8]].concat(),
        "the fifth failure uses up the minute"
    );
    assert_eq!(
        server.metric("lockscope_auth_verifications_total").await,
        6.0,
        "five failures hashed, none after"
    );
    // (Scraped with the admin's token from the same, limited, address:
    // docs/operations.md: "A token that verified before still works".)
    assert_eq!(server.metric("lockscope_auth_rate_limited_total").await, 8.0);
    assert_eq!(server.metric("lockscope_auth_failures_total").await, 5.0);
    // The minute's tally is written when it is over, or at shutdown (now).
    // docs/operations.md: "one row per source and minute, … whose `detail`
    // starts with the count".
    server.audit.flush_tally(true).await;
    let rows = server.audit.query(&AuditQuery::default()).await.unwrap();
    let rows: Vec<_> = rows.iter().filter(|r| r.actor == UNAUTHENTICATED).collect();
    assert_eq!(rows.len(), 1, "one row for the source's minute: {rows:#?}");
    assert!(
        rows[0]
            .detail
            .starts_with("12 attempts without an identity from 127.0.0.1 within a minute"),
        "{}",
        rows[0].detail
    );
    assert_eq!(server.metric("lockscope_audit_unauthenticated_rows_total").await, 1.0);
    assert_eq!(
        server.metric("lockscope_audit_unauthenticated_attempts_total").await,
        12.0
    );
}

#[tokio::test]
async fn behind_a_listed_proxy_each_forwarded_client_has_its_own_limits() {
    let limits = Limits {
        auth_failures_per_minute: 2,
        proxies: vec!["127.0.0.1".parse().unwrap()],
        ..Limits::default()
    };
    let server = Server::start(true, limits).await;
    let release = "/api/v1/fleets/f/locks/some-lock/release";
    let bad = |from: Option<&'static str>| {
        let server = &server;
        async move { server.request_from("POST", release, Some("0000.bad"), from).await.0 }
    };
    // docs/operations.md: "list it in `proxies` …, and for its requests the
    // source is the last address of `X-Forwarded-For`, the client the proxy
    // saw".
    assert_eq!(bad(Some("203.0.113.1")).await, 401);
    assert_eq!(bad(Some("203.0.113.1")).await, 429, "203.0.113.1 used up its two");
    assert_eq!(bad(Some("198.51.100.9, 203.0.113.2")).await, 401, "another client");
    assert_eq!(
        bad(None).await,
        401,
        "the proxy's own requests are a source of their own"
    );
    server.audit.flush_tally(true).await;
    let rows = server.audit.query(&AuditQuery::default()).await.unwrap();
    let mut from: Vec<_> = rows
        .iter()
        .map(|r| r.detail.split(" within").next().unwrap().to_string())
        .collect();
    from.sort();
    assert_eq!(
        from,
        [
            "1 attempt without an identity from 127.0.0.1",
            "1 attempt without an identity from 203.0.113.2",
            "2 attempts without an identity from 203.0.113.1",
        ]
    );
}

/// A request with `Authorization: Basic` from a source over its failed checks:
/// docs/operations.md: "any other `Authorization`, such as a proxy's own
/// `Basic`, is ignored", so it is a request without credentials (`401`), not
/// a refused token (`429`).
#[tokio::test]
async fn basic_from_a_limited_source_is_401_not_429() {
    let limits = Limits {
        auth_failures_per_minute: 1,
        ..Limits::default()
    };
    let server = Server::start(true, limits).await;
    let release = "/api/v1/fleets/f/locks/some-lock/release";
    assert_eq!(server.request("POST", release, Some("0000.bad")).await.0, 429);
    assert_eq!(server.request("GET", "/api/v1/fleets", Some("0000.bad")).await.0, 429);
    for (method, path) in [("GET", "/api/v1/fleets"), ("POST", release)] {
        let (status, retry_after, body) = server.send(method, path, &[("authorization", "Basic Ym9iOnB3")]).await;
        assert_eq!((status, retry_after), (401, None), "{method} {path} with Basic: {body}");
        assert!(body.contains("no credentials"), "{body}");
    }
    // docs/security.md: "Admin attempts without an identity … are audited as
    // `(unauthenticated)` attempts, aggregated per source address and minute
    // … Other failed token checks (a read of the API, …) are not written to
    // the audit log": the two releases, not the two reads.
    server.audit.flush_tally(true).await;
    let rows = server.audit.query(&AuditQuery::default()).await.unwrap();
    let details: Vec<_> = rows
        .iter()
        .map(|r| (r.actor.as_str(), r.detail.split(" within").next().unwrap()))
        .collect();
    assert_eq!(
        details,
        [(UNAUTHENTICATED, "2 attempts without an identity from 127.0.0.1")]
    );
}

/// docs/security.md: "The configurable ones are in `lockscope.toml` (`[limits]`
/// and `[history_exports]` …) and shown in `/metrics`": a gauge per `[limits]`
/// key, with the value in force.
#[tokio::test]
async fn every_limit_is_in_metrics() {
    let limits = Limits {
        ws_per_identity: 3,
        ws_per_address: 4,
        ws_total: 5,
        auth_failures_per_minute: 6,
        auth_sources: 7,
        auth_verify_concurrency: 2,
        auth_verify_queue: 9,
        audit_sources_per_minute: 10,
        proxies: Vec::new(),
    };
    let server = Server::start(true, limits).await;
    for (key, value) in [
        ("ws_per_identity", 3.0),
        ("ws_per_address", 4.0),
        ("ws_total", 5.0),
        ("auth_failures_per_minute", 6.0),
        ("auth_sources", 7.0),
        ("auth_verify_concurrency", 2.0),
        ("auth_verify_queue", 9.0),
        ("audit_sources_per_minute", 10.0),
    ] {
        assert_eq!(server.metric(&format!("lockscope_limit_{key}")).await, value, "{key}");
    }
}

/// docs/operations.md: "token checks waiting for a password hash … `503` with
/// `Retry-After: 1` and `too many token checks are waiting (64, [limits]
/// auth_verify_queue): try again in 1 s`": a burst of bad tokens from many
/// clients (behind a listed proxy) past one hash running and one waiting.
#[tokio::test]
async fn past_the_verify_queue_a_token_check_is_503() {
    let limits = Limits {
        auth_verify_queue: 1,
        proxies: vec!["127.0.0.1".parse().unwrap()],
        ..Limits::default()
    };
    let server = Server::start(true, limits).await;
    let burst = (0..16).map(|i| {
        let from = format!("203.0.113.{i}");
        let server = &server;
        async move {
            server
                .request_from("GET", "/api/v1/fleets", Some("0000.bad"), Some(&from))
                .await
        }
    });
    let answers = futures::future::join_all(burst).await;
    let mut busy = 0;
    for (status, retry_after, body) in &answers {
        match status {
            401 => assert!(body.contains("not valid"), "{body}"),
            503 => {
                busy += 1;
                assert_eq!(retry_after.as_deref(), Some("1"), "{body}");
                assert!(
                    body.contains(
                        "too many token checks are waiting (1, [limits] auth_verify_queue): try again in 1 s"
                    ),
                    "{body}"
                );
            }
            other => panic!("{other}: {body}"),
        }
    }
    assert!(
        busy > 0,
        "sixteen at once, one hashing and one waiting: some are refused"
    );
    assert_eq!(
        server.metric("lockscope_auth_verify_queue_full_total").await,
        f64::from(busy)
    );
    assert_eq!(
        server.metric("lockscope_auth_failures_total").await,
        f64::from(16 - busy),
        "the refused ones are not failures: they were not checked"
    );
}
