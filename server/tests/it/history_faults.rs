//! A history that cannot write says so, counts honestly and recovers by itself
//! (issue 24, defect 2), against a real SQLite file capped as a full disk caps
//! it (`PRAGMA max_page_count` on the writer's connection), one on a real
//! 2 MiB filesystem that fills (where the test may mount one), and a real
//! PostgreSQL that refuses the writer's inserts (a revoked grant): while
//! writing fails the history and overview pages say "history not recording
//! since … — N events lost" and `/metrics` says it is failing; every event of
//! a failed batch is counted as dropped and none as written; once the
//! database takes writes again the same server writes again, without a
//! restart, and the history records the gap (a `gap` event naming the window
//! and the count) that its page shows.

use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use lockscope::auth::Auth;
use lockscope::live::hub::{Fleets, HubHandle};
use lockscope::remember::audit::AuditLog;
use lockscope::remember::history::History;
use lockscope::web::AppState;
use lockscope_model::history::{Draft, Gap, HistoryEvent, HistoryQuery, Kind};
use lockscope_store::now_ms;
use lockscope_store::spec::StoreSpec;
use lockscope_store::testing::PgServer;
use tokio::sync::watch;

const FLEET: &str = "faults";
/// Events per batch the test records while writing works.
const BATCH: usize = 40;
/// Events per batch while it fails: more than any batch before (a full
/// disk's WAL file still has the room of the largest commit before it).
const LOST: usize = 3 * BATCH;

async fn get(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
    let req = hyper::Request::builder()
        .uri(format!("http://{addr}{path}"))
        .body(Full::new(Bytes::new()))
        .unwrap();
    let ask = async {
        let resp = Client::builder(TokioExecutor::new())
            .build_http()
            .request(req)
            .await
            .unwrap();
        let status = resp.status().as_u16();
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        (status, String::from_utf8_lossy(&body).into_owned())
    };
    tokio::time::timeout(Duration::from_secs(10), ask)
        .await
        .unwrap_or_else(|_| panic!("{path}: no answer within 10 s"))
}

fn metric(addr_scrape: &str, name: &str) -> f64 {
    crate::scrape::Metrics::parse(addr_scrape.to_string()).sample(name)
}

/// A server of `FLEET` (a SQLite store) recording into `history`, on a
/// loopback port of its own. Keep the sender: dropping it stops the server.
async fn serve(dir: &std::path::Path, history: &History) -> (std::net::SocketAddr, watch::Sender<bool>) {
    let spec = StoreSpec::sqlite_file(&dir.join("locks.db"));
    let audit = AuditLog::open(&format!("sqlite:{}", dir.join("audit.db").display()))
        .await
        .unwrap();
    let hub = HubHandle::spawn_recording(FLEET, "sqlite under test", spec.open().unwrap(), None);
    let (stop, stop_rx) = watch::channel(false);
    let state = AppState::new(
        Fleets::new(vec![hub]),
        "target/site".into(),
        stop_rx.clone(),
        audit.clone(),
        Auth::new(None, audit),
    )
    .with_history(history.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(lockscope::serve(listener, state, stop_rx, Duration::from_secs(1)));
    (addr, stop)
}

/// `n` acquisitions of locks `{tag}-0…`, each with a kilobyte of detail (so
/// that a capped file fills at once), queued as one batch.
fn record(history: &History, tag: &str, n: usize) {
    let drafts = (0..n)
        .map(|i| Draft {
            kind: Some(Kind::Acquired),
            lock: Some(format!("{tag}-{i}")),
            fence: Some(i as i64 + 1),
            detail: format!("{tag} {}", "x".repeat(1_000)),
            ..Draft::default()
        })
        .collect();
    history.recorder(FLEET).record(now_ms(), drafts);
}

/// Every event of `FLEET` in the history, read from the database.
async fn stored(history: &History) -> Vec<HistoryEvent> {
    history
        .query(&HistoryQuery {
            fleet: FLEET.into(),
            limit: Some(10_000),
            ..HistoryQuery::default()
        })
        .await
        .unwrap()
}

fn locks_tagged(events: &[HistoryEvent], tag: &str) -> usize {
    let prefix = format!("{tag}-");
    events
        .iter()
        .filter(|e| e.lock.as_deref().is_some_and(|l| l.starts_with(&prefix)))
        .count()
}

/// Polls `what` (every 100 ms, `within` at most) until it holds.
async fn until<F: std::future::Future<Output = bool>>(what: &str, within: Duration, mut done: impl FnMut() -> F) {
    let start = Instant::now();
    while !done().await {
        assert!(start.elapsed() < within, "{what}: not within {within:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The whole scenario against `history`, whose database `refuse(true)` makes
/// refuse the writer's inserts and `refuse(false)` takes them again.
async fn fails_says_so_and_recovers<F: std::future::Future<Output = ()>>(
    dir: &std::path::Path,
    url: &str,
    history: History,
    mut refuse: impl FnMut(bool) -> F,
) {
    let (addr, _stop) = serve(dir, &history).await;
    let flushed = |within| {
        let h = history.clone();
        async move { h.flush(within).await }
    };

    // Writing works: every event written, counted once.
    record(&history, "before", BATCH);
    assert!(flushed(Duration::from_secs(10)).await);
    let m = get(addr, "/metrics").await.1;
    assert_eq!(metric(&m, "lockscope_history_events_written_total"), BATCH as f64);
    assert_eq!(metric(&m, "lockscope_history_writing_failing"), 0.0);
    // The same events again (a second replica, a restart's snapshot): already
    // there, so not written again, and not counted as written.
    record(&history, "before", BATCH);
    assert!(flushed(Duration::from_secs(10)).await);
    let m = get(addr, "/metrics").await.1;
    assert_eq!(
        metric(&m, "lockscope_history_events_written_total"),
        BATCH as f64,
        "events already in the history are not counted as written"
    );
    assert_eq!(metric(&m, "lockscope_history_events_duplicate_total"), BATCH as f64);

    // The database refuses writes: two batches fail and are dropped.
    refuse(true).await;
    let failed_at = now_ms();
    record(&history, "lost", LOST);
    until(
        "the history page says it is not recording",
        Duration::from_secs(10),
        || async {
            get(addr, &format!("/history?fleet={FLEET}"))
                .await
                .1
                .contains("history not recording since")
        },
    )
    .await;
    // (write retries take 1 + 2 + 3 s before a batch is dropped)
    assert!(flushed(Duration::from_secs(20)).await, "the failed batch was dropped");
    record(&history, "lost2", LOST);
    assert!(
        flushed(Duration::from_secs(20)).await,
        "the second failed batch was dropped"
    );

    // docs/operations.md: "While the history's database refuses writes, the
    // history page and the overview say "history not recording since <when> —
    // N events lost", and `lockscope_history_writing_failing` is 1."
    let lost = 2 * LOST;
    let words = format!("— {lost} events lost");
    let (status, page) = get(addr, &format!("/history?fleet={FLEET}")).await;
    assert_eq!(status, 200);
    assert!(
        page.contains("history not recording since") && page.contains(&words),
        "{page}"
    );
    assert!(page.contains(" ago)"), "the time is absolute and relative: {page}");
    until(
        "the overview says it is not recording",
        Duration::from_secs(5),
        || async {
            let page = get(addr, "/").await.1;
            page.contains("history not recording since") && page.contains(&words)
        },
    )
    .await;
    let m = get(addr, "/metrics").await.1;
    assert_eq!(metric(&m, "lockscope_history_writing_failing"), 1.0);
    assert_eq!(
        metric(&m, "lockscope_history_events_written_total"),
        BATCH as f64,
        "a failed batch is never counted as written"
    );
    assert_eq!(metric(&m, "lockscope_history_events_dropped_total"), lost as f64);
    assert_eq!(metric(&m, "lockscope_history_batches_failed_total"), 2.0);

    // The database takes writes again: the same server records the gap and
    // writes the next events at once (no restart).
    refuse(false).await;
    // With nothing to write, the writer finds out by itself (it tries the gap).
    until(
        "recovered with nothing to write: the gap recorded",
        Duration::from_secs(10),
        || async {
            let gap = stored(&history).await.iter().any(|e| e.kind == Kind::Gap);
            gap && !get(addr, &format!("/history?fleet={FLEET}"))
                .await
                .1
                .contains("history not recording")
        },
    )
    .await;
    record(&history, "after", BATCH);
    assert!(flushed(Duration::from_secs(20)).await);
    let recovered_at = now_ms();
    let events = stored(&history).await;
    assert_eq!(locks_tagged(&events, "before"), BATCH, "{events:#?}");
    assert_eq!(locks_tagged(&events, "lost") + locks_tagged(&events, "lost2"), 0);
    assert_eq!(
        locks_tagged(&events, "after"),
        BATCH,
        "writing resumed without a restart"
    );
    // A second connection sees them: they are committed, not in a transaction
    // the writer's connection never ended.
    let reread = History::open(url, None).await.unwrap();
    assert_eq!(locks_tagged(&stored(&reread).await, "after"), BATCH);
    let gaps: Vec<Gap> = events.iter().filter_map(Gap::of).collect();
    assert_eq!(gaps.len(), 1, "one gap recorded in the history: {events:#?}");
    let gap = &gaps[0];
    assert_eq!(gap.lost, Some(lost as u64));
    assert!(
        gap.from <= failed_at + 1_000 && gap.to >= failed_at && gap.to <= recovered_at,
        "{gap:?} names the window ({failed_at}..{recovered_at})"
    );

    let m = get(addr, "/metrics").await.1;
    assert_eq!(metric(&m, "lockscope_history_writing_failing"), 0.0);
    // Written: the rows now in the file (the events and the gap), no more.
    assert_eq!(
        metric(&m, "lockscope_history_events_written_total"),
        events.len() as f64,
        "{events:#?}"
    );
    assert_eq!(metric(&m, "lockscope_history_events_dropped_total"), lost as f64);

    // docs/operations.md: "Once it takes writes again, the history records a
    // `gap` event naming the window and the count, and the history page says
    // "N events lost between … and …" for every gap in its range."
    let (_, page) = get(addr, &format!("/history?fleet={FLEET}")).await;
    assert!(!page.contains("history not recording since"), "recovered: {page}");
    assert!(page.contains(&format!("{lost} events lost between ")), "{page}");
    let (_, overview) = get(addr, "/").await;
    assert!(!overview.contains("history not recording since"), "{overview}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_capped_sqlite_history_says_so_counts_and_recovers() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("history.db").display());
    let history = History::open(&url, None).await.unwrap();
    let h = history.clone();
    fails_says_so_and_recovers(dir.path(), &url, history, move |full| {
        // Capped at its size now: the next pages do not fit, as on a full disk.
        h.cap_pages(full.then_some(1));
        async {}
    })
    .await;
}

/// A tmpfs of 2 MiB (the incident's filesystem), unmounted when dropped.
struct SmallDisk(std::path::PathBuf);

impl SmallDisk {
    /// `None` where this process may not mount one (not root).
    fn mount(at: std::path::PathBuf) -> Option<SmallDisk> {
        std::fs::create_dir_all(&at).unwrap();
        let mounted = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=2m", "tmpfs"])
            .arg(&at)
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        mounted.then_some(SmallDisk(at))
    }

    /// Fills what is left of it (`full`), or gives it back.
    fn fill(&self, full: bool) {
        use std::io::Write;
        let filler = self.0.join("filler");
        if !full {
            std::fs::remove_file(filler).unwrap();
            return;
        }
        let mut f = std::fs::File::create(filler).unwrap();
        let chunk = vec![0u8; 4096];
        while f.write_all(&chunk).is_ok() {}
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// The incident itself: the history's file on a 2 MiB filesystem that fills.
/// SQLite then fails the commit, rolls the whole transaction back itself,
/// and a connection kept after that "committed" every later batch into a
/// transaction that never ended (counted as written, in no file, until a
/// restart). Where the test may not mount a filesystem, the page cap stands in
/// (it fails statements, not commits).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sqlite_history_on_a_full_disk_says_so_counts_and_recovers() {
    let dir = tempfile::tempdir().unwrap();
    let disk = SmallDisk::mount(dir.path().join("small"));
    let at = disk.as_ref().map_or(dir.path().to_path_buf(), |d| d.0.clone());
    let url = format!("sqlite:{}", at.join("history.db").display());
    let history = History::open(&url, None).await.unwrap();
    let h = history.clone();
    if disk.is_none() {
        eprintln!("cannot mount a tmpfs here: the page cap stands in for a full disk");
    }
    fails_says_so_and_recovers(dir.path(), &url, history.clone(), move |full| {
        match &disk {
            Some(d) => d.fill(full),
            None => h.cap_pages(full.then_some(1)),
        }
        async {}
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_history_refusing_writes_says_so_counts_and_recovers() {
    let pg = PgServer::start().await;
    // The history writes as a role of its own, whose grant the test revokes.
    let admin = sqlx::PgPool::connect(&pg.url()).await.unwrap();
    for q in [
        "CREATE ROLE historian LOGIN",
        "GRANT CREATE ON DATABASE postgres TO historian",
    ] {
        sqlx::query(q).execute(&admin).await.unwrap();
    }
    let url = pg.url().replace("lockscope@", "historian@");
    let history = History::open(&url, None).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    fails_says_so_and_recovers(dir.path(), &url, history, move |refuse| {
        let admin = admin.clone();
        async move {
            let q = if refuse {
                "REVOKE INSERT ON lockscope_history.history_events FROM historian"
            } else {
                "GRANT INSERT ON lockscope_history.history_events TO historian"
            };
            sqlx::query(q).execute(&admin).await.unwrap();
        }
    })
    .await;
}
