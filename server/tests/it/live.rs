//! The whole server path against a real etcd (and SQLite, and ScyllaDB in memory):
//! store → observer → hub → websocket
//! and → server-rendered page.

use std::time::Duration;

use futures::{SinkExt, StreamExt};
use lockscope::auth::Auth;
use lockscope::live::hub::{Fleets, HubHandle};
use lockscope::remember::audit::AuditLog;
use lockscope::web::AppState;
use lockscope_model::view::{Sort, SortKey, ViewSpec};
use lockscope_model::{ClientMsg, FleetSummary, ServerMsg, StoreStatus, Window, WindowFrame};
use lockscope_store::etcd::{EtcdConfig, EtcdLocks};
use lockscope_store::protocol::LockStore;
use lockscope_store::scylla::cql::Value;
use lockscope_store::spec::{AnyLocks, StoreSpec};
use lockscope_store::testing::{take, EtcdServer};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio_tungstenite::tungstenite::{client::IntoClientRequest, http::HeaderValue, Message};
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

const PREFIX: &str = "/lockscope-it/";

struct Stack {
    _etcd: EtcdServer,
    locks: EtcdLocks,
    hub: HubHandle,
    addr: std::net::SocketAddr,
    _stop: watch::Sender<bool>,
}

async fn stack(prepare: impl AsyncFnOnce(&EtcdLocks)) -> Stack {
    let etcd = EtcdServer::start().await;
    let cfg = EtcdConfig::new(vec![etcd.endpoint()], PREFIX);
    let locks = EtcdLocks::connect(cfg.clone()).await.unwrap();
    prepare(&locks).await;
    let spec = StoreSpec::Etcd {
        endpoints: vec![etcd.endpoint()],
        prefix: Some(PREFIX.into()),
    };
    let hub = HubHandle::spawn("it", "etcd under test", spec.open().unwrap());
    let (stop, stop_rx) = watch::channel(false);
    let state = app_state(Fleets::new(vec![hub.clone()]), stop_rx.clone()).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(lockscope::serve(listener, state, stop_rx, Duration::from_secs(1)));
    Stack {
        _etcd: etcd,
        locks,
        hub,
        addr,
        _stop: stop,
    }
}

/// The server's state without authentication, its audit log in a temporary file.
pub(crate) async fn app_state(fleets: Fleets, stop: watch::Receiver<bool>) -> AppState {
    let dir = tempfile::tempdir().unwrap().keep();
    let audit = AuditLog::open(&format!("sqlite:{}", dir.join("audit.db").display()))
        .await
        .unwrap();
    let auth = Auth::new(None, audit.clone());
    AppState::new(fleets, "target/site".into(), stop, audit, auth)
}

impl Stack {
    /// Waits until the hub's summary satisfies `done`.
    async fn hub_until(&self, done: impl Fn(&FleetSummary) -> bool) -> FleetSummary {
        until(&self.hub, done).await
    }

    async fn ws(&self) -> WebSocketStream<MaybeTlsStream<TcpStream>> {
        tokio_tungstenite::connect_async(format!("ws://{}/ws", self.addr))
            .await
            .unwrap()
            .0
    }

    async fn get(&self, path: &str) -> (u16, String) {
        let mut s = TcpStream::connect(self.addr).await.unwrap();
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        s.write_all(
            format!(
                "GET {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
                self.addr
            )
            .as_bytes(),
        )
        .await
        .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        let status = out[9..12].parse().unwrap();
        (status, out)
    }
}

async fn until(hub: &HubHandle, done: impl Fn(&FleetSummary) -> bool) -> FleetSummary {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let s = hub.summary();
        if done(&s) {
            return s;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "hub never got there: {} locks, {:?}",
            s.counts.held,
            s.status
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

async fn send(ws: &mut Ws, msg: &ClientMsg) {
    ws.send(Message::Text(serde_json::to_string(msg).unwrap().into()))
        .await
        .unwrap();
}

/// The next window frame (status messages skipped).
async fn next_window(ws: &mut Ws) -> WindowFrame {
    loop {
        match next_msg(ws).await {
            ServerMsg::Window(f) => return f,
            ServerMsg::Status { .. } => {}
            other => panic!("unexpected {other:?}"),
        }
    }
}

async fn next_msg(ws: &mut WebSocketStream<MaybeTlsStream<TcpStream>>) -> ServerMsg {
    loop {
        let m = tokio::time::timeout(Duration::from_secs(10), ws.next())
            .await
            .expect("no message in 10 s")
            .unwrap()
            .unwrap();
        if let Message::Text(t) = m {
            match serde_json::from_str(&t).unwrap() {
                ServerMsg::Overview { .. } => continue,
                msg => return msg,
            }
        }
    }
}

#[tokio::test]
async fn a_thousand_operations_reach_a_websocket_subscriber_coalesced_never_lost() {
    let s = stack(async |_| {}).await;
    s.hub_until(|s| matches!(s.status, StoreStatus::Live { .. })).await;
    let mut ws = s.ws().await;
    assert!(matches!(next_msg(&mut ws).await, ServerMsg::Hello { .. }));
    let by_name = ViewSpec {
        sort: Sort {
            key: SortKey::Name,
            reverse: false,
        },
        limit: 500,
        ..ViewSpec::default()
    };
    send(&mut ws, &ClientMsg::View { id: 1, view: by_name }).await;
    let mut window = Window::default();
    let first = next_window(&mut ws).await;
    assert!(first.full && first.total == 0);
    window.apply(first).unwrap();

    // 500 acquisitions; every other one released, and some re-acquired (new fence).
    let mut want = std::collections::BTreeMap::new();
    for i in 0..500 {
        let name = format!("op-{i:03}");
        let mut fence = take(&s.locks, &name).await;
        if i % 2 == 1 {
            assert!(s.locks.release(&name, fence).await.unwrap());
            if i % 3 == 0 {
                fence = take(&s.locks, &name).await;
                want.insert(name, fence);
            }
        } else {
            want.insert(name, fence);
        }
    }

    // The browser's side: apply and acknowledge until the window is the truth.
    let mut frames = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let got: std::collections::BTreeMap<String, i64> =
            window.rows().map(|r| (r.entry.name.clone(), r.entry.fence)).collect();
        if got == want {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "window never converged");
        let f = next_window(&mut ws).await;
        frames += 1;
        let seq = f.seq;
        window.apply(f).unwrap();
        send(&mut ws, &ClientMsg::Ack { seq }).await;
    }
    assert_eq!(window.total, want.len() as u64);
    assert!(frames < 1_000, "{frames} frames for ~1,100 operations: coalesced");
}

#[tokio::test]
async fn the_page_shows_held_locks_without_javascript() {
    let s = stack(async |locks| {
        for name in ["payments/settle", "reports/nightly", "search-reindex"] {
            take(locks, name).await;
        }
        locks.put_raw("broken", b"\x00\x01 not a record").await.unwrap();
    })
    .await;
    s.hub_until(|s| s.counts.held == 4).await;
    let (status, page) = s.get("/").await;
    assert_eq!(status, 200);
    for name in ["payments/settle", "reports/nightly", "search-reindex", "broken"] {
        assert!(
            page.contains(&format!("data-lock=\"{name}\"")),
            "{name} missing from the page"
        );
    }
    assert!(page.contains("malformed record"));
    assert!(page.contains("test-service@test-host"), "the holder is shown");
    assert_eq!(page.matches("data-testid=\"lock-row\"").count(), 4);
    // `take` registers no session, so its locks are orphaned, and orphaned
    // sorts before malformed (severity order).
    assert_eq!(page.matches("data-state=\"orphaned\" class=\"orphaned\"").count(), 3);
    assert!(page.find("data-lock=\"payments/settle\"") < page.find("data-lock=\"broken\""));
}

#[tokio::test]
async fn the_page_holds_one_window_and_reads_its_view_from_the_url() {
    let s = stack(async |locks| {
        for i in 0..250 {
            take(locks, &format!("job-{i:03}")).await;
        }
    })
    .await;
    s.hub_until(|s| s.counts.held == 250).await;
    let (status, page) = s.get("/").await;
    assert_eq!(status, 200);
    // The first window is about a screen and a half (model's DEFAULT_WINDOW).
    assert_eq!(page.matches("data-testid=\"lock-row\"").count(), 40, "one window");
    let (_, page) = s.get("/?sort=name&rev=1&offset=10&limit=5").await;
    let rows: Vec<&str> = page
        .match_indices("data-testid=\"lock-row\" data-lock=\"")
        .map(|(i, m)| &page[i + m.len()..i + m.len() + 7])
        .collect();
    assert_eq!(rows, ["job-239", "job-238", "job-237", "job-236", "job-235"]);
    // docs/architecture.md: "The page's head opens `/ws` with the same view in
    // the upgrade itself, before the wasm has arrived" (app/src/boot.rs). The
    // socket sends nothing: the server's hello is followed by the window the
    // page shows.
    let script = page
        .split("<script>(function(p,m){")
        .nth(1)
        .and_then(|s| s.split("</script>").next())
        .expect("the early socket's script in the page's head");
    let args = &script[script.rfind(")(").unwrap() + 2..script.len() - 1];
    let (path, _request): (String, String) = serde_json::from_str(&format!("[{args}]")).unwrap();
    let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://{}{path}", s.addr))
        .await
        .unwrap();
    assert!(matches!(next_msg(&mut ws).await, ServerMsg::Hello { .. }));
    let order = next_window(&mut ws).await.order.expect("a first frame's order");
    assert_eq!(order, rows, "the socket's first frame is the page's window");
    let (status, page) = s.get("/?sort=colour").await;
    assert_eq!(status, 200, "a bad view falls back to the default, with a reason");
    assert!(page.contains("sort=colour: not a sort key"));
}

#[tokio::test]
async fn healthz_reports_the_store() {
    let s = stack(async |locks| {
        take(locks, "one").await;
    })
    .await;
    s.hub_until(|s| matches!(s.status, StoreStatus::Live { .. }) && s.counts.held == 1)
        .await;
    let (status, body) = s.get("/healthz").await;
    assert_eq!(status, 200);
    let json: serde_json::Value = serde_json::from_str(body.split("\r\n\r\n").nth(1).unwrap()).unwrap();
    assert_eq!(json["fleets"][0]["name"], "it");
    assert_eq!(json["fleets"][0]["status"]["state"], "live");
    assert_eq!(json["fleets"][0]["held"], 1);
    let (status, _) = s.get("/no/such/page").await;
    assert_eq!(status, 404);
    let (status, body) = s.get("/?fleet=nope").await;
    assert_eq!(status, 404);
    assert!(body.contains("no fleet named \"nope\"; this server has: it"), "{body}");
}

#[tokio::test]
async fn a_cross_origin_websocket_is_refused_with_a_reason() {
    let s = stack(async |_| {}).await;
    let mut req = format!("ws://{}/ws", s.addr).into_client_request().unwrap();
    req.headers_mut()
        .insert("Origin", HeaderValue::from_static("https://evil.example"));
    match tokio_tungstenite::connect_async(req).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => {
            assert_eq!(resp.status(), 403);
            let body = String::from_utf8_lossy(resp.body().as_deref().unwrap_or_default()).into_owned();
            assert!(body.contains("a request from https://evil.example refused"), "{body}");
        }
        other => panic!("expected 403, got {other:?}"),
    }
    // And bad input on an accepted socket closes it with a reason.
    let mut ws = s.ws().await;
    next_msg(&mut ws).await;
    ws.send(Message::Text("{\"type\":\"nope\"}".into())).await.unwrap();
    assert!(matches!(next_msg(&mut ws).await, ServerMsg::Error { .. }));
}

#[tokio::test]
async fn an_upgrade_carrying_an_unusable_first_message_is_refused_with_a_reason() {
    let s = stack(async |_| {}).await;
    // docs/security.md: "a first message carried in the upgrade (`/ws?first=`) |
    // 4 KiB, a `view` or `watch` read as the socket reads messages | fixed | `400`
    // before the upgrade, the reason"
    let refused = async |first: &str| match tokio_tungstenite::connect_async(format!(
        "ws://{}/ws?first={}",
        s.addr,
        lockscope_model::url::query(first)
    ))
    .await
    {
        Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => {
            assert_eq!(resp.status(), 400, "{first}");
            String::from_utf8_lossy(resp.body().as_deref().unwrap_or_default()).into_owned()
        }
        other => panic!("expected 400 for {first}, got {other:?}"),
    };
    let body = refused("{\"type\":\"nope\"}").await;
    assert!(body.contains("first=: unrecognised message"), "{body}");
    let view = ViewSpec {
        limit: 100_000,
        ..ViewSpec::default()
    };
    let body = refused(&serde_json::to_string(&ClientMsg::View { id: 1, view }).unwrap()).await;
    assert!(body.contains("first=: window of 100000 rows"), "{body}");
    let body = refused(r#"{"type":"ping","nonce":1}"#).await;
    assert!(body.contains("names a view"), "{body}");
    let big = format!(
        r#"{{"type":"watch","watch":{{"kind":"lock","name":"{}"}}}}"#,
        "x".repeat(5_000)
    );
    let body = refused(&big).await;
    assert!(body.contains("exceeds 4096"), "{body}");
}

/// Fleet `fleet`'s first window of the default view, over a new websocket.
async fn first_window(addr: std::net::SocketAddr, fleet: &str) -> WindowFrame {
    let mut ws = tokio_tungstenite::connect_async(format!("ws://{addr}/ws?fleet={fleet}"))
        .await
        .unwrap()
        .0;
    assert!(matches!(next_msg(&mut ws).await, ServerMsg::Hello { fleet: ref f, .. } if f == fleet));
    send(
        &mut ws,
        &ClientMsg::View {
            id: 1,
            view: ViewSpec::default(),
        },
    )
    .await;
    next_window(&mut ws).await
}

/// etcd, SQLite and ScyllaDB fleets side by side — ScyllaDB in memory (no CQL
/// server runs here), served through the same observer and hub as a cluster
/// would be: one lockscope fleet, and one with only the published schema,
/// whose lock is shown with its session and every other field unknown.
#[tokio::test]
async fn fleets_side_by_side_etcd_sqlite_and_scylla() {
    let s = stack(async |locks| {
        take(locks, "from-etcd").await;
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("l.db").display());
    let sql = lockscope_store::sql::SqlLocks::connect(&url).await.unwrap();
    take(&sql, "from-sqlite").await;
    let sql_hub = HubHandle::spawn("sql", "sqlite", StoreSpec::Sql { url }.open().unwrap());
    let name = format!("live-{}", std::process::id());
    let scylla = StoreSpec::parse(&format!("scylla-memory:{name}")).unwrap();
    let AnyLocks::Scylla(cql_locks) = scylla.connect().await.unwrap() else {
        unreachable!("a scylla spec")
    };
    take(&cql_locks, "from-scylla").await;
    let scylla_hub = HubHandle::spawn("cql", "scylla", scylla.open().unwrap());
    let published = StoreSpec::parse(&format!("scylla-memory:{name}?schema=published")).unwrap();
    let at = lockscope_store::now_ms() - 60_000;
    let published_cql = lockscope_store::scylla::memory::MemoryCql::named(&name, true);
    published_cql
        .execute(
            "INSERT INTO lockscope.tokens (token, service_session_id, timestamp) VALUES (?, ?, ?) IF NOT EXISTS",
            vec![
                Value::text("from-published"),
                Value::text("svc-7"),
                Value::Timestamp(at),
            ],
        )
        .unwrap();
    // Its session heartbeats (without one the lock would show orphaned).
    published_cql
        .execute(
            "INSERT INTO lockscope.token_times (service_session_id, tokens, timestamp) VALUES (?, ?, ?)",
            vec![
                Value::text("svc-7"),
                Value::List(vec![Value::text("from-published")]),
                Value::Timestamp(at),
            ],
        )
        .unwrap();
    let published_hub = HubHandle::spawn("pub", "published", published.open().unwrap());
    let fleets = Fleets::new(vec![
        s.hub.clone(),
        sql_hub.clone(),
        scylla_hub.clone(),
        published_hub.clone(),
    ]);
    let (_stop, stop_rx) = watch::channel(false);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(lockscope::serve(
        listener,
        app_state(fleets, stop_rx.clone()).await,
        stop_rx,
        Duration::from_secs(1),
    ));
    until(&sql_hub, |s| s.counts.held == 1).await;
    until(&s.hub, |s| s.counts.held == 1).await;
    until(&scylla_hub, |s| s.counts.held == 1).await;
    let foreign = until(&published_hub, |s| s.counts.held == 1).await;
    assert_eq!(foreign.counts.foreign, 1, "a published row is a foreign lock");
    let two = Stack { addr, ..s };
    let (_, page) = two.get("/?fleet=cql").await;
    assert!(page.contains("data-lock=\"from-scylla\""), "the ScyllaDB fleet's lock");
    assert!(page.contains("data-fleet=\"cql\"") && page.contains("data-fleet=\"it\""));
    let (_, page) = two.get("/?fleet=pub").await;
    assert!(page.contains("data-lock=\"from-published\""));
    assert!(page.contains("svc-7"), "the holder session the row names");
    let (_, page) = two.get("/?fleet=sql").await;
    assert!(page.contains("data-lock=\"from-sqlite\"") && !page.contains("data-lock=\"from-etcd\""));
    assert!(
        page.contains("data-fleet=\"it\"") && page.contains("data-fleet=\"sql\""),
        "overview lists both fleets"
    );
    let (_, page) = two.get("/").await;
    assert!(
        page.contains("data-lock=\"from-etcd\""),
        "the first fleet is the default"
    );
    let f = first_window(addr, "sql").await;
    assert_eq!(f.order.unwrap(), ["from-sqlite"]);

    let f = first_window(addr, "pub").await;
    assert_eq!(f.order.unwrap(), ["from-published"]);
    let row = serde_json::to_value(&f.rows).unwrap().to_string();
    assert!(
        row.contains("\"kind\":\"foreign\"") && row.contains(&at.to_string()),
        "the row's session and time, nothing else: {row}"
    );
}
