//! `lockscope lock` as a user expects it, on a real SQLite file: a held lock is
//! waited for (`--wait`, default until free; `--no-wait` tries once), the wait
//! is shown, the session's counters are published, and an error is one line;
//! `lockscope completions` and `lockscope man` from the clap definition.

use std::process::{Command, Output, Stdio};
use std::time::Duration;

use lockscope_model::record::{Record, SessionRecord};

fn lockscope(db: &std::path::Path, args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_lockscope"));
    c.args(args)
        .args(["--store", &format!("sqlite:{}", db.display())])
        .env_remove("RUST_BACKTRACE")
        .env("LOCKSCOPE_LOG", "warn");
    c
}

fn text(out: &[u8]) -> String {
    String::from_utf8_lossy(out).into_owned()
}

/// The fence `lock` printed.
fn fence(out: &Output) -> i64 {
    let stdout = text(&out.stdout);
    stdout
        .split("fence=")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|f| f.parse().ok())
        .unwrap_or_else(|| panic!("no fence in {stdout:?} / {}", text(&out.stderr)))
}

/// The newest session record of the service `service`, read from the table.
async fn session_of(db: &std::path::Path, service: &str) -> SessionRecord {
    let pool = sqlx::SqlitePool::connect(&format!("sqlite:{}", db.display()))
        .await
        .unwrap();
    let rows: Vec<(String,)> = sqlx::query_as("SELECT record FROM lockscope_sessions")
        .fetch_all(&pool)
        .await
        .unwrap();
    rows.iter()
        .filter_map(|(r,)| SessionRecord::parse(r.as_bytes()).ok())
        .filter(|r| r.service == service)
        .max_by_key(|r| r.heartbeat_at)
        .unwrap_or_else(|| panic!("no session of {service} in {rows:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_waits_for_a_held_lock_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("locks.db");
    let run = |args: &[&str]| lockscope(&db, args).output().unwrap();

    let first = tokio::task::block_in_place(|| run(&["lock", "jobs/nightly", "--service", "first"]));
    assert!(first.status.success(), "{first:?}");
    let f1 = fence(&first);

    // --no-wait: one try, the holder named, one line, no backtrace.
    let once = tokio::task::block_in_place(|| run(&["lock", "jobs/nightly", "--no-wait"]));
    assert!(!once.status.success());
    let err = text(&once.stderr);
    assert!(err.contains("jobs/nightly is held by first@"), "{err}");
    assert!(err.contains(&format!("fence {f1}")), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    assert!(!err.contains("Caused by") && !err.contains("backtrace"), "{err}");

    // --wait 1s: says it waits, gives up after the limit, in one line.
    let started = std::time::Instant::now();
    let bounded =
        tokio::task::block_in_place(|| run(&["lock", "jobs/nightly", "--wait", "1s", "--service", "bounded"]));
    assert!(!bounded.status.success());
    assert!(started.elapsed() >= Duration::from_secs(1), "it waited");
    let err = text(&bounded.stderr);
    assert!(
        err.contains("is held by first@") && err.contains("waiting up to 1s"),
        "{err}"
    );
    assert!(
        err.contains("error: jobs/nightly is still held after 1s: gave up"),
        "{err}"
    );
    let counted = session_of(&db, "bounded").await;
    assert!(
        counted.contention.attempts >= 2 && counted.contention.conflicts >= 1,
        "the session published its attempts and conflicts: {:?}",
        counted.contention
    );

    // Default: wait until free. Release the first acquisition, and the waiter takes it.
    let waiter = lockscope(&db, &["lock", "jobs/nightly", "--service", "waiter"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // It is waiting: its own session's row says so (the bounded run's row may
    // still say it too, until that session expires).
    let mut seen_waiting = false;
    for _ in 0..300 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let pool = sqlx::SqlitePool::connect(&format!("sqlite:{}", db.display()))
            .await
            .unwrap();
        let rows: Vec<(String, Option<String>)> = sqlx::query_as("SELECT record, waiting_for FROM lockscope_sessions")
            .fetch_all(&pool)
            .await
            .unwrap();
        if rows.iter().any(|(record, waiting)| {
            waiting.as_deref() == Some("jobs/nightly")
                && SessionRecord::parse(record.as_bytes()).is_ok_and(|r| r.service == "waiter")
        }) {
            seen_waiting = true;
            break;
        }
    }
    assert!(seen_waiting, "the waiting session is visible as a waiter");
    let f1s = f1.to_string();
    let unlock = tokio::task::block_in_place(|| run(&["unlock", "jobs/nightly", "--fence", &f1s]));
    assert!(unlock.status.success(), "{unlock:?}");
    let out = tokio::task::block_in_place(|| waiter.wait_with_output()).unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(fence(&out) > f1, "{out:?}");
    assert!(text(&out.stderr).contains("waiting until it is free"), "{out:?}");
}

#[test]
fn a_bad_wait_is_one_clear_line() {
    let dir = tempfile::tempdir().unwrap();
    let out = lockscope(&dir.path().join("l.db"), &["lock", "x", "--wait", "soon"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(err.contains("is not a duration"), "{err}");
}

/// Runs the real binary with `args`: its stdout (it must succeed).
fn stdout_of(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_lockscope"))
        .args(args)
        .env("LOCKSCOPE_LOG", "warn")
        .output()
        .unwrap();
    assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
    text(&out.stdout)
}

/// Runs `program` with `args` on stdin `input`, if it is installed: its stdout and stderr.
fn run_with(program: &str, args: &[&str], input: &str) -> Option<(bool, String, String)> {
    use std::io::Write;
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .ok()?;
    child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    Some((out.status.success(), text(&out.stdout), text(&out.stderr)))
}

/// docs/operations.md: "`lockscope completions bash|zsh|fish` prints the
/// shell's completion script, generated from the same command line the
/// binary parses". bash is checked by completing with it; zsh and fish parse
/// their scripts where they are installed.
#[test]
fn completions_complete_the_commands_and_their_flags() {
    let bash = stdout_of(&["completions", "bash"]);
    assert!(
        bash.contains("_lockscope()") && bash.contains("complete -F _lockscope"),
        "a completion function, registered: {bash:.200}"
    );
    // Completing: `lockscope wa<TAB>`, `lockscope watch locks --st<TAB>`, `… -o <TAB>`.
    let complete = r#"source /dev/stdin <<< "$SCRIPT"
c() { COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _lockscope lockscope "${@: -1}" "${@: -2:1}"; echo "${COMPREPLY[*]}"; }
c lockscope wa; c lockscope watch locks --st; c lockscope watch locks -o ''; c lockscope get lo"#;
    let out = Command::new("bash")
        .args(["-c", complete])
        .env("SCRIPT", &bash)
        .output()
        .expect("bash runs");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout).lines().collect::<Vec<_>>(),
        ["watch", "--state", "table wide json ndjson", "locks"],
        "what bash completes"
    );
    for shell in ["zsh", "fish"] {
        let script = stdout_of(&["completions", shell]);
        assert!(
            script.contains("watch") && script.contains("completions"),
            "{shell}: {script:.200}"
        );
        if let Some((ok, _, err)) = run_with(shell, &["-n"], &script) {
            assert!(ok, "{shell} -n refuses its script: {err}");
        }
    }
}

/// docs/operations.md: "`lockscope man` prints the man page, generated from
/// the same command line; `lockscope man --dir DIR` writes one page per
/// subcommand". Every subcommand is named, the page is plain ASCII roff, and
/// groff (where installed) renders it without a warning about its input.
#[test]
fn the_man_page_names_every_subcommand_and_renders() {
    use clap::CommandFactory;
    let page = stdout_of(&["man"]);
    assert!(
        page.starts_with(".ie") && page.contains(".TH lockscope 1"),
        "{page:.200}"
    );
    assert!(page.is_ascii(), "past ASCII as groff escapes");
    let cli = lockscope::cli::args::Cli::command();
    let subcommands: Vec<&str> = cli.get_subcommands().map(|c| c.get_name()).collect();
    assert!(
        ["get", "describe", "watch", "completions", "man"]
            .iter()
            .all(|s| subcommands.contains(s)),
        "{subcommands:?}"
    );
    for name in &subcommands {
        assert!(
            page.contains(&format!("lockscope\\-{name}(1)")),
            "the page names {name}"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let dir_arg = dir.path().to_str().unwrap();
    stdout_of(&["man", "--dir", dir_arg]);
    for file in [
        "lockscope.1",
        "lockscope-watch-locks.1",
        "lockscope-get-sessions.1",
        "lockscope-completions.1",
    ] {
        let written = std::fs::read_to_string(dir.path().join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
        assert!(written.is_ascii() && written.contains(".TH"), "{file}");
    }
    if let Some((ok, rendered, err)) = run_with("groff", &["-man", "-Tutf8", "-ww"], &page) {
        assert!(ok, "{err}");
        assert!(!err.contains("invalid input"), "groff reads every character: {err}");
        assert!(rendered.contains("lockscope-watch(1)"), "{rendered:.300}");
    }
}
