//! Converse requests: rendering a canonical request as a Converse body.

use serde_json::{Map, Value, json};

use crate::anthropic::arguments_to_input;
use crate::canonical::{ChatRequest, Dialect, Message, Part, Role, lead_system};
use crate::json::push_turn;

/// The image formats Converse takes, by MIME type.
fn image_format(mime: &str) -> Option<&'static str> {
    match mime {
        "image/png" => Some("png"),
        "image/jpeg" | "image/jpg" => Some("jpeg"),
        "image/gif" => Some("gif"),
        "image/webp" => Some("webp"),
        _ => None,
    }
}

/// The JSON of an image part of another dialect as a Converse `image`
/// block; only inline (base64) images have one (a URL is not fetched).
fn image_block(value: &Value) -> Option<Value> {
    let (mime, data) = match value.get("type").and_then(Value::as_str)? {
        "image_url" | "input_image" => {
            let url = value
                .get("image_url")
                .and_then(|u| u.get("url").or(Some(u)))
                .and_then(Value::as_str)?;
            let (meta, data) = url.strip_prefix("data:")?.split_once(',')?;
            (meta.strip_suffix(";base64")?.to_owned(), data.to_owned())
        }
        "image" => {
            let source = value.get("source")?;
            if source.get("type").and_then(Value::as_str)? != "base64" {
                return None;
            }
            (
                source.get("media_type")?.as_str()?.to_owned(),
                source.get("data")?.as_str()?.to_owned(),
            )
        }
        _ => return None,
    };
    Some(json!({"image": {"format": image_format(&mime)?, "source": {"bytes": data}}}))
}

/// The Converse body for `req` (the model is named in the URL, not the
/// body), with `prefill` as a final assistant turn when given.
pub fn render_request(req: &ChatRequest, _model: &str, prefill: Option<&str>) -> Value {
    let (system, rest) = lead_system(req);
    let mut messages: Vec<Value> = Vec::with_capacity(rest.len());
    for m in rest {
        render_message(m, &mut messages);
    }
    if let Some(p) = prefill.filter(|p| !p.trim().is_empty()) {
        // Converse refuses a final assistant text ending in whitespace.
        push_turn(
            &mut messages,
            "assistant",
            "content",
            vec![json!({"text": p.trim_end()})],
        );
    }
    let mut body = Map::new();
    body.insert("messages".into(), Value::Array(messages));
    let system: Vec<Value> = system
        .into_iter()
        .filter(|s| !s.is_empty())
        .map(|s| json!({"text": s}))
        .collect();
    if !system.is_empty() {
        body.insert("system".into(), Value::Array(system));
    }
    let none_chosen = req.tool_choice.as_ref().and_then(Value::as_str) == Some("none");
    if !req.tools.is_empty() && !none_chosen {
        let tools: Vec<Value> = req
            .tools
            .iter()
            .map(|t| {
                let mut spec = Map::new();
                spec.insert("name".into(), json!(t.name));
                if let Some(d) = t.description.as_ref().filter(|d| !d.is_empty()) {
                    spec.insert("description".into(), json!(d));
                }
                spec.insert("inputSchema".into(), json!({"json": t.parameters}));
                json!({"toolSpec": spec})
            })
            .collect();
        let mut tc = Map::new();
        tc.insert("tools".into(), Value::Array(tools));
        if let Some(choice) = req.tool_choice.as_ref().and_then(tool_choice) {
            tc.insert("toolChoice".into(), choice);
        }
        body.insert("toolConfig".into(), Value::Object(tc));
    }
    let mut inf = Map::new();
    if let Some(n) = req.max_tokens {
        inf.insert("maxTokens".into(), json!(n));
    }
    if let Some(t) = req.temperature {
        inf.insert("temperature".into(), json!(t));
    }
    if let Some(p) = req.top_p {
        inf.insert("topP".into(), json!(p));
    }
    let stops: Vec<&String> = req.stop.iter().filter(|s| !s.is_empty()).collect();
    if !stops.is_empty() {
        inf.insert("stopSequences".into(), json!(stops));
    }
    if !inf.is_empty() {
        body.insert("inferenceConfig".into(), Value::Object(inf));
    }
    Value::Object(body)
}

fn render_message(m: &Message, messages: &mut Vec<Value>) {
    let mut blocks = Vec::with_capacity(m.content.len());
    for p in &m.content {
        match p {
            Part::Text { text } => {
                if !text.is_empty() {
                    blocks.push(json!({"text": text}));
                }
            }
            Part::Opaque { dialect, value } => match dialect {
                // A Converse answer's own block (reasoning) goes back as it came.
                Dialect::Bedrock => blocks.push(value.clone()),
                Dialect::OpenAi | Dialect::Anthropic | Dialect::Responses | Dialect::Gemini => {
                    if let Some(img) = image_block(value) {
                        blocks.push(img);
                    }
                }
            },
            Part::ToolCall {
                id,
                name,
                arguments,
            } => blocks.push(json!({"toolUse": {
                "toolUseId": id,
                "name": name,
                "input": arguments_to_input(arguments),
            }})),
            Part::ToolResult {
                tool_call_id,
                content,
                is_error,
            } => {
                let mut r = Map::new();
                r.insert("toolUseId".into(), json!(tool_call_id));
                r.insert("content".into(), json!([{"text": content}]));
                if *is_error {
                    r.insert("status".into(), json!("error"));
                }
                blocks.push(json!({ "toolResult": r }));
            }
        }
    }
    let role = match m.role {
        Role::Assistant => "assistant",
        Role::User | Role::Tool | Role::System => "user",
    };
    push_turn(messages, role, "content", blocks);
}

/// OpenAI-shaped `tool_choice` as Converse's `toolChoice` (`none` has no
/// form: the caller leaves the tools out).
fn tool_choice(tc: &Value) -> Option<Value> {
    match tc {
        Value::String(s) => match s.as_str() {
            "auto" => Some(json!({"auto": {}})),
            "required" | "any" => Some(json!({"any": {}})),
            _ => None,
        },
        Value::Object(o) => {
            let name = o
                .get("function")
                .and_then(|f| f.get("name"))
                .or_else(|| o.get("name"))
                .and_then(Value::as_str)?;
            Some(json!({"tool": {"name": name}}))
        }
        Value::Null | Value::Bool(_) | Value::Number(_) | Value::Array(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::openai;

    /// A conversation with a system prompt, a tool round trip, an image and
    /// every inference knob renders as Converse expects it.
    #[test]
    fn a_conversation_renders_as_converse() {
        let req = openai::parse_request(&json!({
            "model": "m",
            "messages": [
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": [
                    {"type": "text", "text": "what is in"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
                ]},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "look", "arguments": "{\"x\":1}"}},
                ]},
                {"role": "tool", "tool_call_id": "call_1", "content": "seen"},
                {"role": "system", "content": "nudge"},
            ],
            "tools": [{"type": "function", "function": {"name": "look", "description": "d", "parameters": {"type": "object"}}}],
            "tool_choice": {"type": "function", "function": {"name": "look"}},
            "max_tokens": 100, "temperature": 0.5, "top_p": 0.9, "stop": ["x"],
        }))
        .unwrap();
        let b = render_request(&req, "meta.llama3", Some("So "));
        assert_eq!(b["system"], json!([{"text": "be brief"}]));
        let m = b["messages"].as_array().unwrap();
        assert_eq!(m.len(), 4, "{m:?}");
        assert_eq!(m[0]["role"], "user");
        assert_eq!(
            m[0]["content"][1],
            json!({"image": {"format": "png", "source": {"bytes": "AAAA"}}})
        );
        assert_eq!(
            m[1]["content"][0],
            json!({"toolUse": {"toolUseId": "call_1", "name": "look", "input": {"x": 1}}})
        );
        assert_eq!(m[2]["role"], "user");
        assert_eq!(
            m[2]["content"][0],
            json!({"toolResult": {"toolUseId": "call_1", "content": [{"text": "seen"}]}})
        );
        assert_eq!(m[2]["content"][1], json!({"text": "nudge"}));
        assert_eq!(
            m[3],
            json!({"role": "assistant", "content": [{"text": "So"}]})
        );
        assert_eq!(
            b["toolConfig"]["tools"][0]["toolSpec"],
            json!({"name": "look", "description": "d", "inputSchema": {"json": {"type": "object"}}})
        );
        assert_eq!(
            b["toolConfig"]["toolChoice"],
            json!({"tool": {"name": "look"}})
        );
        assert_eq!(
            b["inferenceConfig"],
            json!({"maxTokens": 100, "temperature": 0.5, "topP": 0.9, "stopSequences": ["x"]})
        );
        assert!(b.get("model").is_none());
    }
}
