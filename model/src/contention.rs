//! A fleet's contention counters: the sum of every session's *increases*
//! (Prometheus counters in `/metrics`, sampled for the charts in [`crate::charts`]).
//!
//! Each session publishes its own cumulative counters with its heartbeats
//! ([`Contention`]: attempts, acquired, conflicts, lost, the wait histogram).
//! Summing the current values would go down whenever a session goes away, and a
//! Prometheus counter never goes down. So the tracker keeps, per session, the
//! counters it last saw, and adds to the fleet's totals only what grew since:
//!
//! - a session seen for the first time (at the server's start, in a resync, or
//!   new) is a baseline: what it counted before this server saw it is not
//!   counted, only its increases from then on. A server that restarts, or
//!   reconnects to a store, never adds a burst of old history; the price is that
//!   what a brand-new session did before its first record reached this server is
//!   missed (rare: sessions register with zero counters, and counters are
//!   published with heartbeats after that);
//! - a session that goes away keeps what it contributed (its baseline is
//!   dropped, the totals are not touched);
//! - a session whose counters go *down* (a writer that started over under the
//!   same id) is taken as seen for the first time: a new baseline, nothing added.
//!
//! So the totals are "what this server saw happen since it started", and never
//! decrease.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::record::{Contention, WAIT_BUCKETS_MS};

/// Buckets of the wait histogram: one per bound of [`WAIT_BUCKETS_MS`], plus
/// the overflow bucket.
pub const WAIT_BUCKETS: usize = WAIT_BUCKETS_MS.len() + 1;

/// Contention counters: one session's (cumulative, as published), or a fleet's
/// totals (the sum of increases).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Totals {
    pub attempts: u64,
    pub acquired: u64,
    pub conflicts: u64,
    pub lost: u64,
    /// Waits per bucket of [`WAIT_BUCKETS_MS`] (not cumulative), overflow last.
    pub wait_buckets: [u64; WAIT_BUCKETS],
    pub wait_sum_ms: u64,
}

impl Totals {
    /// A session's published counters (no histogram: every bucket zero).
    pub fn of(c: &Contention) -> Totals {
        let mut wait_buckets = [0; WAIT_BUCKETS];
        // A parsed record has either the whole histogram or none (`Record::check`).
        for (slot, n) in wait_buckets.iter_mut().zip(&c.wait_buckets) {
            *slot = *n;
        }
        Totals {
            attempts: c.attempts,
            acquired: c.acquired,
            conflicts: c.conflicts,
            lost: c.lost,
            wait_buckets,
            wait_sum_ms: c.wait_sum_ms,
        }
    }

    /// Waits counted (every bucket; saturating: a stored record may hold any counts).
    pub fn waits(&self) -> u64 {
        self.wait_buckets.iter().fold(0, |a, n| a.saturating_add(*n))
    }

    fn fields(&self) -> impl Iterator<Item = u64> + '_ {
        [
            self.attempts,
            self.acquired,
            self.conflicts,
            self.lost,
            self.wait_sum_ms,
        ]
        .into_iter()
        .chain(self.wait_buckets.iter().copied())
    }

    /// Every counter is at least what it was in `earlier`.
    fn covers(&self, earlier: &Totals) -> bool {
        self.fields().zip(earlier.fields()).all(|(now, then)| now >= then)
    }

    /// Field by field, `f(self's, other's)`.
    fn zip_with(&self, other: &Totals, f: impl Fn(u64, u64) -> u64) -> Totals {
        let mut wait_buckets = [0; WAIT_BUCKETS];
        for (i, slot) in wait_buckets.iter_mut().enumerate() {
            *slot = f(self.wait_buckets[i], other.wait_buckets[i]);
        }
        Totals {
            attempts: f(self.attempts, other.attempts),
            acquired: f(self.acquired, other.acquired),
            conflicts: f(self.conflicts, other.conflicts),
            lost: f(self.lost, other.lost),
            wait_buckets,
            wait_sum_ms: f(self.wait_sum_ms, other.wait_sum_ms),
        }
    }

    /// What grew since `earlier`, field by field (a field that went down
    /// counts as zero; fleet totals never do).
    pub fn since(&self, earlier: &Totals) -> Totals {
        self.zip_with(earlier, u64::saturating_sub)
    }

    /// Adds `now - before`, field by field (`now` covers `before`).
    fn add_increase(&mut self, now: &Totals, before: &Totals) {
        *self = self.zip_with(&now.since(before), u64::saturating_add);
    }
}

/// The fleet's totals and the counters each live session last showed. See the
/// module docs for what counts.
#[derive(Debug, Default)]
pub struct ContentionTracker {
    seen: HashMap<String, Totals>,
    totals: Totals,
    changed: bool,
}

impl ContentionTracker {
    /// Session `id` published `counters`.
    pub fn observe(&mut self, id: &str, counters: &Contention) {
        let now = Totals::of(counters);
        match self.seen.get_mut(id) {
            Some(before) if *before == now => {}
            Some(before) => {
                if now.covers(before) {
                    self.totals.add_increase(&now, before);
                    self.changed = true;
                }
                // else: its counters went down (a writer that started over):
                // a new baseline, nothing added.
                *before = now;
            }
            // First seen: a baseline.
            None => {
                self.seen.insert(id.to_string(), now);
            }
        }
    }

    /// Session `id` is gone: what it contributed stays in the totals.
    pub fn forget(&mut self, id: &str) {
        self.seen.remove(id);
    }

    /// The fleet's totals: never lower than at any earlier call.
    pub fn totals(&self) -> &Totals {
        &self.totals
    }

    /// Whether the totals grew since the last call.
    pub fn take_changed(&mut self) -> bool {
        std::mem::take(&mut self.changed)
    }

    /// Sessions followed.
    pub fn sessions(&self) -> usize {
        self.seen.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counters(acquired: u64, conflicts: u64, waits_ms: &[u64]) -> Contention {
        let mut c = Contention {
            attempts: acquired + conflicts,
            acquired,
            conflicts,
            ..Contention::default()
        };
        for ms in waits_ms {
            c.record_wait(*ms);
        }
        c
    }

    #[test]
    fn counter_resets_table() {
        // Each row: a session publishes (acquired, conflicts), or goes (None);
        // then the fleet's totals (acquired, conflicts).
        type Row<'a> = (&'a str, Option<(u64, u64)>, (u64, u64));
        let rows: &[Row] = &[
            ("a", Some((5, 1)), (0, 0)),  // first sight: a baseline
            ("a", Some((7, 1)), (2, 0)),  // +2
            ("b", Some((0, 0)), (2, 0)),  // b registers at zero
            ("b", Some((3, 4)), (5, 4)),  // +3 +4
            ("a", Some((1, 0)), (5, 4)),  // a reset (started over): a new baseline
            ("a", Some((2, 3)), (6, 7)),  // +1 +3 from the new baseline
            ("b", None, (6, 7)),          // b goes: keeps what it gave
            ("b", Some((9, 9)), (6, 7)),  // b back under its id: a baseline
            ("b", Some((9, 9)), (6, 7)),  // unchanged heartbeat
            ("b", Some((10, 9)), (7, 7)), // +1
            ("a", Some((2, 2)), (7, 7)),  // one field down: a reset, nothing added
            ("a", Some((2, 2)), (7, 7)),
            ("a", Some((4, 2)), (9, 7)),
        ];
        let mut t = ContentionTracker::default();
        for (i, &(id, counts, want)) in rows.iter().enumerate() {
            match counts {
                Some((acquired, conflicts)) => t.observe(id, &counters(acquired, conflicts, &[])),
                None => t.forget(id),
            }
            assert_eq!((t.totals().acquired, t.totals().conflicts), want, "row {i}");
        }
    }

    #[test]
    fn first_sight_is_a_baseline_and_increases_count() {
        let mut t = ContentionTracker::default();
        // Seen first with counters already above zero: they are history.
        t.observe("a", &counters(5, 2, &[3, 3]));
        assert_eq!(*t.totals(), Totals::default());
        assert!(!t.take_changed());
        t.observe("a", &counters(8, 3, &[3, 3, 700]));
        let tot = *t.totals();
        assert_eq!((tot.acquired, tot.conflicts, tot.attempts), (3, 1, 4));
        assert_eq!(tot.waits(), 1);
        assert_eq!(tot.wait_buckets[6], 1, "700 ms falls in the 1 s bucket");
        assert_eq!(tot.wait_sum_ms, 700);
        assert!(t.take_changed());
        assert!(!t.take_changed());
        // The same counters again (a heartbeat with nothing new) change nothing.
        t.observe("a", &counters(8, 3, &[3, 3, 700]));
        assert_eq!(*t.totals(), tot);
        assert!(!t.take_changed());
    }

    #[test]
    fn a_session_that_goes_keeps_what_it_contributed() {
        let mut t = ContentionTracker::default();
        t.observe("a", &counters(0, 0, &[]));
        t.observe("b", &counters(0, 0, &[]));
        t.observe("a", &counters(4, 0, &[1, 1, 1, 1]));
        t.observe("b", &counters(1, 6, &[20_000]));
        let before = *t.totals();
        assert_eq!((before.acquired, before.conflicts), (5, 6));
        t.forget("a");
        assert_eq!(*t.totals(), before, "going away takes nothing back");
        assert_eq!(t.sessions(), 1);
        // Back under the same id (a registration that ran out): a new baseline.
        t.observe("a", &counters(9, 0, &[]));
        assert_eq!(*t.totals(), before);
        t.observe("a", &counters(10, 0, &[]));
        assert_eq!(t.totals().acquired, 6);
    }

    #[test]
    fn counters_that_go_down_are_a_new_baseline_never_a_decrease() {
        let mut t = ContentionTracker::default();
        t.observe("a", &counters(0, 0, &[]));
        t.observe("a", &counters(10, 10, &[5]));
        let high = *t.totals();
        // A writer that started over under the same id: lower numbers.
        t.observe("a", &counters(2, 50, &[]));
        assert_eq!(*t.totals(), high, "nothing added, nothing taken");
        t.observe("a", &counters(3, 50, &[]));
        assert_eq!(t.totals().acquired, high.acquired + 1);
        assert_eq!(t.totals().conflicts, high.conflicts);
    }

    #[test]
    fn totals_never_decrease_whatever_the_sequence() {
        // A pseudo-random walk of sessions coming, counting, restarting, going.
        let mut rng = fastrand::Rng::with_seed(7);
        let mut t = ContentionTracker::default();
        let mut live: HashMap<String, Contention> = HashMap::new();
        let mut last = *t.totals();
        for _ in 0..5_000 {
            let id = format!("s{}", rng.u8(..8));
            match rng.u8(..10) {
                0 => {
                    live.remove(&id);
                    t.forget(&id);
                }
                1 => {
                    let c = counters(rng.u64(..3), 0, &[]);
                    t.observe(&id, &c);
                    live.insert(id, c);
                }
                _ => {
                    let c = live.entry(id.clone()).or_default();
                    c.attempts += 1;
                    if rng.bool() {
                        c.acquired += 1;
                    } else {
                        c.conflicts += 1;
                    }
                    c.record_wait(rng.u64(..100_000));
                    t.observe(&id, c);
                }
            }
            let now = *t.totals();
            assert!(now.covers(&last), "{now:?} < {last:?}");
            assert!(now.waits() >= last.waits());
            last = now;
        }
        assert!(last.acquired > 0 && last.conflicts > 0);
    }

    #[test]
    fn a_record_without_a_histogram_reads_as_zero_waits() {
        let c = Contention {
            attempts: 1,
            acquired: 1,
            ..Contention::default()
        };
        assert!(c.wait_buckets.is_empty());
        assert_eq!(Totals::of(&c).wait_buckets, [0; WAIT_BUCKETS]);
    }
}
