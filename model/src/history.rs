//! Lock history: the events the dashboard remembers after the store forgets
//! (etcd compacts, SQL rows are overwritten), what they are derived from, and
//! how the lock table at an instant is rebuilt from them.
//!
//! The hub derives events from what it is about to apply ([`lock_events`],
//! [`Draft`]); [`HistoryEvent::new`] is the one place an event gets its id, which
//! depends only on what the store said (fleet, kind, lock, fencing token, store
//! revision, session), never on when or by whom it was seen: replicas writing
//! the same history, and a restart replaying a snapshot, add nothing twice.
//! [`Replay`] turns a checkpoint plus the events after it into the table at an
//! instant (time travel). `query`: what a review asks for ([`HistoryQuery`]).

use std::collections::{BTreeMap, BTreeSet, HashSet};

use serde::{Deserialize, Serialize};

use crate::fleet::{LockBody, LockEntry, Waiter};
use crate::record::LockRecord;
use crate::session::Holder;
use crate::time::Millis;

/// Heartbeats are sampled: a lock's `extended` event is recorded when its
/// heartbeat crosses into another period of this length (holder's clock), so a
/// lock heartbeating every second leaves one a minute, and every replica samples
/// the same heartbeats.
pub const EXTEND_SAMPLE_MS: i64 = 60_000;

/// Rows one history query answers at most (exports stream without this limit).
pub const MAX_HISTORY_ROWS: u32 = 10_000;
/// Rows one history query answers when it names no limit.
pub const DEFAULT_HISTORY_ROWS: u32 = 500;
/// Locks (and, separately, waiters) the table at an instant answers at most
/// (`GET /api/v1/fleets/{fleet}/table`): the first by name; `locks_total`
/// and `waiters_total` then say how many there were ([`TableAt::capped`]).
pub const MAX_TABLE_LOCKS: usize = 10_000;

/// What happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum Kind {
    /// A lock was taken (a new fencing token).
    Acquired,
    /// Its holder's heartbeat moved its deadlines (sampled: [`EXTEND_SAMPLE_MS`]).
    Extended,
    /// The lock was deleted while its holder's session was alive (or unknown).
    Released,
    /// The lock went while its holder's session was gone or blacklisted: it ran
    /// out with the session's lease, or was cleaned up after it.
    Expired,
    /// An operator force-released it (actor and reason from the audit).
    ForceReleased,
    /// The unlocker released it past its `auto_unlock_at`.
    AutoReleased,
    /// The lock's value is not a record this build reads.
    Malformed,
    WaitStarted,
    WaitStopped,
    /// A session was blacklisted (actor and reason from the blacklist record).
    Blacklisted,
    Unblacklisted,
    /// The dashboard lost the store (seen by one replica: `actor` names it).
    Unreachable,
    Recovered,
    /// The history is incomplete for the fleet over a window that starts at
    /// `at`: events were lost (the database refused them, the queue was full)
    /// or not watched. `detail` says it in words; `record` holds the window as
    /// a [`Gap`] (JSON). Not tied to a lock: time travel skips it.
    Gap,
}

impl Kind {
    pub const ALL: [Kind; 14] = [
        Kind::Acquired,
        Kind::Extended,
        Kind::Released,
        Kind::Expired,
        Kind::ForceReleased,
        Kind::AutoReleased,
        Kind::Malformed,
        Kind::WaitStarted,
        Kind::WaitStopped,
        Kind::Blacklisted,
        Kind::Unblacklisted,
        Kind::Unreachable,
        Kind::Recovered,
        Kind::Gap,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Acquired => "acquired",
            Kind::Extended => "extended",
            Kind::Released => "released",
            Kind::Expired => "expired",
            Kind::ForceReleased => "force_released",
            Kind::AutoReleased => "auto_released",
            Kind::Malformed => "malformed",
            Kind::WaitStarted => "wait_started",
            Kind::WaitStopped => "wait_stopped",
            Kind::Blacklisted => "blacklisted",
            Kind::Unblacklisted => "unblacklisted",
            Kind::Unreachable => "unreachable",
            Kind::Recovered => "recovered",
            Kind::Gap => "gap",
        }
    }

    pub fn parse(s: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.as_str() == s)
    }

    /// An event that ends an acquisition (lock, fence).
    pub fn ends_hold(self) -> bool {
        matches!(
            self,
            Kind::Released | Kind::Expired | Kind::ForceReleased | Kind::AutoReleased
        )
    }
}

/// One remembered event.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct HistoryEvent {
    /// 32 hex digits, derived from what the store said (see the module docs).
    pub id: String,
    pub fleet: String,
    /// When the dashboard saw it (its own clock, unix ms): the first replica to
    /// record an event sets it.
    pub at: Millis,
    pub kind: Kind,
    pub lock: Option<String>,
    pub session: Option<String>,
    pub owner: Option<String>,
    /// The acquisition's fencing token.
    pub fence: Option<i64>,
    /// The store revision of the change (`None` where the store gave none).
    pub revision: Option<i64>,
    pub service: Option<String>,
    pub host: Option<String>,
    /// Who did it: an operator, `unlocker@REPLICA`, a blacklister, or the
    /// replica that saw the store go.
    pub actor: Option<String>,
    /// A reason, an error, or a note.
    pub detail: String,
    /// Acquired, extended and malformed: the stored lock value as JSON (the
    /// record, or `{"raw":…,"error":…}`); time travel rebuilds rows from it.
    pub record: Option<String>,
}

/// An event before it has its fleet, time and id: what [`lock_events`] and the
/// hub derive.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Draft {
    pub kind: Option<Kind>,
    pub lock: Option<String>,
    pub session: Option<String>,
    pub owner: Option<String>,
    pub fence: Option<i64>,
    pub revision: Option<i64>,
    pub service: Option<String>,
    pub host: Option<String>,
    pub actor: Option<String>,
    pub detail: String,
    pub record: Option<String>,
}

impl HistoryEvent {
    /// The one way an event is built: `draft` seen in `fleet` at `at`.
    pub fn new(fleet: &str, at: Millis, d: Draft) -> HistoryEvent {
        let kind = d.kind.expect("a draft names its kind");
        HistoryEvent {
            id: event_id(fleet, kind, &d),
            fleet: fleet.to_string(),
            at,
            kind,
            lock: d.lock,
            session: d.session,
            owner: d.owner,
            fence: d.fence,
            revision: d.revision,
            service: d.service,
            host: d.host,
            actor: d.actor,
            detail: d.detail,
            record: d.record,
        }
    }
}

/// What identifies an event across replicas and restarts: an acquisition
/// starts once and ends once (so both are keyed by lock and fence alone,
/// whatever revision a replica first saw it at: a restart's snapshot shows a
/// lock at its latest revision); a heartbeat by its revision; a wait by lock,
/// session and the fence it waited on; a store status change by the replica
/// that saw it and its time; a gap by its window (its detail).
fn event_id(fleet: &str, kind: Kind, d: &Draft) -> String {
    let key = match kind {
        k if k.ends_hold() => format!("end\u{0}{:?}\u{0}{:?}", d.lock, d.fence),
        Kind::Acquired => format!("acquired\u{0}{:?}\u{0}{:?}", d.lock, d.fence),
        Kind::Unreachable | Kind::Recovered => format!("{:?}\u{0}{}", d.actor, d.detail),
        Kind::Gap => format!("gap\u{0}{}", d.detail),
        _ => format!(
            "{}\u{0}{:?}\u{0}{:?}\u{0}{:?}\u{0}{:?}",
            kind.as_str(),
            d.lock,
            d.fence,
            d.revision,
            d.session
        ),
    };
    let mut h = Fnv128::default();
    h.write(fleet.as_bytes());
    h.write(&[0]);
    h.write(key.as_bytes());
    format!("{:032x}", h.0)
}

/// FNV-1a, 128 bits: identity, not security (ids are never secret, and a
/// collision of two events of one fleet needs ~2^64 of them).
struct Fnv128(u128);

impl Default for Fnv128 {
    fn default() -> Self {
        Fnv128(0x6c62272e07bb014262b821756295c58d)
    }
}

impl Fnv128 {
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= *b as u128;
            self.0 = self.0.wrapping_mul(0x0000000001000000000000000000013B);
        }
    }
}

/// What the hub knows about a lock's removal beyond the store's delete: an
/// operator's or the unlocker's release it was told of.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReleaseNote {
    pub kind: Kind,
    pub actor: String,
    pub reason: String,
}

impl ReleaseNote {
    /// `end` (a lock's end event) credited to this release: its kind, actor
    /// and reason.
    pub fn credit(&self, end: &mut Draft) {
        end.kind = Some(self.kind);
        end.actor = Some(self.actor.clone());
        end.detail = self.reason.clone();
    }
}

/// The events of one lock changing from `before` to `after` (either absent;
/// `removed_at` the store revision of a delete), `holder` being what is known of
/// `before`'s session. Every end is uncredited: the hub credits an operator's
/// or the unlocker's release with [`ReleaseNote::credit`]. Pure: the hub calls
/// it before applying the store's change.
pub fn lock_events(
    before: Option<&LockEntry>,
    after: Option<&LockEntry>,
    removed_at: Option<i64>,
    holder: Holder,
) -> Vec<Draft> {
    let mut out = Vec::new();
    let same_acquisition = matches!((before, after), (Some(b), Some(a)) if a.fence == b.fence);
    if let (Some(b), false) = (before, same_acquisition) {
        let (kind, detail) = match holder {
            Holder::Gone | Holder::Blacklisted => (
                Kind::Expired,
                format!("the holder's session was {holder:?}").to_lowercase(),
            ),
            _ => (Kind::Released, String::new()),
        };
        out.push(Draft {
            kind: Some(kind),
            actor: None,
            detail,
            revision: after.map(|a| a.revision).or(removed_at),
            record: None,
            ..about(b)
        });
    }
    let Some(a) = after else { return out };
    let kind = match (&a.body, before.filter(|_| same_acquisition)) {
        // Still unreadable: nothing new to say.
        (LockBody::Malformed { .. }, Some(b)) if matches!(b.body, LockBody::Malformed { .. }) => return out,
        (LockBody::Malformed { .. }, _) => Kind::Malformed,
        (LockBody::Held(_) | LockBody::Foreign { .. }, None) => Kind::Acquired,
        (LockBody::Held(r), Some(b)) => match b.record() {
            Some(old) if a.revision <= b.revision || period(old) == period(r) => return out,
            // A new heartbeat period, or a record again after a malformed value.
            _ => Kind::Extended,
        },
        // A foreign row keeps no heartbeat or deadlines: a rewrite of the same
        // row (a newer write time) extends nothing anyone can see. Only a change
        // of what is known (another session, or a foreign row again after
        // another body) is recorded, so a replay shows the body as it stands.
        (LockBody::Foreign { session, .. }, Some(b)) => match &b.body {
            LockBody::Foreign { session: old, .. } if a.revision <= b.revision || old == session => return out,
            _ => Kind::Extended,
        },
    };
    out.push(Draft {
        kind: Some(kind),
        detail: match &a.body {
            LockBody::Malformed { error, .. } => error.clone(),
            LockBody::Held(_) | LockBody::Foreign { .. } => String::new(),
        },
        ..about(a)
    });
    out
}

fn period(r: &LockRecord) -> i64 {
    r.heartbeat_at.div_euclid(EXTEND_SAMPLE_MS)
}

/// An entry's identity and holder fields, and its value as JSON. A foreign
/// schema's lock names its session only: owner, service and host stay empty.
fn about(e: &LockEntry) -> Draft {
    let r = e.record();
    Draft {
        lock: Some(e.name.clone()),
        fence: Some(e.fence),
        revision: Some(e.revision),
        session: e.holder_session().map(str::to_string),
        owner: r.map(|r| r.owner.clone()),
        service: r.map(|r| r.service.to_string()),
        host: r.map(|r| r.host.to_string()),
        record: Some(serde_json::to_string(&e.body).expect("lock bodies serialise")),
        ..Draft::default()
    }
}

/// A session starting or stopping to wait for `lock`, held at `fence` (if held).
pub fn wait_event(w: &Waiter, started: bool, fence: Option<i64>) -> Draft {
    Draft {
        kind: Some(if started { Kind::WaitStarted } else { Kind::WaitStopped }),
        lock: Some(w.lock.clone()),
        session: Some(w.session.clone()),
        fence,
        ..Draft::default()
    }
}

/// The lock table as it stood at an instant, rebuilt from history.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TableAt {
    pub fleet: String,
    pub at: Millis,
    pub locks: Vec<LockEntry>,
    pub waiters: Vec<Waiter>,
    /// The checkpoint it started from (`None`: the start of history).
    pub checkpoint: Option<Millis>,
    /// Events replayed after the checkpoint.
    pub replayed: u64,
    /// Set when an answer was cut to [`MAX_TABLE_LOCKS`] locks: how many the
    /// table held (never in a checkpoint).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub locks_total: Option<u64>,
    /// Likewise for the waiters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiters_total: Option<u64>,
}

impl TableAt {
    /// The table with at most `max` locks and `max` waiters (the first, by
    /// name), saying how many it had when it had more.
    pub fn capped(mut self, max: usize) -> TableAt {
        if self.locks.len() > max {
            self.locks_total = Some(self.locks.len() as u64);
            self.locks.truncate(max);
        }
        if self.waiters.len() > max {
            self.waiters_total = Some(self.waiters.len() as u64);
            self.waiters.truncate(max);
        }
        self
    }
}

/// A lock table being rebuilt: a checkpoint, then events in the order they were
/// seen. Tolerant of the order replicas recorded them in, within one replay: an
/// end names the acquisition it ends, and an acquisition already ended, or
/// older than the one shown, changes nothing; so replaying events again that
/// the checkpoint already holds is harmless (the server starts a minute before
/// its checkpoint, for ends recorded on the other side of it).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Replay {
    pub locks: BTreeMap<String, LockEntry>,
    pub waiters: BTreeSet<Waiter>,
    #[serde(skip)]
    ended: HashSet<(String, i64)>,
}

impl Replay {
    pub fn apply(&mut self, ev: &HistoryEvent) {
        let Some(lock) = &ev.lock else { return };
        let fence = ev.fence.unwrap_or(0);
        match ev.kind {
            Kind::Acquired | Kind::Extended | Kind::Malformed => {
                if self.ended.contains(&(lock.clone(), fence)) {
                    return;
                }
                let body = ev
                    .record
                    .as_deref()
                    .and_then(|r| serde_json::from_str::<LockBody>(r).ok());
                let Some(body) = body else { return };
                let newer = self
                    .locks
                    .get(lock)
                    .is_none_or(|cur| (cur.fence, cur.revision) <= (fence, ev.revision.unwrap_or(0)));
                if newer {
                    self.locks.insert(
                        lock.clone(),
                        LockEntry {
                            name: lock.clone(),
                            fence,
                            revision: ev.revision.unwrap_or(0),
                            body,
                        },
                    );
                }
            }
            k if k.ends_hold() => {
                self.ended.insert((lock.clone(), fence));
                if self.locks.get(lock).is_some_and(|cur| cur.fence == fence) {
                    self.locks.remove(lock);
                }
                self.waiters
                    .retain(|w| &w.lock != lock || ev.session.as_deref() != Some(&w.session));
            }
            Kind::WaitStarted | Kind::WaitStopped => {
                let Some(session) = &ev.session else { return };
                let w = Waiter {
                    lock: lock.clone(),
                    session: session.clone(),
                };
                if ev.kind == Kind::WaitStarted {
                    self.waiters.insert(w);
                } else {
                    self.waiters.remove(&w);
                }
            }
            _ => {}
        }
    }

    /// The table, for a checkpoint or an answer.
    pub fn table(&self, fleet: &str, at: Millis, checkpoint: Option<Millis>, replayed: u64) -> TableAt {
        TableAt {
            fleet: fleet.to_string(),
            at,
            locks: self.locks.values().cloned().collect(),
            waiters: self.waiters.iter().cloned().collect(),
            checkpoint,
            replayed,
            ..TableAt::default()
        }
    }

    /// Starts from a checkpoint's table.
    pub fn from_table(t: TableAt) -> Replay {
        Replay {
            locks: t.locks.into_iter().map(|e| (e.name.clone(), e)).collect(),
            waiters: t.waiters.into_iter().collect(),
            ended: HashSet::new(),
        }
    }
}

mod gap;
pub use gap::{Gap, NotRecording};
mod query;
pub use query::{parse_duration, parse_when, HistoryQuery, WHEN_HELP};

#[cfg(test)]
mod tests;
