//! The pass over the fleet that fills the tops no existing order serves
//! ([`super`]): the locks are read once, in name order, and each top keeps its
//! first keys in a buffer of twice its size cut back by a selection whenever it
//! fills (O(n) a top; only the keys kept are sorted, at the end: `read::Firsts`). A
//! lock's rank in name order stands for its name in the buffers, so keys that tie
//! on their position (a fence or an expiry most locks share) are told apart by
//! one integer comparison, never by comparing names.
//!
//! The pass is made in **slices** of [`PASS_SLICE`] locks per thread (two
//! threads, one slice per hub turn), so it never holds the hub for more than a
//! slice: between slices the hub applies the store's events and sends frames.
//! A lock already read that changes meanwhile is counted again at once and
//! noted; when a top's last lock is read, it takes the noted locks as they are
//! then ([`super::Top::follow`]), so it holds what a pass made in one go at
//! that moment would.
//!
//! A top made while a pass is under way **joins** it: it reads from the
//! pass's cursor to the end of the fleet, then, in the pass's next **lap**,
//! from the start up to where it joined, so that a burst of new views costs one
//! pass over the fleet and a view made during it waits for one lap at most, not
//! for the rest of this pass and a whole next one. A lap's ranks are all below
//! the last lap's, so a top's keys from its second lap (names up to where it
//! joined) rank before those from its first (the names after).

use std::collections::HashSet;
use std::sync::Arc;

use lockscope_model::view::Filter;
use lockscope_model::{FleetState, LockEntry};

use super::{TopSpec, Views};
use crate::live::views::{Meta, NameMap};

mod read;
mod span;

use read::{read, Fill, Group};
use span::Span;

/// Locks each of the pass's two threads reads in one slice (one hub turn): 16
/// turns for 1,000,000 locks, each a few tens of milliseconds of the hub, so
/// the views an existing order serves and the store's writes are answered
/// between slices. Measured at 1,000,000 locks and 200 new views (release,
/// docs/performance.md): before tops joined a pass under way, slices of this
/// size lost to one slice on a quiet machine (views that took a top during the
/// pass's 16 turns waited for the next pass); with joining, run in turn
/// against one slice, four pairs on a loaded machine (load 2-6) showed no
/// resolvable change in first frames and writes shown sooner in three, and
/// three pairs on a quieter one (load 0-2.4) first frames p50 213-389 ms
/// against 291-845 and the max lower in two.
pub const PASS_SLICE: usize = 1 << 15;

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

/// A pass under way: one or more laps over the fleet in name order.
#[derive(Default)]
pub(in crate::live::views) struct Run {
    /// The tops it fills, with the size each was asked for.
    specs: Vec<(TopSpec, usize)>,
    /// Per filter, its tops' fills: one set per thread, merged at the end.
    /// Both halves hold the same groups and fills in the same places.
    halves: [Vec<Group>; 2],
    /// The last lock read in this lap: every lock up to it has been.
    cursor: Option<Arc<str>>,
    /// Laps begun: a lap reads the fleet from its start to its end.
    lap: u64,
    /// The place in this lap of the next lock read.
    next: u64,
    /// Where this lap ends the spans begun in the last one, in name order
    /// ([`Span::stop`]).
    stops: Vec<Arc<str>>,
    /// Locks read that changed since, in this lap and the last (no top reads
    /// for longer): taken as they are then when their tops are filled.
    changed: [HashSet<Arc<str>>; 2],
}

/// What a slice finished: a filter's count, if its group's span ended, and the
/// fills of its tops whose span ended (both halves merged).
struct Settled {
    filter: Filter,
    count: Option<i64>,
    fills: Vec<Fill>,
}

impl Run {
    /// Whether the top `spec` is being filled by this pass with at least the
    /// `want` rows its viewers need.
    fn fills(&self, spec: &TopSpec, want: usize) -> bool {
        let specs = self.halves[0].iter().flat_map(|g| &g.fills).map(|f| &self.specs[f.at]);
        specs.into_iter().any(|(s, c)| s == spec && *c >= want)
    }

    /// `specs` (each top with its size) join the pass at its cursor: grouped
    /// by filter, so each lock is matched once per distinct filter.
    fn join(&mut self, specs: Vec<(TopSpec, usize)>) {
        let span = Span {
            lap: self.lap,
            from: self.cursor.clone(),
            stop: None,
        };
        for (spec, cap) in specs {
            // A group still counting counts for its new tops too.
            let g = match (self.halves[0].iter()).position(|g| g.counting && g.filter == spec.filter) {
                Some(g) => g,
                None => {
                    for half in self.halves.iter_mut() {
                        half.push(Group {
                            filter: spec.filter.clone(),
                            fills: Vec::new(),
                            matched: 0,
                            span: span.clone(),
                            counting: true,
                        });
                    }
                    self.halves[0].len() - 1
                }
            };
            for half in self.halves.iter_mut() {
                half[g]
                    .fills
                    .push(Fill::new(self.specs.len(), spec.sort, cap, span.clone()));
            }
            self.specs.push((spec, cap));
        }
    }

    /// Reads the next slice: `per_thread` locks on this thread and the
    /// `per_thread` after them on another. Whether the lap is read to its end.
    fn slice(&mut self, state: &FleetState, meta: &NameMap<Meta>, per_thread: usize) -> bool {
        let cursor = self.cursor.as_deref();
        let from = || -> Box<dyn Iterator<Item = &LockEntry> + '_> {
            match cursor {
                None => Box::new(state.locks()),
                Some(c) => Box::new(state.locks_after(c)),
            }
        };
        // A fleet smaller than two slices is split evenly between the threads.
        let per_thread = per_thread.min(state.len().div_ceil(2).max(1));
        let (lap, at, stops) = (self.lap, self.next, &self.stops[..]);
        let [near, far] = &mut self.halves;
        let ((_, last_near), (read_far, last_far)) = std::thread::scope(|scope| {
            let far = scope.spawn(|| {
                let locks = from().skip(per_thread).take(per_thread);
                read(locks, (lap, at + per_thread as u64), stops, meta, far)
            });
            let near = read(from().take(per_thread), (lap, at), stops, meta, near);
            (near, far.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
        });
        if let Some(last) = last_far.or(last_near) {
            self.cursor = Some(Arc::from(last));
        }
        self.next += 2 * per_thread as u64;
        read_far < per_thread
    }

    /// Takes out what has read every lock (`ended`: the lap was read to its
    /// end), and begins the next lap after an `ended` one if anything is left.
    fn settle(&mut self, ended: bool) -> Vec<Settled> {
        let (lap, cursor) = (self.lap, self.cursor.as_deref());
        let done = |s: &Span| s.done(lap, cursor, ended);
        let mut settled = Vec::new();
        let [near, far] = &mut self.halves;
        for i in (0..near.len()).rev() {
            let (n, f) = (&mut near[i], &mut far[i]);
            let count = (n.counting && done(&n.span)).then(|| n.matched + f.matched);
            n.counting &= count.is_none();
            let mut fills = Vec::new();
            for j in (0..n.fills.len()).rev() {
                if !done(&n.fills[j].span) {
                    continue;
                }
                let (mut into, from) = (n.fills.swap_remove(j), f.fills.swap_remove(j));
                into.merge(from);
                fills.push(into);
            }
            if count.is_some() || !fills.is_empty() {
                settled.push(Settled {
                    filter: n.filter.clone(),
                    count,
                    fills,
                });
            }
            if !n.counting && n.fills.is_empty() {
                near.swap_remove(i);
                far.swap_remove(i);
            }
        }
        if ended && !near.is_empty() {
            // What joined during this lap reads the next up to where it joined.
            self.lap += 1;
            (self.cursor, self.next) = (None, 0);
            self.changed.swap(0, 1);
            self.changed[0].clear();
            fn spans(g: &mut Group) -> impl Iterator<Item = &mut Span> {
                std::iter::once(&mut g.span).chain(g.fills.iter_mut().map(|f| &mut f.span))
            }
            let mut stops: Vec<Arc<str>> = (near.iter().flat_map(|g| &g.fills).map(|f| &f.span))
                .chain(near.iter().map(|g| &g.span))
                .filter_map(|s| s.from.clone())
                .collect();
            stops.sort_unstable();
            stops.dedup();
            for s in near.iter_mut().chain(far.iter_mut()).flat_map(spans) {
                s.stop = s.from.as_ref().map(|f| stops.binary_search(f).expect("listed above"));
            }
            self.stops = stops;
        }
        settled
    }

    /// Follows lock `name` from `old` to `new` (either absent): a lock read
    /// already is counted again and noted; one not read yet is read as it is.
    pub(in crate::live::views) fn follow(&mut self, name: &Arc<str>, old: Option<&Meta>, new: Option<&Meta>) {
        let (lap, cursor) = (self.lap, self.cursor.as_deref());
        let mut noted = false;
        for g in self.halves[0].iter_mut() {
            if g.counting && g.span.has_read(name, lap, cursor) {
                let was = old.is_some_and(|m| m.takes(name, &g.filter));
                let is = new.is_some_and(|m| m.takes(name, &g.filter));
                g.matched += i64::from(is) - i64::from(was);
            }
            noted = noted || g.fills.iter().any(|f| f.span.has_read(name, lap, cursor));
        }
        if noted {
            self.changed[0].insert(name.clone());
        }
    }
}

#[cfg(test)]
impl Run {
    /// How many locks read have changed since.
    pub(in crate::live::views) fn changed_len(&self) -> usize {
        self.changed.iter().map(HashSet::len).sum()
    }

    /// Laps begun.
    pub(in crate::live::views) fn laps(&self) -> u64 {
        self.lap + 1
    }
}

impl Views {
    /// One slice of the pass under way, or of a new one, for every stale top
    /// (those made or made deeper meanwhile join it), and fills the tops whose
    /// every lock has been read: whether a pass is still under way after it.
    pub(in crate::live::views) fn pass_slice(&mut self, state: &FleetState) -> bool {
        let run = self.pass.run.take();
        let owed: Vec<(TopSpec, usize)> = (self.tops.iter())
            .filter(|(k, t)| t.stale && run.as_ref().is_none_or(|r| !r.fills(k, t.want)))
            .map(|(k, t)| (k.clone(), t.cap()))
            .collect();
        let mut run = match run {
            Some(run) => run,
            None if owed.is_empty() => return false,
            None => {
                self.top_passes += 1;
                Run::default()
            }
        };
        run.join(owed);
        let ended = run.slice(state, &self.meta, self.pass.slice);
        for settled in run.settle(ended) {
            self.fill_settled(settled, &run);
        }
        if run.halves[0].is_empty() {
            return false;
        }
        self.pass.run = Some(run);
        true
    }

    /// Fills the tops (and counts the filter) whose every lock has been read.
    fn fill_settled(&mut self, settled: Settled, run: &Run) {
        if let Some(c) = (self.filters.get_mut(&settled.filter)).filter(|c| !c.counted) {
            if let Some(count) = settled.count {
                (c.count, c.counted) = (count.max(0) as u64, true);
            }
        }
        for fill in settled.fills {
            let (spec, cap) = &run.specs[fill.at];
            // Gone, filled meanwhile (walked), or asked deeper than this fill
            // holds: left as it is. A fill that holds the rows its viewers
            // need now is taken, so a view asked a little deeper while the
            // pass runs costs its first viewers no further lap.
            let Some(top) = self.tops.get_mut(spec).filter(|t| t.stale && *cap >= t.want) else {
                continue;
            };
            let (keys, overflowed) = fill.into_keys();
            (top.keys, top.complete) = (keys, !overflowed);
            if top.keys.len() > top.cap() {
                // Made for deeper viewers who have left since.
                top.keys.truncate(top.cap());
                top.complete = false;
            }
            top.stale = false;
            top.walk_failed = false;
            top.generation += 1;
            let [now, last] = &run.changed;
            if now.is_empty() && last.is_empty() {
                continue;
            }
            // Locks that changed after they were read: as they are now.
            top.keys.retain(|k| !now.contains(&k.2) && !last.contains(&k.2));
            for name in now.union(last) {
                let now = (self.meta.get(name))
                    .filter(|m| m.takes(name, &spec.filter))
                    .map(|m| m.position(spec.sort.key));
                top.follow(spec.sort.reverse, name, None, now);
            }
        }
    }
}
