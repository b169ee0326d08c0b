//! No silent gap across a running server's outage: the real binary watches
//! etcd through a [`TcpProxy`]; the link is cut while a client cycles locks
//! (straight to etcd), then restored. docs/operations.md, "Restarts and
//! gaps": "a running server whose observer reconnects after an outage
//! resumes where it stopped, and etcd replays what changed meanwhile"; "where
//! the reconnect has to read a fresh snapshot (etcd compacted past the last
//! revision seen; other stores always), the history records a gap event: not
//! watching from the store's outage to the first snapshot after the reconnect".

use lockscope_store::testing::TcpProxy;

use super::*;

const DOCS_RESUME: &str = "a running server whose observer reconnects after an outage resumes where it stopped, and etcd replays what changed meanwhile";
const DOCS_OUTAGE_GAP: &str =
    "the history records a gap event: not watching from the store's outage to the first snapshot after the reconnect";

/// Starts the server through a proxy, cycles, cuts the link until the server
/// records the outage and `n` more cycles are made, runs `meanwhile`, restores
/// it and makes 20 more cycles: the server, the cycles, when the link was cut
/// and restored.
async fn cut_and_restore<F: std::future::Future<Output = ()>>(
    (upstream, direct, through): (std::net::SocketAddr, String, impl Fn(&str) -> String),
    hold: Duration,
    dir: &std::path::Path,
    meanwhile: impl FnOnce() -> F,
) -> (Server, Vec<(String, i64)>, i64, i64) {
    let proxy = TcpProxy::start(upstream).await;
    let server = Server::start(dir, &through(proxy.endpoint().trim_start_matches("http://"))).await;
    let locks = Arc::new(StoreSpec::parse(&direct).unwrap().connect().await.unwrap());
    // Live (its first snapshot sent) before the first cycle, so it sees all.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while server.metrics().await.sample("lockscope_store_up{fleet=\"main\"}") != 1.0 {
        assert!(tokio::time::Instant::now() < deadline, "the server did not go live");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let cycles = Cycles::start(locks, hold);
    run_for(&cycles, 20).await;
    let cut = lockscope_store::now_ms();
    proxy.cut();
    // A positive sign the server saw the outage: its history says so.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !events(dir).await.iter().any(|e| e.kind == Kind::Unreachable) {
        assert!(tokio::time::Instant::now() < deadline, "the outage was not recorded");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    run_for(&cycles, 30).await;
    meanwhile().await;
    let restored = lockscope_store::now_ms();
    proxy.restore();
    run_for(&cycles, 20).await;
    (server, cycles.stop().await, cut, restored)
}

/// etcd, straight (the client's) and through the proxy (the server's).
fn etcd_via(etcd: &EtcdServer) -> (std::net::SocketAddr, String, impl Fn(&str) -> String) {
    (etcd.addr(), format!("etcd:{}", etcd.endpoint()), |proxy: &str| {
        format!("etcd:http://{proxy}")
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_outage_resumes_and_records_every_cycle_once() {
    let etcd = EtcdServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let (server, done, _, _) = cut_and_restore(etcd_via(&etcd), ETCD_HOLD, dir.path(), || async {}).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let events = events(dir.path()).await;
        let seen = recorded(&events, &done);
        let missing: Vec<_> = seen.iter().filter(|(_, (s, e))| (*s, *e) != (1, 1)).collect();
        if missing.is_empty() {
            assert!(!events.iter().any(|e| e.kind == Kind::Gap), "{DOCS_RESUME}: no gap");
            let m = server.metrics().await;
            assert_eq!(m.sample("lockscope_history_outage_gaps_total"), 0.0, "{}", m.text);
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{DOCS_RESUME}: {} of {} acknowledged cycles are not recorded once (starts, ends): {:?}",
            missing.len(),
            done.len(),
            missing.iter().take(5).collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_outage_compacted_past_records_a_gap() {
    let etcd = EtcdServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let endpoint = etcd.endpoint();
    let (server, _, cut, restored) =
        cut_and_restore(
            etcd_via(&etcd),
            ETCD_HOLD,
            dir.path(),
            || async move { compact(&endpoint) },
        )
        .await;
    let gap = gap(dir.path()).await;
    let window = lockscope_model::history::Gap::of(&gap).expect("a gap's window");
    assert!(
        window.from >= cut && window.from <= restored,
        "{DOCS_OUTAGE_GAP}: from the outage ({} vs cut at {cut}, restored at {restored})",
        window.from
    );
    assert!(
        window.to >= restored,
        "{DOCS_OUTAGE_GAP}: to the snapshot after the reconnect"
    );
    assert!(
        gap.detail.contains("not watching from the store's outage"),
        "{DOCS_OUTAGE_GAP}: {}",
        gap.detail
    );
    let m = server.metrics().await;
    assert_eq!(m.sample("lockscope_history_outage_gaps_total"), 1.0, "{}", m.text);
    assert_eq!(m.sample("lockscope_history_restart_gaps_total"), 0.0);
}

/// A SQL store keeps no history of its changes: its observer reads the whole
/// table again at every reconnect, so an outage always leaves a gap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_outage_records_a_gap() {
    let pg = lockscope_store::testing::PgServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let upstream = pg
        .url()
        .split('@')
        .nth(1)
        .unwrap()
        .split('/')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let via = (upstream, pg.url(), |proxy: &str| {
        format!("postgres://lockscope@{proxy}/postgres")
    });
    let (server, _, cut, restored) = cut_and_restore(via, SQL_HOLD, dir.path(), || async {}).await;
    let gap = gap(dir.path()).await;
    let window = lockscope_model::history::Gap::of(&gap).expect("a gap's window");
    assert!(
        window.from >= cut && window.to >= restored,
        "{DOCS_OUTAGE_GAP}: {window:?}"
    );
    assert!(
        gap.detail.contains("not watching from the store's outage"),
        "{DOCS_OUTAGE_GAP}: {}",
        gap.detail
    );
    let m = server.metrics().await;
    assert_eq!(m.sample("lockscope_history_outage_gaps_total"), 1.0, "{}", m.text);
}
