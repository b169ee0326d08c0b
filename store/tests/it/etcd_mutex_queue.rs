//! The `etcd-mutex:` fleet's waiters in the order etcd's mutex grants them
//! (create revision), with their wait ages, and a second independent client
//! (Python over etcd's v3 JSON gateway, `testing::etcd_gateway`) seen as a
//! holder and as a waiter like `etcdctl lock`.

use lockscope_model::detail::LockDetail;
use lockscope_model::fleet::etcd_mutex::EtcdMutexLock;
use lockscope_model::{FleetState, LockBody};
use lockscope_store::now_ms;
use lockscope_store::spec::StoreSpec;
use lockscope_store::testing::etcd_gateway::GatewayMutex;
use lockscope_store::testing::etcdctl::{lease_in, Etcdctl};
use lockscope_store::testing::observer_contract::Watched;
use lockscope_store::testing::EtcdServer;

fn waiters(s: &FleetState) -> Vec<String> {
    s.waiters_of("q").map(str::to_string).collect()
}

fn queue(s: &FleetState) -> Vec<String> {
    LockDetail::build(s, "q", |_| (0, true))
        .waiters
        .into_iter()
        .map(|w| w.session)
        .collect()
}

#[tokio::test]
async fn waiters_are_listed_in_create_revision_order_and_the_gateway_client_is_a_contender() {
    let etcd = EtcdServer::start().await;
    let ep = etcd.endpoint();
    let spec = StoreSpec::parse(&format!("etcd-mutex:{ep}#/mx/")).unwrap();
    let mut w = Watched::start(&spec);
    w.until("live and empty", |s| s.locks().count() == 0).await;
    let t0 = now_ms();

    // The holder: the Python gateway client, shown with its lease and the
    // fence concurrency.Mutex hands out (its key's create revision).
    let mut holder = GatewayMutex::lock(&ep, "/mx/q", None).await;
    assert_eq!(holder.acquired().await, holder.key);
    let lease = lease_in(&holder.key);
    let mut client = etcd_client::Client::connect([ep.as_str()], None).await.unwrap();
    let kv = client.get(holder.key.as_str(), None).await.unwrap().kvs()[0].clone();
    assert_eq!(format!("{:x}", kv.lease()), lease, "the key is on the lease it names");
    w.until("the gateway client holds", |s| {
        s.get("q").is_some_and(|e| e.holder_session() == Some(lease.as_str()))
    })
    .await;
    let entry = w.state.get("q").unwrap().clone();
    assert_eq!(
        entry.fence,
        kv.create_revision(),
        "the fence is the key's create revision"
    );
    match &entry.body {
        LockBody::Foreign { lease: Some(l), .. } => {
            assert_eq!((l.id.as_str(), l.granted_s), (lease.as_str(), 30), "{l:?}");
            assert_eq!(l.keys, vec![holder.key.clone()]);
        }
        other => panic!("the holder's lease is read: {other:?}"),
    }

    // Waiters started in a known order: etcdctl, the gateway client on lease
    // 1, etcdctl, etcdctl. etcd's own lease ids grow with time, so lease 1
    // (hex "1") is the one whose session id sorts out of the queue's order.
    let mut started = Vec::new();
    let mut a = Etcdctl::lock(&ep, "/mx/q");
    w.until("a waits", |s| waiters(s).len() == 1).await;
    started.push(waiters(&w.state)[0].clone());
    let mut one = GatewayMutex::lock(&ep, "/mx/q", Some(1)).await;
    started.push("1".to_string());
    w.until("the gateway client waits", |s| waiters(s).len() == 2).await;
    let mut others = Vec::new();
    for n in 3..=4 {
        others.push(Etcdctl::lock(&ep, "/mx/q"));
        w.until("another waits", |s| waiters(s).len() == n).await;
        let new = waiters(&w.state).into_iter().find(|s| !started.contains(s)).unwrap();
        started.push(new);
    }
    assert_ne!(
        waiters(&w.state),
        started,
        "the session ids do not sort in the queue's order"
    );

    // docs/operations.md: "waiters in create-revision order (the order the
    // library grants them the lock), each with its wait age".
    assert_eq!(
        queue(&w.state),
        started,
        "the lock page lists the queue in create-revision order"
    );
    let queued = EtcdMutexLock::of(w.state.get("q").unwrap()).expect("the queue").clone();
    let revs: Vec<i64> = queued.waiters.iter().map(|q| q.create_revision).collect();
    assert!(revs.windows(2).all(|p| p[0] < p[1]), "{revs:?}");
    let detail = LockDetail::build(&w.state, "q", |_| (0, true));
    let since: Vec<i64> = detail.waiters.iter().map(|d| d.since).collect();
    assert!(
        detail
            .waiters
            .iter()
            .all(|d| !d.at_least && (t0..=now_ms()).contains(&d.since)),
        "each wait dates from its key's creation, seen live: {:?}",
        detail.waiters
    );
    assert!(since.windows(2).all(|p| p[0] <= p[1]), "{since:?}");

    // The queue is the grant order: the holder's unlock hands the lock to the
    // first waiter, and the gateway client is next.
    holder.stop().await;
    let key_a = a.acquired().await;
    assert_eq!(lease_in(&key_a), started[0]);
    w.until("a holds, the rest queue", |s| {
        s.get("q")
            .is_some_and(|e| e.holder_session() == Some(started[0].as_str()))
            && queue(s) == started[1..]
    })
    .await;
    assert!(!one.acquires_within(std::time::Duration::from_millis(200)).await);
    a.stop().await;
    assert_eq!(one.acquired().await, "/mx/q/1");
    w.until("the gateway client holds", |s| {
        s.get("q").is_some_and(|e| e.holder_session() == Some("1")) && queue(s) == started[2..]
    })
    .await;
    one.stop().await;
    for o in others {
        o.stop().await;
    }
}
