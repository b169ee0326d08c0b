//! Table-driven: each row is an input and the number a chart must show.

use super::*;

fn hist(counts: &[(usize, u64)]) -> [u64; WAIT_BUCKETS] {
    let mut b = [0; WAIT_BUCKETS];
    for &(i, n) in counts {
        b[i] = n;
    }
    b
}

#[test]
fn quantiles_interpolate_inside_their_bucket() {
    // Bounds: 1, 5, 10, 50, 100, 500, 1000, 5000, 10000, 60000 ms, then overflow (index 10).
    // (bucket counts, q, the quantile)
    type Row<'a> = (&'a [(usize, u64)], f64, Option<Quantile>);
    let rows: &[Row] = &[
        // No waits: nothing to say.
        (&[], 0.5, None),
        // Out-of-range q.
        (&[(0, 4)], 0.0, None),
        (&[(0, 4)], 1.5, None),
        // All in (0, 1]: the median is halfway.
        (&[(0, 4)], 0.5, Some(Quantile::Ms(0.5))),
        (&[(0, 4)], 1.0, Some(Quantile::Ms(1.0))),
        // 100 waits in (10, 50]: p95 at 10 + 40·0.95.
        (&[(3, 100)], 0.95, Some(Quantile::Ms(48.0))),
        // 50 in (0,1], 50 in (100, 500]: the median is the first bucket's top,
        // p99 is 98 % into the second.
        (&[(0, 50), (5, 50)], 0.5, Some(Quantile::Ms(1.0))),
        (&[(0, 50), (5, 50)], 0.99, Some(Quantile::Ms(100.0 + 400.0 * 0.98))),
        // Empty buckets between are skipped, not interpolated into.
        (&[(0, 1), (9, 1)], 0.75, Some(Quantile::Ms(10_000.0 + 50_000.0 * 0.5))),
        // The rank falls in the overflow bucket: only "above the last bound".
        (&[(0, 90), (10, 10)], 0.95, Some(Quantile::Above(60_000))),
        (&[(0, 90), (10, 10)], 0.9, Some(Quantile::Ms(1.0))),
    ];
    for (counts, q, want) in rows {
        let got = quantile(&hist(counts), *q);
        match (got, want) {
            (Some(Quantile::Ms(g)), Some(Quantile::Ms(w))) => {
                assert!((g - w).abs() < 1e-9, "{counts:?} q={q}: {g} != {w}")
            }
            _ => assert_eq!(got, *want, "{counts:?} q={q}"),
        }
    }
}

fn totals(attempts: u64, acquired: u64, conflicts: u64) -> Totals {
    Totals {
        attempts,
        acquired,
        conflicts,
        ..Totals::default()
    }
}

fn sample(mono_ms: i64, t: Totals) -> CounterSample {
    CounterSample {
        mono_ms,
        at: 1_000_000 + mono_ms,
        totals: t,
    }
}

#[test]
fn increases_and_rates_between_samples() {
    let mut series = CounterSeries::default();
    for (mono, a, q, c) in [
        (0, 0, 0, 0),
        (5_000, 10, 8, 2),
        (10_000, 30, 20, 10),
        (20_000, 30, 20, 10),
    ] {
        series.push(sample(mono, totals(a, q, c)));
    }
    // (from, to) → (ms, attempts, acquired, conflicts, acquired/s, conflict rate)
    type Want = (i64, u64, u64, u64, f64, Option<f64>);
    let rows: &[(i64, i64, Option<Want>)] = &[
        (0, 5_000, Some((5_000, 10, 8, 2, 1.6, Some(0.2)))),
        (0, 10_000, Some((10_000, 30, 20, 10, 2.0, Some(1.0 / 3.0)))),
        // Edges between samples: the last sample at or before each.
        (2_000, 12_000, Some((10_000, 30, 20, 10, 2.0, Some(1.0 / 3.0)))),
        (5_000, 9_999, None),
        // Idle span: a rate of zero over a known time, no conflict rate.
        (10_000, 20_000, Some((10_000, 0, 0, 0, 0.0, None))),
        // Starting before the first sample: measured from it, over what is known.
        (-60_000, 5_000, Some((5_000, 10, 8, 2, 1.6, Some(0.2)))),
        // Wholly before the first sample: nothing.
        (-60_000, -1, None),
    ];
    for &(from, to, want) in rows {
        let got = series.increase(from, to);
        match (got, want) {
            (None, None) => {}
            (Some(g), Some((ms, a, q, c, per_s, rate))) => {
                assert_eq!(
                    (g.ms, g.counts.attempts, g.counts.acquired, g.counts.conflicts),
                    (ms, a, q, c),
                    "{from}..{to}"
                );
                assert!(
                    (g.acquired_per_s() - per_s).abs() < 1e-9,
                    "{from}..{to}: {}",
                    g.acquired_per_s()
                );
                match (g.conflict_rate(), rate) {
                    (Some(g), Some(w)) => assert!((g - w).abs() < 1e-9),
                    (g, w) => assert_eq!(g, w),
                }
            }
            _ => panic!("{from}..{to}: got {got:?}, want {want:?}"),
        }
    }
}

#[test]
fn a_series_keeps_the_longest_window_and_one_sample_before_it() {
    let mut series = CounterSeries::default();
    let step = 5_000;
    let n = COUNTER_KEEP_MS / step + 100;
    for i in 0..n {
        series.push(sample(i * step, totals(i as u64, 0, 0)));
    }
    // A sample not later than the last is ignored (a clock cannot go back).
    series.push(sample((n - 1) * step, totals(0, 0, 0)));
    let last = (n - 1) * step;
    let first = series.first().unwrap().mono_ms;
    assert!(first <= last - COUNTER_KEEP_MS, "the oldest window's start is covered");
    assert!(first > last - COUNTER_KEEP_MS - step, "nothing older than needed");
    let day = series.increase(last - 24 * 3_600_000, last).unwrap();
    assert_eq!(day.ms, 24 * 3_600_000);
    assert_eq!(day.counts.attempts, (24 * 3_600_000 / step) as u64);
}

#[test]
fn frames_cut_aligned_buckets_and_place_instants() {
    // (window, now) → (from, last bucket's start)
    let rows = [
        (ChartWindow::FiveMinutes, 1_000_003_000, 1_000_000_000 - 59 * 5_000),
        (ChartWindow::Hour, 3_600_000 * 10 + 59_999, 3_600_000 * 10 - 59 * 60_000),
        (ChartWindow::Day, 900_000 * 200, 900_000 * 200 - 95 * 900_000),
    ];
    for (w, now, from) in rows {
        let f = w.frame(now);
        assert_eq!(f.from, from, "{w:?}");
        assert_eq!(f.to, now);
        assert_eq!(f.buckets, w.buckets());
        assert!(
            f.to - f.from < w.bucket_ms() * w.buckets() as i64,
            "{w:?} spans at most its window"
        );
        assert_eq!(f.index(f.from), Some(0));
        assert_eq!(f.index(f.to), Some(f.buckets - 1));
        assert_eq!(f.index(f.from - 1), None);
        assert_eq!(f.index(f.to + 1), None);
        assert_eq!(f.end(f.buckets - 1), now);
        for i in 0..f.buckets {
            assert_eq!(f.index(f.start(i)), Some(i));
            if f.end(i) > f.start(i) {
                assert_eq!(f.index(f.end(i) - 1), Some(i));
            }
        }
    }
    for w in ChartWindow::ALL {
        assert_eq!(ChartWindow::parse(w.as_str()), Some(w));
    }
    assert_eq!(ChartWindow::parse("7m"), None);
}

#[test]
fn counter_buckets_follow_the_monotonic_clock() {
    // Samples every 5 s; the wall clock of the last one stepped back an hour
    // (a sample's wall time is never used to place it).
    let mut series = CounterSeries::default();
    for i in 0..=24 {
        let mut s = sample(i * 5_000, totals(i as u64 * 2, i as u64, i as u64));
        if i == 24 {
            s.at -= 3_600_000;
        }
        series.push(s);
    }
    let frame = ChartWindow::FiveMinutes.frame(60 * 5_000 * 1_000 + 2_500);
    let now_mono = 24 * 5_000 + 2_500;
    let buckets = Charts::counter_buckets(&series, &frame, now_mono);
    assert_eq!(buckets.len(), 60);
    // Before the server's first sample: nothing known.
    let known: Vec<_> = buckets.iter().flatten().collect();
    assert_eq!(known.len(), 24, "{buckets:?}");
    assert!(buckets[..35].iter().all(Option::is_none));
    // The last bucket holds no second sample yet.
    assert!(buckets[59].is_none());
    for inc in known {
        assert_eq!(inc.ms, 5_000);
        assert_eq!((inc.counts.attempts, inc.counts.acquired), (2, 1));
        assert!((inc.conflicts_per_s() - 0.2).abs() < 1e-9);
    }
}

#[test]
fn hold_times_fall_in_labelled_buckets() {
    let rows = [
        (0, 0, "≤ 100 ms"),
        (100, 0, "≤ 100 ms"),
        (101, 1, "100 ms – 1 s"),
        (59_999, 3, "10 s – 1 min"),
        (600_000, 4, "1 min – 10 min"),
        (3_600_001, 6, "1 h – 1 d"),
        (86_400_001, 7, "> 1 d"),
    ];
    for (ms, bucket, label) in rows {
        assert_eq!(hold_bucket(ms), bucket, "{ms}");
        assert_eq!(hold_bucket_label(bucket), label);
    }
}

#[test]
fn durations_read_in_their_unit() {
    let rows = [
        (0.42, "0.4 ms"),
        (37.0, "37 ms"),
        (1_400.0, "1.4 s"),
        (150_000.0, "2.5 min"),
        (4_320_000.0, "1.2 h"),
    ];
    for (ms, label) in rows {
        assert_eq!(ms_label(ms), label);
    }
    assert_eq!(Quantile::Above(60_000).label(), "> 1.0 min");
}
