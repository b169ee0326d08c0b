//! One thread's reading of a slice of the tops' pass ([`read`]): each lock is
//! matched once per distinct filter ([`Group`]), and offered to that filter's
//! tops, each a buffer bounded by twice its size ([`Fill`]).
//!
//! A lock is read from its entry in the table's B-tree, in place. Its meta is
//! looked up by name only when a group of the pass needs it ([`Group::reads_meta`]:
//! a filter by state, a sort by severity or waiters), and then for every lock,
//! once, shared by the groups. That lookup cost three or four cache misses a
//! lock (the hash table's control bytes, its slot, the name's bytes to
//! compare) and most of a pass's time (docs/performance.md). Without it, a key
//! is kept with the name as the table holds it, in a buffer of the slice's own
//! ([`Firsts`] of `&str`), and only the slice's first keys are looked up for
//! the shared name a top keeps, when the slice ends.

use std::sync::Arc;

use lockscope_model::view::{sort_key, Filter, RowState, Sort, SortFields, SortKey};
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

impl Group {
    /// Whether this group reads each lock's meta: a filter by state, or a sort
    /// by severity or waiters (a lock's state follows the clock and its
    /// session; its waiters are kept apart from its entry). Other filters and
    /// sorts read the entry, which the meta was computed from (the views place
    /// a lock again on every change of its entry).
    fn reads_meta(&self) -> bool {
        self.filter.state.is_some() || (self.fills.iter()).any(|f| f.sort.key.reads_state_or_waiters())
    }
}

/// A key's place in a view's order: its position, then its lock's rank in
/// name order (which orders as the name does within a lap; a lap's ranks are
/// below the last lap's), each bit-inverted for a reversed view, so that the
/// first keys in view order are the smallest in either direction.
type Place = (i64, i64, u128);

/// A place in a reversed view's order from one in its key's order, or back.
fn flip(reverse: bool, p: Place) -> Place {
    if reverse {
        (!p.0, !p.1, !p.2)
    } else {
        p
    }
}

/// The first `cap` keys offered (each a [`Place`] with its lock's name `N`),
/// kept in a buffer of up to twice that which is cut back to its first `cap`
/// by a selection (O(cap)) whenever it fills, and whose last key kept then
/// bounds what may enter. So a lock costs one comparison to be turned away, or
/// a push to be kept, and a top that takes nearly every lock (a key that grows
/// with the name, say a fence read highest first) costs O(1) a lock, not a
/// heap's sift of O(log cap).
struct Firsts<N> {
    cap: usize,
    keys: Vec<(Place, N)>,
    /// The last key the last cut kept (or its fill's, for a slice's buffer):
    /// nothing after it can be among the first `cap` (`None`: no cut yet).
    bound: Option<Place>,
    /// A key was ever turned away or cut: it may not hold every key offered.
    overflowed: bool,
}

impl<N> Firsts<N> {
    fn new(cap: usize, bound: Option<Place>) -> Firsts<N> {
        Firsts {
            cap: cap.max(1),
            keys: Vec::new(),
            bound,
            overflowed: false,
        }
    }

    fn push(&mut self, place: Place, name: impl FnOnce() -> N) {
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

    /// Takes in the keys of `other` by the names `name` gives (none: left out).
    fn absorb<M>(&mut self, other: Firsts<M>, name: impl Fn(M) -> Option<N>) {
        self.overflowed |= other.overflowed;
        for (place, n) in other.keys {
            if let Some(n) = name(n) {
                self.push(place, || n);
            }
        }
    }
}

/// One top's first keys ([`Firsts`]), by the shared names a top keeps.
pub(super) struct Fill {
    /// Its place in [`super::Run`]'s `specs`.
    pub(super) at: usize,
    pub(super) sort: Sort,
    firsts: Firsts<Arc<str>>,
    pub(super) span: Span,
}

impl Fill {
    pub(super) fn new(at: usize, sort: Sort, cap: usize, span: Span) -> Fill {
        Fill {
            at,
            sort,
            firsts: Firsts::new(cap, None),
            span,
        }
    }

    /// The place of a lock at position `(a, b)` and `rank` in this top's
    /// order.
    fn place(&self, (a, b): (i64, i64), rank: u128) -> Place {
        flip(self.sort.reverse, (a, b, rank))
    }

    /// Takes in the keys of `other`, the same top's fill read by the other
    /// thread.
    pub(super) fn merge(&mut self, other: Fill) {
        self.firsts.absorb(other.firsts, Some);
    }

    /// Its first `cap` keys in view order, as a top holds them, and whether a
    /// key was turned away.
    pub(super) fn into_keys(self) -> (Vec<Key>, bool) {
        let mut firsts = self.firsts;
        firsts.cut();
        firsts.keys.sort_unstable_by_key(|k| k.0);
        let reverse = self.sort.reverse;
        let keys = (firsts.keys.into_iter())
            .map(|(place, name)| {
                let (a, b, _) = flip(reverse, place);
                (a, b, name)
            })
            .collect();
        (keys, firsts.overflowed)
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
    // Where a group reads each lock's meta, every lock's is looked up (once,
    // shared by the groups), and every key is kept by the name it shares.
    // Otherwise the slice keeps its first keys per fill by the names the fleet
    // holds, each buffer starting at its fill's bound, and looks up those alone.
    let eager = groups.iter().any(Group::reads_meta);
    let mut slice: Vec<Vec<Firsts<&'s str>>> = (groups.iter())
        .map(|g| {
            (g.fills.iter())
                .map(|f| Firsts::new(f.firsts.cap, f.firsts.bound))
                .collect()
        })
        .collect();
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
        let found = if eager {
            meta.get_key_value(e.name.as_str())
        } else {
            None
        };
        // Each position computed once per lock, whatever the tops reading it
        // (a key both the entry and the meta give is the same from either).
        let mut positions: [Option<(i64, i64)>; SortKey::ALL.len()] = Default::default();
        let fields = SortFields::of(e);
        for (g, firsts) in groups.iter_mut().zip(slice.iter_mut()) {
            let counts = g.counting && g.span.reads(passed);
            if !counts && !g.fills.iter().any(|f| f.span.reads(passed)) {
                continue;
            }
            let takes = match g.filter.state {
                // Any state will do: the filter does not read it.
                None => g.filter.matches(e, RowState::Healthy),
                Some(_) => found.is_some_and(|(name, m)| m.takes(name, &g.filter)),
            };
            if !takes {
                continue;
            }
            g.matched += i64::from(counts);
            for (fill, firsts) in g.fills.iter_mut().zip(firsts.iter_mut()) {
                if !fill.span.reads(passed) {
                    continue;
                }
                let key = fill.sort.key;
                let pos = match (key.reads_state_or_waiters(), found) {
                    (false, _) => {
                        positions[key as usize].get_or_insert_with(|| sort_key(key, &fields, RowState::Healthy, 0))
                    }
                    (true, Some((_, m))) => positions[key as usize].get_or_insert_with(|| m.position(key)),
                    (true, None) => continue,
                };
                let place = fill.place(*pos, rank);
                match found {
                    Some((name, _)) => fill.firsts.push(place, || name.clone()),
                    None => firsts.push(place, || e.name.as_str()),
                }
            }
        }
    }
    // The slice's first keys join their fills, by the names the meta shares.
    for (g, firsts) in groups.iter_mut().zip(slice) {
        for (fill, mut firsts) in g.fills.iter_mut().zip(firsts) {
            firsts.cut();
            fill.firsts.absorb(firsts, |name| {
                let shared = meta.get_key_value(name).map(|(name, _)| name.clone());
                // Every lock of the table has a meta (the views place each one).
                debug_assert!(shared.is_some(), "no meta for {name}");
                shared
            });
        }
    }
    (read, last)
}
