//! What the charts draw and the summary says, as plain data computed from a
//! [`Charts`] with the model's functions (rates, quantiles); tested natively.
//! A bucket without counter samples is `NaN` here: chartistry draws no line
//! through it (a gap, never a zero).

use chrono::{DateTime, Utc};
use lockscope_model::charts::{ChartWindow, Charts, Quantile};
use lockscope_model::record::WAIT_BUCKETS_MS;
use lockscope_model::time::{hms, human_duration, Millis};

/// One bucket of the time charts (`NaN`: nothing to say for it).
#[derive(Clone, Debug, PartialEq)]
pub struct Point {
    /// The bucket's start.
    pub at: DateTime<Utc>,
    /// Acquisitions/s from the sessions' counters.
    pub acquired: f64,
    /// Acquisitions/s seen in the history.
    pub acquired_seen: f64,
    /// Conflicts/s from the counters.
    pub conflicts: f64,
    /// Waits started/s seen in the history.
    pub waits_seen: f64,
    /// Conflicts per attempt, in % (counters).
    pub conflict_pct: f64,
    /// Wait time percentiles (ms) of the bucket's waits (counters' histogram);
    /// one beyond the histogram's last bound is drawn at that bound.
    pub p50: f64,
    pub p95: f64,
    pub p99: f64,
    /// The last bound where any percentile is beyond it: marked on the chart.
    pub beyond: f64,
}

/// The wait histogram's last bound (ms): percentiles beyond it are "> bound".
pub fn wait_bound() -> f64 {
    *WAIT_BUCKETS_MS.last().expect("the histogram has bounds") as f64
}

fn instant(ms: Millis) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(ms).unwrap_or_default()
}

fn or_nan(v: Option<f64>) -> f64 {
    v.unwrap_or(f64::NAN)
}

/// The time charts' points, one per bucket.
pub fn points(c: &Charts) -> Vec<Point> {
    let f = &c.frame;
    (0..f.buckets)
        .map(|i| {
            let inc = c.counters.get(i).copied().flatten();
            // The last bucket is partial: a rate over the part that exists.
            let secs = (f.end(i) - f.start(i)) as f64 / 1000.0;
            let seen_rate = |counts: fn(&lockscope_model::charts::Seen) -> &Vec<u64>| {
                c.seen
                    .as_ref()
                    .and_then(|s| counts(s).get(i))
                    .filter(|_| secs > 0.0)
                    .map_or(f64::NAN, |&n| n as f64 / secs)
            };
            let q = |q: f64| inc.and_then(|inc| inc.wait_quantile(q));
            let (p50, p95, p99) = (q(0.5), q(0.95), q(0.99));
            let beyond = [p50, p95, p99].into_iter().flatten().find_map(|q| match q {
                Quantile::Above(bound) => Some(bound as f64),
                Quantile::Ms(_) => None,
            });
            Point {
                at: instant(f.start(i)),
                acquired: or_nan(inc.map(|i| i.acquired_per_s())),
                acquired_seen: seen_rate(|s| &s.acquisitions),
                conflicts: or_nan(inc.map(|i| i.conflicts_per_s())),
                waits_seen: seen_rate(|s| &s.waits),
                conflict_pct: or_nan(inc.and_then(|i| i.conflict_rate()).map(|r| r * 100.0)),
                p50: or_nan(p50.map(Quantile::ms)),
                p95: or_nan(p95.map(Quantile::ms)),
                p99: or_nan(p99.map(Quantile::ms)),
                beyond: or_nan(beyond),
            }
        })
        .collect()
}

/// The window's totals, as the summary shows them (`None`: that source has
/// nothing for the window).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Totals {
    pub acquired: Option<u64>,
    pub acquired_seen: Option<u64>,
    pub conflicts: Option<u64>,
    pub waits_seen: Option<u64>,
    /// Conflicts per attempt, 0..=1.
    pub conflict_rate: Option<f64>,
    pub p50: Option<Quantile>,
    pub p95: Option<Quantile>,
    pub p99: Option<Quantile>,
    /// How long the counters' total covers (ms).
    pub counters_ms: Option<i64>,
    pub holds_ended: Option<u64>,
}

pub fn totals(c: &Charts) -> Totals {
    let t = c.counters_total;
    let seen = c.seen.as_ref();
    let q = |q: f64| t.and_then(|t| t.wait_quantile(q));
    Totals {
        acquired: t.map(|t| t.counts.acquired),
        acquired_seen: seen.map(|s| s.acquisitions.iter().sum()),
        conflicts: t.map(|t| t.counts.conflicts),
        waits_seen: seen.map(|s| s.waits.iter().sum()),
        conflict_rate: t.and_then(|t| t.conflict_rate()),
        p50: q(0.5),
        p95: q(0.95),
        p99: q(0.99),
        counters_ms: t.map(|t| t.ms),
        holds_ended: seen.map(|s| s.holds.iter().sum()),
    }
}

/// "12.5%" of a 0..=1 rate.
pub fn percent(rate: f64) -> String {
    format!("{:.1}%", rate * 100.0)
}

/// "3.20/s".
pub fn per_second(v: f64) -> String {
    if v.is_nan() {
        return "no data".into();
    }
    format!("{v:.2}/s")
}

/// What the page says about buckets the counters cannot fill, if any: the
/// server started watching inside the window, or has no sample at all.
pub fn gap_note(c: &Charts) -> Option<String> {
    match c.counters_since {
        None => Some(
            "no counter samples yet: this server has not sampled the sessions' counters \
             (the counters' lines are empty)"
                .into(),
        ),
        Some(since) if since > c.frame.from => Some(format!(
            "no counter samples before {} (this server started watching then): \
             the counters' lines start there",
            hms(since)
        )),
        Some(_) => None,
    }
}

/// "last 5 min", "last 1 h", "last 24 h": the window as its span.
pub fn window_span(w: ChartWindow) -> &'static str {
    match w {
        ChartWindow::FiveMinutes => "last 5 min",
        ChartWindow::Hour => "last 1 h",
        ChartWindow::Day => "last 24 h",
    }
}

/// A bucket's span as a tooltip's heading: "04:20:05 UTC–04:20:10 UTC" (in the display zone).
pub fn bucket_text(start: Millis, bucket_ms: i64) -> String {
    format!("{}–{}", hms(start), hms(start + bucket_ms))
}

/// How often the page asks again, as words: "every 5s".
pub fn refresh_text(refresh_ms: i64) -> String {
    format!("every {}", human_duration(refresh_ms))
}
