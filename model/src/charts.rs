//! The contention charts: windows cut into buckets, rates from counter
//! increases, wait-time percentiles from the sessions' histograms, and the
//! hold-time distribution's buckets. The server fills a [`Charts`]; the page
//! draws it with the same functions.
//!
//! Two sources, shown side by side and never mixed (`docs/operations.md`,
//! "Charts", says what each can miss):
//! - **counters**: the sessions' contention counters (attempts, acquisitions,
//!   conflicts, the wait histogram), summed as increases so that resets and
//!   sessions that come and go are handled ([`crate::contention`]), and sampled
//!   by the server every few seconds ([`CounterSeries`]). Exact counts of what
//!   clients did, but only since this server started watching the fleet, and
//!   only as sessions publish them (with their heartbeats);
//! - **seen**: events the dashboard observed, counted in the lock history
//!   ([`Seen`]): acquisitions, waits started (a session that found the lock
//!   held and queued for it: the conflicts the history can count), hold times,
//!   the most contended locks and services. They survive restarts, but miss
//!   what happened between two observations.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use crate::contention::{Totals, WAIT_BUCKETS};
use crate::record::WAIT_BUCKETS_MS;
use crate::time::Millis;

/// A chart's time span.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum ChartWindow {
    #[serde(rename = "5m")]
    FiveMinutes,
    #[serde(rename = "1h")]
    Hour,
    #[serde(rename = "24h")]
    Day,
}

impl ChartWindow {
    pub const ALL: [ChartWindow; 3] = [ChartWindow::FiveMinutes, ChartWindow::Hour, ChartWindow::Day];

    pub fn as_str(self) -> &'static str {
        match self {
            ChartWindow::FiveMinutes => "5m",
            ChartWindow::Hour => "1h",
            ChartWindow::Day => "24h",
        }
    }

    pub fn parse(s: &str) -> Option<ChartWindow> {
        ChartWindow::ALL.into_iter().find(|w| w.as_str() == s)
    }

    /// The `window=` of a query (default 5 min), or why it is not one.
    pub fn from_query(value: Option<&str>) -> Result<ChartWindow, String> {
        match value {
            None => Ok(ChartWindow::FiveMinutes),
            Some(w) => ChartWindow::parse(w).ok_or_else(|| format!("window={w:?}: use 5m, 1h or 24h")),
        }
    }

    /// A bucket's width: 5 s, 1 min, 15 min.
    pub fn bucket_ms(self) -> i64 {
        match self {
            ChartWindow::FiveMinutes => 5_000,
            ChartWindow::Hour => 60_000,
            ChartWindow::Day => 15 * 60_000,
        }
    }

    /// Buckets in the window: 60, 60, 96.
    pub fn buckets(self) -> usize {
        match self {
            ChartWindow::FiveMinutes | ChartWindow::Hour => 60,
            ChartWindow::Day => 96,
        }
    }

    /// How often the page asks again: often enough that the last bucket moves.
    pub fn refresh_ms(self) -> i64 {
        match self {
            ChartWindow::FiveMinutes => 5_000,
            ChartWindow::Hour => 15_000,
            ChartWindow::Day => 60_000,
        }
    }

    /// The window ending at `now`: buckets start on multiples of their width
    /// (unix time, so every replica and reload cuts the same buckets); the last
    /// one is partial and ends at `now`. Saturating: any `now` gives a frame.
    pub fn frame(self, now: Millis) -> Frame {
        let b = self.bucket_ms();
        let n = self.buckets();
        let last = now.div_euclid(b).saturating_mul(b);
        Frame {
            from: last.saturating_sub((n as i64 - 1) * b),
            to: now,
            bucket_ms: b,
            buckets: n,
        }
    }
}

/// A window's span and buckets: `[from, to]`, both included (as a history
/// query's bounds), bucket `i` from `from + i·bucket_ms`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Frame {
    pub from: Millis,
    pub to: Millis,
    pub bucket_ms: i64,
    pub buckets: usize,
}

impl Frame {
    /// Where bucket `i` starts (saturating, for any frame a client sends).
    pub fn start(&self, i: usize) -> Millis {
        let i = i64::try_from(i).unwrap_or(i64::MAX);
        self.from.saturating_add(i.saturating_mul(self.bucket_ms))
    }

    /// Where bucket `i` ends: the next one's start, or `to` for the last.
    pub fn end(&self, i: usize) -> Millis {
        if i.saturating_add(1) >= self.buckets {
            self.to
        } else {
            self.start(i + 1)
        }
    }

    /// The bucket an instant falls in (`None` outside the window).
    pub fn index(&self, at: Millis) -> Option<usize> {
        if at < self.from || at > self.to || self.buckets == 0 {
            return None;
        }
        let i = at.abs_diff(self.from) / self.bucket_ms.max(1).unsigned_abs();
        Some(usize::try_from(i).unwrap_or(usize::MAX).min(self.buckets - 1))
    }
}

/// The fleet's counter totals at one instant, as the server sampled them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CounterSample {
    /// The server's monotonic clock (ms since it started): durations.
    pub mono_ms: i64,
    /// Its wall clock (unix ms): where on the time axis.
    pub at: Millis,
    pub totals: Totals,
}

/// How long a [`CounterSeries`] keeps samples: the longest window and a bucket.
pub const COUNTER_KEEP_MS: i64 = 24 * 3_600_000 + 15 * 60_000;

/// The samples of one fleet's counter totals, oldest first, for the longest
/// window. Totals never decrease ([`crate::contention`]), so what grew between
/// two instants is a difference of two samples.
#[derive(Clone, Debug, Default)]
pub struct CounterSeries {
    samples: VecDeque<CounterSample>,
}

impl CounterSeries {
    /// Adds the latest sample (one not later on the monotonic clock than the
    /// last is ignored) and forgets those no window reaches back to, keeping
    /// one at or before the oldest instant a window can start at.
    pub fn push(&mut self, sample: CounterSample) {
        if self.samples.back().is_some_and(|last| last.mono_ms >= sample.mono_ms) {
            return;
        }
        let cutoff = sample.mono_ms - COUNTER_KEEP_MS;
        while self.samples.get(1).is_some_and(|next| next.mono_ms <= cutoff) {
            self.samples.pop_front();
        }
        self.samples.push_back(sample);
    }

    pub fn len(&self) -> usize {
        self.samples.len()
    }

    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }

    /// The oldest sample kept.
    pub fn first(&self) -> Option<&CounterSample> {
        self.samples.front()
    }

    /// The last sample at or before `mono_ms`.
    fn at_or_before(&self, mono_ms: i64) -> Option<&CounterSample> {
        let n = self.samples.partition_point(|s| s.mono_ms <= mono_ms);
        n.checked_sub(1).map(|i| &self.samples[i])
    }

    /// What the totals grew by from `from_ms` to `to_ms` (monotonic), between
    /// the last sample at or before each. A span that starts before the first
    /// sample (the server was not watching yet) is measured from the first:
    /// [`Increase::ms`] says over how long. `None` when fewer than two samples
    /// fall in it, so nothing can be said.
    pub fn increase(&self, from_ms: i64, to_ms: i64) -> Option<Increase> {
        let first = self.first()?;
        let start = self.at_or_before(from_ms).unwrap_or(first);
        let end = self.at_or_before(to_ms)?;
        (end.mono_ms > start.mono_ms).then(|| Increase {
            ms: end.mono_ms - start.mono_ms,
            counts: end.totals.since(&start.totals),
        })
    }
}

/// What the fleet's counters grew by over a span of `ms` (monotonic).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Increase {
    pub ms: i64,
    pub counts: Totals,
}

impl Increase {
    /// `n` per second over this span.
    pub fn per_second(&self, n: u64) -> f64 {
        n as f64 * 1000.0 / self.ms as f64
    }

    pub fn acquired_per_s(&self) -> f64 {
        self.per_second(self.counts.acquired)
    }

    pub fn conflicts_per_s(&self) -> f64 {
        self.per_second(self.counts.conflicts)
    }

    /// Conflicts per attempt, 0..=1 (`None`: no attempt).
    pub fn conflict_rate(&self) -> Option<f64> {
        (self.counts.attempts > 0).then(|| self.counts.conflicts as f64 / self.counts.attempts as f64)
    }

    /// The wait time below which a fraction `q` of this span's waits fell.
    pub fn wait_quantile(&self, q: f64) -> Option<Quantile> {
        quantile(&self.counts.wait_buckets, q)
    }
}

/// A percentile read from a histogram.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Quantile {
    /// Interpolated within its bucket, in ms.
    Ms(f64),
    /// Beyond the last bound (ms): the histogram cannot say how far.
    Above(u64),
}

impl Quantile {
    /// For plotting: the value, or the last bound for "above" (drawn as such).
    pub fn ms(self) -> f64 {
        match self {
            Quantile::Ms(ms) => ms,
            Quantile::Above(bound) => bound as f64,
        }
    }

    /// "37 ms", "1.4 s", "> 60 s".
    pub fn label(self) -> String {
        match self {
            Quantile::Ms(ms) => ms_label(ms),
            Quantile::Above(bound) => format!("> {}", ms_label(bound as f64)),
        }
    }
}

/// A duration in ms as a chart's hover shows it: "0.4 ms", "37 ms", "1.4 s",
/// "2.5 min", "1.2 h".
pub fn ms_label(ms: f64) -> String {
    match ms {
        m if m < 10.0 => format!("{m:.1} ms"),
        m if m < 1_000.0 => format!("{m:.0} ms"),
        m if m < 60_000.0 => format!("{:.1} s", m / 1_000.0),
        m if m < 3_600_000.0 => format!("{:.1} min", m / 60_000.0),
        m => format!("{:.1} h", m / 3_600_000.0),
    }
}

/// The `q` quantile (0 < q ≤ 1) of a wait histogram: bucket `i` counts waits
/// of at most [`WAIT_BUCKETS_MS`]`[i]` ms (and more than the bound before it),
/// the last bucket those beyond every bound. As Prometheus'
/// `histogram_quantile`, the value is interpolated linearly inside the bucket
/// the rank falls in; in the last bucket it is only "above". `None`: no waits,
/// or `q` out of range.
pub fn quantile(buckets: &[u64; WAIT_BUCKETS], q: f64) -> Option<Quantile> {
    // Saturating: the counts come from what sessions published.
    let total: u64 = buckets.iter().fold(0, |a, n| a.saturating_add(*n));
    if total == 0 || !(q > 0.0 && q <= 1.0) {
        return None;
    }
    let rank = q * total as f64;
    let mut below = 0u64;
    for (i, &n) in buckets.iter().enumerate() {
        if n > 0 && below.saturating_add(n) as f64 >= rank {
            let Some(&upper) = WAIT_BUCKETS_MS.get(i) else {
                return Some(Quantile::Above(*WAIT_BUCKETS_MS.last().expect("bounds")));
            };
            let lower = if i == 0 { 0 } else { WAIT_BUCKETS_MS[i - 1] };
            let within = (rank - below as f64) / n as f64;
            return Some(Quantile::Ms(lower as f64 + (upper - lower) as f64 * within));
        }
        below = below.saturating_add(n);
    }
    // The rank is at most the total, which the last count reaches.
    Some(Quantile::Above(*WAIT_BUCKETS_MS.last().expect("bounds")))
}

/// Bounds of the hold-time distribution's buckets (ms): a hold of `d` ms is
/// in the first bucket whose bound is at least `d`, or past the last.
pub const HOLD_BUCKETS_MS: [i64; 7] = [100, 1_000, 10_000, 60_000, 600_000, 3_600_000, 86_400_000];

/// The bucket of a hold of `ms` (one past the last bound: longer than all).
pub fn hold_bucket(ms: i64) -> usize {
    HOLD_BUCKETS_MS
        .iter()
        .position(|&b| ms <= b)
        .unwrap_or(HOLD_BUCKETS_MS.len())
}

/// A hold-time bucket's label: "≤ 100 ms", "1 s – 10 s", "> 1 d".
pub fn hold_bucket_label(i: usize) -> String {
    let short = |ms: i64| match ms {
        ..1_000 => format!("{ms} ms"),
        1_000..60_000 => format!("{} s", ms / 1_000),
        60_000..3_600_000 => format!("{} min", ms / 60_000),
        3_600_000..86_400_000 => format!("{} h", ms / 3_600_000),
        _ => format!("{} d", ms / 86_400_000),
    };
    match i {
        0 => format!("≤ {}", short(HOLD_BUCKETS_MS[0])),
        i if i >= HOLD_BUCKETS_MS.len() => format!("> {}", short(HOLD_BUCKETS_MS[HOLD_BUCKETS_MS.len() - 1])),
        i => format!("{} – {}", short(HOLD_BUCKETS_MS[i - 1]), short(HOLD_BUCKETS_MS[i])),
    }
}

/// A lock or a service and how often sessions waited for it in the window.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Contended {
    pub name: String,
    pub waits: u64,
}

/// How many of the top contended locks and services a [`Seen`] lists.
pub const TOP_CONTENDED: usize = 10;

/// What the lock history counted in a window.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Seen {
    /// Acquisitions seen, per bucket.
    pub acquisitions: Vec<u64>,
    /// Waits started (conflicts that queued), per bucket.
    pub waits: Vec<u64>,
    /// Holds that ended in the window (start and end both recorded), per
    /// [`HOLD_BUCKETS_MS`] bucket (plus one past the last).
    pub holds: Vec<u64>,
    /// Locks by waits started, most first ([`TOP_CONTENDED`] at most).
    pub top_locks: Vec<Contended>,
    /// Services by their sessions' waits started, most first.
    pub top_services: Vec<Contended>,
    /// The history's writer had not caught up with the window's end when it
    /// was counted: the last buckets may still grow.
    pub behind: bool,
}

/// One fleet's charts for one window: the page's data.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Charts {
    pub fleet: String,
    pub window: ChartWindow,
    pub frame: Frame,
    /// The counters' increase per bucket (`None`: no samples cover it).
    pub counters: Vec<Option<Increase>>,
    /// Over the whole window (or what of it this server sampled).
    pub counters_total: Option<Increase>,
    /// The oldest counter sample this server has (unix ms, its clock): it
    /// knows nothing of the counters before.
    pub counters_since: Option<Millis>,
    /// Sessions whose counters are followed now.
    pub sessions: usize,
    /// From the lock history (`None`: the history is off).
    pub seen: Option<Seen>,
}

impl Charts {
    /// The counters' increase in each bucket of `frame`, from samples taken
    /// on a monotonic clock: a bucket's edges are placed on it relative to
    /// `now` (`now_mono` is the same instant as `frame.to`), so a wall clock
    /// that steps moves no sample between buckets.
    pub fn counter_buckets(series: &CounterSeries, frame: &Frame, now_mono: i64) -> Vec<Option<Increase>> {
        let mono = |at: Millis| now_mono.saturating_sub(frame.to.saturating_sub(at));
        (0..frame.buckets)
            .map(|i| series.increase(mono(frame.start(i)), mono(frame.end(i))))
            .collect()
    }
}

#[cfg(test)]
mod tests;
