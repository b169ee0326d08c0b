//! The pass over the fleet that fills the tops no existing order serves
//! ([`super`]): the locks are read once, in name order, and each top keeps its
//! first keys in a heap bounded by its size (O(n log k), nothing sorted). A
//! lock's rank in name order stands for its name in the heaps, so keys that tie
//! on their position (a fence or an expiry most locks share) are told apart by
//! one integer comparison, never by comparing names.
//!
//! The pass is made in **slices** of [`PASS_SLICE`] locks per thread (two
//! threads, one slice per hub turn), so it never holds the hub for more than a
//! slice: between slices the hub applies the store's events and sends frames.
//! A lock already read that changes meanwhile is counted again at once and
//! noted; when the last slice is read, each filled top takes the noted locks as
//! they are then ([`super::Top::follow`]), so it holds what a pass made in one
//! go at that moment would.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap, HashSet};
use std::sync::Arc;

use lockscope_model::view::{Filter, Sort, SortKey};
use lockscope_model::{FleetState, LockEntry};

use super::{TopSpec, Views};
use crate::live::views::Meta;

/// Locks each of the pass's two threads reads in one slice (one hub turn): a
/// fleet of up to 2,097,152 locks is passed in one turn, a larger one in
/// slices. Measured in turn on a quiet machine at 1,000,000 locks and 200 new
/// views (release, docs/performance.md): slices of 32,768 gave first frames
/// p50 345 / max 2,530 ms and 66 viewers lagged (views that took a top while
/// the pass's 16 turns ran waited for the next pass); one slice gave
/// 297 / 1,410 ms and 17.
pub const PASS_SLICE: usize = 1 << 20;

/// The tops' pass: the one under way, if any, and how it is sliced.
pub(in crate::live::views) struct Pass {
    pub(in crate::live::views) run: Option<Run>,
    /// Locks per thread per slice ([`PASS_SLICE`]; tests use less).
    pub(in crate::live::views) slice: usize,
}

impl Default for Pass {
    fn default() -> Self {
        Pass {
            run: None,
            slice: PASS_SLICE,
        }
    }
}

/// A pass under way.
pub(in crate::live::views) struct Run {
    /// The tops it fills, with the size each was asked for.
    specs: Vec<(TopSpec, usize)>,
    /// Per filter, its tops' heaps: one set per thread, merged at the end.
    halves: [Vec<Group>; 2],
    /// The last lock read: every lock up to it in name order has been read.
    cursor: Option<Arc<str>>,
    /// The rank of the next lock read.
    next_rank: u64,
    /// Locks read that changed since: settled when the pass ends.
    changed: HashSet<Arc<str>>,
}

/// A filter, its tops' heaps, and how many locks it takes (as read, plus the
/// changes to locks read since).
struct Group {
    filter: Filter,
    fills: Vec<Fill>,
    matched: i64,
}

/// One top's heap.
struct Fill {
    /// Its place in [`Run::specs`].
    at: usize,
    sort: Sort,
    cap: usize,
    heap: BinaryHeap<Ranked>,
    /// A key was ever turned away: the heap may not hold every lock taken.
    overflowed: bool,
}

impl Fill {
    /// Keeps `(a, b, rank)` if it is among the first `cap` keys offered.
    fn offer(&mut self, key: Ranked) {
        if self.heap.len() < self.cap {
            self.heap.push(key);
            return;
        }
        self.overflowed = true;
        let mut last = self.heap.peek_mut().expect("cap is at least 1");
        if key < *last {
            // Replaces the last kept; sifted down as `last` drops.
            *last = key;
        }
    }
}

/// A key in a bounded heap whose top is the last in view order: its position,
/// its lock's rank in name order (which orders as the name does), the name,
/// and whether the view is reversed.
struct Ranked(i64, i64, u64, Arc<str>, bool);

impl PartialEq for Ranked {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other).is_eq()
    }
}
impl Eq for Ranked {}
impl PartialOrd for Ranked {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Ranked {
    fn cmp(&self, other: &Self) -> Ordering {
        let o = (self.0, self.1, self.2).cmp(&(other.0, other.1, other.2));
        if self.4 {
            o.reverse()
        } else {
            o
        }
    }
}

/// Reads `locks` (each with its rank in name order) for `groups`; how many
/// were read and the last one's name.
fn read<'s>(
    locks: impl Iterator<Item = &'s LockEntry>,
    mut rank: u64,
    meta: &HashMap<Arc<str>, Meta>,
    groups: &mut [Group],
) -> (usize, Option<&'s str>) {
    let (mut read, mut last) = (0, None);
    for e in locks {
        read += 1;
        last = Some(e.name.as_str());
        rank += 1;
        let Some((name, meta)) = meta.get_key_value(e.name.as_str()) else {
            continue;
        };
        // Each position computed once per lock, whatever the tops reading it.
        let mut positions: [Option<(i64, i64)>; SortKey::ALL.len()] = Default::default();
        for g in groups.iter_mut() {
            if !meta.takes(name, &g.filter) {
                continue;
            }
            g.matched += 1;
            for fill in g.fills.iter_mut() {
                let (a, b) = *positions[fill.sort.key as usize].get_or_insert_with(|| meta.position(fill.sort.key));
                if fill.heap.len() == fill.cap {
                    // Most locks cannot enter: turned away before any clone.
                    fill.overflowed = true;
                    let last = fill.heap.peek().expect("cap is at least 1");
                    let o = (a, b, rank).cmp(&(last.0, last.1, last.2));
                    let after_last = if fill.sort.reverse { o.is_le() } else { o.is_ge() };
                    if after_last {
                        continue;
                    }
                }
                fill.offer(Ranked(a, b, rank, name.clone(), fill.sort.reverse));
            }
        }
    }
    (read, last)
}

impl Run {
    /// A pass for `specs` (each top with its size).
    pub(in crate::live::views) fn new(specs: Vec<(TopSpec, usize)>) -> Run {
        // Grouped by filter, so each lock is matched once per distinct filter.
        let groups = || {
            let mut groups: Vec<Group> = Vec::new();
            let mut at: HashMap<&Filter, usize> = HashMap::new();
            for (i, (spec, cap)) in specs.iter().enumerate() {
                let fill = Fill {
                    at: i,
                    sort: spec.sort,
                    cap: *cap,
                    heap: BinaryHeap::new(),
                    overflowed: false,
                };
                let g = *at.entry(&spec.filter).or_insert_with(|| {
                    groups.push(Group {
                        filter: spec.filter.clone(),
                        fills: Vec::new(),
                        matched: 0,
                    });
                    groups.len() - 1
                });
                groups[g].fills.push(fill);
            }
            groups
        };
        Run {
            halves: [groups(), groups()],
            specs,
            cursor: None,
            next_rank: 0,
            changed: HashSet::new(),
        }
    }

    /// Reads the next slice: `per_thread` locks on this thread and the
    /// `per_thread` after them on another. Whether every lock has been read.
    fn slice(&mut self, state: &FleetState, meta: &HashMap<Arc<str>, Meta>, per_thread: usize) -> bool {
        let cursor = self.cursor.as_deref();
        let from = || -> Box<dyn Iterator<Item = &LockEntry> + '_> {
            match cursor {
                None => Box::new(state.locks()),
                Some(c) => Box::new(state.locks_after(c)),
            }
        };
        // A fleet smaller than two slices is split evenly between the threads.
        let per_thread = per_thread.min(state.len().div_ceil(2).max(1));
        let base = self.next_rank;
        let [near, far] = &mut self.halves;
        let ((_, last_near), (read_far, last_far)) = std::thread::scope(|scope| {
            let far = scope.spawn(|| {
                read(
                    from().skip(per_thread).take(per_thread),
                    base + per_thread as u64,
                    meta,
                    far,
                )
            });
            let near = read(from().take(per_thread), base, meta, near);
            (near, far.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
        });
        if let Some(last) = last_far.or(last_near) {
            self.cursor = Some(Arc::from(last));
        }
        self.next_rank += 2 * per_thread as u64;
        read_far < per_thread
    }

    /// Follows lock `name` from `old` to `new` (either absent): a lock read
    /// already is counted again and noted; one not read yet is read as it is.
    pub(in crate::live::views) fn follow(&mut self, name: &Arc<str>, old: Option<&Meta>, new: Option<&Meta>) {
        if self.cursor.as_deref().is_none_or(|c| **name > *c) {
            return;
        }
        for g in self.halves[0].iter_mut() {
            let was = old.is_some_and(|m| m.takes(name, &g.filter));
            let is = new.is_some_and(|m| m.takes(name, &g.filter));
            g.matched += i64::from(is) - i64::from(was);
        }
        self.changed.insert(name.clone());
    }
}

#[cfg(test)]
impl Run {
    /// How many locks read have changed since.
    pub(in crate::live::views) fn changed_len(&self) -> usize {
        self.changed.len()
    }
}

impl Views {
    /// One slice of the pass under way, or of a new one for the stale tops:
    /// whether a pass is still under way after it.
    pub(in crate::live::views) fn pass_slice(&mut self, state: &FleetState) -> bool {
        if self.pass.run.is_none() {
            let stale: Vec<(TopSpec, usize)> = (self.tops.iter())
                .filter(|(_, t)| t.stale)
                .map(|(k, t)| (k.clone(), t.cap()))
                .collect();
            if stale.is_empty() {
                return false;
            }
            self.top_passes += 1;
            self.pass.run = Some(Run::new(stale));
        }
        let run = self.pass.run.as_mut().expect("made above");
        if !run.slice(state, &self.meta, self.pass.slice) {
            return true;
        }
        let run = self.pass.run.take().expect("under way");
        self.end_pass(run);
        false
    }

    /// Fills the tops of a pass whose every lock has been read.
    fn end_pass(&mut self, run: Run) {
        let [mut near, far] = run.halves;
        for (n, f) in near.iter_mut().zip(far) {
            n.matched += f.matched;
            for (into, from) in n.fills.iter_mut().zip(f.fills) {
                into.overflowed |= from.overflowed;
                for key in from.heap.into_vec() {
                    into.offer(key);
                }
            }
        }
        for g in near {
            if let Some(c) = self.filters.get_mut(&g.filter).filter(|c| !c.counted) {
                (c.count, c.counted) = (g.matched.max(0) as u64, true);
            }
            for fill in g.fills {
                let (spec, cap) = &run.specs[fill.at];
                // Gone, filled meanwhile (walked), or asked deeper: left as it is.
                let Some(top) = self.tops.get_mut(spec).filter(|t| t.stale && t.cap() == *cap) else {
                    continue;
                };
                top.keys = (fill.heap.into_sorted_vec().into_iter())
                    .map(|Ranked(a, b, _, name, _)| (a, b, name))
                    .collect();
                top.complete = !fill.overflowed;
                top.stale = false;
                top.walk_failed = false;
                top.generation += 1;
                if run.changed.is_empty() {
                    continue;
                }
                // Locks that changed after they were read: as they are now.
                top.keys.retain(|k| !run.changed.contains(&k.2));
                for name in &run.changed {
                    let now = (self.meta.get(name))
                        .filter(|m| m.takes(name, &spec.filter))
                        .map(|m| m.position(spec.sort.key));
                    top.follow(spec.sort.reverse, name, None, now);
                }
            }
        }
    }
}
