//! The active replica's link to etcd broken while due locks are in its view
//! (issue 24: "two replicas with the active one paused, cut and stalled"; the
//! pause is in the parent module). The active replica reaches etcd through a
//! [`TcpProxy`], the other directly:
//!
//! - cut (every connection closed, new ones refused) or stalled (connections
//!   held open, nothing forwarded, no reset): the cut-off replica shows the
//!   store unreachable within 3 s (`lockscope_store_up` 0); the other takes
//!   the role within the lease's ttl plus 2 s and releases each due lock
//!   exactly once (one Delete per key, one `done` audit entry per lock across
//!   both logs, its own), and its history credits itself;
//! - the link restored: once the cut-off replica reads live again and its view
//!   shows the deletions, it has released nothing (deposed), credits nothing to
//!   itself in its history, and the role stays where it went.

use std::path::PathBuf;

use lockscope::remember::history::History;
use lockscope_model::history::HistoryQuery;
use lockscope_store::testing::TcpProxy;

use super::*;

/// How the link of the active replica breaks.
#[derive(Clone, Copy, Debug)]
enum Break {
    /// [`TcpProxy::cut`]: connections closed, new ones refused.
    Cut,
    /// [`TcpProxy::freeze`]: connections held open, nothing forwarded.
    Stall,
}

/// docs/operations.md: a store "behind a link that drops packets without a
/// reset" "is shown unreachable within 3 s, and `lockscope_store_up` is 0 as
/// long as it is".
const UNREACHABLE_WITHIN: Duration = Duration::from_secs(3);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_cut_off_from_etcd_is_replaced_and_releases_nothing_after() {
    let _serial = serial();
    link_broken(Break::Cut).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_link_to_etcd_stalls_is_replaced_and_releases_nothing_after() {
    let _serial = serial();
    link_broken(Break::Stall).await;
}

/// A gauge of a replica's `/metrics` for the fleet (`None`: no answer, or no such line).
async fn gauge(r: &Replica, name: &str) -> Option<f64> {
    let text = http_get(r.port, "/metrics").await?;
    let label = format!("fleet=\"{FLEET}\"");
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) && l.contains(&label))
        .find_map(|l| l.rsplit(' ').next()?.parse().ok())
}

/// Polls `cond` every 50 ms until it holds; panics with `what` after `limit`.
async fn until(what: &str, limit: Duration, ctx: &dyn Fn() -> String, mut cond: impl AsyncFnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !cond().await {
        assert!(start.elapsed() < limit, "{what}: not within {limit:?}{}", ctx());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    start.elapsed()
}

/// A replica's own history (the default: `.lockscope/lockscope-history.db` in its directory).
fn history_url(r: &Replica) -> String {
    let home: PathBuf = r.audit_path.parent().expect("a replica's directory").into();
    format!("sqlite:{}", home.join(".lockscope/lockscope-history.db").display())
}

/// The ends of `tag/…` locks in a replica's history, once it holds at least
/// `n` of them (at most `limit`).
async fn history_ends(
    r: &Replica,
    tag: &str,
    n: usize,
    limit: Duration,
    ctx: &dyn Fn() -> String,
) -> Vec<lockscope_model::history::HistoryEvent> {
    let history = History::open(&history_url(r), None)
        .await
        .expect("opening a replica's history");
    let q = HistoryQuery {
        fleet: FLEET.into(),
        lock: Some(format!("{tag}/*")),
        limit: Some(10_000),
        ..HistoryQuery::default()
    };
    let mut ends = Vec::new();
    until(
        &format!("{}'s history has the {n} ends of {tag}/…", r.name),
        limit,
        ctx,
        async || {
            ends = (history.query(&q).await.unwrap_or_default().into_iter())
                .filter(|e| e.kind.ends_hold())
                .collect();
            ends.len() >= n
        },
    )
    .await;
    ends
}

async fn link_broken(how: Break) {
    let t0 = Instant::now();
    let etcd = EtcdServer::start().await;
    let proxy = TcpProxy::start(etcd.addr()).await;
    let dir = scratch();
    let spec = spec(&etcd);
    let store = spec.connect().await.unwrap();
    let fleet = spec.open().unwrap();
    let roles = RoleLog::start(fleet.clone(), t0);
    let watch = KeyWatch::start(&etcd.endpoint()).await;
    // `a` through the proxy, alone at first: it takes the role; then `b`, direct.
    let a = Replica::start("a", dir.path(), &proxy.endpoint()).await;
    let ctx = || format!("{}{}", roles.describe(), tails(&[&a]));
    let first = wait_leader(fleet.as_ref(), &["a"], Duration::from_secs(20), &ctx).await;
    let b = Replica::start("b", dir.path(), &etcd.endpoint()).await;
    let ctx = || format!("\n(link {how:?}){}{}", roles.describe(), tails(&[&a, &b]));
    until("b's view is live", Duration::from_secs(10), &ctx, async || {
        gauge(&b, "lockscope_store_up").await == Some(1.0)
    })
    .await;
    assert_eq!(
        leader(fleet.as_ref()).await,
        Some(first.clone()),
        "a keeps the role{}",
        ctx()
    );
    eprintln!(
        "[{:>5.1?}] a (via the proxy) is the active unlocker (term {}); b up",
        t0.elapsed(),
        first.term
    );

    // Locks due (auto_unlock_at + grace) ~1.7 s from now, once the link is
    // broken: the link breaks when a's view holds them all.
    const N: usize = 200;
    let tag = match how {
        Break::Cut => "cut",
        Break::Stall => "stall",
    };
    let batch = write_batch(&store, tag, N, 700).await;
    until(
        &format!("a's view shows the {N} locks"),
        Duration::from_secs(5),
        &ctx,
        async || a.held_in_view().await == Some(N as u64),
    )
    .await;
    assert_eq!(
        a.done(tag).await.len(),
        0,
        "a released before the locks were due{}",
        ctx()
    );
    let broken = Instant::now();
    match how {
        Break::Cut => proxy.cut(),
        Break::Stall => proxy.freeze(),
    }
    eprintln!(
        "[{:>5.1?}] {how:?} a's link with {N} locks in its view, due in ~{:?}",
        t0.elapsed(),
        Duration::from_millis((batch.due - lockscope_store::now_ms()).max(0) as u64)
    );

    // The cut-off replica says so: its liveness probe fails.
    let down = until("a shows the store unreachable", UNREACHABLE_WITHIN, &ctx, async || {
        gauge(&a, "lockscope_store_up").await == Some(0.0)
    })
    .await;
    let elected = wait_leader(fleet.as_ref(), &["b"], Duration::from_secs(15), &ctx).await;
    let hand_over = broken.elapsed();
    let elected_at = t0.elapsed();
    eprintln!(
        "[{:>5.1?}] a unreachable after {down:?}; b elected (term {}) {hand_over:?} after the {how:?}",
        t0.elapsed(),
        elected.term
    );
    assert!(
        hand_over <= HAND_OVER_LIMIT,
        "hand-over from a leader whose link was {how:?} took {hand_over:?}, more than {HAND_OVER_LIMIT:?}{}",
        ctx()
    );
    assert!(elected.term > first.term, "terms increase: {first:?} then {elected:?}");
    // docs/operations.md: "a replica whose renewals have failed for a whole
    // `lease` stops calling itself active" (renewals every lease / 3; a second
    // more for the metrics' polling).
    until(
        "a stops calling itself active",
        Duration::from_secs(10),
        &ctx,
        async || gauge(&a, "lockscope_unlocker_active").await == Some(0.0),
    )
    .await;
    let stepped_down = broken.elapsed();
    eprintln!(
        "[{:>5.1?}] a says it is not active, {stepped_down:?} after the {how:?}",
        t0.elapsed()
    );
    assert!(
        stepped_down <= Duration::from_secs(LEASE_SECS + 1),
        "a called itself active for {stepped_down:?} after its link was {how:?} (lease {LEASE_SECS} s){}",
        ctx()
    );

    // b releases every one, exactly once, on its own record.
    let took = wait_deleted(&watch, &batch.names, Duration::from_secs(20), &ctx).await;
    let done = wait_audited(&[&a, &b], tag, N, Duration::from_secs(10), &ctx).await;
    watch.assert_exactly_once(&batch.names, &ctx);
    let by = assert_audited_once(&[&a, &b], &done, &batch.names, &ctx);
    assert_eq!(by, [("b".to_string(), N)], "all by the new leader b{}", ctx());
    let (early, late) = batch.lateness(&done);
    eprintln!(
        "[{:>5.1?}] b released all {N} ({took:?} after its election; past due: first {early:?}, last {late:?})",
        t0.elapsed()
    );
    let b_ends = history_ends(&b, tag, N, Duration::from_secs(15), &ctx).await;
    let foreign: Vec<_> = b_ends
        .iter()
        .filter(|e| e.actor.as_deref() != Some("unlocker@b"))
        .take(5)
        .collect();
    // docs/operations.md: "the unlocker (`auto_released`) only when the store
    // says that actor's compare-and-delete is the one that removed the acquisition".
    assert!(
        b_ends.len() == N && foreign.is_empty(),
        "b's history: {} ends, each b's own release expected; not credited to b: {foreign:#?}{}",
        b_ends.len(),
        ctx()
    );
    // a is still cut off: it has released nothing, and says the store is gone.
    assert_eq!(
        gauge(&a, "lockscope_store_up").await,
        Some(0.0),
        "a still cut off{}",
        ctx()
    );
    assert_eq!(a.done(tag).await.len(), 0, "a released while cut off{}", ctx());

    // The link back: a reads live again, its view shows the deletions and its
    // unlocker knows it is not the active one; only then, nothing more happened.
    let metrics_before = a.release_metrics().await;
    let at_restore = leader(fleet.as_ref()).await.expect("the role is held");
    assert_eq!(at_restore, elected, "b keeps the role while a is cut off{}", ctx());
    let restored_at = t0.elapsed();
    proxy.restore();
    let caught_up = until(
        "a is live again and its view empty",
        Duration::from_secs(15),
        &ctx,
        async || {
            gauge(&a, "lockscope_store_up").await == Some(1.0)
                && a.held_in_view().await == Some(0)
                && gauge(&a, "lockscope_unlocker_active").await == Some(0.0)
        },
    )
    .await;
    eprintln!(
        "[{:>5.1?}] restored a's link; a live again, its view empty, {caught_up:?} later",
        t0.elapsed()
    );
    let a_ends = history_ends(&a, tag, N, Duration::from_secs(15), &ctx).await;
    let credited: Vec<_> = a_ends
        .iter()
        .filter(|e| e.actor.as_deref() == Some("unlocker@a"))
        .take(5)
        .collect();
    // docs/operations.md: "a replica that was paused while another replica's
    // unlocker released a lock never records that release as its own"; cut
    // off, the same.
    assert!(
        credited.is_empty(),
        "a's history credits a with releases b made: {credited:#?}{}",
        ctx()
    );
    let a_done = a.releases(Outcome::Done).await;
    assert!(
        a_done.is_empty(),
        "a released after its link came back: {:?}{}",
        &a_done[..a_done.len().min(5)],
        ctx()
    );
    watch.assert_exactly_once(&batch.names, &ctx);
    let done_after = b.done(tag).await.len() + a.done(tag).await.len();
    assert_eq!(done_after, N, "one done entry per lock across both logs{}", ctx());
    let terms = roles.terms_since(restored_at);
    assert!(
        terms.iter().all(|t| *t == elected),
        "the role changed after a's link came back (it stays with b in term {}): {terms:?}{}",
        elected.term,
        ctx()
    );
    let terms = roles.terms_since(elected_at);
    assert!(
        terms.iter().all(|t| *t == elected),
        "b kept its term throughout: {terms:?}{}",
        ctx()
    );
    eprintln!(
        "[{:>5.1?}] a: 0 releases done, {} ends in its history, none its own; its release metrics {metrics_before:?} -> {:?}; {:?}",
        t0.elapsed(),
        a_ends.len(),
        a.release_metrics().await,
        failures(&a).await
    );
}

/// `lockscope_unlocker_failures_total` lines of a replica (for the log).
async fn failures(r: &Replica) -> Vec<String> {
    let text = http_get(r.port, "/metrics").await.unwrap_or_default();
    text.lines()
        .filter(|l| l.starts_with("lockscope_unlocker_failures_total{"))
        .map(str::to_string)
        .collect()
}
