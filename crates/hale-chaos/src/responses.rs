//! The OpenAI Responses API (`POST /v1/responses`): reading its request into
//! the facts the answers look at, and its `response` object and SSE events.
//!
//! A Responses request is read into the same [`ChatRequest`] the two chat
//! dialects use (`instructions` as the system prompt, `input` items as
//! messages, `max_output_tokens` as the output limit), so faults, summaries,
//! `context-overflow` and prefill continuation behave exactly as on
//! `/v1/chat/completions`. Its framing differs: every streamed event is
//! `event: <type>` with a `data` object carrying `type` and a
//! `sequence_number` that counts from 0 across the whole stream (the caller
//! of these builders owns the counter), and there is no `[DONE]`.

use bytes::Bytes;
use serde_json::{Map, Value, json};

use crate::answer::{Answer, ChatRequest, Content, Finish, Message};
use crate::fault::InBand;
use crate::frame::{Ctx, sse_event};

/// Request fields a `response` object echoes back when the request set them.
const ECHOED: &[&str] = &[
    "instructions",
    "max_output_tokens",
    "max_tool_calls",
    "previous_response_id",
    "reasoning",
    "store",
    "temperature",
    "text",
    "tool_choice",
    "tools",
    "top_p",
    "top_logprobs",
    "truncation",
    "parallel_tool_calls",
    "metadata",
    "user",
    "service_tier",
    "prompt_cache_key",
    "safety_identifier",
    "background",
];

/// The message of the in-band errors (`stream-error`), as OpenAI words it.
const SERVER_ERROR_MESSAGE: &str =
    "The server had an error while processing your request. Sorry about that!";

/// Reads a Responses request: the shared request facts, and the fields its
/// `response` object echoes.
pub fn read_request(body: &[u8]) -> Result<(ChatRequest, Map<String, Value>), String> {
    let mut m: Map<String, Value> = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    let model = match m.get("model") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(other) => return Err(format!("`model` must be a string, not {other}")),
    };
    let stream = match m.get("stream") {
        None | Some(Value::Null) => None,
        Some(Value::Bool(b)) => Some(*b),
        Some(other) => return Err(format!("`stream` must be a boolean, not {other}")),
    };
    let max_output = match m.get("max_output_tokens") {
        None | Some(Value::Null) => None,
        Some(v) => Some(
            v.as_u64()
                .ok_or_else(|| format!("`max_output_tokens` must be a whole number, not {v}"))?,
        ),
    };
    let echo: Map<String, Value> = ECHOED
        .iter()
        .filter_map(|k| {
            m.get(*k)
                .filter(|v| !v.is_null())
                .map(|v| ((*k).to_owned(), v.clone()))
        })
        .collect();
    let system = m.remove("instructions").filter(|v| !v.is_null());
    let messages = input_messages(m.remove("input").unwrap_or(Value::Null));
    let req = ChatRequest {
        model,
        messages,
        system,
        stream,
        stream_options: None,
        max_tokens: max_output,
        max_completion_tokens: None,
        tools: m.remove("tools"),
    };
    Ok((req, echo))
}

/// `input` as chat messages: a string is one user message; items become
/// messages (`message` items and role-only easy messages keep their role and
/// content parts, whose `text` the answers read), a `function_call` is (part
/// of) an assistant turn, a `function_call_output` a `tool` message. Items
/// without text the answers look at (`reasoning`, `item_reference`, …) are
/// left out. So a trailing assistant message is a prefill, as on chat.
fn input_messages(input: Value) -> Vec<Message> {
    let items = match input {
        Value::String(s) => {
            return vec![Message {
                role: "user".to_owned(),
                content: Value::String(s),
            }];
        }
        Value::Array(items) => items,
        Value::Null | Value::Bool(_) | Value::Number(_) | Value::Object(_) => return Vec::new(),
    };
    let mut out: Vec<Message> = Vec::with_capacity(items.len());
    for item in items {
        let Value::Object(mut o) = item else { continue };
        let ty = match o.get("type").and_then(Value::as_str) {
            Some(t) => t.to_owned(),
            None if o.contains_key("role") => "message".to_owned(),
            None => continue,
        };
        match ty.as_str() {
            "message" => {
                let role = o
                    .get("role")
                    .and_then(Value::as_str)
                    .unwrap_or("user")
                    .to_owned();
                let content = o.remove("content").unwrap_or(Value::Null);
                out.push(Message { role, content });
            }
            // A call joins the assistant turn it belongs to, as `tool_calls` do on chat.
            "function_call" | "custom_tool_call" | "local_shell_call"
                if out.last().is_none_or(|m| m.role != "assistant") =>
            {
                out.push(Message {
                    role: "assistant".to_owned(),
                    content: Value::Null,
                });
            }
            "function_call_output" | "custom_tool_call_output" | "local_shell_call_output" => {
                out.push(Message {
                    role: "tool".to_owned(),
                    content: o.remove("output").unwrap_or(Value::Null),
                });
            }
            // A call after the assistant's text (already its turn); reasoning,
            // item_reference, hosted tool calls: nothing the answers read.
            _ => {}
        }
    }
    out
}

/// The `response` object around `output`.
fn response_object(
    ctx: &Ctx,
    status: &str,
    output: Value,
    usage: Value,
    incomplete: Value,
    error: Value,
) -> Value {
    let mut o = json!({
        "id": ctx.id,
        "object": "response",
        "created_at": ctx.created,
        "status": status,
        "background": false,
        "error": error,
        "incomplete_details": incomplete,
        "instructions": null,
        "max_output_tokens": null,
        "model": ctx.model,
        "output": output,
        "parallel_tool_calls": true,
        "previous_response_id": null,
        "reasoning": {"effort": null, "summary": null},
        "store": true,
        "temperature": 1.0,
        "text": {"format": {"type": "text"}},
        "tool_choice": "auto",
        "tools": [],
        "top_p": 1.0,
        "truncation": "disabled",
        "usage": usage,
        "user": null,
        "metadata": {},
    });
    if let Value::Object(m) = &mut o {
        for (k, v) in &ctx.echo {
            m.insert(k.clone(), v.clone());
        }
    }
    o
}

fn usage(ctx: &Ctx, a: &Answer) -> Value {
    json!({
        "input_tokens": ctx.input_tokens,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": a.output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": ctx.input_tokens + a.output_tokens,
    })
}

/// The response status, `incomplete_details` and the output item's status.
fn finish_status(f: Finish) -> (&'static str, Value) {
    match f {
        Finish::Stop | Finish::ToolUse => ("completed", Value::Null),
        Finish::Length => ("incomplete", json!({"reason": "max_output_tokens"})),
    }
}

fn text_part(text: &str) -> Value {
    json!({"type": "output_text", "text": text, "annotations": [], "logprobs": []})
}

/// The output item, finished (`status`) or just opened (`in_progress`, no content yet).
fn output_item(ctx: &Ctx, a: &Answer, status: &str, open: bool) -> Value {
    match &a.content {
        Content::Text(_) => {
            let content = if open {
                json!([])
            } else {
                json!([text_part(&a.full_text())])
            };
            json!({"id": ctx.item_id, "type": "message", "status": status, "role": "assistant", "content": content})
        }
        Content::Tool {
            id,
            name,
            arguments,
            ..
        } => json!({
            "id": ctx.item_id,
            "type": "function_call",
            "status": status,
            "call_id": id,
            "name": name,
            "arguments": if open { "" } else { arguments.as_str() },
        }),
    }
}

/// The finished `response` object.
fn finished(ctx: &Ctx, a: &Answer) -> Value {
    let (status, incomplete) = finish_status(a.finish);
    let item_status = if status == "completed" {
        "completed"
    } else {
        "incomplete"
    };
    response_object(
        ctx,
        status,
        json!([output_item(ctx, a, item_status, false)]),
        usage(ctx, a),
        incomplete,
        Value::Null,
    )
}

/// The non-streamed body.
pub fn full_body(ctx: &Ctx, a: &Answer) -> String {
    finished(ctx, a).to_string()
}

/// One numbered event: `type` and `sequence_number` are added to `v`.
fn event(seq: &mut u64, ty: &str, mut v: Value) -> Bytes {
    if let Value::Object(m) = &mut v {
        m.insert("type".to_owned(), Value::String(ty.to_owned()));
        m.insert("sequence_number".to_owned(), Value::from(*seq));
    }
    *seq += 1;
    sse_event(ty, &v)
}

/// `response.created`, `response.in_progress`, `response.output_item.added`
/// and, for text, `response.content_part.added`.
pub fn stream_head(ctx: &Ctx, a: &Answer, seq: &mut u64) -> Vec<Bytes> {
    let pending = response_object(
        ctx,
        "in_progress",
        json!([]),
        Value::Null,
        Value::Null,
        Value::Null,
    );
    let mut out = vec![
        event(seq, "response.created", json!({"response": pending})),
        event(seq, "response.in_progress", json!({"response": pending})),
        event(
            seq,
            "response.output_item.added",
            json!({"output_index": 0, "item": output_item(ctx, a, "in_progress", true)}),
        ),
    ];
    match a.content {
        Content::Text(_) => out.push(event(
            seq,
            "response.content_part.added",
            json!({"item_id": ctx.item_id, "output_index": 0, "content_index": 0, "part": text_part("")}),
        )),
        Content::Tool { .. } => {}
    }
    out
}

/// A delta event up to its `delta` value: the piece's JSON string, then
/// `,"sequence_number":N}` follow (see `wire::PieceFramer`).
pub fn piece_prefix(ctx: &Ctx, a: &Answer) -> String {
    let id = Value::String(ctx.item_id.clone()).to_string();
    let (ty, index) = match a.content {
        Content::Text(_) => (
            "response.output_text.delta",
            ",\"content_index\":0,\"logprobs\":[]",
        ),
        Content::Tool { .. } => ("response.function_call_arguments.delta", ""),
    };
    format!(
        "event: {ty}\ndata: {{\"type\":\"{ty}\",\"item_id\":{id},\"output_index\":0{index},\"delta\":"
    )
}

/// What follows a delta's piece, before its sequence number.
pub const PIECE_SEQ: &str = ",\"sequence_number\":";

/// The events after the content: the `.done` events of the part and the item,
/// then `response.completed` (or `response.incomplete` when
/// `max_output_tokens` cut the answer). `no_done` leaves out that last event.
pub fn stream_finish(ctx: &Ctx, a: &Answer, no_done: bool, seq: &mut u64) -> Vec<Bytes> {
    let mut out = Vec::with_capacity(5);
    match &a.content {
        Content::Text(_) => {
            let text = a.full_text();
            out.push(event(
                seq,
                "response.output_text.done",
                json!({"item_id": ctx.item_id, "output_index": 0, "content_index": 0, "text": text, "logprobs": []}),
            ));
            out.push(event(
                seq,
                "response.content_part.done",
                json!({"item_id": ctx.item_id, "output_index": 0, "content_index": 0, "part": text_part(&text)}),
            ));
        }
        Content::Tool {
            name, arguments, ..
        } => out.push(event(
            seq,
            "response.function_call_arguments.done",
            json!({"item_id": ctx.item_id, "output_index": 0, "name": name, "arguments": arguments}),
        )),
    }
    let response = finished(ctx, a);
    out.push(event(
        seq,
        "response.output_item.done",
        json!({"output_index": 0, "item": response["output"][0].clone()}),
    ));
    if !no_done {
        let ty = match a.finish {
            Finish::Stop | Finish::ToolUse => "response.completed",
            Finish::Length => "response.incomplete",
        };
        out.push(event(seq, ty, json!({"response": response})));
    }
    out
}

/// `stream-error`'s in-band failure: `event: error`, `response.failed`, or both.
pub fn error_frames(ctx: &Ctx, which: InBand, seq: &mut u64) -> Vec<Bytes> {
    let (error, failed) = match which {
        InBand::Error => (true, false),
        InBand::Failed => (false, true),
        InBand::Both => (true, true),
    };
    let mut out = Vec::with_capacity(2);
    if error {
        out.push(event(
            seq,
            "error",
            json!({"code": "server_error", "message": SERVER_ERROR_MESSAGE, "param": null}),
        ));
    }
    if failed {
        let response = response_object(
            ctx,
            "failed",
            json!([]),
            Value::Null,
            Value::Null,
            json!({"code": "server_error", "message": SERVER_ERROR_MESSAGE}),
        );
        out.push(event(seq, "response.failed", json!({"response": response})));
    }
    out
}

/// The 404 for a `previous_response_id` this server did not answer (or
/// answered with `store: false`), as OpenAI words it.
pub fn not_found_body(id: &str) -> String {
    json!({"error": {
        "message": format!("Previous response with id '{id}' not found."),
        "type": "invalid_request_error",
        "param": "previous_response_id",
        "code": "previous_response_not_found",
    }})
    .to_string()
}

/// A garbage frame (`malformed`).
pub const MALFORMED_FRAME: &[u8] = b"event: response.output_text.delta\ndata: {not json\n\n";

/// A non-streamed body that is not JSON (`malformed` without streaming).
pub const MALFORMED_BODY: &str = "{\"id\":\"resp_chaos\",\"object\":\"response\", not json";
