//! The browser's copy of one fleet's view.
//!
//! The rows are a [`Window`] (the model's window reducer, the same one the tests
//! check the hub against) plus one signal per row: each frame's changes decide
//! which row signals are set, created or dropped, so one changed lock re-renders
//! one row, and the keyed list only moves, adds or removes the rows whose place
//! changed. Nothing here depends on the fleet's size: it holds one window.
//!
//! In the browser the frames are batched ([`LiveView::batch_frames`]): each one
//! is applied to the window as it arrives (so a frame that does not fit is
//! caught at once), and what they changed reaches the signals, and so the
//! document, once per animation frame ([`LiveView::publish`]). A row that
//! entered and left the window between two paints is never built.

use std::collections::HashMap;

use leptos::prelude::*;
use lockscope_model::time::Millis;
use lockscope_model::view::{Aggregates, ViewSpec, WindowRow};
use lockscope_model::{Counts, FleetSummary, Page, Screen, ServerMsg, StoreStatus, Window};

mod publish;

use publish::Unpublished;

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
    unpublished: StoredValue<Unpublished>,
    /// Whether frames wait for [`LiveView::publish`] (the browser's animation
    /// frame) to reach the signals; otherwise each is published as it is applied.
    batching: StoredValue<bool>,
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
            unpublished: StoredValue::new(Unpublished::default()),
            batching: StoredValue::new(false),
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

    /// What a new connection asks for first: the view on screen (with its
    /// request id), or the lock or sessions this page watches
    /// ([`crate::boot::first_request`]).
    pub fn first_request(&self) -> Option<lockscope_model::ClientMsg> {
        let view = self.view.get_untracked();
        self.screen
            .with_untracked(|s| crate::boot::first_request(s, &view, self.view_id.get_value()))
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
                self.live_once_shown();
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
}

#[cfg(test)]
mod tests;
