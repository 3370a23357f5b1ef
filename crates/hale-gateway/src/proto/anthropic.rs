//! The Anthropic Messages dialect (`/v1/messages`).
//!
//! Translates between Anthropic's wire shapes and the canonical types of
//! [`super`]: requests, responses, error bodies and the SSE stream, both ways.
//! Anthropic is stricter than OpenAI about the shape of a conversation, so
//! rendering does the work a caller of the other dialect never had to:
//!
//! - roles must alternate: consecutive messages of the same role (several
//!   tool results, a tool result then user text) merge into one message, and
//!   in a user message the `tool_result` blocks come first, as Anthropic
//!   requires;
//! - there is no system role in `messages`: leading [`Role::System`] messages
//!   join the `system` prompt, later ones (a nudge injected at the end) become
//!   user text in place;
//! - empty or whitespace-only text blocks and whitespace-only stop sequences
//!   are rejected upstream, so they are left out; `temperature` is clamped to
//!   Anthropic's range 0–1;
//! - a final assistant message (the prefill) may not end in whitespace, so a
//!   prefill is sent with its trailing whitespace trimmed ([`effective_prefill`]);
//! - `tool_use.id` must match `^[a-zA-Z0-9_-]+$`: other characters in ids
//!   minted by OpenAI-compatible servers are replaced by `_`, the same way in
//!   the call and in its result, so they still pair up;
//! - `tool_use.input` must be an object, while OpenAI arguments are a string
//!   that may not parse: see [`arguments_to_input`] for the rule that keeps the
//!   raw string so the round trip loses nothing.
//!
//! Parsing turns each `tool_result` block into its own [`Role::Tool`] message
//! (the shape the OpenAI codec produces from `role: tool` messages), and a
//! user message's other blocks into a [`Role::User`] message, in order.
//! Usage sums `input_tokens` with the cache creation and cache read tokens, so
//! `input_tokens` means the whole prompt, as OpenAI's `prompt_tokens` does.
//!
//! Decoding an upstream stream reads the event sent per token — a
//! `content_block_delta` of text or tool-call arguments — as a typed struct
//! (`PlainBlockDelta`) and every other event, or one that is not quite
//! right, through a `Value` tree, which names what is wrong.

use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::fidelity::Trace;
pub use super::openai::SseFrame;
use super::openai::{
    as_object, at, count, empty_schema, err, error_message, field, join, kind_of, opt_array,
    opt_bool, opt_f64, opt_str, opt_u32, req_array, req_str,
};
use super::{
    ChatRequest, ChatResponse, Dialect, Message, Obj, Part, ProtoError, Role, StopReason, Str,
    StreamEvent, Tool, Usage,
};

/// `max_tokens` sent upstream when the request names none (Anthropic requires one).
pub const DEFAULT_MAX_TOKENS: u32 = 4096;

/// The key under which tool-call arguments that are not a JSON object are
/// kept in an Anthropic `tool_use.input` (see [`arguments_to_input`]).
pub const RAW_ARGUMENTS_KEY: &str = "_hale_raw_arguments";

/// Request fields this codec models; every other top-level field goes to `extra`.
const KNOWN_REQUEST_FIELDS: &[&str] = &[
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

/// Tool-call arguments (a JSON string) as an Anthropic `tool_use.input`.
///
/// Arguments that parse to an object are that object; empty arguments are
/// `{}`; anything else (truncated JSON, an array, a bare string) becomes
/// `{"_hale_raw_arguments": "<the raw string>"}`, which
/// [`input_to_arguments`] turns back into the raw string, so no argument text
/// is lost and the model still sees what it produced.
pub fn arguments_to_input(arguments: &str) -> Value {
    if arguments.trim().is_empty() {
        return json!({});
    }
    match serde_json::from_str::<Value>(arguments) {
        Ok(v @ Value::Object(_)) => v,
        Ok(_) | Err(_) => json!({ RAW_ARGUMENTS_KEY: arguments }),
    }
}

/// An Anthropic `tool_use.input` as arguments (a JSON string); inverse of [`arguments_to_input`].
pub fn input_to_arguments(input: &Value) -> String {
    if let Some(o) = input.as_object()
        && o.len() == 1
        && let Some(Value::String(raw)) = o.get(RAW_ARGUMENTS_KEY)
    {
        return raw.clone();
    }
    input.to_string()
}

/// The prefill text actually sent: Anthropic rejects a final assistant
/// message that ends in whitespace, so trailing whitespace is trimmed (the
/// continuation may then start with it). Empty means no prefill is sent.
pub fn effective_prefill(prefill: &str) -> &str {
    prefill.trim_end()
}

/// A tool-use id made valid for Anthropic (`^[a-zA-Z0-9_-]+$`).
fn tool_id(id: &str) -> String {
    if id.is_empty() {
        return "toolu_hale".to_string();
    }
    id.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

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
fn input_tokens(u: Option<&Map<String, Value>>) -> u64 {
    count(u, "input_tokens")
        .saturating_add(count(u, "cache_creation_input_tokens"))
        .saturating_add(count(u, "cache_read_input_tokens"))
}

/// An OpenAI `image_url` part as an Anthropic `image` block, when it is one.
pub(crate) fn image_from_openai(part: &Value) -> Option<Value> {
    if part.get("type").and_then(Value::as_str) != Some("image_url") {
        return None;
    }
    let url = part.get("image_url")?.get("url")?.as_str()?;
    if let Some(rest) = url.strip_prefix("data:") {
        let (meta, data) = rest.split_once(',')?;
        let media = meta.strip_suffix(";base64")?;
        Some(
            json!({"type": "image", "source": {"type": "base64", "media_type": media, "data": data}}),
        )
    } else {
        Some(json!({"type": "image", "source": {"type": "url", "url": url}}))
    }
}

// ---------------------------------------------------------------------------
// Requests.
// ---------------------------------------------------------------------------

/// Parses an incoming request body of this dialect.
///
/// Errors name the JSON path (e.g. `messages[2].content[0].tool_use_id`) and
/// what is wrong. `system` may be a string or an array of text blocks (joined
/// by a blank line). `tool_choice` becomes the OpenAI-shaped canonical form
/// (`disable_parallel_tool_use` has no canonical form and is dropped).
pub fn parse_request(body: &Value) -> Result<ChatRequest, ProtoError> {
    parse_request_traced(body).map(|(req, _)| req)
}

/// [`parse_request`], also telling which canonical messages each wire
/// message became (for [`super::fidelity`]).
pub(crate) fn parse_request_traced(body: &Value) -> Result<(ChatRequest, Trace), ProtoError> {
    let obj = as_object(body, "")?;
    let model = req_str(obj, "model", "")?.to_string();
    let raw_messages = req_array(obj, "messages", "")?;

    let system = match field(obj, "system") {
        None => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(Value::Array(blocks)) => {
            let mut texts = Vec::with_capacity(blocks.len());
            for (i, b) in blocks.iter().enumerate() {
                let bp = at("system", i);
                let bo = as_object(b, &bp)?;
                match req_str(bo, "type", &bp)? {
                    "text" => texts.push(req_str(bo, "text", &bp)?.to_string()),
                    other => {
                        return Err(err(
                            join(&bp, "type"),
                            format!("only `text` blocks are allowed in `system`, got `{other}`"),
                        ));
                    }
                }
            }
            Some(texts.join("\n\n"))
        }
        Some(v) => {
            return Err(err(
                "system",
                format!(
                    "must be a string or an array of text blocks, got {}",
                    kind_of(v)
                ),
            ));
        }
    };

    let mut messages = Vec::new();
    let mut trace = Trace::with_capacity(raw_messages.len());
    for (i, m) in raw_messages.iter().enumerate() {
        let before = messages.len();
        let p = at("messages", i);
        let mo = as_object(m, &p)?;
        let role = match req_str(mo, "role", &p)? {
            "user" => Role::User,
            "assistant" => Role::Assistant,
            "system" => {
                return Err(err(
                    join(&p, "role"),
                    "unknown role `system` (Anthropic takes the system prompt in `system`)",
                ));
            }
            other => {
                return Err(err(
                    join(&p, "role"),
                    format!("unknown role `{other}` (expected user or assistant)"),
                ));
            }
        };
        let parts = parse_content(field(mo, "content"), role, &join(&p, "content"))?;
        match role {
            Role::User => {
                // Each tool result becomes its own tool message; the other
                // blocks stay user messages, in order.
                let mut run = Vec::new();
                for part in parts {
                    match part {
                        Part::ToolResult { .. } => {
                            if !run.is_empty() {
                                messages.push(Message {
                                    role: Role::User,
                                    content: std::mem::take(&mut run),
                                });
                            }
                            messages.push(Message {
                                role: Role::Tool,
                                content: vec![part],
                            });
                        }
                        Part::Text { .. } | Part::Opaque { .. } | Part::ToolCall { .. } => {
                            run.push(part);
                        }
                    }
                }
                if !run.is_empty() {
                    messages.push(Message {
                        role: Role::User,
                        content: run,
                    });
                }
            }
            Role::Assistant | Role::System | Role::Tool => messages.push(Message {
                role,
                content: parts,
            }),
        }
        trace.spans.push(before..messages.len());
    }

    let mut tools = Vec::new();
    if let Some(raw_tools) = opt_array(obj, "tools", "")? {
        for (i, t) in raw_tools.iter().enumerate() {
            tools.push(parse_tool(t, &at("tools", i))?);
        }
    }

    let tool_choice = match field(obj, "tool_choice") {
        None => None,
        Some(tc) => Some(parse_tool_choice(tc)?),
    };

    let mut stop = Vec::new();
    if let Some(seqs) = opt_array(obj, "stop_sequences", "")? {
        for (i, s) in seqs.iter().enumerate() {
            match s {
                Value::String(s) => stop.push(s.clone()),
                other => {
                    return Err(err(
                        at("stop_sequences", i),
                        format!("must be a string, got {}", kind_of(other)),
                    ));
                }
            }
        }
    }

    let mut extra = Map::new();
    for (k, v) in obj {
        if !KNOWN_REQUEST_FIELDS.contains(&k.as_str()) {
            extra.insert(k.clone(), v.clone());
        }
    }

    let req = ChatRequest {
        model,
        system,
        messages,
        tools,
        tool_choice,
        max_tokens: opt_u32(obj, "max_tokens", "")?,
        temperature: opt_f64(obj, "temperature", "")?,
        top_p: opt_f64(obj, "top_p", "")?,
        stop,
        stream: opt_bool(obj, "stream", "")?.unwrap_or(false),
        include_usage: false,
        extra,
        dialect: Dialect::Anthropic,
        origin: None,
    };
    Ok((req, trace))
}

/// Message content: a string or an array of blocks. `tool_use` is allowed in
/// assistant messages only, `tool_result` in user messages only.
fn parse_content(v: Option<&Value>, role: Role, path: &str) -> Result<Vec<Part>, ProtoError> {
    let blocks = match v {
        None => return Err(err(path, "missing `content`")),
        Some(Value::String(s)) => {
            return Ok(if s.is_empty() {
                Vec::new()
            } else {
                vec![Part::Text { text: s.clone() }]
            });
        }
        Some(Value::Array(a)) => a,
        Some(other) => {
            return Err(err(
                path,
                format!(
                    "must be a string or an array of content blocks, got {}",
                    kind_of(other)
                ),
            ));
        }
    };
    let mut out = Vec::with_capacity(blocks.len());
    for (j, b) in blocks.iter().enumerate() {
        let bp = at(path, j);
        let bo = as_object(b, &bp)?;
        match req_str(bo, "type", &bp)? {
            "text" => out.push(Part::Text {
                text: req_str(bo, "text", &bp)?.to_string(),
            }),
            "tool_use" => {
                if role != Role::Assistant {
                    return Err(err(
                        join(&bp, "type"),
                        "`tool_use` blocks belong in assistant messages",
                    ));
                }
                let id = req_str(bo, "id", &bp)?.to_string();
                let name = req_str(bo, "name", &bp)?.to_string();
                let arguments = match field(bo, "input") {
                    None => "{}".to_string(),
                    Some(input @ Value::Object(_)) => input_to_arguments(input),
                    Some(other) => {
                        return Err(err(
                            join(&bp, "input"),
                            format!("must be an object, got {}", kind_of(other)),
                        ));
                    }
                };
                out.push(Part::ToolCall {
                    id,
                    name,
                    arguments,
                });
            }
            "tool_result" => {
                if role != Role::User {
                    return Err(err(
                        join(&bp, "type"),
                        "`tool_result` blocks belong in user messages",
                    ));
                }
                let tool_call_id = req_str(bo, "tool_use_id", &bp)?.to_string();
                let content = tool_result_text(field(bo, "content"), &join(&bp, "content"))?;
                let is_error = opt_bool(bo, "is_error", &bp)?.unwrap_or(false);
                out.push(Part::ToolResult {
                    tool_call_id,
                    content,
                    is_error,
                });
            }
            _ => out.push(Part::Opaque {
                dialect: Dialect::Anthropic,
                value: b.clone(),
            }),
        }
    }
    Ok(out)
}

/// A tool result's content flattened to text: text blocks joined by newlines;
/// other blocks (images) have no text form and are left out.
fn tool_result_text(v: Option<&Value>, path: &str) -> Result<String, ProtoError> {
    match v {
        None => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Array(blocks)) => {
            let mut texts = Vec::new();
            for (k, b) in blocks.iter().enumerate() {
                let bp = at(path, k);
                let bo = as_object(b, &bp)?;
                if req_str(bo, "type", &bp)? == "text" {
                    texts.push(req_str(bo, "text", &bp)?.to_string());
                }
            }
            Ok(texts.join("\n"))
        }
        Some(other) => Err(err(
            path,
            format!(
                "must be a string or an array of content blocks, got {}",
                kind_of(other)
            ),
        )),
    }
}

fn parse_tool(t: &Value, path: &str) -> Result<Tool, ProtoError> {
    let to = as_object(t, path)?;
    if let Some(ty) = opt_str(to, "type", path)?
        && ty != "custom"
    {
        return Err(err(
            join(path, "type"),
            format!("unsupported tool type `{ty}` (only client tools with `input_schema`)"),
        ));
    }
    let name = req_str(to, "name", path)?.to_string();
    let description = opt_str(to, "description", path)?.map(str::to_string);
    let parameters = match field(to, "input_schema") {
        None => return Err(err(join(path, "input_schema"), "missing `input_schema`")),
        Some(s @ Value::Object(_)) => s.clone(),
        Some(v) => {
            return Err(err(
                join(path, "input_schema"),
                format!("must be a JSON schema object, got {}", kind_of(v)),
            ));
        }
    };
    Ok(Tool {
        name,
        description,
        parameters,
    })
}

/// `{type:auto|any|none|tool}` as the OpenAI-shaped canonical tool choice.
fn parse_tool_choice(tc: &Value) -> Result<Value, ProtoError> {
    let o = as_object(tc, "tool_choice")?;
    match req_str(o, "type", "tool_choice")? {
        "auto" => Ok(json!("auto")),
        "any" => Ok(json!("required")),
        "none" => Ok(json!("none")),
        "tool" => {
            let name = req_str(o, "name", "tool_choice")?;
            Ok(json!({"type": "function", "function": {"name": name}}))
        }
        other => Err(err(
            "tool_choice.type",
            format!("unknown tool_choice type `{other}` (expected auto, any, none or tool)"),
        )),
    }
}

/// The canonical (OpenAI-shaped) tool choice for Anthropic; unknown forms are left out.
fn render_tool_choice(tc: &Value) -> Option<Value> {
    match tc {
        Value::String(s) => match s.as_str() {
            "auto" => Some(json!({"type": "auto"})),
            "none" => Some(json!({"type": "none"})),
            "required" => Some(json!({"type": "any"})),
            _ => None,
        },
        Value::Object(o) => {
            if o.get("type").and_then(Value::as_str) != Some("function") {
                return None;
            }
            let name = o.get("function")?.get("name")?.as_str()?;
            Some(json!({"type": "tool", "name": name}))
        }
        Value::Null | Value::Bool(_) | Value::Number(_) | Value::Array(_) => None,
    }
}

/// One Anthropic message being assembled.
struct Turn {
    role: &'static str,
    blocks: Vec<Value>,
}

/// Appends blocks as a message of `role`, merging with the previous message
/// when it has the same role (Anthropic requires alternating roles).
fn push_turn(turns: &mut Vec<Turn>, role: &'static str, blocks: Vec<Value>) {
    if blocks.is_empty() {
        return;
    }
    match turns.last_mut() {
        Some(last) if last.role == role => last.blocks.extend(blocks),
        Some(_) | None => turns.push(Turn { role, blocks }),
    }
}

/// One canonical message as an Anthropic turn: its role and blocks (a
/// system message is user text, as it is anywhere but the lead).
pub(crate) fn turn_of(m: &Message) -> (&'static str, Vec<Value>) {
    match m.role {
        Role::System => ("user", text_block(&m.joined_text()).into_iter().collect()),
        Role::User | Role::Tool => ("user", blocks_of(m)),
        Role::Assistant => ("assistant", blocks_of(m)),
    }
}

pub(crate) fn text_block(text: &str) -> Option<Value> {
    if text.trim().is_empty() {
        None
    } else {
        Some(json!({"type": "text", "text": text}))
    }
}

fn tool_use_block(id: &str, name: &str, arguments: &str) -> Value {
    json!({"type": "tool_use", "id": tool_id(id), "name": name, "input": arguments_to_input(arguments)})
}

/// Blocks of one canonical message for Anthropic.
fn blocks_of(m: &Message) -> Vec<Value> {
    let mut out = Vec::with_capacity(m.content.len());
    for p in &m.content {
        match p {
            Part::Text { text } => out.extend(text_block(text)),
            Part::Opaque {
                dialect: Dialect::Anthropic,
                value,
            } => out.push(value.clone()),
            Part::Opaque {
                dialect: Dialect::OpenAi,
                value,
            } => {
                // Images have an Anthropic form; other OpenAI parts (audio,
                // files) do not, and cannot be sent to this dialect.
                if m.role != Role::Assistant {
                    out.extend(image_from_openai(value));
                }
            }
            Part::ToolCall {
                id,
                name,
                arguments,
            } => {
                if m.role == Role::Assistant {
                    out.push(tool_use_block(id, name, arguments));
                }
            }
            Part::ToolResult {
                tool_call_id,
                content,
                is_error,
            } => {
                if m.role != Role::Assistant {
                    let mut b = Map::new();
                    b.insert("type".into(), json!("tool_result"));
                    b.insert("tool_use_id".into(), json!(tool_id(tool_call_id)));
                    if !content.is_empty() {
                        b.insert("content".into(), json!(content));
                    }
                    if *is_error {
                        b.insert("is_error".into(), json!(true));
                    }
                    out.push(Value::Object(b));
                }
            }
        }
    }
    out
}

/// Renders a request for an Anthropic upstream serving `model`.
///
/// `prefill`, when given, is appended as a trailing assistant text block (see
/// [`effective_prefill`]). `max_tokens` is `req.max_tokens`, else
/// [`DEFAULT_MAX_TOKENS`]. Fields in `req.extra` pass through only when the
/// request arrived in this dialect. `stream: true` is set when `req.stream`
/// (Anthropic always reports usage in its stream).
pub fn render_request(req: &ChatRequest, model: &str, prefill: Option<&str>) -> Value {
    let mut body = Map::new();
    if req.dialect == Dialect::Anthropic {
        for (k, v) in &req.extra {
            body.insert(k.clone(), v.clone());
        }
    }
    body.insert("model".into(), json!(model));
    body.insert(
        "max_tokens".into(),
        json!(req.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS)),
    );

    let mut system: Vec<String> = req
        .system
        .iter()
        .filter(|s| !s.is_empty())
        .cloned()
        .collect();
    let mut turns: Vec<Turn> = Vec::new();
    let mut leading = true;
    for m in &req.messages {
        match m.role {
            Role::System if leading => {
                let t = m.joined_text();
                if !t.is_empty() {
                    system.push(t);
                }
            }
            Role::System => {
                leading = false;
                push_turn(
                    &mut turns,
                    "user",
                    text_block(&m.joined_text()).into_iter().collect(),
                );
            }
            Role::User | Role::Tool => {
                leading = false;
                push_turn(&mut turns, "user", blocks_of(m));
            }
            Role::Assistant => {
                leading = false;
                push_turn(&mut turns, "assistant", blocks_of(m));
            }
        }
    }
    if let Some(p) = prefill
        && let Some(b) = text_block(effective_prefill(p))
    {
        push_turn(&mut turns, "assistant", vec![b]);
    }
    let messages: Vec<Value> = turns
        .into_iter()
        .map(|t| {
            let mut blocks = t.blocks;
            if t.role == "user" {
                // tool_result blocks must open a user message.
                blocks
                    .sort_by_key(|b| b.get("type").and_then(Value::as_str) != Some("tool_result"));
            }
            json!({"role": t.role, "content": blocks})
        })
        .collect();
    if !system.is_empty() {
        body.insert("system".into(), json!(system.join("\n\n")));
    }
    body.insert("messages".into(), Value::Array(messages));

    if !req.tools.is_empty() {
        let tools: Vec<Value> = req
            .tools
            .iter()
            .map(|t| {
                let mut o = Map::new();
                o.insert("name".into(), json!(t.name));
                if let Some(d) = &t.description {
                    o.insert("description".into(), json!(d));
                }
                let schema = if t.parameters.is_object() {
                    t.parameters.clone()
                } else {
                    empty_schema()
                };
                o.insert("input_schema".into(), schema);
                Value::Object(o)
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
        if let Some(tc) = req.tool_choice.as_ref().and_then(render_tool_choice) {
            body.insert("tool_choice".into(), tc);
        }
    }
    if let Some(t) = req.temperature {
        body.insert("temperature".into(), json!(t.clamp(0.0, 1.0)));
    }
    if let Some(t) = req.top_p {
        body.insert("top_p".into(), json!(t));
    }
    let stops: Vec<&String> = req.stop.iter().filter(|s| !s.trim().is_empty()).collect();
    if !stops.is_empty() {
        body.insert("stop_sequences".into(), json!(stops));
    }
    if req.stream {
        body.insert("stream".into(), json!(true));
    }
    Value::Object(body)
}

// ---------------------------------------------------------------------------
// Responses.
// ---------------------------------------------------------------------------

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
                dialect: Dialect::OpenAi,
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

// ---------------------------------------------------------------------------
// Streaming.
// ---------------------------------------------------------------------------

/// A `content_block_delta` event of text, serialised as it is, without
/// building a `Value` tree first: a stream sends one per token. The fields
/// are in the order `json!` (a sorted map) wrote them, so the bytes are
/// the same as before.
#[derive(Serialize)]
struct TextBlockDelta<'a> {
    delta: TextDelta<'a>,
    index: u32,
    #[serde(rename = "type")]
    kind: &'static str,
}

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
/// measured for OpenAI chunks: callgrind, BENCHMARKS).
///
/// [`StreamDecoder::decode`] takes this path only when the event is a
/// `content_block_delta` (by its `type`, or by the SSE event name when
/// `type` is absent or `null`), the SSE event is not `error`, it has no
/// `error` field, and its `index` and `delta` are there with a `text_delta`
/// holding `text` or an `input_json_delta` holding `partial_json` for a
/// known tool_use block ([`StreamDecoder::decode_plain`]). Anything else — a
/// field of another type, a duplicate field, an array where an object
/// belongs, another event or delta type — goes through the `Value` path,
/// which says what is wrong. The difference: fields hale does not read are
/// skipped here without checking a number's range, an escape's surrogates
/// or the nesting depth, so an event the `Value` path calls malformed for
/// such a field alone still delivers its text (tests
/// `a_plain_event_decodes_as_the_value_path_does`,
/// `an_unread_field_out_of_range_does_not_lose_the_text`).
#[derive(Deserialize)]
struct PlainBlockDelta<'a> {
    #[serde(rename = "type", borrow)]
    kind: Option<Str<'a>>,
    index: Option<u64>,
    #[serde(borrow)]
    delta: Option<Obj<PlainDelta<'a>>>,
    error: Option<IgnoredAny>,
}

/// The `delta` of a [`PlainBlockDelta`].
#[derive(Deserialize)]
struct PlainDelta<'a> {
    #[serde(rename = "type", borrow)]
    kind: Option<Str<'a>>,
    #[serde(borrow)]
    text: Option<Str<'a>>,
    #[serde(borrow)]
    partial_json: Option<Str<'a>>,
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
        if let Ok(Obj(e)) = serde_json::from_str::<Obj<PlainBlockDelta>>(data)
            && let Some(out) = self.decode_plain(event, e)
        {
            return Ok(out);
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
        let ty = e.kind.as_ref().map(|Str(t)| t.as_ref()).or(event);
        if ty != Some("content_block_delta") {
            return None;
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

    fn ensure_started(&mut self, out: &mut Vec<SseFrame>) {
        if self.started {
            return;
        }
        self.started = true;
        out.push(Self::frame(
            "message_start",
            json!({"type": "message_start", "message": {
                "id": self.id,
                "type": "message",
                "role": "assistant",
                "model": self.model,
                "content": [],
                "stop_reason": null,
                "stop_sequence": null,
                "usage": {"input_tokens": self.usage.input_tokens, "output_tokens": 0},
            }}),
        ));
    }

    fn close_block(&mut self, out: &mut Vec<SseFrame>) {
        if self.open.take().is_some() {
            let index = self.next_block.saturating_sub(1);
            out.push(Self::frame(
                "content_block_stop",
                json!({"type": "content_block_stop", "index": index}),
            ));
        }
    }

    fn open_block(&mut self, kind: OpenBlock, block: Value, out: &mut Vec<SseFrame>) {
        self.close_block(out);
        let index = self.next_block;
        self.next_block = self.next_block.saturating_add(1);
        self.open = Some(kind);
        out.push(Self::frame(
            "content_block_start",
            json!({"type": "content_block_start", "index": index, "content_block": block}),
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
        out.push(Self::frame(
            "message_delta",
            json!({
                "type": "message_delta",
                "delta": {"stop_reason": stop_reason(reason), "stop_sequence": null},
                "usage": {"input_tokens": self.usage.input_tokens, "output_tokens": self.usage.output_tokens},
            }),
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
                        json!({"type": "text", "text": ""}),
                        &mut out,
                    );
                }
                let delta = TextBlockDelta {
                    delta: TextDelta {
                        text,
                        kind: "text_delta",
                    },
                    index: self.current_index(),
                    kind: "content_block_delta",
                };
                out.push(SseFrame {
                    event: Some("content_block_delta"),
                    // Serialising structs of strings and numbers cannot fail.
                    data: serde_json::to_string(&delta).unwrap_or_default(),
                });
            }
            StreamEvent::ToolCallStart { index, id, name } => {
                self.ensure_started(&mut out);
                if self.finish.is_some() {
                    return out;
                }
                self.any_tool = true;
                self.open_block(
                    OpenBlock::Tool(*index),
                    json!({"type": "tool_use", "id": id, "name": name, "input": {}}),
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
                out.push(Self::frame("message_stop", json!({"type": "message_stop"})));
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
                self.open_block(OpenBlock::Opaque, block.clone(), &mut out);
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
            .prop_map(|(pairs, shape)| crate::proto::json_object(pairs, shape == 0))
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

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2_000))]

        /// Over a stream of generated events (the decoder keeps the tool_use
        /// blocks from event to event), `decode` gives exactly what the
        /// `Value` path gives: the same events, or the same error.
        #[test]
        fn a_plain_event_decodes_as_the_value_path_does(events in stream()) {
            let mut fast = StreamDecoder::new();
            let mut tree = StreamDecoder::new();
            for (name, data) in &events {
                let name = name.as_deref();
                prop_assert_eq!(
                    fast.decode(name, data),
                    decode_by_tree(&mut tree, name, data),
                    "event {:?} data {}", name, data
                );
            }
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
