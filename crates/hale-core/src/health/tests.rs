//! Tests of the health state machine, the planner and the registry, all
//! under fake instants.

use std::time::{Duration, Instant};

use proptest::prelude::*;

use super::*;

fn cfg() -> HealthConfig {
    HealthConfig::default()
}

fn mins(n: u64) -> Duration {
    Duration::from_secs(60 * n)
}

fn turn(fp: u64, failed: bool) -> Heartbeat<'static> {
    Heartbeat {
        fingerprint: Some(fp),
        failed: Some(failed),
        ..Heartbeat::default()
    }
}

fn progress(text: &str) -> Heartbeat<'_> {
    Heartbeat {
        progress: Some(text),
        ..Heartbeat::default()
    }
}

fn expect_change(
    h: &mut AgentHealth,
    now: Instant,
    to: HealthState,
    signal: Signal,
) -> StateChange {
    let c = h
        .evaluate(&cfg(), now)
        .unwrap_or_else(|| panic!("expected a change to {to}, state is {}", h.state()));
    assert_eq!(c.to, to, "{c:?}");
    assert_eq!(c.signal, signal, "{c:?}");
    c
}

#[test]
fn new_agent_is_healthy_and_evaluating_it_changes_nothing() {
    let t0 = Instant::now();
    let mut h = AgentHealth::new(t0);
    assert_eq!(h.state(), HealthState::Healthy);
    assert_eq!(h.evaluate(&cfg(), t0 + mins(5)), None);
}

#[test]
fn stale_heartbeat_degrades_at_stale_after_and_a_heartbeat_heals() {
    let t0 = Instant::now();
    let mut h = AgentHealth::new(t0);
    assert_eq!(
        h.evaluate(&cfg(), t0 + mins(10) - Duration::from_secs(1)),
        None
    );
    let c = expect_change(&mut h, t0 + mins(10), HealthState::Degraded, Signal::Stale);
    assert_eq!(c.from, HealthState::Healthy);
    assert_eq!(c.reason, "no heartbeat for 10m (stale after 10m)");
    h.heartbeat(&progress("step 2"), t0 + mins(12));
    let c = expect_change(&mut h, t0 + mins(12), HealthState::Healthy, Signal::None);
    assert_eq!(c.from, HealthState::Degraded);
    assert_eq!(c.reason, "all signals normal");
}

#[test]
fn staleness_alone_stays_degraded_until_no_progress_reaches_stuck_after() {
    let t0 = Instant::now();
    let mut h = AgentHealth::new(t0);
    expect_change(&mut h, t0 + mins(10), HealthState::Degraded, Signal::Stale);
    // 2 × stale_after is still only degraded.
    assert_eq!(h.evaluate(&cfg(), t0 + mins(20)), None);
    assert_eq!(
        h.evaluate(&cfg(), t0 + mins(30) - Duration::from_secs(1)),
        None
    );
    let c = expect_change(
        &mut h,
        t0 + mins(30),
        HealthState::Stuck,
        Signal::NoProgress,
    );
    assert_eq!(c.reason, "no progress for 30m (stuck after 30m)");
}

#[test]
fn heartbeats_without_progress_become_stuck_after_stuck_after() {
    let t0 = Instant::now();
    let mut h = AgentHealth::new(t0);
    h.heartbeat(&progress("reading files"), t0);
    for k in 1..=6 {
        h.heartbeat(&progress("reading files"), t0 + mins(5 * k));
        if k < 6 {
            assert_eq!(h.evaluate(&cfg(), t0 + mins(5 * k)), None, "k={k}");
        }
    }
    expect_change(
        &mut h,
        t0 + mins(30),
        HealthState::Stuck,
        Signal::NoProgress,
    );
    // A change of progress text is progress.
    h.heartbeat(&progress("writing report"), t0 + mins(31));
    expect_change(&mut h, t0 + mins(31), HealthState::Healthy, Signal::None);
}

#[test]
fn phase_or_task_change_counts_as_progress() {
    let t0 = Instant::now();
    let mut h = AgentHealth::new(t0);
    let hb = |phase| Heartbeat {
        phase: Some(phase),
        ..Heartbeat::default()
    };
    h.heartbeat(&hb("plan"), t0 + mins(20));
    h.heartbeat(
        &Heartbeat {
            task: Some("t2"),
            ..Heartbeat::default()
        },
        t0 + mins(40),
    );
    assert_eq!(h.evaluate(&cfg(), t0 + mins(45)), None);
    assert_eq!(h.snapshot(t0 + mins(45)).since_progress_ms, 5 * 60_000);
}

#[test]
fn distinct_successful_turns_count_as_progress_for_agents_without_progress_text() {
    let t0 = Instant::now();
    let mut h = AgentHealth::new(t0);
    for k in 1..=10u64 {
        h.heartbeat(&turn(k, false), t0 + mins(5 * k));
        assert_eq!(h.evaluate(&cfg(), t0 + mins(5 * k)), None);
    }
}

#[test]
fn agents_that_report_progress_are_judged_by_it_not_by_turns() {
    let t0 = Instant::now();
    let mut h = AgentHealth::new(t0);
    h.heartbeat(&progress("step 1"), t0);
    for k in 1..=6u64 {
        h.heartbeat(&turn(k, false), t0 + mins(5 * k));
    }
    expect_change(
        &mut h,
        t0 + mins(30),
        HealthState::Stuck,
        Signal::NoProgress,
    );
}

#[test]
fn failed_turns_are_not_progress() {
    let t0 = Instant::now();
    let mut h = AgentHealth::new(t0);
    h.heartbeat(&turn(1, true), t0 + mins(29));
    h.heartbeat(&turn(2, false), t0 + mins(29));
    assert_eq!(h.snapshot(t0 + mins(30)).since_progress_ms, 60_000);
}

#[test]
fn error_rate_over_threshold_degrades_and_needs_min_samples() {
    let t0 = Instant::now();
    let mut h = AgentHealth::new(t0);
    // One failure of one turn is not a 100 % error rate yet.
    h.heartbeat(&turn(1, true), t0);
    assert_eq!(h.evaluate(&cfg(), t0), None);
    // 1 of 4 = 25 %: not over 25 %.
    for fp in 2..=4 {
        h.heartbeat(&turn(fp, false), t0);
    }
    assert_eq!(h.evaluate(&cfg(), t0), None);
    // 2 of 5 = 40 %.
    h.heartbeat(&turn(5, true), t0);
    let c = expect_change(&mut h, t0, HealthState::Degraded, Signal::ErrorRate);
    assert_eq!(
        c.reason,
        "error rate 40% over the last 5 outcomes (threshold 25%)"
    );
}

#[test]
fn error_window_slides_over_the_last_20_outcomes() {
    let t0 = Instant::now();
    let mut h = AgentHealth::new(t0);
    for fp in 0..5 {
        h.heartbeat(&turn(fp, fp % 2 == 0), t0);
    }
    expect_change(&mut h, t0, HealthState::Degraded, Signal::ErrorRate);
    for fp in 5..(5 + u64::from(ERROR_WINDOW)) {
        h.heartbeat(&turn(fp, false), t0);
    }
    let s = h.snapshot(t0);
    assert_eq!(s.window_outcomes, ERROR_WINDOW);
    assert_eq!(s.error_rate, 0.0);
    expect_change(&mut h, t0, HealthState::Healthy, Signal::None);
}

#[test]
fn errors_reported_by_the_agent_feed_the_error_rate() {
    let t0 = Instant::now();
    let mut h = AgentHealth::new(t0);
    let errs = |n| Heartbeat {
        errors: Some(n),
        ..Heartbeat::default()
    };
    h.heartbeat(&errs(0), t0);
    h.heartbeat(&errs(0), t0);
    h.heartbeat(&errs(0), t0);
    h.heartbeat(&errs(2), t0);
    let c = expect_change(&mut h, t0, HealthState::Degraded, Signal::ErrorRate);
    assert!(c.reason.starts_with("error rate 40%"), "{}", c.reason);
    // Errors alone are not consecutive failed turns.
    assert_eq!(h.snapshot(t0).consecutive_failures, 0);
}

#[test]
fn token_spike_degrades_after_min_samples_and_clears_on_a_normal_turn() {
    let t0 = Instant::now();
    let mut h = AgentHealth::new(t0);
    let tok = |n| Heartbeat {
        tokens: Some(n),
        ..Heartbeat::default()
    };
    for _ in 0..TOKEN_SPIKE_MIN_SAMPLES {
        h.heartbeat(&tok(1000), t0);
    }
    // Exactly 3 × the mean is not over it.
    h.heartbeat(&tok(3000), t0);
    assert_eq!(h.evaluate(&cfg(), t0), None);
    h.heartbeat(&tok(1000), t0);
    h.heartbeat(&tok(20_000), t0);
    let c = expect_change(&mut h, t0, HealthState::Degraded, Signal::TokenSpike);
    assert!(
        c.reason.starts_with("token spike: 20000 tokens"),
        "{}",
        c.reason
    );
    h.heartbeat(&tok(1200), t0);
    expect_change(&mut h, t0, HealthState::Healthy, Signal::None);
}

#[test]
fn token_spike_is_not_judged_before_min_samples() {
    let t0 = Instant::now();
    let mut h = AgentHealth::new(t0);
    for _ in 0..TOKEN_SPIKE_MIN_SAMPLES - 1 {
        h.heartbeat(
            &Heartbeat {
                tokens: Some(100),
                ..Heartbeat::default()
            },
            t0,
        );
    }
    h.heartbeat(
        &Heartbeat {
            tokens: Some(1_000_000),
            ..Heartbeat::default()
        },
        t0,
    );
    assert_eq!(h.evaluate(&cfg(), t0), None);
}

#[test]
fn repeated_identical_calls_make_stuck_and_a_new_call_heals() {
    let t0 = Instant::now();
    let mut h = AgentHealth::new(t0);
    h.heartbeat(&turn(7, false), t0);
    h.heartbeat(&turn(7, false), t0);
    assert_eq!(h.evaluate(&cfg(), t0), None);
    h.heartbeat(&turn(7, false), t0);
    let c = expect_change(&mut h, t0, HealthState::Stuck, Signal::RepeatedCalls);
    assert_eq!(c.reason, "3 identical calls in a row (threshold 3)");
    h.heartbeat(&turn(8, false), t0);
    expect_change(&mut h, t0, HealthState::Healthy, Signal::None);
}

#[test]
fn context_exhausted_makes_stuck_until_cleared() {
    let t0 = Instant::now();
    let mut h = AgentHealth::new(t0);
    h.set_context_exhausted(true);
    let c = expect_change(&mut h, t0, HealthState::Stuck, Signal::ContextExhausted);
    assert_eq!(c.reason, "context exhausted: nothing left to compact");
    h.set_context_exhausted(false);
    expect_change(&mut h, t0, HealthState::Healthy, Signal::None);
}

#[test]
fn open_breaker_makes_failing_until_closed() {
    let t0 = Instant::now();
    let mut h = AgentHealth::new(t0);
    h.set_breaker_open(true);
    let c = expect_change(&mut h, t0, HealthState::Failing, Signal::BreakerOpen);
    assert_eq!(c.reason, "circuit breaker open for the agent's provider");
    h.set_breaker_open(false);
    expect_change(&mut h, t0, HealthState::Healthy, Signal::None);
}

#[test]
fn more_than_failing_after_failures_consecutive_failures_make_failing() {
    let t0 = Instant::now();
    let mut h = AgentHealth::new(t0);
    // Enough successes that 3 failures stay under the error-rate threshold.
    for fp in 0..17 {
        h.heartbeat(&turn(fp, false), t0);
    }
    for fp in 100..103 {
        h.heartbeat(&turn(fp, true), t0);
    }
    assert_eq!(h.evaluate(&cfg(), t0), None, "3 is not more than 3");
    h.heartbeat(&turn(103, true), t0);
    let c = expect_change(
        &mut h,
        t0,
        HealthState::Failing,
        Signal::ConsecutiveFailures,
    );
    assert_eq!(c.reason, "4 consecutive failed turns (more than 3)");
    // A success resets the run (the error rate, 4 of 20, is under 25 %).
    h.heartbeat(&turn(104, false), t0);
    expect_change(&mut h, t0, HealthState::Healthy, Signal::None);
}

#[test]
fn precedence_failing_over_stuck_over_degraded() {
    let t0 = Instant::now();
    let now = t0 + mins(12); // stale, not yet without progress for 30 min
    let mut h = AgentHealth::new(t0);
    h.set_breaker_open(true);
    h.set_context_exhausted(true);
    expect_change(&mut h, now, HealthState::Failing, Signal::BreakerOpen);
    h.set_breaker_open(false);
    expect_change(&mut h, now, HealthState::Stuck, Signal::ContextExhausted);
    h.set_context_exhausted(false);
    expect_change(&mut h, now, HealthState::Degraded, Signal::Stale);
}

#[test]
fn terminated_wins_over_everything_and_only_reset_leaves_it() {
    let t0 = Instant::now();
    let mut h = AgentHealth::new(t0);
    h.set_breaker_open(true);
    let c = h.terminate("operator", t0).expect("a change");
    assert_eq!(
        (c.from, c.to, c.reason.as_str()),
        (HealthState::Healthy, HealthState::Terminated, "operator")
    );
    h.set_breaker_open(false);
    h.heartbeat(&progress("alive"), t0 + mins(1));
    assert_eq!(h.evaluate(&cfg(), t0 + mins(1)), None);
    assert_eq!(h.state(), HealthState::Terminated);
    assert_eq!(h.next_deadline(&cfg(), t0), None);
    let c = h.reset(t0 + mins(2)).expect("a change");
    assert_eq!(
        (c.from, c.to, c.signal),
        (HealthState::Terminated, HealthState::Healthy, Signal::Reset)
    );
    assert_eq!(h.evaluate(&cfg(), t0 + mins(2)), None);
}

#[test]
fn an_out_of_order_heartbeat_never_moves_time_back() {
    let t0 = Instant::now();
    let mut h = AgentHealth::new(t0);
    h.heartbeat(&progress("a"), t0 + mins(5));
    h.heartbeat(&progress("b"), t0 + mins(1));
    let s = h.snapshot(t0 + mins(6));
    assert_eq!(s.since_heartbeat_ms, 60_000);
    assert_eq!(s.since_progress_ms, 60_000);
}

#[test]
fn snapshot_and_change_serialise_in_snake_case() {
    let t0 = Instant::now();
    let mut h = AgentHealth::new(t0);
    let c = h.terminate("x", t0).expect("change");
    let v = serde_json::to_value(&c).expect("json");
    assert_eq!(v["to"], "terminated");
    assert_eq!(v["signal"], "terminated");
    let s = serde_json::to_value(h.snapshot(t0)).expect("json");
    assert_eq!(s["state"], "terminated");
}

#[test]
fn agent_health_is_small() {
    assert!(
        size_of::<AgentHealth>() <= 160,
        "{}",
        size_of::<AgentHealth>()
    );
}

#[derive(Debug, Clone)]
enum Op {
    Turn(u64, bool),
    Tokens(u64),
    Progress(u8),
    Breaker(bool),
    Context(bool),
    Advance(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0u64..4, any::<bool>()).prop_map(|(f, x)| Op::Turn(f, x)),
        (0u64..50_000).prop_map(Op::Tokens),
        (0u8..4).prop_map(Op::Progress),
        any::<bool>().prop_map(Op::Breaker),
        any::<bool>().prop_map(Op::Context),
        (0u64..2400).prop_map(Op::Advance),
    ]
}

fn severity(s: HealthState) -> u8 {
    match s {
        HealthState::Healthy => 0,
        HealthState::Degraded => 1,
        HealthState::Stuck => 2,
        HealthState::Failing => 3,
        HealthState::Terminated => 4,
    }
}

proptest! {
    /// After any sequence, the state is the most severe signal that holds,
    /// evaluating twice changes nothing, and the flags alone bound it.
    #[test]
    fn state_respects_precedence(ops in proptest::collection::vec(op(), 0..60)) {
        let t0 = Instant::now();
        let mut now = t0;
        let mut h = AgentHealth::new(t0);
        let (mut breaker, mut context) = (false, false);
        let texts = ["a", "b", "c", "d"];
        for o in ops {
            match o {
                Op::Turn(f, x) => h.heartbeat(&turn(f, x), now),
                Op::Tokens(n) => h.heartbeat(&Heartbeat { tokens: Some(n), ..Heartbeat::default() }, now),
                Op::Progress(i) => h.heartbeat(&progress(texts[usize::from(i)]), now),
                Op::Breaker(b) => { breaker = b; h.set_breaker_open(b) }
                Op::Context(c) => { context = c; h.set_context_exhausted(c) }
                Op::Advance(s) => now += Duration::from_secs(s),
            }
            h.evaluate(&cfg(), now);
            prop_assert_eq!(h.evaluate(&cfg(), now), None);
            if breaker {
                prop_assert_eq!(h.state(), HealthState::Failing);
            } else if context {
                prop_assert!(severity(h.state()) >= severity(HealthState::Stuck));
            }
        }
    }
}

// ---- interventions ----

#[test]
fn nudge_nudge_nudge_escalate_terminate_with_exact_spacing() {
    let c = cfg();
    let t0 = Instant::now();
    let stuck = HealthState::Stuck;
    let mut iv = Interventions::new();
    assert_eq!(iv.phase(), InterventionPhase::Watching);
    match iv.plan(&c, stuck, t0) {
        Some(Intervention::Nudge {
            attempt: 1,
            message,
        }) => assert!(message.contains("1 of 3")),
        other => panic!("{other:?}"),
    }
    assert_eq!(iv.phase(), InterventionPhase::Nudging { n: 1 });
    assert_eq!(
        iv.plan(&c, stuck, t0 + mins(10) - Duration::from_secs(1)),
        None
    );
    assert!(matches!(
        iv.plan(&c, stuck, t0 + mins(10)),
        Some(Intervention::Nudge { attempt: 2, .. })
    ));
    assert_eq!(iv.plan(&c, stuck, t0 + mins(19)), None);
    assert!(matches!(
        iv.plan(&c, stuck, t0 + mins(20)),
        Some(Intervention::Nudge { attempt: 3, .. })
    ));
    assert_eq!(
        iv.plan(&c, stuck, t0 + mins(30) - Duration::from_secs(1)),
        None
    );
    match iv.plan(&c, stuck, t0 + mins(30)) {
        Some(Intervention::Escalate { reason }) => {
            assert_eq!(reason, "agent still stuck after 3 nudge(s), 10m apart")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        iv.phase(),
        InterventionPhase::Escalated {
            since: t0 + mins(30)
        }
    );
    assert_eq!(iv.next_deadline(&c), Some(t0 + mins(45)));
    assert_eq!(
        iv.plan(&c, stuck, t0 + mins(45) - Duration::from_secs(1)),
        None
    );
    match iv.plan(&c, stuck, t0 + mins(45)) {
        Some(Intervention::Terminate { reason }) => {
            assert_eq!(reason, "no operator decision within 15m of escalation")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(iv.phase(), InterventionPhase::Terminated);
    assert_eq!(iv.plan(&c, stuck, t0 + mins(60)), None);
    assert_eq!(iv.plan(&c, HealthState::Healthy, t0 + mins(60)), None);
    assert_eq!(iv.phase(), InterventionPhase::Terminated);
}

#[test]
fn a_pending_nudge_is_delivered_once_and_replaced_by_the_next() {
    let c = cfg();
    let t0 = Instant::now();
    let mut iv = Interventions::new();
    iv.plan(&c, HealthState::Stuck, t0);
    iv.plan(&c, HealthState::Stuck, t0 + mins(10));
    let m = iv.take_pending_nudge().expect("pending");
    assert!(m.contains("Reminder 2 of 3"), "{m}");
    assert_eq!(iv.take_pending_nudge(), None);
}

#[test]
fn recovery_to_healthy_resets_the_plan_while_nudging_or_escalated() {
    let c = cfg();
    let t0 = Instant::now();
    let mut iv = Interventions::new();
    iv.plan(&c, HealthState::Stuck, t0);
    assert_eq!(iv.plan(&c, HealthState::Healthy, t0 + mins(1)), None);
    assert_eq!(iv.phase(), InterventionPhase::Watching);
    assert_eq!(iv.take_pending_nudge(), None);
    // Stuck again: the count starts over.
    assert!(matches!(
        iv.plan(&c, HealthState::Stuck, t0 + mins(2)),
        Some(Intervention::Nudge { attempt: 1, .. })
    ));
    for k in 1..=3 {
        iv.plan(&c, HealthState::Stuck, t0 + mins(2 + 10 * k));
    }
    assert!(matches!(iv.phase(), InterventionPhase::Escalated { .. }));
    iv.plan(&c, HealthState::Healthy, t0 + mins(40));
    assert_eq!(iv.phase(), InterventionPhase::Watching);
}

#[test]
fn degraded_while_nudging_holds_the_plan() {
    let c = cfg();
    let t0 = Instant::now();
    let mut iv = Interventions::new();
    iv.plan(&c, HealthState::Stuck, t0);
    assert_eq!(iv.plan(&c, HealthState::Degraded, t0 + mins(10)), None);
    assert_eq!(iv.phase(), InterventionPhase::Nudging { n: 1 });
    assert!(matches!(
        iv.plan(&c, HealthState::Stuck, t0 + mins(11)),
        Some(Intervention::Nudge { attempt: 2, .. })
    ));
}

fn escalated(c: &HealthConfig, t0: Instant) -> Interventions {
    let mut iv = Interventions::new();
    for k in 0..=c.nudge_max_attempts {
        iv.plan(c, HealthState::Stuck, t0 + c.nudge_interval * k);
    }
    assert!(matches!(iv.phase(), InterventionPhase::Escalated { .. }));
    iv
}

#[test]
fn more_time_goes_back_to_watching_with_fresh_nudges_after_the_extra_time() {
    let c = cfg();
    let t0 = Instant::now();
    let mut iv = escalated(&c, t0);
    let at = t0 + mins(35);
    iv.decide(Decision::MoreTime(mins(20)), at)
        .expect("escalated");
    assert_eq!(iv.phase(), InterventionPhase::Watching);
    assert_eq!(iv.next_deadline(&c), Some(at + mins(20)));
    assert_eq!(
        iv.plan(
            &c,
            HealthState::Stuck,
            at + mins(20) - Duration::from_secs(1)
        ),
        None
    );
    assert!(matches!(
        iv.plan(&c, HealthState::Stuck, at + mins(20)),
        Some(Intervention::Nudge { attempt: 1, .. })
    ));
}

#[test]
fn hand_off_is_terminal_for_automation() {
    let c = cfg();
    let t0 = Instant::now();
    let mut iv = escalated(&c, t0);
    iv.decide(Decision::HandOff, t0 + mins(31))
        .expect("escalated");
    assert_eq!(iv.phase(), InterventionPhase::HandedOff);
    assert_eq!(iv.plan(&c, HealthState::Stuck, t0 + mins(100)), None);
    assert_eq!(iv.plan(&c, HealthState::Healthy, t0 + mins(101)), None);
    assert_eq!(iv.phase(), InterventionPhase::HandedOff);
    assert_eq!(iv.next_deadline(&c), None);
}

#[test]
fn terminate_decision_terminates() {
    let c = cfg();
    let t0 = Instant::now();
    let mut iv = escalated(&c, t0);
    iv.decide(Decision::Terminate, t0 + mins(31))
        .expect("escalated");
    assert_eq!(iv.phase(), InterventionPhase::Terminated);
}

#[test]
fn decide_without_an_escalation_is_an_error() {
    let c = cfg();
    let t0 = Instant::now();
    let mut iv = Interventions::new();
    assert_eq!(
        iv.decide(Decision::HandOff, t0),
        Err(DecideError::NoEscalation)
    );
    iv.plan(&c, HealthState::Stuck, t0);
    assert_eq!(
        iv.decide(Decision::Terminate, t0),
        Err(DecideError::NoEscalation)
    );
    assert_eq!(iv.phase(), InterventionPhase::Nudging { n: 1 });
}

#[test]
fn zero_nudges_escalates_at_once() {
    let c = HealthConfig {
        nudge_max_attempts: 0,
        ..cfg()
    };
    let mut iv = Interventions::new();
    assert!(matches!(
        iv.plan(&c, HealthState::Stuck, Instant::now()),
        Some(Intervention::Escalate { .. })
    ));
}

#[test]
fn phase_serialises_in_snake_case() {
    let v = serde_json::to_value(InterventionPhase::Nudging { n: 2 }).expect("json");
    assert_eq!(v, serde_json::json!({"phase": "nudging", "n": 2}));
    let v = serde_json::to_value(InterventionPhase::Escalated {
        since: Instant::now(),
    })
    .expect("json");
    assert_eq!(v, serde_json::json!({"phase": "escalated"}));
}

// ---- registry ----

fn outputs(r: &mut HealthRegistry, now: Instant) -> Vec<(String, HealthOutput)> {
    let mut out = Vec::new();
    r.evaluate_all(&cfg(), now, &mut out);
    out.into_iter().map(|(a, o)| (a.to_string(), o)).collect()
}

#[test]
fn registry_reports_changes_at_their_deadline_only_once() {
    let t0 = Instant::now();
    let mut r = HealthRegistry::new();
    r.heartbeat("a", &progress("x"), t0);
    r.heartbeat("b", &progress("x"), t0 + mins(5));
    assert!(outputs(&mut r, t0 + mins(5)).is_empty());
    assert!(outputs(&mut r, t0 + mins(9)).is_empty());
    let out = outputs(&mut r, t0 + mins(10));
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!(out[0].0, "a");
    assert!(matches!(&out[0].1, HealthOutput::StateChanged(c) if c.to == HealthState::Degraded));
    assert!(outputs(&mut r, t0 + mins(11)).is_empty());
    let out = outputs(&mut r, t0 + mins(15));
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!(out[0].0, "b");
    assert_eq!(r.state("a"), Some(HealthState::Degraded));
}

#[test]
fn registry_runs_the_whole_intervention_path_to_termination() {
    let t0 = Instant::now();
    let mut r = HealthRegistry::new();
    r.heartbeat("a", &Heartbeat::default(), t0);
    r.set_context_exhausted("a", true);
    let out = outputs(&mut r, t0);
    assert!(matches!(&out[0].1, HealthOutput::StateChanged(c) if c.to == HealthState::Stuck));
    assert!(matches!(
        &out[1].1,
        HealthOutput::Intervention(Intervention::Nudge { attempt: 1, .. })
    ));
    assert!(r.take_pending_nudge("a").is_some());
    // Keep it fresh so only the intervention clock drives it.
    let mut seen = Vec::new();
    for s in (30..=45 * 60).step_by(30) {
        let now = t0 + Duration::from_secs(s);
        r.heartbeat("a", &Heartbeat::default(), now);
        for (_, o) in outputs(&mut r, now) {
            seen.push((s / 60, o));
        }
    }
    let kinds: Vec<(u64, &str)> = seen
        .iter()
        .map(|(m, o)| {
            (
                *m,
                match o {
                    HealthOutput::Intervention(Intervention::Nudge { .. }) => "nudge",
                    HealthOutput::Intervention(Intervention::Escalate { .. }) => "escalate",
                    HealthOutput::Intervention(Intervention::Terminate { .. }) => "terminate",
                    HealthOutput::StateChanged(c) => c.to.as_str(),
                },
            )
        })
        .collect();
    assert_eq!(
        kinds,
        vec![
            (10, "nudge"),
            (20, "nudge"),
            (30, "escalate"),
            (45, "terminate"),
            (45, "terminated")
        ]
    );
    assert_eq!(r.state("a"), Some(HealthState::Terminated));
    assert_eq!(r.phase("a"), Some(InterventionPhase::Terminated));
}

#[test]
fn registry_decisions_and_reset() {
    let t0 = Instant::now();
    let mut r = HealthRegistry::new();
    r.register("a", t0);
    assert_eq!(
        r.decide("a", Decision::HandOff, t0),
        Err(DecideError::NoEscalation)
    );
    assert_eq!(
        r.decide("zz", Decision::HandOff, t0),
        Err(DecideError::NoEscalation)
    );
    r.set_breaker_open("a", true);
    r.set_context_exhausted("a", true);
    outputs(&mut r, t0);
    r.set_breaker_open("a", false);
    for k in 0..=3 {
        outputs(&mut r, t0 + mins(10 * k));
    }
    assert!(matches!(
        r.phase("a"),
        Some(InterventionPhase::Escalated { .. })
    ));
    let change = r
        .decide("a", Decision::Terminate, t0 + mins(31))
        .expect("escalated");
    assert_eq!(change.map(|c| c.to), Some(HealthState::Terminated));
    let change = r.reset("a", t0 + mins(32)).expect("a change");
    assert_eq!(change.to, HealthState::Healthy);
    assert_eq!(r.phase("a"), Some(InterventionPhase::Watching));
}

#[test]
fn registry_terminate_is_reported_and_final() {
    let t0 = Instant::now();
    let mut r = HealthRegistry::new();
    r.register("a", t0);
    let c = r.terminate("a", "guard limit", t0).expect("change");
    assert_eq!(c.reason, "guard limit");
    r.heartbeat("a", &progress("x"), t0 + mins(1));
    assert!(outputs(&mut r, t0 + mins(100)).is_empty());
    assert_eq!(r.state("a"), Some(HealthState::Terminated));
}

#[test]
fn registry_memory_per_agent_is_under_1_kib() {
    let t0 = Instant::now();
    let mut r = HealthRegistry::new();
    for i in 0..10_000 {
        r.heartbeat(&format!("agent-{i}"), &Heartbeat::default(), t0);
    }
    outputs(&mut r, t0);
    assert_eq!(r.len(), 10_000);
    let m = r.mem_per_agent();
    assert!(m <= 1024, "{m} bytes per agent");
}

#[test]
fn registry_forgets_only_quiet_agents() {
    let t0 = Instant::now();
    let mut r = HealthRegistry::new();
    // An agent never evaluated (dirty; where no monitor runs) is quiet,
    // and its owed evaluation goes with it.
    r.heartbeat("fresh", &progress("x"), t0);
    assert!(r.forget_if_quiet("fresh", t0));
    r.heartbeat("ok", &progress("x"), t0);
    assert!(outputs(&mut r, t0).is_empty());
    // Stuck (and nudged): kept while the plan runs.
    r.heartbeat("stuck", &Heartbeat::default(), t0);
    r.set_context_exhausted("stuck", true);
    // Failing: kept.
    r.heartbeat("failing", &Heartbeat::default(), t0);
    r.set_breaker_open("failing", true);
    // Degraded by staleness only: quiet.
    r.heartbeat("stale", &progress("y"), t0);
    let out = outputs(&mut r, t0 + mins(1));
    assert!(!out.is_empty());
    let _ = outputs(&mut r, t0 + mins(10));
    assert_eq!(r.state("stale"), Some(HealthState::Degraded));
    let cases = [
        ("ok", false, true),
        ("stuck", true, false),
        ("failing", true, false),
        ("unknown", false, true),
    ];
    for (agent, kept, gone) in cases {
        assert_eq!(r.forget_if_quiet(agent, t0 + mins(10)), gone, "{agent}");
        assert_eq!(r.state(agent).is_some(), kept, "{agent}");
    }
    // "ok" went stale at minute 10 as well; both degraded ones are quiet.
    assert!(r.forget_if_quiet("stale", t0 + mins(10)));
    assert_eq!(r.len(), 2);
    // A terminated agent may go (its final state is in its row); a handed
    // off one (paused for a human) stays.
    r.heartbeat("t", &Heartbeat::default(), t0 + mins(11));
    let _ = outputs(&mut r, t0 + mins(11));
    r.terminate("t", "operator", t0 + mins(11));
    let _ = outputs(&mut r, t0 + mins(11));
    assert!(!r.forget_if_quiet("t", t0 + mins(11)), "just terminated");
    assert!(r.forget_if_quiet("t", t0 + mins(12)));
    r.heartbeat("h", &Heartbeat::default(), t0);
    r.set_context_exhausted("h", true);
    for m in 0..=30 {
        let _ = outputs(&mut r, t0 + mins(m));
    }
    assert!(matches!(
        r.phase("h"),
        Some(InterventionPhase::Escalated { .. })
    ));
    assert!(!r.forget_if_quiet("h", t0 + mins(30)), "escalated");
    r.decide("h", Decision::HandOff, t0 + mins(31))
        .expect("decide");
    assert!(!r.forget_if_quiet("h", t0 + mins(40)));
    // Dropping a dirty slot leaves no trace in the next evaluation.
    r.heartbeat("d", &progress("x"), t0 + mins(40));
    assert!(r.forget_if_quiet("d", t0 + mins(40)));
    let out = outputs(&mut r, t0 + mins(40));
    assert!(out.iter().all(|(a, _)| a != "d"), "{out:?}");
    assert_eq!(r.state("d"), None);
}

#[test]
fn forgotten_slots_are_reused_and_stale_deadlines_never_reach_the_new_agent() {
    let t0 = Instant::now();
    let mut r = HealthRegistry::new();
    for k in 0..100 {
        let a = format!("a{k}");
        r.heartbeat(&a, &progress("x"), t0);
    }
    let _ = outputs(&mut r, t0);
    for k in 0..100 {
        assert!(r.forget_if_quiet(&format!("a{k}"), t0));
    }
    assert!(r.is_empty());
    // 1,000 more agents over time reuse the 100 slots: the registry's size
    // follows the agents held, not the agents ever seen.
    for round in 0..10u64 {
        let at = t0 + mins(round);
        for k in 0..100 {
            r.heartbeat(&format!("r{round}-{k}"), &progress("x"), at);
        }
        let _ = outputs(&mut r, at);
        for k in 0..100 {
            assert!(r.forget_if_quiet(&format!("r{round}-{k}"), at));
        }
        assert_eq!(r.slots(), 100);
    }
    // The first agents' heap entries (stale at minute 10) must not judge
    // the slot's new tenant, heard from at minute 9.
    r.heartbeat("new", &progress("x"), t0 + mins(9));
    let out = outputs(&mut r, t0 + mins(10));
    assert!(out.is_empty(), "{out:?}");
    assert_eq!(r.state("new"), Some(HealthState::Healthy));
    let out = outputs(&mut r, t0 + mins(19));
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!(out[0].0, "new");
    assert_eq!(r.slots(), 100);
}

#[test]
fn the_schedule_is_sized_by_the_agents_held_not_by_every_agent_seen() {
    use super::registry::HEAP_SLACK;
    let t0 = Instant::now();
    let mut r = HealthRegistry::new();
    // 100 agents stay; 20,000 more come one a few milliseconds apart, are
    // judged, and leave while their deadlines (stale_after) are still ahead.
    for k in 0..100 {
        r.heartbeat(&format!("stay{k}"), &progress("x"), t0);
    }
    let _ = outputs(&mut r, t0);
    let mut most = 0;
    for k in 0..20_000u64 {
        let at = t0 + Duration::from_millis(5 * k);
        let a = format!("a{k}");
        r.heartbeat(&a, &progress("x"), at);
        let _ = outputs(&mut r, at);
        assert!(r.forget_if_quiet(&a, at));
        most = most.max(r.scheduled_entries());
    }
    assert_eq!(r.len(), 100);
    assert!(
        most <= 2 * 101 + HEAP_SLACK + 1,
        "{most} entries for at most 101 agents held"
    );
    // The agents that stayed are still judged at their deadline, once.
    let out = outputs(&mut r, t0 + HealthConfig::default().stale_after);
    let degraded = out
        .iter()
        .filter(|(a, o)| {
            a.starts_with("stay")
                && matches!(o, HealthOutput::StateChanged(c) if c.to == HealthState::Degraded)
        })
        .count();
    assert_eq!(degraded, 100, "{out:?}");
}

#[test]
fn an_agent_registered_as_silent_is_judged_from_its_last_turn() {
    let t0 = Instant::now();
    let mut r = HealthRegistry::new();
    assert!(r.register_silent("s", t0));
    assert!(!r.register_silent("s", t0 + mins(5)), "known: left alone");
    let out = outputs(&mut r, t0 + mins(30));
    let tos: Vec<HealthState> = out
        .iter()
        .filter_map(|(_, o)| match o {
            HealthOutput::StateChanged(c) => Some(c.to),
            HealthOutput::Intervention(_) => None,
        })
        .collect();
    assert_eq!(tos, vec![HealthState::Stuck], "{out:?}");
    assert!(
        out.iter()
            .any(|(_, o)| matches!(o, HealthOutput::Intervention(Intervention::Nudge { .. })))
    );
}

// ---- when the monitor wakes ----

/// The monitor's next evaluation: the earliest deadline, never past `every`
/// from now, never in the past.
#[test]
fn next_wake_table() {
    let now = Instant::now();
    let s = Duration::from_secs;
    let every = s(5);
    let cases: [(Option<Instant>, Instant); 5] = [
        // No agent has a deadline: the cadence of heartbeat-driven signals.
        (None, now + every),
        // A deadline before the cadence: then, not up to `every` late.
        (
            Some(now + Duration::from_millis(1200)),
            now + Duration::from_millis(1200),
        ),
        (Some(now + every), now + every),
        // A deadline after the cadence: the cadence first.
        (Some(now + s(600)), now + every),
        // A deadline already past: at once.
        (Some(now - s(1)), now),
    ];
    for (earliest, want) in cases {
        assert_eq!(next_wake(now, earliest, every), want, "{earliest:?}");
    }
}

/// A stale rule of 10 s, stuck of 30 s.
fn quick() -> HealthConfig {
    HealthConfig {
        stale_after: Duration::from_secs(10),
        stuck_after: Duration::from_secs(30),
        ..HealthConfig::default()
    }
}

proptest! {
    /// Agents last heard from at arbitrary instants, then silent: after an
    /// evaluation, the registry's next deadline is the earliest of the
    /// agents' [`deadline`]s (each computed on a copy of the agent), nothing
    /// happens just before it, and evaluating at it moves the schedule on.
    #[test]
    fn the_schedule_is_the_earliest_deadline_of_any_agent(
        heard in proptest::collection::vec((0u64..40_000, any::<bool>()), 1..40),
    ) {
        let cfg = quick();
        let t0 = Instant::now();
        let mut r = HealthRegistry::new();
        // Each agent's own copy, fed the same heartbeats.
        let mut copies = Vec::new();
        let mut order: Vec<(usize, u64, bool)> =
            heard.iter().enumerate().map(|(i, &(at, p))| (i, at, p)).collect();
        order.sort_by_key(|&(_, at, _)| at);
        let mut out = Vec::new();
        for &(i, _, _) in &order {
            r.register(&format!("a{i}"), t0);
        }
        for _ in 0..heard.len() {
            copies.push(AgentHealth::new(t0));
        }
        for &(i, at, with_progress) in &order {
            let now = t0 + Duration::from_millis(at);
            let text = format!("step {at}");
            let hb = Heartbeat {
                progress: with_progress.then_some(text.as_str()),
                ..Heartbeat::default()
            };
            r.heartbeat(&format!("a{i}"), &hb, now);
            copies[i].heartbeat(&hb, now);
        }
        let now = t0 + Duration::from_millis(40_000);
        r.evaluate_all(&cfg, now, &mut out);
        let mut ivs = Vec::new();
        for c in copies.iter_mut() {
            c.evaluate(&cfg, now);
            let mut iv = Interventions::new();
            iv.plan(&cfg, c.state(), now);
            ivs.push(iv);
        }
        let want = copies
            .iter()
            .zip(&ivs)
            .filter_map(|(c, iv)| deadline(c, iv, &cfg, now))
            .min();
        let got = r.next_deadline();
        prop_assert_eq!(got, want);
        let Some(d) = got else { return Ok(()) };
        out.clear();
        r.evaluate_all(&cfg, d - Duration::from_nanos(1), &mut out);
        prop_assert!(out.is_empty(), "a change before the deadline: {out:?}");
        r.evaluate_all(&cfg, d, &mut out);
        // Evaluated at the deadline, the schedule moves past it: the
        // monitor never wakes twice for one instant.
        prop_assert!(r.next_deadline().is_none_or(|n| n > d));
    }
}
