//! An upstream Responses event stream without the socket.
//!
//! Arbitrary bytes, cut into chunks at arbitrary points, go through
//! `sse_stream::SseByteStream` (as the provider's body stream does), and
//! every event through `hale_proto::responses::StreamDecoder`; an event that does
//! not decode is classified as the upstream classifies a Responses error
//! (`responses::error_body` when it is an `error` or `response.failed`
//! event, else the data). The canonical events then go through the three
//! dialects' `StreamEncoder`s (as the relay writes them to a caller): what
//! they wrote must decode again without error, and the Responses stream
//! must number its events 0, 1, 2, … with one terminal event last.
//!
//! Input: the low 4 bits of byte 0 are `n`; the next `n` bytes are chunk
//! lengths (0 counts as 1), used in turn over the rest, which is the body.
//! Properties: nothing panics; the SSE events (and whether the body ended in
//! a decoding error) are the same whatever the cuts.
#![no_main]

use bytes::Bytes;
use futures::StreamExt;
use futures::executor::block_on;
use hale_core::classify::{self, Observation};
use hale_proto::{StreamEvent, anthropic, openai, responses};
use libfuzzer_sys::fuzz_target;
use sse_stream::{Sse, SseByteStream};
use std::time::SystemTime;

fn sse_events(chunks: Vec<Bytes>) -> (Vec<Sse>, bool) {
    let body = futures::stream::iter(chunks.into_iter().map(Ok::<_, std::io::Error>));
    let mut out = Vec::new();
    let mut failed = false;
    for item in block_on(SseByteStream::new(body).collect::<Vec<_>>()) {
        match item {
            Ok(ev) => out.push(ev),
            Err(_) => failed = true,
        }
    }
    (out, failed)
}

fn split(body: &[u8], lengths: &[u8]) -> Vec<Bytes> {
    let mut chunks = Vec::new();
    let mut rest = body;
    let mut i = 0;
    while !rest.is_empty() {
        let n = if lengths.is_empty() {
            rest.len()
        } else {
            usize::from(lengths[i % lengths.len()].max(1)).min(rest.len())
        };
        chunks.push(Bytes::copy_from_slice(&rest[..n]));
        rest = &rest[n..];
        i += 1;
    }
    chunks
}

fn decode(events: &[Sse]) -> Vec<StreamEvent> {
    let mut d = responses::StreamDecoder::new();
    let mut out = Vec::new();
    for ev in events {
        let Some(data) = ev.data.as_deref() else {
            continue;
        };
        let event = ev.event.as_deref();
        match d.decode(event, data) {
            Ok(evs) => out.extend(evs),
            Err(_) => {
                let body = responses::error_body(event, data);
                let c = classify::classify(&Observation {
                    status: None,
                    retry_after: None,
                    body: Some(body.as_deref().unwrap_or(data)),
                    transport: None,
                    now_wall: SystemTime::UNIX_EPOCH,
                });
                let _ = classify::rule(c.class);
            }
        }
    }
    out
}

/// Decodes `wire` with a decoder of the dialect that wrote it.
fn decodes(wire: &str, mut decode: impl FnMut(Option<&str>, &str) -> Result<(), String>) {
    let (events, failed) = sse_events(vec![Bytes::from(wire.to_owned())]);
    assert!(!failed, "hale's stream is not valid SSE:\n{wire}");
    for ev in &events {
        if let Err(e) = decode(ev.event.as_deref(), ev.data.as_deref().unwrap_or("")) {
            panic!("hale's stream does not decode ({e}):\n{wire}");
        }
    }
}

fn encode_and_check(events: &[StreamEvent]) {
    let mut wire = [String::new(), String::new(), String::new()];
    let mut oa = openai::StreamEncoder::new("chatcmpl-fuzz", "m", true).with_created(0);
    let mut an = anthropic::StreamEncoder::new("msg_fuzz", "m", true);
    let mut rs = responses::StreamEncoder::new("resp_fuzz", "m", true).with_created(0);
    for ev in events.iter().chain([&StreamEvent::Done]) {
        for f in oa.encode(ev) {
            wire[0].push_str(&f.to_wire());
        }
        for f in an.encode(ev) {
            wire[1].push_str(&f.to_wire());
        }
        for f in rs.encode(ev) {
            wire[2].push_str(&f.to_wire());
        }
    }
    let mut d = openai::StreamDecoder::new();
    decodes(&wire[0], |e, data| d.decode(e, data).map(drop).map_err(|e| e.to_string()));
    let mut d = anthropic::StreamDecoder::new();
    decodes(&wire[1], |e, data| d.decode(e, data).map(drop).map_err(|e| e.to_string()));
    let mut d = responses::StreamDecoder::new();
    let mut seq = 0u64;
    let mut ended = false;
    decodes(&wire[2], |e, data| {
        assert!(!ended, "an event after the terminal one:\n{}", wire[2]);
        let v: serde_json::Value = serde_json::from_str(data).map_err(|e| e.to_string())?;
        assert_eq!(v["sequence_number"], seq, "sequence numbers:\n{}", wire[2]);
        seq += 1;
        ended = matches!(
            v["type"].as_str(),
            Some("response.completed" | "response.incomplete")
        );
        d.decode(e, data).map(drop).map_err(|e| e.to_string())
    });
    assert!(ended, "no terminal event:\n{}", wire[2]);
}

fuzz_target!(|data: &[u8]| {
    let Some((&head, rest)) = data.split_first() else {
        return;
    };
    let n = usize::from(head & 0x0f).min(rest.len());
    let (lengths, body) = rest.split_at(n);

    let (whole, whole_failed) = sse_events(vec![Bytes::copy_from_slice(body)]);
    let (cut, cut_failed) = sse_events(split(body, lengths));
    assert_eq!(cut, whole, "the SSE events depend on where the body was cut");
    assert_eq!(cut_failed, whole_failed, "the SSE error depends on the cuts");

    encode_and_check(&decode(&cut));
});
