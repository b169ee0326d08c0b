//! Selection views: over a large fleet, a filtered view is a selection over the
//! **shared order** of its sort key (the unfiltered index of that key, one per
//! key whatever the filters), not an index of its own. Its window is found by
//! scanning the shared order from the view's end for matching rows, and its
//! total is a count kept per distinct filter as locks change. So 200 distinct
//! views over a million locks cost at most one order per sort key, built once,
//! instead of one full index per (filter, key).
//!
//! A scan is paid only when a lock the filter takes moved at or before the last
//! key the previous scan looked at (its **bound**), or the window's offset
//! moved; any other change leaves the window as it was (only the total may
//! change). A view is served this way when its scan is expected to stay short
//! ([`SCAN_BUDGET`]); a deep window of a rare filter, and a list API page (a
//! cursor), keep an index of their own ([`super::index`]).

use std::sync::Arc;

use lockscope_model::view::{Filter, SortKey, ViewSpec};
use lockscope_model::FleetState;

use super::index::{Index, IndexSpec, Key, WindowNow, OFF_TASK_BUILD_FROM};
use super::{Meta, NameMap, SubId, Views};

/// Fleets of this many locks or more serve filtered views by selection
/// (smaller ones build an index per filter at once, in a few milliseconds).
pub const SELECT_FROM: usize = OFF_TASK_BUILD_FROM;

/// The most keys a selection's scan is expected to visit: `(offset + limit) ×
/// fleet / matching`. A view past it gets an index of its own.
pub const SCAN_BUDGET: u64 = 20_000;

/// The most keys one scan may visit: a selection whose scan went further (its
/// filter's locks bunched at the far end of the order, say) gets an index of
/// its own instead ([`Views::demote_selections`]).
pub const SCAN_LIMIT: usize = 4 * SCAN_BUDGET as usize;

/// A subscriber's selection over its sort key's shared order.
#[derive(Debug)]
pub(super) struct Selection {
    /// The last key the previous scan looked at, in the order's direction of
    /// reading (`None`: it read to the end, so any change may matter).
    bound: Option<Key>,
    /// A lock the filter takes moved within the bound since the last scan.
    pub(super) touched: bool,
    /// The last scan visited more than the limit: to be served by an index.
    pub(super) overflowed: bool,
}

/// How many locks a filter used by selections takes, and by how many subscribers.
pub(super) struct FilterCount {
    pub(super) count: u64,
    pub(super) users: usize,
    /// `false` until the pass that fills a new top counts it
    /// ([`Views::fill_tops`]); `count` means nothing meanwhile.
    pub(super) counted: bool,
}

impl Meta {
    /// Whether `filter` takes this lock (`name`).
    pub(super) fn takes(&self, name: &str, filter: &Filter) -> bool {
        filter.matches_parts(name, self.state, self.service.as_deref(), self.host.as_deref())
    }
}

impl Selection {
    /// Whether a lock at `key` in the order is read by a scan that stops at the bound.
    fn within(&self, key: (i64, i64, &str), reverse: bool) -> bool {
        let Some(b) = &self.bound else { return true };
        let ord = key.cmp(&(b.0, b.1, &*b.2));
        if reverse {
            ord.is_ge()
        } else {
            ord.is_le()
        }
    }

    /// The window of `spec` in the shared `index` now; scans only when it may
    /// have changed since `held` (the names at `held_offset` last sent).
    pub(super) fn window(
        &mut self,
        index: &Index,
        spec: &ViewSpec,
        total: u64,
        meta: &NameMap<Meta>,
        held: Option<(&[Arc<str>], u64)>,
        limit: usize,
    ) -> WindowNow {
        let offset = spec.offset.min(total.saturating_sub(spec.limit as u64));
        if let Some((names, at)) = held.filter(|(_, at)| !self.touched && *at == offset) {
            return WindowNow {
                total,
                offset: at,
                names: names.to_vec(),
            };
        }
        let (window, bound, visited) = scan(index, spec, total, meta, limit);
        self.bound = bound;
        self.touched = false;
        self.overflowed = visited > limit;
        window
    }
}

/// Reads `spec`'s window from the shared `index` (which holds every lock),
/// skipping locks its filter does not take (a name prefix of a by-name view
/// starts at the prefix); with the last key read, if the window filled before
/// the end of the order, and how many keys were visited. A scan stops past
/// `limit` keys (its window then short: the view is to get an index).
pub(super) fn scan(
    index: &Index,
    spec: &ViewSpec,
    total: u64,
    meta: &NameMap<Meta>,
    limit_keys: usize,
) -> (WindowNow, Option<Key>, usize) {
    let limit = spec.limit as usize;
    let offset = spec.offset.min(total.saturating_sub(limit as u64));
    let skip = offset as usize;
    let mut names = Vec::with_capacity(limit);
    let mut seen = 0;
    let mut bound = None;
    let prefix = spec.filter.prefix.as_deref().filter(|_| spec.sort.key == SortKey::Name);
    let keys: Box<dyn Iterator<Item = &Key>> = match (prefix, spec.sort.reverse) {
        // By name, the prefix's locks are one run of the order (keys (0, 0, name)).
        (Some(p), false) => Box::new(index.set.range((0, 0, Arc::<str>::from(p))..)),
        (Some(p), true) => {
            let past: Arc<str> = Arc::from(format!("{p}\u{10FFFF}"));
            Box::new(index.set.range(..(0, 0, past)).rev())
        }
        (None, true) => Box::new(index.set.iter().rev()),
        (None, false) => Box::new(index.set.iter()),
    };
    let keys = keys.take_while(|k| prefix.is_none_or(|p| k.2.starts_with(p)));
    let mut visited = 0;
    for key in keys {
        visited += 1;
        if visited > limit_keys {
            break;
        }
        if seen >= skip + limit {
            break;
        }
        if !meta.get(&key.2).is_some_and(|m| m.takes(&key.2, &spec.filter)) {
            continue;
        }
        if seen >= skip {
            names.push(key.2.clone());
        }
        seen += 1;
        if seen == skip + limit {
            bound = Some(key.clone());
        }
    }
    (WindowNow { total, offset, names }, bound, visited)
}

impl Views {
    /// Whether `spec` is served by a selection over its key's shared order: a
    /// filtered view of a large fleet whose scan stays within [`SCAN_BUDGET`].
    /// Counts its filter if so.
    pub(super) fn select(&mut self, spec: &ViewSpec) -> Option<Selection> {
        let n = self.meta.len();
        if spec.filter == Filter::default() || n < self.select_from {
            return None;
        }
        let count = self.count_filter(&spec.filter);
        let visits = (spec.offset.saturating_add(spec.limit as u64)).saturating_mul(n as u64) / count.max(1);
        if visits > SCAN_BUDGET {
            self.uncount_filter(&spec.filter);
            return None;
        }
        // Nothing scanned yet.
        Some(Selection {
            bound: None,
            touched: true,
            overflowed: false,
        })
    }

    /// The index a selection reads: the unfiltered one of its sort key.
    pub(super) fn shared(spec: &ViewSpec) -> ViewSpec {
        ViewSpec {
            filter: Filter::default(),
            ..spec.clone()
        }
    }

    /// `filter`'s count if it is known without a pass over the locks: kept
    /// (counted), read off the aggregates (no filter, one state, one service),
    /// or, with the table, the locks under a name prefix alone (a range of it).
    pub(super) fn known_count(&self, state: Option<&FleetState>, filter: &Filter) -> Option<u64> {
        if let Some(c) = self.filters.get(filter).filter(|c| c.counted) {
            return Some(c.count);
        }
        match filter {
            Filter {
                state: None,
                service: None,
                host: None,
                prefix: None,
                contains: None,
            } => Some(self.meta.len() as u64),
            Filter {
                state: Some(s),
                service: None,
                host: None,
                prefix: None,
                contains: None,
            } => Some(self.by_state[*s as usize]),
            Filter {
                state: None,
                service: Some(s),
                host: None,
                prefix: None,
                contains: None,
            } => Some(self.services.get(s.as_str()).copied().unwrap_or(0)),
            Filter {
                state: None,
                service: None,
                host: None,
                prefix: Some(p),
                contains: None,
            } => state.map(|t| t.locks_under(p).count() as u64),
            _ => None,
        }
    }

    /// One more user of `filter`'s count (counted now if new); the count.
    pub(super) fn count_filter(&mut self, filter: &Filter) -> u64 {
        let count = |views: &Views| {
            let pass = || views.meta.iter().filter(|(n, m)| m.takes(n, filter)).count() as u64;
            views.known_count(None, filter).unwrap_or_else(pass)
        };
        if let Some(c) = self.filters.get(filter).filter(|c| !c.counted) {
            let (users, count) = (c.users, count(self));
            let counted = FilterCount {
                count,
                users,
                counted: true,
            };
            self.filters.insert(filter.clone(), counted);
        }
        if let Some(c) = self.filters.get_mut(filter) {
            c.users += 1;
            return c.count;
        }
        let count = count(self);
        let counted = FilterCount {
            count,
            users: 1,
            counted: true,
        };
        self.filters.insert(filter.clone(), counted);
        count
    }

    /// One more user of `filter`'s count, left to be counted by the pass that
    /// fills the tops (so that a new top costs that one pass, not two).
    pub(super) fn count_filter_later(&mut self, filter: &Filter) {
        let uncounted = FilterCount {
            count: 0,
            users: 0,
            counted: false,
        };
        self.filters.entry(filter.clone()).or_insert(uncounted).users += 1;
    }

    pub(super) fn uncount_filter(&mut self, filter: &Filter) {
        if let Some(c) = self.filters.get_mut(filter) {
            c.users -= 1;
            if c.users == 0 {
                self.filters.remove(filter);
            }
        }
    }

    /// Follows lock `name` from `old` to `new` (either absent) in the filter
    /// counts, and notes the selections whose window it may have changed.
    pub(super) fn reselect(&mut self, name: &str, old: Option<&Meta>, new: Option<&Meta>) {
        if self.filters.is_empty() {
            return;
        }
        for (filter, c) in self.filters.iter_mut().filter(|(_, c)| c.counted) {
            let was = old.is_some_and(|m| m.takes(name, filter));
            let is = new.is_some_and(|m| m.takes(name, filter));
            c.count = c.count + u64::from(is) - u64::from(was);
        }
        for sub in self.subs.values_mut() {
            let Some(sel) = sub.sel.as_mut().filter(|s| !s.touched) else {
                continue;
            };
            let (filter, sort) = (&sub.spec.filter, sub.spec.sort);
            let moved = |m: &Meta| {
                let (a, b) = m.position(sort.key);
                m.takes(name, filter) && sel.within((a, b, name), sort.reverse)
            };
            if old.is_some_and(moved) || new.is_some_and(moved) {
                sel.touched = true;
            }
        }
    }

    /// The window of a selection view (for tests and recounts), if the filter
    /// is counted and its shared order is built.
    pub(super) fn selection_names(&self, spec: &ViewSpec) -> Option<WindowNow> {
        let total = self.filters.get(&spec.filter)?.count;
        let index = self
            .indexes
            .get(&IndexSpec::of(&Views::shared(spec)))
            .filter(|i| i.unbuilt.is_none())?;
        Some(scan(index, spec, total, &self.meta, usize::MAX).0)
    }

    /// Gives each selection whose last scan overflowed [`SCAN_LIMIT`] an index
    /// of its own (queued like any new index over a large fleet).
    pub(super) fn demote_selections(&mut self) {
        // (Not a held page render's: no frame of it is ever read again.)
        let over: Vec<SubId> = (self.subs.iter())
            .filter(|(_, s)| !s.one_off && s.sel.as_ref().is_some_and(|x| x.overflowed))
            .map(|(id, _)| *id)
            .collect();
        for id in over {
            let sub = &self.subs[&id];
            let (spec, old) = (sub.spec.clone(), sub.index.clone());
            let index = self.attach(&spec);
            self.detach(&old);
            self.uncount_filter(&spec.filter);
            let sub = self.subs.get_mut(&id).expect("listed above");
            sub.sel = None;
            sub.index = index;
            sub.index_gen = 0;
        }
    }
}
