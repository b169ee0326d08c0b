//! A sessions-page row for a foreign family's session: a ZooKeeper session
//! (its negotiated timeout where the servers said it, else unknown) or a
//! PostgreSQL backend (pid, application_name, user, client address, backend
//! start, state). Neither has lockscope's heartbeat, contention or clock
//! skew: those cells stay empty; the locks it holds are the locks cell's hover.

use lockscope_model::detail::SessionRow;
use lockscope_model::fleet::foreign_sessions::{ForeignFamily, ForeignSession};
use lockscope_model::time::{absolute_and_relative, human_duration, Millis};

use super::SessionText;

/// What a foreign session's row says at `now`.
pub fn row_text(r: &SessionRow, f: &ForeignSession, now: Millis) -> SessionText {
    let holds = match f.holds_total as usize {
        0 => "holds no lock".to_string(),
        n if n > f.holds.len() => format!("holds {} (and {} more)", f.holds.join(", "), n - f.holds.len()),
        _ => format!("holds {}", f.holds.join(", ")),
    };
    let mut t = SessionText {
        holds,
        ..SessionText::default()
    };
    match &f.family {
        ForeignFamily::Zookeeper { timeout_ms } => {
            t.who = "ZooKeeper session".into();
            t.started = "unknown".into();
            t.started_title = "ZooKeeper does not tell when another client's session began".into();
            match timeout_ms {
                Some(ms) => {
                    t.heartbeat = format!("timeout {ms} ms");
                    t.heartbeat_title = format!(
                        "negotiated session timeout {ms} ms, as the servers' cons said it: the session expires \
                         that long after its client stops reaching them, and its nodes go with it"
                    );
                }
                None => {
                    t.heartbeat = "timeout unknown".into();
                    t.heartbeat_title = "ZooKeeper tells a session's timeout only to its own client; the \
                                         servers' cons did not say it for session"
                        .to_string()
                        + " "
                        + &r.id;
                }
            }
        }
        ForeignFamily::PgBackend(b) => {
            let app = if b.application_name.is_empty() {
                "no application_name".to_string()
            } else {
                b.application_name.clone()
            };
            t.who = format!("PostgreSQL backend pid {} ({app})", b.pid);
            let start = b.backend_start_us / 1000;
            t.started = human_duration(now - start);
            t.started_title = format!("backend started {}", absolute_and_relative(start, now));
            t.heartbeat = match (&b.state, b.state_change) {
                (Some(s), Some(at)) => format!("{s} for {}", human_duration(now - at)),
                (Some(s), None) => s.clone(),
                (None, _) => "state unknown".into(),
            };
            t.heartbeat_title = b.line(now);
        }
    }
    t
}

#[cfg(test)]
mod tests {
    use lockscope_model::fleet::pg_advisory::PgBackend;
    use lockscope_model::Holder;

    use super::*;

    fn row(family: ForeignFamily, holds: &[&str]) -> (SessionRow, ForeignSession) {
        let f = ForeignSession {
            family,
            holds: holds.iter().map(|s| s.to_string()).collect(),
            holds_total: holds.len() as u32,
        };
        let r = SessionRow {
            id: "0x1".into(),
            entry: None,
            holder: Holder::Unknown,
            locks_held: holds.len() as u64,
            waiting_for: vec![],
            blacklist: None,
            deadlock: false,
            lease: None,
            is_lease: false,
            foreign: Some(Box::new(f.clone())),
        };
        (r, f)
    }

    #[test]
    fn a_zookeeper_session_says_its_timeout_or_that_it_is_unknown() {
        let (r, f) = row(ForeignFamily::Zookeeper { timeout_ms: Some(4000) }, &["a", "b"]);
        let t = row_text(&r, &f, 0);
        assert_eq!(
            (t.who.as_str(), t.heartbeat.as_str()),
            ("ZooKeeper session", "timeout 4000 ms")
        );
        assert_eq!(t.holds, "holds a, b");
        let (r, f) = row(ForeignFamily::Zookeeper { timeout_ms: None }, &[]);
        let t = row_text(&r, &f, 0);
        assert_eq!(
            (t.heartbeat.as_str(), t.holds.as_str()),
            ("timeout unknown", "holds no lock")
        );
    }

    #[test]
    fn a_backend_says_its_pid_application_start_and_state() {
        let b = PgBackend {
            pid: 7,
            backend_start_us: 1_000_000_000,
            application_name: "migrate".into(),
            state: Some("idle".into()),
            state_change: Some(1_000_000),
            ..PgBackend::default()
        };
        let (r, f) = row(ForeignFamily::PgBackend(Box::new(b)), &["42"]);
        let t = row_text(&r, &f, 1_060_000);
        assert_eq!(t.who, "PostgreSQL backend pid 7 (migrate)");
        assert_eq!(t.heartbeat, "idle for 1m 00s");
        assert_eq!(t.started, "1m 00s");
        assert!(
            t.heartbeat_title.contains("unknown user@local socket or hidden"),
            "{}",
            t.heartbeat_title
        );
    }
}
