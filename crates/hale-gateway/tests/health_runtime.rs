//! Agent health and recovery through the gateway (issue #4): heartbeats,
//! the monitor's interventions (driven by `health::tick` with a fake `now`,
//! never by sleeping), operator decisions, checkpoints with corruption, and
//! replay instead of re-billing.

mod common;

use common::{Hale, ROUTE, chaos, config, openai};
use hale_core::event::EventKind;
use hale_gateway::health;
use hale_store::{CheckpointRecord, Write};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::time::{Duration, Instant};

async fn events(h: &Hale) -> Vec<hale_core::event::Event> {
    h.store.flush().await.expect("flush");
    h.store
        .events_after(0, 10_000, None)
        .await
        .expect("events")
        .into_iter()
        .map(|e| e.event)
        .collect()
}

fn of_kind(evs: &[hale_core::event::Event], k: EventKind) -> Vec<&hale_core::event::Event> {
    evs.iter().filter(|e| e.kind == k).collect()
}

async fn post(h: &Hale, path: &str, body: Value) -> (u16, Value) {
    let r = h
        .http
        .post(format!("{}{path}", h.base))
        .json(&body)
        .send()
        .await
        .expect("POST");
    let s = r.status().as_u16();
    (s, r.json().await.unwrap_or(Value::Null))
}

async fn post_raw(h: &Hale, path: &str, body: &str) -> (u16, Value, reqwest::header::HeaderMap) {
    let r = h
        .http
        .post(format!("{}{path}", h.base))
        .header("content-type", "application/json")
        .body(body.to_owned())
        .send()
        .await
        .expect("POST");
    let s = r.status().as_u16();
    let hd = r.headers().clone();
    (s, r.json().await.unwrap_or(Value::Null), hd)
}

/// Short health timings so a test walks the whole intervention ladder with
/// fake instants a few seconds apart.
fn short(cfg: &mut hale_core::config::Config) {
    cfg.health.stuck_after = Duration::from_secs(1);
    cfg.health.stale_after = Duration::from_secs(1);
    cfg.health.nudge_interval = Duration::from_secs(1);
    cfg.health.escalation_timeout = Duration::from_secs(1);
    cfg.health.nudge_max_attempts = 2;
    cfg.health.repeated_call_threshold = 3;
}

async fn call(h: &Hale, agent: &str, task: &str, text: &str) -> common::Reply {
    h.openai(ROUTE)
        .agent(agent)
        .header("x-hale-task", task)
        .user(text)
        .send()
        .await
}

#[tokio::test]
async fn heartbeat_endpoint_updates_health_shown_by_get_agent() {
    let c = chaos().await;
    let h = Hale::start(config(vec![openai("p", &c, "ok")])).await;
    let (s, _, _) = post_raw(
        &h,
        "/agents/hb/heartbeat",
        r#"{"task":"t1","phase":"search","progress":"3 of 10 pages","tokens":120,"errors":0}"#,
    )
    .await;
    assert_eq!(s, 204);
    health::tick(&h.gw, Instant::now());
    let (s, v) = h.get_json("/agents/hb").await;
    assert_eq!(s, 200);
    assert_eq!(v["health"]["state"], "healthy", "{v}");
    assert_eq!(v["health"]["current_task"], "t1");
    assert!(
        v["health"]["snapshot"]["since_heartbeat_ms"]
            .as_u64()
            .expect("ms")
            < 5_000
    );
    // Errors reported by heartbeats raise the error rate: degraded.
    post_raw(&h, "/agents/hb/heartbeat", r#"{"errors":20}"#).await;
    health::tick(&h.gw, Instant::now());
    let (_, v) = h.get_json("/agents/hb").await;
    assert_eq!(v["health"]["state"], "degraded", "{v}");
    assert_eq!(v["health"]["snapshot"]["signal"], "error_rate");
    let evs = events(&h).await;
    let changes = of_kind(&evs, EventKind::HealthStateChanged);
    assert_eq!(changes.len(), 1, "{changes:?}");
    assert_eq!(changes[0].payload["to"], "degraded");
    // A malformed heartbeat is refused.
    let (s, _, _) = post_raw(&h, "/agents/hb/heartbeat", r#"{"bogus":1}"#).await;
    assert_eq!(s, 400);
    h.stop().await;
}

#[tokio::test]
async fn stuck_agent_is_nudged_in_its_next_requests_then_escalated_then_terminated() {
    let c = chaos().await;
    let mut cfg = config(vec![openai("p", &c, "ok")]);
    short(&mut cfg);
    let h = Hale::start(cfg).await;
    // The same call three times: repeated identical calls → stuck.
    for _ in 0..3 {
        assert_eq!(
            call(&h, "loop", "t", "search the same thing").await.status,
            200
        );
    }
    let t0 = Instant::now();
    health::tick(&h.gw, t0);
    let (_, v) = h.get_json("/agents/loop").await;
    assert_eq!(v["health"]["state"], "stuck", "{v}");
    assert_eq!(v["health"]["snapshot"]["signal"], "repeated_calls");

    // Nudge 1 rides at the end of the next request.
    assert_eq!(
        call(&h, "loop", "t", "search the same thing").await.status,
        200
    );
    let last = c.last_requests().pop().expect("a request");
    let msgs = last["messages"].as_array().expect("messages");
    let tail = msgs.last().expect("a message");
    assert_eq!(tail["role"], "system", "{last}");
    assert!(
        tail["content"]
            .as_str()
            .unwrap_or("")
            .contains("Reminder 1 of 2"),
        "{tail}"
    );
    // Delivered once: the following request carries none.
    assert_eq!(
        call(&h, "loop", "t", "search the same thing").await.status,
        200
    );
    let last = c.last_requests().pop().expect("a request");
    assert_ne!(
        last["messages"].as_array().expect("m").last().expect("m")["role"],
        "system"
    );

    // Still stuck after the interval: nudge 2.
    health::tick(&h.gw, t0 + Duration::from_millis(1100));
    call(&h, "loop", "t", "search the same thing").await;
    let last = c.last_requests().pop().expect("a request");
    let tail = last["messages"]
        .as_array()
        .expect("m")
        .last()
        .cloned()
        .expect("m");
    assert!(
        tail["content"]
            .as_str()
            .unwrap_or("")
            .contains("Reminder 2 of 2"),
        "{tail}"
    );

    // Then an escalation, then (no decision) termination.
    health::tick(&h.gw, t0 + Duration::from_millis(2200));
    let evs = events(&h).await;
    assert_eq!(of_kind(&evs, EventKind::HealthEscalated).len(), 1);
    assert!(of_kind(&evs, EventKind::AgentTerminated).is_empty());
    health::tick(&h.gw, t0 + Duration::from_millis(3400));
    let r = call(&h, "loop", "t", "search the same thing").await;
    assert_eq!(r.status, 410, "{}", r.raw);
    assert_eq!(r.error_type(), "task_terminated");
    // Another task of the agent is not blocked.
    assert_eq!(call(&h, "loop", "other", "hello").await.status, 200);

    let evs = events(&h).await;
    let nudges = of_kind(&evs, EventKind::HealthNudgeSent);
    assert_eq!(nudges.len(), 2, "{nudges:?}");
    assert_eq!(nudges[0].payload["attempt"], 1);
    assert_eq!(nudges[1].payload["attempt"], 2);
    let term = of_kind(&evs, EventKind::AgentTerminated);
    assert_eq!(term.len(), 1);
    assert_eq!(term[0].task.as_deref(), Some("t"));
    assert!(
        term[0].payload["final_state"]["health"].is_object(),
        "{:?}",
        term[0].payload
    );
    let to: Vec<&str> = of_kind(&evs, EventKind::HealthStateChanged)
        .iter()
        .filter_map(|e| e.payload["to"].as_str())
        .collect();
    assert!(
        to.contains(&"stuck") && to.contains(&"terminated"),
        "{to:?}"
    );
    // Order: nudges, then the escalation, then the termination.
    let pos = |k: EventKind| evs.iter().rposition(|e| e.kind == k).expect("event");
    assert!(pos(EventKind::HealthNudgeSent) < pos(EventKind::HealthEscalated));
    assert!(pos(EventKind::HealthEscalated) < pos(EventKind::AgentTerminated));
    // The final state is in the agent's record.
    let rec = h.store.agent("loop").await.expect("agent").expect("stored");
    assert_eq!(rec.state["health"]["terminated_tasks"], json!(["t"]));
    h.stop().await;
}

#[tokio::test]
async fn silent_agent_becomes_stuck_and_is_escalated() {
    let c = chaos().await;
    let mut cfg = config(vec![openai("p", &c, "ok")]);
    short(&mut cfg);
    cfg.health.nudge_max_attempts = 0;
    let h = Hale::start(cfg).await;
    post_raw(
        &h,
        "/agents/quiet/heartbeat",
        r#"{"task":"t","progress":"started"}"#,
    )
    .await;
    let t0 = Instant::now();
    health::tick(&h.gw, t0);
    // Heartbeats stop: stuck after `stuck_after`, escalated at once (no nudges configured).
    health::tick(&h.gw, t0 + Duration::from_millis(1500));
    let evs = events(&h).await;
    let esc = of_kind(&evs, EventKind::HealthEscalated);
    assert_eq!(esc.len(), 1);
    assert_eq!(esc[0].task.as_deref(), Some("t"));
    h.stop().await;
}

/// An agent that heartbeats once and goes silent (no heartbeat, no call) is
/// judged at its deadline, with `evaluate_every` left at its default (5 s):
/// woken by the new agent, the monitor plans its next evaluation at the
/// rule's deadline (last heartbeat + `stale_after`), not at its next 5 s
/// tick, and the agent is degraded (stale) then. The plan is asserted
/// exactly (bracketed by the instants around the heartbeat); the event's
/// arrival only with a margin of a second, generous beside the
/// milliseconds the rule leaves (the old tick was up to 5 s late).
#[tokio::test]
async fn a_silent_agent_is_judged_at_its_deadline_not_at_the_next_tick() {
    let c = chaos().await;
    let mut cfg = config(vec![openai("p", &c, "ok")]);
    let stale = Duration::from_secs(2);
    cfg.health.stale_after = stale;
    let every = cfg.health.evaluate_every;
    assert_eq!(every, Duration::from_secs(5), "the default cadence");
    let h = Hale::start(cfg).await;
    let cancel = tokio_util::sync::CancellationToken::new();
    let monitor = tokio::spawn(health::monitor(&h.gw, cancel.clone()));
    // The monitor's first plan: nothing to judge, the cadence.
    while h.gw.health.planned_wake().is_none() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let before = Instant::now();
    let (s, _, _) = post_raw(&h, "/agents/silent/heartbeat", r#"{"task":"t"}"#).await;
    assert_eq!(s, 204);
    let after = Instant::now();
    // Woken by the new agent, the monitor plans its next evaluation at the
    // agent's deadline: the heartbeat's instant (between `before` and
    // `after`) + stale_after.
    let planned = loop {
        if let Some(p) = h.gw.health.planned_wake()
            && p >= before + stale
        {
            break p;
        }
        assert!(
            Instant::now() < after + every,
            "the monitor did not plan a wake at the agent's deadline: {:?}",
            h.gw.health.planned_wake()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert!(
        planned <= after + stale,
        "planned {:?} after the deadline (at most {:?} after the heartbeat)",
        planned - before,
        after - before + stale
    );
    // And at it, the agent is degraded (stale).
    let seen = loop {
        let evs = events(&h).await;
        let stale_changes = of_kind(&evs, EventKind::HealthStateChanged)
            .into_iter()
            .filter(|e| e.agent.as_deref() == Some("silent") && e.payload["to"] == "degraded")
            .count();
        if stale_changes == 1 {
            break Instant::now();
        }
        assert!(Instant::now() < after + stale + every, "not judged stale");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(
        seen < after + stale + Duration::from_secs(1),
        "judged stale {:?} after its deadline",
        seen - (after + stale)
    );
    cancel.cancel();
    monitor.await.expect("monitor");
    h.stop().await;
}

#[tokio::test]
async fn operator_decides_more_time_then_terminate() {
    let c = chaos().await;
    let mut cfg = config(vec![openai("p", &c, "ok")]);
    short(&mut cfg);
    cfg.health.nudge_max_attempts = 0;
    let h = Hale::start(cfg).await;
    for _ in 0..3 {
        call(&h, "op", "t", "same").await;
    }
    // No escalation yet: a decision is refused.
    let (s, v) = post(&h, "/agents/op/decide", json!({"decision": "more_time"})).await;
    assert_eq!(s, 409, "{v}");
    let t0 = Instant::now();
    health::tick(&h.gw, t0);
    assert_eq!(
        of_kind(&events(&h).await, EventKind::HealthEscalated).len(),
        1
    );
    let (s, v) = post(
        &h,
        "/agents/op/decide",
        json!({"decision": "more_time", "more_time_ms": 2000}),
    )
    .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["health"]["intervention"]["phase"], "watching", "{v}");
    // Within the extra time: nothing; after it: escalated again.
    health::tick(&h.gw, t0 + Duration::from_millis(1000));
    assert_eq!(
        of_kind(&events(&h).await, EventKind::HealthEscalated).len(),
        1
    );
    call(&h, "op", "t", "same").await;
    health::tick(&h.gw, t0 + Duration::from_millis(2500));
    assert_eq!(
        of_kind(&events(&h).await, EventKind::HealthEscalated).len(),
        2
    );
    let (s, v) = post(&h, "/agents/op/decide", json!({"decision": "terminate"})).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(call(&h, "op", "t", "same").await.status, 410);
    let (s, _) = post(&h, "/agents/op/decide", json!({"decision": "sideways"})).await;
    assert_eq!(s, 400);
    let evs = events(&h).await;
    let decisions: Vec<&str> = of_kind(&evs, EventKind::HealthDecision)
        .iter()
        .filter_map(|e| e.payload["decision"].as_str())
        .collect();
    assert_eq!(decisions, ["more_time", "terminate"]);
    assert_eq!(of_kind(&evs, EventKind::AgentTerminated).len(), 1);
    // Resume lifts the block.
    let (s, _) = h.post_json("/agents/op/resume").await;
    assert_eq!(s, 200);
    assert_eq!(call(&h, "op", "t", "fresh").await.status, 200);
    h.stop().await;
}

#[tokio::test]
async fn terminate_endpoint_blocks_the_task_with_410() {
    let c = chaos().await;
    let h = Hale::start(config(vec![openai("p", &c, "ok")])).await;
    assert_eq!(call(&h, "term", "job-1", "hi").await.status, 200);
    let (s, v) = post(
        &h,
        "/agents/term/terminate",
        json!({"reason": "operator said so"}),
    )
    .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["task"], "job-1");
    let r = call(&h, "term", "job-1", "hi").await;
    assert_eq!(r.status, 410);
    let (_, v) = h.get_json("/agents/term/tasks/job-1").await;
    assert_eq!(v["terminated"], true);
    let evs = events(&h).await;
    let t = of_kind(&evs, EventKind::AgentTerminated);
    assert_eq!(t.len(), 1);
    assert_eq!(t[0].payload["reason"], "operator said so");
    h.stop().await;
}

fn sha(b: &[u8]) -> String {
    hex::encode(Sha256::digest(b))
}

#[tokio::test]
async fn checkpoints_are_hashed_and_a_corrupt_one_is_reported_and_never_served() {
    let c = chaos().await;
    let mut cfg = config(vec![openai("p", &c, "ok")]);
    cfg.recovery.backoff = vec![Duration::ZERO];
    let h = Hale::start(cfg).await;
    let base = "/agents/cp/tasks/t/checkpoints";
    let (s, one, _) = post_raw(&h, base, r#"{"step":1}"#).await;
    assert_eq!(s, 201, "{one}");
    assert_eq!(one["sha256"], sha(br#"{"step":1}"#));
    assert_eq!(one["parent"], Value::Null);
    let (s, two, _) = post_raw(&h, base, r#"{"step":2}"#).await;
    assert_eq!(s, 201);
    assert_eq!(two["parent"], one["id"], "the newest is the default parent");
    // A body that is not JSON is refused.
    let (s, _, _) = post_raw(&h, base, "not json").await;
    assert_eq!(s, 400);
    // GET one: the body, with its hash.
    let r = h
        .http
        .get(format!(
            "{}{base}/{}",
            h.base,
            two["id"].as_str().expect("id")
        ))
        .send()
        .await
        .expect("GET");
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.headers()["x-hale-checkpoint-sha256"],
        sha(br#"{"step":2}"#).as_str()
    );
    assert_eq!(r.json::<Value>().await.expect("json"), json!({"step": 2}));

    // A corrupt row, newest, written straight to the store (hash does not match).
    let bad = CheckpointRecord {
        id: "ZZZZCORRUPT".into(),
        agent: "cp".into(),
        task: "t".into(),
        parent: two["id"].as_str().map(str::to_owned),
        body: br#"{"step":3}"#.to_vec(),
        sha256: sha(br#"{"step":999}"#),
        created_ms: two["created_ms"].as_u64().expect("ms") + 1000,
    };
    h.store
        .commit(vec![Write::Checkpoint(bad)])
        .await
        .expect("commit");
    let (s, list) = h.get_json(base).await;
    assert_eq!(s, 200);
    let items = list["checkpoints"].as_array().expect("list");
    assert_eq!(items.len(), 3);
    assert_eq!(items[0]["id"], "ZZZZCORRUPT");
    assert_eq!(items[0]["valid"], false);
    assert!(items[0].get("body").is_none());
    assert_eq!(items[1]["valid"], true);
    let (s, v) = h.get_json(&format!("{base}/ZZZZCORRUPT")).await;
    assert_eq!(s, 409, "{v}");
    assert_eq!(v["error"]["type"], "checkpoint_corrupt");
    let (s, latest) = h.get_json(&format!("{base}/latest")).await;
    assert_eq!(s, 200);
    assert_eq!(latest, json!({"step": 2}));
    // Reported once, however often it is seen.
    let corrupt = of_kind(&events(&h).await, EventKind::CheckpointCorrupt).len();
    assert_eq!(corrupt, 1);

    // Recovery skips it for its valid parent.
    let (s, plan) = post(&h, "/agents/cp/tasks/t/recover", json!({"cause": "crash"})).await;
    assert_eq!(s, 200, "{plan}");
    assert_eq!(plan["action"], "restart");
    assert_eq!(plan["checkpoint"]["id"], two["id"]);
    assert_eq!(plan["checkpoint"]["body"], json!({"step": 2}));
    assert_eq!(plan["skipped"], json!(["ZZZZCORRUPT"]));
    let evs = events(&h).await;
    assert_eq!(of_kind(&evs, EventKind::RecoveryStarted).len(), 1);
    assert_eq!(of_kind(&evs, EventKind::AgentRestarting).len(), 1);
    assert_eq!(
        of_kind(&evs, EventKind::CheckpointCorrupt).len(),
        2,
        "skipping it is reported too"
    );
    h.stop().await;
}

#[tokio::test]
async fn recovery_limits_end_in_human_review_with_an_escalation() {
    let c = chaos().await;
    let mut cfg = config(vec![openai("p", &c, "ok")]);
    cfg.recovery.backoff = vec![Duration::ZERO];
    cfg.recovery.max_per_task = 2;
    let h = Hale::start(cfg).await;
    for _ in 0..2 {
        let (_, plan) = post(&h, "/agents/lim/tasks/t/recover", json!({})).await;
        assert_eq!(plan["action"], "restart", "{plan}");
        assert_eq!(plan["from"], "scratch");
    }
    let (_, plan) = post(&h, "/agents/lim/tasks/t/recover", json!({})).await;
    assert_eq!(plan["action"], "stop", "{plan}");
    let evs = events(&h).await;
    assert_eq!(of_kind(&evs, EventKind::RecoveryFailed).len(), 1);
    let esc = of_kind(&evs, EventKind::HealthEscalated);
    assert_eq!(esc.len(), 1);
    assert_eq!(esc[0].payload["human_review"], true);
    h.stop().await;
}

#[tokio::test]
async fn backoff_makes_recovery_wait() {
    let c = chaos().await;
    let mut cfg = config(vec![openai("p", &c, "ok")]);
    cfg.recovery.backoff = vec![Duration::from_secs(30)];
    let h = Hale::start(cfg).await;
    let (_, plan) = post(&h, "/agents/w/tasks/t/recover", json!({})).await;
    assert_eq!(plan["action"], "wait", "{plan}");
    let ms = plan["retry_after_ms"].as_u64().expect("ms");
    assert!(ms > 25_000 && ms <= 30_000, "{ms}");
    h.stop().await;
}

/// Issue 13: under the default `journal.bodies: needed` a task nobody
/// supervises keeps no bodies, so its recovery re-bills instead of replaying;
/// `journal.bodies: all` keeps every body as before.
#[tokio::test]
async fn journal_bodies_decide_whether_an_unsupervised_task_can_be_replayed() {
    use hale_core::config::JournalBodies;
    for (bodies, replayed) in [(JournalBodies::Needed, false), (JournalBodies::All, true)] {
        let c = chaos().await;
        let mut cfg = config(vec![openai("p", &c, "ok")]);
        cfg.recovery.backoff = vec![Duration::ZERO];
        cfg.journal.bodies = bodies;
        let h = Hale::start(cfg).await;
        let first = call(&h, "ub", "t", "what is 2+2?").await;
        assert_eq!(first.status, 200);
        h.store.flush().await.expect("flush");
        let (_, plan) = post(&h, "/agents/ub/tasks/t/recover", json!({})).await;
        assert_eq!(plan["action"], "restart", "{plan}");
        let again = call(&h, "ub", "t", "what is 2+2?").await;
        assert_eq!(again.status, 200);
        assert_eq!(
            again.headers.get("x-hale-replayed").is_some(),
            replayed,
            "{bodies:?}"
        );
        let upstream = if replayed { 1 } else { 2 };
        assert_eq!(c.stats().requests_total, upstream, "{bodies:?}");
        h.stop().await;
    }
}

#[tokio::test]
async fn a_recovered_task_is_answered_from_the_journal_without_a_provider_call() {
    let c = chaos().await;
    let mut cfg = config(vec![openai("p", &c, "ok")]);
    cfg.recovery.backoff = vec![Duration::ZERO];
    let h = Hale::start(cfg).await;
    // A supervisor (`hale run`) looks the task up before it starts the
    // agent; from then on the journal keeps the task's answers (issue 13:
    // `journal.bodies: needed`, the default).
    let (status, _) = h.get_json("/agents/rp/tasks/t").await;
    assert_eq!(status, 200);
    let first = call(&h, "rp", "t", "what is 2+2?").await;
    assert_eq!(first.status, 200);
    // Not recovered: the same request is sent upstream again.
    let again = call(&h, "rp", "t", "what is 2+2?").await;
    assert_eq!(again.status, 200);
    assert!(again.headers.get("x-hale-replayed").is_none());
    assert_eq!(c.stats().requests_total, 2);
    h.store.flush().await.expect("flush");

    let (_, plan) = post(&h, "/agents/rp/tasks/t/recover", json!({})).await;
    assert_eq!(plan["action"], "restart", "{plan}");
    let replayed = call(&h, "rp", "t", "what is 2+2?").await;
    assert_eq!(replayed.status, 200);
    assert_eq!(replayed.headers["x-hale-replayed"], "true");
    assert_eq!(replayed.text, first.text);
    assert_eq!(c.stats().requests_total, 2, "no provider call for a replay");
    // A new request of the recovered task goes upstream.
    let fresh = call(&h, "rp", "t", "and 3+3?").await;
    assert!(fresh.headers.get("x-hale-replayed").is_none());
    assert_eq!(c.stats().requests_total, 3);
    // Another task is not replayed.
    call(&h, "rp", "other", "what is 2+2?").await;
    assert_eq!(c.stats().requests_total, 4);
    let evs = events(&h).await;
    let done = of_kind(&evs, EventKind::RecoveryCompleted);
    assert_eq!(done.len(), 1);
    assert_eq!(done[0].payload["first_success"], "replayed");
    h.stop().await;
}

/// Issue 13: fake times one minute on, past `SHED_AFTER_IDLE`.
fn a_minute_on() -> (u64, Instant) {
    let d = hale_core::memory::SHED_AFTER_IDLE + Duration::from_secs(1);
    (
        hale_gateway::state::wall_ms() + d.as_millis() as u64,
        Instant::now() + d,
    )
}

/// Waits until the store holds `agent`'s row with `turns` turns.
async fn stored_turns(h: &Hale, agent: &str, turns: u64) {
    for _ in 0..500 {
        h.store.flush().await.expect("flush");
        let n = h
            .store
            .agent(agent)
            .await
            .expect("agent")
            .map_or(0, |a| a.turns);
        if n >= turns {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{agent}: the store never counted {turns} turns");
}

/// Issue 13: shedding an agent from memory does not lift its terminated
/// task: the block comes back with its row.
#[tokio::test]
async fn a_shed_agent_keeps_its_terminated_task_blocked() {
    let c = chaos().await;
    let mut cfg = config(vec![openai("p", &c, "ok")]);
    cfg.memory.idle_agents = 0;
    let h = Hale::start(cfg).await;
    assert_eq!(call(&h, "shed-term", "job-1", "hi").await.status, 200);
    let (s, v) = post(
        &h,
        "/agents/shed-term/terminate",
        json!({"reason": "enough"}),
    )
    .await;
    assert_eq!(s, 200, "{v}");
    stored_turns(&h, "shed-term", 1).await;
    // Just terminated: kept (its final state is still being written).
    let shed = h.gw.shed_idle(a_minute_on().0, Instant::now());
    assert_eq!(shed.agents, 0);
    let (ms, at) = a_minute_on();
    assert_eq!(h.gw.shed_idle(ms, at).agents, 1);
    assert!(!h.gw.agents.lock().expect("lock").contains_key("shed-term"));
    assert!(!h.gw.health.knows("shed-term"));
    let r = call(&h, "shed-term", "job-1", "hi").await;
    assert_eq!(r.status, 410, "{}", r.raw);
    assert_eq!(call(&h, "shed-term", "job-2", "hi").await.status, 200);
    h.stop().await;
}

/// Issue 13: an agent shed from memory that then stays silent is still
/// judged: the monitor reads it back from the store once it has been silent
/// for `stuck_after` and it goes stuck and is nudged as if it had stayed.
/// A paused agent is not read back; each silence is read once.
#[tokio::test]
async fn an_agent_silent_while_shed_is_judged_from_the_store() {
    let c = chaos().await;
    let mut cfg = config(vec![openai("p", &c, "ok")]);
    cfg.memory.idle_agents = 0;
    let stuck_after = cfg.health.stuck_after;
    let h = Hale::start(cfg).await;
    let start_ms = hale_gateway::state::wall_ms();
    let mut cursor = health::silence_cursor(&h.gw.cfg, start_ms);
    assert_eq!(call(&h, "gone-quiet", "t", "hi").await.status, 200);
    assert_eq!(call(&h, "held", "t", "hi").await.status, 200);
    let (s, _) = post(&h, "/agents/held/pause", json!({})).await;
    assert_eq!(s, 200);
    stored_turns(&h, "gone-quiet", 1).await;
    stored_turns(&h, "held", 1).await;
    let (ms, at) = a_minute_on();
    assert_eq!(h.gw.shed_idle(ms, at).agents, 1, "the paused one stays");
    assert!(!h.gw.health.knows("gone-quiet"));

    // Before `stuck_after`: nothing to read back.
    let n = h.gw.monitor().watch_silent(&mut cursor, ms, at).await;
    assert_eq!(n, 0);
    // Silent for `stuck_after`: read back and judged.
    let later = stuck_after + Duration::from_secs(2);
    let (ms, at) = (start_ms + later.as_millis() as u64, Instant::now() + later);
    let n = h.gw.monitor().watch_silent(&mut cursor, ms, at).await;
    assert_eq!(n, 1);
    assert!(h.gw.health.knows("gone-quiet"));
    health::tick(&h.gw, at);
    let evs = events(&h).await;
    let stuck: Vec<_> = of_kind(&evs, EventKind::HealthStateChanged)
        .into_iter()
        .filter(|e| e.agent.as_deref() == Some("gone-quiet") && e.payload["to"] == "stuck")
        .collect();
    assert_eq!(stuck.len(), 1, "{evs:?}");
    assert_eq!(
        stuck[0].payload["signal"], "no_progress",
        "{}",
        stuck[0].payload
    );
    // Its nudge waits for its next request.
    let r = call(&h, "gone-quiet", "t", "back").await;
    assert_eq!(r.status, 200);
    let evs = events(&h).await;
    assert_eq!(of_kind(&evs, EventKind::HealthNudgeSent).len(), 1);
    // The same silence is not read twice.
    let n = h.gw.monitor().watch_silent(&mut cursor, ms + 1, at).await;
    assert_eq!(n, 0);
    h.stop().await;
}
