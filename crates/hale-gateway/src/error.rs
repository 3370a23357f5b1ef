//! hale's own error responses.
//!
//! Errors become responses only here, at the edge: the OpenAI error shape (or
//! Anthropic's, for `/v1/messages` callers, or Google's, with its status
//! names, for Gemini callers) with hale's detail beside it —
//! `{"error": {"type", "message", "hale": {turn_id, agent, timeline}}}`.
//! Errors no handler made (an unknown route, a wrong method, a body over the
//! limit, an extractor's rejection) are given the same shape by
//! the HTTP edge (`api/edge.rs`) through [`HaleError::from_status`].

use crate::upstream::Failure;
use axum::body::Body;
use axum::http::{HeaderValue, StatusCode};
use axum::response::Response;
use hale_core::class::ErrorClass;
use hale_proto::Dialect;

/// An error hale returns to a caller.
#[derive(Debug, Clone)]
pub struct HaleError {
    pub status: StatusCode,
    /// Low-cardinality type, e.g. `agent_paused`.
    pub kind: &'static str,
    pub message: String,
    pub hale: serde_json::Value,
    pub turn_id: Option<String>,
    /// Attempts made, for the `x-hale-attempts` evidence header.
    pub attempts: Option<usize>,
}

impl HaleError {
    pub fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            kind,
            message: message.into(),
            hale: serde_json::json!({}),
            turn_id: None,
            attempts: None,
        }
    }
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request_error", message)
    }
    pub fn unauthorized() -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "missing or unknown API key",
        )
    }
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, "forbidden", message)
    }
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", message)
    }
    /// A request body over `limits.max_request_bytes`.
    pub fn request_too_large(limit: u64) -> Self {
        Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "request_too_large",
            format!("the request body is larger than {limit} bytes (limits.max_request_bytes)"),
        )
    }
    /// An `Idempotency-Key` already used for a request with another body
    /// (Stripe's rule: a key names one request).
    pub fn idempotency_key_reused() -> Self {
        Self::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "idempotency_key_reused",
            "this Idempotency-Key was already used for a request with a different body; use a new key for a new request",
        )
    }
    /// A request header hale refuses, named in the message.
    pub fn bad_header(name: &str, problem: impl std::fmt::Display) -> Self {
        Self::bad_request(format!("header {name} {problem}"))
    }
    /// An error of `status` that no handler shaped (a framework rejection),
    /// with its type derived from the status.
    pub fn from_status(status: StatusCode, message: impl Into<String>) -> Self {
        let kind = match status.as_u16() {
            400 | 422 => "invalid_request_error",
            401 => "unauthorized",
            403 => "forbidden",
            404 => "not_found",
            405 => "method_not_allowed",
            408 => "request_timeout",
            413 => "request_too_large",
            415 => "unsupported_media_type",
            s if s >= 500 => "internal_error",
            _ => "invalid_request_error",
        };
        Self::new(status, kind, message)
    }
    pub fn agent_paused(
        agent: &str,
        failures: u32,
        by: hale_core::pause::PausedBy,
        next_trial_in_ms: Option<u64>,
    ) -> Self {
        let why = match by {
            hale_core::pause::PausedBy::Auto => format!(
                "agent {agent} is paused after {failures} consecutive failed turns; hale lets a trial request through in {} ms and resumes it when that succeeds",
                next_trial_in_ms.unwrap_or(0)
            ),
            hale_core::pause::PausedBy::Operator => {
                format!("agent {agent} was paused by an operator")
            }
        };
        let mut e = Self::new(
            StatusCode::LOCKED,
            "agent_paused",
            format!("{why}; resume it now with POST /agents/{agent}/resume"),
        );
        e.hale = serde_json::json!({"agent": agent, "paused_by": by, "next_trial_in_ms": next_trial_in_ms});
        e
    }

    /// The HTTP status hale answers a turn that failed with `f`
    /// ([`HaleError::from_failure`]'s); a stream that broke past repair
    /// names it in its in-band error.
    pub fn failure_status(f: &Failure) -> StatusCode {
        Self::from_failure("", "", serde_json::Value::Null, 0, f).status
    }

    /// The response for a turn whose attempt loop gave up with `f`.
    pub fn from_failure(
        turn_id: &str,
        agent: &str,
        timeline: serde_json::Value,
        attempts: usize,
        f: &Failure,
    ) -> Self {
        let (status, kind, message) = match f.class {
            ErrorClass::ContentPolicy => (
                StatusCode::BAD_REQUEST,
                "content_policy",
                format!("refused by the provider's content policy: {}", f.message),
            ),
            ErrorClass::BadRequest => (
                StatusCode::from_u16(f.status.unwrap_or(400)).unwrap_or(StatusCode::BAD_REQUEST),
                "invalid_request_error",
                f.message.clone(),
            ),
            ErrorClass::ContextOverflow => (
                StatusCode::BAD_REQUEST,
                "context_length_exceeded",
                format!(
                    "the conversation does not fit any target's context window: {}",
                    f.message
                ),
            ),
            ErrorClass::Network
            | ErrorClass::Timeout
            | ErrorClass::RateLimit
            | ErrorClass::Overloaded
            | ErrorClass::StreamBroken
            | ErrorClass::StreamCrawling
            | ErrorClass::Auth
            | ErrorClass::Billing
            | ErrorClass::ModelNotFound
            | ErrorClass::Format
            | ErrorClass::Budget
            | ErrorClass::Safety
            | ErrorClass::Policy
            | ErrorClass::Unknown => (
                StatusCode::SERVICE_UNAVAILABLE,
                "all_providers_failed",
                format!("every target failed; last: {} ({})", f.class, f.message),
            ),
        };
        let mut e = Self::new(status, kind, message);
        e.hale = serde_json::json!({
            "turn_id": turn_id,
            "agent": agent,
            "class": f.class,
            "timeline": timeline,
        });
        e.turn_id = Some(turn_id.to_owned());
        e.attempts = Some(attempts);
        e
    }

    /// Renders in the caller's dialect.
    pub fn into_response(self, dialect: Dialect) -> Response {
        let body = crate::wire::render_error(
            dialect,
            self.status.as_u16(),
            self.kind,
            &self.message,
            self.hale,
        );
        let mut resp = Response::new(Body::from(serde_json::to_vec(&body).unwrap_or_default()));
        *resp.status_mut() = self.status;
        resp.headers_mut()
            .insert("content-type", HeaderValue::from_static("application/json"));
        if let Some(id) = self
            .turn_id
            .as_deref()
            .and_then(|t| HeaderValue::from_str(t).ok())
        {
            resp.headers_mut().insert("x-hale-turn-id", id);
        }
        if let Some(n) = self.attempts {
            resp.headers_mut()
                .insert("x-hale-attempts", HeaderValue::from(n));
        }
        resp
    }
}
