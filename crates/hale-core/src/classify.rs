//! The one classifier (docs/operations.md, "Failure classes"): every provider
//! outcome becomes an [`ErrorClass`], and [`rule`] gives that class's row of
//! the table.
//!
//! Adapters describe what they saw as an [`Observation`] (HTTP status, the
//! raw `Retry-After`, the body text, and what went wrong below HTTP) and call
//! [`classify`]. The classifier reads, in this order:
//!
//! 1. **Transport** — when no error status arrived (no response at all, or a
//!    2xx whose body or stream then failed), the transport failure decides:
//!    reset/refused/DNS, or a complete body cut before hale read it all →
//!    network, no headers or no first token → timeout, a close after a
//!    silence longer than the first-byte expectation → timeout
//!    ([`Transport::after_silence`]),
//!    stream cut/stalled/unfinished → stream_broken, a stream crawling far
//!    below its deployment's usual rate → stream_crawling, malformed body → format.
//!    An error status beats a transport failure: a 502 whose HTML body does
//!    not parse is an overloaded upstream, not a format error.
//! 2. **The body** — OpenAI (`{"error":{"message","type","code","param"}}`),
//!    Anthropic (`{"type":"error","error":{"type","message"}}`) and the usual
//!    variants (`{"error":"…"}`, `{"message":"…"}`, `{"detail":"…"}`, Google's
//!    `status`). A specific `code`/`type` (e.g. `insufficient_quota`,
//!    `context_length_exceeded`) is a *strong* hint; a pattern in the message
//!    text (e.g. "prompt is too long") is a *weak* hint that refines a generic
//!    type such as `invalid_request_error`.
//! 3. **The status** — each status family decides how far a hint may
//!    override it (a 402 is billing whatever it says; a 429 is a rate limit
//!    unless the body says the quota is gone; a 400 is bad_request unless the
//!    body names a context overflow, a content filter, billing, auth or a
//!    missing model).
//!
//! Every decision is an exhaustive `match`: a new status family, hint or
//! transport forces a decision here. What nothing recognises is returned as
//! [`ErrorClass::Unknown`], explicitly.
//!
//! [`transport_of`] maps a client error (hyper-util's, reqwest's) to a [`Transport`]
//! by walking its `source()` chain, as linkerd's `is_caused_by` does: the
//! error itself and up to [`MAX_SOURCE_DEPTH`] causes below it.

use crate::class::ErrorClass;
use std::time::{Duration, SystemTime};

/// How many `source()` levels below the error itself [`transport_of`] looks.
pub const MAX_SOURCE_DEPTH: usize = 5;

/// The longest provider message kept in [`Classified::message`], in chars.
pub const MAX_MESSAGE_CHARS: usize = 1000;

/// What the adapter observed about a failed (or suspicious) attempt.
#[derive(Debug, Clone, Copy)]
pub struct Observation<'a> {
    /// HTTP status if a response arrived.
    pub status: Option<u16>,
    /// Raw `Retry-After` header value.
    pub retry_after: Option<&'a str>,
    /// Raw milliseconds header value: the first of
    /// [`RETRY_AFTER_MS_HEADERS`] present. More precise than
    /// `Retry-After`, it wins over it.
    pub retry_after_ms: Option<&'a str>,
    /// Response body text (error JSON of OpenAI or Anthropic shape, or anything).
    pub body: Option<&'a str>,
    /// What went wrong below HTTP.
    pub transport: Option<Transport>,
    /// Wall time now, for a `Retry-After` given as an HTTP date.
    pub now_wall: SystemTime,
}

impl<'a> Observation<'a> {
    /// An observation with nothing seen yet; fill the fields you have.
    pub fn new(now_wall: SystemTime) -> Self {
        Self {
            status: None,
            retry_after: None,
            retry_after_ms: None,
            body: None,
            transport: None,
            now_wall,
        }
    }
}

/// The millisecond retry headers, in the order they are read: OpenAI's and
/// Azure's `retry-after-ms`, then Azure's `x-ms-retry-after-ms`
/// ([`Observation::retry_after_ms`]).
pub const RETRY_AFTER_MS_HEADERS: [&str; 2] = ["retry-after-ms", "x-ms-retry-after-ms"];

/// What went wrong below HTTP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Transport {
    /// The connection was reset, aborted or closed before the response.
    ConnectReset,
    /// The connection was refused, or the host/network was unreachable.
    ConnectRefused,
    /// The host name did not resolve.
    Dns,
    /// The TLS handshake failed: a certificate not trusted, expired or for
    /// another name, or no protocol version in common. A failure to connect
    /// (it marks the `base_url`); retried as any network failure
    /// is (behind one `base_url`, another node may present a good certificate).
    Tls,
    /// No response headers within the attempt timeout.
    HeadersTimeout,
    /// No first token within `first_token_timeout`.
    FirstTokenTimeout,
    /// The upstream accepted the request, sent not one byte of a response
    /// for longer than the first-byte expectation
    /// ([`ProviderConfig::first_byte_expectation`](crate::config::ProviderConfig::first_byte_expectation))
    /// and then closed the connection. A hung deployment, not a blip: a
    /// timeout that came early ([`Transport::after_silence`] decides).
    SilentHangUp,
    /// The stream was cut mid-way.
    StreamCut,
    /// A complete (non-streaming) response body broke off before its end,
    /// while hale was still reading it: nothing of the answer reached the
    /// caller, so the request can be sent again whole. The connection was
    /// lost before the response was delivered: network (retried on the same
    /// target), unlike a stream cut after content, which is resumed on the
    /// next target.
    BodyCut,
    /// No chunk within `stream_idle_timeout`.
    StreamStalled,
    /// The stream still flows, far below its deployment's usual rate for
    /// long ([`crate::crawl::CrawlWatch`]): resumed as a cut stream is, but
    /// a class of its own ([`ErrorClass::StreamCrawling`]).
    StreamCrawling,
    /// The stream ended without a finish (`[DONE]`/`message_stop`).
    StreamEndedWithoutFinish,
    /// The body (or a chunk) could not be parsed.
    MalformedBody,
    /// Something else; classified by status and body if any, else unknown.
    Other,
}

impl Transport {
    /// A low-cardinality label, also used as the message when there is no body.
    pub fn as_str(self) -> &'static str {
        match self {
            Transport::ConnectReset => "connection reset",
            Transport::ConnectRefused => "connection refused",
            Transport::Dns => "dns error",
            Transport::Tls => "tls handshake failed",
            Transport::HeadersTimeout => "no response headers within the timeout",
            Transport::FirstTokenTimeout => "no first token within the timeout",
            Transport::SilentHangUp => "connection closed after a silence, with no response",
            Transport::StreamCut => "stream cut",
            Transport::BodyCut => "response body cut before its end",
            Transport::StreamStalled => "stream stalled",
            Transport::StreamCrawling => "stream crawling",
            Transport::StreamEndedWithoutFinish => "stream ended without finish",
            Transport::MalformedBody => "malformed body",
            Transport::Other => "transport error",
        }
    }

    /// The connection could not be made at all: such a failure marks every
    /// deployment on the same `base_url`, not only the one called.
    pub fn failed_to_connect(self) -> bool {
        match self {
            Transport::ConnectRefused | Transport::Dns | Transport::Tls => true,
            Transport::ConnectReset
            | Transport::HeadersTimeout
            | Transport::FirstTokenTimeout
            | Transport::SilentHangUp
            | Transport::StreamCut
            | Transport::BodyCut
            | Transport::StreamStalled
            | Transport::StreamCrawling
            | Transport::StreamEndedWithoutFinish
            | Transport::MalformedBody
            | Transport::Other => false,
        }
    }

    /// Whether the label alone leaves out what an operator needs — which
    /// certificate check failed, what the unrecognised error was — so the
    /// failure's message adds the error's own cause chain.
    pub fn needs_detail(self) -> bool {
        match self {
            Transport::Tls | Transport::Other => true,
            Transport::ConnectReset
            | Transport::ConnectRefused
            | Transport::Dns
            | Transport::HeadersTimeout
            | Transport::FirstTokenTimeout
            | Transport::SilentHangUp
            | Transport::StreamCut
            | Transport::BodyCut
            | Transport::StreamStalled
            | Transport::StreamCrawling
            | Transport::StreamEndedWithoutFinish
            | Transport::MalformedBody => false,
        }
    }

    /// The class a transport failure implies on its own; `None` for [`Transport::Other`].
    pub fn class(self) -> Option<ErrorClass> {
        match self {
            Transport::ConnectReset
            | Transport::ConnectRefused
            | Transport::Dns
            | Transport::Tls
            | Transport::BodyCut => Some(ErrorClass::Network),
            Transport::HeadersTimeout | Transport::FirstTokenTimeout | Transport::SilentHangUp => {
                Some(ErrorClass::Timeout)
            }
            Transport::StreamCut
            | Transport::StreamStalled
            | Transport::StreamEndedWithoutFinish => Some(ErrorClass::StreamBroken),
            Transport::StreamCrawling => Some(ErrorClass::StreamCrawling),
            Transport::MalformedBody => Some(ErrorClass::Format),
            Transport::Other => None,
        }
    }

    /// What a failure *before any response byte* was, given how long the
    /// upstream was silent first (`silent_for`, from sending the request to
    /// the failure) and how long a healthy upstream takes to start answering
    /// (`expectation`, [`ProviderConfig::first_byte_expectation`](crate::config::ProviderConfig::first_byte_expectation)).
    ///
    /// A connection closed (reset, or an unexpected end) after a silence
    /// *longer* than the expectation is [`Transport::SilentHangUp`]: the
    /// upstream hung and something (the provider, a proxy's idle timer) hung
    /// up on it, so asking the same deployment again costs another silence.
    /// It is classified like the timeout it pre-empted (move on at once,
    /// counted against the breaker and toward ejection). A close within the
    /// expectation stays what it was: a blip, retried on the same target.
    /// Every other failure is unchanged whatever the time.
    pub fn after_silence(self, silent_for: Duration, expectation: Duration) -> Transport {
        match self {
            Transport::ConnectReset | Transport::StreamCut => {
                if silent_for > expectation {
                    Transport::SilentHangUp
                } else {
                    self
                }
            }
            Transport::ConnectRefused
            | Transport::Dns
            | Transport::Tls
            | Transport::HeadersTimeout
            | Transport::FirstTokenTimeout
            | Transport::SilentHangUp
            | Transport::BodyCut
            | Transport::StreamStalled
            | Transport::StreamCrawling
            | Transport::StreamEndedWithoutFinish
            | Transport::MalformedBody
            | Transport::Other => self,
        }
    }
}

/// The classifier's verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Classified {
    pub class: ErrorClass,
    /// From the `Retry-After` header, else from a "try again in 20s" message.
    pub retry_after: Option<Duration>,
    /// The provider's error code (or type), e.g. `insufficient_quota`.
    pub code: Option<String>,
    /// The provider's reason/message (e.g. the content-filter reason), or a
    /// description of the transport failure. Built from the body only — never
    /// from request headers — with key-like tokens redacted and truncated to
    /// [`MAX_MESSAGE_CHARS`].
    pub message: String,
}

/// The Responses API's error code for a `previous_response_id` it does not hold.
pub const PREVIOUS_RESPONSE_NOT_FOUND: &str = "previous_response_not_found";

/// Classify one outcome. Never panics, whatever the body holds.
pub fn classify(obs: &Observation<'_>) -> Classified {
    let body = obs.body.map(BodyInfo::parse);
    let hint = body.as_ref().map(BodyInfo::hint).unwrap_or(Hint::NOTHING);
    let mentions_model = body
        .as_ref()
        .is_some_and(|b| b.text_lower.contains("model"));
    let body_unparsable = body.as_ref().is_some_and(|b| !b.is_json);

    let status_kind = obs.status.map(StatusKind::of);
    let transport_class = obs.transport.and_then(Transport::class);

    let (class, by_transport) = match (status_kind, transport_class) {
        // No error status: the transport failure decides when it names one.
        (None | Some(StatusKind::Success), Some(c)) => (c, true),
        (None, None) => (class_without_status(hint), false),
        (Some(kind), Some(_) | None) => (
            class_for_status(kind, hint, mentions_model, body_unparsable),
            false,
        ),
    };

    // A Responses turn continuing a response the provider does not hold
    // (OpenAI's 404 `previous_response_not_found`) is the caller's request,
    // refused as such: no other deployment holds it either (hale sends an
    // id it keeps expanded), so it is final, with the provider's 404.
    let class = if obs.status == Some(404)
        && body.as_ref().and_then(|b| b.code.as_deref()) == Some(PREVIOUS_RESPONSE_NOT_FOUND)
    {
        ErrorClass::BadRequest
    } else {
        class
    };

    let mut retry_after = obs
        .retry_after_ms
        .and_then(parse_retry_after_ms)
        .or_else(|| {
            obs.retry_after
                .and_then(|v| parse_retry_after(v, obs.now_wall))
        });
    if retry_after.is_none() {
        retry_after = body.as_ref().and_then(|b| b.retry_delay);
    }
    if retry_after.is_none() {
        retry_after = body
            .as_ref()
            .and_then(|b| parse_try_again_in(&b.text_lower));
    }

    let code = body
        .as_ref()
        .and_then(|b| b.code.clone().or_else(|| b.kind.clone()));
    let message = match (&body, obs.transport, obs.status) {
        (_, Some(t), _) if by_transport => t.as_str().to_owned(),
        (Some(b), _, _) if !b.message.is_empty() => b.message.clone(),
        (_, Some(t), _) => t.as_str().to_owned(),
        (_, None, Some(s)) => format!("HTTP {s}"),
        (_, None, None) => "no response".to_owned(),
    };

    Classified {
        class,
        retry_after,
        code,
        message,
    }
}

/// Status families, so the decision below is an exhaustive match.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StatusKind {
    Informational,
    Success,
    Redirect,
    BadRequest,
    Unauthorized,
    PaymentRequired,
    Forbidden,
    NotFound,
    RequestTimeout,
    Conflict,
    PayloadTooLarge,
    Unprocessable,
    TooManyRequests,
    OtherClient,
    /// 500, 502, 503, 504, 529.
    ServerBusy,
    OtherServer,
    Invalid,
}

impl StatusKind {
    fn of(status: u16) -> Self {
        match status {
            100..=199 => StatusKind::Informational,
            200..=299 => StatusKind::Success,
            300..=399 => StatusKind::Redirect,
            400 => StatusKind::BadRequest,
            401 => StatusKind::Unauthorized,
            402 => StatusKind::PaymentRequired,
            403 => StatusKind::Forbidden,
            404 => StatusKind::NotFound,
            408 => StatusKind::RequestTimeout,
            409 => StatusKind::Conflict,
            413 => StatusKind::PayloadTooLarge,
            422 => StatusKind::Unprocessable,
            429 => StatusKind::TooManyRequests,
            405..=407 | 410..=412 | 414..=421 | 423..=428 | 430..=499 => StatusKind::OtherClient,
            500 | 502 | 503 | 504 | 529 => StatusKind::ServerBusy,
            501 | 505..=528 | 530..=599 => StatusKind::OtherServer,
            0..=99 | 600..=u16::MAX => StatusKind::Invalid,
        }
    }
}

/// What the body suggests, before the status has its say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HintKind {
    ContextOverflow,
    ContentPolicy,
    Billing,
    RateLimit,
    Overloaded,
    Auth,
    ModelNotFound,
    /// The upstream's own deadline ran out (Google's `DEADLINE_EXCEEDED`).
    Timeout,
    /// A generic "not found" (`not_found_error`) that does not say what.
    NotFound,
    /// A generic `invalid_request_error`.
    InvalidRequest,
    Nothing,
}

/// A hint and whether it came from a code/type (strong) or from text (weak).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Hint {
    kind: HintKind,
    strong: bool,
}

impl Hint {
    const NOTHING: Hint = Hint {
        kind: HintKind::Nothing,
        strong: false,
    };

    /// The class a specific hint names; `None` for generic hints and nothing.
    fn specific(self) -> Option<ErrorClass> {
        match self.kind {
            HintKind::ContextOverflow => Some(ErrorClass::ContextOverflow),
            HintKind::ContentPolicy => Some(ErrorClass::ContentPolicy),
            HintKind::Billing => Some(ErrorClass::Billing),
            HintKind::RateLimit => Some(ErrorClass::RateLimit),
            HintKind::Overloaded => Some(ErrorClass::Overloaded),
            HintKind::Auth => Some(ErrorClass::Auth),
            HintKind::ModelNotFound => Some(ErrorClass::ModelNotFound),
            HintKind::Timeout => Some(ErrorClass::Timeout),
            HintKind::NotFound | HintKind::InvalidRequest | HintKind::Nothing => None,
        }
    }

    /// [`Hint::specific`], only when it came from a code or type.
    fn specific_strong(self) -> Option<ErrorClass> {
        if self.strong { self.specific() } else { None }
    }
}

/// No HTTP status and no decisive transport: the body alone decides.
fn class_without_status(hint: Hint) -> ErrorClass {
    match hint.kind {
        HintKind::ContextOverflow
        | HintKind::ContentPolicy
        | HintKind::Billing
        | HintKind::RateLimit
        | HintKind::Overloaded
        | HintKind::Auth
        | HintKind::ModelNotFound
        | HintKind::Timeout => hint.specific().unwrap_or(ErrorClass::Unknown),
        HintKind::InvalidRequest => ErrorClass::BadRequest,
        HintKind::NotFound | HintKind::Nothing => ErrorClass::Unknown,
    }
}

fn class_for_status(
    status: StatusKind,
    hint: Hint,
    mentions_model: bool,
    body_unparsable: bool,
) -> ErrorClass {
    match status {
        // A 2xx that the adapter found suspicious: an error body decides, an
        // unparsable one is a format error, anything else is unknown.
        StatusKind::Success => match hint.kind {
            HintKind::InvalidRequest => ErrorClass::BadRequest,
            HintKind::NotFound | HintKind::Nothing if body_unparsable => ErrorClass::Format,
            HintKind::NotFound | HintKind::Nothing => ErrorClass::Unknown,
            HintKind::ContextOverflow
            | HintKind::ContentPolicy
            | HintKind::Billing
            | HintKind::RateLimit
            | HintKind::Overloaded
            | HintKind::Auth
            | HintKind::ModelNotFound
            | HintKind::Timeout => hint.specific().unwrap_or(ErrorClass::Unknown),
        },
        // 400/422: the caller's fault unless the body names something more precise.
        StatusKind::BadRequest | StatusKind::Unprocessable => match hint.kind {
            HintKind::ContextOverflow
            | HintKind::ContentPolicy
            | HintKind::Billing
            | HintKind::Auth
            | HintKind::ModelNotFound => hint.specific().unwrap_or(ErrorClass::BadRequest),
            // "capacity" or "rate limit" in a 400's text is too weak to retry on.
            HintKind::RateLimit | HintKind::Overloaded | HintKind::Timeout => {
                hint.specific_strong().unwrap_or(ErrorClass::BadRequest)
            }
            HintKind::NotFound | HintKind::InvalidRequest | HintKind::Nothing => {
                ErrorClass::BadRequest
            }
        },
        StatusKind::Unauthorized => match hint.kind {
            HintKind::Billing => hint.specific_strong().unwrap_or(ErrorClass::Auth),
            HintKind::ContextOverflow
            | HintKind::ContentPolicy
            | HintKind::RateLimit
            | HintKind::Overloaded
            | HintKind::Auth
            | HintKind::ModelNotFound
            | HintKind::Timeout
            | HintKind::NotFound
            | HintKind::InvalidRequest
            | HintKind::Nothing => ErrorClass::Auth,
        },
        StatusKind::Forbidden => match hint.kind {
            HintKind::Billing | HintKind::ContentPolicy => {
                hint.specific().unwrap_or(ErrorClass::Auth)
            }
            HintKind::RateLimit => hint.specific_strong().unwrap_or(ErrorClass::Auth),
            HintKind::ContextOverflow
            | HintKind::Overloaded
            | HintKind::Auth
            | HintKind::ModelNotFound
            | HintKind::Timeout
            | HintKind::NotFound
            | HintKind::InvalidRequest
            | HintKind::Nothing => ErrorClass::Auth,
        },
        StatusKind::PaymentRequired => ErrorClass::Billing,
        // A 404 is a missing model when it says so (or names a model at all);
        // a bare 404 (wrong base_url path?) is unknown.
        StatusKind::NotFound => match hint.kind {
            HintKind::ModelNotFound => ErrorClass::ModelNotFound,
            HintKind::ContextOverflow
            | HintKind::ContentPolicy
            | HintKind::Billing
            | HintKind::RateLimit
            | HintKind::Overloaded
            | HintKind::Auth
            | HintKind::Timeout
            | HintKind::NotFound
            | HintKind::InvalidRequest
            | HintKind::Nothing => {
                if mentions_model {
                    ErrorClass::ModelNotFound
                } else {
                    ErrorClass::Unknown
                }
            }
        },
        StatusKind::RequestTimeout => ErrorClass::Timeout,
        // 409 is transient (a lock or in-flight conflict upstream): retry like a 5xx.
        StatusKind::Conflict => hint.specific_strong().unwrap_or(ErrorClass::Overloaded),
        StatusKind::PayloadTooLarge => ErrorClass::ContextOverflow,
        // OpenAI sends `insufficient_quota` as a 429: that quota will not come back in seconds.
        StatusKind::TooManyRequests => match hint.kind {
            HintKind::Billing => ErrorClass::Billing,
            HintKind::ContextOverflow
            | HintKind::ContentPolicy
            | HintKind::RateLimit
            | HintKind::Overloaded
            | HintKind::Auth
            | HintKind::ModelNotFound
            | HintKind::Timeout
            | HintKind::NotFound
            | HintKind::InvalidRequest
            | HintKind::Nothing => ErrorClass::RateLimit,
        },
        // 5xx: overloaded unless a code says precisely otherwise; text on a
        // 5xx (often a proxy's HTML page) is not trusted to override.
        StatusKind::ServerBusy | StatusKind::OtherServer => {
            hint.specific_strong().unwrap_or(ErrorClass::Overloaded)
        }
        StatusKind::OtherClient
        | StatusKind::Informational
        | StatusKind::Redirect
        | StatusKind::Invalid => hint.specific().unwrap_or(ErrorClass::Unknown),
    }
}

/// What the body says, extracted once.
#[derive(Debug)]
struct BodyInfo {
    is_json: bool,
    code: Option<String>,
    kind: Option<String>,
    /// The message for [`Classified::message`] (redacted, truncated).
    message: String,
    /// Lowercased message (or whole body when unparsable) for pattern matching.
    text_lower: String,
    /// Google's `RetryInfo` detail ([`crate::gemini::retry_delay`]).
    retry_delay: Option<Duration>,
}

impl BodyInfo {
    fn parse(body: &str) -> BodyInfo {
        let parsed: Option<serde_json::Value> = serde_json::from_str(body.trim()).ok();
        let Some(v) = parsed else {
            let message = clean_message(body);
            return BodyInfo {
                is_json: false,
                code: None,
                kind: None,
                text_lower: body.to_lowercase(),
                message,
                retry_delay: None,
            };
        };
        let err = v.get("error");
        let (code, kind, message) = match err {
            Some(serde_json::Value::Object(e)) => (
                e.get("code")
                    .and_then(scalar_string)
                    .or_else(|| azure_inner_code(e)),
                e.get("type")
                    .and_then(scalar_string)
                    .or_else(|| e.get("status").and_then(scalar_string)),
                e.get("message").and_then(scalar_string),
            ),
            Some(serde_json::Value::String(s)) => (None, None, Some(s.clone())),
            Some(_) | None => (
                v.get("code").and_then(scalar_string),
                // Anthropic's top level says `"type": "error"`, which names nothing.
                v.get("type")
                    .and_then(scalar_string)
                    .filter(|t| t != "error"),
                v.get("message")
                    .and_then(scalar_string)
                    .or_else(|| v.get("detail").and_then(scalar_string)),
            ),
        };
        let mut message = message.unwrap_or_default();
        if let Some(serde_json::Value::Object(e)) = err
            && let Some(filtered) = azure_filtered(e)
        {
            message = format!("{message} (filtered: {filtered})");
        }
        let retry_delay = err
            .and_then(|e| e.get("details"))
            .and_then(crate::gemini::retry_delay);
        BodyInfo {
            is_json: true,
            code,
            kind,
            text_lower: message.to_lowercase(),
            message: clean_message(&message),
            retry_delay,
        }
    }

    fn hint(&self) -> Hint {
        let by_code = self
            .code
            .as_deref()
            .map(hint_of_code)
            .unwrap_or(HintKind::Nothing);
        let by_kind = self
            .kind
            .as_deref()
            .map(hint_of_code)
            .unwrap_or(HintKind::Nothing);
        let generic = |k: HintKind| match k {
            HintKind::NotFound | HintKind::InvalidRequest | HintKind::Nothing => true,
            HintKind::ContextOverflow
            | HintKind::ContentPolicy
            | HintKind::Billing
            | HintKind::RateLimit
            | HintKind::Overloaded
            | HintKind::Auth
            | HintKind::ModelNotFound
            | HintKind::Timeout => false,
        };
        for k in [by_code, by_kind] {
            if !generic(k) {
                return Hint {
                    kind: k,
                    strong: true,
                };
            }
        }
        let by_text = hint_of_text(&self.text_lower);
        if !generic(by_text) {
            return Hint {
                kind: by_text,
                strong: false,
            };
        }
        for k in [by_code, by_kind] {
            match k {
                HintKind::Nothing => {}
                HintKind::NotFound if self.text_lower.contains("model") => {
                    return Hint {
                        kind: HintKind::ModelNotFound,
                        strong: true,
                    };
                }
                HintKind::NotFound
                | HintKind::InvalidRequest
                | HintKind::ContextOverflow
                | HintKind::ContentPolicy
                | HintKind::Billing
                | HintKind::RateLimit
                | HintKind::Overloaded
                | HintKind::Auth
                | HintKind::ModelNotFound
                | HintKind::Timeout => {
                    return Hint {
                        kind: k,
                        strong: true,
                    };
                }
            }
        }
        Hint::NOTHING
    }
}

/// Azure's `innererror.code` (e.g. `ResponsibleAIPolicyViolation`), read
/// when the error has no `code` of its own; an `innererror` holding a
/// `content_filter_result` is a content filter whatever its code says.
fn azure_inner_code(e: &serde_json::Map<String, serde_json::Value>) -> Option<String> {
    let inner = e.get("innererror")?.as_object()?;
    if inner.contains_key("content_filter_result") {
        return Some("content_filter".to_owned());
    }
    inner.get("code").and_then(scalar_string)
}

/// The categories Azure's content filter `filtered` (`hate high, violence
/// medium`), from `innererror.content_filter_result`, for the message a
/// caller gets; `None` when there is none.
fn azure_filtered(e: &serde_json::Map<String, serde_json::Value>) -> Option<String> {
    let result = e
        .get("innererror")?
        .as_object()?
        .get("content_filter_result")?
        .as_object()?;
    let hits: Vec<String> = result
        .iter()
        .filter(|(_, v)| v.get("filtered").and_then(serde_json::Value::as_bool) == Some(true))
        .map(
            |(name, v)| match v.get("severity").and_then(serde_json::Value::as_str) {
                Some(sev) => format!("{name} {sev}"),
                None => name.clone(),
            },
        )
        .collect();
    (!hits.is_empty()).then(|| hits.join(", "))
}

/// A JSON string or number as a string (some providers send numeric codes).
fn scalar_string(v: &serde_json::Value) -> Option<String> {
    match v {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Number(n) => Some(n.to_string()),
        serde_json::Value::Null
        | serde_json::Value::Bool(_)
        | serde_json::Value::Array(_)
        | serde_json::Value::Object(_) => None,
    }
}

/// A provider's error `code` or `type`.
fn hint_of_code(code: &str) -> HintKind {
    match code.to_ascii_lowercase().as_str() {
        "context_length_exceeded"
        | "string_above_max_length"
        | "request_too_large"
        | "model_context_window_exceeded" => HintKind::ContextOverflow,
        "content_policy_violation"
        | "content_filter"
        | "content_filtered"
        | "safety"
        | "responsibleaipolicyviolation" => HintKind::ContentPolicy,
        "insufficient_quota"
        | "billing_hard_limit_reached"
        | "billing_not_active"
        | "insufficient_balance"
        | "payment_required" => HintKind::Billing,
        "rate_limit_exceeded"
        | "rate_limit_error"
        | "rate_limited"
        | "resource_exhausted"
        | "too_many_requests" => HintKind::RateLimit,
        "overloaded_error"
        | "overloaded"
        | "server_error"
        | "api_error"
        | "service_unavailable"
        | "unavailable"
        | "internal_error"
        | "internal" => HintKind::Overloaded,
        "invalid_api_key"
        | "authentication_error"
        | "invalid_authentication"
        | "permission_error"
        | "unauthenticated"
        | "permission_denied"
        | "account_deactivated" => HintKind::Auth,
        // Azure: the deployment (hale's model) does not exist on the resource.
        "model_not_found" | "deploymentnotfound" => HintKind::ModelNotFound,
        // Google's status for an upstream deadline that ran out.
        "deadline_exceeded" => HintKind::Timeout,
        "not_found_error" | "not_found" => HintKind::NotFound,
        "invalid_request_error" | "invalid_request" | "invalid_argument" | "bad_request" => {
            HintKind::InvalidRequest
        }
        // An unrecognised code names nothing; the text and status decide.
        _ => HintKind::Nothing,
    }
}

/// Message patterns, most specific first.
fn hint_of_text(t: &str) -> HintKind {
    let any = |pats: &[&str]| pats.iter().any(|p| t.contains(p));
    if any(&[
        "prompt is too long",
        "input is too long",
        "maximum context length",
        "context length",
        "context_length_exceeded",
        "context window",
        "too many tokens",
        "reduce the length of the messages",
        // Google: "The input token count (1200000) exceeds the maximum number of tokens allowed (1048576)."
        "exceeds the maximum number of tokens",
    ]) {
        HintKind::ContextOverflow
    } else if any(&[
        "content filter",
        "content_filter",
        "content filtering",
        "content policy",
        "content_policy",
        "content management policy",
        "safety",
        "flagged by",
    ]) || mentions_refusal(t)
    {
        HintKind::ContentPolicy
    } else if any(&[
        "insufficient_quota",
        "exceeded your current quota",
        "credit balance",
        "insufficient credit",
        "insufficient balance",
        "insufficient funds",
        "billing",
        "payment required",
    ]) {
        HintKind::Billing
    } else if any(&[
        "rate limit",
        "rate_limit",
        "ratelimit",
        "per minute",
        "per-minute",
        "too many requests",
        "requests per",
        "tokens per min",
        "quota",
    ]) {
        HintKind::RateLimit
    } else if any(&["overloaded", "capacity", "temporarily unavailable"]) {
        HintKind::Overloaded
    } else if any(&[
        "invalid api key",
        "incorrect api key",
        "invalid x-api-key",
        "invalid_api_key",
        "api key not valid",
        "unauthorized",
        "authentication",
    ]) {
        HintKind::Auth
    } else if t.contains("model")
        && any(&[
            "not found",
            "does not exist",
            "not exist",
            "no such model",
            "unknown model",
        ])
    {
        HintKind::ModelNotFound
    } else {
        HintKind::Nothing
    }
}

/// "refus…" as a safety refusal, not "connection refused".
fn mentions_refusal(t: &str) -> bool {
    t.match_indices("refus").any(|(i, _)| {
        let before = &t[..i];
        let after = &t[i..];
        !(before.ends_with("connection ")
            || after.starts_with("refused to connect")
            || after.starts_with("refused connection"))
    })
}

/// "Please try again in 1.5s" / "in 20ms" / "in 1m30s" / "in 20 seconds"
/// (OpenAI's rate-limit messages), used when there is no `Retry-After`.
fn parse_try_again_in(t: &str) -> Option<Duration> {
    let i = t.find("try again in ")?;
    let mut s = &t[i + "try again in ".len()..];
    let mut total = 0.0f64;
    let mut seen = false;
    loop {
        let num_len = s
            .bytes()
            .take_while(|b| b.is_ascii_digit() || *b == b'.')
            .count();
        let Ok(n) = s[..num_len].parse::<f64>() else {
            break;
        };
        let after = s[num_len..].trim_start();
        let word_len = after.bytes().take_while(u8::is_ascii_alphabetic).count();
        let unit = &after[..word_len];
        let mult = if unit == "ms" || unit.starts_with("milli") {
            0.001
        } else if unit.starts_with('s') {
            1.0
        } else if unit.starts_with('m') {
            60.0
        } else if unit.starts_with('h') {
            3600.0
        } else {
            break;
        };
        total += n * mult;
        seen = true;
        s = &after[word_len..];
    }
    if seen {
        Duration::try_from_secs_f64(total).ok()
    } else {
        None
    }
}

/// Redact key-like tokens, trim and truncate a provider message.
fn clean_message(msg: &str) -> String {
    let redacted = redact_keys(msg);
    let trimmed = redacted.trim();
    match trimmed.char_indices().nth(MAX_MESSAGE_CHARS) {
        Some((cut, _)) => format!("{}…", &trimmed[..cut]),
        None => trimmed.to_owned(),
    }
}

/// Replaces every key-like token with `[redacted]`: `sk-` or `sk_` not
/// preceded by a letter or digit, then key characters (`[A-Za-z0-9_-]`), 12
/// or more in all, whatever surrounds it (a space, a newline, `=`, a quote,
/// a control character). A token with a `*` in it is already masked and stays.
fn redact_keys(msg: &str) -> String {
    let key_char = |b: &u8| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'*');
    let bytes = msg.as_bytes();
    let mut out = String::with_capacity(msg.len());
    let (mut copied, mut i) = (0, 0);
    while i < bytes.len() {
        let starts = bytes[i..].starts_with(b"sk-") || bytes[i..].starts_with(b"sk_");
        if !starts || (i > 0 && bytes[i - 1].is_ascii_alphanumeric()) {
            i += 1;
            continue;
        }
        let len = bytes[i..].iter().take_while(|b| key_char(b)).count();
        if len >= 12 && !bytes[i..i + len].contains(&b'*') {
            // `i` and `i + len` border ASCII bytes: both are char boundaries.
            out.push_str(&msg[copied..i]);
            out.push_str("[redacted]");
            copied = i + len;
        }
        i += len;
    }
    out.push_str(&msg[copied..]);
    out
}

/// Walks an error's source chain — the error itself and up to
/// [`MAX_SOURCE_DEPTH`] causes below it — looking for `std::io::Error` kinds
/// (connection reset/refused/aborted, timed out, unexpected EOF, …) and
/// messages ("dns error", "failed to lookup", "connection reset", "timed
/// out", …), returning the [`Transport`] it implies. The outermost
/// recognised level wins; nothing recognised is [`Transport::Other`].
///
/// At each level a TLS failure's message is read before the I/O kind: a
/// TLS library hands its errors up inside an `io::Error` of kind
/// `InvalidData`, which alone would read as a body hale could not parse.
pub fn transport_of(err: &(dyn std::error::Error + 'static)) -> Transport {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(err);
    let mut depth = 0;
    while let Some(e) = cur {
        if depth > MAX_SOURCE_DEPTH {
            break;
        }
        let message = e.to_string().to_lowercase();
        if is_tls_message(&message) {
            return Transport::Tls;
        }
        if let Some(t) = e
            .downcast_ref::<std::io::Error>()
            .and_then(|io| transport_of_io_kind(io.kind()))
        {
            return t;
        }
        if let Some(t) = transport_of_message(&message) {
            return t;
        }
        cur = e.source();
        depth += 1;
    }
    Transport::Other
}

fn transport_of_io_kind(kind: std::io::ErrorKind) -> Option<Transport> {
    use std::io::ErrorKind as K;
    match kind {
        K::ConnectionReset | K::ConnectionAborted | K::BrokenPipe | K::NotConnected => {
            Some(Transport::ConnectReset)
        }
        K::ConnectionRefused
        | K::HostUnreachable
        | K::NetworkUnreachable
        | K::NetworkDown
        | K::AddrNotAvailable => Some(Transport::ConnectRefused),
        K::TimedOut => Some(Transport::HeadersTimeout),
        K::UnexpectedEof => Some(Transport::StreamCut),
        K::InvalidData => Some(Transport::MalformedBody),
        // Other kinds say nothing about the transport: keep walking the chain.
        _ => None,
    }
}

/// A TLS handshake's failure as rustls (and the clients around it) word
/// it: a certificate refused, a fatal alert, no version or suite in common.
fn is_tls_message(m: &str) -> bool {
    [
        "invalid peer certificate",
        "certificate verify failed",
        "received fatal alert",
        "peer is incompatible",
        "peer misbehaved",
        "tls handshake",
    ]
    .iter()
    .any(|p| m.contains(p))
}

fn transport_of_message(m: &str) -> Option<Transport> {
    let any = |pats: &[&str]| pats.iter().any(|p| m.contains(p));
    if any(&[
        "dns error",
        "failed to lookup",
        "name or service not known",
        "no such host",
        "nodename nor servname",
        "temporary failure in name resolution",
    ]) {
        Some(Transport::Dns)
    } else if any(&[
        "connection refused",
        "network is unreachable",
        "host is unreachable",
    ]) {
        Some(Transport::ConnectRefused)
    } else if any(&[
        "connection reset",
        "connection aborted",
        "broken pipe",
        "connection closed before message completed",
    ]) {
        Some(Transport::ConnectReset)
    } else if any(&["timed out", "deadline has elapsed", "timeout elapsed"]) {
        Some(Transport::HeadersTimeout)
    } else if any(&["unexpected eof", "unexpected end of file"]) {
        Some(Transport::StreamCut)
    } else if any(&[
        "error decoding response body",
        "invalid json",
        "expected value at line",
    ]) {
        Some(Transport::MalformedBody)
    } else {
        None
    }
}

/// Parse a milliseconds retry header (`retry-after-ms`,
/// `x-ms-retry-after-ms`): a non-negative number of milliseconds, fractions
/// accepted. Anything else is `None`.
pub fn parse_retry_after_ms(value: &str) -> Option<Duration> {
    let v = value.trim();
    if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return None;
    }
    let ms: f64 = v.parse().ok()?;
    Duration::try_from_secs_f64(ms / 1000.0).ok()
}

/// Parse a `Retry-After` value: delta-seconds (fractions such as `1.5`
/// accepted) or an HTTP-date (a past date is zero). Anything else, negative
/// or absurdly large, is `None`.
pub fn parse_retry_after(value: &str, now_wall: SystemTime) -> Option<Duration> {
    let v = value.trim();
    if v.is_empty() {
        return None;
    }
    if v.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        let secs: f64 = v.parse().ok()?;
        return Duration::try_from_secs_f64(secs).ok();
    }
    let at = httpdate::parse_http_date(v).ok()?;
    Some(at.duration_since(now_wall).unwrap_or(Duration::ZERO))
}

/// How a class moves to the next target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MoveOn {
    /// Immediately, without retrying this target.
    AtOnce,
    /// Once the retries on this target are spent (or not worth the wait).
    AfterRetries,
    /// Never: the same input fails anywhere, or hale itself said no.
    Never,
}

/// A class's row of the failure-class table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClassRule {
    /// Worth retrying on the same target (after a backoff).
    pub retry_same_target: bool,
    pub move_on: MoveOn,
    /// Counts as a failure against the provider's breaker (the default of
    /// `BreakerConfig::counted_classes`, which the config may change).
    pub counts_against_breaker: bool,
    /// The error goes back to the caller as it is: no retry, no failover.
    pub final_for_caller: bool,
}

/// A class's row of the failure-class table.
///
/// `context_overflow` is retried on the same target only after compaction
/// made the request smaller; that is the adapter's step, so the rule here
/// says "move on". `stream_broken` before the first chunk fails over
/// invisibly; mid-stream, the stream is resumed on the next target.
pub fn rule(class: ErrorClass) -> ClassRule {
    let row = |retry_same_target, move_on, counts_against_breaker, final_for_caller| ClassRule {
        retry_same_target,
        move_on,
        counts_against_breaker,
        final_for_caller,
    };
    match class {
        ErrorClass::Network => row(true, MoveOn::AfterRetries, true, false),
        ErrorClass::Timeout => row(false, MoveOn::AtOnce, true, false),
        ErrorClass::RateLimit => row(true, MoveOn::AfterRetries, true, false),
        ErrorClass::Overloaded => row(true, MoveOn::AfterRetries, true, false),
        ErrorClass::StreamBroken => row(false, MoveOn::AtOnce, true, false),
        ErrorClass::StreamCrawling => row(false, MoveOn::AtOnce, true, false),
        ErrorClass::ContextOverflow => row(false, MoveOn::AtOnce, false, false),
        ErrorClass::ContentPolicy => row(false, MoveOn::Never, false, true),
        ErrorClass::Auth => row(false, MoveOn::AtOnce, true, false),
        ErrorClass::Billing => row(false, MoveOn::AtOnce, true, false),
        ErrorClass::ModelNotFound => row(false, MoveOn::AtOnce, false, false),
        ErrorClass::BadRequest => row(false, MoveOn::Never, false, true),
        ErrorClass::Format => row(false, MoveOn::AtOnce, true, false),
        ErrorClass::Budget => row(false, MoveOn::Never, false, true),
        ErrorClass::Safety => row(false, MoveOn::Never, false, true),
        ErrorClass::Policy => row(false, MoveOn::Never, false, true),
        ErrorClass::Unknown => row(false, MoveOn::AtOnce, true, false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    fn now() -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(1_700_000_000)
    }

    fn obs<'a>(
        status: Option<u16>,
        retry_after: Option<&'a str>,
        body: Option<&'a str>,
        transport: Option<Transport>,
    ) -> Observation<'a> {
        Observation {
            status,
            retry_after,
            retry_after_ms: None,
            body,
            transport,
            now_wall: now(),
        }
    }

    /// One row per line of the failure-class table (and its edges):
    /// (name, status, Retry-After, body, transport) → class.
    #[test]
    fn table_of_failure_classes() {
        use ErrorClass as C;
        use Transport as T;
        let openai = |code: &str, ty: &str, msg: &str| {
            format!(
                r#"{{"error":{{"message":"{msg}","type":"{ty}","param":null,"code":"{code}"}}}}"#
            )
        };
        let anthropic = |ty: &str, msg: &str| {
            format!(r#"{{"type":"error","error":{{"type":"{ty}","message":"{msg}"}}}}"#)
        };
        let google = |code: u16, status: &str, msg: &str| {
            serde_json::json!({"error": {"code": code, "message": msg, "status": status}})
                .to_string()
        };
        #[allow(clippy::type_complexity)]
        let rows: Vec<(&str, Option<u16>, Option<&str>, Option<String>, Option<Transport>, ErrorClass)> = vec![
            // network
            ("reset before response", None, None, None, Some(T::ConnectReset), C::Network),
            ("refused", None, None, None, Some(T::ConnectRefused), C::Network),
            ("dns", None, None, None, Some(T::Dns), C::Network),
            ("2xx body cut before hale read it all", Some(200), None, None, Some(T::BodyCut), C::Network),
            // timeout
            ("no headers in time", None, None, None, Some(T::HeadersTimeout), C::Timeout),
            ("no first token", Some(200), None, None, Some(T::FirstTokenTimeout), C::Timeout),
            ("closed after a long silence, no response", None, None, None, Some(T::SilentHangUp), C::Timeout),
            ("408", Some(408), None, None, None, C::Timeout),
            // rate_limit
            ("429 bare", Some(429), None, None, None, C::RateLimit),
            ("429 with retry-after", Some(429), Some("3"), None, None, C::RateLimit),
            ("openai 429", Some(429), None, Some(openai("rate_limit_exceeded", "requests", "Rate limit reached for gpt-4o on requests per min (RPM)")), None, C::RateLimit),
            ("anthropic 429", Some(429), None, Some(anthropic("rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit")), None, C::RateLimit),
            ("google RESOURCE_EXHAUSTED", Some(429), None, Some(google(429, "RESOURCE_EXHAUSTED", "You exceeded your current quota, please check your plan and billing details.")), None, C::RateLimit),
            ("per-minute quota text", None, None, Some("Quota exceeded for requests per minute".into()), None, C::RateLimit),
            ("rate limit text", None, None, Some("rate limit hit, slow down".into()), None, C::RateLimit),
            // overloaded
            ("500", Some(500), None, None, None, C::Overloaded),
            ("502 html", Some(502), None, Some("<html>Bad Gateway</html>".into()), Some(T::MalformedBody), C::Overloaded),
            ("503", Some(503), Some("10"), None, None, C::Overloaded),
            ("504", Some(504), None, None, None, C::Overloaded),
            ("529 anthropic overloaded", Some(529), None, Some(anthropic("overloaded_error", "Overloaded")), None, C::Overloaded),
            ("openai server_error", Some(500), None, Some(openai("server_error", "server_error", "The server had an error")), None, C::Overloaded),
            ("overloaded text, no status", None, None, Some("model is overloaded".into()), None, C::Overloaded),
            ("capacity text, no status", None, None, Some("no capacity available".into()), None, C::Overloaded),
            ("409 conflict", Some(409), None, None, None, C::Overloaded),
            ("other 5xx", Some(520), None, None, None, C::Overloaded),
            ("google UNAVAILABLE", Some(503), None, Some(google(503, "UNAVAILABLE", "The model is overloaded. Please try again later.")), None, C::Overloaded),
            ("google INTERNAL", Some(500), None, Some(google(500, "INTERNAL", "An internal error has occurred.")), None, C::Overloaded),
            ("google DEADLINE_EXCEEDED", Some(504), None, Some(google(504, "DEADLINE_EXCEEDED", "Deadline expired before operation could complete.")), None, C::Timeout),
            ("google DEADLINE_EXCEEDED in a stream", None, None, Some(google(504, "DEADLINE_EXCEEDED", "Deadline expired before operation could complete.")), None, C::Timeout),
            // stream_broken
            ("stream cut", Some(200), None, None, Some(T::StreamCut), C::StreamBroken),
            ("stream stalled", Some(200), None, None, Some(T::StreamStalled), C::StreamBroken),
            ("ended without finish", Some(200), None, None, Some(T::StreamEndedWithoutFinish), C::StreamBroken),
            // stream_crawling
            ("stream crawling", Some(200), None, None, Some(T::StreamCrawling), C::StreamCrawling),
            // context_overflow
            ("openai context_length_exceeded", Some(400), None, Some(openai("context_length_exceeded", "invalid_request_error", "This model's maximum context length is 128000 tokens")), None, C::ContextOverflow),
            ("anthropic prompt too long", Some(400), None, Some(anthropic("invalid_request_error", "prompt is too long: 201234 tokens > 200000 maximum")), None, C::ContextOverflow),
            ("input is too long", Some(400), None, Some(anthropic("invalid_request_error", "Input is too long for requested model.")), None, C::ContextOverflow),
            ("vllm maximum context length", Some(400), None, Some(r#"{"object":"error","message":"This model's maximum context length is 4096 tokens.","type":"BadRequestError","code":400}"#.into()), None, C::ContextOverflow),
            ("google INVALID_ARGUMENT token count", Some(400), None, Some(google(400, "INVALID_ARGUMENT", "The input token count (1200000) exceeds the maximum number of tokens allowed (1048576).")), None, C::ContextOverflow),
            ("413", Some(413), None, Some(anthropic("request_too_large", "Request exceeds the maximum allowed number of bytes.")), None, C::ContextOverflow),
            // content_policy
            ("openai content_policy_violation", Some(400), None, Some(openai("content_policy_violation", "invalid_request_error", "Your request was rejected as a result of our safety system.")), None, C::ContentPolicy),
            ("azure content_filter", Some(400), None, Some(openai("content_filter", "invalid_request_error", "The response was filtered due to the prompt triggering content management policy.")), None, C::ContentPolicy),
            ("anthropic content filtering", Some(400), None, Some(anthropic("invalid_request_error", "Output blocked by content filtering policy")), None, C::ContentPolicy),
            ("safety refusal text", None, None, Some(r#"{"error":"The model refused to answer for safety reasons"}"#.into()), None, C::ContentPolicy),
            // auth
            ("401", Some(401), None, None, None, C::Auth),
            ("google UNAUTHENTICATED", Some(401), None, Some(google(401, "UNAUTHENTICATED", "Request had invalid authentication credentials.")), None, C::Auth),
            ("google PERMISSION_DENIED", Some(403), None, Some(google(403, "PERMISSION_DENIED", "Permission denied: Consumer has been suspended.")), None, C::Auth),
            ("google API key not valid as 400", Some(400), None, Some(google(400, "INVALID_ARGUMENT", "API key not valid. Please pass a valid API key.")), None, C::Auth),
            ("openai invalid_api_key", Some(401), None, Some(openai("invalid_api_key", "invalid_request_error", "Incorrect API key provided: sk-abc***xyz.")), None, C::Auth),
            ("anthropic authentication_error", Some(401), None, Some(anthropic("authentication_error", "invalid x-api-key")), None, C::Auth),
            ("anthropic permission_error", Some(403), None, Some(anthropic("permission_error", "Your API key does not have permission")), None, C::Auth),
            // billing
            ("402", Some(402), None, None, None, C::Billing),
            ("openai insufficient_quota as 429", Some(429), None, Some(openai("insufficient_quota", "insufficient_quota", "You exceeded your current quota, please check your plan and billing details.")), None, C::Billing),
            ("anthropic low credit as 400", Some(400), None, Some(anthropic("invalid_request_error", "Your credit balance is too low to access the Anthropic API.")), None, C::Billing),
            // model_not_found
            ("openai model_not_found", Some(404), None, Some(openai("model_not_found", "invalid_request_error", "The model `gpt-9` does not exist or you do not have access to it.")), None, C::ModelNotFound),
            ("anthropic not_found model", Some(404), None, Some(anthropic("not_found_error", "model: claude-9")), None, C::ModelNotFound),
            ("ollama model not found", Some(404), None, Some(r#"{"error":"model \"llama9\" not found, try pulling it first"}"#.into()), None, C::ModelNotFound),
            ("404 not about a model", Some(404), None, Some("404 page not found".into()), None, C::Unknown),
            ("responses previous_response_not_found", Some(404), None, Some(openai("previous_response_not_found", "invalid_request_error", "Previous response with id 'resp_x' not found.")), None, C::BadRequest),
            ("previous_response_not_found code on a 400", Some(400), None, Some(openai("previous_response_not_found", "invalid_request_error", "Previous response with id 'resp_x' not found.")), None, C::BadRequest),
            ("a bare 404 invalid_request_error stays unknown", Some(404), None, Some(openai("unknown_url", "invalid_request_error", "Invalid URL (POST /v1/foo)")), None, C::Unknown),
            // bad_request
            ("400 other", Some(400), None, Some(openai("", "invalid_request_error", "Invalid value for 'temperature'")), None, C::BadRequest),
            ("400 bare", Some(400), None, None, None, C::BadRequest),
            ("google INVALID_ARGUMENT", Some(400), None, Some(google(400, "INVALID_ARGUMENT", "Invalid value at 'generation_config.temperature' (TYPE_FLOAT), \"hot\"")), None, C::BadRequest),
            // Vertex AI (kind: vertex): Google's shape for both publishers, Anthropic's for Claude's own errors.
            ("vertex NOT_FOUND publisher model", Some(404), None, Some(google(404, "NOT_FOUND", "Publisher Model `projects/p/locations/us-east5/publishers/anthropic/models/claude-x` was not found or your project does not have access to it.")), None, C::ModelNotFound),
            ("vertex RESOURCE_EXHAUSTED quota", Some(429), None, Some(google(429, "RESOURCE_EXHAUSTED", "Quota exceeded for aiplatform.googleapis.com/generate_content_requests_per_minute_per_project_per_base_model with base model: gemini-2.5-pro.")), None, C::RateLimit),
            ("vertex PERMISSION_DENIED", Some(403), None, Some(google(403, "PERMISSION_DENIED", "Permission 'aiplatform.endpoints.predict' denied on resource '//aiplatform.googleapis.com/projects/p/locations/us-east5/publishers/google/models/gemini-2.5-pro' (or it may not exist).")), None, C::Auth),
            ("vertex UNAUTHENTICATED", Some(401), None, Some(google(401, "UNAUTHENTICATED", "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential.")), None, C::Auth),
            ("vertex UNAVAILABLE", Some(503), None, Some(google(503, "UNAVAILABLE", "The service is currently unavailable.")), None, C::Overloaded),
            ("vertex DEADLINE_EXCEEDED", Some(504), None, Some(google(504, "DEADLINE_EXCEEDED", "Deadline Exceeded")), None, C::Timeout),
            ("vertex gemini INVALID_ARGUMENT token count", Some(400), None, Some(google(400, "INVALID_ARGUMENT", "The input token count (1500000) exceeds the maximum number of tokens allowed (1048576).")), None, C::ContextOverflow),
            ("vertex claude overloaded_error", Some(529), None, Some(anthropic("overloaded_error", "Overloaded")), None, C::Overloaded),
            ("vertex claude prompt too long", Some(400), None, Some(anthropic("invalid_request_error", "prompt is too long: 210000 tokens > 200000 maximum")), None, C::ContextOverflow),
            ("422", Some(422), None, Some(r#"{"detail":[{"loc":["body","messages"],"msg":"field required"}]}"#.into()), None, C::BadRequest),
            ("400 with weak capacity text", Some(400), None, Some(openai("", "invalid_request_error", "max_tokens exceeds the model capacity setting")), None, C::BadRequest),
            // format
            ("200 malformed body", Some(200), None, Some("{not json".into()), Some(T::MalformedBody), C::Format),
            ("200 unparsable, no transport", Some(200), None, Some("<html>oops</html>".into()), None, C::Format),
            ("malformed without status", None, None, None, Some(T::MalformedBody), C::Format),
            // unknown, explicitly
            ("nothing at all", None, None, None, None, C::Unknown),
            ("transport other", None, None, None, Some(T::Other), C::Unknown),
            ("redirect", Some(302), None, None, None, C::Unknown),
            ("405", Some(405), None, None, None, C::Unknown),
            ("status out of range", Some(999), None, None, None, C::Unknown),
        ];
        for (name, status, ra, body, transport, want) in &rows {
            let o = obs(*status, *ra, body.as_deref(), *transport);
            let got = classify(&o);
            assert_eq!(got.class, *want, "row {name:?}: {got:?}");
        }
        // Every class the classifier can produce appears in the table above.
        for c in ErrorClass::ALL {
            let producible = !matches!(
                c,
                ErrorClass::Budget | ErrorClass::Safety | ErrorClass::Policy
            );
            if producible {
                assert!(rows.iter().any(|r| r.5 == c), "no row for {c}");
            }
        }
    }

    /// Google's 429 carries its wait in a `RetryInfo` detail; a
    /// `Retry-After` header still wins.
    #[test]
    fn google_retry_info_is_the_wait() {
        let body = r#"{"error":{"code":429,"message":"Resource has been exhausted (e.g. check quota).","status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[]},{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"12s"}]}}"#;
        let c = classify(&obs(Some(429), None, Some(body), None));
        assert_eq!(c.class, ErrorClass::RateLimit);
        assert_eq!(c.retry_after, Some(Duration::from_secs(12)));
        assert_eq!(c.code.as_deref(), Some("429"));
        let c = classify(&obs(Some(429), Some("3"), Some(body), None));
        assert_eq!(c.retry_after, Some(Duration::from_secs(3)));
    }

    #[test]
    fn code_and_message_come_from_the_body() {
        let body = r#"{"error":{"message":"The response was filtered: hate (high)","type":null,"param":"prompt","code":"content_filter"}}"#;
        let c = classify(&obs(Some(400), None, Some(body), None));
        assert_eq!(c.class, ErrorClass::ContentPolicy);
        assert_eq!(c.code.as_deref(), Some("content_filter"));
        assert_eq!(c.message, "The response was filtered: hate (high)");

        let a = r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
        let c = classify(&obs(Some(529), None, Some(a), None));
        assert_eq!(c.code.as_deref(), Some("overloaded_error"));
        assert_eq!(c.message, "Overloaded");
    }

    #[test]
    fn message_never_carries_a_key_and_is_bounded() {
        let body = r#"{"error":{"message":"Incorrect API key provided: sk-proj-abcdefghijklmnop1234.","code":"invalid_api_key"}}"#;
        let c = classify(&obs(Some(401), None, Some(body), None));
        assert!(!c.message.contains("abcdefghijklmnop1234"), "{}", c.message);
        assert!(c.message.contains("[redacted]"));

        let long = "x".repeat(10_000);
        let c = classify(&obs(Some(500), None, Some(&long), None));
        assert!(c.message.chars().count() <= MAX_MESSAGE_CHARS + 1);
    }

    #[test]
    fn message_describes_the_transport_when_it_decided() {
        let c = classify(&obs(
            Some(200),
            None,
            Some("garbage"),
            Some(Transport::MalformedBody),
        ));
        assert_eq!(c.message, "malformed body");
        let c = classify(&obs(None, None, None, Some(Transport::Dns)));
        assert_eq!(c.message, "dns error");
        let c = classify(&obs(Some(503), None, None, None));
        assert_eq!(c.message, "HTTP 503");
    }

    #[test]
    fn retry_after_delta_seconds() {
        assert_eq!(
            parse_retry_after("120", now()),
            Some(Duration::from_secs(120))
        );
        assert_eq!(
            parse_retry_after(" 3 ", now()),
            Some(Duration::from_secs(3))
        );
        assert_eq!(
            parse_retry_after("1.5", now()),
            Some(Duration::from_millis(1500))
        );
        assert_eq!(parse_retry_after("0", now()), Some(Duration::ZERO));
        assert_eq!(parse_retry_after("-1", now()), None);
        assert_eq!(parse_retry_after("soon", now()), None);
        assert_eq!(parse_retry_after("", now()), None);
        assert_eq!(parse_retry_after("1.2.3", now()), None);
        assert_eq!(parse_retry_after("99999999999999999999999", now()), None);
    }

    #[test]
    fn retry_after_http_date() {
        let future = httpdate::fmt_http_date(now() + Duration::from_secs(30));
        assert_eq!(
            parse_retry_after(&future, now()),
            Some(Duration::from_secs(30))
        );
        let past = httpdate::fmt_http_date(now() - Duration::from_secs(3600));
        assert_eq!(parse_retry_after(&past, now()), Some(Duration::ZERO));
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now()),
            Some(Duration::ZERO)
        );
    }

    #[test]
    fn retry_after_reaches_the_verdict() {
        let c = classify(&obs(Some(429), Some("7"), None, None));
        assert_eq!(c.retry_after, Some(Duration::from_secs(7)));
        // Without the header, OpenAI's "try again in" message is read.
        let body = r#"{"error":{"message":"Rate limit reached for gpt-4o. Please try again in 1.054s. Visit ...","type":"requests","code":"rate_limit_exceeded"}}"#;
        let c = classify(&obs(Some(429), None, Some(body), None));
        assert_eq!(c.retry_after, Some(Duration::from_millis(1054)));
        let body =
            r#"{"error":{"message":"Please try again in 1m30s.","code":"rate_limit_exceeded"}}"#;
        let c = classify(&obs(Some(429), None, Some(body), None));
        assert_eq!(c.retry_after, Some(Duration::from_secs(90)));
        let body =
            r#"{"error":{"message":"Please try again in 6ms.","code":"rate_limit_exceeded"}}"#;
        let c = classify(&obs(Some(429), None, Some(body), None));
        assert_eq!(c.retry_after, Some(Duration::from_millis(6)));
        // The header wins over the message.
        let c = classify(&obs(Some(429), Some("2"), Some(body), None));
        assert_eq!(c.retry_after, Some(Duration::from_secs(2)));
    }

    /// Azure OpenAI's error shapes (issue 29): its 429/500/503/408/401/404
    /// bodies, the 400 `content_filter` with its `innererror`, and an
    /// `innererror` alone → class, code and message.
    #[test]
    fn azure_error_shapes() {
        use ErrorClass as C;
        let filtered = r#"{"error":{"message":"The response was filtered due to the prompt triggering Azure OpenAI's content management policy.","type":null,"param":"prompt","code":"content_filter","status":400,"innererror":{"code":"ResponsibleAIPolicyViolation","content_filter_result":{"hate":{"filtered":false,"severity":"safe"},"violence":{"filtered":true,"severity":"medium"},"self_harm":{"filtered":true,"severity":"high"}}}}}"#;
        let inner_only = r#"{"error":{"message":"Blocked.","innererror":{"code":"ResponsibleAIPolicyViolation"}}}"#;
        let inner_result = r#"{"error":{"message":"Blocked.","code":null,"innererror":{"content_filter_result":{"jailbreak":{"filtered":true,"detected":true}}}}}"#;
        let rows: &[(&str, u16, &str, C, Option<&str>)] = &[
            (
                "429",
                429,
                r#"{"error":{"code":"429","message":"Requests to the ChatCompletions_Create Operation under Azure OpenAI API version 2024-10-21 have exceeded token rate limit of your current OpenAI S0 pricing tier. Please retry after 2 seconds."}}"#,
                C::RateLimit,
                Some("429"),
            ),
            (
                "500",
                500,
                r#"{"error":{"code":"InternalServerError","message":"The service is temporarily unable to process your request. Please try again later."}}"#,
                C::Overloaded,
                Some("InternalServerError"),
            ),
            (
                "503",
                503,
                r#"{"error":{"code":"ServiceUnavailable","message":"The service is temporarily unavailable."}}"#,
                C::Overloaded,
                Some("ServiceUnavailable"),
            ),
            (
                "408",
                408,
                r#"{"error":{"code":"Timeout","message":"The operation was timeout."}}"#,
                C::Timeout,
                Some("Timeout"),
            ),
            (
                "401",
                401,
                r#"{"error":{"code":"401","message":"Access denied due to invalid subscription key or wrong API endpoint. Make sure to provide a valid key for an active subscription and use a correct regional API endpoint for your resource."}}"#,
                C::Auth,
                Some("401"),
            ),
            (
                "404 deployment",
                404,
                r#"{"error":{"code":"DeploymentNotFound","message":"The API deployment for this resource does not exist. If you created the deployment within the last 5 minutes, please wait a moment and try again."}}"#,
                C::ModelNotFound,
                Some("DeploymentNotFound"),
            ),
            (
                "400 content_filter",
                400,
                filtered,
                C::ContentPolicy,
                Some("content_filter"),
            ),
            (
                "400 innererror code",
                400,
                inner_only,
                C::ContentPolicy,
                Some("ResponsibleAIPolicyViolation"),
            ),
            (
                "400 innererror result",
                400,
                inner_result,
                C::ContentPolicy,
                Some("content_filter"),
            ),
        ];
        for (name, status, body, want, code) in rows {
            let c = classify(&obs(Some(*status), None, Some(body), None));
            assert_eq!(c.class, *want, "{name}: {c:?}");
            assert_eq!(c.code.as_deref(), *code, "{name}");
            assert!(
                rule(c.class).final_for_caller == (*want == C::ContentPolicy),
                "{name}"
            );
        }
        // The filtered categories reach the message; unfiltered ones do not.
        let c = classify(&obs(Some(400), None, Some(filtered), None));
        assert!(
            c.message
                .ends_with("(filtered: self_harm high, violence medium)"),
            "{}",
            c.message
        );
        let c = classify(&obs(Some(400), None, Some(inner_result), None));
        assert_eq!(c.message, "Blocked. (filtered: jailbreak)");
    }

    /// `retry-after-ms` / `x-ms-retry-after-ms` (milliseconds) win over
    /// `Retry-After`, which wins over the message; a bad ms value falls back.
    #[test]
    fn retry_after_ms_headers() {
        let body = r#"{"error":{"message":"Please try again in 6s.","code":"429"}}"#;
        let rows: &[(Option<&str>, Option<&str>, Duration)] = &[
            (Some("1500"), Some("2"), Duration::from_millis(1500)),
            (Some("250.5"), None, Duration::from_micros(250_500)),
            (Some("0"), Some("2"), Duration::ZERO),
            (None, Some("2"), Duration::from_secs(2)),
            (Some("soon"), Some("2"), Duration::from_secs(2)),
            (Some("-5"), None, Duration::from_secs(6)),
            (Some(""), None, Duration::from_secs(6)),
            (None, None, Duration::from_secs(6)),
        ];
        for (ms, secs, want) in rows {
            let c = classify(&Observation {
                retry_after_ms: *ms,
                ..obs(Some(429), *secs, Some(body), None)
            });
            assert_eq!(c.retry_after, Some(*want), "ms={ms:?} secs={secs:?}");
        }
        assert_eq!(
            RETRY_AFTER_MS_HEADERS,
            ["retry-after-ms", "x-ms-retry-after-ms"]
        );
    }

    /// An error whose Display says nothing, wrapping another.
    #[derive(Debug)]
    struct Wrap(Box<dyn std::error::Error + 'static>);
    impl std::fmt::Display for Wrap {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("error sending request")
        }
    }
    impl std::error::Error for Wrap {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&*self.0)
        }
    }

    fn wrapped(
        inner: Box<dyn std::error::Error + 'static>,
        levels: usize,
    ) -> Box<dyn std::error::Error + 'static> {
        (0..levels).fold(inner, |e, _| Box::new(Wrap(e)))
    }

    #[test]
    fn source_chain_finds_io_error_three_levels_deep() {
        let io = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
        let e = wrapped(Box::new(io), 3);
        assert_eq!(transport_of(&*e), Transport::ConnectReset);
        let io = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        assert_eq!(
            transport_of(&*wrapped(Box::new(io), 3)),
            Transport::ConnectRefused
        );
        let io = std::io::Error::from(std::io::ErrorKind::TimedOut);
        assert_eq!(
            transport_of(&*wrapped(Box::new(io), 3)),
            Transport::HeadersTimeout
        );
        let io = std::io::Error::from(std::io::ErrorKind::UnexpectedEof);
        assert_eq!(
            transport_of(&*wrapped(Box::new(io), 3)),
            Transport::StreamCut
        );
    }

    #[test]
    fn source_chain_stops_after_five_levels() {
        let io = || Box::new(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        assert_eq!(transport_of(&*wrapped(io(), 5)), Transport::ConnectReset);
        assert_eq!(transport_of(&*wrapped(io(), 6)), Transport::Other);
    }

    #[test]
    fn source_chain_reads_messages() {
        let dns = std::io::Error::other(
            "dns error: failed to lookup address information: Name or service not known",
        );
        assert_eq!(transport_of(&*wrapped(Box::new(dns), 2)), Transport::Dns);
        let t = std::io::Error::other("operation timed out");
        assert_eq!(
            transport_of(&*wrapped(Box::new(t), 1)),
            Transport::HeadersTimeout
        );
        let r = std::io::Error::other("connection reset by peer");
        assert_eq!(transport_of(&r), Transport::ConnectReset);
        let nothing = std::io::Error::other("something odd");
        assert_eq!(
            transport_of(&*wrapped(Box::new(nothing), 2)),
            Transport::Other
        );
    }

    /// A TLS failure reads as one whatever wraps it — rustls hands its
    /// errors up inside an `io::Error` of kind `InvalidData`, which alone
    /// would read as a malformed body — and it is a network failure.
    #[test]
    fn a_tls_handshake_failure_is_a_network_failure_not_a_bad_body() {
        let cases = [
            "invalid peer certificate: UnknownIssuer",
            "invalid peer certificate: Expired",
            "invalid peer certificate: NotValidForName",
            "received fatal alert: HandshakeFailure",
            "peer is incompatible: NoCipherSuitesInCommon",
            "error:0A000086:SSL routines::certificate verify failed",
        ];
        for m in cases {
            let io = std::io::Error::new(std::io::ErrorKind::InvalidData, m);
            assert_eq!(
                transport_of(&*wrapped(Box::new(io), 2)),
                Transport::Tls,
                "{m}"
            );
        }
        assert_eq!(Transport::Tls.class(), Some(ErrorClass::Network));
        assert!(Transport::Tls.failed_to_connect() && Transport::Tls.needs_detail());
        // A body that is not JSON is still one.
        let io = std::io::Error::new(std::io::ErrorKind::InvalidData, "expected value at line 1");
        assert_eq!(transport_of(&io), Transport::MalformedBody);
    }

    /// Which transports mark the `base_url` (a connection never made) and
    /// which add their cause chain to the message.
    #[test]
    fn transports_that_failed_to_connect_and_that_need_their_detail() {
        use Transport as T;
        // (transport, failed to connect, needs detail)
        let rows = [
            (T::ConnectReset, false, false),
            (T::ConnectRefused, true, false),
            (T::Dns, true, false),
            (T::Tls, true, true),
            (T::HeadersTimeout, false, false),
            (T::FirstTokenTimeout, false, false),
            (T::StreamCut, false, false),
            (T::BodyCut, false, false),
            (T::StreamStalled, false, false),
            (T::StreamEndedWithoutFinish, false, false),
            (T::MalformedBody, false, false),
            (T::Other, false, true),
        ];
        for (t, connect, detail) in rows {
            assert_eq!(t.failed_to_connect(), connect, "{t:?}");
            assert_eq!(t.needs_detail(), detail, "{t:?}");
        }
    }

    #[test]
    fn connection_refused_text_is_not_a_safety_refusal() {
        let c = classify(&obs(
            None,
            None,
            Some("upstream connect error: connection refused"),
            None,
        ));
        assert_eq!(c.class, ErrorClass::Unknown);
        let c = classify(&obs(
            Some(502),
            None,
            Some("upstream connect error: connection refused"),
            None,
        ));
        assert_eq!(c.class, ErrorClass::Overloaded);
    }

    #[test]
    fn rule_matches_the_table_for_every_class() {
        use ErrorClass as C;
        use MoveOn::*;
        for c in ErrorClass::ALL {
            // (retry same, move on, counts against breaker, final)
            let want = match c {
                C::Network => (true, AfterRetries, true, false),
                C::Timeout => (false, AtOnce, true, false),
                C::RateLimit => (true, AfterRetries, true, false),
                C::Overloaded => (true, AfterRetries, true, false),
                C::StreamBroken | C::StreamCrawling => (false, AtOnce, true, false),
                C::ContextOverflow => (false, AtOnce, false, false),
                C::ContentPolicy => (false, Never, false, true),
                C::Auth => (false, AtOnce, true, false),
                C::Billing => (false, AtOnce, true, false),
                C::ModelNotFound => (false, AtOnce, false, false),
                C::BadRequest => (false, Never, false, true),
                C::Format => (false, AtOnce, true, false),
                C::Budget | C::Safety | C::Policy => (false, Never, false, true),
                C::Unknown => (false, AtOnce, true, false),
            };
            let r = rule(c);
            assert_eq!(
                (
                    r.retry_same_target,
                    r.move_on,
                    r.counts_against_breaker,
                    r.final_for_caller
                ),
                want,
                "{c}"
            );
            // Final for the caller exactly when the class never moves on.
            assert_eq!(r.final_for_caller, r.move_on == Never, "{c}");
        }
    }

    #[test]
    fn rule_agrees_with_the_default_breaker_classes() {
        let counted = crate::config::BreakerConfig::default().counted_classes;
        for c in ErrorClass::ALL {
            assert_eq!(rule(c).counts_against_breaker, counted.contains(&c), "{c}");
        }
    }

    /// The silence rule, one row per case: (what failed, silent for,
    /// expectation) → the transport, and so the class the turn acts on.
    #[test]
    fn a_close_after_a_long_silence_is_a_timeout_and_a_quick_one_a_blip() {
        use ErrorClass as C;
        use Transport as T;
        let ms = Duration::from_millis;
        #[rustfmt::skip]
        let rows: Vec<(T, Duration, Duration, T, C)> = vec![
            // The issue's case: 15 s of silence, then a close (30 s first-token timeout).
            (T::ConnectReset, ms(15_000), ms(7_500), T::SilentHangUp, C::Timeout),
            (T::StreamCut, ms(15_000), ms(7_500), T::SilentHangUp, C::Timeout),
            // A quick reset is a blip: retried on the same target.
            (T::ConnectReset, ms(40), ms(7_500), T::ConnectReset, C::Network),
            (T::StreamCut, ms(40), ms(7_500), T::StreamCut, C::StreamBroken),
            // Exactly the expectation is not longer than it.
            (T::ConnectReset, ms(7_500), ms(7_500), T::ConnectReset, C::Network),
            (T::ConnectReset, ms(7_501), ms(7_500), T::SilentHangUp, C::Timeout),
            // Failures that are not a close keep their meaning whatever the time.
            (T::ConnectRefused, ms(15_000), ms(7_500), T::ConnectRefused, C::Network),
            (T::Dns, ms(15_000), ms(7_500), T::Dns, C::Network),
            (T::Tls, ms(15_000), ms(7_500), T::Tls, C::Network),
            (T::HeadersTimeout, ms(15_000), ms(7_500), T::HeadersTimeout, C::Timeout),
            (T::FirstTokenTimeout, ms(15_000), ms(7_500), T::FirstTokenTimeout, C::Timeout),
            (T::BodyCut, ms(15_000), ms(7_500), T::BodyCut, C::Network),
            (T::StreamStalled, ms(15_000), ms(7_500), T::StreamStalled, C::StreamBroken),
            (T::StreamEndedWithoutFinish, ms(15_000), ms(7_500), T::StreamEndedWithoutFinish, C::StreamBroken),
            (T::StreamCrawling, ms(15_000), ms(7_500), T::StreamCrawling, C::StreamCrawling),
            (T::MalformedBody, ms(15_000), ms(7_500), T::MalformedBody, C::Format),
            (T::SilentHangUp, ms(1), ms(7_500), T::SilentHangUp, C::Timeout),
        ];
        for (t, silent, expect, want, class) in rows {
            let got = t.after_silence(silent, expect);
            assert_eq!(got, want, "{t:?} after {silent:?} (expect {expect:?})");
            let c = classify(&obs(None, None, None, Some(got)));
            assert_eq!(c.class, class, "{t:?} after {silent:?}");
        }
        // What the turn does with it: a silent hang-up moves on at once,
        // counted against the deployment; a blip is retried on the same target.
        let hung = rule(C::Timeout);
        assert!(!hung.retry_same_target && hung.counts_against_breaker);
        assert_eq!(hung.move_on, MoveOn::AtOnce);
        assert!(rule(C::Network).retry_same_target);
        assert!(!T::SilentHangUp.failed_to_connect() && !T::SilentHangUp.needs_detail());
    }

    proptest::proptest! {
        #[test]
        fn classify_never_panics(
            status in proptest::option::of(0u16..1000),
            ra in proptest::option::of(".{0,40}"),
            body in proptest::option::of(".{0,300}"),
            t in proptest::option::of(0usize..14),
        ) {
            let transports = [
                Transport::ConnectReset, Transport::ConnectRefused, Transport::Dns, Transport::Tls,
                Transport::HeadersTimeout, Transport::FirstTokenTimeout, Transport::SilentHangUp, Transport::StreamCut,
                Transport::BodyCut, Transport::StreamStalled, Transport::StreamEndedWithoutFinish,
                Transport::StreamCrawling, Transport::MalformedBody, Transport::Other,
            ];
            let o = obs(status, ra.as_deref(), body.as_deref(), t.map(|i| transports[i]));
            let c = classify(&o);
            proptest::prop_assert!(c.message.chars().count() <= MAX_MESSAGE_CHARS + 1);
        }

        #[test]
        fn try_again_in_never_panics(s in ".{0,60}") {
            let text = format!("please try again in {s}");
            let _ = parse_try_again_in(&text);
        }
    }
}
