//! What the hub tells the history: for each store event, before the reducer
//! applies it, the history events it means ([`lockscope_model::history`]
//! derives them from the lock as it was and as it will be), the releases the
//! admin path and the unlocker made credited to them ([`Credits`]), and store
//! outages.
//!
//! A snapshot applied to an empty live table (the first after a start: a
//! million acquisitions at once) is recorded as a [`Backlog`]: its
//! acquisitions go to the history from the live table a chunk at a time, as
//! fast as the writer takes them ([`HubHistory::pump`]), each at the
//! snapshot's time, as if all at once; a lock the hub changes before the
//! backlog reaches it gets its acquisition recorded first. So the history
//! never holds a copy of the fleet (issue 26: 1.9 GB at 1,000,000 locks).

use std::collections::{HashMap, HashSet};

use lockscope_model::history::{lock_events, wait_event, Draft, Kind, ReleaseNote};
use lockscope_model::record::Stored;
use lockscope_model::session::Holder;
use lockscope_model::{FleetEvent, FleetState, LockEntry, StoreStatus};
use lockscope_store::fleet::Removed;

use super::credit::{Credits, Ready};
use crate::remember::history::Recorder;

/// How often a hub with a [`Backlog`] looks whether the writer has room
/// (it writes [`BACKLOG_AHEAD`](crate::remember::history::BACKLOG_AHEAD) events in well over this).
pub(super) const PUMP_EVERY: std::time::Duration = std::time::Duration::from_millis(20);

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
    /// A snapshot's acquisitions not yet recorded ([`HubHistory::pump`]).
    backlog: Option<Backlog>,
}

/// The acquisitions of a snapshot applied to an empty live table that are
/// not recorded yet: those of the live table's locks named after `done`.
#[derive(Debug)]
struct Backlog {
    /// When the snapshot was seen: each acquisition is recorded at this time.
    at: i64,
    /// The last lock recorded (`None`: none yet).
    done: Option<String>,
}

impl Backlog {
    /// Whether `lock`'s acquisition is still to be recorded.
    fn pending(&self, lock: &str) -> bool {
        self.done.as_deref().is_none_or(|d| lock > d)
    }
}

/// The history event of `e`'s acquisition (malformed, for a value this
/// build cannot read), as a snapshot that brings it records it.
fn acquisition(e: &LockEntry) -> Vec<Draft> {
    lock_events(None, Some(e), None, Holder::default())
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
            backlog: None,
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

    /// Records what `event` means, given the table before it is applied:
    /// `live` when that is the hub's live table (not a replay's own), which a
    /// [`Backlog`] is recorded from.
    pub(super) fn before_apply(&mut self, state: &FleetState, event: &FleetEvent, now: i64, live: bool) {
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
        // An empty live table taking a snapshot: its acquisitions are a backlog.
        let defer = live && matches!(event, FleetEvent::Reset(_)) && state.locks().next().is_none();
        if let Some(b) = &self.backlog {
            // Pending acquisitions this event changes: recorded before the change.
            let early = touched(state, event, b);
            self.recorder.record(b.at, early);
        }
        let drafts = self.drafts(state, event, defer);
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
        with_services(state, &mut drafts);
        self.recorder.record(now, drafts);
        if let FleetEvent::Reset(snap) = event {
            if defer {
                self.backlog = Some(Backlog { at: now, done: None });
            }
            if !self.credits.is_empty() {
                let held: HashSet<(&str, i64)> = snap.locks.iter().map(|l| (l.name.as_str(), l.fence)).collect();
                self.credits.after_snapshot(&held);
            }
        }
        if let (FleetEvent::Reset(snap), false) = (event, self.synced) {
            self.synced = true;
            let held = match self.recorder.compares() {
                true => snap.locks.iter().map(|l| (l.name.clone(), l.fence)).collect(),
                false => HashSet::new(),
            };
            // Queued right behind the snapshot's own events (its backlog's come
            // after: the resync compares the history as it stood before it).
            self.recorder.resync(now, snap.revision, held);
        }
    }

    /// Whether a [`Backlog`] is still to be recorded (the hub then wakes
    /// often enough to keep the writer busy).
    pub(super) fn pumping(&self) -> bool {
        self.backlog.is_some()
    }

    /// Records the next of a [`Backlog`]'s acquisitions from the live table
    /// `state`, as many as the writer has room for ([`Recorder::room`]).
    pub(super) fn pump(&mut self, state: &FleetState) {
        let Some(b) = &self.backlog else { return };
        let room = self.recorder.room();
        if room == 0 {
            return;
        }
        let (at, done) = (b.at, b.done.clone());
        let mut locks: Box<dyn Iterator<Item = &LockEntry>> = match &done {
            None => Box::new(state.locks()),
            Some(done) => Box::new(state.locks_after(done)),
        };
        let (mut drafts, mut last) = (Vec::new(), None);
        for e in locks.by_ref().take(room) {
            drafts.extend(acquisition(e));
            last = Some(e);
        }
        match (last, locks.next()) {
            (Some(last), Some(_)) => {
                self.backlog = Some(Backlog {
                    at,
                    done: Some(last.name.clone()),
                })
            }
            _ => self.backlog = None,
        }
        with_services(state, &mut drafts);
        self.recorder.record(at, drafts);
    }

    /// The events `event` means, every end uncredited; `defer`: without a
    /// snapshot's acquisitions (a [`Backlog`] records them).
    fn drafts(&self, state: &FleetState, event: &FleetEvent, defer: bool) -> Vec<Draft> {
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
                // (An empty table's snapshot: every lock is an acquisition.)
                for after in snap.locks.iter().filter(|_| !defer) {
                    let before = state.get(&after.name);
                    let holder = before.map(|b| state.holder(b)).unwrap_or_default();
                    out.extend(lock_events(before, Some(after), None, holder));
                }
                if state.locks().next().is_some() {
                    let names: HashSet<&str> = snap.locks.iter().map(|l| l.name.as_str()).collect();
                    for before in state.locks().filter(|l| !names.contains(l.name.as_str())) {
                        let holder = state.holder(before);
                        out.extend(lock_events(Some(before), None, Some(snap.revision), holder));
                    }
                }
                let waiters: HashSet<_> = snap.waiters.iter().collect();
                let started: Vec<_> = snap.waiters.iter().filter(|w| !state.is_waiting(w)).collect();
                // The fences of the locks waited for only (not a map of the fleet).
                let waited: HashSet<&str> = started.iter().map(|w| w.lock.as_str()).collect();
                let fences: HashMap<&str, i64> = snap
                    .locks
                    .iter()
                    .filter(|l| waited.contains(l.name.as_str()))
                    .map(|l| (l.name.as_str(), l.fence))
                    .collect();
                for w in started {
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

/// The acquisitions still pending in `backlog` that `event` changes (a
/// heartbeat, an end, another value): recorded first, at the backlog's time,
/// so that no acquisition's end or extension comes before its start.
fn touched(state: &FleetState, event: &FleetEvent, backlog: &Backlog) -> Vec<Draft> {
    let pending = |name: &str| state.get(name).filter(|b| backlog.pending(&b.name));
    let before: Vec<&LockEntry> = match event {
        FleetEvent::Upsert(after) => pending(&after.name).into_iter().collect(),
        FleetEvent::Remove { name, .. } => pending(name).into_iter().collect(),
        FleetEvent::Reset(snap) => {
            let after: HashMap<&str, (i64, i64)> = snap
                .locks
                .iter()
                .map(|l| (l.name.as_str(), (l.fence, l.revision)))
                .collect();
            let from = backlog.done.as_deref();
            let locks: Box<dyn Iterator<Item = &LockEntry>> = match from {
                None => Box::new(state.locks()),
                Some(done) => Box::new(state.locks_after(done)),
            };
            locks
                .filter(|b| after.get(b.name.as_str()) != Some(&(b.fence, b.revision)))
                .collect()
        }
        _ => vec![],
    };
    before.into_iter().flat_map(acquisition).collect()
}

/// A waiter (or a foreign lock) names its session only: its service and host
/// (for the charts' most contended services) come from the session's record.
fn with_services(state: &FleetState, drafts: &mut [Draft]) {
    for d in drafts.iter_mut().filter(|d| d.service.is_none()) {
        let record = d
            .session
            .as_ref()
            .and_then(|s| state.sessions().sessions.get(s)?.record());
        if let Some(r) = record {
            d.service = Some(r.service.clone());
            d.host = Some(r.host.clone());
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

#[cfg(test)]
mod tests;
