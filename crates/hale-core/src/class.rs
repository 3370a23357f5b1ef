//! The failure classes (docs/operations.md, "Failure classes").
//!
//! One enum, one row of the error table per variant. Everything downstream
//! (retry, failover, cooldown, breaker accounting, metrics labels) is decided
//! by matching on it exhaustively, so a new class forces a decision everywhere.

use serde::{Deserialize, Serialize};

/// What kind of failure an outcome was.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorClass {
    /// Connection reset/refused before the response, DNS.
    Network,
    /// No response headers within the attempt timeout, or no first token in time.
    Timeout,
    /// 429, "rate limit", quota per minute.
    RateLimit,
    /// 500, 502, 503, 504, 529, "overloaded", "capacity".
    Overloaded,
    /// Stream cut, stalled past the idle timeout, or ended without a finish.
    StreamBroken,
    /// Stream still flowing, far below its deployment's usual rate for long
    /// ([`crate::crawl`]).
    StreamCrawling,
    /// "context length exceeded", "prompt is too long".
    ContextOverflow,
    /// Content filter, safety refusal as an error.
    ContentPolicy,
    /// 401, 403, invalid key.
    Auth,
    /// 402, insufficient credit.
    Billing,
    /// 404 model.
    ModelNotFound,
    /// 400, 422 other than the above.
    BadRequest,
    /// Unparsable or schema-invalid response body.
    Format,
    /// hale's own budget cap.
    Budget,
    /// hale's own safety guard.
    Safety,
    /// hale's own policy (paused agent, terminated task, auth scope).
    Policy,
    /// Anything the classifier could not place; treated cautiously.
    Unknown,
}

impl ErrorClass {
    /// Every class, in table order.
    pub const ALL: [ErrorClass; 17] = [
        ErrorClass::Network,
        ErrorClass::Timeout,
        ErrorClass::RateLimit,
        ErrorClass::Overloaded,
        ErrorClass::StreamBroken,
        ErrorClass::StreamCrawling,
        ErrorClass::ContextOverflow,
        ErrorClass::ContentPolicy,
        ErrorClass::Auth,
        ErrorClass::Billing,
        ErrorClass::ModelNotFound,
        ErrorClass::BadRequest,
        ErrorClass::Format,
        ErrorClass::Budget,
        ErrorClass::Safety,
        ErrorClass::Policy,
        ErrorClass::Unknown,
    ];

    /// A low-cardinality label for metrics, logs and events.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorClass::Network => "network",
            ErrorClass::Timeout => "timeout",
            ErrorClass::RateLimit => "rate_limit",
            ErrorClass::Overloaded => "overloaded",
            ErrorClass::StreamBroken => "stream_broken",
            ErrorClass::StreamCrawling => "stream_crawling",
            ErrorClass::ContextOverflow => "context_overflow",
            ErrorClass::ContentPolicy => "content_policy",
            ErrorClass::Auth => "auth",
            ErrorClass::Billing => "billing",
            ErrorClass::ModelNotFound => "model_not_found",
            ErrorClass::BadRequest => "bad_request",
            ErrorClass::Format => "format",
            ErrorClass::Budget => "budget",
            ErrorClass::Safety => "safety",
            ErrorClass::Policy => "policy",
            ErrorClass::Unknown => "unknown",
        }
    }
}

impl std::fmt::Display for ErrorClass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl ErrorClass {
    /// Whether a turn that ended with this class counts as the agent failing
    /// (towards `max_consecutive_failures`). The caller's own input being
    /// refused (content policy, a malformed request) or hale's own limits do not.
    pub fn counts_as_turn_failure(self) -> bool {
        match self {
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
            | ErrorClass::Unknown => true,
            ErrorClass::ContextOverflow
            | ErrorClass::ContentPolicy
            | ErrorClass::BadRequest
            | ErrorClass::Budget
            | ErrorClass::Safety
            | ErrorClass::Policy => false,
        }
    }
}
