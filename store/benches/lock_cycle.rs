//! Cost of the client library's lock+unlock cycle against the bare minimum etcd
//! needs for a lock: a put-if-absent txn and a delete-if-ours txn, on the same etcd
//! (a temporary one on tmpfs, like the tests use). Sequential, one client: this is
//! latency per cycle, not throughput.
//!
//! Run: `cargo bench -p lockscope-store --bench lock_cycle` (env `CYCLES`, default 2000).

use std::time::{Duration, Instant};

use etcd_client::{Client, Compare, CompareOp, Txn, TxnOp};
use lockscope_store::client::{LockOptions, Session, SessionConfig};
use lockscope_store::etcd::{EtcdConfig, EtcdLocks};
use lockscope_store::testing::EtcdServer;

struct Stats {
    label: &'static str,
    samples: Vec<Duration>,
}

impl Stats {
    fn median(&self) -> Duration {
        let mut s = self.samples.clone();
        s.sort();
        s[s.len() / 2]
    }
    fn p99(&self) -> Duration {
        let mut s = self.samples.clone();
        s.sort();
        s[s.len() * 99 / 100]
    }
    fn mean(&self) -> Duration {
        self.samples.iter().sum::<Duration>() / self.samples.len() as u32
    }
}

async fn measure<F: AsyncFnMut(usize)>(label: &'static str, cycles: usize, mut cycle: F) -> Stats {
    for i in 0..cycles / 10 {
        cycle(i).await; // warm-up
    }
    let mut samples = Vec::with_capacity(cycles);
    for i in 0..cycles {
        let t = Instant::now();
        cycle(i).await;
        samples.push(t.elapsed());
    }
    Stats { label, samples }
}

#[tokio::main]
async fn main() {
    let cycles: usize = std::env::var("CYCLES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(2000);
    let etcd = EtcdServer::start().await;
    let mut raw = Client::connect([etcd.endpoint()], None).await.unwrap();
    let value = vec![b'x'; 400]; // about a lock record's size

    let raw_stats = measure("raw put/delete txn pair", cycles, async |_| {
        let key = "/bench/raw";
        let put = Txn::new()
            .when([Compare::create_revision(key, CompareOp::Equal, 0)])
            .and_then([TxnOp::put(key, value.clone(), None)]);
        let resp = raw.txn(put).await.unwrap();
        assert!(resp.succeeded());
        let fence = resp.header().unwrap().revision();
        let del = Txn::new()
            .when([Compare::create_revision(key, CompareOp::Equal, fence)])
            .and_then([TxnOp::delete(key, None)]);
        assert!(raw.txn(del).await.unwrap().succeeded());
    })
    .await;

    let store = EtcdLocks::connect(EtcdConfig::new(vec![etcd.endpoint()], "/bench/"))
        .await
        .unwrap();
    let session = Session::open(store, SessionConfig::new("bench")).await.unwrap();
    let plain = LockOptions::new("bench", Duration::from_secs(60)).without_backtrace();
    let lib_stats = measure("Session::lock + unlock", cycles, async |_| {
        let g = session.lock("lib", plain.clone()).await.unwrap();
        assert!(g.unlock().await.unwrap());
    })
    .await;
    let with_bt = LockOptions::new("bench", Duration::from_secs(60));
    let bt_stats = measure("Session::lock + unlock, with backtrace", cycles, async |_| {
        let g = session.lock("lib-bt", with_bt.clone()).await.unwrap();
        assert!(g.unlock().await.unwrap());
    })
    .await;

    println!("{cycles} sequential cycles each, one client, etcd on tmpfs\n");
    println!(
        "{:<42} {:>10} {:>10} {:>10} {:>8}",
        "", "median", "mean", "p99", "ratio"
    );
    let base = raw_stats.median().as_secs_f64();
    for s in [&raw_stats, &lib_stats, &bt_stats] {
        println!(
            "{:<42} {:>8.0}µs {:>8.0}µs {:>8.0}µs {:>7.2}x",
            s.label,
            s.median().as_secs_f64() * 1e6,
            s.mean().as_secs_f64() * 1e6,
            s.p99().as_secs_f64() * 1e6,
            s.median().as_secs_f64() / base
        );
    }
}
