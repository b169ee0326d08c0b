//! Two real `lockscope` replicas on one etcd fleet, the unlocker on, one
//! PostgreSQL holding the audit log they share and each one's history (a
//! database each: a shared history keeps the first replica's record of an
//! end, which would hide what the other one believed). The active replica is
//! paused (SIGSTOP) with dead holders' locks in its view; the other takes the
//! role and releases them; the first is woken (SIGCONT). Then: each lock was
//! deleted exactly once, has one `done` audit entry, by the replica that
//! released it, and neither history credits the woken replica with anything
//! (issue 24, defect 1; issue 23, "a replica that was paused … releases
//! nothing when it comes back").

use std::collections::HashMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use etcd_client::{Client, EventType, GetOptions, WatchOptions};
use futures::stream::{self, StreamExt};
use lockscope::remember::audit::AuditLog;
use lockscope::remember::history::History;
use lockscope_model::admin::{AuditQuery, Outcome, MAX_AUDIT_ROWS};
use lockscope_model::history::{HistoryQuery, Kind};
use lockscope_store::protocol::{Attempt, LockStore};
use lockscope_store::spec::StoreSpec;
use lockscope_store::testing::{self, free_port, EtcdServer, PgServer};
use sqlx::{Connection, Executor};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const PREFIX: &str = "/attribution-replicas/";
const FLEET: &str = "etcd";
const LOCKS: usize = 200;

/// One `lockscope` process, killed on drop (a stopped one too).
struct Replica {
    name: String,
    child: Child,
    port: u16,
    history: String,
}

impl Replica {
    async fn start(name: &str, dir: &Path, etcd: &str, audit: &str, history: &str) -> Replica {
        let home = dir.join(name);
        std::fs::create_dir_all(home.join("site")).unwrap();
        let port = free_port();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_lockscope"));
        for (k, _) in std::env::vars() {
            if k.starts_with("LOCKSCOPE_") || k.starts_with("LEPTOS_") {
                cmd.env_remove(k);
            }
        }
        let child = cmd
            .current_dir(&home)
            .args(["--etcd", etcd, "--prefix", PREFIX, "--fleet", FLEET])
            .args([
                "--unlocker",
                "on",
                "--unlocker-lease-secs",
                "2",
                "--unlocker-grace-secs",
                "1",
            ])
            .args(["--replica", name, "--listen", &format!("127.0.0.1:{port}")])
            .args(["--audit", audit, "--history", history])
            .arg("--site-root")
            .arg(home.join("site"))
            .args(["--log", "info"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(home.join("stderr.log")).unwrap())
            .spawn()
            .expect("spawning lockscope");
        let r = Replica {
            name: name.into(),
            child,
            port,
            history: history.into(),
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while tokio::net::TcpStream::connect(("127.0.0.1", r.port)).await.is_err() {
            assert!(Instant::now() < deadline, "replica {name} not listening after 30 s");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        r
    }

    /// Sends `sig` (libc's, not procps' `kill`: a slim machine has none).
    fn signal(&self, sig: i32) {
        // SAFETY: kill(2) on our own child's pid, which is not reaped before drop.
        let ok = unsafe { libc::kill(self.child.id() as i32, sig) } == 0;
        assert!(ok, "kill {sig} {}: {}", self.name, std::io::Error::last_os_error());
    }

    fn actor(&self) -> String {
        format!("unlocker@{}", self.name)
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A database of its own on `pg` for one replica's history.
async fn database(pg: &PgServer, name: &str) -> String {
    let mut c = sqlx::PgConnection::connect(&pg.url()).await.unwrap();
    c.execute(format!("CREATE DATABASE {name}").as_str()).await.unwrap();
    pg.url().replace("/postgres", &format!("/{name}"))
}

/// Puts and deletes per lock name under `<prefix>locks/` from revision `from`
/// on (etcd's own record of them: read until the watch has nothing more for 1 s).
async fn key_changes(etcd: &str, from: i64) -> HashMap<String, (u32, u32)> {
    let mut client = Client::connect([etcd], None).await.unwrap();
    let prefix = format!("{PREFIX}locks/");
    let opts = WatchOptions::new().with_prefix().with_start_revision(from);
    let mut stream = client.watch(prefix.as_str(), Some(opts)).await.unwrap();
    let mut seen: HashMap<String, (u32, u32)> = HashMap::new();
    while let Ok(resp) = tokio::time::timeout(Duration::from_secs(1), stream.message()).await {
        let resp = resp.unwrap().expect("the watch stays open");
        for ev in resp.events() {
            let kv = ev.kv().unwrap();
            let name = String::from_utf8_lossy(kv.key())
                .trim_start_matches(&prefix)
                .to_string();
            let c = seen.entry(name).or_default();
            match ev.event_type() {
                EventType::Put => c.0 += 1,
                EventType::Delete => c.1 += 1,
            }
        }
    }
    seen
}

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_replica_is_credited_with_nothing_after_waking() {
    let etcd = EtcdServer::start().await;
    let pg = PgServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let spec = StoreSpec::Etcd {
        endpoints: vec![etcd.endpoint()],
        prefix: Some(PREFIX.into()),
    };
    let store = spec.connect().await.unwrap();
    let fleet = spec.open().unwrap();
    let audit_url = pg.url();
    let (ha, hb) = (database(&pg, "history_a").await, database(&pg, "history_b").await);
    let a = Replica::start("a", dir.path(), &etcd.endpoint(), &audit_url, &ha).await;
    let b = Replica::start("b", dir.path(), &etcd.endpoint(), &audit_url, &hb).await;
    let first = until("a replica elected", Duration::from_secs(20), async || {
        fleet.unlocker().await.ok().flatten()
    })
    .await;
    let (paused, other) = if first.candidate == "a" { (&a, &b) } else { (&b, &a) };

    // Dead holders' locks (no session), due 8 s + 1 s grace from now: after
    // the active replica is paused (once its view shows them, within 5 s).
    let mut client = Client::connect([etcd.endpoint()], None).await.unwrap();
    let from = client.get("/", None).await.unwrap().header().unwrap().revision() + 1;
    let now = lockscope_store::now_ms();
    let names: Vec<String> = (0..LOCKS).map(|i| format!("dead/{i:03}")).collect();
    let written: Vec<bool> = stream::iter(&names)
        .map(|name| {
            let store = store.clone();
            async move {
                let mut rec = testing::record(&format!("owner-{name}"), "attribution test", now);
                rec.auto_unlock_at = now + 8_000;
                matches!(store.try_acquire(name, &rec).await, Ok(Attempt::Acquired { .. }))
            }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    assert!(written.iter().all(|w| *w), "every lock written");
    let get = |port: u16, path: &'static str| async move {
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.ok()?;
        let req = format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n\r\n");
        s.write_all(req.as_bytes()).await.ok()?;
        let mut body = String::new();
        s.read_to_string(&mut body).await.ok()?;
        Some(body.split_once("\r\n\r\n")?.1.to_string())
    };
    let held = |port: u16| async move {
        let v: serde_json::Value = serde_json::from_str(&get(port, "/healthz").await?).ok()?;
        v["fleets"].as_array()?.iter().find(|f| f["name"] == FLEET)?["held"].as_u64()
    };
    until(
        "the active replica's view shows the locks",
        Duration::from_secs(5),
        async || (held(paused.port).await == Some(LOCKS as u64)).then_some(()),
    )
    .await;
    paused.signal(libc::SIGSTOP);
    // Review item 14: the premise, checked rather than hoped for: the active
    // replica was paused before the locks fell due, so it cannot have
    // released them itself.
    assert!(
        lockscope_store::now_ms() < now + 8_000,
        "the active replica was paused only after the locks fell due: the test proves nothing"
    );
    until("the other replica elected", Duration::from_secs(15), async || {
        fleet
            .unlocker()
            .await
            .ok()
            .flatten()
            .filter(|u| u.candidate == other.name)
    })
    .await;
    until("the locks released", Duration::from_secs(15), async || {
        let opts = GetOptions::new().with_prefix().with_count_only();
        let left = client
            .get(format!("{PREFIX}locks/dead/"), Some(opts))
            .await
            .ok()?
            .count();
        (left == 0).then_some(())
    })
    .await;
    // Woken with a stale view of due locks and a lost role: a positive sign
    // that it caught up (its view shows the deletions and it calls itself
    // inactive) before asserting it did nothing (review item 14; a fixed
    // sleep passed even if it had not caught up yet).
    paused.signal(libc::SIGCONT);
    until("the woken replica caught up", Duration::from_secs(15), async || {
        let metrics = get(paused.port, "/metrics").await?;
        let inactive = metrics
            .lines()
            .any(|l| l.starts_with("lockscope_unlocker_active{") && l.ends_with(" 0"));
        (held(paused.port).await == Some(0) && inactive).then_some(())
    })
    .await;

    // One delete per lock.
    let changes = key_changes(&etcd.endpoint(), from).await;
    for name in &names {
        assert_eq!(changes.get(name), Some(&(1, 1)), "{name}: (puts, deletes) in etcd");
    }
    // One `done` audit entry per lock, by the replica that released it.
    let audit = AuditLog::open_read_only(&audit_url).await.unwrap();
    let q = AuditQuery {
        outcome: Some(Outcome::Done),
        limit: Some(MAX_AUDIT_ROWS),
        ..AuditQuery::default()
    };
    let mut done: Vec<(String, String)> = audit
        .query(&q)
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.target.starts_with("dead/"))
        .map(|e| (e.target, e.actor))
        .collect();
    done.sort();
    let expected: Vec<(String, String)> = names.iter().map(|n| (n.clone(), other.actor())).collect();
    let by_other = done.iter().filter(|(_, a)| *a == other.actor()).count();
    assert!(
        done == expected,
        "one done entry per lock, by {}: {} entries, {by_other} by it; first: {:?}",
        other.name,
        done.len(),
        &done[..done.len().min(5)]
    );

    // Each history: one end per lock; the releasing replica's credits it;
    // neither credits the woken one.
    for r in [other, paused] {
        let history = History::open(&r.history, None).await.unwrap();
        let q = HistoryQuery {
            fleet: FLEET.into(),
            limit: Some(10_000),
            ..HistoryQuery::default()
        };
        let ends = until(
            &format!("{}'s history has every end", r.name),
            Duration::from_secs(15),
            async || {
                let ends: Vec<_> = (history.query(&q).await.ok()?.into_iter())
                    .filter(|e| e.kind.ends_hold() && e.lock.as_deref().is_some_and(|l| l.starts_with("dead/")))
                    .collect();
                (ends.len() >= LOCKS).then_some(ends)
            },
        )
        .await;
        assert_eq!(ends.len(), LOCKS, "{}'s history: one end per lock", r.name);
        for e in &ends {
            let credited = (e.kind, e.actor.clone());
            if std::ptr::eq(r, other) {
                assert_eq!(
                    credited,
                    (Kind::AutoReleased, Some(other.actor())),
                    "{}'s history credits its own release of {:?}",
                    r.name,
                    e.lock
                );
            } else {
                // docs/operations.md: credited "only when the store says that
                // actor's compare-and-delete is the one that removed the
                // acquisition": the woken replica records the other's release
                // uncredited (released or expired, no actor) or, where it read
                // the other's entry in the shared audit, credited to the other.
                let ok = matches!(
                    &credited,
                    (Kind::Released | Kind::Expired, None) | (Kind::AutoReleased, Some(_))
                ) && (credited.0 != Kind::AutoReleased || credited.1 == Some(other.actor()));
                assert!(
                    ok,
                    "the woken replica {}'s history records {:?}'s end, which {} released, as {credited:?}: {e:#?}",
                    paused.name, e.lock, other.name
                );
            }
        }
    }
}
