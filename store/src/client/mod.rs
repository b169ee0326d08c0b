//! The lockscope client library: what a service links to in order to take locks
//! the dashboard can explain. Written once over [`LockStore`]; works unchanged on
//! every store that implements it.
//!
//! ```no_run
//! # async fn demo() -> Result<(), lockscope_store::StoreError> {
//! use std::time::Duration;
//! use lockscope_store::client::{LockOptions, Session, SessionConfig};
//! use lockscope_store::etcd::{EtcdConfig, EtcdLocks};
//!
//! let store = EtcdLocks::connect(EtcdConfig::new(vec!["http://etcd-1:2379".into()], "/lockscope/")).await?;
//! let session = Session::open(store, SessionConfig::new("billing")).await?;
//! let guard = session
//!     .lock("invoices/2026-11", LockOptions::new("monthly invoice run", Duration::from_secs(600)))
//!     .await?;
//! // Pass the fencing token with every write to the protected resource.
//! let token = guard.fence();
//! # let _ = token;
//! guard.unlock().await?;
//! # Ok(()) }
//! ```
//!
//! Concurrency: a session's mutable state (counters, held locks) sits behind
//! `std::sync::Mutex`es held only for a few field updates, never across an
//! `.await`; each guard's loss is published on a `watch` channel so waiting on it
//! costs nothing.

pub mod backtrace;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use lockscope_model::record::{Contention, SessionRecord, RECORD_VERSION};
use lockscope_model::{LockEntry, LockRecord};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::{debug, warn};

use crate::protocol::{Attempt, Extend, LockStore, SessionLease};
use crate::{now_ms, validate_name, StoreError};

/// Who a session is and how it keeps itself alive.
#[derive(Clone, Debug)]
pub struct SessionConfig {
    pub service: String,
    pub host: String,
    pub pid: u32,
    /// How often held locks are extended and the session record refreshed.
    pub heartbeat_every: Duration,
    /// How long the session's registration (and its waiter entries) outlive the
    /// last heartbeat.
    pub session_ttl: Duration,
}

impl SessionConfig {
    pub fn new(service: impl Into<String>) -> SessionConfig {
        SessionConfig {
            service: service.into(),
            host: hostname(),
            pid: std::process::id(),
            heartbeat_every: Duration::from_secs(2),
            session_ttl: Duration::from_secs(10),
        }
    }
}

/// This machine's host name (Linux: the kernel's), `unknown` if unreadable.
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .or_else(|_| std::env::var("HOSTNAME"))
        .unwrap_or_else(|_| "unknown".into())
}

/// How to take one lock.
#[derive(Clone, Debug)]
pub struct LockOptions {
    pub purpose: String,
    /// Past this hold time the lock is flagged overdue (`alert_at`).
    pub expected_runtime: Duration,
    /// Without a heartbeat for this long the lock may be released by the unlocker
    /// (`auto_unlock_at` = last heartbeat + this). Defaults to `expected_runtime`,
    /// at least three heartbeats.
    pub auto_unlock_after: Option<Duration>,
    /// How long `lock` may wait for the lock to become free.
    pub deadline: Duration,
    /// Record where `lock` was called (costs a stack walk per call).
    pub backtrace: bool,
}

impl LockOptions {
    pub fn new(purpose: impl Into<String>, expected_runtime: Duration) -> LockOptions {
        LockOptions {
            purpose: purpose.into(),
            expected_runtime,
            auto_unlock_after: None,
            deadline: Duration::from_secs(30),
            backtrace: true,
        }
    }

    pub fn deadline(mut self, d: Duration) -> LockOptions {
        self.deadline = d;
        self
    }

    pub fn auto_unlock_after(mut self, d: Duration) -> LockOptions {
        self.auto_unlock_after = Some(d);
        self
    }

    pub fn without_backtrace(mut self) -> LockOptions {
        self.backtrace = false;
        self
    }
}

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
enum State {
    Held,
    Lost(LossReason),
}

/// One held lock, shared by its guard and the session's heartbeat task.
struct Held {
    name: String,
    fence: i64,
    record: Mutex<LockRecord>,
    unlock_after: Duration,
    /// Monotonic: past this instant without an extension, the hold is void.
    valid_until: Mutex<Instant>,
    state: watch::Sender<State>,
}

impl Held {
    fn mark_lost(&self, why: LossReason) {
        self.state.send_if_modified(|s| {
            let first = *s == State::Held;
            if first {
                *s = State::Lost(why);
            }
            first
        });
    }
}

struct Inner<S: LockStore> {
    store: S,
    id: String,
    /// Replaced when the registration ran out and the session registered again.
    lease: Mutex<SessionLease>,
    /// The store refused a heartbeat as blacklisted: the session sends no more
    /// heartbeats, so its registration runs out like a dead worker's.
    refused: std::sync::atomic::AtomicBool,
    cfg: SessionConfig,
    started_at: i64,
    counters: Mutex<Contention>,
    waiting_for: Mutex<Option<String>>,
    held: Mutex<HashMap<String, Arc<Held>>>,
    heartbeat: Mutex<Option<JoinHandle<()>>>,
}

/// A worker process's session with a lock store. Cloning is cheap; the session
/// heartbeats until [`close`](Session::close) or until it and every guard are dropped.
pub struct Session<S: LockStore> {
    inner: Arc<Inner<S>>,
}

impl<S: LockStore> Clone for Session<S> {
    fn clone(&self) -> Self {
        Session {
            inner: self.inner.clone(),
        }
    }
}

/// Locks taken by [`Session::try_lock_batch`] and those held by others.
pub struct Batch<S: LockStore> {
    pub taken: Vec<LockGuard<S>>,
    /// Names held by someone else, with the holder as seen in the same step.
    pub busy: Vec<(String, Option<LockEntry>)>,
}

fn fresh_id() -> String {
    format!("{:016x}{:016x}", fastrand::u64(..), fastrand::u64(..))
}

impl<S: LockStore> Session<S> {
    /// Registers a new session (a fresh id) and starts its heartbeat.
    pub async fn open(store: S, cfg: SessionConfig) -> Result<Session<S>, StoreError> {
        Self::open_as(store, cfg, fresh_id()).await
    }

    /// Like [`open`](Session::open) with a chosen id: a valid lock name without
    /// `/` (`docs/protocol.md`); the caller keeps ids unique.
    pub async fn open_as(store: S, cfg: SessionConfig, id: String) -> Result<Session<S>, StoreError> {
        if validate_name(&id).is_err() || id.contains('/') {
            return Err(StoreError::Config(format!(
                "invalid session id {id:?}: 1 to 512 bytes, no control characters, no '/'"
            )));
        }
        let started_at = now_ms();
        let mut record = SessionRecord {
            v: RECORD_VERSION,
            session: id.clone(),
            service: cfg.service.clone(),
            host: cfg.host.clone(),
            pid: cfg.pid,
            started_at,
            heartbeat_at: started_at,
            waiting_for: None,
            contention: Contention::default(),
        };
        record.contention.wait_buckets = vec![0; lockscope_model::record::WAIT_BUCKETS_MS.len() + 1];
        let lease = store.open_session(&record, cfg.session_ttl).await?;
        let inner = Arc::new(Inner {
            store,
            id,
            lease: Mutex::new(lease),
            refused: Default::default(),
            cfg,
            started_at,
            counters: Mutex::new(record.contention),
            waiting_for: Mutex::new(None),
            held: Mutex::new(HashMap::new()),
            heartbeat: Mutex::new(None),
        });
        let task = tokio::spawn(heartbeat_loop(Arc::downgrade(&inner)));
        *inner.heartbeat.lock().unwrap() = Some(task);
        Ok(Session { inner })
    }

    pub fn id(&self) -> &str {
        &self.inner.id
    }

    /// The contention counters as they will be published with the next heartbeat.
    pub fn contention(&self) -> Contention {
        self.inner.counters.lock().unwrap().clone()
    }

    /// Takes `name`, waiting up to `opts.deadline` while someone else holds it.
    ///
    /// While blocked, the session is registered as a waiter and waits on a store
    /// notification (etcd: a watch from the failed attempt's revision), not by
    /// polling. Returns [`StoreError::Deadline`] at the deadline, whatever the store
    /// does; an attempt still in flight then is released if it succeeds late.
    pub async fn lock(&self, name: &str, opts: LockOptions) -> Result<LockGuard<S>, StoreError> {
        validate_name(name)?;
        let bt = if opts.backtrace {
            backtrace::capture()
        } else {
            Vec::new()
        };
        let started = Instant::now();
        let deadline = started + opts.deadline;
        let mut waiting = false;
        let outcome = tokio::time::timeout_at(deadline, self.lock_loop(name, &opts, bt, deadline, &mut waiting)).await;
        if waiting {
            self.stop_waiting(name);
        }
        self.inner
            .counters
            .lock()
            .unwrap()
            .record_wait(started.elapsed().as_millis() as u64);
        match outcome {
            Ok(r) => r,
            Err(_) => Err(StoreError::Deadline {
                name: name.to_string(),
                deadline: opts.deadline,
            }),
        }
    }

    async fn lock_loop(
        &self,
        name: &str,
        opts: &LockOptions,
        bt: Vec<String>,
        deadline: Instant,
        waiting: &mut bool,
    ) -> Result<LockGuard<S>, StoreError> {
        loop {
            let record = self.record(opts, bt.clone());
            let sent = Instant::now();
            match self.attempt(name, record.clone()).await? {
                Attempt::Acquired { fence } => return Ok(self.guard(name, fence, record, opts, sent)),
                Attempt::Busy { from, .. } => {
                    if !*waiting {
                        *waiting = true;
                        *self.inner.waiting_for.lock().unwrap() = Some(name.to_string());
                        self.inner
                            .store
                            .set_waiting(self.inner.lease(), &self.inner.id, name, true)
                            .await?;
                    }
                    let left = deadline.saturating_duration_since(Instant::now());
                    self.inner.store.wait_released(name, from, left).await?;
                }
            }
        }
    }

    /// One acquisition attempt, run as its own task: if the caller gives up (its
    /// deadline) while the attempt is in flight, a late success is released.
    async fn attempt(&self, name: &str, record: LockRecord) -> Result<Attempt, StoreError> {
        struct InFlight<S: LockStore> {
            task: Option<JoinHandle<Result<Attempt, StoreError>>>,
            store: S,
            name: String,
        }
        impl<S: LockStore> Drop for InFlight<S> {
            fn drop(&mut self) {
                if let Some(task) = self.task.take() {
                    let (store, name) = (self.store.clone(), std::mem::take(&mut self.name));
                    tokio::spawn(async move {
                        if let Ok(Ok(Attempt::Acquired { fence })) = task.await {
                            debug!(name, fence, "releasing a lock acquired after its deadline");
                            let _ = store.release(&name, fence).await;
                        }
                    });
                }
            }
        }
        let store = self.inner.store.clone();
        let owned = name.to_string();
        let task = tokio::spawn(async move { store.try_acquire(&owned, &record).await });
        let mut flight = InFlight {
            task: Some(task),
            store: self.inner.store.clone(),
            name: name.to_string(),
        };
        let result = flight.task.as_mut().expect("set above").await;
        flight.task = None;
        let attempt = result.map_err(|e| StoreError::backend("acquire task failed", e))??;
        let mut c = self.inner.counters.lock().unwrap();
        c.attempts += 1;
        match attempt {
            Attempt::Acquired { .. } => c.acquired += 1,
            Attempt::Busy { .. } => c.conflicts += 1,
        }
        Ok(attempt)
    }

    fn stop_waiting(&self, name: &str) {
        *self.inner.waiting_for.lock().unwrap() = None;
        let (inner, name) = (self.inner.clone(), name.to_string());
        // Best effort and off the caller's clock: the waiter key also dies with the
        // session's lease.
        tokio::spawn(async move {
            let _ = inner.store.set_waiting(inner.lease(), &inner.id, &name, false).await;
        });
    }

    /// Takes every lock in `names` that is free right now, without waiting; the
    /// caller works on what it got and comes back for the rest.
    pub async fn try_lock_batch(&self, names: &[&str], opts: LockOptions) -> Result<Batch<S>, StoreError> {
        for n in names {
            validate_name(n)?;
        }
        let bt = if opts.backtrace {
            backtrace::capture()
        } else {
            Vec::new()
        };
        let attempts = names.iter().map(|n| {
            let record = self.record(&opts, bt.clone());
            async move { (n.to_string(), record.clone(), self.attempt(n, record).await) }
        });
        let mut batch = Batch {
            taken: Vec::new(),
            busy: Vec::new(),
        };
        let mut first_error = None;
        let sent = Instant::now();
        for (name, record, r) in futures::future::join_all(attempts).await {
            match r {
                Ok(Attempt::Acquired { fence }) => batch.taken.push(self.guard(&name, fence, record, &opts, sent)),
                Ok(Attempt::Busy { holder, .. }) => batch.busy.push((name, holder)),
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        // The guards taken so far release themselves on drop if we fail here.
        match first_error {
            Some(e) => Err(e),
            None => Ok(batch),
        }
    }

    fn record(&self, opts: &LockOptions, backtrace: Vec<String>) -> LockRecord {
        let now = now_ms();
        let expected = opts.expected_runtime.as_millis() as i64;
        LockRecord {
            v: RECORD_VERSION,
            owner: fresh_id(),
            session: self.inner.id.as_str().into(),
            service: self.inner.cfg.service.as_str().into(),
            host: self.inner.cfg.host.as_str().into(),
            pid: self.inner.cfg.pid,
            purpose: capped(&opts.purpose).to_string(),
            backtrace: backtrace.into(),
            acquired_at: now,
            expected_runtime_ms: expected as u64,
            alert_at: now + expected,
            auto_unlock_at: now + self.unlock_after(opts).as_millis() as i64,
            heartbeat_at: now,
        }
    }

    fn unlock_after(&self, opts: &LockOptions) -> Duration {
        opts.auto_unlock_after
            .unwrap_or(opts.expected_runtime)
            .max(self.inner.cfg.heartbeat_every * 3)
    }

    /// `sent`: when the acquiring request was sent. The trust window counts
    /// from then: the store's `auto_unlock_at` can only be later.
    fn guard(&self, name: &str, fence: i64, record: LockRecord, opts: &LockOptions, sent: Instant) -> LockGuard<S> {
        let unlock_after = self.unlock_after(opts);
        let (state, _) = watch::channel(State::Held);
        let held = Arc::new(Held {
            name: name.to_string(),
            fence,
            record: Mutex::new(record),
            unlock_after,
            valid_until: Mutex::new(sent + unlock_after),
            state,
        });
        self.inner.held.lock().unwrap().insert(name.to_string(), held.clone());
        LockGuard {
            session: self.clone(),
            held,
            done: false,
        }
    }

    /// Stops heartbeating, releases every lock still held, and removes the
    /// session's registration.
    pub async fn close(self) -> Result<(), StoreError> {
        if let Some(t) = self.inner.heartbeat.lock().unwrap().take() {
            t.abort();
        }
        let held: Vec<Arc<Held>> = self.inner.held.lock().unwrap().drain().map(|(_, h)| h).collect();
        for h in held {
            let _ = self.inner.store.release(&h.name, h.fence).await;
        }
        self.inner.store.close_session(self.inner.lease(), &self.inner.id).await
    }

    /// Heartbeats now instead of at the next tick: refreshes the session record and
    /// extends every held lock (reporting any loss to its guard).
    pub async fn heartbeat_now(&self) {
        beat(&self.inner).await
    }
}

/// Longest `purpose` written: what leaves room for the rest of the record
/// within the protocol's 256 KiB (`docs/protocol.md`).
pub const MAX_PURPOSE_BYTES: usize = 240 * 1024;

/// `purpose` cut to [`MAX_PURPOSE_BYTES`] at a character boundary.
fn capped(purpose: &str) -> &str {
    if purpose.len() <= MAX_PURPOSE_BYTES {
        return purpose;
    }
    let mut end = MAX_PURPOSE_BYTES;
    while !purpose.is_char_boundary(end) {
        end -= 1;
    }
    &purpose[..end]
}

async fn heartbeat_loop<S: LockStore>(inner: Weak<Inner<S>>) {
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
    fn lease(&self) -> SessionLease {
        *self.lease.lock().unwrap()
    }
}

async fn beat<S: LockStore>(inner: &Arc<Inner<S>>) {
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
    match inner.store.session_heartbeat(inner.lease(), &record).await {
        Err(StoreError::Blacklisted { .. }) => {
            warn!(session = %inner.id, "session blacklisted: heartbeats stop, held locks are lost");
            inner.refused.store(true, std::sync::atomic::Ordering::Relaxed);
            for h in &held {
                lose(inner, h, LossReason::Blacklisted);
            }
            return;
        }
        Err(StoreError::SessionExpired { .. }) => {
            // The registration ran out (a long pause, a store that lost it): the
            // same session registers again; its waiters are put again by the
            // calls still waiting, on their next attempt.
            warn!(session = %inner.id, "session registration ran out; registering again");
            match inner.store.open_session(&record, inner.cfg.session_ttl).await {
                Ok(lease) => *inner.lease.lock().unwrap() = lease,
                Err(StoreError::Blacklisted { .. }) => {
                    inner.refused.store(true, std::sync::atomic::Ordering::Relaxed);
                    for h in &held {
                        lose(inner, h, LossReason::Blacklisted);
                    }
                    return;
                }
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
async fn extend<S: LockStore>(inner: &Arc<Inner<S>>, h: &Arc<Held>) -> Result<(), StoreError> {
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
    }
}

/// A held lock. Releases on drop (in the background) unless unlocked or abandoned.
pub struct LockGuard<S: LockStore> {
    session: Session<S>,
    held: Arc<Held>,
    done: bool,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_huge_purpose_is_cut_at_a_character_boundary() {
        let long = "é".repeat(MAX_PURPOSE_BYTES);
        let cut = capped(&long);
        assert!(cut.len() <= MAX_PURPOSE_BYTES && cut.len() > MAX_PURPOSE_BYTES - 2);
        assert_eq!(capped("short"), "short");
    }
}
