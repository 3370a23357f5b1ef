//! Issue 8 "Must show": healing never becomes the outage. Through the real
//! HTTP path against `hale chaos` on loopback, with faults that overlap and
//! traffic that outlasts the limits (short values in the test configs):
//! health per deployment, evidence before ejection, fail open, the last one
//! standing retried, pauses that heal themselves, and limits per conversation.

mod common;

use common::*;
use hale_core::config::{Config, Target};
use hale_core::event::EventKind;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// The healthy model every test's second deployment serves.
const GOOD: &str = "gpt-4o";

fn t(p: &str, m: &str) -> Target {
    Target {
        provider: p.to_owned(),
        model: m.to_owned(),
    }
}

/// Short waits so a test runs in seconds: 20 ms backoffs, 400 ms timeouts.
fn fast(cfg: &mut Config) {
    for p in [
        &mut cfg.retry.server_error,
        &mut cfg.retry.network,
        &mut cfg.retry.rate_limit,
    ] {
        p.initial = Duration::from_millis(20);
        p.max = Duration::from_millis(100);
    }
    cfg.retry.probe_timeout = Duration::from_millis(400);
    for p in &mut cfg.providers {
        p.timeout = Duration::from_millis(400);
        p.first_token_timeout = Duration::from_millis(400);
    }
}

/// One chaos provider `p` and route `smart: [p/fault, p/gpt-4o]`.
async fn one_provider_two_models(fault: &str) -> (hale_chaos::ChaosHandle, Hale) {
    let c = chaos().await;
    let mut cfg = Config::with_providers(vec![openai("p", &c, GOOD)]);
    cfg.routes
        .insert("smart".into(), vec![t("p", fault), t("p", GOOD)]);
    fast(&mut cfg);
    let h = Hale::start(cfg).await;
    (c, h)
}

async fn events_of(h: &Hale, kind: EventKind) -> Vec<hale_core::event::Event> {
    h.store.flush().await.expect("flush");
    h.store
        .events_after(0, 100_000, Some(&[kind]))
        .await
        .expect("events")
        .into_iter()
        .map(|e| e.event)
        .collect()
}

/// A persistent 503, a 429 storm with `Retry-After`, a reset and a silent
/// socket on model-a of a provider each leave model-b of the same provider
/// serving every turn; model-a, once ejected, sees only its probes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_models_of_one_provider_a_fault_on_model_a_leaves_model_b_serving_every_turn() {
    for fault in ["error-503", "rate-limit:retry_after=1", "reset", "hang"] {
        let (c, h) = one_provider_two_models(fault).await;
        for i in 0..40 {
            let stream = i % 2 == 1;
            let r = h.openai("smart").stream(stream).send().await;
            assert_eq!(r.status, 200, "{fault} turn {i}: {}", r.raw);
            assert_eq!(r.provider, "p", "{fault} turn {i}");
            if r.model_header != GOOD {
                // Only model-a's probes or retries may land on it, and they fail.
                panic!("{fault} turn {i} served by {}", r.model_header);
            }
        }
        // Evidence before ejection, then probes only: the default probe
        // interval (5 s) is longer than this test, so model-a saw the calls
        // that ejected it (at most eject_after turns' worth of retries).
        let a = c.requests_for(fault);
        assert!(a <= 9, "{fault}: model-a got {a} calls in 40 turns");
        let (s, v) = h.get_json("/deployments").await;
        assert_eq!(s, 200);
        let deps = v["deployments"].as_array().expect("list");
        let a_view = deps
            .iter()
            .find(|d| d["model"] == fault)
            .unwrap_or_else(|| panic!("{fault} listed: {v}"));
        let b_view = deps.iter().find(|d| d["model"] == GOOD).expect("b listed");
        assert_eq!(b_view["health"], "healthy", "{fault}: {b_view}");
        if fault != "rate-limit:retry_after=1" {
            // A 1 s Retry-After ejection may have ended by now; the others run 30 s+.
            assert_eq!(a_view["health"], "ejected", "{fault}: {a_view}");
        }
        h.stop().await;
    }
}

/// Primary down (503 for ever) while the only fallback fails one call in
/// ten: the fallback is retried, never given up on, and serves every turn;
/// the dead primary sees no call after its ejection (probe interval longer
/// than the test).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_only_remaining_fallback_failing_10_percent_is_retried_and_serves_every_turn() {
    let c = chaos().await;
    let mut cfg = config(vec![
        openai("primary", &c, "error-503"),
        openai("backup", &c, "flaky:every=10"),
    ]);
    fast(&mut cfg);
    cfg.retry.probe_interval = Duration::from_secs(600);
    let h = Hale::start(cfg).await;
    for i in 0..200 {
        let r = h
            .openai(ROUTE)
            .agent("worker")
            .stream(i % 3 == 0)
            .send()
            .await;
        assert_eq!(r.status, 200, "turn {i}: {}", r.raw);
        assert_eq!(r.provider, "backup", "turn {i}");
    }
    // The fallback failed ~20 times and was retried each time.
    assert!(c.requests_for("flaky:every=10") >= 210);
    // The primary: ejected after `eject_after` (3) failed calls, then left alone.
    assert!(
        c.requests_for("error-503") <= 3,
        "{}",
        c.requests_for("error-503")
    );
    let (_, agent) = h.get_json("/agents/worker").await;
    assert_eq!(agent["state"], "active", "{agent}");
    assert!(events_of(&h, EventKind::AgentPaused).await.is_empty());
}

/// Every deployment ejected (or refused by its breaker): the turn still
/// calls the best one (fail open) and succeeds as soon as it answers, with
/// no probe due.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_deployments_ejected_the_turn_still_calls_the_best_one_and_succeeds() {
    let c = chaos().await;
    let mut cfg = config(vec![openai("a", &c, "model-a"), openai("b", &c, "model-b")]);
    fast(&mut cfg);
    cfg.retry.probe_interval = Duration::from_secs(600);
    let h = Hale::start(cfg).await;
    c.set_fault("model-a", Some("error-503"));
    c.set_fault("model-b", Some("error-503"));
    // No agent identity: the failures pause nothing.
    for i in 0..4 {
        let r = h.openai(ROUTE).send().await;
        assert_eq!(r.status, 503, "turn {i}: {}", r.raw);
        assert_eq!(r.error_type(), "all_providers_failed");
    }
    let (_, v) = h.get_json("/deployments").await;
    for d in v["deployments"].as_array().expect("list") {
        assert_eq!(d["health"], "ejected", "{d}");
    }
    // b answers again; nothing is due for a probe, and the turn still calls.
    c.set_fault("model-b", None);
    let r = h.openai(ROUTE).send().await;
    assert_eq!(r.status, 200, "{}", r.raw);
    assert_eq!(r.provider, "b");
    let tl = h.timeline(&r.turn_id).await;
    let served = tl.last().expect("a row");
    assert_eq!(served["mode"], "fail_open", "{tl:?}");
    // The success ends b's ejection: the next turn goes to it normally.
    let (_, v) = h.get_json("/deployments").await;
    let b = v["deployments"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["provider"] == "b")
        .cloned()
        .unwrap();
    assert_eq!(b["health"], "degraded", "{b}");
}

fn pausing(cfg: &mut Config) {
    cfg.self_healing.resume_probe_after = Duration::from_millis(300);
    cfg.self_healing.resume_probe_max = Duration::from_millis(1200);
}

/// A named agent paused after 3 failed turns is let through for a trial
/// after `resume_probe_after` and resumes by itself once its provider
/// answers; `agent.resumed` says `by: auto`. Failed trials back off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_named_agent_resumes_by_itself_once_its_provider_answers_again() {
    let c = chaos().await;
    let mut cfg = config(vec![openai("only", &c, "model-x")]);
    fast(&mut cfg);
    pausing(&mut cfg);
    let h = Hale::start(cfg).await;
    c.set_fault("model-x", Some("error-503"));
    for i in 0..3 {
        let r = h.openai(ROUTE).agent("bot").send().await;
        assert_eq!(r.status, 503, "turn {i}");
    }
    let r = h.openai(ROUTE).agent("bot").send().await;
    assert_eq!(r.status, 423, "{}", r.raw);
    assert_eq!(r.error_type(), "agent_paused");
    let paused = events_of(&h, EventKind::AgentPaused).await;
    assert_eq!(paused.len(), 1);
    assert_eq!(paused[0].payload["by"], "auto");
    // A failed trial: the pause goes on, the wait doubles.
    tokio::time::sleep(Duration::from_millis(350)).await;
    let upstream_before = c.requests_for("model-x");
    let r = h.openai(ROUTE).agent("bot").send().await;
    assert_eq!(r.status, 503, "the trial reached the provider: {}", r.raw);
    assert!(c.requests_for("model-x") > upstream_before);
    let r = h.openai(ROUTE).agent("bot").send().await;
    assert_eq!(r.status, 423, "no second trial at once");
    // The provider recovers: the next trial resumes the agent.
    c.set_fault("model-x", None);
    let t0 = Instant::now();
    let resumed = loop {
        let r = h.openai(ROUTE).agent("bot").send().await;
        if r.status == 200 {
            break r;
        }
        assert_eq!(r.status, 423, "{}", r.raw);
        assert!(t0.elapsed() < Duration::from_secs(5), "never resumed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(resumed.provider, "only");
    let (_, agent) = h.get_json("/agents/bot").await;
    assert_eq!(agent["state"], "active", "{agent}");
    assert_eq!(agent["consecutive_failures"], 0);
    let ev = events_of(&h, EventKind::AgentResumed).await;
    assert_eq!(ev.len(), 1, "{ev:?}");
    assert_eq!(ev[0].payload["by"], "auto");
    // And it keeps serving.
    for _ in 0..20 {
        assert_eq!(h.openai(ROUTE).agent("bot").send().await.status, 200);
    }
}

/// An operator's pause is never lifted automatically, however long it runs
/// and however healthy the providers are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operators_pause_is_not_lifted_automatically() {
    let c = chaos().await;
    let mut cfg = config(vec![openai("only", &c, "model-x")]);
    pausing(&mut cfg);
    let h = Hale::start(cfg).await;
    assert_eq!(h.openai(ROUTE).agent("ops").send().await.status, 200);
    let (s, v) = h.post_json("/agents/ops/pause").await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["pause"]["by"], "operator");
    for _ in 0..8 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let r = h.openai(ROUTE).agent("ops").send().await;
        assert_eq!(r.status, 423, "{}", r.raw);
    }
    assert_eq!(
        c.requests_for("model-x"),
        1,
        "no trial reached the provider"
    );
    let (s, v) = h.post_json("/agents/ops/resume").await;
    assert_eq!(s, 200);
    assert_eq!(v["resume"]["was_paused"], true);
    assert_eq!(v["resume"]["paused_by"], "operator");
    assert_eq!(h.openai(ROUTE).agent("ops").send().await.status, 200);
    // Unknown agents are a clear 404 to every call but a pause, and a
    // resume does not create one; a pause creates it paused (issue 28 §5).
    let (s, v) = h.post_json("/agents/nosuch/resume").await;
    assert_eq!(s, 404, "{v}");
    assert_eq!(v["error"]["type"], "agent_not_found");
    let (s, _) = h.get_json("/agents/nosuch").await;
    assert_eq!(s, 404);
    let (s, v) = h.post_json("/agents/not-yet/pause").await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["created"], true, "{v}");
    assert_eq!(v["state"], "paused", "{v}");
}

/// Traffic without `X-Hale-Agent` (and no key default) belongs to no agent
/// loop: however many of its turns fail, it is never answered 423.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_without_x_hale_agent_are_never_answered_423() {
    let c = chaos().await;
    let mut cfg = config(vec![openai("only", &c, "model-x")]);
    fast(&mut cfg);
    pausing(&mut cfg);
    let h = Hale::start(cfg).await;
    c.set_fault("model-x", Some("error-503"));
    for i in 0..12 {
        let r = h.openai(ROUTE).stream(i % 2 == 0).send().await;
        assert_eq!(r.status, 503, "turn {i}: {}", r.raw);
    }
    c.set_fault("model-x", None);
    assert_eq!(h.openai(ROUTE).send().await.status, 200);
    assert!(events_of(&h, EventKind::AgentPaused).await.is_empty());
    // The same failures with a name do pause it.
    c.set_fault("model-x", Some("error-503"));
    for _ in 0..3 {
        h.openai(ROUTE).agent("named").send().await;
    }
    assert_eq!(h.openai(ROUTE).agent("named").send().await.status, 423);
}

/// A plain client without hale headers sends 3,000 requests in 300 different
/// conversations over more than `task_timeout` and more than `max_events`
/// in total: no 409. One conversation that loops past `max_events` is still
/// stopped, alone, and an operator's task reset lets it start over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_client_in_many_conversations_gets_no_409_while_one_looping_conversation_is_stopped()
 {
    let c = chaos().await;
    let mut cfg = config(vec![openai("only", &c, "ok")]);
    cfg.guard.task_timeout = Duration::from_secs(2);
    cfg.guard.max_events = 40; // 20 turns (a request and a response each)
    let h = std::sync::Arc::new(Hale::start(cfg).await);
    let t0 = Instant::now();
    let mut workers = Vec::new();
    for w in 0..6 {
        let h = h.clone();
        workers.push(tokio::spawn(async move {
            let mut refused = Vec::new();
            let mut n = 0;
            for conv in (w..300).step_by(6) {
                // Each conversation grows over 10 requests from one root.
                let mut messages =
                    vec![json!({"role": "user", "content": format!("question {conv}")})];
                for turn in 0..10 {
                    let mut call = h.openai(ROUTE);
                    call.body_mut()["messages"] = Value::Array(messages.clone());
                    let r = call.send().await;
                    n += 1;
                    if r.status != 200 {
                        refused.push((conv, turn, r.status, r.raw.clone()));
                    }
                    messages.push(json!({"role": "assistant", "content": r.text}));
                    messages.push(json!({"role": "user", "content": format!("and then {turn}?")}));
                }
            }
            (n, refused)
        }));
    }
    let mut total = 0;
    for w in workers {
        let (n, refused) = w.await.expect("worker");
        total += n;
        assert!(
            refused.is_empty(),
            "refused: {:?}",
            &refused[..refused.len().min(3)]
        );
    }
    assert_eq!(total, 3000);
    // Make sure the run outlasted task_timeout (keep sending if it was fast).
    while t0.elapsed() < Duration::from_millis(2100) {
        let r = h
            .openai(ROUTE)
            .user(&format!("late {:?}", t0.elapsed()))
            .send()
            .await;
        assert_eq!(r.status, 200, "{}", r.raw);
    }
    // One looping conversation: the same root over and over, past max_events.
    let mut stopped_at = None;
    for i in 0..30 {
        let r = h.openai(ROUTE).user("loop forever").send().await;
        if r.status == 409 {
            assert_eq!(r.error_type(), "safety_limit", "{}", r.raw);
            stopped_at = Some(i);
            break;
        }
        assert_eq!(r.status, 200, "{}", r.raw);
    }
    assert_eq!(
        stopped_at,
        Some(20),
        "stopped at the 21st request (40 events)"
    );
    // Others are unaffected.
    assert_eq!(
        h.openai(ROUTE).user("something else").send().await.status,
        200
    );
    // The operator clears that conversation's task.
    let (_, agent) = h.get_json("/agents/default").await;
    let stopped = agent["stopped_tasks"].as_array().expect("list").clone();
    assert_eq!(stopped.len(), 1, "{agent}");
    let task = stopped[0]["task"].as_str().expect("task").to_owned();
    assert!(task.starts_with("conv-"), "{task}");
    let (s, v) = h
        .post_json(&format!("/agents/default/tasks/{task}/reset"))
        .await;
    assert_eq!(s, 200, "{v}");
    assert!(
        v["cleared"]
            .as_array()
            .unwrap()
            .contains(&json!("safety_limit"))
    );
    assert_eq!(
        h.openai(ROUTE).user("loop forever").send().await.status,
        200
    );
}

/// An operator trips a deployment out before any call fails: no turn goes
/// to it; a reset brings it back at once. Both are `breaker.state_changed`
/// events naming the operator.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_trip_forces_a_deployment_out_and_reset_brings_it_back_at_once() {
    let (c, h) = one_provider_two_models("model-a").await;
    assert_eq!(h.openai("smart").send().await.model_header, "model-a");
    let (s, v) = h.post_json("/deployments/p/model-a/trip").await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["health"], "ejected");
    assert_eq!(v["forced"], true);
    for _ in 0..10 {
        let r = h.openai("smart").send().await;
        assert_eq!(r.status, 200);
        assert_eq!(r.model_header, GOOD);
    }
    assert_eq!(c.requests_for("model-a"), 1);
    let (s, v) = h.post_json("/deployments/p/model-a/reset").await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["health"], "healthy");
    assert_eq!(h.openai("smart").send().await.model_header, "model-a");
    let ev = events_of(&h, EventKind::BreakerStateChanged).await;
    let by_operator: Vec<_> = ev
        .iter()
        .filter(|e| e.payload["by"] == "operator")
        .collect();
    assert_eq!(by_operator.len(), 2, "{ev:?}");
    // An unknown deployment is a 404 in the error shape.
    let (s, v) = h.post_json("/deployments/p/nosuch/trip").await;
    assert_eq!(s, 404, "{v}");
    assert_eq!(v["error"]["type"], "not_found");
    // A model name with a slash, percent-encoded.
    let (s, _) = h.post_json("/deployments/p/org%2Fmodel/reset").await;
    assert_eq!(s, 404);
}

/// Issue 28 (seed 003's evidence of a skipped primary, for model turns): a
/// turn served by the second deployment because the first was ejected is
/// degraded, and its timeline's record names the first as skipped and why;
/// the attempts themselves stay one row each. An operator's trip reads
/// `tripped`.
#[tokio::test]
async fn a_turn_served_past_an_ejected_primary_is_degraded_and_names_it_skipped() {
    let (c, h) = one_provider_two_models("rate-limit:retry_after=30").await;
    // The 429 with Retry-After ejects model-a (an explicit signal); the turn
    // fails over within itself.
    let first = h.openai("smart").send().await;
    assert_eq!(first.status, 200);
    assert_eq!(first.model_header, GOOD);
    let t = h.turn(&first.turn_id).await;
    assert_eq!(t["skipped"], json!([]), "tried, not skipped: {t}");
    // The next turn does not call it: it is passed over, and says so.
    let r = h.openai("smart").send().await;
    assert_eq!(r.status, 200);
    assert_eq!(r.model_header, GOOD);
    assert_eq!(r.degraded, "true");
    assert_eq!(c.requests_for("rate-limit:retry_after=30"), 1);
    let t = h.turn(&r.turn_id).await;
    let skipped = t["skipped"].as_array().expect("skipped");
    assert_eq!(skipped.len(), 1, "{t}");
    assert_eq!(skipped[0]["target"], "p/rate-limit:retry_after=30");
    assert_eq!(skipped[0]["skipped"], "ejected");
    assert_eq!(
        targets_of(t["timeline"].as_array().unwrap()),
        [format!("p/{GOOD}")]
    );
    assert_eq!(r.headers["x-hale-attempts"], "1");

    let (c, h) = one_provider_two_models("model-a").await;
    let (s, v) = h.post_json("/deployments/p/model-a/trip").await;
    assert_eq!(s, 200, "{v}");
    let r = h.openai("smart").send().await;
    assert_eq!(r.degraded, "true");
    let t = h.turn(&r.turn_id).await;
    assert_eq!(t["skipped"][0]["target"], "p/model-a", "{t}");
    assert_eq!(t["skipped"][0]["skipped"], "tripped");
    assert_eq!(c.requests_for("model-a"), 0);
}
