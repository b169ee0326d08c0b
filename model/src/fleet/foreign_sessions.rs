//! The sessions of foreign lock families that keep none of lockscope's: a
//! ZooKeeper lock's contenders' sessions (the ephemeral owners of its nodes)
//! and a PostgreSQL advisory lock's backends. The sessions page lists one row
//! for each ([`crate::detail::SessionList::build`]), made here from the lock
//! table alone: what each holds and waits for across the fleet's locks, and
//! what its locks tell of it (a ZooKeeper session's negotiated timeout where
//! the servers said it; a backend's pid, application, user, client address,
//! backend start and state). What no lock tells is unknown.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::fleet::pg_advisory::PgBackend;
use crate::fleet::{FamilyDetail, FleetState, LockBody};

/// The most lock names one row keeps in [`ForeignSession::holds`]
/// (`holds_total` counts them all). Past it the row says "holds a, b, …
/// (and N more)" (docs/operations.md, "PostgreSQL advisory locks"). A fixed
/// const, not a setting: the names are a hover's summary (the lock table
/// filtered by the session lists them all), the count is always whole, and
/// the rows are rebuilt from the lock table on every sessions-page change, so
/// this bounds what a session holding thousands of locks costs each rebuild.
pub const FOREIGN_HOLDS_KEPT: usize = 50;

/// A foreign family's session, as its locks show it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForeignSession {
    pub family: ForeignFamily,
    /// The locks it holds, by name, in name order (at most
    /// [`FOREIGN_HOLDS_KEPT`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub holds: Vec<String>,
    /// How many locks it holds (`holds` may list fewer).
    pub holds_total: u32,
}

/// What kind of session, and what is known of it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ForeignFamily {
    /// A ZooKeeper session (the row's id: its id in hex, `0x…`).
    Zookeeper {
        /// Its negotiated timeout (ms), where the servers' `cons` said it for
        /// a lock it holds (`None`: unknown: ZooKeeper tells a session's
        /// timeout only to its own client).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        timeout_ms: Option<i64>,
    },
    /// A PostgreSQL backend (the row's id: `PID@BACKEND_START_US`), as the
    /// last poll read it.
    PgBackend(Box<PgBackend>),
}

/// Every foreign session of `state`'s ZooKeeper and PostgreSQL advisory
/// locks, by id: every holder's and every waiter's. One pass over the table.
pub fn foreign_sessions(state: &FleetState) -> BTreeMap<String, ForeignSession> {
    let mut out: BTreeMap<String, ForeignSession> = BTreeMap::new();
    let mut add = |id: &str, family: ForeignFamily, holds: Option<&str>| {
        let s = out.entry(id.to_string()).or_insert_with(|| ForeignSession {
            family: family.clone(),
            holds: Vec::new(),
            holds_total: 0,
        });
        // A timeout said for one lock is the session's.
        if let (ForeignFamily::Zookeeper { timeout_ms: None }, ForeignFamily::Zookeeper { timeout_ms: Some(t) }) =
            (&s.family, &family)
        {
            s.family = ForeignFamily::Zookeeper { timeout_ms: Some(*t) };
        }
        if let Some(lock) = holds {
            s.holds_total += 1;
            if s.holds.len() < FOREIGN_HOLDS_KEPT {
                s.holds.push(lock.to_string());
            }
        }
    };
    for e in state.locks() {
        let LockBody::Foreign { detail: Some(d), .. } = &e.body else {
            continue;
        };
        match &**d {
            FamilyDetail::Zookeeper(z) => {
                for (i, node) in z.holding().iter().enumerate() {
                    // The timeout the servers said is the first holder's.
                    let timeout_ms = if i == 0 { z.holder_timeout_ms } else { None };
                    add(&node.session, ForeignFamily::Zookeeper { timeout_ms }, Some(&e.name));
                }
                // Every waiter, also those past the nodes kept.
                for w in state.waiters_of(&e.name) {
                    add(w, ForeignFamily::Zookeeper { timeout_ms: None }, None);
                }
            }
            FamilyDetail::PgAdvisory(pg) => {
                for b in &pg.holders {
                    add(&b.session, ForeignFamily::PgBackend(Box::new(b.clone())), Some(&e.name));
                }
                for b in &pg.waiters {
                    add(&b.session, ForeignFamily::PgBackend(Box::new(b.clone())), None);
                }
            }
            #[allow(unreachable_patterns)]
            _ => {}
        }
    }
    for s in out.values_mut() {
        s.holds.sort();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::pg_advisory::{AdvisoryKey, LockLevel, PgAdvisoryLock};
    use crate::fleet::zookeeper::{ZkLock, ZkNode, ZkRecipe};
    use crate::fleet::{FleetEvent, LockEntry, Snapshot, Waiter};

    fn foreign(name: &str, holder: &str, detail: FamilyDetail) -> LockEntry {
        let mut e = LockEntry::foreign(name.into(), 1, 1, Some(holder.into()), None);
        if let LockBody::Foreign { detail: d, .. } = &mut e.body {
            *d = Some(Box::new(detail));
        }
        e
    }

    fn node(session: &str, sequence: i64) -> ZkNode {
        ZkNode {
            name: format!("lock-{sequence:010}"),
            sequence,
            read: false,
            recipe: ZkRecipe::Recipe,
            session: session.into(),
            czxid: sequence,
            version: 0,
            ctime: 0,
            data: None,
        }
    }

    fn zk(name: &str, sessions: &[&str], timeout: Option<i64>) -> LockEntry {
        let nodes: Vec<ZkNode> = sessions.iter().enumerate().map(|(i, s)| node(s, i as i64)).collect();
        foreign(
            name,
            sessions[0],
            FamilyDetail::Zookeeper(ZkLock {
                path: format!("/locks/{name}"),
                nodes_total: nodes.len() as u32,
                nodes,
                holders: 1,
                holder_timeout_ms: timeout,
            }),
        )
    }

    fn backend(pid: i32, app: &str) -> PgBackend {
        PgBackend {
            pid,
            backend_start_us: 7,
            session: format!("{pid}@7"),
            application_name: app.into(),
            ..PgBackend::default()
        }
    }

    fn pg(name: &str, holder: PgBackend, waiters: Vec<PgBackend>) -> LockEntry {
        foreign(
            name,
            &holder.session.clone(),
            FamilyDetail::PgAdvisory(PgAdvisoryLock {
                key: AdvisoryKey::Bigint(1),
                mode: "ExclusiveLock".into(),
                level: LockLevel::Unknown,
                holders: vec![holder],
                waiters,
                stranded: None,
                cycle: vec![],
                poll_ms: 1000,
                truncated_at: None,
            }),
        )
    }

    fn state(locks: Vec<LockEntry>, waiters: &[(&str, &str)]) -> FleetState {
        let mut s = FleetState::default();
        s.apply(FleetEvent::Reset(Snapshot {
            revision: 1,
            locks,
            waiters: waiters
                .iter()
                .map(|(l, s)| Waiter {
                    lock: l.to_string(),
                    session: s.to_string(),
                })
                .collect(),
            ..Snapshot::default()
        }));
        s
    }

    /// issue 28: "which session holds what across locks (sessions page)"; the timeout
    /// "where known", unknown elsewhere.
    #[test]
    fn a_zookeeper_session_holds_and_waits_across_locks_with_its_timeout_where_said() {
        let s = state(
            vec![
                zk("b", &["0x1", "0x2"], Some(4000)),
                zk("a", &["0x1"], None),
                zk("c", &["0x2"], None),
            ],
            &[("b", "0x2")],
        );
        let got = foreign_sessions(&s);
        assert_eq!(got.keys().collect::<Vec<_>>(), ["0x1", "0x2"]);
        assert_eq!(got["0x1"].holds, ["a", "b"]);
        assert_eq!(got["0x1"].holds_total, 2);
        assert_eq!(got["0x1"].family, ForeignFamily::Zookeeper { timeout_ms: Some(4000) });
        assert_eq!(got["0x2"].holds, ["c"], "it waits for b: no hold");
        assert_eq!(
            got["0x2"].family,
            ForeignFamily::Zookeeper { timeout_ms: None },
            "no server said its timeout: unknown"
        );
    }

    #[test]
    fn a_postgres_backend_is_a_session_holding_or_waiting() {
        let s = state(
            vec![pg("42", backend(10, "migrate"), vec![backend(11, "worker")])],
            &[("42", "11@7")],
        );
        let got = foreign_sessions(&s);
        assert_eq!(got.keys().collect::<Vec<_>>(), ["10@7", "11@7"]);
        assert_eq!(got["10@7"].holds, ["42"]);
        match &got["11@7"].family {
            ForeignFamily::PgBackend(b) => assert_eq!(b.application_name, "worker"),
            other => panic!("{other:?}"),
        }
        assert_eq!(got["11@7"].holds_total, 0);
        let plain = state(vec![LockEntry::foreign("x".into(), 1, 1, Some("s".into()), None)], &[]);
        assert!(foreign_sessions(&plain).is_empty(), "other foreign locks have none");
    }

    /// docs/operations.md: "the locks it holds (the first 50 by name, then "and N
    /// more": fixed, the count is always whole)".
    #[test]
    fn a_session_row_keeps_the_first_50_names_and_counts_them_all() {
        let names: Vec<String> = (0..52).map(|i| format!("lock{i:02}")).collect();
        let s = state(names.iter().map(|n| zk(n, &["0x1"], None)).collect(), &[]);
        let got = &foreign_sessions(&s)["0x1"];
        assert_eq!(got.holds, names[..FOREIGN_HOLDS_KEPT], "the first 50 by name");
        assert_eq!(got.holds_total, 52, "the count is whole");
    }
}
