//! When a fleet whose observer reads the store again and again (a poll: no
//! change feed; a reconciling rescan beside lossy notifications) last read
//! it, and whether that is recent enough for its table to count as live.
//!
//! The rule (docs/api.md, `GET /api/v1/fleets`): a table whose last look is
//! older than 3× its interval is not live: the page says so instead of
//! showing the past as the present.

use serde::{Deserialize, Serialize};

use crate::time::{absolute_and_relative, human_duration, Millis};

/// How many intervals may pass without a look before the table is not live.
pub const STALE_AFTER_INTERVALS: i64 = 3;

/// A polled or rescanned fleet's last full read of its store.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Polled {
    /// When the last full read finished (the server's clock).
    pub at: Millis,
    /// How often the store is read in full (ms).
    pub every_ms: u64,
    /// What a full read is here: a poll (the table's only source) or a
    /// rescan reconciling a change feed.
    pub how: Look,
}

/// What a full read of the store is on this fleet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Look {
    /// The fleet is polled (PostgreSQL advisory locks; Redis without
    /// keyspace notifications).
    Polled,
    /// Notifications keep the table live and a full rescan reconciles them.
    Rescanned,
}

impl Polled {
    /// Whether the last look is older than 3× the interval at `now`: the
    /// table shown is then not live.
    pub fn is_stale(&self, now: Millis) -> bool {
        let every = i64::try_from(self.every_ms).unwrap_or(i64::MAX);
        now.saturating_sub(self.at) > every.saturating_mul(STALE_AFTER_INTERVALS)
    }

    /// "rescanned every 30 s, last at 2026-11-26 17:40:00 UTC (3s ago)", or,
    /// past 3× the interval, that the table is not live.
    pub fn text(&self, now: Millis) -> String {
        let verb = match self.how {
            Look::Polled => "polled",
            Look::Rescanned => "rescanned",
        };
        let last = absolute_and_relative(self.at, now);
        let every = seconds(self.every_ms);
        if self.is_stale(now) {
            format!(
                "not live: {verb} every {every} s, but last at {last} (over {} ago): the table may show the past",
                human_duration(self.every_ms as i64 * STALE_AFTER_INTERVALS)
            )
        } else {
            format!("{verb} every {every} s, last at {last}")
        }
    }
}

/// Seconds without trailing zeros: "1", "0.2", "2.5".
pub fn seconds(ms: u64) -> String {
    let s = format!("{:.3}", ms as f64 / 1000.0);
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_look_older_than_three_intervals_is_not_live() {
        // docs/api.md: "When the last full read is older than 3× its
        // interval, the table is not live".
        let p = Polled {
            at: 10_000,
            every_ms: 1_000,
            how: Look::Polled,
        };
        assert!(!p.is_stale(13_000), "3 intervals exactly: still live");
        assert!(p.is_stale(13_001));
        assert_eq!(
            p.text(11_000),
            "polled every 1 s, last at 1970-01-01 00:00:10 UTC (1s ago)"
        );
        assert!(
            p.text(20_000).starts_with("not live: polled every 1 s, but last at"),
            "{}",
            p.text(20_000)
        );
        let r = Polled {
            at: 0,
            every_ms: 30_000,
            how: Look::Rescanned,
        };
        assert!(r.text(1_000).starts_with("rescanned every 30 s, last at"));
        assert!(!r.is_stale(90_000) && r.is_stale(90_001));
        assert_eq!(seconds(200), "0.2");
        assert_eq!(seconds(2_500), "2.5");
    }
}
