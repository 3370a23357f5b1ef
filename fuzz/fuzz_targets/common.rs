//! What the request targets share: the round trip a request hale accepted
//! must survive, in any dialect.
//!
//! An accepted request is rendered in its own dialect (as for a same-dialect
//! target) and must be accepted again by the same parser, keeping model, stream
//! flag and tools; rendering settles (the second rendering parses and renders
//! to itself: the first may still drop an empty message); the body must survive the wire
//! (serialize, parse) as an equal value — numbers compared by value, because
//! float formatting differs (`6E68` comes back as `6e68`). The other dialects'
//! renderers, with and without a prefill, and their parsers on those renderings must
//! not panic.

use hale_proto::{ChatRequest, Dialect, ProtoError, anthropic, gemini, openai, responses};

/// The model a Gemini body is read for (a Gemini URL names it, not the body).
const GEMINI_MODEL: &str = "fuzz-model";
use serde_json::Value;

fn parse(d: Dialect, body: &Value) -> Result<ChatRequest, ProtoError> {
    match d {
        Dialect::OpenAi => openai::parse_request(body),
        Dialect::Anthropic => anthropic::parse_request(body),
        Dialect::Responses => responses::parse_request(body),
        Dialect::Gemini => gemini::parse_request(body, GEMINI_MODEL, false),
    }
}

fn render(d: Dialect, req: &ChatRequest, prefill: Option<&str>) -> Value {
    match d {
        Dialect::OpenAi => openai::render_request(req, &req.model, prefill),
        Dialect::Anthropic => anthropic::render_request(req, &req.model, prefill),
        Dialect::Responses => responses::render_request(req, &req.model, prefill),
        Dialect::Gemini => gemini::render_request(req, &req.model, prefill),
    }
}

/// JSON equality with numbers compared as numbers: integers exactly, floats
/// within a relative 1e-12 (serde_json's default float parsing is not
/// guaranteed to round-trip the last bit).
pub fn same_value(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            if let (Some(x), Some(y)) = (x.as_i64(), y.as_i64()) {
                return x == y;
            }
            if let (Some(x), Some(y)) = (x.as_u64(), y.as_u64()) {
                return x == y;
            }
            match (x.as_f64(), y.as_f64()) {
                (Some(x), Some(y)) => x == y || (x - y).abs() <= 1e-12 * x.abs().max(y.abs()),
                _ => false,
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same_value(x, y))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| same_value(v, w)))
        }
        _ => a == b,
    }
}

/// Runs the round trip on one JSON body claimed to be of `dialect`.
pub fn request_round_trip(body: &Value, dialect: Dialect) {
    let Ok(req) = parse(dialect, body) else {
        return;
    };
    let once = render(dialect, &req, None);
    let again = match parse(dialect, &once) {
        Ok(r) => r,
        Err(e) => panic!("hale rejects its own rendering ({e}):\n{once}"),
    };
    assert_eq!(again.model, req.model, "model changed");
    assert_eq!(again.stream, req.stream, "stream flag changed");
    let names = |r: &ChatRequest| r.tools.iter().map(|t| t.name.clone()).collect::<Vec<_>>();
    assert_eq!(names(&again), names(&req), "tools changed");
    // One rendering may still normalise: an empty message is dropped, which
    // can make a later system message leading, and the next parse lifts it
    // into the system prompt. From the second rendering on, nothing changes.
    let twice = render(dialect, &again, None);
    let third = match parse(dialect, &twice) {
        Ok(r) => render(dialect, &r, None),
        Err(e) => panic!("hale rejects its own second rendering ({e}):\n{twice}"),
    };
    assert_eq!(third, twice, "rendering does not settle");

    let wire = serde_json::to_vec(&once).expect("a rendered body serializes");
    let back: Value = serde_json::from_slice(&wire).expect("a serialized body parses");
    assert!(
        same_value(&back, &once),
        "body changed on the wire:\n{once}"
    );

    for other in [
        Dialect::OpenAi,
        Dialect::Anthropic,
        Dialect::Responses,
        Dialect::Gemini,
    ] {
        if other == dialect {
            continue;
        }
        let crossed = render(other, &req, None);
        let _ = parse(other, &crossed);
        let _ = render(other, &req, Some("Continuing: "));
    }
    let _ = render(dialect, &req, Some(" "));
}
