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
    let (mut req, trace) = match dialect {
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
    req.origin = Some(Arc::new(origin));
    Ok(req)
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
