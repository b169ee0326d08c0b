//! From the window to the signals: frames applied to the
//! [`Window`](lockscope_model::Window) as they arrive, and what they changed
//! published to the row signals (so the document) at once, or once per
//! animation frame when the page batches them.

use leptos::prelude::*;
use lockscope_model::view::WindowRow;
use std::collections::HashSet;

use super::{Connection, LiveView};

/// What frames applied to the window changed that the signals do not show yet.
#[derive(Default)]
pub(super) struct Unpublished {
    /// Rows whose data changed (they may have left the window since).
    rows: HashSet<String>,
    /// Rows that left the window (they may have come back since).
    dropped: HashSet<String>,
    order: bool,
    aggregates: bool,
    /// Any frame at all (the total and offset come with every one).
    any: bool,
    /// A frame came over the socket: the page is live once it shows it.
    live: bool,
}

impl LiveView {
    /// From now on, frames reach the signals only when [`LiveView::publish`] is
    /// called (the browser calls it once per animation frame).
    pub fn batch_frames(&self) {
        self.batching.set_value(true);
    }

    /// A frame came over the socket and was applied: the page is live once its
    /// rows are on screen, not before (at the next publish when batching).
    pub(super) fn live_once_shown(&self) {
        if self.batching.get_value() {
            self.unpublished.update_value(|u| u.live = true);
        } else {
            self.connection.set(Connection::Live);
        }
    }

    pub(super) fn apply_frame(&self, frame: lockscope_model::WindowFrame) -> Result<(), String> {
        let changes = self
            .window
            .try_update_value(|w| w.apply(frame))
            .unwrap_or_else(|| Err("the page is gone".into()))?;
        self.unpublished.update_value(|u| {
            u.any = true;
            u.order |= changes.order;
            u.aggregates |= changes.aggregates;
            u.rows.extend(changes.rows);
            u.dropped.extend(changes.dropped);
        });
        if !self.batching.get_value() {
            self.publish();
        }
        Ok(())
    }

    /// Brings the signals up to the window: every frame applied since the last
    /// call, at once. Rows that left are dropped (unless they came back), rows
    /// that changed and are still in the window get their latest data, and the
    /// order is set once.
    pub fn publish(&self) {
        let Some(u) = self.unpublished.try_update_value(std::mem::take) else {
            return;
        };
        if !u.any {
            return;
        }
        // Read out of the window first: setting signals happens outside its borrow.
        let (updates, order, total, offset, aggregates) = self.window.with_value(|w| {
            let updates: Vec<(String, Option<WindowRow>)> = u
                .dropped
                .iter()
                .filter(|n| w.row(n).is_none())
                .map(|n| (n.clone(), None))
                .chain(u.rows.iter().filter_map(|n| Some((n.clone(), Some(w.row(n)?.clone())))))
                .collect();
            let order = u.order.then(|| w.order().to_vec());
            let aggregates = u.aggregates.then(|| w.aggregates().clone());
            (updates, order, w.total, w.offset, aggregates)
        });
        for (name, data) in updates {
            match (data, self.row(&name)) {
                (None, _) => self.rows.update_value(|r| {
                    r.remove(&name);
                }),
                // A full frame (a new connection's first) resends every row:
                // the rows it did not change are not drawn again.
                (Some(data), Some(sig)) => {
                    if sig.with_untracked(|d| *d != data) {
                        sig.set(data)
                    }
                }
                (Some(data), None) => self.rows.update_value(|r| {
                    r.insert(name, ArcRwSignal::new(data));
                }),
            }
        }
        if let Some(order) = order.filter(|o| self.order.with_untracked(|now| now != o)) {
            self.order.set(order);
        }
        if self.total.get_untracked() != total {
            self.total.set(total);
        }
        if self.offset.get_untracked() != offset {
            self.offset.set(offset);
        }
        if let Some(a) = aggregates {
            self.aggregates.set(a);
        }
        // (A socket that closed since is reconnecting, not live.)
        if u.live
            && matches!(
                self.connection.get_untracked(),
                Connection::Connecting | Connection::Static
            )
        {
            self.connection.set(Connection::Live);
        }
    }
}
