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
use tokio::sync::{broadcast, mpsc};

use super::{Dialect, SqlLocks};
use crate::backoff::Backoff;
use crate::link::{run_observer, Link, Session};
use crate::{Observer, ObserverEvent, StoreError};

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

    async fn observe(&self, link: &mut Link) -> Result<(), StoreError> {
        let store = SqlLocks::connect(&self.url).await?;
        let mut notified = store.notified.as_ref().map(broadcast::Sender::subscribe);
        let mut last_counter = None;
        let mut snapshots = 0i64;
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
                let (locks, waiters) = (store.held().await?, store.waiting().await?);
                if link.reset(revision, locks, waiters).await.is_err() {
                    return Ok(());
                }
            }
            if link.live().await.is_err() {
                return Ok(());
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
            if link.hub_gone() {
                return Ok(());
            }
        }
    }
}

impl Session for SqlObserver {
    fn session<'a>(&'a mut self, link: &'a mut Link) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(self.observe(link))
    }
}

impl Observer for SqlObserver {
    fn run(self: Box<Self>, events: mpsc::Sender<ObserverEvent>) -> BoxFuture<'static, ()> {
        let link = Link::new(events, self.backoff.clone());
        Box::pin(run_observer(link, "sql", *self))
    }
}
