//! What every handler shares ([`AppState`]): the fleets' hubs, the audit log,
//! the authentication, `/metrics`, the lock history and the open websockets.

use std::path::PathBuf;
use std::sync::Arc;

use leptos::prelude::LeptosOptions;
use tokio::sync::watch;

use super::error::AppError;
use crate::act::admin::Door;
use crate::auth::Auth;
use crate::live::hub::{Fleets, HubHandle};
use crate::live::subscriber::limit::Sockets;
use crate::metrics::Metrics;
use crate::remember::audit::AuditLog;
use crate::remember::history::History;
use crate::settings::Limits;

#[derive(Clone)]
pub struct AppState {
    pub fleets: Fleets,
    pub leptos: LeptosOptions,
    pub shutdown: watch::Receiver<bool>,
    pub audit: AuditLog,
    pub auth: Arc<Auth>,
    /// `/metrics`; shared with whatever counts into it (the unlockers).
    pub metrics: Arc<Metrics>,
    /// The lock history (`None`: the server keeps none).
    pub history: Option<History>,
    /// The open websockets, bounded by `[limits]` ([`crate::live::subscriber::limit`]).
    pub sockets: Arc<Sockets>,
}

impl AppState {
    /// Records and serves the lock history `history` (its writer's numbers in
    /// `/metrics` too). Before anything else takes a handle on `metrics`.
    pub fn with_history(mut self, history: History) -> AppState {
        self.metrics = Arc::new(self.new_metrics().with_history(history.stats().clone()));
        // The overview says so while the history is not recording.
        tokio::spawn(self.fleets.clone().follow_history_health(history.stats().clone()));
        self.history = Some(history);
        self
    }
}

impl AppState {
    pub fn new(
        fleets: Fleets,
        site_root: PathBuf,
        shutdown: watch::Receiver<bool>,
        audit: AuditLog,
        auth: Auth,
    ) -> AppState {
        let leptos = LeptosOptions::builder()
            .output_name("lockscope")
            .site_root(site_root.to_string_lossy().as_ref())
            .site_pkg_dir("pkg")
            .build();
        let auth = Arc::new(auth);
        let sockets = Sockets::new(&Limits::default());
        let metrics = Metrics::for_fleets(&fleets).with_limits(auth.clone(), sockets.clone(), audit.clone());
        let metrics = Arc::new(metrics);
        AppState {
            fleets,
            leptos,
            shutdown,
            audit,
            auth,
            metrics,
            history: None,
            sockets,
        }
    }

    /// `/metrics` of this state's fleets, with the numbers of its limits.
    fn new_metrics(&self) -> Metrics {
        Metrics::for_fleets(&self.fleets).with_limits(self.auth.clone(), self.sockets.clone(), self.audit.clone())
    }

    /// The same state with these limits on websockets and on the audit
    /// log's tallies (the authentication's are [`Auth::with_limits`]).
    pub fn with_limits(self, limits: &Limits) -> AppState {
        self.sockets.set_limits(limits);
        self.audit.set_tally_sources(limits.audit_sources_per_minute);
        self
    }

    /// The same state counting into `metrics` (made for the same fleets) rather
    /// than its own.
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> AppState {
        self.metrics = metrics;
        self
    }

    /// What the admin actions act through and write to.
    pub fn door(&self) -> Door {
        Door {
            fleets: self.fleets.clone(),
            audit: self.audit.clone(),
        }
    }

    /// The fleet a request names (`?fleet=`), or the first.
    pub(crate) fn fleet(&self, q: &FleetQuery) -> Result<&HubHandle, AppError> {
        self.fleets
            .get(q.fleet.as_deref())
            .ok_or_else(|| AppError::NoSuchFleet(self.fleets.unknown(q.fleet.as_deref().unwrap_or_default())))
    }
}

#[derive(Debug, Default, serde::Deserialize)]
pub struct FleetQuery {
    pub fleet: Option<String>,
}
