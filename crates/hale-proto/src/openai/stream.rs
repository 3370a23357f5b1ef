//! OpenAI streams: decoding a provider's `chat.completion.chunk` SSE stream
//! into canonical [`StreamEvent`]s, and encoding canonical events as such a
//! stream for a caller.

use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::response::{finish_reason, parse_finish_reason, unix_now, usage_json};
use crate::canonical::{Obj, ProtoError, StopReason, Str, StreamEvent, Usage};
use crate::json::{
    as_object, at, count, err, error_message, field, join, kind_of, opt_array, opt_str, push_str,
};
use crate::layout::TextLayout;
use crate::scan::{Scan, once};
use crate::sse::SseFrame;

/// An upstream chunk of the common shape — text, a finish, usage — read
/// straight from the data line, strings borrowed ([`Str`]), without a `Value` tree:
/// a stream has one per token, and the tree with its paths for error
/// messages was most of the cost of decoding one (callgrind, issue 30).
///
/// [`StreamDecoder::decode`] takes this path only when the chunk reads as
/// this struct and holds no tool calls and no error ([`PlainChunk::is_plain`]);
/// anything else — a field of another type, a duplicate field, a tool call,
/// an array where an object belongs — goes through the `Value` path, which
/// says what is wrong. The one difference: fields hale does not read are
/// skipped here without checking a number's range, an escape's surrogates
/// or the nesting depth (serde_json's limit of 128), so a chunk the `Value`
/// path calls malformed for such a field alone still delivers its text (tests
/// `a_plain_chunk_decodes_as_the_value_path_does`,
/// `an_unread_field_out_of_range_does_not_lose_the_text`).
#[derive(Deserialize)]
#[cfg_attr(test, derive(Debug, PartialEq))]
struct PlainChunk<'a> {
    #[serde(borrow)]
    id: Option<Str<'a>>,
    #[serde(borrow)]
    model: Option<Str<'a>>,
    #[serde(borrow)]
    choices: Option<Vec<Obj<PlainChoice<'a>>>>,
    usage: Option<Obj<PlainUsage>>,
    error: Option<IgnoredAny>,
}

impl<'a> PlainChunk<'a> {
    /// The chunk read by [`Scan`], without serde: `Some` only with what
    /// `serde_json::from_str::<Obj<PlainChunk>>` reads (test
    /// `the_scanner_reads_what_serde_reads`), `None` when the scanner
    /// leaves the chunk to serde. ~4.6k instructions of serde per chunk
    /// (callgrind, issue 30).
    fn scan(data: &'a str) -> Option<Self> {
        let mut s = Scan::new(data);
        let mut c = PlainChunk {
            id: None,
            model: None,
            choices: None,
            usage: None,
            error: None,
        };
        let mut seen = 0;
        s.object(|s, key| {
            match key {
                "id" => {
                    once(&mut seen, 1)?;
                    c.id = s.opt(|s| s.string().map(Str))?;
                }
                "model" => {
                    once(&mut seen, 2)?;
                    c.model = s.opt(|s| s.string().map(Str))?;
                }
                "choices" => {
                    once(&mut seen, 4)?;
                    c.choices = s.opt(|s| {
                        let mut v = Vec::new();
                        s.array(|s| {
                            v.push(Obj(PlainChoice::scan(s)?));
                            Some(())
                        })?;
                        Some(v)
                    })?;
                }
                "usage" => {
                    once(&mut seen, 8)?;
                    c.usage = s.opt(|s| PlainUsage::scan(s).map(Obj))?;
                }
                "error" => {
                    once(&mut seen, 16)?;
                    c.error = s.opt(|s| s.skip().map(|()| IgnoredAny))?;
                }
                _ => s.skip()?,
            }
            Some(())
        })?;
        s.end()?;
        Some(c)
    }

    fn is_plain(&self) -> bool {
        self.error.is_none()
            && self
                .choices
                .iter()
                .flatten()
                .all(|Obj(c)| c.delta.as_ref().is_none_or(|Obj(d)| d.tool_calls.is_none()))
    }
}

#[derive(Deserialize)]
#[cfg_attr(test, derive(Debug, PartialEq))]
struct PlainChoice<'a> {
    index: Option<u64>,
    #[serde(borrow)]
    delta: Option<Obj<PlainDelta<'a>>>,
    #[serde(borrow)]
    finish_reason: Option<Str<'a>>,
}

impl<'a> PlainChoice<'a> {
    fn scan(s: &mut Scan<'a>) -> Option<Self> {
        let mut c = PlainChoice {
            index: None,
            delta: None,
            finish_reason: None,
        };
        let mut seen = 0;
        s.object(|s, key| {
            match key {
                "index" => {
                    once(&mut seen, 1)?;
                    c.index = s.opt(Scan::u64)?;
                }
                "delta" => {
                    once(&mut seen, 2)?;
                    c.delta = s.opt(|s| PlainDelta::scan(s).map(Obj))?;
                }
                "finish_reason" => {
                    once(&mut seen, 4)?;
                    c.finish_reason = s.opt(|s| s.string().map(Str))?;
                }
                _ => s.skip()?,
            }
            Some(())
        })?;
        Some(c)
    }
}

#[derive(Deserialize)]
#[cfg_attr(test, derive(Debug, PartialEq))]
struct PlainDelta<'a> {
    #[serde(borrow)]
    content: Option<Str<'a>>,
    tool_calls: Option<IgnoredAny>,
}

impl<'a> PlainDelta<'a> {
    fn scan(s: &mut Scan<'a>) -> Option<Self> {
        let mut d = PlainDelta {
            content: None,
            tool_calls: None,
        };
        let mut seen = 0;
        s.object(|s, key| {
            match key {
                "content" => {
                    once(&mut seen, 1)?;
                    d.content = s.opt(|s| s.string().map(Str))?;
                }
                "tool_calls" => {
                    once(&mut seen, 2)?;
                    d.tool_calls = s.opt(|s| s.skip().map(|()| IgnoredAny))?;
                }
                _ => s.skip()?,
            }
            Some(())
        })?;
        Some(d)
    }
}

#[derive(Deserialize)]
#[cfg_attr(test, derive(Debug, PartialEq))]
struct PlainUsage {
    prompt_tokens: Option<u64>,
    completion_tokens: Option<u64>,
}

impl PlainUsage {
    fn scan(s: &mut Scan) -> Option<Self> {
        let mut u = PlainUsage {
            prompt_tokens: None,
            completion_tokens: None,
        };
        let mut seen = 0;
        s.object(|s, key| {
            match key {
                "prompt_tokens" => {
                    once(&mut seen, 1)?;
                    u.prompt_tokens = s.opt(Scan::u64)?;
                }
                "completion_tokens" => {
                    once(&mut seen, 2)?;
                    u.completion_tokens = s.opt(Scan::u64)?;
                }
                _ => s.skip()?,
            }
            Some(())
        })?;
        Some(u)
    }
}

/// A tool call being assembled from upstream deltas.
#[derive(Debug)]
struct ToolSlot {
    upstream_index: u64,
    id: Option<String>,
    name: String,
    canonical: Option<u32>,
    pending_args: String,
}

/// Decodes an OpenAI-compatible upstream SSE stream into canonical events.
///
/// Tool calls are keyed by their `index`; a chunk whose `id` differs from the
/// one already seen at that index starts a new call (some compatible servers
/// send every call at index 0). A call is announced once its name is known;
/// argument pieces that arrive before that are held and sent right after.
#[derive(Debug, Default)]
pub struct StreamDecoder {
    started: bool,
    slots: Vec<ToolSlot>,
    next_tool: u32,
    /// The last text-only chunk's layout ([`text_only`]), for the chunks
    /// after it.
    text_layout: Option<TextLayout>,
}

/// The text of `chunk` if it is text-only and holds no escape: one choice at index 0 whose
/// delta is a `content` string, no finish, no usage, no tool call, no error
/// — the chunk a provider sends per token, which decodes to that text alone
/// once the stream has started ([`TextLayout`]).
fn text_only<'c>(chunk: &'c PlainChunk) -> Option<&'c str> {
    if chunk.usage.is_some() || chunk.error.is_some() {
        return None;
    }
    let [Obj(c)] = chunk.choices.as_deref()? else {
        return None;
    };
    if c.index.unwrap_or(0) != 0 || c.finish_reason.is_some() {
        return None;
    }
    let Obj(d) = c.delta.as_ref()?;
    if d.tool_calls.is_some() {
        return None;
    }
    // Only a text borrowed from the chunk has a place in it.
    let Str(std::borrow::Cow::Borrowed(text)) = d.content.as_ref()? else {
        return None;
    };
    Some(text)
}

impl StreamDecoder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Decodes one SSE event. `[DONE]` → [`StreamEvent::Done`]; a malformed
    /// data line or an in-band `{"error":…}` chunk → `Err`.
    pub fn decode(
        &mut self,
        _event: Option<&str>,
        data: &str,
    ) -> Result<Vec<StreamEvent>, ProtoError> {
        let data = data.trim();
        if data.is_empty() {
            return Ok(Vec::new());
        }
        if data == "[DONE]" {
            let mut out = Vec::new();
            self.flush_unnamed(&mut out);
            out.push(StreamEvent::Done);
            return Ok(out);
        }
        if let Some(text) = self.text_layout.as_ref().and_then(|l| l.text_of(data)) {
            // Started before the layout's chunk, so no `Start`; no finish,
            // so no state changes: just its text, as `decode_plain` gives it.
            return Ok(if text.is_empty() {
                Vec::new()
            } else {
                vec![StreamEvent::TextDelta(text.into_owned())]
            });
        }
        let chunk = match PlainChunk::scan(data) {
            Some(chunk) => Some(chunk),
            None => serde_json::from_str::<Obj<PlainChunk>>(data)
                .ok()
                .map(|Obj(c)| c),
        };
        match chunk {
            Some(chunk) if chunk.is_plain() => {
                if self.started
                    && let Some(layout) = text_only(&chunk).and_then(|t| TextLayout::of(data, t))
                {
                    self.text_layout = Some(layout);
                }
                Ok(self.decode_plain(chunk))
            }
            Some(_) | None => self.decode_tree(data),
        }
    }

    /// [`StreamDecoder::decode`] of a chunk read as [`PlainChunk`]: the
    /// same events in the same order as [`StreamDecoder::decode_tree`].
    fn decode_plain(&mut self, chunk: PlainChunk) -> Vec<StreamEvent> {
        let mut out = Vec::new();
        let empty = chunk.id.as_ref().is_none_or(|Str(s)| s.is_empty())
            && chunk.choices.as_ref().is_none_or(Vec::is_empty)
            && chunk.usage.is_none();
        if empty {
            // Azure's `prompt_filter_results` chunk before the answer (no
            // id, no choices): it starts nothing.
            return out;
        }
        if !self.started {
            self.started = true;
            out.push(StreamEvent::Start {
                id: chunk.id.map(|Str(s)| s.into_owned()).unwrap_or_default(),
                model: chunk.model.map(|Str(s)| s.into_owned()).unwrap_or_default(),
            });
        }
        for (ci, Obj(c)) in chunk.choices.unwrap_or_default().into_iter().enumerate() {
            if c.index.unwrap_or(ci as u64) != 0 {
                continue;
            }
            if let Some(Obj(d)) = c.delta
                && let Some(Str(text)) = d.content
                && !text.is_empty()
            {
                out.push(StreamEvent::TextDelta(text.into_owned()));
            }
            if let Some(Str(reason)) = c.finish_reason {
                self.flush_unnamed(&mut out);
                out.push(StreamEvent::Finish(parse_finish_reason(&reason)));
            }
        }
        if let Some(Obj(u)) = chunk.usage {
            out.push(StreamEvent::Usage(Usage {
                input_tokens: u.prompt_tokens.unwrap_or(0),
                output_tokens: u.completion_tokens.unwrap_or(0),
            }));
        }
        out
    }

    /// [`StreamDecoder::decode`] of any chunk, through a `Value` tree: the
    /// general path, and the one that names what is wrong.
    fn decode_tree(&mut self, data: &str) -> Result<Vec<StreamEvent>, ProtoError> {
        let v: Value =
            serde_json::from_str(data).map_err(|e| err("data", format!("malformed chunk: {e}")))?;
        let obj = v.as_object().ok_or_else(|| {
            err(
                "data",
                format!("chunk must be an object, got {}", kind_of(&v)),
            )
        })?;
        if let Some(e) = field(obj, "error") {
            return Err(err("error", error_message(e)));
        }

        let mut out = Vec::new();
        let no_choices = match field(obj, "choices") {
            None => true,
            Some(Value::Array(a)) => a.is_empty(),
            Some(_) => false,
        };
        if no_choices
            && opt_str(obj, "id", "")?.unwrap_or_default().is_empty()
            && field(obj, "usage").is_none()
        {
            // Azure's `prompt_filter_results` chunk (see `decode_plain`).
            return Ok(out);
        }
        if !self.started {
            self.started = true;
            out.push(StreamEvent::Start {
                id: opt_str(obj, "id", "")?.unwrap_or_default().to_string(),
                model: opt_str(obj, "model", "")?.unwrap_or_default().to_string(),
            });
        }
        if let Some(choices) = opt_array(obj, "choices", "")? {
            for (ci, c) in choices.iter().enumerate() {
                let cp = at("choices", ci);
                let co = as_object(c, &cp)?;
                let index = co.get("index").and_then(Value::as_u64).unwrap_or(ci as u64);
                if index != 0 {
                    continue;
                }
                if let Some(delta) = field(co, "delta") {
                    let dp = join(&cp, "delta");
                    let d = as_object(delta, &dp)?;
                    if let Some(text) = opt_str(d, "content", &dp)?
                        && !text.is_empty()
                    {
                        out.push(StreamEvent::TextDelta(text.to_string()));
                    }
                    if let Some(calls) = opt_array(d, "tool_calls", &dp)? {
                        for (j, tc) in calls.iter().enumerate() {
                            self.tool_delta(tc, j, &at(&join(&dp, "tool_calls"), j), &mut out)?;
                        }
                    }
                }
                if let Some(reason) = opt_str(co, "finish_reason", &cp)? {
                    self.flush_unnamed(&mut out);
                    out.push(StreamEvent::Finish(parse_finish_reason(reason)));
                }
            }
        }
        if let Some(u) = field(obj, "usage").and_then(Value::as_object) {
            out.push(StreamEvent::Usage(Usage {
                input_tokens: count(Some(u), "prompt_tokens"),
                output_tokens: count(Some(u), "completion_tokens"),
            }));
        }
        Ok(out)
    }

    fn tool_delta(
        &mut self,
        tc: &Value,
        position: usize,
        path: &str,
        out: &mut Vec<StreamEvent>,
    ) -> Result<(), ProtoError> {
        let to = as_object(tc, path)?;
        let upstream_index = to
            .get("index")
            .and_then(Value::as_u64)
            .unwrap_or(position as u64);
        let id = opt_str(to, "id", path)?.filter(|s| !s.is_empty());
        let (name, args) = match field(to, "function") {
            None => (None, None),
            Some(f) => {
                let fp = join(path, "function");
                let fo = as_object(f, &fp)?;
                let name = opt_str(fo, "name", &fp)?.filter(|s| !s.is_empty());
                let args = match field(fo, "arguments") {
                    None => None,
                    Some(Value::String(s)) => Some(s.as_str()),
                    Some(v) => {
                        return Err(err(
                            join(&fp, "arguments"),
                            format!("must be a string, got {}", kind_of(v)),
                        ));
                    }
                };
                (name, args)
            }
        };

        let existing = self
            .slots
            .iter()
            .rposition(|s| s.upstream_index == upstream_index);
        let slot_pos = match existing {
            Some(i) if !matches!((id, &self.slots[i].id), (Some(new), Some(old)) if new != old) => {
                i
            }
            Some(_) | None => {
                self.slots.push(ToolSlot {
                    upstream_index,
                    id: None,
                    name: String::new(),
                    canonical: None,
                    pending_args: String::new(),
                });
                self.slots.len() - 1
            }
        };
        let next_tool = &mut self.next_tool;
        let slot = &mut self.slots[slot_pos];
        if slot.id.is_none() {
            slot.id = id.map(str::to_string);
        }
        if slot.canonical.is_none()
            && let Some(n) = name
        {
            slot.name = n.to_string();
        }
        if let Some(a) = args {
            slot.pending_args.push_str(a);
        }
        if slot.canonical.is_none() && !slot.name.is_empty() {
            announce(slot, next_tool, out);
        }
        if let Some(index) = slot.canonical
            && !slot.pending_args.is_empty()
        {
            out.push(StreamEvent::ToolCallDelta {
                index,
                arguments: std::mem::take(&mut slot.pending_args),
            });
        }
        Ok(())
    }

    /// Announces calls whose name never came, so their arguments are not lost.
    fn flush_unnamed(&mut self, out: &mut Vec<StreamEvent>) {
        for slot in &mut self.slots {
            if slot.canonical.is_none() {
                announce(slot, &mut self.next_tool, out);
                if let Some(index) = slot.canonical
                    && !slot.pending_args.is_empty()
                {
                    out.push(StreamEvent::ToolCallDelta {
                        index,
                        arguments: std::mem::take(&mut slot.pending_args),
                    });
                }
            }
        }
    }
}

fn announce(slot: &mut ToolSlot, next_tool: &mut u32, out: &mut Vec<StreamEvent>) {
    let index = *next_tool;
    *next_tool = next_tool.saturating_add(1);
    slot.canonical = Some(index);
    out.push(StreamEvent::ToolCallStart {
        index,
        id: slot
            .id
            .clone()
            .unwrap_or_else(|| format!("call_hale_{index}")),
        name: slot.name.clone(),
    });
}

/// One `chat.completion.chunk` of one choice, serialised as it is, without
/// building a `Value` tree first: a stream sends one per token. The fields
/// are in the order `json!` (a sorted map) wrote them, so the bytes are
/// the same as before.
#[derive(Serialize)]
struct ChunkOut<'a, D> {
    choices: [ChoiceOut<D>; 1],
    created: u64,
    id: &'a str,
    model: &'a str,
    object: &'static str,
}

#[derive(Serialize)]
struct ChoiceOut<D> {
    delta: D,
    finish_reason: Option<&'static str>,
    index: u32,
    /// Always `null`.
    logprobs: (),
}

/// The first chunk's delta.
#[derive(Serialize)]
struct RoleDelta {
    content: &'static str,
    role: &'static str,
}

/// A piece of text (the test's reference for [`StreamEncoder::text_chunk`]).
#[cfg(test)]
#[derive(Serialize)]
struct ContentDelta<'a> {
    content: &'a str,
}

/// The empty delta of the finishing chunk.
#[derive(Serialize)]
struct NoDelta {}

/// Encodes canonical events as an OpenAI `chat.completion.chunk` stream.
///
/// The stream is always valid whatever the event order: a missing `Start` is
/// supplied, a second `Start` (a resumed upstream) is ignored, usage is held
/// until `Done` and sent as the final chunk (empty `choices`) before `[DONE]`
/// when the caller asked for it, and a `Done` without `Finish` gets a
/// `finish_reason` (`tool_calls` if any call was sent, else `stop`) since the
/// relay only sends `Done` for a complete answer. Nothing is emitted after
/// `[DONE]` or after [`StreamEncoder::error`].
#[derive(Debug)]
pub struct StreamEncoder {
    id: String,
    model: String,
    created: u64,
    include_usage: bool,
    started: bool,
    finished: bool,
    closed: bool,
    any_tool: bool,
    usage: Option<Usage>,
    /// What follows a text chunk's delta, from `finish_reason` to the end
    /// (the same for every text chunk of the stream); empty until the first
    /// one, and again when `id` or `model` change.
    text_tail: String,
}

impl StreamEncoder {
    /// An encoder for chunks with this `id` and `model`, `created` now.
    pub fn new(id: &str, model: &str, include_usage: bool) -> Self {
        Self {
            id: id.to_string(),
            model: model.to_string(),
            created: unix_now(),
            include_usage,
            started: false,
            finished: false,
            closed: false,
            any_tool: false,
            usage: None,
            text_tail: String::new(),
        }
    }

    /// Sets the `created` timestamp of every chunk (deterministic output in tests).
    pub fn with_created(mut self, created: u64) -> Self {
        self.created = created;
        self.text_tail.clear();
        self
    }

    fn chunk<D: Serialize>(&self, delta: D, finish: Option<StopReason>) -> SseFrame {
        let chunk = ChunkOut {
            choices: [ChoiceOut {
                delta,
                finish_reason: finish.map(finish_reason),
                index: 0,
                logprobs: (),
            }],
            created: self.created,
            id: &self.id,
            model: &self.model,
            object: "chat.completion.chunk",
        };
        SseFrame {
            event: None,
            // Serialising structs of strings and numbers cannot fail.
            data: serde_json::to_string(&chunk).unwrap_or_default(),
        }
    }

    /// [`StreamEncoder::chunk`] of a piece of text, the same bytes, written
    /// by hand around the escaped text: a stream sends one per token, and
    /// serialising the whole chunk was ~3.4k instructions of it (callgrind,
    /// issue 30; test `a_text_chunk_is_the_serialised_chunk`).
    fn text_chunk(&mut self, text: &str) -> SseFrame {
        const HEAD: &str = r#"{"choices":[{"delta":{"content":"#;
        if self.text_tail.is_empty() {
            let mut t =
                String::from(r#"},"finish_reason":null,"index":0,"logprobs":null}],"created":"#);
            t.push_str(&self.created.to_string());
            t.push_str(r#","id":"#);
            push_str(&mut t, &self.id);
            t.push_str(r#","model":"#);
            push_str(&mut t, &self.model);
            t.push_str(r#","object":"chat.completion.chunk"}"#);
            self.text_tail = t;
        }
        let mut data = String::with_capacity(HEAD.len() + text.len() + 2 + self.text_tail.len());
        data.push_str(HEAD);
        push_str(&mut data, text);
        data.push_str(&self.text_tail);
        SseFrame { event: None, data }
    }

    fn ensure_started(&mut self, out: &mut Vec<SseFrame>) {
        if !self.started {
            self.started = true;
            out.push(self.chunk(
                RoleDelta {
                    content: "",
                    role: "assistant",
                },
                None,
            ));
        }
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
                    self.text_tail.clear();
                }
                if self.model.is_empty() {
                    self.model.clone_from(model);
                    self.text_tail.clear();
                }
                self.ensure_started(&mut out);
            }
            StreamEvent::TextDelta(text) => {
                self.ensure_started(&mut out);
                if !text.is_empty() && !self.finished {
                    out.push(self.text_chunk(text));
                }
            }
            StreamEvent::ToolCallStart { index, id, name } => {
                self.ensure_started(&mut out);
                if !self.finished {
                    self.any_tool = true;
                    out.push(self.chunk(
                        json!({"tool_calls": [{
                            "index": index,
                            "id": id,
                            "type": "function",
                            "function": {"name": name, "arguments": ""},
                        }]}),
                        None,
                    ));
                }
            }
            StreamEvent::ToolCallDelta { index, arguments } => {
                self.ensure_started(&mut out);
                if !arguments.is_empty() && !self.finished {
                    out.push(self.chunk(
                        json!({"tool_calls": [{"index": index, "function": {"arguments": arguments}}]}),
                        None,
                    ));
                }
            }
            StreamEvent::Finish(reason) => {
                self.ensure_started(&mut out);
                if !self.finished {
                    self.finished = true;
                    out.push(self.chunk(NoDelta {}, Some(*reason)));
                }
            }
            StreamEvent::Usage(u) => self.usage = Some(*u),
            // Chat Completions has no form for another dialect's blocks
            // (a thinking block, a server tool's call).
            StreamEvent::OpaqueStart { .. } | StreamEvent::OpaqueDelta { .. } => {}
            StreamEvent::Done => {
                self.ensure_started(&mut out);
                if !self.finished {
                    self.finished = true;
                    let reason = if self.any_tool {
                        StopReason::ToolUse
                    } else {
                        StopReason::EndTurn
                    };
                    out.push(self.chunk(NoDelta {}, Some(reason)));
                }
                if self.include_usage {
                    let v = json!({
                        "id": self.id,
                        "object": "chat.completion.chunk",
                        "created": self.created,
                        "model": self.model,
                        "choices": [],
                        "usage": usage_json(self.usage.unwrap_or_default()),
                    });
                    out.push(SseFrame {
                        event: None,
                        data: v.to_string(),
                    });
                }
                out.push(SseFrame {
                    event: None,
                    data: "[DONE]".to_string(),
                });
                self.closed = true;
            }
        }
        out
    }

    /// An in-band error for a stream that cannot be completed: one data chunk
    /// `{"error":{…}}`, with no `finish_reason` and no `[DONE]`, so the answer
    /// is never presented as complete. The encoder emits nothing afterwards.
    pub fn error(&mut self, kind: &str, message: &str) -> Vec<SseFrame> {
        if self.closed {
            return Vec::new();
        }
        self.closed = true;
        vec![SseFrame {
            event: None,
            data: json!({"error": {"type": kind, "message": message, "code": kind}}).to_string(),
        }]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// What `decode` did before the plain path: every chunk through the tree.
    fn decode_by_tree(d: &mut StreamDecoder, data: &str) -> Result<Vec<StreamEvent>, ProtoError> {
        let data = data.trim();
        if data.is_empty() || data == "[DONE]" {
            return d.decode(None, data);
        }
        d.decode_tree(data)
    }

    /// Azure's stream (issue 29): the `prompt_filter_results` chunk before
    /// the answer (no id, no choices) starts nothing, the answer's id and
    /// model come from the first real chunk, `content_filter_results` are
    /// skipped, and `finish_reason: "content_filter"` is the content-filter
    /// stop. The plain path and the tree path agree.
    #[test]
    fn an_azure_stream_with_filter_results_and_a_content_filter_finish() {
        let chunks = [
            r#"{"choices":[],"created":0,"id":"","model":"","object":"","prompt_filter_results":[{"prompt_index":0,"content_filter_results":{"hate":{"filtered":false,"severity":"safe"}}}]}"#,
            r#"{"choices":[{"content_filter_results":{},"delta":{"content":"","role":"assistant"},"finish_reason":null,"index":0}],"created":1,"id":"chatcmpl-az1","model":"gpt-4o-2024-08-06","object":"chat.completion.chunk","system_fingerprint":"fp_1"}"#,
            r#"{"choices":[{"content_filter_results":{"hate":{"filtered":false,"severity":"safe"}},"delta":{"content":"Hi"},"finish_reason":null,"index":0}],"created":1,"id":"chatcmpl-az1","model":"gpt-4o-2024-08-06","object":"chat.completion.chunk"}"#,
            r#"{"choices":[{"content_filter_results":{"violence":{"filtered":true,"severity":"medium"}},"delta":{},"finish_reason":"content_filter","index":0}],"created":1,"id":"chatcmpl-az1","model":"gpt-4o-2024-08-06","object":"chat.completion.chunk"}"#,
            "[DONE]",
        ];
        let want = vec![
            StreamEvent::Start {
                id: "chatcmpl-az1".into(),
                model: "gpt-4o-2024-08-06".into(),
            },
            StreamEvent::TextDelta("Hi".into()),
            StreamEvent::Finish(StopReason::ContentFilter),
            StreamEvent::Done,
        ];
        let (mut plain, mut tree) = (StreamDecoder::new(), StreamDecoder::new());
        let (mut got_plain, mut got_tree) = (Vec::new(), Vec::new());
        for c in chunks {
            got_plain.extend(plain.decode(None, c).expect("decodes"));
            got_tree.extend(decode_by_tree(&mut tree, c).expect("decodes"));
        }
        assert_eq!(got_plain, want);
        assert_eq!(got_tree, want);
    }

    /// Any JSON value hale does not read, of every type. No number out of
    /// `f64`'s range and no lone surrogate: those are the documented
    /// difference, tested below.
    fn ignored() -> BoxedStrategy<String> {
        prop_oneof![
            Just("null"),
            Just("true"),
            Just("0"),
            Just("-1"),
            Just("1.5"),
            Just("\"x\""),
            Just("\"a\\\"b\\n\\u00e9\""),
            Just("[]"),
            Just("[1,{\"a\":null}]"),
            Just("{}"),
            Just("{\"a\":[1]}"),
        ]
        .prop_map(str::to_string)
        .boxed()
    }

    /// A value where hale reads a string or a count: right and wrong types,
    /// escapes, and the values the plain path must refuse.
    fn read() -> BoxedStrategy<String> {
        prop_oneof![
            3 => Just("\"hi\""),
            2 => Just("\"\""),
            2 => Just("\"q\\\" \\\\ \\n \\u00e9 \\ud83d\\ude00\""),
            2 => Just("\"stop\""),
            1 => Just("\"tool_calls\""),
            1 => Just("\"length\""),
            2 => Just("0"),
            2 => Just("1"),
            1 => Just("7"),
            1 => Just("-1"),
            1 => Just("2.0"),
            1 => Just("1e400"),
            1 => Just("\"\\ud800\""),
            3 => Just("null"),
        ]
        .prop_map(str::to_string)
        .boxed()
        .prop_union(ignored())
        .boxed()
    }

    /// An object of up to 6 of `fields` (a key may repeat), each with a
    /// value from its own strategy; one time in ten written as an array of
    /// the values instead.
    fn object(fields: Vec<(&'static str, BoxedStrategy<String>)>) -> BoxedStrategy<String> {
        let n = fields.len();
        let pair = (0..n).prop_flat_map(move |i| (Just(fields[i].0), fields[i].1.clone()));
        (proptest::collection::vec(pair, 0..6), 0..10u8)
            .prop_map(|(pairs, shape)| crate::json::json_object(pairs, shape == 0))
            .boxed()
    }

    fn tool_calls() -> BoxedStrategy<String> {
        prop_oneof![
            Just("[{\"index\":0,\"id\":\"call_1\",\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"a\"}}]".to_string()),
            Just("[{\"index\":0,\"function\":{\"arguments\":\"1}\"}}]".to_string()),
            Just("[]".to_string()),
            Just("null".to_string()),
        ]
        .boxed()
    }

    fn delta() -> BoxedStrategy<String> {
        object(vec![
            ("content", read()),
            ("role", ignored()),
            ("tool_calls", tool_calls()),
            ("refusal", ignored()),
        ])
    }

    fn choice() -> BoxedStrategy<String> {
        object(vec![
            ("index", read()),
            ("delta", prop_oneof![4 => delta(), 1 => read()].boxed()),
            ("finish_reason", read()),
            ("logprobs", ignored()),
        ])
    }

    /// Chunk layouts around a text (`{i}` in a tail: the chunk's number,
    /// so that tail differs from chunk to chunk).
    const LAYOUTS: &[(&str, &str)] = &[
        (
            r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":""#,
            r#""},"logprobs":null,"finish_reason":null}]}"#,
        ),
        (
            r#"{"choices":[{"delta":{"content":""#,
            r#""},"finish_reason":null,"index":0,"logprobs":null}],"created":1,"id":"x","model":"m","object":"chat.completion.chunk"}"#,
        ),
        (
            r#"{ "id" : "x", "choices" : [ { "delta" : { "content" : ""#,
            r#"" } } ] , "usage" : null }"#,
        ),
        (
            r#"{"id":"x","choices":[{"index":0,"delta":{"content":""#,
            r#""}}],"obfuscation":"{i}"}"#,
        ),
        (
            r#"{"id":"x","choices":[{"index":1,"delta":{"content":""#,
            r#""}}]}"#,
        ),
        (
            r#"{"id":"x","choices":[{"index":0,"delta":{"content":""#,
            r#""},"finish_reason":"stop"}]}"#,
        ),
        (
            r#"{"id":"x","choices":[{"index":0,"delta":{"content":""#,
            r#""}},{"index":0,"delta":{"content":"b"}}]}"#,
        ),
        (
            r#"{"id":"x","choices":[{"index":0,"delta":{"content":""#,
            r#""}}],"usage":{"prompt_tokens":1,"completion_tokens":2}}"#,
        ),
        (
            r#"{"id":"x","choices":[{"index":0,"delta":{"tool_calls":null,"content":""#,
            r#""}}]}"#,
        ),
    ];

    /// `decode` over `chunks` and a closing `[DONE]` gives, chunk by chunk,
    /// what the `Value` path gives: the same events, or the same error.
    fn decodes_as_the_tree(chunks: &[String]) -> Result<(), TestCaseError> {
        let mut fast = StreamDecoder::new();
        let mut tree = StreamDecoder::new();
        for c in chunks.iter().map(String::as_str).chain(["[DONE]"]) {
            prop_assert_eq!(
                fast.decode(None, c),
                decode_by_tree(&mut tree, c),
                "chunk {}",
                c
            );
        }
        Ok(())
    }

    fn chunk() -> BoxedStrategy<String> {
        let choices =
            proptest::collection::vec(choice(), 0..3).prop_map(|cs| format!("[{}]", cs.join(",")));
        let usage = object(vec![
            ("prompt_tokens", read()),
            ("completion_tokens", read()),
            ("total_tokens", ignored()),
        ]);
        let error = prop_oneof![
            Just("null".to_string()),
            Just("\"boom\"".to_string()),
            Just("{\"message\":\"m\",\"type\":\"server_error\"}".to_string())
        ];
        object(vec![
            ("id", read()),
            ("model", read()),
            (
                "choices",
                prop_oneof![4 => choices.boxed(), 1 => read()].boxed(),
            ),
            ("usage", prop_oneof![3 => usage, 1 => read()].boxed()),
            ("error", error.boxed()),
            ("object", ignored()),
            ("system_fingerprint", ignored()),
        ])
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2_000))]

        /// A text chunk written by hand is the serialised chunk, byte for
        /// byte, whatever the text, id and model (quotes, backslashes,
        /// control characters, non-ASCII), also after a `Start` that fills
        /// an empty id and model in.
        #[test]
        fn a_text_chunk_is_the_serialised_chunk(
            text in "[\\x00-\\x1f\"\\\\/a-z\\x7fé😀]{1,12}|\\PC{1,12}",
            id in "[\"\\\\a-z\\x00-\\x1f]{0,6}",
            model in "\\PC{0,8}",
        ) {
            let mut e = StreamEncoder::new("", "", false).with_created(1_700_000_000);
            for (i, m) in [("", ""), (id.as_str(), model.as_str())] {
                if !i.is_empty() || !m.is_empty() {
                    e.encode(&StreamEvent::Start { id: i.into(), model: m.into() });
                }
                let want = e.chunk(ContentDelta { content: &text }, None);
                let got = e.encode(&StreamEvent::TextDelta(text.clone()));
                prop_assert_eq!(got.last(), Some(&want));
            }
        }

        /// A stream of chunks alike but for their text — the fast path of
        /// [`TextLayout`], [`text_only`] — interleaved with other chunks, decodes as the
        /// `Value` path decodes it. The texts are raw string bodies: escapes,
        /// surrogate pairs and lone ones, control characters, a bare quote
        /// (which ends the string early), the layout's own tail; the
        /// layouts include ones that must not take the fast path (another
        /// index, a finish, two choices, usage) and a tail that varies.
        #[test]
        fn a_stream_of_alike_chunks_decodes_as_the_value_path_does(
            layout in 0..LAYOUTS.len(),
            texts in proptest::collection::vec(crate::layout::text_body(&[r#""},"logprobs":null,"finish_reason":null}]}"#, r#""}}]}"#]), 1..8),
            others in proptest::collection::vec((0..8usize, chunk()), 0..3),
        ) {
            let (head, tail) = LAYOUTS[layout];
            let mut stream: Vec<String> = vec![
                r#"{"id":"c1","model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}"#.to_string(),
            ];
            for (i, t) in texts.iter().enumerate() {
                stream.push(format!("{head}{t}{}", tail.replace("{i}", &i.to_string())));
                for (at, c) in &others {
                    if *at == i {
                        stream.push(c.clone());
                    }
                }
            }
            decodes_as_the_tree(&stream)?;
        }

        /// Over a stream of generated chunks (the decoder keeps state from
        /// chunk to chunk), `decode` gives exactly what the `Value` path
        /// gives: the same events, or the same error.
        #[test]
        fn a_plain_chunk_decodes_as_the_value_path_does(chunks in proptest::collection::vec(chunk(), 1..6)) {
            decodes_as_the_tree(&chunks)?;
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4_000))]

        /// Whatever the chunk — generated (keys in any order and repeated,
        /// fields of every type, escapes, lone surrogates, numbers out of
        /// range), cut short anywhere, or spaced out — the scanner reads
        /// exactly what serde reads, or leaves the chunk to serde.
        #[test]
        fn the_scanner_reads_what_serde_reads(c in chunk(), cut in 0..400usize) {
            for doc in crate::scan::variants(&c, cut) {
                if let Some(got) = PlainChunk::scan(&doc) {
                    let want = serde_json::from_str::<Obj<PlainChunk>>(&doc).map(|Obj(c)| c);
                    prop_assert_eq!(Some(got), want.ok(), "chunk {}", doc);
                }
            }
        }
    }

    /// The scanner reads most generated chunks serde reads, including ones
    /// with escapes in the text, so the property above is not vacuous; and
    /// the common chunk of a stream is its.
    #[test]
    fn the_scanner_reads_the_common_chunks() {
        use proptest::strategy::ValueTree;
        use proptest::test_runner::TestRunner;
        let mut runner = TestRunner::deterministic();
        let (mut scanned, mut serde_only, mut escaped) = (0, 0, 0);
        for _ in 0..2_000 {
            let c = chunk().new_tree(&mut runner).unwrap().current();
            match (
                PlainChunk::scan(&c),
                serde_json::from_str::<Obj<PlainChunk>>(&c),
            ) {
                (Some(_), _) if c.contains("\\u00e9") => escaped += 1,
                (Some(_), _) => scanned += 1,
                (None, Ok(_)) => serde_only += 1,
                (None, Err(_)) => {}
            }
        }
        assert!(
            scanned > 200 && escaped > 20 && serde_only < (scanned + escaped) / 4,
            "{scanned} {escaped} {serde_only}"
        );
        for c in [
            r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"a\nb \"c\" \ud83d\ude00"},"logprobs":null,"finish_reason":null}],"usage":null}"#,
            r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}]}"#,
            r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":16,"total_tokens":25}}"#,
        ] {
            let got = PlainChunk::scan(c).expect("scanned");
            assert_eq!(
                Some(got),
                serde_json::from_str::<Obj<PlainChunk>>(c)
                    .ok()
                    .map(|Obj(c)| c)
            );
        }
    }

    /// The generator reaches the plain path and both kinds of fallback, so
    /// the property above compares more than the `Value` path with itself.
    #[test]
    fn the_generated_chunks_take_both_paths() {
        use proptest::strategy::ValueTree;
        use proptest::test_runner::TestRunner;
        let mut runner = TestRunner::deterministic();
        let (mut plain, mut refused, mut not_plain) = (0, 0, 0);
        for _ in 0..2_000 {
            let c = chunk().new_tree(&mut runner).unwrap().current();
            match serde_json::from_str::<Obj<PlainChunk>>(&c) {
                Ok(Obj(p)) if p.is_plain() => plain += 1,
                Ok(_) => not_plain += 1,
                Err(_) => refused += 1,
            }
        }
        assert!(
            plain > 100 && refused > 100 && not_plain > 20,
            "{plain} {refused} {not_plain}"
        );
    }

    /// The documented difference: a field hale does not read, holding a
    /// number out of range or a lone surrogate, makes the `Value` path call
    /// the chunk malformed; the plain path delivers its text.
    #[test]
    fn an_unread_field_out_of_range_does_not_lose_the_text() {
        for odd in ["1e400", "\"\\ud800\""] {
            let c = format!(
                r#"{{"id":"x","system_fingerprint":{odd},"choices":[{{"index":0,"delta":{{"content":"hi"}}}}]}}"#
            );
            assert!(decode_by_tree(&mut StreamDecoder::new(), &c).is_err());
            assert_eq!(
                StreamDecoder::new().decode(None, &c).unwrap(),
                vec![
                    StreamEvent::Start {
                        id: "x".into(),
                        model: String::new()
                    },
                    StreamEvent::TextDelta("hi".into())
                ]
            );
        }
    }
}
