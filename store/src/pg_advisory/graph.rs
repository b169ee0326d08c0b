//! The waits-for graph of a database's backends, from `pg_blocking_pids`
//! (backend → the backends it waits for, over every heavyweight lock, not
//! only advisory ones): the cycles on it, found with the model's
//! [`Deadlocks`] (Tarjan), each said in order from a backend back to itself;
//! and, for a backend of the fleet, the fleet's backends it waits for through
//! backends outside the fleet ([`waits_for`]), which the model's deadlock
//! view follows.
//!
//! PostgreSQL itself breaks a cycle of lock waits after `deadlock_timeout`;
//! it does not see one that goes through a wait it does not count as a lock
//! wait of the cycle (a `CREATE INDEX CONCURRENTLY` waiting for the snapshot
//! of a backend blocked on an advisory lock the first one holds): both are
//! shown here as soon as a poll reads them.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

use lockscope_model::fleet::pg_advisory::CycleStep;
use lockscope_model::session::Deadlocks;

use super::poll::{BackendRow, Blocked};

/// Every backend on a cycle → that cycle, starting at it.
pub fn cycles(edges: &BTreeMap<i32, Vec<i32>>) -> HashMap<i32, Vec<i32>> {
    let ids: BTreeMap<i32, String> = edges
        .iter()
        .flat_map(|(from, to)| std::iter::once(*from).chain(to.iter().copied()))
        .map(|p| (p, p.to_string()))
        .collect();
    let ids = &ids;
    let waits: Vec<(&str, &str)> = edges
        .iter()
        .flat_map(|(from, to)| to.iter().map(move |t| (ids[from].as_str(), ids[t].as_str())))
        .collect();
    // Each wait is on a "lock" named by the backend waited for, held by it.
    let found = Deadlocks::find(waits.into_iter(), |l: &str| {
        ids.get(&l.parse::<i32>().ok()?).map(String::as_str)
    });
    let on: BTreeSet<i32> = found.sessions.iter().filter_map(|s| s.parse().ok()).collect();
    on.iter()
        .filter_map(|&start| Some((start, path_back(start, edges, &on)?)))
        .collect()
}

/// The shortest way from `start` back to itself inside `on`.
fn path_back(start: i32, edges: &BTreeMap<i32, Vec<i32>>, on: &BTreeSet<i32>) -> Option<Vec<i32>> {
    let mut came_from: HashMap<i32, i32> = HashMap::new();
    let mut queue = VecDeque::from([start]);
    while let Some(node) = queue.pop_front() {
        for &next in edges.get(&node).into_iter().flatten() {
            if !on.contains(&next) {
                continue;
            }
            if next == start {
                let mut path = vec![node];
                let mut at = node;
                while at != start {
                    at = came_from[&at];
                    path.push(at);
                }
                path.reverse();
                return Some(path);
            }
            if let std::collections::hash_map::Entry::Vacant(e) = came_from.entry(next) {
                e.insert(node);
                queue.push_back(next);
            }
        }
    }
    None
}

/// The backends of `shown` that `pid` waits for, directly or through
/// backends outside `shown` (not itself).
pub fn waits_for(pid: i32, edges: &BTreeMap<i32, Vec<i32>>, shown: &BTreeSet<i32>) -> Vec<i32> {
    let mut found = BTreeSet::new();
    let mut visited = BTreeSet::from([pid]);
    let mut queue = VecDeque::from([pid]);
    while let Some(node) = queue.pop_front() {
        for &next in edges.get(&node).into_iter().flatten() {
            if !visited.insert(next) {
                continue;
            }
            if shown.contains(&next) {
                found.insert(next);
            } else {
                queue.push_back(next);
            }
        }
    }
    found.into_iter().collect()
}

/// A cycle said for people: each backend, what it waits on, its query.
pub fn steps(cycle: &[i32], blocked: &[Blocked], backends: &[BackendRow]) -> Vec<CycleStep> {
    cycle
        .iter()
        .map(|&pid| CycleStep {
            pid,
            waits_on: blocked
                .iter()
                .find(|b| b.pid == pid)
                .and_then(|b| b.waits_on.clone())
                .unwrap_or_else(|| "a lock".into()),
            query: backends.iter().find(|b| b.pid == pid).and_then(|b| b.query.clone()),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn edges(e: &[(i32, &[i32])]) -> BTreeMap<i32, Vec<i32>> {
        e.iter().map(|(a, b)| (*a, b.to_vec())).collect()
    }

    #[test]
    fn cycles_are_said_in_order_and_chains_are_not_cycles() {
        let g = edges(&[(1, &[2]), (2, &[3]), (3, &[1]), (4, &[1])]);
        let c = cycles(&g);
        assert_eq!(c[&1], vec![1, 2, 3]);
        assert_eq!(c[&2], vec![2, 3, 1]);
        assert!(!c.contains_key(&4), "4 waits on the cycle without being on it");
        assert!(cycles(&edges(&[(1, &[2]), (2, &[3])])).is_empty());
    }

    #[test]
    fn waits_for_passes_through_backends_outside_the_fleet() {
        // 1 (holder) waits for 9 (not in the fleet), which waits for 2 (a waiter).
        let g = edges(&[(1, &[9]), (9, &[2]), (2, &[1])]);
        let shown = BTreeSet::from([1, 2]);
        assert_eq!(waits_for(1, &g, &shown), vec![2]);
        assert_eq!(waits_for(2, &g, &shown), vec![1]);
        assert!(waits_for(3, &g, &shown).is_empty());
    }
}
