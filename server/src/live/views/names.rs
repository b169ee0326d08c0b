//! Windows by name read from the table itself: over a large fleet, an
//! unfiltered view sorted by name, at any offset, needs no index of its own —
//! the table (`FleetState`'s locks, a B-tree by name) is that order. Its window
//! is found by stepping through the table from a **cursor**: a name and how many
//! locks sort before it. A lock that comes or goes before the cursor's name
//! moves its count by one (a comparison per event, no lookup), so the next read
//! steps from there to the window's offset (a few locks when the offset did not
//! move), never from an end of the fleet. A new window starts from the nearest
//! of the order's two ends and the cursors already kept (those of the other
//! such windows, and of the last one dropped), so that a page's websocket
//! reuses the walk its server render made. Nothing is kept per lock.
//!
//! A view that is near the top of the order is served by a top instead
//! ([`super::top`]), as before; a list API page (a cursor after a key) keeps
//! an index of its own ([`super::index`]).

use std::sync::Arc;

use lockscope_model::view::{Filter, SortKey, ViewSpec};
use lockscope_model::{FleetState, LockEntry};

use super::index::WindowNow;
use super::{Meta, NameMap, SubId, Views};

/// Fleets of this many locks or more serve unfiltered by-name windows from the
/// table: below it an index of its own is built on the hub task in a few
/// milliseconds (as for selections, [`super::SELECT_FROM`]), and the views of
/// small fleets stay as they were.
pub const NAME_WINDOWS_FROM: usize = super::SELECT_FROM;

/// A name and how many held locks sort before it (the name itself need not be
/// held): kept true as locks come and go.
#[derive(Clone, Debug)]
pub(super) struct Cursor {
    name: Arc<str>,
    rank: u64,
}

impl Cursor {
    /// Follows lock `name` coming (`came`) or going (`!came`).
    fn follow(&mut self, name: &str, came: bool) {
        if name < &*self.name {
            self.rank = if came {
                self.rank + 1
            } else {
                self.rank.saturating_sub(1)
            };
        }
    }
}

/// One subscriber's window by name, read from the table.
#[derive(Debug, Default)]
pub(super) struct NameWindow {
    /// Where the last read started (`None`: nothing read yet).
    cursor: Option<Cursor>,
    /// The first and last names of the last read, in name order: a change to a
    /// lock between them changes the window's rows.
    span: Option<(Arc<str>, Arc<str>)>,
    /// Something that may change the window happened since the last read.
    pub(super) touched: bool,
    /// Locks the last read stepped over before the window's first row.
    pub(super) stepped: u64,
}

impl NameWindow {
    fn starting_at(cursor: Option<Cursor>) -> NameWindow {
        NameWindow {
            cursor,
            touched: true,
            ..NameWindow::default()
        }
    }

    /// Follows lock `name` coming, going (`Some(came)`) or changing (`None`).
    fn follow(&mut self, name: &str, came: Option<bool>) {
        match came {
            Some(came) => {
                // The total moves, and with it a window clamped at the end or read backwards.
                self.touched = true;
                if let Some(c) = &mut self.cursor {
                    c.follow(name, came);
                }
            }
            None => {
                let within = |(first, last): &(Arc<str>, Arc<str>)| **first <= *name && *name <= **last;
                if self.span.as_ref().is_some_and(within) {
                    self.touched = true;
                }
            }
        }
    }

    /// The window of `spec` (by name, unfiltered) in `state` now; names shared
    /// with `meta`.
    pub(super) fn window(&mut self, state: &FleetState, spec: &ViewSpec, meta: &NameMap<Meta>) -> WindowNow {
        let total = state.len() as u64;
        let limit = spec.limit as u64;
        // As an index would give it (`super::index::window_of`): an offset past
        // the end shows the last rows; a reversed view reads from the end.
        let offset = spec.offset.min(total.saturating_sub(limit));
        let end = (offset + limit).min(total);
        let start = if spec.sort.reverse { total - end } else { offset };
        let count = (end - offset) as usize;
        let shared = |e: &LockEntry| {
            debug_assert!(meta.contains_key(e.name.as_str()), "{} is held but not placed", e.name);
            meta.get_key_value(e.name.as_str())
                .map_or_else(|| Arc::from(e.name.as_str()), |(n, _)| n.clone())
        };
        let mut names: Vec<Arc<str>> = Vec::with_capacity(count);
        if count > 0 {
            let first = self.seek(state, start);
            let rows = std::iter::once(first).chain(state.locks_after(&first.name));
            names.extend(rows.take(count).map(shared));
        }
        self.span = names.first().zip(names.last()).map(|(f, l)| (f.clone(), l.clone()));
        if let Some(first) = names.first() {
            self.cursor = Some(Cursor {
                name: first.clone(),
                rank: start,
            });
        }
        self.touched = false;
        if spec.sort.reverse {
            names.reverse();
        }
        WindowNow { total, offset, names }
    }

    /// The lock at position `start` (< the table's size) in name order, reached
    /// from the nearest of the order's ends and the cursor.
    fn seek<'a>(&mut self, state: &'a FleetState, start: u64) -> &'a LockEntry {
        let total = state.len() as u64;
        debug_assert!(start < total);
        let front = start;
        let back = total - 1 - start;
        let from_cursor = self.cursor.as_ref().map(|c| {
            let rank = c.rank.min(total);
            (c.name.clone(), rank, start.abs_diff(rank) - u64::from(start < rank))
        });
        let found = match from_cursor {
            Some((name, rank, steps)) if steps < front.min(back) => {
                self.stepped = steps;
                let found = if start >= rank {
                    // The locks from the cursor's name on start at its rank.
                    let mut from = state.get(&name).into_iter().chain(state.locks_after(&name));
                    from.nth(steps as usize)
                } else {
                    state.locks_before_rev(&name).nth(steps as usize)
                };
                // (The same lock, borrowed from the table alone.)
                found.and_then(|e| state.get(&e.name))
            }
            _ if front <= back => {
                self.stepped = front;
                state.locks().nth(front as usize)
            }
            _ => {
                self.stepped = back;
                state.locks_under("").rev().nth(back as usize)
            }
        };
        found.unwrap_or_else(|| {
            debug_assert!(false, "a cursor's rank drifted from the table");
            self.stepped = front;
            state.locks().nth(front as usize).expect("start is within the table")
        })
    }
}

impl Views {
    /// Whether `spec` (no list cursor) is read from the table: by name,
    /// unfiltered, over a fleet of [`NAME_WINDOWS_FROM`] locks or more.
    pub(super) fn names_serve(&self, spec: &ViewSpec) -> bool {
        spec.sort.key == SortKey::Name && spec.filter == Filter::default() && self.meta.len() >= self.names_from
    }

    /// A new window by name for `spec`, its cursor the kept one nearest its start.
    pub(super) fn name_window(&self, spec: &ViewSpec) -> NameWindow {
        let total = self.meta.len() as u64;
        let limit = spec.limit as u64;
        let offset = spec.offset.min(total.saturating_sub(limit));
        let start = match spec.sort.reverse {
            true => total - (offset + limit).min(total),
            false => offset,
        };
        let kept = self.names.values().filter_map(|w| w.cursor.as_ref());
        let nearest = kept
            .chain(self.name_spare.as_ref())
            .min_by_key(|c| c.rank.abs_diff(start))
            .cloned();
        NameWindow::starting_at(nearest)
    }

    /// Ends subscriber `id`'s window by name, if it has one; its cursor is kept
    /// (followed like the others) for the next new window.
    pub(super) fn drop_name_window(&mut self, id: SubId) {
        if let Some(w) = self.names.remove(&id) {
            if let Some(c) = w.cursor {
                self.name_spare = Some(c);
            }
        }
    }

    /// Follows lock `name` coming, going (`Some(came)`) or changing (`None`) in
    /// every window by name and the spare cursor.
    pub(super) fn follow_names(&mut self, name: &str, came: Option<bool>) {
        for w in self.names.values_mut() {
            w.follow(name, came);
        }
        if let (Some(c), Some(came)) = (&mut self.name_spare, came) {
            c.follow(name, came);
        }
    }
}
