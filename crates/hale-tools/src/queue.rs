//! The store-and-forward queue: each pass puts back jobs a dead process left
//! `running`, expires queued jobs past their TTL and delivers the due ones.
//! A queued job is delivered by whoever wins the store's compare-and-set on
//! its status, so it runs exactly once.

use crate::model::{self, QueueInfo};
use crate::row::{decode, record};
use crate::runner;
use crate::tools::{Tools, wall_ms};
use hale_core::event::EventKind;
use hale_core::tools::{self as rules, JobStatus, QueueAction};
use hale_store::Write;
use serde_json::{Value, json};
use std::time::Duration;

/// How often the queue looks for due or expired jobs.
pub const QUEUE_TICK: Duration = Duration::from_millis(500);
/// Queued jobs looked at per tick.
pub const QUEUE_BATCH: u32 = 100;
/// Jobs left `running` looked at per tick (oldest first).
pub const RUNNING_BATCH: u32 = 1000;
/// The reason a job interrupted by a restart carries.
pub const INTERRUPTED_REASON: &str = "interrupted by a restart";

impl Tools {
    /// Sets how long after its step timeouts a job left `running` counts as
    /// interrupted (default [`rules::INTERRUPTED_GRACE`]).
    pub fn set_interrupted_grace(&self, grace: Duration) {
        self.interrupted_grace_ms.store(
            u64::try_from(grace.as_millis()).unwrap_or(u64::MAX),
            std::sync::atomic::Ordering::Relaxed,
        );
    }

    /// Puts back jobs left `running` by a process that died mid-job (at
    /// start, and on every queue pass, once their step timeouts and the
    /// grace have passed so a live peer's job is never taken). The step that
    /// was running is the first without a stored outcome (the runner stores
    /// progress between steps): when it is safe to re-run (deterministic
    /// tool, idempotency key, or `retry_unsafe`) the job is queued again
    /// and resumes at that step; otherwise the job fails with `degraded_reason:
    /// "interrupted by a restart"` and `maybe_executed` on that step — it is
    /// never silently re-run. The store's compare-and-set on the status
    /// decides between processes. Returns how many jobs it put back.
    pub async fn recover_interrupted(&self) -> hale_store::Result<usize> {
        let grace = Duration::from_millis(
            self.interrupted_grace_ms
                .load(std::sync::atomic::Ordering::Relaxed),
        );
        // Only jobs quiet for at least the grace can be interrupted ones
        // (the rule adds each job's step timeouts on top), oldest first.
        let quiet_since =
            wall_ms().saturating_sub(u64::try_from(grace.as_millis()).unwrap_or(u64::MAX));
        let running = self
            .store
            .stale_jobs(JobStatus::Running.as_str(), quiet_since, RUNNING_BATCH)
            .await?;
        let mut touched = 0;
        for rec in running {
            let mut job = match decode(&rec) {
                Ok(j) => j,
                Err(e) => {
                    tracing::error!(job = rec.job_id, error = %e, "running job does not decode; skipped");
                    continue;
                }
            };
            let at = job.steps.len();
            let rest = job.request.steps.get(at..).unwrap_or_default();
            let remaining_ms = rest
                .iter()
                .map(|s| s.timeout_ms)
                .fold(0u64, u64::saturating_add);
            // No step left without an outcome: re-running runs nothing.
            let safe = rest.first().is_none_or(|step| {
                let deterministic = self
                    .registry
                    .snapshot()
                    .iter()
                    .any(|n| n.deterministic(&step.tool_name));
                rules::safe_to_rerun(
                    deterministic,
                    step.idempotency_key.is_some(),
                    step.retry_unsafe,
                )
            });
            let step_id = rest.first().map(|s| s.step_id.clone());
            let now_ms = wall_ms();
            match rules::interrupted_action(rec.updated_ms, remaining_ms, grace, now_ms, safe) {
                rules::Interrupted::StillRunning => {}
                rules::Interrupted::Requeue => {
                    if !self
                        .store
                        .claim_job(&job.job_id, "running", "queued", now_ms)
                        .await?
                    {
                        continue;
                    }
                    let info = job.queue.unwrap_or_else(|| {
                        let (ttl_seconds, retry_interval_seconds) = rest
                            .first()
                            .and_then(|s| match s.offline_behavior {
                                model::OfflineBehavior::Queue {
                                    ttl_seconds,
                                    retry_interval_seconds,
                                } => Some((ttl_seconds, retry_interval_seconds)),
                                model::OfflineBehavior::FailFast => None,
                            })
                            .unwrap_or((
                                rules::DEFAULT_QUEUE_TTL_SECONDS,
                                rules::DEFAULT_QUEUE_RETRY_INTERVAL_SECONDS,
                            ));
                        QueueInfo {
                            queued_ms: now_ms,
                            ttl_seconds,
                            retry_interval_seconds,
                            deliveries: 0,
                        }
                    });
                    job.status = JobStatus::Queued;
                    job.queue = Some(info);
                    job.degrade(format!("{INTERRUPTED_REASON}; re-queued (safe to re-run)"));
                    // Due at once: the next pass delivers it. The row and
                    // its event in one transaction.
                    job.note(
                        EventKind::JobQueued,
                        json!({"job_id": job.job_id, "reason": INTERRUPTED_REASON,
                               "step_id": step_id, "ttl_seconds": info.ttl_seconds,
                               "retry_interval_seconds": info.retry_interval_seconds}),
                    );
                    let mut writes = vec![Write::Job(record(&job, Some(now_ms)))];
                    writes.extend(job.pending.drain(..).map(Write::Event));
                    self.store.commit(writes).await?;
                    self.metrics.job("queued");
                    touched += 1;
                }
                rules::Interrupted::Fail => {
                    if !self
                        .store
                        .claim_job(&job.job_id, "running", "failed", now_ms)
                        .await?
                    {
                        continue;
                    }
                    let step_id = step_id.unwrap_or_default();
                    let message = format!(
                        "{INTERRUPTED_REASON}: the call may have executed and is not safe to re-run"
                    );
                    job.steps.push(model::StepOutcome {
                        step_id: step_id.clone(),
                        ok: false,
                        verified: false,
                        result: Value::Null,
                        node: None,
                        attempts: 0,
                        maybe_executed: true,
                        error: None,
                        message: Some(message.clone()),
                    });
                    job.note(
                        EventKind::JobStepFailed,
                        json!({"job_id": job.job_id, "step_id": step_id,
                               "message": message, "maybe_executed": true}),
                    );
                    job.status = JobStatus::Failed;
                    job.ok = false;
                    job.verified = false;
                    job.maybe_executed = true;
                    job.degraded = true;
                    job.degraded_reason = Some(INTERRUPTED_REASON.into());
                    job.error = Some(format!("step {step_id}: {message}"));
                    self.finalize(&mut job, now_ms).await?;
                    touched += 1;
                }
            }
        }
        Ok(touched)
    }

    /// One pass of the store-and-forward queue: puts back interrupted jobs
    /// ([`Tools::recover_interrupted`]), expires what passed its TTL,
    /// delivers what is due. Returns how many jobs it touched.
    pub async fn queue_tick(&self) -> hale_store::Result<usize> {
        let mut touched = self.recover_interrupted().await?;
        let queued = self.store.queued_jobs(QUEUE_BATCH).await?;
        let mut refreshed = false;
        for rec in queued {
            let mut job = match decode(&rec) {
                Ok(j) => j,
                Err(e) => {
                    tracing::error!(job = rec.job_id, error = %e, "queued job does not decode; skipped");
                    continue;
                }
            };
            let Some(q) = job.queue else { continue };
            let now_ms = wall_ms();
            let next = rec.next_attempt_ms.unwrap_or(0);
            match rules::queue_action(q.queued_ms, q.ttl_seconds, next, now_ms) {
                QueueAction::WaitUntil(_) => {}
                QueueAction::Expire => {
                    job.status = JobStatus::Expired;
                    job.error = Some(format!(
                        "no node took the job within its ttl of {} s",
                        q.ttl_seconds
                    ));
                    if self.settle(&mut job, JobStatus::Queued, now_ms).await? {
                        touched += 1;
                    }
                }
                QueueAction::Deliver => {
                    if !self
                        .store
                        .claim_job(&job.job_id, "queued", "running", now_ms)
                        .await?
                    {
                        continue;
                    }
                    if !refreshed {
                        // A node that came back is seen now, not at the next refresh.
                        self.refresh_all().await;
                        refreshed = true;
                    }
                    job.status = JobStatus::Running;
                    let end = runner::run(self, &mut job).await;
                    self.finish_run(&mut job, end, Some(q)).await?;
                    touched += 1;
                }
            }
        }
        Ok(touched)
    }
}
