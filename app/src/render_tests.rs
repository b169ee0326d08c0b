//! Server-side renders of whole pages, checked as HTML: which admin controls a
//! viewer gets, and what the forms post.

use leptos::prelude::*;
use lockscope_model::admin::{Action, AuditEntry, AuditQuery, Outcome, Role, Viewer};
use lockscope_model::detail::{LockDetail, SessionList, SessionRow};
use lockscope_model::{BlacklistEntry, FleetSummary, Holder, LockEntry, Page, Screen};

use crate::App;

mod history_gaps;
mod lock_rows;
mod outage;

/// The page's server-side HTML, as [`content`] reads it.
pub(crate) fn render(page: Page) -> String {
    let owner = Owner::new();
    content(owner.with(|| {
        provide_context(page);
        view! { <App/> }.to_html()
    }))
}

/// A render without the `<!>` markers that erased components (`.cargo/config.toml`)
/// put after text nodes for hydration: these checks read what a page says, and
/// `lock_rows` pins the markup itself, markers included.
fn content(html: String) -> String {
    html.replace("<!>", "")
}

fn lock_page(role: Role, writable: bool, holder: Holder) -> Page {
    let rec = r#"{"v":1,"owner":"o","session":"sess-1","service":"billing","host":"h1","pid":7,"acquired_at":0,
        "expected_runtime_ms":60000,"alert_at":60000,"auto_unlock_at":120000,"heartbeat_at":0}"#;
    Page {
        screen: Screen::Lock {
            detail: Box::new(LockDetail {
                name: "demo/job-3".into(),
                entry: Some(LockEntry::from_stored("demo/job-3".into(), 5, 9, rec.as_bytes())),
                holder,
                ..LockDetail::default()
            }),
        },
        fleet: "embedded".into(),
        fleets: vec![FleetSummary {
            name: "embedded".into(),
            writable,
            ..FleetSummary::default()
        }],
        viewer: Viewer {
            actor: "alice".into(),
            role,
            signed_in: true,
            csrf: "tok123".into(),
            ..Viewer::default()
        },
        ..Page::default()
    }
}

fn count(html: &str, needle: &str) -> usize {
    html.matches(needle).count()
}

#[test]
fn an_operator_gets_the_release_dialog_of_what_they_see() {
    let html = render(lock_page(Role::Operator, true, Holder::Gone));
    assert_eq!(count(&html, r#"data-testid="release-dialog""#), 1);
    assert!(
        html.contains(r#"<input type="hidden" name="fence" value="5">"#),
        "{html}"
    );
    assert!(html.contains(r#"<input type="hidden" name="revision" value="9">"#));
    assert!(
        html.contains(r#"<input type="hidden" name="owner" value="o">"#),
        "the form posts the acquisition's owner id, so the server releases exactly it"
    );
    assert!(html.contains(r#"<input type="hidden" name="csrf" value="tok123">"#));
    assert!(html.contains(r#"name="back" value="/lock?fleet=embedded&amp;name=demo/job-3""#));
    assert!(html.contains(r#"name="confirm" required"#));
    assert!(html.contains(r#"<textarea name="reason" required"#));
    assert!(html.contains(">Force-release fence 5</button>"));
    assert!(
        !html.contains("release-alive"),
        "a gone holder needs no blacklisting first"
    );
    assert!(!html.contains("release-stale"), "the server's render is the snapshot");
    assert!(html.contains("signed in as <b>alice</b> (operator)"));
    assert!(!html.contains("nav-audit"), "the audit log is for admins");
}

#[test]
fn an_alive_holder_is_blacklisted_first() {
    let html = render(lock_page(Role::Operator, true, Holder::Alive));
    let alive = html.find(r#"data-testid="release-alive""#).expect("alive warning");
    let blacklist = html[alive..]
        .find(r#"action="/actions/blacklist""#)
        .expect("its blacklist form");
    let release = html[alive..].find(r#"action="/actions/release""#).unwrap();
    assert!(blacklist < release, "blacklisting comes before releasing");
    assert!(html.contains(r#"<input type="hidden" name="session" value="sess-1">"#));
    assert!(!html.contains("unblacklist-form"), "lifting a blacklist needs an admin");
}

#[test]
fn no_buttons_for_viewers_out_of_scope_or_on_read_only_fleets() {
    for page in [
        lock_page(Role::Viewer, true, Holder::Gone),
        lock_page(Role::Admin, false, Holder::Gone),
        Page {
            viewer: Viewer {
                role: Role::Operator,
                scope: vec![("embedded".into(), vec!["billing/".into()])],
                ..Viewer::default()
            },
            ..lock_page(Role::Operator, true, Holder::Gone)
        },
    ] {
        assert!(!render(page).contains("release-dialog"));
    }
    for page in [
        lock_page(Role::Viewer, true, Holder::Alive),
        lock_page(Role::Admin, false, Holder::Alive),
    ] {
        assert!(!render(page).contains(r#"action="/actions/"#), "no action at all");
    }
}

#[test]
fn no_auth_is_announced_on_every_page_and_admins_see_the_audit_link() {
    let mut page = lock_page(Role::Admin, true, Holder::Gone);
    page.viewer.no_auth = true;
    page.viewer.signed_in = false;
    let html = render(page);
    assert!(html.contains(r#"data-testid="no-auth-banner""#));
    assert!(html.contains("No authentication: anyone who can reach this port is admin"));
    assert!(!html.contains("whoami"));
    assert!(html.contains(r#"href="/audit" data-testid="nav-audit""#));
}

#[test]
fn the_notice_says_how_the_last_action_ended() {
    let mut page = lock_page(Role::Operator, true, Holder::Gone);
    page.server_time = 1_700_000_060_000;
    page.notice = Some(AuditEntry {
        at: 1_700_000_000_000,
        action: Some(Action::Release),
        outcome: Some(Outcome::Changed),
        fleet: "embedded".into(),
        target: "demo/job-3".into(),
        fence: Some(4),
        detail: "now fence 5 held by billing@h1:7".into(),
        ..AuditEntry::default()
    });
    let html = render(page);
    assert!(
        html.contains(r#"data-testid="notice" data-outcome="changed" role="status""#),
        "{html}"
    );
    assert!(html.contains("Nothing was released: now fence 5 held by billing@h1:7"));
    assert!(html.contains("2023-11-14 22:13:20 UTC (1m 00s ago)"));
}

#[test]
fn sessions_get_blacklist_or_lift_forms() {
    let session = |id: &str, blacklisted: bool| SessionRow {
        id: id.into(),
        entry: None,
        holder: if blacklisted {
            Holder::Blacklisted
        } else {
            Holder::Alive
        },
        locks_held: 0,
        waiting_for: vec![],
        blacklist: blacklisted.then(|| BlacklistEntry::from_stored(id.into(), 1, b"{}")),
        deadlock: false,
        lease: None,
        is_lease: false,
        foreign: None,
    };
    let mut page = lock_page(Role::Admin, true, Holder::Gone);
    page.screen = Screen::Sessions {
        sessions: SessionList {
            total: 2,
            rows: vec![session("bad", true), session("good", false)],
            tracked: true,
        },
    };
    let html = render(page.clone());
    assert_eq!(count(&html, r#"data-testid="blacklist-form""#), 1);
    assert_eq!(count(&html, r#"data-testid="unblacklist-form""#), 1);
    assert!(html.contains(r#"name="back" value="/sessions?fleet=embedded""#));
    assert!(html.contains("Lift blacklist…"));
    page.viewer.role = Role::Viewer;
    let html = render(page);
    assert!(!html.contains(r#"action="/actions/"#), "a viewer gets no forms");
    assert_eq!(count(&html, r#"data-testid="session-row""#), 2);
}

#[test]
fn the_audit_page_lists_filters_and_exports() {
    let mut page = lock_page(Role::Admin, true, Holder::Gone);
    page.server_time = 1_700_000_000_000;
    let query = AuditQuery {
        fleet: Some("embedded".into()),
        outcome: Some(Outcome::Done),
        ..AuditQuery::default()
    };
    page.screen = Screen::Audit {
        entries: vec![AuditEntry {
            id: 7,
            at: 1_700_000_000_000 - 5_000,
            actor: "alice".into(),
            role: Some(Role::Operator),
            via: "browser".into(),
            action: Some(Action::Release),
            fleet: "embedded".into(),
            target: "demo/job 3".into(),
            fence: Some(5),
            reason: "stuck".into(),
            outcome: Some(Outcome::Done),
            detail: "released".into(),
        }],
        query,
        error: Some("bad from".into()),
    };
    let html = render(page);
    assert_eq!(count(&html, r#"data-testid="audit-row""#), 1);
    assert!(
        html.contains(r#"href="/lock?fleet=embedded&amp;name=demo/job%203""#),
        "{html}"
    );
    assert!(html.contains("/api/v1/audit?fleet=embedded&amp;outcome=done&amp;format=csv"));
    assert!(html.contains("1 entry, newest first, as read at 22:13:20 UTC — reload for newer"));
    assert!(html.contains("2023-11-14 22:13:15 UTC (5s ago)"));
    assert!(html.contains(r#"data-testid="audit-error""#));
    assert!(html.contains(r#"<option value="done" selected>"#));
    assert!(
        !html.contains(r#"data-testid="connection""#),
        "the audit page is not live"
    );
}

#[test]
fn the_sign_in_form_posts_a_token() {
    let mut page = lock_page(Role::Viewer, true, Holder::Gone);
    page.viewer.signed_in = false;
    page.screen = Screen::SignIn {
        next: "/lock?fleet=embedded&name=x".into(),
        error: Some("unknown token".into()),
    };
    let html = render(page);
    assert!(html.contains(r#"<form method="post" action="/signin""#));
    assert!(html.contains(r#"<input type="password" name="token" required"#));
    assert!(html.contains(r#"name="next" value="/lock?fleet=embedded&amp;name=x""#));
    assert!(html.contains("unknown token"));
    assert!(html.contains("not signed in"));
    assert!(!html.contains("signout"));
    // A stranger sees the product name and the form only: no fleet, store or pages.
    for hidden in [
        r#"data-testid="fleet""#,
        r#"data-testid="source""#,
        "nav-locks",
        "nav-audit",
    ] {
        assert!(!html.contains(hidden), "{hidden}");
    }
}

fn history_page() -> Page {
    use lockscope_model::history::{HistoryEvent, HistoryQuery, Kind};
    use lockscope_model::review::{Review, ReviewForm};
    let ev = |at: i64, kind: Kind, fence: i64| HistoryEvent {
        id: format!("id{at}"),
        fleet: "embedded".into(),
        at,
        kind,
        lock: Some("demo/job 3".into()),
        session: Some("sess-1234567890".into()),
        owner: Some("o".into()),
        fence: Some(fence),
        revision: None,
        service: Some("billing".into()),
        host: Some("h1".into()),
        actor: (kind == Kind::ForceReleased).then(|| "alice".into()),
        detail: if kind == Kind::ForceReleased {
            "stuck".into()
        } else {
            String::new()
        },
        record: None,
    };
    let read_at = 1_700_000_060_000;
    let events = vec![
        ev(read_at - 50_000, Kind::Acquired, 4),
        ev(read_at - 20_000, Kind::ForceReleased, 4),
    ];
    let mut page = lock_page(Role::Viewer, true, Holder::Gone);
    page.server_time = read_at;
    page.screen = Screen::History {
        review: Box::new(Review {
            form: ReviewForm {
                from: "-1m".into(),
                lock: "demo/job 3".into(),
                ..ReviewForm::default()
            },
            query: HistoryQuery {
                fleet: "embedded".into(),
                from: Some(read_at - 60_000),
                lock: Some("demo/job 3".into()),
                ..HistoryQuery::default()
            },
            timeline: Some(events.clone()),
            events,
            read_at,
            ..Review::default()
        }),
    };
    page
}

#[test]
fn the_history_page_says_when_events_could_not_be_written() {
    let html = render(history_page());
    assert!(!html.contains("history-lost"), "nothing lost: nothing said");
    let mut page = history_page();
    if let Screen::History { review } = &mut page.screen {
        review.lost = Some(lockscope_model::review::Loss {
            events: 3,
            since: 1_700_000_000_000,
        });
    }
    let html = render(page);
    // docs/operations.md: "N events could not be written to the history since T …: the history has gaps."
    assert!(
        html.contains("3 events could not be written to the history since 2023-11-14T22:13:20.000Z"),
        "{html}"
    );
    assert!(html.contains("the history has gaps."));
    assert!(html.contains(r#"data-testid="history-lost""#));
}

#[test]
fn the_history_page_lists_kinds_as_words_and_exports_the_same_query() {
    let html = render(history_page());
    assert_eq!(count(&html, r#"data-testid="history-row""#), 2, "{html}");
    assert!(html.contains(r#"data-testid="history-kind" class="kind">acquired</td>"#));
    assert!(html.contains(r#"data-testid="history-kind" class="kind">force released</td>"#));
    // The export is the page's query, its open end pinned to when it was read.
    assert!(
        html.contains(
            "/api/v1/fleets/embedded/history?from=2023-11-14T22%3A13%3A20.000Z&amp;to=2023-11-14T22%3A14%3A20.000Z\
             &amp;lock=demo/job%203&amp;format=csv"
        ),
        "{html}"
    );
    assert!(html.contains("Not live: a query of the recorded history, read at"));
    assert!(html.contains(r#"value="-1m""#), "the form keeps the range as typed");
    assert!(html.contains(r#"href="/history?fleet=embedded" data-testid="nav-history""#));
    assert!(!html.contains(r#"data-testid="connection""#), "not live");
    // The exact lock gets its timeline: one bar ended by the force-release, a marker.
    assert_eq!(
        count(&html, r#"data-testid="timeline-hold" data-ended="force_released""#),
        1
    );
    assert_eq!(
        count(&html, r#"data-testid="timeline-mark" data-kind="force_released""#),
        1
    );
    assert!(html.contains(">force-released</text>"));
    // No instant named: the slider, no table.
    assert!(html.contains(r#"data-testid="travel-slider""#));
    assert!(!html.contains(r#"data-testid="lock-table""#));
}

#[test]
fn time_travel_draws_the_table_then_with_the_live_component() {
    use lockscope_model::review::{DiffRow, Holding, TableDiff, Travel};
    use lockscope_model::view::{WindowFrame, WindowRow};
    let mut page = history_page();
    let Screen::History { review } = &mut page.screen else {
        unreachable!()
    };
    let rec = r#"{"v":1,"owner":"o","session":"sess-1","service":"billing","host":"h1","pid":7,"acquired_at":0,
        "expected_runtime_ms":60000,"alert_at":60000,"auto_unlock_at":120000,"heartbeat_at":0}"#;
    let entry = LockEntry::from_stored("demo/job 3".into(), 4, 9, rec.as_bytes());
    let at = review.read_at - 30_000;
    review.travel = Some(Travel {
        at,
        frame: Some(WindowFrame {
            seq: 1,
            view_id: 0,
            server_time: at,
            waited_ms: 0,
            full: true,
            total: 1,
            offset: 0,
            order: Some(vec!["demo/job 3".into()]),
            rows: vec![WindowRow {
                entry,
                holder: Holder::Unknown,
                deadlock: false,
                waiters: vec![],
            }],
            aggregates: None,
        }),
        checkpoint: Some(at - 10_000),
        replayed: 3,
        diff: Some(TableDiff {
            taken: vec![DiffRow {
                lock: "demo/job 3".into(),
                before: None,
                after: Some(Holding {
                    fence: 4,
                    holder: "billing@h1:7".into(),
                    session: "sess-1".into(),
                }),
            }],
            taken_total: 1,
            ..TableDiff::default()
        }),
        ..Travel::default()
    });
    let html = render(page);
    assert!(html.contains("Lock table at <time"), "{html}");
    assert_eq!(count(&html, r#"data-testid="lock-row" data-lock="demo/job 3""#), 1);
    assert!(html.contains("and 3 events after it"));
    assert!(
        !html.contains(r#"data-testid="next-page""#),
        "a past table has no pager"
    );
    assert!(
        html.contains(r#"href="/history?fleet=embedded&amp;from=2023-11-14T22%3A13%3A20.000Z&amp;to=2023-11-14T22%3A14%3A20.000Z&amp;lock=demo/job%203""#),
        "a past table's locks link to their history"
    );
    assert_eq!(count(&html, r#"data-testid="diff-row" data-change="taken""#), 1);
}
