//! Who a release is credited to in the history. An operator's force-release
//! and the unlocker announce their release of an acquisition (lock, fence)
//! before the store acts ([`Credits::announce`]) and confirm it with the
//! store's answer after ([`Credits::confirm`]). The delete the observer then
//! reports is credited to an announcer only when the store said that
//! announcer's compare-and-delete removed that acquisition (at the delete's
//! revision, where both are known); any other delete of it (its holder's own
//! release, another replica's unlocker) is recorded as it would be without an
//! announcement: released by its holder, or expired with its session.
//!
//! A delete that arrives while an announcement awaits the store's answer is
//! held back until the answer comes, for at most [`CLAIM_TTL`]: then it is
//! recorded uncredited. An answer that the acquisition was removed, arriving
//! before the delete, is kept until the delete comes however late (an
//! observer reconnecting to a flapping store reports it only in its next
//! snapshot), or until a snapshot without the acquisition is applied (its end
//! was never seen: nothing left to credit); at most [`MAX_CONFIRMED`] are kept
//! per fleet, the oldest forgotten first. Nothing is held forever, and no held
//! delete is lost: the hub calls [`Credits::expire`] every turn.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use lockscope_model::history::{Draft, ReleaseNote};
use lockscope_model::time::Millis;
use lockscope_store::fleet::Removed;
use tokio::time::Instant;

/// How long an announcement waits for the store's answer, a held delete for
/// that answer, and an answer for its delete.
pub(super) const CLAIM_TTL: Duration = Duration::from_secs(30);

/// Confirmed removals (the store said this announcer's delete removed the
/// acquisition) kept per fleet while their delete has not been seen; past it
/// the oldest are forgotten (their delete, if it still comes, is recorded
/// uncredited).
pub(super) const MAX_CONFIRMED: usize = 10_000;

/// One announced release.
struct Claim {
    id: u64,
    note: ReleaseNote,
    /// `None`: the store has not answered yet; `Some(None)`: it removed
    /// nothing (or failed: unknown, so never credited); `Some(Some(r))`: this
    /// announcer's compare-and-delete removed the acquisition.
    answer: Option<Option<Removed>>,
    at: Instant,
}

/// The delete of an announced acquisition, seen before every answer came.
struct Held {
    /// When the hub saw it (what the history records).
    seen_at: Millis,
    /// Its revision, where the event gives the delete's own (`FleetEvent::Remove`).
    revision: Option<i64>,
    /// Its end event, uncredited.
    draft: Draft,
    at: Instant,
}

#[derive(Default)]
struct Pending {
    claims: Vec<Claim>,
    held: Option<Held>,
}

/// The announced releases of one fleet, by (lock, fence).
#[derive(Default)]
pub(super) struct Credits {
    pending: HashMap<(String, i64), Pending>,
}

/// An end event to record now, seen at the given time.
pub(super) type Ready = (Millis, Draft);

impl Credits {
    /// No release announced or held (a snapshot then needs no set of its locks).
    pub(super) fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// Release `id` of acquisition (`lock`, `fence`) by `note.actor` is about
    /// to be attempted.
    pub(super) fn announce(&mut self, id: u64, lock: String, fence: i64, note: ReleaseNote) {
        self.pending.entry((lock, fence)).or_default().claims.push(Claim {
            id,
            note,
            answer: None,
            at: Instant::now(),
        });
    }

    /// The store answered release `id`: what it removed (`None`: nothing, or
    /// unknown). A held delete it decides is returned, to be recorded.
    pub(super) fn confirm(&mut self, id: u64, lock: String, fence: i64, removed: Option<Removed>) -> Option<Ready> {
        let key = (lock, fence);
        let pending = self.pending.get_mut(&key)?;
        let claim = pending.claims.iter_mut().find(|c| c.id == id)?;
        claim.answer = Some(removed);
        claim.at = Instant::now();
        self.resolve(key)
    }

    /// The end of acquisition (`lock`, `fence`) as the store's change shows it
    /// (`revision`: the delete's own, when the event carries it), seen at
    /// `seen_at`: returned credited or not when that is known, else held.
    pub(super) fn on_end(&mut self, seen_at: Millis, revision: Option<i64>, draft: Draft) -> Option<Ready> {
        let (Some(lock), Some(fence)) = (draft.lock.clone(), draft.fence) else {
            return Some((seen_at, draft));
        };
        let key = (lock, fence);
        let Some(pending) = self.pending.get_mut(&key) else {
            return Some((seen_at, draft));
        };
        if pending.held.is_some() {
            // An acquisition ends once: a second end (a snapshot repeating it) is the first's.
            return None;
        }
        pending.held = Some(Held {
            seen_at,
            revision,
            draft,
            at: Instant::now(),
        });
        self.resolve(key)
    }

    /// Forgets announcements and answers older than [`CLAIM_TTL`], and returns
    /// the deletes held that long, uncredited.
    pub(super) fn expire(&mut self) -> Vec<Ready> {
        let now = Instant::now();
        let old = |at: Instant| now.duration_since(at) >= CLAIM_TTL;
        let mut keys = Vec::new();
        for (key, p) in self.pending.iter_mut() {
            match &p.held {
                // Waited long enough for its answers: whoever has not answered
                // is not credited.
                Some(h) if old(h.at) => p.claims.retain(|c| c.answer.is_some()),
                // A confirmed removal waits for its delete, however late.
                _ => p.claims.retain(|c| confirmed(c) || !old(c.at)),
            }
            keys.push(key.clone());
        }
        self.bound_confirmed();
        keys.into_iter().filter_map(|k| self.resolve(k)).collect()
    }

    /// A snapshot holding exactly `held` (lock, fence) was applied (after its
    /// ends went through [`Credits::on_end`]): a confirmed removal of an
    /// acquisition it lacks will see no delete any more.
    pub(super) fn after_snapshot(&mut self, held: &HashSet<(&str, i64)>) {
        self.pending.retain(|(lock, fence), p| {
            p.claims
                .retain(|c| !confirmed(c) || held.contains(&(lock.as_str(), *fence)));
            p.held.is_some() || !p.claims.is_empty()
        });
    }

    /// Keeps at most [`MAX_CONFIRMED`] confirmed removals, forgetting the oldest.
    fn bound_confirmed(&mut self) {
        let mut all: Vec<(Instant, (String, i64), u64)> = Vec::new();
        for (key, p) in &self.pending {
            if p.held.is_none() {
                all.extend(
                    p.claims
                        .iter()
                        .filter(|c| confirmed(c))
                        .map(|c| (c.at, key.clone(), c.id)),
                );
            }
        }
        if all.len() <= MAX_CONFIRMED {
            return;
        }
        all.sort_by_key(|(at, _, _)| *at);
        for (_, key, id) in all.drain(..all.len() - MAX_CONFIRMED) {
            if let Some(p) = self.pending.get_mut(&key) {
                p.claims.retain(|c| c.id != id);
                if p.claims.is_empty() {
                    self.pending.remove(&key);
                }
            }
        }
    }

    /// Decides (`key`)'s held delete once it can be decided, and drops what
    /// is settled.
    fn resolve(&mut self, key: (String, i64)) -> Option<Ready> {
        let pending = self.pending.get_mut(&key)?;
        let Some(held) = &pending.held else {
            // Nothing seen yet: an answer that removed nothing is settled.
            pending.claims.retain(|c| c.answer != Some(None));
            if pending.claims.is_empty() {
                self.pending.remove(&key);
            }
            return None;
        };
        let credited = pending.claims.iter().find(|c| match c.answer {
            Some(Some(removed)) => same_delete(removed.revision, held.revision),
            _ => false,
        });
        let waiting = pending.claims.iter().any(|c| c.answer.is_none());
        let note = match (credited, waiting) {
            (Some(c), _) => Some(c.note.clone()),
            (None, true) => return None,
            (None, false) => None,
        };
        let held = self.pending.remove(&key)?.held?;
        let mut draft = held.draft;
        if let Some(n) = &note {
            n.credit(&mut draft);
        }
        Some((held.seen_at, draft))
    }
}

/// The store said this announcer's delete removed the acquisition.
fn confirmed(c: &Claim) -> bool {
    matches!(c.answer, Some(Some(_)))
}

/// Whether the store's answer and the observed delete are one delete: the
/// same revision where both are known. (Unknown on one side, the store's word
/// that this acquisition was removed by this call suffices: an acquisition is
/// removed once.)
fn same_delete(answered: Option<i64>, seen: Option<i64>) -> bool {
    match (answered, seen) {
        (Some(a), Some(s)) => a == s,
        _ => true,
    }
}

#[cfg(test)]
mod tests;
