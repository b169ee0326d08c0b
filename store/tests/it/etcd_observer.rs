//! The etcd observer against a real etcd: paged snapshots, resuming a watch after a
//! disconnect, and resynchronising after the history it needed was compacted.

use std::time::Duration;

use lockscope_model::{FleetEvent, FleetState, LockBody, StoreStatus};
use lockscope_store::etcd::{EtcdConfig, EtcdLocks, EtcdObserver};
use lockscope_store::protocol::LockStore;
use lockscope_store::testing::{take, EtcdServer, TcpProxy};
use lockscope_store::{Observer, ObserverEvent};
use tokio::sync::mpsc;

const PREFIX: &str = "/lockscope-test/";

fn config(endpoint: String) -> EtcdConfig {
    let mut cfg = EtcdConfig::new(vec![endpoint], PREFIX);
    cfg.span_read_max = 64; // many spans for a thousand locks
    cfg.backoff_min = Duration::from_millis(50);
    cfg.backoff_max = Duration::from_millis(200);
    cfg.request_timeout = Duration::from_secs(2);
    cfg
}

/// What the test side of the observer sees: the table, and everything received.
struct Watcher {
    rx: mpsc::Receiver<ObserverEvent>,
    state: FleetState,
    status: Option<StoreStatus>,
    resets: usize,
}

impl Watcher {
    fn start(cfg: EtcdConfig) -> Watcher {
        let (tx, rx) = mpsc::channel(64);
        tokio::spawn(Box::new(EtcdObserver::new(cfg)).run(tx));
        Watcher {
            rx,
            state: FleetState::default(),
            status: None,
            resets: 0,
        }
    }

    /// Applies observer events until `done` holds (10 s at most).
    async fn until(&mut self, what: &str, done: impl Fn(&Watcher) -> bool) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while !done(self) {
            let ev = tokio::time::timeout_at(deadline, self.rx.recv())
                .await
                .unwrap_or_else(|_| {
                    panic!(
                        "timed out waiting for {what}; status {:?}, {} locks",
                        self.status,
                        self.state.len()
                    )
                })
                .expect("observer stopped");
            match ev {
                ObserverEvent::Status(s) => self.status = Some(s),
                ObserverEvent::Events(evs) => {
                    for e in evs {
                        self.resets += matches!(e, FleetEvent::Reset { .. }) as usize;
                        self.state.apply(e);
                    }
                }
                ObserverEvent::Missed { .. } => panic!("history replay sent unasked"),
                ObserverEvent::Looked(_) => {}
            }
        }
    }

    fn live(&self) -> bool {
        matches!(self.status, Some(StoreStatus::Live { .. }))
    }

    fn unreachable(&self) -> bool {
        matches!(self.status, Some(StoreStatus::Unreachable { .. }))
    }

    fn table(&self) -> Vec<(String, i64)> {
        self.state.locks().map(|e| (e.name.clone(), e.fence)).collect()
    }
}

#[tokio::test]
async fn first_snapshot_holds_every_preexisting_lock_and_shows_malformed_ones() {
    let etcd = EtcdServer::start().await;
    let locks = EtcdLocks::connect(config(etcd.endpoint())).await.unwrap();
    let mut want = Vec::new();
    for i in 0..1000 {
        let name = format!("job-{i:04}");
        let fence = take(&locks, &name).await;
        want.push((name, fence));
    }
    locks.put_raw("zz-garbage", b"{not json").await.unwrap();

    let mut w = Watcher::start(config(etcd.endpoint()));
    w.until("the first snapshot", |w| w.resets == 1).await;
    assert_eq!(w.state.len(), 1001);
    let got: Vec<(String, i64)> = w.table().into_iter().filter(|(n, _)| n != "zz-garbage").collect();
    assert_eq!(got, want, "names and fencing tokens of all 1,000 locks");
    match &w.state.get("zz-garbage").unwrap().body {
        LockBody::Malformed { raw, error } => {
            assert_eq!(raw, b"{not json");
            assert!(!error.is_empty());
        }
        other => panic!("garbage shown as {other:?}"),
    }
    w.until("live", Watcher::live).await;
}

#[tokio::test]
async fn a_disconnect_resumes_the_watch_without_a_new_snapshot() {
    let etcd = EtcdServer::start().await;
    let proxy = TcpProxy::start(etcd.addr()).await;
    let direct = EtcdLocks::connect(config(etcd.endpoint())).await.unwrap();
    let a = take(&direct, "a").await;
    let b = take(&direct, "b").await;

    let mut w = Watcher::start(config(proxy.endpoint()));
    w.until("a and b, live", |w| w.live() && w.state.len() == 2).await;

    proxy.cut();
    w.until("unreachable", Watcher::unreachable).await;
    assert!(direct.release("b", b).await.unwrap());
    let c = take(&direct, "c").await;
    proxy.restore();

    w.until("b gone and c shown", |w| {
        w.live() && w.table() == vec![("a".into(), a), ("c".into(), c)]
    })
    .await;
    assert_eq!(w.resets, 1, "resumed from the last revision: no second snapshot");
}

#[tokio::test]
async fn a_compaction_while_disconnected_ends_in_the_correct_table() {
    let etcd = EtcdServer::start().await;
    let proxy = TcpProxy::start(etcd.addr()).await;
    let direct = EtcdLocks::connect(config(etcd.endpoint())).await.unwrap();
    let keep = take(&direct, "keep").await;
    let gone = take(&direct, "gone").await;
    let moved = take(&direct, "moved").await;

    let mut w = Watcher::start(config(proxy.endpoint()));
    w.until("three locks, live", |w| w.live() && w.state.len() == 3).await;

    proxy.cut();
    w.until("unreachable", Watcher::unreachable).await;
    assert!(direct.release("gone", gone).await.unwrap());
    assert!(direct.release("moved", moved).await.unwrap());
    let moved2 = take(&direct, "moved").await;
    let new = take(&direct, "new").await;
    direct.compact(new).await.unwrap();
    proxy.restore();

    let want = vec![("keep".into(), keep), ("moved".into(), moved2), ("new".into(), new)];
    w.until("the table after compaction", |w| w.live() && w.table() == want)
        .await;
    assert_eq!(w.resets, 2, "the compacted history forced a fresh snapshot");

    // And the watch continues after the resync.
    assert!(direct.release("keep", keep).await.unwrap());
    w.until("keep released", |w| w.state.get("keep").is_none()).await;
}

#[tokio::test]
async fn an_unreachable_store_is_reported_not_hung() {
    let port = lockscope_store::testing::free_port();
    let mut w = Watcher::start(config(format!("http://127.0.0.1:{port}")));
    w.until("unreachable", Watcher::unreachable).await;
    match &w.status {
        Some(StoreStatus::Unreachable {
            error,
            detail,
            retry_at,
            since,
        }) => {
            // One line naming what was tried and the root cause; the chain
            // behind it as the detail (src/summary.rs).
            assert_eq!(
                error,
                &format!("cannot connect to 127.0.0.1:{port}: connection refused")
            );
            assert!(detail.lines().count() > 1 && detail.contains("refused"), "{detail}");
            assert!(retry_at >= since);
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn waiters_are_observed_while_they_wait() {
    use lockscope_store::testing::contract::{opts, quiet};
    let etcd = EtcdServer::start().await;
    let store = EtcdLocks::connect(config(etcd.endpoint())).await.unwrap();
    let holder = lockscope_store::client::Session::open(store.clone(), quiet("holder"))
        .await
        .unwrap();
    let waiter = lockscope_store::client::Session::open(store.clone(), quiet("waiter"))
        .await
        .unwrap();
    let held = holder.lock("w/x", opts("hold")).await.unwrap();
    let mut w = Watcher::start(config(etcd.endpoint()));
    w.until("the lock, live", |w| w.live() && w.state.get("w/x").is_some())
        .await;

    let id = waiter.id().to_string();
    // The task returns the guard: dropping it would release the lock.
    let blocked = tokio::spawn(async move { waiter.lock("w/x", opts("wait")).await });
    w.until("the waiter", |w| w.state.waiters_of("w/x").eq([id.as_str()]))
        .await;
    assert!(held.unlock().await.unwrap());
    let guard = blocked.await.unwrap().unwrap();
    let fence = guard.fence();
    w.until("the waiter gone and holding", |w| {
        w.state.waiters_of("w/x").next().is_none() && w.state.get("w/x").is_some_and(|e| e.fence == fence)
    })
    .await;
}

/// A snapshot cut into spans is exactly the table at its revision: every key once,
/// nothing written after it, whatever the names (shared prefixes, `/`, multibyte
/// UTF-8, a name that is a prefix of others), while a writer keeps changing keys.
#[tokio::test]
async fn a_cut_snapshot_is_exactly_the_table_at_its_revision() {
    let etcd = EtcdServer::start().await;
    let mut cfg = config(etcd.endpoint());
    cfg.span_read_max = 40; // cut deep: thousands of spans
    snapshot_is_exactly_the_table(&etcd, cfg).await;
}

/// Spans whose response would exceed the size accepted are read in pages instead.
#[tokio::test]
async fn spans_too_large_for_one_response_are_paged() {
    let etcd = EtcdServer::start().await;
    let mut cfg = config(etcd.endpoint());
    cfg.span_read_max = 5_000;
    cfg.response_max_bytes = 16 << 10; // a few hundred keys
    cfg.page_size = 40;
    snapshot_is_exactly_the_table(&etcd, cfg).await;
}

async fn snapshot_is_exactly_the_table(etcd: &EtcdServer, cfg: EtcdConfig) {
    use etcd_client::{Client, GetOptions, Txn, TxnOp};
    let mut names: Vec<String> = Vec::new();
    for i in 0..12_000 {
        names.push(match i % 5 {
            0 => format!("billing/invoices/{i:06}"),
            1 => format!("é/ü/{i}"),
            2 => format!("{}{i}", "shared-".repeat(8)),
            3 => format!("日本/ロック/{i:05}"),
            _ => format!("b{i}"),
        });
    }
    names.push("billing".into()); // equal to a span's prefix
    names.push("billing/".into());
    let client = Client::connect([etcd.endpoint()], None).await.unwrap();
    for chunk in names.chunks(128) {
        let ops: Vec<TxnOp> = chunk
            .iter()
            .map(|n| TxnOp::put(format!("{PREFIX}locks/{n}"), b"{}".to_vec(), None))
            .collect();
        client.kv_client().txn(Txn::new().and_then(ops)).await.unwrap();
    }
    // A writer keeps adding and deleting keys while the snapshot is taken.
    let writer = {
        let mut kv = client.kv_client();
        tokio::spawn(async move {
            for i in 0.. {
                let key = format!("{PREFIX}locks/billing/late-{i}");
                kv.put(key.clone(), b"{}".to_vec(), None).await.unwrap();
                if i % 2 == 0 {
                    kv.delete(key, None).await.unwrap();
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        })
    };
    let mut w = Watcher::start(cfg);
    let reset = loop {
        match w.rx.recv().await.expect("observer stopped") {
            ObserverEvent::Events(evs) => match evs.into_iter().next() {
                Some(FleetEvent::Reset(snap)) => break (snap.revision, snap.locks),
                _ => continue,
            },
            ObserverEvent::Status(StoreStatus::Unreachable { error, .. }) => panic!("the snapshot failed: {error}"),
            ObserverEvent::Status(_) | ObserverEvent::Looked(_) => {}
            ObserverEvent::Missed { .. } => panic!("history replay sent unasked"),
        }
    };
    writer.abort();
    let (revision, locks) = reset;
    // The truth at that revision, read in one plain range.
    let truth = client
        .kv_client()
        .get(
            format!("{PREFIX}locks/"),
            Some(GetOptions::new().with_prefix().with_revision(revision)),
        )
        .await
        .unwrap();
    let want: Vec<(String, i64)> = truth
        .kvs()
        .iter()
        .map(|kv| (kv.key_str().unwrap()[PREFIX.len() + 6..].to_string(), kv.mod_revision()))
        .collect();
    let mut got: Vec<(String, i64)> = locks.iter().map(|e| (e.name.clone(), e.revision)).collect();
    got.sort();
    assert_eq!(got.len(), want.len(), "every key exactly once");
    assert_eq!(got, want);
    assert!(want.len() >= names.len());
}
