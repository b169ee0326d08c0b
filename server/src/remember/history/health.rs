//! The writer's numbers ([`HistoryStats`]) and whether the history is
//! recording ([`Health`]), for the pages and `/metrics`: when
//! writing started failing, the events each fleet lost that the history does
//! not yet say it lacks, and the `gap` events that say so once writing works
//! again. The overview learns of a change through [`publish`].

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Mutex;

use lockscope_model::history::{Gap, HistoryEvent, NotRecording};
use lockscope_model::time::Millis;
use tokio::sync::watch;

use super::ExportLimits;

/// The longest a gap's reason is kept (a database's error can be long).
const WHY_CHARS: usize = 300;

/// The writer's numbers, for the page and `/metrics`.
#[derive(Debug, Default)]
pub struct HistoryStats {
    /// Events the database took: rows inserted, or updated with an end's
    /// actor (never events already there, nor a batch that failed).
    pub written: AtomicU64,
    /// Events already in the history (another replica or a restart's
    /// snapshot wrote them): not written again.
    pub duplicates: AtomicU64,
    /// Events lost: the queue was full (history fell behind), or their batch
    /// failed.
    pub dropped: AtomicU64,
    /// Events queued and not yet written.
    pub queued: AtomicU64,
    /// Batches that failed to write (the events in them are lost and counted in `dropped`).
    pub failed_batches: AtomicU64,
    /// When the first event was lost (unix ms; 0: none yet).
    pub first_loss_at: AtomicI64,
    /// Changes a store replayed after a restart, recorded as events (etcd:
    /// what changed while no dashboard watched).
    pub replayed: AtomicU64,
    /// Gaps recorded at a restart's first snapshot: the store could not
    /// replay what changed while no dashboard watched.
    pub restart_gaps: AtomicU64,
    /// Gaps recorded at a running server's reconnect that read a fresh
    /// snapshot rather than resuming where it stopped.
    pub outage_gaps: AtomicU64,
    /// Exports running now.
    pub exports_active: AtomicU64,
    /// Exports refused by the caps (answered `429`).
    pub exports_refused: AtomicU64,
    /// Exports ended because their client took nothing for the idle timeout.
    pub exports_stalled: AtomicU64,
    /// The exports' limits, as configured.
    pub limits: ExportLimits,
    /// Whether writing fails now, and the losses no gap event records yet.
    pub health: Health,
}

impl HistoryStats {
    /// `n` of `fleet`'s events, seen at `at`, could not be written (counted,
    /// the first loss's time kept, and a gap to record).
    pub fn lost(&self, fleet: &str, at: Millis, n: u64) {
        self.health.lost(fleet, at, n);
        self.dropped.fetch_add(n, Ordering::Relaxed);
        let _ = self
            .first_loss_at
            .compare_exchange(0, lockscope_store::now_ms(), Ordering::Relaxed, Ordering::Relaxed);
    }

    /// The events lost so far and when the first was, if any were.
    pub fn loss(&self) -> Option<lockscope_model::review::Loss> {
        let events = self.dropped.load(Ordering::Relaxed);
        (events > 0).then(|| lockscope_model::review::Loss {
            events,
            since: self.first_loss_at.load(Ordering::Relaxed),
        })
    }
}

/// The writer's health, shared by the writer, the recorders and the pages.
#[derive(Debug)]
pub struct Health {
    state: Mutex<State>,
    /// Bumped whenever what the pages show changes.
    changed: watch::Sender<u64>,
}

#[derive(Debug, Default)]
struct State {
    failing: Option<Failing>,
    /// Per fleet: events lost that no gap event records yet.
    pending: HashMap<String, Pending>,
}

#[derive(Debug)]
struct Failing {
    since: Millis,
    why: String,
}

#[derive(Clone, Copy, Debug)]
struct Pending {
    /// The first and last lost event's time.
    from: Millis,
    to: Millis,
    lost: u64,
}

impl Default for Health {
    fn default() -> Health {
        Health {
            state: Mutex::default(),
            changed: watch::channel(0).0,
        }
    }
}

impl Health {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn bump(&self) {
        self.changed.send_modify(|n| *n += 1);
    }

    /// Told whenever what the pages show changes (whether the history is
    /// recording, its losses).
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// `n` of `fleet`'s events, seen at `at`, were lost.
    pub fn lost(&self, fleet: &str, at: Millis, n: u64) {
        let failing = {
            let mut s = self.state();
            let p = s.pending.entry(fleet.to_string()).or_insert(Pending {
                from: at,
                to: at,
                lost: 0,
            });
            p.from = p.from.min(at);
            p.to = p.to.max(at);
            p.lost += n;
            s.failing.is_some()
        };
        if failing {
            self.bump();
        }
    }

    /// A write failed at `now` with `error`: writing is failing from then
    /// (if it was not already).
    pub fn failed(&self, now: Millis, error: &str) {
        let mut s = self.state();
        if s.failing.is_none() {
            let why: String = error.chars().take(WHY_CHARS).collect();
            s.failing = Some(Failing {
                since: now,
                why: format!("the history's database refused writes ({why})"),
            });
            drop(s);
            self.bump();
        }
    }

    /// A write succeeded at `now`: writing is not failing, and the losses that
    /// no gap records yet become gap events to write.
    pub fn wrote(&self, now: Millis) -> Vec<(String, Gap)> {
        let mut s = self.state();
        let failing = s.failing.take();
        let gaps = gaps(&s, failing.as_ref(), now);
        for (fleet, _) in &gaps {
            s.pending.remove(fleet);
        }
        drop(s);
        if failing.is_some() {
            self.bump();
        }
        gaps
    }

    /// While writing works: the losses of a full queue so far, as gaps to
    /// write in the next batch's own transaction, so the history's cursor
    /// never moves past a loss no gap records (a crash right after that
    /// batch leaves no silent hole). Nothing while writing fails: those gaps
    /// come with the recovery ([`Health::wrote`]).
    pub fn take_lost(&self) -> Vec<(String, Gap)> {
        let mut s = self.state();
        if s.failing.is_some() {
            return Vec::new();
        }
        let gaps = gaps(&s, None, 0);
        s.pending.clear();
        gaps
    }

    /// While writing fails: the gaps [`Health::wrote`] would give at `now`,
    /// taking nothing. Writing them tells whether the database takes writes
    /// again when no events come to try it with.
    pub fn probe(&self, now: Millis) -> Vec<(String, Gap)> {
        let s = self.state();
        match &s.failing {
            Some(f) => gaps(&s, Some(f), now),
            None => Vec::new(),
        }
    }

    /// `gaps` could not be written: kept to be written with the next success.
    pub fn unrecorded(&self, gaps: Vec<(String, Gap)>) {
        let mut s = self.state();
        for (fleet, g) in gaps {
            let p = s.pending.entry(fleet).or_insert(Pending {
                from: g.from,
                to: g.to,
                lost: 0,
            });
            p.from = p.from.min(g.from);
            p.to = p.to.max(g.to);
            p.lost += g.lost.unwrap_or(0);
        }
    }

    /// Whether writing is failing now (`/metrics`).
    pub fn failing(&self) -> bool {
        self.state().failing.is_some()
    }

    /// What the pages say of `fleet` while writing fails (`None`: it works).
    pub fn not_recording(&self, fleet: &str) -> Option<NotRecording> {
        let s = self.state();
        s.failing.as_ref().map(|f| NotRecording {
            since: f.since,
            lost: s.pending.get(fleet).map_or(0, |p| p.lost),
        })
    }
}

/// The gaps the losses in `s` make: every fleet's; once writing failed
/// (`failing`), up to `now`.
fn gaps(s: &State, failing: Option<&Failing>, now: Millis) -> Vec<(String, Gap)> {
    s.pending
        .iter()
        .map(|(fleet, p)| {
            let gap = match failing {
                Some(f) => Gap {
                    from: p.from.min(f.since),
                    to: now,
                    lost: Some(p.lost),
                    why: f.why.clone(),
                },
                None => Gap {
                    from: p.from,
                    to: p.to,
                    lost: Some(p.lost),
                    why: "the history's queue was full (it fell behind the stores)".into(),
                },
            };
            (fleet.clone(), gap)
        })
        .collect()
}

/// The gaps as `gap` events of their fleets.
pub fn events(gaps: &[(String, Gap)]) -> Vec<HistoryEvent> {
    gaps.iter().map(|(fleet, g)| g.event(fleet)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_is_shown_until_a_write_works_then_becomes_one_gap_per_fleet() {
        let h = Health::default();
        assert_eq!(h.not_recording("a"), None);
        h.failed(1_000, "disk full");
        h.lost("a", 900, 3);
        h.lost("b", 1_500, 1);
        h.failed(2_000, "still full");
        assert!(h.failing());
        assert_eq!(h.not_recording("a"), Some(NotRecording { since: 1_000, lost: 3 }));
        assert_eq!(h.not_recording("c"), Some(NotRecording { since: 1_000, lost: 0 }));
        // A probe's gaps are the ones the recovery then gives, and take nothing.
        let mut probed = h.probe(5_000);
        probed.sort_by(|x, y| x.0.cmp(&y.0));
        assert!(h.failing() && h.probe(5_000).len() == 2);
        let mut gaps = h.wrote(5_000);
        gaps.sort_by(|x, y| x.0.cmp(&y.0));
        assert!(!h.failing() && h.not_recording("a").is_none());
        assert_eq!(probed, gaps, "written once, whichever writes them");
        assert!(h.probe(5_000).is_empty(), "not failing: nothing to probe");
        let (a, b) = (&gaps[0].1, &gaps[1].1);
        assert_eq!(
            (a.from, a.to, a.lost),
            (900, 5_000, Some(3)),
            "from the first lost event"
        );
        assert_eq!(
            (b.from, b.to, b.lost),
            (1_000, 5_000, Some(1)),
            "from the first failure"
        );
        assert!(a.why.contains("disk full"), "{}", a.why);
        assert!(h.wrote(6_000).is_empty(), "recorded once");
        // Not written (as `record_gaps` does): kept for the next success.
        h.failed(6_000, "full again");
        h.unrecorded(gaps);
        let again = h.wrote(7_000);
        assert_eq!(again.len(), 2);
        assert!(again.iter().all(|(_, g)| g.to == 7_000 && g.from <= 1_000), "{again:?}");
    }

    /// Review item 10: a queue-full loss waited 10 s of quiet, in memory only,
    /// while the cursor moved past it. Now it goes with the next batch.
    #[test]
    fn losses_of_a_full_queue_go_with_the_next_batch() {
        let h = Health::default();
        h.lost("a", 1_000, 2);
        h.lost("a", 4_000, 1);
        assert!(
            h.not_recording("a").is_none(),
            "writing works: the history is recording"
        );
        let gaps = h.take_lost();
        assert_eq!(gaps.len(), 1, "at once, not after a quiet spell");
        let g = &gaps[0].1;
        assert_eq!((g.from, g.to, g.lost), (1_000, 4_000, Some(3)));
        assert!(g.why.contains("queue was full"), "{}", g.why);
        assert!(h.take_lost().is_empty() && h.wrote(5_000).is_empty(), "taken once");
        // While writing fails they wait for the recovery's gap.
        h.failed(6_000, "disk full");
        h.lost("a", 6_500, 1);
        assert!(h.take_lost().is_empty());
        assert_eq!(h.wrote(7_000).len(), 1);
    }
}
