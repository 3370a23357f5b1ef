//! Claims of in-flight `Idempotency-Key`s across instances (docs/operations.md,
//! "Scale-out on PostgreSQL").
//!
//! One instance keeps a map of the keys it is answering right now, so a
//! concurrent duplicate it receives waits for the first answer. Across
//! instances the map is a row: before calling upstream for a key that has
//! no stored answer, an instance claims it in `idempotency_claims` with one
//! conditional UPSERT whose `WHERE` is `hale_core::lease::claim_takeable`
//! (expired, or its holder's heartbeat is stale). A duplicate on another
//! instance finds the claim held and waits — not in a poll loop: the holder
//! releases the claim after its answer committed with `NOTIFY hale_idem`
//! (payload: the key's SHA-256, never the client's string), which every
//! instance's outbox listener hears and hands to its waiters; the waiter
//! then reads the stored answer, or claims the key itself when the first
//! call failed. A re-read every `IDEMPOTENCY_RECHECK_EVERY` covers a lost
//! notification. On SQLite there is one instance: a claim is always this
//! instance's, and the in-process map does the waiting.

use std::time::Duration;

use hale_core::lease::{IDEMPOTENCY_CLAIM_TTL, INSTANCE_ALIVE_FOR};
use sha2::{Digest, Sha256};
use tokio::sync::broadcast;

use crate::backend::{IDEM_CHANNEL, Pool, on_pool};
use crate::error::{Result, StoreError};
use crate::model::IdempotentResponse;
use crate::rows::{IDEMPOTENCY_COLS, decode_idempotency};

/// Who holds a key now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// This instance: make the call.
    Mine,
    /// Another live instance is answering it, for the request with this hash.
    Held { request_hash: String },
}

/// A subscription to released claims, made before a claim is tried so a
/// release in between is not missed.
#[derive(Debug)]
pub struct ClaimWaiter {
    rx: broadcast::Receiver<String>,
    hash: String,
}

impl ClaimWaiter {
    /// Waits until the claim of this key is released (or a notification may
    /// have been lost), at most `max`.
    pub fn released<'a>(&'a mut self, max: Duration) -> crate::BoxFut<'a, ()> {
        Box::pin(self.released_inner(max))
    }

    async fn released_inner(&mut self, max: Duration) {
        let wait = async {
            loop {
                match self.rx.recv().await {
                    Ok(h) if h == self.hash || h.is_empty() => return,
                    Ok(_) => {}
                    // Missed some: one of them may have been ours.
                    Err(broadcast::error::RecvError::Lagged(_)) => return,
                    Err(broadcast::error::RecvError::Closed) => {
                        std::future::pending::<()>().await;
                    }
                }
            }
        };
        let _ = tokio::time::timeout(max, wait).await;
    }
}

/// The notification payload of a key.
pub(crate) fn key_hash(key: &str) -> String {
    hex::encode(Sha256::digest(key.as_bytes()))
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

impl crate::Store {
    /// The response stored for an idempotency key, with its request's hash.
    pub fn idempotent<'a>(
        &'a self,
        key: &'a str,
    ) -> crate::BoxFut<'a, Result<Option<IdempotentResponse>>> {
        Box::pin(self.idempotent_inner(key))
    }

    async fn idempotent_inner(&self, key: &str) -> Result<Option<IdempotentResponse>> {
        on_pool!(&self.inner.pool, |p, _Db| {
            let sql = format!("SELECT {IDEMPOTENCY_COLS} FROM idempotency WHERE key = $1");
            let row = sqlx::query(sqlx::AssertSqlSafe(sql))
                .bind(key)
                .fetch_optional(p)
                .await
                .map_err(StoreError::db("reading an idempotency key"))?;
            row.as_ref().map(decode_idempotency).transpose()
        })
    }

    /// Deletes idempotency records stored before `before_ms`; returns how many.
    pub fn prune_idempotency<'a>(&'a self, before_ms: u64) -> crate::BoxFut<'a, Result<u64>> {
        Box::pin(self.prune_idempotency_inner(before_ms))
    }

    async fn prune_idempotency_inner(&self, before_ms: u64) -> Result<u64> {
        let before = i64::try_from(before_ms).unwrap_or(i64::MAX);
        let keys = on_pool!(&self.inner.pool, |p, _Db| {
            let r = sqlx::query("DELETE FROM idempotency WHERE created_ms < $1")
                .bind(before)
                .execute(p)
                .await
                .map_err(StoreError::db("pruning idempotency keys"))?;
            r.rows_affected()
        });
        Ok(keys + self.prune_claims(before).await?)
    }

    /// Subscribes to released claims of `key`; make it before
    /// [`crate::Store::claim_idempotency`].
    pub fn idempotency_waiter(&self, key: &str) -> ClaimWaiter {
        ClaimWaiter {
            rx: self.inner.shared.released.subscribe(),
            hash: key_hash(key),
        }
    }

    /// Claims `key` for this instance's call, unless another live instance
    /// holds it.
    pub fn claim_idempotency<'a>(
        &'a self,
        key: &'a str,
        request_hash: &'a str,
        now_ms: u64,
    ) -> crate::BoxFut<'a, Result<Claim>> {
        Box::pin(self.claim_idempotency_inner(key, request_hash, now_ms))
    }

    async fn claim_idempotency_inner(
        &self,
        key: &str,
        request_hash: &str,
        now_ms: u64,
    ) -> Result<Claim> {
        let Pool::Pg(p) = &self.inner.pool else {
            return Ok(Claim::Mine);
        };
        let now = i64::try_from(now_ms).unwrap_or(i64::MAX);
        let holder = self.holder();
        loop {
            let won: Option<String> = sqlx::query_scalar(
                "INSERT INTO idempotency_claims (key, request_hash, holder, expires_ms) \
                 VALUES ($1, $2, $3, $4) ON CONFLICT (key) DO UPDATE SET \
                 request_hash = excluded.request_hash, holder = excluded.holder, \
                 expires_ms = excluded.expires_ms \
                 WHERE idempotency_claims.expires_ms < $5 OR EXISTS (SELECT 1 FROM instances i \
                 WHERE i.id = idempotency_claims.holder AND i.heartbeat_ms < $6) \
                 RETURNING holder",
            )
            .bind(key)
            .bind(request_hash)
            .bind(&holder)
            .bind(now.saturating_add(ms(IDEMPOTENCY_CLAIM_TTL)))
            .bind(now)
            .bind(now.saturating_sub(ms(INSTANCE_ALIVE_FOR)))
            .fetch_optional(p)
            .await
            .map_err(StoreError::db("claiming an idempotency key"))?;
            if won.is_some() {
                return Ok(Claim::Mine);
            }
            let held: Option<String> =
                sqlx::query_scalar("SELECT request_hash FROM idempotency_claims WHERE key = $1")
                    .bind(key)
                    .fetch_optional(p)
                    .await
                    .map_err(StoreError::db("reading an idempotency claim"))?;
            match held {
                Some(request_hash) => return Ok(Claim::Held { request_hash }),
                None => continue, // released in between: try again
            }
        }
    }

    /// Releases this instance's claim of `key` (its answer is committed, or
    /// its call failed) and wakes the instances waiting for it.
    pub fn release_idempotency<'a>(&'a self, key: &'a str) -> crate::BoxFut<'a, Result<()>> {
        Box::pin(self.release_idempotency_inner(key))
    }

    async fn release_idempotency_inner(&self, key: &str) -> Result<()> {
        let Pool::Pg(p) = &self.inner.pool else {
            return Ok(());
        };
        sqlx::query(
            "WITH gone AS (DELETE FROM idempotency_claims WHERE key = $1 AND holder = $2 \
             RETURNING key) SELECT pg_notify($3, $4) FROM gone",
        )
        .bind(key)
        .bind(self.holder())
        .bind(IDEM_CHANNEL)
        .bind(key_hash(key))
        .execute(p)
        .await
        .map_err(StoreError::db("releasing an idempotency claim"))?;
        Ok(())
    }

    /// Claims older than `before_ms` left by instances that died (pruned
    /// with the idempotency keys).
    async fn prune_claims(&self, before_ms: i64) -> Result<u64> {
        let Pool::Pg(p) = &self.inner.pool else {
            return Ok(0);
        };
        let r = sqlx::query("DELETE FROM idempotency_claims WHERE expires_ms < $1")
            .bind(before_ms)
            .execute(p)
            .await
            .map_err(StoreError::db("pruning idempotency claims"))?;
        Ok(r.rows_affected())
    }

    /// The holder name of this instance's claims: its cluster id once set
    /// ([`crate::Store::set_instance`]), so a stale heartbeat frees them.
    fn holder(&self) -> String {
        self.inner
            .instance
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// Names this instance (its heartbeat row's id) for the claims it takes.
    pub fn set_instance(&self, id: &str) {
        *self
            .inner
            .instance
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = id.to_owned();
    }
}
