//! `handoff`: how long a released lock takes to reach its next waiter.
//!
//! W sessions of the client library contend for one lock. The holder keeps it
//! `--hold-ms`, notes the instant it calls `unlock`, and releases; the next
//! holder notes the instant its `lock` returns. A hand-off is the second minus
//! the first, both on this process's monotonic clock. A session that has just
//! released queues again only once someone else holds the lock, so every
//! acquisition measured is a waiter's wake-up, never the releaser winning its
//! own lock back at once.
//!
//! On etcd the same run measures `etcdctl lock` (etcd's own mutex, the tool
//! every etcd operator has) the same way: W `etcdctl lock` processes wait, the
//! holder's line on stdout is its acquisition, a SIGINT (etcdctl then unlocks
//! and exits) its release; a fresh process joins the queue after each release.
//! Those figures include a pipe and a signal each way, a few tens of µs.

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use lockscope_store::client::{LockOptions, Session, SessionConfig};
use lockscope_store::spec::StoreSpec;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::{mpsc, watch};

use crate::viewers::pct;

#[derive(clap::Args)]
pub struct Args {
    /// The store, as the server's `--store` names it without `NAME=`
    /// (`etcd:URL`, `sqlite:PATH`, `postgres://…`).
    #[arg(long)]
    store: String,
    /// Sessions contending for the lock (one holds, the rest wait).
    #[arg(long, default_value_t = 10)]
    waiters: usize,
    /// Hand-offs to measure.
    #[arg(long, default_value_t = 200)]
    rounds: usize,
    /// How long each holder keeps the lock.
    #[arg(long, default_value_t = 5)]
    hold_ms: u64,
    /// Skip the `etcdctl lock` comparison on etcd.
    #[arg(long)]
    no_etcdctl: bool,
}

/// The goals of issue 26 (docs/performance.md, "Lock hand-off").
const GOAL_P50_US: i64 = 2_000;
const GOAL_P99_US: i64 = 10_000;
const GOAL_VS_ETCDCTL: f64 = 1.2;

pub async fn run(args: Args) -> anyhow::Result<()> {
    let spec = StoreSpec::parse(&args.store)?.with_default_prefix("/lockscope-bench-handoff/");
    let endpoints = match &spec {
        StoreSpec::Etcd { endpoints, .. } => Some(endpoints.clone()),
        _ => None,
    };
    let store = spec.connect().await.context("connecting to the store")?;
    let ours = client_handoffs(store, &args).await?;
    let line = report("lockscope client", &args, &ours);
    println!("{line}");
    let p50 = pct(&ours, 50.0);
    let p99 = pct(&ours, 99.0);
    println!(
        "goal: hand-off p50 <= 2 ms: {} ({})",
        verdict(p50 <= GOAL_P50_US),
        ms(p50)
    );
    println!(
        "goal: hand-off p99 <= 10 ms: {} ({})",
        verdict(p99 <= GOAL_P99_US),
        ms(p99)
    );
    if let (Some(endpoints), false) = (endpoints, args.no_etcdctl) {
        let theirs = etcdctl_handoffs(&endpoints.join(","), &args).await?;
        println!("{}", report("etcdctl lock", &args, &theirs));
        let ratio = p50 as f64 / pct(&theirs, 50.0).max(1) as f64;
        println!(
            "goal: hand-off p50 <= 1.2 x etcdctl lock's: {} ({ratio:.2} x)",
            verdict(ratio <= GOAL_VS_ETCDCTL)
        );
    }
    Ok(())
}

fn verdict(met: bool) -> &'static str {
    if met {
        "met"
    } else {
        "MISSED"
    }
}

fn ms(us: i64) -> String {
    format!("{:.2} ms", us as f64 / 1000.0)
}

fn report(what: &str, args: &Args, sorted: &[i64]) -> String {
    format!(
        "handoff: {what} on {}, {} waiters, {} hand-offs, hold {} ms: p50 {}, p90 {}, p99 {}, max {}",
        lockscope_store::spec::redact(&args.store),
        args.waiters,
        sorted.len(),
        args.hold_ms,
        ms(pct(sorted, 50.0)),
        ms(pct(sorted, 90.0)),
        ms(pct(sorted, 99.0)),
        ms(*sorted.last().unwrap_or(&0)),
    )
}

/// Hand-offs between the client library's sessions, in µs, sorted.
async fn client_handoffs(store: lockscope_store::spec::AnyLocks, args: &Args) -> anyhow::Result<Vec<i64>> {
    const NAME: &str = "bench/handoff";
    // (acquired, released) per hold, in the order the holds happened.
    let holds: Arc<Mutex<Vec<(Instant, Instant)>>> = Arc::default();
    // How many holds have begun: a session that released waits for it to move.
    let (begun_tx, begun_rx) = watch::channel(0usize);
    let begun_tx = Arc::new(begun_tx);
    let total = args.rounds + 1;
    let hold = Duration::from_millis(args.hold_ms);
    let mut tasks = Vec::new();
    for w in 0..args.waiters.max(2) {
        let mut cfg = SessionConfig::new(format!("handoff-{w}"));
        // Heartbeats stay out of the measured window.
        cfg.heartbeat_every = Duration::from_secs(30);
        cfg.session_ttl = Duration::from_secs(90);
        let session = Session::open(store.clone(), cfg).await?;
        let (holds, begun_tx, mut begun_rx) = (holds.clone(), begun_tx.clone(), begun_rx.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                if *begun_rx.borrow() >= total {
                    break;
                }
                let opts = LockOptions::new("hand-off bench", Duration::from_secs(60))
                    .deadline(Duration::from_secs(120))
                    .without_backtrace();
                let guard = session.lock(NAME, opts).await?;
                let acquired = Instant::now();
                // Only the holder counts, so the count read back is this hold's.
                begun_tx.send_modify(|n| *n += 1);
                let seq = *begun_tx.borrow();
                tokio::time::sleep(hold).await;
                let released = Instant::now();
                holds.lock().unwrap().push((acquired, released));
                guard.unlock().await?;
                if seq >= total {
                    break;
                }
                // Queue again only behind the next holder.
                begun_rx.wait_for(|n| *n > seq).await?;
            }
            session.close().await?;
            anyhow::Ok(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    let mut holds = Arc::try_unwrap(holds).unwrap().into_inner().unwrap();
    holds.sort_by_key(|h| h.0);
    Ok(gaps(&holds))
}

/// Next acquisition minus previous release, in µs, sorted.
fn gaps(holds: &[(Instant, Instant)]) -> Vec<i64> {
    let mut out: Vec<i64> = holds
        .windows(2)
        .map(|w| w[1].0.saturating_duration_since(w[0].1).as_micros() as i64)
        .collect();
    out.sort_unstable();
    out
}

/// Hand-offs between `etcdctl lock` processes, in µs, sorted.
async fn etcdctl_handoffs(endpoints: &str, args: &Args) -> anyhow::Result<Vec<i64>> {
    let (tx, mut rx) = mpsc::unbounded_channel::<(u32, Instant)>();
    let spawn = |tx: mpsc::UnboundedSender<(u32, Instant)>| -> anyhow::Result<Child> {
        let mut child = Command::new("etcdctl")
            .env("ETCDCTL_API", "3")
            .args(["--endpoints", endpoints, "lock", "bench-handoff-etcdctl"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .context("running etcdctl (Debian's etcd-client)")?;
        let pid = child.id().unwrap_or_default();
        let out = child.stdout.take().expect("piped");
        tokio::spawn(async move {
            // etcdctl prints the lock's key once it holds it, and a line more
            // as it unlocks: read to the end, or that write to a closed pipe
            // kills it (SIGPIPE) before it unlocks and the next waiter sits out
            // its lease (seen: hand-offs of 7-10 s).
            let mut lines = BufReader::new(out).lines();
            if let Ok(Some(_)) = lines.next_line().await {
                let _ = tx.send((pid, Instant::now()));
            }
            while let Ok(Some(_)) = lines.next_line().await {}
        });
        Ok(child)
    };
    let mut children = Vec::new();
    for _ in 0..args.waiters.max(2) {
        children.push(spawn(tx.clone())?);
    }
    let hold = Duration::from_millis(args.hold_ms);
    let mut holds = Vec::new();
    for _ in 0..=args.rounds {
        let (pid, acquired) = match tokio::time::timeout(Duration::from_secs(30), rx.recv()).await {
            Ok(Some(x)) => x,
            _ => bail!("no etcdctl lock acquired within 30 s"),
        };
        tokio::time::sleep(hold).await;
        let released = Instant::now();
        // SAFETY: kill(2) on a child process id of ours; no memory is involved.
        if unsafe { libc::kill(pid as libc::pid_t, libc::SIGINT) } != 0 {
            bail!("could not signal etcdctl {pid}");
        }
        holds.push((acquired, released));
        // Let it unlock and exit on its own (dropping it would SIGKILL it first).
        if let Some(i) = children.iter().position(|c| c.id() == Some(pid)) {
            let mut done = children.swap_remove(i);
            tokio::spawn(async move { done.wait().await });
        }
        children.push(spawn(tx.clone())?);
    }
    drop(children);
    Ok(gaps(&holds))
}
