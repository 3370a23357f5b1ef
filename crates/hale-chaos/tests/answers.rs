//! Normal answers in both dialects: body shapes, SSE event order, usage,
//! deterministic text, prefill continuation, tool calls, summaries.

mod common;

use common::*;
use hale_chaos::ChaosHandle;
use serde_json::{Value, json};

#[tokio::test]
async fn ok_non_stream_openai_shape() {
    let h = server().await;
    let r = post(&h, D::OpenAi, "ok:tokens=5", false).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-chaos-applied"], "ok");
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["model"], "ok:tokens=5");
    assert!(v["id"].as_str().unwrap().starts_with("chatcmpl-"));
    assert!(v["created"].as_u64().unwrap() > 0);
    assert_eq!(v["choices"][0]["index"], 0);
    assert_eq!(v["choices"][0]["message"]["role"], "assistant");
    assert_eq!(v["choices"][0]["message"]["content"], "w0 w1 w2 w3 w4");
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    let u = &v["usage"];
    assert_eq!(u["completion_tokens"], 5);
    assert!(u["prompt_tokens"].as_u64().unwrap() > 0);
    assert_eq!(
        u["total_tokens"].as_u64().unwrap(),
        u["prompt_tokens"].as_u64().unwrap() + 5
    );
}

#[tokio::test]
async fn ok_non_stream_anthropic_shape() {
    let h = server().await;
    let r = post(&h, D::Anthropic, "claude-sonnet-4", false).await;
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["type"], "message");
    assert_eq!(v["role"], "assistant");
    assert_eq!(v["model"], "claude-sonnet-4");
    assert!(v["id"].as_str().unwrap().starts_with("msg_"));
    assert_eq!(v["content"][0]["type"], "text");
    assert_eq!(v["content"][0]["text"], words(60));
    assert_eq!(v["stop_reason"], "end_turn");
    assert_eq!(v["usage"]["output_tokens"], 60);
    assert!(v["usage"]["input_tokens"].as_u64().unwrap() > 0);
}

#[tokio::test]
async fn same_request_same_text_and_real_model_names_are_ok() {
    let h = server().await;
    for model in ["gpt-4o", "llama3:8b", "chaos"] {
        let a: Value = post(&h, D::OpenAi, model, false)
            .await
            .json()
            .await
            .unwrap();
        let b: Value = post(&h, D::OpenAi, model, false)
            .await
            .json()
            .await
            .unwrap();
        assert_eq!(full_text(D::OpenAi, &a), words(60), "{model}");
        assert_eq!(full_text(D::OpenAi, &a), full_text(D::OpenAi, &b));
    }
}

#[tokio::test]
async fn openai_stream_frames_in_order_with_usage_and_done() {
    let h = server().await;
    let b = body(
        "ok:tokens=4",
        true,
        json!({"stream_options": {"include_usage": true}}),
    );
    let r = send(&h, D::OpenAi, &b).await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "text/event-stream");
    let (text, err) = read_all(r).await;
    assert!(!err);
    let f = parse_sse(&text);
    // role chunk, 4 words, finish chunk, usage chunk, [DONE]
    assert_eq!(f.len(), 8, "{text}");
    let first = f[0].json();
    assert_eq!(first["object"], "chat.completion.chunk");
    assert_eq!(first["model"], "ok:tokens=4");
    assert_eq!(first["choices"][0]["delta"]["role"], "assistant");
    assert_eq!(openai_pieces(&f), ["w0", " w1", " w2", " w3"]);
    let fin = f[5].json();
    assert_eq!(fin["choices"][0]["finish_reason"], "stop");
    assert_eq!(fin["choices"][0]["delta"], json!({}));
    let usage = f[6].json();
    assert_eq!(usage["choices"], json!([]));
    assert_eq!(usage["usage"]["completion_tokens"], 4);
    assert_eq!(f[7].data, "[DONE]");
}

#[tokio::test]
async fn openai_stream_without_include_usage_has_no_usage_chunk() {
    let h = server().await;
    let (text, _) = read_all(post(&h, D::OpenAi, "ok:tokens=2", true).await).await;
    let f = parse_sse(&text);
    assert_eq!(f.len(), 5, "{text}");
    assert_eq!(f[3].json()["choices"][0]["finish_reason"], "stop");
    assert_eq!(f[4].data, "[DONE]");
    assert!(f.iter().all(|x| x.json().get("usage").is_none()));
}

#[tokio::test]
async fn anthropic_stream_event_order() {
    let h = server().await;
    let (text, err) = read_all(post(&h, D::Anthropic, "ok:tokens=3", true).await).await;
    assert!(!err);
    let f = parse_sse(&text);
    assert_eq!(
        events(&f),
        [
            "message_start",
            "content_block_start",
            "ping",
            "content_block_delta",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ]
    );
    for fr in &f {
        assert_eq!(
            fr.json()["type"],
            fr.event.as_deref().unwrap(),
            "type matches event"
        );
    }
    let start = f[0].json();
    assert_eq!(start["message"]["model"], "ok:tokens=3");
    assert!(start["message"]["usage"]["input_tokens"].as_u64().unwrap() > 0);
    assert_eq!(f[1].json()["content_block"]["type"], "text");
    assert_eq!(anthropic_pieces(&f), ["w0", " w1", " w2"]);
    let md = f[7].json();
    assert_eq!(md["delta"]["stop_reason"], "end_turn");
    assert_eq!(md["usage"]["output_tokens"], 3);
}

#[tokio::test]
async fn max_tokens_cuts_with_length_finish() {
    let h = server().await;
    let b = body("ok:tokens=10", false, json!({"max_tokens": 3}));
    let v: Value = send(&h, D::OpenAi, &b).await.unwrap().json().await.unwrap();
    assert_eq!(full_text(D::OpenAi, &v), "w0 w1 w2");
    assert_eq!(v["choices"][0]["finish_reason"], "length");
    let v: Value = send(&h, D::Anthropic, &b)
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["stop_reason"], "max_tokens");
}

fn prefill_body(model: &str, stream: bool, prefill: &str) -> Value {
    body(
        model,
        stream,
        json!({"messages": [
            {"role": "user", "content": "hello"},
            {"role": "assistant", "content": prefill},
        ]}),
    )
}

#[tokio::test]
async fn prefill_continues_the_deterministic_text() {
    let h = server().await;
    for d in BOTH {
        let r = send(&h, d, &prefill_body("ok:tokens=5", true, "w0 w1"))
            .await
            .unwrap();
        let (text, _) = read_all(r).await;
        assert_eq!(pieces(d, &parse_sse(&text)), [" w2", " w3", " w4"], "{d:?}");

        let r = send(&h, d, &prefill_body("ok:tokens=5", false, "w0 w1 w"))
            .await
            .unwrap();
        let v: Value = r.json().await.unwrap();
        assert_eq!(full_text(d, &v), "2 w3 w4", "{d:?}");

        // Anthropic-style block content works too.
        let b = body(
            "ok:tokens=4",
            false,
            json!({"messages": [
                {"role": "user", "content": "hello"},
                {"role": "assistant", "content": [{"type": "text", "text": "w0 w1 "}]},
            ]}),
        );
        let v: Value = send(&h, d, &b).await.unwrap().json().await.unwrap();
        assert_eq!(full_text(d, &v), "w2 w3", "{d:?}");
    }
}

#[tokio::test]
async fn prefill_that_is_not_a_prefix_gets_the_full_text() {
    let h = server().await;
    let v: Value = send(
        &h,
        D::Anthropic,
        &prefill_body("ok:tokens=3", false, "Sure,"),
    )
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    assert_eq!(full_text(D::Anthropic, &v), "w0 w1 w2");
}

#[tokio::test]
async fn tool_call_openai_both_modes() {
    let h = server().await;
    let model = r#"tool:name=edit_file:args={"path":"a.rs"}"#;
    let v: Value = post(&h, D::OpenAi, model, false)
        .await
        .json()
        .await
        .unwrap();
    let msg = &v["choices"][0]["message"];
    assert_eq!(msg["content"], Value::Null);
    let call = &msg["tool_calls"][0];
    assert_eq!(call["type"], "function");
    assert!(call["id"].as_str().unwrap().starts_with("call_"));
    assert_eq!(call["function"]["name"], "edit_file");
    assert_eq!(call["function"]["arguments"], r#"{"path":"a.rs"}"#);
    assert_eq!(v["choices"][0]["finish_reason"], "tool_calls");

    let (text, _) = read_all(post(&h, D::OpenAi, model, true).await).await;
    let f = parse_sse(&text);
    let head = f[0].json();
    assert_eq!(
        head["choices"][0]["delta"]["tool_calls"][0]["function"]["name"],
        "edit_file"
    );
    let args: String = f
        .iter()
        .filter_map(|x| {
            x.json()["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"]
                .as_str()
                .map(str::to_owned)
        })
        .collect();
    assert_eq!(args, r#"{"path":"a.rs"}"#);
    assert_eq!(
        f[f.len() - 2].json()["choices"][0]["finish_reason"],
        "tool_calls"
    );
    assert_eq!(f[f.len() - 1].data, "[DONE]");
}

#[tokio::test]
async fn tool_call_anthropic_both_modes() {
    let h = server().await;
    let model = "tool:name=read_file:args=path=a.rs";
    let v: Value = post(&h, D::Anthropic, model, false)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(v["content"][0]["type"], "tool_use");
    assert_eq!(v["content"][0]["name"], "read_file");
    assert_eq!(v["content"][0]["input"], json!({"path": "a.rs"}));
    assert_eq!(v["stop_reason"], "tool_use");

    let (text, _) = read_all(post(&h, D::Anthropic, model, true).await).await;
    let f = parse_sse(&text);
    assert_eq!(f[1].json()["content_block"]["type"], "tool_use");
    assert_eq!(f[1].json()["content_block"]["name"], "read_file");
    let json: String = f
        .iter()
        .filter_map(|x| {
            let v = x.json();
            (v["delta"]["type"] == "input_json_delta")
                .then(|| v["delta"]["partial_json"].as_str().unwrap().to_owned())
        })
        .collect();
    let parsed: Value = serde_json::from_str(&json).unwrap();
    assert_eq!(parsed, json!({"path": "a.rs"}));
    let ev = events(&f);
    assert_eq!(ev[ev.len() - 2], "message_delta");
    assert_eq!(f[f.len() - 2].json()["delta"]["stop_reason"], "tool_use");
    assert_eq!(ev[ev.len() - 1], "message_stop");
}

#[tokio::test]
async fn summaries_answer_hales_compaction_mark_and_the_fault_not_the_word() {
    let h = server().await;
    let conv = json!({"messages": [
        {"role": "system", "content": "Please SUMMARISE the conversation."},
        {"role": "user", "content": "fix the failing test in parser.rs now please"},
        {"role": "assistant", "content": "w0 w1 w2"},
        {"role": "user", "content": "go on"},
    ]});
    let b = body("gpt-4o", false, conv);
    // A prompt that asks for a summary (Claude Code's does) is no
    // compaction request: the plain answer.
    let v: Value = send(&h, D::OpenAi, &b).await.unwrap().json().await.unwrap();
    assert_eq!(full_text(D::OpenAi, &v), words(60));
    // hale's compaction mark is, in either dialect.
    for d in BOTH {
        let r = send_marked(&h, d, &b).await;
        let v: Value = r.json().await.unwrap();
        // A system message inside `messages` is left out, as it is of the summary.
        let want =
            "Summary of 3 messages: user: fix the failing test; assistant: w0 w1 w2; user: go on";
        assert_eq!(full_text(d, &v), want, "{d:?}");
    }
    // And the explicit fault.
    let b = body(
        "summarize",
        false,
        json!({"messages": [{"role": "user", "content": "a b c d e f"}]}),
    );
    let v: Value = send(&h, D::Anthropic, &b)
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        full_text(D::Anthropic, &v),
        "Summary of 1 messages: user: a b c d"
    );
    let b = body(
        "gpt-4o",
        false,
        json!({"system": "Summarize this.", "messages": [{"role": "user", "content": "x y"}]}),
    );
    let v: Value = send(&h, D::Anthropic, &b)
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(full_text(D::Anthropic, &v), words(60));
}

/// `send` with hale's compaction mark.
async fn send_marked(h: &ChaosHandle, d: D, b: &Value) -> reqwest::Response {
    let mut rb = client()
        .post(url(h, d))
        .json(b)
        .header(hale_chaos::COMPACTION_HEADER, "1");
    rb = match d {
        D::Anthropic => rb
            .header("anthropic-version", "2023-06-01")
            .header("x-api-key", "k"),
        D::OpenAi => rb.bearer_auth("k"),
    };
    rb.send().await.unwrap()
}

#[tokio::test]
async fn models_lists_faults_in_each_dialect() {
    let h = server().await;
    let v: Value =
        hale_testkit::get_json(&client(), &format!("{}/models", h.base_url_openai)).await;
    assert_eq!(v["object"], "list");
    assert!(
        v["data"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["id"] == "rate-limit")
    );
    let v: Value = client()
        .get(format!("{}/v1/models", h.base_url_anthropic))
        .header("anthropic-version", "2023-06-01")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["data"][0]["type"], "model");
    assert_eq!(v["has_more"], false);
}
