//! The browser's copy of one fleet's view.
//!
//! The table is a [`FleetState`] (the model's reducer, the same one the hub runs)
//! plus one signal per row: the reducer's effective changes decide which row
//! signals are set, created or dropped, so one changed lock re-renders one row and
//! the keyed list only adds or removes the rows that came or went.

use std::collections::HashMap;

use leptos::prelude::*;
use lockscope_model::time::Millis;
use lockscope_model::{
    Counts, FleetEvent, FleetState, FleetSummary, LockEntry, Page, ServerMsg, Snapshot, StoreStatus,
};

/// The browser's link to the server.
#[derive(Clone, Debug, PartialEq)]
pub enum Connection {
    /// Rendered by the server; nothing live yet (or JavaScript is off).
    Static,
    Connecting,
    Live,
    /// The websocket closed; the next attempt is at `retry_at` (server clock).
    Reconnecting {
        retry_at: Millis,
    },
}

/// What the client must do after a message.
#[derive(Debug, PartialEq, Eq)]
pub enum Followup {
    None,
    /// Something does not add up (a gap in `seq`, a protocol we do not speak):
    /// drop the connection and start over from a fresh snapshot.
    Resync(String),
}

/// Reactive state of the page. `Copy`: every field is an arena handle.
#[derive(Clone, Copy)]
pub struct LiveView {
    table: StoredValue<FleetState>,
    /// One signal per row, shared with that row's view: reference-counted, so a
    /// removed row's signal lives until its view is gone.
    rows: StoredValue<HashMap<String, ArcRwSignal<LockEntry>>>,
    /// Row names in display (name) order; the keyed list iterates this.
    pub names: RwSignal<Vec<String>>,
    /// Bumped whenever a session starts or stops waiting.
    waiters_changed: RwSignal<u64>,
    pub fleet: RwSignal<String>,
    /// Every fleet's headline numbers (refreshed every few seconds).
    pub overview: RwSignal<Vec<FleetSummary>>,
    pub status: RwSignal<StoreStatus>,
    pub connection: RwSignal<Connection>,
    /// Server time minus browser time, in ms (estimated from pings).
    pub clock_offset: RwSignal<i64>,
    /// The current time on the server's clock; ticks once a second in the browser.
    pub now: RwSignal<Millis>,
    /// Sequence number of the last snapshot or delta applied.
    seq: StoredValue<u64>,
}

impl LiveView {
    /// The state as the server rendered it.
    pub fn new(page: Page) -> LiveView {
        let snapshot = page.snapshot;
        let view = LiveView {
            overview: RwSignal::new(page.fleets),
            table: StoredValue::new(FleetState::default()),
            rows: StoredValue::new(HashMap::new()),
            names: RwSignal::new(Vec::new()),
            waiters_changed: RwSignal::new(0),
            fleet: RwSignal::new(snapshot.fleet.clone()),
            status: RwSignal::new(snapshot.status.clone()),
            connection: RwSignal::new(Connection::Static),
            clock_offset: RwSignal::new(0),
            now: RwSignal::new(snapshot.server_time),
            seq: StoredValue::new(0),
        };
        view.load(snapshot);
        view
    }

    /// (held, overdue, expired, malformed) of the shown fleet, from the live table:
    /// updates with every row change and every clock tick.
    pub fn counts(&self) -> Counts {
        self.names.track();
        self.waiters_changed.track();
        let now = self.now.get();
        self.table.with_value(|t| t.counts(now))
    }

    /// Sessions waiting for `lock` (reactive).
    pub fn waiters_of(&self, lock: &str) -> Vec<String> {
        self.waiters_changed.track();
        self.table
            .with_value(|t| t.waiters_of(lock).map(str::to_string).collect())
    }

    /// Where the shown fleet's locks live.
    pub fn source(&self) -> String {
        let fleet = self.fleet.get();
        self.overview.with(|o| {
            o.iter()
                .find(|f| f.name == fleet)
                .map(|f| f.source.clone())
                .unwrap_or_default()
        })
    }

    /// The row signal for `name`, if the lock is shown.
    pub fn row(&self, name: &str) -> Option<ArcRwSignal<LockEntry>> {
        self.rows.with_value(|r| r.get(name).cloned())
    }

    pub fn len(&self) -> usize {
        self.table.with_value(FleetState::len)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Applies one server message; `local_now` is the browser's clock.
    pub fn receive(&self, msg: ServerMsg, local_now: Millis) -> Followup {
        match msg {
            ServerMsg::Hello { protocol, .. } if protocol != lockscope_model::PROTOCOL_VERSION => {
                return Followup::Resync(format!(
                    "server speaks protocol {protocol}, this page {}; reload the page",
                    lockscope_model::PROTOCOL_VERSION
                ));
            }
            ServerMsg::Hello { fleet, .. } => self.fleet.set(fleet),
            ServerMsg::Snapshot(snap) => {
                self.sync_clock(snap.server_time, local_now);
                self.load(snap);
                self.connection.set(Connection::Live);
            }
            ServerMsg::Delta {
                seq,
                server_time,
                events,
            } => {
                let expected = self.seq.get_value() + 1;
                if seq != expected {
                    return Followup::Resync(format!("delta {seq} arrived, expected {expected}"));
                }
                self.seq.set_value(seq);
                self.sync_clock(server_time, local_now);
                for e in events {
                    self.apply(e);
                }
            }
            ServerMsg::Status { server_time, status } => {
                self.sync_clock(server_time, local_now);
                self.status.set(status);
            }
            // A fresh snapshot follows on the same connection.
            ServerMsg::Lagged { .. } => {}
            ServerMsg::Pong { .. } => {}
            ServerMsg::Overview { fleets, .. } => self.overview.set(fleets),
            ServerMsg::Error { reason } => return Followup::Resync(reason),
        }
        Followup::None
    }

    /// Updates the offset from a ping's round trip: the server read its clock about
    /// half-way between `sent` and `received` (browser clock).
    pub fn pong(&self, sent: Millis, received: Millis, server_time: Millis) {
        self.clock_offset.set(server_time - (sent + received) / 2);
        self.tick(received);
    }

    /// Advances `now` to the browser's `local_now` on the server's clock.
    pub fn tick(&self, local_now: Millis) {
        self.now.set(local_now + self.clock_offset.get_untracked());
    }

    /// Coarse offset from a one-way message, used until a ping refines it.
    fn sync_clock(&self, server_time: Millis, local_now: Millis) {
        if self.clock_offset.get_untracked() == 0 {
            self.clock_offset.set(server_time - local_now);
        }
        self.tick(local_now);
    }

    fn load(&self, snap: Snapshot) {
        self.seq.set_value(snap.seq);
        self.fleet.set(snap.fleet);
        self.status.set(snap.status);
        self.apply(FleetEvent::Reset {
            revision: snap.revision,
            locks: snap.locks,
            waiters: snap.waiters,
        });
    }

    fn apply(&self, event: FleetEvent) {
        let changes = self.table.try_update_value(|t| t.apply(event)).unwrap_or_default();
        let mut names_changed = false;
        let mut waiters_changed = false;
        for change in changes {
            match change {
                FleetEvent::Upsert(entry) => {
                    if let Some(row) = self.row(&entry.name) {
                        row.set(entry);
                    } else {
                        let name = entry.name.clone();
                        self.rows.update_value(|r| {
                            r.insert(name, ArcRwSignal::new(entry));
                        });
                        names_changed = true;
                    }
                }
                FleetEvent::Remove { name, .. } => {
                    self.rows.update_value(|r| {
                        r.remove(&name);
                    });
                    names_changed = true;
                }
                FleetEvent::Waiting(_) | FleetEvent::StoppedWaiting(_) => waiters_changed = true,
                FleetEvent::Reset { .. } => unreachable!("the reducer never returns a reset"),
            }
        }
        if waiters_changed {
            self.waiters_changed.update(|n| *n += 1);
        }
        if names_changed {
            let names = self.table.with_value(|t| t.locks().map(|e| e.name.clone()).collect());
            self.names.set(names);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(name: &str, revision: i64) -> LockEntry {
        LockEntry::from_stored(name.into(), revision, revision, b"garbage")
    }

    fn snapshot(seq: u64, locks: Vec<LockEntry>) -> Snapshot {
        Snapshot {
            fleet: "f".into(),
            seq,
            server_time: 1_000,
            revision: 9,
            status: StoreStatus::Live { since: 1 },
            locks,
            waiters: vec![],
        }
    }

    fn page(snapshot: Snapshot) -> Page {
        Page {
            snapshot,
            fleets: vec![],
        }
    }

    fn delta(seq: u64, events: Vec<FleetEvent>) -> ServerMsg {
        ServerMsg::Delta {
            seq,
            server_time: 2_000,
            events,
        }
    }

    #[test]
    fn a_heartbeat_touches_one_row_signal_and_not_the_row_list() {
        let owner = Owner::new();
        owner.with(|| {
            let v = LiveView::new(page(snapshot(3, vec![entry("a", 1), entry("b", 2)])));
            assert_eq!(v.names.get_untracked(), vec!["a", "b"]);
            let a_before = v.row("a").unwrap();
            let names_before = v.names.get_untracked();
            assert_eq!(
                v.receive(delta(4, vec![FleetEvent::Upsert(entry("b", 5))]), 1_500),
                Followup::None
            );
            assert_eq!(v.row("b").unwrap().get_untracked().revision, 5);
            assert_eq!(a_before, v.row("a").unwrap(), "row a keeps its signal");
            assert_eq!(v.names.get_untracked(), names_before);
        });
    }

    #[test]
    fn deltas_add_and_remove_rows_and_gaps_force_a_resync() {
        let owner = Owner::new();
        owner.with(|| {
            let v = LiveView::new(page(snapshot(3, vec![entry("a", 1)])));
            v.receive(delta(4, vec![FleetEvent::Upsert(entry("c", 6))]), 1_500);
            v.receive(
                delta(
                    5,
                    vec![FleetEvent::Remove {
                        name: "a".into(),
                        revision: 7,
                    }],
                ),
                1_500,
            );
            assert_eq!(v.names.get_untracked(), vec!["c"]);
            assert!(v.row("a").is_none());
            assert!(matches!(v.receive(delta(7, vec![]), 1_500), Followup::Resync(_)));
            // A fresh snapshot after a lag replaces the table.
            v.receive(ServerMsg::Snapshot(snapshot(20, vec![entry("z", 30)])), 1_500);
            assert_eq!(v.names.get_untracked(), vec!["z"]);
            assert_eq!(v.receive(delta(21, vec![]), 1_500), Followup::None);
            assert_eq!(v.connection.get_untracked(), Connection::Live);
        });
    }

    #[test]
    fn waiters_are_followed_per_lock() {
        let owner = Owner::new();
        owner.with(|| {
            let v = LiveView::new(page(snapshot(1, vec![entry("a", 1)])));
            let w = |s: &str| lockscope_model::Waiter {
                lock: "a".into(),
                session: s.into(),
            };
            v.receive(
                delta(2, vec![FleetEvent::Waiting(w("s1")), FleetEvent::Waiting(w("s2"))]),
                0,
            );
            assert_eq!(v.waiters_of("a"), vec!["s1", "s2"]);
            v.receive(delta(3, vec![FleetEvent::StoppedWaiting(w("s1"))]), 0);
            assert_eq!(v.waiters_of("a"), vec!["s2"]);
            assert_eq!(v.counts().waiters, 1);
        });
    }

    #[test]
    fn clock_offset_comes_from_the_server() {
        let owner = Owner::new();
        owner.with(|| {
            let v = LiveView::new(page(snapshot(1, vec![])));
            // Browser clock 400 ms behind the server, 100 ms round trip.
            v.pong(10_000, 10_100, 10_450);
            assert_eq!(v.clock_offset.get_untracked(), 400);
            v.tick(20_000);
            assert_eq!(v.now.get_untracked(), 20_400);
        });
    }

    #[test]
    fn wrong_protocol_is_refused() {
        let owner = Owner::new();
        owner.with(|| {
            let v = LiveView::new(page(snapshot(1, vec![])));
            let hello = ServerMsg::Hello {
                protocol: 999,
                server_version: "x".into(),
                fleet: "f".into(),
            };
            assert!(matches!(v.receive(hello, 0), Followup::Resync(_)));
        });
    }
}
