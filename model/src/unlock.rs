//! The unlocker's decision: when a held lock is released on its holder's
//! behalf, and what the unlocker reports about the fleet it watches.
//!
//! A lock's times (`alert_at`, `auto_unlock_at`) are on its holder's clock; the
//! unlocker compares them with its own. Clocks disagree, so a lock is released
//! only once `auto_unlock_at` plus a grace margin has passed on the unlocker's
//! clock: a holder whose clock runs behind by less than the grace is never cut
//! short, and one whose clock runs ahead is released late, never early. Whether
//! the holder's session looks gone or is blacklisted changes nothing: every lock
//! runs until its own `auto_unlock_at` — never earlier on a guess.

use serde::{Deserialize, Serialize};

use crate::fleet::{LockBody, LockEntry};
use crate::time::Millis;

/// The default grace margin (see `docs/operations.md`, "The unlocker").
pub const DEFAULT_GRACE_MS: i64 = 15_000;

/// What the unlocker makes of one lock at one instant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Nothing to do, nothing to report.
    Keep,
    /// Past `alert_at`: reported (alerts, metrics), never released.
    Overdue,
    /// Past `auto_unlock_at` but within the grace margin: reported as expired,
    /// released at `release_at`.
    Expired { release_at: Millis },
    /// Past `auto_unlock_at` plus grace: release it (by its fencing token).
    Release { release_at: Millis },
    /// Unreadable: never released automatically (nobody knows its times).
    Malformed,
    /// Written by a client of a foreign schema (ScyllaDB's `tokens` table):
    /// never released automatically, whatever its holder's session looks like.
    /// Its auto-unlock time is unknown; the published schema's own housekeeping
    /// releases such locks.
    Foreign,
}

/// The verdict on `entry` at `now` (the unlocker's clock) with `grace_ms`.
pub fn verdict(entry: &LockEntry, now: Millis, grace_ms: i64) -> Verdict {
    let r = match &entry.body {
        LockBody::Held(r) => r,
        LockBody::Malformed { .. } => return Verdict::Malformed,
        LockBody::Foreign { .. } => return Verdict::Foreign,
    };
    let release_at = r.auto_unlock_at.saturating_add(grace_ms);
    if now >= release_at {
        Verdict::Release { release_at }
    } else if now >= r.auto_unlock_at {
        Verdict::Expired { release_at }
    } else if now >= r.alert_at {
        Verdict::Overdue
    } else {
        Verdict::Keep
    }
}

/// How the unlocker of a fleet runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum Mode {
    /// Reports overdue and expired locks, releases nothing.
    #[default]
    Off,
    /// Also says what it would release and when, and releases nothing.
    DryRun,
    /// Releases expired locks once the grace margin has passed, when this
    /// replica holds the fleet's unlocker role.
    On,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Off => "off",
            Mode::DryRun => "dry-run",
            Mode::On => "on",
        }
    }

    pub fn parse(s: &str) -> Option<Mode> {
        [Mode::Off, Mode::DryRun, Mode::On]
            .into_iter()
            .find(|m| m.as_str() == s)
    }
}

/// A lock the unlocker would release (dry-run) or is about to.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Pending {
    pub name: String,
    pub fence: i64,
    /// When it is (or was) due, on the unlocker's clock.
    pub release_at: Millis,
}

/// What a fleet's unlocker is doing, for the overview.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct UnlockerStatus {
    pub mode: Mode,
    /// This replica's name.
    pub replica: String,
    /// The replica holding the fleet's unlocker role, if any is known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active: Option<String>,
    /// The active replica's term (grows with every election).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub term: Option<i64>,
    /// This replica is the active unlocker.
    #[serde(default)]
    pub leading: bool,
    pub grace_ms: i64,
    /// Locks released by this replica since it started.
    #[serde(default)]
    pub released: u64,
    /// The next locks due (dry-run: what it would release, and when), soonest
    /// first, at most [`MAX_PENDING`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending: Vec<Pending>,
    /// Why it is not running, or its last failure. With mode `off`: why the
    /// unlocker never acts on this fleet ("the unlocker never acts on Redis
    /// locks: they end with their TTL"; a read-only store), whatever mode was
    /// configured — the overview says "never acts here" and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}

impl UnlockerStatus {
    /// Why the unlocker never acts on this fleet, if it never does (see
    /// [`UnlockerStatus::problem`]).
    pub fn never_acts(&self) -> Option<&str> {
        match self.mode {
            Mode::Off => self.problem.as_deref(),
            _ => None,
        }
    }
}

/// The most pending locks a status lists.
pub const MAX_PENDING: usize = 10;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::LockRecord;

    fn lock(alert_at: Millis, auto_unlock_at: Millis) -> LockEntry {
        let mut r: LockRecord = serde_json::from_str(
            r#"{"v":1,"owner":"o","session":"s","service":"svc","host":"h","pid":1,"purpose":"p",
                "backtrace":[],"acquired_at":0,"expected_runtime_ms":1000,"alert_at":0,
                "auto_unlock_at":0,"heartbeat_at":0}"#,
        )
        .unwrap();
        r.alert_at = alert_at;
        r.auto_unlock_at = auto_unlock_at;
        LockEntry {
            name: "l".into(),
            fence: 1,
            revision: 1,
            body: LockBody::Held(r),
        }
    }

    #[test]
    fn released_only_past_auto_unlock_plus_grace() {
        let l = lock(1_000, 2_000);
        assert_eq!(verdict(&l, 999, 500), Verdict::Keep);
        assert_eq!(verdict(&l, 1_000, 500), Verdict::Overdue);
        assert_eq!(verdict(&l, 2_000, 500), Verdict::Expired { release_at: 2_500 });
        assert_eq!(verdict(&l, 2_499, 500), Verdict::Expired { release_at: 2_500 });
        assert_eq!(verdict(&l, 2_500, 500), Verdict::Release { release_at: 2_500 });
        let malformed = LockEntry {
            body: LockBody::Malformed {
                raw: b"{".to_vec(),
                error: "eof".into(),
            },
            ..l
        };
        assert_eq!(verdict(&malformed, i64::MAX, 0), Verdict::Malformed);
        // No overflow near the end of time.
        let far = lock(0, i64::MAX - 10);
        assert_eq!(
            verdict(&far, i64::MAX - 5, 500),
            Verdict::Expired { release_at: i64::MAX }
        );
    }

    #[test]
    fn a_foreign_lock_is_never_released_automatically() {
        // Whatever the clock, the grace, or what its row says: no times, no release.
        let cases: [(Option<&str>, Option<Millis>, Millis, i64); 5] = [
            (Some("s"), Some(0), 0, 0),
            (Some("s"), Some(0), i64::MAX, 0),
            (Some("s"), Some(i64::MIN), i64::MAX, 0),
            (None, None, i64::MAX, 0),
            (Some("s"), None, 1_000_000, DEFAULT_GRACE_MS),
        ];
        for (session, written_at, now, grace) in cases {
            let e = LockEntry::foreign("t".into(), 1, 1, session.map(Into::into), written_at);
            let v = verdict(&e, now, grace);
            assert_eq!(v, Verdict::Foreign, "{session:?} {written_at:?} at {now}");
            assert!(!matches!(v, Verdict::Release { .. } | Verdict::Expired { .. }));
        }
    }

    #[test]
    fn modes_round_trip() {
        for m in [Mode::Off, Mode::DryRun, Mode::On] {
            assert_eq!(Mode::parse(m.as_str()), Some(m));
        }
        assert_eq!(Mode::parse("yes"), None);
    }
}
