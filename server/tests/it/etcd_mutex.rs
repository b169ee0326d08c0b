//! An `etcd-mutex:` fleet through the whole server: a lock held by a real
//! `etcdctl lock` answers `GET /api/v1/fleets/{fleet}/locks/{name}` (holder
//! lease, TTL, fence) within 1 s, the API's release with a stale fence is a
//! 409 with the current holder, the one with the fence shown releases exactly
//! that holder (its waiter's etcdctl then acquires), audited and credited in
//! the history, and the lock leaves the API within 1 s of its release. A lock
//! taken by a second, independent client (Python over etcd's v3 JSON gateway)
//! is shown with its fence and lease and guarded-released the same way.

use std::time::{Duration, Instant};

use lockscope_model::admin::AuditQuery;
use lockscope_model::history::{HistoryQuery, Kind};
use lockscope_store::spec::StoreSpec;
use lockscope_store::testing::etcd_gateway::GatewayMutex;
use lockscope_store::testing::etcdctl::{lease_in, Etcdctl};
use lockscope_store::testing::EtcdServer;
use serde_json::Value;

use super::foreign::{self, call, Served};

const F: &str = "mx";

/// Asks for the lock until `done` holds of the answer (5 s at most); returns
/// it and how long that took.
async fn lock_until(addr: std::net::SocketAddr, done: impl Fn(u16, &Value) -> bool) -> (u16, Value, Duration) {
    lock_at_until(addr, "jobs%2Fnightly", done).await
}

/// [`lock_until`] for the lock `name` (URL-encoded).
async fn lock_at_until(
    addr: std::net::SocketAddr,
    name: &str,
    done: impl Fn(u16, &Value) -> bool,
) -> (u16, Value, Duration) {
    foreign::lock_until(addr, &format!("/api/v1/fleets/{F}/locks/{name}"), done).await
}

/// A server with one `etcd-mutex:` fleet `F` over `ep` under `/mx/`.
async fn serve(ep: &str) -> Served {
    let spec = StoreSpec::parse(&format!("etcd-mutex:{ep}#/mx/")).unwrap();
    foreign::serve_recording(F, "etcd mutexes under test", &spec).await
}

#[tokio::test]
async fn an_etcdctl_lock_through_the_api() {
    let etcd = EtcdServer::start().await;
    let ep = etcd.endpoint();
    let srv = serve(&ep).await;
    let (addr, audit, history) = (srv.addr, &srv.audit, srv.history());
    let (status, _, _) = lock_until(addr, |s, _| s == 404).await;
    assert_eq!(status, 404, "not held yet");

    let mut holder = Etcdctl::lock(&ep, "/mx/jobs/nightly");
    let lease1 = lease_in(&holder.acquired().await);
    // docs/operations.md: "A lock made by `etcdctl lock` is shown, and answers
    // `GET /api/v1/fleets/{fleet}/locks/{name}`, within 1 s of its acquisition, and is gone
    // within 1 s of its release."
    let (_, lock, took) = lock_until(addr, |s, b| {
        s == 200 && b["entry"]["body"]["session"] == lease1.as_str()
    })
    .await;
    assert!(took < Duration::from_secs(1), "shown after {took:?}");
    let entry = &lock["entry"];
    assert_eq!(entry["body"]["kind"], "foreign", "{lock}");
    assert_eq!(entry["body"]["lease"]["id"], lease1.as_str(), "{lock}");
    assert_eq!(entry["body"]["lease"]["granted_s"], 10, "{lock}");
    assert_eq!(entry["body"]["lease"]["keys_total"], 1, "{lock}");
    assert!(
        entry["body"]["lease"]["ttl_s"].as_i64().is_some_and(|t| t > 0),
        "{lock}"
    );
    let fence1 = entry["fence"].as_i64().unwrap();
    assert!(fence1 > 0);

    let mut waiter = Etcdctl::lock(&ep, "/mx/jobs/nightly");
    let (_, lock, _) = lock_until(addr, |_, b| b["waiters"].as_array().is_some_and(|w| w.len() == 1)).await;
    let lease2 = lock["waiters"][0]["session"].as_str().unwrap().to_string();

    // A stale fence: 409 with the current holder, nothing deleted.
    let release = |fence: i64| format!(r#"{{"fence": {fence}, "owner": null, "reason": "INC-1: stuck job"}}"#);
    let path = format!("/api/v1/fleets/{F}/locks/jobs%2Fnightly/release");
    let (status, body) = call(addr, "POST", &path, &release(fence1 - 1)).await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["outcome"], "changed", "{body}");
    assert_eq!(body["current"]["fence"], fence1, "{body}");
    assert!(!waiter.acquires_within(Duration::from_millis(300)).await);

    // The fence shown: released, the waiter's etcdctl acquires, the table follows.
    let (status, body) = call(addr, "POST", &path, &release(fence1)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["released"], true, "{body}");
    assert_eq!(lease_in(&waiter.acquired().await), lease2);
    lock_until(addr, |s, b| {
        s == 200 && b["entry"]["body"]["session"] == lease2.as_str()
    })
    .await;

    // Audited, and credited to the operator in the history.
    let audited = audit.query(&AuditQuery::default()).await.unwrap();
    assert!(
        audited
            .iter()
            .any(|a| a.fence == Some(fence1) && a.outcome == Some(lockscope_model::admin::Outcome::Done)),
        "{audited:#?}"
    );
    let mut credited = None;
    for _ in 0..200 {
        let events = history
            .query(&HistoryQuery {
                fleet: F.into(),
                limit: Some(1000),
                ..HistoryQuery::default()
            })
            .await
            .unwrap();
        credited = events
            .into_iter()
            .find(|e| e.kind.ends_hold() && e.fence == Some(fence1));
        if credited.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let end = credited.expect("the release in the history");
    assert_eq!(
        (end.kind, end.actor.as_deref()),
        (Kind::ForceReleased, Some("anonymous")),
        "{end:#?}"
    );

    // Its holder stops: "… and is gone within 1 s of its release" (docs/operations.md).
    let t0 = Instant::now();
    waiter.stop().await;
    let (_, _, _) = lock_until(addr, |s, _| s == 404).await;
    assert!(
        t0.elapsed() < Duration::from_secs(1),
        "dropped after {:?}",
        t0.elapsed()
    );
    drop(holder);
}

#[tokio::test]
async fn a_lock_by_the_python_gateway_client_through_the_api() {
    let etcd = EtcdServer::start().await;
    let ep = etcd.endpoint();
    let srv = serve(&ep).await;
    // A second independent client: Python over etcd's JSON gateway, following
    // concurrency.Mutex's recipe (store/src/testing/etcd_gateway_mutex.py).
    let mut holder = GatewayMutex::lock(&ep, "/mx/py", None).await;
    holder.acquired().await;
    let lease = lease_in(&holder.key);
    let mut client = etcd_client::Client::connect([ep.as_str()], None).await.unwrap();
    let fence = client.get(holder.key.as_str(), None).await.unwrap().kvs()[0].create_revision();
    let (_, lock, took) = lock_at_until(srv.addr, "py", |s, b| {
        s == 200 && b["entry"]["body"]["session"] == lease.as_str()
    })
    .await;
    assert!(took < Duration::from_secs(1), "shown after {took:?}");
    assert_eq!(lock["entry"]["fence"], fence, "the key's create revision: {lock}");
    assert_eq!(lock["entry"]["body"]["lease"]["id"], lease.as_str(), "{lock}");
    assert_eq!(lock["entry"]["body"]["lease"]["granted_s"], 30, "{lock}");

    // An `etcdctl lock` waits behind it; the guarded release of the fence
    // shown ends the Python client's hold and the waiter proceeds.
    let mut waiter = Etcdctl::lock(&ep, "/mx/py");
    let (_, lock, _) = lock_at_until(srv.addr, "py", |_, b| {
        b["waiters"].as_array().is_some_and(|w| w.len() == 1)
    })
    .await;
    let waiting = lock["waiters"][0]["session"].as_str().unwrap().to_string();

    // The sessions page: one row per lease, the locks it holds and waits for,
    // its TTL where read (docs/operations.md: "the sessions page lists one row
    // per lease").
    let (status, sessions) = call(srv.addr, "GET", &format!("/api/v1/fleets/{F}/sessions"), "").await;
    assert_eq!(status, 200, "{sessions}");
    let rows = sessions["rows"].as_array().expect("rows");
    let row = |id: &str| {
        rows.iter()
            .find(|r| r["id"] == id)
            .unwrap_or_else(|| panic!("{id}: {sessions}"))
    };
    let held = row(&lease);
    assert_eq!(
        (&held["is_lease"], &held["locks_held"]),
        (&Value::Bool(true), &Value::from(1)),
        "{held}"
    );
    assert_eq!(held["lease"]["granted_s"], 30, "{held}");
    assert_eq!(held["lease"]["keys"][0], holder.key.as_str(), "{held}");
    let waits = row(&waiting);
    assert_eq!(waits["waiting_for"], serde_json::json!(["py"]), "{waits}");
    assert_eq!(
        (&waits["is_lease"], &waits["locks_held"]),
        (&Value::Bool(true), &Value::from(0)),
        "{waits}"
    );
    let body = format!(r#"{{"fence": {fence}, "owner": null, "reason": "INC-2: stuck gateway client"}}"#);
    let (status, body) = call(srv.addr, "POST", &format!("/api/v1/fleets/{F}/locks/py/release"), &body).await;
    assert_eq!((status, &body["released"]), (200, &Value::Bool(true)), "{body}");
    let next = lease_in(&waiter.acquired().await);
    assert_ne!(next, lease);
    lock_at_until(srv.addr, "py", |s, b| {
        s == 200 && b["entry"]["body"]["session"] == next.as_str()
    })
    .await;
    assert!(
        client.get(holder.key.as_str(), None).await.unwrap().kvs().is_empty(),
        "exactly the Python client's key was deleted"
    );
    let audited = srv.audit.query(&AuditQuery::default()).await.unwrap();
    assert!(
        audited
            .iter()
            .any(|a| a.fence == Some(fence) && a.outcome == Some(lockscope_model::admin::Outcome::Done)),
        "{audited:#?}"
    );
    holder.stop().await;
    waiter.stop().await;
}
