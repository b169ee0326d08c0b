//! Carrying out an attempt the door has let through: the fleet, its role and
//! scope, the input, then the store's guarded release, cancel or blacklisting and the
//! hub's history note; each refusal says why, and a conflict what is there now.

use lockscope_model::admin::{in_scope, whole_fleet, Action};
use lockscope_model::history::{Kind, ReleaseNote};
use lockscope_model::record::{BlacklistRecord, Stored};
use lockscope_model::{LockBody, LockEntry};
use lockscope_store::fleet::{Cancel, Release};
use lockscope_store::protocol::Blacklisting;
use lockscope_store::StoreError;

use super::{changed, refuse, Attempt, Door, Refusal, Verdict, MAX_REASON_BYTES, MAX_TARGET_BYTES};
use crate::auth::Identity;

/// Everything after authentication: `Ok` says what was done.
pub(super) async fn act(door: &Door, id: &Identity, a: &Attempt, at: i64) -> Result<String, Refusal> {
    let hub = door
        .fleets
        .get(Some(&a.fleet))
        .ok_or_else(|| refuse(Verdict::NotFound, door.fleets.unknown(&a.fleet)))?;
    // A family whose release does more than end one acquisition asks more.
    let needs = match (a.action, hub.store()) {
        (Action::Release, Some(store)) => a.action.needs().max(store.release_needs()),
        _ => a.action.needs(),
    };
    if id.role < needs {
        return Err(refuse(
            Verdict::Forbidden,
            format!(
                "{} on fleet {} needs the {} role; {} is {}",
                a.action.as_str(),
                a.fleet,
                needs.as_str(),
                id.actor,
                id.role.as_str()
            ),
        ));
    }
    if let Some(why) = &a.invalid {
        return Err(refuse(Verdict::Invalid, why.clone()));
    }
    if a.target.is_empty() || a.target.len() > MAX_TARGET_BYTES {
        return Err(refuse(
            Verdict::Invalid,
            format!("name a lock or session of 1 to {MAX_TARGET_BYTES} bytes"),
        ));
    }
    let reason = a.reason.trim();
    if reason.is_empty() || reason.len() > MAX_REASON_BYTES {
        return Err(refuse(
            Verdict::Invalid,
            format!("give a reason (1 to {MAX_REASON_BYTES} bytes): it goes in the audit log"),
        ));
    }
    let out_of_scope = |what: String| {
        refuse(
            Verdict::Forbidden,
            format!("{what} is outside {}'s scope on fleet {}", id.actor, a.fleet),
        )
    };
    let store = hub
        .store()
        .ok_or_else(|| refuse(Verdict::Conflict, "this fleet has no store handle to act through"))?;
    match a.action {
        Action::Release => {
            if !in_scope(&id.scope, &a.fleet, Some(&a.target)) {
                return Err(out_of_scope(format!("lock {:?}", a.target)));
            }
            let fence = a
                .fence
                .ok_or_else(|| refuse(Verdict::Invalid, "give the fencing token you saw (fence)"))?;
            let owner = a.owner.as_ref().ok_or_else(|| {
                refuse(
                    Verdict::Invalid,
                    "give the owner id of the acquisition you saw (owner: the lock's entry.body.owner, null when it has none)",
                )
            })?;
            // The history credits the store's delete to this force-release
            // only if the store says this compare-and-delete made it.
            let note = ReleaseNote {
                kind: Kind::ForceReleased,
                actor: id.actor.clone(),
                reason: a.reason.clone(),
            };
            let release = store.release_seen(&a.target, fence, owner.as_deref());
            let released = hub.release_as(&a.target, fence, note, release, Release::removed).await;
            match released.map_err(store_failed(a.action))? {
                Release::Released(_) => Ok(format!(
                    "released fence {fence} of {}{}{}",
                    a.target,
                    owner.as_ref().map_or_else(String::new, |o| format!(" (owner {o})")),
                    seen(a.revision)
                )),
                Release::NotHeld => Err(changed(format!("{} is not held now", a.target), None)),
                Release::Changed(now) => {
                    let other = if now.fence == fence {
                        " — another acquisition than the one you saw (its owner differs)"
                    } else {
                        ""
                    };
                    Err(changed(
                        format!("{} is now {}{other}", a.target, describe(&now)),
                        Some(now),
                    ))
                }
            }
        }
        Action::Cancel => {
            if !in_scope(&id.scope, &a.fleet, Some(&a.target)) {
                return Err(out_of_scope(format!("lock {:?}", a.target)));
            }
            let waiter = a.waiter.as_deref().ok_or_else(|| {
                refuse(
                    Verdict::Invalid,
                    "name the waiter you saw (its pid and backend start: a reused pid is never hit)",
                )
            })?;
            match store
                .cancel_waiter(&a.target, waiter)
                .await
                .map_err(store_failed(a.action))?
            {
                Cancel::Cancelled => Ok(format!(
                    "cancelled the wait of {waiter} for {} (its waiting statement was cancelled; its session \
                     and other locks stay)",
                    a.target
                )),
                Cancel::NotWaiting(now) => {
                    let what = match &now {
                        Some(now) => format!("{} is now {}", a.target, describe(now)),
                        None => format!("{} is not held now", a.target),
                    };
                    Err(changed(
                        format!("{waiter} does not wait for {} now: nothing cancelled; {what}", a.target),
                        now,
                    ))
                }
            }
        }
        Action::Blacklist | Action::Unblacklist => {
            let session = hub
                .session_now(&a.target)
                .await
                .map_err(|_| refuse(Verdict::Unavailable, "the fleet hub is not running"))?;
            // A session acts on every lock it holds or will take: no prefix
            // bounds that, so session actions need the whole fleet in scope.
            if !whole_fleet(&id.scope, &a.fleet) {
                return Err(out_of_scope("a session action (it covers the whole fleet)".into()));
            }
            if a.action == Action::Blacklist {
                // The view only ever lags the store: what it shows (registered,
                // holding a lock, blacklisted) was so; what it does not show
                // yet, the store answers (a session registered a moment ago).
                let in_view = session.known || !session.locks.is_empty() || session.blacklist.is_some();
                if !in_view
                    && !store
                        .session_registered(&a.target)
                        .await
                        .map_err(store_failed(a.action))?
                {
                    return Err(refuse(
                        Verdict::NotFound,
                        format!("fleet {} knows no session {:?}", a.fleet, a.target),
                    ));
                }
                let record = BlacklistRecord::new(&a.target, &id.actor, reason, at);
                if let Blacklisting::Exists(there) = store.blacklist(&record).await.map_err(store_failed(a.action))? {
                    let by = match &there {
                        Some(Stored::Record(r)) => format!(" by {} for {:?}", r.by, r.reason),
                        Some(Stored::Malformed { .. }) => " (a malformed entry)".to_string(),
                        None => String::new(),
                    };
                    return Err(changed(format!("already blacklisted{by}"), None));
                }
                let n = session.locks.len();
                Ok(format!(
                    "blacklisted session {} (holding {n} lock{})",
                    a.target,
                    if n == 1 { "" } else { "s" }
                ))
            } else if store.lift_blacklist(&a.target).await.map_err(store_failed(a.action))? {
                Ok(format!("lifted the blacklist of session {}", a.target))
            } else {
                Err(changed(format!("session {} is not blacklisted", a.target), None))
            }
        }
    }
}

fn seen(revision: Option<i64>) -> String {
    revision.map_or_else(String::new, |r| format!(" (seen at revision {r})"))
}

/// The refusal of `action` when the store failed: nothing was done.
fn store_failed(action: Action) -> impl Fn(StoreError) -> Refusal {
    move |e| match e {
        StoreError::ReadOnly { .. } | StoreError::Unsupported(_) => refuse(Verdict::Conflict, e.to_string()),
        StoreError::InvalidName { .. } => refuse(Verdict::Invalid, e.to_string()),
        // docs/operations.md ("A busy store"): another writer held the store's
        // write lock past the busy timeout; the statement wrote nothing.
        StoreError::Busy { ref what, .. } => {
            let nothing = match action {
                Action::Release => "nothing released",
                Action::Blacklist => "nothing blacklisted",
                Action::Unblacklist => "nothing lifted",
                Action::Cancel => "nothing cancelled",
            };
            refuse(
                Verdict::Unavailable,
                format!(
                    "store busy, {nothing}: {what} (waited {} s); try again when it frees up",
                    lockscope_store::sql::ADMIN_BUSY_TIMEOUT.as_secs()
                ),
            )
        }
        e => refuse(
            Verdict::Unavailable,
            format!("nothing done: the store failed: {}", e.describe()),
        ),
    }
}

/// "fence 7 held by svc@host:1 (session s)" / "fence 7 holding a malformed record" /
/// "fence 7 held by session s (foreign schema)".
fn describe(e: &LockEntry) -> String {
    match &e.body {
        LockBody::Held(r) => format!("fence {} held by {} (session {})", e.fence, r.holder(), r.session),
        LockBody::Malformed { .. } => format!("fence {} holding a malformed record", e.fence),
        LockBody::Foreign { session: Some(s), .. } => format!("fence {} held by session {s} (foreign schema)", e.fence),
        LockBody::Foreign { session: None, .. } => {
            format!("fence {} held by an unknown session (foreign schema)", e.fence)
        }
    }
}
