//! The `etcd-mutex:` fleet against a real etcd, with locks taken by real
//! `etcdctl lock` and `etcdctl elect` processes (Debian's etcd-client): what
//! the observer shows through the hub's reducer, the guarded force-release,
//! and the fresh read after a compaction past the watch.

use std::time::{Duration, Instant};

use lockscope_model::{FleetState, LockBody};
use lockscope_store::fleet::Release;
use lockscope_store::spec::StoreSpec;
use lockscope_store::testing::etcdctl::{lease_in, Etcdctl};
use lockscope_store::testing::observer_contract::Watched;
use lockscope_store::testing::{EtcdServer, TcpProxy};

fn holder(s: &FleetState, name: &str) -> Option<(String, i64)> {
    let e = s.get(name)?;
    Some((e.holder_session()?.to_string(), e.fence))
}

fn waiters(s: &FleetState, name: &str) -> Vec<String> {
    s.waiters_of(name).map(str::to_string).collect()
}

fn spec(endpoint: &str) -> StoreSpec {
    StoreSpec::parse(&format!("etcd-mutex:{endpoint}#/mx/")).unwrap()
}

#[tokio::test]
async fn etcdctl_locks_are_shown_handed_over_and_guarded_released() {
    let etcd = EtcdServer::start().await;
    let ep = etcd.endpoint();
    let spec = spec(&ep);
    let fleet = spec.open().unwrap();
    let mut w = Watched::start(&spec);
    w.until("live and empty", |s| s.locks().count() == 0).await;

    // A lock held by `etcdctl lock /mx/jobs/nightly` appears as `jobs/nightly`
    // with its holder's lease, TTL and fence within 1 s.
    let mut first = Etcdctl::lock(&ep, "/mx/jobs/nightly");
    let key = first.acquired().await;
    let t0 = Instant::now();
    let lease1 = lease_in(&key);
    w.until("the holder", |s| {
        holder(s, "jobs/nightly").is_some_and(|h| h.0 == lease1)
    })
    .await;
    assert!(t0.elapsed() < Duration::from_secs(1), "shown after {:?}", t0.elapsed());
    let entry = w.state.get("jobs/nightly").unwrap().clone();
    match &entry.body {
        LockBody::Foreign {
            session,
            lease,
            written_at,
            proposal,
            key: _,
            detail: _,
        } => {
            assert_eq!(session.as_deref(), Some(lease1.as_str()));
            let lease = lease.as_ref().expect("its lease read with LeaseTimeToLive");
            assert_eq!(lease.id, lease1);
            assert_eq!(lease.granted_s, 10, "etcdctl lock's session TTL");
            assert_eq!(
                (lease.keys.clone(), lease.keys_total),
                (vec![key.clone()], 1),
                "the keys a revoke would end"
            );
            assert!((1..=10).contains(&lease.ttl_s), "{lease:?}");
            assert_eq!(*written_at, None, "unknown, never invented");
            assert_eq!(*proposal, None, "a mutex key holds no value");
        }
        other => panic!("{other:?}"),
    }
    assert!(entry.record().is_none(), "no lockscope record is invented");

    // A second `etcdctl lock` of the same name is its waiter.
    let mut second = Etcdctl::lock(&ep, "/mx/jobs/nightly");
    w.until("the waiter", |s| waiters(s, "jobs/nightly").len() == 1).await;
    let lease2 = waiters(&w.state, "jobs/nightly").remove(0);
    assert_ne!(lease2, lease1);
    assert!(!second.acquires_within(Duration::from_millis(300)).await);

    // Stopping the holder hands the lock over, and the table follows.
    first.stop().await;
    assert_eq!(lease_in(&second.acquired().await), lease2);
    w.until("handed over", |s| {
        holder(s, "jobs/nightly").is_some_and(|h| h.0 == lease2) && waiters(s, "jobs/nightly").is_empty()
    })
    .await;
    let fence2 = holder(&w.state, "jobs/nightly").unwrap().1;
    assert!(fence2 > entry.fence, "the new holder's key is newer");

    // A third contender waits behind the second.
    let mut third = Etcdctl::lock(&ep, "/mx/jobs/nightly");
    w.until("the third waits", |s| waiters(s, "jobs/nightly").len() == 1)
        .await;
    let lease3 = waiters(&w.state, "jobs/nightly").remove(0);

    // A stale fence answers Changed with the current holder, deleting nothing.
    match fleet.release_seen("jobs/nightly", entry.fence, None).await.unwrap() {
        Release::Changed(now) => {
            assert_eq!(now.fence, fence2);
            assert_eq!(now.holder_session(), Some(lease2.as_str()));
        }
        other => panic!("a stale fence released: {other:?}"),
    }
    assert!(!third.acquires_within(Duration::from_millis(300)).await);

    // The fence seen releases exactly that holder: the waiter's etcdctl
    // acquires, and the delete's revision is the one the observer reports.
    let released = fleet.release_seen("jobs/nightly", fence2, None).await.unwrap();
    let Release::Released(removed) = released else {
        panic!("not released: {released:?}")
    };
    assert_eq!(lease_in(&third.acquired().await), lease3);
    let events = w
        .until("the third holds", |s| {
            holder(s, "jobs/nightly").is_some_and(|h| h.0 == lease3)
        })
        .await;
    assert!(
        events.iter().any(|e| matches!(e,
            lockscope_model::FleetEvent::Remove { name, revision }
                if name == "jobs/nightly" && Some(*revision) == removed.revision)),
        "the release is the delete the observer reports (so the history credits it): {events:?}"
    );
    // Released again with the same fence: nothing (the lock is another acquisition).
    assert!(matches!(
        fleet.release("jobs/nightly", fence2).await.unwrap(),
        Release::Changed(_)
    ));

    // Blacklisting revokes the holder's lease: its keys go, the lock with them.
    let entry = lockscope_model::record::BlacklistRecord {
        v: lockscope_model::record::RECORD_VERSION,
        session: lease3.clone(),
        by: "test".into(),
        reason: "test".into(),
        at: 0,
    };
    fleet.blacklist(&entry).await.unwrap();
    w.until("released by the revoke", |s| s.get("jobs/nightly").is_none())
        .await;
    assert!(!fleet.session_registered(&lease3).await.unwrap());
    drop(second);
    drop(third);
}

#[tokio::test]
async fn an_elections_proposal_and_a_stray_key_are_shown() {
    let etcd = EtcdServer::start().await;
    let ep = etcd.endpoint();
    let spec = spec(&ep);
    let mut w = Watched::start(&spec);
    let mut leader = Etcdctl::start(&ep, &["elect", "/mx/leader", "replica-1"]);
    leader.acquired().await;
    w.until("the leader", |s| s.get("leader").is_some()).await;
    match &w.state.get("leader").unwrap().body {
        LockBody::Foreign { proposal, .. } => assert_eq!(proposal.as_deref(), Some("replica-1")),
        other => panic!("{other:?}"),
    }
    // A key that is not NAME/<lease id in hex> is shown as malformed, never dropped.
    let mut client = etcd_client::Client::connect([ep.as_str()], None).await.unwrap();
    client.put("/mx/jobs/not-a-lease", "x", None).await.unwrap();
    w.until("the stray key", |s| {
        matches!(&s.get("jobs/not-a-lease").map(|e| &e.body), Some(LockBody::Malformed { error, .. })
            if error.contains("not a lease id"))
    })
    .await;
    leader.stop().await;
    w.until("the leader resigned", |s| s.get("leader").is_none()).await;
}

#[tokio::test]
async fn a_compaction_past_the_watch_reads_the_mutexes_afresh() {
    let etcd = EtcdServer::start().await;
    let ep = etcd.endpoint();
    let proxy = TcpProxy::start(etcd.addr()).await;
    let spec = spec(&proxy.endpoint());
    let mut w = Watched::start(&spec);
    let mut a = Etcdctl::lock(&ep, "/mx/a");
    let lease_a = lease_in(&a.acquired().await);
    let mut b = Etcdctl::lock(&ep, "/mx/b");
    b.acquired().await;
    w.until("a and b", |s| s.locks().count() == 2).await;

    proxy.cut();
    // While the observer cannot see: b is released, c taken, the history compacted.
    b.stop().await;
    let mut c = Etcdctl::lock(&ep, "/mx/c");
    let lease_c = lease_in(&c.acquired().await);
    let mut client = etcd_client::Client::connect([ep.as_str()], None).await.unwrap();
    let rev = client.get("/", None).await.unwrap().header().unwrap().revision();
    client.compact(rev, None).await.unwrap();
    proxy.restore();

    w.until("the table after compaction", |s| {
        s.get("b").is_none()
            && holder(s, "a").is_some_and(|h| h.0 == lease_a)
            && holder(s, "c").is_some_and(|h| h.0 == lease_c)
    })
    .await;
    // And the watch goes on after the fresh read.
    a.stop().await;
    w.until("a released", |s| s.get("a").is_none()).await;
    drop(c);
}

/// When the holder's lease runs out as last read (unix ms, this host's clock).
fn lease_expiry(s: &FleetState, name: &str) -> Option<i64> {
    match &s.get(name)?.body {
        LockBody::Foreign { lease: Some(l), .. } => Some(l.read_at + l.ttl_s * 1000),
        _ => None,
    }
}

#[tokio::test]
async fn a_holders_lease_is_read_again_and_its_renewal_shown() {
    let etcd = EtcdServer::start().await;
    let ep = etcd.endpoint();
    let spec = spec(&ep);
    let mut w = Watched::start(&spec);
    let mut holder = Etcdctl::lock(&ep, "/mx/renewed");
    holder.acquired().await;
    w.until("the holder's lease", |s| lease_expiry(s, "renewed").is_some())
        .await;
    let first = lease_expiry(&w.state, "renewed").unwrap();
    // etcdctl lock's session (TTL 10 s) renews its lease every ~3.3 s; docs/operations.md:
    // "every 5 s, the observer reads at most 100 holders' leases … so a renewal shows within 5 s".
    let t0 = Instant::now();
    w.until("a renewal", |s| {
        lease_expiry(s, "renewed").is_some_and(|e| e > first + 1500)
    })
    .await;
    assert!(
        t0.elapsed() < Duration::from_secs(3) + lockscope_store::etcd_mutex::LEASE_POLL * 2,
        "renewal shown after {:?}",
        t0.elapsed()
    );
    holder.stop().await;
}

#[tokio::test]
async fn a_crashed_holder_holds_until_its_lease_runs_out_then_hands_over() {
    let etcd = EtcdServer::start().await;
    let ep = etcd.endpoint();
    let spec = spec(&ep);
    let mut w = Watched::start(&spec);
    let mut first = Etcdctl::lock(&ep, "/mx/crashy");
    let lease1 = lease_in(&first.acquired().await);
    let mut second = Etcdctl::lock(&ep, "/mx/crashy");
    w.until("holder and waiter", |s| {
        holder(s, "crashy").is_some_and(|h| h.0 == lease1) && waiters(s, "crashy").len() == 1
    })
    .await;
    let lease2 = waiters(&w.state, "crashy").remove(0);
    let expiry = lease_expiry(&w.state, "crashy").unwrap();
    first.crash().await;
    // Nobody revokes its lease: the lock stays its until the lease runs out
    // (etcdctl lock's TTL is 10 s), then etcd deletes the key and the waiter
    // gets it; the table follows.
    assert_eq!(lease_in(&second.acquired().await), lease2);
    assert!(
        lockscope_store::now_ms() >= expiry - 1000,
        "handed over only when the lease ran out"
    );
    w.until("handed over", |s| {
        holder(s, "crashy").is_some_and(|h| h.0 == lease2) && waiters(s, "crashy").is_empty()
    })
    .await;
    second.stop().await;
}

#[tokio::test]
async fn one_lease_holding_two_locks_lists_both_and_a_blacklist_ends_both() {
    use etcd_client::{PutOptions, Txn, TxnOp};
    let etcd = EtcdServer::start().await;
    let ep = etcd.endpoint();
    let spec = spec(&ep);
    let fleet = spec.open().unwrap();
    let mut w = Watched::start(&spec);
    // A second, independent client of the layout: one session (lease) taking
    // two mutexes, as concurrency.NewMutex does for each, in one transaction.
    let mut client = etcd_client::Client::connect([ep.as_str()], None).await.unwrap();
    let lease = client.lease_grant(60, None).await.unwrap().id();
    let hex = format!("{lease:x}");
    let keys = [format!("/mx/a/{hex}"), format!("/mx/b/{hex}")];
    let on = || Some(PutOptions::new().with_lease(lease));
    let txn = Txn::new().and_then([
        TxnOp::put(keys[0].as_str(), "", on()),
        TxnOp::put(keys[1].as_str(), "", on()),
    ]);
    client.txn(txn).await.unwrap();
    let both = |s: &FleetState| {
        ["a", "b"].iter().all(|n| {
            matches!(&s.get(n).map(|e| &e.body), Some(LockBody::Foreign { lease: Some(l), .. })
                if l.keys_total == 2 && l.keys == keys)
        })
    };
    w.until("both locks, each listing the lease's two keys", both).await;
    assert!(fleet.session_registered(&hex).await.unwrap());
    let entry = lockscope_model::record::BlacklistRecord {
        v: lockscope_model::record::RECORD_VERSION,
        session: hex.clone(),
        by: "test".into(),
        reason: "test".into(),
        at: 0,
    };
    fleet.blacklist(&entry).await.unwrap();
    let fence_a = w.state.get("a").unwrap().fence;
    w.until("both ended by the revoke", |s| s.locks().count() == 0).await;
    assert_eq!(
        fleet.release("a", fence_a).await.unwrap(),
        Release::NotHeld,
        "a free lock: nothing to release"
    );
    assert!(
        !fleet.lift_blacklist(&hex).await.unwrap(),
        "a revoke has no entry to lift"
    );
    let refused = fleet.blacklist(&entry).await.unwrap_err().to_string();
    assert!(refused.contains("not in etcd"), "{refused}");
}
