//! Non-streaming responses, stop reasons, error bodies and the models list,
//! in both dialects.

use hale_proto::{ChatResponse, Dialect, Part, StopReason, Usage, anthropic, openai};
use serde_json::json;

const ALL_REASONS: [StopReason; 4] = [
    StopReason::EndTurn,
    StopReason::MaxTokens,
    StopReason::ToolUse,
    StopReason::ContentFilter,
];

#[test]
fn openai_response_parses_and_renders_as_anthropic() {
    let body = json!({
        "id": "chatcmpl-9x", "object": "chat.completion", "created": 1727000000,
        "model": "gpt-4o-2024-08-06",
        "choices": [{"index": 0, "message": {
            "role": "assistant", "content": "Checking both.", "refusal": null,
            "tool_calls": [{"id": "call_a", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]
        }, "logprobs": null, "finish_reason": "tool_calls"}],
        "usage": {"prompt_tokens": 82, "completion_tokens": 17, "total_tokens": 99},
        "system_fingerprint": "fp_1"
    });
    let resp = openai::parse_response(&body).unwrap();
    assert_eq!(
        resp,
        ChatResponse {
            id: "chatcmpl-9x".into(),
            model: "gpt-4o-2024-08-06".into(),
            content: vec![
                Part::Text {
                    text: "Checking both.".into()
                },
                Part::ToolCall {
                    id: "call_a".into(),
                    name: "get_weather".into(),
                    arguments: "{\"city\":\"Paris\"}".into()
                },
            ],
            stop_reason: Some(StopReason::ToolUse),
            usage: Usage {
                input_tokens: 82,
                output_tokens: 17
            },
        }
    );
    let a = anthropic::render_response(&resp);
    assert_eq!(
        a,
        json!({
            "id": "chatcmpl-9x", "type": "message", "role": "assistant", "model": "gpt-4o-2024-08-06",
            "content": [
                {"type": "text", "text": "Checking both."},
                {"type": "tool_use", "id": "call_a", "name": "get_weather", "input": {"city": "Paris"}}
            ],
            "stop_reason": "tool_use", "stop_sequence": null,
            "usage": {"input_tokens": 82, "output_tokens": 17}
        })
    );
    assert_eq!(anthropic::parse_response(&a).unwrap(), resp);
}

#[test]
fn anthropic_response_parses_and_renders_as_openai() {
    let body = json!({
        "id": "msg_01", "type": "message", "role": "assistant", "model": "claude-sonnet-4-20250514",
        "content": [
            {"type": "thinking", "thinking": "The user wants weather.", "signature": "sig"},
            {"type": "text", "text": "Let me look."},
            {"type": "tool_use", "id": "toolu_01", "name": "get_weather", "input": {"city": "Rome"}}
        ],
        "stop_reason": "tool_use", "stop_sequence": null,
        "usage": {"input_tokens": 100, "cache_creation_input_tokens": 20, "cache_read_input_tokens": 300, "output_tokens": 40}
    });
    let resp = anthropic::parse_response(&body).unwrap();
    assert_eq!(
        resp.usage,
        Usage {
            input_tokens: 420,
            output_tokens: 40
        },
        "cache tokens count as input"
    );
    assert!(matches!(
        resp.content[0],
        Part::Opaque {
            dialect: Dialect::Anthropic,
            ..
        }
    ));
    assert_eq!(resp.text(), "Let me look.");

    let o = openai::render_response(&resp);
    assert_eq!(o["object"], json!("chat.completion"));
    assert_eq!(o["id"], json!("msg_01"));
    assert_eq!(o["model"], json!("claude-sonnet-4-20250514"));
    assert!(o["created"].as_u64().unwrap() > 1_600_000_000);
    assert_eq!(
        o["choices"],
        json!([{"index": 0, "message": {
            "role": "assistant", "content": "Let me look.", "refusal": null,
            "tool_calls": [{"id": "toolu_01", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Rome\"}"}}]
        }, "logprobs": null, "finish_reason": "tool_calls"}])
    );
    assert_eq!(
        o["usage"],
        json!({"prompt_tokens": 420, "completion_tokens": 40, "total_tokens": 460})
    );

    let back = openai::parse_response(&o).unwrap();
    assert_eq!(
        back.content,
        resp.content[1..].to_vec(),
        "thinking has no OpenAI form"
    );
    assert_eq!(
        (back.stop_reason, back.usage),
        (resp.stop_reason, resp.usage)
    );

    // An Anthropic caller gets the thinking block back untouched.
    assert_eq!(
        anthropic::render_response(&resp)["content"][0],
        body["content"][0]
    );
}

#[test]
fn stop_reasons_map_both_ways() {
    for r in ALL_REASONS {
        assert_eq!(openai::parse_finish_reason(openai::finish_reason(r)), r);
        assert_eq!(anthropic::parse_stop_reason(anthropic::stop_reason(r)), r);
    }
    assert_eq!(openai::finish_reason(StopReason::EndTurn), "stop");
    assert_eq!(openai::finish_reason(StopReason::MaxTokens), "length");
    assert_eq!(openai::finish_reason(StopReason::ToolUse), "tool_calls");
    assert_eq!(
        openai::finish_reason(StopReason::ContentFilter),
        "content_filter"
    );
    assert_eq!(anthropic::stop_reason(StopReason::EndTurn), "end_turn");
    assert_eq!(anthropic::stop_reason(StopReason::MaxTokens), "max_tokens");
    assert_eq!(anthropic::stop_reason(StopReason::ToolUse), "tool_use");
    assert_eq!(anthropic::stop_reason(StopReason::ContentFilter), "refusal");
    assert_eq!(
        anthropic::parse_stop_reason("stop_sequence"),
        StopReason::EndTurn
    );
    assert_eq!(openai::parse_finish_reason("eos"), StopReason::EndTurn);
}

#[test]
fn responses_without_stop_reason_infer_one() {
    let resp = ChatResponse {
        id: "r".into(),
        model: "m".into(),
        content: vec![Part::ToolCall {
            id: "c".into(),
            name: "f".into(),
            arguments: "{}".into(),
        }],
        stop_reason: None,
        usage: Usage::default(),
    };
    assert_eq!(
        openai::render_response(&resp)["choices"][0]["finish_reason"],
        json!("tool_calls")
    );
    assert_eq!(
        openai::render_response(&resp)["choices"][0]["message"]["content"],
        json!(null)
    );
    assert_eq!(
        anthropic::render_response(&resp)["stop_reason"],
        json!("tool_use")
    );
    let text = ChatResponse {
        content: vec![Part::Text { text: "hi".into() }],
        ..resp
    };
    assert_eq!(
        openai::render_response(&text)["choices"][0]["finish_reason"],
        json!("stop")
    );
    assert_eq!(
        anthropic::render_response(&text)["stop_reason"],
        json!("end_turn")
    );
}

#[test]
fn response_parse_errors_name_the_json_path() {
    let e = openai::parse_response(&json!({"id": "x", "choices": []})).unwrap_err();
    assert_eq!(e.path, "choices");
    let e = openai::parse_response(&json!({"id": "x"})).unwrap_err();
    assert_eq!(e.path, "choices");
    let e = openai::parse_response(&json!({"choices": [{"finish_reason": "stop"}]})).unwrap_err();
    assert_eq!(e.path, "choices[0].message");
    let e = openai::parse_response(&json!({"choices": [{"message": {"role": "assistant", "content": null,
        "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": {"a": 1}}}]}}]}))
    .unwrap_err();
    assert_eq!(
        e.path,
        "choices[0].message.tool_calls[0].function.arguments"
    );
    let e = openai::parse_response(&json!({"error": {"type": "server_error", "message": "boom"}}))
        .unwrap_err();
    assert_eq!(
        (e.path.as_str(), e.message.as_str()),
        ("error", "server_error: boom")
    );

    let e = anthropic::parse_response(&json!({"id": "msg", "type": "message"})).unwrap_err();
    assert_eq!(e.path, "content");
    let e = anthropic::parse_response(&json!({"content": [{"type": "tool_use", "name": "f"}]}))
        .unwrap_err();
    assert_eq!(e.path, "content[0].id");
    let e = anthropic::parse_response(
        &json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
    )
    .unwrap_err();
    assert_eq!(
        (e.path.as_str(), e.message.as_str()),
        ("error", "overloaded_error: Overloaded")
    );
}

#[test]
fn openai_compatible_servers_with_missing_fields_still_parse() {
    // Some compatible servers omit id/usage and send content as null with a refusal.
    let resp = openai::parse_response(
        &json!({"choices": [{"message": {"content": null, "refusal": "I can't help with that."},
        "finish_reason": "content_filter"}]}),
    )
    .unwrap();
    assert_eq!(resp.text(), "I can't help with that.");
    assert_eq!(resp.stop_reason, Some(StopReason::ContentFilter));
    assert_eq!(resp.usage, Usage::default());
}

#[test]
fn error_bodies_have_each_dialects_shape() {
    let hale = json!({"turn_id": "t1", "agent": "a", "timeline": []});
    assert_eq!(
        openai::render_error("agent_paused", "agent a is paused", hale.clone()),
        json!({"error": {"type": "agent_paused", "message": "agent a is paused", "code": "agent_paused", "hale": hale}})
    );
    assert_eq!(
        anthropic::render_error("agent_paused", "agent a is paused", hale.clone()),
        json!({"type": "error", "error": {"type": "agent_paused", "message": "agent a is paused", "hale": hale}})
    );
}

#[test]
fn models_list_has_the_openai_shape() {
    let v = openai::render_models(&["smart".to_string(), "gpt-4o".to_string()]);
    assert_eq!(v["object"], json!("list"));
    assert_eq!(v["data"].as_array().unwrap().len(), 2);
    assert_eq!(v["data"][0]["id"], json!("smart"));
    assert_eq!(v["data"][1]["object"], json!("model"));
    assert!(v["data"][1]["owned_by"].is_string());
}
