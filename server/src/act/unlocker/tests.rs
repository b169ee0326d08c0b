//! The release decision against this server's clock, with tokio's paused time
//! standing in for the passing of time.

use std::time::Duration;

use lockscope_model::record::LockRecord;
use lockscope_model::unlock::{verdict, Verdict};
use lockscope_model::{Holder, LockBody, LockEntry, RowState};

use super::ServerClock;

const GRACE: i64 = 15_000;
/// The unlocker's wall clock at the start of each test.
const T0: i64 = 1_795_400_000_000;

/// A lock taken at `acquired` (on its holder's clock, which reads `skew` ms
/// ahead of ours), expected to run 10 s, auto-unlocking 30 s after it was taken.
fn lock(acquired: i64, skew: i64) -> LockEntry {
    let at = acquired + skew;
    let mut r: LockRecord = serde_json::from_value(serde_json::json!({
        "v": 1, "owner": "o", "session": "s", "service": "svc", "host": "h", "pid": 1,
        "purpose": "p", "backtrace": [], "acquired_at": at, "expected_runtime_ms": 10_000,
        "alert_at": at + 10_000, "auto_unlock_at": at + 30_000, "heartbeat_at": at
    }))
    .unwrap();
    r.heartbeat_at = at;
    LockEntry {
        name: "l".into(),
        fence: 7,
        revision: 1,
        body: LockBody::Held(r),
    }
}

async fn after(ms: u64) {
    tokio::time::advance(Duration::from_millis(ms)).await;
}

#[tokio::test(start_paused = true)]
async fn healthy_then_overdue_then_expired_then_released_a_grace_later() {
    let clock = ServerClock::starting_at(T0);
    let l = lock(T0, 0);
    assert_eq!(verdict(&l, clock.now(), GRACE), Verdict::Keep, "healthy");
    after(10_000).await;
    assert_eq!(verdict(&l, clock.now(), GRACE), Verdict::Overdue, "past alert_at");
    after(20_000).await;
    let release_at = T0 + 30_000 + GRACE;
    assert_eq!(verdict(&l, clock.now(), GRACE), Verdict::Expired { release_at });
    after(GRACE as u64 - 1).await;
    assert_eq!(
        verdict(&l, clock.now(), GRACE),
        Verdict::Expired { release_at },
        "1 ms short"
    );
    after(1).await;
    assert_eq!(
        verdict(&l, clock.now(), GRACE),
        Verdict::Release { release_at },
        "expired by the grace, to the ms"
    );
}

#[tokio::test(start_paused = true)]
async fn a_holder_whose_clock_runs_behind_by_less_than_the_grace_is_never_cut_short() {
    let clock = ServerClock::starting_at(T0);
    // The holder's clock is 10 s behind ours: its auto_unlock_at reads 10 s
    // early to us. Truly (on our clock) it runs out at T0 + 30 s.
    let l = lock(T0, -10_000);
    after(30_000).await;
    assert!(matches!(verdict(&l, clock.now(), GRACE), Verdict::Expired { .. }));
    // Not released before its true auto-unlock time plus what is left of the grace.
    after((GRACE - 10_000) as u64 - 1).await;
    assert!(matches!(verdict(&l, clock.now(), GRACE), Verdict::Expired { .. }));
    after(1).await;
    assert!(matches!(verdict(&l, clock.now(), GRACE), Verdict::Release { .. }));
    // One that runs ahead is released late, never early.
    let ahead = lock(T0 + 30_000 + GRACE - 10_000, 60_000);
    assert_eq!(verdict(&ahead, clock.now(), GRACE), Verdict::Keep);
}

#[tokio::test(start_paused = true)]
async fn blacklisted_and_orphaned_holders_run_to_their_own_auto_unlock() {
    let clock = ServerClock::starting_at(T0);
    let l = lock(T0, 0);
    after(1_000).await;
    for holder in [Holder::Blacklisted, Holder::Gone] {
        // The table says so at once…
        let state = RowState::of(&l, holder, clock.now());
        assert!(matches!(state, RowState::Blacklisted | RowState::Orphaned), "{state:?}");
        // …and the unlocker still waits for auto_unlock_at plus grace.
        assert_eq!(verdict(&l, clock.now(), GRACE), Verdict::Keep, "{holder:?}");
    }
    after(29_000 + GRACE as u64 - 1).await;
    assert!(matches!(verdict(&l, clock.now(), GRACE), Verdict::Expired { .. }));
    after(1).await;
    assert!(matches!(verdict(&l, clock.now(), GRACE), Verdict::Release { .. }));
}

#[tokio::test(start_paused = true)]
async fn the_server_clock_follows_monotonic_time_not_the_wall() {
    let clock = ServerClock::starting_at(T0);
    after(1_234).await;
    assert_eq!(clock.now(), T0 + 1_234);
}

/// docs/operations.md, "The unlocker": "The unlocker never acts on a fleet of
/// another library's locks … whatever mode was configured: its mode is `off`
/// and the overview's unlocker column says "never acts here" with the
/// family's reason". Configured `on`, the unlocker of a Redis fleet publishes mode
/// `off` with the family's reason, which the overview shows as "never acts
/// here" (nothing listens on port 1: the store is never asked).
#[tokio::test]
async fn a_foreign_fleet_says_the_unlocker_never_acts_there() {
    use std::sync::Arc;

    use lockscope_model::unlock::Mode;
    use lockscope_store::spec::StoreSpec;

    use super::{run, Deps, UnlockerConfig};
    use crate::live::hub::HubHandle;
    use crate::metrics::Metrics;
    use crate::remember::audit::AuditLog;

    let dir = tempfile::tempdir().unwrap();
    let audit = AuditLog::open(&format!("sqlite:{}", dir.path().join("audit.db").display()))
        .await
        .unwrap();
    let store = StoreSpec::parse("redis://127.0.0.1:1").unwrap().open().unwrap();
    let hub = HubHandle::spawn("r", "redis", store.clone());
    let (_stop, stop) = tokio::sync::watch::channel(false);
    let cfg = UnlockerConfig {
        mode: Mode::On,
        replica: "test".into(),
        grace: Duration::from_secs(1),
        lease: Duration::from_secs(3),
    };
    let metrics = Arc::new(Metrics::new());
    let deps = Deps {
        audit,
        metrics: metrics.clone(),
    };
    tokio::spawn(run(hub.clone(), store, cfg, deps, stop));
    let t0 = std::time::Instant::now();
    let status = loop {
        if let Some(u) = hub.summary().unlocker {
            break u;
        }
        assert!(t0.elapsed() < Duration::from_secs(5), "no unlocker status");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert_eq!(status.mode, Mode::Off, "{status:?}");
    assert_eq!(
        status.never_acts(),
        Some("the unlocker never acts on Redis locks: they end with their TTL"),
        "{status:?}"
    );
    assert!(!status.leading);
    // docs/operations.md, Metrics: `lockscope_unlocker_mode` is "`off` for a fleet it
    // never acts on, a read-only store or another library's locks, whatever was asked".
    let text = metrics.encode().unwrap();
    for (mode, v) in [("off", 1), ("dry-run", 0), ("on", 0)] {
        let line = format!("lockscope_unlocker_mode{{fleet=\"r\",mode=\"{mode}\"}} {v}\n");
        assert!(text.contains(&line), "{line} in\n{text}");
    }
}
