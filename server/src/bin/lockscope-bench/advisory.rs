//! `advisory`: what polling `pg_locks` costs with many advisory locks held.
//!
//! Takes `--locks` session-level advisory locks (keys 1..=N) over
//! `--connections` connections (one `pg_advisory_lock` statement over a
//! `generate_series` each), and `--waiters` more connections each waiting on
//! one of the held keys (so the poll's `pg_blocking_pids` part has work), on
//! the PostgreSQL at `--url` (scripts/bench-advisory.sh starts a private one).
//! Then runs the `advisory+postgres://` fleet's poll exactly as its observer
//! does, `--polls` times: the one statement ([`poll::read`], timed from send
//! to the parsed answer: the database's work, the transfer and the JSON
//! parse) and the snapshot made of it ([`poll::build`]); and this process's
//! CPU time (user + system, `getrusage`) over those polls, per poll: what one
//! poll costs the server, beside the database's own work. The fleet's row
//! limit is raised to read every row (the default, 10,000, would cut the
//! waiters' rows off).

use std::time::Instant;

use anyhow::{bail, Context};
use lockscope_store::pg_advisory::poll;
use lockscope_store::spec::StoreSpec;
use sqlx::postgres::PgPoolOptions;
use sqlx::{Connection, PgConnection};

use crate::viewers::pct;

#[derive(clap::Args)]
pub struct Args {
    /// The database to take the locks in and poll (`postgres://…`). It needs
    /// room for them in its lock table: `max_locks_per_transaction` ×
    /// `max_connections` above `--locks` (the script sets 1024).
    #[arg(long)]
    url: String,
    /// Advisory locks held.
    #[arg(long, default_value_t = 10_000)]
    locks: usize,
    /// Connections holding them (the locks are spread evenly).
    #[arg(long, default_value_t = 4)]
    connections: usize,
    /// Connections waiting, each for one held key.
    #[arg(long, default_value_t = 10)]
    waiters: usize,
    /// Polls measured (after 3 not measured).
    #[arg(long, default_value_t = 100)]
    polls: usize,
}

/// This process's CPU time so far (user + system), in µs.
fn cpu_us() -> i64 {
    // SAFETY: getrusage only writes the struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let us = |t: libc::timeval| t.tv_sec * 1_000_000 + t.tv_usec;
    us(u.ru_utime) + us(u.ru_stime)
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    let connections = args.connections.max(1);
    let t0 = Instant::now();
    let mut holders = Vec::with_capacity(connections);
    let per = args.locks.div_ceil(connections);
    for c in 0..connections {
        let (lo, hi) = (c * per + 1, ((c + 1) * per).min(args.locks));
        let mut conn = PgConnection::connect(&args.url).await.context("connecting")?;
        sqlx::query("SET application_name = 'bench-holder'")
            .execute(&mut conn)
            .await?;
        if lo <= hi {
            sqlx::query("SELECT count(pg_advisory_lock(k)) FROM generate_series($1::bigint, $2::bigint) k")
                .bind(lo as i64)
                .bind(hi as i64)
                .execute(&mut conn)
                .await
                .context("taking the locks (is max_locks_per_transaction large enough?)")?;
        }
        holders.push(conn);
    }
    let mut waiting = Vec::with_capacity(args.waiters);
    for w in 0..args.waiters {
        let mut conn = PgConnection::connect(&args.url).await?;
        sqlx::query("SET application_name = 'bench-waiter'")
            .execute(&mut conn)
            .await?;
        let key = (w % args.locks.max(1)) as i64 + 1;
        waiting.push(tokio::spawn(async move {
            let _ = sqlx::query("SELECT pg_advisory_lock($1)")
                .bind(key)
                .execute(&mut conn)
                .await;
            conn
        }));
    }
    let spec = format!("advisory+{}#limit={}", args.url, args.locks + args.waiters);
    let StoreSpec::PgAdvisory(target) = StoreSpec::parse(&spec)? else {
        bail!("{spec}: not an advisory fleet");
    };
    let pool = PgPoolOptions::new().max_connections(1).connect(&args.url).await?;
    // Until every waiter waits.
    loop {
        let n: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted")
            .fetch_one(&pool)
            .await?;
        if n as usize >= args.waiters {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    println!(
        "{} advisory locks held over {connections} connections, {} waiting: {:.1} s to set up",
        args.locks,
        args.waiters,
        t0.elapsed().as_secs_f64()
    );

    let mut levels = poll::Levels::default();
    for _ in 0..3 {
        let read = poll::read(&pool, &target).await?;
        poll::build(&target, read, &mut levels);
    }
    let (mut read_us, mut build_us) = (Vec::new(), Vec::new());
    let cpu0 = cpu_us();
    let wall = Instant::now();
    let polls = args.polls.max(1);
    for _ in 0..polls {
        let t = Instant::now();
        let read = poll::read(&pool, &target).await?;
        let rows = read.locks.len();
        read_us.push(t.elapsed().as_micros() as i64);
        let t = Instant::now();
        let snapshot = poll::build(&target, read, &mut levels);
        build_us.push(t.elapsed().as_micros() as i64);
        if snapshot.locks.len() != args.locks || rows != args.locks + args.waiters {
            bail!(
                "a poll read {rows} rows, {} locks: expected {} and {}",
                snapshot.locks.len(),
                args.locks + args.waiters,
                args.locks
            );
        }
    }
    let cpu = cpu_us() - cpu0;
    let wall = wall.elapsed();
    let ms = |us: i64| us as f64 / 1000.0;
    read_us.sort_unstable();
    build_us.sort_unstable();
    println!(
        "poll statement (pg_locks + pg_stat_activity + pg_blocking_pids, read and parsed), {} polls: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        polls,
        ms(pct(&read_us, 50.0)),
        ms(pct(&read_us, 99.0)),
        ms(*read_us.last().unwrap_or(&0))
    );
    println!(
        "snapshot built from it: p50 {:.1} ms, p99 {:.1} ms",
        ms(pct(&build_us, 50.0)),
        ms(pct(&build_us, 99.0))
    );
    println!(
        "lockscope's CPU per poll (read + parse + build, user+system): {:.1} ms; wall per poll {:.1} ms",
        ms(cpu) / polls as f64,
        wall.as_secs_f64() * 1000.0 / polls as f64
    );
    for w in &waiting {
        w.abort();
    }
    drop(holders);
    Ok(())
}
