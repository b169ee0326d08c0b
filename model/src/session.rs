//! Sessions and the blacklist as the fleet state keeps them, what a lock's
//! holder looks like from the dashboard ([`Holder`]), the clock-skew estimate,
//! and deadlock detection over the wait-for graph.
//!
//! A session is one worker process's registration (`docs/protocol.md`,
//! "Sessions"). Whether it is gone is decided by the observer, per store, without
//! comparing two hosts' clocks (etcd: its key went with its lease; SQL: no
//! heartbeat seen for its ttl on the observer's own clock); the model only keeps
//! what the observer reported.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::record::{BlacklistRecord, SessionRecord, Stored};
use crate::time::Millis;

/// One session as the store last showed it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SessionEntry {
    /// The session id (the key without `<prefix>sessions/`).
    pub id: String,
    /// Store revision of the value shown (etcd: `mod_revision`; SQL: the
    /// number of the observer's read that found it changed).
    pub revision: i64,
    pub body: Stored<SessionRecord>,
    /// When this server received this value as a change (its own clock), for the
    /// skew estimate; `None` when it came from a snapshot (whose values may be old).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seen_at: Option<Millis>,
}

impl SessionEntry {
    /// Builds an entry from a stored value; one that does not parse is kept as
    /// malformed with its bytes.
    pub fn from_stored(id: String, revision: i64, raw: &[u8], seen_at: Option<Millis>) -> SessionEntry {
        SessionEntry {
            id,
            revision,
            body: Stored::parse(raw),
            seen_at,
        }
    }

    pub fn record(&self) -> Option<&SessionRecord> {
        self.body.value()
    }

    /// The holder's clock minus this server's, as far as one heartbeat can tell:
    /// `heartbeat_at − seen_at`. The heartbeat was written before it was seen, so
    /// the true offset lies between this estimate and the estimate plus the
    /// delivery delay (watch latency on etcd; up to one poll on SQLite).
    pub fn skew_estimate(&self) -> Option<Millis> {
        // Saturating: a stored heartbeat may hold any time.
        Some(self.record()?.heartbeat_at.saturating_sub(self.seen_at?))
    }
}

/// Skew estimates smaller than this are not shown: delivery delay alone makes
/// estimates of a few hundred ms.
pub const SKEW_SHOWN_FROM_MS: Millis = 1000;

/// A blacklisted session, as the store last showed it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct BlacklistEntry {
    pub session: String,
    pub revision: i64,
    pub body: Stored<BlacklistRecord>,
}

impl BlacklistEntry {
    pub fn from_stored(session: String, revision: i64, raw: &[u8]) -> BlacklistEntry {
        BlacklistEntry {
            session,
            revision,
            body: Stored::parse(raw),
        }
    }
}

/// What the dashboard knows of a lock's holder: the part of a lock's state that
/// comes from its session.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum Holder {
    /// The store keeps no sessions (a foreign table), or the record names none
    /// it could read: liveness comes from the lock's times alone.
    #[default]
    Unknown,
    /// Its session is registered and heartbeating.
    Alive,
    /// Its session is gone: the process died or closed it, and its registration
    /// ran out.
    Gone,
    /// Its session is on the blacklist.
    Blacklisted,
}

impl Holder {
    /// One line for the screen.
    pub fn reason(self) -> &'static str {
        match self {
            Holder::Unknown => "this store keeps no sessions",
            Holder::Alive => "its session is heartbeating",
            Holder::Gone => "its session is gone: the holder stopped heartbeating and its registration ran out",
            Holder::Blacklisted => "its session is blacklisted: it can no longer extend this lock",
        }
    }
}

/// The sessions of one fleet and its blacklist.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Sessions {
    /// `false` for stores that keep no sessions: every holder is [`Holder::Unknown`].
    pub tracked: bool,
    pub sessions: BTreeMap<String, SessionEntry>,
    pub blacklist: BTreeMap<String, BlacklistEntry>,
}

impl Sessions {
    /// What is known of session `id` as a lock holder.
    pub fn holder(&self, id: &str) -> Holder {
        if self.blacklist.contains_key(id) {
            Holder::Blacklisted
        } else if !self.tracked {
            Holder::Unknown
        } else if self.sessions.contains_key(id) {
            Holder::Alive
        } else {
            Holder::Gone
        }
    }
}

/// Sessions and locks on cycles of the wait-for graph: session A waits for a
/// lock held by B, B (perhaps through others) for one held by A. A session
/// waiting for a lock it holds itself is a cycle of one.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Deadlocks {
    pub sessions: BTreeSet<String>,
    /// The locks those sessions hold and wait for each other on.
    pub locks: BTreeSet<String>,
    /// How many separate cycles (strongly connected components of the graph,
    /// a self-wait included) those sessions form.
    pub cycles: usize,
}

impl Deadlocks {
    /// Finds every cycle. `waits`: (waiting session, lock); `holder_of`: the
    /// session holding a lock. Linear in the number of waits (Tarjan's strongly
    /// connected components, iterative so that long chains cannot overflow the
    /// stack).
    pub fn find<'a>(
        waits: impl Iterator<Item = (&'a str, &'a str)>,
        holder_of: impl Fn(&str) -> Option<&'a str>,
    ) -> Deadlocks {
        Deadlocks::find_with(waits, holder_of, std::iter::empty())
    }

    /// [`Deadlocks::find`] with waits-for edges that are no wait on a lock of
    /// the table: `(session, waits for session, lock the first holds)` (a
    /// PostgreSQL backend holding an advisory lock and blocked, through any
    /// other lock, by a backend that waits for it: `CREATE INDEX
    /// CONCURRENTLY` waiting for the snapshot of an advisory lock's waiter).
    pub fn find_with<'a>(
        waits: impl Iterator<Item = (&'a str, &'a str)>,
        holder_of: impl Fn(&str) -> Option<&'a str>,
        direct: impl Iterator<Item = (&'a str, &'a str, &'a str)>,
    ) -> Deadlocks {
        // Edges: waiter -> (holder, lock).
        let mut edges: BTreeMap<&'a str, Vec<(&'a str, &'a str)>> = BTreeMap::new();
        for (session, lock) in waits {
            if let Some(holder) = holder_of(lock) {
                edges.entry(session).or_default().push((holder, lock));
            }
        }
        for (session, blocker, lock) in direct {
            edges.entry(session).or_default().push((blocker, lock));
        }
        let mut index: BTreeMap<&str, (usize, usize)> = BTreeMap::new(); // (index, lowlink)
        let mut on_stack: BTreeSet<&str> = BTreeSet::new();
        let mut stack: Vec<&str> = Vec::new();
        let mut next = 0;
        let mut found = Deadlocks::default();
        // Which cycle (strongly connected component) each session on one is in.
        let mut component_of: BTreeMap<&str, usize> = BTreeMap::new();
        let starts: Vec<&str> = edges.keys().copied().collect();
        for start in starts {
            if index.contains_key(start) {
                continue;
            }
            // Each frame: a node and how many of its edges were followed.
            let mut frames: Vec<(&str, usize)> = vec![(start, 0)];
            index.insert(start, (next, next));
            next += 1;
            stack.push(start);
            on_stack.insert(start);
            while let Some(&mut (node, ref mut i)) = frames.last_mut() {
                let out = edges.get(node).map_or(&[][..], Vec::as_slice);
                if let Some(&(to, _)) = out.get(*i) {
                    *i += 1;
                    match index.get(to) {
                        None => {
                            index.insert(to, (next, next));
                            next += 1;
                            stack.push(to);
                            on_stack.insert(to);
                            frames.push((to, 0));
                        }
                        Some(&(to_index, _)) if on_stack.contains(to) => {
                            let low = &mut index.get_mut(node).expect("visited").1;
                            *low = (*low).min(to_index);
                        }
                        Some(_) => {}
                    }
                    continue;
                }
                frames.pop();
                let (node_index, node_low) = index[node];
                if let Some(&(parent, _)) = frames.last() {
                    let low = &mut index.get_mut(parent).expect("visited").1;
                    *low = (*low).min(node_low);
                }
                if node_low == node_index {
                    let mut component = Vec::new();
                    while let Some(s) = stack.pop() {
                        on_stack.remove(s);
                        component.push(s);
                        if s == node {
                            break;
                        }
                    }
                    let self_loop = out.iter().any(|(to, _)| *to == node);
                    if component.len() > 1 || self_loop {
                        found.cycles += 1;
                        found.sessions.extend(component.iter().map(|s| s.to_string()));
                        component_of.extend(component.iter().map(|s| (*s, node_index)));
                    }
                }
            }
        }
        // A lock is on a cycle when its waiter and its holder are on the same one.
        for (session, out) in &edges {
            if let Some(c) = component_of.get(session) {
                for (holder, lock) in out {
                    if component_of.get(holder) == Some(c) {
                        found.locks.insert(lock.to_string());
                    }
                }
            }
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn find(waits: &[(&'static str, &'static str)], holders: &[(&'static str, &'static str)]) -> Deadlocks {
        let holders: BTreeMap<&str, &str> = holders.iter().copied().collect();
        Deadlocks::find(waits.iter().copied(), |l| holders.get(l).copied())
    }

    fn set(items: &[&str]) -> BTreeSet<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn cycles_of_two_and_three_are_found_and_chains_are_not() {
        // A waits for x (held by B), B waits for y (held by A).
        let d = find(&[("A", "x"), ("B", "y")], &[("x", "B"), ("y", "A")]);
        assert_eq!(d.sessions, set(&["A", "B"]));
        assert_eq!(d.locks, set(&["x", "y"]));
        assert_eq!(d.cycles, 1);
        // A -> B -> C -> A, plus D waiting on the cycle without being on it.
        let d = find(
            &[("A", "x"), ("B", "y"), ("C", "z"), ("D", "x")],
            &[("x", "B"), ("y", "C"), ("z", "A")],
        );
        assert_eq!(d.sessions, set(&["A", "B", "C"]));
        assert_eq!(d.locks, set(&["x", "y", "z"]));
        assert_eq!(d.cycles, 1, "one cycle of three; D only waits on it");
        // A chain is no deadlock: A -> B -> C, C waits for nothing held.
        let d = find(&[("A", "x"), ("B", "y"), ("C", "free")], &[("x", "B"), ("y", "C")]);
        assert_eq!(d, Deadlocks::default());
    }

    #[test]
    fn waiting_for_a_lock_you_hold_is_a_cycle_of_one() {
        let d = find(&[("A", "x")], &[("x", "A")]);
        assert_eq!(d.sessions, set(&["A"]));
        assert_eq!(d.locks, set(&["x"]));
        assert_eq!(d.cycles, 1);
    }

    #[test]
    fn long_chains_do_not_overflow_and_two_cycles_are_both_found() {
        let names: Vec<String> = (0..100_000).map(|i| format!("s{i}")).collect();
        let locks: Vec<String> = (0..100_000).map(|i| format!("l{i}")).collect();
        // s_i waits for l_i held by s_{i+1}; the last holds l_0's... nothing: a chain.
        let waits: Vec<(&str, &str)> = (0..names.len() - 1)
            .map(|i| (names[i].as_str(), locks[i].as_str()))
            .collect();
        let holder = |l: &str| {
            let i: usize = l[1..].parse().ok()?;
            names.get(i + 1).map(String::as_str)
        };
        assert_eq!(Deadlocks::find(waits.iter().copied(), holder), Deadlocks::default());
        let d = find(
            &[("A", "a"), ("B", "b"), ("C", "c"), ("D", "d")],
            &[("a", "B"), ("b", "A"), ("c", "D"), ("d", "C")],
        );
        assert_eq!(d.sessions, set(&["A", "B", "C", "D"]));
        assert_eq!(d.cycles, 2, "A-B and C-D are two cycles");
        // A also waits for c (held by D, on the other cycle): c is on a cycle,
        // but A -> D is an edge between two cycles, not part of either.
        let d = find(
            &[("A", "a"), ("B", "b"), ("C", "c"), ("D", "d"), ("A", "c2")],
            &[("a", "B"), ("b", "A"), ("c", "D"), ("d", "C"), ("c2", "D")],
        );
        assert_eq!(
            d.locks,
            set(&["a", "b", "c", "d"]),
            "c2 joins two cycles but is on neither"
        );
        assert_eq!(d.cycles, 2, "an edge between two cycles does not merge them");
    }

    #[test]
    fn holders() {
        let mut s = Sessions {
            tracked: true,
            ..Sessions::default()
        };
        assert_eq!(s.holder("a"), Holder::Gone);
        s.sessions
            .insert("a".into(), SessionEntry::from_stored("a".into(), 1, b"{}", None));
        assert_eq!(
            s.holder("a"),
            Holder::Alive,
            "a malformed session record is still a registration"
        );
        s.blacklist
            .insert("a".into(), BlacklistEntry::from_stored("a".into(), 2, b"x"));
        assert_eq!(s.holder("a"), Holder::Blacklisted);
        let untracked = Sessions::default();
        assert_eq!(untracked.holder("a"), Holder::Unknown);
    }
}
