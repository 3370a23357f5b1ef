//! Same-dialect fidelity, end to end (docs/providers.md, "Same dialect: the
//! client's bytes"; issue 9 items 5 and 6).
//!
//! Each test starts a recording provider on loopback: an axum server that
//! keeps the JSON body and the headers of every request it receives and
//! answers a fixed valid response in the dialect of the route it was called
//! on, streaming or not. A caller talks to a real gateway; the evidence is
//! what the provider received, compared with what the caller sent, and the
//! turn's timeline (`GET /turns/{id}`).

mod common;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri, header};
use axum::response::Response;
use common::*;
use futures::StreamExt;
use hale_core::config::{ProviderConfig, ProviderKind};
use serde_json::{Value, json};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The text every recorder answers.
const ANSWER: &str = "recorded answer";

/// One request as the provider received it.
#[derive(Debug, Clone)]
struct Seen {
    body: Value,
    /// The body's bytes as they arrived.
    raw: Bytes,
    headers: HeaderMap,
}

#[derive(Default)]
struct RecState {
    seen: Mutex<Vec<Seen>>,
    /// Requests still to be answered with a 504.
    fail_504_next: AtomicU32,
    /// A non-streaming answer's body, as is, instead of [`full_answer`].
    canned: Mutex<Option<String>>,
    /// Streaming answers, as they are, instead of [`sse_answer`], one per
    /// request in order, the last one repeated: each one's events
    /// (separated by a blank line) sent one at a time, this long apart.
    canned_sse: Mutex<Vec<(String, Duration)>>,
}

/// A provider that records what it receives and answers [`ANSWER`].
struct Recorder {
    addr: String,
    state: Arc<RecState>,
    _served: hale_testkit::Served,
}

impl Recorder {
    async fn start() -> Recorder {
        install_crypto();
        let state = Arc::new(RecState::default());
        let app = axum::Router::new()
            .route("/v1/chat/completions", axum::routing::post(answer))
            .route("/v1/messages", axum::routing::post(answer))
            .with_state(state.clone());
        let served = hale_testkit::serve_stoppable(app).await;
        Recorder {
            addr: served.host(),
            state,
            _served: served,
        }
    }

    fn provider(&self, name: &str, kind: ProviderKind, model: &str) -> ProviderConfig {
        let base = match kind {
            ProviderKind::OpenAi => format!("http://{}/v1", self.addr),
            ProviderKind::Gemini => format!("http://{}/v1beta", self.addr),
            // The resource endpoint (these servers serve no `/openai/…`).
            ProviderKind::Anthropic
            | ProviderKind::Azure
            | ProviderKind::Vertex
            | ProviderKind::Bedrock => {
                format!("http://{}", self.addr)
            }
        };
        with_test_timeouts(ProviderConfig::new(name, kind, &base, model))
    }

    fn seen(&self) -> Vec<Seen> {
        self.state.seen.lock().expect("seen lock").clone()
    }
}

async fn answer(
    State(state): State<Arc<RecState>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let received: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    state.seen.lock().expect("seen lock").push(Seen {
        body: received.clone(),
        raw: body.clone(),
        headers,
    });
    let anthropic = uri.path() == "/v1/messages";
    let model = received["model"].as_str().unwrap_or("").to_owned();
    if take_one(&state.fail_504_next) {
        let mut r = Response::new(Body::from(
            json!({"error": {"message": "upstream request timeout", "type": "server_error"}})
                .to_string(),
        ));
        *r.status_mut() = StatusCode::GATEWAY_TIMEOUT;
        return r;
    }
    let canned_sse = {
        let mut queue = state.canned_sse.lock().expect("canned lock");
        match queue.len() {
            0 => None,
            1 => queue.first().cloned(),
            _ => Some(queue.remove(0)),
        }
    };
    match (received["stream"] == json!(true), canned_sse) {
        (true, Some((text, gap))) => {
            let events: Vec<String> = text.split_inclusive("\n\n").map(str::to_owned).collect();
            let body = futures::stream::iter(events).then(move |e| async move {
                tokio::time::sleep(gap).await;
                Ok::<_, std::convert::Infallible>(e)
            });
            typed(Body::from_stream(body), "text/event-stream")
        }
        (true, None) => typed(
            Body::from(sse_answer(anthropic, &model)),
            "text/event-stream",
        ),
        (false, _) => {
            let canned = state.canned.lock().expect("canned lock").clone();
            let text = canned.unwrap_or_else(|| full_answer(anthropic, &model).to_string());
            typed(Body::from(text), "application/json")
        }
    }
}

/// A 200 of `body` with its content type.
fn typed(body: Body, content_type: &'static str) -> Response {
    let mut r = Response::new(body);
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        axum::http::HeaderValue::from_static(content_type),
    );
    r
}

fn take_one(n: &AtomicU32) -> bool {
    n.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |v| v.checked_sub(1))
        .is_ok()
}

fn full_answer(anthropic: bool, model: &str) -> Value {
    if anthropic {
        json!({"id": "msg_rec", "type": "message", "role": "assistant", "model": model,
               "content": [{"type": "text", "text": ANSWER}],
               "stop_reason": "end_turn", "stop_sequence": null,
               "usage": {"input_tokens": 7, "output_tokens": 2}})
    } else {
        json!({"id": "chatcmpl-rec", "object": "chat.completion", "created": 0, "model": model,
               "choices": [{"index": 0, "message": {"role": "assistant", "content": ANSWER},
                            "finish_reason": "stop"}],
               "usage": {"prompt_tokens": 7, "completion_tokens": 2, "total_tokens": 9}})
    }
}

fn sse_answer(anthropic: bool, model: &str) -> String {
    let frame = |event: Option<&str>, data: Value| match event {
        Some(e) => format!("event: {e}\ndata: {data}\n\n"),
        None => format!("data: {data}\n\n"),
    };
    if anthropic {
        [
            frame(
                Some("message_start"),
                json!({"type": "message_start", "message": {"id": "msg_rec", "type": "message",
                    "role": "assistant", "model": model, "content": [], "stop_reason": null,
                    "stop_sequence": null, "usage": {"input_tokens": 7, "output_tokens": 0}}}),
            ),
            frame(
                Some("content_block_start"),
                json!({"type": "content_block_start", "index": 0,
                       "content_block": {"type": "text", "text": ""}}),
            ),
            frame(
                Some("content_block_delta"),
                json!({"type": "content_block_delta", "index": 0,
                       "delta": {"type": "text_delta", "text": ANSWER}}),
            ),
            frame(
                Some("content_block_stop"),
                json!({"type": "content_block_stop", "index": 0}),
            ),
            frame(
                Some("message_delta"),
                json!({"type": "message_delta", "delta": {"stop_reason": "end_turn",
                       "stop_sequence": null}, "usage": {"output_tokens": 2}}),
            ),
            frame(Some("message_stop"), json!({"type": "message_stop"})),
        ]
        .concat()
    } else {
        let chunk = |delta: Value, finish: Value| {
            json!({"id": "chatcmpl-rec", "object": "chat.completion.chunk", "created": 0,
                   "model": model, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
        };
        [
            frame(
                None,
                chunk(json!({"role": "assistant", "content": ANSWER}), Value::Null),
            ),
            frame(None, chunk(json!({}), json!("stop"))),
            frame(
                None,
                json!({"id": "chatcmpl-rec", "object": "chat.completion.chunk", "created": 0,
                       "model": model, "choices": [],
                       "usage": {"prompt_tokens": 7, "completion_tokens": 2, "total_tokens": 9}}),
            ),
            "data: [DONE]\n\n".to_owned(),
        ]
        .concat()
    }
}

/// The served target's model in every test.
const SERVED: &str = "served-model";

/// `sent` with the model the provider should have received.
fn as_served(sent: &Value) -> Value {
    let mut v = sent.clone();
    v["model"] = json!(SERVED);
    v
}

fn header_values(h: &HeaderMap, name: &str) -> Vec<String> {
    h.get_all(name)
        .iter()
        .map(|v| v.to_str().unwrap_or("").to_owned())
        .collect()
}

/// The `changes` of each timeline row.
fn changes_of(timeline: &[Value]) -> Vec<Vec<String>> {
    timeline
        .iter()
        .map(|r| {
            r["changes"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|c| c.as_str().map(str::to_owned))
                .collect()
        })
        .collect()
}

/// An OpenAI request with what the canonical model does not hold.
fn rich_openai(stream: bool) -> Value {
    let mut b = json!({
        "model": ROUTE,
        "messages": [
            {"role": "developer", "content": [{"type": "text", "text": "Answer in JSON."}]},
            {"role": "user", "name": "alice", "content": [
                {"type": "text", "text": "What is in this picture?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo=", "detail": "high"}}
            ]},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "look", "arguments": "{\"zoom\": 2}"}}
            ]},
            {"role": "tool", "tool_call_id": "call_1", "content": "a cat on a mat"}
        ],
        "tools": [{"type": "function", "function": {"name": "look", "strict": true,
                   "parameters": {"type": "object", "properties": {"zoom": {"type": "integer"}},
                                  "required": ["zoom"], "additionalProperties": false}}}],
        "tool_choice": "auto",
        "parallel_tool_calls": false,
        "response_format": {"type": "json_schema", "json_schema": {"name": "answer", "strict": true,
            "schema": {"type": "object", "properties": {"what": {"type": "string"}}}}},
        "seed": 42,
        "reasoning_effort": "low",
        "max_completion_tokens": 300,
        "temperature": 0.3,
        "logit_bias": {"50256": -100},
        "x_future_field": {"nested": [1, 2.5, "three"], "flag": true}
    });
    if stream {
        b["stream"] = json!(true);
        b["stream_options"] = json!({"include_usage": true});
    }
    b
}

/// An Anthropic request with what the canonical model does not hold.
fn rich_anthropic(stream: bool) -> Value {
    let mut b = json!({
        "model": ROUTE,
        "max_tokens": 2048,
        "system": [
            {"type": "text", "text": "You are a careful assistant."},
            {"type": "text", "text": "Here is the long manual …", "cache_control": {"type": "ephemeral"}}
        ],
        "messages": [
            {"role": "user", "content": [
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
                {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "the contract"},
                 "title": "contract", "citations": {"enabled": true}},
                {"type": "text", "text": "Compare the picture with the contract.", "cache_control": {"type": "ephemeral", "ttl": "1h"}}
            ]},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "Look first.", "signature": "sig-abc"},
                {"type": "tool_use", "id": "toolu_1", "name": "look", "input": {"zoom": 2}}
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "a cat"}],
                 "cache_control": {"type": "ephemeral"}}
            ]}
        ],
        "tools": [{"name": "look", "description": "Zoom in.", "cache_control": {"type": "ephemeral"},
                   "input_schema": {"type": "object", "properties": {"zoom": {"type": "integer"}}}}],
        "tool_choice": {"type": "auto", "disable_parallel_tool_use": true},
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "metadata": {"user_id": "user-7"},
        "top_k": 40,
        "x_future_field": {"nested": [1, 2.5, "three"]}
    });
    if stream {
        b["stream"] = json!(true);
    }
    b
}

/// An OpenAI request reaches an OpenAI provider as the client sent it —
/// every field, part and attribute — except the model, streaming or not;
/// `OpenAI-Beta` is forwarded, the client's credentials and cookies are not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_openai_request_reaches_an_openai_provider_as_sent_except_the_model() {
    for stream in MODES {
        let rec = Recorder::start().await;
        let h = Hale::start(config(vec![rec.provider(
            "p",
            ProviderKind::OpenAi,
            SERVED,
        )]))
        .await;
        let sent = rich_openai(stream);
        let mut call = h
            .openai(ROUTE)
            .header("OpenAI-Beta", "assistants=v2")
            .header("authorization", "Bearer client-secret")
            .header("cookie", "session=client");
        *call.body_mut() = sent.clone();
        let r = call.send().await;
        r.assert_complete(ANSWER);
        let seen = rec.seen();
        assert_eq!(seen.len(), 1, "stream={stream}");
        assert_eq!(seen[0].body, as_served(&sent), "stream={stream}");
        assert_eq!(
            header_values(&seen[0].headers, "openai-beta"),
            ["assistants=v2"]
        );
        assert!(header_values(&seen[0].headers, "authorization").is_empty());
        assert!(header_values(&seen[0].headers, "cookie").is_empty());
        let tl = h.timeline(&r.turn_id).await;
        assert_eq!(changes_of(&tl), [["model"]], "stream={stream}: {tl:?}");
    }
}

/// An Anthropic request reaches an Anthropic provider as the client sent
/// it — `cache_control` on system, message and tool blocks, the system as
/// blocks, `thinking`, `metadata`, image and document blocks, unknown
/// fields — except the model, streaming or not; `anthropic-beta` and the
/// client's `anthropic-version` (over hale's default) are forwarded, the
/// client's `x-api-key` is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_anthropic_request_reaches_an_anthropic_provider_as_sent_except_the_model() {
    for stream in MODES {
        let rec = Recorder::start().await;
        let h = Hale::start(config(vec![rec.provider(
            "p",
            ProviderKind::Anthropic,
            SERVED,
        )]))
        .await;
        let sent = rich_anthropic(stream);
        let mut call = h
            .anthropic(ROUTE)
            .header(
                "anthropic-beta",
                "prompt-caching-2024-07-31,interleaved-thinking-2025-05-14",
            )
            .header("anthropic-version", "2099-01-01")
            .header("x-api-key", "client-secret");
        *call.body_mut() = sent.clone();
        let r = call.send().await;
        r.assert_complete(ANSWER);
        let seen = rec.seen();
        assert_eq!(seen.len(), 1, "stream={stream}");
        assert_eq!(seen[0].body, as_served(&sent), "stream={stream}");
        assert_eq!(
            header_values(&seen[0].headers, "anthropic-beta"),
            ["prompt-caching-2024-07-31,interleaved-thinking-2025-05-14"]
        );
        assert_eq!(
            header_values(&seen[0].headers, "anthropic-version"),
            ["2099-01-01"]
        );
        assert!(header_values(&seen[0].headers, "x-api-key").is_empty());
        let tl = h.timeline(&r.turn_id).await;
        assert_eq!(changes_of(&tl), [["model"]], "stream={stream}: {tl:?}");
    }
}

/// Without the client's `anthropic-version`, hale sends its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_client_anthropic_version_hale_sends_its_default() {
    let rec = Recorder::start().await;
    let h = Hale::start(config(vec![rec.provider(
        "p",
        ProviderKind::Anthropic,
        SERVED,
    )]))
    .await;
    let r = h.anthropic(ROUTE).send().await;
    r.assert_complete(ANSWER);
    assert_eq!(
        header_values(&rec.seen()[0].headers, "anthropic-version"),
        [hale_gateway::upstream::ANTHROPIC_VERSION]
    );
}

/// After a 504 the same target is asked again with only `max_tokens`
/// lowered: everything else is still the client's JSON, and the timeline
/// says what changed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_504_only_max_tokens_changes_and_the_timeline_says_so() {
    let rec = Recorder::start().await;
    rec.state.fail_504_next.store(1, Ordering::SeqCst);
    let mut cfg = config(vec![rec.provider("p", ProviderKind::Anthropic, SERVED)]);
    cfg.retry.server_error.initial = Duration::from_millis(20);
    let h = Hale::start(cfg).await;
    let sent = rich_anthropic(false);
    let mut call = h.anthropic(ROUTE);
    *call.body_mut() = sent.clone();
    let r = call.send().await;
    r.assert_complete(ANSWER);
    let seen = rec.seen();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[0].body, as_served(&sent));
    let mut lowered = as_served(&sent);
    lowered["max_tokens"] = seen[1].body["max_tokens"].clone();
    assert!(
        seen[1].body["max_tokens"].as_u64() < Some(2048),
        "{}",
        seen[1].body
    );
    assert_eq!(seen[1].body, lowered);
    let tl = h.timeline(&r.turn_id).await;
    assert_eq!(
        changes_of(&tl),
        [vec!["model"], vec!["model", "max_tokens"]],
        "{tl:?}"
    );
}

/// Crossing dialects, what has an equivalent is mapped and what has none is
/// dropped — and the timeline lists what was dropped: Anthropic → OpenAI
/// loses `cache_control`, `thinking`, `metadata`, the document block and the
/// `anthropic-beta` header; OpenAI → Anthropic loses `response_format`,
/// `seed`, `reasoning_effort`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cross_dialect_request_lists_what_was_dropped_in_the_timeline() {
    for stream in MODES {
        // Anthropic caller, OpenAI provider.
        let rec = Recorder::start().await;
        let h = Hale::start(config(vec![rec.provider(
            "p",
            ProviderKind::OpenAi,
            SERVED,
        )]))
        .await;
        let mut call = h
            .anthropic(ROUTE)
            .header("anthropic-beta", "prompt-caching-2024-07-31");
        *call.body_mut() = rich_anthropic(stream);
        let r = call.send().await;
        r.assert_complete(ANSWER);
        let got = &rec.seen()[0];
        assert!(
            !got.body.to_string().contains("cache_control"),
            "{}",
            got.body
        );
        assert!(got.body.get("thinking").is_none());
        assert!(header_values(&got.headers, "anthropic-beta").is_empty());
        // The image was mapped, not dropped.
        assert!(
            got.body
                .to_string()
                .contains("data:image/png;base64,iVBORw0KGgo=")
        );
        let tl = h.timeline(&r.turn_id).await;
        let changes = &changes_of(&tl)[0];
        for want in [
            "model",
            "dropped: cache_control",
            "dropped: thinking",
            "dropped: metadata",
            "dropped: top_k",
            "dropped: x_future_field",
            "dropped: document block",
            "dropped: thinking block",
            "dropped: tool_choice.disable_parallel_tool_use",
            "dropped: anthropic-beta header",
        ] {
            assert!(
                changes.iter().any(|c| c == want),
                "stream={stream}: {want} not in {changes:?}"
            );
        }
        assert!(!changes.iter().any(|c| c.contains("image")), "{changes:?}");

        // OpenAI caller, Anthropic provider.
        let rec = Recorder::start().await;
        let h = Hale::start(config(vec![rec.provider(
            "p",
            ProviderKind::Anthropic,
            SERVED,
        )]))
        .await;
        let mut call = h.openai(ROUTE).header("OpenAI-Beta", "assistants=v2");
        *call.body_mut() = rich_openai(stream);
        let r = call.send().await;
        r.assert_complete(ANSWER);
        let got = &rec.seen()[0];
        for gone in ["response_format", "seed", "reasoning_effort"] {
            assert!(got.body.get(gone).is_none(), "{gone}: {}", got.body);
        }
        assert_eq!(
            got.body["max_tokens"], 300,
            "max_completion_tokens is mapped"
        );
        let tl = h.timeline(&r.turn_id).await;
        let changes = &changes_of(&tl)[0];
        for want in [
            "model",
            "dropped: response_format",
            "dropped: seed",
            "dropped: reasoning_effort",
            "dropped: parallel_tool_calls",
            "dropped: logit_bias",
            "dropped: x_future_field",
            "dropped: messages[].name",
            "dropped: image_url.detail",
            "dropped: tools[].function.strict",
            "dropped: openai-beta header",
        ] {
            assert!(
                changes.iter().any(|c| c == want),
                "stream={stream}: {want} not in {changes:?}"
            );
        }
        assert!(
            !changes.iter().any(|c| c.contains("max_completion_tokens")),
            "{changes:?}"
        );
    }
}

/// A provider on a raw socket that answers its first request with a
/// `Content-Length` of N, N/2 bytes of a valid body, and a closed
/// connection; every later request with the whole body.
struct CutOnce {
    addr: String,
    requests: Arc<AtomicU32>,
    _task: tokio::task::JoinHandle<()>,
}

impl CutOnce {
    async fn start(kind: ProviderKind) -> CutOnce {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        let requests = Arc::new(AtomicU32::new(0));
        let count = requests.clone();
        let anthropic = kind == ProviderKind::Anthropic;
        let task = tokio::spawn(async move {
            while let Ok((mut sock, _)) = listener.accept().await {
                // Read the request head and its Content-Length body.
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                let head_end = loop {
                    let Ok(n) = sock.read(&mut chunk).await else {
                        break None;
                    };
                    if n == 0 {
                        break None;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        break Some(i + 4);
                    }
                };
                let Some(head_end) = head_end else { continue };
                let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
                let len: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse().ok())
                    .unwrap_or(0);
                while buf.len() < head_end + len {
                    match sock.read(&mut chunk).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
                let n = count.fetch_add(1, Ordering::SeqCst);
                let body = full_answer(anthropic, SERVED).to_string().into_bytes();
                let head = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                    body.len()
                );
                let sent = if n == 0 {
                    &body[..body.len() / 2]
                } else {
                    &body[..]
                };
                let _ = sock.write_all(head.as_bytes()).await;
                let _ = sock.write_all(sent).await;
                let _ = sock.flush().await;
                let _ = sock.shutdown().await;
            }
        });
        CutOnce {
            addr,
            requests,
            _task: task,
        }
    }

    fn provider(&self, name: &str, kind: ProviderKind) -> ProviderConfig {
        let base = match kind {
            ProviderKind::OpenAi => format!("http://{}/v1", self.addr),
            ProviderKind::Gemini => format!("http://{}/v1beta", self.addr),
            // The resource endpoint (these servers serve no `/openai/…`).
            ProviderKind::Anthropic
            | ProviderKind::Azure
            | ProviderKind::Vertex
            | ProviderKind::Bedrock => {
                format!("http://{}", self.addr)
            }
        };
        let mut p = ProviderConfig::new(name, kind, &base, SERVED);
        p.timeout = TEST_TIMEOUT;
        p
    }
}

/// A non-streaming answer whose body is cut half way (Content-Length N,
/// the connection closed after N/2 bytes) before hale read it all — nothing
/// reached the caller — is retried on the same target, which answers: the
/// caller gets 200 and the timeline shows two attempts on that target.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_non_streaming_body_cut_midway_is_retried_on_the_same_target() {
    for kind in [ProviderKind::OpenAi, ProviderKind::Anthropic] {
        let cut = CutOnce::start(kind).await;
        let backup = Recorder::start().await;
        let mut cfg = config(vec![
            cut.provider("primary", kind),
            backup.provider("backup", kind, SERVED),
        ]);
        cfg.retry.network.initial = Duration::from_millis(20);
        let h = Hale::start(cfg).await;
        let r = h.openai(ROUTE).send().await;
        r.assert_complete(ANSWER);
        assert_eq!(r.provider, "primary", "{kind:?}");
        assert_eq!(
            cut.requests.load(Ordering::SeqCst),
            2,
            "{kind:?}: cut, then answered"
        );
        assert_eq!(
            backup.seen().len(),
            0,
            "{kind:?}: the backup was not needed"
        );
        let tl = h.timeline(&r.turn_id).await;
        let target = format!("primary/{SERVED}");
        assert_eq!(targets_of(&tl), [target.clone(), target], "{tl:?}");
        assert_eq!(classes_of(&tl), ["network", "ok"], "{tl:?}");
        assert!(
            tl[0]["message"].as_str().unwrap_or("").contains("body"),
            "{tl:?}"
        );
    }
}

/// Issue 13: a turn in one dialect that hale changes nothing in passes
/// bytes, not JSON re-encoded. The provider receives the very bytes the
/// client sent (spacing, key order, `0.70`), and the client receives the
/// very bytes the provider answered — with what hale's canonical answer
/// does not hold: every choice, `logprobs`, `system_fingerprint`, usage
/// details (OpenAI); thinking blocks, `stop_sequence`, cache usage
/// (Anthropic). A patched request (the model) still gets the provider's
/// own answer; a caller of the other dialect gets hale's rendering.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untouched_turn_passes_the_clients_and_the_providers_bytes() {
    let openai_answer = r#"{"id":"chatcmpl-9","object":"chat.completion","created":1700000000,
 "model":"served-model","system_fingerprint":"fp_44709d6fcb","service_tier":"default",
 "choices":[{"index":0,"message":{"role":"assistant","content":"recorded answer","refusal":null,
   "annotations":[]},"logprobs":{"content":[{"token":"rec","logprob":-0.25,"bytes":[114,101,99],
   "top_logprobs":[]}]},"finish_reason":"stop"},
  {"index":1,"message":{"role":"assistant","content":"second choice"},"logprobs":null,
   "finish_reason":"length"}],
 "usage":{"prompt_tokens":7,"completion_tokens":2,"total_tokens":9,
   "prompt_tokens_details":{"cached_tokens":4,"audio_tokens":0}}}"#;
    let anthropic_answer = r#"{"id":"msg_9","type":"message","role":"assistant","model":"served-model",
 "content":[{"type":"thinking","thinking":"Look first.","signature":"sig-abc"},
  {"type":"text","text":"recorded answer","citations":null}],
 "stop_reason":"stop_sequence","stop_sequence":"END",
 "usage":{"input_tokens":7,"output_tokens":2,"cache_creation_input_tokens":3,"cache_read_input_tokens":4}}"#;
    let openai_request = r#"{ "temperature": 0.70, "model": "served-model",
   "messages": [ {"role": "user", "content": "hi"} ], "n": 2, "logprobs": true }"#;
    let anthropic_request = r#"{ "max_tokens": 64, "model": "served-model",
   "messages": [ {"role": "user", "content": [{"type": "text", "text": "hi"}]} ],
   "thinking": {"type": "enabled", "budget_tokens": 1024}, "top_k": 40.0 }"#;
    for (kind, path, request, answer) in [
        (
            ProviderKind::OpenAi,
            "/v1/chat/completions",
            openai_request,
            openai_answer,
        ),
        (
            ProviderKind::Anthropic,
            "/v1/messages",
            anthropic_request,
            anthropic_answer,
        ),
    ] {
        let rec = Recorder::start().await;
        *rec.state.canned.lock().expect("canned lock") = Some(answer.to_owned());
        let mut cfg = config(vec![rec.provider("p", kind, SERVED)]);
        cfg.routes.insert(
            SERVED.to_owned(),
            vec![hale_core::config::Target {
                provider: "p".into(),
                model: SERVED.into(),
            }],
        );
        let h = Hale::start(cfg).await;
        let post = |body: String| {
            h.http
                .post(format!("{}{path}", h.base))
                .header("content-type", "application/json")
                .header("anthropic-version", "2023-06-01")
                .body(body)
                .send()
        };
        let r = post(request.to_owned()).await.expect("call");
        assert_eq!(r.status(), 200, "{kind:?}");
        assert_eq!(
            r.headers()["x-hale-model"].to_str().expect("header"),
            SERVED
        );
        let got = r.bytes().await.expect("body");
        assert_eq!(
            std::str::from_utf8(&got).expect("utf-8"),
            answer,
            "{kind:?}"
        );
        assert_eq!(
            std::str::from_utf8(&rec.seen()[0].raw).expect("utf-8"),
            request,
            "{kind:?}"
        );

        // The model patched: the provider gets hale's JSON of the request,
        // the caller still the provider's answer.
        let patched = request.replace("\"served-model\"", &format!("\"{ROUTE}\""));
        let r = post(patched.clone()).await.expect("call");
        assert_eq!(r.status(), 200);
        assert_eq!(r.bytes().await.expect("body"), answer.as_bytes());
        let seen = rec.seen();
        assert_ne!(seen[1].raw, patched.as_bytes(), "{kind:?}");
        let mut want: Value = serde_json::from_str(&patched).expect("json");
        want["model"] = json!(SERVED);
        assert_eq!(seen[1].body, want, "{kind:?}");
    }

    // Across dialects the caller gets hale's rendering of the answer.
    let rec = Recorder::start().await;
    *rec.state.canned.lock().expect("canned lock") = Some(anthropic_answer.to_owned());
    let h = Hale::start(config(vec![rec.provider(
        "p",
        ProviderKind::Anthropic,
        SERVED,
    )]))
    .await;
    let r = h.openai(ROUTE).send().await;
    r.assert_complete(ANSWER);
    assert_eq!(r.json["object"], "chat.completion", "{:?}", r.json);
}

/// Extended thinking, streamed: a thinking block, then text, then a tool
/// call (Claude with `thinking` and tools), each event `gap` apart.
fn thinking_stream(thinking_deltas: usize) -> String {
    let frame = |data: Value| {
        format!(
            "event: {}\ndata: {data}\n\n",
            data["type"].as_str().expect("type")
        )
    };
    let mut s = frame(
        json!({"type": "message_start", "message": {"id": "msg_T", "type": "message",
        "role": "assistant", "model": SERVED, "content": [], "stop_reason": null,
        "stop_sequence": null, "usage": {"input_tokens": 9, "output_tokens": 1}}}),
    );
    s += &frame(json!({"type": "content_block_start", "index": 0,
        "content_block": {"type": "thinking", "thinking": "", "signature": ""}}));
    for k in 0..thinking_deltas {
        s += &frame(json!({"type": "content_block_delta", "index": 0,
            "delta": {"type": "thinking_delta", "thinking": format!("step {k}. ")}}));
    }
    s += &frame(json!({"type": "content_block_delta", "index": 0,
        "delta": {"type": "signature_delta", "signature": "sig-T-42"}}));
    s += &frame(json!({"type": "content_block_stop", "index": 0}));
    s += &frame(json!({"type": "content_block_start", "index": 1,
        "content_block": {"type": "text", "text": ""}}));
    s += &frame(json!({"type": "content_block_delta", "index": 1,
        "delta": {"type": "text_delta", "text": ANSWER}}));
    s += &frame(json!({"type": "content_block_stop", "index": 1}));
    s += &frame(json!({"type": "content_block_start", "index": 2,
        "content_block": {"type": "tool_use", "id": "toolu_T", "name": "look", "input": {}}}));
    s += &frame(json!({"type": "content_block_delta", "index": 2,
        "delta": {"type": "input_json_delta", "partial_json": "{\"zoom\": 2}"}}));
    s += &frame(json!({"type": "content_block_stop", "index": 2}));
    s += &frame(json!({"type": "message_delta",
        "delta": {"stop_reason": "tool_use", "stop_sequence": null}, "usage": {"output_tokens": 30}}));
    s += &frame(json!({"type": "message_stop"}));
    s
}

/// The thinking blocks of a streamed Anthropic answer reach an Anthropic
/// caller as the provider sent them, signature included — the caller must
/// send a thinking block back, signed, with the tool use it preceded, or
/// its next request is refused — before the text and the tool call. A
/// caller of Chat Completions gets the text and the tool call only. And a
/// long think is the model answering, not a silent provider: thinking that
/// streams for three times `first_token_timeout` before the first word of
/// text is served by the first attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_thinking_block_reaches_an_anthropic_caller_signed_and_a_long_think_is_not_a_timeout()
 {
    let rec = Recorder::start().await;
    let mut p = rec.provider("p", ProviderKind::Anthropic, SERVED);
    p.first_token_timeout = Duration::from_millis(400);
    let h = Hale::start(config(vec![p])).await;

    *rec.state.canned_sse.lock().expect("canned lock") = vec![(thinking_stream(2), Duration::ZERO)];
    let mut call = h.anthropic(ROUTE);
    call.body_mut()["stream"] = json!(true);
    let r = call.send().await;
    assert_eq!(r.status, 200, "{}", r.raw);
    assert!(r.done, "{}", r.raw);
    assert_eq!(r.text, ANSWER, "{}", r.raw);
    let events: Vec<Value> = r
        .raw
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str(d).ok())
        .collect();
    let starts: Vec<(u64, String)> = events
        .iter()
        .filter(|e| e["type"] == "content_block_start")
        .map(|e| {
            (
                e["index"].as_u64().expect("index"),
                e["content_block"]["type"]
                    .as_str()
                    .expect("type")
                    .to_owned(),
            )
        })
        .collect();
    assert_eq!(
        starts,
        [
            (0, "thinking".to_owned()),
            (1, "text".to_owned()),
            (2, "tool_use".to_owned())
        ]
    );
    let thinking: String = events
        .iter()
        .filter(|e| e["index"] == 0 && e["delta"]["type"] == "thinking_delta")
        .filter_map(|e| e["delta"]["thinking"].as_str())
        .collect();
    assert_eq!(thinking, "step 0. step 1. ");
    assert!(
        events
            .iter()
            .any(|e| e["index"] == 0 && e["delta"]["signature"] == "sig-T-42"),
        "the signature: {}",
        r.raw
    );

    // A Chat Completions caller: the text and the tool call, no thinking.
    let mut call = h.openai(ROUTE);
    call.body_mut()["stream"] = json!(true);
    let r = call.send().await;
    assert_eq!(r.status, 200, "{}", r.raw);
    assert_eq!(r.text, ANSWER);
    assert!(
        !r.raw.contains("step 0") && !r.raw.contains("sig-T-42"),
        "{}",
        r.raw
    );

    // 12 thinking deltas 100 ms apart: 1.2 s of thinking before the text,
    // three times the first-token timeout. One attempt serves it.
    *rec.state.canned_sse.lock().expect("canned lock") =
        vec![(thinking_stream(12), Duration::from_millis(100))];
    let mut call = h.anthropic(ROUTE);
    call.body_mut()["stream"] = json!(true);
    let r = call.send().await;
    assert_eq!(r.status, 200, "{}", r.raw);
    assert!(r.done, "{}", r.raw);
    assert_eq!(r.text, ANSWER);
    assert_eq!(r.attempts, "1", "{}", r.raw);
    assert_eq!(rec.seen().len(), 3, "no second attempt");
}

/// The events of an Anthropic SSE body, parsed.
fn sse_events(raw: &str) -> Vec<Value> {
    raw.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str(d).ok())
        .collect()
}

/// Two faults at once: the stream breaks inside the thinking block (the
/// provider's body ends after two thinking deltas, no signature, no
/// text), and the answer is resumed by a second attempt that thinks again.
/// The caller gets one well-formed message: the first attempt's thinking
/// as far as it went, then the resumed answer's text and tool call — not
/// the second attempt's thinking inside it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_cut_inside_a_thinking_block_is_resumed_with_one_thinking_block() {
    let rec = Recorder::start().await;
    let full = thinking_stream(2);
    // Cut after the second thinking delta: no signature, no block stop.
    let cut_at = full.find("step 1. ").expect("second delta");
    let cut_at = cut_at + full[cut_at..].find("\n\n").expect("its end") + 2;
    *rec.state.canned_sse.lock().expect("canned lock") = vec![
        (full[..cut_at].to_owned(), Duration::ZERO),
        (full.replace("step ", "again "), Duration::ZERO),
    ];
    let h = Hale::start(config(vec![rec.provider(
        "p",
        ProviderKind::Anthropic,
        SERVED,
    )]))
    .await;
    let mut call = h.anthropic(ROUTE);
    call.body_mut()["stream"] = json!(true);
    let r = call.send().await;
    assert_eq!(r.status, 200, "{}", r.raw);
    assert!(r.done, "{}", r.raw);
    assert_eq!(r.text, ANSWER, "{}", r.raw);
    let events = sse_events(&r.raw);
    let blocks: Vec<&str> = events
        .iter()
        .filter(|e| e["type"] == "content_block_start")
        .filter_map(|e| e["content_block"]["type"].as_str())
        .collect();
    assert_eq!(blocks, ["thinking", "text", "tool_use"], "{}", r.raw);
    assert!(
        r.raw.contains("step 1. ") && !r.raw.contains("again "),
        "{}",
        r.raw
    );
    // Block indexes run 0, 1, 2 and each start is closed before the next.
    let order: Vec<(String, u64)> = events
        .iter()
        .filter(|e| {
            matches!(
                e["type"].as_str(),
                Some("content_block_start" | "content_block_stop")
            )
        })
        .map(|e| {
            (
                e["type"].as_str().unwrap_or("").to_owned(),
                e["index"].as_u64().unwrap_or(99),
            )
        })
        .collect();
    let want: Vec<(String, u64)> = (0..3)
        .flat_map(|i| {
            [
                ("content_block_start".to_owned(), i),
                ("content_block_stop".to_owned(), i),
            ]
        })
        .collect();
    assert_eq!(order, want, "{}", r.raw);
    // The evidence headers went out with the first attempt; the timeline
    // says the turn was resumed.
    assert_eq!(rec.seen().len(), 2);
    let tl = h.timeline(&r.turn_id).await;
    assert_eq!(tl.len(), 2, "{tl:?}");
    assert_eq!(tl[0]["resume"], "broke mid-stream", "{tl:?}");
}
