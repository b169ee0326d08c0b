//! `lockscope-bench`: tools for measuring lockscope at fleet scale.
//!
//! - `fill`: writes N valid held locks into a store as fast as it takes them.
//!   Names, services and hosts are spread so filters have something to narrow:
//!   `svc-<k>/job-<i>` for service `service-<k>` on host `host-<h>`. On etcd, in
//!   the protocol's layout (`<prefix>locks/<name>`, `docs/protocol.md`), in
//!   transactions of up to 128 puts (etcd's default `--max-txn-ops`), several in
//!   flight; on SQLite or PostgreSQL, through the project's SQL store
//!   ([`SqlLocks`](lockscope_store::sql::SqlLocks)), one acquisition per lock.
//! - `load`: rewrites filled locks at a steady rate (paced on a monotonic clock),
//!   each record's purpose stamped `bench t=<unix ms> n=<seq>` with its write time,
//!   so a probe on the same host can tell how long the change took to reach it. A
//!   share of the writes goes to the locks a probe's view shows first (`svc-0/`
//!   by name), because a browser only receives its window. Every write is logged
//!   (`name t n` per line) so a probe can count changes never shown. On SQL the
//!   rewrite is the holder's own `extend`, so the observer sees ordinary changes.
//!   With `--churn`, it takes and releases locks in that view instead, so rows
//!   enter and leave the window (`churn.rs`).
//! - `viewers`: a websocket probe: N concurrent subscribers of a running server,
//!   each on a different view, acknowledging every frame; reports store write →
//!   frame received for every stamp it sees, and which viewers fell behind.
//! - `handoff`: one lock, W contending sessions: holder's release → next
//!   waiter's acquisition, and the same for `etcdctl lock` on etcd (`handoff.rs`).
//! - `advisory`: N PostgreSQL advisory locks held, then the `advisory+postgres://`
//!   fleet's poll timed (p50/p99) with its CPU per poll (`advisory.rs`).
//! - `history`: fills a lock history with N events, exports them (CSV, NDJSON)
//!   and rebuilds the table at random instants (`history.rs`).
//!
//! The store is named like the server's `--store` (`etcd:URL`, `sqlite:PATH`,
//! `postgres://…`), or `--etcd URL` as before.

mod advisory;
mod churn;
mod handoff;
mod history;
mod mutex;
mod store;
mod viewers;

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use lockscope_model::record::RECORD_VERSION;
use lockscope_model::LockRecord;

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
    /// Write N held locks into the store (healthy for the next hour).
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
        log: PathBuf,
        /// Take and release locks in the first `hot` rows of service 0 by name
        /// instead: rows entering and leaving a browser's window (`churn.rs`).
        #[arg(long)]
        churn: bool,
        #[command(flatten)]
        start: store::Start,
    },
    /// Subscribe N websocket viewers, each to a different view, and measure what
    /// reaches them.
    Viewers(viewers::Args),
    /// Fill a history database with N events, export them as CSV and NDJSON, and
    /// rebuild the table at random instants.
    History(history::Args),
    /// Measure lock hand-off: holder's release → next waiter's acquisition.
    Handoff(handoff::Args),
    /// Fill and load a fleet of etcd native mutexes (`etcd-mutex:` layout).
    Mutex(mutex::Args),
    /// Hold N PostgreSQL advisory locks and time the advisory fleet's poll.
    Advisory(advisory::Args),
}

/// The fleet `fill` writes and `load` rewrites.
#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("target").required(true).args(["etcd", "store"])))]
struct Fleet {
    /// etcd endpoint, e.g. http://127.0.0.1:2379 (the same as `--store etcd:URL`).
    #[arg(long)]
    etcd: Option<String>,
    /// The store, as the server's `--store` names it without `NAME=`: `etcd:URL`,
    /// `sqlite:PATH` (created if missing), `postgres://…`.
    #[arg(long)]
    store: Option<String>,
    /// etcd key prefix of the lockscope layout.
    #[arg(long, default_value = "/lockscope/")]
    prefix: String,
    /// How many locks (`load` picks among the ones `fill` wrote).
    #[arg(long)]
    locks: usize,
    /// Distinct services the locks are spread over.
    #[arg(long, default_value_t = 5)]
    services: usize,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Fill(f) => {
            let target = store::Target::open(&f).await?;
            target.fill(f.locks, f.services.max(1)).await
        }
        Command::Load {
            fleet,
            rate,
            seconds,
            hot_share,
            hot,
            log,
            churn,
            start,
        } => {
            let plan = store::Load {
                locks: fleet.locks,
                services: fleet.services.max(1),
                rate: rate.max(1),
                seconds,
                hot_share,
                hot: hot.max(1),
                start,
            };
            let target = store::Target::open(&fleet).await?;
            if churn {
                target.churn(plan, &log).await
            } else {
                target.load(plan, &log).await
            }
        }
        Command::Viewers(args) => viewers::run(args).await,
        Command::History(args) => history::run(args).await,
        Command::Handoff(args) => handoff::run(args).await,
        Command::Mutex(args) => mutex::run(args).await,
        Command::Advisory(args) => advisory::run(args).await,
    }
}

/// The record of lock `i`: ~400 bytes of JSON, like a real holder's.
/// Locks per session in a filled fleet.
const LOCKS_PER_SESSION: usize = 16;

/// The session holding lock `i` of a filled fleet, registered by `fill` (so the
/// fleet's holders are alive, as in a real fleet), or `None` if another lock
/// registers it.
fn session_of(i: usize, services: usize, now: i64) -> Option<lockscope_model::record::SessionRecord> {
    if !i.is_multiple_of(LOCKS_PER_SESSION) {
        return None;
    }
    let (_, rec) = record(i, services, now);
    Some(lockscope_model::record::SessionRecord {
        v: RECORD_VERSION,
        session: rec.session.to_string(),
        service: rec.service.to_string(),
        host: rec.host.to_string(),
        pid: rec.pid,
        started_at: now,
        heartbeat_at: now,
        waiting_for: None,
        contention: Default::default(),
    })
}

fn record(i: usize, services: usize, now: i64) -> (String, LockRecord) {
    let k = i % services;
    let acquired_at = now - (i % 300_000) as i64;
    let name = format!("svc-{k}/job-{i:07}");
    let rec = LockRecord {
        v: RECORD_VERSION,
        // Fixed per lock, so `load` rewrites as the holder `fill` made (on SQL the
        // row's owner column must match).
        owner: format!("{:016x}", (i as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15)),
        session: format!("{:016x}", (i / LOCKS_PER_SESSION) as u64 * 0x9e37_79b9).into(),
        service: format!("service-{k}").into(),
        host: format!("host-{:03}", i % 200).into(),
        pid: 1000 + (i % 30_000) as u32,
        purpose: format!("bench fill: batch {} of tenant {}", i / 1000, i % 97),
        backtrace: vec![
            format!("service_{k}::jobs::run (src/jobs.rs:{})", 100 + i % 50),
            "service::worker::handle (src/worker.rs:88)".into(),
        ]
        .into(),
        acquired_at,
        expected_runtime_ms: 3_600_000,
        alert_at: acquired_at + 3_600_000,
        auto_unlock_at: acquired_at + 7_200_000,
        heartbeat_at: acquired_at,
    };
    (name, rec)
}
