//! A `zk://` fleet through the whole server, against a real ZooKeeper: a
//! lock held by kazoo's `Lock` (with a waiter) answers `GET
//! /api/v1/fleets/{fleet}/locks/{name}` with its holder session, waiter and
//! znode data within 1 s; its page says what a release does and that
//! blacklisting cannot be done; the API's release with a stale fence is a 409
//! and deletes nothing, the one with the fence shown deletes exactly the
//! holder's node; both are audited; a blacklist is refused with the reason.

use std::time::Duration;

use lockscope_model::admin::{AuditQuery, Outcome};
use lockscope_store::spec::StoreSpec;
use lockscope_store::testing::{KazooLock, RecipeLock, ZkServer};
use serde_json::Value;

use super::foreign::{call, lock_until, page, serve};

const LOCK: &str = "/api/v1/fleets/zk/locks/jobs%2Fnightly";

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
    let spec = StoreSpec::parse(&zk.spec("/locks")).unwrap();
    let srv = serve("zk", "zookeeper locks under test", &spec).await;
    let (addr, audit) = (srv.addr, &srv.audit);
    lock_until(addr, LOCK, |s, _| s == 404).await;

    let mut holder = KazooLock::contend(&zk, "/locks/jobs/nightly", "worker-a@host-1", Duration::from_secs(10));
    holder.wait_held();
    let waiter = RecipeLock::create(&zk, "/locks/jobs/nightly").await;
    let (_, lock, took) = lock_until(addr, LOCK, |s, b| {
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

    // docs/operations.md: "The sessions page lists one row per ZooKeeper session holding or
    // waiting for a lock under ROOT: the locks it holds and waits for, and its negotiated
    // timeout where the servers said it (unknown otherwise)".
    let held = |b: &Value| {
        b["rows"]
            .as_array()
            .and_then(|rows| rows.iter().find(|r| r["id"] == holder.session.as_str()).cloned())
    };
    let (_, sessions, _) = lock_until(addr, "/api/v1/fleets/zk/sessions", |s, b| {
        s == 200 && held(b).is_some_and(|r| r["foreign"]["family"]["zookeeper"]["timeout_ms"].is_i64())
    })
    .await;
    let row = held(&sessions).unwrap();
    assert_eq!(row["foreign"]["holds"], serde_json::json!(["jobs/nightly"]), "{row}");
    let (_, now, _) = lock_until(addr, LOCK, |s, _| s == 200).await;
    assert_eq!(
        row["foreign"]["family"]["zookeeper"]["timeout_ms"],
        now["entry"]["body"]["detail"]["zookeeper"]["holder_timeout_ms"],
        "{row}"
    );
    let waits = sessions["rows"]
        .as_array()
        .and_then(|rows| rows.iter().find(|r| r["id"] == waiter.session.as_str()))
        .unwrap_or_else(|| panic!("{sessions}"));
    assert_eq!(waits["waiting_for"], serde_json::json!(["jobs/nightly"]), "{waits}");
    assert!(
        waits["foreign"]["family"]["zookeeper"]["timeout_ms"].is_null(),
        "a recipe waiter's timeout is unknown: {waits}"
    );
    let html = page(addr, "/sessions?fleet=zk").await;
    assert!(
        html.contains("ZooKeeper session") && html.contains("timeout unknown"),
        "the sessions page"
    );

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
    lock_until(addr, LOCK, |s, b| {
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
