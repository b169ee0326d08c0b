//! The audit spool and the audit log's own file, beyond the held store
//! ([`super`]): the spool's bound refuses an action before it acts; entries a
//! stopped server left queued are written at the next start; a page's form
//! says an entry is queued; an entry the database refuses for its content is
//! never queued; an existing install's entries move to the log's own file once.

use std::time::{Duration, Instant};

use lockscope::remember::audit::AuditLog;
use lockscope_model::admin::{Action, AuditEntry, AuditQuery, Outcome};
use lockscope_store::protocol::LockStore;

use super::{raw_lock, Holder};

#[tokio::test]
async fn with_the_spool_full_an_action_is_refused_before_it_acts() {
    let s = crate::admin::Server::start().await;
    let fence = raw_lock(&s.store, "busy/full").await;
    let file = s.dir.path().join("audit.db");
    let holder = Holder::hold(&file);
    let entry = AuditEntry {
        at: 1,
        actor: "filler".into(),
        via: "api".into(),
        action: Some(Action::Release),
        fleet: "f".into(),
        target: "t".into(),
        reason: "r".into(),
        outcome: Some(Outcome::Done),
        detail: "d".into(),
        ..AuditEntry::default()
    };
    let max = lockscope::remember::audit::spool::SPOOL_MAX;
    for _ in 0..max {
        let kept = s.audit.record(&entry, s.audit.ready().unwrap()).await.unwrap();
        assert!(
            matches!(kept, lockscope::remember::audit::Recorded::Queued { .. }),
            "{kept:?}"
        );
    }
    assert!(s.audit.ready().is_err(), "no place for a 1001st");
    // docs/operations.md: "When the spool holds 1000 entries, admin actions
    // are refused before they act".
    let body = serde_json::json!({"fence": fence, "owner": null, "reason": "INC-24: full spool"});
    let reply = s
        .send(
            "POST",
            "/api/v1/fleets/sql/locks/busy%2Ffull/release",
            &[
                ("authorization", &s.bearer("operator")),
                ("content-type", "application/json"),
            ],
            &body.to_string(),
        )
        .await;
    assert_eq!(reply.status, 503, "{}", reply.body);
    assert!(
        reply.body.contains("the audit log cannot take entries now") && reply.body.contains("nothing done"),
        "{}",
        reply.body
    );
    let now = s.store.get("busy/full").await.unwrap().expect("not released");
    assert_eq!(now.fence, fence);

    // "…written to the log, in order and in one transaction, as soon as it
    // takes writes again".
    holder.commit();
    let deadline = Instant::now() + Duration::from_secs(10);
    while s.audit.spool_counts().0 > 0 {
        assert!(Instant::now() < deadline, "the spool was not written");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let all = s
        .audit
        .query(&AuditQuery {
            limit: Some(2 * max as u32),
            ..AuditQuery::default()
        })
        .await
        .unwrap();
    assert_eq!(all.len(), max, "every queued entry, once");
    assert!(all.windows(2).all(|w| w[0].id > w[1].id));
    assert!(s.audit.ready().is_ok());
}

#[tokio::test]
async fn an_existing_installs_audit_entries_move_to_the_audit_file_once() {
    let dir = tempfile::tempdir().unwrap();
    let store_file = dir.path().join(".lockscope/lockscope.db");
    // An earlier version's log, in the store's file.
    let old = AuditLog::open(&format!("sqlite:{}", store_file.display()))
        .await
        .unwrap();
    let mut ids = Vec::new();
    for i in 0..3 {
        let e = AuditEntry {
            at: 1_000 + i,
            actor: "alice".into(),
            via: "api".into(),
            action: Some(Action::Release),
            fleet: "embedded".into(),
            target: format!("old/{i}"),
            reason: "INC-1".into(),
            outcome: Some(Outcome::Done),
            detail: "released".into(),
            ..AuditEntry::default()
        };
        ids.push(old.append(&e).await.unwrap().id);
    }
    // docs/operations.md: "On the first start with the new default, the entries
    // in `lockscope.db` are copied into `lockscope-audit.db` with their ids,
    // once; the rows in `lockscope.db` are left as they were".
    let log = AuditLog::open_configured(None, &store_file).await.unwrap();
    let moved = log.query(&AuditQuery::default()).await.unwrap();
    assert_eq!(moved.iter().map(|e| e.id).rev().collect::<Vec<_>>(), ids);
    assert_eq!(moved[0].target, "old/2");
    let next = log.append(&moved[0]).await.unwrap();
    assert!(next.id > ids[2], "new ids follow the old ones");
    drop(log);
    let again = AuditLog::open_configured(None, &store_file).await.unwrap();
    assert_eq!(
        again.query(&AuditQuery::default()).await.unwrap().len(),
        4,
        "imported once"
    );
    assert_eq!(
        old.query(&AuditQuery::default()).await.unwrap().len(),
        3,
        "the old rows stay"
    );
}

#[tokio::test]
async fn entries_queued_by_an_earlier_run_are_written_at_the_next_start() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("audit.db");
    let entry = AuditEntry {
        at: 7,
        actor: "bob".into(),
        via: "browser".into(),
        action: Some(Action::Blacklist),
        fleet: "f".into(),
        target: "s1".into(),
        reason: "INC-2".into(),
        outcome: Some(Outcome::Done),
        detail: "blacklisted session s1 (holding 0 locks)".into(),
        ..AuditEntry::default()
    };
    // What a server stopped while its audit log was held left in the spool.
    let line = serde_json::to_string(&entry).unwrap();
    std::fs::write(format!("{}.spool", file.display()), format!("{line}\n")).unwrap();
    // docs/operations.md: "tried every second, and at the next start if the
    // server stopped meanwhile".
    let audit = AuditLog::open(&format!("sqlite:{}", file.display())).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while audit.spool_counts().0 > 0 {
        assert!(Instant::now() < deadline, "the spool was not written");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let all = audit.query(&AuditQuery::default()).await.unwrap();
    assert_eq!(all.len(), 1, "{all:?}");
    assert_eq!(
        AuditEntry {
            id: 0,
            ..all[0].clone()
        },
        entry
    );
    let spool = std::fs::read_to_string(format!("{}.spool", file.display())).unwrap();
    assert!(spool.is_empty(), "emptied: {spool}");
}

#[tokio::test]
async fn a_form_whose_audit_entry_is_queued_says_so() {
    let s = crate::admin::Server::start().await;
    let fence = raw_lock(&s.store, "busy/form").await;
    let (cookies, csrf) = s.browser("operator").await;
    let holder = Holder::hold(&s.dir.path().join("audit.db"));
    let form = format!(
        "fleet=sql&name=busy%2Fform&confirm=busy%2Fform&fence={fence}&owner=&reason=INC-24&csrf={csrf}&back=%2F"
    );
    let r = s.post_form("/actions/release", &cookies, &form).await;
    // docs/operations.md: "the answer says so" — the page as well as the API.
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.body.contains("Done, its audit entry queued"), "{}", r.body);
    assert!(!r.body.contains("Not recorded"), "{}", r.body);
    assert!(s.store.get("busy/form").await.unwrap().is_none(), "released");
    holder.commit();
}

#[tokio::test]
async fn an_entry_the_database_refuses_for_its_content_is_not_queued() {
    // PostgreSQL's TEXT takes no NUL (the API's entries have theirs replaced):
    // such an entry would block every entry queued behind it for ever.
    let pg = lockscope_store::testing::PgServer::start().await;
    let audit = AuditLog::open(&pg.url()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    audit.set_spool(&dir.path().join("audit.spool")).unwrap();
    let entry = AuditEntry {
        at: 1,
        actor: "a".into(),
        via: "api".into(),
        action: Some(Action::Release),
        fleet: "f".into(),
        target: "t".into(),
        reason: "with a \0 in it".into(),
        outcome: Some(Outcome::Done),
        detail: "d".into(),
        ..AuditEntry::default()
    };
    assert!(
        audit.record(&entry, audit.ready().unwrap()).await.is_err(),
        "refused, not queued"
    );
    assert_eq!(audit.spool_counts(), (0, 0));
    let fine = AuditEntry {
        reason: "without".into(),
        ..entry
    };
    let kept = audit.record(&fine, audit.ready().unwrap()).await.unwrap();
    assert!(
        matches!(kept, lockscope::remember::audit::Recorded::Written(_)),
        "{kept:?}"
    );
}

#[tokio::test]
async fn a_log_without_a_spool_of_its_own_allows_no_action() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("audit.db").display());
    // A reader opening the log first (a test, a tool) takes no spool…
    let reader = AuditLog::open_read_only(&url).await.unwrap();
    let why = reader.ready().unwrap_err();
    assert!(why.contains("opened only to read"), "{why}");
    // …so the server opening it next owns it and may act.
    let server = AuditLog::open(&url).await.unwrap();
    assert!(server.ready().is_ok());
    // docs/operations.md: "a second server on the same audit spool refuses
    // admin actions and auto-releases (503)" — it could not keep their
    // entries while the database does not take them (it used to act, and
    // lose them).
    let second = AuditLog::open(&url).await.unwrap();
    let why = second.ready().unwrap_err();
    assert!(
        why.contains("is another process's") && why.contains("nothing done"),
        "{why}"
    );
}

#[tokio::test]
async fn a_spool_written_again_leaves_one_entry_each() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("audit.db");
    let audit = AuditLog::open(&format!("sqlite:{}", file.display())).await.unwrap();
    let holder = Holder::hold(&file);
    let entry = AuditEntry {
        at: 9,
        actor: "carol".into(),
        via: "api".into(),
        action: Some(Action::Release),
        fleet: "f".into(),
        target: "twice".into(),
        reason: "INC-6".into(),
        outcome: Some(Outcome::Done),
        detail: "released".into(),
        ..AuditEntry::default()
    };
    let kept = audit.record(&entry, audit.ready().unwrap()).await.unwrap();
    assert!(
        matches!(kept, lockscope::remember::audit::Recorded::Queued { .. }),
        "{kept:?}"
    );
    // The spool cannot be rewritten once its entries are in the log (a
    // directory has the name of its new file; in production, a full disk):
    // every flush writes them again.
    let tmp = format!("{}.spool.tmp", file.display());
    std::fs::create_dir(&tmp).unwrap();
    holder.commit();
    let deadline = Instant::now() + Duration::from_secs(10);
    while audit.query(&AuditQuery::default()).await.unwrap().is_empty() {
        assert!(Instant::now() < deadline, "never written");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Flushed every second: a few more times.
    tokio::time::sleep(Duration::from_millis(3_500)).await;
    assert_eq!(audit.spool_counts().0, 1, "still in the file, still counted");
    std::fs::remove_dir(&tmp).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while audit.spool_counts().0 > 0 {
        assert!(Instant::now() < deadline, "the spool was not emptied");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // docs/operations.md: "every entry has a key of its own, and the log
    // skips one it has already: a spool written again never duplicates".
    let all = audit.query(&AuditQuery::default()).await.unwrap();
    assert_eq!(all.len(), 1, "one entry, however often the spool was written: {all:?}");
}
