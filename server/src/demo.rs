//! `lockscope demo`: a simulated fleet of workers taking real locks through the
//! client library ([`lockscope_store::client`]), so the dashboard has something
//! true to show: contention on a few hot locks, waiters, overdue holders, and
//! locks abandoned by workers that "die" holding them. Later it doubles as the load
//! generator for benchmarks and browser tests.
//!
//! Every worker owns its own [`Session`] and loops: pick a lock, take it with a
//! deadline, hold it for a sampled time, release it. Now and then a worker stalls
//! (holds past its expected runtime, so the lock turns overdue) or dies holding its
//! lock: it abandons the guard and drops its session without closing it, as a
//! crashed process would (its heartbeat stops, the lock stays until the unlocker
//! releases it), and a fresh session takes its place after a short pause.
//!
//! The decisions (which lock, how long, die or stall) are pure functions of a
//! seeded [`fastrand::Rng`] ([`Keyspace::pick`], [`plan`], [`purpose`]); the async
//! part is [`run`] and its workers. Timing still varies from run to run, so a seed
//! makes each worker's sequence of decisions reproducible, not the whole run.

use std::collections::HashSet;
use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fastrand::Rng;
use lockscope_model::LockBody;
use lockscope_store::client::{LockOptions, Session, SessionConfig};
use lockscope_store::protocol::LockStore;
use lockscope_store::StoreError;
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{info, warn};

/// Service names the workers take turns wearing.
pub const SERVICES: [&str; 4] = ["billing", "search-indexer", "payments", "reports"];

/// Readable lock names (with what taking them is for), used first; the hot locks
/// are the first `hot_keys` of the keyspace, so they are these.
const NAMED_LOCKS: [(&str, &str); 5] = [
    ("demo/payments/settlement-eu", "settle EU card payments"),
    ("demo/search/reindex-catalog", "rebuild the product catalog index"),
    ("demo/billing/invoice-run", "monthly invoice run"),
    ("demo/reports/nightly-export", "nightly warehouse export"),
    ("demo/billing/dunning", "send payment reminders for overdue invoices"),
];

/// Normal holds are cut at this fraction of the expected runtime: only stalling
/// workers make a lock overdue.
const NORMAL_HOLD_CAP: f64 = 0.9;
/// A stalling worker holds for this many times the expected runtime (uniform).
const STALL_FACTOR: (f64, f64) = (1.5, 3.0);
/// How long the "supervisor" takes to restart a dead worker (uniform).
const RESTART_PAUSE: (Duration, Duration) = (Duration::from_millis(500), Duration::from_millis(1500));
/// How often a holding worker checks whether its lock was lost.
const LOSS_CHECK_EVERY: Duration = Duration::from_millis(250);
/// Pause after an unexpected store error before the worker tries again.
const ERROR_PAUSE: Duration = Duration::from_secs(1);

/// What the demo fleet does. [`Default`] matches the CLI defaults.
#[derive(Clone, Debug, PartialEq)]
pub struct DemoConfig {
    /// Simulated workers, each with its own session.
    pub workers: usize,
    /// Distinct lock names (at least 1).
    pub keys: usize,
    /// How many of the keys are hot (at most `keys`).
    pub hot_keys: usize,
    /// Fraction (0..=1) of acquisitions that go to the hot keys.
    pub hot_share: f64,
    /// Mean hold time (exponentially distributed).
    pub hold_mean: Duration,
    /// Expected runtime recorded with every lock (overdue past it).
    pub expected_runtime: Duration,
    /// Probability per acquisition that the worker dies holding the lock.
    pub die_rate: f64,
    /// Probability per acquisition that the worker holds past the expected runtime.
    pub stall_rate: f64,
    /// How long one `lock` call may wait for a busy lock.
    pub lock_deadline: Duration,
    /// A lock not extended for this long may be released (`auto_unlock_at`):
    /// longer than a session's ttl (10 s), so a dead worker's lock shows as
    /// orphaned (its session gone) before it shows as expired.
    pub auto_unlock_after: Duration,
    /// Stop after this long; `None`: only when the stop future passed to [`run`] resolves.
    pub duration: Option<Duration>,
    /// Seed for the workers' decisions.
    pub seed: Option<u64>,
    /// How often a summary line is logged.
    pub report_every: Duration,
}

impl Default for DemoConfig {
    fn default() -> Self {
        DemoConfig {
            workers: 12,
            keys: 40,
            hot_keys: 3,
            hot_share: 0.5,
            hold_mean: Duration::from_millis(1500),
            expected_runtime: Duration::from_millis(3000),
            die_rate: 0.02,
            stall_rate: 0.05,
            lock_deadline: Duration::from_secs(5),
            auto_unlock_after: Duration::from_secs(30),
            duration: None,
            seed: None,
            report_every: Duration::from_secs(10),
        }
    }
}

/// A lock left held by a worker that died: it stays until the unlocker (or an
/// operator) releases it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AbandonedLock {
    pub name: String,
    pub fence: i64,
    /// The dead worker's session id.
    pub session: String,
}

/// Totals of a demo run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DemoStats {
    /// Locks taken.
    pub acquired: u64,
    /// Acquisition attempts that found the lock held by someone else (the
    /// sessions' contention counters; a waiting `lock` call may count several).
    pub conflicts: u64,
    /// `lock` calls that gave up at their deadline.
    pub timeouts: u64,
    /// Workers that died holding a lock.
    pub deaths: u64,
    /// Acquisitions planned to be held past the expected runtime.
    pub stalls: u64,
    /// Held locks the client library reported lost.
    pub lost: u64,
    /// Unexpected store errors (the worker paused and went on).
    pub errors: u64,
    /// Locks of live workers still found held after they closed their sessions
    /// (an acquisition that landed while its `lock` call was being cancelled), and
    /// released by the final sweep.
    pub swept: u64,
    /// The locks dead workers left behind, in order of death.
    pub abandoned: Vec<AbandonedLock>,
}

impl fmt::Display for DemoStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "acquired {}, conflicts {}, timeouts {}, deaths {}, stalls {}, lost {}, errors {}",
            self.acquired, self.conflicts, self.timeouts, self.deaths, self.stalls, self.lost, self.errors
        )
    }
}

// ---- pure decisions ----

/// One lock of the demo keyspace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Key {
    pub name: String,
    /// Fixed purpose of a named lock; `None` for `demo/jobs/<n>`, whose purpose
    /// depends on the service taking it.
    pub purpose: Option<String>,
    /// `n` of `demo/jobs/<n>` (0 for named locks).
    pub job: usize,
}

/// The lock names the fleet uses: a few readable ones, then `demo/jobs/<n>`. The
/// first `hot` of them are hot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Keyspace {
    pub keys: Vec<Key>,
    pub hot: usize,
}

impl Keyspace {
    /// `keys` names (at least 1), the first `hot` (at most `keys`) hot.
    pub fn new(keys: usize, hot: usize) -> Keyspace {
        let keys = keys.max(1);
        let named = NAMED_LOCKS.iter().take(keys).map(|(name, purpose)| Key {
            name: (*name).to_string(),
            purpose: Some((*purpose).to_string()),
            job: 0,
        });
        let jobs = (1..=keys.saturating_sub(NAMED_LOCKS.len())).map(|n| Key {
            name: format!("demo/jobs/{n}"),
            purpose: None,
            job: n,
        });
        Keyspace {
            keys: named.chain(jobs).collect(),
            hot: hot.min(keys),
        }
    }

    /// Index of the key for the next acquisition: a hot key (uniformly) with
    /// probability `hot_share`, else one of the others (uniformly). With no hot
    /// keys, or no others, every pick comes from the side that exists.
    pub fn pick(&self, rng: &mut Rng, hot_share: f64) -> usize {
        let cold = self.keys.len() - self.hot;
        let hot = self.hot > 0 && (cold == 0 || rng.f64() < hot_share);
        if hot {
            rng.usize(..self.hot)
        } else {
            self.hot + rng.usize(..cold)
        }
    }
}

/// How an acquisition ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate {
    /// Released after the hold.
    Release,
    /// Released after a hold past the expected runtime (the lock turns overdue).
    Stall,
    /// The worker dies after the hold, leaving the lock held.
    Die,
}

/// What a worker will do with the next lock it takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Plan {
    pub fate: Fate,
    pub hold: Duration,
}

/// Dies with probability `die_rate`, else stalls with probability `stall_rate`
/// (of all acquisitions), else releases normally.
pub fn choose_fate(rng: &mut Rng, die_rate: f64, stall_rate: f64) -> Fate {
    let u = rng.f64();
    if u < die_rate {
        Fate::Die
    } else if u < die_rate + stall_rate {
        Fate::Stall
    } else {
        Fate::Release
    }
}

/// An exponentially distributed duration with the given mean, cut at `cap`.
pub fn sample_exponential(rng: &mut Rng, mean: Duration, cap: Duration) -> Duration {
    // 1 - u is in (0, 1]: the logarithm is finite.
    let x = -(1.0 - rng.f64()).ln();
    mean.mul_f64(x).min(cap)
}

/// A duration uniform in `[lo, hi)`.
pub fn sample_between(rng: &mut Rng, lo: Duration, hi: Duration) -> Duration {
    lo + hi.saturating_sub(lo).mul_f64(rng.f64())
}

/// The next acquisition's fate and hold time: normal holds (also those of dying
/// workers) are exponential around `hold_mean` but stay under the expected
/// runtime; stalls hold 1.5 to 3 times the expected runtime.
pub fn plan(rng: &mut Rng, cfg: &DemoConfig) -> Plan {
    let fate = choose_fate(rng, cfg.die_rate, cfg.stall_rate);
    let hold = match fate {
        Fate::Stall => cfg
            .expected_runtime
            .mul_f64(STALL_FACTOR.0 + (STALL_FACTOR.1 - STALL_FACTOR.0) * rng.f64()),
        Fate::Release | Fate::Die => {
            sample_exponential(rng, cfg.hold_mean, cfg.expected_runtime.mul_f64(NORMAL_HOLD_CAP))
        }
    };
    Plan { fate, hold }
}

/// Pause between two jobs of a worker: uniform up to half the mean hold time.
pub fn sample_idle(rng: &mut Rng, hold_mean: Duration) -> Duration {
    sample_between(rng, Duration::ZERO, hold_mean / 2)
}

/// Why `service` takes `key`, as a person would write it.
pub fn purpose(rng: &mut Rng, service: &str, key: &Key) -> String {
    if let Some(p) = &key.purpose {
        return p.clone();
    }
    let n = key.job;
    let templates: [String; 2] = match service {
        "billing" => [
            format!("generate invoices for customer batch {n}"),
            format!("retry failed card charges, batch {n}"),
        ],
        "search-indexer" => [
            format!("rebuild search index shard {n}"),
            format!("merge index segments of shard {n}"),
        ],
        "payments" => [
            format!("settle EU card payments, batch {n}"),
            format!("reconcile bank payouts, file {n}"),
        ],
        "reports" => [
            format!("render daily revenue report, region {n}"),
            format!("export usage report part {n}"),
        ],
        other => [format!("{other} job {n}"), format!("{other} maintenance task {n}")],
    };
    let [a, b] = templates;
    if rng.bool() {
        a
    } else {
        b
    }
}

// ---- the fleet ----

#[derive(Default)]
struct Counters {
    acquired: AtomicU64,
    conflicts: AtomicU64,
    timeouts: AtomicU64,
    deaths: AtomicU64,
    stalls: AtomicU64,
    lost: AtomicU64,
    errors: AtomicU64,
    abandoned: Mutex<Vec<AbandonedLock>>,
}

impl Counters {
    fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    fn stats(&self) -> DemoStats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        DemoStats {
            acquired: get(&self.acquired),
            conflicts: get(&self.conflicts),
            timeouts: get(&self.timeouts),
            deaths: get(&self.deaths),
            stalls: get(&self.stalls),
            lost: get(&self.lost),
            errors: get(&self.errors),
            swept: 0,
            abandoned: self.abandoned.lock().unwrap().clone(),
        }
    }
}

/// What every worker shares.
struct Shared<S: LockStore> {
    store: S,
    cfg: DemoConfig,
    keyspace: Keyspace,
    counters: Counters,
}

/// Runs the demo fleet on `store` until `cfg.duration` has passed or `stop`
/// resolves, whichever comes first; then every live worker releases its lock and
/// closes its session, and the totals are returned. Locks abandoned by dead
/// workers stay held (listed in [`DemoStats::abandoned`]).
///
/// Fails only if the workers' first sessions cannot be opened; later store errors
/// are logged, counted and retried.
pub async fn run<S: LockStore>(
    store: S,
    cfg: DemoConfig,
    stop: impl Future<Output = ()>,
) -> Result<DemoStats, StoreError> {
    let keyspace = Keyspace::new(cfg.keys, cfg.hot_keys);
    info!(
        workers = cfg.workers,
        keys = keyspace.keys.len(),
        hot_keys = keyspace.hot,
        hot_share = cfg.hot_share,
        hold_mean_ms = cfg.hold_mean.as_millis() as u64,
        expected_runtime_ms = cfg.expected_runtime.as_millis() as u64,
        die_rate = cfg.die_rate,
        stall_rate = cfg.stall_rate,
        seed = ?cfg.seed,
        "demo fleet starting"
    );
    let mut held_before = 0;
    for key in &keyspace.keys {
        if store.get(&key.name).await?.is_some() {
            held_before += 1;
        }
    }
    if held_before > 0 {
        warn!(
            held_before,
            "demo locks already held (by dead workers of an earlier run?); they stay busy until released"
        );
    }
    let mut seeds = cfg.seed.map_or_else(Rng::new, Rng::with_seed);
    let mut sessions = Vec::with_capacity(cfg.workers);
    for i in 0..cfg.workers {
        let service = SERVICES[i % SERVICES.len()];
        sessions.push(Session::open(store.clone(), worker_process(service, i, &mut seeds)).await?);
    }

    let (report_every, duration) = (cfg.report_every, cfg.duration);
    let shared = Arc::new(Shared {
        store,
        cfg,
        keyspace,
        counters: Counters::default(),
    });
    let (stop_tx, stop_rx) = watch::channel(false);
    let workers: Vec<_> = sessions
        .into_iter()
        .enumerate()
        .map(|(i, session)| {
            let worker = Worker {
                shared: shared.clone(),
                service: SERVICES[i % SERVICES.len()],
                slot: i,
                rng: Rng::with_seed(seeds.u64(..)),
                stop: stop_rx.clone(),
            };
            tokio::spawn(worker.run(session))
        })
        .collect();

    let until = async {
        match duration {
            Some(d) => tokio::time::sleep(d).await,
            None => std::future::pending().await,
        }
    };
    let (mut stop, mut until) = (std::pin::pin!(stop), std::pin::pin!(until));
    let mut report = tokio::time::interval_at(Instant::now() + report_every, report_every);
    loop {
        tokio::select! {
            _ = &mut stop => break,
            _ = &mut until => break,
            _ = report.tick() => log_summary(&shared.counters.stats(), "demo fleet"),
        }
    }
    info!("demo fleet stopping: live workers release their locks");
    let _ = stop_tx.send(true);
    let mut closed = HashSet::new();
    for w in workers {
        match w.await {
            Ok(Some(session)) => {
                closed.insert(session);
            }
            Ok(None) => {}
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(e) => warn!(error = %e, "demo worker did not finish"),
        }
    }

    // A `lock` call cancelled at shutdown may still have acquired (the client
    // releases such late acquisitions in the background); make sure nothing of a
    // live worker is left behind.
    let mut swept = 0;
    for key in &shared.keyspace.keys {
        if let Some(entry) = shared.store.get(&key.name).await? {
            if let LockBody::Held(record) = &entry.body {
                if closed.contains(&*record.session) && shared.store.release(&key.name, entry.fence).await? {
                    swept += 1;
                }
            }
        }
    }
    let mut stats = shared.counters.stats();
    stats.swept = swept;
    log_summary(&stats, "demo fleet stopped");
    Ok(stats)
}

fn log_summary(s: &DemoStats, msg: &str) {
    info!(
        acquired = s.acquired,
        conflicts = s.conflicts,
        timeouts = s.timeouts,
        deaths = s.deaths,
        stalls = s.stalls,
        lost = s.lost,
        errors = s.errors,
        "{msg}"
    );
}

/// Who a simulated worker process is: its own host (one per worker slot) and a
/// fresh pid per start, so that a dead worker's locks name a process that is
/// gone rather than the dashboard's own, which is alive.
pub fn worker_process(service: &str, slot: usize, rng: &mut Rng) -> SessionConfig {
    SessionConfig {
        host: format!("{service}-{slot:02}.demo"),
        pid: rng.u32(1_000..65_000),
        ..SessionConfig::new(service)
    }
}

/// One simulated worker process (restarted with a fresh session when it dies).
struct Worker<S: LockStore> {
    shared: Arc<Shared<S>>,
    service: &'static str,
    /// Which of the fleet's workers this is: it names the worker's host.
    slot: usize,
    rng: Rng,
    stop: watch::Receiver<bool>,
}

/// How one job ended, as far as the worker loop cares.
enum Job {
    Done,
    Died,
    Stopped,
    /// The session cannot go on (blacklisted, expired): open a new one.
    Replace,
}

impl<S: LockStore> Worker<S> {
    /// Runs until stopped; returns the id of the session it closed at the end.
    async fn run(mut self, first: Session<S>) -> Option<String> {
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
        if plan.fate == Fate::Stall {
            Counters::bump(&counters.stalls);
        }
        enum Held {
            Served,
            Lost,
            Stopped,
        }
        // `LockGuard::lost()` would be the natural wait, but its future is not
        // `Send` (so not usable in a spawned task); checking every
        // `LOSS_CHECK_EVERY` is as good for a demo.
        let until = Instant::now() + plan.hold;
        let held = loop {
            if guard.is_lost() {
                break Held::Lost;
            }
            let now = Instant::now();
            if now >= until {
                break Held::Served;
            }
            if !self.pause((until - now).min(LOSS_CHECK_EVERY)).await {
                break Held::Stopped;
            }
        };
        match held {
            Held::Lost => {
                Counters::bump(&counters.lost);
                // Released if the store still has it as ours (say it was only
                // unreachable for a while); a no-op otherwise.
                let _ = guard.unlock().await;
                Job::Done
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

    /// A new session for a restarted worker, retried until it opens or the demo stops.
    async fn open(&mut self) -> Option<Session<S>> {
        loop {
            let cfg = worker_process(self.service, self.slot, &mut self.rng);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keyspace_names_readable_locks_first_then_jobs() {
        let ks = Keyspace::new(8, 2);
        let names: Vec<&str> = ks.keys.iter().map(|k| k.name.as_str()).collect();
        assert_eq!(names.len(), 8);
        assert_eq!(names[0], "demo/payments/settlement-eu");
        assert_eq!(&names[5..], ["demo/jobs/1", "demo/jobs/2", "demo/jobs/3"]);
        assert_eq!(ks.hot, 2);
        let unique: HashSet<&str> = names.iter().copied().collect();
        assert_eq!(unique.len(), 8);
        // Small and degenerate sizes.
        assert_eq!(Keyspace::new(2, 5).keys.len(), 2);
        assert_eq!(Keyspace::new(2, 5).hot, 2);
        assert_eq!(Keyspace::new(0, 0).keys.len(), 1);
    }

    #[test]
    fn pick_sends_the_hot_share_to_the_hot_keys() {
        let ks = Keyspace::new(40, 3);
        let mut rng = Rng::with_seed(7);
        let n = 20_000;
        let mut counts = vec![0usize; 40];
        for _ in 0..n {
            counts[ks.pick(&mut rng, 0.5)] += 1;
        }
        let hot: usize = counts[..3].iter().sum();
        let share = hot as f64 / n as f64;
        assert!((0.47..0.53).contains(&share), "hot share {share}");
        // Every key gets picked; a hot key far more often than a cold one.
        assert!(counts.iter().all(|&c| c > 0));
        assert!(counts[0] > 10 * counts[20]);
    }

    #[test]
    fn pick_edge_cases() {
        let mut rng = Rng::with_seed(1);
        let none_hot = Keyspace::new(5, 0);
        let all_hot = Keyspace::new(5, 5);
        let one_hot = Keyspace::new(6, 1);
        for _ in 0..1000 {
            assert!(none_hot.pick(&mut rng, 1.0) < 5);
            assert!(all_hot.pick(&mut rng, 0.0) < 5);
            assert_eq!(one_hot.pick(&mut rng, 1.0), 0);
            assert_ne!(one_hot.pick(&mut rng, 0.0), 0);
        }
    }

    #[test]
    fn exponential_holds_have_the_mean_and_respect_the_cap() {
        let mut rng = Rng::with_seed(42);
        let mean = Duration::from_millis(1000);
        let n = 20_000;
        let total: Duration = (0..n)
            .map(|_| sample_exponential(&mut rng, mean, Duration::from_secs(3600)))
            .sum();
        let avg = total.as_secs_f64() / n as f64;
        assert!((0.95..1.05).contains(&avg), "mean {avg}");
        let cap = Duration::from_millis(500);
        assert!((0..1000).all(|_| sample_exponential(&mut rng, mean, cap) <= cap));
        assert_eq!(sample_exponential(&mut rng, Duration::ZERO, cap), Duration::ZERO);
    }

    #[test]
    fn fates_follow_the_rates() {
        let mut rng = Rng::with_seed(3);
        let n = 20_000;
        let (mut die, mut stall) = (0, 0);
        for _ in 0..n {
            match choose_fate(&mut rng, 0.1, 0.2) {
                Fate::Die => die += 1,
                Fate::Stall => stall += 1,
                Fate::Release => {}
            }
        }
        let (die, stall) = (die as f64 / n as f64, stall as f64 / n as f64);
        assert!((0.09..0.11).contains(&die), "die {die}");
        assert!((0.18..0.22).contains(&stall), "stall {stall}");
        assert!((0..100).all(|_| choose_fate(&mut rng, 0.0, 0.0) == Fate::Release));
        assert!((0..100).all(|_| choose_fate(&mut rng, 1.0, 0.0) == Fate::Die));
        assert!((0..100).all(|_| choose_fate(&mut rng, 0.0, 1.0) == Fate::Stall));
    }

    #[test]
    fn plans_make_only_stalls_overdue() {
        let cfg = DemoConfig {
            hold_mean: Duration::from_millis(1500),
            expected_runtime: Duration::from_millis(3000),
            die_rate: 0.1,
            stall_rate: 0.1,
            ..DemoConfig::default()
        };
        let mut rng = Rng::with_seed(11);
        for _ in 0..5000 {
            let p = plan(&mut rng, &cfg);
            match p.fate {
                Fate::Stall => {
                    assert!(p.hold >= cfg.expected_runtime.mul_f64(1.5) && p.hold <= cfg.expected_runtime * 3)
                }
                Fate::Release | Fate::Die => assert!(p.hold < cfg.expected_runtime),
            }
        }
    }

    #[test]
    fn each_worker_is_its_own_process_on_its_own_host() {
        let mut rng = Rng::with_seed(1);
        let a = worker_process("billing", 0, &mut rng);
        let b = worker_process("billing", 1, &mut rng);
        let a_again = worker_process("billing", 0, &mut rng);
        assert_eq!(a.host, "billing-00.demo");
        assert_ne!(a.host, b.host);
        assert_eq!(a.host, a_again.host, "a restarted worker keeps its host");
        assert_ne!(a.pid, a_again.pid, "and gets a new pid");
        assert_ne!(a.pid, std::process::id());
    }

    #[test]
    fn a_seed_reproduces_the_decisions() {
        let cfg = DemoConfig::default();
        let ks = Keyspace::new(cfg.keys, cfg.hot_keys);
        let run = |seed| {
            let mut rng = Rng::with_seed(seed);
            (0..50)
                .map(|_| {
                    let k = ks.pick(&mut rng, cfg.hot_share);
                    (k, plan(&mut rng, &cfg), purpose(&mut rng, "payments", &ks.keys[k]))
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(run(5), run(5));
        assert_ne!(run(5), run(6));
    }

    #[test]
    fn purposes_read_like_work() {
        let mut rng = Rng::with_seed(9);
        let ks = Keyspace::new(10, 0);
        assert_eq!(purpose(&mut rng, "billing", &ks.keys[0]), "settle EU card payments");
        let job = &ks.keys[6];
        assert_eq!(job.name, "demo/jobs/2");
        for _ in 0..20 {
            let p = purpose(&mut rng, "search-indexer", job);
            assert!(p.ends_with(" 2") && (p.contains("index")), "{p}");
        }
        assert!(purpose(&mut rng, "other", job).starts_with("other "));
    }

    #[test]
    fn uniform_samples_stay_in_range() {
        let mut rng = Rng::with_seed(2);
        let (lo, hi) = RESTART_PAUSE;
        assert!((0..1000).all(|_| (lo..hi).contains(&sample_between(&mut rng, lo, hi))));
        assert!((0..1000).all(|_| sample_idle(&mut rng, Duration::from_millis(100)) < Duration::from_millis(50)));
    }
}
