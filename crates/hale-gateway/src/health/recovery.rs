//! Checkpoints and recovery plans (docs/operations.md, "Agent health and
//! supervision"): a checkpoint is valid when its SHA-256 matches and its body
//! parses; an invalid one is reported once per process (`checkpoint.corrupt`)
//! and never served. [`HealthRt::plan_recovery`] asks the agent's
//! `RecoveryTracker` (`hale_core::recovery`) for a plan over the task's
//! checkpoint chain and starts it.

use super::{HealthRt, add};
use crate::agents::Agents;
use hale_core::event::{Event, EventKind};
use hale_core::recovery::{CheckpointView, RecoveryPlan};
use hale_store::{CheckpointRecord, Write};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::time::Instant;

/// Whether a stored checkpoint is valid: the hash matches and the body is
/// UTF-8 JSON (`hale_core::recovery::checkpoint_body`).
pub fn checkpoint_valid(c: &CheckpointRecord) -> bool {
    hex::encode(Sha256::digest(&c.body)).eq_ignore_ascii_case(&c.sha256)
        && hale_core::recovery::checkpoint_body(&c.body).is_ok()
}

impl HealthRt {
    /// Emits `checkpoint.corrupt` once per checkpoint per process (`force`: always).
    pub fn report_corrupt(&self, c: &CheckpointRecord, force: bool) {
        let first = self
            .reported
            .lock()
            .expect("reported lock")
            .insert(format!("{}/{}", c.agent, c.id));
        if first || force {
            let actual = hex::encode(Sha256::digest(&c.body));
            self.emit.emit(
                self.emit
                    .event(EventKind::CheckpointCorrupt)
                    .agent(&c.agent)
                    .task(&c.task)
                    .payload(json!({
                        "checkpoint": c.id,
                        "parent": c.parent,
                        "stored_sha256": c.sha256,
                        "actual_sha256": actual,
                        "hash_matches": actual.eq_ignore_ascii_case(&c.sha256),
                        "parses": hale_core::recovery::checkpoint_body(&c.body).is_ok(),
                    })),
            );
        }
    }

    /// Plans the recovery of `task` after a crash or termination and, when the
    /// plan is a restart, starts it (see the module doc).
    pub async fn plan_recovery(
        &self,
        agents: &Agents,
        agent: &str,
        task: &str,
        cause: &str,
    ) -> Result<Value, hale_store::StoreError> {
        let cps = self.emit.store.checkpoints(agent, Some(task)).await?;
        let valid: Vec<bool> = cps.iter().map(checkpoint_valid).collect();
        let views: Vec<CheckpointView<'_>> = cps
            .iter()
            .zip(&valid)
            .map(|(c, v)| CheckpointView {
                id: &c.id,
                parent: c.parent.as_deref(),
                valid: *v,
            })
            .collect();
        let now = Instant::now();
        let plan = {
            let mut all = self.recovery.lock().expect("recovery lock");
            let tracker = all.entry(agent.to_owned()).or_default();
            let plan = tracker.plan(&self.cfg.recovery, task, &views, now);
            match &plan {
                RecoveryPlan::FromCheckpoint { .. } | RecoveryPlan::FromScratch { .. } => {
                    tracker.record_started(task, now)
                }
                RecoveryPlan::HumanReview { .. } | RecoveryPlan::Wait { .. } => {}
            }
            (plan, tracker.count(task))
        };
        let (plan, attempt) = plan;
        let ev = |k: EventKind| -> Event {
            self.emit.metrics.event(k);
            self.emit.event(k).agent(agent).task(task)
        };
        let mut writes = Vec::new();
        let answer = match plan {
            RecoveryPlan::Wait { until } => {
                let ms = until.saturating_duration_since(now).as_millis() as u64;
                json!({"action": "wait", "retry_after_ms": ms})
            }
            RecoveryPlan::HumanReview { reason } => {
                writes.push(Write::Event(ev(EventKind::RecoveryFailed).payload(
                    json!({"reason": reason, "cause": cause, "human_review": true}),
                )));
                writes.push(Write::Event(ev(EventKind::HealthEscalated).payload(json!({
                    "reason": format!("recovery limits reached: {reason}"), "human_review": true, "cause": cause,
                }))));
                json!({"action": "stop", "reason": reason})
            }
            RecoveryPlan::FromCheckpoint { id, skipped } => {
                for s in &skipped {
                    if let Some(c) = cps.iter().find(|c| &c.id == s) {
                        self.report_corrupt(c, true);
                    }
                }
                let body: Value = cps
                    .iter()
                    .find(|c| c.id == id)
                    .and_then(|c| serde_json::from_slice(&c.body).ok())
                    .unwrap_or(Value::Null);
                writes.push(Write::Event(ev(EventKind::RecoveryStarted).payload(json!({
                    "attempt": attempt, "from": "checkpoint", "checkpoint": id, "skipped": skipped, "cause": cause,
                }))));
                writes.push(Write::Event(
                    ev(EventKind::AgentRestarting)
                        .payload(json!({"attempt": attempt, "checkpoint": id})),
                ));
                json!({"action": "restart", "from": "checkpoint", "attempt": attempt,
                       "checkpoint": {"id": id, "body": body}, "skipped": skipped})
            }
            RecoveryPlan::FromScratch { escalate } => {
                for (c, v) in cps.iter().zip(&valid) {
                    if !v {
                        self.report_corrupt(c, true);
                    }
                }
                writes.push(Write::Event(ev(EventKind::RecoveryStarted).payload(
                    json!({
                        "attempt": attempt, "from": "scratch", "cause": cause,
                    }),
                )));
                writes.push(Write::Event(
                    ev(EventKind::AgentRestarting)
                        .payload(json!({"attempt": attempt, "checkpoint": null})),
                ));
                if escalate {
                    writes.push(Write::Event(ev(EventKind::HealthEscalated).payload(json!({
                        "reason": "no valid checkpoint: every stored checkpoint is corrupt; restarting from scratch",
                    }))));
                }
                json!({"action": "restart", "from": "scratch", "attempt": attempt, "escalated": escalate})
            }
        };
        if answer["action"] == "restart" {
            let _ = self.unblock(agents, agent, task);
            let mut book = self.book();
            add(&mut book.recovered, agent, task);
            add(&mut book.recovering, agent, task);
        }
        self.emit.store.commit(writes).await?;
        Ok(answer)
    }
}
