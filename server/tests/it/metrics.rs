//! `/metrics` against a real server and a real SQLite fleet, with sessions of
//! the client library taking and waiting for locks: every metric is there for
//! the fleet, the gauges show what the sessions did, and the counters only grow,
//! also when a session goes away. The scrape is read back with a Prometheus
//! text-format parser, as a scraper would. The charts' API over the same
//! fleet: the sessions' counters and the history's counts.

use std::time::Duration;

use futures::StreamExt;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use lockscope::auth::{new_token, Auth};
use lockscope::live::hub::{Fleets, HubHandle};
use lockscope::remember::audit::AuditLog;
use lockscope::remember::history::History;
use lockscope::settings::AuthFile;
use lockscope::web::AppState;
use lockscope_model::admin::Role;
use lockscope_model::charts::Charts;
use lockscope_model::time::rfc3339;
use lockscope_store::client::{LockOptions, Session, SessionConfig};
use lockscope_store::spec::{AnyLocks, StoreSpec};
use prometheus_parse::Value;

use crate::scrape::Metrics;
use tokio::sync::watch;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;

const FLEET: &str = "sql";

/// Every metric `/metrics` has for each fleet (as sample names).
const PER_FLEET: [&str; 23] = [
    "lockscope_locks_held",
    "lockscope_lock_waiters",
    "lockscope_locks_overdue",
    "lockscope_locks_expired",
    "lockscope_locks_orphaned",
    "lockscope_locks_blacklisted",
    "lockscope_locks_malformed",
    "lockscope_oldest_lock_age_seconds",
    "lockscope_lock_acquisitions_total",
    "lockscope_lock_conflicts_total",
    "lockscope_lock_attempts_total",
    "lockscope_locks_lost_total",
    "lockscope_lock_wait_seconds",
    "lockscope_lock_wait_seconds_sum",
    "lockscope_lock_wait_seconds_count",
    "lockscope_store_up",
    "lockscope_store_reconnects_total",
    "lockscope_websocket_subscribers",
    "lockscope_websocket_lag_drops_total",
    "lockscope_unlocker_active",
    "lockscope_unlocker_mode",
    "lockscope_unlocker_releases_total",
    "lockscope_deadlock_cycles",
];

struct Server {
    addr: std::net::SocketAddr,
    hub: HubHandle,
    store: AnyLocks,
    /// A viewer's API token (`None`: no authentication).
    token: Option<String>,
    _dir: tempfile::TempDir,
    _stop: watch::Sender<bool>,
}

struct Reply {
    status: u16,
    content_type: String,
    body: String,
}

impl Server {
    /// A server watching one SQLite fleet; with `auth`, a viewer's token.
    async fn start(auth: bool) -> Server {
        let dir = tempfile::tempdir().unwrap();
        let spec = StoreSpec::sqlite_file(&dir.path().join("locks.db"));
        let store = spec.connect().await.unwrap();
        let audit = AuditLog::open(&format!("sqlite:{}", dir.path().join("audit.db").display()))
            .await
            .unwrap();
        let (token, auth_file) = match auth {
            false => (None, None),
            true => {
                let (token, entry) = new_token("prometheus", Role::Viewer);
                let file = lockscope::settings::FileConfig::parse(&entry).unwrap();
                let tokens = file.auth.unwrap().tokens;
                (
                    Some(token),
                    Some(AuthFile {
                        tokens,
                        ..AuthFile::default()
                    }),
                )
            }
        };
        let history = History::open(&format!("sqlite:{}", dir.path().join("history.db").display()), None)
            .await
            .unwrap();
        let recorder = Some((history.recorder(FLEET), "replica-1".to_string()));
        let hub = HubHandle::spawn_recording(FLEET, "sqlite under test", spec.open().unwrap(), recorder);
        let (stop, stop_rx) = watch::channel(false);
        let state = AppState::new(
            Fleets::new(vec![hub.clone()]),
            "target/site".into(),
            stop_rx.clone(),
            audit.clone(),
            Auth::new(auth_file, audit),
        )
        .with_history(history);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(lockscope::serve(listener, state, stop_rx, Duration::from_secs(1)));
        Server {
            addr,
            hub,
            store,
            token,
            _dir: dir,
            _stop: stop,
        }
    }

    async fn get(&self, path: &str, authorization: Option<&str>) -> Reply {
        let mut req = hyper::Request::builder().uri(format!("http://{}{path}", self.addr));
        if let Some(a) = authorization {
            req = req.header("authorization", a);
        }
        let req = req.body(Full::new(Bytes::new())).unwrap();
        let resp = Client::builder(TokioExecutor::new())
            .build_http()
            .request(req)
            .await
            .unwrap();
        let status = resp.status().as_u16();
        let content_type = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        Reply {
            status,
            content_type,
            body: String::from_utf8_lossy(&body).into(),
        }
    }

    fn bearer(&self) -> Option<String> {
        self.token.as_ref().map(|t| format!("Bearer {t}"))
    }

    /// One scrape as Prometheus makes it.
    async fn scrape(&self) -> Metrics {
        let r = self.get("/metrics", self.bearer().as_deref()).await;
        assert_eq!(r.status, 200, "{}", r.body);
        assert!(
            r.content_type.starts_with("application/openmetrics-text"),
            "{}",
            r.content_type
        );
        Metrics::parse(r.body)
    }

    /// Scrapes until `ok` holds (the store is polled, the hub applies what it reads).
    async fn scrape_until(&self, what: &str, ok: impl Fn(&Metrics) -> bool) -> Metrics {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            let m = self.scrape().await;
            if ok(&m) {
                return m;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "never: {what}; last scrape:\n{}",
                m.text
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until the hub knows session `id` (or, `known = false`, no longer does).
    async fn session_known(&self, id: &str, known: bool) {
        for _ in 0..400 {
            if self.hub.session_now(id).await.unwrap().known == known {
                return;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("the hub never showed session {id} as known = {known}");
    }

    /// Waits until the hub shows `n` sessions waiting.
    async fn hub_waiting(&self, n: u64) {
        for _ in 0..400 {
            if self.hub.summary().counts.waiters == n {
                return;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("the hub never showed {n} waiting: {:?}", self.hub.summary().counts);
    }

    async fn session(&self, service: &str) -> Session<AnyLocks> {
        let s = Session::open(self.store.clone(), SessionConfig::new(service))
            .await
            .unwrap();
        // Its registration (zero counters) is what the hub sees first: every
        // acquisition after it counts.
        self.session_known(s.id(), true).await;
        s
    }
}

impl Metrics {
    /// `name`'s value for the fleet (a histogram: its count).
    fn get(&self, name: &str) -> f64 {
        self.try_get(name)
            .unwrap_or_else(|| panic!("no {name}{{fleet={FLEET:?}}} in\n{}", self.text))
    }

    fn try_get(&self, name: &str) -> Option<f64> {
        self.scrape
            .samples
            .iter()
            .find(|s| s.metric == name && s.labels.get("fleet") == Some(FLEET))
            .map(crate::scrape::value)
    }

    /// The wait histogram's buckets (cumulative), last is `+Inf`.
    fn wait_buckets(&self) -> Vec<(f64, f64)> {
        self.scrape
            .samples
            .iter()
            .find_map(|s| match &s.value {
                Value::Histogram(h) if s.metric == "lockscope_lock_wait_seconds" => {
                    Some(h.iter().map(|b| (b.less_than, b.count)).collect())
                }
                _ => None,
            })
            .expect("the wait histogram")
    }
}

#[tokio::test]
async fn metrics_follow_a_real_fleet_and_counters_never_go_down() {
    let s = Server::start(true).await;
    // Like the read API: an identity is needed when authentication is configured.
    let refused = s.get("/metrics", None).await;
    assert_eq!(refused.status, 401, "{}", refused.body);
    assert_eq!(s.get("/metrics", Some("Bearer not-a-token")).await.status, 401);

    // Every metric is there for the fleet before anything happens.
    let m = s
        .scrape_until("the store is live", |m| m.get("lockscope_store_up") == 1.0)
        .await;
    assert!(m.text.ends_with("# EOF\n"), "OpenMetrics ends with EOF");
    for name in PER_FLEET {
        m.get(name);
    }
    assert!(m
        .text
        .contains("lockscope_unlocker_failures_total{fleet=\"sql\",reason=\"store\"} 0\n"));
    for name in [
        "lockscope_locks_held",
        "lockscope_lock_waiters",
        "lockscope_lock_acquisitions_total",
    ] {
        assert_eq!(m.get(name), 0.0, "{name}");
    }

    // A holds three locks; B waits for one of them.
    let a = s.session("worker-a").await;
    let b = s.session("worker-b").await;
    let opts = LockOptions::new("metrics test", Duration::from_secs(600));
    let mut held = a.try_lock_batch(&["m/1", "m/2", "m/3"], opts.clone()).await.unwrap();
    assert_eq!(held.taken.len(), 3);
    let waiting = {
        let (b, opts) = (b.clone(), opts.clone().deadline(Duration::from_secs(60)));
        tokio::spawn(async move { b.lock("m/1", opts).await })
    };
    // Counters travel with heartbeats.
    a.heartbeat_now().await;
    let first = s
        .scrape_until("3 held, 1 waiting, 3 acquisitions", |m| {
            m.get("lockscope_locks_held") == 3.0
                && m.get("lockscope_lock_waiters") == 1.0
                && m.get("lockscope_lock_acquisitions_total") == 3.0
        })
        .await;
    let age = first.get("lockscope_oldest_lock_age_seconds");
    assert!((0.0..60.0).contains(&age), "the oldest lock was just taken: {age} s");
    assert_eq!(first.get("lockscope_locks_expired"), 0.0);
    b.heartbeat_now().await;
    let m = s
        .scrape_until("B's conflict", |m| m.get("lockscope_lock_conflicts_total") >= 1.0)
        .await;
    assert!(m.get("lockscope_lock_attempts_total") >= 4.0);

    // A browser's websocket is a subscriber while it is open.
    let mut req = format!("ws://{}/ws?fleet={FLEET}", s.addr)
        .into_client_request()
        .unwrap();
    let bearer = HeaderValue::from_str(&s.bearer().unwrap()).unwrap();
    req.headers_mut().insert("authorization", bearer);
    let (mut ws, _) = tokio_tungstenite::connect_async(req).await.unwrap();
    let _hello = ws.next().await;
    s.scrape_until("one websocket", |m| m.get("lockscope_websocket_subscribers") == 1.0)
        .await;
    drop(ws);
    s.scrape_until("no websocket", |m| m.get("lockscope_websocket_subscribers") == 0.0)
        .await;

    // More acquisitions: B gets m/1 when A lets it go, A takes two more.
    let one = held.taken.iter().position(|g| g.name() == "m/1").unwrap();
    assert!(held.taken.remove(one).unlock().await.unwrap());
    let got = waiting.await.unwrap().unwrap();
    let more = a.try_lock_batch(&["m/4", "m/5"], opts.clone()).await.unwrap();
    assert_eq!(more.taken.len(), 2);
    a.heartbeat_now().await;
    b.heartbeat_now().await;
    let second = s
        // The counters come from the sessions' heartbeats, the gauges from the
        // live table: a scrape may see one before the other, so wait for both.
        .scrape_until("6 acquisitions, B's wait and 5 held", |m| {
            m.get("lockscope_lock_acquisitions_total") == 6.0
                && m.get("lockscope_lock_wait_seconds") >= 1.0
                && m.get("lockscope_locks_held") == 5.0
                && m.get("lockscope_lock_waiters") == 0.0
        })
        .await;
    assert!(second.get("lockscope_lock_acquisitions_total") > first.get("lockscope_lock_acquisitions_total"));
    assert_eq!(second.get("lockscope_locks_held"), 5.0);
    assert_eq!(second.get("lockscope_lock_waiters"), 0.0);
    let buckets = second.wait_buckets();
    assert_eq!(buckets.last().unwrap().0, f64::INFINITY);
    assert_eq!(
        buckets.last().unwrap().1,
        second.get("lockscope_lock_wait_seconds_count")
    );
    assert!(buckets.windows(2).all(|w| w[0].1 <= w[1].1), "cumulative: {buckets:?}");
    assert!(second.get("lockscope_lock_wait_seconds_sum") > 0.0);

    // A goes away (its locks released, its registration removed): what it
    // contributed stays counted.
    let a_id = a.id().to_string();
    drop(held);
    drop(more);
    a.close().await.unwrap();
    s.session_known(&a_id, false).await;
    let third = s
        .scrape_until("only B's lock", |m| m.get("lockscope_locks_held") == 1.0)
        .await;
    for name in [
        "lockscope_lock_acquisitions_total",
        "lockscope_lock_conflicts_total",
        "lockscope_lock_attempts_total",
        "lockscope_lock_wait_seconds_count",
    ] {
        assert!(third.get(name) >= second.get(name), "{name} went down");
    }
    assert_eq!(third.get("lockscope_lock_acquisitions_total"), 6.0);
    drop(got);
    b.close().await.unwrap();
}

#[tokio::test]
async fn without_authentication_metrics_are_open_on_loopback() {
    let s = Server::start(false).await;
    let r = s.get("/metrics", None).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let m = Metrics::parse(r.body);
    for name in PER_FLEET {
        m.get(name);
    }
}

/// The charts' API until `ok` holds (counters are sampled every 2.5 s).
async fn charts_until(s: &Server, what: &str, ok: impl Fn(&Charts) -> bool) -> Charts {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let r = s.get(&format!("/api/v1/fleets/{FLEET}/charts?window=5m"), None).await;
        assert_eq!(r.status, 200, "{}", r.body);
        let charts: Charts = serde_json::from_str(&r.body).unwrap();
        if ok(&charts) {
            return charts;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never: {what}; last:\n{}",
            r.body
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[tokio::test]
async fn charts_show_the_counters_and_what_the_history_saw() {
    let s = Server::start(false).await;
    let bad = s.get(&format!("/api/v1/fleets/{FLEET}/charts?window=7m"), None).await;
    assert_eq!(bad.status, 400);
    assert!(bad.body.contains("5m, 1h or 24h"), "{}", bad.body);
    assert_eq!(s.get("/api/v1/fleets/nope/charts", None).await.status, 404);

    // A holds c/1; B waits for it, then gets it when A lets go.
    let a = s.session("worker-a").await;
    let b = s.session("worker-b").await;
    let opts = LockOptions::new("charts test", Duration::from_secs(600));
    let held = a.lock("c/1", opts.clone()).await.unwrap();
    let waiting = {
        let (b, opts) = (b.clone(), opts.clone().deadline(Duration::from_secs(60)));
        tokio::spawn(async move { b.lock("c/1", opts).await })
    };
    s.hub_waiting(1).await;
    assert!(held.unlock().await.unwrap());
    let got = waiting.await.unwrap().unwrap();
    a.heartbeat_now().await;
    b.heartbeat_now().await;

    let waits = |c: &Charts| c.seen.as_ref().map_or(0, |s| s.waits.iter().sum::<u64>());
    let c = charts_until(&s, "the counters and the history", |c| {
        let total = c.counters_total.map(|t| t.counts).unwrap_or_default();
        let seen = c.seen.as_ref().unwrap();
        total.acquired >= 2
            && total.conflicts >= 1
            && total.waits() >= 2
            && waits(c) == 1
            && seen.acquisitions.iter().sum::<u64>() == 2
            && seen.holds.iter().sum::<u64>() == 1
    })
    .await;
    assert_eq!(c.frame.buckets, 60);
    assert_eq!(c.counters.len(), 60);
    assert_eq!(c.sessions, 2);
    let seen = c.seen.as_ref().unwrap();
    assert!(!seen.behind);
    let top =
        |v: &[lockscope_model::charts::Contended]| v.iter().map(|t| (t.name.clone(), t.waits)).collect::<Vec<_>>();
    assert_eq!(top(&seen.top_locks), vec![("c/1".to_string(), 1)]);
    assert_eq!(top(&seen.top_services), vec![("worker-b".to_string(), 1)]);
    // B's wait took at least the time A held the lock after B asked: the
    // median of the two waits (A's: none) is a number, not an error.
    assert!(c.counters_total.unwrap().wait_quantile(0.5).is_some());

    // The waits seen equal a history query of the same bounds.
    let path = format!(
        "/api/v1/fleets/{FLEET}/history?kind=wait_started&from={}&to={}",
        rfc3339(c.frame.from),
        rfc3339(c.frame.to)
    );
    let r = s.get(&path, None).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let listed: Vec<serde_json::Value> = serde_json::from_str(&r.body).unwrap();
    assert_eq!(listed.len() as u64, waits(&c));
    drop(got);
}
