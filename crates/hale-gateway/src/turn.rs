//! The attempt loop of one turn (DESIGN §1 step 8, §2, §3).
//!
//! A turn walks its planned targets in order. For each it asks hale-core
//! whether the target may be called now (cooldown gate, breaker admission),
//! sends one attempt, classifies the outcome, feeds it back to the breaker,
//! cooldown and retry budget, and asks hale-core what to do next: retry the
//! same target after a wait, move on, or stop. Every attempt becomes one row of
//! the turn's timeline. For streams an attempt succeeds only once the first
//! content arrives, so a failure before that is invisible to the caller.

use crate::proto::{ChatRequest, StreamEvent};
use crate::state::Gateway;
use crate::upstream::{self, Answer, AttemptLimits, EventStream, Failure};
use futures::StreamExt;
use hale_core::breaker::{Admission, CallOutcome, Transition};
use hale_core::class::ErrorClass;
use hale_core::classify::{self, Transport};
use hale_core::config::Target;
use hale_core::cooldown::Gate;
use hale_core::event::EventKind;
use hale_core::retry::{self, AttemptFacts, RetryDecision};
use hale_core::select::{self, Pick};
use serde::Serialize;
use std::time::{Duration, Instant};

/// How an attempt was admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    Normal,
    /// A live request let through to a provider in cooldown.
    Probe,
    /// The half-open breaker's trial call.
    Trial,
    /// All targets were cooling down; the soonest was tried anyway.
    LastResort,
}

/// One row of a turn's timeline.
#[derive(Debug, Clone, Serialize)]
pub struct AttemptRecord {
    pub target: String,
    /// Milliseconds since the turn started.
    pub start_ms: u64,
    pub duration_ms: u64,
    pub mode: Mode,
    /// `None` when the attempt succeeded.
    pub class: Option<ErrorClass>,
    pub status: Option<u16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Whether this attempt resumed a broken stream (and how).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resume: Option<&'static str>,
    /// What hale changed or dropped from the client's request to send this
    /// attempt (`model`, `max_tokens`, `dropped: cache_control`, …).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub changes: Vec<String>,
}

/// A turn in progress.
pub struct Turn {
    pub id: String,
    pub agent: String,
    pub task: Option<String>,
    pub started: Instant,
    pub started_ms: u64,
    pub deadline: Instant,
    pub targets: Vec<Target>,
    /// Targets this turn will not call again.
    pub exhausted: Vec<bool>,
    /// 429s per target in this turn.
    pub rate_limits: Vec<u32>,
    pub timeline: Vec<AttemptRecord>,
    pub compacted: bool,
    /// Whether the last successful attempt continued from a prefill.
    pub prefilled: bool,
    /// When set, a `context_overflow` ends the loop at once so the pipeline can
    /// compact and retry (DESIGN §2: "once, only if compaction made it smaller").
    pub compact_on_overflow: bool,
    /// The target that last answered `context_overflow`.
    pub overflow_at: Option<usize>,
    /// The last failed attempt of this turn, across runs of the attempt loop:
    /// when a later run finds no target left, the caller is told about this
    /// failure (e.g. the `context_overflow` that exhausted the route), not
    /// about an empty route.
    pub last_failure: Option<Failure>,
}

/// A live stream after its first content: the events read so far and the rest.
pub struct Live {
    pub head: Vec<StreamEvent>,
    pub rest: EventStream,
    pub malformed: u32,
}

/// What a successful attempt loop returns.
pub enum Served {
    Complete(crate::proto::ChatResponse),
    Stream(Live),
}

impl Turn {
    pub fn new(
        gw: &Gateway,
        id: String,
        agent: String,
        task: Option<String>,
        targets: Vec<Target>,
    ) -> Self {
        let started = Instant::now();
        let n = targets.len();
        Self {
            id,
            agent,
            task,
            started,
            started_ms: crate::state::wall_ms(),
            deadline: started + gw.cfg.retry.turn_deadline,
            targets,
            exhausted: vec![false; n],
            rate_limits: vec![0; n],
            timeline: Vec::new(),
            compacted: false,
            prefilled: false,
            compact_on_overflow: false,
            overflow_at: None,
            last_failure: None,
        }
    }

    /// Whether anything but the first choice served, or anything was compacted.
    pub fn degraded(&self, served: usize) -> bool {
        served != 0 || self.compacted
    }

    fn since_start(&self, t: Instant) -> u64 {
        t.saturating_duration_since(self.started).as_millis() as u64
    }
}

/// Runs attempts until one serves or the loop gives up. `prefill` resumes a
/// broken stream with the text already delivered; `resume` labels such attempts.
pub async fn run(
    gw: &Gateway,
    turn: &mut Turn,
    req: &ChatRequest,
    mut prefill: Option<String>,
    resume: Option<&'static str>,
) -> Result<(usize, Served), Failure> {
    let mut last: Option<Failure> = turn.last_failure.clone();
    loop {
        let now = Instant::now();
        if now >= turn.deadline {
            return Err(last.unwrap_or_else(deadline_failure));
        }
        let Some((idx, mode)) = choose(gw, turn, now, resume.is_some()) else {
            return Err(last.unwrap_or_else(|| Failure {
                class: ErrorClass::Unknown,
                retry_after: None,
                status: None,
                message: "every target is cooling down or has its breaker open".into(),
            }));
        };
        let target = turn.targets[idx].clone();
        let Some(provider) = gw.cfg.provider(&target.provider) else {
            turn.exhausted[idx] = true;
            continue;
        };
        let prt = &gw.providers[&target.provider];
        let breaker = gw.breaker(&turn.agent, &target.provider);
        prt.budget.lock().expect("budget lock").on_request(now);
        let mut attempts_on_target = 0u32;
        let mut prev_wait = None;
        // After a 504 the same target is asked again with a lower max_tokens.
        let mut lowered: Option<ChatRequest> = None;
        loop {
            let req = lowered.as_ref().unwrap_or(req);
            attempts_on_target += 1;
            let start = Instant::now();
            let remaining = turn.deadline.saturating_duration_since(start);
            let headers = match mode {
                Mode::Probe => gw.cfg.retry.probe_timeout.min(provider.timeout),
                Mode::Normal | Mode::Trial | Mode::LastResort => provider.timeout,
            }
            .min(remaining);
            let limits = AttemptLimits {
                headers,
                stream_idle: provider.stream_idle_timeout,
            };
            let model = target.model.as_str();
            // Only targets that accept an assistant prefill get one; others are aligned by the relay.
            let pf = prefill.as_deref().filter(|_| provider.supports_prefill);
            let upstream::Sent {
                result: sent,
                changes,
            } = upstream::send(&gw.http, provider, req, model, pf, &limits).await;
            let result = match sent {
                Ok(Answer::Complete(r)) => Ok(Served::Complete(r)),
                Ok(Answer::Stream(s)) => {
                    let budget = provider
                        .first_token_timeout
                        .min(turn.deadline.saturating_duration_since(start));
                    first_content(s, start + budget).await.map(Served::Stream)
                }
                Err(f) => Err(f),
            };
            let elapsed = start.elapsed();
            gw.metrics
                .attempt(&target, result.as_ref().err().map(|f| f.class), elapsed);
            match result {
                Ok(served) => {
                    turn.timeline.push(AttemptRecord {
                        target: target.to_string(),
                        start_ms: turn.since_start(start),
                        duration_ms: elapsed.as_millis() as u64,
                        mode,
                        class: None,
                        status: Some(200),
                        message: None,
                        resume,
                        changes,
                    });
                    on_success(gw, turn, &target, mode, elapsed);
                    turn.prefilled = pf.is_some();
                    return Ok((idx, served));
                }
                Err(f) => {
                    turn.timeline.push(AttemptRecord {
                        target: target.to_string(),
                        start_ms: turn.since_start(start),
                        duration_ms: elapsed.as_millis() as u64,
                        mode,
                        class: Some(f.class),
                        status: f.status,
                        message: Some(f.message.clone()),
                        resume,
                        changes,
                    });
                    turn.last_failure = Some(f.clone());
                    // A target that rejects an assistant prefill is asked again without it;
                    // that rejection is never what the caller sees, nor held against the provider.
                    if pf.is_some() && f.class == ErrorClass::BadRequest {
                        prefill = None;
                        attempts_on_target -= 1;
                        continue;
                    }
                    if f.class == ErrorClass::ContextOverflow && turn.compact_on_overflow {
                        turn.overflow_at = Some(idx);
                        return Err(f);
                    }
                    on_failure(gw, turn, &target, &f, elapsed);
                    if f.class == ErrorClass::RateLimit {
                        turn.rate_limits[idx] += 1;
                    }
                    let has_next = turn
                        .exhausted
                        .iter()
                        .enumerate()
                        .any(|(i, e)| i != idx && !e);
                    let probing = matches!(mode, Mode::Probe | Mode::Trial | Mode::LastResort);
                    // A probe is never retried: no retry token is spent on it.
                    let budget_ok = probing
                        || !classify::rule(f.class).retry_same_target
                        || prt
                            .budget
                            .lock()
                            .expect("budget lock")
                            .try_retry(Instant::now());
                    let facts = AttemptFacts {
                        class: f.class,
                        retry_after: f.retry_after,
                        attempts_on_target,
                        rate_limits_on_target_this_turn: turn.rate_limits[idx],
                        prev_wait,
                        has_next_target: has_next,
                        time_left: turn.deadline.saturating_duration_since(Instant::now()),
                        budget_ok,
                        probing,
                    };
                    let decision = retry::decide(&gw.cfg.retry, &facts, &mut rand::rng());
                    match decision {
                        RetryDecision::RetrySame { wait } => {
                            // The breaker may have opened on this very failure.
                            if let Admission::Rejected { .. } = breaker.allow(Instant::now() + wait)
                            {
                                turn.exhausted[idx] = true;
                                last = Some(f);
                                break;
                            }
                            gw.emit(
                                gw.event(EventKind::AgentRetry)
                                    .agent(&turn.agent)
                                    .turn(&turn.id)
                                    .payload(serde_json::json!({
                                        "target": target.to_string(),
                                        "class": f.class,
                                        "attempt": attempts_on_target,
                                        "wait_ms": wait.as_millis() as u64,
                                    })),
                            );
                            tokio::time::sleep(wait).await;
                            prev_wait = Some(wait);
                            if f.status == Some(504) {
                                let mut r = req.clone();
                                r.max_tokens = Some(retry::lowered_max_tokens(req.max_tokens));
                                lowered = Some(r);
                            }
                        }
                        RetryDecision::NextTarget => {
                            turn.exhausted[idx] = true;
                            last = Some(f);
                            break;
                        }
                        RetryDecision::Stop => return Err(f),
                    }
                }
            }
        }
    }
}

fn deadline_failure() -> Failure {
    Failure {
        class: ErrorClass::Timeout,
        retry_after: None,
        status: None,
        message: "the turn's deadline passed".into(),
    }
}

/// Picks the next target: cooldown gates and breaker admissions in plan order.
///
/// When every target is skipped, the one whose wait ends first is still
/// called as a last resort — once, when the turn has made no call yet (one
/// call beats failing without any), or when resuming a broken stream (the
/// caller already holds part of the answer: the target that broke, alone on
/// its route, may still finish it rather than the answer ending cut).
fn choose(gw: &Gateway, turn: &Turn, now: Instant, resuming: bool) -> Option<(usize, Mode)> {
    let probe_interval = gw.cfg.retry.probe_interval;
    let mut gates = Vec::with_capacity(turn.targets.len());
    let mut trial = vec![false; turn.targets.len()];
    for (i, t) in turn.targets.iter().enumerate() {
        if turn.exhausted[i] {
            gates.push(Gate::Skip {
                until: now,
                class: ErrorClass::Unknown,
            });
            continue;
        }
        let Some(prt) = gw.providers.get(&t.provider) else {
            gates.push(Gate::Skip {
                until: now,
                class: ErrorClass::Unknown,
            });
            continue;
        };
        let gate = prt
            .cooldown
            .lock()
            .expect("cooldown lock")
            .gate(probe_interval, now);
        let gate = match gate {
            Gate::Probe => Gate::Probe,
            Gate::Skip { until, class } => Gate::Skip { until, class },
            Gate::Open => match gw.breaker(&turn.agent, &t.provider).allow(now) {
                Admission::Allowed => Gate::Open,
                Admission::Trial => {
                    trial[i] = true;
                    Gate::Open
                }
                Admission::Rejected { retry_in } => Gate::Skip {
                    until: now + retry_in,
                    class: ErrorClass::Unknown,
                },
            },
        };
        let stop = matches!(gate, Gate::Open | Gate::Probe);
        gates.push(gate);
        if stop {
            break;
        }
    }
    let tried: Vec<bool> = turn.exhausted[..gates.len()].to_vec();
    match select::pick(&gates, &tried) {
        Pick::Normal(i) if trial[i] => Some((i, Mode::Trial)),
        Pick::Normal(i) => Some((i, Mode::Normal)),
        Pick::Probe(i) => Some((i, Mode::Probe)),
        Pick::LastResort(i) if select::last_resort_allowed(turn.timeline.len(), resuming) => {
            Some((i, Mode::LastResort))
        }
        Pick::LastResort(_) | Pick::None => None,
    }
}

/// Reads a fresh stream until its first content event (or its end).
async fn first_content(mut s: EventStream, by: Instant) -> Result<Live, Failure> {
    let mut head = Vec::new();
    let mut malformed = 0;
    loop {
        let next = tokio::time::timeout_at(by.into(), s.next()).await;
        match next {
            Err(_) => {
                return Err(Failure::transport(
                    Transport::FirstTokenTimeout,
                    "no first token in time",
                ));
            }
            Ok(None) => {
                return Err(Failure::transport(
                    Transport::StreamEndedWithoutFinish,
                    "stream ended before any content",
                ));
            }
            Ok(Some(Err(f))) => return Err(f),
            Ok(Some(Ok(None))) => malformed += 1,
            Ok(Some(Ok(Some(evs)))) => {
                let content = evs.iter().any(is_content);
                head.extend(evs);
                if content {
                    return Ok(Live {
                        head,
                        rest: s,
                        malformed,
                    });
                }
            }
        }
    }
}

/// Whether an event is content the caller would see as the answer starting.
pub fn is_content(ev: &StreamEvent) -> bool {
    match ev {
        StreamEvent::TextDelta(t) => !t.is_empty(),
        StreamEvent::ToolCallStart { .. } | StreamEvent::Finish(_) | StreamEvent::Done => true,
        StreamEvent::Start { .. } | StreamEvent::ToolCallDelta { .. } | StreamEvent::Usage(_) => {
            false
        }
    }
}

/// Feeds a success back to the breaker and cooldown.
pub fn on_success(gw: &Gateway, turn: &Turn, target: &Target, mode: Mode, latency: Duration) {
    let now = Instant::now();
    let breaker = gw.breaker(&turn.agent, &target.provider);
    let mut transitions: Vec<Transition> = Vec::new();
    if let Some(t) = breaker.record(now, CallOutcome::Success { latency }, &mut rand::rng()) {
        transitions.push(t);
    }
    if mode == Mode::Probe {
        // A successful probe closes the breaker too.
        if let Some(t) = breaker.reset() {
            transitions.push(t);
        }
    }
    for t in transitions {
        breaker_event(gw, turn, target, &t);
    }
    let ended = gw.providers[&target.provider]
        .cooldown
        .lock()
        .expect("cooldown lock")
        .on_success(now);
    if ended {
        gw.emit(
            gw.event(EventKind::ProviderRecovered)
                .agent(&turn.agent)
                .turn(&turn.id)
                .payload(serde_json::json!({"provider": target.provider, "via": mode})),
        );
    }
}

/// Feeds a failure back to the breaker and cooldown.
pub fn on_failure(gw: &Gateway, turn: &Turn, target: &Target, f: &Failure, latency: Duration) {
    let now = Instant::now();
    let breaker = gw.breaker(&turn.agent, &target.provider);
    let outcome = CallOutcome::Failure {
        class: f.class,
        latency,
        retry_after: f.retry_after,
    };
    if let Some(t) = breaker.record(now, outcome, &mut rand::rng()) {
        breaker_event(gw, turn, target, &t);
    }
    let applied = gw.providers[&target.provider]
        .cooldown
        .lock()
        .expect("cooldown lock")
        .on_failure(&gw.cfg.cooldown, f.class, f.retry_after, now);
    if let Some(d) = applied {
        gw.emit(
            gw.event(EventKind::ProviderCooldown)
                .agent(&turn.agent)
                .turn(&turn.id)
                .payload(serde_json::json!({
                    "provider": target.provider,
                    "class": f.class,
                    "cooldown_ms": d.as_millis() as u64,
                })),
        );
    }
}

fn breaker_event(gw: &Gateway, turn: &Turn, target: &Target, t: &Transition) {
    use hale_core::breaker::BreakerState;
    gw.emit(
        gw.event(EventKind::BreakerStateChanged)
            .agent(&turn.agent)
            .turn(&turn.id)
            .payload(serde_json::json!({
                "provider": target.provider,
                "from": t.from,
                "to": t.to,
                "reason": t.reason,
            })),
    );
    // Health: an agent with any breaker open is failing.
    let any_open = gw.breakers_of(&turn.agent).iter().any(|(_, b)| {
        matches!(
            b.state(Instant::now()),
            BreakerState::Open | BreakerState::ForcedOpen
        )
    });
    gw.health.set_breaker_open(&turn.agent, any_open);
    if matches!(t.to, BreakerState::Open | BreakerState::ForcedOpen) {
        gw.emit(
            gw.event(EventKind::AgentCircuitOpen)
                .agent(&turn.agent)
                .turn(&turn.id)
                .payload(serde_json::json!({"provider": target.provider, "reason": t.reason})),
        );
    }
}
