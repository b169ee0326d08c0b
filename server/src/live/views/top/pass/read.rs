//! One thread's reading of a slice of the tops' pass ([`read`]): each lock is
//! matched once per distinct filter ([`Group`]), and offered to that filter's
//! tops, each a buffer bounded by twice its size ([`Fill`]).

use std::sync::Arc;

use lockscope_model::view::{Filter, Sort, SortKey};
use lockscope_model::LockEntry;

use super::span::Span;
use crate::live::views::index::Key;
use crate::live::views::{Meta, NameMap};

/// A filter, its tops' fills, and how many locks it takes (as read, plus the
/// changes to locks read since) while `counting` (over its span).
pub(super) struct Group {
    pub(super) filter: Filter,
    pub(super) fills: Vec<Fill>,
    pub(super) matched: i64,
    pub(super) span: Span,
    pub(super) counting: bool,
}

/// A key's place in a view's order: its position, then its lock's rank in
/// name order (which orders as the name does within a lap; a lap's ranks are
/// below the last lap's), each bit-inverted for a reversed view, so that the
/// first keys in view order are the smallest in either direction.
type Place = (i64, i64, u128);

/// One top's first keys: the [`Place`]s of the locks offered, with their
/// names, kept in a buffer of up to twice the top's size that is cut back to
/// its first `cap` keys by a selection (O(cap)) whenever it fills, and whose
/// last key kept then bounds what may enter. So a lock costs one comparison
/// to be turned away, or a push to be kept, and a top that takes nearly
/// every lock (a key that grows with the name, say a fence read highest
/// first) costs O(1) a lock, not a heap's sift of O(log cap).
pub(super) struct Fill {
    /// Its place in [`super::Run`]'s `specs`.
    pub(super) at: usize,
    pub(super) sort: Sort,
    pub(super) cap: usize,
    keys: Vec<(Place, Arc<str>)>,
    /// The last key the last cut kept: nothing after it can be among the
    /// first `cap` (`None`: no cut yet).
    bound: Option<Place>,
    /// A key was ever turned away or cut: it may not hold every lock taken.
    pub(super) overflowed: bool,
    pub(super) span: Span,
}

impl Fill {
    pub(super) fn new(at: usize, sort: Sort, cap: usize, span: Span) -> Fill {
        Fill {
            at,
            sort,
            cap: cap.max(1),
            keys: Vec::new(),
            bound: None,
            overflowed: false,
            span,
        }
    }

    /// Offers lock `name` at position `(a, b)` and `rank`: kept if it may be
    /// among the first `cap` keys offered.
    pub(super) fn offer(&mut self, (a, b): (i64, i64), rank: u128, name: &Arc<str>) {
        let place = match self.sort.reverse {
            false => (a, b, rank),
            true => (!a, !b, !rank),
        };
        self.push(place, || name.clone());
    }

    fn push(&mut self, place: Place, name: impl FnOnce() -> Arc<str>) {
        if self.bound.is_some_and(|last| place > last) {
            // Most locks cannot enter: turned away before any clone.
            self.overflowed = true;
            return;
        }
        self.keys.push((place, name()));
        if self.keys.len() >= 2 * self.cap {
            self.cut();
        }
    }

    /// Keeps the first `cap` keys only.
    fn cut(&mut self) {
        if self.keys.len() <= self.cap {
            return;
        }
        self.overflowed = true;
        let (_, last, _) = self.keys.select_nth_unstable_by_key(self.cap - 1, |k| k.0);
        self.bound = Some(last.0);
        self.keys.truncate(self.cap);
    }

    /// Takes in the keys of `other`, the same top's fill read by the other
    /// thread.
    pub(super) fn merge(&mut self, other: Fill) {
        self.overflowed |= other.overflowed;
        for (place, name) in other.keys {
            self.push(place, || name);
        }
    }

    /// Its first `cap` keys in view order, as a top holds them, and whether a
    /// key was turned away.
    pub(super) fn into_keys(mut self) -> (Vec<Key>, bool) {
        self.cut();
        self.keys.sort_unstable_by_key(|k| k.0);
        let reverse = self.sort.reverse;
        let keys = (self.keys.into_iter())
            .map(|((a, b, _), name)| if reverse { (!a, !b, name) } else { (a, b, name) })
            .collect();
        (keys, self.overflowed)
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
    meta: &NameMap<Meta>,
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
                let position = *positions[fill.sort.key as usize].get_or_insert_with(|| meta.position(fill.sort.key));
                fill.offer(position, rank, name);
            }
        }
    }
    (read, last)
}
