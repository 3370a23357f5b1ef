//! The store API against SQLite (tempdir per test), plus what only SQLite
//! can show here: reopen after close, WAL mode, corrupt rows.

mod common;

use common::{agent, ev, sqlite_at};
use hale_core::event::EventKind;
use hale_store::{Store, StoreError, StoreOptions, Write};

suite!(common::sqlite;
    group_commit_batches_submits,
    concurrent_commits_share_transactions,
    commit_is_visible_on_return,
    upserts_replace_by_id,
    idempotency_keeps_first_response,
    completed_turn_finds_latest_success,
    checkpoints_newest_first,
    outbox_orders_and_filters,
    sink_cursors_move_forward,
    dlq_take_in_seq_order,
    shed_over_cap_drops_oldest,
    watch_seq_wakes,
    bad_writes_fail_alone,
    closed_store_refuses_writes,
    prune_turns_drops_only_old_turns,
    responses_are_kept_chained_deleted_and_pruned,
    agent_rows_in_one_batch_keep_the_last,
    turn_rows_of_one_batch_are_all_written_and_the_last_wins,
    counts_add_up_as_the_core_rule_says,
    counts_of_one_commit_merge_per_run,
    many_submitted_counts_add_up_whatever_the_batching,
    agents_held_and_silent_walk,
    agent_pages_walk_every_id_once_in_byte_order,
    lease_claims_follow_the_core_rule,
    leases_are_released_only_by_their_holder,
    concurrent_claims_have_one_winner,
    instance_heartbeats_are_listed_and_removed,
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commit_survives_close_and_reopen() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = sqlite_at(dir.path()).await;
    s.commit(vec![
        Write::Agent(agent("a1")),
        Write::Event(ev(1, EventKind::AgentPaused)),
    ])
    .await
    .expect("commit");
    s.submit(vec![Write::Event(ev(2, EventKind::AgentResumed))]);
    s.close().await;
    let s = sqlite_at(dir.path()).await;
    assert_eq!(s.agent("a1").await.expect("agent"), Some(agent("a1")));
    let events = s.events_after(0, 10, None).await.expect("events");
    assert_eq!(
        events.iter().map(|e| e.event.clone()).collect::<Vec<_>>(),
        [
            ev(1, EventKind::AgentPaused),
            ev(2, EventKind::AgentResumed)
        ],
        "close() commits what was submitted"
    );
    assert_eq!(
        *s.watch_seq().borrow(),
        events[1].seq,
        "watch starts at the stored last seq"
    );
    s.close().await;
}

#[tokio::test]
async fn opens_wal_in_data_dir() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("nested/data");
    let s = Store::open(None, &data, StoreOptions::default())
        .await
        .expect("open");
    assert_eq!(s.backend(), hale_store::Backend::Sqlite);
    assert!(data.join("hale.db").exists());
    s.commit(vec![Write::Event(ev(1, EventKind::AgentPaused))])
        .await
        .expect("commit");
    assert!(data.join("hale.db-wal").exists(), "WAL mode");
    s.close().await;
    match Store::open(Some("mysql://x"), &data, StoreOptions::default()).await {
        Err(StoreError::UnsupportedStorage(s)) => assert_eq!(s, "mysql://x"),
        other => panic!("expected UnsupportedStorage, got {other:?}"),
    }
}

#[tokio::test]
async fn options_come_from_events_config() {
    let c = hale_core::config::EventsConfig {
        fsync_always: true,
        batch_max: 7,
        ..Default::default()
    };
    let o = StoreOptions::from(&c);
    assert!(o.fsync_always);
    assert_eq!(o.batch_max, 7);
    assert_eq!(o.batch_linger, c.batch_linger);
}

#[tokio::test]
async fn corrupt_rows_are_errors_naming_table_and_id() {
    use sqlx::Connection;
    let dir = tempfile::tempdir().expect("tempdir");
    let s = sqlite_at(dir.path()).await;
    s.commit(vec![
        Write::Event(ev(1, EventKind::AgentPaused)),
        Write::Agent(agent("a1")),
    ])
    .await
    .expect("commit");
    let url = format!("sqlite://{}", dir.path().join("hale.db").display());
    let mut raw = sqlx::SqliteConnection::connect(&url)
        .await
        .expect("raw connection");
    sqlx::query("UPDATE events SET body = '{not json'")
        .execute(&mut raw)
        .await
        .expect("corrupt");
    sqlx::query("UPDATE agents SET state = 'nope'")
        .execute(&mut raw)
        .await
        .expect("corrupt");
    raw.close().await.expect("close raw");
    match s.events_after(0, 10, None).await {
        Err(
            e @ StoreError::Corrupt {
                table: "events", ..
            },
        ) => {
            let msg = e.to_string();
            assert!(msg.contains("table events (id 1)"), "{msg}");
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
    match s.agent("a1").await {
        Err(StoreError::Corrupt {
            table: "agents",
            id,
            detail,
        }) => {
            assert_eq!(id, "a1");
            assert!(detail.contains("state"), "{detail}");
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
    s.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_max_bounds_a_group_commit() {
    let dir = tempfile::tempdir().expect("tempdir");
    let opts = StoreOptions {
        batch_max: 10,
        ..StoreOptions::default()
    };
    let s = Store::open_sqlite(dir.path(), opts).await.expect("open");
    for i in 0..100 {
        s.submit(vec![Write::Event(ev(i, EventKind::TurnCompleted))]);
    }
    s.flush().await.expect("flush");
    assert!(
        s.commits() >= 10,
        "100 writes at batch_max 10 need ≥ 10 commits, got {}",
        s.commits()
    );
    assert_eq!(
        s.events_after(0, 1000, None).await.expect("events").len(),
        100
    );
    s.close().await;
}

fn lingering() -> StoreOptions {
    StoreOptions {
        batch_linger: std::time::Duration::from_secs(3600),
        ..StoreOptions::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn submits_linger_for_company_and_flush_cuts_the_linger() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = Store::open_sqlite(dir.path(), lingering())
        .await
        .expect("open");
    s.submit(vec![Write::Event(ev(1, EventKind::TurnCompleted))]);
    // Wait until the writer has taken the first write and is lingering.
    while s.queued() > 0 {
        tokio::task::yield_now().await;
    }
    s.submit(vec![Write::Event(ev(2, EventKind::TurnCompleted))]);
    tokio::time::timeout(std::time::Duration::from_secs(10), s.flush())
        .await
        .expect("flush does not wait out the linger")
        .expect("flush");
    assert_eq!(s.commits(), 1, "both submits joined the lingering batch");
    assert_eq!(s.events_after(0, 10, None).await.expect("events").len(), 2);
    s.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_commit_is_not_held_for_the_linger() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = Store::open_sqlite(dir.path(), lingering())
        .await
        .expect("open");
    s.submit(vec![Write::Event(ev(1, EventKind::TurnCompleted))]);
    tokio::time::timeout(
        std::time::Duration::from_secs(10),
        s.commit(vec![Write::Event(ev(2, EventKind::AgentPaused))]),
    )
    .await
    .expect("commit returns without waiting out a one-hour linger")
    .expect("commit");
    assert!(
        s.seq_of(&ev(2, EventKind::AgentPaused).id)
            .await
            .expect("seq_of")
            .is_some()
    );
    s.close().await;
}

/// A data directory from before the idempotency request hash: opening it adds
/// the column, the old row is still served (without a hash), reopening is a
/// no-op.
#[tokio::test]
async fn sqlite_store_from_before_the_request_hash_gains_the_column() {
    use sqlx::ConnectOptions;
    let dir = tempfile::tempdir().expect("tempdir");
    let mut conn = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(dir.path().join(hale_store::SQLITE_FILE))
        .create_if_missing(true)
        .connect()
        .await
        .expect("connect");
    for stmt in [common::IDEMPOTENCY_V1, common::IDEMPOTENCY_V1_ROW] {
        sqlx::query(stmt)
            .execute(&mut conn)
            .await
            .expect("old schema");
    }
    drop(conn);
    let s = sqlite_at(dir.path()).await;
    common::old_idempotency_rows_read_without_a_hash(&s).await;
    s.close().await;
    let s = sqlite_at(dir.path()).await;
    let new = s.idempotent("new").await.expect("read").expect("kept");
    assert_eq!(new.request_hash.as_deref(), Some("h"));
    s.close().await;
}

/// Issue 13: `room` holds a caller while the writer works through a
/// backlog over the limit, and lets it go at once when the writer is stuck
/// (fail open). The writer is held by another connection's write lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn room_waits_for_a_working_writer_and_not_for_a_stuck_one() {
    use sqlx::Connection;
    use std::time::Duration;
    let dir = tempfile::tempdir().expect("tempdir");
    let s = Store::open_sqlite(dir.path(), StoreOptions::default())
        .await
        .expect("open");
    s.commit(vec![Write::Event(ev(1, EventKind::TurnCompleted))])
        .await
        .expect("commit");
    let url = format!(
        "sqlite://{}",
        dir.path().join(hale_store::SQLITE_FILE).display()
    );
    let mut other = sqlx::SqliteConnection::connect(&url)
        .await
        .expect("connect");
    sqlx::query("BEGIN IMMEDIATE")
        .execute(&mut other)
        .await
        .expect("lock");
    // The writer takes the first write and waits for the lock; the rest queue.
    s.submit(vec![Write::Event(ev(2, EventKind::TurnCompleted))]);
    while s.queued() > 0 {
        tokio::task::yield_now().await;
    }
    // Past the writer's linger: it is in its commit, waiting for the lock.
    tokio::time::sleep(StoreOptions::default().batch_linger * 10 + Duration::from_millis(50)).await;
    for n in 3..23 {
        s.submit(vec![Write::Event(ev(n, EventKind::TurnCompleted))]);
    }
    assert_eq!(s.queued(), 20);
    assert_eq!(
        s.room(100, Duration::from_millis(50)).await,
        hale_store::Room::Free
    );
    // No batch for longer than the wait: stuck, nobody is held.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        s.room(5, Duration::from_millis(50)).await,
        hale_store::Room::Stuck
    );
    // A writer that finished a batch within the wait is worth waiting for:
    // the lock goes away and the backlog drains.
    let release = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        sqlx::query("ROLLBACK")
            .execute(&mut other)
            .await
            .expect("unlock");
        other
    });
    assert_eq!(
        s.room(5, Duration::from_secs(30)).await,
        hale_store::Room::Waited
    );
    assert!(s.queued() <= 5);
    drop(release.await.expect("release"));
    s.flush().await.expect("flush");
    assert_eq!(
        s.events_after(0, 100, None).await.expect("events").len(),
        22,
        "every write committed"
    );
    s.close().await;
}

/// The rows of `tables` in a store's SQLite file, each row as one JSON array.
async fn table_rows(dir: &std::path::Path) -> Vec<String> {
    let url = format!(
        "sqlite://{}?mode=ro",
        dir.join(hale_store::SQLITE_FILE).display()
    );
    let pool = sqlx::SqlitePool::connect(&url)
        .await
        .expect("read the file");
    let mut out = Vec::new();
    for q in [
        "SELECT json_array('turn', id, agent, task, request_hash, model_requested, status, \
         started_ms, duration_ms, provider, model, attempts, usage_in, usage_out, error_class, \
         resp_status, resp_headers, hex(resp_body), resp_content_type) FROM turns ORDER BY id",
        "SELECT json_array('agent', id, paused, consecutive_failures, turns, failed_turns, \
         tokens_in, tokens_out, cost_usd, last_failure_ms, last_seen_ms, state) FROM agents \
         ORDER BY id",
        "SELECT json_array('spend', agent, task, tokens, cost_usd, events, tool_calls, \
         updated_ms) FROM task_spend ORDER BY agent, task",
        "SELECT json_array('minute', deployment, minute_ms, calls, failures, latency_sum_ms) \
         FROM history_minutes ORDER BY deployment, minute_ms",
    ] {
        let rows: Vec<String> = sqlx::query_scalar(q).fetch_all(&pool).await.expect("dump");
        out.extend(rows);
    }
    pool.close().await;
    out
}

/// Issue 30 (stop 35): the SQLite writer puts a batch's turns, counts and
/// history minutes in multi-row statements. A batch of several turns of
/// several agents — one agent counted twice with a whole record written
/// between its counts, one agent's two counts merged, a turn and a minute
/// named twice, a count without a task — leaves the same rows and reports
/// the same totals as the same writes committed one by one; and a batch
/// holding a row the database refuses (a trigger) fails that row alone.
#[tokio::test]
async fn a_batch_writes_the_rows_and_totals_of_its_writes_one_by_one() {
    use hale_core::counts::{Count, Streak};
    use hale_core::history::MinuteRow;
    use hale_store::{CountWrite, TaskCount, TurnStatus};
    let turn_of = |agent: &str, id: &str, status: TurnStatus, usage: u64| {
        let mut t = common::turn(id, &format!("task-{agent}"), "h", status, 1_000);
        t.agent = agent.into();
        t.usage_in = usage;
        t.response = (status == TurnStatus::Succeeded).then(|| common::resp(id));
        Write::Turn(t)
    };
    let count = |agent: &str, n: u64, c: Count, task: Option<&str>| {
        Write::Count(CountWrite {
            agent: agent.into(),
            n,
            count: c,
            task: task.map(|t| TaskCount {
                task: t.into(),
                n,
                events: n,
                tool_calls: 1,
            }),
            now_ms: 5_000 + n,
        })
    };
    let fail = Count::turn(Streak::Extend, 100, 10, 0.5);
    let ok = Count::turn(Streak::Clear, 7, 3, 0.25);
    let keep = Count::turn(Streak::Keep, 1, 0, 0.0);
    let minute = |calls: u64| MinuteRow {
        deployment: "p/m".into(),
        minute_ms: 60_000,
        calls,
        failures: 1,
        latency_sum_ms: 10 * calls,
    };
    let mut paused_a = common::agent("a");
    paused_a.paused = true;
    paused_a.last_seen_ms = Some(9_000);
    let batch: Vec<Vec<Write>> = vec![
        vec![
            turn_of("a", "t-a-1", TurnStatus::Failed, 1),
            count("a", 1, fail, Some("ta")),
        ],
        vec![
            turn_of("b", "t-b-1", TurnStatus::Running, 2),
            count("b", 1, fail, Some("tb")),
        ],
        // The same turn again: in the same statement as its first write.
        vec![turn_of("b", "t-b-1", TurnStatus::Succeeded, 5)],
        vec![Write::Agent(paused_a)],
        vec![
            turn_of("a", "t-a-2", TurnStatus::Succeeded, 3),
            count("a", 2, ok, Some("ta")),
        ],
        vec![
            turn_of("c", "t-c-1", TurnStatus::Succeeded, 4),
            count("c", 1, keep, None),
        ],
        vec![Write::Minutes(vec![minute(1), minute(2)])],
        vec![count("b", 2, ok, Some("tb"))],
        vec![Write::Minutes(vec![minute(4)])],
    ];
    let failing: Vec<Vec<Write>> = vec![
        vec![
            turn_of("d", "t-d-1", TurnStatus::Succeeded, 6),
            count("d", 1, fail, Some("td")),
        ],
        vec![
            turn_of("e", "refused", TurnStatus::Succeeded, 7),
            count("e", 1, ok, Some("te")),
        ],
        vec![
            turn_of("f", "t-f-1", TurnStatus::Succeeded, 8),
            count("f", 1, ok, Some("tf")),
        ],
    ];
    let refuse = "CREATE TRIGGER refuse BEFORE INSERT ON turns WHEN NEW.id = 'refused' \
                  BEGIN SELECT RAISE(ABORT, 'refused'); END";
    let open = || async {
        let dir = tempfile::tempdir().expect("tempdir");
        let s = sqlite_at(dir.path()).await;
        let url = format!(
            "sqlite://{}",
            dir.path().join(hale_store::SQLITE_FILE).display()
        );
        let pool = sqlx::SqlitePool::connect(&url).await.expect("connect");
        sqlx::query(refuse).execute(&pool).await.expect("trigger");
        pool.close().await;
        let heard = s.counted();
        (dir, s, heard)
    };
    let drain = |rx: &mut tokio::sync::mpsc::UnboundedReceiver<hale_store::Counted>| {
        let mut v = Vec::new();
        while let Ok(c) = rx.try_recv() {
            v.push(c);
        }
        v
    };

    // One by one.
    let (one_dir, one, mut one_heard) = open().await;
    for w in batch.iter().chain(&failing) {
        let refused = w
            .iter()
            .any(|w| matches!(w, Write::Turn(t) if t.id == "refused"));
        match one.commit(w.clone()).await {
            Ok(()) => assert!(!refused),
            Err(e) => assert!(refused, "{e}"),
        }
    }
    let one_totals = drain(&mut one_heard);

    // As batches: everything submitted, then a flush; the writer takes the
    // queue as it stands (this test's runtime runs one task at a time).
    let (all_dir, all, mut all_heard) = open().await;
    let before = all.commits();
    for w in &batch {
        all.submit(w.clone());
    }
    all.flush().await.expect("the batch commits");
    assert_eq!(all.commits() - before, 1, "one transaction for the batch");
    for w in &failing {
        all.submit(w.clone());
    }
    match all.flush().await {
        Err(StoreError::SubmitFailed { count: 1, last }) => {
            assert!(last.contains("refused"), "{last}")
        }
        other => panic!("expected one failed write, got {other:?}"),
    }
    let all_totals = drain(&mut all_heard);

    assert_eq!(
        table_rows(all_dir.path()).await,
        table_rows(one_dir.path()).await,
        "the same rows"
    );
    // Every total the batch reported is the one the writes one by one
    // reported after the same count; b's two counts were merged into one.
    let key = |c: &hale_store::Counted| (c.agent.clone(), c.n);
    let heard_of = |v: &[hale_store::Counted]| v.iter().map(key).collect::<Vec<_>>();
    assert_eq!(
        heard_of(&all_totals),
        [
            ("a".to_owned(), 1),
            ("a".to_owned(), 2),
            ("c".to_owned(), 1),
            ("b".to_owned(), 2),
            ("d".to_owned(), 1),
            ("f".to_owned(), 1),
        ],
        "in row order, one per count or merged run"
    );
    for c in &all_totals {
        let same = one_totals.iter().find(|o| key(o) == key(c));
        assert_eq!(same, Some(c), "totals after {:?}", key(c));
    }
    all.close().await;
    one.close().await;
}
