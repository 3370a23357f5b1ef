//! The per-task safety guard (docs/configuration.md, `guard`).
//!
//! A [`TaskGuard`] watches one task's traffic and stops it when it runs away:
//! too many events (every request and every response the gateway sees is one
//! event), too many tool calls, too much wall time, a per-tool cap reached,
//! the same call (tool + canonicalised JSON arguments) repeated
//! `tool_loop_threshold` times in a row, the same call returning the same
//! result `result_loop_threshold` times in a row, or the same file edited
//! `file_edit_loop_threshold` times in a row.
//!
//! Why it works so:
//!
//! - **A hit is final.** Once a limit is reached the guard keeps returning the
//!   same [`GuardHit`] and stops counting: a stopped task does not resume by
//!   itself, and the summary the agent and the operator read does not drift.
//! - **Counting at N.** A limit of N is *reached* by the N-th occurrence
//!   ("reached maximum of 400 tool invocations"), so `N - 1` passes and `N`
//!   stops the task. A limit of `0` on `max_events`, `max_tool_calls`,
//!   `task_timeout` or a loop threshold disables that rule; a per-tool cap of
//!   `0` forbids the tool outright.
//! - **Bounded memory.** Only the current streaks, one counter per capped tool
//!   (bounded by the config) and the calls of the latest response (bounded by
//!   [`MAX_PENDING_CALLS`]) are kept; arguments and results are kept as
//!   64-bit hashes, never as text.
//! - **Results are matched to calls by id.** Agents resend the whole history
//!   with every request, so a tool result counts only when it answers a call
//!   of the latest response that has not been answered yet; older results in
//!   the history are ignored, and nothing is counted twice.
//! - **Read-only tools neither count as edits nor break an edit streak**, so
//!   "read, edit, read, edit…" on one file is still caught; any other tool
//!   call breaks it.
//! - **A task is a conversation unless it is named** ([`task_of`]): the task
//!   is `X-Hale-Task` when given; otherwise each conversation is its own task,
//!   identified by its root (the system prompt and the first user message),
//!   which every request of one agent loop shares as its messages grow. So a
//!   plain client that sends many unrelated conversations never adds them up
//!   into one runaway task, while one looping conversation is still stopped.
//! - Pure: `now` comes in as an argument; nothing here reads a clock.

use crate::config::GuardConfig;
use serde::Serialize;
use std::collections::BTreeMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::time::{Duration, Instant};

/// A task with no request for this long is forgotten (its guard and spend),
/// so a gateway serving many short conversations holds bounded state. A task
/// still in use is never forgotten, however long it runs.
pub const IDLE_TASK_TTL: Duration = Duration::from_secs(60 * 60);

/// The prefix of a task named by its conversation root.
pub const CONVERSATION_TASK_PREFIX: &str = "conv-";

/// The guard's task of a request: `explicit` (`X-Hale-Task`) when given,
/// else its conversation root — `conv-` and a stable 64-bit FNV-1a hash of
/// the system prompt and the first user message. Stable across processes and
/// versions, so every instance and every restart names a conversation alike.
pub fn task_of(explicit: Option<&str>, system: &str, first_user: &str) -> String {
    if let Some(t) = explicit {
        return t.to_owned();
    }
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0100_0000_01b3;
    let mut h = OFFSET;
    for b in system
        .bytes()
        .chain(std::iter::once(0xff))
        .chain(first_user.bytes())
    {
        h ^= u64::from(b);
        h = h.wrapping_mul(PRIME);
    }
    format!("{CONVERSATION_TASK_PREFIX}{h:016x}")
}

/// The calls of the latest response remembered for matching their results.
/// A response with more calls than this keeps the first ones; the rest are
/// still counted as tool calls but their results are not loop-checked.
pub const MAX_PENDING_CALLS: usize = 256;

/// One tool call found in a model response.
#[derive(Debug, Clone, Copy)]
pub struct ToolCallSeen<'a> {
    pub id: &'a str,
    pub name: &'a str,
    /// The raw JSON arguments string, as the model produced it.
    pub arguments: &'a str,
}

/// One tool result found in a request.
#[derive(Debug, Clone, Copy)]
pub struct ToolResultSeen<'a> {
    pub tool_call_id: &'a str,
    pub content: &'a str,
}

/// Which limit stopped the task.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Limit {
    MaxEvents,
    MaxToolCalls,
    TaskTimeout,
    ToolCap { tool: String },
    IdenticalCalls { tool: String },
    IdenticalResults { tool: String },
    FileEditLoop { path: String },
}

impl Limit {
    /// A low-cardinality name for metrics labels and event payloads.
    pub fn code(&self) -> &'static str {
        match self {
            Limit::MaxEvents => "max_events",
            Limit::MaxToolCalls => "max_tool_calls",
            Limit::TaskTimeout => "task_timeout",
            Limit::ToolCap { .. } => "tool_cap",
            Limit::IdenticalCalls { .. } => "identical_calls",
            Limit::IdenticalResults { .. } => "identical_results",
            Limit::FileEditLoop { .. } => "file_edit_loop",
        }
    }
}

/// A limit reached: what, the counts at that moment, and a readable summary.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GuardHit {
    pub limit: Limit,
    pub events: u64,
    pub tool_calls: u64,
    #[serde(rename = "elapsed_ms", serialize_with = "ser_ms")]
    pub elapsed: Duration,
    pub message: String,
}

fn ser_ms<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// A point-in-time view of a task's guard, for `GET` endpoints and events.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GuardSnapshot {
    pub events: u64,
    pub tool_calls: u64,
    #[serde(rename = "elapsed_ms", serialize_with = "ser_ms")]
    pub elapsed: Duration,
    /// Calls so far of each capped tool.
    pub capped_tool_calls: BTreeMap<String, u64>,
    /// The tool of the current identical-call streak and its length.
    pub call_streak: Option<(String, u32)>,
    /// The tool of the current identical-result streak and its length.
    pub result_streak: Option<(String, u32)>,
    /// The path of the current edit streak and its length.
    pub edit_streak: Option<(String, u32)>,
    pub hit: Option<GuardHit>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct CallKey {
    tool: String,
    args: u64,
}

#[derive(Debug, Clone)]
struct Streak<K> {
    key: K,
    count: u32,
}

impl<K: PartialEq> Streak<K> {
    /// Extends the streak when `key` repeats it, else starts a new one; returns its length.
    fn push(slot: &mut Option<Streak<K>>, key: K) -> u32 {
        match slot {
            Some(s) if s.key == key => {
                s.count = s.count.saturating_add(1);
                s.count
            }
            Some(_) | None => {
                *slot = Some(Streak { key, count: 1 });
                1
            }
        }
    }
}

#[derive(Debug, Clone)]
struct Pending {
    id: String,
    call: CallKey,
}

/// One task's guard state. What only tool calls make (their streaks, caps
/// and pending results) and a hit live behind a pointer each, allocated
/// when first needed: a gateway holds one guard per conversation it has
/// seen in the last minute, most of them text only.
#[derive(Debug, Clone)]
pub struct TaskGuard {
    started: Instant,
    events: u64,
    tool_calls: u64,
    calls: Option<Box<CallState>>,
    hit: Option<Box<GuardHit>>,
}

/// A task's tool-call state ([`TaskGuard`]).
#[derive(Debug, Clone, Default)]
struct CallState {
    capped: BTreeMap<String, u64>,
    call_streak: Option<Streak<CallKey>>,
    result_streak: Option<Streak<(CallKey, u64)>>,
    edit_streak: Option<Streak<String>>,
    pending: Vec<Pending>,
}

impl TaskGuard {
    /// A fresh guard for a task that started at `started`.
    pub fn new(started: Instant) -> Self {
        Self {
            started,
            events: 0,
            tool_calls: 0,
            calls: None,
            hit: None,
        }
    }

    /// One request arriving: counts an event, records tool results found in it, checks limits.
    pub fn on_request(
        &mut self,
        cfg: &GuardConfig,
        results: &[ToolResultSeen<'_>],
        now: Instant,
    ) -> Result<(), GuardHit> {
        if let Some(hit) = &self.hit {
            return Err((**hit).clone());
        }
        self.events = self.events.saturating_add(1);
        self.check_totals(cfg, now)?;
        let Some(cs) = self.calls.as_deref_mut() else {
            return Ok(()); // no call of this task awaits a result
        };
        let mut looped = None;
        for r in results {
            let Some(pos) = cs.pending.iter().position(|p| p.id == r.tool_call_id) else {
                continue;
            };
            let call = cs.pending.swap_remove(pos).call;
            let tool = call.tool.clone();
            let n = Streak::push(&mut cs.result_streak, (call, hash_str(r.content)));
            if reached_threshold(n, cfg.result_loop_threshold) {
                looped = Some(tool);
                break;
            }
        }
        match looped {
            Some(tool) => Err(self.stop(Limit::IdenticalResults { tool }, cfg, now)),
            None => Ok(()),
        }
    }

    /// One response: counts an event, records tool calls, checks limits.
    pub fn on_response(
        &mut self,
        cfg: &GuardConfig,
        calls: &[ToolCallSeen<'_>],
        now: Instant,
    ) -> Result<(), GuardHit> {
        if let Some(hit) = &self.hit {
            return Err((**hit).clone());
        }
        self.events = self.events.saturating_add(1);
        self.check_totals(cfg, now)?;
        if !calls.is_empty()
            && let Some(cs) = self.calls.as_deref_mut()
        {
            cs.pending.clear();
        }
        for c in calls {
            self.record_call(cfg, c, now)?;
        }
        Ok(())
    }

    /// Checks the limits that move without new input (the task timeout), and
    /// returns the final hit if one was reached before. Being `&self`, it does
    /// not record a new hit; the next `on_request`/`on_response` makes it final.
    pub fn check(&self, cfg: &GuardConfig, now: Instant) -> Result<(), GuardHit> {
        if let Some(hit) = &self.hit {
            return Err((**hit).clone());
        }
        match self.total_limit(cfg, now) {
            Some(limit) => Err(self.make_hit(limit, cfg, now)),
            None => Ok(()),
        }
    }

    /// This task's totals as the store holds them, counted over every
    /// instance that served it (counted once, docs/operations.md, "Scale-out on
    /// PostgreSQL"): adopted where they exceed this guard's own, so a cap is
    /// reached as on one instance. The streaks and per-tool caps stay this
    /// instance's (they need the order of one conversation).
    pub fn adopt_totals(&mut self, events: u64, tool_calls: u64) {
        self.events = self.events.max(events);
        self.tool_calls = self.tool_calls.max(tool_calls);
    }

    /// The events and tool calls counted so far.
    pub fn totals(&self) -> (u64, u64) {
        (self.events, self.tool_calls)
    }

    /// The final hit, once a limit was reached.
    pub fn hit(&self) -> Option<&GuardHit> {
        self.hit.as_deref()
    }

    /// The counts and streaks at `now`.
    pub fn snapshot(&self, now: Instant) -> GuardSnapshot {
        let cs = self.calls.as_deref();
        GuardSnapshot {
            events: self.events,
            tool_calls: self.tool_calls,
            elapsed: now.saturating_duration_since(self.started),
            capped_tool_calls: cs.map(|c| c.capped.clone()).unwrap_or_default(),
            call_streak: cs
                .and_then(|c| c.call_streak.as_ref())
                .map(|s| (s.key.tool.clone(), s.count)),
            result_streak: cs
                .and_then(|c| c.result_streak.as_ref())
                .map(|s| (s.key.0.tool.clone(), s.count)),
            edit_streak: cs
                .and_then(|c| c.edit_streak.as_ref())
                .map(|s| (s.key.clone(), s.count)),
            hit: self.hit.as_deref().cloned(),
        }
    }

    fn record_call(
        &mut self,
        cfg: &GuardConfig,
        c: &ToolCallSeen<'_>,
        now: Instant,
    ) -> Result<(), GuardHit> {
        self.tool_calls = self.tool_calls.saturating_add(1);
        let cs = self.calls.get_or_insert_with(Box::default);
        if let Some(limit) = cs.record_call(cfg, c) {
            return Err(self.stop(limit, cfg, now));
        }
        if cfg.max_tool_calls > 0 && self.tool_calls >= cfg.max_tool_calls {
            return Err(self.stop(Limit::MaxToolCalls, cfg, now));
        }
        Ok(())
    }

    fn total_limit(&self, cfg: &GuardConfig, now: Instant) -> Option<Limit> {
        let elapsed = now.saturating_duration_since(self.started);
        if !cfg.task_timeout.is_zero() && elapsed >= cfg.task_timeout {
            return Some(Limit::TaskTimeout);
        }
        if cfg.max_events > 0 && self.events >= cfg.max_events {
            return Some(Limit::MaxEvents);
        }
        if cfg.max_tool_calls > 0 && self.tool_calls >= cfg.max_tool_calls {
            return Some(Limit::MaxToolCalls);
        }
        None
    }

    fn check_totals(&mut self, cfg: &GuardConfig, now: Instant) -> Result<(), GuardHit> {
        match self.total_limit(cfg, now) {
            Some(limit) => Err(self.stop(limit, cfg, now)),
            None => Ok(()),
        }
    }

    fn make_hit(&self, limit: Limit, cfg: &GuardConfig, now: Instant) -> GuardHit {
        let elapsed = now.saturating_duration_since(self.started);
        let message = hit_message(&limit, cfg, self.events, self.tool_calls, elapsed);
        GuardHit {
            limit,
            events: self.events,
            tool_calls: self.tool_calls,
            elapsed,
            message,
        }
    }

    /// Makes the hit final and returns it.
    fn stop(&mut self, limit: Limit, cfg: &GuardConfig, now: Instant) -> GuardHit {
        let hit = self.make_hit(limit, cfg, now);
        self.hit = Some(Box::new(hit.clone()));
        if let Some(cs) = self.calls.as_deref_mut() {
            cs.pending.clear();
        }
        hit
    }
}

impl CallState {
    /// Records one tool call (its result awaited, its per-tool cap, its
    /// streaks); the limit it reached, if any.
    fn record_call(&mut self, cfg: &GuardConfig, c: &ToolCallSeen<'_>) -> Option<Limit> {
        let parsed = serde_json::from_str::<serde_json::Value>(c.arguments).ok();
        let canonical = match &parsed {
            Some(v) => canonical_json(v),
            None => c.arguments.trim().to_owned(),
        };
        let key = CallKey {
            tool: c.name.to_owned(),
            args: hash_str(&canonical),
        };
        if self.pending.len() < MAX_PENDING_CALLS {
            self.pending.push(Pending {
                id: c.id.to_owned(),
                call: key.clone(),
            });
        }

        // Per-tool cap.
        if let Some(&cap) = cfg.tool_caps.get(c.name) {
            let n = self.capped.entry(c.name.to_owned()).or_insert(0);
            *n = n.saturating_add(1);
            if *n >= cap {
                return Some(Limit::ToolCap {
                    tool: c.name.to_owned(),
                });
            }
        }

        // Identical calls in a row.
        let n = Streak::push(&mut self.call_streak, key);
        if reached_threshold(n, cfg.tool_loop_threshold) {
            return Some(Limit::IdenticalCalls {
                tool: c.name.to_owned(),
            });
        }

        // Same-file edits in a row; read-only tools are transparent.
        let read_only = cfg.read_only_tools.iter().any(|t| t == c.name);
        if !read_only {
            let path = cfg
                .edit_tools
                .get(c.name)
                .and_then(|arg| parsed.as_ref()?.get(arg)?.as_str())
                .map(normalise_path);
            match path {
                Some(path) if !path.is_empty() => {
                    let n = Streak::push(&mut self.edit_streak, path.clone());
                    if reached_threshold(n, cfg.file_edit_loop_threshold) {
                        return Some(Limit::FileEditLoop { path });
                    }
                }
                Some(_) | None => self.edit_streak = None,
            }
        }
        None
    }
}

fn reached_threshold(n: u32, threshold: u32) -> bool {
    threshold > 0 && n >= threshold
}

fn hash_str(s: &str) -> u64 {
    let mut h = DefaultHasher::new();
    s.hash(&mut h);
    h.finish()
}

/// `./src/a.rs` and `src/a.rs` are the same file.
fn normalise_path(p: &str) -> String {
    let mut p = p.trim();
    while let Some(rest) = p.strip_prefix("./") {
        p = rest;
    }
    p.to_owned()
}

/// JSON with object keys sorted at every level and no insignificant
/// whitespace, so `{"a":1, "b":2}` and `{"b":2,"a":1}` are the same call —
/// independent of whether serde_json's `preserve_order` is enabled.
pub fn canonical_json(v: &serde_json::Value) -> String {
    let mut out = String::new();
    write_canonical(v, &mut out);
    out
}

fn write_canonical(v: &serde_json::Value, out: &mut String) {
    use serde_json::Value;
    match v {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String((*k).clone()).to_string());
                out.push(':');
                if let Some(val) = map.get(*k) {
                    write_canonical(val, out);
                }
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_) => {
            out.push_str(&v.to_string())
        }
    }
}

fn hit_message(
    limit: &Limit,
    cfg: &GuardConfig,
    events: u64,
    tool_calls: u64,
    elapsed: Duration,
) -> String {
    let reason = match limit {
        Limit::MaxEvents => format!(
            "reached maximum of {} events",
            group_thousands(cfg.max_events)
        ),
        Limit::MaxToolCalls => format!(
            "reached maximum of {} tool invocations",
            group_thousands(cfg.max_tool_calls)
        ),
        Limit::TaskTimeout => format!("task ran past {}", format_duration(cfg.task_timeout)),
        Limit::ToolCap { tool } => {
            let cap = cfg.tool_caps.get(tool).copied().unwrap_or(0);
            format!("{tool} reached its cap of {} calls", group_thousands(cap))
        }
        Limit::IdenticalCalls { tool } => format!(
            "called {tool} with the same arguments {} times in a row",
            cfg.tool_loop_threshold
        ),
        Limit::IdenticalResults { tool } => format!(
            "{tool} returned the same result for the same arguments {} times in a row",
            cfg.result_loop_threshold
        ),
        Limit::FileEditLoop { path } => {
            format!(
                "edited {path} {} times in a row",
                cfg.file_edit_loop_threshold
            )
        }
    };
    format!(
        "Forced stop: {reason}. Events processed: {} | Tool calls: {} | Elapsed: {}. \
         Please review the work completed so far.",
        group_thousands(events),
        group_thousands(tool_calls),
        format_duration(elapsed)
    )
}

/// `1247` → `"1,247"`.
pub fn group_thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

/// `443 s` → `"7m 23s"`, `42 s` → `"42s"`, `3723 s` → `"1h 2m 3s"`.
pub fn format_duration(d: Duration) -> String {
    let total = d.as_secs();
    let (h, m, s) = (total / 3600, (total % 3600) / 60, total % 60);
    if h > 0 {
        format!("{h}h {m}m {s}s")
    } else if m > 0 {
        format!("{m}m {s}s")
    } else {
        format!("{s}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_named_task_wins_else_each_conversation_root_is_its_own_task() {
        assert_eq!(task_of(Some("t1"), "sys", "hi"), "t1");
        let a = task_of(None, "You are helpful.", "Plan a trip");
        // The same root as the conversation grows: the same task.
        assert_eq!(a, task_of(None, "You are helpful.", "Plan a trip"));
        assert!(a.starts_with(CONVERSATION_TASK_PREFIX));
        assert_eq!(a.len(), CONVERSATION_TASK_PREFIX.len() + 16);
        // Another first message or another system prompt: another task.
        assert_ne!(a, task_of(None, "You are helpful.", "Plan a party"));
        assert_ne!(a, task_of(None, "You are terse.", "Plan a trip"));
        // The separator keeps ("ab", "c") apart from ("a", "bc").
        assert_ne!(task_of(None, "ab", "c"), task_of(None, "a", "bc"));
        // Stable across builds: a fixed value.
        assert_eq!(task_of(None, "", ""), "conv-af64724c8602eb6e");
    }

    fn cfg() -> GuardConfig {
        GuardConfig::default()
    }

    #[test]
    fn a_text_only_task_holds_no_tool_call_state() {
        let t0 = Instant::now();
        let mut g = TaskGuard::new(t0);
        for _ in 0..5 {
            g.on_request(&cfg(), &[], t0).expect("no limit");
            g.on_response(&cfg(), &[], t0).expect("no limit");
        }
        assert!(g.calls.is_none() && g.hit.is_none());
        assert_eq!(g.totals(), (10, 0));
        // The first tool call makes it.
        g.on_response(&cfg(), &[call("c1", "shell", "{}")], t0)
            .expect("no limit");
        assert!(g.calls.is_some());
        assert_eq!(g.snapshot(t0).call_streak, Some(("shell".into(), 1)));
        assert!(std::mem::size_of::<TaskGuard>() <= 64);
    }

    fn call<'a>(id: &'a str, name: &'a str, args: &'a str) -> ToolCallSeen<'a> {
        ToolCallSeen {
            id,
            name,
            arguments: args,
        }
    }

    /// Drives a guard through `n` steps of a scenario; returns the result of the last step.
    type Step = fn(&mut TaskGuard, &GuardConfig, usize, Instant) -> Result<(), GuardHit>;

    fn run(
        step: Step,
        cfg: &GuardConfig,
        n: usize,
        t0: Instant,
    ) -> (TaskGuard, Result<(), GuardHit>) {
        let mut g = TaskGuard::new(t0);
        let mut last = Ok(());
        for i in 0..n {
            last = step(&mut g, cfg, i, t0 + Duration::from_secs(i as u64));
        }
        (g, last)
    }

    fn step_plain_event(
        g: &mut TaskGuard,
        c: &GuardConfig,
        _i: usize,
        now: Instant,
    ) -> Result<(), GuardHit> {
        g.on_request(c, &[], now)
    }
    fn step_distinct_calls(
        g: &mut TaskGuard,
        c: &GuardConfig,
        i: usize,
        now: Instant,
    ) -> Result<(), GuardHit> {
        let args = format!("{{\"q\":{i}}}");
        g.on_response(c, &[call("c", "lookup", &args)], now)
    }
    fn step_edit_distinct(
        g: &mut TaskGuard,
        c: &GuardConfig,
        i: usize,
        now: Instant,
    ) -> Result<(), GuardHit> {
        let args = format!("{{\"path\":\"f{i}.rs\",\"text\":\"x\"}}");
        g.on_response(c, &[call("c", "edit_file", &args)], now)
    }
    fn step_identical(
        g: &mut TaskGuard,
        c: &GuardConfig,
        _i: usize,
        now: Instant,
    ) -> Result<(), GuardHit> {
        g.on_response(c, &[call("c", "run_tests", r#"{"all":true}"#)], now)
    }
    fn step_same_result(
        g: &mut TaskGuard,
        c: &GuardConfig,
        i: usize,
        now: Instant,
    ) -> Result<(), GuardHit> {
        let id = format!("id{i}");
        g.on_response(c, &[call(&id, "fetch", r#"{"url":"u"}"#)], now)?;
        g.on_request(
            c,
            &[ToolResultSeen {
                tool_call_id: &id,
                content: "404",
            }],
            now,
        )
    }
    fn step_same_file(
        g: &mut TaskGuard,
        c: &GuardConfig,
        i: usize,
        now: Instant,
    ) -> Result<(), GuardHit> {
        let args = format!("{{\"path\":\"src/a.rs\",\"text\":\"v{i}\"}}");
        g.on_response(c, &[call("c", "edit_file", &args)], now)
    }

    struct Row {
        name: &'static str,
        cfg: GuardConfig,
        step: Step,
        n: usize,
        expected: Limit,
        /// Step one more past N with a timestamp inside the timeout.
        t_step: bool,
    }

    fn rows() -> Vec<Row> {
        let base = GuardConfig {
            tool_caps: BTreeMap::new(),
            ..cfg()
        };
        let mut capped = base.clone();
        capped.tool_caps.insert("edit_file".into(), 5);
        capped.file_edit_loop_threshold = 0;
        vec![
            Row {
                name: "max_events",
                cfg: GuardConfig {
                    max_events: 7,
                    ..base.clone()
                },
                step: step_plain_event,
                n: 7,
                expected: Limit::MaxEvents,
                t_step: false,
            },
            Row {
                name: "max_tool_calls",
                cfg: GuardConfig {
                    max_tool_calls: 6,
                    ..base.clone()
                },
                step: step_distinct_calls,
                n: 6,
                expected: Limit::MaxToolCalls,
                t_step: false,
            },
            Row {
                name: "tool_cap",
                cfg: capped,
                step: step_edit_distinct,
                n: 5,
                expected: Limit::ToolCap {
                    tool: "edit_file".into(),
                },
                t_step: false,
            },
            Row {
                name: "identical_calls",
                cfg: base.clone(),
                step: step_identical,
                n: base.tool_loop_threshold as usize,
                expected: Limit::IdenticalCalls {
                    tool: "run_tests".into(),
                },
                t_step: false,
            },
            Row {
                name: "identical_results",
                cfg: GuardConfig {
                    tool_loop_threshold: 0,
                    ..base.clone()
                },
                step: step_same_result,
                n: base.result_loop_threshold as usize,
                expected: Limit::IdenticalResults {
                    tool: "fetch".into(),
                },
                t_step: false,
            },
            Row {
                name: "file_edit_loop",
                cfg: base.clone(),
                step: step_same_file,
                n: base.file_edit_loop_threshold as usize,
                expected: Limit::FileEditLoop {
                    path: "src/a.rs".into(),
                },
                t_step: false,
            },
            Row {
                name: "task_timeout",
                cfg: base.clone(),
                step: step_plain_event,
                n: 0,
                expected: Limit::TaskTimeout,
                t_step: true,
            },
        ]
    }

    #[test]
    fn each_rule_passes_at_n_minus_1_hits_at_n_and_stays_hit_at_n_plus_1() {
        let t0 = Instant::now();
        for row in rows() {
            if row.t_step {
                // Time-driven rule: N-1 / N / N+1 are instants.
                let timeout = row.cfg.task_timeout;
                let mut g = TaskGuard::new(t0);
                let before = t0 + timeout - Duration::from_secs(1);
                assert!(
                    g.on_request(&row.cfg, &[], before).is_ok(),
                    "{}: N-1",
                    row.name
                );
                assert!(g.check(&row.cfg, before).is_ok(), "{}: N-1 check", row.name);
                let hit = g.on_request(&row.cfg, &[], t0 + timeout).unwrap_err();
                assert_eq!(hit.limit, row.expected, "{}: N", row.name);
                let again = g
                    .on_request(&row.cfg, &[], t0 + timeout + Duration::from_secs(5))
                    .unwrap_err();
                assert_eq!(again, hit, "{}: N+1 is the same final hit", row.name);
                assert_eq!(g.check(&row.cfg, t0 + timeout * 3).unwrap_err(), hit);
                continue;
            }
            let (_, below) = run(row.step, &row.cfg, row.n - 1, t0);
            assert!(below.is_ok(), "{}: N-1 must pass, got {below:?}", row.name);
            let (mut g, at) = run(row.step, &row.cfg, row.n, t0);
            let hit = at.expect_err(&format!("{}: N must hit", row.name));
            assert_eq!(hit.limit, row.expected, "{}", row.name);
            assert_eq!(g.hit(), Some(&hit));
            let after = (row.step)(
                &mut g,
                &row.cfg,
                row.n,
                t0 + Duration::from_secs(row.n as u64),
            );
            assert_eq!(
                after.unwrap_err(),
                hit,
                "{}: N+1 must return the same final hit",
                row.name
            );
            let after = g.on_request(&row.cfg, &[], t0 + Duration::from_secs(1));
            assert_eq!(
                after.unwrap_err(),
                hit,
                "{}: any later input keeps the hit",
                row.name
            );
        }
    }

    #[test]
    fn check_reports_timeout_without_new_input() {
        let t0 = Instant::now();
        let c = cfg();
        let g = TaskGuard::new(t0);
        assert!(
            g.check(&c, t0 + c.task_timeout - Duration::from_millis(1))
                .is_ok()
        );
        let hit = g.check(&c, t0 + c.task_timeout).unwrap_err();
        assert_eq!(hit.limit, Limit::TaskTimeout);
        assert!(
            hit.message.contains("task ran past 10m 0s"),
            "{}",
            hit.message
        );
    }

    #[test]
    fn identical_call_streak_is_broken_by_a_different_call() {
        let t0 = Instant::now();
        let c = cfg();
        let mut g = TaskGuard::new(t0);
        let same = call("a", "run_tests", r#"{"all":true}"#);
        for _ in 0..c.tool_loop_threshold - 1 {
            g.on_response(&c, &[same], t0).unwrap();
        }
        g.on_response(&c, &[call("b", "run_tests", r#"{"all":false}"#)], t0)
            .unwrap();
        for _ in 0..c.tool_loop_threshold - 1 {
            g.on_response(&c, &[same], t0).unwrap();
        }
        let hit = g.on_response(&c, &[same], t0).unwrap_err();
        assert_eq!(
            hit.limit,
            Limit::IdenticalCalls {
                tool: "run_tests".into()
            }
        );
    }

    #[test]
    fn identical_calls_compare_canonicalised_json() {
        let t0 = Instant::now();
        let c = cfg();
        let mut g = TaskGuard::new(t0);
        let variants = [
            r#"{"a":1,"b":{"y":2,"x":1}}"#,
            r#"{ "b": {"x":1, "y":2}, "a": 1 }"#,
            "{\"b\":{\"y\":2,\"x\":1},\n\"a\":1}",
        ];
        for v in variants {
            g.on_response(&c, &[call("i", "lookup", v)], t0).unwrap();
        }
        let hit = g
            .on_response(&c, &[call("i", "lookup", variants[0])], t0)
            .unwrap_err();
        assert_eq!(
            hit.limit,
            Limit::IdenticalCalls {
                tool: "lookup".into()
            }
        );
    }

    #[test]
    fn read_only_tools_do_not_break_an_edit_streak_and_never_count_as_edits() {
        let t0 = Instant::now();
        let mut c = cfg();
        // A tool both editing and read-only is treated as read-only.
        c.edit_tools.insert("read_file".into(), "path".into());
        let mut g = TaskGuard::new(t0);
        let read = |i: u32| format!("{{\"path\":\"src/a.rs\",\"line\":{i}}}");
        for i in 0..c.file_edit_loop_threshold - 1 {
            let edit = format!("{{\"path\":\"./src/a.rs\",\"text\":\"{i}\"}}");
            g.on_response(&c, &[call("e", "edit_file", &edit)], t0)
                .unwrap();
            for j in 0..10 {
                g.on_response(&c, &[call("r", "read_file", &read(i * 100 + j))], t0)
                    .unwrap();
            }
        }
        let snap = g.snapshot(t0);
        assert_eq!(
            snap.edit_streak,
            Some(("src/a.rs".into(), c.file_edit_loop_threshold - 1))
        );
        let hit = g
            .on_response(
                &c,
                &[call("e", "write_file", r#"{"path":"src/a.rs","text":"z"}"#)],
                t0,
            )
            .unwrap_err();
        assert_eq!(
            hit.limit,
            Limit::FileEditLoop {
                path: "src/a.rs".into()
            }
        );
        assert!(
            hit.message.contains("edited src/a.rs 4 times in a row"),
            "{}",
            hit.message
        );
    }

    #[test]
    fn edit_streak_is_broken_by_another_file_or_a_non_read_only_tool() {
        let t0 = Instant::now();
        let c = GuardConfig {
            tool_caps: BTreeMap::new(),
            ..cfg()
        };
        let mut g = TaskGuard::new(t0);
        let edit = |p: &str, i: u32| format!("{{\"path\":\"{p}\",\"text\":\"{i}\"}}");
        for round in 0..5u32 {
            for i in 0..c.file_edit_loop_threshold - 1 {
                g.on_response(
                    &c,
                    &[call("e", "edit_file", &edit("a.rs", round * 10 + i))],
                    t0,
                )
                .unwrap();
            }
            if round % 2 == 0 {
                g.on_response(&c, &[call("e", "edit_file", &edit("b.rs", round))], t0)
                    .unwrap();
            } else {
                g.on_response(&c, &[call("r", "run_command", &edit("x", round))], t0)
                    .unwrap();
            }
        }
        assert!(g.hit().is_none());
    }

    #[test]
    fn same_result_streak_needs_the_same_result() {
        let t0 = Instant::now();
        let c = GuardConfig {
            tool_loop_threshold: 0,
            ..cfg()
        };
        let mut g = TaskGuard::new(t0);
        for i in 0..10 {
            let id = format!("id{i}");
            g.on_response(&c, &[call(&id, "fetch", r#"{"url":"u"}"#)], t0)
                .unwrap();
            let content = format!("page {i}");
            g.on_request(
                &c,
                &[ToolResultSeen {
                    tool_call_id: &id,
                    content: &content,
                }],
                t0,
            )
            .unwrap();
        }
        assert!(g.hit().is_none());
    }

    #[test]
    fn results_resent_in_history_count_once() {
        let t0 = Instant::now();
        let c = cfg();
        let mut g = TaskGuard::new(t0);
        g.on_response(&c, &[call("id1", "fetch", r#"{"url":"u"}"#)], t0)
            .unwrap();
        let history = [ToolResultSeen {
            tool_call_id: "id1",
            content: "404",
        }];
        for _ in 0..10 {
            g.on_request(&c, &history, t0).unwrap();
        }
        assert_eq!(g.snapshot(t0).result_streak, Some(("fetch".into(), 1)));
    }

    #[test]
    fn events_count_requests_and_responses() {
        let t0 = Instant::now();
        let c = cfg();
        let mut g = TaskGuard::new(t0);
        g.on_request(&c, &[], t0).unwrap();
        g.on_response(&c, &[call("a", "x", "{}"), call("b", "y", "{}")], t0)
            .unwrap();
        let s = g.snapshot(t0 + Duration::from_secs(3));
        assert_eq!((s.events, s.tool_calls), (2, 2));
        assert_eq!(s.elapsed, Duration::from_secs(3));
    }

    #[test]
    fn message_has_thousands_separators_and_elapsed() {
        let t0 = Instant::now();
        let c = GuardConfig {
            max_events: 5000,
            tool_loop_threshold: 0,
            tool_caps: BTreeMap::new(),
            ..cfg()
        };
        let mut g = TaskGuard::new(t0);
        for _ in 0..846 {
            g.on_request(&c, &[], t0).unwrap();
        }
        let now = t0 + Duration::from_secs(7 * 60 + 23);
        let mut hit = None;
        for i in 0..400 {
            let args = format!("{{\"i\":{i}}}");
            if let Err(h) = g.on_response(&c, &[call("a", "run", &args)], now) {
                hit = Some(h);
            }
        }
        let hit = hit.expect("400th call hits");
        assert_eq!(hit.limit, Limit::MaxToolCalls);
        assert_eq!(
            hit.message,
            "Forced stop: reached maximum of 400 tool invocations. Events processed: 1,246 | \
             Tool calls: 400 | Elapsed: 7m 23s. Please review the work completed so far."
        );
    }

    #[test]
    fn per_limit_wording() {
        let c = cfg();
        let msg = |l: Limit| hit_message(&l, &c, 1, 1, Duration::from_secs(5));
        assert!(
            msg(Limit::ToolCap {
                tool: "edit_file".into()
            })
            .contains("edit_file reached its cap of 8 calls")
        );
        assert!(
            msg(Limit::IdenticalCalls {
                tool: "edit_file".into()
            })
            .contains("called edit_file with the same arguments 4 times in a row")
        );
        assert!(msg(Limit::MaxEvents).contains("reached maximum of 2,000 events"));
        assert!(msg(Limit::TaskTimeout).contains("Elapsed: 5s."));
    }

    #[test]
    fn formatting_helpers() {
        assert_eq!(group_thousands(0), "0");
        assert_eq!(group_thousands(999), "999");
        assert_eq!(group_thousands(1000), "1,000");
        assert_eq!(group_thousands(1_234_567), "1,234,567");
        assert_eq!(format_duration(Duration::from_secs(42)), "42s");
        assert_eq!(format_duration(Duration::from_secs(443)), "7m 23s");
        assert_eq!(format_duration(Duration::from_secs(3723)), "1h 2m 3s");
    }

    #[test]
    fn hit_serialises_with_limit_tag_and_ms() {
        let t0 = Instant::now();
        let hit = TaskGuard::new(t0).make_hit(
            Limit::FileEditLoop { path: "a".into() },
            &cfg(),
            t0 + Duration::from_millis(1500),
        );
        let v = serde_json::to_value(&hit).unwrap();
        assert_eq!(v["limit"]["kind"], "file_edit_loop");
        assert_eq!(v["limit"]["path"], "a");
        assert_eq!(v["elapsed_ms"], 1500);
    }

    #[test]
    fn adopted_totals_reach_the_caps_as_one_instance_would() {
        let cfg = GuardConfig {
            max_events: 10,
            ..GuardConfig::default()
        };
        let now = Instant::now();
        let mut g = TaskGuard::new(now);
        g.on_request(&cfg, &[], now).expect("first request");
        // Another instance served 8 events of this task meanwhile.
        g.adopt_totals(9, 0);
        assert_eq!(g.totals(), (9, 0));
        g.adopt_totals(3, 0); // lower totals never lower the count
        assert_eq!(g.totals(), (9, 0));
        let hit = g
            .on_request(&cfg, &[], now)
            .expect_err("the tenth event is the cap");
        assert_eq!(hit.events, 10);
    }
}
