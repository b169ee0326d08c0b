use lockscope_model::FleetState;

use super::*;

#[test]
fn keys_of_the_layout() {
    // `etcdctl lock /mx/jobs/nightly` under `#/mx/`: the lock `jobs/nightly`.
    assert_eq!(
        parse_key("jobs/nightly/694d7a3b3c0c6a04", Some(0x694d7a3b3c0c6a04)),
        Key::Contender {
            name: "jobs/nightly".into(),
            lease: 0x694d7a3b3c0c6a04
        }
    );
    assert_eq!(
        parse_key("jobs/1f", None),
        Key::Contender {
            name: "jobs".into(),
            lease: 0x1f
        }
    );
    for (rest, on, why) in [
        ("nightly", Some(1), "no '/'"),
        ("/1f", Some(0x1f), "the lock name is empty"),
        ("jobs/nightly/", Some(1), "\"\" is not a lease id"),
        ("jobs/zz", Some(1), "\"zz\" is not a lease id"),
        ("jobs/+1f", Some(0x1f), "\"+1f\" is not a lease id"),
        ("jobs/11112222333344445", Some(1), "is not a lease id"),
        ("jobs/1f", Some(0), "names lease 1f but is on no lease"),
        ("jobs/1f", Some(0x2a), "names lease 1f but is on lease 2a"),
    ] {
        match parse_key(rest, on) {
            Key::Malformed { name, error } => {
                assert_eq!(name, rest, "a malformed key is shown under its whole name");
                assert!(error.contains(why), "{rest}: {error}");
            }
            other => panic!("{rest} read as {other:?}"),
        }
    }
}

fn put(t: &mut Table, rest: &str, lease: i64, rev: i64, value: &str) -> String {
    let key = format!("/mx/{rest}");
    t.put_raw(key.as_bytes(), rest, lease, rev, rev, value.as_bytes())
}

fn del(t: &mut Table, rest: &str) -> Option<String> {
    t.delete(format!("/mx/{rest}").as_bytes())
}

fn holder(state: &FleetState, name: &str) -> Option<(i64, Option<String>)> {
    state
        .get(name)
        .map(|e| (e.fence, e.holder_session().map(str::to_string)))
}

fn waiters(state: &FleetState, name: &str) -> Vec<String> {
    state.waiters_of(name).map(str::to_string).collect()
}

#[test]
fn the_lowest_create_revision_holds_and_the_rest_wait_in_order() {
    let mut t = Table::default();
    let mut state = FleetState::default();
    let n = put(&mut t, "jobs/nightly/a", 0xa, 5, "");
    for e in t.settle([n], 5) {
        state.apply(e);
    }
    assert_eq!(holder(&state, "jobs/nightly"), Some((5, Some("a".into()))));
    let n = put(&mut t, "jobs/nightly/b", 0xb, 7, "");
    let events = t.settle([n], 7);
    assert!(
        events.iter().all(|e| match e {
            FleetEvent::Upsert(u) => u.fence == 5 && u.holder_session() == Some("a"),
            _ => true,
        }),
        "a waiter arriving changes no holder (only the queue the entry carries): {events:?}"
    );
    for e in events {
        state.apply(e);
    }
    assert_eq!(waiters(&state, "jobs/nightly"), vec!["b".to_string()]);
    // The holder's key goes: released, then the waiter's acquisition at the
    // delete's revision, fenced by its own create revision.
    let n = del(&mut t, "jobs/nightly/a").unwrap();
    let events = t.settle([n], 9);
    assert!(matches!(&events[0], FleetEvent::Remove { name, revision: 9 } if name == "jobs/nightly"));
    assert!(matches!(&events[1], FleetEvent::Upsert(e) if e.fence == 7 && e.revision == 9));
    for e in events {
        state.apply(e);
    }
    assert_eq!(holder(&state, "jobs/nightly"), Some((7, Some("b".into()))));
    assert!(waiters(&state, "jobs/nightly").is_empty());
    let n = del(&mut t, "jobs/nightly/b").unwrap();
    for e in t.settle([n], 11) {
        state.apply(e);
    }
    assert_eq!(state.locks().count(), 0);
    assert!(del(&mut t, "jobs/nightly/b").is_none(), "deleted once");
}

#[test]
fn an_elections_value_is_the_proposal_and_a_malformed_key_is_shown() {
    let mut t = Table::default();
    t.leases.insert(
        0xc,
        LeaseInfo {
            id: "c".into(),
            granted_s: 60,
            ttl_s: 59,
            read_at: 1,
            keys: vec!["/mx/leader/c".into()],
            keys_total: 1,
        },
    );
    let a = put(&mut t, "leader/c", 0xc, 3, "replica-1");
    let b = put(&mut t, "stray", 0, 4, "x");
    let snap = t.snapshot(4);
    assert_eq!(snap.locks.len(), 2);
    match &snap.locks[0].body {
        LockBody::Foreign {
            session,
            proposal,
            lease,
            written_at,
            key: _,
            detail: _,
        } => {
            assert_eq!(session.as_deref(), Some("c"));
            assert_eq!(proposal.as_deref(), Some("replica-1"));
            assert_eq!(lease.as_ref().map(|l| (l.granted_s, l.ttl_s)), Some((60, 59)));
            assert_eq!(*written_at, None, "unknown, never invented");
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(&snap.locks[1].body, LockBody::Malformed { error, .. } if error.contains("no '/'")));
    assert_eq!(snap.sessions, None, "a lease is not a lockscope session");
    // A rewrite of the holder's value (Proclaim) is an upsert of the same acquisition.
    put(&mut t, "leader/c", 0xc, 3, "replica-1 v2");
    let events = t.settle([a, b], 6);
    assert!(
        matches!(&events[..], [FleetEvent::Upsert(e)] if e.fence == 3 && e.revision == 6),
        "{events:?}"
    );
}

/// docs/security.md: "an etcd election's proposal | 1024 bytes | fixed | cut there (on a
/// character boundary)".
#[test]
fn a_long_proposal_is_cut_at_1024_bytes_on_a_character_boundary() {
    assert_eq!(PROPOSAL_KEEP_BYTES, 1024);
    let ascii = "a".repeat(2000);
    assert_eq!(proposal_of(ascii.as_bytes()).unwrap().len(), 1024);
    // 'é' is two bytes: 1023 of 'a' then 'é' would end at byte 1025, so it goes.
    let accented = format!("{}é{}", "a".repeat(1023), "b".repeat(10));
    assert_eq!(proposal_of(accented.as_bytes()).unwrap(), "a".repeat(1023));
    assert_eq!(
        proposal_of(b"replica-1").as_deref(),
        Some("replica-1"),
        "a short one whole"
    );
}
