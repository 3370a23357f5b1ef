//! The upstream stream path of `hale_gateway::upstream` without the socket.
//!
//! Arbitrary bytes, cut into chunks at arbitrary points, go through
//! `sse_stream::SseByteStream` (as the provider's body stream does in
//! `upstream::event_stream`), and every event's data through both dialects'
//! `StreamDecoder`s; a chunk that does not decode is classified as upstream.rs
//! classifies an `event: error`. The canonical events then go through both
//! dialects' `StreamEncoder`s (as the relay writes them to the caller), and
//! what the encoders wrote must decode again without error.
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
use hale_proto::{StreamEvent, anthropic, openai};
use libfuzzer_sys::fuzz_target;
use sse_stream::{Sse, SseByteStream};
use std::time::SystemTime;

/// The SSE events of a body delivered as `chunks`, and whether it ended in an error.
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

/// Decodes with both dialects as upstream.rs does; returns the canonical events of each.
fn decode(events: &[Sse]) -> [Vec<StreamEvent>; 2] {
    let mut oa = openai::StreamDecoder::new();
    let mut an = anthropic::StreamDecoder::new();
    let mut out: [Vec<StreamEvent>; 2] = [Vec::new(), Vec::new()];
    for ev in events {
        let Some(data) = ev.data.as_deref() else {
            continue;
        };
        let event = ev.event.as_deref();
        for (i, decoded) in [oa.decode(event, data), an.decode(event, data)]
            .into_iter()
            .enumerate()
        {
            match decoded {
                Ok(evs) => out[i].extend(evs),
                Err(_) => {
                    let c = classify::classify(&Observation {
                        status: None,
                        retry_after: None,
                        body: Some(data),
                        transport: None,
                        now_wall: SystemTime::UNIX_EPOCH,
                    });
                    let _ = classify::rule(c.class);
                }
            }
        }
    }
    out
}

/// What hale writes to a caller for these events, in both dialects; each must decode cleanly.
fn encode_and_check(events: &[StreamEvent]) {
    let mut oa = openai::StreamEncoder::new("chatcmpl-fuzz", "m", true).with_created(0);
    let mut an = anthropic::StreamEncoder::new("msg_fuzz", "m", true);
    let mut wire = [String::new(), String::new()];
    for ev in events {
        for f in oa.encode(ev) {
            wire[0].push_str(&f.to_wire());
        }
        for f in an.encode(ev) {
            wire[1].push_str(&f.to_wire());
        }
    }
    let (oa_events, oa_failed) = sse_events(vec![Bytes::from(wire[0].clone())]);
    assert!(
        !oa_failed,
        "hale's OpenAI stream is not valid SSE:\n{}",
        wire[0]
    );
    let mut dec = openai::StreamDecoder::new();
    for ev in &oa_events {
        let data = ev.data.as_deref().unwrap_or("");
        if let Err(e) = dec.decode(ev.event.as_deref(), data) {
            panic!("hale's OpenAI stream does not decode ({e}):\n{}", wire[0]);
        }
    }
    let (an_events, an_failed) = sse_events(vec![Bytes::from(wire[1].clone())]);
    assert!(
        !an_failed,
        "hale's Anthropic stream is not valid SSE:\n{}",
        wire[1]
    );
    let mut dec = anthropic::StreamDecoder::new();
    for ev in &an_events {
        let data = ev.data.as_deref().unwrap_or("");
        if let Err(e) = dec.decode(ev.event.as_deref(), data) {
            panic!(
                "hale's Anthropic stream does not decode ({e}):\n{}",
                wire[1]
            );
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&head, rest)) = data.split_first() else {
        return;
    };
    let n = usize::from(head & 0x0f).min(rest.len());
    let (lengths, body) = rest.split_at(n);

    let (whole, whole_failed) = sse_events(vec![Bytes::copy_from_slice(body)]);
    let (cut, cut_failed) = sse_events(split(body, lengths));
    assert_eq!(
        cut, whole,
        "the SSE events depend on where the body was cut"
    );
    assert_eq!(
        cut_failed, whole_failed,
        "the SSE error depends on the cuts"
    );

    for canonical in decode(&cut) {
        encode_and_check(&canonical);
    }
});
