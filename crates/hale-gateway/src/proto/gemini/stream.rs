//! Gemini's stream (`streamGenerateContent?alt=sse`): every `data:` is a
//! whole `GenerateContentResponse` chunk. Decoding turns each into
//! canonical events; a function call arrives whole in one chunk, so it is a
//! [`StreamEvent::ToolCallStart`] and one [`StreamEvent::ToolCallDelta`]
//! with all its arguments. There is no end event: the chunk with a
//! `finishReason` is the finish, and the stream then closes.
//!
//! A chunk holding an `error`, a blocked prompt or a blocked candidate is
//! an `Err`: the upstream client classifies it (Google's error shape, or
//! [`super::answer_failure`]).

use serde_json::{Value, json};

use super::response::{
    answer_failure, parse_stop_reason, parts_of, stop_reason, usage_json, usage_of,
};
use crate::proto::anthropic::arguments_to_input;
use crate::proto::canonical::{Part, ProtoError, StreamEvent, Usage};
use crate::proto::json::{as_object, err, error_message, field};
use crate::proto::sse::SseFrame;

/// Decodes a Gemini upstream stream.
#[derive(Debug, Default)]
pub struct StreamDecoder {
    started: bool,
    next_tool: u32,
    /// Tool calls seen so far (a `STOP` after calls is a tool-use finish).
    tools: u32,
}

impl StreamDecoder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Decodes one chunk.
    pub fn decode(&mut self, data: &str) -> Result<Vec<StreamEvent>, ProtoError> {
        let data = data.trim();
        if data.is_empty() {
            return Ok(Vec::new());
        }
        let v: Value = serde_json::from_str(data).map_err(|e| err("", e.to_string()))?;
        let obj = as_object(&v, "")?;
        if let Some(e) = field(obj, "error") {
            return Err(err("error", error_message(e)));
        }
        if let Some(c) = answer_failure(&v) {
            return Err(err("candidates", c.message));
        }
        let mut out = Vec::new();
        if !self.started {
            self.started = true;
            out.push(StreamEvent::Start {
                id: obj
                    .get("responseId")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
                model: obj
                    .get("modelVersion")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
            });
        }
        let Some(cand) = field(obj, "candidates")
            .and_then(Value::as_array)
            .and_then(|c| c.first())
        else {
            return Ok(out);
        };
        let co = as_object(cand, "candidates[0]")?;
        for p in parts_of(co, "candidates[0]", &mut self.next_tool)? {
            match p {
                Part::Text { text } => out.push(StreamEvent::TextDelta(text)),
                Part::ToolCall {
                    id,
                    name,
                    arguments,
                } => {
                    let index = self.tools;
                    self.tools += 1;
                    out.push(StreamEvent::ToolCallStart { index, id, name });
                    out.push(StreamEvent::ToolCallDelta { index, arguments });
                }
                // Thoughts and other parts have no form in another dialect's stream.
                Part::Opaque { .. } | Part::ToolResult { .. } => {}
            }
        }
        if let Some(reason) = co.get("finishReason").and_then(Value::as_str) {
            // No usage reported: none is made up (hale estimates it).
            if let Some(u) = obj.get("usageMetadata").and_then(Value::as_object) {
                out.push(StreamEvent::Usage(usage_of(Some(u))));
            }
            out.push(StreamEvent::Finish(parse_stop_reason(
                reason,
                self.tools > 0,
            )));
        }
        Ok(out)
    }
}

/// Encodes canonical events as a Gemini stream (for a Gemini caller, a later step).
#[derive(Debug)]
pub struct StreamEncoder {
    id: String,
    model: String,
    calls: Vec<(String, String, String)>,
    closed: bool,
}

impl StreamEncoder {
    pub fn new(id: &str, model: &str, _include_usage: bool) -> Self {
        Self {
            id: id.to_owned(),
            model: model.to_owned(),
            calls: Vec::new(),
            closed: false,
        }
    }

    fn chunk(&self, cand: Option<Value>, usage: Option<Usage>) -> SseFrame {
        let mut v = json!({"modelVersion": self.model, "responseId": self.id});
        if let Some(c) = cand {
            v["candidates"] = json!([c]);
        }
        if let Some(u) = usage {
            v["usageMetadata"] = usage_json(u);
        }
        SseFrame {
            event: None,
            data: v.to_string(),
        }
    }

    pub fn encode(&mut self, ev: &StreamEvent) -> Vec<SseFrame> {
        if self.closed {
            return Vec::new();
        }
        match ev {
            StreamEvent::TextDelta(t) => vec![self.chunk(
                Some(json!({"content": {"role": "model", "parts": [{"text": t}]}, "index": 0})),
                None,
            )],
            StreamEvent::ToolCallStart { id, name, .. } => {
                self.calls.push((id.clone(), name.clone(), String::new()));
                Vec::new()
            }
            StreamEvent::ToolCallDelta { index, arguments } => {
                if let Some(c) = self.calls.get_mut(*index as usize) {
                    c.2.push_str(arguments);
                }
                Vec::new()
            }
            StreamEvent::Finish(r) => {
                let parts: Vec<Value> = self
                    .calls
                    .drain(..)
                    .map(|(id, name, args)| {
                        json!({"functionCall": {"id": id, "name": name, "args": arguments_to_input(&args)}})
                    })
                    .collect();
                vec![self.chunk(
                    Some(json!({"content": {"role": "model", "parts": parts}, "finishReason": stop_reason(*r), "index": 0})),
                    None,
                )]
            }
            StreamEvent::Usage(u) => vec![self.chunk(None, Some(*u))],
            StreamEvent::Done => {
                self.closed = true;
                Vec::new()
            }
            StreamEvent::Start { .. }
            | StreamEvent::OpaqueStart { .. }
            | StreamEvent::OpaqueDelta { .. } => Vec::new(),
        }
    }

    /// The in-band error that ends the stream, in Google's error shape.
    pub fn error(&mut self, kind: &str, message: &str) -> Vec<SseFrame> {
        if self.closed {
            return Vec::new();
        }
        self.closed = true;
        vec![SseFrame {
            event: None,
            data: json!({"error": {"status": kind, "message": message}}).to_string(),
        }]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::canonical::StopReason;

    #[test]
    fn chunks_decode_to_events() {
        let mut d = StreamDecoder::new();
        let evs = d
            .decode(r#"{"candidates":[{"content":{"role":"model","parts":[{"text":"Hel"}]},"index":0}],"modelVersion":"gemini-2.5-flash","responseId":"r1"}"#)
            .unwrap();
        assert_eq!(
            evs,
            vec![
                StreamEvent::Start {
                    id: "r1".into(),
                    model: "gemini-2.5-flash".into()
                },
                StreamEvent::TextDelta("Hel".into()),
            ]
        );
        let evs = d
            .decode(r#"{"candidates":[{"content":{"role":"model","parts":[{"functionCall":{"name":"look","args":{"x":1}}}]},"finishReason":"STOP","index":0}],"usageMetadata":{"promptTokenCount":9,"candidatesTokenCount":3,"thoughtsTokenCount":2}}"#)
            .unwrap();
        assert_eq!(
            evs,
            vec![
                StreamEvent::ToolCallStart {
                    index: 0,
                    id: "call_gemini_0".into(),
                    name: "look".into()
                },
                StreamEvent::ToolCallDelta {
                    index: 0,
                    arguments: "{\"x\":1}".into()
                },
                StreamEvent::Usage(Usage {
                    input_tokens: 9,
                    output_tokens: 5
                }),
                StreamEvent::Finish(StopReason::ToolUse),
            ]
        );
    }

    #[test]
    fn errors_blocks_and_garbage_are_errs() {
        let mut d = StreamDecoder::new();
        assert!(
            d.decode(r#"{"error":{"code":503,"status":"UNAVAILABLE","message":"overloaded"}}"#)
                .is_err()
        );
        assert!(
            d.decode(r#"{"candidates":[{"finishReason":"SAFETY","index":0}]}"#)
                .is_err()
        );
        assert!(
            d.decode(r#"{"promptFeedback":{"blockReason":"PROHIBITED_CONTENT"}}"#)
                .is_err()
        );
        assert!(d.decode("{not json").is_err());
        // A finish without usageMetadata reports no usage (not zeros).
        let evs = d
            .decode(r#"{"candidates":[{"finishReason":"STOP","index":0}]}"#)
            .unwrap();
        assert_eq!(evs.last(), Some(&StreamEvent::Finish(StopReason::EndTurn)));
        assert!(
            !evs.iter().any(|e| matches!(e, StreamEvent::Usage(_))),
            "{evs:?}"
        );
        assert_eq!(d.decode("").unwrap(), Vec::new());
    }

    /// What the encoder writes, the decoder reads back.
    #[test]
    fn the_encoder_round_trips() {
        let mut e = StreamEncoder::new("r1", "m", false);
        let mut d = StreamDecoder::new();
        let mut got = Vec::new();
        for ev in [
            StreamEvent::TextDelta("a".into()),
            StreamEvent::ToolCallStart {
                index: 0,
                id: "c1".into(),
                name: "t".into(),
            },
            StreamEvent::ToolCallDelta {
                index: 0,
                arguments: "{\"k\":".into(),
            },
            StreamEvent::ToolCallDelta {
                index: 0,
                arguments: "2}".into(),
            },
            StreamEvent::Finish(StopReason::ToolUse),
        ] {
            for f in e.encode(&ev) {
                got.extend(d.decode(&f.data).unwrap());
            }
        }
        assert!(got.contains(&StreamEvent::TextDelta("a".into())));
        assert!(got.contains(&StreamEvent::ToolCallDelta {
            index: 0,
            arguments: "{\"k\":2}".into()
        }));
        assert!(got.contains(&StreamEvent::Finish(StopReason::ToolUse)));
    }
}
