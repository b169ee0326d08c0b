//! The hub's views: what each subscriber looks at, kept up to date incrementally.
//!
//! - Per distinct (filter, sort key) an **index**: the matching locks in view order,
//!   an order-statistic B-tree (`indexset`), so that the window at any offset is
//!   found in O(log n) and an event moves one key, never re-sorting the fleet. A
//!   reversed view reads the same index from the end. Indexes are shared by every
//!   subscriber of that (filter, key) and dropped with the last one; the default
//!   view's index always exists. A new index over a large fleet is sorted off the
//!   hub task ([`index`]).
//! - Per lock a small [`Meta`]: what its old position was computed from, its
//!   state, what filters read (service, host: shared strings), its holder's
//!   session, and a version bumped on every change (record, waiters, holder).
//!   Locks per session are indexed too: a session going or being blacklisted
//!   re-places exactly its locks.
//! - States change with time (healthy → overdue → expired): each lock's next
//!   change sits in a deadline queue, and [`Views::advance`] re-keys what is due.
//! - Over a large fleet a filtered view is, when its scan stays short, a
//!   **selection** over its sort key's shared (unfiltered) order instead of an
//!   index of its own ([`select`]).
//! - Over a large fleet an unfiltered view by name, at any offset, reads its
//!   window from the table itself (the name order), from a cursor kept as locks
//!   come and go: no index of its own ([`names`]).
//! - Per subscriber a record of what it holds (names in order, row versions); a
//!   frame is the difference between that record and its window now.
//! - Aggregates (per state, per service) are counted as locks change, never by
//!   scanning the fleet.
//!
//! Pure logic over the model's [`FleetState`]: the hub task owns it and passes
//! the time in ([`Now`]), so tests drive time by hand. Lock states follow the wall
//! clock (record times are wall-clock instants); frame pacing follows a monotonic
//! clock, so a wall-clock step never stalls or floods a subscriber.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use indexset::BTreeSet as OrderedSet;
use lockscope_model::time::Millis;
use lockscope_model::view::{
    sort_key, Aggregates, RowState, SortFields, SortKey, ViewSpec, WindowFrame, WindowRow, TOP_SERVICES,
};
use lockscope_model::wire::{MAX_IN_FLIGHT, MIN_FRAME_INTERVAL_MS};
use lockscope_model::{Changed, Counts, FleetState};

mod frames;
mod index;
mod name_map;
mod names;
mod render;
mod select;
mod top;

use frames::Sub;
use index::{window_of, Index, IndexSpec, Key, OFF_TASK_BUILD_FROM};
pub use index::{Build, BuildId, Built};
use name_map::NameMap;
pub use names::NAME_WINDOWS_FROM;
pub use render::{RENDER_HOLDS, RENDER_HOLD_MS};
pub use select::{SCAN_BUDGET, SCAN_LIMIT, SELECT_FROM};
pub use top::{PASS_QUIET_MS, PASS_SLICE, PASS_WAIT_MS, TOP_ROWS, WALK_LIMIT};

/// Shortest time between two aggregate updates to one subscriber: counts of a
/// busy fleet change with every event, and a person reads them at most this often.
pub const AGGREGATES_EVERY_MS: i64 = 250;

/// Identifies a subscriber within one hub.
pub type SubId = u64;

/// A position in a view's order, `(a, b, name)` as [`sort_key`] gives it: where
/// a list API page ended (the next page starts after it).
pub type ListCursor = (i64, i64, String);

/// The time, twice: `wall` (unix ms) decides lock states; `mono` (ms on a
/// monotonic clock) paces frames.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Now {
    pub wall: Millis,
    pub mono: Millis,
}

/// What a lock's place in every index was computed from (its name is the key
/// of `Views::meta`).
struct Meta {
    fields: SortFields,
    state: RowState,
    waiters: u32,
    /// The record's service and host (`None` when malformed), shared with the
    /// table: what filters read besides the name and state.
    service: Option<Arc<str>>,
    host: Option<Arc<str>>,
    /// The holder's session (shared with the table), whose liveness is part of
    /// the lock's state.
    session: Option<Arc<str>>,
    version: u64,
    /// When `state` next changes by itself (also a key of `Views::deadlines`).
    deadline: Option<Millis>,
}

impl Meta {
    fn position(&self, sort: SortKey) -> (i64, i64) {
        sort_key(sort, &self.fields, self.state, self.waiters)
    }

    fn key(&self, name: &Arc<str>, sort: SortKey) -> Key {
        let (a, b) = self.position(sort);
        (a, b, name.clone())
    }

    /// `name`'s key in `index`, if `index`'s filter takes it.
    fn key_in(&self, name: &Arc<str>, index: &IndexSpec) -> Option<Key> {
        let (service, host) = (self.service.as_deref(), self.host.as_deref());
        index
            .filter
            .matches_parts(name, self.state, service, host)
            .then(|| self.key(name, index.key))
    }
}

/// Every view of one fleet. See the module docs.
pub struct Views {
    meta: NameMap<Meta>,
    /// Locks per holding session: when a session goes, or is blacklisted, its
    /// locks' states change. Names are shared with `meta`.
    by_session: HashMap<Arc<str>, HashSet<Arc<str>>>,
    deadlines: BTreeSet<(Millis, Arc<str>)>,
    indexes: HashMap<IndexSpec, Index>,
    subs: HashMap<SubId, Sub>,
    next_sub: SubId,
    next_version: u64,
    by_state: [u64; RowState::ALL.len()],
    services: HashMap<Arc<str>, u64>,
    waiters: u64,
    /// Something the aggregates count changed since [`Views::mark_dirty`] last looked.
    aggregates_touched: bool,
    /// The aggregates as subscribers are sent them, and a generation bumped only
    /// when they actually differ (a rewrite leaves every count as it was).
    published: Aggregates,
    aggregates_gen: u64,
    /// Indexes waiting for their build ([`Views::next_build`]), first come first
    /// served; build ids count up.
    queued: std::collections::VecDeque<IndexSpec>,
    next_build: u64,
    off_task_build_from: usize,
    /// The filters of selection views, with how many locks each takes.
    filters: HashMap<lockscope_model::view::Filter, select::FilterCount>,
    select_from: usize,
    scan_limit: usize,
    /// The first rows of the orders that windows near their top show.
    tops: HashMap<top::TopSpec, top::Top>,
    /// Fleets of this many locks or more serve such windows by a top.
    top_from: usize,
    /// Passes over the fleet made to fill tops.
    top_passes: u64,
    /// The tops' pass under way, made a slice a turn ([`top::PASS_SLICE`]).
    pass: top::Pass,
    /// Stale tops wait for a pass ([`Views::mark_dirty_before_pass`]), since
    /// then (monotonic).
    pass_owed: Option<Millis>,
    /// When (monotonic) a subscriber last took a top ([`PASS_QUIET_MS`]).
    top_taken_at: Millis,
    /// The most locks a top's walk reads ([`WALK_LIMIT`]; tests use less).
    walk_limit: usize,
    /// Windows by name read from the table ([`names`]), per subscriber.
    names: HashMap<SubId, names::NameWindow>,
    /// The cursor of the last such window dropped, followed for the next one.
    name_spare: Option<names::Cursor>,
    /// Page renders whose view is kept for the page's socket, and until when
    /// (monotonic; [`render::RENDER_HOLD_MS`]), oldest first.
    held_renders: std::collections::VecDeque<(Millis, SubId)>,
    /// Fleets of this many locks or more serve them ([`NAME_WINDOWS_FROM`]).
    names_from: usize,
}

impl Default for Views {
    fn default() -> Self {
        Views::new()
    }
}

impl Views {
    pub fn new() -> Views {
        let mut v = Views {
            meta: NameMap::default(),
            by_session: HashMap::new(),
            deadlines: BTreeSet::new(),
            indexes: HashMap::new(),
            subs: HashMap::new(),
            next_sub: 1,
            next_version: 1,
            by_state: [0; RowState::ALL.len()],
            services: HashMap::new(),
            waiters: 0,
            aggregates_touched: false,
            published: Aggregates::default(),
            aggregates_gen: 1,
            queued: Default::default(),
            next_build: 1,
            off_task_build_from: OFF_TASK_BUILD_FROM,
            filters: HashMap::new(),
            select_from: SELECT_FROM,
            scan_limit: select::SCAN_LIMIT,
            tops: HashMap::new(),
            top_from: SELECT_FROM,
            top_passes: 0,
            pass: Default::default(),
            pass_owed: None,
            top_taken_at: 0,
            walk_limit: WALK_LIMIT,
            names: HashMap::new(),
            name_spare: None,
            names_from: NAME_WINDOWS_FROM,
            held_renders: Default::default(),
        };
        // The default view (the bare page) is always ready.
        v.indexes
            .insert(IndexSpec::default_view(), Index::new(OrderedSet::new(), None));
        v
    }

    /// Leaves indexes of `from` locks or more to [`Build`]s (tests use 0 to drive
    /// every build by hand).
    #[cfg(test)]
    pub(crate) fn with_off_task_build_from(from: usize) -> Views {
        Views {
            off_task_build_from: from,
            ..Views::new()
        }
    }

    /// Serves filtered views by selection from `from` locks on (tests use 0),
    /// never by a top (so that tests see selections near the top too).
    #[cfg(test)]
    pub(crate) fn with_select_from(from: usize, scan_limit: usize) -> Views {
        Views {
            select_from: from,
            scan_limit,
            top_from: usize::MAX,
            ..Views::new()
        }
    }

    /// Serves windows near the top of their order by a top from `from` locks
    /// on (tests use 0), and deeper filtered ones by selection.
    #[cfg(test)]
    pub(crate) fn with_top_from(from: usize) -> Views {
        Views {
            select_from: from,
            top_from: from,
            ..Views::new()
        }
    }

    /// Reads unfiltered by-name windows from the table from `from` locks on
    /// (tests use 0), never by a top.
    #[cfg(test)]
    pub(crate) fn with_names_from(from: usize) -> Views {
        Views {
            names_from: from,
            top_from: usize::MAX,
            ..Views::new()
        }
    }

    /// Follows one effective change of `state` (as returned by
    /// [`FleetState::apply`], already applied).
    pub fn on_change(&mut self, state: &FleetState, change: &Changed, now: Millis) {
        match change {
            Changed::Lock(name) => self.place(state, name, now),
            Changed::Waiters(lock) => {
                self.waiters = state.waiter_count() as u64;
                self.aggregates_touched = true;
                if self.meta.contains_key(lock.as_str()) {
                    self.place(state, lock, now);
                }
            }
            Changed::Session(_) => {}
            Changed::Holder(session) => {
                let names: Vec<Arc<str>> = self
                    .by_session
                    .get(session.as_str())
                    .map(|s| s.iter().cloned().collect())
                    .unwrap_or_default();
                for name in names {
                    self.place(state, &name, now);
                }
            }
        }
    }

    /// Re-keys every lock whose state changed by itself up to `now`.
    pub fn advance(&mut self, state: &FleetState, now: Millis) {
        while let Some((at, name)) = self.deadlines.first().cloned() {
            if at > now {
                break;
            }
            self.deadlines.pop_first();
            self.place(state, &name, now);
        }
    }

    /// When [`Views::advance`] next has something to do.
    pub fn next_deadline(&self) -> Option<Millis> {
        self.deadlines.first().map(|(at, _)| *at)
    }

    /// (Re)computes `name`'s meta from the table and moves it in every index.
    fn place(&mut self, state: &FleetState, name: &str, now: Millis) {
        let Some(entry) = state.get(name) else {
            return self.unplace(name);
        };
        let waiters = state.waiters_of(name).count() as u32;
        let old = self.take(name);
        let name: Arc<str> = old.as_ref().map_or_else(|| Arc::from(name), |(n, _)| n.clone());
        let old = old.map(|(_, m)| m);
        let row_state = state.state_of(entry, now);
        let meta = Meta {
            fields: SortFields::of(entry),
            state: row_state,
            waiters,
            // Shared with the table: the reducer interns every record's service.
            service: entry.record().map(|r| r.service.clone()),
            host: entry.record().map(|r| r.host.clone()),
            // A foreign schema's lock names its session too: its liveness counts.
            session: match entry.record() {
                Some(r) => Some(r.session.clone()),
                None => entry.holder_session().map(Arc::from),
            },
            version: self.next_version,
            deadline: RowState::next_change(entry, now),
        };
        self.next_version += 1;
        self.count(&meta, 1);
        if let Some(at) = meta.deadline {
            self.deadlines.insert((at, name.clone()));
        }
        if let Some(session) = &meta.session {
            self.by_session.entry(session.clone()).or_default().insert(name.clone());
        }
        for (spec, index) in self.indexes.iter_mut() {
            let old = old.as_ref().and_then(|o| o.key_in(&name, spec));
            index.move_key(&name, old, meta.key_in(&name, spec));
        }
        self.reselect(&name, old.as_ref(), Some(&meta));
        self.follow_tops(&name, old.as_ref(), Some(&meta));
        self.follow_names(&name, old.is_none().then_some(true));
        // A snapshot places every lock of the table in one turn: a full map grows
        // to the table's size at once instead of doubling on the way, since each
        // doubling holds the old slots beside the new (at 1,000,000 locks the last
        // one held ~140 MB over the live table: the start's RSS peak).
        if self.meta.len() == self.meta.capacity() {
            self.meta.reserve(state.len().saturating_sub(self.meta.len()).max(1));
        }
        self.meta.insert(name, meta);
    }

    /// Forgets `name` everywhere.
    fn unplace(&mut self, name: &str) {
        let Some((name, old)) = self.take(name) else { return };
        for (spec, index) in self.indexes.iter_mut() {
            index.move_key(&name, old.key_in(&name, spec), None);
        }
        self.reselect(&name, Some(&old), None);
        self.follow_tops(&name, Some(&old), None);
        self.follow_names(&name, Some(false));
    }

    /// Removes `name`'s meta, its deadline and its share of the aggregates.
    fn take(&mut self, name: &str) -> Option<(Arc<str>, Meta)> {
        let (name, old) = self.meta.remove_entry(name)?;
        if let Some(at) = old.deadline {
            self.deadlines.remove(&(at, name.clone()));
        }
        if let Some(session) = &old.session {
            if let Some(names) = self.by_session.get_mut(session) {
                names.remove(&name);
                if names.is_empty() {
                    self.by_session.remove(session);
                }
            }
        }
        self.count(&old, -1);
        Some((name, old))
    }

    fn count(&mut self, m: &Meta, delta: i64) {
        let slot = &mut self.by_state[m.state as usize];
        *slot = slot.saturating_add_signed(delta);
        if let Some(s) = &m.service {
            let n = self.services.entry(s.clone()).or_default();
            *n = n.saturating_add_signed(delta);
            if *n == 0 {
                self.services.remove(s);
            }
        }
        self.aggregates_touched = true;
    }

    /// How many locks session `id` holds.
    pub fn locks_of_session(&self, id: &str) -> u64 {
        self.by_session.get(id).map_or(0, |s| s.len() as u64)
    }

    /// The names of the locks session `id` holds.
    pub fn lock_names_of_session(&self, id: &str) -> Vec<String> {
        self.by_session
            .get(id)
            .map_or_else(Vec::new, |s| s.iter().map(|n| n.to_string()).collect())
    }

    /// Counts per state (cheap: no services).
    pub fn counts(&self) -> Counts {
        let mut c = Counts {
            held: self.meta.len() as u64,
            waiters: self.waiters,
            ..Counts::default()
        };
        for s in RowState::ALL {
            c.add(s, self.by_state[s as usize] as i64);
        }
        c
    }

    /// The oldest `acquired_at` among held locks (malformed and foreign ones have none), for
    /// `/metrics`. Read from the default view's index, which always exists and
    /// orders by (state, `acquired_at`): each state's oldest lock is the first
    /// of its run, so this is one lookup per state, O(log n), never a scan.
    pub fn oldest_acquired_at(&self) -> Option<Millis> {
        let index = self.indexes.get(&IndexSpec::default_view())?;
        debug_assert_eq!(IndexSpec::default_view().key, SortKey::Severity);
        let from: Arc<str> = Arc::from("");
        RowState::ALL
            .into_iter()
            .filter(|s| !matches!(s, RowState::Malformed | RowState::Foreign))
            .filter_map(|s| {
                let state = s as i64;
                let first = index.set.get_index(index.set.rank(&(state, i64::MIN, from.clone())))?;
                // Severity keys are (state, acquired_at); no time sorts as i64::MAX.
                (first.0 == state && first.1 != i64::MAX).then_some(first.1)
            })
            .min()
    }

    /// The fleet's headline numbers.
    pub fn aggregates(&self) -> Aggregates {
        let mut services: Vec<(String, u64)> = self.services.iter().map(|(k, v)| (k.to_string(), *v)).collect();
        services.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        let service_count = services.len() as u64;
        services.truncate(TOP_SERVICES);
        Aggregates {
            counts: self.counts(),
            services,
            service_count,
        }
    }
}

#[cfg(test)]
mod tests;
