//! The gateway's one place per wire dialect: what a caller's dialect
//! changes in hale's answers — a complete answer's body ([`render_answer`]),
//! an error's body ([`render_error`]) and the encoder of a stream
//! ([`Encoder`]: the dialect's, written as SSE or, for a Gemini caller that
//! did not ask for `alt=sse`, as one JSON array, [`Framing`]), and the
//! dialect of a path's errors ([`dialect_of`]). Each is an exhaustive match on [`Dialect`], so a new dialect is a compile
//! error here until it is handled; parsing a request is [`hale_proto`]'s.

use bytes::Bytes;
use hale_proto::{ChatRequest, ChatResponse, Dialect, StreamEvent};
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
        Dialect::OpenAi => hale_proto::openai::render_response(answer),
        Dialect::Anthropic => hale_proto::anthropic::render_response(answer),
        Dialect::Responses => hale_proto::responses::render_response_with(
            answer,
            &hale_proto::responses::custom_tools(req),
        ),
        Dialect::Gemini => hale_proto::gemini::render_response(answer),
        Dialect::Bedrock => hale_proto::bedrock::render_response(answer),
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
        Dialect::OpenAi => hale_proto::openai::render_error(kind, message, hale),
        Dialect::Anthropic => hale_proto::anthropic::render_error(kind, message, hale),
        Dialect::Responses => hale_proto::responses::render_error(kind, message, hale),
        Dialect::Gemini => hale_proto::gemini::render_error(status, kind, message, hale),
        Dialect::Bedrock => hale_proto::bedrock::render_error(kind, message, hale),
    }
}

/// How a stream's events are written on the wire.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Framing {
    /// Server-sent events (every dialect; Gemini's `alt=sse`).
    #[default]
    Sse,
    /// One JSON array whose elements are the events' data, written as it
    /// grows (Gemini's `streamGenerateContent` without `alt=sse`).
    JsonArray,
}

/// A dialect's stream encoder.
pub enum Dialects {
    OpenAi(hale_proto::openai::StreamEncoder),
    Anthropic(hale_proto::anthropic::StreamEncoder),
    Responses(hale_proto::responses::StreamEncoder),
    Gemini(hale_proto::gemini::StreamEncoder),
    Bedrock(hale_proto::bedrock::StreamEncoder),
}

/// A stream encoder: the dialect's, and how its frames are written.
pub struct Encoder {
    inner: Dialects,
    framing: Framing,
    /// A JSON array's `[` is written (its first element, or its end).
    opened: bool,
    /// A JSON array's `]` is written.
    closed: bool,
}

impl Encoder {
    /// The encoder of a stream answering `req` in `dialect`, as SSE.
    pub fn new(dialect: Dialect, id: &str, model: &str, req: &ChatRequest) -> Self {
        let include_usage = req.include_usage;
        let inner =
            match dialect {
                Dialect::OpenAi => Dialects::OpenAi(hale_proto::openai::StreamEncoder::new(
                    id,
                    model,
                    include_usage,
                )),
                Dialect::Anthropic => Dialects::Anthropic(
                    hale_proto::anthropic::StreamEncoder::new(id, model, include_usage),
                ),
                Dialect::Responses => Dialects::Responses(
                    hale_proto::responses::StreamEncoder::new(id, model, include_usage)
                        .with_custom_tools(hale_proto::responses::custom_tools(req)),
                ),
                Dialect::Gemini => Dialects::Gemini(hale_proto::gemini::StreamEncoder::new(
                    id,
                    model,
                    include_usage,
                )),
                Dialect::Bedrock => Dialects::Bedrock(hale_proto::bedrock::StreamEncoder::new(
                    id,
                    model,
                    include_usage,
                )),
            };
        Self {
            inner,
            framing: Framing::Sse,
            opened: false,
            closed: false,
        }
    }

    /// The same encoder, writing its frames as `framing` says.
    pub fn framed(mut self, framing: Framing) -> Self {
        self.framing = framing;
        self
    }

    /// The stream's content type.
    pub fn content_type(&self) -> &'static str {
        match self.framing {
            Framing::Sse => "text/event-stream",
            Framing::JsonArray => "application/json",
        }
    }

    /// The frames of one event, on the wire.
    pub fn encode(&mut self, ev: &StreamEvent) -> Bytes {
        let mut out = Vec::new();
        self.encode_into(ev, &mut out);
        Bytes::from(out)
    }

    /// [`Encoder::encode`], appended to `out`: the relay writes each event
    /// straight into the stream's body, without a buffer of its own.
    pub fn encode_into(&mut self, ev: &StreamEvent, out: &mut Vec<u8>) {
        let frames = match &mut self.inner {
            Dialects::OpenAi(e) => e.encode(ev),
            Dialects::Anthropic(e) => e.encode(ev),
            Dialects::Responses(e) => e.encode(ev),
            Dialects::Gemini(e) => e.encode(ev),
            Dialects::Bedrock(e) => e.encode(ev),
        };
        self.write(&frames, matches!(ev, StreamEvent::Done), out);
    }

    /// The in-band error event that ends a stream nothing could continue;
    /// `status` is what hale would have answered before the stream began.
    pub fn error(&mut self, status: u16, kind: &str, message: &str) -> Bytes {
        let frames = match &mut self.inner {
            Dialects::OpenAi(e) => e.error(kind, message),
            Dialects::Anthropic(e) => e.error(kind, message),
            Dialects::Responses(e) => e.error(kind, message),
            Dialects::Gemini(e) => e.error(status, kind, message),
            Dialects::Bedrock(e) => e.error(kind, message),
        };
        let mut out = Vec::new();
        self.write(&frames, true, &mut out);
        Bytes::from(out)
    }

    /// Appends `frames` to `out` as the framing writes them; `last` ends a JSON array.
    fn write(&mut self, frames: &[hale_proto::openai::SseFrame], last: bool, out: &mut Vec<u8>) {
        match self.framing {
            Framing::Sse => {
                out.reserve(frames.iter().map(|f| f.wire_len()).sum());
                for f in frames {
                    f.write_wire(out);
                }
            }
            Framing::JsonArray => {
                if self.closed {
                    return;
                }
                for f in frames {
                    out.extend_from_slice(if self.opened {
                        b",\r\n".as_slice()
                    } else {
                        b"[".as_slice()
                    });
                    self.opened = true;
                    out.extend_from_slice(f.data.as_bytes());
                }
                if last {
                    if !self.opened {
                        out.push(b'[');
                        self.opened = true;
                    }
                    out.push(b']');
                    self.closed = true;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hale_proto::{StopReason, Usage};
    use serde_json::Value;

    fn gemini_req() -> ChatRequest {
        hale_proto::gemini::parse_request(
            &serde_json::json!({"contents": [{"parts": [{"text": "hi"}]}]}),
            "m",
            true,
        )
        .unwrap()
    }

    /// Gemini without `alt=sse`: one JSON array of the chunks, closed by
    /// the end — or by an in-band error, which is its last element.
    #[test]
    fn a_json_array_stream_is_one_array_of_chunks() {
        let req = gemini_req();
        let mut e = Encoder::new(Dialect::Gemini, "t", "m", &req).framed(Framing::JsonArray);
        assert_eq!(e.content_type(), "application/json");
        let mut wire = Vec::new();
        for ev in [
            StreamEvent::Start {
                id: "t".into(),
                model: "m".into(),
            },
            StreamEvent::TextDelta("a".into()),
            StreamEvent::TextDelta("b".into()),
            StreamEvent::Finish(StopReason::EndTurn),
            StreamEvent::Usage(Usage {
                input_tokens: 1,
                output_tokens: 2,
            }),
            StreamEvent::Done,
        ] {
            wire.extend_from_slice(&e.encode(&ev));
        }
        let v: Value = serde_json::from_slice(&wire).expect("one JSON array");
        let chunks = v.as_array().unwrap();
        assert_eq!(chunks.len(), 3, "{v}");
        assert_eq!(
            chunks[0]["candidates"][0]["content"]["parts"][0]["text"],
            "a"
        );
        assert_eq!(chunks[2]["candidates"][0]["finishReason"], "STOP");
        assert!(e.encode(&StreamEvent::Done).is_empty());

        let mut e = Encoder::new(Dialect::Gemini, "t", "m", &req).framed(Framing::JsonArray);
        let mut wire = e.encode(&StreamEvent::TextDelta("a".into())).to_vec();
        wire.extend_from_slice(&e.error(503, "stream_broken", "cut"));
        let v: Value = serde_json::from_slice(&wire).expect("one JSON array");
        assert_eq!(v[1]["error"]["status"], "UNAVAILABLE", "{v}");
        // An error before any chunk is still an array.
        let mut e = Encoder::new(Dialect::Gemini, "t", "m", &req).framed(Framing::JsonArray);
        let v: Value = serde_json::from_slice(&e.error(503, "x", "y")).unwrap();
        assert_eq!(v.as_array().map(Vec::len), Some(1));
    }
}
