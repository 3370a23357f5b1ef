//! The Bedrock event-stream path of `hale_gateway::upstream` without the
//! socket: the binary framing (`upstream::bedrock::FrameReader`, over
//! `aws-smithy-eventstream`), InvokeModel's base64 chunks and the Converse
//! and Anthropic decoders into canonical stream events, exceptions
//! classified (`upstream::decode_bedrock_stream`).
//!
//! Input: byte 0's low bit picks InvokeModel (1) or Converse (0); bit 1
//! picks raw bytes (1: the rest is the body as sent) or built messages (0:
//! the rest, split at 0xFF, is a list of messages whose first byte picks
//! the message type and event type and whose rest is the payload, base64
//! wrapped as a `chunk` for InvokeModel), so the decoders past the CRC
//! checks are reached too. Bits 2–5 are a chunk length for the split read.
//! Properties: nothing panics; the messages read are the same whether the
//! body arrives whole or in chunks.
#![no_main]

use aws_smithy_types::event_stream::{Header, HeaderValue, Message};
use hale_gateway::upstream::bedrock::FrameReader;
use hale_gateway::upstream::decode_bedrock_stream;
use libfuzzer_sys::fuzz_target;

const EVENTS: [&str; 8] = [
    "messageStart",
    "contentBlockStart",
    "contentBlockDelta",
    "contentBlockStop",
    "messageStop",
    "metadata",
    "chunk",
    "unknownEvent",
];
const EXCEPTIONS: [&str; 4] = [
    "throttlingException",
    "validationException",
    "modelStreamErrorException",
    "somethingElse",
];

fn message(first: u8, payload: &[u8], invoke: bool) -> Vec<u8> {
    let exception = first & 0x80 != 0;
    let mut m = if exception {
        Message::new(payload.to_vec())
            .add_header(Header::new(":message-type", HeaderValue::String("exception".into())))
            .add_header(Header::new(
                ":exception-type",
                HeaderValue::String(EXCEPTIONS[usize::from(first) % 4].into()),
            ))
    } else if invoke {
        let b64 = aws_smithy_types::base64::encode(payload);
        Message::new(format!("{{\"bytes\":\"{b64}\"}}").into_bytes())
            .add_header(Header::new(":message-type", HeaderValue::String("event".into())))
            .add_header(Header::new(":event-type", HeaderValue::String("chunk".into())))
    } else {
        Message::new(payload.to_vec())
            .add_header(Header::new(":message-type", HeaderValue::String("event".into())))
            .add_header(Header::new(
                ":event-type",
                HeaderValue::String(EVENTS[usize::from(first) % 8].into()),
            ))
    };
    m = m.add_header(Header::new(":content-type", HeaderValue::String("application/json".into())));
    let mut out = Vec::new();
    let _ = aws_smithy_eventstream::frame::write_message_to(&m, &mut out);
    out
}

fn frames(body: &[u8], chunk: usize) -> Vec<Result<String, String>> {
    let mut r = FrameReader::new();
    let mut out = Vec::new();
    for piece in body.chunks(chunk.max(1)) {
        r.push(piece);
        while let Some(f) = r.next_frame() {
            out.push(f.map(|f| format!("{f:?}")).map_err(|e| e.to_string()));
        }
    }
    out
}

fuzz_target!(|data: &[u8]| {
    let Some((&head, rest)) = data.split_first() else {
        return;
    };
    let invoke = head & 1 == 1;
    let body: Vec<u8> = if head & 2 != 0 {
        rest.to_vec()
    } else {
        rest.split(|b| *b == 0xFF)
            .filter_map(|m| m.split_first())
            .flat_map(|(first, payload)| message(*first, payload, invoke))
            .collect()
    };
    let _ = decode_bedrock_stream(&body, invoke);
    let whole = frames(&body, body.len().max(1));
    let split = frames(&body, usize::from((head >> 2) & 0x0F) + 1);
    // An error ends reading: compare up to and including the first one.
    let upto = |v: &[Result<String, String>]| -> Vec<Result<String, String>> {
        match v.iter().position(Result::is_err) {
            Some(i) => v[..=i].to_vec(),
            None => v.to_vec(),
        }
    };
    let (w, s) = (upto(&whole), upto(&split));
    // A bad length may be found earlier or later depending on the cuts;
    // the good messages before any error agree.
    let ok = |v: &[Result<String, String>]| v.iter().take_while(|f| f.is_ok()).count();
    let n = ok(&w).min(ok(&s));
    assert_eq!(w[..n], s[..n], "the same messages whatever the cuts");
});
