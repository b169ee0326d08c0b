//! A fleet whose store is not live, rendered by the server: it never reads as
//! healthy, and the failure is one line with the driver's chain behind a
//! disclosure.

use lockscope_model::{Counts, FleetSummary, Page, Screen, StoreStatus};

use super::{count, render};

/// 01:02:03 UTC.
const SINCE: i64 = 3_723_000;

fn down() -> StoreStatus {
    StoreStatus::Unreachable {
        since: SINCE,
        error: "cannot connect to 127.0.0.1:24379: connection refused".into(),
        detail: "store unreachable: etcd\ngrpc request error: status: Unavailable, message: \"tcp connect error\", \
                 source: tonic::transport::Error(Transport, ConnectError(\"tcp connect error\", 127.0.0.1:24379, \
                 Os { code: 111, kind: ConnectionRefused, message: \"Connection refused\" }))"
            .into(),
        retry_at: SINCE + 5_000,
    }
}

/// The lock table of fleet `it` (store `status`, no locks known), beside a
/// live fleet `ok` with two healthy locks and an unreachable fleet `old` whose
/// last known counts had an expired lock.
fn page(status: StoreStatus) -> Page {
    let summary = |name: &str, status: StoreStatus, counts: Counts| FleetSummary {
        name: name.into(),
        source: format!("etcd {name}"),
        status,
        counts,
        ..FleetSummary::default()
    };
    let expired = Counts {
        held: 3,
        expired: 1,
        ..Counts::default()
    };
    Page {
        screen: Screen::Locks,
        server_time: SINCE + 2_000,
        fleet: "it".into(),
        status: status.clone(),
        fleets: vec![
            summary("it", status, Counts::default()),
            summary(
                "ok",
                StoreStatus::Live { since: 0 },
                Counts {
                    held: 2,
                    ..Counts::default()
                },
            ),
            summary("old", down(), expired),
        ],
        ..Page::default()
    }
}

/// The overview row of `fleet`.
fn row<'a>(html: &'a str, fleet: &str) -> &'a str {
    let start = html
        .find(&format!(r#"data-fleet="{fleet}""#))
        .unwrap_or_else(|| panic!("no row for {fleet}: {html}"));
    let end = html[start..].find("</tr>").unwrap() + start;
    &html[start..end]
}

#[test]
fn an_unreachable_fleet_with_no_locks_reads_unknown_never_all_healthy() {
    let html = render(page(down()));
    // docs/operations.md: "a fleet whose store is not live never reads as
    // healthy: its worst cell says "unknown — unreachable since HH:MM:SS UTC"
    // (or "unknown — connecting" before the store first answered), and its
    // counts carry a "?" and the note "(counts: last known)"".
    let it = row(&html, "it");
    assert!(!it.contains("all healthy"), "{it}");
    assert!(it.contains(r#"data-testid="fleet-worst" data-state="unknown""#), "{it}");
    assert!(it.contains("unknown — unreachable since 01:02:03 UTC"), "{it}");
    assert!(it.contains("(counts: last known)"), "{it}");
    assert_eq!(
        count(it, r#"class="last-known-mark""#),
        8,
        "every count carries the mark: {it}"
    );
    assert_eq!(count(it, r#"title="last known: the store is unreachable""#), 8, "{it}");
    assert!(
        it.contains(r#"class="last-known-mark">?</span>"#),
        "the mark is a visible \"?\": {it}"
    );
    // A fleet whose last known counts had something wrong is unknown too: the
    // expired lock of then is not the truth now.
    let old = row(&html, "old");
    assert!(
        old.contains(r#"data-state="unknown""#) && !old.contains("1 expired"),
        "{old}"
    );
    // The live fleet beside them is what it is.
    let ok = row(&html, "ok");
    assert!(ok.contains("all healthy") && !ok.contains("last-known"), "{ok}");
    assert_eq!(count(&html, "all healthy"), 1);
}

#[test]
fn a_connecting_fleet_reads_unknown_too() {
    let html = render(page(StoreStatus::Connecting { since: 0 }));
    let it = row(&html, "it");
    assert!(
        it.contains("unknown — connecting") && !it.contains("all healthy"),
        "{it}"
    );
    assert!(
        !html.contains(r#"data-testid="store-banner""#),
        "no failure to tell yet"
    );
}

#[test]
fn the_banner_says_the_failure_in_one_line_and_keeps_the_chain_behind_a_disclosure() {
    let html = render(page(down()));
    assert_eq!(count(&html, r#"data-testid="store-banner""#), 1);
    // The issue's words: "cannot connect to 127.0.0.1:24379: connection
    // refused; retrying in 5 s", with the detail behind a disclosure.
    let line_start = html.find(r#"data-testid="store-error">"#).unwrap();
    let line = &html[line_start..line_start + html[line_start..].find("</p>").unwrap()];
    assert!(
        line.contains("cannot connect to 127.0.0.1:24379: connection refused"),
        "{line}"
    );
    assert!(
        line.contains("retrying in 3s"),
        "the next attempt, on the server's clock: {line}"
    );
    assert!(!line.contains("tonic"), "no driver internals in the line: {line}");
    let details = html
        .find(r#"<details data-testid="store-error-detail">"#)
        .expect("a disclosure");
    assert!(html[details..].contains("tonic::transport::Error(Transport, ConnectError("));
    assert!(
        !html[..details].contains("tonic::"),
        "the chain only behind the disclosure"
    );
}

#[test]
fn a_live_fleet_has_no_banner_and_no_marks() {
    let html = render(page(StoreStatus::Live { since: 0 }));
    assert!(!html.contains(r#"data-testid="store-banner""#));
    let it = row(&html, "it");
    assert!(it.contains("all healthy") && !it.contains("last-known"), "{it}");
}

#[test]
fn the_header_stays_one_short_line() {
    use crate::live::{Connection, LiveView};
    use leptos::prelude::*;
    let owner = Owner::new();
    let html = owner.with(|| {
        let live = LiveView::new(page(down()));
        live.connection.set(Connection::Live);
        provide_context(live);
        view! { <crate::page::Indicator/> }.to_html()
    });
    // docs/operations.md: "The header says "store unreachable since HH:MM:SS
    // UTC; showing the last known state"." What failed is the banner's.
    assert!(html.contains(r#"data-state="store-unreachable""#), "{html}");
    assert!(
        html.contains(">store unreachable since 01:02:03 UTC; showing the last known state<"),
        "{html}"
    );
    assert!(!html.contains("cannot connect") && !html.contains("tonic"), "{html}");
}
