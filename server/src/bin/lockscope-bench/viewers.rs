//! `lockscope-bench viewers`: a websocket probe of a running server.
//!
//! Opens `--viewers` connections to `/ws` at once, each subscribed to a different
//! view (filter by service, name prefix or state; every sort key, both
//! directions; windows at different offsets), and acknowledges every window frame
//! as soon as it is parsed, as a browser that keeps up would. For every row whose
//! purpose carries `bench t=<ms> n=<n>` (written by `lockscope-bench load`) it
//! records, the first time that viewer sees stamp `n` on a row already in its
//! window, receive time − `t`: store write → frame at the viewer, on one host's
//! clock. Stamps written before the viewer asked for its view, or brought along by
//! a row entering the window, are counted apart (their age measures nothing).
//!
//! A viewer **lagged** if any frame reached it more than `--late-ms` after the
//! frame's `server_time`, or carried a change that had waited more than
//! `--late-ms` on the server (`waited_ms`), or — given the load's write log
//! (`--writes`) — a write to a row in its window (as the viewer held it at the
//! write's time) was not reflected within `--late-ms` by that write's stamp or a
//! later one of the same row, while the row stayed in the window. That last test
//! is what "no frame for a second while its window kept changing" means, measured
//! per write rather than guessed from gaps.
//!
//! Prints one summary line on stdout; each lagged or failed viewer on stderr.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use futures::{SinkExt, StreamExt};
use lockscope_model::view::{Filter, RowState, Sort, SortKey, ViewSpec, WindowFrame};
use lockscope_model::{ClientMsg, ServerMsg, Window, PROTOCOL_VERSION};
use lockscope_store::now_ms;
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

mod report;
mod seen;

pub(crate) use report::pct;
use report::{detail, figures, summary};
use seen::{read_writes, Viewer, Write};

type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

#[derive(clap::Args)]
pub struct Args {
    /// The server, e.g. http://127.0.0.1:3000 (its `/ws` is used).
    #[arg(long, default_value = "http://127.0.0.1:3000")]
    url: String,
    /// Fleet to watch (the server's first when absent).
    #[arg(long)]
    fleet: Option<String>,
    /// Concurrent connections, each on its own view.
    #[arg(long, default_value_t = 200)]
    viewers: usize,
    /// How long to watch, from when the viewers are started.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Rows per window.
    #[arg(long, default_value_t = 50)]
    limit: u32,
    /// Services the fleet is spread over (`fill --services`): the views filter by them.
    #[arg(long, default_value_t = 5)]
    services: usize,
    /// The load's write log (`load --log`), read at the end: writes to a viewer's
    /// window that it was not shown in time. The load should be done by then.
    #[arg(long)]
    writes: Option<PathBuf>,
    /// A viewer lagged if a frame reached it more than this after its
    /// `server_time`, or held a change on the server this long, or a write to its
    /// window was not shown within this long.
    #[arg(long, default_value_t = 1000)]
    late_ms: i64,
    /// Also write the figures the goals are judged by to this file, one
    /// `name=value` a line (integers; `scripts/bench.sh` reads it).
    #[arg(long)]
    figures: Option<PathBuf>,
    /// Acknowledge each window frame this long after it arrived (in order, reading
    /// on meanwhile), as a page that acknowledges after its paint does; 0: at once.
    #[arg(long, default_value_t = 0)]
    ack_after_ms: u64,
}

/// The `id` of the one view each viewer asks for.
const VIEW_ID: u32 = 1;
const CONNECT_WITHIN: Duration = Duration::from_secs(10);

/// Viewer `k`'s view: distinct for every `k`. Filters cycle fastest; sorts are
/// shifted per round of filters so that each filter meets every sort; windows
/// start at row 0 or one page down, alternating per round, and two pages further
/// every `12 × filters` viewers. Viewer 0 watches the rows the load writes most
/// (`svc-0/` by name), as the Chromium probe does.
fn view_of(k: usize, services: usize, limit: u32) -> ViewSpec {
    let mut filters = Vec::new();
    for s in 0..services {
        filters.push(Filter {
            prefix: Some(format!("svc-{s}/")),
            ..Filter::default()
        });
        filters.push(Filter {
            service: Some(format!("service-{s}")),
            ..Filter::default()
        });
        if s == 0 {
            filters.push(Filter::default());
            filters.push(Filter {
                state: Some(RowState::Healthy),
                ..Filter::default()
            });
        }
    }
    // By name first: viewer 0 sees the load's hot rows.
    let keys = [SortKey::Name]
        .into_iter()
        .chain(SortKey::ALL.into_iter().filter(|k| *k != SortKey::Name));
    let sorts: Vec<Sort> = keys
        .flat_map(|key| [false, true].map(|reverse| Sort { key, reverse }))
        .collect();
    let (f, round) = (k % filters.len(), k / filters.len());
    let block = round / sorts.len();
    let sort = sorts[(f + round) % sorts.len()];
    // Within a block (filter, sort) pairs are distinct; blocks differ by offset.
    let page = (2 * block + round % 2) as u64;
    ViewSpec {
        filter: filters[f].clone(),
        sort,
        offset: page * limit as u64,
        limit,
    }
}

fn ws_url(url: &str, fleet: Option<&str>) -> anyhow::Result<String> {
    let url = url.trim_end_matches('/');
    let base = if let Some(rest) = url.strip_prefix("http://") {
        format!("ws://{rest}")
    } else if url.starts_with("ws://") {
        url.to_string()
    } else {
        bail!("--url {url}: expected http://HOST:PORT (this probe speaks plain websockets only)");
    };
    Ok(match fleet {
        Some(f) => format!("{base}/ws?fleet={f}"),
        None => format!("{base}/ws"),
    })
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    let url = ws_url(&args.url, args.fleet.as_deref())?;
    let cpu0 = cpu_ticks();
    let started = std::time::Instant::now();
    let until = tokio::time::Instant::now() + Duration::from_secs(args.seconds);
    // One task per viewer, each owning its socket: reading and acknowledging in
    // the same task keeps a frame's ack right behind its parse, and the viewers
    // never wait on each other (the runtime spreads them over the cores).
    let tasks: Vec<_> = (0..args.viewers)
        .map(|k| {
            let view = view_of(k, args.services.max(1), args.limit);
            let ack_after = Duration::from_millis(args.ack_after_ms);
            tokio::spawn(watch(url.clone(), view, until, args.late_ms, ack_after))
        })
        .collect();
    let mut viewers = Vec::with_capacity(tasks.len());
    for t in tasks {
        viewers.push(t.await.context("a viewer task panicked")?);
    }
    let cpu = cpu_ticks().zip(cpu0).map(|(b, a)| (b - a) as f64 / USER_HZ);
    let wall = started.elapsed().as_secs_f64();
    let writes = match &args.writes {
        Some(p) => Some(read_writes(p)?),
        None => None,
    };
    if let Some(w) = &writes {
        for v in &mut viewers {
            v.judge(w, args.late_ms);
        }
    }
    println!("{}", summary(&viewers, writes.as_deref(), &args, cpu.map(|c| c / wall)));
    if let Some(path) = &args.figures {
        std::fs::write(path, figures(&viewers)).with_context(|| format!("writing {}", path.display()))?;
    }
    for v in viewers.iter().filter(|v| v.lagged() || v.error.is_some()) {
        eprintln!("{}", detail(v));
    }
    if let Some(failed) = viewers.first().filter(|_| viewers.iter().all(|v| v.error.is_some())) {
        bail!(
            "no viewer ran to the end; the first: {}",
            failed.error.as_deref().unwrap_or_default()
        );
    }
    Ok(())
}

async fn watch(url: String, view: ViewSpec, until: tokio::time::Instant, late_ms: i64, ack_after: Duration) -> Viewer {
    let mut v = Viewer {
        view,
        ..Viewer::default()
    };
    if let Err(e) = watch_inner(&url, &mut v, until, late_ms, ack_after).await {
        v.error = Some(format!("{e:#}"));
    }
    v.ended_at = now_ms();
    v
}

async fn watch_inner(
    url: &str,
    v: &mut Viewer,
    until: tokio::time::Instant,
    late_ms: i64,
    ack_after: Duration,
) -> anyhow::Result<()> {
    let (mut ws, _) = tokio::time::timeout(CONNECT_WITHIN, tokio_tungstenite::connect_async(url))
        .await
        .context("connecting: timed out")?
        .with_context(|| format!("connecting to {url}"))?;
    let deadline = tokio::time::sleep_until(until);
    tokio::pin!(deadline);
    let mut window = Window::default();
    let mut asked = false;
    // Acknowledgements held back (`--ack-after-ms`): when each is due, in order.
    let mut acks = std::collections::VecDeque::new();
    loop {
        let ack_due = acks.front().map(|(at, _)| *at);
        let msg = tokio::select! {
            _ = &mut deadline => break,
            _ = tokio::time::sleep_until(ack_due.unwrap_or(until)), if ack_due.is_some() => {
                let (_, seq) = acks.pop_front().expect("one is due");
                send(&mut ws, &ClientMsg::Ack { seq }).await?;
                continue;
            }
            m = ws.next() => m,
        };
        let recv = now_ms();
        let text = match msg {
            Some(Ok(Message::Text(t))) => t,
            Some(Ok(Message::Close(c))) => bail!("closed by the server: {c:?}"),
            Some(Ok(Message::Binary(_))) => bail!("a binary frame, which the protocol does not use"),
            Some(Ok(_)) => continue, // ping, pong: tungstenite answers pings itself
            Some(Err(e)) => return Err(e).context("reading"),
            None => bail!("the connection ended"),
        };
        v.bytes += text.len() as u64;
        let msg: ServerMsg = serde_json::from_str(text.as_str()).context("an unreadable server message")?;
        match msg {
            ServerMsg::Window(f) => {
                // Acknowledge before anything else: the server holds back after
                // MAX_IN_FLIGHT unacknowledged frames, and this probe's bookkeeping
                // is not what is being measured.
                match ack_after.is_zero() {
                    true => send(&mut ws, &ClientMsg::Ack { seq: f.seq }).await?,
                    false => acks.push_back((tokio::time::Instant::now() + ack_after, f.seq)),
                }
                v.on_frame(recv, f, &mut window, late_ms)?;
            }
            ServerMsg::Hello { protocol, .. } if !asked => {
                if protocol != PROTOCOL_VERSION {
                    bail!("the server speaks protocol {protocol}, this probe {PROTOCOL_VERSION}");
                }
                let view = v.view.clone();
                send(&mut ws, &ClientMsg::View { id: VIEW_ID, view }).await?;
                v.asked_at = now_ms();
                asked = true;
            }
            ServerMsg::Hello { .. } => bail!("a second hello"),
            ServerMsg::Error { reason } => bail!("the server refused: {reason}"),
            ServerMsg::Status { .. } | ServerMsg::Overview { .. } | ServerMsg::Pong { .. } => {}
            ServerMsg::Detail { .. } | ServerMsg::Sessions { .. } => bail!("a watch message on a view connection"),
        }
    }
    if v.first_frame_at.is_none() {
        bail!("no window frame within the run");
    }
    let _ = tokio::time::timeout(Duration::from_secs(1), ws.close(None)).await;
    Ok(())
}

async fn send(ws: &mut Ws, msg: &ClientMsg) -> anyhow::Result<()> {
    let text = serde_json::to_string(msg).expect("client messages serialise");
    ws.send(Message::Text(text.into())).await.context("sending")
}

/// `/proc` reports CPU time in USER_HZ ticks, 100 per second on Linux.
const USER_HZ: f64 = 100.0;

/// This process's user + system CPU time so far, in ticks (Linux only).
fn cpu_ticks() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name (which may hold spaces): state is field 3.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
}

#[cfg(test)]
mod tests {
    use super::seen::stamp;
    use super::*;

    #[test]
    fn views_are_distinct() {
        for services in [1, 5] {
            let views: HashSet<ViewSpec> = (0..600).map(|k| view_of(k, services, 50)).collect();
            assert_eq!(views.len(), 600);
        }
        let v = view_of(0, 5, 50);
        assert_eq!(v.filter.prefix.as_deref(), Some("svc-0/"));
        assert_eq!((v.sort.key, v.sort.reverse, v.offset), (SortKey::Name, false, 0));
    }

    /// A frame carrying `rows` (name, stamp n written at t), in window `order`.
    fn frame(seq: u64, order: Option<&[&str]>, rows: &[(&str, i64, u64)]) -> WindowFrame {
        use lockscope_model::view::WindowRow;
        use lockscope_model::LockEntry;
        WindowFrame {
            seq,
            view_id: VIEW_ID,
            server_time: 0,
            waited_ms: 0,
            full: seq == 1,
            total: 2,
            offset: 0,
            order: order.map(|o| o.iter().map(|n| n.to_string()).collect()),
            rows: rows
                .iter()
                .map(|(name, t, n)| {
                    let (_, mut rec) = crate::record(0, 1, 0);
                    rec.purpose = format!("bench t={t} n={n}");
                    WindowRow {
                        entry: LockEntry::from_stored(name.to_string(), 1, 1, &rec.to_json()),
                        holder: Default::default(),
                        deadlock: false,
                        waiters: vec![],
                    }
                })
                .collect(),
            aggregates: None,
        }
    }

    #[test]
    fn latencies_and_writes_not_shown_in_time() {
        let mut v = Viewer {
            asked_at: 1_000,
            ..Viewer::default()
        };
        let mut w = Window::default();
        // The first frame's stamp predates the view: not timed.
        v.on_frame(
            1_050,
            frame(1, Some(&["a", "b"]), &[("a", 900, 1), ("b", 990, 2)]),
            &mut w,
            1000,
        )
        .unwrap();
        v.on_frame(1_120, frame(2, None, &[("a", 1_100, 3)]), &mut w, 1000)
            .unwrap();
        // b: written at 1_200 (n=4) and 1_300 (n=5); only n=5 shows, 2.5 s later.
        v.on_frame(3_800, frame(3, None, &[("b", 1_300, 5)]), &mut w, 1000)
            .unwrap();
        assert_eq!((v.latencies.clone(), v.untimed), (vec![20, 2_500], 2));
        v.ended_at = 10_000;
        let writes = [
            (1_100, 3, "a"),
            (1_200, 4, "b"),
            (1_300, 5, "b"),
            (1_400, 6, "c"),
            (2_000, 7, "a"),
        ]
        .map(|(t, n, name)| Write {
            name: name.into(),
            t,
            n,
        });
        v.judge(&writes, 1000);
        // a@1100 in time; b@1200 and b@1300 late; c never in the window; a@2000 never shown.
        assert_eq!((v.judged, v.stale, v.never), (4, 3, 1));
        assert!(v.lagged());
    }

    #[test]
    fn stamps_parse() {
        assert_eq!(stamp("bench t=1700000000000 n=42"), Some((1_700_000_000_000, 42)));
        assert_eq!(stamp("bench fill: batch 0 of tenant 3"), None);
    }
}
