//! An observer's link to its hub, shared by every observer so that all stores
//! report the same way: events go out in order, and the store connection is
//! reported as `Connecting`, then `Live`, then `Unreachable { since, error,
//! detail, retry_at }` with a capped, jittered backoff between attempts, and
//! `Live` again. The failure is said as [`StoreError::summary`] says it: one line
//! naming what was tried (the link's `address`), the whole chain as the detail.

use futures::future::BoxFuture;
use lockscope_model::{FleetEvent, Snapshot, StoreStatus};
use tokio::sync::mpsc;
use tracing::warn;

use crate::backoff::Backoff;
use crate::{now_ms, ObserverEvent, StoreError};

/// The hub has gone away: the observer should stop.
#[derive(Debug)]
pub(crate) struct HubGone;

pub(crate) struct Link {
    tx: mpsc::Sender<ObserverEvent>,
    backoff: Backoff,
    /// What the observer connects to, for people (no credentials): see
    /// [`crate::summary`]'s `address_of_*`.
    address: String,
    /// When the store became unreachable (kept across failed attempts).
    down_since: Option<i64>,
    /// Whether `Live` was reported since the last (re)connect.
    live: bool,
}

impl Link {
    pub fn new(tx: mpsc::Sender<ObserverEvent>, backoff: Backoff, address: String) -> Link {
        Link {
            tx,
            backoff,
            address,
            down_since: None,
            live: false,
        }
    }

    pub async fn events(&self, events: Vec<FleetEvent>) -> Result<(), HubGone> {
        self.tx.send(ObserverEvent::Events(events)).await.map_err(|_| HubGone)
    }

    /// Sends what changed while no dashboard watched (for the history only).
    pub async fn missed(&self, base: Snapshot, events: Vec<FleetEvent>) -> Result<(), HubGone> {
        self.tx
            .send(ObserverEvent::Missed { base, events })
            .await
            .map_err(|_| HubGone)
    }

    /// Says that the store was just read in full, every `every` (`how`: a
    /// poll or a reconciling rescan).
    pub async fn looked(&self, every: std::time::Duration, how: lockscope_model::polled::Look) -> Result<(), HubGone> {
        let polled = lockscope_model::polled::Polled {
            at: now_ms(),
            every_ms: every.as_millis() as u64,
            how,
        };
        self.tx.send(ObserverEvent::Looked(polled)).await.map_err(|_| HubGone)
    }

    /// Sends the store's whole truth; the hub's reducer turns it into the difference.
    pub async fn reset(&self, snapshot: Snapshot) -> Result<(), HubGone> {
        self.events(vec![FleetEvent::Reset(snapshot)]).await
    }

    async fn status(&self, status: StoreStatus) -> Result<(), HubGone> {
        self.tx.send(ObserverEvent::Status(status)).await.map_err(|_| HubGone)
    }

    /// Reports the store live once per connection, and resets the backoff.
    pub async fn live(&mut self) -> Result<(), HubGone> {
        if self.live {
            return Ok(());
        }
        self.live = true;
        self.backoff.reset();
        self.down_since = None;
        self.status(StoreStatus::Live { since: now_ms() }).await
    }

    pub fn hub_gone(&self) -> bool {
        self.tx.is_closed()
    }

    /// Reports the failure and waits out the backoff.
    async fn failed(&mut self, err: &StoreError, store: &str) -> Result<(), HubGone> {
        self.live = false;
        let delay = self.backoff.next_delay();
        let since = *self.down_since.get_or_insert_with(now_ms);
        warn!(store, address = %self.address, error = %err.describe(), retry_in = ?delay, "observer disconnected");
        let retry_at = now_ms() + delay.as_millis() as i64;
        let said = err.summary(&self.address);
        self.status(StoreStatus::Unreachable {
            since,
            error: said.line,
            detail: said.detail,
            retry_at,
        })
        .await?;
        tokio::select! {
            _ = tokio::time::sleep(delay) => Ok(()),
            _ = self.tx.closed() => Err(HubGone),
        }
    }
}

/// One connection's worth of observing a store.
pub(crate) trait Session: Send {
    /// Connects and reports until an error (returned), or until the hub is gone
    /// (`Ok`).
    fn session<'a>(&'a mut self, link: &'a mut Link) -> BoxFuture<'a, Result<(), StoreError>>;
}

/// Runs sessions until the hub is gone, reporting each failure and retrying after
/// the backoff.
pub(crate) async fn run_observer(mut link: Link, store: &str, mut observer: impl Session) {
    if link.status(StoreStatus::Connecting { since: now_ms() }).await.is_err() {
        return;
    }
    loop {
        let err = match observer.session(&mut link).await {
            Ok(()) => return,
            Err(e) => e,
        };
        if link.failed(&err, store).await.is_err() {
            return;
        }
    }
}
