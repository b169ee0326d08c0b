//! The parser of the CQL subset [`super::MemoryCql`] executes: exactly the
//! statement shapes lockscope sends (`super::super::cql::Stmt`), anything else
//! an error.

use super::table::Type;

pub(super) enum Lit {
    Bind,
    Null,
    Int(i64),
    EmptyList,
}

pub(super) enum ParsedCond {
    Exists,
    NotExists,
    Equal(Vec<(String, Lit)>),
}

pub(super) enum Parsed {
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

pub(super) fn parse(cql: &str) -> Result<Parsed, String> {
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
