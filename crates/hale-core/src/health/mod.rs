//! Agent health (docs/operations.md, "Agent health and supervision"): the
//! per-agent state machine, the intervention planner and a registry that
//! carries both for 100k agents.
//!
//! Every turn through the gateway, and every `POST /agents/{id}/heartbeat`, is
//! a [`Heartbeat`]. Heartbeats only update counters — they are not events,
//! because 100k agents would flood the outbox — and [`AgentHealth::evaluate`]
//! turns those counters into a [`HealthState`]. Only a change of state is
//! reported (a [`StateChange`] with its reason), and the adapter turns that
//! into a `health.state_changed` event.
//!
//! Why it is shaped this way:
//! - **Small and allocation-free per heartbeat.** An agent's state is a few
//!   instants, counters and hashes (progress text is hashed to a `u64`, the
//!   error window is a bit set), so a heartbeat is O(1) with no allocation and
//!   an agent costs a few hundred bytes (see [`HealthRegistry::mem_per_agent`]).
//! - **Signals, then precedence.** Each signal (stale, error rate, token spike,
//!   no progress, repeated calls, context exhausted, failures) is checked on
//!   its own; when several hold, the most severe wins:
//!   Terminated > Failing > Stuck > Degraded > Healthy.
//! - **Time is an argument.** `now` is passed in, so every rule is tested with
//!   fake instants.
//!
//! Signals:
//! - *stale*: no heartbeat for `stale_after` → degraded. Staleness alone never
//!   makes an agent stuck; an agent silent for `stuck_after` has also made no
//!   progress for that long, which is what makes it stuck.
//! - *error rate*: more than `error_rate_threshold` of the last
//!   [`ERROR_WINDOW`] outcomes failed (with at least [`ERROR_RATE_MIN_SAMPLES`]
//!   outcomes seen) → degraded.
//! - *token spike*: the latest turn used more than `token_spike_factor` × the
//!   running mean of earlier turns (after [`TOKEN_SPIKE_MIN_SAMPLES`] samples)
//!   → degraded, until a later turn is back under the factor.
//! - *no progress*: nothing counted as progress for `stuck_after` → stuck.
//!   Progress is a change of the progress text, the phase or the task. An
//!   agent that has never reported progress text is judged by its turns
//!   instead: a successful turn whose request differs from the previous one
//!   counts as progress.
//! - *repeated calls*: `repeated_call_threshold` identical request
//!   fingerprints in a row → stuck.
//! - *context exhausted* (set by the gateway) → stuck.
//! - *breaker open* for the agent's provider (set by the gateway) → failing.
//! - *consecutive failures*: more than `failing_after_failures` failed turns
//!   in a row → failing.
//! - *terminated*: set by [`AgentHealth::terminate`]; only
//!   [`AgentHealth::reset`] leaves it.

mod intervention;
mod registry;

pub use intervention::{DecideError, Decision, Intervention, InterventionPhase, Interventions};
pub use registry::{HealthOutput, HealthRegistry, deadline};

use std::hash::{Hash, Hasher};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::config::HealthConfig;

/// How many recent outcomes (turns, reported errors) the error rate covers.
pub const ERROR_WINDOW: u8 = 20;
/// The error rate is judged only once this many outcomes are in the window,
/// so one failed first turn is not a 100 % error rate.
pub const ERROR_RATE_MIN_SAMPLES: u8 = 4;
/// A token spike is judged only after this many token samples.
pub const TOKEN_SPIKE_MIN_SAMPLES: u32 = 5;
/// The running token mean weighs at most this many samples (beyond it, it
/// moves like an exponential average, so it follows a slowly growing context).
pub const TOKEN_MEAN_WINDOW: u32 = 32;

const ERROR_MASK: u32 = (1u32 << ERROR_WINDOW) - 1;

/// An agent's health.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HealthState {
    Healthy,
    Degraded,
    Stuck,
    Failing,
    Terminated,
}

impl HealthState {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            HealthState::Healthy => "healthy",
            HealthState::Degraded => "degraded",
            HealthState::Stuck => "stuck",
            HealthState::Failing => "failing",
            HealthState::Terminated => "terminated",
        }
    }
}

impl std::fmt::Display for HealthState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which signal decided the state: a low-cardinality label for metrics and
/// for the snapshot (the free-text reason lives in [`StateChange::reason`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Signal {
    /// Nothing wrong.
    None,
    Stale,
    ErrorRate,
    TokenSpike,
    NoProgress,
    RepeatedCalls,
    ContextExhausted,
    BreakerOpen,
    ConsecutiveFailures,
    Terminated,
    /// An operator reset the agent.
    Reset,
}

/// One report of life: a turn through the gateway or an agent's own POST.
#[derive(Debug, Clone, Copy, Default)]
pub struct Heartbeat<'a> {
    pub task: Option<&'a str>,
    pub phase: Option<&'a str>,
    /// Free text; a change of it counts as progress.
    pub progress: Option<&'a str>,
    /// Tokens of this turn (a sample for the spike rule).
    pub tokens: Option<u64>,
    /// Errors since the previous heartbeat: `n > 0` adds `n` failed outcomes
    /// to the error window (at most [`ERROR_WINDOW`]), `0` adds one success.
    pub errors: Option<u64>,
    /// Hash of the request, for repeated identical calls (turns only).
    pub fingerprint: Option<u64>,
    /// For turns: did it fail.
    pub failed: Option<bool>,
}

/// A change of state and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateChange {
    pub from: HealthState,
    pub to: HealthState,
    pub signal: Signal,
    pub reason: String,
}

/// A serialisable view of one agent's health.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HealthSnapshot {
    pub state: HealthState,
    pub signal: Signal,
    pub in_state_ms: u64,
    pub since_heartbeat_ms: u64,
    pub since_progress_ms: u64,
    pub consecutive_failures: u32,
    /// Failed share of the error window (0 when empty).
    pub error_rate: f64,
    pub window_outcomes: u8,
    pub repeated_calls: u32,
    pub mean_tokens: f64,
    pub token_spike: bool,
    pub breaker_open: bool,
    pub context_exhausted: bool,
}

const F_BREAKER_OPEN: u8 = 1;
const F_CONTEXT_EXHAUSTED: u8 = 1 << 1;
const F_TERMINATED: u8 = 1 << 2;
const F_SPIKE: u8 = 1 << 3;
const F_REPORTS_PROGRESS: u8 = 1 << 4;
const F_HAS_FINGERPRINT: u8 = 1 << 5;

/// One agent's health: counters fed by heartbeats, judged by `evaluate`.
#[derive(Debug, Clone)]
pub struct AgentHealth {
    last_heartbeat: Instant,
    last_progress: Instant,
    state_since: Instant,
    /// Hash of (task, phase, progress) as last reported.
    task_hash: u64,
    phase_hash: u64,
    progress_hash: u64,
    fingerprint: u64,
    mean_tokens: f64,
    mean_before_last: f64,
    last_tokens: u64,
    token_samples: u32,
    samples_before_last: u32,
    repeat_run: u32,
    consecutive_failures: u32,
    /// Bit i set: the i-th most recent outcome failed.
    outcomes: u32,
    outcome_len: u8,
    flags: u8,
    state: HealthState,
    signal: Signal,
}

fn hash_str(s: &str) -> u64 {
    let mut h = std::hash::DefaultHasher::new();
    s.hash(&mut h);
    h.finish()
}

/// "12m", "90s", "1h5m": short and readable in a reason.
pub(crate) fn fmt_dur(d: Duration) -> String {
    let s = d.as_secs();
    if s == 0 {
        return format!("{}ms", d.as_millis());
    }
    let (h, m, sec) = (s / 3600, (s % 3600) / 60, s % 60);
    let mut out = String::new();
    if h > 0 {
        out.push_str(&format!("{h}h"));
    }
    if m > 0 {
        out.push_str(&format!("{m}m"));
    }
    if sec > 0 || out.is_empty() {
        out.push_str(&format!("{sec}s"));
    }
    out
}

impl AgentHealth {
    /// A healthy agent, as if it had just reported progress at `now`.
    pub fn new(now: Instant) -> Self {
        Self {
            last_heartbeat: now,
            last_progress: now,
            state_since: now,
            task_hash: 0,
            phase_hash: 0,
            progress_hash: 0,
            fingerprint: 0,
            mean_tokens: 0.0,
            mean_before_last: 0.0,
            last_tokens: 0,
            token_samples: 0,
            samples_before_last: 0,
            repeat_run: 0,
            consecutive_failures: 0,
            outcomes: 0,
            outcome_len: 0,
            flags: 0,
            state: HealthState::Healthy,
            signal: Signal::None,
        }
    }

    fn flag(&self, f: u8) -> bool {
        self.flags & f != 0
    }

    fn set_flag(&mut self, f: u8, on: bool) {
        if on {
            self.flags |= f;
        } else {
            self.flags &= !f;
        }
    }

    fn push_outcome(&mut self, failed: bool) {
        self.outcomes = ((self.outcomes << 1) | u32::from(failed)) & ERROR_MASK;
        self.outcome_len = (self.outcome_len + 1).min(ERROR_WINDOW);
    }

    /// Records one heartbeat. O(1), allocation-free.
    pub fn heartbeat(&mut self, hb: &Heartbeat<'_>, now: Instant) {
        if now > self.last_heartbeat {
            self.last_heartbeat = now;
        }
        let mut progressed = false;
        if let Some(task) = hb.task {
            let h = hash_str(task);
            if h != self.task_hash {
                self.task_hash = h;
                progressed = true;
                // A new task starts a new run of calls.
                self.repeat_run = 0;
                self.set_flag(F_HAS_FINGERPRINT, false);
            }
        }
        if let Some(phase) = hb.phase {
            let h = hash_str(phase);
            if h != self.phase_hash {
                self.phase_hash = h;
                progressed = true;
            }
        }
        if let Some(progress) = hb.progress {
            self.set_flag(F_REPORTS_PROGRESS, true);
            let h = hash_str(progress);
            if h != self.progress_hash {
                self.progress_hash = h;
                progressed = true;
            }
        }
        let mut new_request = true;
        if let Some(fp) = hb.fingerprint {
            if self.flag(F_HAS_FINGERPRINT) && fp == self.fingerprint {
                self.repeat_run = self.repeat_run.saturating_add(1);
                new_request = false;
            } else {
                self.fingerprint = fp;
                self.repeat_run = 1;
                self.set_flag(F_HAS_FINGERPRINT, true);
            }
        }
        if let Some(failed) = hb.failed {
            self.push_outcome(failed);
            if failed {
                self.consecutive_failures = self.consecutive_failures.saturating_add(1);
            } else {
                self.consecutive_failures = 0;
                if new_request && !self.flag(F_REPORTS_PROGRESS) {
                    progressed = true;
                }
            }
        }
        if let Some(errors) = hb.errors {
            if errors == 0 {
                self.push_outcome(false);
            } else {
                let n = errors.min(u64::from(ERROR_WINDOW));
                for _ in 0..n {
                    self.push_outcome(true);
                }
            }
        }
        if let Some(tokens) = hb.tokens {
            // Remember the sample and the mean before it; whether it is a
            // spike needs the configured factor, so `evaluate` judges it.
            self.last_tokens = tokens;
            self.mean_before_last = self.mean_tokens;
            self.samples_before_last = self.token_samples;
            self.token_samples = self.token_samples.saturating_add(1);
            let w = f64::from(self.token_samples.min(TOKEN_MEAN_WINDOW));
            self.mean_tokens += (tokens as f64 - self.mean_tokens) / w;
        }
        // An out-of-order instant still counts, but never moves time back.
        if progressed && now > self.last_progress {
            self.last_progress = now;
        }
    }

    /// The gateway reports whether the breaker of the agent's provider is open.
    pub fn set_breaker_open(&mut self, open: bool) {
        self.set_flag(F_BREAKER_OPEN, open);
    }

    /// The gateway reports that the context cannot be compacted any further.
    pub fn set_context_exhausted(&mut self, v: bool) {
        self.set_flag(F_CONTEXT_EXHAUSTED, v);
    }

    /// Terminates the agent; only [`AgentHealth::reset`] leaves this state.
    pub fn terminate(&mut self, reason: &str, now: Instant) -> Option<StateChange> {
        self.set_flag(F_TERMINATED, true);
        self.transition(
            HealthState::Terminated,
            Signal::Terminated,
            reason.to_string(),
            now,
        )
    }

    /// Forgets everything (an operator's reset): healthy at `now`.
    pub fn reset(&mut self, now: Instant) -> Option<StateChange> {
        let from = self.state;
        *self = Self::new(now);
        (from != HealthState::Healthy).then(|| StateChange {
            from,
            to: HealthState::Healthy,
            signal: Signal::Reset,
            reason: "reset by operator".to_string(),
        })
    }

    fn transition(
        &mut self,
        to: HealthState,
        signal: Signal,
        reason: String,
        now: Instant,
    ) -> Option<StateChange> {
        self.signal = signal;
        if to == self.state {
            return None;
        }
        let from = self.state;
        self.state = to;
        self.state_since = now;
        Some(StateChange {
            from,
            to,
            signal,
            reason,
        })
    }

    fn error_rate(&self) -> f64 {
        if self.outcome_len == 0 {
            0.0
        } else {
            f64::from(self.outcomes.count_ones()) / f64::from(self.outcome_len)
        }
    }

    /// Whether the latest token sample is a spike under `cfg`.
    fn is_spike(&self, cfg: &HealthConfig) -> bool {
        self.samples_before_last >= TOKEN_SPIKE_MIN_SAMPLES
            && self.mean_before_last > 0.0
            && self.last_tokens as f64 > cfg.token_spike_factor * self.mean_before_last
    }

    /// The state the signals call for now, with its signal (no reason text).
    fn judge(&self, cfg: &HealthConfig, now: Instant) -> (HealthState, Signal) {
        if self.flag(F_TERMINATED) {
            return (HealthState::Terminated, Signal::Terminated);
        }
        if self.flag(F_BREAKER_OPEN) {
            return (HealthState::Failing, Signal::BreakerOpen);
        }
        if self.consecutive_failures > cfg.failing_after_failures {
            return (HealthState::Failing, Signal::ConsecutiveFailures);
        }
        if self.flag(F_CONTEXT_EXHAUSTED) {
            return (HealthState::Stuck, Signal::ContextExhausted);
        }
        if cfg.repeated_call_threshold > 0 && self.repeat_run >= cfg.repeated_call_threshold {
            return (HealthState::Stuck, Signal::RepeatedCalls);
        }
        if now.saturating_duration_since(self.last_progress) >= cfg.stuck_after {
            return (HealthState::Stuck, Signal::NoProgress);
        }
        if now.saturating_duration_since(self.last_heartbeat) >= cfg.stale_after {
            return (HealthState::Degraded, Signal::Stale);
        }
        if self.outcome_len >= ERROR_RATE_MIN_SAMPLES
            && self.error_rate() > cfg.error_rate_threshold
        {
            return (HealthState::Degraded, Signal::ErrorRate);
        }
        if self.is_spike(cfg) {
            return (HealthState::Degraded, Signal::TokenSpike);
        }
        (HealthState::Healthy, Signal::None)
    }

    fn reason(&self, signal: Signal, cfg: &HealthConfig, now: Instant) -> String {
        match signal {
            Signal::None => "all signals normal".to_string(),
            Signal::Reset => "reset by operator".to_string(),
            Signal::Terminated => "terminated".to_string(),
            Signal::BreakerOpen => "circuit breaker open for the agent's provider".to_string(),
            Signal::ConsecutiveFailures => format!(
                "{} consecutive failed turns (more than {})",
                self.consecutive_failures, cfg.failing_after_failures
            ),
            Signal::ContextExhausted => "context exhausted: nothing left to compact".to_string(),
            Signal::RepeatedCalls => format!(
                "{} identical calls in a row (threshold {})",
                self.repeat_run, cfg.repeated_call_threshold
            ),
            Signal::NoProgress => format!(
                "no progress for {} (stuck after {})",
                fmt_dur(now.saturating_duration_since(self.last_progress)),
                fmt_dur(cfg.stuck_after)
            ),
            Signal::Stale => format!(
                "no heartbeat for {} (stale after {})",
                fmt_dur(now.saturating_duration_since(self.last_heartbeat)),
                fmt_dur(cfg.stale_after)
            ),
            Signal::ErrorRate => format!(
                "error rate {:.0}% over the last {} outcomes (threshold {:.0}%)",
                self.error_rate() * 100.0,
                self.outcome_len,
                cfg.error_rate_threshold * 100.0
            ),
            Signal::TokenSpike => format!(
                "token spike: {} tokens in the latest turn, over {}x the running mean of {:.0}",
                self.last_tokens, cfg.token_spike_factor, self.mean_before_last
            ),
        }
    }

    /// Judges the signals at `now`; returns the change of state, if any.
    pub fn evaluate(&mut self, cfg: &HealthConfig, now: Instant) -> Option<StateChange> {
        let spike = self.is_spike(cfg);
        self.set_flag(F_SPIKE, spike);
        let (to, signal) = self.judge(cfg, now);
        if to == self.state {
            self.signal = signal;
            return None;
        }
        let reason = self.reason(signal, cfg, now);
        self.transition(to, signal, reason, now)
    }

    /// The current state (as of the last `evaluate`).
    pub fn state(&self) -> HealthState {
        self.state
    }

    /// The earliest instant after `now` at which a time-based signal could
    /// change this agent's state with no further heartbeat; `None` when none
    /// can (everything else changes only through a heartbeat or a setter).
    pub fn next_deadline(&self, cfg: &HealthConfig, now: Instant) -> Option<Instant> {
        if self.flag(F_TERMINATED) {
            return None;
        }
        let stale = self.last_heartbeat + cfg.stale_after;
        let stuck = self.last_progress + cfg.stuck_after;
        [stale, stuck].into_iter().filter(|t| *t > now).min()
    }

    /// A serialisable view at `now`.
    pub fn snapshot(&self, now: Instant) -> HealthSnapshot {
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        HealthSnapshot {
            state: self.state,
            signal: self.signal,
            in_state_ms: ms(now.saturating_duration_since(self.state_since)),
            since_heartbeat_ms: ms(now.saturating_duration_since(self.last_heartbeat)),
            since_progress_ms: ms(now.saturating_duration_since(self.last_progress)),
            consecutive_failures: self.consecutive_failures,
            error_rate: self.error_rate(),
            window_outcomes: self.outcome_len,
            repeated_calls: self.repeat_run,
            mean_tokens: self.mean_tokens,
            token_spike: self.flag(F_SPIKE),
            breaker_open: self.flag(F_BREAKER_OPEN),
            context_exhausted: self.flag(F_CONTEXT_EXHAUSTED),
        }
    }
}

/// When the health monitor evaluates next, after an evaluation at `now`:
/// at the earliest deadline any agent has (`earliest`,
/// [`HealthRegistry::next_deadline`]), so a silent agent is judged at its
/// deadline rather than up to `every` late; and at the latest `every` after
/// `now`, when the agents changed by heartbeats and setters are judged (a
/// turn, a new agent or an operator's decision wakes the monitor sooner). A
/// deadline already past is now.
pub fn next_wake(now: Instant, earliest: Option<Instant>, every: Duration) -> Instant {
    let cap = now + every;
    match earliest {
        Some(d) => d.clamp(now, cap),
        None => cap,
    }
}

#[cfg(test)]
mod tests;
