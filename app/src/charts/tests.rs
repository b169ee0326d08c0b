use lockscope_model::charts::{ChartWindow, Charts, Contended, Increase, Seen};
use lockscope_model::contention::{Totals, WAIT_BUCKETS};

use super::freshness::{status, Freshness};
use super::series::{gap_note, points, totals};

/// 2023-11-14T22:13:20Z plus a little: the window's end.
const NOW: i64 = 1_700_000_003_250;

fn increase(acquired: u64, conflicts: u64, waits: [u64; WAIT_BUCKETS]) -> Increase {
    Increase {
        ms: 5_000,
        counts: Totals {
            attempts: acquired + conflicts,
            acquired,
            conflicts,
            wait_buckets: waits,
            ..Totals::default()
        },
    }
}

/// A 5-minute window whose first 10 buckets have no counter samples, the
/// rest 8 acquisitions and 2 conflicts each; the last one's waits are all
/// beyond the histogram.
fn sample() -> Charts {
    let frame = ChartWindow::FiveMinutes.frame(NOW);
    let n = frame.buckets;
    let mut waits = [0; WAIT_BUCKETS];
    waits[2] = 2;
    let mut beyond = [0; WAIT_BUCKETS];
    beyond[WAIT_BUCKETS - 1] = 2;
    let counters: Vec<Option<Increase>> = (0..n)
        .map(|i| match i {
            0..10 => None,
            i if i == n - 1 => Some(increase(8, 2, beyond)),
            _ => Some(increase(8, 2, waits)),
        })
        .collect();
    let mut holds = vec![0; 8];
    holds[1] = 40;
    holds[3] = 7;
    Charts {
        fleet: "prod eu".into(),
        window: ChartWindow::FiveMinutes,
        frame,
        counters,
        counters_total: Some(Increase {
            ms: 250_000,
            counts: Totals {
                attempts: 500,
                acquired: 400,
                conflicts: 100,
                wait_buckets: {
                    let mut w = [0; WAIT_BUCKETS];
                    w[2] = 98;
                    w[WAIT_BUCKETS - 1] = 2;
                    w
                },
                ..Totals::default()
            },
        }),
        counters_since: Some(frame.start(10) - 1_000),
        sessions: 3,
        seen: Some(Seen {
            acquisitions: vec![5; n],
            waits: (0..n as u64).map(|i| i % 3).collect(),
            holds,
            top_locks: vec![
                Contended {
                    name: "jobs/a b".into(),
                    waits: 30,
                },
                Contended {
                    name: "jobs/c".into(),
                    waits: 3,
                },
            ],
            top_services: vec![Contended {
                name: "billing".into(),
                waits: 33,
            }],
            behind: false,
        }),
    }
}

#[test]
fn buckets_without_counter_samples_are_gaps_not_zeros() {
    let c = sample();
    let p = points(&c);
    assert_eq!(p.len(), 60);
    assert!(p[0].acquired.is_nan() && p[9].conflict_pct.is_nan() && p[9].p50.is_nan());
    assert_eq!(p[10].acquired, 8.0 * 1000.0 / 5_000.0);
    assert_eq!(p[10].conflicts, 0.4);
    assert_eq!(p[10].conflict_pct, 20.0);
    // The history counts every bucket: its zeros are zeros.
    assert_eq!(p[0].acquired_seen, 1.0);
    assert_eq!(p[0].waits_seen, 0.0);
    assert_eq!(p[0].at.timestamp_millis(), c.frame.from);
    // The last bucket is partial: its history rate is over what exists of it.
    let last_secs = (c.frame.to - c.frame.start(59)) as f64 / 1000.0;
    assert_eq!(p[59].acquired_seen, 5.0 / last_secs);
}

#[test]
fn percentiles_beyond_the_histogram_are_marked_at_its_bound() {
    let p = points(&sample());
    assert!(p[10].p50 > 5.0 && p[10].p99 <= 10.0, "{:?}", p[10]);
    assert!(p[10].beyond.is_nan());
    assert_eq!(p[59].p99, 60_000.0);
    assert_eq!(p[59].beyond, 60_000.0);
}

#[test]
fn totals_come_from_each_source() {
    let t = totals(&sample());
    assert_eq!(t.acquired, Some(400));
    assert_eq!(t.acquired_seen, Some(300));
    assert_eq!(t.conflicts, Some(100));
    assert_eq!(t.waits_seen, Some((0..60u64).map(|i| i % 3).sum()));
    assert_eq!(t.conflict_rate, Some(0.2));
    assert_eq!(t.holds_ended, Some(47));
    assert_eq!(t.p99.map(|q| q.label()), Some("> 1.0 min".to_string()));

    let mut c = sample();
    c.seen = None;
    c.counters_total = None;
    let t = totals(&c);
    assert_eq!(
        (t.acquired, t.acquired_seen, t.waits_seen, t.p50),
        (None, None, None, None)
    );
}

#[test]
fn the_gap_note_says_when_counting_started() {
    let mut c = sample();
    let note = gap_note(&c).expect("counters start inside the window");
    assert!(note.starts_with("no counter samples before 22:09:14 UTC"), "{note}");
    assert!(note.contains("this server started watching then"));
    c.counters_since = Some(c.frame.from - 1);
    assert_eq!(gap_note(&c), None);
    c.counters_since = None;
    assert!(gap_note(&c).unwrap().starts_with("no counter samples yet"));
}

#[test]
fn the_status_says_when_and_why_it_is_not_live() {
    let refresh = 5_000;
    let (state, text) = status(NOW, &Freshness::default(), 0, refresh);
    assert_eq!(state, "static");
    assert!(text.contains("22:13:23 UTC"), "{text}");

    let ok = Freshness {
        received_at: Some(1_000_000),
        error: None,
    };
    assert_eq!(
        status(NOW, &ok, 1_004_000, refresh),
        ("live", "updated 22:13:23 UTC (4s ago)".to_string())
    );
    let (state, text) = status(NOW, &ok, 1_016_000, refresh);
    assert_eq!(state, "stale");
    assert!(
        text.starts_with("not live: last update 22:13:23 UTC (16s ago) — no answer for 16s"),
        "{text}"
    );

    let failed = Freshness {
        error: Some("the server answered 503".into()),
        ..ok
    };
    let (state, text) = status(NOW, &failed, 1_001_000, refresh);
    assert_eq!(state, "stale");
    assert_eq!(
        text,
        "not live: last update 22:13:23 UTC (1s ago) — the server answered 503"
    );
}

#[cfg(feature = "ssr")]
mod render {
    use lockscope_model::{Page, Screen};

    use super::sample;

    fn render(charts: lockscope_model::charts::Charts) -> String {
        let page = Page {
            screen: Screen::Charts {
                charts: Box::new(charts),
            },
            fleet: "prod eu".into(),
            ..Page::default()
        };
        crate::render_tests::render(page)
    }

    #[test]
    fn the_summary_is_rendered_by_the_server() {
        let html = render(sample());
        assert!(
            html.contains(
                r#"data-testid="charts-window" data-from="2023-11-14T22:08:25.000Z" data-to="2023-11-14T22:13:23.250Z""#
            ),
            "{html}"
        );
        assert!(html.contains("last 5 min: "), "{html}");
        assert!(html.contains(">2023-11-14 22:08:25 UTC</time>"));
        let waits: u64 = (0..60u64).map(|i| i % 3).sum();
        assert!(html.contains(&format!(r#"<span data-testid="seen-waits-total">{waits}</span>"#)));
        assert!(html.contains(r#"<td data-testid="total-acquired">400</td>"#), "{html}");
        assert!(html.contains(">300</td>"));
        assert!(html.contains("20.0% of attempts"));
        assert!(html.contains("&gt; 1.0 min"), "p99 beyond the histogram says so");
        assert!(html.contains(r#"<td data-testid="total-holds">47</td>"#));
        assert!(html.contains("no counter samples before 22:09:14 UTC"));
        assert!(html.contains(r#"data-state="static""#));
        assert!(!html.contains("charts-no-history"));
        // The window picker: plain links, the current one marked.
        assert!(
            html.contains(r#"href="/charts?fleet=prod%20eu&amp;window=1h" data-testid="window-1h""#),
            "{html}"
        );
        assert!(
            html.contains(r#"data-testid="window-5m" aria-current="page" class="here""#),
            "{html}"
        );
        // A contended lock opens its waits in the history over the same window.
        assert!(html.contains(
            "/history?fleet=prod%20eu&amp;lock=jobs/a%20b&amp;from=2023-11-14T22%3A08%3A25.000Z\
             &amp;to=2023-11-14T22%3A13%3A23.250Z&amp;kind=wait_started"
        ));
        assert!(html.contains(">30 waits</span>"));
        assert_eq!(html.matches(r#"data-testid="hold-bucket""#).count(), 8);
    }

    #[test]
    fn without_history_the_page_says_so() {
        let mut c = sample();
        c.seen = None;
        let html = render(c);
        assert!(html.contains("This server keeps no history: only the sessions' counters."));
        assert!(html.contains(r#"<span data-testid="seen-waits-total">no history</span>"#));
        assert!(!html.contains("chart-holds"));
    }
}
