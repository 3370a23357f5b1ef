//! Azure OpenAI's wire (issue 29): deployment URLs with `api-version` and
//! the v1 API, Chat Completions and the Responses API, the `api-key` (or
//! bearer) check, Azure's error shapes and retry headers, and the filter
//! results Azure adds to answers.

mod common;

use common::*;
use hale_chaos::{ChaosConfig, ChaosHandle};
use serde_json::{Value, json};

const KEY: &str = "az-key";

async fn azure_server() -> ChaosHandle {
    server_with(ChaosConfig {
        azure_api_key: Some(KEY.into()),
        ..Default::default()
    })
    .await
}

async fn call(h: &ChaosHandle, path: &str, key: Option<&str>, body: Value) -> reqwest::Response {
    let mut rb = client()
        .post(format!("http://{}{path}", h.addr))
        .json(&body);
    if let Some(k) = key {
        rb = rb.header("api-key", k);
    }
    rb.send().await.expect("chaos answers")
}

fn chat_body(model: &str, stream: bool) -> Value {
    json!({"model": model, "stream": stream, "messages": [{"role": "user", "content": "hi"}]})
}

#[tokio::test]
async fn deployment_urls_answer_as_the_deployment_with_filter_results() {
    let h = azure_server().await;
    let path = "/openai/deployments/prod-4o/chat/completions?api-version=2024-10-21";
    // The body's model is not read: the deployment in the URL answers.
    let r = call(&h, path, Some(KEY), chat_body("anything", false)).await;
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.expect("json");
    assert_eq!(v["model"], "prod-4o");
    assert_eq!(v["object"], "chat.completion");
    assert!(v["prompt_filter_results"].is_array(), "{v}");
    assert!(v["choices"][0]["content_filter_results"].is_object(), "{v}");
    assert_eq!(h.requests_for("prod-4o"), 1);
    // Streamed: the prompt filter chunk comes first, then OpenAI's stream.
    let r = call(&h, path, Some(KEY), chat_body("anything", true)).await;
    let (text, _) = read_all(r).await;
    let first = text.lines().next().expect("a line");
    assert!(first.contains("prompt_filter_results"), "{first}");
    assert!(first.contains(r#""choices":[]"#), "{first}");
    assert!(text.trim_end().ends_with("data: [DONE]"), "{text}");
    // Responses on a deployment URL.
    let r = call(
        &h,
        "/openai/deployments/prod-4o/responses?api-version=2025-04-01-preview",
        Some(KEY),
        json!({"model": "x", "input": "hi"}),
    )
    .await;
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.expect("json");
    assert_eq!(v["object"], "response");
    assert_eq!(v["model"], "prod-4o");
}

#[tokio::test]
async fn the_v1_api_reads_the_model_from_the_body() {
    let h = azure_server().await;
    let r = call(
        &h,
        "/openai/v1/chat/completions",
        Some(KEY),
        chat_body("dep-a", false),
    )
    .await;
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.expect("json");
    assert_eq!(v["model"], "dep-a");
    let r = call(
        &h,
        "/openai/v1/responses",
        Some(KEY),
        json!({"model": "dep-b", "input": "hi"}),
    )
    .await;
    assert_eq!(r.status(), 200);
    assert_eq!(h.requests_for("dep-b"), 1);
}

#[tokio::test]
async fn credentials_and_api_version_are_required() {
    let h = azure_server().await;
    let path = "/openai/deployments/d/chat/completions?api-version=2024-10-21";
    for key in [None, Some("wrong")] {
        let r = call(&h, path, key, chat_body("d", false)).await;
        assert_eq!(r.status(), 401, "{key:?}");
        let v: Value = r.json().await.expect("json");
        assert_eq!(v["error"]["code"], "401");
    }
    // An Entra token stands in as a bearer.
    let r = client()
        .post(format!("http://{}{path}", h.addr))
        .bearer_auth(KEY)
        .json(&chat_body("d", false))
        .send()
        .await
        .expect("answers");
    assert_eq!(r.status(), 200);
    let r = call(
        &h,
        "/openai/deployments/d/chat/completions",
        Some(KEY),
        chat_body("d", false),
    )
    .await;
    assert_eq!(r.status(), 404, "no api-version");
    assert_eq!(h.requests_for("d"), 1, "refused requests reach no fault");
}

#[tokio::test]
async fn faults_answer_in_azure_shapes() {
    let h = azure_server().await;
    let at = |d: &str| format!("/openai/deployments/{d}/chat/completions?api-version=2024-10-21");
    let r = call(
        &h,
        &at("rate-limit:retry_after=2"),
        Some(KEY),
        chat_body("x", false),
    )
    .await;
    assert_eq!(r.status(), 429);
    assert_eq!(r.headers()["retry-after"], "2");
    assert_eq!(r.headers()["retry-after-ms"], "2000");
    assert_eq!(r.headers()["x-ms-retry-after-ms"], "2000");
    let v: Value = r.json().await.expect("json");
    assert_eq!(v["error"]["code"], "429");
    let r = call(&h, &at("content-filter"), Some(KEY), chat_body("x", false)).await;
    assert_eq!(r.status(), 400);
    let v: Value = r.json().await.expect("json");
    assert_eq!(v["error"]["code"], "content_filter");
    assert_eq!(
        v["error"]["innererror"]["code"],
        "ResponsibleAIPolicyViolation"
    );
    assert_eq!(
        v["error"]["innererror"]["content_filter_result"]["violence"]["filtered"],
        true
    );
    for (fault, status, code) in [
        ("error-500", 500, "InternalServerError"),
        ("error-503", 503, "ServiceUnavailable"),
        ("error-529", 503, "ServiceUnavailable"),
        ("auth", 401, "401"),
    ] {
        let r = call(&h, &at(fault), Some(KEY), chat_body("x", false)).await;
        assert_eq!(r.status(), status, "{fault}");
        let v: Value = r.json().await.expect("json");
        assert_eq!(v["error"]["code"], code, "{fault}");
    }
    // A stream fault plays out on Azure's stream as on OpenAI's.
    let r = call(&h, &at("cut:after=3"), Some(KEY), chat_body("x", true)).await;
    let (text, broke) = read_all(r).await;
    assert!(broke, "the stream is cut: {text}");
    assert!(text.contains("prompt_filter_results"), "{text}");
}
