//! `rediss://` (TLS) against a real `redis-server` serving TLS with a CA and
//! certificate the `openssl` CLI makes at test time: with the CA given
//! (`ca=`), a lock taken by `SET NX PX` is shown and guardedly released over
//! TLS; with another CA the server's certificate is refused (there is no
//! unchecked mode), and the fleet reads unreachable naming the failure.

use std::time::Duration;

use lockscope_model::StoreStatus;
use lockscope_store::fleet::Release;
use lockscope_store::redis_set::fence_of;
use lockscope_store::spec::StoreSpec;
use lockscope_store::testing::{free_port, tls_files, RedisServer};

use super::redis::Watch;

const SECOND: Duration = Duration::from_secs(1);

/// docs/operations.md: "`rediss://…?ca=/path/ca.pem` connects over TLS and
/// checks the server's certificate against that CA (without `ca=`, against
/// the system's roots); there is no option to skip the check".
#[tokio::test]
async fn rediss_with_the_ca_shows_and_releases_and_another_ca_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let other = tempfile::tempdir().unwrap();
    let tls_port = free_port();
    let (ca, args) = tls_files(dir.path(), tls_port);
    let (wrong_ca, _) = tls_files(other.path(), free_port());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let server = RedisServer::start_with(&args).await;
    assert!(server.set_nx("jobs:tls", "tok-1", Duration::from_secs(30)).await);

    let url = |ca: &std::path::Path| format!("rediss://127.0.0.1:{tls_port}?ca={}", ca.display());
    let spec = StoreSpec::parse(&url(&ca)).unwrap();
    let mut w = Watch::start(&spec);
    w.until("shown over TLS", 10 * SECOND, |w| {
        w.live() && w.lock("jobs:tls").is_some()
    })
    .await;
    let fence = w.lock("jobs:tls").unwrap().fence;
    assert_eq!(fence, fence_of(b"tok-1"));
    let fleet = spec.open().unwrap();
    assert!(matches!(
        fleet.release("jobs:tls", fence).await.unwrap(),
        Release::Released(_)
    ));
    w.until("released over TLS", 2 * SECOND, |w| w.lock("jobs:tls").is_none())
        .await;

    // Another CA: the certificate is not trusted, nothing is read.
    let mut refused = Watch::start(&StoreSpec::parse(&url(&wrong_ca)).unwrap());
    refused
        .until("refused", 10 * SECOND, |w| {
            matches!(w.status, Some(StoreStatus::Unreachable { .. }))
        })
        .await;
    let Some(StoreStatus::Unreachable { error, detail, .. }) = &refused.status else {
        unreachable!()
    };
    let said = format!("{error}\n{detail}").to_lowercase();
    assert!(
        said.contains("certificate"),
        "the failure names the certificate: {said}"
    );
}
