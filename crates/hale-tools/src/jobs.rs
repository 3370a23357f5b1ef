//! Job submission and the end of a run: validate a request, honour an
//! existing `job_id` (a `job_id` submitted twice runs once), run it, then
//! store the outcome — final (audit row and event in one transaction) or
//! queued; reading and cancelling a job.

use crate::model::{Job, JobRequest, QueueInfo};
use crate::row::{decode, record};
use crate::runner::{self, RunEnd};
use crate::tools::{Tools, wall_ms};
use hale_core::event::{Event, EventKind};
use hale_core::tools::{self as rules, JobStatus};
use hale_store::{AuditEntry, Write};
use serde_json::{Value, json};

/// Why a submission was refused.
#[derive(Debug)]
pub enum SubmitError {
    /// The request is malformed; every problem.
    Invalid(Vec<String>),
    /// The `job_id` exists with a different request.
    Reused(Box<Job>),
    Store(hale_store::StoreError),
}

/// What a submission returned.
#[derive(Debug)]
pub struct Submitted {
    pub job: Job,
    /// The `job_id` was seen before: nothing ran.
    pub replayed: bool,
}

impl Tools {
    /// Submits a job: validates it, honours an existing `job_id`, runs it
    /// (or queues it) and returns its evidence.
    pub async fn submit(&self, req: JobRequest) -> Result<Submitted, SubmitError> {
        self.submit_as(req, None, None).await
    }

    /// [`Tools::submit`] on behalf of an agent and task (recorded on the job).
    pub async fn submit_as(
        &self,
        req: JobRequest,
        agent: Option<String>,
        task: Option<String>,
    ) -> Result<Submitted, SubmitError> {
        let problems = req.problems();
        if !problems.is_empty() {
            return Err(SubmitError::Invalid(problems));
        }
        let now_ms = wall_ms();
        let mut job = Job::new(req, now_ms);
        job.agent = agent;
        job.task = task;
        let rec = record(&job, None);
        if let Some(existing) = self
            .store
            .insert_job(&rec)
            .await
            .map_err(SubmitError::Store)?
        {
            let stored = decode(&existing).map_err(SubmitError::Store)?;
            if stored.request != job.request {
                return Err(SubmitError::Reused(Box::new(stored)));
            }
            return Ok(Submitted {
                job: stored,
                replayed: true,
            });
        }
        self.emit(
            EventKind::JobSubmitted,
            json!({"job_id": job.job_id, "workflow_id": job.workflow_id, "steps": job.request.steps.len()}),
        );
        let end = runner::run(self, &mut job).await;
        self.finish_run(&mut job, end, None)
            .await
            .map_err(SubmitError::Store)?;
        Ok(Submitted {
            job,
            replayed: false,
        })
    }

    /// Stores the outcome of a run: final (audit + event) or queued.
    pub(crate) async fn finish_run(
        &self,
        job: &mut Job,
        end: RunEnd,
        prev: Option<QueueInfo>,
    ) -> hale_store::Result<()> {
        let now_ms = wall_ms();
        match end {
            RunEnd::Queue {
                ttl_seconds,
                retry_interval_seconds,
            } => {
                let info = match prev {
                    Some(mut q) => {
                        q.deliveries += 1;
                        q
                    }
                    None => QueueInfo {
                        queued_ms: now_ms,
                        ttl_seconds,
                        retry_interval_seconds,
                        deliveries: 0,
                    },
                };
                job.status = JobStatus::Queued;
                job.queue = Some(info);
                let next = rules::next_delivery_ms(now_ms, info.retry_interval_seconds);
                let mut writes = vec![Write::Job(record(job, Some(next)))];
                if prev.is_none() {
                    self.metrics.job("queued");
                    writes.push(Write::Event(
                        Event::new(EventKind::JobQueued, now_ms, &mut rand::rng()).payload(
                            json!({"job_id": job.job_id, "ttl_seconds": info.ttl_seconds,
                                   "retry_interval_seconds": info.retry_interval_seconds}),
                        ),
                    ));
                }
                // The row and its event in one transaction (DESIGN §6).
                self.store.commit(writes).await
            }
            RunEnd::Completed | RunEnd::Failed => {
                let ok = end == RunEnd::Completed;
                job.status = if ok {
                    JobStatus::Completed
                } else {
                    JobStatus::Failed
                };
                job.ok = ok;
                job.verified = ok && job.steps.iter().all(|s| s.verified);
                self.finalize(job, now_ms).await
            }
        }
    }

    /// Writes a job's final state, its audit row and its event, in one
    /// transaction (DESIGN §6: the event commits with the change it reports).
    pub(crate) async fn finalize(&self, job: &mut Job, now_ms: u64) -> hale_store::Result<()> {
        job.finished_ms = Some(now_ms);
        let body = serde_json::to_value(&*job).unwrap_or(Value::Null);
        let mut writes = vec![
            Write::Job(record(job, None)),
            Write::Audit(AuditEntry {
                job_id: job.job_id.clone(),
                time_ms: now_ms,
                status: job.status.as_str().to_owned(),
                degraded: job.degraded,
                body,
            }),
        ];
        let kind = match job.status {
            JobStatus::Completed => Some(EventKind::JobCompleted),
            JobStatus::Failed => Some(EventKind::JobFailed),
            JobStatus::Expired => Some(EventKind::JobExpired),
            JobStatus::Cancelled => Some(EventKind::JobCancelled),
            JobStatus::Running | JobStatus::Queued => None,
        };
        if let Some(kind) = kind {
            self.metrics.job(job.status.as_str());
            writes.push(Write::Event(
                Event::new(kind, now_ms, &mut rand::rng()).payload(json!({
                    "job_id": job.job_id, "workflow_id": job.workflow_id, "ok": job.ok,
                    "degraded": job.degraded, "degraded_reason": job.degraded_reason,
                    "execution_path": job.execution_path, "maybe_executed": job.maybe_executed,
                    "error": job.error,
                })),
            ));
        }
        self.store.commit(writes).await
    }

    /// One job's state.
    pub async fn job(&self, job_id: &str) -> hale_store::Result<Option<Job>> {
        self.store
            .job(job_id)
            .await?
            .map(|r| decode(&r))
            .transpose()
    }

    /// Cancels a queued job. `Ok(None)`: no such job; `Ok(Some((job, false)))`:
    /// the job is not queued (nothing changed).
    pub async fn cancel(&self, job_id: &str) -> hale_store::Result<Option<(Job, bool)>> {
        let now_ms = wall_ms();
        let Some(mut job) = self.job(job_id).await? else {
            return Ok(None);
        };
        if job.status != JobStatus::Queued {
            return Ok(Some((job, false)));
        }
        job.status = JobStatus::Cancelled;
        job.error = Some("cancelled while queued".into());
        if self.settle(&mut job, JobStatus::Queued, now_ms).await? {
            return Ok(Some((job, true)));
        }
        // Another caller moved it first (delivered, expired, cancelled).
        Ok(self.job(job_id).await?.map(|j| (j, false)))
    }

    /// Ends a job that is still in `from` with the state `job` holds,
    /// without running it (expiry, cancel): a compare-and-set of the whole
    /// row, so no reader sees the new status without its reason, then its
    /// audit row and event. False when another caller moved it first.
    pub(crate) async fn settle(
        &self,
        job: &mut Job,
        from: JobStatus,
        now_ms: u64,
    ) -> hale_store::Result<bool> {
        job.finished_ms = Some(now_ms);
        let mut rec = record(job, None);
        rec.updated_ms = now_ms;
        if !self.store.settle_job(from.as_str(), &rec).await? {
            return Ok(false);
        }
        self.finalize(job, now_ms).await?;
        Ok(true)
    }
}
