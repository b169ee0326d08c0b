//! The lock protocol's contract suite (`lockscope_store::testing::contract`)
//! against a real etcd, plus what only a network store can show: a store that
//! hangs still cannot make `lock` overrun its deadline.

use std::time::Duration;

use lockscope_store::client::Session;
use lockscope_store::etcd::{EtcdConfig, EtcdLocks};
use lockscope_store::spec::StoreSpec;
use lockscope_store::testing::contract::{self, opts, quiet};
use lockscope_store::testing::observer_contract;
use lockscope_store::testing::{EtcdServer, TcpProxy};
use lockscope_store::StoreError;
use tokio::time::Instant;

async fn connect(endpoint: String) -> EtcdLocks {
    let mut cfg = EtcdConfig::new(vec![endpoint], "/contract/");
    cfg.request_timeout = Duration::from_secs(2);
    EtcdLocks::connect(cfg).await.unwrap()
}

#[tokio::test]
async fn exclusive_acquire_and_fenced_release() {
    let etcd = EtcdServer::start().await;
    contract::exclusive_acquire_and_fenced_release(connect(etcd.endpoint()).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_exclusion_16_workers() {
    let etcd = EtcdServer::start().await;
    let increments = contract::mutual_exclusion_increments();
    contract::mutual_exclusion(async || connect(etcd.endpoint()).await, 16, increments).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_is_not_polling() {
    let etcd = EtcdServer::start().await;
    // A watch per waiter, no request while the lock is held: allow one per waiter.
    contract::waiting_is_not_polling(
        async || connect(etcd.endpoint()).await,
        async || etcd.grpc_requests().await,
        10,
        Duration::from_secs(3),
        10,
    )
    .await;
}

/// A waiter watches from the current revision (etcd's synced watcher group,
/// not the 100 ms catch-up of the unsynced one) and then looks: a release
/// that lands between its busy answer and its watch must still wake it, and
/// so must a new holder made in that gap. Each wait below is given 60 s; one
/// that misses the release would sit out the whole of it.
#[tokio::test]
async fn a_release_before_the_waiters_watch_is_not_missed() {
    use lockscope_store::protocol::{LockStore, WaitFrom};
    let etcd = EtcdServer::start().await;
    let store = connect(etcd.endpoint()).await;
    let a = Session::open(store.clone(), quiet("a")).await.unwrap();
    let b = Session::open(store.clone(), quiet("b")).await.unwrap();
    let soon = Duration::from_secs(10);
    let long = Duration::from_secs(60);

    // Released before the wait starts.
    let g = a.lock("gap/one", opts("first")).await.unwrap();
    let seen = store.get("gap/one").await.unwrap().unwrap().revision;
    assert!(g.unlock().await.unwrap());
    tokio::time::timeout(soon, store.wait_released("gap/one", WaitFrom(seen), long))
        .await
        .expect("a release before the watch wakes the waiter at once")
        .unwrap();

    // Released and taken again by someone else before the wait starts.
    let g = a.lock("gap/two", opts("first")).await.unwrap();
    let seen = store.get("gap/two").await.unwrap().unwrap().revision;
    assert!(g.unlock().await.unwrap());
    let again = b.lock("gap/two", opts("second")).await.unwrap();
    tokio::time::timeout(soon, store.wait_released("gap/two", WaitFrom(seen), long))
        .await
        .expect("a new holder since the busy answer wakes the waiter at once")
        .unwrap();
    assert!(again.unlock().await.unwrap());

    // Still held: the wait lasts until the release, which wakes it.
    let g = a.lock("gap/three", opts("first")).await.unwrap();
    let seen = store.get("gap/three").await.unwrap().unwrap().revision;
    let waiting = {
        let store = store.clone();
        tokio::spawn(async move { store.wait_released("gap/three", WaitFrom(seen), long).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiting.is_finished(), "a held lock keeps its waiter waiting");
    assert!(g.unlock().await.unwrap());
    tokio::time::timeout(soon, waiting)
        .await
        .expect("the release wakes the waiter")
        .unwrap()
        .unwrap();
}

#[tokio::test]
async fn heartbeat_extends_and_blacklist_refuses() {
    let etcd = EtcdServer::start().await;
    contract::heartbeat_extends_and_blacklist_refuses(connect(etcd.endpoint()).await).await;
}

#[tokio::test]
async fn only_the_holder_releases() {
    let etcd = EtcdServer::start().await;
    contract::only_the_holder_releases(connect(etcd.endpoint()).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlapping_batches_from_4_workers() {
    let etcd = EtcdServer::start().await;
    contract::overlapping_batches(async || connect(etcd.endpoint()).await, 4).await;
}

#[tokio::test]
async fn deadlines_are_exact() {
    let etcd = EtcdServer::start().await;
    contract::deadlines_are_exact(connect(etcd.endpoint()).await, Duration::from_millis(500)).await;
}

#[tokio::test]
async fn a_hanging_store_cannot_stretch_a_deadline() {
    let etcd = EtcdServer::start().await;
    let proxy = TcpProxy::start(etcd.addr()).await;
    let session = Session::open(connect(proxy.endpoint()).await, quiet("hang"))
        .await
        .unwrap();
    proxy.freeze();
    let started = Instant::now();
    let r = session
        .lock("hang/x", opts("never").deadline(Duration::from_secs(1)))
        .await;
    let took = started.elapsed();
    assert!(matches!(r, Err(StoreError::Deadline { .. })), "{:?}", r.err());
    assert!(took < Duration::from_millis(1500), "returned after {took:?}");
}

#[tokio::test]
async fn an_unreachable_store_is_a_clear_error() {
    let port = lockscope_store::testing::free_port();
    let err = match Session::open(connect(format!("http://127.0.0.1:{port}")).await, quiet("nobody")).await {
        Err(e) => e,
        Ok(_) => panic!("opened a session on a closed port"),
    };
    assert!(
        matches!(err, StoreError::Unreachable { .. } | StoreError::Timeout(_)),
        "{err}"
    );
}

#[tokio::test]
async fn force_release_races_reacquire_1000_rounds() {
    let etcd = EtcdServer::start().await;
    contract::force_release_races_reacquire(connect(etcd.endpoint()).await, 1000).await;
}

// The protocol's answers (docs/protocol.md; `contract_rules`), one etcd each.
macro_rules! rule_cases {
    ($($case:ident),*) => {$(
        #[tokio::test]
        async fn $case() {
            let etcd = EtcdServer::start().await;
            contract::$case(connect(etcd.endpoint()).await).await;
        }
    )*};
}

rule_cases!(
    same_session_twice_is_a_conflict,
    dropping_a_guard_releases_at_once,
    close_releases_a_blacklisted_sessions_locks,
    purpose_limit_counts_escaped_bytes,
    version_zero_is_malformed,
    no_extend_after_the_trust_window,
    reregistration_keeps_the_session,
    backtrace_starts_at_the_callers_line
);

fn spec(etcd: &EtcdServer) -> StoreSpec {
    StoreSpec::Etcd {
        endpoints: vec![etcd.endpoint()],
        prefix: Some("/contract/".into()),
    }
}

macro_rules! observer_cases {
    ($($case:ident),*) => {$(
        #[tokio::test]
        async fn $case() {
            let etcd = EtcdServer::start().await;
            observer_contract::$case(spec(&etcd)).await;
        }
    )*};
}

observer_cases!(
    observer_snapshot,
    observer_update,
    observer_waiter,
    observer_session,
    observer_blacklist,
    observer_blacklisted_session_goes,
    observer_malformed
);
