//! What a PostgreSQL advisory lock's page shows beyond the common foreign
//! fields ([`super::FamilyDetail::PgAdvisory`]): its key, its level, the
//! backends holding and waiting for it, the waits-for cycle it is on, and why
//! it may be stranded. Read from `pg_locks` joined with `pg_stat_activity` by
//! the store's `pg_advisory` observer, one poll at a time.

use serde::{Deserialize, Serialize};

use crate::time::{absolute_and_relative, human_duration, Millis};

/// One advisory lock as the last poll read it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PgAdvisoryLock {
    pub key: AdvisoryKey,
    /// `ExclusiveLock` or `ShareLock` (`pg_advisory_lock_shared`), as held.
    pub mode: String,
    pub level: LockLevel,
    /// The backends holding it (several only for a shared lock); the first is
    /// the one the lock's fence names and a terminate acts on.
    pub holders: Vec<PgBackend>,
    /// The backends waiting for it (`granted = false`), longest waiting first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub waiters: Vec<PgBackend>,
    /// Why it may be stranded (`None`: no sign of it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stranded: Option<String>,
    /// The waits-for cycle its holder or a waiter is on, in order (each step
    /// waits for the next, the last for the first); empty: none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cycle: Vec<CycleStep>,
    /// How often the fleet is polled (ms): "polled every 1 s".
    pub poll_ms: u64,
    /// The poll read more than this many advisory lock rows and shows only
    /// that many (`None`: it read them all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub truncated_at: Option<u32>,
}

/// An advisory lock's key, as `pg_locks` tells it (`objsubid`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AdvisoryKey {
    /// `pg_advisory_lock(bigint)`: `objsubid = 1`, `classid << 32 | objid`.
    Bigint(i64),
    /// `pg_advisory_lock(int4, int4)`: `objsubid = 2`, `classid`, `objid`.
    Pair(i32, i32),
}

impl std::fmt::Display for AdvisoryKey {
    /// `KEY` or `K1:K2`: the lock's name when no mapping names it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AdvisoryKey::Bigint(k) => write!(f, "{k}"),
            AdvisoryKey::Pair(a, b) => write!(f, "{a}:{b}"),
        }
    }
}

/// Session- or transaction-level. `pg_locks` does not say: a lock is known to
/// be session-level when its holder held it outside a transaction, or across
/// two of its transactions; while only ever seen inside one transaction it is
/// either (a transaction-level lock ends with that transaction).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "level")]
pub enum LockLevel {
    /// Held outside a transaction, or across two: `how` says which was seen.
    Session { how: String },
    /// Only seen inside one transaction of its holder so far.
    Unknown,
}

/// One backend of `pg_stat_activity`, as a holder or waiter.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PgBackend {
    pub pid: i32,
    /// `backend_start` in unix µs: with the pid, names one backend (a pid is reused).
    pub backend_start_us: i64,
    /// The lockscope session id this backend is shown as (`pid@backend_start_us`).
    pub session: String,
    #[serde(default)]
    pub application_name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usename: Option<String>,
    /// `client_addr` (`None`: a Unix socket, or not readable without `pg_read_all_stats`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_addr: Option<String>,
    /// `xact_start` in unix ms (`None`: not in a transaction).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub xact_start: Option<Millis>,
    /// `state` (`idle`, `active`, `idle in transaction`…; `None`: not readable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_change: Option<Millis>,
    /// The current (or last) query, cut to 1000 bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query: Option<String>,
    /// For a waiter: since when (`pg_locks.waitstart`, else `query_start`), unix ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting_since: Option<Millis>,
    /// `pg_blocking_pids` of this backend (empty: it waits for nothing).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub blocked_by: Vec<i32>,
    /// The backends shown in this fleet (as holders or waiters of advisory
    /// locks) this one waits for, directly or through backends outside it:
    /// the waits-for edges the deadlock view follows beyond advisory waits.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub waits_for: Vec<String>,
    /// Everything else it holds (other advisory keys, relations…): what a
    /// terminate also ends. Cut to 50 entries.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub also_holds: Vec<String>,
}

impl PgBackend {
    /// This backend in a line, for people: pid, application, user, client,
    /// state, start (the lock page, the sessions page and the CLI say it so).
    pub fn line(&self, now: Millis) -> String {
        let app = if self.application_name.is_empty() {
            "no application_name".to_string()
        } else {
            self.application_name.clone()
        };
        let user = self.usename.as_deref().unwrap_or("unknown user");
        let addr = self.client_addr.as_deref().unwrap_or("local socket or hidden");
        let state = match (&self.state, self.state_change) {
            (Some(s), Some(t)) => format!("{s} for {}", human_duration(now - t)),
            (Some(s), None) => s.clone(),
            _ => "state hidden (needs pg_read_all_stats)".into(),
        };
        format!(
            "pid {} — {app}, {user}@{addr}, {state}, backend started {}",
            self.pid,
            absolute_and_relative(self.backend_start_us / 1000, now)
        )
    }
}

/// One backend on a waits-for cycle, and what it waits on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CycleStep {
    pub pid: i32,
    /// What it waits on (`advisory`, `virtualxid`, `transactionid`, `relation`…).
    pub waits_on: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query: Option<String>,
}

impl PgAdvisoryLock {
    /// The holder a terminate acts on.
    pub fn holder(&self) -> Option<&PgBackend> {
        self.holders.first()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::{FamilyDetail, FleetEvent, FleetState, LockBody, LockEntry, Snapshot, Waiter};

    fn lock(name: &str, holder: &str, waits_for: &[&str]) -> LockEntry {
        let backend = PgBackend {
            pid: 1,
            session: holder.into(),
            waits_for: waits_for.iter().map(|s| s.to_string()).collect(),
            ..PgBackend::default()
        };
        LockEntry {
            name: name.into(),
            fence: 1,
            revision: 1,
            body: LockBody::Foreign {
                session: Some(holder.into()),
                written_at: None,
                lease: None,
                proposal: None,
                key: None,
                detail: Some(Box::new(FamilyDetail::PgAdvisory(PgAdvisoryLock {
                    key: AdvisoryKey::Bigint(42),
                    mode: "ExclusiveLock".into(),
                    level: LockLevel::Unknown,
                    holders: vec![backend],
                    waiters: vec![],
                    stranded: None,
                    cycle: vec![],
                    poll_ms: 1000,
                    truncated_at: None,
                }))),
            },
        }
    }

    fn deadlocked(waits_for: &[&str]) -> bool {
        let mut state = FleetState::default();
        state.apply(FleetEvent::Reset(Snapshot {
            revision: 1,
            locks: vec![lock("42", "H", waits_for)],
            waiters: vec![Waiter {
                lock: "42".into(),
                session: "W".into(),
            }],
            ..Snapshot::default()
        }));
        let d = state.deadlocks();
        d.locks.contains("42") && d.sessions.contains("H") && d.sessions.contains("W")
    }

    /// issue 28: "show waits-for chains from `pg_blocking_pids` in lockscope's own deadlock
    /// view, including the cycles it does not report: a `CREATE INDEX CONCURRENTLY` in the
    /// holder's migration waiting for the snapshot of a backend that is itself blocked in
    /// `pg_advisory_lock`".
    #[test]
    fn a_holder_blocked_by_its_own_waiter_outside_advisory_locks_is_a_deadlock() {
        assert!(
            deadlocked(&["W"]),
            "H holds 42, W waits for 42, H waits for W's snapshot"
        );
        assert!(!deadlocked(&[]), "a plain wait is no deadlock");
        assert!(!deadlocked(&["X"]), "H waits for somebody else: a chain");
    }

    #[test]
    fn keys_are_named_as_pg_locks_gives_them() {
        assert_eq!(AdvisoryKey::Bigint(-5).to_string(), "-5");
        assert_eq!(AdvisoryKey::Pair(1, -2).to_string(), "1:-2");
    }
}
