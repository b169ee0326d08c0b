//! Every fleet's hub, as the HTTP layer and websockets reach them.

use std::sync::Arc;

use lockscope_model::FleetSummary;
use tokio::sync::watch;

use super::HubHandle;
use crate::remember::history::HistoryStats;

/// Every fleet the server watches, in the order configured; the first is the
/// default page.
#[derive(Clone)]
pub struct Fleets(Arc<Vec<HubHandle>>);

impl Fleets {
    pub fn new(hubs: Vec<HubHandle>) -> Fleets {
        Fleets(Arc::new(hubs))
    }

    /// The named fleet, or the first when `name` is `None`.
    pub fn get(&self, name: Option<&str>) -> Option<&HubHandle> {
        match name {
            None => self.0.first(),
            Some(n) => self.0.iter().find(|h| h.fleet() == n),
        }
    }

    /// Every fleet, in order.
    pub fn all(&self) -> &[HubHandle] {
        &self.0
    }

    pub fn names(&self) -> Vec<String> {
        self.0.iter().map(|h| h.fleet().to_string()).collect()
    }

    /// The answer to a request for a fleet named `name` that this server does
    /// not watch: the fleets it does.
    pub fn unknown(&self, name: &str) -> String {
        format!("no fleet named {name:?}; this server has: {}", self.names().join(", "))
    }

    /// Every fleet's latest summary, in order.
    pub fn summaries(&self) -> Vec<FleetSummary> {
        self.0.iter().map(|h| h.summary.borrow().clone()).collect()
    }

    /// Receivers that see each fleet's summary change.
    pub fn watch(&self) -> Vec<watch::Receiver<FleetSummary>> {
        self.0.iter().map(|h| h.summary.clone()).collect()
    }
}

impl Fleets {
    /// Keeps every fleet's summary saying whether the history is recording
    /// (the overview shows it), as long as the server runs.
    pub async fn follow_history_health(self, stats: Arc<HistoryStats>) {
        let mut changed = stats.health.changes();
        loop {
            for hub in self.all() {
                hub.set_history(stats.health.not_recording(hub.fleet())).await;
            }
            if changed.changed().await.is_err() {
                return;
            }
        }
    }
}
