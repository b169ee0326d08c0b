//! The history's writer: hubs queue events without waiting ([`Recorder`]); one
//! task inserts them in batches and takes checkpoints; another applies the
//! retention.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use lockscope_model::history::{Draft, HistoryEvent, Kind};
use lockscope_model::time::Millis;
use lockscope_store::now_ms;
use tokio::sync::mpsc;
use tracing::warn;

use super::{History, HistoryStats, Retention, CHECKPOINT_EVERY};

/// Batches (one per hub turn) the queue holds before events are dropped.
pub(super) const QUEUE_BATCHES: usize = 4096;

/// Events written per transaction at most.
const MAX_WRITE: usize = 5_000;

/// A checkpoint is taken this long behind the newest events, so that events
/// another replica records a little late are in it.
const SETTLE_MS: Millis = 60_000;

/// How often the retention runs.
const RETENTION_EVERY: Duration = Duration::from_secs(600);

/// A hub's end of the history queue (cheap to clone).
#[derive(Clone)]
pub struct Recorder {
    fleet: Arc<str>,
    queue: mpsc::Sender<Vec<HistoryEvent>>,
    stats: Arc<HistoryStats>,
}

impl Recorder {
    pub(super) fn new(fleet: &str, queue: mpsc::Sender<Vec<HistoryEvent>>, stats: Arc<HistoryStats>) -> Recorder {
        Recorder {
            fleet: fleet.into(),
            queue,
            stats,
        }
    }

    /// Queues `drafts`, seen at `at`, without waiting: a full queue drops them
    /// and counts them.
    pub fn record(&self, at: Millis, drafts: Vec<Draft>) {
        if drafts.is_empty() {
            return;
        }
        let n = drafts.len() as u64;
        let events = drafts
            .into_iter()
            .map(|d| HistoryEvent::new(&self.fleet, at, d))
            .collect();
        match self.queue.try_send(events) {
            Ok(()) => {
                self.stats.queued.fetch_add(n, Ordering::Relaxed);
            }
            Err(_) => {
                self.stats.dropped.fetch_add(n, Ordering::Relaxed);
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

    pub fn fleet(&self) -> &str {
        &self.fleet
    }
}

/// Writes what the hubs queue, and checkpoints each fleet as its events add up.
pub(super) async fn run(history: History, mut rx: mpsc::Receiver<Vec<HistoryEvent>>) {
    let stats = history.inner.stats.clone();
    // Events since each fleet's last checkpoint, and that checkpoint's size.
    let mut since: HashMap<String, (u64, u64)> = HashMap::new();
    let mut checkpointing: Option<tokio::task::JoinHandle<Option<(String, u64)>>> = None;
    while let Some(first) = rx.recv().await {
        let mut batch = first;
        while batch.len() < MAX_WRITE {
            match rx.try_recv() {
                Ok(more) => batch.extend(more),
                Err(_) => break,
            }
        }
        let n = batch.len() as u64;
        for e in &batch {
            since.entry(e.fleet.clone()).or_default().0 += 1;
        }
        match history.write(batch).await {
            Ok(_) => {
                stats.written.fetch_add(n, Ordering::Relaxed);
            }
            Err(e) => {
                warn!(error = %e, events = n, "history: a batch was not written");
                stats.failed_batches.fetch_add(1, Ordering::Relaxed);
                stats.dropped.fetch_add(n, Ordering::Relaxed);
            }
        }
        stats
            .queued
            .fetch_sub(n.min(stats.queued.load(Ordering::Relaxed)), Ordering::Relaxed);
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
    }
}

/// Applies the retention a minute after start, then every [`RETENTION_EVERY`].
pub(super) async fn keep(history: History, retention: Retention) {
    let first = tokio::time::Instant::now() + Duration::from_secs(60);
    let mut tick = tokio::time::interval_at(first, RETENTION_EVERY);
    loop {
        tick.tick().await;
        match history.retain(&retention, now_ms()).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(removed = n, "history: retention applied"),
            Err(e) => warn!(error = %e, "history: retention failed"),
        }
    }
}
