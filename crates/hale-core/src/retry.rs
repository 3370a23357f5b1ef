//! Retry policies (docs/operations.md, "Failure classes"): backoff, the
//! retry-or-move-on decision, and the per-provider retry budget.
//!
//! This module only *answers* "retry this?" — like tower's `retry/policy.rs`;
//! the attempt loop in the gateway carries the answer out. Everything is pure:
//! the random source and `now` come in as arguments, so a test drives it with
//! a seeded RNG and fake `Instant`s.
//!
//! Why a budget and not only max attempts? Max attempts bound one request's
//! retries, but when a provider struggles *every* request retries at once and
//! the load multiplies by `max_attempts` exactly when the provider can least
//! take it. A budget bounds the retries of all requests together to a
//! fraction of the request rate (20 % by default) plus a small floor (10/s),
//! so retries help with sporadic failures and switch themselves off in an
//! outage, where failover is the better answer.

use crate::class::ErrorClass;
use crate::classify::{MoveOn, rule};
use crate::config::{Jitter, RetryConfig, RetryPolicy};
use rand::RngExt;
use std::time::{Duration, Instant};

/// How long request deposits stay in a [`RetryBudget`]: the ratio part of the
/// budget is "retries ≤ `budget_ratio` × the requests of about the last 10 s".
/// Deposits decay exponentially with this time constant.
pub const BUDGET_TTL: Duration = Duration::from_secs(10);

/// Backoff before retry number `retry` (1 = first retry) under `policy`,
/// with `prev` the previous wait (for decorrelated jitter).
///
/// - [`Jitter::Full`]: uniform in `[0, min(max, initial·2^(retry−1))]`.
/// - [`Jitter::Decorrelated`]: uniform in `[initial, min(max, prev·3)]`
///   (`prev` defaults to `initial`; a `prev·3` under `initial` counts as `initial`).
///
/// Never exceeds `policy.max`; decorrelated never goes under `initial`
/// unless `max < initial` (a config validation error), where `max` wins.
pub fn backoff<R: rand::Rng + ?Sized>(
    policy: &RetryPolicy,
    retry: u32,
    prev: Option<Duration>,
    rng: &mut R,
) -> Duration {
    let max = nanos(policy.max);
    let initial = nanos(policy.initial);
    match policy.jitter {
        Jitter::Full => {
            let exp = retry.saturating_sub(1).min(63);
            let ceiling = initial.saturating_mul(1u64 << exp).min(max);
            Duration::from_nanos(rng.random_range(0..=ceiling))
        }
        Jitter::Decorrelated => {
            let prev = prev.map(nanos).unwrap_or(initial);
            let hi = prev.saturating_mul(3).max(initial).min(max);
            let lo = initial.min(hi);
            Duration::from_nanos(rng.random_range(lo..=hi))
        }
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// What the attempt loop knows when an attempt has just failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttemptFacts {
    pub class: ErrorClass,
    /// From the classifier ([`crate::classify::Classified::retry_after`]).
    pub retry_after: Option<Duration>,
    /// Attempts made on this target, including the one that just failed.
    pub attempts_on_target: u32,
    /// 429s from this target in this turn, including the one that just failed.
    pub rate_limits_on_target_this_turn: u32,
    /// The previous wait on this target, for decorrelated jitter.
    pub prev_wait: Option<Duration>,
    /// Another target (healthy, allowed by its breaker) is left in the route.
    pub has_next_target: bool,
    /// Another target is left untried at all, healthy or not: the turn would
    /// fail open to it. Implied by `has_next_target`.
    pub untried_left: bool,
    /// Until the turn deadline.
    pub time_left: Duration,
    /// A retry token was available ([`RetryBudget::try_retry`]).
    pub budget_ok: bool,
    /// The attempt was a probe of an ejected deployment, a half-open
    /// breaker's trial, or a fail-open call: it is not retried on that
    /// target while another is left — the caller moves on at once. When none is
    /// left, it is the last one standing and is retried under its class's
    /// policy.
    pub probing: bool,
}

/// What to do after a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryDecision {
    /// Wait, then try the same target again.
    RetrySame { wait: Duration },
    /// Move on to the next target now.
    NextTarget,
    /// Give up: return the error to the caller.
    Stop,
}

/// A target answering 429 this many times in one turn is left for the next
/// target even with a short `Retry-After`: one wait is courtesy, two is a
/// storm.
pub const RATE_LIMITS_PER_TURN_BEFORE_MOVING_ON: u32 = 2;

/// The retry policy that governs retries of `class` on the same target, if
/// that class is retried at all: rate_limit → `cfg.rate_limit`, overloaded →
/// `cfg.server_error`, network → `cfg.network`.
pub fn policy_for(cfg: &RetryConfig, class: ErrorClass) -> Option<&RetryPolicy> {
    match class {
        ErrorClass::RateLimit => Some(&cfg.rate_limit),
        ErrorClass::Overloaded => Some(&cfg.server_error),
        ErrorClass::Network => Some(&cfg.network),
        ErrorClass::Timeout
        | ErrorClass::StreamBroken
        | ErrorClass::StreamCrawling
        | ErrorClass::ContextOverflow
        | ErrorClass::ContentPolicy
        | ErrorClass::Auth
        | ErrorClass::Billing
        | ErrorClass::ModelNotFound
        | ErrorClass::BadRequest
        | ErrorClass::Format
        | ErrorClass::Budget
        | ErrorClass::Safety
        | ErrorClass::Policy
        | ErrorClass::Unknown => None,
    }
}

/// Retry the same target, move to the next, or stop (docs/operations.md,
/// "Failure classes").
///
/// "Move on" goes to the next target when any is left untried (healthy or
/// not: the turn fails open to it); with none left, the target is the last
/// one standing and only its own policy, budget and the deadline
/// end its retries.
///
/// In order:
/// 1. no time left in the turn → stop; a probe, trial or fail-open call →
///    move on at once when anything is left;
/// 2. a class that is not retried on the same target → next target if its
///    rule moves on and one is left, else stop;
/// 3. `max_attempts` spent on this target → move on (or stop);
/// 4. a second 429 from this target in this turn → next target, when one is left;
/// 5. no retry token in the budget → move on (or stop);
/// 6. the wait is the jittered backoff, or `retry_after` when larger;
/// 7. a wait over `max_retry_wait` → next target when one is left;
/// 8. a wait that would not leave time for the attempt before the deadline →
///    move on (or stop);
/// 9. otherwise retry the same target after the wait.
pub fn decide<R: rand::Rng + ?Sized>(
    cfg: &RetryConfig,
    facts: &AttemptFacts,
    rng: &mut R,
) -> RetryDecision {
    let row = rule(facts.class);
    let others_left = facts.has_next_target || facts.untried_left;
    let move_on = match row.move_on {
        MoveOn::AtOnce | MoveOn::AfterRetries if others_left => RetryDecision::NextTarget,
        MoveOn::AtOnce | MoveOn::AfterRetries | MoveOn::Never => RetryDecision::Stop,
    };
    if facts.time_left.is_zero() {
        return RetryDecision::Stop;
    }
    // A probe, trial or fail-open call moves on at once while anything is
    // left; the last one standing is retried under its class's policy.
    if facts.probing && others_left {
        return move_on;
    }
    let policy = match (row.retry_same_target, policy_for(cfg, facts.class)) {
        (true, Some(p)) => p,
        (true, None) | (false, Some(_)) | (false, None) => return move_on,
    };
    if facts.attempts_on_target >= policy.max_attempts {
        return move_on;
    }
    if facts.class == ErrorClass::RateLimit
        && facts.rate_limits_on_target_this_turn >= RATE_LIMITS_PER_TURN_BEFORE_MOVING_ON
        && facts.has_next_target
    {
        return RetryDecision::NextTarget;
    }
    if !facts.budget_ok {
        return move_on;
    }
    let computed = backoff(
        policy,
        facts.attempts_on_target.max(1),
        facts.prev_wait,
        rng,
    );
    let wait = match facts.retry_after {
        Some(ra) if ra > computed => ra,
        Some(_) | None => computed,
    };
    if wait > cfg.max_retry_wait && facts.has_next_target {
        return RetryDecision::NextTarget;
    }
    if wait >= facts.time_left {
        return move_on;
    }
    RetryDecision::RetrySame { wait }
}

/// Per-provider retry budget: a token bucket. Retries may add at most
/// `budget_ratio` to the request rate, plus a floor of `budget_min_per_sec`
/// per second. Pure: every call takes `now`.
///
/// Two pools: the *floor* refills continuously at `budget_min_per_sec` and
/// holds at most one second's worth; the *ratio* pool gains `budget_ratio`
/// per request and decays with time constant [`BUDGET_TTL`], so a quiet hour
/// of traffic does not bank a burst of retries for the next outage. A retry
/// spends one token, from the ratio pool first.
#[derive(Debug, Clone)]
pub struct RetryBudget {
    ratio: f64,
    floor_rate: f64,
    floor_cap: f64,
    floor: f64,
    deposits: f64,
    last: Instant,
}

impl RetryBudget {
    /// A budget that starts with a full floor (one second's worth of retries).
    pub fn new(cfg: &RetryConfig, now: Instant) -> Self {
        let ratio = if cfg.budget_ratio.is_finite() {
            cfg.budget_ratio.max(0.0)
        } else {
            0.0
        };
        let floor_rate = f64::from(cfg.budget_min_per_sec);
        Self {
            ratio,
            floor_rate,
            floor_cap: floor_rate,
            floor: floor_rate,
            deposits: 0.0,
            last: now,
        }
    }

    fn advance(&mut self, now: Instant) {
        let dt = now.saturating_duration_since(self.last).as_secs_f64();
        if dt > 0.0 {
            self.floor = (self.floor + self.floor_rate * dt).min(self.floor_cap);
            self.deposits *= (-dt / BUDGET_TTL.as_secs_f64()).exp();
            self.last = now;
        }
    }

    /// Record one request (first attempt) to this provider.
    pub fn on_request(&mut self, now: Instant) {
        self.advance(now);
        self.deposits += self.ratio;
    }

    /// Take one retry token; `false` when the budget is spent.
    pub fn try_retry(&mut self, now: Instant) -> bool {
        self.advance(now);
        if self.deposits >= 1.0 {
            self.deposits -= 1.0;
            true
        } else if self.floor >= 1.0 {
            self.floor -= 1.0;
            true
        } else if self.deposits + self.floor >= 1.0 {
            let from_floor = 1.0 - self.deposits;
            self.deposits = 0.0;
            self.floor -= from_floor;
            true
        } else {
            false
        }
    }

    /// Whole retries available now, for metrics and tests.
    pub fn available(&mut self, now: Instant) -> u32 {
        self.advance(now);
        // Truncation is intended: a partial token is not a retry.
        (self.deposits + self.floor).floor().max(0.0) as u32
    }
}

/// The `max_tokens` of a request retried after a 504 when it asked for none.
pub const MAX_TOKENS_AFTER_504: u32 = 2048;
/// `max_tokens` is never lowered below this after a 504.
pub const MIN_MAX_TOKENS_AFTER_504: u32 = 256;

/// A 504 is retried with a lower `max_tokens` — a long generation
/// is what outlived the provider's own gateway. Halves the request's limit
/// (not below [`MIN_MAX_TOKENS_AFTER_504`], never raising it), or sets
/// [`MAX_TOKENS_AFTER_504`] when the request had none.
pub fn lowered_max_tokens(current: Option<u32>) -> u32 {
    match current {
        Some(n) => (n / 2).max(MIN_MAX_TOKENS_AFTER_504).min(n),
        None => MAX_TOKENS_AFTER_504,
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_failed_probe_or_trial_moves_on_at_once_unless_it_is_the_last_one_standing() {
        let cfg = RetryConfig::default();
        let mut rng = StdRng::seed_from_u64(7);
        let mut f = facts(ErrorClass::Overloaded);
        f.probing = true;
        assert_eq!(decide(&cfg, &f, &mut rng), RetryDecision::NextTarget);
        // Only ejected targets are left: still moves on (the turn fails open).
        f.has_next_target = false;
        f.untried_left = true;
        assert_eq!(decide(&cfg, &f, &mut rng), RetryDecision::NextTarget);
        // Nothing left: the last one standing is retried under its policy.
        f.untried_left = false;
        assert!(matches!(
            decide(&cfg, &f, &mut rng),
            RetryDecision::RetrySame { .. }
        ));
        f.attempts_on_target = cfg.server_error.max_attempts;
        assert_eq!(decide(&cfg, &f, &mut rng), RetryDecision::Stop);
        f.attempts_on_target = 1;
        f.class = ErrorClass::ContentPolicy;
        f.has_next_target = true;
        assert_eq!(
            decide(&cfg, &f, &mut rng),
            RetryDecision::Stop,
            "a class that never moves on stops"
        );
    }

    #[test]
    fn a_504_halves_max_tokens_down_to_a_floor_and_never_raises_it() {
        assert_eq!(lowered_max_tokens(Some(4000)), 2000);
        assert_eq!(lowered_max_tokens(Some(300)), MIN_MAX_TOKENS_AFTER_504);
        assert_eq!(lowered_max_tokens(Some(100)), 100);
        assert_eq!(lowered_max_tokens(None), MAX_TOKENS_AFTER_504);
    }
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    fn facts(class: ErrorClass) -> AttemptFacts {
        AttemptFacts {
            class,
            retry_after: None,
            attempts_on_target: 1,
            rate_limits_on_target_this_turn: 0,
            prev_wait: None,
            has_next_target: true,
            untried_left: false,
            time_left: Duration::from_secs(300),
            budget_ok: true,
            probing: false,
        }
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    proptest::proptest! {
        #[test]
        fn backoff_never_exceeds_max_and_decorrelated_never_under_initial(
            initial_ms in 1u64..5_000,
            extra_ms in 0u64..120_000,
            retry in 0u32..80,
            prev_ms in proptest::option::of(0u64..400_000),
            seed in proptest::num::u64::ANY,
        ) {
            let mut rng = StdRng::seed_from_u64(seed);
            let mut p = RetryPolicy {
                max_attempts: 5,
                initial: ms(initial_ms),
                max: ms(initial_ms + extra_ms),
                jitter: Jitter::Full,
            };
            let prev = prev_ms.map(ms);
            let full = backoff(&p, retry, prev, &mut rng);
            proptest::prop_assert!(full <= p.max);
            let cap = p.initial.saturating_mul(1u32 << retry.saturating_sub(1).min(31)).min(p.max);
            proptest::prop_assert!(full <= cap);
            p.jitter = Jitter::Decorrelated;
            let dec = backoff(&p, retry, prev, &mut rng);
            proptest::prop_assert!(dec <= p.max);
            proptest::prop_assert!(dec >= p.initial);
        }

        #[test]
        fn decide_never_waits_past_the_deadline(
            class_i in 0usize..16,
            attempts in 1u32..8,
            rl in 0u32..4,
            ra_ms in proptest::option::of(0u64..90_000),
            has_next: bool,
            untried: bool,
            left_ms in 0u64..20_000,
            budget_ok: bool,
            probing: bool,
            seed in proptest::num::u64::ANY,
        ) {
            let cfg = RetryConfig::default();
            let f = AttemptFacts {
                class: ErrorClass::ALL[class_i],
                retry_after: ra_ms.map(ms),
                attempts_on_target: attempts,
                rate_limits_on_target_this_turn: rl,
                prev_wait: None,
                has_next_target: has_next,
                untried_left: untried || has_next,
                time_left: ms(left_ms),
                budget_ok,
                probing,
            };
            let d = decide(&cfg, &f, &mut StdRng::seed_from_u64(seed));
            match d {
                RetryDecision::RetrySame { wait } => {
                    proptest::prop_assert!(wait < f.time_left);
                    proptest::prop_assert!(rule(f.class).retry_same_target);
                    proptest::prop_assert!(budget_ok);
                    proptest::prop_assert!(!(probing && f.untried_left), "a probe is retried only as the last one standing");
                    proptest::prop_assert!(wait >= f.retry_after.unwrap_or(Duration::ZERO));
                    if has_next {
                        proptest::prop_assert!(wait <= cfg.max_retry_wait);
                    }
                }
                RetryDecision::NextTarget => {
                    proptest::prop_assert!(f.untried_left);
                    proptest::prop_assert!(rule(f.class).move_on != MoveOn::Never);
                }
                RetryDecision::Stop => {}
            }
        }
    }

    #[test]
    fn full_jitter_ceiling_doubles_per_retry() {
        let p = RetryConfig::default().rate_limit;
        let mut rng = StdRng::seed_from_u64(7);
        let mut max_seen = [Duration::ZERO; 4];
        for _ in 0..2000 {
            for (i, slot) in max_seen.iter_mut().enumerate() {
                let w = backoff(&p, i as u32 + 1, None, &mut rng);
                assert!(w <= p.initial * (1 << i));
                *slot = (*slot).max(w);
            }
        }
        // The draws reach close to each ceiling: 1 s, 2 s, 4 s, 8 s.
        for (i, m) in max_seen.iter().enumerate() {
            assert!(*m > p.initial * (1 << i) * 9 / 10, "retry {}: {m:?}", i + 1);
        }
    }

    #[test]
    fn decorrelated_grows_from_the_previous_wait() {
        let p = RetryPolicy {
            jitter: Jitter::Decorrelated,
            ..RetryConfig::default().server_error
        };
        let mut rng = StdRng::seed_from_u64(3);
        for _ in 0..1000 {
            let w = backoff(&p, 2, Some(ms(2000)), &mut rng);
            assert!(w >= p.initial && w <= ms(6000), "{w:?}");
        }
    }

    #[test]
    fn seeded_backoff_is_deterministic() {
        let p = RetryConfig::default().network;
        let a = backoff(&p, 2, None, &mut StdRng::seed_from_u64(42));
        let b = backoff(&p, 2, None, &mut StdRng::seed_from_u64(42));
        assert_eq!(a, b);
    }

    #[test]
    fn retry_classes_use_their_policy() {
        let cfg = RetryConfig::default();
        for c in ErrorClass::ALL {
            assert_eq!(
                policy_for(&cfg, c).is_some(),
                rule(c).retry_same_target,
                "{c}"
            );
        }
        assert_eq!(
            policy_for(&cfg, ErrorClass::RateLimit),
            Some(&cfg.rate_limit)
        );
        assert_eq!(
            policy_for(&cfg, ErrorClass::Overloaded),
            Some(&cfg.server_error)
        );
        assert_eq!(policy_for(&cfg, ErrorClass::Network), Some(&cfg.network));
    }

    #[test]
    fn retry_after_takes_precedence_when_larger() {
        let cfg = RetryConfig::default();
        let mut f = facts(ErrorClass::RateLimit);
        f.retry_after = Some(ms(3000)); // first retry's backoff is at most 1 s
        let d = decide(&cfg, &f, &mut StdRng::seed_from_u64(1));
        assert_eq!(d, RetryDecision::RetrySame { wait: ms(3000) });

        // A smaller Retry-After leaves the computed backoff in place.
        f.retry_after = Some(ms(1));
        f.attempts_on_target = 3;
        for seed in 0..50 {
            let expected =
                backoff(&cfg.rate_limit, 3, None, &mut StdRng::seed_from_u64(seed)).max(ms(1));
            let d = decide(&cfg, &f, &mut StdRng::seed_from_u64(seed));
            assert_eq!(d, RetryDecision::RetrySame { wait: expected });
        }
    }

    #[test]
    fn wait_over_max_retry_wait_moves_to_the_next_target() {
        let cfg = RetryConfig::default();
        let mut f = facts(ErrorClass::RateLimit);
        f.retry_after = Some(cfg.max_retry_wait + ms(1));
        assert_eq!(
            decide(&cfg, &f, &mut StdRng::seed_from_u64(1)),
            RetryDecision::NextTarget
        );
        // No other target: wait, if the turn has the time…
        f.has_next_target = false;
        assert_eq!(
            decide(&cfg, &f, &mut StdRng::seed_from_u64(1)),
            RetryDecision::RetrySame {
                wait: cfg.max_retry_wait + ms(1)
            }
        );
        // …else stop.
        f.time_left = cfg.max_retry_wait;
        assert_eq!(
            decide(&cfg, &f, &mut StdRng::seed_from_u64(1)),
            RetryDecision::Stop
        );
    }

    #[test]
    fn second_429_in_a_turn_moves_on_even_with_a_short_retry_after() {
        let cfg = RetryConfig::default();
        let mut f = facts(ErrorClass::RateLimit);
        f.retry_after = Some(ms(100));
        f.rate_limits_on_target_this_turn = 1;
        assert!(matches!(
            decide(&cfg, &f, &mut StdRng::seed_from_u64(1)),
            RetryDecision::RetrySame { .. }
        ));
        f.attempts_on_target = 2;
        f.rate_limits_on_target_this_turn = 2;
        assert_eq!(
            decide(&cfg, &f, &mut StdRng::seed_from_u64(1)),
            RetryDecision::NextTarget
        );
        // Alone, the target is still retried.
        f.has_next_target = false;
        assert!(matches!(
            decide(&cfg, &f, &mut StdRng::seed_from_u64(1)),
            RetryDecision::RetrySame { .. }
        ));
    }

    #[test]
    fn budget_exhausted_means_no_retry() {
        let cfg = RetryConfig::default();
        for c in [
            ErrorClass::RateLimit,
            ErrorClass::Overloaded,
            ErrorClass::Network,
        ] {
            let mut f = facts(c);
            f.budget_ok = false;
            assert_eq!(
                decide(&cfg, &f, &mut StdRng::seed_from_u64(1)),
                RetryDecision::NextTarget,
                "{c}"
            );
            f.has_next_target = false;
            assert_eq!(
                decide(&cfg, &f, &mut StdRng::seed_from_u64(1)),
                RetryDecision::Stop,
                "{c}"
            );
        }
    }

    #[test]
    fn max_attempts_then_move_on() {
        let cfg = RetryConfig::default();
        let mut f = facts(ErrorClass::Overloaded);
        f.attempts_on_target = cfg.server_error.max_attempts - 1;
        assert!(matches!(
            decide(&cfg, &f, &mut StdRng::seed_from_u64(1)),
            RetryDecision::RetrySame { .. }
        ));
        f.attempts_on_target = cfg.server_error.max_attempts;
        assert_eq!(
            decide(&cfg, &f, &mut StdRng::seed_from_u64(1)),
            RetryDecision::NextTarget
        );
        f.has_next_target = false;
        assert_eq!(
            decide(&cfg, &f, &mut StdRng::seed_from_u64(1)),
            RetryDecision::Stop
        );
    }

    #[test]
    fn classes_that_are_not_retried_on_the_same_target() {
        let cfg = RetryConfig::default();
        let moves_on = [
            ErrorClass::Timeout,
            ErrorClass::StreamBroken,
            ErrorClass::StreamCrawling,
            ErrorClass::ContextOverflow,
            ErrorClass::Auth,
            ErrorClass::Billing,
            ErrorClass::ModelNotFound,
            ErrorClass::Format,
            ErrorClass::Unknown,
        ];
        let stops = [
            ErrorClass::ContentPolicy,
            ErrorClass::BadRequest,
            ErrorClass::Budget,
            ErrorClass::Safety,
            ErrorClass::Policy,
        ];
        for c in moves_on {
            let mut f = facts(c);
            assert_eq!(
                decide(&cfg, &f, &mut StdRng::seed_from_u64(1)),
                RetryDecision::NextTarget,
                "{c}"
            );
            f.has_next_target = false;
            assert_eq!(
                decide(&cfg, &f, &mut StdRng::seed_from_u64(1)),
                RetryDecision::Stop,
                "{c}"
            );
        }
        for c in stops {
            let f = facts(c);
            assert_eq!(
                decide(&cfg, &f, &mut StdRng::seed_from_u64(1)),
                RetryDecision::Stop,
                "{c}"
            );
        }
        assert_eq!(moves_on.len() + stops.len() + 3, ErrorClass::ALL.len());
    }

    #[test]
    fn no_time_left_stops() {
        let cfg = RetryConfig::default();
        let mut f = facts(ErrorClass::Timeout);
        f.time_left = Duration::ZERO;
        assert_eq!(
            decide(&cfg, &f, &mut StdRng::seed_from_u64(1)),
            RetryDecision::Stop
        );
    }

    /// Persistent 429s without `Retry-After`, default policy, a 3 s turn:
    /// alone, the target is retried with growing backoff until the deadline
    /// or `max_attempts` (never past either); with another target, the second
    /// 429 moves on after at most one backoff of ≤ 1 s.
    #[test]
    fn persistent_429_without_retry_after_fits_a_3s_turn_then_moves_on() {
        let cfg = RetryConfig::default();
        let deadline = Duration::from_secs(3);
        let mut max_attempts_seen = 0;
        for seed in 0..500 {
            let mut rng = StdRng::seed_from_u64(seed);
            for has_next in [false, true] {
                let mut elapsed = Duration::ZERO;
                let mut attempts = 0;
                let mut prev = None;
                let end = loop {
                    attempts += 1; // the attempt itself answers 429 instantly
                    let f = AttemptFacts {
                        class: ErrorClass::RateLimit,
                        retry_after: None,
                        attempts_on_target: attempts,
                        rate_limits_on_target_this_turn: attempts,
                        prev_wait: prev,
                        has_next_target: has_next,
                        untried_left: has_next,
                        time_left: deadline.saturating_sub(elapsed),
                        budget_ok: true,
                        probing: false,
                    };
                    match decide(&cfg, &f, &mut rng) {
                        RetryDecision::RetrySame { wait } => {
                            elapsed += wait;
                            prev = Some(wait);
                            assert!(elapsed < deadline, "seed {seed}: waited past the deadline");
                        }
                        other => break other,
                    }
                };
                if has_next {
                    assert_eq!(end, RetryDecision::NextTarget);
                    assert_eq!(attempts, 2, "seed {seed}");
                    assert!(elapsed <= cfg.rate_limit.initial);
                } else {
                    assert_eq!(end, RetryDecision::Stop);
                    assert!(attempts <= cfg.rate_limit.max_attempts, "seed {seed}");
                    max_attempts_seen = max_attempts_seen.max(attempts);
                }
            }
        }
        assert!(
            max_attempts_seen >= 3,
            "the backoff leaves room for retries in 3 s"
        );
    }

    #[test]
    fn budget_floor_allows_ten_then_refuses_until_refill() {
        let cfg = RetryConfig::default();
        let t0 = Instant::now();
        let mut b = RetryBudget::new(&cfg, t0);
        for i in 0..cfg.budget_min_per_sec {
            assert!(b.try_retry(t0), "retry {i}");
        }
        assert!(!b.try_retry(t0));
        assert!(!b.try_retry(t0 + ms(50)));
        // 10/s refills one token every 100 ms.
        assert!(b.try_retry(t0 + ms(150)));
        assert!(!b.try_retry(t0 + ms(150)));
        // The floor holds at most one second's worth.
        assert_eq!(
            b.available(t0 + Duration::from_secs(60)),
            cfg.budget_min_per_sec
        );
    }

    #[test]
    fn budget_floor_of_ten_per_second_holds_over_time() {
        let cfg = RetryConfig::default();
        let t0 = Instant::now();
        let mut b = RetryBudget::new(&cfg, t0);
        let mut granted = 0u32;
        for step in 0..10_000u64 {
            // A retry asked for every millisecond for 10 s, no requests.
            if b.try_retry(t0 + ms(step)) {
                granted += 1;
            }
        }
        let per_sec = cfg.budget_min_per_sec;
        assert!(granted >= per_sec * 10, "{granted}");
        assert!(granted <= per_sec * 11, "{granted}");
    }

    #[test]
    fn budget_adds_the_ratio_of_requests() {
        let cfg = RetryConfig::default();
        let t0 = Instant::now();
        let mut b = RetryBudget::new(&cfg, t0);
        let mut granted = 0u32;
        let requests = 10_000u32;
        for step in 0..u64::from(requests) {
            // 1000 requests/s for 10 s, and every one of them wants a retry.
            let now = t0 + ms(step);
            b.on_request(now);
            if b.try_retry(now) {
                granted += 1;
            }
        }
        let ceiling =
            cfg.budget_ratio * f64::from(requests) + f64::from(cfg.budget_min_per_sec * 11);
        assert!(f64::from(granted) <= ceiling + 1.0, "{granted} > {ceiling}");
        assert!(
            f64::from(granted) >= cfg.budget_ratio * f64::from(requests),
            "{granted}"
        );
    }

    #[test]
    fn budget_deposits_expire() {
        let cfg = RetryConfig::default();
        let t0 = Instant::now();
        let mut b = RetryBudget::new(&cfg, t0);
        for _ in 0..1000 {
            b.on_request(t0);
        }
        assert!(b.available(t0) >= 200);
        // A minute later the deposits are gone; only the floor is left.
        assert_eq!(
            b.available(t0 + Duration::from_secs(60)),
            cfg.budget_min_per_sec
        );
    }

    #[test]
    fn budget_with_zero_config_never_retries() {
        let cfg = RetryConfig {
            budget_ratio: 0.0,
            budget_min_per_sec: 0,
            ..RetryConfig::default()
        };
        let t0 = Instant::now();
        let mut b = RetryBudget::new(&cfg, t0);
        b.on_request(t0);
        assert!(!b.try_retry(t0 + Duration::from_secs(5)));
    }
}
