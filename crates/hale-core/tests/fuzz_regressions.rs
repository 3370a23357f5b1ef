//! Regression tests for what `scripts/fuzz.sh` found (issue 9 item 7), each
//! named for the outcome it pins down. The fuzz targets live in `fuzz/`.

use hale_core::classify::{Observation, classify};
use std::time::SystemTime;

fn message_of(status: u16, body: &str) -> String {
    classify(&Observation {
        status: Some(status),
        body: Some(body),
        ..Observation::new(SystemTime::UNIX_EPOCH)
    })
    .message
}

/// Found by the `classify` target: the key in a non-JSON body followed a
/// newline and NUL bytes, not a space, so it reached the message as it was.
#[test]
fn issue9_a_key_not_preceded_by_a_space_is_redacted_from_the_message() {
    let key = "sk-proj-abcdefghijklmnid_api_key";
    let cases = [
        format!("<html><body>\",\u{1}\0\0\0{key}\"}}"),
        format!("Invalid key provided:\n{key}"),
        format!("upstream said: api_key={key}&x=1"),
        format!("{{\"error\":{{\"message\":\"bad key:\\t{key}\",\"code\":\"invalid_api_key\"}}}}"),
        format!("key\u{00e9}{key}"),
    ];
    for body in &cases {
        let m = message_of(401, body);
        assert!(!m.contains(key), "key in {m:?} (body {body:?})");
        assert!(m.contains("[redacted]"), "{m:?}");
    }
}

#[test]
fn issue9_masked_keys_and_words_containing_sk_are_left_alone() {
    let m = message_of(401, "Incorrect API key provided: sk-abc***************xyz.");
    assert!(m.contains("sk-abc***************xyz"), "{m:?}");
    let m = message_of(
        400,
        "ask-me-anything-please is not a model; task_abcdefghijklmnop failed",
    );
    assert!(
        m.contains("ask-me-anything-please") && m.contains("task_abcdefghijklmnop"),
        "{m:?}"
    );
}
