//! The circuit breaker (docs/configuration.md, `self_healing.circuit_breaker`):
//! Closed → Open → HalfOpen → Closed, plus
//! ForcedOpen (an operator's `trip()`) and Disabled.
//!
//! The breaker only *decides*; the attempt loop asks [`Breaker::allow`] before
//! a call and reports the outcome with [`Breaker::record`]. Time and the random
//! source come in as arguments, so every rule is tested under fake `Instant`s.
//!
//! Why it works so:
//! - **Trip rules compose.** `consecutive_failures`, `failure_threshold` within
//!   a sliding `window`, and `failure_rate` with `min_calls` may all be set; the
//!   first one met trips. A call slower than `slow_call` is a failure; a class
//!   not in `counted_classes` (a caller's 400, a content refusal) is neither a
//!   success nor a failure — it says nothing about the provider.
//! - **Bounded memory.** The threshold rule keeps the timestamps of the last
//!   `failure_threshold` failures only (exact); the rate rule and the snapshot
//!   count calls in [`WINDOW_BUCKETS`] time buckets covering the window, so a
//!   provider answering 10 000 calls a second costs the same memory as one
//!   answering one.
//! - **Open is cheap to leave.** Open lasts `half_open_after`, doubling per
//!   failed trial up to `max_open`, jittered by `open_jitter`, and never shorter
//!   than a `Retry-After` the provider sent. The first `allow()` after that
//!   moves to HalfOpen and returns [`Admission::Trial`].
//! - **Bounded trials.** HalfOpen admits `half_open_requests` trials at a
//!   time; everyone else is rejected. A trial never reported within the trial
//!   timeout ([`DEFAULT_TRIAL_TIMEOUT`], or [`Breaker::with_trial_timeout`]) is
//!   counted as failed on the next `allow()`, so a hung trial cannot wedge the
//!   breaker half-open forever.
//! - **The hot path does not serialise.** [`SharedBreaker::allow`] in Closed
//!   (and Disabled) is one atomic load; only state changes and recording take
//!   a short mutex.

use crate::class::ErrorClass;
use crate::config::BreakerConfig;
use rand::{Rng, RngExt};
use serde::Serialize;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How many time buckets cover the sliding window for the rate rule and the
/// snapshot counts. The window is thus exact to 1/20 of its length.
pub const WINDOW_BUCKETS: usize = 20;

/// Default time after which an admitted half-open trial that was never
/// reported counts as failed. Callers that know their attempt timeout set it
/// with [`Breaker::with_trial_timeout`].
pub const DEFAULT_TRIAL_TIMEOUT: Duration = Duration::from_secs(60);

/// No open duration (including one floored by an untrusted `Retry-After`) is
/// longer than this; it keeps `Instant` arithmetic from overflowing.
pub const MAX_HOLD: Duration = Duration::from_secs(24 * 60 * 60);

/// The state of a breaker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BreakerState {
    /// Calls flow; outcomes are counted.
    Closed,
    /// Calls are refused until the open duration has passed.
    Open,
    /// A bounded number of trial calls are let through.
    HalfOpen,
    /// Refused until `reset()` (an operator's `trip()`).
    ForcedOpen,
    /// The breaker is off by config: every call is allowed.
    Disabled,
}

impl BreakerState {
    /// A low-cardinality label for metrics, logs and events.
    pub fn as_str(self) -> &'static str {
        match self {
            BreakerState::Closed => "closed",
            BreakerState::Open => "open",
            BreakerState::HalfOpen => "half_open",
            BreakerState::ForcedOpen => "forced_open",
            BreakerState::Disabled => "disabled",
        }
    }

    fn to_u8(self) -> u8 {
        match self {
            BreakerState::Closed => 0,
            BreakerState::Open => 1,
            BreakerState::HalfOpen => 2,
            BreakerState::ForcedOpen => 3,
            BreakerState::Disabled => 4,
        }
    }
}

impl std::fmt::Display for BreakerState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The answer of [`Breaker::allow`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Go ahead (Closed or Disabled).
    Allowed,
    /// Go ahead: this call is a half-open trial. Report its outcome.
    Trial,
    /// Refused; the breaker may admit a call again in about `retry_in`.
    Rejected { retry_in: Duration },
}

/// What happened to a call the breaker admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallOutcome {
    Success {
        latency: Duration,
    },
    Failure {
        class: ErrorClass,
        latency: Duration,
        /// The provider's `Retry-After`, a floor on the open duration.
        retry_after: Option<Duration>,
    },
}

/// A state change, for `breaker.state_changed` events and logs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Transition {
    pub from: BreakerState,
    pub to: BreakerState,
    pub reason: String,
}

/// A serialisable view of a breaker, for `/metrics`, the dashboard and events.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BreakerSnapshot {
    pub state: BreakerState,
    /// Counted failures in the sliding window (bucket-exact).
    pub failures_in_window: u32,
    /// Counted calls (successes and failures) in the sliding window.
    pub calls_in_window: u32,
    /// Counted failures in a row.
    pub consecutive: u32,
    /// Time left before a trial is admitted; 0 unless Open.
    pub open_remaining_ms: u64,
    /// Half-open trials admitted and not yet reported.
    pub trials_in_flight: u32,
}

/// The stored state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Closed,
    Open { until: Instant },
    HalfOpen,
    ForcedOpen,
}

#[derive(Debug, Clone, Copy, Default)]
struct Bucket {
    /// Index of the bucket-sized slice of time since `origin` this slot holds.
    epoch: u64,
    calls: u32,
    failures: u32,
}

/// Calls and failures per time bucket over the window.
#[derive(Debug, Clone)]
struct Buckets {
    origin: Option<Instant>,
    width_nanos: u128,
    slots: [Bucket; WINDOW_BUCKETS],
}

impl Buckets {
    fn new(window: Duration) -> Self {
        let width_nanos = (window.as_nanos() / WINDOW_BUCKETS as u128).max(1);
        Self {
            origin: None,
            width_nanos,
            slots: [Bucket::default(); WINDOW_BUCKETS],
        }
    }

    fn epoch(&mut self, now: Instant) -> u64 {
        let origin = *self.origin.get_or_insert(now);
        let e = now.saturating_duration_since(origin).as_nanos() / self.width_nanos;
        u64::try_from(e).unwrap_or(u64::MAX)
    }

    fn epoch_of(&self, now: Instant) -> Option<u64> {
        let origin = self.origin?;
        let e = now.saturating_duration_since(origin).as_nanos() / self.width_nanos;
        Some(u64::try_from(e).unwrap_or(u64::MAX))
    }

    fn add(&mut self, now: Instant, failed: bool) {
        let epoch = self.epoch(now);
        let slot = &mut self.slots[(epoch % WINDOW_BUCKETS as u64) as usize];
        if slot.epoch != epoch {
            *slot = Bucket {
                epoch,
                calls: 0,
                failures: 0,
            };
        }
        slot.calls = slot.calls.saturating_add(1);
        if failed {
            slot.failures = slot.failures.saturating_add(1);
        }
    }

    /// (calls, failures) in the buckets of the window ending at `now`.
    fn counts(&self, now: Instant) -> (u32, u32) {
        let Some(cur) = self.epoch_of(now) else {
            return (0, 0);
        };
        let oldest = cur.saturating_sub(WINDOW_BUCKETS as u64 - 1);
        self.slots
            .iter()
            .filter(|b| (b.calls > 0) && b.epoch >= oldest && b.epoch <= cur)
            .fold((0u32, 0u32), |(c, f), b| {
                (c.saturating_add(b.calls), f.saturating_add(b.failures))
            })
    }

    fn clear(&mut self) {
        self.origin = None;
        self.slots = [Bucket::default(); WINDOW_BUCKETS];
    }
}

/// One circuit breaker (not thread-safe; see [`SharedBreaker`]).
#[derive(Debug, Clone)]
pub struct Breaker {
    /// Shared by every breaker of one configuration: a gateway holds one
    /// breaker per agent × deployment.
    cfg: Arc<BreakerConfig>,
    phase: Phase,
    buckets: Buckets,
    /// Timestamps of the last `failure_threshold` counted failures.
    recent_failures: VecDeque<Instant>,
    consecutive: u32,
    /// Failed trials since the breaker last closed: the doubling exponent.
    failed_trials: u32,
    /// Start times of admitted, unreported half-open trials (oldest first).
    trials: VecDeque<Instant>,
    trial_successes: u32,
    trial_timeout: Duration,
    /// Jitter factor drawn at the last `record`, for reopening on a trial
    /// timeout inside `allow()` (which has no RNG).
    pending_jitter: f64,
}

/// What one outcome means to the breaker.
enum Verdict {
    Success,
    Failure { retry_after: Option<Duration> },
    Ignored,
}

impl Breaker {
    /// A breaker in Closed (or Disabled, when `cfg.enabled` is false).
    pub fn new(cfg: impl Into<Arc<BreakerConfig>>) -> Self {
        let cfg = cfg.into();
        let buckets = Buckets::new(cfg.window);
        Self {
            cfg,
            phase: Phase::Closed,
            buckets,
            recent_failures: VecDeque::new(),
            consecutive: 0,
            failed_trials: 0,
            trials: VecDeque::new(),
            trial_successes: 0,
            trial_timeout: DEFAULT_TRIAL_TIMEOUT,
            pending_jitter: 1.0,
        }
    }

    /// Sets how long an admitted half-open trial may go unreported before it
    /// counts as failed (the caller's attempt timeout).
    pub fn with_trial_timeout(mut self, timeout: Duration) -> Self {
        self.trial_timeout = timeout;
        self
    }

    /// The config this breaker runs on.
    pub fn config(&self) -> &BreakerConfig {
        &self.cfg
    }

    /// The current state. Open stays Open until an `allow()` after the open
    /// duration moves it to HalfOpen (see `open_remaining_ms` in the snapshot).
    pub fn state(&self, _now: Instant) -> BreakerState {
        if !self.cfg.enabled {
            return BreakerState::Disabled;
        }
        match self.phase {
            Phase::Closed => BreakerState::Closed,
            Phase::Open { .. } => BreakerState::Open,
            Phase::HalfOpen => BreakerState::HalfOpen,
            Phase::ForcedOpen => BreakerState::ForcedOpen,
        }
    }

    /// May a call go now? Open → HalfOpen happens here, after the open
    /// duration, and that call gets [`Admission::Trial`].
    pub fn allow(&mut self, now: Instant) -> Admission {
        self.admit(now).0
    }

    /// [`Breaker::allow`], also returning the state change it caused (Open →
    /// HalfOpen when the open duration has passed, HalfOpen → Open when a
    /// trial timed out), so the caller can emit `breaker.state_changed`.
    pub fn admit(&mut self, now: Instant) -> (Admission, Option<Transition>) {
        if !self.cfg.enabled {
            return (Admission::Allowed, None);
        }
        match self.phase {
            Phase::Closed => (Admission::Allowed, None),
            Phase::ForcedOpen => (
                Admission::Rejected {
                    retry_in: self.cfg.half_open_after,
                },
                None,
            ),
            Phase::Open { until } => {
                if now >= until {
                    let t = self.go(BreakerState::HalfOpen, "open duration elapsed");
                    self.enter_half_open();
                    self.trials.push_back(now);
                    (Admission::Trial, Some(t))
                } else {
                    (
                        Admission::Rejected {
                            retry_in: until.saturating_duration_since(now),
                        },
                        None,
                    )
                }
            }
            Phase::HalfOpen => {
                let expired = self.trials.front().is_some_and(|&start| {
                    now.saturating_duration_since(start) >= self.trial_timeout
                });
                if expired {
                    let jitter = self.pending_jitter;
                    let t = self.reopen(now, None, jitter, "half-open trial timed out");
                    let retry_in = match self.phase {
                        Phase::Open { until } => until.saturating_duration_since(now),
                        Phase::Closed | Phase::HalfOpen | Phase::ForcedOpen => Duration::ZERO,
                    };
                    return (Admission::Rejected { retry_in }, Some(t));
                }
                if self.trials.len() < self.max_trials() {
                    self.trials.push_back(now);
                    (Admission::Trial, None)
                } else {
                    let retry_in = self
                        .trials
                        .front()
                        .map(|&start| add(start, self.trial_timeout).saturating_duration_since(now))
                        .unwrap_or(Duration::ZERO);
                    (Admission::Rejected { retry_in }, None)
                }
            }
        }
    }

    /// Reports the outcome of an admitted call. Returns the state change it
    /// caused, if any. A failure whose class is not counted is ignored
    /// (in HalfOpen it only frees its trial slot).
    pub fn record<R: Rng + ?Sized>(
        &mut self,
        now: Instant,
        outcome: CallOutcome,
        rng: &mut R,
    ) -> Option<Transition> {
        if !self.cfg.enabled {
            return None;
        }
        self.pending_jitter = self.draw_jitter(rng);
        let verdict = self.verdict(outcome);
        match self.phase {
            Phase::Closed => self.record_closed(now, verdict),
            Phase::HalfOpen => {
                self.trials.pop_front();
                match verdict {
                    Verdict::Ignored => None,
                    Verdict::Success => {
                        self.trial_successes = self.trial_successes.saturating_add(1);
                        if self.trial_successes >= self.cfg.success_threshold.max(1) {
                            let reason = format!("{} successful trial(s)", self.trial_successes);
                            let t = self.go(BreakerState::Closed, &reason);
                            self.clear_counts();
                            self.phase = Phase::Closed;
                            Some(t)
                        } else {
                            None
                        }
                    }
                    Verdict::Failure { retry_after } => {
                        let jitter = self.pending_jitter;
                        Some(self.reopen(now, retry_after, jitter, "half-open trial failed"))
                    }
                }
            }
            Phase::Open { until } => {
                // A late result of a call admitted before the trip: it does not
                // change the state, but a Retry-After still floors the open time.
                if let Verdict::Failure {
                    retry_after: Some(ra),
                } = verdict
                {
                    let floor = add(now, ra);
                    if floor > until {
                        self.phase = Phase::Open { until: floor };
                    }
                }
                None
            }
            Phase::ForcedOpen => None,
        }
    }

    /// Forces the breaker open until [`Breaker::reset`]. No effect when disabled.
    pub fn trip(&mut self, _now: Instant) -> Option<Transition> {
        if !self.cfg.enabled || self.phase == Phase::ForcedOpen {
            return None;
        }
        let t = self.go(BreakerState::ForcedOpen, "forced open (trip)");
        self.phase = Phase::ForcedOpen;
        self.trials.clear();
        Some(t)
    }

    /// Forces the breaker Closed with every count cleared. No effect when disabled.
    pub fn reset(&mut self) -> Option<Transition> {
        if !self.cfg.enabled {
            return None;
        }
        let from = self.phase;
        self.clear_counts();
        self.phase = Phase::Closed;
        if from == Phase::Closed {
            return None;
        }
        let from_state = match from {
            Phase::Closed => BreakerState::Closed,
            Phase::Open { .. } => BreakerState::Open,
            Phase::HalfOpen => BreakerState::HalfOpen,
            Phase::ForcedOpen => BreakerState::ForcedOpen,
        };
        Some(Transition {
            from: from_state,
            to: BreakerState::Closed,
            reason: "reset".to_owned(),
        })
    }

    /// A serialisable view at `now`.
    pub fn snapshot(&self, now: Instant) -> BreakerSnapshot {
        let (calls, failures) = self.buckets.counts(now);
        let open_remaining_ms = match self.phase {
            Phase::Open { until } => {
                u64::try_from(until.saturating_duration_since(now).as_millis()).unwrap_or(u64::MAX)
            }
            Phase::Closed | Phase::HalfOpen | Phase::ForcedOpen => 0,
        };
        BreakerSnapshot {
            state: self.state(now),
            failures_in_window: failures,
            calls_in_window: calls,
            consecutive: self.consecutive,
            open_remaining_ms,
            trials_in_flight: u32::try_from(self.trials.len()).unwrap_or(u32::MAX),
        }
    }

    fn max_trials(&self) -> usize {
        usize::try_from(self.cfg.half_open_requests.max(1)).unwrap_or(usize::MAX)
    }

    fn verdict(&self, outcome: CallOutcome) -> Verdict {
        match outcome {
            CallOutcome::Success { latency } => {
                if self.cfg.slow_call.is_some_and(|slow| latency > slow) {
                    Verdict::Failure { retry_after: None }
                } else {
                    Verdict::Success
                }
            }
            CallOutcome::Failure {
                class, retry_after, ..
            } => {
                if self.cfg.counted_classes.contains(&class) {
                    Verdict::Failure { retry_after }
                } else {
                    Verdict::Ignored
                }
            }
        }
    }

    fn record_closed(&mut self, now: Instant, verdict: Verdict) -> Option<Transition> {
        let retry_after = match verdict {
            Verdict::Ignored => return None,
            Verdict::Success => {
                self.buckets.add(now, false);
                self.consecutive = 0;
                return None;
            }
            Verdict::Failure { retry_after } => retry_after,
        };
        self.buckets.add(now, true);
        self.consecutive = self.consecutive.saturating_add(1);
        if let Some(n) = self.cfg.failure_threshold {
            let n = usize::try_from(n.max(1)).unwrap_or(usize::MAX);
            self.recent_failures.push_back(now);
            while self.recent_failures.len() > n {
                self.recent_failures.pop_front();
            }
        }
        let reason = self.trip_reason(now)?;
        self.failed_trials = 0;
        let from = self.state(now);
        let until = add(now, self.open_duration(retry_after, self.pending_jitter));
        self.phase = Phase::Open { until };
        Some(Transition {
            from,
            to: BreakerState::Open,
            reason,
        })
    }

    /// Which trip rule, if any, is met right now.
    fn trip_reason(&self, now: Instant) -> Option<String> {
        if let Some(n) = self.cfg.consecutive_failures
            && self.consecutive >= n.max(1)
        {
            return Some(format!("{} consecutive failures", self.consecutive));
        }
        if let Some(n) = self.cfg.failure_threshold {
            let n = usize::try_from(n.max(1)).unwrap_or(usize::MAX);
            if self.recent_failures.len() >= n
                && let Some(&oldest) = self.recent_failures.front()
                && now.saturating_duration_since(oldest) < self.cfg.window
            {
                return Some(format!(
                    "{n} failures within {} ms",
                    self.cfg.window.as_millis()
                ));
            }
        }
        if let Some(rate) = self.cfg.failure_rate {
            let (calls, failures) = self.buckets.counts(now);
            // `>=` so that a configured rate of 1.0 ("all calls failed") can trip.
            if calls >= self.cfg.min_calls.max(1)
                && rate.is_finite()
                && f64::from(failures) >= rate * f64::from(calls)
            {
                return Some(format!(
                    "failure rate {:.0}% over {calls} calls",
                    100.0 * f64::from(failures) / f64::from(calls)
                ));
            }
        }
        None
    }

    /// `half_open_after · 2^failed_trials`, capped by `max_open` when that is
    /// larger, jittered, floored by `retry_after`, capped by [`MAX_HOLD`].
    fn open_duration(&self, retry_after: Option<Duration>, jitter: f64) -> Duration {
        let base = self.cfg.half_open_after;
        let cap = self.cfg.max_open.max(base);
        let factor = 1u32.checked_shl(self.failed_trials).unwrap_or(u32::MAX);
        let grown = base.checked_mul(factor).unwrap_or(Duration::MAX).min(cap);
        let jittered = Duration::try_from_secs_f64(grown.as_secs_f64() * jitter).unwrap_or(grown);
        jittered
            .max(retry_after.unwrap_or(Duration::ZERO))
            .min(MAX_HOLD)
    }

    /// A multiplier uniform in `[1 - j, 1 + j]`, `j = open_jitter` clamped to [0, 1].
    fn draw_jitter<R: Rng + ?Sized>(&self, rng: &mut R) -> f64 {
        let j = self.cfg.open_jitter;
        if !j.is_finite() || j <= 0.0 {
            return 1.0;
        }
        let j = j.min(1.0);
        let u: f64 = rng.random();
        1.0 - j + 2.0 * j * u
    }

    fn reopen(
        &mut self,
        now: Instant,
        retry_after: Option<Duration>,
        jitter: f64,
        reason: &str,
    ) -> Transition {
        self.failed_trials = self.failed_trials.saturating_add(1);
        let until = add(now, self.open_duration(retry_after, jitter));
        let t = self.go(BreakerState::Open, reason);
        self.phase = Phase::Open { until };
        self.trials.clear();
        self.trial_successes = 0;
        t
    }

    fn enter_half_open(&mut self) {
        self.phase = Phase::HalfOpen;
        self.trials.clear();
        self.trial_successes = 0;
    }

    fn go(&self, to: BreakerState, reason: &str) -> Transition {
        Transition {
            from: self.state_now(),
            to,
            reason: reason.to_owned(),
        }
    }

    fn state_now(&self) -> BreakerState {
        match self.phase {
            Phase::Closed => BreakerState::Closed,
            Phase::Open { .. } => BreakerState::Open,
            Phase::HalfOpen => BreakerState::HalfOpen,
            Phase::ForcedOpen => BreakerState::ForcedOpen,
        }
    }

    fn clear_counts(&mut self) {
        self.buckets.clear();
        self.recent_failures.clear();
        self.consecutive = 0;
        self.failed_trials = 0;
        self.trials.clear();
        self.trial_successes = 0;
    }
}

/// `now + d`, with `d` capped at [`MAX_HOLD`] and no overflow panic.
fn add(now: Instant, d: Duration) -> Instant {
    now.checked_add(d.min(MAX_HOLD)).unwrap_or(now)
}

/// A thread-safe [`Breaker`] for the hot path.
///
/// `allow()` in Closed or Disabled is a single atomic load: no lock, no
/// serialisation across threads. Every other state, and every `record`,
/// `trip` and `reset`, takes a short `std::sync::Mutex` and then republishes
/// the state to the atomic.
#[derive(Debug)]
pub struct SharedBreaker {
    state: AtomicU8,
    inner: Mutex<Breaker>,
}

impl Breaker {
    /// Whether this breaker is at rest at `now`: closed, no failure in a
    /// row, no trial pending, no call in its window and no counted failure
    /// younger than the window. A breaker at rest decides every later call
    /// as a new one would (up to where its window's buckets start), so the
    /// gateway may drop it and build a new one on the agent's next call:
    /// that is how a gateway seeing many short-lived agents keeps its
    /// breakers bounded.
    pub fn at_rest(&self, now: Instant) -> bool {
        self.without_failures(now) && self.buckets.counts(now) == (0, 0)
    }

    /// Whether this breaker holds no evidence against its deployment at
    /// `now`: closed, no failure in a row, no trial pending or failed, and
    /// no failure in its window (successes may be). Such a breaker may
    /// leave memory with its agent ([`crate::memory::breaker_may_leave`]):
    /// the agent's next call starts a new one, as a new agent's would, and
    /// all that is lost is the window's successes.
    pub fn without_failures(&self, now: Instant) -> bool {
        self.phase == Phase::Closed
            && self.consecutive == 0
            && self.failed_trials == 0
            && self.trials.is_empty()
            && self.buckets.counts(now).1 == 0
            && self
                .recent_failures
                .back()
                .is_none_or(|&t| now.saturating_duration_since(t) >= self.cfg.window)
    }
}

impl SharedBreaker {
    pub fn new(cfg: impl Into<Arc<BreakerConfig>>) -> Self {
        Self::from_breaker(Breaker::new(cfg))
    }

    /// Wraps an existing breaker (e.g. one built with a trial timeout).
    pub fn from_breaker(b: Breaker) -> Self {
        let s = Self {
            state: AtomicU8::new(0),
            inner: Mutex::new(b),
        };
        s.publish(&s.lock());
        s
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Breaker> {
        // Breaker methods do not panic, so a poisoned lock still holds a
        // consistent breaker.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn publish(&self, b: &Breaker) {
        let st = if b.cfg.enabled {
            b.state_now()
        } else {
            BreakerState::Disabled
        };
        self.state.store(st.to_u8(), Ordering::Release);
    }

    fn fast_allows(&self) -> bool {
        let s = self.state.load(Ordering::Acquire);
        s == BreakerState::Closed.to_u8() || s == BreakerState::Disabled.to_u8()
    }

    /// See [`Breaker::allow`]. Lock-free when Closed or Disabled.
    pub fn allow(&self, now: Instant) -> Admission {
        if self.fast_allows() {
            return Admission::Allowed;
        }
        self.admit(now).0
    }

    /// See [`Breaker::admit`]. Lock-free when Closed or Disabled.
    pub fn admit(&self, now: Instant) -> (Admission, Option<Transition>) {
        if self.fast_allows() {
            return (Admission::Allowed, None);
        }
        let mut b = self.lock();
        let r = b.admit(now);
        self.publish(&b);
        r
    }

    /// See [`Breaker::record`].
    pub fn record<R: Rng + ?Sized>(
        &self,
        now: Instant,
        outcome: CallOutcome,
        rng: &mut R,
    ) -> Option<Transition> {
        let mut b = self.lock();
        let t = b.record(now, outcome, rng);
        self.publish(&b);
        t
    }

    /// See [`Breaker::trip`].
    pub fn trip(&self, now: Instant) -> Option<Transition> {
        let mut b = self.lock();
        let t = b.trip(now);
        self.publish(&b);
        t
    }

    /// See [`Breaker::reset`].
    pub fn reset(&self) -> Option<Transition> {
        let mut b = self.lock();
        let t = b.reset();
        self.publish(&b);
        t
    }

    /// See [`Breaker::state`].
    pub fn state(&self, now: Instant) -> BreakerState {
        self.lock().state(now)
    }

    /// See [`Breaker::at_rest`].
    pub fn at_rest(&self, now: Instant) -> bool {
        self.lock().at_rest(now)
    }

    /// Whether this breaker may leave memory at `now`, its agent having
    /// left (`agent_left`) or not: [`crate::memory::breaker_may_leave`].
    pub fn may_leave(&self, now: Instant, agent_left: bool) -> bool {
        let b = self.lock();
        crate::memory::breaker_may_leave(b.at_rest(now), b.without_failures(now), agent_left)
    }

    /// See [`Breaker::snapshot`].
    pub fn snapshot(&self, now: Instant) -> BreakerSnapshot {
        self.lock().snapshot(now)
    }
}

#[cfg(test)]
mod tests;
