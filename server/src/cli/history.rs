//! `lockscope history export`: the history's export on stdout, read from its
//! database directly (it needs the database's credentials, not an API token;
//! behind authentication, scripts use `GET /api/v1/fleets/{fleet}/history`).

use std::io::Write;

use clap::{Args, Subcommand};
use futures::StreamExt;
use lockscope_model::history::HistoryQuery;

use crate::remember::history::{stream_export, Format, History};

#[derive(Debug, Args)]
pub struct HistoryArgs {
    #[command(subcommand)]
    pub command: HistoryCommand,
}

#[derive(Debug, Subcommand)]
pub enum HistoryCommand {
    /// Write the events matching a query to stdout as CSV or NDJSON, streamed
    /// (first line: a versioned header naming the fields and the query).
    Export(ExportArgs),
}

#[derive(Debug, Args)]
pub struct ExportArgs {
    /// The history database: `sqlite:PATH` or `postgres://…` (the server's `--history`).
    #[arg(
        long,
        env = "LOCKSCOPE_HISTORY",
        default_value = "sqlite:.lockscope/lockscope-history.db"
    )]
    pub history: String,
    #[arg(long)]
    pub fleet: String,
    /// From (RFC 3339, `YYYY-MM-DDTHH:MM` as UTC, unix ms, `now`, `-15m`, `now-2h`…).
    #[arg(long)]
    pub from: Option<String>,
    #[arg(long)]
    pub to: Option<String>,
    /// A lock's name, or a prefix ending with `*`.
    #[arg(long)]
    pub lock: Option<String>,
    #[arg(long)]
    pub session: Option<String>,
    #[arg(long)]
    pub service: Option<String>,
    #[arg(long)]
    pub actor: Option<String>,
    /// Event kinds, comma-separated (acquired, released, force_released, …).
    #[arg(long)]
    pub kind: Option<String>,
    /// csv or ndjson.
    #[arg(long, default_value = "csv")]
    pub format: String,
}

pub async fn run(args: HistoryArgs) -> anyhow::Result<()> {
    let HistoryCommand::Export(a) = args.command;
    let format =
        Format::parse(&a.format).ok_or_else(|| anyhow::anyhow!("--format {:?}: use csv or ndjson", a.format))?;
    let pairs = [
        ("from", &a.from),
        ("to", &a.to),
        ("lock", &a.lock),
        ("session", &a.session),
        ("service", &a.service),
        ("actor", &a.actor),
        ("kind", &a.kind),
    ];
    let pairs = pairs.iter().filter_map(|(k, v)| v.as_deref().map(|v| (*k, v)));
    let query = HistoryQuery::from_query(&a.fleet, pairs, lockscope_store::now_ms()).map_err(|e| anyhow::anyhow!(e))?;
    if a.history.starts_with("sqlite:") {
        let path = a.history.trim_start_matches("sqlite:").trim_start_matches("//");
        let path = path.split('?').next().unwrap_or_default();
        anyhow::ensure!(std::path::Path::new(path).exists(), "no history at {path} (--history)");
    }
    let history = History::open(&a.history, None).await?;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let mut chunks = std::pin::pin!(stream_export(&history, &query, format, None));
    let written: std::io::Result<()> = async {
        while let Some(chunk) = chunks.next().await {
            out.write_all(chunk.map_err(std::io::Error::other)?.as_bytes())?;
        }
        out.flush()
    }
    .await;
    match written {
        // The reader stopped reading (`| head`): nothing is wrong.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => Ok(other?),
    }
}
