//! The list API (issue 29) against a real SQLite fleet through the whole
//! server: `GET /api/v1/fleets/{fleet}/locks` pages 250 locks by cursor, each
//! exactly once even while locks are released and taken between pages (in the
//! default order and a reversed one); the page's filters apply; a bad `limit`,
//! `sort` or cursor is a 400 with the reason; NDJSON is one lock a line and a
//! last line with `next`; an unknown fleet is a 404; sessions page the same way.

use std::collections::HashSet;
use std::time::Duration;

use lockscope::auth::Auth;
use lockscope::live::hub::{Fleets, HubHandle};
use lockscope::remember::audit::AuditLog;
use lockscope::web::AppState;
use lockscope_store::client::{Session, SessionConfig};
use lockscope_store::protocol::LockStore;
use lockscope_store::spec::StoreSpec;
use lockscope_store::sql::SqlLocks;
use lockscope_store::testing::take;
use serde_json::Value;

const F: &str = "sql";

/// GET `path` with `accept`: status and body.
async fn get(addr: std::net::SocketAddr, path: &str, accept: &str) -> (u16, String) {
    use http_body_util::BodyExt;
    let req = hyper::Request::builder()
        .uri(format!("http://{addr}{path}"))
        .header("accept", accept)
        .body(http_body_util::Full::new(hyper::body::Bytes::new()))
        .unwrap();
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new()).build_http();
    let ask = async {
        let resp = client.request(req).await.unwrap_or_else(|e| panic!("{path}: {e}"));
        let status = resp.status().as_u16();
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        (status, String::from_utf8_lossy(&body).into_owned())
    };
    tokio::time::timeout(Duration::from_secs(30), ask)
        .await
        .unwrap_or_else(|_| panic!("{path}: no answer within 30 s"))
}

async fn json(addr: std::net::SocketAddr, path: &str) -> Value {
    let (status, body) = get(addr, path, "application/json").await;
    assert_eq!(status, 200, "{path}: {body}");
    serde_json::from_str(&body).unwrap()
}

fn names(page: &Value) -> Vec<String> {
    page["locks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["entry"]["name"].as_str().unwrap().to_string())
        .collect()
}

/// Pages `query` by `limit` 100, calling `between` after the first page;
/// returns every name seen, in order.
async fn page_all(addr: std::net::SocketAddr, query: &str, mut between: impl AsyncFnMut()) -> Vec<String> {
    let mut seen = Vec::new();
    let mut after = String::new();
    for turn in 0.. {
        assert!(turn < 10, "paging never ended");
        let page = json(
            addr,
            &format!("/api/v1/fleets/{F}/locks?limit=100&{query}&after={after}"),
        )
        .await;
        assert_eq!(page["live"], true, "a live SQLite fleet says so: {page}");
        assert!(page["as_of"].as_i64().unwrap() > 0);
        seen.extend(names(&page));
        if turn == 0 {
            between().await;
        }
        match page["next"].as_str() {
            Some(next) => after = next.to_string(),
            None => break,
        }
    }
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_list_api_pages_filters_and_refuses_with_reasons() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("l.db").display());
    let locks = SqlLocks::connect(&url).await.unwrap();
    let mut fences = std::collections::HashMap::new();
    for i in 0..250 {
        let name = format!("{}/lock-{i:03}", if i % 5 == 0 { "billing" } else { "jobs" });
        fences.insert(name.clone(), take(&locks, &name).await);
    }
    let spec = StoreSpec::Sql { url: url.clone() };
    let hub = HubHandle::spawn(F, "sqlite", spec.open().unwrap());
    let audit = AuditLog::open(&format!("sqlite:{}", dir.path().join("audit.db").display()))
        .await
        .unwrap();
    let (_stop, stop_rx) = tokio::sync::watch::channel(false);
    let state = AppState::new(
        Fleets::new(vec![hub.clone()]),
        "target/site".into(),
        stop_rx.clone(),
        audit.clone(),
        Auth::new(None, audit),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(lockscope::serve(listener, state, stop_rx, Duration::from_secs(1)));
    for _ in 0..200 {
        if hub.summary().counts.held == 250 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(hub.summary().counts.held, 250, "the fleet shows the 250 locks");

    // docs/api.md: "The cursor names the last row's place in the order (its
    // sort key and name), so a page never skips or repeats a lock because
    // others were taken or released meanwhile": after the
    // first page, one of its locks is released and a new one taken; every lock
    // held throughout is still listed exactly once (an offset would skip one).
    let first = json(addr, &format!("/api/v1/fleets/{F}/locks?limit=100")).await;
    let gone = names(&first)[10..]
        .iter()
        .find(|n| n.starts_with("jobs/"))
        .unwrap()
        .clone();
    let mut changed = false;
    let seen = page_all(addr, "", async || {
        if !changed {
            assert!(locks.release(&gone, fences[&gone]).await.unwrap());
            take(&locks, "late/lock").await;
            tokio::time::sleep(Duration::from_millis(1_500)).await;
            changed = true;
        }
    })
    .await;
    let unique: HashSet<&String> = seen.iter().collect();
    assert_eq!(unique.len(), seen.len(), "no lock listed twice");
    for name in fences.keys().filter(|n| **n != gone) {
        assert!(unique.contains(name), "{name} held throughout but never listed");
    }

    // The same in a reversed order by name, with no change between pages.
    let seen = page_all(addr, "sort=name&reversed=1", async || {}).await;
    let mut want: Vec<String> = fences.keys().filter(|n| **n != gone).cloned().collect();
    want.push("late/lock".into());
    want.sort();
    want.reverse();
    assert_eq!(seen, want, "every lock once, by name from the end");

    // The page's filters: a prefix, a state, a substring.
    let billing = json(addr, &format!("/api/v1/fleets/{F}/locks?prefix=billing/&limit=1000")).await;
    assert_eq!(names(&billing).len(), 50, "{billing}");
    assert!(billing["next"].is_null(), "the last page says so: {billing}");
    // The test's locks have no live session: all in one state, not healthy.
    let state = hub.summary().counts.worst();
    let q = format!("contains=lock-24&state={}", state.as_str());
    let some = json(addr, &format!("/api/v1/fleets/{F}/locks?{q}")).await;
    assert_eq!(names(&some).len(), 10, "lock-240..249: {some}");
    let none = json(
        addr,
        &format!("/api/v1/fleets/{F}/locks?contains=lock-24&state=healthy"),
    )
    .await;
    assert_eq!(names(&none).len(), 0, "{state:?} locks are not healthy: {none}");

    // Bad input: a 400 that says why (docs/api.md: "`limit` rows (1 to 1000,
    // default 100)"; "Pages go by cursor, never by offset").
    for (query, why) in [
        ("limit=1001", "limit=1001: ask for 1 to 1000 rows"),
        ("limit=0", "ask for 1 to 1000"),
        ("sort=colour", "sort=colour: not a sort key"),
        ("state=asleep", "not a state"),
        ("after=nonsense", "not a cursor"),
        ("offset=5", "pages by cursor"),
    ] {
        let (status, body) = get(addr, &format!("/api/v1/fleets/{F}/locks?{query}"), "*/*").await;
        assert_eq!(status, 400, "{query}: {body}");
        assert!(body.contains(why), "{query}: {body} should say {why:?}");
    }
    let next = first["next"].as_str().unwrap();
    let (status, body) = get(addr, &format!("/api/v1/fleets/{F}/locks?sort=name&after={next}"), "").await;
    assert!(status == 400 && body.contains("for sort=severity"), "{status} {body}");
    let (status, body) = get(addr, "/api/v1/fleets/nope/locks", "").await;
    assert_eq!(status, 404, "{body}");

    // NDJSON: each lock a line, then the line with next and as_of.
    let (status, body) = get(
        addr,
        &format!("/api/v1/fleets/{F}/locks?limit=7"),
        "application/x-ndjson",
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let lines: Vec<Value> = body.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 8, "{body}");
    assert!(lines[..7].iter().all(|l| l["entry"]["name"].is_string()), "{body}");
    assert!(lines[7]["next"].is_string() && lines[7]["as_of"].is_i64() && lines[7]["live"] == true);

    // Sessions page the same way, by id.
    let sql = spec.connect().await.unwrap();
    let mut sessions = Vec::new();
    for i in 0..3 {
        sessions.push(
            Session::open(sql.clone(), SessionConfig::new(format!("svc-{i}")))
                .await
                .unwrap(),
        );
    }
    let mut ids = HashSet::new();
    for _ in 0..100 {
        let page = json(addr, &format!("/api/v1/fleets/{F}/sessions")).await;
        if page["rows"].as_array().unwrap().len() >= 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut after = String::new();
    loop {
        let page = json(addr, &format!("/api/v1/fleets/{F}/sessions?limit=2&after={after}")).await;
        let rows = page["rows"].as_array().unwrap();
        assert!(rows.len() <= 2, "{page}");
        for r in rows {
            assert!(
                ids.insert(r["id"].as_str().unwrap().to_string()),
                "listed twice: {page}"
            );
        }
        match page["next"].as_str() {
            Some(next) => after = next.to_string(),
            None => break,
        }
    }
    for s in &sessions {
        assert!(ids.contains(s.id()), "session {} listed", s.id());
    }
    let (status, body) = get(addr, &format!("/api/v1/fleets/{F}/sessions?limit=5000"), "").await;
    assert!(status == 400 && body.contains("1 to 1000"), "{status} {body}");

    cli(addr, &gone).await;

    // A page larger than one window of the hub (500 rows) is read in turns.
    for i in 0..300 {
        take(&locks, &format!("bulk/{i:03}")).await;
    }
    for _ in 0..200 {
        if hub.summary().counts.held == 550 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let all = json(addr, &format!("/api/v1/fleets/{F}/locks?limit=1000")).await;
    let unique: HashSet<String> = names(&all).into_iter().collect();
    assert_eq!((names(&all).len(), unique.len()), (550, 550), "{}", all["next"]);
    assert!(all["next"].is_null());
    let big = json(addr, &format!("/api/v1/fleets/{F}/locks?limit=501&sort=name")).await;
    assert_eq!(names(&big).len(), 501);
    let next = big["next"].as_str().expect("49 rows follow");
    let rest = json(
        addr,
        &format!("/api/v1/fleets/{F}/locks?limit=501&sort=name&after={next}"),
    )
    .await;
    assert_eq!(names(&rest).len(), 49, "{}", rest["next"]);
    assert!(rest["next"].is_null());
}

/// Runs the real `lockscope` binary: exit code, stdout, stderr.
pub(crate) fn lockscope(args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_lockscope"))
        .args(args)
        .env_remove("RUST_BACKTRACE")
        .env_remove("LOCKSCOPE_TOKEN")
        .env("LOCKSCOPE_LOG", "warn")
        .output()
        .unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code().unwrap(), text(&out.stdout), text(&out.stderr))
}

/// The read commands against the server at `addr` (the 250 locks less `gone`,
/// and `late/lock`). docs/operations.md: "Exit codes: 0 found, 1 not found (no
/// such lock or fleet), 2 usage (a bad flag, or a query the server refuses
/// with 400 …), 3 unreachable"; "the table: fits 80 columns, ages relative".
async fn cli(addr: std::net::SocketAddr, gone: &str) {
    let server = format!("http://{addr}");
    let run = |args: &[&str]| {
        let mut all = vec![args[0], args[1], "--server", &server];
        all.extend(&args[2..]);
        tokio::task::block_in_place(|| lockscope(&all))
    };
    let (code, out, err) = run(&["get", "locks", "--prefix", "billing/"]);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 51, "a header and the 50 billing locks:\n{out}");
    assert!(
        lines[0].starts_with("NAME") && lines[1].starts_with("billing/lock-"),
        "{out}"
    );
    assert!(
        lines.iter().all(|l| l.chars().count() <= 80),
        "the table fits 80 columns:\n{out}"
    );
    let (code, out, err) = run(&["get", "locks", "-o", "ndjson", "--fleet", F]);
    assert_eq!(code, 0, "{err}");
    let names: HashSet<String> = out
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["entry"]["name"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(
        (out.lines().count(), names.len()),
        (250, 250),
        "every lock once, over pages"
    );
    assert!(!names.contains(gone) && names.contains("late/lock"));
    let (code, out, err) = run(&["get", "locks", "-o", "wide", "jobs/lock-001"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.lines().nth(1).is_some_and(|l| l.starts_with("jobs/lock-001 ")),
        "{out}"
    );
    let (code, out, err) = run(&["describe", "lock", "jobs/lock-001"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("Name:        jobs/lock-001") && out.contains("Acquired:"),
        "{out}"
    );
    assert!(out.contains(" ago"), "times relative by default: {out}");
    let (code, out, err) = run(&["get", "sessions"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("ID"), "{out}");

    let (code, _, err) = run(&["describe", "lock", "no/such"]);
    assert_eq!(code, 1, "not found: {err}");
    let (code, _, err) = run(&["get", "locks", "--fleet", "nope"]);
    assert_eq!(code, 1, "no such fleet: {err}");
    let (code, _, err) = run(&["get", "locks", "--state", "asleep"]);
    assert!(code == 2 && err.contains("not a state"), "usage: {code} {err}");
    let (code, _, err) = tokio::task::block_in_place(|| lockscope(&["get", "locks", "--server", "http://127.0.0.1:1"]));
    assert_eq!(code, 3, "unreachable: {err}");
}
