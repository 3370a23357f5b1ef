//! End to end, what wraps the attempt loop: the agent gate (pause after
//! failed turns, resume), idempotency keys, the evidence headers, `/metrics`,
//! and the turn journal surviving a restart.

mod common;

use common::*;
use hale_core::config::{ProviderKind, Target};
use std::time::Duration;

/// Two routes on one chaos server: `broken` (an auth failure, every time)
/// and `healthy`.
async fn gate_world() -> (hale_chaos::ChaosHandle, Hale) {
    let c = chaos().await;
    let mut cfg = config(vec![
        openai("bad", &c, "auth"),
        anthropic("good", &c, "fine"),
    ]);
    let t = |p: &str, m: &str| Target {
        provider: p.into(),
        model: m.into(),
    };
    cfg.routes.insert("broken".into(), vec![t("bad", "auth")]);
    cfg.routes.insert("healthy".into(), vec![t("good", "fine")]);
    let h = Hale::start(cfg).await;
    (c, h)
}

/// 3 failed turns pause the agent: the 4th gets 423 agent_paused without an
/// upstream call; `GET /agents/{id}` shows counters, breakers and cooldowns;
/// `POST /agents/{id}/resume` lets it be served again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_failed_turns_pause_the_agent_without_upstream_calls_until_resumed() {
    let (c, h) = gate_world().await;
    let max = h.gw.cfg.self_healing.max_consecutive_failures;
    assert_eq!(max, 3);
    for i in 0..max {
        let r = h.openai("broken").agent("ag").send().await;
        assert_eq!(r.status, 503, "turn {i}: {}", r.raw);
        assert_eq!(r.error_type(), "all_providers_failed");
    }
    let calls = c.requests_for("auth");
    assert_eq!(calls, u64::from(max));

    for stream in MODES {
        let r = h.openai("healthy").agent("ag").stream(stream).send().await;
        assert_eq!(r.status, 423, "{}", r.raw);
        assert_eq!(r.error_type(), "agent_paused");
        let a = h
            .anthropic("healthy")
            .agent("ag")
            .stream(stream)
            .send()
            .await;
        assert_eq!(a.status, 423, "{}", a.raw);
    }
    assert_eq!(
        c.requests_for("auth"),
        calls,
        "a paused agent costs no upstream call"
    );
    assert_eq!(c.requests_for("fine"), 0);
    // Another agent is not affected.
    let other = h.openai("healthy").agent("other").send().await;
    other.assert_complete(&full());

    let (s, v) = h.get_json("/agents/ag").await;
    assert_eq!(s, 200);
    assert_eq!(v["state"], "paused", "{v}");
    assert_eq!(v["consecutive_failures"], 3);
    assert_eq!(v["counters"]["turns"], 3);
    assert_eq!(v["counters"]["failed_turns"], 3);
    // Breakers are per agent × deployment; an auth failure ejects every
    // deployment of the provider (its key), shown on the deployment.
    assert!(v["breakers"]["bad/auth"].is_object(), "breakers: {v}");
    let d = v["deployments"]
        .as_array()
        .and_then(|l| l.iter().find(|d| d["deployment"] == "bad/auth"))
        .cloned()
        .unwrap_or_else(|| panic!("deployment listed: {v}"));
    assert_eq!(d["health"], "ejected", "{d}");
    assert_eq!(d["ejection_class"], "auth", "{d}");
    assert!(d["ejected_remaining_ms"].as_u64().unwrap_or(0) > 0, "{d}");
    assert_eq!(v["pause"]["by"], "auto", "{v}");

    let (s, v) = h.post_json("/agents/ag/resume").await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["state"], "active");
    assert_eq!(v["consecutive_failures"], 0);
    for stream in MODES {
        let r = h.openai("healthy").agent("ag").stream(stream).send().await;
        r.assert_complete(&full());
        assert_eq!(r.provider, "good");
    }
}

/// A repeated `Idempotency-Key` returns the stored response — same status,
/// same body, evidence — without a provider call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idempotency_key_replays_the_stored_response_without_a_provider_call() {
    for stream in MODES {
        let c = chaos().await;
        let h = Hale::start(config(vec![openai("p", &c, "m")])).await;
        let key = format!("key-{stream}");
        let first = h
            .openai(ROUTE)
            .stream(stream)
            .header("idempotency-key", &key)
            .send()
            .await;
        first.assert_complete(&full());
        assert_eq!(c.requests_for("m"), 1);
        let second = h
            .openai(ROUTE)
            .stream(stream)
            .header("idempotency-key", &key)
            .send()
            .await;
        assert_eq!(second.status, 200);
        assert_eq!(second.raw, first.raw, "stream={stream}: same body");
        assert_eq!(second.turn_id, first.turn_id, "same evidence");
        assert_eq!(second.provider, first.provider);
        assert_eq!(
            second
                .headers
                .get("x-hale-idempotent-replay")
                .map(|v| v.as_bytes()),
            Some(&b"true"[..])
        );
        assert_eq!(c.requests_for("m"), 1, "no provider call for the replay");
        // Another key is a new turn.
        let third = h
            .openai(ROUTE)
            .stream(stream)
            .header("idempotency-key", "other")
            .send()
            .await;
        third.assert_complete(&full());
        assert_ne!(third.turn_id, first.turn_id);
        assert_eq!(c.requests_for("m"), 2);
    }
}

/// A concurrent duplicate waits for the first and gets its response; the
/// provider is called once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idempotency_concurrent_duplicate_waits_for_the_first() {
    let c = chaos().await;
    let model = "slow-first-token:ms=1500";
    let h = Hale::start(config(vec![openai("p", &c, model)])).await;
    let a = h.openai(ROUTE).header("idempotency-key", "same").send();
    let b = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        h.openai(ROUTE)
            .header("idempotency-key", "same")
            .send()
            .await
    };
    let (a, b) = tokio::join!(a, b);
    a.assert_complete(&full());
    b.assert_complete(&full());
    assert_eq!(a.raw, b.raw);
    assert_eq!(a.turn_id, b.turn_id);
    assert!(
        b.elapsed >= Duration::from_millis(1000),
        "the duplicate waited: {:?}",
        b.elapsed
    );
    assert_eq!(c.requests_for(model), 1);
}

/// Evidence headers on a first-choice success, a failover success and an error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evidence_headers_on_success_and_error() {
    let c = chaos().await;
    let mut cfg = config(vec![
        openai("first", &c, "fine"),
        anthropic("second", &c, BACKUP_MODEL),
    ]);
    let t = |p: &str, m: &str| Target {
        provider: p.into(),
        model: m.into(),
    };
    cfg.routes.insert(
        "failing".into(),
        vec![t("first", "auth"), t("second", "error-503")],
    );
    cfg.routes.insert(
        "failover".into(),
        vec![t("first", "auth"), t("second", BACKUP_MODEL)],
    );
    cfg.retry.server_error.initial = Duration::from_millis(20);
    let h = Hale::start(cfg).await;

    for stream in MODES {
        let r = h.openai(ROUTE).stream(stream).send().await;
        r.assert_complete(&full());
        assert!(!r.turn_id.is_empty());
        assert_eq!(r.provider, "first");
        assert_eq!(r.model_header, "fine");
        assert_eq!(r.attempts, "1");
        assert_eq!(r.degraded, "false");
        assert_eq!(
            r.headers.get("x-hale-compacted").map(|v| v.as_bytes()),
            Some(&b"false"[..])
        );
    }
    let r = h.anthropic("failover").send().await;
    r.assert_complete(&full());
    assert_eq!(r.provider, "second");
    assert_eq!(r.model_header, BACKUP_MODEL);
    assert_eq!(r.attempts, "2");
    assert_eq!(r.degraded, "true");

    let e = h.openai("failing").send().await;
    assert_eq!(e.status, 503, "{}", e.raw);
    assert!(!e.turn_id.is_empty(), "x-hale-turn-id on an error");
    let n: usize = e.attempts.parse().expect("x-hale-attempts on an error");
    assert!(n >= 2, "{n}");
    assert_eq!(e.json["error"]["hale"]["turn_id"], e.turn_id.as_str());
    assert_eq!(
        e.json["error"]["hale"]["timeline"].as_array().map(Vec::len),
        Some(n)
    );
    let turn = h.turn(&e.turn_id).await;
    assert_eq!(turn["status"], "failed");
}

/// `/metrics` exposes turns, attempts by class and target, breaker states and cooldowns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_expose_turns_attempts_by_class_and_target_breakers_and_deployment_health() {
    let (_c, h) = pair("error-503", ProviderKind::Anthropic, |cfg| {
        cfg.retry.server_error.initial = Duration::from_millis(20);
    })
    .await;
    let r = h.openai(ROUTE).send().await;
    r.assert_complete(&full());
    let (s, m) = h.get_text("/metrics").await;
    assert_eq!(s, 200);
    let has = |needles: &[&str]| {
        m.lines()
            .any(|l| !l.starts_with('#') && needles.iter().all(|n| l.contains(n)))
    };
    assert!(has(&["hale_turns"]), "{m}");
    assert!(
        has(&["hale_attempts", "primary/error-503", "overloaded"]),
        "{m}"
    );
    assert!(
        has(&["hale_attempts", &format!("backup/{BACKUP_MODEL}"), "ok"]),
        "{m}"
    );
    assert!(
        has(&[
            "breaker",
            "deployment=\"primary/error-503\"",
            "state=\"closed\""
        ]),
        "{m}"
    );
    assert!(
        has(&[
            "deployment_health",
            "deployment=\"primary/error-503\"",
            "state=\"ejected\"",
            " 1"
        ]),
        "{m}"
    );
    let cooldown_line = m
        .lines()
        .find(|l| {
            !l.starts_with('#')
                && l.contains("deployment_ejected_seconds")
                && l.contains("deployment=\"primary/error-503\"")
        })
        .expect("ejection line");
    let secs: f64 = cooldown_line
        .rsplit(' ')
        .next()
        .and_then(|v| v.parse().ok())
        .expect("value");
    assert!(secs > 0.0, "{cooldown_line}");
}

/// The journal survives a restart: a turn is visible through `GET /turns/{id}`
/// after a new gateway reopens the same data directory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn journal_survives_a_restart() {
    let c = chaos().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = || {
        config(vec![
            openai("primary", &c, "error-500:times=1"),
            anthropic("backup", &c, BACKUP_MODEL),
        ])
    };
    let h = Hale::start_in(cfg(), dir.path()).await;
    let streamed = h.openai(ROUTE).stream(true).agent("journaled").send().await;
    streamed.assert_complete(&full());
    let plain = h.anthropic(ROUTE).agent("journaled").send().await;
    plain.assert_complete(&full());
    let before = h.turn(&streamed.turn_id).await;
    h.stop().await;

    let h2 = Hale::start_in(cfg(), dir.path()).await;
    for id in [&streamed.turn_id, &plain.turn_id] {
        let t = h2.turn(id).await;
        assert_eq!(t["status"], "succeeded", "{t}");
        assert_eq!(t["agent"], "journaled");
    }
    let after = h2.turn(&streamed.turn_id).await;
    assert_eq!(after["timeline"], before["timeline"]);
    assert_eq!(
        classes_of(after["timeline"].as_array().expect("timeline")),
        ["overloaded", "ok"]
    );
    let (_, agent) = h2.get_json("/agents/journaled").await;
    assert_eq!(agent["counters"]["turns"], 2, "{agent}");
    h2.stop().await;
}

/// Issue 13: the breakers of agents that came and went (one per agent ×
/// deployment) leave memory with the idle state once at rest — no call for
/// their window — and not before; an agent's next call builds a new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn breakers_at_rest_leave_memory_with_the_idle_state() {
    let c = chaos().await;
    let cfg = config(vec![openai("primary", &c, "fine")]);
    let window = cfg.self_healing.circuit_breaker.window;
    let h = Hale::start(cfg).await;
    for agent in ["came-1", "came-2", "came-3"] {
        h.openai(ROUTE)
            .agent(agent)
            .send()
            .await
            .assert_complete(&full());
    }
    assert_eq!(h.gw.deployments.breakers_held(), 3);
    let (_, text) = h.get_text("/metrics").await;
    assert!(text.contains("hale_breakers_held 3"), "{text}");
    let now_ms = hale_gateway::state::wall_ms();
    let start = std::time::Instant::now();
    // Within their window: still counting calls, kept.
    let shed = h.gw.shed_idle(now_ms, start + window / 2);
    assert_eq!(shed.breakers, 0);
    assert_eq!(h.gw.deployments.breakers_held(), 3);
    // A window with no call: at rest, dropped by the sweep.
    let shed =
        h.gw.shed_idle(now_ms, start + window + hale_core::memory::SWEEP_EVERY);
    assert_eq!(shed.breakers, 3);
    assert_eq!(h.gw.deployments.breakers_held(), 0);
    let (_, text) = h.get_text("/metrics").await;
    assert!(text.contains("hale_breakers_held 0"), "{text}");
    h.openai(ROUTE)
        .agent("came-1")
        .send()
        .await
        .assert_complete(&full());
    assert_eq!(h.gw.deployments.breakers_held(), 1);
}

/// Issue 13: a request refused before its turn (here by a route whose
/// provider is not configured) by an agent hale has never seen leaves
/// nothing in memory: a flood of such requests under ever new agent names
/// must not pile up entries that nothing sheds (an agent never seen is
/// never shed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_request_of_a_new_agent_leaves_nothing_in_memory() {
    let c = chaos().await;
    let mut cfg = config(vec![openai("p", &c, "fine")]);
    cfg.routes.insert(
        "broken".into(),
        vec![Target {
            provider: "nowhere".into(),
            model: "fine".into(),
        }],
    );
    let h = Hale::start(cfg).await;
    let before = h.gw.agents.lock().expect("lock").len();
    for k in 0..20 {
        let reply = h.openai("broken").agent(&format!("ghost-{k}")).send().await;
        assert_eq!(reply.status, 400, "{}", reply.raw);
    }
    assert_eq!(h.gw.agents.lock().expect("lock").len(), before);
    // A served turn holds the agent, as before.
    h.openai(ROUTE)
        .agent("ghost-0")
        .send()
        .await
        .assert_complete(&full());
    assert!(h.gw.agents.lock().expect("lock").contains_key("ghost-0"));
    h.stop().await;
}

/// Waits (up to 2 s) until the store's row of `agent` counts `turns` turns:
/// rows are group-committed, a little after the turn's answer.
async fn wait_stored_turns(h: &Hale, agent: &str, turns: u64) {
    let mut stored = 0;
    for _ in 0..200 {
        stored = h
            .store
            .agent(agent)
            .await
            .expect("store")
            .map_or(0, |a| a.turns);
        if stored == turns {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(stored, turns, "{agent}'s row");
}

/// Issue 13: an idle agent beyond `memory.idle_agents` leaves memory, and
/// its row is read back before its next admin call or turn, so its counters
/// go on from the store instead of restarting at zero.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forgotten_agent_is_read_back_with_its_counters() {
    let c = chaos().await;
    let mut cfg = config(vec![openai("primary", &c, "fine")]);
    cfg.memory.idle_agents = 0;
    let h = Hale::start(cfg).await;
    for _ in 0..2 {
        h.openai(ROUTE)
            .agent("idle-one")
            .send()
            .await
            .assert_complete(&full());
    }
    // The turns' agent row is group-committed: wait until the store has it.
    wait_stored_turns(&h, "idle-one", 2).await;
    let idle = hale_core::memory::SHED_AFTER_IDLE;
    let forget = |h: &Hale| {
        let later = hale_gateway::state::wall_ms() + idle.as_millis() as u64;
        let shed = h.gw.shed_idle(later, std::time::Instant::now() + idle);
        assert_eq!(shed.agents, 1);
        assert!(!h.gw.health.knows("idle-one"), "its health slot went too");
        assert!(
            !h.gw.agents.lock().expect("lock").contains_key("idle-one"),
            "{:?}",
            h.gw.agents.lock().expect("lock").get("idle-one")
        );
    };
    forget(&h);
    // The list still shows it, from its row.
    let (status, list) = h.get_json("/agents").await;
    assert_eq!(status, 200, "{list}");
    let listed = list["agents"]
        .as_array()
        .expect("agents")
        .iter()
        .find(|a| a["id"] == "idle-one")
        .cloned()
        .expect("a shed agent is listed");
    assert_eq!(listed["counters"]["turns"], 2, "{listed}");
    assert!(
        !h.gw.agents.lock().expect("lock").contains_key("idle-one"),
        "listing does not bring it back"
    );
    let (status, agent) = h.get_json("/agents/idle-one").await;
    assert_eq!(status, 200, "{agent}");
    assert_eq!(agent["counters"]["turns"], 2, "{agent}");
    forget(&h);
    h.openai(ROUTE)
        .agent("idle-one")
        .send()
        .await
        .assert_complete(&full());
    let (_, agent) = h.get_json("/agents/idle-one").await;
    assert_eq!(agent["counters"]["turns"], 3, "{agent}");
    h.stop().await;
}

/// Issue 13: `GET /agents` answers a page, never the whole store (which
/// holds every agent ever seen). 45 agents ran turns and all but 12 were
/// shed to the store; one held agent is paused; one agent is only named by
/// the config. Following `next` with a small page lists each of the 46
/// once, in byte order, memory and store merged; `state=paused` lists only
/// the paused one; a bad `limit`, `state` or parameter is a 400 in the
/// API's error shape.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_list_comes_in_pages_each_agent_once_from_memory_and_store() {
    let c = chaos().await;
    let mut cfg = config(vec![openai("primary", &c, "fine")]);
    cfg.memory.idle_agents = 0;
    cfg.agents
        .insert("cfg-only".into(), hale_core::config::AgentConfig::default());
    let h = Hale::start(cfg).await;
    let ids: Vec<String> = (0..45).map(|k| format!("pg-{k:02}")).collect();
    for id in &ids {
        h.openai(ROUTE)
            .agent(id)
            .send()
            .await
            .assert_complete(&full());
    }
    for id in &ids {
        wait_stored_turns(&h, id, 1).await;
    }
    let idle = hale_core::memory::SHED_AFTER_IDLE;
    let later = hale_gateway::state::wall_ms() + idle.as_millis() as u64;
    let shed = h.gw.shed_idle(later, std::time::Instant::now() + idle);
    assert_eq!(shed.agents, 45, "every agent left memory");
    // A few come back (held again), one of them paused by an operator.
    for id in ids.iter().step_by(4) {
        h.openai(ROUTE)
            .agent(id)
            .send()
            .await
            .assert_complete(&full());
    }
    let (status, v) = h.post_json("/agents/pg-08/pause").await;
    assert_eq!(status, 200, "{v}");

    let mut want: Vec<String> = ids.clone();
    want.push("cfg-only".into());
    want.sort();
    for limit in [1, 7, 100] {
        let mut seen: Vec<String> = Vec::new();
        let mut after: Option<String> = None;
        for _ in 0..=want.len() {
            let path = match &after {
                Some(a) => format!("/agents?limit={limit}&after={a}"),
                None => format!("/agents?limit={limit}"),
            };
            let (status, page) = h.get_json(&path).await;
            assert_eq!(status, 200, "{page}");
            let list = page["agents"].as_array().expect("agents");
            assert!(list.len() <= limit, "{limit}: {}", list.len());
            for a in list {
                seen.push(a["id"].as_str().expect("id").to_owned());
                // A shed agent shows its stored counters.
                if a["id"] != "cfg-only" {
                    assert!(a["counters"]["turns"].as_u64() >= Some(1), "{a}");
                }
            }
            match page["next"].as_str() {
                Some(n) => after = Some(n.to_owned()),
                None => break,
            }
        }
        assert_eq!(seen, want, "limit {limit}");
    }
    // Without a limit: the default page.
    let (_, page) = h.get_json("/agents").await;
    assert_eq!(
        page["agents"].as_array().expect("agents").len(),
        want.len().min(hale_core::pages::PAGE_DEFAULT)
    );
    let (_, paused) = h.get_json("/agents?state=paused").await;
    let paused: Vec<&str> = paused["agents"]
        .as_array()
        .expect("agents")
        .iter()
        .map(|a| a["id"].as_str().expect("id"))
        .collect();
    assert_eq!(paused, ["pg-08"]);
    let (_, active) = h.get_json("/agents?state=active&limit=1000").await;
    assert_eq!(
        active["agents"].as_array().expect("agents").len(),
        want.len() - 1
    );
    assert!(active["next"].is_null(), "{}", active["next"]);
    // Listing brings no shed agent back into memory.
    assert!(!h.gw.holds("pg-01"));
    for bad in [
        "limit=0",
        "limit=1001",
        "limit=ten",
        "state=stuck",
        "page=2",
    ] {
        let (status, v) = h.get_json(&format!("/agents?{bad}")).await;
        assert_eq!(status, 400, "{bad}: {v}");
        assert!(
            v["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty()),
            "{bad}: {v}"
        );
    }
    h.stop().await;
}

/// Issue 13: an agent that ran turns at machine speed and stopped leaves
/// memory seconds after its last turn, and its tasks with it; an agent
/// whose pace is not known yet (one turn) stays the minute; and a turn in
/// flight holds its agent however long it runs (here past the minute, on
/// the sweep's clock), which leaves once the turn is over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fast_agent_leaves_in_seconds_a_slow_one_in_a_minute_and_a_turn_in_flight_holds_its_agent()
 {
    use hale_core::memory::{SHED_AFTER_IDLE, SHED_AFTER_IDLE_MIN};
    let c = chaos().await;
    let slow = "slow-first-token:ms=1500";
    let mut cfg = config(vec![openai("p", &c, "fine"), openai("s", &c, slow)]);
    cfg.routes.insert(
        "slow".into(),
        vec![Target {
            provider: "s".into(),
            model: slow.into(),
        }],
    );
    cfg.memory.idle_agents = 0;
    cfg.memory.idle_tasks = 0;
    let h = Hale::start(cfg).await;
    for k in 0..30 {
        h.openai(ROUTE)
            .agent("fast")
            .header("x-hale-task", "batch")
            .user(&format!("item {k}"))
            .send()
            .await
            .assert_complete(&full());
    }
    for agent in ["once", "busy"] {
        h.openai(ROUTE)
            .agent(agent)
            .header("x-hale-task", "chat")
            .send()
            .await
            .assert_complete(&full());
    }
    let held = |agent: &str| h.gw.agents.lock().expect("lock").contains_key(agent);
    let slow_turn = h
        .openai("slow")
        .agent("busy")
        .header("x-hale-task", "chat")
        .user("a long one")
        .send();
    let sweeps = async {
        // busy's second turn is under way (its answer takes 1.5 s); the
        // fast agent's rows are group-committed meanwhile.
        tokio::time::sleep(Duration::from_millis(500)).await;
        wait_stored_turns(&h, "fast", 30).await;
        let (now_ms, now) = (hale_gateway::state::wall_ms(), std::time::Instant::now());
        let at = |d: Duration| (now_ms + d.as_millis() as u64, now + d);
        let (ms, i) = at(SHED_AFTER_IDLE_MIN + Duration::from_secs(1));
        let shed = h.gw.shed_idle(ms, i);
        assert_eq!(shed.agents, 1, "{shed:?}");
        assert!(!held("fast"), "a hundred of its gaps are long past");
        assert!(
            h.gw.tasks.of_agent("fast").is_empty(),
            "its task left with it"
        );
        assert!(held("once") && held("busy"));
        assert_eq!(h.gw.tasks.of_agent("once").len(), 1, "its agent is held");
        let (ms, i) = at(SHED_AFTER_IDLE + Duration::from_secs(1));
        let shed = h.gw.shed_idle(ms, i);
        assert_eq!(shed.agents, 1, "{shed:?}");
        assert!(!held("once"), "a minute without a turn");
        assert!(held("busy"), "its turn is in flight");
    };
    let (reply, ()) = tokio::join!(slow_turn, sweeps);
    reply.assert_complete(&full());
    assert!(held("busy"));
    let later = SHED_AFTER_IDLE + Duration::from_secs(1);
    let sweep = || {
        h.gw.shed_idle(
            hale_gateway::state::wall_ms() + later.as_millis() as u64,
            std::time::Instant::now() + later,
        )
    };
    // Two turns under way at once: the first to end does not free it.
    let (first, second) = (h.gw.hold_turn("busy"), h.gw.hold_turn("busy"));
    drop(first);
    assert_eq!(sweep().agents, 0);
    assert!(held("busy"), "one turn is still under way");
    drop(second);
    let shed = sweep();
    assert_eq!(shed.agents, 1, "{shed:?}");
    assert!(!held("busy"), "the turns are over: nothing holds it");
    // Read back on its next turn, counters whole.
    h.openai(ROUTE)
        .agent("fast")
        .header("x-hale-task", "batch")
        .send()
        .await
        .assert_complete(&full());
    let (_, agent) = h.get_json("/agents/fast").await;
    assert_eq!(agent["counters"]["turns"], 31, "{agent}");
    h.stop().await;
}

/// Issue 45: a client whose every call is its own conversation makes a task
/// per call. Once more than twice `memory.idle_tasks` are held (at least
/// 256), a task leaves a second after its last turn ended, not a minute
/// after — and one with a turn in flight stays. Fails with the uncrowded
/// rule (nothing goes before a minute) and with turns in flight ignored.
/// The calls through hale show a served call leaves its task sheddable; the
/// crowd is made in-process (served turns, started and ended), so how fast
/// the machine answers calls does not decide whether memory gets crowded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crowd_of_one_call_conversations_leaves_a_second_after_each_call() {
    let c = chaos().await;
    let mut cfg = config(vec![openai("primary", &c, "fine")]);
    cfg.memory.idle_tasks = 10;
    let h = Hale::start(cfg).await;
    for i in 0..20 {
        // No X-Hale-Task: each first message is its own conversation.
        h.openai(ROUTE)
            .agent("one-shot")
            .user(&format!("question {i}"))
            .send()
            .await
            .assert_complete(&full());
    }
    let req = hale_proto::parse_request(
        hale_proto::Dialect::OpenAi,
        serde_json::json!({
            "model": ROUTE,
            "messages": [{"role": "user", "content": "a turn"}],
        }),
        &Default::default(),
    )
    .expect("a chat request");
    // A turn of one task has started and not ended; then served turns of
    // new tasks until memory is crowded (a task's check sweeps a crowded
    // memory, so the count is read after each).
    h.gw.tasks
        .check_request("one-shot", "in-flight", &req)
        .expect("no limit");
    let crowded = hale_core::memory::CROWDED_MIN_TASKS + 10;
    let mut i = 0;
    while h.gw.tasks.len() <= crowded {
        assert!(i < 100 * crowded, "tasks never crowded memory");
        let task = format!("served-{i}");
        h.gw.tasks
            .check_request("one-shot", &task, &req)
            .expect("no limit");
        h.gw.tasks.turn_ended("one-shot", &task);
        i += 1;
    }
    let held = h.gw.tasks.len();
    let soon = std::time::Instant::now() + hale_core::memory::TASK_SHED_CROWDED;
    let shed = h.gw.tasks.shed(soon, 10, &Default::default());
    assert_eq!(
        shed,
        held - 11,
        "all but the 10 most recent and the open one"
    );
    assert_eq!(h.gw.tasks.len(), 11);
    let left = h.gw.tasks.of_agent("one-shot");
    assert!(
        left.iter().any(|(t, ..)| t == "in-flight"),
        "the open turn's task stays"
    );
    assert!(
        left.iter().all(|(t, ..)| !t.starts_with("conv-")),
        "the calls through hale ended their turns: {:?}",
        left.iter().map(|(t, ..)| t).collect::<Vec<_>>()
    );
    h.stop().await;
}

/// Issue 13: idle tasks beyond `memory.idle_tasks` leave memory, the most
/// recently used stay, and a task a guard stopped is kept (its stop lives
/// there): after shedding, the stopped task is still refused and a shed
/// task goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_tasks_are_shed_beyond_the_bound_but_a_stopped_one_stays() {
    let c = chaos().await;
    let mut cfg = config(vec![openai("primary", &c, "fine")]);
    cfg.memory.idle_tasks = 1;
    cfg.guard.max_events = 6;
    let h = Hale::start(cfg).await;
    let turn = |task: &'static str| {
        h.openai(ROUTE)
            .agent("many-tasks")
            .header("x-hale-task", task)
            .send()
    };
    // "stopped" reaches its event cap; four more tasks take one turn each.
    let mut refused = false;
    for _ in 0..12 {
        if turn("stopped").await.status == 409 {
            refused = true;
            break;
        }
    }
    assert!(refused, "the guard never stopped the task");
    for task in ["t1", "t2", "t3", "t4"] {
        turn(task).await.assert_complete(&full());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(h.gw.tasks.len(), 5);
    let idle = hale_core::memory::SHED_AFTER_IDLE;
    // Nothing idle for a minute yet: nothing goes.
    assert_eq!(
        h.gw.tasks
            .shed(std::time::Instant::now(), 1, &Default::default()),
        0
    );
    let later = std::time::Instant::now() + idle;
    assert_eq!(
        h.gw.tasks.shed(later, 1, &Default::default()),
        3,
        "t1..t3 go; t4 and the stopped one stay"
    );
    assert_eq!(h.gw.tasks.len(), 2);
    assert_eq!(turn("stopped").await.status, 409);
    turn("t1").await.assert_complete(&full());
    h.stop().await;
}

/// Issue 13: a task whose agent left memory goes a few seconds after its
/// last use, even when the idle bound kept it at the sweep its agent left
/// in (the most recently used idle tasks are those of the agents that just
/// left). Before, such a task lost its mark at the next sweep and stayed the
/// minute: at a new agent every 100 turns, ~7,000 tasks held where ~2,000
/// agents were. A task used again meanwhile loses the mark.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_kept_by_the_bound_when_its_agent_left_goes_at_a_later_sweep() {
    let c = chaos().await;
    let mut cfg = config(vec![openai("primary", &c, "fine")]);
    cfg.memory.idle_tasks = 1;
    let h = Hale::start(cfg).await;
    let turn = |agent: &'static str, task: &'static str| {
        h.openai(ROUTE)
            .agent(agent)
            .header("x-hale-task", task)
            .send()
    };
    for task in ["t1", "t2", "t3"] {
        turn("gone", task).await.assert_complete(&full());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    turn("back", "b1").await.assert_complete(&full());
    assert_eq!(h.gw.tasks.len(), 4);
    let min = hale_core::memory::SHED_AFTER_IDLE_MIN;
    let now = std::time::Instant::now();
    let left: std::collections::HashSet<String> = ["gone", "back"].map(String::from).into();
    assert_eq!(
        h.gw.tasks.shed(now + min, 1, &left),
        3,
        "the bound keeps the most recently used: b1"
    );
    assert_eq!(h.gw.tasks.len(), 1);
    // Its agent left at the last sweep; this one names no agent.
    assert_eq!(
        h.gw.tasks.shed(now + min * 2, 0, &Default::default()),
        1,
        "b1 goes at a later sweep, not a minute after its last use"
    );
    assert!(h.gw.tasks.is_empty());
    // A task used again after its agent left is its agent's again.
    turn("back", "b2").await.assert_complete(&full());
    turn("back", "b3").await.assert_complete(&full());
    let now = std::time::Instant::now();
    let back: std::collections::HashSet<String> = ["back"].map(String::from).into();
    assert_eq!(h.gw.tasks.shed(now + min, 1, &back), 1, "b2 goes, b3 kept");
    turn("back", "b3").await.assert_complete(&full());
    assert_eq!(
        h.gw.tasks.shed(now + min * 2, 0, &Default::default()),
        0,
        "b3 was used again: a minute on its own"
    );
    assert_eq!(h.gw.tasks.len(), 1);
    h.stop().await;
}

/// Issue 30: `/metrics` tells how many group commits the journal made, so
/// an operator can read turns per commit. Each of these turns waits for its
/// own commit (durable, the default), so the count rises by at least one a
/// turn, and it is the store's own count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_the_journals_group_commits() {
    let c = chaos().await;
    let h = Hale::start(config(vec![openai("primary", &c, "fine")])).await;
    h.store.flush().await.expect("flush");
    let (before, _) = h.metric("hale_store_commits_total").await;
    for _ in 0..3 {
        h.openai(ROUTE)
            .agent("committer")
            .send()
            .await
            .assert_complete(&full());
    }
    h.store.flush().await.expect("flush");
    let (after, text) = h.metric("hale_store_commits_total").await;
    assert!(after >= before + 3, "{before} -> {after}: {text}");
    // The store's own count (background writes may commit after the scrape).
    assert!(
        after <= h.store.commits(),
        "{after} > {}",
        h.store.commits()
    );
    h.stop().await;
}

/// Issue 13: the journal's backlog is bounded by slowing turns to the
/// writer's pace, but a journal that cannot write (its database locked by
/// another process) never stops turns: once the writer has been stuck for
/// the longest wait, turns go on without waiting, and every write lands
/// once the lock goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_locked_journal_slows_nothing_and_loses_nothing() {
    use sqlx::Connection;
    let c = chaos().await;
    let mut cfg = config(vec![openai("primary", &c, "fine")]);
    // A backlog bound of 4 writes (four batches of one).
    cfg.events.batch_max = 1;
    let h = Hale::start(cfg).await;
    h.openai(ROUTE)
        .agent("locked")
        .send()
        .await
        .assert_complete(&full());
    h.store.flush().await.expect("flush");
    let url = format!("sqlite://{}", h.dir.join(hale_store::SQLITE_FILE).display());
    let mut other = sqlx::SqliteConnection::connect(&url)
        .await
        .expect("connect");
    sqlx::query("BEGIN IMMEDIATE")
        .execute(&mut other)
        .await
        .expect("lock");
    // Longer than the longest wait with no batch: the writer is stuck, and
    // turns queue writes past the bound without waiting for it.
    tokio::time::sleep(hale_core::memory::JOURNAL_BACKLOG_MAX_WAIT + Duration::from_millis(200))
        .await;
    for _ in 0..8 {
        h.openai(ROUTE)
            .agent("locked")
            .send()
            .await
            .assert_complete(&full());
    }
    assert!(h.store.queued() > 4, "queued {}", h.store.queued());
    let (_, text) = h.get_text("/metrics").await;
    let counter = |name: &str| metric_in(&text, name);
    // Turns past the bound found the writer stuck and did not wait at all
    // (a wait that ran out would count as a timeout).
    assert!(counter("hale_journal_writer_stuck_total") >= 1, "{text}");
    assert_eq!(counter("hale_journal_wait_timeouts_total"), 0, "{text}");
    assert_eq!(counter("hale_journal_waits_total"), 0, "{text}");
    sqlx::query("ROLLBACK")
        .execute(&mut other)
        .await
        .expect("unlock");
    h.store.flush().await.expect("every queued write commits");
    let agent = h.store.agent("locked").await.expect("agent").expect("row");
    assert_eq!(agent.turns, 9);
    h.stop().await;
}
