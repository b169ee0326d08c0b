//! The hub's lock detail and sessions watchers (the detail and sessions pages).
//!
//! Each watched lock has one `watch` channel shared by all its watchers, the
//! sessions list one for the fleet: a watch channel keeps only the latest
//! value, so a slow page gets the present, never a backlog. A watched lock is
//! rebuilt when it, its waiters or its holder's session changed; the sessions
//! list (which every heartbeat changes) at most every [`SESSIONS_EVERY_MS`].
//! Channels nobody watches any more are dropped on the next turn.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use lockscope_model::detail::{LockDetail, SessionList};
use lockscope_model::time::Millis;
use lockscope_model::wire::SESSIONS_EVERY_MS;
use lockscope_model::{Changed, FleetState};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::live::views::Views;

#[derive(Default)]
pub(super) struct Watchers {
    locks: HashMap<String, watch::Sender<Option<LockDetail>>>,
    sessions: Option<watch::Sender<Option<SessionList>>>,
    sessions_dirty: bool,
    sessions_sent_at: Option<Instant>,
    /// Watched locks to rebuild at the end of this turn.
    dirty: HashSet<String>,
    /// Per lock, when this server first saw each of its waiters (its clock), and
    /// whether it came with a whole-table read (it was already waiting then).
    waiter_since: HashMap<String, HashMap<String, (Millis, bool)>>,
}

impl Watchers {
    /// Follows one change of `state` (already applied); `from_reset`: it came
    /// from a whole-table read.
    pub(super) fn on_change(&mut self, state: &FleetState, change: &Changed, now: Millis, from_reset: bool) {
        self.sessions_dirty = true;
        match change {
            Changed::Lock(name) => self.touch(name),
            Changed::Waiters(lock) => {
                let current: HashSet<&str> = state.waiters_of(lock).collect();
                if current.is_empty() {
                    self.waiter_since.remove(lock);
                } else {
                    let since = self.waiter_since.entry(lock.clone()).or_default();
                    since.retain(|session, _| current.contains(session.as_str()));
                    for session in current {
                        since.entry(session.to_string()).or_insert((now, from_reset));
                    }
                }
                self.touch(lock);
            }
            Changed::Session(id) | Changed::Holder(id) => {
                let affected: Vec<String> = self
                    .locks
                    .keys()
                    .filter(|name| {
                        let holds = state
                            .get(name)
                            .and_then(|e| e.holder_session())
                            .is_some_and(|s| s == &**id);
                        holds || state.waiters_of(name).any(|w| w == id)
                    })
                    .cloned()
                    .collect();
                self.dirty.extend(affected);
            }
        }
    }

    fn touch(&mut self, name: &str) {
        if self.locks.contains_key(name) {
            self.dirty.insert(name.to_string());
        }
    }

    /// Sends what changed: the dirty watched locks at once, the sessions list
    /// when due. Drops channels nobody watches.
    pub(super) fn flush(&mut self, state: &FleetState, views: &Views) {
        self.locks.retain(|_, tx| tx.receiver_count() > 0);
        for name in std::mem::take(&mut self.dirty) {
            if let Some(tx) = self.locks.get(&name) {
                let detail = self.detail(state, &name);
                tx.send_if_modified(|d| {
                    let changed = d.as_ref() != Some(&detail);
                    *d = Some(detail);
                    changed
                });
            }
        }
        if self.sessions.as_ref().is_some_and(|tx| tx.receiver_count() == 0) {
            self.sessions = None;
        }
        if self.sessions.is_some() && self.sessions_dirty && self.sessions_due().is_none_or(|at| at <= Instant::now()) {
            let list = sessions_now(state, views);
            self.sessions_dirty = false;
            self.sessions_sent_at = Some(Instant::now());
            if let Some(tx) = &self.sessions {
                tx.send_if_modified(|l| {
                    let changed = l.as_ref() != Some(&list);
                    *l = Some(list);
                    changed
                });
            }
        }
    }

    /// When the sessions list may next be sent.
    fn sessions_due(&self) -> Option<Instant> {
        self.sessions_sent_at
            .map(|at| at + Duration::from_millis(SESSIONS_EVERY_MS))
    }

    /// When [`Watchers::flush`] has something to send by itself.
    pub(super) fn next_wake(&self) -> Option<Instant> {
        match self.sessions.is_some() && self.sessions_dirty {
            true => Some(self.sessions_due().unwrap_or_else(Instant::now)),
            false => None,
        }
    }

    fn detail(&self, state: &FleetState, name: &str) -> LockDetail {
        let since = self.waiter_since.get(name);
        LockDetail::build(state, name, |session| {
            // Every waiter is noted as it comes; a miss would be a bug, shown as
            // "at least since now" rather than as a wrong duration.
            since
                .and_then(|s| s.get(session))
                .copied()
                .unwrap_or((lockscope_store::now_ms(), true))
        })
    }

    /// A receiver of lock `name`'s detail, holding it as it is now.
    pub(super) fn watch_lock(&mut self, state: &FleetState, name: &str) -> watch::Receiver<Option<LockDetail>> {
        if let Some(tx) = self.locks.get(name) {
            return tx.subscribe();
        }
        let (tx, rx) = watch::channel(Some(self.detail(state, name)));
        self.locks.insert(name.to_string(), tx);
        rx
    }

    /// A receiver of the sessions list, holding it as it is now.
    pub(super) fn watch_sessions(&mut self, state: &FleetState, views: &Views) -> watch::Receiver<Option<SessionList>> {
        if let Some(tx) = &self.sessions {
            return tx.subscribe();
        }
        let list = sessions_now(state, views);
        self.sessions_sent_at = Some(Instant::now());
        self.sessions_dirty = false;
        let (tx, rx) = watch::channel(Some(list));
        self.sessions = Some(tx);
        rx
    }
}

fn sessions_now(state: &FleetState, views: &Views) -> SessionList {
    SessionList::build(state, |id| views.locks_of_session(id))
}
