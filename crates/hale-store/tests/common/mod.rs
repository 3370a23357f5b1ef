//! The API suite shared by the SQLite and PostgreSQL test files: every
//! function takes an open store and asserts one behaviour of the contract.
#![allow(dead_code)]

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use hale_core::event::{Event, EventKind};
use hale_store::{
    AgentRecord, CheckpointRecord, IdempotentResponse, Store, StoreError, StoreOptions,
    StoredResponse, TurnRecord, TurnStatus, Write,
};
use serde_json::json;

pub const DEFAULT_PG_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

/// A store under test, with what must be cleaned up after it.
pub struct TestStore {
    pub store: Store,
    pub dir: Option<tempfile::TempDir>,
    pub pg: Option<PgScratch>,
}

pub struct PgScratch {
    pub base_url: String,
    pub schema: String,
    pub url: String,
}

impl TestStore {
    pub async fn finish(self) {
        self.store.close().await;
        if let Some(pg) = self.pg {
            drop_schema(&pg).await;
        }
    }
}

pub fn opts() -> StoreOptions {
    StoreOptions::default()
}

pub async fn sqlite() -> Option<TestStore> {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = Store::open_sqlite(dir.path(), opts())
        .await
        .expect("open sqlite");
    Some(TestStore {
        store,
        dir: Some(dir),
        pg: None,
    })
}

pub async fn sqlite_at(dir: &Path) -> Store {
    Store::open_sqlite(dir, opts()).await.expect("open sqlite")
}

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A fresh schema on the test PostgreSQL, or `None` (with the reason
/// printed) when the server is unreachable — unless `CI=true`.
pub async fn pg_scratch() -> Option<PgScratch> {
    use sqlx::Connection;
    let base_url = std::env::var("HALE_TEST_PG_URL").unwrap_or_else(|_| DEFAULT_PG_URL.into());
    let mut conn = match sqlx::PgConnection::connect(&base_url).await {
        Ok(c) => c,
        Err(e) => {
            if std::env::var("CI").is_ok_and(|v| v == "true") {
                panic!("CI=true and PostgreSQL at {base_url} is unreachable: {e}");
            }
            eprintln!(
                "SKIPPED: PostgreSQL at {base_url} is unreachable ({e}); set CI=true to fail instead"
            );
            return None;
        }
    };
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let schema = format!(
        "hale_test_{}_{}_{}",
        std::process::id(),
        nanos % 1_000_000_000_000,
        COUNTER.fetch_add(1, Ordering::Relaxed)
    );
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE SCHEMA {schema}")))
        .execute(&mut conn)
        .await
        .expect("create test schema");
    let _ = conn.close().await;
    let sep = if base_url.contains('?') { '&' } else { '?' };
    let url = format!("{base_url}{sep}options[search_path]={schema}");
    Some(PgScratch {
        base_url,
        schema,
        url,
    })
}

pub async fn drop_schema(pg: &PgScratch) {
    use sqlx::Connection;
    if let Ok(mut conn) = sqlx::PgConnection::connect(&pg.base_url).await {
        let _ = sqlx::query(sqlx::AssertSqlSafe(format!(
            "DROP SCHEMA IF EXISTS {} CASCADE",
            pg.schema
        )))
        .execute(&mut conn)
        .await;
        let _ = conn.close().await;
    }
}

pub async fn postgres() -> Option<TestStore> {
    let pg = pg_scratch().await?;
    let store = Store::open_postgres(&pg.url, opts())
        .await
        .expect("open postgres");
    Some(TestStore {
        store,
        dir: None,
        pg: Some(pg),
    })
}

/// Generates one `#[tokio::test]` per suite function, on the given opener.
#[macro_export]
macro_rules! suite {
    ($open:path; $($name:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                let Some(t) = $open().await else { return };
                common::$name(&t.store).await;
                t.finish().await;
            }
        )*
    };
}

// ---- builders ---------------------------------------------------------------

pub fn ev(n: u64, kind: EventKind) -> Event {
    Event {
        id: format!("01HALE{n:020}"),
        time_ms: 1_700_000_000_000 + n,
        kind,
        agent: Some("a1".into()),
        task: None,
        turn: None,
        payload: json!({"n": n}),
    }
}

pub fn resp(body: &str) -> StoredResponse {
    StoredResponse {
        status: 200,
        headers: vec![("x-hale-provider".into(), "openai".into())],
        body: body.as_bytes().to_vec(),
        content_type: "application/json".into(),
    }
}

pub fn turn(id: &str, task: &str, hash: &str, status: TurnStatus, started_ms: u64) -> TurnRecord {
    TurnRecord {
        id: id.into(),
        agent: "a1".into(),
        task: Some(task.into()),
        request_hash: hash.into(),
        model_requested: "smart".into(),
        status,
        started_ms,
        duration_ms: None,
        provider: None,
        model: None,
        attempts: "[]".into(),
        usage_in: 0,
        usage_out: 0,
        error_class: None,
        response: None,
    }
}

pub fn agent(id: &str) -> AgentRecord {
    AgentRecord {
        id: id.into(),
        paused: false,
        consecutive_failures: 0,
        turns: 0,
        failed_turns: 0,
        tokens_in: 0,
        tokens_out: 0,
        cost_usd: 0.0,
        last_failure_ms: None,
        last_seen_ms: None,
        state: json!({"health": "healthy"}),
    }
}

pub fn checkpoint(id: &str, task: &str, parent: Option<&str>, created_ms: u64) -> CheckpointRecord {
    CheckpointRecord {
        id: id.into(),
        agent: "a1".into(),
        task: task.into(),
        parent: parent.map(Into::into),
        body: format!("{{\"step\":\"{id}\"}}").into_bytes(),
        sha256: "00".repeat(32),
        created_ms,
    }
}

async fn all_events(s: &Store) -> Vec<hale_store::StoredEvent> {
    s.events_after(0, 1_000_000, None)
        .await
        .expect("events_after")
}

// ---- the suite ----------------------------------------------------------------

pub async fn group_commit_batches_submits(s: &Store) {
    let before = s.commits();
    let n = 2_000u64;
    for i in 0..n {
        s.submit(vec![Write::Event(ev(i, EventKind::TurnCompleted))]);
    }
    s.flush().await.expect("flush");
    let commits = s.commits() - before;
    let events = all_events(s).await;
    assert_eq!(events.len() as u64, n, "every submitted event is stored");
    assert!(
        commits * 20 <= n,
        "{n} submits took {commits} transactions; group commit should need far fewer"
    );
    let ids: Vec<&str> = events.iter().map(|e| e.event.id.as_str()).collect();
    let mut sorted = ids.clone();
    sorted.sort();
    assert_eq!(ids, sorted, "seq order is submit order");
}

pub async fn concurrent_commits_share_transactions(s: &Store) {
    let before = s.commits();
    let mut tasks = Vec::new();
    for i in 0..200u64 {
        let s = s.clone();
        tasks.push(tokio::spawn(async move {
            s.commit(vec![
                Write::Agent(agent(&format!("agent-{i}"))),
                Write::Event(ev(i, EventKind::AgentPaused)),
            ])
            .await
        }));
    }
    for t in tasks {
        t.await.expect("join").expect("commit");
    }
    let commits = s.commits() - before;
    assert_eq!(
        s.agents_page(None, None, 1000).await.expect("agents").len(),
        200
    );
    assert_eq!(all_events(s).await.len(), 200);
    assert!(
        commits < 200,
        "200 concurrent commits took {commits} transactions"
    );
}

pub async fn commit_is_visible_on_return(s: &Store) {
    let mut a = agent("a1");
    a.paused = true;
    s.commit(vec![
        Write::Agent(a.clone()),
        Write::Event(ev(1, EventKind::AgentPaused)),
    ])
    .await
    .expect("commit");
    assert_eq!(s.agent("a1").await.expect("agent"), Some(a));
    assert_eq!(
        s.seq_of(&ev(1, EventKind::AgentPaused).id)
            .await
            .expect("seq_of"),
        Some(1)
    );
}

pub async fn upserts_replace_by_id(s: &Store) {
    let mut t = turn("t1", "task", "h1", TurnStatus::Running, 10);
    s.commit(vec![Write::Turn(t.clone())])
        .await
        .expect("commit");
    assert_eq!(s.turn("t1").await.expect("turn"), Some(t.clone()));
    t.status = TurnStatus::Succeeded;
    t.duration_ms = Some(1234);
    t.provider = Some("openai".into());
    t.model = Some("gpt-4o".into());
    t.attempts = json!([{"provider": "openai", "class": null}]).to_string();
    t.usage_in = 100;
    t.usage_out = 20;
    t.response = Some(resp("{\"ok\":true}"));
    s.commit(vec![Write::Turn(t.clone())])
        .await
        .expect("commit");
    assert_eq!(s.turn("t1").await.expect("turn"), Some(t));
    assert_eq!(s.turn("nope").await.expect("turn"), None);

    // An agent's counters are written with its row when it is new ...
    let mut a = agent("a1");
    a.turns = 7;
    a.tokens_in = 1_000;
    s.commit(vec![Write::Agent(a.clone())])
        .await
        .expect("commit");
    assert_eq!(s.agent("a1").await.expect("agent"), Some(a.clone()));
    // ... and afterwards a whole record changes its control state, never
    // its counters (those change only through counts).
    let mut b = a.clone();
    b.consecutive_failures = 2;
    b.turns = 70;
    b.failed_turns = 2;
    b.tokens_in = 1;
    b.tokens_out = 50;
    b.cost_usd = 0.125;
    b.paused = true;
    b.last_failure_ms = Some(99);
    b.last_seen_ms = Some(100);
    b.state = json!({"health": "degraded", "task": "t"});
    s.commit(vec![Write::Agent(b.clone()), Write::Agent(agent("b2"))])
        .await
        .expect("commit");
    a.paused = true;
    a.last_failure_ms = Some(99);
    a.last_seen_ms = Some(100);
    a.state = b.state.clone();
    assert_eq!(s.agent("a1").await.expect("agent"), Some(a.clone()));
    // An older whole record does not move the times back.
    let mut older = b.clone();
    older.last_seen_ms = Some(50);
    older.last_failure_ms = None;
    s.commit(vec![Write::Agent(older)]).await.expect("commit");
    let now = s.agent("a1").await.expect("agent").expect("a1");
    assert_eq!(
        (now.last_seen_ms, now.last_failure_ms),
        (Some(100), Some(99))
    );
    let all = s.agents_page(None, None, 1000).await.expect("agents");
    assert_eq!(
        all.iter().map(|a| a.id.as_str()).collect::<Vec<_>>(),
        ["a1", "b2"]
    );
}

pub async fn idempotency_keeps_first_response(s: &Store) {
    assert_eq!(s.idempotent("k1").await.expect("read"), None);
    s.commit(vec![Write::Idempotency {
        key: "k1".into(),
        request_hash: "h1".into(),
        response: resp("first"),
    }])
    .await
    .expect("commit");
    s.commit(vec![Write::Idempotency {
        key: "k1".into(),
        request_hash: "h2".into(),
        response: resp("second"),
    }])
    .await
    .expect("commit");
    assert_eq!(
        s.idempotent("k1").await.expect("read"),
        Some(IdempotentResponse {
            request_hash: Some("h1".into()),
            response: resp("first"),
        }),
        "the first response and its request's hash are kept"
    );
    assert_eq!(s.prune_idempotency(0).await.expect("prune"), 0);
    assert_eq!(s.prune_idempotency(u64::MAX).await.expect("prune"), 1);
    assert_eq!(s.idempotent("k1").await.expect("read"), None);
}

/// The idempotency table as the first release created it (no request hash).
pub const IDEMPOTENCY_V1: &str = "CREATE TABLE idempotency (
    key TEXT PRIMARY KEY,
    status BIGINT NOT NULL,
    headers TEXT NOT NULL,
    body BYTEA NOT NULL,
    content_type TEXT NOT NULL,
    created_ms BIGINT NOT NULL)";

/// A row written by the first release, before the request hash was kept.
pub const IDEMPOTENCY_V1_ROW: &str = "INSERT INTO idempotency (key, status, headers, body, \
    content_type, created_ms) VALUES ('old', 200, '[]', 'b', 'application/json', 1)";

/// After opening a store whose idempotency table predates the hash column:
/// the old row reads back without a hash, and new rows keep theirs.
pub async fn old_idempotency_rows_read_without_a_hash(s: &Store) {
    let old = s.idempotent("old").await.expect("read").expect("old row");
    assert_eq!(old.request_hash, None);
    assert_eq!(old.response.body, b"b");
    s.commit(vec![Write::Idempotency {
        key: "new".into(),
        request_hash: "h".into(),
        response: resp("new"),
    }])
    .await
    .expect("commit");
    let new = s.idempotent("new").await.expect("read").expect("new row");
    assert_eq!(new.request_hash.as_deref(), Some("h"));
}

pub async fn completed_turn_finds_latest_success(s: &Store) {
    let mut old = turn("t1", "task", "h", TurnStatus::Succeeded, 100);
    old.response = Some(resp("old"));
    let mut new = turn("t2", "task", "h", TurnStatus::Succeeded, 200);
    new.response = Some(resp("new"));
    let failed = turn("t3", "task", "h", TurnStatus::Failed, 300);
    let running = turn("t4", "task", "h", TurnStatus::Running, 400);
    let other_task = turn("t5", "other", "h", TurnStatus::Succeeded, 500);
    let other_hash = turn("t6", "task", "h2", TurnStatus::Succeeded, 600);
    s.commit(
        [old, new.clone(), failed, running, other_task, other_hash]
            .into_iter()
            .map(Write::Turn)
            .collect(),
    )
    .await
    .expect("commit");
    let found = s.completed_turn("a1", "task", "h").await.expect("lookup");
    assert_eq!(found, Some(new));
    assert_eq!(
        found.and_then(|t| t.response).map(|r| r.body),
        Some(b"new".to_vec())
    );
    assert_eq!(
        s.completed_turn("a1", "task", "zz").await.expect("lookup"),
        None
    );
    assert_eq!(
        s.completed_turn("a2", "task", "h").await.expect("lookup"),
        None
    );
}

pub async fn checkpoints_newest_first(s: &Store) {
    s.commit(vec![
        Write::Checkpoint(checkpoint("c1", "t", None, 100)),
        Write::Checkpoint(checkpoint("c3", "t", Some("c2"), 300)),
        Write::Checkpoint(checkpoint("c2", "t", Some("c1"), 200)),
        Write::Checkpoint(checkpoint("x1", "other", None, 250)),
    ])
    .await
    .expect("commit");
    let ids = |v: Vec<CheckpointRecord>| v.into_iter().map(|c| c.id).collect::<Vec<_>>();
    assert_eq!(
        ids(s.checkpoints("a1", Some("t")).await.expect("list")),
        ["c3", "c2", "c1"]
    );
    assert_eq!(
        ids(s.checkpoints("a1", None).await.expect("list")),
        ["c3", "x1", "c2", "c1"]
    );
    assert!(s.checkpoints("a2", None).await.expect("list").is_empty());
    assert_eq!(
        s.checkpoint("a1", "c2").await.expect("get"),
        Some(checkpoint("c2", "t", Some("c1"), 200))
    );
    // Immutable: a second write of the same id keeps the first.
    let mut changed = checkpoint("c2", "t", None, 999);
    changed.body = b"other".to_vec();
    s.commit(vec![Write::Checkpoint(changed)])
        .await
        .expect("commit");
    assert_eq!(
        s.checkpoint("a1", "c2").await.expect("get"),
        Some(checkpoint("c2", "t", Some("c1"), 200))
    );
    assert_eq!(s.checkpoint("a2", "c2").await.expect("get"), None);
}

pub async fn outbox_orders_and_filters(s: &Store) {
    assert_eq!(s.last_seq().await.expect("last"), 0);
    let kinds = [
        EventKind::AgentPaused,
        EventKind::TurnCompleted,
        EventKind::AgentCircuitOpen,
        EventKind::TurnCompleted,
        EventKind::AgentPaused,
    ];
    for (i, k) in kinds.iter().enumerate() {
        s.commit(vec![Write::Event(ev(i as u64, *k))])
            .await
            .expect("commit");
    }
    // The same event id again is not a second event.
    s.commit(vec![Write::Event(ev(0, EventKind::AgentPaused))])
        .await
        .expect("commit");
    let all = all_events(s).await;
    assert_eq!(all.len(), 5);
    assert!(all.windows(2).all(|w| w[0].seq < w[1].seq), "seq grows");
    assert_eq!(all.iter().map(|e| e.event.kind).collect::<Vec<_>>(), kinds);
    assert_eq!(
        all[2].event,
        ev(2, EventKind::AgentCircuitOpen),
        "event round-trips"
    );
    let last = s.last_seq().await.expect("last");
    assert_eq!(last, all[4].seq);

    let paused = s
        .events_after(
            0,
            100,
            Some(&[EventKind::AgentPaused, EventKind::AgentCircuitOpen]),
        )
        .await
        .expect("filtered");
    assert_eq!(
        paused
            .iter()
            .map(|e| e.event.id.clone())
            .collect::<Vec<_>>(),
        [ev(0, kinds[0]).id, ev(2, kinds[2]).id, ev(4, kinds[4]).id]
    );
    let after = s.events_after(all[1].seq, 2, None).await.expect("after");
    assert_eq!(
        after.iter().map(|e| e.seq).collect::<Vec<_>>(),
        [all[2].seq, all[3].seq]
    );
    assert!(
        s.events_after(0, 10, Some(&[]))
            .await
            .expect("empty filter")
            .is_empty()
    );
    assert_eq!(
        s.seq_of(&ev(3, kinds[3]).id).await.expect("seq_of"),
        Some(all[3].seq)
    );
    assert_eq!(s.seq_of("missing").await.expect("seq_of"), None);
}

pub async fn sink_cursors_move_forward(s: &Store) {
    assert_eq!(s.sink_cursor("webhook:https://x").await.expect("cursor"), 0);
    s.register_sink("webhook:https://x")
        .await
        .expect("register");
    s.register_sink("nats").await.expect("register");
    s.ack_sink("nats", 5).await.expect("ack");
    s.register_sink("nats")
        .await
        .expect("register again keeps the cursor");
    assert_eq!(s.sink_cursor("nats").await.expect("cursor"), 5);
    s.ack_sink("nats", 3).await.expect("ack");
    assert_eq!(
        s.sink_cursor("nats").await.expect("cursor"),
        5,
        "cursors never go back"
    );
    s.ack_sink("nats", 9).await.expect("ack");
    assert_eq!(s.sink_cursor("nats").await.expect("cursor"), 9);
    let sinks = s.sinks().await.expect("sinks");
    assert_eq!(
        sinks
            .iter()
            .map(|c| (c.sink.as_str(), c.acked_seq))
            .collect::<Vec<_>>(),
        [("nats", 9), ("webhook:https://x", 0)]
    );
    s.remove_sink("nats").await.expect("remove");
    assert_eq!(s.sink_cursor("nats").await.expect("cursor"), 0);
}

pub async fn dlq_take_in_seq_order(s: &Store) {
    let writes = (1..=5)
        .map(|i| Write::Event(ev(i, EventKind::AgentFailed)))
        .collect();
    s.commit(writes).await.expect("commit");
    let seq = |i: u64| {
        let id = ev(i, EventKind::AgentFailed).id;
        async move { s.seq_of(&id).await.expect("seq_of").expect("stored") }
    };
    let (s1, s2, s4, s5) = (seq(1).await, seq(2).await, seq(4).await, seq(5).await);
    s.dead_letter("hook", s4, 3, "503 from hook")
        .await
        .expect("dlq");
    s.dead_letter("hook", s1, 3, "timeout").await.expect("dlq");
    s.dead_letter("hook", s5, 3, "refused").await.expect("dlq");
    s.dead_letter("nats", s2, 3, "no ack").await.expect("dlq");
    s.dead_letter("hook", s1, 4, "timeout again")
        .await
        .expect("dlq again updates");
    match s.dead_letter("hook", 999_999, 3, "x").await {
        Err(StoreError::NoSuchEvent(999_999)) => {}
        other => panic!("expected NoSuchEvent, got {other:?}"),
    }
    assert_eq!(
        s.sink_cursor("hook").await.expect("cursor"),
        0,
        "dead-lettering advances nothing"
    );

    let listed = s.dlq_list(Some("hook")).await.expect("list");
    assert_eq!(
        listed.iter().map(|d| d.seq).collect::<Vec<_>>(),
        [s1, s4, s5]
    );
    assert_eq!(listed[0].attempts, 4);
    assert_eq!(listed[0].error, "timeout again");
    assert_eq!(listed[0].event, ev(1, EventKind::AgentFailed));
    assert_eq!(listed[0].id, ev(1, EventKind::AgentFailed).id);
    assert_eq!(s.dlq_list(None).await.expect("list").len(), 4);

    let some = s
        .dlq_take(
            "hook",
            Some(&[
                ev(5, EventKind::AgentFailed).id,
                ev(1, EventKind::AgentFailed).id,
            ]),
        )
        .await
        .expect("take");
    assert_eq!(some.iter().map(|d| d.seq).collect::<Vec<_>>(), [s1, s5]);
    let rest = s.dlq_take("hook", None).await.expect("take");
    assert_eq!(rest.iter().map(|d| d.seq).collect::<Vec<_>>(), [s4]);
    assert!(s.dlq_list(Some("hook")).await.expect("list").is_empty());
    assert_eq!(
        s.dlq_list(None).await.expect("list").len(),
        1,
        "other sinks untouched"
    );
}

pub async fn shed_over_cap_drops_oldest(s: &Store) {
    let writes = (1..=10)
        .map(|i| Write::Event(ev(i, EventKind::TurnCompleted)))
        .collect();
    s.commit(writes).await.expect("commit");
    let all = all_events(s).await;
    s.register_sink("hook").await.expect("register");
    s.register_sink("nats").await.expect("register");
    s.ack_sink("hook", all[2].seq).await.expect("ack");
    s.ack_sink("nats", all[6].seq).await.expect("ack");
    assert_eq!(
        s.outbox_depth().await.expect("depth"),
        7,
        "slowest sink is 7 behind"
    );
    assert_eq!(
        s.shed_over_cap(20).await.expect("shed"),
        0,
        "under the cap nothing goes"
    );
    assert_eq!(all_events(s).await.len(), 10);
    // Over cap 5: the 3 acked by both are pruned (not counted), 2 more shed.
    assert_eq!(s.shed_over_cap(5).await.expect("shed"), 2);
    let left = all_events(s).await;
    assert_eq!(
        left.iter().map(|e| e.seq).collect::<Vec<_>>(),
        all[5..].iter().map(|e| e.seq).collect::<Vec<_>>()
    );
    assert_eq!(s.outbox_depth().await.expect("depth"), 5);
    s.ack_sink("hook", all[9].seq).await.expect("ack");
    assert_eq!(
        s.prune_delivered().await.expect("prune"),
        2,
        "acked by both: seqs 6 and 7"
    );
    assert_eq!(s.outbox_depth().await.expect("depth"), 3);
    // Seqs are never reused after pruning.
    s.ack_sink("nats", all[9].seq).await.expect("ack");
    s.prune_delivered().await.expect("prune");
    s.commit(vec![Write::Event(ev(11, EventKind::TurnCompleted))])
        .await
        .expect("commit");
    assert!(s.last_seq().await.expect("last") > all[9].seq);
}

pub async fn watch_seq_wakes(s: &Store) {
    let mut rx = s.watch_seq();
    let start = *rx.borrow_and_update();
    let writer = s.clone();
    tokio::spawn(async move {
        writer.submit(vec![Write::Event(ev(1, EventKind::AgentPaused))]);
    });
    tokio::time::timeout(Duration::from_secs(10), rx.changed())
        .await
        .expect("woken within 10 s")
        .expect("watch open");
    let now = *rx.borrow();
    assert!(now > start);
    assert_eq!(
        Some(now),
        s.seq_of(&ev(1, EventKind::AgentPaused).id)
            .await
            .expect("seq_of")
    );
}

pub async fn bad_writes_fail_alone(s: &Store) {
    let mut bad = agent("bad");
    bad.turns = u64::MAX;
    match s
        .commit(vec![
            Write::Agent(bad.clone()),
            Write::Event(ev(1, EventKind::AgentPaused)),
        ])
        .await
    {
        Err(StoreError::Invalid { what, detail }) => {
            assert_eq!(what, "agent bad");
            assert!(detail.contains("turns"), "{detail}");
        }
        other => panic!("expected Invalid, got {other:?}"),
    }
    assert_eq!(
        s.seq_of(&ev(1, EventKind::AgentPaused).id)
            .await
            .expect("seq_of"),
        None,
        "nothing of a refused commit lands"
    );
    s.submit(vec![Write::Agent(bad)]);
    s.submit(vec![Write::Agent(agent("good"))]);
    match s.flush().await {
        Err(StoreError::SubmitFailed { count: 1, .. }) => {}
        other => panic!("expected SubmitFailed, got {other:?}"),
    }
    s.flush().await.expect("failures are reported once");
    assert!(s.agent("good").await.expect("agent").is_some());
}

pub async fn closed_store_refuses_writes(s: &Store) {
    s.submit(vec![Write::Event(ev(1, EventKind::AgentPaused))]);
    s.close().await;
    assert!(matches!(
        s.commit(vec![Write::Agent(agent("x"))]).await,
        Err(StoreError::Closed)
    ));
    assert!(matches!(s.flush().await, Err(StoreError::Closed)));
}

fn response_rec(id: &str, previous: Option<&str>, created_ms: u64) -> hale_store::ResponseRecord {
    hale_store::ResponseRecord {
        id: id.into(),
        agent: "a1".into(),
        turn_id: format!("turn-{id}"),
        created_ms,
        previous_id: previous.map(str::to_owned),
        provider: "resp".into(),
        model: "gpt-5".into(),
        provider_id: Some(format!("up-{id}")),
        input: serde_json::json!([{"type": "message", "role": "user", "content": format!("q {id}")}]),
        response: serde_json::json!({"id": id, "object": "response", "output": [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": format!("a {id}")}]}]}),
    }
}

/// Kept Responses answers (issue 27): written with a turn in one commit,
/// read back as written, a `previous_response_id` chain walked root first
/// and bounded, a broken link shows as a chain whose root still names its
/// previous one, delete and retention.
pub async fn responses_are_kept_chained_deleted_and_pruned(s: &Store) {
    let r1 = response_rec("resp_1", None, 10);
    let r2 = response_rec("resp_2", Some("resp_1"), 20);
    let mut r3 = response_rec("resp_3", Some("resp_2"), 1_000);
    r3.provider_id = None;
    s.commit(vec![
        Write::Turn(turn("turn-resp_1", "task", "h1", TurnStatus::Succeeded, 10)),
        Write::Response(r1.clone()),
    ])
    .await
    .expect("commit");
    s.commit(vec![
        Write::Response(r2.clone()),
        Write::Response(r3.clone()),
    ])
    .await
    .expect("commit");
    assert_eq!(s.response("resp_1").await.expect("read"), Some(r1.clone()));
    assert_eq!(s.response("resp_3").await.expect("read"), Some(r3.clone()));
    assert_eq!(s.response("nope").await.expect("read"), None);
    let chain = s.response_chain("resp_3", 1000).await.expect("chain");
    assert_eq!(chain, vec![r1.clone(), r2.clone(), r3.clone()]);
    // Bounded: the two newest, whose root still names its previous one.
    let short = s.response_chain("resp_3", 2).await.expect("chain");
    assert_eq!(short, vec![r2.clone(), r3.clone()]);
    assert!(
        s.response_chain("nope", 10)
            .await
            .expect("chain")
            .is_empty()
    );
    // Upserted by id.
    let mut again = r1.clone();
    again.model = "gpt-5-mini".into();
    s.commit(vec![Write::Response(again.clone())])
        .await
        .expect("commit");
    assert_eq!(s.response("resp_1").await.expect("read"), Some(again));
    // Retention: created before the cut.
    assert_eq!(s.prune_responses(15).await.expect("prune"), 1);
    assert_eq!(s.response("resp_1").await.expect("read"), None);
    let broken = s.response_chain("resp_3", 1000).await.expect("chain");
    assert_eq!(broken, vec![r2.clone(), r3.clone()]);
    assert_eq!(broken[0].previous_id.as_deref(), Some("resp_1"));
    assert!(s.delete_response("resp_3").await.expect("delete"));
    assert!(!s.delete_response("resp_3").await.expect("delete"));
    assert_eq!(s.response("resp_3").await.expect("read"), None);
}

/// Retention: turns that started before the cut are deleted, later ones kept.
pub async fn prune_turns_drops_only_old_turns(s: &Store) {
    s.commit(vec![
        Write::Turn(turn("old", "task", "h1", TurnStatus::Succeeded, 10)),
        Write::Turn(turn("new", "task", "h2", TurnStatus::Succeeded, 1_000)),
    ])
    .await
    .expect("commit");
    assert_eq!(s.prune_turns(500).await.expect("prune"), 1);
    assert_eq!(s.turn("old").await.expect("turn"), None);
    assert!(s.turn("new").await.expect("turn").is_some());
}

/// Several whole-record upserts of one agent in one group commit: the last wins.
/// Every turn row of a large commit lands, and a turn written more than
/// once in one commit (or already stored) ends as its last write — the
/// contract any batching of turn rows in the writer must keep.
pub async fn turn_rows_of_one_batch_are_all_written_and_the_last_wins(s: &Store) {
    let stored = turn("b-0", "task", "h", TurnStatus::Running, 1);
    s.commit(vec![Write::Turn(stored)]).await.expect("commit");
    let mut expected: Vec<TurnRecord> = (0..150u64)
        .map(|i| {
            let mut t = turn(
                &format!("b-{i}"),
                "task",
                &format!("h{i}"),
                TurnStatus::Succeeded,
                10 + i,
            );
            t.agent = format!("agent-{}", i % 7);
            if i % 3 == 0 {
                t.task = None;
            }
            if i % 5 == 0 {
                t.response = Some(resp(&format!("{{\"n\":{i}}}")));
                t.usage_in = i;
            }
            t
        })
        .collect();
    let mut writes: Vec<Write> = expected.iter().cloned().map(Write::Turn).collect();
    // b-7 three times in the batch: running, failed, then succeeded with its answer.
    let mut again = expected[7].clone();
    again.status = TurnStatus::Running;
    writes.insert(3, Write::Turn(again.clone()));
    again.status = TurnStatus::Failed;
    again.error_class = Some("server_error".into());
    writes.push(Write::Turn(again));
    let mut last = expected[7].clone();
    last.duration_ms = Some(42);
    last.response = Some(resp("{\"last\":true}"));
    writes.push(Write::Turn(last.clone()));
    expected[7] = last;
    s.commit(writes).await.expect("commit");
    for t in &expected {
        assert_eq!(
            s.turn(&t.id).await.expect("turn").as_ref(),
            Some(t),
            "{}",
            t.id
        );
    }
}

pub async fn agent_rows_in_one_batch_keep_the_last(s: &Store) {
    let mut a = agent("coalesced");
    let mut writes = Vec::new();
    for n in 1..=5 {
        a.state = json!({ "n": n });
        writes.push(Write::Agent(a.clone()));
        writes.push(Write::Agent(agent("other")));
    }
    s.commit(writes).await.expect("commit");
    assert_eq!(
        s.agent("coalesced").await.expect("agent").map(|a| a.state),
        Some(json!({ "n": 5 }))
    );
    assert!(s.agent("other").await.expect("agent").is_some());
}

// ---- scale-out: instances and leases ----------------------------------------

const T0: u64 = 1_700_000_000_000;

/// The store's conditional UPSERT grants a lease exactly when
/// `hale_core::lease::claim` says it may be taken or renewed.
pub async fn lease_claims_follow_the_core_rule(s: &Store) {
    use hale_core::lease::{LeaseRow, claim, expiry};
    /// (holder before with its expiry, claimant, now)
    type Case<'a> = (Option<(&'a str, u64)>, &'a str, u64);
    let cases: &[Case] = &[
        (None, "a", T0),
        (Some(("a", T0 + 5_000)), "a", T0),
        (Some(("a", T0 - 1)), "a", T0),
        (Some(("b", T0 + 1)), "a", T0),
        (Some(("b", T0)), "a", T0),
        (Some(("b", T0 - 1)), "a", T0),
    ];
    for (i, (before, me, now)) in cases.iter().enumerate() {
        let name = format!("case-{i}");
        if let Some((holder, expires)) = before {
            let set = s
                .claim_lease(&name, holder, expires - 10_000, *expires)
                .await
                .expect("set up");
            assert_eq!(&set.holder, holder);
        }
        let want = claim(
            before.map(|(holder, expires_ms)| LeaseRow { holder, expires_ms }),
            me,
            *now,
        );
        let got = s
            .claim_lease(&name, me, *now, expiry(*now))
            .await
            .expect("claim");
        assert_eq!(
            got.holder == *me,
            want.granted(),
            "case {i}: {before:?} claimed by {me}: core says {want:?}, store gave {got:?}"
        );
        let expect_expiry = if want.granted() {
            expiry(*now)
        } else {
            before.map(|(_, e)| e).unwrap_or(0)
        };
        assert_eq!(got.expires_ms, expect_expiry, "case {i}");
    }
}

pub async fn leases_are_released_only_by_their_holder(s: &Store) {
    s.claim_lease("monitor", "a", T0, T0 + 10_000)
        .await
        .expect("claim");
    assert!(!s.release_lease("monitor", "b").await.expect("release"));
    assert_eq!(s.leases().await.expect("leases").len(), 1);
    assert!(s.release_lease("monitor", "a").await.expect("release"));
    s.claim_lease("other", "a", T0, T0 + 10_000)
        .await
        .expect("claim");
    assert_eq!(s.clear_leases().await.expect("clear"), 1);
    assert!(s.leases().await.expect("leases").is_empty());
    let taken = s
        .claim_lease("monitor", "b", T0 + 1, T0 + 10_001)
        .await
        .expect("claim");
    assert_eq!(taken.holder, "b", "a released lease is free at once");
}

pub async fn concurrent_claims_have_one_winner(s: &Store) {
    let claims = (0..8).map(|i| {
        let s = s.clone();
        async move {
            s.claim_lease("relay:nats", &format!("i{i}"), T0, T0 + 10_000)
                .await
                .expect("claim")
        }
    });
    let results = futures_join_all(claims).await;
    let winner = &s.leases().await.expect("leases")[0].holder;
    let winners = results.iter().filter(|r| &r.holder == winner).count();
    assert_eq!(
        winners, 8,
        "every claimant sees the one holder: {results:?}"
    );
}

async fn futures_join_all<F: std::future::Future + Send + 'static>(
    futs: impl Iterator<Item = F>,
) -> Vec<F::Output>
where
    F::Output: Send + 'static,
{
    let handles: Vec<_> = futs.map(tokio::spawn).collect();
    let mut out = Vec::new();
    for h in handles {
        out.push(h.await.expect("claim task"));
    }
    out
}

pub async fn instance_heartbeats_are_listed_and_removed(s: &Store) {
    let mut a = hale_store::InstanceRecord {
        id: "01A".into(),
        addr: "127.0.0.1:3000".into(),
        pid: 42,
        version: "0.1.0".into(),
        started_ms: T0,
        heartbeat_ms: T0,
    };
    s.heartbeat(&a).await.expect("heartbeat");
    a.heartbeat_ms = T0 + 3_000;
    s.heartbeat(&a).await.expect("heartbeat again");
    let b = hale_store::InstanceRecord {
        id: "01B".into(),
        heartbeat_ms: T0 - 100_000,
        ..a.clone()
    };
    s.heartbeat(&b).await.expect("heartbeat");
    assert_eq!(s.instances().await.expect("list"), [a.clone(), b.clone()]);
    assert_eq!(
        s.remove_instances(None, T0 - 50_000).await.expect("prune"),
        1,
        "only the stale row goes"
    );
    assert_eq!(s.instances().await.expect("list"), [a.clone()]);
    assert_eq!(s.remove_instances(Some("01A"), 0).await.expect("remove"), 1);
    assert!(s.instances().await.expect("list").is_empty());
}

// ---- counted once (hale_core::counts) ---------------------------------------

/// Counts from two writers (two instances' tallies) add up in the row as
/// `hale_core::counts::Counters::apply` says, the totals after each count
/// come back in commit order, and a task's spend adds up the same way until
/// the task is forgotten.
/// A task's spend age moves only a step after itself
/// (`hale_core::counts::spend_age`), and the history prune drops a spend
/// only once its last count is older than the cutoff.
pub async fn task_spend_age_moves_by_steps_and_the_prune_follows_the_last_count(s: &Store) {
    use hale_core::counts::{Count, SPEND_AGE_STEP_MS, Streak};
    use hale_store::{CountWrite, TaskCount};
    let step = SPEND_AGE_STEP_MS as u64;
    let t0 = 10 * step;
    let count = |task: &str, n: u64, now_ms: u64| {
        Write::Count(CountWrite {
            agent: "aged".into(),
            n,
            count: Count::turn(Streak::Clear, 1, 1, 0.0),
            task: Some(TaskCount {
                task: task.into(),
                n,
                events: 0,
                tool_calls: 0,
            }),
            now_ms,
        })
    };
    let kept = |task: &'static str| async move {
        s.task_spend("aged", task).await.expect("read").is_some()
    };
    // "within": counted at t0 and a step less one later (its age stays t0);
    // "moved": counted at t0 and a whole step later (its age moves).
    s.commit(vec![count("within", 1, t0), count("moved", 2, t0)])
        .await
        .expect("commit");
    s.commit(vec![count("within", 3, t0 + step - 1)])
        .await
        .expect("commit");
    s.commit(vec![count("moved", 4, t0 + step)])
        .await
        .expect("commit");
    // Never pruned while its last count is at or after the cutoff.
    s.prune_history(t0 + step - 1).await.expect("prune");
    assert!(kept("within").await && kept("moved").await);
    // "within"'s age is t0: gone once the cutoff passes t0 + step, which
    // its last count (t0 + step - 1) is before.
    s.prune_history(t0 + 2 * step - 1).await.expect("prune");
    assert!(!kept("within").await, "an age that stayed at t0");
    // "moved"'s age is t0 + step: kept up to a cutoff of t0 + 2 steps.
    assert!(kept("moved").await, "an age that moved to t0 + step");
    s.prune_history(t0 + 2 * step).await.expect("prune");
    assert!(kept("moved").await);
    s.prune_history(t0 + 2 * step + 1).await.expect("prune");
    assert!(!kept("moved").await);
}

pub async fn counts_add_up_as_the_core_rule_says(s: &Store) {
    use hale_core::budget::Spend;
    use hale_core::counts::{Count, Counters, Streak};
    use hale_store::{CountWrite, Counted, TaskCount};
    let mut followed = s.counted();
    let fail = Count::turn(Streak::Extend, 100, 10, 0.5);
    let ok = Count::turn(Streak::Clear, 7, 3, 0.25);
    let keep = Count::turn(Streak::Keep, 1, 0, 0.0);
    let seq = [fail, fail, keep, fail, ok, fail, Count::clear(), fail, fail];
    let mut expected = Counters::default();
    let mut spend = Spend::default();
    for (i, c) in seq.iter().enumerate() {
        expected.apply(c);
        spend.add(c.tokens_in + c.tokens_out, c.cost_usd);
        let n = i as u64 + 1;
        let w = Write::Count(CountWrite {
            agent: "counted".into(),
            n,
            count: *c,
            task: Some(TaskCount {
                task: "t1".into(),
                n,
                events: 2,
                tool_calls: 1,
            }),
            now_ms: 1_000 + n,
        });
        // Alternate commit and submit, as two paths of the gateway do.
        if i % 2 == 0 {
            s.commit(vec![w]).await.expect("commit");
        } else {
            s.submit(vec![w]);
        }
    }
    s.flush().await.expect("flush");
    // Totals come in commit order; counts that shared a group commit come
    // back once, with the last number of their run.
    let mut last: Option<Counted> = None;
    while last.as_ref().is_none_or(|c| c.n < seq.len() as u64) {
        let got = followed.recv().await.expect("totals up to the last count");
        assert!(
            last.as_ref().is_none_or(|c| got.n > c.n),
            "in commit order: {} after {:?}",
            got.n,
            last.as_ref().map(|c| c.n)
        );
        last = Some(got);
    }
    let last = last.expect("totals");
    assert_eq!(last.totals, expected);
    let t = last.task.expect("the task's totals");
    assert_eq!((t.task.as_str(), t.n), ("t1", seq.len() as u64));
    let got_spend = t.spend;
    assert_eq!(
        (t.events, t.tool_calls),
        (2 * seq.len() as u64, seq.len() as u64)
    );
    assert_eq!(got_spend.tokens, spend.tokens);
    assert!((got_spend.cost_usd - spend.cost_usd).abs() < 1e-9);
    let row = s.agent("counted").await.expect("agent").expect("row");
    assert_eq!(
        (row.consecutive_failures, row.turns, row.failed_turns),
        (
            expected.consecutive_failures,
            expected.turns,
            expected.failed_turns
        )
    );
    assert_eq!(
        (row.tokens_in, row.tokens_out),
        (expected.tokens_in, expected.tokens_out)
    );
    assert_eq!(row.last_seen_ms, Some(1_000 + seq.len() as u64));
    assert!(row.last_failure_ms.is_some());
    assert!(!row.paused);
    // A whole record written now keeps the counted totals.
    let mut whole = row.clone();
    whole.turns = 0;
    whole.paused = true;
    s.commit(vec![Write::Agent(whole)]).await.expect("commit");
    let row2 = s.agent("counted").await.expect("agent").expect("row");
    assert_eq!((row2.turns, row2.paused), (expected.turns, true));
    // A task reset forgets its spend.
    assert!(s.task_spend("counted", "t1").await.expect("read").is_some());
    s.commit(vec![Write::ForgetTask {
        agent: "counted".into(),
        task: "t1".into(),
    }])
    .await
    .expect("commit");
    assert_eq!(s.task_spend("counted", "t1").await.expect("read"), None);
}

/// One group commit with several counts of one agent writes each run of
/// them (one task, nothing else of the agent between) as one count: the
/// row and the task spends end where the counts one by one would leave
/// them, and the totals come back once per run, after its last count.
pub async fn counts_of_one_commit_merge_per_run(s: &Store) {
    use hale_core::counts::{Count, Counters, Streak};
    use hale_store::{CountWrite, TaskCount};
    let mut followed = s.counted();
    let fail = Count::turn(Streak::Extend, 100, 10, 0.5);
    let ok = Count::turn(Streak::Clear, 7, 3, 0.25);
    let keep = Count::turn(Streak::Keep, 1, 0, 0.0);
    let count = |agent: &str, n: u64, c: Count, task: &str| {
        Write::Count(CountWrite {
            agent: agent.into(),
            n,
            count: c,
            task: Some(TaskCount {
                task: task.into(),
                n,
                events: 2,
                tool_calls: 1,
            }),
            now_ms: 5_000 + n,
        })
    };
    // Agent m: run [1,2,3] on t1 (add 2), run [4,5] on t2 (set 1), then
    // t1 forgotten, then [6] on t1. Agent o's count sits inside m's first run.
    let m = [
        (fail, "t1"),
        (fail, "t1"),
        (keep, "t1"),
        (ok, "t2"),
        (fail, "t2"),
        (fail, "t1"),
    ];
    let mut writes = vec![
        count("m", 1, m[0].0, m[0].1),
        count("o", 1, ok, "t1"),
        count("m", 2, m[1].0, m[1].1),
        count("m", 3, m[2].0, m[2].1),
        count("m", 4, m[3].0, m[3].1),
        count("m", 5, m[4].0, m[4].1),
        Write::ForgetTask {
            agent: "m".into(),
            task: "t1".into(),
        },
    ];
    writes.push(count("m", 6, m[5].0, m[5].1));
    s.commit(writes).await.expect("one commit");
    let mut after = Vec::new();
    let mut expected = Counters::default();
    for (c, _) in &m {
        expected.apply(c);
        after.push(expected);
    }
    let mut heard = Vec::new();
    while heard.len() < 4 {
        heard.push(followed.recv().await.expect("totals per run"));
    }
    let of_m: Vec<_> = heard.iter().filter(|c| c.agent == "m").collect();
    assert_eq!(
        of_m.iter().map(|c| c.n).collect::<Vec<_>>(),
        [3, 5, 6],
        "one total per run, numbered by its last count"
    );
    for c in &of_m {
        assert_eq!(
            c.totals,
            after[c.n as usize - 1],
            "totals after count {}",
            c.n
        );
    }
    let spends: Vec<_> = of_m
        .iter()
        .map(|c| {
            let t = c.task.as_ref().expect("task totals");
            (t.task.as_str(), t.n, t.spend.tokens, t.events, t.tool_calls)
        })
        .collect();
    assert_eq!(
        spends,
        [
            ("t1", 3, 110 + 110 + 1, 6, 3),
            ("t2", 5, 10 + 110, 4, 2),
            ("t1", 6, 110, 2, 1),
        ],
        "task spends per run; t1 starts over after it was forgotten"
    );
    let o = heard.iter().find(|c| c.agent == "o").expect("o's totals");
    assert_eq!((o.n, o.totals.turns), (1, 1));
    let row = s.agent("m").await.expect("agent").expect("row");
    let last = after[5];
    assert_eq!(
        (
            row.consecutive_failures,
            row.turns,
            row.failed_turns,
            row.tokens_in
        ),
        (
            last.consecutive_failures,
            last.turns,
            last.failed_turns,
            last.tokens_in
        )
    );
    assert_eq!(row.last_seen_ms, Some(5_006));
    assert_eq!(row.last_failure_ms, Some(5_006));
}

/// Thousands of counts submitted without waiting, as a busy gateway does:
/// batches form as the writer's pace decides, each merging what it holds.
/// Whatever the batching, every agent's row and task spend end where the
/// counts one by one leave them (`Counters::apply`), across forgotten tasks
/// and whole-record writes, and the last totals heard per agent are those.
pub async fn many_submitted_counts_add_up_whatever_the_batching(s: &Store) {
    use hale_core::counts::{Count, Counters, Streak};
    use hale_store::{CountWrite, Counted, TaskCount};
    use std::collections::HashMap;
    const AGENTS: u64 = 16;
    const PER_AGENT: u64 = 250;
    let mut followed = s.counted();
    let mut expected: HashMap<String, Counters> = HashMap::new();
    let mut spend: HashMap<(String, String), u64> = HashMap::new();
    let mut x: u64 = 0x2545_f491_4f6c_dd1d; // xorshift: a fixed, varied sequence
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for n in 1..=PER_AGENT {
        let mut writes = Vec::new();
        for a in 0..AGENTS {
            let agent = format!("many-{a}");
            let r = next();
            let streak = match r % 5 {
                0 | 1 => Streak::Extend,
                2 => Streak::Keep,
                _ => Streak::Clear,
            };
            let c = if r % 97 == 0 {
                Count::clear()
            } else {
                Count::turn(streak, r % 50, r % 7, 0.0)
            };
            let task = format!("t{}", (r >> 8) % 2);
            expected.entry(agent.clone()).or_default().apply(&c);
            *spend.entry((agent.clone(), task.clone())).or_default() += c.tokens_in + c.tokens_out;
            writes.push(Write::Count(CountWrite {
                agent: agent.clone(),
                n,
                count: c,
                task: Some(TaskCount {
                    task: task.clone(),
                    n,
                    events: 1,
                    tool_calls: 0,
                }),
                now_ms: 10_000 + n,
            }));
            if (r >> 16) % 41 == 0 {
                writes.push(Write::ForgetTask {
                    agent: agent.clone(),
                    task: task.clone(),
                });
                spend.remove(&(agent.clone(), task));
            }
            if (r >> 24) % 53 == 0 {
                // A whole record: its counters are not the row's.
                let mut whole = self::agent(&agent);
                whole.turns = 7;
                writes.push(Write::Agent(whole));
            }
        }
        s.submit(writes);
    }
    s.flush().await.expect("flush");
    let mut last: HashMap<String, Counted> = HashMap::new();
    while last.len() < AGENTS as usize || last.values().any(|c| c.n < PER_AGENT) {
        let got = followed.recv().await.expect("totals");
        if let Some(prev) = last.get(&got.agent) {
            assert!(got.n > prev.n, "{}: {} after {}", got.agent, got.n, prev.n);
        }
        last.insert(got.agent.clone(), got);
    }
    for (agent, want) in &expected {
        let row = s.agent(agent).await.expect("read").expect("row");
        assert_eq!(
            (
                row.consecutive_failures,
                row.turns,
                row.failed_turns,
                row.tokens_in,
                row.tokens_out
            ),
            (
                want.consecutive_failures,
                want.turns,
                want.failed_turns,
                want.tokens_in,
                want.tokens_out
            ),
            "{agent}"
        );
        assert_eq!(last[agent].totals, *want, "{agent}: the last totals heard");
    }
    for ((agent, task), tokens) in &spend {
        let got = s.task_spend(agent, task).await.expect("read");
        assert_eq!(got.map(|t| t.tokens), Some(*tokens), "{agent}/{task}");
    }
}

/// Random runs of counts (with a task, another task, or none; every kind
/// of streak), forgotten tasks and whole records of a few agents, written
/// in ONE commit, end where the same writes one commit each leave them:
/// every row and task spend, and every total heard from the batch equals
/// the one-by-one total after the same count (a merged run is heard once,
/// after its last count).
pub async fn counts_of_one_commit_end_as_the_same_writes_one_by_one(s: &Store) {
    use hale_core::counts::{Count, Streak};
    use hale_store::{CountWrite, Counted, TaskCount};
    use std::collections::HashMap;
    const AGENTS: u64 = 3;
    const WRITES: u64 = 40;
    let mut followed = s.counted();
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15; // xorshift: a fixed, varied sequence
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for round in 0..8u64 {
        // The same writes for agents `b{round}-K` (one commit) and
        // `o{round}-K` (a commit each).
        let mut plan = Vec::new();
        for n in 1..=WRITES {
            let r = next();
            plan.push((r % AGENTS, n, r));
        }
        let tasks = [None, Some("t0"), Some("t1")];
        let write = |side: &str, (a, n, r): (u64, u64, u64)| -> Write {
            let agent = format!("{side}{round}-{a}");
            let task = tasks[((r >> 8) % 3) as usize];
            match (r >> 16) % 12 {
                0 => Write::ForgetTask {
                    agent,
                    task: task.unwrap_or("t0").into(),
                },
                1 => {
                    // A whole record: its counters are not the row's.
                    let mut whole = self::agent(&agent);
                    whole.turns = 7;
                    whole.paused = r % 2 == 0;
                    Write::Agent(whole)
                }
                k => {
                    let count = match k {
                        2 => Count::clear(),
                        3..=5 => Count::turn(Streak::Extend, r % 50, r % 7, 0.25),
                        6 | 7 => Count::turn(Streak::Keep, r % 50, 0, 0.0),
                        _ => Count::turn(Streak::Clear, r % 50, r % 7, 0.5),
                    };
                    Write::Count(CountWrite {
                        agent,
                        n,
                        count,
                        task: task.map(|t| TaskCount {
                            task: t.into(),
                            n,
                            events: r % 3,
                            tool_calls: r % 2,
                        }),
                        now_ms: 20_000 + n,
                    })
                }
            }
        };
        // The rows exist first, so a whole record never creates one.
        let mut first = Vec::new();
        for a in 0..AGENTS {
            first.push(Write::Agent(self::agent(&format!("b{round}-{a}"))));
            first.push(Write::Agent(self::agent(&format!("o{round}-{a}"))));
        }
        s.commit(first).await.expect("rows");
        s.commit(plan.iter().map(|p| write("b", *p)).collect())
            .await
            .expect("one commit");
        let mut counts_one_by_one = 0;
        for p in &plan {
            let w = write("o", *p);
            counts_one_by_one += usize::from(matches!(w, Write::Count(_)));
            s.commit(vec![w]).await.expect("a commit");
        }
        // Heard in commit order: the batch's totals, then each count's.
        let mut batch: Vec<Counted> = Vec::new();
        let mut one: HashMap<(String, u64), Counted> = HashMap::new();
        while one.len() < counts_one_by_one {
            let got = followed.recv().await.expect("totals");
            if got.agent.starts_with('b') {
                batch.push(got);
            } else {
                one.insert((got.agent.clone(), got.n), got);
            }
        }
        assert!(!batch.is_empty(), "round {round}: the batch's totals heard");
        for b in &batch {
            let twin = format!("o{}", &b.agent[1..]);
            let o = &one[&(twin, b.n)];
            assert_eq!(
                (&b.totals, &b.task),
                (&o.totals, &o.task),
                "round {round}: {} after count {}",
                b.agent,
                b.n
            );
        }
        for a in 0..AGENTS {
            let b = s.agent(&format!("b{round}-{a}")).await.expect("read");
            let o = s.agent(&format!("o{round}-{a}")).await.expect("read");
            let (mut b, o) = (b.expect("row"), o.expect("row"));
            b.id = o.id.clone();
            assert_eq!(b, o, "round {round}: agent {a}'s row");
            for t in ["t0", "t1"] {
                let b = s
                    .task_spend(&format!("b{round}-{a}"), t)
                    .await
                    .expect("read");
                let o = s
                    .task_spend(&format!("o{round}-{a}"), t)
                    .await
                    .expect("read");
                assert_eq!(b, o, "round {round}: agent {a}'s spend on {t}");
            }
        }
    }
}

/// What a starting instance holds, and the health monitor's walk over
/// agents silent while out of memory, in (last_seen_ms, id) order.
pub async fn agents_held_and_silent_walk(s: &Store) {
    use hale_core::memory::SilenceCursor;
    let mut writes = Vec::new();
    for (id, seen, paused) in [
        ("s-a", Some(100), false),
        ("s-b", Some(100), false),
        ("s-c", Some(200), false),
        ("s-d", Some(300), false),
        ("s-paused", Some(50), true),
        ("s-never", None, false),
    ] {
        let mut a = agent(id);
        a.last_seen_ms = seen;
        a.paused = paused;
        writes.push(Write::Agent(a));
    }
    s.commit(writes).await.expect("commit");
    let mut held: Vec<String> = s
        .agents_to_hold(2)
        .await
        .expect("to hold")
        .into_iter()
        .map(|a| a.id)
        .collect();
    held.sort();
    assert_eq!(held, ["s-c", "s-d", "s-never", "s-paused"]);
    let all = s.agents_to_hold(100).await.expect("to hold");
    assert_eq!(all.len(), 6, "no row twice");

    // Walk two at a time up to 200: a, b (tie on 100, by id), then c;
    // d (300) is not silent yet; the paused one (50) is before the start.
    let mut cur = SilenceCursor::starting_at(60);
    let mut seen = Vec::new();
    loop {
        let rows = s.agents_seen_between(&cur, 200, 2).await.expect("walk");
        if rows.is_empty() {
            break;
        }
        for r in rows {
            cur.advance(r.last_seen_ms.expect("seen"), &r.id);
            seen.push(r.id);
        }
    }
    assert_eq!(seen, ["s-a", "s-b", "s-c"]);
    // An agent seen again moves past the cursor and is read once more.
    let mut b = agent("s-b");
    b.last_seen_ms = Some(250);
    s.commit(vec![Write::Agent(b)]).await.expect("commit");
    let rows = s.agents_seen_between(&cur, 300, 10).await.expect("walk");
    let ids: Vec<&str> = rows.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids, ["s-b", "s-d"]);
}

/// Pages of agents walk every id once, in byte order (which PostgreSQL's
/// default collation does not follow: "B" < "a" < "b" in bytes, not in
/// en_US), and filter by pause.
pub async fn agent_pages_walk_every_id_once_in_byte_order(s: &Store) {
    let ids = ["p-b", "p-a", "p-B", "p-ä", "p-a-1", "p-_", "p-Z", "p-a0"];
    let mut writes = Vec::new();
    for (i, id) in ids.iter().enumerate() {
        let mut a = agent(id);
        a.paused = i % 3 == 0;
        writes.push(Write::Agent(a));
    }
    s.commit(writes).await.expect("commit");
    let mut want: Vec<&str> = ids.to_vec();
    want.sort();
    for limit in [1, 3, 8, 100] {
        let mut after: Option<String> = None;
        let mut seen = Vec::new();
        loop {
            let page = s
                .agents_page(after.as_deref(), None, limit)
                .await
                .expect("page");
            assert!(page.len() <= limit, "a page holds at most its limit");
            let Some(last) = page.last() else { break };
            after = Some(last.id.clone());
            seen.extend(page.into_iter().map(|a| a.id));
        }
        assert_eq!(seen, want, "limit {limit}");
    }
    let paused: Vec<String> = s
        .agents_page(None, Some(true), 100)
        .await
        .expect("paused")
        .into_iter()
        .map(|a| a.id)
        .collect();
    let mut want_paused: Vec<&str> = ids.iter().step_by(3).copied().collect();
    want_paused.sort();
    assert_eq!(paused, want_paused);
    let active: Vec<String> = s
        .agents_page(Some("p-a"), Some(false), 100)
        .await
        .expect("active")
        .into_iter()
        .map(|a| a.id)
        .collect();
    // After "p-a" come p-a-1, p-a0, p-b (paused) and p-ä (paused).
    assert_eq!(active, ["p-a-1", "p-a0"]);
}
