//! The `lockscope` command's whole body: parse the command line, then run the
//! dashboard (`serve`: open the stores, the hubs, the history, the audit log and
//! auth, start the unlockers and the web server, stop on a signal) or one of the
//! subcommands ([`crate::cli`]). `main.rs` only calls [`main`].
//!
//! Why here and not in `main.rs`: a binary is a crate of its own, and a release
//! build compiles there again every generic this code instantiates (the drop glue
//! of the serve path's futures reaches every store driver): the binary crate took
//! ~80 s of CPU on its own (docs/performance.md, "the first run").

use std::time::Duration;

use crate::act::unlocker::{Deps, UnlockerConfig};
use crate::auth::Auth;
use crate::cli::args::{parse_fleet, Cli, Command, DemoArgs, ServeArgs, TokenArgs};
use crate::cli::demo::DemoConfig;
use crate::live::hub::{Fleets, HubHandle};
use crate::remember::audit::AuditLog;
use crate::remember::history::{History, Recorder, Retention};
use crate::settings::FileConfig;
use crate::web::AppState;
use anyhow::{bail, Context};
use clap::Parser;
use lockscope_model::unlock::{Mode, DEFAULT_GRACE_MS};
use lockscope_store::spec::StoreSpec;
use tokio::sync::watch;
use tracing_subscriber::EnvFilter;

/// Runs the command; an error is one line on stderr (its causes joined by
/// `: `), with the whole chain and a backtrace only when `RUST_BACKTRACE` asks.
pub fn main() -> std::process::ExitCode {
    return_large_blocks();
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    match runtime.block_on(run()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            if std::env::var_os("RUST_BACKTRACE").is_some_and(|v| v != "0") {
                eprintln!("error: {e:?}");
            } else {
                eprintln!("error: {e:#}");
            }
            match e.downcast_ref::<crate::cli::get::Exit>() {
                Some(exit) => std::process::ExitCode::from(exit.code),
                None => std::process::ExitCode::FAILURE,
            }
        }
    }
}

/// glibc's malloc raises its mmap threshold to the size of any mapped block
/// freed (up to 32 MiB), after which such blocks come from arenas that are never
/// trimmed: a burst of Argon2 verifications (19 MiB each, one per bad token)
/// would keep the process ~100 MiB larger for good. A fixed threshold keeps
/// every block of 1 MiB or more mapped, and so returned when freed.
fn return_large_blocks() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets an allocator parameter; called before any thread starts.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 20);
    }
}

/// Every 10 s, hands memory malloc holds free back to the system
/// (`malloc_trim`): after a burst (a flood of requests, a large export) the
/// freed pages inside glibc's arenas would otherwise stay resident for good.
/// Walking the arenas costs about a millisecond.
async fn trim_freed_memory() {
    let mut every = tokio::time::interval(Duration::from_secs(10));
    loop {
        every.tick().await;
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        // SAFETY: malloc_trim only returns free memory to the system; it is thread-safe.
        unsafe {
            libc::malloc_trim(0);
        }
    }
}

async fn run() -> anyhow::Result<()> {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::try_new(&cli.log).context("--log")?)
        .with_writer(std::io::stderr)
        .init();
    match cli.command {
        None => serve(cli.serve).await,
        Some(Command::Lock(args)) => crate::cli::locks::lock(args).await,
        Some(Command::Unlock(args)) => crate::cli::locks::unlock(args).await,
        Some(Command::Demo(args)) => demo(args).await,
        Some(Command::Token(args)) => token(args),
        Some(Command::Admin(args)) => crate::cli::admin::run(args).await,
        Some(Command::History(args)) => crate::cli::history::run(args).await,
        Some(Command::Get(args)) => crate::cli::get::get(args).await,
        Some(Command::Describe(args)) => crate::cli::get::describe(args).await,
        Some(Command::Watch(args)) => crate::cli::watch::watch(args).await,
        Some(Command::Completions(args)) => crate::cli::shell::completions(args),
        Some(Command::Man(args)) => crate::cli::shell::man(args),
    }
}

fn token(args: TokenArgs) -> anyhow::Result<()> {
    let (token, entry) = crate::auth::new_token(&args.name, args.role);
    eprintln!(
        "The token (shown once; give it to {} and keep it out of logs):",
        args.name
    );
    println!("{token}");
    eprintln!("\nAdd this to lockscope.toml (it holds only the token's hash), then restart:\n");
    eprintln!("{entry}");
    Ok(())
}

async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let (file, path) = FileConfig::load(args.config.as_deref())?;
    if let Some(path) = &path {
        println!("configuration from {}", path.display());
    }
    let listen = args.listen.or(file.listen).unwrap_or(([127, 0, 0, 1], 3000).into());
    crate::check_exposure(listen, file.auth.is_some())?;
    tokio::spawn(trim_freed_memory());
    let (stop_tx, stop_rx) = watch::channel(false);
    // Fleets named on the command line or in the environment replace the file's.
    let mut fleets = args.stores.clone();
    if fleets.is_empty() && args.etcd.is_empty() {
        for f in &file.fleets {
            fleets.push(
                parse_fleet(&format!("{}={}", f.name, f.store)).map_err(|e| anyhow::anyhow!("lockscope.toml: {e}"))?,
            );
        }
    }
    if !args.etcd.is_empty() {
        fleets.insert(
            0,
            crate::cli::args::FleetSpec {
                name: args.fleet.clone(),
                store: StoreSpec::Etcd {
                    endpoints: args.etcd.clone(),
                    prefix: None,
                },
            },
        );
    }
    let history = open_history(&args, &file).await?;
    let replica_name = args
        .replica
        .clone()
        .or(file.unlocker.as_ref().and_then(|u| u.replica.clone()));
    let recording = |fleet: &str| {
        let replica = replica_name.clone().unwrap_or_else(lockscope_store::client::hostname);
        history.as_ref().map(|h| (h.recorder(fleet), replica))
    };
    let mut hubs = Vec::new();
    for fleet in fleets {
        if hubs.iter().any(|h: &HubHandle| h.fleet() == fleet.name) {
            bail!("two fleets are named {:?}", fleet.name);
        }
        let store = fleet.store.with_default_prefix(&args.prefix).open()?;
        let source = store.source();
        tracing::info!(fleet = %fleet.name, %source, "watching");
        hubs.push(HubHandle::spawn_recording(
            &fleet.name,
            &source,
            store,
            recording(&fleet.name),
        ));
    }
    // The embedded default's demo fleet leaves dead workers' locks behind: its
    // unlocker is on unless said otherwise; other fleets' default is dry-run.
    let mut default_mode = Mode::DryRun;
    if hubs.is_empty() {
        hubs.push(embedded_default(&args, stop_rx.clone(), recording("embedded")).await?);
        default_mode = Mode::On;
    }
    let modes = unlocker_modes(&args, &file, &hubs, default_mode)?;
    if let Some(dir) = args.embedded_db.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    // By default its own file beside the embedded store's (docs/operations.md, "Audit log").
    let audit = AuditLog::open_configured(args.audit.clone().or(file.audit.clone()), &args.embedded_db)
        .await
        .context("opening the audit log")?;
    let auth = Auth::new(file.auth.clone(), audit.clone()).with_limits(&file.limits);
    if !auth.enabled() {
        println!("no authentication: anyone who can reach {listen} is admin");
    }
    let mut state = AppState::new(Fleets::new(hubs), args.site_root.clone(), stop_rx.clone(), audit, auth)
        .with_limits(&file.limits);
    if let Some(history) = history {
        state = state.with_history(history);
    }
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("binding {listen}"))?;
    let addr = listener.local_addr()?;
    let unlocker_file = file.unlocker.clone().unwrap_or_default();
    let replica = args
        .replica
        .clone()
        .or(unlocker_file.replica)
        .unwrap_or_else(|| format!("{}:{}", lockscope_store::client::hostname(), addr.port()));
    let grace = match args.unlocker_grace_secs.or(unlocker_file.grace_secs) {
        Some(0) => bail!(
            "an unlocker grace of 0 s would release the locks of holders whose clocks run behind early; use at least 1"
        ),
        Some(s) => Duration::from_secs(s),
        None => Duration::from_millis(DEFAULT_GRACE_MS as u64),
    };
    let lease = Duration::from_secs(
        args.unlocker_lease_secs
            .or(unlocker_file.lease_secs)
            .unwrap_or(10)
            .max(1),
    );
    let mut unlockers = Vec::new();
    for (hub, mode) in state.fleets.all().iter().zip(modes) {
        let Some(store) = hub.store().cloned() else { continue };
        let cfg = UnlockerConfig {
            mode,
            replica: replica.clone(),
            grace,
            lease,
        };
        tracing::info!(fleet = %hub.fleet(), mode = mode.as_str(), %replica, "unlocker");
        let deps = Deps {
            audit: state.audit.clone(),
            metrics: state.metrics.clone(),
        };
        unlockers.push(tokio::spawn(crate::act::unlocker::run(
            hub.clone(),
            store,
            cfg,
            deps,
            stop_rx.clone(),
        )));
    }
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
    let audit = state.audit.clone();
    crate::serve(listener, state, stop_rx, Duration::from_secs(10)).await?;
    // The current minute's tallies of attempts without an identity.
    audit.flush_tally(true).await;
    // The unlockers saw the stop too: let them resign their roles (so another
    // replica takes over at once) and finish what they were recording.
    let _ = tokio::time::timeout(Duration::from_secs(3), futures::future::join_all(unlockers)).await;
    Ok(())
}

/// The lock history, unless `off`: by default a SQLite file of its own beside
/// the embedded default's.
async fn open_history(args: &ServeArgs, file: &FileConfig) -> anyhow::Result<Option<History>> {
    let url = args.history.clone().or(file.history.clone()).unwrap_or_else(|| {
        let db = args.embedded_db.with_file_name("lockscope-history.db");
        format!("sqlite:{}", db.display())
    });
    if url.trim() == "off" {
        return Ok(None);
    }
    let mut retention = Retention::default();
    if let Some(days) = args.history_days.or(file.history_days) {
        retention.max_age = Duration::from_secs(days.max(1) * 86_400);
    }
    if let Some(n) = args.history_max_events.or(file.history_max_events) {
        retention.max_events = n.max(1);
    }
    let limits = file.history_exports.clone().unwrap_or_default().limits();
    let history = History::open_with(&url, Some(retention), limits)
        .await
        .context("opening the lock history")?;
    tracing::info!(db = %history.shown(), "recording lock history");
    Ok(Some(history))
}

/// Each fleet's unlocker mode, in `hubs` order: `--unlocker` for one fleet,
/// else `--unlocker` for all, else the file's, else `default`.
fn unlocker_modes(args: &ServeArgs, file: &FileConfig, hubs: &[HubHandle], default: Mode) -> anyhow::Result<Vec<Mode>> {
    for (fleet, _) in &args.unlocker {
        if let Some(f) = fleet.as_deref().filter(|f| !hubs.iter().any(|h| h.fleet() == *f)) {
            bail!("--unlocker {f}=…: there is no fleet named {f:?}");
        }
    }
    Ok(hubs
        .iter()
        .map(|h| {
            let one = args
                .unlocker
                .iter()
                .rev()
                .find(|(f, _)| f.as_deref() == Some(h.fleet()));
            let all = args.unlocker.iter().rev().find(|(f, _)| f.is_none());
            let from_file = file
                .fleets
                .iter()
                .find(|f| f.name == h.fleet())
                .and_then(|f| f.unlocker);
            one.or(all).map(|(_, m)| *m).or(from_file).unwrap_or(default)
        })
        .collect())
}

/// No store configured: a SQLite file (created if missing) with the demo fleet
/// working on it, so a newcomer sees a live, contended fleet with nothing installed.
async fn embedded_default(
    args: &ServeArgs,
    stop: watch::Receiver<bool>,
    recording: Option<(Recorder, String)>,
) -> anyhow::Result<HubHandle> {
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
    let spec = StoreSpec::sqlite_file(&path);
    // Connected here (not lazily): a broken file is an error at start, and the
    // demo fleet writes through it.
    let locks = spec
        .connect()
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
            match crate::cli::demo::run(locks, DemoConfig::default(), until_stop).await {
                Ok(stats) => tracing::info!(%stats, "demo fleet stopped"),
                Err(e) => tracing::error!(error = %e, "demo fleet failed"),
            }
        });
    }
    Ok(HubHandle::spawn_recording("embedded", &source, spec.open()?, recording))
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

async fn demo(args: DemoArgs) -> anyhow::Result<()> {
    let spec = args.store.spec();
    tracing::info!(store = %spec.source(), "demo fleet");
    let locks = spec.connect().await?;
    let stats = crate::cli::demo::run(locks, args.demo_config(), shutdown_signal())
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
