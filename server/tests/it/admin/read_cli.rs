//! `lockscope get` against a server with authentication: the token comes from
//! `LOCKSCOPE_TOKEN` (docs/operations.md: "else from the environment's
//! `LOCKSCOPE_TOKEN`, never from a flag's value"), and a request without a
//! valid token exits 4 ("4 refused (401 or 403)").

use super::Server;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_takes_its_token_from_the_environment_and_exits_4_when_refused() {
    let s = Server::start().await;
    let run = |token: Option<&str>| {
        let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_lockscope"));
        c.args(["get", "locks", "--server", &s.base, "--fleet", "sql"])
            .env_remove("RUST_BACKTRACE")
            .env_remove("LOCKSCOPE_TOKEN_FILE")
            .env("LOCKSCOPE_LOG", "warn");
        match token {
            Some(t) => c.env("LOCKSCOPE_TOKEN", t),
            None => c.env_remove("LOCKSCOPE_TOKEN"),
        };
        let out = tokio::task::block_in_place(|| c.output().unwrap());
        (
            out.status.code().unwrap(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, err) = run(Some(&s.tokens["viewer"]));
    assert_eq!(code, 0, "a viewer lists the locks: {err}");
    let (code, err) = run(None);
    assert!(code == 4 && err.contains("401"), "no token: {code} {err}");
    let (code, err) = run(Some("not-a-token"));
    assert!(code == 4 && err.contains("401"), "a bad token: {code} {err}");
}
