//! Instances and leases: the rows several hale instances on one database
//! coordinate through (docs/operations.md, "Scale-out on PostgreSQL").
//!
//! - `instances`: one heartbeat row per running instance (id, address, pid,
//!   start, last heartbeat), for `GET /cluster` and `hale doctor`.
//! - `leases`: one row per piece of singleton work (`name`, `holder`,
//!   `expires_ms`). Taking and renewing are ONE conditional UPSERT whose
//!   `WHERE` is `hale_core::lease::claim`'s rule (the holder renews; anyone
//!   takes an expired lease), so two instances racing for a lease cannot
//!   both win: the database serialises the two statements on the row.
//!
//! These writes bypass the group-commit writer: a renewal's caller needs its
//! answer (did I get it?) at once, and they are a few small statements every
//! few seconds. `now` is the caller's wall clock, passed in.

use crate::backend::on_pool;
use crate::error::{Result, StoreError};

/// One instance's heartbeat row.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct InstanceRecord {
    /// Chosen at start (a ULID), unique per process run.
    pub id: String,
    /// The address it listens on, as configured.
    pub addr: String,
    pub pid: u32,
    pub version: String,
    pub started_ms: u64,
    pub heartbeat_ms: u64,
}

/// One lease row.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LeaseRecord {
    pub name: String,
    pub holder: String,
    pub expires_ms: u64,
}

fn ms(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn to_u64(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

impl crate::Store {
    /// Writes (inserts or refreshes) this instance's heartbeat row.
    pub fn heartbeat<'a>(&'a self, inst: &'a InstanceRecord) -> crate::BoxFut<'a, Result<()>> {
        Box::pin(self.heartbeat_inner(inst))
    }

    async fn heartbeat_inner(&self, inst: &InstanceRecord) -> Result<()> {
        on_pool!(&self.inner.pool, |p, _Db| {
            sqlx::query(
                "INSERT INTO instances (id, addr, pid, version, started_ms, heartbeat_ms) \
                 VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (id) DO UPDATE SET \
                 addr = excluded.addr, pid = excluded.pid, version = excluded.version, \
                 heartbeat_ms = excluded.heartbeat_ms",
            )
            .bind(&inst.id)
            .bind(&inst.addr)
            .bind(i64::from(inst.pid))
            .bind(&inst.version)
            .bind(ms(inst.started_ms))
            .bind(ms(inst.heartbeat_ms))
            .execute(p)
            .await
            .map_err(StoreError::db("writing an instance heartbeat"))?;
            Ok(())
        })
    }

    /// Every instance row, by id.
    pub fn instances<'a>(&'a self) -> crate::BoxFut<'a, Result<Vec<InstanceRecord>>> {
        Box::pin(self.instances_inner())
    }

    async fn instances_inner(&self) -> Result<Vec<InstanceRecord>> {
        on_pool!(&self.inner.pool, |p, _Db| {
            let rows: Vec<(String, String, i64, String, i64, i64)> = sqlx::query_as(
                "SELECT id, addr, pid, version, started_ms, heartbeat_ms FROM instances ORDER BY id",
            )
            .fetch_all(p)
            .await
            .map_err(StoreError::db("listing instances"))?;
            Ok(rows
                .into_iter()
                .map(
                    |(id, addr, pid, version, started, heartbeat)| InstanceRecord {
                        id,
                        addr,
                        pid: u32::try_from(pid).unwrap_or(0),
                        version,
                        started_ms: to_u64(started),
                        heartbeat_ms: to_u64(heartbeat),
                    },
                )
                .collect())
        })
    }

    /// Deletes instance rows: this one's at a clean shutdown (`id`), or
    /// every row whose heartbeat is older than `stale_before_ms`.
    pub fn remove_instances<'a>(
        &'a self,
        id: Option<&'a str>,
        stale_before_ms: u64,
    ) -> crate::BoxFut<'a, Result<u64>> {
        Box::pin(self.remove_instances_inner(id, stale_before_ms))
    }

    async fn remove_instances_inner(&self, id: Option<&str>, stale_before_ms: u64) -> Result<u64> {
        on_pool!(&self.inner.pool, |p, _Db| {
            let r = sqlx::query("DELETE FROM instances WHERE id = $1 OR heartbeat_ms < $2")
                .bind(id)
                .bind(ms(stale_before_ms))
                .execute(p)
                .await
                .map_err(StoreError::db("removing instance rows"))?;
            Ok(r.rows_affected())
        })
    }

    /// Takes or renews lease `name` for `holder` at `now_ms` until
    /// `expires_ms`, when `hale_core::lease::claim` allows it (no row, held by
    /// `holder`, or expired at `now_ms`), in one conditional UPSERT. Returns
    /// the row as it stands afterwards: `holder` holds the lease iff it is
    /// the returned holder.
    pub fn claim_lease<'a>(
        &'a self,
        name: &'a str,
        holder: &'a str,
        now_ms: u64,
        expires_ms: u64,
    ) -> crate::BoxFut<'a, Result<LeaseRecord>> {
        Box::pin(self.claim_lease_inner(name, holder, now_ms, expires_ms))
    }

    async fn claim_lease_inner(
        &self,
        name: &str,
        holder: &str,
        now_ms: u64,
        expires_ms: u64,
    ) -> Result<LeaseRecord> {
        on_pool!(&self.inner.pool, |p, _Db| {
            let won: Option<(String, i64)> = sqlx::query_as(
                "INSERT INTO leases (name, holder, expires_ms) VALUES ($1, $2, $3) \
                 ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, \
                 expires_ms = excluded.expires_ms \
                 WHERE leases.holder = excluded.holder OR leases.expires_ms <= $4 \
                 RETURNING holder, expires_ms",
            )
            .bind(name)
            .bind(holder)
            .bind(ms(expires_ms))
            .bind(ms(now_ms))
            .fetch_optional(p)
            .await
            .map_err(StoreError::db("claiming a lease"))?;
            let (holder, expires) = match won {
                Some(row) => row,
                None => sqlx::query_as("SELECT holder, expires_ms FROM leases WHERE name = $1")
                    .bind(name)
                    .fetch_one(p)
                    .await
                    .map_err(StoreError::db("reading a lease"))?,
            };
            Ok(LeaseRecord {
                name: name.to_string(),
                holder,
                expires_ms: to_u64(expires),
            })
        })
    }

    /// Gives up lease `name` if `holder` holds it (a clean shutdown: the
    /// others take it at their next attempt instead of after the TTL).
    /// Returns whether a row was released.
    pub fn release_lease<'a>(
        &'a self,
        name: &'a str,
        holder: &'a str,
    ) -> crate::BoxFut<'a, Result<bool>> {
        Box::pin(self.release_lease_inner(name, holder))
    }

    async fn release_lease_inner(&self, name: &str, holder: &str) -> Result<bool> {
        on_pool!(&self.inner.pool, |p, _Db| {
            let r = sqlx::query("DELETE FROM leases WHERE name = $1 AND holder = $2")
                .bind(name)
                .bind(holder)
                .execute(p)
                .await
                .map_err(StoreError::db("releasing a lease"))?;
            Ok(r.rows_affected() > 0)
        })
    }

    /// Deletes every lease row. Only for a store no other instance can use
    /// (SQLite under the data-directory lock): a crashed predecessor's leases
    /// would otherwise hold its singleton work back until they expire.
    pub fn clear_leases<'a>(&'a self) -> crate::BoxFut<'a, Result<u64>> {
        Box::pin(self.clear_leases_inner())
    }

    async fn clear_leases_inner(&self) -> Result<u64> {
        on_pool!(&self.inner.pool, |p, _Db| {
            let r = sqlx::query("DELETE FROM leases")
                .execute(p)
                .await
                .map_err(StoreError::db("clearing leases"))?;
            Ok(r.rows_affected())
        })
    }

    /// Every lease row, by name.
    pub fn leases<'a>(&'a self) -> crate::BoxFut<'a, Result<Vec<LeaseRecord>>> {
        Box::pin(self.leases_inner())
    }

    async fn leases_inner(&self) -> Result<Vec<LeaseRecord>> {
        on_pool!(&self.inner.pool, |p, _Db| {
            let rows: Vec<(String, String, i64)> =
                sqlx::query_as("SELECT name, holder, expires_ms FROM leases ORDER BY name")
                    .fetch_all(p)
                    .await
                    .map_err(StoreError::db("listing leases"))?;
            Ok(rows
                .into_iter()
                .map(|(name, holder, expires)| LeaseRecord {
                    name,
                    holder,
                    expires_ms: to_u64(expires),
                })
                .collect())
        })
    }
}
