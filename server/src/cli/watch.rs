//! `lockscope watch locks`: a fleet's locks as they change, from a running
//! server's websocket (`/ws`, the browser's protocol in
//! [`lockscope_model::wire`]: the same view query, the same window frames,
//! each acknowledged), until interrupted.
//!
//! It prints the rows there are, then one line per change, timed by the
//! server: `acquired` (a lock new to the view, or the same name taken again
//! with a new fence), `released` (it left the view), `changed` (its state,
//! holder, fence, waiters or deadlock changed). With `--state` a lock enters
//! and leaves the view as its state changes too, so those lines say `entered`
//! and `left`. The view is ordered by name and holds at most
//! [`MAX_WINDOW`] locks (the first ones; a warning says when more match).
//!
//! Exit codes as `get`: 0 when interrupted (SIGINT), 1 no such fleet, 2
//! usage, 3 the server unreachable or the connection dropped or closed,
//! 4 refused.

use std::collections::HashMap;
use std::io::Write;

use clap::{Args, Subcommand};
use futures::{SinkExt, StreamExt};
use lockscope_model::time::rfc3339;
use lockscope_model::view::{ViewSpec, Window, WindowRow, MAX_WINDOW};
use lockscope_model::wire::{ClientMsg, ServerMsg};
use lockscope_model::StoreStatus;
use serde_json::json;
use tokio_tungstenite::tungstenite::{self, Message};

use crate::cli::get::{connect, exit, exit_code, fleet, print_locks, Output, Target};

#[derive(Debug, Args)]
pub struct WatchArgs {
    #[command(flatten)]
    pub target: Target,
    #[command(subcommand)]
    pub what: WatchWhat,
}

#[derive(Debug, Subcommand)]
pub enum WatchWhat {
    /// The fleet's locks (or one, by name): the rows there are, then one line
    /// per change, until interrupted.
    Locks {
        #[arg(conflicts_with = "prefix")]
        name: Option<String>,
        /// healthy, overdue, expired, orphaned, blacklisted, malformed or foreign.
        #[arg(long)]
        state: Option<String>,
        /// Lock names starting with this.
        #[arg(long)]
        prefix: Option<String>,
        /// table (wide: every column in the first table), or json/ndjson: one
        /// event object each (`listed` for the rows there are).
        #[arg(short, long, value_enum, default_value = "table")]
        output: Output,
    },
}

/// What one change line shows of a row; a change to any of these is a `changed` line.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Shown {
    state: &'static str,
    session: Option<String>,
    fence: i64,
    waiters: usize,
    deadlock: bool,
}

impl Shown {
    fn of(row: &WindowRow, now: i64) -> Shown {
        Shown {
            state: row.state(now).as_str(),
            session: row.entry.holder_session().map(str::to_string),
            fence: row.entry.fence,
            waiters: row.waiters.len(),
            deadlock: row.deadlock,
        }
    }

    /// What changed from `was`, e.g. `state healthy→overdue, waiters 0→1`.
    fn since(&self, was: &Shown) -> String {
        let mut what = Vec::new();
        if self.state != was.state {
            what.push(format!("state {}→{}", was.state, self.state));
        }
        if self.session != was.session {
            what.push("holder's session".to_string());
        }
        if self.waiters != was.waiters {
            what.push(format!("waiters {}→{}", was.waiters, self.waiters));
        }
        if self.deadlock != was.deadlock {
            what.push(format!("deadlock {}", if self.deadlock { "found" } else { "gone" }));
        }
        what.join(", ")
    }
}

/// Where the output goes, and in which form.
struct Out {
    output: Output,
    stdout: std::io::Stdout,
}

impl Out {
    /// One event: a line of the table, or a JSON object.
    fn event(&mut self, event: &str, time: i64, row: &WindowRow, what: &str) -> std::io::Result<()> {
        let mut out = self.stdout.lock();
        match self.output {
            Output::Table | Output::Wide => {
                let service = row.entry.record().map_or("-".to_string(), |r| r.service.to_string());
                let state = match event {
                    "released" | "left" => "-",
                    _ => row.state(time).as_str(),
                };
                let what = if what.is_empty() {
                    String::new()
                } else {
                    format!(" ({what})")
                };
                writeln!(
                    out,
                    "{} {event:<8} {} {state} {service} fence {}{what}",
                    rfc3339(time),
                    row.entry.name,
                    row.entry.fence
                )
            }
            Output::Json | Output::Ndjson => {
                let value = json!({ "event": event, "time": rfc3339(time), "name": row.entry.name, "row": row, "changed": what });
                self.json(&value)
            }
        }
    }

    fn json(&mut self, value: &serde_json::Value) -> std::io::Result<()> {
        let text = match self.output {
            Output::Json => serde_json::to_string_pretty(value),
            _ => serde_json::to_string(value),
        }
        .expect("an event serializes");
        writeln!(self.stdout.lock(), "{text}")
    }
}

pub async fn watch(args: WatchArgs) -> anyhow::Result<()> {
    let WatchWhat::Locks {
        name,
        state,
        prefix,
        output,
    } = args.what;
    // The page's own query parser: the same names and the same refusals.
    let limit = if name.is_some() {
        "1".to_string()
    } else {
        MAX_WINDOW.to_string()
    };
    let mut pairs = vec![("sort", "name"), ("limit", limit.as_str())];
    pairs.extend(state.as_deref().map(|s| ("state", s)));
    pairs.extend(name.as_deref().or(prefix.as_deref()).map(|p| ("prefix", p)));
    let view = ViewSpec::from_query(pairs).map_err(|e| exit(2, e))?;
    let by_state = view.filter.state.is_some();
    let wanted = |n: &str| name.as_deref().is_none_or(|name| n == name);

    let remote = connect(&args.target)?;
    let fleet = fleet(&remote, &args.target).await?;
    let request = remote.ws_request(&format!("/ws?fleet={}", lockscope_model::url::segment(&fleet)))?;
    let (mut ws, _) = tokio_tungstenite::connect_async(request).await.map_err(refused)?;
    let view = ClientMsg::View { id: 1, view };
    let text = serde_json::to_string(&view).expect("a view serializes");
    ws.send(Message::Text(text.into()))
        .await
        .map_err(|e| exit(3, format!("the connection to {} dropped: {e}", args.target.server)))?;

    let mut out = Out {
        output,
        stdout: std::io::stdout(),
    };
    let mut window = Window::default();
    let mut shown: Option<HashMap<String, (WindowRow, Shown)>> = None;
    let mut live = true;
    let mut warned_total = false;
    let interrupted = tokio::signal::ctrl_c();
    tokio::pin!(interrupted);
    loop {
        let msg = tokio::select! {
            _ = &mut interrupted => {
                let _ = ws.close(None).await;
                return Ok(());
            }
            msg = ws.next() => msg,
        };
        let text = match msg {
            Some(Ok(Message::Text(t))) => t,
            Some(Ok(Message::Close(frame))) => {
                let why = frame.map_or("no reason given".to_string(), |f| {
                    format!("{} {}", u16::from(f.code), f.reason)
                });
                return Err(exit(3, format!("the server closed the connection: {why}")));
            }
            Some(Ok(_)) => continue,
            Some(Err(e)) => {
                return Err(exit(
                    3,
                    format!("the connection to {} dropped: {e}", args.target.server),
                ))
            }
            None => return Err(exit(3, format!("the connection to {} dropped", args.target.server))),
        };
        let msg: ServerMsg =
            serde_json::from_str(&text).map_err(|e| exit(3, format!("a message the CLI cannot read: {e}")))?;
        let written = match msg {
            ServerMsg::Window(frame) => {
                let (seq, time) = (frame.seq, frame.server_time);
                window.apply(frame).map_err(|e| exit(3, e))?;
                // Acknowledged once applied, or the server holds the next frames back.
                let ack = serde_json::to_string(&ClientMsg::Ack { seq }).expect("an ack serializes");
                ws.send(Message::Text(ack.into()))
                    .await
                    .map_err(|e| exit(3, format!("the connection to {} dropped: {e}", args.target.server)))?;
                if window.total > window.len() as u64 && name.is_none() && !std::mem::replace(&mut warned_total, true) {
                    eprintln!(
                        "warning: {} locks match; watching the first {} by name (narrow with --prefix or --state)",
                        window.total,
                        window.len()
                    );
                }
                let now: HashMap<String, (WindowRow, Shown)> = window
                    .rows()
                    .filter(|r| wanted(&r.entry.name))
                    .map(|r| (r.entry.name.clone(), (r.clone(), Shown::of(r, time))))
                    .collect();
                let result = match &shown {
                    None => list(&mut out, &window, &now, time),
                    Some(before) => changes(&mut out, before, &now, time, by_state),
                };
                shown = Some(now);
                result
            }
            ServerMsg::Status { server_time, status } => {
                let result = match (&status, live) {
                    (StoreStatus::Live { .. }, true) => Ok(()),
                    (StoreStatus::Live { .. }, false) => {
                        eprintln!("{} the fleet {fleet} is live again", rfc3339(server_time));
                        status_event(&mut out, server_time, &status)
                    }
                    (_, _) => {
                        eprintln!(
                            "{} warning: the fleet {fleet} is not live ({}): the rows are the last known truth",
                            rfc3339(server_time),
                            not_live(&status)
                        );
                        status_event(&mut out, server_time, &status)
                    }
                };
                live = matches!(status, StoreStatus::Live { .. });
                result
            }
            ServerMsg::Error { reason } => {
                eprintln!("error from the server: {reason}");
                Ok(())
            }
            _ => Ok(()),
        };
        match written {
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(()),
            other => other?,
        }
    }
}

/// The rows there are, as the first frame has them.
fn list(out: &mut Out, window: &Window, rows: &HashMap<String, (WindowRow, Shown)>, time: i64) -> std::io::Result<()> {
    let in_order: Vec<WindowRow> = window
        .order()
        .iter()
        .filter_map(|n| rows.get(n).map(|(r, _)| r.clone()))
        .collect();
    match out.output {
        Output::Table | Output::Wide => {
            if in_order.is_empty() {
                eprintln!("no locks match yet; watching");
            } else {
                print_locks(&in_order, out.output, time, true);
            }
            Ok(())
        }
        _ => in_order.iter().try_for_each(|r| out.event("listed", time, r, "")),
    }
}

/// One line per lock that came, went or changed between two frames.
fn changes(
    out: &mut Out,
    before: &HashMap<String, (WindowRow, Shown)>,
    now: &HashMap<String, (WindowRow, Shown)>,
    time: i64,
    by_state: bool,
) -> std::io::Result<()> {
    let (came, went) = if by_state {
        ("entered", "left")
    } else {
        ("acquired", "released")
    };
    let mut gone: Vec<&String> = before.keys().filter(|n| !now.contains_key(*n)).collect();
    gone.sort();
    for n in gone {
        out.event(went, time, &before[n].0, "")?;
    }
    let mut names: Vec<&String> = now.keys().collect();
    names.sort();
    for n in names {
        let (row, shown) = &now[n];
        match before.get(n) {
            None => out.event(came, time, row, "")?,
            // The same name taken again between two frames: its release is not seen apart.
            Some((_, was)) if was.fence != shown.fence => out.event("acquired", time, row, "new fence")?,
            Some((_, was)) if was != shown => out.event("changed", time, row, &shown.since(was))?,
            Some(_) => {}
        }
    }
    Ok(())
}

fn status_event(out: &mut Out, time: i64, status: &StoreStatus) -> std::io::Result<()> {
    match out.output {
        Output::Table | Output::Wide => Ok(()),
        _ => out.json(&json!({ "event": "status", "time": rfc3339(time), "status": status })),
    }
}

/// Why a fleet is not live, in a few words.
fn not_live(status: &StoreStatus) -> String {
    match status {
        StoreStatus::Unreachable { error, .. } => format!("unreachable: {error}"),
        other => serde_json::to_value(other)
            .ok()
            .and_then(|v| v["state"].as_str().map(str::to_string))
            .unwrap_or_else(|| format!("{other:?}")),
    }
}

/// A failed upgrade as the exit `get` gives for the same status.
fn refused(e: tungstenite::Error) -> anyhow::Error {
    match e {
        tungstenite::Error::Http(resp) => {
            let body = String::from_utf8_lossy(resp.body().as_deref().unwrap_or_default()).into_owned();
            exit(
                exit_code(resp.status().as_u16()),
                format!("{}: {}", resp.status(), body.trim()),
            )
        }
        e => exit(3, format!("cannot open the websocket: {e}")),
    }
}
