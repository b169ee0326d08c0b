//! `lockscope demo`: a simulated fleet of workers taking real locks through the
//! client library ([`lockscope_store::client`]), so the dashboard has something
//! true to show: contention on a few hot locks, waiters, overdue holders, hung
//! holders, and locks abandoned by workers that "die" holding them. Later it
//! doubles as the load generator for benchmarks and browser tests.
//!
//! Every worker owns its own [`Session`] and loops: pick a lock, take it with a
//! deadline, hold it for a sampled time, release it. Now and then a worker stalls
//! (holds past its expected runtime, so the lock turns overdue) or dies holding its
//! lock: it abandons the guard and drops its session without closing it, as a
//! crashed process would (its heartbeat stops, the lock stays until the unlocker
//! releases it), and a fresh session takes its place after a short pause. Rarely
//! a worker hangs: stuck but alive, it leaves its lock alone for minutes while its
//! session keeps heartbeating, which is what an operator blacklists or
//! force-releases. A worker whose session was blacklisted does not release its
//! lock (it runs out at `auto_unlock_at`); it opens a new session.
//!
//! The decisions (which lock, how long, die, stall or hang) are pure functions of a
//! seeded [`fastrand::Rng`] ([`Keyspace::pick`], [`plan`](fn@plan), [`purpose`]); the async
//! part is [`run`] and its workers. Timing still varies from run to run, so a seed
//! makes each worker's sequence of decisions reproducible, not the whole run.
//!
//! Layout:
//! - `mod.rs` (here): [`DemoConfig`], [`DemoStats`], and [`run`], which starts the
//!   fleet, stops it and sweeps up after it.
//! - `plan.rs`: the pure decisions ([`Keyspace`], [`plan`](fn@plan), [`purpose`],
//!   [`worker_process`], the samplers).
//! - `worker.rs`: one simulated worker's loop and the counters the workers share.

mod plan;
mod worker;

pub use plan::{
    check_prefix, choose_fate, plan, purpose, sample_between, sample_exponential, sample_idle, worker_process, Fate,
    Key, Keyspace, Plan,
};

use std::collections::HashSet;
use std::fmt;
use std::future::Future;
use std::ops::RangeInclusive;
use std::sync::Arc;
use std::time::Duration;

use fastrand::Rng;
use lockscope_model::LockBody;
use lockscope_store::client::{Session, SessionConfig};
use lockscope_store::protocol::LockStore;
use lockscope_store::StoreError;
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{info, warn};

use worker::{Counters, Shared, Worker};

/// Service names the workers take turns wearing.
pub const SERVICES: [&str; 4] = ["billing", "search-indexer", "payments", "reports"];

/// What the demo fleet does. [`Default`] matches the CLI defaults.
#[derive(Clone, Debug, PartialEq)]
pub struct DemoConfig {
    /// Simulated workers, each with its own session.
    pub workers: usize,
    /// What every lock name starts with (`demo/`): a second fleet with its own
    /// prefix never contends with the first.
    pub name_prefix: String,
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
    /// Probability per acquisition that the worker hangs holding the lock: stuck
    /// but alive (its session keeps heartbeating), for a time in `hang`.
    pub hang_rate: f64,
    /// How long a hang lasts (uniform in the range).
    pub hang: RangeInclusive<Duration>,
    /// How long one `lock` call may wait for a busy lock.
    pub lock_deadline: Duration,
    /// A lock not extended for this long may be released (`auto_unlock_at`):
    /// longer than a session's ttl (10 s), so a dead worker's lock shows as
    /// orphaned (its session gone) before it shows as expired. The client library
    /// raises it to at least three heartbeats.
    pub auto_unlock_after: Duration,
    /// How often the workers' sessions heartbeat (extending their locks).
    pub heartbeat_every: Duration,
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
            name_prefix: "demo/".to_string(),
            keys: 40,
            hot_keys: 3,
            hot_share: 0.5,
            hold_mean: Duration::from_millis(1500),
            expected_runtime: Duration::from_millis(3000),
            die_rate: 0.02,
            stall_rate: 0.05,
            // Now and then one, without eating the fleet: a hung worker holds its
            // lock for minutes.
            hang_rate: 0.001,
            hang: Duration::from_secs(180)..=Duration::from_secs(300),
            lock_deadline: Duration::from_secs(5),
            auto_unlock_after: Duration::from_secs(30),
            // The client library's default.
            heartbeat_every: SessionConfig::new("").heartbeat_every,
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
    /// Acquisitions planned to hang (stuck but alive, heartbeating).
    pub hangs: u64,
    /// Held locks the client library reported lost (taken away, not extended, or
    /// their session blacklisted).
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
            "acquired {}, conflicts {}, timeouts {}, deaths {}, stalls {}, hangs {}, lost {}, errors {}",
            self.acquired, self.conflicts, self.timeouts, self.deaths, self.stalls, self.hangs, self.lost, self.errors
        )
    }
}

/// Runs the demo fleet on `store` until `cfg.duration` has passed or `stop`
/// resolves, whichever comes first; then every live worker releases its lock and
/// closes its session, and the totals are returned. Locks abandoned by dead
/// workers stay held (listed in [`DemoStats::abandoned`]), and so do those of
/// blacklisted sessions (they run out at `auto_unlock_at`).
///
/// Fails only if the workers' first sessions cannot be opened; later store errors
/// are logged, counted and retried.
pub async fn run<S: LockStore>(
    store: S,
    cfg: DemoConfig,
    stop: impl Future<Output = ()>,
) -> Result<DemoStats, StoreError> {
    let keyspace = Keyspace::new(&cfg.name_prefix, cfg.keys, cfg.hot_keys);
    info!(
        workers = cfg.workers,
        keys = keyspace.keys.len(),
        hot_keys = keyspace.hot,
        hot_share = cfg.hot_share,
        hold_mean_ms = cfg.hold_mean.as_millis() as u64,
        expected_runtime_ms = cfg.expected_runtime.as_millis() as u64,
        die_rate = cfg.die_rate,
        stall_rate = cfg.stall_rate,
        hang_rate = cfg.hang_rate,
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
        sessions.push(Session::open(store.clone(), session_config(&cfg, service, i, &mut seeds)).await?);
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
        hangs = s.hangs,
        lost = s.lost,
        errors = s.errors,
        "{msg}"
    );
}

/// Who a demo worker's session is ([`worker_process`]), heartbeating as `cfg` says.
fn session_config(cfg: &DemoConfig, service: &str, slot: usize, rng: &mut Rng) -> SessionConfig {
    SessionConfig {
        heartbeat_every: cfg.heartbeat_every,
        ..worker_process(service, slot, rng)
    }
}
