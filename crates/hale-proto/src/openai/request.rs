//! OpenAI requests: parsing a caller's `/v1/chat/completions` body into a
//! [`ChatRequest`], and rendering a [`ChatRequest`] for an OpenAI-compatible
//! provider (with the other dialect's images in OpenAI's form). The content
//! and tool-call readers here also serve the response parser.

use serde_json::{Map, Value, json};

use crate::canonical::{ChatRequest, Dialect, Message, Part, ProtoError, Role, Tool, Trace};
use crate::json::{
    as_object, at, empty_schema, err, field, join, kind_of, opt_array, opt_bool, opt_f64, opt_str,
    opt_u32, req_array, req_str,
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

/// A Responses `input_image` part as an OpenAI `image_url` part, when it
/// has a URL (an image given by `file_id` has no Chat Completions form).
pub(crate) fn image_from_responses(part: &Value) -> Option<Value> {
    if part.get("type").and_then(Value::as_str) != Some("input_image") {
        return None;
    }
    let url = part.get("image_url").and_then(Value::as_str)?;
    let mut image = Map::new();
    image.insert("url".into(), json!(url));
    if let Some(d) = part.get("detail").and_then(Value::as_str) {
        image.insert("detail".into(), json!(d));
    }
    Some(json!({"type": "image_url", "image_url": image}))
}

/// Parses an incoming request body of this dialect.
///
/// Errors name the JSON path (e.g. `messages[2].content`) and what is wrong:
/// missing `model`, `messages` not an array, unknown role, tool message without
/// `tool_call_id`, non-string arguments, and so on.
pub fn parse_request(body: &Value) -> Result<ChatRequest, ProtoError> {
    parse_request_traced(body).map(|(req, _)| req)
}

/// [`parse_request`], also telling which canonical messages each wire
/// message became (for [`crate::fidelity`]).
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
pub(super) fn user_content(v: Option<&Value>, path: &str) -> Result<Vec<Part>, ProtoError> {
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
pub(super) fn parse_tool_calls(calls: &[Value], path: &str) -> Result<Vec<Part>, ProtoError> {
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

/// Sets `stream_options.include_usage` to `true` in a Chat Completions
/// body, as hale asks for usage on every stream (it accounts every turn):
/// `stream_options` added when absent, made an object when it is not one,
/// `include_usage` added or overwritten. Whether the body changed.
pub(crate) fn ask_for_usage(body: &mut Map<String, Value>) -> bool {
    let so = body.entry("stream_options").or_insert_with(|| json!({}));
    if !so.is_object() {
        *so = json!({});
    }
    match so.as_object_mut() {
        Some(o) if o.get("include_usage") != Some(&Value::Bool(true)) => {
            o.insert("include_usage".into(), json!(true));
            true
        }
        // Replaced by an empty object just above when it was not one.
        Some(_) | None => false,
    }
}

/// The client's bytes `raw` of the object `body` with
/// `stream_options.include_usage` set to `true`, as [`ask_for_usage`]
/// sets it in the JSON (`stream_options` added when absent, made an object
/// when it is not one, `include_usage` added or overwritten): the field
/// spliced into the bytes, everything else as the client wrote it, so a
/// stream that only lacks it is not rebuilt and serialised again (~13k
/// instructions a turn under callgrind). `raw` must be the bytes `body` was
/// read from, holding no repeated key (`parse::parse_sent` keeps only
/// such bytes). `None` when the member is not found by a plain scan (a
/// key holding an escape, deep nesting): the caller serialises the JSON.
pub(crate) fn with_usage(raw: &[u8], body: &Map<String, Value>) -> Option<bytes::Bytes> {
    const OPTIONS: &[u8] = br#""stream_options":{"include_usage":true}"#;
    const USAGE: &[u8] = br#""include_usage":true"#;
    let (at, cut, with): (usize, usize, &[&[u8]]) = match body.get("stream_options") {
        // Before the object's closing brace (only whitespace follows it).
        None => {
            let end = raw.iter().rposition(|&b| b == b'}')?;
            let with: &[&[u8]] = if body.is_empty() {
                &[OPTIONS]
            } else {
                &[b",", OPTIONS]
            };
            (end, end, with)
        }
        Some(options) => {
            let text = std::str::from_utf8(raw).ok()?;
            let span = crate::scan::member(text, "stream_options")??;
            match options {
                Value::Object(o) => {
                    let inner = crate::scan::member(&text[span.clone()], "include_usage")?;
                    match inner {
                        Some(v) => (span.start + v.start, span.start + v.end, &[b"true"]),
                        None => {
                            // The options' closing brace is the span's last byte.
                            let end = span.end - 1;
                            let with: &[&[u8]] = if o.is_empty() {
                                &[USAGE]
                            } else {
                                &[b",", USAGE]
                            };
                            (end, end, with)
                        }
                    }
                }
                Value::Null
                | Value::Bool(_)
                | Value::Number(_)
                | Value::String(_)
                | Value::Array(_) => (span.start, span.end, &[br#"{"include_usage":true}"#]),
            }
        }
    };
    let mut out = Vec::with_capacity(raw.len() + OPTIONS.len() + 1);
    out.extend_from_slice(raw.get(..at)?);
    for piece in with {
        out.extend_from_slice(piece);
    }
    out.extend_from_slice(raw.get(cut..)?);
    Some(out.into())
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
            Part::Opaque {
                dialect: Dialect::Responses,
                value,
            } => {
                if let Some(img) = image_from_responses(value) {
                    all_text = false;
                    rest.push(img);
                }
            }
            // A Gemini answer's thought or data parts: no OpenAI form.
            Part::Opaque {
                dialect: Dialect::Gemini | Dialect::Bedrock,
                ..
            } => {}
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

pub(super) fn split_assistant(parts: &[Part]) -> (String, Vec<Value>) {
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

#[cfg(test)]
mod usage_tests {
    use super::*;
    use proptest::prelude::*;

    /// What the same-dialect patch does to the JSON ([`ask_for_usage`]):
    /// the reading `with_usage` must match.
    fn by_value(mut body: Map<String, Value>) -> Value {
        ask_for_usage(&mut body);
        Value::Object(body)
    }

    /// `with_usage` of `text`, read back as JSON.
    fn spliced(text: &str) -> Option<Value> {
        let Ok(Value::Object(body)) = serde_json::from_str::<Value>(text) else {
            panic!("not an object: {text}");
        };
        let raw = with_usage(text.as_bytes(), &body)?;
        Some(serde_json::from_slice(&raw).unwrap_or_else(|e| panic!("{e}: {raw:?}")))
    }

    #[test]
    fn the_field_is_spliced_as_the_patch_sets_it() {
        let cases = [
            // Absent: added before the closing brace, spaces kept.
            (
                r#"{"model":"m","stream":true}"#,
                r#"{"model":"m","stream":true,"stream_options":{"include_usage":true}}"#,
            ),
            (
                "\n {\"stream\" : true ,\n \"a\":{\"stream_options\":1} }\t\n",
                "\n {\"stream\" : true ,\n \"a\":{\"stream_options\":1} ,\"stream_options\":{\"include_usage\":true}}\t\n",
            ),
            ("{}", r#"{"stream_options":{"include_usage":true}}"#),
            (" { } ", r#" { "stream_options":{"include_usage":true}} "#),
            // Present, an object: `include_usage` added or overwritten.
            (
                r#"{"stream_options":{},"stream":true}"#,
                r#"{"stream_options":{"include_usage":true},"stream":true}"#,
            ),
            (
                r#"{"stream_options": { } ,"stream":true}"#,
                r#"{"stream_options": { "include_usage":true} ,"stream":true}"#,
            ),
            (
                r#"{"stream_options":{"include_usage":false}}"#,
                r#"{"stream_options":{"include_usage":true}}"#,
            ),
            (
                r#"{"stream_options":{"include_obfuscation":false, "include_usage" : null }}"#,
                r#"{"stream_options":{"include_obfuscation":false, "include_usage" : true }}"#,
            ),
            (
                r#"{"stream_options":{"include_obfuscation":false}}"#,
                r#"{"stream_options":{"include_obfuscation":false,"include_usage":true}}"#,
            ),
            // Present, not an object: replaced.
            (
                r#"{"stream_options":null,"x":[1]}"#,
                r#"{"stream_options":{"include_usage":true},"x":[1]}"#,
            ),
            (
                r#"{"a":"}","stream_options":[{"include_usage":false}]}"#,
                r#"{"a":"}","stream_options":{"include_usage":true}}"#,
            ),
        ];
        for (text, want) in cases {
            let Ok(Value::Object(body)) = serde_json::from_str::<Value>(text) else {
                panic!("{text}");
            };
            let raw = with_usage(text.as_bytes(), &body).expect(text);
            assert_eq!(std::str::from_utf8(&raw).unwrap(), want, "{text}");
            assert_eq!(spliced(text).unwrap(), by_value(body), "{text}");
        }
    }

    /// A `stream_options` key spelled with an escape is not found by the
    /// scan: no bytes, so the caller sends the patched JSON.
    #[test]
    fn an_escaped_key_leaves_the_bytes_to_the_json() {
        for text in [
            r#"{"stream\u005foptions":{}}"#,
            r#"{"stream_options":{"include\u005fusage":false}}"#,
            r#"{"\u0061":1,"stream_options":{}}"#,
        ] {
            assert_eq!(spliced(text), None, "{text}");
        }
        // Absent, an escaped key elsewhere does not matter.
        assert_eq!(
            spliced(r#"{"\u0061":1}"#),
            Some(json!({"a": 1, "stream_options": {"include_usage": true}}))
        );
    }

    fn leaf() -> impl Strategy<Value = Value> {
        prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i32>().prop_map(Value::from),
            "[a-z{}\\[\\],:\"\\\\ ]{0,6}".prop_map(Value::from),
        ]
    }

    fn value() -> impl Strategy<Value = Value> {
        let key = prop_oneof![
            Just("stream_options".to_string()),
            Just("include_usage".to_string()),
            "[a-z_]{1,8}",
        ];
        leaf().prop_recursive(3, 24, 4, move |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                proptest::collection::btree_map(key.clone(), inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// `stream_options` as a client may send it, or absent.
    fn options() -> impl Strategy<Value = Option<Value>> {
        proptest::option::of(prop_oneof![
            Just(json!({})),
            Just(json!({"include_usage": true})),
            Just(json!({"include_usage": false})),
            Just(json!({"include_usage": null, "include_obfuscation": false})),
            Just(json!({"include_obfuscation": false})),
            value(),
        ])
    }

    proptest! {
        /// Whatever the body, its spacing and where `stream_options` is (or
        /// whether it is), the spliced bytes read as the patched JSON.
        #[test]
        fn the_spliced_bytes_read_as_the_patched_json(
            fields in proptest::collection::btree_map("[a-z_]{1,8}", value(), 0..5),
            options in options(),
            pretty in any::<bool>(),
            (lead, trail) in ("[ \n\t\r]{0,3}", "[ \n\t\r]{0,3}"),
        ) {
            let mut body: Map<String, Value> = fields.into_iter().collect();
            if let Some(o) = options {
                body.insert("stream_options".into(), o);
            }
            let doc = Value::Object(body.clone());
            let inner = if pretty {
                serde_json::to_string_pretty(&doc).unwrap()
            } else {
                serde_json::to_string(&doc).unwrap()
            };
            let text = format!("{lead}{inner}{trail}");
            let raw = with_usage(text.as_bytes(), &body);
            // Keys here hold no escapes, so the scan always finds the member.
            prop_assert!(raw.is_some(), "{}", text);
            let got: Value = serde_json::from_slice(&raw.unwrap()).unwrap();
            prop_assert_eq!(got, by_value(body), "{}", text);
        }
    }
}
