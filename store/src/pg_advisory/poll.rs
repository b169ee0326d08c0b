//! One poll of an advisory-lock fleet: the one statement ([`read`]) and the
//! snapshot made of its answer ([`build`]).
//!
//! The statement reads, in one snapshot of the database's lock and activity
//! views: the advisory lock rows of this database (`LIMIT` the fleet's row
//! limit + 1, to tell "more than N"), `pg_blocking_pids` of every backend
//! waiting on a heavyweight lock (`wait_event_type = 'Lock'`, advisory or
//! not), the `pg_stat_activity` row of each backend named so far, the
//! relations each of them holds locks on, and the names the fleet maps keys
//! to. Everything comes back as JSON text in one row.
//!
//! Level (session or transaction): `pg_locks` does not say. A lock is known
//! to be session-level once its holder is seen holding it outside a
//! transaction (`xact_start` NULL), or in two different transactions;
//! until then it is shown as unknown ([`LockLevel::Unknown`]): the observer
//! keeps what it saw per backend and key ([`Levels`]).

use std::collections::{BTreeMap, HashMap};

use lockscope_model::fleet::pg_advisory::{AdvisoryKey, LockLevel, PgAdvisoryLock, PgBackend};
use lockscope_model::fleet::FamilyDetail;
use lockscope_model::{LockBody, LockEntry, Snapshot, Waiter};
use serde::Deserialize;
use sqlx::postgres::PgPool;

use super::{fence_of, graph, session_of, AdvisoryTarget, READ_TIMEOUT};
use crate::StoreError;

/// What one poll read.
#[derive(Debug, Default)]
pub struct Read {
    /// The database's clock at the read (unix ms).
    pub now_ms: i64,
    pub locks: Vec<LockRow>,
    pub blocked: Vec<Blocked>,
    pub backends: Vec<BackendRow>,
    pub names: Vec<NameRow>,
}

/// One `pg_locks` advisory row.
#[derive(Debug, Deserialize)]
pub struct LockRow {
    pub pid: Option<i32>,
    pub granted: bool,
    pub mode: String,
    pub sub: i32,
    pub classid: i64,
    pub objid: i64,
    pub waitstart: Option<i64>,
}

/// A backend waiting on a heavyweight lock, and who blocks it.
#[derive(Debug, Deserialize)]
pub struct Blocked {
    pub pid: i32,
    #[serde(default)]
    pub blockers: Option<Vec<i32>>,
    pub waits_on: Option<String>,
}

/// One `pg_stat_activity` row.
#[derive(Debug, Deserialize)]
pub struct BackendRow {
    pub pid: i32,
    pub start_us: Option<i64>,
    pub app: Option<String>,
    pub user: Option<String>,
    pub addr: Option<String>,
    pub xact_ms: Option<i64>,
    pub state: Option<String>,
    pub state_ms: Option<i64>,
    pub query_ms: Option<i64>,
    pub query: Option<String>,
    #[serde(default)]
    pub holds: Option<Vec<String>>,
}

/// A key's name, from the names table or `hashtext`.
#[derive(Debug, Deserialize)]
pub struct NameRow {
    pub k: Option<String>,
    pub n: Option<String>,
}

/// The one statement of a poll (see the module docs).
pub fn statement(target: &AdvisoryTarget) -> String {
    let ms = |c: &str| format!("CAST(EXTRACT(EPOCH FROM {c}) * 1000 AS BIGINT)");
    let table = match &target.names_table {
        Some(t) => format!(" UNION ALL SELECT CAST(key AS TEXT), CAST(name AS TEXT) FROM {t}"),
        None => String::new(),
    };
    format!(
        "WITH adv AS ( \
           SELECT l.pid, l.granted, l.mode, CAST(l.objsubid AS INT) AS sub, \
                  CAST(l.classid AS BIGINT) AS classid, CAST(l.objid AS BIGINT) AS objid, {waitstart} AS waitstart \
           FROM pg_locks l \
           WHERE l.locktype = 'advisory' \
             AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
           LIMIT $1), \
         blocked AS ( \
           SELECT a.pid, pg_blocking_pids(a.pid) AS blockers, a.wait_event AS waits_on \
           FROM pg_stat_activity a WHERE a.wait_event_type = 'Lock'), \
         pids AS (SELECT pid FROM adv UNION SELECT pid FROM blocked UNION SELECT unnest(blockers) FROM blocked), \
         names(k, n) AS (SELECT CAST(hashtext(n) AS TEXT), n FROM unnest(CAST($2 AS TEXT[])) AS h(n){table}) \
         SELECT {now}, \
           CAST((SELECT coalesce(json_agg(adv), '[]') FROM adv) AS TEXT), \
           CAST((SELECT coalesce(json_agg(blocked), '[]') FROM blocked) AS TEXT), \
           CAST((SELECT coalesce(json_agg(json_build_object( \
              'pid', a.pid, 'start_us', CAST(EXTRACT(EPOCH FROM a.backend_start) * 1000000 AS BIGINT), \
              'app', a.application_name, 'user', a.usename, 'addr', host(a.client_addr), \
              'xact_ms', {xact}, 'state', a.state, 'state_ms', {state}, 'query_ms', {query}, \
              'query', left(a.query, 1000), \
              'holds', (SELECT array_agg(r) FROM (SELECT DISTINCT CAST(CAST(h.relation AS regclass) AS TEXT) || ' (' || h.mode || ')' AS r \
                        FROM pg_locks h WHERE h.pid = a.pid AND h.granted AND h.locktype = 'relation' \
                          AND h.database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
                        ORDER BY 1 LIMIT 50) rs))), '[]') \
             FROM pg_stat_activity a WHERE a.pid IN (SELECT pid FROM pids)) AS TEXT), \
           CAST((SELECT coalesce(json_agg(names), '[]') FROM names) AS TEXT)",
        waitstart = ms("l.waitstart"),
        now = ms("clock_timestamp()"),
        xact = ms("a.xact_start"),
        state = ms("a.state_change"),
        query = ms("a.query_start"),
    )
}

/// Runs [`statement`] once.
pub async fn read(pool: &PgPool, target: &AdvisoryTarget) -> Result<Read, StoreError> {
    let sql = statement(target);
    let row: (Option<i64>, String, String, String, String) = tokio::time::timeout(
        READ_TIMEOUT,
        sqlx::query_as(&sql)
            .bind(i64::from(target.limit) + 1)
            .bind(&target.hashtext)
            .fetch_one(pool),
    )
    .await
    .map_err(|_| StoreError::Timeout(READ_TIMEOUT))?
    .map_err(|e| StoreError::from(e).of("reading pg_locks and pg_stat_activity"))?;
    let parse = |what: &str, text: &str| StoreError::backend(format!("reading the poll's {what}"), text.to_string());
    Ok(Read {
        now_ms: row.0.unwrap_or_else(crate::now_ms),
        locks: serde_json::from_str(&row.1).map_err(|e| parse("locks", &e.to_string()))?,
        blocked: serde_json::from_str(&row.2).map_err(|e| parse("waits", &e.to_string()))?,
        backends: serde_json::from_str(&row.3).map_err(|e| parse("backends", &e.to_string()))?,
        names: serde_json::from_str(&row.4).map_err(|e| parse("names", &e.to_string()))?,
    })
}

/// What the observer saw of one backend's hold of one key: the transaction
/// it was first seen in, and whether it was seen session-level.
#[derive(Clone, Debug, Default)]
pub struct Seen {
    first_xact: Option<i64>,
    session: Option<&'static str>,
}

/// Per (holder session, key): what was seen (see the module docs).
pub type Levels = HashMap<(String, String), Seen>;

impl LockRow {
    fn key(&self) -> AdvisoryKey {
        if self.sub == 2 {
            AdvisoryKey::Pair(self.classid as u32 as i32, self.objid as u32 as i32)
        } else {
            AdvisoryKey::Bigint(((self.classid as u64) << 32 | (self.objid as u64 & 0xffff_ffff)) as i64)
        }
    }
}

/// The snapshot a poll's [`Read`] makes: one lock per held key (a key with
/// only waiters is no lock, its waiters are still waits), updating `levels`.
/// Revisions are 0: the observer gives them.
pub fn build(target: &AdvisoryTarget, read: Read, levels: &mut Levels) -> Snapshot {
    let now = read.now_ms;
    let limit = target.limit as usize;
    let truncated_at = (read.locks.len() > limit).then_some(target.limit);
    let rows = &read.locks[..read.locks.len().min(limit)];
    let names: HashMap<&str, &str> = read
        .names
        .iter()
        .filter_map(|r| Some((r.k.as_deref()?, r.n.as_deref()?)))
        .chain(target.names.iter().map(|(k, n)| (k.as_str(), n.as_str())))
        .collect();
    let rows_by_backend: HashMap<i32, &BackendRow> = read.backends.iter().map(|b| (b.pid, b)).collect();
    let blocked: HashMap<i32, &Blocked> = read.blocked.iter().map(|b| (b.pid, b)).collect();
    // Keys each backend holds, to list what else a terminate ends.
    let mut held_by: BTreeMap<i32, Vec<String>> = BTreeMap::new();
    let mut by_key: BTreeMap<String, (AdvisoryKey, Vec<&LockRow>)> = BTreeMap::new();
    for row in rows {
        let key = row.key();
        if let (Some(pid), true) = (row.pid, row.granted) {
            held_by
                .entry(pid)
                .or_default()
                .push(format!("advisory lock {key} ({})", row.mode));
        }
        by_key.entry(key.to_string()).or_insert((key, Vec::new())).1.push(row);
    }
    let edges: BTreeMap<i32, Vec<i32>> = read
        .blocked
        .iter()
        .map(|b| (b.pid, b.blockers.clone().unwrap_or_default()))
        .collect();
    let shown: std::collections::BTreeSet<i32> = rows.iter().filter_map(|r| r.pid).collect();
    let cycles = graph::cycles(&edges);
    let session = |pid: i32| session_of(pid, rows_by_backend.get(&pid).and_then(|b| b.start_us).unwrap_or(0));
    let backend = |pid: i32, waitstart: Option<i64>| {
        let row = rows_by_backend.get(&pid);
        let start = row.and_then(|b| b.start_us).unwrap_or(0);
        // The first `holds=` (50) only: a backend holding thousands of keys
        // must not cost thousands of copies per lock it holds (quadratic per poll).
        let kept = target.holds;
        let mut also: Vec<String> = held_by
            .get(&pid)
            .map(|h| h.iter().take(kept).cloned().collect())
            .unwrap_or_default();
        if also.len() < kept {
            let rest = row.and_then(|b| b.holds.as_ref()).into_iter().flatten();
            also.extend(rest.take(kept - also.len()).cloned());
        }
        PgBackend {
            pid,
            backend_start_us: start,
            session: session_of(pid, start),
            application_name: row.and_then(|b| b.app.clone()).unwrap_or_default(),
            usename: row.and_then(|b| b.user.clone()),
            client_addr: row.and_then(|b| b.addr.clone()),
            xact_start: row.and_then(|b| b.xact_ms),
            state: row.and_then(|b| b.state.clone()),
            state_change: row.and_then(|b| b.state_ms),
            query: row.and_then(|b| b.query.clone()),
            waiting_since: waitstart.or_else(|| blocked.get(&pid).and(row.and_then(|b| b.query_ms))),
            blocked_by: edges.get(&pid).cloned().unwrap_or_default(),
            waits_for: graph::waits_for(pid, &edges, &shown)
                .into_iter()
                .map(&session)
                .collect(),
            also_holds: also,
        }
    };
    let mut seen_now = Levels::new();
    let mut snapshot = Snapshot::default();
    for (key_text, (key, rows)) in by_key {
        let name = names.get(key_text.as_str()).map_or(key_text.clone(), |n| n.to_string());
        let mut holders: Vec<&&LockRow> = rows.iter().filter(|r| r.granted && r.pid.is_some()).collect();
        holders.sort_by_key(|r| (r.mode != "ExclusiveLock", r.pid));
        holders.dedup_by_key(|r| r.pid);
        let mut waiting: Vec<&&LockRow> = rows.iter().filter(|r| !r.granted && r.pid.is_some()).collect();
        waiting.sort_by_key(|r| (r.waitstart, r.pid));
        for w in &waiting {
            snapshot.waiters.push(Waiter {
                lock: name.clone(),
                session: session(w.pid.unwrap_or(0)),
            });
        }
        let Some(first) = holders.first() else { continue };
        let holders: Vec<PgBackend> = holders.iter().map(|r| backend(r.pid.unwrap_or(0), None)).collect();
        let waiters: Vec<PgBackend> = waiting
            .iter()
            .map(|r| backend(r.pid.unwrap_or(0), r.waitstart))
            .collect();
        let h = holders[0].clone();
        let h = &h;
        let level = level_of(levels, &mut seen_now, h, &key_text);
        let stranded = stranded(target, h, &level, now);
        let on_cycle = std::iter::once(h.pid)
            .chain(waiters.iter().map(|w| w.pid))
            .find_map(|pid| cycles.get(&pid));
        let cycle = on_cycle
            .map(|c| graph::steps(c, &read.blocked, &read.backends))
            .unwrap_or_default();
        let detail = PgAdvisoryLock {
            key,
            mode: first.mode.clone(),
            level,
            stranded,
            cycle,
            poll_ms: target.poll.as_millis() as u64,
            truncated_at,
            holders,
            waiters,
        };
        snapshot.locks.push(LockEntry {
            name,
            fence: fence_of(h.pid, h.backend_start_us),
            revision: 0,
            body: LockBody::Foreign {
                session: Some(h.session.clone()),
                written_at: None,
                lease: None,
                proposal: None,
                key: None,
                detail: Some(Box::new(FamilyDetail::PgAdvisory(detail))),
            },
        });
    }
    *levels = seen_now;
    snapshot.locks.sort_by(|a, b| a.name.cmp(&b.name));
    // Two keys mapped to one name: the first is shown.
    snapshot.locks.dedup_by(|a, b| a.name == b.name);
    snapshot.waiters.sort();
    snapshot.waiters.dedup();
    snapshot
}

/// The level of `holder`'s hold of `key`, from what was seen before and now.
fn level_of(levels: &Levels, seen_now: &mut Levels, holder: &PgBackend, key: &str) -> LockLevel {
    let id = (holder.session.clone(), key.to_string());
    let mut seen = levels.get(&id).cloned().unwrap_or_default();
    match (holder.xact_start, seen.first_xact) {
        (None, _) => {
            seen.session
                .get_or_insert("held outside a transaction (its backend is not in one)");
        }
        (Some(x), Some(first)) if x != first => {
            seen.session
                .get_or_insert("held across two transactions of its backend");
        }
        (Some(x), None) => seen.first_xact = Some(x),
        _ => {}
    }
    let level = match seen.session {
        Some(how) => LockLevel::Session { how: how.to_string() },
        None => LockLevel::Unknown,
    };
    seen_now.insert(id, seen);
    level
}

/// Why a lock may be stranded: a session-level lock whose holder has been
/// idle past the threshold, or whose holder is a pooler's connection.
fn stranded(target: &AdvisoryTarget, h: &PgBackend, level: &LockLevel, now: i64) -> Option<String> {
    if !matches!(level, LockLevel::Session { .. }) {
        return None;
    }
    let app = h.application_name.to_lowercase();
    if let Some(p) = target.poolers.iter().find(|p| app.contains(p.as_str())) {
        return Some(format!(
            "its backend is a connection pooler's (application_name {:?} matches {p:?}): a session-level lock \
             taken through a transaction-mode pooler stays on a server connection other clients now use, \
             and the unlock may have gone to another backend",
            h.application_name
        ));
    }
    let idle_ms = now - h.state_change?;
    if h.state.as_deref() == Some("idle") && idle_ms > target.idle.as_millis() as i64 {
        return Some(format!(
            "session-level, and its backend has been idle (not in a transaction) longer than the {} s threshold: \
             nothing on that connection is using it",
            target.idle.as_secs()
        ));
    }
    None
}

/// The holder a terminate acts on (`None`: not an advisory lock's entry).
pub fn holder_of(entry: &LockEntry) -> Option<&PgBackend> {
    match &entry.body {
        LockBody::Foreign { detail: Some(d), .. } => match &**d {
            FamilyDetail::PgAdvisory(pg) => pg.holder(),
            _ => None,
        },
        _ => None,
    }
}
