//! Request translation: OpenAI ↔ canonical ↔ Anthropic round trips, the
//! rules Anthropic forces on rendering, and parse errors with their JSON paths.

use hale_proto::{ChatRequest, Dialect, Message, Part, Role, anthropic, openai};
use serde_json::{Value, json};

fn weather_schema() -> Value {
    json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})
}

fn openai_body() -> Value {
    json!({
        "model": "gpt-4o",
        "messages": [
            {"role": "system", "content": "You are terse."},
            {"role": "developer", "content": [{"type": "text", "text": "Use tools."}]},
            {"role": "user", "content": "Weather in Paris and Rome?"},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}},
                {"id": "call_2", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Rome\"}"}}
            ]},
            {"role": "tool", "tool_call_id": "call_1", "content": "18C sunny"},
            {"role": "tool", "tool_call_id": "call_2", "content": "22C cloudy"},
            {"role": "user", "content": "Thanks. Which is warmer?"}
        ],
        "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Current weather", "parameters": weather_schema()}}],
        "tool_choice": "required",
        "max_completion_tokens": 256,
        "temperature": 0.2,
        "top_p": 0.9,
        "stop": ["END"],
        "stream": true,
        "stream_options": {"include_usage": true},
        "user": "u-42",
        "seed": 7
    })
}

/// The parts of a request that must survive translation (not `extra`/`dialect`).
fn semantic(
    r: &ChatRequest,
) -> (
    Option<String>,
    Vec<Message>,
    Value,
    Option<Value>,
    Option<u32>,
) {
    (
        r.system.clone(),
        r.messages.clone(),
        serde_json::to_value(&r.tools).unwrap(),
        r.tool_choice.clone(),
        r.max_tokens,
    )
}

#[test]
fn openai_request_parses_to_canonical() {
    let req = openai::parse_request(&openai_body()).unwrap();
    assert_eq!(req.model, "gpt-4o");
    assert_eq!(req.system.as_deref(), Some("You are terse.\n\nUse tools."));
    assert_eq!(req.dialect, Dialect::OpenAi);
    assert_eq!(req.messages.len(), 5);
    assert_eq!(
        req.messages[0],
        Message::text(Role::User, "Weather in Paris and Rome?")
    );
    assert_eq!(
        req.messages[1].content,
        vec![
            Part::ToolCall {
                id: "call_1".into(),
                name: "get_weather".into(),
                arguments: "{\"city\":\"Paris\"}".into()
            },
            Part::ToolCall {
                id: "call_2".into(),
                name: "get_weather".into(),
                arguments: "{\"city\":\"Rome\"}".into()
            },
        ]
    );
    assert_eq!(req.messages[2].role, Role::Tool);
    assert_eq!(
        req.messages[2].content,
        vec![Part::ToolResult {
            tool_call_id: "call_1".into(),
            content: "18C sunny".into(),
            is_error: false
        }]
    );
    assert_eq!(req.tools[0].name, "get_weather");
    assert_eq!(req.tools[0].parameters, weather_schema());
    assert_eq!(req.tool_choice, Some(json!("required")));
    assert_eq!(req.max_tokens, Some(256));
    assert_eq!(req.temperature, Some(0.2));
    assert_eq!(req.top_p, Some(0.9));
    assert_eq!(req.stop, vec!["END".to_string()]);
    assert!(req.stream && req.include_usage);
    assert_eq!(req.extra.get("user"), Some(&json!("u-42")));
    assert_eq!(req.extra.get("seed"), Some(&json!(7)));
}

#[test]
fn openai_to_anthropic_to_canonical_and_back_round_trips() {
    let canon = openai::parse_request(&openai_body()).unwrap();
    let a = anthropic::render_request(&canon, "claude-sonnet-4", None);
    assert_eq!(
        a,
        json!({
            "model": "claude-sonnet-4",
            "max_tokens": 256,
            "system": "You are terse.\n\nUse tools.",
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "Weather in Paris and Rome?"}]},
                {"role": "assistant", "content": [
                    {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"city": "Paris"}},
                    {"type": "tool_use", "id": "call_2", "name": "get_weather", "input": {"city": "Rome"}}
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "call_1", "content": "18C sunny"},
                    {"type": "tool_result", "tool_use_id": "call_2", "content": "22C cloudy"},
                    {"type": "text", "text": "Thanks. Which is warmer?"}
                ]}
            ],
            "tools": [{"name": "get_weather", "description": "Current weather", "input_schema": weather_schema()}],
            "tool_choice": {"type": "any"},
            "temperature": 0.2,
            "top_p": 0.9,
            "stop_sequences": ["END"],
            "stream": true
        }),
        "OpenAI-only fields (user, seed, stream_options) must not reach Anthropic"
    );

    let back = anthropic::parse_request(&a).unwrap();
    assert_eq!(semantic(&back), semantic(&canon));
    assert_eq!(back.stop, canon.stop);
    assert_eq!(back.temperature, canon.temperature);

    let o = openai::render_request(&back, "gpt-4o", None);
    assert_eq!(
        o["messages"],
        json!([
            {"role": "system", "content": "You are terse.\n\nUse tools."},
            {"role": "user", "content": "Weather in Paris and Rome?"},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}},
                {"id": "call_2", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Rome\"}"}}
            ]},
            {"role": "tool", "tool_call_id": "call_1", "content": "18C sunny"},
            {"role": "tool", "tool_call_id": "call_2", "content": "22C cloudy"},
            {"role": "user", "content": "Thanks. Which is warmer?"}
        ])
    );
    assert_eq!(o["tool_choice"], json!("required"));
    assert_eq!(o["max_tokens"], json!(256));
    assert_eq!(o["stream_options"], json!({"include_usage": true}));
    assert!(
        o.get("seed").is_none(),
        "extra came from Anthropic dialect now"
    );
    let again = openai::parse_request(&o).unwrap();
    assert_eq!(semantic(&again), semantic(&canon));
}

fn anthropic_body() -> Value {
    json!({
        "model": "claude-sonnet-4",
        "max_tokens": 1024,
        "system": [{"type": "text", "text": "You are terse."}, {"type": "text", "text": "Be kind."}],
        "messages": [
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": [
                {"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": "toolu_01", "name": "get_weather", "input": {"city": "Paris"}}
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_01", "content": [{"type": "text", "text": "18C"}], "is_error": true},
                {"type": "text", "text": "And now?"}
            ]}
        ],
        "tools": [{"name": "get_weather", "description": "Current weather", "input_schema": weather_schema()}],
        "tool_choice": {"type": "tool", "name": "get_weather"},
        "stop_sequences": ["\n\nHuman:"],
        "temperature": 0.5,
        "metadata": {"user_id": "u1"}
    })
}

#[test]
fn anthropic_to_openai_to_canonical_and_back_round_trips() {
    let canon = anthropic::parse_request(&anthropic_body()).unwrap();
    assert_eq!(canon.system.as_deref(), Some("You are terse.\n\nBe kind."));
    assert_eq!(
        canon.messages.len(),
        4,
        "the tool result splits from the user text"
    );
    assert_eq!(canon.messages[2].role, Role::Tool);
    assert_eq!(
        canon.messages[2].content,
        vec![Part::ToolResult {
            tool_call_id: "toolu_01".into(),
            content: "18C".into(),
            is_error: true
        }]
    );
    assert_eq!(canon.messages[3], Message::text(Role::User, "And now?"));
    assert_eq!(
        canon.tool_choice,
        Some(json!({"type": "function", "function": {"name": "get_weather"}}))
    );

    let o = openai::render_request(&canon, "gpt-4o", None);
    assert_eq!(
        o,
        json!({
            "model": "gpt-4o",
            "messages": [
                {"role": "system", "content": "You are terse.\n\nBe kind."},
                {"role": "user", "content": "Weather in Paris?"},
                {"role": "assistant", "content": "Checking.", "tool_calls": [
                    {"id": "toolu_01", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}
                ]},
                {"role": "tool", "tool_call_id": "toolu_01", "content": "18C"},
                {"role": "user", "content": "And now?"}
            ],
            "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Current weather", "parameters": weather_schema()}}],
            "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
            "max_tokens": 1024,
            "temperature": 0.5,
            "stop": ["\n\nHuman:"]
        }),
        "metadata is Anthropic-only and must not reach OpenAI"
    );

    let back = openai::parse_request(&o).unwrap();
    // OpenAI has no is_error flag on tool results; everything else survives.
    let mut expected = canon.clone();
    if let Part::ToolResult { is_error, .. } = &mut expected.messages[2].content[0] {
        *is_error = false;
    }
    assert_eq!(semantic(&back), semantic(&expected));

    let a = anthropic::render_request(&back, "claude-sonnet-4", None);
    assert_eq!(
        a["messages"],
        json!([
            {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]},
            {"role": "assistant", "content": [
                {"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": "toolu_01", "name": "get_weather", "input": {"city": "Paris"}}
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_01", "content": "18C"},
                {"type": "text", "text": "And now?"}
            ]}
        ])
    );
    assert_eq!(
        a["tool_choice"],
        json!({"type": "tool", "name": "get_weather"})
    );
    assert_eq!(a["system"], json!("You are terse.\n\nBe kind."));
}

#[test]
fn extra_fields_pass_through_only_to_the_same_dialect() {
    let o = openai::parse_request(&openai_body()).unwrap();
    let same = openai::render_request(&o, "gpt-4o-mini", None);
    assert_eq!(same["user"], json!("u-42"));
    assert_eq!(same["seed"], json!(7));
    assert_eq!(same["model"], json!("gpt-4o-mini"));
    // The caller's spelling of the limit is kept for OpenAI upstreams.
    assert_eq!(same["max_completion_tokens"], json!(256));
    assert!(same.get("max_tokens").is_none());

    let a = anthropic::parse_request(&anthropic_body()).unwrap();
    let same = anthropic::render_request(&a, "claude-opus-4", None);
    assert_eq!(same["metadata"], json!({"user_id": "u1"}));
    assert!(same.get("stream").is_none());
}

#[test]
fn lowered_max_tokens_is_rendered_in_the_callers_spelling() {
    let mut o = openai::parse_request(&openai_body()).unwrap();
    o.max_tokens = Some(100);
    assert_eq!(
        openai::render_request(&o, "m", None)["max_completion_tokens"],
        json!(100)
    );
    o.max_tokens = None;
    let r = openai::render_request(&o, "m", None);
    assert!(r.get("max_completion_tokens").is_none() && r.get("max_tokens").is_none());
}

#[test]
fn anthropic_render_uses_default_max_tokens_and_clamps_temperature() {
    let mut req = openai::parse_request(&json!({
        "model": "m", "messages": [{"role": "user", "content": "hi"}], "temperature": 1.7,
        "stop": "\n"
    }))
    .unwrap();
    let a = anthropic::render_request(&req, "claude", None);
    assert_eq!(a["max_tokens"], json!(anthropic::DEFAULT_MAX_TOKENS));
    assert_eq!(a["temperature"], json!(1.0));
    assert!(
        a.get("stop_sequences").is_none(),
        "whitespace-only stop sequences are rejected by Anthropic"
    );
    req.stream = false;
    assert!(
        anthropic::render_request(&req, "claude", None)
            .get("stream")
            .is_none()
    );
}

#[test]
fn stream_request_asks_upstream_for_usage_even_when_caller_did_not() {
    let req = openai::parse_request(&json!({
        "model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": true
    }))
    .unwrap();
    assert!(!req.include_usage);
    let o = openai::render_request(&req, "m", None);
    assert_eq!(o["stream"], json!(true));
    assert_eq!(o["stream_options"], json!({"include_usage": true}));
}

#[test]
fn prefill_is_a_trailing_assistant_message_in_both_dialects() {
    let req = openai::parse_request(&json!({
        "model": "m", "messages": [{"role": "user", "content": "Count to five"}]
    }))
    .unwrap();
    let o = openai::render_request(&req, "m", Some("1, 2, "));
    assert_eq!(
        o["messages"][1],
        json!({"role": "assistant", "content": "1, 2, "})
    );
    let a = anthropic::render_request(&req, "m", Some("1, 2, "));
    assert_eq!(
        a["messages"][1],
        json!({"role": "assistant", "content": [{"type": "text", "text": "1, 2,"}]}),
        "Anthropic rejects a final assistant message ending in whitespace"
    );
    assert_eq!(anthropic::effective_prefill("1, 2, "), "1, 2,");
    let none = anthropic::render_request(&req, "m", Some("  "));
    assert_eq!(none["messages"].as_array().unwrap().len(), 1);
}

#[test]
fn anthropic_render_merges_same_role_and_places_system_messages() {
    let req = ChatRequest {
        model: "m".into(),
        system: Some("base".into()),
        messages: vec![
            Message::text(Role::System, "summary of earlier turns"),
            Message::text(Role::User, "a"),
            Message::text(Role::User, "b"),
            Message::text(Role::Assistant, "c"),
            Message::text(Role::User, "   "),
            Message::text(Role::System, "nudge: you seem stuck"),
        ],
        tools: vec![],
        tool_choice: Some(json!("auto")),
        max_tokens: None,
        temperature: None,
        top_p: None,
        stop: vec![],
        stream: false,
        include_usage: false,
        extra: Default::default(),
        dialect: Dialect::OpenAi,
        origin: None,
    };
    let a = anthropic::render_request(&req, "m", None);
    assert_eq!(a["system"], json!("base\n\nsummary of earlier turns"));
    assert_eq!(
        a["messages"],
        json!([
            {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
            {"role": "assistant", "content": [{"type": "text", "text": "c"}]},
            {"role": "user", "content": [{"type": "text", "text": "nudge: you seem stuck"}]}
        ])
    );
    assert!(
        a.get("tool_choice").is_none(),
        "no tool_choice without tools"
    );
}

#[test]
fn openai_keeps_a_mid_conversation_system_message_in_place() {
    let req = openai::parse_request(&json!({"model": "m", "messages": [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "u"},
        {"role": "system", "content": "late"}
    ]}))
    .unwrap();
    assert_eq!(req.system.as_deref(), Some("s"));
    assert_eq!(req.messages[1], Message::text(Role::System, "late"));
    let o = openai::render_request(&req, "m", None);
    assert_eq!(
        o["messages"][2],
        json!({"role": "system", "content": "late"})
    );
}

/// Issue 27: Claude Code (2.1.328) sends a `system` message inside
/// `messages`, after the first user message, its blocks carrying
/// `cache_control`. hale refused it with a 400 ("unknown role `system`").
#[test]
fn anthropic_takes_a_system_message_inside_messages_issue_27() {
    let body = json!({
        "model": "claude-x",
        "max_tokens": 1000,
        "system": [{"type": "text", "text": "You are an agent."}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Say hi"}]},
            {"role": "system", "content": [{"type": "text", "text": "# Environment",
                                            "cache_control": {"type": "ephemeral"}}]}
        ],
        "stream": true
    });
    let req = anthropic::parse_request(&body).unwrap();
    assert_eq!(req.system.as_deref(), Some("You are an agent."));
    assert_eq!(
        req.messages,
        vec![
            Message::text(Role::User, "Say hi"),
            Message::text(Role::System, "# Environment"),
        ]
    );

    // To an Anthropic provider: the client's JSON, the system message as sent.
    let same = hale_proto::render_for(
        Dialect::Anthropic,
        &client_request(Dialect::Anthropic, &body),
        "served",
        None,
    );
    assert_eq!(same.body["messages"], body["messages"]);
    assert_eq!(same.changes, ["model"]);

    // To OpenAI: a system message in place.
    let o = openai::render_request(&req, "gpt-4o", None);
    assert_eq!(
        o["messages"],
        json!([
            {"role": "system", "content": "You are an agent."},
            {"role": "user", "content": "Say hi"},
            {"role": "system", "content": "# Environment"}
        ])
    );

    // Re-rendered for Anthropic (hale changed the messages): user text after
    // the lead, joined to the user turn before it (roles alternate).
    let a = anthropic::render_request(&req, "claude-x", None);
    assert_eq!(
        a["messages"],
        json!([{"role": "user", "content": [
            {"type": "text", "text": "Say hi"},
            {"type": "text", "text": "# Environment"}
        ]}])
    );
}

#[test]
fn unparsable_arguments_survive_the_trip_through_anthropic() {
    let raw = "{\"city\": \"Par";
    let req = openai::parse_request(&json!({"model": "m", "messages": [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "functions.get_weather:0", "type": "function", "function": {"name": "get_weather", "arguments": raw}},
            {"id": "call_e", "type": "function", "function": {"name": "noop", "arguments": ""}}
        ]},
        {"role": "tool", "tool_call_id": "functions.get_weather:0", "content": "error: bad json"},
        {"role": "tool", "tool_call_id": "call_e", "content": "ok"}
    ]}))
    .unwrap();
    let a = anthropic::render_request(&req, "m", None);
    let calls = &a["messages"][1]["content"];
    assert_eq!(
        calls[0]["input"],
        json!({(anthropic::RAW_ARGUMENTS_KEY): raw})
    );
    assert_eq!(calls[1]["input"], json!({}));
    // Ids are made valid for Anthropic, identically in the call and its result.
    assert_eq!(calls[0]["id"], json!("functions_get_weather_0"));
    assert_eq!(
        a["messages"][2]["content"][0]["tool_use_id"],
        json!("functions_get_weather_0")
    );

    let back = anthropic::parse_request(&a).unwrap();
    match &back.messages[1].content[0] {
        Part::ToolCall { arguments, .. } => assert_eq!(arguments, raw),
        other => panic!("expected a tool call, got {other:?}"),
    }
    assert_eq!(
        anthropic::input_to_arguments(&anthropic::arguments_to_input("[1,2]")),
        "[1,2]"
    );
}

#[test]
fn images_translate_between_dialects() {
    let req = openai::parse_request(
        &json!({"model": "m", "messages": [{"role": "user", "content": [
            {"type": "text", "text": "what is this?"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0"}},
            {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg"}}
        ]}]}),
    )
    .unwrap();
    assert!(matches!(
        req.messages[0].content[1],
        Part::Opaque {
            dialect: Dialect::OpenAi,
            ..
        }
    ));
    let a = anthropic::render_request(&req, "m", None);
    assert_eq!(
        a["messages"][0]["content"][1],
        json!({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0"}})
    );
    assert_eq!(
        a["messages"][0]["content"][2],
        json!({"type": "image", "source": {"type": "url", "url": "https://example.com/cat.jpg"}})
    );
    let back = anthropic::parse_request(&a).unwrap();
    let o = openai::render_request(&back, "m", None);
    assert_eq!(
        o["messages"][0]["content"][1],
        json!({"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0"}})
    );
}

fn openai_err(body: Value) -> (String, String) {
    let e = openai::parse_request(&body).expect_err("must fail");
    (e.path, e.message)
}

fn anthropic_err(body: Value) -> (String, String) {
    let e = anthropic::parse_request(&body).expect_err("must fail");
    (e.path, e.message)
}

#[test]
fn openai_parse_errors_name_the_json_path() {
    let user = json!({"role": "user", "content": "hi"});
    let cases: Vec<(Value, &str, &str)> = vec![
        (json!([1]), "body", "must be an object"),
        (json!({"messages": []}), "model", "missing `model`"),
        (
            json!({"model": 3, "messages": []}),
            "model",
            "must be a string",
        ),
        (json!({"model": "m"}), "messages", "missing `messages`"),
        (
            json!({"model": "m", "messages": {"role": "user"}}),
            "messages",
            "must be an array",
        ),
        (
            json!({"model": "m", "messages": [user, {"role": "robot", "content": "x"}]}),
            "messages[1].role",
            "unknown role `robot`",
        ),
        (
            json!({"model": "m", "messages": [{"content": "x"}]}),
            "messages[0].role",
            "missing `role`",
        ),
        (
            json!({"model": "m", "messages": [{"role": "user", "content": 5}]}),
            "messages[0].content",
            "must be a string or an array",
        ),
        (
            json!({"model": "m", "messages": [{"role": "user", "content": [{"text": "x"}]}]}),
            "messages[0].content[0].type",
            "missing `type`",
        ),
        (
            json!({"model": "m", "messages": [user, user, {"role": "tool", "content": "r"}]}),
            "messages[2].tool_call_id",
            "without `tool_call_id`",
        ),
        (
            json!({"model": "m", "messages": [{"role": "assistant", "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "f", "arguments": {"a": 1}}}]}]}),
            "messages[0].tool_calls[0].function.arguments",
            "JSON-encoded string",
        ),
        (
            json!({"model": "m", "messages": [{"role": "assistant", "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": "{}"}}]}]}),
            "messages[0].tool_calls[0].id",
            "missing `id`",
        ),
        (
            json!({"model": "m", "messages": [], "tools": [{"type": "function"}]}),
            "tools[0].function",
            "missing `function`",
        ),
        (
            json!({"model": "m", "messages": [], "tools": [{"type": "web_search"}]}),
            "tools[0].type",
            "unsupported tool type",
        ),
        (
            json!({"model": "m", "messages": [], "tool_choice": "sometimes"}),
            "tool_choice",
            "unknown tool_choice",
        ),
        (
            json!({"model": "m", "messages": [], "stop": ["a", 1]}),
            "stop[1]",
            "must be a string",
        ),
        (
            json!({"model": "m", "messages": [], "max_tokens": -1}),
            "max_tokens",
            "non-negative integer",
        ),
        (
            json!({"model": "m", "messages": [], "temperature": "hot"}),
            "temperature",
            "must be a number",
        ),
        (
            json!({"model": "m", "messages": [], "stream": "yes"}),
            "stream",
            "must be a boolean",
        ),
        (
            json!({"model": "m", "messages": [], "stream_options": {"include_usage": 1}}),
            "stream_options.include_usage",
            "must be a boolean",
        ),
    ];
    for (body, path, msg) in cases {
        let (p, m) = openai_err(body.clone());
        assert_eq!(p, path, "for {body}");
        assert!(m.contains(msg), "for {body}: message {m:?} lacks {msg:?}");
    }
}

#[test]
fn anthropic_parse_errors_name_the_json_path() {
    let user = json!({"role": "user", "content": "hi"});
    let cases: Vec<(Value, &str, &str)> = vec![
        (json!("x"), "body", "must be an object"),
        (json!({"messages": []}), "model", "missing `model`"),
        (
            json!({"model": "m", "messages": "hi"}),
            "messages",
            "must be an array",
        ),
        (
            json!({"model": "m", "messages": [{"role": "tool", "content": "x"}]}),
            "messages[0].role",
            "unknown role `tool`",
        ),
        (
            json!({"model": "m", "messages": [user, {"role": "assistant"}]}),
            "messages[1].content",
            "missing `content`",
        ),
        (
            json!({"model": "m", "messages": [{"role": "user", "content": [{"type": "tool_result", "content": "r"}]}]}),
            "messages[0].content[0].tool_use_id",
            "missing `tool_use_id`",
        ),
        (
            json!({"model": "m", "messages": [user, {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": "{}"}]}]}),
            "messages[1].content[0].input",
            "must be an object",
        ),
        (
            json!({"model": "m", "messages": [user, {"role": "assistant", "content": [{"type": "tool_result", "tool_use_id": "t"}]}]}),
            "messages[1].content[0].type",
            "belong in user messages",
        ),
        (
            json!({"model": "m", "messages": [{"role": "user", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}]}]}),
            "messages[0].content[0].type",
            "belong in assistant messages",
        ),
        (
            json!({"model": "m", "messages": [], "system": 1}),
            "system",
            "must be a string or an array",
        ),
        (
            json!({"model": "m", "messages": [], "system": [{"type": "image"}]}),
            "system[0].type",
            "only `text` blocks",
        ),
        (
            json!({"model": "m", "messages": [], "tools": [{"name": "f"}]}),
            "tools[0].input_schema",
            "missing `input_schema`",
        ),
        (
            json!({"model": "m", "messages": [], "tools": [{"type": "bash_20250124", "name": "bash"}]}),
            "tools[0].type",
            "unsupported tool type",
        ),
        (
            json!({"model": "m", "messages": [], "tool_choice": {"type": "maybe"}}),
            "tool_choice.type",
            "unknown tool_choice type",
        ),
        (
            json!({"model": "m", "messages": [], "tool_choice": {"type": "tool"}}),
            "tool_choice.name",
            "missing `name`",
        ),
        (
            json!({"model": "m", "messages": [], "stop_sequences": [1]}),
            "stop_sequences[0]",
            "must be a string",
        ),
        (
            json!({"model": "m", "messages": [], "max_tokens": 1.5}),
            "max_tokens",
            "non-negative integer",
        ),
    ];
    for (body, path, msg) in cases {
        let (p, m) = anthropic_err(body.clone());
        assert_eq!(p, path, "for {body}");
        assert!(m.contains(msg), "for {body}: message {m:?} lacks {msg:?}");
    }
}

#[test]
fn null_optional_fields_read_as_absent() {
    let req = openai::parse_request(&json!({
        "model": "m", "messages": [{"role": "user", "content": "hi"}],
        "temperature": null, "tools": null, "stop": null, "max_tokens": null, "tool_choice": null
    }))
    .unwrap();
    assert_eq!(
        (req.temperature, req.max_tokens, req.tool_choice),
        (None, None, None)
    );
    assert!(req.tools.is_empty() && req.stop.is_empty());
}

// ---------------------------------------------------------------------------
// Same-dialect fidelity (hale_proto::parse_request + hale_proto::render_for).
// ---------------------------------------------------------------------------

/// One of seven changes hale may make to a request (0: none; 1: the model;
/// 2: a nudge; 3: max_tokens; 4: a prefill, returned; 5: the stream flag;
/// else: the temperature), for the rendering property tests.
fn change_request(change: u8, req: &mut ChatRequest, model: &mut String) -> Option<&'static str> {
    match change {
        0 => {}
        1 => model.push_str("-other"),
        2 => req.messages.push(Message::text(Role::System, "Nudge.")),
        3 => req.max_tokens = Some(req.max_tokens.map_or(64, |n| n + 1)),
        4 => return Some("Partial answer"),
        5 => req.stream = !req.stream,
        _ => req.temperature = Some(req.temperature.map_or(1.5, |t| t + 0.25)),
    }
    None
}

fn client_request(dialect: Dialect, body: &Value) -> ChatRequest {
    hale_proto::parse_request(dialect, body.clone(), &Default::default()).unwrap()
}

fn anthropic_cached_body() -> Value {
    json!({
        "model": "claude-x",
        "max_tokens": 1000,
        "system": [{"type": "text", "text": "Manual.", "cache_control": {"type": "ephemeral"}}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Look it up.", "cache_control": {"type": "ephemeral"}}]},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "grep", "input": {"q": "x"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "a long result",
                                          "cache_control": {"type": "ephemeral"}}]},
            {"role": "assistant", "content": "Found it."},
            {"role": "user", "content": [{"type": "text", "text": "And now?", "cache_control": {"type": "ephemeral"}}]}
        ],
        "thinking": {"type": "enabled", "budget_tokens": 512}
    })
}

#[test]
fn an_unchanged_request_renders_as_the_client_sent_it_with_the_served_model() {
    for (dialect, body) in [
        (Dialect::OpenAi, openai_body()),
        (Dialect::Anthropic, anthropic_cached_body()),
    ] {
        let req = client_request(dialect, &body);
        let out = hale_proto::render_for(dialect, &req, "served", None);
        let mut want = body.clone();
        want["model"] = json!("served");
        assert_eq!(out.body, want, "{dialect:?}");
        assert_eq!(out.changes, ["model"]);
    }
}

#[test]
fn a_nudge_is_the_only_message_hale_encodes_the_others_keep_their_json() {
    // OpenAI: the nudge is one more system message; every other message is the client's.
    let body = openai_body();
    let mut req = client_request(Dialect::OpenAi, &body);
    req.messages
        .push(Message::text(Role::System, "Stop repeating yourself."));
    let out = hale_proto::render_for(Dialect::OpenAi, &req, "gpt-4o", None);
    let sent = body["messages"].as_array().unwrap();
    let got = out.body["messages"].as_array().unwrap();
    assert_eq!(&got[..sent.len()], &sent[..]);
    assert_eq!(
        got[sent.len()],
        json!({"role": "system", "content": "Stop repeating yourself."})
    );
    assert_eq!(out.changes, ["messages"]);

    // Anthropic: the nudge joins the last user message (roles alternate); that
    // message keeps its own block with its cache_control.
    let body = anthropic_cached_body();
    let mut req = client_request(Dialect::Anthropic, &body);
    req.messages
        .push(Message::text(Role::System, "Stop repeating yourself."));
    let out = hale_proto::render_for(Dialect::Anthropic, &req, "claude-x", None);
    let sent = body["messages"].as_array().unwrap();
    let got = out.body["messages"].as_array().unwrap();
    assert_eq!(got.len(), sent.len());
    assert_eq!(&got[..sent.len() - 1], &sent[..sent.len() - 1]);
    assert_eq!(
        got[sent.len() - 1]["content"],
        json!([
            {"type": "text", "text": "And now?", "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": "Stop repeating yourself."}
        ])
    );
    assert_eq!(out.body["system"], body["system"]);
    assert_eq!(out.body["thinking"], body["thinking"]);
}

#[test]
fn compaction_re_encodes_only_the_messages_it_replaced_or_changed() {
    let body = anthropic_cached_body();
    let mut req = client_request(Dialect::Anthropic, &body);
    // Tier 1: the tool result's content is stripped to a placeholder.
    for m in &mut req.messages {
        for p in &mut m.content {
            if let Part::ToolResult { content, .. } = p {
                *content = "[stripped by hale]".into();
            }
        }
    }
    let out = hale_proto::render_for(Dialect::Anthropic, &req, "claude-x", None);
    let sent = body["messages"].as_array().unwrap();
    let got = out.body["messages"].as_array().unwrap();
    assert_eq!(got.len(), sent.len());
    for i in [0, 1, 3, 4] {
        assert_eq!(got[i], sent[i], "message {i} is the client's");
    }
    assert_eq!(
        got[2],
        json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "[stripped by hale]"}]})
    );
    assert_eq!(out.changes, ["messages"]);

    // A summary replacing the oldest messages: the rest is still the client's.
    let body = openai_body();
    let mut req = client_request(Dialect::OpenAi, &body);
    req.messages.splice(
        ..3,
        [Message::text(
            Role::System,
            "[Summary by hale] Paris 18C, Rome 22C.",
        )],
    );
    let out = hale_proto::render_for(Dialect::OpenAi, &req, "gpt-4o", None);
    let sent = body["messages"].as_array().unwrap();
    let got = out.body["messages"].as_array().unwrap();
    // Two lifted system messages, the summary, then the last two tool results' successors.
    assert_eq!(&got[..2], &sent[..2]);
    assert_eq!(got[2]["content"], "[Summary by hale] Paris 18C, Rome 22C.");
    assert_eq!(&got[3..], &sent[5..]);
}

#[test]
fn a_prefill_and_a_lowered_max_tokens_are_patched_into_the_clients_json() {
    let body = anthropic_cached_body();
    let mut req = client_request(Dialect::Anthropic, &body);
    req.max_tokens = Some(500);
    let out = hale_proto::render_for(
        Dialect::Anthropic,
        &req,
        "claude-x",
        Some("Here is what I found "),
    );
    let got = out.body["messages"].as_array().unwrap();
    assert_eq!(
        got.last().unwrap(),
        &json!({"role": "assistant", "content": [{"type": "text", "text": "Here is what I found"}]})
    );
    assert_eq!(out.body["max_tokens"], 500);
    assert_eq!(out.changes, ["prefill", "max_tokens"]);

    // OpenAI keeps the caller's spelling of the limit.
    let body = openai_body();
    let mut req = client_request(Dialect::OpenAi, &body);
    req.max_tokens = Some(128);
    let out = hale_proto::render_for(Dialect::OpenAi, &req, "gpt-4o", None);
    assert_eq!(out.body["max_completion_tokens"], 128);
    assert!(out.body.get("max_tokens").is_none());
    assert_eq!(out.changes, ["max_tokens"]);
}

#[test]
fn only_provider_feature_headers_are_kept_and_only_for_their_dialect() {
    let mut h = http::HeaderMap::new();
    h.insert("anthropic-beta", "a-1".parse().unwrap());
    h.append("anthropic-beta", "b-2".parse().unwrap());
    h.insert("openai-beta", "assistants=v2".parse().unwrap());
    h.insert("authorization", "Bearer secret".parse().unwrap());
    h.insert("x-api-key", "secret".parse().unwrap());
    h.insert("cookie", "s=1".parse().unwrap());
    let req = hale_proto::parse_request(Dialect::Anthropic, anthropic_cached_body(), &h).unwrap();
    let to_anthropic = hale_proto::render_for(Dialect::Anthropic, &req, "claude-x", None);
    assert_eq!(
        to_anthropic.headers,
        [("anthropic-beta", "a-1,b-2".to_owned())]
    );
    assert_eq!(to_anthropic.changes, ["dropped: openai-beta header"]);
    let to_openai = hale_proto::render_for(Dialect::OpenAi, &req, "gpt-4o", None);
    assert_eq!(
        to_openai.headers,
        [("openai-beta", "assistants=v2".to_owned())]
    );
    assert!(
        to_openai
            .changes
            .contains(&"dropped: anthropic-beta header".to_owned()),
        "{:?}",
        to_openai.changes
    );
}

// ---------------------------------------------------------------------------
// The client's own bytes (issue 13): sent as they are when hale changed
// nothing in the body.
// ---------------------------------------------------------------------------

/// A client's request as it arrived, the body written compact or
/// (`pretty`) spaced out.
fn sent_request(dialect: Dialect, body: &Value, pretty: bool) -> ChatRequest {
    let raw = if pretty {
        serde_json::to_vec_pretty(body)
    } else {
        serde_json::to_vec(body)
    };
    let raw = bytes::Bytes::from(raw.unwrap());
    let sent = hale_proto::parse_sent(raw).unwrap();
    hale_proto::parse_request_sent(dialect, sent, &Default::default()).unwrap()
}

#[test]
fn an_untouched_request_goes_out_as_the_clients_bytes() {
    // Spaces and key order no re-serialisation would keep.
    let text = r#"{ "stream": false, "model": "m",
        "messages": [{"role": "user", "content": "hi"}], "temperature": 0.70 }"#;
    let sent = hale_proto::parse_sent(bytes::Bytes::from(text)).unwrap();
    let req = hale_proto::parse_request_sent(Dialect::OpenAi, sent, &Default::default()).unwrap();
    let out = hale_proto::render_for(Dialect::OpenAi, &req, "m", None);
    assert_eq!(out.raw.as_deref(), Some(text.as_bytes()));
    assert!(out.changes.is_empty(), "{:?}", out.changes);
    // Another model, or a repeated key, or another dialect: hale's JSON.
    let out = hale_proto::render_for(Dialect::OpenAi, &req, "other", None);
    assert_eq!((out.raw, out.changes), (None, vec!["model".to_owned()]));
    let out = hale_proto::render_for(Dialect::Anthropic, &req, "m", None);
    assert_eq!(out.raw, None);
    let twice = r#"{"model": "m", "model": "m", "messages": [{"role": "user", "content": "hi"}]}"#;
    let sent = hale_proto::parse_sent(bytes::Bytes::from(twice)).unwrap();
    let req = hale_proto::parse_request_sent(Dialect::OpenAi, sent, &Default::default()).unwrap();
    assert_eq!(
        hale_proto::render_for(Dialect::OpenAi, &req, "m", None).raw,
        None
    );
}

mod raw_bodies {
    use super::*;
    use proptest::prelude::*;

    fn text() -> impl Strategy<Value = String> {
        "[a-z ]{0,12}"
    }

    /// OpenAI content: a string, text blocks, or (assistant) null.
    fn oa_content() -> impl Strategy<Value = Value> {
        prop_oneof![
            text().prop_map(Value::from),
            proptest::collection::vec(text(), 1..3).prop_map(|ts| {
                Value::Array(
                    ts.into_iter()
                        .map(|t| json!({"type": "text", "text": t}))
                        .collect(),
                )
            }),
        ]
    }

    fn oa_message() -> impl Strategy<Value = Value> {
        prop_oneof![
            oa_content().prop_map(|c| json!({"role": "user", "content": c})),
            oa_content().prop_map(|c| json!({"role": "assistant", "content": c})),
            (text(), any::<bool>()).prop_map(|(args, null)| json!({
                "role": "assistant",
                "content": if null { Value::Null } else { json!("") },
                "tool_calls": [{"id": "c1", "type": "function",
                                "function": {"name": "f", "arguments": format!("{{\"a\":\"{args}\"}}")}}]
            })),
            text().prop_map(|c| json!({"role": "tool", "tool_call_id": "c1", "content": c})),
        ]
    }

    /// An OpenAI body, and whether hale must patch it even when nothing
    /// changed (a stream without `include_usage`).
    fn openai() -> impl Strategy<Value = (Value, bool)> {
        (
            proptest::collection::vec(
                prop_oneof![Just("system"), Just("developer")].prop_map(|r| json!({"role": r, "content": "be brief"})),
                0..3,
            ),
            proptest::collection::vec(oa_message(), 1..6),
            (0..3u8, 0..6u8, proptest::option::of(1..500u32), any::<bool>()),
            (proptest::option::of(0.0..2.0f64), any::<bool>(), any::<bool>()),
        )
            .prop_map(|(lead, msgs, (stream, usage, max, spelled_new), (temp, extra, tools))| {
                let mut m = serde_json::Map::new();
                m.insert("model".into(), json!("gpt-4o"));
                m.insert("messages".into(), Value::Array(lead.into_iter().chain(msgs).collect()));
                match stream {
                    0 => {}
                    1 => {
                        m.insert("stream".into(), json!(false));
                    }
                    _ => {
                        m.insert("stream".into(), json!(true));
                    }
                }
                match usage {
                    0 => {}
                    1 => {
                        m.insert("stream_options".into(), json!({"include_usage": true}));
                    }
                    2 => {
                        m.insert("stream_options".into(), json!({"include_usage": false}));
                    }
                    3 => {
                        m.insert("stream_options".into(), json!({}));
                    }
                    4 => {
                        m.insert("stream_options".into(), json!({"include_obfuscation": false}));
                    }
                    _ => {
                        m.insert("stream_options".into(), Value::Null);
                    }
                }
                if let Some(n) = max {
                    let key = if spelled_new { "max_completion_tokens" } else { "max_tokens" };
                    m.insert(key.into(), json!(n));
                }
                if let Some(t) = temp {
                    m.insert("temperature".into(), json!(t));
                }
                if extra {
                    m.insert("seed".into(), json!(7));
                    m.insert("logprobs".into(), json!(true));
                }
                if tools {
                    m.insert("tools".into(), json!([{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]));
                    m.insert("tool_choice".into(), json!("auto"));
                }
                let streaming = stream == 2;
                let patched = if streaming {
                    usage != 1
                } else {
                    // Not streaming: `stream_options` alone is left as sent.
                    false
                };
                (Value::Object(m), patched)
            })
    }

    fn an_message() -> impl Strategy<Value = Value> {
        let block = prop_oneof![
            text().prop_map(|t| json!({"type": "text", "text": t})),
            text().prop_map(
                |t| json!({"type": "text", "text": t, "cache_control": {"type": "ephemeral"}})
            ),
        ];
        prop_oneof![
            text().prop_map(|c| json!({"role": "user", "content": c})),
            text().prop_map(|c| json!({"role": "assistant", "content": c})),
            proptest::collection::vec(block.clone(), 1..3).prop_map(|b| json!({"role": "user", "content": b})),
            proptest::collection::vec(block, 1..3).prop_map(|b| json!({"role": "assistant", "content": b})),
            Just(json!({"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {"q": 1}}]})),
            text().prop_map(|c| json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": c}]})),
        ]
    }

    /// An Anthropic body, and whether hale must patch it even when nothing
    /// changed (no `max_tokens`, which Anthropic requires).
    fn anthropic() -> impl Strategy<Value = (Value, bool)> {
        (
            proptest::collection::vec(an_message(), 1..6),
            0..3u8,
            proptest::option::of(1..500u32),
            (any::<bool>(), proptest::option::of(0.0..1.0f64), any::<bool>()),
        )
            .prop_map(|(msgs, system, max, (stream, temp, thinking))| {
                let mut m = serde_json::Map::new();
                m.insert("model".into(), json!("claude-x"));
                m.insert("messages".into(), Value::Array(msgs));
                match system {
                    0 => {}
                    1 => {
                        m.insert("system".into(), json!("be brief"));
                    }
                    _ => {
                        m.insert("system".into(), json!([{"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral"}}]));
                    }
                }
                if let Some(n) = max {
                    m.insert("max_tokens".into(), json!(n));
                }
                if stream {
                    m.insert("stream".into(), json!(true));
                }
                if let Some(t) = temp {
                    m.insert("temperature".into(), json!(t));
                }
                if thinking {
                    m.insert("thinking".into(), json!({"type": "enabled", "budget_tokens": 512}));
                }
                (Value::Object(m), max.is_none())
            })
    }

    proptest! {
        /// Whatever the request and whatever hale changes for an attempt,
        /// the client's bytes go out only when they are, as JSON, exactly
        /// the body hale would have sent; and they do go out whenever hale
        /// changed nothing, or (an OpenAI stream that did not ask for
        /// usage) only `stream_options`, spliced into them.
        #[test]
        fn a_raw_body_is_the_patched_body(
            (dialect, (body, patched)) in prop_oneof![
                openai().prop_map(|b| (Dialect::OpenAi, b)),
                anthropic().prop_map(|b| (Dialect::Anthropic, b)),
            ],
            change in 0..7u8,
            pretty in any::<bool>(),
        ) {
            let mut req = sent_request(dialect, &body, pretty);
            let mut model = body["model"].as_str().unwrap().to_owned();
            let prefill = change_request(change, &mut req, &mut model);
            let out = hale_proto::render_for(dialect, &req, &model, prefill);
            if let Some(raw) = &out.raw {
                let as_json: Value = serde_json::from_slice(raw).unwrap();
                prop_assert_eq!(&as_json, &out.body);
                if patched {
                    prop_assert_eq!(&out.changes, &vec!["stream_options".to_string()]);
                } else {
                    prop_assert!(out.changes.is_empty(), "{:?}", out.changes);
                }
            }
            // Anthropic's patch (a `max_tokens` added) rebuilds the body.
            let spliced = patched && dialect == Dialect::OpenAi;
            prop_assert_eq!(
                out.raw.is_some(),
                change == 0 && (!patched || spliced),
                "change {} patched {} changes {:?}\n{}",
                change,
                patched,
                out.changes,
                body
            );
        }

        /// What an attempt sends (`prepare`, whose JSON is built only when
        /// read) is what `render_for` renders: the same raw bytes, headers,
        /// changes and body, whatever hale changed, for every target dialect.
        #[test]
        fn a_prepared_request_is_the_rendered_one(
            (dialect, (body, _)) in prop_oneof![
                openai().prop_map(|b| (Dialect::OpenAi, b)),
                anthropic().prop_map(|b| (Dialect::Anthropic, b)),
            ],
            change in 0..7u8,
            target in 0..5u8,
            beta in any::<bool>(),
            pretty in any::<bool>(),
        ) {
            let mut headers = http::HeaderMap::new();
            if beta {
                headers.insert("anthropic-beta", "x-1".parse().unwrap());
            }
            let text = if pretty {
                serde_json::to_string_pretty(&body).unwrap()
            } else {
                body.to_string()
            };
            let sent = hale_proto::parse_sent(bytes::Bytes::from(text)).unwrap();
            let mut req = hale_proto::parse_request_sent(dialect, sent, &headers).unwrap();
            let mut model = body["model"].as_str().unwrap().to_owned();
            let prefill = change_request(change, &mut req, &mut model);
            let target = [Dialect::OpenAi, Dialect::Anthropic, Dialect::Responses, Dialect::Gemini, Dialect::Bedrock][usize::from(target)];
            let want = hale_proto::render_for(target, &req, &model, prefill);
            let got = hale_proto::prepare(target, &req, &model, prefill);
            prop_assert_eq!(&got.raw, &want.raw);
            prop_assert_eq!(&got.headers, &want.headers);
            prop_assert_eq!(&got.changes, &want.changes);
            prop_assert_eq!(got.body(), &want.body);
        }
    }
}
