//! Tool jobs (docs/operations.md, "Tool jobs"): the job table, the
//! store-and-forward queue and the audit log.
//!
//! A job is one row keyed by its caller-chosen `job_id`; its full state
//! (request, steps, results, evidence) is a JSON body owned by `hale-tools`,
//! beside the few columns the store queries on: `status` and, for a queued
//! job, `next_attempt_ms`. Two operations that make jobs safe are
//! conditional and must answer synchronously, so they bypass the
//! group-commit writer: [`Store::insert_job`] (`ON CONFLICT DO NOTHING`: a
//! `job_id` submitted twice runs once, across restarts and instances) and
//! [`Store::claim_job`] (a compare-and-set on `status`: of several deliverers
//! of a queued job — two loops, two instances, a restart — exactly one wins).
//! Every other write of a job's row (progress between steps, queued,
//! finished: the row, its audit entry and the `job.*` events noted since the
//! last write) goes through [`Store::commit`] as `Write::Job` /
//! `Write::Audit` beside its `Write::Event`s, in one transaction, so
//! a crash never keeps a row without the events that report it or
//! the reverse; [`Store::update_job`] stays for callers outside jobs.
//!
//! The audit log is append-only: one row per finished job (status, degraded,
//! the evidence), read newest first.
//!
//! [`JobRecord`] itself is in `model.rs`, beside the `Write::Job` that
//! carries it into a group commit.

use serde::{Deserialize, Serialize};

use crate::backend::{self, Pool, on_pool};
use crate::error::{Result, StoreError};
use crate::model::{JobRecord, Write};
use crate::store::Store;

/// One row of the audit log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditRecord {
    pub seq: u64,
    pub job_id: String,
    pub time_ms: u64,
    pub status: String,
    pub degraded: bool,
    pub body: serde_json::Value,
}

fn i64_of(what: &str, v: u64) -> Result<i64> {
    i64::try_from(v).map_err(|_| StoreError::Invalid {
        what: what.to_owned(),
        detail: format!("{v} is past the column's range"),
    })
}

fn u64_of(table: &'static str, id: &str, v: i64) -> Result<u64> {
    u64::try_from(v).map_err(|_| StoreError::Corrupt {
        table,
        id: id.to_owned(),
        detail: format!("negative number {v}"),
    })
}

fn json_of(table: &'static str, id: &str, s: &str) -> Result<serde_json::Value> {
    serde_json::from_str(s).map_err(|e| StoreError::Corrupt {
        table,
        id: id.to_owned(),
        detail: format!("body is not JSON: {e}"),
    })
}

fn body_text(job: &JobRecord) -> Result<String> {
    serde_json::to_string(&job.body).map_err(|e| StoreError::Invalid {
        what: format!("job {}", job.job_id),
        detail: e.to_string(),
    })
}

type JobTuple = (String, String, Option<i64>, i64, String);

fn decode_job(t: JobTuple) -> Result<JobRecord> {
    let (job_id, status, next, updated, body) = t;
    Ok(JobRecord {
        next_attempt_ms: next.map(|v| u64_of("jobs", &job_id, v)).transpose()?,
        updated_ms: u64_of("jobs", &job_id, updated)?,
        body: json_of("jobs", &job_id, &body)?,
        status,
        job_id,
    })
}

const JOB_COLS: &str = "job_id, status, next_attempt_ms, updated_ms, body";

impl Store {
    /// Inserts a new job; when `job_id` exists already, nothing is written
    /// and the stored job is returned instead (`Some`).
    pub fn insert_job<'a>(
        &'a self,
        job: &'a JobRecord,
    ) -> crate::BoxFut<'a, Result<Option<JobRecord>>> {
        Box::pin(self.insert_job_inner(job))
    }

    async fn insert_job_inner(&self, job: &JobRecord) -> Result<Option<JobRecord>> {
        let body = body_text(job)?;
        let next = job
            .next_attempt_ms
            .map(|v| i64_of("next_attempt_ms", v))
            .transpose()?;
        let updated = i64_of("updated_ms", job.updated_ms)?;
        let inserted = on_pool!(&self.inner.pool, |p, _Db| {
            sqlx::query(
                "INSERT INTO jobs (job_id, status, next_attempt_ms, updated_ms, body) \
                 VALUES ($1, $2, $3, $4, $5) ON CONFLICT (job_id) DO NOTHING",
            )
            .bind(&job.job_id)
            .bind(&job.status)
            .bind(next)
            .bind(updated)
            .bind(&body)
            .execute(p)
            .await
            .map_err(StoreError::db("inserting a job"))?
            .rows_affected()
        });
        if inserted == 1 {
            Ok(None)
        } else {
            self.job(&job.job_id).await
        }
    }

    /// Overwrites a job's row (status, schedule and body).
    pub fn update_job<'a>(&'a self, job: &'a JobRecord) -> crate::BoxFut<'a, Result<()>> {
        Box::pin(self.update_job_inner(job))
    }

    async fn update_job_inner(&self, job: &JobRecord) -> Result<()> {
        self.write_job(None, job).await.map(|_| ())
    }

    /// Moves a job from status `from` to `to` if it is still in `from`;
    /// true when this caller won. The compare-and-set that makes a queued job
    /// delivered once however many deliverers race for it.
    pub fn claim_job<'a>(
        &'a self,
        job_id: &'a str,
        from: &'a str,
        to: &'a str,
        now_ms: u64,
    ) -> crate::BoxFut<'a, Result<bool>> {
        Box::pin(self.claim_job_inner(job_id, from, to, now_ms))
    }

    async fn claim_job_inner(
        &self,
        job_id: &str,
        from: &str,
        to: &str,
        now_ms: u64,
    ) -> Result<bool> {
        let now = i64_of("updated_ms", now_ms)?;
        let n = on_pool!(&self.inner.pool, |p, _Db| {
            sqlx::query(
                "UPDATE jobs SET status = $3, updated_ms = $4 WHERE job_id = $1 AND status = $2",
            )
            .bind(job_id)
            .bind(from)
            .bind(to)
            .bind(now)
            .execute(p)
            .await
            .map_err(StoreError::db("claiming a job"))?
            .rows_affected()
        });
        Ok(n == 1)
    }

    /// Moves a job from status `from` to the whole state `job` (status,
    /// schedule, body) if it is still in `from`, and commits `with` (its
    /// audit row and events) in the same transaction; true when this caller
    /// won, and then both are durable. The compare-and-set for a transition
    /// that ends a job without running it (expiry, cancel): the row never
    /// shows the new status without the body that explains it, and a crash
    /// never leaves the status without its event. When another caller moved
    /// the job first nothing is written.
    pub fn settle_job<'a>(
        &'a self,
        from: &'a str,
        job: &'a JobRecord,
        with: Vec<Write>,
    ) -> crate::BoxFut<'a, Result<bool>> {
        Box::pin(self.settle_job_inner(from, job, with))
    }

    async fn settle_job_inner(
        &self,
        from: &str,
        job: &JobRecord,
        with: Vec<Write>,
    ) -> Result<bool> {
        let rows = Self::encode(with)?;
        let body = body_text(job)?;
        let next = job
            .next_attempt_ms
            .map(|v| i64_of("next_attempt_ms", v))
            .transpose()?;
        let updated = i64_of("updated_ms", job.updated_ms)?;
        let what = || format!("settling job {}", job.job_id);
        let fail = |e: sqlx::Error| StoreError::Commit {
            what: what(),
            source: std::sync::Arc::new(e),
        };
        // The same statement as `write_job`, on the transaction.
        const SETTLE: &str = "UPDATE jobs SET status = $3, next_attempt_ms = $4, updated_ms = $5, \
                              body = $6 WHERE job_id = $1 AND status = $2";
        let applied = match &self.inner.pool {
            Pool::Sqlite(p) => {
                let mut tx = p.begin_with("BEGIN IMMEDIATE").await.map_err(fail)?;
                let n = sqlx::query(SETTLE)
                    .bind(&job.job_id)
                    .bind(from)
                    .bind(&job.status)
                    .bind(next)
                    .bind(updated)
                    .bind(&body)
                    .execute(&mut *tx)
                    .await
                    .map_err(fail)?
                    .rows_affected();
                if n != 1 {
                    return Ok(false);
                }
                let applied = backend::apply_sqlite(&mut tx, &[rows.as_slice()])
                    .await
                    .map_err(fail)?;
                tx.commit().await.map_err(fail)?;
                applied
            }
            Pool::Pg(p) => {
                let mut tx = p.begin().await.map_err(fail)?;
                let n = sqlx::query(SETTLE)
                    .bind(&job.job_id)
                    .bind(from)
                    .bind(&job.status)
                    .bind(next)
                    .bind(updated)
                    .bind(&body)
                    .execute(&mut *tx)
                    .await
                    .map_err(fail)?
                    .rows_affected();
                if n != 1 {
                    return Ok(false);
                }
                let applied = backend::apply_pg(&mut tx, &[rows.as_slice()])
                    .await
                    .map_err(fail)?;
                tx.commit().await.map_err(fail)?;
                applied
            }
        };
        crate::writer::committed(&self.inner.shared, applied);
        Ok(true)
    }

    /// Writes `job` over its row, only while the row is in status `from`
    /// when one is given; true when a row was written.
    async fn write_job(&self, from: Option<&str>, job: &JobRecord) -> Result<bool> {
        let body = body_text(job)?;
        let next = job
            .next_attempt_ms
            .map(|v| i64_of("next_attempt_ms", v))
            .transpose()?;
        let updated = i64_of("updated_ms", job.updated_ms)?;
        let n = on_pool!(&self.inner.pool, |p, _Db| {
            sqlx::query(
                "UPDATE jobs SET status = $3, next_attempt_ms = $4, updated_ms = $5, body = $6 \
                 WHERE job_id = $1 AND ($2 IS NULL OR status = $2)",
            )
            .bind(&job.job_id)
            .bind(from)
            .bind(&job.status)
            .bind(next)
            .bind(updated)
            .bind(&body)
            .execute(p)
            .await
            .map_err(StoreError::db("writing a job"))?
            .rows_affected()
        });
        Ok(n == 1)
    }

    /// One job.
    pub fn job<'a>(&'a self, job_id: &'a str) -> crate::BoxFut<'a, Result<Option<JobRecord>>> {
        Box::pin(self.job_inner(job_id))
    }

    async fn job_inner(&self, job_id: &str) -> Result<Option<JobRecord>> {
        let row: Option<JobTuple> = on_pool!(&self.inner.pool, |p, _Db| {
            let sql = format!("SELECT {JOB_COLS} FROM jobs WHERE job_id = $1");
            sqlx::query_as(sqlx::AssertSqlSafe(sql))
                .bind(job_id)
                .fetch_optional(p)
                .await
                .map_err(StoreError::db("reading a job"))?
        });
        row.map(decode_job).transpose()
    }

    /// Jobs, newest update first, of one status or all; at most `limit`.
    pub fn jobs<'a>(
        &'a self,
        status: Option<&'a str>,
        limit: u32,
    ) -> crate::BoxFut<'a, Result<Vec<JobRecord>>> {
        Box::pin(self.jobs_inner(status, limit))
    }

    async fn jobs_inner(&self, status: Option<&str>, limit: u32) -> Result<Vec<JobRecord>> {
        let rows: Vec<JobTuple> = on_pool!(&self.inner.pool, |p, _Db| {
            let sql = format!(
                "SELECT {JOB_COLS} FROM jobs WHERE ($1 IS NULL OR status = $1) \
                 ORDER BY updated_ms DESC, job_id LIMIT $2"
            );
            sqlx::query_as(sqlx::AssertSqlSafe(sql))
                .bind(status)
                .bind(i64::from(limit))
                .fetch_all(p)
                .await
                .map_err(StoreError::db("listing jobs"))?
        });
        rows.into_iter().map(decode_job).collect()
    }

    /// Jobs of `status` last updated before `before_ms`, oldest first; at
    /// most `limit`. The oldest first, so a scan that stops at `limit` still
    /// reaches every stale job over successive scans however many fresh
    /// ones there are.
    pub fn stale_jobs<'a>(
        &'a self,
        status: &'a str,
        before_ms: u64,
        limit: u32,
    ) -> crate::BoxFut<'a, Result<Vec<JobRecord>>> {
        Box::pin(self.stale_jobs_inner(status, before_ms, limit))
    }

    async fn stale_jobs_inner(
        &self,
        status: &str,
        before_ms: u64,
        limit: u32,
    ) -> Result<Vec<JobRecord>> {
        let before = i64_of("before_ms", before_ms)?;
        let rows: Vec<JobTuple> = on_pool!(&self.inner.pool, |p, _Db| {
            // The limit in the text (a constant of the queue's poll): a
            // bound LIMIT makes SQLite re-prepare the statement at every
            // run (see `agents_seen_between`).
            let sql = format!(
                "SELECT {JOB_COLS} FROM jobs WHERE status = $1 AND updated_ms < $2 \
                 ORDER BY updated_ms, job_id LIMIT {limit}"
            );
            sqlx::query_as(sqlx::AssertSqlSafe(sql))
                .bind(status)
                .bind(before)
                .fetch_all(p)
                .await
                .map_err(StoreError::db("listing stale jobs"))?
        });
        rows.into_iter().map(decode_job).collect()
    }

    /// Queued jobs, soonest delivery first (due or not: the caller decides,
    /// expiry included); at most `limit`.
    pub fn queued_jobs<'a>(&'a self, limit: u32) -> crate::BoxFut<'a, Result<Vec<JobRecord>>> {
        Box::pin(self.queued_jobs_inner(limit))
    }

    async fn queued_jobs_inner(&self, limit: u32) -> Result<Vec<JobRecord>> {
        let rows: Vec<JobTuple> = on_pool!(&self.inner.pool, |p, _Db| {
            // The limit in the text, not bound (a constant of the queue's
            // poll): a bound LIMIT makes SQLite re-prepare the statement at
            // every run (see `agents_seen_between`).
            let sql = format!(
                "SELECT {JOB_COLS} FROM jobs WHERE status = 'queued' \
                 ORDER BY next_attempt_ms, job_id LIMIT {limit}"
            );
            sqlx::query_as(sqlx::AssertSqlSafe(sql))
                .fetch_all(p)
                .await
                .map_err(StoreError::db("listing queued jobs"))?
        });
        rows.into_iter().map(decode_job).collect()
    }

    /// The audit log, newest first, optionally only (non-)degraded jobs.
    pub fn audit<'a>(
        &'a self,
        degraded: Option<bool>,
        limit: u32,
    ) -> crate::BoxFut<'a, Result<Vec<AuditRecord>>> {
        Box::pin(self.audit_inner(degraded, limit))
    }

    async fn audit_inner(&self, degraded: Option<bool>, limit: u32) -> Result<Vec<AuditRecord>> {
        type Row = (i64, String, i64, String, bool, String);
        let rows: Vec<Row> = on_pool!(&self.inner.pool, |p, _Db| {
            sqlx::query_as(
                "SELECT seq, job_id, time_ms, status, degraded, body FROM job_audit \
                 WHERE ($1 IS NULL OR degraded = $1) ORDER BY seq DESC LIMIT $2",
            )
            .bind(degraded)
            .bind(i64::from(limit))
            .fetch_all(p)
            .await
            .map_err(StoreError::db("reading the job audit log"))?
        });
        rows.into_iter()
            .map(|(seq, job_id, time, status, degraded, body)| {
                Ok(AuditRecord {
                    seq: u64_of("job_audit", &job_id, seq)?,
                    time_ms: u64_of("job_audit", &job_id, time)?,
                    body: json_of("job_audit", &job_id, &body)?,
                    job_id,
                    status,
                    degraded,
                })
            })
            .collect()
    }
}
