//! What the page says while a fleet's store is not live: a fleet whose state is
//! unknown never reads as healthy. The overview's worst cell says "unknown —
//! unreachable since HH:MM:SS UTC" (or "unknown — connecting"), its counts are
//! marked as the last known; the banner says in one line what was tried and
//! what went wrong, when the next attempt is, and keeps the driver's whole
//! chain of errors behind a disclosure.

use leptos::prelude::*;
use lockscope_model::time::{hms, human_duration, Millis};
use lockscope_model::view::RowState;
use lockscope_model::{Counts, StoreStatus};

use crate::live::LiveView;

/// The overview's worst cell: its `data-state`, words and title.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Worst {
    pub state: &'static str,
    pub text: String,
    pub title: String,
}

/// The worst cell of a fleet with this store `status` and these `counts`: a
/// live store's worst lock; any other store's state is unknown.
pub fn worst(status: &StoreStatus, counts: &Counts) -> Worst {
    let unknown = |text: String, title: &str| Worst {
        state: "unknown",
        text,
        title: title.into(),
    };
    match status {
        // Writes blocked, the store is still read: its counts are the truth.
        StoreStatus::Live { .. } | StoreStatus::WritesBlocked { .. } => {
            let w = counts.worst();
            Worst {
                state: w.as_str(),
                text: match w {
                    RowState::Healthy => "all healthy".into(),
                    w => format!("{} {}", counts.of(w), w.as_str()),
                },
                title: w.reason().into(),
            }
        }
        StoreStatus::Connecting { .. } => unknown(
            "unknown — connecting".into(),
            "the store has not answered since this server started: nothing is known yet",
        ),
        StoreStatus::Unreachable { since, .. } => unknown(
            format!("unknown — unreachable since {}", hms(*since)),
            "the store is unreachable: the counts are the last known, from before it went away",
        ),
    }
}

/// The title of a count that is not the truth now (`None`: it is).
pub fn last_known_title(status: &StoreStatus) -> Option<&'static str> {
    match status {
        StoreStatus::Live { .. } | StoreStatus::WritesBlocked { .. } => None,
        StoreStatus::Connecting { .. } => Some("not known yet: the store has not answered"),
        StoreStatus::Unreachable { .. } => Some("last known: the store is unreachable"),
    }
}

/// "retrying in 4s", "retrying now".
pub fn retry_text(retry_at: Millis, now: Millis) -> String {
    match retry_at - now {
        ..=0 => "retrying now".into(),
        ms => format!("retrying in {}", human_duration(ms)),
    }
}

/// The banner above the page while the shown fleet's store is unreachable:
/// the one line, the next attempt (following the clock), and the detail
/// behind a disclosure.
#[component]
pub fn StoreBanner() -> impl IntoView {
    let live = expect_context::<LiveView>();
    move || match live.status.get() {
        StoreStatus::Unreachable {
            error,
            detail,
            retry_at,
            ..
        } => Some(
            view! {
                <div class="store-banner" data-testid="store-banner" role="alert">
                    <p>
                        <strong>"Store unreachable: "</strong>
                        <span data-testid="store-error">{error}</span>
                        "; "
                        <span data-testid="store-retry">{move || retry_text(retry_at, live.now.get())}</span>
                        "; the page shows the last known state."
                    </p>
                    {(!detail.is_empty()).then(|| view! {
                        <details data-testid="store-error-detail">
                            <summary>"details"</summary>
                            <pre>{detail}</pre>
                        </details>
                    })}
                </div>
            }
            .into_any(),
        ),
        StoreStatus::WritesBlocked { since, error } => Some(
            view! {
                <div class="store-banner" data-testid="store-banner" data-state="writes-blocked" role="alert">
                    <p>
                        <strong>{format!("Writes blocked since {}: ", hms(since))}</strong>
                        <span data-testid="store-error">{error}</span>
                        "; the page shows the live state."
                    </p>
                </div>
            }
            .into_any(),
        ),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn down() -> StoreStatus {
        StoreStatus::Unreachable {
            since: 3_723_000,
            error: "cannot connect to 127.0.0.1:2379: connection refused".into(),
            detail: String::new(),
            retry_at: 3_728_000,
        }
    }

    #[test]
    fn an_unknown_fleet_never_reads_healthy() {
        // Nothing counted, which a live store would call "all healthy".
        let none = Counts::default();
        assert_eq!(worst(&StoreStatus::Live { since: 0 }, &none).text, "all healthy");
        let w = worst(&down(), &none);
        assert_eq!(
            (w.state, w.text.as_str()),
            ("unknown", "unknown — unreachable since 01:02:03 UTC")
        );
        let w = worst(&StoreStatus::Connecting { since: 0 }, &none);
        assert_eq!((w.state, w.text.as_str()), ("unknown", "unknown — connecting"));
        // Nor does one with something wrong in its last known counts.
        let expired = Counts {
            held: 2,
            expired: 1,
            ..Counts::default()
        };
        assert_eq!(worst(&StoreStatus::Live { since: 0 }, &expired).text, "1 expired");
        assert_eq!(worst(&down(), &expired).state, "unknown");
        assert!(last_known_title(&down()).is_some() && last_known_title(&StoreStatus::Live { since: 0 }).is_none());
    }

    /// docs/operations.md ("A busy store"): while writes are blocked "the
    /// counts stay the live truth".
    #[test]
    fn a_store_whose_writes_are_blocked_still_reads_live() {
        let blocked = StoreStatus::WritesBlocked {
            since: 3_723_000,
            error: "writes blocked".into(),
        };
        let expired = Counts {
            held: 2,
            expired: 1,
            ..Counts::default()
        };
        assert_eq!(worst(&blocked, &expired).text, "1 expired");
        assert_eq!(worst(&blocked, &Counts::default()).text, "all healthy");
        assert!(last_known_title(&blocked).is_none());
        assert!(blocked.is_live());
    }

    #[test]
    fn the_retry_follows_the_clock() {
        assert_eq!(retry_text(3_728_000, 3_723_000), "retrying in 5s");
        assert_eq!(retry_text(3_728_000, 3_729_000), "retrying now");
    }
}
