//! What every dialect's framing shares: the per-response facts ([`Ctx`]) and
//! the SSE frame builders. Kept below `wire` (which dispatches per dialect)
//! and `responses` (the Responses API's own frames), so neither imports the
//! other's file for them.

use bytes::Bytes;
use serde_json::{Map, Value};

/// Per-response facts shared by every frame.
#[derive(Debug, Clone)]
pub struct Ctx {
    pub id: String,
    pub model: String,
    pub created: u64,
    pub input_tokens: u64,
    pub include_usage: bool,
    /// Responses API: the output item's id (`msg_…` for text, `fc_…` for a
    /// function call); empty for the other dialects.
    pub item_id: String,
    /// Responses API: the request fields a `response` object echoes
    /// (`instructions`, `tools`, `metadata`, …); empty for the other dialects.
    pub echo: Map<String, Value>,
}

/// `data: <json>` and a blank line.
pub fn sse_data(v: &Value) -> Bytes {
    Bytes::from(format!("data: {v}\n\n"))
}

/// `event: <name>`, `data: <json>` and a blank line.
pub fn sse_event(event: &str, v: &Value) -> Bytes {
    Bytes::from(format!("event: {event}\ndata: {v}\n\n"))
}
