//! Audit entries as files for incident reviews: CSV (for spreadsheets) and
//! NDJSON (for tools), with the same field names.

use lockscope_model::admin::AuditEntry;
use lockscope_model::time::rfc3339;
use serde::Serialize;

/// The CSV header, and the field names of both formats.
pub const FIELDS: [&str; 12] = [
    "id", "at", "actor", "role", "via", "action", "fleet", "target", "fence", "reason", "outcome", "detail",
];

/// The entries as CSV: the [`FIELDS`] header row, then one row per entry, in
/// the order given; `at` in RFC 3339 (UTC, milliseconds), absent values
/// (`role`, `action`, `fence`, `outcome`) as empty cells, rows ended by `\n`,
/// cells quoted where they contain a comma, quote or line break.
///
/// **Formula injection**: spreadsheets run a cell that starts with `=`, `+`,
/// `-` or `@` (or a tab or carriage return, which some treat the same) as a
/// formula, and actors, reasons, targets and details are typed by people. So
/// such a text cell gets a leading `'`, which spreadsheets show as text and do
/// not display: `=HYPERLINK(…)` is written `'=HYPERLINK(…)`. The guard changes
/// the text (a tool reading the CSV sees the `'`); [`to_ndjson`] keeps every
/// value as recorded. Cells lockscope writes itself (the id, the time, the
/// fencing token, and the fixed role / action / outcome words) are not changed.
pub fn to_csv(entries: &[AuditEntry]) -> String {
    let mut w = csv::Writer::from_writer(Vec::new());
    let row_err = "writing CSV to memory cannot fail";
    w.write_record(FIELDS).expect(row_err);
    for e in entries {
        let fence = e.fence.map(|f| f.to_string()).unwrap_or_default();
        w.write_record([
            e.id.to_string().as_str(),
            &rfc3339(e.at),
            &guard(&e.actor),
            e.role.map_or("", |r| r.as_str()),
            &guard(&e.via),
            e.action.map_or("", |a| a.as_str()),
            &guard(&e.fleet),
            &guard(&e.target),
            &fence,
            &guard(&e.reason),
            e.outcome.map_or("", |o| o.as_str()),
            &guard(&e.detail),
        ])
        .expect(row_err);
    }
    let bytes = w.into_inner().expect(row_err);
    String::from_utf8(bytes).expect("CSV of UTF-8 strings is UTF-8")
}

/// A text cell as a spreadsheet will take it as text (see [`to_csv`]).
pub(crate) fn guard(cell: &str) -> std::borrow::Cow<'_, str> {
    match cell.chars().next() {
        Some('=' | '+' | '-' | '@' | '\t' | '\r') => format!("'{cell}").into(),
        _ => cell.into(),
    }
}

/// One line of [`to_ndjson`].
#[derive(Serialize)]
struct Line<'a> {
    id: i64,
    at: String,
    at_ms: i64,
    actor: &'a str,
    role: Option<&'static str>,
    via: &'a str,
    action: Option<&'static str>,
    fleet: &'a str,
    target: &'a str,
    fence: Option<i64>,
    reason: &'a str,
    outcome: Option<&'static str>,
    detail: &'a str,
}

/// The entries as newline-delimited JSON: one object per entry and line (each
/// line ends with `\n`), with the [`FIELDS`] names, `at` in RFC 3339 plus
/// `at_ms` (unix milliseconds), absent values as `null`. Values are as
/// recorded (no spreadsheet guard: see [`to_csv`]).
pub fn to_ndjson(entries: &[AuditEntry]) -> String {
    let mut out = String::new();
    for e in entries {
        let line = Line {
            id: e.id,
            at: rfc3339(e.at),
            at_ms: e.at,
            actor: &e.actor,
            role: e.role.map(|r| r.as_str()),
            via: &e.via,
            action: e.action.map(|a| a.as_str()),
            fleet: &e.fleet,
            target: &e.target,
            fence: e.fence,
            reason: &e.reason,
            outcome: e.outcome.map(|o| o.as_str()),
            detail: &e.detail,
        };
        out.push_str(&serde_json::to_string(&line).expect("audit lines serialise"));
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use lockscope_model::admin::{Action, Outcome, Role};

    use super::*;

    fn entries() -> Vec<AuditEntry> {
        vec![
            AuditEntry {
                id: 7,
                at: 1_700_000_000_123,
                actor: "alice".into(),
                role: Some(Role::Operator),
                via: "browser".into(),
                action: Some(Action::Release),
                fleet: "prod".into(),
                target: "billing/nightly".into(),
                fence: Some(42),
                reason: "stuck, \"worker\" gone,\nsee INC-7".into(),
                outcome: Some(Outcome::Changed),
                detail: "now held by fence 43".into(),
            },
            AuditEntry {
                id: 8,
                at: 1_700_000_001_000,
                actor: "=cmd|' /C calc'!A0".into(),
                role: None,
                via: "api".into(),
                action: None,
                fleet: "+prod".into(),
                target: "@SUM(1+1)".into(),
                fence: None,
                reason: "-2+3".into(),
                outcome: None,
                detail: "\t=1".into(),
            },
        ]
    }

    #[test]
    fn csv_has_the_header_escapes_and_guards_formulas() {
        let text = to_csv(&entries());
        let mut lines = text.lines();
        assert_eq!(
            lines.next(),
            Some("id,at,actor,role,via,action,fleet,target,fence,reason,outcome,detail")
        );
        let mut r = csv::Reader::from_reader(text.as_bytes());
        let rows: Vec<csv::StringRecord> = r.records().map(Result::unwrap).collect();
        assert_eq!(rows.len(), 2);
        let first: Vec<&str> = rows[0].iter().collect();
        assert_eq!(
            first,
            [
                "7",
                "2023-11-14T22:13:20.123Z",
                "alice",
                "operator",
                "browser",
                "release",
                "prod",
                "billing/nightly",
                "42",
                "stuck, \"worker\" gone,\nsee INC-7",
                "changed",
                "now held by fence 43",
            ]
        );
        assert!(text.contains("\"stuck, \"\"worker\"\" gone,\nsee INC-7\""), "{text}");
        let second: Vec<&str> = rows[1].iter().collect();
        assert_eq!(
            second,
            [
                "8",
                "2023-11-14T22:13:21.000Z",
                "'=cmd|' /C calc'!A0",
                "",
                "api",
                "",
                "'+prod",
                "'@SUM(1+1)",
                "",
                "'-2+3",
                "",
                "'\t=1",
            ]
        );
        assert_eq!(to_csv(&[]), format!("{}\n", FIELDS.join(",")));
    }

    #[test]
    fn ndjson_parses_back_line_by_line() {
        let entries = entries();
        let text = to_ndjson(&entries);
        assert!(text.ends_with('\n'));
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), entries.len());
        for (line, e) in lines.iter().zip(&entries) {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            let obj = v.as_object().unwrap();
            let mut keys: Vec<&str> = obj.keys().map(String::as_str).collect();
            keys.sort();
            let mut want: Vec<&str> = FIELDS.iter().copied().chain(["at_ms"]).collect();
            want.sort();
            assert_eq!(keys, want);
            assert_eq!(v["id"], e.id);
            assert_eq!(v["at"], rfc3339(e.at));
            assert_eq!(v["at_ms"], e.at);
            assert_eq!(v["actor"], e.actor.as_str());
            assert_eq!(v["reason"], e.reason.as_str());
            assert_eq!(v["detail"], e.detail.as_str());
            assert_eq!(v["role"].as_str(), e.role.map(|r| r.as_str()));
            assert_eq!(v["action"].as_str(), e.action.map(|a| a.as_str()));
            assert_eq!(v["outcome"].as_str(), e.outcome.map(|o| o.as_str()));
            assert_eq!(v["fence"].as_i64(), e.fence);
        }
        assert!(lines[1].contains("\"role\":null"));
        assert_eq!(to_ndjson(&[]), "");
    }
}
