//! Azure OpenAI's wire, as chaos plays it: the routes under `/openai/…`
//! (deployment URLs with `?api-version=`, and the v1 API), the `api-key`
//! (or Entra bearer) check, Azure's error shapes and retry headers, and
//! the content-filter annotations Azure adds to OpenAI's answers.
//!
//! The answers themselves are the OpenAI ones (`wire`, `responses`): this
//! file only decides what Azure changes around them, so the server's
//! handlers stay one code path with a [`Flavor`].

use axum::http::{HeaderMap, HeaderValue};
use bytes::Bytes;
use serde_json::{Value, json};

use crate::wire::ErrorKind;

/// Which provider's wire a request came in on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Flavor {
    /// OpenAI's, Anthropic's: `/v1/…`.
    Plain,
    /// Azure OpenAI's: `/openai/…`. `deployment` is the one in the URL
    /// (deployment URLs): it picks the fault, as the model name does
    /// elsewhere; `None` on the v1 API, where the body's `model` does.
    Azure { deployment: Option<String> },
    /// Vertex AI's: `/v1/projects/…/publishers/…` (the model and streaming
    /// named in the URL; a rate limit is Google's `RESOURCE_EXHAUSTED`).
    Vertex,
    /// AWS Bedrock's: `/model/{modelId}/…` (`crate::bedrock`). The model is
    /// the one in the URL; `api` says how the answer is framed.
    Bedrock { api: crate::bedrock::Api },
}

/// Whether an Azure request may go on: its credentials (an `api-key`, or an
/// `Authorization: Bearer` token standing for an Entra token, equal to
/// `key` when the server has one) and, on a deployment URL, an
/// `api-version` in the query. `Err`: the status and Azure's body.
pub fn admit(
    headers: &HeaderMap,
    query: Option<&str>,
    deployment_url: bool,
    key: Option<&str>,
) -> Result<(), (u16, String)> {
    let api_key = headers.get("api-key").and_then(|v| v.to_str().ok());
    let bearer = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    let given = api_key.or(bearer).filter(|k| !k.is_empty());
    let ok = match (given, key) {
        (None, _) => false,
        (Some(_), None) => true,
        (Some(g), Some(k)) => g == k,
    };
    if !ok {
        return Err((
            401,
            json!({"error": {"code": "401", "message": "Access denied due to invalid subscription key or wrong API endpoint. Make sure to provide a valid key for an active subscription and use a correct regional API endpoint for your resource."}}).to_string(),
        ));
    }
    let has_version = query.unwrap_or("").split('&').any(|kv| {
        kv.strip_prefix("api-version=")
            .is_some_and(|v| !v.is_empty())
    });
    if deployment_url && !has_version {
        return Err((
            404,
            json!({"error": {"code": "404", "message": "Resource not found"}}).to_string(),
        ));
    }
    Ok(())
}

/// Azure's status and body for a fault's error. Azure has no 529: an
/// overloaded deployment answers 503.
pub fn error(kind: ErrorKind) -> (u16, String) {
    let (status, code, message) = match kind {
        ErrorKind::RateLimit => (
            429,
            json!("429"),
            "Requests to the ChatCompletions_Create Operation under Azure OpenAI API version 2024-10-21 have exceeded token rate limit of your current OpenAI S0 pricing tier. Please retry after 2 seconds. Please go here: https://aka.ms/oai/quotaincrease if you would like to further increase the default rate limit.",
        ),
        ErrorKind::Server500 => (
            500,
            json!("InternalServerError"),
            "The service is temporarily unable to process your request. Please try again later.",
        ),
        ErrorKind::Unavailable503 | ErrorKind::Overloaded529 => (
            503,
            json!("ServiceUnavailable"),
            "The service is temporarily unavailable. Please try again later.",
        ),
        ErrorKind::ContextOverflow => (
            400,
            json!("context_length_exceeded"),
            "This model's maximum context length is 128000 tokens. However, your messages resulted in 250000 tokens. Please reduce the length of the messages.",
        ),
        ErrorKind::ContentFilter => return (400, content_filter_body()),
        ErrorKind::Auth => {
            return (
                401,
                json!({"error": {"code": "401", "message": "Access denied due to invalid subscription key or wrong API endpoint. Make sure to provide a valid key for an active subscription and use a correct regional API endpoint for your resource."}}).to_string(),
            );
        }
        ErrorKind::NoPrefill => (
            400,
            json!(null),
            "assistant message prefill is not supported: the last message must be from the user",
        ),
    };
    let body = json!({"error": {"code": code, "message": message, "param": null, "type": null, "status": status}});
    (status, body.to_string())
}

/// Azure's 400 when its content filter blocks the prompt.
fn content_filter_body() -> String {
    json!({"error": {
        "message": "The response was filtered due to the prompt triggering Azure OpenAI's content management policy. Please modify your prompt and retry. To learn more about our content filtering policies please read our documentation: https://go.microsoft.com/fwlink/?linkid=2198766",
        "type": null,
        "param": "prompt",
        "code": "content_filter",
        "status": 400,
        "innererror": {
            "code": "ResponsibleAIPolicyViolation",
            "content_filter_result": {
                "hate": {"filtered": false, "severity": "safe"},
                "jailbreak": {"filtered": false, "detected": false},
                "self_harm": {"filtered": false, "severity": "safe"},
                "sexual": {"filtered": false, "severity": "safe"},
                "violence": {"filtered": true, "severity": "medium"},
            },
        },
    }})
    .to_string()
}

/// Azure's retry headers for a 429 that says how long: `retry-after`
/// (seconds) and the same in milliseconds as `retry-after-ms` and
/// `x-ms-retry-after-ms`.
pub fn retry_headers(h: &mut HeaderMap, secs: u64) {
    h.insert("retry-after", HeaderValue::from(secs));
    let ms = HeaderValue::from(secs.saturating_mul(1000));
    h.insert("retry-after-ms", ms.clone());
    h.insert("x-ms-retry-after-ms", ms);
}

fn safe_results() -> Value {
    json!({
        "hate": {"filtered": false, "severity": "safe"},
        "self_harm": {"filtered": false, "severity": "safe"},
        "sexual": {"filtered": false, "severity": "safe"},
        "violence": {"filtered": false, "severity": "safe"},
    })
}

/// The chunk Azure sends before a Chat Completions stream's answer: the
/// prompt's filter results, no id, no choices.
pub fn prompt_filter_frame() -> Bytes {
    let chunk = json!({
        "choices": [], "created": 0, "id": "", "model": "", "object": "",
        "prompt_filter_results": [{"prompt_index": 0, "content_filter_results": safe_results()}],
    });
    crate::frame::sse_data(&chunk)
}

/// A complete Chat Completions answer with Azure's filter results added
/// (`prompt_filter_results`, each choice's `content_filter_results`); a
/// body that is not such an answer is returned as it is.
pub fn annotate_full(body: String) -> String {
    let Ok(mut v) = serde_json::from_str::<Value>(&body) else {
        return body;
    };
    let Some(obj) = v.as_object_mut() else {
        return body;
    };
    if let Some(Value::Array(choices)) = obj.get_mut("choices") {
        for c in choices.iter_mut().filter_map(Value::as_object_mut) {
            c.insert("content_filter_results".into(), safe_results());
        }
    }
    obj.insert(
        "prompt_filter_results".into(),
        json!([{"prompt_index": 0, "content_filter_results": safe_results()}]),
    );
    v.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_and_api_version_are_checked() {
        let mut key = HeaderMap::new();
        key.insert("api-key", HeaderValue::from_static("k1"));
        let mut bearer = HeaderMap::new();
        bearer.insert("authorization", HeaderValue::from_static("Bearer k1"));
        let none = HeaderMap::new();
        let v = Some("api-version=2024-10-21");
        assert_eq!(admit(&key, v, true, Some("k1")), Ok(()));
        assert_eq!(admit(&bearer, v, true, Some("k1")), Ok(()));
        assert_eq!(admit(&key, v, true, None), Ok(()));
        assert_eq!(admit(&key, None, false, None), Ok(()));
        assert_eq!(admit(&key, v, true, Some("k2")).map_err(|e| e.0), Err(401));
        assert_eq!(admit(&none, v, true, None).map_err(|e| e.0), Err(401));
        assert_eq!(admit(&key, None, true, None).map_err(|e| e.0), Err(404));
        assert_eq!(
            admit(&key, Some("api-version="), true, None).map_err(|e| e.0),
            Err(404)
        );
    }
}
