//! Who may act, what an admin action is, and the audit log's entries: shared by
//! the server (which decides and records) and the UI (which shows buttons only
//! to those who may press them, and the audit view).

use serde::{Deserialize, Serialize};

use crate::time::Millis;

/// What an identity may do. Ordered: each role may do everything the ones
/// before it may.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum Role {
    /// Reads pages and the read API (the default for an identity with no role).
    #[default]
    Viewer,
    /// Also force-releases locks and blacklists sessions.
    Operator,
    /// Also lifts blacklists and reads the audit log.
    Admin,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Operator => "operator",
            Role::Admin => "admin",
        }
    }

    pub fn parse(s: &str) -> Option<Role> {
        match s {
            "viewer" => Some(Role::Viewer),
            "operator" => Some(Role::Operator),
            "admin" => Some(Role::Admin),
            _ => None,
        }
    }
}

/// The state-changing actions, each with the least role that may take it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum Action {
    /// Compare-and-set delete of one acquisition (by fencing token).
    Release,
    /// Blacklist a session: its heartbeats fail, its locks run out.
    Blacklist,
    /// Lift a session's blacklist entry.
    Unblacklist,
    /// Cancel one waiter's wait for a lock (PostgreSQL advisory locks:
    /// `pg_cancel_backend` of the waiting backend, by its pid and backend start).
    Cancel,
}

impl Action {
    pub const ALL: [Action; 4] = [Action::Release, Action::Blacklist, Action::Unblacklist, Action::Cancel];

    pub fn as_str(self) -> &'static str {
        match self {
            Action::Release => "release",
            Action::Blacklist => "blacklist",
            Action::Unblacklist => "unblacklist",
            Action::Cancel => "cancel",
        }
    }

    pub fn parse(s: &str) -> Option<Action> {
        Action::ALL.into_iter().find(|a| a.as_str() == s)
    }

    /// The least role that may take this action.
    pub fn needs(self) -> Role {
        match self {
            Action::Release | Action::Blacklist => Role::Operator,
            Action::Unblacklist | Action::Cancel => Role::Admin,
        }
    }
}

/// How an attempt ended. Every attempt is recorded, refused ones too.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum Outcome {
    /// The store did it.
    Done,
    /// Nothing was done: the target is no longer what the actor saw (another
    /// acquisition, or none). `AuditEntry::detail` says what is there now.
    Changed,
    /// Nothing was done: not allowed, bad input, or the store refused or failed.
    /// `AuditEntry::detail` says why.
    Refused,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Done => "done",
            Outcome::Changed => "changed",
            Outcome::Refused => "refused",
        }
    }

    pub fn parse(s: &str) -> Option<Outcome> {
        [Outcome::Done, Outcome::Changed, Outcome::Refused]
            .into_iter()
            .find(|o| o.as_str() == s)
    }
}

/// One admin attempt, as the audit log keeps it (append-only).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AuditEntry {
    /// Assigned by the log, increasing.
    pub id: i64,
    /// When the server received the attempt (the server's clock).
    pub at: Millis,
    /// Who: a token's or proxy user's name, "anonymous" without authentication,
    /// "(unauthenticated)" when no credentials were given.
    pub actor: String,
    /// The actor's role when they acted (`None`: unauthenticated).
    pub role: Option<Role>,
    /// How the request came: "api", "browser".
    pub via: String,
    /// `None` only when the request named no action the server knows.
    pub action: Option<Action>,
    pub fleet: String,
    /// The lock name (release) or session id (blacklist, unblacklist).
    pub target: String,
    /// The fencing token the actor saw (release).
    pub fence: Option<i64>,
    pub reason: String,
    pub outcome: Option<Outcome>,
    /// What happened, in a sentence: what is there now when changed, why when refused.
    pub detail: String,
}

/// Which audit entries to list (all fields optional; newest first).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditQuery {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fleet: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actor: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<Action>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<Outcome>,
    /// From this instant (inclusive, unix ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<Millis>,
    /// Before this instant (exclusive, unix ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<Millis>,
    /// At most this many (the server caps it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
}

impl AuditQuery {
    /// Reads a query from URL pairs (`fleet`, `actor`, `action`, `outcome`,
    /// `from`, `to`, `limit`; other keys are ignored, empty values mean "any").
    /// Times take any form [`crate::time::parse_instant`] reads, within
    /// [`crate::time::EARLIEST`]`..=`[`crate::time::LATEST`].
    pub fn from_query<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Result<AuditQuery, String> {
        let mut q = AuditQuery::default();
        for (k, v) in pairs {
            let v = v.trim();
            if v.is_empty() {
                continue;
            }
            // Within `time::EARLIEST..=time::LATEST`, as every time a query takes.
            let instant = || {
                crate::time::parse_instant(v)
                    .ok_or_else(|| {
                        "not a time (use 2026-11-23T04:20:13Z, 2026-11-23T04:20 taken as UTC, or unix ms)".to_string()
                    })
                    .and_then(crate::time::in_range)
                    .map_err(|why| format!("{k}={v:?}: {why}"))
            };
            match k {
                "fleet" => q.fleet = Some(v.to_string()),
                "actor" => q.actor = Some(v.to_string()),
                "action" => {
                    q.action = Some(
                        Action::parse(v)
                            .ok_or_else(|| format!("action={v:?}: use release, blacklist or unblacklist"))?,
                    )
                }
                "outcome" => {
                    q.outcome =
                        Some(Outcome::parse(v).ok_or_else(|| format!("outcome={v:?}: use done, changed or refused"))?)
                }
                "from" => q.from = Some(instant()?),
                "to" => q.to = Some(instant()?),
                "limit" => {
                    let n: u32 = v.parse().map_err(|_| format!("limit={v:?}: not a number"))?;
                    q.limit = Some(n.clamp(1, MAX_AUDIT_ROWS));
                }
                _ => {}
            }
        }
        Ok(q)
    }
}

/// How a page was reached and what its viewer may do: the UI shows only the
/// buttons its viewer may press (the server checks again on every action).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Viewer {
    /// Who the server takes the viewer for.
    pub actor: String,
    pub role: Role,
    /// No authentication is configured: anyone who can reach the port is admin.
    pub no_auth: bool,
    /// Signed in with a token (so "sign out" means something).
    pub signed_in: bool,
    /// Lock-name prefixes the role is limited to, per fleet; empty: unlimited.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scope: Vec<(String, Vec<String>)>,
    /// The CSRF token every form of this page sends back.
    pub csrf: String,
}

impl Viewer {
    /// May this viewer take `action` on lock `name` of `fleet` (`None`: a
    /// session action, which needs the whole fleet in scope)? Mirrors the
    /// server's check.
    pub fn may(&self, action: Action, fleet: &str, name: Option<&str>) -> bool {
        self.role >= action.needs()
            && match name {
                Some(_) => in_scope(&self.scope, fleet, name),
                None => whole_fleet(&self.scope, fleet),
            }
    }
}

/// Whether `scope` admits every lock of `fleet`. A session action (blacklist,
/// lift) needs this: it acts on every lock the session holds or will take,
/// which no prefix can bound.
pub fn whole_fleet(scope: &[(String, Vec<String>)], fleet: &str) -> bool {
    scope.is_empty() || scope.iter().any(|(f, prefixes)| f == fleet && prefixes.is_empty())
}

/// Whether `scope` (fleet → lock-name prefixes; empty: everything) admits lock
/// `name` of `fleet`, or the fleet at all when `name` is `None`.
pub fn in_scope(scope: &[(String, Vec<String>)], fleet: &str, name: Option<&str>) -> bool {
    if scope.is_empty() {
        return true;
    }
    let Some((_, prefixes)) = scope.iter().find(|(f, _)| f == fleet) else {
        return false;
    };
    match name {
        None => true,
        Some(name) => prefixes.is_empty() || prefixes.iter().any(|p| name.starts_with(p.as_str())),
    }
}

/// Longest reason an admin action accepts (bytes; the page's inputs cap it too).
pub const MAX_REASON_BYTES: usize = 2000;

/// The most audit entries one query returns.
pub const MAX_AUDIT_ROWS: u32 = 10_000;
/// How many a query without a limit returns.
pub const DEFAULT_AUDIT_ROWS: u32 = 1_000;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_are_ordered_and_actions_need_them() {
        assert!(Role::Admin > Role::Operator && Role::Operator > Role::Viewer);
        assert_eq!(Action::Release.needs(), Role::Operator);
        assert_eq!(Action::Unblacklist.needs(), Role::Admin);
        // issue 28: cancelling a PostgreSQL waiter "needs the admin role".
        assert_eq!(Action::Cancel.needs(), Role::Admin);
        for a in Action::ALL {
            assert_eq!(Action::parse(a.as_str()), Some(a));
        }
        assert_eq!(Role::parse("root"), None);
    }

    #[test]
    fn audit_queries_parse_from_urls_with_reasons() {
        let q = AuditQuery::from_query([
            ("fleet", "prod"),
            ("action", "release"),
            ("outcome", "changed"),
            ("from", "2026-11-23T04:00"),
            ("to", ""),
            ("limit", "999999"),
            ("format", "csv"),
        ])
        .unwrap();
        assert_eq!(q.fleet.as_deref(), Some("prod"));
        assert_eq!((q.action, q.outcome), (Some(Action::Release), Some(Outcome::Changed)));
        assert_eq!(q.from, crate::time::parse_instant("2026-11-23T04:00:00Z"));
        assert_eq!((q.to, q.limit), (None, Some(MAX_AUDIT_ROWS)));
        for (k, v) in [
            ("action", "delete"),
            ("from", "noon"),
            ("limit", "x"),
            ("outcome", "ok"),
        ] {
            let err = AuditQuery::from_query([(k, v)]).unwrap_err();
            assert!(err.starts_with(k), "{err}");
        }
        // Issue 23: every time a query takes lies in one documented range.
        for (k, v) in [
            ("from", "-9223372036854775808"),
            ("to", "9223372036854775807"),
            ("to", "-1"),
        ] {
            let err = AuditQuery::from_query([(k, v)]).unwrap_err();
            assert!(err.starts_with(k) && err.contains(crate::time::RANGE_HELP), "{err}");
        }
    }

    #[test]
    fn scope_limits_fleets_and_prefixes() {
        let scope = vec![
            ("prod".to_string(), vec!["billing/".to_string()]),
            ("dev".to_string(), vec![]),
        ];
        assert!(in_scope(&scope, "prod", Some("billing/x")));
        assert!(!in_scope(&scope, "prod", Some("orders/x")));
        assert!(in_scope(&scope, "prod", None));
        assert!(in_scope(&scope, "dev", Some("anything")));
        assert!(!in_scope(&scope, "staging", Some("billing/x")));
        assert!(in_scope(&[], "staging", Some("x")));
        let op = Viewer {
            role: Role::Operator,
            scope,
            ..Viewer::default()
        };
        assert!(op.may(Action::Release, "prod", Some("billing/1")));
        assert!(!op.may(Action::Unblacklist, "prod", Some("billing/1")));
        assert!(!op.may(Action::Release, "prod", Some("orders/1")));
        assert!(
            !op.may(Action::Blacklist, "prod", None),
            "a prefix scope does not bound a session"
        );
        assert!(op.may(Action::Blacklist, "dev", None));
        assert!(!op.may(Action::Blacklist, "staging", None));
    }
}
