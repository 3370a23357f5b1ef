//! Agents and their counts: the agent rows (one, a page of all, those a
//! starting instance holds, those gone silent), the totals after each
//! committed count and a task's spend, and the listener of other instances'
//! control changes.
//!
//! An agent's row is written by the group-commit writer only (`Write::Agent`,
//! `Write::Count`, `Write::ForgetTask`, see `src/backend.rs`); this file
//! reads it back.

use crate::backend::on_pool;
use crate::error::{Result, StoreError};
use crate::listen::AgentListener;
use crate::model::{AgentRecord, Counted};
use crate::rows::{AGENT_COLS, decode_agent, decode_spend};
use crate::store::{Backend, Store};

impl Store {
    /// One agent's durable state.
    pub fn agent<'a>(&'a self, id: &'a str) -> crate::BoxFut<'a, Result<Option<AgentRecord>>> {
        Box::pin(self.agent_inner(id))
    }

    async fn agent_inner(&self, id: &str) -> Result<Option<AgentRecord>> {
        on_pool!(&self.inner.pool, |p, _Db| {
            let sql = format!("SELECT {AGENT_COLS} FROM agents WHERE id = $1");
            let row = sqlx::query(sqlx::AssertSqlSafe(sql))
                .bind(id)
                .fetch_optional(p)
                .await
                .map_err(StoreError::db("reading an agent"))?;
            row.as_ref().map(decode_agent).transpose()
        })
    }

    /// At most `limit` agents with an id after `after` (all when `None`), in
    /// the byte order of their ids (Rust's `str` order, whatever the
    /// database's collation), only the paused or only the unpaused ones when
    /// `paused` says so: one page of a walk over every agent, which after
    /// hours of traffic may be millions of rows, never read at once.
    pub fn agents_page<'a>(
        &'a self,
        after: Option<&'a str>,
        paused: Option<bool>,
        limit: usize,
    ) -> crate::BoxFut<'a, Result<Vec<AgentRecord>>> {
        Box::pin(self.agents_page_inner(after, paused, limit))
    }

    async fn agents_page_inner(
        &self,
        after: Option<&str>,
        paused: Option<bool>,
        limit: usize,
    ) -> Result<Vec<AgentRecord>> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        // PostgreSQL compares text by the database's collation unless told
        // otherwise; `COLLATE "C"` is byte order, served by its own index
        // (schema: `agents_by_bytes`). SQLite's default is byte order.
        let id = match self.backend() {
            Backend::Sqlite => "id",
            Backend::Postgres => "id COLLATE \"C\"",
        };
        // Placeholders numbered in the order they are bound: $1 the limit,
        // then the cursor and the state when given.
        let mut filter = Vec::new();
        if after.is_some() {
            filter.push(format!("{id} > ${}", filter.len() + 2));
        }
        if paused.is_some() {
            filter.push(format!("paused = ${}", filter.len() + 2));
        }
        let filter = if filter.is_empty() {
            String::new()
        } else {
            format!("WHERE {}", filter.join(" AND "))
        };
        let sql = format!("SELECT {AGENT_COLS} FROM agents {filter} ORDER BY {id} LIMIT $1");
        on_pool!(&self.inner.pool, |p, _Db| {
            let mut q = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(limit);
            if let Some(after) = after {
                q = q.bind(after);
            }
            if let Some(paused) = paused {
                q = q.bind(paused);
            }
            let rows = q
                .fetch_all(p)
                .await
                .map_err(StoreError::db("listing agents"))?;
            rows.iter().map(decode_agent).collect()
        })
    }

    /// The agents a starting instance holds in memory: every paused one
    /// (its automatic resume is timed in memory), every one never seen
    /// (named by the config or an operator), and the `recent` most recently
    /// seen; the rest are read back when they return
    /// (`hale_core::memory`).
    pub fn agents_to_hold<'a>(
        &'a self,
        recent: usize,
    ) -> crate::BoxFut<'a, Result<Vec<AgentRecord>>> {
        Box::pin(self.agents_to_hold_inner(recent))
    }

    async fn agents_to_hold_inner(&self, recent: usize) -> Result<Vec<AgentRecord>> {
        let recent = i64::try_from(recent).unwrap_or(i64::MAX);
        on_pool!(&self.inner.pool, |p, _Db| {
            let sql = format!(
                "SELECT {AGENT_COLS} FROM agents WHERE paused OR last_seen_ms IS NULL \
                 UNION ALL SELECT {AGENT_COLS} FROM (SELECT {AGENT_COLS} FROM agents \
                 WHERE NOT paused AND last_seen_ms IS NOT NULL \
                 ORDER BY last_seen_ms DESC, id LIMIT $1) AS recent"
            );
            let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
                .bind(recent)
                .fetch_all(p)
                .await
                .map_err(StoreError::db("listing the agents to hold"))?;
            rows.iter().map(decode_agent).collect()
        })
    }

    /// Agents last seen after `after` (a `(last_seen_ms, id)` position) and
    /// at or before `until_ms`, in that order, at most `limit`: the health
    /// monitor's check for agents gone silent while out of memory.
    pub fn agents_seen_between<'a>(
        &'a self,
        after: &'a hale_core::memory::SilenceCursor,
        until_ms: u64,
        limit: usize,
    ) -> crate::BoxFut<'a, Result<Vec<AgentRecord>>> {
        Box::pin(self.agents_seen_between_inner(after, until_ms, limit))
    }

    async fn agents_seen_between_inner(
        &self,
        after: &hale_core::memory::SilenceCursor,
        until_ms: u64,
        limit: usize,
    ) -> Result<Vec<AgentRecord>> {
        let from = i64::try_from(after.last_seen_ms).unwrap_or(i64::MAX);
        let until = i64::try_from(until_ms).unwrap_or(i64::MAX);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        on_pool!(&self.inner.pool, |p, _Db| {
            // The limit in the text, not bound: SQLite re-prepares a
            // statement whose LIMIT is a parameter each time that parameter
            // is bound again (sqlx clears the binds after every run), ~77k
            // instructions a time for a poll that runs every health check
            // (callgrind, issue 30); the monitor's limit is a constant.
            let sql = format!(
                "SELECT {AGENT_COLS} FROM agents WHERE \
                 (last_seen_ms > $1 OR (last_seen_ms = $1 AND id > $2)) AND last_seen_ms <= $3 \
                 ORDER BY last_seen_ms, id LIMIT {limit}"
            );
            let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
                .bind(from)
                .bind(after.id.as_str())
                .bind(until)
                .fetch_all(p)
                .await
                .map_err(StoreError::db("listing silent agents"))?;
            rows.iter().map(decode_agent).collect()
        })
    }

    /// The totals after each committed [`Write::Count`], in commit order,
    /// from now on (a second call replaces the first follower). Counts
    /// committed while nobody follows are not kept.
    pub fn counted(&self) -> tokio::sync::mpsc::UnboundedReceiver<Counted> {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        *self
            .inner
            .shared
            .counted
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(tx);
        rx
    }

    /// A task's spend as the store holds it (none before its first count).
    pub fn task_spend<'a>(
        &'a self,
        agent: &'a str,
        task: &'a str,
    ) -> crate::BoxFut<'a, Result<Option<hale_core::budget::Spend>>> {
        Box::pin(self.task_spend_inner(agent, task))
    }

    async fn task_spend_inner(
        &self,
        agent: &str,
        task: &str,
    ) -> Result<Option<hale_core::budget::Spend>> {
        on_pool!(&self.inner.pool, |p, _Db| {
            let row = sqlx::query(
                "SELECT tokens, cost_usd FROM task_spend WHERE agent = $1 AND task = $2",
            )
            .bind(agent)
            .bind(task)
            .fetch_optional(p)
            .await
            .map_err(StoreError::db("reading a task's spend"))?;
            row.as_ref()
                .map(|r| decode_spend(agent, task, r))
                .transpose()
        })
    }

    /// Starts listening for agent control changes (PostgreSQL); on SQLite a
    /// listener that never yields.
    pub fn listen_agents<'a>(&'a self) -> crate::BoxFut<'a, Result<AgentListener>> {
        Box::pin(self.listen_agents_inner())
    }

    async fn listen_agents_inner(&self) -> Result<AgentListener> {
        AgentListener::connect(&self.inner.pool).await
    }
}
