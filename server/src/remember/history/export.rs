//! History exports, streamed: CSV (for spreadsheets) and NDJSON (for tools),
//! read a page at a time, so memory stays flat in the number of events.
//!
//! A slow reader holds no database connection: each page of
//! [`EXPORT_PAGE_ROWS`] events is one short query on the exports' own pool
//! (keyset-paged: the next page starts after the last `(at, seq)` sent), and
//! the connection goes back before the page is handed on. A page also ends
//! once its events reach [`EXPORT_PAGE_BYTES`] (a lock record may be 256 KiB):
//! the rows are read one by one and the query is dropped there, and the next
//! page continues after the last event kept. So an export holds at most about
//! three pages (one being made, one queued, one being sent) of 4 MiB each. So an export is not
//! one snapshot: an event written meanwhile is in it if it sorts after what was
//! already sent, and one the retention removes meanwhile may be missing.
//!
//! A task makes the pages, one ahead of its reader. With an [`ExportPermit`]
//! (an admitted download), a reader that takes nothing for the permit's idle
//! timeout ends the export: the task stops, the permit goes back, the stall is
//! counted, and the reader's next read is an error (a cut file, never a
//! silently short one).
//!
//! Both start with one header line that names the format version, the fields
//! and the query: NDJSON `{"lockscope_history":1,"fields":[…],"query":{…}}`,
//! CSV `# lockscope history v1 fields=… query=…` followed by the column names.
//! CSV cells typed by people are guarded against formula injection as the
//! audit export's are.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use futures::{Stream, StreamExt};
use lockscope_model::history::{HistoryEvent, HistoryQuery};
use lockscope_model::time::{rfc3339, Millis};
use sqlx::Row;
use tokio::sync::mpsc;

use super::{sql, ExportPermit, History, HistoryError};
use crate::remember::audit::export::guard;

/// Events per page of an export: one query each.
pub const EXPORT_PAGE_ROWS: u32 = 500;

/// A page of an export ends once its events' text reaches this many bytes
/// (at least one event per page, so at most this plus one record).
pub const EXPORT_PAGE_BYTES: usize = 4 << 20;

/// The export format's version (the header's `lockscope_history`).
pub const EXPORT_VERSION: u32 = 1;

/// The fields of both formats, in order.
pub const FIELDS: [&str; 14] = [
    "id", "at", "fleet", "kind", "lock", "session", "owner", "fence", "revision", "service", "host", "actor", "detail",
    "record",
];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Csv,
    Ndjson,
}

impl Format {
    pub fn parse(s: &str) -> Option<Format> {
        match s {
            "csv" => Some(Format::Csv),
            "ndjson" | "jsonl" => Some(Format::Ndjson),
            _ => None,
        }
    }

    pub fn content_type(self) -> &'static str {
        match self {
            Format::Csv => "text/csv; charset=utf-8",
            Format::Ndjson => "application/x-ndjson",
        }
    }
}

/// The events of `q` (at most its limit) as lines of `format`, header first,
/// then one chunk per page. An error mid-way ends the stream with that error
/// (a reader sees a cut file, never a silently short one). With `permit`, a
/// reader idle for its timeout ends the export (see the module's docs); the
/// command line's export passes none (a pager may wait as long as it likes).
pub fn stream_export(
    history: &History,
    q: &HistoryQuery,
    format: Format,
    permit: Option<ExportPermit>,
) -> impl Stream<Item = Result<String, HistoryError>> + Send + 'static {
    let (tx, rx) = mpsc::channel(1);
    let finished = Arc::new(AtomicBool::new(false));
    tokio::spawn(produce(
        history.clone(),
        q.clone(),
        format,
        permit,
        tx,
        finished.clone(),
    ));
    futures::stream::unfold((rx, finished, false), |(mut rx, finished, cut)| async move {
        if cut {
            return None;
        }
        match rx.recv().await {
            Some(item) => Some((item, (rx, finished, false))),
            // The task ended without saying it was done (its reader was idle
            // past the timeout): a cut, not an end.
            None if !finished.load(Ordering::Acquire) => {
                let why = "the export was ended before its last event (its reader took nothing for too long)";
                Some((Err(HistoryError::Export(why.into())), (rx, finished, true)))
            }
            None => None,
        }
    })
}

/// Makes `q`'s export, a page at a time, for as long as its reader keeps up.
async fn produce(
    history: History,
    q: HistoryQuery,
    format: Format,
    permit: Option<ExportPermit>,
    tx: mpsc::Sender<Result<String, HistoryError>>,
    finished: Arc<AtomicBool>,
) {
    let out = Outlet { permit, tx };
    let send = |item| deliver(&out, item, &q.fleet);
    if !send(Ok(header(&q, format))).await {
        return;
    }
    let mut after = None;
    let mut left = q.limit.map(u64::from);
    while left != Some(0) {
        let rows = left.map_or(EXPORT_PAGE_ROWS, |n| n.min(EXPORT_PAGE_ROWS as u64) as u32);
        let (page, more) = match history.export_page(&q, after, rows, EXPORT_PAGE_BYTES).await {
            Ok(page) => page,
            // The error, once taken, is the reader's signal of a cut.
            Err(e) => {
                if send(Err(e)).await {
                    finished.store(true, Ordering::Release);
                }
                return;
            }
        };
        let Some((at, seq, _)) = page.last() else { break };
        after = Some((*at, *seq));
        left = left.map(|n| n - page.len() as u64);
        if !send(Ok(lines(page.into_iter().map(|(_, _, e)| e), format))).await {
            return;
        }
        if !more {
            break;
        }
    }
    finished.store(true, Ordering::Release);
}

/// An export's way to its reader. Fields drop in order: the permit is given
/// back before the channel closes, so a reader that has seen the end can start
/// its next export at once (the other way round, it could be refused).
struct Outlet {
    permit: Option<ExportPermit>,
    tx: mpsc::Sender<Result<String, HistoryError>>,
}

/// Whether the reader took `item` (within the permit's idle timeout, if any);
/// `false`: stop.
async fn deliver(out: &Outlet, item: Result<String, HistoryError>, fleet: &str) -> bool {
    let Some(permit) = &out.permit else {
        return out.tx.send(item).await.is_ok();
    };
    match tokio::time::timeout(permit.idle(), out.tx.send(item)).await {
        Ok(sent) => sent.is_ok(),
        Err(_) => {
            permit.stats().exports_stalled.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(%fleet, idle = ?permit.idle(), "history export ended: its reader took nothing");
            false
        }
    }
}

/// `events` as lines of `format`.
fn lines(events: impl Iterator<Item = HistoryEvent>, format: Format) -> String {
    let mut out = Vec::with_capacity(EXPORT_PAGE_ROWS as usize * 512);
    match format {
        Format::Csv => {
            let mut w = csv::Writer::from_writer(out);
            for ev in events {
                csv_row(&mut w, &ev);
            }
            out = w.into_inner().expect("writing CSV to memory cannot fail");
        }
        Format::Ndjson => {
            for ev in events {
                serde_json::to_writer(&mut out, &ev).expect("events serialise");
                out.push(b'\n');
            }
        }
    }
    String::from_utf8(out).expect("CSV and JSON of UTF-8 strings are UTF-8")
}

impl History {
    /// At most `rows` events of `q` after the key `after` (`(at, seq)`: the
    /// export's order), each with its key, and no more once their bytes
    /// ([`event_bytes`]) reach `budget`: one query on the exports' pool, its
    /// connection back in the pool when this returns. The flag: whether the
    /// page was cut (by `rows` or `budget`), so more may follow.
    async fn export_page(
        &self,
        q: &HistoryQuery,
        after: Option<(Millis, i64)>,
        rows: u32,
        budget: usize,
    ) -> Result<(Vec<(Millis, i64, HistoryEvent)>, bool), HistoryError> {
        let (mut clause, mut binds) = sql::filter(q);
        if let Some((at, seq)) = after {
            let n = binds.len();
            // `at >= …` first, so the (fleet, at) index bounds the scan.
            clause.push_str(&format!(
                " AND at >= ${} AND (at > ${} OR seq > ${})",
                n + 1,
                n + 2,
                n + 3
            ));
            binds.extend([sql::Bind::Int(at), sql::Bind::Int(at), sql::Bind::Int(seq)]);
        }
        let text = format!(
            "SELECT seq, {} FROM history_events WHERE {clause} ORDER BY at, seq LIMIT {rows}",
            sql::COLUMNS
        );
        let text = self.sql(&text);
        let what = "reading events for an export";
        // Row by row, so a page of large records stops at the budget rather
        // than after all `rows` are in memory.
        let mut stream = sql::bind(sqlx::query(&text), binds).fetch(&self.inner.export);
        let (mut page, mut bytes) = (Vec::new(), 0);
        while let Some(row) = stream.next().await {
            let row = row.map_err(|e| self.error(what, e))?;
            let e = sql::event(&row).map_err(|e| self.error(what, e))?;
            let seq = row.try_get::<i64, _>("seq").map_err(|e| self.error(what, e))?;
            bytes += event_bytes(&e);
            page.push((e.at, seq, e));
            if bytes >= budget {
                return Ok((page, true));
            }
        }
        let more = page.len() as u32 == rows;
        Ok((page, more))
    }
}

/// About how many bytes `e` takes (its texts, plus a little for the rest):
/// what the pages' and answers' byte budgets count.
pub fn event_bytes(e: &HistoryEvent) -> usize {
    let opt = |v: &Option<String>| v.as_ref().map_or(0, String::len);
    64 + e.id.len()
        + e.fleet.len()
        + e.detail.len()
        + [&e.lock, &e.session, &e.owner, &e.service, &e.host, &e.actor, &e.record]
            .into_iter()
            .map(opt)
            .sum::<usize>()
}

fn header(q: &HistoryQuery, format: Format) -> String {
    match format {
        Format::Ndjson => {
            let h = serde_json::json!({ "lockscope_history": EXPORT_VERSION, "fields": FIELDS, "query": q });
            format!("{h}\n")
        }
        Format::Csv => {
            let query = serde_json::to_string(q).expect("queries serialise");
            let mut w = csv::Writer::from_writer(Vec::new());
            w.write_record(FIELDS).expect("writing CSV to memory cannot fail");
            let names = String::from_utf8(w.into_inner().expect("in memory")).expect("UTF-8");
            format!(
                "# lockscope history v{EXPORT_VERSION} fields={} query={query}\n{names}",
                FIELDS.join(",")
            )
        }
    }
}

fn csv_row(w: &mut csv::Writer<Vec<u8>>, e: &HistoryEvent) {
    let opt = |v: &Option<String>| v.as_deref().map(guard).unwrap_or_default().into_owned();
    let num = |v: Option<i64>| v.map(|n| n.to_string()).unwrap_or_default();
    w.write_record([
        e.id.clone(),
        rfc3339(e.at),
        guard(&e.fleet).into_owned(),
        e.kind.as_str().to_string(),
        opt(&e.lock),
        opt(&e.session),
        opt(&e.owner),
        num(e.fence),
        num(e.revision),
        opt(&e.service),
        opt(&e.host),
        opt(&e.actor),
        guard(&e.detail).into_owned(),
        opt(&e.record),
    ])
    .expect("writing CSV to memory cannot fail");
}
