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
//! per [`Shape`]; conditions on a missing row see nulls; a row exists while
//! one of its cells (or the row marker an INSERT writes) is unexpired; TTLs
//! expire on tokio's clock (paused time in tests). Not emulated: consistency
//! levels, replicas, timeouts, and the write timestamps of mixed LWT and
//! non-LWT writes.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::time::Instant;

use super::cql::{Cql, Page, Row, Stmt, Value};
use crate::StoreError;

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
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Type {
    Text,
    BigInt,
    Int,
    Timestamp,
    Boolean,
    TextList,
}

struct Table {
    key: String,
    columns: BTreeMap<String, Type>,
    /// Column order, for `[applied]` answers.
    order: Vec<String>,
    rows: BTreeMap<String, Cells>,
}

/// A row's cells with their expiry; `""` is the row marker an INSERT writes.
#[derive(Default)]
struct Cells(BTreeMap<String, (Value, Option<Instant>)>);

impl Cells {
    fn live(&self, now: Instant) -> bool {
        self.0.values().any(|(_, exp)| exp.is_none_or(|e| e > now))
    }

    fn get(&self, col: &str, now: Instant) -> Value {
        match self.0.get(col) {
            Some((v, exp)) if exp.is_none_or(|e| e > now) => v.clone(),
            _ => Value::Null,
        }
    }
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
        for stmt in Stmt::ALL.into_iter().filter(|s| s.template().starts_with("CREATE")) {
            db.execute(&stmt.cql(keyspace), Vec::new())
                .expect("lockscope's tables parse");
        }
        db
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

    fn apply(
        &self,
        tables: &mut BTreeMap<String, Table>,
        st: Parsed,
        values: Vec<Value>,
        page: Option<(usize, Option<String>)>,
    ) -> Result<(Vec<Row>, Option<String>), String> {
        let now = Instant::now();
        let mut binds = values.into_iter();
        let mut bind = |what: &str| binds.next().ok_or_else(|| format!("no value bound for {what}"));
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
                let row_of = |cells: &Cells| columns.iter().map(|c| (c.clone(), cells.get(c, now))).collect();
                match by_key.as_slice() {
                    [(k, lit)] if *k == t.key => {
                        let key = t.key_value(literal(lit, &mut bind, k)?)?;
                        let rows = t
                            .rows
                            .get(&key)
                            .filter(|c| c.live(now))
                            .map(row_of)
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
                        for (key, cells) in t.rows.range((from, std::ops::Bound::Unbounded)) {
                            if !cells.live(now) {
                                continue;
                            }
                            if rows.len() == size {
                                next = Some(rows_last_key(&rows, &t.key));
                                break;
                            }
                            let _ = key;
                            rows.push(row_of(cells));
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
                for (c, v) in row {
                    cells.0.insert(c, (v, expires));
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
                    match v {
                        Value::Null => cells.0.remove(&c),
                        v => cells.0.insert(c, (v, expires)),
                    };
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

/// A key's value: bound, or an integer literal (`WHERE id = 1`).
fn literal(lit: &Lit, bind: &mut impl FnMut(&str) -> Result<Value, String>, what: &str) -> Result<Value, String> {
    match lit {
        Lit::Bind => bind(what),
        Lit::Int(i) => i32::try_from(*i)
            .map(Value::Int)
            .map_err(|_| format!("{i} is not an int")),
        _ => Err(format!("unsupported key for {what}")),
    }
}

fn rows_last_key(rows: &[Row], key: &str) -> String {
    rows.last()
        .and_then(|r| r.get(key))
        .and_then(Value::as_text)
        .unwrap_or_default()
        .to_string()
}

fn ttl_of(ttl: Option<Value>, now: Instant) -> Result<Option<Instant>, String> {
    match ttl {
        None | Some(Value::Int(0)) => Ok(None),
        Some(Value::Int(s)) if s > 0 => Ok(Some(now + Duration::from_secs(s as u64))),
        Some(other) => Err(format!("a TTL is a positive int, not {other:?}")),
    }
}

/// A statement's IF clause, bound.
enum Cond {
    Exists,
    NotExists,
    Equal(Vec<(String, Value)>),
}

impl Table {
    fn check_column(&self, c: &str) -> Result<(), String> {
        self.columns
            .contains_key(c)
            .then_some(())
            .ok_or_else(|| format!("Undefined column name {c}"))
    }

    fn column_type(&self, c: &str) -> Result<Type, String> {
        self.columns
            .get(c)
            .copied()
            .ok_or_else(|| format!("Undefined column name {c}"))
    }

    fn check_value(&self, c: &str, v: &Value) -> Result<(), String> {
        let ok = match (self.column_type(c)?, v) {
            (_, Value::Null) => true,
            (Type::Text, Value::Text(_))
            | (Type::BigInt, Value::BigInt(_))
            | (Type::Int, Value::Int(_))
            | (Type::Timestamp, Value::Timestamp(_))
            | (Type::Boolean, Value::Boolean(_)) => true,
            (Type::TextList, Value::List(items)) => items.iter().all(|i| matches!(i, Value::Text(_))),
            _ => false,
        };
        ok.then_some(())
            .ok_or_else(|| format!("a {v:?} cannot be written to column {c} of type {:?}", self.columns[c]))
    }

    /// The partition key a write names, bound or literal.
    fn key_of(
        &self,
        (name, lit): (String, Lit),
        bind: &mut impl FnMut(&str) -> Result<Value, String>,
    ) -> Result<String, String> {
        if name != self.key {
            return Err(format!("{name} is not the partition key"));
        }
        self.key_value(literal(&lit, bind, &name)?)
    }

    fn key_value(&self, v: Value) -> Result<String, String> {
        match v {
            Value::Text(s) => Ok(s),
            Value::Int(i) => Ok(format!("{i:020}")),
            other => Err(format!("unsupported key {other:?}")),
        }
    }

    fn row_before(&self, key: &str, now: Instant) -> Option<Row> {
        let cells = self.rows.get(key).filter(|c| c.live(now))?;
        Some(self.order.iter().map(|c| (c.clone(), cells.get(c, now))).collect())
    }

    fn conditions(
        &self,
        cond: Option<ParsedCond>,
        bind: &mut impl FnMut(&str) -> Result<Value, String>,
    ) -> Result<Option<Cond>, String> {
        Ok(match cond {
            None => None,
            Some(ParsedCond::Exists) => Some(Cond::Exists),
            Some(ParsedCond::NotExists) => Some(Cond::NotExists),
            Some(ParsedCond::Equal(cols)) => {
                let mut out = Vec::new();
                for (c, lit) in cols {
                    let v = match lit {
                        Lit::Bind => bind(&c)?,
                        Lit::Null => Value::Null,
                        Lit::Int(i) => Value::BigInt(i),
                        Lit::EmptyList => Value::List(Vec::new()),
                    };
                    self.check_value(&c, &v)?;
                    out.push((c, v));
                }
                Some(Cond::Equal(out))
            }
        })
    }

    /// `Some(answer)` when the condition fails (nothing is written).
    fn check_conditions(&self, key: &str, cond: &Option<Cond>, shape: Shape, now: Instant) -> Option<Row> {
        let before = self.row_before(key, now);
        let cell = |c: &str| before.as_ref().map_or(Value::Null, |r| r[c].clone());
        let holds = match cond {
            None => return None,
            Some(Cond::Exists) => before.is_some(),
            Some(Cond::NotExists) => before.is_none(),
            Some(Cond::Equal(cols)) => cols.iter().all(|(c, v)| cell(c) == *v),
        };
        if holds {
            return None;
        }
        let conditioned: Option<Vec<String>> = match cond {
            Some(Cond::Equal(cols)) => Some(cols.iter().map(|(c, _)| c.clone()).collect()),
            _ => None,
        };
        Some(self.answer(false, before, shape, conditioned))
    }

    /// An LWT's answer: `[applied]` and the columns `shape` returns with it.
    fn answer(&self, applied: bool, before: Option<Row>, shape: Shape, conditioned: Option<Vec<String>>) -> Row {
        let mut row = Row::from([("[applied]".to_string(), Value::Boolean(applied))]);
        match shape {
            // Every column of the row as it was (nulls when there was none).
            Shape::Scylla => {
                for c in &self.order {
                    let v = before.as_ref().map_or(Value::Null, |r| r[c].clone());
                    row.insert(c.clone(), v);
                }
            }
            // On failure only: the conditioned columns, or the existing row for
            // IF NOT EXISTS; nothing for a row that does not exist.
            Shape::Cassandra if !applied => {
                if let Some(before) = before {
                    match conditioned {
                        Some(cols) => {
                            for c in cols {
                                row.insert(c.clone(), before[&c].clone());
                            }
                        }
                        None => row.extend(before),
                    }
                }
            }
            Shape::Cassandra => {}
        }
        row
    }
}

impl Cql for MemoryCql {
    fn run<'a>(&'a self, stmt: Stmt, values: Vec<Value>) -> BoxFuture<'a, Result<Vec<Row>, StoreError>> {
        Box::pin(async move {
            // A round trip's two halves: other tasks run while the request
            // travels and while the answer does, as they would on a network.
            tokio::task::yield_now().await;
            let result = self.execute(&stmt.cql(&self.inner.keyspace), values);
            tokio::task::yield_now().await;
            result
        })
    }

    fn page<'a>(&'a self, stmt: Stmt, size: i32, state: Option<Vec<u8>>) -> BoxFuture<'a, Result<Page, StoreError>> {
        let cql = stmt.cql(&self.inner.keyspace);
        let result = (|| {
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
        })();
        Box::pin(async move {
            tokio::task::yield_now().await;
            result
        })
    }

    fn sent(&self) -> u64 {
        self.inner.sent.load(Ordering::Relaxed)
    }
}

// ---- The CQL subset's parser. ----

enum Lit {
    Bind,
    Null,
    Int(i64),
    EmptyList,
}

enum ParsedCond {
    Exists,
    NotExists,
    Equal(Vec<(String, Lit)>),
}

enum Parsed {
    Create {
        table: String,
        columns: Vec<(String, Type)>,
        key: String,
    },
    Select {
        table: String,
        columns: Vec<String>,
        by_key: Vec<(String, Lit)>,
    },
    Insert {
        table: String,
        columns: Vec<String>,
        values: Vec<Lit>,
        if_not_exists: bool,
        ttl: bool,
    },
    Update {
        table: String,
        ttl: bool,
        set: Vec<String>,
        key: (String, Lit),
        cond: Option<ParsedCond>,
    },
    Delete {
        table: String,
        key: (String, Lit),
        cond: Option<ParsedCond>,
    },
}

fn tokens(cql: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    for ch in cql.chars() {
        if ch.is_alphanumeric() || ch == '_' || ch == '.' {
            word.push(ch);
            continue;
        }
        if !word.is_empty() {
            out.push(std::mem::take(&mut word));
        }
        if !ch.is_whitespace() {
            out.push(ch.to_string());
        }
    }
    if !word.is_empty() {
        out.push(word);
    }
    out
}

struct Cursor {
    t: Vec<String>,
    at: usize,
}

impl Cursor {
    fn peek(&self) -> Option<&str> {
        self.t.get(self.at).map(String::as_str)
    }

    fn next(&mut self) -> Result<String, String> {
        let t = self.t.get(self.at).cloned().ok_or("unexpected end of statement")?;
        self.at += 1;
        Ok(t)
    }

    fn eat(&mut self, word: &str) -> bool {
        if self.peek().is_some_and(|p| p.eq_ignore_ascii_case(word)) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    fn expect(&mut self, word: &str) -> Result<(), String> {
        if self.eat(word) {
            Ok(())
        } else {
            Err(format!("expected {word}, found {:?}", self.peek()))
        }
    }

    fn ident(&mut self) -> Result<String, String> {
        let t = self.next()?;
        if t.chars().all(|c| c.is_alphanumeric() || c == '_' || c == '.') {
            Ok(t)
        } else {
            Err(format!("expected a name, found {t:?}"))
        }
    }

    fn lit(&mut self) -> Result<Lit, String> {
        let t = self.next()?;
        match t.as_str() {
            "?" => Ok(Lit::Bind),
            "[" => {
                self.expect("]")?;
                Ok(Lit::EmptyList)
            }
            t if t.eq_ignore_ascii_case("null") => Ok(Lit::Null),
            t => t
                .parse()
                .map(Lit::Int)
                .map_err(|_| format!("unsupported literal {t:?}")),
        }
    }

    fn ttl(&mut self) -> Result<bool, String> {
        if self.eat("USING") {
            self.expect("TTL")?;
            self.expect("?")?;
            return Ok(true);
        }
        Ok(false)
    }

    fn condition(&mut self) -> Result<Option<ParsedCond>, String> {
        if !self.eat("IF") {
            return Ok(None);
        }
        if self.eat("EXISTS") {
            return Ok(Some(ParsedCond::Exists));
        }
        if self.eat("NOT") {
            self.expect("EXISTS")?;
            return Ok(Some(ParsedCond::NotExists));
        }
        let mut cols = Vec::new();
        loop {
            let c = self.ident()?;
            self.expect("=")?;
            cols.push((c, self.lit()?));
            if !self.eat("AND") {
                return Ok(Some(ParsedCond::Equal(cols)));
            }
        }
    }

    fn key(&mut self) -> Result<Vec<(String, Lit)>, String> {
        let mut keys = Vec::new();
        if self.eat("WHERE") {
            loop {
                let k = self.ident()?;
                self.expect("=")?;
                keys.push((k, self.lit()?));
                if !self.eat("AND") {
                    break;
                }
            }
        }
        Ok(keys)
    }

    fn list(&mut self) -> Result<Vec<String>, String> {
        let mut out = vec![self.ident()?];
        while self.eat(",") {
            out.push(self.ident()?);
        }
        Ok(out)
    }

    fn end(&self) -> Result<(), String> {
        match self.peek() {
            None => Ok(()),
            Some(t) => Err(format!("unexpected {t:?}")),
        }
    }
}

fn type_of(c: &mut Cursor) -> Result<Type, String> {
    let t = c.ident()?.to_ascii_lowercase();
    Ok(match t.as_str() {
        "text" => Type::Text,
        "bigint" => Type::BigInt,
        "int" => Type::Int,
        "timestamp" => Type::Timestamp,
        "boolean" => Type::Boolean,
        "list" => {
            c.expect("<")?;
            c.expect("text")?;
            c.expect(">")?;
            Type::TextList
        }
        other => return Err(format!("unsupported type {other}")),
    })
}

fn parse(cql: &str) -> Result<Parsed, String> {
    let mut c = Cursor { t: tokens(cql), at: 0 };
    let parsed = if c.eat("CREATE") {
        c.expect("TABLE")?;
        c.expect("IF")?;
        c.expect("NOT")?;
        c.expect("EXISTS")?;
        let table = c.ident()?;
        c.expect("(")?;
        let mut columns = Vec::new();
        let mut key = None;
        loop {
            let name = c.ident()?;
            columns.push((name.clone(), type_of(&mut c)?));
            if c.eat("PRIMARY") {
                c.expect("KEY")?;
                key = Some(name);
            }
            if !c.eat(",") {
                break;
            }
        }
        c.expect(")")?;
        Parsed::Create {
            table,
            columns,
            key: key.ok_or("no PRIMARY KEY")?,
        }
    } else if c.eat("SELECT") {
        let columns = c.list()?;
        c.expect("FROM")?;
        let table = c.ident()?;
        let by_key = c.key()?;
        Parsed::Select { table, columns, by_key }
    } else if c.eat("INSERT") {
        c.expect("INTO")?;
        let table = c.ident()?;
        c.expect("(")?;
        let columns = c.list()?;
        c.expect(")")?;
        c.expect("VALUES")?;
        c.expect("(")?;
        let mut values = vec![c.lit()?];
        while c.eat(",") {
            values.push(c.lit()?);
        }
        c.expect(")")?;
        if values.len() != columns.len() {
            return Err("as many values as columns".into());
        }
        let if_not_exists = match c.condition()? {
            None => false,
            Some(ParsedCond::NotExists) => true,
            Some(_) => return Err("an INSERT takes only IF NOT EXISTS".into()),
        };
        let ttl = c.ttl()?;
        Parsed::Insert {
            table,
            columns,
            values,
            if_not_exists,
            ttl,
        }
    } else if c.eat("UPDATE") {
        let table = c.ident()?;
        let ttl = c.ttl()?;
        c.expect("SET")?;
        let mut set = Vec::new();
        loop {
            set.push(c.ident()?);
            c.expect("=")?;
            c.expect("?")?;
            if !c.eat(",") {
                break;
            }
        }
        let key = one_key(c.key()?)?;
        let cond = c.condition()?;
        if matches!(cond, Some(ParsedCond::NotExists)) {
            return Err("an UPDATE cannot take IF NOT EXISTS".into());
        }
        Parsed::Update {
            table,
            ttl,
            set,
            key,
            cond,
        }
    } else if c.eat("DELETE") {
        c.expect("FROM")?;
        let table = c.ident()?;
        let key = one_key(c.key()?)?;
        let cond = c.condition()?;
        Parsed::Delete { table, key, cond }
    } else {
        return Err(format!("unsupported statement {:?}", c.peek()));
    };
    c.end()?;
    Ok(parsed)
}

fn one_key(keys: Vec<(String, Lit)>) -> Result<(String, Lit), String> {
    match <[(String, Lit); 1]>::try_from(keys) {
        Ok([k]) => Ok(k),
        Err(_) => Err("a write names exactly one partition key".into()),
    }
}

#[cfg(test)]
mod tests;
