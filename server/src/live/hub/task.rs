//! The task that owns one fleet's live table: applies the observer's events,
//! moves the views' indexes, answers commands and sends frames
//! ([`super::HubHandle`] is how everything else reaches it).

use std::time::Duration;

use lockscope_model::view::WindowFrame;
use lockscope_model::{FleetEvent, FleetState, FleetSummary, LockBody, ServerMsg, Snapshot, StoreStatus};
use lockscope_store::{now_ms, ObserverEvent};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;
use tracing::{debug, warn};

use super::commands::{Command, SessionNow};
use super::history::{HubHistory, PUMP_EVERY};
use super::watchers::Watchers;
use super::{Frame, MAX_BATCHES_PER_TURN, MAX_SLEEP};
use crate::live::stats::HubFeed;
use crate::live::views::{BuildId, Built, Now, SubId, Views};
use crate::remember::history::Recorder;

/// Commands handled before the hub's next turn (frames, summary). Large enough
/// that 200 browsers opening views at once are one turn; bounded so that a
/// flood of commands still leaves turns for the frames.
const MAX_COMMANDS_PER_TURN: usize = 256;

/// The state the hub task owns (nothing else touches it: see the module docs
/// of [`super`] on channels instead of a lock).
pub(super) struct Hub {
    pub(super) state: FleetState,
    pub(super) views: Views,
    pub(super) status: StoreStatus,
    pub(super) subscribers: std::collections::HashMap<SubId, mpsc::Sender<Frame>>,
    pub(super) summary: watch::Sender<FleetSummary>,
    pub(super) started: Instant,
    /// Page renders waiting for their view's index to be built.
    pub(super) renders: Vec<(SubId, oneshot::Sender<(WindowFrame, StoreStatus)>)>,
    /// An index build is running on a blocking thread. One at a time, so that a
    /// burst of new views over a large fleet leaves a core to this task and the
    /// rest of the server; results come back on `built_tx`'s channel.
    pub(super) building: bool,
    pub(super) built_tx: mpsc::Sender<Result<Built, BuildId>>,
    pub(super) watchers: Watchers,
    /// What `/metrics` reads besides the summary ([`HubHandle::stats`]).
    pub(super) feed: HubFeed,
    /// Where the fleet's history goes (`None`: the server keeps none).
    pub(super) history: Option<HubHistory>,
    /// The history's recorder, for a replay after a restart ([`Hub::on_missed`]).
    pub(super) replay: Option<Recorder>,
}

impl Hub {
    pub(super) async fn run(
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
                    Some(cmd) => {
                        self.on_command(cmd);
                        // And those queued behind it: a burst of new views (or
                        // acknowledgements) costs one turn, and new views' tops
                        // one pass over the fleet for all of them.
                        for _ in 1..MAX_COMMANDS_PER_TURN {
                            let Ok(cmd) = commands.try_recv() else { break };
                            self.on_command(cmd);
                        }
                    }
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

    pub(super) fn now(&self) -> Now {
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
        if let Some(at) = self.views.pass_due_at() {
            // New tops wait for their pass (see `turn`).
            wake = wake.min(self.started + Duration::from_millis(at.max(0) as u64));
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
        if self.history.as_ref().is_some_and(|h| h.pumping()) {
            wake = wake.min(Instant::now() + PUMP_EVERY);
        }
        wake
    }

    /// After anything happened: states due by time, then frames due, then the summary.
    fn turn(&mut self) {
        let now = self.now();
        if let Some(h) = &mut self.history {
            // Deletes held for a release's answer are recorded after at most its TTL.
            h.expire();
            // A first snapshot's acquisitions, as the history's writer takes them.
            h.pump(&self.state);
        }
        self.views.advance(&self.state, now.wall);
        // The frames of views an existing order serves go out first; the tops
        // that need a pass over the fleet get it once those frames are out and
        // the burst of new views is over (`Views::pass_due_at`): one pass for all.
        let due = self.views.pass_due_at().is_some_and(|at| at <= now.mono);
        self.views.mark_dirty_before_pass(&self.state, now);
        self.send_due(now);
        if due {
            let now = self.now();
            self.views.mark_dirty(&self.state, now);
            self.send_due(now);
        }
        self.watchers.flush(&self.state, &self.views);
        self.feed.turn(&self.state, &self.views);
        let counts = self.views.counts();
        let status = self.status.clone();
        self.summary.send_if_modified(|s| {
            let changed = s.counts != counts || s.status != status;
            s.counts = counts;
            s.status = status;
            changed
        });
    }

    fn send_due(&mut self, now: Now) {
        for (id, frame) in self.views.due_frames(&self.state, now) {
            self.deliver(id, &ServerMsg::Window(frame));
        }
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
                            h.before_apply(&self.state, &e, now, true);
                        }
                        for change in self.state.apply(e) {
                            self.views.on_change(&self.state, &change, now);
                            self.watchers.on_change(&self.state, &change, now, from_reset);
                            self.feed.on_change(&self.state, &change);
                        }
                    }
                }
                ObserverEvent::Missed { base, events } => self.on_missed(base, events, now),
                // A polled or rescanned fleet's last full read: the overview
                // says when, and past 3× the interval that it is not live.
                ObserverEvent::Looked(polled) => self.summary.send_modify(|s| s.polled = Some(polled)),
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

    /// What the store changed while no dashboard watched, from where the
    /// history stopped (`base`) up to the first snapshot: into the history
    /// only, derived as live events are but on a table of its own (the live
    /// table starts from the snapshot, so the past is never shown as live).
    /// The base is compared with the history first (its first-snapshot
    /// resync), so a later snapshot is not.
    fn on_missed(&mut self, base: Snapshot, events: Vec<FleetEvent>, now: i64) {
        let (Some(h), Some(recorder)) = (&mut self.history, &self.replay) else {
            return;
        };
        let since = recorder.resumed().map_or(i64::MIN, |c| c.at);
        let times = replay_times(&events, since, now);
        let mut past = FleetState::default();
        let base = FleetEvent::Reset(base);
        h.before_apply(&past, &base, now, false);
        past.apply(base);
        recorder.hold();
        for (e, at) in events.into_iter().zip(times) {
            h.before_apply(&past, &e, at, false);
            past.apply(e);
        }
        recorder.send_held();
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
    pub(super) fn deliver(&mut self, id: SubId, msg: &ServerMsg) {
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

    pub(super) fn drop_subscriber(&mut self, id: SubId) {
        self.subscribers.remove(&id);
        self.views.unsubscribe(id);
    }
}

/// When each replayed change happened, as best known (this server did not see
/// them): a lock written at its record's time (its holder's clock), anything
/// else at the next such time after it (the latest it can have been), kept in
/// store order and between `since` (the last event recorded before) and `now`.
fn replay_times(events: &[FleetEvent], since: i64, now: i64) -> Vec<i64> {
    let mut times = vec![now; events.len()];
    let mut next = now;
    for (i, e) in events.iter().enumerate().rev() {
        let written = match e {
            FleetEvent::Upsert(l) => match &l.body {
                LockBody::Held(r) => Some(r.heartbeat_at.max(r.acquired_at)),
                _ => None,
            },
            _ => None,
        };
        next = written.map_or(next, |w| w.min(next)).max(since);
        times[i] = next;
    }
    times
}

impl Hub {
    /// Does what a handle asked ([`Command`]).
    pub(super) fn on_command(&mut self, cmd: Command) {
        let now = self.now();
        match cmd {
            Command::Subscribe {
                view_id,
                view,
                out,
                reply,
            } => {
                let id = self.views.subscribe(view_id, view, now);
                let status = ServerMsg::Status {
                    server_time: now.wall,
                    status: self.status.clone(),
                };
                self.subscribers.insert(id, out);
                if reply.send(id).is_err() {
                    return self.drop_subscriber(id);
                }
                self.deliver(id, &status);
            }
            Command::SetView { id, view_id, view } => self.views.set_view(id, view_id, view, now),
            Command::Ack { id, seq } => self.views.ack(id, seq),
            Command::Unsubscribe(id) => self.drop_subscriber(id),
            Command::Render { view, after, reply } => {
                match self.views.render_after(&self.state, &view, after.as_ref(), now) {
                    Ok(frame) => {
                        let _ = reply.send((frame, self.status.clone()));
                    }
                    Err(waiting) => self.renders.push((waiting, reply)),
                }
            }
            Command::WatchLock { name, reply } => {
                let _ = reply.send(self.watchers.watch_lock(&self.state, &name));
            }
            Command::WatchSessions { reply } => {
                let _ = reply.send(self.watchers.watch_sessions(&self.state, &self.views));
            }
            Command::Unlocker(status) => {
                self.summary.send_if_modified(|s| {
                    let changed = s.unlocker.as_ref() != Some(&status);
                    s.unlocker = Some(status);
                    changed
                });
            }
            Command::History(history) => {
                self.summary.send_if_modified(|s| {
                    let changed = s.history != history;
                    s.history = history;
                    changed
                });
            }
            Command::AnnounceRelease {
                id,
                name,
                fence,
                note,
                reply,
            } => {
                if let Some(h) = &mut self.history {
                    h.announce(id, name, fence, note);
                }
                let _ = reply.send(());
            }
            Command::ConfirmRelease {
                id,
                name,
                fence,
                removed,
            } => {
                if let Some(h) = &mut self.history {
                    h.confirm(id, name, fence, removed);
                }
            }
            Command::SessionNow { id, reply } => {
                let sessions = self.state.sessions();
                let _ = reply.send(SessionNow {
                    known: sessions.sessions.contains_key(&id),
                    blacklist: sessions.blacklist.get(&id).cloned(),
                    locks: self.views.lock_names_of_session(&id),
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use lockscope_model::{FleetEvent, LockEntry};

    use super::replay_times;

    fn up(name: &str, written: i64) -> FleetEvent {
        let rec = lockscope_store::testing::record("o", "p", written);
        let raw = serde_json::to_vec(&rec).unwrap();
        FleetEvent::Upsert(LockEntry::from_stored(name.into(), 1, 1, &raw))
    }

    fn gone(name: &str) -> FleetEvent {
        FleetEvent::Remove {
            name: name.into(),
            revision: 2,
        }
    }

    /// docs/operations.md: "a lock write at its record's time (the holder's
    /// clock), anything else at the next such time after it, never before the
    /// last event recorded nor after the restart".
    #[test]
    fn replayed_changes_are_timed_by_their_records_in_store_order_within_the_window() {
        let events = [
            up("a", 1_000),
            gone("a"),
            up("b", 3_000),
            gone("b"),
            up("c", 9_999),
            gone("c"),
        ];
        assert_eq!(
            replay_times(&events, 500, 5_000),
            [1_000, 3_000, 3_000, 5_000, 5_000, 5_000],
            "a write at its record's time, an end at the next write's, the last ones at the restart"
        );
        let early = [up("a", 10), gone("a")];
        assert_eq!(
            replay_times(&early, 500, 5_000),
            [500, 5_000],
            "never before the last event recorded"
        );
        let skewed = [up("a", 4_000), up("b", 2_000)];
        assert_eq!(replay_times(&skewed, 0, 5_000), [2_000, 2_000], "store order is kept");
    }
}
