//! The whole server path against a real etcd: store → observer → hub → websocket
//! and → server-rendered page.

use std::time::Duration;

use futures::{SinkExt, StreamExt};
use lockscope::http::AppState;
use lockscope::hub::{Fleets, HubHandle};
use lockscope_model::{FleetEvent, ServerMsg, Snapshot, StoreStatus};
use lockscope_store::etcd::{EtcdConfig, EtcdLocks, EtcdObserver};
use lockscope_store::protocol::LockStore;
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
    let hub = HubHandle::spawn("it", "etcd under test", Box::new(EtcdObserver::new(cfg)), 4096);
    let (stop, stop_rx) = watch::channel(false);
    let state = AppState::new(Fleets::new(vec![hub.clone()]), "target/site".into(), stop_rx.clone());
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

impl Stack {
    /// Waits until the hub's snapshot satisfies `done`.
    async fn hub_until(&self, done: impl Fn(&Snapshot) -> bool) -> Snapshot {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let s = self.hub.snapshot().await.unwrap();
            if done(&s) {
                return s;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "hub never got there: {} locks, {:?}",
                s.locks.len(),
                s.status
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
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
async fn a_thousand_operations_reach_a_websocket_subscriber_in_order() {
    let s = stack(async |_| {}).await;
    s.hub_until(|s| matches!(s.status, StoreStatus::Live { .. })).await;
    let mut ws = s.ws().await;
    assert!(matches!(next_msg(&mut ws).await, ServerMsg::Hello { .. }));
    let ServerMsg::Snapshot(snap) = next_msg(&mut ws).await else {
        panic!("snapshot expected")
    };
    assert!(snap.locks.is_empty());

    // 500 acquisitions and 500 releases, interleaved.
    let mut want = Vec::new();
    for i in 0..500 {
        let name = format!("op-{i:03}");
        let fence = take(&s.locks, &name).await;
        assert!(s.locks.release(&name, fence).await.unwrap());
        want.push(format!("+{name}@{fence}"));
        want.push(format!("-{name}"));
    }

    let mut got = Vec::new();
    let mut seq = snap.seq;
    let mut last_revision = snap.revision;
    while got.len() < want.len() {
        match next_msg(&mut ws).await {
            ServerMsg::Delta { seq: n, events, .. } => {
                assert_eq!(n, seq + 1, "deltas are numbered without gaps");
                seq = n;
                for e in events {
                    let (label, revision) = match e {
                        FleetEvent::Upsert(l) => (format!("+{}@{}", l.name, l.fence), l.revision),
                        FleetEvent::Remove { name, revision } => (format!("-{name}"), revision),
                        other => panic!("only lock changes happen here, got {other:?}"),
                    };
                    assert!(
                        revision > last_revision,
                        "store order: {label} at {revision} after {last_revision}"
                    );
                    last_revision = revision;
                    got.push(label);
                }
            }
            ServerMsg::Status { .. } => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(got, want);
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
    s.hub_until(|s| s.locks.len() == 4).await;
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
}

#[tokio::test]
async fn healthz_reports_the_store() {
    let s = stack(async |locks| {
        take(locks, "one").await;
    })
    .await;
    s.hub_until(|s| matches!(s.status, StoreStatus::Live { .. }) && s.locks.len() == 1)
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
            assert!(body.contains("cross-origin"), "{body}");
        }
        other => panic!("expected 403, got {other:?}"),
    }
    // And bad input on an accepted socket closes it with a reason.
    let mut ws = s.ws().await;
    next_msg(&mut ws).await;
    next_msg(&mut ws).await;
    ws.send(Message::Text("{\"type\":\"nope\"}".into())).await.unwrap();
    assert!(matches!(next_msg(&mut ws).await, ServerMsg::Error { .. }));
}

#[tokio::test]
async fn two_fleets_side_by_side_etcd_and_sqlite() {
    let s = stack(async |locks| {
        take(locks, "from-etcd").await;
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("l.db").display());
    let sql = lockscope_store::sql::SqlLocks::connect(&url).await.unwrap();
    take(&sql, "from-sqlite").await;
    let sql_hub = HubHandle::spawn(
        "sql",
        "sqlite",
        Box::new(lockscope_store::sql::SqlObserver::new(&url)),
        64,
    );
    let fleets = Fleets::new(vec![s.hub.clone(), sql_hub.clone()]);
    let (_stop, stop_rx) = watch::channel(false);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(lockscope::serve(
        listener,
        AppState::new(fleets, "target/site".into(), stop_rx.clone()),
        stop_rx,
        Duration::from_secs(1),
    ));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while sql_hub.snapshot().await.unwrap().locks.is_empty() || s.hub.snapshot().await.unwrap().locks.is_empty() {
        assert!(tokio::time::Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let two = Stack { addr, ..s };
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
    let mut ws = tokio_tungstenite::connect_async(format!("ws://{addr}/ws?fleet=sql"))
        .await
        .unwrap()
        .0;
    assert!(matches!(next_msg(&mut ws).await, ServerMsg::Hello { ref fleet, .. } if fleet == "sql"));
    match next_msg(&mut ws).await {
        ServerMsg::Snapshot(snap) => assert_eq!(snap.locks[0].name, "from-sqlite"),
        other => panic!("{other:?}"),
    }
}
