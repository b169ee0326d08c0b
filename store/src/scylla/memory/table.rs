//! The tables of [`super::MemoryCql`]: typed columns, cells with their expiry,
//! and the conditions and answers of lightweight transactions.

use std::collections::BTreeMap;

use tokio::time::Instant;

use super::parse::{Lit, ParsedCond};
use super::Shape;
use crate::scylla::cql::{Row, Value};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Type {
    Text,
    BigInt,
    Int,
    Timestamp,
    Boolean,
    TextList,
}

pub(super) struct Table {
    pub(super) key: String,
    pub(super) columns: BTreeMap<String, Type>,
    /// Column order, for `[applied]` answers.
    pub(super) order: Vec<String>,
    pub(super) rows: BTreeMap<String, Cells>,
}

/// A row's cells with their expiry; `""` is the row marker an INSERT writes.
#[derive(Default)]
pub(super) struct Cells(pub(super) BTreeMap<String, (Value, Option<Instant>)>);

impl Cells {
    /// Writes column `col`. A null (or an empty collection) is no cell: it
    /// keeps nothing alive, and deletes what was there.
    pub(super) fn write(&mut self, col: String, v: Value, expires: Option<Instant>) {
        match v {
            Value::Null => self.0.remove(&col),
            Value::List(items) if items.is_empty() => self.0.remove(&col),
            v => self.0.insert(col, (v, expires)),
        };
    }

    pub(super) fn live(&self, now: Instant) -> bool {
        self.0.values().any(|(_, exp)| exp.is_none_or(|e| e > now))
    }

    pub(super) fn get(&self, col: &str, now: Instant) -> Value {
        match self.0.get(col) {
            Some((v, exp)) if exp.is_none_or(|e| e > now) => v.clone(),
            _ => Value::Null,
        }
    }
}

pub(super) enum Cond {
    Exists,
    NotExists,
    Equal(Vec<(String, Value)>),
}

impl Table {
    pub(super) fn check_column(&self, c: &str) -> Result<(), String> {
        self.columns
            .contains_key(c)
            .then_some(())
            .ok_or_else(|| format!("Undefined column name {c}"))
    }

    pub(super) fn column_type(&self, c: &str) -> Result<Type, String> {
        self.columns
            .get(c)
            .copied()
            .ok_or_else(|| format!("Undefined column name {c}"))
    }

    pub(super) fn check_value(&self, c: &str, v: &Value) -> Result<(), String> {
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
    pub(super) fn key_of(
        &self,
        (name, lit): (String, Lit),
        bind: &mut impl FnMut(&str) -> Result<Value, String>,
    ) -> Result<String, String> {
        if name != self.key {
            return Err(format!("{name} is not the partition key"));
        }
        self.key_value(literal(&lit, bind, &name)?)
    }

    pub(super) fn key_value(&self, v: Value) -> Result<String, String> {
        self.check_value(&self.key, &v)?;
        match v {
            Value::Text(s) => Ok(s),
            Value::Int(i) => Ok(format!("{i:020}")),
            other => Err(format!("unsupported key {other:?}")),
        }
    }

    pub(super) fn row_before(&self, key: &str, now: Instant) -> Option<Row> {
        let cells = self.rows.get(key).filter(|c| c.live(now))?;
        Some(
            self.order
                .iter()
                .map(|c| (c.clone(), self.cell(key, cells, c, now)))
                .collect(),
        )
    }

    /// Column `col` of the row named `key`: the key itself, or a cell.
    pub(super) fn cell(&self, key: &str, cells: &Cells, col: &str, now: Instant) -> Value {
        if col != self.key {
            return cells.get(col, now);
        }
        match self.columns[col] {
            Type::Int => key.parse().map_or(Value::Null, Value::Int),
            _ => Value::text(key),
        }
    }

    pub(super) fn conditions(
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
    pub(super) fn check_conditions(&self, key: &str, cond: &Option<Cond>, shape: Shape, now: Instant) -> Option<Row> {
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
    pub(super) fn answer(
        &self,
        applied: bool,
        before: Option<Row>,
        shape: Shape,
        conditioned: Option<Vec<String>>,
    ) -> Row {
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

/// A key's value: bound, or an integer literal (`WHERE id = 1`).
pub(super) fn literal(
    lit: &Lit,
    bind: &mut impl FnMut(&str) -> Result<Value, String>,
    what: &str,
) -> Result<Value, String> {
    match lit {
        Lit::Bind => bind(what),
        Lit::Int(i) => i32::try_from(*i)
            .map(Value::Int)
            .map_err(|_| format!("{i} is not an int")),
        _ => Err(format!("unsupported key for {what}")),
    }
}
