//! What a table row says, as plain text: pure functions of the row and the clock,
//! tested without a browser. Every state is a word (and an icon), never only a
//! colour.

use lockscope_model::time::{hms, human_duration, Millis};
use lockscope_model::view::{RowState, WindowRow};
use lockscope_model::LockBody;

pub fn state_icon(s: RowState) -> &'static str {
    match s {
        RowState::Expired => "‼",
        RowState::Orphaned => "☠",
        RowState::Blacklisted => "⊘",
        RowState::Overdue => "⚠",
        RowState::Malformed => "✖",
        RowState::Foreign => "◇",
        RowState::Healthy => "✓",
    }
}

/// The cells that change only when the row does.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RowText {
    /// `service@host:pid`, what a person recognises.
    pub holder: String,
    /// The session id, shortened.
    pub session: String,
    pub holder_title: String,
    pub purpose: String,
    pub waiters: String,
    pub waiters_title: String,
}

pub fn row_text(r: &WindowRow) -> RowText {
    let (waiters, waiters_title) = match r.waiters.len() {
        0 => (String::new(), "nobody waits".to_string()),
        n => (n.to_string(), format!("waiting: {}", r.waiters.join(", "))),
    };
    match &r.entry.body {
        LockBody::Held(rec) => RowText {
            holder: rec.holder(),
            session: short(&rec.session),
            holder_title: format!(
                "service {}, host {}, pid {}, session {}",
                rec.service, rec.host, rec.pid, rec.session
            ),
            purpose: rec.purpose.clone(),
            waiters,
            waiters_title,
        },
        LockBody::Malformed { raw, error } => {
            let preview: String = String::from_utf8_lossy(raw).chars().take(120).collect();
            RowText {
                holder: "unknown".into(),
                session: String::new(),
                holder_title: "the record cannot be read, so its holder is unknown".into(),
                purpose: format!("malformed record: {error} — {preview}"),
                waiters,
                waiters_title,
            }
        }
        // A foreign schema's row names its holder's session at most: the rest
        // is shown as unknown, never guessed.
        LockBody::Foreign { session, .. } => RowText {
            holder: match session {
                Some(_) => "foreign schema".into(),
                None => "unknown holder".into(),
            },
            session: session.as_deref().map(short).unwrap_or_default(),
            holder_title: match session {
                Some(s) => format!("session {s}, a client of a foreign schema: its service, host and pid are not kept"),
                None => "a client of a foreign schema that names no session: its holder is unknown".into(),
            },
            purpose: "unknown (not kept by this schema)".into(),
            waiters,
            waiters_title,
        },
    }
}

/// A session id as the table shows it: the first 8 characters.
pub fn short(id: &str) -> String {
    match id.char_indices().nth(8) {
        Some((i, _)) => format!("{}…", &id[..i]),
        None => id.to_string(),
    }
}

/// The cells that follow the clock.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Countdowns {
    pub held_for: String,
    pub held_title: String,
    pub expires_in: String,
    pub expires_title: String,
}

pub fn countdowns(r: &WindowRow, now: Millis) -> Countdowns {
    if let LockBody::Foreign { written_at, .. } = &r.entry.body {
        return foreign_countdowns(*written_at);
    }
    let Some(rec) = r.entry.record() else {
        return Countdowns::default();
    };
    let left = rec.auto_unlock_at - now;
    let expires_in = if left >= 0 {
        human_duration(left)
    } else {
        format!("expired {} ago", human_duration(left))
    };
    Countdowns {
        held_for: human_duration(now - rec.acquired_at),
        held_title: format!(
            "acquired at {} (holder's clock); last heartbeat {}",
            hms(rec.acquired_at),
            hms(rec.heartbeat_at)
        ),
        expires_in,
        expires_title: format!(
            "overdue from {}; may be released from {} (holder's clock)",
            hms(rec.alert_at),
            hms(rec.auto_unlock_at)
        ),
    }
}

/// A foreign schema's lock keeps no acquisition, alert or auto-unlock time:
/// both cells say "unknown" in words; the row's write time (not when it was
/// acquired) goes in the title.
fn foreign_countdowns(written_at: Option<Millis>) -> Countdowns {
    let written = match written_at {
        Some(at) => format!("row last written {} (writer's clock)", hms(at)),
        None => "row write time unknown".into(),
    };
    Countdowns {
        held_for: "unknown".into(),
        held_title: format!("when it was acquired is not kept by this schema; {written}"),
        expires_in: "unknown".into(),
        expires_title: "its alert and auto-unlock times are not kept by this schema; \
                        the schema's own housekeeping releases it"
            .into(),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use lockscope_model::record::RECORD_VERSION;
    use lockscope_model::{LockEntry, LockRecord};

    /// Lock `a`, fence 1, held by billing@h1:42 from 0, alert at 60 s and
    /// auto-unlock at 120 s (the holder's clock), two waiters.
    pub(crate) fn held() -> WindowRow {
        let rec = LockRecord {
            v: RECORD_VERSION,
            owner: "o".into(),
            session: "0123456789abcdef".into(),
            service: "billing".into(),
            host: "h1".into(),
            pid: 42,
            purpose: "nightly".into(),
            backtrace: [].into(),
            acquired_at: 0,
            expected_runtime_ms: 60_000,
            alert_at: 60_000,
            auto_unlock_at: 120_000,
            heartbeat_at: 0,
        };
        WindowRow {
            entry: LockEntry {
                name: "a".into(),
                fence: 1,
                revision: 1,
                body: LockBody::Held(rec),
            },
            holder: Default::default(),
            deadlock: false,
            waiters: vec!["s1".into(), "s2".into()],
        }
    }

    #[test]
    fn holder_first_session_short_waiters_named() {
        let t = row_text(&held());
        assert_eq!(t.holder, "billing@h1:42");
        assert_eq!(t.session, "01234567…");
        assert_eq!(t.waiters, "2");
        assert_eq!(t.waiters_title, "waiting: s1, s2");
    }

    #[test]
    fn countdowns_follow_the_clock() {
        let r = held();
        assert_eq!(countdowns(&r, 61_000).expires_in, "59s");
        assert_eq!(countdowns(&r, 61_000).held_for, "1m 01s");
        assert_eq!(countdowns(&r, 125_000).expires_in, "expired 5s ago");
        assert!(countdowns(&r, 0).expires_title.contains("00:02:00 UTC"));
    }

    #[test]
    fn a_malformed_row_says_so() {
        let r = WindowRow {
            entry: LockEntry::from_stored("x".into(), 1, 1, b"not json"),
            holder: Default::default(),
            deadlock: false,
            waiters: vec![],
        };
        let t = row_text(&r);
        assert_eq!(t.holder, "unknown");
        assert!(t.purpose.starts_with("malformed record:") && t.purpose.contains("not json"));
        assert_eq!(countdowns(&r, 5), Countdowns::default());
    }

    #[test]
    fn a_foreign_row_shows_its_session_and_unknown_times() {
        let row = |session: Option<&str>, written_at| WindowRow {
            entry: LockEntry::foreign("t".into(), 3, 3, session.map(Into::into), written_at),
            holder: Default::default(),
            deadlock: false,
            waiters: vec![],
        };
        let r = row(Some("0123456789abcdef"), Some(61_000));
        let t = row_text(&r);
        assert_eq!(t.holder, "foreign schema");
        assert_eq!(t.session, "01234567…");
        assert!(
            t.holder_title.contains("session 0123456789abcdef"),
            "{}",
            t.holder_title
        );
        assert!(t.purpose.starts_with("unknown"), "{}", t.purpose);
        let c = countdowns(&r, 999_999);
        assert_eq!((c.held_for.as_str(), c.expires_in.as_str()), ("unknown", "unknown"));
        assert!(c.held_title.contains("00:01:01 UTC"), "{}", c.held_title);
        let anon = row(None, None);
        assert_eq!(row_text(&anon).holder, "unknown holder");
        assert_eq!(row_text(&anon).session, "");
        assert!(countdowns(&anon, 0).held_title.contains("write time unknown"));
    }
}
