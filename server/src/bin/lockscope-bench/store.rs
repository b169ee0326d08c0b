//! `fill` and `load` against the store that holds the fleet: etcd (written in the
//! protocol's layout directly) or lockscope's SQL tables (through the project's
//! own [`SqlLocks`], so the rows are exactly what a holder writes and the
//! observer sees ordinary acquisitions and extensions).

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use etcd_client::{Client, Txn, TxnOp};
use futures::stream::{self, FuturesUnordered, StreamExt, TryStreamExt};
use lockscope_model::record::Record;
use lockscope_model::LockRecord;
use lockscope_store::now_ms;
use lockscope_store::protocol::{Attempt, Extend, LockStore};
use lockscope_store::spec::{redact, StoreSpec};
use lockscope_store::sql::SqlLocks;

use crate::{record, session_of, Fleet};

/// etcd: locks per transaction: with one session put per 16 locks, 112 + 7 puts
/// stay under etcd's default `--max-txn-ops` (128).
const PER_TXN: usize = 112;
/// etcd: fill transactions in flight.
const IN_FLIGHT: usize = 8;
/// SQL: statements in flight. The store's pool has 8 connections and gives up on
/// one after 3 s, so more would only queue (or time out) in the pool; SQLite runs
/// its writers one at a time anyway.
const SQL_IN_FLIGHT: usize = 8;
/// etcd: load writes in flight (one connection, multiplexed).
const ETCD_LOAD_IN_FLIGHT: usize = 256;

/// Where the fleet lives (cheap to clone: a client, or a connection pool).
#[derive(Clone)]
pub enum Target {
    /// Boxed: an etcd client is large beside a SQL pool handle.
    Etcd {
        client: Box<Client>,
        prefix: String,
    },
    Sql {
        store: SqlLocks,
    },
}

impl Target {
    pub async fn open(f: &Fleet) -> anyhow::Result<Target> {
        let spec = match (&f.etcd, &f.store) {
            (Some(endpoint), _) => StoreSpec::Etcd {
                endpoints: vec![endpoint.clone()],
                prefix: Some(f.prefix.clone()),
            },
            (None, Some(spec)) => StoreSpec::parse(spec)?.with_default_prefix(&f.prefix),
            (None, None) => bail!("name the store: --etcd URL or --store STORE"),
        };
        // The bench writes in bulk (raw etcd transactions), below the protocol's
        // per-lock operations, so it needs the store's kind.
        match spec {
            StoreSpec::Etcd { endpoints, prefix } => {
                let client = Client::connect(&endpoints, None)
                    .await
                    .with_context(|| format!("connecting to etcd at {}", endpoints.join(",")))?;
                Ok(Target::Etcd {
                    client: Box::new(client),
                    prefix: prefix.unwrap_or_default(),
                })
            }
            StoreSpec::Sql { url } => {
                let store = SqlLocks::connect(&url)
                    .await
                    .with_context(|| format!("opening the lockscope tables in {}", redact(&url)))?;
                Ok(Target::Sql { store })
            }
            StoreSpec::ShedLock { .. } => {
                bail!("a ShedLock table is read-only to lockscope; fill and load write lockscope's own tables")
            }
            StoreSpec::Scylla(_) => {
                bail!("the bench writes etcd or SQL tables in bulk; it has no ScyllaDB writer yet")
            }
            StoreSpec::EtcdMutex { .. } => {
                bail!("the bench writes lockscope's own layout; it has no writer of etcd's native mutexes yet")
            }
            // Redis, ZooKeeper, PostgreSQL advisory locks, Redlock: other libraries' layouts.
            _ => {
                bail!("the bench writes lockscope's own layout; it has no writer of other libraries' locks yet")
            }
        }
    }

    /// Writes `locks` held locks, replacing what an earlier fill left.
    pub async fn fill(&self, locks: usize, services: usize) -> anyhow::Result<()> {
        let started = Instant::now();
        let now = now_ms();
        match self {
            Target::Etcd { client, prefix } => {
                let batches = (0..locks)
                    .step_by(PER_TXN)
                    .map(|from| from..(from + PER_TXN).min(locks));
                stream::iter(batches)
                    .map(|range| {
                        let mut kv = client.kv_client();
                        async move {
                            // Sessions without a lease: a filled fleet's holders stay alive.
                            let ops: Vec<TxnOp> = range
                                .flat_map(|i| {
                                    let (name, rec) = record(i, services, now);
                                    let session = session_of(i, services, now).map(|s| {
                                        let json = serde_json::to_vec(&s).expect("records serialise");
                                        TxnOp::put(format!("{prefix}sessions/{}", s.session), json, None)
                                    });
                                    std::iter::once(TxnOp::put(format!("{prefix}locks/{name}"), rec.to_json(), None))
                                        .chain(session)
                                })
                                .collect();
                            kv.txn(Txn::new().and_then(ops)).await.context("writing a batch")
                        }
                    })
                    .buffer_unordered(IN_FLIGHT)
                    .try_for_each(|_| async { Ok(()) })
                    .await?;
            }
            Target::Sql { store } => {
                // One acquisition per lock, a few in flight: the store has no batched
                // insert, and going around it would bypass its triggers' contract.
                stream::iter(0..locks)
                    .map(|i| {
                        let (name, rec) = record(i, services, now);
                        async move {
                            if let Some(s) = session_of(i, services, now) {
                                // Registered for a day: the holders stay alive for a bench.
                                store
                                    .open_session(&s, Duration::from_secs(86_400))
                                    .await
                                    .context("registering a session")?;
                            }
                            acquire_or_rewrite(store, &name, &rec).await
                        }
                    })
                    .buffer_unordered(SQL_IN_FLIGHT)
                    .try_for_each(|_| async { Ok(()) })
                    .await?;
            }
        }
        let took = started.elapsed().max(Duration::from_millis(1));
        println!(
            "filled {locks} locks in {:.1} s ({:.0} locks/s)",
            took.as_secs_f64(),
            locks as f64 / took.as_secs_f64()
        );
        Ok(())
    }

    /// Rewrites filled locks at `plan.rate` per second, logging every write.
    pub async fn load(&self, plan: Load, log: &Path) -> anyhow::Result<()> {
        use std::io::Write;
        // SQL: a holder extends with its fencing token; read them once, up front.
        let fences = match self {
            Target::Sql { store } => Some(Arc::new(fences(store).await?)),
            Target::Etcd { .. } => None,
        };
        let max_in_flight = match self {
            Target::Etcd { .. } => ETCD_LOAD_IN_FLIGHT,
            Target::Sql { .. } => SQL_IN_FLIGHT * 2,
        };
        // A lock keeps the acquisition time fill gave it, so the views' orders by
        // age, expiry or severity hold still and no row moves in or out of a window
        // because it was rewritten.
        let base = self.fill_time(plan.services).await?;
        let mut out =
            std::io::BufWriter::new(std::fs::File::create(log).with_context(|| format!("{}", log.display()))?);
        let total = plan.rate * plan.seconds;
        let interval = Duration::from_secs_f64(1.0 / plan.rate as f64);
        plan.start.wait().await?;
        let started = tokio::time::Instant::now();
        let mut late = 0u64;
        // Each write is a task of its own, stamped as it is spawned: it proceeds
        // while this loop sleeps until the next one is due, so its latency is the
        // store's and not this loop's pace, and a slow reply does not hold back the
        // schedule. The cap bounds what a stalled store can pile up; past it the
        // schedule slips, and `late` says by how much.
        let mut inflight = FuturesUnordered::new();
        // Locks with a write in flight. A second write to one of them could commit
        // before the first (etcd serves a connection's requests concurrently; the
        // SQL pool has several connections), leaving the older stamp as the row's
        // last state and a probe waiting for a change that was overwritten: a
        // holder never has two extensions in flight, nor does this load.
        let mut busy = HashSet::new();
        let hot = plan.hot.min(plan.locks.div_ceil(plan.services));
        for n in 0..total {
            late += u64::from(pace(started + interval * n as u32).await);
            while let Some(Some(done)) = futures::FutureExt::now_or_never(inflight.next()) {
                busy.remove(&finished(done)?);
            }
            let mut tries = 0;
            let i = loop {
                let i = if fastrand::f64() < plan.hot_share {
                    // The first `hot` locks of service 0 by name: i = 0, services, 2*services, …
                    fastrand::usize(0..hot) * plan.services
                } else {
                    fastrand::usize(0..plan.locks)
                };
                if busy.insert(i) {
                    break i;
                }
                // Picked busy locks again and again (a tiny fleet or hot set): wait
                // until a write finishes.
                tries += 1;
                if tries % 8 == 0 {
                    if let Some(done) = inflight.next().await {
                        busy.remove(&finished(done)?);
                    }
                }
            };
            let t = now_ms();
            let (name, mut rec) = record(i, plan.services, base);
            rec.purpose = format!("bench t={t} n={n}");
            rec.heartbeat_at = t;
            writeln!(out, "{name} {t} {n}")?;
            let (target, fences) = (self.clone(), fences.clone());
            inflight.push(tokio::spawn(async move {
                (i, target.rewrite(name, rec, fences.as_deref()).await)
            }));
            while inflight.len() > max_in_flight {
                if let Some(done) = inflight.next().await {
                    busy.remove(&finished(done)?);
                }
            }
        }
        while let Some(done) = inflight.next().await {
            finished(done)?;
        }
        out.flush()?;
        let took = started.elapsed().as_secs_f64();
        println!(
            "wrote {total} changes in {took:.1} s ({:.0}/s), {late} sent more than 5 ms late",
            total as f64 / took
        );
        Ok(())
    }

    /// The `now` fill wrote with: lock 0's acquisition time.
    async fn fill_time(&self, services: usize) -> anyhow::Result<i64> {
        let (name, _) = record(0, services, 0);
        let found = match self {
            Target::Etcd { client, prefix } => {
                let mut kv = client.kv_client();
                let key = format!("{prefix}locks/{name}");
                let resp = kv
                    .get(key.as_str(), None)
                    .await
                    .with_context(|| format!("reading {key}"))?;
                resp.kvs().first().map(|kv| LockRecord::parse(kv.value())).transpose()?
            }
            Target::Sql { store } => {
                let entry = store.get(&name).await.with_context(|| format!("reading {name}"))?;
                entry.and_then(|e| e.record().cloned())
            }
        };
        Ok(found
            .with_context(|| format!("{name} is not held: run fill with the same --services first"))?
            .acquired_at)
    }

    /// One `load` write: a put on etcd, the holder's `extend` on SQL.
    async fn rewrite(
        &self,
        name: String,
        rec: LockRecord,
        fences: Option<&HashMap<String, i64>>,
    ) -> anyhow::Result<()> {
        match self {
            Target::Etcd { client, prefix } => {
                let mut kv = client.kv_client();
                kv.put(format!("{prefix}locks/{name}"), rec.to_json(), None)
                    .await
                    .with_context(|| format!("writing {name}"))?;
            }
            Target::Sql { store } => {
                let fence = *fences
                    .and_then(|f| f.get(&name))
                    .with_context(|| format!("{name} is not held: run fill with the same --locks first"))?;
                match store
                    .extend(&name, fence, &rec)
                    .await
                    .with_context(|| format!("writing {name}"))?
                {
                    Extend::Extended => {}
                    other => bail!("{name}: fill's acquisition was not extended ({other:?}); was it released?"),
                }
            }
        }
        Ok(())
    }
}

/// The lock a finished write task wrote, or why it failed.
fn finished(done: Result<(usize, anyhow::Result<()>), tokio::task::JoinError>) -> anyhow::Result<usize> {
    let (i, result) = done.context("a write task failed")?;
    result.map(|()| i)
}

/// Takes `name` for `rec`; if an earlier fill holds it already (same owner),
/// rewrites it as that holder would.
async fn acquire_or_rewrite(store: &SqlLocks, name: &str, rec: &LockRecord) -> anyhow::Result<()> {
    match store
        .try_acquire(name, rec)
        .await
        .with_context(|| format!("acquiring {name}"))?
    {
        Attempt::Acquired { .. } => Ok(()),
        Attempt::Busy { holder: Some(h), .. } if h.record().is_some_and(|r| r.owner == rec.owner) => {
            match store
                .extend(name, h.fence, rec)
                .await
                .with_context(|| format!("rewriting {name}"))?
            {
                Extend::Extended => Ok(()),
                other => bail!("{name}: held by an earlier fill but not rewritable ({other:?})"),
            }
        }
        Attempt::Busy { .. } => bail!("{name} is held by someone other than lockscope-bench fill"),
    }
}

/// Every held lock's fencing token, by name.
async fn fences(store: &SqlLocks) -> anyhow::Result<HashMap<String, i64>> {
    let held = store.held().await.context("reading the held locks' fencing tokens")?;
    Ok(held.into_iter().map(|e| (e.name, e.fence)).collect())
}

pub struct Load {
    pub locks: usize,
    pub services: usize,
    pub rate: u64,
    pub seconds: u64,
    pub hot_share: f64,
    pub hot: usize,
    pub start: Start,
}

/// When the first write goes out. The load first reads what it needs (at
/// 1,000,000 SQL locks their fencing tokens take seconds); a probe that times
/// its run from the load's launch instead of its first write looks at the
/// table before the last writes are made.
#[derive(clap::Args)]
pub struct Start {
    /// Create this file once ready to write, before the first write.
    #[arg(long)]
    ready: Option<std::path::PathBuf>,
    /// Then wait until this file exists before the first write.
    #[arg(long)]
    go: Option<std::path::PathBuf>,
}

impl Start {
    /// Says the load is ready, and waits for the word to go.
    pub async fn wait(&self) -> anyhow::Result<()> {
        if let Some(ready) = &self.ready {
            std::fs::write(ready, b"").with_context(|| format!("{}", ready.display()))?;
        }
        if let Some(go) = &self.go {
            while !go.exists() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        Ok(())
    }
}

/// Waits for a write's turn, `due`; true if that turn had already passed by
/// more than 5 ms (the load's "sent late" count).
pub async fn pace(due: tokio::time::Instant) -> bool {
    let late = tokio::time::Instant::now() > due + Duration::from_millis(5);
    tokio::time::sleep_until(due).await;
    late
}
