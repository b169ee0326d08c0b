//! A `zk://` fleet through the whole server, against a real ZooKeeper: a
//! lock held by kazoo's `Lock` (with a waiter) answers `GET
//! /api/v1/fleets/{fleet}/locks/{name}` with its holder session, waiter and
//! znode data within 1 s; its page says what a release does and that
//! blacklisting cannot be done; the API's release with a stale fence is a 409
//! and deletes nothing, the one with the fence shown deletes exactly the
//! holder's node; both are audited; a blacklist is refused with the reason.

use std::time::{Duration, Instant};

use lockscope::auth::Auth;
use lockscope::live::hub::{Fleets, HubHandle};
use lockscope::remember::audit::AuditLog;
use lockscope::web::AppState;
use lockscope_model::admin::{AuditQuery, Outcome};
use lockscope_store::spec::StoreSpec;
use lockscope_store::testing::{KazooLock, RecipeLock, ZkServer};
use serde_json::Value;

const LOCK: &str = "/api/v1/fleets/zk/locks/jobs%2Fnightly";

async fn call(addr: std::net::SocketAddr, method: &str, path: &str, body: &str) -> (u16, Value) {
    use http_body_util::BodyExt;
    let req = hyper::Request::builder()
        .method(method)
        .uri(format!("http://{addr}{path}"))
        .header("content-type", "application/json")
        .body(http_body_util::Full::new(hyper::body::Bytes::from(body.to_string())))
        .unwrap();
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new()).build_http();
    let resp = tokio::time::timeout(Duration::from_secs(30), client.request(req))
        .await
        .unwrap_or_else(|_| panic!("{path}: no answer within 30 s"))
        .unwrap();
    let status = resp.status().as_u16();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (status, serde_json::from_slice(&body).unwrap_or(Value::Null))
}

/// The page at `path`, as HTML.
async fn page(addr: std::net::SocketAddr, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    out
}

/// Asks for the lock until `done` holds of the answer (5 s at most).
async fn lock_until(addr: std::net::SocketAddr, done: impl Fn(u16, &Value) -> bool) -> (Value, Duration) {
    let t0 = Instant::now();
    loop {
        let (status, body) = call(addr, "GET", LOCK, "").await;
        if done(status, &body) {
            return (body, t0.elapsed());
        }
        assert!(t0.elapsed() < Duration::from_secs(5), "never: {status} {body}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Whether a page offers the blacklist form's button.
fn html_has_button(html: &str) -> bool {
    html.contains("blacklist-submit")
}

fn nodes(lock: &Value) -> &Vec<Value> {
    lock["entry"]["body"]["detail"]["zookeeper"]["nodes"]
        .as_array()
        .unwrap_or_else(|| panic!("no znodes: {lock}"))
}

#[tokio::test]
async fn a_kazoo_lock_through_the_api() {
    let zk = ZkServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let audit = AuditLog::open(&format!("sqlite:{}", dir.path().join("audit.db").display()))
        .await
        .unwrap();
    let spec = StoreSpec::parse(&zk.spec("/locks")).unwrap();
    let hub = HubHandle::spawn("zk", "zookeeper locks under test", spec.open().unwrap());
    let (_stop, stop_rx) = tokio::sync::watch::channel(false);
    let state = AppState::new(
        Fleets::new(vec![hub.clone()]),
        "target/site".into(),
        stop_rx.clone(),
        audit.clone(),
        Auth::new(None, audit.clone()),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(lockscope::serve(listener, state, stop_rx, Duration::from_secs(1)));
    lock_until(addr, |s, _| s == 404).await;

    let mut holder = KazooLock::contend(&zk, "/locks/jobs/nightly", "worker-a@host-1", Duration::from_secs(10));
    holder.wait_held();
    let waiter = RecipeLock::create(&zk, "/locks/jobs/nightly").await;
    let (lock, took) = lock_until(addr, |s, b| {
        s == 200
            && b["entry"]["body"]["session"] == holder.session.as_str()
            && b["waiters"].to_string().contains(&waiter.session)
    })
    .await;
    assert!(took < Duration::from_secs(1), "shown after {took:?}");
    let nodes = nodes(&lock);
    assert_eq!(nodes.len(), 2, "{lock}");
    assert_eq!(nodes[0]["data"], "worker-a@host-1", "kazoo's identifier: {lock}");
    assert_eq!(nodes[0]["recipe"], "kazoo");
    assert_eq!(nodes[1]["recipe"], "recipe");
    let fence = lock["entry"]["fence"].as_i64().unwrap();
    assert_eq!(nodes[0]["czxid"], fence, "the fence names the holder's node");

    // The page: the holder's node, what a release does, and no blacklist. docs/operations.md:
    // "Blacklisting is not possible [...] the page says so instead of a button."
    assert!(!html_has_button(
        &page(addr, "/lock?fleet=zk&name=jobs%2Fnightly").await
    ));
    let html = page(addr, "/lock?fleet=zk&name=jobs%2Fnightly").await;
    for said in [
        holder.session.as_str(),
        "worker-a@host-1",
        "detail-zk-nodes",
        "learn it only through their connection state",
        "ZooKeeper cannot end another client",
    ] {
        assert!(html.contains(said), "{said:?} not on the page");
    }

    // docs/operations.md: "otherwise, or if the node changed in between, it deletes nothing and
    // answers `409` with the current holder. Exactly one node goes". Both audited.
    let release = |fence: i64| format!(r#"{{"fence": {fence}, "owner": null, "reason": "INC-7: stuck"}}"#);
    let path = format!("{LOCK}/release");
    let (status, body) = call(addr, "POST", &path, &release(fence - 1)).await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["current"]["fence"], fence, "{body}");
    let client = zk.client().await;
    let holder_node = format!("/locks/jobs/nightly/{}", nodes[0]["name"].as_str().unwrap());
    assert!(
        client.check_stat(&holder_node).await.unwrap().is_some(),
        "nothing deleted"
    );

    // The fence shown: exactly the holder's node deleted; the waiter holds.
    let (status, body) = call(addr, "POST", &path, &release(fence)).await;
    assert_eq!(status, 200, "{body}");
    assert!(client.check_stat(&holder_node).await.unwrap().is_none());
    assert!(client.check_stat(&waiter.node).await.unwrap().is_some());
    lock_until(addr, |s, b| {
        s == 200 && b["entry"]["body"]["session"] == waiter.session.as_str()
    })
    .await;

    let audited = audit.query(&AuditQuery::default()).await.unwrap();
    for (f, outcome) in [(fence - 1, Outcome::Changed), (fence, Outcome::Done)] {
        assert!(
            audited.iter().any(|a| a.fence == Some(f) && a.outcome == Some(outcome)),
            "{f} {outcome:?}: {audited:#?}"
        );
    }

    // docs/operations.md: "ZooKeeper cannot end another client's session [...] the API refuses
    // it with that reason": a 4xx, audited as refused.
    let (status, body) = call(
        addr,
        "POST",
        &format!("/api/v1/fleets/zk/sessions/{}/blacklist", waiter.session),
        r#"{"reason": "INC-7"}"#,
    )
    .await;
    assert!((400..500).contains(&status), "{status} {body}");
    assert!(
        body.to_string().contains("cannot end another client's session"),
        "{body}"
    );
    let audited = audit.query(&AuditQuery::default()).await.unwrap();
    assert!(
        audited
            .iter()
            .any(|a| a.outcome == Some(Outcome::Refused) && a.detail.contains("cannot end another client's session")),
        "{audited:#?}"
    );
    drop(holder);
}
