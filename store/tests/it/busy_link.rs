//! A busy store is not a dead one (issues 24 and 26): an etcd that keeps
//! delivering watch events over a slow link, so that the observer's liveness
//! probe (on the same connection) is answered only seconds later, behind them,
//! never reads unreachable (`store/src/liveness.rs`).

use std::time::Duration;

use etcd_client::Client;
use lockscope_model::StoreStatus;
use lockscope_store::etcd::{EtcdConfig, EtcdObserver};
use lockscope_store::testing::{EtcdServer, TcpProxy};
use lockscope_store::{Observer, ObserverEvent};
use tokio::sync::mpsc;
use tokio::time::Instant;

/// Statuses the observer reports until `until`; panics if it stops.
async fn statuses(rx: &mut mpsc::Receiver<ObserverEvent>, until: Instant) -> Vec<StoreStatus> {
    let mut seen = Vec::new();
    while let Ok(ev) = tokio::time::timeout_at(until, rx.recv()).await {
        if let ObserverEvent::Status(s) = ev.expect("observer stopped") {
            seen.push(s);
        }
    }
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_delivering_events_over_a_slow_link_is_never_called_unreachable() {
    let etcd = EtcdServer::start().await;
    let proxy = TcpProxy::start(etcd.addr()).await;
    let cfg = EtcdConfig::new(vec![proxy.endpoint()], "/busy/");
    let (tx, mut rx) = mpsc::channel(1024);
    tokio::spawn(Box::new(EtcdObserver::new(cfg)).run(tx));
    let live = |s: &StoreStatus| matches!(s, StoreStatus::Live { .. });
    let deadline = Instant::now() + Duration::from_secs(20);
    while !statuses(&mut rx, Instant::now() + Duration::from_millis(100))
        .await
        .iter()
        .any(live)
    {
        assert!(Instant::now() < deadline, "the observer never went live");
    }

    // The store writes about 4 MB/s of changes (written beside the proxy), the
    // link brings the observer 256 KB/s of them: the watch never stops
    // delivering, and the probe's answer waits behind seconds of backlog.
    proxy.throttle(256 * 1024);
    let writers: Vec<_> = (0..4)
        .map(|w| {
            let endpoint = etcd.endpoint();
            tokio::spawn(async move {
                let mut client = Client::connect([endpoint], None).await.unwrap();
                let value = "x".repeat(4096);
                let until = Instant::now() + Duration::from_secs(5);
                let mut i = 0;
                while Instant::now() < until {
                    client
                        .put(format!("/busy/locks/w{w}-{i}"), value.as_str(), None)
                        .await
                        .unwrap();
                    i += 1;
                }
            })
        })
        .collect();
    let seen = statuses(&mut rx, Instant::now() + Duration::from_secs(8)).await;
    for w in writers {
        w.await.unwrap();
    }
    assert!(
        !seen.iter().any(|s| matches!(s, StoreStatus::Unreachable { .. })),
        "\"a probe fails by timeout only once PROBE_TIMEOUT has passed with neither its answer \
         nor anything else from the store since it was sent\": {seen:?}"
    );
    proxy.restore();
}
