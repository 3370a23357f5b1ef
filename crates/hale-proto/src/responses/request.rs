//! Responses requests: parsing a caller's `POST /v1/responses` body into a
//! [`ChatRequest`], and rendering a [`ChatRequest`] as a Responses body for
//! a provider that serves `/responses`.
//!
//! `input` is a string (one user message) or a list of items. Items that
//! belong to the assistant's side of a turn — an assistant message, a
//! `function_call`, a `custom_tool_call`, a `reasoning` item, a hosted
//! tool's call — are folded, when consecutive, into one canonical assistant
//! message (so a Chat Completions provider sees one assistant message with
//! all its tool calls, as it requires); the [`Trace`] reports the first item
//! of such a run as the wire message and the others as empty spans
//! ([`continues_run`] tells them apart for the fidelity patch).

use serde_json::{Map, Value, json};

use super::DIALECT;
use crate::canonical::{ChatRequest, Dialect, Message, Part, ProtoError, Role, Tool, Trace};
use crate::json::{
    as_object, at, empty_schema, err, field, join, kind_of, opt_array, opt_bool, opt_f64, opt_str,
    opt_u32, req_str,
};

/// Request fields this codec models; every other top-level field goes to `extra`.
pub(crate) const KNOWN_REQUEST_FIELDS: &[&str] = &[
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

/// The key in [`ChatRequest::extra`] listing the names of the request's
/// `custom` (free-form) tools: canonically they are functions taking
/// `{"input": string}` ([`custom_schema`]); this says which to render back
/// as `custom`. Never sent (keys starting `_hale_` are hale's own).
pub const CUSTOM_TOOLS_KEY: &str = "_hale_custom_tools";

/// The key in [`ChatRequest::extra`] holding the request's hosted tools
/// (`web_search`, `file_search`, `code_interpreter`, `mcp`, …) as sent:
/// no canonical form, passed to a Responses provider only.
pub const HOSTED_TOOLS_KEY: &str = "_hale_hosted_tools";

/// The prefix of hale's own keys in `extra`, never sent upstream.
const INTERNAL_PREFIX: &str = "_hale_";

/// The canonical parameters of a `custom` tool: one string, `input`.
pub fn custom_schema() -> Value {
    json!({
        "type": "object",
        "properties": {"input": {"type": "string", "description": "The tool's free-form input."}},
        "required": ["input"],
    })
}

/// A custom tool call's free-form `input` as canonical arguments.
pub fn custom_input_to_arguments(input: &str) -> String {
    json!({ "input": input }).to_string()
}

/// Canonical arguments of a custom tool call back to its free-form input:
/// the `input` string of `{"input": …}`, else the arguments as they are.
pub fn arguments_to_custom_input(arguments: &str) -> String {
    match serde_json::from_str::<Value>(arguments) {
        Ok(Value::Object(o)) => match o.get("input") {
            Some(Value::String(s)) if o.len() == 1 => s.clone(),
            _ => arguments.to_string(),
        },
        _ => arguments.to_string(),
    }
}

/// The names of the request's custom tools ([`CUSTOM_TOOLS_KEY`]).
pub fn custom_tools(req: &ChatRequest) -> Vec<String> {
    req.extra
        .get(CUSTOM_TOOLS_KEY)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// Whether an input item is on the assistant's side of a turn (its output
/// replayed as input).
pub(crate) fn assistant_side(item: &Value) -> bool {
    let ty = item.get("type").and_then(Value::as_str);
    match ty {
        None | Some("message") => item.get("role").and_then(Value::as_str) == Some("assistant"),
        Some("function_call" | "custom_tool_call" | "reasoning") => true,
        Some(t) => t.ends_with("_call"),
    }
}

/// Whether input item `i` was folded into the assistant message of the
/// item before it (see the module documentation).
pub(crate) fn continues_run(items: &[Value], i: usize) -> bool {
    i > 0 && assistant_side(&items[i]) && assistant_side(&items[i - 1])
}

/// Parses an incoming request body of this dialect.
///
/// Errors name the JSON path (e.g. `input[2].call_id`) and what is wrong.
pub fn parse_request(body: &Value) -> Result<ChatRequest, ProtoError> {
    parse_request_traced(body).map(|(req, _)| req)
}

/// [`parse_request`], also telling which canonical messages each input
/// item became (for [`crate::fidelity`]).
pub(crate) fn parse_request_traced(body: &Value) -> Result<(ChatRequest, Trace), ProtoError> {
    let obj = as_object(body, "")?;
    let model = req_str(obj, "model", "")?.to_string();
    let mut system: Vec<String> = Vec::new();
    if let Some(s) = opt_str(obj, "instructions", "")?
        && !s.is_empty()
    {
        system.push(s.to_string());
    }

    let mut messages: Vec<Message> = Vec::new();
    let mut trace = Trace::default();
    match field(obj, "input") {
        None => {}
        Some(Value::String(s)) => {
            messages.push(Message::text(Role::User, s.clone()));
            trace.spans.push(0..1);
        }
        Some(Value::Array(items)) => {
            trace = Trace::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                let before = messages.len();
                let p = at("input", i);
                let fold = continues_run(items, i);
                parse_item(item, &p, fold, &mut messages, &mut system, &mut trace)?;
                if fold {
                    // Folded into the message the run's first item made.
                    trace.spans.push(messages.len()..messages.len());
                } else {
                    trace.spans.push(before..messages.len());
                }
            }
        }
        Some(v) => {
            return Err(err(
                "input",
                format!("must be a string or an array of items, got {}", kind_of(v)),
            ));
        }
    }

    let mut tools = Vec::new();
    let mut custom = Vec::new();
    let mut hosted = Vec::new();
    if let Some(raw_tools) = opt_array(obj, "tools", "")? {
        for (i, t) in raw_tools.iter().enumerate() {
            let p = at("tools", i);
            let to = as_object(t, &p)?;
            match req_str(to, "type", &p)? {
                "function" => tools.push(parse_function_tool(to, &p)?),
                "custom" => {
                    let name = req_str(to, "name", &p)?.to_string();
                    custom.push(Value::String(name.clone()));
                    tools.push(Tool {
                        name,
                        description: opt_str(to, "description", &p)?.map(str::to_string),
                        parameters: custom_schema(),
                    });
                }
                _ => hosted.push(t.clone()),
            }
        }
    }

    let tool_choice = match field(obj, "tool_choice") {
        None => None,
        Some(tc) => Some(parse_tool_choice(tc)?),
    };

    let mut extra = Map::new();
    for (k, v) in obj {
        if !KNOWN_REQUEST_FIELDS.contains(&k.as_str()) && !k.starts_with(INTERNAL_PREFIX) {
            extra.insert(k.clone(), v.clone());
        }
    }
    if !custom.is_empty() {
        extra.insert(CUSTOM_TOOLS_KEY.into(), Value::Array(custom));
    }
    if !hosted.is_empty() {
        extra.insert(HOSTED_TOOLS_KEY.into(), Value::Array(hosted));
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
        max_tokens: opt_u32(obj, "max_output_tokens", "")?,
        temperature: opt_f64(obj, "temperature", "")?,
        top_p: opt_f64(obj, "top_p", "")?,
        stop: Vec::new(),
        stream: opt_bool(obj, "stream", "")?.unwrap_or(false),
        // A Responses stream always ends with its usage.
        include_usage: true,
        extra,
        dialect: DIALECT,
        origin: None,
    };
    Ok((req, trace))
}

/// Appends `part` to the assistant message being assembled (the last
/// message, when it is an assistant's and `fold`), or to a new one.
fn push_assistant(messages: &mut Vec<Message>, fold: bool, part: Part) {
    if fold
        && let Some(last) = messages.last_mut()
        && last.role == Role::Assistant
    {
        last.content.push(part);
        return;
    }
    messages.push(Message {
        role: Role::Assistant,
        content: vec![part],
    });
}

fn parse_item(
    item: &Value,
    p: &str,
    fold: bool,
    messages: &mut Vec<Message>,
    system: &mut Vec<String>,
    trace: &mut Trace,
) -> Result<(), ProtoError> {
    let io = as_object(item, p)?;
    let ty = opt_str(io, "type", p)?.unwrap_or("message");
    match ty {
        "message" => {
            let role = req_str(io, "role", p)?;
            let content = parse_content(field(io, "content"), &join(p, "content"))?;
            match role {
                "system" | "developer" => {
                    let text = Message {
                        role: Role::System,
                        content,
                    }
                    .joined_text();
                    if messages.is_empty() && trace.spans.len() == trace.lifted {
                        system.push(text);
                        trace.lifted += 1;
                    } else {
                        messages.push(Message::text(Role::System, text));
                    }
                }
                "user" => messages.push(Message {
                    role: Role::User,
                    content,
                }),
                "assistant" => {
                    if content.is_empty() {
                        // An empty assistant message still stands for its item.
                        if !fold {
                            messages.push(Message {
                                role: Role::Assistant,
                                content,
                            });
                        }
                    } else {
                        for (k, part) in content.into_iter().enumerate() {
                            push_assistant(messages, fold || k > 0, part);
                        }
                    }
                }
                other => {
                    return Err(err(
                        join(p, "role"),
                        format!(
                            "unknown role `{other}` (expected user, assistant, system or developer)"
                        ),
                    ));
                }
            }
        }
        "function_call" => {
            let arguments = match field(io, "arguments") {
                None => return Err(err(join(p, "arguments"), "missing `arguments`")),
                Some(Value::String(s)) => s.clone(),
                Some(v) => {
                    return Err(err(
                        join(p, "arguments"),
                        format!("must be a JSON-encoded string, got {}", kind_of(v)),
                    ));
                }
            };
            let part = Part::ToolCall {
                id: req_str(io, "call_id", p)?.to_string(),
                name: req_str(io, "name", p)?.to_string(),
                arguments,
            };
            push_assistant(messages, fold, part);
        }
        "custom_tool_call" => {
            let part = Part::ToolCall {
                id: req_str(io, "call_id", p)?.to_string(),
                name: req_str(io, "name", p)?.to_string(),
                arguments: custom_input_to_arguments(req_str(io, "input", p)?),
            };
            push_assistant(messages, fold, part);
        }
        "function_call_output" | "custom_tool_call_output" => {
            let tool_call_id = req_str(io, "call_id", p)?.to_string();
            let content = output_text(field(io, "output"), &join(p, "output"))?;
            messages.push(Message {
                role: Role::Tool,
                content: vec![Part::ToolResult {
                    tool_call_id,
                    content,
                    is_error: false,
                }],
            });
        }
        _ if assistant_side(item) => {
            // Reasoning (with its encrypted content), a hosted tool's call:
            // relayed as sent to a Responses provider.
            push_assistant(
                messages,
                fold,
                Part::Opaque {
                    dialect: DIALECT,
                    value: item.clone(),
                },
            );
        }
        _ => {
            // A hosted tool's output, an item reference: the user's side.
            messages.push(Message {
                role: Role::User,
                content: vec![Part::Opaque {
                    dialect: DIALECT,
                    value: item.clone(),
                }],
            });
        }
    }
    Ok(())
}

/// A message's content: a string, or an array of parts (`input_text`,
/// `output_text` and `refusal` are text; anything else — images, files,
/// audio — is kept as sent).
/// Whether an input item of this type is kept as it came and rendered as an
/// input item of its own (a tool call's output of a kind hale does not model,
/// an `item_reference`), not as a content part of a message.
fn is_item_type(t: &str) -> bool {
    t.ends_with("_output") || t == "item_reference"
}

fn parse_content(v: Option<&Value>, path: &str) -> Result<Vec<Part>, ProtoError> {
    match v {
        None => Err(err(path, "missing `content`")),
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
                    "input_text" | "output_text" | "text" => {
                        let text = req_str(po, "text", &pp)?;
                        if !text.is_empty() {
                            out.push(Part::Text {
                                text: text.to_string(),
                            });
                        }
                    }
                    "refusal" => {
                        let text = req_str(po, "refusal", &pp)?;
                        if !text.is_empty() {
                            out.push(Part::Text {
                                text: text.to_string(),
                            });
                        }
                    }
                    // An input item inside a message's content would be
                    // rendered as an item of its own (see `render_message`),
                    // which it is not: refused, so it is not moved (fuzz
                    // target responses_request).
                    t if is_item_type(t) => {
                        return Err(err(
                            &pp,
                            format!("`{t}` is an input item, not a content part"),
                        ));
                    }
                    _ => out.push(Part::Opaque {
                        dialect: DIALECT,
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

/// A tool call's output: a string, or an array of parts whose text parts
/// are joined (images and files in a tool output have no canonical form).
fn output_text(v: Option<&Value>, path: &str) -> Result<String, ProtoError> {
    match v {
        None => Err(err(path, "missing `output`")),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Array(parts)) => {
            let mut texts = Vec::with_capacity(parts.len());
            for (j, part) in parts.iter().enumerate() {
                let pp = at(path, j);
                let po = as_object(part, &pp)?;
                if matches!(
                    req_str(po, "type", &pp)?,
                    "input_text" | "output_text" | "text"
                ) {
                    texts.push(req_str(po, "text", &pp)?.to_string());
                }
            }
            Ok(texts.join("\n"))
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

fn parse_function_tool(to: &Map<String, Value>, path: &str) -> Result<Tool, ProtoError> {
    let name = req_str(to, "name", path)?.to_string();
    let description = opt_str(to, "description", path)?.map(str::to_string);
    opt_bool(to, "strict", path)?;
    let parameters = match field(to, "parameters") {
        None => empty_schema(),
        Some(p @ Value::Object(_)) => p.clone(),
        Some(v) => {
            return Err(err(
                join(path, "parameters"),
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

/// `"auto"|"none"|"required"`; `{type:function|custom, name}` becomes the
/// canonical (Chat Completions) `{type:function, function:{name}}`; other
/// objects (`allowed_tools`, a hosted tool) are kept as sent.
fn parse_tool_choice(tc: &Value) -> Result<Value, ProtoError> {
    match tc {
        Value::String(s) => match s.as_str() {
            "auto" | "none" | "required" => Ok(tc.clone()),
            other => Err(err(
                "tool_choice",
                format!("unknown tool_choice `{other}` (expected auto, none or required)"),
            )),
        },
        Value::Object(o) => match o.get("type").and_then(Value::as_str) {
            Some("function" | "custom") => {
                let name = req_str(o, "name", "tool_choice")?;
                Ok(json!({"type": "function", "function": {"name": name}}))
            }
            Some(_) | None => Ok(tc.clone()),
        },
        other => Err(err(
            "tool_choice",
            format!("must be a string or an object, got {}", kind_of(other)),
        )),
    }
}

/// The canonical tool choice in Responses' form.
fn render_tool_choice(tc: &Value, custom: &[String]) -> Value {
    if let Some(name) = tc
        .get("function")
        .and_then(|f| f.get("name"))
        .and_then(Value::as_str)
        && tc.get("type").and_then(Value::as_str) == Some("function")
    {
        let ty = if custom.iter().any(|c| c == name) {
            "custom"
        } else {
            "function"
        };
        return json!({"type": ty, "name": name});
    }
    tc.clone()
}

/// Renders a request for a Responses upstream serving `model`.
///
/// `prefill`, when given and non-empty, is appended as a trailing assistant
/// message. Fields in `req.extra` (and hosted tools) are passed through only
/// when the request arrived in this dialect; a request from another dialect
/// is sent with `store: false` (hale keeps the conversation itself) and its
/// function tools with `strict: false` (the Responses API defaults to strict
/// schemas, which most schemas written for other APIs do not satisfy).
pub fn render_request(req: &ChatRequest, model: &str, prefill: Option<&str>) -> Value {
    let mut body = Map::new();
    let same_dialect = req.dialect == DIALECT;
    if same_dialect {
        for (k, v) in &req.extra {
            if !k.starts_with(INTERNAL_PREFIX) {
                body.insert(k.clone(), v.clone());
            }
        }
    } else {
        body.insert("store".into(), json!(false));
    }
    body.insert("model".into(), json!(model));
    if let Some(s) = &req.system
        && !s.is_empty()
    {
        body.insert("instructions".into(), json!(s));
    }
    let custom = custom_tools(req);
    let mut input = Vec::with_capacity(req.messages.len() + 1);
    for m in &req.messages {
        render_message(m, &custom, &mut input);
    }
    if let Some(p) = prefill
        && !p.is_empty()
    {
        input.push(assistant_text(p));
    }
    body.insert("input".into(), Value::Array(input));

    let mut tools: Vec<Value> = req.tools.iter().map(|t| render_tool(t, &custom)).collect();
    if same_dialect && let Some(Value::Array(hosted)) = req.extra.get(HOSTED_TOOLS_KEY) {
        tools.extend(hosted.iter().cloned());
    }
    if !tools.is_empty() {
        body.insert("tools".into(), Value::Array(tools));
        if let Some(tc) = &req.tool_choice {
            body.insert("tool_choice".into(), render_tool_choice(tc, &custom));
        }
    }
    if let Some(n) = req.max_tokens {
        body.insert("max_output_tokens".into(), json!(n));
    }
    if let Some(t) = req.temperature {
        body.insert("temperature".into(), json!(t));
    }
    if let Some(t) = req.top_p {
        body.insert("top_p".into(), json!(t));
    }
    if req.stream {
        body.insert("stream".into(), json!(true));
    } else {
        body.remove("stream");
    }
    Value::Object(body)
}

/// One canonical tool in Responses' form.
pub(crate) fn render_tool(t: &Tool, custom: &[String]) -> Value {
    let mut o = Map::new();
    if custom.contains(&t.name) {
        o.insert("type".into(), json!("custom"));
        o.insert("name".into(), json!(t.name));
        if let Some(d) = &t.description {
            o.insert("description".into(), json!(d));
        }
    } else {
        o.insert("type".into(), json!("function"));
        o.insert("name".into(), json!(t.name));
        if let Some(d) = &t.description {
            o.insert("description".into(), json!(d));
        }
        o.insert("parameters".into(), t.parameters.clone());
        o.insert("strict".into(), json!(false));
    }
    Value::Object(o)
}

fn assistant_text(text: &str) -> Value {
    json!({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text, "annotations": []}]})
}

/// Another dialect's image part in Responses' form (`input_image`), when it is one.
pub(crate) fn image_from_other(dialect: Dialect, part: &Value) -> Option<Value> {
    let url = match part.get("type").and_then(Value::as_str)? {
        "image_url" => {
            let iu = part.get("image_url")?;
            let url = iu.as_str().or_else(|| iu.get("url")?.as_str())?;
            let detail = iu.get("detail").and_then(Value::as_str).unwrap_or("auto");
            return Some(json!({"type": "input_image", "image_url": url, "detail": detail}));
        }
        "image" => {
            let source = part.get("source")?;
            match source.get("type").and_then(Value::as_str)? {
                "base64" => format!(
                    "data:{};base64,{}",
                    source.get("media_type")?.as_str()?,
                    source.get("data")?.as_str()?
                ),
                "url" => source.get("url")?.as_str()?.to_string(),
                _ => return None,
            }
        }
        _ => return None,
    };
    let _ = dialect;
    Some(json!({"type": "input_image", "image_url": url, "detail": "auto"}))
}

/// One canonical message as Responses input items.
pub(crate) fn render_message(m: &Message, custom: &[String], out: &mut Vec<Value>) {
    match m.role {
        Role::System => {
            out.push(json!({"type": "message", "role": "system", "content": m.joined_text()}))
        }
        Role::User | Role::Tool => {
            let mut parts: Vec<Value> = Vec::new();
            let mut results: Vec<Value> = Vec::new();
            for p in &m.content {
                match p {
                    Part::Text { text } => {
                        parts.push(json!({"type": "input_text", "text": text}));
                    }
                    Part::ToolResult {
                        tool_call_id,
                        content,
                        is_error: _,
                    } => results.push(json!({"type": "function_call_output", "call_id": tool_call_id, "output": content})),
                    Part::Opaque { dialect, value } => {
                        if *dialect == DIALECT {
                            let is_item = value
                                .get("type")
                                .and_then(Value::as_str)
                                .is_some_and(is_item_type);
                            if is_item {
                                results.push(value.clone());
                            } else {
                                parts.push(value.clone());
                            }
                        } else {
                            parts.extend(image_from_other(*dialect, value));
                        }
                    }
                    Part::ToolCall { .. } => {}
                }
            }
            out.extend(results);
            if !parts.is_empty() {
                out.push(json!({"type": "message", "role": "user", "content": parts}));
            }
        }
        Role::Assistant => {
            let mut text = String::new();
            let flush = |text: &mut String, out: &mut Vec<Value>| {
                if !text.is_empty() {
                    out.push(assistant_text(text));
                    text.clear();
                }
            };
            for p in &m.content {
                match p {
                    Part::Text { text: t } => text.push_str(t),
                    Part::ToolCall {
                        id,
                        name,
                        arguments,
                    } => {
                        flush(&mut text, out);
                        if custom.iter().any(|c| c == name) {
                            out.push(json!({"type": "custom_tool_call", "call_id": id, "name": name, "input": arguments_to_custom_input(arguments)}));
                        } else {
                            out.push(json!({"type": "function_call", "call_id": id, "name": name, "arguments": arguments}));
                        }
                    }
                    Part::Opaque { dialect, value } => {
                        if *dialect == DIALECT {
                            flush(&mut text, out);
                            out.push(value.clone());
                        }
                    }
                    Part::ToolResult { .. } => {}
                }
            }
            flush(&mut text, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(v: Value) -> (ChatRequest, Trace) {
        parse_request_traced(&v).unwrap()
    }

    #[test]
    fn a_string_input_is_one_user_message_and_instructions_the_system() {
        let (req, trace) = parse(json!({
            "model": "gpt-5", "instructions": "Be brief.", "input": "Hi",
            "max_output_tokens": 100, "stream": true, "store": false,
            "reasoning": {"effort": "low", "summary": "auto"},
            "previous_response_id": "resp_1", "metadata": {"a": "b"},
            "prompt_cache_key": "k", "include": ["reasoning.encrypted_content"],
            "parallel_tool_calls": false, "text": {"format": {"type": "json_schema", "name": "x", "schema": {}}}
        }));
        assert_eq!(req.model, "gpt-5");
        assert_eq!(req.system.as_deref(), Some("Be brief."));
        assert_eq!(req.messages, vec![Message::text(Role::User, "Hi")]);
        assert_eq!(req.max_tokens, Some(100));
        assert!(req.stream && req.include_usage);
        for k in [
            "store",
            "reasoning",
            "previous_response_id",
            "metadata",
            "prompt_cache_key",
            "include",
            "parallel_tool_calls",
            "text",
        ] {
            assert!(req.extra.contains_key(k), "{k}");
        }
        assert_eq!(trace.spans, vec![0..1]);
    }

    #[test]
    fn items_fold_the_assistant_side_into_one_message() {
        let (req, trace) = parse(json!({
            "model": "m",
            "input": [
                {"role": "developer", "content": "Use tools."},
                {"type": "message", "role": "user", "content": [
                    {"type": "input_text", "text": "Weather?"},
                    {"type": "input_image", "image_url": "https://x/y.png", "detail": "auto"}
                ]},
                {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAA"},
                {"type": "message", "role": "assistant", "id": "msg_1", "content": [{"type": "output_text", "text": "Let me look.", "annotations": []}]},
                {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "weather", "arguments": "{\"city\":\"Paris\"}"},
                {"type": "function_call", "id": "fc_2", "call_id": "call_2", "name": "weather", "arguments": "{\"city\":\"Rome\"}"},
                {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
                {"type": "function_call_output", "call_id": "call_2", "output": [{"type": "input_text", "text": "rain"}]},
                {"role": "system", "content": "Answer now."}
            ]
        }));
        assert_eq!(req.system.as_deref(), Some("Use tools."));
        assert_eq!(trace.lifted, 1);
        assert_eq!(req.messages.len(), 5);
        assert_eq!(req.messages[0].role, Role::User);
        assert!(matches!(req.messages[0].content[1], Part::Opaque { .. }));
        let a = &req.messages[1];
        assert_eq!(a.role, Role::Assistant);
        assert_eq!(a.content.len(), 4);
        assert!(
            matches!(&a.content[0], Part::Opaque { value, .. } if value["encrypted_content"] == "gAAA")
        );
        assert_eq!(
            a.content[1],
            Part::Text {
                text: "Let me look.".into()
            }
        );
        assert!(matches!(&a.content[3], Part::ToolCall { id, .. } if id == "call_2"));
        assert!(
            matches!(&req.messages[3].content[0], Part::ToolResult { content, .. } if content == "rain")
        );
        assert_eq!(req.messages[4], Message::text(Role::System, "Answer now."));
        assert_eq!(
            trace.spans,
            vec![0..0, 0..1, 1..2, 2..2, 2..2, 2..2, 2..3, 3..4, 4..5]
        );
    }

    #[test]
    fn tools_function_custom_and_hosted() {
        let (req, _) = parse(json!({
            "model": "m", "input": "x",
            "tools": [
                {"type": "function", "name": "f", "description": "d", "parameters": {"type": "object", "properties": {}}, "strict": true},
                {"type": "custom", "name": "apply_patch", "description": "patch", "format": {"type": "text"}},
                {"type": "web_search"}
            ],
            "tool_choice": {"type": "function", "name": "f"}
        }));
        assert_eq!(req.tools.len(), 2);
        assert_eq!(req.tools[1].parameters, custom_schema());
        assert_eq!(custom_tools(&req), vec!["apply_patch".to_string()]);
        assert_eq!(req.extra[HOSTED_TOOLS_KEY], json!([{"type": "web_search"}]));
        assert_eq!(
            req.tool_choice,
            Some(json!({"type": "function", "function": {"name": "f"}}))
        );
        let out = render_request(&req, "m2", None);
        assert_eq!(
            out["tools"][1],
            json!({"type": "custom", "name": "apply_patch", "description": "patch"})
        );
        assert_eq!(out["tools"][2], json!({"type": "web_search"}));
        assert_eq!(out["tool_choice"], json!({"type": "function", "name": "f"}));
        assert!(out.get(CUSTOM_TOOLS_KEY).is_none() && out.get(HOSTED_TOOLS_KEY).is_none());
    }

    #[test]
    fn a_custom_tool_call_round_trips_its_free_form_input() {
        let body = json!({
            "model": "m",
            "tools": [{"type": "custom", "name": "apply_patch"}],
            "input": [
                {"role": "user", "content": "fix it"},
                {"type": "custom_tool_call", "call_id": "c1", "name": "apply_patch", "input": "*** Begin Patch\n\"x\""},
                {"type": "custom_tool_call_output", "call_id": "c1", "output": "done"}
            ]
        });
        let (req, _) = parse(body);
        assert!(
            matches!(&req.messages[1].content[0], Part::ToolCall { arguments, .. } if serde_json::from_str::<Value>(arguments).unwrap()["input"] == "*** Begin Patch\n\"x\"")
        );
        let out = render_request(&req, "m", None);
        assert_eq!(
            out["input"][1],
            json!({"type": "custom_tool_call", "call_id": "c1", "name": "apply_patch", "input": "*** Begin Patch\n\"x\""})
        );
    }

    #[test]
    fn errors_name_the_json_path() {
        let cases = [
            (json!({"input": "x"}), "model"),
            (json!({"model": "m", "input": 3}), "input"),
            (
                json!({"model": "m", "input": [{"role": "robot", "content": "x"}]}),
                "input[0].role",
            ),
            (
                json!({"model": "m", "input": [{"type": "function_call", "name": "f", "arguments": "{}"}]}),
                "input[0].call_id",
            ),
            (
                json!({"model": "m", "input": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": {}}]}),
                "input[0].arguments",
            ),
            (
                json!({"model": "m", "input": [{"type": "function_call_output", "call_id": "c"}]}),
                "input[0].output",
            ),
            (
                json!({"model": "m", "input": [{"role": "user", "content": [{"type": "input_text"}]}]}),
                "input[0].content[0].text",
            ),
            // Regression (fuzz target responses_request): an item type as a
            // content part was rendered as an item missing its fields.
            (
                json!({"model": "m", "input": [{"role": "user", "content": [
                    {"type": "input_text", "text": "x"},
                    {"type": "custom_tool_call_output", "call_id": "c", "ou}put": "Done"}
                ]}]}),
                "input[0].content[1]",
            ),
            (
                json!({"model": "m", "input": "x", "tools": [{"name": "f"}]}),
                "tools[0].type",
            ),
            (
                json!({"model": "m", "input": "x", "tools": [{"type": "function", "name": "f", "strict": "yes"}]}),
                "tools[0].strict",
            ),
            (
                json!({"model": "m", "input": "x", "tool_choice": "maybe"}),
                "tool_choice",
            ),
            (
                json!({"model": "m", "input": "x", "max_output_tokens": -1}),
                "max_output_tokens",
            ),
        ];
        for (body, path) in cases {
            let e = parse_request(&body).unwrap_err();
            assert_eq!(e.path, path, "{body}: {e}");
        }
    }

    #[test]
    fn rendering_from_the_canonical_form_parses_back_the_same() {
        let (req, _) = parse(json!({
            "model": "m", "instructions": "sys",
            "input": [
                {"role": "user", "content": "a"},
                {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "t"}]},
                {"role": "assistant", "content": "b"},
                {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1", "output": "r"},
                {"type": "web_search_call", "id": "ws_1", "status": "completed"}
            ],
            "tools": [{"type": "function", "name": "f"}],
            "temperature": 0.5, "top_p": 0.9, "max_output_tokens": 64, "stream": true
        }));
        let out = render_request(&req, "m", None);
        let back = parse_request(&out).unwrap();
        assert_eq!(back.messages, req.messages);
        let with = render_request(&req, "m", Some("pre"));
        let items = with["input"].as_array().unwrap();
        assert_eq!(items.last(), Some(&assistant_text("pre")));
        assert_eq!(back.system, req.system);
        assert_eq!(back.tools, req.tools);
        assert_eq!(
            (back.max_tokens, back.temperature, back.top_p, back.stream),
            (Some(64), Some(0.5), Some(0.9), true)
        );
        assert_eq!(out["tools"][0]["strict"], json!(false));
    }

    /// The round trip of the fuzz target `responses_request` on its seeds:
    /// hale accepts its own rendering, and rendering settles.
    #[test]
    fn rendering_settles_on_the_fuzz_seeds() {
        for seed in [
            include_str!("../../../../fuzz/corpus/responses_request/codex.json"),
            include_str!("../../../../fuzz/corpus/responses_request/structured.json"),
            include_str!("../../../../fuzz/corpus/responses_request/minimal.json"),
        ] {
            let req = parse_request(&serde_json::from_str(seed).unwrap()).unwrap();
            let once = render_request(&req, &req.model, None);
            let again = parse_request(&once).unwrap();
            assert_eq!(again.tools, req.tools);
            let twice = render_request(&again, &again.model, None);
            let third = render_request(&parse_request(&twice).unwrap(), &req.model, None);
            assert_eq!(third, twice);
            assert_eq!(once, twice, "{seed}");
        }
    }

    #[test]
    fn images_of_other_dialects_become_input_images() {
        let oa =
            json!({"type": "image_url", "image_url": {"url": "https://x/a.png", "detail": "high"}});
        assert_eq!(
            image_from_other(Dialect::OpenAi, &oa),
            Some(json!({"type": "input_image", "image_url": "https://x/a.png", "detail": "high"}))
        );
        let an = json!({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAA"}});
        assert_eq!(
            image_from_other(Dialect::Anthropic, &an),
            Some(
                json!({"type": "input_image", "image_url": "data:image/png;base64,AAA", "detail": "auto"})
            )
        );
        assert_eq!(
            image_from_other(Dialect::OpenAi, &json!({"type": "input_audio"})),
            None
        );
    }
}
