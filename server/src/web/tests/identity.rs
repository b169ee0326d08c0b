//! Who a request is, end to end: the sign-in page shows a stranger nothing of
//! the fleets; a repeated identity header is refused; another `Authorization`
//! scheme is ignored; `Sec-Fetch-Site` must be `same-origin`; a scoped
//! admin's audit `limit` counts its own fleets' entries. Each quotes the rule
//! of docs/api.md or docs/operations.md it checks.

use lockscope_model::admin::{Action, AuditEntry, Outcome};

use super::{Server, FLEET};

/// An unauthenticated page shows the product name and the sign-in form only
/// (`/api/v1/fleets` refuses a stranger the fleets, so the page does too).
#[tokio::test]
async fn the_sign_in_page_shows_nothing_of_the_fleets() {
    let s = Server::start(true).await;
    let signed_in = s
        .send("GET", "/", &[("authorization", s.bearer("admin").as_str())], "")
        .await;
    assert_eq!(signed_in.status, 200);
    assert!(
        signed_in.body.contains(FLEET) && signed_in.body.contains("secret-store-endpoint"),
        "a page for someone signed in names the fleet and its store"
    );
    let page = s.send("GET", "/signin", &[], "").await;
    assert_eq!(page.status, 200);
    assert!(page.body.contains(r#"data-testid="signin-form""#), "{}", page.body);
    for secret in [
        FLEET,
        "secret-store-endpoint",
        "held",
        "waiters",
        "writable",
        "nav-locks",
    ] {
        assert!(
            !page.body.contains(secret),
            "the sign-in page shows {secret:?}: {}",
            page.body
        );
    }
    assert_eq!(s.send("GET", "/api/v1/fleets", &[], "").await.status, 401);
}

/// docs/operations.md: "with `[auth.proxy]`, set the identity header itself and never pass on a
/// client's" — and docs/api.md: "A request with more than one `Authorization` header, or more
/// than one of the proxy's header, is `400`, whoever it names".
#[tokio::test]
async fn a_repeated_identity_header_is_refused() {
    let s = Server::start(true).await;
    let bob = [("x-forwarded-user", "bob")];
    assert_eq!(
        s.send("GET", "/api/v1/audit", &bob, "").await.status,
        200,
        "bob is admin"
    );
    let two_users = [("x-forwarded-user", "mallory"), ("x-forwarded-user", "bob")];
    let why = "more than one X-Forwarded-User header: the proxy must replace the client's";
    let r = s.send("GET", "/api/v1/fleets", &two_users, "").await;
    assert_eq!((r.status, r.body.contains(why)), (400, true), "API: {}", r.body);
    let r = s.send("GET", "/", &two_users, "").await;
    assert_eq!((r.status, r.body.contains(why)), (400, true), "page: {}", r.body);
    let (status, body) = s.ws(&two_users).await;
    assert_eq!((status, body.contains(why)), (400, true), "/ws: {body}");

    // An admin action: refused, audited, nothing done.
    let before = s.audit_count().await;
    let form = format!("fleet={FLEET}&name=job&confirm=job&fence=1&reason=x&back=/&csrf=c");
    let headers = [
        two_users[0],
        two_users[1],
        ("content-type", "application/x-www-form-urlencoded"),
        ("cookie", "lockscope_csrf=c"),
    ];
    let r = s.send("POST", "/actions/release", &headers, &form).await;
    assert_eq!((r.status, r.body.contains(why)), (400, true), "form: {}", r.body);
    let json = [two_users[0], two_users[1], ("content-type", "application/json")];
    let release = format!("/api/v1/fleets/{FLEET}/locks/job/release");
    let r = s.send("POST", &release, &json, r#"{"fence":1,"reason":"x"}"#).await;
    assert_eq!((r.status, r.body.contains(why)), (400, true), "API release: {}", r.body);
    // Attempts without an identity are tallied (one row per source and minute).
    s.audit.flush_tally(true).await;
    let entries = s.audit.query(&Default::default()).await.unwrap();
    assert!(entries.len() > before, "the refused attempts are audited");
    let e = &entries[0];
    assert_eq!(
        (e.outcome, e.actor.as_str(), e.detail.contains(why)),
        (Some(Outcome::Refused), "(unauthenticated)", true),
        "{e:?}"
    );

    let admin = s.bearer("admin");
    let two_tokens = [("authorization", admin.as_str()), ("authorization", admin.as_str())];
    let r = s.send("GET", "/api/v1/fleets", &two_tokens, "").await;
    assert_eq!(
        (
            r.status,
            r.body.contains("more than one Authorization header: send one")
        ),
        (400, true),
        "{}",
        r.body
    );
    let basic_and_bearer = [("authorization", "Basic Ym9iOnB3"), ("authorization", admin.as_str())];
    assert_eq!(s.send("GET", "/api/v1/fleets", &basic_and_bearer, "").await.status, 400);
}

/// docs/operations.md: "an API token: `Authorization: Bearer TOKEN` (any other `Authorization`,
/// such as a proxy's own `Basic`, is ignored and the next ways apply)"; docs/api.md: "A `Bearer`
/// token that does not verify is `401`, even if the request also carries a cookie or the
/// proxy's header."
#[tokio::test]
async fn another_authorization_scheme_is_ignored() {
    let s = Server::start(true).await;
    let basic = ("authorization", "Basic Ym9iOnB3");
    let r = s
        .send("GET", "/api/v1/audit", &[basic, ("x-forwarded-user", "bob")], "")
        .await;
    assert_eq!(r.status, 200, "Basic from the proxy, and the proxy's user: {}", r.body);
    let r = s.send("GET", "/api/v1/fleets", &[basic], "").await;
    assert_eq!(r.status, 401);
    assert!(
        r.body.contains("no credentials"),
        "Basic alone is no credentials: {}",
        r.body
    );
    let lower = format!("bearer {}", s.tokens["admin"]);
    assert_eq!(
        s.send("GET", "/api/v1/fleets", &[("authorization", lower.as_str())], "")
            .await
            .status,
        200
    );
    let bad = ("authorization", "Bearer 0000.nope");
    let r = s
        .send("GET", "/api/v1/fleets", &[bad, ("x-forwarded-user", "bob")], "")
        .await;
    assert_eq!(
        (r.status, r.body.contains("the API token is not valid")),
        (401, true),
        "{}",
        r.body
    );
}

/// docs/api.md: "an `Origin` other than the request's `Host`, or a `Sec-Fetch-Site` other than
/// `same-origin` (`none` included: a typed URL or a bookmark never posts a form), is `403`".
#[tokio::test]
async fn sec_fetch_site_none_is_refused() {
    let s = Server::start(true).await;
    let release = format!("/api/v1/fleets/{FLEET}/locks/job/release");
    // A whole body, so that a request past the origin check is answered by the
    // store: the lock is free, `409 changed` (a 400 would pass whatever the check did).
    let body = r#"{"fence":1,"owner":null,"reason":"x"}"#;
    for (site, refused) in [
        ("none", true),
        ("cross-site", true),
        ("same-site", true),
        ("same-origin", false),
    ] {
        let headers = [
            ("x-forwarded-user", "bob"),
            ("content-type", "application/json"),
            ("cookie", "lockscope_csrf=c"),
            ("x-csrf-token", "c"),
            ("sec-fetch-site", site),
        ];
        let r = s.send("POST", &release, &headers, body).await;
        let why = format!("a request with Sec-Fetch-Site: {site} refused");
        if refused {
            assert_eq!((r.status, r.body.contains(&why)), (403, true), "{site}: {}", r.body);
        } else {
            assert_eq!(
                (r.status, r.body.contains("job is not held now")),
                (409, true),
                "{site} passes the check and reaches the store: {}",
                r.body
            );
        }
        let (status, body) = s.ws(&[("x-forwarded-user", "bob"), ("sec-fetch-site", site)]).await;
        assert_eq!(
            status == 403 && body.contains(&why),
            refused,
            "/ws {site}: {status} {body}"
        );
    }
}

/// docs/api.md: "For a scoped admin the limit counts the entries of its scope: `limit=N` gives
/// the newest N of its fleets' entries, when there are that many."
#[tokio::test]
async fn a_scoped_admins_limit_counts_its_own_entries() {
    let s = Server::start(true).await;
    for (i, fleet) in [
        "secret-fleet",
        "secret-fleet",
        "secret-fleet",
        "elsewhere",
        "elsewhere",
        "elsewhere",
    ]
    .into_iter()
    .enumerate()
    {
        let entry = AuditEntry {
            at: 1_000 + i as i64,
            actor: "someone".into(),
            via: "api".into(),
            action: Some(Action::Release),
            fleet: fleet.into(),
            target: format!("lock-{i}"),
            reason: "x".into(),
            outcome: Some(Outcome::Done),
            detail: "done".into(),
            ..AuditEntry::default()
        };
        s.audit.append(&entry).await.unwrap();
    }
    let auth = s.bearer("scoped");
    let r = s
        .send("GET", "/api/v1/audit?limit=2", &[("authorization", auth.as_str())], "")
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let got: Vec<AuditEntry> = serde_json::from_str(&r.body).unwrap();
    let targets: Vec<(&str, &str)> = got.iter().map(|e| (e.fleet.as_str(), e.target.as_str())).collect();
    assert_eq!(targets, [(FLEET, "lock-2"), (FLEET, "lock-1")]);
    let r = s
        .send("GET", "/audit?limit=2", &[("authorization", auth.as_str())], "")
        .await;
    assert!(r.body.contains("lock-2") && r.body.contains("lock-1") && !r.body.contains("lock-0"));
    assert!(!r.body.contains("lock-5"), "the page shows the same entries");
}
