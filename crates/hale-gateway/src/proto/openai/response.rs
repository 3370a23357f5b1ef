//! OpenAI responses: stop reasons, parsing a provider's complete
//! `chat.completion` into a [`ChatResponse`], rendering one for a caller,
//! and hale's own error body and `/v1/models` list.

use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value, json};

use super::request::{parse_tool_calls, split_assistant, user_content};
use crate::proto::canonical::{ChatResponse, Part, ProtoError, StopReason, Usage};
use crate::proto::json::{
    as_object, count, err, error_message, field, join, opt_array, opt_str, req_array,
};

pub(super) fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// The OpenAI `finish_reason` of a canonical stop reason.
pub fn finish_reason(r: StopReason) -> &'static str {
    match r {
        StopReason::EndTurn => "stop",
        StopReason::MaxTokens => "length",
        StopReason::ToolUse => "tool_calls",
        StopReason::ContentFilter => "content_filter",
    }
}

/// The canonical stop reason of an OpenAI `finish_reason`; unknown strings end the turn normally.
pub fn parse_finish_reason(s: &str) -> StopReason {
    match s {
        "length" => StopReason::MaxTokens,
        "tool_calls" | "function_call" => StopReason::ToolUse,
        "content_filter" => StopReason::ContentFilter,
        _ => StopReason::EndTurn,
    }
}

/// Parses a non-streaming upstream response body (the first choice).
pub fn parse_response(body: &Value) -> Result<ChatResponse, ProtoError> {
    let obj = as_object(body, "")?;
    if let Some(e) = field(obj, "error") {
        return Err(err("error", error_message(e)));
    }
    let id = opt_str(obj, "id", "")?.unwrap_or_default().to_string();
    let model = opt_str(obj, "model", "")?.unwrap_or_default().to_string();
    let choices = req_array(obj, "choices", "")?;
    let Some(c0) = choices.first() else {
        return Err(err("choices", "must not be empty"));
    };
    let c0 = as_object(c0, "choices[0]")?;
    let mp = "choices[0].message";
    let msg = match field(c0, "message") {
        None => return Err(err(mp, "missing `message`")),
        Some(m) => as_object(m, mp)?,
    };
    let mut content: Vec<Part> = user_content(field(msg, "content"), &join(mp, "content"))?
        .into_iter()
        .filter(|p| matches!(p, Part::Text { .. }))
        .collect();
    if content.is_empty()
        && let Some(r) = opt_str(msg, "refusal", mp)?
        && !r.is_empty()
    {
        content.push(Part::Text {
            text: r.to_string(),
        });
    }
    if let Some(calls) = opt_array(msg, "tool_calls", mp)? {
        content.extend(parse_tool_calls(calls, &join(mp, "tool_calls"))?);
    }
    let stop_reason = opt_str(c0, "finish_reason", "choices[0]")?.map(parse_finish_reason);
    let usage = field(obj, "usage").and_then(Value::as_object);
    Ok(ChatResponse {
        id,
        model,
        content,
        stop_reason,
        usage: Usage {
            input_tokens: count(usage, "prompt_tokens"),
            output_tokens: count(usage, "completion_tokens"),
        },
    })
}

pub(super) fn usage_json(u: Usage) -> Value {
    json!({
        "prompt_tokens": u.input_tokens,
        "completion_tokens": u.output_tokens,
        "total_tokens": u.input_tokens.saturating_add(u.output_tokens),
    })
}

/// Renders a canonical response for an OpenAI caller. A missing stop reason
/// reads `tool_calls` when the answer holds tool calls, else `stop`.
pub fn render_response(resp: &ChatResponse) -> Value {
    let (text, calls) = split_assistant(&resp.content);
    let reason = resp.stop_reason.unwrap_or(if calls.is_empty() {
        StopReason::EndTurn
    } else {
        StopReason::ToolUse
    });
    let mut message = Map::new();
    message.insert("role".into(), json!("assistant"));
    message.insert(
        "content".into(),
        if text.is_empty() && !calls.is_empty() {
            Value::Null
        } else {
            json!(text)
        },
    );
    message.insert("refusal".into(), Value::Null);
    if !calls.is_empty() {
        message.insert("tool_calls".into(), Value::Array(calls));
    }
    json!({
        "id": resp.id,
        "object": "chat.completion",
        "created": unix_now(),
        "model": resp.model,
        "choices": [{
            "index": 0,
            "message": message,
            "logprobs": null,
            "finish_reason": finish_reason(reason),
        }],
        "usage": usage_json(resp.usage),
    })
}

/// Renders hale's own error body:
/// `{"error":{"type":kind,"message":..,"code":kind,"hale":hale}}`.
pub fn render_error(kind: &str, message: &str, hale: Value) -> Value {
    json!({"error": {"type": kind, "message": message, "code": kind, "hale": hale}})
}

/// The `/v1/models` list for these model ids.
pub fn render_models(ids: &[String]) -> Value {
    let data: Vec<Value> = ids
        .iter()
        .map(|id| json!({"id": id, "object": "model", "created": 0, "owned_by": "hale"}))
        .collect();
    json!({"object": "list", "data": data})
}
