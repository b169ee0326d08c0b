//! Tops read from an order that already exists, so that their first frames wait
//! for no pass over the fleet: a walk from the order's end takes the locks the
//! filter takes until the top is full, and stops there (O(rows read), not
//! O(fleet)). The orders:
//! - by name: the table itself (a name prefix is one run of it);
//! - by severity: the default view's index, which always exists;
//! - by age: the same index, whose run of each state is in age order: the
//!   runs are merged (age is `(acquired_at, name)`, severity `(state,
//!   acquired_at, name)`);
//! - by waiters: the few locks somebody waits for, then every other lock in
//!   name order (all at the same position);
//! - any key whose unfiltered index is built (a deeper view made it).
//!
//! A top is walked only if its filter's count is known without a pass
//! ([`Views::known_count`]); a walk that reads more than [`WALK_LIMIT`] locks
//! (a rare filter) is abandoned, and the top is left to the pass.

use std::sync::Arc;

use lockscope_model::view::{RowState, SortKey};
use lockscope_model::FleetState;

use super::{view_cmp, Key, TopSpec, Views};
use crate::live::views::index::IndexSpec;

/// The most locks one walk reads before it is abandoned for the pass: about a
/// millisecond of map lookups, so that walking every new top of a burst costs
/// the hub far less than the pass it saves; a top is at most 2,000 rows, so a
/// filter that takes one lock in ten still walks.
pub const WALK_LIMIT: usize = 20_000;

/// Keys in view order, from one existing order.
type Source<'a> = Box<dyn Iterator<Item = Key> + 'a>;

/// What a walk found.
pub(super) struct Walked {
    /// In view order, at most the cap asked for.
    pub(super) keys: Vec<Key>,
    /// Every lock the filter takes is in `keys`.
    pub(super) complete: bool,
}

impl Views {
    /// Fills the stale tops that an existing order serves; the others stay stale
    /// (for the pass). The walks of one call read at most as many locks as the
    /// fleet holds, so that rare filters cost no more than the pass would.
    pub(in crate::live::views) fn walk_tops(&mut self, state: &FleetState) {
        let stale: Vec<TopSpec> = (self.tops.iter())
            .filter(|(_, t)| t.stale && !t.walk_failed)
            .map(|(k, _)| k.clone())
            .collect();
        let mut budget = self.meta.len().max(self.walk_limit);
        for spec in stale {
            let Some(count) = self.known_count(Some(state), &spec.filter) else {
                continue;
            };
            // Kept from now on (the pass counts only filters not counted yet).
            if let Some(c) = self.filters.get_mut(&spec.filter).filter(|c| !c.counted) {
                (c.count, c.counted) = (count, true);
            }
            let cap = self.tops[&spec].cap();
            let (walked, read) = self.walk(state, &spec, cap, self.walk_limit.min(budget));
            budget = budget.saturating_sub(read);
            let top = self.tops.get_mut(&spec).expect("listed above");
            let Some(walked) = walked else {
                top.walk_failed = true;
                continue;
            };
            top.keys = walked.keys;
            top.complete = walked.complete;
            top.stale = false;
            top.generation += 1;
        }
    }

    /// The first `cap` keys of `spec`'s order from an existing order, and how
    /// many locks were read; `None` if no order serves it, or past `limit` reads.
    fn walk(&self, state: &FleetState, spec: &TopSpec, cap: usize, limit: usize) -> (Option<Walked>, usize) {
        let Some(sources) = self.sources(state, spec, limit) else {
            return (None, 0);
        };
        let reverse = spec.sort.reverse;
        let mut sources: Vec<(Option<Key>, Source<'_>)> = sources.into_iter().map(|mut s| (s.next(), s)).collect();
        let mut keys = Vec::with_capacity(cap.min(1024));
        let mut read = 0;
        while keys.len() < cap {
            // The source whose next key comes first in view order.
            let mut first: Option<usize> = None;
            for (i, (head, _)) in sources.iter().enumerate() {
                let Some(k) = head else { continue };
                let before = |j: usize| sources[j].0.as_ref().expect("a head");
                if first.is_none_or(|j| view_cmp((k.0, k.1, &k.2), before(j), reverse).is_lt()) {
                    first = Some(i);
                }
            }
            let Some(i) = first else {
                return (Some(Walked { keys, complete: true }), read);
            };
            let (head, source) = &mut sources[i];
            let key = std::mem::replace(head, source.next()).expect("a head");
            read += 1;
            if read > limit {
                return (None, read);
            }
            if self.meta.get(&key.2).is_some_and(|m| m.takes(&key.2, &spec.filter)) {
                keys.push(key);
            }
        }
        (Some(Walked { keys, complete: false }), read)
    }

    /// The existing orders whose merge is `spec`'s order, or `None`.
    fn sources<'a>(&'a self, state: &'a FleetState, spec: &'a TopSpec, limit: usize) -> Option<Vec<Source<'a>>> {
        let key = spec.sort.key;
        let reverse = spec.sort.reverse;
        let unfiltered = IndexSpec {
            filter: Default::default(),
            key,
        };
        let built = move |spec: &IndexSpec| self.indexes.get(spec).filter(|i| i.unbuilt.is_none());
        match key {
            SortKey::Severity | SortKey::Age => {
                let index = built(&IndexSpec::default_view())?;
                // One run per state (only the filter's state, if it has one).
                let states = RowState::ALL
                    .into_iter()
                    .filter(|s| spec.filter.state.is_none_or(|f| f == *s));
                let runs = states.map(|s| {
                    let s = s as i64;
                    let from = |s: i64| (s, i64::MIN, Arc::<str>::from(""));
                    // Age is the severity key without the state.
                    let as_key = move |k: &Key| match key {
                        SortKey::Age => (k.1, 0, k.2.clone()),
                        _ => k.clone(),
                    };
                    // Open ranges, ended by the state: indexset's range with both
                    // ends can yield a key past its end (seen with 6 keys).
                    let run: Source<'a> = match reverse {
                        false => Box::new(index.set.range(from(s)..).take_while(move |k| k.0 == s).map(as_key)),
                        true => Box::new(
                            index
                                .set
                                .range(..from(s + 1))
                                .rev()
                                .take_while(move |k| k.0 == s)
                                .map(as_key),
                        ),
                    };
                    run
                });
                Some(runs.collect())
            }
            _ if built(&unfiltered).is_some() => {
                let set = &built(&unfiltered)?.set;
                let all: Source<'a> = match reverse {
                    false => Box::new(set.iter().cloned()),
                    true => Box::new(set.iter().rev().cloned()),
                };
                Some(vec![all])
            }
            SortKey::Name | SortKey::Waiters => {
                // Every lock nobody waits for is at (0, 0): those are read from
                // the table, in name order; the others first, sorted here.
                let mut waited: Vec<Key> = Vec::new();
                if key == SortKey::Waiters {
                    if state.waiter_count() > limit {
                        return None;
                    }
                    let mut last: Option<&str> = None;
                    for w in state.waiters() {
                        if last == Some(w.lock.as_str()) {
                            continue;
                        }
                        last = Some(w.lock.as_str());
                        if let Some((name, m)) = self.meta.get_key_value(w.lock.as_str()) {
                            let k = m.key(name, key);
                            if (k.0, k.1) != (0, 0) {
                                waited.push(k);
                            }
                        }
                    }
                    waited.sort_unstable_by(|a, b| view_cmp((a.0, a.1, &a.2), b, reverse));
                }
                let prefix = spec.filter.prefix.as_deref().unwrap_or_default();
                let at_zero = move |e: &lockscope_model::LockEntry| {
                    let (name, m) = self.meta.get_key_value(e.name.as_str())?;
                    (m.position(key) == (0, 0)).then(|| (0, 0, name.clone()))
                };
                let table: Source<'a> = match reverse {
                    false => Box::new(state.locks_under(prefix).filter_map(at_zero)),
                    true => Box::new(state.locks_under_rev(prefix).filter_map(at_zero)),
                };
                Some(vec![Box::new(waited.into_iter()), table])
            }
            _ => None,
        }
    }
}
