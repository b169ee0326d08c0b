//! Who may act: the role matrix over every state-changing endpoint (the JSON API
//! and the browser's forms), against a real SQLite lock store and a real
//! server. In each refused case nothing changes in the store and the attempt
//! is in the audit log; allowed actions do exactly what they say.

use std::time::Duration;

use lockscope_model::admin::{Action, Outcome, Role};
use lockscope_store::client::{LockGuard, LockOptions, Session, SessionConfig};
use lockscope_store::protocol::LockStore;
use lockscope_store::spec::AnyLocks;

mod answers;
mod cli;
mod harness;
mod read_cli;
mod scope;
use harness::Reply;
pub(crate) use harness::Server;

/// One request of the matrix: how it is sent.
#[derive(Clone, Copy, Debug)]
enum Ask<'a> {
    NoCredentials,
    Token(&'a str),
    /// A signed-in browser's cookie, with or without the CSRF token.
    Browser {
        cookies: &'a str,
        csrf: Option<&'a str>,
    },
}

/// Sends `action` on `target` through the API or (`form`) the browser's form.
async fn ask(s: &Server, how: Ask<'_>, form: bool, action: Action, target: &str, fence: i64) -> Reply {
    // Form values are form-encoded; a path segment never is.
    let enc = lockscope::web::pages::encode;
    let seg = lockscope_model::url::segment;
    let mut headers: Vec<(&str, String)> = Vec::new();
    let csrf_field = match how {
        Ask::NoCredentials => String::new(),
        Ask::Token(who) => {
            headers.push(("authorization", s.bearer(who)));
            String::new()
        }
        Ask::Browser { cookies, csrf } => {
            headers.push(("cookie", cookies.to_string()));
            headers.push(("origin", s.base.clone()));
            if let (Some(c), false) = (csrf, form) {
                headers.push(("x-csrf-token", c.to_string()));
            }
            csrf.unwrap_or("").to_string()
        }
    };
    let (method, path, body) = if form {
        headers.push(("content-type", "application/x-www-form-urlencoded".into()));
        let key = if matches!(action, Action::Release | Action::Cancel) {
            "name"
        } else {
            "session"
        };
        let body = format!(
            "fleet=sql&{key}={t}&confirm={t}&fence={fence}&owner=&pid=1&backend_start_us=1&reason=matrix&csrf={csrf_field}&back=%2F",
            t = enc(target)
        );
        ("POST", format!("/actions/{}", action.as_str()), body)
    } else {
        headers.push(("content-type", "application/json".into()));
        match action {
            Action::Release => (
                "POST",
                format!("/api/v1/fleets/sql/locks/{}/release", seg(target)),
                format!(r#"{{"fence": {fence}, "owner": null, "reason": "matrix"}}"#),
            ),
            Action::Cancel => (
                "POST",
                format!("/api/v1/fleets/sql/locks/{}/cancel", seg(target)),
                r#"{"pid": 1, "backend_start_us": 1, "reason": "matrix"}"#.to_string(),
            ),
            Action::Blacklist | Action::Unblacklist => (
                if action == Action::Blacklist { "POST" } else { "DELETE" },
                format!("/api/v1/fleets/sql/sessions/{}/blacklist", seg(target)),
                r#"{"reason": "matrix"}"#.to_string(),
            ),
        }
    };
    let headers: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
    s.send(method, &path, &headers, &body).await
}

struct Fixture {
    _session: Session<AnyLocks>,
    _guards: Vec<LockGuard<AnyLocks>>,
    session_a: String,
    /// A blacklisted session (the target of unblacklist).
    blacklisted: String,
    fence_a: i64,
    /// The owner id of `team-a/1`'s acquisition.
    owner_a: String,
}

/// A session holding `team-a/1`, and another session that is blacklisted.
async fn fixture(s: &Server) -> Fixture {
    let session = Session::open(s.store.clone(), SessionConfig::new("matrix"))
        .await
        .unwrap();
    let opts = LockOptions::new("matrix", Duration::from_secs(600));
    let mut batch = session.try_lock_batch(&["team-a/1"], opts).await.unwrap();
    let guard = batch.taken.pop().expect("team-a/1 taken");
    let fence_a = guard.fence();
    let owner_a = s
        .store
        .get("team-a/1")
        .await
        .unwrap()
        .unwrap()
        .record()
        .unwrap()
        .owner
        .clone();
    let other = Session::open(s.store.clone(), SessionConfig::new("other"))
        .await
        .unwrap();
    let blacklisted = other.id().to_string();
    s.store
        .blacklist(&lockscope_model::record::BlacklistRecord::new(
            &blacklisted,
            "setup",
            "setup",
            0,
        ))
        .await
        .unwrap();
    let id = session.id().to_string();
    s.wait_hub(|n| n.locks.len() == 1, &id).await;
    s.wait_hub(|n| n.blacklist.is_some(), &blacklisted).await;
    Fixture {
        session_a: id,
        blacklisted,
        fence_a,
        owner_a,
        _session: session,
        _guards: vec![guard],
    }
}

/// Nothing changed, read from the store itself (an action is done before it is
/// answered): `team-a/1` is still the same acquisition (fence and owner), and
/// the store's blacklist holds exactly the blacklisted session (session A is
/// not in it, the other one was not lifted).
async fn unchanged(s: &Server, f: &Fixture, case: &str) {
    let entry = s.store.get("team-a/1").await.unwrap();
    let seen = entry.map(|e| (e.fence, e.record().map(|r| r.owner.clone())));
    assert_eq!(
        seen,
        Some((f.fence_a, Some(f.owner_a.clone()))),
        "{case}: the lock changed"
    );
    assert_eq!(
        s.blacklist_in_store().await,
        vec![f.blacklisted.clone()],
        "{case}: the store's blacklist changed (session A is {})",
        f.session_a
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_refusal_changes_nothing_and_is_audited() {
    let s = Server::start().await;
    let f = fixture(&s).await;
    let (cookies, _) = s.browser("admin").await;
    for form in [false, true] {
        for action in Action::ALL {
            let target = match action {
                Action::Release | Action::Cancel => "team-a/1".to_string(),
                Action::Blacklist => f.session_a.clone(),
                Action::Unblacklist => f.blacklisted.clone(),
            };
            let mut cases: Vec<(Ask, u16, &str)> = vec![
                (Ask::NoCredentials, 401, "no credentials"),
                (Ask::Token("viewer"), 403, "viewer"),
                (
                    Ask::Browser {
                        cookies: &cookies,
                        csrf: None,
                    },
                    403,
                    "browser without CSRF token",
                ),
                (
                    Ask::Browser {
                        cookies: &cookies,
                        csrf: Some("forged"),
                    },
                    403,
                    "browser with a forged CSRF token",
                ),
            ];
            if action == Action::Unblacklist {
                cases.push((Ask::Token("operator"), 403, "operator lifting a blacklist"));
            }
            if action == Action::Cancel {
                // issue 28: cancelling a waiter "needs the admin role".
                cases.push((Ask::Token("operator"), 403, "operator cancelling a waiter"));
                // Only PostgreSQL advisory locks have waiters to cancel: a SQL
                // fleet refuses an admin with the reason (409), audited.
                cases.push((Ask::Token("admin"), 409, "admin cancelling on a SQL fleet"));
            }
            if action == Action::Blacklist {
                // Session A holds team-a/1, inside the scope: blacklisting
                // another team's session is out of scope (checked below).
            }
            for (how, status, case) in cases {
                let case = format!("{} {} as {case}", if form { "form" } else { "api" }, action.as_str());
                let before = s.audit_count().await;
                let r = ask(&s, how, form, action, &target, f.fence_a).await;
                assert_eq!(r.status, status, "{case}: {}", r.body);
                unchanged(&s, &f, &case).await;
                assert_eq!(s.audit_count().await, before + 1, "{case}: not audited");
                let last = s.last_audit().await.unwrap();
                assert_eq!(last.outcome, Some(Outcome::Refused), "{case}");
                assert_eq!(
                    (last.action, last.target.as_str()),
                    (Some(action), target.as_str()),
                    "{case}"
                );
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allowed_actions_do_exactly_what_they_say() {
    let s = Server::start().await;
    let f = fixture(&s).await;
    let op = s.bearer("scoped");
    let json = [("authorization", op.as_str()), ("content-type", "application/json")];
    // A stale fence: 409, the current acquisition in the answer, nothing deleted.
    let r = s
        .send(
            "POST",
            "/api/v1/fleets/sql/locks/team-a%2F1/release",
            &json,
            &format!(
                r#"{{"fence": {}, "owner": "{}", "reason": "stale"}}"#,
                f.fence_a - 1,
                f.owner_a
            ),
        )
        .await;
    assert_eq!(r.status, 409, "{}", r.body);
    let v: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    assert_eq!(v["released"], false);
    assert_eq!(v["current"]["fence"], f.fence_a);
    unchanged(&s, &f, "stale fence").await;
    assert_eq!(s.last_audit().await.unwrap().outcome, Some(Outcome::Changed));
    // The fence seen with another owner: another acquisition, nothing deleted
    // (docs/api.md: "Deletes the lock only if it is still exactly that
    // acquisition: the store reads the lock and compares both").
    let r = s
        .send(
            "POST",
            "/api/v1/fleets/sql/locks/team-a%2F1/release",
            &json,
            &format!(
                r#"{{"fence": {}, "owner": "someone-else", "reason": "stale"}}"#,
                f.fence_a
            ),
        )
        .await;
    assert_eq!(r.status, 409, "{}", r.body);
    assert!(r.body.contains("its owner differs"), "{}", r.body);
    unchanged(&s, &f, "another owner").await;
    // The fence and owner seen: released, audited as done.
    let r = s
        .send(
            "POST",
            "/api/v1/fleets/sql/locks/team-a%2F1/release",
            &json,
            &format!(
                r#"{{"fence": {}, "owner": "{}", "reason": "stuck"}}"#,
                f.fence_a, f.owner_a
            ),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.body.contains(r#""released":true"#), "{}", r.body);
    assert!(s.store.get("team-a/1").await.unwrap().is_none());
    let last = s.last_audit().await.unwrap();
    assert_eq!(
        (last.actor.as_str(), last.role, last.fence, last.outcome),
        ("scoped", Some(Role::Operator), Some(f.fence_a), Some(Outcome::Done))
    );
    // Blacklist through the browser's form, as the page does it.
    let (cookies, csrf) = s.browser("admin").await;
    let r = ask(
        &s,
        Ask::Browser {
            cookies: &cookies,
            csrf: Some(&csrf),
        },
        true,
        Action::Blacklist,
        &f.session_a,
        0,
    )
    .await;
    assert_eq!(r.status, 303, "{}", r.body);
    let to = r.headers["location"].to_str().unwrap();
    assert!(to.starts_with("/?audit="), "{to}");
    s.wait_hub(|n| n.blacklist.is_some(), &f.session_a).await;
    // The page it returns to shows the outcome to its actor.
    let page = s.send("GET", to, &[("cookie", &cookies)], "").await;
    assert!(page.body.contains("blacklisted session"), "the notice is on the page");
    // Lifting needs admin; through the API with the browser's cookie and token.
    let r = ask(
        &s,
        Ask::Browser {
            cookies: &cookies,
            csrf: Some(&csrf),
        },
        false,
        Action::Unblacklist,
        &f.blacklisted,
        0,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    s.wait_hub(|n| n.blacklist.is_none(), &f.blacklisted).await;
    // Only admins read the audit log; CSV and NDJSON on request.
    let r = s
        .send("GET", "/api/v1/audit", &[("authorization", &s.bearer("operator"))], "")
        .await;
    assert_eq!(r.status, 403);
    let r = s
        .send(
            "GET",
            "/api/v1/audit?format=csv",
            &[("authorization", &s.bearer("admin"))],
            "",
        )
        .await;
    assert_eq!(r.status, 200);
    assert!(r.body.starts_with("id,at,actor"), "{}", r.body);
    assert_eq!(r.body.lines().count(), 1 + 5, "{}", r.body);
    let r = s
        .send(
            "GET",
            "/api/v1/audit?action=release",
            &[
                ("authorization", &s.bearer("admin")),
                ("accept", "application/x-ndjson"),
            ],
            "",
        )
        .await;
    assert_eq!(r.body.lines().count(), 3, "{}", r.body);
}

#[tokio::test]
async fn reads_need_an_identity() {
    let s = Server::start().await;
    for path in ["/api/v1/fleets", "/api/v1/fleets/sql/sessions", "/api/v1/audit"] {
        assert_eq!(s.send("GET", path, &[], "").await.status, 401, "{path}");
    }
    let r = s.send("GET", "/sessions", &[], "").await;
    assert_eq!(r.status, 303);
    assert_eq!(r.headers["location"], "/signin?next=/sessions");
    let r = s
        .send("GET", "/api/v1/fleets", &[("authorization", &s.bearer("viewer"))], "")
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = s
        .send("GET", "/api/v1/fleets", &[("authorization", "Bearer nope.nope")], "")
        .await;
    assert_eq!(r.status, 401);
}
