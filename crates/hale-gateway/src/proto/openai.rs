//! The OpenAI Chat Completions dialect (`/v1/chat/completions`, `/v1/models`).
//!
//! Everything here translates between the OpenAI wire shapes and the canonical
//! types of [`super`]: requests (parse from a caller, render for an upstream),
//! responses (parse from an upstream, render for a caller), error bodies, and
//! the SSE stream in both directions. Any OpenAI-compatible server (vLLM, Groq,
//! Ollama, …) speaks this dialect, so parsing is lenient where those servers
//! differ harmlessly (missing `id`, `null` for absent fields, a tool call
//! without `index`) and strict where a wrong guess would change meaning
//! (non-string tool arguments, a tool message without `tool_call_id`). Every
//! error names the JSON path of the offending field.
//!
//! Rules worth knowing:
//! - `system`/`developer` messages before the first other message are lifted
//!   into [`ChatRequest::system`], joined by a blank line; a system message in
//!   the middle of the conversation stays a [`Role::System`] message in place.
//! - Each `role: tool` message becomes one [`Role::Tool`] message with one
//!   [`Part::ToolResult`]; the Anthropic codec produces the same shape.
//! - A caller that spelled the limit `max_completion_tokens` has that key kept
//!   in [`ChatRequest::extra`] as a marker of its spelling; rendering for an
//!   OpenAI upstream then uses `max_completion_tokens` (reasoning models
//!   reject `max_tokens`), always with the value of [`ChatRequest::max_tokens`].
//! - [`StreamEvent::Usage`] is a cumulative snapshot: the latest one wins.
//! - An unknown `finish_reason` string (`eos`, vendor-specific) ends the turn
//!   normally ([`StopReason::EndTurn`]): the provider did declare it finished.

use std::time::{SystemTime, UNIX_EPOCH};

use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::fidelity::Trace;
use super::{
    ChatRequest, ChatResponse, Dialect, Message, Obj, Part, ProtoError, Role, StopReason, Str,
    StreamEvent, Tool, Usage,
};

/// Request fields this codec models; every other top-level field goes to `extra`.
const KNOWN_REQUEST_FIELDS: &[&str] = &[
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

/// The key kept in `extra` when the caller spelled the limit `max_completion_tokens`.
const MAX_COMPLETION_TOKENS: &str = "max_completion_tokens";

// ---------------------------------------------------------------------------
// Small JSON helpers shared with the Anthropic codec.
// ---------------------------------------------------------------------------

pub(crate) fn err(path: impl Into<String>, message: impl Into<String>) -> ProtoError {
    ProtoError::new(path, message)
}

/// `parent.key`, or `key` at the root.
pub(crate) fn join(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        key.to_string()
    } else {
        format!("{parent}.{key}")
    }
}

/// `parent[i]`.
pub(crate) fn at(parent: &str, i: usize) -> String {
    format!("{parent}[{i}]")
}

/// What kind of JSON value this is, for error messages.
pub(crate) fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The value as an object, or an error at `path` (`body` for the root).
pub(crate) fn as_object<'a>(
    v: &'a Value,
    path: &str,
) -> Result<&'a Map<String, Value>, ProtoError> {
    v.as_object().ok_or_else(|| {
        let p = if path.is_empty() { "body" } else { path };
        err(p, format!("must be an object, got {}", kind_of(v)))
    })
}

/// A field that is absent or `null` reads as `None`.
pub(crate) fn field<'a>(obj: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    obj.get(key).filter(|v| !v.is_null())
}

pub(crate) fn req_str<'a>(
    obj: &'a Map<String, Value>,
    key: &str,
    parent: &str,
) -> Result<&'a str, ProtoError> {
    match field(obj, key) {
        None => Err(err(join(parent, key), format!("missing `{key}`"))),
        Some(Value::String(s)) => Ok(s),
        Some(v) => Err(err(
            join(parent, key),
            format!("must be a string, got {}", kind_of(v)),
        )),
    }
}

pub(crate) fn opt_str<'a>(
    obj: &'a Map<String, Value>,
    key: &str,
    parent: &str,
) -> Result<Option<&'a str>, ProtoError> {
    match field(obj, key) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(v) => Err(err(
            join(parent, key),
            format!("must be a string, got {}", kind_of(v)),
        )),
    }
}

pub(crate) fn req_array<'a>(
    obj: &'a Map<String, Value>,
    key: &str,
    parent: &str,
) -> Result<&'a Vec<Value>, ProtoError> {
    match field(obj, key) {
        None => Err(err(join(parent, key), format!("missing `{key}`"))),
        Some(Value::Array(a)) => Ok(a),
        Some(v) => Err(err(
            join(parent, key),
            format!("must be an array, got {}", kind_of(v)),
        )),
    }
}

pub(crate) fn opt_array<'a>(
    obj: &'a Map<String, Value>,
    key: &str,
    parent: &str,
) -> Result<Option<&'a Vec<Value>>, ProtoError> {
    match field(obj, key) {
        None => Ok(None),
        Some(Value::Array(a)) => Ok(Some(a)),
        Some(v) => Err(err(
            join(parent, key),
            format!("must be an array, got {}", kind_of(v)),
        )),
    }
}

pub(crate) fn opt_bool(
    obj: &Map<String, Value>,
    key: &str,
    parent: &str,
) -> Result<Option<bool>, ProtoError> {
    match field(obj, key) {
        None => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(v) => Err(err(
            join(parent, key),
            format!("must be a boolean, got {}", kind_of(v)),
        )),
    }
}

pub(crate) fn opt_f64(
    obj: &Map<String, Value>,
    key: &str,
    parent: &str,
) -> Result<Option<f64>, ProtoError> {
    match field(obj, key) {
        None => Ok(None),
        Some(Value::Number(n)) => n
            .as_f64()
            .map(Some)
            .ok_or_else(|| err(join(parent, key), "must be a finite number")),
        Some(v) => Err(err(
            join(parent, key),
            format!("must be a number, got {}", kind_of(v)),
        )),
    }
}

pub(crate) fn opt_u32(
    obj: &Map<String, Value>,
    key: &str,
    parent: &str,
) -> Result<Option<u32>, ProtoError> {
    match field(obj, key) {
        None => Ok(None),
        Some(v) => v
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .map(Some)
            .ok_or_else(|| {
                err(
                    join(parent, key),
                    format!(
                        "must be a non-negative integer below 2^32, got {}",
                        kind_of(v)
                    ),
                )
            }),
    }
}

/// A token count; tolerant of absence and of junk (usage never fails a response).
pub(crate) fn count(obj: Option<&Map<String, Value>>, key: &str) -> u64 {
    obj.and_then(|o| o.get(key))
        .and_then(Value::as_u64)
        .unwrap_or(0)
}

/// The human-readable message of a provider's `error` value (object or string).
pub(crate) fn error_message(e: &Value) -> String {
    match e {
        Value::String(s) => s.clone(),
        Value::Object(o) => {
            let msg = o.get("message").and_then(Value::as_str).unwrap_or("");
            let kind = o
                .get("type")
                .or_else(|| o.get("code"))
                .and_then(Value::as_str)
                .unwrap_or("");
            match (kind.is_empty(), msg.is_empty()) {
                (true, true) => e.to_string(),
                (true, false) => msg.to_string(),
                (false, true) => kind.to_string(),
                (false, false) => format!("{kind}: {msg}"),
            }
        }
        Value::Null | Value::Bool(_) | Value::Number(_) | Value::Array(_) => e.to_string(),
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// The default JSON schema of a tool that declares no parameters.
pub(crate) fn empty_schema() -> Value {
    json!({"type": "object", "properties": {}})
}

// ---------------------------------------------------------------------------
// Stop reasons.
// ---------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------
// Images between dialects.
// ---------------------------------------------------------------------------

/// An Anthropic `image` block as an OpenAI `image_url` part, when it is one.
pub(crate) fn image_from_anthropic(block: &Value) -> Option<Value> {
    if block.get("type").and_then(Value::as_str) != Some("image") {
        return None;
    }
    let source = block.get("source")?;
    match source.get("type").and_then(Value::as_str)? {
        "base64" => {
            let media = source.get("media_type").and_then(Value::as_str)?;
            let data = source.get("data").and_then(Value::as_str)?;
            Some(
                json!({"type": "image_url", "image_url": {"url": format!("data:{media};base64,{data}")}}),
            )
        }
        "url" => {
            let url = source.get("url").and_then(Value::as_str)?;
            Some(json!({"type": "image_url", "image_url": {"url": url}}))
        }
        _ => None,
    }
}

// ---------------------------------------------------------------------------
// Requests.
// ---------------------------------------------------------------------------

/// Parses an incoming request body of this dialect.
///
/// Errors name the JSON path (e.g. `messages[2].content`) and what is wrong:
/// missing `model`, `messages` not an array, unknown role, tool message without
/// `tool_call_id`, non-string arguments, and so on.
pub fn parse_request(body: &Value) -> Result<ChatRequest, ProtoError> {
    parse_request_traced(body).map(|(req, _)| req)
}

/// [`parse_request`], also telling which canonical messages each wire
/// message became (for [`super::fidelity`]).
pub(crate) fn parse_request_traced(body: &Value) -> Result<(ChatRequest, Trace), ProtoError> {
    let obj = as_object(body, "")?;
    let model = req_str(obj, "model", "")?.to_string();
    let raw_messages = req_array(obj, "messages", "")?;

    let mut system: Vec<String> = Vec::new();
    let mut messages: Vec<Message> = Vec::new();
    let mut trace = Trace::with_capacity(raw_messages.len());
    for (i, m) in raw_messages.iter().enumerate() {
        let before = messages.len();
        let p = at("messages", i);
        let mo = as_object(m, &p)?;
        let role = req_str(mo, "role", &p)?;
        match role {
            "system" | "developer" => {
                let text = text_content(field(mo, "content"), &join(&p, "content"))?;
                if messages.is_empty() {
                    system.push(text);
                    trace.lifted += 1;
                } else {
                    messages.push(Message::text(Role::System, text));
                }
            }
            "user" => {
                let content = user_content(field(mo, "content"), &join(&p, "content"))?;
                messages.push(Message {
                    role: Role::User,
                    content,
                });
            }
            "assistant" => {
                let mut content = user_content(field(mo, "content"), &join(&p, "content"))?;
                if let Some(calls) = opt_array(mo, "tool_calls", &p)? {
                    content.extend(parse_tool_calls(calls, &join(&p, "tool_calls"))?);
                }
                messages.push(Message {
                    role: Role::Assistant,
                    content,
                });
            }
            "tool" => {
                let tool_call_id = match field(mo, "tool_call_id") {
                    None => {
                        return Err(err(
                            join(&p, "tool_call_id"),
                            "tool message without `tool_call_id`",
                        ));
                    }
                    Some(_) => req_str(mo, "tool_call_id", &p)?.to_string(),
                };
                let content = text_content(field(mo, "content"), &join(&p, "content"))?;
                messages.push(Message {
                    role: Role::Tool,
                    content: vec![Part::ToolResult {
                        tool_call_id,
                        content,
                        is_error: false,
                    }],
                });
            }
            other => {
                return Err(err(
                    join(&p, "role"),
                    format!(
                        "unknown role `{other}` (expected system, developer, user, assistant or tool)"
                    ),
                ));
            }
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
        Some(tc) => Some(validate_tool_choice(tc)?),
    };

    let max_completion = opt_u32(obj, MAX_COMPLETION_TOKENS, "")?;
    let max_tokens = match max_completion {
        Some(n) => Some(n),
        None => opt_u32(obj, "max_tokens", "")?,
    };

    let stop = match field(obj, "stop") {
        None => Vec::new(),
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(a)) => {
            let mut out = Vec::with_capacity(a.len());
            for (i, s) in a.iter().enumerate() {
                match s {
                    Value::String(s) => out.push(s.clone()),
                    other => {
                        return Err(err(
                            at("stop", i),
                            format!("must be a string, got {}", kind_of(other)),
                        ));
                    }
                }
            }
            out
        }
        Some(v) => {
            return Err(err(
                "stop",
                format!(
                    "must be a string or an array of strings, got {}",
                    kind_of(v)
                ),
            ));
        }
    };

    let include_usage = match field(obj, "stream_options") {
        None => false,
        Some(so) => {
            let so = as_object(so, "stream_options")?;
            opt_bool(so, "include_usage", "stream_options")?.unwrap_or(false)
        }
    };

    let mut extra = Map::new();
    for (k, v) in obj {
        if !KNOWN_REQUEST_FIELDS.contains(&k.as_str()) {
            extra.insert(k.clone(), v.clone());
        }
    }
    if max_completion.is_some() {
        extra.insert(MAX_COMPLETION_TOKENS.to_string(), json!(max_completion));
    }

    let req = ChatRequest {
        model,
        system: if system.is_empty() {
            None
        } else {
            Some(system.join("\n\n"))
        },
        messages,
        tools,
        tool_choice,
        max_tokens,
        temperature: opt_f64(obj, "temperature", "")?,
        top_p: opt_f64(obj, "top_p", "")?,
        stop,
        stream: opt_bool(obj, "stream", "")?.unwrap_or(false),
        include_usage,
        extra,
        dialect: Dialect::OpenAi,
        origin: None,
    };
    Ok((req, trace))
}

/// Content that must be text: a string, or an array of `text` parts (joined by newlines).
fn text_content(v: Option<&Value>, path: &str) -> Result<String, ProtoError> {
    match v {
        None => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Array(parts)) => {
            let mut texts = Vec::with_capacity(parts.len());
            for (j, part) in parts.iter().enumerate() {
                let pp = at(path, j);
                let po = as_object(part, &pp)?;
                match req_str(po, "type", &pp)? {
                    "text" => texts.push(req_str(po, "text", &pp)?.to_string()),
                    other => {
                        return Err(err(
                            join(&pp, "type"),
                            format!("only `text` parts are allowed here, got `{other}`"),
                        ));
                    }
                }
            }
            Ok(texts.join("\n"))
        }
        Some(other) => Err(err(
            path,
            format!(
                "must be a string or an array of text parts, got {}",
                kind_of(other)
            ),
        )),
    }
}

/// User/assistant content: a string, `null`, or an array of parts (`text` → text, anything else opaque).
fn user_content(v: Option<&Value>, path: &str) -> Result<Vec<Part>, ProtoError> {
    match v {
        None => Ok(Vec::new()),
        Some(Value::String(s)) => Ok(if s.is_empty() {
            Vec::new()
        } else {
            vec![Part::Text { text: s.clone() }]
        }),
        Some(Value::Array(parts)) => {
            let mut out = Vec::with_capacity(parts.len());
            for (j, part) in parts.iter().enumerate() {
                let pp = at(path, j);
                let po = as_object(part, &pp)?;
                match req_str(po, "type", &pp)? {
                    "text" => out.push(Part::Text {
                        text: req_str(po, "text", &pp)?.to_string(),
                    }),
                    _ => out.push(Part::Opaque {
                        dialect: Dialect::OpenAi,
                        value: part.clone(),
                    }),
                }
            }
            Ok(out)
        }
        Some(other) => Err(err(
            path,
            format!(
                "must be a string or an array of content parts, got {}",
                kind_of(other)
            ),
        )),
    }
}

/// `tool_calls` of an assistant message (request) or of a response message.
fn parse_tool_calls(calls: &[Value], path: &str) -> Result<Vec<Part>, ProtoError> {
    let mut out = Vec::with_capacity(calls.len());
    for (j, c) in calls.iter().enumerate() {
        let cp = at(path, j);
        let co = as_object(c, &cp)?;
        if let Some(t) = opt_str(co, "type", &cp)?
            && t != "function"
        {
            return Err(err(
                join(&cp, "type"),
                format!("unsupported tool call type `{t}` (only `function`)"),
            ));
        }
        let id = req_str(co, "id", &cp)?.to_string();
        let fp = join(&cp, "function");
        let f = match field(co, "function") {
            None => return Err(err(fp, "missing `function`")),
            Some(f) => as_object(f, &fp)?,
        };
        let name = req_str(f, "name", &fp)?.to_string();
        let arguments = match f.get("arguments") {
            None => return Err(err(join(&fp, "arguments"), "missing `arguments`")),
            Some(Value::String(s)) => s.clone(),
            Some(v) => {
                return Err(err(
                    join(&fp, "arguments"),
                    format!("must be a JSON-encoded string, got {}", kind_of(v)),
                ));
            }
        };
        out.push(Part::ToolCall {
            id,
            name,
            arguments,
        });
    }
    Ok(out)
}

fn parse_tool(t: &Value, path: &str) -> Result<Tool, ProtoError> {
    let to = as_object(t, path)?;
    if let Some(ty) = opt_str(to, "type", path)?
        && ty != "function"
    {
        return Err(err(
            join(path, "type"),
            format!("unsupported tool type `{ty}` (only `function`)"),
        ));
    }
    let fp = join(path, "function");
    let f = match field(to, "function") {
        None => return Err(err(fp, "missing `function`")),
        Some(f) => as_object(f, &fp)?,
    };
    let name = req_str(f, "name", &fp)?.to_string();
    let description = opt_str(f, "description", &fp)?.map(str::to_string);
    let parameters = match field(f, "parameters") {
        None => empty_schema(),
        Some(p @ Value::Object(_)) => p.clone(),
        Some(v) => {
            return Err(err(
                join(&fp, "parameters"),
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

/// Accepts `"auto"|"none"|"required"`, `{type:function,function:{name}}`, and
/// other object forms (kept as they are, for OpenAI upstreams only).
fn validate_tool_choice(tc: &Value) -> Result<Value, ProtoError> {
    match tc {
        Value::String(s) => match s.as_str() {
            "auto" | "none" | "required" => Ok(tc.clone()),
            other => Err(err(
                "tool_choice",
                format!("unknown tool_choice `{other}` (expected auto, none or required)"),
            )),
        },
        Value::Object(o) => {
            if o.get("type").and_then(Value::as_str) == Some("function") {
                let f = match field(o, "function") {
                    None => return Err(err("tool_choice.function", "missing `function`")),
                    Some(f) => as_object(f, "tool_choice.function")?,
                };
                req_str(f, "name", "tool_choice.function")?;
            }
            Ok(tc.clone())
        }
        other => Err(err(
            "tool_choice",
            format!("must be a string or an object, got {}", kind_of(other)),
        )),
    }
}

/// Renders a request for an OpenAI-compatible upstream serving `model`.
///
/// `prefill`, when given and non-empty, is appended as a trailing assistant
/// message (for targets that continue it). Fields in `req.extra` are passed
/// through only when the request arrived in this dialect. When `req.stream`,
/// `stream: true` and `stream_options: {include_usage: true}` are set: hale
/// always asks for usage upstream, whatever the caller asked.
pub fn render_request(req: &ChatRequest, model: &str, prefill: Option<&str>) -> Value {
    let mut body = Map::new();
    let same_dialect = req.dialect == Dialect::OpenAi;
    if same_dialect {
        for (k, v) in &req.extra {
            body.insert(k.clone(), v.clone());
        }
    }
    body.insert("model".into(), json!(model));

    let mut messages = Vec::new();
    if let Some(s) = &req.system
        && !s.is_empty()
    {
        messages.push(json!({"role": "system", "content": s}));
    }
    for m in &req.messages {
        render_message(m, &mut messages);
    }
    if let Some(p) = prefill
        && !p.is_empty()
    {
        messages.push(json!({"role": "assistant", "content": p}));
    }
    body.insert("messages".into(), Value::Array(messages));

    if !req.tools.is_empty() {
        let tools: Vec<Value> = req
            .tools
            .iter()
            .map(|t| {
                let mut f = Map::new();
                f.insert("name".into(), json!(t.name));
                if let Some(d) = &t.description {
                    f.insert("description".into(), json!(d));
                }
                f.insert("parameters".into(), t.parameters.clone());
                json!({"type": "function", "function": f})
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
        if let Some(tc) = &req.tool_choice {
            body.insert("tool_choice".into(), tc.clone());
        }
    }

    let completion_spelling = same_dialect && req.extra.contains_key(MAX_COMPLETION_TOKENS);
    body.remove(MAX_COMPLETION_TOKENS);
    if let Some(n) = req.max_tokens {
        let key = if completion_spelling {
            MAX_COMPLETION_TOKENS
        } else {
            "max_tokens"
        };
        body.insert(key.into(), json!(n));
    }
    if let Some(t) = req.temperature {
        body.insert("temperature".into(), json!(t));
    }
    if let Some(t) = req.top_p {
        body.insert("top_p".into(), json!(t));
    }
    if !req.stop.is_empty() {
        body.insert("stop".into(), json!(req.stop));
    }
    if req.stream {
        body.insert("stream".into(), json!(true));
        body.insert("stream_options".into(), json!({"include_usage": true}));
    }
    Value::Object(body)
}

/// One canonical message as OpenAI messages (a user message holding tool
/// results becomes several).
pub(crate) fn render_message(m: &Message, out: &mut Vec<Value>) {
    match m.role {
        Role::System => out.push(json!({"role": "system", "content": m.joined_text()})),
        Role::User | Role::Tool => render_user_like(&m.content, out),
        Role::Assistant => out.push(render_assistant(&m.content)),
    }
}

/// A user or tool message: tool results become `role: tool` messages (first,
/// as OpenAI wants them right after the assistant's calls), the rest one user message.
fn render_user_like(parts: &[Part], out: &mut Vec<Value>) {
    let mut rest: Vec<Value> = Vec::new();
    let mut all_text = true;
    for p in parts {
        match p {
            Part::ToolResult {
                tool_call_id,
                content,
                is_error: _,
            } => {
                out.push(json!({"role": "tool", "tool_call_id": tool_call_id, "content": content}))
            }
            Part::Text { text } => rest.push(json!({"type": "text", "text": text})),
            Part::Opaque {
                dialect: Dialect::OpenAi,
                value,
            } => {
                all_text = false;
                rest.push(value.clone());
            }
            Part::Opaque {
                dialect: Dialect::Anthropic,
                value,
            } => {
                if let Some(img) = image_from_anthropic(value) {
                    all_text = false;
                    rest.push(img);
                }
            }
            Part::ToolCall { .. } => {}
        }
    }
    if rest.is_empty() {
        return;
    }
    let content = if all_text && rest.len() == 1 {
        rest[0].get("text").cloned().unwrap_or(Value::Null)
    } else {
        Value::Array(rest)
    };
    out.push(json!({"role": "user", "content": content}));
}

fn render_tool_call(id: &str, name: &str, arguments: &str) -> Value {
    json!({"id": id, "type": "function", "function": {"name": name, "arguments": arguments}})
}

/// An assistant message: text joined, tool calls as `tool_calls`; other parts
/// (Anthropic thinking blocks) have no OpenAI form and are dropped.
fn render_assistant(parts: &[Part]) -> Value {
    let (text, calls) = split_assistant(parts);
    let mut m = Map::new();
    m.insert("role".into(), json!("assistant"));
    m.insert(
        "content".into(),
        if text.is_empty() && !calls.is_empty() {
            Value::Null
        } else {
            json!(text)
        },
    );
    if !calls.is_empty() {
        m.insert("tool_calls".into(), Value::Array(calls));
    }
    Value::Object(m)
}

fn split_assistant(parts: &[Part]) -> (String, Vec<Value>) {
    let mut text = String::new();
    let mut calls = Vec::new();
    for p in parts {
        match p {
            Part::Text { text: t } => text.push_str(t),
            Part::ToolCall {
                id,
                name,
                arguments,
            } => calls.push(render_tool_call(id, name, arguments)),
            Part::Opaque { .. } | Part::ToolResult { .. } => {}
        }
    }
    (text, calls)
}

// ---------------------------------------------------------------------------
// Responses.
// ---------------------------------------------------------------------------

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

fn usage_json(u: Usage) -> Value {
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

// ---------------------------------------------------------------------------
// Streaming.
// ---------------------------------------------------------------------------

/// One server-sent event as hale writes it to a caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseFrame {
    /// The `event:` field (Anthropic names every event; OpenAI never does).
    pub event: Option<&'static str>,
    /// The `data:` field (JSON, or `[DONE]`).
    pub data: String,
}

impl SseFrame {
    /// The frame on the wire: `event: …\n` when named, one `data:` line per
    /// line of data, and the blank line that ends the event.
    pub fn to_wire(&self) -> String {
        let mut s = String::with_capacity(self.wire_len());
        self.write_wire(&mut s);
        s
    }

    /// Appends [`SseFrame::to_wire`] to `s`.
    pub fn write_wire(&self, s: &mut String) {
        if let Some(e) = self.event {
            s.push_str("event: ");
            s.push_str(e);
            s.push('\n');
        }
        for line in self.data.split('\n') {
            s.push_str("data: ");
            s.push_str(line);
            s.push('\n');
        }
        s.push('\n');
    }

    /// About the length on the wire (exact for data of one line).
    pub fn wire_len(&self) -> usize {
        self.event.map_or(0, |e| e.len() + 8) + self.data.len() + 8
    }
}

/// An upstream chunk of the common shape — text, a finish, usage — read
/// straight from the data line, strings borrowed ([`Str`]), without a `Value` tree:
/// a stream has one per token, and the tree with its paths for error
/// messages was most of the cost of decoding one (callgrind, BENCHMARKS).
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

impl PlainChunk<'_> {
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
struct PlainChoice<'a> {
    index: Option<u64>,
    #[serde(borrow)]
    delta: Option<Obj<PlainDelta<'a>>>,
    #[serde(borrow)]
    finish_reason: Option<Str<'a>>,
}

#[derive(Deserialize)]
struct PlainDelta<'a> {
    #[serde(borrow)]
    content: Option<Str<'a>>,
    tool_calls: Option<IgnoredAny>,
}

#[derive(Deserialize)]
struct PlainUsage {
    prompt_tokens: Option<u64>,
    completion_tokens: Option<u64>,
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
        match serde_json::from_str::<Obj<PlainChunk>>(data) {
            Ok(Obj(chunk)) if chunk.is_plain() => Ok(self.decode_plain(chunk)),
            Ok(_) | Err(_) => self.decode_tree(data),
        }
    }

    /// [`StreamDecoder::decode`] of a chunk read as [`PlainChunk`]: the
    /// same events in the same order as [`StreamDecoder::decode_tree`].
    fn decode_plain(&mut self, chunk: PlainChunk) -> Vec<StreamEvent> {
        let mut out = Vec::new();
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

/// A piece of text.
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
        }
    }

    /// Sets the `created` timestamp of every chunk (deterministic output in tests).
    pub fn with_created(mut self, created: u64) -> Self {
        self.created = created;
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
                }
                if self.model.is_empty() {
                    self.model.clone_from(model);
                }
                self.ensure_started(&mut out);
            }
            StreamEvent::TextDelta(text) => {
                self.ensure_started(&mut out);
                if !text.is_empty() && !self.finished {
                    out.push(self.chunk(ContentDelta { content: text }, None));
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
            .prop_map(|(pairs, shape)| crate::proto::json_object(pairs, shape == 0))
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

        /// Over a stream of generated chunks (the decoder keeps state from
        /// chunk to chunk), `decode` gives exactly what the `Value` path
        /// gives: the same events, or the same error.
        #[test]
        fn a_plain_chunk_decodes_as_the_value_path_does(chunks in proptest::collection::vec(chunk(), 1..6)) {
            let mut fast = StreamDecoder::new();
            let mut tree = StreamDecoder::new();
            for c in chunks.iter().map(String::as_str).chain(["[DONE]"]) {
                prop_assert_eq!(fast.decode(None, c), decode_by_tree(&mut tree, c), "chunk {}", c);
            }
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
