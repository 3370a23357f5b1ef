//! The canonical chat model: what hale reasons about, whatever the dialect.
//!
//! Every request, response and stream event passes through these types on
//! its way between a caller and a provider, so a chain can mix provider
//! kinds: each dialect's codec ([`super::openai`], [`super::anthropic`],
//! [`super::responses`], [`super::gemini`])
//! translates its wire shapes to and from them. A request also keeps what
//! its client sent ([`Origin`]) and which canonical messages the parser made
//! of each wire message ([`Trace`]); they live here, beside the
//! [`ChatRequest`] that holds them, and [`super::fidelity`] reads them to send
//! a provider of the client's dialect what the client sent.

use bytes::Bytes;
use serde::de::value::MapAccessDeserializer;
use serde::de::{MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};
use std::borrow::Cow;
use std::hash::{BuildHasher, Hasher};
use std::marker::PhantomData;
use std::ops::Range;
use std::sync::Arc;

/// The wire dialect of a request, response or provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Dialect {
    /// OpenAI Chat Completions (`/v1/chat/completions`).
    OpenAi,
    /// Anthropic Messages (`/v1/messages`).
    Anthropic,
    /// OpenAI Responses (`/v1/responses`).
    Responses,
    /// Google's Generative Language API (`models/{model}:generateContent`).
    Gemini,
    /// AWS Bedrock's Converse API (`/model/{id}/converse`); a provider
    /// dialect only.
    Bedrock,
}

impl Dialect {
    /// The key of a request body holding its conversation.
    pub(super) fn conversation_key(self) -> &'static str {
        match self {
            Dialect::OpenAi | Dialect::Anthropic | Dialect::Bedrock => "messages",
            Dialect::Responses => "input",
            Dialect::Gemini => "contents",
        }
    }
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
#[cfg_attr(test, derive(Debug, PartialEq))]
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
#[cfg_attr(test, derive(Debug, PartialEq))]
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

// ---------------------------------------------------------------------------
// Typed reading of a provider's complete answer.
// ---------------------------------------------------------------------------

/// A provider's complete answer that hale could not read: not JSON, or JSON
/// it does not understand. Its text is the error's own, as the `Value`
/// path has always said it (`parse_response_bytes` of each dialect).
#[derive(Debug, thiserror::Error)]
pub enum AnswerError {
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    #[error(transparent)]
    Proto(#[from] ProtoError),
}

/// Any JSON value, read and dropped, checked as a `serde_json::Value` parse
/// checks it: each string's UTF-8 and escapes, each number's range, the
/// nesting depth (serde's `IgnoredAny` checks none of these, so a typed read
/// that skipped with it would accept answers the `Value` path refuses).
pub(crate) struct Skip;

impl<'de> Deserialize<'de> for Skip {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(SkipVisitor)
    }
}

struct SkipVisitor;

impl<'de> Visitor<'de> for SkipVisitor {
    type Value = Skip;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, _: bool) -> Result<Skip, E> {
        Ok(Skip)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Skip, E> {
        Ok(Skip)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Skip, E> {
        Ok(Skip)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Skip, E> {
        Ok(Skip)
    }
    fn visit_str<E>(self, _: &str) -> Result<Skip, E> {
        Ok(Skip)
    }
    fn visit_unit<E>(self) -> Result<Skip, E> {
        Ok(Skip)
    }
    fn visit_none<E>(self) -> Result<Skip, E> {
        Ok(Skip)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Skip, D::Error> {
        Skip::deserialize(d)
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Skip, A::Error> {
        while seq.next_element::<Skip>()?.is_some() {}
        Ok(Skip)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Skip, A::Error> {
        while map.next_key::<Skip>()?.is_some() {
            map.next_value::<Skip>()?;
        }
        Ok(Skip)
    }
}

/// A struct read from a JSON object one field at a time: the fields it
/// knows by [`Fields::field`], every other one [`Skip`]ped. A key repeated
/// is read again and the last one stays, as in a `Value` (an earlier one of
/// the wrong type still fails the read).
pub(crate) trait Fields<'de>: Default {
    /// Reads the value of `key` from `map` when this struct has such a
    /// field; `false` when it has not (the value is then skipped).
    fn field<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<bool, A::Error>;
}

/// A JSON object read as the [`Fields`] `T`; anything but an object fails.
pub(crate) struct Typed<T>(pub(crate) T);

struct TypedVisitor<T>(PhantomData<T>);

impl<'de, T: Fields<'de>> Visitor<'de> for TypedVisitor<T> {
    type Value = T;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("an object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<T, A::Error> {
        let mut t = T::default();
        while let Some(Str(key)) = map.next_key::<Str>()? {
            if !t.field(&key, &mut map)? {
                map.next_value::<Skip>()?;
            }
        }
        Ok(t)
    }
}

impl<'de, T: Fields<'de>> Deserialize<'de> for Typed<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(TypedVisitor(PhantomData)).map(Typed)
    }
}

/// Where a `Value` reader takes `field.and_then(Value::as_object)` (an
/// answer's `usage`): an object is read as `T`; any other value, `null`
/// included, is skipped and reads as `T::default()`.
pub(crate) struct IfObject<T>(pub(crate) T);

impl<'de, T: Fields<'de>> Deserialize<'de> for IfObject<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Any<T>(PhantomData<T>);
        impl<'de, T: Fields<'de>> Visitor<'de> for Any<T> {
            type Value = T;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
                TypedVisitor(PhantomData).visit_map(map)
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, seq: A) -> Result<T, A::Error> {
                SkipVisitor.visit_seq(seq).map(|_| T::default())
            }
            fn visit_bool<E>(self, _: bool) -> Result<T, E> {
                Ok(T::default())
            }
            fn visit_i64<E>(self, _: i64) -> Result<T, E> {
                Ok(T::default())
            }
            fn visit_u64<E>(self, _: u64) -> Result<T, E> {
                Ok(T::default())
            }
            fn visit_f64<E>(self, _: f64) -> Result<T, E> {
                Ok(T::default())
            }
            fn visit_str<E>(self, _: &str) -> Result<T, E> {
                Ok(T::default())
            }
            fn visit_unit<E>(self) -> Result<T, E> {
                Ok(T::default())
            }
        }
        d.deserialize_any(Any(PhantomData)).map(IfObject)
    }
}

/// A token count read as `json::count` reads one (`Value::as_u64`): a
/// non-negative integer that fits a `u64`; any other value counts 0.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Count(pub(crate) u64);

impl<'de> Deserialize<'de> for Count {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Lenient;
        impl<'de> Visitor<'de> for Lenient {
            type Value = u64;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_u64<E>(self, n: u64) -> Result<u64, E> {
                Ok(n)
            }
            // `Number::from(i64)` keeps a non-negative one as an unsigned.
            fn visit_i64<E>(self, n: i64) -> Result<u64, E> {
                Ok(u64::try_from(n).unwrap_or(0))
            }
            fn visit_f64<E>(self, _: f64) -> Result<u64, E> {
                Ok(0)
            }
            fn visit_bool<E>(self, _: bool) -> Result<u64, E> {
                Ok(0)
            }
            fn visit_str<E>(self, _: &str) -> Result<u64, E> {
                Ok(0)
            }
            fn visit_unit<E>(self) -> Result<u64, E> {
                Ok(0)
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, seq: A) -> Result<u64, A::Error> {
                SkipVisitor.visit_seq(seq).map(|_| 0)
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<u64, A::Error> {
                SkipVisitor.visit_map(map).map(|_| 0)
            }
        }
        d.deserialize_any(Lenient).map(Count)
    }
}

/// The first element of a JSON array read as `T`, the others [`Skip`]ped
/// (`None` for an empty array); anything but an array fails.
pub(crate) struct First<T>(pub(crate) Option<T>);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for First<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Seq<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for Seq<T> {
            type Value = Option<T>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an array")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Option<T>, A::Error> {
                let first = seq.next_element::<T>()?;
                while seq.next_element::<Skip>()?.is_some() {}
                Ok(first)
            }
        }
        d.deserialize_seq(Seq(PhantomData)).map(First)
    }
}

// ---------------------------------------------------------------------------
// What a request keeps of what its client sent (for the fidelity module).
// ---------------------------------------------------------------------------

/// Which canonical messages each wire message of a request became, as the
/// parsers of both dialects report it.
#[derive(Debug, Default)]
pub struct Trace {
    /// For wire message `i`, the range of canonical messages it produced.
    pub spans: Vec<Range<usize>>,
    /// Leading wire messages lifted into the system prompt (OpenAI
    /// `system`/`developer` messages before any other).
    pub lifted: usize,
}

impl Trace {
    pub fn with_capacity(n: usize) -> Self {
        Self {
            spans: Vec::with_capacity(n),
            lifted: 0,
        }
    }
}

/// The canonical messages one wire message became: `wire` is the wire
/// message's index, `msgs` the range of [`Origin::parsed`] it produced.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Group {
    pub(super) wire: usize,
    pub(super) msgs: Range<usize>,
}

/// A request as the client sent it.
#[derive(Debug, PartialEq)]
pub struct Origin {
    pub dialect: Dialect,
    /// The client's body (a JSON object: the parser accepted it).
    pub body: Map<String, Value>,
    /// Provider-feature headers the client sent ([`FEATURE_HEADERS`](super::fidelity::FEATURE_HEADERS)), lower-case names.
    pub headers: Vec<(&'static str, String)>,
    /// The canonical values as parsed, to tell what hale changed since.
    pub(super) model: String,
    pub(super) system: Option<String>,
    pub(super) max_tokens: Option<u32>,
    pub(super) stream: bool,
    pub(super) knobs: Knobs,
    pub(super) lifted: usize,
    pub(super) groups: Vec<Group>,
    /// The canonical messages as parsed. A turn that changed none of them
    /// (most turns) is told by one comparison; only a changed conversation
    /// is fingerprinted to align the two (serialising and hashing every
    /// message twice per attempt was ~5 % of a turn's instructions).
    pub(super) parsed: Vec<Message>,
    /// The body's bytes as the client sent them, when known: a provider of
    /// the client's dialect gets these very bytes when hale changed nothing
    /// in the body ([`Outgoing::raw`](super::fidelity::Outgoing::raw)).
    pub(super) raw: Option<Bytes>,
    /// What hale changed before parsing the body (a `previous_response_id`
    /// expanded into the conversation): named in every attempt's `changes`.
    pub(super) notes: Vec<String>,
}

/// Fingerprints of the canonical fields hale renders when they changed.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub(super) struct Knobs {
    pub(super) temperature: u64,
    pub(super) top_p: u64,
    pub(super) stop: u64,
    pub(super) tools: u64,
    pub(super) tool_choice: u64,
}

impl Knobs {
    pub(super) fn of(req: &ChatRequest) -> Self {
        Self {
            temperature: fingerprint(&req.temperature),
            top_p: fingerprint(&req.top_p),
            stop: fingerprint(&req.stop),
            tools: fingerprint(&req.tools),
            tool_choice: fingerprint(&req.tool_choice),
        }
    }
}

impl Origin {
    /// The origin of `req`, parsed from `body` with `trace`.
    pub fn new(
        dialect: Dialect,
        body: Value,
        headers: Vec<(&'static str, String)>,
        req: &ChatRequest,
        trace: Trace,
    ) -> Self {
        let body = match body {
            Value::Object(m) => m,
            Value::Null
            | Value::Bool(_)
            | Value::Number(_)
            | Value::String(_)
            | Value::Array(_) => Map::new(),
        };
        let n = req.messages.len();
        let groups = trace
            .spans
            .into_iter()
            .enumerate()
            .skip(trace.lifted)
            .map(|(wire, span)| Group {
                wire,
                // A span the parser reported beyond its messages holds none.
                msgs: if span.start <= span.end && span.end <= n {
                    span
                } else {
                    0..0
                },
            })
            .collect();
        Self {
            dialect,
            body,
            headers,
            model: req.model.clone(),
            system: req.system.clone(),
            max_tokens: req.max_tokens,
            stream: req.stream,
            knobs: Knobs::of(req),
            lifted: trace.lifted,
            groups,
            parsed: req.messages.clone(),
            raw: None,
            notes: Vec::new(),
        }
    }

    /// The same origin, knowing the bytes `body` was parsed from.
    pub fn with_raw(mut self, raw: Bytes) -> Self {
        self.raw = Some(raw);
        self
    }

    /// The client's value of a forwarded header.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The client's body without its messages (`input` for Responses),
    /// which are assembled apart: cloning them twice would copy every
    /// image twice.
    pub(super) fn body_but_messages(&self) -> Map<String, Value> {
        let key = self.dialect.conversation_key();
        self.body
            .iter()
            .filter(|(k, _)| *k != key)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    /// The client's wire messages (Responses input items; none when the
    /// input is a string).
    pub(super) fn wire_messages(&self) -> &[Value] {
        self.body
            .get(self.dialect.conversation_key())
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or(&[])
    }
}

/// The hasher of the fingerprints a process compares with one another (a
/// request's messages here, a request for the repeated-call rule in
/// `health`): foldhash, several times cheaper than std's SipHash on a
/// message's text, seeded once per process. A fingerprint is never stored
/// nor sent, and never keys a table, so it needs no HashDoS resistance:
/// crafting two requests that collide only misleads hale about the
/// crafter's own requests.
pub fn fingerprint_hasher() -> impl Hasher {
    static SEED: std::sync::LazyLock<foldhash::quality::RandomState> =
        std::sync::LazyLock::new(foldhash::quality::RandomState::default);
    SEED.build_hasher()
}

/// A fingerprint of a value's JSON form, stable within the process (to
/// tell whether hale changed a message or a field since it was parsed).
pub(super) fn fingerprint<T: Serialize + ?Sized>(v: &T) -> u64 {
    struct Sink<H>(H);
    impl<H: Hasher> std::io::Write for Sink<H> {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.write(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut s = Sink(fingerprint_hasher());
    // Serialising canonical types into a hasher cannot fail.
    let _ = serde_json::to_writer(&mut s, v);
    s.0.finish()
}

/// The system texts of a dialect with one system field (Gemini's
/// `systemInstruction`, Converse's `system`): the system prompt and the
/// leading system messages' text, in order; and the messages after them
/// (a later system message, such as a nudge, stays in place).
pub(crate) fn lead_system(req: &ChatRequest) -> (Vec<String>, &[Message]) {
    let lead = req
        .messages
        .iter()
        .take_while(|m| m.role == Role::System)
        .count();
    let mut system: Vec<String> = req.system.iter().cloned().collect();
    system.extend(req.messages[..lead].iter().map(Message::joined_text));
    (system, &req.messages[lead..])
}
