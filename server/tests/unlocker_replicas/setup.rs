//! What the tests start from: one etcd, two replicas on it, the role and
//! the lock keys watched; and batches of locks written due together.

use super::*;

/// Locks written together, due together.
pub(super) struct Batch {
    pub(super) names: Vec<String>,
    /// `auto_unlock_at` plus the grace (unix ms, this host's clock: the replicas').
    pub(super) due: i64,
}

impl Batch {
    /// How late the first and the last release were, past `due` (audit times).
    pub(super) fn lateness(&self, done: &[Vec<AuditEntry>]) -> (Duration, Duration) {
        let ats = done.iter().flatten().map(|e| e.at - self.due);
        let late = |ms: Option<i64>| Duration::from_millis(ms.unwrap_or(0).max(0) as u64);
        (late(ats.clone().min()), late(ats.max()))
    }
}

/// Writes `n` locks `tag/lock-NNNN` through the lock protocol, each with
/// `auto_unlock_at` `unlock_in_ms` after the batch's start (this host's clock
/// is the replicas').
pub(super) async fn write_batch(store: &AnyLocks, tag: &str, n: usize, unlock_in_ms: i64) -> Batch {
    let now = lockscope_store::now_ms();
    let names: Vec<String> = (0..n).map(|i| format!("{tag}/lock-{i:04}")).collect();
    let owner = format!("owner-{tag}");
    let results: Vec<Result<(), String>> = stream::iter(names.iter())
        .map(|name| {
            let (store, owner) = (store.clone(), owner.clone());
            async move {
                let mut rec = testing::record(&owner, "unlocker replicas test", now);
                rec.expected_runtime_ms = 500;
                rec.alert_at = now + 500;
                rec.auto_unlock_at = now + unlock_in_ms;
                match store.try_acquire(name, &rec).await {
                    Ok(Attempt::Acquired { .. }) => Ok(()),
                    Ok(Attempt::Busy { holder, .. }) => Err(format!("{name} already held: {holder:?}")),
                    Err(e) => Err(format!("{name}: {e}")),
                }
            }
        })
        .buffer_unordered(32)
        .collect()
        .await;
    let failed: Vec<_> = results.into_iter().filter_map(Result::err).collect();
    assert!(failed.is_empty(), "writing {tag}: {failed:?}");
    Batch {
        names,
        due: now + unlock_in_ms + GRACE_SECS as i64 * 1000,
    }
}

/// What every test here starts from: one etcd, the role and the lock keys
/// watched, two replicas on it, and the first of them elected.
pub(super) struct Setup {
    pub(super) t0: Instant,
    pub(super) _etcd: EtcdServer,
    pub(super) _dir: tempfile::TempDir,
    pub(super) store: AnyLocks,
    pub(super) fleet: Arc<dyn FleetStore>,
    pub(super) roles: RoleLog,
    pub(super) watch: KeyWatch,
    pub(super) a: Replica,
    pub(super) b: Replica,
    pub(super) first: UnlockerInfo,
}

pub(super) async fn setup() -> Setup {
    let t0 = Instant::now();
    let etcd = EtcdServer::start().await;
    let dir = scratch();
    let spec = spec(&etcd);
    let store = spec.connect().await.unwrap();
    let fleet = spec.open().unwrap();
    let roles = RoleLog::start(fleet.clone(), t0);
    let watch = KeyWatch::start(&etcd.endpoint()).await;
    let a = Replica::start("a", dir.path(), &etcd.endpoint()).await;
    let b = Replica::start("b", dir.path(), &etcd.endpoint()).await;
    let ctx = || format!("{}{}", roles.describe(), tails(&[&a, &b]));
    let first = wait_leader(fleet.as_ref(), &["a", "b"], Duration::from_secs(20), &ctx).await;
    Setup {
        t0,
        _etcd: etcd,
        _dir: dir,
        store,
        fleet,
        roles,
        watch,
        a,
        b,
        first,
    }
}

/// The replicas' directory (logs, audit logs): deleted afterwards unless
/// `LOCKSCOPE_TEST_KEEP_DIRS` is set (to read the logs of a run).
pub(super) fn scratch() -> tempfile::TempDir {
    let mut dir = tempfile::Builder::new()
        .prefix("lockscope-replicas-")
        .tempdir()
        .unwrap();
    if std::env::var_os("LOCKSCOPE_TEST_KEEP_DIRS").is_some() {
        dir.disable_cleanup(true);
        eprintln!("keeping {}", dir.path().display());
    }
    dir
}

pub(super) fn spec(etcd: &EtcdServer) -> StoreSpec {
    StoreSpec::Etcd {
        endpoints: vec![etcd.endpoint()],
        prefix: Some(PREFIX.into()),
    }
}

pub(super) fn other<'a>(name: &str, replicas: [&'a str; 2]) -> &'a str {
    if replicas[0] == name {
        replicas[1]
    } else {
        replicas[0]
    }
}
