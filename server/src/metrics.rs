//! Every fleet's numbers for Prometheus (served at `GET /metrics` by [`crate::web`]), in the OpenMetrics text
//! format, made with `prometheus-client` (the Prometheus project's Rust client).
//! Every metric is named `lockscope_…` and labelled by `fleet`; each one is
//! documented in `docs/operations.md` ("Metrics").
//!
//! Where the numbers come from — nothing is counted or scanned per scrape:
//! - lock counts and the store status: the summary each hub already publishes
//!   ([`crate::live::hub::HubHandle::summary`]), read at scrape time;
//! - the oldest lock, contention counters and the wait histogram, store
//!   reconnects, websocket connections and lag drops: each hub's [`crate::live::stats::FleetStats`],
//!   written by the hub task ([`crate::live::stats::HubFeed`]) and by websocket connections;
//! - the lock history's writer: its [`crate::remember::history::HistoryStats`];
//! - the limits on what clients can make the server hold (`limits.rs`):
//!   counted by the websocket registry, [`crate::auth::Auth`] and the audit
//!   log's tallies;
//! - the unlocker: counted here as it acts ([`Metrics::unlocker_released`],
//!   [`Metrics::unlocker_failed`], [`Metrics::set_unlocker_active`]), and the
//!   mode each fleet's unlocker runs in ([`Metrics::set_unlocker_mode`]);
//! - deadlocks: the cycles in each fleet's deadlock view, kept by its hub
//!   ([`crate::live::stats::FleetStats`]).
//!
//! The server serves [`Metrics::for_fleets`] (made by `AppState::new`, shared as
//! `AppState::metrics`); [`Metrics::new`] holds the unlocker's metrics alone.
//!
//! Layout: the model's `contention` turns the sessions' cumulative counters into
//! counters that never go down; the hub's side is [`crate::live::stats`];
//! `collect.rs` encodes the per-fleet families at scrape time.
//!
//! With authentication configured, a scrape needs an identity like the read API
//! (Prometheus sends `Authorization: Bearer TOKEN`, any role); without it the
//! server is on loopback only and `/metrics` is open.

mod collect;
mod limits;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use lockscope_model::unlock::Mode;

use crate::live::hub::Fleets;

/// What `/metrics` answers with (the format `prometheus-client` writes).
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Every metric's name starts with this (and `_`).
pub const PREFIX: &str = "lockscope";

/// Outcomes of the unlocker's releases, present at zero for every fleet from
/// the start (others appear when first counted): the lock was released; it was
/// not held any more; it had changed (another acquisition); this replica had
/// lost the unlocker role (nothing released).
pub const UNLOCKER_OUTCOMES: [&str; 4] = ["released", "not_held", "changed", "deposed"];

/// Reasons of the unlocker's failures, present at zero for every fleet from the
/// start (others appear when first counted): a release the store refused or
/// could not answer; renewing the unlocker role failed.
pub const UNLOCKER_FAILURE_REASONS: [&str; 2] = ["store", "renew"];

/// The unlocker's modes, one `lockscope_unlocker_mode` series each (1 for the
/// mode in force, 0 for the others).
pub const UNLOCKER_MODES: [Mode; 3] = [Mode::Off, Mode::DryRun, Mode::On];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FleetLabels {
    fleet: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    fleet: String,
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ModeLabels {
    fleet: String,
    mode: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    fleet: String,
    reason: String,
}

/// The server's metrics: the registry `/metrics` encodes, and the unlocker's
/// counters. Shared (`Arc`) by the HTTP layer and the unlockers; every method
/// takes `&self`.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    releases: Family<OutcomeLabels, Counter>,
    failures: Family<ReasonLabels, Counter>,
    active: Family<FleetLabels, Gauge>,
    modes: Family<ModeLabels, Gauge>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// The unlocker's metrics alone, watching no fleet (a fleet's unlocker
    /// series appear when first counted). The server uses [`Metrics::for_fleets`].
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix(PREFIX);
        let releases = Family::<OutcomeLabels, Counter>::default();
        let failures = Family::<ReasonLabels, Counter>::default();
        let active = Family::<FleetLabels, Gauge>::default();
        let modes = Family::<ModeLabels, Gauge>::default();
        registry.register(
            "unlocker_releases",
            "Locks the unlocker of this replica tried to release, by outcome",
            releases.clone(),
        );
        registry.register(
            "unlocker_failures",
            "Unlocker operations that failed, by reason",
            failures.clone(),
        );
        registry.register(
            "unlocker_active",
            "1 when this replica is the fleet's active unlocker, else 0",
            active.clone(),
        );
        registry.register(
            "unlocker_mode",
            "1 for the mode this replica's unlocker of the fleet runs in (off, dry-run, on), 0 for the others",
            modes.clone(),
        );
        Metrics {
            registry,
            releases,
            failures,
            active,
            modes,
        }
    }

    /// The metrics of `fleets`, every series present (at zero) from the start.
    pub fn for_fleets(fleets: &Fleets) -> Metrics {
        let mut m = Metrics::new();
        m.registry
            .register_collector(Box::new(collect::FleetCollector { fleets: fleets.clone() }));
        for fleet in fleets.names() {
            for outcome in UNLOCKER_OUTCOMES {
                let _ = m.releases.get_or_create(&outcome_labels(&fleet, outcome));
            }
            for reason in UNLOCKER_FAILURE_REASONS {
                let _ = m.failures.get_or_create(&reason_labels(&fleet, reason));
            }
            let _ = m.active.get_or_create(&FleetLabels { fleet: fleet.clone() });
            // Until its unlocker starts (a fleet without one stays so): off.
            m.set_unlocker_mode(&fleet, Mode::Off);
        }
        m
    }

    /// With the lock history's writer numbers too.
    pub fn with_history(mut self, stats: std::sync::Arc<crate::remember::history::HistoryStats>) -> Metrics {
        self.registry
            .register_collector(Box::new(collect::HistoryCollector { stats }));
        self
    }

    /// With the numbers of the limits (`[limits]`): websockets refused,
    /// failed authentication, hash verifications, tallied attempts.
    pub fn with_limits(
        mut self,
        auth: std::sync::Arc<crate::auth::Auth>,
        sockets: std::sync::Arc<crate::live::subscriber::limit::Sockets>,
        audit: crate::remember::audit::AuditLog,
    ) -> Metrics {
        self.registry
            .register_collector(Box::new(limits::LimitsCollector { auth, sockets, audit }));
        self
    }

    /// The unlocker tried to release a lock of `fleet`, with `outcome` (one of
    /// [`UNLOCKER_OUTCOMES`], or another word).
    pub fn unlocker_released(&self, fleet: &str, outcome: &str) {
        self.releases.get_or_create(&outcome_labels(fleet, outcome)).inc();
    }

    /// An unlocker operation on `fleet` failed for `reason` (one of
    /// [`UNLOCKER_FAILURE_REASONS`], or another word).
    pub fn unlocker_failed(&self, fleet: &str, reason: &str) {
        self.failures.get_or_create(&reason_labels(fleet, reason)).inc();
    }

    /// Whether this replica is `fleet`'s active unlocker now.
    pub fn set_unlocker_active(&self, fleet: &str, active: bool) {
        self.active
            .get_or_create(&FleetLabels { fleet: fleet.into() })
            .set(active as i64);
    }

    /// The mode `fleet`'s unlocker runs in on this replica (what it
    /// actually does: `off` where it never acts, whatever was asked).
    pub fn set_unlocker_mode(&self, fleet: &str, mode: Mode) {
        for m in UNLOCKER_MODES {
            let labels = ModeLabels {
                fleet: fleet.into(),
                mode: m.as_str().into(),
            };
            self.modes.get_or_create(&labels).set((m == mode) as i64);
        }
    }

    /// The whole exposition, `# EOF` included.
    pub fn encode(&self) -> Result<String, std::fmt::Error> {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)?;
        Ok(out)
    }
}

fn outcome_labels(fleet: &str, outcome: &str) -> OutcomeLabels {
    OutcomeLabels {
        fleet: fleet.into(),
        outcome: outcome.into(),
    }
}

fn reason_labels(fleet: &str, reason: &str) -> ReasonLabels {
    ReasonLabels {
        fleet: fleet.into(),
        reason: reason.into(),
    }
}

#[cfg(test)]
mod tests;
