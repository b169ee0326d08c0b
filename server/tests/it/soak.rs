//! The embedded default stays workable: its demo fleet (whose workers die
//! holding locks, stall and hang) on SQLite with its unlocker on. Sampled every
//! second: no lock stays past its `auto_unlock_at` plus grace plus 3 s, locks
//! keep being taken, and the fleet does not fill up with dead workers' locks.
//!
//! CI runs a 30-second smoke with the clock sped up (locks auto-unlock after
//! 2 s, workers die often). The real soak — the embedded default's own settings
//! for 15 minutes — is:
//! `LOCKSCOPE_SOAK_SECS=900 cargo test -p lockscope --test it soak -- --nocapture`

use std::sync::Arc;
use std::time::{Duration, Instant};

use lockscope::act::unlocker::{self, Deps, UnlockerConfig};
use lockscope::cli::demo::{self, DemoConfig};
use lockscope::live::hub::HubHandle;
use lockscope::metrics::Metrics;
use lockscope::remember::audit::AuditLog;
use lockscope_model::unlock::{Mode, DEFAULT_GRACE_MS};
use lockscope_model::view::{Sort, SortKey, ViewSpec, MAX_WINDOW};
use lockscope_store::now_ms;
use lockscope_store::spec::StoreSpec;
use tokio::sync::watch;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_embedded_demo_stays_workable_with_its_unlocker() {
    let full: Option<u64> = std::env::var("LOCKSCOPE_SOAK_SECS")
        .ok()
        .map(|s| s.parse().expect("seconds"));
    let (secs, cfg, grace) = match full {
        // The embedded default as `lockscope` runs it.
        Some(secs) => (
            secs,
            DemoConfig::default(),
            Duration::from_millis(DEFAULT_GRACE_MS as u64),
        ),
        // Sped up: what takes the default minutes happens in seconds.
        None => (
            30,
            DemoConfig {
                die_rate: 0.2,
                auto_unlock_after: Duration::from_secs(2),
                ..DemoConfig::default()
            },
            Duration::from_secs(1),
        ),
    };
    let keys = cfg.keys as u64;
    let dir = tempfile::tempdir().unwrap();
    let spec = StoreSpec::sqlite_file(&dir.path().join("embedded.db"));
    let locks = spec.connect().await.unwrap();
    let store = spec.open().unwrap();
    let hub = HubHandle::spawn("embedded", "soak", store.clone());
    let (stop_tx, stop) = watch::channel(false);
    let audit = AuditLog::open(&format!("sqlite:{}", dir.path().join("embedded.db").display()))
        .await
        .unwrap();
    let deps = Deps {
        audit: audit.clone(),
        metrics: Arc::new(Metrics::new()),
    };
    let ucfg = UnlockerConfig {
        mode: Mode::On,
        replica: "soak".into(),
        grace,
        lease: Duration::from_secs(10),
    };
    tokio::spawn(unlocker::run(hub.clone(), store, ucfg, deps, stop.clone()));
    let mut demo_stop = stop.clone();
    let demo = tokio::spawn(demo::run(locks, cfg, async move {
        let _ = demo_stop.wait_for(|s| *s).await.map(|_| ());
    }));

    let view = ViewSpec {
        sort: Sort {
            key: SortKey::Expiry,
            reverse: false,
        },
        limit: MAX_WINDOW,
        ..ViewSpec::default()
    };
    let (start, mut most_held, mut worst_late) = (Instant::now(), 0, i64::MIN);
    let mut samples = 0;
    while start.elapsed() < Duration::from_secs(secs) {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let (frame, _) = hub.render(view.clone()).await.unwrap();
        let now = now_ms();
        for row in &frame.rows {
            let Some(r) = row.entry.record() else { continue };
            let late = now - (r.auto_unlock_at + grace.as_millis() as i64);
            worst_late = worst_late.max(late);
            assert!(
                late <= 3_000,
                "{} (fence {}) is {late} ms past auto_unlock_at + grace: the unlocker is not keeping up",
                row.entry.name,
                row.entry.fence
            );
        }
        most_held = most_held.max(frame.total);
        samples += 1;
    }
    let _ = stop_tx.send(true);
    let stats = demo.await.unwrap().unwrap();
    let released = hub.summary().unlocker.map_or(0, |u| u.released);
    eprintln!(
        "{secs} s, {samples} samples: {stats}; unlocker released {released}; most held at once {most_held}; \
         latest release relative to due: {worst_late} ms"
    );
    assert!(
        stats.deaths > 0,
        "no worker died: nothing for the unlocker to do ({stats})"
    );
    assert!(released > 0, "the unlocker released nothing");
    // Workable: locks keep being taken (at least one a second, fleet-wide), and
    // dead workers' locks never pile up until every name is held.
    assert!(stats.acquired >= secs, "{stats}");
    assert!(
        most_held < keys,
        "{most_held} of {keys} names held at once: the fleet filled up"
    );
    assert!(stats.timeouts * 2 < stats.acquired, "{stats}");
}
