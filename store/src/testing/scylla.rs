//! ScyllaDB keyspaces for tests: an in-memory one (always), or a fresh
//! keyspace on a real cluster when `SCYLLA_URI` names one.
//!
//! `SCYLLA_URI=HOST[:PORT][,HOST…][?dc=…&user=…&tls_ca=…]` (the `scylla:` spec
//! without its scheme and keyspace; a password in `LOCKSCOPE_SCYLLA_PASSWORD`).
//! Each test then gets its own keyspace, `lockscope_test_<pid>_<n>`, created
//! with `SimpleStrategy` and the replication factor `SCYLLA_RF` (default 1),
//! and left behind for the cluster's operator to drop (`lockscope_test_*`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::scylla::memory::{MemoryCql, Shape};
use crate::scylla::{ScyllaLocks, ScyllaTarget};
use crate::spec::StoreSpec;

static NEXT: AtomicU64 = AtomicU64::new(0);

/// The cluster named by `SCYLLA_URI`, if any.
pub fn cluster_uri() -> Option<String> {
    std::env::var("SCYLLA_URI").ok().filter(|u| !u.trim().is_empty())
}

/// A keyspace for one test: in memory, or on the cluster of `SCYLLA_URI`.
pub struct TestKeyspace {
    pub target: ScyllaTarget,
    /// The in-memory keyspace (`None` on a real cluster).
    memory: Option<MemoryCql>,
}

impl TestKeyspace {
    /// A fresh keyspace with lockscope's tables: on the cluster of `SCYLLA_URI`
    /// when set, else in memory (answering LWTs as ScyllaDB does).
    pub async fn new(label: &str) -> TestKeyspace {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        match cluster_uri() {
            Some(uri) => {
                let keyspace = format!("lockscope_test_{}_{n}", std::process::id());
                let spec = StoreSpec::parse(&format!("scylla:{}", with_keyspace(&uri, &keyspace)))
                    .expect("SCYLLA_URI is a scylla: spec without its scheme");
                let StoreSpec::Scylla(target @ ScyllaTarget::Cluster(_)) = spec else {
                    unreachable!("a scylla: spec")
                };
                create_keyspace(&target, &keyspace).await;
                TestKeyspace { target, memory: None }
            }
            None => {
                let name = format!("{label}-{}-{n}", std::process::id());
                TestKeyspace {
                    memory: Some(MemoryCql::named(&name, false)),
                    target: ScyllaTarget::Memory { name, published: false },
                }
            }
        }
    }

    pub fn spec(&self) -> StoreSpec {
        StoreSpec::Scylla(self.target.clone())
    }

    /// A new client of the keyspace, as another worker process would have.
    pub async fn connect(&self) -> ScyllaLocks {
        self.target.connect(true).await.expect("connect to the test keyspace")
    }

    /// In memory: each statement waits `latency` first, as on a network (a
    /// cluster has its own).
    pub fn set_latency(&self, latency: std::time::Duration) {
        if let Some(m) = &self.memory {
            m.set_latency(latency);
        }
    }

    /// Statements sent to the in-memory keyspace (`None` on a cluster).
    pub fn statements(&self) -> Option<u64> {
        use crate::scylla::cql::Cql;
        self.memory.as_ref().map(|m| m.sent())
    }
}

/// An in-memory keyspace answering as `shape` does, and a connector to it.
pub async fn memory_store(shape: Shape) -> (MemoryCql, ScyllaLocks) {
    let cql = MemoryCql::superset(crate::scylla::DEFAULT_KEYSPACE, shape);
    let store = ScyllaLocks::over(Arc::new(cql.clone()), crate::scylla::DEFAULT_KEYSPACE, true)
        .await
        .expect("in-memory keyspace");
    (cql, store)
}

fn with_keyspace(uri: &str, keyspace: &str) -> String {
    match uri.split_once('?') {
        Some((hosts, query)) => format!("{hosts}/{keyspace}?{query}"),
        None => format!("{uri}/{keyspace}"),
    }
}

async fn create_keyspace(target: &ScyllaTarget, keyspace: &str) {
    let ScyllaTarget::Cluster(config) = target else { return };
    let rf: u32 = std::env::var("SCYLLA_RF")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(1);
    let session = crate::scylla::driver_session(config)
        .await
        .expect("SCYLLA_URI reachable");
    session
        .query_unpaged(
            format!(
                "CREATE KEYSPACE IF NOT EXISTS {keyspace} WITH replication = \
                 {{'class': 'SimpleStrategy', 'replication_factor': {rf}}}"
            ),
            (),
        )
        .await
        .expect("create the test keyspace");
    session.await_schema_agreement().await.expect("schema agreement");
}
