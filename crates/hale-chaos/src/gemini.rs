//! Google's Generative Language API as the chaos server speaks it:
//! `POST /v1beta/models/{model}:generateContent` and
//! `:streamGenerateContent?alt=sse`, each `data:` a whole
//! `GenerateContentResponse` chunk, Google's error shape
//! (`{"error":{"code","message","status","details"}}`) and its safety
//! blocks (a 200 whose `promptFeedback.blockReason` or whose candidate's
//! `finishReason` says `SAFETY`). The model and streaming are named in the
//! URL; the key must come in `x-goog-api-key`.
//!
//! Reading turns `contents` into the chat messages the answers look at
//! (`model` turns are the assistant's, so a trailing one is a prefill);
//! the faults and answers are the other dialects' (`server`, `answer`).
//! A function call is never streamed in pieces: Gemini sends it whole.

use bytes::Bytes;
use serde_json::{Map, Value, json};

use crate::answer::{Answer, ChatRequest, Content, Finish, Message, json_text};
use crate::frame::{Ctx, sse_data};

/// The header a Gemini client sends its key in.
pub const KEY_HEADER: &str = "x-goog-api-key";

/// A chunk that is not JSON.
pub const MALFORMED_FRAME: &[u8] = b"data: {not json\n\n";
/// A body that is not JSON.
pub const MALFORMED_BODY: &str = "{\"candidates\":[{\"content\": not json";

/// The method a path's last segment names: `{model}:generateContent`
/// (`false`) or `{model}:streamGenerateContent` (`true`).
pub fn split_action(action: &str) -> Option<(&str, bool)> {
    let (model, method) = action.rsplit_once(':')?;
    match method {
        "generateContent" => Some((model, false)),
        "streamGenerateContent" => Some((model, true)),
        _ => None,
    }
}

/// A field of a Gemini body by its JSON name, or by the proto's snake_case
/// name: Google's JSON mapping accepts both, and clients send either (the
/// google-genai SDK `functionResponse`, LiteLLM `function_response`).
pub fn field<'v>(v: &'v Value, camel: &str, snake: &str) -> Option<&'v Value> {
    v.get(camel).or_else(|| v.get(snake))
}

/// Reads a `generateContent` body for `model`, streamed or not.
pub fn read_request(body: &[u8], model: &str, stream: bool) -> Result<ChatRequest, String> {
    let m: Map<String, Value> = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    let contents = match m.get("contents") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(c)) => c.clone(),
        Some(other) => return Err(format!("`contents` must be an array, not {other}")),
    };
    let mut messages = Vec::with_capacity(contents.len());
    for c in contents {
        let parts = c
            .get("parts")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let results = !parts.is_empty()
            && parts
                .iter()
                .all(|p| field(p, "functionResponse", "function_response").is_some());
        let role = match c.get("role").and_then(Value::as_str) {
            Some("model") => "assistant",
            Some(_) | None if results => "tool",
            Some(_) | None => "user",
        };
        let texts: Vec<Value> = parts
            .iter()
            .filter_map(|p| {
                if let Some(t) = p.get("text").and_then(Value::as_str) {
                    Some(json!({"text": t}))
                } else {
                    field(p, "functionResponse", "function_response")
                        .and_then(|r| r.get("response"))
                        .map(|r| json!({"text": json_text(r)}))
                }
            })
            .collect();
        messages.push(Message {
            role: role.to_owned(),
            content: Value::Array(texts),
        });
    }
    let body = Value::Object(m);
    let system = field(&body, "systemInstruction", "system_instruction")
        .and_then(|s| s.get("parts"))
        .cloned();
    let max_tokens = field(&body, "generationConfig", "generation_config")
        .and_then(|g| field(g, "maxOutputTokens", "max_output_tokens"))
        .and_then(Value::as_u64);
    Ok(ChatRequest {
        model: Some(model.to_owned()),
        messages,
        system,
        stream: Some(stream),
        stream_options: None,
        max_tokens,
        max_completion_tokens: None,
        tools: body.get("tools").cloned(),
    })
}

fn finish_reason(f: Finish) -> &'static str {
    match f {
        Finish::Stop | Finish::ToolUse => "STOP",
        Finish::Length => "MAX_TOKENS",
    }
}

fn usage(ctx: &Ctx, a: &Answer) -> Value {
    json!({
        "promptTokenCount": ctx.input_tokens,
        "candidatesTokenCount": a.output_tokens,
        "totalTokenCount": ctx.input_tokens + a.output_tokens,
    })
}

fn call_part(a: &Answer) -> Option<Value> {
    match &a.content {
        Content::Text(_) => None,
        Content::Tool {
            name, arguments, ..
        } => {
            let args: Value = serde_json::from_str(arguments).unwrap_or_else(|_| json!({}));
            Some(json!({"functionCall": {"name": name, "args": args}}))
        }
    }
}

fn response(ctx: &Ctx, parts: Value, finish: Option<&str>, usage: Option<Value>) -> Value {
    let mut cand = json!({"content": {"role": "model", "parts": parts}, "index": 0});
    if let Some(f) = finish {
        cand["finishReason"] = json!(f);
    }
    let mut v = json!({"candidates": [cand], "modelVersion": ctx.model, "responseId": ctx.id});
    if let Some(u) = usage {
        v["usageMetadata"] = u;
    }
    v
}

/// The non-streamed body.
pub fn full_body(ctx: &Ctx, a: &Answer) -> String {
    let parts = match call_part(a) {
        Some(call) => json!([call]),
        None => json!([{"text": a.full_text()}]),
    };
    response(
        ctx,
        parts,
        Some(finish_reason(a.finish)),
        Some(usage(ctx, a)),
    )
    .to_string()
}

/// The frames before the pieces: a function call, whole.
pub fn stream_head(ctx: &Ctx, a: &Answer) -> Vec<Bytes> {
    match call_part(a) {
        Some(call) => vec![sse_data(&response(ctx, json!([call]), None, None))],
        None => Vec::new(),
    }
}

/// The pieces streamed: the words of a text answer; none for a call.
pub fn pieces(a: &Answer) -> &[String] {
    match &a.content {
        Content::Text(chunks) => chunks,
        Content::Tool { .. } => &[],
    }
}

/// A text chunk up to its text (the piece's JSON string follows, then
/// [`piece_suffix`]).
pub fn piece_prefix(_ctx: &Ctx) -> String {
    "data: {\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"text\":".to_owned()
}

/// What closes a text chunk after its piece.
pub fn piece_suffix(ctx: &Ctx) -> String {
    let s = |v: &str| Value::String(v.to_owned()).to_string();
    format!(
        "}}]}},\"index\":0}}],\"modelVersion\":{},\"responseId\":{}}}\n\n",
        s(&ctx.model),
        s(&ctx.id)
    )
}

/// The finishing chunk (`finishReason` and usage). Gemini has no end event
/// to leave out: `no_done` leaves out the usage, as it does elsewhere.
pub fn stream_finish(ctx: &Ctx, a: &Answer, no_done: bool) -> Vec<Bytes> {
    let usage = (!no_done).then(|| usage(ctx, a));
    vec![sse_data(&response(
        ctx,
        json!([{"text": ""}]),
        Some(finish_reason(a.finish)),
        usage,
    ))]
}

/// Google's error body.
pub fn error(code: u16, status: &str, message: &str, details: Value) -> String {
    json!({"error": {"code": code, "message": message, "status": status, "details": details}})
        .to_string()
}

/// The in-band error a failing stream sends.
pub fn error_frames() -> Vec<Bytes> {
    vec![sse_data(&json!({"error": {
        "code": 503, "message": "The model is overloaded. Please try again later.", "status": "UNAVAILABLE",
    }}))]
}

/// A safety block as Google sends it, with a 200: the prompt's
/// `blockReason` for a complete answer, a candidate finished by `SAFETY`
/// in a stream.
pub fn blocked(ctx: &Ctx, stream: bool) -> Bytes {
    let ratings = json!([{"category": "HARM_CATEGORY_DANGEROUS_CONTENT", "probability": "HIGH", "blocked": true}]);
    if stream {
        sse_data(&json!({
            "candidates": [{"finishReason": "SAFETY", "index": 0, "safetyRatings": ratings}],
            "usageMetadata": {"promptTokenCount": ctx.input_tokens, "totalTokenCount": ctx.input_tokens},
            "modelVersion": ctx.model, "responseId": ctx.id,
        }))
    } else {
        Bytes::from(
            json!({
                "promptFeedback": {"blockReason": "SAFETY", "safetyRatings": ratings},
                "usageMetadata": {"promptTokenCount": ctx.input_tokens, "totalTokenCount": ctx.input_tokens},
                "modelVersion": ctx.model, "responseId": ctx.id,
            })
            .to_string(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The proto's snake_case names (LiteLLM's): the same request read.
    #[test]
    fn snake_case_requests_read_as_camel_case() {
        let body = br#"{"system_instruction":{"parts":[{"text":"Summarize"}]},"contents":[
            {"role":"user","parts":[{"text":"hi"}]},
            {"role":"model","parts":[{"function_call":{"name":"t","args":{}}}]},
            {"role":"user","parts":[{"function_response":{"name":"t","response":{"result":"ok"}}}]}],
            "tools":[{"function_declarations":[{"name":"shell","parameters":{"type":"object"}}]}],
            "generation_config":{"max_output_tokens":7}}"#;
        let r = read_request(body, "m", false).unwrap();
        assert_eq!(r.max_output(), Some(7));
        assert_eq!(r.messages[2].role, "tool");
        assert_eq!(r.system, Some(serde_json::json!([{"text": "Summarize"}])));
        assert_eq!(r.tool_results(), 1);
        assert!(r.observed_texts()[1].contains("ok"));
        let names: Vec<String> = crate::task::offered(r.tools.as_ref().unwrap())
            .into_iter()
            .map(|o| o.name)
            .collect();
        assert_eq!(names, ["shell"]);
    }

    /// Codex's shell output, its marker after a newline: read as the text
    /// the model sees, so the task moves on (the serialized JSON's `\n`
    /// hid the marker, and Codex through a Gemini deployment repeated its
    /// first step until hale's loop guard stopped it).
    #[test]
    fn a_function_response_is_read_as_its_text() {
        let task = crate::task::Task::new(1234, 4).unwrap();
        let result = format!("Process exited with code 0\nOutput:\n{}\n", task.marker(1));
        let body = json!({"contents": [
            {"role": "user", "parts": [{"text": "Run task-1234-4, then report."}]},
            {"role": "model", "parts": [{"functionCall": {"name": "exec_command", "args": {}}}]},
            {"role": "user", "parts": [{"functionResponse": {"name": "exec_command", "response": {"result": result}}}]}
        ]})
        .to_string();
        let r = read_request(body.as_bytes(), "task", false).unwrap();
        let seen = task.markers_in(r.observed_texts().iter().map(String::as_str));
        assert!(seen.contains_key(&1), "{:?}", r.observed_texts());
    }

    #[test]
    fn actions_and_requests_read() {
        assert_eq!(
            split_action("gemini-x:generateContent"),
            Some(("gemini-x", false))
        );
        assert_eq!(
            split_action("cut-after-3:streamGenerateContent"),
            Some(("cut-after-3", true))
        );
        assert_eq!(split_action("m:countTokens"), None);
        let body = br#"{"systemInstruction":{"parts":[{"text":"Summarize"}]},"contents":[
            {"role":"user","parts":[{"text":"hi"}]},
            {"role":"model","parts":[{"functionCall":{"name":"t","args":{}}}]},
            {"role":"user","parts":[{"functionResponse":{"name":"t","response":{"result":"ok"}}}]},
            {"role":"model","parts":[{"text":"So"}]}],
            "generationConfig":{"maxOutputTokens":7}}"#;
        let r = read_request(body, "m", true).unwrap();
        assert_eq!(r.model.as_deref(), Some("m"));
        assert!(r.is_stream());
        assert_eq!(r.max_output(), Some(7));
        assert_eq!(r.messages[2].role, "tool");
        assert_eq!(r.prefill().as_deref(), Some("So"));
        assert_eq!(r.system, Some(serde_json::json!([{"text": "Summarize"}])));
        assert_eq!(r.tool_results(), 1);
        assert!(r.observed_texts()[1].contains("ok"));
        assert!(read_request(b"{\"contents\": 3}", "m", false).is_err());
    }
}
