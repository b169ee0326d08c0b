//! Heap bytes the hub keeps per held lock (table, views, indexes), counted by a
//! counting allocator: exact and repeatable, unlike RSS. Records are of the size
//! the budget assumes (about 400 bytes of JSON each), each parsed from its JSON
//! as an observer hands it over, so whatever they share is the hub's doing.
//!
//! `cargo test -p lockscope --test memory -- --nocapture` prints the figure. The
//! goal is 1 KiB per lock; today's figure (docs/performance.md) is under it, and
//! the test fails on growth past it plus a margin for noise, which is still
//! under the goal.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

use lockscope::live::views::{Now, Views};
use lockscope_model::record::RECORD_VERSION;
use lockscope_model::view::ViewSpec;
use lockscope_model::{FleetEvent, FleetState, LockBody, LockEntry, LockRecord, Snapshot};

struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);
static BLOCKS: AtomicIsize = AtomicIsize::new(0);
/// The highest `LIVE` since it was last reset.
static PEAK: AtomicIsize = AtomicIsize::new(0);

fn grew(by: isize) {
    let live = LIVE.fetch_add(by, Ordering::Relaxed) + by;
    PEAK.fetch_max(live, Ordering::Relaxed);
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        grew(l.size() as isize);
        BLOCKS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size() as isize, Ordering::Relaxed);
        BLOCKS.fetch_sub(1, Ordering::Relaxed);
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        grew(new as isize - l.size() as isize);
        unsafe { System.realloc(p, l, new) }
    }
}

#[global_allocator]
static A: Counting = Counting;

/// Lock `i` as an observer hands it over: parsed from its stored JSON (and its
/// name copied from the key, exactly sized), so no two locks share anything
/// until the hub interns them.
fn entry(i: usize) -> LockEntry {
    let now = 1_700_000_000_000 + i as i64;
    let rec = LockRecord {
        v: RECORD_VERSION,
        owner: format!("{:016x}", i * 7919),
        session: format!("{:016x}", i / 10).into(),
        service: format!("service-{}", i % 20).into(),
        host: format!("host-{:03}", i % 300).into(),
        pid: 1000 + (i % 5000) as u32,
        purpose: format!("nightly batch {i} for tenant {}", i % 97),
        backtrace: vec![
            "billing::jobs::nightly::run (src/jobs/nightly.rs:120)".to_string(),
            "billing::worker::handle (src/worker.rs:88)".to_string(),
        ]
        .into(),
        acquired_at: now,
        expected_runtime_ms: 60_000,
        alert_at: now + 60_000,
        auto_unlock_at: now + 120_000,
        heartbeat_at: now,
    };
    let key = format!("service-{}/jobs/batch-{i:07}", i % 20);
    let entry = LockEntry::from_stored(key.as_str().to_owned(), i as i64 + 1, i as i64 + 1, &rec.to_json());
    assert!(matches!(entry.body, LockBody::Held(_)), "lock {i} parses");
    entry
}

/// A hub's table and views after a first snapshot of `n` locks, with the
/// heap's counters before it and the most the heap held while the snapshot was
/// handed over and applied.
struct Loaded {
    state: FleetState,
    views: Views,
    before: isize,
    blocks_before: isize,
    peak: isize,
}

fn load(n: usize) -> Loaded {
    let (before, blocks_before) = (LIVE.load(Ordering::Relaxed), BLOCKS.load(Ordering::Relaxed));
    PEAK.store(before, Ordering::Relaxed);
    // The records as an observer hands them over (each parsed from its JSON; see `entry`).
    let locks: Vec<LockEntry> = (0..n).map(entry).collect();
    let mut state = FleetState::default();
    let mut views = Views::new();
    for change in state.apply(FleetEvent::Reset(Snapshot {
        revision: n as i64,
        locks,
        ..Snapshot::default()
    })) {
        views.on_change(&state, &change, NOW.wall);
    }
    Loaded {
        state,
        views,
        before,
        blocks_before,
        peak: PEAK.load(Ordering::Relaxed),
    }
}

const NOW: Now = Now {
    wall: 1_700_000_000_000,
    mono: 0,
};

/// The counters are global: the tests take turns.
static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn the_hub_memory_per_held_lock_does_not_grow() {
    let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
    const N: usize = 100_000;
    let json: usize = (0..100)
        .map(|i| entry(i).record().unwrap().to_json().len())
        .sum::<usize>()
        / 100;
    let loaded = load(N);
    assert_peak_within_ten_percent(N, &loaded);
    let Loaded {
        state,
        mut views,
        before,
        blocks_before,
        ..
    } = loaded;
    let now = NOW;
    // A page view, whose memory must be returned.
    let page = views.render(&state, &ViewSpec::default(), now);
    drop(page);
    let bytes = (LIVE.load(Ordering::Relaxed) - before) as f64 / N as f64;
    let blocks = (BLOCKS.load(Ordering::Relaxed) - blocks_before) as f64 / N as f64;
    // glibc's malloc adds about 16 bytes per block (header and rounding).
    let per_lock = bytes + 16.0 * blocks;
    println!(
        "records of {json} bytes of JSON: the hub keeps {bytes:.0} bytes in {blocks:.1} heap blocks per held lock, \
         about {per_lock:.0} bytes with allocator overhead"
    );
    // 824 bytes when written (753 + 4.4 blocks; 1,195 before the hub interned
    // service, host, session and backtrace); 907 with sessions in the live
    // model (each lock's session in its meta and in the session -> locks index
    // that re-places a dead session's locks); 737 once a snapshot's table is
    // built in one go, its B-tree nodes full. Goal: 1,024. Fail on growth past
    // +5 %, not on noise.
    const LIMIT: f64 = 775.0;
    const _: () = assert!(LIMIT <= 1024.0, "the goal is 1 KiB per lock");
    assert!(per_lock <= LIMIT, "{per_lock:.0} bytes per lock, over {LIMIT}");
    let steady = LIVE.load(Ordering::Relaxed);
    for _ in 0..20 {
        drop(views.render(&state, &ViewSpec::default(), now));
    }
    assert_eq!(LIVE.load(Ordering::Relaxed), steady, "page views leave nothing behind");
}

/// Issue 26's goal for the start: "RSS peak while the history records the first
/// snapshot ≤ +10 % over the live table". The heap's share of it: applying a
/// first snapshot holds at most 10 % above what stays. Checked at 100,000 locks
/// (above), and here just past a size where a hash map grown lock by lock
/// doubles (about 30,000), as the views' map of every lock did: its last
/// doubling, on the very last locks, held the old and the new slots at once
/// (+22.8 % before the map was grown to the table's size at once; +15.6 % of RSS
/// at 1,000,000 locks).
fn assert_peak_within_ten_percent(n: usize, l: &Loaded) {
    let kept = LIVE.load(Ordering::Relaxed) - l.before;
    let over = (l.peak - l.before) as f64 / kept as f64 - 1.0;
    println!(
        "{n} locks: the heap peaked {:.1} % over the {} MB it keeps",
        over * 100.0,
        kept / 1_000_000
    );
    assert!(over <= 0.10, "{n} locks: peak {:.1} % over what stays", over * 100.0);
}

#[test]
fn applying_a_first_snapshot_peaks_at_most_ten_percent_over_what_stays() {
    let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
    // Derived from the map's own growth, so the check keeps landing there.
    let full = std::collections::HashMap::<u64, ()>::with_capacity(20_000).capacity();
    let n = full + full / 20;
    assert_peak_within_ten_percent(n, &load(n));
}
