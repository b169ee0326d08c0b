//! A history that is not recording, and the gaps it recorded, rendered by the
//! server: said in words (an icon beside them, never colour alone), with the
//! time absolute and relative (issue 24).

use lockscope_model::history::{Gap, NotRecording};
use lockscope_model::{FleetSummary, Page, Screen};

use super::{history_page, render};

/// 2026-11-23T04:20:13Z.
const SINCE: i64 = 1_795_407_613_000;

#[test]
fn the_history_page_says_it_is_not_recording_and_names_each_gap() {
    let html = render(history_page());
    assert!(
        !html.contains("history-not-recording") && !html.contains("history-gaps"),
        "all recorded: nothing said"
    );
    let mut page = history_page();
    let Screen::History { review } = &mut page.screen else {
        unreachable!()
    };
    review.read_at = SINCE + 187_000;
    review.not_recording = Some(NotRecording { since: SINCE, lost: 80 });
    review.gaps = vec![Gap {
        from: SINCE - 3_600_000,
        to: SINCE - 3_540_000,
        lost: Some(12),
        why: "the history's database refused writes".into(),
    }];
    let html = render(page);
    // docs/operations.md: "the history page and the overview say "history not
    // recording since <when> — N events lost""
    assert!(
        html.contains("history not recording since 2026-11-23 04:20:13 UTC (3m 07s ago) — 80 events lost"),
        "{html}"
    );
    // docs/operations.md: "the history page says "N events lost between … and …" for every gap in its range"
    assert!(
        html.contains("12 events lost between 2026-11-23 03:20:13 UTC and 2026-11-23 03:21:13 UTC: the history"),
        "{html}"
    );
    assert!(
        html.contains(r#"data-testid="history-not-recording" role="alert""#),
        "{html}"
    );
    assert!(html.contains(r#"data-testid="history-gap""#), "{html}");
}

#[test]
fn the_overview_says_which_fleets_history_is_not_recording() {
    let fleet = |name: &str, history| FleetSummary {
        name: name.into(),
        history,
        ..FleetSummary::default()
    };
    let page = Page {
        screen: Screen::Locks,
        server_time: SINCE + 5_000,
        fleet: "a".into(),
        fleets: vec![
            fleet("a", Some(NotRecording { since: SINCE, lost: 1 })),
            fleet("b", None),
        ],
        ..Page::default()
    };
    let html = render(page);
    assert_eq!(html.matches(r#"data-testid="fleet-history""#).count(), 1, "{html}");
    assert!(
        html.contains("history not recording since 2026-11-23 04:20:13 UTC (5s ago) — 1 event lost"),
        "{html}"
    );
}

#[test]
fn a_lock_timeline_shows_a_gap_in_its_range_as_a_labelled_band() {
    let mut page = history_page();
    let Screen::History { review } = &mut page.screen else {
        unreachable!()
    };
    let (from, _) = review.range();
    review.gaps = vec![Gap {
        from: from + 1_000,
        to: from + 2_000,
        lost: Some(4),
        why: "the history's database refused writes".into(),
    }];
    let html = render(page);
    assert_eq!(html.matches(r#"data-testid="timeline-gap""#).count(), 1, "{html}");
    assert!(html.contains("history incomplete: 4 events lost between"), "{html}");
    assert!(html.contains(">gap</text>"), "named, not by colour alone: {html}");
    assert!(html.contains("1 gap in the history"), "{html}");
}
