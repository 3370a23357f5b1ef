//! `kind: gemini` through the real `hale serve`, served by `hale chaos`'s
//! Gemini mode (`/v1beta/models/{model}:generateContent` and
//! `:streamGenerateContent?alt=sse`, which refuses a request without
//! `x-goog-api-key`): a Chat Completions client and a Responses client (the
//! official `openai` Python SDK, `tests/sdk/gemini_client.py` and
//! `tests/sdk/responses_client.py`) and a Messages client (plain HTTP: the
//! `anthropic` SDK is not in the test venv), streamed and not, each with a
//! tool round trip; a route [openai 503, gemini] keeps serving; a stream cut
//! on a gemini deployment is resumed on another; a safety block reaches the
//! client as a content-policy error (issue 29).
//!
//! Python comes from `HALE_PYTHON`, else `.venv/bin/python` at the workspace
//! root. Without a Python that can `import openai` the SDK tests print why
//! and return — except under `CI=true`, where that is a failure.

mod common;

use common::*;
use hale_testkit::python_or_skip;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

/// The key hale sends (chaos only checks that one is sent).
const KEY_ENV: &str = "HALE_TEST_GEMINI_KEY";

const PROVIDERS: &str = "
providers:
  - name: gem
    kind: gemini
    base_url: {chaos}/v1beta
    api_key_env: HALE_TEST_GEMINI_KEY
    default_model: gemini-2.5-flash
  - name: gem2
    kind: gemini
    base_url: {chaos}/v1beta
    api_key_env: HALE_TEST_GEMINI_KEY
    default_model: gemini-2.5-flash
  - name: oa
    kind: openai
    base_url: {chaos}/v1
    default_model: error-503
retry:
  server_error: {max_attempts: 2, initial_ms: 20, max_ms: 50}
";

/// chaos and hale over [`PROVIDERS`]: the shared [`ChaosRig`].
struct Rig(ChaosRig);

impl std::ops::Deref for Rig {
    type Target = ChaosRig;
    fn deref(&self) -> &ChaosRig {
        &self.0
    }
}

impl Rig {
    /// chaos and hale with `routes` (YAML lines under `routes:`) over [`PROVIDERS`].
    async fn start(routes: &str) -> Rig {
        let config = format!("routes:\n{routes}{PROVIDERS}");
        Rig(ChaosRig::start_with(&config, &[], &[(KEY_ENV, "k-gemini-test")]).await)
    }

    async fn py(&self, py: &Path, script: &str, args: &[&str]) -> Value {
        self.sdk(py, script, args).await
    }

    /// One Messages call: (status, JSON body or the SSE text as a string).
    async fn messages(&self, body: Value) -> (u16, Value) {
        let r = self
            .http
            .post(format!("{}/v1/messages", self.base))
            .header("anthropic-version", "2023-06-01")
            .json(&body)
            .send()
            .await
            .expect("hale answers");
        let status = r.status().as_u16();
        let text = r.text().await.expect("a body");
        let v = serde_json::from_str(&text).unwrap_or(Value::String(text));
        (status, v)
    }
}

fn py() -> Option<PathBuf> {
    python_or_skip("import openai", "openai")
}

/// The `data:` objects of an SSE text.
fn sse_data(text: &str) -> Vec<Value> {
    text.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str(d).ok())
        .collect()
}

/// The `contents` chaos received in each request body.
fn function_responses(bodies: &[Value]) -> Vec<Value> {
    bodies
        .iter()
        .flat_map(|b| b["contents"].as_array().cloned().unwrap_or_default())
        .flat_map(|c| c["parts"].as_array().cloned().unwrap_or_default())
        .filter_map(|p| p.get("functionResponse").cloned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_completions_client_served_by_gemini_with_a_tool_round_trip() {
    let Some(py) = py() else { return };
    let rig = Rig::start(
        "  r: [gem/gemini-2.5-flash]
  rt: [\"gem/tool:name=get_weather:times=1:args=city=Paris\"]
  rts: [\"gem/tool:name=get_weather:times=1:tokens=61:args=city=Rome\"]
",
    )
    .await;
    let v = rig.py(&py, "gemini_client.py", &["chat", "r"]).await;
    let expected = words(60);
    assert_eq!(v["nonstream"]["text"], expected.as_str(), "{v}");
    assert_eq!(v["nonstream"]["finish_reason"], "stop");
    assert_eq!(v["nonstream"]["provider"], "gem");
    assert_eq!(v["nonstream"]["usage"]["completion_tokens"], 60);
    assert_eq!(v["stream"]["text"], expected.as_str());
    assert_eq!(v["stream"]["chunks"], 60, "relayed chunk by chunk");
    assert_eq!(v["stream"]["finish_reason"], "stop");
    assert_eq!(v["stream"]["usage"]["completion_tokens"], 60);
    let bodies = rig.chaos_bodies().await;
    assert_eq!(bodies.len(), 2, "{bodies:?}");
    for b in &bodies {
        assert_eq!(b["contents"][0]["role"], "user", "{b}");
        assert_eq!(
            b["contents"][0]["parts"][0]["text"],
            "Tell me something useful."
        );
        assert!(
            b.get("messages").is_none() && b.get("model").is_none(),
            "{b}"
        );
    }

    let v = rig
        .py(&py, "gemini_client.py", &["tool", "rt", "rts"])
        .await;
    for (mode, city, n) in [("nonstream", "Paris", 60), ("stream", "Rome", 61)] {
        let t = &v[mode];
        assert_eq!(t["finish_reason"], "tool_calls", "{mode}: {v}");
        assert_eq!(t["call"]["name"], "get_weather", "{mode}");
        assert_eq!(t["call"]["arguments"], json!({"city": city}), "{mode}");
        assert_eq!(t["second_text"], words(n).as_str(), "{mode}");
        assert_eq!(t["second_finish_reason"], "stop", "{mode}");
    }
    let bodies = rig.chaos_bodies().await;
    let tools = &bodies[2]["tools"][0]["functionDeclarations"][0];
    assert_eq!(tools["name"], "get_weather", "{bodies:?}");
    assert_eq!(tools["parametersJsonSchema"]["required"], json!(["city"]));
    let results = function_responses(&bodies);
    assert_eq!(
        results,
        vec![
            json!({"name": "get_weather", "response": {"result": "sunny, 21 C"}}),
            json!({"name": "get_weather", "response": {"result": "sunny, 21 C"}}),
        ],
        "each tool result went back named after its call"
    );
    // The call went back as the model's turn, with its arguments as an object.
    let calls: Vec<&Value> = bodies
        .iter()
        .flat_map(|b| b["contents"].as_array().into_iter().flatten())
        .filter(|c| c["role"] == "model")
        .collect();
    assert_eq!(
        calls[0]["parts"][0],
        json!({"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_client_served_by_gemini_with_a_tool_round_trip() {
    let Some(py) = py() else { return };
    let rig = Rig::start("  r: [gem/gemini-2.5-flash]\n").await;
    let v = rig.py(&py, "responses_client.py", &["basic", "r"]).await;
    let expected = words(60);
    assert_eq!(v["nonstream"]["text"], expected.as_str(), "{v}");
    assert_eq!(v["nonstream"]["status"], "completed");
    assert_eq!(v["nonstream"]["provider"], "gem");
    assert_eq!(v["nonstream"]["usage"]["output_tokens"], 60);
    let s = &v["stream"];
    assert_eq!(s["text"], expected.as_str(), "{s}");
    assert_eq!(s["seqs_continuous"], true, "{s}");
    assert_eq!(s["last"], "response.completed", "{s}");
    assert_eq!(s["final_text"], expected.as_str(), "{s}");
    assert_eq!(v["structured"]["text"], expected.as_str());
    let bodies = rig.chaos_bodies().await;
    let g = &bodies[2]["generationConfig"];
    assert_eq!(g["responseMimeType"], "application/json", "{bodies:?}");
    assert_eq!(g["responseJsonSchema"]["required"], json!(["answer"]));

    // A rig of its own: the same question a fourth time would have hale's
    // health nudge appended ("summarise what you have tried"), which chaos
    // answers with a summary.
    let rig = Rig::start("  rt: [\"gem/tool:name=get_weather:times=1:args=city=Paris\"]\n").await;
    let v = rig.py(&py, "responses_client.py", &["tool", "rt"]).await;
    assert_eq!(v["call"]["name"], "get_weather", "{v}");
    assert_eq!(v["call"]["arguments"], json!({"city": "Paris"}));
    assert_eq!(v["second_status"], "completed");
    assert_eq!(v["second_text"], expected.as_str());
    let results = function_responses(&rig.chaos_bodies().await);
    assert_eq!(
        results,
        vec![json!({"name": "get_weather", "response": {"result": "sunny, 21 C"}})]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_client_served_by_gemini_with_a_tool_round_trip() {
    let rig = Rig::start(
        "  r: [gem/gemini-2.5-flash]
  rt: [\"gem/tool:name=get_weather:times=1:args=city=Paris\"]
  rts: [\"gem/tool:name=get_weather:times=1:tokens=61:args=city=Rome\"]
",
    )
    .await;
    let ask = |model: &str, stream: bool| {
        json!({"model": model, "max_tokens": 1024, "stream": stream,
               "system": "Be useful.",
               "messages": [{"role": "user", "content": "Tell me something useful."}]})
    };
    let expected = words(60);
    let (status, v) = rig.messages(ask("r", false)).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["content"][0]["text"], expected.as_str(), "{v}");
    assert_eq!(v["stop_reason"], "end_turn");
    assert_eq!(v["usage"]["output_tokens"], 60);
    let (status, v) = rig.messages(ask("r", true)).await;
    assert_eq!(status, 200);
    let events = sse_data(v.as_str().expect("an event stream"));
    let text: String = events
        .iter()
        .filter_map(|e| e["delta"]["text"].as_str())
        .collect();
    assert_eq!(text, expected);
    assert!(events.iter().any(|e| e["type"] == "message_stop"));
    let bodies = rig.chaos_bodies().await;
    assert_eq!(
        bodies[0]["systemInstruction"],
        json!({"parts": [{"text": "Be useful."}]})
    );
    assert_eq!(bodies[0]["generationConfig"]["maxOutputTokens"], 1024);

    let tools = json!([{"name": "get_weather", "description": "The weather in a city.",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]);
    for (model, stream, city, n) in [("rt", false, "Paris", 60), ("rts", true, "Rome", 61)] {
        let mut first = ask(model, stream);
        first["tools"] = tools.clone();
        let (status, v) = rig.messages(first.clone()).await;
        assert_eq!(status, 200, "{v}");
        let (id, input) = if stream {
            let events = sse_data(v.as_str().expect("an event stream"));
            let start = events
                .iter()
                .find(|e| e["content_block"]["type"] == "tool_use")
                .unwrap_or_else(|| panic!("a tool_use block: {events:?}"));
            let args: String = events
                .iter()
                .filter_map(|e| e["delta"]["partial_json"].as_str())
                .collect();
            (
                start["content_block"]["id"].as_str().unwrap().to_owned(),
                serde_json::from_str::<Value>(&args).unwrap(),
            )
        } else {
            assert_eq!(v["stop_reason"], "tool_use", "{v}");
            let block = &v["content"][0];
            assert_eq!(block["type"], "tool_use", "{v}");
            (
                block["id"].as_str().unwrap().to_owned(),
                block["input"].clone(),
            )
        };
        assert_eq!(input, json!({"city": city}));
        let mut second = first;
        second["stream"] = json!(false);
        let msgs = second["messages"].as_array_mut().unwrap();
        msgs.push(json!({"role": "assistant", "content": [{"type": "tool_use", "id": id, "name": "get_weather", "input": input}]}));
        msgs.push(json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": id, "content": "sunny, 21 C"}]}));
        let (status, v) = rig.messages(second).await;
        assert_eq!(status, 200, "{v}");
        assert_eq!(v["content"][0]["text"], words(n).as_str(), "{v}");
    }
    let results = function_responses(&rig.chaos_bodies().await);
    assert_eq!(results.len(), 2);
    assert!(
        results.iter().all(|r| r["name"] == "get_weather"),
        "{results:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_route_from_a_failing_openai_primary_to_gemini_keeps_serving() {
    let Some(py) = py() else { return };
    let rig = Rig::start("  r: [oa/error-503, gem/gemini-2.5-flash]\n").await;
    let v = rig.py(&py, "gemini_client.py", &["chat", "r"]).await;
    let expected = words(60);
    assert_eq!(v["nonstream"]["text"], expected.as_str(), "{v}");
    assert_eq!(v["nonstream"]["provider"], "gem");
    assert_eq!(v["stream"]["text"], expected.as_str());
    assert!(
        rig.chaos_requests("error-503").await >= 1,
        "the primary was tried"
    );
    assert_eq!(rig.chaos_requests("gemini-2.5-flash").await, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_cut_on_gemini_is_resumed_on_another_deployment() {
    let Some(py) = py() else { return };
    let rig = Rig::start("  r: [\"gem/cut:after=20\", gem2/gemini-2.5-flash]\n").await;
    let v = rig.py(&py, "responses_client.py", &["stream", "r"]).await;
    // Cut after 20 words on gem, resumed on gem2 (which takes no prefill:
    // a fresh answer aligned with what was delivered).
    let s = &v["stream"];
    let expected = words(60);
    assert_eq!(s["text"], expected.as_str(), "{v}");
    assert_eq!(s["seqs_continuous"], true, "{s}");
    assert_eq!(s["last"], "response.completed", "{s}");
    assert_eq!(s["errors"], json!([]), "{s}");
    assert_eq!(rig.chaos_requests("cut:after=20").await, 1, "cut once");
    assert_eq!(
        rig.chaos_requests("gemini-2.5-flash").await,
        1,
        "resumed on gem2"
    );
    let bodies = rig.chaos_bodies().await;
    assert_eq!(bodies[1]["contents"], bodies[0]["contents"], "{bodies:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gemini_safety_block_is_a_content_policy_error_for_the_client() {
    let Some(py) = py() else { return };
    let rig = Rig::start("  r: [gem/content-filter, gem2/gemini-2.5-flash]\n").await;
    let v = rig.py(&py, "gemini_client.py", &["filter", "r"]).await;
    let ns = &v["nonstream"];
    assert_eq!(ns["refused"], true, "{v}");
    assert_eq!(ns["status"], 400);
    assert_eq!(ns["body"]["type"], "content_policy", "{v}");
    assert!(
        ns["body"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("blockReason SAFETY"),
        "{v}"
    );
    let s = &v["stream"];
    assert_eq!(s["text"], "", "{v}");
    assert!(
        s["error"].to_string().contains("content_policy"),
        "the stream ends in the content-policy error: {v}"
    );
    // Final for the caller: the fallback was not asked.
    assert_eq!(rig.chaos_requests("gemini-2.5-flash").await, 0);
    // Messages clients get it in their shape too.
    let (status, b) = rig
        .messages(json!({"model": "r", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}))
        .await;
    assert_eq!(status, 400, "{b}");
    assert_eq!(b["error"]["type"], "content_policy", "{b}");
}
