//! The observer's half of the contract suite: what every store's observer must
//! report (the contract is written on [`crate::Observer`]). Each case takes a
//! [`StoreSpec`] for a fresh, empty store, writes through the client library or
//! the protocol's steps, and checks what the observer's events make of it in
//! the model's reducer ([`FleetState`]), as the hub would.

use std::time::Duration;

use lockscope_model::record::{BlacklistRecord, RECORD_VERSION};
use lockscope_model::view::RowState;
use lockscope_model::{FleetEvent, FleetState, Holder, LockBody, StoreStatus};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::contract::{opts, quiet};
use super::take;
use crate::client::{Session, SessionConfig};
use crate::protocol::LockStore;
use crate::spec::StoreSpec;
use crate::{now_ms, ObserverEvent};

/// How long a case waits for the observer to show something.
const PATIENCE: Duration = Duration::from_secs(20);

/// An observer feeding a reducer, as the hub runs it.
pub struct Watched {
    pub state: FleetState,
    rx: mpsc::Receiver<ObserverEvent>,
    pub live: bool,
}

impl Watched {
    pub fn start(spec: &StoreSpec) -> Watched {
        let (tx, rx) = mpsc::channel(64);
        tokio::spawn(spec.open().expect("an observable spec").observer().run(tx));
        Watched {
            state: FleetState::default(),
            rx,
            live: false,
        }
    }

    /// Applies events until `done` holds (and the store is live); returns the
    /// events applied. Panics, naming `what`, after [`PATIENCE`].
    pub async fn until(&mut self, what: &str, done: impl Fn(&FleetState) -> bool) -> Vec<FleetEvent> {
        let deadline = Instant::now() + PATIENCE;
        let mut applied = Vec::new();
        while !(self.live && done(&self.state)) {
            let msg = tokio::time::timeout_at(deadline, self.rx.recv())
                .await
                .unwrap_or_else(|_| panic!("the observer never showed: {what}"))
                .expect("observer running");
            match msg {
                ObserverEvent::Events(events) => {
                    for e in events {
                        applied.push(e.clone());
                        self.state.apply(e);
                    }
                }
                ObserverEvent::Status(s) => self.live = matches!(s, StoreStatus::Live { .. }),
                // Sent only to a hub that asked for it (resume_history).
                ObserverEvent::Missed { .. } => panic!("history replay sent unasked"),
                ObserverEvent::Looked(_) => {}
            }
        }
        applied
    }

    fn holder_of(&self, lock: &str) -> Option<Holder> {
        self.state.get(lock).map(|e| self.state.holder(e))
    }
}

fn blacklist_record(session: &str) -> BlacklistRecord {
    BlacklistRecord {
        v: RECORD_VERSION,
        session: session.into(),
        by: "contract".into(),
        reason: "testing".into(),
        at: now_ms(),
    }
}

/// The first report is one reset with the whole truth: locks, live sessions,
/// the blacklist; a lock whose session never registered is orphaned.
pub async fn observer_snapshot(spec: StoreSpec) {
    let store = spec.connect().await.expect("store");
    take(&store, "snap/unregistered").await;
    let session = Session::open(store.clone(), quiet("snap")).await.unwrap();
    let _guard = session.lock("snap/held", opts("snapshot")).await.unwrap();
    store.blacklist(&blacklist_record("banned")).await.unwrap();
    let mut w = Watched::start(&spec);
    let first = w.until("the snapshot", |s| s.len() == 2).await;
    match first.as_slice() {
        [FleetEvent::Reset(snap), ..] => {
            assert_eq!(snap.locks.len(), 2, "{snap:?}");
            let sessions = snap.sessions.as_ref().expect("lockscope stores keep sessions");
            assert!(sessions.iter().any(|s| s.id == session.id()), "{sessions:?}");
            assert!(snap.blacklist.iter().any(|b| b.session == "banned"));
        }
        other => panic!("first report is not a reset: {other:?}"),
    }
    assert_eq!(w.holder_of("snap/held"), Some(Holder::Alive));
    assert_eq!(w.holder_of("snap/unregistered"), Some(Holder::Gone));
    let e = w.state.get("snap/unregistered").unwrap();
    assert_eq!(w.state.state_of(e, now_ms()), RowState::Orphaned);
}

/// After the snapshot, changes arrive as per-lock events (never the table again):
/// an acquisition, a rewrite of its record, its release.
pub async fn observer_update(spec: StoreSpec) {
    let store = spec.connect().await.expect("store");
    let mut w = Watched::start(&spec);
    w.until("live", |_| true).await;
    let fence = take(&store, "upd/a").await;
    let events = w.until("the acquisition", |s| s.get("upd/a").is_some()).await;
    assert!(!events.iter().any(|e| matches!(e, FleetEvent::Reset(_))), "{events:?}");
    let mut rec = store.get("upd/a").await.unwrap().unwrap().record().unwrap().clone();
    rec.purpose = "rewritten".into();
    store.extend("upd/a", fence, &rec).await.unwrap();
    w.until("the rewritten record", |s| {
        s.get("upd/a")
            .and_then(|e| e.record())
            .is_some_and(|r| r.purpose == "rewritten")
    })
    .await;
    assert_eq!(
        w.state.get("upd/a").unwrap().fence,
        fence,
        "the token is the acquisition's"
    );
    assert!(store.release("upd/a", fence).await.unwrap());
    w.until("the release", |s| s.get("upd/a").is_none()).await;
}

/// A blocked `lock` call is shown as a waiter of its lock until it gets it.
pub async fn observer_waiter(spec: StoreSpec) {
    let store = spec.connect().await.expect("store");
    let a = Session::open(store.clone(), quiet("holder")).await.unwrap();
    let b = Session::open(store.clone(), quiet("waiter")).await.unwrap();
    let guard = a.lock("wait/x", opts("first")).await.unwrap();
    let mut w = Watched::start(&spec);
    let b_id = b.id().to_string();
    let blocked = tokio::spawn(async move {
        let g = b.lock("wait/x", opts("second")).await;
        (b, g)
    });
    w.until("the waiter", |s| s.waiters_of("wait/x").any(|id| id == b_id))
        .await;
    assert!(guard.unlock().await.unwrap());
    let (_b, got) = blocked.await.unwrap();
    let got = got.expect("the waiter gets the lock");
    w.until("the waiter holding the lock", |s| {
        s.waiters_of("wait/x").next().is_none()
            && s.get("wait/x")
                .and_then(|e| e.record())
                .is_some_and(|r| *r.session == *b_id)
    })
    .await;
    drop(got);
}

/// Sessions: registered, heartbeating (stamped with the receive time, so the
/// skew between two processes on one host is near zero), closed (gone at once),
/// and silent (gone within its ttl plus 5 s, its locks orphaned).
pub async fn observer_session(spec: StoreSpec) {
    let store = spec.connect().await.expect("store");
    let mut w = Watched::start(&spec);
    w.until("live", |_| true).await;
    let s = Session::open(store.clone(), quiet("sessions")).await.unwrap();
    let id = s.id().to_string();
    w.until("the new session", |st| st.sessions().sessions.contains_key(&id))
        .await;
    s.heartbeat_now().await;
    w.until("a heartbeat seen live", |st| {
        st.sessions().sessions.get(&id).is_some_and(|e| e.seen_at.is_some())
    })
    .await;
    let skew = w.state.sessions().sessions[&id]
        .skew_estimate()
        .expect("a live heartbeat");
    assert!(skew.abs() < 1_000, "one host, one clock: skew estimate {skew} ms");
    s.close().await.unwrap();
    w.until("the closed session gone", |st| {
        !st.sessions().sessions.contains_key(&id)
    })
    .await;

    // A worker that dies holding a lock: no close, no heartbeat.
    let ttl = Duration::from_secs(2);
    let cfg = SessionConfig {
        session_ttl: ttl,
        ..quiet("dies")
    };
    let dying = Session::open(store.clone(), cfg).await.unwrap();
    let dead_id = dying.id().to_string();
    dying.lock("sess/abandoned", opts("dies")).await.unwrap().abandon();
    w.until("the dying session's lock", |st| st.get("sess/abandoned").is_some())
        .await;
    let died = Instant::now();
    drop(dying);
    w.until("the silent session gone", |st| {
        !st.sessions().sessions.contains_key(&dead_id)
    })
    .await;
    assert!(
        died.elapsed() <= ttl + Duration::from_secs(5),
        "gone after {:?}",
        died.elapsed()
    );
    let e = w.state.get("sess/abandoned").unwrap();
    assert_eq!(w.state.state_of(e, now_ms()), RowState::Orphaned);
}

/// A blacklisted session's locks show as blacklisted; lifting it restores them.
pub async fn observer_blacklist(spec: StoreSpec) {
    let store = spec.connect().await.expect("store");
    let s = Session::open(store.clone(), quiet("banned")).await.unwrap();
    let _guard = s.lock("black/x", opts("held")).await.unwrap();
    let mut w = Watched::start(&spec);
    w.until("the lock", |st| st.get("black/x").is_some()).await;
    store.blacklist(&blacklist_record(s.id())).await.unwrap();
    w.until("the blacklist entry", |st| {
        st.get("black/x").is_some_and(|e| st.holder(e) == Holder::Blacklisted)
    })
    .await;
    let entry = &w.state.sessions().blacklist[s.id()];
    assert_eq!(entry.body.value().map(|b| b.reason.as_str()), Some("testing"));
    assert!(store.lift_blacklist(s.id()).await.unwrap());
    assert!(!store.lift_blacklist(s.id()).await.unwrap(), "lifted once");
    w.until("the blacklist lifted", |st| {
        !st.sessions().blacklist.contains_key(s.id())
    })
    .await;
}

/// A session that finds itself blacklisted stops heartbeating: its registration
/// runs out like a dead worker's (etcd: its lease is no longer kept alive).
pub async fn observer_blacklisted_session_goes(spec: StoreSpec) {
    let store = spec.connect().await.expect("store");
    let ttl = Duration::from_secs(2);
    let cfg = SessionConfig {
        session_ttl: ttl,
        heartbeat_every: Duration::from_millis(200),
        ..quiet("refused")
    };
    let s = Session::open(store.clone(), cfg).await.unwrap();
    let id = s.id().to_string();
    let mut w = Watched::start(&spec);
    w.until("the session", |st| st.sessions().sessions.contains_key(&id))
        .await;
    store.blacklist(&blacklist_record(&id)).await.unwrap();
    let blacklisted = Instant::now();
    w.until("the refused session gone", |st| {
        !st.sessions().sessions.contains_key(&id)
    })
    .await;
    assert!(
        blacklisted.elapsed() <= ttl + Duration::from_secs(5),
        "gone after {:?}",
        blacklisted.elapsed()
    );
    drop(s);
}

/// A value that is not a record is shown as malformed, with its bytes, never
/// dropped.
pub async fn observer_malformed(spec: StoreSpec) {
    let store = spec.connect().await.expect("store");
    let mut w = Watched::start(&spec);
    w.until("live", |_| true).await;
    store.put_raw("bad/value", b"{not a record").await.unwrap();
    w.until("the malformed value", |st| st.get("bad/value").is_some()).await;
    match &w.state.get("bad/value").unwrap().body {
        LockBody::Malformed { raw, error } => {
            assert_eq!(raw, b"{not a record");
            assert!(!error.is_empty());
        }
        other => panic!("not shown as malformed: {other:?}"),
    }
    let held = w.state.len();
    assert_eq!(held, 1, "a malformed value is still a held lock");
}
