//! Refusals that are not about the role: an operator acting outside its
//! fleet scope, malformed input, and actions on read-only fleets (split out
//! of admin.rs; shares its request matrix helpers).

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scope_bad_input_and_read_only_fleets_are_refused() {
    let s = Server::start().await;
    let f = fixture(&s).await;
    let session = Session::open(s.store.clone(), SessionConfig::new("team-b"))
        .await
        .unwrap();
    let opts = LockOptions::new("b", Duration::from_secs(600));
    let b = session
        .try_lock_batch(&["team-b/1"], opts)
        .await
        .unwrap()
        .taken
        .pop()
        .unwrap();
    s.wait_hub(|n| n.locks.len() == 1, session.id()).await;
    let bearer = s.bearer("scoped");
    let json = [("authorization", bearer.as_str()), ("content-type", "application/json")];
    let cases: Vec<(&str, String, String, u16, &str)> = vec![
        (
            "POST",
            "/api/v1/fleets/sql/locks/team-b%2F1/release".into(),
            format!(r#"{{"fence": {}, "owner": null, "reason": "x"}}"#, b.fence()),
            403,
            "outside",
        ),
        (
            "POST",
            format!("/api/v1/fleets/sql/sessions/{}/blacklist", session.id()),
            r#"{"reason": "x"}"#.into(),
            403,
            "outside",
        ),
        (
            "POST",
            "/api/v1/fleets/sql/locks/team-a%2F1/release".into(),
            r#"{"fence": "seven", "owner": null, "reason": "x"}"#.into(),
            400,
            "not what this call takes",
        ),
        (
            "POST",
            "/api/v1/fleets/sql/locks/team-a%2F1/release".into(),
            format!(r#"{{"fence": {}, "owner": "{}"}}"#, f.fence_a, f.owner_a),
            400,
            "missing field `reason`",
        ),
        (
            // docs/api.md: "`fence` and `owner` ... all three required".
            "POST",
            "/api/v1/fleets/sql/locks/team-a%2F1/release".into(),
            r#"{"fence": 1, "reason": "x"}"#.into(),
            400,
            "missing field `owner` at line 1 column 27",
        ),
        (
            "POST",
            "/api/v1/fleets/sql/locks/team-a%2F1/release".into(),
            format!(
                r#"{{"fence": {}, "owner": "{}", "reason": "  "}}"#,
                f.fence_a, f.owner_a
            ),
            400,
            "give a reason",
        ),
        (
            "POST",
            "/api/v1/fleets/nope/locks/team-a%2F1/release".into(),
            format!(r#"{{"fence": {}, "owner": "{}", "reason": "x"}}"#, f.fence_a, f.owner_a),
            404,
            "no fleet named",
        ),
        (
            "POST",
            "/api/v1/fleets/sql/locks/team-a%2F1/release".into(),
            format!(r#"{{"fence": {}, "reason": "{}"}}"#, f.fence_a, "x".repeat(20_000)),
            413,
            "",
        ),
    ];
    for (method, path, body, status, why) in cases {
        let before = s.audit_count().await;
        let r = s.send(method, &path, &json, &body).await;
        assert_eq!(r.status, status, "{path} {body:.80}: {}", r.body);
        assert!(r.body.contains(why), "{path}: {} lacks {why:?}", r.body);
        unchanged(&s, &f, &path).await;
        assert_eq!(s.store.get("team-b/1").await.unwrap().map(|e| e.fence), Some(b.fence()));
        // An oversized body is refused before anyone reads it; the rest are audited.
        let audited = if status == 413 { 0 } else { 1 };
        assert_eq!(s.audit_count().await, before + audited, "{path}: {}", r.body);
    }
    // docs/api.md: "a form without `owner` … is a 400 (audited)": a page from
    // before owners were sent cannot release by fence alone.
    let (cookies, csrf) = s.browser("admin").await;
    let before = s.audit_count().await;
    let form = format!(
        "fleet=sql&name=team-a%2F1&confirm=team-a%2F1&fence={}&reason=old+page&csrf={csrf}&back=%2F",
        f.fence_a
    );
    let r = s.post_form("/actions/release", &cookies, &form).await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(r.body.contains("names no owner"), "{}", r.body);
    unchanged(&s, &f, "a form without owner").await;
    assert_eq!(s.audit_count().await, before + 1, "audited");
    // Plain text is not JSON: a browser could send it cross-site without asking.
    let r = s
        .send(
            "POST",
            "/api/v1/fleets/sql/locks/team-a%2F1/release",
            &[("authorization", &s.bearer("operator")), ("content-type", "text/plain")],
            &format!(r#"{{"fence": {}, "reason": "x"}}"#, f.fence_a),
        )
        .await;
    assert_eq!(r.status, 400, "{}", r.body);
    unchanged(&s, &f, "text/plain").await;
    // A read-only fleet: 409 with the reason, nothing done.
    let r = s
        .send(
            "POST",
            "/api/v1/fleets/shed/locks/x/release",
            &[
                ("authorization", &s.bearer("admin")),
                ("content-type", "application/json"),
            ],
            r#"{"fence": 0, "owner": null, "reason": "x"}"#,
        )
        .await;
    assert_eq!(r.status, 409, "{}", r.body);
    assert!(r.body.contains("read-only"), "{}", r.body);
    drop(b);
}
