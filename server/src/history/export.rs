//! History exports, streamed: CSV (for spreadsheets) and NDJSON (for tools),
//! written row by row as the database returns them, so memory stays flat in the
//! number of events.
//!
//! Both start with one header line that names the format version, the fields
//! and the query: NDJSON `{"lockscope_history":1,"fields":[…],"query":{…}}`,
//! CSV `# lockscope history v1 fields=… query=…` followed by the column names.
//! CSV cells typed by people are guarded against formula injection as the
//! audit export's are.

use futures::{Stream, StreamExt};
use lockscope_model::history::{HistoryEvent, HistoryQuery};
use lockscope_model::time::rfc3339;

use super::{History, HistoryError};
use crate::audit::export::guard;

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

/// The events of `q` as lines of `format`, header first, chunked a few hundred
/// rows at a time. An error mid-way ends the stream with that error (a reader
/// sees a cut file, never a silently short one).
pub fn stream_export(
    history: &History,
    q: &HistoryQuery,
    format: Format,
) -> impl Stream<Item = Result<String, HistoryError>> + Send + 'static {
    let header = header(q, format);
    let rows = history.events(q, q.limit).ready_chunks(256).map(move |chunk| {
        let mut out = Vec::with_capacity(chunk.len() * 512);
        match format {
            Format::Csv => {
                let mut w = csv::Writer::from_writer(out);
                for ev in chunk {
                    csv_row(&mut w, &ev?);
                }
                out = w.into_inner().expect("writing CSV to memory cannot fail");
            }
            Format::Ndjson => {
                for ev in chunk {
                    serde_json::to_writer(&mut out, &ev?).expect("events serialise");
                    out.push(b'\n');
                }
            }
        }
        Ok(String::from_utf8(out).expect("CSV and JSON of UTF-8 strings are UTF-8"))
    });
    futures::stream::once(async move { Ok(header) }).chain(rows)
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
