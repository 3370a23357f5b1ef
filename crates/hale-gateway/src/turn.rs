//! The attempt loop of one turn (step 8 of docs/architecture.md, "One
//! request's path"; the rules: docs/operations.md, "Failure classes").
//!
//! A turn walks its planned deployments. For each it asks hale-core which to
//! call next (`select::pick` over the deployments' gates and breakers: in
//! rotation first, a due probe, else fail open to the best recent success
//! ratio), sends one attempt, classifies the outcome, feeds it back to the
//! [`Deployments`](crate::deployments::Deployments) component (health per
//! scope, breaker, retry budget), and asks hale-core what to do next: retry
//! the same deployment after a wait, move on, or stop. The last deployment
//! standing is retried under its class's policy rather than the turn giving
//! up. Every attempt becomes one row of the turn's timeline. For streams an
//! attempt succeeds only once the first content arrives, so a failure before
//! that is invisible to the caller.
//!
//! An attempt still without a first token at its deployment's slow point
//! (`hale_core::slow`; docs/configuration.md, "hedging") is counted then as
//! a slow outlier of that deployment, and — when it is not racing a hedge and
//! another deployment in rotation is left — given up as a `timeout`, so a
//! deployment that turned slow costs a turn its slow point, not its silence.
//! A hedge's loser silent past its own hedge point counts too
//! (`slow::lost_race`), and probes are hedged, so once a deployment turned
//! slow its hedged turns eject it and its probes cost a hedge point.

use crate::deployments::{Deployments, Effect};
use crate::emit::Emitter;
use crate::error::HaleError;
use crate::health::HealthRt;
use crate::history::HistoryRt;
use crate::upstream::{self, Answer, AttemptLimits, EventStream, Failure};
use futures::StreamExt;
use hale_core::breaker::{Admission, BreakerState, SharedBreaker, Transition};
use hale_core::class::ErrorClass;
use hale_core::classify::{self, Transport};
use hale_core::config::{Config, ProviderConfig, Target};
use hale_core::deployment::Gate;
use hale_core::event::EventKind;
use hale_core::retry::{self, AttemptFacts, RetryBudget, RetryDecision};
use hale_core::select::{self, Candidate, Pick};
use hale_core::slow::Verdict;
use hale_proto::{ChatRequest, StreamEvent};
use serde::Serialize;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tracing::Instrument;

/// The components an attempt loop uses, lent by the pipeline for one turn:
/// the deployments it picks from and feeds back, the per-minute history of
/// outcomes, the health runtime (a `failing` signal when a breaker opens)
/// and the emitter for its events.
#[derive(Clone, Copy)]
pub struct Env<'a> {
    pub cfg: &'a Config,
    /// The provider clients (HTTP, vertex token sources, bedrock credentials).
    pub upstream: &'a upstream::Client,
    pub emit: &'a Emitter,
    pub deployments: &'a Deployments,
    pub history: &'a HistoryRt,
    pub health: &'a HealthRt,
    /// Each deployment's usual streaming rate (the relay's crawl rule).
    pub paces: &'a crate::paces::Paces,
}

/// How an attempt was admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    Normal,
    /// A live request let through to an ejected deployment.
    Probe,
    /// The half-open breaker's trial call.
    Trial,
    /// Every untried deployment was ejected or refused by its breaker: this
    /// one (best recent success ratio) was tried anyway (fail open).
    FailOpen,
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
    /// Its part in a hedged first token (docs/configuration.md, "hedging").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hedge: Option<HedgeRole>,
}

/// An attempt's part in a hedge: the attempt started because another was
/// silent past its hedge point, or the one of the two that lost the race
/// and was cancelled (its row has no class: it did not fail).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HedgeRole {
    Hedge,
    Cancelled,
}

/// The loser of a hedge: its deployment and the input tokens it was
/// charged (hale's estimate: it was cancelled before any usage came back).
#[derive(Debug, Clone)]
pub struct HedgeLoss {
    pub target: Target,
    pub input_tokens: u64,
}

/// A deployment of the plan passed over in this turn, and why
/// (`hale_core::select::passed_over`): the evidence of a skipped primary.
/// Journalled with the timeline's rows (marked by `skipped`) and shown
/// apart from them by `GET /turns/{id}`, so the timeline stays one row per
/// attempt.
#[derive(Debug, Clone, Serialize)]
pub struct SkipRecord {
    pub target: String,
    /// Milliseconds since the turn started.
    pub start_ms: u64,
    /// `ejected`, `breaker_open`, `tripped`, or `previous_response_not_held`
    /// (a Responses turn's `previous_response_id` it cannot hold).
    pub skipped: &'static str,
}

/// A turn in progress.
pub struct Turn {
    pub id: String,
    pub agent: String,
    /// The agent has an identity (header or key default): it may be paused.
    pub named: bool,
    /// Whether this turn is a paused agent's trial.
    pub admission: crate::agents::Admission,
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
    /// Deployments passed over, each once ([`SkipRecord`]).
    pub skipped: Vec<SkipRecord>,
    pub compacted: bool,
    /// Whether the last successful attempt continued from a prefill.
    pub prefilled: bool,
    /// When set, a `context_overflow` ends the loop at once so the pipeline can
    /// compact and retry (once, and only if compaction made the request
    /// smaller).
    pub compact_on_overflow: bool,
    /// The target that last answered `context_overflow`.
    pub overflow_at: Option<usize>,
    /// The last failed attempt of this turn, across runs of the attempt loop:
    /// when a later run finds no target left, the caller is told about this
    /// failure (e.g. the `context_overflow` that exhausted the route), not
    /// about an empty route.
    pub last_failure: Option<Failure>,
    /// Holds the agent in memory for as long as the turn lives (a stream's
    /// turn lives until the stream ends); `None` for turns hale makes itself.
    pub hold: Option<crate::agents::TurnHold>,
    /// A Responses turn's conversation (`previous_response_id`, what is kept).
    pub responses: Option<crate::responses::Continuation>,
    /// Whom the turn is for: an agent, or hale's own compaction (its
    /// attempts carry [`upstream::COMPACTION_HEADER`]).
    pub purpose: upstream::Purpose,
    /// The cancelled losers of this turn's hedges, charged to its task.
    pub hedge_losses: Vec<HedgeLoss>,
}

/// A live stream after its first content: the events read so far and the rest.
pub struct Live {
    pub head: Vec<StreamEvent>,
    pub rest: EventStream,
    pub malformed: u32,
}

/// What a successful attempt loop returns.
pub enum Served {
    Complete(upstream::Reply),
    Stream(Live),
}

impl Turn {
    pub fn new(
        cfg: &Config,
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
            named: false,
            admission: crate::agents::Admission::Serve,
            task,
            started,
            started_ms: crate::emit::wall_ms(),
            deadline: started + cfg.retry.turn_deadline,
            targets,
            exhausted: vec![false; n],
            rate_limits: vec![0; n],
            timeline: Vec::new(),
            skipped: Vec::new(),
            compacted: false,
            prefilled: false,
            compact_on_overflow: false,
            overflow_at: None,
            hold: None,
            last_failure: None,
            responses: None,
            purpose: upstream::Purpose::Agent,
            hedge_losses: Vec::new(),
        }
    }

    /// Whether anything but the first choice served, or anything was compacted.
    pub fn degraded(&self, served: usize) -> bool {
        served != 0 || self.compacted
    }

    /// The caller's error for a turn that failed with `f` (its timeline in
    /// the error's `hale` object).
    pub fn error(&self, f: &Failure) -> HaleError {
        HaleError::from_failure(
            &self.id,
            &self.agent,
            serde_json::to_value(&self.timeline).unwrap_or_default(),
            self.timeline.len(),
            f,
        )
    }

    /// The timeline's rows as journalled, as JSON text: one per attempt,
    /// then one per deployment passed over (marked by `skipped`). Written
    /// straight from the records (no `Value` between).
    pub fn journal_rows(&self) -> String {
        /// One journalled row.
        #[derive(Serialize)]
        #[serde(untagged)]
        enum Row<'a> {
            Attempt(&'a AttemptRecord),
            Skipped(&'a SkipRecord),
        }
        struct Rows<'a>(&'a Turn);
        impl Serialize for Rows<'_> {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                let attempts = self.0.timeline.iter().map(Row::Attempt);
                s.collect_seq(attempts.chain(self.0.skipped.iter().map(Row::Skipped)))
            }
        }
        // Nothing in a row can fail to serialize (no maps with non-string keys).
        serde_json::to_string(&Rows(self)).unwrap_or_else(|_| "[]".into())
    }

    /// Leaves out the deployments that cannot serve this Responses turn's
    /// `previous_response_id` (`hale_core::responses::link`), each noted as
    /// skipped; whether any is left.
    pub fn leave_out_unheld(&mut self, cfg: &Config) -> bool {
        let Some(c) = &self.responses else {
            return true;
        };
        let mut left = false;
        for (i, t) in self.targets.iter().enumerate() {
            let responses = cfg
                .provider(&t.provider)
                .is_some_and(|p| upstream::dialect_of(p) == hale_proto::Dialect::Responses);
            match c.link(&t.provider, responses) {
                hale_core::responses::Link::Skip => {
                    self.exhausted[i] = true;
                    self.skipped.push(SkipRecord {
                        target: crate::deployments::key(t),
                        start_ms: 0,
                        skipped: "previous_response_not_held",
                    });
                }
                hale_core::responses::Link::Passthrough | hale_core::responses::Link::Expand => {
                    left |= !self.exhausted[i];
                }
            }
        }
        left
    }

    /// Notes the deployments `choose` passed over, each once per turn.
    fn note_passed_over(&mut self, over: select::PassedOver, now: Instant) {
        for (i, why) in over {
            let target = crate::deployments::key(&self.targets[i]);
            if self.skipped.iter().any(|s| s.target == target) {
                continue;
            }
            let start_ms = self.since_start(now);
            self.skipped.push(SkipRecord {
                target,
                start_ms,
                skipped: why.as_str(),
            });
        }
    }

    fn since_start(&self, t: Instant) -> u64 {
        t.saturating_duration_since(self.started).as_millis() as u64
    }
}

/// Runs attempts until one serves or the loop gives up. `prefill` resumes a
/// broken stream with the text already delivered; `resume` labels such attempts.
pub async fn run(
    env: Env<'_>,
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
        let Some((idx, mode, over)) = choose(env, turn, now) else {
            return Err(last.unwrap_or_else(forced_out_failure));
        };
        turn.note_passed_over(over, now);
        let Some(mut on) = on_target(env, turn, idx, mode, now) else {
            turn.exhausted[idx] = true;
            continue;
        };
        let mut idx = idx;
        let mut own = own_request(turn, &on);
        // After a 504 the same target is asked again with a lower max_tokens.
        let mut lowered: Option<ChatRequest> = None;
        loop {
            let base: &ChatRequest = own.as_deref().unwrap_or(req);
            let sent = lowered.as_ref().unwrap_or(base);
            on.attempts += 1;
            // Only targets that accept an assistant prefill get one; others are aligned by the relay.
            let pf = prefill.as_deref().filter(|_| on.provider.supports_prefill);
            let (result, elapsed, hedge, slow) =
                attempt(env, turn, &on, sent, req, pf, resume).await;
            // The hedge's outcome is the one to act on: the loop goes on with its deployment.
            if let Some(h) = hedge {
                turn.exhausted[idx] = true;
                on = h;
                on.attempts = 1;
                idx = on.idx;
                own = own_request(turn, &on);
                lowered = None;
            }
            let req = lowered.as_ref().unwrap_or(own.as_deref().unwrap_or(req));
            let f = match result {
                Ok(served) => {
                    on_success(env, turn, &on.target, on.mode, elapsed, slow);
                    turn.prefilled = pf.is_some();
                    return Ok((idx, served));
                }
                Err(f) => f,
            };
            turn.last_failure = Some(f.clone());
            // A target that rejects an assistant prefill is asked again without it;
            // that rejection is never what the caller sees, nor held against the provider.
            if pf.is_some() && f.class == ErrorClass::BadRequest {
                prefill = None;
                on.attempts -= 1;
                continue;
            }
            if f.class == ErrorClass::ContextOverflow && turn.compact_on_overflow {
                turn.overflow_at = Some(idx);
                return Err(f);
            }
            on_failure(env, turn, &on.target, &f, elapsed, slow);
            if f.class == ErrorClass::RateLimit {
                turn.rate_limits[idx] += 1;
            }
            let (decision, has_next) = next_move(env, turn, &on, &f);
            match decision {
                RetryDecision::RetrySame { wait } => {
                    // The breaker may have opened on this very failure:
                    // move on when a deployment in rotation is left;
                    // otherwise this is the best bet and is retried.
                    if let Admission::Rejected { .. } = on.breaker.allow(Instant::now() + wait)
                        && has_next
                    {
                        turn.exhausted[idx] = true;
                        last = Some(f);
                        break;
                    }
                    announce_retry(env, turn, &on, &f, wait);
                    tokio::time::sleep(wait).await;
                    on.prev_wait = Some(wait);
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

/// The deployment the loop is calling: what stays fixed across its
/// attempts, and the count and last wait of those attempts.
struct OnTarget<'a> {
    idx: usize,
    target: Target,
    provider: &'a ProviderConfig,
    /// Its key (`deployments::key`): the target of its timeline rows.
    deployment: String,
    mode: Mode,
    breaker: Arc<SharedBreaker>,
    budget: Option<&'a Mutex<RetryBudget>>,
    attempts: u32,
    prev_wait: Option<Duration>,
}

/// Target `idx` as the loop calls it, its request counted in its provider's
/// retry budget; `None` when the config has no such provider.
fn on_target<'a>(
    env: Env<'a>,
    turn: &Turn,
    idx: usize,
    mode: Mode,
    now: Instant,
) -> Option<OnTarget<'a>> {
    let target = turn.targets[idx].clone();
    let provider = env.cfg.provider(&target.provider)?;
    let deployment = crate::deployments::key(&target);
    let breaker = env.deployments.breaker(&turn.agent, &deployment);
    let budget = env.deployments.budget(&target.provider);
    if let Some(b) = budget {
        b.lock().expect("budget lock").on_request(now);
    }
    env.deployments.hedge_request(&turn.agent, &deployment, now);
    Some(OnTarget {
        idx,
        target,
        provider,
        deployment,
        mode,
        breaker,
        budget,
        attempts: 0,
        prev_wait: None,
    })
}

/// A Responses conversation: the deployment holding the previous response
/// gets the client's request (returned), any other the expanded one (`None`).
fn own_request(turn: &Turn, on: &OnTarget<'_>) -> Option<Arc<ChatRequest>> {
    let speaks_responses = upstream::dialect_of(on.provider) == hale_proto::Dialect::Responses;
    match turn
        .responses
        .as_ref()
        .map(|c| (c.link(&on.target.provider, speaks_responses), c))
    {
        Some((hale_core::responses::Link::Passthrough, c)) => c.passthrough(),
        Some((hale_core::responses::Link::Expand | hale_core::responses::Link::Skip, _)) | None => {
            None
        }
    }
}

/// One model call as sent: its outcome, what hale changed in the request,
/// when it started and how long it took. Borrows nothing of the turn, so two
/// can race (a hedge).
struct Call {
    result: Result<Served, Failure>,
    changes: Vec<String>,
    start: Instant,
    elapsed: Duration,
    /// Counted as a slow outlier of its deployment ([`Deployments::on_slow`]).
    slow: bool,
}

/// What of the turn a [`call`] needs, copied out so the turn stays free.
#[derive(Clone, Copy)]
struct CallCx<'t> {
    turn_id: &'t str,
    n: usize,
    deadline: Instant,
    purpose: upstream::Purpose,
}

/// Sends one call to `on` and, for a stream, reads it up to its first content.
async fn call(
    env: Env<'_>,
    cx: CallCx<'_>,
    on: &OnTarget<'_>,
    req: &ChatRequest,
    pf: Option<&str>,
) -> Call {
    let (provider, mode) = (on.provider, on.mode);
    let start = Instant::now();
    let remaining = cx.deadline.saturating_duration_since(start);
    let headers = match mode {
        Mode::Probe => env.cfg.retry.probe_timeout.min(provider.timeout),
        Mode::Normal | Mode::Trial | Mode::FailOpen => provider.timeout,
    }
    .min(remaining);
    let limits = AttemptLimits {
        headers,
        stream_idle: provider.stream_idle_timeout,
    };
    let span = tracing::info_span!(
        "attempt",
        turn_id = %cx.turn_id,
        n = cx.n,
        target = %on.target,
        mode = ?mode,
        class = tracing::field::Empty,
    );
    // Boxed: the attempt's future (the HTTP client's state) was
    // most of the size of every future that awaits it (this loop,
    // compaction's summaries, the turn: ~8 KB), and a future is
    // copied whole each time it is moved before its first poll
    // (into `instrument`, a box, a task).
    let sent = Box::pin(upstream::send(
        env.upstream,
        provider,
        req,
        on.target.model.as_str(),
        pf,
        &limits,
        cx.purpose,
    ));
    let upstream::Sent {
        result: sent,
        changes,
    } = sent.instrument(span.clone()).await;
    let result = match sent {
        Ok(Answer::Complete(r)) => Ok(Served::Complete(r)),
        Ok(Answer::Stream(s)) => {
            let budget = provider
                .first_token_timeout
                .min(cx.deadline.saturating_duration_since(start));
            first_content(s, start + budget).await.map(Served::Stream)
        }
        Err(f) => Err(f),
    };
    let elapsed = start.elapsed();
    span.record(
        "class",
        result.as_ref().map_or_else(|f| f.class.as_str(), |_| "ok"),
    );
    Call {
        result,
        changes,
        start,
        elapsed,
        slow: false,
    }
}

/// Writes a finished call as a row of the timeline and counts it in the
/// metrics; a first token (or complete answer) goes into its deployment's
/// first-token history.
fn record(
    env: Env<'_>,
    turn: &mut Turn,
    on: &OnTarget<'_>,
    c: &mut Call,
    resume: Option<&'static str>,
    hedge: Option<HedgeRole>,
) {
    env.emit.metrics.attempt(
        &on.target,
        c.result.as_ref().err().map(|f| f.class),
        c.elapsed,
    );
    if c.result.is_ok() {
        let verdict = env
            .deployments
            .first_token(&on.deployment, c.elapsed, Instant::now());
        match verdict {
            // Late, though no timer caught it (a hedge's, or a race): counted now.
            Verdict::Slow { .. } if !c.slow => {
                c.slow = true;
                count_slow(env, turn, on);
            }
            Verdict::Slow { .. } | Verdict::Usual | Verdict::Unjudged => {}
        }
    }
    turn.timeline.push(AttemptRecord {
        target: on.deployment.clone(),
        start_ms: turn.since_start(c.start),
        duration_ms: c.elapsed.as_millis() as u64,
        mode: on.mode,
        class: c.result.as_ref().err().map(|f| f.class),
        status: c.result.as_ref().map_or_else(|f| f.status, |_| Some(200)),
        message: c.result.as_ref().err().map(|f| f.message.clone()),
        resume,
        changes: std::mem::take(&mut c.changes),
        hedge,
    });
}

/// The row of a hedge's loser, cancelled `start`..now, and its cost: hale's
/// estimate of its input tokens (it was cancelled before any usage came
/// back), charged to the turn's task with the winner's usage.
fn cancelled(
    env: Env<'_>,
    turn: &mut Turn,
    on: &OnTarget<'_>,
    start: Instant,
    req: &ChatRequest,
) -> (u64, f64) {
    let elapsed = start.elapsed();
    turn.timeline.push(AttemptRecord {
        target: on.deployment.clone(),
        start_ms: turn.since_start(start),
        duration_ms: elapsed.as_millis() as u64,
        mode: on.mode,
        class: None,
        status: None,
        message: Some("cancelled: the other attempt of the hedge answered first".into()),
        resume: None,
        changes: Vec::new(),
        hedge: Some(HedgeRole::Cancelled),
    });
    let input_tokens = input_tokens_estimate(req);
    let cost = hale_core::models::price(&on.target.model, &env.cfg.prices)
        .map_or(0.0, |p| hale_core::budget::cost(p, input_tokens, 0));
    turn.hedge_losses.push(HedgeLoss {
        target: on.target.clone(),
        input_tokens,
    });
    (input_tokens, cost)
}

/// One attempt on `on` with `req`; hedged (docs/configuration.md, "hedging")
/// when it has no first token by its deployment's hedge point, a next
/// deployment in rotation is left, and both hedge budgets grant it: then the
/// same request (`turn_req`, as that deployment is sent it) goes there too,
/// the first of the two to produce a first token serves and the other is
/// cancelled, judged by [`judge_loser`]. An attempt silent at its
/// deployment's slow point is counted as a slow outlier then (and given up,
/// see [`watched`], unless it is racing). Returns the outcome to act on, its
/// duration, the hedge's deployment when that outcome is the hedge's, and
/// whether that outcome's attempt was counted as slow.
async fn attempt<'a>(
    env: Env<'a>,
    turn: &mut Turn,
    on: &OnTarget<'a>,
    req: &ChatRequest,
    turn_req: &ChatRequest,
    pf: Option<&str>,
    resume: Option<&'static str>,
) -> (
    Result<Served, Failure>,
    Duration,
    Option<OnTarget<'a>>,
    bool,
) {
    let turn_id = turn.id.clone();
    let cx = CallCx {
        turn_id: &turn_id,
        n: turn.timeline.len() + 1,
        deadline: turn.deadline,
        purpose: turn.purpose,
    };
    let first_start = Instant::now();
    let slow_at = env
        .deployments
        .slow_point(&on.deployment, first_start)
        .map(|p| (first_start, p));
    let mut first = Box::pin(call(env, cx, on, req, pf));
    // A plain call or a probe is hedged: not a resumed stream, a trial or
    // fail-open. A probe of a deployment still slow then costs its turn the
    // hedge point, not the slow point.
    let hedgeable = matches!(on.mode, Mode::Normal | Mode::Probe);
    let point = (pf.is_none() && resume.is_none() && hedgeable)
        .then(|| env.deployments.hedge_point(&on.deployment, Instant::now()))
        .flatten();
    let plain = |mut c: Call, turn: &mut Turn| {
        record(env, turn, on, &mut c, resume, None);
        (c.result, c.elapsed, None, c.slow)
    };
    let Some(point) = point else {
        let c = watched(env, turn, on, first.as_mut(), slow_at).await;
        return plain(c, turn);
    };
    tokio::select! {
        c = &mut first => return plain(c, turn),
        () = tokio::time::sleep(point) => {}
    }
    let now = Instant::now();
    let Some(second) = hedge_target(env, turn, on, now) else {
        let c = watched(env, turn, on, first.as_mut(), slow_at).await;
        return plain(c, turn);
    };
    let own = own_request(turn, &second);
    let second_req: &ChatRequest = own.as_deref().unwrap_or(turn_req);
    let cx2 = CallCx { n: cx.n + 1, ..cx };
    let mut hedge = Box::pin(call(env, cx2, &second, second_req, None));
    // The first to finish; when it failed, the other's outcome is the answer.
    let (winner_is_hedge, mut c, first_slow) =
        race(env, turn, on, first.as_mut(), hedge.as_mut(), slow_at).await;
    let (winner, loser, loser_req) = if winner_is_hedge {
        (&second, on, req)
    } else {
        (on, &second, second_req)
    };
    let role = |is_hedge: bool| is_hedge.then_some(HedgeRole::Hedge);
    if c.result.is_ok() {
        record(env, turn, winner, &mut c, resume, role(winner_is_hedge));
        let loser_start = if winner_is_hedge { first_start } else { now };
        // A loser already counted at its slow point is not counted twice.
        if !(winner_is_hedge && first_slow) {
            judge_loser(env, turn, loser, loser_start.elapsed());
        }
        let (tokens, cost) = cancelled(env, turn, loser, loser_start, loser_req);
        drop(first);
        drop(hedge);
        hedged_event(env, turn, on, &second, winner, point, tokens, cost);
        let (result, elapsed) = (c.result, c.elapsed);
        return (result, elapsed, winner_is_hedge.then_some(second), c.slow);
    }
    // The first to finish failed: held against its deployment, the other answers.
    record(env, turn, winner, &mut c, resume, role(winner_is_hedge));
    if let Err(f) = &c.result {
        on_failure(env, turn, &winner.target, f, c.elapsed, c.slow);
    }
    if winner_is_hedge {
        turn.exhausted[second.idx] = true;
        drop(hedge);
        let mut c = if first_slow {
            first.await
        } else {
            watched(env, turn, on, first.as_mut(), slow_at).await
        };
        c.slow |= first_slow;
        plain(c, turn)
    } else {
        drop(first);
        let mut c = hedge.await;
        record(env, turn, &second, &mut c, None, Some(HedgeRole::Hedge));
        (c.result, c.elapsed, Some(second), c.slow)
    }
}

/// The first of `first` (on `on`) and `hedge` to finish: whether it is the
/// hedge, its call, and whether `first` passed its slow point meanwhile —
/// counted then ([`count_slow`]): a loser of the race silent so long was
/// slow, whoever won.
async fn race<F: std::future::Future<Output = Call>, H: std::future::Future<Output = Call>>(
    env: Env<'_>,
    turn: &mut Turn,
    on: &OnTarget<'_>,
    mut first: std::pin::Pin<&mut F>,
    mut hedge: std::pin::Pin<&mut H>,
    slow_at: Option<(Instant, Duration)>,
) -> (bool, Call, bool) {
    let mut first_slow = false;
    loop {
        let slow_timer = async {
            match slow_at {
                Some((start, p)) if !first_slow => {
                    tokio::time::sleep_until((start + p).into()).await;
                }
                Some(_) | None => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            mut c = first.as_mut() => {
                c.slow |= first_slow;
                return (false, c, first_slow);
            }
            c = hedge.as_mut() => return (true, c, first_slow),
            () = slow_timer => {
                first_slow = true;
                count_slow(env, turn, on);
            }
        }
    }
}

/// Awaits `call` on `on`, watching for its deployment's slow point
/// (`slow_at`: when the call started, and the slow point): a call still
/// without a first token then is counted as a slow outlier
/// ([`count_slow`]), and — a normal attempt or a probe, with another
/// deployment in rotation left — given up as a `timeout` so the turn moves
/// on; otherwise (a trial, fail-open, the last one standing) it is waited
/// for as before.
async fn watched<F: std::future::Future<Output = Call>>(
    env: Env<'_>,
    turn: &mut Turn,
    on: &OnTarget<'_>,
    mut call: std::pin::Pin<&mut F>,
    slow_at: Option<(Instant, Duration)>,
) -> Call {
    let Some((start, point)) = slow_at else {
        return call.await;
    };
    tokio::select! {
        c = call.as_mut() => return c,
        () = tokio::time::sleep_until((start + point).into()) => {}
    }
    count_slow(env, turn, on);
    let now = Instant::now();
    let give_up = matches!(on.mode, Mode::Normal | Mode::Probe)
        && others_left(env, turn, on.idx, now).left.healthy;
    if give_up {
        let mut f = Failure::transport(Transport::FirstTokenTimeout, "");
        f.message = format!(
            "no first token by the deployment's slow point ({} ms)",
            point.as_millis()
        );
        return Call {
            result: Err(f),
            changes: Vec::new(),
            start,
            elapsed: now.saturating_duration_since(start),
            slow: true,
        };
    }
    let mut c = call.await;
    c.slow = true;
    c
}

/// `on`'s attempt is a slow outlier of its deployment: evidence toward its
/// ejection, reported.
fn count_slow(env: Env<'_>, turn: &Turn, on: &OnTarget<'_>) {
    let effects = env.deployments.on_slow(&on.target, Instant::now());
    report(env, turn, &on.target, effects, on.mode);
}

/// The deployment a silent attempt on `on` is hedged on: the first other
/// untried one in plain rotation ([`select::hedge_pick`]: no probe, trial
/// or fail-open, and none of them taken by looking), when both hedge budgets
/// grant it; its call counted like any other.
///
/// A probe's hedge is not taken from the budgets: a probe still silent at
/// its hedge point would otherwise be given up at its slow point and the
/// turn moved on to the same deployment ([`watched`]), the same two calls,
/// later. Only a probe whose first token comes between the two points costs
/// a call more, and probes come one per `retry.probe_interval_ms`. (Taken
/// from the budgets, a deployment ejected for long — its own request count,
/// and so its budget, near zero — would have its probes wait again.)
fn hedge_target<'a>(
    env: Env<'a>,
    turn: &mut Turn,
    on: &OnTarget<'a>,
    now: Instant,
) -> Option<OnTarget<'a>> {
    let cands: Vec<Candidate> = (turn.targets.iter().enumerate())
        .map(|(i, t)| {
            let tried = i == on.idx || turn.exhausted[i] || env.cfg.provider(&t.provider).is_none();
            env.deployments.peek_candidate(&turn.agent, t, tried, now)
        })
        .collect();
    let idx = select::hedge_pick(&cands)?;
    let granted = match on.mode {
        Mode::Probe => true,
        Mode::Normal | Mode::Trial | Mode::FailOpen => {
            env.deployments.take_hedge(&turn.agent, &on.deployment, now)
        }
    };
    if !granted {
        return None;
    }
    on_target(env, turn, idx, Mode::Normal, now)
}

/// The loser of a hedge's race on `on`, cancelled after `silent_for`
/// without a first token: held against its deployment as a slow outlier
/// when it was silent past its hedge point ([`hale_core::slow::lost_race`]).
fn judge_loser(env: Env<'_>, turn: &Turn, on: &OnTarget<'_>, silent_for: Duration) {
    let now = Instant::now();
    match env.deployments.lost_race(&on.deployment, silent_for, now) {
        Verdict::Slow { .. } => count_slow(env, turn, on),
        Verdict::Usual | Verdict::Unjudged => {}
    }
}

/// The `turn.hedged` event: which deployment was hedged on which, which
/// won, and what the cancelled one cost.
#[allow(clippy::too_many_arguments)]
fn hedged_event(
    env: Env<'_>,
    turn: &Turn,
    first: &OnTarget<'_>,
    hedge: &OnTarget<'_>,
    winner: &OnTarget<'_>,
    point: Duration,
    loser_input_tokens: u64,
    loser_cost_usd: f64,
) {
    let loser = if std::ptr::eq(winner, first) {
        hedge
    } else {
        first
    };
    env.emit.emit(
        env.emit
            .event(EventKind::TurnHedged)
            .agent(&turn.agent)
            .turn(&turn.id)
            .payload(serde_json::json!({
                "first": first.deployment,
                "hedge": hedge.deployment,
                "winner": winner.deployment,
                "loser": loser.deployment,
                "hedge_after_ms": point.as_millis() as u64,
                "loser_input_tokens": loser_input_tokens,
                "loser_cost_usd": loser_cost_usd,
            })),
    );
}

/// After failure `f`, hale-core's retry decision (`retry::decide`) on the
/// facts of this deployment and the others left; and whether one in
/// rotation is left.
fn next_move(env: Env<'_>, turn: &Turn, on: &OnTarget<'_>, f: &Failure) -> (RetryDecision, bool) {
    let others = others_left(env, turn, on.idx, Instant::now());
    let (has_next, untried_left) = (others.left.healthy, others.any);
    let probing = select::moves_on_at_once(
        matches!(on.mode, Mode::Probe | Mode::Trial | Mode::FailOpen),
        others.left,
    );
    // A probe that moves on spends no retry token.
    let budget_ok = (probing && untried_left)
        || !classify::rule(f.class).retry_same_target
        || on
            .budget
            .is_none_or(|b| b.lock().expect("budget lock").try_retry(Instant::now()));
    let facts = AttemptFacts {
        class: f.class,
        retry_after: f.retry_after,
        attempts_on_target: on.attempts,
        rate_limits_on_target_this_turn: turn.rate_limits[on.idx],
        prev_wait: on.prev_wait,
        has_next_target: has_next,
        untried_left,
        time_left: turn.deadline.saturating_duration_since(Instant::now()),
        budget_ok,
        probing,
    };
    (
        retry::decide(&env.cfg.retry, &facts, &mut rand::rng()),
        has_next,
    )
}

/// The `agent.retry` event of a retry on the same deployment after `wait`.
fn announce_retry(env: Env<'_>, turn: &Turn, on: &OnTarget<'_>, f: &Failure, wait: Duration) {
    env.emit.emit(
        env.emit
            .event(EventKind::AgentRetry)
            .agent(&turn.agent)
            .turn(&turn.id)
            .payload(serde_json::json!({
                "target": on.target.to_string(),
                "class": f.class,
                "attempt": on.attempts,
                "wait_ms": wait.as_millis() as u64,
            })),
    );
}

/// The turn's failure when every deployment of the route is forced out.
fn forced_out_failure() -> Failure {
    Failure {
        class: ErrorClass::Unknown,
        retry_after: None,
        status: None,
        message: "every deployment of the route is forced out by an operator".into(),
        connect_failed: false,
    }
}

fn deadline_failure() -> Failure {
    Failure {
        class: ErrorClass::Timeout,
        retry_after: None,
        status: None,
        message: "the turn's deadline passed".into(),
        connect_failed: false,
    }
}

/// What is left of the plan after a failure on `idx`.
struct Others {
    /// In rotation, or as good a record (no calls counts as 1.0).
    left: select::Left,
    /// Another untried deployment may still be called at all.
    any: bool,
}

fn others_left(env: Env<'_>, turn: &Turn, idx: usize, now: Instant) -> Others {
    let mut o = Others {
        left: select::Left::default(),
        any: false,
    };
    let ratio = |t: &Target| env.deployments.success_ratio(t, now).unwrap_or(1.0);
    let mine = ratio(&turn.targets[idx]);
    for (j, t) in turn.targets.iter().enumerate() {
        if j == idx || turn.exhausted[j] {
            continue;
        }
        match env.deployments.gate(t, now) {
            Gate::Forced => continue,
            Gate::Ejected { .. } => {}
            Gate::Open | Gate::Probe => {
                let state =
                    env.deployments
                        .breaker_state(&turn.agent, &crate::deployments::key(t), now);
                o.left.healthy |= !matches!(state, BreakerState::Open | BreakerState::ForcedOpen);
            }
        }
        o.any = true;
        o.left.as_good |= ratio(t) >= mine;
    }
    o
}

/// Picks the next deployment (`select::pick`): the first in rotation whose
/// breaker allows the call or whose probe is due, else fail open. Candidates
/// are built in plan order and the building stops at the first usable one,
/// so no later deployment's half-open trial is taken for nothing.
fn choose(env: Env<'_>, turn: &Turn, now: Instant) -> Option<(usize, Mode, select::PassedOver)> {
    let mut cands: Vec<Candidate> = Vec::with_capacity(turn.targets.len());
    for (i, t) in turn.targets.iter().enumerate() {
        let tried = turn.exhausted[i] || env.cfg.provider(&t.provider).is_none();
        let c = env.deployments.candidate(&turn.agent, t, tried, now);
        let stop = select::usable(&c);
        cands.push(c);
        if stop {
            break;
        }
    }
    let picked = match select::pick(&cands) {
        Pick::Normal(i) => (i, Mode::Normal),
        Pick::Trial(i) => (i, Mode::Trial),
        Pick::Probe(i) => (i, Mode::Probe),
        Pick::FailOpen(i) => (i, Mode::FailOpen),
        Pick::None => return None,
    };
    if picked.1 == Mode::Probe {
        env.deployments.take_probe(&turn.targets[picked.0], now);
    }
    Some((picked.0, picked.1, select::passed_over(&cands, picked.0)))
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

/// A rough input-token count, for a stream whose provider reported no usage
/// and for a hedge's cancelled loser.
pub(crate) fn input_tokens_estimate(req: &ChatRequest) -> u64 {
    let system = req
        .system
        .as_deref()
        .map_or(0, hale_tokens::Tokenizer::approximate);
    let messages: u64 = req
        .messages
        .iter()
        .map(|m| {
            u64::from(
                hale_tokens::Tokenizer::approximate(&m.joined_text())
                    + hale_tokens::TOKENS_PER_MESSAGE,
            )
        })
        .sum();
    u64::from(system) + messages
}

/// Whether an event is content the caller would see as the answer starting.
pub fn is_content(ev: &StreamEvent) -> bool {
    match ev {
        StreamEvent::TextDelta(t) => !t.is_empty(),
        // A thinking block is the model answering: a long think is not a
        // silent provider (`first_token_timeout`).
        StreamEvent::ToolCallStart { .. }
        | StreamEvent::OpaqueStart { .. }
        | StreamEvent::Finish(_)
        | StreamEvent::Done => true,
        StreamEvent::Start { .. }
        | StreamEvent::ToolCallDelta { .. }
        | StreamEvent::OpaqueDelta { .. }
        | StreamEvent::Usage(_) => false,
    }
}

/// Feeds a success back to the deployment's health and breaker; `slow`:
/// the attempt was counted as a slow outlier (its health heard it then).
pub fn on_success(
    env: Env<'_>,
    turn: &Turn,
    target: &Target,
    mode: Mode,
    latency: Duration,
    slow: bool,
) {
    env.history.record(target, true, latency);
    let effects = env.deployments.on_success(
        &turn.agent,
        target,
        mode == Mode::Probe,
        slow,
        latency,
        Instant::now(),
    );
    report(env, turn, target, effects, mode);
}

/// Feeds a failure back to the deployment's health and breaker; `slow`:
/// the attempt was counted as a slow outlier, so the health has heard of it.
pub fn on_failure(
    env: Env<'_>,
    turn: &Turn,
    target: &Target,
    f: &Failure,
    latency: Duration,
    slow: bool,
) {
    env.history.record(target, false, latency);
    let failed = crate::deployments::Failed {
        class: f.class,
        retry_after: f.retry_after,
        connect_failed: f.connect_failed,
        latency,
        slow,
    };
    let effects = env
        .deployments
        .on_failure(&turn.agent, target, failed, Instant::now());
    report(env, turn, target, effects, Mode::Normal);
}

/// Turns what changed into events (and the agent's breaker health signal).
fn report(env: Env<'_>, turn: &Turn, target: &Target, effects: Vec<Effect>, mode: Mode) {
    for e in effects {
        match e {
            Effect::Breaker(t) => breaker_event(env, turn, target, &t),
            Effect::Ejected {
                scope,
                key,
                class,
                length,
                slow,
            } => env.emit.emit(
                env.emit
                    .event(EventKind::ProviderCooldown)
                    .agent(&turn.agent)
                    .turn(&turn.id)
                    .payload(serde_json::json!({
                        "deployment": target.to_string(),
                        "scope": scope,
                        "key": key,
                        "class": class,
                        "reason": if slow { "slow" } else { "failures" },
                        "ejection_ms": length.as_millis() as u64,
                    })),
            ),
            Effect::Recovered { scope, key } => env.emit.emit(
                env.emit
                    .event(EventKind::ProviderRecovered)
                    .agent(&turn.agent)
                    .turn(&turn.id)
                    .payload(serde_json::json!({
                        "deployment": target.to_string(),
                        "scope": scope,
                        "key": key,
                        "via": mode,
                    })),
            ),
        }
    }
}

fn breaker_event(env: Env<'_>, turn: &Turn, target: &Target, t: &Transition) {
    env.emit.emit(
        env.emit
            .event(EventKind::BreakerStateChanged)
            .agent(&turn.agent)
            .turn(&turn.id)
            .payload(serde_json::json!({
                "deployment": target.to_string(),
                "provider": target.provider,
                "from": t.from,
                "to": t.to,
                "reason": t.reason,
                "by": "hale",
            })),
    );
    // Health: an agent with any breaker open is failing.
    let any_open = env.deployments.any_open(&turn.agent, Instant::now());
    env.health.set_breaker_open(&turn.agent, any_open);
    if matches!(t.to, BreakerState::Open | BreakerState::ForcedOpen) {
        env.emit.emit(
            env.emit.event(EventKind::AgentCircuitOpen)
                .agent(&turn.agent)
                .turn(&turn.id)
                .payload(serde_json::json!({"deployment": target.to_string(), "provider": target.provider, "reason": t.reason})),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The journalled text is, as JSON, the rows the timeline was
    /// journalled as before it was written straight to text: each
    /// attempt's `Value`, then each passed-over deployment's.
    #[test]
    fn the_journalled_rows_are_the_records_as_json() {
        let cfg = Config::with_providers(Vec::new());
        let target = |m: &str| Target {
            provider: "p".into(),
            model: m.into(),
        };
        let mut turn = Turn::new(
            &cfg,
            "t".into(),
            "a".into(),
            None,
            vec![target("m1"), target("m2")],
        );
        let row = |class, message: Option<&str>, changes: Vec<String>| AttemptRecord {
            target: "p/m1".into(),
            start_ms: 3,
            duration_ms: 40,
            mode: Mode::FailOpen,
            class,
            status: Some(503),
            message: message.map(str::to_owned),
            resume: None,
            changes,
            hedge: None,
        };
        for (timeline, skipped) in [(0, 0), (1, 0), (2, 1), (0, 2)] {
            turn.timeline = [
                row(Some(ErrorClass::RateLimit), Some("down \"x\""), vec![]),
                AttemptRecord {
                    resume: Some("prefill"),
                    ..row(None, None, vec!["model".into(), "dropped: x".into()])
                },
            ][..timeline]
                .to_vec();
            turn.skipped = (0..skipped)
                .map(|i| SkipRecord {
                    target: format!("p/m{i}"),
                    start_ms: i,
                    skipped: "ejected",
                })
                .collect();
            let mut want = serde_json::to_value(&turn.timeline).unwrap();
            let want_rows = want.as_array_mut().unwrap();
            want_rows.extend(
                turn.skipped
                    .iter()
                    .map(|s| serde_json::to_value(s).unwrap()),
            );
            let got: serde_json::Value = serde_json::from_str(&turn.journal_rows()).unwrap();
            assert_eq!(got, want, "{timeline} attempts, {skipped} skipped");
        }
    }
}
