//! What the hub tells the history: for each store event, before the reducer
//! applies it, the history events it means ([`lockscope_model::history`]
//! derives them from the lock as it was and as it will be), the releases the
//! admin path and the unlocker made credited to them ([`Credits`]), and store
//! outages.

use std::collections::{HashMap, HashSet};

use lockscope_model::history::{lock_events, wait_event, Draft, Kind, ReleaseNote};
use lockscope_model::record::Stored;
use lockscope_model::{FleetEvent, FleetState, StoreStatus};
use lockscope_store::fleet::Removed;

use super::credit::{Credits, Ready};
use crate::remember::history::Recorder;

/// The hub's part of the history (absent when the server keeps none).
pub(super) struct HubHistory {
    recorder: Recorder,
    /// Releases announced by the admin path or the unlocker.
    credits: Credits,
    replica: String,
    /// The store was last seen unreachable (so its recovery is an event).
    down: bool,
    /// The first snapshot was compared with the history ([`Recorder::resync`]).
    synced: bool,
    /// When the store was reported unreachable, until the observer's first
    /// change after it: a fresh snapshot then (the store could not resume
    /// where it stopped) leaves a gap from here ([`Recorder::outage_gap`]).
    outage: Option<i64>,
}

impl HubHistory {
    pub(super) fn new(recorder: Recorder, replica: String) -> HubHistory {
        HubHistory {
            recorder,
            credits: Credits::default(),
            replica,
            down: false,
            synced: false,
            outage: None,
        }
    }

    /// Release `id` of (`lock`, `fence`) by `note.actor` is about to be tried.
    pub(super) fn announce(&mut self, id: u64, lock: String, fence: i64, note: ReleaseNote) {
        self.expire();
        self.credits.announce(id, lock, fence, note);
    }

    /// The store answered release `id`: what it removed, if anything.
    pub(super) fn confirm(&mut self, id: u64, lock: String, fence: i64, removed: Option<Removed>) {
        let ready = self.credits.confirm(id, lock, fence, removed);
        self.record_ready(ready);
    }

    /// Records the deletes held for answers that did not come in time.
    pub(super) fn expire(&mut self) {
        for ready in self.credits.expire() {
            self.record_ready(Some(ready));
        }
    }

    fn record_ready(&self, ready: Option<Ready>) {
        if let Some((at, draft)) = ready {
            self.recorder.record(at, vec![draft]);
        }
    }

    /// Records what `event` means, given the table before it is applied.
    pub(super) fn before_apply(&mut self, state: &FleetState, event: &FleetEvent, now: i64) {
        if let Some(since) = self.outage.take() {
            if let FleetEvent::Reset(snap) = event {
                // Acquisitions that came and went meanwhile are not in it.
                let held: HashSet<(&str, i64)> = snap.locks.iter().map(|l| (l.name.as_str(), l.fence)).collect();
                let open: HashSet<(&str, i64)> = state.locks().map(|l| (l.name.as_str(), l.fence)).collect();
                let ended = open.difference(&held).count();
                let began = held.difference(&open).count();
                self.recorder.outage_gap(since, now, ended, began);
            }
        }
        let drafts = self.drafts(state, event);
        // The revision of a delete, where the event carries the delete's own.
        let removed_at = match event {
            FleetEvent::Remove { revision, .. } => Some(*revision),
            _ => None,
        };
        let mut drafts: Vec<Draft> = drafts
            .into_iter()
            .filter_map(|d| match d.kind {
                Some(k) if k.ends_hold() => self.credits.on_end(now, removed_at, d).map(|(_, d)| d),
                _ => Some(d),
            })
            .collect();
        for d in drafts.iter_mut().filter(|d| d.service.is_none()) {
            // A waiter names its session only: its service and host (for the
            // charts' most contended services) come from the session's record.
            let record = d
                .session
                .as_ref()
                .and_then(|s| state.sessions().sessions.get(s)?.record());
            if let Some(r) = record {
                d.service = Some(r.service.clone());
                d.host = Some(r.host.clone());
            }
        }
        self.recorder.record(now, drafts);
        if let FleetEvent::Reset(snap) = event {
            let held: HashSet<(&str, i64)> = snap.locks.iter().map(|l| (l.name.as_str(), l.fence)).collect();
            self.credits.after_snapshot(&held);
        }
        if let (FleetEvent::Reset(snap), false) = (event, self.synced) {
            self.synced = true;
            let held = snap.locks.iter().map(|l| (l.name.clone(), l.fence)).collect();
            // Queued right behind the snapshot's own events, before anything later.
            self.recorder.resync(now, snap.revision, held);
        }
    }

    /// The events `event` means, every end uncredited.
    fn drafts(&self, state: &FleetState, event: &FleetEvent) -> Vec<Draft> {
        let fence_of = |lock: &str| state.get(lock).map(|e| e.fence);
        match event {
            FleetEvent::Upsert(after) => {
                let before = state.get(&after.name);
                let holder = before.map(|b| state.holder(b)).unwrap_or_default();
                lock_events(before, Some(after), None, holder)
            }
            FleetEvent::Remove { name, revision } => match state.get(name) {
                Some(before) => lock_events(Some(before), None, Some(*revision), state.holder(before)),
                None => vec![],
            },
            FleetEvent::Reset(snap) => {
                let mut out = Vec::new();
                let names: HashSet<&str> = snap.locks.iter().map(|l| l.name.as_str()).collect();
                for after in &snap.locks {
                    let before = state.get(&after.name);
                    let holder = before.map(|b| state.holder(b)).unwrap_or_default();
                    out.extend(lock_events(before, Some(after), None, holder));
                }
                for before in state.locks().filter(|l| !names.contains(l.name.as_str())) {
                    let holder = state.holder(before);
                    out.extend(lock_events(Some(before), None, Some(snap.revision), holder));
                }
                let waiters: HashSet<_> = snap.waiters.iter().collect();
                let fences: HashMap<&str, i64> = snap.locks.iter().map(|l| (l.name.as_str(), l.fence)).collect();
                for w in snap.waiters.iter().filter(|w| !state.is_waiting(w)) {
                    let fence = fences.get(w.lock.as_str()).copied();
                    out.push(wait_event(w, true, fence));
                }
                for w in state.waiters().filter(|w| !waiters.contains(w)) {
                    out.push(wait_event(w, false, fence_of(&w.lock)));
                }
                let blacklist = &state.sessions().blacklist;
                for b in snap.blacklist.iter().filter(|b| !blacklist.contains_key(&b.session)) {
                    out.push(blacklisted(b));
                }
                for session in blacklist
                    .keys()
                    .filter(|s| !snap.blacklist.iter().any(|b| &b.session == *s))
                {
                    out.push(unblacklisted(session));
                }
                out
            }
            FleetEvent::Waiting(w) if !state.is_waiting(w) => {
                vec![wait_event(w, true, fence_of(&w.lock))]
            }
            FleetEvent::StoppedWaiting(w) if state.is_waiting(w) => {
                vec![wait_event(w, false, fence_of(&w.lock))]
            }
            FleetEvent::Blacklisted(b) if !state.sessions().blacklist.contains_key(&b.session) => {
                vec![blacklisted(b)]
            }
            FleetEvent::BlacklistLifted { session } if state.sessions().blacklist.contains_key(session) => {
                vec![unblacklisted(session)]
            }
            _ => vec![],
        }
    }

    /// The store's status moved: an outage starts or ends.
    pub(super) fn on_status(&mut self, status: &StoreStatus, now: i64) {
        match status {
            StoreStatus::Unreachable { error, .. } if !self.down => {
                self.down = true;
                if self.synced {
                    self.outage.get_or_insert(now);
                }
                self.recorder.status(now, &self.replica, Some(error));
            }
            StoreStatus::Live { .. } if self.down => {
                self.down = false;
                self.recorder.status(now, &self.replica, None);
            }
            _ => {}
        }
    }
}

fn blacklisted(b: &lockscope_model::BlacklistEntry) -> Draft {
    let (actor, detail) = match &b.body {
        Stored::Record(r) => (Some(r.by.clone()), r.reason.clone()),
        Stored::Malformed { error, .. } => (None, format!("unreadable blacklist record: {error}")),
    };
    Draft {
        kind: Some(Kind::Blacklisted),
        session: Some(b.session.clone()),
        revision: Some(b.revision),
        actor,
        detail,
        ..Draft::default()
    }
}

fn unblacklisted(session: &str) -> Draft {
    Draft {
        kind: Some(Kind::Unblacklisted),
        session: Some(session.to_string()),
        ..Draft::default()
    }
}
