//! HTTP-level fuzzing of the real router, in process, against a real SQLite lock
//! store and audit log: generated requests to every route (pages, forms, the
//! JSON API, static files, `/ws`, `/metrics`) with every kind of identity
//! (none, each role's token, a bad token, `Basic`, a trusted and an untrusted
//! proxy, doubled identity headers, cookies, foreign origins and hosts), with
//! and without `[auth]`. After each request:
//!
//! - no panic and no 5xx (a panic in a handler is answered 500 by the router's
//!   catch-panic layer, so it is caught here too);
//! - a request that changed the store (a lock row's fence or owner, a blacklist
//!   row) came from an identity whose role may make that change, and the newest
//!   audit entry says `done`; every other request changed nothing.
//!
//! `LOCKSCOPE_FUZZ_CASES` (default 4000 per configuration) and
//! `LOCKSCOPE_FUZZ_SEED` (default fixed) make a longer or different campaign:
//! `LOCKSCOPE_FUZZ_CASES=500000 cargo test -p lockscope --test it -- fuzz:: --nocapture` (docs/security.md).
//! A failing case prints its seed, index and request, so it can be replayed.

use std::collections::BTreeMap;
use std::time::Duration;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::Router;
use http_body_util::BodyExt;
use lockscope::auth::{new_token, Auth};
use lockscope::live::hub::{Fleets, HubHandle};
use lockscope::remember::audit::AuditLog;
use lockscope::remember::history::History;
use lockscope::settings::{AuthFile, ProxyFile, TokenFile, UserFile};
use lockscope::web::AppState;
use lockscope_model::admin::{AuditQuery, Outcome, Role};
use lockscope_store::client::{Session, SessionConfig};
use lockscope_store::protocol::LockStore;
use lockscope_store::spec::{AnyLocks, StoreSpec};
use tokio::sync::watch;
use tower::ServiceExt;

mod generate;
use generate::{generate, Case, Claim};

/// Lock names the fixture holds: a space and a plus that encode alike in
/// form encoding, a slash, non-ASCII.
const NAMES: [&str; 5] = ["a b", "a+b", "team-a/1", "x/y", "ünï"];
const TRUSTED_PROXY: &str = "127.0.0.1";
const PROXY_HEADER: &str = "x-forwarded-user";

struct Target {
    app: Router,
    auth: bool,
    db: sqlx::SqlitePool,
    audit: AuditLog,
    store: AnyLocks,
    tokens: BTreeMap<Role, String>,
    /// Sessions a blacklist may name (they hold no lock: a session's client
    /// acting on its own locks would change the store behind the requests).
    sessions: Vec<Session<AnyLocks>>,
    _dir: tempfile::TempDir,
    _stop: watch::Sender<bool>,
}

/// What the store holds, as far as an admin action can change it.
#[derive(Debug, PartialEq, Eq)]
struct StoreState {
    locks: Vec<(String, i64, Option<String>)>,
    blacklist: Vec<(String, String)>,
}

impl Target {
    async fn start(auth: bool) -> Target {
        let dir = tempfile::tempdir().unwrap();
        let db_path = dir.path().join("locks.db");
        let spec = StoreSpec::sqlite_file(&db_path);
        let store = spec.connect().await.unwrap();
        let mut tokens = BTreeMap::new();
        let mut entries: Vec<TokenFile> = Vec::new();
        for role in [Role::Viewer, Role::Operator, Role::Admin] {
            let (token, entry) = new_token(role.as_str(), role);
            let file = lockscope::settings::FileConfig::parse(&entry).unwrap();
            entries.push(file.auth.unwrap().tokens.remove(0));
            tokens.insert(role, token);
        }
        let users = [Role::Viewer, Role::Operator, Role::Admin]
            .into_iter()
            .map(|r| UserFile {
                name: format!("proxy-{}", r.as_str()),
                role: Some(r),
                scope: BTreeMap::new(),
            })
            .collect();
        let auth_file = AuthFile {
            tokens: entries,
            proxy: Some(ProxyFile {
                header: PROXY_HEADER.into(),
                trusted: vec![TRUSTED_PROXY.parse().unwrap()],
            }),
            users,
            ..AuthFile::default()
        };
        let audit = AuditLog::open(&format!("sqlite:{}", dir.path().join("audit.db").display()))
            .await
            .unwrap();
        let history = History::open(&format!("sqlite:{}", dir.path().join("history.db").display()), None)
            .await
            .unwrap();
        let recording = Some((history.recorder("sql"), "fuzz".to_string()));
        let hub = HubHandle::spawn_recording("sql", "sqlite under fuzz", spec.open().unwrap(), recording);
        let (stop, stop_rx) = watch::channel(false);
        let state = AppState::new(
            Fleets::new(vec![hub]),
            "target/site".into(),
            stop_rx,
            audit.clone(),
            Auth::new(auth.then_some(auth_file), audit.clone()),
        )
        .with_history(history);
        let db = sqlx::SqlitePool::connect(&format!("sqlite:{}", db_path.display()))
            .await
            .unwrap();
        let mut t = Target {
            app: lockscope::web::app(state),
            auth,
            db,
            audit,
            store,
            tokens,
            sessions: Vec::new(),
            _dir: dir,
            _stop: stop,
        };
        t.refill().await;
        t
    }

    /// Takes whichever of [`NAMES`] are free (earlier cases may have released
    /// them) through the protocol's acquire step, each with a fresh owner and no
    /// client behind it, and registers one more session.
    async fn refill(&mut self) {
        for name in NAMES {
            let owner = lockscope::client::random_hex(16);
            let record = lockscope_store::testing::record(&owner, "fuzz", lockscope_store::now_ms());
            self.store.try_acquire(name, &record).await.unwrap();
        }
        let session = Session::open(self.store.clone(), SessionConfig::new("fuzz"))
            .await
            .unwrap();
        self.sessions.push(session);
        if self.sessions.len() > 4 {
            self.sessions.remove(0);
        }
    }

    async fn state(&self) -> StoreState {
        let locks = sqlx::query_as("SELECT name, fence, owner FROM lockscope_locks ORDER BY name")
            .fetch_all(&self.db)
            .await
            .unwrap();
        let blacklist = sqlx::query_as("SELECT session, record FROM lockscope_blacklist ORDER BY session")
            .fetch_all(&self.db)
            .await
            .unwrap();
        StoreState { locks, blacklist }
    }

    /// Session ids a request may name: the fixture's, and made-up ones.
    fn sessions(&self) -> Vec<String> {
        self.sessions.iter().map(|s| s.id().to_string()).collect()
    }
}

/// Whether `claim` may change the store through `case` at all: the role the
/// action needs (release and blacklist: operator; lift: admin).
fn may_change(t: &Target, c: &Case) -> bool {
    let role = if !t.auth {
        // Without authentication everyone is the anonymous admin — but only
        // through a loopback host name and not through a proxy.
        let header = |n: &str| c.headers.iter().find(|(k, _)| k == n).map(|(_, v)| v.as_str());
        let loopback = header("host") == Some("127.0.0.1:3000");
        let forwarded = [
            "forwarded",
            "x-forwarded-for",
            "x-real-ip",
            "x-forwarded-host",
            "x-forwarded-proto",
        ]
        .iter()
        .any(|h| header(h).is_some());
        if !loopback || forwarded {
            return false;
        }
        Role::Admin
    } else {
        match c.claim {
            Claim::Token(r) | Claim::ProxyUser(r) => r,
            _ => return false,
        }
    };
    let lift = c.method == "DELETE" || c.uri.starts_with("/actions/unblacklist");
    role >= if lift { Role::Admin } else { Role::Operator }
}

async fn run(auth: bool) {
    let cases: usize = std::env::var("LOCKSCOPE_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4000);
    let seed: u64 = std::env::var("LOCKSCOPE_FUZZ_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0x10c5c09e);
    let mut t = Target::start(auth).await;
    let mut rng = fastrand::Rng::with_seed(seed);
    let (mut by_status, mut changed) = (BTreeMap::<u16, usize>::new(), 0usize);
    for i in 0..cases {
        if i % 100 == 99 {
            t.refill().await;
        }
        if i > 0 && i % 50_000 == 0 {
            eprintln!("fuzz (auth: {auth}): {i} of {cases} requests, {changed} changed the store");
        }
        let now = t.state().await;
        let case = generate(&mut rng, &t, &now);
        let mutating = matches!(case.method, "POST" | "DELETE" | "PUT" | "PATCH");
        let before = mutating.then_some(now);
        let audit_before = if mutating { last_audit_id(&t).await } else { 0 };
        let mut req = axum::http::Request::builder()
            .method(case.method)
            .uri(case.uri.as_str());
        for (k, v) in &case.headers {
            req = req.header(k.as_str(), v.as_str());
        }
        let mut req = match req.body(Body::from(case.body.clone())) {
            Ok(r) => r,
            Err(_) => continue, // not a request a client can send (an invalid header value)
        };
        req.extensions_mut().insert(ConnectInfo(case.peer));
        let resp = tokio::time::timeout(Duration::from_secs(30), t.app.clone().oneshot(req))
            .await
            .unwrap_or_else(|_| panic!("seed {seed} case {i}: no answer in 30 s: {case:?}"))
            .unwrap();
        let status = resp.status().as_u16();
        let body = resp
            .into_body()
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        *by_status.entry(status).or_default() += 1;
        assert!(
            status < 500,
            "seed {seed} case {i}: {status} {}\n{case:?}",
            String::from_utf8_lossy(&body)
        );
        if let Some(before) = before {
            let after = t.state().await;
            if after != before {
                changed += 1;
                assert!(
                    may_change(&t, &case),
                    "seed {seed} case {i}: {:?} changed the store ({status}): {case:?}\nbefore {before:?}\nafter {after:?}",
                    case.claim
                );
                // A release removes exactly the acquisition the caller saw.
                if let Some((name, fence, owner)) = &case.release {
                    let gone: Vec<_> = before.locks.iter().filter(|l| !after.locks.contains(l)).collect();
                    assert!(
                        gone == [&(name.clone(), *fence, Some(owner.clone()))] && after.blacklist == before.blacklist,
                        "seed {seed} case {i}: a release of {name:?} fence {fence} owner {owner} changed {gone:?}: {case:?}"
                    );
                }
                let entry = newest_audit(&t).await;
                assert!(
                    entry
                        .as_ref()
                        .is_some_and(|e| e.id > audit_before && e.outcome == Some(Outcome::Done)),
                    "seed {seed} case {i}: the store changed but the audit's newest entry is {entry:?}: {case:?}"
                );
            }
        }
    }
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let mem: Vec<&str> = status
        .lines()
        .filter(|l| l.starts_with("VmRSS") || l.starts_with("VmHWM"))
        .collect();
    println!(
        "fuzz (auth: {auth}, seed {seed}): {cases} requests, {changed} changed the store; by status {by_status:?}; test process {mem:?}"
    );
    assert!(
        changed > 0,
        "no generated request ever acted: the generator does not reach the actions"
    );
}

async fn newest_audit(t: &Target) -> Option<lockscope_model::admin::AuditEntry> {
    let q = AuditQuery {
        limit: Some(1),
        ..AuditQuery::default()
    };
    t.audit.query(&q).await.unwrap().pop()
}

async fn last_audit_id(t: &Target) -> i64 {
    newest_audit(t).await.map_or(0, |e| e.id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generated_requests_with_auth() {
    run(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generated_requests_without_auth() {
    run(false).await;
}
