//! Observes a SQL lock table for the dashboard, reading only what changed since
//! its last read (`docs/protocol.md`, "Observing"):
//!
//! - SQLite: reads the change counters (one tiny read) as soon as another
//!   connection has committed (`PRAGMA data_version`, read every 10–80 ms:
//!   [`super::commits`]), and at least every `poll`; when they
//!   moved, reads the lock rows stamped after the last change it has seen (an
//!   index on `seq`), in pages of `page` rows.
//! - PostgreSQL: the triggers' notifications name each changed lock; a burst is
//!   coalesced for 20 ms and those rows are read by name.
//!
//! Either way a row becomes an upsert (held) or a removal (free), so the hub gets
//! per-row events. The whole table is read only when the observer (re)connects,
//! when a row was deleted by hand (nothing left to read), when PostgreSQL
//! notifications may have been missed (listener reconnected, or this observer
//! fell behind them), and every `reconcile` as a safety net. Sessions (with the
//! waiters they name) and the blacklist are read whole when they changed, and
//! sent as the difference from the last read ([`super::sessions`], which also
//! decides when a silent session is gone).
//!
//! A store that goes away without a word (PostgreSQL killed or restarted, a
//! SQLite file deleted or replaced) fails the liveness probe run beside the
//! session ([`super::probe`]) within 3 s.
//!
//! One task, one pool: this loop is the only reader, so its state needs no lock.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use lockscope_model::{FleetEvent, Snapshot};
use tokio::sync::broadcast::error::TryRecvError;
use tokio::sync::{broadcast, mpsc};
use tokio::time::Instant;

use super::commits::Commits;
use super::probe::SqlProbe;
use super::sessions::SessionTracker;
use super::{Change, Changes, Dialect, SqlLocks};
use crate::backoff::Backoff;
use crate::link::{run_observer, HubGone, Link, Session};
use crate::liveness::{while_alive, Heartbeat};
use crate::{now_ms, Observer, ObserverEvent, StoreError};

pub struct SqlObserver {
    url: String,
    /// SQLite: how often `PRAGMA data_version` is read to learn that another
    /// connection has committed, after a commit (`commit_check`) and at most
    /// while none comes (`quiet_check`): [`super::commits`].
    pub commit_check: Duration,
    pub quiet_check: Duration,
    /// SQLite: the longest time between two reads of the change counters.
    pub poll: Duration,
    /// How often the whole table is read even though nothing said it must be.
    pub reconcile: Duration,
    /// Most rows read (and sent to the hub) at once.
    pub page: i64,
    pub backoff: Backoff,
    /// What is known of each session, kept across reconnects: a session seen
    /// going silent stays gone after a reconnect rather than counting as just
    /// written.
    sessions: SessionTracker,
    /// Full reads made, numbering the resets (PostgreSQL's changes carry no
    /// sequence), across reconnects.
    reads: i64,
    /// Marked whenever the store answers a read or sends a notification, so a
    /// probe answered late beside a long read is not taken for a dead store
    /// (`crate::liveness`).
    beat: Arc<Heartbeat>,
}

/// What this observer has sent the hub since its last full read.
struct Seen {
    /// SQLite: the counters last read; the last change whose row was read.
    changes: Option<Changes>,
    seq: i64,
    /// When the whole table was last read.
    full_at: Instant,
}

impl SqlObserver {
    pub fn new(url: impl Into<String>) -> SqlObserver {
        SqlObserver {
            url: url.into(),
            commit_check: Duration::from_millis(10),
            quiet_check: Duration::from_millis(80),
            poll: Duration::from_millis(200),
            reconcile: Duration::from_secs(600),
            page: 5000,
            backoff: Backoff::new(Duration::from_millis(250), Duration::from_secs(10)),
            sessions: SessionTracker::default(),
            reads: 0,
            beat: Arc::default(),
        }
    }

    /// One connection; `Ok` only when the hub is gone. The liveness probe runs
    /// beside it: PostgreSQL's notifications stop without a word when the
    /// server is killed, and the listener's reconnect waits for its pool.
    async fn observe(&mut self, link: &mut Link) -> Result<(), StoreError> {
        let store = SqlLocks::connect(&self.url).await?;
        let mut probe = SqlProbe::open(&self.url, store.dialect()).await?;
        let mut sessions = std::mem::take(&mut self.sessions);
        let beat = self.beat.clone();
        let session = async { Ok(self.follow(store, link, &mut sessions).await) };
        let followed = while_alive(session, &mut probe, &beat).await;
        self.sessions = sessions;
        match followed? {
            Err(Halt::Store(e)) => Err(e),
            Err(Halt::HubGone) | Ok(()) => Ok(()),
        }
    }

    async fn follow(&mut self, store: SqlLocks, link: &mut Link, sessions: &mut SessionTracker) -> Result<(), Halt> {
        // Subscribe (PostgreSQL) or read `data_version` (SQLite) before the
        // first read, so nothing between the two is missed.
        let mut wake = match &store.notified {
            Some(tx) => Wake::Notified(tx.subscribe()),
            None => Wake::Committed(Commits::open(&self.url).await?),
        };
        let mut seen = self.full_read(&store, link, sessions).await?;
        loop {
            link.live().await?;
            match &mut wake {
                Wake::Notified(rx) => self.notified_changes(&store, link, rx, &mut seen, sessions).await?,
                Wake::Committed(commits) => {
                    commits.next(self.commit_check, self.quiet_check, self.poll).await?;
                    self.counted_changes(&store, link, &mut seen, sessions).await?
                }
            };
            // After reading what was written: a heartbeat that just landed is
            // seen before its session could be called gone.
            let gone = sessions.expire(Instant::now());
            if !gone.is_empty() {
                link.events(gone).await?;
            }
            if link.hub_gone() {
                return Ok(());
            }
            if seen.full_at.elapsed() >= self.reconcile {
                seen = self.full_read(&store, link, sessions).await?;
            }
        }
    }

    /// Reads the whole table and sends it as a reset (the hub's reducer turns it
    /// into the difference). Sessions go through the tracker, which remembers
    /// when each was last written, across reconnects too.
    async fn full_read(&mut self, store: &SqlLocks, link: &Link, sessions: &mut SessionTracker) -> Result<Seen, Halt> {
        // SQLite: the counters first, so a change made during the read is read
        // again next time rather than missed.
        let changes = match store.dialect() {
            Dialect::Sqlite => Some(store.changes().await?),
            Dialect::Postgres => None,
        };
        let locks = store.held().await?;
        self.beat.saw();
        // Not a live observation (the values may have been written any time
        // since the last read): no receive time for the skew estimate.
        sessions.update(
            store.session_rows().await?,
            store.blacklist_rows().await?,
            Instant::now(),
            None,
        );
        self.beat.saw();
        let (live, blacklist, waiters) = sessions.snapshot();
        self.reads += 1;
        let revision = changes.map_or(self.reads, |c| c.counter);
        link.reset(Snapshot {
            revision,
            locks,
            waiters,
            sessions: Some(live),
            blacklist,
        })
        .await?;
        Ok(Seen {
            changes,
            seq: changes.map_or(0, |c| c.counter),
            full_at: Instant::now(),
        })
    }

    /// SQLite: sends the sessions, rows and waiters that changed since the last read.
    async fn counted_changes(
        &mut self,
        store: &SqlLocks,
        link: &Link,
        seen: &mut Seen,
        sessions: &mut SessionTracker,
    ) -> Result<(), Halt> {
        let now = store.changes().await?;
        self.beat.saw();
        let before = seen.changes.expect("SQLite reads its counters");
        if now == before {
            return Ok(());
        }
        if now.removals != before.removals || now.counter < before.counter {
            // A row deleted by hand, or a database replaced under us.
            *seen = self.full_read(store, link, sessions).await?;
            return Ok(());
        }
        seen.changes = Some(now);
        // Sessions first: a worker that registers and takes a lock within one
        // poll must not show its lock orphaned until the next read.
        if now.sessions != before.sessions {
            self.sessions_changed(store, link, sessions).await?;
        }
        loop {
            let page = store.changed_since(seen.seq, self.page).await?;
            self.beat.saw();
            let full = page.len() as i64 == self.page;
            if let Some((seq, _)) = page.last() {
                seen.seq = *seq;
            }
            let events: Vec<FleetEvent> = page.into_iter().map(|(_, e)| e).collect();
            if !events.is_empty() {
                link.events(events).await?;
            }
            if !full {
                break;
            }
        }
        Ok(())
    }

    /// PostgreSQL: waits for notifications (at most until the next reconcile),
    /// coalesces a burst, and sends the rows they name.
    async fn notified_changes(
        &mut self,
        store: &SqlLocks,
        link: &Link,
        rx: &mut broadcast::Receiver<Change>,
        seen: &mut Seen,
        sessions: &mut SessionTracker,
    ) -> Result<(), Halt> {
        // Wake for the next reconcile, or the next session to run out.
        let mut wait = self.reconcile.saturating_sub(seen.full_at.elapsed());
        if let Some(at) = sessions.next_expiry() {
            wait = wait.min(at.saturating_duration_since(Instant::now()));
        }
        let first = match tokio::time::timeout(wait, rx.recv()).await {
            Err(_) => return Ok(()),
            Ok(first) => first,
        };
        self.beat.saw();
        // Coalesce a burst into one read.
        tokio::time::sleep(Duration::from_millis(20)).await;
        let mut names = HashSet::new();
        let mut sessions_moved = false;
        let mut missed = false;
        let mut note = |c: Result<Change, ()>| match c {
            Ok(Change::Lock(n)) => {
                names.insert(n);
            }
            Ok(Change::Sessions) => sessions_moved = true,
            Ok(Change::Lost) | Err(()) => missed = true,
        };
        note(first.map_err(|_| ()));
        loop {
            match rx.try_recv() {
                Ok(c) => note(Ok(c)),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Lagged(_)) => note(Err(())),
                Err(TryRecvError::Closed) => {
                    return Err(StoreError::backend_msg("notification listener stopped").into())
                }
            }
        }
        // Sessions first (see `counted_changes`).
        if !missed && sessions_moved {
            self.sessions_changed(store, link, sessions).await?;
        }
        if !missed && !names.is_empty() {
            let names: Vec<String> = names.into_iter().collect();
            let rows = store.rows_named(&names).await?;
            self.beat.saw();
            match rows {
                Some(events) => link.events(events).await?,
                // A row deleted by hand: only a full read can tell what is gone.
                None => missed = true,
            }
        }
        if missed {
            *seen = self.full_read(store, link, sessions).await?;
        }
        Ok(())
    }

    /// Re-reads the sessions and the blacklist and sends what changed.
    async fn sessions_changed(&self, store: &SqlLocks, link: &Link, sessions: &mut SessionTracker) -> Result<(), Halt> {
        let (rows, blacklist) = (store.session_rows().await?, store.blacklist_rows().await?);
        self.beat.saw();
        let events = sessions.update(rows, blacklist, Instant::now(), Some(now_ms()));
        if !events.is_empty() {
            link.events(events).await?;
        }
        Ok(())
    }
}

/// What tells the observer to read: PostgreSQL's notifications, or SQLite's
/// commits seen by [`Commits`].
enum Wake {
    Notified(broadcast::Receiver<Change>),
    Committed(Commits),
}

/// Why following the table stopped.
enum Halt {
    HubGone,
    Store(StoreError),
}

impl From<StoreError> for Halt {
    fn from(e: StoreError) -> Halt {
        Halt::Store(e)
    }
}

impl From<HubGone> for Halt {
    fn from(_: HubGone) -> Halt {
        Halt::HubGone
    }
}

impl Session for SqlObserver {
    fn session<'a>(&'a mut self, link: &'a mut Link) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(self.observe(link))
    }
}

impl Observer for SqlObserver {
    fn run(self: Box<Self>, events: mpsc::Sender<ObserverEvent>) -> BoxFuture<'static, ()> {
        let link = Link::new(events, self.backoff.clone(), crate::summary::address_of_url(&self.url));
        Box::pin(run_observer(link, "sql", *self))
    }
}
