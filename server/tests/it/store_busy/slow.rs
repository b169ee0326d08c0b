//! A PostgreSQL that is slow or silent, through a [`TcpProxy`]: an audit entry
//! the database does not take in time is queued, as with a busy SQLite file;
//! and a client that goes away while its action is under way cannot cut the
//! action from its audit entry (review items 3).

use std::time::{Duration, Instant};

use lockscope::remember::audit::{AuditLog, Recorded, AUDIT_WRITE_TIMEOUT};
use lockscope_model::admin::{Action, AuditEntry, AuditQuery, Outcome};
use lockscope_store::protocol::LockStore;
use lockscope_store::spec::StoreSpec;
use lockscope_store::testing::{PgServer, TcpProxy};

use super::raw_lock;

/// A proxy to `pg`, and `pg`'s URL through it.
async fn proxied(pg: &PgServer) -> (TcpProxy, String) {
    let url = pg.url();
    let port: u16 = url
        .split(':')
        .nth(2)
        .and_then(|rest| rest.split('/').next())
        .and_then(|p| p.parse().ok())
        .expect("a port in the PostgreSQL URL");
    let proxy = TcpProxy::start(([127, 0, 0, 1], port).into()).await;
    let through = url.replace(
        &format!(":{port}/"),
        &format!(":{}/", proxy.endpoint().rsplit(':').next().unwrap()),
    );
    (proxy, through)
}

fn entry(target: &str) -> AuditEntry {
    AuditEntry {
        at: 1,
        actor: "alice".into(),
        via: "api".into(),
        action: Some(Action::Release),
        fleet: "f".into(),
        target: target.into(),
        reason: "INC-3".into(),
        outcome: Some(Outcome::Done),
        detail: "released".into(),
        ..AuditEntry::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_postgresql_audit_log_queues_the_entry_within_its_bound() {
    let pg = PgServer::start().await;
    let (proxy, url) = proxied(&pg).await;
    let audit = AuditLog::open(&url).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    audit.set_spool(&dir.path().join("audit.spool")).unwrap();
    proxy.freeze();
    // docs/operations.md: "An entry the audit database does not take within
    // 1 s is queued" — PostgreSQL has no busy timeout: a database that stops
    // answering held the answer until TCP gave up (minutes), nothing queued.
    let t = Instant::now();
    let recorded = tokio::time::timeout(
        Duration::from_secs(20),
        audit.record(&entry("silent"), audit.ready().unwrap()),
    )
    .await
    .expect("the write is bounded")
    .unwrap();
    let took = t.elapsed();
    assert!(matches!(recorded, Recorded::Queued { .. }), "{recorded:?}");
    assert!(
        took < AUDIT_WRITE_TIMEOUT + Duration::from_millis(500),
        "queued after {took:?}"
    );
    // The hung connections closed, the database answers again: written.
    proxy.cut();
    proxy.restore();
    let deadline = Instant::now() + Duration::from_secs(30);
    while audit.spool_counts().0 > 0 {
        assert!(Instant::now() < deadline, "the spool was not written");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let direct = AuditLog::open_read_only(&pg.url()).await.unwrap();
    let all = direct.query(&AuditQuery::default()).await.unwrap();
    assert_eq!(all.iter().map(|e| e.target.as_str()).collect::<Vec<_>>(), ["silent"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_goes_away_mid_action_leaves_its_audit_entry() {
    let pg = PgServer::start().await;
    let (proxy, url) = proxied(&pg).await;
    let direct = StoreSpec::Sql { url: pg.url() }.connect().await.unwrap();
    let fence = raw_lock(&direct, "slow/gone").await;
    let s = crate::admin::Server::start_on(StoreSpec::Sql { url }, tempfile::tempdir().unwrap()).await;
    // The store takes the release at once, its answers trickle back.
    proxy.throttle(64);
    let body = serde_json::json!({"fence": fence, "owner": null, "reason": "INC-3: client leaves"});
    let bearer = s.bearer("operator");
    let request = {
        let (s, bearer) = (&s, bearer.clone());
        async move {
            s.send(
                "POST",
                "/api/v1/fleets/sql/locks/slow%2Fgone/release",
                &[("authorization", &bearer), ("content-type", "application/json")],
                &body.to_string(),
            )
            .await
        }
    };
    // The client gives up (its connection closed) while the store acts.
    let gave_up = tokio::time::timeout(Duration::from_millis(700), request).await;
    assert!(
        gave_up.is_err(),
        "answered before the client left: the store was not slow"
    );
    proxy.restore();
    // docs/operations.md: "an admin attempt is never lost from the audit log"
    // — hyper dropped the request's future, and the audit entry with it.
    let deadline = Instant::now() + Duration::from_secs(30);
    let entries = loop {
        let mut all = s.audit.query(&AuditQuery::default()).await.unwrap();
        all.retain(|e| e.target == "slow/gone");
        if !all.is_empty() || Instant::now() > deadline {
            break all;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(entries.len(), 1, "the attempt's entry: {entries:?}");
    let released = direct.get("slow/gone").await.unwrap().is_none();
    assert_eq!(
        entries[0].outcome == Some(Outcome::Done),
        released,
        "the entry says what the store did: {entries:?}"
    );
}
