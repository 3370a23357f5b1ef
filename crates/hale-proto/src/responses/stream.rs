//! Responses streams: decoding a provider's `/responses` event stream into
//! canonical [`StreamEvent`]s, and encoding canonical events as such a
//! stream for a caller (every event with its `sequence_number`, one output
//! item per output, the full `response` at the end, no `[DONE]`).

use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::DIALECT;
use super::response::{
    call_item, item_id, message_item, parse_status, parse_usage, response_id, response_object,
    unix_now,
};
use crate::canonical::{Obj, ProtoError, StopReason, Str, StreamEvent, Usage};
use crate::json::{as_object, err, field, kind_of, opt_str, req_str};
use crate::sse::SseFrame;

/// A `response.output_text.delta` event — the event a stream sends per
/// token — read straight from the data line, strings borrowed ([`Str`]),
/// without a `Value` tree (as the other dialects' decoders read theirs).
///
/// [`StreamDecoder::decode`] takes this path only once the stream started,
/// when the SSE event is not `error` and the event's type (its `type`, or
/// the SSE event name when `type` is absent or `null`) is
/// `response.output_text.delta` with a string `delta`. Anything else — a
/// field of another type, a duplicate field, another event — goes through
/// the `Value` path, which says what is wrong. The one difference: fields
/// hale does not read are skipped here without checking a number's range
/// or an escape's surrogates (test `a_plain_delta_decodes_as_the_value_path_does`).
#[derive(Deserialize)]
struct PlainTextDelta<'a> {
    #[serde(rename = "type", borrow)]
    kind: Option<Str<'a>>,
    #[serde(borrow)]
    delta: Option<Str<'a>>,
}

/// What an upstream output item is, by its `output_index`.
#[derive(Debug, Clone, PartialEq)]
enum Slot {
    /// A message: its text deltas are the answer's text.
    Text,
    /// A function or custom tool call, with its canonical index.
    Tool {
        index: u32,
        custom: bool,
        /// Argument pieces were sent (so `.done` repeats nothing).
        sent: bool,
        /// The custom call's closing `"}` was sent.
        closed: bool,
    },
    /// An item hale does not model, relayed as sent.
    Opaque,
}

/// The code and message of an `error` event or a failed response's `error`.
fn code_and_message(o: &Map<String, Value>) -> (String, String) {
    let inner = o.get("error").and_then(Value::as_object);
    let pick = |k: &str| {
        o.get(k)
            .and_then(Value::as_str)
            .or_else(|| inner.and_then(|e| e.get(k)).and_then(Value::as_str))
            .filter(|s| !s.is_empty())
            .map(str::to_string)
    };
    let code = pick("code")
        .or_else(|| {
            inner
                .and_then(|e| e.get("type"))
                .and_then(Value::as_str)
                .map(str::to_string)
        })
        .unwrap_or_default();
    let message = pick("message")
        .or_else(|| o.get("error").and_then(Value::as_str).map(str::to_string))
        .unwrap_or_default();
    (code, message)
}

fn joined(code: &str, message: &str) -> String {
    match (code.is_empty(), message.is_empty()) {
        (true, true) => "the response failed".to_string(),
        (true, false) => message.to_string(),
        (false, true) => code.to_string(),
        (false, false) => format!("{code}: {message}"),
    }
}

/// For an upstream `error` or `response.failed` event: its error in
/// OpenAI's shape, `{"error":{"message","type","param","code"}}`, which
/// hale's classifier reads (the `response.failed` event nests it under
/// `response.error`, where the classifier does not look). `None` for any
/// other event.
pub fn error_body(event: Option<&str>, data: &str) -> Option<String> {
    let v: Value = serde_json::from_str(data.trim()).ok()?;
    let o = v.as_object()?;
    let ty = o.get("type").and_then(Value::as_str).or(event)?;
    let (code, message) = match ty {
        "error" => code_and_message(o),
        "response.failed" => code_and_message(o.get("response")?.as_object()?),
        _ => return None,
    };
    let code = (!code.is_empty()).then_some(code);
    Some(
        json!({"error": {"message": message, "type": code.as_deref().unwrap_or("server_error"), "param": null, "code": code}})
            .to_string(),
    )
}

/// A custom tool call's input piece as a piece of the canonical arguments
/// `{"input": "…"}` (JSON-escaped, without quotes).
fn escaped(piece: &str) -> String {
    let s = serde_json::to_string(piece).unwrap_or_default();
    s.get(1..s.len().saturating_sub(1))
        .unwrap_or_default()
        .to_string()
}

/// The opening of a custom call's canonical arguments.
const CUSTOM_OPEN: &str = "{\"input\":\"";
/// Their closing.
const CUSTOM_CLOSE: &str = "\"}";

/// Decodes a Responses upstream event stream into canonical events.
///
/// Output items are keyed by their `output_index`. A message's text deltas
/// (and refusal deltas) are text; a `function_call` item is a tool call,
/// its argument deltas the call's arguments (taken from `.done` or the
/// finished item when no delta came); a `custom_tool_call`'s free-form
/// input is streamed as the canonical arguments `{"input": "…"}`. Any other
/// item (reasoning, a hosted tool's call) is relayed as sent:
/// [`StreamEvent::OpaqueStart`] with the item, then every event of that
/// item, `response.output_item.done` included, as
/// [`StreamEvent::OpaqueDelta`]. `response.completed` and
/// `response.incomplete` end the stream (`Finish`, `Usage`, `Done`);
/// `response.failed` and `error` are `Err` with the provider's code and
/// message ([`error_body`] for the classifier).
#[derive(Debug, Default)]
pub struct StreamDecoder {
    started: bool,
    slots: Vec<(u64, Slot)>,
    next_tool: u32,
}

impl StreamDecoder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Decodes one SSE event. Malformed data, an `error` event and
    /// `response.failed` are `Err`.
    pub fn decode(
        &mut self,
        event: Option<&str>,
        data: &str,
    ) -> Result<Vec<StreamEvent>, ProtoError> {
        let data = data.trim();
        if data.is_empty() || data == "[DONE]" {
            return Ok(Vec::new());
        }
        if self.started
            && event != Some("error")
            && let Ok(Obj(e)) = serde_json::from_str::<Obj<PlainTextDelta>>(data)
            && e.kind.as_ref().map(|Str(k)| k.as_ref()).or(event)
                == Some("response.output_text.delta")
            && let Some(Str(d)) = e.delta
        {
            return Ok(if d.is_empty() {
                Vec::new()
            } else {
                vec![StreamEvent::TextDelta(d.into_owned())]
            });
        }
        self.decode_tree(event, data)
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
        let mut out = Vec::new();
        match ty {
            "error" => {
                let (code, message) = code_and_message(obj);
                return Err(err("error", joined(&code, &message)));
            }
            "response.failed" => {
                let r = self.response(obj)?;
                let (code, message) = code_and_message(r);
                return Err(err("response.error", joined(&code, &message)));
            }
            "response.created" | "response.in_progress" | "response.queued" => {
                let r = self.response(obj)?;
                self.start(Some(r), &mut out)?;
            }
            "response.output_item.added" => {
                self.start(None, &mut out)?;
                let at = self.output_index(obj)?;
                let item = item_of(obj)?;
                self.added(at, item, &mut out)?;
            }
            "response.output_item.done" => {
                self.start(None, &mut out)?;
                let at = self.output_index(obj)?;
                let item = item_of(obj)?;
                if self.slot(at).is_none() {
                    self.added(at, item, &mut out)?;
                }
                self.done(at, item, obj, &mut out)?;
            }
            "response.output_text.delta" | "response.refusal.delta" => {
                self.start(None, &mut out)?;
                let d = req_str(obj, "delta", "")?;
                if !d.is_empty() {
                    out.push(StreamEvent::TextDelta(d.to_string()));
                }
            }
            "response.function_call_arguments.delta" | "response.custom_tool_call_input.delta" => {
                let at = self.output_index(obj)?;
                let d = req_str(obj, "delta", "")?;
                let Some(Slot::Tool {
                    index,
                    custom,
                    sent,
                    ..
                }) = self.slot_mut(at)
                else {
                    return Err(err(
                        "output_index",
                        format!("{ty} for output {at}, which is not a tool call"),
                    ));
                };
                *sent = true;
                if !d.is_empty() {
                    let arguments = if *custom { escaped(d) } else { d.to_string() };
                    out.push(StreamEvent::ToolCallDelta {
                        index: *index,
                        arguments,
                    });
                }
            }
            "response.function_call_arguments.done" => {
                let at = self.output_index(obj)?;
                if let Some(Slot::Tool {
                    index, sent: false, ..
                }) = self.slot_mut(at)
                {
                    let index = *index;
                    if let Some(a) = opt_str(obj, "arguments", "")?
                        && !a.is_empty()
                    {
                        out.push(StreamEvent::ToolCallDelta {
                            index,
                            arguments: a.to_string(),
                        });
                    }
                    self.mark_sent(at);
                }
            }
            "response.completed" | "response.incomplete" => {
                let r = self.response(obj)?;
                self.start(Some(r), &mut out)?;
                let status = r.get("status").and_then(Value::as_str).unwrap_or(
                    if ty == "response.completed" {
                        "completed"
                    } else {
                        "incomplete"
                    },
                );
                let reason = field(r, "incomplete_details")
                    .and_then(Value::as_object)
                    .and_then(|d| d.get("reason"))
                    .and_then(Value::as_str);
                let stop = parse_status(status, reason, self.next_tool > 0).unwrap_or(
                    if ty == "response.completed" {
                        StopReason::EndTurn
                    } else {
                        StopReason::MaxTokens
                    },
                );
                out.push(StreamEvent::Finish(stop));
                if let Some(u) = field(r, "usage").and_then(Value::as_object) {
                    out.push(StreamEvent::Usage(parse_usage(Some(u))));
                }
                out.push(StreamEvent::Done);
            }
            // Every other event of a relayed item (reasoning summaries, a
            // hosted tool's progress), as sent; other events carry nothing
            // hale models (content parts, text `.done`, annotations).
            _ => {
                if let Some(at) = obj.get("output_index").and_then(Value::as_u64)
                    && self.slot(at) == Some(&Slot::Opaque)
                {
                    out.push(StreamEvent::OpaqueDelta {
                        dialect: DIALECT,
                        delta: v.clone(),
                    });
                }
            }
        }
        Ok(out)
    }

    fn response<'a>(
        &self,
        obj: &'a Map<String, Value>,
    ) -> Result<&'a Map<String, Value>, ProtoError> {
        match field(obj, "response") {
            None => Err(err("response", "missing `response`")),
            Some(r) => as_object(r, "response"),
        }
    }

    fn start(
        &mut self,
        r: Option<&Map<String, Value>>,
        out: &mut Vec<StreamEvent>,
    ) -> Result<(), ProtoError> {
        if self.started {
            return Ok(());
        }
        self.started = true;
        let (id, model) = match r {
            Some(r) => (
                opt_str(r, "id", "response")?.unwrap_or_default(),
                opt_str(r, "model", "response")?.unwrap_or_default(),
            ),
            None => ("", ""),
        };
        out.push(StreamEvent::Start {
            id: id.to_string(),
            model: model.to_string(),
        });
        Ok(())
    }

    fn output_index(&self, obj: &Map<String, Value>) -> Result<u64, ProtoError> {
        match field(obj, "output_index") {
            None => Err(err("output_index", "missing `output_index`")),
            Some(v) => v.as_u64().ok_or_else(|| {
                err(
                    "output_index",
                    format!("must be a non-negative integer, got {}", kind_of(v)),
                )
            }),
        }
    }

    fn slot(&self, at: u64) -> Option<&Slot> {
        self.slots
            .iter()
            .rev()
            .find(|(i, _)| *i == at)
            .map(|(_, s)| s)
    }

    fn slot_mut(&mut self, at: u64) -> Option<&mut Slot> {
        self.slots
            .iter_mut()
            .rev()
            .find(|(i, _)| *i == at)
            .map(|(_, s)| s)
    }

    fn mark_sent(&mut self, at: u64) {
        if let Some(Slot::Tool { sent, .. }) = self.slot_mut(at) {
            *sent = true;
        }
    }

    /// An item opened at output `at`.
    fn added(
        &mut self,
        at: u64,
        item: &Map<String, Value>,
        out: &mut Vec<StreamEvent>,
    ) -> Result<(), ProtoError> {
        let slot = match item.get("type").and_then(Value::as_str) {
            Some("message") => Slot::Text,
            Some(t @ ("function_call" | "custom_tool_call")) => {
                let custom = t == "custom_tool_call";
                let index = self.next_tool;
                self.next_tool = self.next_tool.saturating_add(1);
                out.push(StreamEvent::ToolCallStart {
                    index,
                    id: req_str(item, "call_id", "item")?.to_string(),
                    name: req_str(item, "name", "item")?.to_string(),
                });
                let mut sent = false;
                if custom {
                    out.push(StreamEvent::ToolCallDelta {
                        index,
                        arguments: CUSTOM_OPEN.to_string(),
                    });
                    if let Some(i) = opt_str(item, "input", "item")?
                        && !i.is_empty()
                    {
                        sent = true;
                        out.push(StreamEvent::ToolCallDelta {
                            index,
                            arguments: escaped(i),
                        });
                    }
                } else if let Some(a) = opt_str(item, "arguments", "item")?
                    && !a.is_empty()
                {
                    sent = true;
                    out.push(StreamEvent::ToolCallDelta {
                        index,
                        arguments: a.to_string(),
                    });
                }
                Slot::Tool {
                    index,
                    custom,
                    sent,
                    closed: false,
                }
            }
            Some(_) | None => {
                out.push(StreamEvent::OpaqueStart {
                    dialect: DIALECT,
                    block: Value::Object(item.clone()),
                });
                Slot::Opaque
            }
        };
        self.slots.retain(|(i, _)| *i != at);
        self.slots.push((at, slot));
        Ok(())
    }

    /// The item at output `at` finished as `item`.
    fn done(
        &mut self,
        at: u64,
        item: &Map<String, Value>,
        event: &Map<String, Value>,
        out: &mut Vec<StreamEvent>,
    ) -> Result<(), ProtoError> {
        let Some(slot) = self.slot_mut(at) else {
            return Ok(());
        };
        match slot {
            Slot::Text => {}
            Slot::Tool {
                index,
                custom,
                sent,
                closed,
            } => {
                let index = *index;
                if *custom {
                    if !*sent
                        && let Some(i) = item.get("input").and_then(Value::as_str)
                        && !i.is_empty()
                    {
                        out.push(StreamEvent::ToolCallDelta {
                            index,
                            arguments: escaped(i),
                        });
                    }
                    if !*closed {
                        out.push(StreamEvent::ToolCallDelta {
                            index,
                            arguments: CUSTOM_CLOSE.to_string(),
                        });
                    }
                    *closed = true;
                } else if !*sent
                    && let Some(a) = item.get("arguments").and_then(Value::as_str)
                    && !a.is_empty()
                {
                    out.push(StreamEvent::ToolCallDelta {
                        index,
                        arguments: a.to_string(),
                    });
                }
                *sent = true;
            }
            Slot::Opaque => out.push(StreamEvent::OpaqueDelta {
                dialect: DIALECT,
                delta: Value::Object(event.clone()),
            }),
        }
        Ok(())
    }
}

fn item_of(obj: &Map<String, Value>) -> Result<&Map<String, Value>, ProtoError> {
    match field(obj, "item") {
        None => Err(err("item", "missing `item`")),
        Some(i) => as_object(i, "item"),
    }
}

/// The event names an encoder writes (an SSE event name is static); an
/// opaque item's event of another type is written without a name (its
/// data still says its `type`).
const EVENT_NAMES: &[&str] = &[
    "response.created",
    "response.in_progress",
    "response.output_item.added",
    "response.output_item.done",
    "response.content_part.added",
    "response.content_part.done",
    "response.output_text.delta",
    "response.output_text.done",
    "response.function_call_arguments.delta",
    "response.function_call_arguments.done",
    "response.custom_tool_call_input.delta",
    "response.custom_tool_call_input.done",
    "response.reasoning_summary_part.added",
    "response.reasoning_summary_part.done",
    "response.reasoning_summary_text.delta",
    "response.reasoning_summary_text.done",
    "response.reasoning_text.delta",
    "response.reasoning_text.done",
    "response.web_search_call.in_progress",
    "response.web_search_call.searching",
    "response.web_search_call.completed",
    "response.file_search_call.in_progress",
    "response.file_search_call.searching",
    "response.file_search_call.completed",
    "response.code_interpreter_call.in_progress",
    "response.code_interpreter_call.interpreting",
    "response.code_interpreter_call.completed",
    "response.image_generation_call.in_progress",
    "response.image_generation_call.generating",
    "response.image_generation_call.partial_image",
    "response.image_generation_call.completed",
    "response.completed",
    "response.incomplete",
    "response.failed",
    "error",
];

fn event_name(ty: &str) -> Option<&'static str> {
    EVENT_NAMES.iter().find(|n| **n == ty).copied()
}

/// The output item an encoder has open.
#[derive(Debug)]
enum Open {
    Message {
        text: String,
    },
    Tool {
        index: u32,
        call_id: String,
        name: String,
        arguments: String,
        custom: bool,
    },
    Opaque {
        item: Value,
    },
}

/// Encodes canonical events as a Responses event stream.
///
/// The sequence is always `response.created`, `response.in_progress`, then
/// the output items — each `response.output_item.added`, its content
/// (`content_part.added`, `output_text.delta`s, `output_text.done`,
/// `content_part.done` for a message; argument deltas and `.done` for a
/// function call), `response.output_item.done` — one at a time, then
/// `response.completed` (or `response.incomplete` for a length or filter
/// stop) with the whole response and its usage; every event carries the
/// next `sequence_number` from 0, and `output_index`/`item_id` name the
/// item open. Whatever order the events came in: a missing `Start` is
/// supplied, a second one ignored; text after a tool call opens a new
/// message item; content after `Finish` is dropped, as is an argument
/// piece for a call no longer open (upstreams send calls one after the
/// other); a `Done` without `Finish` reads `completed`. An opaque item of
/// this dialect (reasoning with its `encrypted_content`, a hosted tool's
/// call) is relayed with its events renumbered; other dialects' are left
/// out. `include_usage` is accepted for symmetry: the last event always
/// carries usage. A custom tool's call (named by
/// [`StreamEncoder::with_custom_tools`]) is a `custom_tool_call` item, its
/// input sent whole when the call closes.
#[derive(Debug)]
pub struct StreamEncoder {
    id: String,
    model: String,
    created_at: u64,
    custom: Vec<String>,
    seq: u64,
    started: bool,
    closed: bool,
    any_tool: bool,
    finish: Option<StopReason>,
    usage: Option<Usage>,
    /// The finished output items.
    output: Vec<Value>,
    /// The item open (at output index `output.len()`) and its id.
    open: Option<(Open, String)>,
}

impl StreamEncoder {
    /// An encoder for a response with this `id` (given the `resp_` prefix
    /// when it lacks it) and `model`, `created_at` now.
    pub fn new(id: &str, model: &str, _include_usage: bool) -> Self {
        Self {
            id: if id.is_empty() {
                String::new()
            } else {
                response_id(id)
            },
            model: model.to_string(),
            created_at: unix_now(),
            custom: Vec::new(),
            seq: 0,
            started: false,
            closed: false,
            any_tool: false,
            finish: None,
            usage: None,
            output: Vec::new(),
            open: None,
        }
    }

    /// Sets `created_at` (deterministic output in tests).
    pub fn with_created(mut self, created_at: u64) -> Self {
        self.created_at = created_at;
        self
    }

    /// Names the request's custom (free-form) tools, whose calls are
    /// `custom_tool_call` items ([`super::custom_tools`]).
    pub fn with_custom_tools(mut self, custom: Vec<String>) -> Self {
        self.custom = custom;
        self
    }

    fn frame(&mut self, ty: &'static str, mut data: Map<String, Value>) -> SseFrame {
        data.insert("type".into(), json!(ty));
        data.insert("sequence_number".into(), json!(self.seq));
        self.seq = self.seq.saturating_add(1);
        SseFrame {
            event: Some(ty),
            data: Value::Object(data).to_string(),
        }
    }

    fn emit(&mut self, out: &mut Vec<SseFrame>, ty: &'static str, data: Value) {
        let data = match data {
            Value::Object(m) => m,
            other => {
                let mut m = Map::new();
                m.insert("data".into(), other);
                m
            }
        };
        let f = self.frame(ty, data);
        out.push(f);
    }

    fn snapshot(&self, reason: Option<StopReason>, usage: Option<Usage>) -> Value {
        response_object(
            &self.id,
            &self.model,
            self.created_at,
            self.output.clone(),
            reason,
            usage,
        )
    }

    fn ensure_started(&mut self, out: &mut Vec<SseFrame>) {
        if self.started {
            return;
        }
        self.started = true;
        if self.id.is_empty() {
            self.id = response_id(&format!("hale_{}", self.created_at));
        }
        let r = self.snapshot(None, None);
        self.emit(out, "response.created", json!({"response": r}));
        self.emit(out, "response.in_progress", json!({"response": r}));
    }

    fn output_index(&self) -> usize {
        self.output.len()
    }

    fn open_item(&mut self, open: Open, out: &mut Vec<SseFrame>) {
        self.close_item(out);
        let n = self.output_index();
        let (id, item) = match &open {
            Open::Message { .. } => {
                let id = item_id("msg", &self.id, n);
                let mut item = message_item(&id, "", "in_progress");
                item["content"] = json!([]);
                (id, item)
            }
            Open::Tool {
                call_id,
                name,
                custom,
                ..
            } => {
                let id = item_id(if *custom { "ctc" } else { "fc" }, &self.id, n);
                let item = call_item(&id, call_id, name, "", *custom, "in_progress");
                (id, item)
            }
            Open::Opaque { item } => {
                let id = item
                    .get("id")
                    .and_then(Value::as_str)
                    .map_or_else(|| item_id("item", &self.id, n), str::to_string);
                let mut item = item.clone();
                if let Some(o) = item.as_object_mut() {
                    o.insert("id".into(), json!(id));
                }
                (id, item)
            }
        };
        self.emit(
            out,
            "response.output_item.added",
            json!({"output_index": n, "item": item}),
        );
        if matches!(open, Open::Message { .. }) {
            self.emit(
                out,
                "response.content_part.added",
                json!({"item_id": id, "output_index": n, "content_index": 0,
                       "part": {"type": "output_text", "text": "", "annotations": [], "logprobs": []}}),
            );
        }
        let open = match open {
            Open::Opaque { item } => {
                let mut item = item;
                if let Some(o) = item.as_object_mut() {
                    o.insert("id".into(), json!(id));
                }
                Open::Opaque { item }
            }
            other => other,
        };
        self.open = Some((open, id));
    }

    fn close_item(&mut self, out: &mut Vec<SseFrame>) {
        let Some((open, id)) = self.open.take() else {
            return;
        };
        let n = self.output_index();
        let item = match open {
            Open::Message { text } => {
                self.emit(
                    out,
                    "response.output_text.done",
                    json!({"item_id": id, "output_index": n, "content_index": 0, "text": text, "logprobs": []}),
                );
                self.emit(
                    out,
                    "response.content_part.done",
                    json!({"item_id": id, "output_index": n, "content_index": 0,
                           "part": {"type": "output_text", "text": text, "annotations": [], "logprobs": []}}),
                );
                message_item(&id, &text, "completed")
            }
            Open::Tool {
                index: _,
                call_id,
                name,
                arguments,
                custom,
            } => {
                if custom {
                    let input = super::request::arguments_to_custom_input(&arguments);
                    if !input.is_empty() {
                        self.emit(
                            out,
                            "response.custom_tool_call_input.delta",
                            json!({"item_id": id, "output_index": n, "delta": input}),
                        );
                    }
                    self.emit(
                        out,
                        "response.custom_tool_call_input.done",
                        json!({"item_id": id, "output_index": n, "input": input}),
                    );
                } else {
                    self.emit(
                        out,
                        "response.function_call_arguments.done",
                        json!({"item_id": id, "output_index": n, "name": name, "arguments": arguments}),
                    );
                }
                call_item(&id, &call_id, &name, &arguments, custom, "completed")
            }
            Open::Opaque { item } => item,
        };
        self.emit(
            out,
            "response.output_item.done",
            json!({"output_index": n, "item": item}),
        );
        self.output.push(item);
    }

    pub fn encode(&mut self, ev: &StreamEvent) -> Vec<SseFrame> {
        let mut out = Vec::new();
        if self.closed {
            return out;
        }
        match ev {
            StreamEvent::Start { id, model } => {
                if self.id.is_empty() && !id.is_empty() {
                    self.id = response_id(id);
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
                if !matches!(self.open, Some((Open::Message { .. }, _))) {
                    self.open_item(
                        Open::Message {
                            text: String::new(),
                        },
                        &mut out,
                    );
                }
                let n = self.output_index();
                if let Some((Open::Message { text: all }, id)) = &mut self.open {
                    all.push_str(text);
                    let id = id.clone();
                    self.emit(
                        &mut out,
                        "response.output_text.delta",
                        json!({"item_id": id, "output_index": n, "content_index": 0, "delta": text, "logprobs": []}),
                    );
                }
            }
            StreamEvent::ToolCallStart { index, id, name } => {
                self.ensure_started(&mut out);
                if self.finish.is_some() {
                    return out;
                }
                self.any_tool = true;
                let custom = self.custom.iter().any(|c| c == name);
                self.open_item(
                    Open::Tool {
                        index: *index,
                        call_id: id.clone(),
                        name: name.clone(),
                        arguments: String::new(),
                        custom,
                    },
                    &mut out,
                );
            }
            StreamEvent::ToolCallDelta { index, arguments } => {
                self.ensure_started(&mut out);
                if arguments.is_empty() || self.finish.is_some() {
                    return out;
                }
                let n = self.output_index();
                if let Some((
                    Open::Tool {
                        index: open,
                        arguments: all,
                        custom,
                        ..
                    },
                    id,
                )) = &mut self.open
                    && *open == *index
                {
                    all.push_str(arguments);
                    if !*custom {
                        let id = id.clone();
                        self.emit(
                            &mut out,
                            "response.function_call_arguments.delta",
                            json!({"item_id": id, "output_index": n, "delta": arguments}),
                        );
                    }
                }
            }
            StreamEvent::OpaqueStart { dialect, block } => {
                if *dialect != DIALECT {
                    return out;
                }
                self.ensure_started(&mut out);
                if self.finish.is_some() || !block.is_object() {
                    return out;
                }
                self.open_item(
                    Open::Opaque {
                        item: block.clone(),
                    },
                    &mut out,
                );
            }
            StreamEvent::OpaqueDelta { dialect, delta } => {
                if *dialect != DIALECT || self.finish.is_some() {
                    return out;
                }
                let n = self.output_index();
                let Some((Open::Opaque { item }, id)) = &mut self.open else {
                    return out;
                };
                let Some(d) = delta.as_object() else {
                    return out;
                };
                let ty = d.get("type").and_then(Value::as_str).unwrap_or("");
                if ty == "response.output_item.done" {
                    // The finished item (a reasoning item's summary and
                    // encrypted content): it replaces the one opened.
                    if let Some(Value::Object(done)) = d.get("item") {
                        let mut done = done.clone();
                        done.insert("id".into(), json!(id));
                        *item = Value::Object(done);
                    }
                    self.close_item(&mut out);
                    return out;
                }
                let mut d = d.clone();
                d.insert("output_index".into(), json!(n));
                if d.contains_key("item_id") {
                    d.insert("item_id".into(), json!(id));
                }
                d.remove("sequence_number");
                let name = event_name(ty);
                d.insert("sequence_number".into(), json!(self.seq));
                self.seq = self.seq.saturating_add(1);
                out.push(SseFrame {
                    event: name,
                    data: Value::Object(d).to_string(),
                });
            }
            StreamEvent::Finish(reason) => {
                self.ensure_started(&mut out);
                if self.finish.is_none() {
                    self.finish = Some(*reason);
                }
                self.close_item(&mut out);
            }
            StreamEvent::Usage(u) => self.usage = Some(*u),
            StreamEvent::Done => {
                self.ensure_started(&mut out);
                self.close_item(&mut out);
                let reason = self.finish.unwrap_or(if self.any_tool {
                    StopReason::ToolUse
                } else {
                    StopReason::EndTurn
                });
                let r = self.snapshot(Some(reason), Some(self.usage.unwrap_or_default()));
                let ty = if r["status"] == "incomplete" {
                    "response.incomplete"
                } else {
                    "response.completed"
                };
                self.emit(&mut out, ty, json!({"response": r}));
                self.closed = true;
            }
        }
        out
    }

    /// An in-band error for a stream that cannot be completed: an `error`
    /// event (`code`, `message`), then `response.failed` with the output
    /// finished so far and the same error, and no `response.completed`, so
    /// the answer is never presented as complete. The encoder emits
    /// nothing afterwards.
    pub fn error(&mut self, kind: &str, message: &str) -> Vec<SseFrame> {
        let mut out = Vec::new();
        if self.closed {
            return out;
        }
        self.ensure_started(&mut out);
        self.closed = true;
        self.emit(
            &mut out,
            "error",
            json!({"code": kind, "message": message, "param": null}),
        );
        let mut r = self.snapshot(None, self.usage);
        r["status"] = json!("failed");
        r["error"] = json!({"code": kind, "message": message});
        self.emit(&mut out, "response.failed", json!({"response": r}));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The SSE events of a wire stream (name, data), split as a client does.
    fn events_of(wire: &str) -> Vec<(Option<String>, String)> {
        let mut out = Vec::new();
        for block in wire.split("\n\n") {
            let mut name = None;
            let mut data = Vec::new();
            for line in block.lines() {
                if let Some(n) = line.strip_prefix("event: ") {
                    name = Some(n.to_string());
                } else if let Some(d) = line.strip_prefix("data: ") {
                    data.push(d);
                }
            }
            if !data.is_empty() {
                out.push((name, data.join("\n")));
            }
        }
        out
    }

    fn encode_all(enc: &mut StreamEncoder, events: &[StreamEvent]) -> String {
        let mut wire = String::new();
        for ev in events {
            for f in enc.encode(ev) {
                wire.push_str(&f.to_wire());
            }
        }
        wire
    }

    fn decode_all(wire: &str) -> Result<Vec<StreamEvent>, ProtoError> {
        let mut d = StreamDecoder::new();
        let mut out = Vec::new();
        for (name, data) in events_of(wire) {
            out.extend(d.decode(name.as_deref(), &data)?);
        }
        Ok(out)
    }

    /// What a stream says, whatever its chunking: the segments of the
    /// answer (text joined, each tool call with its arguments joined, each
    /// opaque item), the finish and the usage.
    #[derive(Debug, PartialEq, Clone)]
    enum Seg {
        Text(String),
        Tool(String, String, String),
        Opaque(Value),
    }

    fn segments(events: &[StreamEvent]) -> (Vec<Seg>, Option<StopReason>, Option<Usage>) {
        let mut segs: Vec<Seg> = Vec::new();
        let mut tools: Vec<(u32, usize)> = Vec::new();
        let mut finish = None;
        let mut usage = None;
        for ev in events {
            match ev {
                StreamEvent::TextDelta(t) if finish.is_none() && !t.is_empty() => {
                    match segs.last_mut() {
                        Some(Seg::Text(s)) => s.push_str(t),
                        _ => segs.push(Seg::Text(t.clone())),
                    }
                }
                StreamEvent::ToolCallStart { index, id, name } if finish.is_none() => {
                    tools.push((*index, segs.len()));
                    segs.push(Seg::Tool(id.clone(), name.clone(), String::new()));
                }
                StreamEvent::ToolCallDelta { index, arguments } if finish.is_none() => {
                    // Only to the call open (the last segment).
                    if let Some(&(_, at)) = tools.iter().rev().find(|(i, _)| i == index)
                        && at + 1 == segs.len()
                        && let Some(Seg::Tool(_, _, a)) = segs.get_mut(at)
                    {
                        a.push_str(arguments);
                    }
                }
                StreamEvent::OpaqueStart { block, .. } if finish.is_none() => {
                    segs.push(Seg::Opaque(block.get("id").cloned().unwrap_or(Value::Null)))
                }
                StreamEvent::Finish(r) => {
                    finish.get_or_insert(*r);
                }
                StreamEvent::Usage(u) => usage = Some(*u),
                _ => {}
            }
        }
        (segs, finish, usage)
    }

    /// Checks the wire of an encoder: continuous sequence numbers from 0,
    /// created and in_progress first, each item added then done at the
    /// next output index with its events naming it, one terminal event
    /// last whose output is the items done. Returns the terminal type.
    fn check_well_formed(wire: &str) -> String {
        let evs = events_of(wire);
        assert!(evs.len() >= 3, "{wire}");
        let mut open: Option<(u64, String)> = None;
        let mut done_items: Vec<Value> = Vec::new();
        let mut terminal = None;
        for (i, (name, data)) in evs.iter().enumerate() {
            let v: Value = serde_json::from_str(data).unwrap();
            assert_eq!(v["sequence_number"], json!(i), "{wire}");
            let ty = v["type"].as_str().unwrap().to_string();
            if let Some(n) = name {
                assert_eq!(n, &ty);
            }
            assert!(terminal.is_none(), "an event after the end: {wire}");
            match (i, ty.as_str()) {
                (0, t) => assert_eq!(t, "response.created"),
                (1, t) => assert_eq!(t, "response.in_progress"),
                (_, "response.output_item.added") => {
                    assert!(open.is_none(), "two items open: {wire}");
                    assert_eq!(v["output_index"], json!(done_items.len()));
                    open = Some((
                        done_items.len() as u64,
                        v["item"]["id"].as_str().unwrap().to_string(),
                    ));
                }
                (_, "response.output_item.done") => {
                    let (n, id) = open.take().expect("done without added");
                    assert_eq!(v["output_index"], json!(n));
                    assert_eq!(v["item"]["id"], json!(id));
                    done_items.push(v["item"].clone());
                }
                (_, "response.completed" | "response.incomplete" | "response.failed") => {
                    if ty != "response.failed" {
                        assert!(open.is_none(), "an item left open: {wire}");
                        assert_eq!(v["response"]["output"], json!(done_items));
                        assert!(v["response"]["usage"].is_object());
                    }
                    terminal = Some(ty.clone());
                }
                (_, "error") => {}
                _ => {
                    let (n, id) = open.clone().expect("an item event outside an item");
                    assert_eq!(v["output_index"], json!(n), "{wire}");
                    if let Some(item) = v.get("item_id") {
                        assert_eq!(item, &json!(id));
                    }
                }
            }
        }
        assert!(!wire.contains("[DONE]"));
        terminal.expect("no terminal event")
    }

    fn start() -> StreamEvent {
        StreamEvent::Start {
            id: "resp_x".into(),
            model: "m".into(),
        }
    }

    #[test]
    fn an_encoded_answer_with_text_and_a_call_is_well_formed_and_decodes_back() {
        let events = vec![
            start(),
            StreamEvent::OpaqueStart {
                dialect: DIALECT,
                block: json!({"id": "rs_1", "type": "reasoning", "summary": []}),
            },
            StreamEvent::OpaqueDelta {
                dialect: DIALECT,
                delta: json!({"type": "response.reasoning_summary_text.delta", "item_id": "rs_1", "output_index": 0, "summary_index": 0, "delta": "Think", "sequence_number": 9}),
            },
            StreamEvent::OpaqueDelta {
                dialect: DIALECT,
                delta: json!({"type": "response.output_item.done", "output_index": 0, "item": {"id": "rs_1", "type": "reasoning", "summary": [{"type": "summary_text", "text": "Think"}], "encrypted_content": "gAAA"}}),
            },
            StreamEvent::TextDelta("Hel".into()),
            StreamEvent::TextDelta("lo".into()),
            StreamEvent::ToolCallStart {
                index: 0,
                id: "call_1".into(),
                name: "f".into(),
            },
            StreamEvent::ToolCallDelta {
                index: 0,
                arguments: "{\"a\":".into(),
            },
            StreamEvent::ToolCallDelta {
                index: 0,
                arguments: "1}".into(),
            },
            StreamEvent::Finish(StopReason::ToolUse),
            StreamEvent::Usage(Usage {
                input_tokens: 5,
                output_tokens: 6,
            }),
            StreamEvent::Done,
        ];
        let mut enc = StreamEncoder::new("resp_x", "m", false).with_created(7);
        let wire = encode_all(&mut enc, &events);
        assert_eq!(check_well_formed(&wire), "response.completed");
        let last: Value = serde_json::from_str(&events_of(&wire).last().unwrap().1).unwrap();
        assert_eq!(last["response"]["output"][0]["encrypted_content"], "gAAA");
        assert_eq!(last["response"]["output"][1]["content"][0]["text"], "Hello");
        assert_eq!(last["response"]["output"][2]["arguments"], "{\"a\":1}");
        assert_eq!(last["response"]["usage"]["input_tokens"], 5);
        let back = decode_all(&wire).unwrap();
        assert_eq!(segments(&back), segments(&events));
        assert_eq!(back.last(), Some(&StreamEvent::Done));
    }

    #[test]
    fn a_length_stop_ends_incomplete_and_an_error_fails() {
        let mut enc = StreamEncoder::new("r", "m", true);
        let wire = encode_all(
            &mut enc,
            &[
                StreamEvent::TextDelta("a".into()),
                StreamEvent::Finish(StopReason::MaxTokens),
                StreamEvent::Done,
            ],
        );
        assert_eq!(check_well_formed(&wire), "response.incomplete");
        assert!(wire.contains("\"incomplete_details\":{\"reason\":\"max_output_tokens\"}"));
        let back = decode_all(&wire).unwrap();
        assert!(back.contains(&StreamEvent::Finish(StopReason::MaxTokens)));

        let mut enc = StreamEncoder::new("r", "m", true);
        let mut wire = encode_all(&mut enc, &[StreamEvent::TextDelta("a".into())]);
        for f in enc.error("stream_broken", "upstream cut") {
            wire.push_str(&f.to_wire());
        }
        assert!(enc.encode(&StreamEvent::Done).is_empty());
        assert_eq!(check_well_formed(&wire), "response.failed");
        let e = decode_all(&wire).unwrap_err();
        assert_eq!(e.message, "stream_broken: upstream cut");
    }

    #[test]
    fn upstream_errors_carry_code_and_message_for_the_classifier() {
        let failed = r#"{"type":"response.failed","sequence_number":5,"response":{"id":"resp_1","status":"failed","error":{"code":"rate_limit_exceeded","message":"Rate limit reached. Please try again in 1.5s."},"output":[]}}"#;
        let e = StreamDecoder::new()
            .decode(Some("response.failed"), failed)
            .unwrap_err();
        assert_eq!(e.path, "response.error");
        assert!(e.message.starts_with("rate_limit_exceeded: Rate limit"));
        let body: Value =
            serde_json::from_str(&error_body(Some("response.failed"), failed).unwrap()).unwrap();
        assert_eq!(body["error"]["code"], "rate_limit_exceeded");
        assert_eq!(
            body["error"]["message"],
            "Rate limit reached. Please try again in 1.5s."
        );
        let ev = r#"{"type":"error","code":"context_length_exceeded","message":"Your input exceeds the context window of this model.","param":"input","sequence_number":1}"#;
        let e = StreamDecoder::new().decode(Some("error"), ev).unwrap_err();
        assert_eq!(
            e.message,
            "context_length_exceeded: Your input exceeds the context window of this model."
        );
        let body: Value = serde_json::from_str(&error_body(None, ev).unwrap()).unwrap();
        assert_eq!(body["error"]["code"], "context_length_exceeded");
        assert_eq!(
            error_body(
                Some("response.output_text.delta"),
                r#"{"type":"response.output_text.delta","delta":"x"}"#
            ),
            None
        );
        // An error nested the Chat Completions way reads the same.
        let e = StreamDecoder::new()
            .decode(
                None,
                r#"{"type":"error","error":{"type":"server_error","message":"boom"}}"#,
            )
            .unwrap_err();
        assert_eq!(e.message, "server_error: boom");
    }

    #[test]
    fn a_custom_tool_call_streams_as_canonical_arguments_and_back() {
        let events = [
            r#"{"type":"response.output_item.added","output_index":0,"item":{"id":"ctc_1","type":"custom_tool_call","status":"in_progress","call_id":"call_9","name":"apply_patch","input":""}}"#,
            r#"{"type":"response.custom_tool_call_input.delta","output_index":0,"item_id":"ctc_1","delta":"*** Begin \"Patch\"\n"}"#,
            r#"{"type":"response.custom_tool_call_input.delta","output_index":0,"item_id":"ctc_1","delta":"*** End Patch"}"#,
            r#"{"type":"response.custom_tool_call_input.done","output_index":0,"item_id":"ctc_1","input":"*** Begin \"Patch\"\n*** End Patch"}"#,
            r#"{"type":"response.output_item.done","output_index":0,"item":{"id":"ctc_1","type":"custom_tool_call","status":"completed","call_id":"call_9","name":"apply_patch","input":"*** Begin \"Patch\"\n*** End Patch"}}"#,
        ];
        let mut d = StreamDecoder::new();
        let mut out = Vec::new();
        for e in events {
            out.extend(d.decode(None, e).unwrap());
        }
        let (segs, _, _) = segments(&out);
        let Seg::Tool(id, name, args) = &segs[0] else {
            panic!("{segs:?}")
        };
        assert_eq!((id.as_str(), name.as_str()), ("call_9", "apply_patch"));
        assert_eq!(
            args,
            &arguments_to_custom_input_json("*** Begin \"Patch\"\n*** End Patch")
        );
        let mut enc =
            StreamEncoder::new("r", "m", false).with_custom_tools(vec!["apply_patch".to_string()]);
        let mut all = vec![start()];
        all.extend(out);
        all.push(StreamEvent::Done);
        let wire = encode_all(&mut enc, &all);
        check_well_formed(&wire);
        assert!(wire.contains("\"type\":\"custom_tool_call\""));
        assert!(wire.contains(r#""input":"*** Begin \"Patch\"\n*** End Patch""#));
        assert_eq!(segments(&decode_all(&wire).unwrap()).0, segs);
    }

    fn arguments_to_custom_input_json(input: &str) -> String {
        super::super::custom_input_to_arguments(input)
    }

    #[test]
    fn arguments_are_taken_from_done_when_no_delta_came() {
        let mut d = StreamDecoder::new();
        let mut out = Vec::new();
        for e in [
            r#"{"type":"response.output_item.added","output_index":1,"item":{"type":"function_call","call_id":"c","name":"f","arguments":""}}"#,
            r#"{"type":"response.function_call_arguments.done","output_index":1,"arguments":"{\"x\":2}"}"#,
            r#"{"type":"response.output_item.done","output_index":1,"item":{"type":"function_call","call_id":"c","name":"f","arguments":"{\"x\":2}"}}"#,
        ] {
            out.extend(d.decode(None, e).unwrap());
        }
        assert_eq!(
            segments(&out).0,
            vec![Seg::Tool("c".into(), "f".into(), "{\"x\":2}".into())]
        );
        let e = StreamDecoder::new()
            .decode(
                None,
                r#"{"type":"response.function_call_arguments.delta","output_index":3,"delta":"{"}"#,
            )
            .unwrap_err();
        assert_eq!(e.path, "output_index");
    }

    /// A realistic upstream stream as OpenAI sends it (reasoning with
    /// encrypted content, a message, a function call), from the API's
    /// documented event shapes.
    const FIXTURE: &str = include_str!("fixtures/stream_tool_call.sse");

    #[test]
    fn the_fixture_stream_decodes_and_re_encodes_for_a_responses_caller() {
        let back = decode_all(FIXTURE).unwrap();
        assert_eq!(
            back[0],
            StreamEvent::Start {
                id: "resp_68af2c4e0f5c8190a1b2c3d4e5f60718".into(),
                model: "gpt-5-2025-08-07".into()
            }
        );
        let (segs, finish, usage) = segments(&back);
        assert_eq!(
            segs,
            vec![
                Seg::Opaque(json!("rs_68af2c4f1a2c8190b3c4d5e6f7a8b9c0")),
                Seg::Text("I'll check the weather in Paris.".into()),
                Seg::Tool(
                    "call_Xy7zQ2".into(),
                    "get_weather".into(),
                    "{\"city\":\"Paris\",\"unit\":\"celsius\"}".into()
                ),
            ]
        );
        assert_eq!(finish, Some(StopReason::ToolUse));
        assert_eq!(
            usage,
            Some(Usage {
                input_tokens: 312,
                output_tokens: 87
            })
        );
        // Relayed to a Responses caller: the reasoning item arrives whole,
        // encrypted content included.
        let mut enc = StreamEncoder::new("turn_1", "gpt-5", false);
        let wire = encode_all(&mut enc, &back);
        check_well_formed(&wire);
        assert!(wire.contains("\"encrypted_content\":\"gAAAAABor0xP\""));
        assert!(wire.contains("response.reasoning_summary_text.delta"));
        assert_eq!(segments(&decode_all(&wire).unwrap()), (segs, finish, usage));
    }

    /// A realistic non-streamed response (structured output, usage details).
    #[test]
    fn the_fixture_response_parses() {
        let body: Value =
            serde_json::from_str(include_str!("fixtures/response_incomplete.json")).unwrap();
        let r = super::super::parse_response(&body).unwrap();
        assert_eq!(r.stop_reason, Some(StopReason::MaxTokens));
        assert_eq!(r.text(), "{\"answer\": \"Par");
        assert_eq!(r.usage.input_tokens, 1024);
    }

    fn stop() -> impl Strategy<Value = StopReason> {
        prop_oneof![
            Just(StopReason::EndTurn),
            Just(StopReason::ToolUse),
            Just(StopReason::MaxTokens),
            Just(StopReason::ContentFilter),
        ]
    }

    /// A `response.output_text.delta`, right or wrong in the fields hale
    /// reads, with fields it does not read.
    fn text_delta_event() -> BoxedStrategy<String> {
        let ty = prop_oneof![
            6 => Just("\"response.output_text.delta\""),
            1 => Just("\"response.output_text\\u002edelta\""),
            1 => Just("null"),
            1 => Just("\"response.refusal.delta\""),
            1 => Just("\"error\""),
            1 => Just("3"),
        ];
        let delta = prop_oneof![
            6 => Just("\"Hel\\\"lo \\u00e9\""),
            2 => Just("\"\""),
            1 => Just("null"),
            1 => Just("5"),
            1 => Just("[\"x\"]"),
        ];
        let other = prop_oneof![Just("0"), Just("\"msg_1\""), Just("[]"), Just("{\"a\":1}")];
        let key = prop_oneof![
            Just("type"),
            Just("delta"),
            Just("item_id"),
            Just("output_index"),
            Just("content_index"),
            Just("sequence_number"),
            Just("logprobs")
        ];
        (
            proptest::collection::vec((key, ty, delta, other), 0..6),
            0..10u8,
        )
            .prop_map(|(fields, shape)| {
                let pairs: Vec<(&str, String)> = fields
                    .into_iter()
                    .map(|(k, t, d, o)| {
                        let v = match k {
                            "type" => t,
                            "delta" => d,
                            _ => o,
                        };
                        (k, v.to_string())
                    })
                    .collect();
                crate::json::json_object(pairs, shape == 0)
            })
            .boxed()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2_000))]

        /// After a stream's start, `decode` gives exactly what the `Value`
        /// path gives for a text delta, right or wrong: the same events or
        /// the same error.
        #[test]
        fn a_plain_delta_decodes_as_the_value_path_does(
            data in text_delta_event(),
            name in prop_oneof![Just(None), Just(Some("response.output_text.delta")), Just(Some("error"))],
        ) {
            let created = r#"{"type":"response.created","response":{"id":"resp_1","model":"m"}}"#;
            let mut fast = StreamDecoder::new();
            let mut tree = StreamDecoder::new();
            fast.decode(None, created).unwrap();
            tree.decode_tree(None, created).unwrap();
            prop_assert_eq!(fast.decode(name, &data), tree.decode_tree(name, &data), "{}", data);
        }
    }

    /// Any canonical event, in any order: what a relay may hand an encoder
    /// when upstreams are cut and resumed (a second start, text after a
    /// call, a delta for a call no longer open, content after the finish).
    fn event() -> impl Strategy<Value = StreamEvent> {
        prop_oneof![
            1 => Just(start()),
            6 => "[a-z \"\\\\\n\u{e9}]{0,6}".prop_map(StreamEvent::TextDelta),
            2 => (0..3u32, "[a-z_]{1,4}").prop_map(|(i, n)| StreamEvent::ToolCallStart {
                index: i,
                id: format!("call_{i}"),
                name: n,
            }),
            3 => (0..3u32, "[{}\":a-z0-9]{0,5}")
                .prop_map(|(i, a)| StreamEvent::ToolCallDelta { index: i, arguments: a }),
            1 => (0..2u8).prop_map(|i| StreamEvent::OpaqueStart {
                dialect: DIALECT,
                block: json!({"id": format!("rs_{i}"), "type": "reasoning", "summary": []}),
            }),
            1 => "[a-z]{0,4}".prop_map(|t| StreamEvent::OpaqueDelta {
                dialect: DIALECT,
                delta: json!({"type": "response.reasoning_summary_text.delta", "item_id": "x", "output_index": 7, "summary_index": 0, "delta": t}),
            }),
            1 => Just(StreamEvent::OpaqueDelta {
                dialect: DIALECT,
                delta: json!({"type": "response.output_item.done", "output_index": 7, "item": {"id": "rs_9", "type": "reasoning", "summary": [], "encrypted_content": "e"}}),
            }),
            1 => stop().prop_map(StreamEvent::Finish),
            1 => (0..100u64, 0..100u64).prop_map(|(i, o)| StreamEvent::Usage(Usage {
                input_tokens: i,
                output_tokens: o
            })),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1_000))]

        /// Whatever the events, the stream is well formed (continuous
        /// sequence numbers, one item per output, added before done, the
        /// terminal response holding the items), and it decodes back to
        /// the answer the events made: the same text, calls and finish.
        #[test]
        fn any_event_order_encodes_well_formed_and_decodes_back(
            events in proptest::collection::vec(event(), 0..24),
            end in prop_oneof![3 => Just(true), 1 => Just(false)],
        ) {
            let mut enc = StreamEncoder::new("resp_p", "m", true).with_created(1);
            let mut wire = encode_all(&mut enc, &events);
            if end {
                wire.push_str(&encode_all(&mut enc, &[StreamEvent::Done]));
            } else {
                for f in enc.error("stream_broken", "cut") {
                    wire.push_str(&f.to_wire());
                }
            }
            let terminal = check_well_formed(&wire);
            let back = decode_all(&wire);
            if !end {
                prop_assert_eq!(terminal, "response.failed");
                prop_assert!(back.is_err());
                return Ok(());
            }
            let back = back.unwrap();
            let (segs, finish, usage) = segments(&events);
            let (bsegs, bfinish, busage) = segments(&back);
            // Empty text and a tool call's arguments to a call not open are
            // dropped by both; an opaque item's id is the one it started with.
            let norm = |s: Vec<Seg>| -> Vec<Seg> {
                s.into_iter().filter(|g| !matches!(g, Seg::Text(t) if t.is_empty())).collect()
            };
            prop_assert_eq!(norm(bsegs.clone()), norm(segs.clone()));
            let any_tool = segs.iter().any(|s| matches!(s, Seg::Tool(..)));
            let want = match finish {
                None | Some(StopReason::EndTurn | StopReason::ToolUse) => {
                    if any_tool { StopReason::ToolUse } else { StopReason::EndTurn }
                }
                Some(r) => r,
            };
            prop_assert_eq!(bfinish, Some(want));
            prop_assert_eq!(busage, Some(usage.unwrap_or_default()));
            prop_assert_eq!(back.last(), Some(&StreamEvent::Done));
        }

        /// A stream cut anywhere and resumed (the relay's second attempt:
        /// a new `Start`, the rest of the text) stays one response.
        #[test]
        fn a_cut_and_resumed_stream_stays_one_response(
            text in "[a-z ]{1,40}",
            cut in 0usize..40,
        ) {
            let cut = cut.min(text.len());
            let mut enc = StreamEncoder::new("resp_c", "m", true);
            let mut evs = vec![start(), StreamEvent::TextDelta(text[..cut].to_string())];
            evs.push(StreamEvent::Start { id: "resp_other".into(), model: "m2".into() });
            evs.push(StreamEvent::TextDelta(text[cut..].to_string()));
            evs.push(StreamEvent::Finish(StopReason::EndTurn));
            evs.push(StreamEvent::Usage(Usage::default()));
            evs.push(StreamEvent::Done);
            let wire = encode_all(&mut enc, &evs);
            check_well_formed(&wire);
            let back = decode_all(&wire).unwrap();
            prop_assert_eq!(segments(&back).0, vec![Seg::Text(text.clone())]);
            prop_assert_eq!(wire.matches("event: response.output_item.added").count(), 1);
            prop_assert!(!wire.contains("resp_other"));
        }
    }
}
