//! `/metrics` as a scraper reads it: one parser (Prometheus' text format) for
//! every integration test, whose lookups panic when a sample is missing.

use prometheus_parse::{Sample, Scrape, Value};

/// One scrape, parsed: the integration tests' one reader of `/metrics`
/// (`limits` and `history_exports` use it too).
pub(crate) struct Metrics {
    pub(crate) text: String,
    pub(crate) scrape: Scrape,
}

impl Metrics {
    pub(crate) fn parse(text: String) -> Metrics {
        let scrape = Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).unwrap();
        Metrics { text, scrape }
    }

    /// The value of the sample written `sample` as the scrape writes it (a
    /// name, then its labels if it has any: `name{limit="identity"}`). Panics
    /// naming it when there is none, so a renamed metric fails a test rather
    /// than reading as 0.
    pub(crate) fn sample(&self, sample: &str) -> f64 {
        let (name, labels) = match sample.split_once('{') {
            Some((name, rest)) => (name, rest.strip_suffix('}').expect("a sample's labels end in }")),
            None => (sample, ""),
        };
        let labels: Vec<(&str, &str)> = labels
            .split(',')
            .filter(|l| !l.is_empty())
            .map(|l| {
                let (k, v) = l.split_once('=').expect("label=\"value\"");
                (k.trim(), v.trim().trim_matches('"'))
            })
            .collect();
        self.scrape
            .samples
            .iter()
            .find(|s| {
                s.metric == name
                    && s.labels.len() == labels.len()
                    && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v))
            })
            .map(value)
            .unwrap_or_else(|| panic!("no {sample} in\n{}", self.text))
    }
}

/// A sample's value (a histogram: its count).
pub(crate) fn value(s: &Sample) -> f64 {
    match &s.value {
        Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => *v,
        Value::Histogram(h) => h.last().map_or(f64::NAN, |b| b.count),
        Value::Summary(_) => f64::NAN,
    }
}

/// The shared reader finds a sample by name and labels, and panics for one
/// that is not there (the defect: the exports test read a missing metric as 0).
#[test]
fn a_sample_is_found_by_name_and_labels_and_a_missing_one_panics() {
    let m = Metrics::parse(
        "# TYPE a_total counter\na_total 3\n# TYPE b gauge\nb{limit=\"identity\"} 1\nb{limit=\"total\"} 2\n".into(),
    );
    assert_eq!(m.sample("a_total"), 3.0);
    assert_eq!(m.sample(r#"b{limit="total"}"#), 2.0);
    for missing in ["a_renamed_total", "b", r#"b{limit="address"}"#] {
        let found = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| m.sample(missing)));
        assert!(found.is_err(), "{missing} is not in the scrape");
    }
}
