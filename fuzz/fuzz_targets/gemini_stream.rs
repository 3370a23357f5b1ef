//! An upstream Gemini stream (`streamGenerateContent?alt=sse`) without the
//! socket.
//!
//! Arbitrary bytes, cut into chunks at arbitrary points, go through
//! `sse_stream::SseByteStream` (as the provider's body stream does), and
//! every event's data through `hale_proto::gemini::StreamDecoder`. The canonical
//! events then go through the Gemini, OpenAI and Anthropic
//! `StreamEncoder`s (as the relay writes them to a caller, closing with
//! usage and the end): what the Gemini encoder wrote must decode again
//! without error, and the text it carries is the text decoded.
//!
//! Input: the low 4 bits of byte 0 are `n`; the next `n` bytes are chunk
//! lengths (0 counts as 1), used in turn over the rest, which is the body.
//! Properties: nothing panics; the SSE events (and whether the body ended in
//! a decoding error) are the same whatever the cuts.
#![no_main]

use bytes::Bytes;
use futures::StreamExt;
use futures::executor::block_on;
use hale_proto::{StreamEvent, Usage, anthropic, gemini, openai};
use libfuzzer_sys::fuzz_target;
use sse_stream::{Sse, SseByteStream};

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

/// The text of a list of events.
fn text(events: &[StreamEvent]) -> String {
    events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::TextDelta(t) => Some(t.as_str()),
            _ => None,
        })
        .collect()
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

    // Decoded as upstream.rs does: a chunk that does not decode ends the stream.
    let mut dec = gemini::StreamDecoder::new();
    let mut events = Vec::new();
    for ev in &cut {
        let Some(data) = ev.data.as_deref() else {
            continue;
        };
        match dec.decode(data) {
            Ok(evs) => events.extend(evs),
            Err(_) => break,
        }
    }
    // The relay's tail: usage, then the end.
    events.push(StreamEvent::Usage(Usage {
        input_tokens: 1,
        output_tokens: 2,
    }));
    events.push(StreamEvent::Done);

    let mut ge = gemini::StreamEncoder::new("r", "m", true);
    let mut oa = openai::StreamEncoder::new("chatcmpl-fuzz", "m", true).with_created(0);
    let mut an = anthropic::StreamEncoder::new("msg_fuzz", "m", true);
    let mut wire = String::new();
    for ev in &events {
        for f in ge.encode(ev) {
            wire.push_str(&f.to_wire());
        }
        let _ = oa.encode(ev);
        let _ = an.encode(ev);
    }
    let (again, failed) = sse_events(vec![Bytes::from(wire.clone())]);
    assert!(!failed, "hale's Gemini stream is not valid SSE:\n{wire}");
    let mut redec = gemini::StreamDecoder::new();
    let mut back = Vec::new();
    for ev in &again {
        let data = ev.data.as_deref().unwrap_or("");
        match redec.decode(data) {
            Ok(evs) => back.extend(evs),
            Err(e) => panic!("hale's Gemini stream does not decode ({e}):\n{wire}"),
        }
    }
    assert_eq!(text(&back), text(&events), "the text changed:\n{wire}");
});
