//! One thread's reading of a slice of the tops' pass ([`read`]): each lock is
//! matched once per distinct filter ([`Group`]), and offered to that filter's
//! tops, each a heap bounded by its size ([`Fill`]).

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};
use std::sync::Arc;

use lockscope_model::view::{Filter, Sort, SortKey};
use lockscope_model::LockEntry;

use super::span::Span;
use crate::live::views::Meta;

/// A filter, its tops' heaps, and how many locks it takes (as read, plus the
/// changes to locks read since) while `counting` (over its span).
pub(super) struct Group {
    pub(super) filter: Filter,
    pub(super) fills: Vec<Fill>,
    pub(super) matched: i64,
    pub(super) span: Span,
    pub(super) counting: bool,
}

/// One top's heap.
pub(super) struct Fill {
    /// Its place in [`super::Run`]'s `specs`.
    pub(super) at: usize,
    pub(super) sort: Sort,
    pub(super) cap: usize,
    pub(super) heap: BinaryHeap<Ranked>,
    /// A key was ever turned away: the heap may not hold every lock taken.
    pub(super) overflowed: bool,
    pub(super) span: Span,
}

impl Fill {
    /// Keeps `key` if it is among the first `cap` keys offered.
    pub(super) fn offer(&mut self, key: Ranked) {
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
/// its lock's rank in name order (which orders as the name does within a lap;
/// a lap's ranks are below the last lap's), the name, and whether the view is
/// reversed.
pub(super) struct Ranked(
    pub(super) i64,
    pub(super) i64,
    pub(super) u128,
    pub(super) Arc<str>,
    pub(super) bool,
);

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

/// The rank of the lock at place `at` of lap `lap`.
fn rank(lap: u64, at: u64) -> u128 {
    (u128::from(u64::MAX - lap) << 64) | u128::from(at)
}

/// Reads `locks` (the first at place `at` of lap `lap`, whose `stops` end the
/// spans begun in the last lap) for `groups`; how many were read and the last
/// one's name.
pub(super) fn read<'s>(
    locks: impl Iterator<Item = &'s LockEntry>,
    (lap, mut at): (u64, u64),
    stops: &[Arc<str>],
    meta: &HashMap<Arc<str>, Meta>,
    groups: &mut [Group],
) -> (usize, Option<&'s str>) {
    let (mut read, mut last) = (0, None);
    // How many stops lie before the lock read (names only grow).
    let mut passed = 0;
    for e in locks {
        read += 1;
        last = Some(e.name.as_str());
        let rank = rank(lap, at);
        at += 1;
        while stops.get(passed).is_some_and(|s| e.name.as_str() > &**s) {
            passed += 1;
        }
        let Some((name, meta)) = meta.get_key_value(e.name.as_str()) else {
            continue;
        };
        // Each position computed once per lock, whatever the tops reading it.
        let mut positions: [Option<(i64, i64)>; SortKey::ALL.len()] = Default::default();
        for g in groups.iter_mut() {
            let counts = g.counting && g.span.reads(passed);
            if !counts && !g.fills.iter().any(|f| f.span.reads(passed)) {
                continue;
            }
            if !meta.takes(name, &g.filter) {
                continue;
            }
            g.matched += i64::from(counts);
            for fill in g.fills.iter_mut().filter(|f| f.span.reads(passed)) {
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
