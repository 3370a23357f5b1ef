//! A deployment that turns slow (issue 43): when a first token is so late,
//! against the deployment's *own* recent first-token times, that the
//! attempt counts as a failure of the deployment — evidence toward its
//! ejection ([`crate::deployment::Health::on_slow`]), probed and brought back
//! like any ejected deployment.
//!
//! Why this and not only hedging? The hedge budget ([`crate::hedge`]) caps
//! hedges at a few per cent of the requests, so a deployment that stays slow
//! for minutes would still cost almost every turn its whole silence, up to
//! `first_token_timeout`. Ejection takes it out of rotation after a few
//! slow attempts instead.
//!
//! The rule, on the same history and quantile as the hedge point
//! (`hedging:` in docs/configuration.md):
//!
//! - [`slow_point`]: `quantile × slow_factor`, never under `slow_floor`; none
//!   with fewer than [`MIN_SAMPLES`] recent samples (an unknown deployment is
//!   not judged) or with `slow_factor` 0 (the rule off). A model that always
//!   thinks 20 s has a slow point of 60 s (the default factor 3): it is not
//!   an outlier of itself. The slow point is never before the hedge point
//!   (`slow_factor` ≥ [`HEDGE_FACTOR`], `slow_floor` ≥ `floor`), so an attempt
//!   is hedged before it is held against its deployment.
//! - [`silent`]: an attempt still without a first token at its slow point is
//!   a slow outlier *then* — it need not wait for its answer (which may never
//!   come) nor for `first_token_timeout`; a hedge's loser cancelled after its
//!   slow point was so judged before it lost.
//! - [`first_token`]: a first token judged against the history, and added
//!   to it only when it was not slow. A slow sample never becomes the
//!   baseline it is judged against, so a deployment that stays slow stays an
//!   outlier; it is learned again only once its usual samples age out of the
//!   history ([`crate::hedge::SAMPLE_MAX_AGE`], 10 minutes), after which its
//!   new pace is its own.

pub use crate::config::HedgingConfig;
use crate::hedge::{FirstTokenHistory, HEDGE_FACTOR, MIN_SAMPLES, hedge_point, quantile_ms};
use std::time::{Duration, Instant};

/// No slow point is later than this, whatever the factor (keeps `Instant`
/// arithmetic from overflowing).
pub const MAX_SLOW_POINT: Duration = Duration::from_secs(24 * 60 * 60);

/// What a first token (or its absence) says about the deployment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Too little history, or the rule is off: nothing is said.
    Unjudged,
    /// Within the deployment's usual pace (or, silent, not yet past it).
    Usual,
    /// Past the slow point: a slow outlier.
    Slow {
        /// The slow point it was judged against.
        point: Duration,
    },
}

/// The time after which an attempt on the deployment with this `history`
/// without a first token is a slow outlier; `None` when it is not judged.
pub fn slow_point(
    history: &FirstTokenHistory,
    cfg: &HedgingConfig,
    now: Instant,
) -> Option<Duration> {
    if !(cfg.slow_factor.is_finite() && cfg.slow_factor > 0.0) {
        return None;
    }
    let mut recent = history.recent(now);
    if recent.len() < MIN_SAMPLES {
        return None;
    }
    let q = quantile_ms(&mut recent, cfg.quantile) as f64;
    let factor = cfg.slow_factor.max(HEDGE_FACTOR);
    let ms = (q * factor).min(MAX_SLOW_POINT.as_millis() as f64);
    Some(
        Duration::from_millis(ms as u64)
            .max(cfg.slow_floor)
            .min(MAX_SLOW_POINT),
    )
}

/// An attempt still without a first token `silent_for` after it was sent:
/// slow from its slow point on.
pub fn silent(
    history: &FirstTokenHistory,
    cfg: &HedgingConfig,
    silent_for: Duration,
    now: Instant,
) -> Verdict {
    match slow_point(history, cfg, now) {
        None => Verdict::Unjudged,
        Some(point) if silent_for >= point => Verdict::Slow { point },
        Some(_) => Verdict::Usual,
    }
}

/// The loser of a hedge's race, cancelled `silent_for` after it was sent
/// because the other attempt produced a first token while it had none: a
/// slow outlier when it was silent for at least its deployment's hedge point
/// ([`hedge_point`]) — it was late against its own history and another
/// deployment, sent later, answered first. Judged only when the deployment
/// is judged at all ([`slow_point`]: enough samples, the rule on).
///
/// Why judge before the slow point? Without it, the hedges a deployment that
/// turned slow receives are never held against it (each loser is cancelled
/// well before its slow point), so it is ejected only once the hedge budget
/// runs out and turns wait their whole slow point. The evidence rule is the
/// same as for any failure: [`crate::deployment::Health::on_slow`] ejects
/// after `eject_after` in a row, and a success of its own in between starts
/// the count over, so the occasional hedged tail of a healthy deployment
/// (at most `budget_share` of its calls) does not eject it. A loser raced
/// from its start (a probe, see the gateway's attempt loop) that lost to a
/// faster peer before its own hedge point is `Usual`: losing a fair race
/// is not lateness.
pub fn lost_race(
    history: &FirstTokenHistory,
    cfg: &HedgingConfig,
    silent_for: Duration,
    now: Instant,
) -> Verdict {
    if slow_point(history, cfg, now).is_none() {
        return Verdict::Unjudged;
    }
    let point = hedge_point(history, cfg, now);
    if silent_for >= point {
        Verdict::Slow { point }
    } else {
        Verdict::Usual
    }
}

/// A first token `elapsed` after the request was sent: judged against the
/// history, then recorded in it unless it was slow.
pub fn first_token(
    history: &mut FirstTokenHistory,
    cfg: &HedgingConfig,
    elapsed: Duration,
    now: Instant,
) -> Verdict {
    let verdict = match slow_point(history, cfg, now) {
        None => Verdict::Unjudged,
        Some(point) if elapsed > point => Verdict::Slow { point },
        Some(_) => Verdict::Usual,
    };
    match verdict {
        Verdict::Slow { .. } => {}
        Verdict::Unjudged | Verdict::Usual => history.record(now, elapsed),
    }
    verdict
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{Clock, FakeClock};
    use crate::hedge::SAMPLE_MAX_AGE;
    use crate::hedge::tests::{history, ms};
    use proptest::prelude::*;

    #[test]
    fn slow_point_table() {
        let cfg = HedgingConfig::default();
        let clock = FakeClock::default();
        let cases: &[(&str, &[u64], Option<Duration>)] = &[
            ("no history: not judged", &[], None),
            ("too few samples: not judged", &[100; MIN_SAMPLES - 1], None),
            ("fast deployment: the floor", &[100; 20], Some(ms(2000))),
            ("1 s usual: 3 s", &[1000; 20], Some(ms(3000))),
            (
                "a model that always thinks 20 s: 60 s",
                &[20_000; 10],
                Some(ms(60_000)),
            ),
        ];
        for (name, samples, want) in cases {
            let h = history(&clock, samples);
            assert_eq!(slow_point(&h, &cfg, clock.now()), *want, "{name}");
        }
        let off = HedgingConfig {
            slow_factor: 0.0,
            ..HedgingConfig::default()
        };
        let h = history(&clock, &[1000; 20]);
        assert_eq!(slow_point(&h, &off, clock.now()), None, "factor 0: off");
    }

    #[test]
    fn verdict_table() {
        let cfg = HedgingConfig::default();
        let clock = FakeClock::default();
        // Usually 1 s: the slow point is 3 s.
        let known = history(&clock, &[1000; 20]);
        let unknown = history(&clock, &[1000; MIN_SAMPLES - 1]);
        let slow = Verdict::Slow { point: ms(3000) };
        let cases: &[(&str, &FirstTokenHistory, bool, u64, Verdict)] = &[
            (
                "token at its usual time",
                &known,
                true,
                1000,
                Verdict::Usual,
            ),
            (
                "token at the slow point",
                &known,
                true,
                3000,
                Verdict::Usual,
            ),
            ("token past the slow point", &known, true, 3001, slow),
            (
                "silent before the slow point",
                &known,
                false,
                2999,
                Verdict::Usual,
            ),
            ("silent at the slow point", &known, false, 3000, slow),
            (
                "unknown, token at 20 s",
                &unknown,
                true,
                20_000,
                Verdict::Unjudged,
            ),
            (
                "unknown, silent at 20 s",
                &unknown,
                false,
                20_000,
                Verdict::Unjudged,
            ),
        ];
        for (name, h, token, at, want) in cases {
            let got = if *token {
                first_token(&mut (*h).clone(), &cfg, ms(*at), clock.now())
            } else {
                silent(h, &cfg, ms(*at), clock.now())
            };
            assert_eq!(got, *want, "{name}");
        }
    }

    #[test]
    fn lost_race_table() {
        let cfg = HedgingConfig::default();
        let clock = FakeClock::default();
        // Usually 1 s: hedged at 1.5 s, slow at 3 s.
        let known = history(&clock, &[1000; 20]);
        let unknown = history(&clock, &[1000; MIN_SAMPLES - 1]);
        let off = HedgingConfig {
            slow_factor: 0.0,
            ..HedgingConfig::default()
        };
        let late = Verdict::Slow { point: ms(1500) };
        let cases: &[(&str, &FirstTokenHistory, &HedgingConfig, u64, Verdict)] = &[
            ("hedged, lost at its hedge point", &known, &cfg, 1500, late),
            (
                "hedged, lost before its slow point",
                &known,
                &cfg,
                2200,
                late,
            ),
            (
                "raced from its start, lost to a faster peer",
                &known,
                &cfg,
                1499,
                Verdict::Usual,
            ),
            (
                "too little history",
                &unknown,
                &cfg,
                2200,
                Verdict::Unjudged,
            ),
            ("the slow rule off", &known, &off, 2200, Verdict::Unjudged),
        ];
        for (name, h, cfg, silent_for, want) in cases {
            let got = lost_race(h, cfg, ms(*silent_for), clock.now());
            assert_eq!(got, *want, "{name}");
        }
    }

    #[test]
    fn a_thinking_model_is_not_an_outlier_of_itself() {
        let cfg = HedgingConfig::default();
        let clock = FakeClock::default();
        let mut h = FirstTokenHistory::new(cfg.history);
        for _ in 0..40 {
            let v = first_token(&mut h, &cfg, ms(20_000), clock.now());
            assert!(!matches!(v, Verdict::Slow { .. }), "{v:?}");
            clock.advance(ms(1000));
        }
        assert_eq!(silent(&h, &cfg, ms(25_000), clock.now()), Verdict::Usual);
    }

    #[test]
    fn a_slow_sample_does_not_move_the_baseline() {
        let cfg = HedgingConfig::default();
        let clock = FakeClock::default();
        let mut h = history(&clock, &[300; 10]);
        // The deployment turns slow: every 20 s first token is an outlier,
        // however many there are, because none enters the history.
        for _ in 0..100 {
            let v = first_token(&mut h, &cfg, ms(20_000), clock.now());
            assert_eq!(v, Verdict::Slow { point: ms(2000) });
            clock.advance(ms(1000));
        }
        assert_eq!(h.len(), 10);
        // It comes back: its usual time is usual again.
        assert_eq!(
            first_token(&mut h, &cfg, ms(300), clock.now()),
            Verdict::Usual
        );
    }

    #[test]
    fn a_new_pace_is_learned_once_the_old_one_aged_out() {
        let cfg = HedgingConfig::default();
        let clock = FakeClock::default();
        let mut h = history(&clock, &[300; 10]);
        clock.advance(SAMPLE_MAX_AGE + ms(1));
        // Nothing recent: not judged, so the new pace is recorded…
        for _ in 0..MIN_SAMPLES {
            let v = first_token(&mut h, &cfg, ms(20_000), clock.now());
            assert_eq!(v, Verdict::Unjudged);
        }
        // …and is the deployment's own from then on.
        assert_eq!(
            first_token(&mut h, &cfg, ms(20_000), clock.now()),
            Verdict::Usual
        );
    }

    proptest! {
        #[test]
        fn never_slow_before_the_hedge_point(
            samples in proptest::collection::vec(0u64..200_000, 0..80),
            floor in 1u64..5_000,
            span in 0u64..60_000,
            extra_floor in 0u64..5_000,
            factor in 1.5f64..10.0,
            quantile in 0.01f64..=1.0,
        ) {
            let cfg = HedgingConfig {
                floor: ms(floor),
                ceiling: ms(floor + span),
                slow_floor: ms(floor + extra_floor),
                slow_factor: factor,
                quantile,
                ..HedgingConfig::default()
            };
            let clock = FakeClock::default();
            let h = history(&clock, &samples);
            if let Some(point) = slow_point(&h, &cfg, clock.now()) {
                prop_assert!(point >= hedge_point(&h, &cfg, clock.now()));
                prop_assert!(point >= cfg.slow_floor);
            }
        }

        #[test]
        fn a_steady_pace_is_never_slow(
            pace in 0u64..100_000,
            n in 0usize..120,
            jitter in proptest::collection::vec(0u64..=100, 0..120),
        ) {
            // Every first token within ±10 % of its pace, as a model that
            // always thinks about as long: never an outlier of itself.
            let cfg = HedgingConfig::default();
            let clock = FakeClock::default();
            let mut h = FirstTokenHistory::new(cfg.history);
            for i in 0..n {
                let j = jitter.get(i).copied().unwrap_or(50);
                let t = pace * (900 + 2 * j) / 1000;
                let v = first_token(&mut h, &cfg, ms(t), clock.now());
                prop_assert!(!matches!(v, Verdict::Slow { .. }), "{t} ms: {v:?}");
                clock.advance(ms(500));
            }
        }

        #[test]
        fn judged_only_with_enough_recent_history(
            samples in proptest::collection::vec(0u64..100_000, 0..MIN_SAMPLES),
            at in 0u64..1_000_000,
        ) {
            let cfg = HedgingConfig::default();
            let clock = FakeClock::default();
            let h = history(&clock, &samples);
            prop_assert_eq!(silent(&h, &cfg, ms(at), clock.now()), Verdict::Unjudged);
            prop_assert_eq!(lost_race(&h, &cfg, ms(at), clock.now()), Verdict::Unjudged);
        }

        #[test]
        fn a_lost_race_is_late_exactly_from_the_hedge_point(
            samples in proptest::collection::vec(0u64..100_000, MIN_SAMPLES..80),
            at in 0u64..200_000,
        ) {
            let cfg = HedgingConfig::default();
            let clock = FakeClock::default();
            let h = history(&clock, &samples);
            let point = hedge_point(&h, &cfg, clock.now());
            let want = if ms(at) >= point {
                Verdict::Slow { point }
            } else {
                Verdict::Usual
            };
            prop_assert_eq!(lost_race(&h, &cfg, ms(at), clock.now()), want);
            // Never later than the slow rule itself would judge a silence.
            let silent_slow = matches!(silent(&h, &cfg, ms(at), clock.now()), Verdict::Slow { .. });
            let lost_slow = matches!(lost_race(&h, &cfg, ms(at), clock.now()), Verdict::Slow { .. });
            prop_assert!(!silent_slow || lost_slow);
        }
    }
}
