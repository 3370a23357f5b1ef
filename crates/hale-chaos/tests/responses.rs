//! The OpenAI Responses API route (`POST /v1/responses`): the `response`
//! object, the numbered event stream, every fault in its shape, reading
//! `input`/`instructions`/`max_output_tokens`, prefill continuation,
//! `previous_response_id` and request recording.

mod common;

use std::time::{Duration, Instant};

use common::*;
use hale_chaos::ChaosHandle;
use serde_json::{Value, json};

fn rurl(h: &ChaosHandle) -> String {
    format!("{}/responses", h.base_url_openai)
}

/// A Responses request with a string input; `extra` is merged in.
fn rbody(model: &str, stream: bool, extra: Value) -> Value {
    let mut b = json!({"model": model, "stream": stream, "input": "hello"});
    if let (Some(o), Value::Object(e)) = (b.as_object_mut(), extra) {
        o.extend(e);
    }
    b
}

async fn rsend(h: &ChaosHandle, body: &Value) -> reqwest::Result<reqwest::Response> {
    client()
        .post(rurl(h))
        .bearer_auth("k")
        .json(body)
        .send()
        .await
}

async fn rpost(h: &ChaosHandle, model: &str, stream: bool) -> reqwest::Response {
    rsend(h, &rbody(model, stream, json!({}))).await.unwrap()
}

async fn rjson(h: &ChaosHandle, body: &Value) -> (u16, Value) {
    let r = rsend(h, body).await.unwrap();
    let s = r.status().as_u16();
    (s, r.json().await.unwrap_or(Value::Null))
}

/// The event types in order.
fn types(f: &[Frame]) -> Vec<String> {
    f.iter()
        .map(|x| x.event.clone().unwrap_or_default())
        .collect()
}

/// The text deltas, one entry per event (a garbage frame is skipped).
fn deltas(f: &[Frame]) -> Vec<String> {
    f.iter()
        .filter(|x| x.event.as_deref() == Some("response.output_text.delta"))
        .filter_map(|x| x.json()["delta"].as_str().map(str::to_owned))
        .collect()
}

/// Every well-formed event names its type in `data.type` and carries the
/// next `sequence_number`, from 0 without gaps.
fn assert_numbered(f: &[Frame]) {
    let mut want = 0;
    for x in f {
        if x.data == "{not json" {
            continue;
        }
        let v = x.json();
        assert_eq!(v["type"], x.event.as_deref().unwrap(), "{x:?}");
        assert_eq!(v["sequence_number"], want, "{x:?}");
        want += 1;
    }
}

async fn stream_frames(h: &ChaosHandle, body: &Value) -> (Vec<Frame>, String, bool) {
    let r = rsend(h, body).await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "text/event-stream");
    let (text, err) = read_all(r).await;
    (parse_sse(&text), text, err)
}

#[tokio::test]
async fn ok_non_stream_response_object() {
    let h = server().await;
    let b = rbody(
        "ok:tokens=5",
        false,
        json!({"instructions": "Be brief.", "metadata": {"k": "v"}, "max_output_tokens": 100}),
    );
    let r = rsend(&h, &b).await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-chaos-applied"], "ok");
    let v: Value = r.json().await.unwrap();
    assert!(v["id"].as_str().unwrap().starts_with("resp_"), "{v}");
    assert_eq!(v["object"], "response");
    assert!(v["created_at"].as_u64().unwrap() > 0);
    assert_eq!(v["status"], "completed");
    assert_eq!(v["model"], "ok:tokens=5");
    assert_eq!(v["error"], Value::Null);
    assert_eq!(v["incomplete_details"], Value::Null);
    // Request fields the object echoes.
    assert_eq!(v["instructions"], "Be brief.");
    assert_eq!(v["metadata"], json!({"k": "v"}));
    assert_eq!(v["max_output_tokens"], 100);
    assert_eq!(v["previous_response_id"], Value::Null);
    let out = v["output"].as_array().unwrap();
    assert_eq!(out.len(), 1);
    let item = &out[0];
    assert_eq!(item["type"], "message");
    assert!(item["id"].as_str().unwrap().starts_with("msg_"));
    assert_eq!(item["status"], "completed");
    assert_eq!(item["role"], "assistant");
    assert_eq!(
        item["content"],
        json!([{"type": "output_text", "text": "w0 w1 w2 w3 w4", "annotations": [], "logprobs": []}])
    );
    let u = &v["usage"];
    assert!(u["input_tokens"].as_u64().unwrap() > 0);
    assert_eq!(u["input_tokens_details"]["cached_tokens"], 0);
    assert_eq!(u["input_tokens_details"]["cache_write_tokens"], 0);
    assert_eq!(u["output_tokens"], 5);
    assert_eq!(u["output_tokens_details"]["reasoning_tokens"], 0);
    assert_eq!(
        u["total_tokens"].as_u64().unwrap(),
        u["input_tokens"].as_u64().unwrap() + 5
    );
    // Also mounted without the /v1 prefix, like /chat/completions.
    let r = client()
        .post(format!("http://{}/responses", h.addr))
        .json(&rbody("gpt-5", false, json!({})))
        .send()
        .await
        .unwrap();
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["output"][0]["content"][0]["text"], words(60));
}

#[tokio::test]
async fn ok_stream_event_sequence() {
    let h = server().await;
    let (f, text, err) = stream_frames(&h, &rbody("ok:tokens=3", true, json!({}))).await;
    assert!(!err);
    assert_eq!(
        types(&f),
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.delta",
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.completed",
        ]
    );
    assert_numbered(&f);
    assert!(!text.contains("[DONE]"));
    let created = f[0].json();
    assert_eq!(created["response"]["status"], "in_progress");
    assert_eq!(created["response"]["output"], json!([]));
    assert_eq!(created["response"]["usage"], Value::Null);
    let id = created["response"]["id"].as_str().unwrap().to_owned();
    assert_eq!(f[1].json()["response"]["id"], id.as_str());
    let added = f[2].json();
    assert_eq!(added["output_index"], 0);
    assert_eq!(added["item"]["type"], "message");
    assert_eq!(added["item"]["status"], "in_progress");
    assert_eq!(added["item"]["content"], json!([]));
    let item_id = added["item"]["id"].as_str().unwrap().to_owned();
    let part = f[3].json();
    assert_eq!(
        (
            &part["item_id"],
            &part["output_index"],
            &part["content_index"]
        ),
        (&json!(item_id), &json!(0), &json!(0))
    );
    assert_eq!(part["part"]["type"], "output_text");
    assert_eq!(part["part"]["text"], "");
    assert_eq!(deltas(&f), ["w0", " w1", " w2"]);
    for d in &f[4..7] {
        let v = d.json();
        assert_eq!(v["item_id"], item_id.as_str());
        assert_eq!(
            (&v["output_index"], &v["content_index"]),
            (&json!(0), &json!(0))
        );
    }
    assert_eq!(f[7].json()["text"], "w0 w1 w2");
    assert_eq!(f[8].json()["part"]["text"], "w0 w1 w2");
    let done = f[9].json();
    assert_eq!(done["item"]["status"], "completed");
    assert_eq!(done["item"]["content"][0]["text"], "w0 w1 w2");
    let completed = f[10].json();
    let resp = &completed["response"];
    assert_eq!(resp["id"], id.as_str());
    assert_eq!(resp["status"], "completed");
    assert_eq!(resp["output"][0], done["item"]);
    assert_eq!(resp["usage"]["output_tokens"], 3);
    assert!(resp["usage"]["input_tokens"].as_u64().unwrap() > 0);
}

#[tokio::test]
async fn max_output_tokens_answers_incomplete() {
    let h = server().await;
    let b = rbody("ok:tokens=10", false, json!({"max_output_tokens": 3}));
    let (s, v) = rjson(&h, &b).await;
    assert_eq!(s, 200);
    assert_eq!(v["status"], "incomplete");
    assert_eq!(
        v["incomplete_details"],
        json!({"reason": "max_output_tokens"})
    );
    assert_eq!(v["output"][0]["status"], "incomplete");
    assert_eq!(v["output"][0]["content"][0]["text"], "w0 w1 w2");
    assert_eq!(v["usage"]["output_tokens"], 3);

    let b = rbody("ok:tokens=10", true, json!({"max_output_tokens": 3}));
    let (f, _, err) = stream_frames(&h, &b).await;
    assert!(!err);
    assert_numbered(&f);
    assert_eq!(deltas(&f), ["w0", " w1", " w2"]);
    let ty = types(&f);
    assert_eq!(ty.last().unwrap(), "response.incomplete");
    assert!(!ty.iter().any(|t| t == "response.completed"));
    let last = f.last().unwrap().json();
    assert_eq!(last["response"]["status"], "incomplete");
    assert_eq!(
        last["response"]["incomplete_details"]["reason"],
        "max_output_tokens"
    );
    assert_eq!(f[f.len() - 2].json()["item"]["status"], "incomplete");
}

#[tokio::test]
async fn tool_fault_is_a_function_call_item() {
    let h = server().await;
    let model = r#"tool:name=edit_file:args={"path":"a.rs","line":3}"#;
    let args = r#"{"line":3,"path":"a.rs"}"#;
    let (s, v) = rjson(&h, &rbody(model, false, json!({}))).await;
    assert_eq!(s, 200);
    assert_eq!(v["status"], "completed");
    let item = &v["output"][0];
    assert_eq!(item["type"], "function_call");
    assert!(item["id"].as_str().unwrap().starts_with("fc_"));
    assert!(item["call_id"].as_str().unwrap().starts_with("call_"));
    assert_eq!(item["name"], "edit_file");
    assert_eq!(item["status"], "completed");
    let parsed: Value = serde_json::from_str(item["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(parsed, json!({"path": "a.rs", "line": 3}));
    let args = item["arguments"].as_str().unwrap_or(args).to_owned();

    let (f, _, err) = stream_frames(&h, &rbody(model, true, json!({}))).await;
    assert!(!err);
    assert_numbered(&f);
    let ty = types(&f);
    assert_eq!(
        ty[..3],
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added"
        ]
    );
    assert!(
        !ty.iter()
            .any(|t| t.contains("content_part") || t.contains("output_text"))
    );
    let n = ty.len();
    assert_eq!(
        ty[n - 3..],
        [
            "response.function_call_arguments.done",
            "response.output_item.done",
            "response.completed"
        ]
    );
    let added = f[2].json()["item"].clone();
    assert_eq!(added["type"], "function_call");
    assert_eq!(added["arguments"], "");
    assert_eq!(added["status"], "in_progress");
    assert_eq!(added["name"], "edit_file");
    let fc_id = added["id"].as_str().unwrap().to_owned();
    let frags: Vec<String> = f
        .iter()
        .filter(|x| x.event.as_deref() == Some("response.function_call_arguments.delta"))
        .map(|x| {
            let v = x.json();
            assert_eq!(v["item_id"], fc_id.as_str());
            assert_eq!(v["output_index"], 0);
            v["delta"].as_str().unwrap().to_owned()
        })
        .collect();
    assert!(frags.len() > 1, "streamed as fragments: {frags:?}");
    assert_eq!(frags.concat(), args);
    let done = f[n - 3].json();
    assert_eq!(done["arguments"], args.as_str());
    assert_eq!(done["item_id"], fc_id.as_str());
    let item = f[n - 2].json()["item"].clone();
    assert_eq!(item["status"], "completed");
    assert_eq!(item["arguments"], args.as_str());
    assert_eq!(item["call_id"], added["call_id"]);
    let resp = f[n - 1].json()["response"].clone();
    assert_eq!(resp["status"], "completed");
    assert_eq!(resp["output"][0], item);
}

#[tokio::test]
async fn http_errors_have_openai_shapes() {
    let h = server().await;
    let r = rpost(&h, "rate-limit:retry_after=2:times=1", true).await;
    assert_eq!(r.status(), 429);
    assert_eq!(r.headers()["retry-after"], "2");
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], "rate_limit_exceeded");
    assert_eq!(
        rpost(&h, "rate-limit:retry_after=2:times=1", true)
            .await
            .status(),
        200
    );
    let cases = [
        ("error-500", 500, "server_error", Value::Null),
        (
            "error-503",
            503,
            "server_error",
            json!("service_unavailable"),
        ),
        ("error-529", 529, "overloaded_error", json!("overloaded")),
        (
            "context-overflow",
            400,
            "invalid_request_error",
            json!("context_length_exceeded"),
        ),
        (
            "content-filter",
            400,
            "invalid_request_error",
            json!("content_policy_violation"),
        ),
        (
            "auth",
            401,
            "invalid_request_error",
            json!("invalid_api_key"),
        ),
        ("down", 503, "server_error", json!("service_unavailable")),
        (
            "down-until-reset",
            503,
            "server_error",
            json!("service_unavailable"),
        ),
    ];
    for stream in [false, true] {
        for (model, status, ty, code) in &cases {
            let r = rpost(&h, model, stream).await;
            assert_eq!(r.status(), *status, "{model}");
            assert_eq!(r.headers()["x-chaos-applied"], *model);
            let v: Value = r.json().await.unwrap();
            let e = &v["error"];
            assert_eq!(e["type"], *ty, "{model}: {v}");
            assert_eq!(e["code"], *code, "{model}: {v}");
            assert!(e["message"].as_str().unwrap().len() > 5);
            assert!(e.get("param").is_some());
        }
    }
    let (_, v) = rjson(&h, &rbody("context-overflow", false, json!({}))).await;
    assert_eq!(v["error"]["param"], "input");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("context window")
    );
    // flaky: every 2nd request fails.
    let got: Vec<u16> = {
        let mut g = Vec::new();
        for _ in 0..4 {
            g.push(rpost(&h, "flaky:every=2", false).await.status().as_u16());
        }
        g
    };
    assert_eq!(got, [200, 503, 200, 503]);
    // down-until-reset comes up with a reset.
    h.reset();
    assert_eq!(rpost(&h, "down-until-reset", false).await.status(), 200);
}

#[tokio::test]
async fn context_overflow_max_chars_counts_instructions_and_input() {
    let h = server().await;
    let model = "context-overflow:max_chars=100";
    let small = rbody(model, false, json!({"instructions": "x".repeat(50)}));
    let big = rbody(
        model,
        false,
        json!({"instructions": "x".repeat(50), "input": [
            {"role": "user", "content": [{"type": "input_text", "text": "y".repeat(60)}]},
        ]}),
    );
    assert_eq!(rjson(&h, &big).await.0, 400);
    assert_eq!(rjson(&h, &small).await.0, 200);
}

#[tokio::test]
async fn cut_drops_the_stream_after_n_deltas_then_answers_fully() {
    let h = server().await;
    let b = rbody("cut:after=3:tokens=10", true, json!({}));
    let (f, _, err) = stream_frames(&h, &b).await;
    assert!(err, "the body ends in an error, not cleanly");
    assert_numbered(&f);
    assert_eq!(deltas(&f), ["w0", " w1", " w2"]);
    assert_eq!(types(&f).last().unwrap(), "response.output_text.delta");
    assert!(
        !types(&f)
            .iter()
            .any(|t| t.ends_with(".done") || t == "response.completed")
    );
    // The next request (default times=1) is answered fully.
    let (f, _, err) = stream_frames(&h, &b).await;
    assert!(!err);
    assert_numbered(&f);
    assert_eq!(deltas(&f).concat(), words(10));
    assert_eq!(types(&f).last().unwrap(), "response.completed");

    let r = rpost(&h, "cut:tokens=10", false).await;
    assert_eq!(r.status(), 200);
    let (_, err) = read_all(r).await;
    assert!(err, "non-stream: the body is cut");
}

/// `tool:…:cut_after=N`: the function call's stream is dropped after N
/// argument fragments — inside the arguments, with no `.done` — on every
/// request (no default `times`).
#[tokio::test]
async fn a_tool_call_is_cut_inside_its_arguments() {
    let h = server().await;
    // The call whole, without the cut.
    let whole = r#"tool:name=edit_file:args={"path":"src/main.rs","line":42}"#;
    let (f, _, err) = stream_frames(&h, &rbody(whole, true, json!({}))).await;
    assert!(!err);
    assert_eq!(types(&f).last().unwrap(), "response.completed");
    let n = f.len();
    let args = f[n - 1].json()["response"]["output"][0]["arguments"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(args.len(), 32);

    let model = r#"tool:name=edit_file:cut_after=2:args={"path":"src/main.rs","line":42}"#;
    for _ in 0..2 {
        let (f, _, err) = stream_frames(&h, &rbody(model, true, json!({}))).await;
        assert!(err, "the body ends in an error, not cleanly");
        assert_numbered(&f);
        let ty = types(&f);
        assert_eq!(ty[2], "response.output_item.added");
        assert_eq!(f[2].json()["item"]["type"], "function_call");
        let frags: Vec<String> = f
            .iter()
            .filter(|x| x.event.as_deref() == Some("response.function_call_arguments.delta"))
            .map(|x| x.json()["delta"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(frags.len(), 2, "{ty:?}");
        assert_eq!(frags.concat(), args[..16], "two fragments of 8 bytes");
        assert!(
            !ty.iter()
                .any(|t| t.ends_with(".done") || t == "response.completed"),
            "{ty:?}"
        );
    }
}

#[tokio::test]
async fn stall_pauses_then_completes() {
    let h = server().await;
    let t0 = Instant::now();
    let mut r = rpost(&h, "stall:after=2:ms=300:tokens=4", true).await;
    let mut text = String::new();
    let mut two_at = None;
    while let Some(c) = r.chunk().await.unwrap() {
        text.push_str(&String::from_utf8_lossy(&c));
        if two_at.is_none() && deltas(&parse_sse(&text)).len() >= 2 {
            two_at = Some(t0.elapsed());
        }
    }
    let f = parse_sse(&text);
    assert_numbered(&f);
    assert_eq!(deltas(&f).concat(), words(4));
    assert_eq!(types(&f).last().unwrap(), "response.completed");
    assert!(t0.elapsed() >= Duration::from_millis(300));
    assert!(two_at.unwrap() < Duration::from_millis(300));
}

#[tokio::test]
async fn slow_first_token_sends_headers_at_once() {
    let h = server().await;
    let t0 = Instant::now();
    let mut r = rpost(&h, "slow-first-token:ms=300:tokens=2", true).await;
    assert!(t0.elapsed() < Duration::from_millis(300));
    let first = r.chunk().await.unwrap().unwrap();
    assert!(t0.elapsed() >= Duration::from_millis(300));
    assert!(String::from_utf8_lossy(&first).starts_with("event: response.created\n"));
    let t0 = Instant::now();
    let v: Value = rpost(&h, "slow-first-token:ms=200:tokens=2", false)
        .await
        .json()
        .await
        .unwrap();
    assert!(t0.elapsed() >= Duration::from_millis(200));
    assert_eq!(v["output"][0]["content"][0]["text"], "w0 w1");
}

#[tokio::test]
async fn malformed_inserts_one_garbage_frame() {
    let h = server().await;
    let (f, _, err) = stream_frames(&h, &rbody("malformed:at=2:tokens=4", true, json!({}))).await;
    assert!(!err);
    let bad: Vec<usize> = (0..f.len()).filter(|&i| f[i].data == "{not json").collect();
    assert_eq!(bad.len(), 1);
    assert_eq!(deltas(&f[..bad[0]]), ["w0", " w1"]);
    assert_eq!(deltas(&f).concat(), words(4));
    // The garbage takes no number: the events around it stay contiguous.
    assert_numbered(&f);
    assert_eq!(types(&f).last().unwrap(), "response.completed");
    let r = rpost(&h, "malformed", false).await;
    assert_eq!(r.status(), 200);
    assert!(r.json::<Value>().await.is_err(), "not JSON");
}

#[tokio::test]
async fn no_done_ends_without_response_completed() {
    let h = server().await;
    let (f, _, err) = stream_frames(&h, &rbody("no-done:tokens=3", true, json!({}))).await;
    assert!(!err, "clean end");
    assert_numbered(&f);
    assert_eq!(deltas(&f).concat(), words(3));
    assert_eq!(types(&f).last().unwrap(), "response.output_item.done");
    assert!(!types(&f).iter().any(|t| t == "response.completed"));
    let (s, v) = rjson(&h, &rbody("no-done:tokens=3", false, json!({}))).await;
    assert_eq!((s, &v["status"]), (200, &json!("completed")));
}

#[tokio::test]
async fn stream_error_sends_error_then_response_failed() {
    let h = server().await;
    let (f, _, err) = stream_frames(&h, &rbody("stream-error:after=2", true, json!({}))).await;
    assert!(!err);
    assert_numbered(&f);
    assert_eq!(deltas(&f), ["w0", " w1"]);
    let n = f.len();
    assert_eq!(types(&f)[n - 2..], ["error", "response.failed"]);
    let e = f[n - 2].json();
    assert_eq!(e["code"], "server_error");
    assert!(e["message"].as_str().unwrap().contains("error"));
    assert_eq!(e["param"], Value::Null);
    let failed = f[n - 1].json();
    let resp = &failed["response"];
    assert_eq!(resp["status"], "failed");
    assert_eq!(resp["error"]["code"], "server_error");
    assert!(resp["error"]["message"].as_str().is_some());
    assert_eq!(resp["id"], f[0].json()["response"]["id"]);
    // Only one of the two; then ok after the default times=1.
    let (f, _, _) = stream_frames(
        &h,
        &rbody("stream-error:after=1:event=error", true, json!({})),
    )
    .await;
    assert_numbered(&f);
    assert_eq!(types(&f).last().unwrap(), "error");
    assert!(!types(&f).iter().any(|t| t == "response.failed"));
    let b = rbody("stream-error:after=1:event=failed", true, json!({}));
    let (f, _, _) = stream_frames(&h, &b).await;
    assert_numbered(&f);
    assert_eq!(types(&f).last().unwrap(), "response.failed");
    assert!(!types(&f).iter().any(|t| t == "error"));
    let (f, _, _) = stream_frames(&h, &b).await;
    assert_eq!(types(&f).last().unwrap(), "response.completed");
    // A bad value is named.
    let (s, v) = rjson(&h, &rbody("stream-error:event=boom", true, json!({}))).await;
    assert_eq!(s, 400);
    assert!(v["error"]["message"].as_str().unwrap().contains("`event`"));
    // Non-streamed: a normal answer.
    let (s, v) = rjson(&h, &rbody("stream-error:times=5", false, json!({}))).await;
    assert_eq!((s, &v["status"]), (200, &json!("completed")));
}

#[tokio::test]
async fn reset_and_hang() {
    let h = server().await;
    let c = client();
    let e = c
        .post(rurl(&h))
        .json(&rbody("reset:times=1", false, json!({})))
        .send()
        .await
        .expect_err("no response at all");
    assert!(e.status().is_none());
    let r = c
        .post(rurl(&h))
        .json(&rbody("reset:times=1", true, json!({})))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);

    install_provider();
    let c = reqwest::Client::builder()
        .timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let e = c
        .post(rurl(&h))
        .json(&rbody("hang", true, json!({})))
        .send()
        .await
        .expect_err("hang");
    assert!(e.is_timeout(), "{e:?}");
    assert_eq!(h.stats().requests_per_fault["hang"], 1);
}

fn resumed(model: &str, stream: bool, prefill: Value) -> Value {
    rbody(
        model,
        stream,
        json!({"input": [
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hello"}]},
            {"type": "message", "role": "assistant", "content": prefill},
        ]}),
    )
}

#[tokio::test]
async fn a_trailing_assistant_message_is_continued() {
    let h = server().await;
    let parts = json!([{"type": "output_text", "text": "w0 w1", "annotations": []}]);
    let (f, _, _) = stream_frames(&h, &resumed("ok:tokens=5", true, parts)).await;
    assert_numbered(&f);
    assert_eq!(deltas(&f), [" w2", " w3", " w4"]);
    assert_eq!(
        f[f.len() - 1].json()["response"]["usage"]["output_tokens"],
        3
    );
    let (_, v) = rjson(&h, &resumed("ok:tokens=5", false, json!("w0 w1 w"))).await;
    assert_eq!(v["output"][0]["content"][0]["text"], "2 w3 w4");
    // Not a prefix: the full text.
    let (_, v) = rjson(&h, &resumed("ok:tokens=3", false, json!("Sure,"))).await;
    assert_eq!(v["output"][0]["content"][0]["text"], "w0 w1 w2");
}

#[tokio::test]
async fn no_prefill_is_no_error_and_starts_afresh() {
    let h = server().await;
    let r = rsend(&h, &resumed("no-prefill:tokens=4", false, json!("w0 w1")))
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-chaos-applied"], "no-prefill");
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["output"][0]["content"][0]["text"], words(4));
    let (f, _, _) = stream_frames(&h, &resumed("no-prefill:tokens=3", true, json!("w0"))).await;
    assert_eq!(deltas(&f).concat(), words(3));
    // Without a trailing assistant message it is a plain ok.
    let r = rpost(&h, "no-prefill:tokens=2", false).await;
    assert_eq!(r.headers()["x-chaos-applied"], "ok");
}

#[tokio::test]
async fn summaries_read_instructions_and_input_items() {
    let h = server().await;
    let b = rbody(
        "gpt-5",
        false,
        json!({
            "instructions": "Please SUMMARISE the conversation.",
            "input": [
                {"role": "user", "content": "fix the failing test in parser.rs now"},
                {"type": "reasoning", "id": "rs_1", "summary": []},
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "w0 w1 w2"}]},
                {"type": "function_call", "call_id": "call_1", "name": "run", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "call_1", "output": "all tests pass now"},
                {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go on"}]},
            ],
        }),
    );
    // The wording alone is no summary request: the plain answer.
    let (_, v) = rjson(&h, &b).await;
    assert_eq!(v["output"][0]["content"][0]["text"], words(60));
    // hale's compaction mark is.
    let r = client()
        .post(rurl(&h))
        .bearer_auth("k")
        .header(hale_chaos::COMPACTION_HEADER, "1")
        .json(&b)
        .send()
        .await
        .unwrap();
    let v: Value = r.json().await.unwrap();
    assert_eq!(
        v["output"][0]["content"][0]["text"],
        "Summary of 4 messages: user: fix the failing test; assistant: w0 w1 w2; tool: all tests pass now; user: go on"
    );
    let (_, v) = rjson(
        &h,
        &rbody("summarize", false, json!({"input": "a b c d e f"})),
    )
    .await;
    assert_eq!(
        v["output"][0]["content"][0]["text"],
        "Summary of 1 messages: user: a b c d"
    );
}

#[tokio::test]
async fn requests_are_recorded_like_the_other_routes() {
    let h = server().await;
    let b = rbody(
        "gpt-5-codex",
        true,
        json!({"instructions": "sys", "store": false, "include": ["reasoning.encrypted_content"]}),
    );
    rsend(&h, &b).await.unwrap();
    post(&h, D::OpenAi, "gpt-5-codex", false).await;
    assert_eq!(h.requests_for("gpt-5-codex"), 2);
    let s = h.stats();
    assert_eq!(s.requests_total, 2);
    assert_eq!(s.requests_per_fault["ok"], 2);
    let last = h.last_requests();
    assert_eq!(last[0], b);
    assert_eq!(last[0]["include"][0], "reasoning.encrypted_content");
    // The header and overrides pick faults here too.
    let r = client()
        .post(rurl(&h))
        .header("x-chaos-fault", "error-503:times=1")
        .json(&rbody("gpt-5", false, json!({})))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 503);
    h.set_fault("gpt-5", Some("auth"));
    assert_eq!(rpost(&h, "gpt-5", false).await.status(), 401);
    // A body that is not a Responses request is a 400 in the OpenAI shape.
    let r = client()
        .post(rurl(&h))
        .body("[1, 2]")
        .header("content-type", "application/json")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["type"], "invalid_request_error");
}

#[tokio::test]
async fn previous_response_id_must_be_one_this_server_stored() {
    let h = server().await;
    let (_, first) = rjson(&h, &rbody("ok:tokens=2", false, json!({}))).await;
    let id = first["id"].as_str().unwrap();
    let next = rbody(
        "ok:tokens=2",
        false,
        json!({"previous_response_id": id, "input": "and then?"}),
    );
    let (s, v) = rjson(&h, &next).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["previous_response_id"], id);
    // A streamed answer is stored too (its id is in response.created).
    let (f, _, _) = stream_frames(&h, &rbody("ok:tokens=2", true, json!({}))).await;
    let sid = f[0].json()["response"]["id"].as_str().unwrap().to_owned();
    let (s, _) = rjson(&h, &rbody("ok", true, json!({"previous_response_id": sid}))).await;
    assert_eq!(s, 200);
    // Unknown, or answered with store: false: OpenAI's 404.
    let (_, unstored) = rjson(&h, &rbody("ok:tokens=2", false, json!({"store": false}))).await;
    assert_eq!(unstored["store"], false);
    for unknown in ["resp_nope", unstored["id"].as_str().unwrap()] {
        let r = rsend(
            &h,
            &rbody("ok", false, json!({"previous_response_id": unknown})),
        )
        .await
        .unwrap();
        assert_eq!(r.status(), 404);
        assert_eq!(
            r.headers()["x-chaos-applied"],
            "previous-response-not-found"
        );
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["error"]["code"], "previous_response_not_found");
        assert_eq!(v["error"]["param"], "previous_response_id");
        assert_eq!(v["error"]["type"], "invalid_request_error");
    }
    // Another chaos server does not hold this one's responses, and issues other ids.
    assert_eq!(
        h.stats().requests_per_fault["previous-response-not-found"],
        2
    );
    // An error fault fails the request first.
    let (s, _) = rjson(
        &h,
        &rbody(
            "error-503",
            false,
            json!({"previous_response_id": "resp_nope"}),
        ),
    )
    .await;
    assert_eq!(s, 503);
    let other = server().await;
    let (s, v) = rjson(
        &other,
        &rbody("ok", false, json!({"previous_response_id": id})),
    )
    .await;
    assert_eq!(s, 404);
    assert_eq!(v["error"]["code"], "previous_response_not_found");
    let (_, w) = rjson(&other, &rbody("ok:tokens=2", false, json!({}))).await;
    assert_ne!(w["id"], first["id"]);
    assert_ne!(w["output"][0]["id"], first["output"][0]["id"]);
}
