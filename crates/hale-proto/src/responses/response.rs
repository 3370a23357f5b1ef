//! Responses responses: the `status` ↔ stop-reason mapping, parsing a
//! provider's `response` object into a [`ChatResponse`], rendering one for a
//! caller (id `resp_…`, `object: "response"`, output items, usage with its
//! details), and the error body (OpenAI's `{"error": {…}}` shape).

use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value, json};

use super::DIALECT;
use super::request::{arguments_to_custom_input, custom_input_to_arguments};
use crate::canonical::{ChatResponse, Part, ProtoError, StopReason, Usage};
use crate::json::{
    as_object, at, count, err, error_message, field, join, kind_of, opt_str, req_array, req_str,
};

pub(super) fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// The `status` and `incomplete_details.reason` of a canonical stop reason:
/// a turn cut by the token limit is `incomplete` for `max_output_tokens`, a
/// filtered one `incomplete` for `content_filter`; the others `completed`.
pub fn status(r: StopReason) -> (&'static str, Option<&'static str>) {
    match r {
        StopReason::EndTurn | StopReason::ToolUse => ("completed", None),
        StopReason::MaxTokens => ("incomplete", Some("max_output_tokens")),
        StopReason::ContentFilter => ("incomplete", Some("content_filter")),
    }
}

/// The canonical stop reason of a response's `status` and
/// `incomplete_details.reason`; `any_tool` tells a `completed` turn that
/// ended in tool calls. `None` for a status that is no ending (`queued`,
/// `in_progress`) or `failed`/`cancelled` (the caller treats those as errors).
pub fn parse_status(
    status: &str,
    incomplete_reason: Option<&str>,
    any_tool: bool,
) -> Option<StopReason> {
    match status {
        "completed" => Some(if any_tool {
            StopReason::ToolUse
        } else {
            StopReason::EndTurn
        }),
        "incomplete" => Some(match incomplete_reason {
            Some("content_filter") => StopReason::ContentFilter,
            // `max_output_tokens`, and any other reason: the answer was cut.
            Some(_) | None => StopReason::MaxTokens,
        }),
        _ => None,
    }
}

/// The canonical usage of a Responses `usage` object. `input_tokens`
/// includes the cached tokens (`input_tokens_details.cached_tokens`) and
/// `output_tokens` the reasoning tokens, as the canonical counts mean.
pub(super) fn parse_usage(u: Option<&Map<String, Value>>) -> Usage {
    Usage {
        input_tokens: count(u, "input_tokens"),
        output_tokens: count(u, "output_tokens"),
    }
}

pub(super) fn usage_json(u: Usage) -> Value {
    json!({
        "input_tokens": u.input_tokens,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": u.output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": u.input_tokens.saturating_add(u.output_tokens),
    })
}

/// The error of a `failed` response, or of an `error` value, as one message.
fn failed_message(obj: &Map<String, Value>) -> String {
    match field(obj, "error") {
        Some(e) => error_message(e),
        None => "the response failed".to_string(),
    }
}

/// Parses a non-streaming upstream `response` object. Reasoning items and
/// hosted tools' items are kept as opaque parts (a Responses caller gets
/// them back); a `failed` response, or an `error` body, is `Err`.
pub fn parse_response(body: &Value) -> Result<ChatResponse, ProtoError> {
    let obj = as_object(body, "")?;
    if field(obj, "error").is_some() || obj.get("status").and_then(Value::as_str) == Some("failed")
    {
        return Err(err("error", failed_message(obj)));
    }
    let id = opt_str(obj, "id", "")?.unwrap_or_default().to_string();
    let model = opt_str(obj, "model", "")?.unwrap_or_default().to_string();
    let items = req_array(obj, "output", "")?;
    let mut content = Vec::with_capacity(items.len());
    for (j, item) in items.iter().enumerate() {
        parse_output_item(item, &at("output", j), &mut content)?;
    }
    let any_tool = content.iter().any(|p| matches!(p, Part::ToolCall { .. }));
    let status = opt_str(obj, "status", "")?.unwrap_or("completed");
    let reason = field(obj, "incomplete_details")
        .and_then(Value::as_object)
        .and_then(|d| d.get("reason"))
        .and_then(Value::as_str);
    Ok(ChatResponse {
        id,
        model,
        content,
        stop_reason: parse_status(status, reason, any_tool),
        usage: parse_usage(field(obj, "usage").and_then(Value::as_object)),
    })
}

/// One output item as canonical parts.
pub(super) fn parse_output_item(
    item: &Value,
    p: &str,
    content: &mut Vec<Part>,
) -> Result<(), ProtoError> {
    let io = as_object(item, p)?;
    match req_str(io, "type", p)? {
        "message" => {
            let parts = req_array(io, "content", p)?;
            for (k, part) in parts.iter().enumerate() {
                let pp = at(&join(p, "content"), k);
                let po = as_object(part, &pp)?;
                let text = match req_str(po, "type", &pp)? {
                    "output_text" => req_str(po, "text", &pp)?,
                    "refusal" => req_str(po, "refusal", &pp)?,
                    _ => continue,
                };
                if !text.is_empty() {
                    match content.last_mut() {
                        Some(Part::Text { text: t }) => t.push_str(text),
                        _ => content.push(Part::Text {
                            text: text.to_string(),
                        }),
                    }
                }
            }
        }
        "function_call" => {
            let arguments = match field(io, "arguments") {
                None => String::new(),
                Some(Value::String(s)) => s.clone(),
                Some(v) => {
                    return Err(err(
                        join(p, "arguments"),
                        format!("must be a JSON-encoded string, got {}", kind_of(v)),
                    ));
                }
            };
            content.push(Part::ToolCall {
                id: req_str(io, "call_id", p)?.to_string(),
                name: req_str(io, "name", p)?.to_string(),
                arguments,
            });
        }
        "custom_tool_call" => content.push(Part::ToolCall {
            id: req_str(io, "call_id", p)?.to_string(),
            name: req_str(io, "name", p)?.to_string(),
            arguments: custom_input_to_arguments(opt_str(io, "input", p)?.unwrap_or_default()),
        }),
        _ => content.push(Part::Opaque {
            dialect: DIALECT,
            value: item.clone(),
        }),
    }
    Ok(())
}

/// A response id as the Responses API spells it (`resp_…`).
pub fn response_id(id: &str) -> String {
    if id.starts_with("resp_") {
        id.to_string()
    } else {
        format!("resp_{id}")
    }
}

/// The id of output item `i` of response `resp_id`, for items hale makes.
pub(super) fn item_id(prefix: &str, resp_id: &str, i: usize) -> String {
    let base = resp_id.strip_prefix("resp_").unwrap_or(resp_id);
    format!("{prefix}_{base}_{i}")
}

/// An assistant message item holding `text`.
pub(super) fn message_item(id: &str, text: &str, status: &str) -> Value {
    json!({
        "id": id,
        "type": "message",
        "status": status,
        "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}],
    })
}

/// A tool call item: `custom_tool_call` for a custom tool, else `function_call`.
pub(super) fn call_item(
    id: &str,
    call_id: &str,
    name: &str,
    arguments: &str,
    custom: bool,
    status: &str,
) -> Value {
    if custom {
        json!({"id": id, "type": "custom_tool_call", "status": status, "call_id": call_id, "name": name, "input": arguments_to_custom_input(arguments)})
    } else {
        json!({"id": id, "type": "function_call", "status": status, "call_id": call_id, "name": name, "arguments": arguments})
    }
}

/// The `response` object around `output`.
pub(super) fn response_object(
    id: &str,
    model: &str,
    created_at: u64,
    output: Vec<Value>,
    reason: Option<StopReason>,
    usage: Option<Usage>,
) -> Value {
    let (status, incomplete) = match reason {
        Some(r) => status(r),
        None => ("in_progress", None),
    };
    json!({
        "id": id,
        "object": "response",
        "created_at": created_at,
        "status": status,
        "error": null,
        "incomplete_details": incomplete.map(|r| json!({"reason": r})),
        "instructions": null,
        "max_output_tokens": null,
        "model": model,
        "output": output,
        "parallel_tool_calls": true,
        "previous_response_id": null,
        "reasoning": {"effort": null, "summary": null},
        "store": false,
        "temperature": null,
        "text": {"format": {"type": "text"}},
        "tool_choice": "auto",
        "tools": [],
        "top_p": null,
        "truncation": "disabled",
        "usage": usage.map(usage_json),
        "metadata": {},
    })
}

/// Renders a canonical response for a Responses caller (function calls as
/// `function_call` items). See [`render_response_with`].
pub fn render_response(resp: &ChatResponse) -> Value {
    render_response_with(resp, &[])
}

/// Renders a canonical response for a Responses caller whose request
/// declared the custom tools `custom` (their calls become
/// `custom_tool_call` items). Consecutive text parts make one message item;
/// opaque parts of this dialect (reasoning, hosted tools' items) are output
/// items as sent, other dialects' are left out. A missing stop reason reads
/// `completed`.
pub fn render_response_with(resp: &ChatResponse, custom: &[String]) -> Value {
    let id = response_id(&resp.id);
    let mut output = Vec::with_capacity(resp.content.len());
    let mut text = String::new();
    let flush = |text: &mut String, output: &mut Vec<Value>| {
        if !text.is_empty() {
            let n = output.len();
            output.push(message_item(&item_id("msg", &id, n), text, "completed"));
            text.clear();
        }
    };
    for p in &resp.content {
        match p {
            Part::Text { text: t } => text.push_str(t),
            Part::ToolCall {
                id: call_id,
                name,
                arguments,
            } => {
                flush(&mut text, &mut output);
                let n = output.len();
                let is_custom = custom.iter().any(|c| c == name);
                output.push(call_item(
                    &item_id("fc", &id, n),
                    call_id,
                    name,
                    arguments,
                    is_custom,
                    "completed",
                ));
            }
            Part::Opaque { dialect, value } => {
                if *dialect == DIALECT {
                    flush(&mut text, &mut output);
                    output.push(value.clone());
                }
            }
            Part::ToolResult { .. } => {}
        }
    }
    flush(&mut text, &mut output);
    let reason = resp.stop_reason.unwrap_or(StopReason::EndTurn);
    response_object(
        &id,
        &resp.model,
        unix_now(),
        output,
        Some(reason),
        Some(resp.usage),
    )
}

/// Renders hale's own error body in the Responses API's (OpenAI's) shape:
/// `{"error":{"message":..,"type":kind,"param":null,"code":kind,"hale":hale}}`.
pub fn render_error(kind: &str, message: &str, hale: Value) -> Value {
    json!({"error": {"message": message, "type": kind, "param": null, "code": kind, "hale": hale}})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(i: u64, o: u64) -> Usage {
        Usage {
            input_tokens: i,
            output_tokens: o,
        }
    }

    #[test]
    fn stop_reasons_map_both_ways() {
        for r in [
            StopReason::EndTurn,
            StopReason::MaxTokens,
            StopReason::ContentFilter,
        ] {
            let (s, reason) = status(r);
            assert_eq!(parse_status(s, reason, false), Some(r));
        }
        assert_eq!(
            parse_status("completed", None, true),
            Some(StopReason::ToolUse)
        );
        assert_eq!(status(StopReason::ToolUse), ("completed", None));
        assert_eq!(parse_status("in_progress", None, false), None);
        assert_eq!(parse_status("failed", None, false), None);
    }

    #[test]
    fn an_upstream_response_parses_with_its_items_and_usage() {
        let body = json!({
            "id": "resp_abc", "object": "response", "created_at": 1, "status": "completed",
            "model": "gpt-5-2025-08-07",
            "output": [
                {"id": "rs_1", "type": "reasoning", "summary": [], "encrypted_content": "gAAA"},
                {"id": "msg_1", "type": "message", "status": "completed", "role": "assistant",
                 "content": [{"type": "output_text", "text": "Hello", "annotations": []},
                             {"type": "output_text", "text": " there", "annotations": []}]},
                {"id": "fc_1", "type": "function_call", "status": "completed", "call_id": "call_1",
                 "name": "f", "arguments": "{\"a\":1}"}
            ],
            "usage": {"input_tokens": 10, "input_tokens_details": {"cached_tokens": 4},
                      "output_tokens": 7, "output_tokens_details": {"reasoning_tokens": 3}, "total_tokens": 17}
        });
        let r = parse_response(&body).unwrap();
        assert_eq!(r.id, "resp_abc");
        assert_eq!(r.text(), "Hello there");
        assert_eq!(r.stop_reason, Some(StopReason::ToolUse));
        assert_eq!(r.usage, usage(10, 7));
        assert!(matches!(&r.content[0], Part::Opaque { value, .. } if value["id"] == "rs_1"));
        // Rendered back for a Responses caller: the same items.
        let out = render_response(&r);
        assert_eq!(out["output"][0], body["output"][0]);
        assert_eq!(out["output"][1]["content"][0]["text"], "Hello there");
        assert_eq!(out["output"][2]["call_id"], "call_1");
        assert_eq!(out["status"], "completed");
        assert_eq!(out["usage"]["total_tokens"], 17);
    }

    #[test]
    fn incomplete_and_failed_responses() {
        let body = json!({"id": "resp_1", "status": "incomplete",
            "incomplete_details": {"reason": "max_output_tokens"},
            "output": [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "cut"}]}]});
        let r = parse_response(&body).unwrap();
        assert_eq!(r.stop_reason, Some(StopReason::MaxTokens));
        let out = render_response(&r);
        assert_eq!(out["status"], "incomplete");
        assert_eq!(
            out["incomplete_details"],
            json!({"reason": "max_output_tokens"})
        );

        let failed = json!({"id": "resp_1", "status": "failed", "output": [],
            "error": {"code": "server_error", "message": "The server had an error"}});
        let e = parse_response(&failed).unwrap_err();
        assert_eq!(e.path, "error");
        assert!(
            e.message.contains("server_error") && e.message.contains("The server had an error")
        );
        let e = parse_response(&json!({"error": {"message": "Invalid", "type": "invalid_request_error", "param": "input", "code": null}})).unwrap_err();
        assert_eq!(e.message, "invalid_request_error: Invalid");
        assert_eq!(
            parse_response(&json!({"id": "x"})).unwrap_err().path,
            "output"
        );
        assert_eq!(
            parse_response(&json!({"output": [{"type": "function_call", "name": "f"}]}))
                .unwrap_err()
                .path,
            "output[0].call_id"
        );
    }

    #[test]
    fn a_rendered_response_has_the_api_shape() {
        let r = ChatResponse {
            id: "turn_1".into(),
            model: "m".into(),
            content: vec![
                Part::Text { text: "a".into() },
                Part::ToolCall {
                    id: "call_1".into(),
                    name: "apply_patch".into(),
                    arguments: custom_input_to_arguments("diff"),
                },
            ],
            stop_reason: Some(StopReason::ToolUse),
            usage: usage(1, 2),
        };
        let out = render_response_with(&r, &["apply_patch".to_string()]);
        assert_eq!(out["id"], "resp_turn_1");
        assert_eq!(out["object"], "response");
        assert!(out["created_at"].as_u64().unwrap() > 0);
        assert_eq!(out["output"][0]["type"], "message");
        assert_eq!(out["output"][0]["id"], "msg_turn_1_0");
        assert_eq!(
            out["output"][1],
            json!({"id": "fc_turn_1_1", "type": "custom_tool_call", "status": "completed", "call_id": "call_1", "name": "apply_patch", "input": "diff"})
        );
        assert_eq!(parse_response(&out).unwrap().content, r.content);
        assert_eq!(
            render_error("rate_limited", "slow down", json!({"turn": "t"})),
            json!({"error": {"message": "slow down", "type": "rate_limited", "param": null, "code": "rate_limited", "hale": {"turn": "t"}}})
        );
    }
}
