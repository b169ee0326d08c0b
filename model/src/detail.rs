//! What the lock detail page and the sessions page show, as the hub builds
//! them from the fleet state (the pages render these on the server and keep
//! them live over the websocket).

use serde::{Deserialize, Serialize};

use crate::fleet::foreign_sessions::ForeignSession;
use crate::fleet::{FleetState, LeaseInfo, LockEntry};
use crate::session::{BlacklistEntry, Holder, SessionEntry};
use crate::time::Millis;

/// Most sessions one sessions page lists (the most urgent first).
pub const MAX_SESSION_ROWS: usize = 500;

/// One lock, in full.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LockDetail {
    pub name: String,
    /// `None`: the lock is not held (released, or never taken).
    pub entry: Option<LockEntry>,
    pub holder: Holder,
    pub deadlock: bool,
    /// The holder's session as the store shows it (`None`: gone, or a store
    /// without sessions).
    pub session: Option<SessionEntry>,
    pub blacklist: Option<BlacklistEntry>,
    /// In the order they will get the lock where the store says it (an etcd
    /// mutex: create revision), else by session.
    pub waiters: Vec<WaiterDetail>,
    /// The fleet's store revision when this was built.
    pub store_revision: i64,
}

/// One session waiting for a lock.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WaiterDetail {
    pub session: String,
    /// `service@host:pid` from the waiter's session record, when known.
    pub who: Option<String>,
    /// When it began waiting, on this server's clock: when its etcd mutex key
    /// was seen created, else when this server first saw it waiting.
    pub since: Millis,
    /// It was already waiting when this server connected to the store, so it
    /// has waited at least since `since`.
    pub at_least: bool,
    pub deadlock: bool,
}

/// One row of the sessions page.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SessionRow {
    pub id: String,
    /// `None`: the session is gone (listed because it is blacklisted).
    pub entry: Option<SessionEntry>,
    pub holder: Holder,
    pub locks_held: u64,
    pub waiting_for: Vec<String>,
    pub blacklist: Option<BlacklistEntry>,
    pub deadlock: bool,
    /// An etcd native mutex fleet's session is a lease: what `LeaseTimeToLive`
    /// last said of it (its TTL left and granted, the keys on it), where read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<LeaseInfo>,
    /// The row is an etcd lease (`entry` is then `None`: a lease is no
    /// lockscope session record).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub is_lease: bool,
    /// A ZooKeeper session or a PostgreSQL backend (`entry` is then `None`):
    /// what the fleet's locks tell of it, and the locks it holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub foreign: Option<Box<ForeignSession>>,
}

/// The sessions page: live sessions, and blacklisted ones even when gone.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SessionList {
    /// Every session the fleet knows (may exceed `rows.len()`).
    pub total: u64,
    pub rows: Vec<SessionRow>,
    /// `false` for a store that keeps no sessions.
    pub tracked: bool,
}

impl LockDetail {
    /// The lock named `name` in `state`; `since` gives when a waiter was first
    /// seen (and whether it was already waiting at connect).
    pub fn build(state: &FleetState, name: &str, since: impl Fn(&str) -> (Millis, bool)) -> LockDetail {
        let entry = state.get(name).cloned();
        let sessions = state.sessions();
        let holder_id = entry.as_ref().and_then(|e| e.holder_session()).map(str::to_string);
        let deadlocks = state.deadlocks();
        let mut waiters: Vec<(String, WaiterDetail)> = state
            .waiters_of(name)
            .map(|w| {
                let (since, at_least) = since(w);
                let detail = WaiterDetail {
                    session: w.to_string(),
                    who: sessions.sessions.get(w).and_then(|s| s.record()).map(|r| r.holder()),
                    since,
                    at_least,
                    deadlock: deadlocks.sessions.contains(w),
                };
                (w.to_string(), detail)
            })
            .collect();
        // An etcd mutex grants its waiters in create-revision order, not by session.
        let created = crate::fleet::mutex_queue::order_waiters(entry.as_ref(), &mut waiters);
        LockDetail {
            name: name.to_string(),
            holder: entry.as_ref().map_or(Holder::Unknown, |e| state.holder(e)),
            deadlock: deadlocks.locks.contains(name),
            session: holder_id.as_ref().and_then(|id| sessions.sessions.get(id).cloned()),
            blacklist: holder_id.as_ref().and_then(|id| sessions.blacklist.get(id).cloned()),
            waiters: waiters
                .into_iter()
                .zip(created)
                .map(|((_, mut w), created)| {
                    // The wait began when the waiter's key was written, where known.
                    if let Some(at) = created {
                        (w.since, w.at_least) = (at, false);
                    }
                    w
                })
                .collect(),
            entry,
            store_revision: state.revision(),
        }
    }
}

impl SessionList {
    /// Every session of `state`, blacklisted first, then by service, host, id;
    /// `locks_held` counts the locks each holds.
    pub fn build(state: &FleetState, locks_held: impl Fn(&str) -> u64) -> SessionList {
        let sessions = state.sessions();
        let mut waiting: std::collections::HashMap<&str, Vec<String>> = Default::default();
        for w in state.waiters() {
            waiting.entry(w.session.as_str()).or_default().push(w.lock.clone());
        }
        let deadlocks = state.deadlocks();
        // Blacklisted sessions that are gone still belong on the page.
        let gone_blacklisted = sessions
            .blacklist
            .keys()
            .filter(|id| !sessions.sessions.contains_key(*id))
            .map(|id| (id.clone(), None));
        let mut rows: Vec<SessionRow> = sessions
            .sessions
            .values()
            .map(|e| (e.id.clone(), Some(e.clone())))
            .chain(gone_blacklisted)
            .map(|(id, entry)| SessionRow {
                holder: sessions.holder(&id),
                locks_held: locks_held(&id),
                waiting_for: waiting.remove(id.as_str()).unwrap_or_default(),
                blacklist: sessions.blacklist.get(&id).cloned(),
                deadlock: deadlocks.sessions.contains(&id),
                entry,
                id,
                lease: None,
                is_lease: false,
                foreign: None,
            })
            .collect();
        // A store without lockscope sessions whose locks are etcd mutexes:
        // their leases are its sessions, one row each.
        if !sessions.tracked {
            for (id, lease) in crate::fleet::mutex_queue::lease_sessions(state) {
                rows.push(SessionRow {
                    holder: Holder::Unknown,
                    locks_held: locks_held(&id),
                    waiting_for: waiting.remove(id.as_str()).unwrap_or_default(),
                    blacklist: None,
                    deadlock: deadlocks.sessions.contains(&id),
                    entry: None,
                    lease,
                    is_lease: true,
                    foreign: None,
                    id,
                });
            }
            // ZooKeeper sessions and PostgreSQL backends: one row each.
            for (id, foreign) in crate::fleet::foreign_sessions::foreign_sessions(state) {
                rows.push(SessionRow {
                    holder: Holder::Unknown,
                    locks_held: u64::from(foreign.holds_total),
                    waiting_for: waiting.remove(id.as_str()).unwrap_or_default(),
                    blacklist: None,
                    deadlock: deadlocks.sessions.contains(&id),
                    entry: None,
                    lease: None,
                    is_lease: false,
                    foreign: Some(Box::new(foreign)),
                    id,
                });
            }
        }
        let key = |r: &SessionRow| {
            let rec = r.entry.as_ref().and_then(|e| e.record());
            (
                r.blacklist.is_none(),
                !r.deadlock,
                rec.map(|r| r.service.clone()),
                rec.map(|r| r.host.clone()),
                r.id.clone(),
            )
        };
        rows.sort_by_cached_key(key);
        let total = rows.len() as u64;
        rows.truncate(MAX_SESSION_ROWS);
        SessionList {
            total,
            rows,
            tracked: sessions.tracked,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::{FleetEvent, LockBody, Snapshot, Waiter};
    use crate::record::{sample, BlacklistRecord, RECORD_VERSION};

    fn session(id: &str) -> SessionEntry {
        let raw = format!(
            r#"{{"v":1,"session":"{id}","service":"svc-{id}","host":"h","pid":9,"started_at":0,"heartbeat_at":0}}"#
        );
        SessionEntry::from_stored(id.into(), 1, raw.as_bytes(), None)
    }

    fn held(name: &str, session: &str) -> LockEntry {
        let mut r = sample("o");
        r.session = session.into();
        LockEntry {
            name: name.into(),
            fence: 3,
            revision: 3,
            body: LockBody::Held(r),
        }
    }

    fn state() -> FleetState {
        let mut s = FleetState::default();
        let bl = BlacklistRecord {
            v: RECORD_VERSION,
            session: "ghost".into(),
            by: "oncall".into(),
            reason: "stuck".into(),
            at: 1,
        };
        s.apply(FleetEvent::Reset(Snapshot {
            revision: 7,
            locks: vec![held("x", "a"), held("y", "b")],
            waiters: vec![
                Waiter {
                    lock: "x".into(),
                    session: "b".into(),
                },
                Waiter {
                    lock: "y".into(),
                    session: "a".into(),
                },
            ],
            sessions: Some(vec![session("a"), session("b")]),
            blacklist: vec![BlacklistEntry::from_stored(
                "ghost".into(),
                2,
                &serde_json::to_vec(&bl).unwrap(),
            )],
        }));
        s
    }

    #[test]
    fn a_lock_in_full() {
        let s = state();
        let d = LockDetail::build(&s, "x", |_| (100, true));
        assert_eq!(d.entry.as_ref().unwrap().fence, 3);
        assert_eq!(d.holder, Holder::Alive);
        assert_eq!(d.session.as_ref().unwrap().id, "a");
        assert!(d.deadlock, "a waits for y held by b, b for x held by a");
        assert_eq!(d.waiters.len(), 1);
        assert_eq!(d.waiters[0].who.as_deref(), Some("svc-b@h:9"));
        assert!(d.waiters[0].at_least && d.waiters[0].deadlock);
        assert_eq!(d.store_revision, 7);
        let free = LockDetail::build(&s, "nope", |_| (0, false));
        assert!(free.entry.is_none() && free.waiters.is_empty());
    }

    #[test]
    fn sessions_blacklisted_first_gone_ones_included() {
        let s = state();
        let list = SessionList::build(&s, |id| if id == "a" { 1 } else { 0 });
        let ids: Vec<&str> = list.rows.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(ids, ["ghost", "a", "b"]);
        assert_eq!(list.rows[0].holder, Holder::Blacklisted);
        assert!(list.rows[0].entry.is_none(), "gone, listed for its blacklist entry");
        assert_eq!(list.rows[1].locks_held, 1);
        assert_eq!(list.rows[1].waiting_for, ["y"]);
        assert!(list.rows[1].deadlock);
        assert_eq!(list.total, 3);
        assert!(list.tracked);
    }
}
