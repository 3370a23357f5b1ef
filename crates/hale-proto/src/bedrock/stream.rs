//! ConverseStream events: decoding a provider's events (each one's type
//! and JSON payload, after the binary framing is taken off) into canonical
//! stream events, and an encoder for `hale_gateway::wire`'s exhaustive matches.

use std::collections::HashMap;

use serde_json::{Value, json};

use super::response::{parse_stop_reason, stop_reason, usage_of};
use crate::canonical::{ProtoError, StreamEvent};
use crate::json::{as_object, err, field};
use crate::sse::SseFrame;

/// Decodes a ConverseStream.
#[derive(Debug, Default)]
pub struct StreamDecoder {
    started: bool,
    /// `contentBlockIndex` of a tool-use block → its canonical tool index.
    tools: HashMap<u64, u32>,
    next_tool: u32,
}

impl StreamDecoder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Decodes one event of type `event` (`messageStart`,
    /// `contentBlockStart`, `contentBlockDelta`, `contentBlockStop`,
    /// `messageStop`, `metadata`) with its JSON `payload`.
    pub fn decode(&mut self, event: &str, payload: &[u8]) -> Result<Vec<StreamEvent>, ProtoError> {
        let v: Value = serde_json::from_slice(payload).map_err(|e| err("", e.to_string()))?;
        let obj = as_object(&v, "")?;
        let mut out = Vec::new();
        if !self.started {
            self.started = true;
            out.push(StreamEvent::Start {
                id: String::new(),
                model: String::new(),
            });
        }
        let block = obj.get("contentBlockIndex").and_then(Value::as_u64);
        match event {
            "messageStart" | "contentBlockStop" => {}
            "contentBlockStart" => {
                if let Some(tu) = obj.get("start").and_then(|s| s.get("toolUse")) {
                    let to = as_object(tu, "start.toolUse")?;
                    let text = |k: &str| match field(to, k) {
                        Some(Value::String(s)) => Ok(s.clone()),
                        Some(_) | None => {
                            Err(err(format!("start.toolUse.{k}"), "must be a string"))
                        }
                    };
                    let (id, name) = (text("toolUseId")?, text("name")?);
                    let index = self.next_tool;
                    self.next_tool += 1;
                    self.tools.insert(block.unwrap_or(u64::MAX), index);
                    out.push(StreamEvent::ToolCallStart { index, id, name });
                }
            }
            "contentBlockDelta" => {
                let delta = field(obj, "delta").ok_or_else(|| err("delta", "missing `delta`"))?;
                let d = as_object(delta, "delta")?;
                if let Some(t) = field(d, "text") {
                    let t = t
                        .as_str()
                        .ok_or_else(|| err("delta.text", "must be a string"))?;
                    if !t.is_empty() {
                        out.push(StreamEvent::TextDelta(t.to_owned()));
                    }
                } else if let Some(tu) = field(d, "toolUse") {
                    let input = tu
                        .get("input")
                        .and_then(Value::as_str)
                        .ok_or_else(|| err("delta.toolUse.input", "must be a string"))?;
                    let index = *self
                        .tools
                        .get(&block.unwrap_or(u64::MAX))
                        .ok_or_else(|| err("contentBlockIndex", "a tool delta of no tool block"))?;
                    if !input.is_empty() {
                        out.push(StreamEvent::ToolCallDelta {
                            index,
                            arguments: input.to_owned(),
                        });
                    }
                }
                // `reasoningContent` deltas have no form in another dialect's stream.
            }
            "messageStop" => {
                let reason = obj
                    .get("stopReason")
                    .and_then(Value::as_str)
                    .ok_or_else(|| err("stopReason", "missing `stopReason`"))?;
                out.push(StreamEvent::Finish(parse_stop_reason(reason)));
            }
            "metadata" => {
                if let Some(u) = obj.get("usage").and_then(Value::as_object) {
                    out.push(StreamEvent::Usage(usage_of(Some(u))));
                }
                out.push(StreamEvent::Done);
            }
            other => return Err(err("", format!("unknown ConverseStream event `{other}`"))),
        }
        Ok(out)
    }
}

/// Encodes canonical events as ConverseStream events, one SSE frame each
/// (event name the Converse event type). No client speaks Converse; this
/// exists so every dialect has an encoder.
#[derive(Debug, Default)]
pub struct StreamEncoder {
    block: u64,
    closed: bool,
}

impl StreamEncoder {
    pub fn new(_id: &str, _model: &str, _include_usage: bool) -> Self {
        Self::default()
    }

    fn frame(event: &'static str, v: Value) -> SseFrame {
        SseFrame {
            event: Some(event),
            data: v.to_string(),
        }
    }

    pub fn encode(&mut self, ev: &StreamEvent) -> Vec<SseFrame> {
        if self.closed {
            return Vec::new();
        }
        match ev {
            StreamEvent::Start { .. } => {
                vec![Self::frame("messageStart", json!({"role": "assistant"}))]
            }
            StreamEvent::TextDelta(t) => vec![Self::frame(
                "contentBlockDelta",
                json!({"contentBlockIndex": self.block, "delta": {"text": t}}),
            )],
            StreamEvent::ToolCallStart { id, name, .. } => {
                self.block += 1;
                vec![Self::frame(
                    "contentBlockStart",
                    json!({"contentBlockIndex": self.block, "start": {"toolUse": {"toolUseId": id, "name": name}}}),
                )]
            }
            StreamEvent::ToolCallDelta { arguments, .. } => vec![Self::frame(
                "contentBlockDelta",
                json!({"contentBlockIndex": self.block, "delta": {"toolUse": {"input": arguments}}}),
            )],
            StreamEvent::Finish(r) => vec![Self::frame(
                "messageStop",
                json!({"stopReason": stop_reason(*r)}),
            )],
            StreamEvent::Usage(u) => vec![Self::frame(
                "metadata",
                json!({"usage": {"inputTokens": u.input_tokens, "outputTokens": u.output_tokens}}),
            )],
            StreamEvent::Done => {
                self.closed = true;
                Vec::new()
            }
            StreamEvent::OpaqueStart { .. } | StreamEvent::OpaqueDelta { .. } => Vec::new(),
        }
    }

    /// The in-band error that ends the stream, in Bedrock's exception shape.
    pub fn error(&mut self, kind: &str, message: &str) -> Vec<SseFrame> {
        if self.closed {
            return Vec::new();
        }
        self.closed = true;
        vec![Self::frame(
            "exception",
            json!({"__type": kind, "message": message}),
        )]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::canonical::{StopReason, Usage};

    #[test]
    fn events_decode_to_canonical_events() {
        let mut d = StreamDecoder::new();
        let mut all = Vec::new();
        for (ev, p) in [
            ("messageStart", r#"{"role":"assistant","p":"abc"}"#),
            (
                "contentBlockDelta",
                r#"{"contentBlockIndex":0,"delta":{"text":"Hi"}}"#,
            ),
            ("contentBlockStop", r#"{"contentBlockIndex":0}"#),
            (
                "contentBlockStart",
                r#"{"contentBlockIndex":1,"start":{"toolUse":{"toolUseId":"t1","name":"look"}}}"#,
            ),
            (
                "contentBlockDelta",
                r#"{"contentBlockIndex":1,"delta":{"toolUse":{"input":"{\"x\":"}}}"#,
            ),
            (
                "contentBlockDelta",
                r#"{"contentBlockIndex":1,"delta":{"toolUse":{"input":"1}"}}}"#,
            ),
            ("messageStop", r#"{"stopReason":"tool_use"}"#),
            (
                "metadata",
                r#"{"usage":{"inputTokens":3,"outputTokens":4},"metrics":{"latencyMs":1}}"#,
            ),
        ] {
            all.extend(d.decode(ev, p.as_bytes()).unwrap());
        }
        assert_eq!(
            all,
            vec![
                StreamEvent::Start {
                    id: String::new(),
                    model: String::new()
                },
                StreamEvent::TextDelta("Hi".into()),
                StreamEvent::ToolCallStart {
                    index: 0,
                    id: "t1".into(),
                    name: "look".into()
                },
                StreamEvent::ToolCallDelta {
                    index: 0,
                    arguments: "{\"x\":".into()
                },
                StreamEvent::ToolCallDelta {
                    index: 0,
                    arguments: "1}".into()
                },
                StreamEvent::Finish(StopReason::ToolUse),
                StreamEvent::Usage(Usage {
                    input_tokens: 3,
                    output_tokens: 4
                }),
                StreamEvent::Done,
            ]
        );
        let mut d = StreamDecoder::new();
        assert!(
            d.decode(
                "contentBlockDelta",
                br#"{"contentBlockIndex":5,"delta":{"toolUse":{"input":"x"}}}"#
            )
            .is_err()
        );
        assert!(d.decode("messageStop", b"[]").is_err());
        assert!(d.decode("somethingNew", b"{}").is_err());
    }
}
