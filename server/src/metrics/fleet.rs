//! What one fleet's hub keeps for `/metrics` besides its summary.
//!
//! The hub task owns a [`HubFeed`]: it follows session changes (contention
//! counters), store status changes (reconnects) and each turn's oldest lock, and
//! writes them to the fleet's [`FleetStats`], which a scrape reads without asking
//! the hub anything. Websocket connections count themselves in the same
//! [`FleetStats`] ([`FleetStats::websocket_opened`]).
//!
//! Concurrency: one writer per number (the hub task, or a connection's guard),
//! readers at scrape time. Plain atomics for the single numbers; the contention
//! totals, which must be read together (a histogram's buckets and count), are
//! copied under a `std::sync::Mutex` held for a copy, never across an `.await`.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use lockscope_model::time::Millis;
use lockscope_model::{Changed, FleetState, StoreStatus};

use super::contention::{ContentionTracker, Totals};
use crate::views::Views;

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
    contention: Mutex<Totals>,
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
    pub contention: Totals,
}

impl Default for FleetStats {
    fn default() -> Self {
        FleetStats {
            oldest_acquired_at: AtomicI64::new(NO_LOCK),
            websockets: AtomicU64::new(0),
            lag_drops: AtomicU64::new(0),
            reconnects: AtomicU64::new(0),
            contention: Mutex::new(Totals::default()),
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
            contention: *self.contention.lock().unwrap_or_else(|e| e.into_inner()),
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
            StoreStatus::Connecting { .. } => {}
        }
    }

    /// A subscriber was dropped because its queue was full.
    pub fn subscriber_lagged(&self) {
        self.stats.lag_drops.fetch_add(1, Ordering::Relaxed);
    }

    /// At the end of each hub turn: publishes the oldest lock and, if they
    /// grew, the contention totals. O(log n), whatever the fleet's size.
    pub fn turn(&mut self, views: &Views) {
        let oldest = views.oldest_acquired_at().unwrap_or(NO_LOCK);
        self.stats.oldest_acquired_at.store(oldest, Ordering::Relaxed);
        if self.contention.take_changed() {
            *self.stats.contention.lock().unwrap_or_else(|e| e.into_inner()) = *self.contention.totals();
        }
    }
}
