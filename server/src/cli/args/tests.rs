use super::*;

#[test]
fn cli_is_consistent() {
    use clap::CommandFactory;
    Cli::command().debug_assert();
}

#[test]
fn unlocker_modes_for_all_or_one_fleet() {
    let cli = Cli::try_parse_from(["lockscope", "--unlocker", "on", "--unlocker", "prod=dry-run"]).unwrap();
    assert_eq!(
        cli.serve.unlocker,
        [(None, Mode::On), (Some("prod".to_string()), Mode::DryRun)]
    );
    assert!(Cli::try_parse_from(["lockscope", "--unlocker", "yes"]).is_err());
    assert!(Cli::try_parse_from(["lockscope", "--unlocker", "bad name=on"]).is_err());
}

#[test]
fn fleets_parse_with_clear_errors() {
    let f = parse_fleet("prod=etcd:http://a:1,http://b:2").unwrap();
    assert_eq!(f.name, "prod");
    assert!(matches!(f.store, StoreSpec::Etcd { ref endpoints, .. } if endpoints.len() == 2));
    // docs/operations.md: "`etcd-mutex:ENDPOINT[,ENDPOINT…]#PREFIX`, in this exact form: the
    // prefix is required".
    let f = parse_fleet("jobs=etcd-mutex:http://a:1#/mx/").unwrap();
    assert!(matches!(f.store, StoreSpec::EtcdMutex { ref prefix, .. } if prefix == "/mx/"));
    for (spec, why) in [
        ("x=etcd-mutex:http://a:1", "needs '#'"),
        ("no-equals", "NAME=STORE"),
        ("bad name=sqlite:x", "fleet name"),
        ("x=etcd:", "at least one endpoint"),
        ("x=mysql://root:hunter2@h", "expected etcd:"),
    ] {
        let err = parse_fleet(spec).unwrap_err();
        assert!(err.contains(why) && !err.contains("hunter2"), "{spec}: {err}");
    }
}

#[test]
fn subcommands_default_to_the_embedded_file_and_take_any_store() {
    let store = |argv: &[&str]| {
        let cli = Cli::try_parse_from(argv).unwrap();
        match cli.command {
            Some(Command::Lock(l)) => l.store.spec(),
            other => panic!("not lock: {other:?}"),
        }
    };
    assert_eq!(
        store(&["lockscope", "lock", "x"]),
        StoreSpec::sqlite_file(std::path::Path::new(".lockscope/lockscope.db"))
    );
    assert_eq!(
        store(&["lockscope", "lock", "x", "--etcd", "http://a:1", "--prefix", "/p/"]),
        StoreSpec::Etcd {
            endpoints: vec!["http://a:1".into()],
            prefix: Some("/p/".into())
        }
    );
    assert!(matches!(
        store(&["lockscope", "lock", "x", "--store", "postgres://h/db"]),
        StoreSpec::Sql { .. }
    ));
}

#[test]
fn serve_is_the_default_and_subcommands_have_their_own_store() {
    let cli = Cli::try_parse_from(["lockscope", "--etcd", "http://a:1,http://b:2"]).unwrap();
    assert!(cli.command.is_none());
    assert_eq!(cli.serve.etcd, ["http://a:1", "http://b:2"]);
    let cli = Cli::try_parse_from(["lockscope", "--store", "a=sqlite:x.db", "--store", "b=etcd:http://e:1"]).unwrap();
    assert_eq!(cli.serve.stores.len(), 2);
    let cli = Cli::try_parse_from(["lockscope"]).unwrap();
    assert!(
        cli.serve.etcd.is_empty() && cli.serve.stores.is_empty(),
        "nothing configured: the embedded default"
    );
    let cli = Cli::try_parse_from(["lockscope", "lock", "x", "--etcd", "http://a:1", "--purpose", "p"]).unwrap();
    assert!(matches!(cli.command, Some(Command::Lock(ref l)) if l.name == "x" && l.purpose == "p"));
}

#[test]
fn demo_defaults_match_the_library_defaults() {
    let cli = Cli::try_parse_from(["lockscope", "demo", "--etcd", "http://a:1"]).unwrap();
    let Some(Command::Demo(args)) = cli.command else {
        panic!("not demo: {:?}", cli.command)
    };
    assert_eq!(args.demo_config(), DemoConfig::default());
}

#[test]
fn demo_flags_are_parsed_and_checked() {
    let cli = Cli::try_parse_from([
        "lockscope",
        "demo",
        "--etcd",
        "http://a:1",
        "--workers",
        "4",
        "--hot-share",
        "0.8",
        "--duration-secs",
        "3",
        "--seed",
        "9",
        "--hang-rate",
        "0.25",
        "--hang-secs",
        "4",
        "--auto-unlock-ms",
        "7000",
        "--name-prefix",
        "hung/",
    ])
    .unwrap();
    let Some(Command::Demo(args)) = cli.command else {
        panic!("not demo")
    };
    let cfg = args.demo_config();
    assert_eq!((cfg.workers, cfg.hot_share, cfg.seed), (4, 0.8, Some(9)));
    assert_eq!(cfg.duration, Some(Duration::from_secs(3)));
    assert_eq!(cfg.hang_rate, 0.25);
    assert_eq!(cfg.hang, Duration::from_secs(4)..=Duration::from_secs(4));
    assert_eq!(cfg.auto_unlock_after, Duration::from_secs(7));
    assert_eq!(cfg.name_prefix, "hung/");
    for bad in [
        ["--die-rate", "1.5"],
        ["--hot-share", "-0.1"],
        ["--stall-rate", "x"],
        ["--workers", "0"],
        ["--hang-rate", "2"],
        ["--hang-secs", "0"],
        ["--auto-unlock-ms", "0"],
        ["--name-prefix", "bell\u{7}/"],
        ["--name-prefix", &"x".repeat(500)],
    ] {
        let argv = ["lockscope", "demo", "--etcd", "http://a:1", bad[0], bad[1]];
        assert!(Cli::try_parse_from(argv).is_err(), "{bad:?} accepted");
    }
}
