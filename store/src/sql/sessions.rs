//! How the SQL observer follows sessions, waiters and the blacklist.
//!
//! The tables are re-read whole when the change signal says a session or
//! blacklist row was written (small tables: one row per worker process), and
//! the tracker turns each read into the events that differ from the last.
//!
//! Liveness without comparing clocks: a session row carries `expires_at`, on
//! its holder's clock. The tracker never compares that with its own clock; it
//! takes the session's ttl as `expires_at − heartbeat_at` (both the holder's)
//! and calls the session gone once it has seen no write to its row for that
//! long on its own monotonic clock. A dashboard that starts (or reconnects)
//! waits one ttl before it calls a silent session gone; a row that is written
//! again brings the session back. Waiters count only while their session lives
//! (on etcd a dead session's waiter keys go with its lease).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use lockscope_model::time::Millis;
use lockscope_model::{BlacklistEntry, FleetEvent, SessionEntry, Waiter};
use tokio::time::Instant;

use super::SessionRow;

/// Used when a row's record is unreadable, so its ttl cannot be computed.
const FALLBACK_TTL: Duration = Duration::from_secs(30);
/// Bounds on a computed ttl (a row with nonsense times is not trusted for days).
const MIN_TTL: Duration = Duration::from_secs(1);
const MAX_TTL: Duration = Duration::from_secs(3600);

struct Known {
    row: SessionRow,
    /// The entry last sent for it (a reset resends it as it was).
    entry: SessionEntry,
    /// When this observer last saw the row written.
    written: Instant,
    ttl: Duration,
    gone: bool,
}

#[derive(Default)]
pub(crate) struct SessionTracker {
    known: BTreeMap<String, Known>,
    blacklist: BTreeMap<String, String>,
    waiters: BTreeSet<Waiter>,
    /// Counts reads: the revision of the session entries they produce.
    reads: i64,
}

impl SessionTracker {
    /// Follows a fresh read of both tables, made at `now` (`seen_at` on the wall
    /// clock, for the skew estimate; `None` when the values may be old, as in the
    /// first read). Returns what changed.
    pub fn update(
        &mut self,
        rows: Vec<SessionRow>,
        blacklist: Vec<(String, String)>,
        now: Instant,
        seen_at: Option<Millis>,
    ) -> Vec<FleetEvent> {
        self.reads += 1;
        let mut events = Vec::new();
        let mut fresh = BTreeMap::new();
        for row in rows {
            let old = self.known.remove(&row.id);
            let known = match old {
                Some(k) if k.row == row => k,
                _ => {
                    let entry = SessionEntry::from_stored(row.id.clone(), self.reads, row.record.as_bytes(), seen_at);
                    events.push(FleetEvent::Session(entry.clone()));
                    Known {
                        ttl: ttl_of(&entry, row.expires_at),
                        entry,
                        row,
                        written: now,
                        gone: false,
                    }
                }
            };
            fresh.insert(known.row.id.clone(), known);
        }
        for (id, k) in std::mem::replace(&mut self.known, fresh) {
            if !k.gone {
                events.push(FleetEvent::SessionGone { id });
            }
        }
        let blacklist: BTreeMap<String, String> = blacklist.into_iter().collect();
        for (id, raw) in &blacklist {
            if self.blacklist.get(id) != Some(raw) {
                events.push(FleetEvent::Blacklisted(BlacklistEntry::from_stored(
                    id.clone(),
                    self.reads,
                    raw.as_bytes(),
                )));
            }
        }
        for id in self.blacklist.keys().filter(|id| !blacklist.contains_key(*id)) {
            events.push(FleetEvent::BlacklistLifted { session: id.clone() });
        }
        self.blacklist = blacklist;
        self.waiters_moved(&mut events);
        events
    }

    /// Sessions whose registration ran out by `now`.
    pub fn expire(&mut self, now: Instant) -> Vec<FleetEvent> {
        let mut events = Vec::new();
        for (id, k) in self.known.iter_mut() {
            if !k.gone && now.duration_since(k.written) >= k.ttl {
                k.gone = true;
                events.push(FleetEvent::SessionGone { id: id.clone() });
            }
        }
        if !events.is_empty() {
            self.waiters_moved(&mut events);
        }
        events
    }

    /// When the next live session runs out, if any.
    pub fn next_expiry(&self) -> Option<Instant> {
        self.known.values().filter(|k| !k.gone).map(|k| k.written + k.ttl).min()
    }

    /// The live sessions, the blacklist and the waiters, for a reset.
    pub fn snapshot(&self) -> (Vec<SessionEntry>, Vec<BlacklistEntry>, Vec<Waiter>) {
        let sessions = self
            .known
            .values()
            .filter(|k| !k.gone)
            .map(|k| k.entry.clone())
            .collect();
        let blacklist = self
            .blacklist
            .iter()
            .map(|(id, raw)| BlacklistEntry::from_stored(id.clone(), self.reads, raw.as_bytes()))
            .collect();
        (sessions, blacklist, self.waiters.iter().cloned().collect())
    }

    /// Appends who started and stopped waiting since the last call.
    fn waiters_moved(&mut self, events: &mut Vec<FleetEvent>) {
        let now: BTreeSet<Waiter> = self
            .known
            .values()
            .filter(|k| !k.gone)
            .filter_map(|k| {
                Some(Waiter {
                    lock: k.row.waiting_for.clone()?,
                    session: k.row.id.clone(),
                })
            })
            .collect();
        events.extend(self.waiters.difference(&now).cloned().map(FleetEvent::StoppedWaiting));
        events.extend(now.difference(&self.waiters).cloned().map(FleetEvent::Waiting));
        self.waiters = now;
    }
}

/// The session's ttl from its own row: `expires_at − heartbeat_at`, both on the
/// holder's clock.
fn ttl_of(entry: &SessionEntry, expires_at: i64) -> Duration {
    let Some(rec) = entry.record() else {
        return FALLBACK_TTL;
    };
    let ms = expires_at.saturating_sub(rec.heartbeat_at).max(0) as u64;
    Duration::from_millis(ms).clamp(MIN_TTL, MAX_TTL)
}

#[cfg(test)]
mod tests {
    use super::*;
    use lockscope_model::record::{SessionRecord, RECORD_VERSION};

    fn row(id: &str, heartbeat_at: i64, ttl_ms: i64, waiting_for: Option<&str>) -> SessionRow {
        let rec = SessionRecord {
            v: RECORD_VERSION,
            session: id.into(),
            service: "svc".into(),
            host: "h".into(),
            pid: 1,
            started_at: 0,
            heartbeat_at,
            waiting_for: waiting_for.map(str::to_string),
            contention: Default::default(),
        };
        SessionRow {
            id: id.into(),
            record: serde_json::to_string(&rec).unwrap(),
            waiting_for: waiting_for.map(str::to_string),
            // The holder's clock is a day ahead of ours: it must not matter.
            expires_at: heartbeat_at + ttl_ms,
        }
    }

    fn kinds(events: &[FleetEvent]) -> Vec<String> {
        events
            .iter()
            .map(|e| match e {
                FleetEvent::Session(s) => format!("session {}", s.id),
                FleetEvent::SessionGone { id } => format!("gone {id}"),
                FleetEvent::Waiting(w) => format!("waiting {} {}", w.session, w.lock),
                FleetEvent::StoppedWaiting(w) => format!("stopped {} {}", w.session, w.lock),
                FleetEvent::Blacklisted(b) => format!("blacklisted {}", b.session),
                FleetEvent::BlacklistLifted { session } => format!("lifted {session}"),
                other => format!("{other:?}"),
            })
            .collect()
    }

    #[tokio::test(start_paused = true)]
    async fn a_silent_session_goes_after_its_ttl_on_our_clock_and_comes_back_when_written() {
        let day = 86_400_000;
        let mut t = SessionTracker::default();
        let start = Instant::now();
        let ev = t.update(
            vec![row("a", day, 10_000, Some("x")), row("b", day, 30_000, None)],
            vec![],
            start,
            None,
        );
        assert_eq!(kinds(&ev), ["session a", "session b", "waiting a x"]);
        assert_eq!(t.next_expiry(), Some(start + Duration::from_secs(10)));
        tokio::time::advance(Duration::from_millis(9_999)).await;
        assert!(t.expire(Instant::now()).is_empty(), "not yet: 10 s on our clock");
        // b heartbeats; a stays silent.
        let ev = t.update(
            vec![row("a", day, 10_000, Some("x")), row("b", day + 9_999, 30_000, None)],
            vec![],
            Instant::now(),
            Some(5),
        );
        assert_eq!(kinds(&ev), ["session b"]);
        tokio::time::advance(Duration::from_millis(1)).await;
        assert_eq!(kinds(&t.expire(Instant::now())), ["gone a", "stopped a x"]);
        assert!(t.expire(Instant::now()).is_empty(), "once");
        // A full read (after a reconnect, say) finds a's row unchanged: still gone.
        let ev = t.update(
            vec![row("a", day, 10_000, Some("x")), row("b", day + 9_999, 30_000, None)],
            vec![],
            Instant::now(),
            None,
        );
        assert!(ev.is_empty(), "{:?}", kinds(&ev));
        let (sessions, _, waiters) = t.snapshot();
        assert_eq!(sessions.len(), 1);
        assert!(waiters.is_empty());
        // a writes again: alive again.
        let ev = t.update(
            vec![
                row("a", day + 20_000, 10_000, None),
                row("b", day + 9_999, 30_000, None),
            ],
            vec![],
            Instant::now(),
            Some(6),
        );
        assert_eq!(kinds(&ev), ["session a"]);
        // b's row deleted (closed): gone at once.
        let ev = t.update(
            vec![row("a", day + 20_000, 10_000, None)],
            vec![],
            Instant::now(),
            Some(7),
        );
        assert_eq!(kinds(&ev), ["gone b"]);
    }

    #[tokio::test(start_paused = true)]
    async fn blacklist_entries_come_and_go() {
        let mut t = SessionTracker::default();
        let now = Instant::now();
        let ev = t.update(vec![], vec![("a".into(), "{}".into())], now, None);
        assert_eq!(kinds(&ev), ["blacklisted a"]);
        assert!(t.update(vec![], vec![("a".into(), "{}".into())], now, None).is_empty());
        assert_eq!(kinds(&t.update(vec![], vec![], now, None)), ["lifted a"]);
    }

    #[test]
    fn ttl_comes_from_the_row_and_is_bounded() {
        let ttl = |r: SessionRow| {
            ttl_of(
                &SessionEntry::from_stored(r.id, 1, r.record.as_bytes(), None),
                r.expires_at,
            )
        };
        assert_eq!(ttl(row("a", 5_000, 15_000, None)), Duration::from_secs(15));
        assert_eq!(ttl(row("a", 5_000, -1, None)), MIN_TTL);
        assert_eq!(ttl(row("a", 0, i64::MAX, None)), MAX_TTL);
        let mut bad = row("a", 0, 1, None);
        bad.record = "{".into();
        assert_eq!(ttl(bad), FALLBACK_TTL);
    }
}
