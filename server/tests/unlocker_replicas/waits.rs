//! The waits and checks the replica tests share: who holds the unlocker role
//! and waiting for it to change, waiting for keys to be deleted and releases
//! to be audited, and that each was released exactly once.

use super::*;

/// Who holds the unlocker role now.
pub(super) async fn leader(fleet: &dyn FleetStore) -> Option<UnlockerInfo> {
    fleet.unlocker().await.expect("reading the unlocker role")
}

/// Waits (at most `limit`) until the role is held by one of `among`.
pub(super) async fn wait_leader(
    fleet: &dyn FleetStore,
    among: &[&str],
    limit: Duration,
    ctx: &dyn Fn() -> String,
) -> UnlockerInfo {
    let start = Instant::now();
    loop {
        let now = leader(fleet).await;
        if let Some(u) = now.as_ref().filter(|u| among.contains(&u.candidate.as_str())) {
            return u.clone();
        }
        assert!(
            start.elapsed() < limit,
            "no replica of {among:?} elected after {limit:?} (the role: {now:?}){}",
            ctx()
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Waits (at most `limit`) until every one of `names` was deleted; returns how long it took.
pub(super) async fn wait_deleted(
    watch: &KeyWatch,
    names: &[String],
    limit: Duration,
    ctx: &dyn Fn() -> String,
) -> Duration {
    let start = Instant::now();
    loop {
        let deleted = watch.deleted(names);
        if deleted == names.len() {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < limit,
            "only {deleted} of {} locks released after {limit:?}{}",
            names.len(),
            ctx()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits (at most `limit`) until the replicas' audit logs together hold at
/// least `n` `Done` releases of `tag/…` locks, then a little longer for late
/// ones; returns the releases per replica.
pub(super) async fn wait_audited(
    replicas: &[&Replica],
    tag: &str,
    n: usize,
    limit: Duration,
    ctx: &dyn Fn() -> String,
) -> Vec<Vec<AuditEntry>> {
    let start = Instant::now();
    loop {
        let mut total = 0;
        for r in replicas {
            total += r.done(tag).await.len();
        }
        if total >= n {
            break;
        }
        assert!(
            start.elapsed() < limit,
            "only {total} of {n} releases of {tag}/… in the audit logs after {limit:?}{}",
            ctx()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // A second release would come a tick or two later.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let mut out = Vec::new();
    for r in replicas {
        out.push(r.done(tag).await);
    }
    out
}

/// The releases of `names` are in the audit logs exactly once in all:
/// returns (replica, how many) for the replicas that made some.
pub(super) fn assert_audited_once(
    replicas: &[&Replica],
    done: &[Vec<AuditEntry>],
    names: &[String],
    ctx: &dyn Fn() -> String,
) -> Vec<(String, usize)> {
    let mut by_lock: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (r, entries) in replicas.iter().zip(done) {
        for e in entries {
            assert_eq!(e.actor, format!("unlocker@{}", r.name), "{e:?}");
            by_lock.entry(e.target.as_str()).or_default().push(r.name.as_str());
        }
    }
    let twice: Vec<_> = by_lock.iter().filter(|(_, by)| by.len() > 1).take(10).collect();
    assert!(
        twice.is_empty(),
        "locks released more than once (lock, by): {twice:?}{}",
        ctx()
    );
    let expected: BTreeSet<&str> = names.iter().map(String::as_str).collect();
    let audited: BTreeSet<&str> = by_lock.keys().copied().collect();
    let missing: Vec<_> = expected.difference(&audited).take(10).collect();
    let extra: Vec<_> = audited.difference(&expected).take(10).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "audit logs vs the batch: missing {missing:?}, unexpected {extra:?}{}",
        ctx()
    );
    let total: usize = done.iter().map(Vec::len).sum();
    assert_eq!(total, names.len(), "Done releases in both audit logs together{}", ctx());
    replicas
        .iter()
        .zip(done)
        .filter(|(_, d)| !d.is_empty())
        .map(|(r, d)| (r.name.clone(), d.len()))
        .collect()
}

/// From the first to the last release's audit time.
pub(super) fn span(entries: &[AuditEntry]) -> Duration {
    let first = entries.iter().map(|e| e.at).min().unwrap_or(0);
    let last = entries.iter().map(|e| e.at).max().unwrap_or(0);
    Duration::from_millis((last - first) as u64)
}
