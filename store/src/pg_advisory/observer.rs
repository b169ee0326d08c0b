//! Observes an advisory-lock fleet by polling: every `poll` (default 1 s) the
//! one statement of [`super::poll`] on a connection of its own (`application_name`
//! `lockscope`; it only reads), sent as a [`FleetEvent::Reset`] when
//! anything changed (the hub's reducer keeps only the differences). A lock
//! keeps its revision while it reads the same; a read that changes anything
//! gets a revision above every earlier one (at least the dashboard's clock
//! in ms, so it keeps growing across restarts). The liveness probe is a
//! `SELECT 1` on another connection ([`crate::sql`]'s probe), so a database
//! gone away between two polls reads unreachable within 3 s.

use std::collections::HashMap;
use std::time::Duration;

use futures::future::BoxFuture;
use lockscope_model::{FleetEvent, LockBody, Snapshot};
use tokio::sync::mpsc;

use super::poll::{self, Levels};
use super::AdvisoryTarget;
use crate::backoff::Backoff;
use crate::link::{run_observer, Link, Session};
use crate::liveness::{while_alive, Heartbeat};
use crate::sql::{Dialect, SqlProbe};
use crate::{now_ms, Observer, ObserverEvent, StoreError};

/// Watches one database's advisory locks (see the module docs).
pub struct AdvisoryObserver {
    target: AdvisoryTarget,
    levels: Levels,
    /// The locks of the last read that was sent: (fence, body) and revision.
    shown: HashMap<String, ((i64, LockBody), i64)>,
    waiters: Vec<lockscope_model::Waiter>,
    revision: i64,
}

impl AdvisoryObserver {
    pub fn new(target: AdvisoryTarget) -> AdvisoryObserver {
        AdvisoryObserver {
            target,
            levels: Levels::new(),
            shown: HashMap::new(),
            waiters: Vec::new(),
            revision: 0,
        }
    }

    /// The reset to send for this read, `None` if nothing changed (`always`:
    /// send it anyway, after a reconnect).
    fn reset(&mut self, mut snapshot: Snapshot, always: bool) -> Option<FleetEvent> {
        let changed = snapshot.locks.len() != self.shown.len()
            || snapshot.waiters != self.waiters
            || snapshot.locks.iter().any(|e| {
                self.shown
                    .get(&e.name)
                    .is_none_or(|((f, b), _)| *f != e.fence || *b != e.body)
            });
        if !changed && !always {
            return None;
        }
        if changed {
            self.revision = (self.revision + 1).max(now_ms());
        }
        let mut shown = HashMap::with_capacity(snapshot.locks.len());
        for e in &mut snapshot.locks {
            e.revision = match self.shown.get(&e.name) {
                Some(((f, b), r)) if *f == e.fence && *b == e.body => *r,
                _ => self.revision,
            };
            shown.insert(e.name.clone(), ((e.fence, e.body.clone()), e.revision));
        }
        self.shown = shown;
        self.waiters = snapshot.waiters.clone();
        snapshot.revision = self.revision;
        // Backends are no lockscope sessions: holders are unknown to the session view.
        snapshot.sessions = None;
        Some(FleetEvent::Reset(snapshot))
    }

    async fn observe(&mut self, link: &mut Link, beat: &Heartbeat) -> Result<(), StoreError> {
        let pool = super::connect(&self.target.url).await?;
        let mut first = true;
        loop {
            let read = poll::read(&pool, &self.target).await?;
            beat.saw();
            if read.locks.len() > self.target.limit as usize && first {
                tracing::warn!(
                    limit = self.target.limit,
                    "more advisory locks than the fleet's limit: only that many are shown"
                );
            }
            let snapshot = poll::build(&self.target, read, &mut self.levels);
            if let Some(reset) = self.reset(snapshot, first) {
                if link.events(vec![reset]).await.is_err() {
                    return Ok(());
                }
            }
            first = false;
            if link.live().await.is_err()
                || link
                    .looked(self.target.poll, lockscope_model::polled::Look::Polled)
                    .await
                    .is_err()
            {
                return Ok(());
            }
            tokio::time::sleep(self.target.poll).await;
            if link.hub_gone() {
                return Ok(());
            }
        }
    }
}

impl Session for AdvisoryObserver {
    fn session<'a>(&'a mut self, link: &'a mut Link) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            sqlx::any::install_default_drivers();
            let mut probe = SqlProbe::open(&self.target.url, Dialect::Postgres).await?;
            let beat = Heartbeat::default();
            while_alive(self.observe(link, &beat), &mut probe, &beat).await
        })
    }
}

impl Observer for AdvisoryObserver {
    fn run(self: Box<Self>, events: mpsc::Sender<ObserverEvent>) -> BoxFuture<'static, ()> {
        let link = Link::new(
            events,
            Backoff::new(Duration::from_millis(250), Duration::from_secs(10)),
            crate::summary::address_of_url(&self.target.url),
        );
        Box::pin(run_observer(link, "pg-advisory", *self))
    }
}
