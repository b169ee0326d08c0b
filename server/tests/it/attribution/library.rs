//! The release racing its holder, through the library on every SQL and etcd
//! store: the hub's announcement, the holder's own release seen by the hub,
//! then the operator's compare-and-delete finding nothing.

use std::time::Duration;

use lockscope::live::hub::HubHandle;
use lockscope::remember::history::History;
use lockscope_model::history::{HistoryEvent, HistoryQuery, Kind, ReleaseNote};
use lockscope_model::StoreStatus;
use lockscope_store::client::{LockOptions, Session, SessionConfig};
use lockscope_store::fleet::{owner_of, Fenced, Release};
use lockscope_store::protocol::LockStore;
use lockscope_store::spec::StoreSpec;
use lockscope_store::testing::{take, EtcdServer, PgServer};

const FLEET: &str = "it";

async fn ends(history: &History, lock: &str) -> Vec<HistoryEvent> {
    let all = history
        .query(&HistoryQuery {
            fleet: FLEET.into(),
            limit: Some(10_000),
            ..HistoryQuery::default()
        })
        .await
        .unwrap();
    all.into_iter()
        .filter(|e| e.kind.ends_hold() && e.lock.as_deref() == Some(lock))
        .collect()
}

/// `lock`'s one end event, once the history has it (10 s at most).
async fn end_of(history: &History, lock: &str) -> HistoryEvent {
    for _ in 0..200 {
        let mut e = ends(history, lock).await;
        if !e.is_empty() {
            assert_eq!(e.len(), 1, "one end of {lock}: {e:#?}");
            return e.remove(0);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("no end of {lock} in the history within 10 s");
}

/// Waits until the hub shows `lock` at `fence` (`Some`) or free (`None`).
async fn hub_shows(hub: &HubHandle, lock: &str, fence: Option<i64>) {
    let mut rx = hub.watch_lock(lock).await.unwrap();
    let seen = |d: &Option<lockscope_model::detail::LockDetail>| {
        d.as_ref().map(|d| d.entry.as_ref().map(|e| e.fence)) == Some(fence)
    };
    let wait = rx.wait_for(seen);
    tokio::time::timeout(Duration::from_secs(10), wait)
        .await
        .unwrap_or_else(|_| panic!("the hub never showed {lock} at {fence:?}"))
        .unwrap();
}

fn note(reason: &str) -> ReleaseNote {
    ReleaseNote {
        kind: Kind::ForceReleased,
        actor: "alice".into(),
        reason: reason.into(),
    }
}

/// `revisions`: the store answers a delete's revision (all but ScyllaDB).
async fn check(spec: StoreSpec, history_url: &str, label: &str, revisions: bool) {
    let history = History::open(history_url, None).await.unwrap();
    let recorder = Some((history.recorder(FLEET), "replica-1".to_string()));
    let hub = HubHandle::spawn_recording(FLEET, label, spec.open().unwrap(), recorder);
    for _ in 0..200 {
        if matches!(hub.summary().status, StoreStatus::Live { .. }) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let fleet = hub.store().unwrap().clone();
    let direct = spec.connect().await.unwrap();
    let session = Session::open(spec.connect().await.unwrap(), SessionConfig::new("attribution-it"))
        .await
        .unwrap();
    let opts = || LockOptions::new("attribution test", Duration::from_secs(60));

    // 1. The holder releases its own lock while the operator's release is in flight.
    let raced = session.lock("raced", opts()).await.unwrap();
    let fence = raced.fence();
    let owner = owner_of(&direct.get("raced").await.unwrap().unwrap()).map(str::to_string);
    hub_shows(&hub, "raced", Some(fence)).await;
    let release = async {
        assert!(raced.unlock().await.unwrap(), "{label}: the holder's own release");
        // The hub sees the holder's delete before the operator's compare-and-delete runs.
        hub_shows(&hub, "raced", None).await;
        fleet.release_seen("raced", fence, owner.as_deref()).await
    };
    let answer = hub
        .release_as("raced", fence, note("stuck deploy"), release, Release::removed)
        .await
        .unwrap();
    assert_eq!(
        answer,
        Release::NotHeld,
        "{label}: the operator's release found it free"
    );
    let end = end_of(&history, "raced").await;
    assert!(
        end.kind == Kind::Released && end.actor.is_none() && end.fence == Some(fence),
        "{label}: docs/operations.md: \"otherwise the delete is recorded as it would be without \
         one: `released` by its holder, or `expired`\" — never force_released by the operator \
         whose release deleted nothing: {end:#?}"
    );

    // 2. The operator's release that deletes is credited to them, with their reason.
    let forced = session.lock("forced", opts()).await.unwrap();
    let fence = forced.fence();
    let owner = owner_of(&direct.get("forced").await.unwrap().unwrap()).map(str::to_string);
    hub_shows(&hub, "forced", Some(fence)).await;
    let release = fleet.release_seen("forced", fence, owner.as_deref());
    let answer = hub
        .release_as("forced", fence, note("wedged job"), release, Release::removed)
        .await
        .unwrap();
    let Release::Released(removed) = answer else {
        panic!("{label}: the operator's release of a held lock: {answer:?}")
    };
    let end = end_of(&history, "forced").await;
    if revisions {
        assert!(
            removed.revision.is_some() && end.revision == removed.revision,
            "{label}: the store's answer names the delete the history recorded: {removed:?} vs {end:#?}"
        );
    }
    assert_eq!(
        (end.kind, end.actor.as_deref(), end.detail.as_str(), end.fence),
        (Kind::ForceReleased, Some("alice"), "wedged job", Some(fence)),
        "{label}: docs/operations.md: \"credited to an operator (`force_released`) … only when \
         the store says that actor's compare-and-delete is the one that removed the acquisition\""
    );
    drop(forced);

    // 3. The unlocker's fenced release, likewise (a lock without heartbeats,
    // so its revision stays the one seen).
    let leader = fleet.campaign("attribution-it", Duration::from_secs(10)).await.unwrap();
    let fence = take(&direct, "due").await;
    let seen = direct.get("due").await.unwrap().unwrap().revision;
    hub_shows(&hub, "due", Some(fence)).await;
    let note = ReleaseNote {
        kind: Kind::AutoReleased,
        actor: "unlocker@attribution-it".into(),
        reason: "past its auto_unlock_at".into(),
    };
    let release = leader.release("due", fence, seen);
    let answer = hub
        .release_as("due", fence, note, release, Fenced::removed)
        .await
        .unwrap();
    let Fenced::Done(Release::Released(removed)) = answer else {
        panic!("{label}: the unlocker's release of a held lock: {answer:?}")
    };
    let end = end_of(&history, "due").await;
    assert_eq!(
        (end.kind, end.actor.as_deref()),
        (Kind::AutoReleased, Some("unlocker@attribution-it")),
        "{label}: the unlocker's release, credited"
    );
    if revisions {
        assert!(
            removed.revision.is_some() && end.revision == removed.revision,
            "{label}: at the revision the store answered: {removed:?} vs {end:#?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd() {
    let etcd = EtcdServer::start().await;
    let spec = StoreSpec::Etcd {
        endpoints: vec![etcd.endpoint()],
        prefix: Some("/attribution-it/".into()),
    };
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("history.db").display());
    check(spec, &url, "etcd", true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let spec = StoreSpec::Sql {
        url: format!("sqlite://{}?mode=rwc", dir.path().join("locks.db").display()),
    };
    let url = format!("sqlite:{}", dir.path().join("history.db").display());
    check(spec, &url, "sqlite", true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres() {
    let pg = PgServer::start().await;
    check(StoreSpec::Sql { url: pg.url() }, &pg.url(), "postgres", true).await;
}

/// A lightweight transaction returns no revision: the store's word that this
/// call deleted the acquisition is what credits it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scylla_memory() {
    let spec = StoreSpec::parse(&format!("scylla-memory:attribution-{}", std::process::id())).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("history.db").display());
    check(spec, &url, "scylla", false).await;
}
