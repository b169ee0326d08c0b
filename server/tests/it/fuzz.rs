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
//! `LOCKSCOPE_FUZZ_CASES=500000 cargo test --release -p lockscope --test it fuzz -- --nocapture`.
//! A failing case prints its seed, index and request, so it can be replayed.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::Router;
use http_body_util::BodyExt;
use lockscope::audit::AuditLog;
use lockscope::auth::{new_token, Auth};
use lockscope::history::History;
use lockscope::http::AppState;
use lockscope::hub::{Fleets, HubHandle};
use lockscope::settings::{AuthFile, ProxyFile, TokenFile, UserFile};
use lockscope_model::admin::{AuditQuery, Outcome, Role};
use lockscope_store::client::{Session, SessionConfig};
use lockscope_store::protocol::LockStore;
use lockscope_store::spec::{AnyLocks, StoreSpec};
use tokio::sync::watch;
use tower::ServiceExt;

/// Lock names the fixture holds: a space and a plus that encode alike in
/// form encoding, a slash, non-ASCII.
const NAMES: [&str; 5] = ["a b", "a+b", "team-a/1", "x/y", "ünï"];
const TRUSTED_PROXY: &str = "127.0.0.1";
const PROXY_HEADER: &str = "x-forwarded-user";

/// Who a generated request claims to be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Claim {
    Nobody,
    Token(Role),
    BadToken,
    Basic,
    /// The proxy's header, from the trusted proxy's address.
    ProxyUser(Role),
    /// The proxy's header from an address that is not trusted.
    UntrustedProxy,
    /// Two proxy headers (a client's and the proxy's).
    DoubledProxy,
    GarbageCookie,
}

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
            app: lockscope::http::app(state),
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
            let owner = lockscope::auth::random_hex(16);
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

/// Acquisitions a request may name: the held ones (so some releases succeed).
fn held(state: &StoreState) -> Vec<(String, i64, String)> {
    state
        .locks
        .iter()
        .filter_map(|(n, f, owner)| owner.as_ref().map(|o| (n.clone(), *f, o.clone())))
        .collect()
}

/// A generated request, kept printable for the failure message.
#[derive(Debug)]
struct Case {
    method: &'static str,
    uri: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    peer: SocketAddr,
    claim: Claim,
    /// A release's lock, fence and owner: the acquisition the caller saw.
    release: Option<(String, i64, String)>,
}

fn pick<'a, T>(rng: &mut fastrand::Rng, xs: &'a [T]) -> &'a T {
    &xs[rng.usize(..xs.len())]
}

/// Percent-encodes a path segment (every byte but unreserved ones).
fn seg(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn text(rng: &mut fastrand::Rng) -> String {
    match rng.u8(..10) {
        0 => String::new(),
        1 => "x".repeat(rng.usize(200..3000)),
        2 => (0..rng.usize(1..12)).map(|_| rng.char(..)).collect(),
        3 => "\u{0}\r\n%00%ZZ+ &=?#/..".into(),
        4 => "../../etc/passwd".into(),
        5 => "<script>alert(1)</script>".into(),
        _ => (0..rng.usize(1..16)).map(|_| rng.alphanumeric()).collect(),
    }
}

fn number(rng: &mut fastrand::Rng) -> String {
    match rng.u8(..8) {
        0 => i64::MAX.to_string(),
        1 => i64::MIN.to_string(),
        2 => "-0".into(),
        3 => (*pick(rng, &["1e309", "now-9999999d", "-1h", "now+100000000d", "0"])).into(),
        4 => (*pick(
            rng,
            &[
                "2026-11-26T03:00:00Z",
                "9999-12-31T23:59:59Z",
                "0000-01-01T00:00:00Z",
                "+275760-09-13T00:00:00Z",
            ],
        ))
        .into(),
        5 => "99999999999999999999999".into(),
        _ => rng.i64(..).to_string(),
    }
}

fn value(rng: &mut fastrand::Rng, t: &Target) -> String {
    match rng.u8(..6) {
        0 | 1 => number(rng),
        2 => pick(rng, &NAMES).to_string(),
        3 => t.sessions().first().cloned().unwrap_or_default(),
        _ => text(rng),
    }
}

const KEYS: &[&str] = &[
    "fleet", "name", "lock", "from", "to", "at", "limit", "offset", "sort", "dir", "filter", "state", "window",
    "format", "session", "service", "actor", "action", "outcome", "next", "audit", "kind", "b", "cursor", "q",
];

fn query(rng: &mut fastrand::Rng, t: &Target) -> String {
    let mut q: Vec<String> = Vec::new();
    if rng.bool() {
        q.push(format!("fleet={}", if rng.u8(..4) == 0 { "nosuch" } else { "sql" }));
    }
    // The time-taking parameters, often, over the whole i64 range and beyond.
    for k in ["from", "to", "at", "lock"] {
        if rng.u8(..3) == 0 {
            let v = if k == "lock" {
                pick(rng, &NAMES).to_string()
            } else {
                number(rng)
            };
            q.push(format!("{k}={}", seg(&v)));
        }
    }
    for _ in 0..rng.usize(..4) {
        let k = pick(rng, KEYS);
        let v = value(rng, t);
        q.push(format!("{k}={}", seg(&v)));
    }
    if q.is_empty() {
        String::new()
    } else {
        format!("?{}", q.join("&"))
    }
}

fn generate(rng: &mut fastrand::Rng, t: &Target, now: &StoreState) -> Case {
    let held = held(now);
    // The acquisition the operator saw, or one close to it (a wrong fence or
    // owner, a name that encodes alike), or made up.
    let (name, fence, owner) = match (rng.bool(), held.is_empty()) {
        (true, false) => {
            let (n, f, o) = pick(rng, &held).clone();
            match rng.u8(..6) {
                0 => (n, f + 1, o),
                1 => (n, f, lockscope::auth::random_hex(16)),
                2 => (n.replace(' ', "+"), f, o),
                _ => (n, f, o),
            }
        }
        _ => (value(rng, t), rng.i64(-2..1_000), text(rng)),
    };
    let sessions = t.sessions();
    let session = match (rng.u8(..3), sessions.is_empty()) {
        (0 | 1, false) => pick(rng, &sessions).clone(),
        _ => text(rng),
    };
    let fleet = if rng.u8(..5) == 0 { text(rng) } else { "sql".to_string() };
    let reason = if rng.u8(..5) == 0 {
        text(rng)
    } else {
        "fuzz".to_string()
    };
    let (f, n, s) = (seg(&fleet), seg(&name), seg(&session));
    let q = query(rng, t);
    let json_release = format!(
        r#"{{"fence": {fence}, "owner": {}, "reason": {}}}"#,
        serde_json::json!(owner),
        serde_json::json!(reason)
    );
    let json_reason = format!(r#"{{"reason": {}}}"#, serde_json::json!(reason));
    let csrf_junk = text(rng);
    let form = |key: &str, target: &str| {
        format!(
            "fleet={}&{key}={}&confirm={}&fence={fence}&owner={}&reason={}&csrf={}&back=%2F",
            seg(&fleet),
            seg(target),
            seg(target),
            seg(&owner),
            seg(&reason),
            seg(&csrf_junk)
        )
    };
    let (method, uri, body, content_type): (&str, String, String, &str) = match rng.u8(..26) {
        0 => ("GET", format!("/{q}"), String::new(), ""),
        1 => ("GET", format!("/lock{q}"), String::new(), ""),
        2 => ("GET", format!("/sessions{q}"), String::new(), ""),
        3 => ("GET", format!("/audit{q}"), String::new(), ""),
        4 => ("GET", format!("/history{q}"), String::new(), ""),
        5 => ("GET", format!("/charts{q}"), String::new(), ""),
        6 => ("GET", format!("/signin{q}"), String::new(), ""),
        7 => (
            "POST",
            "/signin".into(),
            format!("token={}&next=%2F&csrf=x", seg(&text(rng))),
            "application/x-www-form-urlencoded",
        ),
        8 => (
            "POST",
            "/signout".into(),
            "csrf=x".into(),
            "application/x-www-form-urlencoded",
        ),
        9 => (
            "POST",
            "/actions/release".into(),
            form("name", &name),
            "application/x-www-form-urlencoded",
        ),
        10 => (
            "POST",
            "/actions/blacklist".into(),
            form("session", &session),
            "application/x-www-form-urlencoded",
        ),
        11 => (
            "POST",
            "/actions/unblacklist".into(),
            form("session", &session),
            "application/x-www-form-urlencoded",
        ),
        12 => ("GET", format!("/api/v1/fleets{q}"), String::new(), ""),
        13 => ("GET", format!("/api/v1/fleets/{f}/locks/{n}{q}"), String::new(), ""),
        14 | 15 => (
            "POST",
            format!("/api/v1/fleets/{f}/locks/{n}/release"),
            json_release,
            "application/json",
        ),
        16 => ("GET", format!("/api/v1/fleets/{f}/sessions{q}"), String::new(), ""),
        17 => (
            "POST",
            format!("/api/v1/fleets/{f}/sessions/{s}/blacklist"),
            json_reason,
            "application/json",
        ),
        18 => (
            "DELETE",
            format!("/api/v1/fleets/{f}/sessions/{s}/blacklist"),
            json_reason,
            "application/json",
        ),
        19 => ("GET", format!("/api/v1/audit{q}"), String::new(), ""),
        20 => ("GET", format!("/api/v1/fleets/{f}/history{q}"), String::new(), ""),
        21 => ("GET", format!("/api/v1/fleets/{f}/table{q}"), String::new(), ""),
        22 => ("GET", format!("/api/v1/fleets/{f}/charts{q}"), String::new(), ""),
        23 => (
            "GET",
            pick(
                rng,
                &[
                    "/metrics",
                    "/healthz",
                    "/favicon.svg",
                    "/ws?fleet=sql",
                    "/pkg/%00",
                    "/pkg/..%2F..%2FCargo.toml",
                ],
            )
            .to_string(),
            String::new(),
            "",
        ),
        24 => ("GET", format!("/pkg/{}", seg(&text(rng))), String::new(), ""),
        _ => (
            *pick(rng, &["GET", "POST", "DELETE", "PUT", "PATCH", "HEAD", "OPTIONS"]),
            format!("/{}/{}{q}", seg(&text(rng)), seg(&text(rng))),
            text(rng),
            *pick(
                rng,
                &[
                    "",
                    "application/json",
                    "text/plain",
                    "application/x-www-form-urlencoded",
                ],
            ),
        ),
    };
    // Sometimes the body is mangled: truncated, random bytes, the wrong type.
    let mut body = body.into_bytes();
    match rng.u8(..12) {
        0 => body.truncate(rng.usize(..=body.len())),
        1 => body = (0..rng.usize(..64)).map(|_| rng.u8(..)).collect(),
        2 => body.extend(std::iter::repeat_n(b'x', 17 * 1024)),
        _ => {}
    }
    let claim = *pick(
        rng,
        &[
            Claim::Nobody,
            Claim::Token(Role::Viewer),
            Claim::Token(Role::Operator),
            Claim::Token(Role::Admin),
            Claim::Token(Role::Admin),
            Claim::ProxyUser(Role::Viewer),
            Claim::ProxyUser(Role::Operator),
            Claim::ProxyUser(Role::Admin),
            Claim::UntrustedProxy,
            Claim::DoubledProxy,
            Claim::Basic,
            Claim::GarbageCookie,
        ],
    );
    // A bad token costs a password hash: rarely, so a long campaign stays fast.
    let claim = if rng.u16(..200) == 0 { Claim::BadToken } else { claim };
    let mut headers: Vec<(String, String)> = Vec::new();
    let host = match rng.u8(..10) {
        0 => "evil.example".to_string(),
        1 => String::new(),
        _ => "127.0.0.1:3000".to_string(),
    };
    if !host.is_empty() {
        headers.push(("host".into(), host));
    }
    if !content_type.is_empty() && rng.u8(..10) != 0 {
        headers.push(("content-type".into(), content_type.into()));
    }
    let mut peer: SocketAddr = "127.0.0.1:40000".parse().unwrap();
    match claim {
        Claim::Nobody => {}
        Claim::Token(role) => headers.push(("authorization".into(), format!("Bearer {}", t.tokens[&role]))),
        Claim::BadToken => {
            let id = t.tokens[&Role::Admin].split('.').next().unwrap().to_string();
            let id = if rng.bool() { id } else { "00000000".into() };
            headers.push(("authorization".into(), format!("Bearer {id}.{}", text(rng))));
        }
        Claim::Basic => headers.push(("authorization".into(), "Basic YWRtaW46YWRtaW4=".into())),
        Claim::ProxyUser(role) => headers.push((PROXY_HEADER.into(), format!("proxy-{}", role.as_str()))),
        Claim::UntrustedProxy => {
            peer = "10.9.8.7:40000".parse().unwrap();
            headers.push((PROXY_HEADER.into(), "proxy-admin".into()));
        }
        Claim::DoubledProxy => {
            headers.push((PROXY_HEADER.into(), "proxy-admin".into()));
            headers.push((PROXY_HEADER.into(), "proxy-viewer".into()));
        }
        Claim::GarbageCookie => headers.push(("cookie".into(), format!("lockscope_session={}", text(rng)))),
    }
    // Browser and proxy headers, each now and then.
    for (h, v) in [
        ("origin", "http://evil.example"),
        ("origin", "http://127.0.0.1:3000"),
        ("sec-fetch-site", "cross-site"),
        ("sec-fetch-site", "none"),
        ("cookie", "lockscope_csrf=abc"),
        ("x-csrf-token", "abc"),
        ("x-forwarded-for", "203.0.113.9"),
        ("forwarded", "for=203.0.113.9"),
        ("x-real-ip", "203.0.113.9"),
        ("x-forwarded-host", "lockscope.example.com"),
        ("x-forwarded-proto", "https"),
        ("accept", "text/csv"),
        ("upgrade", "websocket"),
    ] {
        if rng.u8(..14) == 0 {
            headers.push((h.into(), v.into()));
        }
    }
    let release =
        (uri.ends_with("/release") || uri == "/actions/release").then(|| (name.clone(), fence, owner.clone()));
    Case {
        method,
        uri,
        headers,
        body,
        peer,
        claim,
        release,
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
    let mut rng = fastrand::Rng::with_seed(seed ^ auth as u64);
    let (mut by_status, mut changed) = (BTreeMap::<u16, usize>::new(), 0usize);
    for i in 0..cases {
        if i % 100 == 99 {
            t.refill().await;
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
