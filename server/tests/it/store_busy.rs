//! A store file held by another writer (issue 24, defect 4; issue 23's faults):
//! the real `lockscope` binary on its embedded SQLite default, and a real second
//! process, the `sqlite3` shell, holding a file in `BEGIN EXCLUSIVE`.
//!
//! - The store's file held: an API force-release answers a quick `503` "store
//!   busy, nothing released", the lock is still there, the attempt is in the
//!   audit log (its own file, which the store's holder cannot block), the page
//!   says writes are blocked, and all of it recovers by itself once the holder
//!   commits.
//! - The audit log's file held: the action is done and its entry queued in the
//!   spool, written to the log when the file frees up.
//! - The rest of the audit spool, and an existing install's entries moving to
//!   the log's own file: `spool`.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use lockscope::remember::audit::AuditLog;
use lockscope_model::admin::{Action, AuditEntry, AuditQuery, Outcome};
use lockscope_store::client::{Session, SessionConfig};
use lockscope_store::protocol::LockStore;
use lockscope_store::spec::{AnyLocks, StoreSpec};

/// A slow or silent PostgreSQL: the audit write's bound, a client that leaves.
mod slow;
/// The audit spool's bound, what a restart finds queued, the form's words,
/// what is never queued, and an existing install's entries moving.
mod spool;

/// The overview's store cell of a live fleet.
const LIVE: &str = "data-state=\"live\"";

/// How long a busy store may take to answer (`ADMIN_BUSY_TIMEOUT` is 1 s).
const QUICK: Duration = Duration::from_millis(2_500);

/// Another process in `BEGIN EXCLUSIVE` on an SQLite file, until [`Holder::commit`].
pub(crate) struct Holder {
    child: Child,
    stdin: ChildStdin,
}

impl Holder {
    pub(crate) fn hold(db: &Path) -> Holder {
        let mut child = Command::new("sqlite3")
            .arg(db)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("the sqlite3 shell (apt-get install sqlite3)");
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(b"BEGIN EXCLUSIVE;\nSELECT 'held';\n").unwrap();
        stdin.flush().unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), "held", "sqlite3 holds {}", db.display());
        Holder { child, stdin }
    }

    pub(crate) fn commit(mut self) {
        self.stdin.write_all(b"COMMIT;\n.quit\n").unwrap();
        self.stdin.flush().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The `lockscope` binary on the embedded default (no demo, no unlocker: only
/// what the test does happens), with the audit log and the history (when
/// `history`) where the defaults put them.
struct Running {
    child: Child,
    base: String,
    dir: tempfile::TempDir,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Running {
    async fn start(history: bool) -> Running {
        let dir = tempfile::tempdir().unwrap();
        let port = lockscope_store::testing::free_port();
        let mut command = Command::new(env!("CARGO_BIN_EXE_lockscope"));
        if !history {
            command.args(["--history", "off"]);
        }
        let child = command
            .args(["--listen", &format!("127.0.0.1:{port}"), "--no-demo"])
            .args(["--unlocker", "off"])
            .env("LOCKSCOPE_LOG", "error")
            .current_dir(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let r = Running {
            child,
            base: format!("http://127.0.0.1:{port}"),
            dir,
        };
        for _ in 0..200 {
            if r.send("GET", "/healthz", "").await.0 == 200 {
                return r;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("lockscope did not start");
    }

    /// The embedded store's file (`--embedded-db`'s default).
    fn store_file(&self) -> PathBuf {
        self.dir.path().join(".lockscope/lockscope.db")
    }

    /// The audit log's file when none is configured.
    fn audit_file(&self) -> PathBuf {
        lockscope::remember::audit::default_file(&self.store_file())
    }

    async fn store(&self) -> AnyLocks {
        StoreSpec::sqlite_file(&self.store_file()).connect().await.unwrap()
    }

    async fn audit(&self) -> AuditLog {
        AuditLog::open_read_only(&format!("sqlite:{}", self.audit_file().display()))
            .await
            .unwrap()
    }

    async fn send(&self, method: &str, path: &str, body: &str) -> (u16, String) {
        let req = hyper::Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base))
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body.to_string())))
            .unwrap();
        let client = Client::builder(TokioExecutor::new()).build_http();
        match client.request(req).await {
            Ok(resp) => {
                let status = resp.status().as_u16();
                let body = resp.into_body().collect().await.unwrap().to_bytes();
                (status, String::from_utf8_lossy(&body).into())
            }
            Err(_) => (0, String::new()),
        }
    }

    /// An API force-release of `name` at `fence` (a raw lock: no owner).
    async fn release(&self, name: &str, fence: i64) -> (u16, serde_json::Value, Duration) {
        let body = serde_json::json!({"fence": fence, "owner": null, "reason": "INC-24: busy store"});
        let path = format!("/api/v1/fleets/embedded/locks/{}/release", name.replace('/', "%2F"));
        let t0 = Instant::now();
        let (status, text) = self.send("POST", &path, &body.to_string()).await;
        let took = t0.elapsed();
        (status, serde_json::from_str(&text).unwrap_or_default(), took)
    }

    /// Polls the overview page until `ok(page)`, for at most 10 s.
    async fn page_until(&self, what: &str, ok: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let (_, page) = self.send("GET", "/", "").await;
            if ok(&page) {
                return page;
            }
            assert!(Instant::now() < deadline, "the page never said {what}:\n{page}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

async fn releases(audit: &AuditLog) -> Vec<AuditEntry> {
    audit
        .query(&AuditQuery {
            action: Some(Action::Release),
            ..AuditQuery::default()
        })
        .await
        .unwrap()
}

/// A held lock written straight into the store (no session whose heartbeats
/// the holder would block): its fence.
pub(crate) async fn raw_lock(store: &AnyLocks, name: &str) -> i64 {
    store.put_raw(name, b"written by the store_busy test").await.unwrap();
    store.get(name).await.unwrap().expect("the raw lock is held").fence
}

#[tokio::test]
async fn a_held_store_file_answers_a_quick_503_and_the_attempt_is_audited() {
    let r = Running::start(true).await;
    let store = r.store().await;
    let fence = raw_lock(&store, "busy/job").await;
    let session = Session::open(store.clone(), SessionConfig::new("busy-test"))
        .await
        .unwrap();
    let blacklist = format!("/api/v1/fleets/embedded/sessions/{}/blacklist", session.id());
    r.page_until("live", |p| p.contains(LIVE)).await;

    let holder = Holder::hold(&r.store_file());
    let (status, answer, took) = r.release("busy/job", fence).await;
    // docs/operations.md: "a force-release, blacklisting or lift answers `503`
    // \"store busy, nothing released\" (…) within about 2 s, having done nothing".
    assert_eq!(status, 503, "{answer}");
    assert!(took < QUICK, "answered after {took:?}: {answer}");
    let detail = answer["detail"].as_str().unwrap();
    assert!(detail.starts_with("store busy, nothing released"), "{detail}");
    assert_eq!(answer["released"], false);
    assert!(
        answer["audit_id"].as_i64().unwrap() > 0,
        "written, with an id: {answer}"
    );
    // The store did not act: the same acquisition is there (read while held: WAL).
    let now = store.get("busy/job").await.unwrap().expect("still held");
    assert_eq!(now.fence, fence);
    // docs/operations.md: "the audit log has a file of its own […]: another
    // process holding the store's file cannot block an entry".
    let audit = r.audit().await;
    let entries = releases(&audit).await;
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert_eq!(entries[0].outcome, Some(Outcome::Refused));
    assert!(
        entries[0].detail.starts_with("store busy, nothing released"),
        "{entries:?}"
    );
    assert_eq!(entries[0].id, answer["audit_id"].as_i64().unwrap());
    // The same for a blacklisting (the store decides whether the session is
    // registered by a read, which the holder does not block).
    let t0 = Instant::now();
    let (status, body) = r.send("POST", &blacklist, r#"{"reason": "INC-24: busy store"}"#).await;
    assert_eq!(status, 503, "{body}");
    assert!(t0.elapsed() < QUICK, "answered after {:?}", t0.elapsed());
    assert!(body.contains("store busy, nothing blacklisted"), "{body}");

    // docs/operations.md: "the page says \"writes blocked since …\" for that fleet".
    let page = r
        .page_until("writes blocked", |p| p.contains("writes blocked since"))
        .await;
    assert!(page.contains("data-state=\"writes-blocked\""), "{page}");
    let (_, fleets) = r.send("GET", "/api/v1/fleets", "").await;
    assert!(fleets.contains("\"writes_blocked\""), "{fleets}");
    let (_, metrics) = r.send("GET", "/metrics", "").await;
    assert!(
        metrics.contains("lockscope_store_writes_blocked{fleet=\"embedded\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("lockscope_store_up{fleet=\"embedded\"} 1"),
        "read live: {metrics}"
    );

    // "… and goes back to live by itself when the file frees up".
    holder.commit();
    r.page_until("live again", |p| {
        !p.contains("writes blocked since") && p.contains(LIVE)
    })
    .await;
    let (_, metrics) = r.send("GET", "/metrics", "").await;
    assert!(
        metrics.contains("lockscope_store_writes_blocked{fleet=\"embedded\"} 0"),
        "{metrics}"
    );
    let (status, answer, _) = r.release("busy/job", fence).await;
    assert_eq!(status, 200, "{answer}");
    assert!(store.get("busy/job").await.unwrap().is_none());
    // Done now, not "already blacklisted": the busy attempt wrote nothing.
    let (status, body) = r.send("POST", &blacklist, r#"{"reason": "INC-24: busy store"}"#).await;
    assert_eq!(status, 200, "{body}");
    let entries = releases(&audit).await;
    assert_eq!(
        entries.iter().map(|e| e.outcome).collect::<Vec<_>>(),
        [Some(Outcome::Done), Some(Outcome::Refused)],
        "both attempts, newest first"
    );
    // docs/operations.md: "The history: lock changes that could not happen
    // while the file was held are not recorded (there were none); what the
    // store had recorded before is read and recorded as usual".
    let deadline = Instant::now() + Duration::from_secs(10);
    let kinds = loop {
        let (_, body) = r.send("GET", "/api/v1/fleets/embedded/history?lock=busy/job", "").await;
        let kinds: Vec<String> = body
            .split("\"kind\":\"")
            .skip(1)
            .filter_map(|k| k.split('"').next().map(String::from))
            .collect();
        if kinds.iter().any(|k| k == "force_released") || Instant::now() > deadline {
            break kinds;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(kinds.len(), 2, "the lock's two events, nothing else: {kinds:?}");
    assert!(["acquired", "malformed"].contains(&kinds[0].as_str()), "{kinds:?}");
    assert_eq!(kinds[1], "force_released", "{kinds:?}");
}

#[tokio::test]
async fn an_entry_the_audit_log_cannot_take_is_queued_and_written_when_it_frees_up() {
    let r = Running::start(false).await;
    let store = r.store().await;
    let fence = raw_lock(&store, "busy/audit").await;
    let audit = r.audit().await;

    let holder = Holder::hold(&r.audit_file());
    let (status, answer, took) = r.release("busy/audit", fence).await;
    // docs/operations.md: "an entry the audit database does not take within
    // 1 s is queued in a spool file beside it […] and the answer says so,
    // with `audit_id: null`".
    assert_eq!(status, 200, "the action itself was done: {answer}");
    assert!(took < QUICK, "answered after {took:?}");
    assert!(answer["audit_id"].is_null(), "{answer}");
    let detail = answer["detail"].as_str().unwrap();
    assert!(detail.contains("the audit entry is queued"), "{detail}");
    assert!(store.get("busy/audit").await.unwrap().is_none(), "released");
    assert!(releases(&audit).await.is_empty(), "not in the log while it is held");
    let spool = std::fs::read_to_string(format!("{}.spool", r.audit_file().display())).unwrap();
    assert_eq!(spool.lines().count(), 1, "one entry, on disk: {spool}");
    let (_, metrics) = r.send("GET", "/metrics", "").await;
    for sample in [
        "lockscope_audit_spooled 1",
        "lockscope_audit_queued_total 1",
        "lockscope_audit_spool_max 1000",
    ] {
        assert!(metrics.lines().any(|l| l == sample), "{sample} in {metrics}");
    }

    // "…and written to the log, in order, as soon as it takes writes again".
    holder.commit();
    let deadline = Instant::now() + Duration::from_secs(10);
    let entries = loop {
        let entries = releases(&audit).await;
        if !entries.is_empty() || Instant::now() > deadline {
            break entries;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(entries.len(), 1, "the queued entry reached the log: {entries:?}");
    assert_eq!(entries[0].outcome, Some(Outcome::Done));
    assert!(entries[0].detail.starts_with("released fence"), "{entries:?}");
    assert_eq!(entries[0].target, "busy/audit");
    // Taken out of the spool just after the log committed it.
    let deadline = Instant::now() + Duration::from_secs(5);
    while !r
        .send("GET", "/metrics", "")
        .await
        .1
        .lines()
        .any(|l| l == "lockscope_audit_spooled 0")
    {
        assert!(Instant::now() < deadline, "the spool still counts the written entry");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The next attempt is written at once, after it.
    let (status, answer, _) = r.release("busy/audit", fence).await;
    assert_eq!(status, 409, "{answer}");
    assert!(
        answer["audit_id"].as_i64().expect(&answer.to_string()) > entries[0].id,
        "{answer}"
    );
}
