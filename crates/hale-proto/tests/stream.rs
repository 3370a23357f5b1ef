//! Streaming: recorded upstream streams of each dialect are decoded into
//! canonical events, re-encoded for a caller of the other dialect, and the
//! resulting frame sequence is checked against each dialect's stream grammar.

use hale_proto::openai::SseFrame;
use hale_proto::{StopReason, StreamEvent, Usage, anthropic, openai};
use serde_json::{Value, json};

/// A recorded gpt-4o stream: text, two parallel tool calls, finish, usage, [DONE].
const OPENAI_FIXTURE: &str = r#"data: {"id":"chatcmpl-AB1","object":"chat.completion.chunk","created":1727000000,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_50cad350e4","choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-AB1","object":"chat.completion.chunk","created":1727000000,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_50cad350e4","choices":[{"index":0,"delta":{"content":"Let me"},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-AB1","object":"chat.completion.chunk","created":1727000000,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_50cad350e4","choices":[{"index":0,"delta":{"content":" check."},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-AB1","object":"chat.completion.chunk","created":1727000000,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_50cad350e4","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_pA","type":"function","function":{"name":"get_weather","arguments":""}}]},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-AB1","object":"chat.completion.chunk","created":1727000000,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_50cad350e4","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"ci"}}]},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-AB1","object":"chat.completion.chunk","created":1727000000,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_50cad350e4","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"ty\": \"Paris\"}"}}]},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-AB1","object":"chat.completion.chunk","created":1727000000,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_50cad350e4","choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_pB","type":"function","function":{"name":"get_weather","arguments":""}}]},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-AB1","object":"chat.completion.chunk","created":1727000000,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_50cad350e4","choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":"{\"city\": \"Rome\"}"}}]},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-AB1","object":"chat.completion.chunk","created":1727000000,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_50cad350e4","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"tool_calls"}],"usage":null}

data: {"id":"chatcmpl-AB1","object":"chat.completion.chunk","created":1727000000,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_50cad350e4","choices":[],"usage":{"prompt_tokens":81,"completion_tokens":47,"total_tokens":128,"prompt_tokens_details":{"cached_tokens":0}}}

data: [DONE]

"#;

/// A recorded Claude stream: text block, ping, tool_use block, message_delta, message_stop.
const ANTHROPIC_FIXTURE: &str = r#"event: message_start
data: {"type":"message_start","message":{"id":"msg_014p7gG3wDgGV9EUtLvnow3U","type":"message","role":"assistant","model":"claude-sonnet-4-20250514","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":472,"cache_creation_input_tokens":0,"cache_read_input_tokens":28,"output_tokens":2}}}

event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}

event: ping
data: {"type": "ping"}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Okay, let me check"}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":" the weather."}}

event: content_block_stop
data: {"type":"content_block_stop","index":0}

event: content_block_start
data: {"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_01T1x1fJ34qAmk2tNTrN7Up6","name":"get_weather","input":{}}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":""}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"location\": \"San Fra"}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"ncisco, CA\"}"}}

event: content_block_stop
data: {"type":"content_block_stop","index":1}

event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":89}}

event: message_stop
data: {"type":"message_stop"}

"#;

/// Splits an SSE body into (event, data) pairs (the fixtures use one data line per event).
fn sse(body: &str) -> Vec<(Option<String>, String)> {
    let mut out = Vec::new();
    for block in body.split("\n\n") {
        let mut event = None;
        let mut data = Vec::new();
        for line in block.lines() {
            if let Some(e) = line.strip_prefix("event: ") {
                event = Some(e.to_string());
            } else if let Some(d) = line.strip_prefix("data: ") {
                data.push(d);
            }
        }
        if !data.is_empty() {
            out.push((event, data.join("\n")));
        }
    }
    out
}

fn decode_openai(body: &str) -> Vec<StreamEvent> {
    let mut d = openai::StreamDecoder::new();
    sse(body)
        .iter()
        .flat_map(|(e, data)| d.decode(e.as_deref(), data).unwrap())
        .collect()
}

fn decode_anthropic(body: &str) -> Vec<StreamEvent> {
    let mut d = anthropic::StreamDecoder::new();
    sse(body)
        .iter()
        .flat_map(|(e, data)| d.decode(e.as_deref(), data).unwrap())
        .collect()
}

fn json_of(f: &SseFrame) -> Value {
    serde_json::from_str(&f.data)
        .unwrap_or_else(|e| panic!("frame data is not JSON ({e}): {}", f.data))
}

/// What a caller reassembles from a valid Anthropic stream.
#[derive(Debug, Default, PartialEq)]
struct AnthropicMessage {
    text: String,
    tools: Vec<(String, String, Value)>,
    /// Thinking blocks: (thinking, signature).
    thinking: Vec<(String, String)>,
    stop_reason: String,
    usage: (u64, u64),
}

/// Checks an Anthropic event sequence against the Messages stream grammar and
/// reassembles it: message_start, blocks (start, deltas of that block, stop;
/// one open at a time, indices 0, 1, 2…), one message_delta with no block
/// open, then message_stop last.
fn validate_anthropic(frames: &[SseFrame]) -> AnthropicMessage {
    assert!(!frames.is_empty());
    let mut msg = AnthropicMessage::default();
    let mut open: Option<(u64, String, String)> = None; // index, type, accumulated json
    let mut next_index = 0u64;
    let mut delta_seen = false;
    for (i, f) in frames.iter().enumerate() {
        let v = json_of(f);
        let name = f.event.expect("Anthropic frames are named");
        assert_eq!(
            v["type"],
            json!(name),
            "event name matches data.type at {i}"
        );
        match name {
            "message_start" => {
                assert_eq!(i, 0, "message_start comes first");
                assert_eq!(v["message"]["role"], json!("assistant"));
                msg.usage.0 = v["message"]["usage"]["input_tokens"].as_u64().unwrap();
            }
            "content_block_start" => {
                assert!(i > 0 && !delta_seen, "block after message_delta");
                assert!(open.is_none(), "block {i} starts while another is open");
                let index = v["index"].as_u64().unwrap();
                assert_eq!(index, next_index, "block indices are consecutive");
                next_index += 1;
                let b = &v["content_block"];
                let ty = b["type"].as_str().unwrap().to_string();
                if ty == "tool_use" {
                    assert_eq!(b["input"], json!({}));
                    msg.tools.push((
                        b["id"].as_str().unwrap().into(),
                        b["name"].as_str().unwrap().into(),
                        Value::Null,
                    ));
                }
                if ty == "thinking" {
                    msg.thinking.push((
                        b["thinking"].as_str().unwrap().into(),
                        b["signature"].as_str().unwrap_or("").into(),
                    ));
                }
                open = Some((index, ty, String::new()));
            }
            "content_block_delta" => {
                let (index, ty, acc) = open.as_mut().expect("delta outside a block");
                assert_eq!(v["index"].as_u64().unwrap(), *index);
                match (ty.as_str(), v["delta"]["type"].as_str().unwrap()) {
                    ("text", "text_delta") => {
                        msg.text.push_str(v["delta"]["text"].as_str().unwrap())
                    }
                    ("tool_use", "input_json_delta") => {
                        acc.push_str(v["delta"]["partial_json"].as_str().unwrap())
                    }
                    ("thinking", "thinking_delta") => msg
                        .thinking
                        .last_mut()
                        .unwrap()
                        .0
                        .push_str(v["delta"]["thinking"].as_str().unwrap()),
                    ("thinking", "signature_delta") => msg
                        .thinking
                        .last_mut()
                        .unwrap()
                        .1
                        .push_str(v["delta"]["signature"].as_str().unwrap()),
                    (b, d) => panic!("{d} inside a {b} block"),
                }
            }
            "content_block_stop" => {
                let (index, ty, acc) = open.take().expect("stop without an open block");
                assert_eq!(v["index"].as_u64().unwrap(), index);
                if ty == "tool_use" {
                    let input = if acc.is_empty() {
                        json!({})
                    } else {
                        serde_json::from_str(&acc).unwrap()
                    };
                    msg.tools.last_mut().unwrap().2 = input;
                }
            }
            "message_delta" => {
                assert!(open.is_none(), "message_delta while a block is open");
                assert!(!delta_seen, "one message_delta");
                delta_seen = true;
                msg.stop_reason = v["delta"]["stop_reason"].as_str().unwrap().to_string();
                msg.usage.1 = v["usage"]["output_tokens"].as_u64().unwrap();
                if let Some(input) = v["usage"]["input_tokens"].as_u64() {
                    msg.usage.0 = input;
                }
            }
            "message_stop" => {
                assert!(delta_seen, "message_stop after message_delta");
                assert_eq!(i, frames.len() - 1, "message_stop comes last");
            }
            other => panic!("unexpected event {other}"),
        }
    }
    assert_eq!(frames.last().unwrap().event, Some("message_stop"));
    msg
}

/// What a caller reassembles from a valid OpenAI stream.
#[derive(Debug, Default, PartialEq)]
struct OpenAiMessage {
    text: String,
    tools: Vec<(String, String, String)>,
    finish_reason: String,
    usage: Option<(u64, u64)>,
}

/// Checks an OpenAI chunk sequence: role chunk first, exactly one
/// finish_reason, then (when asked) one usage chunk with empty choices right
/// before `[DONE]`, which is last.
fn validate_openai(frames: &[SseFrame], include_usage: bool, id: &str) -> OpenAiMessage {
    let mut msg = OpenAiMessage::default();
    let n = frames.len();
    assert_eq!(frames[n - 1].data, "[DONE]", "[DONE] comes last");
    let mut finished = false;
    for (i, f) in frames[..n - 1].iter().enumerate() {
        assert_eq!(f.event, None);
        let v = json_of(f);
        assert_eq!(v["object"], json!("chat.completion.chunk"));
        assert_eq!(v["id"], json!(id));
        let choices = v["choices"].as_array().unwrap();
        if choices.is_empty() {
            assert!(include_usage, "usage chunk only when asked");
            assert!(finished, "usage chunk after the finish chunk");
            assert_eq!(i, n - 2, "usage chunk right before [DONE]");
            let u = &v["usage"];
            assert_eq!(
                u["total_tokens"].as_u64().unwrap(),
                u["prompt_tokens"].as_u64().unwrap() + u["completion_tokens"].as_u64().unwrap()
            );
            msg.usage = Some((
                u["prompt_tokens"].as_u64().unwrap(),
                u["completion_tokens"].as_u64().unwrap(),
            ));
            continue;
        }
        let c = &choices[0];
        let delta = &c["delta"];
        if i == 0 {
            assert_eq!(
                delta["role"],
                json!("assistant"),
                "first chunk carries the role"
            );
        }
        assert!(!finished, "nothing but usage after the finish chunk");
        if let Some(t) = delta["content"].as_str() {
            msg.text.push_str(t);
        }
        if let Some(calls) = delta["tool_calls"].as_array() {
            for tc in calls {
                let idx = tc["index"].as_u64().unwrap() as usize;
                if let Some(id) = tc["id"].as_str() {
                    assert_eq!(idx, msg.tools.len(), "tool indices are consecutive");
                    msg.tools.push((
                        id.into(),
                        tc["function"]["name"].as_str().unwrap().into(),
                        String::new(),
                    ));
                }
                msg.tools[idx]
                    .2
                    .push_str(tc["function"]["arguments"].as_str().unwrap_or(""));
            }
        }
        if let Some(r) = c["finish_reason"].as_str() {
            finished = true;
            msg.finish_reason = r.to_string();
        }
    }
    assert!(finished, "exactly one finish chunk");
    if include_usage {
        assert!(msg.usage.is_some(), "usage chunk present when asked");
    }
    msg
}

fn encode_all_anthropic(events: &[StreamEvent]) -> Vec<SseFrame> {
    let mut enc = anthropic::StreamEncoder::new("msg_hale1", "smart", true);
    events.iter().flat_map(|e| enc.encode(e)).collect()
}

fn encode_all_openai(events: &[StreamEvent], include_usage: bool) -> Vec<SseFrame> {
    let mut enc =
        openai::StreamEncoder::new("chatcmpl-hale1", "smart", include_usage).with_created(1);
    events.iter().flat_map(|e| enc.encode(e)).collect()
}

#[test]
fn openai_stream_decodes_to_canonical_events() {
    let events = decode_openai(OPENAI_FIXTURE);
    assert_eq!(
        events,
        vec![
            StreamEvent::Start {
                id: "chatcmpl-AB1".into(),
                model: "gpt-4o-2024-08-06".into()
            },
            StreamEvent::TextDelta("Let me".into()),
            StreamEvent::TextDelta(" check.".into()),
            StreamEvent::ToolCallStart {
                index: 0,
                id: "call_pA".into(),
                name: "get_weather".into()
            },
            StreamEvent::ToolCallDelta {
                index: 0,
                arguments: "{\"ci".into()
            },
            StreamEvent::ToolCallDelta {
                index: 0,
                arguments: "ty\": \"Paris\"}".into()
            },
            StreamEvent::ToolCallStart {
                index: 1,
                id: "call_pB".into(),
                name: "get_weather".into()
            },
            StreamEvent::ToolCallDelta {
                index: 1,
                arguments: "{\"city\": \"Rome\"}".into()
            },
            StreamEvent::Finish(StopReason::ToolUse),
            StreamEvent::Usage(Usage {
                input_tokens: 81,
                output_tokens: 47
            }),
            StreamEvent::Done,
        ]
    );
}

#[test]
fn openai_stream_reencoded_as_anthropic_is_a_valid_message_stream() {
    let frames = encode_all_anthropic(&decode_openai(OPENAI_FIXTURE));
    let names: Vec<&str> = frames.iter().map(|f| f.event.unwrap()).collect();
    assert_eq!(
        names,
        vec![
            "message_start",
            "content_block_start",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "content_block_start",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "content_block_start",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop",
        ]
    );
    let msg = validate_anthropic(&frames);
    assert_eq!(
        msg,
        AnthropicMessage {
            text: "Let me check.".into(),
            tools: vec![
                (
                    "call_pA".into(),
                    "get_weather".into(),
                    json!({"city": "Paris"})
                ),
                (
                    "call_pB".into(),
                    "get_weather".into(),
                    json!({"city": "Rome"})
                ),
            ],
            thinking: Vec::new(),
            stop_reason: "tool_use".into(),
            usage: (81, 47),
        }
    );
    assert_eq!(json_of(&frames[0])["message"]["id"], json!("msg_hale1"));
    assert_eq!(json_of(&frames[0])["message"]["model"], json!("smart"));
}

#[test]
fn anthropic_stream_decodes_to_canonical_events() {
    let events = decode_anthropic(ANTHROPIC_FIXTURE);
    assert_eq!(
        events,
        vec![
            StreamEvent::Start {
                id: "msg_014p7gG3wDgGV9EUtLvnow3U".into(),
                model: "claude-sonnet-4-20250514".into()
            },
            StreamEvent::Usage(Usage {
                input_tokens: 500,
                output_tokens: 2
            }),
            StreamEvent::TextDelta("Okay, let me check".into()),
            StreamEvent::TextDelta(" the weather.".into()),
            StreamEvent::ToolCallStart {
                index: 0,
                id: "toolu_01T1x1fJ34qAmk2tNTrN7Up6".into(),
                name: "get_weather".into()
            },
            StreamEvent::ToolCallDelta {
                index: 0,
                arguments: "{\"location\": \"San Fra".into()
            },
            StreamEvent::ToolCallDelta {
                index: 0,
                arguments: "ncisco, CA\"}".into()
            },
            StreamEvent::Finish(StopReason::ToolUse),
            StreamEvent::Usage(Usage {
                input_tokens: 500,
                output_tokens: 89
            }),
            StreamEvent::Done,
        ]
    );
}

#[test]
fn anthropic_stream_reencoded_as_openai_ends_with_usage_then_done() {
    let frames = encode_all_openai(&decode_anthropic(ANTHROPIC_FIXTURE), true);
    let msg = validate_openai(&frames, true, "chatcmpl-hale1");
    assert_eq!(
        msg,
        OpenAiMessage {
            text: "Okay, let me check the weather.".into(),
            tools: vec![(
                "toolu_01T1x1fJ34qAmk2tNTrN7Up6".into(),
                "get_weather".into(),
                "{\"location\": \"San Francisco, CA\"}".into()
            )],
            finish_reason: "tool_calls".into(),
            usage: Some((500, 89)),
        }
    );
    let first = json_of(&frames[0]);
    assert_eq!(
        first["choices"][0]["delta"],
        json!({"role": "assistant", "content": ""})
    );
    assert_eq!(first["model"], json!("smart"));
    assert_eq!(first["created"], json!(1));
    assert!(
        json_of(&frames[frames.len() - 2])["choices"]
            .as_array()
            .unwrap()
            .is_empty()
    );

    let without = encode_all_openai(&decode_anthropic(ANTHROPIC_FIXTURE), false);
    assert_eq!(
        validate_openai(&without, false, "chatcmpl-hale1").usage,
        None
    );
    assert_eq!(without.len(), frames.len() - 1);
}

#[test]
fn same_dialect_streams_survive_decode_and_encode() {
    let a = validate_anthropic(&encode_all_anthropic(&decode_anthropic(ANTHROPIC_FIXTURE)));
    assert_eq!(a.text, "Okay, let me check the weather.");
    assert_eq!(a.usage, (500, 89));
    let o = validate_openai(
        &encode_all_openai(&decode_openai(OPENAI_FIXTURE), true),
        true,
        "chatcmpl-hale1",
    );
    assert_eq!(o.text, "Let me check.");
    assert_eq!(o.tools.len(), 2);
    assert_eq!(o.usage, Some((81, 47)));
}

fn body_events() -> Vec<StreamEvent> {
    vec![
        StreamEvent::Start {
            id: "up".into(),
            model: "m".into(),
        },
        StreamEvent::TextDelta("hi".into()),
        StreamEvent::ToolCallStart {
            index: 0,
            id: "c0".into(),
            name: "f".into(),
        },
        StreamEvent::ToolCallDelta {
            index: 0,
            arguments: "{}".into(),
        },
    ]
}

#[test]
fn encoders_stay_valid_whatever_order_finish_and_usage_arrive_in() {
    let u = StreamEvent::Usage(Usage {
        input_tokens: 10,
        output_tokens: 5,
    });
    let early = StreamEvent::Usage(Usage {
        input_tokens: 10,
        output_tokens: 1,
    });
    let fin = StreamEvent::Finish(StopReason::ToolUse);
    // (name, events between the body and Done, expected (input, output) usage)
    type Case = (&'static str, Vec<StreamEvent>, Option<(u64, u64)>);
    let tails: Vec<Case> = vec![
        ("finish, usage", vec![fin.clone(), u.clone()], Some((10, 5))),
        ("usage, finish", vec![u.clone(), fin.clone()], Some((10, 5))),
        (
            "early usage, finish, final usage",
            vec![early.clone(), fin.clone(), u.clone()],
            Some((10, 5)),
        ),
        ("usage only", vec![u.clone()], Some((10, 5))),
        ("finish only", vec![fin.clone()], None),
        ("neither", vec![], None),
    ];
    for (name, tail, usage) in tails {
        let mut events = body_events();
        events.extend(tail);
        events.push(StreamEvent::Done);

        let a = validate_anthropic(&encode_all_anthropic(&events));
        assert_eq!(a.stop_reason, "tool_use", "{name}");
        assert_eq!(a.usage, usage.unwrap_or((0, 0)), "{name}");
        assert_eq!(
            a.tools,
            vec![("c0".into(), "f".into(), json!({}))],
            "{name}"
        );

        let o = validate_openai(&encode_all_openai(&events, true), true, "chatcmpl-hale1");
        assert_eq!(o.finish_reason, "tool_calls", "{name}");
        assert_eq!(o.usage, Some(usage.unwrap_or((0, 0))), "{name}");
    }
}

#[test]
fn anthropic_encoder_sends_message_delta_when_usage_follows_finish() {
    let mut enc = anthropic::StreamEncoder::new("msg", "m", false);
    for e in body_events() {
        enc.encode(&e);
    }
    let at_finish = enc.encode(&StreamEvent::Finish(StopReason::EndTurn));
    assert_eq!(
        at_finish
            .iter()
            .map(|f| f.event.unwrap())
            .collect::<Vec<_>>(),
        vec!["content_block_stop"]
    );
    let at_usage = enc.encode(&StreamEvent::Usage(Usage {
        input_tokens: 3,
        output_tokens: 4,
    }));
    assert_eq!(
        at_usage
            .iter()
            .map(|f| f.event.unwrap())
            .collect::<Vec<_>>(),
        vec!["message_delta"]
    );
    assert_eq!(
        json_of(&at_usage[0])["usage"],
        json!({"input_tokens": 3, "output_tokens": 4})
    );
    let at_done = enc.encode(&StreamEvent::Done);
    assert_eq!(
        at_done.iter().map(|f| f.event.unwrap()).collect::<Vec<_>>(),
        vec!["message_stop"]
    );
    assert!(
        enc.encode(&StreamEvent::TextDelta("late".into()))
            .is_empty()
    );
}

#[test]
fn openai_encoder_buffers_usage_that_arrives_before_finish() {
    let mut enc = openai::StreamEncoder::new("id", "m", true).with_created(7);
    assert_eq!(
        enc.encode(&StreamEvent::Start {
            id: "up".into(),
            model: "m".into()
        })
        .len(),
        1
    );
    assert!(
        enc.encode(&StreamEvent::Usage(Usage {
            input_tokens: 9,
            output_tokens: 2
        }))
        .is_empty()
    );
    let fin = enc.encode(&StreamEvent::Finish(StopReason::MaxTokens));
    assert_eq!(fin.len(), 1);
    assert_eq!(
        json_of(&fin[0])["choices"][0]["finish_reason"],
        json!("length")
    );
    let done = enc.encode(&StreamEvent::Done);
    assert_eq!(done.len(), 2);
    assert_eq!(
        json_of(&done[0])["usage"],
        json!({"prompt_tokens": 9, "completion_tokens": 2, "total_tokens": 11})
    );
    assert_eq!(done[1].data, "[DONE]");
    assert!(
        enc.encode(&StreamEvent::Done).is_empty(),
        "nothing after [DONE]"
    );
}

#[test]
fn openai_error_frame_has_no_finish_reason_and_no_done() {
    let mut enc = openai::StreamEncoder::new("id", "m", true);
    let mut frames: Vec<SseFrame> = body_events().iter().flat_map(|e| enc.encode(e)).collect();
    let err = enc.error("stream_broken", "upstream cut the stream after 2 chunks");
    assert_eq!(err.len(), 1);
    assert_eq!(
        json_of(&err[0]),
        json!({"error": {"type": "stream_broken", "message": "upstream cut the stream after 2 chunks", "code": "stream_broken"}})
    );
    frames.extend(err);
    frames.extend(enc.encode(&StreamEvent::Finish(StopReason::EndTurn)));
    frames.extend(enc.encode(&StreamEvent::Done));
    assert!(frames.iter().all(|f| f.data != "[DONE]"));
    assert!(
        frames
            .iter()
            .all(|f| json_of(f)["choices"][0]["finish_reason"].is_null())
    );
    assert!(
        json_of(frames.last().unwrap()).get("error").is_some(),
        "the error is the last frame"
    );
}

#[test]
fn anthropic_error_frame_has_no_message_stop() {
    let mut enc = anthropic::StreamEncoder::new("msg", "m", true);
    let mut frames: Vec<SseFrame> = body_events().iter().flat_map(|e| enc.encode(e)).collect();
    let err = enc.error("stream_broken", "upstream stalled");
    assert_eq!(err.len(), 1);
    assert_eq!(err[0].event, Some("error"));
    assert_eq!(
        json_of(&err[0]),
        json!({"type": "error", "error": {"type": "stream_broken", "message": "upstream stalled"}})
    );
    assert!(err[0].to_wire().starts_with("event: error\ndata: {"));
    frames.extend(err);
    frames.extend(enc.encode(&StreamEvent::Finish(StopReason::EndTurn)));
    frames.extend(enc.encode(&StreamEvent::Done));
    assert!(
        frames
            .iter()
            .all(|f| f.event != Some("message_stop") && f.event != Some("message_delta"))
    );
    assert_eq!(frames.last().unwrap().event, Some("error"));
}

#[test]
fn decoders_reject_malformed_data_and_report_upstream_errors() {
    let mut o = openai::StreamDecoder::new();
    let e = o
        .decode(None, "{\"id\": \"x\", \"choices\": [")
        .unwrap_err();
    assert_eq!(e.path, "data");
    // The decoder keeps going after a malformed line.
    assert_eq!(o.decode(None, "[DONE]").unwrap(), vec![StreamEvent::Done]);
    let e = openai::StreamDecoder::new()
        .decode(
            None,
            r#"{"error":{"message":"The server had an error","type":"server_error"}}"#,
        )
        .unwrap_err();
    assert_eq!(e.message, "server_error: The server had an error");
    let e = openai::StreamDecoder::new()
        .decode(None, r#"{"id":"x","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c","function":{"name":"f","arguments":{}}}]}}]}"#)
        .unwrap_err();
    assert_eq!(e.path, "choices[0].delta.tool_calls[0].function.arguments");

    let mut a = anthropic::StreamDecoder::new();
    let e = a
        .decode(
            Some("error"),
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
        )
        .unwrap_err();
    assert_eq!(e.message, "overloaded_error: Overloaded");
    assert!(a.decode(Some("content_block_delta"), "{not json").is_err());
    assert!(
        a.decode(Some("ping"), "{\"type\": \"ping\"}")
            .unwrap()
            .is_empty()
    );
    assert!(
        a.decode(
            Some("some_future_event"),
            "{\"type\": \"some_future_event\"}"
        )
        .unwrap()
        .is_empty()
    );
    let e = a
        .decode(Some("content_block_delta"), r#"{"type":"content_block_delta","index":5,"delta":{"type":"input_json_delta","partial_json":"{"}}"#)
        .unwrap_err();
    assert_eq!(e.path, "index");
}

#[test]
fn openai_decoder_splits_calls_that_share_an_index() {
    // Some compatible servers send every complete call at index 0 (or without index).
    let mut d = openai::StreamDecoder::new();
    let mut events = Vec::new();
    for data in [
        r#"{"id":"g","model":"gemini","choices":[{"index":0,"delta":{"role":"assistant","tool_calls":[{"index":0,"id":"a","type":"function","function":{"name":"f","arguments":"{\"x\":1}"}}]}}]}"#,
        r#"{"id":"g","model":"gemini","choices":[{"index":0,"delta":{"tool_calls":[{"id":"b","type":"function","function":{"name":"g","arguments":"{}"}}]}}]}"#,
        r#"{"id":"g","model":"gemini","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#,
        "[DONE]",
    ] {
        events.extend(d.decode(None, data).unwrap());
    }
    assert_eq!(
        events,
        vec![
            StreamEvent::Start {
                id: "g".into(),
                model: "gemini".into()
            },
            StreamEvent::ToolCallStart {
                index: 0,
                id: "a".into(),
                name: "f".into()
            },
            StreamEvent::ToolCallDelta {
                index: 0,
                arguments: "{\"x\":1}".into()
            },
            StreamEvent::ToolCallStart {
                index: 1,
                id: "b".into(),
                name: "g".into()
            },
            StreamEvent::ToolCallDelta {
                index: 1,
                arguments: "{}".into()
            },
            StreamEvent::Finish(StopReason::ToolUse),
            StreamEvent::Done,
        ]
    );
}

#[test]
fn openai_decoder_holds_arguments_until_the_call_is_named() {
    let mut d = openai::StreamDecoder::new();
    let first = d
        .decode(None, r#"{"id":"x","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c","function":{"arguments":"{\"a\""}}]}}]}"#)
        .unwrap();
    assert_eq!(
        first,
        vec![StreamEvent::Start {
            id: "x".into(),
            model: String::new()
        }]
    );
    let second = d
        .decode(None, r#"{"id":"x","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"name":"f","arguments":":1}"}}]}}]}"#)
        .unwrap();
    assert_eq!(
        second,
        vec![
            StreamEvent::ToolCallStart {
                index: 0,
                id: "c".into(),
                name: "f".into()
            },
            StreamEvent::ToolCallDelta {
                index: 0,
                arguments: "{\"a\":1}".into()
            },
        ]
    );
}

#[test]
fn encoders_supply_a_missing_start_and_ignore_a_second_one() {
    let events = vec![
        StreamEvent::TextDelta("a".into()),
        StreamEvent::Start {
            id: "resumed".into(),
            model: "other".into(),
        },
        StreamEvent::TextDelta("b".into()),
        StreamEvent::Finish(StopReason::EndTurn),
        StreamEvent::Done,
    ];
    let a = encode_all_anthropic(&events);
    assert_eq!(
        a.iter()
            .filter(|f| f.event == Some("message_start"))
            .count(),
        1
    );
    assert_eq!(validate_anthropic(&a).text, "ab");
    let o = encode_all_openai(&events, false);
    assert_eq!(validate_openai(&o, false, "chatcmpl-hale1").text, "ab");
    assert_eq!(
        o.iter()
            .filter(|f| f.data.contains("\"role\":\"assistant\""))
            .count(),
        1
    );
}

#[test]
fn sse_frames_render_to_the_wire() {
    let f = SseFrame {
        event: None,
        data: "[DONE]".into(),
    };
    assert_eq!(f.to_wire(), "data: [DONE]\n\n");
    let f = SseFrame {
        event: Some("message_stop"),
        data: "{\"type\":\"message_stop\"}".into(),
    };
    assert_eq!(
        f.to_wire(),
        "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
    );
    let f = SseFrame {
        event: None,
        data: "a\nb".into(),
    };
    assert_eq!(f.to_wire(), "data: a\ndata: b\n\n");
}

#[test]
#[should_panic(expected = "message_delta while a block is open")]
fn anthropic_validator_rejects_message_delta_inside_a_block() {
    let f = |event: &'static str, data: Value| SseFrame {
        event: Some(event),
        data: data.to_string(),
    };
    validate_anthropic(&[
        f(
            "message_start",
            json!({"type": "message_start", "message": {"role": "assistant", "usage": {"input_tokens": 0}}}),
        ),
        f(
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        ),
        f(
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 1}}),
        ),
        f("message_stop", json!({"type": "message_stop"})),
    ]);
}

#[test]
#[should_panic(expected = "usage chunk after the finish chunk")]
fn openai_validator_rejects_usage_before_finish() {
    let chunk = |choices: Value, usage: Value| {
        SseFrame {
        event: None,
        data: json!({"id": "i", "object": "chat.completion.chunk", "choices": choices, "usage": usage}).to_string(),
    }
    };
    validate_openai(
        &[
            chunk(
                json!([{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": null}]),
                Value::Null,
            ),
            chunk(
                json!([]),
                json!({"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}),
            ),
            chunk(
                json!([{"index": 0, "delta": {}, "finish_reason": "stop"}]),
                Value::Null,
            ),
            SseFrame {
                event: None,
                data: "[DONE]".into(),
            },
        ],
        true,
        "i",
    );
}

/// The frames sent once per token are serialised from typed structs, not
/// `Value` trees; their bytes must be what the `json!` rendering wrote
/// (keys in sorted order), escapes included.
#[test]
fn per_token_frames_are_byte_for_byte_the_json_tree() {
    let text = "quote \" backslash \\ newline \n tab \t é \u{1}";
    let mut enc = openai::StreamEncoder::new("chatcmpl-x", "m\"1", false).with_created(42);
    let first = enc.encode(&StreamEvent::TextDelta(text.into()));
    let chunk = |delta: Value, finish: Value| {
        json!({"id": "chatcmpl-x", "object": "chat.completion.chunk", "created": 42, "model": "m\"1",
               "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}]})
        .to_string()
    };
    assert_eq!(first.len(), 2);
    assert_eq!(
        first[0].data,
        chunk(json!({"role": "assistant", "content": ""}), Value::Null)
    );
    assert_eq!(first[1].data, chunk(json!({"content": text}), Value::Null));
    let fin = enc.encode(&StreamEvent::Finish(StopReason::ToolUse));
    assert_eq!(fin[0].data, chunk(json!({}), json!("tool_calls")));
    assert_eq!(
        first[1].to_wire(),
        format!("data: {}\n\n", chunk(json!({"content": text}), Value::Null))
    );

    let mut enc = anthropic::StreamEncoder::new("msg", "m", false);
    let frames = enc.encode(&StreamEvent::TextDelta(text.into()));
    let delta = frames.last().unwrap();
    assert_eq!(delta.event, Some("content_block_delta"));
    assert_eq!(
        delta.data,
        json!({"type": "content_block_delta", "index": 0,
               "delta": {"type": "text_delta", "text": text}})
        .to_string()
    );
}

/// An Anthropic stream with extended thinking before a text and a tool call
/// (the shape Claude sends with `thinking` enabled and tools).
const ANTHROPIC_THINKING_FIXTURE: &str = r#"event: message_start
data: {"type":"message_start","message":{"id":"msg_T1","type":"message","role":"assistant","model":"claude-sonnet-4","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":120,"output_tokens":1}}}

event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"The user wants"}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":" the weather."}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxDyZp"}}

event: content_block_stop
data: {"type":"content_block_stop","index":0}

event: content_block_start
data: {"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Checking."}}

event: content_block_stop
data: {"type":"content_block_stop","index":1}

event: content_block_start
data: {"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_T","name":"get_weather","input":{}}}

event: content_block_delta
data: {"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"city\": \"Paris\"}"}}

event: content_block_stop
data: {"type":"content_block_stop","index":2}

event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":61}}

event: message_stop
data: {"type":"message_stop"}

"#;

/// Thinking blocks reach an Anthropic caller whole — the thinking and its
/// signature, which the caller must send back with the tool use it
/// preceded — in their place before the text and the tool call; a caller
/// of Chat Completions, which has no form for them, gets the rest.
#[test]
fn thinking_blocks_reach_an_anthropic_caller_with_their_signature_and_no_other() {
    let events = decode_anthropic(ANTHROPIC_THINKING_FIXTURE);
    assert!(
        matches!(&events[2], StreamEvent::OpaqueStart { block, .. } if block["type"] == "thinking"),
        "{events:?}"
    );
    let a = validate_anthropic(&encode_all_anthropic(&events));
    assert_eq!(
        a.thinking,
        [(
            "The user wants the weather.".to_owned(),
            "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxDyZp".to_owned()
        )]
    );
    assert_eq!(a.text, "Checking.");
    assert_eq!(a.tools.len(), 1);
    assert_eq!(a.tools[0].2, json!({"city": "Paris"}));
    assert_eq!(a.stop_reason, "tool_use");

    let frames = encode_all_openai(&events, true);
    let o = validate_openai(&frames, true, "chatcmpl-hale1");
    assert_eq!(o.text, "Checking.");
    assert_eq!(o.tools.len(), 1);
    assert!(
        frames
            .iter()
            .all(|f| !f.data.contains("The user wants") && !f.data.contains("signature")),
        "no thinking in a Chat Completions stream"
    );
}
