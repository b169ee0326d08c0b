//! What `lockscope-bench viewers` prints: the summary line, the figures file
//! `scripts/bench.sh` judges the goals by, and a line per lagged or failed viewer.

use super::*;

/// Nearest-rank percentile of sorted values (as the Chromium probe computes it).
pub(crate) fn pct(sorted: &[i64], p: f64) -> i64 {
    sorted[((p / 100.0 * sorted.len() as f64) as usize).min(sorted.len() - 1)]
}

pub(super) fn summary(viewers: &[Viewer], writes: Option<&[Write]>, args: &Args, cpu: Option<f64>) -> String {
    let ok: Vec<&Viewer> = viewers.iter().filter(|v| v.error.is_none()).collect();
    let sum = |f: fn(&Viewer) -> u64| viewers.iter().map(f).sum::<u64>();
    let mut lat: Vec<i64> = viewers.iter().flat_map(|v| v.latencies.iter().copied()).collect();
    lat.sort_unstable();
    let mut first: Vec<i64> = viewers
        .iter()
        .filter_map(|v| Some(v.first_frame_at? - v.asked_at))
        .collect();
    first.sort_unstable();
    let max = |f: fn(&Viewer) -> i64| viewers.iter().map(f).max().unwrap_or(0);
    let late = args.late_ms;
    let mut s = format!(
        "{} viewers ({} ran to the end, {} errors): {} frames, {:.1} MB",
        viewers.len(),
        ok.len(),
        viewers.len() - ok.len(),
        sum(|v| v.frames),
        sum(|v| v.bytes) as f64 / 1e6
    );
    if !first.is_empty() {
        s += &format!(
            "; view asked -> first frame p50 {} / max {} ms",
            pct(&first, 50.0),
            first[first.len() - 1]
        );
    }
    if lat.is_empty() {
        s += "; no bench stamps seen";
    } else {
        s += &format!(
            "; store write -> frame p50 {} / p95 {} / p99 {} / max {} ms over {} stamps seen by {} viewers",
            pct(&lat, 50.0),
            pct(&lat, 95.0),
            pct(&lat, 99.0),
            lat[lat.len() - 1],
            lat.len(),
            viewers.iter().filter(|v| !v.latencies.is_empty()).count()
        );
        let mut sent: Vec<i64> = viewers.iter().flat_map(|v| v.to_sent.iter().copied()).collect();
        sent.sort_unstable();
        s += &format!(
            " (of which store write -> frame sent p50 {} / p95 {} / max {} ms; {} more not timed: older than the \
             view, or brought by a row entering a window)",
            pct(&sent, 50.0),
            pct(&sent, 95.0),
            sent[sent.len() - 1],
            sum(|v| v.untimed)
        );
    }
    s += &format!(
        "; frame age at receipt max {} ms, waited_ms max {}, longest gap between frames once stamps flowed {} ms",
        max(|v| v.max_age_ms),
        viewers.iter().map(|v| v.max_waited_ms).max().unwrap_or(0),
        max(|v| v.max_gap_ms)
    );
    if writes.is_some() {
        s += &format!(
            "; {} writes to windows, {} not shown within {late} ms ({} never)",
            sum(|v| v.judged),
            sum(|v| v.stale),
            sum(|v| v.never)
        );
    }
    s += &format!(
        "; lagged (a frame over {late} ms old or held{}): {} viewers",
        if writes.is_some() {
            format!(", or a write to its window not shown within {late} ms")
        } else {
            String::new()
        },
        viewers.iter().filter(|v| v.lagged()).count()
    );
    if let Some(c) = cpu {
        s += &format!("; probe CPU {:.0} % of a core", c * 100.0);
    }
    s
}

/// The figures the goals are judged by, `name=value` a line: first frames (p50,
/// max, viewers without one), store write -> frame p50, lagged viewers, errors.
/// A figure not measured is -1.
pub(super) fn figures(viewers: &[Viewer]) -> String {
    let mut first: Vec<i64> = viewers
        .iter()
        .filter_map(|v| Some(v.first_frame_at? - v.asked_at))
        .collect();
    first.sort_unstable();
    let mut lat: Vec<i64> = viewers.iter().flat_map(|v| v.latencies.iter().copied()).collect();
    lat.sort_unstable();
    let p50 = |v: &[i64]| if v.is_empty() { -1 } else { pct(v, 50.0) };
    let figures = [
        ("viewers", viewers.len() as i64),
        ("first_frame_p50_ms", p50(&first)),
        ("first_frame_max_ms", first.last().copied().unwrap_or(-1)),
        ("no_first_frame", (viewers.len() - first.len()) as i64),
        ("write_frame_p50_ms", p50(&lat)),
        ("lagged", viewers.iter().filter(|v| v.lagged()).count() as i64),
        ("errors", viewers.iter().filter(|v| v.error.is_some()).count() as i64),
    ];
    figures.iter().map(|(k, v)| format!("{k}={v}\n")).collect()
}

pub(super) fn detail(v: &Viewer) -> String {
    let query: Vec<String> = v.view.to_query().into_iter().map(|(k, v)| format!("{k}={v}")).collect();
    let mut s = format!(
        "viewer ?{}: {} frames, {} stamps, late frames {}, writes not shown in time {} ({} never), longest gap {} ms",
        query.join("&"),
        v.frames,
        v.latencies.len(),
        v.late_frames,
        v.stale,
        v.never,
        v.max_gap_ms
    );
    if !v.examples.is_empty() {
        s += &format!(" ({})", v.examples.join("; "));
    }
    if let Some(e) = &v.error {
        s += &format!(", error: {e}");
    }
    s
}
