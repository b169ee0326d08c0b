//! [`LockGuard`], a held lock, and what it shares with the session's heartbeat
//! (`Held`, `State`); [`LossReason`] says why a guard no longer holds.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use lockscope_model::LockRecord;
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::warn;

use super::heartbeat::extend;
use super::Session;
use crate::protocol::LockStore;
use crate::StoreError;

/// Why a guard no longer holds its lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LossReason {
    /// Someone else released (or released and re-acquired) it.
    TakenAway,
    /// The session was blacklisted; its locks are no longer extended.
    Blacklisted,
    /// No successful extension within `auto_unlock_after`: the unlocker may have
    /// released it (the store was unreachable, say).
    NotExtended,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum State {
    Held,
    Lost(LossReason),
}

/// One held lock, shared by its guard and the session's heartbeat task.
pub(super) struct Held {
    pub(super) name: String,
    pub(super) fence: i64,
    pub(super) record: Mutex<LockRecord>,
    pub(super) unlock_after: Duration,
    /// Monotonic: past this instant without an extension, the hold is void.
    pub(super) valid_until: Mutex<Instant>,
    pub(super) state: watch::Sender<State>,
}

impl Held {
    pub(super) fn mark_lost(&self, why: LossReason) {
        self.state.send_if_modified(|s| {
            let first = *s == State::Held;
            if first {
                *s = State::Lost(why);
            }
            first
        });
    }
}

/// A held lock. Releases on drop (in the background) unless unlocked or abandoned.
pub struct LockGuard<S: LockStore> {
    pub(super) session: Session<S>,
    pub(super) held: Arc<Held>,
    pub(super) done: bool,
}

impl<S: LockStore> LockGuard<S> {
    pub fn name(&self) -> &str {
        &self.held.name
    }

    /// The fencing token: pass it with every write to the protected resource.
    pub fn fence(&self) -> i64 {
        self.held.fence
    }

    /// Whether the lock is known to be lost (taken away, blacklisted, or not
    /// extended in time). Checks the monotonic clock, so it turns true even while
    /// the store is unreachable.
    pub fn is_lost(&self) -> bool {
        self.loss().is_some()
    }

    pub fn loss(&self) -> Option<LossReason> {
        match *self.held.state.borrow() {
            State::Lost(why) => Some(why),
            State::Held if Instant::now() > *self.held.valid_until.lock().unwrap() => Some(LossReason::NotExtended),
            State::Held => None,
        }
    }

    /// Resolves when the lock is lost.
    pub async fn lost(&self) -> LossReason {
        let mut rx = self.held.state.subscribe();
        let valid_until = *self.held.valid_until.lock().unwrap();
        tokio::select! {
            r = async { rx.wait_for(|s| *s != State::Held).await.map(|s| *s) } => match r {
                Ok(State::Lost(why)) => why,
                _ => LossReason::TakenAway,
            },
            _ = tokio::time::sleep_until(valid_until) => {
                match self.loss() {
                    Some(why) => why,
                    None => Box::pin(self.lost()).await,
                }
            }
        }
    }

    /// Extends the lock now (besides the session's periodic heartbeat). Fails with
    /// [`StoreError::Lost`] or [`StoreError::Blacklisted`], after which the guard
    /// reports the loss.
    pub async fn alive(&self) -> Result<(), StoreError> {
        extend(&self.session.inner, &self.held).await
    }

    /// Releases the lock: a compare-and-set on this acquisition's fencing token.
    /// `Ok(false)`: it was no longer ours, nothing was deleted.
    pub async fn unlock(mut self) -> Result<bool, StoreError> {
        self.done = true;
        self.forget();
        self.session.inner.store.release(&self.held.name, self.held.fence).await
    }

    /// Stops heartbeating the lock without releasing it, as a crashed process
    /// would: it stays held until the unlocker releases it past `auto_unlock_at`.
    /// For demos and failure tests.
    pub fn abandon(mut self) {
        self.done = true;
        self.forget();
    }

    fn forget(&self) {
        let mut held = self.session.inner.held.lock().unwrap();
        if held.get(&self.held.name).is_some_and(|x| Arc::ptr_eq(x, &self.held)) {
            held.remove(&self.held.name);
        }
        drop(held);
        self.session
            .inner
            .lost
            .lock()
            .unwrap()
            .retain(|x| !Arc::ptr_eq(x, &self.held));
    }
}

impl<S: LockStore> Drop for LockGuard<S> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        self.forget();
        let (store, name, fence) = (
            self.session.inner.store.clone(),
            self.held.name.clone(),
            self.held.fence,
        );
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                rt.spawn(async move {
                    let _ = store.release(&name, fence).await;
                });
            }
            Err(_) => warn!(lock = %name, "guard dropped outside a tokio runtime; the lock stays until auto-unlock"),
        }
    }
}

/// Compile-time check: waiting for a loss works in a spawned task.
#[allow(dead_code)]
fn lost_is_send<S: LockStore>(guard: &LockGuard<S>) {
    fn send<T: Send>(_: T) {}
    send(guard.lost());
}
