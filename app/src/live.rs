//! The browser's copy of one fleet's view.
//!
//! The rows are a [`Window`] (the model's window reducer, the same one the tests
//! check the hub against) plus one signal per row: each frame's changes decide
//! which row signals are set, created or dropped, so one changed lock re-renders
//! one row, and the keyed list only moves, adds or removes the rows whose place
//! changed. Nothing here depends on the fleet's size: it holds one window.

use std::collections::HashMap;

use leptos::prelude::*;
use lockscope_model::time::Millis;
use lockscope_model::view::{Aggregates, ViewSpec, WindowRow};
use lockscope_model::{Counts, FleetSummary, Page, Screen, ServerMsg, StoreStatus, Watch, Window};

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
    /// Acknowledge frame `seq` once it is on screen.
    Ack(u64),
    /// Something does not add up (a protocol we do not speak, a frame that does not
    /// fit our window): drop the connection and start over from a fresh window.
    Resync(String),
}

/// A frame's data counts as late, and the page says so, past this.
pub const BEHIND_AFTER_MS: i64 = 250;
/// A late frame brought the page up to date; the page keeps saying it was behind
/// for this long, and longer only if more late frames follow.
pub const BEHIND_SHOWN_MS: i64 = 2_000;

/// Reactive state of the page. `Copy`: every field is an arena handle.
#[derive(Clone, Copy)]
pub struct LiveView {
    window: StoredValue<Window>,
    /// One signal per row, shared with that row's view: reference-counted, so a
    /// removed row's signal lives until its view is gone.
    rows: StoredValue<HashMap<String, ArcRwSignal<WindowRow>>>,
    /// Row names in window order; the keyed list iterates this.
    pub order: RwSignal<Vec<String>>,
    /// Rows matching the view, and the window's first row among them.
    pub total: RwSignal<u64>,
    pub offset: RwSignal<u64>,
    pub aggregates: RwSignal<Aggregates>,
    /// The view on screen (and in the URL).
    pub view: RwSignal<ViewSpec>,
    /// Numbers the view requests; frames say which one they answer.
    view_id: StoredValue<u32>,
    pub fleet: RwSignal<String>,
    /// Every fleet's headline numbers.
    pub overview: RwSignal<Vec<FleetSummary>>,
    pub status: RwSignal<StoreStatus>,
    pub connection: RwSignal<Connection>,
    /// Why the URL's view was not usable, if it was not.
    pub view_error: RwSignal<Option<String>>,
    /// Server time minus browser time, in ms (estimated from pings).
    pub clock_offset: RwSignal<i64>,
    /// Whether `clock_offset` has been estimated at all (0 is a valid offset).
    clock_known: StoredValue<bool>,
    /// The current time on the server's clock; ticks once a second in the browser.
    pub now: RwSignal<Millis>,
    /// How old the last frame's oldest change was when it reached us (ms).
    pub lag_ms: RwSignal<i64>,
    /// When the last frame arrived (server clock).
    pub last_frame_at: RwSignal<Millis>,
    /// Which page this is, with the detail or sessions data it shows.
    pub screen: RwSignal<Screen>,
}

impl LiveView {
    /// The state as the server rendered it.
    pub fn new(page: Page) -> LiveView {
        let now = page.frame.as_ref().map_or(page.server_time, |f| f.server_time);
        let view = LiveView {
            window: StoredValue::new(Window::default()),
            rows: StoredValue::new(HashMap::new()),
            order: RwSignal::new(Vec::new()),
            total: RwSignal::new(0),
            offset: RwSignal::new(0),
            aggregates: RwSignal::new(Aggregates::default()),
            view: RwSignal::new(page.view),
            view_id: StoredValue::new(0),
            fleet: RwSignal::new(page.fleet),
            overview: RwSignal::new(page.fleets),
            status: RwSignal::new(page.status),
            connection: RwSignal::new(Connection::Static),
            view_error: RwSignal::new(page.view_error),
            clock_offset: RwSignal::new(0),
            clock_known: StoredValue::new(false),
            now: RwSignal::new(now),
            lag_ms: RwSignal::new(0),
            last_frame_at: RwSignal::new(now),
            screen: RwSignal::new(page.screen),
        };
        if let Some(frame) = page.frame {
            // The server rendered this very frame; it cannot fail to apply.
            let _ = view.apply_frame(frame);
        }
        view
    }

    /// Counts of the fleet on screen: the view's aggregates, with `held` taken
    /// from the window's own total when the view shows every lock, so the
    /// overview never disagrees with the table below it.
    pub fn counts(&self) -> Counts {
        let mut c = self.aggregates.with(|a| a.counts);
        if self.view.with(|v| v.filter.is_empty()) {
            c.held = self.total.get();
        }
        c
    }

    /// Locks of the fleet on screen needing attention (every state but healthy).
    pub fn attention(&self) -> u64 {
        if self.has_view() {
            return self.counts().attention();
        }
        let fleet = self.fleet.get();
        self.overview
            .with(|o| o.iter().find(|f| f.name == fleet).map_or(0, |f| f.counts.attention()))
    }

    /// How far behind the page is, if it is (reactive; follows the clock): the
    /// lateness of recent frames. Once frames stop being late, or stop because
    /// nothing changes, the page is current.
    pub fn behind(&self) -> Option<i64> {
        let lag = self.lag_ms.get();
        let recent = self.now.get() - self.last_frame_at.get() < BEHIND_SHOWN_MS;
        (lag > BEHIND_AFTER_MS && recent).then_some(lag)
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

    /// The row signal for `name`, if the lock is in the window.
    pub fn row(&self, name: &str) -> Option<ArcRwSignal<WindowRow>> {
        self.rows.with_value(|r| r.get(name).cloned())
    }

    /// Rows in the window.
    pub fn len(&self) -> usize {
        self.window.with_value(Window::len)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Shows `view` from now on: returns the id to send with it.
    pub fn request(&self, view: ViewSpec) -> u32 {
        let id = self.view_id.get_value() + 1;
        self.view_id.set_value(id);
        self.view.set(view);
        id
    }

    /// What this page keeps live instead of a view (the detail and sessions
    /// pages), if it does.
    pub fn watch(&self) -> Option<Watch> {
        self.screen.with_untracked(|s| match s {
            Screen::Locks => None,
            Screen::Lock { detail } => Some(Watch::Lock {
                name: detail.name.clone(),
            }),
            Screen::Sessions { .. } => Some(Watch::Sessions),
            Screen::Audit { .. } | Screen::History { .. } | Screen::Charts { .. } | Screen::SignIn { .. } => None,
        })
    }

    /// Whether this page shows a view of the lock table (the others watch a
    /// lock or the sessions, or are not live).
    pub fn has_view(&self) -> bool {
        self.screen.with_untracked(|s| matches!(s, Screen::Locks))
    }

    /// Whether the shown fleet's store accepts admin actions (reactive: follows
    /// the overview).
    pub fn writable(&self) -> bool {
        let fleet = self.fleet.get();
        self.overview.with(|o| o.iter().any(|f| f.name == fleet && f.writable))
    }

    /// The view to ask for on a new connection, and its id.
    pub fn current_request(&self) -> (u32, ViewSpec) {
        (self.view_id.get_value(), self.view.get_untracked())
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
            ServerMsg::Window(frame) => {
                self.sync_clock(frame.server_time, local_now);
                let transit = (local_now + self.clock_offset.get_untracked() - frame.server_time).max(0);
                self.lag_ms.set(frame.waited_ms as i64 + transit);
                self.last_frame_at.set(local_now + self.clock_offset.get_untracked());
                let seq = frame.seq;
                if let Err(e) = self.apply_frame(frame) {
                    return Followup::Resync(e);
                }
                self.connection.set(Connection::Live);
                return Followup::Ack(seq);
            }
            ServerMsg::Status { server_time, status } => {
                self.sync_clock(server_time, local_now);
                self.status.set(status);
            }
            ServerMsg::Pong { .. } => {}
            ServerMsg::Overview { server_time, fleets } => {
                self.sync_clock(server_time, local_now);
                // Pages that watch instead of viewing learn the store status here.
                if !self.has_view() {
                    let fleet = self.fleet.get_untracked();
                    if let Some(f) = fleets.iter().find(|f| f.name == fleet) {
                        self.status.set(f.status.clone());
                    }
                }
                self.overview.set(fleets);
            }
            ServerMsg::Detail { server_time, detail } => {
                self.sync_clock(server_time, local_now);
                self.screen.set(Screen::Lock { detail });
                self.connection.set(Connection::Live);
            }
            ServerMsg::Sessions { server_time, sessions } => {
                self.sync_clock(server_time, local_now);
                self.screen.set(Screen::Sessions { sessions });
                self.connection.set(Connection::Live);
            }
            ServerMsg::Error { reason } => return Followup::Resync(reason),
        }
        Followup::None
    }

    /// Updates the offset from a ping's round trip: the server read its clock about
    /// half-way between `sent` and `received` (browser clock).
    pub fn pong(&self, sent: Millis, received: Millis, server_time: Millis) {
        self.clock_offset.set(server_time - (sent + received) / 2);
        self.clock_known.set_value(true);
        self.tick(received);
    }

    /// Advances `now` to the browser's `local_now` on the server's clock.
    pub fn tick(&self, local_now: Millis) {
        self.now.set(local_now + self.clock_offset.get_untracked());
    }

    /// Coarse offset from a one-way message, used until a ping refines it. The
    /// clock itself moves only by [`LiveView::tick`] (once a second) and pongs:
    /// every visible row's countdowns read it, so moving it per message would
    /// re-render every row per frame.
    fn sync_clock(&self, server_time: Millis, local_now: Millis) {
        if !self.clock_known.get_value() {
            self.clock_offset.set(server_time - local_now);
            self.clock_known.set_value(true);
            self.tick(local_now);
        }
    }

    fn apply_frame(&self, frame: lockscope_model::WindowFrame) -> Result<(), String> {
        let (total, offset) = (frame.total, frame.offset);
        let changes = self
            .window
            .try_update_value(|w| w.apply(frame))
            .unwrap_or_else(|| Err("the page is gone".into()))?;
        for name in &changes.dropped {
            self.rows.update_value(|r| {
                r.remove(name);
            });
        }
        for name in &changes.rows {
            let Some(data) = self.window.with_value(|w| w.row(name).cloned()) else {
                continue;
            };
            match self.row(name) {
                Some(sig) => sig.set(data),
                None => self.rows.update_value(|r| {
                    r.insert(name.clone(), ArcRwSignal::new(data));
                }),
            }
        }
        if changes.order {
            self.order.set(self.window.with_value(|w| w.order().to_vec()));
        }
        if self.total.get_untracked() != total {
            self.total.set(total);
        }
        if self.offset.get_untracked() != offset {
            self.offset.set(offset);
        }
        if changes.aggregates {
            self.aggregates.set(self.window.with_value(|w| w.aggregates().clone()));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lockscope_model::{LockEntry, WindowFrame};

    fn row(name: &str, revision: i64) -> WindowRow {
        WindowRow {
            entry: LockEntry::from_stored(name.into(), revision, revision, b"garbage"),
            holder: Default::default(),
            deadlock: false,
            waiters: vec![],
        }
    }

    fn frame(seq: u64, order: Option<&[&str]>, rows: Vec<WindowRow>) -> WindowFrame {
        WindowFrame {
            seq,
            view_id: 0,
            server_time: 2_000,
            waited_ms: 0,
            full: false,
            total: order.map_or(2, |o| o.len() as u64),
            offset: 0,
            order: order.map(|o| o.iter().map(|s| s.to_string()).collect()),
            rows,
            aggregates: None,
        }
    }

    fn page(order: &[&str]) -> Page {
        Page {
            fleet: "f".into(),
            frame: Some(WindowFrame {
                full: true,
                ..frame(1, Some(order), order.iter().map(|n| row(n, 1)).collect())
            }),
            ..Page::default()
        }
    }

    #[test]
    fn a_heartbeat_touches_one_row_signal_and_not_the_row_list() {
        let owner = Owner::new();
        owner.with(|| {
            let v = LiveView::new(page(&["a", "b"]));
            assert_eq!(v.order.get_untracked(), vec!["a", "b"]);
            let a_before = v.row("a").unwrap();
            assert_eq!(
                v.receive(ServerMsg::Window(frame(2, None, vec![row("b", 5)])), 1_500),
                Followup::Ack(2)
            );
            assert_eq!(v.row("b").unwrap().get_untracked().entry.revision, 5);
            assert_eq!(a_before, v.row("a").unwrap(), "row a keeps its signal");
            assert_eq!(v.order.get_untracked(), vec!["a", "b"]);
        });
    }

    #[test]
    fn rows_come_and_go_with_the_window_and_bad_frames_force_a_resync() {
        let owner = Owner::new();
        owner.with(|| {
            let v = LiveView::new(page(&["a"]));
            v.receive(ServerMsg::Window(frame(2, Some(&["c", "a"]), vec![row("c", 6)])), 1_500);
            v.receive(ServerMsg::Window(frame(3, Some(&["c"]), vec![])), 1_500);
            assert_eq!(v.order.get_untracked(), vec!["c"]);
            assert!(v.row("a").is_none());
            assert!(matches!(
                v.receive(ServerMsg::Window(frame(4, Some(&["c", "zz"]), vec![])), 1_500),
                Followup::Resync(_)
            ));
            // A new connection's first frame replaces the window.
            let full = WindowFrame {
                full: true,
                ..frame(1, Some(&["z"]), vec![row("z", 30)])
            };
            assert_eq!(v.receive(ServerMsg::Window(full), 1_500), Followup::Ack(1));
            assert_eq!(v.order.get_untracked(), vec!["z"]);
            assert_eq!(v.connection.get_untracked(), Connection::Live);
        });
    }

    #[test]
    fn the_held_count_of_an_unfiltered_view_is_its_total() {
        let owner = Owner::new();
        owner.with(|| {
            let v = LiveView::new(page(&["a", "b"]));
            assert_eq!(v.counts().held, 2);
            v.receive(ServerMsg::Window(frame(2, Some(&["a"]), vec![])), 0);
            assert_eq!(v.counts().held, 1);
        });
    }

    #[test]
    fn lag_is_the_wait_on_the_server_plus_the_trip() {
        let owner = Owner::new();
        owner.with(|| {
            let v = LiveView::new(page(&[]));
            v.pong(10_000, 10_000, 10_000); // clocks agree
            let late = WindowFrame {
                waited_ms: 900,
                server_time: 20_000,
                ..frame(2, None, vec![])
            };
            v.receive(ServerMsg::Window(late), 20_100);
            assert_eq!(v.lag_ms.get_untracked(), 1_000);
            assert_eq!(v.behind(), Some(1_000));
            // Nothing more arrives: the late frame brought the page up to date.
            v.tick(20_100 + BEHIND_SHOWN_MS);
            assert_eq!(v.behind(), None);
        });
    }

    #[test]
    fn clock_offset_comes_from_the_server() {
        let owner = Owner::new();
        owner.with(|| {
            let v = LiveView::new(page(&[]));
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
            let v = LiveView::new(page(&[]));
            let hello = ServerMsg::Hello {
                protocol: 999,
                server_version: "x".into(),
                fleet: "f".into(),
            };
            assert!(matches!(v.receive(hello, 0), Followup::Resync(_)));
        });
    }
}
