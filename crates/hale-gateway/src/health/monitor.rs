//! The health monitor (docs/operations.md, "Agent health and supervision"):
//! evaluates the agents at the earliest deadline any of them has (stale,
//! stuck, the next nudge, an escalation's end: `hale_core::health::next_wake`),
//! at the latest every `health.evaluate_every`, and whenever a turn finished,
//! a new agent heartbeated or an operator decided; turns what the registry
//! reports into events and actions ([`Monitor::tick`]), and watches agents
//! that went silent while out of memory ([`Monitor::watch_silent`]).
//!
//! Only the instance holding the health monitor's lease runs it, because
//! only it judges agents. Silence is read from the agents' rows
//! (`last_seen_ms`, set by every counted turn on any instance), walked in
//! order with a cursor, so each silence is read once, in batches, however
//! many agents the store holds (`hale_core::memory`).

use super::HealthRt;
use crate::agents::Agents;
use crate::emit::wall_ms;
use futures::future::BoxFuture;
use hale_core::config::Config;
use hale_core::event::EventKind;
use hale_core::health::{HealthOutput, Intervention};
use hale_core::memory::{SILENT_BATCH, SILENT_BATCHES_PER_CHECK, SilenceCursor, silent_since};
use hale_store::Store;
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// What the monitor works on: the health runtime and the agents it reads
/// back and terminates.
#[derive(Clone)]
pub struct Monitor {
    pub cfg: Arc<Config>,
    pub store: Store,
    pub health: Arc<HealthRt>,
    pub agents: Arc<Agents>,
}

/// Evaluates every agent on a schedule and when turns finish, until `cancel`.
pub fn monitor(m: impl Into<Monitor>, cancel: CancellationToken) -> BoxFuture<'static, ()> {
    monitor_boxed(m.into(), cancel)
}

/// [`monitor`]'s future, built here so that it is compiled once, in this
/// crate ([`hale_store::BoxFut`]).
fn monitor_boxed(m: Monitor, cancel: CancellationToken) -> BoxFuture<'static, ()> {
    Box::pin(monitor_inner(m, cancel))
}

async fn monitor_inner(m: Monitor, cancel: CancellationToken) {
    let every = m.cfg.health.evaluate_every;
    let mut checked_at = Instant::now();
    let mut silence = silence_cursor(&m.cfg, wall_ms());
    m.watch_silent(&mut silence, wall_ms(), Instant::now())
        .await;
    loop {
        let wake = m.health.plan_wake(Instant::now(), every);
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep_until(wake.into()) => {}
            _ = m.health.wake.notified() => {}
        }
        let now = Instant::now();
        m.tick(now);
        // Agents silent while out of memory are read back to be judged.
        if now.saturating_duration_since(checked_at) >= hale_core::memory::SILENCE_CHECK_EVERY {
            checked_at = now;
            m.watch_silent(&mut silence, wall_ms(), now).await;
        }
    }
}

/// One evaluation of `m` at `now` ([`Monitor::tick`]).
pub fn tick(m: impl Into<Monitor>, now: Instant) {
    m.into().tick(now);
}

/// Where the silence check of a monitor started at `now_ms` begins: agents
/// seen from `stuck_after` before it (an older silence was an earlier
/// monitor's to judge; a restart never watched agents it had not seen).
pub fn silence_cursor(cfg: &Config, now_ms: u64) -> SilenceCursor {
    SilenceCursor::starting_at(silent_since(now_ms, cfg.health.stuck_after).unwrap_or(0))
}

impl Monitor {
    /// One evaluation at `now`: emits state changes, escalations and
    /// terminations (nudges wait for the agent's next request). Tests call it
    /// with a fake `now`.
    pub fn tick(&self, now: Instant) {
        let h = &self.health;
        let mut out = std::mem::take(&mut *h.scratch.lock().expect("scratch lock"));
        out.clear();
        h.reg().evaluate_all(&self.cfg.health, now, &mut out);
        for (agent, o) in out.drain(..) {
            let task = h.current_task(&agent);
            match o {
                HealthOutput::StateChanged(c) => {
                    let mut ev = h
                        .emit
                        .event(EventKind::HealthStateChanged)
                        .agent(&*agent)
                        .payload(json!({
                            "from": c.from, "to": c.to, "signal": c.signal, "reason": c.reason,
                        }));
                    if let Some(t) = &task {
                        ev = ev.task(t.clone());
                    }
                    h.emit.emit(ev);
                }
                HealthOutput::Intervention(Intervention::Nudge { .. }) => {
                    // Pending in the registry; delivered (and reported) by `take_nudge`.
                }
                HealthOutput::Intervention(Intervention::Escalate { reason }) => {
                    let mut ev = h
                        .emit
                        .event(EventKind::HealthEscalated)
                        .agent(&*agent)
                        .payload(json!({
                            "reason": reason,
                            "decide": format!("POST /agents/{agent}/decide"),
                            "options": ["more_time", "hand_off", "terminate"],
                            "timeout_ms": self.cfg.health.escalation_timeout.as_millis() as u64,
                        }));
                    if let Some(t) = &task {
                        ev = ev.task(t.clone());
                    }
                    h.emit.emit(ev);
                }
                HealthOutput::Intervention(Intervention::Terminate { reason }) => {
                    let task = task.unwrap_or_else(|| crate::guard::DEFAULT_TASK.to_owned());
                    h.block_task(&self.agents, &agent, &task, &reason, now);
                }
            }
        }
        *h.scratch.lock().expect("scratch lock") = out;
    }

    /// Reads back the agents silent for `health.stuck_after` that are not
    /// watched here (shed from memory, or seen only by another instance) and
    /// watches them as last heard from at their last turn, so the monitor's
    /// next evaluation judges them stuck as if they had stayed. Paused agents
    /// are skipped (a pause is not a silence to judge). A store error is logged
    /// and the cursor stays, so the next check tries again. Returns how many it
    /// started watching.
    pub fn watch_silent<'a>(
        &'a self,
        cursor: &'a mut SilenceCursor,
        now_ms: u64,
        now: Instant,
    ) -> futures::future::BoxFuture<'a, usize> {
        Box::pin(self.watch_silent_inner(cursor, now_ms, now))
    }

    async fn watch_silent_inner(
        &self,
        cursor: &mut SilenceCursor,
        now_ms: u64,
        now: Instant,
    ) -> usize {
        let Some(until) = silent_since(now_ms, self.cfg.health.stuck_after) else {
            return 0;
        };
        let mut watched = 0;
        for _ in 0..SILENT_BATCHES_PER_CHECK {
            let rows = match self
                .store
                .agents_seen_between(cursor, until, SILENT_BATCH)
                .await
            {
                Ok(rows) => rows,
                Err(e) => {
                    tracing::warn!(error = %e, "looking for silent agents failed");
                    return watched;
                }
            };
            let full = rows.len() == SILENT_BATCH;
            for row in rows {
                let Some(seen) = row.last_seen_ms else {
                    continue;
                };
                cursor.advance(seen, &row.id);
                if row.paused || self.health.knows(&row.id) {
                    continue;
                }
                let id = row.id.clone();
                let state = row.state.clone();
                if self.agents.hold_row(row) {
                    // Its terminated tasks stay blocked.
                    self.health.adopt_terminated(&id, &state);
                }
                let silent_for = Duration::from_millis(now_ms.saturating_sub(seen));
                let at = now.checked_sub(silent_for).unwrap_or(now);
                if self.health.watch_silent(&id, at) {
                    watched += 1;
                }
            }
            if !full {
                break;
            }
        }
        if watched > 0 {
            self.health.wake();
        }
        watched
    }
}
