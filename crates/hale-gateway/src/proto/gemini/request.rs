//! Gemini requests: rendering a canonical request as a `generateContent` body.

use serde_json::{Map, Value, json};

use crate::proto::anthropic::arguments_to_input;
use crate::proto::canonical::{ChatRequest, Dialect, Message, Part, Role};

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

/// Appends `parts` as a turn of `role`, merged into the previous turn when
/// it has the same role.
fn push_turn(contents: &mut Vec<Value>, role: &str, parts: Vec<Value>) {
    if parts.is_empty() {
        return;
    }
    if let Some(last) = contents.last_mut()
        && last.get("role").and_then(Value::as_str) == Some(role)
        && let Some(Value::Array(existing)) = last.get_mut("parts")
    {
        existing.extend(parts);
        return;
    }
    contents.push(json!({"role": role, "parts": parts}));
}

/// The `generateContent` body for `req`, served by `model` (named in the
/// URL, not the body), with `prefill` as a final `model` turn when given.
pub fn render_request(req: &ChatRequest, _model: &str, prefill: Option<&str>) -> Value {
    let mut system: Vec<String> = req.system.iter().cloned().collect();
    let lead = req
        .messages
        .iter()
        .take_while(|m| m.role == Role::System)
        .count();
    for m in &req.messages[..lead] {
        system.push(m.joined_text());
    }
    let mut names: Vec<(&str, &str)> = Vec::new();
    for m in &req.messages {
        for p in &m.content {
            if let Part::ToolCall { id, name, .. } = p {
                names.push((id, name));
            }
        }
    }
    let mut contents: Vec<Value> = Vec::with_capacity(req.messages.len());
    for m in &req.messages[lead..] {
        render_message(m, &names, &mut contents);
    }
    if let Some(p) = prefill.filter(|p| !p.is_empty()) {
        push_turn(&mut contents, "model", vec![json!({"text": p})]);
    }
    let mut body = Map::new();
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
    let config = generation_config(req);
    if !config.is_empty() {
        body.insert("generationConfig".into(), Value::Object(config));
    }
    Value::Object(body)
}

fn render_message(m: &Message, names: &[(&str, &str)], contents: &mut Vec<Value>) {
    let mut parts = Vec::with_capacity(m.content.len());
    for p in &m.content {
        match p {
            Part::Text { text } => {
                if !text.is_empty() {
                    parts.push(json!({"text": text}));
                }
            }
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
    push_turn(contents, role, parts);
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
    use crate::proto::openai;

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
        let req = crate::proto::anthropic::parse_request(&json!({
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
}
