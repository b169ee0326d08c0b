//! `lockscope-bench mutex fill|load`: a fleet of etcd native mutexes (the
//! layout `concurrency.Mutex` and `etcdctl lock` write, read by an
//! `etcd-mutex:` fleet) at scale.
//!
//! - `fill`: N locks `PREFIX m-<i>/<lease hex>`, one key each, on leases of one
//!   hour, 16 locks per lease (a service's session holding several locks),
//!   written in transactions of 112 keys, 8 in flight.
//! - `load`: hands locks over at RATE per second for SECONDS: one transaction
//!   deletes lock i's holder key and puts a key on another lease, as the
//!   holder's unlock and its first waiter's turn would (the new key's create
//!   revision is the lock's new fence). One write in `--sample` (200) is timed
//!   to its row: the lock's API answer polled every 20 ms until it shows that
//!   fence (store write → row in the server's table; figures are up to 20 ms
//!   late, and the polls, ~250 requests/s, are kept few so that they do not
//!   load the server they measure). Prints writes done, rate
//!   reached, and that latency's p50/p95/p99/max.

use std::time::{Duration, Instant};

use anyhow::Context;
use etcd_client::{Client, PutOptions, Txn, TxnOp};
use futures::stream::{self, StreamExt, TryStreamExt};

/// Locks per lease.
const PER_LEASE: usize = 16;
/// Keys per fill transaction (under etcd's default `--max-txn-ops`, 128).
const PER_TXN: usize = 112;
const IN_FLIGHT: usize = 8;
/// Load writes in flight (one connection, multiplexed).
const LOAD_IN_FLIGHT: usize = 256;

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    phase: Phase,
}

#[derive(clap::Subcommand)]
enum Phase {
    /// Write N held mutexes.
    Fill(Common),
    /// Hand filled mutexes over at a steady rate, timing a sample to the API.
    Load {
        #[command(flatten)]
        common: Common,
        #[arg(long, default_value_t = 1000)]
        rate: u64,
        #[arg(long, default_value_t = 20)]
        seconds: u64,
        /// The server (`http://HOST:PORT`) whose API is polled for sampled writes.
        #[arg(long)]
        url: String,
        /// Its fleet name.
        #[arg(long, default_value = "bench")]
        fleet: String,
        /// Time one write in this many.
        #[arg(long, default_value_t = 200)]
        sample: u64,
    },
}

#[derive(clap::Args)]
struct Common {
    /// etcd endpoint, e.g. http://127.0.0.1:2379.
    #[arg(long)]
    etcd: String,
    /// The `etcd-mutex:` fleet's PREFIX.
    #[arg(long, default_value = "/mx/")]
    prefix: String,
    #[arg(long)]
    locks: usize,
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    match args.phase {
        Phase::Fill(c) => fill(&c).await,
        Phase::Load {
            common,
            rate,
            seconds,
            url,
            fleet,
            sample,
        } => load(&common, rate.max(1), seconds, &url, &fleet, sample.max(1)).await,
    }
}

async fn connect(c: &Common) -> anyhow::Result<Client> {
    Client::connect([c.etcd.as_str()], None)
        .await
        .with_context(|| format!("connecting to etcd at {}", c.etcd))
}

fn key(prefix: &str, i: usize, lease: i64) -> String {
    format!("{prefix}m-{i}/{lease:x}")
}

/// The fill's leases, in order: lock i is on lease `i / PER_LEASE`.
async fn leases(client: &Client, n: usize) -> anyhow::Result<Vec<i64>> {
    stream::iter(0..n)
        .map(|_| {
            let mut c = client.clone();
            async move { Ok::<_, anyhow::Error>(c.lease_grant(3600, None).await?.id()) }
        })
        .buffered(IN_FLIGHT * 4)
        .try_collect()
        .await
}

async fn fill(c: &Common) -> anyhow::Result<()> {
    let client = connect(c).await?;
    let t0 = Instant::now();
    let leases = leases(&client, c.locks.div_ceil(PER_LEASE)).await?;
    let chunks: Vec<Vec<usize>> = (0..c.locks)
        .collect::<Vec<_>>()
        .chunks(PER_TXN)
        .map(<[usize]>::to_vec)
        .collect();
    stream::iter(chunks)
        .map(|chunk| {
            let mut cl = client.clone();
            let ops: Vec<TxnOp> = chunk
                .iter()
                .map(|&i| {
                    let lease = leases[i / PER_LEASE];
                    TxnOp::put(key(&c.prefix, i, lease), "", Some(PutOptions::new().with_lease(lease)))
                })
                .collect();
            async move { cl.txn(Txn::new().and_then(ops)).await.map(|_| ()) }
        })
        .buffer_unordered(IN_FLIGHT)
        .try_collect::<Vec<()>>()
        .await?;
    println!(
        "filled {} etcd mutexes under {} on {} leases in {} ms",
        c.locks,
        c.prefix,
        leases.len(),
        t0.elapsed().as_millis()
    );
    Ok(())
}

type Http = hyper_util::client::legacy::Client<
    hyper_util::client::legacy::connect::HttpConnector,
    http_body_util::Empty<hyper::body::Bytes>,
>;

/// The fence the API shows for `name` (`None`: not held, or no answer).
async fn shown_fence(client: &Http, url: &str, fleet: &str, name: &str) -> Option<i64> {
    use http_body_util::BodyExt;
    let uri: hyper::Uri = format!("{url}/api/v1/fleets/{fleet}/locks/{name}").parse().ok()?;
    let resp = client.get(uri).await.ok()?;
    let body = resp.into_body().collect().await.ok()?.to_bytes();
    let v: serde_json::Value = serde_json::from_slice(&body).ok()?;
    v["entry"]["fence"].as_i64()
}

async fn load(c: &Common, rate: u64, seconds: u64, url: &str, fleet: &str, sample: u64) -> anyhow::Result<()> {
    let client = connect(c).await?;
    // Every lock's holder lease now, read back (the fill's are one hour long).
    let resp = client
        .kv_client()
        .max_decoding_message_size(256 << 20)
        .get(
            c.prefix.as_str(),
            Some(etcd_client::GetOptions::new().with_prefix().with_keys_only()),
        )
        .await?;
    let mut holder: Vec<i64> = vec![0; c.locks];
    for kv in resp.kvs() {
        let k = String::from_utf8_lossy(kv.key());
        if let Some((i, lease)) = k
            .strip_prefix(c.prefix.as_str())
            .and_then(|r| r.strip_prefix("m-"))
            .and_then(|r| {
                let (i, l) = r.split_once('/')?;
                Some((i.parse::<usize>().ok()?, i64::from_str_radix(l, 16).ok()?))
            })
        {
            if i < holder.len() {
                holder[i] = lease;
            }
        }
    }
    let pool = leases(&client, 64).await?;
    let http: Http = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new()).build_http();
    let total = rate * seconds;
    let period = Duration::from_secs_f64(1.0 / rate as f64);
    let t0 = Instant::now();
    let mut rng = fastrand::Rng::with_seed(27);
    let mut writes = Vec::with_capacity(total as usize);
    for n in 0..total {
        let i = rng.usize(..c.locks);
        let old = holder[i];
        // Another lease than the holder's (one transaction may not name a key twice).
        let mut new = pool[(n as usize) % pool.len()];
        if new == old {
            new = pool[(n as usize + 1) % pool.len()];
        }
        holder[i] = new;
        writes.push((n, i, old, new));
    }
    let latencies: Vec<Option<u128>> = stream::iter(writes)
        .map(|(n, i, old, new)| {
            let mut cl = client.clone();
            let (prefix, due, http) = (c.prefix.clone(), t0 + period * n as u32, http.clone());
            async move {
                tokio::time::sleep_until(due.into()).await;
                let txn = Txn::new().and_then([
                    TxnOp::delete(key(&prefix, i, old), None),
                    TxnOp::put(key(&prefix, i, new), "", Some(PutOptions::new().with_lease(new))),
                ]);
                let written = Instant::now();
                let rev = cl.txn(txn).await?.header().map(|h| h.revision()).unwrap_or_default();
                if n % sample != 0 {
                    return Ok::<_, anyhow::Error>(None);
                }
                let name = format!("m-{i}");
                while written.elapsed() < Duration::from_secs(10) {
                    if shown_fence(&http, url, fleet, &name).await.is_some_and(|f| f >= rev) {
                        return Ok(Some(written.elapsed().as_millis()));
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Ok(Some(u128::MAX))
            }
        })
        .buffer_unordered(LOAD_IN_FLIGHT)
        .try_collect()
        .await?;
    let took = t0.elapsed().as_secs_f64();
    let mut timed: Vec<u128> = latencies.into_iter().flatten().collect();
    timed.sort_unstable();
    let never = timed.iter().filter(|&&l| l == u128::MAX).count();
    let pct = |p: f64| {
        timed
            .get(((timed.len() as f64 * p).ceil() as usize).saturating_sub(1))
            .copied()
            .unwrap_or(0)
    };
    println!(
        "{total} hand-offs in {took:.1} s ({:.0}/s); store write -> row in the API p50 {} / p95 {} / p99 {} / max {} ms over {} sampled writes ({never} not shown within 10 s)",
        total as f64 / took,
        pct(0.5),
        pct(0.95),
        pct(0.99),
        timed.iter().filter(|&&l| l != u128::MAX).max().copied().unwrap_or(0),
        timed.len()
    );
    Ok(())
}
