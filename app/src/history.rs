//! The incident-review page (`/history`): the lock history of one fleet
//! matching a filter, oldest first — a plain GET form (times typed as instants
//! or relative to now: `-15m`, `now-1h`), quick picks for the last 15 minutes,
//! hour or day, the events as a table, exports of the same query (CSV, NDJSON),
//! one lock's timeline when the filter names it ([`crate::timeline`]), and the
//! table at an instant ([`crate::travel`]). Not live: the page is a query
//! result and says when it was read. Tables scroll sideways on narrow screens.

use leptos::prelude::*;
use lockscope_model::history::{HistoryEvent, Kind, DEFAULT_HISTORY_ROWS, MAX_HISTORY_ROWS};
use lockscope_model::review::{Review, ReviewForm};
use lockscope_model::time::{absolute_and_relative, datetime, rfc3339, Millis};
use lockscope_model::Screen;

use crate::links::{history_export_href, history_href, resolved_pairs};
use crate::live::LiveView;
use crate::rows::short;
use crate::timeline::Timeline;
use crate::travel::TimeTravel;

/// "N events, oldest first" and whether the limit cut them.
pub fn count_text(n: usize, limit: Option<u32>) -> String {
    let events = if n == 1 {
        "1 event".to_string()
    } else {
        format!("{n} events")
    };
    let limit = limit.unwrap_or(DEFAULT_HISTORY_ROWS) as usize;
    let capped = if n >= limit {
        " (the limit: later ones are not shown — narrow the range, raise the limit or export)"
    } else {
        ""
    };
    format!("{events}, oldest first{capped}")
}

/// A kind as people read it.
pub fn kind_word(k: Kind) -> String {
    k.as_str().replace('_', " ")
}

#[component]
pub fn HistoryPage() -> impl IntoView {
    let live = expect_context::<LiveView>();
    let review = live.screen.with_untracked(|s| match s {
        Screen::History { review } => (**review).clone(),
        _ => Review::default(),
    });
    let fleet = review.query.fleet.clone();
    let (from, to) = review.range();
    let read_at = review.read_at;
    let count = count_text(review.events.len(), review.query.limit);
    let timeline = review.exact_lock().map(str::to_string).zip(review.timeline.clone());
    let truncated = review
        .timeline
        .as_ref()
        .is_some_and(|t| t.len() >= MAX_HISTORY_ROWS as usize);
    let pairs = resolved_pairs(&review);
    let rows = review
        .events
        .iter()
        .cloned()
        .map(|e| row(e, read_at, &fleet, &pairs))
        .collect_view();
    view! {
        <h2>"Lock history"</h2>
        <p class="hint not-live" data-testid="history-read-at">
            "Not live: a query of the recorded history, read at "
            <time datetime=rfc3339(read_at)>{datetime(read_at)}</time>
            ". Reload for newer events."
        </p>
        <Filter form=review.form.clone() fleet=fleet.clone()/>
        {review.error.clone().map(|e| view! {
            <p class="error" data-testid="history-error" role="alert">
                <span class="icon" aria-hidden="true">"⚠ "</span>{e}
            </p>
        })}
        {review.lost.map(|l| view! {
            <p class="error" data-testid="history-lost" role="status">
                <span class="icon" aria-hidden="true">"⚠ "</span>{l.text()}
            </p>
        })}
        {review.not_recording.map(|n| view! {
            <p class="error" data-testid="history-not-recording" role="alert">
                <span class="icon" aria-hidden="true">"⚠ "</span>{n.text(read_at)}
            </p>
        })}
        {(!review.gaps.is_empty()).then(|| view! {
            <div class="error" data-testid="history-gaps" role="note">
                <span class="icon" aria-hidden="true">"⚠ "</span>
                "The history is incomplete in this range:"
                <ul>
                    {review.gaps.iter().map(|g| view! { <li data-testid="history-gap">{g.text()}</li> }).collect_view()}
                </ul>
            </div>
        })}
        <p class="hint">
            "From "<time datetime=rfc3339(from) data-testid="history-from">{datetime(from)}</time>
            " to "<time datetime=rfc3339(to) data-testid="history-to">{datetime(to)}</time>": "
            <span data-testid="history-count">{count}</span>
            " · export "
            <a href=history_export_href(&review, "csv") data-testid="history-export-csv" download>"CSV"</a>
            " "
            <a href=history_export_href(&review, "ndjson") data-testid="history-export-ndjson" download>"NDJSON"</a>
        </p>
        {timeline.map(|(lock, events)| view! {
            <section class="timeline" data-testid="timeline-section">
                <h3>"Timeline of " <code>{lock.clone()}</code></h3>
                {truncated.then(|| view! { <p class="hint">"Only the first events of the range are drawn: narrow it."</p> })}
                <Timeline lock events from to gaps=review.gaps.clone()/>
            </section>
        })}
        <TimeTravel review=review.clone()/>
        <h3>"Events"</h3>
        <div class="wide" tabindex="0" role="region" aria-label="events (scrolls sideways)">
            <table class="history" data-testid="history-table">
                <thead>
                    <tr>
                        <th>"time"</th>
                        <th>"kind"</th>
                        <th>"lock"</th>
                        <th>"session"</th>
                        <th>"fence"</th>
                        <th>"service"</th>
                        <th>"host"</th>
                        <th>"actor"</th>
                        <th>"detail"</th>
                    </tr>
                </thead>
                <tbody>{rows}</tbody>
            </table>
        </div>
        {review.events.is_empty().then(|| view! {
            <p class="empty" data-testid="history-empty">"No events match this filter in this range."</p>
        })}
    }
}

/// One event; the lock and session link to the same range filtered on them.
fn row(e: HistoryEvent, read_at: Millis, fleet: &str, pairs: &[(&'static str, String)]) -> impl IntoView {
    let only = |key: &'static str, value: &str| {
        let mut p: Vec<(&str, String)> = pairs
            .iter()
            .filter(|(k, _)| matches!(*k, "from" | "to" | "limit"))
            .cloned()
            .collect();
        p.push((key, value.to_string()));
        history_href(fleet, &p)
    };
    let lock = e.lock.clone().map(|l| {
        let href = only("lock", &l);
        view! { <a href=href class="lock-link">{l}</a> }
    });
    let session = e.session.clone().map(|s| {
        let href = only("session", &s);
        view! { <a href=href title=s.clone()>{short(&s)}</a> }
    });
    let kind = e.kind.as_str();
    view! {
        <tr data-testid="history-row" data-kind=kind data-id=e.id.clone() class=kind>
            <td class="time"><time datetime=rfc3339(e.at)>{absolute_and_relative(e.at, read_at)}</time></td>
            <td class="kind" data-testid="history-kind">{kind_word(e.kind)}</td>
            <td class="lock">{lock}</td>
            <td class="session">{session}</td>
            <td class="fence">{e.fence.map(|f| f.to_string()).unwrap_or_default()}</td>
            <td>{e.service.unwrap_or_default()}</td>
            <td>{e.host.unwrap_or_default()}</td>
            <td>{e.actor.unwrap_or_default()}</td>
            <td class="detail">{e.detail}</td>
        </tr>
    }
}

/// The filter: a GET form back to `/history`, filled in with what was typed.
#[component]
fn Filter(form: ReviewForm, fleet: String) -> impl IntoView {
    let live = expect_context::<LiveView>();
    let mut fleets: Vec<String> = live
        .overview
        .with_untracked(|o| o.iter().map(|f| f.name.clone()).collect());
    if !fleets.contains(&fleet) {
        fleets.push(fleet.clone());
    }
    let fleet_options = fleets
        .into_iter()
        .map(|f| view! { <option value=f.clone() selected=f == fleet>{f.clone()}</option> })
        .collect_view();
    // A list of kinds (`a,b`) or an unknown one stays as typed.
    let typed = (!form.kind.is_empty() && Kind::parse(&form.kind).is_none()).then(|| form.kind.clone());
    let kind_options = Kind::ALL
        .into_iter()
        .map(|k| view! { <option value=k.as_str() selected=form.kind == k.as_str()>{kind_word(k)}</option> })
        .collect_view();
    // Quick picks keep the filters and drop the range's end and the instant.
    let pick = |from: &str| {
        let mut p: Vec<(&str, String)> = vec![("from", from.to_string())];
        for (k, v) in form.query_pairs() {
            if !matches!(k, "from" | "to") {
                p.push((k, v.to_string()));
            }
        }
        history_href(&fleet, &p)
    };
    let text = |label: &'static str, name: &'static str, value: &str, placeholder: &'static str| {
        view! {
            <label>
                {label}
                <input name=name size="12" value=value.to_string() placeholder=placeholder data-testid=format!("history-{name}")/>
            </label>
        }
    };
    view! {
        <form class="controls history-filter" method="get" action="/history" data-testid="history-filter">
            <label>
                "fleet "
                <select name="fleet" data-testid="history-fleet">{fleet_options}</select>
            </label>
            {text("from ", "from", &form.from, "-1h")}
            {text("to ", "to", &form.to, "now")}
            <span class="picks">
                "last "
                <a href=pick("-15m") data-testid="pick-15m">"15 min"</a>" · "
                <a href=pick("-1h") data-testid="pick-1h">"1 h"</a>" · "
                <a href=pick("-24h") data-testid="pick-24h">"24 h"</a>
            </span>
            {text("lock ", "lock", &form.lock, "name or prefix*")}
            {text("session ", "session", &form.session, "")}
            {text("service ", "service", &form.service, "")}
            {text("actor ", "actor", &form.actor, "")}
            <label>
                "kind "
                <select name="kind" data-testid="history-kind-filter">
                    <option value="" selected=form.kind.is_empty()>"any"</option>
                    {typed.map(|t| view! { <option value=t.clone() selected>{t.clone()}</option> })}
                    {kind_options}
                </select>
            </label>
            <label>
                "limit "
                <input type="number" name="limit" min="1" max=MAX_HISTORY_ROWS value=form.limit.clone()
                    placeholder=DEFAULT_HISTORY_ROWS.to_string() data-testid="history-limit"/>
            </label>
            {text("table at ", "at", &form.at, "e.g. -10m")}
            <button type="submit" data-testid="history-apply">"apply"</button>
            <a class="reset" href=history_href(&fleet, &[])>"clear"</a>
            <span class="hint">"Times in UTC: 2026-11-23T02:17, RFC 3339, or relative: -15m, now-2h, -1d."</span>
        </form>
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_count_says_when_the_limit_cut_it() {
        assert_eq!(count_text(1, None), "1 event, oldest first");
        assert!(count_text(500, None).contains("the limit"));
        assert!(!count_text(499, None).contains("the limit"));
        assert!(count_text(2, Some(2)).contains("the limit"));
    }
}
