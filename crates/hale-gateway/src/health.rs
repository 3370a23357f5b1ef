//! The gateway's health runtime (DESIGN §5): heartbeats, the monitor, the
//! interventions it acts on, checkpoints, recovery plans and replay.
//!
//! The rules are in `hale_core::health` (state machine, intervention planner,
//! registry) and `hale_core::recovery` (limits, backoff, checkpoint chain).
//! This module feeds them and carries out what they decide:
//!
//! - **Heartbeats.** Every turn is one ([`after_turn`]); agents may also
//!   `POST /agents/{id}/heartbeat`. A heartbeat locks the registry for one
//!   O(1) update; the body is parsed with borrowed strings, so a heartbeat of
//!   a known agent allocates nothing beyond the request itself. Heartbeats are
//!   not events; the state changes they cause are.
//! - **The monitor** ([`monitor`]) evaluates on a schedule
//!   (`health.evaluate_every`) and whenever a turn finished (a `Notify`), and
//!   [`tick`] turns what the registry reports into events and actions:
//!   `health.state_changed`; a nudge waits in the registry and is injected
//!   into the agent's next request ([`take_nudge`], event `health.nudge_sent`
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
//! - **Replay instead of re-billing** ([`replay`]) is on only for tasks that
//!   were recovered at least once (DESIGN §5: "when a *recovered* agent
//!   re-issues a request"). An agent that is not recovering and asks the same
//!   question twice (polling, sampling) gets a fresh answer; a recovered one
//!   gets the journalled answer with `x-hale-replayed: true` and no provider
//!   call. The set of recovered tasks lives in memory (a gateway restart ends
//!   replay for them, which only costs a re-bill, never a wrong answer).
//!
//! Health is per agent (the registry's unit); termination and recovery are
//! per (agent, task), the task being the one named by the request, the
//! heartbeat, or the agent's most recent one.

use crate::error::HaleError;
use crate::pipeline::Caller;
use crate::proto::{ChatRequest, Dialect, Part, Role};
use crate::state::{Gateway, wall_ms};
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{ConnectInfo, Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use hale_core::event::{Event, EventKind};
use hale_core::health::{
    Decision, HealthOutput, HealthRegistry, HealthState, Heartbeat, Intervention, InterventionPhase,
};
use hale_core::recovery::{CheckpointView, RecoveryPlan, RecoveryTracker};
use hale_store::{AgentRecord, CheckpointRecord, Write};
use serde::Deserialize;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// Header set on an answer served from the turn journal.
pub const REPLAYED_HEADER: &str = "x-hale-replayed";

/// The health runtime held by [`Gateway`].
pub struct HealthRt {
    registry: Mutex<HealthRegistry>,
    /// Per (agent, task) bookkeeping: terminated tasks, recoveries, current task.
    tasks: Mutex<TaskBook>,
    recovery: Mutex<HashMap<String, RecoveryTracker>>,
    /// Corrupt checkpoints already reported (`agent/id`).
    reported: Mutex<HashSet<String>>,
    /// Last checkpoint id handed out, for monotonic ULIDs.
    last_id: Mutex<u128>,
    /// Poked when a turn finished, so the monitor evaluates soon.
    wake: tokio::sync::Notify,
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
    pub fn new<'a>(agents: impl IntoIterator<Item = &'a AgentRecord>) -> Self {
        let mut book = TaskBook::default();
        for a in agents {
            if let Some(list) = a.state["health"]["terminated_tasks"].as_array() {
                for t in list.iter().filter_map(Value::as_str) {
                    add(&mut book.terminated, &a.id, t);
                }
            }
        }
        Self {
            registry: Mutex::new(HealthRegistry::new()),
            tasks: Mutex::new(book),
            recovery: Mutex::new(HashMap::new()),
            reported: Mutex::new(HashSet::new()),
            last_id: Mutex::new(0),
            wake: tokio::sync::Notify::new(),
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
        self.reg().heartbeat(agent, hb, now);
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

    fn next_checkpoint_id(&self, now_ms: u64) -> String {
        let fresh = ulid::Ulid::from_parts(now_ms, rand::random::<u128>() & ((1u128 << 80) - 1)).0;
        let mut last = self.last_id.lock().expect("checkpoint id lock");
        *last = fresh.max(last.saturating_add(1));
        ulid::Ulid(*last).to_string()
    }
}

// ---------------------------------------------------------------- pipeline hooks

/// The task named by a request, or `None` for the gateway's default task.
fn task_label(task: Option<&str>) -> &str {
    task.unwrap_or(crate::guardrails::DEFAULT_TASK)
}

/// Agent gate (DESIGN §1 step 2): a terminated task gets 410 `task_terminated`.
pub fn before_turn(gw: &Gateway, agent: &str, task: &str) -> Result<(), HaleError> {
    if gw.health.is_terminated(agent, task) {
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
pub fn take_nudge(gw: &Gateway, agent: &str, task: &str) -> Option<String> {
    let (nudge, attempt) = {
        let mut r = gw.health.reg();
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
    gw.emit(
        gw.event(EventKind::HealthNudgeSent)
            .agent(agent)
            .task(task)
            .payload(json!({"attempt": attempt, "max_attempts": gw.cfg.health.nudge_max_attempts, "message": nudge})),
    );
    Some(nudge)
}

/// A request's fingerprint for the repeated-call rule: the last message's
/// text and tool calls, and the tools offered. Trailing system messages are
/// skipped: they are hale's nudges (or instructions), not the agent's move.
pub fn fingerprint(req: &ChatRequest) -> u64 {
    let mut h = std::hash::DefaultHasher::new();
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

/// A finished turn is a heartbeat (phase unknown).
pub fn after_turn(
    gw: &Gateway,
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
    gw.health.heartbeat(agent, &hb, Instant::now());
    if !failed {
        recovery_completed(gw, agent, task, false);
    }
    gw.health.wake.notify_one();
}

/// The first success of a recovering task completes its recovery.
fn recovery_completed(gw: &Gateway, agent: &str, task: &str, replayed: bool) {
    let done = {
        let mut book = gw.health.book();
        has(&book.recovering, agent, task) && remove(&mut book.recovering, agent, task)
    };
    if done {
        gw.emit(
            gw.event(EventKind::RecoveryCompleted)
                .agent(agent)
                .task(task)
                .payload(json!({"first_success": if replayed { "replayed" } else { "provider" }})),
        );
    }
}

/// Replay instead of re-billing: for a recovered task, a request (same
/// agent, task and body hash) that already completed is answered from the
/// journal with `x-hale-replayed: true`, without a provider call.
pub async fn replay(gw: &Gateway, agent: &str, task: &str, request_hash: &str) -> Option<Response> {
    if !has(&gw.health.book().recovered, agent, task) {
        return None;
    }
    let turn = gw
        .store
        .completed_turn(agent, task, request_hash)
        .await
        .ok()??;
    let stored = turn.response?;
    gw.health.heartbeat(
        agent,
        &Heartbeat {
            task: Some(task),
            failed: Some(false),
            ..Heartbeat::default()
        },
        Instant::now(),
    );
    recovery_completed(gw, agent, task, true);
    Some(crate::pipeline::stored_response(stored, REPLAYED_HEADER))
}

// ---------------------------------------------------------------- monitor

/// Evaluates every agent on a schedule and when turns finish, until `cancel`.
pub async fn monitor(gw: Arc<Gateway>, cancel: CancellationToken) {
    let every = gw.cfg.health.evaluate_every;
    let mut checked_at = Instant::now();
    let mut silence = crate::memory::silence_cursor(&gw, wall_ms());
    crate::memory::watch_silent(&gw, &mut silence, wall_ms(), Instant::now()).await;
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(every) => {}
            _ = gw.health.wake.notified() => {}
        }
        let now = Instant::now();
        tick(&gw, now);
        // Agents silent while out of memory are read back to be judged.
        if now.saturating_duration_since(checked_at) >= hale_core::memory::SILENCE_CHECK_EVERY {
            checked_at = now;
            crate::memory::watch_silent(&gw, &mut silence, wall_ms(), now).await;
        }
    }
}

/// One evaluation at `now`: emits state changes, escalations and
/// terminations (nudges wait for the agent's next request). Tests call it
/// with a fake `now`.
pub fn tick(gw: &Gateway, now: Instant) {
    let mut out = std::mem::take(&mut *gw.health.scratch.lock().expect("scratch lock"));
    out.clear();
    gw.health.reg().evaluate_all(&gw.cfg.health, now, &mut out);
    for (agent, o) in out.drain(..) {
        let task = gw.health.current_task(&agent);
        match o {
            HealthOutput::StateChanged(c) => {
                let mut ev = gw
                    .event(EventKind::HealthStateChanged)
                    .agent(&*agent)
                    .payload(json!({
                        "from": c.from, "to": c.to, "signal": c.signal, "reason": c.reason,
                    }));
                if let Some(t) = &task {
                    ev = ev.task(t.clone());
                }
                gw.emit(ev);
            }
            HealthOutput::Intervention(Intervention::Nudge { .. }) => {
                // Pending in the registry; delivered (and reported) by `take_nudge`.
            }
            HealthOutput::Intervention(Intervention::Escalate { reason }) => {
                let mut ev = gw
                    .event(EventKind::HealthEscalated)
                    .agent(&*agent)
                    .payload(json!({
                        "reason": reason,
                        "decide": format!("POST /agents/{agent}/decide"),
                        "options": ["more_time", "hand_off", "terminate"],
                        "timeout_ms": gw.cfg.health.escalation_timeout.as_millis() as u64,
                    }));
                if let Some(t) = &task {
                    ev = ev.task(t.clone());
                }
                gw.emit(ev);
            }
            HealthOutput::Intervention(Intervention::Terminate { reason }) => {
                let task = task.unwrap_or_else(|| crate::guardrails::DEFAULT_TASK.to_owned());
                block_task(gw, &agent, &task, &reason, now);
            }
        }
    }
    *gw.health.scratch.lock().expect("scratch lock") = out;
}

/// Blocks `task`, records the final state in the agent's record, emits
/// `agent.terminated`. The registry's state is already terminated.
fn block_task(gw: &Gateway, agent: &str, task: &str, reason: &str, now: Instant) {
    let terminated: Vec<String> = {
        let mut book = gw.health.book();
        add(&mut book.terminated, agent, task);
        remove(&mut book.recovering, agent, task);
        book.terminated.get(agent).cloned().unwrap_or_default()
    };
    let snapshot = gw.health.reg().snapshot(agent, now);
    let final_state =
        json!({"task": task, "reason": reason, "at_ms": wall_ms(), "health": snapshot});
    let rec = gw.update_agent(agent, |a| {
        set_health_state(&mut a.state, &terminated, Some(&final_state));
    });
    gw.metrics.event(EventKind::AgentTerminated);
    let ev = gw
        .event(EventKind::AgentTerminated)
        .agent(agent)
        .task(task)
        .payload(json!({"reason": reason, "final_state": final_state}));
    gw.store.submit(vec![
        Write::Agent(rec),
        Write::Event(ev),
        crate::sync::announce(agent, None),
    ]);
}

/// Takes `agent`'s terminated tasks as another instance recorded them (its
/// row's `state.health.terminated_tasks`): this instance blocks exactly
/// those. Local only: nothing is written back.
pub fn adopt_terminated(gw: &Gateway, agent: &str, state: &Value) {
    let list: Vec<String> = state["health"]["terminated_tasks"]
        .as_array()
        .map(|l| {
            l.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    let mut book = gw.health.book();
    if list.is_empty() {
        book.terminated.remove(agent);
    } else {
        for t in &list {
            remove(&mut book.recovering, agent, t);
        }
        book.terminated.insert(agent.to_owned(), list);
    }
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

/// Terminates `agent`'s `task` now (operator).
pub fn terminate(gw: &Gateway, agent: &str, task: &str, reason: &str) {
    let now = Instant::now();
    let change = {
        let mut r = gw.health.reg();
        r.register(agent, now);
        r.terminate(agent, reason, now)
    };
    if let Some(c) = change {
        gw.emit(
            gw.event(EventKind::HealthStateChanged)
                .agent(agent)
                .task(task)
                .payload(json!({
                    "from": c.from, "to": c.to, "signal": c.signal, "reason": c.reason,
                })),
        );
    }
    block_task(gw, agent, task, reason, now);
}

/// Lifts the block of `task` and resets the agent's health (recovery,
/// resume, a task reset). Returns whether the task was terminated.
pub fn unblock(gw: &Gateway, agent: &str, task: &str) -> bool {
    let terminated = {
        let mut book = gw.health.book();
        if !remove(&mut book.terminated, agent, task) {
            None
        } else {
            Some(book.terminated.get(agent).cloned().unwrap_or_default())
        }
    };
    gw.health.reg().reset(agent, Instant::now());
    let was = terminated.is_some();
    if let Some(list) = terminated {
        let rec = gw.update_agent(agent, |a| set_health_state(&mut a.state, &list, None));
        gw.store.submit(vec![Write::Agent(rec)]);
    }
    was
}

/// An operator resumed `agent`: health back to watching, its terminated
/// tasks unblocked.
pub fn on_resume(gw: &Gateway, agent: &str) {
    let tasks = gw
        .health
        .book()
        .terminated
        .get(agent)
        .cloned()
        .unwrap_or_default();
    for t in &tasks {
        let _ = unblock(gw, agent, t);
    }
    gw.health.reg().reset(agent, Instant::now());
}

// ---------------------------------------------------------------- HTTP

/// Health, decision, termination, checkpoint and recovery routes.
pub fn router() -> Router<Arc<Gateway>> {
    Router::new()
        .route("/agents/{id}/heartbeat", post(heartbeat))
        .route("/agents/{id}/decide", post(decide))
        .route("/agents/{id}/terminate", post(terminate_route))
        .route("/agents/{id}/tasks/{task}", get(task_view))
        .route(
            "/agents/{id}/tasks/{task}/checkpoints",
            post(put_checkpoint).get(list_checkpoints),
        )
        .route(
            "/agents/{id}/tasks/{task}/checkpoints/{cp}",
            get(get_checkpoint),
        )
        .route("/agents/{id}/tasks/{task}/recover", post(recover))
        .route("/agents/{id}/checkpoints", get(list_agent_checkpoints))
}

/// `Some(response)` when the caller may not act as `agent`.
fn auth_agent(
    gw: &Gateway,
    peer: SocketAddr,
    headers: &HeaderMap,
    agent: &str,
) -> Option<Response> {
    let caller: Caller = match crate::http::authorize(gw, peer, headers, false) {
        Ok(c) => c,
        Err(e) => return Some(e.into_response(Dialect::OpenAi)),
    };
    if let Some(allowed) = &caller.agents
        && !allowed.iter().any(|a| a == agent)
    {
        return Some(
            HaleError::forbidden(format!("this key may not act as agent {agent}"))
                .into_response(Dialect::OpenAi),
        );
    }
    None
}

/// `Some(response)` when the caller is not an admin.
fn bad(msg: impl Into<String>) -> Response {
    HaleError::bad_request(msg).into_response(Dialect::OpenAi)
}

fn store_err(e: impl std::fmt::Display) -> Response {
    (
        StatusCode::INTERNAL_SERVER_ERROR,
        format!("store error: {e}"),
    )
        .into_response()
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct HeartbeatBody<'a> {
    #[serde(borrow, default)]
    task: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    phase: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    progress: Option<Cow<'a, str>>,
    #[serde(default)]
    tokens: Option<u64>,
    #[serde(default)]
    errors: Option<u64>,
}

async fn heartbeat(
    State(gw): State<Arc<Gateway>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Bytes,
) -> Response {
    if let Some(r) = auth_agent(&gw, peer, &headers, &id) {
        return r;
    }
    let hb: HeartbeatBody<'_> = if body.is_empty() {
        HeartbeatBody::default()
    } else {
        match serde_json::from_slice(&body) {
            Ok(b) => b,
            Err(e) => return bad(format!("invalid heartbeat: {e}")),
        }
    };
    gw.health.heartbeat(
        &id,
        &Heartbeat {
            task: hb.task.as_deref(),
            phase: hb.phase.as_deref(),
            progress: hb.progress.as_deref(),
            tokens: hb.tokens,
            errors: hb.errors,
            fingerprint: None,
            failed: None,
        },
        Instant::now(),
    );
    StatusCode::NO_CONTENT.into_response()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DecideBody {
    /// `more_time`, `hand_off` or `terminate`.
    decision: String,
    /// For `more_time`; default `health.stuck_after`.
    #[serde(default)]
    more_time_ms: Option<u64>,
    #[serde(default)]
    reason: Option<String>,
}

async fn decide(
    State(gw): State<Arc<Gateway>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Bytes,
) -> Response {
    if let Some(r) = crate::http::admin_refusal(&gw, peer, &headers) {
        return r;
    }
    let b: DecideBody = match serde_json::from_slice(&body) {
        Ok(b) => b,
        Err(e) => {
            return bad(format!(
                "invalid decision: {e}; expected {{\"decision\": \"more_time\"|\"hand_off\"|\"terminate\"}}"
            ));
        }
    };
    let d = match b.decision.as_str() {
        "more_time" => Decision::MoreTime(
            b.more_time_ms
                .map_or(gw.cfg.health.stuck_after, Duration::from_millis),
        ),
        "hand_off" => Decision::HandOff,
        "terminate" => Decision::Terminate,
        other => {
            return bad(format!(
                "unknown decision {other:?}: use more_time, hand_off or terminate"
            ));
        }
    };
    let now = Instant::now();
    let result = gw.health.reg().decide(&id, d, now);
    let change = match result {
        Ok(c) => c,
        Err(e) => {
            return HaleError::new(StatusCode::CONFLICT, "no_escalation", e.to_string())
                .into_response(Dialect::OpenAi);
        }
    };
    let task = gw
        .health
        .current_task(&id)
        .unwrap_or_else(|| crate::guardrails::DEFAULT_TASK.to_owned());
    let reason = b
        .reason
        .unwrap_or_else(|| format!("operator decided {}", b.decision));
    gw.emit(gw.event(EventKind::HealthDecision).agent(&id).task(&task).payload(json!({
        "decision": b.decision,
        "more_time_ms": match d { Decision::MoreTime(t) => Some(t.as_millis() as u64), Decision::HandOff | Decision::Terminate => None },
        "reason": reason,
    })));
    if let Some(c) = change {
        gw.emit(
            gw.event(EventKind::HealthStateChanged)
                .agent(&id)
                .task(&task)
                .payload(json!({
                    "from": c.from, "to": c.to, "signal": c.signal, "reason": c.reason,
                })),
        );
    }
    match d {
        Decision::Terminate => block_task(&gw, &id, &task, &reason, now),
        Decision::HandOff => {
            return crate::api::agents::operator_pause(
                &gw,
                &id,
                "handed off to a human by an operator decision",
            )
            .await;
        }
        Decision::MoreTime(_) => {}
    }
    let _ = gw.store.flush().await;
    axum::Json(json!({"agent": id, "decision": b.decision, "health": gw.health.view(&id, now)}))
        .into_response()
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct TerminateBody {
    #[serde(default)]
    task: Option<String>,
    #[serde(default)]
    reason: Option<String>,
}

async fn terminate_route(
    State(gw): State<Arc<Gateway>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Bytes,
) -> Response {
    gw.load_agent(&id).await;
    if let Some(r) = crate::api::agents::refusal(&gw, peer, &headers, &id) {
        return r;
    }
    let b: TerminateBody = if body.is_empty() {
        TerminateBody::default()
    } else {
        match serde_json::from_slice(&body) {
            Ok(b) => b,
            Err(e) => return bad(format!("invalid body: {e}")),
        }
    };
    let task = b
        .task
        .or_else(|| gw.health.current_task(&id))
        .unwrap_or_else(|| crate::guardrails::DEFAULT_TASK.to_owned());
    let reason = b
        .reason
        .unwrap_or_else(|| "terminated by an operator".to_owned());
    terminate(&gw, &id, &task, &reason);
    if let Err(e) = gw.store.flush().await {
        return store_err(e);
    }
    axum::Json(json!({"agent": id, "task": task, "terminated": true, "health": gw.health.view(&id, Instant::now())}))
        .into_response()
}

async fn task_view(
    State(gw): State<Arc<Gateway>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Path((id, task)): Path<(String, String)>,
) -> Response {
    if let Some(r) = auth_agent(&gw, peer, &headers, &id) {
        return r;
    }
    // A supervisor (`hale run`) looks its task up before it starts the
    // agent: from now on the task's answers are kept for replay.
    gw.health.mark_may_recover(&id, &task);
    let recoveries = gw
        .health
        .recovery
        .lock()
        .expect("recovery lock")
        .get(&id)
        .map_or(0, |r| r.count(&task));
    let book = gw.health.book();
    axum::Json(json!({
        "agent": id,
        "task": task,
        "terminated": has(&book.terminated, &id, &task),
        "recovered": has(&book.recovered, &id, &task),
        "recoveries": recoveries,
    }))
    .into_response()
}

/// Whether a stored checkpoint is valid: the hash matches and the body parses.
pub fn checkpoint_valid(c: &CheckpointRecord) -> bool {
    hex::encode(Sha256::digest(&c.body)).eq_ignore_ascii_case(&c.sha256)
        && serde_json::from_slice::<serde::de::IgnoredAny>(&c.body).is_ok()
}

/// Emits `checkpoint.corrupt` once per checkpoint per process (`force`: always).
fn report_corrupt(gw: &Gateway, c: &CheckpointRecord, force: bool) {
    let first = gw
        .health
        .reported
        .lock()
        .expect("reported lock")
        .insert(format!("{}/{}", c.agent, c.id));
    if first || force {
        let actual = hex::encode(Sha256::digest(&c.body));
        gw.emit(
            gw.event(EventKind::CheckpointCorrupt)
                .agent(&c.agent)
                .task(&c.task)
                .payload(json!({
                    "checkpoint": c.id,
                    "parent": c.parent,
                    "stored_sha256": c.sha256,
                    "actual_sha256": actual,
                    "hash_matches": actual.eq_ignore_ascii_case(&c.sha256),
                    "parses": serde_json::from_slice::<serde::de::IgnoredAny>(&c.body).is_ok(),
                })),
        );
    }
}

fn meta(c: &CheckpointRecord, valid: bool) -> Value {
    json!({
        "id": c.id, "agent": c.agent, "task": c.task, "parent": c.parent,
        "sha256": c.sha256, "created_ms": c.created_ms, "size": c.body.len(), "valid": valid,
    })
}

#[derive(Deserialize, Default)]
struct CheckpointQuery {
    parent: Option<String>,
}

async fn put_checkpoint(
    State(gw): State<Arc<Gateway>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Path((id, task)): Path<(String, String)>,
    axum::extract::Query(q): axum::extract::Query<CheckpointQuery>,
    body: Bytes,
) -> Response {
    if let Some(r) = auth_agent(&gw, peer, &headers, &id) {
        return r;
    }
    if let Err(e) = serde_json::from_slice::<serde::de::IgnoredAny>(&body) {
        return bad(format!("a checkpoint body must be JSON: {e}"));
    }
    let parent = match q.parent.filter(|p| !p.is_empty()) {
        Some(p) => match gw.store.checkpoint(&id, &p).await {
            Ok(Some(_)) => Some(p),
            Ok(None) => {
                return HaleError::not_found(format!("parent checkpoint {p} not found"))
                    .into_response(Dialect::OpenAi);
            }
            Err(e) => return store_err(e),
        },
        // Default parent: the task's newest checkpoint, so the chain is kept.
        None => match gw.store.checkpoints(&id, Some(&task)).await {
            Ok(list) => list.first().map(|c| c.id.clone()),
            Err(e) => return store_err(e),
        },
    };
    let now_ms = wall_ms();
    let rec = CheckpointRecord {
        id: gw.health.next_checkpoint_id(now_ms),
        agent: id.clone(),
        task: task.clone(),
        parent,
        sha256: hex::encode(Sha256::digest(&body)),
        body: body.to_vec(),
        created_ms: now_ms,
    };
    if let Err(e) = gw.store.commit(vec![Write::Checkpoint(rec.clone())]).await {
        return store_err(e);
    }
    gw.health.mark_may_recover(&id, &task);
    gw.health.heartbeat(
        &id,
        &Heartbeat {
            task: Some(&task),
            ..Heartbeat::default()
        },
        Instant::now(),
    );
    (StatusCode::CREATED, axum::Json(meta(&rec, true))).into_response()
}

async fn list_checkpoints(
    State(gw): State<Arc<Gateway>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Path((id, task)): Path<(String, String)>,
) -> Response {
    if let Some(r) = auth_agent(&gw, peer, &headers, &id) {
        return r;
    }
    list(&gw, &id, Some(&task)).await
}

async fn list_agent_checkpoints(
    State(gw): State<Arc<Gateway>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    if let Some(r) = auth_agent(&gw, peer, &headers, &id) {
        return r;
    }
    list(&gw, &id, None).await
}

async fn list(gw: &Gateway, agent: &str, task: Option<&str>) -> Response {
    match gw.store.checkpoints(agent, task).await {
        Ok(cps) => {
            let items: Vec<Value> = cps
                .iter()
                .map(|c| {
                    let valid = checkpoint_valid(c);
                    if !valid {
                        report_corrupt(gw, c, false);
                    }
                    meta(c, valid)
                })
                .collect();
            axum::Json(json!({"agent": agent, "task": task, "checkpoints": items})).into_response()
        }
        Err(e) => store_err(e),
    }
}

async fn get_checkpoint(
    State(gw): State<Arc<Gateway>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Path((id, task, cp)): Path<(String, String, String)>,
) -> Response {
    if let Some(r) = auth_agent(&gw, peer, &headers, &id) {
        return r;
    }
    // `latest`: the newest valid checkpoint of the task.
    let found = if cp == "latest" {
        match gw.store.checkpoints(&id, Some(&task)).await {
            Ok(list) => {
                let mut hit = None;
                for c in list {
                    if checkpoint_valid(&c) {
                        hit = Some(c);
                        break;
                    }
                    report_corrupt(&gw, &c, false);
                }
                hit
            }
            Err(e) => return store_err(e),
        }
    } else {
        match gw.store.checkpoint(&id, &cp).await {
            Ok(c) => c.filter(|c| c.task == task),
            Err(e) => return store_err(e),
        }
    };
    let Some(c) = found else {
        return HaleError::not_found(format!("no checkpoint {cp} for task {task} of agent {id}"))
            .into_response(Dialect::OpenAi);
    };
    if !checkpoint_valid(&c) {
        report_corrupt(&gw, &c, false);
        return HaleError::new(
            StatusCode::CONFLICT,
            "checkpoint_corrupt",
            format!(
                "checkpoint {} is corrupt (hash mismatch or unparsable body) and is not served",
                c.id
            ),
        )
        .into_response(Dialect::OpenAi);
    }
    checkpoint_response(&c)
}

fn checkpoint_response(c: &CheckpointRecord) -> Response {
    let mut resp = Response::new(Body::from(c.body.clone()));
    let h = resp.headers_mut();
    h.insert("content-type", HeaderValue::from_static("application/json"));
    for (k, v) in [
        ("x-hale-checkpoint-id", Some(&c.id)),
        ("x-hale-checkpoint-sha256", Some(&c.sha256)),
        ("x-hale-checkpoint-parent", c.parent.as_ref()),
    ] {
        if let Some(v) = v.and_then(|v| HeaderValue::from_str(v).ok()) {
            h.insert(k, v);
        }
    }
    resp
}

/// Plans the recovery of `task` after a crash or termination and, when the
/// plan is a restart, starts it (see the module doc).
pub async fn plan_recovery(
    gw: &Gateway,
    agent: &str,
    task: &str,
    cause: &str,
) -> Result<Value, hale_store::StoreError> {
    let cps = gw.store.checkpoints(agent, Some(task)).await?;
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
        let mut all = gw.health.recovery.lock().expect("recovery lock");
        let tracker = all.entry(agent.to_owned()).or_default();
        let plan = tracker.plan(&gw.cfg.recovery, task, &views, now);
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
        gw.metrics.event(k);
        gw.event(k).agent(agent).task(task)
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
                    report_corrupt(gw, c, true);
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
                    report_corrupt(gw, c, true);
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
        let _ = unblock(gw, agent, task);
        let mut book = gw.health.book();
        add(&mut book.recovered, agent, task);
        add(&mut book.recovering, agent, task);
    }
    gw.store.commit(writes).await?;
    Ok(answer)
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RecoverBody {
    /// Why: `crash` (with an exit code), `terminated`, …
    #[serde(default)]
    cause: Option<String>,
}

async fn recover(
    State(gw): State<Arc<Gateway>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Path((id, task)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    if let Some(r) = crate::http::admin_refusal(&gw, peer, &headers) {
        return r;
    }
    let b: RecoverBody = if body.is_empty() {
        RecoverBody::default()
    } else {
        match serde_json::from_slice(&body) {
            Ok(b) => b,
            Err(e) => return bad(format!("invalid body: {e}")),
        }
    };
    match plan_recovery(&gw, &id, &task, b.cause.as_deref().unwrap_or("crash")).await {
        Ok(v) => axum::Json(v).into_response(),
        Err(e) => store_err(e),
    }
}

/// The agent's health state, for callers that only need the label.
pub fn state_of(gw: &Gateway, agent: &str) -> Option<HealthState> {
    gw.health.reg().state(agent)
}
