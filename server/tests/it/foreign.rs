//! What the foreign lock families' server tests (redis, etcd_mutex,
//! zookeeper, pg_advisory) share: a server with one fleet on a store spec
//! (its audit log, and history when recorded, in a temp dir), the JSON API
//! call, a page's HTML (outage.rs reads its pages with it too), and asking
//! for a lock until an answer holds.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use lockscope::auth::{new_token, Auth};
use lockscope::live::hub::{Fleets, HubHandle};
use lockscope::remember::audit::AuditLog;
use lockscope::remember::history::History;
use lockscope::settings::{AuthFile, FileConfig};
use lockscope::web::AppState;
use lockscope_model::admin::Role;
use lockscope_store::spec::StoreSpec;
use serde_json::Value;

/// A server with one fleet, and what keeps it up (the temp dir, the stop
/// sender): dropping it stops the server.
pub struct Served {
    pub addr: SocketAddr,
    pub audit: AuditLog,
    history: Option<History>,
    _dir: tempfile::TempDir,
    _stop: tokio::sync::watch::Sender<bool>,
}

impl Served {
    /// The fleet's history (only a server from [`serve_recording`] has one).
    pub fn history(&self) -> &History {
        self.history.as_ref().expect("a server from serve_recording")
    }
}

/// A server with one fleet `fleet` on `spec`, not recording history.
pub async fn serve(fleet: &str, title: &str, spec: &StoreSpec) -> Served {
    start(fleet, title, spec, false, None).await
}

/// [`serve`], recording the fleet's history as `replica-1`.
pub async fn serve_recording(fleet: &str, title: &str, spec: &StoreSpec) -> Served {
    start(fleet, title, spec, true, None).await
}

/// [`serve`] with authentication: one API token per `(who, role)`, returned
/// by name (for [`call_as`]).
pub async fn serve_with_tokens(
    fleet: &str,
    title: &str,
    spec: &StoreSpec,
    roles: &[(&'static str, Role)],
) -> (Served, BTreeMap<&'static str, String>) {
    let mut tokens = BTreeMap::new();
    let mut entries = Vec::new();
    for &(who, role) in roles {
        let (token, entry) = new_token(who, role);
        let mut file = FileConfig::parse(&entry).unwrap();
        entries.push(file.auth.take().unwrap().tokens.remove(0));
        tokens.insert(who, token);
    }
    let auth = AuthFile {
        tokens: entries,
        ..AuthFile::default()
    };
    (start(fleet, title, spec, false, Some(auth)).await, tokens)
}

async fn start(fleet: &str, title: &str, spec: &StoreSpec, record: bool, auth: Option<AuthFile>) -> Served {
    let dir = tempfile::tempdir().unwrap();
    let audit = AuditLog::open(&format!("sqlite:{}", dir.path().join("audit.db").display()))
        .await
        .unwrap();
    let history = if record {
        let url = format!("sqlite:{}", dir.path().join("history.db").display());
        Some(History::open(&url, None).await.unwrap())
    } else {
        None
    };
    let hub = match &history {
        Some(h) => {
            let recorder = Some((h.recorder(fleet), "replica-1".to_string()));
            HubHandle::spawn_recording(fleet, title, spec.open().unwrap(), recorder)
        }
        None => HubHandle::spawn(fleet, title, spec.open().unwrap()),
    };
    let (_stop, stop_rx) = tokio::sync::watch::channel(false);
    let mut state = AppState::new(
        Fleets::new(vec![hub]),
        "target/site".into(),
        stop_rx.clone(),
        audit.clone(),
        Auth::new(auth, audit.clone()),
    );
    if let Some(h) = &history {
        state = state.with_history(h.clone());
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(lockscope::serve(listener, state, stop_rx, Duration::from_secs(1)));
    Served {
        addr,
        audit,
        history,
        _dir: dir,
        _stop,
    }
}

/// A JSON request to the API: its status and body (`Null` if not JSON).
pub async fn call(addr: SocketAddr, method: &str, path: &str, body: &str) -> (u16, Value) {
    call_as(addr, None, method, path, body).await
}

/// [`call`] with `token` as the bearer (`None`: none).
pub async fn call_as(addr: SocketAddr, token: Option<&str>, method: &str, path: &str, body: &str) -> (u16, Value) {
    let (status, body) = send(addr, token, method, path, body).await;
    (status, serde_json::from_slice(&body).unwrap_or(Value::Null))
}

/// A request with a JSON `body` (and `token` as the bearer): the status and
/// the body as sent.
pub async fn send(addr: SocketAddr, token: Option<&str>, method: &str, path: &str, body: &str) -> (u16, Vec<u8>) {
    use http_body_util::BodyExt;
    let mut req = hyper::Request::builder()
        .method(method)
        .uri(format!("http://{addr}{path}"))
        .header("content-type", "application/json");
    if let Some(token) = token {
        req = req.header("authorization", format!("Bearer {token}"));
    }
    let req = req
        .body(http_body_util::Full::new(hyper::body::Bytes::from(body.to_string())))
        .unwrap();
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new()).build_http();
    let resp = tokio::time::timeout(Duration::from_secs(30), client.request(req))
        .await
        .unwrap_or_else(|_| panic!("{path}: no answer within 30 s"))
        .unwrap();
    let status = resp.status().as_u16();
    (status, resp.into_body().collect().await.unwrap().to_bytes().to_vec())
}

/// The page at `path`, as HTML (the raw response; it must be a 200).
pub async fn page(addr: SocketAddr, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    out
}

/// Asks for the lock at `path` until `done` holds of the answer (5 s at
/// most); returns it and how long that took.
pub async fn lock_until(addr: SocketAddr, path: &str, done: impl Fn(u16, &Value) -> bool) -> (u16, Value, Duration) {
    let t0 = Instant::now();
    loop {
        let (status, body) = call(addr, "GET", path, "").await;
        if done(status, &body) {
            return (status, body, t0.elapsed());
        }
        assert!(t0.elapsed() < Duration::from_secs(5), "never: {status} {body}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
