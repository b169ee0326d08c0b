//! `load --churn`: rows entering and leaving the browser's window. Instead of
//! rewriting held locks, the load takes new locks and releases them again, each
//! operation one row entering or leaving the view `prefix=svc-0/&sort=name`.
//!
//! A new lock is named after one of the first `hot` locks of service 0 by name
//! (`svc-0/job-0000005-c<n>` sorts right after `svc-0/job-0000005`), so it
//! enters the first `hot` rows of that view. `hot` is cut so that `hot` plus
//! [`POOL`] is at most the page's first window (`DEFAULT_WINDOW`, 40 rows:
//! `hot` 15): every churned lock is in the window while it is held. (Takes in
//! flight can hold a few more for a moment; a lock pushed past the window at
//! the end shows as "held but not shown". The pool once drifted upward, a take
//! made while none had completed never made up for, to 40 held: 6-10 such locks
//! a run; none since.) Each take is logged `name t n` with its purpose stamped
//! `bench t=<ms> n=<n>`, as `load` logs a rewrite; each release `name t n release`.
//! A release only picks a lock whose take has completed (a delete overtaking its
//! own put would leave a lock behind), and about [`POOL`] churned locks are held
//! at any time: takes until the pool is full, then takes and releases in turn.

use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context};
use futures::stream::{FuturesUnordered, StreamExt};
use lockscope_model::LockRecord;
use lockscope_store::now_ms;
use lockscope_store::protocol::{Attempt, LockStore};

use crate::record;
use crate::store::{pace, Load, Target};

/// Churned locks held at a time (about).
pub const POOL: usize = 25;
/// Operations in flight (etcd multiplexes them on one connection; the SQL pool
/// has 8 connections).
const IN_FLIGHT: usize = 64;

/// A churned lock the load holds: its name and (SQL) fencing token.
struct Held {
    name: String,
    fence: i64,
}

enum Done {
    Took(Held),
    Released,
}

impl Target {
    /// Takes and releases locks in the window at `plan.rate` operations per
    /// second, logging every one.
    pub async fn churn(&self, plan: Load, log: &Path) -> anyhow::Result<()> {
        use std::io::Write;
        let mut out =
            std::io::BufWriter::new(std::fs::File::create(log).with_context(|| format!("{}", log.display()))?);
        let window = lockscope_model::view::DEFAULT_WINDOW as usize;
        let hot = plan
            .hot
            .min(window.saturating_sub(POOL))
            .min(plan.locks.div_ceil(plan.services))
            .max(1);
        let total = plan.rate * plan.seconds;
        let interval = Duration::from_secs_f64(1.0 / plan.rate as f64);
        plan.start.wait().await?;
        let started = tokio::time::Instant::now();
        let mut late = 0u64;
        let mut inflight = FuturesUnordered::new();
        // Taken (and completed), not yet being released.
        let mut held: Vec<Held> = Vec::new();
        // Taken or being taken or released: counts toward the pool.
        let mut live = 0usize;
        let (mut taken, mut released) = (0u64, 0u64);
        for n in 0..total {
            late += u64::from(pace(started + interval * n as u32).await);
            while let Some(Some(done)) = futures::FutureExt::now_or_never(inflight.next()) {
                if let Done::Took(h) = finished(done)? {
                    held.push(h);
                }
            }
            let t = now_ms();
            // Past the pool, release (when a take has completed); at it, take and
            // release in turn. A take made while none had completed is made up
            // for at the next completed one, so the pool does not drift upward.
            let release = !held.is_empty() && (live > POOL || (live == POOL && n % 2 == 1));
            let target = self.clone();
            if release {
                let h = held.swap_remove(fastrand::usize(0..held.len()));
                live -= 1;
                released += 1;
                writeln!(out, "{} {t} {n} release", h.name)?;
                inflight.push(tokio::spawn(
                    async move { target.release(h).await.map(|()| Done::Released) },
                ));
            } else {
                let j = fastrand::usize(0..hot) * plan.services;
                let (base, mut rec) = record(j, plan.services, t);
                let name = format!("{base}-c{n}");
                rec.owner = format!("{:016x}", (n + 1).wrapping_mul(0x2545_f491_4f6c_dd1d));
                rec.purpose = format!("bench t={t} n={n}");
                (rec.acquired_at, rec.heartbeat_at) = (t, t);
                rec.alert_at = t + rec.expected_runtime_ms as i64;
                rec.auto_unlock_at = t + 2 * rec.expected_runtime_ms as i64;
                live += 1;
                taken += 1;
                writeln!(out, "{name} {t} {n}")?;
                inflight.push(tokio::spawn(
                    async move { target.take(name, rec).await.map(Done::Took) },
                ));
            }
            while inflight.len() > IN_FLIGHT {
                if let Some(done) = inflight.next().await {
                    if let Done::Took(h) = finished(done)? {
                        held.push(h);
                    }
                }
            }
        }
        while let Some(done) = inflight.next().await {
            finished(done)?;
        }
        out.flush()?;
        let took = started.elapsed().as_secs_f64();
        println!(
            "churned {total} rows in {took:.1} s ({:.0}/s: {taken} taken, {released} released, {} still held), {late} sent more than 5 ms late",
            total as f64 / took,
            taken - released
        );
        Ok(())
    }

    /// Takes the new lock `name` for `rec`.
    async fn take(&self, name: String, rec: LockRecord) -> anyhow::Result<Held> {
        match self {
            Target::Etcd { client, prefix } => {
                let mut kv = client.kv_client();
                kv.put(format!("{prefix}locks/{name}"), rec.to_json(), None)
                    .await
                    .with_context(|| format!("taking {name}"))?;
                Ok(Held { name, fence: 0 })
            }
            Target::Sql { store } => match store
                .try_acquire(&name, &rec)
                .await
                .with_context(|| format!("taking {name}"))?
            {
                Attempt::Acquired { fence } => Ok(Held { name, fence }),
                Attempt::Busy { .. } => bail!("{name} is held already: churned names are new"),
            },
        }
    }

    /// Releases a churned lock.
    async fn release(&self, h: Held) -> anyhow::Result<()> {
        match self {
            Target::Etcd { client, prefix } => {
                let mut kv = client.kv_client();
                kv.delete(format!("{prefix}locks/{}", h.name), None)
                    .await
                    .with_context(|| format!("releasing {}", h.name))?;
            }
            Target::Sql { store } => {
                if !store
                    .release(&h.name, h.fence)
                    .await
                    .with_context(|| format!("releasing {}", h.name))?
                {
                    bail!("{}: not held by the churn's acquisition", h.name);
                }
            }
        }
        Ok(())
    }
}

fn finished(done: Result<anyhow::Result<Done>, tokio::task::JoinError>) -> anyhow::Result<Done> {
    done.context("a churn task failed")?
}
