//! What one fleet's hub keeps for `/metrics` besides its summary.
//!
//! The hub task owns a [`HubFeed`]: it follows session changes (contention
//! counters), store status changes (reconnects) and each turn's oldest lock and
//! deadlock cycles, and writes them to the fleet's [`FleetStats`], which a
//! scrape reads without asking the hub anything. Websocket connections count
//! themselves in the same [`FleetStats`] ([`FleetStats::websocket_opened`]).
//!
//! The contention totals are also sampled every [`SAMPLE_EVERY`] into a
//! [`CounterSeries`] for the charts ([`FleetStats::sample_counters`]).
//!
//! Concurrency: one writer per number (the hub task, or a connection's guard,
//! or the sampler), readers at scrape time. Plain atomics for the single
//! numbers; the contention totals, which must be read together (a histogram's
//! buckets and count), and the series are behind `std::sync::Mutex`es held for
//! a copy or a push, never across an `.await`.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use lockscope_model::charts::{Charts, CounterSample, CounterSeries, Frame, Increase};
use lockscope_model::contention::{ContentionTracker, Totals};
use lockscope_model::time::Millis;
use lockscope_model::{Changed, FleetState, StoreStatus};
use lockscope_store::now_ms;
use tokio::time::{Instant, MissedTickBehavior};

use crate::live::views::Views;

/// How often the contention totals are sampled for the charts: twice per
/// bucket of the shortest window (5 s), so every bucket has its two ends. A
/// day of samples is ~35,000 of 144 bytes: 5 MB per fleet.
pub const SAMPLE_EVERY: Duration = Duration::from_millis(2_500);

/// No lock with a time is held.
const NO_LOCK: i64 = i64::MAX;

/// One fleet's numbers for `/metrics` that its summary does not carry.
#[derive(Debug)]
pub struct FleetStats {
    /// The oldest `acquired_at` among held locks ([`NO_LOCK`]: none).
    oldest_acquired_at: AtomicI64,
    websockets: AtomicU64,
    lag_drops: AtomicU64,
    reconnects: AtomicU64,
    /// Cycles in the fleet's deadlock view ([`FleetState::deadlocks`]).
    deadlock_cycles: AtomicU64,
    contention: Mutex<Totals>,
    /// Sessions whose counters the hub follows.
    sessions: AtomicU64,
    /// Samples of `contention`, on the monotonic clock counted from `born`.
    series: Mutex<CounterSeries>,
    born: Instant,
}

/// What the counters say for a chart's window.
pub struct CounterCharts {
    pub buckets: Vec<Option<Increase>>,
    pub total: Option<Increase>,
    /// The oldest sample's wall time: nothing is known before.
    pub since: Option<Millis>,
    pub sessions: usize,
}

/// [`FleetStats`] at one instant.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StatsNow {
    pub oldest_acquired_at: Option<Millis>,
    /// Open websocket connections on the fleet (any page).
    pub websockets: u64,
    /// Subscribers dropped because their queue was full.
    pub lag_drops: u64,
    /// Times the store came back (live after unreachable).
    pub reconnects: u64,
    /// Cycles in the fleet's deadlock view now.
    pub deadlock_cycles: u64,
    pub contention: Totals,
}

impl Default for FleetStats {
    fn default() -> Self {
        FleetStats {
            oldest_acquired_at: AtomicI64::new(NO_LOCK),
            websockets: AtomicU64::new(0),
            lag_drops: AtomicU64::new(0),
            reconnects: AtomicU64::new(0),
            deadlock_cycles: AtomicU64::new(0),
            contention: Mutex::new(Totals::default()),
            sessions: AtomicU64::new(0),
            series: Mutex::new(CounterSeries::default()),
            born: Instant::now(),
        }
    }
}

impl FleetStats {
    pub fn now(&self) -> StatsNow {
        let oldest = self.oldest_acquired_at.load(Ordering::Relaxed);
        StatsNow {
            oldest_acquired_at: (oldest != NO_LOCK).then_some(oldest),
            websockets: self.websockets.load(Ordering::Relaxed),
            lag_drops: self.lag_drops.load(Ordering::Relaxed),
            reconnects: self.reconnects.load(Ordering::Relaxed),
            deadlock_cycles: self.deadlock_cycles.load(Ordering::Relaxed),
            contention: *self.contention.lock().unwrap_or_else(|e| e.into_inner()),
        }
    }

    /// Samples the contention totals every [`SAMPLE_EVERY`] until the stats are
    /// dropped (with their hub). Spawned once per hub.
    pub async fn sample_counters(stats: Weak<FleetStats>) {
        let mut tick = tokio::time::interval(SAMPLE_EVERY);
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let Some(stats) = stats.upgrade() else { return };
            let sample = CounterSample {
                mono_ms: stats.mono_ms(),
                at: now_ms(),
                totals: *stats.contention.lock().unwrap_or_else(|e| e.into_inner()),
            };
            stats.series.lock().unwrap_or_else(|e| e.into_inner()).push(sample);
        }
    }

    fn mono_ms(&self) -> i64 {
        self.born.elapsed().as_millis() as i64
    }

    /// The counters' increases over `frame`, which ends now.
    pub fn counter_charts(&self, frame: &Frame) -> CounterCharts {
        let now_mono = self.mono_ms();
        let series = self.series.lock().unwrap_or_else(|e| e.into_inner());
        let start = now_mono - (frame.to - frame.from);
        CounterCharts {
            buckets: Charts::counter_buckets(&series, frame, now_mono),
            total: series.increase(start, now_mono),
            since: series.first().map(|s| s.at),
            sessions: self.sessions.load(Ordering::Relaxed) as usize,
        }
    }

    /// Counts one open websocket connection until the guard is dropped.
    pub fn websocket_opened(self: &Arc<Self>) -> WebsocketOpen {
        self.websockets.fetch_add(1, Ordering::Relaxed);
        WebsocketOpen(self.clone())
    }
}

/// An open websocket connection, counted in its fleet's [`FleetStats`] while it lives.
pub struct WebsocketOpen(Arc<FleetStats>);

impl Drop for WebsocketOpen {
    fn drop(&mut self) {
        self.0.websockets.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The hub task's side: follows what the hub sees and publishes it to its
/// [`FleetStats`].
#[derive(Debug, Default)]
pub struct HubFeed {
    stats: Arc<FleetStats>,
    contention: ContentionTracker,
    /// The last status the store reported was `Unreachable`.
    unreachable: bool,
}

impl HubFeed {
    pub fn new() -> HubFeed {
        HubFeed::default()
    }

    /// The numbers this feed publishes (for the hub's handle).
    pub fn stats(&self) -> Arc<FleetStats> {
        self.stats.clone()
    }

    /// Follows one change of `state` (already applied): a session's counters.
    pub fn on_change(&mut self, state: &FleetState, change: &Changed) {
        let Changed::Session(id) = change else { return };
        match state.sessions().sessions.get(id) {
            None => self.contention.forget(id),
            Some(entry) => {
                // A malformed record keeps the last baseline: when it reads
                // again, what grew meanwhile is counted.
                if let Some(rec) = entry.record() {
                    self.contention.observe(id, &rec.contention);
                }
            }
        }
    }

    /// The store reported `status`: coming back live after being unreachable
    /// is a reconnect.
    pub fn on_status(&mut self, status: &StoreStatus) {
        match status {
            StoreStatus::Live { .. } => {
                if std::mem::take(&mut self.unreachable) {
                    self.stats.reconnects.fetch_add(1, Ordering::Relaxed);
                }
            }
            StoreStatus::Unreachable { .. } => self.unreachable = true,
            StoreStatus::Connecting { .. } | StoreStatus::WritesBlocked { .. } => {}
        }
    }

    /// A subscriber was dropped because its queue was full.
    pub fn subscriber_lagged(&self) {
        self.stats.lag_drops.fetch_add(1, Ordering::Relaxed);
    }

    /// At the end of each hub turn: publishes the oldest lock, the deadlock
    /// view's cycles (kept up to date by the state as it changes) and, if they
    /// grew, the contention totals. O(log n), whatever the fleet's size.
    pub fn turn(&mut self, state: &FleetState, views: &Views) {
        let oldest = views.oldest_acquired_at().unwrap_or(NO_LOCK);
        self.stats.oldest_acquired_at.store(oldest, Ordering::Relaxed);
        let cycles = state.deadlocks().cycles as u64;
        self.stats.deadlock_cycles.store(cycles, Ordering::Relaxed);
        if self.contention.take_changed() {
            *self.stats.contention.lock().unwrap_or_else(|e| e.into_inner()) = *self.contention.totals();
        }
        self.stats
            .sessions
            .store(self.contention.sessions() as u64, Ordering::Relaxed);
    }
}
