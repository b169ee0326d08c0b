//! Two real `lockscope` processes as replicas of one etcd fleet, both with the
//! unlocker on: the role is held by one of them at a time, elected through etcd,
//! and every release is fenced by the leadership's term.
//!
//! - every expired lock is released exactly once (one Delete per key in etcd,
//!   one `Done` entry in the two audit logs together, by the active replica);
//! - the active replica killed (SIGKILL), the other takes over within the
//!   lease's ttl plus 2 s and releases what expires next, exactly once;
//! - the active replica paused (SIGSTOP) past its lease while due locks are in
//!   its view: the other takes over and releases them; woken (SIGCONT), the
//!   paused one releases nothing (its releases are refused as deposed) and no
//!   key is deleted twice.
//!
//! Locks are written directly through the lock protocol with a near
//! `auto_unlock_at` (no live session: the unlocker goes by `auto_unlock_at`);
//! etcd's own watch on `<prefix>locks/` counts the deletions per key.
//!
//! The tests run one after the other (a shared mutex): they are timing
//! sensitive and the machine may be small. `LOCKSCOPE_TEST_KEEP_DIRS=1` keeps
//! the replicas' logs and audit logs. The last test holds the active
//! unlocker's audit log for seconds: a healthy leader must keep its role when
//! its releases are slow (its lease is renewed by a task of its own).

#![allow(clippy::await_holding_lock)] // `serial()`: see SERIAL

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use etcd_client::{Client, EventType, GetOptions, WatchOptions};
use futures::stream::{self, StreamExt};
use lockscope::remember::audit::AuditLog;
use lockscope_model::admin::{AuditEntry, AuditQuery, Outcome, MAX_AUDIT_ROWS};
use lockscope_store::fleet::{FleetStore, UnlockerInfo};
use lockscope_store::protocol::{Attempt, LockStore};
use lockscope_store::spec::{AnyLocks, StoreSpec};
use lockscope_store::testing::{self, free_port, EtcdServer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[path = "unlocker_replicas/links.rs"]
mod links;
#[path = "unlocker_replicas/waits.rs"]
mod waits;
use waits::*;
#[path = "unlocker_replicas/keys.rs"]
mod keys;
use keys::*;

/// `--unlocker-lease-secs`.
const LEASE_SECS: u64 = 2;
/// `--unlocker-grace-secs`.
const GRACE_SECS: u64 = 1;
/// The longest a hand-over may take: the lease's ttl plus 2 s.
const HAND_OVER_LIMIT: Duration = Duration::from_secs(LEASE_SECS + 2);
/// `--prefix` of both replicas.
const PREFIX: &str = "/replicas-it/";
/// The name the `--etcd` fleet gets (the default of `--fleet`).
const FLEET: &str = "etcd";

/// The tests here run one at a time: each holds this for its whole run. Each
/// test has its own runtime, so a std mutex held across its awaits blocks only
/// the other tests' threads, which is the point.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// When (since the test began) the role changed, and to whom.
type RoleChange = (Duration, Option<UnlockerInfo>);

/// One `lockscope` process; killed (and reaped) on drop.
struct Replica {
    name: String,
    child: Mutex<Option<Child>>,
    pid: u32,
    port: u16,
    stderr: PathBuf,
    audit_path: PathBuf,
    audit: AuditLog,
}

impl Replica {
    /// Starts `lockscope --replica NAME` on etcd at `endpoint`, its files in
    /// `dir/NAME/`, and returns once it listens.
    async fn start(name: &str, dir: &Path, endpoint: &str) -> Replica {
        let home = dir.join(name);
        std::fs::create_dir_all(home.join("site")).unwrap();
        let port = free_port();
        let stdout = home.join("stdout.log");
        let stderr = home.join("stderr.log");
        let audit_path = home.join("audit.db");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_lockscope"));
        // Nothing from the environment or a lockscope.toml in the cwd.
        for (k, _) in std::env::vars() {
            if k.starts_with("LOCKSCOPE_") || k.starts_with("LEPTOS_") {
                cmd.env_remove(k);
            }
        }
        cmd.current_dir(&home)
            .args(["--etcd", endpoint, "--prefix", PREFIX, "--fleet", FLEET])
            .args(["--unlocker", "on"])
            .args(["--unlocker-lease-secs", &LEASE_SECS.to_string()])
            .args(["--unlocker-grace-secs", &GRACE_SECS.to_string()])
            .args(["--replica", name])
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .arg("--audit")
            .arg(format!("sqlite:{}", audit_path.display()))
            .arg("--site-root")
            .arg(home.join("site"))
            .args(["--log", "info"])
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&stdout).unwrap())
            .stderr(std::fs::File::create(&stderr).unwrap());
        let mut child = cmd.spawn().expect("spawning the lockscope binary");
        let pid = child.id();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                panic!(
                    "replica {name} exited at start ({status}); its stderr:\n{}",
                    tail(&stderr, 40)
                );
            }
            let out = std::fs::read_to_string(&stdout).unwrap_or_default();
            if out.contains("lockscope listening on") {
                break;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "replica {name} not listening after 30 s; its stderr:\n{}",
                    tail(&stderr, 40)
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // Opened once the replica made its tables; reading beside it is fine
        // (WAL). Read-only: the replica's audit spool stays the replica's.
        let audit = AuditLog::open_read_only(&format!("sqlite:{}", audit_path.display()))
            .await
            .expect("opening a replica's audit log");
        Replica {
            name: name.to_string(),
            child: Mutex::new(Some(child)),
            pid,
            port,
            stderr,
            audit_path,
            audit,
        }
    }

    /// SIGKILL, and reaped.
    fn kill(&self) {
        if let Some(mut c) = self.child.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Sends `sig` (libc's, not procps' `kill`: a slim machine has none).
    fn signal(&self, sig: i32) {
        // SAFETY: kill(2) on our own child's pid (reaped only on drop).
        let ok = unsafe { libc::kill(self.pid as i32, sig) } == 0;
        let e = std::io::Error::last_os_error();
        assert!(ok, "kill {sig} {} ({}) failed: {e}", self.pid, self.name);
    }

    fn pause(&self) {
        self.signal(libc::SIGSTOP);
    }

    fn resume(&self) {
        self.signal(libc::SIGCONT);
    }

    /// The unlocker's releases this replica put on record with `outcome`.
    async fn releases(&self, outcome: Outcome) -> Vec<AuditEntry> {
        let q = AuditQuery {
            outcome: Some(outcome),
            limit: Some(MAX_AUDIT_ROWS),
            ..AuditQuery::default()
        };
        let entries = self.audit.query(&q).await.expect("reading an audit log");
        assert!(
            entries.len() < MAX_AUDIT_ROWS as usize,
            "audit query capped: count differently"
        );
        entries
            .into_iter()
            .filter(|e| e.actor.starts_with("unlocker@"))
            .collect()
    }

    /// The `Done` releases of locks named `tag/…`.
    async fn done(&self, tag: &str) -> Vec<AuditEntry> {
        let prefix = format!("{tag}/");
        let mut done = self.releases(Outcome::Done).await;
        done.retain(|e| e.target.starts_with(&prefix));
        done
    }

    /// `lockscope_unlocker_releases_total{outcome=…}` of this replica, by outcome.
    async fn release_metrics(&self) -> BTreeMap<String, f64> {
        let text = http_get(self.port, "/metrics").await.unwrap_or_default();
        text.lines()
            .filter(|l| l.starts_with("lockscope_unlocker_releases_total{"))
            .filter_map(|l| {
                let outcome = l.split("outcome=\"").nth(1)?.split('"').next()?.to_string();
                Some((outcome, l.rsplit(' ').next()?.parse().ok()?))
            })
            .collect()
    }

    /// How many locks this replica's hub shows held (from `/healthz`).
    async fn held_in_view(&self) -> Option<u64> {
        let body = http_get(self.port, "/healthz").await?;
        let json = body.split_once("\r\n\r\n")?.1;
        let v: serde_json::Value = serde_json::from_str(json).ok()?;
        v["fleets"].as_array()?.iter().find(|f| f["name"] == FLEET)?["held"].as_u64()
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        // SIGKILL ends a stopped process too.
        self.kill();
    }
}

/// A replica's log without terminal colours.
fn read_log(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| format!("({}: {e})", path.display()));
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            // `ESC [ … m`
            for c in chars.by_ref() {
                if c == 'm' {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The last `n` lines of a replica's log.
fn tail(path: &Path, n: usize) -> String {
    let text = read_log(path);
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// The lines of a replica's log about the role, and its warnings and errors.
fn notable(path: &Path) -> Vec<String> {
    read_log(path)
        .lines()
        .filter(|l| {
            [" WARN ", " ERROR ", "active unlocker", "lost the unlocker role"]
                .iter()
                .any(|w| l.contains(w))
        })
        .map(str::to_string)
        .collect()
}

/// Both replicas' notable lines and stderr tails, for failure messages.
fn tails(replicas: &[&Replica]) -> String {
    replicas
        .iter()
        .map(|r| {
            let notable = notable(&r.stderr);
            format!(
                "\n--- replica {} (pid {}): role changes, warnings, errors ({}, last 20) ---\n{}\n--- replica {} stderr tail ---\n{}",
                r.name,
                r.pid,
                notable.len(),
                notable[notable.len().saturating_sub(20)..].join("\n"),
                r.name,
                tail(&r.stderr, 15)
            )
        })
        .collect()
}

/// Who held the unlocker role, polled every 25 ms from the test's start.
struct RoleLog {
    t0: Instant,
    changes: Arc<Mutex<Vec<RoleChange>>>,
    task: tokio::task::JoinHandle<()>,
}

impl RoleLog {
    fn start(fleet: Arc<dyn FleetStore>, t0: Instant) -> RoleLog {
        let changes = Arc::new(Mutex::new(Vec::<(Duration, Option<UnlockerInfo>)>::new()));
        let c = changes.clone();
        let task = tokio::spawn(async move {
            loop {
                if let Ok(now) = fleet.unlocker().await {
                    let mut c = c.lock().unwrap();
                    if c.last().is_none_or(|(_, last)| *last != now) {
                        c.push((t0.elapsed(), now));
                    }
                }
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
        });
        RoleLog { t0, changes, task }
    }

    /// The terms seen since `since` (from the test's start), in order.
    fn terms_since(&self, since: Duration) -> Vec<UnlockerInfo> {
        let c = self.changes.lock().unwrap();
        c.iter()
            .filter(|(at, _)| *at >= since)
            .filter_map(|(_, u)| u.clone())
            .collect()
    }

    fn describe(&self) -> String {
        let c = self.changes.lock().unwrap();
        let lines: Vec<String> = c
            .iter()
            .map(|(at, u)| match u {
                Some(u) => format!("  [{at:>5.1?}] {} (term {})", u.candidate, u.term),
                None => format!("  [{at:>5.1?}] nobody"),
            })
            .collect();
        format!(
            "\n--- the unlocker role over time (now {:.1?}) ---\n{}",
            self.t0.elapsed(),
            lines.join("\n")
        )
    }
}

impl Drop for RoleLog {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A plain HTTP/1.0 GET on loopback; `None` if the server does not answer.
async fn http_get(port: u16, path: &str) -> Option<String> {
    let get = async {
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.ok()?;
        let req = format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n\r\n");
        s.write_all(req.as_bytes()).await.ok()?;
        let mut body = String::new();
        s.read_to_string(&mut body).await.ok()?;
        Some(body)
    };
    tokio::time::timeout(Duration::from_secs(3), get).await.ok()?
}

/// Locks written together, due together.
struct Batch {
    names: Vec<String>,
    /// `auto_unlock_at` plus the grace (unix ms, this host's clock: the replicas').
    due: i64,
}

impl Batch {
    /// How late the first and the last release were, past `due` (audit times).
    fn lateness(&self, done: &[Vec<AuditEntry>]) -> (Duration, Duration) {
        let ats = done.iter().flatten().map(|e| e.at - self.due);
        let late = |ms: Option<i64>| Duration::from_millis(ms.unwrap_or(0).max(0) as u64);
        (late(ats.clone().min()), late(ats.max()))
    }
}

/// Writes `n` locks `tag/lock-NNNN` through the lock protocol, each with
/// `auto_unlock_at` `unlock_in_ms` after the batch's start (this host's clock
/// is the replicas').
async fn write_batch(store: &AnyLocks, tag: &str, n: usize, unlock_in_ms: i64) -> Batch {
    let now = lockscope_store::now_ms();
    let names: Vec<String> = (0..n).map(|i| format!("{tag}/lock-{i:04}")).collect();
    let owner = format!("owner-{tag}");
    let results: Vec<Result<(), String>> = stream::iter(names.iter())
        .map(|name| {
            let (store, owner) = (store.clone(), owner.clone());
            async move {
                let mut rec = testing::record(&owner, "unlocker replicas test", now);
                rec.expected_runtime_ms = 500;
                rec.alert_at = now + 500;
                rec.auto_unlock_at = now + unlock_in_ms;
                match store.try_acquire(name, &rec).await {
                    Ok(Attempt::Acquired { .. }) => Ok(()),
                    Ok(Attempt::Busy { holder, .. }) => Err(format!("{name} already held: {holder:?}")),
                    Err(e) => Err(format!("{name}: {e}")),
                }
            }
        })
        .buffer_unordered(32)
        .collect()
        .await;
    let failed: Vec<_> = results.into_iter().filter_map(Result::err).collect();
    assert!(failed.is_empty(), "writing {tag}: {failed:?}");
    Batch {
        names,
        due: now + unlock_in_ms + GRACE_SECS as i64 * 1000,
    }
}

/// The replicas' directory (logs, audit logs): deleted afterwards unless
/// `LOCKSCOPE_TEST_KEEP_DIRS` is set (to read the logs of a run).
/// What every test here starts from: one etcd, the role and the lock keys
/// watched, two replicas on it, and the first of them elected.
struct Setup {
    t0: Instant,
    _etcd: EtcdServer,
    _dir: tempfile::TempDir,
    store: AnyLocks,
    fleet: Arc<dyn FleetStore>,
    roles: RoleLog,
    watch: KeyWatch,
    a: Replica,
    b: Replica,
    first: UnlockerInfo,
}

async fn setup() -> Setup {
    let t0 = Instant::now();
    let etcd = EtcdServer::start().await;
    let dir = scratch();
    let spec = spec(&etcd);
    let store = spec.connect().await.unwrap();
    let fleet = spec.open().unwrap();
    let roles = RoleLog::start(fleet.clone(), t0);
    let watch = KeyWatch::start(&etcd.endpoint()).await;
    let a = Replica::start("a", dir.path(), &etcd.endpoint()).await;
    let b = Replica::start("b", dir.path(), &etcd.endpoint()).await;
    let ctx = || format!("{}{}", roles.describe(), tails(&[&a, &b]));
    let first = wait_leader(fleet.as_ref(), &["a", "b"], Duration::from_secs(20), &ctx).await;
    Setup {
        t0,
        _etcd: etcd,
        _dir: dir,
        store,
        fleet,
        roles,
        watch,
        a,
        b,
        first,
    }
}

fn scratch() -> tempfile::TempDir {
    let mut dir = tempfile::Builder::new()
        .prefix("lockscope-replicas-")
        .tempdir()
        .unwrap();
    if std::env::var_os("LOCKSCOPE_TEST_KEEP_DIRS").is_some() {
        dir.disable_cleanup(true);
        eprintln!("keeping {}", dir.path().display());
    }
    dir
}

fn spec(etcd: &EtcdServer) -> StoreSpec {
    StoreSpec::Etcd {
        endpoints: vec![etcd.endpoint()],
        prefix: Some(PREFIX.into()),
    }
}

fn other<'a>(name: &str, replicas: [&'a str; 2]) -> &'a str {
    if replicas[0] == name {
        replicas[1]
    } else {
        replicas[0]
    }
}

/// 1,000 expired locks released exactly once by the active replica; then the
/// active replica killed: the other takes over within the lease plus 2 s and
/// releases the next batch exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releases_once_and_hands_over_when_the_leader_is_killed() {
    let _serial = serial();
    let Setup {
        t0,
        _etcd,
        _dir,
        store,
        fleet,
        roles,
        watch,
        a,
        b,
        first,
    } = setup().await;
    let ctx = || format!("{}{}", roles.describe(), tails(&[&a, &b]));
    eprintln!(
        "[{:>5.1?}] replicas up; {} is the active unlocker (term {})",
        t0.elapsed(),
        first.candidate,
        first.term
    );

    // 1. Exactly once: 1,000 locks expiring in about 2 s.
    const N: usize = 1000;
    let w = Instant::now();
    let batch = write_batch(&store, "p1", N, 2000).await;
    eprintln!("[{:>5.1?}] wrote {N} locks in {:?}", t0.elapsed(), w.elapsed());
    let took = wait_deleted(&watch, &batch.names, Duration::from_secs(30), &ctx).await;
    eprintln!(
        "[{:>5.1?}] all {N} deleted {took:?} after the batch was written (due ~{} s after its start)",
        t0.elapsed(),
        2 + GRACE_SECS
    );
    let done = wait_audited(&[&a, &b], "p1", N, Duration::from_secs(10), &ctx).await;
    watch.assert_exactly_once(&batch.names, &ctx);
    let by = assert_audited_once(&[&a, &b], &done, &batch.names, &ctx);
    let (early, late) = batch.lateness(&done);
    for (r, d) in [&a, &b].into_iter().zip(&done) {
        if !d.is_empty() {
            eprintln!(
                "    replica {}: {} releases over {:?} (audit times){}; past due: first {early:?}, last {late:?}",
                r.name,
                d.len(),
                span(d),
                if r.name == first.candidate {
                    " (the active one)"
                } else {
                    ""
                }
            );
        }
    }
    // Nobody was killed or paused: the role stays put, and one replica releases all.
    let terms = roles.terms_since(Duration::ZERO);
    assert!(
        terms.iter().all(|t| *t == first),
        "the role changed during the 1,000-lock batch: {terms:?}{}",
        ctx()
    );
    assert_eq!(by, [(first.candidate.clone(), N)], "all by the active replica{}", ctx());

    // 2. Hand-over on kill.
    let leading = leader(fleet.as_ref()).await.expect("someone holds the role");
    let survivor = other(&leading.candidate, ["a", "b"]).to_string();
    let killed = Instant::now();
    if leading.candidate == "a" {
        a.kill();
    } else {
        b.kill();
    }
    let next = wait_leader(fleet.as_ref(), &[&survivor], Duration::from_secs(15), &ctx).await;
    let hand_over = killed.elapsed();
    eprintln!(
        "[{:>5.1?}] killed {} (term {}); {survivor} elected (term {}) {hand_over:?} later",
        t0.elapsed(),
        leading.candidate,
        leading.term,
        next.term
    );
    assert!(
        hand_over <= HAND_OVER_LIMIT,
        "hand-over took {hand_over:?}, more than the lease plus 2 s ({HAND_OVER_LIMIT:?}){}",
        ctx()
    );
    assert!(next.term > leading.term, "terms increase: {leading:?} then {next:?}");

    const M: usize = 200;
    let batch2 = write_batch(&store, "p2", M, 2000).await;
    let took = wait_deleted(&watch, &batch2.names, Duration::from_secs(20), &ctx).await;
    let done2 = wait_audited(&[&a, &b], "p2", M, Duration::from_secs(10), &ctx).await;
    watch.assert_exactly_once(&batch2.names, &ctx);
    let by2 = assert_audited_once(&[&a, &b], &done2, &batch2.names, &ctx);
    assert_eq!(by2, [(survivor.clone(), M)], "the survivor released them all{}", ctx());
    // And the first batch is still released exactly once.
    watch.assert_exactly_once(&batch.names, &ctx);
    let (early, late) = batch2.lateness(&done2);
    eprintln!(
        "[{:>5.1?}] {survivor} released all {M} of the next batch, once each ({took:?} after writing; past due: first {early:?}, last {late:?})",
        t0.elapsed()
    );
}

/// The active replica paused past its lease while due locks are in its view:
/// the other takes over and releases them (and a batch written after the
/// election); woken, the paused one releases nothing and no key is deleted twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_leader_releases_nothing_after_waking() {
    let _serial = serial();
    let Setup {
        t0,
        _etcd,
        _dir,
        store,
        fleet,
        roles,
        watch,
        a,
        b,
        first,
    } = setup().await;
    let ctx = || format!("{}{}", roles.describe(), tails(&[&a, &b]));
    let (paused, next) = if first.candidate == "a" { (&a, &b) } else { (&b, &a) };
    eprintln!(
        "[{:>5.1?}] replicas up; {} is the active unlocker (term {})",
        t0.elapsed(),
        first.candidate,
        first.term
    );

    // Locks due (auto_unlock_at + grace) 4 s from now: after the leader is
    // paused and its lease has run out. Paused once its view holds them all.
    const N: usize = 200;
    let seen = write_batch(&store, "p3-seen", N, 3000).await;
    let deadline = Instant::now() + Duration::from_secs(5);
    while paused.held_in_view().await.unwrap_or(0) < N as u64 {
        assert!(
            Instant::now() < deadline,
            "{}'s view never showed the {N} locks (it shows {:?}){}",
            paused.name,
            paused.held_in_view().await,
            ctx()
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let metrics_before = paused.release_metrics().await;
    paused.pause();
    let paused_at = Instant::now();
    let done_before = paused.releases(Outcome::Done).await.len();
    assert_eq!(done_before, 0, "{} released before the locks were due", paused.name);
    eprintln!(
        "[{:>5.1?}] paused {} (SIGSTOP) with {N} locks in its view, due in ~{:.1?}",
        t0.elapsed(),
        paused.name,
        Duration::from_millis((seen.due - lockscope_store::now_ms()).max(0) as u64)
    );
    let elected = wait_leader(fleet.as_ref(), &[&next.name], Duration::from_secs(15), &ctx).await;
    let hand_over = paused_at.elapsed();
    let elected_at = t0.elapsed();
    eprintln!(
        "[{:>5.1?}] {} elected (term {}) {hand_over:?} after the pause",
        t0.elapsed(),
        next.name,
        elected.term
    );
    assert!(
        hand_over <= HAND_OVER_LIMIT,
        "hand-over from a paused leader took {hand_over:?}, more than {HAND_OVER_LIMIT:?}{}",
        ctx()
    );

    // A batch written after the election, due in about 2 s.
    let fresh = write_batch(&store, "p3-fresh", N, 1000).await;
    let both: Vec<String> = seen.names.iter().chain(&fresh.names).cloned().collect();
    let took = wait_deleted(&watch, &both, Duration::from_secs(25), &ctx).await;
    eprintln!(
        "[{:>5.1?}] {} released both batches ({} locks) {took:?} after the second was written",
        t0.elapsed(),
        next.name,
        both.len()
    );
    for (tag, batch) in [("p3-seen", &seen), ("p3-fresh", &fresh)] {
        let done = wait_audited(&[&a, &b], tag, N, Duration::from_secs(10), &ctx).await;
        let by = assert_audited_once(&[&a, &b], &done, &batch.names, &ctx);
        assert_eq!(by, [(next.name.clone(), N)], "{tag}: all by the new leader{}", ctx());
        let (early, late) = batch.lateness(&done);
        eprintln!("    {tag}: past due: first {early:?}, last {late:?}");
    }
    // Nobody competed with the new leader (the other one is paused): it keeps
    // the role in the term it was elected in.
    let terms = roles.terms_since(elected_at);
    assert!(
        terms.iter().all(|t| *t == elected),
        "{} lost its role (term {}) while the only other replica was paused: {terms:?}{}",
        next.name,
        elected.term,
        ctx()
    );

    // Woken: its view is stale, its clock says they are all due.
    let done_asleep = paused.releases(Outcome::Done).await.len();
    let at_wake = leader(fleet.as_ref()).await.expect("the role is held");
    assert_eq!(at_wake.candidate, next.name, "{}", ctx());
    let woke_at = t0.elapsed();
    paused.resume();
    eprintln!(
        "[{:>5.1?}] woke {} (SIGCONT) after {:?} paused; watching 5 s",
        t0.elapsed(),
        paused.name,
        paused_at.elapsed()
    );
    tokio::time::sleep(Duration::from_secs(5)).await;
    let done_awake = paused.releases(Outcome::Done).await;
    assert_eq!(
        done_awake.len(),
        done_asleep,
        "the woken replica {} released after waking: {:?}{}",
        paused.name,
        &done_awake[..done_awake.len().min(5)],
        ctx()
    );
    assert_eq!(done_asleep, 0, "{} released while paused?", paused.name);
    watch.assert_exactly_once(&both, &ctx);
    let terms = roles.terms_since(woke_at);
    assert!(
        terms.iter().all(|t| *t == at_wake),
        "the role changed after {} woke (it stays with {} in term {}): {terms:?}{}",
        paused.name,
        next.name,
        at_wake.term,
        ctx()
    );
    let changed = paused.releases(Outcome::Changed).await.len();
    let metrics_after = paused.release_metrics().await;
    let lost = notable(&paused.stderr)
        .iter()
        .filter(|l| l.contains("lost the unlocker role"))
        .count();
    eprintln!(
        "[{:>5.1?}] woken {}: 0 releases done, {changed} audited as changed; its release metrics {metrics_before:?} -> {metrics_after:?}; \"lost the unlocker role\" logged {lost} time(s)",
        t0.elapsed(),
        paused.name
    );
    assert!(lost >= 1, "the woken replica noticed it lost the role{}", ctx());
}

/// The active unlocker whose audit log stalls for a few seconds (an SQLite
/// checkpoint on a busy disk, a remote PostgreSQL hiccup; here another
/// connection holding the file's write lock) while it releases: it keeps its
/// role (its lease is renewed by a task of its own, not between releases), and
/// every lock is released soon after it is due.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_audit_log_does_not_cost_the_leader_its_role() {
    use sqlx::{Connection, Executor};
    let _serial = serial();
    let Setup {
        t0,
        _etcd,
        _dir,
        store,
        fleet: _,
        roles,
        watch,
        a,
        b,
        first,
    } = setup().await;
    let ctx = || format!("{}{}", roles.describe(), tails(&[&a, &b]));
    let (leading, other) = if first.candidate == "a" { (&a, &b) } else { (&b, &a) };
    // The other replica out of the way: only the leader can win the role.
    other.pause();

    // Its audit log's write lock, held from before the batch is due until
    // 4 s after (under sqlx's 5 s busy timeout: the appends wait, then succeed).
    let mut conn = sqlx::SqliteConnection::connect(&format!("sqlite://{}", leading.audit_path.display()))
        .await
        .unwrap();
    const N: usize = 20;
    let batch = write_batch(&store, "stall", N, 500).await;
    conn.execute("BEGIN IMMEDIATE").await.unwrap();
    let due_in = Duration::from_millis((batch.due - lockscope_store::now_ms()).max(0) as u64);
    tokio::time::sleep(due_in + Duration::from_secs(4)).await;
    conn.execute("ROLLBACK").await.unwrap();
    eprintln!(
        "[{:>5.1?}] held {}'s audit log from before the batch was due until 4 s after",
        t0.elapsed(),
        leading.name
    );

    wait_deleted(&watch, &batch.names, Duration::from_secs(20), &ctx).await;
    let done = wait_audited(&[&a, &b], "stall", N, Duration::from_secs(10), &ctx).await;
    watch.assert_exactly_once(&batch.names, &ctx);
    assert_audited_once(&[&a, &b], &done, &batch.names, &ctx);
    let (_, late) = batch.lateness(&done);
    let terms = roles.terms_since(Duration::ZERO);
    eprintln!(
        "[{:>5.1?}] terms {terms:?}; the last release {late:?} past due",
        t0.elapsed()
    );
    other.resume();
    assert!(
        terms.iter().all(|t| *t == first) && late < Duration::from_secs(6),
        "the leader lost its role while healthy ({terms:?}) and/or released a lock {late:?} past due{}",
        ctx()
    );
}
