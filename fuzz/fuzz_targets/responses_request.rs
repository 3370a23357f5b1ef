//! `hale_proto::responses::parse_request` on arbitrary bytes parsed as JSON, then
//! the render/parse round trip of `common.rs` (its own dialect, and both
//! others rendered and parsed without panicking).
#![no_main]

mod common;

use hale_proto::Dialect;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(body) = serde_json::from_slice::<serde_json::Value>(data) {
        common::request_round_trip(&body, Dialect::Responses);
    }
});
