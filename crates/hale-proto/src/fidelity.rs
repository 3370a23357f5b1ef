//! Same-dialect fidelity: what a client sent reaches a provider of its own
//! dialect as it was sent (docs/providers.md, "Same dialect: the client's
//! bytes").
//!
//! The canonical model of [`super`] holds what hale reasons about (roles,
//! text, tool calls, limits); it does not hold everything a dialect can say —
//! `cache_control` on a system or message block, the system prompt as an
//! array of blocks, `thinking`, `metadata`, documents, `response_format`,
//! fields that do not exist yet. Re-rendering from the canonical form would
//! lose those, so a request keeps its [`Origin`]: the client's JSON, the
//! provider-feature headers it sent, and a fingerprint of each canonical
//! message the parser made of each wire message.
//!
//! When the target speaks the request's dialect, [`render_for`] starts from
//! the client's JSON and patches in only what hale changed:
//!
//! - `model`, to the serving target's model;
//! - the messages, when compaction or a nudge changed them: the current
//!   canonical messages are aligned with the original ones by fingerprint,
//!   in order; a wire message whose canonical messages are all still there,
//!   unchanged, is sent as the client's JSON; everything else is rendered
//!   from the canonical form (and, for Anthropic, merged with a neighbour of
//!   the same role, as roles must alternate);
//! - the system prompt, `max_tokens` (after a 504, or Anthropic's required
//!   default), sampling fields and tools, each only when its canonical value
//!   is no longer what was parsed;
//! - an assistant prefill for a mid-stream resume;
//! - `stream` / `stream_options.include_usage` as the attempt needs.
//!
//! An attempt sends [`prepare`]'s [`Prepared`]: the same request, but when
//! hale changed nothing in the body (most turns) the patched JSON is not
//! built at all, only the client's bytes go out; the JSON is built on first
//! read for the providers that rework it (Vertex's Claude body, Bedrock's
//! InvokeModel).
//!
//! Each of those is named in [`Outgoing::changes`], which becomes the
//! attempt's `changes` in the turn's timeline. Crossing dialects, the
//! canonical renderers map what has an equivalent; what has none is named
//! there as `dropped: …` (found by reading the client's JSON for what the
//! other dialect cannot carry). Only the headers of
//! [`FEATURE_HEADERS`] are ever forwarded — never credentials or cookies —
//! and only to a provider of the kind they belong to.

use super::canonical::{ChatRequest, Dialect, Group, Knobs, Message, fingerprint};
use super::{anthropic, bedrock, gemini, openai, responses};
use bytes::Bytes;
use serde_json::{Map, Value, json};
use std::collections::BTreeSet;
use std::ops::Range;

/// What a request keeps of what its client sent, defined beside the
/// [`ChatRequest`] that holds it.
pub use super::canonical::{Origin, Trace};

/// Anthropic's beta-feature header.
pub const ANTHROPIC_BETA: &str = "anthropic-beta";
/// Anthropic's API version header (the client's value wins over hale's default).
pub const ANTHROPIC_VERSION: &str = "anthropic-version";
/// OpenAI's beta-feature header.
pub const OPENAI_BETA: &str = "openai-beta";

/// The provider-feature headers forwarded from a client, each with the
/// dialect of the providers it is forwarded to.
pub const FEATURE_HEADERS: &[(&str, Dialect)] = &[
    (ANTHROPIC_BETA, Dialect::Anthropic),
    (ANTHROPIC_VERSION, Dialect::Anthropic),
    (OPENAI_BETA, Dialect::OpenAi),
    (OPENAI_BETA, Dialect::Responses),
];

/// The most `dropped: …` notes one attempt lists (the rest are counted).
const MAX_NOTES: usize = 24;
/// The most characters of a client-chosen name (a field, a block type) in a note.
const MAX_NAME_CHARS: usize = 64;

/// The provider-feature headers of [`FEATURE_HEADERS`] in a client's
/// request; repeated headers are joined with `,` (as HTTP allows).
pub fn feature_headers(h: &http::HeaderMap) -> Vec<(&'static str, String)> {
    // Named once: a `&str` name is parsed again at every lookup.
    static NAMES: std::sync::LazyLock<Vec<(&str, http::HeaderName)>> =
        std::sync::LazyLock::new(|| {
            FEATURE_HEADERS
                .iter()
                .map(|(name, _)| (*name, http::HeaderName::from_static(name)))
                .collect()
        });
    let mut out: Vec<(&'static str, String)> = Vec::new();
    for (name, header) in NAMES.iter() {
        if out.iter().any(|(n, _)| n == name) {
            continue;
        }
        let values: Vec<&str> = h
            .get_all(header)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .collect();
        if !values.is_empty() {
            out.push((*name, values.join(",")));
        }
    }
    out
}

/// A request ready for one provider.
#[derive(Debug, Clone, PartialEq)]
pub struct Outgoing {
    pub body: Value,
    /// The client's own bytes of `body`, when hale changed nothing in it
    /// (same dialect, no change of the body in `changes`): sent as they
    /// are, so the provider gets exactly what the client wrote (key order,
    /// number spelling) and the body is not serialised again per attempt.
    /// An OpenAI stream whose only change is `stream_options` (hale asks
    /// for usage) gets the client's bytes with that field spliced in
    /// ([`openai::with_usage`]). Equal to `body` as JSON
    /// (`a_raw_body_is_the_patched_body`).
    pub raw: Option<Bytes>,
    /// Headers to send besides hale's own (auth, content type).
    pub headers: Vec<(&'static str, String)>,
    /// What hale changed or dropped from what the client sent, for the timeline.
    pub changes: Vec<String>,
}

/// Renders `req` for a provider speaking `target`, serving `model`, with
/// `prefill` (delivered text to continue from) when given. See the module
/// documentation for what is kept, patched and dropped.
pub fn render_for(
    target: Dialect,
    req: &ChatRequest,
    model: &str,
    prefill: Option<&str>,
) -> Outgoing {
    let Some(origin) = req.origin.as_deref() else {
        return Outgoing {
            body: canonical(target, req, model, prefill),
            raw: None,
            headers: Vec::new(),
            changes: Vec::new(),
        };
    };
    let mut changes = origin.notes.clone();
    let (body, raw) = if origin.dialect == target {
        let body = match target {
            Dialect::OpenAi => patch_openai(origin, req, model, prefill, &mut changes),
            Dialect::Anthropic => patch_anthropic(origin, req, model, prefill, &mut changes),
            Dialect::Responses => patch_responses(origin, req, model, prefill, &mut changes),
            Dialect::Gemini => patch_gemini(origin, req, model, prefill, &mut changes),
            // No client speaks Converse: rendered from the canonical form.
            Dialect::Bedrock => canonical(target, req, model, prefill),
        };
        // Every patch names itself in `changes`: none named, none made.
        let raw = if changes.is_empty() {
            origin.raw.clone()
        } else if target == Dialect::OpenAi && changes == [USAGE_CHANGE] {
            with_usage(origin)
        } else {
            None
        };
        (body, raw)
    } else {
        crossing_changes(origin, req, target, model, prefill, &mut changes);
        (canonical(target, req, model, prefill), None)
    };
    let headers = forwarded(origin, target, &mut changes);
    Outgoing {
        body,
        raw,
        headers,
        changes,
    }
}

/// The client's provider-feature headers that go to a provider speaking
/// `target`; the others are named in `changes` as dropped.
fn forwarded(
    origin: &Origin,
    target: Dialect,
    changes: &mut Vec<String>,
) -> Vec<(&'static str, String)> {
    let mut headers = Vec::new();
    for (name, value) in &origin.headers {
        let belongs = FEATURE_HEADERS
            .iter()
            .any(|(n, d)| n == name && *d == target);
        if belongs {
            headers.push((*name, value.clone()));
        } else {
            changes.push(format!("dropped: {name} header"));
        }
    }
    headers
}

/// [`render_for`]'s request, as an attempt sends it: `raw`, `headers` and
/// `changes` are [`Outgoing`]'s, the body's JSON is built on first read
/// ([`Prepared::body`]).
#[derive(Debug)]
pub struct Prepared<'a> {
    /// [`Outgoing::raw`].
    pub raw: Option<Bytes>,
    /// [`Outgoing::headers`].
    pub headers: Vec<(&'static str, String)>,
    /// [`Outgoing::changes`].
    pub changes: Vec<String>,
    body: Body<'a>,
}

/// A [`Prepared`] request's body: built, or to be built when read.
#[derive(Debug)]
enum Body<'a> {
    Built(Value),
    /// Nothing changed: the client's bytes are `raw`; the JSON (the same
    /// value [`render_for`] builds) is built on first read.
    Unchanged {
        target: Dialect,
        req: &'a ChatRequest,
        model: &'a str,
        json: std::sync::OnceLock<Value>,
    },
}

impl Prepared<'_> {
    /// The body as JSON: [`Outgoing::body`].
    pub fn body(&self) -> &Value {
        match &self.body {
            Body::Built(v) => v,
            Body::Unchanged {
                target,
                req,
                model,
                json,
            } => json.get_or_init(|| render_for(*target, req, model, None).body),
        }
    }
}

/// [`render_for`] for an attempt: when hale changed nothing in the body
/// ([`unchanged`]), or only `stream_options` for an OpenAI stream, the
/// patched JSON is left unbuilt (~5k instructions per turn under
/// callgrind: the client's body copied field by field, its messages
/// cloned) and only the client's bytes go out (that field spliced in).
pub fn prepare<'a>(
    target: Dialect,
    req: &'a ChatRequest,
    model: &'a str,
    prefill: Option<&str>,
) -> Prepared<'a> {
    if prefill.is_none()
        && let Some(origin) = req.origin.as_deref()
    {
        let same = match unchanged(origin, req, target, model) {
            Same::Body => Some((origin.raw.clone(), Vec::new())),
            // Only when the field splices in: else the patch's JSON goes.
            Same::BodyButUsage => {
                with_usage(origin).map(|raw| (Some(raw), vec![USAGE_CHANGE.to_owned()]))
            }
            Same::No => None,
        };
        if let Some((raw, mut changes)) = same {
            let headers = forwarded(origin, target, &mut changes);
            return Prepared {
                raw,
                headers,
                changes,
                body: Body::Unchanged {
                    target,
                    req,
                    model,
                    json: std::sync::OnceLock::new(),
                },
            };
        }
    }
    let out = render_for(target, req, model, prefill);
    Prepared {
        raw: out.raw,
        headers: out.headers,
        changes: out.changes,
        body: Body::Built(out.body),
    }
}

/// The change an OpenAI stream's patch names when it adds
/// `stream_options.include_usage` (hale asks for usage on every stream).
const USAGE_CHANGE: &str = "stream_options";

/// The client's bytes with `stream_options.include_usage` spliced in, for
/// a patch that named [`USAGE_CHANGE`] alone.
fn with_usage(origin: &Origin) -> Option<Bytes> {
    openai::with_usage(origin.raw.as_deref()?, &origin.body)
}

/// What [`unchanged`] found of the same-dialect patch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Same {
    /// It would name no change: the body is the client's.
    Body,
    /// It would name only [`USAGE_CHANGE`] (an OpenAI stream that did not
    /// ask for usage): the body is the client's with that field set.
    BodyButUsage,
    /// Not known here: [`render_for`] decides.
    No,
}

/// Whether the same-dialect patch for `target` (no prefill) would name no
/// change, so the body is the client's, or only [`USAGE_CHANGE`]: each
/// condition is one a patch checks before it names a change. Sufficient,
/// not necessary: [`Same::No`] only means [`render_for`] decides (for
/// OpenAI and Anthropic clients' bodies; the other dialects always). The
/// property test `a_prepared_request_is_the_rendered_one` holds it to the
/// patches.
fn unchanged(origin: &Origin, req: &ChatRequest, target: Dialect, model: &str) -> Same {
    let body = &origin.body;
    let yes = Some(&Value::Bool(true));
    let mut usage = true;
    let wire = match target {
        Dialect::OpenAi => {
            origin.model == model
                && if req.stream {
                    usage = body
                        .get("stream_options")
                        .and_then(|o| o.get("include_usage"))
                        == yes;
                    body.get("stream") == yes
                } else {
                    !origin.stream
                }
        }
        Dialect::Anthropic => {
            origin.model == model
                && body.contains_key("max_tokens")
                && req.stream == origin.stream
                && (!req.stream || body.get("stream") == yes)
        }
        // Left to the patches: Responses' string `input` and runs of
        // items; Gemini's `generationConfig` (no property test holds a
        // Gemini client's body to it yet); no client speaks Converse.
        Dialect::Responses | Dialect::Gemini | Dialect::Bedrock => false,
    };
    let same = wire
        && origin.dialect == target
        && origin.notes.is_empty()
        && req.system == origin.system
        && req.max_tokens == origin.max_tokens
        && Knobs::of(req) == origin.knobs
        && req.messages == origin.parsed
        && aligned_as_parsed(&origin.groups, origin.parsed.len());
    match (same, usage) {
        (true, true) => Same::Body,
        (true, false) => Same::BodyButUsage,
        (false, _) => Same::No,
    }
}

/// Whether [`align`] finds nothing changed in `n` messages that are the
/// parsed ones: each group (of those [`align_keys`] looks for) starts
/// where the last ended and the last ends at `n`. Read off the groups,
/// without building [`align`]'s keys and pieces (~1k instructions a turn).
fn aligned_as_parsed(groups: &[Group], n: usize) -> bool {
    let mut i = 0;
    for g in groups {
        // An empty or out-of-range group is found wherever the walk is.
        if g.msgs.is_empty() || g.msgs.end > n {
            continue;
        }
        if g.msgs.start != i {
            return false;
        }
        i = g.msgs.end;
    }
    i == n
}

fn canonical(target: Dialect, req: &ChatRequest, model: &str, prefill: Option<&str>) -> Value {
    match target {
        Dialect::OpenAi => openai::render_request(req, model, prefill),
        Dialect::Anthropic => anthropic::render_request(req, model, prefill),
        Dialect::Responses => responses::render_request(req, model, prefill),
        Dialect::Gemini => gemini::render_request(req, model, prefill),
        Dialect::Bedrock => bedrock::render_request(req, model, prefill),
    }
}

/// A piece of the outgoing conversation.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    /// The client's wire message at this index, as sent.
    Wire(usize),
    /// These current canonical messages, rendered by hale.
    New(Range<usize>),
}

/// Aligns the current messages with the parsed groups, in order: a group
/// found whole (at or after the current position) is kept as the client's
/// JSON; messages between kept groups are new. Returns the pieces and
/// whether anything differs from what the client sent.
fn align(origin: &Origin, current: &[Message]) -> (Vec<Piece>, bool) {
    if current == origin.parsed.as_slice() {
        // Nothing changed: each message is its own key, so every group is
        // found where it was parsed (as equal fingerprints would find it).
        let keys: Vec<u64> = (0..current.len() as u64).collect();
        return align_keys(&origin.groups, &keys, &keys);
    }
    let parsed: Vec<u64> = origin.parsed.iter().map(fingerprint).collect();
    let cur: Vec<u64> = current.iter().map(fingerprint).collect();
    align_keys(&origin.groups, &parsed, &cur)
}

/// [`align`] over keys: `parsed[i]` / `cur[i]` stand for the parsed and the
/// current message `i`; equal keys are equal messages.
fn align_keys(groups: &[Group], parsed: &[u64], cur: &[u64]) -> (Vec<Piece>, bool) {
    let mut pieces = Vec::new();
    let mut i = 0;
    let mut kept = 0;
    for g in groups {
        let msgs = parsed.get(g.msgs.clone()).unwrap_or(&[]);
        let len = msgs.len();
        if i + len > cur.len() {
            continue;
        }
        let found = (i..=cur.len() - len).find(|&k| cur[k..k + len] == *msgs);
        if let Some(k) = found {
            if k > i {
                pieces.push(Piece::New(i..k));
            }
            pieces.push(Piece::Wire(g.wire));
            kept += 1;
            i = k + len;
        }
    }
    if i < cur.len() {
        pieces.push(Piece::New(i..cur.len()));
    }
    let changed = kept != groups.len() || pieces.iter().any(|p| matches!(p, Piece::New(_)));
    (pieces, changed)
}

/// The changed sampling fields and tools, rendered canonically into `body`.
fn patch_knobs(
    origin: &Origin,
    req: &ChatRequest,
    fields: [&'static str; 5],
    render: impl FnOnce() -> Value,
    body: &mut Map<String, Value>,
    changes: &mut Vec<String>,
) {
    let now = Knobs::of(req);
    if now == origin.knobs {
        return;
    }
    let was = origin.knobs;
    let changed = [
        now.temperature != was.temperature,
        now.top_p != was.top_p,
        now.stop != was.stop,
        now.tools != was.tools,
        now.tool_choice != was.tool_choice,
    ];
    let full = render();
    for (field, changed) in fields.into_iter().zip(changed) {
        if !changed {
            continue;
        }
        match full.get(field) {
            Some(v) => body.insert(field.to_owned(), v.clone()),
            None => body.remove(field),
        };
        changes.push(field.to_owned());
        // The tool choice goes with the tools it names.
        if field == fields[3] {
            match full.get(fields[4]) {
                Some(v) => body.insert(fields[4].to_owned(), v.clone()),
                None => body.remove(fields[4]),
            };
        }
    }
}

/// `model`, when the serving target's differs from the client's.
fn patch_model(
    origin: &Origin,
    model: &str,
    body: &mut Map<String, Value>,
    changes: &mut Vec<String>,
) {
    if origin.model != model {
        changes.push("model".into());
    }
    body.insert("model".into(), json!(model));
}

/// An OpenAI request for an OpenAI provider: the client's JSON, patched.
fn patch_openai(
    origin: &Origin,
    req: &ChatRequest,
    model: &str,
    prefill: Option<&str>,
    changes: &mut Vec<String>,
) -> Value {
    let mut body = origin.body_but_messages();
    patch_model(origin, model, &mut body, changes);

    let wire = origin.wire_messages();
    let mut messages = Vec::with_capacity(wire.len() + 1);
    if req.system == origin.system {
        messages.extend(wire.iter().take(origin.lifted).cloned());
    } else {
        if let Some(s) = req.system.as_deref().filter(|s| !s.is_empty()) {
            messages.push(json!({"role": "system", "content": s}));
        }
        changes.push("system".into());
    }
    let (pieces, changed) = align(origin, &req.messages);
    for p in pieces {
        match p {
            Piece::Wire(i) => messages.extend(wire.get(i).cloned()),
            Piece::New(r) => {
                for m in &req.messages[r] {
                    openai::render_message(m, &mut messages);
                }
            }
        }
    }
    if changed {
        changes.push("messages".into());
    }
    if let Some(p) = prefill.filter(|p| !p.is_empty()) {
        messages.push(json!({"role": "assistant", "content": p}));
        changes.push("prefill".into());
    }
    body.insert("messages".into(), Value::Array(messages));

    if req.max_tokens != origin.max_tokens {
        let key = if body.contains_key("max_completion_tokens") {
            "max_completion_tokens"
        } else {
            "max_tokens"
        };
        match req.max_tokens {
            Some(n) => body.insert(key.into(), json!(n)),
            None => body.remove(key),
        };
        changes.push("max_tokens".into());
    }
    patch_knobs(
        origin,
        req,
        ["temperature", "top_p", "stop", "tools", "tool_choice"],
        || openai::render_request(req, model, None),
        &mut body,
        changes,
    );
    if req.stream {
        if body.get("stream") != Some(&Value::Bool(true)) {
            body.insert("stream".into(), json!(true));
            changes.push("stream".into());
        }
        if openai::ask_for_usage(&mut body) {
            changes.push(USAGE_CHANGE.into());
        }
    } else if origin.stream {
        body.remove("stream");
        body.remove("stream_options");
        changes.push("stream".into());
    }
    Value::Object(body)
}

/// An Anthropic message being assembled: its JSON, and the wire index it
/// is when it is the client's message untouched.
struct Entry {
    value: Value,
    wire: Option<usize>,
}

fn role_of(v: &Value) -> &str {
    v.get("role").and_then(Value::as_str).unwrap_or("")
}

/// Content as blocks (a string becomes one text block; empty, none).
fn blocks(content: Option<&Value>) -> Vec<Value> {
    match content {
        Some(Value::String(s)) => anthropic::text_block(s).into_iter().collect(),
        Some(Value::Array(a)) => a.clone(),
        Some(Value::Null | Value::Bool(_) | Value::Number(_) | Value::Object(_)) | None => {
            Vec::new()
        }
    }
}

/// Appends `e` to the conversation, merged into the last message when both
/// have the same role and were not already neighbours in the client's
/// request (Anthropic requires alternating roles; what the client sent
/// itself is left as it was).
fn push_entry(out: &mut Vec<Entry>, e: Entry) {
    if let Some(last) = out.last_mut()
        && role_of(&last.value) == role_of(&e.value)
    {
        let neighbours = matches!((last.wire, e.wire), (Some(a), Some(b)) if b == a + 1);
        if !neighbours {
            let mut merged = blocks(last.value.get("content"));
            merged.extend(blocks(e.value.get("content")));
            if role_of(&last.value) == "user" {
                // tool_result blocks must open a user message.
                merged
                    .sort_by_key(|b| b.get("type").and_then(Value::as_str) != Some("tool_result"));
            }
            if let Some(o) = last.value.as_object_mut() {
                o.insert("content".into(), Value::Array(merged));
            }
            last.wire = None;
            return;
        }
    }
    out.push(e);
}

/// An Anthropic request for an Anthropic provider: the client's JSON, patched.
fn patch_anthropic(
    origin: &Origin,
    req: &ChatRequest,
    model: &str,
    prefill: Option<&str>,
    changes: &mut Vec<String>,
) -> Value {
    let mut body = origin.body_but_messages();
    patch_model(origin, model, &mut body, changes);

    if req.system != origin.system {
        match req.system.as_deref().filter(|s| !s.is_empty()) {
            Some(s) => body.insert("system".into(), json!(s)),
            None => body.remove("system"),
        };
        changes.push("system".into());
    }

    let wire = origin.wire_messages();
    let (pieces, changed) = align(origin, &req.messages);
    let mut entries: Vec<Entry> = Vec::with_capacity(wire.len() + 1);
    for p in pieces {
        match p {
            Piece::Wire(i) => {
                if let Some(v) = wire.get(i) {
                    push_entry(
                        &mut entries,
                        Entry {
                            value: v.clone(),
                            wire: Some(i),
                        },
                    );
                }
            }
            Piece::New(r) => {
                for m in &req.messages[r] {
                    let (role, blocks) = anthropic::turn_of(m);
                    if blocks.is_empty() {
                        continue;
                    }
                    push_entry(
                        &mut entries,
                        Entry {
                            value: json!({"role": role, "content": blocks}),
                            wire: None,
                        },
                    );
                }
            }
        }
    }
    if changed {
        changes.push("messages".into());
    }
    if let Some(p) = prefill
        && let Some(b) = anthropic::text_block(anthropic::effective_prefill(p))
    {
        push_entry(
            &mut entries,
            Entry {
                value: json!({"role": "assistant", "content": [b]}),
                wire: None,
            },
        );
        changes.push("prefill".into());
    }
    body.insert(
        "messages".into(),
        Value::Array(entries.into_iter().map(|e| e.value).collect()),
    );

    if req.max_tokens != origin.max_tokens || !body.contains_key("max_tokens") {
        body.insert(
            "max_tokens".into(),
            json!(req.max_tokens.unwrap_or(anthropic::DEFAULT_MAX_TOKENS)),
        );
        changes.push("max_tokens".into());
    }
    patch_knobs(
        origin,
        req,
        [
            "temperature",
            "top_p",
            "stop_sequences",
            "tools",
            "tool_choice",
        ],
        || anthropic::render_request(req, model, None),
        &mut body,
        changes,
    );
    if req.stream != origin.stream || (req.stream && body.get("stream") != Some(&json!(true))) {
        if req.stream {
            body.insert("stream".into(), json!(true));
        } else {
            body.remove("stream");
        }
        changes.push("stream".into());
    }
    Value::Object(body)
}

/// A Responses request for a Responses provider: the client's JSON, patched.
///
/// Input items are kept as sent where their canonical messages are
/// unchanged; a run of assistant-side items folded into one canonical
/// message is kept or re-rendered whole. A string `input` stays a string
/// unless the conversation changed.
fn patch_responses(
    origin: &Origin,
    req: &ChatRequest,
    model: &str,
    prefill: Option<&str>,
    changes: &mut Vec<String>,
) -> Value {
    let mut body = origin.body_but_messages();
    patch_model(origin, model, &mut body, changes);
    let custom = responses::custom_tools(req);

    let wire = origin.wire_messages();
    let mut input: Vec<Value> = Vec::with_capacity(wire.len() + 1);
    if req.system == origin.system {
        input.extend(wire.iter().take(origin.lifted).cloned());
    } else {
        // The whole system prompt goes in `instructions` (leading
        // developer messages it was read from are not sent again).
        match req.system.as_deref().filter(|s| !s.is_empty()) {
            Some(s) => body.insert("instructions".into(), json!(s)),
            None => body.remove("instructions"),
        };
        changes.push("system".into());
    }
    let (pieces, changed) = align(origin, &req.messages);
    let string_input = origin.body.get("input").filter(|v| v.is_string());
    if let (Some(s), false) = (string_input, changed) {
        if prefill.is_none_or(str::is_empty) {
            body.insert("input".into(), s.clone());
        } else {
            input.push(json!({"type": "message", "role": "user", "content": s}));
        }
    } else if string_input.is_some() {
        for m in &req.messages {
            responses::render_message(m, &custom, &mut input);
        }
    } else {
        for p in pieces {
            match p {
                Piece::Wire(i) => {
                    if responses::continues_run(wire, i) {
                        continue;
                    }
                    input.extend(wire.get(i).cloned());
                    let mut j = i + 1;
                    while j < wire.len() && responses::continues_run(wire, j) {
                        input.push(wire[j].clone());
                        j += 1;
                    }
                }
                Piece::New(r) => {
                    for m in &req.messages[r] {
                        responses::render_message(m, &custom, &mut input);
                    }
                }
            }
        }
    }
    if changed {
        changes.push("messages".into());
    }
    if let Some(p) = prefill.filter(|p| !p.is_empty()) {
        input.push(json!({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": p, "annotations": []}]}));
        changes.push("prefill".into());
    }
    if !body.contains_key("input") {
        body.insert("input".into(), Value::Array(input));
    }

    if req.max_tokens != origin.max_tokens {
        match req.max_tokens {
            Some(n) => body.insert("max_output_tokens".into(), json!(n)),
            None => body.remove("max_output_tokens"),
        };
        changes.push("max_tokens".into());
    }
    patch_knobs(
        origin,
        req,
        ["temperature", "top_p", "stop", "tools", "tool_choice"],
        || responses::render_request(req, model, None),
        &mut body,
        changes,
    );
    if req.stream != origin.stream || (req.stream && body.get("stream") != Some(&json!(true))) {
        if req.stream {
            body.insert("stream".into(), json!(true));
        } else {
            body.remove("stream");
        }
        changes.push("stream".into());
    }
    Value::Object(body)
}

/// A Gemini request for a Gemini provider: the client's JSON, patched.
///
/// The model and whether to stream are in the URL, not the body, so
/// neither is patched: the client's bytes go as they are when hale changed
/// nothing else. `generationConfig` keeps every field the client set;
/// only the canonical ones hale changed are written into it.
fn patch_gemini(
    origin: &Origin,
    req: &ChatRequest,
    model: &str,
    prefill: Option<&str>,
    changes: &mut Vec<String>,
) -> Value {
    let mut body = origin.body_but_messages();
    if req.system != origin.system {
        match req.system.as_deref().filter(|s| !s.is_empty()) {
            Some(s) => body.insert("systemInstruction".into(), json!({"parts": [{"text": s}]})),
            None => body.remove("systemInstruction"),
        };
        changes.push("system".into());
    }
    let wire = origin.wire_messages();
    let (pieces, changed) = align(origin, &req.messages);
    let names = gemini::tool_names(&req.messages);
    let mut contents: Vec<Value> = Vec::with_capacity(wire.len() + 1);
    for p in pieces {
        match p {
            Piece::Wire(i) => contents.extend(wire.get(i).cloned()),
            Piece::New(r) => {
                for m in &req.messages[r] {
                    // Later system messages (a nudge) are user text in place.
                    gemini::render_message(m, &names, &mut contents);
                }
            }
        }
    }
    if changed {
        changes.push("messages".into());
    }
    if let Some(p) = prefill.filter(|p| !p.is_empty()) {
        contents.push(json!({"role": "model", "parts": [{"text": p}]}));
        changes.push("prefill".into());
    }
    body.insert("contents".into(), Value::Array(contents));

    let mut config = match body.remove("generationConfig") {
        Some(Value::Object(g)) => g,
        Some(_) | None => Map::new(),
    };
    if req.max_tokens != origin.max_tokens {
        match req.max_tokens {
            Some(n) => config.insert("maxOutputTokens".into(), json!(n)),
            None => config.remove("maxOutputTokens"),
        };
        changes.push("max_tokens".into());
    }
    let now = Knobs::of(req);
    if now != origin.knobs {
        let was = origin.knobs;
        let full = gemini::render_request(req, model, None);
        let gen_full = full.get("generationConfig");
        for (changed, key, name) in [
            (
                now.temperature != was.temperature,
                "temperature",
                "temperature",
            ),
            (now.top_p != was.top_p, "topP", "top_p"),
            (now.stop != was.stop, "stopSequences", "stop"),
        ] {
            if changed {
                match gen_full.and_then(|g| g.get(key)) {
                    Some(v) => config.insert(key.into(), v.clone()),
                    None => config.remove(key),
                };
                changes.push(name.into());
            }
        }
        for (changed, key, name) in [
            (now.tools != was.tools, "tools", "tools"),
            (
                now.tool_choice != was.tool_choice,
                "toolConfig",
                "tool_choice",
            ),
        ] {
            if changed {
                match full.get(key) {
                    Some(v) => body.insert(key.into(), v.clone()),
                    None => body.remove(key),
                };
                changes.push(name.into());
            }
        }
    }
    if !config.is_empty() {
        body.insert("generationConfig".into(), Value::Object(config));
    }
    Value::Object(body)
}

/// Top-level fields of a Gemini request the canonical model carries.
const GEMINI_MAPPED: &[&str] = &[
    "contents",
    "systemInstruction",
    "tools",
    "toolConfig",
    "generationConfig",
];

/// What a Gemini request loses on its way to a provider of another
/// dialect: `safetySettings`, `cachedContent` and every other field the
/// canonical model does not carry, `generationConfig` fields other than the
/// limits and sampling (`topK`, `responseSchema`, `thinkingConfig`, …),
/// tools other than function declarations (`googleSearch`,
/// `codeExecution`, …), thought parts, `thoughtSignature`s and the parts
/// with no form elsewhere (non-image data, code).
fn gemini_losses(origin: &Origin, dropped: &mut BTreeSet<String>) {
    let b = &origin.body;
    for k in b.keys() {
        if !GEMINI_MAPPED.contains(&k.as_str()) {
            note(dropped, k);
        }
    }
    if let Some(Value::Object(g)) = b.get("generationConfig") {
        for k in g.keys() {
            if !gemini::GENERATION_MAPPED.contains(&k.as_str()) {
                note(dropped, &format!("generationConfig.{k}"));
            }
        }
    }
    if let Some(Value::Array(tools)) = b.get("tools") {
        for t in tools {
            if let Some(o) = t.as_object() {
                for k in o.keys().filter(|k| *k != "functionDeclarations") {
                    note(dropped, &format!("tools[].{k}"));
                }
            }
        }
    }
    if let Some(names) = b
        .get("toolConfig")
        .and_then(|t| t.get("functionCallingConfig"))
        .and_then(|f| f.get("allowedFunctionNames"))
        .and_then(Value::as_array)
        && names.len() > 1
    {
        note(
            dropped,
            "toolConfig.functionCallingConfig.allowedFunctionNames",
        );
    }
    for c in origin.wire_messages() {
        let Some(Value::Array(parts)) = c.get("parts") else {
            continue;
        };
        for part in parts {
            let Some(o) = part.as_object() else { continue };
            if o.contains_key("thoughtSignature") {
                note(dropped, "thoughtSignature");
            }
            if o.get("thought").and_then(Value::as_bool) == Some(true) {
                note(dropped, "thought part");
                continue;
            }
            for k in o.keys() {
                match k.as_str() {
                    "text" | "functionCall" | "functionResponse" | "thought"
                    | "thoughtSignature" => {}
                    "inlineData" | "fileData" => {
                        let image = o
                            .get(k)
                            .and_then(|d| d.get("mimeType"))
                            .and_then(Value::as_str)
                            .is_some_and(|m| m.starts_with("image/"));
                        if !image {
                            note(dropped, &format!("{k} part (not an image)"));
                        }
                    }
                    other => note(dropped, &format!("{other} part")),
                }
            }
        }
    }
}

/// What crossing dialects changes: hale's own changes (model, limits,
/// messages, prefill) and what the client sent that the target's dialect
/// cannot carry (`dropped: …`).
fn crossing_changes(
    origin: &Origin,
    req: &ChatRequest,
    target: Dialect,
    model: &str,
    prefill: Option<&str>,
    changes: &mut Vec<String>,
) {
    if origin.model != model {
        changes.push("model".into());
    }
    let max_added = target == Dialect::Anthropic && req.max_tokens.is_none();
    if req.max_tokens != origin.max_tokens || max_added {
        changes.push("max_tokens".into());
    }
    if req.system != origin.system {
        changes.push("system".into());
    }
    if align(origin, &req.messages).1 {
        changes.push("messages".into());
    }
    if prefill.is_some_and(|p| !p.trim().is_empty()) {
        changes.push("prefill".into());
    }
    let mut dropped = BTreeSet::new();
    match origin.dialect {
        Dialect::Anthropic => anthropic_losses(origin, target, &mut dropped),
        Dialect::OpenAi => openai_losses(origin, req, &mut dropped),
        Dialect::Responses => responses_losses(origin, target, &mut dropped),
        Dialect::Gemini => gemini_losses(origin, &mut dropped),
        // No client speaks Converse.
        Dialect::Bedrock => {}
    }
    if target == Dialect::Bedrock {
        bedrock_losses(origin, req, &mut dropped);
    }
    if target == Dialect::Gemini {
        // Mapped into `generationConfig` (JSON answers, thinking).
        dropped.retain(|n| {
            !n.strip_prefix("dropped: ")
                .is_some_and(|k| gemini::carries(origin.dialect, k))
        });
        if req.stop.len() > gemini::MAX_STOP_SEQUENCES {
            note(&mut dropped, "stop sequences past the fifth");
        }
        if req.tool_choice.as_ref().is_some_and(|tc| {
            tc.as_object()
                .is_some_and(|o| o.get("type").and_then(Value::as_str) == Some("allowed_tools"))
        }) {
            note(&mut dropped, "tool_choice");
        }
    }
    // The Responses API has no stop sequences.
    if target == Dialect::Responses && !req.stop.is_empty() {
        note(&mut dropped, "stop sequences");
    }
    let n = dropped.len();
    changes.extend(dropped.into_iter().take(MAX_NOTES));
    if n > MAX_NOTES {
        changes.push(format!("dropped: {} more", n - MAX_NOTES));
    }
}

fn note(dropped: &mut BTreeSet<String>, what: &str) {
    let what: String = what.chars().take(MAX_NAME_CHARS).collect();
    dropped.insert(format!("dropped: {what}"));
}

/// What Converse has no form for: `tool_choice: none` (Converse has no
/// such choice, so the tools are left out) and images given by URL
/// (Converse takes inline bytes only).
fn bedrock_losses(origin: &Origin, req: &ChatRequest, dropped: &mut BTreeSet<String>) {
    if !req.tools.is_empty() && req.tool_choice.as_ref().and_then(Value::as_str) == Some("none") {
        note(dropped, "tools (Converse has no tool_choice none)");
    }
    let by_url = |v: &Value| {
        v.as_str()
            .or_else(|| v.get("url").and_then(Value::as_str))
            .is_some_and(|u| !u.starts_with("data:"))
    };
    let url_image = origin.wire_messages().iter().any(|m| {
        m.get("content")
            .and_then(Value::as_array)
            .is_some_and(|parts| {
                parts.iter().any(|p| {
                    p.get("image_url").is_some_and(by_url)
                        || p.get("source")
                            .is_some_and(|s| s.get("type").and_then(Value::as_str) == Some("url"))
                })
            })
    });
    if url_image {
        note(dropped, "image by URL (Converse takes inline images only)");
    }
}

fn has_key_deep(v: &Value, key: &str) -> bool {
    match v {
        Value::Object(o) => o.contains_key(key) || o.values().any(|x| has_key_deep(x, key)),
        Value::Array(a) => a.iter().any(|x| has_key_deep(x, key)),
        Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_) => false,
    }
}

/// Top-level fields the canonical model carries across dialects.
const ANTHROPIC_MAPPED: &[&str] = &[
    "model",
    "messages",
    "system",
    "max_tokens",
    "temperature",
    "top_p",
    "stop_sequences",
    "stream",
    "tools",
    "tool_choice",
];

/// What an Anthropic request loses on its way to a provider of another
/// dialect (`target`: Gemini and Converse carry a tool result's error mark,
/// OpenAI's dialects do not).
fn anthropic_losses(origin: &Origin, target: Dialect, dropped: &mut BTreeSet<String>) {
    let b = &origin.body;
    for k in b.keys() {
        if !ANTHROPIC_MAPPED.contains(&k.as_str()) {
            note(dropped, k);
        }
    }
    for k in ["system", "messages", "tools"] {
        if b.get(k).is_some_and(|v| has_key_deep(v, "cache_control")) {
            note(dropped, "cache_control");
        }
    }
    if let Some(Value::Array(sys)) = b.get("system")
        && sys.len() > 1
    {
        // Several system blocks become one system message.
        dropped.insert("changed: system blocks joined".into());
    }
    if b.get("tool_choice")
        .and_then(|t| t.get("disable_parallel_tool_use"))
        .is_some()
    {
        note(dropped, "tool_choice.disable_parallel_tool_use");
    }
    for m in origin.wire_messages() {
        let Some(Value::Array(content)) = m.get("content") else {
            continue;
        };
        for block in content {
            let ty = block.get("type").and_then(Value::as_str).unwrap_or("");
            match ty {
                "text" | "tool_use" => {}
                "image" => {
                    if openai::image_from_anthropic(block).is_none() {
                        note(dropped, "image block (source without an OpenAI form)");
                    }
                }
                "tool_result" => {
                    let error_mark = matches!(target, Dialect::Gemini | Dialect::Bedrock);
                    if block.get("is_error") == Some(&Value::Bool(true)) && !error_mark {
                        note(dropped, "tool_result.is_error");
                    }
                    if let Some(Value::Array(inner)) = block.get("content") {
                        for ib in inner {
                            let it = ib.get("type").and_then(Value::as_str).unwrap_or("");
                            if it != "text" {
                                note(dropped, &format!("{it} block in tool_result"));
                            }
                        }
                    }
                }
                other => note(dropped, &format!("{other} block")),
            }
        }
    }
}

/// Top-level fields the canonical model carries across dialects.
const OPENAI_MAPPED: &[&str] = &[
    "model",
    "messages",
    "tools",
    "tool_choice",
    "max_tokens",
    "max_completion_tokens",
    "temperature",
    "top_p",
    "stop",
    "stream",
    "stream_options",
];

/// Message fields the canonical model carries across dialects.
const OPENAI_MESSAGE_MAPPED: &[&str] = &["role", "content", "tool_calls", "tool_call_id"];

/// What an OpenAI request loses on its way to an Anthropic provider.
fn openai_losses(origin: &Origin, req: &ChatRequest, dropped: &mut BTreeSet<String>) {
    let b = &origin.body;
    for k in b.keys() {
        if !OPENAI_MAPPED.contains(&k.as_str()) {
            note(dropped, k);
        }
    }
    if let Some(Value::Object(so)) = b.get("stream_options") {
        for k in so.keys().filter(|k| *k != "include_usage") {
            note(dropped, &format!("stream_options.{k}"));
        }
    }
    if req.temperature.is_some_and(|t| !(0.0..=1.0).contains(&t)) {
        dropped.insert("changed: temperature clamped to 0–1".into());
    }
    if let Some(Value::Object(tc)) = b.get("tool_choice")
        && tc.get("type").and_then(Value::as_str) != Some("function")
    {
        note(dropped, "tool_choice");
    }
    if let Some(Value::Array(tools)) = b.get("tools") {
        for t in tools {
            if let Some(Value::Object(f)) = t.get("function") {
                for k in f.keys() {
                    if !["name", "description", "parameters"].contains(&k.as_str()) {
                        note(dropped, &format!("tools[].function.{k}"));
                    }
                }
            }
        }
    }
    for m in origin.wire_messages() {
        let Some(mo) = m.as_object() else { continue };
        for k in mo.keys() {
            if !OPENAI_MESSAGE_MAPPED.contains(&k.as_str()) {
                note(dropped, &format!("messages[].{k}"));
            }
        }
        let assistant = mo.get("role").and_then(Value::as_str) == Some("assistant");
        let Some(Value::Array(parts)) = mo.get("content") else {
            continue;
        };
        for part in parts {
            let ty = part.get("type").and_then(Value::as_str).unwrap_or("");
            match ty {
                "text" => {}
                "image_url" if !assistant => {
                    if part
                        .get("image_url")
                        .and_then(|i| i.get("detail"))
                        .is_some()
                    {
                        note(dropped, "image_url.detail");
                    }
                    if anthropic::image_from_openai(part).is_none() {
                        note(dropped, "image_url part (URL without an Anthropic form)");
                    }
                }
                other => note(dropped, &format!("{other} part")),
            }
        }
    }
}

/// Top-level fields the canonical model carries across dialects.
const RESPONSES_MAPPED: &[&str] = &[
    "model",
    "input",
    "instructions",
    "tools",
    "tool_choice",
    "max_output_tokens",
    "temperature",
    "top_p",
    "stream",
];

/// What a Responses request loses on its way to a provider of another
/// dialect: every field the canonical model does not carry
/// (`previous_response_id`, `store`, `include`, `reasoning`, `text`,
/// `metadata`, …), hosted tools, custom tools' grammars, and the input
/// items and parts that have no form there (reasoning items with their
/// encrypted content, hosted tools' calls and outputs, files).
fn responses_losses(origin: &Origin, target: Dialect, dropped: &mut BTreeSet<String>) {
    let b = &origin.body;
    for k in b.keys() {
        if !RESPONSES_MAPPED.contains(&k.as_str()) {
            note(dropped, k);
        }
    }
    if let Some(Value::Array(tools)) = b.get("tools") {
        for t in tools {
            let ty = t.get("type").and_then(Value::as_str).unwrap_or("");
            match ty {
                "function" => {
                    if let Some(o) = t.as_object() {
                        for k in o.keys() {
                            if !["type", "name", "description", "parameters"].contains(&k.as_str())
                            {
                                note(dropped, &format!("tools[].{k}"));
                            }
                        }
                    }
                }
                "custom" => {
                    dropped.insert("changed: custom tools as functions taking `input`".into());
                    if t.get("format").is_some() {
                        note(dropped, "tools[].format");
                    }
                }
                other => note(dropped, &format!("{other} tool")),
            }
        }
    }
    if let Some(Value::Object(tc)) = b.get("tool_choice")
        && !matches!(
            tc.get("type").and_then(Value::as_str),
            Some("function" | "custom")
        )
    {
        note(dropped, "tool_choice");
    }
    for item in origin.wire_messages() {
        let ty = item
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("message");
        match ty {
            "message" => {
                let Some(Value::Array(parts)) = item.get("content") else {
                    continue;
                };
                for part in parts {
                    let pt = part.get("type").and_then(Value::as_str).unwrap_or("");
                    match pt {
                        "input_text" | "output_text" | "text" | "refusal" => {}
                        "input_image" => {
                            let has_form = match target {
                                Dialect::OpenAi => openai::image_from_responses(part).is_some(),
                                Dialect::Anthropic => {
                                    anthropic::image_from_responses(part).is_some()
                                }
                                Dialect::Responses | Dialect::Gemini | Dialect::Bedrock => true,
                            };
                            if !has_form {
                                note(dropped, "input_image part (without an image_url)");
                            }
                        }
                        other => note(dropped, &format!("{other} part")),
                    }
                }
            }
            "reasoning" => {
                note(dropped, "reasoning item");
                if item.get("encrypted_content").is_some() {
                    note(dropped, "reasoning.encrypted_content");
                }
            }
            "function_call" | "custom_tool_call" | "function_call_output" => {}
            "custom_tool_call_output" => {}
            other => note(dropped, &format!("{other} item")),
        }
        if let Some(Value::Array(out)) = item.get("output") {
            for part in out {
                let pt = part.get("type").and_then(Value::as_str).unwrap_or("");
                if !matches!(pt, "input_text" | "output_text" | "text") {
                    note(dropped, &format!("{pt} part in a tool output"));
                }
            }
        }
    }
}

#[cfg(test)]
mod responses_tests {
    use super::*;
    use crate::canonical::{Part, Role};
    use std::sync::Arc;

    const CODEX: &str = r#"{"model":"gpt-5-codex","instructions":"You are Codex.","input":[
        {"type":"message","role":"developer","content":[{"type":"input_text","text":"<permissions>"}]},
        {"type":"message","role":"user","content":[{"type":"input_text","text":"list files"}]},
        {"type":"reasoning","summary":[],"encrypted_content":"gAAAAABo"},
        {"type":"function_call","name":"shell","arguments":"{\"command\":[\"ls\"]}","call_id":"call_1"},
        {"type":"function_call_output","call_id":"call_1","output":"a\nb"},
        {"type":"message","role":"user","content":[{"type":"input_text","text":"thanks"}]}],
      "tools":[{"type":"function","name":"shell","strict":false,"parameters":{"type":"object","properties":{}}},{"type":"web_search"}],
      "store":false,"stream":true,"include":["reasoning.encrypted_content"],"previous_response_id":"resp_0",
      "reasoning":{"effort":"medium","summary":"auto"},"prompt_cache_key":"k"}"#;

    /// `body` parsed as `parse::parse_request_sent` does (not called:
    /// `parse.rs` imports this module).
    fn parsed_as(
        dialect: Dialect,
        body: &str,
        headers: Vec<(&'static str, String)>,
    ) -> ChatRequest {
        let v: Value = serde_json::from_str(body).unwrap();
        let (mut req, trace) = match dialect {
            Dialect::OpenAi => openai::parse_request_traced(&v),
            Dialect::Anthropic => anthropic::parse_request_traced(&v),
            Dialect::Responses => responses::parse_request_traced(&v),
            Dialect::Gemini => gemini::parse_request_traced(&v, "gemini-2.5-flash", false),
            Dialect::Bedrock => panic!("no client speaks Converse"),
        }
        .unwrap();
        let origin =
            Origin::new(dialect, v, headers, &req, trace).with_raw(Bytes::from(body.to_owned()));
        req.origin = Some(Arc::new(origin));
        req
    }

    fn parsed(body: &str, headers: Vec<(&'static str, String)>) -> ChatRequest {
        parsed_as(Dialect::Responses, body, headers)
    }

    /// A tool result's error mark is named dropped only where it is:
    /// OpenAI's dialects have none; Gemini (`{"error": …}`) and Converse
    /// (`status: error`) carry it.
    #[test]
    fn a_tool_results_error_mark_is_named_dropped_only_where_it_is_lost() {
        let body = r#"{"model":"claude-x","max_tokens":64,"messages":[
            {"role":"user","content":"weather?"},
            {"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"w","input":{}}]},
            {"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"down","is_error":true}]}]}"#;
        let req = parsed_as(Dialect::Anthropic, body, vec![]);
        let named = |target| {
            render_for(target, &req, "m", None)
                .changes
                .contains(&"dropped: tool_result.is_error".to_string())
        };
        assert!(named(Dialect::OpenAi));
        assert!(named(Dialect::Responses));
        assert!(!named(Dialect::Gemini));
        assert!(!named(Dialect::Bedrock));
    }

    #[test]
    fn an_unchanged_request_reaches_a_responses_provider_as_sent() {
        let req = parsed(CODEX, vec![(OPENAI_BETA, "responses=v1".to_string())]);
        let out = render_for(Dialect::Responses, &req, "gpt-5-codex", None);
        assert_eq!(out.changes, Vec::<String>::new());
        assert_eq!(out.raw.as_deref(), Some(CODEX.as_bytes()));
        assert_eq!(out.body, serde_json::from_str::<Value>(CODEX).unwrap());
        assert_eq!(out.headers, vec![(OPENAI_BETA, "responses=v1".to_string())]);
        // Another model: only `model` patched, the items as sent.
        let out = render_for(Dialect::Responses, &req, "gpt-5", None);
        assert_eq!(out.changes, vec!["model".to_string()]);
        assert_eq!(out.raw, None);
        let want: Value = serde_json::from_str(CODEX).unwrap();
        assert_eq!(out.body["input"], want["input"]);
        assert_eq!(out.body["tools"], want["tools"]);
        assert_eq!(out.body["model"], "gpt-5");
    }

    #[test]
    fn a_changed_conversation_keeps_the_untouched_items_and_runs_whole() {
        let mut req = parsed(CODEX, Vec::new());
        // Compaction rewrote the last user message.
        let n = req.messages.len();
        req.messages[n - 1] = Message::text(Role::User, "thanks!");
        let out = render_for(Dialect::Responses, &req, "gpt-5-codex", Some("Part"));
        assert_eq!(
            out.changes,
            vec!["messages".to_string(), "prefill".to_string()]
        );
        let want: Value = serde_json::from_str(CODEX).unwrap();
        let items = out.body["input"].as_array().unwrap();
        // developer, user, reasoning + call (one run), output: as sent.
        assert_eq!(&items[..5], &want["input"].as_array().unwrap()[..5]);
        assert_eq!(items[5]["content"][0]["text"], "thanks!");
        assert_eq!(items[6]["role"], "assistant");
        assert_eq!(items.len(), 7);
        assert_eq!(out.body["tools"], want["tools"]);
    }

    #[test]
    fn a_string_input_stays_a_string() {
        let body = r#"{"model":"m","input":"Hi","max_output_tokens":20}"#;
        let mut req = parsed(body, Vec::new());
        req.max_tokens = Some(40);
        let out = render_for(Dialect::Responses, &req, "m", None);
        assert_eq!(out.changes, vec!["max_tokens".to_string()]);
        assert_eq!(out.body["input"], "Hi");
        assert_eq!(out.body["max_output_tokens"], 40);
    }

    #[test]
    fn crossing_names_what_the_other_dialects_cannot_carry() {
        let req = parsed(CODEX, Vec::new());
        for target in [Dialect::OpenAi, Dialect::Anthropic] {
            let out = render_for(target, &req, "m", None);
            for want in [
                "dropped: previous_response_id",
                "dropped: reasoning.encrypted_content",
                "dropped: reasoning item",
                "dropped: web_search tool",
                "dropped: include",
                "dropped: store",
                "dropped: reasoning",
                "dropped: tools[].strict",
            ] {
                assert!(
                    out.changes.contains(&want.to_string()),
                    "{target:?} {want} {:?}",
                    out.changes
                );
            }
            let text = out.body.to_string();
            assert!(!text.contains("gAAAAABo"), "{text}");
            assert!(!text.contains("web_search"), "{text}");
        }
        // Chat Completions gets the call in an assistant message, its output as a tool message.
        let oa = render_for(Dialect::OpenAi, &req, "m", None).body;
        let msgs = oa["messages"].as_array().unwrap();
        assert_eq!(msgs[0]["content"], "You are Codex.\n\n<permissions>");
        assert_eq!(msgs[2]["tool_calls"][0]["id"], "call_1");
        assert_eq!(msgs[3]["role"], "tool");
    }

    #[test]
    fn a_chat_request_crosses_to_a_responses_provider() {
        let body = r#"{"model":"gpt-4o","messages":[{"role":"system","content":"S"},
            {"role":"user","content":[{"type":"text","text":"look"},{"type":"image_url","image_url":{"url":"https://x/a.png"}}]},
            {"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},
            {"role":"tool","tool_call_id":"c1","content":"ok"}],
            "tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{}}}}],
            "stop":["END"],"max_tokens":50,"stream":true}"#;
        let req = parsed_as(Dialect::OpenAi, body, Vec::new());
        let out = render_for(Dialect::Responses, &req, "gpt-5", None);
        assert!(
            out.changes.contains(&"dropped: stop sequences".to_string()),
            "{:?}",
            out.changes
        );
        let b = &out.body;
        assert_eq!(b["instructions"], "S");
        assert_eq!(b["store"], false);
        assert_eq!(b["max_output_tokens"], 50);
        assert_eq!(b["stream"], true);
        assert_eq!(b["tools"][0]["strict"], false);
        assert_eq!(
            b["input"][0]["content"][1],
            json!({"type": "input_image", "image_url": "https://x/a.png", "detail": "auto"})
        );
        assert_eq!(b["input"][1]["type"], "function_call");
        assert_eq!(
            b["input"][2],
            json!({"type": "function_call_output", "call_id": "c1", "output": "ok"})
        );
        // And it parses back as the same conversation.
        let back = responses::parse_request(b).unwrap();
        assert_eq!(back.messages.len(), req.messages.len());
        assert!(matches!(
            &back.messages[0].content[1],
            Part::Opaque {
                dialect: Dialect::Responses,
                ..
            }
        ));
    }

    #[test]
    fn a_responses_image_reaches_the_other_dialects() {
        let body = r#"{"model":"m","input":[{"role":"user","content":[{"type":"input_image","image_url":"data:image/png;base64,AAA","detail":"low"},{"type":"input_file","file_id":"file_1"}]}]}"#;
        let req = parsed(body, Vec::new());
        let oa = render_for(Dialect::OpenAi, &req, "m", None);
        assert_eq!(
            oa.body["messages"][0]["content"][0],
            json!({"type": "image_url", "image_url": {"url": "data:image/png;base64,AAA", "detail": "low"}})
        );
        assert!(oa.changes.contains(&"dropped: input_file part".to_string()));
        let an = render_for(Dialect::Anthropic, &req, "m", None);
        assert_eq!(
            an.body["messages"][0]["content"][0],
            json!({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAA"}})
        );
    }
}

#[cfg(test)]
mod align_tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// For messages that are the parsed ones, the shortcut says
        /// unchanged exactly when the alignment does.
        #[test]
        fn the_shortcut_is_the_alignment(
            n in 0..6usize,
            ranges in proptest::collection::vec((0..8usize, 0..8usize), 0..6),
            contiguous in any::<bool>(),
        ) {
            let groups: Vec<Group> = if contiguous {
                // The parser's shape: one group per wire message, in order.
                let mut at = 0;
                ranges.iter().enumerate().map(|(wire, (len, _))| {
                    let msgs = at..(at + len % 3).min(n);
                    at = msgs.end;
                    Group { wire, msgs }
                }).collect()
            } else {
                ranges.iter().enumerate().map(|(wire, &(a, b))| Group { wire, msgs: a..b }).collect()
            };
            let keys: Vec<u64> = (0..n as u64).collect();
            prop_assert_eq!(
                aligned_as_parsed(&groups, n),
                !align_keys(&groups, &keys, &keys).1,
                "{:?} over {} messages", groups, n
            );
        }
    }
}

#[cfg(test)]
mod gemini_tests {
    use super::*;
    use crate::canonical::Role;

    /// Crossing to Gemini, what `generationConfig` carries (a JSON answer
    /// format, a reasoning effort) is not named dropped; what it cannot
    /// carry is (`logprobs`, a sixth stop sequence).
    #[test]
    fn crossing_to_gemini_names_only_what_is_lost() {
        let body = serde_json::json!({"model": "m", "messages": [{"role": "user", "content": "hi"}],
            "response_format": {"type": "json_object"}, "reasoning_effort": "low", "logprobs": true,
            "stop": ["1", "2", "3", "4", "5", "6"]});
        let (mut req, trace) = openai::parse_request_traced(&body).unwrap();
        req.origin = Some(std::sync::Arc::new(Origin::new(
            Dialect::OpenAi,
            body,
            Vec::new(),
            &req,
            trace,
        )));
        let out = render_for(Dialect::Gemini, &req, "gemini-2.5-flash", None);
        assert!(
            out.changes.contains(&"dropped: logprobs".to_string()),
            "{:?}",
            out.changes
        );
        assert!(
            out.changes
                .contains(&"dropped: stop sequences past the fifth".to_string()),
            "{:?}",
            out.changes
        );
        assert!(
            !out.changes
                .iter()
                .any(|c| c.contains("response_format") || c.contains("reasoning_effort")),
            "{:?}",
            out.changes
        );
        assert_eq!(
            out.body["generationConfig"]["responseMimeType"],
            "application/json"
        );
        assert!(out.body.get("messages").is_none());
    }

    /// A Gemini client's request as `parse::parse_gemini_sent` keeps it.
    fn gemini_client(body: &str) -> ChatRequest {
        let v: Value = serde_json::from_str(body).unwrap();
        let (mut req, trace) = gemini::parse_request_traced(&v, "route-g", true).unwrap();
        let origin = Origin::new(Dialect::Gemini, v, Vec::new(), &req, trace)
            .with_raw(Bytes::from(body.to_owned()));
        req.origin = Some(std::sync::Arc::new(origin));
        req
    }

    const CLI: &str = r#"{"contents":[{"role":"user","parts":[{"text":"hi"}]},
        {"role":"model","parts":[{"text":"plan","thought":true},{"functionCall":{"name":"ls","args":{}},"thoughtSignature":"c2ln"}]},
        {"role":"user","parts":[{"functionResponse":{"name":"ls","response":{"output":"a b"}}}]}],
        "systemInstruction":{"parts":[{"text":"S"}]},
        "tools":[{"functionDeclarations":[{"name":"ls","parametersJsonSchema":{"type":"object"}}]},{"googleSearch":{}}],
        "generationConfig":{"temperature":0,"topK":64,"thinkingConfig":{"includeThoughts":true}},
        "safetySettings":[],"cachedContent":"cachedContents/x"}"#;

    /// Same kind: the client's very bytes, whatever model serves (it is
    /// in the URL, not the body), and nothing named changed.
    #[test]
    fn an_unchanged_gemini_request_reaches_a_gemini_provider_as_sent() {
        let req = gemini_client(CLI);
        let out = render_for(Dialect::Gemini, &req, "gemini-2.5-pro", None);
        assert_eq!(out.changes, Vec::<String>::new());
        assert_eq!(out.raw.as_deref(), Some(CLI.as_bytes()));
        assert_eq!(out.body, serde_json::from_str::<Value>(CLI).unwrap());
    }

    /// A nudge and a prefill: the client's contents stay as sent (the
    /// thought and its signature with them), the new ones are rendered,
    /// and the client's own generationConfig fields survive.
    #[test]
    fn a_changed_gemini_request_keeps_the_clients_parts_and_fields() {
        let mut req = gemini_client(CLI);
        req.messages.push(Message::text(Role::System, "nudge"));
        req.max_tokens = Some(77);
        let out = render_for(Dialect::Gemini, &req, "gemini-2.5-pro", Some("Once"));
        assert!(out.raw.is_none());
        for c in ["messages", "prefill", "max_tokens"] {
            assert!(out.changes.contains(&c.to_string()), "{:?}", out.changes);
        }
        let b = &out.body;
        let contents = b["contents"].as_array().unwrap();
        assert_eq!(contents[1]["parts"][1]["thoughtSignature"], "c2ln");
        assert_eq!(contents[1]["parts"][0]["thought"], true);
        // The nudge joins the user turn of the function response.
        assert_eq!(contents[2]["parts"][1], json!({"text": "nudge"}));
        assert_eq!(
            contents[3],
            json!({"role": "model", "parts": [{"text": "Once"}]})
        );
        assert_eq!(b["generationConfig"]["maxOutputTokens"], 77);
        assert_eq!(b["generationConfig"]["topK"], 64);
        assert_eq!(b["cachedContent"], "cachedContents/x");
        assert_eq!(b["tools"][1], json!({"googleSearch": {}}));
    }

    /// Across kinds: the conversation is mapped (the call id minted for the
    /// Gemini call matches its response) and what has no equivalent is
    /// named dropped.
    #[test]
    fn a_gemini_request_crosses_to_openai_and_names_what_is_lost() {
        let req = gemini_client(CLI);
        let out = render_for(Dialect::OpenAi, &req, "gpt-4o", None);
        for d in [
            "dropped: safetySettings",
            "dropped: cachedContent",
            "dropped: generationConfig.topK",
            "dropped: generationConfig.thinkingConfig",
            "dropped: tools[].googleSearch",
            "dropped: thoughtSignature",
            "dropped: thought part",
        ] {
            assert!(
                out.changes.contains(&d.to_string()),
                "{d}: {:?}",
                out.changes
            );
        }
        let b = &out.body;
        assert_eq!(b["messages"][0], json!({"role": "system", "content": "S"}));
        let call = &b["messages"][2]["tool_calls"][0];
        assert_eq!(call["function"]["name"], "ls");
        assert_eq!(b["messages"][3]["tool_call_id"], call["id"]);
        assert_eq!(b["messages"][3]["content"], "a b");
        assert_eq!(b["temperature"], 0.0);
        assert!(b.get("safetySettings").is_none() && b.get("contents").is_none());
    }
}
