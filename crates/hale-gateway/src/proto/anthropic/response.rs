//! Anthropic responses: stop reasons, usage, parsing a provider's complete
//! `message` into a [`ChatResponse`], rendering one for a caller, and
//! hale's own error body.

use serde_json::{Map, Value, json};

use super::request::{arguments_to_input, input_to_arguments};
use crate::proto::canonical::{ChatResponse, Dialect, Part, ProtoError, StopReason, Usage};
use crate::proto::json::{
    as_object, at, count, err, error_message, field, opt_str, req_array, req_str,
};

/// The Anthropic `stop_reason` of a canonical stop reason.
pub fn stop_reason(r: StopReason) -> &'static str {
    match r {
        StopReason::EndTurn => "end_turn",
        StopReason::MaxTokens => "max_tokens",
        StopReason::ToolUse => "tool_use",
        StopReason::ContentFilter => "refusal",
    }
}

/// The canonical stop reason of an Anthropic `stop_reason`. `end_turn`,
/// `stop_sequence`, `pause_turn` and unknown reasons end the turn normally.
pub fn parse_stop_reason(s: &str) -> StopReason {
    match s {
        "max_tokens" | "model_context_window_exceeded" => StopReason::MaxTokens,
        "tool_use" => StopReason::ToolUse,
        "refusal" => StopReason::ContentFilter,
        _ => StopReason::EndTurn,
    }
}

/// Prompt tokens including cache writes and reads.
pub(super) fn input_tokens(u: Option<&Map<String, Value>>) -> u64 {
    count(u, "input_tokens")
        .saturating_add(count(u, "cache_creation_input_tokens"))
        .saturating_add(count(u, "cache_read_input_tokens"))
}

/// Parses a non-streaming upstream response body. Thinking blocks are kept
/// as opaque parts (an Anthropic caller gets them back; OpenAI has no form).
pub fn parse_response(body: &Value) -> Result<ChatResponse, ProtoError> {
    let obj = as_object(body, "")?;
    if obj.get("type").and_then(Value::as_str) == Some("error") || field(obj, "error").is_some() {
        let e = field(obj, "error").unwrap_or(body);
        return Err(err("error", error_message(e)));
    }
    let id = opt_str(obj, "id", "")?.unwrap_or_default().to_string();
    let model = opt_str(obj, "model", "")?.unwrap_or_default().to_string();
    let blocks = req_array(obj, "content", "")?;
    let mut content = Vec::with_capacity(blocks.len());
    for (j, b) in blocks.iter().enumerate() {
        let bp = at("content", j);
        let bo = as_object(b, &bp)?;
        match req_str(bo, "type", &bp)? {
            "text" => {
                let text = req_str(bo, "text", &bp)?;
                if !text.is_empty() {
                    content.push(Part::Text {
                        text: text.to_string(),
                    });
                }
            }
            "tool_use" => {
                let id = req_str(bo, "id", &bp)?.to_string();
                let name = req_str(bo, "name", &bp)?.to_string();
                let arguments = match field(bo, "input") {
                    None => "{}".to_string(),
                    Some(input) => input_to_arguments(input),
                };
                content.push(Part::ToolCall {
                    id,
                    name,
                    arguments,
                });
            }
            _ => content.push(Part::Opaque {
                dialect: Dialect::Anthropic,
                value: b.clone(),
            }),
        }
    }
    let stop_reason = opt_str(obj, "stop_reason", "")?.map(parse_stop_reason);
    let usage = field(obj, "usage").and_then(Value::as_object);
    Ok(ChatResponse {
        id,
        model,
        content,
        stop_reason,
        usage: Usage {
            input_tokens: input_tokens(usage),
            output_tokens: count(usage, "output_tokens"),
        },
    })
}

/// Renders a canonical response for an Anthropic caller. A missing stop
/// reason reads `tool_use` when the answer holds tool calls, else `end_turn`.
pub fn render_response(resp: &ChatResponse) -> Value {
    let mut blocks = Vec::with_capacity(resp.content.len());
    let mut any_tool = false;
    for p in &resp.content {
        match p {
            Part::Text { text } => {
                if !text.is_empty() {
                    blocks.push(json!({"type": "text", "text": text}));
                }
            }
            Part::ToolCall {
                id,
                name,
                arguments,
            } => {
                any_tool = true;
                blocks.push(json!({"type": "tool_use", "id": id, "name": name, "input": arguments_to_input(arguments)}));
            }
            Part::Opaque {
                dialect: Dialect::Anthropic,
                value,
            } => blocks.push(value.clone()),
            Part::Opaque {
                dialect: Dialect::OpenAi | Dialect::Responses | Dialect::Gemini | Dialect::Bedrock,
                ..
            }
            | Part::ToolResult { .. } => {}
        }
    }
    let reason = resp.stop_reason.unwrap_or(if any_tool {
        StopReason::ToolUse
    } else {
        StopReason::EndTurn
    });
    json!({
        "id": resp.id,
        "type": "message",
        "role": "assistant",
        "model": resp.model,
        "content": blocks,
        "stop_reason": stop_reason(reason),
        "stop_sequence": null,
        "usage": {"input_tokens": resp.usage.input_tokens, "output_tokens": resp.usage.output_tokens},
    })
}

/// Renders hale's own error body:
/// `{"type":"error","error":{"type":kind,"message":..,"hale":hale}}`.
pub fn render_error(kind: &str, message: &str, hale: Value) -> Value {
    json!({"type": "error", "error": {"type": kind, "message": message, "hale": hale}})
}
