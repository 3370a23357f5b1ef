//! Hedged first token (issue 43): when to start the same request on the next
//! target because the first one is silent, and how many such hedges a
//! deployment and an agent may make.
//!
//! This module owns three pure rules; the attempt loop in the gateway carries
//! them out:
//!
//! - [`FirstTokenHistory`]: a bounded window of a deployment's recent
//!   first-token times (thinking counts as a token), in milliseconds.
//! - [`hedge_point`]: how long an attempt may stay silent before it is hedged —
//!   a high quantile of that history × [`HEDGE_FACTOR`], clamped to
//!   `[floor, ceiling]`; with fewer than [`MIN_SAMPLES`] recent samples, the
//!   configured default. A deployment whose model always thinks 20 s learns a
//!   hedge point above 20 s, so it is not hedged once known; a deployment
//!   that is usually fast is hedged soon after its usual time.
//! - [`HedgeBudget`]: hedges ≤ `budget_share` × the requests of the last
//!   `budget_window` + [`BUDGET_MIN_PER_WINDOW`], so a slow provider cannot
//!   double the bill, and a quiet agent can still hedge at all; counted in
//!   buckets, so its size does not grow with the request rate.
//!
//! Why these and not a fixed hedge delay? A fixed delay either hedges every
//! call of a slow-thinking model (doubling its bill) or waits far too long on
//! a fast one. Time comes in as `now`, so every rule is tested under a fake
//! clock.

pub use crate::config::HedgingConfig;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// The hedge point is this multiple of the history's quantile: a first token
/// somewhat later than usual is not yet a reason to pay twice.
pub const HEDGE_FACTOR: f64 = 1.5;
/// Fewer recent samples than this: the configured default applies.
pub const MIN_SAMPLES: usize = 5;
/// A sample older than this is forgotten, so a deployment that was slow an
/// hour ago is learned again from what it does now.
pub const SAMPLE_MAX_AGE: Duration = Duration::from_secs(600);
/// Every budget grants at least this many hedges per window, whatever its
/// request count, so a quiet agent or deployment can hedge at all.
pub const BUDGET_MIN_PER_WINDOW: u32 = 1;

/// A deployment's recent first-token times: at most `cap` samples, each with
/// when it was taken.
#[derive(Debug, Clone)]
pub struct FirstTokenHistory {
    cap: usize,
    samples: VecDeque<(Instant, u64)>,
}

impl FirstTokenHistory {
    /// An empty history keeping at most `cap` samples (at least 1).
    pub fn new(cap: usize) -> Self {
        Self {
            cap: cap.max(1),
            samples: VecDeque::new(),
        }
    }

    /// Record a first token that came `elapsed` after the request was sent.
    pub fn record(&mut self, now: Instant, elapsed: Duration) {
        let ms = u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX);
        self.samples.push_back((now, ms));
        while self.samples.len() > self.cap {
            self.samples.pop_front();
        }
    }

    /// The samples (ms) no older than [`SAMPLE_MAX_AGE`] at `now`.
    pub fn recent(&self, now: Instant) -> Vec<u64> {
        self.samples
            .iter()
            .filter(|(at, _)| now.saturating_duration_since(*at) <= SAMPLE_MAX_AGE)
            .map(|(_, ms)| *ms)
            .collect()
    }

    /// How many samples are kept (recent or not).
    pub fn len(&self) -> usize {
        self.samples.len()
    }

    /// No samples at all.
    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }
}

/// The `q` quantile (nearest rank) of `samples`, which must not be empty.
pub(crate) fn quantile_ms(samples: &mut [u64], q: f64) -> u64 {
    samples.sort_unstable();
    let q = if q.is_finite() {
        q.clamp(0.0, 1.0)
    } else {
        1.0
    };
    let rank = (q * samples.len() as f64).ceil() as usize;
    samples[rank.clamp(1, samples.len()) - 1]
}

/// How long an attempt on the deployment with this `history` may stay
/// without a first token before it is hedged.
///
/// With at least [`MIN_SAMPLES`] recent samples: `quantile × HEDGE_FACTOR`,
/// clamped to `[floor, ceiling]`. Otherwise `default_after`, clamped the same
/// way. A ceiling under the floor (a validation error) yields the floor.
pub fn hedge_point(history: &FirstTokenHistory, cfg: &HedgingConfig, now: Instant) -> Duration {
    let mut recent = history.recent(now);
    let raw = if recent.len() < MIN_SAMPLES {
        cfg.default_after
    } else {
        let q = quantile_ms(&mut recent, cfg.quantile) as f64;
        Duration::from_millis((q * HEDGE_FACTOR).min(u64::MAX as f64 / 2.0) as u64)
    };
    raw.min(cfg.ceiling).max(cfg.floor)
}

/// A hedge budget for one deployment or one agent: hedges in the last
/// `window` ≤ ⌊`share` × requests in the last `window`⌋ +
/// [`BUDGET_MIN_PER_WINDOW`].
///
/// Both are counted in [`BUDGET_BUCKETS`] buckets of the window, so a
/// budget is the same few hundred bytes at ten requests a minute or ten
/// thousand a second. A bucket's edge is where the count is not exact, and
/// it always errs toward fewer hedges: requests count only from buckets
/// wholly within the window, hedges from every bucket that reaches into it.
#[derive(Debug, Clone)]
pub struct HedgeBudget {
    share: f64,
    window: Duration,
    requests: Buckets,
    hedges: Buckets,
}

/// The buckets a budget's window is counted in ([`HedgeBudget`]).
pub const BUDGET_BUCKETS: u32 = 32;

/// The width of a budget's buckets for `window` (at least 1 ms): counts
/// leave the budget up to this long after the window has passed them.
pub fn budget_bucket(window: Duration) -> Duration {
    (window / BUDGET_BUCKETS).max(Duration::from_millis(1))
}

/// Counts in buckets of `width` since `epoch` (the first count), the
/// newest [`BUDGET_BUCKETS`] + 1 of them: enough to cover a window.
#[derive(Debug, Clone)]
struct Buckets {
    width: Duration,
    epoch: Option<Instant>,
    /// Slot `k % len` holds bucket `k`'s count, with `k` to tell it from
    /// an older bucket of the same slot.
    ring: [(u64, u32); BUDGET_BUCKETS as usize + 1],
}

impl Buckets {
    fn new(width: Duration) -> Self {
        Self {
            width,
            epoch: None,
            ring: [(u64::MAX, 0); BUDGET_BUCKETS as usize + 1],
        }
    }

    /// The bucket of `at` (0 before the first count's time).
    fn index(&self, epoch: Instant, at: Instant) -> u64 {
        let since = at.saturating_duration_since(epoch).as_nanos();
        u64::try_from(since / self.width.as_nanos().max(1)).unwrap_or(u64::MAX)
    }

    fn add(&mut self, now: Instant) {
        let epoch = *self.epoch.get_or_insert(now);
        let k = self.index(epoch, now);
        let slot = &mut self.ring[(k % self.ring.len() as u64) as usize];
        if slot.0 == k {
            slot.1 = slot.1.saturating_add(1);
        } else {
            *slot = (k, 1);
        }
    }

    /// The counts of the buckets within `window` before `now`: wholly
    /// within it (`whole`), else every bucket that reaches into it.
    fn in_window(&self, now: Instant, window: Duration, whole: bool) -> u64 {
        let Some(epoch) = self.epoch else {
            return 0;
        };
        let newest = self.index(epoch, now);
        let w = self.width.as_nanos().max(1);
        // The window starts at `now − window`, in nanoseconds since epoch.
        let since = now.saturating_duration_since(epoch).as_nanos();
        let start = since.saturating_sub(window.as_nanos());
        self.ring
            .iter()
            .filter(|&&(k, _)| k <= newest && k != u64::MAX)
            .filter(|&&(k, _)| {
                let (from, to) = (u128::from(k) * w, (u128::from(k) + 1) * w);
                if whole { from >= start } else { to > start }
            })
            .map(|&(_, n)| u64::from(n))
            .sum()
    }
}

impl HedgeBudget {
    /// A budget of `share` (0..=1) of the requests over `window`.
    pub fn new(share: f64, window: Duration) -> Self {
        let share = if share.is_finite() {
            share.clamp(0.0, 1.0)
        } else {
            0.0
        };
        let width = budget_bucket(window);
        Self {
            share,
            window,
            requests: Buckets::new(width),
            hedges: Buckets::new(width),
        }
    }

    /// A budget from the `hedging:` section.
    pub fn from_config(cfg: &HedgingConfig) -> Self {
        Self::new(cfg.budget_share, cfg.budget_window)
    }

    /// Count one request (every model call, hedged or not).
    pub fn record_request(&mut self, now: Instant) {
        self.requests.add(now);
    }

    /// How many hedges the window allows at `now`.
    fn allowed(&self, now: Instant) -> u64 {
        let requests = self.requests.in_window(now, self.window, true);
        (self.share * requests as f64).floor() as u64 + u64::from(BUDGET_MIN_PER_WINDOW)
    }

    /// Whether a hedge would be granted at `now`, without taking it.
    pub fn available(&mut self, now: Instant) -> bool {
        self.hedges_in_window(now) < self.allowed(now)
    }

    /// Take one hedge if the budget has one at `now`.
    pub fn try_take(&mut self, now: Instant) -> bool {
        if self.available(now) {
            self.hedges.add(now);
            true
        } else {
            false
        }
    }

    /// Nothing within the window at `now` (nor in a bucket reaching into
    /// it): the budget is as new, so its owner may forget it (an agent's,
    /// after the agent went quiet).
    pub fn is_idle(&mut self, now: Instant) -> bool {
        self.requests.in_window(now, self.window, false) == 0 && self.hedges_in_window(now) == 0
    }

    /// Hedges granted within the window at `now` (a bucket reaching into
    /// it counts whole).
    pub fn hedges_in_window(&mut self, now: Instant) -> u64 {
        self.hedges.in_window(now, self.window, false)
    }
}

/// Take a hedge from every budget in `budgets` (the deployment's and the
/// agent's), or from none: a hedge needs all of them to have room.
pub fn try_take_all(budgets: &mut [&mut HedgeBudget], now: Instant) -> bool {
    if budgets.iter_mut().all(|b| b.available(now)) {
        for b in budgets.iter_mut() {
            b.try_take(now);
        }
        true
    } else {
        false
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::clock::{Clock, FakeClock};
    use proptest::prelude::*;

    pub(crate) fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// A history of `samples` (ms), 10 ms apart on `clock`.
    pub(crate) fn history(clock: &FakeClock, samples: &[u64]) -> FirstTokenHistory {
        let mut h = FirstTokenHistory::new(HedgingConfig::default().history);
        for s in samples {
            h.record(clock.now(), ms(*s));
            clock.advance(ms(10));
        }
        h
    }

    #[test]
    fn hedge_point_table() {
        let cfg = HedgingConfig::default();
        let clock = FakeClock::default();
        let cases: &[(&str, &[u64], Duration)] = &[
            ("no history: the default", &[], ms(4000)),
            (
                "too few samples: the default",
                &[100, 100, 100, 100],
                ms(4000),
            ),
            ("fast deployment: the floor", &[100; 20], ms(500)),
            ("1 s usual: 1.5 s", &[1000; 20], ms(1500)),
            (
                "p95 of 19 × 1 s and one 10 s outlier is still 1 s",
                &[
                    1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000,
                    1000, 1000, 1000, 1000, 1000, 1000, 10_000,
                ],
                ms(1500),
            ),
            (
                "a model that always thinks 20 s: above 20 s",
                &[20_000; 10],
                ms(25_000),
            ),
            ("a very slow one: the ceiling", &[60_000; 10], ms(25_000)),
        ];
        for (name, samples, want) in cases {
            let h = history(&clock, samples);
            assert_eq!(hedge_point(&h, &cfg, clock.now()), *want, "{name}");
        }
    }

    #[test]
    fn a_thinking_model_is_not_hedged_once_known() {
        let cfg = HedgingConfig::default();
        let clock = FakeClock::default();
        let h = history(&clock, &[20_000; MIN_SAMPLES]);
        assert!(hedge_point(&h, &cfg, clock.now()) > ms(20_000));
        // Before it is known, it would be hedged at the default.
        let h = history(&clock, &[20_000; MIN_SAMPLES - 1]);
        assert_eq!(hedge_point(&h, &cfg, clock.now()), cfg.default_after);
    }

    #[test]
    fn old_samples_are_forgotten() {
        let cfg = HedgingConfig::default();
        let clock = FakeClock::default();
        let h = history(&clock, &[20_000; 10]);
        assert_eq!(hedge_point(&h, &cfg, clock.now()), ms(25_000));
        clock.advance(SAMPLE_MAX_AGE + ms(1));
        assert_eq!(hedge_point(&h, &cfg, clock.now()), cfg.default_after);
    }

    #[test]
    fn history_is_bounded() {
        let clock = FakeClock::default();
        let mut h = FirstTokenHistory::new(3);
        for s in [20_000, 20_000, 20_000, 100, 100, 100] {
            h.record(clock.now(), ms(s));
        }
        assert_eq!(h.len(), 3);
        assert_eq!(h.recent(clock.now()), vec![100, 100, 100]);
    }

    #[test]
    fn budget_table() {
        let clock = FakeClock::default();
        let mut b = HedgeBudget::new(0.05, Duration::from_secs(60));
        // A quiet agent: one hedge per window, not two.
        b.record_request(clock.now());
        assert!(b.try_take(clock.now()));
        assert!(!b.try_take(clock.now()));
        // 40 requests: ⌊0.05 × 40⌋ + 1 = 3 hedges.
        for _ in 0..39 {
            b.record_request(clock.now());
        }
        assert!(b.try_take(clock.now()));
        assert!(b.try_take(clock.now()));
        assert!(!b.try_take(clock.now()));
        // A window and a bucket later everything has aged out: the minimum again.
        let window = Duration::from_secs(60);
        clock.advance(window + budget_bucket(window));
        assert!(b.try_take(clock.now()));
        assert!(!b.try_take(clock.now()));
    }

    #[test]
    fn a_budget_stays_small_and_right_at_any_rate() {
        let clock = FakeClock::default();
        let window = Duration::from_secs(60);
        let mut b = HedgeBudget::new(0.05, window);
        // 10,000 requests a second for two windows.
        for _ in 0..120_000 {
            for _ in 0..10 {
                b.record_request(clock.now());
            }
            clock.advance(Duration::from_millis(1));
        }
        // A window holds 600,000 requests, less the bucket at its edge.
        let r = b.requests.in_window(clock.now(), window, true);
        let bucket = 10 * budget_bucket(window).as_millis() as u64;
        assert!((600_000 - bucket..=600_000).contains(&r), "{r}");
        let mut granted = 0;
        while b.try_take(clock.now()) {
            granted += 1;
        }
        assert_eq!(granted, (0.05 * r as f64).floor() as u64 + 1);
        // No heap: two fixed rings of buckets.
        assert!(std::mem::size_of::<HedgeBudget>() < 2048);
    }

    #[test]
    fn a_budget_is_idle_only_with_nothing_in_its_window() {
        let clock = FakeClock::default();
        let mut b = HedgeBudget::new(0.05, Duration::from_secs(60));
        assert!(b.is_idle(clock.now()));
        b.record_request(clock.now());
        assert!(!b.is_idle(clock.now()));
        assert!(b.try_take(clock.now()));
        let window = Duration::from_secs(60);
        clock.advance(window);
        assert!(!b.is_idle(clock.now()), "a full window is still within it");
        clock.advance(budget_bucket(window));
        assert!(b.is_idle(clock.now()));
        // Forgetting an idle budget loses nothing: a new one grants alike.
        assert!(b.try_take(clock.now()));
        assert!(!b.try_take(clock.now()));
    }

    #[test]
    fn all_budgets_or_none() {
        let clock = FakeClock::default();
        let mut dep = HedgeBudget::new(0.05, Duration::from_secs(60));
        let mut agent = HedgeBudget::new(0.05, Duration::from_secs(60));
        assert!(agent.try_take(clock.now()));
        // The agent's budget is spent: the deployment's is not touched.
        assert!(!try_take_all(&mut [&mut dep, &mut agent], clock.now()));
        assert_eq!(dep.hedges_in_window(clock.now()), 0);
        let window = Duration::from_secs(60);
        clock.advance(window + budget_bucket(window));
        assert!(try_take_all(&mut [&mut dep, &mut agent], clock.now()));
        assert_eq!(dep.hedges_in_window(clock.now()), 1);
        assert_eq!(agent.hedges_in_window(clock.now()), 1);
    }

    proptest! {
        #[test]
        fn hedge_point_within_floor_and_ceiling(
            samples in proptest::collection::vec(0u64..200_000, 0..80),
            floor in 0u64..5_000,
            span in 0u64..60_000,
            default_after in 0u64..100_000,
            quantile in 0.01f64..=1.0,
        ) {
            let cfg = HedgingConfig {
                floor: ms(floor),
                ceiling: ms(floor + span),
                default_after: ms(default_after),
                quantile,
                ..HedgingConfig::default()
            };
            let clock = FakeClock::default();
            let h = history(&clock, &samples);
            let p = hedge_point(&h, &cfg, clock.now());
            prop_assert!(p >= cfg.floor);
            prop_assert!(p <= cfg.ceiling);
        }

        #[test]
        fn always_slow_is_not_hedged_before_its_usual_time(
            first_token in 1_000u64..20_000,
            n in MIN_SAMPLES..50,
        ) {
            let cfg = HedgingConfig::default();
            let clock = FakeClock::default();
            let h = history(&clock, &vec![first_token; n]);
            prop_assert!(hedge_point(&h, &cfg, clock.now()) > ms(first_token));
        }

        #[test]
        fn budget_never_grants_more_than_share_plus_min(
            share in 0.0f64..=1.0,
            // (ms since the previous step, is it a request (else a hedge try))
            steps in proptest::collection::vec((0u64..5_000, any::<bool>()), 0..400),
        ) {
            let window = Duration::from_secs(10);
            let clock = FakeClock::default();
            let mut b = HedgeBudget::new(share, window);
            let mut requests: Vec<Instant> = Vec::new();
            let mut granted: Vec<Instant> = Vec::new();
            for (dt, is_request) in steps {
                clock.advance(ms(dt));
                let now = clock.now();
                if is_request {
                    b.record_request(now);
                    requests.push(now);
                } else if b.try_take(now) {
                    granted.push(now);
                    let in_window = |at: &&Instant| now.duration_since(**at) <= window;
                    let r = requests.iter().filter(in_window).count() as f64;
                    let h = granted.iter().filter(in_window).count() as f64;
                    prop_assert!(h <= (share * r).floor() + f64::from(BUDGET_MIN_PER_WINDOW));
                }
            }
        }
    }
}
