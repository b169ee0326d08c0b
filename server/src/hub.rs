//! The fleet hub: one task owns a fleet's live table and every view of it.
//!
//! It applies the observer's events with the model's reducer, moves the changed
//! locks in the views' indexes ([`crate::views`]), and sends each subscriber a
//! frame of its window when it has something new, room for another unacknowledged
//! frame, and the frame interval has passed. Work per event is O(log n) per view
//! index; work per frame follows the window, never the fleet.
//!
//! Channels, not a shared lock: one task owns the state, so nothing waits on a
//! lock; subscribers talk to it by commands and receive frames on their own small
//! channel, which can never fill because frames in flight are bounded by acks.
//! The fleet's headline numbers are published on a `watch` channel, so the
//! overview never asks the hub anything.

use std::sync::Arc;
use std::time::Duration;

use lockscope_model::detail::{LockDetail, SessionList};
use lockscope_model::history::ReleaseNote;
use lockscope_model::unlock::UnlockerStatus;
use lockscope_model::view::{ViewSpec, WindowFrame};
use lockscope_model::{FleetEvent, FleetState, FleetSummary, ServerMsg, StoreStatus};
use lockscope_store::fleet::FleetStore;
use lockscope_store::{now_ms, ObserverEvent};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;
use tracing::{debug, warn};

use crate::history::Recorder;
use crate::metrics::{FleetStats, HubFeed};
use crate::views::{BuildId, Built, Now, SubId, Views};
use commands::Command;
pub use commands::SessionNow;
pub use fleets::Fleets;
use history::HubHistory;
use watchers::Watchers;

mod commands;
mod fleets;
mod history;
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
        tokio::spawn(store.observer().run(tx));
        let history = history.map(|(r, replica)| HubHistory::new(r, replica));
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
        history: Option<HubHistory>,
    ) -> HubHandle {
        let (commands, command_rx) = mpsc::channel(1024);
        let status = StoreStatus::Connecting { since: now_ms() };
        let (summary_tx, summary) = watch::channel(FleetSummary {
            name: fleet.to_string(),
            source: source.to_string(),
            status: status.clone(),
            writable: store.as_ref().is_some_and(|s| s.writable()),
            unlocker: None,
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
            history,
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
        let (reply, rx) = oneshot::channel();
        self.send(Command::Render { view, reply }).await?;
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

    /// Tells the history that lock `name`'s acquisition `fence` is about to be
    /// released by `note.actor` (an operator, the unlocker), so that the store's
    /// delete is recorded as that; `None` withdraws it (the release did not
    /// happen). Answered once the hub has it, so the delete cannot overtake it.
    pub async fn note_release(&self, name: &str, fence: i64, note: Option<ReleaseNote>) {
        let (reply, rx) = oneshot::channel();
        let cmd = Command::NoteRelease {
            name: name.to_string(),
            fence,
            note,
            reply,
        };
        if self.send(cmd).await.is_ok() {
            let _ = rx.await;
        }
    }

    async fn send(&self, cmd: Command) -> Result<(), HubStopped> {
        self.commands.send(cmd).await.map_err(|_| HubStopped)
    }
}

struct Hub {
    state: FleetState,
    views: Views,
    status: StoreStatus,
    subscribers: std::collections::HashMap<SubId, mpsc::Sender<Frame>>,
    summary: watch::Sender<FleetSummary>,
    started: Instant,
    /// Page renders waiting for their view's index to be built.
    renders: Vec<(SubId, oneshot::Sender<(WindowFrame, StoreStatus)>)>,
    /// An index build is running on a blocking thread. One at a time, so that a
    /// burst of new views over a large fleet leaves a core to this task and the
    /// rest of the server; results come back on `built_tx`'s channel.
    building: bool,
    built_tx: mpsc::Sender<Result<Built, BuildId>>,
    watchers: Watchers,
    /// What `/metrics` reads besides the summary ([`HubHandle::stats`]).
    feed: HubFeed,
    /// Where the fleet's history goes (`None`: the server keeps none).
    history: Option<HubHistory>,
}

impl Hub {
    async fn run(
        mut self,
        mut events: mpsc::Receiver<ObserverEvent>,
        mut commands: mpsc::Receiver<Command>,
        mut built: mpsc::Receiver<Result<Built, BuildId>>,
    ) {
        let mut events_open = true;
        loop {
            let wake = self.next_wake();
            tokio::select! {
                Some(b) = built.recv() => self.on_built(b),
                ev = events.recv(), if events_open => match ev {
                    Some(ev) => self.on_events(ev, &mut events),
                    // The observer stopped (only at shutdown): keep serving what we have.
                    None => events_open = false,
                },
                cmd = commands.recv() => match cmd {
                    Some(cmd) => self.on_command(cmd),
                    // Every handle is gone: nobody can read us any more.
                    None => break,
                },
                _ = tokio::time::sleep_until(wake) => {}
            }
            self.turn();
            self.start_build();
            self.answer_renders();
        }
        debug!(fleet = %self.summary.borrow().name, "hub stopped");
    }

    fn now(&self) -> Now {
        Now {
            wall: now_ms(),
            mono: self.started.elapsed().as_millis() as i64,
        }
    }

    /// When the hub next has something to do by itself: a frame that becomes due,
    /// or a lock whose state changes with time.
    fn next_wake(&self) -> Instant {
        let now = self.now();
        let mut wake = Instant::now() + MAX_SLEEP;
        if !self.building && self.views.has_queued() {
            // One index's keys are collected per turn (see `start_build`).
            return Instant::now();
        }
        if let Some(at) = self.views.next_send() {
            wake = wake.min(self.started + Duration::from_millis(at.max(0) as u64));
        }
        if let Some(at) = self.views.next_deadline() {
            let wait = Duration::from_millis((at - now.wall).max(0) as u64);
            wake = wake.min(Instant::now() + wait);
        }
        if let Some(at) = self.watchers.next_wake() {
            wake = wake.min(at);
        }
        wake
    }

    /// After anything happened: states due by time, then frames due, then the summary.
    fn turn(&mut self) {
        let now = self.now();
        self.views.advance(&self.state, now.wall);
        self.views.mark_dirty(now);
        for (id, frame) in self.views.due_frames(&self.state, now) {
            self.deliver(id, &ServerMsg::Window(frame));
        }
        self.watchers.flush(&self.state, &self.views);
        self.feed.turn(&self.views);
        let counts = self.views.counts();
        let status = self.status.clone();
        self.summary.send_if_modified(|s| {
            let changed = s.counts != counts || s.status != status;
            s.counts = counts;
            s.status = status;
            changed
        });
    }

    fn on_events(&mut self, first: ObserverEvent, events: &mut mpsc::Receiver<ObserverEvent>) {
        let now = now_ms();
        let mut next = Some(first);
        let mut batches = 0;
        while let Some(ev) = next.take() {
            match ev {
                ObserverEvent::Events(evs) => {
                    for e in evs {
                        let from_reset = matches!(e, FleetEvent::Reset(_));
                        if let Some(h) = &mut self.history {
                            h.before_apply(&self.state, &e, now);
                        }
                        for change in self.state.apply(e) {
                            self.views.on_change(&self.state, &change, now);
                            self.watchers.on_change(&self.state, &change, now, from_reset);
                            self.feed.on_change(&self.state, &change);
                        }
                    }
                }
                ObserverEvent::Status(status) => {
                    self.feed.on_status(&status);
                    if let Some(h) = &mut self.history {
                        h.on_status(&status, now);
                    }
                    self.status = status.clone();
                    let msg = ServerMsg::Status {
                        server_time: now_ms(),
                        status,
                    };
                    let ids: Vec<SubId> = self.subscribers.keys().copied().collect();
                    for id in ids {
                        self.deliver(id, &msg);
                    }
                }
            }
            batches += 1;
            if batches < MAX_BATCHES_PER_TURN {
                next = events.try_recv().ok();
            }
        }
    }

    /// Starts the next index build, if none is running.
    fn start_build(&mut self) {
        if self.building {
            return;
        }
        if let Some(build) = self.views.next_build(&self.state) {
            self.building = true;
            let done = self.built_tx.clone();
            let id = build.id();
            let sorting = tokio::task::spawn_blocking(move || build.run());
            tokio::spawn(async move {
                // A build that panicked is reported, so its index is queued again
                // rather than waited for forever. The hub outlives its builds
                // unless the server is shutting down.
                let _ = done.send(sorting.await.map_err(|_| id)).await;
            });
        }
    }

    fn on_built(&mut self, built: Result<Built, BuildId>) {
        self.building = false;
        match built {
            Ok(built) => self.views.install(built),
            Err(failed) => {
                warn!("an index build failed; queued again");
                self.views.requeue(failed);
            }
        }
    }

    /// Answers the page renders whose view's index is now built.
    fn answer_renders(&mut self) {
        if self.renders.is_empty() {
            return;
        }
        let now = self.now();
        let (ready, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut self.renders)
            .into_iter()
            .partition(|(id, _)| self.views.is_ready(*id));
        self.renders = Vec::with_capacity(waiting.len());
        for (id, reply) in waiting {
            match reply.is_closed() {
                // The request is gone: its view need not be kept (or built) for it.
                true => self.views.unsubscribe(id),
                false => self.renders.push((id, reply)),
            }
        }
        for (id, reply) in ready {
            let frame = self.views.render_sub(&self.state, id, now);
            let _ = reply.send((frame, self.status.clone()));
        }
    }

    /// Queues `msg` for subscriber `id`; one whose queue is full or gone is dropped
    /// (its socket has stopped being read altogether).
    fn deliver(&mut self, id: SubId, msg: &ServerMsg) {
        let Some(out) = self.subscribers.get(&id) else { return };
        let frame: Frame = serde_json::to_string(msg).expect("server messages serialise").into();
        match out.try_send(frame) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Closed(_)) => self.drop_subscriber(id),
            Err(mpsc::error::TrySendError::Full(_)) => {
                warn!(subscriber = id, "subscriber queue full; dropping it");
                self.feed.subscriber_lagged();
                self.drop_subscriber(id);
            }
        }
    }

    fn drop_subscriber(&mut self, id: SubId) {
        self.subscribers.remove(&id);
        self.views.unsubscribe(id);
    }
}

#[cfg(test)]
mod tests;
