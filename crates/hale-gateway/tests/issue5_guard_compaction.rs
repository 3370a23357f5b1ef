//! Issue #5 end to end: the guard stops a looping agent, compaction keeps a
//! long conversation inside the window with a real summariser call to `hale
//! chaos` (reused on the next turn), a summariser outage falls back to the
//! digest, and a provider's `context_length_exceeded` is compacted and retried
//! with a smaller request. Each test runs its own chaos server and gateway on
//! loopback.

use hale_core::config::{Config, ProviderConfig, ProviderKind, Target};
use hale_core::event::EventKind;
use serde_json::{Value, json};
use std::sync::Arc;

struct Harness {
    chaos: hale_chaos::ChaosHandle,
    base: String,
    store: hale_store::Store,
    http: reqwest::Client,
    _dir: tempfile::TempDir,
    _stop: tokio::sync::oneshot::Sender<()>,
}

async fn start(tune: impl FnOnce(&mut Config)) -> Harness {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let chaos = hale_chaos::spawn(
        "127.0.0.1:0".parse().unwrap(),
        hale_chaos::ChaosConfig::default(),
    )
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let p = ProviderConfig::new("p", ProviderKind::OpenAi, &chaos.base_url_openai, "ok");
    let mut cfg = Config::with_providers(vec![p]);
    cfg.data_dir = dir.path().to_path_buf();
    tune(&mut cfg);
    let cfg = Arc::new(cfg);
    let store = hale_store::Store::open(None, dir.path(), (&cfg.events).into())
        .await
        .unwrap();
    let gw = hale_gateway::Gateway::new(cfg, store.clone())
        .await
        .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(hale_gateway::http::serve(gw, listener, async {
        let _ = rx.await;
    }));
    Harness {
        chaos,
        base,
        store,
        http: reqwest::Client::new(),
        _dir: dir,
        _stop: tx,
    }
}

impl Harness {
    async fn chat(&self, agent: &str, body: Value) -> (u16, reqwest::header::HeaderMap, Value) {
        let resp = self
            .http
            .post(format!("{}/v1/chat/completions", self.base))
            .header("x-hale-agent", agent)
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        (status, headers, resp.json().await.unwrap_or(Value::Null))
    }

    async fn events(&self, kind: EventKind) -> Vec<hale_core::event::Event> {
        self.store.flush().await.unwrap();
        self.store
            .events_after(0, 100_000, Some(&[kind]))
            .await
            .unwrap()
            .into_iter()
            .map(|e| e.event)
            .collect()
    }
}

fn route(cfg: &mut Config, name: &str, model: &str) {
    cfg.routes.insert(
        name.into(),
        vec![Target {
            provider: "p".into(),
            model: model.into(),
        }],
    );
}

/// A conversation of `n` user/assistant exchanges, each message about `words` words.
fn conversation(n: usize, words: usize) -> Vec<Value> {
    let mut msgs = Vec::new();
    for i in 0..n {
        let text: String = (0..words).map(|w| format!("topic{i} detail{w} ")).collect();
        msgs.push(json!({"role": "user", "content": format!("question {i}: {text}")}));
        msgs.push(json!({"role": "assistant", "content": format!("answer {i}: {text}")}));
    }
    msgs.push(json!({"role": "user", "content": "And now the final question?"}));
    msgs
}

/// Drives an agent that always gets the same tool call back and answers it
/// with `result(turn)`. Returns (turn refused, status, body).
async fn run_looping_agent(
    h: &Harness,
    agent: &str,
    result: impl Fn(usize) -> String,
) -> (usize, u16, Value, Vec<Value>) {
    let mut messages = vec![json!({"role": "user", "content": "make the tests pass"})];
    for turn in 0..10 {
        let (status, _, body) = h
            .chat(agent, json!({"model": "looper", "messages": messages}))
            .await;
        if status != 200 {
            return (turn, status, body, messages);
        }
        let call = body["choices"][0]["message"]["tool_calls"][0].clone();
        assert_eq!(call["function"]["name"], "run_tests", "{body}");
        messages.push(json!({"role": "assistant", "content": null, "tool_calls": [call.clone()]}));
        messages.push(json!({"role": "tool", "tool_call_id": call["id"], "content": result(turn)}));
    }
    panic!("the guard never stopped the loop");
}

#[tokio::test]
async fn an_agent_repeating_the_same_tool_call_is_stopped_with_a_readable_message() {
    let h = start(|cfg| route(cfg, "looper", r#"tool:name=run_tests:args={"suite":"all"}"#)).await;
    // Different results each time: only the identical-call rule can fire.
    let (turn, status, body, messages) =
        run_looping_agent(&h, "looping-agent", |t| format!("{t} tests failed")).await;
    // tool_loop_threshold is 4: the 4th identical call stops the task, so the request after it is refused.
    assert_eq!(turn, 4, "stopped at the wrong turn: {body}");
    assert_eq!(status, 409);
    assert_eq!(body["error"]["type"], "safety_limit");
    let msg = body["error"]["message"].as_str().unwrap();
    assert!(msg.starts_with("Forced stop"), "{msg}");
    assert!(msg.contains("run_tests"), "{msg}");
    assert!(msg.contains("Tool calls: 4"), "{msg}");
    // Final: the next call is refused too, without reaching the provider.
    let before = h.chaos.stats();
    let (status, _, _) = h
        .chat(
            "looping-agent",
            json!({"model": "looper", "messages": messages}),
        )
        .await;
    assert_eq!(status, 409);
    assert_eq!(
        h.chaos.stats(),
        before,
        "a stopped task must not reach the provider"
    );
    let hits = h.events(EventKind::GuardLimitHit).await;
    assert_eq!(hits.len(), 1, "one guard.limit_hit event: {hits:?}");
    assert_eq!(hits[0].agent.as_deref(), Some("looping-agent"));
    assert_eq!(hits[0].payload["limit"]["kind"], "identical_calls");
}

#[tokio::test]
async fn the_same_call_returning_the_same_result_is_stopped_sooner() {
    let h = start(|cfg| route(cfg, "looper", r#"tool:name=run_tests:args={"suite":"all"}"#)).await;
    let (turn, status, body, _) =
        run_looping_agent(&h, "stuck-agent", |_| "3 tests failed".into()).await;
    // result_loop_threshold is 3: the 3rd identical result arrives with the 4th request.
    assert_eq!(turn, 3, "{body}");
    assert_eq!(status, 409);
    assert_eq!(
        body["hale"]["limit"]["kind"],
        json!(null),
        "hale detail is under error.hale"
    );
    assert_eq!(body["error"]["hale"]["limit"]["kind"], "identical_results");
    let hits = h.events(EventKind::GuardLimitHit).await;
    assert_eq!(hits.len(), 1);
}

fn compaction_config(cfg: &mut Config, summarizer_model: &str) {
    // A small window so a modest conversation crosses the threshold.
    cfg.providers[0].context_windows.insert("ok".into(), 2_000);
    route(cfg, "summarizer", summarizer_model);
    cfg.compaction.summarizer_model = Some("summarizer".into());
}

#[tokio::test]
async fn a_long_conversation_is_compacted_by_a_summariser_call_and_reused_next_turn() {
    let h = start(|cfg| compaction_config(cfg, "summarize")).await;
    let mut messages = conversation(12, 20);
    let (status, headers, body) = h
        .chat("long-agent", json!({"model": "ok", "messages": messages}))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(headers["x-hale-compacted"], "true");
    let summaries = h.chaos.requests_for("summarize");
    assert!(summaries >= 1, "no summariser call was made");
    let compacted = h.events(EventKind::AgentCompacted).await;
    assert_eq!(compacted.len(), 1);
    let p = &compacted[0].payload;
    assert!(
        p["after_tokens"].as_u64() < p["before_tokens"].as_u64(),
        "{p}"
    );
    assert!(p["tier_number"].as_u64().unwrap() >= 2, "{p}");
    // What the provider got: fewer messages, a summary, the last four untouched.
    let sent = h
        .chaos
        .last_requests()
        .into_iter()
        .rev()
        .find(|r| r["model"] == "ok")
        .unwrap();
    let sent_msgs = sent["messages"].as_array().unwrap();
    assert!(
        sent_msgs.len() < messages.len(),
        "{} vs {}",
        sent_msgs.len(),
        messages.len()
    );
    assert!(sent.to_string().contains("Summary by hale"), "{sent}");
    let tail: Vec<&Value> = sent_msgs.iter().rev().take(4).collect();
    let orig_tail: Vec<&Value> = messages.iter().rev().take(4).collect();
    for (a, b) in tail.iter().zip(orig_tail) {
        assert_eq!(a["content"], b["content"]);
    }

    // Next turn: the same conversation plus a new exchange reuses the stored compaction.
    messages.push(json!({"role": "assistant", "content": "a short answer"}));
    messages.push(json!({"role": "user", "content": "one more short question"}));
    let (status, headers, _) = h
        .chat("long-agent", json!({"model": "ok", "messages": messages}))
        .await;
    assert_eq!(status, 200);
    assert_eq!(headers["x-hale-compacted"], "true");
    assert_eq!(
        h.chaos.requests_for("summarize"),
        summaries,
        "the stored compaction was not reused"
    );
}

#[tokio::test]
async fn a_summariser_outage_falls_back_to_the_plain_digest() {
    let h = start(|cfg| compaction_config(cfg, "auth")).await;
    let messages = conversation(12, 20);
    let (status, headers, body) = h
        .chat("digest-agent", json!({"model": "ok", "messages": messages}))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(headers["x-hale-compacted"], "true");
    assert!(
        h.chaos.requests_for("auth") >= 1,
        "the summariser was not called"
    );
    let compacted = h.events(EventKind::AgentCompacted).await;
    assert_eq!(
        compacted[0].payload["tier_number"], 4,
        "{}",
        compacted[0].payload
    );
    let sent = h
        .chaos
        .last_requests()
        .into_iter()
        .rev()
        .find(|r| r["model"] == "ok")
        .unwrap();
    assert!(sent.to_string().contains("Digest of"), "{sent}");
}

#[tokio::test]
async fn a_provider_context_overflow_is_compacted_and_retried_smaller() {
    // The window table does not know this model (8,192 tokens assumed), so hale
    // sends the conversation as is; the provider refuses anything over 12,000
    // characters. Large tool results make tier 1 enough.
    let h = start(|cfg| {
        route(cfg, "summarizer", "summarize");
        cfg.compaction.summarizer_model = Some("summarizer".into());
    })
    .await;
    let big = "x".repeat(5_000);
    let mut messages = vec![json!({"role": "user", "content": "read the files"})];
    for i in 0..3 {
        let id = format!("call_{i}");
        messages.push(json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": id, "type": "function", "function": {"name": "read_file", "arguments": format!("{{\"path\":\"f{i}.rs\"}}")}}
        ]}));
        messages.push(json!({"role": "tool", "tool_call_id": id, "content": big}));
    }
    for i in 0..4 {
        messages.push(json!({"role": if i % 2 == 0 { "user" } else { "assistant" }, "content": format!("short {i}")}));
    }
    let model = "context-overflow:max_chars=12000";
    let (status, headers, body) = h
        .chat(
            "overflow-agent",
            json!({"model": model, "messages": messages}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(headers["x-hale-compacted"], "true");
    assert_eq!(h.chaos.requests_for(model), 2, "one refused, one served");
    let sent: Vec<Value> = h
        .chaos
        .last_requests()
        .into_iter()
        .filter(|r| r["model"] == model)
        .collect();
    assert_eq!(sent.len(), 2);
    let (first, second) = (sent[0].to_string(), sent[1].to_string());
    assert!(second.len() < first.len(), "the retry was not smaller");
    assert!(second.contains("stripped by hale"), "{second}");
}

#[tokio::test]
async fn an_overflow_that_compaction_cannot_shrink_is_a_clean_400() {
    // Two short messages: nothing to compact, nowhere else to go.
    let h = start(|_| {}).await;
    let model = "context-overflow";
    let (status, _, body) = h
        .chat(
            "small-agent",
            json!({"model": model, "messages": [{"role": "user", "content": "hi"}]}),
        )
        .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["type"], "context_length_exceeded");
    assert_eq!(
        h.chaos.requests_for(model),
        1,
        "never re-sent unchanged to the same model"
    );
}

#[tokio::test]
async fn a_task_over_its_token_budget_gets_402_and_the_spend_is_visible() {
    let h = start(|cfg| {
        cfg.agents.insert(
            "thrifty".into(),
            hale_core::config::AgentConfig {
                provider: Some("p".into()),
                fallback: None,
                budget: hale_core::config::BudgetConfig {
                    max_tokens_per_task: Some(100),
                    ..Default::default()
                },
            },
        );
    })
    .await;
    let body = json!({"model": "ok", "messages": [{"role": "user", "content": "hello"}]});
    // Nothing spent yet: served. One turn spends less than the cap, two more than it.
    let (status, _, _) = h.chat("thrifty", body.clone()).await;
    assert_eq!(status, 200);
    let (status, _, _) = h.chat("thrifty", body.clone()).await;
    assert_eq!(
        status, 200,
        "one turn spent less than the cap: still served"
    );
    let served = h.chaos.requests_for("ok");
    let (status, _, err) = h.chat("thrifty", body.clone()).await;
    assert_eq!(status, 402, "{err}");
    assert_eq!(err["error"]["type"], "budget_exceeded");
    assert_eq!(
        h.chaos.requests_for("ok"),
        served,
        "a refused turn costs nothing upstream"
    );
    let ev = h.events(EventKind::BudgetExceeded).await;
    assert_eq!(ev.len(), 1);
    let view: Value = hale_testkit::get_json(&h.http, &format!("{}/agents/thrifty", h.base)).await;
    assert_eq!(view["budget"]["caps"]["max_tokens_per_task"], 100);
    // No X-Hale-Task: the task is the conversation (its root), the only one.
    let tasks = view["budget"]["tasks"].as_object().expect("tasks");
    assert_eq!(tasks.len(), 1, "{view}");
    let spent = tasks.values().next().unwrap()["spend"]["tokens"]
        .as_u64()
        .unwrap();
    assert!(spent >= 100, "{view}");
}
