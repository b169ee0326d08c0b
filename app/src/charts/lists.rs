//! The history's distributions as lists of labelled bars, in HTML: the
//! hold-time distribution and the most contended locks and services.
//!
//! Not chartistry: its axes only take numbers or timestamps, with ticks it
//! picks and thins to fit (its tick generator trait is private), so the eight
//! hold-time buckets' labels ("1 min – 10 min") cannot all stand under their
//! bars — least of all at 390 px — and ranked names with links are a list, not
//! a series. Each row here has its label, its count as text and a bar whose
//! width only repeats the count.

use leptos::prelude::*;
use lockscope_model::charts::{hold_bucket_label, Charts, Contended};

use crate::links::drill_href;

/// A bar's width, in % of the largest.
fn width(n: u64, max: u64) -> String {
    let pct = if max == 0 { 0.0 } else { n as f64 * 100.0 / max as f64 };
    format!("width: {pct:.1}%")
}

/// Holds that ended in the window, per hold-time bucket.
#[component]
pub fn HoldTimes(data: RwSignal<Charts>) -> impl IntoView {
    let rows = move || {
        data.with(|c| {
            let holds = c.seen.as_ref().map(|s| s.holds.clone()).unwrap_or_default();
            let max = holds.iter().copied().max().unwrap_or(0);
            holds
                .into_iter()
                .enumerate()
                .map(|(i, n)| {
                    view! {
                        <li data-testid="hold-bucket">
                            <span class="label">{hold_bucket_label(i)}</span>
                            <span class="track"><span class="bar" style=width(n, max)></span></span>
                            <span class="count">{n}</span>
                        </li>
                    }
                })
                .collect_view()
        })
    };
    view! { <ol class="bars holds" data-testid="hold-times" aria-label="holds ended, by hold time">{rows}</ol> }
        .into_any()
}

/// A ranked list of locks or services (`key`: `lock` or `service`) by waits started.
#[component]
pub fn Ranked(data: RwSignal<Charts>, key: &'static str) -> impl IntoView {
    let rows = move || {
        data.with(|c| {
            let Some(seen) = &c.seen else { return Vec::new() };
            let list: &[Contended] = if key == "lock" {
                &seen.top_locks
            } else {
                &seen.top_services
            };
            let max = list.first().map_or(0, |t| t.waits);
            list.iter()
                .map(|t| {
                    let href = drill_href(c, key, &t.name);
                    let waits = if t.waits == 1 {
                        "1 wait".to_string()
                    } else {
                        format!("{} waits", t.waits)
                    };
                    view! {
                        <li data-testid=format!("top-{key}") data-name=t.name.clone()>
                            <a class="label" href=href>{t.name.clone()}</a>
                            <span class="track"><span class="bar" style=width(t.waits, max)></span></span>
                            <span class="count">{waits}</span>
                        </li>
                    }
                })
                .collect::<Vec<_>>()
        })
    };
    let empty = move || {
        data.with(|c| {
            c.seen.as_ref().is_some_and(|s| {
                if key == "lock" {
                    s.top_locks.is_empty()
                } else {
                    s.top_services.is_empty()
                }
            })
        })
    };
    view! {
        <ol class="bars ranked" data-testid=format!("top-{key}s")>{rows}</ol>
        <Show when=empty>
            <p class="empty">"No session waited in this window."</p>
        </Show>
    }
    .into_any()
}
