//! Responses API answers hale keeps (`Write::Response`, written with the
//! turn that answered): read one, walk a `previous_response_id` chain,
//! delete one, prune them with the journal's retention.
//!
//! Each row holds only its own turn's input and the id it continued, so a
//! conversation is read back by walking the chain from its newest response
//! to its root: one recursive query on both backends, bounded by the
//! caller (`hale_core::responses::CHAIN_MAX`).

use crate::backend::on_pool;
use crate::error::{Result, StoreError};
use crate::model::ResponseRecord;
use crate::rows::{RESPONSE_COLS, decode_response};
use crate::store::Store;

impl Store {
    /// One kept response.
    pub fn response<'a>(
        &'a self,
        id: &'a str,
    ) -> crate::BoxFut<'a, Result<Option<ResponseRecord>>> {
        Box::pin(self.response_inner(id))
    }

    async fn response_inner(&self, id: &str) -> Result<Option<ResponseRecord>> {
        on_pool!(&self.inner.pool, |p, _Db| {
            let sql = format!("SELECT {RESPONSE_COLS} FROM responses WHERE id = $1");
            let row = sqlx::query(sqlx::AssertSqlSafe(sql))
                .bind(id)
                .fetch_optional(p)
                .await
                .map_err(StoreError::db("reading a response"))?;
            row.as_ref().map(decode_response).transpose()
        })
    }

    /// The chain of responses ending with `id`, root first: `id`, the one
    /// it continued, and so on, at most `max` of them. Empty when `id` is
    /// not kept. When the first one still names a `previous_id`, the chain
    /// is longer than `max` or a link is no longer kept.
    pub fn response_chain<'a>(
        &'a self,
        id: &'a str,
        max: usize,
    ) -> crate::BoxFut<'a, Result<Vec<ResponseRecord>>> {
        Box::pin(self.response_chain_inner(id, max))
    }

    async fn response_chain_inner(&self, id: &str, max: usize) -> Result<Vec<ResponseRecord>> {
        let max = i64::try_from(max).unwrap_or(i64::MAX);
        on_pool!(&self.inner.pool, |p, _Db| {
            let cols = RESPONSE_COLS
                .split(", ")
                .map(|c| format!("r.{c}"))
                .collect::<Vec<_>>()
                .join(", ");
            let sql = format!(
                "WITH RECURSIVE chain (id, previous_id, depth) AS ( \
                 SELECT id, previous_id, 1 FROM responses WHERE id = $1 \
                 UNION ALL \
                 SELECT r.id, r.previous_id, c.depth + 1 FROM responses r \
                 JOIN chain c ON r.id = c.previous_id WHERE c.depth < $2) \
                 SELECT {cols} FROM chain c JOIN responses r ON r.id = c.id \
                 ORDER BY c.depth DESC"
            );
            let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
                .bind(id)
                .bind(max)
                .fetch_all(p)
                .await
                .map_err(StoreError::db("walking a response chain"))?;
            rows.iter().map(decode_response).collect()
        })
    }

    /// Deletes a kept response; whether there was one.
    pub fn delete_response<'a>(&'a self, id: &'a str) -> crate::BoxFut<'a, Result<bool>> {
        Box::pin(self.delete_response_inner(id))
    }

    async fn delete_response_inner(&self, id: &str) -> Result<bool> {
        on_pool!(&self.inner.pool, |p, _Db| {
            let r = sqlx::query("DELETE FROM responses WHERE id = $1")
                .bind(id)
                .execute(p)
                .await
                .map_err(StoreError::db("deleting a response"))?;
            Ok(r.rows_affected() > 0)
        })
    }

    /// Deletes responses created before `before_ms` (the journal's
    /// retention); returns how many.
    pub fn prune_responses<'a>(&'a self, before_ms: u64) -> crate::BoxFut<'a, Result<u64>> {
        Box::pin(self.prune_responses_inner(before_ms))
    }

    async fn prune_responses_inner(&self, before_ms: u64) -> Result<u64> {
        let before = i64::try_from(before_ms).unwrap_or(i64::MAX);
        on_pool!(&self.inner.pool, |p, _Db| {
            let r = sqlx::query("DELETE FROM responses WHERE created_ms < $1")
                .bind(before)
                .execute(p)
                .await
                .map_err(StoreError::db("pruning responses"))?;
            Ok(r.rows_affected())
        })
    }
}
