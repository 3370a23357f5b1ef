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
    CallIds, answer_failure, parse_stop_reason, part_of, parts_of, stop_reason, usage_json,
    usage_of,
};
use crate::anthropic::arguments_to_input;
use crate::canonical::{Dialect, Part, ProtoError, StopReason, StreamEvent, Usage};
use crate::json::{as_object, err, error_message, field};
use crate::sse::SseFrame;

/// Decodes a Gemini upstream stream.
#[derive(Debug, Default)]
pub struct StreamDecoder {
    started: bool,
    next_tool: CallIds,
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
        if let Some(r) = obj.get("responseId").and_then(Value::as_str) {
            self.next_tool.answer(r);
        }
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
        let raw_parts = co
            .get("content")
            .and_then(|c| c.get("parts"))
            .and_then(Value::as_array);
        if let Some(raw) = raw_parts {
            for (i, rp) in raw.iter().enumerate() {
                let path = format!("candidates[0].content.parts[{i}]");
                let Some(p) = part_of(rp, &path, &mut self.next_tool)? else {
                    continue;
                };
                // A signature on a text or call part goes just before it,
                // for a Gemini caller (no other dialect has one).
                if let Some(sig) = rp.get(SIGNATURE)
                    && !matches!(p, Part::Opaque { .. })
                {
                    out.push(StreamEvent::OpaqueStart {
                        dialect: Dialect::Gemini,
                        block: json!({ SIGNATURE: sig }),
                    });
                }
                self.push_part(p, &mut out);
            }
        } else {
            // Malformed content or parts: parts_of names the path.
            for p in parts_of(co, "candidates[0]", &mut self.next_tool)? {
                self.push_part(p, &mut out);
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

    fn push_part(&mut self, p: Part, out: &mut Vec<StreamEvent>) {
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
            // Thoughts and other parts: relayed to a Gemini caller only.
            Part::Opaque { dialect, value } => out.push(StreamEvent::OpaqueStart {
                dialect,
                block: value,
            }),
            Part::ToolResult { .. } => {}
        }
    }
}

/// The key of a part's thought signature.
const SIGNATURE: &str = "thoughtSignature";

/// Encodes canonical events as a Gemini stream, for a Gemini caller: each
/// text delta a chunk; a function call whole, in the closing chunk (Gemini
/// never splits one); the finish held until the usage that follows it, so
/// the last chunk carries `finishReason` and `usageMetadata` together, as
/// Google's does. Gemini's own parts (thoughts) pass as sent, and a
/// `thoughtSignature` rides on the part that follows it.
#[derive(Debug)]
pub struct StreamEncoder {
    id: String,
    model: String,
    /// (id, name, arguments, signature) of the calls not yet written.
    calls: Vec<(String, String, String, Option<Value>)>,
    /// A signature waiting for the part it belongs to.
    signature: Option<Value>,
    finish: Option<StopReason>,
    closed: bool,
}

impl StreamEncoder {
    pub fn new(id: &str, model: &str, _include_usage: bool) -> Self {
        Self {
            id: id.to_owned(),
            model: model.to_owned(),
            calls: Vec::new(),
            signature: None,
            finish: None,
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

    fn parts_chunk(&self, parts: Vec<Value>) -> SseFrame {
        self.chunk(
            Some(json!({"content": {"role": "model", "parts": parts}, "index": 0})),
            None,
        )
    }

    /// The closing chunk: the calls, the finish and the usage.
    fn closing(&mut self, usage: Option<Usage>) -> Vec<SseFrame> {
        let Some(r) = self.finish.take() else {
            return Vec::new();
        };
        let parts: Vec<Value> = self
            .calls
            .drain(..)
            .map(|(id, name, args, sig)| {
                let mut p = json!({"functionCall": {"id": id, "name": name, "args": arguments_to_input(&args)}});
                if let Some(sig) = sig {
                    p[SIGNATURE] = sig;
                }
                p
            })
            .collect();
        vec![self.chunk(
            Some(json!({"content": {"role": "model", "parts": parts}, "finishReason": stop_reason(r), "index": 0})),
            usage,
        )]
    }

    pub fn encode(&mut self, ev: &StreamEvent) -> Vec<SseFrame> {
        if self.closed {
            return Vec::new();
        }
        match ev {
            StreamEvent::TextDelta(t) => {
                let mut part = json!({"text": t});
                if let Some(sig) = self.signature.take() {
                    part[SIGNATURE] = sig;
                }
                vec![self.parts_chunk(vec![part])]
            }
            StreamEvent::ToolCallStart { id, name, .. } => {
                let sig = self.signature.take();
                self.calls
                    .push((id.clone(), name.clone(), String::new(), sig));
                Vec::new()
            }
            StreamEvent::ToolCallDelta { index, arguments } => {
                if let Some(c) = self.calls.get_mut(*index as usize) {
                    c.2.push_str(arguments);
                }
                Vec::new()
            }
            StreamEvent::Finish(r) => {
                self.finish = Some(*r);
                Vec::new()
            }
            StreamEvent::Usage(u) => self.closing(Some(*u)),
            StreamEvent::Done => {
                let out = self.closing(None);
                self.closed = true;
                out
            }
            StreamEvent::OpaqueStart {
                dialect: Dialect::Gemini,
                block,
            } => {
                let only_signature = block
                    .as_object()
                    .is_some_and(|o| o.len() == 1 && o.contains_key(SIGNATURE));
                if only_signature {
                    self.signature = block.get(SIGNATURE).cloned();
                    Vec::new()
                } else {
                    vec![self.parts_chunk(vec![block.clone()])]
                }
            }
            StreamEvent::Start { .. }
            | StreamEvent::OpaqueStart { .. }
            | StreamEvent::OpaqueDelta { .. } => Vec::new(),
        }
    }

    /// The in-band error that ends the stream, in Google's error shape
    /// (`code` the HTTP status hale would have answered).
    pub fn error(&mut self, code: u16, kind: &str, message: &str) -> Vec<SseFrame> {
        if self.closed {
            return Vec::new();
        }
        self.closed = true;
        vec![SseFrame {
            event: None,
            data: super::render_error(code, kind, message, json!({})).to_string(),
        }]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
                    id: "call_gemini_r1_0".into(),
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
            StreamEvent::Usage(Usage {
                input_tokens: 3,
                output_tokens: 4,
            }),
            StreamEvent::Done,
        ] {
            for f in e.encode(&ev) {
                got.extend(d.decode(&f.data).unwrap());
            }
        }
        assert!(got.contains(&StreamEvent::Usage(Usage {
            input_tokens: 3,
            output_tokens: 4
        })));
        assert!(got.contains(&StreamEvent::TextDelta("a".into())));
        assert!(got.contains(&StreamEvent::ToolCallDelta {
            index: 0,
            arguments: "{\"k\":2}".into()
        }));
        assert!(got.contains(&StreamEvent::Finish(StopReason::ToolUse)));
    }

    /// The last chunk carries the calls, the finish and the usage together
    /// (Google's own streams end so, and clients read the usage there); a
    /// thought passes as sent and a signature rides on the call after it.
    #[test]
    fn the_closing_chunk_holds_finish_and_usage_and_signatures_ride_along() {
        let mut e = StreamEncoder::new("r1", "m", true);
        let mut frames = Vec::new();
        for ev in [
            StreamEvent::OpaqueStart {
                dialect: Dialect::Gemini,
                block: json!({"text": "hmm", "thought": true}),
            },
            StreamEvent::TextDelta("a".into()),
            StreamEvent::OpaqueStart {
                dialect: Dialect::Gemini,
                block: json!({"thoughtSignature": "c2ln"}),
            },
            StreamEvent::ToolCallStart {
                index: 0,
                id: "c1".into(),
                name: "t".into(),
            },
            StreamEvent::ToolCallDelta {
                index: 0,
                arguments: "{}".into(),
            },
            StreamEvent::Finish(StopReason::ToolUse),
        ] {
            frames.extend(e.encode(&ev));
        }
        assert_eq!(frames.len(), 2, "the finish waits for the usage");
        let thought: Value = serde_json::from_str(&frames[0].data).unwrap();
        assert_eq!(
            thought["candidates"][0]["content"]["parts"][0]["thought"],
            true
        );
        let last = e.encode(&StreamEvent::Usage(Usage {
            input_tokens: 5,
            output_tokens: 6,
        }));
        assert_eq!(last.len(), 1);
        let v: Value = serde_json::from_str(&last[0].data).unwrap();
        assert_eq!(v["candidates"][0]["finishReason"], "STOP");
        assert_eq!(v["usageMetadata"]["totalTokenCount"], 11);
        let call = &v["candidates"][0]["content"]["parts"][0];
        assert_eq!(call["functionCall"]["name"], "t");
        assert_eq!(call["thoughtSignature"], "c2ln");
        assert!(e.encode(&StreamEvent::Done).is_empty());
        // A stream the relay closes without usage still finishes.
        let mut e = StreamEncoder::new("r1", "m", true);
        assert!(
            e.encode(&StreamEvent::Finish(StopReason::EndTurn))
                .is_empty()
        );
        let v: Value = serde_json::from_str(&e.encode(&StreamEvent::Done)[0].data).unwrap();
        assert_eq!(v["candidates"][0]["finishReason"], "STOP");
        // The in-band error is Google's shape.
        let mut e = StreamEncoder::new("r1", "m", true);
        let v: Value = serde_json::from_str(&e.error(503, "stream_broken", "cut")[0].data).unwrap();
        assert_eq!(v["error"]["code"], 503);
        assert_eq!(v["error"]["status"], "UNAVAILABLE");
    }

    /// A provider's signature and thought reach a Gemini caller's stream.
    #[test]
    fn signatures_and_thoughts_decode_as_gemini_opaque_events() {
        let mut d = StreamDecoder::new();
        let evs = d
            .decode(r#"{"candidates":[{"content":{"role":"model","parts":[{"text":"plan","thought":true},{"functionCall":{"name":"f","args":{}},"thoughtSignature":"c2ln"}]},"finishReason":"STOP"}]}"#)
            .unwrap();
        assert!(
            matches!(&evs[1], StreamEvent::OpaqueStart { dialect: Dialect::Gemini, block } if block["thought"] == true),
            "{evs:?}"
        );
        assert!(
            matches!(&evs[2], StreamEvent::OpaqueStart { dialect: Dialect::Gemini, block } if block == &json!({"thoughtSignature": "c2ln"})),
            "{evs:?}"
        );
        assert!(matches!(&evs[3], StreamEvent::ToolCallStart { name, .. } if name == "f"));
    }
}
