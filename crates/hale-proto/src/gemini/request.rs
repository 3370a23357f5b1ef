//! Gemini requests: a client's `generateContent` body read into a
//! canonical request ([`parse_request_traced`]), and a canonical request
//! rendered as a `generateContent` body ([`render_request`]).

use serde_json::{Map, Value, json};

use crate::anthropic::{arguments_to_input, input_to_arguments};
use crate::canonical::{
    ChatRequest, Dialect, Message, Part, ProtoError, Role, Tool, Trace, lead_system,
};
use crate::json::{
    as_object, at, empty_schema, err, field, join, kind_of, opt_array, opt_f64, opt_str, opt_u32,
    push_turn, req_array, req_str,
};

/// Top-level fields of a `generateContent` body the canonical model
/// carries; every other one (`safetySettings`, `cachedContent`, `labels`,
/// …) goes to `extra`, passed to a Gemini provider and named dropped for
/// any other.
const MODELED: &[&str] = &["contents", "systemInstruction", "tools", "toolConfig"];

/// `generationConfig` fields the canonical model carries; the rest stay in
/// the client's `generationConfig` (in `extra`).
pub const GENERATION_MAPPED: &[&str] = &[
    "maxOutputTokens",
    "temperature",
    "topP",
    "stopSequences",
    "candidateCount",
];

/// The prefix of the ids hale gives a client's function calls that carry
/// none (Gemini's usually do not): `gemini_call_{n}`, numbered in order.
pub const MINTED_CALL_ID: &str = "gemini_call_";

/// [`parse_request_traced`] without the trace: a Gemini client's body for
/// `model`, streamed or not.
pub fn parse_request(body: &Value, model: &str, stream: bool) -> Result<ChatRequest, ProtoError> {
    parse_request_traced(body, model, stream).map(|(r, _)| r)
}

/// Parses a Gemini client's `generateContent` body: the model and whether
/// to stream come from the URL (`models/{model}:{action}`), not the body.
/// Every error names the JSON path of the offending field.
pub(crate) fn parse_request_traced(
    body: &Value,
    model: &str,
    stream: bool,
) -> Result<(ChatRequest, Trace), ProtoError> {
    let obj = as_object(body, "")?;
    let raw_contents = req_array(obj, "contents", "")?;

    let system = match field(obj, "systemInstruction") {
        None => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(v @ Value::Object(_)) => {
            let so = as_object(v, "systemInstruction")?;
            let mut texts = Vec::new();
            if let Some(parts) = opt_array(so, "parts", "systemInstruction")? {
                for (i, p) in parts.iter().enumerate() {
                    let pp = at("systemInstruction.parts", i);
                    let po = as_object(p, &pp)?;
                    if let Some(t) = opt_str(po, "text", &pp)? {
                        texts.push(t.to_owned());
                    }
                }
            }
            Some(texts.join("\n"))
        }
        Some(v) => {
            return Err(err(
                "systemInstruction",
                format!("must be an object with `parts`, got {}", kind_of(v)),
            ));
        }
    };

    let mut calls = Calls::default();
    let mut messages = Vec::with_capacity(raw_contents.len());
    let mut trace = Trace::with_capacity(raw_contents.len());
    for (i, c) in raw_contents.iter().enumerate() {
        let before = messages.len();
        let p = at("contents", i);
        let co = as_object(c, &p)?;
        let model_side = match opt_str(co, "role", &p)? {
            None | Some("user" | "function" | "tool") => false,
            Some("model") => true,
            Some(other) => {
                return Err(err(
                    join(&p, "role"),
                    format!("unknown role `{other}` (expected user or model)"),
                ));
            }
        };
        let pp = join(&p, "parts");
        let raw_parts = opt_array(co, "parts", &p)?.map_or(&[][..], Vec::as_slice);
        let mut parts = Vec::with_capacity(raw_parts.len());
        for (j, part) in raw_parts.iter().enumerate() {
            parts.push(parse_part(part, &at(&pp, j), &mut calls)?);
        }
        if model_side {
            if !parts.is_empty() {
                messages.push(Message {
                    role: Role::Assistant,
                    content: parts,
                });
            }
        } else {
            // Each function response becomes its own tool message; the other
            // parts stay user messages, in order.
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
                        run.push(part)
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
        trace.spans.push(before..messages.len());
    }

    let mut tools = Vec::new();
    if let Some(raw_tools) = opt_array(obj, "tools", "")? {
        for (i, t) in raw_tools.iter().enumerate() {
            let tp = at("tools", i);
            let to = as_object(t, &tp)?;
            let Some(decls) = opt_array(to, "functionDeclarations", &tp)? else {
                continue;
            };
            for (j, d) in decls.iter().enumerate() {
                tools.push(parse_declaration(
                    d,
                    &at(&join(&tp, "functionDeclarations"), j),
                )?);
            }
        }
    }
    let tool_choice = match field(obj, "toolConfig") {
        None => None,
        Some(tc) => parse_tool_config(tc)?,
    };

    let mut max_tokens = None;
    let mut temperature = None;
    let mut top_p = None;
    let mut stop = Vec::new();
    if let Some(g) = field(obj, "generationConfig") {
        let go = as_object(g, "generationConfig")?;
        let gp = "generationConfig";
        max_tokens = opt_u32(go, "maxOutputTokens", gp)?;
        temperature = opt_f64(go, "temperature", gp)?;
        top_p = opt_f64(go, "topP", gp)?;
        if let Some(seqs) = opt_array(go, "stopSequences", gp)? {
            for (i, s) in seqs.iter().enumerate() {
                match s {
                    Value::String(s) => stop.push(s.clone()),
                    other => {
                        return Err(err(
                            at("generationConfig.stopSequences", i),
                            format!("must be a string, got {}", kind_of(other)),
                        ));
                    }
                }
            }
        }
        if let Some(n) = opt_u32(go, "candidateCount", gp)?
            && n > 1
        {
            return Err(err(
                "generationConfig.candidateCount",
                format!("hale serves one candidate per answer; candidateCount must be 1, got {n}"),
            ));
        }
    }

    let mut extra = Map::new();
    for (k, v) in obj {
        if !MODELED.contains(&k.as_str()) {
            extra.insert(k.clone(), v.clone());
        }
    }
    let req = ChatRequest {
        model: model.to_owned(),
        system: system.filter(|s| !s.is_empty()),
        messages,
        tools,
        tool_choice,
        max_tokens,
        temperature,
        top_p,
        stop,
        stream,
        // Gemini streams always end with usage.
        include_usage: true,
        extra,
        dialect: Dialect::Gemini,
        origin: None,
    };
    Ok((req, trace))
}

/// The function calls of a conversation, in order, for function responses
/// that name their call only by the function's name.
#[derive(Default)]
struct Calls {
    /// (id, name, answered) of every call seen.
    seen: Vec<(String, String, bool)>,
    minted: usize,
}

impl Calls {
    fn call(&mut self, id: Option<&str>, name: &str) -> String {
        let id = match id.filter(|i| !i.is_empty()) {
            Some(i) => i.to_owned(),
            None => {
                let i = format!("{MINTED_CALL_ID}{}", self.minted);
                self.minted += 1;
                i
            }
        };
        self.seen.push((id.clone(), name.to_owned(), false));
        id
    }

    /// The call a response answers: its own id, else the first unanswered
    /// call of that name, else an id of its own.
    fn answer(&mut self, id: Option<&str>, name: &str) -> String {
        if let Some(i) = id.filter(|i| !i.is_empty()) {
            if let Some(c) = self.seen.iter_mut().find(|c| c.0 == i) {
                c.2 = true;
            }
            return i.to_owned();
        }
        match self.seen.iter_mut().find(|c| !c.2 && c.1 == name) {
            Some(c) => {
                c.2 = true;
                c.0.clone()
            }
            None => {
                let i = format!("{MINTED_CALL_ID}{}", self.minted);
                self.minted += 1;
                i
            }
        }
    }
}

/// One part of a client's content.
fn parse_part(p: &Value, path: &str, calls: &mut Calls) -> Result<Part, ProtoError> {
    let po = as_object(p, path)?;
    let opaque = || Part::Opaque {
        dialect: Dialect::Gemini,
        value: p.clone(),
    };
    if po.get("thought").and_then(Value::as_bool) == Some(true) {
        return Ok(opaque());
    }
    if let Some(t) = field(po, "text") {
        return match t {
            Value::String(t) => Ok(Part::Text { text: t.clone() }),
            other => Err(err(
                join(path, "text"),
                format!("must be a string, got {}", kind_of(other)),
            )),
        };
    }
    if let Some(fc) = field(po, "functionCall") {
        let fp = join(path, "functionCall");
        let fo = as_object(fc, &fp)?;
        let name = req_str(fo, "name", &fp)?;
        let id = calls.call(opt_str(fo, "id", &fp)?, name);
        let arguments = match field(fo, "args") {
            None => "{}".to_owned(),
            Some(a @ Value::Object(_)) => input_to_arguments(a),
            Some(other) => {
                return Err(err(
                    join(&fp, "args"),
                    format!("must be an object, got {}", kind_of(other)),
                ));
            }
        };
        return Ok(Part::ToolCall {
            id,
            name: name.to_owned(),
            arguments,
        });
    }
    if let Some(fr) = field(po, "functionResponse") {
        let fp = join(path, "functionResponse");
        let fo = as_object(fr, &fp)?;
        let name = req_str(fo, "name", &fp)?;
        let tool_call_id = calls.answer(opt_str(fo, "id", &fp)?, name);
        let (content, is_error) = match field(fo, "response") {
            None => (String::new(), false),
            Some(r @ Value::Object(_)) => response_content(r),
            Some(other) => {
                return Err(err(
                    join(&fp, "response"),
                    format!("must be an object, got {}", kind_of(other)),
                ));
            }
        };
        return Ok(Part::ToolResult {
            tool_call_id,
            content,
            is_error,
        });
    }
    for (key, source) in [("inlineData", "base64"), ("fileData", "url")] {
        let Some(d) = field(po, key) else { continue };
        let dp = join(path, key);
        let d = as_object(d, &dp)?;
        let mime = opt_str(d, "mimeType", &dp)?.unwrap_or("");
        if !mime.starts_with("image/") {
            return Ok(opaque());
        }
        // An image: in Anthropic's form, which every dialect renders.
        let value = if source == "base64" {
            let data = req_str(d, "data", &dp)?;
            json!({"type": "image", "source": {"type": "base64", "media_type": mime, "data": data}})
        } else {
            let url = req_str(d, "fileUri", &dp)?;
            json!({"type": "image", "source": {"type": "url", "url": url}})
        };
        return Ok(Part::Opaque {
            dialect: Dialect::Anthropic,
            value,
        });
    }
    // executableCode, codeExecutionResult, videoMetadata, …: Gemini's own.
    Ok(opaque())
}

/// A `functionResponse.response` as a tool result's text: the value of a
/// lone `output`, `result` or `content` string (what Gemini CLI and the
/// SDKs' helpers send), the text of a lone `error` (an error result), else
/// the whole object as JSON.
fn response_content(r: &Value) -> (String, bool) {
    if let Some(o) = r.as_object()
        && o.len() == 1
        && let Some((k, Value::String(s))) = o.iter().next()
    {
        match k.as_str() {
            "output" | "result" | "content" => return (s.clone(), false),
            "error" => return (s.clone(), true),
            _ => {}
        }
    }
    (r.to_string(), false)
}

/// A `functionDeclarations` entry as a canonical tool: its
/// `parametersJsonSchema` as it is, else its `parameters` (Google's OpenAPI
/// subset) as JSON Schema ([`openapi_to_json_schema`]).
fn parse_declaration(d: &Value, path: &str) -> Result<Tool, ProtoError> {
    let o = as_object(d, path)?;
    let name = req_str(o, "name", path)?.to_owned();
    let description = opt_str(o, "description", path)?.map(str::to_owned);
    let parameters = match (field(o, "parametersJsonSchema"), field(o, "parameters")) {
        (Some(s), _) => s.clone(),
        (None, Some(s @ Value::Object(_))) => openapi_to_json_schema(s),
        (None, Some(other)) => {
            return Err(err(
                join(path, "parameters"),
                format!("must be an object, got {}", kind_of(other)),
            ));
        }
        (None, None) => empty_schema(),
    };
    Ok(Tool {
        name,
        description,
        parameters,
    })
}

/// Google's OpenAPI-subset schema (`type: "OBJECT"`, `nullable`,
/// `propertyOrdering`) as JSON Schema: types in lower case, `nullable`
/// as a `null` type, `propertyOrdering` left out; everything else kept.
pub fn openapi_to_json_schema(s: &Value) -> Value {
    match s {
        Value::Object(o) => {
            let mut out = Map::with_capacity(o.len());
            let nullable = o.get("nullable") == Some(&Value::Bool(true));
            for (k, v) in o {
                match k.as_str() {
                    "nullable" | "propertyOrdering" => {}
                    "type" => {
                        let t = match v {
                            Value::String(t) => json!(t.to_ascii_lowercase()),
                            other => other.clone(),
                        };
                        let t = match (nullable, t) {
                            (true, Value::String(t)) => json!([t, "null"]),
                            (_, t) => t,
                        };
                        out.insert(k.clone(), t);
                    }
                    "properties" | "$defs" | "definitions" => {
                        let props = match v {
                            Value::Object(p) => Value::Object(
                                p.iter()
                                    .map(|(n, s)| (n.clone(), openapi_to_json_schema(s)))
                                    .collect(),
                            ),
                            other => other.clone(),
                        };
                        out.insert(k.clone(), props);
                    }
                    "items" | "anyOf" | "oneOf" | "allOf" | "not" | "additionalProperties" => {
                        out.insert(k.clone(), openapi_to_json_schema(v));
                    }
                    _ => {
                        out.insert(k.clone(), v.clone());
                    }
                }
            }
            Value::Object(out)
        }
        Value::Array(a) => Value::Array(a.iter().map(openapi_to_json_schema).collect()),
        Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_) => s.clone(),
    }
}

/// `toolConfig.functionCallingConfig` as an OpenAI-shaped `tool_choice`:
/// `AUTO` (and `VALIDATED`, which only adds checking) is `auto`, `NONE`
/// `none`, `ANY` `required` — or the one function when
/// `allowedFunctionNames` names one.
fn parse_tool_config(tc: &Value) -> Result<Option<Value>, ProtoError> {
    let o = as_object(tc, "toolConfig")?;
    let Some(fc) = field(o, "functionCallingConfig") else {
        return Ok(None);
    };
    let fp = "toolConfig.functionCallingConfig";
    let fo = as_object(fc, fp)?;
    let names: Vec<&str> = match opt_array(fo, "allowedFunctionNames", fp)? {
        None => Vec::new(),
        Some(a) => a.iter().filter_map(Value::as_str).collect(),
    };
    let choice = match opt_str(fo, "mode", fp)? {
        None | Some("MODE_UNSPECIFIED" | "AUTO" | "VALIDATED") => json!("auto"),
        Some("NONE") => json!("none"),
        Some("ANY") => match names.as_slice() {
            [one] => json!({"type": "function", "function": {"name": one}}),
            _ => json!("required"),
        },
        Some(other) => {
            return Err(err(
                format!("{fp}.mode"),
                format!("unknown mode `{other}` (expected AUTO, ANY, NONE or VALIDATED)"),
            ));
        }
    };
    Ok(Some(choice))
}

/// The most stop sequences Gemini accepts; the rest are left out.
pub const MAX_STOP_SEQUENCES: usize = 5;

/// Thinking budgets (tokens) for an OpenAI-style reasoning effort.
const EFFORT_BUDGETS: [(&str, i64); 5] = [
    ("none", 0),
    ("minimal", 512),
    ("low", 1024),
    ("medium", 8192),
    ("high", 24576),
];

/// Whether Gemini carries the client's top-level field `key` of `dialect`
/// (so crossing to Gemini does not name it dropped).
pub fn carries(dialect: Dialect, key: &str) -> bool {
    match dialect {
        Dialect::OpenAi => matches!(key, "response_format" | "reasoning_effort"),
        Dialect::Anthropic => key == "thinking",
        Dialect::Responses => matches!(key, "text" | "reasoning"),
        Dialect::Gemini | Dialect::Bedrock => true,
    }
}

/// The JSON of an image part of another dialect as a Gemini part.
fn image_part(value: &Value) -> Option<Value> {
    let url = match value.get("type").and_then(Value::as_str)? {
        "image_url" => value.get("image_url")?.get("url")?.as_str()?.to_owned(),
        "input_image" => value.get("image_url")?.as_str()?.to_owned(),
        "image" => {
            let source = value.get("source")?;
            match source.get("type").and_then(Value::as_str)? {
                "base64" => {
                    return Some(json!({"inlineData": {
                        "mimeType": source.get("media_type")?.as_str()?,
                        "data": source.get("data")?.as_str()?,
                    }}));
                }
                "url" => source.get("url")?.as_str()?.to_owned(),
                _ => return None,
            }
        }
        _ => return None,
    };
    if let Some(rest) = url.strip_prefix("data:") {
        let (meta, data) = rest.split_once(',')?;
        let mime = meta.strip_suffix(";base64")?;
        Some(json!({"inlineData": {"mimeType": mime, "data": data}}))
    } else {
        Some(json!({"fileData": {"fileUri": url}}))
    }
}

/// A tool result's content as a `functionResponse.response` object.
fn response_object(content: &str, is_error: bool) -> Value {
    match serde_json::from_str::<Value>(content) {
        Ok(v @ Value::Object(_)) if !is_error => v,
        Ok(_) | Err(_) => {
            let key = if is_error { "error" } else { "result" };
            json!({ key: content })
        }
    }
}

/// The `generateContent` body for `req`, served by `model` (named in the
/// URL, not the body), with `prefill` as a final `model` turn when given.
pub fn render_request(req: &ChatRequest, _model: &str, prefill: Option<&str>) -> Value {
    let (system, rest) = lead_system(req);
    let names = tool_names(&req.messages);
    let mut contents: Vec<Value> = Vec::with_capacity(rest.len());
    for m in rest {
        render_message(m, &names, &mut contents);
    }
    if let Some(p) = prefill.filter(|p| !p.is_empty()) {
        push_turn(&mut contents, "model", "parts", vec![json!({"text": p})]);
    }
    let mut body = Map::new();
    if req.dialect == Dialect::Gemini {
        // A Gemini client's own fields (`safetySettings`, `cachedContent`,
        // the rest of its `generationConfig`), for a Gemini provider only.
        for (k, v) in &req.extra {
            body.insert(k.clone(), v.clone());
        }
    }
    body.insert("contents".into(), Value::Array(contents));
    let system: Vec<String> = system.into_iter().filter(|s| !s.is_empty()).collect();
    if !system.is_empty() {
        body.insert(
            "systemInstruction".into(),
            json!({"parts": [{"text": system.join("\n\n")}]}),
        );
    }
    if !req.tools.is_empty() {
        let decls: Vec<Value> = req
            .tools
            .iter()
            .map(|t| {
                let mut d = Map::new();
                d.insert("name".into(), json!(t.name));
                if let Some(desc) = &t.description {
                    d.insert("description".into(), json!(desc));
                }
                d.insert("parametersJsonSchema".into(), t.parameters.clone());
                Value::Object(d)
            })
            .collect();
        body.insert("tools".into(), json!([{ "functionDeclarations": decls }]));
    }
    if let Some(tc) = req.tool_choice.as_ref().and_then(tool_config) {
        body.insert("toolConfig".into(), tc);
    }
    let mut config = generation_config(req);
    if req.dialect == Dialect::Gemini
        && let Some(Value::Object(own)) = req.extra.get("generationConfig")
    {
        for (k, v) in own {
            if !GENERATION_MAPPED.contains(&k.as_str()) {
                config.insert(k.clone(), v.clone());
            }
        }
    }
    body.remove("generationConfig");
    if !config.is_empty() {
        body.insert("generationConfig".into(), Value::Object(config));
    }
    Value::Object(body)
}

/// (id, name) of every tool call of `messages`, for the function responses
/// that must name their function.
pub(crate) fn tool_names(messages: &[Message]) -> Vec<(&str, &str)> {
    let mut names = Vec::new();
    for m in messages {
        for p in &m.content {
            if let Part::ToolCall { id, name, .. } = p {
                names.push((id.as_str(), name.as_str()));
            }
        }
    }
    names
}

/// Appends `m` to `contents` as Gemini content (merged into the previous
/// turn of the same role); `names` from [`tool_names`].
pub(crate) fn render_message(m: &Message, names: &[(&str, &str)], contents: &mut Vec<Value>) {
    let mut parts = Vec::with_capacity(m.content.len());
    for p in &m.content {
        match p {
            Part::Text { text } => {
                if !text.is_empty() {
                    parts.push(json!({"text": text}));
                }
            }
            // Gemini's own parts (thoughts with their signatures, files,
            // code) as the client or the provider sent them.
            Part::Opaque {
                dialect: Dialect::Gemini,
                value,
            } => parts.push(value.clone()),
            Part::Opaque { value, .. } => {
                if let Some(img) = image_part(value) {
                    parts.push(img);
                }
            }
            Part::ToolCall {
                name, arguments, ..
            } => parts.push(json!({"functionCall": {
                "name": name,
                "args": arguments_to_input(arguments),
            }})),
            Part::ToolResult {
                tool_call_id,
                content,
                is_error,
            } => {
                let name = names
                    .iter()
                    .find(|(id, _)| id == tool_call_id)
                    .map_or(tool_call_id.as_str(), |(_, n)| n);
                parts.push(json!({"functionResponse": {
                    "name": name,
                    "response": response_object(content, *is_error),
                }}));
            }
        }
    }
    let role = match m.role {
        Role::Assistant => "model",
        Role::User | Role::Tool | Role::System => "user",
    };
    push_turn(contents, role, "parts", parts);
}

/// OpenAI-shaped `tool_choice` as Gemini's `toolConfig`.
fn tool_config(tc: &Value) -> Option<Value> {
    let (mode, only) = match tc {
        Value::String(s) => match s.as_str() {
            "auto" => ("AUTO", None),
            "none" => ("NONE", None),
            "required" | "any" => ("ANY", None),
            _ => return None,
        },
        Value::Object(o) => {
            let name = o
                .get("function")
                .and_then(|f| f.get("name"))
                .or_else(|| o.get("name"))
                .and_then(Value::as_str)?;
            ("ANY", Some(name))
        }
        Value::Null | Value::Bool(_) | Value::Number(_) | Value::Array(_) => return None,
    };
    let mut fc = Map::new();
    fc.insert("mode".into(), json!(mode));
    if let Some(n) = only {
        fc.insert("allowedFunctionNames".into(), json!([n]));
    }
    Some(json!({ "functionCallingConfig": fc }))
}

fn generation_config(req: &ChatRequest) -> Map<String, Value> {
    let mut g = Map::new();
    if let Some(n) = req.max_tokens {
        g.insert("maxOutputTokens".into(), json!(n));
    }
    if let Some(t) = req.temperature {
        g.insert("temperature".into(), json!(t));
    }
    if let Some(p) = req.top_p {
        g.insert("topP".into(), json!(p));
    }
    let stops: Vec<&String> = req
        .stop
        .iter()
        .filter(|s| !s.is_empty())
        .take(MAX_STOP_SEQUENCES)
        .collect();
    if !stops.is_empty() {
        g.insert("stopSequences".into(), json!(stops));
    }
    // A JSON answer: OpenAI `response_format`, Responses `text.format`.
    let format = req
        .extra
        .get("response_format")
        .or_else(|| req.extra.get("text").and_then(|t| t.get("format")));
    if let Some(f) = format {
        match f.get("type").and_then(Value::as_str) {
            Some("json_object") => {
                g.insert("responseMimeType".into(), json!("application/json"));
            }
            Some("json_schema") => {
                g.insert("responseMimeType".into(), json!("application/json"));
                let schema = f
                    .get("json_schema")
                    .and_then(|s| s.get("schema"))
                    .or_else(|| f.get("schema"));
                if let Some(s) = schema {
                    g.insert("responseJsonSchema".into(), s.clone());
                }
            }
            Some(_) | None => {}
        }
    }
    // Thinking: Anthropic `thinking`, OpenAI `reasoning_effort`, Responses `reasoning.effort`.
    let budget = match req.extra.get("thinking") {
        Some(t) if t.get("type").and_then(Value::as_str) == Some("enabled") => {
            t.get("budget_tokens").and_then(Value::as_i64)
        }
        Some(t) if t.get("type").and_then(Value::as_str) == Some("disabled") => Some(0),
        Some(_) | None => req
            .extra
            .get("reasoning_effort")
            .or_else(|| req.extra.get("reasoning").and_then(|r| r.get("effort")))
            .and_then(Value::as_str)
            .and_then(|e| EFFORT_BUDGETS.iter().find(|(k, _)| *k == e))
            .map(|(_, b)| *b),
    };
    if let Some(b) = budget {
        g.insert("thinkingConfig".into(), json!({"thinkingBudget": b}));
    }
    g
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::openai;

    fn openai_req(body: Value) -> ChatRequest {
        openai::parse_request(&body).expect("a valid request")
    }

    /// A conversation with a system prompt, a tool round trip, an image and
    /// every generation knob renders as Gemini expects it.
    #[test]
    fn a_conversation_renders_as_contents() {
        let req = openai_req(json!({
            "model": "m",
            "messages": [
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": [
                    {"type": "text", "text": "what is in"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
                ]},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "look", "arguments": "{\"x\":1}"}},
                    {"id": "call_2", "type": "function", "function": {"name": "peek", "arguments": "not json"}},
                ]},
                {"role": "tool", "tool_call_id": "call_1", "content": "{\"seen\":true}"},
                {"role": "tool", "tool_call_id": "call_2", "content": "plain"},
                {"role": "system", "content": "nudge"},
            ],
            "tools": [{"type": "function", "function": {"name": "look", "description": "d", "parameters": {"type": "object", "additionalProperties": false}}}],
            "tool_choice": {"type": "function", "function": {"name": "look"}},
            "max_tokens": 100, "temperature": 0.5, "top_p": 0.9,
            "stop": ["a", "b", "c", "d", "e", "f"],
            "response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": {"type": "object"}}},
            "reasoning_effort": "low",
        }));
        let b = render_request(&req, "gemini-2.5-flash", None);
        assert_eq!(
            b["systemInstruction"],
            json!({"parts": [{"text": "be brief"}]})
        );
        let c = b["contents"].as_array().unwrap();
        assert_eq!(c.len(), 3, "{c:?}");
        assert_eq!(c[0]["role"], "user");
        assert_eq!(
            c[0]["parts"][1],
            json!({"inlineData": {"mimeType": "image/png", "data": "AAAA"}})
        );
        assert_eq!(c[1]["role"], "model");
        assert_eq!(
            c[1]["parts"][0],
            json!({"functionCall": {"name": "look", "args": {"x": 1}}})
        );
        assert_eq!(
            c[1]["parts"][1]["functionCall"]["args"],
            json!({"_hale_raw_arguments": "not json"})
        );
        // Both results and the late system message merge into one user turn.
        assert_eq!(c[2]["role"], "user");
        assert_eq!(
            c[2]["parts"][0],
            json!({"functionResponse": {"name": "look", "response": {"seen": true}}})
        );
        assert_eq!(
            c[2]["parts"][1],
            json!({"functionResponse": {"name": "peek", "response": {"result": "plain"}}})
        );
        assert_eq!(c[2]["parts"][2], json!({"text": "nudge"}));
        assert_eq!(
            b["tools"][0]["functionDeclarations"][0]["parametersJsonSchema"]["additionalProperties"],
            false
        );
        assert_eq!(
            b["toolConfig"],
            json!({"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["look"]}})
        );
        let g = &b["generationConfig"];
        assert_eq!(g["maxOutputTokens"], 100);
        assert_eq!(g["temperature"], 0.5);
        assert_eq!(g["topP"], 0.9);
        assert_eq!(
            g["stopSequences"].as_array().unwrap().len(),
            MAX_STOP_SEQUENCES
        );
        assert_eq!(g["responseMimeType"], "application/json");
        assert_eq!(g["responseJsonSchema"], json!({"type": "object"}));
        assert_eq!(g["thinkingConfig"], json!({"thinkingBudget": 1024}));
        assert!(b.get("model").is_none());
    }

    #[test]
    fn tool_choice_modes_and_prefill() {
        for (tc, mode) in [("auto", "AUTO"), ("none", "NONE"), ("required", "ANY")] {
            assert_eq!(
                tool_config(&json!(tc)).unwrap()["functionCallingConfig"]["mode"],
                mode
            );
        }
        let req =
            openai_req(json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]}));
        let b = render_request(&req, "m", Some("Once upon"));
        assert_eq!(
            b["contents"][1],
            json!({"role": "model", "parts": [{"text": "Once upon"}]})
        );
        assert!(b.get("generationConfig").is_none());
    }

    #[test]
    fn anthropic_thinking_is_a_budget() {
        let req = crate::anthropic::parse_request(&json!({
            "model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}],
            "thinking": {"type": "enabled", "budget_tokens": 2048},
        }))
        .unwrap();
        let b = render_request(&req, "m", None);
        assert_eq!(
            b["generationConfig"]["thinkingConfig"],
            json!({"thinkingBudget": 2048})
        );
    }

    fn gemini(body: Value) -> ChatRequest {
        parse_request_traced(&body, "route-x", false)
            .expect("a valid request")
            .0
    }

    /// A Gemini CLI-like conversation: system instruction, a call without
    /// an id answered by name, an image, tools in both schema spellings,
    /// tool config and generation config.
    #[test]
    fn a_client_request_parses_into_the_canonical_model() {
        let (req, trace) = parse_request_traced(
            &json!({
                "systemInstruction": {"role": "user", "parts": [{"text": "be brief"}, {"text": "and kind"}]},
                "contents": [
                    {"role": "user", "parts": [
                        {"text": "look"},
                        {"inlineData": {"mimeType": "image/png", "data": "AAAA"}},
                        {"inlineData": {"mimeType": "application/pdf", "data": "BBBB"}},
                    ]},
                    {"role": "model", "parts": [
                        {"text": "plan", "thought": true},
                        {"functionCall": {"name": "look", "args": {"x": 1}}, "thoughtSignature": "c2ln"},
                        {"functionCall": {"id": "fc_2", "name": "peek", "args": {}}},
                    ]},
                    {"role": "user", "parts": [
                        {"functionResponse": {"name": "look", "response": {"output": "seen"}}},
                        {"functionResponse": {"id": "fc_2", "name": "peek", "response": {"error": "boom"}}},
                        {"functionResponse": {"name": "other", "response": {"a": 1, "b": 2}}},
                    ]},
                ],
                "tools": [
                    {"functionDeclarations": [
                        {"name": "look", "description": "d", "parameters": {"type": "OBJECT", "properties": {"x": {"type": "INTEGER", "nullable": true}}, "propertyOrdering": ["x"]}},
                        {"name": "peek", "parametersJsonSchema": {"type": "object", "additionalProperties": false}},
                        {"name": "bare"},
                    ]},
                    {"googleSearch": {}},
                ],
                "toolConfig": {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["look"]}},
                "generationConfig": {"maxOutputTokens": 100, "temperature": 0.5, "topP": 0.9, "topK": 40,
                                     "stopSequences": ["END"], "candidateCount": 1,
                                     "thinkingConfig": {"thinkingBudget": 128}},
                "safetySettings": [{"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_NONE"}],
            }),
            "gemini-2.5-pro",
            true,
        )
        .unwrap();
        assert_eq!(req.model, "gemini-2.5-pro");
        assert!(req.stream && req.include_usage);
        assert_eq!(req.dialect, Dialect::Gemini);
        assert_eq!(req.system.as_deref(), Some("be brief\nand kind"));
        // user, assistant, tool ×3
        let roles: Vec<Role> = req.messages.iter().map(|m| m.role).collect();
        assert_eq!(
            roles,
            [
                Role::User,
                Role::Assistant,
                Role::Tool,
                Role::Tool,
                Role::Tool
            ]
        );
        assert_eq!(trace.spans, vec![0..1, 1..2, 2..5]);
        let user = &req.messages[0].content;
        assert!(
            matches!(&user[1], Part::Opaque { dialect: Dialect::Anthropic, value } if value["source"]["data"] == "AAAA")
        );
        assert!(matches!(
            &user[2],
            Part::Opaque {
                dialect: Dialect::Gemini,
                ..
            }
        ));
        let model = &req.messages[1].content;
        assert!(
            matches!(&model[0], Part::Opaque { dialect: Dialect::Gemini, value } if value["thought"] == true)
        );
        assert_eq!(
            model[1],
            Part::ToolCall {
                id: "gemini_call_0".into(),
                name: "look".into(),
                arguments: "{\"x\":1}".into()
            }
        );
        assert!(matches!(&model[2], Part::ToolCall { id, .. } if id == "fc_2"));
        assert_eq!(
            req.messages[2].content[0],
            Part::ToolResult {
                tool_call_id: "gemini_call_0".into(),
                content: "seen".into(),
                is_error: false
            }
        );
        assert_eq!(
            req.messages[3].content[0],
            Part::ToolResult {
                tool_call_id: "fc_2".into(),
                content: "boom".into(),
                is_error: true
            }
        );
        assert!(
            matches!(&req.messages[4].content[0], Part::ToolResult { content, .. } if content == "{\"a\":1,\"b\":2}")
        );
        assert_eq!(req.tools.len(), 3);
        assert_eq!(
            req.tools[0].parameters,
            json!({"type": "object", "properties": {"x": {"type": ["integer", "null"]}}})
        );
        assert_eq!(req.tools[1].parameters["additionalProperties"], false);
        assert_eq!(req.tools[2].parameters, empty_schema());
        assert_eq!(
            req.tool_choice,
            Some(json!({"type": "function", "function": {"name": "look"}}))
        );
        assert_eq!(req.max_tokens, Some(100));
        assert_eq!(req.temperature, Some(0.5));
        assert_eq!(req.top_p, Some(0.9));
        assert_eq!(req.stop, vec!["END".to_string()]);
        assert!(req.extra.contains_key("safetySettings"));
        assert!(req.extra.contains_key("generationConfig"));

        // Rendered back for a Gemini provider: its own fields come back.
        let b = render_request(&req, "gemini-2.5-pro", None);
        assert_eq!(b["safetySettings"][0]["threshold"], "BLOCK_NONE");
        assert_eq!(b["generationConfig"]["topK"], 40);
        assert_eq!(
            b["generationConfig"]["thinkingConfig"]["thinkingBudget"],
            128
        );
        assert_eq!(b["generationConfig"]["maxOutputTokens"], 100);
        assert_eq!(b["contents"][1]["parts"][0]["thought"], true);
    }

    #[test]
    fn tool_config_modes() {
        for (mode, names, want) in [
            ("AUTO", json!([]), json!("auto")),
            ("VALIDATED", json!([]), json!("auto")),
            ("NONE", json!([]), json!("none")),
            ("ANY", json!([]), json!("required")),
            ("ANY", json!(["a", "b"]), json!("required")),
        ] {
            let req = gemini(
                json!({"contents": [], "toolConfig": {"functionCallingConfig": {"mode": mode, "allowedFunctionNames": names}}}),
            );
            assert_eq!(req.tool_choice, Some(want), "{mode}");
        }
    }

    /// Every refusal names the JSON path of what is wrong.
    #[test]
    fn bad_requests_name_their_path() {
        for (body, path) in [
            (json!([]), "body"),
            (json!({}), "contents"),
            (json!({"contents": {}}), "contents"),
            (json!({"contents": [1]}), "contents[0]"),
            (
                json!({"contents": [{"role": "system", "parts": []}]}),
                "contents[0].role",
            ),
            (json!({"contents": [{"parts": "x"}]}), "contents[0].parts"),
            (
                json!({"contents": [{"parts": [{"text": 1}]}]}),
                "contents[0].parts[0].text",
            ),
            (
                json!({"contents": [{"parts": [{"functionCall": {"args": {}}}]}]}),
                "contents[0].parts[0].functionCall.name",
            ),
            (
                json!({"contents": [{"parts": [{"functionCall": {"name": "f", "args": [1]}}]}]}),
                "contents[0].parts[0].functionCall.args",
            ),
            (
                json!({"contents": [{"parts": [{"functionResponse": {"name": "f", "response": "x"}}]}]}),
                "contents[0].parts[0].functionResponse.response",
            ),
            (
                json!({"contents": [{"parts": [{"inlineData": {"mimeType": "image/png"}}]}]}),
                "contents[0].parts[0].inlineData.data",
            ),
            (
                json!({"contents": [], "systemInstruction": 3}),
                "systemInstruction",
            ),
            (
                json!({"contents": [], "tools": [{"functionDeclarations": [{}]}]}),
                "tools[0].functionDeclarations[0].name",
            ),
            (
                json!({"contents": [], "toolConfig": {"functionCallingConfig": {"mode": "SOMETIMES"}}}),
                "toolConfig.functionCallingConfig.mode",
            ),
            (
                json!({"contents": [], "generationConfig": {"maxOutputTokens": -1}}),
                "generationConfig.maxOutputTokens",
            ),
            (
                json!({"contents": [], "generationConfig": {"stopSequences": [1]}}),
                "generationConfig.stopSequences[0]",
            ),
            (
                json!({"contents": [], "generationConfig": {"candidateCount": 2}}),
                "generationConfig.candidateCount",
            ),
        ] {
            let e = parse_request_traced(&body, "m", false).unwrap_err();
            assert_eq!(e.path, path, "{body}: {e}");
        }
    }
}
