//! Gemini as a client dialect through the real `hale serve` → `hale chaos`
//! (issue 29 §4): the official `google-genai` Python SDK
//! (`tests/sdk/genai_client.py`) calling hale's `/v1beta/models/{model}:…`
//! routes (and `/v1/…` with `api_version="v1"`), served by OpenAI-kind and
//! Anthropic-kind deployments behind a Gemini primary that answers 503:
//! `generate_content`, `generate_content_stream`, `count_tokens`, a
//! function-call round trip, a stream cut resumed on another kind; and
//! plain HTTP for what the SDK does not show — Google's error shape for
//! hale's own refusals, the model lists, and the key in `x-goog-api-key`
//! or `?key=`.
//!
//! Python comes from `HALE_PYTHON`, else `.venv/bin/python` at the
//! workspace root. Without a Python that can `from google import genai`
//! the SDK tests print why and return — except under `CI=true`, where that
//! is a failure.

mod common;

use common::*;
use hale_testkit::python_or_skip;
use serde_json::{Value, json};
use std::path::PathBuf;

/// The key hale sends its Gemini primary (chaos checks that one is sent).
const KEY_ENV: &str = "HALE_TEST_GEMINI_KEY";

const PROVIDERS: &str = "
providers:
  - name: primary
    kind: gemini
    base_url: {chaos}/v1beta
    api_key_env: HALE_TEST_GEMINI_KEY
    default_model: error-503
  - {name: oa, kind: openai, base_url: '{chaos}/v1', default_model: chat-ok}
  - {name: an, kind: anthropic, base_url: '{chaos}', default_model: claude-ok}
retry:
  server_error: {max_attempts: 2, initial_ms: 20, max_ms: 50}
";

/// chaos and hale with `routes` (YAML lines under `routes:`) over [`PROVIDERS`],
/// and `extra` YAML after.
async fn rig(routes: &str, extra: &str) -> ChaosRig {
    let config = format!("routes:\n{routes}{PROVIDERS}{extra}");
    ChaosRig::start_with(&config, &[], &[(KEY_ENV, "k-gemini-test")]).await
}

fn py() -> Option<PathBuf> {
    python_or_skip("from google import genai", "google-genai")
}

/// The text of every user message chaos's OpenAI-kind bodies carried.
fn user_texts(b: &Value) -> Vec<String> {
    b["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["role"] == "user")
        .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn google_genai_generates_streams_and_counts_through_a_503_on_a_gemini_primary() {
    let Some(py) = py() else { return };
    let rig = rig("  g: [primary/error-503, oa/chat-ok]\n", "").await;
    let v = rig.sdk(&py, "genai_client.py", &["text", "g"]).await;
    let expected = words(60);
    let ns = &v["nonstream"];
    assert_eq!(ns["text"], expected.as_str(), "{v}");
    assert_eq!(ns["finish"], "STOP");
    assert_eq!(ns["usage"]["candidates"], 60, "{v}");
    let s = &v["stream"];
    assert_eq!(s["text"], expected.as_str(), "{v}");
    assert_eq!(s["chunks"], 61, "a chunk per word, then the closing one");
    assert_eq!(s["finish"], "STOP");
    assert_eq!(
        s["usage"]["candidates"], 60,
        "the usage rides on the last chunk"
    );
    // hale's own count of "Tell me something useful." (hale_tokens).
    let count = v["count"].as_u64().expect("a count");
    assert!((5..20).contains(&count), "{v}");
    // api_version v1: /v1/models/g:generateContent.
    assert_eq!(v["v1"]["text"], expected.as_str(), "{v}");

    assert!(
        rig.chaos_requests("error-503").await >= 1,
        "the primary was tried"
    );
    // Three answers, each after the primary's 503: the OpenAI deployment
    // got the client's question (countTokens calls no provider).
    assert_eq!(rig.chaos_requests("chat-ok").await, 3);
    for b in rig
        .chaos_bodies()
        .await
        .iter()
        .filter(|b| b["model"] == "chat-ok")
    {
        assert_eq!(
            user_texts(b),
            vec!["Tell me something useful.".to_string()],
            "{b}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn google_genai_function_call_round_trips_served_by_openai_and_anthropic() {
    let Some(py) = py() else { return };
    let rig = rig(
        "  gt: [primary/error-503, \"oa/tool:name=get_weather:times=1:args=city=Paris\"]
  gts: [primary/error-503, \"an/tool:name=get_weather:times=1:tokens=61:args=city=Rome\"]
",
        "",
    )
    .await;
    let v = rig
        .sdk(&py, "genai_client.py", &["tool", "gt", "gts"])
        .await;
    for (mode, city, n) in [("nonstream", "Paris", 60), ("stream", "Rome", 61)] {
        let t = &v[mode];
        assert_eq!(t["finish"], "STOP", "{mode}: {v}");
        assert_eq!(t["call"]["name"], "get_weather", "{mode}");
        assert_eq!(t["call"]["args"], json!({"city": city}), "{mode}");
        assert_eq!(t["second_text"], words(n).as_str(), "{mode}: {v}");
        assert_eq!(t["second_finish"], "STOP", "{mode}");
    }
    let bodies = rig.chaos_bodies().await;
    // The function response reached the OpenAI deployment as a tool
    // message answering the call it names.
    let oa = bodies
        .iter()
        .rfind(|b| b["model"] == "tool:name=get_weather:times=1:args=city=Paris")
        .expect("an OpenAI body");
    let msgs = oa["messages"].as_array().unwrap();
    let call_id = msgs
        .iter()
        .find_map(|m| m["tool_calls"][0]["id"].as_str())
        .expect("the call went back");
    let result = msgs
        .iter()
        .find(|m| m["role"] == "tool")
        .expect("the result went back");
    assert_eq!(result["tool_call_id"], call_id, "{oa}");
    assert!(
        result["content"].to_string().contains("sunny, 21 C"),
        "{oa}"
    );
    // And the Anthropic one as a tool_result block.
    let an = bodies
        .iter()
        .rfind(|b| {
            b["model"] == "tool:name=get_weather:times=1:tokens=61:args=city=Rome"
                && b["messages"].as_array().is_some_and(|m| m.len() == 3)
        })
        .expect("an Anthropic body with the result");
    let block = &an["messages"][2]["content"][0];
    assert_eq!(block["type"], "tool_result", "{an}");
    assert_eq!(
        block["tool_use_id"], an["messages"][1]["content"][0]["id"],
        "{an}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_stream_reaches_a_gemini_client_as_one_answer_resumed_on_anthropic() {
    let Some(py) = py() else { return };
    let rig = rig("  gcut: [\"oa/cut:after=20\", an/claude-ok]\n", "").await;
    let v = rig.sdk(&py, "genai_client.py", &["stream", "gcut"]).await;
    let s = &v["stream"];
    assert_eq!(s["text"], words(60).as_str(), "{v}");
    assert_eq!(s["finish"], "STOP", "{v}");
    assert_eq!(rig.chaos_requests("cut:after=20").await, 1, "cut once");
    assert_eq!(rig.chaos_requests("claude-ok").await, 1, "resumed on an");
    // Resumed with the delivered text as the Anthropic prefill.
    let resumed = rig.chaos_bodies().await.pop().expect("bodies");
    let last = resumed["messages"]
        .as_array()
        .and_then(|m| m.last())
        .cloned();
    assert_eq!(
        last.map(|m| m["role"].clone()),
        Some(json!("assistant")),
        "{resumed}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_deployment_down_is_unavailable_in_googles_shape_for_the_sdk() {
    let Some(py) = py() else { return };
    let rig = rig("  down: [primary/error-503]\n", "").await;
    let v = rig.sdk(&py, "genai_client.py", &["error", "down"]).await;
    assert_eq!(v["refused"], true, "{v}");
    assert_eq!(v["code"], 503, "{v}");
    assert_eq!(v["status"], "UNAVAILABLE", "{v}");
}

/// One POST: (status, JSON body).
async fn post(rig: &ChaosRig, path: &str, headers: &[(&str, &str)], body: Value) -> (u16, Value) {
    let mut rb = rig.http.post(format!("{}{path}", rig.base)).json(&body);
    for (k, v) in headers {
        rb = rb.header(*k, *v);
    }
    let r = rb.send().await.expect("hale answers");
    let status = r.status().as_u16();
    let text = r.text().await.expect("a body");
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

async fn get(rig: &ChaosRig, path: &str, headers: &[(&str, &str)]) -> (u16, Value) {
    let mut rb = rig.http.get(format!("{}{path}", rig.base));
    for (k, v) in headers {
        rb = rb.header(*k, *v);
    }
    let r = rb.send().await.expect("hale answers");
    (r.status().as_u16(), r.json().await.expect("JSON"))
}

fn hi() -> Value {
    json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]})
}

/// hale's own refusals on Gemini routes are in Google's error shape with
/// Google's status names: an unknown action (404 NOT_FOUND), a bad body
/// naming its JSON path (400 INVALID_ARGUMENT), a stream form hale does not
/// write (400), a paused agent (423 FAILED_PRECONDITION).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hales_refusals_reach_a_gemini_client_in_googles_shape() {
    let rig = rig("  g: [oa/chat-ok]\n", "").await;
    let e = |v: &Value| (v["error"]["code"].clone(), v["error"]["status"].clone());

    let (s, v) = post(&rig, "/v1beta/models/g:embedContent", &[], hi()).await;
    assert_eq!((s, e(&v)), (404, (json!(404), json!("NOT_FOUND"))), "{v}");

    let bad = json!({"contents": [{"role": "user", "parts": [{"functionCall": {"args": {}}}]}]});
    let (s, v) = post(&rig, "/v1beta/models/g:generateContent", &[], bad).await;
    assert_eq!(
        (s, e(&v)),
        (400, (json!(400), json!("INVALID_ARGUMENT"))),
        "{v}"
    );
    let msg = v["error"]["message"].as_str().unwrap_or_default();
    assert!(
        msg.contains("contents[0].parts[0].functionCall.name"),
        "{v}"
    );

    let (s, v) = post(
        &rig,
        "/v1beta/models/g:streamGenerateContent?alt=proto",
        &[],
        hi(),
    )
    .await;
    assert_eq!(
        (s, e(&v)),
        (400, (json!(400), json!("INVALID_ARGUMENT"))),
        "{v}"
    );
    assert!(v["error"]["message"].to_string().contains("alt=sse"), "{v}");

    let paused = rig
        .http
        .post(format!("{}/agents/gem-agent/pause", rig.base))
        .send()
        .await
        .expect("pause");
    assert!(paused.status().is_success());
    let (s, v) = post(
        &rig,
        "/v1beta/models/g:generateContent",
        &[("x-hale-agent", "gem-agent")],
        hi(),
    )
    .await;
    assert_eq!(
        (s, e(&v)),
        (423, (json!(423), json!("FAILED_PRECONDITION"))),
        "{v}"
    );
    assert_eq!(v["error"]["details"][0]["reason"], "agent_paused", "{v}");

    // Served: the evidence headers, as on every chat route.
    let r = rig
        .http
        .post(format!("{}/v1/models/g:generateContent", rig.base))
        .json(&hi())
        .send()
        .await
        .expect("hale answers");
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(r.headers()["x-hale-provider"], "oa");
    let v: Value = r.json().await.expect("JSON");
    assert_eq!(v["candidates"][0]["content"]["role"], "model", "{v}");
}

/// With keys configured, a Gemini client's key is accepted in
/// `x-goog-api-key` and in `?key=`; a wrong one is refused in Google's
/// shape. `GET /v1/models` answers Google's list to a Google client and
/// OpenAI's to any other; `/v1beta/models` is always Google's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gemini_clients_key_and_model_lists() {
    let rig = ChaosRig::start_with(
        &format!(
            "routes:\n  g: [oa/chat-ok]\n{PROVIDERS}auth:\n  keys:\n    - {{name: gem, token_env: HALE_T_GEM_KEY, agents: [gem]}}\n"
        ),
        &[],
        &[(KEY_ENV, "k-gemini-test"), ("HALE_T_GEM_KEY", "hale-gem-key")],
    )
    .await;
    let (s, v) = post(&rig, "/v1beta/models/g:generateContent", &[], hi()).await;
    assert_eq!(
        (s, &v["error"]["status"]),
        (401, &json!("UNAUTHENTICATED")),
        "{v}"
    );
    let (s, v) = post(
        &rig,
        "/v1beta/models/g:generateContent",
        &[("x-goog-api-key", "wrong")],
        hi(),
    )
    .await;
    assert_eq!(s, 401, "{v}");
    let (s, v) = post(
        &rig,
        "/v1beta/models/g:generateContent",
        &[("x-goog-api-key", "hale-gem-key")],
        hi(),
    )
    .await;
    assert_eq!(s, 200, "{v}");
    let (s, v) = post(
        &rig,
        "/v1beta/models/g:generateContent?key=hale-gem-key",
        &[],
        hi(),
    )
    .await;
    assert_eq!(s, 200, "{v}");
    let (s, v) = post(
        &rig,
        "/v1beta/models/g:countTokens?key=hale-gem-key",
        &[],
        json!({"generateContentRequest": {"model": "models/g", "contents": [{"parts": [{"text": "hi"}]}]}}),
    )
    .await;
    assert_eq!(s, 200, "{v}");
    assert!(v["totalTokens"].as_u64().is_some_and(|n| n > 0), "{v}");

    let goog = [("x-goog-api-key", "hale-gem-key")];
    let (s, v) = get(&rig, "/v1beta/models", &goog).await;
    assert_eq!(s, 200, "{v}");
    let names: Vec<&str> = v["models"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["name"].as_str())
        .collect();
    assert!(names.contains(&"models/g"), "{v}");
    let (_, v) = get(&rig, "/v1/models", &goog).await;
    assert!(
        v["models"].is_array(),
        "Google's list for a Google client: {v}"
    );
    let (_, v) = get(
        &rig,
        "/v1/models",
        &[("authorization", "Bearer hale-gem-key")],
    )
    .await;
    assert_eq!(v["object"], "list", "OpenAI's list for anyone else: {v}");
    let (_, v) = get(&rig, "/v1beta/models/g?key=hale-gem-key", &[]).await;
    assert_eq!(v["name"], "models/g", "{v}");
}

/// A stream asked for without `alt=sse` is Google's default form: one JSON
/// array of the chunks, the last with the finish and the usage.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_without_alt_sse_is_one_json_array_of_chunks() {
    let rig = rig("  g: [primary/error-503, oa/chat-ok]\n", "").await;
    let r = rig
        .http
        .post(format!(
            "{}/v1beta/models/g:streamGenerateContent",
            rig.base
        ))
        .json(&hi())
        .send()
        .await
        .expect("hale answers");
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(r.headers()["content-type"], "application/json");
    let v: Value = r.json().await.expect("one JSON array");
    let chunks = v.as_array().expect("an array");
    let text: String = chunks
        .iter()
        .filter_map(|c| c["candidates"][0]["content"]["parts"][0]["text"].as_str())
        .collect();
    assert_eq!(text, words(60), "{v}");
    let last = chunks.last().expect("chunks");
    assert_eq!(last["candidates"][0]["finishReason"], "STOP", "{last}");
    assert_eq!(last["usageMetadata"]["candidatesTokenCount"], 60, "{last}");
}
