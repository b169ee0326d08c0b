//! Observes a SQL lock table for the dashboard. Every change is answered with a
//! fresh read of the held locks, sent as a reset: the hub's reducer turns it into
//! the difference, so subscribers still get per-row deltas.
//!
//! - SQLite: polls the change counter (one tiny read) every `poll`; reads the table
//!   only when it moved.
//! - PostgreSQL: reads on `NOTIFY lockscope_locks` (coalescing bursts), and
//!   reconciles every `reconcile` in case a notification was lost.
//!
//! Reading the whole table per change is O(locks); fine for thousands of locks,
//! not for millions (a per-row change log is the next step).

use std::time::Duration;

use futures::future::BoxFuture;
use lockscope_model::{FleetEvent, StoreStatus};
use tokio::sync::{broadcast, mpsc};
use tracing::warn;

use super::{Dialect, SqlLocks};
use crate::backoff::Backoff;
use crate::{now_ms, Observer, ObserverEvent, StoreError};

pub struct SqlObserver {
    url: String,
    pub poll: Duration,
    pub reconcile: Duration,
    pub backoff: Backoff,
}

impl SqlObserver {
    pub fn new(url: impl Into<String>) -> SqlObserver {
        SqlObserver {
            url: url.into(),
            poll: Duration::from_millis(200),
            reconcile: Duration::from_secs(5),
            backoff: Backoff::new(Duration::from_millis(250), Duration::from_secs(10)),
        }
    }

    async fn run_loop(mut self, tx: mpsc::Sender<ObserverEvent>) {
        if tx
            .send(ObserverEvent::Status(StoreStatus::Connecting { since: now_ms() }))
            .await
            .is_err()
        {
            return;
        }
        let mut down_since = None;
        loop {
            let err = match self.session(&tx, &mut down_since).await {
                Ok(()) => return, // the hub is gone
                Err(e) => e,
            };
            let delay = self.backoff.next_delay();
            let since = *down_since.get_or_insert_with(now_ms);
            warn!(error = %err, retry_in = ?delay, "sql observer disconnected");
            let status = StoreStatus::Unreachable {
                since,
                error: err.to_string(),
                retry_at: now_ms() + delay.as_millis() as i64,
            };
            if tx.send(ObserverEvent::Status(status)).await.is_err() {
                return;
            }
            tokio::time::sleep(delay).await;
        }
    }

    /// Runs until an error (returned) or until the hub is gone (`Ok`).
    async fn session(
        &mut self,
        tx: &mpsc::Sender<ObserverEvent>,
        down_since: &mut Option<i64>,
    ) -> Result<(), StoreError> {
        let store = SqlLocks::connect(&self.url).await?;
        let mut notified = store.notified.as_ref().map(broadcast::Sender::subscribe);
        let mut last_counter = None;
        let mut snapshots = 0i64;
        let mut live = false;
        loop {
            let changed = match store.dialect() {
                Dialect::Sqlite => {
                    let c = store.change_counter().await?;
                    (last_counter != Some(c)).then(|| {
                        last_counter = Some(c);
                        c
                    })
                }
                Dialect::Postgres => {
                    snapshots += 1;
                    Some(snapshots)
                }
            };
            if let Some(revision) = changed {
                let locks = store.held().await?;
                if tx
                    .send(ObserverEvent::Events(vec![FleetEvent::Reset { revision, locks }]))
                    .await
                    .is_err()
                {
                    return Ok(());
                }
            }
            if !live {
                live = true;
                self.backoff.reset();
                *down_since = None;
                if tx
                    .send(ObserverEvent::Status(StoreStatus::Live { since: now_ms() }))
                    .await
                    .is_err()
                {
                    return Ok(());
                }
            }
            match notified.as_mut() {
                None => tokio::time::sleep(self.poll).await,
                Some(rx) => {
                    let _ = tokio::time::timeout(self.reconcile, rx.recv()).await;
                    // Coalesce a burst of notifications into one read.
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    while rx.try_recv().is_ok() {}
                }
            }
            if tx.is_closed() {
                return Ok(());
            }
        }
    }
}

impl Observer for SqlObserver {
    fn run(self: Box<Self>, events: mpsc::Sender<ObserverEvent>) -> BoxFuture<'static, ()> {
        Box::pin(self.run_loop(events))
    }
}
