//! Reading keys as locks, in pipelines: `TYPE` of each key, then `PTTL`/`GET`
//! of the strings (`SET NX PX` locks) and `PTTL`/`HGETALL` of the hashes with
//! their fair-lock queue and deadlines (Redisson, [`super::redisson`]). Shared
//! by the `redis://` observer and admin side and by Redlock's
//! ([`crate::redlock`], which reads strings only).

use redis::aio::MultiplexedConnection;
use redis::Value;

use super::{redisson, timed};
use crate::StoreError;

/// One key as read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Read {
    /// A string: its token and `PTTL` (ms; `-1`: no expiry).
    Token { key: String, token: Vec<u8>, pttl: i64 },
    /// A Redisson hash: its holder's field, count, `PTTL`, and the fair
    /// lock's queue (waiter, deadline), in order: its first
    /// waiters only, as many as the fleet's `queue=` (`truncated`: it holds more).
    Redisson {
        key: String,
        field: String,
        count: i64,
        pttl: i64,
        queue: Vec<(String, Option<i64>)>,
        truncated: bool,
    },
}

impl Read {
    pub(crate) fn key(&self) -> &str {
        match self {
            Read::Token { key, .. } | Read::Redisson { key, .. } => key,
        }
    }
}

fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        Value::Int(i) => Some(i.to_string()),
        Value::Double(d) => Some(d.to_string()),
        _ => None,
    }
}

/// A flat `[a, b, a, b…]` reply (or a RESP3 map) as pairs.
fn pairs(v: &Value) -> Vec<(String, String)> {
    match v {
        Value::Array(items) => items
            .chunks(2)
            .filter_map(|p| Some((text(p.first()?)?, text(p.get(1)?)?)))
            .collect(),
        Value::Map(items) => items.iter().filter_map(|(a, b)| Some((text(a)?, text(b)?))).collect(),
        _ => Vec::new(),
    }
}

fn list(v: &Value) -> Vec<String> {
    match v {
        Value::Array(items) => items.iter().filter_map(text).collect(),
        _ => Vec::new(),
    }
}

/// `keys` as locks (strings, and Redisson hashes when `hashes` is
/// `Some(queue)`: at most `queue` waiters of a fair lock read). A key gone
/// or retyped in between, or not of a known layout, is left out.
pub(crate) async fn read_keys(
    con: &mut MultiplexedConnection,
    keys: Vec<String>,
    hashes: Option<usize>,
) -> Result<Vec<Read>, StoreError> {
    if keys.is_empty() {
        return Ok(Vec::new());
    }
    let mut types = redis::pipe();
    for k in &keys {
        types.cmd("TYPE").arg(k);
    }
    let kinds: Vec<String> = timed(types.query_async(con)).await?;
    let wanted: Vec<(String, bool)> = keys
        .into_iter()
        .zip(kinds)
        .filter_map(|(k, t)| match t.as_str() {
            "string" => Some((k, false)),
            "hash" if hashes.is_some() => Some((k, true)),
            _ => None,
        })
        .collect();
    if wanted.is_empty() {
        return Ok(Vec::new());
    }
    let max_queue = hashes.unwrap_or(0);
    let mut reads = redis::pipe();
    for (k, hash) in &wanted {
        if *hash {
            reads
                .cmd("PTTL")
                .arg(k)
                .cmd("HGETALL")
                .arg(k)
                // One more than shown: whether the queue holds more.
                .cmd("LRANGE")
                .arg(redisson::queue_key(k))
                .arg(0)
                .arg(max_queue)
                .cmd("ZRANGE")
                .arg(redisson::timeout_key(k))
                .arg(0)
                .arg(max_queue)
                .arg("WITHSCORES");
        } else {
            reads.cmd("PTTL").arg(k).cmd("GET").arg(k);
        }
    }
    let values: Vec<Value> = timed(reads.query_async(con)).await?;
    let mut values = values.into_iter();
    let mut out = Vec::with_capacity(wanted.len());
    for (key, hash) in wanted {
        let got: Vec<Value> = values.by_ref().take(if hash { 4 } else { 2 }).collect();
        let pttl = match got.first() {
            Some(Value::Int(p)) if *p != -2 => *p,
            _ => continue,
        };
        match (hash, got.get(1), got.get(2), got.get(3)) {
            (true, Some(fields), Some(queue), Some(deadlines)) => {
                let Some((field, count)) = redisson::holder(&pairs(fields)) else {
                    continue;
                };
                let deadlines: std::collections::HashMap<String, String> = pairs(deadlines).into_iter().collect();
                let mut queue = list(queue);
                let truncated = queue.len() > max_queue;
                queue.truncate(max_queue);
                let queue = queue
                    .into_iter()
                    .map(|id| {
                        let at = deadlines.get(&id).and_then(|s| s.parse::<f64>().ok()).map(|f| f as i64);
                        (id, at)
                    })
                    .collect();
                out.push(Read::Redisson {
                    key,
                    field,
                    count,
                    pttl,
                    queue,
                    truncated,
                });
            }
            (false, Some(Value::BulkString(token)), _, _) => out.push(Read::Token {
                key,
                token: token.clone(),
                pttl,
            }),
            _ => {}
        }
    }
    Ok(out)
}

/// Every key of `pattern` (`SCAN … MATCH … COUNT`, never `KEYS`), sorted
/// and without the repeats `SCAN` may give.
pub(crate) async fn scan_keys(
    con: &mut MultiplexedConnection,
    pattern: &str,
    count: usize,
) -> Result<Vec<String>, StoreError> {
    let mut all = Vec::new();
    let mut cursor: u64 = 0;
    loop {
        let (next, keys): (u64, Vec<String>) = timed(
            redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(pattern)
                .arg("COUNT")
                .arg(count)
                .query_async(con),
        )
        .await?;
        all.extend(keys);
        if next == 0 {
            break;
        }
        cursor = next;
    }
    all.sort();
    all.dedup();
    Ok(all)
}
