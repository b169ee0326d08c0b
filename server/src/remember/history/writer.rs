//! The history's writer: hubs queue events without waiting ([`Recorder`]); one
//! task inserts them in batches and takes checkpoints (the retention runs in
//! `super::retention::keep`). It also records the gaps: those losses left
//! (with the next batch; after a failure once writing works again, retried
//! every [`GAP_RETRY_EVERY`] while it fails and nothing comes),
//! a restart's first snapshot (`super::resync`, after the store's replay
//! where it has one) and a running server's reconnect that read a fresh
//! snapshot ([`Recorder::outage_gap`]).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lockscope_model::history::{Draft, HistoryEvent, Kind};
use lockscope_model::time::Millis;
use lockscope_store::now_ms;
use tokio::sync::{mpsc, oneshot};
use tracing::warn;

use super::resync::{resync, unwatched, Unwatched};
use super::write::CacheRelease;
use super::{Cursor, History, HistoryStats, Unseen, CHECKPOINT_EVERY, MAX_WRITE};

/// Batches (one per hub turn) the queue holds before events are dropped.
pub(super) const QUEUE_BATCHES: usize = 4096;

/// Times a failed batch is tried again (after 1 s, 2 s, 3 s).
const WRITE_RETRIES: u64 = 3;

/// How often, while writing fails and nothing is queued, the gaps are tried.
const GAP_RETRY_EVERY: Duration = Duration::from_secs(2);

/// Events queued and not yet written past which a first snapshot's backlog
/// (the acquisitions the hub records from its live table a chunk at a time,
/// `live::hub::history`) waits for the writer: two of its transactions, so
/// the writer never idles and the events waiting stay a few MiB whatever the
/// fleet's size.
pub const BACKLOG_AHEAD: u64 = 2 * MAX_WRITE as u64;

/// A checkpoint is taken this long behind the newest events, so that events
/// another replica records a little late are in it.
const SETTLE_MS: Millis = 60_000;

/// What the hubs queue for the writer.
pub(super) enum Item {
    Events(Vec<HistoryEvent>),
    /// A hub's first snapshot: `held` is every acquisition (lock, fence) in it.
    /// Acquisitions the history still shows open and the snapshot lacks ended
    /// while no dashboard watched: they get an end now.
    Resync {
        fleet: Arc<str>,
        at: Millis,
        revision: i64,
        held: HashSet<(String, i64)>,
        /// Where the history stopped before this start, unless the store
        /// replayed what changed since ([`Recorder::resume`]): a gap from
        /// there to the snapshot.
        since: Option<Cursor>,
        /// What the store's fencing counters say was acquired unseen.
        unseen: Option<Unseen>,
        /// Why the gap (a restart, or one whose start could not be read).
        cause: Unwatched,
    },
    /// Answered once everything queued before it is written (or dropped).
    Flush(oneshot::Sender<()>),
}

/// A hub's end of the history queue (cheap to clone).
#[derive(Clone)]
pub struct Recorder {
    fleet: Arc<str>,
    queue: mpsc::Sender<Item>,
    stats: Arc<HistoryStats>,
    history: History,
    /// A replay after a restart, shared by the recorder's clones.
    replay: Arc<Mutex<Replaying>>,
}

/// Where the last run's events stopped, and the store's replay of what
/// changed since.
#[derive(Default)]
struct Replaying {
    /// Where the last run's events stopped ([`Recorder::cursor`]).
    before: Option<Cursor>,
    /// [`Recorder::cursor`] was read.
    read: bool,
    /// The store replays from `before`'s revision ([`Recorder::resume`]).
    resumed: bool,
    /// Events recorded meanwhile, queued at once by [`Recorder::send_held`].
    held: Option<Vec<HistoryEvent>>,
    /// What was acquired unseen since `before` ([`Recorder::count_unseen`]).
    unseen: Option<Unseen>,
    /// Where the last run stopped could not be read: the first snapshot
    /// records a gap whose start is unknown.
    unknown: bool,
}

impl Recorder {
    pub(super) fn new(fleet: &str, history: History) -> Recorder {
        Recorder {
            fleet: fleet.into(),
            queue: history.inner.queue.clone(),
            stats: history.inner.stats.clone(),
            history,
            replay: Arc::default(),
        }
    }

    /// How far the fleet's history went before this start (`None`: nothing
    /// recorded, or it could not be read: logged), kept for the first
    /// snapshot: read it before the observer starts.
    pub async fn cursor(&self) -> Option<Cursor> {
        let (before, unknown) = match self.history.cursor(&self.fleet).await {
            Ok(c) => (c, false),
            Err(e) => {
                warn!(error = %e, fleet = %self.fleet, "history: cannot tell where the last run stopped: the first snapshot records a gap from an unknown time");
                (None, true)
            }
        };
        let mut r = self.replay.lock().expect("not poisoned");
        (r.before, r.unknown, r.read) = (before, unknown, true);
        before
    }

    /// Whether [`Recorder::resync`] compares a first snapshot with anything:
    /// unless the history was read empty before this start (nothing recorded,
    /// so nothing open to end and no gap), it needs the snapshot's
    /// acquisitions; an empty history is given none (a million-lock fleet's
    /// set is tens of MiB).
    pub fn compares(&self) -> bool {
        let r = self.replay.lock().expect("not poisoned");
        !r.read || r.before.is_some() || r.unknown
    }

    /// How many events a first snapshot's backlog may queue now: up to
    /// [`BACKLOG_AHEAD`] queued and not yet written (0: wait for the writer).
    pub fn room(&self) -> usize {
        BACKLOG_AHEAD.saturating_sub(self.stats.queued.load(Ordering::Relaxed)) as usize
    }

    /// Counts, from `fences` (every lock name's fencing counter in the store
    /// now, [`lockscope_store::fleet::FleetStore::fences`]), the acquisitions
    /// made since the history last recorded, for the gap the first snapshot
    /// records. Before the observer starts.
    pub async fn count_unseen(&self, fences: &[(String, i64)]) {
        match self.history.unseen(&self.fleet, fences).await {
            Ok(u) => self.replay.lock().expect("not poisoned").unseen = Some(u),
            Err(e) => warn!(error = %e, fleet = %self.fleet, "history: cannot count what was acquired unseen"),
        }
    }

    /// The store will replay what changed since the [`Recorder::cursor`]'s
    /// revision: a first snapshot at that revision is followed by every change
    /// since, so the history stays continuous (no gap).
    pub fn resume(&self) {
        self.replay.lock().expect("not poisoned").resumed = true;
    }

    /// Where the replay starts, if the store replays.
    pub fn resumed(&self) -> Option<Cursor> {
        let r = self.replay.lock().expect("not poisoned");
        r.before.filter(|_| r.resumed)
    }

    /// Events recorded from now on are held, and queued as one batch by
    /// [`Recorder::send_held`] (a replay is thousands at once: one queue item
    /// each would overflow the queue).
    pub fn hold(&self) {
        self.replay.lock().expect("not poisoned").held = Some(Vec::new());
    }

    /// Queues what was held since [`Recorder::hold`].
    pub fn send_held(&self) {
        let held = self.replay.lock().expect("not poisoned").held.take();
        let mut held = held.unwrap_or_default();
        self.stats.replayed.fetch_add(held.len() as u64, Ordering::Relaxed);
        while !held.is_empty() {
            let rest = held.split_off(held.len().min(MAX_WRITE));
            self.queue_events(std::mem::replace(&mut held, rest));
        }
    }

    /// Queues `drafts`, seen at `at`, without waiting: a full queue drops them
    /// and counts them.
    pub fn record(&self, at: Millis, drafts: Vec<Draft>) {
        if drafts.is_empty() {
            return;
        }
        let events: Vec<HistoryEvent> = drafts
            .into_iter()
            .map(|d| HistoryEvent::new(&self.fleet, at, d))
            .collect();
        if let Some(held) = &mut self.replay.lock().expect("not poisoned").held {
            held.extend(events);
            return;
        }
        self.queue_events(events);
    }

    fn queue_events(&self, events: Vec<HistoryEvent>) {
        let n = events.len() as u64;
        // When the first of them was seen (a lost batch's gap starts there).
        let at = events.iter().map(|e| e.at).min().unwrap_or_else(now_ms);
        match self.queue.try_send(Item::Events(events)) {
            Ok(()) => {
                self.stats.queued.fetch_add(n, Ordering::Relaxed);
            }
            Err(_) => {
                self.stats.lost(&self.fleet, at, n);
            }
        }
    }

    /// The store status moved: `unreachable` (with its error) or recovered,
    /// as `replica` saw it.
    pub fn status(&self, at: Millis, replica: &str, unreachable: Option<&str>) {
        let draft = Draft {
            kind: Some(if unreachable.is_some() {
                Kind::Unreachable
            } else {
                Kind::Recovered
            }),
            actor: Some(replica.to_string()),
            // The time makes each outage its own event (the id is built from the detail).
            detail: match unreachable {
                Some(e) => format!("{e} (seen at {at})"),
                None => format!("seen at {at}"),
            },
            ..Draft::default()
        };
        self.record(at, vec![draft]);
    }

    /// A reconnect after an outage read a fresh snapshot at `at` (the store
    /// could not resume where it stopped): the gap from `since` (the outage)
    /// to it, `ended`/`began` acquisitions differing between the table before
    /// and the snapshot.
    pub fn outage_gap(&self, since: Millis, at: Millis, ended: usize, began: usize) {
        let gap = unwatched(&self.fleet, Unwatched::Outage, since, at, Some((ended, began)), None);
        self.stats.outage_gaps.fetch_add(1, Ordering::Relaxed);
        self.queue_events(vec![gap]);
    }

    pub fn fleet(&self) -> &str {
        &self.fleet
    }

    /// The hub's first snapshot (at store `revision`) holds exactly `held`.
    /// Queued without waiting, behind what was recorded before it; if the queue
    /// is full it is lost (counted as one dropped event) and acquisitions that
    /// ended while no dashboard watched stay open in the history.
    pub fn resync(&self, at: Millis, revision: i64, held: HashSet<(String, i64)>) {
        let (before, unseen, unknown) = {
            let r = self.replay.lock().expect("not poisoned");
            (r.before, r.unseen.clone(), r.unknown)
        };
        let continuous = self.resumed().is_some_and(|c| c.revision == Some(revision));
        let (since, cause) = match before.filter(|_| !continuous) {
            // Conservative: a gap, zero long at the snapshot, saying its start is unknown.
            None if unknown => (Some(Cursor { revision: None, at }), Unwatched::UnknownStart),
            since => (since, Unwatched::Restart),
        };
        let item = Item::Resync {
            fleet: self.fleet.clone(),
            at,
            revision,
            held,
            since,
            unseen,
            cause,
        };
        if self.queue.try_send(item).is_err() {
            self.stats.lost(&self.fleet, at, 1);
        }
    }
}

/// Writes what the hubs queue, and checkpoints each fleet as its events add up.
pub(super) async fn run(history: History, mut rx: mpsc::Receiver<Item>) {
    let stats = history.inner.stats.clone();
    // Events since each fleet's last checkpoint, and that checkpoint's size.
    let mut since: HashMap<String, (u64, u64)> = HashMap::new();
    let mut checkpointing: Option<tokio::task::JoinHandle<Option<(String, u64)>>> = None;
    let mut release = CacheRelease::default();
    let mut next = next_item(&history, &mut rx).await;
    while let Some(first) = next.take() {
        let mut batch = match first {
            Item::Events(events) => events,
            Item::Resync {
                fleet,
                at,
                revision,
                held,
                since,
                unseen,
                cause,
            } => {
                let gap = since.map(|c| (c, unseen, cause));
                if gap.is_some() {
                    stats.restart_gaps.fetch_add(1, Ordering::Relaxed);
                }
                let ends = resync(&history, &fleet, at, revision, &held, gap).await;
                stats.queued.fetch_add(ends.len() as u64, Ordering::Relaxed);
                ends
            }
            Item::Flush(done) => {
                let _ = done.send(());
                next = next_item(&history, &mut rx).await;
                continue;
            }
        };
        while batch.len() < MAX_WRITE {
            match rx.try_recv() {
                Ok(Item::Events(more)) => batch.extend(more),
                // Handled after what came before it is written.
                Ok(other) => {
                    next = Some(other);
                    break;
                }
                Err(_) => break,
            }
        }
        let n = batch.len() as u64;
        for e in &batch {
            since.entry(e.fleet.clone()).or_default().0 += 1;
        }
        write_batch(&history, batch).await;
        stats
            .queued
            .fetch_sub(n.min(stats.queued.load(Ordering::Relaxed)), Ordering::Relaxed);
        if release.wrote(n as usize, tokio::time::Instant::now()) {
            history.release_cache().await;
        }
        // One checkpoint at a time, beside the writing: a large fleet's table
        // takes a while to rebuild, and the queue must keep moving meanwhile.
        if checkpointing.as_ref().is_some_and(|c| c.is_finished()) {
            if let Ok(Some((fleet, size))) = checkpointing.take().expect("checked").await {
                since.entry(fleet).or_default().1 = size;
            }
        }
        if checkpointing.is_none() {
            let due = since
                .iter_mut()
                .find(|(_, (events, size))| *events >= CHECKPOINT_EVERY.max(*size));
            if let Some((fleet, (events, _))) = due {
                *events = 0;
                let (h, fleet) = (history.clone(), fleet.clone());
                checkpointing = Some(tokio::spawn(async move {
                    match h.checkpoint(&fleet, now_ms() - SETTLE_MS).await {
                        Ok(n) => Some((fleet, n as u64)),
                        Err(e) => {
                            warn!(error = %e, %fleet, "history: checkpoint failed");
                            None
                        }
                    }
                }));
            }
        }
        if next.is_none() {
            next = next_or_release(&history, &mut rx, &mut release).await;
        }
    }
}

/// [`next_item`]; if the page cache is due to be given back before anything
/// comes, it is then.
async fn next_or_release(history: &History, rx: &mut mpsc::Receiver<Item>, release: &mut CacheRelease) -> Option<Item> {
    if let Some(due) = release.due {
        // (`next_item` is `recv` alone unless writing fails, then not cut short.)
        if !history.inner.stats.health.failing() {
            if let Ok(item) = tokio::time::timeout_at(due, rx.recv()).await {
                return item;
            }
        }
        release.due = None;
        history.release_cache().await;
    }
    next_item(history, rx).await
}

/// Writes `batch`, each event counted once: written, already there, or lost.
/// A lost end leaves a lock open in the history, so a failing batch is tried
/// again (after 1 s, 2 s, 3 s; the queue holds what arrives meanwhile), then
/// dropped; writing is failing from the first failure to the next success,
/// which records the gaps the losses left. Never failing because of readers:
/// `write` uses the writer's own connection, a new one after a failure.
async fn write_batch(history: &History, mut batch: Vec<HistoryEvent>) {
    let stats = &history.inner.stats;
    let n = batch.len() as u64;
    // A full queue's losses so far, in this batch's transaction: the cursor
    // it moves never passes a loss no gap records.
    let lost = stats.health.take_lost();
    batch.extend(super::health::events(&lost));
    let mut tries = 0;
    loop {
        match history.write_all(&batch).await {
            Ok(added) => {
                stats.written.fetch_add(added, Ordering::Relaxed);
                stats.duplicates.fetch_add(n.saturating_sub(added), Ordering::Relaxed);
                record_gaps(history).await;
                return;
            }
            Err(e) => {
                stats.health.failed(now_ms(), &why(&e));
                if tries < WRITE_RETRIES {
                    tries += 1;
                    warn!(error = %why(&e), events = n, "history: a batch was not written; trying again");
                    tokio::time::sleep(Duration::from_secs(tries)).await;
                    continue;
                }
                warn!(error = %why(&e), events = n, "history: a batch was not written; dropped");
                stats.failed_batches.fetch_add(1, Ordering::Relaxed);
                stats.health.unrecorded(lost);
                batch.truncate(n as usize);
                for e in &batch {
                    stats.lost(&e.fleet, e.at, 1);
                }
                return;
            }
        }
    }
}

/// The next item queued. While writing fails and nothing comes, the gaps are
/// tried every [`GAP_RETRY_EVERY`]: the first that is written ends the failure
/// (the pages stop saying the history is not recording, and the gap is in
/// it), with nothing else to write.
async fn next_item(history: &History, rx: &mut mpsc::Receiver<Item>) -> Option<Item> {
    loop {
        if !history.inner.stats.health.failing() {
            return rx.recv().await;
        }
        match tokio::time::timeout(GAP_RETRY_EVERY, rx.recv()).await {
            Ok(item) => return item,
            Err(_) => {
                let now = now_ms();
                let gaps = history.inner.stats.health.probe(now);
                if gaps.is_empty() {
                    continue;
                }
                if let Ok(added) = history.write(super::health::events(&gaps)).await {
                    history.inner.stats.written.fetch_add(added, Ordering::Relaxed);
                    // The same gaps (nothing was lost meanwhile: nothing
                    // came), so already there: not added twice.
                    record_gaps_at(history, now).await;
                }
            }
        }
    }
}

/// Writes the gaps that losses left, once the database takes writes (a `gap`
/// event per fleet; kept for the next success if these fail).
async fn record_gaps(history: &History) {
    record_gaps_at(history, now_ms()).await
}

/// [`record_gaps`] with the time of the write that worked.
async fn record_gaps_at(history: &History, now: Millis) {
    let stats = &history.inner.stats;
    let gaps = stats.health.wrote(now);
    if gaps.is_empty() {
        return;
    }
    match history.write(super::health::events(&gaps)).await {
        Ok(added) => {
            stats.written.fetch_add(added, Ordering::Relaxed);
            for (fleet, gap) in &gaps {
                warn!(%fleet, gap = %gap.text(), "history: recorded a gap");
            }
        }
        Err(e) => {
            warn!(error = %why(&e), "history: the gaps were not recorded; kept for the next write");
            stats.health.failed(now_ms(), &why(&e));
            stats.health.unrecorded(gaps);
        }
    }
}

/// A write's error with the database's own words.
fn why(e: &super::HistoryError) -> String {
    match std::error::Error::source(e) {
        Some(source) => format!("{e}: {source}"),
        None => e.to_string(),
    }
}
