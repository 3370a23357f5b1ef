//! The three wire dialects: OpenAI chat completions, Anthropic messages and
//! the OpenAI Responses API — bodies, SSE frames and error shapes, as the
//! real APIs send them. Chat completions and messages are framed here; the
//! Responses API's own frames live in `responses`, which this dispatches to.
//!
//! Everything here is a pure function from an [`Answer`] (or an error kind)
//! to bytes, so the server only decides *when* to send which frame. Streamed
//! frames take the stream's event counter: the Responses API numbers every
//! event (`sequence_number`), the other two dialects leave it untouched.

use bytes::Bytes;
use serde_json::{Value, json};

use crate::answer::{Answer, Content, Finish};
use crate::fault::InBand;
use crate::frame::{Ctx, sse_data, sse_event};
use crate::{gemini, responses};

/// Which API a request came in on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// `POST /v1/chat/completions`.
    OpenAi,
    /// `POST /v1/messages`.
    Anthropic,
    /// `POST /v1/responses`.
    Responses,
    /// `POST /v1beta/models/{model}:generateContent` (and `:streamGenerateContent`).
    Gemini,
}

/// The error answers the faults produce.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    RateLimit,
    Server500,
    Unavailable503,
    Overloaded529,
    ContextOverflow,
    ContentFilter,
    Auth,
    NoPrefill,
}

impl ErrorKind {
    /// The HTTP status.
    pub fn status(self) -> u16 {
        match self {
            ErrorKind::RateLimit => 429,
            ErrorKind::Server500 => 500,
            ErrorKind::Unavailable503 => 503,
            ErrorKind::Overloaded529 => 529,
            ErrorKind::ContextOverflow | ErrorKind::ContentFilter | ErrorKind::NoPrefill => 400,
            ErrorKind::Auth => 401,
        }
    }

    /// The HTTP status in `dialect`: Google answers a bad key with a 400
    /// `INVALID_ARGUMENT` ("API key not valid").
    pub fn status_in(self, dialect: Dialect) -> u16 {
        match (dialect, self) {
            (Dialect::Gemini, ErrorKind::Auth) => 400,
            (Dialect::OpenAi | Dialect::Anthropic | Dialect::Responses | Dialect::Gemini, _) => {
                self.status()
            }
        }
    }
}

/// The error body of `kind` in `dialect`.
pub fn error_body(dialect: Dialect, kind: ErrorKind) -> String {
    match dialect {
        Dialect::OpenAi | Dialect::Responses => {
            let (message, ty, code): (&str, &str, Value) = match kind {
                ErrorKind::RateLimit => (
                    "Rate limit reached for requests. Please try again later.",
                    "requests",
                    json!("rate_limit_exceeded"),
                ),
                ErrorKind::Server500 => (
                    "The server had an error while processing your request. Sorry about that!",
                    "server_error",
                    Value::Null,
                ),
                ErrorKind::Unavailable503 => (
                    "The server is overloaded or not ready yet.",
                    "server_error",
                    json!("service_unavailable"),
                ),
                ErrorKind::Overloaded529 => ("Overloaded", "overloaded_error", json!("overloaded")),
                ErrorKind::ContextOverflow => (
                    match dialect {
                        Dialect::Responses => {
                            "Your input exceeds the context window of this model. Please adjust your input and try again."
                        }
                        Dialect::OpenAi | Dialect::Anthropic | Dialect::Gemini => {
                            "This model's maximum context length is 8192 tokens. However, your messages resulted in 250000 tokens. Please reduce the length of the messages."
                        }
                    },
                    "invalid_request_error",
                    json!("context_length_exceeded"),
                ),
                ErrorKind::ContentFilter => (
                    "Your request was rejected as a result of our safety system: flagged by content filter: violence",
                    "invalid_request_error",
                    json!("content_policy_violation"),
                ),
                ErrorKind::Auth => (
                    "Incorrect API key provided: sk-chaos. You can find your API key at your provider's dashboard.",
                    "invalid_request_error",
                    json!("invalid_api_key"),
                ),
                ErrorKind::NoPrefill => (
                    "assistant message prefill is not supported: the last message must be from the user",
                    "invalid_request_error",
                    json!("prefill_not_supported"),
                ),
            };
            let param = match kind {
                ErrorKind::ContextOverflow => match dialect {
                    Dialect::Responses => json!("input"),
                    Dialect::OpenAi | Dialect::Anthropic | Dialect::Gemini => json!("messages"),
                },
                ErrorKind::RateLimit
                | ErrorKind::Server500
                | ErrorKind::Unavailable503
                | ErrorKind::Overloaded529
                | ErrorKind::ContentFilter
                | ErrorKind::Auth
                | ErrorKind::NoPrefill => Value::Null,
            };
            json!({"error": {"message": message, "type": ty, "param": param, "code": code}})
                .to_string()
        }
        Dialect::Anthropic => {
            let (ty, message) = match kind {
                ErrorKind::RateLimit => (
                    "rate_limit_error",
                    "This request would exceed your organization's rate limit. Please try again later.",
                ),
                ErrorKind::Server500 => ("api_error", "Internal server error"),
                ErrorKind::Unavailable503 => ("api_error", "Service unavailable"),
                ErrorKind::Overloaded529 => ("overloaded_error", "Overloaded"),
                ErrorKind::ContextOverflow => (
                    "invalid_request_error",
                    "prompt is too long: 250000 tokens > 200000 maximum",
                ),
                ErrorKind::ContentFilter => (
                    "invalid_request_error",
                    "Output blocked by content filtering policy: flagged by content filter: violence",
                ),
                ErrorKind::Auth => ("authentication_error", "invalid x-api-key"),
                ErrorKind::NoPrefill => (
                    "invalid_request_error",
                    "assistant message prefill is not supported: the final message must be from the user",
                ),
            };
            anthropic_error(ty, message)
        }
        Dialect::Gemini => {
            let (status, message, details) = match kind {
                ErrorKind::RateLimit => (
                    "RESOURCE_EXHAUSTED",
                    "You exceeded your current quota, please check your plan and billing details.",
                    json!([{"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": [{"quotaMetric": "generativelanguage.googleapis.com/generate_content_free_tier_requests"}]}]),
                ),
                ErrorKind::Server500 => (
                    "INTERNAL",
                    "An internal error has occurred. Please retry or report in https://developers.generativeai.google/guide/troubleshooting",
                    json!([]),
                ),
                ErrorKind::Unavailable503 | ErrorKind::Overloaded529 => (
                    "UNAVAILABLE",
                    "The model is overloaded. Please try again later.",
                    json!([]),
                ),
                ErrorKind::ContextOverflow => (
                    "INVALID_ARGUMENT",
                    "The input token count (250000) exceeds the maximum number of tokens allowed (8192).",
                    json!([]),
                ),
                // A real safety block is a 200 (`gemini::blocked`); this is the
                // rare error form.
                ErrorKind::ContentFilter => (
                    "INVALID_ARGUMENT",
                    "The request was blocked by the content filter: SAFETY",
                    json!([]),
                ),
                ErrorKind::Auth => (
                    "INVALID_ARGUMENT",
                    "API key not valid. Please pass a valid API key.",
                    json!([{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "API_KEY_INVALID", "domain": "googleapis.com"}]),
                ),
                ErrorKind::NoPrefill => (
                    "INVALID_ARGUMENT",
                    "Please ensure that multiturn requests end with a user role or a function response.",
                    json!([]),
                ),
            };
            gemini::error(kind.status_in(dialect), status, message, details)
        }
    }
}

/// A 400 for a request the chaos server cannot read (or a bad fault spec).
pub fn bad_request_body(dialect: Dialect, message: &str) -> String {
    match dialect {
        Dialect::OpenAi | Dialect::Responses => json!({"error": {"message": message, "type": "invalid_request_error", "param": null, "code": null}}).to_string(),
        Dialect::Anthropic => anthropic_error("invalid_request_error", message),
        Dialect::Gemini => gemini::error(400, "INVALID_ARGUMENT", message, json!([])),
    }
}

fn anthropic_error(ty: &str, message: &str) -> String {
    json!({"type": "error", "error": {"type": ty, "message": message}}).to_string()
}

fn openai_finish(f: Finish) -> &'static str {
    match f {
        Finish::Stop => "stop",
        Finish::Length => "length",
        Finish::ToolUse => "tool_calls",
    }
}

fn anthropic_stop(f: Finish) -> &'static str {
    match f {
        Finish::Stop => "end_turn",
        Finish::Length => "max_tokens",
        Finish::ToolUse => "tool_use",
    }
}

fn openai_usage(ctx: &Ctx, a: &Answer) -> Value {
    json!({
        "prompt_tokens": ctx.input_tokens,
        "completion_tokens": a.output_tokens,
        "total_tokens": ctx.input_tokens + a.output_tokens,
    })
}

/// The non-streamed response body.
pub fn full_body(dialect: Dialect, ctx: &Ctx, a: &Answer) -> String {
    match dialect {
        Dialect::OpenAi => {
            let message = match &a.content {
                Content::Text(_) => json!({"role": "assistant", "content": a.full_text()}),
                Content::Tool {
                    id,
                    name,
                    arguments,
                    ..
                } => json!({
                    "role": "assistant",
                    "content": null,
                    "tool_calls": [{"id": id, "type": "function", "function": {"name": name, "arguments": arguments}}],
                }),
            };
            json!({
                "id": ctx.id,
                "object": "chat.completion",
                "created": ctx.created,
                "model": ctx.model,
                "choices": [{"index": 0, "message": message, "logprobs": null, "finish_reason": openai_finish(a.finish)}],
                "usage": openai_usage(ctx, a),
            })
            .to_string()
        }
        Dialect::Anthropic => {
            let content = match &a.content {
                Content::Text(_) => json!([{"type": "text", "text": a.full_text()}]),
                Content::Tool {
                    id,
                    name,
                    arguments,
                    ..
                } => {
                    let input: Value =
                        serde_json::from_str(arguments).unwrap_or_else(|_| json!({}));
                    json!([{"type": "tool_use", "id": id, "name": name, "input": input}])
                }
            };
            json!({
                "id": ctx.id,
                "type": "message",
                "role": "assistant",
                "model": ctx.model,
                "content": content,
                "stop_reason": anthropic_stop(a.finish),
                "stop_sequence": null,
                "usage": {"input_tokens": ctx.input_tokens, "output_tokens": a.output_tokens},
            })
            .to_string()
        }
        Dialect::Responses => responses::full_body(ctx, a),
        Dialect::Gemini => gemini::full_body(ctx, a),
    }
}

fn openai_chunk(ctx: &Ctx, delta: Value, finish: Option<&str>) -> Bytes {
    let mut v = json!({
        "id": ctx.id,
        "object": "chat.completion.chunk",
        "created": ctx.created,
        "model": ctx.model,
        "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}],
    });
    if ctx.include_usage {
        v["usage"] = Value::Null;
    }
    sse_data(&v)
}

/// The frames before the first piece of content.
pub fn stream_head(dialect: Dialect, ctx: &Ctx, a: &Answer, seq: &mut u64) -> Vec<Bytes> {
    match dialect {
        Dialect::OpenAi => {
            let delta = match &a.content {
                Content::Text(_) => json!({"role": "assistant", "content": ""}),
                Content::Tool { id, name, .. } => json!({
                    "role": "assistant",
                    "content": null,
                    "tool_calls": [{"index": 0, "id": id, "type": "function", "function": {"name": name, "arguments": ""}}],
                }),
            };
            vec![openai_chunk(ctx, delta, None)]
        }
        Dialect::Anthropic => {
            let start = json!({
                "type": "message_start",
                "message": {
                    "id": ctx.id, "type": "message", "role": "assistant", "model": ctx.model,
                    "content": [], "stop_reason": null, "stop_sequence": null,
                    "usage": {"input_tokens": ctx.input_tokens, "output_tokens": 1},
                },
            });
            let block = match &a.content {
                Content::Text(_) => json!({"type": "text", "text": ""}),
                Content::Tool { id, name, .. } => {
                    json!({"type": "tool_use", "id": id, "name": name, "input": {}})
                }
            };
            vec![
                sse_event("message_start", &start),
                sse_event(
                    "content_block_start",
                    &json!({"type": "content_block_start", "index": 0, "content_block": block}),
                ),
                sse_event("ping", &json!({"type": "ping"})),
            ]
        }
        Dialect::Responses => responses::stream_head(ctx, a, seq),
        Dialect::Gemini => gemini::stream_head(ctx, a),
    }
}

/// The pieces a stream carries (Gemini sends a function call whole).
pub fn pieces(dialect: Dialect, a: &Answer) -> &[String] {
    match dialect {
        Dialect::OpenAi | Dialect::Anthropic | Dialect::Responses => a.pieces(),
        Dialect::Gemini => gemini::pieces(a),
    }
}

/// Renders content pieces (words, or fragments of tool arguments) from a
/// prefix and suffix built once per response: a stream of N words costs N
/// string copies, not N JSON trees.
pub struct PieceFramer {
    prefix: String,
    /// Written after the piece, then the event's number (Responses only).
    numbered: Option<&'static str>,
    suffix: String,
}

impl PieceFramer {
    /// The framer for one response.
    pub fn new(dialect: Dialect, ctx: &Ctx, a: &Answer) -> Self {
        let s = |v: &str| Value::String(v.to_owned()).to_string();
        match dialect {
            Dialect::OpenAi => {
                let head = format!(
                    "data: {{\"id\":{},\"object\":\"chat.completion.chunk\",\"created\":{},\"model\":{},\"choices\":[{{\"index\":0,\"delta\":",
                    s(&ctx.id),
                    ctx.created,
                    s(&ctx.model)
                );
                let usage = if ctx.include_usage {
                    ",\"usage\":null"
                } else {
                    ""
                };
                let (open, close) = match a.content {
                    Content::Text(_) => ("{\"content\":", "}"),
                    Content::Tool { .. } => (
                        "{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":",
                        "}}]}",
                    ),
                };
                PieceFramer {
                    prefix: format!("{head}{open}"),
                    numbered: None,
                    suffix: format!(
                        "{close},\"logprobs\":null,\"finish_reason\":null}}]{usage}}}\n\n"
                    ),
                }
            }
            Dialect::Anthropic => {
                let (ty, field) = match a.content {
                    Content::Text(_) => ("text_delta", "text"),
                    Content::Tool { .. } => ("input_json_delta", "partial_json"),
                };
                PieceFramer {
                    prefix: format!(
                        "event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"{ty}\",\"{field}\":"
                    ),
                    numbered: None,
                    suffix: "}}\n\n".to_owned(),
                }
            }
            Dialect::Responses => PieceFramer {
                prefix: responses::piece_prefix(ctx, a),
                numbered: Some(responses::PIECE_SEQ),
                suffix: "}\n\n".to_owned(),
            },
            Dialect::Gemini => PieceFramer {
                prefix: gemini::piece_prefix(ctx),
                numbered: None,
                suffix: gemini::piece_suffix(ctx),
            },
        }
    }

    /// The frame carrying one piece (numbered `seq` on the Responses API).
    pub fn frame(&self, piece: &str, seq: &mut u64) -> Bytes {
        let mut out = Vec::with_capacity(self.prefix.len() + piece.len() + self.suffix.len() + 32);
        out.extend_from_slice(self.prefix.as_bytes());
        // Writing a &str into a Vec cannot fail.
        let _ = serde_json::to_writer(&mut out, piece);
        if let Some(mid) = self.numbered {
            out.extend_from_slice(mid.as_bytes());
            out.extend_from_slice(seq.to_string().as_bytes());
            *seq += 1;
        }
        out.extend_from_slice(self.suffix.as_bytes());
        Bytes::from(out)
    }
}

/// The frames after the content. `no_done` leaves out `[DONE]` /
/// `message_stop` / `response.completed` and every usage report.
pub fn stream_finish(
    dialect: Dialect,
    ctx: &Ctx,
    a: &Answer,
    no_done: bool,
    seq: &mut u64,
) -> Vec<Bytes> {
    match dialect {
        Dialect::OpenAi => {
            let mut out = vec![openai_chunk(ctx, json!({}), Some(openai_finish(a.finish)))];
            if !no_done {
                if ctx.include_usage {
                    out.push(sse_data(&json!({
                        "id": ctx.id,
                        "object": "chat.completion.chunk",
                        "created": ctx.created,
                        "model": ctx.model,
                        "choices": [],
                        "usage": openai_usage(ctx, a),
                    })));
                }
                out.push(Bytes::from_static(b"data: [DONE]\n\n"));
            }
            out
        }
        Dialect::Anthropic => {
            let mut delta = json!({
                "type": "message_delta",
                "delta": {"stop_reason": anthropic_stop(a.finish), "stop_sequence": null},
            });
            if !no_done {
                delta["usage"] = json!({"output_tokens": a.output_tokens});
            }
            let mut out = vec![
                sse_event(
                    "content_block_stop",
                    &json!({"type": "content_block_stop", "index": 0}),
                ),
                sse_event("message_delta", &delta),
            ];
            if !no_done {
                out.push(sse_event("message_stop", &json!({"type": "message_stop"})));
            }
            out
        }
        Dialect::Responses => responses::stream_finish(ctx, a, no_done, seq),
        Dialect::Gemini => gemini::stream_finish(ctx, a, no_done),
    }
}

/// A garbage frame (`malformed`).
pub fn malformed_frame(dialect: Dialect) -> Bytes {
    match dialect {
        Dialect::OpenAi => Bytes::from_static(b"data: {not json\n\n"),
        Dialect::Anthropic => {
            Bytes::from_static(b"event: content_block_delta\ndata: {not json\n\n")
        }
        Dialect::Responses => Bytes::from_static(responses::MALFORMED_FRAME),
        Dialect::Gemini => Bytes::from_static(gemini::MALFORMED_FRAME),
    }
}

/// A non-streamed body that is not JSON (`malformed` without streaming).
pub fn malformed_body(dialect: Dialect) -> &'static str {
    match dialect {
        Dialect::OpenAi => "{\"id\":\"chatcmpl-chaos\",\"object\":\"chat.completion\", not json",
        Dialect::Anthropic => "{\"id\":\"msg_chaos\",\"type\":\"message\", not json",
        Dialect::Responses => responses::MALFORMED_BODY,
        Dialect::Gemini => gemini::MALFORMED_BODY,
    }
}

/// The in-band error a provider sends when it fails mid-stream (`which`
/// picks the Responses API's shape; the other dialects have one).
pub fn error_frames(dialect: Dialect, ctx: &Ctx, which: InBand, seq: &mut u64) -> Vec<Bytes> {
    match dialect {
        Dialect::OpenAi => vec![sse_data(&json!({"error": {
            "message": "The server had an error while processing your request. Sorry about that!",
            "type": "server_error", "param": null, "code": null,
        }}))],
        Dialect::Anthropic => vec![sse_event(
            "error",
            &json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
        )],
        Dialect::Responses => responses::error_frames(ctx, which, seq),
        Dialect::Gemini => gemini::error_frames(),
    }
}
