//! Anthropic responses: stop reasons, usage, parsing a provider's complete
//! `message` into a [`ChatResponse`], rendering one for a caller, and
//! hale's own error body.

use serde::de::MapAccess;
use serde_json::{Map, Value, json};

use super::request::{arguments_to_input, input_to_arguments};
use crate::canonical::{
    AnswerError, ChatResponse, Count, Dialect, Fields, IfObject, Part, ProtoError, Skip,
    StopReason, Str, Typed, Usage,
};
use crate::json::{as_object, at, count, err, error_message, field, opt_str, req_array, req_str};

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

/// Parses a non-streaming upstream response body as it came: what
/// [`parse_response`] makes of its `serde_json::Value`, the same answer or
/// the same error, without building the tree for the common answer.
///
/// The answer is first read into borrowed structs ([`PlainAnswer`]): every
/// field hale reads, with its type, and every other field checked and
/// skipped as the `Value` parse checks it ([`Skip`]). When that read
/// fails, or finds something it leaves to the general path (an error, a
/// block other than `text` and `tool_use`, one missing a part), the body is
/// parsed into a `Value` and read by [`parse_response`], which decides and
/// names what is wrong (test `the_typed_read_gives_what_the_value_path_gives`).
pub fn parse_response_bytes(body: &[u8]) -> Result<ChatResponse, AnswerError> {
    if let Some(answer) = parse_plain(body) {
        return Ok(answer);
    }
    let value: Value = serde_json::from_slice(body)?;
    Ok(parse_response(&value)?)
}

/// The typed read of [`parse_response_bytes`]; `None` leaves the body to
/// the `Value` path.
fn parse_plain(body: &[u8]) -> Option<ChatResponse> {
    let Typed(a) = serde_json::from_slice::<Typed<PlainAnswer>>(body).ok()?;
    a.into_response()
}

/// A `message` as hale reads it (see [`parse_response`] for the meaning of
/// each field).
#[derive(Default)]
struct PlainAnswer<'a> {
    kind: Option<Str<'a>>,
    /// An `error` that is not `null`.
    error: bool,
    id: Option<Str<'a>>,
    model: Option<Str<'a>>,
    content: Option<Vec<Typed<PlainBlock<'a>>>>,
    stop_reason: Option<Str<'a>>,
    usage: Option<IfObject<PlainUsage>>,
}

impl<'de> Fields<'de> for PlainAnswer<'de> {
    fn field<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<bool, A::Error> {
        match key {
            "type" => self.kind = map.next_value()?,
            "error" => self.error = map.next_value::<Option<Skip>>()?.is_some(),
            "id" => self.id = map.next_value()?,
            "model" => self.model = map.next_value()?,
            "content" => self.content = map.next_value()?,
            "stop_reason" => self.stop_reason = map.next_value()?,
            "usage" => self.usage = map.next_value()?,
            _ => return Ok(false),
        }
        Ok(true)
    }
}

/// A content block: `text` or `tool_use` (any other goes the `Value` path,
/// which keeps it whole as an opaque part).
#[derive(Default)]
struct PlainBlock<'a> {
    kind: Option<Str<'a>>,
    text: Option<Str<'a>>,
    id: Option<Str<'a>>,
    name: Option<Str<'a>>,
    input: Option<Value>,
}

impl<'de> Fields<'de> for PlainBlock<'de> {
    fn field<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<bool, A::Error> {
        match key {
            "type" => self.kind = map.next_value()?,
            "text" => self.text = map.next_value()?,
            "id" => self.id = map.next_value()?,
            "name" => self.name = map.next_value()?,
            "input" => self.input = map.next_value()?,
            _ => return Ok(false),
        }
        Ok(true)
    }
}

#[derive(Default)]
struct PlainUsage {
    input_tokens: Count,
    cache_creation_input_tokens: Count,
    cache_read_input_tokens: Count,
    output_tokens: Count,
}

impl<'de> Fields<'de> for PlainUsage {
    fn field<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<bool, A::Error> {
        match key {
            "input_tokens" => self.input_tokens = map.next_value()?,
            "cache_creation_input_tokens" => self.cache_creation_input_tokens = map.next_value()?,
            "cache_read_input_tokens" => self.cache_read_input_tokens = map.next_value()?,
            "output_tokens" => self.output_tokens = map.next_value()?,
            _ => return Ok(false),
        }
        Ok(true)
    }
}

impl PlainAnswer<'_> {
    /// The answer, as [`parse_response`] makes it; `None` where that
    /// function would fail or where this read leaves the decision to it.
    fn into_response(self) -> Option<ChatResponse> {
        if self.error || self.kind.as_ref().is_some_and(|Str(k)| k == "error") {
            return None;
        }
        let blocks = self.content?;
        let mut content = Vec::with_capacity(blocks.len());
        for Typed(b) in blocks {
            match &*b.kind?.0 {
                "text" => {
                    let Str(text) = b.text?;
                    if !text.is_empty() {
                        content.push(Part::Text {
                            text: text.into_owned(),
                        });
                    }
                }
                "tool_use" => content.push(Part::ToolCall {
                    id: b.id?.0.into_owned(),
                    name: b.name?.0.into_owned(),
                    arguments: b
                        .input
                        .map_or_else(|| "{}".to_string(), |i| input_to_arguments(&i)),
                }),
                _ => return None,
            }
        }
        let u = self.usage.map(|IfObject(u)| u).unwrap_or_default();
        Some(ChatResponse {
            id: self.id.map(|Str(s)| s.into_owned()).unwrap_or_default(),
            model: self.model.map(|Str(s)| s.into_owned()).unwrap_or_default(),
            content,
            stop_reason: self.stop_reason.map(|Str(s)| parse_stop_reason(&s)),
            usage: Usage {
                input_tokens: u
                    .input_tokens
                    .0
                    .saturating_add(u.cache_creation_input_tokens.0)
                    .saturating_add(u.cache_read_input_tokens.0),
                output_tokens: u.output_tokens.0,
            },
        })
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::strategies::{
        array, body, bytes, count, ignored, object, read, refused, text,
    };
    use proptest::prelude::*;

    /// What hale did before the typed read: the `Value` tree, then
    /// [`parse_response`]; errors as the attempt reports them.
    fn by_tree(body: &[u8]) -> Result<ChatResponse, String> {
        serde_json::from_slice::<Value>(body)
            .map_err(|e| e.to_string())
            .and_then(|v| parse_response(&v).map_err(|e| e.to_string()))
    }

    fn by_bytes(body: &[u8]) -> Result<ChatResponse, String> {
        parse_response_bytes(body).map_err(|e| e.to_string())
    }

    fn block() -> BoxedStrategy<String> {
        let kind = prop_oneof![
            4 => Just("\"text\"".to_string()),
            3 => Just("\"tool_use\"".to_string()),
            1 => Just("\"thinking\"".to_string()),
            1 => Just("\"server_tool_use\"".to_string()),
            1 => read(),
        ];
        let input = prop_oneof![
            Just("{\"path\":\"a.rs\",\"n\":[1,2.5,{\"b\":null}]}".to_string()),
            Just("{\"_hale_raw_arguments\":\"{not json\"}".to_string()),
            Just("{\"z\":1,\"a\":2,\"z\":3}".to_string()),
            Just("\"s\"".to_string()),
            ignored(),
        ];
        object(vec![
            ("type", kind.boxed()),
            ("text", text()),
            (
                "id",
                prop_oneof![3 => Just("\"toolu_1\"".to_string()), 1 => read()].boxed(),
            ),
            (
                "name",
                prop_oneof![3 => Just("\"edit\"".to_string()), 1 => read()].boxed(),
            ),
            ("input", input.boxed()),
            ("thinking", ignored()),
            ("signature", ignored()),
            ("citations", ignored()),
        ])
    }

    fn answer() -> BoxedStrategy<String> {
        let usage = object(vec![
            ("input_tokens", count()),
            ("cache_creation_input_tokens", count()),
            ("cache_read_input_tokens", count()),
            ("output_tokens", count()),
            ("service_tier", ignored()),
        ]);
        let kind = prop_oneof![
            12 => Just("\"message\"".to_string()),
            1 => Just("\"error\"".to_string()),
            1 => read(),
        ];
        let error = prop_oneof![
            30 => Just("null".to_string()),
            1 => Just("{\"type\":\"overloaded_error\",\"message\":\"m\"}".to_string()),
            1 => Just("\"boom\"".to_string()),
        ];
        object(vec![
            ("id", text()),
            ("type", kind.boxed()),
            ("role", ignored()),
            ("model", text()),
            (
                "content",
                prop_oneof![5 => array(block(), 0..4), 1 => read()].boxed(),
            ),
            ("stop_reason", text()),
            ("stop_sequence", ignored()),
            ("usage", prop_oneof![3 => usage, 1 => read()].boxed()),
            ("error", error.boxed()),
        ])
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(3_000))]

        /// Whatever the body, the typed read and the `Value` path give the
        /// same answer or the same error text.
        #[test]
        fn the_typed_read_gives_what_the_value_path_gives(doc in body(answer())) {
            let b = bytes(&doc);
            prop_assert_eq!(by_bytes(&b), by_tree(&b), "{}", doc);
        }
    }

    /// The generator reaches the typed read's answer, its refusals and the
    /// bodies it leaves to the `Value` path, so the property above compares
    /// more than the `Value` path with itself.
    #[test]
    fn the_generated_answers_take_both_paths() {
        use proptest::strategy::ValueTree;
        use proptest::test_runner::TestRunner;
        let mut runner = TestRunner::deterministic();
        let (mut typed, mut left_ok, mut left_err) = (0, 0, 0);
        for _ in 0..3_000 {
            let b = bytes(&body(answer()).new_tree(&mut runner).unwrap().current());
            match (parse_plain(&b), by_tree(&b)) {
                (Some(_), _) => typed += 1,
                (None, Ok(_)) => left_ok += 1,
                (None, Err(_)) => left_err += 1,
            }
        }
        assert!(
            typed > 500 && left_ok > 40 && left_err > 300,
            "{typed} {left_ok} {left_err}"
        );
    }

    /// Answers as Anthropic sends them, and odd ones: each read by the
    /// typed path (or left to the `Value` path) with the `Value` path's
    /// outcome.
    #[test]
    fn answers_and_odd_answers_read_as_the_value_path_reads_them() {
        let plain = r#"{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"text","text":"Hi","citations":null}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":9,"cache_creation_input_tokens":1,"cache_read_input_tokens":2,"output_tokens":3,"service_tier":"standard"}}"#;
        let tool = r#"{"id":"msg_2","type":"message","model":"m","content":[{"type":"text","text":""},{"type":"tool_use","id":"toolu_1","name":"edit","input":{"path":"a.rs","z":[1,{"b":2.5}],"a":null}}],"stop_reason":"tool_use","usage":{"input_tokens":1,"output_tokens":1}}"#;
        let raw = r#"{"content":[{"type":"tool_use","id":"t","name":"f","input":{"_hale_raw_arguments":"{oops"}}]}"#;
        // (body, read by the typed path)
        let cases: Vec<(String, bool)> = vec![
            (plain.into(), true),
            (tool.into(), true),
            (raw.into(), true),
            (r#"{"content":[{"type":"tool_use","id":"t","name":"f"}]}"#.into(), true),
            (r#"{"content":[{"type":"tool_use","id":"t","name":"f","input":null}]}"#.into(), true),
            (r#"{"content":[],"usage":"none"}"#.into(), true),
            (r#"{"content":[],"usage":{"input_tokens":18446744073709551615,"cache_read_input_tokens":5}}"#.into(), true),
            (r#"{"type":null,"error":null,"content":[]}"#.into(), true),
            // left to the `Value` path
            (r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#.into(), false),
            (r#"{"type":"error"}"#.into(), false),
            (r#"{"type":7,"content":[]}"#.into(), false),
            (r#"{"content":[{"type":"thinking","thinking":"hm","signature":"s"},{"type":"text","text":"a"}]}"#.into(), false),
            (r#"{"content":[{"type":"text"}]}"#.into(), false),
            (r#"{"content":[{"type":"text","text":7}]}"#.into(), false),
            (r#"{"content":[{"type":"tool_use","name":"f"}]}"#.into(), false),
            (r#"{"content":[{"text":"a"}]}"#.into(), false),
            (r#"{"content":null}"#.into(), false),
            (r#"{"content":[[]]}"#.into(), false),
            ("7".into(), false),
        ];
        for (doc, typed) in &cases {
            let b = bytes(doc);
            assert_eq!(parse_plain(&b).is_some(), *typed, "{doc}");
            assert_eq!(by_bytes(&b), by_tree(&b), "{doc}");
        }
        let mut runner = proptest::test_runner::TestRunner::deterministic();
        for _ in 0..50 {
            use proptest::strategy::ValueTree;
            let odd = refused().new_tree(&mut runner).unwrap().current();
            for doc in [
                format!(r#"{{"stop_sequence":{odd},"content":[{{"type":"text","text":"hi"}}]}}"#),
                format!(r#"{{"content":[{{"type":"text","text":"hi","citations":{odd}}}]}}"#),
                format!(
                    r#"{{"content":[{{"type":"tool_use","id":"t","name":"f","input":{{"a":{odd}}}}}]}}"#
                ),
                format!(r#"{{"content":[],"usage":{{"output_tokens":{odd}}}}}"#),
            ] {
                let b = bytes(&doc);
                assert!(by_tree(&b).is_err(), "{doc}");
                assert_eq!(by_bytes(&b), by_tree(&b), "{doc}");
            }
        }
    }
}
