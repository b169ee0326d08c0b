//! Top windows: over a large fleet, a view whose window lies near the top of its
//! order (offset + limit at most [`TOP_ROWS`]) keeps only the **first rows** of
//! that order — the locks its filter takes, first in the view's direction — not
//! an index of the whole fleet. They are found by one pass over the locks that
//! keeps the smallest keys in a bounded buffer (O(n)), one pass for every top
//! made or refilled in the same turn, so a new view's first frame never waits
//! for a sort of the fleet, and a top holds a few hundred keys, not a million.
//!
//! A top whose order already exists in the hub (by name, severity, age,
//! waiters) is instead filled by walking that order ([`walk`]), before and
//! without the pass: its first frame waits for no pass at all.
//!
//! Then a top follows the locks as they change: a lock its filter takes that
//! lands before the last row held is inserted (the last one falls off past the
//! slack), one that leaves is removed, and only when fewer rows than its viewers
//! need are left is the pass repeated. Its total is the filter's count kept for
//! selections ([`super::select`]).

use std::cmp::Ordering;
use std::sync::Arc;

use lockscope_model::time::Millis;
use lockscope_model::view::{Filter, Sort, ViewSpec};
use lockscope_model::FleetState;

use super::index::{Key, WindowNow};
use super::{Meta, Views};

mod pass;
mod walk;

pub(super) use pass::Pass;
pub use pass::PASS_SLICE;
pub use walk::WALK_LIMIT;

/// The deepest window (offset + limit, in rows) a top serves. A person pages
/// a live table a few screens down at most; deeper windows are rare, and are
/// served by a selection or an index of their own as before. Each top keeps
/// twice its viewers' depth, so this also bounds a top's size (2,000 keys).
pub const TOP_ROWS: u64 = 1_000;

/// A pass owed is made once no subscriber took a top for this long: the
/// subscribes of a burst of new views arrive a few milliseconds apart (one per
/// connection), so the views an existing order serves are all answered before
/// the pass, and the others share one pass.
pub const PASS_QUIET_MS: Millis = 25;

/// ...and at the latest this long after it was first owed, so that a steady
/// trickle of new views never holds it back.
pub const PASS_WAIT_MS: Millis = 200;

/// What a top orders: the locks a filter takes, by a sort key, in one direction.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct TopSpec {
    pub(super) filter: Filter,
    pub(super) sort: Sort,
}

impl TopSpec {
    pub(super) fn of(spec: &ViewSpec) -> TopSpec {
        TopSpec {
            filter: spec.filter.clone(),
            sort: spec.sort,
        }
    }
}

/// The first keys of one order.
pub(super) struct Top {
    /// In view order (a reversed view's largest keys first).
    keys: Vec<Key>,
    /// The rows its viewers need (the largest offset + limit among them,
    /// rounded up to a power of two, so that a viewer paging down a little
    /// costs no pass); it keeps up to twice that, so that a few locks leaving
    /// cost no pass either.
    want: usize,
    /// `keys` holds every lock the filter takes.
    complete: bool,
    /// To be (re)filled by [`Views::fill_tops`] before it is read.
    pub(super) stale: bool,
    /// Bumped whenever a held key comes, goes, or changes.
    pub(super) generation: u64,
    pub(super) users: usize,
    /// Its last walk was abandoned ([`walk`]): the pass fills it.
    walk_failed: bool,
}

/// `a` against `b` in a view's order.
fn view_cmp(a: (i64, i64, &str), b: &Key, reverse: bool) -> Ordering {
    let o = a.cmp(&(b.0, b.1, &*b.2));
    if reverse {
        o.reverse()
    } else {
        o
    }
}

impl Top {
    fn cap(&self) -> usize {
        2 * self.want
    }

    /// Follows lock `name` from `old` to `new` (its positions, where the filter
    /// takes it).
    pub(super) fn follow(&mut self, reverse: bool, name: &Arc<str>, old: Option<(i64, i64)>, new: Option<(i64, i64)>) {
        if self.stale {
            // The pass will see it as it is then.
            return;
        }
        let mut changed = false;
        if let Some((a, b)) = old {
            if let Ok(i) = self.position(a, b, name, reverse) {
                self.keys.remove(i);
                changed = true;
            }
        }
        if let Some((a, b)) = new {
            if let Err(i) = self.position(a, b, name, reverse) {
                // Past the last key held, others not held may come first.
                if i < self.keys.len() || self.complete {
                    self.keys.insert(i, (a, b, name.clone()));
                    changed = true;
                    if self.keys.len() > self.cap() {
                        self.keys.pop();
                        self.complete = false;
                    }
                }
            }
        }
        if !self.complete && self.keys.len() < self.want {
            self.stale = true;
        }
        if changed {
            self.generation += 1;
        }
    }

    fn position(&self, a: i64, b: i64, name: &str, reverse: bool) -> Result<usize, usize> {
        // A top holds a few thousand of a fleet's locks, so most locks that
        // change are past its last key: one comparison tells, not a search
        // (whose comparisons of tied keys compare names).
        match self.keys.last().map(|k| view_cmp((a, b, name), k, reverse)) {
            None => return Err(0),
            Some(Ordering::Greater) => return Err(self.keys.len()),
            Some(Ordering::Equal) => return Ok(self.keys.len() - 1),
            Some(Ordering::Less) => {}
        }
        // `k` against the key sought: the reverse of the key against `k`.
        self.keys
            .binary_search_by(|k| view_cmp((a, b, name), k, reverse).reverse())
    }

    /// `spec`'s window, `total` rows in all (the top is filled).
    pub(super) fn window(&self, spec: &ViewSpec, total: u64) -> WindowNow {
        let limit = spec.limit as usize;
        let offset = spec.offset.min(total.saturating_sub(limit as u64));
        let end = (offset as usize + limit).min(self.keys.len());
        let start = (offset as usize).min(end);
        WindowNow {
            total,
            offset,
            names: self.keys[start..end].iter().map(|k| k.2.clone()).collect(),
        }
    }
}

impl Views {
    /// Whether `spec` is served by a top: a window near the top of its order
    /// over a large fleet (not the default view, whose full index always exists).
    pub(super) fn tops_serve(&self, spec: &ViewSpec) -> bool {
        self.meta.len() >= self.top_from
            && spec.offset.saturating_add(spec.limit as u64) <= TOP_ROWS
            && super::index::IndexSpec::of(spec) != super::index::IndexSpec::default_view()
    }

    /// One more user of `spec`'s top (made, or made deeper, stale: filled
    /// before it is read); counts its filter.
    pub(super) fn attach_top(&mut self, spec: &ViewSpec) -> TopSpec {
        let key = TopSpec::of(spec);
        let need = ((spec.offset + spec.limit as u64) as usize).next_power_of_two();
        self.count_filter_later(&spec.filter);
        let top = self.tops.entry(key.clone()).or_insert_with(|| Top {
            keys: Vec::new(),
            want: need,
            complete: false,
            stale: true,
            generation: 1,
            users: 0,
            walk_failed: false,
        });
        top.users += 1;
        if need > top.want {
            top.want = need;
            top.stale |= !top.complete;
        }
        key
    }

    pub(super) fn detach_top(&mut self, key: &TopSpec) {
        if let Some(top) = self.tops.get_mut(key) {
            top.users -= 1;
            if top.users == 0 {
                self.tops.remove(key);
            }
        }
        self.uncount_filter(&key.filter);
    }

    /// Follows lock `name` from `old` to `new` (either absent) in every top.
    pub(super) fn follow_tops(&mut self, name: &Arc<str>, old: Option<&Meta>, new: Option<&Meta>) {
        for (spec, top) in self.tops.iter_mut() {
            let at = |m: &Meta| m.takes(name, &spec.filter).then(|| m.position(spec.sort.key));
            top.follow(spec.sort.reverse, name, old.and_then(at), new.and_then(at));
        }
        if let Some(run) = &mut self.pass.run {
            run.follow(name, old, new);
        }
    }

    /// Fills every stale top: those an existing order serves by walking it
    /// ([`walk`]), then, with `pass`, the others by a slice of the pass over
    /// the locks ([`pass`]), which a later call goes on with. Whether tops are
    /// left stale, or a pass is under way.
    pub(super) fn fill_tops(&mut self, state: &FleetState, pass: bool) -> bool {
        self.walk_tops(state);
        if pass && self.pass_slice(state) {
            return true;
        }
        self.pass.run.is_some() || self.tops.values().any(|t| t.stale)
    }

    /// Whether `spec`'s top is filled (`None`: nobody looks at it).
    pub(super) fn top_ready(&self, key: &TopSpec) -> bool {
        self.tops.get(key).is_some_and(|t| !t.stale)
    }

    /// The window of a top view (for tests and recounts), if it is filled.
    pub(super) fn top_names(&self, spec: &ViewSpec) -> Option<WindowNow> {
        let top = self.tops.get(&TopSpec::of(spec)).filter(|t| !t.stale)?;
        if top.want < (spec.offset + spec.limit as u64) as usize {
            return None;
        }
        let total = self.filters.get(&spec.filter)?.count;
        Some(top.window(spec, total))
    }
}

#[cfg(test)]
impl Top {
    pub(super) fn len(&self) -> usize {
        self.keys.len()
    }

    pub(super) fn want(&self) -> usize {
        self.want
    }
}
