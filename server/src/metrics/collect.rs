//! The per-fleet families, encoded at scrape time from what the hubs publish:
//! their summaries (counts, store status) and their [`FleetStats`]. A scrape
//! reads a few numbers per fleet; nothing is counted or scanned here.

use std::fmt;

use lockscope_model::record::WAIT_BUCKETS_MS;
use lockscope_model::time::Millis;
use lockscope_model::{FleetSummary, StoreStatus};
use lockscope_store::now_ms;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Unit;

use crate::live::hub::Fleets;
use crate::live::stats::StatsNow;

/// Encodes every fleet's families (registered with the [`super::Metrics`] registry).
#[derive(Clone)]
pub(super) struct FleetCollector {
    pub(super) fleets: Fleets,
}

impl fmt::Debug for FleetCollector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FleetCollector")
            .field("fleets", &self.fleets.names())
            .finish()
    }
}

/// One fleet at scrape time.
struct Row {
    summary: FleetSummary,
    stats: StatsNow,
}

impl Row {
    /// Seconds since the oldest held lock was taken, on this server's clock
    /// (0 when none is held).
    fn oldest_age_seconds(&self, now: Millis) -> f64 {
        self.stats
            .oldest_acquired_at
            .map_or(0.0, |at| (now - at).max(0) as f64 / 1000.0)
    }
}

/// Encodes one family: a descriptor, then one sample per fleet.
fn family(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    kind: MetricType,
    rows: &[Row],
    mut sample: impl FnMut(&Row, MetricEncoder) -> fmt::Result,
) -> fmt::Result {
    let mut m = enc.encode_descriptor(name, help, unit, kind)?;
    for row in rows {
        let labels = [("fleet", row.summary.name.as_str())];
        sample(row, m.encode_family(&labels)?)?;
    }
    Ok(())
}

fn gauge(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    rows: &[Row],
    value: impl Fn(&Row) -> u64,
) -> fmt::Result {
    family(enc, name, help, None, MetricType::Gauge, rows, |r, m| {
        ConstGauge::new(value(r) as i64).encode(m)
    })
}

fn counter(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    rows: &[Row],
    value: impl Fn(&Row) -> u64,
) -> fmt::Result {
    family(enc, name, help, None, MetricType::Counter, rows, |r, m| {
        ConstCounter::new(value(r)).encode(m)
    })
}

impl Collector for FleetCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> fmt::Result {
        let now = now_ms();
        let rows: Vec<Row> = self
            .fleets
            .all()
            .iter()
            .map(|h| Row {
                summary: h.summary(),
                stats: h.stats().now(),
            })
            .collect();
        let e = &mut enc;
        gauge(
            e,
            "locks_held",
            "Locks held (every lock entry, malformed ones included).",
            &rows,
            |r| r.summary.counts.held,
        )?;
        gauge(e, "lock_waiters", "Sessions waiting for a lock.", &rows, |r| {
            r.summary.counts.waiters
        })?;
        gauge(
            e,
            "deadlock_cycles",
            "Cycles in the fleet's deadlock view: sessions waiting, through the locks they wait for, on each other.",
            &rows,
            |r| r.stats.deadlock_cycles,
        )?;
        gauge(e, "locks_overdue", "Locks held past their alert_at.", &rows, |r| {
            r.summary.counts.overdue
        })?;
        gauge(
            e,
            "locks_expired",
            "Locks past their auto_unlock_at, not extended by their holder.",
            &rows,
            |r| r.summary.counts.expired,
        )?;
        gauge(
            e,
            "locks_orphaned",
            "Locks whose holder's session is gone.",
            &rows,
            |r| r.summary.counts.orphaned,
        )?;
        gauge(
            e,
            "locks_blacklisted",
            "Locks whose holder's session is blacklisted.",
            &rows,
            |r| r.summary.counts.blacklisted,
        )?;
        gauge(
            e,
            "locks_malformed",
            "Lock entries whose value is not a readable lock record.",
            &rows,
            |r| r.summary.counts.malformed,
        )?;
        gauge(
            e,
            "locks_foreign",
            "Locks held by clients of a foreign schema that keeps no times (whether they are overdue or expired is unknown).",
            &rows,
            |r| r.summary.counts.foreign,
        )?;
        family(
            e,
            "oldest_lock_age",
            "Age of the oldest held lock (now on this server's clock minus its acquired_at); 0 when none is held.",
            Some(&Unit::Seconds),
            MetricType::Gauge,
            &rows,
            |r, m| ConstGauge::new(r.oldest_age_seconds(now)).encode(m),
        )?;
        counter(
            e,
            "lock_acquisitions",
            "Locks acquired, from the sessions' counters (increases seen by this server).",
            &rows,
            |r| r.stats.contention.acquired,
        )?;
        counter(
            e,
            "lock_conflicts",
            "Acquisition attempts that found the lock held, from the sessions' counters.",
            &rows,
            |r| r.stats.contention.conflicts,
        )?;
        counter(
            e,
            "lock_attempts",
            "Acquisition attempts (including retries after a wait), from the sessions' counters.",
            &rows,
            |r| r.stats.contention.attempts,
        )?;
        counter(
            e,
            "locks_lost",
            "Locks their holder lost (taken away, or refused as blacklisted), from the sessions' counters.",
            &rows,
            |r| r.stats.contention.lost,
        )?;
        family(
            e,
            "lock_wait",
            "Time from a lock call's first attempt to acquiring the lock or giving up, from the sessions' histograms.",
            Some(&Unit::Seconds),
            MetricType::Histogram,
            &rows,
            |r, mut m| {
                let c = &r.stats.contention;
                let buckets: Vec<(f64, u64)> = WAIT_BUCKETS_MS
                    .iter()
                    .map(|ms| *ms as f64 / 1000.0)
                    .chain([f64::INFINITY])
                    .zip(c.wait_buckets)
                    .collect();
                m.encode_histogram::<NoLabelSet>(c.wait_sum_ms as f64 / 1000.0, c.waits(), &buckets, None)
            },
        )?;
        gauge(
            e,
            "store_up",
            "1 when the store connection is live, else 0.",
            &rows,
            |r| r.summary.status.is_live() as u64,
        )?;
        gauge(
            e,
            "store_writes_blocked",
            "1 while the store is read but a write waits past its busy timeout (another process holds an SQLite file's write lock), else 0.",
            &rows,
            |r| matches!(r.summary.status, StoreStatus::WritesBlocked { .. }) as u64,
        )?;
        counter(
            e,
            "store_reconnects",
            "Times the store connection came back live after being unreachable.",
            &rows,
            |r| r.stats.reconnects,
        )?;
        gauge(
            e,
            "websocket_subscribers",
            "Open websocket connections (browsers) on the fleet.",
            &rows,
            |r| r.stats.websockets,
        )?;
        counter(
            e,
            "websocket_lag_drops",
            "Websocket subscribers dropped because their queue was full (not reading).",
            &rows,
            |r| r.stats.lag_drops,
        )?;
        Ok(())
    }
}

/// The history writer's numbers (one series each; the history is shared by
/// every fleet): events written, already there, dropped because the queue was
/// full or a batch failed, still queued, failed batches and whether writing is
/// failing now; events replayed and gaps recorded at a restart; the exports running, refused and
/// stalled, and the exports' limits.
#[derive(Debug)]
pub(super) struct HistoryCollector {
    pub(super) stats: std::sync::Arc<crate::remember::history::HistoryStats>,
}

impl Collector for HistoryCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> fmt::Result {
        use std::sync::atomic::Ordering::Relaxed;
        let s = &self.stats;
        let counters = [
            (
                "history_events_written",
                "Lock history events written",
                s.written.load(Relaxed),
            ),
            (
                "history_events_dropped",
                "Lock history events lost: the queue was full (history fell behind) or their batch failed",
                s.dropped.load(Relaxed),
            ),
            (
                "history_events_duplicate",
                "Lock history events already in the history (another replica or a restart wrote them): not written again",
                s.duplicates.load(Relaxed),
            ),
            (
                "history_batches_failed",
                "Lock history batches the database did not take",
                s.failed_batches.load(Relaxed),
            ),
            (
                "history_replayed_events",
                "Lock history events derived from what a store replayed after a restart (etcd: what changed while no dashboard watched)",
                s.replayed.load(Relaxed),
            ),
            (
                "history_restart_gaps",
                "Gaps recorded at a restart: the store could not replay what changed while no dashboard watched",
                s.restart_gaps.load(Relaxed),
            ),
            (
                "history_outage_gaps",
                "Gaps recorded at a reconnect that read a fresh snapshot: the store could not replay what changed during its outage",
                s.outage_gaps.load(Relaxed),
            ),
            (
                "history_exports_refused",
                "History exports refused (429): the identity's or the server's cap of running exports",
                s.exports_refused.load(Relaxed),
            ),
            (
                "history_exports_stalled",
                "History exports ended because their reader took nothing for the idle timeout",
                s.exports_stalled.load(Relaxed),
            ),
        ];
        for (name, help, value) in counters {
            let m = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
            ConstCounter::new(value).encode(m)?;
        }
        let l = &s.limits;
        let gauges = [
            (
                "history_events_queued",
                "Lock history events queued and not yet written",
                s.queued.load(Relaxed) as i64,
            ),
            (
                "history_writing_failing",
                "1 while the lock history's database refuses writes (the pages say since when and how many events were lost)",
                i64::from(s.health.failing()),
            ),
            (
                "history_exports_running",
                "History exports running now",
                s.exports_active.load(Relaxed) as i64,
            ),
            (
                "history_export_limit_per_identity",
                "History exports one identity may run at a time ([history_exports] per_identity)",
                l.per_identity as i64,
            ),
            (
                "history_export_limit_total",
                "History exports the server runs at a time ([history_exports] total)",
                l.total as i64,
            ),
            (
                "history_export_idle_timeout_seconds",
                "An export whose reader takes nothing this long is ended ([history_exports] idle_secs)",
                l.idle.as_secs() as i64,
            ),
            (
                "history_export_connections",
                "Database connections of the exports' own pool ([history_exports] connections)",
                l.connections as i64,
            ),
        ];
        for (name, help, value) in gauges {
            let m = enc.encode_descriptor(name, help, None, MetricType::Gauge)?;
            ConstGauge::new(value).encode(m)?;
        }
        Ok(())
    }
}
