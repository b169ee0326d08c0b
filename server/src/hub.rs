//! The fleet hub: one task owns a fleet's live table.
//!
//! It applies the observer's events with the model's reducer and publishes each
//! batch of effective changes once, serialised, on a broadcast channel. Snapshot
//! and subscription are taken together inside the task, so a subscriber's first
//! delta is exactly the one after its snapshot. A subscriber that falls more than
//! the channel's capacity behind is told by the channel (`Lagged`) and asks again.
//!
//! Channels, not a shared lock: readers never wait on the writer, and the writer
//! never waits on a slow reader.

use std::sync::Arc;

use lockscope_model::{FleetEvent, FleetState, FleetSummary, ServerMsg, Snapshot, StoreStatus};
use lockscope_store::{now_ms, Observer, ObserverEvent};
use tokio::sync::{broadcast, mpsc, oneshot};
use tracing::debug;

/// One serialised [`ServerMsg`], shared by every subscriber.
pub type Frame = Arc<str>;

/// Most observer batches merged into one delta when the hub is behind.
const MAX_BATCHES_PER_DELTA: usize = 64;

/// The hub has stopped (only at shutdown).
#[derive(Debug, thiserror::Error)]
#[error("the fleet hub has stopped")]
pub struct HubStopped;

/// A cheap, cloneable handle to a running hub.
#[derive(Clone)]
pub struct HubHandle {
    commands: mpsc::Sender<Command>,
    fleet: Arc<str>,
}

enum Command {
    Subscribe(oneshot::Sender<Subscription>),
    Snapshot(oneshot::Sender<Snapshot>),
    Summary(oneshot::Sender<FleetSummary>),
}

/// Every fleet the server watches, in the order configured; the first is the
/// default page.
#[derive(Clone)]
pub struct Fleets(Arc<Vec<HubHandle>>);

impl Fleets {
    pub fn new(hubs: Vec<HubHandle>) -> Fleets {
        Fleets(Arc::new(hubs))
    }

    /// The named fleet, or the first when `name` is `None`.
    pub fn get(&self, name: Option<&str>) -> Option<&HubHandle> {
        match name {
            None => self.0.first(),
            Some(n) => self.0.iter().find(|h| h.fleet() == n),
        }
    }

    pub fn names(&self) -> Vec<String> {
        self.0.iter().map(|h| h.fleet().to_string()).collect()
    }

    /// Every running fleet's summary, in order.
    pub async fn summaries(&self) -> Vec<FleetSummary> {
        let asks = self.0.iter().map(HubHandle::summary);
        futures::future::join_all(asks)
            .await
            .into_iter()
            .filter_map(Result::ok)
            .collect()
    }
}

/// A snapshot and every message after it.
pub struct Subscription {
    pub snapshot: Snapshot,
    pub updates: broadcast::Receiver<Frame>,
}

impl HubHandle {
    /// Starts a hub fed by `observer`; `source` says where the locks live.
    pub fn spawn(fleet: &str, source: &str, observer: Box<dyn Observer>, buffer: usize) -> HubHandle {
        let (tx, rx) = mpsc::channel(256);
        tokio::spawn(observer.run(tx));
        HubHandle::with_events(fleet, source, rx, buffer)
    }

    /// Starts a hub fed by a channel of observer events.
    pub fn with_events(fleet: &str, source: &str, events: mpsc::Receiver<ObserverEvent>, buffer: usize) -> HubHandle {
        let (commands, command_rx) = mpsc::channel(64);
        let (updates, _) = broadcast::channel(buffer.max(1));
        let hub = Hub {
            fleet: fleet.to_string(),
            source: source.to_string(),
            state: FleetState::default(),
            status: StoreStatus::Connecting { since: now_ms() },
            seq: 0,
            updates,
        };
        tokio::spawn(hub.run(events, command_rx));
        HubHandle {
            commands,
            fleet: fleet.into(),
        }
    }

    pub fn fleet(&self) -> &str {
        &self.fleet
    }

    pub async fn subscribe(&self) -> Result<Subscription, HubStopped> {
        self.ask(Command::Subscribe).await
    }

    pub async fn snapshot(&self) -> Result<Snapshot, HubStopped> {
        self.ask(Command::Snapshot).await
    }

    /// Headline numbers, without copying the table.
    pub async fn summary(&self) -> Result<FleetSummary, HubStopped> {
        self.ask(Command::Summary).await
    }

    async fn ask<T>(&self, cmd: impl FnOnce(oneshot::Sender<T>) -> Command) -> Result<T, HubStopped> {
        let (tx, rx) = oneshot::channel();
        self.commands.send(cmd(tx)).await.map_err(|_| HubStopped)?;
        rx.await.map_err(|_| HubStopped)
    }
}

struct Hub {
    fleet: String,
    source: String,
    state: FleetState,
    status: StoreStatus,
    /// Number of deltas published.
    seq: u64,
    updates: broadcast::Sender<Frame>,
}

impl Hub {
    async fn run(mut self, mut events: mpsc::Receiver<ObserverEvent>, mut commands: mpsc::Receiver<Command>) {
        loop {
            tokio::select! {
                ev = events.recv() => match ev {
                    Some(ev) => self.on_event(ev, &mut events),
                    None => break,
                },
                cmd = commands.recv() => match cmd {
                    Some(Command::Subscribe(reply)) => {
                        let updates = self.updates.subscribe();
                        let _ = reply.send(Subscription { snapshot: self.snapshot(), updates });
                    }
                    Some(Command::Snapshot(reply)) => {
                        let _ = reply.send(self.snapshot());
                    }
                    Some(Command::Summary(reply)) => {
                        let _ = reply.send(self.summary());
                    }
                    // Every handle is gone: nobody can read us any more.
                    None => break,
                },
            }
        }
        debug!(fleet = %self.fleet, "hub stopped");
    }

    fn on_event(&mut self, first: ObserverEvent, events: &mut mpsc::Receiver<ObserverEvent>) {
        let mut changes = Vec::new();
        let mut next = Some(first);
        let mut batches = 0;
        // Merge what is already queued into one delta, but publish a status change
        // in its place in the sequence.
        while let Some(ev) = next.take() {
            match ev {
                ObserverEvent::Events(evs) => {
                    for e in evs {
                        changes.extend(self.state.apply(e));
                    }
                }
                ObserverEvent::Status(status) => {
                    self.publish_changes(&mut changes);
                    self.status = status.clone();
                    self.publish(&ServerMsg::Status {
                        server_time: now_ms(),
                        status,
                    });
                }
            }
            batches += 1;
            if batches < MAX_BATCHES_PER_DELTA {
                next = events.try_recv().ok();
            }
        }
        self.publish_changes(&mut changes);
    }

    fn publish_changes(&mut self, changes: &mut Vec<FleetEvent>) {
        if changes.is_empty() {
            return;
        }
        self.seq += 1;
        let msg = ServerMsg::Delta {
            seq: self.seq,
            server_time: now_ms(),
            events: std::mem::take(changes),
        };
        self.publish(&msg);
    }

    fn publish(&self, msg: &ServerMsg) {
        let frame: Frame = serde_json::to_string(msg).expect("server messages serialise").into();
        // No receivers is fine: nobody is watching right now.
        let _ = self.updates.send(frame);
    }

    fn summary(&self) -> FleetSummary {
        FleetSummary {
            name: self.fleet.clone(),
            source: self.source.clone(),
            status: self.status.clone(),
            counts: self.state.counts(now_ms()),
        }
    }

    fn snapshot(&self) -> Snapshot {
        Snapshot {
            fleet: self.fleet.clone(),
            seq: self.seq,
            server_time: now_ms(),
            revision: self.state.revision(),
            status: self.status.clone(),
            locks: self.state.locks().cloned().collect(),
            waiters: self.state.waiters().cloned().collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lockscope_model::LockEntry;

    fn up(name: &str, rev: i64) -> FleetEvent {
        FleetEvent::Upsert(LockEntry::from_stored(name.into(), rev, rev, b"x"))
    }

    fn parse(f: &Frame) -> ServerMsg {
        serde_json::from_str(f).unwrap()
    }

    #[tokio::test]
    async fn a_subscriber_gets_the_snapshot_then_exactly_the_later_deltas() {
        let (tx, rx) = mpsc::channel(16);
        let hub = HubHandle::with_events("f", "test", rx, 16);
        tx.send(ObserverEvent::Events(vec![up("a", 1)])).await.unwrap();
        // The snapshot is taken by the hub task after it handled the event above
        // only if the event was queued first; wait for it through a snapshot.
        while hub.snapshot().await.unwrap().locks.is_empty() {
            tokio::task::yield_now().await;
        }
        let mut sub = hub.subscribe().await.unwrap();
        assert_eq!(sub.snapshot.seq, 1);
        assert_eq!(sub.snapshot.locks.len(), 1);
        tx.send(ObserverEvent::Events(vec![up("b", 2), up("a", 1)]))
            .await
            .unwrap();
        match parse(&sub.updates.recv().await.unwrap()) {
            ServerMsg::Delta { seq, events, .. } => {
                assert_eq!(seq, 2);
                assert_eq!(events, vec![up("b", 2)], "the duplicate of a is not forwarded");
            }
            other => panic!("{other:?}"),
        }
        let live = StoreStatus::Live { since: 5 };
        tx.send(ObserverEvent::Status(live.clone())).await.unwrap();
        match parse(&sub.updates.recv().await.unwrap()) {
            ServerMsg::Status { status, .. } => assert_eq!(status, live),
            other => panic!("{other:?}"),
        }
        assert_eq!(hub.snapshot().await.unwrap().status, live);
    }

    #[tokio::test]
    async fn a_slow_subscriber_is_told_it_lagged() {
        let (tx, rx) = mpsc::channel(16);
        let hub = HubHandle::with_events("f", "test", rx, 4);
        let mut sub = hub.subscribe().await.unwrap();
        for i in 0..10 {
            tx.send(ObserverEvent::Events(vec![up(&format!("l{i}"), i + 1)]))
                .await
                .unwrap();
            // One delta per event: let the hub publish before the next arrives.
            hub.snapshot().await.unwrap();
        }
        match sub.updates.recv().await {
            Err(broadcast::error::RecvError::Lagged(n)) => assert_eq!(n, 6),
            other => panic!("expected a lag, got {other:?}"),
        }
        let again = hub.subscribe().await.unwrap();
        assert_eq!(again.snapshot.locks.len(), 10);
        assert_eq!(again.snapshot.seq, 10);
    }
}
