//! `hale_proto::gemini::parse_request` (a Gemini client's `generateContent`
//! body) on arbitrary bytes parsed as JSON, then the render/parse round
//! trip of `common.rs`: hale accepts its own rendering, keeps the model,
//! stream flag and tools, settles after one rendering, and the other
//! dialects' renderers do not panic on what it read.
#![no_main]

mod common;

use hale_proto::Dialect;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(body) = serde_json::from_slice::<serde_json::Value>(data) {
        common::request_round_trip(&body, Dialect::Gemini);
    }
});
