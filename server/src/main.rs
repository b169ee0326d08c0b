//! `lockscope`: runs the dashboard, takes and releases a lock from the shell, or
//! runs a demo fleet of workers.

use std::time::Duration;

use anyhow::{bail, Context};
use clap::Parser;
use lockscope::config::{Cli, Command, DemoArgs, EtcdArgs, LockArgs, ServeArgs, StoreKind, StoreSpec, UnlockArgs};
use lockscope::demo::DemoConfig;
use lockscope::http::AppState;
use lockscope::hub::{Fleets, HubHandle};
use lockscope_model::record::RECORD_VERSION;
use lockscope_model::LockRecord;
use lockscope_store::client::hostname;
use lockscope_store::etcd::{EtcdConfig, EtcdLocks, EtcdObserver};
use lockscope_store::now_ms;
use lockscope_store::protocol::{Attempt, LockStore};
use lockscope_store::sql::{ShedLockObserver, SqlLocks, SqlObserver};
use lockscope_store::Observer;
use tokio::sync::watch;
use tracing_subscriber::EnvFilter;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::try_new(&cli.log).context("--log")?)
        .with_writer(std::io::stderr)
        .init();
    match cli.command {
        None => serve(cli.serve).await,
        Some(Command::Lock(args)) => lock(args).await,
        Some(Command::Unlock(args)) => unlock(args).await,
        Some(Command::Demo(args)) => demo(args).await,
    }
}

fn etcd_config(args: &EtcdArgs) -> EtcdConfig {
    EtcdConfig::new(args.endpoints.clone(), args.prefix.clone())
}

async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut specs = args.stores.clone();
    if !args.etcd.is_empty() {
        specs.insert(
            0,
            StoreSpec {
                name: args.fleet.clone(),
                kind: StoreKind::Etcd {
                    endpoints: args.etcd.clone(),
                },
            },
        );
    }
    let mut hubs = Vec::new();
    for spec in &specs {
        if hubs.iter().any(|h: &HubHandle| h.fleet() == spec.name) {
            bail!("two fleets are named {:?}", spec.name);
        }
        let observer: Box<dyn Observer> = match &spec.kind {
            StoreKind::Etcd { endpoints } => {
                Box::new(EtcdObserver::new(EtcdConfig::new(endpoints.clone(), &args.prefix)))
            }
            StoreKind::Sql { url } => Box::new(SqlObserver::new(url)),
            StoreKind::ShedLock { url, table } => Box::new(ShedLockObserver::new(url, Some(table.as_str()))?),
        };
        tracing::info!(fleet = %spec.name, source = %spec.source(), "watching");
        hubs.push(HubHandle::spawn(&spec.name, &spec.source(), observer));
    }
    if hubs.is_empty() {
        hubs.push(embedded_default(&args, stop_rx.clone()).await?);
    }
    let state = AppState::new(Fleets::new(hubs), args.site_root.clone(), stop_rx.clone());
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("binding {}", args.listen))?;
    let addr = listener.local_addr()?;
    if !args.site_root.join("pkg").join("lockscope.wasm").exists() {
        tracing::warn!(site_root = %args.site_root.display(), "no built site here: the page renders but will not hydrate (run `scripts/build-site.sh`)");
    }
    // Printed on stdout for people and for scripts that wait for the server.
    println!("lockscope listening on http://{addr}");
    tokio::spawn(async move {
        shutdown_signal().await;
        tracing::info!("shutting down");
        let _ = stop_tx.send(true);
    });
    lockscope::serve(listener, state, stop_rx, Duration::from_secs(10)).await?;
    Ok(())
}

/// No store configured: a SQLite file (created if missing) with the demo fleet
/// working on it, so a newcomer sees a live, contended fleet with nothing installed.
async fn embedded_default(args: &ServeArgs, stop: watch::Receiver<bool>) -> anyhow::Result<HubHandle> {
    let path = &args.embedded_db;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .with_context(|| format!("opening {}", path.display()))?;
    let path = std::fs::canonicalize(path)?;
    let url = format!("sqlite://{}?mode=rwc", path.display());
    let store = SqlLocks::connect(&url)
        .await
        .with_context(|| format!("opening the embedded store {}", path.display()))?;
    let demo = !args.no_demo;
    let source = format!(
        "embedded SQLite {}{}",
        path.display(),
        if demo { " (demo fleet)" } else { "" }
    );
    println!("no store configured: using {source}");
    if demo {
        let mut stop = stop;
        tokio::spawn(async move {
            let until_stop = async move {
                let _ = stop.wait_for(|s| *s).await.map(|_| ());
            };
            match lockscope::demo::run(store, DemoConfig::default(), until_stop).await {
                Ok(stats) => tracing::info!(%stats, "demo fleet stopped"),
                Err(e) => tracing::error!(error = %e, "demo fleet failed"),
            }
        });
    }
    Ok(HubHandle::spawn("embedded", &source, Box::new(SqlObserver::new(url))))
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("SIGTERM handler");
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

async fn lock(args: LockArgs) -> anyhow::Result<()> {
    let locks = EtcdLocks::connect(etcd_config(&args.store)).await?;
    let now = now_ms();
    let expected = args.expected_runtime.saturating_mul(1000);
    let record = LockRecord {
        v: RECORD_VERSION,
        owner: format!("{:016x}", fastrand::u64(..)),
        session: format!("cli-{}", std::process::id()).into(),
        service: args.service.into(),
        host: hostname().into(),
        pid: std::process::id(),
        purpose: args.purpose,
        backtrace: [].into(),
        acquired_at: now,
        expected_runtime_ms: expected,
        alert_at: now + expected as i64,
        auto_unlock_at: now + 2 * expected as i64,
        heartbeat_at: now,
    };
    match locks.try_acquire(&args.name, &record).await? {
        Attempt::Acquired { fence } => {
            println!("acquired {} fence={fence}", args.name);
            Ok(())
        }
        Attempt::Busy { holder, .. } => {
            let who = holder.as_ref().map(|h| match h.record() {
                Some(r) => format!("{} ({}@{}), fence {}", r.session, r.service, r.host, h.fence),
                None => format!("a malformed record, fence {}", h.fence),
            });
            bail!("{} is held by {}", args.name, who.as_deref().unwrap_or("someone"))
        }
    }
}

async fn unlock(args: UnlockArgs) -> anyhow::Result<()> {
    let locks = EtcdLocks::connect(etcd_config(&args.store)).await?;
    if locks.release(&args.name, args.fence).await? {
        println!("released {} fence={}", args.name, args.fence);
        Ok(())
    } else {
        bail!(
            "{} was not released: it is no longer the acquisition with fence {}",
            args.name,
            args.fence
        )
    }
}

async fn demo(args: DemoArgs) -> anyhow::Result<()> {
    let cfg = etcd_config(&args.store);
    tracing::info!(endpoints = ?cfg.endpoints, prefix = %cfg.prefix, "demo fleet on etcd");
    let locks = EtcdLocks::connect(cfg).await?;
    let stats = lockscope::demo::run(locks, args.demo_config(), shutdown_signal())
        .await
        .context("demo fleet")?;
    println!("demo finished: {stats}");
    if !stats.abandoned.is_empty() {
        println!(
            "{} locks of dead workers stay held until the unlocker (or `lockscope unlock`) releases them:",
            stats.abandoned.len()
        );
        for a in &stats.abandoned {
            println!("  {} fence={} session={}", a.name, a.fence, a.session);
        }
    }
    Ok(())
}
