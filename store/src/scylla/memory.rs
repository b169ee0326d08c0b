//! An in-memory CQL server for lockscope's statements, with lightweight-
//! transaction semantics: what the tests (and `scylla-memory:` fleets) run
//! against where no ScyllaDB or Cassandra can.
//!
//! It executes the statements' **text** ([`Stmt::cql`]), not a per-statement
//! imitation: a small interpreter of the CQL subset lockscope sends (SELECT by
//! key or whole table in pages, INSERT … IF NOT EXISTS, UPDATE/DELETE … IF
//! EXISTS or IF column = value AND …, USING TTL, CREATE TABLE IF NOT EXISTS,
//! and `system_schema.columns`). Tables are typed from their `CREATE TABLE`,
//! and a bound value of the wrong type, an unknown column or table is an error,
//! as a real server would answer.
//!
//! Semantics kept exactly: a conditional statement compares and writes in one
//! step (one mutex over the whole keyspace: linearizable, which per-partition
//! Paxos guarantees per row, and more); it answers `[applied]` followed by the
//! row as ScyllaDB does (every column, before the write, on success and
//! failure) or as Cassandra does (the conditioned columns, on failure only),
//! per [`Shape`]; conditions on a missing row see nulls; a null or an empty
//! list is no cell; a row exists while one of its cells (or the row marker an
//! INSERT writes) is unexpired; as many values as markers. TTLs expire on
//! tokio's clock (paused time in tests), exactly, where servers truncate the
//! write time to the second. Not emulated: consistency levels, replicas,
//! timeouts and LWTs of unknown outcome, Paxos contention, and the write
//! timestamps of mixed LWT and non-LWT writes (lockscope sends none).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::time::Instant;

use super::cql::{Cql, Page, Row, Stmt, Value};
use crate::StoreError;

mod parse;
mod table;

use parse::{parse, Lit, Parsed};
use table::{literal, Cells, Table, Type};

/// Which server's LWT answers to imitate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    Scylla,
    Cassandra,
}

/// The published schema's two tables, as its users created them.
pub const PUBLISHED_TABLES: [&str; 2] = [
    "CREATE TABLE IF NOT EXISTS KS.tokens (token text PRIMARY KEY, service_session_id text, timestamp timestamp)",
    "CREATE TABLE IF NOT EXISTS KS.token_times (service_session_id text PRIMARY KEY, tokens list<text>, \
     timestamp timestamp)",
];

/// An in-memory keyspace (cheap to clone: shared).
#[derive(Clone)]
pub struct MemoryCql {
    inner: Arc<Inner>,
}

struct Inner {
    keyspace: String,
    shape: Shape,
    tables: Mutex<BTreeMap<String, Table>>,
    sent: AtomicU64,
    /// Microseconds each statement waits before it runs (0: none).
    latency_us: AtomicU64,
}

impl MemoryCql {
    /// An empty keyspace.
    pub fn new(keyspace: &str, shape: Shape) -> MemoryCql {
        MemoryCql {
            inner: Arc::new(Inner {
                keyspace: keyspace.to_string(),
                shape,
                tables: Mutex::new(BTreeMap::new()),
                sent: AtomicU64::new(0),
                latency_us: AtomicU64::new(0),
            }),
        }
    }

    /// A keyspace holding only the published schema's two tables.
    pub fn published(keyspace: &str, shape: Shape) -> MemoryCql {
        let db = MemoryCql::new(keyspace, shape);
        for ddl in PUBLISHED_TABLES {
            db.execute(&ddl.replace("KS.", &format!("{keyspace}.")), Vec::new())
                .expect("the published schema parses");
        }
        db
    }

    /// A named in-memory keyspace shared by everything in this process that
    /// names it (`scylla-memory:NAME` fleets and their clients), created on
    /// first use with lockscope's tables, or with only the published two.
    pub fn named(name: &str, published: bool) -> MemoryCql {
        static NAMED: OnceLock<Mutex<BTreeMap<(String, bool), MemoryCql>>> = OnceLock::new();
        let mut named = NAMED.get_or_init(Default::default).lock().expect("not poisoned");
        named
            .entry((name.to_string(), published))
            .or_insert_with(|| match published {
                true => MemoryCql::published(super::DEFAULT_KEYSPACE, Shape::Scylla),
                false => MemoryCql::superset(super::DEFAULT_KEYSPACE, Shape::Scylla),
            })
            .clone()
    }

    /// A keyspace with lockscope's tables.
    pub fn superset(keyspace: &str, shape: Shape) -> MemoryCql {
        let db = MemoryCql::new(keyspace, shape);
        for &stmt in Stmt::ALL.iter().filter(|s| s.template().starts_with("CREATE")) {
            db.execute(&stmt.cql(keyspace), Vec::new())
                .expect("lockscope's tables parse");
        }
        db
    }

    /// Makes every statement wait `latency` before it runs, as a request
    /// crossing a network would (tests whose races need time to happen in).
    pub fn set_latency(&self, latency: Duration) {
        self.inner
            .latency_us
            .store(latency.as_micros() as u64, Ordering::Relaxed);
    }

    fn latency(&self) -> Option<Duration> {
        match self.inner.latency_us.load(Ordering::Relaxed) {
            0 => None,
            us => Some(Duration::from_micros(us)),
        }
    }

    pub fn keyspace(&self) -> &str {
        &self.inner.keyspace
    }

    /// Runs one statement's text with `values` bound in order.
    pub fn execute(&self, cql: &str, values: Vec<Value>) -> Result<Vec<Row>, StoreError> {
        self.inner.sent.fetch_add(1, Ordering::Relaxed);
        let parsed = parse(cql).map_err(|e| StoreError::backend_msg(format!("CQL {cql:?}: {e}")))?;
        let mut tables = self.inner.tables.lock().expect("not poisoned");
        self.apply(&mut tables, parsed, values, None)
            .map(|(rows, _)| rows)
            .map_err(|e| StoreError::backend_msg(format!("CQL {cql:?}: {e}")))
    }

    /// Runs a parsed statement; as many values as it has markers, as a
    /// server checks.
    fn apply(
        &self,
        tables: &mut BTreeMap<String, Table>,
        st: Parsed,
        values: Vec<Value>,
        page: Option<(usize, Option<String>)>,
    ) -> Result<(Vec<Row>, Option<String>), String> {
        let given = values.len();
        let mut binds = values.into_iter();
        let mut used = 0;
        let mut bind = |what: &str| {
            used += 1;
            binds.next().ok_or_else(|| format!("no value bound for {what}"))
        };
        let result = self.apply_bound(tables, st, &mut bind, page)?;
        if used != given {
            return Err(format!("{given} values bound to a statement with {used} markers"));
        }
        Ok(result)
    }

    fn apply_bound(
        &self,
        tables: &mut BTreeMap<String, Table>,
        st: Parsed,
        mut bind: impl FnMut(&str) -> Result<Value, String>,
        page: Option<(usize, Option<String>)>,
    ) -> Result<(Vec<Row>, Option<String>), String> {
        let now = Instant::now();
        let table_name = |t: &str| -> Result<String, String> {
            match t.split_once('.') {
                Some((ks, name)) if ks == self.inner.keyspace => Ok(name.to_string()),
                Some((ks, _)) => Err(format!("keyspace {ks} does not exist")),
                None => Err("table without keyspace".into()),
            }
        };
        match st {
            Parsed::Create { table, columns, key } => {
                let name = table_name(&table)?;
                tables.entry(name).or_insert_with(|| Table {
                    key,
                    order: columns.iter().map(|(c, _)| c.clone()).collect(),
                    columns: columns.into_iter().collect(),
                    rows: BTreeMap::new(),
                });
                Ok((Vec::new(), None))
            }
            Parsed::Select { table, columns, by_key } if table == "system_schema.columns" => {
                if columns != ["column_name"]
                    || by_key.len() != 2
                    || by_key.iter().any(|(_, l)| !matches!(l, Lit::Bind))
                {
                    return Err("unsupported system_schema query".into());
                }
                let (ks, tbl) = (bind("keyspace_name")?, bind("table_name")?);
                let rows = match (ks.as_text(), tbl.as_text()) {
                    (Some(ks), Some(t)) if ks == self.inner.keyspace => tables
                        .get(t)
                        .map(|t| {
                            t.order
                                .iter()
                                .map(|c| Row::from([("column_name".to_string(), Value::text(c.clone()))]))
                                .collect()
                        })
                        .unwrap_or_default(),
                    _ => Vec::new(),
                };
                Ok((rows, None))
            }
            Parsed::Select { table, columns, by_key } => {
                let t = tables.get(&table_name(&table)?).ok_or("unconfigured table")?;
                for c in &columns {
                    t.check_column(c)?;
                }
                let row_of = |key: &str, cells: &Cells| {
                    columns
                        .iter()
                        .map(|c| (c.clone(), t.cell(key, cells, c, now)))
                        .collect()
                };
                match by_key.as_slice() {
                    [(k, lit)] if *k == t.key => {
                        let key = t.key_value(literal(lit, &mut bind, k)?)?;
                        let rows = t
                            .rows
                            .get(&key)
                            .filter(|c| c.live(now))
                            .map(|cells| row_of(&key, cells))
                            .into_iter()
                            .collect();
                        Ok((rows, None))
                    }
                    [] => {
                        let (size, after) = page.unwrap_or((usize::MAX, None));
                        let mut rows = Vec::new();
                        let mut next = None;
                        let from = match &after {
                            Some(a) => std::ops::Bound::Excluded(a.clone()),
                            None => std::ops::Bound::Unbounded,
                        };
                        let mut last = None;
                        for (key, cells) in t.rows.range((from, std::ops::Bound::Unbounded)) {
                            if !cells.live(now) {
                                continue;
                            }
                            if rows.len() == size {
                                next = last;
                                break;
                            }
                            rows.push(row_of(key, cells));
                            last = Some(key.clone());
                        }
                        Ok((rows, next))
                    }
                    _ => Err("only the partition key may be restricted".into()),
                }
            }
            Parsed::Insert {
                table,
                columns,
                values,
                if_not_exists,
                ttl,
            } => {
                let shape = self.inner.shape;
                let t = tables.get_mut(&table_name(&table)?).ok_or("unconfigured table")?;
                let mut row = Vec::new();
                for (c, v) in columns.iter().zip(values) {
                    let v = match v {
                        Lit::Bind => bind(c)?,
                        Lit::Int(i) => match t.column_type(c)? {
                            Type::Int => Value::Int(i as i32),
                            _ => Value::BigInt(i),
                        },
                        Lit::EmptyList => Value::List(Vec::new()),
                        Lit::Null => Value::Null,
                    };
                    t.check_value(c, &v)?;
                    row.push((c.clone(), v));
                }
                let expires = ttl_of(if ttl { Some(bind("[ttl]")?) } else { None }, now)?;
                let key_col = t.key.clone();
                let key = row
                    .iter()
                    .find(|(c, _)| *c == key_col)
                    .map(|(_, v)| v.clone())
                    .ok_or("the partition key is missing")?;
                let key = t.key_value(key)?;
                let exists = t.rows.get(&key).is_some_and(|c| c.live(now));
                let before = t.row_before(&key, now);
                if if_not_exists && exists {
                    return Ok((vec![t.answer(false, before, shape, None)], None));
                }
                let cells = t.rows.entry(key).or_default();
                if !exists {
                    cells.0.clear();
                }
                cells.0.insert(String::new(), (Value::Null, expires));
                // The key is the row's name, not a cell: it never expires.
                for (c, v) in row.into_iter().filter(|(c, _)| *c != key_col) {
                    cells.write(c, v, expires);
                }
                Ok((
                    if_not_exists
                        .then(|| t.answer(true, before, shape, None))
                        .into_iter()
                        .collect(),
                    None,
                ))
            }
            Parsed::Update {
                table,
                ttl,
                set,
                key,
                cond,
            } => {
                let shape = self.inner.shape;
                let t = tables.get_mut(&table_name(&table)?).ok_or("unconfigured table")?;
                let expires = ttl_of(if ttl { Some(bind("[ttl]")?) } else { None }, now)?;
                let mut writes = Vec::new();
                for c in &set {
                    let v = bind(c)?;
                    t.check_value(c, &v)?;
                    writes.push((c.clone(), v));
                }
                let key = t.key_of(key, &mut bind)?;
                let cond = t.conditions(cond, &mut bind)?;
                if let Some(done) = t.check_conditions(&key, &cond, shape, now) {
                    return Ok((vec![done], None));
                }
                let before = t.row_before(&key, now);
                let cells = t.rows.entry(key).or_default();
                for (c, v) in writes {
                    cells.write(c, v, expires);
                }
                Ok((
                    cond.is_some()
                        .then(|| t.answer(true, before, shape, None))
                        .into_iter()
                        .collect(),
                    None,
                ))
            }
            Parsed::Delete { table, key, cond } => {
                let shape = self.inner.shape;
                let t = tables.get_mut(&table_name(&table)?).ok_or("unconfigured table")?;
                let key = t.key_of(key, &mut bind)?;
                let cond = t.conditions(cond, &mut bind)?;
                if let Some(done) = t.check_conditions(&key, &cond, shape, now) {
                    return Ok((vec![done], None));
                }
                let before = t.row_before(&key, now);
                t.rows.remove(&key);
                Ok((
                    cond.is_some()
                        .then(|| t.answer(true, before, shape, None))
                        .into_iter()
                        .collect(),
                    None,
                ))
            }
        }
    }
}

fn ttl_of(ttl: Option<Value>, now: Instant) -> Result<Option<Instant>, String> {
    match ttl {
        None | Some(Value::Int(0)) => Ok(None),
        Some(Value::Int(s)) if s > 0 => Ok(Some(now + Duration::from_secs(s as u64))),
        Some(other) => Err(format!("a TTL is a positive int, not {other:?}")),
    }
}

impl Cql for MemoryCql {
    fn run<'a>(&'a self, stmt: Stmt, values: Vec<Value>) -> BoxFuture<'a, Result<Vec<Row>, StoreError>> {
        Box::pin(async move {
            // A round trip's two halves: other tasks run while the request
            // travels and while the answer does, as they would on a network.
            match self.latency() {
                Some(d) => tokio::time::sleep(d).await,
                None => tokio::task::yield_now().await,
            }
            let result = self.execute(&stmt.cql(&self.inner.keyspace), values);
            tokio::task::yield_now().await;
            result
        })
    }

    fn page<'a>(&'a self, stmt: Stmt, size: i32, state: Option<Vec<u8>>) -> BoxFuture<'a, Result<Page, StoreError>> {
        let cql = stmt.cql(&self.inner.keyspace);
        let read = move || {
            self.inner.sent.fetch_add(1, Ordering::Relaxed);
            let parsed = parse(&cql).map_err(|e| StoreError::backend_msg(format!("CQL {cql:?}: {e}")))?;
            let after = state.map(|s| String::from_utf8_lossy(&s).into_owned());
            let size = usize::try_from(size).ok().filter(|s| *s > 0).unwrap_or(5000);
            let mut tables = self.inner.tables.lock().expect("not poisoned");
            let (rows, next) = self
                .apply(&mut tables, parsed, Vec::new(), Some((size, after)))
                .map_err(|e| StoreError::backend_msg(format!("CQL {cql:?}: {e}")))?;
            Ok(Page {
                rows,
                next: next.map(String::into_bytes),
            })
        };
        Box::pin(async move {
            // Like every statement (`set_latency`): a cluster that stops
            // answering answers no page either.
            if let Some(d) = self.latency() {
                tokio::time::sleep(d).await;
            }
            let result = read();
            tokio::task::yield_now().await;
            result
        })
    }

    fn sent(&self) -> u64 {
        self.inner.sent.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests;
