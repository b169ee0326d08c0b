//! The audit page (`/audit`, for admins): every admin attempt matching a
//! filter, newest first — who, as what role, how, which action on what, with
//! which reason, and how it ended. Not live: the page says when it was read.
//! The filter is a plain GET form; the same filter exports as CSV or NDJSON
//! (`/api/v1/audit?…&format=`). At narrow widths each entry stacks into a card.

use leptos::prelude::*;
use lockscope_model::admin::{Action, AuditEntry, AuditQuery, Outcome, MAX_AUDIT_ROWS};
use lockscope_model::time::{absolute_and_relative, hms, rfc3339, Millis};
use lockscope_model::Screen;

use crate::links::{audit_export_href, datetime_local, lock_href};
use crate::live::LiveView;
use crate::viewer::outcome_word;

const OUTCOMES: [Outcome; 3] = [Outcome::Done, Outcome::Changed, Outcome::Refused];

/// "N entries, newest first, as read at HH:MM:SS UTC — reload for newer".
pub fn count_text(n: usize, q: &AuditQuery, read_at: Millis) -> String {
    let entries = if n == 1 {
        "1 entry".to_string()
    } else {
        format!("{n} entries")
    };
    let capped = if q.limit.is_some_and(|l| n as u64 >= l as u64) || n as u64 >= MAX_AUDIT_ROWS as u64 {
        " (the limit: older ones are not shown)"
    } else {
        ""
    };
    format!(
        "{entries}{capped}, newest first, as read at {} — reload for newer",
        hms(read_at)
    )
}

#[component]
pub fn AuditPage() -> impl IntoView {
    let live = expect_context::<LiveView>();
    let (entries, query, error) = live.screen.with_untracked(|s| match s {
        Screen::Audit { entries, query, error } => (entries.clone(), query.clone(), error.clone()),
        _ => Default::default(),
    });
    // Not live: times are relative to when the page was read.
    let read_at = live.now.get_untracked();
    let count = count_text(entries.len(), &query, read_at);
    let rows = entries.into_iter().map(|e| row(e, read_at)).collect_view();
    view! {
        <h2>"Audit log"</h2>
        <Filter query=query.clone()/>
        {error.map(|e| view! {
            <p class="error" data-testid="audit-error" role="alert">
                <span class="icon" aria-hidden="true">"⚠ "</span>"This filter was not usable: "{e}
            </p>
        })}
        <p class="hint">
            <span data-testid="audit-count">{count}</span>
            " · export "
            <a href=audit_export_href(&query, "csv") data-testid="audit-export-csv" download>"CSV"</a>
            " "
            <a href=audit_export_href(&query, "ndjson") data-testid="audit-export-ndjson" download>"NDJSON"</a>
        </p>
        <div class="wide">
            <table class="audit" data-testid="audit-table">
                <thead>
                    <tr>
                        <th>"time"</th>
                        <th>"actor"</th>
                        <th>"role"</th>
                        <th>"via"</th>
                        <th>"action"</th>
                        <th>"fleet"</th>
                        <th>"target"</th>
                        <th>"fence"</th>
                        <th>"reason"</th>
                        <th>"outcome"</th>
                        <th>"detail"</th>
                    </tr>
                </thead>
                <tbody>{rows}</tbody>
            </table>
        </div>
    }
}

/// One entry; each cell names its column for the stacked narrow layout.
fn row(e: AuditEntry, read_at: Millis) -> impl IntoView {
    let (word, icon) = outcome_word(e.outcome);
    let action = e.action.map_or("unknown", Action::as_str);
    let target = if e.action == Some(Action::Release) && !e.target.is_empty() {
        view! { <a href=lock_href(&e.fleet, &e.target) class="lock-link">{e.target.clone()}</a> }.into_any()
    } else {
        view! { <code>{e.target.clone()}</code> }.into_any()
    };
    view! {
        <tr data-testid="audit-row" data-id=e.id data-outcome=word data-action=action class=word>
            <td data-label="time" class="time"><time datetime=rfc3339(e.at)>{absolute_and_relative(e.at, read_at)}</time></td>
            <td data-label="actor">{e.actor}</td>
            <td data-label="role">{e.role.map_or("none", |r| r.as_str())}</td>
            <td data-label="via">{e.via}</td>
            <td data-label="action">{action}</td>
            <td data-label="fleet">{e.fleet}</td>
            <td data-label="target" class="target">{target}</td>
            <td data-label="fence">{e.fence.map(|f| f.to_string()).unwrap_or_default()}</td>
            <td data-label="reason" class="reason">{e.reason}</td>
            <td data-label="outcome" class="outcome" data-testid="audit-outcome">
                <span class="icon" aria-hidden="true">{icon}</span>{word}
            </td>
            <td data-label="detail" class="detail">{e.detail}</td>
        </tr>
    }
}

/// The filter: a GET form back to `/audit`, filled in from `query`.
#[component]
fn Filter(query: AuditQuery) -> impl IntoView {
    let live = expect_context::<LiveView>();
    let mut fleets: Vec<String> = live
        .overview
        .with_untracked(|o| o.iter().map(|f| f.name.clone()).collect());
    // A fleet no longer configured still shows as chosen.
    if let Some(f) = query.fleet.as_ref().filter(|f| !fleets.contains(f)) {
        fleets.push(f.clone());
    }
    let fleet_options = fleets
        .into_iter()
        .map(|f| {
            let selected = query.fleet.as_deref() == Some(f.as_str());
            view! { <option value=f.clone() selected=selected>{f.clone()}</option> }
        })
        .collect_view();
    let action_options = Action::ALL
        .into_iter()
        .map(|a| view! { <option value=a.as_str() selected=query.action == Some(a)>{a.as_str()}</option> })
        .collect_view();
    let outcome_options = OUTCOMES
        .into_iter()
        .map(|o| view! { <option value=o.as_str() selected=query.outcome == Some(o)>{o.as_str()}</option> })
        .collect_view();
    let time = |ms: Option<Millis>| ms.map(datetime_local).unwrap_or_default();
    view! {
        <form class="controls audit-filter" method="get" action="/audit" data-testid="audit-filter">
            <label>
                "fleet "
                <select name="fleet" data-testid="audit-fleet">
                    <option value="" selected=query.fleet.is_none()>"any"</option>
                    {fleet_options}
                </select>
            </label>
            <label>
                "actor "
                <input name="actor" size="12" value=query.actor.clone().unwrap_or_default() data-testid="audit-actor"/>
            </label>
            <label>
                "action "
                <select name="action" data-testid="audit-action">
                    <option value="" selected=query.action.is_none()>"any"</option>
                    {action_options}
                </select>
            </label>
            <label>
                "outcome "
                <select name="outcome" data-testid="audit-outcome-filter">
                    <option value="" selected=query.outcome.is_none()>"any"</option>
                    {outcome_options}
                </select>
            </label>
            <label>
                "from (UTC) "
                <input type="datetime-local" name="from" value=time(query.from) data-testid="audit-from"/>
            </label>
            <label>
                "to (UTC) "
                <input type="datetime-local" name="to" value=time(query.to) data-testid="audit-to"/>
            </label>
            <label>
                "limit "
                <input type="number" name="limit" min="1" max=MAX_AUDIT_ROWS
                    value=query.limit.map(|l| l.to_string()).unwrap_or_default() data-testid="audit-limit"/>
            </label>
            <button type="submit" data-testid="audit-apply">"apply"</button>
            <a class="reset" href="/audit">"clear"</a>
        </form>
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_count_says_when_it_was_read_and_whether_it_is_capped() {
        let q = AuditQuery {
            limit: Some(2),
            ..AuditQuery::default()
        };
        assert_eq!(
            count_text(1, &q, 1_700_000_000_000),
            "1 entry, newest first, as read at 22:13:20 UTC — reload for newer"
        );
        assert!(count_text(2, &q, 0).starts_with("2 entries (the limit: older ones are not shown)"));
    }
}
