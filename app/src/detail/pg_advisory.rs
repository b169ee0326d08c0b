//! A PostgreSQL advisory lock on its detail page: its key and level, that it
//! is polled (and how often), the holder backend(s) and the waiters with who
//! blocks them, the waits-for cycle it is on, why it may be stranded, and
//! what the force-release (a terminate of the holder's backend) also ends;
//! and, for an admin, a form per waiter that cancels its wait.

use leptos::prelude::*;
use lockscope_model::admin::{Action, Viewer, MAX_REASON_BYTES};
use lockscope_model::detail::LockDetail;
use lockscope_model::fleet::pg_advisory::{LockLevel, PgAdvisoryLock, PgBackend};
use lockscope_model::fleet::FamilyDetail;
use lockscope_model::time::{absolute_and_relative, human_duration, Millis};
use lockscope_model::{LockBody, LockEntry};

use crate::actions::AdminForm;
use crate::live::LiveView;

/// What the force-release does on this layout.
pub const PG_TERMINATE: &str = "PostgreSQL cannot release another backend's advisory lock. The force-release \
     below terminates the holder's backend (pg_terminate_backend): its connection ends, its open transaction \
     is rolled back, and every lock it holds is released, the ones listed here included. It acts only if the \
     backend is still the one shown (its pid and backend start: a reused pid is never hit), needs the admin \
     role here and pg_signal_backend (or the same user) in the database, and is audited.";

/// What cancelling a waiter does (docs/operations.md says the same).
pub const PG_CANCEL: &str = "Cancels this backend's waiting statement (pg_cancel_backend): its \
     pg_advisory_lock call fails with \"canceling statement due to user request\" (inside a transaction, that \
     transaction is aborted too). Its session stays connected and every lock it already holds stays held; its \
     client decides what to do next. It acts only if the backend is still the one shown (its pid and backend \
     start: a reused pid is never hit) and still waits for this lock, needs the admin role, and is audited.";

/// The advisory lock in `family`, if it is one.
pub fn pg(family: &FamilyDetail) -> Option<&PgAdvisoryLock> {
    match family {
        FamilyDetail::PgAdvisory(l) => Some(l),
        #[allow(unreachable_patterns)]
        _ => None,
    }
}

/// "polled every 1 s" (or 0.2 s, 2.5 s…).
pub fn polled_text(poll_ms: u64) -> String {
    format!("polled every {} s", lockscope_model::polled::seconds(poll_ms))
}

/// The level, for people.
pub fn level_text(level: &LockLevel) -> String {
    match level {
        LockLevel::Session { how } => format!("session-level ({how})"),
        LockLevel::Unknown => "session- or transaction-level: unknown (pg_locks does not say; so far only seen \
                               inside one transaction of its holder, and a transaction-level lock ends with it)"
            .into(),
    }
}

/// The transaction age of a backend, for people.
pub fn xact_text(b: &PgBackend, now: Millis) -> String {
    match b.xact_start {
        Some(t) => format!("in a transaction for {}", human_duration(now - t)),
        None => "not in a transaction".into(),
    }
}

/// The record section of an advisory lock.
pub fn record(entry: &LockEntry, lock: &PgAdvisoryLock, d: &LockDetail, now: Millis) -> AnyView {
    let holders = lock
        .holders
        .iter()
        .map(|b| view! { <li data-testid="detail-pg-holder">{b.line(now)}<br/><code>{b.query.clone().unwrap_or_default()}</code></li> })
        .collect_view();
    let waiters = lock
        .waiters
        .iter()
        .map(|b| {
            let since = b
                .waiting_since
                .map(|t| format!(", waiting {}", human_duration(now - t)))
                .unwrap_or_default();
            let by = if b.blocked_by.is_empty() {
                String::new()
            } else {
                format!(
                    ", blocked by pid {}",
                    b.blocked_by.iter().map(i32::to_string).collect::<Vec<_>>().join(", ")
                )
            };
            view! { <li data-testid="detail-pg-waiter">{format!("{}{since}{by}", b.line(now))}</li> }
        })
        .collect_view();
    let cycle = (!lock.cycle.is_empty()).then(|| {
        let steps = lock
            .cycle
            .iter()
            .map(|s| view! { <li>{format!("pid {} waits on {}", s.pid, s.waits_on)}" "<code>{s.query.clone().unwrap_or_default()}</code></li> })
            .collect_view();
        view! {
            <p class="error" data-testid="detail-pg-cycle">"⟲ waits-for cycle (each backend waits for the next, the last for the first):"</p>
            <ol class="pg-cycle">{steps}</ol>
        }
    });
    let holder = lock.holder().cloned().unwrap_or_default();
    let also = holder
        .also_holds
        .iter()
        .map(|h| view! { <li>{h.clone()}</li> })
        .collect_view();
    view! {
        <section class="record foreign">
            <h3>"PostgreSQL advisory lock"</h3>
            <p data-testid="detail-foreign">
                "Held through "<code>"pg_advisory_lock"</code>" (or its variants) on key "<code>{lock.key.to_string()}</code>
                ", read from "<code>"pg_locks"</code>" joined with "<code>"pg_stat_activity"</code>": "
                <span data-testid="detail-pg-polled">{polled_text(lock.poll_ms)}</span>"."
            </p>
            {lock.truncated_at.map(|n| view! {
                <p class="warning" data-testid="detail-pg-truncated">{format!("more than {n} advisory locks: only the first {n} read are shown")}</p>
            })}
            {lock.stranded.clone().map(|why| view! {
                <p class="warning" data-testid="detail-pg-stranded">"possibly stranded: "{why}</p>
            })}
            {cycle}
            <dl>
                <dt>"mode"</dt><dd>{lock.mode.clone()}</dd>
                <dt>"level"</dt><dd data-testid="detail-pg-level">{level_text(&lock.level)}</dd>
                <dt>"fencing token"</dt><dd data-testid="detail-fence">{entry.fence}" (names the holder's pid and backend start)"</dd>
                <dt>"store revision"</dt><dd>{format!("{} (fleet at {})", entry.revision, d.store_revision)}</dd>
            </dl>
            <h4>"Holder backend"</h4>
            <ul data-testid="detail-pg-holders">{holders}</ul>
            <h4>"Waiting backends"</h4>
            <ol data-testid="detail-pg-waiters">{waiters}</ol>
            <h4>"Terminate backend"</h4>
            <p data-testid="detail-pg-terminate">{PG_TERMINATE}</p>
            <dl>
                <dt>"backend"</dt><dd>{format!("pid {}, started {}", holder.pid, absolute_and_relative(holder.backend_start_us / 1000, now))}</dd>
                <dt>"transaction"</dt><dd data-testid="detail-pg-xact">{xact_text(&holder, now)}</dd>
                <dt>"it also holds"</dt><dd><ul data-testid="detail-pg-also">{also}</ul></dd>
            </dl>
        </section>
    }
    .into_any()
}

/// The waiters of the page's advisory lock, each with a form (folded behind
/// a `<details>`) that cancels its wait, posted to `/actions/cancel` with the
/// pid and backend start shown. Only for viewers who may cancel on a fleet that
/// takes actions; nothing for other locks. It re-renders only when the waiters
/// change (an open form stays open through the polls).
#[component]
pub fn CancelWaiters(detail: Memo<LockDetail>) -> impl IntoView {
    let live = expect_context::<LiveView>();
    let viewer = expect_context::<Viewer>();
    let waiters = Memo::new(move |_| {
        detail.with(|d| {
            let lock = d.entry.as_ref().and_then(|e| match &e.body {
                LockBody::Foreign { detail: Some(f), .. } => pg(f),
                _ => None,
            })?;
            let list: Vec<(i32, i64, String)> = lock
                .waiters
                .iter()
                .map(|w| (w.pid, w.backend_start_us, w.application_name.clone()))
                .collect();
            (!list.is_empty()).then(|| (d.name.clone(), list))
        })
    });
    move || {
        let (name, list) = waiters.get()?;
        let may = viewer.may(Action::Cancel, &live.fleet.get_untracked(), Some(&name)) && live.writable();
        may.then(|| {
            let forms = list
                .into_iter()
                .map(|(pid, start, app)| {
                    let name = name.clone();
                    let app = if app.is_empty() { String::new() } else { format!(" ({app})") };
                    view! {
                        <details class="action" data-testid="pg-cancel">
                            <summary>{format!("Cancel the wait of pid {pid}{app}…")}</summary>
                            <AdminForm action="/actions/cancel" testid="pg-cancel-form">
                                <input type="hidden" name="name" value=name/>
                                <input type="hidden" name="pid" value=pid.to_string()/>
                                <input type="hidden" name="backend_start_us" value=start.to_string()/>
                                <p class="explain" data-testid="pg-cancel-explain">{PG_CANCEL}</p>
                                <label class="field">
                                    <span>"Reason (kept in the audit log)"</span>
                                    <input type="text" name="reason" required maxlength=MAX_REASON_BYTES autocomplete="off" data-testid="pg-cancel-reason"/>
                                </label>
                                <button type="submit" class="danger" data-testid="pg-cancel-submit">{format!("Cancel the wait of pid {pid}")}</button>
                            </AdminForm>
                        </details>
                    }
                })
                .collect_view();
            view! {
                <section class="pg-cancel">
                    <h3>"Cancel a waiter"</h3>
                    {forms}
                </section>
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_poll_interval_is_said_as_the_spec_set_it() {
        assert_eq!(polled_text(1000), "polled every 1 s");
        assert_eq!(polled_text(200), "polled every 0.2 s");
        assert_eq!(polled_text(2500), "polled every 2.5 s");
    }

    #[test]
    fn a_backend_and_its_transaction_age() {
        let b = PgBackend {
            pid: 7,
            backend_start_us: 1_000_000_000,
            application_name: "migrate".into(),
            usename: Some("app".into()),
            state: Some("idle".into()),
            state_change: Some(1_000_000),
            xact_start: Some(1_000_000),
            ..PgBackend::default()
        };
        let line = b.line(1_060_000);
        assert!(
            line.starts_with("pid 7 — migrate, app@local socket or hidden, idle for 1m 00s"),
            "{line}"
        );
        assert_eq!(xact_text(&b, 1_060_000), "in a transaction for 1m 00s");
    }
}
