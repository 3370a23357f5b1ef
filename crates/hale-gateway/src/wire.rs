//! The gateway's one place per wire dialect: what a caller's dialect
//! changes in hale's answers — a complete answer's body ([`render_answer`]),
//! an error's body ([`render_error`]) and the SSE encoder of a stream
//! ([`Encoder`]), and the dialect of a path's errors ([`dialect_of`]). Each
//! is an exhaustive match on [`Dialect`], so a new dialect is a compile
//! error here until it is handled; parsing a request is `crate::proto`'s.

use crate::proto::{self, ChatRequest, ChatResponse, Dialect, StreamEvent};
use bytes::Bytes;
use serde_json::Value;

/// The wire dialect of a path: its errors are in that dialect's shape
/// (Anthropic's on `/v1/messages`, the Responses API's — OpenAI's error
/// shape — on `/v1/responses`, Google's under `/v1beta/` and on
/// `/v1/models/{model}:{action}`, OpenAI's everywhere else).
pub fn dialect_of(path: &str) -> Dialect {
    let gemini_action = path
        .strip_prefix("/v1/models/")
        .is_some_and(|rest| rest.contains(':'));
    if path == "/v1beta" || path.starts_with("/v1beta/") || gemini_action {
        Dialect::Gemini
    } else if path == "/v1/messages" || path.starts_with("/v1/messages/") {
        Dialect::Anthropic
    } else if path == "/v1/responses" || path.starts_with("/v1/responses/") {
        Dialect::Responses
    } else {
        Dialect::OpenAi
    }
}

/// A complete answer in the caller's dialect, to the caller's request `req`
/// (a Responses caller's custom tools get `custom_tool_call` items).
pub fn render_answer(dialect: Dialect, answer: &ChatResponse, req: &ChatRequest) -> Value {
    match dialect {
        Dialect::OpenAi => proto::openai::render_response(answer),
        Dialect::Anthropic => proto::anthropic::render_response(answer),
        Dialect::Responses => {
            proto::responses::render_response_with(answer, &proto::responses::custom_tools(req))
        }
        Dialect::Gemini => proto::gemini::render_response(answer),
    }
}

/// An error body of HTTP `status` in the caller's dialect, with hale's
/// detail beside it (Google's shape names the status; the others do not).
pub fn render_error(
    dialect: Dialect,
    status: u16,
    kind: &str,
    message: &str,
    hale: Value,
) -> Value {
    match dialect {
        Dialect::OpenAi => proto::openai::render_error(kind, message, hale),
        Dialect::Anthropic => proto::anthropic::render_error(kind, message, hale),
        Dialect::Responses => proto::responses::render_error(kind, message, hale),
        Dialect::Gemini => proto::gemini::render_error(status, kind, message, hale),
    }
}

/// A dialect's stream encoder.
pub enum Encoder {
    OpenAi(proto::openai::StreamEncoder),
    Anthropic(proto::anthropic::StreamEncoder),
    Responses(proto::responses::StreamEncoder),
    Gemini(proto::gemini::StreamEncoder),
}

impl Encoder {
    /// The encoder of a stream answering `req` in `dialect`.
    pub fn new(dialect: Dialect, id: &str, model: &str, req: &ChatRequest) -> Self {
        let include_usage = req.include_usage;
        match dialect {
            Dialect::OpenAi => {
                Encoder::OpenAi(proto::openai::StreamEncoder::new(id, model, include_usage))
            }
            Dialect::Anthropic => Encoder::Anthropic(proto::anthropic::StreamEncoder::new(
                id,
                model,
                include_usage,
            )),
            Dialect::Responses => Encoder::Responses(
                proto::responses::StreamEncoder::new(id, model, include_usage)
                    .with_custom_tools(proto::responses::custom_tools(req)),
            ),
            Dialect::Gemini => {
                Encoder::Gemini(proto::gemini::StreamEncoder::new(id, model, include_usage))
            }
        }
    }

    /// The SSE frames of one event, on the wire.
    pub fn encode(&mut self, ev: &StreamEvent) -> Bytes {
        let frames = match self {
            Encoder::OpenAi(e) => e.encode(ev),
            Encoder::Anthropic(e) => e.encode(ev),
            Encoder::Responses(e) => e.encode(ev),
            Encoder::Gemini(e) => e.encode(ev),
        };
        frames_to_bytes(&frames)
    }

    /// The in-band error event that ends a stream nothing could continue;
    /// `status` is what hale would have answered before the stream began.
    pub fn error(&mut self, status: u16, kind: &str, message: &str) -> Bytes {
        let frames = match self {
            Encoder::OpenAi(e) => e.error(kind, message),
            Encoder::Anthropic(e) => e.error(kind, message),
            Encoder::Responses(e) => e.error(kind, message),
            Encoder::Gemini(e) => e.error(status, kind, message),
        };
        frames_to_bytes(&frames)
    }
}

fn frames_to_bytes(frames: &[proto::openai::SseFrame]) -> Bytes {
    let mut wire = String::with_capacity(frames.iter().map(|f| f.wire_len()).sum());
    for f in frames {
        f.write_wire(&mut wire);
    }
    Bytes::from(wire)
}
