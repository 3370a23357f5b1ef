//! Webhook sink: signed POSTs of one event each (docs/operations.md, "Events
//! and sinks").
//!
//! The body is the event's JSON. With a secret configured, the request
//! carries [`SIGNATURE_HEADER`]: `t=<unix seconds>,v1=<hex HMAC-SHA256 of
//! "<t>.<body>">` — the Stripe scheme. Signing the timestamp with the body
//! lets a receiver reject a replayed request whose timestamp is older than
//! its tolerance ([`verify`], [`DEFAULT_TOLERANCE`]). The event id and kind
//! ride in headers too, so a receiver can deduplicate (delivery is at least
//! once) without parsing the body.
//!
//! A delivery succeeds on any 2xx answer; anything else, or no answer within
//! the timeout, is a [`DeliveryFailure`] the relay judges with
//! `hale_core::delivery::verdict`: refused, timeout, 5xx, 408 and 429 mean
//! the receiver is down (wait, blame no event); another 4xx refuses this
//! event (see [`crate::relay`]). Messages name the receiver by
//! [`public_host`] only: a webhook URL's path or query is often its secret.

use std::time::Duration;

use hale_core::config::WebhookConfig;
use hale_core::delivery::DeliveryFailure;

pub use crate::DeliveryError;
use hale_core::event::Event;
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// `t=<unix seconds>,v1=<hex hmac>`.
pub const SIGNATURE_HEADER: &str = "x-hale-signature";
/// The event's id (ULID): the receiver's deduplication key.
pub const EVENT_ID_HEADER: &str = "x-hale-event-id";
/// The event's kind, e.g. `agent.paused`.
pub const EVENT_KIND_HEADER: &str = "x-hale-event-kind";
/// How old a signature's timestamp may be before [`verify`] rejects it, by default.
pub const DEFAULT_TOLERANCE: Duration = Duration::from_secs(300);
/// How long one delivery may take before it counts as failed.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

type HmacSha256 = Hmac<Sha256>;

fn mac(secret: &[u8], timestamp: u64, body: &[u8]) -> HmacSha256 {
    // HMAC accepts keys of any length; `new_from_slice` cannot fail for it.
    let mut m = match HmacSha256::new_from_slice(secret) {
        Ok(m) => m,
        Err(_) => unreachable_hmac(),
    };
    m.update(timestamp.to_string().as_bytes());
    m.update(b".");
    m.update(body);
    m
}

#[cold]
fn unreachable_hmac() -> ! {
    panic!("HMAC-SHA256 accepts keys of any length")
}

/// The [`SIGNATURE_HEADER`] value for `body` sent at `timestamp` (unix seconds).
pub fn sign(secret: &[u8], timestamp: u64, body: &[u8]) -> String {
    let tag = mac(secret, timestamp, body).finalize().into_bytes();
    format!("t={timestamp},v1={}", hex::encode(tag))
}

/// Why a signature was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    #[error("malformed signature header: {0}")]
    Malformed(String),
    #[error(
        "signature timestamp {timestamp} is outside the tolerance of {tolerance_s} s (now {now})"
    )]
    Stale {
        timestamp: u64,
        now: u64,
        tolerance_s: u64,
    },
    #[error("signature does not match the body")]
    Mismatch,
}

/// Checks a [`SIGNATURE_HEADER`] value against `body`: the timestamp must be
/// within `tolerance` of `now` (unix seconds) and one `v1=` tag must match
/// (compared in constant time).
pub fn verify(
    secret: &[u8],
    header_value: &str,
    body: &[u8],
    now: u64,
    tolerance: Duration,
) -> Result<(), VerifyError> {
    let mut timestamp = None;
    let mut tags = Vec::new();
    for part in header_value.split(',') {
        let Some((k, v)) = part.trim().split_once('=') else {
            return Err(VerifyError::Malformed(format!(
                "part {part:?} is not key=value"
            )));
        };
        match k {
            "t" => {
                let t = v
                    .parse::<u64>()
                    .map_err(|_| VerifyError::Malformed(format!("timestamp {v:?}")))?;
                timestamp = Some(t);
            }
            "v1" => {
                let tag = hex::decode(v)
                    .map_err(|_| VerifyError::Malformed(format!("v1 {v:?} is not hex")))?;
                tags.push(tag);
            }
            // Other schemes (future versions) are ignored, as Stripe does.
            _ => {}
        }
    }
    let timestamp = timestamp.ok_or_else(|| VerifyError::Malformed("no t=".into()))?;
    if tags.is_empty() {
        return Err(VerifyError::Malformed("no v1=".into()));
    }
    if now.abs_diff(timestamp) > tolerance.as_secs() {
        return Err(VerifyError::Stale {
            timestamp,
            now,
            tolerance_s: tolerance.as_secs(),
        });
    }
    let m = mac(secret, timestamp, body);
    if tags.iter().any(|tag| m.clone().verify_slice(tag).is_ok()) {
        Ok(())
    } else {
        Err(VerifyError::Mismatch)
    }
}

/// `host[:port]` of a webhook URL — what may be shown publicly (a webhook
/// URL's path or query often is its secret, e.g. Slack's).
pub fn public_host(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(u) => match (u.host_str(), u.port()) {
            (Some(h), Some(p)) => format!("{h}:{p}"),
            (Some(h), None) => h.to_string(),
            (None, _) => "invalid-url".to_string(),
        },
        Err(_) => "invalid-url".to_string(),
    }
}

/// One configured webhook and the client that posts to it.
#[derive(Debug, Clone)]
pub struct WebhookSink {
    pub url: String,
    /// [`public_host`] of `url`, for messages.
    host: String,
    secret: Option<Vec<u8>>,
    client: reqwest::Client,
}

impl WebhookSink {
    /// The sink name used for cursors and dead letters: `webhook:<url>`.
    /// Internal (it holds the whole URL): shown only to admins.
    pub fn sink_name(url: &str) -> String {
        format!("webhook:{url}")
    }

    pub fn new(cfg: &WebhookConfig, timeout: Duration) -> anyhow::Result<Self> {
        let host = public_host(&cfg.url);
        let client = reqwest::Client::builder()
            .timeout(timeout)
            .build()
            .map_err(|e| anyhow::anyhow!("building the webhook client for {host}: {e}"))?;
        Ok(WebhookSink {
            url: cfg.url.clone(),
            host,
            secret: cfg.secret.as_ref().map(|s| s.expose().as_bytes().to_vec()),
            client,
        })
    }

    /// POSTs one event; Ok on a 2xx answer.
    pub async fn deliver(&self, event: &Event) -> Result<(), DeliveryError> {
        let body = serde_json::to_vec(event).map_err(|e| DeliveryError {
            failure: DeliveryFailure::Unencodable,
            message: format!("encoding event {}: {e}", event.id),
        })?;
        let mut req = self
            .client
            .post(&self.url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header(EVENT_ID_HEADER, &event.id)
            .header(EVENT_KIND_HEADER, event.kind.as_str());
        if let Some(secret) = &self.secret {
            let now = crate::now_ms() / 1000;
            req = req.header(SIGNATURE_HEADER, sign(secret, now, &body));
        }
        post(req.body(body), &format!("webhook {}", self.host)).await
    }
}

/// Sends one prepared POST and judges the answer: Ok on a 2xx; otherwise a
/// [`DeliveryError`] naming the receiver as `who` (never its URL: reqwest's
/// error is stripped of it). Shared by every HTTP sink (webhooks, alert
/// channels), so they fail alike.
pub(crate) async fn post(req: reqwest::RequestBuilder, who: &str) -> Result<(), DeliveryError> {
    match req.send().await {
        Ok(resp) if resp.status().is_success() => Ok(()),
        Ok(resp) => {
            let status = resp.status();
            Err(DeliveryError {
                failure: DeliveryFailure::HttpStatus(status.as_u16()),
                message: format!("{who} answered {status}"),
            })
        }
        Err(e) => {
            let failure = if e.is_timeout() {
                DeliveryFailure::Timeout
            } else if e.is_builder() {
                DeliveryFailure::Misconfigured
            } else {
                DeliveryFailure::Unreachable
            };
            Err(DeliveryError {
                failure,
                message: format!("POST to {who}: {}", chain(&e.without_url())),
            })
        }
    }
}

/// An error with its sources (reqwest's top level says only "error sending
/// request"; the cause, e.g. "Connection refused", is below).
fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut src = e.source();
    while let Some(s) = src {
        out.push_str(": ");
        out.push_str(&s.to_string());
        src = s.source();
    }
    out
}
