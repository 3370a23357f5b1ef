use super::*;
use proptest::prelude::*;

#[test]
fn tool_errors_classify_by_status_then_transport() {
    let table: &[(Option<u16>, Option<Transport>, bool, ToolError)] = &[
        (Some(400), None, false, ToolError::InvalidInput),
        (Some(422), None, false, ToolError::InvalidInput),
        (Some(401), None, false, ToolError::MissingCapability),
        (Some(403), None, false, ToolError::MissingCapability),
        (Some(404), None, false, ToolError::ToolNotFound),
        (Some(408), None, false, ToolError::NetworkTimeout),
        (Some(429), None, false, ToolError::RateLimited),
        (Some(500), None, false, ToolError::CapacityExceeded),
        (Some(503), None, false, ToolError::CapacityExceeded),
        (Some(529), None, false, ToolError::CapacityExceeded),
        (Some(200), None, true, ToolError::SchemaValidationFailed),
        (
            Some(200),
            Some(Transport::MalformedBody),
            false,
            ToolError::SchemaValidationFailed,
        ),
        (
            Some(503),
            Some(Transport::MalformedBody),
            false,
            ToolError::CapacityExceeded,
        ),
        (
            None,
            Some(Transport::ConnectRefused),
            false,
            ToolError::NodeUnreachable,
        ),
        (
            None,
            Some(Transport::ConnectReset),
            false,
            ToolError::NodeUnreachable,
        ),
        (
            None,
            Some(Transport::Dns),
            false,
            ToolError::NodeUnreachable,
        ),
        (
            None,
            Some(Transport::HeadersTimeout),
            false,
            ToolError::NetworkTimeout,
        ),
        (None, Some(Transport::Other), false, ToolError::Unknown),
        (None, None, true, ToolError::SchemaValidationFailed),
        (None, None, false, ToolError::Unknown),
    ];
    for &(status, transport, output_invalid, want) in table {
        let got = classify(&ToolObservation {
            status,
            transport,
            output_invalid,
        });
        assert_eq!(got, want, "status {status:?} transport {transport:?}");
    }
}

#[test]
fn tool_errors_map_onto_the_failure_classes() {
    assert_eq!(ToolError::NetworkTimeout.class(), ErrorClass::Timeout);
    assert_eq!(ToolError::NodeUnreachable.class(), ErrorClass::Network);
    assert_eq!(ToolError::CapacityExceeded.class(), ErrorClass::Overloaded);
    assert_eq!(ToolError::RateLimited.class(), ErrorClass::RateLimit);
    assert_eq!(ToolError::InvalidInput.class(), ErrorClass::BadRequest);
    assert_eq!(
        ToolError::SchemaValidationFailed.class(),
        ErrorClass::Format
    );
    for e in ToolError::ALL {
        assert_eq!(ToolError::parse(e.as_str()), Some(e));
        let json = serde_json::to_string(&e).unwrap();
        assert_eq!(json, format!("\"{}\"", e.as_str()));
    }
    assert_eq!(ToolError::parse("nope"), None);
}

#[test]
fn default_retryable_set_is_unreachable_timeout_503_429() {
    let retryable: Vec<ToolError> = ToolError::ALL
        .into_iter()
        .filter(|e| e.retryable_by_default())
        .collect();
    assert_eq!(
        retryable,
        vec![
            ToolError::NetworkTimeout,
            ToolError::NodeUnreachable,
            ToolError::CapacityExceeded,
            ToolError::RateLimited,
            ToolError::Unknown
        ]
    );
}

#[test]
fn backoff_500_times_2_waits_0_500_1000_ms() {
    let p = StepRetry {
        backoff_ms: 500,
        backoff_multiplier: 2.0,
        ..StepRetry::default()
    };
    let waits: Vec<u64> = (1..=3).map(|n| backoff(&p, n).as_millis() as u64).collect();
    assert_eq!(waits, vec![0, 500, 1000]);
}

#[test]
fn backoff_is_capped_by_max_backoff() {
    let p = StepRetry {
        backoff_ms: 500,
        backoff_multiplier: 2.0,
        max_backoff_ms: 1500,
        ..StepRetry::default()
    };
    let waits: Vec<u64> = (1..=6).map(|n| backoff(&p, n).as_millis() as u64).collect();
    assert_eq!(waits, vec![0, 500, 1000, 1500, 1500, 1500]);
}

/// The step loop under a fake clock: a node failing twice with 503 then
/// answering; the loop sleeps what `decide` says. Attempts start at 0, 500
/// and 1500 ms (waits 0/500/1000).
#[test]
fn step_loop_under_fake_clock_starts_attempts_at_0_500_1500_ms() {
    use crate::clock::{Clock, FakeClock};
    let clock = FakeClock::default();
    let t0 = clock.now();
    let p = StepRetry {
        backoff_ms: 500,
        backoff_multiplier: 2.0,
        ..StepRetry::default()
    };
    let mut starts = Vec::new();
    let mut attempt = 0;
    loop {
        attempt += 1;
        starts.push((clock.now() - t0).as_millis() as u64);
        if attempt == 3 {
            break; // the node answers
        }
        let d = decide(
            &p,
            &FailedAttempt {
                error: ToolError::CapacityExceeded,
                retry_after: None,
                attempts_made: attempt,
                maybe_executed: false,
                safe_to_rerun: false,
                other_node_left: false,
            },
        );
        match d {
            StepDecision::RetrySameNode { wait } => clock.advance(wait),
            other => panic!("expected a retry, got {other:?}"),
        }
    }
    assert_eq!(starts, vec![0, 500, 1500]);
}

fn failed(error: ToolError, attempts_made: u32, other_node_left: bool) -> FailedAttempt {
    FailedAttempt {
        error,
        retry_after: None,
        attempts_made,
        maybe_executed: false,
        safe_to_rerun: false,
        other_node_left,
    }
}

#[test]
fn non_retryable_errors_stop_at_once_even_with_nodes_left() {
    let p = StepRetry {
        non_retryable_errors: vec![ToolError::CapacityExceeded],
        ..StepRetry::default()
    };
    assert_eq!(
        decide(&p, &failed(ToolError::CapacityExceeded, 1, true)),
        StepDecision::Stop(StopReason::NonRetryable)
    );
}

#[test]
fn invalid_input_is_neither_retried_nor_failed_over() {
    let p = StepRetry::default();
    for other in [true, false] {
        assert_eq!(
            decide(&p, &failed(ToolError::InvalidInput, 1, other)),
            StepDecision::Stop(StopReason::NonRetryable)
        );
    }
}

#[test]
fn a_failure_moves_to_the_next_node_at_once() {
    let p = StepRetry::default();
    for e in [
        ToolError::CapacityExceeded,
        ToolError::NodeUnreachable,
        ToolError::RateLimited,
        ToolError::ToolNotFound,
        ToolError::MissingCapability,
        ToolError::SchemaValidationFailed,
    ] {
        assert_eq!(
            decide(&p, &failed(e, 1, true)),
            StepDecision::NextNode,
            "{e}"
        );
    }
}

#[test]
fn the_last_node_standing_is_retried_with_backoff() {
    let p = StepRetry::default();
    assert_eq!(
        decide(&p, &failed(ToolError::CapacityExceeded, 1, false)),
        StepDecision::RetrySameNode {
            wait: Duration::from_millis(DEFAULT_BACKOFF_MS)
        }
    );
    // A node lacking the tool is not asked again.
    assert_eq!(
        decide(&p, &failed(ToolError::ToolNotFound, 1, false)),
        StepDecision::Stop(StopReason::NonRetryable)
    );
}

#[test]
fn retry_after_longer_than_backoff_is_honoured() {
    let p = StepRetry::default();
    let mut f = failed(ToolError::RateLimited, 1, false);
    f.retry_after = Some(Duration::from_secs(2));
    assert_eq!(
        decide(&p, &f),
        StepDecision::RetrySameNode {
            wait: Duration::from_secs(2)
        }
    );
}

#[test]
fn attempts_are_bounded_across_nodes() {
    let p = StepRetry {
        max_attempts: 2,
        ..StepRetry::default()
    };
    assert_eq!(
        decide(&p, &failed(ToolError::CapacityExceeded, 2, true)),
        StepDecision::Stop(StopReason::AttemptsExhausted)
    );
}

#[test]
fn retryable_errors_list_restricts_what_is_retried() {
    let p = StepRetry {
        retryable_errors: vec![ToolError::NetworkTimeout],
        ..StepRetry::default()
    };
    assert_eq!(
        decide(&p, &failed(ToolError::CapacityExceeded, 1, false)),
        StepDecision::Stop(StopReason::NonRetryable)
    );
    assert_eq!(
        decide(&p, &failed(ToolError::CapacityExceeded, 1, true)),
        StepDecision::Stop(StopReason::NonRetryable)
    );
    let mut t = failed(ToolError::NetworkTimeout, 1, true);
    t.safe_to_rerun = true;
    assert_eq!(decide(&p, &t), StepDecision::NextNode);
}

#[test]
fn a_non_deterministic_call_that_may_have_run_is_not_rerun() {
    let p = StepRetry::default();
    let mut f = failed(ToolError::NetworkTimeout, 1, true);
    f.maybe_executed = maybe_executed(f.error, Some(Transport::HeadersTimeout), true);
    assert!(f.maybe_executed);
    f.safe_to_rerun = safe_to_rerun(false, false, false);
    assert_eq!(
        decide(&p, &f),
        StepDecision::Stop(StopReason::MaybeExecuted)
    );
    // Deterministic, an idempotency key, or retry_unsafe make it safe.
    for (d, k, u) in [
        (true, false, false),
        (false, true, false),
        (false, false, true),
    ] {
        f.safe_to_rerun = safe_to_rerun(d, k, u);
        assert_eq!(decide(&p, &f), StepDecision::NextNode);
    }
}

#[test]
fn maybe_executed_only_after_the_request_was_sent() {
    assert!(!maybe_executed(
        ToolError::NodeUnreachable,
        Some(Transport::ConnectRefused),
        true
    ));
    assert!(maybe_executed(
        ToolError::NodeUnreachable,
        Some(Transport::ConnectReset),
        true
    ));
    assert!(!maybe_executed(
        ToolError::NetworkTimeout,
        Some(Transport::HeadersTimeout),
        false
    ));
    assert!(!maybe_executed(ToolError::CapacityExceeded, None, true));
}

#[test]
fn node_health_offline_beats_ejected_beats_degraded() {
    assert_eq!(node_health(false, true, true), NodeHealth::Offline);
    assert_eq!(node_health(true, true, false), NodeHealth::Ejected);
    assert_eq!(node_health(true, false, true), NodeHealth::Degraded);
    assert_eq!(node_health(true, false, false), NodeHealth::Healthy);
}

#[test]
fn leases_lapse_at_their_expiry() {
    assert!(!lease_expired(None, u64::MAX));
    assert!(!lease_expired(Some(1000), 999));
    assert!(lease_expired(Some(1000), 1000));
}

fn cand(name: &str, health: NodeHealth, offers: bool, in_flight: u32) -> Candidate<'_> {
    Candidate {
        name,
        health,
        offers,
        in_flight,
    }
}

#[test]
fn local_orders_healthy_then_degraded_then_ejected_never_offline() {
    let nodes = [
        cand("a", NodeHealth::Ejected, true, 0),
        cand("b", NodeHealth::Degraded, true, 0),
        cand("c", NodeHealth::Healthy, true, 3),
        cand("d", NodeHealth::Healthy, true, 1),
        cand("e", NodeHealth::Offline, true, 0),
        cand("f", NodeHealth::Healthy, false, 0),
    ];
    assert_eq!(order_local(&nodes), vec![3, 2, 1, 0]);
}

#[test]
fn chain_keeps_its_order_with_ejected_nodes_last() {
    let nodes = [
        cand("a", NodeHealth::Healthy, true, 0),
        cand("b", NodeHealth::Ejected, true, 0),
        cand("c", NodeHealth::Healthy, true, 0),
        cand("d", NodeHealth::Offline, true, 0),
    ];
    let chain: Vec<String> = ["b", "d", "c", "a", "zz"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(order_chain(&chain, &nodes), vec![2, 0, 1]);
}

#[test]
fn balanced_spreads_round_robin_and_skips_ejected() {
    let nodes = [
        cand("a", NodeHealth::Healthy, true, 0),
        cand("b", NodeHealth::Ejected, true, 0),
        cand("c", NodeHealth::Healthy, true, 0),
        cand("d", NodeHealth::Degraded, true, 0),
    ];
    let firsts: Vec<usize> = (0..6)
        .map(|t| pick_balanced(&nodes, 2, t).unwrap()[0])
        .collect();
    assert_eq!(firsts, vec![0, 2, 3, 0, 2, 3]);
    assert_eq!(
        pick_balanced(&nodes, 4, 0),
        Err(NotEnoughNodes {
            healthy: 3,
            min_nodes: 4
        })
    );
}

#[test]
fn balanced_prefers_the_least_loaded_node() {
    let nodes = [
        cand("a", NodeHealth::Healthy, true, 2),
        cand("b", NodeHealth::Healthy, true, 0),
    ];
    assert_eq!(pick_balanced(&nodes, 1, 0).unwrap(), vec![1, 0]);
}

#[test]
fn queue_expires_after_ttl_and_delivers_when_due() {
    let q = 1_000_000;
    assert_eq!(
        queue_action(q, 10, q + 5_000, q + 1_000),
        QueueAction::WaitUntil(q + 5_000)
    );
    assert_eq!(
        queue_action(q, 10, q + 5_000, q + 5_000),
        QueueAction::Deliver
    );
    assert_eq!(
        queue_action(q, 10, q + 5_000, q + 10_000),
        QueueAction::Expire
    );
    assert_eq!(
        queue_action(q, 10, q + 50_000, q + 9_000),
        QueueAction::WaitUntil(q + 10_000)
    );
    assert_eq!(next_delivery_ms(q, 0), q + 1_000);
    assert_eq!(next_delivery_ms(q, 5), q + 5_000);
}

#[test]
fn step_retry_rejects_nonsense() {
    let bad = StepRetry {
        max_attempts: 0,
        backoff_multiplier: 0.5,
        backoff_ms: 10,
        max_backoff_ms: 5,
        ..StepRetry::default()
    };
    assert_eq!(bad.problems().len(), 3);
    assert!(StepRetry::default().problems().is_empty());
    let parsed: StepRetry =
        serde_json::from_str(r#"{"max_attempts": 4, "non_retryable_errors": ["InvalidInput"]}"#)
            .unwrap();
    assert_eq!(parsed.max_attempts, 4);
    assert_eq!(parsed.backoff_ms, DEFAULT_BACKOFF_MS);
    assert!(serde_json::from_str::<StepRetry>(r#"{"retryable_errors": ["Nope"]}"#).is_err());
}

#[test]
fn front_names_round_trip_under_the_prefix_rule() {
    assert_eq!(front_name("a", "echo", false), "echo");
    assert_eq!(front_name("a", "echo", true), "a__echo");
    assert_eq!(split_front_name("a__echo", &["a"]), (Some("a"), "echo"));
    assert_eq!(split_front_name("x__echo", &["a"]), (None, "x__echo"));
    assert_eq!(split_front_name("echo", &["a"]), (None, "echo"));
}

#[test]
fn job_status_round_trips() {
    for s in JobStatus::ALL {
        assert_eq!(JobStatus::parse(s.as_str()), Some(s));
    }
    assert!(JobStatus::Expired.is_final());
    assert!(!JobStatus::Queued.is_final());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn backoff_never_exceeds_the_cap_and_never_shrinks(
        base in 0u64..10_000, mult in 1.0f64..5.0, cap in 0u64..60_000, n in 1u32..40
    ) {
        let p = StepRetry { backoff_ms: base, backoff_multiplier: mult, max_backoff_ms: cap.max(base), ..StepRetry::default() };
        let a = backoff(&p, n);
        let b = backoff(&p, n + 1);
        prop_assert!(b >= a);
        prop_assert!(b.as_millis() as u64 <= p.max_backoff_ms);
    }

    #[test]
    fn decide_never_exceeds_max_attempts_and_never_reruns_unsafe(
        e in 0usize..10, made in 1u32..10, max in 1u32..10,
        maybe in any::<bool>(), safe in any::<bool>(), left in any::<bool>()
    ) {
        let p = StepRetry { max_attempts: max, ..StepRetry::default() };
        let f = FailedAttempt { error: ToolError::ALL[e], retry_after: None, attempts_made: made, maybe_executed: maybe, safe_to_rerun: safe, other_node_left: left };
        let d = decide(&p, &f);
        if made >= max || (maybe && !safe) || f.error == ToolError::InvalidInput {
            prop_assert!(matches!(d, StepDecision::Stop(_)));
        }
        if d == StepDecision::NextNode {
            prop_assert!(left);
        }
    }
}

#[test]
fn a_frozen_node_costs_at_most_half_the_step() {
    let step = Duration::from_millis(4000);
    assert_eq!(attempt_budget(step, 2), Duration::from_millis(2000));
    assert_eq!(
        attempt_budget(Duration::from_millis(2000), 1),
        Duration::from_millis(2000)
    );
}

#[test]
fn references_to_earlier_results_are_resolved() {
    use serde_json::json;
    let results = |id: &str| (id == "s1").then(|| json!({"value": 2.54, "list": [1, 2]}));
    let args = json!({"x": "${steps.s1.result.value}", "y": ["${steps.s1.result.list.1}"], "z": "plain ${x}", "w": 3});
    assert_eq!(
        resolve_refs(&args, &json!(null), &results).unwrap(),
        json!({"x": 2.54, "y": [2], "z": "plain ${x}", "w": 3})
    );
    assert!(
        resolve_refs(&json!("${steps.s9.result}"), &json!(null), &results)
            .unwrap_err()
            .contains("s9")
    );
    assert!(
        resolve_refs(&json!("${steps.s1.result.nope}"), &json!(null), &results)
            .unwrap_err()
            .contains("nope")
    );
}

#[test]
fn references_to_the_jobs_input_are_resolved() {
    use serde_json::json;
    let none = |_: &str| None;
    let input = json!({"text": "hello", "opts": {"max": [3, 4]}});
    assert_eq!(
        resolve_refs(
            &json!({"t": "${input.text}", "m": "${input.opts.max.1}", "all": "${input}"}),
            &input,
            &none
        )
        .unwrap(),
        json!({"t": "hello", "m": 4, "all": input})
    );
    assert!(
        resolve_refs(&json!("${input.missing}"), &input, &none)
            .unwrap_err()
            .contains("missing")
    );
    assert_eq!(tool_of_id("tool:unit_convert"), "unit_convert");
    assert_eq!(tool_of_id("echo"), "echo");
}

#[test]
fn retry_failover_overrides_the_target() {
    assert!(!failover_allowed(Some(false), true));
    assert!(failover_allowed(Some(true), false));
    assert!(failover_allowed(None, true));
    assert!(!failover_allowed(None, false));
}

#[test]
fn output_schema_checks_types_required_and_nesting() {
    use serde_json::json;
    let schema = json!({"type": "object", "required": ["value"], "properties": {
        "value": {"type": "number"}, "unit": {"type": "string", "enum": ["cm", "in"]},
        "tags": {"type": "array", "items": {"type": "string"}}}});
    assert!(validate_output(&schema, &json!({"value": 1, "unit": "cm", "tags": ["a"]})).is_ok());
    assert!(
        validate_output(&schema, &json!({"unit": "cm"}))
            .unwrap_err()
            .contains("`value` is required")
    );
    assert!(
        validate_output(&schema, &json!({"value": "x"}))
            .unwrap_err()
            .contains("$.value")
    );
    assert!(validate_output(&schema, &json!({"value": 1, "unit": "km"})).is_err());
    assert!(
        validate_output(&schema, &json!({"value": 1, "tags": [1]}))
            .unwrap_err()
            .contains("$.tags[0]")
    );
    assert!(validate_output(&json!({"type": ["string", "null"]}), &json!(null)).is_ok());
}

#[test]
fn a_job_left_running_is_requeued_only_when_safe_and_only_after_its_timeouts() {
    use Interrupted::{Fail, Requeue, StillRunning};
    let g = Duration::from_secs(30);
    // (updated_ms, remaining_timeout_ms, grace, now_ms, safe, expected)
    let table: &[(u64, u64, Duration, u64, bool, Interrupted)] = &[
        (1_000, 5_000, g, 1_000, true, StillRunning),
        (1_000, 5_000, g, 35_999, false, StillRunning),
        (1_000, 5_000, g, 36_000, true, Requeue),
        (1_000, 5_000, g, 36_000, false, Fail),
        (1_000, 5_000, Duration::ZERO, 6_000, false, Fail),
        (1_000, 5_000, Duration::ZERO, 5_999, true, StillRunning),
        (u64::MAX - 1, u64::MAX, g, u64::MAX - 1, true, StillRunning),
    ];
    for &(updated, remaining, grace, now, safe, want) in table {
        assert_eq!(
            interrupted_action(updated, remaining, grace, now, safe),
            want,
            "updated {updated} remaining {remaining} grace {grace:?} now {now} safe {safe}"
        );
    }
}

#[test]
fn a_passed_over_node_is_named_with_why() {
    use NodeHealth::*;
    let table = [
        (Healthy, Healthy, true, None),
        (Degraded, Degraded, true, None),
        (Offline, Offline, true, Some("offline")),
        (Offline, Offline, false, Some("offline")),
        (Healthy, Healthy, false, Some("tool_not_found")),
        (Ejected, Ejected, true, Some("ejected")),
        // The node is well; the step's own breaker is open for it.
        (Healthy, Ejected, true, Some("open")),
        (Degraded, Ejected, true, Some("open")),
    ];
    for (node, for_step, offers, want) in table {
        assert_eq!(
            skip_reason(node, for_step, offers),
            want,
            "{node:?} {for_step:?} {offers}"
        );
    }
}
