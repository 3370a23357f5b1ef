//! Latency-aware choice among a route's targets of equal rank (issue 43;
//! docs/configuration.md, "routes"): which of a load-balanced group is
//! tried first, and in which order the rest follow.
//!
//! Two rules, both pure (time and randomness are arguments):
//!
//! - [`PeakEwma`]: a deployment's recent time to first token. A sample
//!   above the estimate replaces it at once (a deployment turning slow is
//!   seen on its first slow answer); one below pulls it down with weight
//!   `1 − e^(−Δt / DECAY)` (so a single fast answer does not hide a slow
//!   trend). With no sample for a while the estimate fades toward unknown
//!   (`e^(−idle / FORGET)`), so a deployment that was slow is tried again
//!   once in a while instead of being starved of the samples that would show
//!   it recovered. Unknown costs 0: a new deployment is tried early.
//! - [`order`]: the power of two choices — two members drawn at random, the
//!   one with the clearly lower estimate first (else the first drawn), the
//!   other second, the rest after in random order. Estimates within
//!   [`MARGIN`] of each other are one pace, so equal deployments share.
//!
//! Why these: a plain "lowest estimate first" herds every turn onto one
//! deployment until it slows down, then onto the next; two random choices
//! spread the load while never putting the clearly slower of two first
//! (Mitzenmacher's result, as Finagle and Linkerd balance with peak-EWMA).
//! The peak reacts to a slow deployment at its first slow sample, faster
//! than a mean. Failures are not latency: ejection and breakers
//! ([`crate::deployment`], [`crate::breaker`]) take a failing deployment out
//! before the balancer sees it.

use rand::seq::SliceRandom;
use rand::{Rng, RngExt};
use std::time::{Duration, Instant};

/// How fast the estimate follows samples below it.
pub const DECAY: Duration = Duration::from_secs(10);
/// How fast an estimate with no new sample fades toward unknown.
pub const FORGET: Duration = Duration::from_secs(60);
/// One member goes before the other only when it is cheaper by more than
/// this share…
pub const MARGIN: f64 = 0.2;
/// …and by more than this many milliseconds: closer estimates are noise,
/// and the random draw decides, so two deployments of the same pace share
/// the traffic instead of the one a hair faster taking all of it.
pub const MARGIN_MS: f64 = 5.0;

/// Whether an estimate of `a` ms is clearly cheaper than one of `b` ms.
pub fn clearly_cheaper(a: f64, b: f64) -> bool {
    a < b * (1.0 - MARGIN) && b - a > MARGIN_MS
}

/// A deployment's peak-sensitive moving estimate of its time to first
/// token, in milliseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PeakEwma {
    ms: f64,
    at: Option<Instant>,
}

/// `e^(−elapsed / tau)`.
fn fade(elapsed: Duration, tau: Duration) -> f64 {
    (-elapsed.as_secs_f64() / tau.as_secs_f64()).exp()
}

impl PeakEwma {
    /// The estimate at `now` (ms): faded since the last sample; 0 with none.
    pub fn cost(&self, now: Instant) -> f64 {
        match self.at {
            None => 0.0,
            Some(at) => self.ms * fade(now.saturating_duration_since(at), FORGET),
        }
    }

    /// A first token `sample` after the request was sent, seen at `now`.
    pub fn observe(&mut self, now: Instant, sample: Duration) {
        let x = sample.as_secs_f64() * 1000.0;
        let base = self.cost(now);
        self.ms = match self.at {
            Some(at) if x < base => {
                let w = fade(now.saturating_duration_since(at), DECAY);
                base * w + x * (1.0 - w)
            }
            Some(_) | None => x,
        };
        self.at = Some(now);
    }
}

/// The order to try a group of equal rank whose members' estimates are
/// `costs`: two members drawn at random, the [`clearly_cheaper`] first
/// (else the first drawn), the other second, then the rest in random order.
/// A group of one (or none) keeps its order.
pub fn order<R: Rng + ?Sized>(costs: &[f64], rng: &mut R) -> Vec<usize> {
    let n = costs.len();
    if n < 2 {
        return (0..n).collect();
    }
    let i = rng.random_range(0..n);
    let mut j = rng.random_range(0..n - 1);
    if j >= i {
        j += 1;
    }
    let (first, second) = if clearly_cheaper(costs[j], costs[i]) {
        (j, i)
    } else {
        (i, j)
    };
    let mut rest: Vec<usize> = (0..n).filter(|&k| k != i && k != j).collect();
    rest.shuffle(rng);
    let mut out = Vec::with_capacity(n);
    out.push(first);
    out.push(second);
    out.extend(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{Clock, FakeClock};
    use proptest::prelude::*;
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn the_estimate_table() {
        let clock = FakeClock::default();
        let t0 = clock.now();
        let mut e = PeakEwma::default();
        assert_eq!(e.cost(t0), 0.0, "unknown costs nothing");
        e.observe(t0, ms(300));
        assert_eq!(e.cost(t0), 300.0, "the first sample is the estimate");
        // A slower sample replaces it at once (the peak).
        e.observe(t0 + ms(100), ms(10_000));
        assert!((e.cost(t0 + ms(100)) - 10_000.0).abs() < 1e-6);
        // A fast one right after pulls it down only a little…
        e.observe(t0 + ms(200), ms(300));
        let c = e.cost(t0 + ms(200));
        assert!(c > 9_000.0 && c < 10_000.0, "{c}");
        // …and a steady fast pace brings it back near its own.
        let mut at = t0 + ms(200);
        for _ in 0..100 {
            at += ms(1000);
            e.observe(at, ms(300));
        }
        let c = e.cost(at);
        assert!(c < 310.0, "{c}");
        // Idle, it fades toward unknown.
        let idle = e.cost(at + FORGET * 5);
        assert!(idle < 3.0, "{idle}");
    }

    #[test]
    fn the_order_table() {
        let mut rng = StdRng::seed_from_u64(7);
        let cases: &[(&str, &[f64], &[usize])] = &[
            ("none", &[], &[]),
            ("one", &[5.0], &[0]),
            ("two: the cheaper first", &[400.0, 2.0], &[1, 0]),
            ("two: unknown before known", &[50.0, 0.0], &[1, 0]),
        ];
        for (name, costs, want) in cases {
            for _ in 0..20 {
                assert_eq!(order(costs, &mut rng), *want, "{name}");
            }
        }
    }

    #[test]
    fn members_of_about_the_same_pace_share_the_first_place() {
        let cases: &[&[f64]] = &[
            &[100.0, 100.0, 100.0],
            // Within the margin: 10 %, or 4 ms.
            &[100.0, 110.0, 105.0],
            &[1.0, 5.0, 3.0],
        ];
        for costs in cases {
            let mut rng = StdRng::seed_from_u64(11);
            let mut firsts = [0u32; 3];
            for _ in 0..3000 {
                firsts[order(costs, &mut rng)[0]] += 1;
            }
            for (i, n) in firsts.iter().enumerate() {
                assert!(
                    (800..=1200).contains(n),
                    "{costs:?}: member {i} first {n} of 3000"
                );
            }
        }
    }

    proptest! {
        #[test]
        fn an_order_is_a_permutation_and_never_puts_the_slowest_first(
            costs in proptest::collection::vec(0.0f64..100_000.0, 0..8),
            seed in any::<u64>(),
        ) {
            let mut rng = StdRng::seed_from_u64(seed);
            let o = order(&costs, &mut rng);
            let mut sorted = o.clone();
            sorted.sort_unstable();
            prop_assert_eq!(sorted, (0..costs.len()).collect::<Vec<_>>());
            if costs.len() >= 2 {
                // The first never loses clearly to the second, so one
                // clearly slower than every other member is never first.
                prop_assert!(!clearly_cheaper(costs[o[1]], costs[o[0]]));
                let slowest = (0..costs.len()).find(|&k| {
                    (0..costs.len()).all(|m| m == k || clearly_cheaper(costs[m], costs[k]))
                });
                if let Some(k) = slowest {
                    prop_assert_ne!(o[0], k);
                }
            }
        }

        #[test]
        fn the_estimate_never_leaves_its_samples_range_while_sampled(
            samples in proptest::collection::vec((1u64..60_000, 0u64..5_000), 1..60),
        ) {
            let clock = FakeClock::default();
            let mut e = PeakEwma::default();
            let (mut lo, mut hi) = (f64::MAX, 0.0f64);
            for (s, gap) in samples {
                clock.advance(ms(gap));
                e.observe(clock.now(), ms(s));
                lo = lo.min(s as f64);
                hi = hi.max(s as f64);
                let c = e.cost(clock.now());
                prop_assert!(c <= hi + 1e-6, "{} over the peak {}", c, hi);
                // Fading while idle can take it under the samples, never
                // under zero.
                prop_assert!(c >= 0.0);
            }
        }
    }
}
