//! Azure OpenAI (`kind: azure`, issue 29) through the real `hale serve`,
//! with `hale chaos --azure-api-key` playing the Azure resource: the
//! official `openai` Python SDK as a Chat Completions client (deployment
//! URLs) and as a Responses client (the v1 API), streamed and not, a tool
//! round trip each; a 429 with Azure's retry headers failing over to an
//! OpenAI provider; a Messages client translated to the Azure deployment;
//! Azure's content filter reaching the client as a content-policy error
//! with no failover.
//!
//! Python comes from `HALE_PYTHON`, else `.venv/bin/python` at the workspace
//! root. Without a Python that can `import openai` each SDK test prints why
//! and returns — except under `CI=true`, where that is a failure.

mod common;

use common::*;
use hale_testkit::python_or_skip;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

/// The key chaos's Azure routes want, and hale reads from `AZ_KEY`.
const KEY: &str = "az-test-key-1";

/// `hale chaos --azure-api-key` and `hale serve` with `config` (`{chaos}` in
/// it is the chaos base URL, the Azure resource endpoint): the shared
/// [`ChaosRig`].
struct Rig(ChaosRig);

impl std::ops::Deref for Rig {
    type Target = ChaosRig;
    fn deref(&self) -> &ChaosRig {
        &self.0
    }
}

impl Rig {
    async fn start(config: &str) -> Rig {
        Rig(ChaosRig::start_with(config, &["--azure-api-key", KEY], &[("AZ_KEY", KEY)]).await)
    }

    /// Runs `script` (under tests/sdk) in `mode` for `model`; its JSON.
    async fn sdk(&self, py: &Path, script: &str, mode: &str, model: &str) -> Value {
        self.0.sdk(py, script, &[mode, model]).await
    }

    async fn requests_for(&self, model: &str) -> u64 {
        self.chaos_requests(model).await
    }
}

fn py() -> Option<PathBuf> {
    python_or_skip("import openai", "openai")
}

/// An Azure provider on deployment URLs; `gpt-4o` served by `deployment`.
fn deployment_provider(deployment: &str) -> String {
    format!(
        "
  - name: az
    kind: azure
    base_url: {{chaos}}
    api_version: 2024-10-21
    api_key_env: AZ_KEY
    default_model: gpt-4o
    deployments: {{gpt-4o: \"{deployment}\"}}
"
    )
}

/// A Chat Completions client on an Azure deployment URL, streamed and not:
/// the deployment in the URL answers (chaos counts requests by it), the
/// body chaos got is the client's (its model kept), and the answers reach
/// the SDK whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_completions_sdk_through_an_azure_deployment() {
    let Some(py) = py() else { return };
    let rig = Rig::start(&format!("providers:{}", deployment_provider("prod-4o"))).await;
    let v = rig.sdk(&py, "responses_client.py", "chat", "gpt-4o").await;
    let expected = words(60);
    assert_eq!(v["nonstream"]["text"], expected.as_str(), "{v}");
    assert_eq!(v["nonstream"]["finish_reason"], "stop");
    assert_eq!(v["nonstream"]["provider"], "az");
    assert_eq!(v["stream"]["text"], expected.as_str(), "{v}");
    assert_eq!(v["stream"]["finish_reason"], "stop");
    assert_eq!(rig.requests_for("prod-4o").await, 2, "the URL's deployment");
    let bodies = rig.chaos_bodies().await;
    assert_eq!(bodies.len(), 2, "{bodies:?}");
    for b in &bodies {
        assert_eq!(b["model"], "gpt-4o", "the client's model, kept: {b}");
        assert_eq!(b["messages"][0]["content"], "Tell me something useful.");
    }
    assert_eq!(bodies[1]["stream"], true);
}

/// A Chat Completions function tool round trip on an Azure deployment: the
/// call streams to the SDK, its result goes back, the answer is text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_completions_sdk_tool_round_trip_through_azure() {
    let Some(py) = py() else { return };
    let rig = Rig::start(&format!(
        "providers:{}",
        deployment_provider("tool:name=get_weather:times=1:args=city=Paris")
    ))
    .await;
    let v = rig.sdk(&py, "azure_client.py", "chat_tool", "gpt-4o").await;
    assert_eq!(v["first_finish"], "tool_calls", "{v}");
    assert_eq!(v["call"]["name"], "get_weather");
    assert_eq!(v["call"]["arguments"], json!({"city": "Paris"}));
    assert_eq!(v["second_text"], words(60).as_str());
    let bodies = rig.chaos_bodies().await;
    assert_eq!(bodies.len(), 2, "{bodies:?}");
    let msgs = bodies[1]["messages"].as_array().expect("messages");
    let tool = msgs
        .iter()
        .find(|m| m["role"] == "tool")
        .expect("tool result");
    assert_eq!(tool["content"], "sunny, 21 C");
    assert_eq!(tool["tool_call_id"], v["call"]["id"]);
}

/// An Azure provider of the Responses API on the v1 API (no
/// `api_version`), with an Entra token from a command; `gpt-5` served by
/// deployment `dep-5`, `tool` by chaos's tool fault.
const V1_RESPONSES: &str = "
routes:
  r: [az/gpt-5]
  t: [\"az/tool\"]
providers:
  - name: az
    kind: azure
    api: responses
    base_url: {chaos}
    auth: entra
    token_command: printf ' %s\\n' \"$AZ_KEY\"
    default_model: gpt-5
    models: [gpt-5, tool]
    deployments: {gpt-5: dep-5, tool: \"tool:name=get_weather:times=1:args=city=Paris\"}
";

/// A Responses client on Azure's v1 API: the body names the deployment
/// (`model`), streamed and not, structured output; the Entra token from
/// the command is what chaos accepts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_sdk_through_the_azure_v1_api() {
    let Some(py) = py() else { return };
    let rig = Rig::start(V1_RESPONSES).await;
    let v = rig.sdk(&py, "responses_client.py", "basic", "r").await;
    let expected = words(60);
    assert_eq!(v["nonstream"]["text"], expected.as_str(), "{v}");
    assert_eq!(v["nonstream"]["status"], "completed");
    assert_eq!(v["nonstream"]["provider"], "az");
    assert_eq!(v["stream"]["text"], expected.as_str(), "{v}");
    assert_eq!(v["stream"]["last"], "response.completed");
    assert_eq!(v["structured"]["text"], expected.as_str());
    let bodies = rig.chaos_bodies().await;
    assert_eq!(bodies.len(), 3, "{bodies:?}");
    for b in &bodies {
        assert_eq!(
            b["model"], "dep-5",
            "the v1 API's body names the deployment: {b}"
        );
    }
    assert_eq!(bodies[2]["text"]["format"]["type"], "json_schema");
}

/// A Responses function tool round trip on Azure's v1 API.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_sdk_tool_round_trip_through_azure() {
    let Some(py) = py() else { return };
    let rig = Rig::start(V1_RESPONSES).await;
    let v = rig.sdk(&py, "responses_client.py", "tool", "t").await;
    assert_eq!(v["call"]["name"], "get_weather", "{v}");
    assert_eq!(v["call"]["arguments"], json!({"city": "Paris"}));
    assert_eq!(v["second_text"], words(60).as_str());
    let bodies = rig.chaos_bodies().await;
    assert_eq!(bodies.len(), 2, "{bodies:?}");
    let input = bodies[1]["input"].as_array().expect("items");
    assert!(
        input.iter().any(|i| i["type"] == "function_call_output"),
        "{input:?}"
    );
}

/// Route [azure primary answering 429 with Azure's retry headers, openai
/// fallback]: both turns are served by the fallback, and the retry-after
/// keeps the Azure deployment out for the next turn (one 429 in all).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_azure_429_fails_over_to_openai_and_keeps_serving() {
    let Some(py) = py() else { return };
    let rig = Rig::start(&format!(
        "routes:\n  r: [az/gpt-4o, oa/chaos]\nproviders:{}  - name: oa\n    kind: openai\n    base_url: {{chaos}}/v1\n    default_model: chaos\n",
        deployment_provider("rate-limit:retry_after=30")
    ))
    .await;
    // Two turns (a third identical one would draw hale's stuck nudge).
    let v = rig.sdk(&py, "responses_client.py", "chat", "r").await;
    assert_eq!(v["nonstream"]["text"], words(60).as_str(), "{v}");
    assert_eq!(v["nonstream"]["provider"], "oa", "{v}");
    assert_eq!(v["stream"]["text"], words(60).as_str(), "{v}");
    assert_eq!(rig.requests_for("rate-limit:retry_after=30").await, 1);
    assert_eq!(rig.requests_for("chaos").await, 2);
}

/// An Anthropic Messages client served by the Azure deployment, streamed
/// and not: hale translates to Chat Completions for Azure and back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_messages_client_is_served_by_an_azure_deployment() {
    let rig = Rig::start(&format!("providers:{}", deployment_provider("prod-4o"))).await;
    let body = json!({"model": "gpt-4o", "max_tokens": 256,
        "messages": [{"role": "user", "content": "hello"}]});
    let r = rig
        .http
        .post(format!("{}/v1/messages", rig.base))
        .header("anthropic-version", "2023-06-01")
        .json(&body)
        .send()
        .await
        .expect("hale answers");
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.expect("json");
    assert_eq!(v["type"], "message", "{v}");
    assert_eq!(v["content"][0]["text"], words(60).as_str(), "{v}");
    assert_eq!(v["stop_reason"], "end_turn");
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let r = rig
        .http
        .post(format!("{}/v1/messages", rig.base))
        .header("anthropic-version", "2023-06-01")
        .json(&streamed)
        .send()
        .await
        .expect("hale answers");
    assert_eq!(r.status(), 200);
    let text = r.text().await.expect("body");
    let deltas: String = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .filter(|e| e["type"] == "content_block_delta")
        .filter_map(|e| e["delta"]["text"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(deltas, words(60), "{text}");
    assert!(text.contains("event: message_stop"), "{text}");
    assert_eq!(rig.requests_for("prod-4o").await, 2);
    for b in rig.chaos_bodies().await {
        assert_eq!(
            b["messages"][0]["role"], "user",
            "a Chat Completions body: {b}"
        );
        assert!(
            b.get("max_tokens").is_some() || b.get("max_completion_tokens").is_some(),
            "{b}"
        );
    }
}

/// Azure's content filter (its 400 `content_filter` with `innererror`)
/// reaches the client as hale's content-policy error, streamed or not, with
/// the filtered category: not retried, not failed over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn azure_content_filter_reaches_the_client_without_failover() {
    let Some(py) = py() else { return };
    let rig = Rig::start(&format!(
        "routes:\n  r: [az/gpt-4o, oa/chaos]\nproviders:{}  - name: oa\n    kind: openai\n    base_url: {{chaos}}/v1\n    default_model: chaos\n",
        deployment_provider("content-filter")
    ))
    .await;
    let v = rig.sdk(&py, "azure_client.py", "refused", "r").await;
    for mode in ["nonstream", "stream"] {
        let got = &v[mode];
        assert_eq!(got["status"], 400, "{mode}: {v}");
        let err = &got["body"];
        let text = err.to_string();
        assert!(text.contains("content_policy"), "{mode}: {text}");
        assert!(text.contains("violence medium"), "{mode}: {text}");
    }
    assert_eq!(rig.requests_for("content-filter").await, 2, "once per call");
    assert_eq!(rig.requests_for("chaos").await, 0, "no failover");
}
