//! `lockscope-bench`: tools for measuring lockscope at fleet scale.
//!
//! - `fill`: writes N valid lock records into etcd, in the protocol's layout
//!   (`<prefix>locks/<name>`, `docs/protocol.md`), as fast as etcd takes them:
//!   transactions of up to 128 puts (etcd's default `--max-txn-ops`), several in
//!   flight. Names, services and hosts are spread so filters have something to
//!   narrow: `svc-<k>/job-<i>` for service `service-<k>` on host `host-<h>`.
//! - `load`: rewrites filled locks at a steady rate (paced on a monotonic clock),
//!   each record's purpose stamped `bench t=<unix ms> n=<seq>` with its write time,
//!   so a probe on the same host can tell how long the change took to reach it. A
//!   share of the writes goes to the locks a probe's view shows first (`svc-0/`
//!   by name), because a browser only receives its window. Every write is logged
//!   (`name t n` per line) so a probe can count changes never shown.

use std::time::{Duration, Instant};

use anyhow::Context;
use clap::{Parser, Subcommand};
use etcd_client::{Client, Txn, TxnOp};
use futures::stream::{self, StreamExt, TryStreamExt};
use lockscope_model::record::RECORD_VERSION;
use lockscope_model::LockRecord;
use lockscope_store::now_ms;

#[derive(Parser)]
#[command(
    name = "lockscope-bench",
    about = "Load tools for measuring lockscope at fleet scale"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Write N held locks into etcd (healthy for the next hour).
    Fill(Fleet),
    /// Rewrite filled locks at a steady rate, stamping each write's time.
    Load {
        #[command(flatten)]
        fleet: Fleet,
        /// Writes per second.
        #[arg(long, default_value_t = 1000)]
        rate: u64,
        #[arg(long, default_value_t = 10)]
        seconds: u64,
        /// Share of writes that go to the first `hot` locks of service 0 by name.
        #[arg(long, default_value_t = 0.1)]
        hot_share: f64,
        #[arg(long, default_value_t = 50)]
        hot: usize,
        /// Where to log every write.
        #[arg(long)]
        log: std::path::PathBuf,
    },
}

/// The fleet `fill` writes and `load` rewrites.
#[derive(clap::Args)]
struct Fleet {
    /// etcd endpoint, e.g. http://127.0.0.1:2379.
    #[arg(long)]
    etcd: String,
    #[arg(long, default_value = "/lockscope/")]
    prefix: String,
    /// How many locks (`load` picks among the ones `fill` wrote).
    #[arg(long)]
    locks: usize,
    /// Distinct services the locks are spread over.
    #[arg(long, default_value_t = 5)]
    services: usize,
}

/// Puts per transaction: etcd's default `--max-txn-ops`.
const PER_TXN: usize = 128;
/// Transactions in flight.
const IN_FLIGHT: usize = 8;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Fill(f) => fill(&f.etcd, &f.prefix, f.locks, f.services.max(1)).await,
        Command::Load {
            fleet,
            rate,
            seconds,
            hot_share,
            hot,
            log,
        } => {
            let plan = Load {
                locks: fleet.locks,
                services: fleet.services.max(1),
                rate: rate.max(1),
                seconds,
                hot_share,
                hot: hot.max(1),
            };
            load(&fleet.etcd, &fleet.prefix, plan, &log).await
        }
    }
}

/// The record of lock `i`: ~400 bytes of JSON, like a real holder's.
fn record(i: usize, services: usize, now: i64) -> (String, LockRecord) {
    let k = i % services;
    let acquired_at = now - (i % 300_000) as i64;
    let name = format!("svc-{k}/job-{i:07}");
    let rec = LockRecord {
        v: RECORD_VERSION,
        owner: format!("{:016x}", fastrand::u64(..)),
        session: format!("{:016x}", (i / 16) as u64 * 0x9e37_79b9),
        service: format!("service-{k}"),
        host: format!("host-{:03}", i % 200),
        pid: 1000 + (i % 30_000) as u32,
        purpose: format!("bench fill: batch {} of tenant {}", i / 1000, i % 97),
        backtrace: vec![
            format!("service_{k}::jobs::run (src/jobs.rs:{})", 100 + i % 50),
            "service::worker::handle (src/worker.rs:88)".into(),
        ],
        acquired_at,
        expected_runtime_ms: 3_600_000,
        alert_at: acquired_at + 3_600_000,
        auto_unlock_at: acquired_at + 7_200_000,
        heartbeat_at: acquired_at,
    };
    (name, rec)
}

async fn fill(endpoint: &str, prefix: &str, locks: usize, services: usize) -> anyhow::Result<()> {
    let client = Client::connect([endpoint], None)
        .await
        .with_context(|| format!("connecting to etcd at {endpoint}"))?;
    let started = Instant::now();
    let now = now_ms();
    let batches = (0..locks)
        .step_by(PER_TXN)
        .map(|from| from..(from + PER_TXN).min(locks));
    stream::iter(batches)
        .map(|range| {
            let mut kv = client.kv_client();
            async move {
                let ops: Vec<TxnOp> = range
                    .map(|i| {
                        let (name, rec) = record(i, services, now);
                        TxnOp::put(format!("{prefix}locks/{name}"), rec.to_json(), None)
                    })
                    .collect();
                kv.txn(Txn::new().and_then(ops)).await.context("writing a batch")
            }
        })
        .buffer_unordered(IN_FLIGHT)
        .try_for_each(|_| async { Ok(()) })
        .await?;
    let took = started.elapsed().max(Duration::from_millis(1));
    println!(
        "filled {locks} locks in {:.1} s ({:.0} locks/s)",
        took.as_secs_f64(),
        locks as f64 / took.as_secs_f64()
    );
    Ok(())
}

struct Load {
    locks: usize,
    services: usize,
    rate: u64,
    seconds: u64,
    hot_share: f64,
    hot: usize,
}

async fn load(endpoint: &str, prefix: &str, plan: Load, log: &std::path::Path) -> anyhow::Result<()> {
    use std::io::Write;
    let client = Client::connect([endpoint], None)
        .await
        .with_context(|| format!("connecting to etcd at {endpoint}"))?;
    let mut out = std::io::BufWriter::new(std::fs::File::create(log).with_context(|| format!("{}", log.display()))?);
    let total = plan.rate * plan.seconds;
    let interval = Duration::from_secs_f64(1.0 / plan.rate as f64);
    let started = tokio::time::Instant::now();
    // A lock keeps its acquisition time across rewrites, so orders by age hold still.
    let base = now_ms();
    let mut late = 0u64;
    // Writes run concurrently (one connection, multiplexed) so a slow reply does
    // not hold back the schedule; each is stamped when it is sent.
    let mut inflight = futures::stream::FuturesUnordered::new();
    for n in 0..total {
        let due = started + interval * n as u32;
        if tokio::time::Instant::now() > due + Duration::from_millis(5) {
            late += 1;
        }
        tokio::time::sleep_until(due).await;
        let i = if fastrand::f64() < plan.hot_share {
            // The first `hot` locks of service 0 by name: i = 0, services, 2*services, …
            fastrand::usize(0..plan.hot.min(plan.locks.div_ceil(plan.services))) * plan.services
        } else {
            fastrand::usize(0..plan.locks)
        };
        let t = now_ms();
        let (name, mut rec) = record(i, plan.services, base);
        rec.purpose = format!("bench t={t} n={n}");
        rec.heartbeat_at = t;
        writeln!(out, "{name} {t} {n}")?;
        let mut kv = client.kv_client();
        let key = format!("{prefix}locks/{name}");
        inflight.push(async move { kv.put(key, rec.to_json(), None).await });
        while inflight.len() > 256 {
            inflight.next().await.transpose().context("a write")?;
        }
        while let Some(Some(r)) = futures::FutureExt::now_or_never(inflight.next()) {
            r.context("a write")?;
        }
    }
    while let Some(r) = inflight.next().await {
        r.context("a write")?;
    }
    out.flush()?;
    let took = started.elapsed().as_secs_f64();
    println!(
        "wrote {total} changes in {took:.1} s ({:.0}/s), {late} sent more than 5 ms late",
        total as f64 / took
    );
    Ok(())
}
