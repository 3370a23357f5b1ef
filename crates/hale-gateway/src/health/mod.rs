//! The gateway's health runtime (docs/operations.md, "Agent health and
//! supervision"): heartbeats, the monitor, the interventions it acts on,
//! checkpoints, recovery plans and replay. The component is [`HealthRt`]; its
//! routes are in `api/health.rs` and `api/checkpoints.rs`, its loop
//! [`monitor()`], checkpoints and plans [`recovery`].
//!
//! The rules are in `hale_core::health` (state machine, intervention planner,
//! registry) and `hale_core::recovery` (limits, backoff, checkpoint chain).
//! This module feeds them and carries out what they decide:
//!
//! - **Heartbeats.** Every turn is one ([`HealthRt::after_turn`]); agents may also
//!   `POST /agents/{id}/heartbeat`. A heartbeat locks the registry for one
//!   O(1) update; the body is parsed with borrowed strings, so a heartbeat of
//!   a known agent allocates nothing beyond the request itself. Heartbeats are
//!   not events; the state changes they cause are.
//! - **The monitor** ([`monitor`]) evaluates on a schedule
//!   (`health.evaluate_every`) and whenever a turn finished (a `Notify`), and
//!   [`Monitor::tick`] turns what the registry reports into events and actions:
//!   `health.state_changed`; a nudge waits in the registry and is injected
//!   into the agent's next request ([`HealthRt::take_nudge`], event `health.nudge_sent`
//!   at delivery, so the event means the agent really received it);
//!   `health.escalated` (webhooks reach the operator, who answers with
//!   `POST /agents/{id}/decide`); termination blocks the agent's current task
//!   (410 `task_terminated` for its requests) and records the final state in
//!   the agent's record and in `agent.terminated`.
//! - **Checkpoints** are stored with the SHA-256 of their body. A checkpoint
//!   is valid when the hash matches and the body parses; an invalid one is
//!   reported (`checkpoint.corrupt`, once per checkpoint per process) and
//!   never served — listings mark it `valid: false`, a GET of it is 409.
//! - **Recovery** (`POST /agents/{id}/tasks/{task}/recover`, called by
//!   `hale run` after a crash or a termination) asks the agent's
//!   `RecoveryTracker` for a plan over the task's checkpoint chain and
//!   answers restart-from-checkpoint (with its body), restart-from-scratch,
//!   wait (backoff) or stop (human review), emitting `recovery.*`,
//!   `agent.restarting`, `checkpoint.corrupt` and `health.escalated`. The
//!   limits are the gateway's `recovery:` config, so one place holds them
//!   whether the supervisor is embedded or remote.
//! - **Replay instead of re-billing** ([`HealthRt::replay`]) is on only for tasks that
//!   were recovered at least once: it is a recovered agent's re-issued
//!   request that must not be billed again. An agent that is not recovering and
//!   asks the same question twice (polling, sampling) gets a fresh answer; a
//!   recovered one gets the journalled answer with `x-hale-replayed: true` and
//!   no provider call. The set of recovered tasks lives in memory (a gateway
//!   restart ends replay for them, which only costs a re-bill, never a wrong
//!   answer).
//!
//! Health is per agent (the registry's unit); termination and recovery are
//! per (agent, task), the task being the one named by the request, the
//! heartbeat, or the agent's most recent one.

pub mod monitor;
pub mod recovery;

pub use monitor::{Monitor, monitor, silence_cursor, tick};
pub use recovery::checkpoint_valid;

use crate::agents::Agents;
use crate::emit::{Emitter, wall_ms};
use crate::error::HaleError;
use axum::http::StatusCode;
use hale_core::config::Config;
use hale_core::event::EventKind;
use hale_core::health::{
    Decision, HealthOutput, HealthRegistry, HealthState, Heartbeat, InterventionPhase, StateChange,
};
use hale_core::recovery::RecoveryTracker;
use hale_proto::{ChatRequest, Part, Role};
use hale_store::{AgentRecord, StoredResponse, Write};
use serde_json::{Value, json};
use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Header set on an answer served from the turn journal.
pub const REPLAYED_HEADER: &str = "x-hale-replayed";

/// The health runtime: the registry, the tasks' book, recovery trackers.
pub struct HealthRt {
    cfg: Arc<Config>,
    emit: Emitter,
    registry: Mutex<HealthRegistry>,
    /// Per (agent, task) bookkeeping: terminated tasks, recoveries, current task.
    tasks: Mutex<TaskBook>,
    recovery: Mutex<HashMap<String, RecoveryTracker>>,
    /// Corrupt checkpoints already reported (`agent/id`).
    reported: Mutex<HashSet<String>>,
    /// Last checkpoint id handed out, for monotonic ULIDs.
    last_id: Mutex<u128>,
    /// Poked when a turn finished, a new agent heartbeated or an operator
    /// decided, so the monitor evaluates now and plans its next wake.
    wake: tokio::sync::Notify,
    /// When the monitor evaluates next ([`HealthRt::plan_wake`]).
    planned: Mutex<Option<Instant>>,
    /// Reused by `tick`.
    scratch: Mutex<Vec<(Arc<str>, HealthOutput)>>,
}

#[derive(Default)]
struct TaskBook {
    /// agent → its terminated tasks.
    terminated: HashMap<String, Vec<String>>,
    /// agent → tasks recovered at least once (replay is on for them).
    recovered: HashMap<String, Vec<String>>,
    /// agent → tasks whose recovery started and has not yet seen a success.
    recovering: HashMap<String, Vec<String>>,
    /// agent → the task of its most recent turn or heartbeat.
    current: HashMap<String, String>,
    /// agent → tasks that may be recovered: a supervisor looked them up or
    /// they stored a checkpoint. With `recovered`, the turns whose response
    /// body the journal keeps under `journal.bodies: needed`.
    may_recover: HashMap<String, Vec<String>>,
}

fn has(map: &HashMap<String, Vec<String>>, agent: &str, task: &str) -> bool {
    map.get(agent).is_some_and(|v| v.iter().any(|t| t == task))
}

fn add(map: &mut HashMap<String, Vec<String>>, agent: &str, task: &str) {
    let v = map.entry(agent.to_owned()).or_default();
    if !v.iter().any(|t| t == task) {
        v.push(task.to_owned());
    }
}

fn remove(map: &mut HashMap<String, Vec<String>>, agent: &str, task: &str) -> bool {
    match map.get_mut(agent) {
        Some(v) => {
            let before = v.len();
            v.retain(|t| t != task);
            v.len() != before
        }
        None => false,
    }
}

impl HealthRt {
    /// The runtime, with the terminated tasks recorded in the agents' state
    /// (`state.health.terminated_tasks`) still blocked.
    pub fn new<'a>(
        cfg: Arc<Config>,
        emit: Emitter,
        agents: impl IntoIterator<Item = &'a AgentRecord>,
    ) -> Self {
        let mut book = TaskBook::default();
        for a in agents {
            if let Some(list) = a.state["health"]["terminated_tasks"].as_array() {
                for t in list.iter().filter_map(Value::as_str) {
                    add(&mut book.terminated, &a.id, t);
                }
            }
        }
        Self {
            cfg,
            emit,
            registry: Mutex::new(HealthRegistry::new()),
            tasks: Mutex::new(book),
            recovery: Mutex::new(HashMap::new()),
            reported: Mutex::new(HashSet::new()),
            last_id: Mutex::new(0),
            wake: tokio::sync::Notify::new(),
            planned: Mutex::new(None),
            scratch: Mutex::new(Vec::new()),
        }
    }

    fn reg(&self) -> std::sync::MutexGuard<'_, HealthRegistry> {
        self.registry.lock().expect("health registry lock")
    }

    /// Notes that `task` of `agent` may be recovered later (its turns keep
    /// their response bodies for replay, `journal.bodies: needed`).
    pub fn mark_may_recover(&self, agent: &str, task: &str) {
        let mut book = self.book();
        if !has(&book.may_recover, agent, task) {
            add(&mut book.may_recover, agent, task);
        }
    }

    /// Whether `task` of `agent` may be recovered: marked by
    /// [`HealthRt::mark_may_recover`] or recovered already.
    pub fn may_recover(&self, agent: &str, task: &str) -> bool {
        let book = self.book();
        has(&book.may_recover, agent, task) || has(&book.recovered, agent, task)
    }

    fn book(&self) -> std::sync::MutexGuard<'_, TaskBook> {
        self.tasks.lock().expect("health tasks lock")
    }

    /// Records one heartbeat (O(1); see the module doc).
    pub fn heartbeat(&self, agent: &str, hb: &Heartbeat<'_>, now: Instant) {
        let new = {
            let mut r = self.reg();
            let new = r.state(agent).is_none();
            r.heartbeat(agent, hb, now);
            new
        };
        if new {
            // Its first deadline may come before the monitor's next wake.
            self.wake.notify_one();
        }
        if let Some(task) = hb.task {
            let mut book = self.book();
            match book.current.get_mut(agent) {
                Some(t) if t == task => {}
                Some(t) => task.clone_into(t),
                None => {
                    book.current.insert(agent.to_owned(), task.to_owned());
                }
            }
        }
    }

    /// Whether one of the agent's breakers is open (a `failing` signal).
    pub fn set_breaker_open(&self, agent: &str, open: bool) {
        self.reg().set_breaker_open(agent, open);
    }

    /// Whether the agent's conversation no longer fits any target (a `stuck` signal).
    pub fn set_context_exhausted(&self, agent: &str, exhausted: bool) {
        self.reg().set_context_exhausted(agent, exhausted);
    }

    /// Whether `agent` has sent a heartbeat or a turn.
    pub fn knows(&self, agent: &str) -> bool {
        self.reg().state(agent).is_some()
    }

    /// Drops `agent` from the health runtime when nothing is under way for
    /// it (`HealthRegistry::forget_if_quiet`) and no recovery concerns it
    /// (a tracker, a task recovering, recovered or that may be recovered:
    /// those live only here). Its terminated tasks are in its row and come
    /// back with it (`Gateway::load_agent`). Returns whether it is gone.
    pub fn forget(&self, agent: &str, now: Instant) -> bool {
        {
            let book = self.book();
            let busy =
                |m: &HashMap<String, Vec<String>>| m.get(agent).is_some_and(|v| !v.is_empty());
            if busy(&book.recovering) || busy(&book.recovered) || busy(&book.may_recover) {
                return false;
            }
        }
        if self
            .recovery
            .lock()
            .expect("recovery lock")
            .contains_key(agent)
        {
            return false;
        }
        if !self.reg().forget_if_quiet(agent, now) {
            return false;
        }
        let mut guard = self.book();
        let book = &mut *guard;
        book.current.remove(agent);
        book.terminated.remove(agent);
        for m in [
            &mut book.recovering,
            &mut book.recovered,
            &mut book.may_recover,
        ] {
            m.remove(agent);
        }
        true
    }

    /// Watches `agent`, read back from the store after a silence, as last
    /// heard from at `at`; a known agent is left as it is. Returns whether
    /// it was new here.
    pub fn watch_silent(&self, agent: &str, at: Instant) -> bool {
        self.reg().register_silent(agent, at)
    }

    /// Asks the monitor to evaluate soon.
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    /// Plans the monitor's next evaluation after one at `now`: the earliest
    /// deadline any agent has, at the latest `every` on
    /// (`hale_core::health::next_wake`). Returns it and remembers it
    /// ([`HealthRt::planned_wake`]).
    pub fn plan_wake(&self, now: Instant, every: std::time::Duration) -> Instant {
        let earliest = self.reg().next_deadline();
        let at = hale_core::health::next_wake(now, earliest, every);
        *self.planned.lock().expect("planned wake lock") = Some(at);
        at
    }

    /// When the monitor evaluates next, as it last planned; `None` before it ran.
    pub fn planned_wake(&self) -> Option<Instant> {
        *self.planned.lock().expect("planned wake lock")
    }

    /// Agents in the registry and its slots (freed ones included).
    pub fn registry_size(&self) -> (usize, usize) {
        let r = self.reg();
        (r.len(), r.slots())
    }

    /// The terminated tasks of `agent`.
    pub fn terminated_tasks(&self, agent: &str) -> Vec<String> {
        self.book()
            .terminated
            .get(agent)
            .cloned()
            .unwrap_or_default()
    }

    /// Whether `task` of `agent` was terminated (its requests get 410).
    pub fn is_terminated(&self, agent: &str, task: &str) -> bool {
        has(&self.book().terminated, agent, task)
    }

    /// The agent's current task, if it named one.
    pub fn current_task(&self, agent: &str) -> Option<String> {
        self.book().current.get(agent).cloned()
    }

    /// The agent's health for `GET /agents/{id}`.
    pub fn view(&self, agent: &str, now: Instant) -> Value {
        let (snap, phase) = {
            let r = self.reg();
            (r.snapshot(agent, now), r.phase(agent))
        };
        let book = self.book();
        let list = |m: &HashMap<String, Vec<String>>| m.get(agent).cloned().unwrap_or_default();
        json!({
            "snapshot": snap,
            "state": snap.as_ref().map(|s| s.state.as_str()),
            "intervention": phase,
            "current_task": book.current.get(agent),
            "terminated_tasks": list(&book.terminated),
            "recovered_tasks": list(&book.recovered),
        })
    }

    /// A new checkpoint id: a ULID at `now_ms`, above every one handed out before.
    pub fn next_checkpoint_id(&self, now_ms: u64) -> String {
        let fresh = ulid::Ulid::from_parts(now_ms, rand::random::<u128>() & ((1u128 << 80) - 1)).0;
        let mut last = self.last_id.lock().expect("checkpoint id lock");
        *last = fresh.max(last.saturating_add(1));
        ulid::Ulid(*last).to_string()
    }
}

// ---------------------------------------------------------------- pipeline hooks

/// The task named by a request, or `None` for the gateway's default task.
fn task_label(task: Option<&str>) -> &str {
    task.unwrap_or(crate::guard::DEFAULT_TASK)
}

impl HealthRt {
    /// Agent gate: a terminated task gets 410 `task_terminated`.
    pub fn before_turn(&self, agent: &str, task: &str) -> Result<(), HaleError> {
        if self.is_terminated(agent, task) {
            let mut e = HaleError::new(
                StatusCode::GONE,
                "task_terminated",
                format!(
                    "task {task} of agent {agent} was terminated; it can be restarted by recovery (`hale run`) or an operator"
                ),
            );
            e.hale = json!({"agent": agent, "task": task});
            return Err(e);
        }
        Ok(())
    }

    /// The pending nudge for `agent`, taken for injection into this request
    /// (appended by the pipeline as a trailing system message after compaction),
    /// and counted as delivered with `health.nudge_sent`.
    pub fn take_nudge(&self, agent: &str, task: &str) -> Option<String> {
        let (nudge, attempt) = {
            let mut r = self.reg();
            let nudge = r.take_pending_nudge(agent)?;
            let attempt = match r.phase(agent) {
                Some(InterventionPhase::Nudging { n }) => n,
                Some(
                    InterventionPhase::Watching
                    | InterventionPhase::Escalated { .. }
                    | InterventionPhase::HandedOff
                    | InterventionPhase::Terminated,
                )
                | None => 0,
            };
            (nudge, attempt)
        };
        let max_attempts = self.cfg.health.nudge_max_attempts;
        self.emit.emit(
            self.emit
                .event(EventKind::HealthNudgeSent)
                .agent(agent)
                .task(task)
                .payload(
                    json!({"attempt": attempt, "max_attempts": max_attempts, "message": nudge}),
                ),
        );
        Some(nudge)
    }

    /// A finished turn is a heartbeat (phase unknown).
    pub fn after_turn(
        &self,
        agent: &str,
        task: Option<&str>,
        fingerprint: u64,
        failed: bool,
        tokens: u64,
    ) {
        let task = task_label(task);
        let hb = Heartbeat {
            task: Some(task),
            fingerprint: Some(fingerprint),
            failed: Some(failed),
            tokens: (tokens > 0).then_some(tokens),
            ..Heartbeat::default()
        };
        self.heartbeat(agent, &hb, Instant::now());
        if !failed {
            self.recovery_completed(agent, task, false);
        }
        self.wake.notify_one();
    }

    /// The first success of a recovering task completes its recovery.
    fn recovery_completed(&self, agent: &str, task: &str, replayed: bool) {
        let done = {
            let mut book = self.book();
            has(&book.recovering, agent, task) && remove(&mut book.recovering, agent, task)
        };
        if done {
            self.emit.emit(
                self.emit
                    .event(EventKind::RecoveryCompleted)
                    .agent(agent)
                    .task(task)
                    .payload(
                        json!({"first_success": if replayed { "replayed" } else { "provider" }}),
                    ),
            );
        }
    }

    /// Replay instead of re-billing: for a recovered task, a request (same
    /// agent, task and body hash) that already completed is answered from the
    /// journal with `x-hale-replayed: true`, without a provider call.
    pub async fn replay(
        &self,
        agent: &str,
        task: &str,
        request_hash: &str,
    ) -> Option<StoredResponse> {
        if !has(&self.book().recovered, agent, task) {
            return None;
        }
        let turn = self
            .emit
            .store
            .completed_turn(agent, task, request_hash)
            .await
            .ok()??;
        let stored = turn.response?;
        self.heartbeat(
            agent,
            &Heartbeat {
                task: Some(task),
                failed: Some(false),
                ..Heartbeat::default()
            },
            Instant::now(),
        );
        self.recovery_completed(agent, task, true);
        Some(stored)
    }

    /// Blocks `task`, records the final state in the agent's record, emits
    /// `agent.terminated`. The registry's state is already terminated.
    pub(crate) fn block_task(
        &self,
        agents: &Agents,
        agent: &str,
        task: &str,
        reason: &str,
        now: Instant,
    ) {
        let terminated: Vec<String> = {
            let mut book = self.book();
            add(&mut book.terminated, agent, task);
            remove(&mut book.recovering, agent, task);
            book.terminated.get(agent).cloned().unwrap_or_default()
        };
        let snapshot = self.reg().snapshot(agent, now);
        let final_state =
            json!({"task": task, "reason": reason, "at_ms": wall_ms(), "health": snapshot});
        let rec = agents.update(agent, |a| {
            set_health_state(&mut a.state, &terminated, Some(&final_state));
        });
        self.emit.metrics.event(EventKind::AgentTerminated);
        let ev = self
            .emit
            .event(EventKind::AgentTerminated)
            .agent(agent)
            .task(task)
            .payload(json!({"reason": reason, "final_state": final_state}));
        self.emit.store.submit(vec![
            Write::Agent(rec),
            Write::Event(ev),
            crate::agents::announce(agent, None),
        ]);
    }

    /// Takes `agent`'s terminated tasks as another instance recorded them (its
    /// row's `state.health.terminated_tasks`): this instance blocks exactly
    /// those. Local only: nothing is written back.
    pub fn adopt_terminated(&self, agent: &str, state: &Value) {
        let list: Vec<String> = state["health"]["terminated_tasks"]
            .as_array()
            .map(|l| {
                l.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default();
        let mut book = self.book();
        if list.is_empty() {
            book.terminated.remove(agent);
        } else {
            for t in &list {
                remove(&mut book.recovering, agent, t);
            }
            book.terminated.insert(agent.to_owned(), list);
        }
    }

    /// Terminates `agent`'s `task` now (operator).
    pub fn terminate(&self, agents: &Agents, agent: &str, task: &str, reason: &str) {
        let now = Instant::now();
        let change = {
            let mut r = self.reg();
            r.register(agent, now);
            r.terminate(agent, reason, now)
        };
        if let Some(c) = change {
            self.emit.emit(
                self.emit
                    .event(EventKind::HealthStateChanged)
                    .agent(agent)
                    .task(task)
                    .payload(json!({
                        "from": c.from, "to": c.to, "signal": c.signal, "reason": c.reason,
                    })),
            );
        }
        self.block_task(agents, agent, task, reason, now);
    }

    /// Lifts the block of `task` and resets the agent's health (recovery,
    /// resume, a task reset). Returns whether the task was terminated.
    pub fn unblock(&self, agents: &Agents, agent: &str, task: &str) -> bool {
        let terminated = {
            let mut book = self.book();
            if !remove(&mut book.terminated, agent, task) {
                None
            } else {
                Some(book.terminated.get(agent).cloned().unwrap_or_default())
            }
        };
        self.reg().reset(agent, Instant::now());
        let was = terminated.is_some();
        if let Some(list) = terminated {
            let rec = agents.update(agent, |a| set_health_state(&mut a.state, &list, None));
            self.emit.store.submit(vec![Write::Agent(rec)]);
        }
        was
    }

    /// An operator resumed `agent`: health back to watching, its terminated
    /// tasks unblocked.
    pub fn on_resume(&self, agents: &Agents, agent: &str) {
        let tasks = self
            .book()
            .terminated
            .get(agent)
            .cloned()
            .unwrap_or_default();
        for t in &tasks {
            let _ = self.unblock(agents, agent, t);
        }
        self.reg().reset(agent, Instant::now());
    }

    /// An operator's decision on an escalation (`hale_core::health`).
    pub fn decide(
        &self,
        agent: &str,
        d: Decision,
        now: Instant,
    ) -> Result<Option<StateChange>, hale_core::health::DecideError> {
        let r = self.reg().decide(agent, d, now);
        // A decision moves the agent's deadlines (more time, hand-off).
        self.wake.notify_one();
        r
    }

    /// A task as `GET /agents/{id}/tasks/{task}` shows it. A supervisor
    /// (`hale run`) looks its task up before it starts the agent: from now
    /// on the task's answers are kept for replay.
    pub fn task_view(&self, agent: &str, task: &str) -> Value {
        self.mark_may_recover(agent, task);
        let recoveries = self
            .recovery
            .lock()
            .expect("recovery lock")
            .get(agent)
            .map_or(0, |r| r.count(task));
        let book = self.book();
        json!({
            "agent": agent,
            "task": task,
            "terminated": has(&book.terminated, agent, task),
            "recovered": has(&book.recovered, agent, task),
            "recoveries": recoveries,
        })
    }

    /// The agent's health state, for callers that only need the label.
    pub fn state_of(&self, agent: &str) -> Option<HealthState> {
        self.reg().state(agent)
    }
}

/// A request's fingerprint for the repeated-call rule: the last message's
/// text and tool calls, and the tools offered. Trailing system messages are
/// skipped: they are hale's nudges (or instructions), not the agent's move.
pub fn fingerprint(req: &ChatRequest) -> u64 {
    let mut h = hale_proto::fingerprint_hasher();
    if let Some(m) = req.messages.iter().rev().find(|m| m.role != Role::System) {
        for p in &m.content {
            match p {
                Part::Text { text } => text.hash(&mut h),
                Part::ToolCall {
                    name, arguments, ..
                } => (name, arguments).hash(&mut h),
                Part::ToolResult { content, .. } => content.hash(&mut h),
                Part::Opaque { value, .. } => value.to_string().hash(&mut h),
            }
        }
    }
    for t in &req.tools {
        t.name.hash(&mut h);
    }
    h.finish()
}

fn set_health_state(state: &mut Value, terminated: &[String], final_state: Option<&Value>) {
    if !state.is_object() {
        *state = json!({});
    }
    let h = &mut state["health"];
    if !h.is_object() {
        *h = json!({});
    }
    h["terminated_tasks"] = json!(terminated);
    if let Some(f) = final_state {
        h["final_state"] = f.clone();
    }
}
