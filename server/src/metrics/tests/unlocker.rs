//! The unlocker's `/metrics` families: its per-fleet counters and its mode
//! series (split out of metrics/tests.rs; shares its scrape helpers).

use super::*;

#[tokio::test]
async fn the_unlocker_counts_into_its_fleet() {
    let (_tx, _hub, m) = hub();
    m.set_unlocker_active("f", true);
    m.unlocker_released("f", "released");
    m.unlocker_released("f", "released");
    m.unlocker_released("f", "changed");
    m.unlocker_failed("f", "store");
    m.unlocker_failed("f", "something new");
    let (text, s) = scrape(&m);
    assert_eq!(value(&s, "lockscope_unlocker_active", "f"), Some(1.0));
    for line in [
        "lockscope_unlocker_releases_total{fleet=\"f\",outcome=\"released\"} 2\n",
        "lockscope_unlocker_releases_total{fleet=\"f\",outcome=\"changed\"} 1\n",
        "lockscope_unlocker_releases_total{fleet=\"f\",outcome=\"not_held\"} 0\n",
        "lockscope_unlocker_failures_total{fleet=\"f\",reason=\"store\"} 1\n",
        "lockscope_unlocker_failures_total{fleet=\"f\",reason=\"something new\"} 1\n",
    ] {
        assert!(text.contains(line), "{line}in\n{text}");
    }
    m.set_unlocker_active("f", false);
    assert_eq!(value(&scrape(&m).1, "lockscope_unlocker_active", "f"), Some(0.0));
}

/// docs/operations.md, Metrics: "`lockscope_unlocker_mode` … 1 for the mode
/// this replica's unlocker of the fleet runs in, 0 for the other two".
#[tokio::test]
async fn the_unlocker_mode_is_one_series_per_mode() {
    let (_tx, _hub, m) = hub();
    let modes = |m: &Metrics| {
        let (_, s) = scrape(m);
        let mut on: Vec<(String, f64)> = (s.samples.iter())
            .filter(|x| x.metric == "lockscope_unlocker_mode" && x.labels.get("fleet") == Some("f"))
            .map(|x| {
                let Value::Gauge(v) = x.value else { panic!("a gauge") };
                (x.labels.get("mode").unwrap().to_string(), v)
            })
            .collect();
        on.sort_by(|a, b| a.0.cmp(&b.0));
        on
    };
    let series = |off, dry, on| {
        vec![
            ("dry-run".to_string(), dry),
            ("off".to_string(), off),
            ("on".to_string(), on),
        ]
    };
    assert_eq!(modes(&m), series(1.0, 0.0, 0.0), "off until the unlocker starts");
    m.set_unlocker_mode("f", Mode::On);
    assert_eq!(modes(&m), series(0.0, 0.0, 1.0));
    m.set_unlocker_mode("f", Mode::DryRun);
    assert_eq!(modes(&m), series(0.0, 1.0, 0.0));
}

#[test]
fn metrics_without_fleets_show_the_unlocker_once_it_counts() {
    let m = Metrics::new();
    let (text, _) = scrape(&m);
    assert_eq!(text, "# EOF\n", "nothing to show yet");
    m.set_unlocker_active("x", false);
    let (text, s) = scrape(&m);
    assert_eq!(value(&s, "lockscope_unlocker_active", "x"), Some(0.0), "{text}");
}
