//! Per-task guard and spend (docs/configuration.md, `guard` and
//! `agents.<name>.budget`).
//!
//! The rules are hale-core's ([`hale_core::guard::TaskGuard`],
//! [`hale_core::budget::check`]); this module keeps their state per agent ×
//! task, feeds them the tool results found in requests and the tool calls
//! found in responses, and turns a hit into the final 409 / 402 with its
//! event. A task is named by `X-Hale-Task`, else by its conversation root
//! ([`hale_core::guard::task_of`]), so unrelated conversations never add up
//! into one runaway task. Tasks idle for
//! [`hale_core::guard::IDLE_TASK_TTL`] are forgotten, and idle ones beyond
//! `memory.idle_tasks` are shed ([`Tasks::shed`]) — within a second of
//! their last turn while memory is crowded with them
//! ([`hale_core::memory::tasks_crowded`], checked as tasks are added), so
//! a client whose every call is its own conversation does not hold a
//! minute of them.

use crate::emit::Emitter;
use crate::error::HaleError;
use axum::http::StatusCode;
use hale_core::budget::{self, BudgetHit, Spend};
use hale_core::config::{BudgetConfig, Config};
use hale_core::counts::Tally;
use hale_core::event::EventKind;
use hale_core::guard::{
    GuardHit, GuardSnapshot, IDLE_TASK_TTL, TaskGuard, ToolCallSeen, ToolResultSeen,
};
use hale_core::models;
use hale_proto::{ChatRequest, Part, Usage};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How often idle tasks are swept.
const SWEEP_EVERY: Duration = Duration::from_secs(60);

/// The task of heartbeats, decisions and supervised runs that name none.
pub const DEFAULT_TASK: &str = "default";

/// One task's guard and spend, counted once across instances: the spend is
/// a `hale_core::counts::Tally` (the database's confirmed total plus this
/// instance's turns in flight), the guard adopts the stored events and tool
/// calls ([`TaskGuard::adopt_totals`]); its streaks and per-tool caps stay
/// this instance's (they need one conversation's order).
pub struct TaskRt {
    pub guard: TaskGuard,
    pub spend: Tally<Spend>,
    /// The guard's events and tool calls this instance counted and has not
    /// written yet (they go with the task's next count; the totals come
    /// back and are adopted by the guard).
    unsent: (u64, u64),
    last_used: Instant,
    /// Its agent left memory since the task was last used: it may leave
    /// [`hale_core::memory::SHED_AFTER_IDLE_MIN`] after its last use. Kept
    /// across sweeps, so a task the idle bound kept when its agent left
    /// still goes at a later sweep; cleared by the task's next use.
    agent_left: bool,
    /// A turn of it started and has not ended ([`Tasks::turn_ended`]): a
    /// crowded sweep leaves it (a turn that never reports its end only
    /// keeps the task to the uncrowded rule).
    turn_open: bool,
}

impl TaskRt {
    /// Runs `f` on the guard and keeps what it counted for the store.
    fn guarded<R>(&mut self, f: impl FnOnce(&mut TaskGuard) -> R) -> R {
        let (e0, t0) = self.guard.totals();
        let r = f(&mut self.guard);
        let (e1, t1) = self.guard.totals();
        self.unsent.0 += e1.saturating_sub(e0);
        self.unsent.1 += t1.saturating_sub(t0);
        r
    }
}

/// Every task's state, keyed by agent, then task.
pub struct Tasks {
    cfg: Arc<Config>,
    emit: Emitter,
    /// agent → task → state: looked up by `&str`, so a turn's four
    /// lookups allocate no key (a `(String, String)` key was two
    /// allocations a lookup). Boxed: the table's empty slots (hashbrown
    /// grows at 7/8 full, so just after a growth more than half are empty)
    /// then cost a pointer each, not a whole task's state.
    map: Mutex<HashMap<String, HashMap<String, Box<TaskRt>>>>,
    /// How many tasks `map` holds (changed under its lock).
    held: AtomicUsize,
    /// When idle tasks were last swept.
    swept: Mutex<Option<Instant>>,
    /// When a crowded memory was last swept ([`Tasks::relieve`]).
    relieved: Mutex<Option<Instant>>,
}

/// What a task reset found.
#[derive(Debug, Clone, Copy, Default)]
pub struct Reset {
    /// The task had guard or spend state.
    pub existed: bool,
    /// It was stopped by a guard limit.
    pub guard_hit: bool,
}

impl Tasks {
    /// No task yet.
    pub fn new(cfg: Arc<Config>, emit: Emitter) -> Self {
        Self {
            cfg,
            emit,
            map: Mutex::default(),
            held: AtomicUsize::new(0),
            swept: Mutex::default(),
            relieved: Mutex::default(),
        }
    }

    fn with<R>(&self, agent: &str, task: &str, f: impl FnOnce(&mut TaskRt) -> R) -> R {
        let now = Instant::now();
        self.sweep(now);
        self.relieve(now);
        let mut map = self.map.lock().expect("tasks lock");
        let tasks = match map.get_mut(agent) {
            Some(tasks) => tasks,
            None => map.entry(agent.to_owned()).or_default(),
        };
        let rt = match tasks.get_mut(task) {
            Some(rt) => rt,
            None => tasks.entry(task.to_owned()).or_insert_with(|| {
                self.held.fetch_add(1, Ordering::Relaxed);
                Box::new(TaskRt {
                    guard: TaskGuard::new(now),
                    spend: Tally::default(),
                    unsent: (0, 0),
                    last_used: now,
                    agent_left: false,
                    turn_open: false,
                })
            }),
        };
        rt.last_used = now;
        rt.agent_left = false;
        f(rt)
    }

    /// Forgets tasks idle for [`IDLE_TASK_TTL`], at most once a minute.
    fn sweep(&self, now: Instant) {
        {
            let mut swept = self.swept.lock().expect("tasks sweep lock");
            match *swept {
                Some(t) if now.saturating_duration_since(t) < SWEEP_EVERY => return,
                Some(_) | None => *swept = Some(now),
            }
        }
        let mut gone = 0;
        self.map.lock().expect("tasks lock").retain(|_, tasks| {
            tasks.retain(|_, rt| {
                let keep = now.saturating_duration_since(rt.last_used) < IDLE_TASK_TTL;
                gone += usize::from(!keep);
                keep
            });
            !tasks.is_empty()
        });
        self.held.fetch_sub(gone, Ordering::Relaxed);
    }

    /// Sheds at once, at most every
    /// [`hale_core::memory::CROWDED_SWEEP_EVERY`], while memory is crowded
    /// with tasks ([`hale_core::memory::tasks_crowded`]), instead of
    /// waiting for the regular sweep.
    fn relieve(&self, now: Instant) {
        let keep = self.cfg.memory.idle_tasks;
        if !hale_core::memory::tasks_crowded(self.held.load(Ordering::Relaxed), keep) {
            return;
        }
        {
            let mut last = self.relieved.lock().expect("tasks relieve lock");
            match *last {
                Some(t)
                    if now.saturating_duration_since(t)
                        < hale_core::memory::CROWDED_SWEEP_EVERY =>
                {
                    return;
                }
                Some(_) | None => *last = Some(now),
            }
        }
        self.shed(now, keep, &HashSet::new());
    }

    /// Sheds idle tasks beyond `keep` (`hale_core::memory::task_idle_enough`:
    /// while memory is crowded with tasks, one with no turn in flight a
    /// second after its last use; else a task whose agent left memory,
    /// `agents_gone` at this sweep or at an earlier one since the task's
    /// last use, after a few seconds; any other after a minute), the least
    /// recently used first,
    /// except a task a guard stopped (its stop lives here). A shed task's
    /// stored totals come back with its next count
    /// (`TaskGuard::adopt_totals`); the guard events of its last turn not
    /// yet written (they ride on the task's next count) are dropped with it,
    /// so a shed task's stored event total may lag by that one turn.
    /// Returns how many went.
    pub fn shed(&self, now: Instant, keep: usize, agents_gone: &HashSet<String>) -> usize {
        let mut map = self.map.lock().expect("tasks lock");
        let crowded = hale_core::memory::tasks_crowded(self.held.load(Ordering::Relaxed), keep);
        // Keyed by last use, as an age from `now` turned around: the oldest
        // (largest age) sorts first.
        let idle: Vec<(u64, (&str, &str))> = map
            .iter_mut()
            .flat_map(|(agent, tasks)| {
                let left = agents_gone.contains(agent);
                tasks.iter_mut().filter_map(move |(task, rt)| {
                    rt.agent_left |= left;
                    if rt.guard.hit().is_some() {
                        return None;
                    }
                    let age = now.saturating_duration_since(rt.last_used);
                    let enough = hale_core::memory::task_idle_enough(
                        age,
                        rt.agent_left,
                        crowded,
                        rt.turn_open,
                    );
                    enough.then(|| {
                        let age_ms = u64::try_from(age.as_millis()).unwrap_or(u64::MAX);
                        (u64::MAX - age_ms, (agent.as_str(), task.as_str()))
                    })
                })
            })
            .collect();
        let gone: Vec<(String, String)> = hale_core::memory::to_shed(idle, keep)
            .into_iter()
            .map(|(_, (a, t))| (a.to_owned(), t.to_owned()))
            .collect();
        for (agent, task) in &gone {
            if remove(&mut map, agent, task).is_some() {
                self.held.fetch_sub(1, Ordering::Relaxed);
            }
        }
        if !gone.is_empty() {
            shrink(&mut map);
        }
        gone.len()
    }

    /// A turn of `agent`'s `task` ended, served or not (a task shed
    /// meanwhile is not brought back).
    pub fn turn_ended(&self, agent: &str, task: &str) {
        let mut map = self.map.lock().expect("tasks lock");
        if let Some(rt) = map.get_mut(agent).and_then(|tasks| tasks.get_mut(task)) {
            rt.turn_open = false;
        }
    }

    /// How many tasks are held.
    pub fn len(&self) -> usize {
        self.map
            .lock()
            .expect("tasks lock")
            .values()
            .map(HashMap::len)
            .sum()
    }

    /// Whether no task is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The guard snapshots and spend of every task of `agent`.
    pub fn of_agent(&self, agent: &str) -> Vec<(String, GuardSnapshot, Spend)> {
        let now = Instant::now();
        let map = self.map.lock().expect("tasks lock");
        map.get(agent)
            .into_iter()
            .flatten()
            .map(|(t, rt)| (t.clone(), rt.guard.snapshot(now), rt.spend.view()))
            .collect()
    }

    /// The store applied a task's count and holds these totals after it
    /// (a task forgotten meanwhile is not brought back).
    pub fn confirm(&self, agent: &str, t: &hale_store::TaskCounted) {
        let mut map = self.map.lock().expect("tasks lock");
        if let Some(rt) = map.get_mut(agent).and_then(|tasks| tasks.get_mut(&t.task)) {
            rt.spend.confirm(t.n, t.spend);
            rt.guard.adopt_totals(t.events, t.tool_calls);
        }
    }

    /// Forgets a task (a reset or a terminated task starting over).
    pub fn reset(&self, agent: &str, task: &str) -> Reset {
        let gone = remove(&mut self.map.lock().expect("tasks lock"), agent, task);
        if gone.is_some() {
            self.held.fetch_sub(1, Ordering::Relaxed);
        }
        Reset {
            existed: gone.is_some(),
            guard_hit: gone.is_some_and(|rt| rt.guard.hit().is_some()),
        }
    }
}

/// Removes `agent`'s `task`, and the agent's table when it was its last.
fn remove(
    map: &mut HashMap<String, HashMap<String, Box<TaskRt>>>,
    agent: &str,
    task: &str,
) -> Option<Box<TaskRt>> {
    let tasks = map.get_mut(agent)?;
    let gone = tasks.remove(task);
    if tasks.is_empty() {
        map.remove(agent);
    }
    gone
}

/// Gives back the tables' room after a shed took most of what they held:
/// a hash table keeps its largest size otherwise, and a burst of new
/// conversations grows it to hundreds of thousands of slots.
fn shrink(map: &mut HashMap<String, HashMap<String, Box<TaskRt>>>) {
    let roomy = |len: usize, cap: usize| cap > 64 && cap > len.saturating_mul(4);
    for tasks in map.values_mut() {
        if roomy(tasks.len(), tasks.capacity()) {
            tasks.shrink_to_fit();
        }
    }
    if roomy(map.len(), map.capacity()) {
        map.shrink_to_fit();
    }
}

/// The tool results a request carries.
fn tool_results(req: &ChatRequest) -> Vec<ToolResultSeen<'_>> {
    req.messages
        .iter()
        .flat_map(|m| m.content.iter())
        .filter_map(|p| match p {
            Part::ToolResult {
                tool_call_id,
                content,
                ..
            } => Some(ToolResultSeen {
                tool_call_id,
                content,
            }),
            Part::Text { .. } | Part::Opaque { .. } | Part::ToolCall { .. } => None,
        })
        .collect()
}

/// A tool call found in a response: id, name, arguments.
pub type CallSeen = (String, String, String);

/// The tool calls among a response's parts.
pub fn tool_calls(parts: &[Part]) -> Vec<CallSeen> {
    parts
        .iter()
        .filter_map(|p| match p {
            Part::ToolCall {
                id,
                name,
                arguments,
            } => Some((id.clone(), name.clone(), arguments.clone())),
            Part::Text { .. } | Part::Opaque { .. } | Part::ToolResult { .. } => None,
        })
        .collect()
}

fn guard_error(hit: &GuardHit) -> HaleError {
    let mut e = HaleError::new(StatusCode::CONFLICT, "safety_limit", hit.message.clone());
    e.hale = serde_json::to_value(hit).unwrap_or_default();
    e
}

impl Tasks {
    /// The budget that applies to `agent` (its own, else the default agent's).
    fn budget_cfg<'a>(&'a self, agent: &str) -> Option<&'a BudgetConfig> {
        self.cfg
            .agents
            .get(agent)
            .or_else(|| self.cfg.agents.get(hale_core::config::DEFAULT_AGENT))
            .map(|a| &a.budget)
    }

    fn guard_event(&self, agent: &str, task: &str, hit: &GuardHit) {
        self.emit.emit(
            self.emit
                .event(EventKind::GuardLimitHit)
                .agent(agent)
                .task(task)
                .payload(serde_json::to_value(hit).unwrap_or_default()),
        );
    }

    /// Step 4: counts the request and its tool results; a hit (new or old) is final.
    pub fn check_request(
        &self,
        agent: &str,
        task: &str,
        req: &ChatRequest,
    ) -> Result<(), HaleError> {
        let results = tool_results(req);
        let now = Instant::now();
        let (res, new) = self.with(agent, task, |rt| {
            rt.turn_open = true;
            let before = rt.guard.hit().is_some();
            let r = rt.guarded(|g| g.on_request(&self.cfg.guard, &results, now));
            (r, !before)
        });
        match res {
            Ok(()) => Ok(()),
            Err(hit) => {
                if new {
                    self.guard_event(agent, task, &hit);
                }
                Err(guard_error(&hit))
            }
        }
    }

    /// After a response: records its tool calls. A hit stops the task's next request.
    pub fn record_response(&self, agent: &str, task: &str, calls: &[CallSeen]) {
        let seen: Vec<ToolCallSeen<'_>> = calls
            .iter()
            .map(|(id, name, arguments)| ToolCallSeen {
                id,
                name,
                arguments,
            })
            .collect();
        let now = Instant::now();
        let hit = self.with(agent, task, |rt| {
            let before = rt.guard.hit().is_some();
            match rt.guarded(|g| g.on_response(&self.cfg.guard, &seen, now)) {
                Err(hit) if !before => Some(hit),
                Err(_) | Ok(()) => None,
            }
        });
        if let Some(hit) = hit {
            self.guard_event(agent, task, &hit);
        }
    }

    /// Step 7: refuses the turn when the task or the agent is at a cap.
    pub fn check_budget(
        &self,
        agent: &str,
        task: &str,
        agent_record: impl FnOnce() -> hale_store::AgentRecord,
    ) -> Result<(), HaleError> {
        let Some(cfg) = self.budget_cfg(agent) else {
            return Ok(());
        };
        let rec = agent_record();
        let agent_spend = Spend {
            tokens: rec.tokens_in + rec.tokens_out,
            cost_usd: rec.cost_usd,
        };
        let task_spend = self.with(agent, task, |rt| rt.spend.view());
        budget::check(cfg, &agent_spend, &task_spend).map_err(|hit: BudgetHit| {
            self.emit.emit(
                self.emit
                    .event(EventKind::BudgetExceeded)
                    .agent(agent)
                    .task(task)
                    .payload(serde_json::to_value(&hit).unwrap_or_default()),
            );
            let mut e = HaleError::new(
                StatusCode::PAYMENT_REQUIRED,
                "budget_exceeded",
                hit.message.clone(),
            );
            e.hale = serde_json::to_value(&hit).unwrap_or_default();
            e
        })
    }

    /// Adds a served turn's usage, and that of the cancelled losers of its
    /// hedges (`losses`: model, usage), to the task's spend; returns its cost in USD
    /// and the task's count to write with the turn's (its spend's number, the
    /// guard's events and tool calls not written yet).
    pub fn record_spend(
        &self,
        agent: &str,
        task: &str,
        model: &str,
        usage: Usage,
        losses: &[(&str, Usage)],
    ) -> (f64, hale_store::TaskCount) {
        let priced = |model: &str, u: &Usage| {
            models::price(model, &self.cfg.prices)
                .map(|p| budget::cost(p, u.input_tokens, u.output_tokens))
                .unwrap_or(0.0)
        };
        let cost = priced(model, &usage) + losses.iter().map(|(m, u)| priced(m, u)).sum::<f64>();
        let tokens = usage.input_tokens
            + usage.output_tokens
            + losses
                .iter()
                .map(|(_, u)| u.input_tokens + u.output_tokens)
                .sum::<u64>();
        let count = self.with(agent, task, |rt| {
            rt.turn_open = false;
            let mut s = Spend::default();
            s.add(tokens, cost);
            let (events, tool_calls) = std::mem::take(&mut rt.unsent);
            hale_store::TaskCount {
                task: task.to_owned(),
                n: rt.spend.count(s),
                events,
                tool_calls,
            }
        });
        (cost, count)
    }
}
