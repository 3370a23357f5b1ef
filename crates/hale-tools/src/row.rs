//! A job's stored row (the store's `jobs` table) and back: the job's JSON
//! body with its status and next delivery time beside it.

use crate::model::Job;
use crate::tools::wall_ms;
use hale_core::tools::JobStatus;
use hale_store::JobRecord;
use serde_json::Value;

/// The stored row of a job.
pub(crate) fn record(job: &Job, next_attempt_ms: Option<u64>) -> JobRecord {
    JobRecord {
        job_id: job.job_id.clone(),
        status: job.status.as_str().to_owned(),
        next_attempt_ms,
        updated_ms: wall_ms(),
        body: serde_json::to_value(job).unwrap_or(Value::Null),
    }
}

/// A stored row back into a job; the row's status wins over the body's.
pub(crate) fn decode(rec: &JobRecord) -> hale_store::Result<Job> {
    let mut job: Job =
        serde_json::from_value(rec.body.clone()).map_err(|e| hale_store::StoreError::Corrupt {
            table: "jobs",
            id: rec.job_id.clone(),
            detail: e.to_string(),
        })?;
    if let Some(s) = JobStatus::parse(&rec.status) {
        job.status = s;
    }
    Ok(job)
}
