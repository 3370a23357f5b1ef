//! Tests of the breaker under fake `Instant`s (no sleeping).

use super::*;
use proptest::prelude::*;
use rand::SeedableRng;
use rand::rngs::SmallRng;

fn s(n: u64) -> Duration {
    Duration::from_secs(n)
}
fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A config with no trip rule, no jitter and no growth; tests switch on what they check.
fn bare() -> BreakerConfig {
    BreakerConfig {
        consecutive_failures: None,
        failure_threshold: None,
        failure_rate: None,
        open_jitter: 0.0,
        ..BreakerConfig::default()
    }
}

fn ok() -> CallOutcome {
    CallOutcome::Success { latency: ms(10) }
}
fn fail() -> CallOutcome {
    fail_class(ErrorClass::Overloaded)
}
fn fail_class(class: ErrorClass) -> CallOutcome {
    CallOutcome::Failure {
        class,
        latency: ms(10),
        retry_after: None,
    }
}
fn fail_retry_after(ra: Duration) -> CallOutcome {
    CallOutcome::Failure {
        class: ErrorClass::RateLimit,
        latency: ms(10),
        retry_after: Some(ra),
    }
}
fn rng() -> SmallRng {
    SmallRng::seed_from_u64(7)
}

/// Records `n` outcomes at `at`, returning the last transition seen.
fn record_n(b: &mut Breaker, at: Instant, n: u32, o: CallOutcome) -> Option<Transition> {
    let mut r = rng();
    let mut last = None;
    for _ in 0..n {
        if let Some(t) = b.record(at, o, &mut r) {
            last = Some(t);
        }
    }
    last
}

/// Trips a breaker configured with `consecutive_failures: 1`.
fn opened(cfg: BreakerConfig, t0: Instant) -> Breaker {
    let mut b = Breaker::new(BreakerConfig {
        consecutive_failures: Some(1),
        ..cfg
    });
    let t = b.record(t0, fail(), &mut rng()).expect("trips");
    assert_eq!(t.to, BreakerState::Open);
    b
}

#[test]
fn consecutive_failures_trip_at_n_not_n_minus_1() {
    let t0 = Instant::now();
    let mut b = Breaker::new(BreakerConfig {
        consecutive_failures: Some(3),
        ..bare()
    });
    assert!(record_n(&mut b, t0, 2, fail()).is_none());
    assert_eq!(b.state(t0), BreakerState::Closed);
    let t = b
        .record(t0, fail(), &mut rng())
        .expect("third failure trips");
    assert_eq!((t.from, t.to), (BreakerState::Closed, BreakerState::Open));
    assert!(t.reason.contains("consecutive"), "{}", t.reason);
}

#[test]
fn a_success_breaks_the_consecutive_run() {
    let t0 = Instant::now();
    let mut b = Breaker::new(BreakerConfig {
        consecutive_failures: Some(3),
        ..bare()
    });
    record_n(&mut b, t0, 2, fail());
    b.record(t0, ok(), &mut rng());
    assert!(record_n(&mut b, t0, 2, fail()).is_none());
    assert_eq!(b.state(t0), BreakerState::Closed);
    assert_eq!(b.snapshot(t0).consecutive, 2);
}

#[test]
fn failure_threshold_trips_at_n_within_window() {
    let t0 = Instant::now();
    let mut b = Breaker::new(BreakerConfig {
        failure_threshold: Some(5),
        window: s(60),
        ..bare()
    });
    // Successes in between do not matter for this rule.
    for i in 0..4 {
        assert!(b.record(t0 + s(i), fail(), &mut rng()).is_none());
        b.record(t0 + s(i), ok(), &mut rng());
    }
    assert_eq!(b.state(t0), BreakerState::Closed);
    let t = b
        .record(t0 + s(10), fail(), &mut rng())
        .expect("fifth trips");
    assert_eq!(t.to, BreakerState::Open);
    assert!(t.reason.contains("within"), "{}", t.reason);
}

#[test]
fn window_slides_old_failures_out() {
    let t0 = Instant::now();
    let mut b = Breaker::new(BreakerConfig {
        failure_threshold: Some(3),
        window: s(60),
        ..bare()
    });
    b.record(t0, fail(), &mut rng());
    b.record(t0 + s(30), fail(), &mut rng());
    // The first failure is 61 s old now: only 2 in the window.
    assert!(b.record(t0 + s(61), fail(), &mut rng()).is_none());
    assert_eq!(b.state(t0 + s(61)), BreakerState::Closed);
    // Three within 60 s (30, 61, 62) trip.
    assert!(b.record(t0 + s(62), fail(), &mut rng()).is_some());
    assert_eq!(b.state(t0 + s(62)), BreakerState::Open);
}

#[test]
fn snapshot_counts_only_the_window() {
    let t0 = Instant::now();
    let mut b = Breaker::new(BreakerConfig {
        window: s(60),
        ..bare()
    });
    b.record(t0, fail(), &mut rng());
    b.record(t0, ok(), &mut rng());
    b.record(t0 + s(50), fail(), &mut rng());
    let snap = b.snapshot(t0 + s(50));
    assert_eq!((snap.calls_in_window, snap.failures_in_window), (3, 2));
    let later = b.snapshot(t0 + s(100));
    assert_eq!((later.calls_in_window, later.failures_in_window), (1, 1));
    assert_eq!(b.snapshot(t0 + s(200)).calls_in_window, 0);
}

#[test]
fn rate_rule_needs_min_calls() {
    let t0 = Instant::now();
    let cfg = BreakerConfig {
        failure_rate: Some(0.5),
        min_calls: 10,
        window: s(60),
        ..bare()
    };
    // 9 calls, all failed: rate 100 % but under min_calls.
    let mut b = Breaker::new(cfg.clone());
    assert!(record_n(&mut b, t0, 9, fail()).is_none());
    assert_eq!(b.state(t0), BreakerState::Closed);
    // The 10th call, a failure, reaches min_calls.
    assert!(b.record(t0, fail(), &mut rng()).is_some());

    // At N-1: 4 failures in 10 calls (40 %) stays closed; the 5th (5/11 = 45 %) too;
    // 6 of 12 (50 %) trips.
    let mut b = Breaker::new(cfg);
    record_n(&mut b, t0, 6, ok());
    assert!(record_n(&mut b, t0, 4, fail()).is_none());
    assert!(b.record(t0, fail(), &mut rng()).is_none());
    let t = b.record(t0, fail(), &mut rng()).expect("50 % of 12 trips");
    assert!(t.reason.contains("failure rate"), "{}", t.reason);
}

#[test]
fn rate_rule_forgets_calls_outside_the_window() {
    let t0 = Instant::now();
    let mut b = Breaker::new(BreakerConfig {
        failure_rate: Some(0.5),
        min_calls: 4,
        window: s(60),
        ..bare()
    });
    record_n(&mut b, t0, 3, fail());
    // Those three have left the window: one failure alone is under min_calls.
    assert!(b.record(t0 + s(120), fail(), &mut rng()).is_none());
    assert_eq!(b.state(t0 + s(120)), BreakerState::Closed);
}

#[test]
fn slow_successes_count_as_failures() {
    let t0 = Instant::now();
    let mut b = Breaker::new(BreakerConfig {
        consecutive_failures: Some(2),
        slow_call: Some(s(5)),
        ..bare()
    });
    let slow = CallOutcome::Success { latency: s(6) };
    let just_in_time = CallOutcome::Success { latency: s(5) };
    b.record(t0, slow, &mut rng());
    b.record(t0, just_in_time, &mut rng());
    assert_eq!(
        b.snapshot(t0).consecutive,
        0,
        "a call at the threshold is not slow"
    );
    b.record(t0, slow, &mut rng());
    assert!(b.record(t0, slow, &mut rng()).is_some());
    assert_eq!(b.state(t0), BreakerState::Open);
}

#[test]
fn uncounted_classes_are_neither_success_nor_failure() {
    let t0 = Instant::now();
    let mut b = Breaker::new(BreakerConfig {
        consecutive_failures: Some(2),
        ..bare()
    });
    assert!(!b.config().counted_classes.contains(&ErrorClass::BadRequest));
    b.record(t0, fail(), &mut rng());
    // A 400 between two failures neither resets the run nor adds to it.
    assert!(record_n(&mut b, t0, 10, fail_class(ErrorClass::BadRequest)).is_none());
    assert_eq!(b.snapshot(t0).consecutive, 1);
    assert_eq!(b.snapshot(t0).calls_in_window, 1);
    assert!(b.record(t0, fail(), &mut rng()).is_some());
}

#[test]
fn open_rejects_until_half_open_after_then_admits_one_trial() {
    let t0 = Instant::now();
    let mut b = opened(bare(), t0);
    match b.allow(t0 + s(9)) {
        Admission::Rejected { retry_in } => assert_eq!(retry_in, s(1)),
        other => panic!("expected rejection, got {other:?}"),
    }
    let (adm, t) = b.admit(t0 + s(10));
    assert_eq!(adm, Admission::Trial);
    let t = t.expect("open → half-open reported");
    assert_eq!((t.from, t.to), (BreakerState::Open, BreakerState::HalfOpen));
    // Bounded: the second caller is refused while the trial is out.
    assert!(matches!(b.allow(t0 + s(10)), Admission::Rejected { .. }));
    assert_eq!(b.state(t0 + s(10)), BreakerState::HalfOpen);
}

#[test]
fn half_open_admits_up_to_half_open_requests() {
    let t0 = Instant::now();
    let mut b = opened(
        BreakerConfig {
            half_open_requests: 3,
            ..bare()
        },
        t0,
    );
    let t = t0 + s(10);
    assert_eq!(b.allow(t), Admission::Trial);
    assert_eq!(b.allow(t), Admission::Trial);
    assert_eq!(b.allow(t), Admission::Trial);
    assert!(matches!(b.allow(t), Admission::Rejected { .. }));
    assert_eq!(b.snapshot(t).trials_in_flight, 3);
}

#[test]
fn trial_success_closes_and_clears_counts() {
    let t0 = Instant::now();
    let mut b = opened(bare(), t0);
    assert_eq!(b.allow(t0 + s(10)), Admission::Trial);
    let t = b.record(t0 + s(11), ok(), &mut rng()).expect("closes");
    assert_eq!(
        (t.from, t.to),
        (BreakerState::HalfOpen, BreakerState::Closed)
    );
    assert_eq!(b.allow(t0 + s(11)), Admission::Allowed);
    let snap = b.snapshot(t0 + s(11));
    assert_eq!((snap.consecutive, snap.failures_in_window), (0, 0));
}

#[test]
fn success_threshold_needs_that_many_trials() {
    let t0 = Instant::now();
    let mut b = opened(
        BreakerConfig {
            success_threshold: 2,
            ..bare()
        },
        t0,
    );
    assert_eq!(b.allow(t0 + s(10)), Admission::Trial);
    assert!(b.record(t0 + s(10), ok(), &mut rng()).is_none());
    assert_eq!(b.state(t0 + s(10)), BreakerState::HalfOpen);
    assert_eq!(b.allow(t0 + s(10)), Admission::Trial);
    assert!(b.record(t0 + s(10), ok(), &mut rng()).is_some());
    assert_eq!(b.state(t0 + s(10)), BreakerState::Closed);
}

#[test]
fn failed_trials_double_the_open_duration_up_to_max_open() {
    let t0 = Instant::now();
    let mut b = opened(
        BreakerConfig {
            half_open_after: s(10),
            max_open: s(35),
            ..bare()
        },
        t0,
    );
    let mut now = t0;
    for expected in [s(10), s(20), s(35), s(35)] {
        now += expected;
        assert_eq!(
            b.allow(now - ms(1)),
            Admission::Rejected { retry_in: ms(1) }
        );
        assert_eq!(
            b.allow(now),
            Admission::Trial,
            "trial due after {expected:?}"
        );
        let t = b.record(now, fail(), &mut rng()).expect("reopens");
        assert_eq!((t.from, t.to), (BreakerState::HalfOpen, BreakerState::Open));
    }
    assert_eq!(b.snapshot(now).open_remaining_ms, 35_000);
}

#[test]
fn no_growth_when_max_open_is_not_above_half_open_after() {
    let t0 = Instant::now();
    // The default: half_open_after == max_open == 10 s.
    let mut b = opened(bare(), t0);
    let mut now = t0;
    for _ in 0..3 {
        now += s(10);
        assert_eq!(b.allow(now), Admission::Trial);
        b.record(now, fail(), &mut rng());
        assert_eq!(b.snapshot(now).open_remaining_ms, 10_000);
    }
}

#[test]
fn retry_after_floors_the_open_duration() {
    let t0 = Instant::now();
    let mut b = Breaker::new(BreakerConfig {
        consecutive_failures: Some(1),
        ..bare()
    });
    b.record(t0, fail_retry_after(s(45)), &mut rng());
    assert_eq!(b.snapshot(t0).open_remaining_ms, 45_000);
    assert!(matches!(b.allow(t0 + s(44)), Admission::Rejected { .. }));
    assert_eq!(b.allow(t0 + s(45)), Admission::Trial);
    // A shorter Retry-After does not shorten it.
    b.record(t0 + s(45), fail_retry_after(s(1)), &mut rng());
    assert_eq!(b.snapshot(t0 + s(45)).open_remaining_ms, 10_000);
}

#[test]
fn untrusted_huge_retry_after_does_not_panic() {
    let t0 = Instant::now();
    let mut b = Breaker::new(BreakerConfig {
        consecutive_failures: Some(1),
        ..bare()
    });
    b.record(t0, fail_retry_after(Duration::MAX), &mut rng());
    assert_eq!(
        b.snapshot(t0).open_remaining_ms,
        MAX_HOLD.as_millis() as u64
    );
}

#[test]
fn jitter_stays_within_its_fraction() {
    let t0 = Instant::now();
    let mut seen = std::collections::BTreeSet::new();
    for seed in 0..200 {
        let mut b = Breaker::new(BreakerConfig {
            consecutive_failures: Some(1),
            open_jitter: 0.2,
            ..bare()
        });
        b.record(t0, fail(), &mut SmallRng::seed_from_u64(seed));
        let open = b.snapshot(t0).open_remaining_ms;
        assert!((8_000..=12_000).contains(&open), "open {open} ms");
        seen.insert(open);
    }
    assert!(
        seen.len() > 50,
        "jitter spreads the durations: {}",
        seen.len()
    );
}

#[test]
fn a_trial_never_reported_counts_as_failed_after_the_timeout() {
    let t0 = Instant::now();
    let mut b = Breaker::new(BreakerConfig {
        consecutive_failures: Some(1),
        half_open_after: s(10),
        max_open: s(40),
        ..bare()
    })
    .with_trial_timeout(s(5));
    b.record(t0, fail(), &mut rng());
    assert_eq!(b.allow(t0 + s(10)), Admission::Trial);
    match b.allow(t0 + s(12)) {
        Admission::Rejected { retry_in } => assert_eq!(retry_in, s(3)),
        other => panic!("{other:?}"),
    }
    let (adm, t) = b.admit(t0 + s(15));
    let t = t.expect("the hung trial reopens the breaker");
    assert_eq!((t.from, t.to), (BreakerState::HalfOpen, BreakerState::Open));
    assert!(t.reason.contains("timed out"));
    // Counted as a failed trial: the open duration doubled.
    assert_eq!(adm, Admission::Rejected { retry_in: s(20) });
}

#[test]
fn a_recorded_timeout_fails_the_trial() {
    let t0 = Instant::now();
    let mut b = opened(bare(), t0);
    assert_eq!(b.allow(t0 + s(10)), Admission::Trial);
    let t = b
        .record(t0 + s(12), fail_class(ErrorClass::Timeout), &mut rng())
        .expect("reopens");
    assert_eq!(t.to, BreakerState::Open);
}

#[test]
fn an_uncounted_trial_outcome_frees_its_slot_only() {
    let t0 = Instant::now();
    let mut b = opened(bare(), t0);
    assert_eq!(b.allow(t0 + s(10)), Admission::Trial);
    assert!(
        b.record(
            t0 + s(10),
            fail_class(ErrorClass::ContentPolicy),
            &mut rng()
        )
        .is_none()
    );
    assert_eq!(b.state(t0 + s(10)), BreakerState::HalfOpen);
    assert_eq!(b.allow(t0 + s(10)), Admission::Trial);
}

#[test]
fn trip_forces_open_until_reset() {
    let t0 = Instant::now();
    let mut b = Breaker::new(bare());
    let t = b.trip(t0).expect("trips");
    assert_eq!(
        (t.from, t.to),
        (BreakerState::Closed, BreakerState::ForcedOpen)
    );
    assert!(b.trip(t0).is_none(), "already forced");
    assert!(matches!(b.allow(t0 + s(3600)), Admission::Rejected { .. }));
    // Successes do not close a forced breaker.
    assert!(b.record(t0, ok(), &mut rng()).is_none());
    assert_eq!(b.state(t0 + s(3600)), BreakerState::ForcedOpen);
    let t = b.reset().expect("resets");
    assert_eq!(
        (t.from, t.to),
        (BreakerState::ForcedOpen, BreakerState::Closed)
    );
    assert_eq!(b.allow(t0), Admission::Allowed);
    assert!(b.reset().is_none(), "already closed");
}

#[test]
fn reset_clears_counts() {
    let t0 = Instant::now();
    let mut b = Breaker::new(BreakerConfig {
        consecutive_failures: Some(3),
        ..bare()
    });
    record_n(&mut b, t0, 2, fail());
    b.reset();
    assert!(b.record(t0, fail(), &mut rng()).is_none());
    assert_eq!(b.snapshot(t0).consecutive, 1);
    // From open, reset closes with counts cleared too.
    let mut b = opened(bare(), t0);
    let t = b.reset().expect("closes");
    assert_eq!(t.from, BreakerState::Open);
    assert_eq!(b.snapshot(t0).failures_in_window, 0);
}

#[test]
fn disabled_always_allows() {
    let t0 = Instant::now();
    let mut b = Breaker::new(BreakerConfig {
        enabled: false,
        consecutive_failures: Some(1),
        ..bare()
    });
    assert_eq!(b.state(t0), BreakerState::Disabled);
    assert!(record_n(&mut b, t0, 100, fail()).is_none());
    assert!(b.trip(t0).is_none());
    assert_eq!(b.allow(t0), Admission::Allowed);
    assert_eq!(b.state(t0), BreakerState::Disabled);
    let shared = SharedBreaker::new(BreakerConfig {
        enabled: false,
        ..bare()
    });
    assert_eq!(shared.allow(t0), Admission::Allowed);
}

#[test]
fn state_serialises_snake_case() {
    assert_eq!(
        serde_json::to_string(&BreakerState::HalfOpen).unwrap(),
        "\"half_open\""
    );
    assert_eq!(BreakerState::ForcedOpen.as_str(), "forced_open");
    let snap = Breaker::new(bare()).snapshot(Instant::now());
    let v = serde_json::to_value(&snap).unwrap();
    for key in [
        "state",
        "failures_in_window",
        "calls_in_window",
        "consecutive",
        "open_remaining_ms",
    ] {
        assert!(v.get(key).is_some(), "{key} in {v}");
    }
}

#[test]
fn shared_breaker_allows_from_many_threads_when_closed() {
    let b = std::sync::Arc::new(SharedBreaker::new(bare()));
    let t0 = Instant::now();
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let b = b.clone();
            std::thread::spawn(move || (0..10_000).all(|_| b.allow(t0) == Admission::Allowed))
        })
        .collect();
    for h in handles {
        assert!(h.join().expect("thread"));
    }
    assert_eq!(b.state(t0), BreakerState::Closed);
}

#[test]
fn shared_breaker_follows_the_state_machine() {
    let t0 = Instant::now();
    let b = SharedBreaker::new(BreakerConfig {
        consecutive_failures: Some(1),
        ..bare()
    });
    assert!(b.record(t0, fail(), &mut rng()).is_some());
    assert!(matches!(b.allow(t0), Admission::Rejected { .. }));
    let (adm, t) = b.admit(t0 + s(10));
    assert_eq!(adm, Admission::Trial);
    assert!(t.is_some());
    assert!(matches!(b.allow(t0 + s(10)), Admission::Rejected { .. }));
    b.record(t0 + s(10), ok(), &mut rng());
    assert_eq!(b.allow(t0 + s(10)), Admission::Allowed);
    b.trip(t0);
    assert!(matches!(b.allow(t0), Admission::Rejected { .. }));
    b.reset();
    assert_eq!(b.allow(t0), Admission::Allowed);
    assert_eq!(b.snapshot(t0).state, BreakerState::Closed);
}

#[derive(Debug, Clone)]
enum Op {
    Allow,
    Record(CallOutcome),
    Advance(u64),
    Trip,
    Reset,
}

fn op() -> impl Strategy<Value = Op> {
    let class = proptest::sample::select(ErrorClass::ALL.to_vec());
    prop_oneof![
        4 => Just(Op::Allow),
        2 => (0u64..3000).prop_map(|l| Op::Record(CallOutcome::Success { latency: ms(l) })),
        3 => (class, 0u64..3000, proptest::option::of(0u64..30_000)).prop_map(|(c, l, ra)| {
            Op::Record(CallOutcome::Failure { class: c, latency: ms(l), retry_after: ra.map(ms) })
        }),
        3 => (0u64..20_000).prop_map(Op::Advance),
        1 => Just(Op::Trip),
        1 => Just(Op::Reset),
    ]
}

proptest! {
    #[test]
    fn half_open_never_admits_more_than_its_bound(
        ops in proptest::collection::vec(op(), 1..200),
        limit in 1u32..4,
        consecutive in proptest::option::of(1u32..4),
        threshold in proptest::option::of(1u32..6),
        rate in proptest::option::of(0.1f64..1.0),
        success_threshold in 1u32..3,
        jitter in 0.0f64..0.5,
        seed in any::<u64>(),
    ) {
        let cfg = BreakerConfig {
            consecutive_failures: consecutive,
            failure_threshold: threshold,
            failure_rate: rate,
            min_calls: 3,
            slow_call: Some(ms(2000)),
            half_open_after: s(5),
            max_open: s(40),
            half_open_requests: limit,
            success_threshold,
            open_jitter: jitter,
            ..BreakerConfig::default()
        };
        let trial_timeout = s(15);
        let mut b = Breaker::new(cfg).with_trial_timeout(trial_timeout);
        let mut r = SmallRng::seed_from_u64(seed);
        let mut now = Instant::now();
        // The model: start times of trials admitted and not yet resolved.
        let mut out: Vec<Instant> = Vec::new();
        for op in ops {
            let before = b.state(now);
            match op {
                Op::Allow => {
                    let adm = b.allow(now);
                    out.retain(|&t| now.saturating_duration_since(t) < trial_timeout);
                    if b.state(now) != BreakerState::HalfOpen {
                        out.clear();
                    }
                    if adm == Admission::Trial {
                        out.push(now);
                    }
                    prop_assert!(out.len() <= limit as usize, "{} trials out, limit {limit}", out.len());
                    if let Admission::Rejected { retry_in } = adm {
                        prop_assert!(retry_in <= MAX_HOLD);
                    }
                }
                Op::Record(o) => {
                    b.record(now, o, &mut r);
                    if before == BreakerState::HalfOpen && !out.is_empty() {
                        out.remove(0);
                    }
                }
                Op::Advance(d) => now += ms(d),
                Op::Trip => { b.trip(now); }
                Op::Reset => { b.reset(); }
            }
            if b.state(now) != BreakerState::HalfOpen {
                out.clear();
            }
            let snap = b.snapshot(now);
            prop_assert!(snap.trials_in_flight <= limit);
            prop_assert!(snap.failures_in_window <= snap.calls_in_window);
            // max_open 40 s with at most 50 % jitter, or a Retry-After under 30 s.
            prop_assert!(snap.open_remaining_ms <= 60_000);
        }
    }
}

#[test]
fn a_breaker_is_at_rest_only_when_closed_quiet_and_its_window_has_passed() {
    let cfg = bare();
    let w = cfg.window;
    let t0 = Instant::now();
    let mut b = Breaker::new(cfg);
    assert!(b.at_rest(t0), "a new breaker is at rest");
    record_n(&mut b, t0, 1, ok());
    assert!(!b.at_rest(t0), "a call inside the window");
    assert!(b.at_rest(t0 + w * 2), "the window has passed");
    record_n(&mut b, t0 + w * 2, 1, fail());
    assert!(!b.at_rest(t0 + w * 4), "one failure in a row");
    record_n(&mut b, t0 + w * 4, 1, ok());
    assert!(!b.at_rest(t0 + w * 4), "calls inside the window");
    assert!(b.at_rest(t0 + w * 6));
    // Open: never at rest, however long ago.
    let mut open = Breaker::new(BreakerConfig {
        consecutive_failures: Some(1),
        ..bare()
    });
    record_n(&mut open, t0, 1, fail());
    assert_eq!(open.state(t0), BreakerState::Open);
    assert!(!open.at_rest(t0 + w * 100));
}

#[test]
fn a_breaker_holds_no_failure_after_successes_only_until_one_fails() {
    let cfg = bare();
    let w = cfg.window;
    let t0 = Instant::now();
    let mut b = Breaker::new(cfg);
    assert!(b.without_failures(t0), "a new breaker");
    record_n(&mut b, t0, 5, ok());
    assert!(b.without_failures(t0), "successes are no evidence");
    assert!(!b.at_rest(t0), "but the breaker is not at rest");
    record_n(&mut b, t0, 1, fail());
    assert!(!b.without_failures(t0), "one failure in a row");
    record_n(&mut b, t0, 1, ok());
    assert!(
        !b.without_failures(t0),
        "the failure is still in the window"
    );
    assert!(b.without_failures(t0 + w * 2), "the window has passed");
    // Open: never, however long ago.
    let mut open = Breaker::new(BreakerConfig {
        consecutive_failures: Some(1),
        ..bare()
    });
    record_n(&mut open, t0, 1, fail());
    assert!(!open.without_failures(t0 + w * 100));
}
