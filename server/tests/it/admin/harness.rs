//! The admin tests' server: a real server with authentication (tokens for a
//! viewer, an operator, an operator scoped to `team-a/`, an admin) over a real
//! lock store, and a client that speaks to it as a script or a browser would.

use std::collections::BTreeMap;
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use lockscope::auth::{new_token, Auth};
use lockscope::live::hub::{Fleets, HubHandle};
use lockscope::remember::audit::AuditLog;
use lockscope::settings::{AuthFile, TokenFile};
use lockscope::web::AppState;
use lockscope_model::admin::{AuditEntry, AuditQuery, Role};
use lockscope_store::spec::{AnyLocks, StoreSpec};
use tokio::sync::watch;

pub(crate) struct Server {
    pub(crate) base: String,
    pub(crate) audit: AuditLog,
    pub(crate) hub: HubHandle,
    pub(crate) store: AnyLocks,
    pub(crate) tokens: BTreeMap<&'static str, String>,
    /// Holds `audit.db` and (for [`Server::start`]) the SQLite store `locks.db`.
    pub(crate) dir: tempfile::TempDir,
    _stop: watch::Sender<bool>,
}

pub(crate) struct Reply {
    pub(crate) status: u16,
    pub(crate) body: String,
    pub(crate) headers: hyper::HeaderMap,
}

impl Server {
    /// A server with authentication: tokens for a viewer, an operator, an
    /// operator limited to `team-a/` locks, and an admin; one SQLite fleet and
    /// one read-only (ShedLock) fleet.
    pub(crate) async fn start() -> Server {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("locks.db");
        Server::start_on(StoreSpec::sqlite_file(&db), dir).await
    }

    /// [`Server::start`] with the writable fleet (named `sql` whatever its
    /// store) on `spec`; `dir` lives as long as the server.
    pub(crate) async fn start_on(spec: StoreSpec, dir: tempfile::TempDir) -> Server {
        let store = spec.connect().await.unwrap();
        let shed = StoreSpec::parse(&format!("shedlock+sqlite:{}", dir.path().join("shed.db").display())).unwrap();
        let mut tokens = BTreeMap::new();
        let mut entries = Vec::new();
        for (who, role, scope) in [
            ("viewer", Role::Viewer, None),
            ("operator", Role::Operator, None),
            ("scoped", Role::Operator, Some("team-a/")),
            ("admin", Role::Admin, None),
        ] {
            let (token, entry) = new_token(who, role);
            let file: lockscope::settings::FileConfig = lockscope::settings::FileConfig::parse(&entry).unwrap();
            let mut t: TokenFile = file.auth.unwrap().tokens.remove(0);
            if let Some(prefix) = scope {
                t.scope.insert("sql".into(), vec![prefix.into()]);
            }
            entries.push(t);
            tokens.insert(who, token);
        }
        let auth_file = AuthFile {
            tokens: entries,
            ..AuthFile::default()
        };
        let audit = AuditLog::open(&format!("sqlite:{}", dir.path().join("audit.db").display()))
            .await
            .unwrap();
        let hub = HubHandle::spawn("sql", "sqlite under test", spec.open().unwrap());
        let shed_hub = HubHandle::spawn("shed", "shedlock under test", shed.open().unwrap());
        let (stop, stop_rx) = watch::channel(false);
        let state = AppState::new(
            Fleets::new(vec![hub.clone(), shed_hub]),
            "target/site".into(),
            stop_rx.clone(),
            audit.clone(),
            Auth::new(Some(auth_file), audit.clone()),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(lockscope::serve(listener, state, stop_rx, Duration::from_secs(1)));
        Server {
            base,
            audit,
            hub,
            store,
            tokens,
            dir,
            _stop: stop,
        }
    }

    pub(crate) async fn send(&self, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> Reply {
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
        let headers = resp.headers().clone();
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        Reply {
            status,
            body: String::from_utf8_lossy(&body).into(),
            headers,
        }
    }

    pub(crate) fn bearer(&self, who: &str) -> String {
        format!("Bearer {}", self.tokens[who])
    }

    /// A signed-in browser's form `POST` to `path`: its `cookies`, this server
    /// as the origin.
    pub(crate) async fn post_form(&self, path: &str, cookies: &str, form: &str) -> Reply {
        let headers = [
            ("cookie", cookies),
            ("origin", self.base.as_str()),
            ("content-type", "application/x-www-form-urlencoded"),
        ];
        self.send("POST", path, &headers, form).await
    }

    /// Signs a browser in as `who`: its cookies (session and CSRF) and the
    /// session's CSRF token.
    pub(crate) async fn browser(&self, who: &str) -> (String, String) {
        let page = self.send("GET", "/signin", &[], "").await;
        let csrf_cookie = set_cookie(&page, "lockscope_csrf").expect("the sign-in page sets a CSRF cookie");
        let form = format!("token={}&next=%2F&csrf={csrf_cookie}", self.tokens[who]);
        let cookie = format!("lockscope_csrf={csrf_cookie}");
        let signed = self
            .send(
                "POST",
                "/signin",
                &[
                    ("content-type", "application/x-www-form-urlencoded"),
                    ("cookie", &cookie),
                ],
                &form,
            )
            .await;
        assert_eq!(signed.status, 303, "sign-in: {}", signed.body);
        let session = set_cookie(&signed, "lockscope_session").expect("a session cookie");
        // The session's CSRF token is in every form of the pages it renders.
        let cookies = format!("lockscope_session={session}");
        let page = self
            .send("GET", "/sessions?fleet=sql", &[("cookie", &cookies)], "")
            .await;
        assert_eq!(page.status, 200, "a signed-in page: {}", page.body);
        let csrf = page
            .body
            .split(r#"name="csrf" value=""#)
            .nth(1)
            .and_then(|s| s.split('"').next())
            .unwrap_or_else(|| panic!("the page carries its CSRF token: {}", page.body))
            .to_string();
        (cookies, csrf)
    }

    pub(crate) async fn last_audit(&self) -> Option<AuditEntry> {
        self.write_tallies().await;
        self.audit
            .query(&AuditQuery {
                limit: Some(1),
                ..AuditQuery::default()
            })
            .await
            .unwrap()
            .pop()
    }

    pub(crate) async fn audit_count(&self) -> usize {
        self.write_tallies().await;
        self.audit.query(&AuditQuery::default()).await.unwrap().len()
    }

    /// Writes the audit log's tallies of attempts without an identity now
    /// (the server writes one row per source and minute when the minute is
    /// over: docs/operations.md, "Audit log"), so each such attempt shows.
    async fn write_tallies(&self) {
        self.audit.flush_tally(true).await;
    }

    /// A connection of its own to a SQLite database in [`Server::dir`] (the
    /// store's `locks.db`, the log's `audit.db`): what is there, not what the
    /// server's pool or the hub's view says.
    pub(crate) async fn sqlite(&self, file: &str) -> sqlx::SqlitePool {
        let path = self.dir.path().join(file);
        sqlx::SqlitePool::connect(&format!("sqlite://{}", path.display()))
            .await
            .unwrap()
    }

    /// The sessions in the SQLite store's blacklist table ([`Server::start`]), sorted.
    pub(crate) async fn blacklist_in_store(&self) -> Vec<String> {
        let db = self.sqlite("locks.db").await;
        let rows: Vec<(String,)> = sqlx::query_as("SELECT session FROM lockscope_blacklist ORDER BY session")
            .fetch_all(&db)
            .await
            .unwrap();
        db.close().await;
        rows.into_iter().map(|(s,)| s).collect()
    }

    /// The hub's view of the fleet has caught up with the store.
    pub(crate) async fn wait_hub(&self, ok: impl Fn(&lockscope::live::hub::SessionNow) -> bool, session: &str) {
        for _ in 0..200 {
            if ok(&self.hub.session_now(session).await.unwrap()) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("the hub never showed the expected state of session {session}");
    }
}

fn set_cookie(r: &Reply, name: &str) -> Option<String> {
    r.headers
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find_map(|v| {
            v.strip_prefix(&format!("{name}="))
                .map(|v| v.split(';').next().unwrap().to_string())
        })
}
