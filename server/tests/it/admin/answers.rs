//! What an action answers and records: `audit_id` (an id, `0` when the entry
//! could not be written, `null` for a tallied attempt), the owner a release
//! named in its audit entry (and on /audit), and docs/api.md's curl release
//! of a lock without an owner, sent as the example sends it.

use std::time::Duration;

use lockscope_store::protocol::LockStore;

use super::{fixture, Server};

fn json(body: &str) -> serde_json::Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

/// docs/api.md: "`audit_id` is the audit entry's id (`0` when it could not be written nor queued;
/// `null` for an attempt without an identity, which is tallied: see below" and "If the entry can
/// be neither written nor queued, the answer is `500` with the same JSON, `audit_id: 0`". (It
/// answered `null` for both.) An entry queued instead is store_busy.rs's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_id_is_null_when_tallied_and_0_when_the_write_failed() {
    let s = Server::start().await;
    let f = fixture(&s).await;
    let path = "/api/v1/fleets/sql/locks/team-a%2F1/release";
    let body = format!(
        r#"{{"fence": {}, "owner": "{}", "reason": "audit down"}}"#,
        f.fence_a, f.owner_a
    );
    let r = s
        .send("POST", path, &[("content-type", "application/json")], &body)
        .await;
    assert_eq!(r.status, 401, "{}", r.body);
    assert_eq!(
        json(&r.body)["audit_id"],
        serde_json::Value::Null,
        "tallied: {}",
        r.body
    );

    // The audit table goes away under the server: its next write fails; and
    // its spool cannot be written either (a directory where the file goes).
    std::fs::create_dir(s.dir.path().join("audit.db.spool")).unwrap();
    let db = s.sqlite("audit.db").await;
    sqlx::query("ALTER TABLE lockscope_audit RENAME TO lockscope_audit_gone")
        .execute(&db)
        .await
        .unwrap();
    db.close().await;
    let op = s.bearer("operator");
    let r = s
        .send(
            "POST",
            path,
            &[("authorization", &op), ("content-type", "application/json")],
            &body,
        )
        .await;
    assert_eq!(r.status, 500, "{}", r.body);
    let v = json(&r.body);
    assert_eq!(v["audit_id"], serde_json::json!(0), "{}", r.body);
    assert_eq!(v["released"], true, "the action stands: {}", r.body);
    assert!(
        v["detail"]
            .as_str()
            .unwrap()
            .contains("— but the audit log could not be written"),
        "{}",
        r.body
    );
    assert!(s.store.get("team-a/1").await.unwrap().is_none(), "released");
}

/// A release that was not done records the acquisition it named: the fence in
/// its column, the owner in its `detail` (docs/api.md: "The `detail` of a
/// release that was not done (refused, or `409`) ends with the owner it named,
/// as sent"), shown on /audit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_not_done_records_the_owner_it_named() {
    let s = Server::start().await;
    let f = fixture(&s).await;
    let path = "/api/v1/fleets/sql/locks/team-a%2F1/release";
    let send = |who: &'static str, owner: String| {
        let bearer = s.bearer(who);
        let body = format!(r#"{{"fence": {}, "owner": {owner}, "reason": "named"}}"#, f.fence_a);
        let s = &s;
        async move {
            s.send(
                "POST",
                path,
                &[("authorization", &bearer), ("content-type", "application/json")],
                &body,
            )
            .await
        }
    };
    // Refused (a viewer), naming the real owner.
    let r = send("viewer", format!("{:?}", f.owner_a)).await;
    assert_eq!(r.status, 403, "{}", r.body);
    let last = s.last_audit().await.unwrap();
    assert_eq!(last.fence, Some(f.fence_a));
    let named = format!("(named owner {:?})", f.owner_a);
    assert!(last.detail.ends_with(&named), "{}", last.detail);
    // 409: an owner that is not the acquisition's.
    let r = send("operator", r#""another-acquisition""#.into()).await;
    assert_eq!(r.status, 409, "{}", r.body);
    let last = s.last_audit().await.unwrap();
    assert!(
        last.detail.ends_with(r#"(named owner "another-acquisition")"#),
        "{}",
        last.detail
    );
    // 409: no owner (JSON null) for a lock that has one.
    let r = send("operator", "null".into()).await;
    assert_eq!(r.status, 409, "{}", r.body);
    let last = s.last_audit().await.unwrap();
    assert!(last.detail.ends_with("(named owner null)"), "{}", last.detail);
    assert!(s.store.get("team-a/1").await.unwrap().is_some(), "nothing released");

    // The audit page shows the detail with the owner.
    let (cookies, _) = s.browser("admin").await;
    let page = s
        .send("GET", "/audit?action=release", &[("cookie", &cookies)], "")
        .await;
    assert_eq!(page.status, 200, "{}", page.body);
    for owner in ["another-acquisition", f.owner_a.as_str()] {
        assert!(page.body.contains(owner), "/audit lacks {owner}: {}", page.body);
    }
    assert!(page.body.contains("(named owner null)"), "{}", page.body);
}

/// docs/api.md's release example, as the shell runs it: `jq .entry.body.owner`
/// (JSON: a quoted string or `null`) put into the body unquoted. On a lock
/// without an owner (a malformed value) that is `"owner": null`, and releases
/// it; the old example's `jq -r` sent the string `"null"`, which names another
/// acquisition and never releases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_curl_release_frees_a_lock_without_an_owner() {
    let s = Server::start().await;
    s.store.put_raw("reports/nightly", b"not a record").await.unwrap();
    let op = s.bearer("operator");
    let p = "reports%2Fnightly";
    let mut shown = None;
    for _ in 0..200 {
        let r = s
            .send(
                "GET",
                &format!("/api/v1/fleets/sql/locks/{p}"),
                &[("authorization", &op)],
                "",
            )
            .await;
        if r.status == 200 && !json(&r.body)["entry"].is_null() {
            shown = Some(json(&r.body));
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let shown = shown.expect("the lock is shown");
    // OWNER=$(curl … | jq .entry.body.owner)
    let owner = serde_json::to_string(&shown["entry"]["body"]["owner"]).unwrap();
    assert_eq!(owner, "null", "a malformed lock has no owner: {shown}");
    let fence = shown["entry"]["fence"].as_i64().unwrap();
    let release = |owner: String| {
        let op = op.clone();
        let s = &s;
        async move {
            // -d "{\"fence\": 1, \"owner\": $OWNER, \"reason\": \"…\"}"
            let body =
                format!(r#"{{"fence": {fence}, "owner": {owner}, "reason": "INC-4711: worker gone, lock orphaned"}}"#);
            s.send(
                "POST",
                &format!("/api/v1/fleets/sql/locks/{p}/release"),
                &[("authorization", &op), ("content-type", "application/json")],
                &body,
            )
            .await
        }
    };
    // What `jq -r` and a quoted $OWNER sent: the string "null".
    let r = release(r#""null""#.into()).await;
    assert_eq!(r.status, 409, "{}", r.body);
    assert!(s.store.get("reports/nightly").await.unwrap().is_some());
    // The documented example.
    let r = release(owner).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(json(&r.body)["released"], true, "{}", r.body);
    assert!(s.store.get("reports/nightly").await.unwrap().is_none());
}
