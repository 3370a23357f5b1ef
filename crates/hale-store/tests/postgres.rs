//! The store API against the real PostgreSQL (`HALE_TEST_PG_URL`, default
//! `postgres://postgres@127.0.0.1:5432/test`), one fresh schema per test.
//! Unreachable server: each test prints why it skipped, unless `CI=true`,
//! where it fails.

mod common;

use common::{agent, ev};
use hale_core::event::EventKind;
use hale_store::{Store, Write};

suite!(common::postgres;
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
async fn pg_commit_survives_reopen_and_two_instances_share_the_outbox() {
    let Some(pg) = common::pg_scratch().await else {
        return;
    };
    let a = Store::open(
        Some(&pg.url),
        std::path::Path::new("unused"),
        common::opts(),
    )
    .await
    .expect("open");
    assert_eq!(a.backend(), hale_store::Backend::Postgres);
    let b = Store::open_postgres(&pg.url, common::opts())
        .await
        .expect("second instance");
    let (ra, rb) = tokio::join!(
        a.commit(
            (0..50)
                .map(|i| Write::Event(ev(i, EventKind::TurnCompleted)))
                .collect()
        ),
        b.commit(
            (50..100)
                .map(|i| Write::Event(ev(i, EventKind::TurnCompleted)))
                .collect()
        ),
    );
    ra.expect("commit a");
    rb.expect("commit b");
    a.commit(vec![Write::Agent(agent("a1"))])
        .await
        .expect("commit");
    a.close().await;
    b.close().await;
    let c = Store::open_postgres(&pg.url, common::opts())
        .await
        .expect("reopen");
    assert_eq!(c.agent("a1").await.expect("agent"), Some(agent("a1")));
    let events = c.events_after(0, 1000, None).await.expect("events");
    assert_eq!(events.len(), 100);
    assert!(events.windows(2).all(|w| w[0].seq < w[1].seq));
    c.close().await;
    common::drop_schema(&pg).await;
}

/// A schema from before the idempotency request hash: opening it adds the
/// column, the old row is still served (without a hash).
#[tokio::test]
async fn pg_store_from_before_the_request_hash_gains_the_column() {
    use sqlx::Connection;
    let Some(pg) = common::pg_scratch().await else {
        return;
    };
    let mut conn = sqlx::PgConnection::connect(&pg.url).await.expect("connect");
    for stmt in [common::IDEMPOTENCY_V1, common::IDEMPOTENCY_V1_ROW] {
        sqlx::query(stmt)
            .execute(&mut conn)
            .await
            .expect("old schema");
    }
    drop(conn);
    let s = Store::open_postgres(&pg.url, common::opts())
        .await
        .expect("open");
    common::old_idempotency_rows_read_without_a_hash(&s).await;
    s.close().await;
    common::drop_schema(&pg).await;
}

/// Relays are woken by `NOTIFY hale_events` for events another instance
/// committed (issue 11), not only by their own store's writer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_events_committed_by_another_instance_wake_this_ones_watch() {
    let Some(pg) = common::pg_scratch().await else {
        return;
    };
    let a = Store::open_postgres(&pg.url, common::opts())
        .await
        .expect("open a");
    let b = Store::open_postgres(&pg.url, common::opts())
        .await
        .expect("open b");
    let mut rx = a.watch_seq();
    let start = *rx.borrow_and_update();
    // The listener connects in the background: commit until A hears one.
    let t0 = std::time::Instant::now();
    let mut n = 0;
    let heard = loop {
        n += 1;
        b.commit(vec![Write::Event(ev(n, EventKind::AgentPaused))])
            .await
            .expect("commit on b");
        match tokio::time::timeout(std::time::Duration::from_secs(2), rx.changed()).await {
            Ok(r) => {
                r.expect("watch open");
                break *rx.borrow();
            }
            Err(_) => assert!(
                t0.elapsed() < std::time::Duration::from_secs(20),
                "A's watch never woke for B's commits"
            ),
        }
    };
    assert!(heard > start);
    assert_eq!(heard, b.last_seq().await.expect("last").min(heard));
    a.close().await;
    b.close().await;
    common::drop_schema(&pg).await;
}

/// Idempotency claims across two instances: the first claims, the second
/// finds the claim held (with its request hash) and is woken when it is
/// released; a holder whose heartbeat went stale loses its claim at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_idempotency_claims_hold_wake_and_fall_to_a_dead_holders_successor() {
    use hale_core::lease::INSTANCE_ALIVE_FOR;
    use hale_store::{Claim, InstanceRecord};
    use std::time::Duration;
    let Some(pg) = common::pg_scratch().await else {
        return;
    };
    let a = Store::open_postgres(&pg.url, common::opts())
        .await
        .expect("a");
    let b = Store::open_postgres(&pg.url, common::opts())
        .await
        .expect("b");
    a.set_instance("inst-a");
    b.set_instance("inst-b");
    const NOW: u64 = 1_800_000_000_000;
    let beat = |id: &str, at: u64| InstanceRecord {
        id: id.into(),
        addr: "127.0.0.1:1".into(),
        pid: 1,
        version: "test".into(),
        started_ms: at,
        heartbeat_ms: at,
    };
    a.heartbeat(&beat("inst-a", NOW)).await.expect("heartbeat");
    assert_eq!(
        a.claim_idempotency("k", "h1", NOW).await.expect("claim"),
        Claim::Mine
    );
    assert_eq!(
        b.claim_idempotency("k", "h1", NOW).await.expect("claim"),
        Claim::Held {
            request_hash: "h1".into()
        }
    );
    // B waits; A's release wakes it well before the fallback re-read.
    let mut waiter = b.idempotency_waiter("k");
    let woken = tokio::spawn(async move {
        let t0 = std::time::Instant::now();
        waiter.released(Duration::from_secs(20)).await;
        t0.elapsed()
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    a.release_idempotency("k").await.expect("release");
    let took = woken.await.expect("waiter");
    assert!(
        took < Duration::from_secs(20),
        "woken by the release, not the timeout ({took:?})"
    );
    assert_eq!(
        b.claim_idempotency("k", "h2", NOW).await.expect("claim"),
        Claim::Mine
    );
    // B's heartbeat is stale: A takes B's claim without waiting for its expiry.
    let stale = NOW - INSTANCE_ALIVE_FOR.as_millis() as u64 - 1;
    b.heartbeat(&beat("inst-b", stale))
        .await
        .expect("heartbeat");
    assert_eq!(
        a.claim_idempotency("k", "h2", NOW).await.expect("claim"),
        Claim::Mine
    );
    // B's release no longer touches A's claim.
    b.release_idempotency("k").await.expect("release");
    assert_eq!(
        b.claim_idempotency("k", "h2", NOW).await.expect("claim"),
        Claim::Held {
            request_hash: "h2".into()
        }
    );
    a.close().await;
    b.close().await;
    common::drop_schema(&pg).await;
}

/// A database of its own on the test server (refusing connections to, or
/// locking a table of, the shared one would fail the tests beside it):
/// the admin connection, the database's name and its URL.
async fn own_database() -> Option<(sqlx::PgConnection, String, String)> {
    use sqlx::Connection;
    let pg = common::pg_scratch().await?;
    common::drop_schema(&pg).await;
    let db = format!("{}_db", pg.schema);
    let mut admin = sqlx::PgConnection::connect(&pg.base_url)
        .await
        .expect("admin connection");
    sql(&format!("CREATE DATABASE {db}"))
        .execute(&mut admin)
        .await
        .expect("create database");
    let url = match pg.base_url.rsplit_once('/') {
        Some((server, _)) => format!("{server}/{db}"),
        None => panic!("no database in {}", pg.base_url),
    };
    Some((admin, db, url))
}

fn sql(q: &str) -> sqlx::query::Query<'static, sqlx::Postgres, sqlx::postgres::PgArguments> {
    sqlx::query(sqlx::AssertSqlSafe(q.to_owned()))
}

async fn drop_database(mut admin: sqlx::PgConnection, db: &str) {
    use sqlx::Connection;
    let _ = sql(&format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)"))
        .execute(&mut admin)
        .await;
    let _ = admin.close().await;
}

/// A store on `url` that has committed once (its pool holds a connection).
async fn open_and_commit(url: &str) -> Store {
    let store = Store::open_postgres(url, common::opts())
        .await
        .expect("open");
    store
        .commit(vec![Write::Agent(agent("a1"))])
        .await
        .expect("a commit while the database is up");
    store
}

async fn assert_journalled(store: &Store, id: &str) {
    let turn = store.turn(id).await.expect("read").expect("journalled");
    assert_eq!(turn.status, hale_store::TurnStatus::Succeeded);
}

/// Waits for a queued commit, bounded so a hang fails the test instead of
/// holding the suite.
async fn landed(
    waiting: tokio::task::JoinHandle<hale_store::Result<()>>,
) -> hale_store::Result<()> {
    tokio::time::timeout(std::time::Duration::from_secs(60), waiting)
        .await
        .expect("the commit never ended")
        .expect("join")
}

/// A turn answered while PostgreSQL refuses connections (its database not
/// accepting any, as while it restarts) is journalled once it is back, not
/// lost: the writer tries a batch again while nothing of it was applied
/// (`hale_core::memory::store_retry_after`). The chaos hour's scale-out
/// run lost an answered turn to a PostgreSQL restart before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_a_commit_made_while_the_database_refuses_connections_lands_once_it_is_back() {
    use hale_store::TurnStatus;
    let Some((mut admin, db, url)) = own_database().await else {
        return;
    };
    let store = open_and_commit(&url).await;

    sql(&format!("ALTER DATABASE {db} ALLOW_CONNECTIONS false"))
        .execute(&mut admin)
        .await
        .expect("refuse connections");
    sql(&format!(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
         WHERE datname = '{db}' AND pid <> pg_backend_pid()"
    ))
    .execute(&mut admin)
    .await
    .expect("drop the store's connections");

    let t = common::turn("turn-1", "task-1", "h1", TurnStatus::Succeeded, 1);
    let mut committing = store.queue(vec![Write::Turn(t)]);
    let waiting = tokio::spawn(async move { committing.committed().await });
    // The writer meets the refusal (and tries again) before it is lifted.
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    assert!(
        !waiting.is_finished(),
        "the commit ended while the database refused connections: {:?}",
        landed(waiting).await
    );
    sql(&format!("ALTER DATABASE {db} ALLOW_CONNECTIONS true"))
        .execute(&mut admin)
        .await
        .expect("accept connections again");

    landed(waiting)
        .await
        .expect("the commit made while the database refused connections failed");
    assert_journalled(&store, "turn-1").await;
    store.close().await;
    drop_database(admin, &db).await;
}

/// A group commit whose connection is terminated in the middle of its
/// statements (a server shutting down: "terminating connection due to
/// administrator command") was rolled back, so it is tried again and lands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_a_commit_whose_connection_is_terminated_mid_statement_lands() {
    use hale_store::TurnStatus;
    let Some((mut admin, db, url)) = own_database().await else {
        return;
    };
    let store = open_and_commit(&url).await;

    // The writer's insert waits on this lock, inside its transaction.
    let mut locker = {
        use sqlx::Connection;
        sqlx::PgConnection::connect(&url).await.expect("locker")
    };
    sql("BEGIN").execute(&mut locker).await.expect("begin");
    sql("LOCK TABLE turns IN ACCESS EXCLUSIVE MODE")
        .execute(&mut locker)
        .await
        .expect("lock");
    let t = common::turn("turn-1", "task-1", "h1", TurnStatus::Succeeded, 1);
    let mut committing = store.queue(vec![Write::Turn(t)]);
    let waiting = tokio::spawn(async move { committing.committed().await });
    let blocked = format!(
        "SELECT pid FROM pg_stat_activity WHERE datname = '{db}' AND wait_event_type = 'Lock'"
    );
    let mut pid: Option<i32> = None;
    for _ in 0..600 {
        pid = sqlx::query_scalar(sqlx::AssertSqlSafe(blocked.clone()))
            .fetch_optional(&mut admin)
            .await
            .expect("pg_stat_activity");
        if pid.is_some() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let pid = pid.expect("the writer never waited on the lock");
    sql(&format!("SELECT pg_terminate_backend({pid})"))
        .execute(&mut admin)
        .await
        .expect("terminate the writer's connection");
    // Its next try waits on the lock again: release it.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    sql("ROLLBACK").execute(&mut locker).await.expect("unlock");

    landed(waiting)
        .await
        .expect("the commit whose connection was terminated failed");
    assert_journalled(&store, "turn-1").await;
    store.close().await;
    {
        use sqlx::Connection;
        let _ = locker.close().await;
    }
    drop_database(admin, &db).await;
}
