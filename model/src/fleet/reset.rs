//! [`FleetEvent::Reset`](super::FleetEvent::Reset): a store's whole truth
//! replaces the table, and what effectively changed is reported as names.

use std::collections::BTreeSet;

use super::{ByName, Changed, FleetState, Snapshot, Waiter};
use crate::session::Sessions;

impl FleetState {
    pub(super) fn reset(&mut self, snapshot: Snapshot) -> Vec<Changed> {
        let Snapshot {
            revision,
            locks,
            waiters,
            sessions,
            blacklist,
        } = snapshot;
        let mut changes = Vec::new();
        // A store that starts or stops keeping sessions changes every lock's
        // holder state: each lock is reported, once.
        let all = self.sessions.tracked != sessions.is_some();
        // The new table is built in one go (sorted, the last of two entries of
        // one name kept, as one by one): its nodes are then full. Inserted one by
        // one in name order, as snapshots come, each node would keep 6 of its 11
        // slots, ~170 bytes per lock of slack. The map reuses `locks`' buffer.
        let mut fresh: Vec<ByName> = locks
            .into_iter()
            .map(|mut e| {
                if all || self.locks.get(e.name.as_str()).map(|old| &old.0) != Some(&e) {
                    changes.push(Changed::Lock(e.name.clone()));
                }
                self.shared.intern(&mut e);
                ByName(e)
            })
            .collect();
        // (`ByName`'s equality is the whole entry's, so the set's own dedup, by
        // equality, would keep both: dedup by name here, keeping the later.)
        fresh.sort_by(|a, b| a.0.name.cmp(&b.0.name));
        fresh.dedup_by(|later, kept| {
            let same = later.0.name == kept.0.name;
            if same {
                std::mem::swap(later, kept);
            }
            same
        });
        let fresh: BTreeSet<ByName> = fresh.into_iter().collect();
        // Absent from the whole truth: removed, whatever the store's revision
        // scheme (a SQL row's own counter can run ahead of the reset's).
        changes.extend(
            self.locks
                .iter()
                .filter(|e| !fresh.contains(e.0.name.as_str()))
                .map(|e| Changed::Lock(e.0.name.clone())),
        );
        self.locks = fresh;
        let waiters: BTreeSet<Waiter> = waiters.into_iter().collect();
        let mut moved: Vec<String> = self
            .waiters
            .symmetric_difference(&waiters)
            .map(|w| w.lock.clone())
            .collect();
        moved.dedup();
        changes.extend(moved.into_iter().map(Changed::Waiters));
        self.waiters = waiters;
        // Sessions: every session whose holder state differs re-places its locks.
        let fresh = Sessions {
            tracked: sessions.is_some(),
            sessions: sessions
                .unwrap_or_default()
                .into_iter()
                .map(|s| (s.id.clone(), s))
                .collect(),
            blacklist: blacklist.into_iter().map(|b| (b.session.clone(), b)).collect(),
        };
        let old = std::mem::replace(&mut self.sessions, fresh);
        let ids: BTreeSet<&String> = old
            .sessions
            .keys()
            .chain(old.blacklist.keys())
            .chain(self.sessions.sessions.keys())
            .chain(self.sessions.blacklist.keys())
            .collect();
        let touched: Vec<String> = ids
            .into_iter()
            .filter(|id| {
                old.sessions.get(*id) != self.sessions.sessions.get(*id)
                    || old.blacklist.get(*id) != self.sessions.blacklist.get(*id)
            })
            .cloned()
            .collect();
        for id in &touched {
            changes.push(Changed::Session(id.clone()));
            if !all && old.holder(id) != self.sessions.holder(id) {
                changes.push(Changed::Holder(id.clone()));
            }
        }
        // A reset is the whole truth, even if the store went back in time
        // (restored from a backup): its revision replaces ours.
        self.revision = revision;
        changes
    }
}
