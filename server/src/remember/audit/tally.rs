//! Attempts without an identity, tallied: anyone can make them, so rather than
//! a row each (a loop of them would fill the disk), the log gets one row per
//! source and minute, saying how many there were (in its `detail`) and showing
//! the last one. At most `sources` sources get rows of their own in a minute;
//! the rest share one row, "from other sources". The rows of a minute are
//! written when it is over (within [`FLUSH_EVERY`]), and at shutdown
//! ([`super::AuditLog::flush_tally`]); a crash loses at most that minute.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::Duration;

use lockscope_model::admin::AuditEntry;
use tokio::time::Instant;

/// How long attempts are counted together.
pub const MINUTE: Duration = Duration::from_secs(60);

/// How often a finished minute is looked for and written.
pub const FLUSH_EVERY: Duration = Duration::from_secs(5);

/// Where a tallied attempt came from.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
enum From {
    Source(Option<IpAddr>),
    /// Past the minute's `sources`.
    Others,
}

/// One source's attempts in the minute.
#[derive(Debug)]
struct Count {
    n: u64,
    last: AuditEntry,
}

/// The current minute's tallies.
#[derive(Debug)]
pub struct Tally {
    sources: usize,
    started: Option<Instant>,
    counts: HashMap<From, Count>,
    /// Rows of finished minutes, not yet written.
    ready: Vec<AuditEntry>,
    /// Attempts tallied and rows made so far (for `/metrics`).
    pub attempts: u64,
    pub rows: u64,
}

impl Tally {
    pub fn new(sources: usize) -> Tally {
        Tally {
            sources: sources.max(1),
            started: None,
            counts: HashMap::new(),
            ready: Vec::new(),
            attempts: 0,
            rows: 0,
        }
    }

    pub fn set_sources(&mut self, sources: usize) {
        self.sources = sources.max(1);
    }

    /// Sources a minute may have rows of their own.
    pub fn sources(&self) -> usize {
        self.sources
    }

    /// Counts `entry`, an attempt from `source` (the source as
    /// [`crate::client::source`] makes it).
    pub fn add(&mut self, entry: &AuditEntry, source: Option<IpAddr>, now: Instant) {
        self.close_if_over(now);
        self.started.get_or_insert(now);
        let mut from = From::Source(source);
        if !self.counts.contains_key(&from) && self.counts.len() >= self.sources {
            from = From::Others;
        }
        self.attempts += 1;
        let count = self.counts.entry(from).or_insert_with(|| Count {
            n: 0,
            last: entry.clone(),
        });
        count.n += 1;
        count.last = AuditEntry {
            at: count.last.at,
            ..entry.clone()
        };
    }

    /// The rows to write now: the finished minutes' (`all`: the current one's too).
    pub fn take(&mut self, now: Instant, all: bool) -> Vec<AuditEntry> {
        if all {
            self.close();
        } else {
            self.close_if_over(now);
        }
        std::mem::take(&mut self.ready)
    }

    fn close_if_over(&mut self, now: Instant) {
        if self.started.is_some_and(|s| now >= s + MINUTE) {
            self.close();
        }
    }

    fn close(&mut self) {
        self.started = None;
        let mut rows: Vec<AuditEntry> = self.counts.drain().map(|(from, c)| row(from, c)).collect();
        rows.sort_by_key(|r| r.at);
        self.rows += rows.len() as u64;
        self.ready.extend(rows);
    }
}

/// The row of one source's minute: the first attempt's time, the last one's
/// action and reason, and the count.
fn row(from: From, c: Count) -> AuditEntry {
    let whence = match from {
        From::Source(Some(ip)) => format!("from {ip}"),
        From::Source(None) => "from an unknown address".to_string(),
        From::Others => "from other sources (past the minute's limit of sources with rows of their own)".to_string(),
    };
    let n = c.n;
    let attempts = if n == 1 { "attempt" } else { "attempts" };
    AuditEntry {
        detail: format!(
            "{n} {attempts} without an identity {whence} within a minute (this row shows the last): {}",
            c.last.detail
        ),
        ..c.last
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lockscope_model::admin::{Action, Outcome};

    fn attempt(at: i64, target: &str) -> AuditEntry {
        AuditEntry {
            at,
            actor: "(unauthenticated)".into(),
            via: "api".into(),
            action: Some(Action::Release),
            fleet: "prod".into(),
            target: target.into(),
            outcome: Some(Outcome::Refused),
            detail: "the API token is not valid".into(),
            ..AuditEntry::default()
        }
    }

    fn ip(s: &str) -> Option<IpAddr> {
        Some(s.parse().unwrap())
    }

    #[tokio::test(start_paused = true)]
    async fn a_minute_of_attempts_from_one_source_is_one_row_with_their_count() {
        let mut t = Tally::new(10);
        let start = Instant::now();
        for i in 0..25 {
            t.add(&attempt(1_000 + i, &format!("lock-{i}")), ip("10.0.0.1"), start);
        }
        t.add(&attempt(1_100, "x"), ip("10.0.0.2"), start);
        assert!(
            t.take(start + Duration::from_secs(59), false).is_empty(),
            "the minute is not over"
        );
        let rows = t.take(start + MINUTE, false);
        assert_eq!(rows.len(), 2, "{rows:#?}");
        let one = rows.iter().find(|r| r.detail.contains("10.0.0.1")).unwrap();
        assert!(
            one.detail
                .starts_with("25 attempts without an identity from 10.0.0.1 within a minute"),
            "{}",
            one.detail
        );
        assert_eq!(
            (one.at, one.target.as_str()),
            (1_000, "lock-24"),
            "first time, last attempt"
        );
        assert!(rows
            .iter()
            .any(|r| r.detail.starts_with("1 attempt without an identity from 10.0.0.2")));
        assert_eq!((t.attempts, t.rows), (26, 2));
        t.add(&attempt(9_000, "y"), ip("10.0.0.1"), start + MINUTE);
        assert_eq!(
            t.take(start + MINUTE, true).len(),
            1,
            "at shutdown, the current minute too"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn past_the_limit_of_sources_the_rest_share_one_row() {
        let mut t = Tally::new(2);
        let now = Instant::now();
        for i in 1..=50 {
            t.add(&attempt(i, "x"), ip(&format!("10.0.1.{i}")), now);
        }
        let rows = t.take(now, true);
        assert_eq!(rows.len(), 3, "{rows:#?}");
        assert!(rows.iter().any(|r| r
            .detail
            .starts_with("48 attempts without an identity from other sources")));
    }
}
