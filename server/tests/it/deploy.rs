//! The files `deploy/` ships against the real server: every metric the
//! Prometheus rules (`deploy/prometheus/lockscope.rules.yml`) and the Grafana
//! dashboard (`deploy/grafana/lockscope.json`) name is one the `lockscope`
//! binary serves at `/metrics`, and every rule's runbook link is a section of
//! docs/operations.md. docs/operations.md, "Alerting": "every metric a rule or a
//! dashboard query names is one `/metrics` serves". promtool and systemd-analyze
//! check the rest (scripts/check-deploy.sh).

use std::collections::BTreeSet;

use crate::binary::Binary;

const RULES: &str = include_str!("../../../deploy/prometheus/lockscope.rules.yml");
const DASHBOARD: &str = include_str!("../../../deploy/grafana/lockscope.json");
const OPERATIONS: &str = include_str!("../../../docs/operations.md");

/// docs/operations.md with its lines joined (a quoted sentence may wrap).
fn operations_text() -> String {
    OPERATIONS.split_whitespace().collect::<Vec<_>>().join(" ")
}

const DOCS_NAMES: &str = "every metric a rule or a dashboard query names is one `/metrics` serves";
const DOCS_RUNBOOK: &str = "Every rule links its runbook, a section below";

/// The `expr:` of every rule, a block scalar (`expr: |`) read to its end.
fn rule_exprs(yaml: &str) -> Vec<String> {
    let lines: Vec<&str> = yaml.lines().collect();
    let indent = |l: &str| l.len() - l.trim_start().len();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let Some(rest) = line.trim_start().strip_prefix("expr:") else {
            continue;
        };
        let rest = rest.trim();
        if rest.starts_with('|') || rest.starts_with('>') {
            let block: Vec<&str> = lines[i + 1..]
                .iter()
                .take_while(|l| l.trim().is_empty() || indent(l) > indent(line))
                .copied()
                .collect();
            out.push(block.join("\n"));
        } else {
            out.push(rest.to_string());
        }
    }
    out
}

/// Every query of the dashboard: the panels' targets (rows' panels included)
/// and the template variables' queries.
fn dashboard_exprs(json: &str) -> Vec<String> {
    fn panels(list: &serde_json::Value, out: &mut Vec<String>) {
        for p in list.as_array().into_iter().flatten() {
            for t in p["targets"].as_array().into_iter().flatten() {
                out.push(t["expr"].as_str().expect("a target has an expr").to_string());
            }
            panels(&p["panels"], out);
        }
    }
    let d: serde_json::Value = serde_json::from_str(json).expect("the dashboard is JSON");
    let mut out = Vec::new();
    panels(&d["panels"], &mut out);
    for v in d["templating"]["list"].as_array().into_iter().flatten() {
        if let Some(q) = v["query"]["query"].as_str().or(v["query"].as_str()) {
            out.push(q.to_string());
        }
    }
    out
}

/// The `lockscope_…` names a PromQL expression uses (not in quoted strings).
fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut word = String::new();
    let mut quote = None;
    for c in expr.chars().chain([' ']) {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if c == '"' || c == '\'' || c == '`' => quote = Some(c),
            None if c.is_ascii_alphanumeric() || c == '_' || c == ':' => {
                word.push(c);
                continue;
            }
            None => {}
        }
        if word.starts_with("lockscope_") {
            names.insert(word.clone());
        }
        word.clear();
    }
    names
}

/// The sample names of an exposition (`lockscope_x_total`, `…_bucket`, …).
fn served_names(exposition: &str) -> BTreeSet<String> {
    exposition
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| l.split(['{', ' ']).next().unwrap_or_default().to_string())
        .collect()
}

/// What `exprs` name that `served` lacks.
fn missing(exprs: &[String], served: &BTreeSet<String>) -> BTreeSet<String> {
    exprs
        .iter()
        .flat_map(|e| metric_names(e))
        .filter(|n| !served.contains(n))
        .collect()
}

/// GitHub's anchor of a heading: lower case, spaces to `-`, other punctuation dropped.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The real binary on its embedded default (a SQLite fleet with the demo
/// workers, history and audit in SQLite files, the unlocker on).
async fn embedded_server(dir: &tempfile::TempDir) -> Binary {
    let db = dir.path().join("lockscope.db").display().to_string();
    Binary::start(&["--embedded-db".to_string(), db], dir.path()).await
}

#[tokio::test]
async fn every_metric_the_rules_and_the_dashboard_name_is_served() {
    assert!(
        operations_text().contains(DOCS_NAMES),
        "docs/operations.md says: {DOCS_NAMES}"
    );
    let rules = rule_exprs(RULES);
    assert_eq!(rules.len(), RULES.matches("- alert:").count(), "one expr per rule");
    let dashboard = dashboard_exprs(DASHBOARD);
    assert!(dashboard.len() >= 20, "the dashboard's queries are read: {dashboard:?}");

    let dir = tempfile::tempdir().unwrap();
    let server = embedded_server(&dir).await;
    let (status, body) = server.get("/metrics").await;
    assert_eq!(status, 200, "{body}");
    let served = served_names(&body);
    assert!(served.contains("lockscope_lock_wait_seconds_bucket"), "{body}");

    for (what, exprs) in [("rules", &rules), ("dashboard", &dashboard)] {
        let named: BTreeSet<String> = exprs.iter().flat_map(|e| metric_names(e)).collect();
        assert!(!named.is_empty(), "the {what} name lockscope metrics");
        let gone = missing(exprs, &served);
        assert!(
            gone.is_empty(),
            "{DOCS_NAMES}: the {what} name {gone:?}, not in\n{body}"
        );
    }
}

/// The reader of the files finds every name, a multi-line rule's included,
/// and reports one that `/metrics` does not serve (a renamed metric fails).
#[test]
fn a_name_the_server_lacks_is_reported() {
    let yaml = "rules:\n  - alert: A\n    expr: |\n      max by (fleet) (lockscope_locks_held)\n        and on (fleet) rate(lockscope_renamed_total[5m]) > 0\n    for: 5m\n  - alert: B\n    expr: lockscope_store_up{fleet=\"lockscope_not_a_metric\"} == 0\n";
    let exprs = rule_exprs(yaml);
    assert_eq!(exprs.len(), 2, "{exprs:?}");
    let served = served_names(
        "# TYPE lockscope_locks_held gauge\nlockscope_locks_held{fleet=\"a\"} 1\nlockscope_store_up{fleet=\"a\"} 1\n",
    );
    let gone: Vec<String> = missing(&exprs, &served).into_iter().collect();
    assert_eq!(gone, ["lockscope_renamed_total"]);
}

#[test]
fn every_rule_links_a_runbook_section_of_operations_md() {
    let anchors: BTreeSet<String> = OPERATIONS
        .lines()
        .filter_map(|l| l.strip_prefix('#'))
        .map(|h| anchor(h.trim_start_matches('#')))
        .collect();
    assert!(
        operations_text().contains(DOCS_RUNBOOK),
        "docs/operations.md says: {DOCS_RUNBOOK}"
    );
    let links: Vec<&str> = RULES
        .lines()
        .filter_map(|l| l.trim().strip_prefix("runbook_url:"))
        .map(|u| u.trim().trim_matches('"'))
        .collect();
    assert_eq!(links.len(), RULES.matches("- alert:").count(), "{DOCS_RUNBOOK}");
    for link in links {
        let a = link
            .strip_prefix("docs/operations.md#")
            .unwrap_or_else(|| panic!("{DOCS_RUNBOOK}: {link}"));
        assert!(
            anchors.contains(a),
            "{DOCS_RUNBOOK}: no section #{a} in docs/operations.md"
        );
    }
}
