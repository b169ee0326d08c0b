//! The overview's unlocker cell: the fleet's unlocker mode, which replica holds
//! the role, and what is due next (in dry-run: what it would release, and when).

use leptos::prelude::*;
use lockscope_model::time::{absolute_and_relative, Millis};
use lockscope_model::unlock::{Mode, UnlockerStatus};

/// The cell's text, in words (the mode is also its `data-mode`: `never` for a
/// fleet the unlocker never acts on).
pub fn unlocker_text(u: Option<&UnlockerStatus>, now: Millis) -> String {
    let Some(u) = u else {
        return "not running on this server".into();
    };
    if let Some(why) = u.never_acts() {
        return format!("never acts here: {why}");
    }
    let mut text = match u.mode {
        Mode::Off => "off: reports, releases nothing".to_string(),
        Mode::DryRun => "dry-run: releases nothing".to_string(),
        Mode::On if u.leading => format!(
            "on · active here ({}, term {}) · released {}",
            u.replica,
            u.term.unwrap_or_default(),
            u.released
        ),
        Mode::On => match (&u.active, u.term) {
            (Some(a), Some(t)) => format!("on · standby; active: {a} (term {t})"),
            _ => "on · no replica holds the role yet".to_string(),
        },
    };
    if let Some(next) = u.pending.first() {
        let verb = if u.mode == Mode::DryRun {
            "would release"
        } else {
            "next"
        };
        text.push_str(&format!(
            " · {verb} {} (fence {}) at {}",
            next.name,
            next.fence,
            absolute_and_relative(next.release_at, now)
        ));
        if u.pending.len() > 1 {
            text.push_str(&format!(" and {} more", u.pending.len() - 1));
        }
    }
    if let Some(p) = &u.problem {
        text.push_str(&format!(" · ⚠ {p}"));
    }
    text
}

/// The overview's cell for one fleet's unlocker.
#[component]
pub fn UnlockerCell(unlocker: Option<UnlockerStatus>, now: Signal<Millis>) -> impl IntoView {
    let mode = unlocker.as_ref().map_or("none", |u| match u.never_acts() {
        Some(_) => "never",
        None => u.mode.as_str(),
    });
    let leading = unlocker.as_ref().is_some_and(|u| u.leading);
    let grace = unlocker
        .as_ref()
        .map(|u| format!("grace {} ms past auto_unlock_at", u.grace_ms));
    view! {
        <td class="unlocker" data-testid="fleet-unlocker" data-mode=mode data-leading=leading.to_string() title=grace>
            {move || unlocker_text(unlocker.as_ref(), now.get())}
        </td>
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lockscope_model::unlock::Pending;

    #[test]
    fn says_who_is_active_and_what_is_due() {
        let mut u = UnlockerStatus {
            mode: Mode::On,
            replica: "a:3000".into(),
            active: Some("b:3000".into()),
            term: Some(4),
            ..UnlockerStatus::default()
        };
        assert_eq!(unlocker_text(Some(&u), 0), "on · standby; active: b:3000 (term 4)");
        u.leading = true;
        u.released = 2;
        assert!(unlocker_text(Some(&u), 0).starts_with("on · active here (a:3000, term 4) · released 2"));
        u.mode = Mode::DryRun;
        u.pending = vec![Pending {
            name: "x".into(),
            fence: 3,
            release_at: 5_000,
        }];
        assert!(unlocker_text(Some(&u), 0).contains("would release x (fence 3) at 1970-01-01 00:00:05 UTC (in 5s)"));
    }

    #[test]
    fn says_plainly_when_the_unlocker_never_acts_on_the_fleet() {
        // issue 27: "The unlocker never acts on a foreign fleet (say so in the overview)."
        let u = UnlockerStatus {
            mode: Mode::Off,
            problem: Some("the unlocker never acts on Redis locks: they end with their TTL".into()),
            ..UnlockerStatus::default()
        };
        assert_eq!(
            unlocker_text(Some(&u), 0),
            "never acts here: the unlocker never acts on Redis locks: they end with their TTL"
        );
        let off = UnlockerStatus::default();
        assert_eq!(unlocker_text(Some(&off), 0), "off: reports, releases nothing");
    }
}
