//! Anthropic streams: decoding a provider's Messages event stream into
//! canonical [`StreamEvent`]s, and encoding canonical events as such a
//! stream for a caller.

use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::response::{input_tokens, parse_stop_reason, stop_reason};
use crate::canonical::{Dialect, Obj, ProtoError, StopReason, Str, StreamEvent, Usage};
use crate::json::{
    as_object, count, err, error_message, field, kind_of, opt_str, push_str, req_str,
};
use crate::layout::TextLayout;
use crate::scan::{Scan, once};
use crate::sse::SseFrame;

/// A `content_block_delta` event of text: the bytes `json!` (a sorted map)
/// wrote, written by hand around the escaped text, as a stream sends one
/// per token (serialising [`TextBlockDelta`] was ~2k instructions of each;
/// test `a_text_delta_is_the_serialised_event`).
fn text_delta(text: &str, index: u32) -> SseFrame {
    let mut data = String::with_capacity(text.len() + 80);
    data.push_str(r#"{"delta":{"text":"#);
    push_str(&mut data, text);
    data.push_str(r#","type":"text_delta"},"index":"#);
    data.push_str(&index.to_string());
    data.push_str(r#","type":"content_block_delta"}"#);
    SseFrame {
        event: Some("content_block_delta"),
        data,
    }
}

/// The reference of [`text_delta`]: the event serialised. The fields are in
/// the order `json!` (a sorted map) wrote them.
#[cfg(test)]
#[derive(Serialize)]
struct TextBlockDelta<'a> {
    delta: TextDelta<'a>,
    index: u32,
    #[serde(rename = "type")]
    kind: &'static str,
}

#[cfg(test)]
#[derive(Serialize)]
struct TextDelta<'a> {
    text: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
}

/// A `content_block_delta` event of text or tool-call arguments — the
/// event a stream sends per token — read straight from the data line,
/// strings borrowed ([`Str`]), without a `Value` tree: per token, the tree
/// with its paths for error messages was most of the cost of decoding (as
/// measured for OpenAI chunks: callgrind, issue 30).
///
/// [`StreamDecoder::decode`] takes this path only when the event is a
/// `content_block_delta` (by its `type`, or by the SSE event name when
/// `type` is absent or `null`), the SSE event is not `error`, it has no
/// `error` field, and its `index` and `delta` are there with a `text_delta`
/// holding `text` or an `input_json_delta` holding `partial_json` for a
/// known tool_use block ([`StreamDecoder::decode_plain`]); or, under the
/// same conditions on `type` and `error`, a `content_block_stop` or a
/// `message_stop` (no content to read). Anything else — a
/// field of another type, a duplicate field, an array where an object
/// belongs, another event or delta type — goes through the `Value` path,
/// which says what is wrong. The difference: fields hale does not read are
/// skipped here without checking a number's range, an escape's surrogates
/// or the nesting depth, so an event the `Value` path calls malformed for
/// such a field alone still delivers its text (tests
/// `a_plain_event_decodes_as_the_value_path_does`,
/// `an_unread_field_out_of_range_does_not_lose_the_text`).
#[derive(Deserialize)]
#[cfg_attr(test, derive(Debug, PartialEq))]
struct PlainBlockDelta<'a> {
    #[serde(rename = "type", borrow)]
    kind: Option<Str<'a>>,
    index: Option<u64>,
    #[serde(borrow)]
    delta: Option<Obj<PlainDelta<'a>>>,
    error: Option<IgnoredAny>,
}

impl<'a> PlainBlockDelta<'a> {
    /// The event read by [`Scan`], without serde: `Some` only with what
    /// `serde_json::from_str::<Obj<PlainBlockDelta>>` reads (test
    /// `the_scanner_reads_what_serde_reads`), `None` when the scanner
    /// leaves the event to serde.
    fn scan(data: &'a str) -> Option<Self> {
        let mut s = Scan::new(data);
        let mut e = PlainBlockDelta {
            kind: None,
            index: None,
            delta: None,
            error: None,
        };
        let mut seen = 0;
        s.object(|s, key| {
            match key {
                "type" => {
                    once(&mut seen, 1)?;
                    e.kind = s.opt(|s| s.string().map(Str))?;
                }
                "index" => {
                    once(&mut seen, 2)?;
                    e.index = s.opt(Scan::u64)?;
                }
                "delta" => {
                    once(&mut seen, 4)?;
                    e.delta = s.opt(|s| PlainDelta::scan(s).map(Obj))?;
                }
                "error" => {
                    once(&mut seen, 8)?;
                    e.error = s.opt(|s| s.skip().map(|()| IgnoredAny))?;
                }
                _ => s.skip()?,
            }
            Some(())
        })?;
        s.end()?;
        Some(e)
    }
}

/// The `delta` of a [`PlainBlockDelta`].
#[derive(Deserialize)]
#[cfg_attr(test, derive(Debug, PartialEq))]
struct PlainDelta<'a> {
    #[serde(rename = "type", borrow)]
    kind: Option<Str<'a>>,
    #[serde(borrow)]
    text: Option<Str<'a>>,
    #[serde(borrow)]
    partial_json: Option<Str<'a>>,
}

impl<'a> PlainDelta<'a> {
    fn scan(s: &mut Scan<'a>) -> Option<Self> {
        let mut d = PlainDelta {
            kind: None,
            text: None,
            partial_json: None,
        };
        let mut seen = 0;
        s.object(|s, key| {
            match key {
                "type" => {
                    once(&mut seen, 1)?;
                    d.kind = s.opt(|s| s.string().map(Str))?;
                }
                "text" => {
                    once(&mut seen, 2)?;
                    d.text = s.opt(|s| s.string().map(Str))?;
                }
                "partial_json" => {
                    once(&mut seen, 4)?;
                    d.partial_json = s.opt(|s| s.string().map(Str))?;
                }
                _ => s.skip()?,
            }
            Some(())
        })?;
        Some(d)
    }
}

/// Decodes an Anthropic upstream SSE stream into canonical events.
///
/// Usage events are cumulative: `message_start` gives the input tokens,
/// `message_delta` the output tokens (and, in newer API versions, the input
/// again); each [`StreamEvent::Usage`] carries both as known so far. Thinking
/// blocks and unknown event types produce no events.
#[derive(Debug, Default)]
pub struct StreamDecoder {
    usage: Usage,
    /// Anthropic block index → canonical tool-call index.
    tools: Vec<(u64, u32)>,
    next_tool: u32,
    /// Indexes of the blocks relayed as opaque ([`StreamEvent::OpaqueStart`]).
    opaque: Vec<u64>,
    /// The SSE event name and layout of the last text-only event
    /// ([`text_only`]), for the events after it.
    text_layout: Option<(Option<String>, TextLayout)>,
}

/// The type of `e`, under the SSE event name `event`: its `type`, or the
/// event name when `type` is absent or `null` (as the `Value` path reads it).
fn event_type<'e>(e: &'e PlainBlockDelta, event: Option<&'e str>) -> Option<&'e str> {
    e.kind.as_ref().map(|Str(t)| t.as_ref()).or(event)
}

/// The text of `e`, an event [`StreamDecoder::decode_plain`] took (a
/// `content_block_delta` with an index, no error), if it is a `text_delta`
/// holding no escape: the event a stream sends per token, which decodes to
/// that text alone whatever the decoder's state ([`TextLayout`]).
fn text_only<'e>(e: &'e PlainBlockDelta, event: Option<&str>) -> Option<&'e str> {
    if event_type(e, event) != Some("content_block_delta") {
        return None;
    }
    let Obj(d) = e.delta.as_ref()?;
    if d.kind.as_ref().map(|Str(k)| k.as_ref()) != Some("text_delta") {
        return None;
    }
    // Only a text borrowed from the event has a place in it.
    let Str(std::borrow::Cow::Borrowed(text)) = d.text.as_ref()? else {
        return None;
    };
    Some(text)
}

impl StreamDecoder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Decodes one SSE event; `event: error` (or a `type: error` payload) is
    /// `Err` with the provider's message, as is malformed data.
    pub fn decode(
        &mut self,
        event: Option<&str>,
        data: &str,
    ) -> Result<Vec<StreamEvent>, ProtoError> {
        let data = data.trim();
        if event == Some("ping") || data.is_empty() {
            return Ok(Vec::new());
        }
        if let Some((ev, layout)) = &self.text_layout
            && ev.as_deref() == event
            && let Some(text) = layout.text_of(data)
        {
            // What `decode_plain` gives a text delta, whatever the state.
            return Ok(if text.is_empty() {
                Vec::new()
            } else {
                vec![StreamEvent::TextDelta(text.into_owned())]
            });
        }
        let plain = match PlainBlockDelta::scan(data) {
            Some(e) => Some(e),
            None => serde_json::from_str::<Obj<PlainBlockDelta>>(data)
                .ok()
                .map(|Obj(e)| e),
        };
        if let Some(e) = plain {
            let layout = text_only(&e, event).and_then(|t| TextLayout::of(data, t));
            if let Some(out) = self.decode_plain(event, e) {
                if let Some(layout) = layout {
                    self.text_layout = Some((event.map(str::to_string), layout));
                }
                return Ok(out);
            }
        }
        self.decode_tree(event, data)
    }

    /// [`StreamDecoder::decode`] of an event read as [`PlainBlockDelta`]:
    /// the events [`StreamDecoder::decode_tree`] gives, or `None` when the
    /// event is not one this path takes and the `Value` path must decide
    /// (including every event that path turns into an error).
    fn decode_plain(&self, event: Option<&str>, e: PlainBlockDelta) -> Option<Vec<StreamEvent>> {
        if event == Some("error") || e.error.is_some() {
            return None;
        }
        match event_type(&e, event) {
            Some("content_block_delta") => {}
            // Events without content, read whole and no error: what the
            // `Value` path gives them, whatever their other fields (~1.5k
            // instructions each through the tree, every stream).
            Some("content_block_stop") => return Some(Vec::new()),
            Some("message_stop") => return Some(vec![StreamEvent::Done]),
            _ => return None,
        }
        let index = e.index?;
        let Obj(d) = e.delta?;
        let mut out = Vec::new();
        match d.kind?.0.as_ref() {
            "text_delta" => {
                let Str(text) = d.text?;
                if !text.is_empty() {
                    out.push(StreamEvent::TextDelta(text.into_owned()));
                }
            }
            // A delta of an opaque block is the `Value` path's to relay.
            "input_json_delta" if !self.opaque.contains(&index) => {
                let Str(piece) = d.partial_json?;
                let &(_, tool) = self.tools.iter().rev().find(|(b, _)| *b == index)?;
                if !piece.is_empty() {
                    out.push(StreamEvent::ToolCallDelta {
                        index: tool,
                        arguments: piece.into_owned(),
                    });
                }
            }
            _ => return None,
        }
        Some(out)
    }

    /// [`StreamDecoder::decode`] of any event, through a `Value` tree: the
    /// general path, and the one that names what is wrong.
    fn decode_tree(
        &mut self,
        event: Option<&str>,
        data: &str,
    ) -> Result<Vec<StreamEvent>, ProtoError> {
        let v: Value = serde_json::from_str(data)
            .map_err(|e| err("data", format!("malformed event data: {e}")))?;
        let obj = v.as_object().ok_or_else(|| {
            err(
                "data",
                format!("event data must be an object, got {}", kind_of(&v)),
            )
        })?;
        let ty = match obj.get("type").and_then(Value::as_str) {
            Some(t) => t,
            None => event.unwrap_or(""),
        };
        if event == Some("error") || ty == "error" {
            let e = field(obj, "error").unwrap_or(&v);
            return Err(err("error", error_message(e)));
        }
        let mut out = Vec::new();
        match ty {
            "message_start" => {
                let m = match field(obj, "message") {
                    None => return Err(err("message", "missing `message`")),
                    Some(m) => as_object(m, "message")?,
                };
                let usage = field(m, "usage").and_then(Value::as_object);
                self.usage = Usage {
                    input_tokens: input_tokens(usage),
                    output_tokens: count(usage, "output_tokens"),
                };
                out.push(StreamEvent::Start {
                    id: opt_str(m, "id", "message")?.unwrap_or_default().to_string(),
                    model: opt_str(m, "model", "message")?
                        .unwrap_or_default()
                        .to_string(),
                });
                out.push(StreamEvent::Usage(self.usage));
            }
            "content_block_start" => {
                let index = block_index(obj)?;
                let b = match field(obj, "content_block") {
                    None => return Err(err("content_block", "missing `content_block`")),
                    Some(b) => as_object(b, "content_block")?,
                };
                // A block index names the block that started there last.
                self.opaque.retain(|&i| i != index);
                match b.get("type").and_then(Value::as_str) {
                    Some("text") => {
                        if let Some(t) = opt_str(b, "text", "content_block")?
                            && !t.is_empty()
                        {
                            out.push(StreamEvent::TextDelta(t.to_string()));
                        }
                    }
                    Some("tool_use") => {
                        let tool = self.next_tool;
                        self.next_tool = self.next_tool.saturating_add(1);
                        self.tools.push((index, tool));
                        out.push(StreamEvent::ToolCallStart {
                            index: tool,
                            id: req_str(b, "id", "content_block")?.to_string(),
                            name: req_str(b, "name", "content_block")?.to_string(),
                        });
                        if let Some(input) = field(b, "input").and_then(Value::as_object)
                            && !input.is_empty()
                        {
                            out.push(StreamEvent::ToolCallDelta {
                                index: tool,
                                arguments: Value::Object(input.clone()).to_string(),
                            });
                        }
                    }
                    // A block hale does not model (thinking, redacted
                    // thinking, a server tool's call or result): relayed
                    // as sent to an Anthropic caller. Dropping it broke
                    // the caller's next request: a thinking block must be
                    // sent back, signed, with the tool use it preceded.
                    Some(_) => {
                        self.opaque.push(index);
                        out.push(StreamEvent::OpaqueStart {
                            dialect: Dialect::Anthropic,
                            block: Value::Object(b.clone()),
                        });
                    }
                    None => {}
                }
            }
            "content_block_delta" => {
                let index = block_index(obj)?;
                let d = match field(obj, "delta") {
                    None => return Err(err("delta", "missing `delta`")),
                    Some(d) => as_object(d, "delta")?,
                };
                match d.get("type").and_then(Value::as_str) {
                    Some("text_delta") => {
                        let t = req_str(d, "text", "delta")?;
                        if !t.is_empty() {
                            out.push(StreamEvent::TextDelta(t.to_string()));
                        }
                    }
                    // Any other delta of an opaque block (a server tool's
                    // input, a thinking block's text or signature), as sent.
                    Some(_) if self.opaque.contains(&index) => {
                        out.push(StreamEvent::OpaqueDelta {
                            dialect: Dialect::Anthropic,
                            delta: Value::Object(d.clone()),
                        });
                    }
                    Some("input_json_delta") => {
                        let piece = req_str(d, "partial_json", "delta")?;
                        let Some(&(_, tool)) = self.tools.iter().rev().find(|(b, _)| *b == index)
                        else {
                            return Err(err(
                                "index",
                                format!(
                                    "input_json_delta for block {index}, which is not a tool_use block"
                                ),
                            ));
                        };
                        if !piece.is_empty() {
                            out.push(StreamEvent::ToolCallDelta {
                                index: tool,
                                arguments: piece.to_string(),
                            });
                        }
                    }
                    Some(_) | None => {}
                }
            }
            "message_delta" => {
                if let Some(d) = field(obj, "delta").and_then(Value::as_object)
                    && let Some(r) = opt_str(d, "stop_reason", "delta")?
                {
                    out.push(StreamEvent::Finish(parse_stop_reason(r)));
                }
                if let Some(u) = field(obj, "usage").and_then(Value::as_object) {
                    if u.contains_key("output_tokens") {
                        self.usage.output_tokens = count(Some(u), "output_tokens");
                    }
                    let input = input_tokens(Some(u));
                    if input > 0 {
                        self.usage.input_tokens = input;
                    }
                    out.push(StreamEvent::Usage(self.usage));
                }
            }
            "message_stop" => out.push(StreamEvent::Done),
            _ => {}
        }
        Ok(out)
    }
}

fn block_index(obj: &Map<String, Value>) -> Result<u64, ProtoError> {
    match field(obj, "index") {
        None => Err(err("index", "missing `index`")),
        Some(v) => v.as_u64().ok_or_else(|| {
            err(
                "index",
                format!("must be a non-negative integer, got {}", kind_of(v)),
            )
        }),
    }
}

// The events an encoder writes once or twice a stream, typed: built as
// `json!` trees they were ~35k instructions a stream (callgrind, issue 30).
// The fields are in the order `json!` (a sorted map)
// wrote them, so the bytes are the same (test `the_typed_events_are_the_json_ones`).

/// `message_start`.
#[derive(Serialize)]
struct MessageStart<'a> {
    message: StartMessage<'a>,
    #[serde(rename = "type")]
    kind: &'static str,
}

#[derive(Serialize)]
struct StartMessage<'a> {
    /// Always `[]`.
    content: [(); 0],
    id: &'a str,
    model: &'a str,
    role: &'static str,
    /// Always `null`.
    stop_reason: (),
    /// Always `null`.
    stop_sequence: (),
    #[serde(rename = "type")]
    kind: &'static str,
    usage: UsageOut,
}

#[derive(Serialize)]
struct UsageOut {
    input_tokens: u64,
    output_tokens: u64,
}

/// `content_block_start` of any block.
#[derive(Serialize)]
struct BlockStart<'a, B> {
    content_block: &'a B,
    index: u32,
    #[serde(rename = "type")]
    kind: &'static str,
}

/// An empty text block.
#[derive(Serialize)]
struct TextBlock {
    text: &'static str,
    #[serde(rename = "type")]
    kind: &'static str,
}

/// `content_block_stop`.
#[derive(Serialize)]
struct BlockStop {
    index: u32,
    #[serde(rename = "type")]
    kind: &'static str,
}

/// `message_delta`.
#[derive(Serialize)]
struct MessageDelta {
    delta: StopDelta,
    #[serde(rename = "type")]
    kind: &'static str,
    usage: UsageOut,
}

#[derive(Serialize)]
struct StopDelta {
    stop_reason: &'static str,
    /// Always `null`.
    stop_sequence: (),
}

/// The content block an encoder has open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OpenBlock {
    Text,
    /// The tool call with this canonical index.
    Tool(u32),
    /// A block relayed as the provider sent it ([`StreamEvent::OpaqueStart`]).
    Opaque,
}

/// Encodes canonical events as an Anthropic Messages event stream.
///
/// The sequence is always `message_start`, then blocks (`content_block_start`,
/// deltas, `content_block_stop`, one block open at a time), then one
/// `message_delta`, then `message_stop`, whatever order the events came in:
/// a missing `Start` is supplied; `Finish` and `Usage` are held until both are
/// known (the `message_delta` goes out when a `Usage` follows the `Finish`,
/// else at `Done`); a `Done` without `Finish` reads `tool_use` if a tool call
/// was sent, else `end_turn`. Content after `Finish` is dropped, as is an
/// argument piece for a tool call whose block was already closed (upstreams
/// send tool calls one after the other). `include_usage` is accepted for
/// symmetry: Anthropic streams always carry usage.
#[derive(Debug)]
pub struct StreamEncoder {
    id: String,
    model: String,
    started: bool,
    closed: bool,
    delta_sent: bool,
    next_block: u32,
    open: Option<OpenBlock>,
    any_tool: bool,
    finish: Option<StopReason>,
    usage: Usage,
}

impl StreamEncoder {
    pub fn new(id: &str, model: &str, _include_usage: bool) -> Self {
        Self {
            id: id.to_string(),
            model: model.to_string(),
            started: false,
            closed: false,
            delta_sent: false,
            next_block: 0,
            open: None,
            any_tool: false,
            finish: None,
            usage: Usage::default(),
        }
    }

    fn frame(event: &'static str, data: Value) -> SseFrame {
        SseFrame {
            event: Some(event),
            data: data.to_string(),
        }
    }

    /// A frame whose data is a typed event (strings, numbers and `Value`s
    /// only: serialising it cannot fail).
    fn typed(event: &'static str, data: &impl Serialize) -> SseFrame {
        SseFrame {
            event: Some(event),
            data: serde_json::to_string(data).unwrap_or_default(),
        }
    }

    fn ensure_started(&mut self, out: &mut Vec<SseFrame>) {
        if self.started {
            return;
        }
        self.started = true;
        out.push(Self::typed(
            "message_start",
            &MessageStart {
                message: StartMessage {
                    content: [],
                    id: &self.id,
                    model: &self.model,
                    role: "assistant",
                    stop_reason: (),
                    stop_sequence: (),
                    kind: "message",
                    usage: UsageOut {
                        input_tokens: self.usage.input_tokens,
                        output_tokens: 0,
                    },
                },
                kind: "message_start",
            },
        ));
    }

    fn close_block(&mut self, out: &mut Vec<SseFrame>) {
        if self.open.take().is_some() {
            let index = self.next_block.saturating_sub(1);
            out.push(Self::typed(
                "content_block_stop",
                &BlockStop {
                    index,
                    kind: "content_block_stop",
                },
            ));
        }
    }

    fn open_block(&mut self, kind: OpenBlock, block: &impl Serialize, out: &mut Vec<SseFrame>) {
        self.close_block(out);
        let index = self.next_block;
        self.next_block = self.next_block.saturating_add(1);
        self.open = Some(kind);
        out.push(Self::typed(
            "content_block_start",
            &BlockStart {
                content_block: block,
                index,
                kind: "content_block_start",
            },
        ));
    }

    fn current_index(&self) -> u32 {
        self.next_block.saturating_sub(1)
    }

    fn message_delta(&mut self, out: &mut Vec<SseFrame>) {
        if self.delta_sent {
            return;
        }
        self.delta_sent = true;
        self.close_block(out);
        let reason = self.finish.unwrap_or(if self.any_tool {
            StopReason::ToolUse
        } else {
            StopReason::EndTurn
        });
        out.push(Self::typed(
            "message_delta",
            &MessageDelta {
                delta: StopDelta {
                    stop_reason: stop_reason(reason),
                    stop_sequence: (),
                },
                kind: "message_delta",
                usage: UsageOut {
                    input_tokens: self.usage.input_tokens,
                    output_tokens: self.usage.output_tokens,
                },
            },
        ));
    }

    pub fn encode(&mut self, ev: &StreamEvent) -> Vec<SseFrame> {
        let mut out = Vec::new();
        if self.closed {
            return out;
        }
        match ev {
            StreamEvent::Start { id, model } => {
                if self.id.is_empty() {
                    self.id.clone_from(id);
                }
                if self.model.is_empty() {
                    self.model.clone_from(model);
                }
                self.ensure_started(&mut out);
            }
            StreamEvent::TextDelta(text) => {
                self.ensure_started(&mut out);
                if text.is_empty() || self.finish.is_some() {
                    return out;
                }
                if self.open != Some(OpenBlock::Text) {
                    self.open_block(
                        OpenBlock::Text,
                        &TextBlock {
                            text: "",
                            kind: "text",
                        },
                        &mut out,
                    );
                }
                out.push(text_delta(text, self.current_index()));
            }
            StreamEvent::ToolCallStart { index, id, name } => {
                self.ensure_started(&mut out);
                if self.finish.is_some() {
                    return out;
                }
                self.any_tool = true;
                self.open_block(
                    OpenBlock::Tool(*index),
                    &json!({"type": "tool_use", "id": id, "name": name, "input": {}}),
                    &mut out,
                );
            }
            StreamEvent::ToolCallDelta { index, arguments } => {
                self.ensure_started(&mut out);
                if arguments.is_empty()
                    || self.finish.is_some()
                    || self.open != Some(OpenBlock::Tool(*index))
                {
                    return out;
                }
                out.push(Self::frame(
                    "content_block_delta",
                    json!({"type": "content_block_delta", "index": self.current_index(),
                           "delta": {"type": "input_json_delta", "partial_json": arguments}}),
                ));
            }
            StreamEvent::Finish(reason) => {
                self.ensure_started(&mut out);
                if self.finish.is_none() {
                    self.finish = Some(*reason);
                }
                self.close_block(&mut out);
            }
            StreamEvent::Usage(u) => {
                if !self.delta_sent {
                    self.usage = *u;
                }
                if self.started && self.finish.is_some() {
                    self.message_delta(&mut out);
                }
            }
            StreamEvent::Done => {
                self.ensure_started(&mut out);
                self.message_delta(&mut out);
                out.push(SseFrame {
                    event: Some("message_stop"),
                    data: r#"{"type":"message_stop"}"#.to_owned(),
                });
                self.closed = true;
            }
            StreamEvent::OpaqueStart { dialect, block } => {
                if *dialect != Dialect::Anthropic {
                    return out;
                }
                self.ensure_started(&mut out);
                if self.finish.is_some() {
                    return out;
                }
                self.open_block(OpenBlock::Opaque, block, &mut out);
            }
            StreamEvent::OpaqueDelta { dialect, delta } => {
                if *dialect != Dialect::Anthropic
                    || self.finish.is_some()
                    || self.open != Some(OpenBlock::Opaque)
                {
                    return out;
                }
                out.push(Self::frame(
                    "content_block_delta",
                    json!({"type": "content_block_delta", "index": self.current_index(),
                           "delta": delta}),
                ));
            }
        }
        out
    }

    /// An in-band error for a stream that cannot be completed: `event: error`
    /// with `{"type":"error","error":{"type":kind,"message":…}}`, and no
    /// `message_delta` or `message_stop`, so the answer is never presented as
    /// complete. The encoder emits nothing afterwards.
    pub fn error(&mut self, kind: &str, message: &str) -> Vec<SseFrame> {
        if self.closed {
            return Vec::new();
        }
        self.closed = true;
        vec![Self::frame(
            "error",
            json!({"type": "error", "error": {"type": kind, "message": message}}),
        )]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::borrow::Cow;

    /// What `decode` did before the plain path: every event through the tree.
    fn decode_by_tree(
        d: &mut StreamDecoder,
        event: Option<&str>,
        data: &str,
    ) -> Result<Vec<StreamEvent>, ProtoError> {
        let data = data.trim();
        if event == Some("ping") || data.is_empty() {
            return d.decode(event, data);
        }
        d.decode_tree(event, data)
    }

    /// `decode` over `events` gives, event by event, what the `Value` path
    /// gives: the same events, or the same error.
    fn decodes_as_the_tree(events: &[(Option<String>, String)]) -> Result<(), TestCaseError> {
        let mut fast = StreamDecoder::new();
        let mut tree = StreamDecoder::new();
        for (name, data) in events {
            let name = name.as_deref();
            prop_assert_eq!(
                fast.decode(name, data),
                decode_by_tree(&mut tree, name, data),
                "event {:?} data {}",
                name,
                data
            );
        }
        Ok(())
    }

    fn one_of(values: &[(u32, &'static str)]) -> BoxedStrategy<String> {
        let values: Vec<(u32, BoxedStrategy<String>)> = values
            .iter()
            .map(|&(w, v)| (w, Just(v.to_string()).boxed()))
            .collect();
        proptest::strategy::Union::new_weighted(values).boxed()
    }

    /// Any JSON value hale does not read, of every type. No number out of
    /// `f64`'s range, no lone surrogate and no deep nesting: those are the
    /// documented difference, tested below.
    fn ignored() -> BoxedStrategy<String> {
        one_of(&[
            (1, "null"),
            (1, "true"),
            (1, "0"),
            (1, "-1"),
            (1, "1.5"),
            (1, "\"x\""),
            (1, "\"a\\\"b\\n\\u00e9 日本\""),
            (1, "[]"),
            (1, "[1,{\"a\":null}]"),
            (1, "{}"),
            (1, "{\"a\":[1],\"b\":{\"c\":\"d\"}}"),
        ])
    }

    /// Mostly one of `right`, one time in ten one of `wrong`: an event has
    /// several fields, and the plain path needs every one of them right.
    fn mostly(
        right: &[(u32, &'static str)],
        wrong: &[(u32, &'static str)],
    ) -> BoxedStrategy<String> {
        prop_oneof![9 => one_of(right), 1 => one_of(wrong)].boxed()
    }

    /// A value where hale reads a string: escapes and non-ASCII, and other
    /// types and the values the plain path must refuse.
    fn text() -> BoxedStrategy<String> {
        mostly(
            &[
                (4, "\"Hello\""),
                (2, "\"\""),
                (3, r#""q\" \\ \/ \n \t \u00e9 \ud83d\ude00 é 日本""#),
                (1, r#""{\"a\": 1""#),
            ],
            &[
                (2, "null"),
                (1, "5"),
                (1, "true"),
                (1, "[]"),
                (1, "[\"Hello\"]"),
                (1, "{}"),
                (1, "{\"text\":\"Hello\"}"),
                (1, "1e400"),
                (1, "\"\\ud800\""),
            ],
        )
    }

    /// A block index: right and wrong types and ranges.
    fn index() -> BoxedStrategy<String> {
        mostly(
            &[(8, "0"), (3, "1"), (1, "2"), (1, "18446744073709551615")],
            &[
                (2, "null"),
                (1, "-1"),
                (1, "-0"),
                (1, "1.0"),
                (1, "1e0"),
                (1, "\"0\""),
                (1, "18446744073709551616"),
                (1, "1e400"),
                (1, "[0]"),
            ],
        )
    }

    /// The `type` of an event: mostly `content_block_delta`, spelled plain
    /// or escaped, sometimes another type or not a string.
    fn event_type() -> BoxedStrategy<String> {
        mostly(
            &[
                (10, "\"content_block_delta\""),
                (1, "\"content_block\\u005fdelta\""),
            ],
            &[
                (2, "null"),
                (1, "\"content_block_start\""),
                (1, "\"message_delta\""),
                (1, "\"content_block_stop\""),
                (1, "\"message_stop\""),
                (1, "\"error\""),
                (1, "\"\""),
                (1, "5"),
                (1, "[\"content_block_delta\"]"),
                (1, "\"\\ud800\""),
            ],
        )
    }

    /// The `type` of a delta.
    fn delta_type() -> BoxedStrategy<String> {
        mostly(
            &[
                (6, "\"text_delta\""),
                (5, "\"input_json_delta\""),
                (1, "\"input\\u005fjson_delta\""),
            ],
            &[
                (1, "\"thinking_delta\""),
                (1, "\"signature_delta\""),
                (1, "null"),
                (1, "3"),
                (1, "{}"),
            ],
        )
    }

    fn error() -> BoxedStrategy<String> {
        one_of(&[
            (2, "null"),
            (1, "\"boom\""),
            (1, r#"{"type":"overloaded_error","message":"Overloaded"}"#),
            (1, "{}"),
        ])
    }

    /// An object of `fields`, each present with its own chance (in
    /// percent) and a value from its own strategy, in a shuffled order;
    /// one time in twenty with one key written twice, one time in twenty
    /// written as an array of the values instead.
    fn object(fields: Vec<(&'static str, u32, BoxedStrategy<String>)>) -> BoxedStrategy<String> {
        let present: Vec<BoxedStrategy<Option<(&'static str, String)>>> = fields
            .iter()
            .map(|(k, chance, v)| {
                let (k, chance) = (*k, *chance);
                (0..100u32, v.clone())
                    .prop_map(move |(r, v)| (r < chance).then_some((k, v)))
                    .boxed()
            })
            .collect();
        let n = fields.len();
        let twice = proptest::option::weighted(
            0.05,
            (0..n).prop_flat_map(move |i| (Just(fields[i].0), fields[i].2.clone())),
        );
        (present, twice)
            .prop_flat_map(|(present, twice)| {
                let pairs: Vec<(&'static str, String)> =
                    present.into_iter().flatten().chain(twice).collect();
                (Just(pairs).prop_shuffle(), 0..20u8)
            })
            .prop_map(|(pairs, shape)| crate::json::json_object(pairs, shape == 0))
            .boxed()
    }

    fn delta() -> BoxedStrategy<String> {
        object(vec![
            ("type", 97, delta_type()),
            ("text", 70, text()),
            ("partial_json", 60, text()),
            ("signature", 10, ignored()),
        ])
    }

    /// A `content_block_delta`, right or wrong in every field hale reads.
    fn block_delta() -> BoxedStrategy<String> {
        let delta = prop_oneof![18 => delta(), 1 => text(), 1 => index()];
        object(vec![
            ("type", 88, event_type()),
            ("t\\u0079pe", 3, event_type()),
            ("index", 95, index()),
            ("delta", 95, delta.boxed()),
            ("error", 5, error()),
            ("usage", 10, ignored()),
            ("x", 10, ignored()),
        ])
    }

    /// Delta layouts around a text: (SSE event name, head, tail).
    const LAYOUTS: &[(Option<&str>, &str, &str)] = &[
        (
            Some("content_block_delta"),
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":""#,
            r#""}}"#,
        ),
        (
            None,
            r#"{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":""#,
            r#""}}"#,
        ),
        (
            Some("content_block_delta"),
            r#"{"index":0,"delta":{"type":"text_delta","text":""#,
            r#""}}"#,
        ),
        (
            Some("content_block_delta"),
            r#"{ "type" : "content_block_delta", "index" : 0, "delta" : { "text" : ""#,
            r#"", "type" : "text_delta" } }"#,
        ),
        (
            Some("content_block_delta"),
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":""#,
            r#""}}"#,
        ),
        (
            Some("content_block_delta"),
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":""#,
            r#""},"error":{"type":"overloaded_error","message":"Overloaded"}}"#,
        ),
        (
            Some("content_block_delta"),
            r#"{"type":"content_block_delta","delta":{"type":"text_delta","text":""#,
            r#""}}"#,
        ),
        (
            Some("content_block_delta"),
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{}","text":""#,
            r#""}}"#,
        ),
        // Events without content that carry a text delta: no layout.
        (
            Some("content_block_delta"),
            r#"{"type":"message_stop","index":0,"delta":{"type":"text_delta","text":""#,
            r#""}}"#,
        ),
        (
            Some("content_block_stop"),
            r#"{"index":0,"delta":{"type":"text_delta","text":""#,
            r#""}}"#,
        ),
    ];

    /// A `content_block_start` of a tool_use block (else of a text or a
    /// thinking block): the decoder's state for `input_json_delta`.
    fn block_start() -> BoxedStrategy<String> {
        let at = prop_oneof![5 => Just(0u8), 2 => Just(1u8), 1 => Just(2u8)];
        let tool = (at.clone(), 1..3u8, prop::bool::ANY).prop_map(|(i, id, input)| {
            let input = if input { "{\"a\":1}" } else { "{}" };
            format!(
                r#"{{"type":"content_block_start","index":{i},"content_block":{{"type":"tool_use","id":"toolu_{id}","name":"f","input":{input}}}}}"#
            )
        });
        let text = at.clone().prop_map(|i| {
            format!(
                r#"{{"type":"content_block_start","index":{i},"content_block":{{"type":"text","text":""}}}}"#
            )
        });
        // A block relayed as sent: its deltas are the `Value` path's.
        let thinking = at.prop_map(|i| {
            format!(
                r#"{{"type":"content_block_start","index":{i},"content_block":{{"type":"thinking","thinking":"","signature":""}}}}"#
            )
        });
        prop_oneof![4 => tool, 1 => text, 1 => thinking].boxed()
    }

    /// The events of a stream other than deltas.
    fn other_event() -> BoxedStrategy<String> {
        prop_oneof![
            3 => block_start(),
            1 => one_of(&[
                (2, r#"{"type":"message_start","message":{"id":"msg_1","model":"claude","usage":{"input_tokens":3,"output_tokens":1}}}"#),
                (1, r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":5}}"#),
                (1, r#"{"type":"message_stop"}"#),
                (1, r#"{"type":"content_block_stop","index":0}"#),
                (1, r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#),
                (1, r#"{"type":"ping"}"#),
                (1, ""),
            ]),
        ]
        .boxed()
    }

    /// The SSE event name: none, agreeing or disagreeing with `type`.
    fn event_name() -> BoxedStrategy<Option<String>> {
        prop_oneof![
            6 => Just(None),
            6 => Just(Some("content_block_delta".to_string())),
            1 => Just(Some("content_block_start".to_string())),
            1 => Just(Some("message_delta".to_string())),
            1 => Just(Some("content_block_stop".to_string())),
            1 => Just(Some("message_stop".to_string())),
            1 => Just(Some("error".to_string())),
            1 => Just(Some("ping".to_string())),
        ]
        .boxed()
    }

    /// One SSE event (name and data), the data now and then padded with
    /// whitespace.
    fn event() -> BoxedStrategy<(Option<String>, String)> {
        let data = prop_oneof![1 => block_delta(), 1 => other_event()];
        let pad = one_of(&[(8, ""), (1, " "), (1, "\n ")]);
        (event_name(), data, pad)
            .prop_map(|(name, data, pad)| (name, format!("{pad}{data}{pad}")))
            .boxed()
    }

    /// 1–6 events, most of the time opening with a block start (as a real
    /// stream does), so that deltas often have a block to go to.
    fn stream() -> BoxedStrategy<Vec<(Option<String>, String)>> {
        let start = proptest::option::weighted(0.7, (event_name(), block_start()));
        (start, proptest::collection::vec(event(), 1..7))
            .prop_map(|(start, events)| start.into_iter().chain(events).take(6).collect())
            .boxed()
    }

    /// The events written from typed structs are the bytes the `json!`
    /// trees wrote: each frame's data is its own `Value`'s text (a sorted
    /// map, compact), with the content the stream's tests expect.
    #[test]
    fn the_typed_events_are_the_json_ones() {
        let mut e = StreamEncoder::new("msg_\"1", "m\u{1}", true);
        let mut frames = Vec::new();
        for ev in [
            StreamEvent::Start {
                id: String::new(),
                model: String::new(),
            },
            StreamEvent::TextDelta("a \"b\"".into()),
            StreamEvent::ToolCallStart {
                index: 0,
                id: "t1".into(),
                name: "edit".into(),
            },
            StreamEvent::ToolCallDelta {
                index: 0,
                arguments: "{}".into(),
            },
            StreamEvent::Finish(StopReason::ToolUse),
            StreamEvent::Usage(Usage {
                input_tokens: 7,
                output_tokens: 3,
            }),
            StreamEvent::Done,
        ] {
            frames.extend(e.encode(&ev));
        }
        let names: Vec<_> = frames.iter().map(|f| f.event.unwrap_or("")).collect();
        assert_eq!(
            names,
            [
                "message_start",
                "content_block_start",
                "content_block_delta",
                "content_block_stop",
                "content_block_start",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop"
            ]
        );
        for f in &frames {
            let v: Value = serde_json::from_str(&f.data).expect("JSON");
            assert_eq!(f.data, v.to_string(), "{}", f.data);
        }
        assert_eq!(
            frames[0].data,
            json!({"type": "message_start", "message": {
                "id": "msg_\"1", "type": "message", "role": "assistant", "model": "m\u{1}",
                "content": [], "stop_reason": null, "stop_sequence": null,
                "usage": {"input_tokens": 0, "output_tokens": 0},
            }})
            .to_string()
        );
        assert_eq!(
            frames[1].data,
            r#"{"content_block":{"text":"","type":"text"},"index":0,"type":"content_block_start"}"#
        );
        assert_eq!(frames[3].data, r#"{"index":0,"type":"content_block_stop"}"#);
        assert_eq!(
            frames[7].data,
            json!({"type": "message_delta",
                   "delta": {"stop_reason": "tool_use", "stop_sequence": null},
                   "usage": {"input_tokens": 7, "output_tokens": 3}})
            .to_string()
        );
        assert_eq!(frames[8].data, json!({"type": "message_stop"}).to_string());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2_000))]

        /// A text delta written by hand is the serialised event, byte for
        /// byte, whatever the text (quotes, backslashes, control
        /// characters, non-ASCII) and the block index.
        #[test]
        fn a_text_delta_is_the_serialised_event(
            text in "[\\x00-\\x1f\"\\\\/a-z\\x7fé😀]{1,12}|\\PC{1,12}",
            index in proptest::num::u32::ANY,
        ) {
            let want = serde_json::to_string(&TextBlockDelta {
                delta: TextDelta { text: &text, kind: "text_delta" },
                index,
                kind: "content_block_delta",
            })
            .unwrap();
            let got = text_delta(&text, index);
            prop_assert_eq!(got.event, Some("content_block_delta"));
            prop_assert_eq!(got.data, want);
        }

        /// A stream of text deltas alike but for their text — the fast
        /// path of [`TextLayout`], [`text_only`] — among other events,
        /// some under another SSE event name, decodes as the `Value` path
        /// decodes it. The texts are raw string bodies (escapes, surrogates
        /// paired and lone, control characters, a bare quote, the layout's
        /// own tail); the layouts include deltas that are not text.
        #[test]
        fn a_stream_of_alike_deltas_decodes_as_the_value_path_does(
            layout in 0..LAYOUTS.len(),
            texts in proptest::collection::vec((crate::layout::text_body(&[r#""}}"#]), 0..8u8), 1..8),
            others in proptest::collection::vec((0..8usize, event()), 0..3),
            start in stream(),
        ) {
            let (name, head, tail) = LAYOUTS[layout];
            let mut events = start;
            for (i, (t, rename)) in texts.iter().enumerate() {
                let name = match rename {
                    0 => None,
                    1 => Some("message_delta".to_string()),
                    _ => name.map(str::to_string),
                };
                events.push((name, format!("{head}{t}{tail}")));
                for (at, e) in &others {
                    if *at == i {
                        events.push(e.clone());
                    }
                }
            }
            decodes_as_the_tree(&events)?;
        }

        /// Over a stream of generated events (the decoder keeps the tool_use
        /// blocks from event to event), `decode` gives exactly what the
        /// `Value` path gives: the same events, or the same error.
        #[test]
        fn a_plain_event_decodes_as_the_value_path_does(events in stream()) {
            decodes_as_the_tree(&events)?;
        }
    }

    /// The generator reaches the plain path — text and tool-call arguments
    /// — and the fallbacks: events serde refuses, events it reads that the
    /// plain path leaves to the `Value` path, and among those arguments for
    /// a block that is no tool_use block. So the property above compares
    /// more than the `Value` path with itself.
    #[test]
    fn the_generated_events_take_both_paths() {
        use proptest::strategy::ValueTree;
        use proptest::test_runner::TestRunner;
        let mut runner = TestRunner::deterministic();
        let (mut text, mut tool, mut refused, mut not_plain, mut no_tool) = (0, 0, 0, 0, 0);
        for _ in 0..2_000 {
            let mut d = StreamDecoder::new();
            for (name, data) in stream().new_tree(&mut runner).unwrap().current() {
                let (name, data) = (name.as_deref(), data.trim());
                if name == Some("ping") || data.is_empty() {
                    continue;
                }
                match serde_json::from_str::<Obj<PlainBlockDelta>>(data) {
                    Ok(Obj(e)) => {
                        let json = e
                            .delta
                            .as_ref()
                            .and_then(|Obj(p)| p.kind.as_ref())
                            .is_some_and(|Str(k)| k == "input_json_delta");
                        match d.decode_plain(name, e) {
                            Some(_) if json => tool += 1,
                            Some(_) => text += 1,
                            None => not_plain += 1,
                        }
                    }
                    Err(_) => refused += 1,
                }
                if let Err(e) = d.decode(name, data)
                    && e.message.ends_with("which is not a tool_use block")
                {
                    no_tool += 1;
                }
            }
        }
        assert!(
            text > 250 && tool > 80 && refused > 500 && not_plain > 1_000 && no_tool > 80,
            "text {text}, tool {tool}, refused {refused}, not plain {not_plain}, no tool {no_tool}"
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4_000))]

        /// Whatever the event data — generated (keys in any order, repeated
        /// or escaped, fields of every type, escapes, lone surrogates), cut
        /// short anywhere, or spaced out — the scanner reads exactly what
        /// serde reads, or leaves the event to serde.
        #[test]
        fn the_scanner_reads_what_serde_reads(
            e in prop_oneof![3 => block_delta(), 1 => other_event()],
            cut in 0..300usize,
        ) {
            for doc in crate::scan::variants(&e, cut) {
                if let Some(got) = PlainBlockDelta::scan(&doc) {
                    let want = serde_json::from_str::<Obj<PlainBlockDelta>>(&doc).map(|Obj(e)| e);
                    prop_assert_eq!(Some(got), want.ok(), "event {}", doc);
                }
            }
        }
    }

    /// The scanner reads most generated deltas serde reads, so the property
    /// above is not vacuous; and the common text delta is its.
    #[test]
    fn the_scanner_reads_the_common_deltas() {
        use proptest::strategy::ValueTree;
        use proptest::test_runner::TestRunner;
        let mut runner = TestRunner::deterministic();
        let (mut scanned, mut serde_only) = (0, 0);
        for _ in 0..2_000 {
            let e = block_delta().new_tree(&mut runner).unwrap().current();
            match (
                PlainBlockDelta::scan(&e),
                serde_json::from_str::<Obj<PlainBlockDelta>>(&e),
            ) {
                (Some(_), _) => scanned += 1,
                (None, Ok(_)) => serde_only += 1,
                (None, Err(_)) => {}
            }
        }
        assert!(
            scanned > 300 && serde_only < scanned / 4,
            "{scanned} {serde_only}"
        );
        let c = r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"a\nb \"c\" \ud83d\ude00"}}"#;
        let got = PlainBlockDelta::scan(c).expect("scanned");
        assert_eq!(
            Some(got),
            serde_json::from_str::<Obj<PlainBlockDelta>>(c)
                .ok()
                .map(|Obj(e)| e)
        );
    }

    /// The documented difference: a field hale does not read, holding a
    /// number out of range, a lone surrogate or nesting deeper than
    /// serde_json's limit, makes the `Value` path call the event malformed;
    /// the plain path delivers its text.
    #[test]
    fn an_unread_field_out_of_range_does_not_lose_the_text() {
        let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        for odd in ["1e400", "\"\\ud800\"", &deep] {
            for data in [
                format!(
                    r#"{{"type":"content_block_delta","x":{odd},"index":0,"delta":{{"type":"text_delta","text":"hi"}}}}"#
                ),
                format!(
                    r#"{{"type":"content_block_delta","index":0,"delta":{{"type":"text_delta","x":{odd},"text":"hi"}}}}"#
                ),
            ] {
                assert!(decode_by_tree(&mut StreamDecoder::new(), None, &data).is_err());
                assert_eq!(
                    StreamDecoder::new().decode(None, &data).unwrap(),
                    vec![StreamEvent::TextDelta("hi".into())]
                );
            }
        }
    }

    /// The point of [`Str`]: a string without escapes is borrowed from the
    /// data line, one with escapes is unescaped into its own.
    #[test]
    fn a_plain_string_is_borrowed_unless_escaped() {
        let data = r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello"}}"#;
        let Obj(e) = serde_json::from_str::<Obj<PlainBlockDelta>>(data).unwrap();
        let Obj(d) = e.delta.unwrap();
        assert!(matches!(d.text.unwrap().0, Cow::Borrowed("Hello")));
        let data = r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"a\nb"}}"#;
        let Obj(e) = serde_json::from_str::<Obj<PlainBlockDelta>>(data).unwrap();
        let Obj(d) = e.delta.unwrap();
        assert!(matches!(d.text.unwrap().0, Cow::Owned(s) if s == "a\nb"));
    }

    /// A tool call's arguments on the plain path go to the latest tool_use
    /// block at that index; a piece for a block that is no tool_use block
    /// is the `Value` path's error.
    #[test]
    fn input_json_deltas_follow_the_tool_use_blocks() {
        let mut d = StreamDecoder::new();
        let piece = r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"a\":"}}"#;
        assert_eq!(
            d.decode(None, piece).unwrap_err(),
            err(
                "index",
                "input_json_delta for block 1, which is not a tool_use block"
            )
        );
        for (i, id) in [(1, "toolu_a"), (2, "toolu_b"), (1, "toolu_c")] {
            let start = format!(
                r#"{{"type":"content_block_start","index":{i},"content_block":{{"type":"tool_use","id":"{id}","name":"f","input":{{}}}}}}"#
            );
            d.decode(Some("content_block_start"), &start).unwrap();
        }
        assert_eq!(
            d.decode(Some("content_block_delta"), piece).unwrap(),
            vec![StreamEvent::ToolCallDelta {
                index: 2,
                arguments: "{\"a\":".into()
            }]
        );
    }
}
