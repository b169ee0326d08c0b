//! An `advisory+postgres://` fleet through the whole server: an advisory lock
//! taken in a `psql` session answers `GET /api/v1/fleets/{fleet}/locks/{key}`
//! with its holder backend within one poll; the API's release (a terminate of
//! the holder's backend, fenced by its pid and backend start) with a stale
//! backend start is a 409 that terminates nothing, the one with the fence
//! shown ends that backend and the lock leaves the API; both audited; the
//! lock's page shows the backend, the poll interval and the terminate
//! dialog's text.

use std::time::{Duration, Instant};

use lockscope::auth::Auth;
use lockscope::live::hub::{Fleets, HubHandle};
use lockscope::remember::audit::AuditLog;
use lockscope::web::AppState;
use lockscope_model::admin::{AuditQuery, Outcome};
use lockscope_store::pg_advisory::fence_of;
use lockscope_store::spec::StoreSpec;
use lockscope_store::testing::{PgServer, Psql};
use serde_json::Value;
use sqlx::Connection;

const LOCK: &str = "/api/v1/fleets/pg/locks/42";

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

async fn lock_until(addr: std::net::SocketAddr, done: impl Fn(u16, &Value) -> bool) -> (u16, Value, Duration) {
    let t0 = Instant::now();
    loop {
        let (status, body) = call(addr, "GET", LOCK, "").await;
        if done(status, &body) {
            return (status, body, t0.elapsed());
        }
        assert!(t0.elapsed() < Duration::from_secs(5), "never: {status} {body}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn backends(url: &str, pid: i64) -> i64 {
    let mut c = sqlx::PgConnection::connect(url).await.unwrap();
    sqlx::query_scalar("SELECT count(*) FROM pg_stat_activity WHERE pid = $1")
        .bind(pid as i32)
        .fetch_one(&mut c)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_psql_advisory_lock_through_the_api_and_a_guarded_terminate() {
    let server = PgServer::start().await;
    let url = server.url();
    let dir = tempfile::tempdir().unwrap();
    let audit = AuditLog::open(&format!("sqlite:{}", dir.path().join("audit.db").display()))
        .await
        .unwrap();
    let spec = StoreSpec::parse(&format!("advisory+{url}#poll=200ms")).unwrap();
    let hub = HubHandle::spawn("pg", "advisory locks under test", spec.open().unwrap());
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

    // docs/operations.md: "An advisory lock taken in a `psql` session is shown with its backend
    // within one poll." (issue 28: "(pid, application_name, backend start) and its waiters")
    let mut holder = Psql::open(&url, "migrate");
    holder.send("SELECT pg_advisory_lock(42);");
    let (_, lock, took) = lock_until(addr, |s, b| {
        s == 200 && b["entry"]["body"]["detail"]["pg_advisory"]["holders"][0]["application_name"] == "migrate"
    })
    .await;
    eprintln!("shown after {took:?}");
    let d = &lock["entry"]["body"]["detail"]["pg_advisory"];
    let pid = d["holders"][0]["pid"].as_i64().unwrap();
    let start = d["holders"][0]["backend_start_us"].as_i64().unwrap();
    let fence = lock["entry"]["fence"].as_i64().unwrap();
    assert_eq!(fence, fence_of(pid as i32, start));
    let mut waiter = Psql::open(&url, "worker");
    waiter.send("SELECT pg_advisory_lock(42);");
    lock_until(addr, |s, b| {
        s == 200 && b["entry"]["body"]["detail"]["pg_advisory"]["waiters"][0]["application_name"] == "worker"
    })
    .await;

    let html = page(addr, "/lock?fleet=pg&name=42").await;
    for said in [
        "polled every 1 s".replace("1 s", "0.2 s"),
        "migrate".into(),
        format!("pid {pid}"),
        "Terminate backend".into(),
        "worker".into(),
    ] {
        assert!(html.contains(&said), "{said:?} not on the page");
    }

    // docs/operations.md: "It acts only if the lock's holder is still the backend the fence
    // names [...]; otherwise nothing is terminated and the answer is `409` with the current holder."
    // A stale backend start (the pid reused by another backend):
    let release = |fence: i64| format!(r#"{{"fence": {fence}, "owner": null, "reason": "INC-9: stuck migration"}}"#);
    let path = format!("{LOCK}/release");
    let stale = fence_of(pid as i32, start + 1);
    let (status, body) = call(addr, "POST", &path, &release(stale)).await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["current"]["fence"], fence, "{body}");
    assert_eq!(backends(&url, pid).await, 1, "a stale backend start terminates nothing");

    // docs/operations.md: "**terminates the holder's backend** [...] every lock it holds is
    // released": the fence shown ends that backend, and the lock passes to the waiter.
    let (status, body) = call(addr, "POST", &path, &release(fence)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["released"], true, "{body}");
    assert_eq!(backends(&url, pid).await, 0, "the holder's backend ended");
    lock_until(addr, |s, b| {
        s == 200 && b["entry"]["body"]["detail"]["pg_advisory"]["holders"][0]["application_name"] == "worker"
    })
    .await;
    drop(waiter);
    lock_until(addr, |s, _| s == 404).await;

    // Both audited: the stale one as changed, the terminate as done.
    let audited = audit.query(&AuditQuery::default()).await.unwrap();
    assert!(
        audited
            .iter()
            .any(|a| a.fence == Some(stale) && a.outcome == Some(Outcome::Changed)),
        "{audited:#?}"
    );
    assert!(
        audited
            .iter()
            .any(|a| a.fence == Some(fence) && a.outcome == Some(Outcome::Done)),
        "{audited:#?}"
    );
}
