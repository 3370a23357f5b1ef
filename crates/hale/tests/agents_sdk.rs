//! The OpenAI Agents SDK (PyPI `openai-agents`, pinned in scripts/test.sh)
//! through the real `hale serve` → `hale chaos` (issue 27): `Runner.run` and
//! `Runner.run_streamed` with a function tool and the SDK's default
//! Responses model, the SDK's own retries off, complete a tool round trip
//! while the primary deployment answers 503 and the fallback's answer after
//! the tool call is cut once (`tests/sdk/agents_client.py`).
//!
//! chaos plays the model with a script: the fallback's model answers a
//! `get_weather` function call first, then cuts the answer to the
//! `function_call_output` once, then answers text; the cut answer is served
//! again by a second fallback deployment of the same model.
//!
//! Python comes from `HALE_PYTHON`, else `.venv/bin/python` at the workspace
//! root. Without a Python that can `import agents` each test prints why and
//! returns — except under `CI=true`, where that is a failure.

mod common;

use common::*;
use hale_testkit::python_or_skip;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The fallback's model: a tool call, a cut answer, then text.
const SCRIPT: &str = r#"
agents-fb:
  - {fault: "tool:name=get_weather:args=city=Paris", times: 1}
  - {fault: "cut:after=20", times: 1}
  - {fault: ok}
"#;

/// Route `r`: a primary answering 503 for ever, then two Responses
/// deployments of the scripted model.
const CONFIG: &str = "
routes:
  r: [primary/error-503, fb/agents-fb, fb2/agents-fb]
retry:
  server_error: {max_attempts: 2, initial_ms: 20, max_ms: 50}
providers:
  - {name: primary, kind: openai, api: responses, base_url: '{chaos}/v1', default_model: error-503}
  - {name: fb, kind: openai, api: responses, base_url: '{chaos}/v1', default_model: agents-fb}
  - {name: fb2, kind: openai, api: responses, base_url: '{chaos}/v1', default_model: agents-fb}
";

fn py() -> Option<PathBuf> {
    python_or_skip("import agents, openai", "openai-agents")
}

/// Runs the Agents SDK script in `mode` against the rig; its JSON.
async fn run_agent(rig: &ChaosRig, py: &Path, mode: &str) -> Value {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/sdk/agents_client.py");
    let base_url = format!("{}/v1", rig.base);
    let mut cmd = tokio::process::Command::new(py);
    cmd.arg(&script)
        .args([mode, base_url.as_str(), "r"])
        // Nothing of the machine's OpenAI settings reaches the SDK.
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .env("OPENAI_AGENTS_DISABLE_TRACING", "1")
        .kill_on_drop(true);
    let out = tokio::time::timeout(Duration::from_secs(180), cmd.output())
        .await
        .expect("the Agents SDK run ends within 180 s")
        .expect("python runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the Agents SDK run failed:\n{stdout}\n{stderr}\nhale:\n{}",
        rig.hale.stderr()
    );
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

/// What both modes must show: the tool ran once with the model's
/// arguments, its output reached the provider, the final answer is whole,
/// and every fault played.
async fn assert_healed_tool_round_trip(rig: &ChaosRig, v: &Value) {
    assert_eq!(v["tool_calls"], serde_json::json!(["Paris"]), "{v}");
    assert_eq!(
        v["items"],
        serde_json::json!([
            "tool_call_item",
            "tool_call_output_item",
            "message_output_item"
        ]),
        "{v}"
    );
    assert_eq!(v["final_output"], words(60).as_str(), "{v}");
    assert_eq!(v["model_responses"], 2, "{v}");
    assert!(
        rig.chaos_faults("error-503").await >= 1,
        "the primary was tried"
    );
    assert_eq!(rig.chaos_faults("tool").await, 1, "one function call");
    assert_eq!(rig.chaos_faults("cut").await, 1, "the answer was cut once");
    assert_eq!(rig.chaos_faults("ok").await, 1, "and served whole once");
    // The second model call carried the call and its output to the provider.
    let bodies = rig.chaos_bodies().await;
    let last = bodies.last().expect("chaos got requests");
    let input = last["input"].as_array().expect("input items");
    let call = input
        .iter()
        .find(|i| i["type"] == "function_call")
        .expect("the function_call reached the provider");
    assert_eq!(call["name"], "get_weather");
    let output = input
        .iter()
        .find(|i| i["type"] == "function_call_output")
        .expect("the function_call_output reached the provider");
    assert_eq!(output["call_id"], call["call_id"]);
    assert_eq!(output["output"], "sunny, 21 C in Paris");
}

/// `Runner.run` (non-streamed Responses calls): the 503s are retried and
/// failed over, the body cut half way is served again by the second
/// fallback, and the tool round trip completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_sdk_runner_run_completes_a_tool_round_trip_through_faults() {
    let Some(py) = py() else { return };
    let rig = ChaosRig::start(CONFIG, Some(SCRIPT)).await;
    let v = run_agent(&rig, &py, "run").await;
    assert_healed_tool_round_trip(&rig, &v).await;
    for b in rig.chaos_bodies().await {
        assert_ne!(b["stream"], true, "Runner.run does not stream: {b}");
    }
}

/// `Runner.run_streamed`: the stream cut after 20 words is resumed on the
/// second fallback; the SDK sees one whole answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_sdk_runner_run_streamed_completes_a_tool_round_trip_through_faults() {
    let Some(py) = py() else { return };
    let rig = ChaosRig::start(CONFIG, Some(SCRIPT)).await;
    let v = run_agent(&rig, &py, "streamed").await;
    assert_healed_tool_round_trip(&rig, &v).await;
    assert!(v["stream_events"].as_u64().unwrap_or(0) > 0, "{v}");
    for b in rig.chaos_bodies().await {
        assert_eq!(b["stream"], true, "{b}");
    }
}
