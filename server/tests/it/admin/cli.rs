//! The `lockscope` binary as an admin client and as a server that refuses to
//! start: `lockscope admin` acts through the API with its token (refused as a
//! viewer, done as an operator, audited with its reason), and a public address
//! without authentication is refused at start.

use lockscope_store::protocol::LockStore;

use super::{fixture, unchanged, Server};

#[test]
fn a_public_address_without_authentication_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_lockscope"))
        .args(["--listen", "0.0.0.0:0", "--no-demo"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("without authentication"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_acts_through_the_api_with_its_token() {
    let s = Server::start().await;
    let f = fixture(&s).await;
    let dir = tempfile::tempdir().unwrap();
    let cli = |who: &str, args: &[&str]| {
        let file = dir.path().join(who);
        std::fs::write(&file, format!("{}\n", s.tokens[who])).unwrap();
        let mut argv = vec!["admin", "--server", &s.base];
        argv.extend(["--token-file", file.to_str().unwrap()]);
        argv.extend(args);
        std::process::Command::new(env!("CARGO_BIN_EXE_lockscope"))
            .args(&argv)
            .output()
            .unwrap()
    };
    let fence = f.fence_a.to_string();
    let release = [
        "release",
        "--fleet",
        "sql",
        "team-a/1",
        "--fence",
        &fence,
        "--reason",
        "from the shell",
    ];
    let out = tokio::task::block_in_place(|| cli("viewer", &release));
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("403"), "{out:?}");
    unchanged(&s, &f, "cli as viewer").await;
    let out = tokio::task::block_in_place(|| cli("operator", &release));
    assert!(out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(r#""released": true"#),
        "{out:?}"
    );
    assert!(s.store.get("team-a/1").await.unwrap().is_none());
    let last = s.last_audit().await.unwrap();
    assert_eq!(
        (last.actor.as_str(), last.reason.as_str()),
        ("operator", "from the shell")
    );
}
