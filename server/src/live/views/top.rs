//! Top windows: over a large fleet, a view whose window lies near the top of its
//! order (offset + limit at most [`TOP_ROWS`]) keeps only the **first rows** of
//! that order — the locks its filter takes, first in the view's direction — not
//! an index of the whole fleet. They are found by one pass over the locks that
//! keeps the smallest keys in a bounded heap (O(n log k)), one pass for every top
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
use std::collections::{BinaryHeap, HashMap};
use std::sync::Arc;

use lockscope_model::time::Millis;
use lockscope_model::view::{Filter, Sort, SortKey, ViewSpec};
use lockscope_model::FleetState;

use super::index::{Key, WindowNow};
use super::{Meta, Views};

mod walk;

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
    users: usize,
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

/// One stale top's heap during a pass ([`Views::fill_tops`]).
struct Fill<'m> {
    /// Its place in the list of stale tops.
    at: usize,
    sort: Sort,
    cap: usize,
    heap: BinaryHeap<Ranked<'m>>,
}

impl<'m> Fill<'m> {
    /// Keeps `(a, b, rank)` if it is among the first `cap` keys offered. The
    /// rank (the lock's place in name order) stands for its name, so keys that
    /// tie on their position (a fence or expiry most locks share) are told
    /// apart by one integer comparison, never by comparing names.
    fn offer(&mut self, a: i64, b: i64, rank: u64, name: &'m Arc<str>) {
        let key = Ranked(a, b, rank, name, self.sort.reverse);
        if self.heap.len() < self.cap {
            self.heap.push(key);
            return;
        }
        let mut last = self.heap.peek_mut().expect("cap is at least 1");
        if key < *last {
            // Replaces the last kept; sifted down as `last` drops.
            *last = key;
        }
    }
}

/// A filter, its stale tops' heaps, and how many locks it takes (counted by
/// the pass).
type Group<'f, 'm> = (&'f Filter, Vec<Fill<'m>>, usize);

/// Reads `locks` (each with its rank in name order) once for `groups`: each
/// heap keeps its top's first keys.
fn fill_pass<'m>(locks: impl Iterator<Item = (u64, &'m Arc<str>, &'m Meta)>, groups: &mut [Group<'_, 'm>]) {
    for (rank, name, meta) in locks {
        // Each position computed once per lock, whatever the tops reading it.
        let mut positions: [Option<(i64, i64)>; SortKey::ALL.len()] = Default::default();
        for (filter, fills, matched) in groups.iter_mut() {
            if !meta.takes(name, filter) {
                continue;
            }
            *matched += 1;
            for fill in fills.iter_mut() {
                let (a, b) = *positions[fill.sort.key as usize].get_or_insert_with(|| meta.position(fill.sort.key));
                fill.offer(a, b, rank, name);
            }
        }
    }
}

/// A key in a bounded heap whose top is the last in view order: its position,
/// its lock's rank in name order (which orders as the name does), the name,
/// and whether the view is reversed.
struct Ranked<'m>(i64, i64, u64, &'m Arc<str>, bool);

impl PartialEq for Ranked<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other).is_eq()
    }
}
impl Eq for Ranked<'_> {}
impl PartialOrd for Ranked<'_> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Ranked<'_> {
    fn cmp(&self, other: &Self) -> Ordering {
        let o = (self.0, self.1, self.2).cmp(&(other.0, other.1, other.2));
        if self.4 {
            o.reverse()
        } else {
            o
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
    }

    /// Fills every stale top: those an existing order serves by walking it
    /// ([`walk`]), then, with `pass`, the others in one pass over the locks
    /// (each half of them on its own thread): each keeps its first keys in a
    /// heap bounded by its size, so the pass is O(n log k) and sorts nothing. Whether tops are left stale
    /// for a pass (never with `pass`).
    pub(super) fn fill_tops(&mut self, state: &FleetState, pass: bool) -> bool {
        self.walk_tops(state);
        let stale: Vec<TopSpec> = self
            .tops
            .iter()
            .filter(|(_, t)| t.stale)
            .map(|(k, _)| k.clone())
            .collect();
        if stale.is_empty() || !pass {
            return !stale.is_empty();
        }
        self.top_passes += 1;
        let caps: Vec<usize> = stale.iter().map(|spec| self.tops[spec].cap()).collect();
        // Grouped by filter (in the order of `stale`, the same for both halves),
        // so each lock is matched once per distinct filter.
        let groups = || {
            let mut groups: Vec<Group> = Vec::new();
            let mut at: HashMap<&Filter, usize> = HashMap::new();
            for (i, spec) in stale.iter().enumerate() {
                let fill = Fill {
                    at: i,
                    sort: spec.sort,
                    cap: caps[i],
                    heap: BinaryHeap::new(),
                };
                let g = *at.entry(&spec.filter).or_insert_with(|| {
                    groups.push((&spec.filter, Vec::new(), 0));
                    groups.len() - 1
                });
                groups[g].1.push(fill);
            }
            groups
        };
        // The locks in name order (their rank there stands for their name in
        // the heaps), in two halves, the second read from the end on another
        // thread (the pass is what a burst of new views waits for); each
        // half's heaps are merged after.
        let meta = &self.meta;
        let (n, half) = (state.len(), state.len() / 2);
        let ranked = |(rank, e): (usize, &lockscope_model::LockEntry)| {
            let (name, m) = meta.get_key_value(e.name.as_str())?;
            Some((rank as u64, name, m))
        };
        let (mut left, right) = std::thread::scope(|scope| {
            let right = scope.spawn(|| {
                let mut right = groups();
                let from_end = state.locks_under("").rev().take(n - half);
                fill_pass(
                    from_end.enumerate().map(|(i, e)| (n - 1 - i, e)).filter_map(ranked),
                    &mut right,
                );
                right
            });
            let mut left = groups();
            fill_pass(
                state.locks_under("").take(half).enumerate().filter_map(ranked),
                &mut left,
            );
            (left, right.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
        });
        for (l, r) in left.iter_mut().zip(right) {
            l.2 += r.2;
            for (into, from) in l.1.iter_mut().zip(r.1) {
                for Ranked(a, b, rank, name, _) in from.heap.into_vec() {
                    into.offer(a, b, rank, name);
                }
            }
        }
        let mut heaps: Vec<Option<BinaryHeap<Ranked>>> = stale.iter().map(|_| None).collect();
        let mut matched = vec![0usize; stale.len()];
        for (_, fills, n) in left {
            for fill in fills {
                matched[fill.at] = n;
                heaps[fill.at] = Some(fill.heap);
            }
        }
        let heaps = heaps.into_iter().map(|h| h.expect("every stale top is in a group"));
        for ((spec, heap), matched) in stale.iter().zip(heaps).zip(matched) {
            if let Some(c) = self.filters.get_mut(&spec.filter).filter(|c| !c.counted) {
                (c.count, c.counted) = (matched as u64, true);
            }
            let top = self.tops.get_mut(spec).expect("listed above");
            top.keys = (heap.into_sorted_vec().into_iter())
                .map(|Ranked(a, b, _, name, _)| (a, b, name.clone()))
                .collect();
            top.complete = matched <= top.cap();
            top.stale = false;
            top.walk_failed = false;
            top.generation += 1;
        }
        false
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
