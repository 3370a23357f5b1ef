//! Converse responses: a `ConverseResponse` read into a [`ChatResponse`],
//! stop reasons, usage, and an answer or error in Converse's shape.

use serde_json::{Map, Value, json};

use crate::anthropic::{arguments_to_input, input_to_arguments};
use crate::canonical::{ChatResponse, Dialect, Part, ProtoError, StopReason, Usage};
use crate::json::{as_object, at, count, err, field};

/// The Converse `stopReason` of a canonical stop reason.
pub fn stop_reason(r: StopReason) -> &'static str {
    match r {
        StopReason::EndTurn => "end_turn",
        StopReason::MaxTokens => "max_tokens",
        StopReason::ToolUse => "tool_use",
        StopReason::ContentFilter => "content_filtered",
    }
}

/// The canonical stop reason of a Converse `stopReason`.
pub fn parse_stop_reason(reason: &str) -> StopReason {
    match reason {
        "tool_use" => StopReason::ToolUse,
        "max_tokens" | "model_context_window_exceeded" => StopReason::MaxTokens,
        "guardrail_intervened" | "content_filtered" => StopReason::ContentFilter,
        // `end_turn`, `stop_sequence`, and any newer reason.
        _ => StopReason::EndTurn,
    }
}

/// Converse `usage` as canonical usage (cache reads and writes are input).
pub(super) fn usage_of(u: Option<&Map<String, Value>>) -> Usage {
    Usage {
        input_tokens: count(u, "inputTokens")
            .saturating_add(count(u, "cacheReadInputTokens"))
            .saturating_add(count(u, "cacheWriteInputTokens")),
        output_tokens: count(u, "outputTokens"),
    }
}

/// One content block of an answer.
fn part_of(block: &Value, path: &str) -> Result<Option<Part>, ProtoError> {
    let bo = as_object(block, path)?;
    if let Some(t) = field(bo, "text") {
        return match t {
            Value::String(s) if s.is_empty() => Ok(None),
            Value::String(s) => Ok(Some(Part::Text { text: s.clone() })),
            _ => Err(err(format!("{path}.text"), "must be a string")),
        };
    }
    if let Some(tu) = field(bo, "toolUse") {
        let tp = format!("{path}.toolUse");
        let to = as_object(tu, &tp)?;
        let id = match field(to, "toolUseId") {
            Some(Value::String(s)) => s.clone(),
            Some(_) | None => return Err(err(format!("{tp}.toolUseId"), "missing `toolUseId`")),
        };
        let name = match field(to, "name") {
            Some(Value::String(s)) => s.clone(),
            Some(_) | None => return Err(err(format!("{tp}.name"), "missing `name`")),
        };
        let arguments = field(to, "input").map_or_else(|| "{}".to_owned(), input_to_arguments);
        return Ok(Some(Part::ToolCall {
            id,
            name,
            arguments,
        }));
    }
    // `reasoningContent` and anything newer: no canonical form.
    Ok(Some(Part::Opaque {
        dialect: Dialect::Bedrock,
        value: block.clone(),
    }))
}

/// Parses a complete Converse answer. It names neither an id nor the model
/// (the URL did): both are left empty for the caller to fill in.
pub fn parse_response(body: &Value) -> Result<ChatResponse, ProtoError> {
    let obj = as_object(body, "")?;
    let message = field(obj, "output")
        .and_then(|o| o.get("message"))
        .ok_or_else(|| err("output.message", "missing `output.message`"))?;
    let mo = as_object(message, "output.message")?;
    let mut content = Vec::new();
    if let Some(blocks) = field(mo, "content") {
        let blocks = blocks
            .as_array()
            .ok_or_else(|| err("output.message.content", "must be an array"))?;
        for (i, b) in blocks.iter().enumerate() {
            if let Some(p) = part_of(b, &at("output.message.content", i))? {
                content.push(p);
            }
        }
    }
    let stop = obj
        .get("stopReason")
        .and_then(Value::as_str)
        .map(parse_stop_reason);
    Ok(ChatResponse {
        id: String::new(),
        model: String::new(),
        content,
        stop_reason: stop,
        usage: usage_of(obj.get("usage").and_then(Value::as_object)),
    })
}

/// A canonical answer as a Converse response.
pub fn render_response(resp: &ChatResponse) -> Value {
    let mut blocks = Vec::new();
    for p in &resp.content {
        match p {
            Part::Text { text } => blocks.push(json!({"text": text})),
            Part::ToolCall {
                id,
                name,
                arguments,
            } => blocks.push(json!({"toolUse": {
                "toolUseId": id, "name": name, "input": arguments_to_input(arguments),
            }})),
            Part::Opaque {
                dialect: Dialect::Bedrock,
                value,
            } => blocks.push(value.clone()),
            Part::Opaque { .. } | Part::ToolResult { .. } => {}
        }
    }
    let u = resp.usage;
    json!({
        "output": {"message": {"role": "assistant", "content": blocks}},
        "stopReason": stop_reason(resp.stop_reason.unwrap_or(StopReason::EndTurn)),
        "usage": {
            "inputTokens": u.input_tokens,
            "outputTokens": u.output_tokens,
            "totalTokens": u.input_tokens.saturating_add(u.output_tokens),
        },
    })
}

/// An error in Bedrock's shape (`{"message"}`), with hale's detail beside it.
pub fn render_error(kind: &str, message: &str, hale: Value) -> Value {
    json!({"__type": kind, "message": message, "hale": hale})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_with_text_reasoning_and_a_tool_call_is_read() {
        let body = json!({
            "output": {"message": {"role": "assistant", "content": [
                {"reasoningContent": {"reasoningText": {"text": "hm", "signature": "s"}}},
                {"text": "Let me look."},
                {"toolUse": {"toolUseId": "tooluse_1", "name": "look", "input": {"x": 1}}},
            ]}},
            "stopReason": "tool_use",
            "usage": {"inputTokens": 10, "outputTokens": 5, "totalTokens": 15, "cacheReadInputTokens": 2},
            "metrics": {"latencyMs": 100},
        });
        let r = parse_response(&body).unwrap();
        assert_eq!(r.stop_reason, Some(StopReason::ToolUse));
        assert_eq!(
            r.usage,
            Usage {
                input_tokens: 12,
                output_tokens: 5
            }
        );
        assert!(matches!(
            &r.content[0],
            Part::Opaque {
                dialect: Dialect::Bedrock,
                ..
            }
        ));
        assert_eq!(
            r.content[1],
            Part::Text {
                text: "Let me look.".into()
            }
        );
        assert_eq!(
            r.content[2],
            Part::ToolCall {
                id: "tooluse_1".into(),
                name: "look".into(),
                arguments: "{\"x\":1}".into()
            }
        );
        let back = render_response(&r);
        assert_eq!(
            back["output"]["message"]["content"],
            body["output"]["message"]["content"]
        );
        assert!(parse_response(&json!({"output": {}})).is_err());
        assert!(
            parse_response(&json!({"output": {"message": {"content": [{"toolUse": {}}]}}}))
                .is_err()
        );
        for (s, want) in [
            ("end_turn", StopReason::EndTurn),
            ("stop_sequence", StopReason::EndTurn),
            ("max_tokens", StopReason::MaxTokens),
            ("guardrail_intervened", StopReason::ContentFilter),
            ("content_filtered", StopReason::ContentFilter),
            ("tool_use", StopReason::ToolUse),
        ] {
            assert_eq!(parse_stop_reason(s), want, "{s}");
        }
    }
}
