//! One simulated worker process and what the workers share: it loops taking,
//! holding and releasing locks as planned, hangs or dies now and then, and is
//! restarted with a fresh session (after dying, or when its session was
//! blacklisted).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fastrand::Rng;
use lockscope_store::client::{LockGuard, LockOptions, LossReason, Session};
use lockscope_store::protocol::LockStore;
use lockscope_store::StoreError;
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{info, warn};

use super::plan::{plan, purpose, sample_between, sample_idle, Fate, Keyspace, RESTART_PAUSE};
use super::{session_config, AbandonedLock, DemoConfig, DemoStats};

/// How often a holding worker checks whether its lock was lost.
const LOSS_CHECK_EVERY: Duration = Duration::from_millis(250);
/// Pause after an unexpected store error before the worker tries again.
const ERROR_PAUSE: Duration = Duration::from_secs(1);

#[derive(Default)]
pub(super) struct Counters {
    acquired: AtomicU64,
    conflicts: AtomicU64,
    timeouts: AtomicU64,
    deaths: AtomicU64,
    stalls: AtomicU64,
    hangs: AtomicU64,
    lost: AtomicU64,
    errors: AtomicU64,
    abandoned: Mutex<Vec<AbandonedLock>>,
}

impl Counters {
    fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn stats(&self) -> DemoStats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        DemoStats {
            acquired: get(&self.acquired),
            conflicts: get(&self.conflicts),
            timeouts: get(&self.timeouts),
            deaths: get(&self.deaths),
            stalls: get(&self.stalls),
            hangs: get(&self.hangs),
            lost: get(&self.lost),
            errors: get(&self.errors),
            swept: 0,
            abandoned: self.abandoned.lock().unwrap().clone(),
        }
    }
}

/// What every worker shares.
pub(super) struct Shared<S: LockStore> {
    pub(super) store: S,
    pub(super) cfg: DemoConfig,
    pub(super) keyspace: Keyspace,
    pub(super) counters: Counters,
}

/// One simulated worker process (restarted with a fresh session when it dies).
pub(super) struct Worker<S: LockStore> {
    pub(super) shared: Arc<Shared<S>>,
    pub(super) service: &'static str,
    /// Which of the fleet's workers this is: it names the worker's host.
    pub(super) slot: usize,
    pub(super) rng: Rng,
    pub(super) stop: watch::Receiver<bool>,
}

/// How one job ended, as far as the worker loop cares.
enum Job {
    Done,
    Died,
    Stopped,
    /// The session cannot go on (blacklisted, expired): open a new one.
    Replace,
}

/// How holding a lock ended.
enum Held {
    Served,
    Lost(LossReason),
    Stopped,
}

impl<S: LockStore> Worker<S> {
    /// Runs until stopped; returns the id of the session it closed at the end.
    pub(super) async fn run(mut self, first: Session<S>) -> Option<String> {
        let mut session = first;
        // Conflicts counted so far from this session's counters.
        let mut seen_conflicts = 0;
        loop {
            let job = self.job(&session, &mut seen_conflicts).await;
            match job {
                Job::Done => {
                    let idle = sample_idle(&mut self.rng, self.shared.cfg.hold_mean);
                    if !self.pause(idle).await {
                        break;
                    }
                }
                Job::Stopped => break,
                Job::Died | Job::Replace => {
                    if let Job::Replace = job {
                        let _ = session.close().await;
                    } else {
                        // A dead process closes nothing: dropping the session (its
                        // last handle) just stops its heartbeat.
                        drop(session);
                    }
                    let pause = sample_between(&mut self.rng, RESTART_PAUSE.0, RESTART_PAUSE.1);
                    if !self.pause(pause).await {
                        return None;
                    }
                    session = self.open().await?;
                    seen_conflicts = 0;
                }
            }
        }
        let id = session.id().to_string();
        if let Err(e) = session.close().await {
            warn!(session = %id, error = %e, "closing a demo session failed");
        }
        Some(id)
    }

    /// Takes one lock, holds it, and lets it go the planned way.
    async fn job(&mut self, session: &Session<S>, seen_conflicts: &mut u64) -> Job {
        let shared = self.shared.clone();
        let (cfg, counters) = (&shared.cfg, &shared.counters);
        let key = &shared.keyspace.keys[shared.keyspace.pick(&mut self.rng, cfg.hot_share)];
        let plan = plan(&mut self.rng, cfg);
        let opts = LockOptions::new(purpose(&mut self.rng, self.service, key), cfg.expected_runtime)
            .deadline(cfg.lock_deadline)
            .auto_unlock_after(cfg.auto_unlock_after);
        let taken = tokio::select! {
            r = session.lock(&key.name, opts) => Some(r),
            _ = stopped(&mut self.stop) => None,
        };
        let conflicts = session.contention().conflicts;
        counters
            .conflicts
            .fetch_add(conflicts.saturating_sub(*seen_conflicts), Ordering::Relaxed);
        *seen_conflicts = conflicts;
        let guard = match taken {
            None => return Job::Stopped,
            Some(Ok(guard)) => guard,
            Some(Err(StoreError::Deadline { .. })) => {
                Counters::bump(&counters.timeouts);
                return Job::Done;
            }
            Some(Err(e @ (StoreError::Blacklisted { .. } | StoreError::SessionExpired { .. }))) => {
                warn!(session = %session.id(), error = %e, "demo session cannot go on; opening a new one");
                Counters::bump(&counters.errors);
                return Job::Replace;
            }
            Some(Err(e)) => {
                warn!(lock = %key.name, error = %e, "demo worker could not lock");
                Counters::bump(&counters.errors);
                return if self.pause(ERROR_PAUSE).await {
                    Job::Done
                } else {
                    Job::Stopped
                };
            }
        };
        Counters::bump(&counters.acquired);
        match plan.fate {
            Fate::Stall => Counters::bump(&counters.stalls),
            Fate::Hang => Counters::bump(&counters.hangs),
            Fate::Release | Fate::Die => {}
        }
        let held = if plan.fate == Fate::Hang {
            self.hang(session, &guard, plan.hold).await
        } else {
            self.hold(&guard, plan.hold).await
        };
        match held {
            Held::Lost(LossReason::Blacklisted) => {
                Counters::bump(&counters.lost);
                // Not unlock() (it succeeds by fence): a blacklisted session's locks run out at auto_unlock_at.
                guard.abandon();
                info!(lock = %key.name, session = %session.id(), service = self.service, "demo session blacklisted: its lock is left to run out; opening a new session");
                // The session can take no more locks. On a stop, `run` ends in the restart
                // pause without reporting this session closed, so its final sweep skips the lock.
                Job::Replace
            }
            Held::Lost(_) => {
                Counters::bump(&counters.lost);
                // Released if the store still has it as ours (say it was only
                // unreachable for a while); a no-op otherwise.
                let _ = guard.unlock().await;
                if *self.stop.borrow() {
                    Job::Stopped
                } else {
                    Job::Done
                }
            }
            Held::Served if plan.fate == Fate::Die => {
                let dead = AbandonedLock {
                    name: key.name.clone(),
                    fence: guard.fence(),
                    session: session.id().to_string(),
                };
                guard.abandon();
                info!(lock = %dead.name, fence = dead.fence, session = %dead.session, service = self.service, "demo worker died holding its lock");
                Counters::bump(&counters.deaths);
                counters.abandoned.lock().unwrap().push(dead);
                Job::Died
            }
            Held::Served | Held::Stopped => {
                match guard.unlock().await {
                    Ok(true) => {}
                    Ok(false) => Counters::bump(&counters.lost),
                    Err(e) => {
                        warn!(lock = %key.name, error = %e, "demo worker could not unlock");
                        Counters::bump(&counters.errors);
                    }
                }
                if matches!(held, Held::Stopped) {
                    Job::Stopped
                } else {
                    Job::Done
                }
            }
        }
    }

    /// Holds the lock for `hold`, watching for its loss.
    async fn hold(&mut self, guard: &LockGuard<S>, hold: Duration) -> Held {
        // `LockGuard::lost()` would be the natural wait, but its future is not
        // `Send` (so not usable in a spawned task); checking every
        // `LOSS_CHECK_EVERY` is as good for a demo.
        let until = Instant::now() + hold;
        loop {
            if let Some(why) = guard.loss() {
                return Held::Lost(why);
            }
            let now = Instant::now();
            if now >= until {
                return Held::Served;
            }
            if !self.pause((until - now).min(LOSS_CHECK_EVERY)).await {
                return Held::Stopped;
            }
        }
    }

    /// Stuck but alive for `hold`: the worker neither looks at nor touches its
    /// lock, while the session's own heartbeat task keeps the session and the lock
    /// alive, so the lock turns overdue with a healthy-looking holder. Only the
    /// demo's stop cuts it short.
    async fn hang(&mut self, session: &Session<S>, guard: &LockGuard<S>, hold: Duration) -> Held {
        info!(lock = %guard.name(), fence = guard.fence(), session = %session.id(), service = self.service, hang_secs = hold.as_secs(), "demo worker hangs holding its lock");
        let served = self.pause(hold).await;
        // Awake, it looks at its lock for the first time. An extension now also
        // catches a loss (a blacklisting, a force-release) the heartbeat has not
        // noticed yet; a failing store just leaves the answer to `loss`.
        if guard.loss().is_none() {
            let _ = guard.alive().await;
        }
        match guard.loss() {
            Some(why) => Held::Lost(why),
            None if served => Held::Served,
            None => Held::Stopped,
        }
    }

    /// A new session for a restarted worker, retried until it opens or the demo stops.
    async fn open(&mut self) -> Option<Session<S>> {
        loop {
            let cfg = session_config(&self.shared.cfg, self.service, self.slot, &mut self.rng);
            let opened = tokio::select! {
                r = Session::open(self.shared.store.clone(), cfg) => r,
                _ = stopped(&mut self.stop) => return None,
            };
            match opened {
                Ok(s) => return Some(s),
                Err(e) => {
                    warn!(service = self.service, error = %e, "demo worker could not open a session");
                    Counters::bump(&self.shared.counters.errors);
                    if !self.pause(ERROR_PAUSE).await {
                        return None;
                    }
                }
            }
        }
    }

    /// Sleeps for `d`; `false` if the demo stopped meanwhile.
    async fn pause(&mut self, d: Duration) -> bool {
        tokio::select! {
            _ = tokio::time::sleep(d) => true,
            _ = stopped(&mut self.stop) => false,
        }
    }
}

/// Resolves once the demo is told to stop (or its controller is gone).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}
