//! The OpenAPI document (issue 29; docs/api.md, "OpenAPI") served by a real
//! server on a SQLite fleet that records history:
//! - it is a valid OpenAPI 3.1 document by PyPI's `openapi-spec-validator`
//!   (and the same validator refuses a broken copy, so the check can fail);
//! - the answers the server gives (reads, actions, errors) match the schemas
//!   the document states for them (JSON Schema 2020-12, Python's `jsonschema`);
//! - every route is described and every description is served: the routes the
//!   router source adds by hand are in the document, every documented
//!   operation reaches a handler (not the router's 404/405), and each names
//!   its least role and its refusals' JSON.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

use lockscope_store::client::{LockOptions, Session, SessionConfig};
use lockscope_store::spec::StoreSpec;
use serde_json::{json, Value};

use crate::foreign::{call, send, serve_recording};

const F: &str = "sql";

/// Runs `script` with `args` in python3: its exit status and output.
fn python(script: &str, args: &[&std::path::Path]) -> (bool, String) {
    let out = Command::new("python3")
        .arg("-c")
        .arg(script)
        .args(args)
        .output()
        .expect("python3 runs (scripts/install.sh installs openapi-spec-validator)");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// Validates the OpenAPI document in argv[1] (the version from its `openapi`).
const VALIDATE: &str = r#"
import json, sys
from openapi_spec_validator import validate
validate(json.load(open(sys.argv[1])))
print("valid")
"#;

/// Checks each sample in argv[2] (`path`, `method`, `status`, `body`)
/// against the schema the document in argv[1] gives that answer.
const CONFORM: &str = r#"
import json, sys
from jsonschema import Draft202012Validator
from referencing import Registry
from referencing.jsonschema import DRAFT202012
doc = json.load(open(sys.argv[1]))
registry = Registry().with_resource("urn:doc", DRAFT202012.create_resource(doc))
esc = lambda s: s.replace("~", "~0").replace("/", "~1")
bad = 0
for s in json.load(open(sys.argv[2])):
    ptr = "/paths/%s/%s/responses/%s/content/application~1json/schema" % (esc(s["path"]), s["method"], s["status"])
    v = Draft202012Validator({"$ref": "urn:doc#" + ptr}, registry=registry)
    for e in v.iter_errors(s["body"]):
        bad += 1
        print("%s %s %s: %s at %s" % (s["method"], s["path"], s["status"], e.message, list(e.absolute_path)))
print("%d samples checked, %d errors" % (len(json.load(open(sys.argv[2]))), bad))
sys.exit(1 if bad else 0)
"#;

async fn document(addr: SocketAddr) -> Value {
    let (status, doc) = call(addr, "GET", "/api/v1/openapi.json", "").await;
    assert_eq!(status, 200, "the document is served without credentials: {doc}");
    doc
}

fn write(dir: &std::path::Path, name: &str, v: &Value) -> std::path::PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, serde_json::to_vec_pretty(v).unwrap()).unwrap();
    p
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_document_is_valid_openapi_3_1_and_the_answers_match_it() {
    let dir = tempfile::tempdir().unwrap();
    let spec = StoreSpec::Sql {
        url: format!("sqlite://{}?mode=rwc", dir.path().join("l.db").display()),
    };
    let served = serve_recording(F, "sqlite", &spec).await;
    let addr = served.addr;
    let doc = document(addr).await;
    // docs/api.md: "an OpenAPI 3.1 document of every route"
    assert!(
        doc["openapi"].as_str().unwrap().starts_with("3.1."),
        "{}",
        doc["openapi"]
    );

    let file = write(dir.path(), "openapi.json", &doc);
    let (ok, out) = python(VALIDATE, &[&file]);
    assert!(ok, "openapi-spec-validator refuses the served document:\n{out}");
    // The validator can fail: a response without its required description.
    let mut broken = doc.clone();
    broken["paths"]["/api/v1/fleets"]["get"]["responses"]["200"]
        .as_object_mut()
        .unwrap()
        .remove("description");
    let (ok, out) = python(VALIDATE, &[&write(dir.path(), "broken.json", &broken)]);
    assert!(!ok, "a response without a description passed:\n{out}");

    // A session holding a lock and waiting for none, so rows have content.
    let store = spec.connect().await.unwrap();
    let session = Session::open(store, SessionConfig::new("billing")).await.unwrap();
    let guard = session
        .lock(
            "billing/invoices",
            LockOptions::new("openapi", Duration::from_secs(600)),
        )
        .await
        .unwrap();
    let one = "/api/v1/fleets/sql/locks/billing%2Finvoices";
    let (mut status, mut detail) = (0, Value::Null);
    for _ in 0..100 {
        (status, detail) = call(addr, "GET", one, "").await;
        if status == 200 && detail["session"].is_object() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(status, 200, "{detail}");
    let fence = detail["entry"]["fence"].as_i64().unwrap();
    let owner = detail["entry"]["body"]["owner"].clone();
    let sid = session.id().to_string();

    let mut samples = Vec::new();
    let mut sample = |path: &str, method: &str, status: u16, body: Value| {
        samples.push(json!({"path": path, "method": method, "status": status.to_string(), "body": body}));
    };
    sample("/api/v1/fleets/{fleet}/locks/{name}", "get", 200, detail);
    let reads = [
        ("/api/v1/fleets", "/api/v1/fleets", 200),
        ("/api/v1/fleets/{fleet}/locks", "/api/v1/fleets/sql/locks?limit=5", 200),
        ("/api/v1/fleets/{fleet}/locks", "/api/v1/fleets/sql/locks?limit=0", 400),
        ("/api/v1/fleets/{fleet}/locks", "/api/v1/fleets/nosuch/locks", 404),
        ("/api/v1/fleets/{fleet}/sessions", "/api/v1/fleets/sql/sessions", 200),
        (
            "/api/v1/fleets/{fleet}/charts",
            "/api/v1/fleets/sql/charts?window=1h",
            200,
        ),
        (
            "/api/v1/fleets/{fleet}/charts",
            "/api/v1/fleets/sql/charts?window=2h",
            400,
        ),
        ("/api/v1/fleets/{fleet}/table", "/api/v1/fleets/sql/table?at=now", 200),
        ("/healthz", "/healthz", 200),
    ];
    for (path, url, want) in reads {
        let (status, body) = call(addr, "GET", url, "").await;
        assert_eq!(status, want, "{url}: {body}");
        sample(path, "get", status, body);
    }
    // Actions: a 409 with `current`, a 400, a done release and blacklist.
    let release = "/api/v1/fleets/{fleet}/locks/{name}/release";
    let url = format!("{one}/release");
    let body = |fence: i64| json!({"fence": fence, "owner": owner, "reason": "openapi"}).to_string();
    for (body, want) in [(body(fence + 7), 409), ("{}".into(), 400), (body(fence), 200)] {
        let (status, answer) = call(addr, "POST", &url, &body).await;
        assert_eq!(status, want, "{body}: {answer}");
        sample(release, "post", status, answer);
    }
    let blacklist = "/api/v1/fleets/{fleet}/sessions/{session}/blacklist";
    let url = format!("/api/v1/fleets/sql/sessions/{sid}/blacklist");
    let (status, answer) = call(addr, "POST", &url, r#"{"reason": "openapi"}"#).await;
    assert_eq!(status, 200, "{answer}");
    sample(blacklist, "post", status, answer);
    // The audit log and the history hold the release; the sessions page,
    // once it shows the blacklist entry.
    for (path, url) in [
        ("/api/v1/audit", "/api/v1/audit"),
        ("/api/v1/fleets/{fleet}/history", "/api/v1/fleets/sql/history"),
    ] {
        let (status, body) = call(addr, "GET", url, "").await;
        assert_eq!(status, 200, "{url}: {body}");
        sample(path, "get", status, body);
    }
    let mut sessions = Value::Null;
    for _ in 0..100 {
        (_, sessions) = call(addr, "GET", "/api/v1/fleets/sql/sessions", "").await;
        if sessions["rows"][0]["blacklist"].is_object() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(sessions["rows"][0]["blacklist"].is_object(), "{sessions}");
    sample("/api/v1/fleets/{fleet}/sessions", "get", 200, sessions);
    drop(guard);
    let file = write(dir.path(), "samples.json", &Value::Array(samples));
    let (ok, out) = python(CONFORM, &[&dir.path().join("openapi.json"), &file]);
    assert!(ok, "answers that do not match the document:\n{out}");
}

/// `.route("PATH"` calls in `src`: routes added by hand, so not described.
fn hand_routes(src: &str) -> Vec<String> {
    src.match_indices(".route(")
        .filter_map(|(i, _)| {
            let rest = src[i + ".route(".len()..].trim_start();
            let rest = rest.strip_prefix('"')?;
            Some(rest[..rest.find('"')?].to_string())
        })
        .collect()
}

/// Every `.rs` file under `dir`.
fn sources(dir: &std::path::Path, out: &mut Vec<(String, String)>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push((p.display().to_string(), std::fs::read_to_string(&p).unwrap()));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_is_described_and_every_description_is_served() {
    let dir = tempfile::tempdir().unwrap();
    let spec = StoreSpec::Sql {
        url: format!("sqlite://{}?mode=rwc", dir.path().join("l.db").display()),
    };
    let served = serve_recording(F, "sqlite", &spec).await;
    let doc = document(served.addr).await;
    let paths = doc["paths"].as_object().unwrap();

    // Routes added by hand (`.route(…)`, not `routes!`) under /api, and the
    // probes: each must be in the document (web/api.rs adds the API's with
    // `routes!`, which documents them; this catches a `.route` added beside).
    let mut files = Vec::new();
    sources(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/web"),
        &mut files,
    );
    let mut undocumented = BTreeSet::new();
    for (file, src) in &files {
        for route in hand_routes(src) {
            let api = route.starts_with("/api/") || ["/healthz", "/metrics"].contains(&route.as_str());
            if api && !paths.contains_key(&route) {
                undocumented.insert(format!("{route} ({file})"));
            }
        }
    }
    assert!(
        undocumented.is_empty(),
        "routes served but not in /api/v1/openapi.json (add them with routes! and #[utoipa::path]): {undocumented:?}"
    );
    assert!(
        hand_routes(r#"x.route("/api/v1/x", get(a)).route( "/b", post(b))"#) == ["/api/v1/x", "/b"],
        "the source scan finds hand-added routes"
    );

    let mut operations = 0;
    for (path, item) in paths {
        assert!(
            path == "/healthz" || path == "/metrics" || path.starts_with("/api/v1/"),
            "{path}"
        );
        for (method, op) in item.as_object().unwrap() {
            operations += 1;
            let what = format!("{} {path}", method.to_uppercase());
            // Each operation says what it does and the least role it needs.
            assert!(
                op["summary"].as_str().is_some_and(|s| !s.is_empty()),
                "{what}: no summary"
            );
            let description = op["description"].as_str().unwrap_or("");
            assert!(
                description.starts_with("Least role: "),
                "{what}: no least role: {description:?}"
            );
            // Its refusals are JSON: ErrorBody, or an action's ActionAnswer.
            let responses = op["responses"].as_object().unwrap();
            assert!(responses.contains_key("200"), "{what}: no 200");
            for (status, r) in responses {
                let schema = &r["content"]["application/json"]["schema"]["$ref"];
                if status.starts_with('4') {
                    assert!(
                        schema == "#/components/schemas/ErrorBody" || schema == "#/components/schemas/ActionAnswer",
                        "{what} {status}: {r}"
                    );
                }
            }
            // Served: a request reaches a handler, not the router's
            // fallback (404 `no such page`) or a 405.
            let url = path
                .replace("{fleet}", F)
                .replace("{name}", "nosuchlock")
                .replace("{session}", "nosuchsession");
            let (status, body) = send(served.addr, None, &method.to_uppercase(), &url, "{}").await;
            let body = String::from_utf8_lossy(&body);
            assert!(
                status != 405 && !(status == 404 && body == "no such page"),
                "{what} is documented but not served: {status} {body}"
            );
        }
    }
    assert!(operations >= 14, "{operations} operations");
}
