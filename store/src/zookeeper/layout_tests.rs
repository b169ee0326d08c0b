use super::*;

fn node(name: &str, owner: i64, czxid: i64) -> ZkNode {
    let stat = zookeeper_client::Stat {
        czxid,
        mzxid: czxid,
        pzxid: czxid,
        ctime: 1_000 + czxid,
        mtime: 1_000 + czxid,
        version: 0,
        cversion: 0,
        aversion: 0,
        ephemeral_owner: owner,
        data_length: 0,
        num_children: 0,
    };
    super::node(name, &stat, b"").expect(name)
}

#[test]
fn every_library_s_node_names() {
    // docs/operations.md: "`lock-0000000007`, Curator's `_c_<uuid>-lock-0000000007`, kazoo's
    // `<uuid>__lock__0000000007`, read/write locks' `__READ__`/`__WRIT__` parts".
    let cases = [
        ("lock-0000000007", Some((7, false, ZkRecipe::Recipe))),
        ("x-guid-lock-0000000008", Some((8, false, ZkRecipe::Recipe))),
        ("read-0000000001", Some((1, true, ZkRecipe::Recipe))),
        ("write-0000000002", Some((2, false, ZkRecipe::Recipe))),
        ("_c_0f6e-aa-lock-0000000007", Some((7, false, ZkRecipe::Curator))),
        ("_c_0f6e-aa-__READ__0000000003", Some((3, true, ZkRecipe::Curator))),
        ("_c_0f6e-aa-__WRIT__0000000004", Some((4, false, ZkRecipe::Curator))),
        ("0fee1f4a__lock__0000000000", Some((0, false, ZkRecipe::Kazoo))),
        ("0fee1f4a__rlock__0000000005", Some((5, true, ZkRecipe::Kazoo))),
        ("lock-000000007", None),
        ("lock-00000000x7", None),
        ("member-0000000001", None),
        ("locks", None),
        ("_c_0f6e-lease-0000000001", None),
    ];
    for (name, want) in cases {
        assert_eq!(parse_node(name), want, "{name}");
    }
    let stat = zookeeper_client::Stat {
        czxid: 1,
        mzxid: 1,
        pzxid: 1,
        ctime: 0,
        mtime: 0,
        version: 0,
        cversion: 0,
        aversion: 0,
        ephemeral_owner: 0,
        data_length: 0,
        num_children: 0,
    };
    assert!(
        super::node("lock-0000000001", &stat, b"").is_none(),
        "a persistent node contends for nothing"
    );
}

#[test]
fn the_holder_is_the_lowest_sequence_and_readers_share() {
    let w = |seq: i64| node(&format!("lock-{seq:010}"), 0x10 + seq, 100 + seq);
    let r = |seq: i64| node(&format!("read-{seq:010}"), 0x10 + seq, 100 + seq);
    assert_eq!(holders(&[w(1), w(2)]), 1);
    assert_eq!(
        holders(&[r(1), r(2), w(3), r(4)]),
        2,
        "every reader ahead of the first writer"
    );
    assert_eq!(holders(&[w(1), r(2), r(3)]), 1);
    assert_eq!(holders(&[]), 0);

    let (entry, waiters) = derive("a/b", "/root/a/b", vec![r(1), r(2), w(3), r(4)]).unwrap();
    assert_eq!(entry.fence, 101, "the fence is the holder node's czxid");
    assert_eq!(entry.holder_session(), Some("0x11"));
    assert_eq!(
        waiters,
        ["0x13".to_string(), "0x14".to_string()].into(),
        "readers holding are not waiters"
    );
    let LockBody::Foreign { written_at, .. } = &entry.body else {
        panic!()
    };
    assert_eq!(*written_at, Some(1_101), "the holder node's ctime");
}

#[test]
fn settling_says_what_changed() {
    let mut t = Table::new("/root");
    assert_eq!(t.split("/root/a/b/lock-0000000001"), Some(("a/b", "lock-0000000001")));
    assert_eq!(
        t.split("/root/lock-0000000001"),
        None,
        "a contender needs a lock znode below ROOT"
    );
    t.put("a", node("lock-0000000001", 0x1, 11));
    t.put("a", node("lock-0000000002", 0x2, 12));
    let ev = t.settle(["a".to_string()], 1);
    assert!(
        matches!(&ev[0], FleetEvent::Upsert(e) if e.fence == 11 && e.revision == 1),
        "{ev:?}"
    );
    assert!(matches!(&ev[1], FleetEvent::Waiting(w) if w.session == "0x2"), "{ev:?}");
    assert_eq!(ev.len(), 2);
    // Nothing changed: nothing said.
    assert!(t.settle(["a".to_string()], 2).is_empty());
    // The holder goes: its release, the waiter's acquisition, and it waits no more.
    assert!(t.delete("a", "lock-0000000001"));
    let ev = t.settle(["a".to_string()], 3);
    assert!(
        matches!(&ev[0], FleetEvent::Remove { name, .. } if name == "a"),
        "{ev:?}"
    );
    assert!(matches!(&ev[1], FleetEvent::Upsert(e) if e.fence == 12), "{ev:?}");
    assert!(
        matches!(&ev[2], FleetEvent::StoppedWaiting(w) if w.session == "0x2"),
        "{ev:?}"
    );
    assert!(t.delete("a", "lock-0000000002"));
    assert!(!t.delete("a", "lock-0000000002"));
    let ev = t.settle(["a".to_string()], 4);
    assert!(matches!(&ev[..], [FleetEvent::Remove { .. }]), "{ev:?}");
    assert_eq!(t.len(), 0);
    let snap = t.snapshot(5);
    assert!(snap.locks.is_empty() && snap.waiters.is_empty());
}

#[test]
fn a_long_queue_keeps_its_first_contenders_and_every_waiter() {
    // ZK_NODES_KEPT bounds what one entry carries; the waiters stay whole.
    let nodes: Vec<ZkNode> = (0..150)
        .map(|i| node(&format!("lock-{i:010}"), 0x100 + i, 10 + i))
        .collect();
    let (entry, waiters) = derive("q", "/r/q", nodes).unwrap();
    let LockBody::Foreign { detail: Some(d), .. } = &entry.body else {
        panic!()
    };
    let FamilyDetail::Zookeeper(l) = &**d else { panic!() };
    assert_eq!((l.nodes.len(), l.nodes_total), (ZK_NODES_KEPT, 150));
    assert_eq!(waiters.len(), 149);
}

/// docs/operations.md, ZooKeeper: "every contender in order with its session, age and data
/// (its first 256 bytes, cut on a character boundary)".
#[test]
fn a_contenders_data_is_cut_at_256_bytes_on_a_character_boundary() {
    assert_eq!(ZK_DATA_KEEP_BYTES, 256);
    assert_eq!(data_text(&[b'a'; 300]).unwrap().len(), 256);
    let accented = format!("{}é", "a".repeat(255));
    assert_eq!(data_text(accented.as_bytes()).unwrap(), "a".repeat(255));
    assert_eq!(data_text(b"").as_deref(), None, "empty: none");
    assert_eq!(data_text(b"host-1").as_deref(), Some("host-1"));
}
