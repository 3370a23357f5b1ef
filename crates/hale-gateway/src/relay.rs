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
//!
//! A stream that crawls — content still arriving, far below its deployment's
//! usual rate for long — is a break too (`stream_crawling`): each serving
//! attempt's content is judged as it arrives ([`hale_core::crawl`], the
//! deployment's usual rate from [`crate::paces`]); what came with the
//! arrival that decided it is relayed, then the attempt is dropped (its
//! connection closed) and the stream resumed as a cut one is. A stream that
//! finishes teaches its deployment's usual rate.

use crate::turn::{self, Env, Served, Turn};
use crate::upstream::{EventStream, Failure};
use crate::wire::Encoder;
use bytes::Bytes;
use futures::{FutureExt, StreamExt};
use hale_core::classify::Transport;
use hale_core::config::FINISH_GRACE;
use hale_core::crawl::{CrawlWatch, Pace};
use hale_core::resume::{self, ToolAligned, ToolEvent, align};
use hale_proto::{ChatRequest, StopReason, StreamEvent, Usage};
use std::collections::VecDeque;
use std::ops::ControlFlow;
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
    served: usize,
    live: turn::Live,
    enc: Encoder,
    tx: mpsc::Sender<Result<Bytes, std::convert::Infallible>>,
) -> Relayed {
    let crawl = Crawl::start(env, &turn.targets[served], &live.head);
    let mut r = Relay {
        env,
        out: Sink {
            tx,
            body: Vec::new(),
            unsent: 0,
            gone: false,
        },
        enc,
        pending: live.head.into(),
        stream: live.rest,
        served,
        model: turn.targets[served].model.clone(),
        delivered: String::new(),
        tool_calls: Vec::new(),
        started: false,
        upstream_id: None,
        finish: None,
        usage: None,
        skip: String::new(),
        tool_names: Vec::new(),
        tool_skip: Vec::new(),
        resumes: 0,
        attempt_start: Instant::now(),
        crawl,
    };
    // Malformed chunks skipped before the first content count too.
    env.emit.metrics.malformed_chunks(live.malformed);
    let failure: Option<Failure> = loop {
        let ev = match r.pending.pop_front() {
            Some(ev) => ev,
            None => match r.read().await {
                Read::More => continue,
                Read::Ended => break None,
                // The stream broke mid-answer: resume it, or end with an in-band error.
                Read::Broke(fault) => match r.resume(turn, req, fault).await {
                    Ok(()) => continue,
                    Err(fault) => break Some(fault),
                },
            },
        };
        if let ControlFlow::Break(end) = r.forward(&turn.id, ev) {
            break end;
        }
    };
    r.close(req, failure).await
}

/// A relay in progress: the caller's end, the upstream being read, and what
/// was delivered (to align a resumed answer with it).
struct Relay<'a> {
    env: Env<'a>,
    out: Sink,
    enc: Encoder,
    /// Events read and not yet relayed.
    pending: VecDeque<StreamEvent>,
    stream: EventStream,
    /// The target serving now.
    served: usize,
    model: String,
    /// The answer's text delivered so far.
    delivered: String,
    tool_calls: Vec<crate::guard::CallSeen>,
    /// The stream's opening was sent.
    started: bool,
    upstream_id: Option<String>,
    finish: Option<StopReason>,
    usage: Option<Usage>,
    /// Delivered text a resumed answer has not repeated yet.
    skip: String,
    // The calls delivered before the last break (their names) and, per call,
    // the delivered arguments the resumed answer has not repeated yet.
    tool_names: Vec<String>,
    tool_skip: Vec<String>,
    resumes: u32,
    attempt_start: Instant,
    /// The serving attempt's pace, judged for a crawl.
    crawl: Crawl,
}

/// The serving attempt's progress, judged for a crawl at each arrival of
/// content ([`hale_core::crawl`]).
struct Crawl {
    /// Its deployment (`provider/model`), taught when the stream finishes.
    deployment: String,
    watch: CrawlWatch,
    /// The deployment's usual rate when the attempt started serving;
    /// `None`: not judged (crawling off, or too little history).
    usual: Option<f64>,
    /// A crawl found: the attempt fails at the next read, once what came
    /// with the arrival that decided it is relayed.
    found: Option<Failure>,
}

impl Crawl {
    /// An attempt on `target` that started serving with `head`, its first content.
    fn start(env: Env<'_>, target: &hale_core::config::Target, head: &[StreamEvent]) -> Self {
        let deployment = crate::deployments::key(target);
        let now = Instant::now();
        Self {
            usual: env.paces.usual(&deployment, now),
            watch: CrawlWatch::start(now, content_bytes(head)),
            deployment,
            found: None,
        }
    }

    /// Content arrived (`evs`); a crawl, when the rule finds one, is kept in `found`.
    /// After a finish nothing is judged: the answer is complete.
    fn judge(&mut self, env: Env<'_>, evs: &[StreamEvent], finished: bool) {
        let bytes = content_bytes(evs);
        if bytes == 0 || finished {
            return;
        }
        let pace = self
            .watch
            .progress(Instant::now(), bytes, self.usual, env.paces.config());
        match pace {
            Pace::Crawling(c) => {
                let mut f = Failure::transport(Transport::StreamCrawling, "");
                f.message = c.describe();
                self.found = Some(f);
            }
            Pace::Unjudged | Pace::Flowing | Pace::Slow { .. } => {}
        }
    }
}

/// The content an upstream's events carry, in bytes: text, tool-call names
/// and arguments, the strings of a block hale does not model (thinking).
fn content_bytes(evs: &[StreamEvent]) -> u64 {
    let n: usize = evs
        .iter()
        .map(|ev| match ev {
            StreamEvent::TextDelta(t) => t.len(),
            StreamEvent::ToolCallStart { name, .. } => name.len(),
            StreamEvent::ToolCallDelta { arguments, .. } => arguments.len(),
            // Its strings but the `type` (`thinking`, `signature`, `partial_json`).
            StreamEvent::OpaqueDelta { delta, .. } => delta.as_object().map_or(0, |o| {
                o.iter()
                    .filter(|(k, _)| *k != "type")
                    .filter_map(|(_, v)| v.as_str())
                    .map(str::len)
                    .sum()
            }),
            StreamEvent::Start { .. }
            | StreamEvent::Finish(_)
            | StreamEvent::Usage(_)
            | StreamEvent::Done
            | StreamEvent::OpaqueStart { .. } => 0,
        })
        .sum();
    n as u64
}

/// What reading the upstream gave when no event was pending.
enum Read {
    /// Events were queued (or a malformed chunk skipped).
    More,
    /// The stream ended after its finish.
    Ended,
    /// The stream broke mid-answer.
    Broke(Failure),
}

impl Relay<'_> {
    /// Reads the upstream: what is already there without waiting; before
    /// waiting, the caller is handed what was buffered.
    async fn read(&mut self) -> Read {
        if let Some(crawling) = self.crawl.found.take() {
            return Read::Broke(crawling);
        }
        let next = match self.stream.next().now_or_never() {
            Some(n) => n,
            None => {
                self.out.flush().await;
                if self.finish.is_some() {
                    // After a finish, a missing [DONE] must not hold the caller.
                    tokio::time::timeout(FINISH_GRACE, self.stream.next())
                        .await
                        .unwrap_or_default()
                } else {
                    self.stream.next().await
                }
            }
        };
        match next {
            Some(Ok(Some(evs))) => {
                let finished = self.finish.is_some()
                    || evs.iter().any(|e| matches!(e, StreamEvent::Finish(_)));
                self.crawl.judge(self.env, &evs, finished);
                self.pending.extend(evs);
                Read::More
            }
            Some(Ok(None)) => {
                self.env.emit.metrics.malformed_chunks(1);
                Read::More
            }
            None if self.finish.is_some() => Read::Ended,
            None => Read::Broke(Failure::transport(
                Transport::StreamEndedWithoutFinish,
                "stream ended without a finish",
            )),
            Some(Err(f)) => Read::Broke(f),
        }
    }

    /// After a break: the broken attempt fed back and its timeline row
    /// marked, then the attempt loop run again from the delivered text;
    /// `Err` is the failure the stream ends with.
    async fn resume(
        &mut self,
        turn: &mut Turn,
        req: &ChatRequest,
        fault: Failure,
    ) -> Result<(), Failure> {
        let env = self.env;
        let target = turn.targets[self.served].clone();
        turn::on_failure(
            env,
            turn,
            &target,
            &fault,
            self.attempt_start.elapsed(),
            false,
        );
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
            .attempt(&target, Some(fault.class), self.attempt_start.elapsed());
        if self.resumes >= MAX_RESUMES || self.out.gone {
            return Err(fault);
        }
        self.resumes += 1;
        turn.exhausted[self.served] = true;
        if turn.exhausted.iter().all(|e| *e) {
            // No other target: the same one may still finish the answer.
            turn.exhausted[self.served] = false;
        }
        self.out.flush().await;
        self.attempt_start = Instant::now();
        let resumed = turn::run(
            env,
            turn,
            req,
            Some(self.delivered.clone()),
            Some("resumed"),
        )
        .await;
        match resumed {
            Ok((idx, Served::Stream(l))) => {
                self.crawl = Crawl::start(env, &turn.targets[idx], &l.head);
                self.served = idx;
                self.model = turn.targets[idx].model.clone();
                self.skip = if turn.prefilled {
                    String::new()
                } else {
                    self.delivered.clone()
                };
                self.tool_names = self.tool_calls.iter().map(|c| c.1.clone()).collect();
                self.tool_skip = self.tool_calls.iter().map(|c| c.2.clone()).collect();
                self.usage = None;
                self.pending = l.head.into();
                self.stream = l.rest;
                env.emit.metrics.malformed_chunks(l.malformed);
                Ok(())
            }
            Ok((_, Served::Complete(_))) | Err(_) => Err(fault),
        }
    }

    /// Relays one event to the caller, aligned with what was delivered
    /// before a break; `Break` ends the stream (`Some`: with that failure).
    fn forward(&mut self, turn_id: &str, ev: StreamEvent) -> ControlFlow<Option<Failure>> {
        match ev {
            StreamEvent::Start { ref id, .. } => {
                if self.resumes == 0 && self.upstream_id.is_none() && !id.is_empty() {
                    self.upstream_id = Some(id.clone());
                }
                if !self.started {
                    self.started = true;
                    self.out.send(&mut self.enc, &ev);
                }
            }
            StreamEvent::TextDelta(t) => return self.text(turn_id, t),
            StreamEvent::ToolCallStart { .. } | StreamEvent::ToolCallDelta { .. } => {
                return self.tool_call(turn_id, ev);
            }
            // Blocks hale does not model (thinking, a server tool's call),
            // as the provider sent them, from the first serving attempt
            // only: after a resume, the continuation's own thinking would
            // be a second, unrelated block inside the answer.
            StreamEvent::OpaqueStart { .. } | StreamEvent::OpaqueDelta { .. } => {
                if self.resumes > 0 {
                    return ControlFlow::Continue(());
                }
                self.open_once(turn_id);
                self.out.send(&mut self.enc, &ev);
            }
            StreamEvent::Finish(r) => {
                if !self.skip.is_empty() || self.tool_skip.iter().any(|s| !s.is_empty()) {
                    return ControlFlow::Break(Some(Failure::transport(
                        Transport::StreamCut,
                        "the resumed answer ended before reaching what was delivered",
                    )));
                }
                self.finish = Some(r);
                self.out.send(&mut self.enc, &ev);
            }
            StreamEvent::Usage(u) => self.usage = Some(u),
            StreamEvent::Done => {
                if self.finish.is_some() {
                    return ControlFlow::Break(None);
                }
                // [DONE] without a finish is a cut in disguise.
                self.pending.clear();
                self.stream = Box::pin(futures::stream::empty());
            }
        }
        ControlFlow::Continue(())
    }

    /// A text delta, less the prefix a resumed answer repeats.
    fn text(&mut self, turn_id: &str, t: String) -> ControlFlow<Option<Failure>> {
        self.open_once(turn_id);
        let rest = match align(&mut self.skip, &t) {
            Some(rest) => rest,
            None => {
                return ControlFlow::Break(Some(Failure::transport(
                    Transport::StreamCut,
                    "the stream broke and the resumed answer did not match what was delivered",
                )));
            }
        };
        if !t.is_empty() && rest.len() == t.len() {
            // Nothing skipped (every delta but the first ones of
            // a resumed answer): the event goes as it came, its
            // text not copied again.
            self.delivered.push_str(&t);
            self.out.send(&mut self.enc, &StreamEvent::TextDelta(t));
        } else if !rest.is_empty() {
            self.delivered.push_str(rest);
            self.out
                .send(&mut self.enc, &StreamEvent::TextDelta(rest.to_owned()));
        }
        ControlFlow::Continue(())
    }

    /// A tool-call event, aligned call by call with the calls delivered
    /// before a break ([`align_tool`]), and noted for the guard.
    fn tool_call(&mut self, turn_id: &str, ev: StreamEvent) -> ControlFlow<Option<Failure>> {
        if !self.skip.is_empty() {
            return ControlFlow::Break(Some(Failure::transport(
                Transport::StreamCut,
                "the stream broke and the resumed answer did not match what was delivered",
            )));
        }
        let ev = match align_tool(ev, &self.tool_names, &mut self.tool_skip) {
            Aligned::Send(ev) => ev,
            Aligned::Repeat => return ControlFlow::Continue(()),
            Aligned::Contradicts => {
                return ControlFlow::Break(Some(Failure::transport(
                    Transport::StreamCut,
                    "the stream broke and the resumed tool call did not match what was delivered",
                )));
            }
        };
        self.open_once(turn_id);
        match &ev {
            StreamEvent::ToolCallStart { index, id, name } => {
                let i = *index as usize;
                if self.tool_calls.len() <= i {
                    self.tool_calls.resize(i + 1, Default::default());
                }
                self.tool_calls[i].0 = id.clone();
                self.tool_calls[i].1 = name.clone();
            }
            StreamEvent::ToolCallDelta { index, arguments } => {
                if let Some(c) = self.tool_calls.get_mut(*index as usize) {
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
        self.out.send(&mut self.enc, &ev);
        ControlFlow::Continue(())
    }

    /// Sends the stream's opening before its first content, once.
    fn open_once(&mut self, turn_id: &str) {
        open_once(
            &mut self.started,
            &mut self.out,
            &mut self.enc,
            turn_id,
            &self.model,
        );
    }

    /// The end of the relay: what was buffered handed over, and the closing
    /// frames (usage and `[DONE]`, or the in-band error) handed back unsent.
    async fn close(mut self, req: &ChatRequest, failure: Option<Failure>) -> Relayed {
        let usage = self.usage.unwrap_or_else(|| Usage {
            input_tokens: turn::input_tokens_estimate(req),
            output_tokens: u64::from(hale_tokens::Tokenizer::approximate(&self.delivered)),
        });
        self.out.flush().await;
        // The closing frames are handed back unsent, so the turn is journalled
        // before the caller sees the end of the stream.
        let tail = match &failure {
            None => {
                let mut t = Vec::new();
                self.enc.encode_into(&StreamEvent::Usage(usage), &mut t);
                self.enc.encode_into(&StreamEvent::Done, &mut t);
                Bytes::from(t)
            }
            Some(f) => self.enc.error(
                crate::error::HaleError::failure_status(f).as_u16(),
                f.class.as_str(),
                &f.message,
            ),
        };
        if failure.is_none() {
            // A finished stream teaches its deployment's usual rate.
            self.env
                .paces
                .finished(&self.crawl.deployment, &self.crawl.watch, Instant::now());
        }
        let mut body = self.out.body;
        body.extend_from_slice(&tail);
        // Success was fed back at the first content (turn::run); a break was fed back in `resume`.
        Relayed {
            served: self.served,
            model: self.model,
            usage,
            failure,
            resumes: self.resumes,
            body,
            tool_calls: self.tool_calls,
            tail: Closing {
                tx: self.out.tx,
                bytes: tail,
            },
            upstream_id: self.upstream_id,
        }
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
    use super::{Aligned, StreamEvent, align_tool, content_bytes};

    /// What the crawl rule counts as progress: what the model wrote, not
    /// the stream's framing.
    #[test]
    fn content_bytes_are_what_the_model_wrote() {
        let evs = vec![
            StreamEvent::Start {
                id: "x".into(),
                model: "m".into(),
            },
            StreamEvent::TextDelta("abc".into()),
            StreamEvent::ToolCallStart {
                index: 0,
                id: "call_0".into(),
                name: "edit".into(),
            },
            StreamEvent::ToolCallDelta {
                index: 0,
                arguments: "{}".into(),
            },
            StreamEvent::OpaqueDelta {
                dialect: hale_proto::Dialect::Anthropic,
                delta: serde_json::json!({"type": "thinking_delta", "thinking": "hmm"}),
            },
            StreamEvent::Finish(hale_proto::StopReason::EndTurn),
            StreamEvent::Done,
        ];
        assert_eq!(content_bytes(&evs), 3 + 4 + 2 + 3);
        assert_eq!(content_bytes(&evs[..1]), 0);
    }

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
