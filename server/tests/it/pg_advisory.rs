//! An `advisory+postgres://` fleet through the whole server: an advisory lock
//! taken in a `psql` session answers `GET /api/v1/fleets/{fleet}/locks/{key}`
//! with its holder backend within one poll; the API's release (a terminate of
//! the holder's backend, fenced by its pid and backend start) with a stale
//! backend start is a 409 that terminates nothing, the one with the fence
//! shown ends that backend and the lock leaves the API; both audited; the
//! lock's page shows the backend, the poll interval and the terminate
//! dialog's text. Cancelling a waiter (`…/cancel`, `pg_cancel_backend`):
//! a stale backend start is a 409 with the lock as it is and the waiter keeps
//! waiting; the one shown cancels its statement (its `psql` prints the error)
//! and its session stays; both audited.

use lockscope::remember::audit::AuditLog;
use lockscope_model::admin::{Action, AuditQuery, Outcome, Role};
use lockscope_store::pg_advisory::fence_of;
use lockscope_store::spec::StoreSpec;
use lockscope_store::testing::{PgServer, Psql};
use serde_json::Value;
use sqlx::Connection;

use super::foreign::{call, call_as, lock_until, page, serve, serve_with_tokens};

const LOCK: &str = "/api/v1/fleets/pg/locks/42";

async fn backends(url: &str, pid: i64) -> i64 {
    let mut c = sqlx::PgConnection::connect(url).await.unwrap();
    sqlx::query_scalar("SELECT count(*) FROM pg_stat_activity WHERE pid = $1")
        .bind(pid as i32)
        .fetch_one(&mut c)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_psql_advisory_lock_through_the_api_and_a_guarded_terminate() {
    let server = PgServer::start().await;
    let url = server.url();
    let spec = StoreSpec::parse(&format!("advisory+{url}#poll=200ms")).unwrap();
    let srv = serve("pg", "advisory locks under test", &spec).await;
    let (addr, audit) = (srv.addr, &srv.audit);
    lock_until(addr, LOCK, |s, _| s == 404).await;

    // docs/operations.md: "An advisory lock taken in a `psql` session is shown with its backend
    // within one poll." (issue 28: "(pid, application_name, backend start) and its waiters")
    let mut holder = Psql::open(&url, "migrate");
    holder.send("SELECT pg_advisory_lock(42);");
    let (_, lock, took) = lock_until(addr, LOCK, |s, b| {
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
    lock_until(addr, LOCK, |s, b| {
        s == 200 && b["entry"]["body"]["detail"]["pg_advisory"]["waiters"][0]["application_name"] == "worker"
    })
    .await;

    sessions_page(addr, pid, start).await;

    // issue 29: "`lockscope describe lock NAME` (the detail page's content in text)":
    // the family's own section too, holder and waiter backends.
    let server = format!("http://{addr}");
    let (code, out, err) = tokio::task::block_in_place(|| {
        super::list::lockscope(&["describe", "lock", "--server", &server, "--fleet", "pg", "42"])
    });
    assert_eq!(code, 0, "{err}");
    for said in [
        "Family:      pg_advisory",
        "holders[0].application_name: migrate",
        &format!("holders[0].pid: {pid}"),
        "waiters[0].application_name: worker",
    ] {
        assert!(out.contains(said), "{said:?} not in describe's output:\n{out}");
    }

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

    cancel_a_waiter(addr, audit, &url, fence).await;
    an_operator_may_not_terminate(&spec, &url, pid, fence).await;

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
    lock_until(addr, LOCK, |s, b| {
        s == 200 && b["entry"]["body"]["detail"]["pg_advisory"]["holders"][0]["application_name"] == "worker"
    })
    .await;
    drop(waiter);
    lock_until(addr, LOCK, |s, _| s == 404).await;

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

/// docs/operations.md: "The release needs the admin role" (it ends the
/// holder's whole backend): an operator's, with the fence shown, is a 403
/// that terminates nothing, and is audited as refused. A second server on
/// the same database, with tokens.
async fn an_operator_may_not_terminate(spec: &StoreSpec, url: &str, pid: i64, fence: i64) {
    let (srv, tokens) = serve_with_tokens("pg", "with tokens", spec, &[("operator", Role::Operator)]).await;
    let operator = Some(tokens["operator"].as_str());
    let shown = |s: u16, b: &Value| s == 200 && b["entry"]["fence"] == fence;
    let t0 = std::time::Instant::now();
    while !{
        let (s, b) = call_as(srv.addr, operator, "GET", LOCK, "").await;
        shown(s, &b)
    } {
        assert!(t0.elapsed() < std::time::Duration::from_secs(5), "the lock never shown");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let body = format!(r#"{{"fence": {fence}, "owner": null, "reason": "INC-9: an operator tries"}}"#);
    let (status, answer) = call_as(srv.addr, operator, "POST", &format!("{LOCK}/release"), &body).await;
    assert_eq!(status, 403, "{answer}");
    assert!(
        answer.to_string().contains("needs the admin role"),
        "says why: {answer}"
    );
    assert_eq!(backends(url, pid).await, 1, "an operator's release terminates nothing");
    let audited = srv.audit.query(&AuditQuery::default()).await.unwrap();
    assert!(
        audited
            .iter()
            .any(|a| a.actor == "operator" && a.outcome == Some(Outcome::Refused)),
        "{audited:#?}"
    );
}

/// The waiters named `app` of lock 42 in `lock`'s answer.
fn waiting(lock: &Value, app: &str) -> Option<(i64, i64)> {
    let waiters = lock["entry"]["body"]["detail"]["pg_advisory"]["waiters"].as_array()?;
    let w = waiters.iter().find(|w| w["application_name"] == app)?;
    Some((w["pid"].as_i64()?, w["backend_start_us"].as_i64()?))
}

/// A third `psql` session queues for 42 behind the holder and `worker`; its
/// wait is cancelled through the API, first with a stale backend start.
async fn cancel_a_waiter(addr: std::net::SocketAddr, audit: &AuditLog, url: &str, fence: i64) {
    let mut queued = Psql::open_logged(url, "queued");
    queued.send("SELECT pg_advisory_lock(42);");
    let (_, lock, _) = lock_until(addr, LOCK, |s, b| s == 200 && waiting(b, "queued").is_some()).await;
    let (pid, start) = waiting(&lock, "queued").unwrap();

    let html = page(addr, "/lock?fleet=pg&name=42").await;
    for said in [
        format!("Cancel the wait of pid {pid}"),
        "Its session stays connected".into(),
    ] {
        assert!(html.contains(&said), "{said:?} not on the page");
    }

    let path = format!("{LOCK}/cancel");
    let body =
        |start: i64| format!(r#"{{"pid": {pid}, "backend_start_us": {start}, "reason": "INC-9: unblock the queue"}}"#);
    // docs/operations.md: "A cancel acts only if the backend is still the one the page showed
    // (its pid and backend start) and still waits for that lock; otherwise nothing is cancelled
    // and the answer is `409` with the lock as it is now."
    let (status, answer) = call(addr, "POST", &path, &body(start + 1)).await;
    assert_eq!(status, 409, "{answer}");
    assert_eq!(
        (answer["outcome"].as_str(), answer["cancelled"].as_bool()),
        (Some("changed"), Some(false)),
        "{answer}"
    );
    assert_eq!(answer["current"]["fence"], fence, "{answer}");
    tokio::time::sleep(std::time::Duration::from_millis(600)).await;
    let (_, lock, _) = lock_until(addr, LOCK, |s, _| s == 200).await;
    assert_eq!(
        waiting(&lock, "queued"),
        Some((pid, start)),
        "a stale backend start cancels nothing"
    );
    assert!(!queued.errors().contains("canceling"), "{}", queued.errors());

    // docs/operations.md: "**cancels the waiter's statement** (`pg_cancel_backend`): its
    // `pg_advisory_lock` call fails with `canceling statement due to user request`; its
    // session stays connected and every lock it already holds stays held."
    let (status, answer) = call(addr, "POST", &path, &body(start)).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["cancelled"], true, "{answer}");
    lock_until(addr, LOCK, |s, b| s == 200 && waiting(b, "queued").is_none()).await;
    let t0 = std::time::Instant::now();
    while !queued.errors().contains("canceling statement due to user request") {
        assert!(t0.elapsed().as_secs() < 5, "psql printed: {:?}", queued.errors());
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(backends(url, pid).await, 1, "the waiter's session stays");
    assert!(!queued.exited(), "its psql carries on");
    assert!(
        waiting(&lock_until(addr, LOCK, |s, _| s == 200).await.1, "worker").is_some(),
        "the other waiter still waits"
    );

    // Both audited, naming the waiter.
    let cancels: Vec<_> = audit
        .query(&AuditQuery::default())
        .await
        .unwrap()
        .into_iter()
        .filter(|a| a.action == Some(Action::Cancel))
        .collect();
    assert_eq!(cancels.len(), 2, "{cancels:#?}");
    assert!(
        cancels.iter().any(|a| a.outcome == Some(Outcome::Changed)
            && a.detail.contains(&format!("{pid}@{}", start + 1))
            && a.target == "42"),
        "{cancels:#?}"
    );
    assert!(
        cancels
            .iter()
            .any(|a| a.outcome == Some(Outcome::Done) && a.detail.contains(&format!("{pid}@{start}"))),
        "{cancels:#?}"
    );
}

/// docs/operations.md: "The sessions page lists one row per backend holding or waiting for an
/// advisory lock: its pid, application_name, user, client address, backend start and state, the
/// locks it holds and the ones it waits for".
async fn sessions_page(addr: std::net::SocketAddr, pid: i64, start: i64) {
    let path = "/api/v1/fleets/pg/sessions";
    let row = |b: &Value, app: &str| {
        b["rows"].as_array().and_then(|rows| {
            rows.iter()
                .find(|r| r["foreign"]["family"]["pg_backend"]["application_name"] == app)
                .cloned()
        })
    };
    let (_, sessions, _) = lock_until(addr, path, |s, b| {
        s == 200 && row(b, "migrate").is_some() && row(b, "worker").is_some()
    })
    .await;
    let holder = row(&sessions, "migrate").unwrap();
    assert_eq!(holder["id"], format!("{pid}@{start}"), "{holder}");
    let backend = &holder["foreign"]["family"]["pg_backend"];
    assert_eq!(
        (backend["pid"].as_i64(), backend["backend_start_us"].as_i64()),
        (Some(pid), Some(start)),
        "{holder}"
    );
    assert!(
        backend["usename"].is_string() && backend["state"].is_string(),
        "{holder}"
    );
    assert_eq!(holder["foreign"]["holds"], serde_json::json!(["42"]), "{holder}");
    assert_eq!(holder["locks_held"], 1, "{holder}");
    let waiter = row(&sessions, "worker").unwrap();
    assert_eq!(waiter["waiting_for"], serde_json::json!(["42"]), "{waiter}");
    assert_eq!(waiter["foreign"]["holds_total"], 0, "{waiter}");
    let html = page(addr, "/sessions?fleet=pg").await;
    assert!(
        html.contains(&format!("PostgreSQL backend pid {pid} (migrate)")),
        "the sessions page names the backend"
    );
}
