//! Health of deployments (docs/operations.md, "What hale does to a call":
//! Health per deployment).
//!
//! The unit of health is the *deployment*: one `provider/model`. This module
//! holds the state of one health scope — a deployment, a provider (one key),
//! or a `base_url` — and answers, per request, whether it may be called
//! ([`Gate::Open`]), gets this request as a probe ([`Gate::Probe`]), or is out
//! of rotation ([`Gate::Ejected`], [`Gate::Forced`]).
//!
//! Why it works so:
//! - **Each failure marks its scope** ([`scope`]): `auth` and `billing` are
//!   the key's (every deployment of the provider), a failure to *connect* is
//!   the `base_url`'s, everything else is the one deployment's. So a 503 storm
//!   on `openai/gpt-4o` never keeps a request from `openai/gpt-4o-mini`.
//! - **Evidence before ejection.** One transient failure is the turn's
//!   business (retry, or move on) and ejects nothing. A scope is ejected on an
//!   explicit signal (a 429 with `Retry-After`; `auth`, `billing`,
//!   `model_not_found`) or by the outlier rule: `eject_after` consecutive
//!   failures, or a failure rate of `failure_rate` or more over at least
//!   `min_calls` calls in the last `window`.
//! - **Ejections grow and a success forgives.** An ejection lasts its class's
//!   base (`cooldown_ms`; a rate limit's `Retry-After`) times the ejections in
//!   a row, capped by `max_ejection` (never below the base). A failure while
//!   ejected (a failed probe) is one more ejection in a row; any success
//!   resets the count and ends the ejection.
//! - **Probes end ejections early.** Every `probe_interval` one live request
//!   is let through ([`Health::take_probe`] marks it taken, so of many
//!   concurrent callers only one probes). Classes that do not heal by
//!   themselves (auth, billing, model_not_found) are probed only when their
//!   ejection ends.
//! - **An operator's word is final.** [`Health::trip`] forces the scope out
//!   until [`Health::reset`]; a forced scope is neither probed nor tried when
//!   the turn fails open.
//! - [`combine`] merges the gates of the three scopes of a deployment: the
//!   most restrictive wins.

use crate::class::ErrorClass;
use crate::config::{CooldownConfig, EjectionConfig};
use serde::Serialize;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// The longest any ejection lasts, whatever an (untrusted) `Retry-After` or
/// the config says; keeps `Instant` arithmetic from overflowing.
pub const MAX_EJECTION: Duration = Duration::from_secs(24 * 60 * 60);

/// The outcome window is kept in this many buckets.
const BUCKETS: u32 = 10;

/// Which scope a failure marks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// Every deployment of the provider (one key).
    Provider,
    /// Every deployment on the same `base_url`.
    BaseUrl,
    /// This `provider/model` only.
    Deployment,
}

/// The scope a failure of `class` marks; `None` for failures that say
/// nothing about the deployment (the caller's input, hale's own limits).
/// `connect_failed`: the connection could not be made at all (refused, DNS,
/// TLS), as opposed to a reset after connecting.
pub fn scope(class: ErrorClass, connect_failed: bool) -> Option<Scope> {
    match class {
        ErrorClass::Auth | ErrorClass::Billing => Some(Scope::Provider),
        ErrorClass::Network if connect_failed => Some(Scope::BaseUrl),
        ErrorClass::Network
        | ErrorClass::Timeout
        | ErrorClass::RateLimit
        | ErrorClass::Overloaded
        | ErrorClass::StreamBroken
        | ErrorClass::StreamCrawling
        | ErrorClass::ModelNotFound
        | ErrorClass::Format
        | ErrorClass::Unknown => Some(Scope::Deployment),
        ErrorClass::ContextOverflow
        | ErrorClass::ContentPolicy
        | ErrorClass::BadRequest
        | ErrorClass::Budget
        | ErrorClass::Safety
        | ErrorClass::Policy => None,
    }
}

/// Whether a failure is an explicit signal to eject at once (no outlier
/// evidence needed): a rate limit that says how long, a bad key, no credit,
/// no such model.
pub fn explicit_signal(class: ErrorClass, retry_after: Option<Duration>) -> bool {
    match class {
        ErrorClass::RateLimit => retry_after.is_some(),
        ErrorClass::Auth | ErrorClass::Billing | ErrorClass::ModelNotFound => true,
        ErrorClass::Network
        | ErrorClass::Timeout
        | ErrorClass::Overloaded
        | ErrorClass::StreamBroken
        | ErrorClass::StreamCrawling
        | ErrorClass::ContextOverflow
        | ErrorClass::ContentPolicy
        | ErrorClass::BadRequest
        | ErrorClass::Format
        | ErrorClass::Budget
        | ErrorClass::Safety
        | ErrorClass::Policy
        | ErrorClass::Unknown => false,
    }
}

/// Whether an ejection of this class may end by itself (and so is probed
/// every `probe_interval`), or needs someone to fix something (probed only
/// when the ejection ends).
pub fn heals_by_itself(class: ErrorClass) -> bool {
    match class {
        ErrorClass::Auth | ErrorClass::Billing | ErrorClass::ModelNotFound => false,
        ErrorClass::Network
        | ErrorClass::Timeout
        | ErrorClass::RateLimit
        | ErrorClass::Overloaded
        | ErrorClass::StreamBroken
        | ErrorClass::StreamCrawling
        | ErrorClass::ContextOverflow
        | ErrorClass::ContentPolicy
        | ErrorClass::BadRequest
        | ErrorClass::Format
        | ErrorClass::Budget
        | ErrorClass::Safety
        | ErrorClass::Policy
        | ErrorClass::Unknown => true,
    }
}

/// The base length of an ejection of `class` (the last column of
/// docs/operations.md, "Failure classes"): the
/// `cooldown_ms` table, a rate limit's `Retry-After` first. `None`: this
/// class never ejects.
pub fn ejection_base(
    cooldowns: &CooldownConfig,
    class: ErrorClass,
    retry_after: Option<Duration>,
) -> Option<Duration> {
    match (class, retry_after) {
        (ErrorClass::RateLimit, Some(ra)) => Some(ra.max(Duration::from_millis(1))),
        _ => cooldowns.for_class(class),
    }
}

/// How long the `n`-th ejection in a row lasts (`n` ≥ 1): `base × n`, capped
/// by `max_ejection` but never shorter than `base`, and never over
/// [`MAX_EJECTION`].
pub fn ejection_length(base: Duration, n: u32, max_ejection: Duration) -> Duration {
    let grown = base.saturating_mul(n.max(1));
    grown.min(max_ejection.max(base)).min(MAX_EJECTION)
}

/// May a request go to this scope now?
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// In rotation.
    Open,
    /// Ejected, but this request is its probe (short timeout, move on at
    /// once if it fails).
    Probe,
    /// Ejected for `class` until `until`.
    Ejected { until: Instant, class: ErrorClass },
    /// Forced out by an operator until reset.
    Forced,
}

impl Gate {
    fn rank(self) -> (u8, Option<Instant>) {
        match self {
            Gate::Open => (0, None),
            Gate::Probe => (1, None),
            Gate::Ejected { until, .. } => (2, Some(until)),
            Gate::Forced => (3, None),
        }
    }
}

/// The gate of a deployment from the gates of its scopes (deployment,
/// provider, base_url): the most restrictive wins; of two ejections, the one
/// that ends later.
pub fn combine(gates: &[Gate]) -> Gate {
    gates
        .iter()
        .copied()
        .max_by_key(|g| g.rank())
        .unwrap_or(Gate::Open)
}

/// A scope's health, as shown by `GET /deployments`, `/metrics` and the
/// dashboard.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    Healthy,
    /// Failures within the window; still in rotation.
    Degraded,
    /// Out of rotation: ejected or forced out.
    Ejected,
}

impl State {
    /// A low-cardinality label.
    pub fn as_str(self) -> &'static str {
        match self {
            State::Healthy => "healthy",
            State::Degraded => "degraded",
            State::Ejected => "ejected",
        }
    }

    pub const ALL: [State; 3] = [State::Healthy, State::Degraded, State::Ejected];
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Ejection {
    class: ErrorClass,
    /// For slowness ([`Health::on_slow`]), not for failing.
    slow: bool,
    until: Instant,
    /// The failure or probe the next probe is timed from.
    probe_from: Instant,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Bucket {
    start: Instant,
    ok: u32,
    failed: u32,
}

/// A serialisable view of one scope at a point in time.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Snapshot {
    pub health: State,
    pub consecutive_failures: u32,
    /// Successes / calls in the window; `None` without calls.
    pub success_ratio: Option<f64>,
    pub calls_in_window: u32,
    /// Ejections in a row (0 after a success).
    pub ejections: u32,
    pub ejected_remaining_ms: u64,
    pub ejection_class: Option<ErrorClass>,
    /// The running ejection is for slowness: first tokens far later than the
    /// deployment's own usual ([`crate::slow`]; its class is `timeout`).
    pub ejected_slow: bool,
    /// Until the next probe is due; `None` when not ejected or not probed.
    pub next_probe_ms: Option<u64>,
    pub forced: bool,
}

/// The health of one scope. Pure: every call takes `now`.
#[derive(Debug, Clone, Default)]
pub struct Health {
    consecutive: u32,
    window: VecDeque<Bucket>,
    ejection: Option<Ejection>,
    ejections_in_row: u32,
    forced: bool,
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn add(now: Instant, d: Duration) -> Instant {
    now.checked_add(d.min(MAX_EJECTION)).unwrap_or(now)
}

impl Health {
    /// In rotation, no history.
    pub fn new() -> Self {
        Self::default()
    }

    fn bucket(&mut self, cfg: &EjectionConfig, now: Instant) -> &mut Bucket {
        let width = (cfg.window / BUCKETS).max(Duration::from_millis(1));
        while self
            .window
            .front()
            .is_some_and(|b| now.saturating_duration_since(b.start) >= cfg.window)
        {
            self.window.pop_front();
        }
        let fresh = self
            .window
            .back()
            .is_none_or(|b| now.saturating_duration_since(b.start) >= width);
        if fresh {
            self.window.push_back(Bucket {
                start: now,
                ok: 0,
                failed: 0,
            });
        }
        self.window.back_mut().expect("a bucket was just ensured")
    }

    /// (calls, failures) in the window at `now`.
    fn counts(&self, cfg: &EjectionConfig, now: Instant) -> (u32, u32) {
        self.window
            .iter()
            .filter(|b| now.saturating_duration_since(b.start) < cfg.window)
            .fold((0, 0), |(c, f), b| (c + b.ok + b.failed, f + b.failed))
    }

    fn running(&self, now: Instant) -> Option<Ejection> {
        self.ejection.filter(|e| now < e.until)
    }

    /// A failure of `class` that marks this scope. Returns the ejection it
    /// started or extended, if any.
    pub fn on_failure(
        &mut self,
        cfg: &EjectionConfig,
        cooldowns: &CooldownConfig,
        class: ErrorClass,
        retry_after: Option<Duration>,
        now: Instant,
    ) -> Option<Duration> {
        self.fail(cfg, cooldowns, class, retry_after, false, now)
    }

    /// A slow outlier ([`crate::slow`]): a first token far later than the
    /// deployment's own usual, or none by then. The same evidence as a
    /// failure of class `timeout` — consecutive and in the window — so the
    /// same outlier rule ejects, the same `timeout` cooldown grows, and the
    /// same probes bring it back; only the ejection is marked slow.
    pub fn on_slow(
        &mut self,
        cfg: &EjectionConfig,
        cooldowns: &CooldownConfig,
        now: Instant,
    ) -> Option<Duration> {
        self.fail(cfg, cooldowns, ErrorClass::Timeout, None, true, now)
    }

    fn fail(
        &mut self,
        cfg: &EjectionConfig,
        cooldowns: &CooldownConfig,
        class: ErrorClass,
        retry_after: Option<Duration>,
        slow: bool,
        now: Instant,
    ) -> Option<Duration> {
        self.consecutive = self.consecutive.saturating_add(1);
        let b = self.bucket(cfg, now);
        b.failed = b.failed.saturating_add(1);
        let (calls, failed) = self.counts(cfg, now);
        let outlier = self.consecutive >= cfg.eject_after
            || (calls >= cfg.min_calls && f64::from(failed) >= cfg.failure_rate * f64::from(calls));
        let already = self.running(now).is_some();
        if !(already || outlier || explicit_signal(class, retry_after)) {
            return None;
        }
        let base = ejection_base(cooldowns, class, retry_after)?;
        self.ejections_in_row = self.ejections_in_row.saturating_add(1);
        let length = ejection_length(base, self.ejections_in_row, cfg.max_ejection);
        let until = add(now, length);
        match self.running(now) {
            // A longer ejection already running keeps running (a 30 s network
            // ejection never shortens a 10 min auth one); its probe schedule
            // restarts from this failure.
            Some(e) if e.until > until => {
                self.ejection = Some(Ejection {
                    probe_from: now,
                    ..e
                });
            }
            Some(_) | None => {
                self.ejection = Some(Ejection {
                    class,
                    slow,
                    until,
                    probe_from: now,
                });
            }
        }
        Some(length)
    }

    /// A success: the consecutive count and the ejections in a row start
    /// over and a running ejection ends. Returns whether it ended one (a
    /// recovery worth an event).
    pub fn on_success(&mut self, cfg: &EjectionConfig, now: Instant) -> bool {
        self.consecutive = 0;
        self.ejections_in_row = 0;
        let b = self.bucket(cfg, now);
        b.ok = b.ok.saturating_add(1);
        self.ejection.take().is_some_and(|e| now < e.until)
    }

    /// What [`Health::take_probe`] would answer, without taking a probe.
    pub fn gate(&self, probe_interval: Duration, now: Instant) -> Gate {
        if self.forced {
            return Gate::Forced;
        }
        let Some(e) = self.running(now) else {
            return Gate::Open;
        };
        if heals_by_itself(e.class) && now >= add(e.probe_from, probe_interval) {
            Gate::Probe
        } else {
            Gate::Ejected {
                until: e.until,
                class: e.class,
            }
        }
    }

    /// Takes the probe that is due (the next one is due `probe_interval`
    /// later), so concurrent callers do not all probe. No-op when none is.
    pub fn take_probe(&mut self, probe_interval: Duration, now: Instant) {
        if self.gate(probe_interval, now) == Gate::Probe
            && let Some(e) = self.ejection.as_mut()
        {
            e.probe_from = now;
        }
    }

    /// Forces the scope out of rotation until [`Health::reset`]. Returns
    /// whether that changed anything.
    pub fn trip(&mut self) -> bool {
        !std::mem::replace(&mut self.forced, true)
    }

    /// Back in rotation at once: no force, no ejection, no history. Returns
    /// whether it was out of rotation.
    pub fn reset(&mut self, now: Instant) -> bool {
        let was_out = self.forced || self.running(now).is_some();
        *self = Self::default();
        was_out
    }

    /// Whether the scope holds nothing that a new one would decide
    /// otherwise by, so its owner may forget it: not forced, no call in the
    /// window, and no ejection running or ended within the window. What
    /// goes with it is older than the window — failures in a row and the
    /// ejections in a row that lengthen the next cooldown — so a deployment
    /// that comes back after that long is judged afresh.
    pub fn at_rest(&self, cfg: &EjectionConfig, now: Instant) -> bool {
        !self.forced
            && self.counts(cfg, now) == (0, 0)
            && self.ejection.is_none_or(|e| {
                now >= e.until && now.saturating_duration_since(e.until) >= cfg.window
            })
    }

    /// Healthy, degraded (failures in the window) or ejected.
    pub fn state(&self, cfg: &EjectionConfig, now: Instant) -> State {
        if self.forced || self.running(now).is_some() {
            State::Ejected
        } else if self.counts(cfg, now).1 > 0 {
            State::Degraded
        } else {
            State::Healthy
        }
    }

    /// Successes / calls in the window; `None` without calls.
    pub fn success_ratio(&self, cfg: &EjectionConfig, now: Instant) -> Option<f64> {
        let (calls, failed) = self.counts(cfg, now);
        (calls > 0).then(|| f64::from(calls - failed) / f64::from(calls))
    }

    pub fn consecutive_failures(&self) -> u32 {
        self.consecutive
    }

    /// A view at `now`.
    pub fn snapshot(
        &self,
        cfg: &EjectionConfig,
        probe_interval: Duration,
        now: Instant,
    ) -> Snapshot {
        let running = self.running(now);
        let (calls, _) = self.counts(cfg, now);
        Snapshot {
            health: self.state(cfg, now),
            consecutive_failures: self.consecutive,
            success_ratio: self.success_ratio(cfg, now),
            calls_in_window: calls,
            ejections: self.ejections_in_row,
            ejected_remaining_ms: running.map_or(0, |e| ms(e.until.saturating_duration_since(now))),
            ejection_class: running.map(|e| e.class),
            ejected_slow: running.is_some_and(|e| e.slow),
            next_probe_ms: running
                .filter(|e| !self.forced && heals_by_itself(e.class))
                .map(|e| {
                    ms(add(e.probe_from, probe_interval)
                        .min(e.until)
                        .saturating_duration_since(now))
                }),
            forced: self.forced,
        }
    }

    /// Merges the views of a deployment's scopes: the deployment's own
    /// counts, the most restrictive health and the longest ejection.
    pub fn merge(own: Snapshot, others: &[Snapshot]) -> Snapshot {
        let mut out = own;
        for o in others {
            if o.health == State::Ejected && o.ejected_remaining_ms >= out.ejected_remaining_ms {
                out.ejected_remaining_ms = o.ejected_remaining_ms;
                out.ejection_class = o.ejection_class.or(out.ejection_class);
                out.ejected_slow = o.ejected_slow;
                out.next_probe_ms = o.next_probe_ms;
            }
            if o.health == State::Ejected {
                out.health = State::Ejected;
            }
            out.forced |= o.forced;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(n: u64) -> Duration {
        Duration::from_secs(n)
    }
    const PROBE: Duration = Duration::from_secs(5);

    fn cfg() -> EjectionConfig {
        EjectionConfig::default()
    }

    fn fail(
        h: &mut Health,
        class: ErrorClass,
        ra: Option<Duration>,
        now: Instant,
    ) -> Option<Duration> {
        h.on_failure(&cfg(), &CooldownConfig::default(), class, ra, now)
    }

    #[test]
    fn a_scope_rests_a_window_after_its_last_call_or_ejection() {
        let c = cfg();
        let t0 = Instant::now();
        assert!(Health::new().at_rest(&c, t0), "a new scope");
        // A call: busy for a window.
        let mut h = Health::new();
        h.on_success(&c, t0);
        assert!(!h.at_rest(&c, t0));
        assert!(!h.at_rest(&c, t0 + c.window - Duration::from_millis(1)));
        assert!(h.at_rest(&c, t0 + c.window));
        // Forced out: never, until reset.
        let mut forced = Health::new();
        forced.trip();
        assert!(!forced.at_rest(&c, t0 + s(3600)));
        forced.reset(t0);
        assert!(forced.at_rest(&c, t0));
        // Ejected: not while it runs, nor for a window after it ended.
        let mut ejected = Health::new();
        let mut length = None;
        for _ in 0..10 {
            length = length.or(fail(&mut ejected, ErrorClass::Overloaded, None, t0));
        }
        let length = length.expect("ten overloaded answers in a row eject");
        let ended = t0 + length;
        assert!(!ejected.at_rest(&c, t0 + c.window));
        assert!(!ejected.at_rest(&c, ended));
        // The ejection ends at the latest MAX_EJECTION after it started.
        let later = t0 + MAX_EJECTION + c.window;
        assert!(ejected.at_rest(&c, later));
    }

    #[test]
    fn each_class_marks_its_scope() {
        use ErrorClass as C;
        let rows = [
            (C::Auth, false, Some(Scope::Provider)),
            (C::Billing, false, Some(Scope::Provider)),
            (C::Network, true, Some(Scope::BaseUrl)),
            (C::Network, false, Some(Scope::Deployment)),
            (C::Timeout, false, Some(Scope::Deployment)),
            (C::RateLimit, false, Some(Scope::Deployment)),
            (C::Overloaded, false, Some(Scope::Deployment)),
            (C::StreamBroken, false, Some(Scope::Deployment)),
            (C::StreamCrawling, false, Some(Scope::Deployment)),
            (C::ModelNotFound, false, Some(Scope::Deployment)),
            (C::Format, false, Some(Scope::Deployment)),
            (C::Unknown, false, Some(Scope::Deployment)),
            (C::ContextOverflow, false, None),
            (C::ContentPolicy, false, None),
            (C::BadRequest, false, None),
            (C::Budget, false, None),
            (C::Safety, false, None),
            (C::Policy, false, None),
        ];
        for (class, connect, want) in rows {
            assert_eq!(scope(class, connect), want, "{class} connect={connect}");
        }
        // Every class is in the table.
        assert_eq!(rows.iter().filter(|r| !r.1).count(), ErrorClass::ALL.len());
    }

    #[test]
    fn one_transient_failure_ejects_nothing() {
        let t0 = Instant::now();
        for class in [
            ErrorClass::Overloaded,
            ErrorClass::Network,
            ErrorClass::Timeout,
            ErrorClass::StreamBroken,
            ErrorClass::StreamCrawling,
            ErrorClass::RateLimit,
        ] {
            let mut h = Health::new();
            assert_eq!(fail(&mut h, class, None, t0), None, "{class}");
            assert_eq!(h.gate(PROBE, t0), Gate::Open, "{class}");
            assert_eq!(h.state(&cfg(), t0), State::Degraded, "{class}");
        }
    }

    #[test]
    fn explicit_signals_eject_at_once() {
        let t0 = Instant::now();
        let cd = CooldownConfig::default();
        let mut h = Health::new();
        assert_eq!(
            fail(&mut h, ErrorClass::RateLimit, Some(s(7)), t0),
            Some(s(7))
        );
        assert!(matches!(
            h.gate(PROBE, t0),
            Gate::Ejected {
                class: ErrorClass::RateLimit,
                ..
            }
        ));
        assert_eq!(h.gate(PROBE, t0 + s(7)), Gate::Open);
        for class in [
            ErrorClass::Auth,
            ErrorClass::Billing,
            ErrorClass::ModelNotFound,
        ] {
            let mut h = Health::new();
            assert_eq!(
                fail(&mut h, class, None, t0),
                cd.for_class(class),
                "{class}"
            );
            assert_eq!(h.state(&cfg(), t0), State::Ejected);
        }
    }

    #[test]
    fn eject_after_consecutive_failures_at_n_minus_1_n_n_plus_1() {
        let t0 = Instant::now();
        let c = cfg();
        let base = CooldownConfig::default()
            .for_class(ErrorClass::Overloaded)
            .unwrap();
        let mut h = Health::new();
        for i in 1..c.eject_after {
            assert_eq!(
                fail(&mut h, ErrorClass::Overloaded, None, t0),
                None,
                "failure {i}"
            );
        }
        assert_eq!(h.gate(PROBE, t0), Gate::Open);
        // The N-th ejects for the base…
        let first = fail(&mut h, ErrorClass::Overloaded, None, t0).expect("ejected");
        assert_eq!(first, base.min(c.max_ejection.max(base)));
        // …and one more while ejected is the second ejection in a row.
        let second = fail(&mut h, ErrorClass::Overloaded, None, t0).expect("still ejected");
        assert_eq!(second, ejection_length(base, 2, c.max_ejection));
    }

    #[test]
    fn failure_rate_over_min_calls_ejects() {
        let t0 = Instant::now();
        let c = cfg();
        let mut h = Health::new();
        // ok, fail, ok, fail: 4 calls, 50 % — under min_calls (5), no ejection.
        let mut now = t0;
        for i in 0..4 {
            now += Duration::from_millis(100);
            if i % 2 == 0 {
                h.on_success(&c, now);
            } else {
                assert_eq!(fail(&mut h, ErrorClass::Overloaded, None, now), None);
            }
        }
        h.on_success(&c, now);
        // 5 calls, 2 failed (40 %): still in.
        assert_eq!(h.gate(PROBE, now), Gate::Open);
        // 6 calls, 3 failed (50 %): out, although never 3 in a row.
        assert!(fail(&mut h, ErrorClass::Overloaded, None, now).is_some());
        assert_eq!(h.state(&c, now), State::Ejected);
    }

    #[test]
    fn old_failures_leave_the_window() {
        let t0 = Instant::now();
        let c = cfg();
        let mut h = Health::new();
        fail(&mut h, ErrorClass::Overloaded, None, t0);
        h.on_success(&c, t0);
        assert_eq!(h.state(&c, t0 + s(1)), State::Degraded);
        assert_eq!(h.success_ratio(&c, t0 + s(1)), Some(0.5));
        assert_eq!(h.state(&c, t0 + c.window), State::Healthy);
        assert_eq!(h.success_ratio(&c, t0 + c.window), None);
    }

    #[test]
    fn ejections_grow_in_a_row_up_to_the_cap_and_a_success_resets() {
        let base = s(30);
        let cap = s(300);
        assert_eq!(ejection_length(base, 1, cap), s(30));
        assert_eq!(ejection_length(base, 2, cap), s(60));
        assert_eq!(ejection_length(base, 10, cap), s(300));
        assert_eq!(ejection_length(base, 11, cap), s(300));
        // A base over the cap is never shortened by it.
        assert_eq!(ejection_length(s(3600), 3, cap), s(3600));
        assert_eq!(ejection_length(Duration::MAX, 1, cap), MAX_EJECTION);

        let t0 = Instant::now();
        let c = cfg();
        let mut h = Health::new();
        let mut now = t0;
        let mut lengths = Vec::new();
        for _ in 0..4 {
            lengths.push(fail(&mut h, ErrorClass::Network, None, now));
            now += s(1);
        }
        assert_eq!(lengths, [None, None, Some(s(30)), Some(s(60))]);
        assert!(
            h.on_success(&c, now),
            "the success ended a running ejection"
        );
        assert_eq!(h.gate(PROBE, now), Gate::Open);
        assert_eq!(h.snapshot(&c, PROBE, now).ejections, 0);
        // Starting over (once the old failures left the window, so the rate
        // rule does not count them): 3 more to eject again, for the base.
        now += c.window;
        h.on_success(&c, now);
        for _ in 0..2 {
            assert_eq!(fail(&mut h, ErrorClass::Network, None, now), None);
        }
        assert_eq!(fail(&mut h, ErrorClass::Network, None, now), Some(s(30)));
    }

    #[test]
    fn probes_come_every_interval_one_at_a_time() {
        let t0 = Instant::now();
        let mut h = Health::new();
        for _ in 0..3 {
            fail(&mut h, ErrorClass::Overloaded, None, t0);
        }
        assert!(matches!(h.gate(PROBE, t0 + s(4)), Gate::Ejected { .. }));
        assert_eq!(h.gate(PROBE, t0 + s(5)), Gate::Probe);
        h.take_probe(PROBE, t0 + s(5));
        // A concurrent caller gets no second probe.
        assert!(matches!(h.gate(PROBE, t0 + s(5)), Gate::Ejected { .. }));
        assert!(matches!(h.gate(PROBE, t0 + s(9)), Gate::Ejected { .. }));
        assert_eq!(h.gate(PROBE, t0 + s(10)), Gate::Probe);
        // A failed probe restarts the schedule from the failure.
        fail(&mut h, ErrorClass::Overloaded, None, t0 + s(11));
        assert!(matches!(h.gate(PROBE, t0 + s(15)), Gate::Ejected { .. }));
        assert_eq!(h.gate(PROBE, t0 + s(16)), Gate::Probe);
        let snap = h.snapshot(&cfg(), PROBE, t0 + s(12));
        assert_eq!(snap.next_probe_ms, Some(4_000));
    }

    #[test]
    fn classes_that_do_not_heal_are_probed_only_when_their_ejection_ends() {
        let t0 = Instant::now();
        for class in [
            ErrorClass::Auth,
            ErrorClass::Billing,
            ErrorClass::ModelNotFound,
        ] {
            let mut h = Health::new();
            let d = fail(&mut h, class, None, t0).expect("explicit");
            let mut t = t0;
            while t + PROBE < t0 + d {
                t += PROBE;
                assert!(matches!(h.gate(PROBE, t), Gate::Ejected { .. }), "{class}");
            }
            assert_eq!(h.gate(PROBE, t0 + d), Gate::Open, "{class}");
            assert_eq!(h.snapshot(&cfg(), PROBE, t0).next_probe_ms, None);
        }
    }

    #[test]
    fn a_shorter_ejection_does_not_cut_a_longer_one() {
        let t0 = Instant::now();
        let mut h = Health::new();
        fail(&mut h, ErrorClass::Auth, None, t0); // 600 s
        fail(&mut h, ErrorClass::RateLimit, Some(s(2)), t0 + s(1));
        assert!(matches!(
            h.gate(PROBE, t0 + s(100)),
            Gate::Ejected {
                class: ErrorClass::Auth,
                ..
            }
        ));
    }

    #[test]
    fn trip_forces_out_until_reset() {
        let t0 = Instant::now();
        let c = cfg();
        let mut h = Health::new();
        assert!(h.trip());
        assert!(!h.trip(), "already forced");
        assert_eq!(h.gate(PROBE, t0 + s(3600)), Gate::Forced);
        assert_eq!(h.state(&c, t0), State::Ejected);
        assert!(h.reset(t0));
        assert_eq!(h.gate(PROBE, t0), Gate::Open);
        assert!(!h.reset(t0), "nothing to reset");
        // reset also ends an ejection and forgets the history.
        for _ in 0..3 {
            fail(&mut h, ErrorClass::Timeout, None, t0);
        }
        assert!(h.reset(t0));
        assert_eq!(h.state(&c, t0), State::Healthy);
    }

    #[test]
    fn classes_without_a_base_never_eject() {
        let t0 = Instant::now();
        let mut h = Health::new();
        for _ in 0..10 {
            assert_eq!(fail(&mut h, ErrorClass::Format, None, t0), None);
        }
        assert_eq!(h.gate(PROBE, t0), Gate::Open);
        assert_eq!(h.state(&cfg(), t0), State::Degraded);
    }

    #[test]
    fn combine_takes_the_most_restrictive_gate() {
        let t0 = Instant::now();
        let ej = |n| Gate::Ejected {
            until: t0 + s(n),
            class: ErrorClass::Overloaded,
        };
        assert_eq!(combine(&[]), Gate::Open);
        assert_eq!(combine(&[Gate::Open, Gate::Open]), Gate::Open);
        assert_eq!(combine(&[Gate::Open, Gate::Probe]), Gate::Probe);
        assert_eq!(combine(&[Gate::Probe, ej(5), Gate::Open]), ej(5));
        assert_eq!(combine(&[ej(5), ej(9)]), ej(9));
        assert_eq!(combine(&[ej(9), Gate::Forced]), Gate::Forced);
    }

    #[test]
    fn untrusted_huge_retry_after_is_capped_without_panic() {
        let t0 = Instant::now();
        let mut h = Health::new();
        let d = fail(&mut h, ErrorClass::RateLimit, Some(Duration::MAX), t0);
        assert_eq!(d, Some(MAX_EJECTION));
    }

    /// Issue 43: slow outliers are a failing deployment's evidence — the
    /// same outlier rule ejects, the ejection says it is for slowness, it is
    /// probed, a failure while ejected (another slow probe) extends it, and a
    /// success (a probe at the usual time) brings it back.
    #[test]
    fn slow_outliers_eject_like_failures_and_a_probe_brings_it_back() {
        let t0 = Instant::now();
        let c = cfg();
        let cd = CooldownConfig::default();
        let base = cd.for_class(ErrorClass::Timeout).unwrap();
        let mut h = Health::new();
        h.on_success(&c, t0);
        for i in 1..c.eject_after {
            assert_eq!(h.on_slow(&c, &cd, t0), None, "slow {i}");
        }
        assert_eq!(h.gate(PROBE, t0), Gate::Open);
        assert_eq!(h.on_slow(&c, &cd, t0), Some(base));
        let snap = h.snapshot(&c, PROBE, t0);
        assert_eq!(snap.health, State::Ejected);
        assert!(snap.ejected_slow);
        assert_eq!(snap.ejection_class, Some(ErrorClass::Timeout));
        // Probed like a timeout ejection; a slow probe is one more in a row.
        assert_eq!(h.gate(PROBE, t0 + PROBE), Gate::Probe);
        h.take_probe(PROBE, t0 + PROBE);
        assert_eq!(
            h.on_slow(&c, &cd, t0 + PROBE),
            Some(ejection_length(base, 2, c.max_ejection))
        );
        // A probe at the usual time: back in rotation, nothing slow left.
        assert_eq!(h.gate(PROBE, t0 + PROBE * 2), Gate::Probe);
        assert!(h.on_success(&c, t0 + PROBE * 2));
        let snap = h.snapshot(&c, PROBE, t0 + PROBE * 2);
        assert_eq!(snap.health, State::Degraded);
        assert!(!snap.ejected_slow);
        // A plain failure's ejection is not marked slow.
        let mut h = Health::new();
        for _ in 0..c.eject_after {
            fail(&mut h, ErrorClass::Timeout, None, t0);
        }
        assert!(!h.snapshot(&c, PROBE, t0).ejected_slow);
    }

    #[test]
    fn snapshot_serialises_for_the_api() {
        let t0 = Instant::now();
        let c = cfg();
        let mut h = Health::new();
        h.on_success(&c, t0);
        let v = serde_json::to_value(h.snapshot(&c, PROBE, t0)).unwrap();
        assert_eq!(v["health"], "healthy");
        assert_eq!(v["success_ratio"], 1.0);
        assert_eq!(v["calls_in_window"], 1);
        assert_eq!(v["ejected_remaining_ms"], 0);
        assert_eq!(v["ejected_slow"], false);
        assert!(v["next_probe_ms"].is_null());
    }
}
