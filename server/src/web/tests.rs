//! The HTTP layer against a real server on a loopback port (a real SQLite
//! fleet, a real audit log): the anonymous admin's guard, the static files,
//! panics ([`super::edge`]); who a request is ([`identity`]).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use lockscope_model::admin::{AuditQuery, Role};
use lockscope_store::spec::StoreSpec;
use tokio::sync::watch;

use super::edge::{is_loopback_name, FORWARDED};
use super::state::AppState;
use crate::auth::{new_token, Auth};
use crate::live::hub::{Fleets, HubHandle};
use crate::remember::audit::AuditLog;
use crate::settings::FileConfig;

mod identity;
mod openapi;

/// The fleet every server here has (a name and a store no stranger may learn).
const FLEET: &str = "secret-fleet";
const SOURCE: &str = "sqlite secret-store-endpoint";

struct Server {
    base: String,
    audit: AuditLog,
    /// Tokens by actor: `admin` (every fleet), `scoped` (an admin of [`FLEET`] only).
    tokens: BTreeMap<&'static str, String>,
    dir: tempfile::TempDir,
    _stop: watch::Sender<bool>,
}

struct Reply {
    status: u16,
    body: String,
}

impl Server {
    /// A server without authentication, or with `[auth]`: the tokens above, and
    /// a proxy on 127.0.0.1 naming users in `X-Forwarded-User` (`bob` is admin).
    async fn start(auth: bool) -> Server {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("pkg")).unwrap();
        std::fs::write(dir.path().join("pkg/lockscope.css"), "body {}").unwrap();
        let mut tokens = BTreeMap::new();
        let mut toml = String::from(
            "[auth.proxy]\nheader = \"X-Forwarded-User\"\ntrusted = [\"127.0.0.1\"]\n\n\
             [[auth.users]]\nname = \"bob\"\nrole = \"admin\"\n\n",
        );
        for who in ["admin", "scoped"] {
            let (token, entry) = new_token(who, Role::Admin);
            toml.push_str(&entry);
            if who == "scoped" {
                toml.push_str(&format!("scope = {{ {FLEET} = [] }}\n"));
            }
            toml.push('\n');
            tokens.insert(who, token);
        }
        let file = FileConfig::parse(&toml).unwrap();
        let audit = AuditLog::open(&format!("sqlite:{}", dir.path().join("audit.db").display()))
            .await
            .unwrap();
        let spec = StoreSpec::sqlite_file(&dir.path().join("locks.db"));
        let hub = HubHandle::spawn(FLEET, SOURCE, spec.open().unwrap());
        let (stop, stop_rx) = watch::channel(false);
        let state = AppState::new(
            Fleets::new(vec![hub]),
            dir.path().to_path_buf(),
            stop_rx.clone(),
            audit.clone(),
            Auth::new(if auth { file.auth } else { None }, audit.clone()),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(crate::web::serve(listener, state, stop_rx, Duration::from_secs(1)));
        Server {
            base,
            audit,
            tokens,
            dir,
            _stop: stop,
        }
    }

    /// Sends a request; `headers` may name a header more than once.
    async fn send(&self, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> Reply {
        let mut req = hyper::Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let req = req.body(Full::new(Bytes::from(body.to_string()))).unwrap();
        let client = Client::builder(TokioExecutor::new()).build_http();
        let resp = client.request(req).await.unwrap();
        let status = resp.status().as_u16();
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        Reply {
            status,
            body: String::from_utf8_lossy(&body).into(),
        }
    }

    /// Opens `/ws?fleet=` with `headers`: the handshake's status (101: open).
    async fn ws(&self, headers: &[(&str, &str)]) -> (u16, String) {
        use tokio_tungstenite::tungstenite::client::IntoClientRequest;
        use tokio_tungstenite::tungstenite::Error;
        let url = format!("{}/ws?fleet={FLEET}", self.base.replace("http://", "ws://"));
        let mut req = url.into_client_request().unwrap();
        for (k, v) in headers {
            req.headers_mut().append(
                hyper::header::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        match tokio_tungstenite::connect_async(req).await {
            Ok((_, resp)) => (resp.status().as_u16(), String::new()),
            Err(Error::Http(resp)) => {
                let body = String::from_utf8_lossy(resp.body().as_deref().unwrap_or_default()).into_owned();
                (resp.status().as_u16(), body)
            }
            Err(e) => panic!("the websocket handshake failed: {e}"),
        }
    }

    async fn audit_count(&self) -> usize {
        self.audit.query(&AuditQuery::default()).await.unwrap().len()
    }

    fn bearer(&self, who: &str) -> String {
        format!("Bearer {}", self.tokens[who])
    }

    fn site(&self) -> &Path {
        self.dir.path()
    }
}

#[test]
fn loopback_names() {
    for ok in ["127.0.0.1:3000", "localhost", "LOCALHOST:80", "[::1]:3000", "127.1.2.3"] {
        assert!(is_loopback_name(ok), "{ok}");
    }
    for bad in [
        "evil.example",
        "evil.example:3000",
        "10.0.0.1:3000",
        "",
        "[::2]:1",
        "localhost.evil.example",
    ] {
        assert!(!is_loopback_name(bad), "{bad}");
    }
}

/// docs/operations.md: "a request a reverse proxy forwards (`Forwarded`,
/// `X-Forwarded-For`, `X-Real-IP`, `X-Forwarded-Host`, `X-Forwarded-Proto`)
/// gets `403`, so a proxy cannot put the anonymous admin on its network."
#[tokio::test]
async fn without_auth_what_a_proxy_forwards_is_refused_everywhere() {
    let s = Server::start(false).await;
    // Without any of them everything is served (the anonymous admin).
    assert_eq!(s.send("GET", "/api/v1/fleets", &[], "").await.status, 200);
    assert_eq!(s.ws(&[]).await.0, 101);
    let release = format!("/api/v1/fleets/{FLEET}/locks/job/release");
    let json = r#"{"fence":1,"reason":"through a proxy"}"#;
    let form = format!("fleet={FLEET}&name=job&confirm=job&fence=1&reason=x&back=/");
    for header in FORWARDED {
        let value = if header == "forwarded" {
            "for=192.0.2.7"
        } else {
            "192.0.2.7"
        };
        let why = format!("it carries {header}");
        let r = s.send("GET", "/api/v1/fleets", &[(header, value)], "").await;
        assert_eq!(
            (r.status, r.body.contains(&why)),
            (403, true),
            "GET {header}: {}",
            r.body
        );
        let r = s
            .send(
                "POST",
                &release,
                &[(header, value), ("content-type", "application/json")],
                json,
            )
            .await;
        assert_eq!(
            (r.status, r.body.contains(&why)),
            (403, true),
            "release {header}: {}",
            r.body
        );
        let r = s
            .send(
                "POST",
                "/actions/release",
                &[(header, value), ("content-type", "application/x-www-form-urlencoded")],
                &form,
            )
            .await;
        assert_eq!(
            (r.status, r.body.contains(&why)),
            (403, true),
            "form {header}: {}",
            r.body
        );
        let (status, body) = s.ws(&[(header, value)]).await;
        assert_eq!((status, body.contains(&why)), (403, true), "/ws {header}: {body}");
    }
    assert_eq!(s.audit_count().await, 0, "no attempt reached the admin actions");
}

/// With `[auth]` the forwarding headers are a proxy's ordinary business.
#[tokio::test]
async fn with_auth_forwarded_requests_are_served() {
    let s = Server::start(true).await;
    let auth = s.bearer("admin");
    for header in FORWARDED {
        let r = s
            .send(
                "GET",
                "/api/v1/fleets",
                &[(header, "192.0.2.7"), ("authorization", auth.as_str())],
                "",
            )
            .await;
        assert_eq!(r.status, 200, "{header}: {}", r.body);
    }
}

/// docs/operations.md: "`GET /pkg/…` — the built site's files (anything that is not one of them,
/// such as a name the file system refuses, is `404 no such file`)". A 300-byte name was a 500.
#[tokio::test]
async fn static_files_answer_404_for_whatever_is_not_a_file() {
    let s = Server::start(false).await;
    assert!(s.site().join("pkg/lockscope.css").exists());
    let r = s.send("GET", "/pkg/lockscope.css", &[], "").await;
    assert_eq!((r.status, r.body.as_str()), (200, "body {}"));
    let long = format!("/pkg/{}.js", "a".repeat(300));
    for path in [
        "/pkg/%00",
        "/pkg/a%00b.js",
        long.as_str(),
        "/pkg/../Cargo.toml",
        "/pkg/..%2F..%2FCargo.toml",
        "/pkg/nosuch.js",
        "/pkg/nosuch/dir/x.wasm",
    ] {
        let r = s.send("GET", path, &[], "").await;
        assert_eq!((r.status, r.body.as_str()), (404, "no such file"), "{path}");
    }
    assert_eq!(s.send("GET", "/healthz", &[], "").await.status, 200, "still serving");
}

/// A route `app()` has in test builds only: its handler panics.
pub(super) const PANIC_ROUTE: &str = "/test-only/panic";

pub(super) async fn panics() -> &'static str {
    panic!("boom: a test's panic")
}

/// docs/operations.md: "A bug that makes a request's handler panic is answered `500 internal
/// error` (…), and the server goes on serving the next request." Through the real router
/// (`crate::web::serve` builds it with `app()`), on its test-only route that panics: without the
/// layer in `app()`, the connection is dropped and the request fails.
#[tokio::test]
async fn a_panicking_handler_answers_500_and_the_server_goes_on() {
    let s = Server::start(false).await;
    for _ in 0..2 {
        let r = s.send("GET", PANIC_ROUTE, &[], "").await;
        assert_eq!((r.status, r.body.as_str()), (500, "internal error"));
        assert_eq!(s.send("GET", "/healthz", &[], "").await.status, 200, "still serving");
    }
}
