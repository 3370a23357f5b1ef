//! The job table and audit log on both backends: a `job_id` inserted twice
//! keeps the first, a queued job is claimed by exactly one of two racers,
//! listings filter by status, the audit log filters by degraded, and a
//! job's new state commits with its audit row and its event.

mod common;

use hale_core::event::{Event, EventKind};
use hale_store::{AuditEntry, JobRecord, Store, Write};
use serde_json::json;

fn job(id: &str, status: &str, next: Option<u64>) -> JobRecord {
    JobRecord {
        job_id: id.into(),
        status: status.into(),
        next_attempt_ms: next,
        updated_ms: 1_700_000_000_000,
        body: json!({"job_id": id, "n": 1}),
    }
}

async fn jobs_contract(store: &Store) {
    assert_eq!(
        store
            .insert_job(&job("a", "queued", Some(5)))
            .await
            .unwrap(),
        None
    );
    let mut second = job("a", "running", None);
    second.body = json!({"other": true});
    let kept = store
        .insert_job(&second)
        .await
        .unwrap()
        .expect("first kept");
    assert_eq!(kept.status, "queued");
    assert_eq!(kept.body, json!({"job_id": "a", "n": 1}));
    store
        .insert_job(&job("b", "completed", None))
        .await
        .unwrap();

    let (x, y) = tokio::join!(
        store.claim_job("a", "queued", "running", 1),
        store.claim_job("a", "queued", "running", 2)
    );
    assert!(x.unwrap() ^ y.unwrap(), "exactly one claim wins");
    assert!(store.queued_jobs(10).await.unwrap().is_empty());

    let mut done = job("a", "completed", None);
    done.body = json!({"result": 42});
    store.update_job(&done).await.unwrap();
    assert_eq!(
        store.job("a").await.unwrap().unwrap().body,
        json!({"result": 42})
    );
    assert_eq!(store.jobs(Some("completed"), 10).await.unwrap().len(), 2);
    assert_eq!(store.jobs(Some("queued"), 10).await.unwrap().len(), 0);
    assert_eq!(store.jobs(None, 1).await.unwrap().len(), 1);
    assert!(store.job("nope").await.unwrap().is_none());
    // Settling: the whole row moves from a status at once, for one caller.
    store
        .insert_job(&job("s", "queued", Some(5)))
        .await
        .unwrap();
    let mut expired = job("s", "expired", None);
    expired.body = json!({"error": "ttl"});
    let mut cancelled = job("s", "cancelled", None);
    cancelled.body = json!({"error": "cancelled"});
    // Its event commits with it (one transaction); the loser writes nothing.
    let settle_event = |id: &str, kind: EventKind| {
        let e = Event {
            id: id.into(),
            time_ms: 12,
            kind,
            agent: None,
            task: None,
            turn: None,
            payload: json!({"job_id": "s"}),
        };
        (e.id.clone(), Write::Event(e))
    };
    let (won_id, won) = settle_event("01JOBEXPIREDEVENT000000000", EventKind::JobExpired);
    let (lost_id, lost) = settle_event("01JOBCANCELLEDEVENT0000000", EventKind::JobCancelled);
    assert!(
        store
            .settle_job("queued", &expired, vec![won])
            .await
            .unwrap()
    );
    assert!(
        !store
            .settle_job("queued", &cancelled, vec![lost])
            .await
            .unwrap()
    );
    let s = store.job("s").await.unwrap().unwrap();
    assert_eq!(
        (s.status.as_str(), s.next_attempt_ms, s.body),
        ("expired", None, json!({"error": "ttl"}))
    );
    let events = store.events_after(0, 100, None).await.unwrap();
    assert!(
        events.iter().any(|e| e.event.id == won_id),
        "the settled job's event is in the outbox"
    );
    assert!(
        !events.iter().any(|e| e.event.id == lost_id),
        "the losing settle wrote its event"
    );
    // Stale jobs: of one status, updated before a time, oldest first.
    let mut old = job("old", "running", None);
    old.updated_ms = 100;
    let mut older = job("older", "running", None);
    older.updated_ms = 50;
    let mut fresh = job("fresh", "running", None);
    fresh.updated_ms = 1_000;
    for j in [&fresh, &old, &older] {
        store.insert_job(j).await.unwrap();
    }
    let stale = store.stale_jobs("running", 500, 10).await.unwrap();
    assert_eq!(
        stale.iter().map(|j| j.job_id.as_str()).collect::<Vec<_>>(),
        vec!["older", "old"]
    );
    assert_eq!(
        store.stale_jobs("running", 500, 1).await.unwrap()[0].job_id,
        "older"
    );
    assert!(
        store
            .stale_jobs("queued", 500, 10)
            .await
            .unwrap()
            .is_empty()
    );

    let audit = |id: &str, t: u64, status: &str, degraded: bool, body| {
        Write::Audit(AuditEntry {
            job_id: id.into(),
            time_ms: t,
            status: status.into(),
            degraded,
            body,
        })
    };
    // The finished state, its audit row and its event: one commit.
    let mut finished = job("b", "failed", None);
    finished.body = json!({"error": "boom"});
    let ev = Event {
        id: "01JOBFAILEDEVENT0000000000".into(),
        time_ms: 11,
        kind: EventKind::JobFailed,
        agent: None,
        task: None,
        turn: None,
        payload: json!({"job_id": "b"}),
    };
    let ev_id = ev.id.clone();
    store
        .commit(vec![
            audit("a", 10, "completed", true, json!({"k": 1})),
            Write::Job(finished),
            audit("b", 11, "failed", false, json!({"k": 2})),
            Write::Event(ev),
        ])
        .await
        .unwrap();
    let b = store.job("b").await.unwrap().unwrap();
    assert_eq!(
        (b.status.as_str(), b.body),
        ("failed", json!({"error": "boom"}))
    );
    let events = store.events_after(0, 100, None).await.unwrap();
    assert!(
        events.iter().any(|e| e.event.id == ev_id),
        "the job event is in the outbox with the row"
    );
    let all = store.audit(None, 10).await.unwrap();
    assert_eq!(
        all.iter().map(|r| r.job_id.as_str()).collect::<Vec<_>>(),
        vec!["b", "a"]
    );
    let degraded = store.audit(Some(true), 10).await.unwrap();
    assert_eq!(degraded.len(), 1);
    assert_eq!(degraded[0].body, json!({"k": 1}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_jobs_are_idempotent_claimed_once_and_audited() {
    let Some(t) = common::sqlite().await else {
        return;
    };
    jobs_contract(&t.store).await;
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_jobs_are_idempotent_claimed_once_and_audited() {
    let Some(t) = common::postgres().await else {
        return;
    };
    jobs_contract(&t.store).await;
    t.finish().await;
}
