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
    task_spend_age_moves_by_steps_and_the_prune_follows_the_last_count,
    counts_of_one_commit_merge_per_run,
    many_submitted_counts_add_up_whatever_the_batching,
    counts_of_one_commit_end_as_the_same_writes_one_by_one,
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

/// Polls `f` until it holds (a loaded machine may be slow; no bound is
/// asserted on how long it takes).
async fn until(mut f: impl FnMut() -> bool) {
    for _ in 0..600 {
        if f() {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("never held within 30 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_writer_gives_its_caches_back_once_per_quiet_spell() {
    let dir = tempfile::tempdir().expect("tempdir");
    let quiet = std::time::Duration::from_millis(100);
    let opts = StoreOptions {
        release_after_idle: quiet,
        ..StoreOptions::default()
    };
    let s = Store::open_sqlite(dir.path(), opts).await.expect("open");
    for i in 0..200 {
        s.submit(vec![Write::Event(ev(i, EventKind::TurnCompleted))]);
    }
    s.flush().await.expect("flush");
    until(|| s.memory_releases() >= 1).await;
    // Nothing written since: nothing more to give back, however long.
    tokio::time::sleep(quiet * 5).await;
    assert_eq!(s.memory_releases(), 1, "one release per quiet spell");
    // A write starts another spell; the store works as before.
    s.submit(vec![Write::Event(ev(200, EventKind::TurnCompleted))]);
    s.flush().await.expect("flush");
    until(|| s.memory_releases() >= 2).await;
    assert_eq!(
        s.events_after(0, 1000, None).await.expect("events").len(),
        201
    );
    s.close().await;
}
