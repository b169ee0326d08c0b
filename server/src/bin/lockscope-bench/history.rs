//! `lockscope-bench history`: the lock history's benchmark. Fills a fresh history
//! database with N events of a synthetic fleet (each lock taken, extended twice,
//! released, over and over; acquired events carry a ~400-byte record), taking a
//! checkpoint every 10,000 events as the server's writer does; then exports all of
//! it as CSV and as NDJSON through the server's streaming export, and rebuilds the
//! table at random instants. Prints events/s, peak memory (the process's RSS
//! high-water mark before and after each export) and time-travel latencies.

use std::time::Instant;

use futures::StreamExt;
use lockscope::remember::history::{stream_export, Format, History, CHECKPOINT_EVERY};
use lockscope_model::fleet::{LockBody, LockEntry};
use lockscope_model::history::{lock_events, HistoryEvent, HistoryQuery};
use lockscope_model::session::Holder;

#[derive(clap::Args)]
pub struct Args {
    /// Where: `sqlite:PATH` (must not exist yet) or `postgres://…` (an empty database).
    #[arg(long)]
    db: String,
    #[arg(long, default_value_t = 1_000_000)]
    events: usize,
    /// Distinct locks the events are spread over.
    #[arg(long, default_value_t = 1_000)]
    locks: usize,
    /// Measure a database an earlier run filled (its `--events` and `--locks`
    /// must be given again): exports and time travel only.
    #[arg(long)]
    no_fill: bool,
    /// Time-travel queries at random instants.
    #[arg(long, default_value_t = 50)]
    instants: usize,
}

const FLEET: &str = "bench";
/// Milliseconds between two events (so 1,000,000 events span ~2.8 h).
const STEP_MS: i64 = 10;

pub async fn run(args: Args) -> anyhow::Result<()> {
    let history = History::open(&args.db, None).await?;
    let mut start = lockscope_store::now_ms() - args.events as i64 * STEP_MS;
    let t = Instant::now();
    let (written, span) = if args.no_fill {
        let first = HistoryQuery {
            fleet: FLEET.into(),
            limit: Some(1),
            ..HistoryQuery::default()
        };
        start = history.query(&first).await?.first().map_or(start, |e| e.at);
        (args.events, args.events as i64 * STEP_MS)
    } else {
        fill(&history, &args, start).await?
    };
    let fill_s = t.elapsed().as_secs_f64();
    println!(
        "filled {written} events over {} locks in {fill_s:.1} s ({:.0} events/s, with checkpoints); peak RSS {} MiB",
        args.locks,
        written as f64 / fill_s,
        peak_rss_mib()
    );
    let all = HistoryQuery {
        fleet: FLEET.into(),
        ..HistoryQuery::default()
    };
    for format in [Format::Csv, Format::Ndjson] {
        reset_peak_rss();
        let rss_before = peak_rss_mib();
        let t = Instant::now();
        let (mut bytes, mut lines) = (0usize, 0usize);
        let mut s = std::pin::pin!(stream_export(&history, &all, format, None));
        while let Some(chunk) = s.next().await {
            let chunk = chunk?;
            bytes += chunk.len();
            lines += chunk.bytes().filter(|b| *b == b'\n').count();
        }
        let secs = t.elapsed().as_secs_f64();
        println!(
            "export {format:?}: {lines} lines, {:.0} MiB in {secs:.2} s = {:.0} events/s; RSS {rss_before} MiB before, peak during {} MiB",
            bytes as f64 / 1048576.0,
            written as f64 / secs,
            peak_rss_mib()
        );
    }
    let mut ms = Vec::new();
    let mut replayed = Vec::new();
    for _ in 0..args.instants {
        let at = start + fastrand::i64(0..span.max(1));
        let t = Instant::now();
        let table = history.table_at(FLEET, at).await?;
        ms.push(t.elapsed().as_secs_f64() * 1000.0);
        replayed.push(table.replayed);
    }
    ms.sort_by(f64::total_cmp);
    let pct = |p: f64| ms[((ms.len() as f64 - 1.0) * p).round() as usize];
    println!(
        "time travel at {} random instants: p50 {:.1} ms, p95 {:.1} ms, max {:.1} ms (events replayed after the checkpoint: max {})",
        ms.len(),
        pct(0.5),
        pct(0.95),
        pct(1.0),
        replayed.iter().max().unwrap_or(&0)
    );
    Ok(())
}

/// Writes the events in batches as the server's writer would, with its checkpoints.
async fn fill(history: &History, args: &Args, start: i64) -> anyhow::Result<(usize, i64)> {
    let mut held: Vec<Option<LockEntry>> = vec![None; args.locks.max(1)];
    let mut batch = Vec::with_capacity(5_000);
    let (mut n, mut since_checkpoint, mut fence) = (0usize, 0u64, 0i64);
    let mut at = start;
    while n < args.events {
        let i = n % held.len();
        let before = held[i].clone();
        let after = match &before {
            // Taken, extended twice (a new heartbeat period each time), released.
            None => {
                fence += 1;
                let (_, mut rec) = super::record(i, 5, at);
                rec.heartbeat_at = at;
                Some(entry(i, fence, rec))
            }
            Some(e) => match e.record() {
                Some(r) if r.heartbeat_at < r.acquired_at + 2 * 60_000 => {
                    let mut r = r.clone();
                    r.heartbeat_at += 60_000;
                    Some(LockEntry {
                        revision: e.revision + 1,
                        body: LockBody::Held(r),
                        ..e.clone()
                    })
                }
                _ => None,
            },
        };
        for d in lock_events(before.as_ref(), after.as_ref(), Some(fence), Holder::Alive) {
            batch.push(HistoryEvent::new(FLEET, at, d));
            n += 1;
            since_checkpoint += 1;
            at += STEP_MS;
        }
        held[i] = after;
        if batch.len() >= 5_000 || n >= args.events {
            history.write(std::mem::take(&mut batch)).await?;
            if since_checkpoint >= CHECKPOINT_EVERY {
                history.checkpoint(FLEET, at).await?;
                since_checkpoint = 0;
            }
        }
    }
    Ok((n, at - start))
}

fn entry(i: usize, fence: i64, mut rec: lockscope_model::LockRecord) -> LockEntry {
    rec.acquired_at = rec.heartbeat_at;
    LockEntry {
        name: format!("svc-{}/job-{i:07}", i % 5),
        fence,
        revision: fence,
        body: LockBody::Held(rec),
    }
}

/// Resets the peak resident set to the current one (Linux: `clear_refs` 5).
fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// The process's peak resident set (VmHWM), in MiB.
fn peak_rss_mib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb / 1024)
}
