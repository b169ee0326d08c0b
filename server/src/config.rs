//! Command line of the `lockscope` binary. Every flag has an environment fallback
//! (shown by `--help`).

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "lockscope",
    version,
    about = "Observability dashboard and admin console for fleets of distributed locks",
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    /// Run the dashboard (the default when no subcommand is given).
    #[command(flatten)]
    pub serve: ServeArgs,
    /// Log filter, in `tracing` EnvFilter syntax (e.g. `info,lockscope_store=debug`).
    #[arg(long, env = "LOCKSCOPE_LOG", default_value = "info", global = true)]
    pub log: String,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Take a lock with metadata through the lock protocol, print its fencing token,
    /// and leave it held (for demos and tests; services use the client library).
    Lock(LockArgs),
    /// Release a lock taken with `lock`, only if it is still that acquisition.
    Unlock(UnlockArgs),
}

#[derive(Debug, Args)]
pub struct EtcdArgs {
    /// etcd client endpoints, comma-separated (e.g. `http://127.0.0.1:2379`).
    #[arg(long = "etcd", env = "LOCKSCOPE_ETCD", value_delimiter = ',', required = true)]
    pub endpoints: Vec<String>,
    /// Key prefix of the lockscope layout; locks live under `<prefix>locks/`.
    #[arg(long, env = "LOCKSCOPE_PREFIX", default_value = "/lockscope/")]
    pub prefix: String,
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub store: EtcdArgs,
    /// Address to serve the dashboard on.
    #[arg(long, env = "LOCKSCOPE_LISTEN", default_value = "127.0.0.1:3000")]
    pub listen: SocketAddr,
    /// Name shown for this fleet.
    #[arg(long, env = "LOCKSCOPE_FLEET", default_value = "etcd")]
    pub fleet: String,
    /// Directory holding the built site (`pkg/` with the wasm, JS and CSS).
    #[arg(long, env = "LEPTOS_SITE_ROOT", default_value = "target/site")]
    pub site_root: PathBuf,
    /// Messages buffered per websocket subscriber before it is declared lagging
    /// (it then gets a fresh snapshot).
    #[arg(long, env = "LOCKSCOPE_WS_BUFFER", default_value_t = 1024)]
    pub ws_buffer: usize,
}

#[derive(Debug, Args)]
pub struct LockArgs {
    #[command(flatten)]
    pub store: EtcdArgs,
    /// Lock name.
    pub name: String,
    /// Why the lock is taken.
    #[arg(long, default_value = "")]
    pub purpose: String,
    /// Expected hold time in seconds: alert at 1x, auto-unlock at 2x.
    #[arg(long, default_value_t = 60)]
    pub expected_runtime: u64,
    /// Service name recorded as the holder.
    #[arg(long, default_value = "lockscope-cli")]
    pub service: String,
}

#[derive(Debug, Args)]
pub struct UnlockArgs {
    #[command(flatten)]
    pub store: EtcdArgs,
    /// Lock name.
    pub name: String,
    /// Fencing token printed by `lock`.
    #[arg(long)]
    pub fence: i64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cli_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }

    #[test]
    fn serve_is_the_default_and_subcommands_have_their_own_store() {
        let cli = Cli::try_parse_from(["lockscope", "--etcd", "http://a:1,http://b:2"]).unwrap();
        assert!(cli.command.is_none());
        assert_eq!(cli.serve.store.endpoints, ["http://a:1", "http://b:2"]);
        let cli = Cli::try_parse_from(["lockscope", "lock", "x", "--etcd", "http://a:1", "--purpose", "p"]).unwrap();
        assert!(matches!(cli.command, Some(Command::Lock(ref l)) if l.name == "x" && l.purpose == "p"));
    }
}
