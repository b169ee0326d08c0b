//! `lockscope get locks|sessions` and `lockscope describe lock`: the read
//! commands, kubectl-style, through a running server's list API (so roles and
//! scopes apply; the token as for `lockscope admin`, [`Remote::connect`]).
//!
//! Exit codes (docs/operations.md): 0 found, 1 not found, 2 usage (a bad flag,
//! or a query the server refuses with 400), 3 the server or its store
//! unreachable, 4 refused (401/403).

use std::path::PathBuf;

use clap::{Args, Subcommand, ValueEnum};
use lockscope_model::detail::WaiterDetail;
use lockscope_model::time::{absolute_and_relative, human_duration};
use lockscope_model::view::WindowRow;
use lockscope_model::{RowState, StoreStatus};
use serde_json::Value;

use crate::cli::admin::{why, Remote};

/// A read command's end that is not success: its exit code and message.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct Exit {
    pub code: u8,
    pub message: String,
}

pub(crate) fn exit(code: u8, message: impl Into<String>) -> anyhow::Error {
    Exit {
        code,
        message: message.into(),
    }
    .into()
}

/// Where the server is, and the token (`--token-file` or `LOCKSCOPE_TOKEN`).
#[derive(Debug, Args)]
pub struct Target {
    /// The dashboard's URL, e.g. `http://127.0.0.1:3000`.
    #[arg(
        long,
        env = "LOCKSCOPE_SERVER",
        default_value = "http://127.0.0.1:3000",
        global = true
    )]
    pub server: String,
    /// A file holding an API token; none: the token in `LOCKSCOPE_TOKEN`, else none.
    #[arg(long, env = "LOCKSCOPE_TOKEN_FILE", global = true)]
    pub token_file: Option<PathBuf>,
    /// Send the token over plain HTTP to a host that is not this machine.
    #[arg(long, global = true)]
    pub insecure_http: bool,
    /// The fleet (default: the server's first).
    #[arg(long = "fleet", id = "read_fleet", global = true)]
    pub fleet: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// Fits 80 columns.
    Table,
    /// Every column.
    Wide,
    /// The API's JSON, one page after another.
    Json,
    /// One row a line.
    Ndjson,
}

#[derive(Debug, Args)]
pub struct GetArgs {
    #[command(flatten)]
    pub target: Target,
    #[command(subcommand)]
    pub what: GetWhat,
}

#[derive(Debug, Subcommand)]
pub enum GetWhat {
    /// The fleet's locks (or one, by name), most urgent first.
    Locks {
        name: Option<String>,
        /// healthy, overdue, expired, orphaned, blacklisted, malformed or foreign.
        #[arg(long)]
        state: Option<String>,
        /// Lock names starting with this.
        #[arg(long)]
        prefix: Option<String>,
        #[arg(short, long, value_enum, default_value = "table")]
        output: Output,
    },
    /// The fleet's sessions, by id.
    Sessions {
        #[arg(short, long, value_enum, default_value = "table")]
        output: Output,
    },
}

#[derive(Debug, Args)]
pub struct DescribeArgs {
    #[command(flatten)]
    pub target: Target,
    #[command(subcommand)]
    pub what: DescribeWhat,
}

#[derive(Debug, Subcommand)]
pub enum DescribeWhat {
    /// One lock in full, as its page shows it.
    Lock { name: String },
}

/// GET `path`: the JSON answer, or the exit its status means.
pub(crate) async fn read(remote: &Remote<'_>, path: &str) -> anyhow::Result<Value> {
    let (status, answer) = remote
        .call("GET", path, None)
        .await
        .map_err(|e| exit(3, format!("{e:#}")))?;
    if status.is_success() {
        return Ok(answer);
    }
    Err(exit(exit_code(status.as_u16()), format!("{status}: {}", why(&answer))))
}

/// The exit code an HTTP error status means (the module's list).
pub(crate) fn exit_code(status: u16) -> u8 {
    match status {
        401 | 403 => 4,
        404 => 1,
        400..=499 => 2,
        _ => 3,
    }
}

/// `--fleet`, else the server's first fleet.
pub(crate) async fn fleet(remote: &Remote<'_>, target: &Target) -> anyhow::Result<String> {
    if let Some(f) = &target.fleet {
        return Ok(f.clone());
    }
    let fleets = read(remote, "/api/v1/fleets").await?;
    fleets[0]["name"]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| exit(1, "the server has no fleet"))
}

pub(crate) fn connect(target: &Target) -> anyhow::Result<Remote<'_>> {
    Remote::connect(&target.server, target.token_file.as_deref(), target.insecure_http)
        .map_err(|e| exit(2, format!("{e:#}")))
}

pub async fn get(args: GetArgs) -> anyhow::Result<()> {
    let remote = connect(&args.target)?;
    let fleet = fleet(&remote, &args.target).await?;
    let seg = lockscope_model::url::segment;
    let base = format!("/api/v1/fleets/{}", seg(&fleet));
    let now = lockscope_store::now_ms();
    match args.what {
        GetWhat::Locks {
            name: Some(name),
            output,
            ..
        } => {
            let detail = read(&remote, &format!("{base}/locks/{}", seg(&name))).await?;
            let row = serde_json::json!({ "entry": detail["entry"], "holder": detail["holder"] });
            let row: WindowRow = serde_json::from_value(row)?;
            print_locks(&[row], output, now, true);
        }
        GetWhat::Locks {
            name: None,
            state,
            prefix,
            output,
        } => {
            let mut query = vec![("limit", "1000".to_string())];
            query.extend(state.map(|s| ("state", s)));
            query.extend(prefix.map(|p| ("prefix", p)));
            let mut first = true;
            for page in pages(&remote, &format!("{base}/locks"), query).await? {
                let rows: Vec<WindowRow> = serde_json::from_value(page["locks"].clone())?;
                if output == Output::Json {
                    println!("{page}");
                } else {
                    print_locks(&rows, output, now, first);
                }
                first = false;
                note_not_live(&page);
            }
        }
        GetWhat::Sessions { output } => {
            let mut first = true;
            for page in pages(&remote, &format!("{base}/sessions"), vec![("limit", "1000".into())]).await? {
                if output == Output::Json {
                    println!("{page}");
                } else {
                    print_sessions(page["rows"].as_array().map_or(&[][..], |r| r), output, first);
                }
                first = false;
                note_not_live(&page);
            }
        }
    }
    Ok(())
}

/// Every page of `path` (following `next`).
async fn pages(remote: &Remote<'_>, path: &str, query: Vec<(&str, String)>) -> anyhow::Result<Vec<Value>> {
    let mut pages = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let mut q: Vec<String> = query.iter().map(|(k, v)| format!("{k}={}", enc(v))).collect();
        q.extend(after.as_ref().map(|a| format!("after={}", enc(a))));
        let page = read(remote, &format!("{path}?{}", q.join("&"))).await?;
        after = page["next"].as_str().map(str::to_string);
        pages.push(page);
        if after.is_none() {
            return Ok(pages);
        }
    }
}

/// A query value, percent-encoded.
fn enc(v: &str) -> String {
    lockscope_model::url::segment(v)
}

fn note_not_live(page: &Value) {
    if page["live"] == false {
        let status: Option<StoreStatus> = serde_json::from_value(page["status"].clone()).ok();
        eprintln!("warning: the fleet is not live ({status:?}): the last known truth");
    }
}

/// `text` cut to `width` characters (an ellipsis at the end when cut).
fn fit(text: &str, width: usize) -> String {
    match text.chars().count() > width {
        true => text.chars().take(width - 1).chain(['…']).collect(),
        false => text.to_string(),
    }
}

pub(crate) fn print_locks(rows: &[WindowRow], output: Output, now: i64, header: bool) {
    if output == Output::Ndjson || output == Output::Json {
        for r in rows {
            println!("{}", serde_json::to_string(r).expect("a row serializes"));
        }
        return;
    }
    let wide = output == Output::Wide;
    if header {
        match wide {
            false => println!(
                "{:<32} {:<11} {:<16} {:>8} {:>8}",
                "NAME", "STATE", "SERVICE", "AGE", "FENCE"
            ),
            true => println!(
                "{:<40} {:<11} {:<20} {:<24} {:>8} {:>10} {:>8} {:>7} SESSION",
                "NAME", "STATE", "SERVICE", "HOST", "AGE", "EXPIRES", "FENCE", "WAITERS"
            ),
        }
    }
    for r in rows {
        let state = r.state(now);
        let rec = r.entry.record();
        let service = rec.map_or("-".to_string(), |r| r.service.to_string());
        let age = rec.map_or("-".into(), |r| human_duration(now - r.acquired_at));
        match wide {
            false => println!(
                "{:<32} {:<11} {:<16} {:>8} {:>8}",
                fit(&r.entry.name, 32),
                state.as_str(),
                fit(&service, 16),
                age,
                r.entry.fence
            ),
            true => {
                let host = rec.map_or("-".to_string(), |r| r.host.to_string());
                let expires = rec.map_or("-".into(), |r| match r.auto_unlock_at - now {
                    d if d >= 0 => human_duration(d),
                    d => format!("-{}", human_duration(d)),
                });
                let session = r.entry.holder_session().unwrap_or("-");
                println!(
                    "{:<40} {:<11} {:<20} {:<24} {:>8} {:>10} {:>8} {:>7} {session}",
                    r.entry.name,
                    state.as_str(),
                    service,
                    host,
                    age,
                    expires,
                    r.entry.fence,
                    r.waiters.len()
                );
            }
        }
    }
}

fn print_sessions(rows: &[Value], output: Output, header: bool) {
    if output == Output::Ndjson || output == Output::Json {
        for r in rows {
            println!("{r}");
        }
        return;
    }
    let wide = output == Output::Wide;
    if header {
        println!(
            "{:<32} {:<16} {:<14} {:>5} BLACKLISTED",
            "ID", "SERVICE", "HOLDER", "LOCKS"
        );
    }
    for r in rows {
        let body = &r["entry"]["body"];
        let id = r["id"].as_str().unwrap_or("-");
        let service = body["service"].as_str().unwrap_or("-");
        let (id, service) = match wide {
            true => (
                id.to_string(),
                format!("{service}@{}", body["host"].as_str().unwrap_or("-")),
            ),
            false => (fit(id, 32), fit(service, 16)),
        };
        println!(
            "{:<32} {:<16} {:<14} {:>5} {}",
            id,
            service,
            r["holder"].as_str().unwrap_or("-"),
            r["locks_held"].as_u64().unwrap_or(0),
            if r["blacklist"].is_null() { "no" } else { "yes" }
        );
    }
}

pub async fn describe(args: DescribeArgs) -> anyhow::Result<()> {
    let remote = connect(&args.target)?;
    let fleet = fleet(&remote, &args.target).await?;
    let DescribeWhat::Lock { name } = args.what;
    let seg = lockscope_model::url::segment;
    let d = read(&remote, &format!("/api/v1/fleets/{}/locks/{}", seg(&fleet), seg(&name))).await?;
    let now = lockscope_store::now_ms();
    let row: WindowRow = serde_json::from_value(serde_json::json!({ "entry": d["entry"], "holder": d["holder"] }))?;
    let state: RowState = row.state(now);
    println!("Name:        {}", row.entry.name);
    println!("Fleet:       {fleet}");
    println!("State:       {}", state.as_str());
    println!("Fence:       {}", row.entry.fence);
    println!("Holder:      {}", d["holder"].as_str().unwrap_or("-"));
    println!("Session:     {}", row.entry.holder_session().unwrap_or("-"));
    if let Some(r) = row.entry.record() {
        println!("Owner:       {}", r.owner);
        println!("Service:     {}", r.service);
        println!("Host:        {} (pid {})", r.host, r.pid);
        println!("Purpose:     {}", r.purpose);
        println!("Acquired:    {}", absolute_and_relative(r.acquired_at, now));
        println!("Alert at:    {}", absolute_and_relative(r.alert_at, now));
        println!("Auto-unlock: {}", absolute_and_relative(r.auto_unlock_at, now));
        println!("Heartbeat:   {}", absolute_and_relative(r.heartbeat_at, now));
        if !r.backtrace.is_empty() {
            println!("Backtrace:   (innermost first)");
            for frame in r.backtrace.iter() {
                println!("  {frame}");
            }
        }
    }
    // A foreign family's own knowledge of the lock (what its page shows in
    // its own section), one `path: value` line per field.
    if let Some(families) = d["entry"]["body"]["detail"].as_object() {
        for (family, detail) in families {
            println!("Family:      {family}");
            let mut lines = Vec::new();
            flatten(detail, String::new(), &mut lines);
            let more = lines.len().saturating_sub(MAX_DETAIL_LINES);
            for line in lines.iter().take(MAX_DETAIL_LINES) {
                println!("  {line}");
            }
            if more > 0 {
                println!("  … {more} more lines (-o json: GET the lock from the API)");
            }
        }
    }
    println!("Deadlock:    {}", if d["deadlock"] == true { "yes" } else { "no" });
    let waiters: Vec<WaiterDetail> = serde_json::from_value(d["waiters"].clone()).unwrap_or_default();
    println!("Waiters:     {}", waiters.len());
    for w in &waiters {
        println!(
            "  - {}{} waiting since {}{}{}",
            w.session,
            w.who.as_ref().map(|who| format!(" ({who})")).unwrap_or_default(),
            if w.at_least { "at least " } else { "" },
            absolute_and_relative(w.since, now),
            if w.deadlock { ", on a deadlock cycle" } else { "" }
        );
    }
    Ok(())
}

/// At most this many lines of a foreign family's detail in `describe`.
const MAX_DETAIL_LINES: usize = 200;

/// `value` as `path: scalar` lines (objects by key, arrays by index).
fn flatten(value: &Value, path: String, out: &mut Vec<String>) {
    let join = |key: &str| {
        if path.is_empty() {
            key.to_string()
        } else {
            format!("{path}.{key}")
        }
    };
    match value {
        Value::Object(map) => map.iter().for_each(|(k, v)| flatten(v, join(k), out)),
        Value::Array(items) if !items.is_empty() => {
            for (i, v) in items.iter().enumerate() {
                flatten(v, format!("{path}[{i}]"), out);
            }
        }
        Value::String(s) => out.push(format!("{path}: {s}")),
        other => out.push(format!("{path}: {other}")),
    }
}
