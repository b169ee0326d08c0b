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
//!
//! Layout:
//! - `mod.rs` (here): [`Session`] and [`Batch`], taking and releasing locks.
//! - `options.rs`: [`SessionConfig`], [`LockOptions`], [`hostname`], [`MAX_PURPOSE_BYTES`].
//! - `guard.rs`: [`LockGuard`] and [`LossReason`].
//! - `heartbeat.rs`: the session's heartbeat task, which extends held locks and
//!   reports losses to their guards.
//! - [`backtrace`]: the backtrace recorded with a lock.

pub mod backtrace;
mod guard;
mod heartbeat;
mod options;

pub use guard::{LockGuard, LossReason};
pub use options::{hostname, LockOptions, SessionConfig, MAX_PURPOSE_BYTES};

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lockscope_model::record::{Contention, SessionRecord, RECORD_VERSION};
use lockscope_model::{LockEntry, LockRecord};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::debug;

use crate::protocol::{Attempt, LockStore, SessionLease};
use crate::{now_ms, validate_name, StoreError};

use guard::{Held, State};
use heartbeat::{beat, heartbeat_loop};
use options::capped;

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
    /// Locks marked lost whose guards are still alive: `close` releases them
    /// too (a compare-and-set on the token; one taken away deletes nothing).
    lost: Mutex<Vec<Arc<Held>>>,
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
            lost: Mutex::new(Vec::new()),
            heartbeat: Mutex::new(None),
        });
        let task = tokio::spawn(heartbeat_loop(Arc::downgrade(&inner)));
        *inner.heartbeat.lock().unwrap() = Some(task);
        Ok(Session { inner })
    }

    pub fn id(&self) -> &str {
        &self.inner.id
    }

    /// The session's current registration (etcd: its lease), replaced when the
    /// session registers again. For tests that end a registration behind the
    /// session's back.
    pub fn registration(&self) -> SessionLease {
        self.inner.lease()
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
        let mut waiting = None;
        let outcome = tokio::time::timeout_at(deadline, self.lock_loop(name, &opts, bt, deadline, &mut waiting)).await;
        if waiting.is_some() {
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
        waiting: &mut Option<SessionLease>,
    ) -> Result<LockGuard<S>, StoreError> {
        loop {
            // Taken before the record (and its auto_unlock_at) is built: the trust
            // window can only end before the store's view of it.
            let sent = Instant::now();
            let record = self.record(opts, bt.clone());
            match self.attempt(name, record.clone()).await? {
                Attempt::Acquired { fence } => return Ok(self.guard(name, fence, record, opts, sent)),
                Attempt::Busy { from, .. } => {
                    // Shown as waiting from the first busy answer, and again under
                    // a new registration (etcd's waiter key went with the old lease).
                    let lease = self.inner.lease();
                    if *waiting != Some(lease) {
                        *waiting = Some(lease);
                        *self.inner.waiting_for.lock().unwrap() = Some(name.to_string());
                        self.inner.store.set_waiting(lease, &self.inner.id, name, true).await?;
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

    /// Stops heartbeating, releases every lock whose guard is still alive (held,
    /// or lost to the blacklist or the trust window: `docs/protocol.md`, "Close a
    /// session"), and removes the session's registration.
    pub async fn close(self) -> Result<(), StoreError> {
        if let Some(t) = self.inner.heartbeat.lock().unwrap().take() {
            t.abort();
        }
        let mut held: Vec<Arc<Held>> = self.inner.held.lock().unwrap().drain().map(|(_, h)| h).collect();
        held.append(&mut self.inner.lost.lock().unwrap());
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
