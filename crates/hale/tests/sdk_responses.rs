//! The OpenAI Responses API through the real `hale serve`, driven by the
//! official `openai` Python SDK's `client.responses.create`
//! (`tests/sdk/responses_client.py`) against `hale chaos`: streamed and
//! not, structured output, a function tool round trip, a cut stream resumed
//! on another deployment, a failover to a Responses provider, and the
//! Responses dialect on either side of a translation (a Chat Completions
//! client served by a Responses provider, a Responses client served by an
//! Anthropic provider).
//!
//! Python comes from `HALE_PYTHON`, else `.venv/bin/python` at the workspace
//! root. Without a Python that can `import openai` each test prints why and
//! returns — except under `CI=true`, where that is a failure.

mod common;

use common::*;
use hale_testkit::python_or_skip;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// `hale chaos` and `hale serve` with `config` (its `providers:` may name
/// `{chaos}`, the chaos base URL): the shared [`ChaosRig`].
struct Rig(ChaosRig);

impl std::ops::Deref for Rig {
    type Target = ChaosRig;
    fn deref(&self) -> &ChaosRig {
        &self.0
    }
}

impl Rig {
    async fn start(config: &str) -> Rig {
        Rig(ChaosRig::start(config, None).await)
    }

    /// Runs the SDK script in `mode` for `model`; its JSON.
    async fn sdk(&self, py: &Path, mode: &str, model: &str) -> Value {
        self.0.sdk(py, "responses_client.py", &[mode, model]).await
    }
}

fn py() -> Option<PathBuf> {
    python_or_skip("import openai", "openai")
}

/// Asserts a streamed Responses answer is one well-formed response with the
/// complete chaos text of `n` words.
#[track_caller]
fn assert_one_wellformed_stream(s: &Value, n: usize) {
    let expected = words(n);
    assert_eq!(s["text"], expected.as_str(), "{s}");
    assert_eq!(
        s["seqs_continuous"], true,
        "sequence numbers from 0, no gap: {s}"
    );
    assert_eq!(s["first"], "response.created", "{s}");
    assert_eq!(s["last"], "response.completed", "{s}");
    assert_eq!(s["items_added"], 1, "one item per output: {s}");
    assert_eq!(s["items_done"], 1, "{s}");
    assert_eq!(s["errors"], serde_json::json!([]), "{s}");
    assert_eq!(s["final_status"], "completed", "{s}");
    assert_eq!(
        s["final_output_types"],
        serde_json::json!(["message"]),
        "{s}"
    );
    assert_eq!(s["final_text"], expected.as_str(), "{s}");
}

const RESPONSES_PROVIDER: &str = "
providers:
  - name: resp
    kind: openai
    api: responses
    base_url: {chaos}/v1
    default_model: gpt-5
";

/// Streamed and not, and a structured-output call: the request reaches the
/// Responses provider on `/responses` as the client sent it (its
/// `text.format` and an unknown field included), and its answers reach the
/// SDK whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_sdk_streamed_and_not_through_a_responses_provider() {
    let Some(py) = py() else { return };
    let rig = Rig::start(&format!("routes:\n  r: [resp/gpt-5]\n{RESPONSES_PROVIDER}")).await;
    let v = rig.sdk(&py, "basic", "r").await;
    let expected = words(60);
    let ns = &v["nonstream"];
    assert_eq!(ns["text"], expected.as_str(), "{v}");
    assert_eq!(ns["status"], "completed");
    assert_eq!(ns["output_types"], serde_json::json!(["message"]));
    assert_eq!(ns["provider"], "resp");
    assert_eq!(ns["usage"]["output_tokens"], 60);
    // The provider's own answer, as sent: chaos's id, not one hale made.
    assert!(
        ns["id"].as_str().unwrap_or("").starts_with("resp_chaos_"),
        "{ns}"
    );
    assert_one_wellformed_stream(&v["stream"], 60);
    assert_eq!(v["stream"]["deltas"], 60, "relayed delta by delta");
    assert_eq!(v["stream"]["final_usage"]["output_tokens"], 60);
    assert_eq!(v["structured"]["text"], expected.as_str());
    let bodies = rig.chaos_bodies().await;
    assert_eq!(bodies.len(), 3, "{bodies:?}");
    let last = &bodies[2];
    assert_eq!(last["model"], "gpt-5");
    assert_eq!(last["text"]["format"]["type"], "json_schema", "{last}");
    assert_eq!(last["text"]["format"]["name"], "answer");
    assert_eq!(last["text"]["format"]["strict"], true);
    assert_eq!(
        last["text"]["format"]["schema"]["required"],
        serde_json::json!(["answer"])
    );
    assert_eq!(last["x_unknown_field"]["kept"], true, "unknown fields kept");
    assert_eq!(last["input"], "Tell me something useful.");
    assert_eq!(bodies[1]["stream"], true);
}

/// A function tool round trip: chaos's `tool` fault answers a
/// `function_call` item; the SDK sends back a `function_call_output` and
/// gets the text answer. The provider sees the call and its output.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_sdk_function_tool_round_trip() {
    let Some(py) = py() else { return };
    let rig = Rig::start(&format!(
        "routes:\n  r: [\"resp/tool:name=get_weather:times=1:args=city=Paris\"]\n{RESPONSES_PROVIDER}"
    ))
    .await;
    let v = rig.sdk(&py, "tool", "r").await;
    assert_eq!(v["call"]["name"], "get_weather", "{v}");
    assert_eq!(v["call"]["arguments"], serde_json::json!({"city": "Paris"}));
    assert_eq!(v["second_status"], "completed");
    assert_eq!(v["second_text"], words(60).as_str());
    let bodies = rig.chaos_bodies().await;
    assert_eq!(bodies.len(), 2, "{bodies:?}");
    assert_eq!(bodies[0]["tools"][0]["name"], "get_weather");
    assert_eq!(bodies[0]["tools"][0]["strict"], true);
    let input = bodies[1]["input"].as_array().expect("items").clone();
    let types: Vec<&str> = input.iter().filter_map(|i| i["type"].as_str()).collect();
    assert!(types.contains(&"function_call"), "{input:?}");
    let output = input
        .iter()
        .find(|i| i["type"] == "function_call_output")
        .expect("the function_call_output reached the provider");
    assert_eq!(output["call_id"], v["call"]["call_id"]);
    assert_eq!(output["output"], "sunny, 21 C");
}

/// A stream cut after 20 words on one Responses deployment is resumed on
/// another: the SDK sees one well-formed response (one output item,
/// continuous sequence numbers, the text once, whole).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_sdk_cut_stream_is_resumed_on_another_deployment() {
    let Some(py) = py() else { return };
    let rig = Rig::start(
        "routes:\n  r: [\"resp/cut:after=20\", resp2/gpt-5]
providers:
  - name: resp
    kind: openai
    api: responses
    base_url: {chaos}/v1
    default_model: gpt-5
  - name: resp2
    kind: openai
    api: responses
    base_url: {chaos}/v1
    default_model: gpt-5
",
    )
    .await;
    let v = rig.sdk(&py, "stream", "r").await;
    assert_one_wellformed_stream(&v["stream"], 60);
    assert_eq!(rig.chaos_requests("cut:after=20").await, 1, "cut once");
    assert_eq!(rig.chaos_requests("gpt-5").await, 1, "resumed on resp2");
    // No assistant prefill to a Responses provider: a fresh answer, aligned.
    let bodies = rig.chaos_bodies().await;
    assert_eq!(bodies[1]["input"], bodies[0]["input"], "{bodies:?}");
}

/// A primary answering 503 (a Chat Completions provider) fails over to a
/// Responses provider; the Responses caller gets the whole answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_sdk_fails_over_from_a_503_to_a_responses_fallback() {
    let Some(py) = py() else { return };
    let rig = Rig::start(&format!(
        "routes:\n  r: [chat/error-503, resp/gpt-5]
retry:
  server_error: {{max_attempts: 2, initial_ms: 20, max_ms: 50}}
{RESPONSES_PROVIDER}  - name: chat
    kind: openai
    base_url: {{chaos}}/v1
    default_model: error-503
"
    ))
    .await;
    let v = rig.sdk(&py, "basic", "r").await;
    assert_eq!(v["nonstream"]["text"], words(60).as_str(), "{v}");
    assert_eq!(v["nonstream"]["provider"], "resp");
    assert_one_wellformed_stream(&v["stream"], 60);
    assert_eq!(v["stream"]["provider"], "resp");
    assert!(
        rig.chaos_requests("error-503").await >= 1,
        "the primary was tried"
    );
}

/// A Chat Completions client served by a Responses provider: hale calls
/// `/responses` and answers in Chat Completions' shape.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_completions_client_served_by_a_responses_provider() {
    let Some(py) = py() else { return };
    let rig = Rig::start(&format!("routes:\n  r: [resp/gpt-5]\n{RESPONSES_PROVIDER}")).await;
    let v = rig.sdk(&py, "chat", "r").await;
    let expected = words(60);
    assert_eq!(v["nonstream"]["text"], expected.as_str(), "{v}");
    assert_eq!(v["nonstream"]["finish_reason"], "stop");
    assert_eq!(v["nonstream"]["provider"], "resp");
    assert_eq!(v["nonstream"]["completion_tokens"], 60);
    assert_eq!(v["stream"]["text"], expected.as_str());
    assert_eq!(v["stream"]["chunks"], 60);
    assert_eq!(v["stream"]["finish_reason"], "stop");
    let bodies = rig.chaos_bodies().await;
    assert_eq!(bodies.len(), 2);
    for b in &bodies {
        // A Responses request: `input`, not `messages`.
        assert!(b.get("messages").is_none(), "{b}");
        assert_eq!(b["input"][0]["role"], "user", "{b}");
    }
}

/// A Responses client served by an Anthropic provider: the answer is
/// translated into a `response` object and the Responses event stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_client_served_by_an_anthropic_provider() {
    let Some(py) = py() else { return };
    let rig = Rig::start(
        "routes:\n  r: [anth/claude-x]
providers:
  - name: anth
    kind: anthropic
    base_url: {chaos}
    default_model: claude-x
",
    )
    .await;
    let v = rig.sdk(&py, "basic", "r").await;
    let expected = words(60);
    assert_eq!(v["nonstream"]["text"], expected.as_str(), "{v}");
    assert_eq!(v["nonstream"]["status"], "completed");
    assert_eq!(v["nonstream"]["provider"], "anth");
    assert_eq!(v["nonstream"]["usage"]["output_tokens"], 60);
    assert_one_wellformed_stream(&v["stream"], 60);
    let bodies = rig.chaos_bodies().await;
    for b in &bodies {
        // An Anthropic request: `messages` and `max_tokens`.
        assert_eq!(b["messages"][0]["role"], "user", "{b}");
        assert!(b["max_tokens"].as_u64().is_some(), "{b}");
    }
}

/// Issue 27: a `previous_response_id` conversation survives a failover. Turn
/// 1 is served by the Responses deployment; turn 2 continues it, and its
/// Responses deployment answers 503, so it fails over to an Anthropic one,
/// which gets the whole conversation; turn 3 continues turn 2 (an id hale
/// made) and is back on the Responses deployment, which gets the whole
/// conversation as input items, without the id it never issued. Then
/// `retrieve`, `input_items.list` and `delete` through the SDK; a
/// `store=False` response and an id hale never issued are 404s
/// (`openai.NotFoundError`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_sdk_previous_response_id_survives_a_failover_to_another_kind() {
    let Some(py) = py() else { return };
    let rig = Rig::start(&format!(
        "routes:
  t1: [resp/gpt-5]
  t2: [resp/error-503, anth/claude-x]
  t3: [resp/gpt-5]
retry:
  server_error: {{max_attempts: 2, initial_ms: 20, max_ms: 50}}
{RESPONSES_PROVIDER}  - name: anth
    kind: anthropic
    base_url: {{chaos}}
    default_model: claude-x
"
    ))
    .await;
    let v = rig.sdk(&py, "conversation", "t1,t2,t3").await;
    let text = words(60);
    assert_eq!(v["texts"], serde_json::json!([text, text, text]), "{v}");
    assert_eq!(
        v["providers"],
        serde_json::json!(["resp", "anth", "resp"]),
        "{v}"
    );
    let ids: Vec<&str> = v["ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i.as_str().unwrap())
        .collect();
    // Turn 1: the provider's own id; turn 2 (another kind, streamed): hale's.
    assert!(ids[0].starts_with("resp_chaos_"), "{v}");
    let turn2 = v["turns"][1].as_str().unwrap();
    assert_eq!(ids[1], format!("resp_{turn2}"), "{v}");
    assert!(ids[2].starts_with("resp_"), "{v}");
    assert_eq!(
        v["retrieved"],
        serde_json::json!({"id": ids[1], "text": text, "status": "completed"}),
        "{v}"
    );
    let items = v["input_items"].as_array().unwrap();
    assert_eq!(items.len(), 2, "turn 3's own input: {v}");
    assert!(
        items
            .iter()
            .all(|i| i["type"] == "message" && i["role"] == "user"),
        "{v}"
    );
    assert_eq!(v["first_page"]["n"], 1, "{v}");
    assert_eq!(v["first_page"]["has_more"], true, "{v}");
    assert_eq!(
        v["deleted"],
        serde_json::json!({"id": ids[0], "object": "response", "deleted": true})
    );
    for k in ["after_delete", "unkept", "unknown_previous"] {
        assert_eq!(v[k]["status"], 404, "{k}: {v}");
    }

    // What each deployment was sent.
    let bodies = rig.chaos_bodies().await;
    let of =
        |model: &str| -> Vec<&Value> { bodies.iter().filter(|b| b["model"] == model).collect() };
    // Turn 2 on the deployment holding turn 1: the client's request, id and all.
    let held = of("error-503");
    assert!(!held.is_empty(), "{bodies:?}");
    for b in &held {
        assert_eq!(b["previous_response_id"], ids[0], "{b}");
        assert_eq!(b["input"], "Second question.", "the client's bytes: {b}");
    }
    // Turn 2 on Anthropic: the whole conversation.
    let anth = of("claude-x");
    assert_eq!(anth.len(), 1, "{bodies:?}");
    let texts: Vec<String> = anth[0]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            let c = &m["content"];
            let t = c.as_str().map(str::to_owned).unwrap_or_else(|| {
                c.as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|b| b["text"].as_str())
                    .collect::<Vec<_>>()
                    .join("")
            });
            format!("{}: {t}", m["role"].as_str().unwrap_or(""))
        })
        .collect();
    assert_eq!(
        texts,
        [
            "user: First question.".to_string(),
            format!("assistant: {text}"),
            "user: Second question.".to_string(),
        ],
        "{}",
        anth[0]
    );
    // Turn 3 on the Responses deployment: every earlier turn as input
    // items, no id it never issued.
    let resp = of("gpt-5");
    let turn3 = resp
        .iter()
        .find(|b| b.to_string().contains("Third question."))
        .expect("turn 3 reached the Responses deployment");
    assert!(turn3.get("previous_response_id").is_none(), "{turn3}");
    let input = turn3["input"].as_array().unwrap();
    let said: Vec<String> = input
        .iter()
        .map(|i| {
            let c = &i["content"];
            let t = c.as_str().map(str::to_owned).unwrap_or_else(|| {
                c.as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|p| p["text"].as_str())
                    .collect::<Vec<_>>()
                    .join("")
            });
            format!("{}: {t}", i["role"].as_str().unwrap_or(""))
        })
        .collect();
    assert_eq!(
        said,
        [
            "user: First question.".to_string(),
            format!("assistant: {text}"),
            "user: Second question.".to_string(),
            format!("assistant: {text}"),
            "user: Third question.".to_string(),
            "user: And one more.".to_string(),
        ],
        "{turn3}"
    );
    // The expansion is named in the turn's timeline.
    let turn3_id = v["turns"][2].as_str().unwrap();
    let t = hale_testkit::get_json(&rig.http, &format!("{}/turns/{turn3_id}", rig.base)).await;
    assert!(
        t["timeline"][0]["changes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c == "expanded: previous_response_id (4 items)"),
        "{t}"
    );
    // The unknown id went to the Responses deployment once: its 404 is final.
    let unknown = resp
        .iter()
        .filter(|b| b["previous_response_id"] == "resp_never_issued_by_anyone")
        .count();
    assert_eq!(unknown, 1, "{bodies:?}");
}
