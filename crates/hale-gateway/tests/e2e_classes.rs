//! End to end, one test per row of the failure-class table
//! (docs/operations.md, "Failure classes"): a provider fails in
//! that class (chaos, or a fixed-status stub where chaos has no such fault),
//! and the outcome the table promises is what a caller sees — retried on the
//! same target or not, moved to the next target or not — in both wire modes.
//! The timeline of `GET /turns/{id}` and the providers' request counts are
//! the evidence.

mod common;

use common::*;
use hale_core::config::ProviderKind;
use serde_json::json;
use std::time::Duration;

/// network: a reset before the response headers is retried on the same
/// target and answered there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn network_reset_before_headers_is_retried_and_answered() {
    for stream in MODES {
        let fault = "reset:times=1";
        let (c, h) = pair(fault, ProviderKind::OpenAi, |_| {}).await;
        let r = h.openai(ROUTE).stream(stream).send().await;
        r.assert_complete(&full());
        assert_eq!(r.provider, "primary", "stream={stream}");
        assert_eq!(r.attempts, "2");
        assert_eq!(c.requests_for(fault), 2);
        assert_eq!(c.requests_for(BACKUP_MODEL), 0);
        let tl = h.timeline(&r.turn_id).await;
        assert_eq!(classes_of(&tl), ["network", "ok"]);
        assert_eq!(
            targets_of(&tl),
            [format!("primary/{fault}"), format!("primary/{fault}")]
        );
    }
}

/// network, persistent: retried up to the network policy's attempts, then the next target.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn network_reset_persistent_moves_on_after_retries() {
    let (c, h) = pair("reset", ProviderKind::Anthropic, |cfg| {
        cfg.retry.network.initial = Duration::from_millis(50);
        cfg.retry.network.max = Duration::from_millis(200);
    })
    .await;
    let r = h.openai(ROUTE).send().await;
    r.assert_complete(&full());
    assert_eq!(r.provider, "backup");
    let max = u64::from(h.gw.cfg.retry.network.max_attempts);
    assert_eq!(c.requests_for("reset"), max);
    let tl = h.timeline(&r.turn_id).await;
    assert_eq!(tl.len() as u64, max + 1);
    assert_eq!(classes_of(&tl).last().map(String::as_str), Some("ok"));
}

/// timeout: no response headers within the attempt timeout → left after
/// that timeout, not retried, served by the fallback.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeout_no_response_is_left_after_the_attempt_timeout_not_retried_fallback_serves() {
    for stream in MODES {
        let (c, h) = pair("hang", ProviderKind::Anthropic, |cfg| {
            prov(cfg, "primary").timeout = Duration::from_secs(1);
        })
        .await;
        let r = h.openai(ROUTE).stream(stream).send().await;
        r.assert_complete(&full());
        assert_eq!(r.provider, "backup", "stream={stream}");
        assert!(
            r.elapsed >= Duration::from_millis(950),
            "left before the timeout: {:?}",
            r.elapsed
        );
        assert!(
            r.elapsed < Duration::from_secs(4),
            "waited too long: {:?}",
            r.elapsed
        );
        assert_eq!(
            c.requests_for("hang"),
            1,
            "a silent provider is not retried"
        );
        let tl = h.timeline(&r.turn_id).await;
        assert_eq!(classes_of(&tl), ["timeout", "ok"]);
        assert_eq!(r.attempts, "2");
        assert_eq!(r.degraded, "true");
    }
}

/// timeout: the first token after 20 s → the first-token timeout moves to the
/// fallback (streaming); non-streaming, the whole answer is 20 s late and the
/// attempt timeout does the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeout_first_token_too_late_moves_to_the_fallback() {
    for stream in MODES {
        let fault = "slow-first-token:ms=20000";
        let (c, h) = pair(fault, ProviderKind::OpenAi, |cfg| {
            let p = prov(cfg, "primary");
            p.timeout = Duration::from_secs(1);
            p.first_token_timeout = Duration::from_secs(1);
        })
        .await;
        let r = h.openai(ROUTE).stream(stream).send().await;
        r.assert_complete(&full());
        assert_eq!(r.provider, "backup", "stream={stream}");
        assert!(r.elapsed >= Duration::from_millis(950), "{:?}", r.elapsed);
        assert!(r.elapsed < Duration::from_secs(5), "{:?}", r.elapsed);
        assert_eq!(c.requests_for(fault), 1);
        let tl = h.timeline(&r.turn_id).await;
        assert_eq!(classes_of(&tl), ["timeout", "ok"]);
    }
}

/// rate_limit: a 429 with `Retry-After: 1` once is retried on the same target
/// after the wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limit_is_retried_on_the_same_target_after_retry_after() {
    for stream in MODES {
        let fault = "rate-limit:retry_after=1:times=1";
        let (c, h) = pair(fault, ProviderKind::Anthropic, |_| {}).await;
        let r = h.openai(ROUTE).stream(stream).send().await;
        r.assert_complete(&full());
        assert_eq!(r.provider, "primary");
        assert!(r.elapsed >= Duration::from_millis(950), "{:?}", r.elapsed);
        assert_eq!(c.requests_for(fault), 2);
        assert_eq!(c.requests_for(BACKUP_MODEL), 0);
        assert_eq!(
            classes_of(&h.timeline(&r.turn_id).await),
            ["rate_limit", "ok"]
        );
    }
}

/// overloaded: 503s are retried on the same target, then the next target;
/// an Anthropic-kind provider's 529 is overloaded too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overloaded_503_and_529_are_retried_then_moved_on() {
    // A 529 from an Anthropic-kind primary, once: retried on the same target.
    for stream in MODES {
        let c = chaos().await;
        let mut cfg = config(vec![
            anthropic("primary", &c, "error-529:times=1"),
            openai("backup", &c, BACKUP_MODEL),
        ]);
        cfg.retry.server_error.initial = Duration::from_millis(50);
        let h = Hale::start(cfg).await;
        let r = h.anthropic(ROUTE).stream(stream).send().await;
        r.assert_complete(&full());
        assert_eq!(r.provider, "primary", "stream={stream}");
        assert_eq!(c.requests_for("error-529:times=1"), 2);
        assert_eq!(
            classes_of(&h.timeline(&r.turn_id).await),
            ["overloaded", "ok"]
        );
    }
    // A persistent 503: max_attempts on the primary, then the backup.
    for stream in MODES {
        let (c, h) = pair("error-503", ProviderKind::Anthropic, |cfg| {
            cfg.retry.server_error.initial = Duration::from_millis(50);
        })
        .await;
        let r = h.openai(ROUTE).stream(stream).send().await;
        r.assert_complete(&full());
        assert_eq!(r.provider, "backup", "stream={stream}");
        let max = u64::from(h.gw.cfg.retry.server_error.max_attempts);
        assert_eq!(c.requests_for("error-503"), max);
        let tl = h.timeline(&r.turn_id).await;
        assert_eq!(
            classes_of(&tl),
            ["overloaded", "overloaded", "overloaded", "ok"]
        );
    }
}

/// stream_broken: a stream cut mid-answer is resumed on the next target and
/// the caller gets the whole answer; it is not retried on the same target.
/// Non-streaming, a body cut half way reached nobody: it is a lost
/// connection (network), retried on the same target, which answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_broken_cut_is_recovered() {
    for stream in MODES {
        let fault = "cut:after=40";
        let (c, h) = pair(fault, ProviderKind::OpenAi, |cfg| {
            cfg.retry.network.initial = Duration::from_millis(50);
        })
        .await;
        let r = h.openai(ROUTE).stream(stream).send().await;
        r.assert_complete(&full());
        let tl = h.timeline(&r.turn_id).await;
        let primary = format!("primary/{fault}");
        if stream {
            assert_eq!(c.requests_for(fault), 1, "not retried on the same target");
            assert_eq!(c.requests_for(BACKUP_MODEL), 1);
            assert_eq!(classes_of(&tl), ["stream_broken", "ok"], "{tl:?}");
            assert_eq!(targets_of(&tl), [primary, format!("backup/{BACKUP_MODEL}")]);
        } else {
            assert_eq!(c.requests_for(fault), 2, "retried on the same target");
            assert_eq!(c.requests_for(BACKUP_MODEL), 0);
            assert_eq!(classes_of(&tl), ["network", "ok"], "{tl:?}");
            assert_eq!(targets_of(&tl), [primary.clone(), primary]);
        }
    }
}

/// context_overflow: never re-sent unchanged to the same model; the next target serves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn context_overflow_is_never_resent_unchanged_next_target_serves() {
    for stream in MODES {
        let (c, h) = pair("context-overflow", ProviderKind::Anthropic, |_| {}).await;
        let r = h.openai(ROUTE).stream(stream).send().await;
        r.assert_complete(&full());
        assert_eq!(r.provider, "backup");
        assert_eq!(c.requests_for("context-overflow"), 1);
        assert_eq!(
            classes_of(&h.timeline(&r.turn_id).await),
            ["context_overflow", "ok"]
        );
    }
    // Alone on its route: one call, and the caller is told why.
    let c = chaos().await;
    let h = Hale::start(config(vec![openai("only", &c, "context-overflow")])).await;
    let r = h.openai(ROUTE).send().await;
    assert_eq!(r.status, 400, "{}", r.raw);
    assert_eq!(r.error_type(), "context_length_exceeded");
    assert_eq!(c.requests_for("context-overflow"), 1);
}

/// content_policy: not retried, not failed over, the provider's reason passed on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn content_policy_is_not_retried_not_failed_over_reason_passed_on() {
    for stream in MODES {
        let (c, h) = pair("content-filter", ProviderKind::Anthropic, |_| {}).await;
        let r = h.openai(ROUTE).stream(stream).send().await;
        assert_eq!(r.status, 400, "stream={stream}: {}", r.raw);
        assert_eq!(r.error_type(), "content_policy");
        assert!(
            r.error_message().contains("violence"),
            "reason not passed on: {}",
            r.raw
        );
        assert_eq!(r.attempts, "1");
        assert_eq!(c.requests_for("content-filter"), 1);
        assert_eq!(c.requests_for(BACKUP_MODEL), 0);
        // The Anthropic-shaped caller gets its own error shape with the same reason.
        let a = h.anthropic(ROUTE).stream(stream).send().await;
        assert_eq!(a.status, 400);
        assert_eq!(a.json["type"], "error", "{}", a.raw);
        assert!(a.error_message().contains("violence"), "{}", a.raw);
        assert_eq!(c.requests_for(BACKUP_MODEL), 0);
    }
}

/// auth: not retried, moves on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_is_not_retried_and_moves_on() {
    for stream in MODES {
        let (c, h) = pair("auth", ProviderKind::Anthropic, |_| {}).await;
        let r = h.openai(ROUTE).stream(stream).send().await;
        r.assert_complete(&full());
        assert_eq!(r.provider, "backup");
        assert_eq!(c.requests_for("auth"), 1);
        assert_eq!(classes_of(&h.timeline(&r.turn_id).await), ["auth", "ok"]);
    }
}

/// billing: a 402 (chaos has no such fault: a fixed-status stub) is not
/// retried and moves on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn billing_402_is_not_retried_and_moves_on() {
    for stream in MODES {
        let stub = Stub::start(
            402,
            json!({"error": {"message": "You exceeded your current quota, please check your plan and billing details.",
                              "type": "insufficient_quota", "code": "insufficient_quota"}}),
        )
        .await;
        let c = chaos().await;
        let h = Hale::start(config(vec![
            stub.provider("primary", "gpt-4o"),
            openai("backup", &c, BACKUP_MODEL),
        ]))
        .await;
        let r = h.openai(ROUTE).stream(stream).send().await;
        r.assert_complete(&full());
        assert_eq!(r.provider, "backup");
        assert_eq!(stub.hits(), 1);
        assert_eq!(classes_of(&h.timeline(&r.turn_id).await), ["billing", "ok"]);
    }
}

/// overloaded, 504: retried on the same target with a lower `max_tokens`
/// (a long generation is what timed out), then moved on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_timeout_504_is_retried_with_a_lower_max_tokens() {
    let stub = Stub::start(
        504,
        json!({"error": {"message": "upstream request timeout", "type": "server_error"}}),
    )
    .await;
    let c = chaos().await;
    let h = Hale::start(config(vec![
        stub.provider("primary", "gpt-4o"),
        openai("backup", &c, BACKUP_MODEL),
    ]))
    .await;
    let mut call = h.openai(ROUTE);
    call.body_mut()["max_tokens"] = json!(4000);
    let r = call.send().await;
    r.assert_complete(&full());
    assert_eq!(r.provider, "backup");
    let sent: Vec<Option<u64>> = stub
        .bodies
        .lock()
        .unwrap()
        .iter()
        .map(|b| {
            b["max_tokens"]
                .as_u64()
                .or(b["max_completion_tokens"].as_u64())
        })
        .collect();
    assert_eq!(
        sent,
        [Some(4000), Some(2000), Some(1000)],
        "each retry after a 504 halves max_tokens"
    );
}

/// model_not_found: a 404 naming the model (a stub: chaos has no such fault)
/// is not retried and moves on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn model_not_found_404_is_not_retried_and_moves_on() {
    for stream in MODES {
        let stub = Stub::start(
            404,
            json!({"error": {"message": "The model `gpt-9` does not exist or you do not have access to it.",
                              "type": "invalid_request_error", "code": "model_not_found"}}),
        )
        .await;
        let c = chaos().await;
        let h = Hale::start(config(vec![
            stub.provider("primary", "gpt-9"),
            anthropic("backup", &c, BACKUP_MODEL),
        ]))
        .await;
        let r = h.openai(ROUTE).stream(stream).send().await;
        r.assert_complete(&full());
        assert_eq!(r.provider, "backup");
        assert_eq!(stub.hits(), 1);
        assert_eq!(
            classes_of(&h.timeline(&r.turn_id).await),
            ["model_not_found", "ok"]
        );
    }
}

/// bad_request: a plain 400 is not retried and not failed over; the caller gets it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_request_400_is_not_retried_not_failed_over() {
    for stream in MODES {
        let stub = Stub::start(
            400,
            json!({"error": {"message": "Invalid value for 'temperature': must be at most 2.",
                              "type": "invalid_request_error", "param": "temperature", "code": null}}),
        )
        .await;
        let c = chaos().await;
        let h = Hale::start(config(vec![
            stub.provider("primary", "gpt-4o"),
            openai("backup", &c, BACKUP_MODEL),
        ]))
        .await;
        let r = h.openai(ROUTE).stream(stream).send().await;
        assert_eq!(r.status, 400, "{}", r.raw);
        assert_eq!(r.error_type(), "invalid_request_error");
        assert!(r.error_message().contains("temperature"), "{}", r.raw);
        assert_eq!(stub.hits(), 1);
        assert_eq!(c.requests_for(BACKUP_MODEL), 0);
        assert_eq!(r.attempts, "1");
    }
}

/// format: a 200 whose body is not JSON is not retried and moves on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn format_unparsable_body_is_not_retried_and_moves_on() {
    let (c, h) = pair("malformed", ProviderKind::Anthropic, |_| {}).await;
    let r = h.openai(ROUTE).send().await;
    r.assert_complete(&full());
    assert_eq!(r.provider, "backup");
    assert_eq!(c.requests_for("malformed"), 1);
    assert_eq!(classes_of(&h.timeline(&r.turn_id).await), ["format", "ok"]);
}
