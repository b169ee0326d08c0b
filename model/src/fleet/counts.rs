//! A fleet's headline numbers ([`Counts`]) and its store connection
//! ([`StoreStatus`]).

use serde::{Deserialize, Serialize};

use super::state::RowState;
use crate::time::Millis;

/// A fleet's headline numbers at one instant.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Counts {
    /// Every lock entry, malformed ones included.
    pub held: u64,
    pub overdue: u64,
    pub expired: u64,
    pub malformed: u64,
    /// Held by a session that is gone.
    #[serde(default)]
    pub orphaned: u64,
    /// Held by a blacklisted session.
    #[serde(default)]
    pub blacklisted: u64,
    /// Held by a client of a foreign schema that keeps no times: neither
    /// healthy nor needing attention as far as anyone can tell.
    #[serde(default)]
    pub foreign: u64,
    /// Sessions waiting for a lock.
    pub waiters: u64,
}

impl Counts {
    /// The counter of locks in `state`; `None` for healthy, which is not counted
    /// but derived ([`Counts::of`]).
    fn slot(&mut self, state: RowState) -> Option<&mut u64> {
        match state {
            RowState::Healthy => None,
            RowState::Expired => Some(&mut self.expired),
            RowState::Orphaned => Some(&mut self.orphaned),
            RowState::Blacklisted => Some(&mut self.blacklisted),
            RowState::Overdue => Some(&mut self.overdue),
            RowState::Malformed => Some(&mut self.malformed),
            RowState::Foreign => Some(&mut self.foreign),
        }
    }

    /// Counts one more (or, with -1, one fewer) lock in `state`.
    pub fn add(&mut self, state: RowState, delta: i64) {
        if let Some(slot) = self.slot(state) {
            *slot = slot.saturating_add_signed(delta);
        }
    }

    /// Locks in `state` (healthy: the rest of `held`).
    pub fn of(&self, state: RowState) -> u64 {
        // `Counts` is `Copy`: read through the one state-to-field mapping.
        match { *self }.slot(state).copied() {
            Some(n) => n,
            None => self.held.saturating_sub(self.attention()).saturating_sub(self.foreign),
        }
    }

    /// Locks needing someone's attention: every state but healthy and foreign
    /// (a foreign schema's lock has no times to be late by; one whose session
    /// is gone or blacklisted is counted as orphaned or blacklisted).
    pub fn attention(&self) -> u64 {
        self.expired + self.orphaned + self.blacklisted + self.overdue + self.malformed
    }

    /// The most severe state any lock is in (healthy when none needs attention).
    pub fn worst(&self) -> RowState {
        RowState::ALL
            .into_iter()
            .find(|s| *s != RowState::Healthy && self.of(*s) > 0)
            .unwrap_or(RowState::Healthy)
    }
}

/// The connection between the server and one store, on the server's clock.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum StoreStatus {
    /// Not yet connected since the server started.
    Connecting { since: Millis },
    /// Snapshot taken and watch running.
    Live { since: Millis },
    /// The store cannot be reached; the table shows the last known truth.
    Unreachable {
        since: Millis,
        /// One line an on-call engineer can act on: what was tried and what
        /// went wrong at the root ("cannot connect to 127.0.0.1:2379:
        /// connection refused"), never credentials.
        error: String,
        /// The whole chain of errors behind `error`, one a line (shown behind a
        /// disclosure). Empty from a server that did not send it.
        #[serde(default)]
        detail: String,
        retry_at: Millis,
    },
    /// Read and followed as when live (the counts are the truth), but a write
    /// waits longer than the store's busy timeout: another process holds the
    /// database's write lock (an SQLite file in an exclusive transaction).
    /// Admin actions are refused (`503`, nothing done) until it frees up; the
    /// status goes back to `Live` by itself when it does.
    WritesBlocked {
        /// When a write was first seen blocked.
        since: Millis,
        /// One line: what is blocked and why.
        error: String,
    },
}

impl StoreStatus {
    /// Whether the store's state is known now: a live store's counts are the
    /// truth (also while only its writes are blocked); connecting or
    /// unreachable, what is shown is the last known.
    pub fn is_live(&self) -> bool {
        matches!(self, StoreStatus::Live { .. } | StoreStatus::WritesBlocked { .. })
    }
}

impl Default for StoreStatus {
    fn default() -> Self {
        StoreStatus::Connecting { since: 0 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unreachable_status_from_before_the_detail_still_decodes() {
        let old = r#"{"state":"unreachable","since":1,"error":"refused","retry_at":2}"#;
        let s: StoreStatus = serde_json::from_str(old).unwrap();
        assert_eq!(
            s,
            StoreStatus::Unreachable {
                since: 1,
                error: "refused".into(),
                detail: String::new(),
                retry_at: 2
            }
        );
        // docs/api.md: "`unreachable` (`since`, `error`, `detail`, `retry_at`)".
        let json = serde_json::to_value(&s).unwrap();
        for field in ["since", "error", "detail", "retry_at"] {
            assert!(json.get(field).is_some(), "{field} in {json}");
        }
        assert!(!s.is_live() && !StoreStatus::default().is_live());
        // docs/api.md: "or `writes_blocked` (`since`, `error`)".
        let blocked = StoreStatus::WritesBlocked {
            since: 1,
            error: "writes blocked".into(),
        };
        let json = serde_json::to_value(&blocked).unwrap();
        assert_eq!(json["state"], "writes_blocked", "{json}");
        for field in ["since", "error"] {
            assert!(json.get(field).is_some(), "{field} in {json}");
        }
        assert_eq!(serde_json::from_value::<StoreStatus>(json).unwrap(), blocked);
        assert!(StoreStatus::Live { since: 0 }.is_live());
    }
}
