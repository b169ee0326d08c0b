//! The `advisory+postgres://URL[#OPTIONS]` spec: the database, and the
//! options after `#` (`&`-separated, each optional):
//! - `poll=1s` (or `500ms`): time between two polls (default 1 s, 100 ms to 1 h);
//! - `limit=10000`: the most advisory lock rows one poll reads (1 to 1,000,000);
//!   past it the page says "more than N advisory locks";
//! - `holds=50`: the most entries a holder's "also holds" lists (what else
//!   terminating it ends; 1 to 10,000): the advisory keys it holds first,
//!   then the relations it locks; the rest are not listed;
//! - `idle=300s`: a session-level lock whose holder has been idle (not in a
//!   transaction) longer is shown as possibly stranded (default 300 s);
//! - `poolers=pgbouncer,odyssey,pgcat,pgpool,supavisor` (the default): a
//!   holder whose `application_name` contains one of these (any case) is a
//!   pooler's connection, and its session-level locks possibly stranded;
//! - `names=TABLE`: a table (`schema.table` allowed) with columns `key`
//!   (`KEY` or `K1:K2`, as text) and `name` that names keys;
//! - `name.KEY=NAME` (`name.1:2=jobs`): one key named in the spec;
//! - `hashtext=NAME1,NAME2`: names locked as `pg_advisory_lock(hashtext(NAME))`
//!   (the key computed by the database).

use std::collections::BTreeMap;
use std::time::Duration;

use crate::spec::StoreSpec;

/// An `advisory+postgres://` fleet as configured.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AdvisoryTarget {
    /// The `postgres://…` URL (may hold a password: never shown).
    pub url: String,
    pub poll: Duration,
    pub limit: u32,
    /// The most entries a holder's `also_holds` lists (`holds=`).
    pub holds: usize,
    pub idle: Duration,
    pub poolers: Vec<String>,
    pub names_table: Option<String>,
    /// Key (`KEY` or `K1:K2`) → name.
    pub names: BTreeMap<String, String>,
    pub hashtext: Vec<String>,
}

impl AdvisoryTarget {
    pub const DEFAULT_POLL: Duration = Duration::from_secs(1);
    pub const DEFAULT_LIMIT: u32 = 10_000;
    /// `holds=` by default: each lock a backend holds copies this many of its
    /// other holds, so a backend holding thousands of keys costs at most
    /// this many copies per lock (docs/performance.md).
    pub const DEFAULT_HOLDS: usize = 50;
    /// The largest `holds=`.
    pub const MAX_HOLDS: usize = 10_000;
    pub const DEFAULT_IDLE: Duration = Duration::from_secs(300);
    pub const DEFAULT_POOLERS: [&'static str; 5] = ["pgbouncer", "odyssey", "pgcat", "pgpool", "supavisor"];

    /// A target with every option at its default.
    pub fn new(url: impl Into<String>) -> AdvisoryTarget {
        AdvisoryTarget {
            url: url.into(),
            poll: Self::DEFAULT_POLL,
            limit: Self::DEFAULT_LIMIT,
            holds: Self::DEFAULT_HOLDS,
            idle: Self::DEFAULT_IDLE,
            poolers: Self::DEFAULT_POOLERS.iter().map(|s| s.to_string()).collect(),
            names_table: None,
            names: BTreeMap::new(),
            hashtext: Vec::new(),
        }
    }

    /// Where the locks live, for people: no credentials.
    pub fn source(&self) -> String {
        format!("PostgreSQL advisory locks in {}", crate::spec::redact(&self.url))
    }
}

/// Parses what follows `advisory+` (`postgres://…[#OPTIONS]`).
pub(crate) fn parse_spec(rest: &str) -> Result<StoreSpec, String> {
    let (url, options) = rest.split_once('#').unwrap_or((rest, ""));
    if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
        return Err("advisory locks are read from advisory+postgres://…".into());
    }
    let mut t = AdvisoryTarget::new(url);
    for pair in options.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair
            .split_once('=')
            .ok_or_else(|| format!("option {pair:?} needs a value (KEY=VALUE)"))?;
        match k {
            "poll" => {
                t.poll = duration(v)?;
                if t.poll < Duration::from_millis(100) || t.poll > Duration::from_secs(3600) {
                    return Err(format!("poll={v}: between 100ms and 3600s"));
                }
            }
            "limit" => {
                t.limit = v
                    .parse()
                    .ok()
                    .filter(|n| (1..=1_000_000).contains(n))
                    .ok_or_else(|| format!("limit={v}: a number from 1 to 1000000"))?
            }
            "holds" => {
                t.holds = v
                    .parse()
                    .ok()
                    .filter(|n| (1..=AdvisoryTarget::MAX_HOLDS).contains(n))
                    .ok_or_else(|| format!("holds={v}: a number from 1 to {}", AdvisoryTarget::MAX_HOLDS))?
            }
            "idle" => t.idle = duration(v)?,
            "poolers" => t.poolers = v.split(',').filter(|s| !s.is_empty()).map(str::to_lowercase).collect(),
            "names" => {
                crate::sql::validate_table(v).map_err(|_| {
                    format!("names={v}: a plain table name (letters, digits, _), optionally schema.table")
                })?;
                t.names_table = Some(v.to_string());
            }
            "hashtext" => t.hashtext = v.split(',').filter(|s| !s.is_empty()).map(str::to_string).collect(),
            k if k.starts_with("name.") => {
                let key = &k["name.".len()..];
                if !valid_key(key) {
                    return Err(format!("{k}: the key is KEY (a bigint) or K1:K2 (two int4)"));
                }
                if v.is_empty() || v.chars().any(char::is_control) {
                    return Err(format!("{k}: a name without control characters"));
                }
                t.names.insert(key.to_string(), v.to_string());
            }
            _ => {
                return Err(format!(
                    "unknown option {k:?} (poll, limit, holds, idle, poolers, names, name.KEY, hashtext)"
                ))
            }
        }
    }
    Ok(StoreSpec::PgAdvisory(t))
}

/// `KEY` (i64) or `K1:K2` (two i32).
fn valid_key(key: &str) -> bool {
    match key.split_once(':') {
        Some((a, b)) => a.parse::<i32>().is_ok() && b.parse::<i32>().is_ok(),
        None => key.parse::<i64>().is_ok(),
    }
}

/// `1s`, `500ms`, `5m`.
fn duration(v: &str) -> Result<Duration, String> {
    let bad = || format!("{v:?} is not a duration (500ms, 1s, 5m)");
    let (n, unit) = v.find(|c: char| !c.is_ascii_digit()).map_or((v, ""), |i| v.split_at(i));
    let n: u64 = n.parse().map_err(|_| bad())?;
    Ok(match unit {
        "ms" => Duration::from_millis(n),
        "s" => Duration::from_secs(n),
        "m" => Duration::from_secs(n * 60),
        _ => return Err(bad()),
    })
}
