//! The journal: turns (each call's record, its replay key and stored
//! response) and checkpoints of agents' tasks (docs/operations.md, "The
//! journal").
//!
//! Both are written by the group-commit writer only (`Write::Turn`,
//! `Write::Checkpoint`); this file reads them back and prunes old turns.
//! The health history, kept beside the journal, is in `history.rs`.

use crate::backend::on_pool;
use crate::error::{Result, StoreError};
use crate::model::{CheckpointRecord, TurnRecord};
use crate::rows::{CHECKPOINT_COLS, TURN_COLS, decode_checkpoint, decode_turn};
use crate::store::Store;

impl Store {
    /// One turn of the journal.
    pub fn turn<'a>(&'a self, id: &'a str) -> crate::BoxFut<'a, Result<Option<TurnRecord>>> {
        Box::pin(self.turn_inner(id))
    }

    async fn turn_inner(&self, id: &str) -> Result<Option<TurnRecord>> {
        on_pool!(&self.inner.pool, |p, _Db| {
            let sql = format!("SELECT {TURN_COLS} FROM turns WHERE id = $1");
            let row = sqlx::query(sqlx::AssertSqlSafe(sql))
                .bind(id)
                .fetch_optional(p)
                .await
                .map_err(StoreError::db("reading a turn"))?;
            row.as_ref().map(decode_turn).transpose()
        })
    }

    /// The most recent succeeded turn of (agent, task) with this request
    /// hash, with its stored response (replay instead of re-billing).
    pub fn completed_turn<'a>(
        &'a self,
        agent: &'a str,
        task: &'a str,
        request_hash: &'a str,
    ) -> crate::BoxFut<'a, Result<Option<TurnRecord>>> {
        Box::pin(self.completed_turn_inner(agent, task, request_hash))
    }

    async fn completed_turn_inner(
        &self,
        agent: &str,
        task: &str,
        request_hash: &str,
    ) -> Result<Option<TurnRecord>> {
        on_pool!(&self.inner.pool, |p, _Db| {
            let sql = format!(
                "SELECT {TURN_COLS} FROM turns WHERE agent = $1 AND task = $2 \
                 AND request_hash = $3 AND status = 'succeeded' \
                 ORDER BY started_ms DESC, id DESC LIMIT 1"
            );
            let row = sqlx::query(sqlx::AssertSqlSafe(sql))
                .bind(agent)
                .bind(task)
                .bind(request_hash)
                .fetch_optional(p)
                .await
                .map_err(StoreError::db("looking up a completed turn"))?;
            row.as_ref().map(decode_turn).transpose()
        })
    }

    /// Deletes journalled turns that started before `before_ms` (retention);
    /// returns how many.
    pub fn prune_turns<'a>(&'a self, before_ms: u64) -> crate::BoxFut<'a, Result<u64>> {
        Box::pin(self.prune_turns_inner(before_ms))
    }

    async fn prune_turns_inner(&self, before_ms: u64) -> Result<u64> {
        let before = i64::try_from(before_ms).unwrap_or(i64::MAX);
        on_pool!(&self.inner.pool, |p, _Db| {
            let r = sqlx::query("DELETE FROM turns WHERE started_ms < $1")
                .bind(before)
                .execute(p)
                .await
                .map_err(StoreError::db("pruning turns"))?;
            Ok(r.rows_affected())
        })
    }

    /// An agent's checkpoints, of one task or of all, newest first.
    pub fn checkpoints<'a>(
        &'a self,
        agent: &'a str,
        task: Option<&'a str>,
    ) -> crate::BoxFut<'a, Result<Vec<CheckpointRecord>>> {
        Box::pin(self.checkpoints_inner(agent, task))
    }

    async fn checkpoints_inner(
        &self,
        agent: &str,
        task: Option<&str>,
    ) -> Result<Vec<CheckpointRecord>> {
        on_pool!(&self.inner.pool, |p, _Db| {
            let sql = format!(
                "SELECT {CHECKPOINT_COLS} FROM checkpoints WHERE agent = $1 \
                 AND ($2 IS NULL OR task = $2) ORDER BY created_ms DESC, id DESC"
            );
            let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
                .bind(agent)
                .bind(task)
                .fetch_all(p)
                .await
                .map_err(StoreError::db("listing checkpoints"))?;
            rows.iter().map(decode_checkpoint).collect()
        })
    }

    /// One checkpoint.
    pub fn checkpoint<'a>(
        &'a self,
        agent: &'a str,
        id: &'a str,
    ) -> crate::BoxFut<'a, Result<Option<CheckpointRecord>>> {
        Box::pin(self.checkpoint_inner(agent, id))
    }

    async fn checkpoint_inner(&self, agent: &str, id: &str) -> Result<Option<CheckpointRecord>> {
        on_pool!(&self.inner.pool, |p, _Db| {
            let sql =
                format!("SELECT {CHECKPOINT_COLS} FROM checkpoints WHERE agent = $1 AND id = $2");
            let row = sqlx::query(sqlx::AssertSqlSafe(sql))
                .bind(agent)
                .bind(id)
                .fetch_optional(p)
                .await
                .map_err(StoreError::db("reading a checkpoint"))?;
            row.as_ref().map(decode_checkpoint).transpose()
        })
    }
}
