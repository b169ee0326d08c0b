//! Admin actions (force-release, blacklist, lift a blacklist, cancel a
//! waiter), whichever way
//! they come (the JSON API, the browser's forms, the CLI through the API): one
//! function checks each attempt — credentials, CSRF, fleet, role and scope,
//! input, whether the store is writable — acts through the fleet's store
//! handle, and records the attempt in the audit log, allowed or refused.
//!
//! A release names the acquisition the actor saw by its fencing token and its
//! owner id (fresh per acquisition), and the store deletes the lock only if it
//! is still exactly that one: otherwise nothing is deleted, and the answer says
//! what is there now. A blacklisting is a create-if-absent in the store, and
//! whether the fleet knows the session is the store's answer too: every
//! decision is the store's, never the hub's view (which lags it).

use lockscope_model::admin::{Action, AuditEntry, AuditQuery, Outcome, Role};
use lockscope_model::LockEntry;
use lockscope_store::now_ms;

use crate::auth::{Identity, Who, UNAUTHENTICATED};
use crate::live::hub::Fleets;
use crate::remember::audit::AuditLog;
use crate::remember::audit::Recorded;

mod perform;

pub use lockscope_model::admin::MAX_REASON_BYTES;
use perform::act;
/// Longest lock name or session id accepted (bytes): `400` "name a lock or
/// session of 1 to 512 bytes", audited (docs/api.md). Fixed: it is the
/// protocol's own bound on names and session ids (docs/protocol.md), so no
/// lock this could act on is longer.
pub const MAX_TARGET_BYTES: usize = 512;

/// What the door acts through and writes to: the fleets (their store
/// handles and hubs) and the audit log.
#[derive(Clone)]
pub struct Door {
    pub fleets: Fleets,
    pub audit: AuditLog,
}

/// One attempt, as the request stated it.
#[derive(Clone, Debug)]
pub struct Attempt {
    pub action: Action,
    pub fleet: String,
    /// Lock name (release) or session id.
    pub target: String,
    /// The fencing token the actor saw (release).
    pub fence: Option<i64>,
    /// The owner id of the acquisition the actor saw (release): `Some(None)`
    /// when it showed none (a malformed value, a foreign schema's row); `None`:
    /// not sent.
    pub owner: Option<Option<String>>,
    /// Cancel: the waiter the actor saw, as the lock shows it (a PostgreSQL
    /// backend: `PID@BACKEND_START_US`, its pid and backend start).
    pub waiter: Option<String>,
    /// The store revision of the lock the actor saw, when the page sent it (for
    /// the record: the release compares the fence, which a heartbeat does not change).
    pub revision: Option<i64>,
    pub reason: String,
    /// "api" or "browser".
    pub via: &'static str,
    /// What was wrong with the request's body, if it could not be read (refused
    /// with 400 once the caller is known to be allowed to act at all).
    pub invalid: Option<String>,
    /// The client's address (the web layer's `Caller::client`): attempts
    /// without an identity are tallied per source and minute in the audit log ([`crate::remember::audit::AuditLog::tally`]).
    pub source: Option<std::net::IpAddr>,
}

/// How an attempt ended: its [`Verdict`], the audit entry as stored, and for a
/// release that found another acquisition, that acquisition.
#[derive(Clone, Debug)]
pub struct Answer {
    pub verdict: Verdict,
    pub entry: AuditEntry,
    pub current: Option<LockEntry>,
    /// The answer's `audit_id` (docs/api.md): the entry's id; `Some(0)` when
    /// a known caller's entry could not be written nor queued; `None` for an
    /// attempt without an identity, which is tallied rather than written on
    /// its own, and for an entry queued in the audit log's spool.
    pub audit_id: Option<i64>,
}

impl Answer {
    /// The JSON the API answers with.
    pub fn json(&self) -> serde_json::Value {
        let mut v = serde_json::json!({
            "outcome": self.entry.outcome.map(|o| o.as_str()),
            "detail": self.entry.detail,
            "audit_id": self.audit_id,
        });
        if self.entry.action == Some(Action::Release) {
            v["released"] = (self.entry.outcome == Some(Outcome::Done)).into();
        }
        if self.entry.action == Some(Action::Cancel) {
            v["cancelled"] = (self.entry.outcome == Some(Outcome::Done)).into();
        }
        if matches!(self.entry.action, Some(Action::Release | Action::Cancel))
            && self.entry.outcome == Some(Outcome::Changed)
        {
            v["current"] = serde_json::to_value(&self.current).unwrap_or_default();
        }
        v
    }
}

/// How an attempt ended, in the door's terms; each protocol says it its own
/// way (the web layer as an HTTP status).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Done, and recorded (or queued) in the audit log.
    Done,
    /// No identity (an API's 401).
    Unauthenticated,
    /// Credentials that name more than one identity (400).
    Ambiguous,
    /// The identity may not do this: its role or scope, or a failed CSRF check (403).
    Forbidden,
    /// The input is not a valid attempt (400).
    Invalid,
    /// No such fleet or session (404).
    NotFound,
    /// The target is not what the caller saw, or the fleet takes no such action (409).
    Conflict,
    /// Not now: the store, the hub or the audit log's spool (503).
    Unavailable,
    /// The audit log could not be written, so whether it was done is said but not recorded (500).
    Unrecorded,
}

/// Not done, and why.
struct Refusal {
    verdict: Verdict,
    outcome: Outcome,
    why: String,
    current: Option<LockEntry>,
}

fn refuse(verdict: Verdict, why: impl Into<String>) -> Refusal {
    Refusal {
        verdict,
        outcome: Outcome::Refused,
        why: why.into(),
        current: None,
    }
}

fn changed(why: String, current: Option<LockEntry>) -> Refusal {
    Refusal {
        verdict: Verdict::Conflict,
        outcome: Outcome::Changed,
        why,
        current,
    }
}

/// Checks, performs and records one attempt. `csrf` is the result of the
/// request's CSRF check (`Ok` for requests that need none).
pub async fn attempt(door: &Door, who: &Who, csrf: Result<(), String>, a: Attempt) -> Answer {
    // In a task of its own, which the request awaits: hyper drops a request's
    // future when its client goes away, and that must never fall between the
    // store's act and the audit entry (docs/operations.md, issue 24).
    let (door, who) = (door.clone(), who.clone());
    match tokio::spawn(async move { attempt_here(&door, &who, csrf, a).await }).await {
        Ok(answer) => answer,
        Err(e) => match e.try_into_panic() {
            Ok(panic) => std::panic::resume_unwind(panic),
            // Cancelled: only when the runtime shuts down, which drops this
            // request too.
            Err(_) => std::future::pending().await,
        },
    }
}

async fn attempt_here(door: &Door, who: &Who, csrf: Result<(), String>, a: Attempt) -> Answer {
    let at = now_ms();
    let mut permit = None;
    let mut audit_full = None;
    let result = match who {
        Who::Nobody(why) => Err(refuse(Verdict::Unauthenticated, why.clone())),
        Who::Ambiguous(why) => Err(refuse(Verdict::Ambiguous, why.clone())),
        Who::Known(id) => match csrf {
            Err(why) => Err(refuse(Verdict::Forbidden, why)),
            // An action must never happen unaudited: without a place for its
            // entry (the audit log's spool full, or none in this process), it
            // is refused before it acts (docs/operations.md).
            Ok(()) => match door.audit.ready() {
                Err(why) => {
                    audit_full = Some(why.clone());
                    Err(refuse(Verdict::Unavailable, why))
                }
                Ok(p) => {
                    permit = Some(p);
                    act(door, id, &a, at).await
                }
            },
        },
    };
    let (verdict, outcome, mut detail, current) = match result {
        Ok(done) => (Verdict::Done, Outcome::Done, done, None),
        Err(r) => (r.verdict, r.outcome, r.why, r.current),
    };
    // A release that was not done says which acquisition it named (the fence
    // has a column of its own; a done one names its owner already).
    if let (Action::Release, Some(owner), false) = (a.action, &a.owner, outcome == Outcome::Done) {
        let owner = owner.as_ref().map_or_else(
            || "null".to_string(),
            |o| format!("{:?}", cut(o.clone(), MAX_TARGET_BYTES)),
        );
        detail = format!("{detail} (named owner {owner})");
    }
    // A cancel that was not done says which waiter it named.
    if let (Action::Cancel, false) = (a.action, outcome == Outcome::Done) {
        let waiter = a.waiter.as_ref().map_or_else(
            || "none".to_string(),
            |w| format!("{:?}", cut(w.clone(), MAX_TARGET_BYTES)),
        );
        detail = format!("{detail} (named waiter {waiter})");
    }
    let (actor, role) = match who {
        Who::Known(id) => (id.actor.clone(), Some(id.role)),
        Who::Nobody(_) | Who::Ambiguous(_) => (UNAUTHENTICATED.to_string(), None),
    };
    // Anyone can make an attempt (and so an entry): what it stores is bounded.
    let entry = AuditEntry {
        id: 0,
        at,
        actor,
        role,
        via: a.via.into(),
        action: Some(a.action),
        fleet: cut(a.fleet, MAX_TARGET_BYTES),
        target: cut(a.target, MAX_TARGET_BYTES),
        fence: a.fence,
        reason: cut(a.reason, MAX_REASON_BYTES),
        outcome: Some(outcome),
        detail: cut(detail, MAX_REASON_BYTES),
    };
    let stored = match who {
        // The database busy or down, the entry waits in the spool: the answer
        // says so and carries no id yet (docs/api.md).
        Who::Known(_) => record(door, &entry, permit).await.map(|r| match r {
            Recorded::Written(e) => (Some(e.id), e),
            Recorded::Queued { mut entry, why } => {
                entry.detail = format!(
                    "{} — the audit entry is queued ({why}) and written to the audit log when it takes writes again",
                    entry.detail
                );
                (None, entry)
            }
        }),
        // Anyone can make these: one row per source and minute, with a count,
        // written when the minute is over: their answers carry no id.
        _ => Ok((None, door.audit.tally(&entry, a.source))),
    };
    match stored {
        Ok((audit_id, entry)) => Answer {
            verdict,
            entry,
            current,
            audit_id,
        },
        Err(e) => {
            // The action (if any) happened; say so, and that it is unrecorded.
            tracing::error!(error = %e, ?entry, "the audit log could not be written");
            let mut entry = entry;
            entry.detail = format!("{} — but the audit log could not be written: {e}", entry.detail);
            Answer {
                // Refused for a full audit spool, nothing was done: the
                // refusal stands (it cannot be audited; logged above).
                verdict: if audit_full.is_some() {
                    verdict
                } else {
                    Verdict::Unrecorded
                },
                entry,
                current,
                // docs/api.md: "If writing it fails, the answer is `500` with the same JSON, `audit_id: 0`".
                audit_id: Some(0),
            }
        }
    }
}

/// Records a known caller's entry: in the place reserved before acting, or
/// (refused before that) in one asked for now, if there is one.
async fn record(
    door: &Door,
    entry: &AuditEntry,
    permit: Option<crate::remember::audit::Permit>,
) -> Result<Recorded, crate::remember::audit::AuditError> {
    match permit.map_or_else(|| door.audit.ready(), Ok) {
        Ok(permit) => door.audit.record(entry, permit).await,
        // No place: a refusal (nothing was done) written if the database
        // takes it, logged otherwise.
        Err(_) => door.audit.append_within(entry, None).await.map(Recorded::Written),
    }
}

/// Whether `id` may read the audit log (admins only; the API and the audit
/// page both ask here). `Err`: why not, to show the caller.
pub fn may_read_audit(id: &Identity) -> Result<(), String> {
    if id.role < Role::Admin {
        return Err(format!(
            "reading the audit log needs the admin role; {} is {}",
            id.actor,
            id.role.as_str()
        ));
    }
    Ok(())
}

/// The audit entries `q` selects that `id` may read: a scoped admin sees the
/// fleets of their scope (the limit counts what they see). `None`: the log
/// cannot be read now (logged).
pub async fn audit_for(audit: &AuditLog, id: &Identity, q: &AuditQuery) -> Option<Vec<AuditEntry>> {
    let result = if id.scope.is_empty() {
        audit.query(q).await
    } else {
        let fleets: Vec<String> = id.scope.iter().map(|(f, _)| f.clone()).collect();
        audit.query_fleets(q, &fleets).await
    };
    result
        .map_err(|e| tracing::error!(error = %e, "reading the audit log"))
        .ok()
}

/// `s` cut to at most `max` bytes (on a character boundary), marked when cut.
/// NULs become U+FFFD: PostgreSQL's `TEXT` takes none, and an entry it could
/// never store must not be written nor queued as it is.
fn cut(s: String, max: usize) -> String {
    let mut s = if s.contains('\0') {
        s.replace('\0', "\u{FFFD}")
    } else {
        s
    };
    if s.len() > max {
        let mut end = max;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
        s.push_str("… (cut)");
    }
    s
}

#[cfg(test)]
mod tests {
    #[test]
    fn what_an_entry_stores_is_bounded_and_storable() {
        assert_eq!(super::cut("a\0b".into(), 10), "a\u{FFFD}b");
        assert_eq!(super::cut("ééé".into(), 3), "é… (cut)");
    }
}
