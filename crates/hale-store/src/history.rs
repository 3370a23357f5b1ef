//! The health history (docs/operations.md, "Health history"): transitions and
//! per-deployment minutes, read by `GET /history` and pruned after the
//! retention.
//!
//! Rows are written by the group-commit writer only: a transition event
//! (`hale_core::history::is_transition`) is copied into
//! `history_transitions` in the transaction that appends it to the outbox
//! (the outbox itself is pruned once every sink has it), and closed minutes
//! arrive as one `Write::Minutes` a minute, added to what the row holds
//! (`src/backend.rs`). The rules — what is a transition, how minutes add up,
//! the pruning cutoff — are in `hale_core::history`.

use hale_core::history::MinuteRow;
use serde::Serialize;

use crate::backend::on_pool;
use crate::error::{Result, StoreError};
use crate::store::Store;

/// Most transitions one history read returns (the newest are kept).
pub const MAX_TRANSITIONS: u32 = 10_000;

/// What to read: a time range, optionally one agent or one deployment.
/// `agent` filters transitions only (minutes are per deployment).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HistoryQuery {
    pub agent: Option<String>,
    pub deployment: Option<String>,
    /// Inclusive, milliseconds since the epoch.
    pub from_ms: u64,
    /// Exclusive.
    pub to_ms: u64,
}

/// One kept transition: the event, as it was appended.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TransitionRecord {
    pub id: String,
    pub time_ms: u64,
    pub kind: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deployment: Option<String>,
    pub payload: serde_json::Value,
}

/// The history of a range: transitions and minutes, both oldest first.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct History {
    pub transitions: Vec<TransitionRecord>,
    pub minutes: Vec<MinuteRow>,
}

fn i64_of(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn u64_of(table: &'static str, id: &str, v: i64) -> Result<u64> {
    u64::try_from(v).map_err(|_| StoreError::Corrupt {
        table,
        id: id.to_owned(),
        detail: format!("negative number {v}"),
    })
}

impl Store {
    /// The history of `q`'s range (transitions capped at [`MAX_TRANSITIONS`],
    /// the newest kept).
    pub fn history<'a>(&'a self, q: &'a HistoryQuery) -> crate::BoxFut<'a, Result<History>> {
        Box::pin(self.history_inner(q))
    }

    async fn history_inner(&self, q: &HistoryQuery) -> Result<History> {
        let (from, to) = (i64_of(q.from_ms), i64_of(q.to_ms));
        type TRow = (String, i64, String, Option<String>, Option<String>, String);
        let trows: Vec<TRow> = on_pool!(&self.inner.pool, |p, _Db| {
            sqlx::query_as(
                "SELECT id, time_ms, kind, agent, deployment, body FROM history_transitions \
                 WHERE time_ms >= $1 AND time_ms < $2 \
                 AND ($3 IS NULL OR agent = $3) AND ($4 IS NULL OR deployment = $4) \
                 ORDER BY time_ms DESC, id DESC LIMIT $5",
            )
            .bind(from)
            .bind(to)
            .bind(&q.agent)
            .bind(&q.deployment)
            .bind(i64::from(MAX_TRANSITIONS))
            .fetch_all(p)
            .await
            .map_err(StoreError::db("reading the history transitions"))?
        });
        let mut transitions = trows
            .into_iter()
            .map(|(id, time, kind, agent, deployment, body)| {
                let ev: serde_json::Value =
                    serde_json::from_str(&body).map_err(|e| StoreError::Corrupt {
                        table: "history_transitions",
                        id: id.clone(),
                        detail: e.to_string(),
                    })?;
                Ok(TransitionRecord {
                    time_ms: u64_of("history_transitions", &id, time)?,
                    payload: ev.get("payload").cloned().unwrap_or_default(),
                    id,
                    kind,
                    agent,
                    deployment,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        transitions.reverse();
        type MRow = (String, i64, i64, i64, i64);
        let mrows: Vec<MRow> = on_pool!(&self.inner.pool, |p, _Db| {
            sqlx::query_as(
                "SELECT deployment, minute_ms, calls, failures, latency_sum_ms \
                 FROM history_minutes WHERE minute_ms >= $1 AND minute_ms < $2 \
                 AND ($3 IS NULL OR deployment = $3) ORDER BY minute_ms, deployment",
            )
            .bind(from)
            .bind(to)
            .bind(&q.deployment)
            .fetch_all(p)
            .await
            .map_err(StoreError::db("reading the history minutes"))?
        });
        let minutes = mrows
            .into_iter()
            .map(|(deployment, minute, calls, failures, lat)| {
                let t = "history_minutes";
                Ok(MinuteRow {
                    minute_ms: u64_of(t, &deployment, minute)?,
                    calls: u64_of(t, &deployment, calls)?,
                    failures: u64_of(t, &deployment, failures)?,
                    latency_sum_ms: u64_of(t, &deployment, lat)?,
                    deployment,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(History {
            transitions,
            minutes,
        })
    }

    /// Deletes history older than `before_ms` (see
    /// `hale_core::history::prune_cutoff`); returns the rows deleted.
    pub fn prune_history<'a>(&'a self, before_ms: u64) -> crate::BoxFut<'a, Result<u64>> {
        Box::pin(self.prune_history_inner(before_ms))
    }

    async fn prune_history_inner(&self, before_ms: u64) -> Result<u64> {
        let before = i64_of(before_ms);
        on_pool!(&self.inner.pool, |p, _Db| {
            let a = sqlx::query("DELETE FROM history_transitions WHERE time_ms < $1")
                .bind(before)
                .execute(p)
                .await
                .map_err(StoreError::db("pruning history transitions"))?;
            let b = sqlx::query("DELETE FROM history_minutes WHERE minute_ms < $1")
                .bind(before)
                .execute(p)
                .await
                .map_err(StoreError::db("pruning history minutes"))?;
            // Tasks' spend not counted since: kept as long as the history,
            // its age lagging its last count by up to a step
            // (hale_core::counts::spend_age).
            let c = sqlx::query("DELETE FROM task_spend WHERE updated_ms < $1")
                .bind(hale_core::counts::spend_prune_below(before))
                .execute(p)
                .await
                .map_err(StoreError::db("pruning tasks' spend"))?;
            Ok(a.rows_affected() + b.rows_affected() + c.rows_affected())
        })
    }
}
