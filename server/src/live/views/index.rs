//! The views' indexes: one per distinct (filter, sort key), how a new one is
//! built (on the hub task for a small fleet, queued and sorted off it for a large
//! one), and the window of a view read from its index.

use std::collections::HashMap;
use std::sync::Arc;

use indexset::BTreeSet as OrderedSet;
use lockscope_model::view::{Filter, SortKey, ViewSpec};
use lockscope_model::FleetState;

use super::{SubId, Views};

/// An index key: the lock's position, then its name.
pub(super) type Key = (i64, i64, Arc<str>);

/// What an index orders: the locks a filter takes, by a sort key (a reversed view
/// reads the same index from the end).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct IndexSpec {
    pub(super) filter: Filter,
    pub(super) key: SortKey,
}

impl IndexSpec {
    pub(super) fn of(spec: &ViewSpec) -> IndexSpec {
        IndexSpec {
            filter: spec.filter.clone(),
            key: spec.sort.key,
        }
    }

    pub(super) fn default_view() -> IndexSpec {
        IndexSpec::of(&ViewSpec::default())
    }
}

pub(super) struct Index {
    pub(super) set: OrderedSet<Key>,
    /// Bumped whenever membership, order, or a member's content changes.
    pub(super) generation: u64,
    pub(super) subscribers: usize,
    /// `Some` while the set is not in service; nobody is sent this index meanwhile.
    pub(super) unbuilt: Option<Unbuilt>,
}

/// An index on its way to service off the hub task (see [`Views::next_build`]).
pub(super) enum Unbuilt {
    /// Waiting for its turn; its keys are not collected yet.
    Queued,
    /// Its keys were collected for build `id`; the locks changed since, each with
    /// the key it had in this index then (`None`: not in it).
    Building {
        id: u64,
        changed: HashMap<Arc<str>, Option<Key>>,
    },
}

impl Index {
    pub(super) fn new(set: OrderedSet<Key>, unbuilt: Option<Unbuilt>) -> Index {
        Index {
            set,
            generation: 1,
            subscribers: 1,
            unbuilt,
        }
    }

    /// Moves `name` from `old` to `new` (either may be absent).
    pub(super) fn move_key(&mut self, name: &Arc<str>, old: Option<Key>, new: Option<Key>) {
        match &mut self.unbuilt {
            None => {}
            // Its keys will be collected as they are then.
            Some(Unbuilt::Queued) => return,
            // The set being built holds the key `name` had at its first change.
            Some(Unbuilt::Building { changed, .. }) => {
                changed.entry(name.clone()).or_insert(old);
                return;
            }
        }
        let was = old.is_some_and(|k| self.set.remove(&k));
        let is = new.is_some_and(|k| self.set.insert(k));
        if was || is {
            self.generation += 1;
        }
    }
}

/// An index's keys, collected in one pass, to be sorted into a set
/// ([`Build::run`]): on the hub task for a small fleet, elsewhere for a large one
/// (handed back to [`Views::install`]).
pub struct Build {
    pub(super) index: IndexSpec,
    pub(super) id: u64,
    pub(super) keys: Vec<Key>,
}

/// Which build a [`Build`] is (to requeue it if it fails).
pub struct BuildId {
    index: IndexSpec,
    id: u64,
}

/// A [`Build`]'s result.
pub struct Built {
    pub(super) index: IndexSpec,
    pub(super) id: u64,
    pub(super) set: OrderedSet<Key>,
}

impl Build {
    pub fn id(&self) -> BuildId {
        BuildId {
            index: self.index.clone(),
            id: self.id,
        }
    }

    pub fn run(mut self) -> Built {
        // Linear when the keys were collected in order (a by-name index).
        self.keys.sort_unstable();
        Built {
            index: self.index,
            id: self.id,
            set: self.keys.into_iter().collect(),
        }
    }
}

/// Indexes of this many locks or more are sorted by a [`Build`] off the hub
/// task, one at a time, so that new views over a large fleet never hold up the
/// frames of the others; smaller ones on the hub task (a few milliseconds).
pub const OFF_TASK_BUILD_FROM: usize = 50_000;

impl Views {
    /// Makes sure the index for `spec` exists and counts one more user of it.
    pub(super) fn attach(&mut self, spec: &ViewSpec) -> IndexSpec {
        let key = IndexSpec::of(spec);
        if let Some(index) = self.indexes.get_mut(&key) {
            index.subscribers += 1;
            return key;
        }
        // A small fleet's index is built here and now; a large one's waits for
        // its turn, so that a burst of new views does not stall this task.
        let index = if self.meta.len() < self.off_task_build_from {
            Index::new(self.collect(None, &key).run().set, None)
        } else {
            self.queued.push_back(key.clone());
            Index::new(OrderedSet::new(), Some(Unbuilt::Queued))
        };
        self.indexes.insert(key.clone(), index);
        key
    }

    /// The keys of every lock `index` takes, from the metas (already placed). With
    /// the table, a name prefix reads only the locks under it, and a by-name index
    /// is collected in the table's (name) order, which the sort only confirms.
    pub(super) fn collect(&mut self, state: Option<&FleetState>, index: &IndexSpec) -> Build {
        let id = self.next_build;
        self.next_build += 1;
        let prefix = index.filter.prefix.as_deref();
        let keys = match state {
            Some(state) if index.key == SortKey::Name || prefix.is_some() => state
                .locks_under(prefix.unwrap_or_default())
                .filter_map(|e| {
                    let (name, meta) = self.meta.get_key_value(e.name.as_str())?;
                    meta.key_in(name, index)
                })
                .collect(),
            _ => self.meta.iter().filter_map(|(n, m)| m.key_in(n, index)).collect(),
        };
        Build {
            index: index.clone(),
            id,
            keys,
        }
    }

    /// Collects the next queued index's keys: to be sorted off the hub task and
    /// handed to [`Views::install`], or, if few enough to sort here, installed at
    /// once (then `None`). One collection per call, so that many queued views
    /// cost the hub one pass over the fleet per turn, not all at once; call again
    /// while [`Views::has_queued`].
    pub fn next_build(&mut self, state: &FleetState) -> Option<Build> {
        let spec = loop {
            let spec = self.queued.pop_front()?;
            if self
                .indexes
                .get(&spec)
                .is_some_and(|i| matches!(i.unbuilt, Some(Unbuilt::Queued)))
            {
                break spec;
            }
            // Dropped since (perhaps made again, and queued again).
        };
        let build = self.collect(Some(state), &spec);
        let index = self.indexes.get_mut(&spec).expect("checked above");
        index.unbuilt = Some(Unbuilt::Building {
            id: build.id,
            changed: HashMap::new(),
        });
        if build.keys.len() >= self.off_task_build_from {
            return Some(build);
        }
        self.install(build.run());
        None
    }

    /// Whether an index waits for [`Views::next_build`].
    pub fn has_queued(&self) -> bool {
        !self.queued.is_empty()
    }

    /// Queues again the index a build was for, if it still waits for that build
    /// (which failed).
    pub fn requeue(&mut self, build: BuildId) {
        let Some(i) = self.indexes.get_mut(&build.index) else {
            return;
        };
        if matches!(i.unbuilt, Some(Unbuilt::Building { id, .. }) if id == build.id) {
            i.unbuilt = Some(Unbuilt::Queued);
            self.queued.push_back(build.index);
        }
    }

    /// Puts a built index in service: the locks changed while it was built are
    /// moved to where they are now, and its viewers are due a frame.
    pub fn install(&mut self, built: Built) {
        let Some(index) = self.indexes.get_mut(&built.index) else {
            return;
        };
        let changed = match index.unbuilt.take() {
            Some(Unbuilt::Building { id, changed }) if id == built.id => changed,
            // A build for an index since dropped (and perhaps made again).
            other => {
                index.unbuilt = other;
                return;
            }
        };
        index.set = built.set;
        for (name, old) in changed {
            let new = self.meta.get(&name).and_then(|m| m.key_in(&name, &built.index));
            index.move_key(&name, old, new);
        }
        index.generation += 1;
    }

    /// Whether subscriber `id`'s view can be shown (its index is not being built).
    pub fn is_ready(&self, id: SubId) -> bool {
        self.subs.get(&id).is_some_and(|s| self.sub_ready(s))
    }

    pub(super) fn index_ready(&self, index: &IndexSpec) -> bool {
        self.indexes.get(index).is_some_and(|i| i.unbuilt.is_none())
    }

    pub(super) fn detach(&mut self, key: &IndexSpec) {
        if let Some(index) = self.indexes.get_mut(key) {
            index.subscribers -= 1;
            if index.subscribers == 0 {
                self.indexes.remove(key);
            }
        }
    }
}

pub(super) struct WindowNow {
    pub(super) total: u64,
    pub(super) offset: u64,
    pub(super) names: Vec<Arc<str>>,
}

/// The rows of `spec`'s window in `index` now. An offset past the end shows the
/// last rows, so a window never empties because the view shrank under it.
/// With `after` (a list API cursor: a key of this index, present or not) the
/// window starts at the first row after that key in view order instead, and
/// is empty past the end: paging stays stable while rows come and go.
pub(super) fn window_of(index: &Index, spec: &ViewSpec, after: Option<&Key>) -> WindowNow {
    let total = index.set.len();
    let limit = spec.limit as usize;
    let offset = match after {
        None => (spec.offset.min(usize::MAX as u64) as usize).min(total.saturating_sub(limit)),
        // Keys before `after` in index order; a reversed view reads from the end.
        Some(key) if spec.sort.reverse => total - index.set.rank(key),
        Some(key) => index.set.rank(key) + usize::from(index.set.contains(key)),
    };
    let end = (offset + limit).min(total);
    let names: Vec<Arc<str>> = if offset >= end {
        Vec::new()
    } else if spec.sort.reverse {
        let mut v: Vec<Arc<str>> = index
            .set
            .range_idx(total - end..total - offset)
            .map(|k| k.2.clone())
            .collect();
        v.reverse();
        v
    } else {
        index.set.range_idx(offset..end).map(|k| k.2.clone()).collect()
    };
    WindowNow {
        total: total as u64,
        offset: offset as u64,
        names,
    }
}
