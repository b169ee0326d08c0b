//! Reading etcd native mutexes' queues out of a fleet's table: the waiters
//! in the order `concurrency.Mutex` grants the lock, and one session per lease
//! for the sessions page. The types they read are in [`super::etcd_mutex`].

use std::collections::BTreeMap;

use crate::fleet::etcd_mutex::EtcdMutexLock;
use crate::fleet::{FamilyDetail, FleetState, LeaseInfo, LockBody, LockEntry};
use crate::time::Millis;

impl EtcdMutexLock {
    /// `entry`'s etcd-mutex detail, if it has one.
    pub fn of(entry: &LockEntry) -> Option<&EtcdMutexLock> {
        match &entry.body {
            LockBody::Foreign { detail: Some(d), .. } => match &**d {
                FamilyDetail::EtcdMutex(m) => Some(m),
                _ => None,
            },
            _ => None,
        }
    }
}

/// The leases (sessions) of a fleet's etcd native mutexes: every holder's
/// and every waiter's of a lock held on a lease, each with what
/// `LeaseTimeToLive` last said of it where the observer read it (holders'
/// leases; a lease that only waits is `None`: unknown). For the sessions page
/// of a store that keeps no lockscope sessions: one row per lease. One pass
/// over the table (the page is rebuilt at most once a second).
pub fn lease_sessions(state: &FleetState) -> BTreeMap<String, Option<LeaseInfo>> {
    let mut out: BTreeMap<String, Option<LeaseInfo>> = BTreeMap::new();
    for e in state.locks() {
        let LockBody::Foreign {
            session: Some(s),
            lease,
            detail,
            ..
        } = &e.body
        else {
            continue;
        };
        let mutex = lease.is_some()
            || detail
                .as_deref()
                .is_some_and(|d| matches!(d, FamilyDetail::EtcdMutex(_)));
        if !mutex {
            continue;
        }
        let slot = out.entry(s.clone()).or_default();
        if slot.is_none() {
            *slot = lease.as_deref().cloned();
        }
        for w in state.waiters_of(&e.name) {
            out.entry(w.to_string()).or_default();
        }
    }
    out
}

/// Puts `waiters` (session ids, with whatever goes with each) into `entry`'s
/// queue order where `entry` is an etcd mutex with waiters (others keep their
/// order, after the queued ones), and gives each queued one the time its key
/// was created where known.
pub fn order_waiters<T>(entry: Option<&LockEntry>, waiters: &mut [(String, T)]) -> Vec<Option<Millis>> {
    let Some(m) = entry.and_then(EtcdMutexLock::of) else {
        return vec![None; waiters.len()];
    };
    let place = |s: &str| m.waiters.iter().position(|w| w.lease == s).unwrap_or(usize::MAX);
    waiters.sort_by_key(|(s, _)| place(s));
    waiters
        .iter()
        .map(|(s, _)| m.waiters.iter().find(|w| w.lease == *s).and_then(|w| w.created_at))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::etcd_mutex::MutexWaiter;

    fn entry(waiters: Vec<MutexWaiter>) -> LockEntry {
        let mut e = LockEntry::foreign("m".into(), 5, 5, Some("a".into()), None);
        if let LockBody::Foreign { detail, .. } = &mut e.body {
            *detail = Some(Box::new(FamilyDetail::EtcdMutex(EtcdMutexLock { waiters })));
        }
        e
    }

    #[test]
    fn waiters_come_in_create_revision_order_not_session_order() {
        let w = |lease: &str, create_revision, created_at| MutexWaiter {
            lease: lease.into(),
            create_revision,
            created_at,
        };
        let e = entry(vec![w("f", 7, Some(70)), w("1", 8, None), w("b", 9, Some(90))]);
        let mut ws: Vec<(String, ())> = ["1", "b", "f", "zz"].iter().map(|s| (s.to_string(), ())).collect();
        let times = order_waiters(Some(&e), &mut ws);
        let order: Vec<&str> = ws.iter().map(|(s, _)| s.as_str()).collect();
        assert_eq!(order, ["f", "1", "b", "zz"], "the queue's order, the unknown last");
        assert_eq!(times, [Some(70), None, Some(90), None]);
        let plain = LockEntry::foreign("p".into(), 1, 1, None, None);
        let mut ws2 = ws.clone();
        assert_eq!(order_waiters(Some(&plain), &mut ws2), [None; 4]);
        assert_eq!(ws2, ws, "other families keep their order");
    }

    #[test]
    fn every_lease_holding_or_waiting_is_a_session_with_its_ttl_where_read() {
        use crate::fleet::{FleetEvent, Snapshot, Waiter};
        let lease = |id: &str| LeaseInfo {
            id: id.into(),
            granted_s: 10,
            ttl_s: 7,
            read_at: 1,
            keys: vec![format!("/mx/a/{id}"), format!("/mx/b/{id}")],
            keys_total: 2,
        };
        let held = |name: &str, id: &str| {
            let mut e = LockEntry::foreign(name.into(), 3, 3, Some(id.into()), None);
            if let LockBody::Foreign { lease: l, .. } = &mut e.body {
                *l = Some(Box::new(lease(id)));
            }
            e
        };
        let mut s = FleetState::default();
        s.apply(FleetEvent::Reset(Snapshot {
            revision: 9,
            locks: vec![
                held("a", "f1"),
                held("b", "f1"),
                LockEntry::foreign("scylla".into(), 1, 1, Some("not-a-lease".into()), None),
            ],
            waiters: vec![Waiter {
                lock: "a".into(),
                session: "e2".into(),
            }],
            ..Snapshot::default()
        }));
        let got = lease_sessions(&s);
        assert_eq!(
            got.keys().collect::<Vec<_>>(),
            ["e2", "f1"],
            "a foreign lock without a lease is not one"
        );
        assert_eq!(got["f1"], Some(lease("f1")));
        assert_eq!(got["e2"], None, "a lease that only waits was not read: unknown");
    }
}
