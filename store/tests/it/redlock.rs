//! The `redlock+redis://` fleet against three real `redis-server` masters
//! (started once for the file's one test, on free ports), with locks written
//! as redsync and node-redlock write them (`SET key token NX PX ms` on each
//! master): a quorum is held and shown "3 of 3", a killed master reads
//! "2 of 3", two tokens on different masters are split, and the guarded
//! release deletes the token's key on every master where it still matches.

use std::time::Duration;

use lockscope_model::fleet::redis::RedlockState;
use lockscope_model::fleet::FamilyDetail;
use lockscope_model::{LockBody, LockEntry};
use lockscope_store::fleet::Release;
use lockscope_store::redis_set::fence_of;
use lockscope_store::spec::StoreSpec;
use lockscope_store::testing::RedisServer;

use super::redis::{token_key, Watch};

const SECOND: Duration = Duration::from_secs(1);

fn redlock(e: &LockEntry) -> RedlockState {
    match &e.body {
        LockBody::Foreign { detail: Some(d), .. } => match &**d {
            FamilyDetail::Redlock(r) => r.clone(),
            other => panic!("not Redlock: {other:?}"),
        },
        other => panic!("no detail: {other:?}"),
    }
}

async fn con(server: &RedisServer) -> ::redis::aio::MultiplexedConnection {
    let client = ::redis::Client::open(server.url()).unwrap();
    client.get_multiplexed_async_connection().await.unwrap()
}

/// `SET key token NX PX 30000` on one master, as redsync's acquire does.
async fn set_nx(server: &RedisServer, key: &str, token: &str) {
    assert!(
        server.set_nx(key, token, Duration::from_secs(30)).await,
        "{key} taken on {}",
        server.url()
    );
}

async fn get(server: &RedisServer, key: &str) -> Option<String> {
    ::redis::cmd("GET")
        .arg(key)
        .query_async(&mut con(server).await)
        .await
        .unwrap()
}

#[tokio::test]
async fn redlock_quorum_down_master_split_and_guarded_release() {
    let mut masters = vec![
        RedisServer::start().await,
        RedisServer::start().await,
        RedisServer::start().await,
    ];
    let spec = StoreSpec::parse(&format!(
        "redlock+redis://{}?match=rl:*",
        masters
            .iter()
            .map(|m| format!("127.0.0.1:{}", m.port()))
            .collect::<Vec<_>>()
            .join(",")
    ))
    .unwrap();
    let fleet = spec.open().unwrap();
    let mut w = Watch::start(&spec);
    w.until("live", 10 * SECOND, Watch::live).await;

    for m in &masters {
        set_nx(m, "rl:job", "tok-A").await;
    }
    w.until("held on 3 of 3", SECOND, |w| {
        w.lock("rl:job").is_some_and(|e| redlock(&e).agreement() == "3 of 3")
    })
    .await;
    let e = w.lock("rl:job").unwrap();
    assert_eq!(e.fence, fence_of(b"tok-A"), "the fence is derived from the token");
    assert_eq!(token_key(&e).token, "tok-A");
    assert_eq!((redlock(&e).quorum, redlock(&e).split), (2, None));

    // docs/operations.md: "shown with how many agree ("2 of 3" when a master is down or lacks the key)".
    masters[2].stop();
    w.until("2 of 3 with a master down", 3 * SECOND, |w| {
        w.lock("rl:job").is_some_and(|e| redlock(&e).agreement() == "2 of 3")
    })
    .await;
    let s = redlock(&w.lock("rl:job").unwrap());
    assert_eq!(s.split, None, "a quorum still holds it");
    assert!(!s.masters[2].reachable && s.masters[0].reachable, "{s:?}");
    assert!(w.live(), "one master down is not the fleet down");

    // docs/operations.md: "When no token reaches the quorum (two tokens on different masters,
    // or one token on a minority) the lock is *split*, with the reason".
    set_nx(&masters[0], "rl:split", "tok-X").await;
    set_nx(&masters[1], "rl:split", "tok-Y").await;
    w.until("split", SECOND, |w| {
        w.lock("rl:split").is_some_and(|e| {
            redlock(&e)
                .split
                .is_some_and(|why| why.contains("tok-X on 1, tok-Y on 1"))
        })
    })
    .await;

    // The guarded release: a stale fence is Changed with the current holder, nothing deleted.
    match fleet.release_seen("rl:job", fence_of(b"tok-old"), None).await.unwrap() {
        Release::Changed(now) => assert_eq!(token_key(&now).token, "tok-A"),
        other => panic!("a stale fence released: {other:?}"),
    }
    assert_eq!(get(&masters[0], "rl:job").await.as_deref(), Some("tok-A"));
    let released = fleet.release_seen("rl:job", fence_of(b"tok-A"), None).await.unwrap();
    assert!(matches!(released, Release::Released(_)), "{released:?}");
    assert_eq!(get(&masters[0], "rl:job").await, None);
    assert_eq!(get(&masters[1], "rl:job").await, None);
    w.until("released: gone", SECOND, |w| w.lock("rl:job").is_none()).await;
    assert!(matches!(
        fleet.release_seen("rl:job", fence_of(b"tok-A"), None).await.unwrap(),
        Release::NotHeld
    ));

    // A split lock: the token named is deleted where it matches, the other stays.
    let released = fleet.release_seen("rl:split", fence_of(b"tok-X"), None).await.unwrap();
    assert!(matches!(released, Release::Released(_)), "{released:?}");
    assert_eq!(get(&masters[0], "rl:split").await, None);
    assert_eq!(get(&masters[1], "rl:split").await.as_deref(), Some("tok-Y"));
    w.until("tok-Y alone, a minority", SECOND, |w| {
        w.lock("rl:split").is_some_and(|e| {
            token_key(&e).token == "tok-Y" && redlock(&e).split.is_some_and(|why| why.contains("held on 1 of 3"))
        })
    })
    .await;

    // The master back (empty): reachable again.
    masters[2].restart().await;
    w.until("the master back", 5 * SECOND, |w| {
        w.lock("rl:split")
            .is_some_and(|e| redlock(&e).masters.iter().all(|m| m.reachable))
    })
    .await;
}
