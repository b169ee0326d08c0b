//! Where a lock stands ([`RowState`]): a pure function of the lock, what is
//! known of its holder's session, and the server's clock.

use serde::{Deserialize, Serialize};

use crate::fleet::{LockBody, LockEntry};
use crate::record::LockRecord;
use crate::session::Holder;
use crate::time::Millis;

/// Where a lock stands, as the table shows and orders it. The declaration order
/// is the severity order: the most urgent first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RowState {
    /// Past `auto_unlock_at`: nobody extended it; the unlocker may release it.
    Expired,
    /// Its holder's session is gone: nobody will extend or release it.
    Orphaned,
    /// Its holder's session is blacklisted: it will not be extended.
    Blacklisted,
    /// Past `alert_at`: held longer than its holder said it would be.
    Overdue,
    /// The stored value is not a record this build can read.
    Malformed,
    /// Held by a client of a foreign schema (ScyllaDB's `tokens` table) that
    /// keeps no times: whether it is overdue or expired is unknown. Its holder's
    /// session still counts: gone or blacklisted wins over this.
    Foreign,
    Healthy,
}

impl RowState {
    pub const ALL: [RowState; 7] = [
        RowState::Expired,
        RowState::Orphaned,
        RowState::Blacklisted,
        RowState::Overdue,
        RowState::Malformed,
        RowState::Foreign,
        RowState::Healthy,
    ];

    /// The lock's liveness: a pure function of the lock, what is known of its
    /// holder's session, and `now` (the server's clock; see `docs/protocol.md`
    /// on skew). When several apply, the most severe wins.
    pub fn of(entry: &LockEntry, holder: Holder, now: Millis) -> RowState {
        match &entry.body {
            LockBody::Malformed { .. } => RowState::Malformed,
            LockBody::Held(r) => RowState::of_record(r, holder, now),
            LockBody::Foreign { session, .. } => RowState::of_foreign(session.is_some(), holder),
        }
    }

    /// A foreign schema's lock: no times to compare, so only its holder's
    /// session (when the row names one) can say more than "held".
    fn of_foreign(names_session: bool, holder: Holder) -> RowState {
        match holder {
            Holder::Gone if names_session => RowState::Orphaned,
            Holder::Blacklisted if names_session => RowState::Blacklisted,
            _ => RowState::Foreign,
        }
    }

    pub fn of_record(r: &LockRecord, holder: Holder, now: Millis) -> RowState {
        if now >= r.auto_unlock_at {
            RowState::Expired
        } else if holder == Holder::Gone {
            RowState::Orphaned
        } else if holder == Holder::Blacklisted {
            RowState::Blacklisted
        } else if now >= r.alert_at {
            RowState::Overdue
        } else {
            RowState::Healthy
        }
    }

    /// The next instant at which [`RowState::of`] changes without the entry
    /// changing, if any.
    pub fn next_change(entry: &LockEntry, now: Millis) -> Option<Millis> {
        let r = entry.record()?;
        if now < r.alert_at {
            Some(r.alert_at)
        } else if now < r.auto_unlock_at {
            Some(r.auto_unlock_at)
        } else {
            None
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            RowState::Expired => "expired",
            RowState::Orphaned => "orphaned",
            RowState::Blacklisted => "blacklisted",
            RowState::Overdue => "overdue",
            RowState::Malformed => "malformed",
            RowState::Foreign => "foreign",
            RowState::Healthy => "healthy",
        }
    }

    pub fn parse(s: &str) -> Option<RowState> {
        RowState::ALL.into_iter().find(|st| st.as_str() == s)
    }

    /// One line for the screen: what this state means.
    pub fn reason(self) -> &'static str {
        match self {
            RowState::Expired => "past auto_unlock_at: not extended by its holder; may be released",
            RowState::Orphaned => "its holder's session is gone: the process died or closed without releasing",
            RowState::Blacklisted => "its holder's session is blacklisted: it will not be extended",
            RowState::Overdue => "past alert_at: held longer than its holder expected",
            RowState::Malformed => "the stored value is not a lock record this build can read",
            RowState::Foreign => "held by a client of a foreign schema (times unknown)",
            RowState::Healthy => "within its expected runtime",
        }
    }
}
