//! The demo fleet against a real etcd: it takes locks, contends on the hot lock,
//! workers die and leave their locks behind, and live workers leave nothing.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use lockscope::demo::{self, DemoConfig, Keyspace};
use lockscope_model::LockBody;
use lockscope_store::etcd::{EtcdConfig, EtcdLocks};
use lockscope_store::protocol::LockStore;
use lockscope_store::testing::EtcdServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_fleet_contends_dies_and_cleans_up_after_its_live_workers() {
    let etcd = EtcdServer::start().await;
    let store = EtcdLocks::connect(EtcdConfig::new(vec![etcd.endpoint()], "/lockscope-demo-it/"))
        .await
        .unwrap();
    let cfg = DemoConfig {
        workers: 4,
        keys: 6,
        hot_keys: 1,
        hot_share: 0.5,
        hold_mean: Duration::from_millis(100),
        die_rate: 0.2,
        duration: Some(Duration::from_secs(3)),
        seed: Some(17),
        ..DemoConfig::default()
    };
    let started = Instant::now();
    let stats = demo::run(store.clone(), cfg.clone(), std::future::pending())
        .await
        .unwrap();
    let took = started.elapsed();
    println!("{stats} (swept {}) in {took:?}", stats.swept);
    assert!(took < Duration::from_secs(6), "demo took {took:?} to stop");

    assert!(stats.acquired > 0, "{stats}");
    assert!(stats.conflicts > 0, "no contention: {stats}");
    assert!(stats.deaths >= 1, "nobody died: {stats}");
    assert_eq!(stats.abandoned.len() as u64, stats.deaths);
    assert_eq!(stats.errors, 0, "{stats}");

    // Every lock a dead worker left is still held by that acquisition: it waits
    // for the unlocker.
    let dead: HashSet<&str> = stats.abandoned.iter().map(|a| a.session.as_str()).collect();
    for a in &stats.abandoned {
        let entry = store
            .get(&a.name)
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("abandoned {} is gone", a.name));
        assert_eq!(entry.fence, a.fence, "{} was re-acquired", a.name);
        let LockBody::Held(record) = &entry.body else {
            panic!("{} is malformed", a.name)
        };
        assert_eq!(*record.session, *a.session);
    }
    // And nothing else: live workers released (or swept) theirs.
    let keyspace = Keyspace::new(cfg.keys, cfg.hot_keys);
    let mut held = 0;
    for key in &keyspace.keys {
        if let Some(entry) = store.get(&key.name).await.unwrap() {
            let LockBody::Held(record) = &entry.body else {
                panic!("{} is malformed", key.name)
            };
            assert!(
                dead.contains(&*record.session),
                "{} left held by live session {}",
                key.name,
                record.session
            );
            held += 1;
        }
    }
    assert_eq!(held, stats.abandoned.len(), "one abandoned lock per dead worker");
}
