//! The rules for Google's Generative Language API (`kind: gemini`): what a
//! Gemini `finishReason` and `promptFeedback.blockReason` mean, and how long
//! a `RetryInfo` detail asks a caller to wait.
//!
//! Google reports a safety block not as an error status but inside a 200:
//! the prompt's `promptFeedback.blockReason`, or a candidate's
//! `finishReason` (`SAFETY`, `RECITATION`, `PROHIBITED_CONTENT`,
//! `BLOCKLIST`, `SPII`, `IMAGE_SAFETY`). hale answers those as the
//! content-filter class ([`ErrorClass::ContentPolicy`]), final for the
//! caller as any provider's content filter is; a function call the model
//! could not form (`MALFORMED_FUNCTION_CALL`, …) is a format failure, which
//! moves on to the next target. Google's error statuses (`RESOURCE_EXHAUSTED`,
//! `UNAVAILABLE`, `DEADLINE_EXCEEDED`, `INVALID_ARGUMENT`, …) are read by the
//! one classifier ([`crate::classify`]), which asks [`retry_delay`] here for
//! the wait of a `RetryInfo` detail.
//!
//! Gemini is also a client dialect (agents calling hale the way they call
//! Google): [`client_action`] reads a `models/{model}:{action}` segment,
//! [`stream_form`] the `alt` of a stream request, and [`google_status`]
//! names hale's own HTTP statuses as Google does in its error shape.
//!
//! The URL of an attempt at a `kind: gemini` provider names the model
//! ([`path`]): one encoded path segment, as [`crate::segment`] rules.

use crate::class::ErrorClass;
use crate::segment::{self, Refusal, Segment};
use std::time::Duration;

/// The longest provider-given reason kept in an [`AnswerFailure`], in chars.
pub const MAX_REASON_CHARS: usize = 64;

/// What a Gemini answer that is no answer stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnswerFailure {
    pub class: ErrorClass,
    /// The `blockReason` or `finishReason`, at most [`MAX_REASON_CHARS`].
    pub reason: String,
    /// What happened, for the caller (names the reason).
    pub message: String,
}

/// The type URL suffix of Google's `RetryInfo` error detail.
const RETRY_INFO: &str = "google.rpc.RetryInfo";

/// The longest wait a `retryDelay` is believed for (a larger one is capped).
pub const MAX_RETRY_DELAY: Duration = Duration::from_secs(3600);

/// What a candidate's `finishReason` means for the turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finish {
    /// The answer ended normally (`STOP`, `LANGUAGE`, `OTHER`, unknown reasons).
    Stop,
    /// The output limit was reached (`MAX_TOKENS`).
    MaxTokens,
    /// A safety or policy filter withheld the answer.
    Blocked,
    /// The model produced something unusable (a malformed or unexpected
    /// function call, too many calls).
    Failed,
}

/// The meaning of a Gemini `finishReason`. An unknown reason ends the turn
/// normally, as an unknown Anthropic `stop_reason` does: a new reason should
/// not fail answers that carry content.
pub fn finish_of(reason: &str) -> Finish {
    match reason {
        "STOP" | "LANGUAGE" | "OTHER" | "FINISH_REASON_UNSPECIFIED" => Finish::Stop,
        "MAX_TOKENS" => Finish::MaxTokens,
        "SAFETY"
        | "RECITATION"
        | "PROHIBITED_CONTENT"
        | "BLOCKLIST"
        | "SPII"
        | "IMAGE_SAFETY"
        | "IMAGE_PROHIBITED_CONTENT"
        | "IMAGE_RECITATION" => Finish::Blocked,
        "MALFORMED_FUNCTION_CALL" | "UNEXPECTED_TOOL_CALL" | "TOO_MANY_TOOL_CALLS" => {
            Finish::Failed
        }
        // Explicitly: reasons Google adds later end the turn normally.
        _unknown => Finish::Stop,
    }
}

/// The failure a Gemini answer stands for, if any: a prompt blocked by
/// `promptFeedback.blockReason` (any reason but the unspecified one), or a
/// candidate finished by a block or a failure ([`finish_of`]).
pub fn answer_failure(
    block_reason: Option<&str>,
    finish_reason: Option<&str>,
) -> Option<AnswerFailure> {
    let failed = |class: ErrorClass, reason: &str, what: &str, field: &str| {
        let reason: String = reason.chars().take(MAX_REASON_CHARS).collect();
        AnswerFailure {
            class,
            message: format!("{what} ({field} {reason})"),
            reason,
        }
    };
    const BLOCKED: &str = "blocked by the provider's content filter";
    if let Some(b) = block_reason.filter(|b| !b.is_empty() && *b != "BLOCK_REASON_UNSPECIFIED") {
        return Some(failed(
            ErrorClass::ContentPolicy,
            b,
            &format!("the prompt was {BLOCKED}"),
            "blockReason",
        ));
    }
    let reason = finish_reason?;
    match finish_of(reason) {
        Finish::Stop | Finish::MaxTokens => None,
        Finish::Blocked => Some(failed(
            ErrorClass::ContentPolicy,
            reason,
            &format!("the answer was {BLOCKED}"),
            "finishReason",
        )),
        Finish::Failed => Some(failed(
            ErrorClass::Format,
            reason,
            "the model's answer was unusable",
            "finishReason",
        )),
    }
}

/// The wait of a `RetryInfo` detail among Google's error `details`
/// (`{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "12s"}`):
/// a protobuf duration, seconds with an optional fraction and an `s`.
/// Capped at [`MAX_RETRY_DELAY`]; `None` when there is none or it does not read.
pub fn retry_delay(details: &serde_json::Value) -> Option<Duration> {
    let items = details.as_array()?;
    items.iter().find_map(|d| {
        let ty = d.get("@type")?.as_str()?;
        if !ty.ends_with(RETRY_INFO) {
            return None;
        }
        parse_duration(d.get("retryDelay")?.as_str()?)
    })
}

/// A protobuf JSON duration (`"12s"`, `"0.5s"`, `"1.000340012s"`), capped.
fn parse_duration(s: &str) -> Option<Duration> {
    let secs: f64 = s.trim().strip_suffix('s')?.parse().ok()?;
    if !secs.is_finite() || secs < 0.0 {
        return None;
    }
    Some(Duration::from_secs_f64(
        secs.min(MAX_RETRY_DELAY.as_secs_f64()),
    ))
}

/// What a Gemini client asks of a model, the part of the URL's last segment
/// after its last `:` (`models/{model}:{action}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAction {
    /// `:generateContent`: one complete answer.
    Generate,
    /// `:streamGenerateContent`: the answer as a stream.
    StreamGenerate,
    /// `:countTokens`: the request's size in tokens.
    CountTokens,
}

/// The model and action of a `{model}:{action}` path segment, split on the
/// last `:` (a model name may hold one, an action never does); `None` when
/// there is no `:`, the model is empty or the action is not one hale serves.
pub fn client_action(segment: &str) -> Option<(&str, ClientAction)> {
    let (model, action) = segment.rsplit_once(':')?;
    if model.is_empty() {
        return None;
    }
    let action = match action {
        "generateContent" => ClientAction::Generate,
        "streamGenerateContent" => ClientAction::StreamGenerate,
        "countTokens" => ClientAction::CountTokens,
        _other => return None,
    };
    Some((model, action))
}

/// How a Gemini client asked for its stream: `alt=sse` (server-sent
/// events), or Google's default, one JSON array written as it grows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamForm {
    Sse,
    JsonArray,
}

/// The stream form a `streamGenerateContent` query asks for: `alt=sse` is
/// SSE; no `alt` (or `alt=json`) is the JSON array; any other `alt` is
/// `Err` with the value.
pub fn stream_form(alt: Option<&str>) -> Result<StreamForm, String> {
    match alt {
        Some("sse") => Ok(StreamForm::Sse),
        None | Some("json") => Ok(StreamForm::JsonArray),
        Some(other) => Err(other.chars().take(MAX_REASON_CHARS).collect()),
    }
}

/// Whether a request on a path both dialects share (`GET /v1/models`) is
/// a Google client's: it carries `x-goog-api-key`, a `key=` query
/// parameter or Google's SDK header `x-goog-api-client`. OpenAI clients
/// send none of them.
pub fn is_google_client(goog_api_key: bool, query_key: bool, goog_api_client: bool) -> bool {
    goog_api_key || query_key || goog_api_client
}

/// Google's status name (`google.rpc.Code`) of an HTTP status hale answers
/// a Gemini client with, as Google's own API pairs them: 400
/// `INVALID_ARGUMENT`, 401 `UNAUTHENTICATED`, 402 (a budget) and 429
/// `RESOURCE_EXHAUSTED`, 403 `PERMISSION_DENIED`, 404 `NOT_FOUND`, 409 (a
/// guard's stop) and 423 (a paused agent) `FAILED_PRECONDITION`, 503
/// `UNAVAILABLE`, 504 `DEADLINE_EXCEEDED`, …
pub fn google_status(http: u16) -> &'static str {
    match http {
        400 | 411 | 413 | 415 | 422 => "INVALID_ARGUMENT",
        401 => "UNAUTHENTICATED",
        402 | 429 => "RESOURCE_EXHAUSTED",
        403 => "PERMISSION_DENIED",
        404 => "NOT_FOUND",
        405 | 501 => "UNIMPLEMENTED",
        408 | 504 => "DEADLINE_EXCEEDED",
        409 | 412 | 423 | 428 => "FAILED_PRECONDITION",
        499 => "CANCELLED",
        503 | 502 => "UNAVAILABLE",
        500 => "INTERNAL",
        // Explicitly: other 4xx are the caller's, other 5xx hale's.
        s if (400..500).contains(&s) => "FAILED_PRECONDITION",
        _other => "INTERNAL",
    }
}

/// The path after a `kind: gemini` provider's `base_url` of an attempt at
/// `model`: `/models/{model}:generateContent`, or
/// `:streamGenerateContent?alt=sse` for a stream. A `models/` prefix, as
/// Google lists models, is taken off; the rest is one encoded path segment,
/// refused when empty or with a dot part ([`crate::segment`]).
pub fn path(model: &str, stream: bool) -> Result<String, Refusal> {
    if let Some(r) = segment::problem(model) {
        return Err(r);
    }
    let m = Segment::new(model.strip_prefix("models/").unwrap_or(model))?;
    Ok(match stream {
        true => format!("/models/{m}:streamGenerateContent?alt=sse"),
        false => format!("/models/{m}:generateContent"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn finish_reasons() {
        for (reason, want) in [
            ("STOP", Finish::Stop),
            ("LANGUAGE", Finish::Stop),
            ("OTHER", Finish::Stop),
            ("FINISH_REASON_UNSPECIFIED", Finish::Stop),
            ("SOMETHING_NEW", Finish::Stop),
            ("MAX_TOKENS", Finish::MaxTokens),
            ("SAFETY", Finish::Blocked),
            ("RECITATION", Finish::Blocked),
            ("PROHIBITED_CONTENT", Finish::Blocked),
            ("BLOCKLIST", Finish::Blocked),
            ("SPII", Finish::Blocked),
            ("IMAGE_SAFETY", Finish::Blocked),
            ("MALFORMED_FUNCTION_CALL", Finish::Failed),
            ("UNEXPECTED_TOOL_CALL", Finish::Failed),
            ("TOO_MANY_TOOL_CALLS", Finish::Failed),
        ] {
            assert_eq!(finish_of(reason), want, "{reason}");
        }
    }

    #[test]
    fn answer_failures() {
        use ErrorClass as C;
        for (block, finish, want) in [
            (None, None, None),
            (None, Some("STOP"), None),
            (None, Some("MAX_TOKENS"), None),
            (Some("BLOCK_REASON_UNSPECIFIED"), Some("STOP"), None),
            (Some(""), None, None),
            (Some("SAFETY"), None, Some(C::ContentPolicy)),
            (Some("PROHIBITED_CONTENT"), None, Some(C::ContentPolicy)),
            (Some("OTHER"), Some("STOP"), Some(C::ContentPolicy)),
            (None, Some("SAFETY"), Some(C::ContentPolicy)),
            (None, Some("RECITATION"), Some(C::ContentPolicy)),
            (None, Some("SPII"), Some(C::ContentPolicy)),
            (None, Some("BLOCKLIST"), Some(C::ContentPolicy)),
            (None, Some("MALFORMED_FUNCTION_CALL"), Some(C::Format)),
        ] {
            let got = answer_failure(block, finish).map(|c| c.class);
            assert_eq!(got, want, "{block:?} {finish:?}");
        }
        let c = answer_failure(None, Some("SAFETY")).expect("a block");
        assert_eq!(c.reason, "SAFETY");
        assert!(c.message.contains("(finishReason SAFETY)"), "{}", c.message);
        let long = "X".repeat(1000);
        let c = answer_failure(Some(&long), None).expect("a block");
        assert_eq!(c.reason.chars().count(), MAX_REASON_CHARS);
    }

    #[test]
    fn retry_delays() {
        let info = |d: &str| {
            json!([
                {"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": []},
                {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": d},
            ])
        };
        assert_eq!(retry_delay(&info("12s")), Some(Duration::from_secs(12)));
        assert_eq!(retry_delay(&info("0.5s")), Some(Duration::from_millis(500)));
        assert_eq!(retry_delay(&info("86400s")), Some(MAX_RETRY_DELAY));
        assert_eq!(retry_delay(&info("12")), None);
        assert_eq!(retry_delay(&info("-1s")), None);
        assert_eq!(retry_delay(&info("soon")), None);
        assert_eq!(retry_delay(&json!([])), None);
        assert_eq!(retry_delay(&json!({"retryDelay": "3s"})), None);
        assert_eq!(
            retry_delay(
                &json!([{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "retryDelay": "3s"}])
            ),
            None
        );
    }

    #[test]
    fn client_actions_split_on_the_last_colon() {
        use ClientAction as A;
        for (seg, want) in [
            (
                "gemini-2.5-flash:generateContent",
                Some(("gemini-2.5-flash", A::Generate)),
            ),
            ("m:streamGenerateContent", Some(("m", A::StreamGenerate))),
            ("m:countTokens", Some(("m", A::CountTokens))),
            (
                "ft:my:model:generateContent",
                Some(("ft:my:model", A::Generate)),
            ),
            ("m:embedContent", None),
            ("m:", None),
            (":generateContent", None),
            ("gemini-2.5-flash", None),
            ("", None),
        ] {
            assert_eq!(client_action(seg), want, "{seg}");
        }
    }

    #[test]
    fn a_google_client_is_told_by_its_key_or_sdk_header() {
        for (k, q, c, want) in [
            (false, false, false, false),
            (true, false, false, true),
            (false, true, false, true),
            (false, false, true, true),
            (true, true, true, true),
        ] {
            assert_eq!(is_google_client(k, q, c), want, "{k} {q} {c}");
        }
    }

    #[test]
    fn stream_forms_and_google_statuses() {
        assert_eq!(stream_form(Some("sse")), Ok(StreamForm::Sse));
        assert_eq!(stream_form(None), Ok(StreamForm::JsonArray));
        assert_eq!(stream_form(Some("json")), Ok(StreamForm::JsonArray));
        assert_eq!(stream_form(Some("proto")), Err("proto".to_owned()));
        for (http, want) in [
            (400, "INVALID_ARGUMENT"),
            (401, "UNAUTHENTICATED"),
            (402, "RESOURCE_EXHAUSTED"),
            (403, "PERMISSION_DENIED"),
            (404, "NOT_FOUND"),
            (405, "UNIMPLEMENTED"),
            (409, "FAILED_PRECONDITION"),
            (413, "INVALID_ARGUMENT"),
            (422, "INVALID_ARGUMENT"),
            (423, "FAILED_PRECONDITION"),
            (429, "RESOURCE_EXHAUSTED"),
            (418, "FAILED_PRECONDITION"),
            (500, "INTERNAL"),
            (502, "UNAVAILABLE"),
            (503, "UNAVAILABLE"),
            (504, "DEADLINE_EXCEEDED"),
            (599, "INTERNAL"),
        ] {
            assert_eq!(google_status(http), want, "{http}");
        }
    }

    /// The model is one encoded segment (docs/operations.md, "Threat model"): a `models/` prefix
    /// taken off, `/`, `?` and `#` escaped, dot parts and an empty name refused.
    #[test]
    fn attempt_paths() {
        for (model, stream, want) in [
            (
                "gemini-2.5-flash",
                false,
                Ok("/models/gemini-2.5-flash:generateContent"),
            ),
            (
                "models/gemini-2.5-flash",
                true,
                Ok("/models/gemini-2.5-flash:streamGenerateContent?alt=sse"),
            ),
            (
                "tool:name=f",
                false,
                Ok("/models/tool%3Aname%3Df:generateContent"),
            ),
            (
                "x?key=k#",
                false,
                Ok("/models/x%3Fkey%3Dk%23:generateContent"),
            ),
            ("a/b", false, Ok("/models/a%2Fb:generateContent")),
            ("..", false, Err(Refusal::DotPart)),
            ("models/..", false, Err(Refusal::DotPart)),
            ("models/", false, Err(Refusal::Empty)),
            ("", true, Err(Refusal::Empty)),
        ] {
            assert_eq!(path(model, stream), want.map(str::to_owned), "{model}");
        }
    }
}
