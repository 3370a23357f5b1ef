//! The outbox: the ordered event log and each sink's place in it
//! (docs/architecture.md, "Events").
//!
//! Events are appended by the group-commit writer, each with a `seq` that
//! grows in commit order (see [`crate::backend`] for why that holds on
//! PostgreSQL too). A sink — `"sse"`, `"webhook:https://…"`, `"nats"` — keeps
//! a cursor: the last seq it acknowledged. A relay reads
//! `events_after(cursor)`, delivers, and `ack_sink`s; so delivery is at least
//! once and in order, and an event leaves the outbox only when every
//! registered sink acknowledged it (`prune_delivered`) or when the outbox is
//! over its hard cap (`shed_over_cap`, which returns how many undelivered
//! events it dropped so the caller can count and report them).
//!
//! A new sink starts at cursor 0: it receives everything still stored. That
//! is the at-least-once choice — adding a webhook never silently skips
//! events that were waiting — and the stored outbox is bounded by pruning
//! and the cap. A relay that wants "only new events" can `ack_sink(last_seq)`
//! right after registering.
//!
//! Dead letters keep a copy of the event body, so a dead-lettered event
//! survives the outbox being pruned or shed, and `dlq_take` can hand it back
//! for a replay. Dead-lettering does not move the sink's cursor; the relay
//! acks past the event itself.

use hale_core::event::EventKind;
use sqlx::QueryBuilder;

use crate::backend::{last_seq, on_pool};
use crate::error::{Result, StoreError};
use crate::model::{DeadLetter, SinkCursor, StoredEvent};
use crate::rows::{DLQ_COLS, decode_dead_letter, decode_event};
use crate::store::{Store, now_ms};

fn ms(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

impl Store {
    /// Up to `limit` events with seq > `after_seq`, in seq order, optionally
    /// only of the given kinds (an empty list matches nothing).
    pub fn events_after<'a>(
        &'a self,
        after_seq: i64,
        limit: usize,
        kinds: Option<&'a [EventKind]>,
    ) -> crate::BoxFut<'a, Result<Vec<StoredEvent>>> {
        Box::pin(self.events_after_inner(after_seq, limit, kinds))
    }

    async fn events_after_inner(
        &self,
        after_seq: i64,
        limit: usize,
        kinds: Option<&[EventKind]>,
    ) -> Result<Vec<StoredEvent>> {
        if kinds.is_some_and(|k| k.is_empty()) || limit == 0 {
            return Ok(Vec::new());
        }
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        on_pool!(&self.inner.pool, |p, Db| {
            let mut qb = QueryBuilder::<Db>::new("SELECT seq, body FROM events WHERE seq > ");
            qb.push_bind(after_seq);
            if let Some(kinds) = kinds {
                qb.push(" AND kind IN (");
                let mut list = qb.separated(", ");
                for k in kinds {
                    list.push_bind(k.as_str());
                }
                qb.push(")");
            }
            qb.push(" ORDER BY seq LIMIT ");
            qb.push_bind(limit);
            let rows = qb
                .build()
                .fetch_all(p)
                .await
                .map_err(StoreError::db("reading the outbox"))?;
            rows.iter().map(decode_event).collect()
        })
    }

    /// The seq of an event id, while it is in the outbox.
    pub fn seq_of<'a>(&'a self, event_id: &'a str) -> crate::BoxFut<'a, Result<Option<i64>>> {
        Box::pin(self.seq_of_inner(event_id))
    }

    async fn seq_of_inner(&self, event_id: &str) -> Result<Option<i64>> {
        on_pool!(&self.inner.pool, |p, _Db| {
            sqlx::query_scalar("SELECT seq FROM events WHERE id = $1")
                .bind(event_id)
                .fetch_optional(p)
                .await
                .map_err(StoreError::db("looking up an event's seq"))
        })
    }

    /// The highest seq in the outbox (0 when it is empty).
    pub fn last_seq<'a>(&'a self) -> crate::BoxFut<'a, Result<i64>> {
        Box::pin(self.last_seq_inner())
    }

    async fn last_seq_inner(&self) -> Result<i64> {
        last_seq(&self.inner.pool).await
    }

    /// Notifications of the highest seq committed, so relays wake without
    /// polling: by this store's writer, and with PostgreSQL also by other
    /// instances (`NOTIFY hale_events`, see `listen.rs`).
    pub fn watch_seq(&self) -> tokio::sync::watch::Receiver<i64> {
        self.inner.shared.seq.subscribe()
    }

    /// The last seq `sink` acknowledged; 0 for a sink never seen.
    pub fn sink_cursor<'a>(&'a self, sink: &'a str) -> crate::BoxFut<'a, Result<i64>> {
        Box::pin(self.sink_cursor_inner(sink))
    }

    async fn sink_cursor_inner(&self, sink: &str) -> Result<i64> {
        on_pool!(&self.inner.pool, |p, _Db| {
            let v: Option<i64> = sqlx::query_scalar("SELECT acked_seq FROM sinks WHERE name = $1")
                .bind(sink)
                .fetch_optional(p)
                .await
                .map_err(StoreError::db("reading a sink cursor"))?;
            Ok(v.unwrap_or(0))
        })
    }

    /// Records that `sink` delivered everything up to `seq`. Cursors only
    /// move forward; an older ack is ignored. Durable before it returns;
    /// registers the sink when it was not.
    pub fn ack_sink<'a>(&'a self, sink: &'a str, seq: i64) -> crate::BoxFut<'a, Result<()>> {
        Box::pin(self.ack_sink_inner(sink, seq))
    }

    async fn ack_sink_inner(&self, sink: &str, seq: i64) -> Result<()> {
        on_pool!(&self.inner.pool, |p, _Db| {
            sqlx::query(
                "INSERT INTO sinks (name, acked_seq, registered_ms) VALUES ($1, $2, $3) \
                 ON CONFLICT (name) DO UPDATE SET acked_seq = CASE \
                 WHEN excluded.acked_seq > sinks.acked_seq THEN excluded.acked_seq \
                 ELSE sinks.acked_seq END",
            )
            .bind(sink)
            .bind(seq)
            .bind(ms(now_ms()))
            .execute(p)
            .await
            .map_err(StoreError::db("acknowledging a sink's cursor"))?;
            Ok(())
        })
    }

    /// Registers a sink at cursor 0 (everything stored is delivered to it);
    /// an already registered sink keeps its cursor.
    pub fn register_sink<'a>(&'a self, sink: &'a str) -> crate::BoxFut<'a, Result<()>> {
        Box::pin(self.register_sink_inner(sink))
    }

    async fn register_sink_inner(&self, sink: &str) -> Result<()> {
        on_pool!(&self.inner.pool, |p, _Db| {
            sqlx::query(
                "INSERT INTO sinks (name, acked_seq, registered_ms) VALUES ($1, 0, $2) \
                 ON CONFLICT (name) DO NOTHING",
            )
            .bind(sink)
            .bind(ms(now_ms()))
            .execute(p)
            .await
            .map_err(StoreError::db("registering a sink"))?;
            Ok(())
        })
    }

    /// Forgets a sink (removed from the config), so it no longer holds back
    /// pruning. Its dead letters stay.
    pub fn remove_sink<'a>(&'a self, sink: &'a str) -> crate::BoxFut<'a, Result<()>> {
        Box::pin(self.remove_sink_inner(sink))
    }

    async fn remove_sink_inner(&self, sink: &str) -> Result<()> {
        on_pool!(&self.inner.pool, |p, _Db| {
            sqlx::query("DELETE FROM sinks WHERE name = $1")
                .bind(sink)
                .execute(p)
                .await
                .map_err(StoreError::db("removing a sink"))?;
            Ok(())
        })
    }

    /// Every registered sink with its cursor, by name.
    pub fn sinks<'a>(&'a self) -> crate::BoxFut<'a, Result<Vec<SinkCursor>>> {
        Box::pin(self.sinks_inner())
    }

    async fn sinks_inner(&self) -> Result<Vec<SinkCursor>> {
        on_pool!(&self.inner.pool, |p, _Db| {
            let rows: Vec<(String, i64)> =
                sqlx::query_as("SELECT name, acked_seq FROM sinks ORDER BY name")
                    .fetch_all(p)
                    .await
                    .map_err(StoreError::db("listing sinks"))?;
            Ok(rows
                .into_iter()
                .map(|(sink, acked_seq)| SinkCursor { sink, acked_seq })
                .collect())
        })
    }

    /// Moves the event at `seq` to `sink`'s dead letters (a copy; the outbox
    /// and the cursor are untouched). Dead-lettering the same (sink, seq)
    /// again updates attempts and error.
    pub fn dead_letter<'a>(
        &'a self,
        sink: &'a str,
        seq: i64,
        attempts: u32,
        error: &'a str,
    ) -> crate::BoxFut<'a, Result<()>> {
        Box::pin(self.dead_letter_inner(sink, seq, attempts, error))
    }

    async fn dead_letter_inner(
        &self,
        sink: &str,
        seq: i64,
        attempts: u32,
        error: &str,
    ) -> Result<()> {
        let affected = on_pool!(&self.inner.pool, |p, _Db| {
            sqlx::query(
                "INSERT INTO dead_letters (sink, seq, event_id, attempts, error, failed_ms, body) \
                 SELECT $1, seq, id, $3, $4, $5, body FROM events WHERE seq = $2 \
                 ON CONFLICT (sink, seq) DO UPDATE SET attempts = excluded.attempts, \
                 error = excluded.error, failed_ms = excluded.failed_ms",
            )
            .bind(sink)
            .bind(seq)
            .bind(i64::from(attempts))
            .bind(error)
            .bind(ms(now_ms()))
            .execute(p)
            .await
            .map_err(StoreError::db("dead-lettering an event"))?
            .rows_affected()
        });
        if affected == 0 {
            return Err(StoreError::NoSuchEvent(seq));
        }
        Ok(())
    }

    /// Dead letters, of one sink or all, in (seq, sink) order.
    pub fn dlq_list<'a>(
        &'a self,
        sink: Option<&'a str>,
    ) -> crate::BoxFut<'a, Result<Vec<DeadLetter>>> {
        Box::pin(self.dlq_list_inner(sink))
    }

    async fn dlq_list_inner(&self, sink: Option<&str>) -> Result<Vec<DeadLetter>> {
        on_pool!(&self.inner.pool, |p, _Db| {
            let sql = format!(
                "SELECT {DLQ_COLS} FROM dead_letters WHERE ($1 IS NULL OR sink = $1) \
                 ORDER BY seq, sink"
            );
            let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
                .bind(sink)
                .fetch_all(p)
                .await
                .map_err(StoreError::db("listing dead letters"))?;
            rows.iter().map(decode_dead_letter).collect()
        })
    }

    /// Removes and returns `sink`'s dead letters — all, or those with the
    /// given event ids — in seq order, for a replay.
    pub fn dlq_take<'a>(
        &'a self,
        sink: &'a str,
        event_ids: Option<&'a [String]>,
    ) -> crate::BoxFut<'a, Result<Vec<DeadLetter>>> {
        Box::pin(self.dlq_take_inner(sink, event_ids))
    }

    async fn dlq_take_inner(
        &self,
        sink: &str,
        event_ids: Option<&[String]>,
    ) -> Result<Vec<DeadLetter>> {
        if event_ids.is_some_and(|ids| ids.is_empty()) {
            return Ok(Vec::new());
        }
        let mut taken = on_pool!(&self.inner.pool, |p, Db| {
            let mut qb = QueryBuilder::<Db>::new("DELETE FROM dead_letters WHERE sink = ");
            qb.push_bind(sink);
            if let Some(ids) = event_ids {
                qb.push(" AND event_id IN (");
                let mut list = qb.separated(", ");
                for id in ids {
                    list.push_bind(id.as_str());
                }
                qb.push(")");
            }
            qb.push(" RETURNING ");
            qb.push(DLQ_COLS);
            let rows = qb
                .build()
                .fetch_all(p)
                .await
                .map_err(StoreError::db("taking dead letters"))?;
            rows.iter()
                .map(decode_dead_letter)
                .collect::<Result<Vec<_>>>()?
        });
        taken.sort_by_key(|d| d.seq);
        Ok(taken)
    }

    /// Deletes the events every registered sink acknowledged; returns how
    /// many. With no sink registered nothing counts as delivered.
    pub fn prune_delivered<'a>(&'a self) -> crate::BoxFut<'a, Result<u64>> {
        Box::pin(self.prune_delivered_inner())
    }

    async fn prune_delivered_inner(&self) -> Result<u64> {
        on_pool!(&self.inner.pool, |p, _Db| {
            let r = sqlx::query(PRUNE)
                .execute(p)
                .await
                .map_err(StoreError::db("pruning delivered events"))?;
            Ok(r.rows_affected())
        })
    }

    /// When the outbox holds more than `cap` events, first prunes what every
    /// sink acknowledged, then sheds the oldest remaining events down to
    /// `cap`. Returns how many undelivered events were shed (pruned ones are
    /// not counted: they were delivered); the caller reports them.
    pub fn shed_over_cap<'a>(&'a self, cap: u64) -> crate::BoxFut<'a, Result<u64>> {
        Box::pin(self.shed_over_cap_inner(cap))
    }

    async fn shed_over_cap_inner(&self, cap: u64) -> Result<u64> {
        let cap = i64::try_from(cap).unwrap_or(i64::MAX);
        let op = "shedding the outbox over its cap";
        let shed = on_pool!(&self.inner.pool, |p, Db| {
            let count: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM events")
                .fetch_one(p)
                .await
                .map_err(StoreError::db(op))?;
            if count <= cap {
                return Ok(0);
            }
            let mut tx = begin_write::<Db>(p).await.map_err(StoreError::db(op))?;
            sqlx::query(PRUNE)
                .execute(&mut *tx)
                .await
                .map_err(StoreError::db(op))?;
            let count: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM events")
                .fetch_one(&mut *tx)
                .await
                .map_err(StoreError::db(op))?;
            let excess = count - cap;
            let mut shed = 0;
            if excess > 0 {
                let last: Option<i64> =
                    sqlx::query_scalar("SELECT seq FROM events ORDER BY seq LIMIT 1 OFFSET $1")
                        .bind(excess - 1)
                        .fetch_optional(&mut *tx)
                        .await
                        .map_err(StoreError::db(op))?;
                if let Some(last) = last {
                    shed = sqlx::query("DELETE FROM events WHERE seq <= $1")
                        .bind(last)
                        .execute(&mut *tx)
                        .await
                        .map_err(StoreError::db(op))?
                        .rows_affected();
                }
            }
            tx.commit().await.map_err(StoreError::db(op))?;
            shed
        });
        if shed > 0 {
            tracing::warn!(
                shed,
                cap,
                "outbox over its cap: shed the oldest undelivered events"
            );
        }
        Ok(shed)
    }

    /// Events not yet acknowledged by the slowest registered sink (all
    /// stored events when no sink is registered).
    pub fn outbox_depth<'a>(&'a self) -> crate::BoxFut<'a, Result<u64>> {
        Box::pin(self.outbox_depth_inner())
    }

    async fn outbox_depth_inner(&self) -> Result<u64> {
        on_pool!(&self.inner.pool, |p, _Db| {
            let n: i64 = sqlx::query_scalar(
                "SELECT COUNT(*) FROM events WHERE seq > \
                 COALESCE((SELECT MIN(acked_seq) FROM sinks), 0)",
            )
            .fetch_one(p)
            .await
            .map_err(StoreError::db("measuring the outbox depth"))?;
            Ok(u64::try_from(n).unwrap_or(0))
        })
    }
}

const PRUNE: &str = "DELETE FROM events WHERE seq <= (SELECT MIN(acked_seq) FROM sinks)";

/// A write transaction: `BEGIN IMMEDIATE` on SQLite, so it takes the write
/// lock up front (waiting on the busy timeout) instead of failing when a read
/// would upgrade to a write.
trait BeginWrite: sqlx::Database {
    fn begin_write(
        pool: &sqlx::Pool<Self>,
    ) -> impl std::future::Future<Output = Result<sqlx::Transaction<'static, Self>, sqlx::Error>> + Send;
}

impl BeginWrite for sqlx::Sqlite {
    async fn begin_write(
        pool: &sqlx::Pool<Self>,
    ) -> Result<sqlx::Transaction<'static, Self>, sqlx::Error> {
        pool.begin_with("BEGIN IMMEDIATE").await
    }
}

impl BeginWrite for sqlx::Postgres {
    async fn begin_write(
        pool: &sqlx::Pool<Self>,
    ) -> Result<sqlx::Transaction<'static, Self>, sqlx::Error> {
        pool.begin().await
    }
}

async fn begin_write<DB: BeginWrite>(
    pool: &sqlx::Pool<DB>,
) -> Result<sqlx::Transaction<'static, DB>, sqlx::Error> {
    DB::begin_write(pool).await
}
