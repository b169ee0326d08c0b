//! An admin action acts on exactly what its actor looked at, as the store says
//! it is now, never as the dashboard's view shows it (issue 23, defects 1 and
//! 10) — on every store the dashboard writes: etcd, PostgreSQL, SQLite and
//! ScyllaDB's in-memory keyspace.
//!
//! Release: two locks whose names differ only in ` ` and `+` (`a b`, `a+b`)
//! at one fencing token (SQL stores start every lock at fence 1; one etcd
//! transaction creates several locks at one revision). Releasing one, through
//! the API or `lockscope admin`, leaves the other held.
//!
//! Blacklist: a session is blacklisted right after it registers (before any
//! view can show it), and a second request at once is `409 changed` that keeps
//! the first entry.

use std::collections::BTreeSet;
use std::time::Duration;

use etcd_client::{Txn, TxnOp};
use lockscope_model::admin::{Action, AuditQuery, Outcome};
use lockscope_model::record::{BlacklistRecord, Stored};
use lockscope_model::url::segment;
use lockscope_store::client::{Session, SessionConfig};
use lockscope_store::now_ms;
use lockscope_store::protocol::{Blacklisting, LockStore};
use lockscope_store::spec::StoreSpec;
use lockscope_store::testing::{record, take, EtcdServer, PgServer};

use crate::admin::Server;

/// Lock names that a form-encoding client confuses: it sends `a b` as `a+b`.
const NAMES: [&str; 4] = ["a b", "a+b", "x y", "x+y"];

/// Takes every lock of [`NAMES`] at one fencing token and returns it: on etcd
/// in one transaction (`etcd`: the endpoint and key prefix), elsewhere one by
/// one (each lock's first acquisition).
async fn take_at_one_fence(s: &Server, etcd: Option<(&str, &str)>) -> i64 {
    match etcd {
        Some((endpoint, prefix)) => {
            let mut client = etcd_client::Client::connect([endpoint], None).await.unwrap();
            let now = now_ms();
            let puts: Vec<TxnOp> = NAMES
                .iter()
                .map(|n| {
                    let rec = record(&format!("owner-{n}"), "exact", now);
                    TxnOp::put(format!("{prefix}locks/{n}"), rec.to_json(), None)
                })
                .collect();
            assert!(client.txn(Txn::new().and_then(puts)).await.unwrap().succeeded());
        }
        None => {
            for n in NAMES {
                take(&s.store, n).await;
            }
        }
    }
    let mut fences = BTreeSet::new();
    for n in NAMES {
        fences.insert(s.store.get(n).await.unwrap().expect("held").fence);
    }
    assert_eq!(fences.len(), 1, "the premise: one fencing token for all ({fences:?})");
    fences.pop_first().unwrap()
}

/// The owner id of `name`'s acquisition, as the store has it.
async fn owner(s: &Server, name: &str) -> String {
    let entry = s.store.get(name).await.unwrap().expect("held");
    entry.record().expect("a lockscope record").owner.clone()
}

/// `name` is still held at `fence` by the acquisition `owner`.
async fn still_held(s: &Server, name: &str, fence: i64, owner: &str, case: &str) {
    let entry = s.store.get(name).await.unwrap();
    let seen = entry.as_ref().map(|e| (e.fence, e.record().map(|r| r.owner.as_str())));
    assert_eq!(seen, Some((fence, Some(owner))), "{case}: {name:?} must be untouched");
}

async fn check(spec: StoreSpec, dir: tempfile::TempDir, etcd: Option<(&str, &str)>) {
    let s = Server::start_on(spec, dir).await;
    let fence = take_at_one_fence(&s, etcd).await;
    let (ab, a_plus_b) = (owner(&s, "a b").await, owner(&s, "a+b").await);
    let op = s.bearer("operator");
    let json = [("authorization", op.as_str()), ("content-type", "application/json")];
    let body = |owner: &str| format!(r#"{{"fence": {fence}, "owner": "{owner}", "reason": "exact"}}"#);

    // A client that form-encodes the path sends `a b` as `a+b`: the owner it
    // read of `a b` names no acquisition of `a+b`, so nothing is released.
    let r = s
        .send("POST", "/api/v1/fleets/sql/locks/a+b/release", &json, &body(&ab))
        .await;
    assert_eq!(r.status, 409, "a+b with the owner of a b: {}", r.body);
    assert!(r.body.contains(r#""outcome":"changed""#), "{}", r.body);
    still_held(&s, "a+b", fence, &a_plus_b, "a mis-encoded path").await;
    still_held(&s, "a b", fence, &ab, "a mis-encoded path").await;

    // Encoded as a path segment, `a b` is released and `a+b` is not.
    let path = format!("/api/v1/fleets/sql/locks/{}/release", segment("a b"));
    assert_eq!(path, "/api/v1/fleets/sql/locks/a%20b/release");
    let r = s.send("POST", &path, &json, &body(&ab)).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(s.store.get("a b").await.unwrap().is_none(), "a b released");
    still_held(&s, "a+b", fence, &a_plus_b, "the API released a b").await;

    // `lockscope admin release "x y"`: the CLI reads the lock (through the
    // hub's view: wait until it shows it), then releases exactly it.
    let (xy, x_plus_y) = (owner(&s, "x y").await, owner(&s, "x+y").await);
    let viewer = s.bearer("viewer");
    let mut shown = false;
    for _ in 0..200 {
        let r = s
            .send(
                "GET",
                "/api/v1/fleets/sql/locks/x%20y",
                &[("authorization", &viewer)],
                "",
            )
            .await;
        if r.status == 200 {
            shown = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(shown, "the hub never showed x y");
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), &s.tokens["operator"]).unwrap();
    let fence_arg = fence.to_string();
    let args = [
        "admin",
        "--server",
        &s.base,
        "--token-file",
        file.path().to_str().unwrap(),
        "release",
        "--fleet",
        "sql",
        "x y",
        "--fence",
        &fence_arg,
        "--reason",
        "exact from the shell",
    ];
    let out = tokio::task::block_in_place(|| {
        std::process::Command::new(env!("CARGO_BIN_EXE_lockscope"))
            .args(args)
            .output()
            .unwrap()
    });
    assert!(out.status.success(), "{out:?}");
    still_held(&s, "x+y", fence, &x_plus_y, "the CLI released x y").await;
    assert!(s.store.get("x y").await.unwrap().is_none(), "x y released: {out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("owner {xy}")),
        "the CLI says what it releases: {stderr}"
    );

    // docs/api.md: "a session the hub does not show yet (registered a moment
    // ago) is looked up in the store": blacklisted at once, no 404.
    let session = Session::open(s.store.clone(), SessionConfig::new("fresh"))
        .await
        .unwrap();
    let id = session.id().to_string();
    let path = format!("/api/v1/fleets/sql/sessions/{}/blacklist", segment(&id));
    let first = s.send("POST", &path, &json, r#"{"reason": "first"}"#).await;
    assert_eq!(first.status, 200, "a fresh session is blacklisted: {}", first.body);
    // docs/api.md: "of two requests for one session, however close, the second
    // is `409 changed` and the first entry keeps its `by`, `reason` and `at`".
    let second = s.send("POST", &path, &json, r#"{"reason": "second"}"#).await;
    assert_eq!(second.status, 409, "{}", second.body);
    assert!(
        second.body.contains(r#"already blacklisted by operator for \"first\""#),
        "{}",
        second.body
    );
    let audit: Vec<_> = s
        .audit
        .query(&AuditQuery {
            action: Some(Action::Blacklist),
            ..AuditQuery::default()
        })
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.target == id)
        .collect();
    let outcomes: Vec<_> = audit.iter().map(|e| e.outcome).collect();
    assert_eq!(outcomes, [Some(Outcome::Changed), Some(Outcome::Done)], "newest first");
    // The store still has the first entry as it was written (a create-if-absent
    // reads it back and writes nothing).
    let probe = BlacklistRecord::new(&id, "probe", "probe", now_ms());
    let Blacklisting::Exists(Some(Stored::Record(kept))) = s.store.blacklist(&probe).await.unwrap() else {
        panic!("the session's entry is there");
    };
    assert_eq!(
        (kept.by.as_str(), kept.reason.as_str(), kept.at),
        ("operator", "first", audit[1].at),
        "the first entry keeps its author, reason and time"
    );
    drop(session);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd() {
    let etcd = EtcdServer::start().await;
    let endpoint = etcd.endpoint();
    let prefix = "/admin-exact/";
    let spec = StoreSpec::Etcd {
        endpoints: vec![endpoint.clone()],
        prefix: Some(prefix.into()),
    };
    check(spec, tempfile::tempdir().unwrap(), Some((&endpoint, prefix))).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres() {
    let pg = PgServer::start().await;
    check(StoreSpec::Sql { url: pg.url() }, tempfile::tempdir().unwrap(), None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let spec = StoreSpec::sqlite_file(&dir.path().join("locks.db"));
    check(spec, dir, None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scylla_memory() {
    let name = format!("admin-exact-{}", std::process::id());
    let spec = StoreSpec::parse(&format!("scylla-memory:{name}")).unwrap();
    check(spec, tempfile::tempdir().unwrap(), None).await;
}
