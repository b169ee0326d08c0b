//! The session's heartbeat: refreshes the session record and extends every held
//! lock, and reports a lock lost to its guard.

use std::sync::{Arc, Weak};

use lockscope_model::record::{SessionRecord, RECORD_VERSION};
use tokio::time::Instant;
use tracing::warn;

use super::guard::{Held, LossReason, State};
use super::Inner;
use crate::protocol::{Extend, LockStore, SessionLease};
use crate::{now_ms, StoreError};

pub(super) async fn heartbeat_loop<S: LockStore>(inner: Weak<Inner<S>>) {
    let every = match inner.upgrade() {
        Some(i) => i.cfg.heartbeat_every,
        None => return,
    };
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        let Some(inner) = inner.upgrade() else { return };
        if inner.refused.load(std::sync::atomic::Ordering::Relaxed) {
            return;
        }
        beat(&inner).await;
    }
}

impl<S: LockStore> Inner<S> {
    pub(super) fn lease(&self) -> SessionLease {
        *self.lease.lock().unwrap()
    }
}

pub(super) async fn beat<S: LockStore>(inner: &Arc<Inner<S>>) {
    let now = now_ms();
    let record = SessionRecord {
        v: RECORD_VERSION,
        session: inner.id.clone(),
        service: inner.cfg.service.clone(),
        host: inner.cfg.host.clone(),
        pid: inner.cfg.pid,
        started_at: inner.started_at,
        heartbeat_at: now,
        waiting_for: inner.waiting_for.lock().unwrap().clone(),
        contention: inner.counters.lock().unwrap().clone(),
    };
    let held: Vec<Arc<Held>> = inner.held.lock().unwrap().values().cloned().collect();
    if inner.refused.load(std::sync::atomic::Ordering::Relaxed) {
        return;
    }
    // Refused as blacklisted: no more heartbeats, every held lock is lost.
    let refuse = |held: &[Arc<Held>]| {
        warn!(session = %inner.id, "session blacklisted: heartbeats stop, held locks are lost");
        inner.refused.store(true, std::sync::atomic::Ordering::Relaxed);
        for h in held {
            lose(inner, h, LossReason::Blacklisted);
        }
    };
    let hb = inner.store.session_heartbeat(inner.lease(), &record).await;
    match hb {
        Err(StoreError::Blacklisted { .. }) => return refuse(&held),
        Err(StoreError::SessionExpired { .. }) => {
            // The registration ran out (a long pause, a store that lost it): the
            // same session registers again, with the same started_at, identity
            // and counters, and the wait it shows is registered again with it.
            warn!(session = %inner.id, "session registration ran out; registering again");
            match inner.store.open_session(&record, inner.cfg.session_ttl).await {
                Ok(lease) => {
                    *inner.lease.lock().unwrap() = lease;
                    // docs/protocol.md, Session heartbeat step 1: "put(W, …, new
                    // lease) for every lock call still waiting" (the old lease took W).
                    if let Some(name) = &record.waiting_for {
                        if let Err(e) = inner.store.set_waiting(lease, &inner.id, name, true).await {
                            warn!(session = %inner.id, error = %e, "registering the wait again failed");
                        }
                    }
                }
                Err(StoreError::Blacklisted { .. }) => return refuse(&held),
                Err(e) => warn!(session = %inner.id, error = %e, "registering the session again failed"),
            }
        }
        Err(e) => warn!(session = %inner.id, error = %e, "session heartbeat failed"),
        Ok(()) => {}
    }
    for h in held {
        if let Err(e) = extend(inner, &h).await {
            warn!(lock = %h.name, error = %e, "lock heartbeat failed");
        }
    }
}

/// Extends one held lock; marks it lost when the store says so, or when it has
/// gone unextended for longer than it may.
pub(super) async fn extend<S: LockStore>(inner: &Arc<Inner<S>>, h: &Arc<Held>) -> Result<(), StoreError> {
    if *h.state.borrow() != State::Held {
        return Err(StoreError::Lost { name: h.name.clone() });
    }
    let sent = Instant::now();
    if sent > *h.valid_until.lock().unwrap() {
        // Past its trust window the store may have released it (the unlocker):
        // the loss is final, even if an extension would still succeed.
        lose(inner, h, LossReason::NotExtended);
        return Err(StoreError::Lost { name: h.name.clone() });
    }
    let record = {
        let mut r = h.record.lock().unwrap();
        r.heartbeat_at = now_ms();
        r.auto_unlock_at = r.heartbeat_at + h.unlock_after.as_millis() as i64;
        r.clone()
    };
    match inner.store.extend(&h.name, h.fence, &record).await {
        Ok(Extend::Extended) => {
            // Measured from before the request: the store's view can only be later.
            *h.valid_until.lock().unwrap() = sent + h.unlock_after;
            Ok(())
        }
        Ok(Extend::Lost) => {
            lose(inner, h, LossReason::TakenAway);
            Err(StoreError::Lost { name: h.name.clone() })
        }
        Ok(Extend::Blacklisted) => {
            lose(inner, h, LossReason::Blacklisted);
            Err(StoreError::Blacklisted {
                session: inner.id.clone(),
            })
        }
        Err(e) => {
            if Instant::now() > *h.valid_until.lock().unwrap() {
                lose(inner, h, LossReason::NotExtended);
            }
            Err(e)
        }
    }
}

fn lose<S: LockStore>(inner: &Inner<S>, h: &Arc<Held>, why: LossReason) {
    h.mark_lost(why);
    let mut held = inner.held.lock().unwrap();
    if held.get(&h.name).is_some_and(|x| Arc::ptr_eq(x, h)) {
        held.remove(&h.name);
        inner.counters.lock().unwrap().lost += 1;
        inner.lost.lock().unwrap().push(h.clone());
    }
}
