//! Gemini responses: a `GenerateContentResponse` read into a
//! [`ChatResponse`] (and each stream chunk, which has the same shape),
//! safety blocks, and rendering an answer or an error in Gemini's shape.

use serde_json::{Map, Value, json};

use crate::anthropic::{arguments_to_input, input_to_arguments};
use crate::canonical::{ChatResponse, Dialect, Part, ProtoError, StopReason, Usage};
use crate::json::{as_object, at, count, err, error_message, field};
use hale_core::gemini::AnswerFailure;

/// The Gemini `finishReason` of a canonical stop reason.
pub fn stop_reason(r: StopReason) -> &'static str {
    match r {
        StopReason::EndTurn | StopReason::ToolUse => "STOP",
        StopReason::MaxTokens => "MAX_TOKENS",
        StopReason::ContentFilter => "SAFETY",
    }
}

/// The canonical stop reason of a `finishReason` (hale-core's reading).
pub(super) fn parse_stop_reason(reason: &str, called_tools: bool) -> StopReason {
    use hale_core::gemini::Finish;
    match hale_core::gemini::finish_of(reason) {
        Finish::Stop if called_tools => StopReason::ToolUse,
        Finish::Stop | Finish::Failed => StopReason::EndTurn,
        Finish::MaxTokens => StopReason::MaxTokens,
        Finish::Blocked => StopReason::ContentFilter,
    }
}

/// The failure a response (or stream chunk) stands for: a blocked prompt or
/// a candidate finished by a block or an unusable call (hale-core decides).
pub fn answer_failure(body: &Value) -> Option<AnswerFailure> {
    let block = body
        .get("promptFeedback")
        .and_then(|f| f.get("blockReason"))
        .and_then(Value::as_str);
    let finish = first_candidate(body)
        .and_then(|c| c.get("finishReason"))
        .and_then(Value::as_str);
    hale_core::gemini::answer_failure(block, finish)
}

fn first_candidate(body: &Value) -> Option<&Value> {
    body.get("candidates")?.as_array()?.first()
}

/// `usageMetadata` as canonical usage: the prompt count already holds the
/// cached tokens; thinking tokens are output.
pub(super) fn usage_of(u: Option<&Map<String, Value>>) -> Usage {
    Usage {
        input_tokens: count(u, "promptTokenCount"),
        output_tokens: count(u, "candidatesTokenCount")
            .saturating_add(count(u, "thoughtsTokenCount")),
    }
}

/// Ids for the function calls a Gemini answer gives without one (the
/// Generative Language API usually does): `call_gemini_{responseId}_{n}`,
/// unique to the answer and numbered within it (`call_gemini_{n}` when the
/// answer has no `responseId`; only `[A-Za-z0-9_-]` of it is kept, the
/// characters every dialect's ids accept). Unique across answers because a
/// client whose dialect carries call ids (the Responses API, Chat
/// Completions, Messages) sees every turn's calls in one conversation, and
/// one that reuses a completed call's id is refused — the OpenAI Agents SDK
/// stops the run (`Model reused a completed tool call ID`).
#[derive(Debug, Default)]
pub(super) struct CallIds {
    response: String,
    next: u32,
}

impl CallIds {
    /// Sets the answer's `responseId` (the first one seen).
    pub(super) fn answer(&mut self, response_id: &str) {
        if self.response.is_empty() {
            self.response = response_id
                .chars()
                .filter(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '-')
                .collect();
        }
    }

    fn next_id(&mut self) -> String {
        let n = self.next;
        self.next += 1;
        match self.response.as_str() {
            "" => format!("call_gemini_{n}"),
            r => format!("call_gemini_{r}_{n}"),
        }
    }
}

/// The parts of a candidate's content, in order; `ids` names the function
/// calls that come without an id ([`CallIds`]).
pub(super) fn parts_of(
    candidate: &Map<String, Value>,
    path: &str,
    next_tool: &mut CallIds,
) -> Result<Vec<Part>, ProtoError> {
    let Some(content) = field(candidate, "content") else {
        return Ok(Vec::new());
    };
    let cpath = format!("{path}.content");
    let content = as_object(content, &cpath)?;
    let Some(parts) = field(content, "parts") else {
        return Ok(Vec::new());
    };
    let ppath = format!("{cpath}.parts");
    let parts = parts
        .as_array()
        .ok_or_else(|| err(&ppath, "must be an array"))?;
    let mut out = Vec::with_capacity(parts.len());
    for (i, p) in parts.iter().enumerate() {
        out.extend(part_of(p, &at(&ppath, i), next_tool)?);
    }
    Ok(out)
}

/// One part of a candidate's content (`None`: an empty text).
pub(super) fn part_of(
    p: &Value,
    pp: &str,
    next_tool: &mut CallIds,
) -> Result<Option<Part>, ProtoError> {
    let po = as_object(p, pp)?;
    let mut out = Vec::with_capacity(1);
    {
        if po.get("thought").and_then(Value::as_bool) == Some(true) {
            out.push(Part::Opaque {
                dialect: Dialect::Gemini,
                value: p.clone(),
            });
        } else if let Some(call) = field(po, "functionCall") {
            let fp = format!("{pp}.functionCall");
            let co = as_object(call, &fp)?;
            let name = match field(co, "name") {
                Some(Value::String(n)) => n.clone(),
                Some(_) | None => return Err(err(format!("{fp}.name"), "missing `name`")),
            };
            let id = match field(co, "id").and_then(Value::as_str) {
                Some(id) if !id.is_empty() => id.to_owned(),
                Some(_) | None => next_tool.next_id(),
            };
            let arguments = match field(co, "args") {
                None => "{}".to_owned(),
                Some(a) => input_to_arguments(a),
            };
            out.push(Part::ToolCall {
                id,
                name,
                arguments,
            });
        } else if let Some(Value::String(t)) = field(po, "text") {
            if !t.is_empty() {
                out.push(Part::Text { text: t.clone() });
            }
        } else {
            // `inlineData`, `executableCode`, … : no canonical form.
            out.push(Part::Opaque {
                dialect: Dialect::Gemini,
                value: p.clone(),
            });
        }
    }
    Ok(out.pop())
}

/// Parses a complete `generateContent` answer.
pub fn parse_response(body: &Value) -> Result<ChatResponse, ProtoError> {
    let obj = as_object(body, "")?;
    if let Some(e) = field(obj, "error") {
        return Err(err("error", error_message(e)));
    }
    let id = obj
        .get("responseId")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let model = obj
        .get("modelVersion")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let usage = usage_of(obj.get("usageMetadata").and_then(Value::as_object));
    let mut next_tool = CallIds::default();
    next_tool.answer(&id);
    let (content, finish) = match field(obj, "candidates").and_then(Value::as_array) {
        Some(cands) if !cands.is_empty() => {
            let c = as_object(&cands[0], "candidates[0]")?;
            let parts = parts_of(c, "candidates[0]", &mut next_tool)?;
            let finish = c
                .get("finishReason")
                .and_then(Value::as_str)
                .map(str::to_owned);
            (parts, finish)
        }
        Some(_) | None => (Vec::new(), None),
    };
    let called = content.iter().any(|p| matches!(p, Part::ToolCall { .. }));
    let stop_reason = finish.as_deref().map(|f| parse_stop_reason(f, called));
    Ok(ChatResponse {
        id,
        model,
        content,
        stop_reason,
        usage,
    })
}

/// A complete answer in Gemini's shape, for a Gemini caller.
pub fn render_response(r: &ChatResponse) -> Value {
    let mut parts = Vec::with_capacity(r.content.len());
    for p in &r.content {
        match p {
            Part::Text { text } => parts.push(json!({"text": text})),
            Part::ToolCall {
                id,
                name,
                arguments,
            } => parts.push(
                json!({"functionCall": {"id": id, "name": name, "args": arguments_to_input(arguments)}}),
            ),
            Part::Opaque { dialect, value } => match dialect {
                Dialect::Gemini => parts.push(value.clone()),
                Dialect::OpenAi | Dialect::Anthropic | Dialect::Responses | Dialect::Bedrock => {}
            },
            Part::ToolResult { content, .. } => parts.push(json!({"text": content})),
        }
    }
    let mut cand = json!({"content": {"role": "model", "parts": parts}, "index": 0});
    if let Some(s) = r.stop_reason {
        cand["finishReason"] = json!(stop_reason(s));
    }
    json!({
        "candidates": [cand],
        "usageMetadata": usage_json(r.usage),
        "modelVersion": r.model,
        "responseId": r.id,
    })
}

/// What a Gemini caller may ask of each model hale lists.
const METHODS: [&str; 3] = ["generateContent", "streamGenerateContent", "countTokens"];

/// One model in Google's `Model` shape (`name` is `models/{id}`).
pub fn render_model(id: &str) -> Value {
    json!({
        "name": format!("models/{id}"),
        "baseModelId": id,
        "version": "hale",
        "displayName": id,
        "supportedGenerationMethods": METHODS,
    })
}

/// A model list in Google's `ListModelsResponse` shape.
pub fn render_models(ids: &[String]) -> Value {
    let models: Vec<Value> = ids.iter().map(|id| render_model(id)).collect();
    json!({ "models": models })
}

/// A `countTokens` answer.
pub fn render_count(total: u64) -> Value {
    json!({ "totalTokens": total })
}

pub(super) fn usage_json(u: Usage) -> Value {
    json!({
        "promptTokenCount": u.input_tokens,
        "candidatesTokenCount": u.output_tokens,
        "totalTokenCount": u.input_tokens.saturating_add(u.output_tokens),
    })
}

/// hale's own error body in Google's shape: `code` the HTTP status,
/// `status` its Google name ([`hale_core::gemini::google_status`]), hale's
/// `kind` as an `ErrorInfo` detail's `reason`, and hale's detail beside.
pub fn render_error(code: u16, kind: &str, message: &str, hale: Value) -> Value {
    json!({"error": {
        "code": code,
        "message": message,
        "status": hale_core::gemini::google_status(code),
        "details": [{
            "@type": "type.googleapis.com/google.rpc.ErrorInfo",
            "reason": kind,
            "domain": "hale",
        }],
        "hale": hale,
    }})
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Function calls without an id get one unique to their answer (its
    /// `responseId`, cleaned to `[A-Za-z0-9_-]`) and numbered within it:
    /// two turns of one conversation answered by Gemini never hand a
    /// client the same call id (found by the chaos hour: the OpenAI Agents
    /// SDK stopped on `call_gemini_0` twice).
    #[test]
    fn call_ids_without_one_are_unique_per_answer() {
        let answer = |rid: Option<&str>, calls: usize| {
            let parts: Vec<Value> = (0..calls)
                .map(|_| json!({"functionCall": {"name": "shell", "args": {}}}))
                .collect();
            let mut b = json!({"candidates": [{"content": {"role": "model", "parts": parts}}]});
            if let Some(r) = rid {
                b["responseId"] = json!(r);
            }
            let r = parse_response(&b).unwrap();
            r.content
                .iter()
                .filter_map(|p| match p {
                    Part::ToolCall { id, .. } => Some(id.clone()),
                    _ => None,
                })
                .collect::<Vec<_>>()
        };
        let table: [(Option<&str>, usize, &[&str]); 4] = [
            (Some("r1"), 2, &["call_gemini_r1_0", "call_gemini_r1_1"]),
            (Some("r2"), 1, &["call_gemini_r2_0"]),
            (Some("a/b+c=="), 1, &["call_gemini_abc_0"]),
            (None, 1, &["call_gemini_0"]),
        ];
        for (rid, calls, want) in table {
            assert_eq!(answer(rid, calls), want, "{rid:?}");
        }
        // An id the provider gave is kept.
        let b = json!({"responseId": "r9", "candidates": [{"content": {"role": "model",
            "parts": [{"functionCall": {"id": "given", "name": "shell", "args": {}}}]}}]});
        let r = parse_response(&b).unwrap();
        assert!(matches!(&r.content[0], Part::ToolCall { id, .. } if id == "given"));
    }
    use hale_core::class::ErrorClass;

    #[test]
    fn a_complete_answer_parses() {
        let body = json!({
            "candidates": [{"content": {"role": "model", "parts": [
                {"text": "plan", "thought": true},
                {"text": "Hello"},
                {"functionCall": {"name": "look", "args": {"x": 1}}},
                {"functionCall": {"id": "fc_9", "name": "peek", "args": {"_hale_raw_arguments": "raw"}}},
            ]}, "finishReason": "STOP", "index": 0}],
            "usageMetadata": {"promptTokenCount": 100, "cachedContentTokenCount": 60,
                              "candidatesTokenCount": 7, "thoughtsTokenCount": 5, "totalTokenCount": 112},
            "modelVersion": "gemini-2.5-flash", "responseId": "r1",
        });
        let r = parse_response(&body).unwrap();
        assert_eq!(r.id, "r1");
        assert_eq!(r.model, "gemini-2.5-flash");
        assert!(matches!(
            &r.content[0],
            Part::Opaque {
                dialect: Dialect::Gemini,
                ..
            }
        ));
        assert_eq!(
            r.content[1],
            Part::Text {
                text: "Hello".into()
            }
        );
        assert_eq!(
            r.content[2],
            Part::ToolCall {
                id: "call_gemini_r1_0".into(),
                name: "look".into(),
                arguments: "{\"x\":1}".into()
            }
        );
        assert_eq!(
            r.content[3],
            Part::ToolCall {
                id: "fc_9".into(),
                name: "peek".into(),
                arguments: "raw".into()
            }
        );
        assert_eq!(r.stop_reason, Some(StopReason::ToolUse));
        assert_eq!(
            r.usage,
            Usage {
                input_tokens: 100,
                output_tokens: 12
            }
        );
        assert!(answer_failure(&body).is_none());
        // And back, for a Gemini caller.
        let again = parse_response(&render_response(&r)).unwrap();
        assert_eq!(again.content, r.content);
    }

    #[test]
    fn finish_reasons_and_blocks() {
        let cand = |f: &str| json!({"candidates": [{"content": {"parts": [{"text": "x"}]}, "finishReason": f}]});
        assert_eq!(
            parse_response(&cand("MAX_TOKENS")).unwrap().stop_reason,
            Some(StopReason::MaxTokens)
        );
        assert_eq!(
            parse_response(&cand("STOP")).unwrap().stop_reason,
            Some(StopReason::EndTurn)
        );
        assert_eq!(
            parse_response(&cand("SAFETY")).unwrap().stop_reason,
            Some(StopReason::ContentFilter)
        );
        for f in [
            "SAFETY",
            "RECITATION",
            "PROHIBITED_CONTENT",
            "BLOCKLIST",
            "SPII",
        ] {
            assert_eq!(
                answer_failure(&cand(f)).map(|c| c.class),
                Some(ErrorClass::ContentPolicy),
                "{f}"
            );
        }
        let prompt = json!({"promptFeedback": {"blockReason": "SAFETY", "safetyRatings": []}, "usageMetadata": {"promptTokenCount": 3}});
        assert_eq!(
            answer_failure(&prompt).map(|c| c.class),
            Some(ErrorClass::ContentPolicy)
        );
        assert!(parse_response(&prompt).unwrap().content.is_empty());
    }

    #[test]
    fn bad_shapes_name_their_path() {
        let e = parse_response(
            &json!({"candidates": [{"content": {"parts": [{"functionCall": {"args": {}}}]}}]}),
        )
        .unwrap_err();
        assert_eq!(e.path, "candidates[0].content.parts[0].functionCall.name");
        let e = parse_response(&json!({"candidates": [{"content": {"parts": "x"}}]})).unwrap_err();
        assert_eq!(e.path, "candidates[0].content.parts");
        assert!(parse_response(&json!([])).is_err());
    }
}
