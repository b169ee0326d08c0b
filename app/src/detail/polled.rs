//! A lock page's line on how its fleet is read when it is polled or
//! rescanned (PostgreSQL advisory locks, Redis, Redlock): "rescanned every
//! 30 s, last at T", and, once the last read is older than 3× the interval,
//! that the page is not live (from the fleet's summary, kept live with the
//! overview).

use leptos::prelude::*;

use crate::live::LiveView;

/// The line, for a fleet read in full again and again; nothing for others.
#[component]
pub fn PolledLine() -> impl IntoView {
    let live = expect_context::<LiveView>();
    let polled = move || {
        let fleet = live.fleet.get();
        live.overview
            .with(|fleets| fleets.iter().find(|f| f.name == fleet).and_then(|f| f.polled))
    };
    move || {
        polled().map(|p| {
            let now = live.now.get();
            view! {
                <p class="polled" class:error=p.is_stale(now) data-testid="detail-polled" data-stale=p.is_stale(now).to_string()>
                    {p.text(now)}
                </p>
            }
        })
    }
}
