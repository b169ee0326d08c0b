//! The lock table's rows as the server renders them (the page hydrates this
//! markup): each cell, attribute and text for a held lock on a wait-for cycle
//! with waiters, and for a malformed record. A row is one reactive closure
//! whose cells are one string of HTML (`table/row.rs`, `LockRow`, `RowCells`)
//! so that a row entering the window is cheap to build; this pins that it
//! renders exactly what one closure per attribute and text did (the browser
//! hydrates the server's rows with it).

use leptos::prelude::*;
use lockscope_model::record::RECORD_VERSION;
use lockscope_model::view::WindowRow;
use lockscope_model::{LockEntry, LockRecord, Page, WindowFrame};

use crate::App;

fn held(name: &str, fence: i64, waiters: Vec<String>, deadlock: bool) -> WindowRow {
    let rec = LockRecord {
        v: RECORD_VERSION,
        owner: "o".into(),
        session: "0123456789abcdef".into(),
        service: "billing".into(),
        host: "h1".into(),
        pid: 42,
        purpose: "nightly <b>&".into(),
        backtrace: [].into(),
        acquired_at: 0,
        expected_runtime_ms: 60_000,
        alert_at: 60_000,
        auto_unlock_at: 120_000,
        heartbeat_at: 0,
    };
    WindowRow {
        entry: LockEntry::from_stored(name.into(), fence, fence, &rec.to_json()),
        holder: Default::default(),
        deadlock,
        waiters,
    }
}

fn table_html(rows: Vec<WindowRow>) -> String {
    let page = Page {
        fleet: "f".into(),
        server_time: 90_000,
        frame: Some(WindowFrame {
            seq: 1,
            view_id: 0,
            server_time: 90_000,
            waited_ms: 0,
            full: true,
            total: rows.len() as u64,
            offset: 0,
            order: Some(rows.iter().map(|r| r.entry.name.clone()).collect()),
            rows,
            aggregates: None,
        }),
        ..Page::default()
    };
    let owner = Owner::new();
    let html = owner.with(|| {
        provide_context(page);
        view! { <App/> }.to_html()
    });
    let start = html.find(r#"data-testid="lock-table""#).expect("the lock table");
    let end = start + html[start..].find("</table>").expect("its end");
    html[start..end].to_string()
}

#[test]
fn a_rows_cells_render_as_before_their_grouping() {
    let malformed = WindowRow {
        entry: LockEntry::from_stored("a/3".into(), 5, 5, b"garbage"),
        holder: Default::default(),
        deadlock: false,
        waiters: vec![],
    };
    let html = table_html(vec![
        held("a/1", 3, vec![], false),
        held("a/2", 4, vec!["s1".into(), "s2".into()], true),
        malformed,
    ]);
    assert!(
        html.contains(A2),
        "a held lock on a wait-for cycle with two waiters:\n{html}"
    );
    assert!(html.contains(A3), "a malformed record:\n{html}");
}

const A2: &str = r#"<tr role="row" data-testid="lock-row" data-lock="a/2" data-state="overdue" class="overdue"><td role="cell" data-testid="state" title="past alert_at: held longer than its holder expected" class="st"><span aria-hidden="true" class="icon">⚠</span>overdue</td><td role="cell" title="a/2" class="name"><a href="/lock?fleet=f&amp;name=a/2" data-testid="lock-link">a/2</a><span title="on a wait-for cycle" class="deadlock-flag"> ⟲</span></td><td role="cell" title="service billing, host h1, pid 42, session 0123456789abcdef" class="holder"><span class="where">billing@h1:42</span> <span class="session">01234567…</span></td><td role="cell" title="nightly &lt;b&gt;&amp;" class="purpose">nightly &lt;b&gt;&amp;</td><td role="cell" data-testid="held-for" title="acquired at 00:00:00 UTC (holder's clock); last heartbeat 00:00:00 UTC" class="age">1m 30s</td><td role="cell" data-testid="expires-in" title="overdue from 00:01:00 UTC; may be released from 00:02:00 UTC (holder's clock)" class="expires">30s</td><td role="cell" data-testid="waiters" title="waiting: s1, s2" class="waiters">2</td><td role="cell" data-testid="fence" title="fencing token 4" class="fence">4</td></tr>"#;
const A3: &str = r#"<tr role="row" data-testid="lock-row" data-lock="a/3" data-state="malformed" class="malformed"><td role="cell" data-testid="state" title="the stored value is not a lock record this build can read" class="st"><span aria-hidden="true" class="icon">✖</span>malformed</td><td role="cell" title="a/3" class="name"><a href="/lock?fleet=f&amp;name=a/3" data-testid="lock-link">a/3</a><!></td><td role="cell" title="the record cannot be read, so its holder is unknown" class="holder"><span class="where">unknown</span> <span class="session"> </span></td><td role="cell" title="malformed record: not a lock record: not a JSON object — garbage" class="purpose malformed">malformed record: not a lock record: not a JSON object — garbage</td><td role="cell" data-testid="held-for" title="" class="age"> </td><td role="cell" data-testid="expires-in" title="" class="expires"> </td><td role="cell" data-testid="waiters" title="nobody waits" class="waiters"> </td><td role="cell" data-testid="fence" title="fencing token 5" class="fence">5</td></tr>"#;

/// The column classes of one `<tr>`'s cells, in order.
fn cell_classes(tr: &str) -> Vec<String> {
    tr.split("<t")
        .skip(1)
        .filter(|c| c.starts_with('d') || c.starts_with('h'))
        .filter_map(|c| {
            let tag = &c[..c.find('>')?];
            let at = tag.find(r#"class=""#)? + 7;
            Some(tag[at..at + tag[at..].find('"')?].split(' ').next()?.to_string())
        })
        .collect()
}

/// style/main.css: the lock table's rows are "laid out as blocks, each row a
/// flex line of cells whose widths never depend on the rows' text, not by the
/// table algorithm". So every cell, header and row alike, names its column in
/// its first class, in the header's order, and each column has a width of its
/// own in the stylesheet (the purpose takes what is left); a cell without one
/// would size to its text and push its row's other cells out of line.
#[test]
fn every_cell_names_its_column_and_every_column_has_a_fixed_width() {
    let html = table_html(vec![
        held("a/1", 3, vec![], false),
        held("a/2", 4, vec!["s1".into()], true),
        WindowRow {
            entry: LockEntry::from_stored("a/3".into(), 5, 5, b"garbage"),
            holder: Default::default(),
            deadlock: false,
            waiters: vec![],
        },
    ]);
    let rows: Vec<&str> = html
        .split("<tr")
        .skip(1)
        .filter(|r| !r.contains(r#"class="spacer""#))
        .collect();
    let header = cell_classes(rows[0]);
    assert_eq!(
        header,
        ["st", "name", "holder", "purpose", "age", "expires", "waiters", "fence"],
        "{html}"
    );
    assert_eq!(rows.len(), 4, "a header and three rows:\n{html}");
    for row in &rows[1..] {
        assert_eq!(
            cell_classes(row),
            header,
            "a row's cells in the header's columns:\n{row}"
        );
    }
    let css = include_str!("../../../style/main.css");
    for column in &header {
        let rule = match column.as_str() {
            "st" => "th.st, td.st { width: ".to_string(),
            "purpose" => "table.locks .purpose { flex: 1 1 0; min-width: 0; }".to_string(),
            c => format!("table.locks .{c} {{ width: "),
        };
        assert!(
            css.contains(&rule),
            "style/main.css gives column {column} its own width ({rule})"
        );
    }
}

/// app/src/table.rs: "The table's roles are said explicitly: its parts are laid
/// out as blocks and flex lines (style/main.css), which some screen readers
/// (Safari's VoiceOver) take as the end of a table's semantics." So the table,
/// its row groups, every row, header and cell carry their table roles.
#[test]
fn the_lock_table_says_its_table_roles() {
    let html = table_html(vec![held("a/1", 3, vec![], false), held("a/2", 4, vec![], false)]);
    let count = |s: &str| html.matches(s).count();
    // (`table_html` is the table from its `data-testid` on.)
    assert_eq!(count(r#"role="table""#), 1, "{html}");
    assert_eq!(
        count(r#"<thead role="rowgroup">"#) + count(r#"<tbody role="rowgroup">"#),
        2,
        "{html}"
    );
    assert_eq!(count(r#"<th role="columnheader""#), 8, "{html}");
    // Two lock rows and the header row; the spacer rows are hidden from readers.
    assert_eq!(count(r#"<tr role="row""#), 3, "{html}");
    assert_eq!(count(r#"<tr aria-hidden="true" class="spacer">"#), 2, "{html}");
    // Every cell of a lock row; the spacers' two cells are hidden with their rows.
    assert_eq!(count(r#"<td role="cell""#), 16, "{html}");
    assert_eq!(count("<td"), 16 + 2, "{html}");
}

/// style/main.css: "Each row is contained (`contain: strict`, its height
/// fixed): what happens inside a row is styled, laid out and painted within
/// it, in one pass per frame (`content-visibility: auto` cost a second style
/// and layout pass each frame a row entered, to decide whether it was on
/// screen; docs/performance.md), and the cells clip their text (`overflow:
/// clip`, not `hidden`: not a scroll container each)." A lock row's rule says
/// so, the spacer rows (whose height follows the window) are not contained,
/// and no rule of the lock table brings `content-visibility` back.
#[test]
fn each_lock_row_is_contained_in_one_pass() {
    let css = include_str!("../../../style/main.css");
    let rule = |selector: &str| {
        let at = css
            .find(&format!("\n{selector} {{"))
            .unwrap_or_else(|| panic!("style/main.css has a rule for {selector}"));
        css[at..][..css[at..].find('}').expect("a rule ends")].to_string()
    };
    let row = rule("table.locks tbody tr");
    assert!(
        row.contains("height: 36px;") && row.contains("contain: strict;"),
        "a lock row is 36 px (table.rs's ROW_PX) and contained: {row}"
    );
    assert_eq!(crate::table::ROW_PX, 36.0, "the stylesheet's row height is ROW_PX");
    let spacer = rule("table.locks tr.spacer");
    assert!(
        spacer.contains("contain: none;"),
        "a spacer row sizes to its cell: {spacer}"
    );
    let cells = rule("table.locks th, table.locks td");
    assert!(
        cells.contains("overflow: clip;") && cells.contains("text-overflow: ellipsis;"),
        "cells clip their text with an ellipsis: {cells}"
    );
    for line in css.lines().filter(|l| l.contains("table.locks") && l.contains('{')) {
        assert!(!line.contains("content-visibility"), "no content-visibility in {line}");
    }
}
