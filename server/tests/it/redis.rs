//! A `redis://` fleet through the whole server: a lock held by redis-py's
//! `Lock` answers `GET /api/v1/fleets/{fleet}/locks/{name}` (token, TTL,
//! fence derived from the token) within 1 s, the API's release with a stale
//! fence is a 409 with the current holder, the one with the fence shown
//! deletes exactly that token's key, audited and credited in the history, a
//! blacklist is refused with the reason, and the lock leaves the API within
//! 1 s of its release.

use std::time::{Duration, Instant};

use lockscope::remember::history::History;
use lockscope_model::admin::AuditQuery;
use lockscope_model::history::{HistoryQuery, Kind};
use lockscope_store::spec::StoreSpec;
use lockscope_store::testing::{PyLock, RedisServer, Redisson};
use serde_json::Value;

use super::foreign::{call, lock_until, page, serve_recording};

const F: &str = "cache";
const LOCK: &str = "/api/v1/fleets/cache/locks/jobs%3Anightly";

/// The history's end of the hold with `fence` (5 s at most).
async fn history_end(history: &History, fence: i64) -> lockscope_model::history::HistoryEvent {
    for _ in 0..100 {
        let events = history
            .query(&HistoryQuery {
                fleet: F.into(),
                limit: Some(1000),
                ..HistoryQuery::default()
            })
            .await
            .unwrap();
        if let Some(e) = events
            .into_iter()
            .find(|e| e.kind.ends_hold() && e.fence == Some(fence))
        {
            return e;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the release of fence {fence} is not in the history");
}

#[tokio::test]
async fn a_redis_py_lock_through_the_api() {
    let server = RedisServer::start().await;
    let spec = StoreSpec::parse(&format!("{}?match=jobs:*", server.url())).unwrap();
    let srv = serve_recording(F, "redis locks under test", &spec).await;
    let (addr, audit, history) = (srv.addr, &srv.audit, srv.history());
    let (status, _, _) = lock_until(addr, LOCK, |s, _| s == 404).await;
    assert_eq!(status, 404, "not held yet");

    // docs/operations.md: "A redis-py lock is shown within 1 s of its acquisition and is gone
    // within 1 s of its release".
    let first = PyLock::acquire(&server, 0, "jobs:nightly", Duration::from_secs(30));
    let (_, lock, took) = lock_until(addr, LOCK, |s, b| {
        s == 200 && b["entry"]["body"]["key"]["token"] == first.token.as_str()
    })
    .await;
    assert!(took < Duration::from_secs(1), "shown after {took:?}");
    let entry = &lock["entry"];
    assert_eq!(entry["body"]["kind"], "foreign", "{lock}");
    assert!(
        entry["body"]["key"]["ttl_ms"].as_i64().is_some_and(|t| t > 20_000),
        "{lock}"
    );
    assert_eq!(lock["waiters"], serde_json::json!([]), "this layout has no waiters");
    let stale = entry["fence"].as_i64().unwrap();
    assert_eq!(stale, lockscope_store::redis_set::fence_of(first.token.as_bytes()));

    assert!(first.release());
    let second = PyLock::acquire(&server, 0, "jobs:nightly", Duration::from_secs(30));
    let (_, lock, _) = lock_until(addr, LOCK, |s, b| {
        s == 200 && b["entry"]["body"]["key"]["token"] == second.token.as_str()
    })
    .await;
    let fence2 = lock["entry"]["fence"].as_i64().unwrap();

    // The page shows it as it shows lockscope's own: the token, the TTL, and
    // that this layout keeps no waiters and no sessions.
    let html = page(addr, "/lock?fleet=cache&name=jobs%3Anightly").await;
    for said in [
        second.token.as_str(),
        "detail-ttl",
        "this layout has none",
        "none (Redis has no sessions)",
    ] {
        assert!(html.contains(said), "{said:?} not on the page");
    }

    // A stale fence: 409 with the current holder, nothing deleted.
    let release = |fence: i64| format!(r#"{{"fence": {fence}, "owner": null, "reason": "INC-2: stuck job"}}"#);
    let path = format!("{LOCK}/release");
    let (status, body) = call(addr, "POST", &path, &release(stale)).await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["outcome"], "changed", "{body}");
    assert_eq!(body["current"]["fence"], fence2, "{body}");

    // The fence shown: that token's key deleted, gone from the API within 1 s.
    let t0 = Instant::now();
    let (status, body) = call(addr, "POST", &path, &release(fence2)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["released"], true, "{body}");
    lock_until(addr, LOCK, |s, _| s == 404).await;
    assert!(
        t0.elapsed() < Duration::from_secs(1),
        "dropped after {:?}",
        t0.elapsed()
    );
    assert!(!second.release(), "its holder no longer owns it");

    // Audited, and credited to the operator in the history.
    let audited = audit.query(&AuditQuery::default()).await.unwrap();
    assert!(
        audited
            .iter()
            .any(|a| a.fence == Some(fence2) && a.outcome == Some(lockscope_model::admin::Outcome::Done)),
        "{audited:#?}"
    );
    let end = history_end(&history, fence2).await;

    // docs/operations.md: "**Blacklisting** is refused with the reason: Redis has no sessions
    // to end" — a 4xx that says so, audited as refused.
    let (status, body) = call(
        addr,
        "POST",
        &format!("/api/v1/fleets/{F}/sessions/anyone/blacklist"),
        r#"{"reason": "INC-2"}"#,
    )
    .await;
    assert!((400..500).contains(&status), "{status} {body}");
    assert!(body.to_string().contains("Redis has no sessions to end"), "{body}");
    let audited = audit.query(&AuditQuery::default()).await.unwrap();
    assert!(
        audited
            .iter()
            .any(|a| a.action == Some(lockscope_model::admin::Action::Blacklist)
                && a.outcome == Some(lockscope_model::admin::Outcome::Refused)
                && a.detail.contains("Redis has no sessions to end")),
        "{audited:#?}"
    );
    assert_eq!(
        (end.kind, end.actor.as_deref()),
        (Kind::ForceReleased, Some("anonymous")),
        "{end:#?}"
    );
}

/// A Redisson fair lock (written by Redisson's own Lua) through the whole
/// server: the API shows its holder (client uuid as the session, thread,
/// count, TTL) and its queued waiter; the page shows the thread, the count
/// and the queue; a stale fence is a 409 with the current holder; the fence
/// shown releases exactly that holder (the hash is gone, the waiter then
/// takes it by Redisson's script), audited and in the history.
#[tokio::test]
async fn a_redisson_lock_through_the_api() {
    const RS: &str = "/api/v1/fleets/cache/locks/rs%3Aorders";
    let server = RedisServer::start().await;
    let spec = StoreSpec::parse(&format!("{}?match=rs:*", server.url())).unwrap();
    let srv = serve_recording(F, "redis locks under test", &spec).await;
    let (addr, audit, history) = (srv.addr, &srv.audit, srv.history());
    let lease = Duration::from_secs(30);
    let mut a = Redisson::connect(&server, "6f1bc9e2-5a70-4b7e-9d1e-0c2f3a4b5c6d").await;
    let mut b = Redisson::connect(&server, "0d9e8f7a-1111-4222-8333-944455556666").await;
    assert_eq!(a.fair_lock("rs:orders", 57, lease).await, None);
    assert_eq!(a.fair_lock("rs:orders", 57, lease).await, None, "re-entered");
    assert!(b.fair_lock("rs:orders", 7, lease).await.is_some(), "queued");
    let (_, lock, took) = lock_until(addr, RS, |s, b| {
        s == 200 && !b["waiters"].as_array().is_none_or(|w| w.is_empty())
    })
    .await;
    assert!(took < Duration::from_secs(1), "shown after {took:?}");
    let body = &lock["entry"]["body"];
    assert_eq!(body["session"], a.uuid.as_str(), "{lock}");
    assert_eq!(body["key"]["token"], a.field(57).as_str(), "{lock}");
    assert_eq!(body["detail"]["redisson"]["thread"], "57", "{lock}");
    assert_eq!(body["detail"]["redisson"]["count"], 2, "{lock}");
    assert_eq!(
        body["detail"]["redisson"]["queue"][0]["id"],
        b.field(7).as_str(),
        "{lock}"
    );
    assert!(lock["waiters"].to_string().contains(&b.uuid), "{lock}");
    let fence = lock["entry"]["fence"].as_i64().unwrap();

    let html = page(addr, "/lock?fleet=cache&name=rs%3Aorders").await;
    for said in [
        "detail-redisson-count",
        "2 time(s)",
        &b.field(7),
        "Redis has no sessions to end",
    ] {
        assert!(html.contains(said), "{said:?} not on the page");
    }

    let release = |fence: i64| format!(r#"{{"fence": {fence}, "owner": null, "reason": "INC-3: stuck"}}"#);
    let path = format!("{RS}/release");
    let stale = lockscope_store::redis_set::fence_of(b.field(7).as_bytes());
    let (status, body) = call(addr, "POST", &path, &release(stale)).await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["current"]["fence"], fence, "the current holder: {body}");

    let (status, body) = call(addr, "POST", &path, &release(fence)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["released"], true, "{body}");
    assert_eq!(b.fair_lock("rs:orders", 7, lease).await, None, "the waiter takes it");
    lock_until(addr, RS, |s, body| {
        s == 200 && body["entry"]["body"]["key"]["token"] == b.field(7).as_str()
    })
    .await;

    let audited = audit.query(&AuditQuery::default()).await.unwrap();
    assert!(
        audited
            .iter()
            .any(|a| a.fence == Some(fence) && a.outcome == Some(lockscope_model::admin::Outcome::Done)),
        "{audited:#?}"
    );
    let end = history_end(&history, fence).await;
    assert_eq!(
        (end.kind, end.actor.as_deref()),
        (Kind::ForceReleased, Some("anonymous")),
        "{end:#?}"
    );
}

/// A Redlock fleet over three masters through the whole server: a lock on
/// all three reads "3 of 3"; with one master killed its page says "2 of 3"
/// and that master is unreachable; two tokens on different masters are shown
/// split with the reason; a stale fence is a 409 with the current holder, the
/// fence shown deletes the token's key where it still matches.
#[tokio::test]
async fn a_redlock_lock_through_the_api_and_page() {
    const RL: &str = "/api/v1/fleets/cache/locks/rl%3Ajob";
    let mut masters = vec![
        RedisServer::start().await,
        RedisServer::start().await,
        RedisServer::start().await,
    ];
    let hosts: Vec<String> = masters.iter().map(|m| format!("127.0.0.1:{}", m.port())).collect();
    let spec = StoreSpec::parse(&format!("redlock+redis://{}?match=rl:*", hosts.join(","))).unwrap();
    let srv = serve_recording(F, "redis locks under test", &spec).await;
    let addr = srv.addr;
    let ttl = Duration::from_secs(30);
    for m in &masters {
        assert!(m.set_nx("rl:job", "tok-A", ttl).await);
    }
    let (_, lock, _) = lock_until(addr, RL, |s, b| {
        s == 200 && b["entry"]["body"]["detail"]["redlock"]["agree"] == 3
    })
    .await;
    let fence = lock["entry"]["fence"].as_i64().unwrap();

    masters[2].stop();
    lock_until(addr, RL, |s, b| {
        s == 200 && b["entry"]["body"]["detail"]["redlock"]["agree"] == 2
    })
    .await;
    let html = page(addr, "/lock?fleet=cache&name=rl%3Ajob").await;
    for said in [
        "2 of 3 (quorum 2)",
        &format!("{}: unreachable", hosts[2]),
        "Redis has no sessions to end",
    ] {
        assert!(html.contains(said), "{said:?} not on the page");
    }

    assert!(masters[0].set_nx("rl:split", "tok-X", ttl).await);
    assert!(masters[1].set_nx("rl:split", "tok-Y", ttl).await);
    // Both tokens seen: between the two writes the key is "held on 1 of 3
    // masters only", split too but for another reason.
    lock_until(addr, "/api/v1/fleets/cache/locks/rl%3Asplit", |s, b| {
        s == 200
            && b["entry"]["body"]["detail"]["redlock"]["split"]
                .as_str()
                .is_some_and(|why| why.contains("tok-Y"))
    })
    .await;
    let html = page(addr, "/lock?fleet=cache&name=rl%3Asplit").await;
    assert!(
        html.contains("detail-redlock-split") && html.contains("tok-X on 1, tok-Y on 1"),
        "split not on the page"
    );

    let release = |fence: i64| format!(r#"{{"fence": {fence}, "owner": null, "reason": "INC-4"}}"#);
    let path = format!("{RL}/release");
    let (status, body) = call(addr, "POST", &path, &release(fence + 1)).await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["current"]["fence"], fence, "{body}");
    let (status, body) = call(addr, "POST", &path, &release(fence)).await;
    assert_eq!((status, &body["released"]), (200, &Value::Bool(true)), "{body}");
    lock_until(addr, RL, |s, _| s == 404).await;
}

/// A polled Redis fleet (`CONFIG` refused, notifications off) says when it
/// last looked, in the API and on the overview; paused (SIGSTOP: the server
/// keeps its connections but answers nothing) the page says the table is not
/// live once the last look is older than 3× the interval. docs/operations.md:
/// "when the last full read is older than 3× its interval, the page says the
/// table is not live".
#[tokio::test]
async fn a_polled_fleet_says_when_it_last_looked_and_when_that_is_too_old() {
    let server = RedisServer::start_with(&["--rename-command", "CONFIG", ""]).await;
    let spec = StoreSpec::parse(&server.url()).unwrap();
    let served = super::foreign::serve(F, "redis", &spec).await;
    let addr = served.addr;
    let polled = || async move {
        let (status, body) = call(addr, "GET", "/api/v1/fleets", "").await;
        assert_eq!(status, 200, "{body}");
        body[0]["polled"].clone()
    };
    let t0 = Instant::now();
    let first = loop {
        let p = polled().await;
        if p.is_object() {
            break p;
        }
        assert!(t0.elapsed() < Duration::from_secs(5), "never polled");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(
        (&first["how"], &first["every_ms"]),
        (&Value::from("polled"), &Value::from(1000))
    );
    // It looks again every second.
    let t0 = Instant::now();
    while polled().await["at"] == first["at"] {
        assert!(t0.elapsed() < Duration::from_secs(3), "the last look never moved");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let html = page(addr, "/").await;
    assert!(html.contains("polled every 1 s, last at"), "not on the overview");
    assert!(html.contains(r#"data-stale="false""#), "live, yet said stale");
    let detail = page(addr, "/lock?fleet=cache&name=jobs%3Anightly").await;
    assert!(
        detail.contains("detail-polled") && detail.contains("polled every 1 s, last at"),
        "not on the lock page"
    );

    // Paused: no look for over 3 s, and the page says so in words.
    let pid = server.pid().unwrap().to_string();
    assert!(std::process::Command::new("kill")
        .args(["-STOP", &pid])
        .status()
        .unwrap()
        .success());
    let t0 = Instant::now();
    let html = loop {
        let html = page(addr, "/").await;
        if html.contains(r#"data-stale="true""#) {
            break html;
        }
        assert!(t0.elapsed() < Duration::from_secs(8), "never said not live");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let _ = std::process::Command::new("kill").args(["-CONT", &pid]).status();
    assert!(
        html.contains("not live: polled every 1 s, but last at"),
        "not said in words"
    );
    let detail = page(addr, "/lock?fleet=cache&name=jobs%3Anightly").await;
    assert!(
        detail.contains("not live: polled every 1 s, but last at"),
        "not said on the lock page"
    );
    assert!(t0.elapsed() >= Duration::from_secs(2), "said stale too early");
}

/// docs/operations.md, "Redisson locks": "A queue is read up to its first
/// 1000 waiters (the fleet's `queue=N`, default 1000 …): past that, the page
/// says "more than N waiters: only the first N in the queue are read and
/// shown" and the API's `detail.redisson.queue_truncated_at` is N." (Here the
/// default; store/tests/it/redis.rs sets `queue=1`.)
#[tokio::test]
async fn a_fair_lock_queue_is_read_up_to_its_bound() {
    const CROWD: &str = "/api/v1/fleets/cache/locks/rs%3Acrowd";
    let server = RedisServer::start().await;
    let spec = StoreSpec::parse(&format!("{}?match=rs:*", server.url())).unwrap();
    let served = super::foreign::serve(F, "redis", &spec).await;
    let addr = served.addr;
    let mut a = Redisson::connect(&server, "6f1bc9e2-5a70-4b7e-9d1e-0c2f3a4b5c6d").await;
    assert_eq!(a.fair_lock("rs:crowd", 1, Duration::from_secs(30)).await, None);
    // 1001 queued threads, each with its deadline, as Redisson queues them.
    const PREFIX: &str = "0d9e8f7a-1111-4222-8333-944455556666:";
    let cli = |args: &[&str]| {
        let out = std::process::Command::new("redis-cli")
            .args(["-p", &server.port().to_string()])
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "redis-cli {args:?}");
    };
    let fill = format!(
        "for i = 0, 1000 do local id = '{PREFIX}' .. i; redis.call('rpush', KEYS[1], id); \
         redis.call('zadd', KEYS[2], 4000000000000 + i, id) end"
    );
    cli(&[
        "EVAL",
        &fill,
        "2",
        "redisson_lock_queue:{rs:crowd}",
        "redisson_lock_timeout:{rs:crowd}",
    ]);
    let (_, lock, _) = lock_until(addr, CROWD, |s, b| {
        s == 200 && b["entry"]["body"]["detail"]["redisson"]["queue_truncated_at"] == 1000
    })
    .await;
    let queue = lock["entry"]["body"]["detail"]["redisson"]["queue"].as_array().unwrap();
    assert_eq!(queue.len(), 1000, "the first 1000 shown");
    assert_eq!(queue[999]["id"], format!("{PREFIX}999"));
    assert_eq!(queue[999]["deadline"], 4_000_000_000_999i64, "its deadline read too");
    let html = page(addr, "/lock?fleet=cache&name=rs%3Acrowd").await;
    assert!(
        html.contains("more than 1000 waiters: only the first 1000 in the queue are read and shown"),
        "not said on the page"
    );
    // At the bound exactly, the whole queue: nothing said.
    cli(&["RPOP", "redisson_lock_queue:{rs:crowd}"]);
    lock_until(addr, CROWD, |s, b| {
        s == 200
            && b["entry"]["body"]["detail"]["redisson"]["queue_truncated_at"].is_null()
            && b["entry"]["body"]["detail"]["redisson"]["queue"]
                .as_array()
                .is_some_and(|q| q.len() == 1000)
    })
    .await;
}
