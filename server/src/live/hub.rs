//! The fleet hub: one task owns a fleet's live table and every view of it.
//!
//! It applies the observer's events with the model's reducer, moves the changed
//! locks in the views' indexes ([`crate::live::views`]), and sends each subscriber a
//! frame of its window when it has something new, room for another unacknowledged
//! frame, and the frame interval has passed. Work per event is O(log n) per view
//! index; work per frame follows the window, never the fleet.
//!
//! Channels, not a shared lock: one task owns the state, so nothing waits on a
//! lock; subscribers talk to it by commands and receive frames on their own small
//! channel (`SUBSCRIBER_QUEUE` frames). Window frames in flight are bounded by acks, so
//! only a subscriber whose socket is no longer read fills it (status messages
//! are not paced): the hub never waits on it, and drops that subscriber
//! (counted in `/metrics` as a lag drop).
//! The fleet's headline numbers are published on a `watch` channel, so the
//! overview never asks the hub anything.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lockscope_model::detail::{LockDetail, SessionList};
use lockscope_model::history::ReleaseNote;
use lockscope_model::unlock::UnlockerStatus;
use lockscope_model::view::{ViewSpec, WindowFrame};
use lockscope_model::{FleetState, FleetSummary, StoreStatus};
use lockscope_store::fleet::{FleetStore, Removed};
use lockscope_store::{now_ms, ObserverEvent};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

use crate::live::stats::{FleetStats, HubFeed};
use crate::live::views::{ListCursor, SubId, Views};
use crate::remember::history::Recorder;
use commands::Command;
pub use commands::SessionNow;
pub use fleets::Fleets;
use history::HubHistory;
use task::Hub;
use watchers::Watchers;

mod commands;
mod credit;
mod fleets;
mod history;
mod task;
mod watchers;

/// One serialised [`ServerMsg`].
pub type Frame = Arc<str>;

/// Observer batches applied before the hub looks at its commands and frames again.
const MAX_BATCHES_PER_TURN: usize = 64;

/// Frames queued per subscriber: window frames are bounded by acknowledgements;
/// the rest is room for status changes.
const SUBSCRIBER_QUEUE: usize = 16;

/// Longest the hub sleeps without looking at the clock (lock states follow it).
const MAX_SLEEP: Duration = Duration::from_secs(1);

/// The hub has stopped (only at shutdown).
#[derive(Debug, thiserror::Error)]
#[error("the fleet hub has stopped")]
pub struct HubStopped;

/// A cheap, cloneable handle to a running hub.
#[derive(Clone)]
pub struct HubHandle {
    commands: mpsc::Sender<Command>,
    fleet: Arc<str>,
    summary: watch::Receiver<FleetSummary>,
    /// The fleet's store, for admin actions (`None` for a hub fed by hand).
    store: Option<Arc<dyn FleetStore>>,
    /// The fleet's numbers for `/metrics` besides its summary.
    stats: Arc<FleetStats>,
}

/// A subscriber's end: its frames, and the handle that unsubscribes when dropped.
pub struct Subscription {
    pub id: SubId,
    pub frames: mpsc::Receiver<Frame>,
    hub: HubHandle,
}

impl Subscription {
    /// Shows another view from now on.
    pub async fn set_view(&self, view_id: u32, view: ViewSpec) -> Result<(), HubStopped> {
        self.hub
            .send(Command::SetView {
                id: self.id,
                view_id,
                view,
            })
            .await
    }

    /// Every frame up to `seq` is applied.
    pub async fn ack(&self, seq: u64) -> Result<(), HubStopped> {
        self.hub.send(Command::Ack { id: self.id, seq }).await
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        // If the command queue is full, the hub still drops us the next time a
        // frame finds our channel closed.
        let _ = self.hub.commands.try_send(Command::Unsubscribe(self.id));
    }
}

impl HubHandle {
    /// Starts a hub for `store`'s fleet (described to people as `source`), with
    /// the store's observer feeding it.
    pub fn spawn(fleet: &str, source: &str, store: Arc<dyn FleetStore>) -> HubHandle {
        HubHandle::spawn_recording(fleet, source, store, None)
    }

    /// As [`HubHandle::spawn`], recording the fleet's history with `history`
    /// (the recorder, and this replica's name for the outages it sees).
    pub fn spawn_recording(
        fleet: &str,
        source: &str,
        store: Arc<dyn FleetStore>,
        history: Option<(Recorder, String)>,
    ) -> HubHandle {
        let (tx, rx) = mpsc::channel(256);
        let mut observer = store.observer();
        let recorder = history.as_ref().map(|(r, _)| r.clone());
        let counters = store.clone();
        tokio::spawn(async move {
            // Where the history stopped, so that the observer replays what
            // changed since where the store still has it (hub/task.rs,
            // `on_missed`), or the gap says what the store's fencing
            // counters tell of it.
            if let Some(r) = &recorder {
                let cursor = r.cursor().await;
                if cursor
                    .and_then(|c| c.revision)
                    .is_some_and(|f| observer.resume_history(f))
                {
                    r.resume();
                } else if cursor.is_some() {
                    match tokio::time::timeout(Duration::from_secs(5), counters.fences()).await {
                        Ok(Ok(Some(fences))) => r.count_unseen(&fences).await,
                        Ok(Ok(None)) => {}
                        Ok(Err(e)) => tracing::warn!(error = %e.describe(), "cannot read the store's fencing counters"),
                        Err(_) => tracing::warn!("the store's fencing counters took over 5 s to read"),
                    }
                }
            }
            observer.run(tx).await
        });
        let history = history.map(|(r, replica)| (HubHistory::new(r.clone(), replica), r));
        HubHandle::start(fleet, source, rx, Views::new(), Some(store), history)
    }

    /// The fleet's store (its admin side).
    pub fn store(&self) -> Option<&Arc<dyn FleetStore>> {
        self.store.as_ref()
    }

    /// Starts a hub fed by a channel of observer events.
    pub fn with_events(fleet: &str, source: &str, events: mpsc::Receiver<ObserverEvent>) -> HubHandle {
        HubHandle::start(fleet, source, events, Views::new(), None, None)
    }

    fn start(
        fleet: &str,
        source: &str,
        events: mpsc::Receiver<ObserverEvent>,
        views: Views,
        store: Option<Arc<dyn FleetStore>>,
        history: Option<(HubHistory, Recorder)>,
    ) -> HubHandle {
        let (commands, command_rx) = mpsc::channel(1024);
        let status = StoreStatus::Connecting { since: now_ms() };
        let (summary_tx, summary) = watch::channel(FleetSummary {
            name: fleet.to_string(),
            source: source.to_string(),
            status: status.clone(),
            writable: store.as_ref().is_some_and(|s| s.writable()),
            unlocker: None,
            history: None,
            polled: None,
            counts: Default::default(),
        });
        let (built_tx, built) = mpsc::channel(1);
        let feed = HubFeed::new();
        let stats = feed.stats();
        tokio::spawn(FleetStats::sample_counters(Arc::downgrade(&stats)));
        let hub = Hub {
            state: FleetState::default(),
            views,
            status,
            subscribers: Default::default(),
            summary: summary_tx,
            started: Instant::now(),
            renders: Vec::new(),
            building: false,
            built_tx,
            watchers: Watchers::default(),
            feed,
            replay: history.as_ref().map(|(_, r)| r.clone()),
            history: history.map(|(h, _)| h),
        };
        tokio::spawn(hub.run(events, command_rx, built));
        HubHandle {
            commands,
            fleet: fleet.into(),
            summary,
            store,
            stats,
        }
    }

    pub fn fleet(&self) -> &str {
        &self.fleet
    }

    /// The latest headline numbers (no round trip to the hub).
    pub fn summary(&self) -> FleetSummary {
        self.summary.borrow().clone()
    }

    /// The fleet's numbers for `/metrics` besides its summary (no round trip
    /// to the hub).
    pub fn stats(&self) -> &Arc<FleetStats> {
        &self.stats
    }

    /// Subscribes to `view`; frames (and store status changes) arrive on the
    /// subscription's channel, the first one at once.
    pub async fn subscribe(&self, view_id: u32, view: ViewSpec) -> Result<Subscription, HubStopped> {
        let (out, frames) = mpsc::channel(SUBSCRIBER_QUEUE);
        let (reply, rx) = oneshot::channel();
        self.send(Command::Subscribe {
            view_id,
            view,
            out,
            reply,
        })
        .await?;
        let id = rx.await.map_err(|_| HubStopped)?;
        Ok(Subscription {
            id,
            frames,
            hub: self.clone(),
        })
    }

    /// The first frame of `view` as a new subscriber would get it, and the store
    /// status (for a server-rendered page).
    pub async fn render(&self, view: ViewSpec) -> Result<(WindowFrame, StoreStatus), HubStopped> {
        self.render_after(view, None).await
    }

    /// [`HubHandle::render`] of the rows after `after` in `view`'s order (a list
    /// API page; `view.offset` is not read then), and the store status.
    pub async fn render_after(
        &self,
        view: ViewSpec,
        after: Option<ListCursor>,
    ) -> Result<(WindowFrame, StoreStatus), HubStopped> {
        let (reply, rx) = oneshot::channel();
        self.send(Command::Render { view, after, reply }).await?;
        rx.await.map_err(|_| HubStopped)
    }

    /// Lock `name` in full, now and whenever it changes (the detail page).
    pub async fn watch_lock(&self, name: &str) -> Result<watch::Receiver<Option<LockDetail>>, HubStopped> {
        let (reply, rx) = oneshot::channel();
        self.send(Command::WatchLock {
            name: name.to_string(),
            reply,
        })
        .await?;
        rx.await.map_err(|_| HubStopped)
    }

    /// The fleet's sessions, now and as they change (the sessions page).
    pub async fn watch_sessions(&self) -> Result<watch::Receiver<Option<SessionList>>, HubStopped> {
        let (reply, rx) = oneshot::channel();
        self.send(Command::WatchSessions { reply }).await?;
        rx.await.map_err(|_| HubStopped)
    }

    /// Publishes what the fleet's unlocker is doing, with the fleet's summary.
    pub async fn set_unlocker(&self, status: UnlockerStatus) {
        let _ = self.send(Command::Unlocker(status)).await;
    }

    /// Publishes whether the lock history is failing to write, with the
    /// fleet's summary (the overview says so).
    pub async fn set_history(&self, status: Option<lockscope_model::history::NotRecording>) {
        let _ = self.send(Command::History(status)).await;
    }

    /// Session `id` as the fleet knows it now.
    pub async fn session_now(&self, id: &str) -> Result<SessionNow, HubStopped> {
        let (reply, rx) = oneshot::channel();
        self.send(Command::SessionNow {
            id: id.to_string(),
            reply,
        })
        .await?;
        rx.await.map_err(|_| HubStopped)
    }

    /// The one way a release by an actor is made (an operator's force-release,
    /// the unlocker's): announces to the history that `note.actor` is about
    /// to release acquisition (`name`, `fence`), runs `release` (the store's
    /// compare-and-delete), and confirms with what the store answered,
    /// `removed` telling from that answer what it deleted (`None`: nothing).
    /// The store's delete is credited to `note.actor` only when that answer
    /// says its compare-and-delete removed that acquisition (`hub/credit.rs`); a
    /// failed call is never credited (whether it deleted is unknown). The
    /// announcement is answered before `release` runs, so the delete cannot
    /// overtake it; dropped midway, the release is confirmed as not done.
    pub async fn release_as<T, E>(
        &self,
        name: &str,
        fence: i64,
        note: ReleaseNote,
        release: impl Future<Output = Result<T, E>>,
        removed: impl FnOnce(&T) -> Option<Removed>,
    ) -> Result<T, E> {
        let id = NEXT_RELEASE.fetch_add(1, Ordering::Relaxed);
        let (reply, rx) = oneshot::channel();
        let cmd = Command::AnnounceRelease {
            id,
            name: name.to_string(),
            fence,
            note,
            reply,
        };
        let mut answer = Unanswered {
            hub: self,
            id,
            name,
            fence,
            removed: None,
            sent: false,
        };
        if self.send(cmd).await.is_ok() {
            let _ = rx.await;
        }
        let result = release.await;
        answer.removed = result.as_ref().ok().and_then(removed);
        answer.send().await;
        result
    }

    async fn send(&self, cmd: Command) -> Result<(), HubStopped> {
        self.commands.send(cmd).await.map_err(|_| HubStopped)
    }
}

/// Ids of announced releases (unique in this process: several hubs' releases
/// never meet in one hub, but one counter is simplest).
static NEXT_RELEASE: AtomicU64 = AtomicU64::new(1);

/// An announced release's answer for the hub: sent at the end of
/// [`HubHandle::release_as`], or as it drops when that future is dropped
/// midway (then `removed` is `None`: not credited).
struct Unanswered<'a> {
    hub: &'a HubHandle,
    id: u64,
    name: &'a str,
    fence: i64,
    removed: Option<Removed>,
    sent: bool,
}

impl Unanswered<'_> {
    fn confirmation(&self) -> Command {
        Command::ConfirmRelease {
            id: self.id,
            name: self.name.to_string(),
            fence: self.fence,
            removed: self.removed,
        }
    }

    async fn send(&mut self) {
        let _ = self.hub.send(self.confirmation()).await;
        self.sent = true;
    }
}

impl Drop for Unanswered<'_> {
    fn drop(&mut self) {
        if !self.sent {
            // Without waiting: if the queue is full, the hub records a delete
            // held for this answer uncredited after the credit TTL.
            let _ = self.hub.commands.try_send(self.confirmation());
        }
    }
}

#[cfg(test)]
mod tests;
