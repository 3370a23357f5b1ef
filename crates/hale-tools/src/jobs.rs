//! Job submission and the end of a run: expand a named workflow, validate a
//! request, honour an existing `job_id` (a `job_id` submitted twice runs
//! once), run it, then store the outcome — final or queued; reading and
//! cancelling a job.
//!
//! A job's `job.*` events are never written on their own: the run notes
//! them on the job ([`Job::note`]) and every write of the job's row after
//! the claim (progress between steps, queued, final) carries the events
//! noted since, through the store's group-commit writer, in one
//! transaction — a single-step job is the claim and one commit
//! of row, audit entry and every event. The final write is also appended
//! to the audit log file when one is configured.

use crate::model::{Job, JobRequest, QueueInfo};
use crate::row::{decode, record};
use crate::runner::{self, RunEnd};
use crate::tools::{Tools, wall_ms};
use hale_core::event::{Event, EventKind};
use hale_core::tools::{self as rules, JobStatus};
use hale_store::{AuditEntry, Write};
use serde_json::{Value, json};

/// The audit log file's line of a finished job: its evidence (the body of
/// `GET /jobs/{id}`) with `workflow_id` and `degraded_reason` always present
/// (null when none: seed 003's alert script indexes both), and `time_ms`.
fn audit_line(body: &Value, now_ms: u64) -> Value {
    let mut line = body.clone();
    if let Some(m) = line.as_object_mut() {
        m.entry("workflow_id").or_insert(Value::Null);
        m.entry("degraded_reason").or_insert(Value::Null);
        m.insert("time_ms".into(), json!(now_ms));
    }
    line
}

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
    pub fn submit<'a>(
        &'a self,
        req: JobRequest,
    ) -> futures::future::BoxFuture<'a, Result<Submitted, SubmitError>> {
        Box::pin(self.submit_inner(req))
    }

    async fn submit_inner(&self, req: JobRequest) -> Result<Submitted, SubmitError> {
        self.submit_as(req, None, None).await
    }

    /// [`Tools::submit`] on behalf of an agent and task (recorded on the job).
    pub fn submit_as<'a>(
        &'a self,
        req: JobRequest,
        agent: Option<String>,
        task: Option<String>,
    ) -> futures::future::BoxFuture<'a, Result<Submitted, SubmitError>> {
        Box::pin(self.submit_as_inner(req, agent, task))
    }

    async fn submit_as_inner(
        &self,
        mut req: JobRequest,
        agent: Option<String>,
        task: Option<String>,
    ) -> Result<Submitted, SubmitError> {
        self.expand_workflow(&mut req);
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
        let submitted = json!({"job_id": job.job_id, "workflow_id": job.workflow_id, "steps": job.request.steps.len()});
        job.note(EventKind::JobSubmitted, submitted);
        let end = runner::run(self, &mut job).await;
        self.finish_run(&mut job, end, None)
            .await
            .map_err(SubmitError::Store)?;
        Ok(Submitted {
            job,
            replayed: false,
        })
    }

    /// A job naming a configured workflow by `workflow_id`, without steps of
    /// its own, runs the workflow's steps; its tool declarations join the
    /// job's. A job with steps keeps them (`workflow_id` is then a label).
    fn expand_workflow(&self, req: &mut JobRequest) {
        if !req.steps.is_empty() {
            return;
        }
        let Some(w) = req
            .workflow_id
            .as_deref()
            .and_then(|w| self.workflows.get(w))
        else {
            return;
        };
        req.steps = w.steps.clone();
        let mut tools = w.tools.clone();
        tools.append(&mut req.tools);
        req.tools = tools;
    }

    /// Writes a job's row between steps with the events noted since its
    /// last write, in one transaction.
    pub(crate) async fn write_progress(&self, job: &mut Job) -> hale_store::Result<()> {
        let mut writes = vec![Write::Job(record(job, None))];
        writes.extend(job.pending.drain(..).map(Write::Event));
        self.store.commit(writes).await
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
                writes.extend(job.pending.drain(..).map(Write::Event));
                if prev.is_none() {
                    self.metrics.job("queued");
                    writes.push(Write::Event(
                        Event::new(EventKind::JobQueued, now_ms, &mut rand::rng()).payload(
                            json!({"job_id": job.job_id, "ttl_seconds": info.ttl_seconds,
                                   "retry_interval_seconds": info.retry_interval_seconds}),
                        ),
                    ));
                }
                // The row and its event in one transaction.
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

    /// Writes a job's final state, its audit row, the events noted during
    /// the run and the final event, in one transaction (an event commits
    /// with the change it reports); then the audit log file's line.
    pub(crate) async fn finalize(&self, job: &mut Job, now_ms: u64) -> hale_store::Result<()> {
        let (writes, line) = self.final_writes(job, now_ms);
        self.store.commit(writes).await?;
        self.finished(job, line);
        Ok(())
    }

    /// [`Tools::finalize`]'s writes (the job row first among them) and the
    /// audit file's line, counting nothing yet.
    fn final_writes(&self, job: &mut Job, now_ms: u64) -> (Vec<Write>, Option<Value>) {
        job.finished_ms = Some(now_ms);
        let body = serde_json::to_value(&*job).unwrap_or(Value::Null);
        let line = self.audit_file.as_ref().map(|_| audit_line(&body, now_ms));
        let mut writes: Vec<Write> = job.pending.drain(..).map(Write::Event).collect();
        writes.extend([
            Write::Job(record(job, None)),
            Write::Audit(AuditEntry {
                job_id: job.job_id.clone(),
                time_ms: now_ms,
                status: job.status.as_str().to_owned(),
                degraded: job.degraded,
                body,
            }),
        ]);
        let kind = match job.status {
            JobStatus::Completed => Some(EventKind::JobCompleted),
            JobStatus::Failed => Some(EventKind::JobFailed),
            JobStatus::Expired => Some(EventKind::JobExpired),
            JobStatus::Cancelled => Some(EventKind::JobCancelled),
            JobStatus::Running | JobStatus::Queued => None,
        };
        if let Some(kind) = kind {
            writes.push(Write::Event(
                Event::new(kind, now_ms, &mut rand::rng()).payload(json!({
                    "job_id": job.job_id, "workflow_id": job.workflow_id, "ok": job.ok,
                    "degraded": job.degraded, "degraded_reason": job.degraded_reason,
                    "execution_path": job.execution_path, "maybe_executed": job.maybe_executed,
                    "error": job.error,
                })),
            ));
        }
        (writes, line)
    }

    /// A job's final state committed: its metrics and its audit file line.
    fn finished(&self, job: &Job, line: Option<Value>) {
        if !matches!(job.status, JobStatus::Running | JobStatus::Queued) {
            self.metrics.job(job.status.as_str());
            self.metrics.finished(job.degraded);
        }
        if let (Some(file), Some(line)) = (&self.audit_file, line) {
            file.append(&line);
        }
    }

    /// One job's state.
    pub fn job<'a>(
        &'a self,
        job_id: &'a str,
    ) -> futures::future::BoxFuture<'a, hale_store::Result<Option<Job>>> {
        Box::pin(self.job_inner(job_id))
    }

    async fn job_inner(&self, job_id: &str) -> hale_store::Result<Option<Job>> {
        self.store
            .job(job_id)
            .await?
            .map(|r| decode(&r))
            .transpose()
    }

    /// Cancels a queued job. `Ok(None)`: no such job; `Ok(Some((job, false)))`:
    /// the job is not queued (nothing changed).
    pub fn cancel<'a>(
        &'a self,
        job_id: &'a str,
    ) -> futures::future::BoxFuture<'a, hale_store::Result<Option<(Job, bool)>>> {
        Box::pin(self.cancel_inner(job_id))
    }

    async fn cancel_inner(&self, job_id: &str) -> hale_store::Result<Option<(Job, bool)>> {
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
    /// row, so no reader sees the new status without its reason, committed
    /// with its audit row and events in one transaction. False when another
    /// caller moved it first (nothing written).
    pub(crate) async fn settle(
        &self,
        job: &mut Job,
        from: JobStatus,
        now_ms: u64,
    ) -> hale_store::Result<bool> {
        let (mut writes, line) = self.final_writes(job, now_ms);
        let mut rec = record(job, None);
        rec.updated_ms = now_ms;
        // The row goes by the compare-and-set; its audit row and events
        // commit with it.
        writes.retain(|w| !matches!(w, Write::Job(_)));
        if !self.store.settle_job(from.as_str(), &rec, writes).await? {
            return Ok(false);
        }
        self.finished(job, line);
        Ok(true)
    }
}
