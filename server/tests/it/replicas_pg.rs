//! Two real `lockscope` replicas of one etcd fleet sharing one PostgreSQL
//! database for the lock history, the audit log and the browsers' sign-in
//! sessions, with authentication and the unlocker on (docs/operations.md,
//! "Several replicas"):
//!
//! - both serve the same history and the same audit log, whichever replica
//!   saw or did what is in them;
//! - a browser signed in (the real form and cookie) on one replica is signed
//!   in on the other, and signing out on one ends the session on both;
//! - exactly one replica says it is the active unlocker (`/metrics`); stopped
//!   with SIGTERM it hands the role over, and the other releases the next
//!   expired lock; killed (SIGKILL), the role moves within its lease.
//!
//! One etcd and one PostgreSQL for the whole file (one test).

use std::path::Path;
use std::time::{Duration, Instant};

use lockscope::auth::new_token;
use lockscope_model::admin::Role;
use lockscope_store::client::{LockOptions, Session, SessionConfig};
use lockscope_store::protocol::{Attempt, LockStore};
use lockscope_store::spec::{AnyLocks, StoreSpec};
use lockscope_store::testing::{self, EtcdServer, PgServer};

use crate::binary::Binary;

const PREFIX: &str = "/replicas-pg/";
const FLEET: &str = "etcd";
/// docs/operations.md, "Several replicas".
const SIGN_INS: &str =
    "a browser signed in on one replica is signed in on every replica, and signing out on one signs it out on all";
const HAND_OVER_RULE: &str = "On SIGTERM the active replica resigns and another takes the role at once; killed or cut off, its role moves within `[unlocker] lease_secs`";
const OPERATIONS: &str = include_str!("../../../docs/operations.md");

/// `--unlocker-lease-secs`.
const LEASE_SECS: u64 = 2;
/// docs/operations.md, "The unlocker": "when renewals stop, another replica
/// takes over within `lease` (plus up to a second of polling)"; a second more
/// for a loaded machine.
const HAND_OVER: Duration = Duration::from_secs(LEASE_SECS + 2);

/// What the replicas share: the lock store, the database, the config file.
struct Shared {
    etcd: String,
    pg: String,
    config: String,
    token: String,
}

impl Shared {
    /// Replica `name` in its own directory under `dir` (its audit spool is
    /// its own: docs/operations.md, "give each replica its own directory").
    async fn replica(&self, name: &str, dir: &Path) -> Binary {
        let home = dir.join(name);
        std::fs::create_dir_all(&home).unwrap();
        let args = [
            "--etcd",
            &self.etcd,
            "--prefix",
            PREFIX,
            "--fleet",
            FLEET,
            "--unlocker",
            "on",
            "--unlocker-lease-secs",
            "2",
            "--unlocker-grace-secs",
            "1",
            "--replica",
            name,
            "--audit",
            &self.pg,
            "--history",
            &self.pg,
            "--config",
            &self.config,
        ];
        Binary::start(&args.map(String::from), &home).await
    }

    fn bearer(&self) -> String {
        format!("Bearer {}", self.token)
    }
}

/// `GET path` as the admin's API token: 200's body.
async fn api(s: &Shared, r: &Binary, path: &str) -> String {
    let (status, _, body) = r.send("GET", path, &[("authorization", &s.bearer())], "").await;
    assert_eq!(status, 200, "GET {path}: {body}");
    body
}

/// Whether `r` says (`/metrics`) it runs the fleet's unlocker `on` and is
/// its active unlocker.
async fn active(s: &Shared, r: &Binary) -> bool {
    let m = api(s, r, "/metrics").await;
    m.contains(&format!("lockscope_unlocker_mode{{fleet=\"{FLEET}\",mode=\"on\"}} 1\n"))
        && m.contains(&format!("lockscope_unlocker_active{{fleet=\"{FLEET}\"}} 1\n"))
}

/// Reads `path` on both replicas until they answer alike, naming each of
/// `needs`: that answer.
async fn same(s: &Shared, one: &Binary, other: &Binary, path: &str, needs: &[&str]) -> serde_json::Value {
    let what = format!("both replicas serve the same {path}");
    until(&what, Duration::from_secs(15), async || {
        let (x, y) = (api(s, one, path).await, api(s, other, path).await);
        (x == y && needs.iter().all(|n| x.contains(n))).then(|| serde_json::from_str(&x).unwrap())
    })
    .await
}

/// Polls `check` every 100 ms until it gives a value, for `limit` at most.
async fn until<T>(what: &str, limit: Duration, mut check: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(Instant::now() < deadline, "{what}: not within {limit:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A dead holder's lock (no session) expiring in 1 s: the active unlocker's
/// to release 1 s (grace) later.
async fn dead_lock(store: &AnyLocks, name: &str) {
    let now = lockscope_store::now_ms();
    let mut rec = testing::record(&format!("dead-{name}"), "replicas test", now);
    rec.auto_unlock_at = now + 1_000;
    let got = store.try_acquire(name, &rec).await.unwrap();
    assert!(matches!(got, Attempt::Acquired { .. }), "{name}");
}

/// Waits until the audit log, read through `r`, has the unlocker's release of
/// `lock`, and returns who made it.
async fn released_by(s: &Shared, r: &Binary, lock: &str) -> String {
    let limit = Duration::from_secs(15);
    until(&format!("the unlocker releases {lock}"), limit, async || {
        let log: serde_json::Value = serde_json::from_str(&api(s, r, "/api/v1/audit?action=release").await).unwrap();
        let done = log
            .as_array()?
            .iter()
            .find(|e| e["target"] == lock && e["outcome"] == "done")?;
        Some(done["actor"].as_str()?.to_string())
    })
    .await
}

/// A browser signs in on `r` with the sign-in form: its session cookie.
async fn sign_in(s: &Shared, r: &Binary) -> String {
    let (_, headers, _) = r.send("GET", "/signin", &[], "").await;
    let csrf = cookie(&headers, "lockscope_csrf").expect("the sign-in page sets a CSRF cookie");
    let form = format!("token={}&next=%2F&csrf={csrf}", s.token);
    let jar = format!("lockscope_csrf={csrf}");
    let form_type = ("content-type", "application/x-www-form-urlencoded");
    let (status, headers, body) = r.send("POST", "/signin", &[form_type, ("cookie", &jar)], &form).await;
    assert_eq!(status, 303, "sign-in: {body}");
    let session = cookie(&headers, "lockscope_session").expect("a session cookie");
    format!("lockscope_session={session}")
}

/// The sessions page for the browser with `cookies`: its CSRF token when
/// signed in, `None` when sent to sign in.
async fn signed_in(r: &Binary, cookies: &str) -> Option<String> {
    let (status, headers, body) = r.send("GET", "/sessions?fleet=etcd", &[("cookie", cookies)], "").await;
    if status == 303 {
        let to = headers["location"].to_str().unwrap();
        assert!(to.starts_with("/signin"), "{to}");
        return None;
    }
    assert_eq!(status, 200, "{body}");
    let csrf = body.split(r#"name="csrf" value=""#).nth(1)?.split('"').next()?;
    Some(csrf.to_string())
}

fn cookie(headers: &hyper::HeaderMap, name: &str) -> Option<String> {
    headers.get_all("set-cookie").iter().find_map(|v| {
        let v = v.to_str().ok()?.strip_prefix(name)?.strip_prefix('=')?;
        Some(v.split(';').next()?.to_string())
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_share_history_audit_sign_ins_and_one_unlocker() {
    let (etcd, pg) = tokio::join!(EtcdServer::start(), PgServer::start());
    let dir = tempfile::tempdir().unwrap();
    let (token, entry) = new_token("alice", Role::Admin);
    let config = dir.path().join("lockscope.toml");
    std::fs::write(&config, entry).unwrap();
    let s = Shared {
        etcd: etcd.endpoint(),
        pg: pg.url(),
        config: config.display().to_string(),
        token,
    };
    let (a, b) = tokio::join!(s.replica("a", dir.path()), s.replica("b", dir.path()));
    let spec = StoreSpec::Etcd {
        endpoints: vec![s.etcd.clone()],
        prefix: Some(PREFIX.into()),
    };
    let store = spec.connect().await.unwrap();

    // Exactly one replica is the active unlocker.
    let a_active = until("a replica elected", Duration::from_secs(20), async || {
        match (active(&s, &a).await, active(&s, &b).await) {
            (true, true) => panic!("two replicas say they are the active unlocker"),
            (false, false) => None,
            (a_active, _) => Some(a_active),
        }
    })
    .await;
    let (leader, follower) = if a_active { (a, b) } else { (b, a) };
    let (leader_name, follower_name) = if a_active { ("a", "b") } else { ("b", "a") };

    // Locks taken and released by a worker, one force-released through the
    // follower's API, one left by a dead holder for the unlocker.
    let worker = Session::open(store.clone(), SessionConfig::new("replicas-test"))
        .await
        .unwrap();
    let opts = LockOptions::new("replicas test", Duration::from_secs(60));
    let held = worker.lock("jobs/done", opts.clone()).await.unwrap();
    assert!(held.unlock().await.unwrap());
    let forced = worker.lock("jobs/forced", opts).await.unwrap();
    let owner = until("the follower shows the lock", Duration::from_secs(10), async || {
        let path = "/api/v1/fleets/etcd/locks/jobs%2Fforced";
        let (status, _, body) = follower.send("GET", path, &[("authorization", &s.bearer())], "").await;
        let v: serde_json::Value = serde_json::from_str(&body).ok().filter(|_| status == 200)?;
        Some(v["entry"]["body"]["owner"].to_string())
    })
    .await;
    let release = format!(
        r#"{{"fence": {}, "owner": {owner}, "reason": "replicas test"}}"#,
        forced.fence()
    );
    let (status, _, body) = follower
        .send(
            "POST",
            "/api/v1/fleets/etcd/locks/jobs%2Fforced/release",
            &[("authorization", &s.bearer()), ("content-type", "application/json")],
            &release,
        )
        .await;
    assert_eq!(status, 200, "force-release through the follower: {body}");
    dead_lock(&store, "jobs/dead-1").await;
    assert_eq!(
        released_by(&s, &follower, "jobs/dead-1").await,
        format!("unlocker@{leader_name}")
    );

    // The same history and the same audit log on both.
    let history = "/api/v1/fleets/etcd/history?lock=jobs/*&kind=acquired,released,force_released,auto_released";
    let kinds = [
        "\"acquired\"",
        "\"released\"",
        "\"force_released\"",
        "\"auto_released\"",
    ];
    let events = same(&s, &leader, &follower, history, &kinds).await;
    for (lock, kind) in [
        ("jobs/done", "released"),
        ("jobs/forced", "force_released"),
        ("jobs/dead-1", "auto_released"),
    ] {
        let found = events
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["lock"] == lock && e["kind"] == kind);
        assert!(found, "{lock} {kind} in {events}");
    }
    let audit = same(&s, &leader, &follower, "/api/v1/audit", &["jobs/forced", "jobs/dead-1"]).await;
    let log = audit.as_array().unwrap();
    assert!(
        log.iter()
            .any(|e| e["target"] == "jobs/forced" && e["actor"] == "alice"),
        "{audit}"
    );

    let docs = OPERATIONS.split_whitespace().collect::<Vec<_>>().join(" ");
    for rule in [SIGN_INS, HAND_OVER_RULE] {
        assert!(docs.contains(rule), "docs/operations.md says: {rule}");
    }
    let browser = sign_in(&s, &leader).await;
    let csrf = signed_in(&follower, &browser).await.expect(SIGN_INS);
    assert_eq!(signed_in(&leader, &browser).await.as_deref(), Some(csrf.as_str()));
    let form = ("content-type", "application/x-www-form-urlencoded");
    let (status, _, body) = follower
        .send(
            "POST",
            "/signout",
            &[form, ("cookie", &browser)],
            &format!("csrf={csrf}"),
        )
        .await;
    assert_eq!(status, 303, "sign-out: {body}");
    assert_eq!(signed_in(&leader, &browser).await, None, "{SIGN_INS}");
    assert_eq!(signed_in(&follower, &browser).await, None, "{SIGN_INS}");

    // SIGTERM: the leader resigns; the follower takes the role and releases.
    let status = leader.terminate(Duration::from_secs(15)).await;
    assert!(status.success(), "SIGTERM: exit {status}");
    until(HAND_OVER_RULE, HAND_OVER, async || {
        active(&s, &follower).await.then_some(())
    })
    .await;
    dead_lock(&store, "jobs/dead-2").await;
    assert_eq!(
        released_by(&s, &follower, "jobs/dead-2").await,
        format!("unlocker@{follower_name}")
    );

    // SIGKILL: the stopped replica comes back, the active one is killed (no
    // resignation): the role moves within its lease.
    let back = s.replica(leader_name, dir.path()).await;
    assert!(
        !active(&s, &back).await,
        "the role stays where it is while its holder lives"
    );
    follower.kill();
    until(HAND_OVER_RULE, HAND_OVER, async || {
        active(&s, &back).await.then_some(())
    })
    .await;
    dead_lock(&store, "jobs/dead-3").await;
    assert_eq!(
        released_by(&s, &back, "jobs/dead-3").await,
        format!("unlocker@{leader_name}")
    );
    drop(worker);
}
