//! hale-core's classifier on arbitrary status, `Retry-After` and body.
//!
//! Input: bytes 0–1 a status (little-endian), byte 2 flags (bit 0 status
//! present, bit 1 `Retry-After` present, bit 2 body present, high nibble the
//! transport: 0 none, 1–10 one of the ten), byte 3 days added to a fixed
//! "now" (for HTTP-date `Retry-After`); the rest, as text, is the
//! `Retry-After` value up to the first newline and the body after it.
//! Properties: nothing panics (the classifier promises it); the message is at
//! most `MAX_MESSAGE_CHARS` (plus the ellipsis) and holds no key-like token
//! (`sk-`/`sk_` and 9+ more key characters, unmasked); every class has a rule.
#![no_main]

use hale_core::classify::{self, MAX_MESSAGE_CHARS, Observation, Transport};
use libfuzzer_sys::fuzz_target;
use std::time::{Duration, SystemTime};

const TRANSPORTS: [Transport; 10] = [
    Transport::ConnectReset,
    Transport::ConnectRefused,
    Transport::Dns,
    Transport::HeadersTimeout,
    Transport::FirstTokenTimeout,
    Transport::StreamCut,
    Transport::StreamStalled,
    Transport::StreamEndedWithoutFinish,
    Transport::MalformedBody,
    Transport::Other,
];

/// 2026-11-23T00:00:00Z.
const NOW_SECS: u64 = 1_795_392_000;

/// The first unmasked key-like token in `s`, if any: `sk-`/`sk_` starting a
/// run of at least 12 characters of `[A-Za-z0-9_-]` with no `*` in it.
fn key_like(s: &str) -> Option<&str> {
    let b = s.as_bytes();
    let mut i = 0;
    while i + 3 <= b.len() {
        let starts = &b[i..i + 3] == b"sk-" || &b[i..i + 3] == b"sk_";
        let at_boundary = i == 0 || !(b[i - 1].is_ascii_alphanumeric());
        if starts && at_boundary {
            let run = b[i..]
                .iter()
                .take_while(|c| {
                    c.is_ascii_alphanumeric() || **c == b'-' || **c == b'_' || **c == b'*'
                })
                .count();
            let token = &s[i..i + run];
            if run >= 12 && !token.contains('*') {
                return Some(token);
            }
            i += run.max(1);
        } else {
            i += 1;
        }
    }
    None
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 4 {
        return;
    }
    let status = u16::from_le_bytes([data[0], data[1]]);
    let flags = data[2];
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(NOW_SECS + u64::from(data[3]) * 86_400);
    let text = String::from_utf8_lossy(&data[4..]);
    let (retry_after, body) = text.split_once('\n').unwrap_or((&text, ""));
    let transport = match usize::from(flags >> 4) {
        0 => None,
        t => TRANSPORTS.get(t - 1).copied(),
    };
    let obs = Observation {
        status: (flags & 1 != 0).then_some(status),
        retry_after: (flags & 2 != 0).then_some(retry_after),
        body: (flags & 4 != 0).then_some(body),
        transport,
        now_wall: now,
    };
    let c = classify::classify(&obs);
    let _ = classify::rule(c.class);
    assert!(
        c.message.chars().count() <= MAX_MESSAGE_CHARS + 1,
        "message of {} chars",
        c.message.chars().count()
    );
    // A truncated message may end inside a masked token, cut before its `*`:
    // that tail was masked, not a key, so it is not checked.
    let checked = match c.message.strip_suffix('…') {
        Some(m) => m.trim_end_matches(|ch: char| ch.is_ascii_alphanumeric() || "-_*".contains(ch)),
        None => &c.message,
    };
    if let Some(key) = key_like(checked) {
        panic!(
            "key-like token {key:?} in the classified message {:?}",
            c.message
        );
    }
    let _ = classify::parse_retry_after(retry_after, now);
    let _ = classify::transport_of(&std::io::Error::other(body.to_owned()));
});
