//! `lockscope admin …`: the admin actions from a shell, through a running
//! server's JSON API (so the server checks the token's role and scope and
//! records the attempt in its audit log, exactly as for the page).
//!
//! Lock names and fleets go into the URL path as path segments
//! ([`lockscope_model::url::segment`]: percent-encoded, never form-encoded, so
//! `x y` never arrives as `x+y`). A release first reads the lock and sends the
//! owner id of the acquisition it found with the fence given: the server
//! releases exactly that acquisition, or nothing.
//!
//! The client speaks plain HTTP: run it on the dashboard's host (or through an
//! SSH tunnel); it refuses to send a token in clear to another host unless told
//! `--insecure-http`.

use std::path::PathBuf;

use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

#[derive(Debug, Args)]
pub struct AdminArgs {
    /// The dashboard's URL, e.g. `http://127.0.0.1:3000`.
    #[arg(long, env = "LOCKSCOPE_SERVER", default_value = "http://127.0.0.1:3000")]
    pub server: String,
    /// A file holding an API token (`lockscope token`); none: the token in
    /// `LOCKSCOPE_TOKEN`, else a server without authentication.
    #[arg(long, env = "LOCKSCOPE_TOKEN_FILE")]
    pub token_file: Option<PathBuf>,
    /// Send the token over plain HTTP to a host that is not this machine
    /// (anyone on the path can read it; prefer running on the server's host).
    #[arg(long)]
    pub insecure_http: bool,
    #[command(subcommand)]
    pub action: AdminAction,
}

#[derive(Debug, Subcommand)]
pub enum AdminAction {
    /// Release a lock only if it is still the acquisition with this fencing token.
    Release {
        #[arg(long)]
        fleet: String,
        /// The lock's name.
        name: String,
        /// The fencing token you saw (the page and `GET …/locks/NAME` show it).
        #[arg(long)]
        fence: i64,
        #[arg(long)]
        reason: String,
    },
    /// Blacklist a session: its heartbeats fail and its locks run out.
    Blacklist {
        #[arg(long)]
        fleet: String,
        session: String,
        #[arg(long)]
        reason: String,
    },
    /// Lift a session's blacklist entry (admin role).
    Unblacklist {
        #[arg(long)]
        fleet: String,
        session: String,
        #[arg(long)]
        reason: String,
    },
}

/// Runs one admin action; the server's answer is printed, and a refusal or a
/// changed lock is an error (exit status 1).
pub async fn run(args: AdminArgs) -> anyhow::Result<()> {
    let remote = Remote::connect(&args.server, args.token_file.as_deref(), args.insecure_http)?;
    let seg = lockscope_model::url::segment;
    let (method, path, body) = match &args.action {
        AdminAction::Release {
            fleet,
            name,
            fence,
            reason,
        } => {
            let lock = format!("/api/v1/fleets/{}/locks/{}", seg(fleet), seg(name));
            let owner = remote.acquisition(&lock, name, *fence).await?;
            (
                "POST",
                format!("{lock}/release"),
                serde_json::json!({ "fence": fence, "owner": owner, "reason": reason }),
            )
        }
        AdminAction::Blacklist { fleet, session, reason } => (
            "POST",
            format!("/api/v1/fleets/{}/sessions/{}/blacklist", seg(fleet), seg(session)),
            serde_json::json!({ "reason": reason }),
        ),
        AdminAction::Unblacklist { fleet, session, reason } => (
            "DELETE",
            format!("/api/v1/fleets/{}/sessions/{}/blacklist", seg(fleet), seg(session)),
            serde_json::json!({ "reason": reason }),
        ),
    };
    let (status, answer) = remote.call(method, &path, Some(body)).await?;
    println!("{}", serde_json::to_string_pretty(&answer)?);
    if !status.is_success() {
        bail!("{status}: {}", why(&answer));
    }
    Ok(())
}

/// The server, and the token every request carries.
pub(crate) struct Remote<'a> {
    base: &'a str,
    token: Option<String>,
}

impl<'a> Remote<'a> {
    /// The server at `server` (plain HTTP only), with the token from
    /// `token_file`, else from the environment's `LOCKSCOPE_TOKEN` (never a flag:
    /// a flag's value shows in `ps`); a token goes in clear to another host
    /// only when `insecure_http` says so.
    pub(crate) fn connect(
        server: &'a str,
        token_file: Option<&std::path::Path>,
        insecure_http: bool,
    ) -> anyhow::Result<Remote<'a>> {
        let token = match token_file {
            Some(f) => Some(
                std::fs::read_to_string(f)
                    .with_context(|| format!("reading the token file {}", f.display()))?
                    .trim()
                    .to_string(),
            ),
            None => std::env::var("LOCKSCOPE_TOKEN")
                .ok()
                .map(|t| t.trim().to_string())
                .filter(|t| !t.is_empty()),
        };
        let base = server.trim_end_matches('/');
        let uri: hyper::Uri = base
            .parse()
            .with_context(|| format!("--server {base:?} is not a URL"))?;
        if uri.scheme_str() != Some("http") {
            bail!("--server {base}: lockscope speaks plain HTTP only (run it where the server is, or through an SSH tunnel)");
        }
        let host = uri.host().unwrap_or("").trim_matches(|c| c == '[' || c == ']');
        let loopback =
            host.eq_ignore_ascii_case("localhost") || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback());
        if token.is_some() && !loopback && !insecure_http {
            bail!(
                "--server {base}: refusing to send the token in clear to another host; use --insecure-http to do it anyway"
            );
        }
        Ok(Remote { base, token })
    }

    /// Sends one request; the answer's status and JSON (a body that is not
    /// JSON becomes `{"detail": <its text>}`).
    pub(crate) async fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<serde_json::Value>,
    ) -> anyhow::Result<(hyper::StatusCode, serde_json::Value)> {
        let base = self.base;
        let mut req = hyper::Request::builder().method(method).uri(format!("{base}{path}"));
        if body.is_some() {
            req = req.header("content-type", "application/json");
        }
        if let Some(t) = &self.token {
            req = req.header("authorization", format!("Bearer {t}"));
        }
        let body = body.map_or_else(Bytes::new, |b| Bytes::from(b.to_string()));
        let req = req.body(Full::new(body)).context("building the request")?;
        let client = Client::builder(TokioExecutor::new()).build_http();
        let resp = client
            .request(req)
            .await
            .with_context(|| format!("calling {base} (plain HTTP)"))?;
        let status = resp.status();
        let bytes = resp
            .into_body()
            .collect()
            .await
            .context("reading the answer")?
            .to_bytes();
        let answer = serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| serde_json::json!({ "detail": String::from_utf8_lossy(&bytes) }));
        Ok((status, answer))
    }

    /// The websocket upgrade request for `path` on this server (`ws://`),
    /// carrying the token as every other request does.
    pub(crate) fn ws_request(
        &self,
        path: &str,
    ) -> anyhow::Result<tokio_tungstenite::tungstenite::handshake::client::Request> {
        use tokio_tungstenite::tungstenite::client::IntoClientRequest;
        let url = format!("ws://{}{path}", self.base.trim_start_matches("http://"));
        let mut req = url.into_client_request().context("building the websocket request")?;
        if let Some(t) = &self.token {
            let value = format!("Bearer {t}")
                .parse()
                .context("the token is not a valid header value")?;
            req.headers_mut().insert("authorization", value);
        }
        Ok(req)
    }

    /// Reads the lock at `lock` (its API path) and says on stderr which
    /// acquisition the release will name: the owner id it returns is sent with
    /// the fence, so the server releases that acquisition or nothing.
    async fn acquisition(&self, lock: &str, name: &str, fence: i64) -> anyhow::Result<Option<String>> {
        let (status, detail) = self.call("GET", lock, None).await?;
        if !status.is_success() {
            bail!(
                "reading lock {name:?} first: {status}: {}; nothing released",
                why(&detail)
            );
        }
        let entry = &detail["entry"];
        let now = entry["fence"].as_i64().context("the server's answer names no fence")?;
        let owner = entry["body"]["owner"].as_str().map(str::to_string);
        eprintln!(
            "lock {name:?}: fence {now}, owner {}, session {}",
            owner.as_deref().unwrap_or("(none: not a lockscope record)"),
            entry["body"]["session"].as_str().unwrap_or("(unknown)"),
        );
        if now != fence {
            // Sent anyway: the server answers 409 with what is there, and audits it.
            eprintln!("lock {name:?} is fence {now} now, not fence {fence}: the release will change nothing");
        }
        Ok(owner)
    }
}

/// The reason an answer gives.
pub(crate) fn why(answer: &serde_json::Value) -> &str {
    answer["detail"]
        .as_str()
        .or(answer["error"].as_str())
        .unwrap_or("no reason given")
}
