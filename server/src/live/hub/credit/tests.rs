//! Which delete is credited to which announced release, in every order the
//! store's answer and the observer's delete can arrive in.

use lockscope_model::history::{Draft, Kind, ReleaseNote};
use lockscope_store::fleet::Removed;

use super::{Credits, CLAIM_TTL};

fn note(actor: &str) -> ReleaseNote {
    ReleaseNote {
        kind: Kind::ForceReleased,
        actor: actor.into(),
        reason: format!("{actor}'s reason"),
    }
}

/// The uncredited end of (`lock`, `fence`), as the hub derives it.
fn end(lock: &str, fence: i64) -> Draft {
    Draft {
        kind: Some(Kind::Released),
        lock: Some(lock.into()),
        fence: Some(fence),
        ..Draft::default()
    }
}

fn removed(revision: Option<i64>) -> Option<Removed> {
    Some(Removed { revision })
}

fn who(ready: &Option<(i64, Draft)>) -> Option<(Kind, Option<String>)> {
    ready.as_ref().map(|(_, d)| (d.kind.unwrap(), d.actor.clone()))
}

#[test]
fn a_delete_before_the_answer_waits_for_it_and_is_credited_when_it_matches() {
    let mut c = Credits::default();
    c.announce(1, "a".into(), 5, note("alice"));
    assert_eq!(who(&c.on_end(100, Some(9), end("a", 5))), None, "held for the answer");
    let ready = c.confirm(1, "a".into(), 5, removed(Some(9)));
    assert_eq!(who(&ready), Some((Kind::ForceReleased, Some("alice".into()))));
    assert_eq!(ready.unwrap().0, 100, "recorded at the time the delete was seen");
    assert!(c.pending.is_empty());
}

/// Issue 24, defect 1: the holder released its own lock while the operator's
/// release was in flight; the operator's compare-and-delete found it gone.
#[test]
fn a_delete_someone_else_made_is_never_credited_to_the_announcer() {
    let mut c = Credits::default();
    c.announce(1, "a".into(), 5, note("alice"));
    assert!(c.on_end(100, Some(9), end("a", 5)).is_none());
    let ready = c.confirm(1, "a".into(), 5, None);
    assert_eq!(
        who(&ready),
        Some((Kind::Released, None)),
        "the holder's release, uncredited"
    );
}

#[test]
fn an_answer_before_the_delete_is_kept_and_matched_by_revision() {
    let mut c = Credits::default();
    c.announce(1, "a".into(), 5, note("alice"));
    assert!(c.confirm(1, "a".into(), 5, removed(Some(9))).is_none());
    let ready = c.on_end(100, Some(9), end("a", 5));
    assert_eq!(who(&ready), Some((Kind::ForceReleased, Some("alice".into()))));

    // Another revision than the one the store answered: not that delete.
    c.announce(2, "b".into(), 5, note("alice"));
    assert!(c.confirm(2, "b".into(), 5, removed(Some(9))).is_none());
    assert_eq!(who(&c.on_end(100, Some(12), end("b", 5))), Some((Kind::Released, None)));

    // A delete whose own revision the event does not carry (a snapshot, a
    // row taken again before it was read): the store's word suffices.
    c.announce(3, "c".into(), 5, note("alice"));
    assert!(c.confirm(3, "c".into(), 5, removed(Some(9))).is_none());
    assert_eq!(
        who(&c.on_end(100, None, end("c", 5))),
        Some((Kind::ForceReleased, Some("alice".into())))
    );
}

#[test]
fn two_announcers_of_one_acquisition_the_one_the_store_names_is_credited() {
    let mut c = Credits::default();
    c.announce(1, "a".into(), 5, note("alice"));
    c.announce(2, "a".into(), 5, note("bob"));
    assert!(c.on_end(100, Some(9), end("a", 5)).is_none());
    assert!(c.confirm(1, "a".into(), 5, None).is_none(), "bob has not answered");
    let ready = c.confirm(2, "a".into(), 5, removed(Some(9)));
    assert_eq!(who(&ready), Some((Kind::ForceReleased, Some("bob".into()))));
}

#[test]
fn unannounced_deletes_and_other_acquisitions_pass_at_once() {
    let mut c = Credits::default();
    c.announce(1, "a".into(), 5, note("alice"));
    assert_eq!(who(&c.on_end(100, Some(9), end("a", 4))), Some((Kind::Released, None)));
    assert_eq!(who(&c.on_end(100, Some(9), end("b", 5))), Some((Kind::Released, None)));
    // An answer of nothing removed settles the announcement.
    assert!(c.confirm(1, "a".into(), 5, None).is_none());
    assert!(c.pending.is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_held_delete_is_recorded_uncredited_when_no_answer_comes() {
    let mut c = Credits::default();
    c.announce(1, "a".into(), 5, note("alice"));
    assert!(c.on_end(100, Some(9), end("a", 5)).is_none());
    tokio::time::advance(CLAIM_TTL / 2).await;
    assert!(c.expire().is_empty(), "still waiting");
    tokio::time::advance(CLAIM_TTL / 2).await;
    let ready = c.expire();
    assert_eq!(ready.len(), 1, "recorded, not lost");
    assert_eq!(ready[0].1.actor, None);
    assert_eq!(ready[0].0, 100);
    assert!(c.pending.is_empty());
    // A late answer finds nothing to credit.
    assert!(c.confirm(1, "a".into(), 5, removed(Some(9))).is_none());

    // An answer whose delete never comes is forgotten once a snapshot
    // without the acquisition is applied.
    c.announce(2, "b".into(), 5, note("alice"));
    assert!(c.confirm(2, "b".into(), 5, removed(Some(9))).is_none());
    c.after_snapshot(&[("b", 6)].into_iter().collect());
    assert!(c.pending.is_empty());
}

/// Review item 5: "keep a confirmed removal until its end is seen … bound it
/// by count, not by time". An observer reconnecting to a flapping store
/// reports the delete only in its next snapshot, long after the answer.
#[tokio::test(start_paused = true)]
async fn a_confirmed_removal_keeps_its_credit_until_its_delete_comes_however_late() {
    let mut c = Credits::default();
    c.announce(1, "a".into(), 5, note("alice"));
    assert!(c.confirm(1, "a".into(), 5, removed(Some(9))).is_none());
    tokio::time::advance(CLAIM_TTL + std::time::Duration::from_secs(1)).await;
    assert!(c.expire().is_empty());
    // A snapshot still holding it keeps it; the one without it ends it (its
    // end goes through on_end first, as the hub does).
    c.after_snapshot(&[("a", 5)].into_iter().collect());
    let ready = c.on_end(200, None, end("a", 5));
    assert_eq!(who(&ready), Some((Kind::ForceReleased, Some("alice".into()))));
    assert!(c.pending.is_empty());
}

/// docs/operations.md: "at most 10,000 confirmed releases are kept per fleet
/// while their delete is not seen, the oldest forgotten first".
#[tokio::test(start_paused = true)]
async fn confirmed_removals_are_bounded_by_count_oldest_forgotten() {
    let mut c = Credits::default();
    for i in 0..=super::MAX_CONFIRMED as i64 {
        c.announce(i as u64, "a".into(), i, note("alice"));
        c.confirm(i as u64, "a".into(), i, removed(None));
        tokio::time::advance(std::time::Duration::from_millis(1)).await;
    }
    assert!(c.expire().is_empty());
    assert_eq!(c.pending.len(), super::MAX_CONFIRMED);
    assert_eq!(
        who(&c.on_end(1, None, end("a", 0))),
        Some((Kind::Released, None)),
        "the oldest is forgotten"
    );
    let newest = super::MAX_CONFIRMED as i64;
    assert_eq!(
        who(&c.on_end(1, None, end("a", newest))),
        Some((Kind::ForceReleased, Some("alice".into())))
    );
}
