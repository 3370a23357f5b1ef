//! OpenAI responses: stop reasons, parsing a provider's complete
//! `chat.completion` into a [`ChatResponse`], rendering one for a caller,
//! and hale's own error body and `/v1/models` list.

use std::time::{SystemTime, UNIX_EPOCH};

use serde::de::MapAccess;
use serde_json::{Map, Value, json};

use super::request::{parse_tool_calls, split_assistant, user_content};
use crate::canonical::{
    AnswerError, ChatResponse, Count, Fields, First, IfObject, Part, ProtoError, Skip, StopReason,
    Str, Typed, Usage,
};
use crate::json::{
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

/// Parses a non-streaming upstream response body as it came: what
/// [`parse_response`] makes of its `serde_json::Value`, the same answer or
/// the same error, without building the tree for the common answer.
///
/// The answer is first read into borrowed structs ([`PlainAnswer`]): every
/// field hale reads, with its type, and every other field checked and
/// skipped as the `Value` parse checks it ([`Skip`]). When that read
/// fails, or finds something it leaves to the general path (an `error`, an
/// array of content parts, a tool call missing a part, no choice), the body
/// is parsed into a `Value` and read by [`parse_response`], which decides
/// and names what is wrong (test
/// `the_typed_read_gives_what_the_value_path_gives`).
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

/// A `chat.completion` as hale reads it (see [`parse_response`] for the
/// meaning of each field).
#[derive(Default)]
struct PlainAnswer<'a> {
    id: Option<Str<'a>>,
    model: Option<Str<'a>>,
    /// The first choice (`Some(None)`: an empty array).
    choices: Option<First<Typed<PlainChoice<'a>>>>,
    usage: Option<IfObject<PlainUsage>>,
    /// An `error` that is not `null`.
    error: bool,
}

impl<'de> Fields<'de> for PlainAnswer<'de> {
    fn field<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<bool, A::Error> {
        match key {
            "id" => self.id = map.next_value()?,
            "model" => self.model = map.next_value()?,
            "choices" => self.choices = map.next_value()?,
            "usage" => self.usage = map.next_value()?,
            "error" => self.error = map.next_value::<Option<Skip>>()?.is_some(),
            _ => return Ok(false),
        }
        Ok(true)
    }
}

#[derive(Default)]
struct PlainChoice<'a> {
    message: Option<Typed<PlainMessage<'a>>>,
    finish_reason: Option<Str<'a>>,
}

impl<'de> Fields<'de> for PlainChoice<'de> {
    fn field<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<bool, A::Error> {
        match key {
            "message" => self.message = map.next_value()?,
            "finish_reason" => self.finish_reason = map.next_value()?,
            _ => return Ok(false),
        }
        Ok(true)
    }
}

#[derive(Default)]
struct PlainMessage<'a> {
    /// A string only: an array of parts goes the `Value` path.
    content: Option<Str<'a>>,
    refusal: Option<Str<'a>>,
    tool_calls: Option<Vec<Typed<PlainCall<'a>>>>,
}

impl<'de> Fields<'de> for PlainMessage<'de> {
    fn field<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<bool, A::Error> {
        match key {
            "content" => self.content = map.next_value()?,
            "refusal" => self.refusal = map.next_value()?,
            "tool_calls" => self.tool_calls = map.next_value()?,
            _ => return Ok(false),
        }
        Ok(true)
    }
}

#[derive(Default)]
struct PlainCall<'a> {
    kind: Option<Str<'a>>,
    id: Option<Str<'a>>,
    function: Option<Typed<PlainFunction<'a>>>,
}

impl<'de> Fields<'de> for PlainCall<'de> {
    fn field<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<bool, A::Error> {
        match key {
            "type" => self.kind = map.next_value()?,
            "id" => self.id = map.next_value()?,
            "function" => self.function = map.next_value()?,
            _ => return Ok(false),
        }
        Ok(true)
    }
}

#[derive(Default)]
struct PlainFunction<'a> {
    name: Option<Str<'a>>,
    arguments: Option<Str<'a>>,
}

impl<'de> Fields<'de> for PlainFunction<'de> {
    fn field<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<bool, A::Error> {
        match key {
            "name" => self.name = map.next_value()?,
            "arguments" => self.arguments = map.next_value()?,
            _ => return Ok(false),
        }
        Ok(true)
    }
}

#[derive(Default)]
struct PlainUsage {
    prompt_tokens: Count,
    completion_tokens: Count,
}

impl<'de> Fields<'de> for PlainUsage {
    fn field<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<bool, A::Error> {
        match key {
            "prompt_tokens" => self.prompt_tokens = map.next_value()?,
            "completion_tokens" => self.completion_tokens = map.next_value()?,
            _ => return Ok(false),
        }
        Ok(true)
    }
}

impl PlainAnswer<'_> {
    /// The answer, as [`parse_response`] makes it; `None` where that
    /// function would fail or where this read leaves the decision to it.
    fn into_response(self) -> Option<ChatResponse> {
        if self.error {
            return None;
        }
        let Typed(c0) = self.choices?.0?;
        let Typed(msg) = c0.message?;
        let mut content = Vec::new();
        if let Some(Str(text)) = msg.content
            && !text.is_empty()
        {
            content.push(Part::Text {
                text: text.into_owned(),
            });
        }
        if content.is_empty()
            && let Some(Str(r)) = msg.refusal
            && !r.is_empty()
        {
            content.push(Part::Text {
                text: r.into_owned(),
            });
        }
        for Typed(call) in msg.tool_calls.unwrap_or_default() {
            if call.kind.as_ref().is_some_and(|Str(t)| t != "function") {
                return None;
            }
            let Typed(f) = call.function?;
            content.push(Part::ToolCall {
                id: call.id?.0.into_owned(),
                name: f.name?.0.into_owned(),
                arguments: f.arguments?.0.into_owned(),
            });
        }
        let usage = self.usage.map(|IfObject(u)| u).unwrap_or_default();
        Some(ChatResponse {
            id: self.id.map(|Str(s)| s.into_owned()).unwrap_or_default(),
            model: self.model.map(|Str(s)| s.into_owned()).unwrap_or_default(),
            content,
            stop_reason: c0.finish_reason.map(|Str(s)| parse_finish_reason(&s)),
            usage: Usage {
                input_tokens: usage.prompt_tokens.0,
                output_tokens: usage.completion_tokens.0,
            },
        })
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

    fn tool_call() -> BoxedStrategy<String> {
        let function = object(vec![
            (
                "name",
                prop_oneof![10 => Just("\"f\"".to_string()), 1 => read()].boxed(),
            ),
            (
                "arguments",
                prop_oneof![
                    10 => Just("\"{\\\"a\\\":1}\"".to_string()),
                    1 => Just("{\"a\":1}".to_string()),
                    1 => read(),
                ]
                .boxed(),
            ),
        ]);
        object(vec![
            (
                "id",
                prop_oneof![10 => Just("\"call_1\"".to_string()), 1 => read()].boxed(),
            ),
            (
                "type",
                prop_oneof![
                    10 => Just("\"function\"".to_string()),
                    1 => Just("\"custom\"".to_string()),
                    1 => read(),
                ]
                .boxed(),
            ),
            ("function", prop_oneof![10 => function, 1 => read()].boxed()),
            ("index", ignored()),
        ])
    }

    fn message() -> BoxedStrategy<String> {
        let parts = array(
            prop_oneof![
                Just("{\"type\":\"text\",\"text\":\"a\"}".to_string()),
                Just("{\"type\":\"image_url\",\"image_url\":{\"url\":\"u\"}}".to_string()),
                Just("{\"text\":\"a\"}".to_string()),
                Just("{\"type\":\"text\"}".to_string()),
                Just("7".to_string()),
            ]
            .boxed(),
            0..3,
        );
        object(vec![
            ("role", ignored()),
            ("content", prop_oneof![8 => text(), 1 => parts].boxed()),
            ("refusal", text()),
            (
                "tool_calls",
                prop_oneof![
                    4 => Just("null".to_string()),
                    4 => array(tool_call(), 1..3),
                    1 => read(),
                ]
                .boxed(),
            ),
            ("annotations", ignored()),
        ])
    }

    fn answer() -> BoxedStrategy<String> {
        let choice = object(vec![
            ("index", count()),
            ("message", prop_oneof![10 => message(), 1 => read()].boxed()),
            ("finish_reason", text()),
            (
                "logprobs",
                prop_oneof![
                    Just("{\"content\":[{\"token\":\"a\",\"logprob\":-0.1,\"bytes\":[97],\"top_logprobs\":[]}]}".to_string()),
                    ignored(),
                ]
                .boxed(),
            ),
        ]);
        let usage = object(vec![
            ("prompt_tokens", count()),
            ("completion_tokens", count()),
            ("total_tokens", ignored()),
            ("prompt_tokens_details", ignored()),
        ]);
        let error = prop_oneof![
            30 => Just("null".to_string()),
            1 => Just("\"boom\"".to_string()),
            1 => Just("{\"message\":\"m\",\"type\":\"server_error\"}".to_string()),
        ];
        object(vec![
            ("id", text()),
            ("object", ignored()),
            ("created", ignored()),
            ("model", text()),
            (
                "choices",
                prop_oneof![
                    8 => array(choice.clone(), 1..3),
                    1 => array(choice, 0..1),
                    1 => read(),
                ]
                .boxed(),
            ),
            ("usage", prop_oneof![3 => usage, 1 => read()].boxed()),
            ("system_fingerprint", ignored()),
            ("service_tier", ignored()),
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

    /// Answers as OpenAI, Azure and compatible servers send them, and odd
    /// ones: each read by the typed path (or left to the `Value` path) with
    /// the `Value` path's outcome.
    #[test]
    fn answers_and_odd_answers_read_as_the_value_path_reads_them() {
        let plain = r#"{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"gpt-4o","choices":[{"index":0,"message":{"role":"assistant","content":"Hi","refusal":null,"annotations":[]},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":2,"total_tokens":11,"prompt_tokens_details":{"cached_tokens":0}},"service_tier":"default","system_fingerprint":"fp_1"}"#;
        let tool = r#"{"id":"c","model":"m","choices":[{"message":{"content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":1,"completion_tokens":1}}"#;
        let refusal = r#"{"choices":[{"message":{"content":"","refusal":"I can't"},"finish_reason":"stop"}]}"#;
        let logprobs = r#"{"choices":[{"message":{"content":"a"},"logprobs":{"content":[{"token":"a","logprob":-0.25,"bytes":[97],"top_logprobs":[]}]}}]}"#;
        let azure = r#"{"choices":[{"content_filter_results":{"hate":{"filtered":false,"severity":"safe"}},"finish_reason":"stop","index":0,"message":{"content":"ok","role":"assistant"}}],"created":1,"id":"chatcmpl-az","model":"gpt-4o-2024-08-06","object":"chat.completion","prompt_filter_results":[{"prompt_index":0,"content_filter_results":{}}],"usage":{"completion_tokens":1,"prompt_tokens":2,"total_tokens":3}}"#;
        // (body, read by the typed path)
        let cases: Vec<(String, bool)> = vec![
            (plain.into(), true),
            (tool.into(), true),
            (refusal.into(), true),
            (logprobs.into(), true),
            (azure.into(), true),
            // usage that is no object, counts of every type
            (r#"{"choices":[{"message":{}}],"usage":[1,2]}"#.into(), true),
            (r#"{"choices":[{"message":{}}],"usage":{"prompt_tokens":-3,"completion_tokens":2.0}}"#.into(), true),
            (r#"{"choices":[{"message":{}}],"usage":{"prompt_tokens":"9","completion_tokens":null}}"#.into(), true),
            // a repeated key: the last one
            (r#"{"model":"a","model":"b","choices":[{"message":{"content":"x"}}]}"#.into(), true),
            (r#"{"model":7,"model":"b","choices":[{"message":{"content":"x"}}]}"#.into(), false),
            // nulls read as absent
            (r#"{"id":null,"model":null,"choices":[{"message":{"content":null},"finish_reason":null}],"usage":null,"error":null}"#.into(), true),
            // left to the `Value` path: errors and what it alone reads
            (r#"{"error":{"message":"m","type":"server_error"}}"#.into(), false),
            (r#"{"choices":[]}"#.into(), false),
            (r#"{"choices":null}"#.into(), false),
            (r#"{"choices":[{"finish_reason":"stop"}]}"#.into(), false),
            (r#"{"choices":[{"message":{"content":[{"type":"text","text":"a"}]}}]}"#.into(), false),
            (r#"{"choices":[{"message":{"content":7}}]}"#.into(), false),
            (r#"{"choices":[{"message":{"content":"x","refusal":7}}]}"#.into(), false),
            (r#"{"choices":[{"message":{"tool_calls":[{"id":"c","type":"custom","function":{"name":"f","arguments":"{}"}}]}}]}"#.into(), false),
            (r#"{"choices":[{"message":{"tool_calls":[{"id":"c","function":{"name":"f","arguments":null}}]}}]}"#.into(), false),
            (r#"{"choices":[{"message":{"tool_calls":[{"id":"c","function":{"name":"f","arguments":{}}}]}}]}"#.into(), false),
            (r#"["id","model"]"#.into(), false),
            (r#"{"choices":[{"message":{"content":"x"}}]} x"#.into(), false),
            ("".into(), false),
        ];
        for (doc, typed) in &cases {
            let b = bytes(doc);
            assert_eq!(parse_plain(&b).is_some(), *typed, "{doc}");
            assert_eq!(by_bytes(&b), by_tree(&b), "{doc}");
        }
        // A field hale does not read, holding what the `Value` parse
        // refuses: refused by both.
        let mut runner = proptest::test_runner::TestRunner::deterministic();
        for _ in 0..50 {
            use proptest::strategy::ValueTree;
            let odd = refused().new_tree(&mut runner).unwrap().current();
            for doc in [
                format!(
                    r#"{{"system_fingerprint":{odd},"choices":[{{"message":{{"content":"hi"}}}}]}}"#
                ),
                format!(r#"{{"choices":[{{"message":{{"content":"hi"}}}},{odd}]}}"#),
                format!(r#"{{"choices":[{{"message":{{"content":"hi","x":{odd}}}}}]}}"#),
                format!(
                    r#"{{"choices":[{{"message":{{"content":"hi"}}}}],"usage":{{"prompt_tokens":{odd}}}}}"#
                ),
                format!(r#"{{"choices":[{{"message":{{"content":"hi"}}}}],"usage":{odd}}}"#),
            ] {
                let b = bytes(&doc);
                assert!(by_tree(&b).is_err(), "{doc}");
                assert_eq!(by_bytes(&b), by_tree(&b), "{doc}");
            }
        }
    }
}
