//! Anthropic requests: parsing a caller's `/v1/messages` body into a
//! [`ChatRequest`], and rendering a [`ChatRequest`] for an Anthropic
//! provider (alternating roles, valid tool ids, tool arguments as an
//! object, the other dialect's images in Anthropic's form).

use serde_json::{Map, Value, json};

use crate::canonical::{ChatRequest, Dialect, Message, Part, ProtoError, Role, Tool, Trace};
use crate::json::{
    as_object, at, empty_schema, err, field, join, kind_of, opt_array, opt_bool, opt_f64, opt_str,
    opt_u32, req_array, req_str,
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

/// A Responses `input_image` part as an Anthropic `image` block, when it
/// has a URL (an image given by `file_id` has no Anthropic form).
pub(crate) fn image_from_responses(part: &Value) -> Option<Value> {
    if part.get("type").and_then(Value::as_str) != Some("input_image") {
        return None;
    }
    let url = part.get("image_url").and_then(Value::as_str)?;
    image_from_openai(&json!({"type": "image_url", "image_url": {"url": url}}))
}

/// Parses an incoming request body of this dialect.
///
/// Errors name the JSON path (e.g. `messages[2].content[0].tool_use_id`) and
/// what is wrong. `system` may be a string or an array of text blocks (joined
/// by a blank line). A `system` message inside `messages` (Claude Code sends
/// one) is a canonical [`Role::System`] message in place: another dialect
/// gets it as its own system message; an Anthropic provider gets the client's
/// JSON, or, where hale re-renders the messages, the system prompt when it
/// leads and user text after that. `tool_choice` becomes the OpenAI-shaped
/// canonical form (`disable_parallel_tool_use` has no canonical form and is
/// dropped).
pub fn parse_request(body: &Value) -> Result<ChatRequest, ProtoError> {
    parse_request_traced(body).map(|(req, _)| req)
}

/// [`parse_request`], also telling which canonical messages each wire
/// message became (for [`crate::fidelity`]).
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
            // Claude Code sends one after the first user message: a
            // canonical system message in place, as OpenAI's are.
            "system" => Role::System,
            other => {
                return Err(err(
                    join(&p, "role"),
                    format!("unknown role `{other}` (expected user, assistant or system)"),
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
            Part::Opaque {
                dialect: Dialect::Responses,
                value,
            } => {
                // Likewise for Responses: images only; reasoning items,
                // hosted tools' items and files have no Anthropic form.
                if m.role != Role::Assistant {
                    out.extend(image_from_responses(value));
                }
            }
            // A Gemini answer's thought or data parts: no Anthropic form.
            Part::Opaque {
                dialect: Dialect::Gemini | Dialect::Bedrock,
                ..
            } => {}
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

/// Anthropic's Messages body as a cloud platform takes it (Vertex's
/// `rawPredict`, Bedrock's InvokeModel): without `model`, which the URL
/// names, and with the platform's `anthropic_version`; every other field as
/// it came. `body` is the client's (patched) JSON or hale's rendering.
pub fn platform_body(body: &Value, anthropic_version: &str) -> Map<String, Value> {
    let mut out = match body {
        Value::Object(m) => m.clone(),
        Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_) | Value::Array(_) => {
            Map::new()
        }
    };
    out.remove("model");
    out.insert("anthropic_version".into(), Value::from(anthropic_version));
    out
}
