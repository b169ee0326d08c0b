//! Every URL the app builds: the pages' links (a fleet's table with its view,
//! one lock, the sessions, the history and its drill-downs, the charts), the
//! exports and the API the charts page asks again. A leaf: it knows the model's
//! queries and nothing of the pages, so every page can link to every other
//! without importing it. Query values are encoded by [`encode`]
//! ([`lockscope_model::url::query`]), path segments by
//! [`lockscope_model::url::segment`].

use lockscope_model::admin::AuditQuery;
use lockscope_model::charts::{ChartWindow, Charts};
use lockscope_model::review::Review;
use lockscope_model::time::{rfc3339, Millis};
use lockscope_model::view::ViewSpec;

/// Percent-encodes a query value (`/` kept): [`lockscope_model::url::query`].
/// A path segment is encoded with [`lockscope_model::url::segment`] instead.
pub fn encode(s: &str) -> String {
    lockscope_model::url::query(s)
}

/// `{path}?fleet=…`: one of a fleet's pages with nothing else chosen
/// (`/` its lock table, `/history`, `/charts`, `/sessions`).
pub fn fleet_page_href(path: &str, fleet: &str) -> String {
    format!("{path}?fleet={}", encode(fleet))
}

/// `/?fleet=…`: the fleet's lock table, default view.
pub fn locks_href(fleet: &str) -> String {
    fleet_page_href("/", fleet)
}

/// `?fleet=…&…`: the query that names `view` of `fleet` (what the browser's
/// address bar gets when the view changes).
pub fn view_query(fleet: &str, view: &ViewSpec) -> String {
    let mut url = format!("?fleet={}", encode(fleet));
    for (k, v) in view.to_query() {
        url.push('&');
        url.push_str(k);
        url.push('=');
        url.push_str(&encode(&v));
    }
    url
}

/// `/?fleet=…&…` for `view` (links work without JavaScript).
pub fn href(fleet: &str, view: &ViewSpec) -> String {
    format!("/{}", view_query(fleet, view))
}

/// `/lock?fleet=…&name=…`: one lock's page.
pub fn lock_href(fleet: &str, name: &str) -> String {
    format!("/lock?fleet={}&name={}", encode(fleet), encode(name))
}

/// `/sessions?fleet=…`: the fleet's sessions page.
pub fn sessions_href(fleet: &str) -> String {
    fleet_page_href("/sessions", fleet)
}

/// `/history?fleet=…&k=v…` (empty values left out).
pub fn history_href(fleet: &str, pairs: &[(&str, String)]) -> String {
    let mut url = fleet_page_href("/history", fleet);
    for (k, v) in pairs.iter().filter(|(_, v)| !v.is_empty()) {
        url.push_str(&format!("&{k}={}", encode(v)));
    }
    url
}

/// The query the history page ran, as URL pairs, its range resolved to the
/// instants it meant when the page was read (an open end is the time it was
/// read): what the exports, the slider and the links from the page carry, so
/// they show what this page shows.
pub fn resolved_pairs(r: &Review) -> Vec<(&'static str, String)> {
    let (from, to) = r.range();
    let q = &r.query;
    let kinds: Vec<&str> = q.kinds.iter().map(|k| k.as_str()).collect();
    [
        ("from", rfc3339(from)),
        ("to", rfc3339(to)),
        ("lock", q.lock.clone().unwrap_or_default()),
        ("session", q.session.clone().unwrap_or_default()),
        ("service", q.service.clone().unwrap_or_default()),
        ("actor", q.actor.clone().unwrap_or_default()),
        ("kind", kinds.join(",")),
        ("limit", q.limit.map(|l| l.to_string()).unwrap_or_default()),
    ]
    .into_iter()
    .filter(|(_, v)| !v.is_empty())
    .collect()
}

/// The export of the history page's query as `format` (`csv`, `ndjson`, `json`).
pub fn history_export_href(r: &Review, format: &str) -> String {
    let mut url = format!(
        "/api/v1/fleets/{}/history?",
        lockscope_model::url::segment(&r.query.fleet)
    );
    for (k, v) in resolved_pairs(r) {
        url.push_str(&format!("{k}={}&", encode(&v)));
    }
    url.push_str("format=");
    url.push_str(format);
    url
}

/// The history of the charts' fleet over their window, filtered on `key` =
/// `name`, waits started only: where a reviewer drills down.
pub fn drill_href(c: &Charts, key: &str, name: &str) -> String {
    history_href(
        &c.fleet,
        &[
            (key, name.to_string()),
            ("from", rfc3339(c.frame.from)),
            ("to", rfc3339(c.frame.to)),
            ("kind", "wait_started".to_string()),
        ],
    )
}

/// `YYYY-MM-DDTHH:MM` (UTC) of `ms`: what the audit filter's `from`/`to`
/// accept and a `datetime-local` input shows; empty when out of range.
pub fn datetime_local(ms: Millis) -> String {
    let t = rfc3339(ms);
    match t.get(..16) {
        Some(minute) if t.as_bytes().get(10) == Some(&b'T') => minute.to_string(),
        _ => String::new(),
    }
}

/// The audit filter as query pairs, in the form's order (unset fields left out).
pub fn audit_query_pairs(q: &AuditQuery) -> Vec<(&'static str, String)> {
    [
        ("fleet", q.fleet.clone()),
        ("actor", q.actor.clone()),
        ("action", q.action.map(|a| a.as_str().to_string())),
        ("outcome", q.outcome.map(|o| o.as_str().to_string())),
        ("from", q.from.map(datetime_local)),
        ("to", q.to.map(datetime_local)),
        ("limit", q.limit.map(|l| l.to_string())),
    ]
    .into_iter()
    .filter_map(|(k, v)| v.filter(|v| !v.is_empty()).map(|v| (k, v)))
    .collect()
}

/// The export of the audit entries `q` selects, as `format` (`csv`, `ndjson`).
pub fn audit_export_href(q: &AuditQuery, format: &str) -> String {
    let mut url = "/api/v1/audit?".to_string();
    for (k, v) in audit_query_pairs(q) {
        url.push_str(&format!("{k}={}&", encode(&v)));
    }
    url.push_str("format=");
    url.push_str(format);
    url
}

/// `/charts?fleet=…&window=…`.
pub fn charts_href(fleet: &str, window: ChartWindow) -> String {
    format!("{}&window={}", fleet_page_href("/charts", fleet), window.as_str())
}

/// The API answer the charts page asks for again.
pub fn charts_api_href(fleet: &str, window: ChartWindow) -> String {
    format!(
        "/api/v1/fleets/{}/charts?window={}",
        lockscope_model::url::segment(fleet),
        window.as_str()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use lockscope_model::admin::Action;
    use lockscope_model::history::{HistoryQuery, Kind};

    /// The address bar's query and the table's links name the same view: the
    /// socket puts `view_query` in the URL, the pages link to `href`.
    #[test]
    fn a_views_link_is_its_query_under_the_root() {
        let view = ViewSpec {
            offset: 100,
            ..ViewSpec::default()
        };
        let q = view_query("prod eu", &view);
        assert!(q.starts_with("?fleet=prod%20eu&"), "{q}");
        assert!(q.contains("offset=100"), "{q}");
        assert_eq!(href("prod eu", &view), format!("/{q}"));
        assert_eq!(locks_href("prod eu"), "/?fleet=prod%20eu");
        assert_eq!(sessions_href("a&b"), "/sessions?fleet=a%26b");
        assert_eq!(
            history_href("f", &[("lock", "x y".into()), ("session", String::new())]),
            "/history?fleet=f&lock=x%20y"
        );
        assert_eq!(charts_href("f", ChartWindow::Hour), "/charts?fleet=f&window=1h");
    }

    #[test]
    fn exports_carry_the_query_with_its_range_resolved() {
        let r = Review {
            query: HistoryQuery {
                fleet: "prod eu".into(),
                from: Some(1_700_000_000_000),
                lock: Some("a/b*".into()),
                kinds: vec![Kind::Acquired, Kind::ForceReleased],
                ..HistoryQuery::default()
            },
            read_at: 1_700_000_060_000,
            ..Review::default()
        };
        assert_eq!(
            history_export_href(&r, "csv"),
            "/api/v1/fleets/prod%20eu/history?from=2023-11-14T22%3A13%3A20.000Z&to=2023-11-14T22%3A14%3A20.000Z\
             &lock=a/b%2A&kind=acquired%2Cforce_released&format=csv"
        );
    }

    #[test]
    fn the_filter_round_trips_into_links() {
        let q = AuditQuery {
            fleet: Some("prod eu".into()),
            action: Some(Action::Release),
            from: Some(1_700_000_000_000),
            limit: Some(50),
            ..AuditQuery::default()
        };
        assert_eq!(datetime_local(1_700_000_000_000), "2023-11-14T22:13");
        assert_eq!(
            audit_export_href(&q, "csv"),
            "/api/v1/audit?fleet=prod%20eu&action=release&from=2023-11-14T22%3A13&limit=50&format=csv"
        );
        assert_eq!(
            audit_export_href(&AuditQuery::default(), "ndjson"),
            "/api/v1/audit?format=ndjson"
        );
    }
}
