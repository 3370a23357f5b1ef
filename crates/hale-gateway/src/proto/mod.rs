//! One canonical chat model, and translation to and from the two wire dialects.
//!
//! Agents speak OpenAI (`/v1/chat/completions`) or Anthropic (`/v1/messages`);
//! providers speak either too. Rather than translate dialect to dialect, every
//! request, response and stream event passes through the canonical types here,
//! so a chain can mix provider kinds and the agent sees its own dialect
//! whoever served it. [`openai`] and [`anthropic`] hold the codecs.
//!
//! The canonical model is what hale reasons about, not what it sends when it
//! need not translate: a request parsed by [`parse_request`] keeps the client's
//! JSON (its [`Origin`]), and [`fidelity::render_for`] sends a provider of the
//! same dialect that JSON with only what hale changed patched in.

pub mod anthropic;
pub mod fidelity;
pub mod openai;

pub use fidelity::{Origin, Outgoing, render_for};

use serde::de::value::MapAccessDeserializer;
use serde::de::{MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;
use std::borrow::Cow;
use std::marker::PhantomData;
use std::sync::Arc;

/// The wire dialect of a request, response or provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Dialect {
    OpenAi,
    Anthropic,
}

/// Who said a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    System,
    User,
    Assistant,
    /// A tool result (OpenAI `role: tool`; Anthropic `tool_result` blocks in a user message).
    Tool,
}

/// One piece of a message's content.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Part {
    Text {
        text: String,
    },
    /// An image or other block hale passes through untouched (dialect-specific JSON).
    Opaque {
        dialect: Dialect,
        value: Value,
    },
    ToolCall {
        id: String,
        name: String,
        /// The arguments as a JSON string, exactly as the model produced them.
        arguments: String,
    },
    ToolResult {
        tool_call_id: String,
        /// The result's text (block arrays are flattened to text).
        content: String,
        #[serde(default)]
        is_error: bool,
    },
}

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub role: Role,
    pub content: Vec<Part>,
}

impl Message {
    /// A message holding one text part.
    pub fn text(role: Role, text: impl Into<String>) -> Self {
        Self {
            role,
            content: vec![Part::Text { text: text.into() }],
        }
    }

    /// All text parts joined.
    pub fn joined_text(&self) -> String {
        let mut s = String::new();
        for p in &self.content {
            match p {
                Part::Text { text } => s.push_str(text),
                Part::ToolResult { content, .. } => s.push_str(content),
                Part::ToolCall { .. } | Part::Opaque { .. } => {}
            }
        }
        s
    }
}

/// A tool the model may call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tool {
    pub name: String,
    #[serde(default)]
    pub description: Option<String>,
    /// JSON schema of the arguments.
    pub parameters: Value,
}

/// Why generation stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// OpenAI `stop`, Anthropic `end_turn` / `stop_sequence`.
    EndTurn,
    /// OpenAI `length`, Anthropic `max_tokens`.
    MaxTokens,
    /// OpenAI `tool_calls`, Anthropic `tool_use`.
    ToolUse,
    /// OpenAI `content_filter`, Anthropic `refusal`.
    ContentFilter,
}

/// Token usage of one attempt.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
}

/// A chat request, dialect-neutral.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatRequest {
    /// The model the caller asked for (a route name, a model, or a provider's model).
    pub model: String,
    /// System prompt (OpenAI system messages are lifted here, in order, joined by blank lines).
    pub system: Option<String>,
    pub messages: Vec<Message>,
    pub tools: Vec<Tool>,
    /// Tool choice as OpenAI-shaped JSON (`"auto"`, `"none"`, `"required"`, `{type:function,…}`).
    pub tool_choice: Option<Value>,
    pub max_tokens: Option<u32>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub stop: Vec<String>,
    pub stream: bool,
    /// OpenAI `stream_options.include_usage`.
    pub include_usage: bool,
    /// Fields hale does not model, passed through when the target speaks the same dialect.
    pub extra: serde_json::Map<String, Value>,
    /// The dialect the request arrived in.
    pub dialect: Dialect,
    /// The request as the client sent it (body and provider-feature headers),
    /// for same-dialect fidelity; `None` for requests hale makes itself.
    pub origin: Option<Arc<Origin>>,
}

/// Parses a client's request body of `dialect` and keeps what the client
/// sent — the body itself and the provider-feature headers of
/// [`fidelity::FEATURE_HEADERS`] — so a provider of the same dialect
/// receives it as sent ([`render_for`]).
pub fn parse_request(
    dialect: Dialect,
    body: Value,
    headers: &axum::http::HeaderMap,
) -> Result<ChatRequest, ProtoError> {
    let (mut req, origin) = parse_with_origin(dialect, body, headers)?;
    req.origin = Some(Arc::new(origin));
    Ok(req)
}

/// [`parse_request`] of a client's body as it arrived. A provider of the
/// same dialect gets these very bytes when hale changed nothing in the
/// body ([`fidelity::Outgoing::raw`]) — unless an object in them repeats a
/// key: hale reads the last of a repeated key, and a provider may read the
/// first, so such a body is always sent as hale read it.
pub fn parse_request_sent(
    dialect: Dialect,
    sent: Sent,
    headers: &axum::http::HeaderMap,
) -> Result<ChatRequest, ProtoError> {
    let (mut req, origin) = parse_with_origin(dialect, sent.value, headers)?;
    let origin = match sent.raw {
        Some(raw) => origin.with_raw(raw),
        None => origin,
    };
    req.origin = Some(Arc::new(origin));
    Ok(req)
}

/// A client's JSON body: its value, and its bytes when they say nothing
/// else than the value (no object repeats a key).
#[derive(Debug)]
pub struct Sent {
    pub value: Value,
    pub raw: Option<bytes::Bytes>,
}

/// Parses a client's JSON body as `serde_json::from_slice::<Value>` does
/// (the last of a repeated key wins), noting whether any object repeats a
/// key: only a body that repeats none keeps its bytes ([`Sent::raw`]).
pub fn parse_sent(raw: bytes::Bytes) -> Result<Sent, serde_json::Error> {
    let mut repeated = false;
    let mut de = serde_json::Deserializer::from_slice(&raw);
    let value = serde::de::DeserializeSeed::deserialize(
        NoticeRepeats {
            repeated: &mut repeated,
        },
        &mut de,
    )?;
    de.end()?;
    Ok(Sent {
        value,
        raw: (!repeated).then_some(raw),
    })
}

/// Builds a [`Value`] as serde_json's own visitor does, setting `repeated`
/// when an object holds a key twice.
struct NoticeRepeats<'r> {
    repeated: &'r mut bool,
}

impl<'de> serde::de::DeserializeSeed<'de> for NoticeRepeats<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for NoticeRepeats<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any valid JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        while let Some(v) = seq.next_element_seed(NoticeRepeats {
            repeated: &mut *self.repeated,
        })? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = serde_json::Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let v = map.next_value_seed(NoticeRepeats {
                repeated: &mut *self.repeated,
            })?;
            if out.insert(key, v).is_some() {
                *self.repeated = true;
            }
        }
        Ok(Value::Object(out))
    }
}

fn parse_with_origin(
    dialect: Dialect,
    body: Value,
    headers: &axum::http::HeaderMap,
) -> Result<(ChatRequest, Origin), ProtoError> {
    let (req, trace) = match dialect {
        Dialect::OpenAi => openai::parse_request_traced(&body)?,
        Dialect::Anthropic => anthropic::parse_request_traced(&body)?,
    };
    let origin = Origin::new(
        dialect,
        body,
        fidelity::feature_headers(headers),
        &req,
        trace,
    );
    Ok((req, origin))
}

/// A complete (non-streaming) chat response, dialect-neutral.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatResponse {
    pub id: String,
    /// The model that served.
    pub model: String,
    /// Text and tool-call parts, in order.
    pub content: Vec<Part>,
    pub stop_reason: Option<StopReason>,
    pub usage: Usage,
}

impl ChatResponse {
    /// All text parts joined.
    pub fn text(&self) -> String {
        Message {
            role: Role::Assistant,
            content: self.content.clone(),
        }
        .joined_text()
    }
}

/// One streaming event, dialect-neutral.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamEvent {
    /// The stream opened (first event).
    Start { id: String, model: String },
    /// A piece of assistant text.
    TextDelta(String),
    /// A tool call begins at `index` (0-based among tool calls).
    ToolCallStart {
        index: u32,
        id: String,
        name: String,
    },
    /// More JSON of the arguments of tool call `index`.
    ToolCallDelta { index: u32, arguments: String },
    /// Generation finished with this reason.
    Finish(StopReason),
    /// Usage (may arrive before or after `Finish`).
    Usage(Usage),
    /// The end of the stream (OpenAI `[DONE]`, Anthropic `message_stop`).
    Done,
    /// A content block hale does not model opened — Anthropic `thinking`,
    /// `redacted_thinking`, server tool blocks — with its JSON as the
    /// provider sent it: relayed to a caller of `dialect`, to no other
    /// (the streaming counterpart of [`Part::Opaque`]).
    OpaqueStart { dialect: Dialect, block: Value },
    /// A delta of the open opaque block, as sent (`thinking_delta`,
    /// `signature_delta`, …).
    OpaqueDelta { dialect: Dialect, delta: Value },
}

/// A request or response that could not be understood, with what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {message}")]
pub struct ProtoError {
    /// JSON path of the offending field, e.g. `messages[2].content`.
    pub path: String,
    pub message: String,
}

impl ProtoError {
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            message: message.into(),
        }
    }
}

// ---------------------------------------------------------------------------
// Typed reading of the per-token stream events of both dialects.
// ---------------------------------------------------------------------------

/// A JSON object read as `T`, and nothing else: serde's derived structs
/// also accept an array (its fields by position), which the `Value` path
/// refuses ("must be an object").
pub(crate) struct Obj<T>(pub(crate) T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Obj<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Only<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for Only<T> {
            type Value = T;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
                T::deserialize(MapAccessDeserializer::new(map))
            }
        }
        d.deserialize_map(Only(PhantomData)).map(Obj)
    }
}

/// A JSON string, borrowed from the input when it holds no escape. serde
/// borrows a `Cow<str>` field marked `#[serde(borrow)]` only when the
/// `Cow` is the field's own type; inside an `Option` it always copies.
pub(crate) struct Str<'a>(pub(crate) Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for Str<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Text;
        impl<'de> Visitor<'de> for Text {
            type Value = Cow<'de, str>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: serde::de::Error>(
                self,
                s: &'de str,
            ) -> Result<Self::Value, E> {
                Ok(Cow::Borrowed(s))
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Self::Value, E> {
                Ok(Cow::Owned(s.to_owned()))
            }
            fn visit_string<E: serde::de::Error>(self, s: String) -> Result<Self::Value, E> {
                Ok(Cow::Owned(s))
            }
        }
        d.deserialize_str(Text).map(Str)
    }
}

/// For the decoders' property tests: `pairs` written as a JSON object (a
/// key may repeat), or with `as_array` as an array of the values — the
/// shape serde's derived structs also accept and the `Value` paths refuse.
#[cfg(test)]
pub(crate) fn json_object(pairs: Vec<(&str, String)>, as_array: bool) -> String {
    if as_array {
        let vals: Vec<String> = pairs.into_iter().map(|(_, v)| v).collect();
        format!("[{}]", vals.join(","))
    } else {
        let kv: Vec<String> = pairs
            .into_iter()
            .map(|(k, v)| format!("\"{k}\":{v}"))
            .collect();
        format!("{{{}}}", kv.join(","))
    }
}

#[cfg(test)]
mod sent_tests {
    use super::*;
    use proptest::prelude::*;

    /// A JSON document as written, with its keys as they decode.
    #[derive(Debug, Clone)]
    enum J {
        Null,
        Bool(bool),
        Int(i64),
        Float(f64),
        Str(String),
        Arr(Vec<J>),
        /// (key, the key written with a `\u` escape, value)
        Obj(Vec<(String, bool, J)>),
    }

    impl J {
        fn write(&self, out: &mut String) {
            match self {
                J::Null => out.push_str("null"),
                J::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
                J::Int(i) => out.push_str(&i.to_string()),
                J::Float(f) => out.push_str(&serde_json::to_string(f).unwrap()),
                J::Str(s) => out.push_str(&serde_json::to_string(s).unwrap()),
                J::Arr(a) => {
                    out.push_str("[ ");
                    for (i, v) in a.iter().enumerate() {
                        if i > 0 {
                            out.push_str(" ,");
                        }
                        v.write(out);
                    }
                    out.push(']');
                }
                J::Obj(o) => {
                    out.push('{');
                    for (i, (k, escaped, v)) in o.iter().enumerate() {
                        if i > 0 {
                            out.push(',');
                        }
                        if *escaped {
                            // The same key, spelled with escapes.
                            out.push('"');
                            for c in k.chars() {
                                out.push_str(&format!("\\u{:04x}", c as u32));
                            }
                            out.push('"');
                        } else {
                            out.push_str(&serde_json::to_string(k).unwrap());
                        }
                        out.push_str(" :\n");
                        v.write(out);
                    }
                    out.push('}');
                }
            }
        }

        fn repeats(&self) -> bool {
            match self {
                J::Null | J::Bool(_) | J::Int(_) | J::Float(_) | J::Str(_) => false,
                J::Arr(a) => a.iter().any(J::repeats),
                J::Obj(o) => {
                    let mut keys: Vec<&str> = o.iter().map(|(k, _, _)| k.as_str()).collect();
                    keys.sort_unstable();
                    let n = keys.len();
                    keys.dedup();
                    keys.len() != n || o.iter().any(|(_, _, v)| v.repeats())
                }
            }
        }
    }

    fn doc() -> impl Strategy<Value = J> {
        let leaf = prop_oneof![
            Just(J::Null),
            any::<bool>().prop_map(J::Bool),
            any::<i64>().prop_map(J::Int),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(J::Float),
            "[a-c\u{e9}\u{1F600}\"\\\\\n]{0,4}".prop_map(J::Str),
        ];
        leaf.prop_recursive(4, 40, 5, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..5).prop_map(J::Arr),
                proptest::collection::vec(("[a-c]{1,2}", any::<bool>(), inner), 0..5)
                    .prop_map(J::Obj),
            ]
        })
    }

    proptest! {
        /// The value is serde_json's, whatever the document; the bytes are
        /// kept exactly when no object repeats a key (spelled alike or not).
        #[test]
        fn a_sent_body_reads_as_serde_json_reads_it_and_keeps_its_bytes_only_without_repeats(
            j in doc()
        ) {
            let mut text = String::new();
            j.write(&mut text);
            let raw = bytes::Bytes::from(text.clone());
            let sent = parse_sent(raw.clone()).expect("valid JSON");
            let want: Value = serde_json::from_str(&text).unwrap();
            prop_assert_eq!(&sent.value, &want);
            prop_assert_eq!(sent.raw.is_some(), !j.repeats(), "{}", text);
            if let Some(r) = sent.raw {
                prop_assert_eq!(r, raw);
            }
        }
    }

    #[test]
    fn a_repeated_key_anywhere_drops_the_bytes_and_bad_json_is_an_error() {
        let cases = [
            (r#"{"model":"a","model":"b"}"#, false),
            (r#"{"messages":[{"role":"user","role":"system"}]}"#, false),
            (r#"{"m":"a","\u006d":"b"}"#, false),
            (r#"{"a":{"b":1},"c":{"b":2}}"#, true),
        ];
        for (text, kept) in cases {
            let sent = parse_sent(bytes::Bytes::from(text)).unwrap();
            assert_eq!(sent.raw.is_some(), kept, "{text}");
            assert_eq!(sent.value, serde_json::from_str::<Value>(text).unwrap());
        }
        for bad in [
            "",
            "{",
            r#"{"a":1} x"#,
            r#"{"a":1}{}"#,
            "[1,]",
            r#""\ud800""#,
        ] {
            assert_eq!(
                parse_sent(bytes::Bytes::from(bad)).is_err(),
                serde_json::from_str::<Value>(bad).is_err(),
                "{bad:?}"
            );
        }
    }
}
