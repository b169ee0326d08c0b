//! No silent gap in the history across a restart: the real `lockscope`
//! binary, a real store and a SQLite history file; a client cycles locks, the
//! server is killed with SIGKILL mid-stream, the cycles go on while it is down,
//! and it is started again on the same history. docs/operations.md, "Restarts
//! and gaps": on etcd "a restarted server replays what changed while no
//! dashboard watched … recording every change in between exactly once"; where
//! etcd has compacted past that revision, "and always on SQL stores", "the
//! history records a `gap` event … not watching from A (the last event recorded
//! before the restart) to B (the first snapshot after it)".

use std::collections::HashMap;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lockscope::remember::history::History;
use lockscope_model::history::{HistoryEvent, HistoryQuery, Kind};
use lockscope_store::protocol::LockStore;
use lockscope_store::spec::{AnyLocks, StoreSpec};

use crate::binary::Binary;
use lockscope_store::testing::{take, EtcdServer};

mod outage;

const DOCS_REPLAY: &str = "a restarted server replays what changed while no dashboard watched";
const DOCS_SQL: &str = "on SQL stores, how many acquisitions it did not see, from each lock name's fencing counter";
const DOCS_GAP: &str =
    "not watching from A (the last event recorded before the restart) to B (the first snapshot after it)";

/// How long a cycle holds its lock on etcd (every change is watched).
const ETCD_HOLD: Duration = Duration::from_millis(5);
/// On SQLite: longer than the observer's poll (200 ms), so that a live
/// server sees each cycle (it sees rows as they are at each poll).
const SQL_HOLD: Duration = Duration::from_millis(250);

/// One `lockscope` process on `store`, its history in `dir`.
struct Server(Binary);

impl Server {
    async fn start(dir: &std::path::Path, store: &str) -> Server {
        let path = |f: &str| dir.join(f).display().to_string();
        let args = [
            "--no-demo".to_string(),
            "--store".to_string(),
            format!("main={store}"),
            "--audit".to_string(),
            format!("sqlite:{}", path("audit.db")),
            "--history".to_string(),
            format!("sqlite:{}", path("history.db")),
        ];
        Server(Binary::start(&args, dir).await)
    }

    async fn metrics(&self) -> crate::scrape::Metrics {
        let (status, body) = self.0.get("/metrics").await;
        assert_eq!(status, 200, "{body}");
        crate::scrape::Metrics::parse(body)
    }

    /// SIGKILL: nothing flushed, nothing said.
    fn kill(self) {
        self.0.kill();
    }
}

/// A client taking and releasing locks until stopped, each held for `hold`:
/// every (lock, fence) the store acknowledged (taken, then released).
struct Cycles {
    stop: Arc<AtomicBool>,
    done: Arc<Mutex<Vec<(String, i64)>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Cycles {
    fn start(locks: Arc<AnyLocks>, hold: Duration) -> Cycles {
        let (stop, done) = (Arc::new(AtomicBool::new(false)), Arc::new(Mutex::new(Vec::new())));
        let (s, d) = (stop.clone(), done.clone());
        let task = tokio::spawn(async move {
            let mut n = 0;
            while !s.load(Ordering::Relaxed) {
                let name = format!("cycle/{}", n % 4);
                let fence = take(&*locks, &name).await;
                tokio::time::sleep(hold).await;
                assert!(locks.release(&name, fence).await.unwrap(), "{name} {fence} released");
                d.lock().unwrap().push((name, fence));
                n += 1;
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        });
        Cycles { stop, done, task }
    }

    fn count(&self) -> usize {
        self.done.lock().unwrap().len()
    }

    async fn stop(self) -> Vec<(String, i64)> {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.unwrap();
        Arc::try_unwrap(self.done).unwrap().into_inner().unwrap()
    }
}

async fn events(dir: &std::path::Path) -> Vec<HistoryEvent> {
    let history = History::open(&format!("sqlite:{}", dir.join("history.db").display()), None)
        .await
        .unwrap();
    let q = HistoryQuery {
        fleet: "main".into(),
        limit: Some(10_000),
        ..HistoryQuery::default()
    };
    history.query(&q).await.unwrap()
}

/// Starts and ends recorded per acquisition, for `cycles`.
fn recorded(events: &[HistoryEvent], cycles: &[(String, i64)]) -> HashMap<(String, i64), (usize, usize)> {
    let mut seen: HashMap<(String, i64), (usize, usize)> = cycles.iter().map(|c| (c.clone(), (0, 0))).collect();
    for e in events {
        let (Some(lock), Some(fence)) = (&e.lock, e.fence) else {
            continue;
        };
        if let Some((starts, ends)) = seen.get_mut(&(lock.clone(), fence)) {
            match e.kind {
                Kind::Acquired => *starts += 1,
                k if k.ends_hold() => *ends += 1,
                _ => {}
            }
        }
    }
    seen
}

/// Cycles run `secs` more, with at least `more` of them acknowledged.
async fn run_for(cycles: &Cycles, more: usize) {
    let target = cycles.count() + more;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while cycles.count() < target {
        assert!(tokio::time::Instant::now() < deadline, "the cycles stalled");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Kills `server` mid-stream (after `n.0` cycles), lets `down` happen while
/// it is down (and `n.1` cycles), and starts it again (`n.2` more cycles):
/// the new server, when it was killed and when restarted.
async fn kill_and_restart<F: std::future::Future<Output = ()>>(
    server: Server,
    dir: &std::path::Path,
    store: &str,
    (cycles, n): (&Cycles, (usize, usize, usize)),
    down: impl FnOnce() -> F,
) -> (Server, i64, i64) {
    run_for(cycles, n.0).await;
    server.kill();
    let killed = lockscope_store::now_ms();
    run_for(cycles, n.1).await;
    down().await;
    let restarted = lockscope_store::now_ms();
    let server = Server::start(dir, store).await;
    run_for(cycles, n.2).await;
    (server, killed, restarted)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_restart_replays_every_cycle_once() {
    let etcd = EtcdServer::start().await;
    let store = format!("etcd:{}", etcd.endpoint());
    let dir = tempfile::tempdir().unwrap();
    let locks = Arc::new(StoreSpec::parse(&store).unwrap().connect().await.unwrap());
    let first = Server::start(dir.path(), &store).await;
    let cycles = Cycles::start(locks, ETCD_HOLD);
    run_for(&cycles, 30).await;
    first.kill();
    let killed = lockscope_store::now_ms();
    // Cycles begun after this one ended were made entirely while down.
    let down_from = cycles.count() + 1;
    run_for(&cycles, 40).await;
    let down_to = cycles.count();
    let server = Server::start(dir.path(), &store).await;
    run_for(&cycles, 20).await;
    let replayed_by = lockscope_store::now_ms();
    let done = cycles.stop().await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let events = events(dir.path()).await;
        let seen = recorded(&events, &done);
        let missing: Vec<_> = seen.iter().filter(|(_, (s, e))| (*s, *e) != (1, 1)).collect();
        if missing.is_empty() {
            // Review item 16: not counts only. The cycles made while down are
            // replayed as a live server records them (acquired, then ended by
            // their holder with no actor: the test's records name sessions
            // never registered, so `expired`, as for the cycles the first
            // server saw live), timed inside the outage: "never before the last
            // event recorded nor after the restart" (docs/operations.md).
            let of = |lock: &String, fence: i64| -> Vec<&HistoryEvent> {
                events
                    .iter()
                    .filter(|e| e.lock.as_ref() == Some(lock) && e.fence == Some(fence))
                    .collect()
            };
            let kinds = |mine: &[&HistoryEvent]| mine.iter().map(|e| (e.kind, e.actor.clone())).collect::<Vec<_>>();
            let live = kinds(&of(&done[5].0, done[5].1));
            assert_eq!(live.len(), 2, "{live:?}");
            assert_eq!(live[0], (Kind::Acquired, None));
            assert!(live[1].0.ends_hold() && live[1].1.is_none(), "{live:?}");
            for (lock, fence) in &done[down_from..down_to] {
                let mine = of(lock, *fence);
                assert_eq!(kinds(&mine), live, "{lock} {fence}: as recorded live");
                for e in mine {
                    assert!(
                        e.at >= killed - 1_000 && e.at <= replayed_by,
                        "{DOCS_REPLAY}: {lock} {fence} {:?} at {} outside the outage ({killed}..{replayed_by})",
                        e.kind,
                        e.at
                    );
                }
            }
            assert!(
                !events.iter().any(|e| e.kind == Kind::Gap),
                "{DOCS_REPLAY}: no gap where etcd still remembers"
            );
            let m = server.metrics().await;
            assert!(
                m.sample("lockscope_history_replayed_events_total") >= 40.0,
                "{}",
                m.text
            );
            assert_eq!(m.sample("lockscope_history_restart_gaps_total"), 0.0);
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{DOCS_REPLAY}, exactly once: {} of {} acknowledged cycles are not recorded once (starts, ends): {:?}",
            missing.len(),
            done.len(),
            missing.iter().take(5).collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// etcd's current revision and a compaction at it, with `etcdctl`.
fn compact(endpoint: &str) {
    let out = Command::new("etcdctl")
        .env("ETCDCTL_API", "3")
        .args(["--endpoints", endpoint, "get", "x", "-w", "json"])
        .output()
        .expect("etcdctl (Debian: etcd-client)");
    let text = String::from_utf8_lossy(&out.stdout);
    let rev: i64 = text
        .split("\"revision\":")
        .nth(1)
        .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|r| r.parse().ok())
        .unwrap_or_else(|| panic!("a revision in {text}"));
    let status = Command::new("etcdctl")
        .env("ETCDCTL_API", "3")
        .args(["--endpoints", endpoint, "compact", &rev.to_string()])
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "etcdctl compact {rev}");
}

/// The one gap event, once recorded (within 20 s).
async fn gap(dir: &std::path::Path) -> HistoryEvent {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let gaps: Vec<HistoryEvent> = events(dir).await.into_iter().filter(|e| e.kind == Kind::Gap).collect();
        assert!(gaps.len() <= 1, "one gap: {gaps:?}");
        if let Some(g) = gaps.into_iter().next() {
            return g;
        }
        assert!(tokio::time::Instant::now() < deadline, "{DOCS_GAP}: no gap recorded");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The gap's window: from the last event recorded before the kill to the
/// first snapshot after the restart; said in words, on the page too.
async fn check_gap(server: &Server, gap: &HistoryEvent, killed: i64, restarted: i64, dir: &std::path::Path) {
    let window = lockscope_model::history::Gap::of(gap).expect("a gap's window");
    let before = events(dir)
        .await
        .into_iter()
        .filter(|e| e.kind != Kind::Gap && e.at <= killed)
        .map(|e| e.at)
        .max()
        .expect("events before the kill");
    assert_eq!(window.from, before, "{DOCS_GAP}: A is the last event recorded before");
    assert!(
        window.to >= restarted && window.to <= lockscope_store::now_ms(),
        "{DOCS_GAP}: B is the first snapshot after ({} vs restart at {restarted})",
        window.to
    );
    assert!(gap.detail.contains("not watching from"), "{DOCS_GAP}: {}", gap.detail);
    let m = server.metrics().await;
    assert_eq!(m.sample("lockscope_history_restart_gaps_total"), 1.0, "{}", m.text);
    assert_eq!(m.sample("lockscope_history_replayed_events_total"), 0.0);
    let from = lockscope_model::time::rfc3339(window.from - 1000);
    let (status, page) = server
        .0
        .get(&format!("/history?fleet=main&from={from}&limit=10000"))
        .await;
    assert_eq!(status, 200, "{page}");
    assert!(
        page.contains("not watching from"),
        "The page's event list shows it in those words: {}",
        &page[..page.len().min(2000)]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_compacted_past_the_history_records_a_gap() {
    let etcd = EtcdServer::start().await;
    let store = format!("etcd:{}", etcd.endpoint());
    let dir = tempfile::tempdir().unwrap();
    let locks = Arc::new(StoreSpec::parse(&store).unwrap().connect().await.unwrap());
    let first = Server::start(dir.path(), &store).await;
    let cycles = Cycles::start(locks, ETCD_HOLD);
    let endpoint = etcd.endpoint();
    let (server, killed, restarted) =
        kill_and_restart(first, dir.path(), &store, (&cycles, (30, 40, 20)), || async move {
            compact(&endpoint)
        })
        .await;
    cycles.stop().await;
    let gap = gap(dir.path()).await;
    check_gap(&server, &gap, killed, restarted, dir.path()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_restart_records_the_gap_and_what_changed_in_it() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", dir.path().join("locks.db").display());
    let locks = Arc::new(StoreSpec::parse(&store).unwrap().connect().await.unwrap());
    // Held across the kill, released while the server is down.
    let held = take(&*locks, "held/over-the-kill").await;
    let first = Server::start(dir.path(), &store).await;
    let cycles = Cycles::start(locks.clone(), SQL_HOLD);
    let (server, killed, restarted) = kill_and_restart(first, dir.path(), &store, (&cycles, (6, 8, 2)), || async {
        assert!(locks.release("held/over-the-kill", held).await.unwrap());
    })
    .await;
    cycles.stop().await;
    let gap = gap(dir.path()).await;
    check_gap(&server, &gap, killed, restarted, dir.path()).await;
    assert!(
        gap.detail.contains("changes happened that were not seen: ")
            && !gap.detail.contains("seen: 0 acquisitions ended"),
        "whether anything changed in it: {}",
        gap.detail
    );
    let unseen: u64 = gap
        .detail
        .split(" acquisitions were made that the history did not see")
        .next()
        .and_then(|head| head.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{DOCS_SQL}: {}", gap.detail));
    assert!(
        unseen >= 8,
        "{DOCS_SQL}: at least the 8 cycles made while it was down: {}",
        gap.detail
    );
}

/// Nothing acquired while the server was down: the gap says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_restart_with_nothing_acquired_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", dir.path().join("locks.db").display());
    let locks = Arc::new(StoreSpec::parse(&store).unwrap().connect().await.unwrap());
    let first = Server::start(dir.path(), &store).await;
    let cycles = Cycles::start(locks, SQL_HOLD);
    run_for(&cycles, 6).await;
    let done = cycles.stop().await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while recorded(&events(dir.path()).await, &done)
        .values()
        .any(|c| *c != (1, 1))
    {
        assert!(tokio::time::Instant::now() < deadline, "the cycles were not recorded");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    first.kill();
    let _server = Server::start(dir.path(), &store).await;
    let gap = gap(dir.path()).await;
    assert!(
        gap.detail.contains("no lock the history knew was acquired in between"),
        "{DOCS_SQL}: {}",
        gap.detail
    );
}

/// docs/operations.md: the history knows "the highest store revision and the
/// latest time among the events it recorded, written in the same transaction
/// as those events"; it only moves forward (on SQLite and on PostgreSQL).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cursor_moves_forward_with_the_events_on_both_databases() {
    use lockscope::remember::history::Cursor;
    use lockscope_model::history::Draft;
    let dir = tempfile::tempdir().unwrap();
    let pg = lockscope_store::testing::PgServer::start().await;
    let sqlite = format!("sqlite:{}", dir.path().join("history.db").display());
    let ev = |lock: &str, revision: Option<i64>, at: i64| {
        let d = Draft {
            kind: Some(Kind::Acquired),
            lock: Some(lock.into()),
            fence: Some(1),
            revision,
            ..Draft::default()
        };
        HistoryEvent::new("f", at, d)
    };
    for url in [sqlite, pg.url()] {
        let history = History::open(&url, None).await.unwrap();
        assert_eq!(history.cursor("f").await.unwrap(), None, "{url}: nothing recorded");
        history
            .write(vec![ev("a", Some(5), 100), ev("b", Some(3), 200)])
            .await
            .unwrap();
        let c = |revision, at| Some(Cursor { revision, at });
        assert_eq!(history.cursor("f").await.unwrap(), c(Some(5), 200), "{url}");
        history.write(vec![ev("c", Some(4), 150)]).await.unwrap();
        assert_eq!(history.cursor("f").await.unwrap(), c(Some(5), 200), "{url}: never back");
        history.write(vec![ev("d", None, 300)]).await.unwrap();
        assert_eq!(
            history.cursor("f").await.unwrap(),
            c(Some(5), 300),
            "{url}: no revision keeps it"
        );
        history.write(vec![ev("e", Some(9), 250)]).await.unwrap();
        assert_eq!(history.cursor("f").await.unwrap(), c(Some(9), 300), "{url}");
        assert_eq!(history.cursor("other").await.unwrap(), None, "{url}: per fleet");
    }
}
