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
//! recorded uncredited. An answer that arrives before the delete is kept (as
//! long) and matched when the delete comes. Nothing is held forever, and no
//! held delete is lost: the hub calls [`Credits::expire`] every turn.

use std::collections::HashMap;
use std::time::Duration;

use lockscope_model::history::{Draft, ReleaseNote};
use lockscope_model::time::Millis;
use lockscope_store::fleet::Removed;
use tokio::time::Instant;

/// How long an announcement waits for the store's answer, a held delete for
/// that answer, and an answer for its delete.
pub(super) const CLAIM_TTL: Duration = Duration::from_secs(30);

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
                _ => p.claims.retain(|c| !old(c.at)),
            }
            keys.push(key.clone());
        }
        keys.into_iter().filter_map(|k| self.resolve(k)).collect()
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
