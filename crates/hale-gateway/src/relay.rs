//! The stream relay and mid-stream recovery (docs/operations.md, "What hale
//! does to a call": Streams).
//!
//! Events are relayed to the caller one by one as they arrive — nothing is
//! buffered beyond the event in hand. When the upstream breaks after content
//! reached the caller (cut, stall, error event, end without finish), the relay
//! runs the attempt loop again: a target that takes a prefill continues from
//! the delivered text; any other answers afresh and its output is aligned with
//! what was delivered, skipping that prefix. Tool calls are aligned the same
//! way, call by call: a call delivered before the break (even cut inside its
//! arguments) is not started again, and the resumed answer's arguments skip
//! what the caller already has, so a call's arguments reach the caller once,
//! whole. If nothing can continue the answer, or the resumed answer does not
//! match what was delivered, the stream ends with an in-band error event —
//! never `[DONE]` or a finish after a cut, so a truncated answer is never
//! presented as complete.
//!
//! Blocks hale does not model (an Anthropic thinking block with its
//! signature, a server tool's call) are relayed as the provider sent them,
//! from the first serving attempt only; a resumed answer is aligned on its
//! text and tool calls, and its own thinking is not relayed.

use crate::proto::{ChatRequest, StopReason, StreamEvent, Usage};
use crate::turn::{self, Env, Served, Turn};
use crate::upstream::{EventStream, Failure};
use crate::wire::Encoder;
use bytes::Bytes;
use futures::{FutureExt, StreamExt};
use hale_core::classify::Transport;
use hale_core::config::FINISH_GRACE;
use hale_core::resume::{self, ToolAligned, ToolEvent, align};
use std::collections::VecDeque;
use std::time::Instant;
use tokio::sync::mpsc;

/// How many times one turn may resume a broken stream.
pub const MAX_RESUMES: u32 = 3;

/// How a relayed stream ended.
pub struct Relayed {
    pub served: usize,
    pub model: String,
    pub usage: Usage,
    /// `None` = complete; otherwise the failure named in the in-band error.
    pub failure: Option<Failure>,
    pub resumes: u32,
    /// Every byte sent, kept for idempotent replays.
    pub body: Vec<u8>,
    /// The tool calls delivered (id, name, arguments), for the guard.
    pub tool_calls: Vec<crate::guard::CallSeen>,
    /// The closing frames, not yet sent.
    pub tail: Closing,
    /// The first serving attempt's own id of the stream (its `Start`).
    pub upstream_id: Option<String>,
}

/// Relays `live` to `tx`, resuming on failure. Returns when the stream ended.
pub async fn relay(
    env: Env<'_>,
    turn: &mut Turn,
    req: &ChatRequest,
    mut served: usize,
    live: turn::Live,
    mut enc: Encoder,
    tx: mpsc::Sender<Result<Bytes, std::convert::Infallible>>,
) -> Relayed {
    let mut out = Sink {
        tx,
        body: Vec::new(),
        unsent: 0,
        gone: false,
    };
    let mut pending: VecDeque<StreamEvent> = live.head.into();
    let mut stream: EventStream = live.rest;
    // Malformed chunks skipped before the first content count too.
    env.emit.metrics.malformed_chunks(live.malformed);
    let mut delivered = String::new();
    let mut tool_calls: Vec<crate::guard::CallSeen> = Vec::new();
    let mut started = false;
    let mut upstream_id: Option<String> = None;
    let mut finish: Option<StopReason> = None;
    let mut usage: Option<Usage> = None;
    let mut skip = String::new();
    // The calls delivered before the last break (their names) and, per call,
    // the delivered arguments the resumed answer has not repeated yet.
    let mut tool_names: Vec<String> = Vec::new();
    let mut tool_skip: Vec<String> = Vec::new();
    let mut resumes = 0u32;
    let mut model = turn.targets[served].model.clone();
    let mut attempt_start = Instant::now();

    let failure: Option<Failure> = 'relay: loop {
        let ev = match pending.pop_front() {
            Some(ev) => ev,
            None => {
                // Take what is already there without waiting; before waiting,
                // hand the caller what was buffered.
                let next = match stream.next().now_or_never() {
                    Some(n) => n,
                    None => {
                        out.flush().await;
                        if finish.is_some() {
                            // After a finish, a missing [DONE] must not hold the caller.
                            tokio::time::timeout(FINISH_GRACE, stream.next())
                                .await
                                .unwrap_or_default()
                        } else {
                            stream.next().await
                        }
                    }
                };
                let fault = match next {
                    Some(Ok(Some(evs))) => {
                        pending.extend(evs);
                        continue;
                    }
                    Some(Ok(None)) => {
                        env.emit.metrics.malformed_chunks(1);
                        continue;
                    }
                    None if finish.is_some() => break 'relay None,
                    None => Failure::transport(
                        Transport::StreamEndedWithoutFinish,
                        "stream ended without a finish",
                    ),
                    Some(Err(f)) => f,
                };
                // The stream broke mid-answer: resume it, or end with an in-band error.
                let target = turn.targets[served].clone();
                turn::on_failure(env, turn, &target, &fault, attempt_start.elapsed());
                // The attempt that was serving broke: its timeline row says so.
                let label = target.to_string();
                if let Some(row) = turn
                    .timeline
                    .iter_mut()
                    .rev()
                    .find(|r| r.target == label && r.class.is_none())
                {
                    row.class = Some(fault.class);
                    row.status = None;
                    row.message = Some(fault.message.clone());
                    row.duration_ms =
                        (turn.started.elapsed().as_millis() as u64).saturating_sub(row.start_ms);
                    row.resume = Some("broke mid-stream");
                }
                env.emit
                    .metrics
                    .attempt(&target, Some(fault.class), attempt_start.elapsed());
                if resumes >= MAX_RESUMES || out.gone {
                    break 'relay Some(fault);
                }
                resumes += 1;
                turn.exhausted[served] = true;
                if turn.exhausted.iter().all(|e| *e) {
                    // No other target: the same one may still finish the answer.
                    turn.exhausted[served] = false;
                }
                out.flush().await;
                attempt_start = Instant::now();
                let resumed =
                    turn::run(env, turn, req, Some(delivered.clone()), Some("resumed")).await;
                match resumed {
                    Ok((idx, Served::Stream(l))) => {
                        served = idx;
                        model = turn.targets[idx].model.clone();
                        skip = if turn.prefilled {
                            String::new()
                        } else {
                            delivered.clone()
                        };
                        tool_names = tool_calls.iter().map(|c| c.1.clone()).collect();
                        tool_skip = tool_calls.iter().map(|c| c.2.clone()).collect();
                        usage = None;
                        pending = l.head.into();
                        stream = l.rest;
                        env.emit.metrics.malformed_chunks(l.malformed);
                        continue;
                    }
                    Ok((_, Served::Complete(_))) | Err(_) => break 'relay Some(fault),
                }
            }
        };
        match ev {
            StreamEvent::Start { ref id, .. } => {
                if resumes == 0 && upstream_id.is_none() && !id.is_empty() {
                    upstream_id = Some(id.clone());
                }
                if !started {
                    started = true;
                    out.send(&mut enc, &ev);
                }
            }
            StreamEvent::TextDelta(t) => {
                open_once(&mut started, &mut out, &mut enc, &turn.id, &model);
                let rest = match align(&mut skip, &t) {
                    Some(rest) => rest,
                    None => {
                        break 'relay Some(Failure::transport(
                            Transport::StreamCut,
                            "the stream broke and the resumed answer did not match what was delivered",
                        ));
                    }
                };
                if !t.is_empty() && rest.len() == t.len() {
                    // Nothing skipped (every delta but the first ones of
                    // a resumed answer): the event goes as it came, its
                    // text not copied again.
                    delivered.push_str(&t);
                    out.send(&mut enc, &StreamEvent::TextDelta(t));
                } else if !rest.is_empty() {
                    delivered.push_str(rest);
                    out.send(&mut enc, &StreamEvent::TextDelta(rest.to_owned()));
                }
            }
            StreamEvent::ToolCallStart { .. } | StreamEvent::ToolCallDelta { .. } => {
                if !skip.is_empty() {
                    break 'relay Some(Failure::transport(
                        Transport::StreamCut,
                        "the stream broke and the resumed answer did not match what was delivered",
                    ));
                }
                let ev = match align_tool(ev, &tool_names, &mut tool_skip) {
                    Aligned::Send(ev) => ev,
                    Aligned::Repeat => continue,
                    Aligned::Contradicts => {
                        break 'relay Some(Failure::transport(
                            Transport::StreamCut,
                            "the stream broke and the resumed tool call did not match what was delivered",
                        ));
                    }
                };
                open_once(&mut started, &mut out, &mut enc, &turn.id, &model);
                match &ev {
                    StreamEvent::ToolCallStart { index, id, name } => {
                        let i = *index as usize;
                        if tool_calls.len() <= i {
                            tool_calls.resize(i + 1, Default::default());
                        }
                        tool_calls[i].0 = id.clone();
                        tool_calls[i].1 = name.clone();
                    }
                    StreamEvent::ToolCallDelta { index, arguments } => {
                        if let Some(c) = tool_calls.get_mut(*index as usize) {
                            c.2.push_str(arguments);
                        }
                    }
                    StreamEvent::Start { .. }
                    | StreamEvent::TextDelta(_)
                    | StreamEvent::Finish(_)
                    | StreamEvent::Usage(_)
                    | StreamEvent::Done
                    | StreamEvent::OpaqueStart { .. }
                    | StreamEvent::OpaqueDelta { .. } => {}
                }
                out.send(&mut enc, &ev);
            }
            // Blocks hale does not model (thinking, a server tool's call),
            // as the provider sent them, from the first serving attempt
            // only: after a resume, the continuation's own thinking would
            // be a second, unrelated block inside the answer.
            StreamEvent::OpaqueStart { .. } | StreamEvent::OpaqueDelta { .. } => {
                if resumes > 0 {
                    continue;
                }
                open_once(&mut started, &mut out, &mut enc, &turn.id, &model);
                out.send(&mut enc, &ev);
            }
            StreamEvent::Finish(r) => {
                if !skip.is_empty() || tool_skip.iter().any(|s| !s.is_empty()) {
                    break 'relay Some(Failure::transport(
                        Transport::StreamCut,
                        "the resumed answer ended before reaching what was delivered",
                    ));
                }
                finish = Some(r);
                out.send(&mut enc, &ev);
            }
            StreamEvent::Usage(u) => usage = Some(u),
            StreamEvent::Done => {
                if finish.is_some() {
                    break 'relay None;
                }
                // [DONE] without a finish is a cut in disguise.
                pending.clear();
                stream = Box::pin(futures::stream::empty());
            }
        }
    };

    let usage = usage.unwrap_or_else(|| Usage {
        input_tokens: input_tokens_estimate(req),
        output_tokens: u64::from(hale_tokens::Tokenizer::approximate(&delivered)),
    });
    out.flush().await;
    // The closing frames are handed back unsent, so the turn is journalled
    // before the caller sees the end of the stream.
    let tail = match &failure {
        None => {
            let mut t = Vec::new();
            enc.encode_into(&StreamEvent::Usage(usage), &mut t);
            enc.encode_into(&StreamEvent::Done, &mut t);
            Bytes::from(t)
        }
        Some(f) => enc.error(
            crate::error::HaleError::failure_status(f).as_u16(),
            f.class.as_str(),
            &f.message,
        ),
    };
    let mut body = out.body;
    body.extend_from_slice(&tail);
    // Success was fed back at the first content (turn::run); a break was fed back above.
    Relayed {
        served,
        model,
        usage,
        failure,
        resumes,
        body,
        tool_calls,
        tail: Closing {
            tx: out.tx,
            bytes: tail,
        },
        upstream_id,
    }
}

/// Sends the stream's opening (`Start`, with the turn's id and the serving
/// model) before its first content, once.
fn open_once(started: &mut bool, out: &mut Sink, enc: &mut Encoder, id: &str, model: &str) {
    if !*started {
        *started = true;
        let start = StreamEvent::Start {
            id: id.to_owned(),
            model: model.to_owned(),
        };
        out.send(enc, &start);
    }
}

/// The last frames of a relayed stream, sent by [`Closing::send`] once the turn is journalled.
pub struct Closing {
    tx: mpsc::Sender<Result<Bytes, std::convert::Infallible>>,
    bytes: Bytes,
}

impl Closing {
    /// Sends the closing frames (`[DONE]`, or the in-band error) and ends the stream.
    pub async fn send(self) {
        let _ = self.tx.send(Ok(self.bytes)).await;
    }
}

/// A rough input-token count, for a stream whose provider reported no usage.
pub(crate) fn input_tokens_estimate(req: &ChatRequest) -> u64 {
    let system = req
        .system
        .as_deref()
        .map_or(0, hale_tokens::Tokenizer::approximate);
    let messages: u64 = req
        .messages
        .iter()
        .map(|m| {
            u64::from(
                hale_tokens::Tokenizer::approximate(&m.joined_text())
                    + hale_tokens::TOKENS_PER_MESSAGE,
            )
        })
        .sum();
    u64::from(system) + messages
}

/// What becomes of a resumed answer's tool-call event.
#[derive(Debug, PartialEq)]
enum Aligned {
    /// Send this (a new call, or the new part of a delivered call's arguments).
    Send(StreamEvent),
    /// Nothing new: the start of a delivered call, or arguments delivered already.
    Repeat,
    /// The resumed answer differs from what was delivered.
    Contradicts,
}

/// Aligns a resumed answer's tool-call event with the calls delivered before
/// the break (`names` by index, `skips` what each one's arguments have not
/// repeated yet): the rule is [`resume::align_tool`]; this carries it out on
/// the stream event.
fn align_tool(ev: StreamEvent, names: &[String], skips: &mut [String]) -> Aligned {
    let (index, tool) = match &ev {
        StreamEvent::ToolCallStart { index, name, .. } => (
            *index,
            ToolEvent::Start {
                index: *index,
                name,
            },
        ),
        StreamEvent::ToolCallDelta { index, arguments } => (
            *index,
            ToolEvent::Delta {
                index: *index,
                arguments,
            },
        ),
        StreamEvent::Start { .. }
        | StreamEvent::TextDelta(_)
        | StreamEvent::Finish(_)
        | StreamEvent::Usage(_)
        | StreamEvent::Done
        | StreamEvent::OpaqueStart { .. }
        | StreamEvent::OpaqueDelta { .. } => return Aligned::Send(ev),
    };
    match resume::align_tool(tool, names, skips) {
        ToolAligned::Send => Aligned::Send(ev),
        // Only arguments are sent in part.
        ToolAligned::SendRest(rest) => Aligned::Send(StreamEvent::ToolCallDelta {
            index,
            arguments: rest.to_owned(),
        }),
        ToolAligned::Repeat => Aligned::Repeat,
        ToolAligned::Contradicts => Aligned::Contradicts,
    }
}

/// The caller's side of the stream. Frames are buffered while more upstream
/// events are ready at once and written together when the upstream would
/// block: one write per burst instead of one per token.
struct Sink {
    tx: mpsc::Sender<Result<Bytes, std::convert::Infallible>>,
    /// Everything sent, for idempotent replays.
    body: Vec<u8>,
    /// Bytes of `body` not yet handed to the caller.
    unsent: usize,
    gone: bool,
}

impl Sink {
    /// Writes `ev`'s frames into the body, to be handed over at the next flush.
    fn send(&mut self, enc: &mut Encoder, ev: &StreamEvent) {
        let before = self.body.len();
        enc.encode_into(ev, &mut self.body);
        self.unsent += self.body.len() - before;
    }

    /// Hands the buffered frames to the caller.
    async fn flush(&mut self) {
        if self.unsent == 0 {
            return;
        }
        let chunk = Bytes::copy_from_slice(&self.body[self.body.len() - self.unsent..]);
        self.unsent = 0;
        if !self.gone && self.tx.send(Ok(chunk)).await.is_err() {
            self.gone = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Aligned, StreamEvent, align_tool};

    /// The adapter sends the part of a delivered call's arguments the rule
    /// names, as an event of the same call (the rule's table is
    /// `hale_core::resume`'s).
    #[test]
    fn align_tool_sends_the_rest_of_a_delivered_call() {
        let names = vec!["edit_file".to_owned()];
        let mut skips = vec![r#"{"path":"a"#.to_owned()];
        let start = StreamEvent::ToolCallStart {
            index: 0,
            id: "call_0".into(),
            name: "edit_file".into(),
        };
        assert_eq!(align_tool(start, &names, &mut skips), Aligned::Repeat);
        let whole = StreamEvent::ToolCallDelta {
            index: 0,
            arguments: r#"{"path":"a.rs"}"#.into(),
        };
        assert_eq!(
            align_tool(whole, &names, &mut skips),
            Aligned::Send(StreamEvent::ToolCallDelta {
                index: 0,
                arguments: r#".rs"}"#.into(),
            })
        );
        let other = StreamEvent::ToolCallStart {
            index: 1,
            id: "call_1".into(),
            name: "x".into(),
        };
        assert_eq!(
            align_tool(other.clone(), &names, &mut skips),
            Aligned::Send(other)
        );
    }
}
