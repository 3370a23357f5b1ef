//! The health of deployments, their breakers and retry budgets
//! (docs/operations.md, "What hale does to a call").
//!
//! This component owns, for the whole gateway:
//! - the health of every scope a failure can mark
//!   ([`hale_core::deployment::Scope`]): each deployment (`provider/model`),
//!   each provider (its key) and each `base_url`;
//! - the breakers, keyed agent × deployment;
//! - the retry budget of each provider;
//! - the hedging state: each deployment's recent first-token times and
//!   hedge budget, and each agent's hedge budget ([`hale_core::hedge`]);
//!   the same times judge a deployment that turned slow
//!   ([`hale_core::slow`]), whose slow outliers are its health's evidence.
//!
//! The rules are hale-core's ([`hale_core::deployment`],
//! [`hale_core::select`], [`hale_core::breaker`]); this module holds their
//! state behind short locks (never held across an `.await`) and reports what
//! changed as [`Effect`]s, which the caller turns into events. It knows
//! nothing of HTTP, turns or events, so any part of the gateway can ask it.

use hale_core::balance::{self, PeakEwma};
use hale_core::breaker::{Admission, BreakerState, CallOutcome, SharedBreaker, Transition};
use hale_core::class::ErrorClass;
use hale_core::config::{Config, Target};
use hale_core::deployment::{self, Gate, Health, Scope, Snapshot};
use hale_core::hedge::{self, FirstTokenHistory, HedgeBudget};
use hale_core::retry::RetryBudget;
use hale_core::select::{BreakerSays, Candidate};
use hale_core::slow::{self, Verdict};
use serde::Serialize;
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

/// Something that changed, for the caller to report.
#[derive(Debug, Clone)]
pub enum Effect {
    /// The agent × deployment breaker changed state.
    Breaker(Transition),
    /// A scope was ejected (or its ejection extended) for `length`;
    /// `slow`: by a slow outlier ([`hale_core::slow`]), not a failure.
    Ejected {
        scope: Scope,
        key: String,
        class: ErrorClass,
        length: Duration,
        slow: bool,
    },
    /// A running ejection ended early on a success.
    Recovered { scope: Scope, key: String },
}

/// A failed call, as the deployment's health needs it.
#[derive(Debug, Clone, Copy)]
pub struct Failed {
    pub class: ErrorClass,
    pub retry_after: Option<Duration>,
    /// The connection could not be made (marks the `base_url`).
    pub connect_failed: bool,
    pub latency: Duration,
    /// The attempt was already counted as a slow outlier
    /// ([`Deployments::on_slow`]): its failure feeds the breaker, not the
    /// health a second time.
    pub slow: bool,
}

/// One deployment as `GET /deployments` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct DeploymentView {
    pub deployment: String,
    pub provider: String,
    pub model: String,
    #[serde(flatten)]
    pub health: Snapshot,
    /// Breaker state per agent that has one for this deployment.
    pub breakers: std::collections::BTreeMap<String, BreakerState>,
}

#[derive(Default)]
struct Scopes {
    deployments: HashMap<String, Health>,
    providers: HashMap<String, Health>,
    urls: HashMap<String, Health>,
}

impl Scopes {
    fn map(&mut self, scope: Scope) -> &mut HashMap<String, Health> {
        match scope {
            Scope::Deployment => &mut self.deployments,
            Scope::Provider => &mut self.providers,
            Scope::BaseUrl => &mut self.urls,
        }
    }
}

/// Deployment health, breakers and retry budgets.
pub struct Deployments {
    cfg: Arc<Config>,
    scopes: Mutex<Scopes>,
    /// agent → deployment → breaker: looked up by `&str`, no allocation per turn.
    breakers: RwLock<HashMap<String, HashMap<String, Arc<SharedBreaker>>>>,
    /// One per configured provider (foldhash: the keys are the config's).
    budgets: HashMap<String, Mutex<RetryBudget>, foldhash::fast::RandomState>,
    /// The configuration every breaker shares (one copy, not one per breaker).
    breaker_cfg: Arc<hale_core::config::BreakerConfig>,
    /// First-token histories and hedge budgets.
    hedging: Mutex<Hedging>,
    /// Each member of a load-balanced rank (keyed at start-up, [`ranked`])
    /// → its time to first token as the balancer weighs it
    /// ([`hale_core::balance::PeakEwma`]).
    latency: Mutex<HashMap<String, PeakEwma>>,
}

/// The hedging state ([`hale_core::hedge`]).
#[derive(Default)]
struct Hedging {
    /// deployment key → its first-token history and hedge budget.
    deployments: HashMap<String, (FirstTokenHistory, HedgeBudget)>,
    /// agent → its hedge budget; idle ones forgotten once a budget window.
    agents: HashMap<String, HedgeBudget>,
    /// When idle agents' budgets were last forgotten.
    swept: Option<Instant>,
}

impl Hedging {
    /// Forgets, at most once per `window` (the budgets' window), every
    /// agent's budget and every deployment's history and budget that hold
    /// nothing a new one would not: no first token younger than
    /// [`hedge::SAMPLE_MAX_AGE`], no request or hedge in the window. Every
    /// agent ever seen, and every model a client named (a provider with no
    /// `models` passes any through), would otherwise keep one.
    fn sweep(&mut self, window: Duration, now: Instant) {
        if self
            .swept
            .is_some_and(|t| now.saturating_duration_since(t) < window)
        {
            return;
        }
        self.swept = Some(now);
        self.agents.retain(|_, b| !b.is_idle(now));
        self.deployments.retain(|_, (history, budget)| {
            !(history.recent(now).is_empty() && budget.is_idle(now))
        });
    }
}

/// An empty latency estimate for each member of a route's rank of two or
/// more (`Config::route_ranks`): the only deployments the balancer weighs.
fn ranked(cfg: &Config) -> HashMap<String, PeakEwma> {
    let mut out = HashMap::new();
    for (route, sizes) in &cfg.route_ranks {
        let Some(targets) = cfg.routes.get(route) else {
            continue;
        };
        let mut at = 0;
        for &size in sizes {
            if size > 1 {
                for t in targets.iter().skip(at).take(size) {
                    out.insert(key(t), PeakEwma::default());
                }
            }
            at += size;
        }
    }
    out
}

/// The key of a deployment: `provider/model`, as `Target` displays. Pushed
/// by hand: a turn makes several and `format!` costs ~750 instructions each
/// (callgrind).
pub fn key(t: &Target) -> String {
    let mut k = String::with_capacity(t.provider.len() + 1 + t.model.len());
    k.push_str(&t.provider);
    k.push('/');
    k.push_str(&t.model);
    k
}

impl Deployments {
    pub fn new(cfg: Arc<Config>, now: Instant) -> Self {
        let budgets = cfg
            .providers
            .iter()
            .map(|p| {
                (
                    p.name.clone(),
                    Mutex::new(RetryBudget::new(&cfg.retry, now)),
                )
            })
            .collect();
        Self {
            scopes: Mutex::new(Scopes::default()),
            breakers: RwLock::new(HashMap::new()),
            budgets,
            breaker_cfg: Arc::new(cfg.self_healing.circuit_breaker.clone()),
            hedging: Mutex::new(Hedging::default()),
            latency: Mutex::new(ranked(&cfg)),
            cfg,
        }
    }

    fn hedging(&self) -> std::sync::MutexGuard<'_, Hedging> {
        // No rule panics while holding the lock, so the maps are consistent.
        self.hedging.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts one model call of `agent` on `deployment` in both hedge budgets.
    pub fn hedge_request(&self, agent: &str, deployment: &str, now: Instant) {
        let h = &self.cfg.hedging;
        if !h.enabled {
            return;
        }
        let mut g = self.hedging();
        g.deployments
            .entry(deployment.to_owned())
            .or_insert_with(|| {
                (
                    FirstTokenHistory::new(h.history),
                    HedgeBudget::from_config(h),
                )
            })
            .1
            .record_request(now);
        g.agents
            .entry(agent.to_owned())
            .or_insert_with(|| HedgeBudget::from_config(h))
            .record_request(now);
        g.sweep(h.budget_window, now);
    }

    /// A first token (or a complete answer) `elapsed` after the request on
    /// `deployment` was sent, judged against its history and recorded in it
    /// unless slow ([`slow::first_token`]).
    pub fn first_token(&self, deployment: &str, elapsed: Duration, now: Instant) -> Verdict {
        // Only members of a load-balanced rank weigh latency, each keyed
        // once at start-up: no lock otherwise, no key a client's model makes.
        if !self.cfg.route_ranks.is_empty()
            && let Some(e) = self.latency().get_mut(deployment)
        {
            e.observe(now, elapsed);
        }
        let h = &self.cfg.hedging;
        let mut g = self.hedging();
        g.sweep(h.budget_window, now);
        let history = &mut g
            .deployments
            .entry(deployment.to_owned())
            .or_insert_with(|| {
                (
                    FirstTokenHistory::new(h.history),
                    HedgeBudget::from_config(h),
                )
            })
            .0;
        slow::first_token(history, h, elapsed, now)
    }

    fn latency(&self) -> std::sync::MutexGuard<'_, HashMap<String, PeakEwma>> {
        // No rule panics while holding the lock, so the map is consistent.
        self.latency.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A plan's targets in the order to try them: each rank of two or more
    /// (a route's load-balanced group, `hale_core::select::plan_ranks`)
    /// ordered by [`balance::order`] over its members' recent first-token
    /// times, the ranks in their order.
    pub fn balance<R: rand::Rng + ?Sized>(
        &self,
        ranks: Vec<Vec<Target>>,
        now: Instant,
        rng: &mut R,
    ) -> Vec<Target> {
        let mut out = Vec::with_capacity(ranks.iter().map(Vec::len).sum());
        for rank in ranks {
            if rank.len() < 2 {
                out.extend(rank);
                continue;
            }
            let costs: Vec<f64> = {
                let l = self.latency();
                rank.iter()
                    .map(|t| l.get(&key(t)).map_or(0.0, |e| e.cost(now)))
                    .collect()
            };
            let mut rank: Vec<Option<Target>> = rank.into_iter().map(Some).collect();
            out.extend(
                balance::order(&costs, rng)
                    .into_iter()
                    .filter_map(|i| rank[i].take()),
            );
        }
        out
    }

    /// The loser of a hedge's race on `deployment`, silent for `silent_for`
    /// when the other attempt's first token came ([`slow::lost_race`]).
    pub fn lost_race(&self, deployment: &str, silent_for: Duration, now: Instant) -> Verdict {
        let g = self.hedging();
        match g.deployments.get(deployment) {
            Some((history, _)) => slow::lost_race(history, &self.cfg.hedging, silent_for, now),
            None => Verdict::Unjudged,
        }
    }

    /// How long an attempt on `deployment` may stay without a first token
    /// before it is a slow outlier ([`slow::slow_point`]); `None` while the
    /// deployment is not judged.
    pub fn slow_point(&self, deployment: &str, now: Instant) -> Option<Duration> {
        let g = self.hedging();
        let (history, _) = g.deployments.get(deployment)?;
        slow::slow_point(history, &self.cfg.hedging, now)
    }

    /// When an attempt on `deployment` without a first token is hedged
    /// ([`hedge::hedge_point`]); `None` when hedging is off.
    pub fn hedge_point(&self, deployment: &str, now: Instant) -> Option<Duration> {
        let h = &self.cfg.hedging;
        if !h.enabled {
            return None;
        }
        let g = self.hedging();
        Some(match g.deployments.get(deployment) {
            Some((history, _)) => hedge::hedge_point(history, h, now),
            None => hedge::hedge_point(&FirstTokenHistory::new(1), h, now),
        })
    }

    /// Takes a hedge of `agent` on `deployment` from both budgets, or none.
    pub fn take_hedge(&self, agent: &str, deployment: &str, now: Instant) -> bool {
        let h = &self.cfg.hedging;
        let mut g = self.hedging();
        let Hedging {
            deployments,
            agents,
            ..
        } = &mut *g;
        let dep = &mut deployments
            .entry(deployment.to_owned())
            .or_insert_with(|| {
                (
                    FirstTokenHistory::new(h.history),
                    HedgeBudget::from_config(h),
                )
            })
            .1;
        let agent = agents
            .entry(agent.to_owned())
            .or_insert_with(|| HedgeBudget::from_config(h));
        hedge::try_take_all(&mut [dep, agent], now)
    }

    fn scopes(&self) -> std::sync::MutexGuard<'_, Scopes> {
        // No rule panics while holding the lock, so a poisoned map is consistent.
        self.scopes.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn base_url(&self, t: &Target) -> &str {
        self.cfg
            .provider(&t.provider)
            .map_or("", |p| p.base_url.as_str())
    }

    /// The key of `t` in `scope`.
    fn scope_key(&self, scope: Scope, t: &Target) -> String {
        match scope {
            Scope::Deployment => key(t),
            Scope::Provider => t.provider.clone(),
            Scope::BaseUrl => self.base_url(t).to_owned(),
        }
    }

    /// The combined gate of `t`'s scopes, without taking a probe.
    fn gate_locked(&self, s: &Scopes, t: &Target, dkey: &str, now: Instant) -> Gate {
        self.gate_of(s, t, s.deployments.get(dkey), now)
    }

    /// [`Deployments::gate_locked`] with the deployment's own health
    /// already looked up (`own`).
    fn gate_of(&self, s: &Scopes, t: &Target, own: Option<&Health>, now: Instant) -> Gate {
        let pi = self.cfg.retry.probe_interval;
        let g = |h: Option<&Health>| h.map_or(Gate::Open, |h| h.gate(pi, now));
        deployment::combine(&[
            g(own),
            g(s.providers.get(&t.provider)),
            g(s.urls.get(self.base_url(t))),
        ])
    }

    /// The combined gate of `t`'s scopes now, without taking a probe.
    pub fn gate(&self, t: &Target, now: Instant) -> Gate {
        let s = self.scopes();
        self.gate_locked(&s, t, &key(t), now)
    }

    /// `t`'s recent success ratio (its own scope); `None` without calls.
    pub fn success_ratio(&self, t: &Target, now: Instant) -> Option<f64> {
        self.scopes()
            .deployments
            .get(&key(t))
            .and_then(|h| h.success_ratio(&self.cfg.ejection, now))
    }

    /// The breaker of `agent` × `deployment`, created on first use.
    pub fn breaker(&self, agent: &str, deployment: &str) -> Arc<SharedBreaker> {
        if let Some(b) = self
            .breakers
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(agent)
            .and_then(|m| m.get(deployment))
        {
            return b.clone();
        }
        self.breakers
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .entry(agent.to_owned())
            .or_default()
            .entry(deployment.to_owned())
            .or_insert_with(|| Arc::new(SharedBreaker::new(Arc::clone(&self.breaker_cfg))))
            .clone()
    }

    /// Drops the breakers that may leave memory and that no turn holds, and
    /// agents left with none: those at rest ([`SharedBreaker::at_rest`]:
    /// closed, quiet for their window; the next call builds a new breaker,
    /// which decides as the dropped one would have), and those of the agents
    /// that just left memory (`agents_gone`) holding no failure
    /// ([`hale_core::memory::breaker_may_leave`]). Called with the rest of
    /// the idle state, every [`hale_core::memory::SWEEP_EVERY`]
    /// ([`crate::Gateway::shed_idle`]), never on a turn's path: the
    /// walk holds the write lock. Returns how many were dropped.
    pub fn forget_resting_breakers(
        &self,
        now: Instant,
        agents_gone: &std::collections::HashSet<String>,
    ) -> usize {
        let mut map = self.breakers.write().unwrap_or_else(|e| e.into_inner());
        let mut dropped = 0;
        map.retain(|agent, per_agent| {
            let left = agents_gone.contains(agent);
            per_agent.retain(|_, b| {
                let go = Arc::strong_count(b) == 1 && b.may_leave(now, left);
                dropped += usize::from(go);
                !go
            });
            !per_agent.is_empty()
        });
        dropped
    }

    /// Forgets every deployment's health that is at rest
    /// ([`Health::at_rest`]): a new one decides alike. Every model a client
    /// named (a provider with no `models` passes any through) would
    /// otherwise keep one. Returns how many went.
    pub fn forget_resting_scopes(&self, now: Instant) -> usize {
        let ej = &self.cfg.ejection;
        let mut s = self.scopes();
        let before = s.deployments.len();
        s.deployments.retain(|_, h| !h.at_rest(ej, now));
        before - s.deployments.len()
    }

    /// How many breakers (agent × deployment) are held in memory.
    pub fn breakers_held(&self) -> usize {
        self.breakers
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .map(HashMap::len)
            .sum()
    }

    /// The state of `agent` × `deployment`'s breaker, without creating one
    /// (a deployment the agent never called has none: closed).
    pub fn breaker_state(&self, agent: &str, deployment: &str, now: Instant) -> BreakerState {
        self.breakers
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(agent)
            .and_then(|m| m.get(deployment))
            .map_or(BreakerState::Closed, |b| b.state(now))
    }

    /// Every breaker of one agent, by deployment.
    pub fn breakers_of(&self, agent: &str) -> Vec<(String, Arc<SharedBreaker>)> {
        self.breakers
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(agent)
            .map(|m| m.iter().map(|(d, b)| (d.clone(), b.clone())).collect())
            .unwrap_or_default()
    }

    /// Every breaker: ((agent, deployment), breaker).
    pub fn all_breakers(&self) -> Vec<((String, String), Arc<SharedBreaker>)> {
        self.breakers
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .flat_map(|(a, m)| {
                m.iter()
                    .map(move |(d, b)| ((a.clone(), d.clone()), b.clone()))
            })
            .collect()
    }

    /// Whether any breaker of `agent` is open.
    pub fn any_open(&self, agent: &str, now: Instant) -> bool {
        self.breakers_of(agent)
            .iter()
            .any(|(_, b)| matches!(b.state(now), BreakerState::Open | BreakerState::ForcedOpen))
    }

    /// The retry budget of a provider.
    pub fn budget(&self, provider: &str) -> Option<&Mutex<RetryBudget>> {
        self.budgets.get(provider)
    }

    /// `t` as the selection sees it now, for `agent`. The breaker is asked
    /// (and a half-open trial taken) only when the deployment is in rotation
    /// or its probe is due, so an ejected deployment never consumes a trial.
    pub fn candidate(&self, agent: &str, t: &Target, tried: bool, now: Instant) -> Candidate {
        self.candidate_with(agent, t, tried, now, |b| match b.allow(now) {
            Admission::Allowed => BreakerSays::Allowed,
            Admission::Trial => BreakerSays::Trial,
            Admission::Rejected { .. } => BreakerSays::Refused,
        })
    }

    /// [`Deployments::candidate`] without taking anything: the breaker is
    /// only read (closed or off: allowed; otherwise refused), so no
    /// half-open trial is spent. For a hedge's pick
    /// ([`hale_core::select::hedge_pick`]).
    pub fn peek_candidate(&self, agent: &str, t: &Target, tried: bool, now: Instant) -> Candidate {
        self.candidate_with(agent, t, tried, now, |b| match b.state(now) {
            BreakerState::Closed | BreakerState::Disabled => BreakerSays::Allowed,
            BreakerState::Open | BreakerState::HalfOpen | BreakerState::ForcedOpen => {
                BreakerSays::Refused
            }
        })
    }

    fn candidate_with(
        &self,
        agent: &str,
        t: &Target,
        tried: bool,
        now: Instant,
        ask: impl FnOnce(&SharedBreaker) -> BreakerSays,
    ) -> Candidate {
        let dkey = key(t);
        let (gate, success_ratio) = {
            let s = self.scopes();
            let own = s.deployments.get(&dkey);
            let gate = self.gate_of(&s, t, own, now);
            let ratio = own.and_then(|h| h.success_ratio(&self.cfg.ejection, now));
            (gate, ratio)
        };
        let breaker = if tried {
            BreakerSays::Refused
        } else {
            match gate {
                Gate::Open | Gate::Probe => ask(&self.breaker(agent, &dkey)),
                Gate::Ejected { .. } | Gate::Forced => BreakerSays::Refused,
            }
        };
        Candidate {
            gate,
            breaker,
            tried,
            success_ratio,
        }
    }

    /// Takes the due probe of every scope of `t`, so concurrent callers do
    /// not probe it too.
    pub fn take_probe(&self, t: &Target, now: Instant) {
        let pi = self.cfg.retry.probe_interval;
        let dkey = key(t);
        let url = self.base_url(t).to_owned();
        let mut s = self.scopes();
        if let Some(h) = s.deployments.get_mut(&dkey) {
            h.take_probe(pi, now);
        }
        if let Some(h) = s.providers.get_mut(&t.provider) {
            h.take_probe(pi, now);
        }
        if let Some(h) = s.urls.get_mut(&url) {
            h.take_probe(pi, now);
        }
    }

    /// A success of `agent` on `t`: every scope of `t` is proven in
    /// rotation; the breaker records it (and a successful probe closes it).
    /// A `slow` success (counted already by [`Deployments::on_slow`]) is the
    /// breaker's alone: it proves nothing of the deployment's health.
    pub fn on_success(
        &self,
        agent: &str,
        t: &Target,
        probe: bool,
        slow: bool,
        latency: Duration,
        now: Instant,
    ) -> Vec<Effect> {
        let dkey = key(t);
        let mut out = Vec::new();
        let b = self.breaker(agent, &dkey);
        if let Some(tr) = b.record(now, CallOutcome::Success { latency }, &mut rand::rng()) {
            out.push(Effect::Breaker(tr));
        }
        if slow {
            return out;
        }
        if probe && let Some(tr) = b.reset() {
            out.push(Effect::Breaker(tr));
        }
        let ej = &self.cfg.ejection;
        let mut s = self.scopes();
        for scope in [Scope::Deployment, Scope::Provider, Scope::BaseUrl] {
            // Looked up by `&str`: a key is allocated only the first time.
            let k: &str = match scope {
                Scope::Deployment => &dkey,
                Scope::Provider => &t.provider,
                Scope::BaseUrl => self.base_url(t),
            };
            let m = s.map(scope);
            let recovered = match m.get_mut(k) {
                Some(h) => h.on_success(ej, now),
                None => m.entry(k.to_owned()).or_default().on_success(ej, now),
            };
            if recovered {
                out.push(Effect::Recovered {
                    scope,
                    key: k.to_owned(),
                });
            }
        }
        out
    }

    /// A failure of `agent` on `t`: the breaker records it and the scope the
    /// class marks gets the evidence (which may eject it).
    pub fn on_failure(&self, agent: &str, t: &Target, f: Failed, now: Instant) -> Vec<Effect> {
        let Failed {
            class,
            retry_after,
            connect_failed,
            latency,
            slow,
        } = f;
        let dkey = key(t);
        let mut out = Vec::new();
        let outcome = CallOutcome::Failure {
            class,
            latency,
            retry_after,
        };
        if let Some(tr) = self
            .breaker(agent, &dkey)
            .record(now, outcome, &mut rand::rng())
        {
            out.push(Effect::Breaker(tr));
        }
        if slow {
            return out;
        }
        if let Some(scope) = deployment::scope(class, connect_failed) {
            let k = self.scope_key(scope, t);
            let mut s = self.scopes();
            let h = s.map(scope).entry(k.clone()).or_default();
            if let Some(length) = h.on_failure(
                &self.cfg.ejection,
                &self.cfg.cooldown,
                class,
                retry_after,
                now,
            ) {
                out.push(Effect::Ejected {
                    scope,
                    key: k,
                    class,
                    length,
                    slow: false,
                });
            }
        }
        out
    }

    /// An attempt on `t` was a slow outlier ([`hale_core::slow`]): evidence
    /// toward ejecting the deployment, as a `timeout` failure is
    /// ([`Health::on_slow`]). The breaker is not told: it hears the
    /// attempt's outcome when it ends.
    pub fn on_slow(&self, t: &Target, now: Instant) -> Vec<Effect> {
        let k = key(t);
        let mut s = self.scopes();
        let h = s.deployments.entry(k.clone()).or_default();
        h.on_slow(&self.cfg.ejection, &self.cfg.cooldown, now)
            .map(|length| Effect::Ejected {
                scope: Scope::Deployment,
                key: k,
                class: ErrorClass::Timeout,
                length,
                slow: true,
            })
            .into_iter()
            .collect()
    }

    /// An operator forces `t` out of rotation; returns whether it changed.
    pub fn trip(&self, t: &Target) -> bool {
        self.scopes().deployments.entry(key(t)).or_default().trip()
    }

    /// An operator puts `t` back at once: no force, no ejection, no history,
    /// and every agent's breaker for it closed. Returns the breaker transitions.
    pub fn reset(&self, t: &Target, now: Instant) -> (bool, Vec<(String, Transition)>) {
        let dkey = key(t);
        let was_out = self
            .scopes()
            .deployments
            .entry(dkey.clone())
            .or_default()
            .reset(now);
        let mut transitions = Vec::new();
        for ((agent, d), b) in self.all_breakers() {
            if d == dkey
                && let Some(tr) = b.reset()
            {
                transitions.push((agent, tr));
            }
        }
        (was_out, transitions)
    }

    /// Every deployment hale knows of: those the config names (routes,
    /// providers' models and default models) and those that served or failed.
    pub fn known(&self) -> Vec<Target> {
        let mut set: BTreeSet<(String, String)> = BTreeSet::new();
        for p in &self.cfg.providers {
            set.insert((p.name.clone(), p.default_model.clone()));
            for m in &p.models {
                set.insert((p.name.clone(), m.clone()));
            }
        }
        for route in self.cfg.routes.values() {
            for t in route {
                set.insert((t.provider.clone(), t.model.clone()));
            }
        }
        for k in self.scopes().deployments.keys() {
            if let Some((p, m)) = k.split_once('/') {
                set.insert((p.to_owned(), m.to_owned()));
            }
        }
        set.into_iter()
            .map(|(provider, model)| Target { provider, model })
            .collect()
    }

    /// Whether `t` is a deployment hale knows of.
    pub fn is_known(&self, t: &Target) -> bool {
        self.cfg.provider(&t.provider).is_some() && self.known().contains(t)
    }

    /// `t`'s view at `now`: its own counts, the health of all its scopes.
    pub fn view(&self, t: &Target, now: Instant) -> DeploymentView {
        let dkey = key(t);
        let ej = &self.cfg.ejection;
        let pi = self.cfg.retry.probe_interval;
        let health = {
            let s = self.scopes();
            let snap = |h: Option<&Health>| h.cloned().unwrap_or_default().snapshot(ej, pi, now);
            Health::merge(
                snap(s.deployments.get(&dkey)),
                &[
                    snap(s.providers.get(&t.provider)),
                    snap(s.urls.get(self.base_url(t))),
                ],
            )
        };
        let breakers = self
            .all_breakers()
            .into_iter()
            .filter(|((_, d), _)| *d == dkey)
            .map(|((a, _), b)| (a, b.state(now)))
            .collect();
        DeploymentView {
            deployment: dkey,
            provider: t.provider.clone(),
            model: t.model.clone(),
            health,
            breakers,
        }
    }

    /// Every known deployment's view.
    pub fn views(&self, now: Instant) -> Vec<DeploymentView> {
        self.known().iter().map(|t| self.view(t, now)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A deployment's key is its target as displayed (the timeline, the
    /// events and `GET /deployments` name it either way).
    #[test]
    fn a_key_is_the_target_displayed() {
        for (provider, model) in [("p", "m"), ("", ""), ("openai", "gpt-4o/x:y"), ("é", "ü")] {
            let t = Target {
                provider: provider.into(),
                model: model.into(),
            };
            assert_eq!(key(&t), t.to_string());
        }
    }
    use hale_core::config::{ProviderConfig, ProviderKind};
    use std::collections::HashSet;

    /// The one deployment of [`deployments`].
    fn target() -> Target {
        Target {
            provider: "p".into(),
            model: "m".into(),
        }
    }

    fn deployments() -> Deployments {
        let cfg = Config::with_providers(vec![ProviderConfig::new(
            "p",
            ProviderKind::OpenAi,
            "http://127.0.0.1:9/v1",
            "m",
        )]);
        Deployments::new(Arc::new(cfg), Instant::now())
    }

    /// The balancer weighs only the members of a load-balanced rank, keyed
    /// at start-up: a first token on any other deployment (a rank of one, a
    /// model a client chose) adds nothing, however many there are.
    #[test]
    fn only_members_of_a_rank_are_weighed() {
        let mut cfg = Config::with_providers(vec![ProviderConfig::new(
            "p",
            ProviderKind::OpenAi,
            "http://127.0.0.1:9/v1",
            "m",
        )]);
        let t = |m: &str| Target {
            provider: "p".into(),
            model: m.into(),
        };
        cfg.routes.insert("r".into(), vec![t("a"), t("b"), t("c")]);
        cfg.route_ranks.insert("r".into(), vec![2, 1]);
        let now = Instant::now();
        let d = Deployments::new(Arc::new(cfg), now);
        for i in 0..1000 {
            d.first_token(&format!("p/client-{i}"), Duration::from_millis(5), now);
        }
        for m in ["a", "b", "c"] {
            d.first_token(&format!("p/{m}"), Duration::from_millis(300), now);
        }
        let l = d.latency();
        let mut keys: Vec<&String> = l.keys().collect();
        keys.sort();
        assert_eq!(keys, ["p/a", "p/b"]);
        assert!(l["p/a"].cost(now) > 0.0);
    }

    /// A model a client named keeps a first-token history and a hedge
    /// budget only while they hold something: once its samples are older
    /// than `hedge::SAMPLE_MAX_AGE` and its budget's window is empty, the
    /// next sweep forgets it, so an agent naming new models does not grow
    /// the map for good. Fails without the deployments' sweep.
    #[test]
    fn hedging_forgets_a_model_once_nothing_of_it_is_recent() {
        let d = deployments();
        let t0 = Instant::now();
        for i in 0..1000 {
            let k = format!("p/client-{i}");
            d.hedge_request("a", &k, t0);
            d.first_token(&k, Duration::from_millis(5), t0);
        }
        assert!(d.hedging().deployments.len() >= 1000);
        let window = d.cfg.hedging.budget_window;
        let later = t0 + hedge::SAMPLE_MAX_AGE + window + hedge::budget_bucket(window);
        d.hedge_request("a", "p/m", later);
        let g = d.hedging();
        assert_eq!(g.deployments.len(), 1, "kept: all but p/m should go");
        assert!(g.deployments.contains_key("p/m"));
        assert_eq!(g.agents.len(), 1);
    }

    /// A model a client named keeps its health only while it holds
    /// something: a window after its last call it goes; a forced one stays.
    /// Fails without the sweep.
    #[test]
    fn a_deployments_health_goes_a_window_after_its_last_call() {
        let d = deployments();
        let t0 = Instant::now();
        let t = |m: &str| Target {
            provider: "p".into(),
            model: m.into(),
        };
        for i in 0..100 {
            d.on_success(
                "a",
                &t(&format!("client-{i}")),
                false,
                false,
                Duration::ZERO,
                t0,
            );
        }
        d.trip(&t("held"));
        assert!(d.scopes().deployments.len() >= 101);
        assert_eq!(d.forget_resting_scopes(t0), 0, "all called just now");
        let later = t0 + d.cfg.ejection.window;
        assert_eq!(d.forget_resting_scopes(later), 100);
        let s = d.scopes();
        assert_eq!(s.deployments.len(), 1);
        assert!(s.deployments.contains_key("p/held"));
    }

    /// A hedge's pick looks without taking: `peek_candidate` on a breaker
    /// whose open duration has passed says refused and leaves its half-open
    /// trial to the turn, which `candidate` then takes (once).
    #[test]
    fn peeking_takes_no_half_open_trial() {
        let d = deployments();
        let t = target();
        let now = Instant::now();
        let b = d.breaker("a", &key(&t));
        for _ in 0..5 {
            let failed = CallOutcome::Failure {
                class: ErrorClass::Network,
                latency: Duration::ZERO,
                retry_after: None,
            };
            b.record(now, failed, &mut rand::rng());
        }
        assert_eq!(b.state(now), BreakerState::Open);
        let later = now + Duration::from_secs(60);
        for _ in 0..3 {
            let peeked = d.peek_candidate("a", &t, false, later);
            assert_eq!(peeked.breaker, BreakerSays::Refused);
        }
        assert_eq!(
            d.candidate("a", &t, false, later).breaker,
            BreakerSays::Trial
        );
        assert_eq!(
            d.candidate("a", &t, false, later).breaker,
            BreakerSays::Refused
        );
    }

    /// Issue 43: slow outliers eject the deployment, marked slow; a success
    /// already counted as slow does not bring it back, a probe at its usual
    /// time does; a failure already counted as slow is not counted twice.
    #[test]
    fn slow_outliers_eject_and_only_a_usual_success_recovers() {
        let d = deployments();
        let t = target();
        let now = Instant::now();
        let ms = Duration::from_millis(1);
        let ejected = |effects: &[Effect]| {
            effects.iter().any(|e| {
                matches!(
                    e,
                    Effect::Ejected {
                        slow: true,
                        class: ErrorClass::Timeout,
                        ..
                    }
                )
            })
        };
        let eject_after = d.cfg.ejection.eject_after;
        for i in 1..eject_after {
            assert!(d.on_slow(&t, now).is_empty(), "slow {i}");
            // Its failure after that slowness adds nothing to the health.
            let f = Failed {
                class: ErrorClass::Timeout,
                retry_after: None,
                connect_failed: false,
                latency: ms,
                slow: true,
            };
            assert!(
                !d.on_failure("a", &t, f, now)
                    .iter()
                    .any(|e| matches!(e, Effect::Ejected { .. }))
            );
        }
        assert!(matches!(d.gate(&t, now), Gate::Open));
        assert!(ejected(&d.on_slow(&t, now)));
        assert!(d.view(&t, now).health.ejected_slow);
        // A slow answer served proves nothing.
        let effects = d.on_success("a", &t, true, true, ms, now);
        assert!(
            !effects
                .iter()
                .any(|e| matches!(e, Effect::Recovered { .. }))
        );
        assert!(matches!(d.gate(&t, now), Gate::Ejected { .. }));
        // A probe at the usual time brings it back.
        let effects = d.on_success("a", &t, true, false, ms, now);
        assert!(
            effects
                .iter()
                .any(|e| matches!(e, Effect::Recovered { .. }))
        );
        assert_eq!(d.gate(&t, now), Gate::Open);
    }

    /// Issue 13: breakers of agents that came and went do not pile up.
    #[test]
    fn breakers_at_rest_are_forgotten_and_others_kept() {
        let d = deployments();
        let t = target();
        let now = Instant::now();
        drop(d.breaker("quiet", &key(&t)));
        d.on_failure(
            "failing",
            &t,
            Failed {
                class: ErrorClass::Overloaded,
                retry_after: None,
                connect_failed: false,
                latency: Duration::from_millis(1),
                slow: false,
            },
            now,
        );
        let held = d.breaker("held", &key(&t));
        let window = d.cfg.self_healing.circuit_breaker.window;
        let later = now + window * 2;
        assert_eq!(d.forget_resting_breakers(later, &HashSet::new()), 1);
        assert!(d.breakers_of("quiet").is_empty());
        assert_eq!(d.breakers_of("failing").len(), 1, "a failure in a row");
        assert_eq!(d.breakers_of("held").len(), 1, "a turn holds it");
        // Once no turn holds it, the next sweep drops it.
        drop(held);
        assert_eq!(d.forget_resting_breakers(later, &HashSet::new()), 1);
        assert_eq!(d.forget_resting_breakers(later, &HashSet::new()), 0);
    }

    /// Issue 13: an agent that left memory takes its breakers along, unless
    /// one holds a failure (evidence toward an ejection) or a turn holds it.
    #[test]
    fn breakers_without_failures_leave_with_their_agent() {
        let d = deployments();
        let t = target();
        let now = Instant::now();
        let ms = Duration::from_millis(1);
        for agent in ["done", "stays", "failed", "held"] {
            d.on_success(agent, &t, false, false, ms, now);
        }
        d.on_failure(
            "failed",
            &t,
            Failed {
                class: ErrorClass::Overloaded,
                retry_after: None,
                connect_failed: false,
                latency: ms,
                slow: false,
            },
            now,
        );
        let held = d.breaker("held", &key(&t));
        let gone: HashSet<String> = ["done", "failed", "held"].map(String::from).into();
        let soon = now + Duration::from_secs(5);
        assert_eq!(d.forget_resting_breakers(soon, &gone), 1);
        assert!(d.breakers_of("done").is_empty(), "successes only: it left");
        assert_eq!(d.breakers_of("stays").len(), 1, "its agent is held");
        assert_eq!(d.breakers_of("failed").len(), 1, "a failure in its window");
        assert_eq!(d.breakers_of("held").len(), 1, "a turn holds it");
        drop(held);
        // Past the window the others rest and go; the failed one's failure
        // in a row stays its evidence until a call succeeds.
        let window = d.cfg.self_healing.circuit_breaker.window;
        assert_eq!(
            d.forget_resting_breakers(now + window * 2, &HashSet::new()),
            2
        );
        assert_eq!(d.breakers_of("failed").len(), 1);
    }
}
