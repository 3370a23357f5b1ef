//! Reading a client's request: its body's bytes ([`parse_sent`]), its
//! dialect's parser, and the [`Origin`] it keeps for fidelity.
//!
//! This is where a request enters the canonical model, so it is the one
//! place besides [`super::fidelity`] that picks a codec by [`Dialect`]: it
//! sits above the dialects, which know nothing of one another.

use serde::Deserializer;
use serde::de::{MapAccess, Visitor};
use serde_json::Value;
use std::sync::Arc;

use super::canonical::{ChatRequest, Dialect, Origin, ProtoError};
use super::{anthropic, fidelity, gemini, openai, responses};

/// Parses a client's request body of `dialect` and keeps what the client
/// sent — the body itself and the provider-feature headers of
/// [`fidelity::FEATURE_HEADERS`] — so a provider of the same dialect
/// receives it as sent ([`render_for`](fidelity::render_for)).
pub fn parse_request(
    dialect: Dialect,
    body: Value,
    headers: &http::HeaderMap,
) -> Result<ChatRequest, ProtoError> {
    let (mut req, origin) = parse_with_origin(dialect, body, headers)?;
    req.origin = Some(Arc::new(origin));
    Ok(req)
}

/// [`parse_request`] of a client's body as it arrived. A provider of the
/// same dialect gets these very bytes when hale changed nothing in the
/// body ([`fidelity::Outgoing::raw`]) — unless an object in them repeats a
/// key: hale reads the last of a repeated key, and a provider may read the
/// first, so such a body is always sent as hale read it.
pub fn parse_request_sent(
    dialect: Dialect,
    sent: Sent,
    headers: &http::HeaderMap,
) -> Result<ChatRequest, ProtoError> {
    let (mut req, origin) = parse_with_origin(dialect, sent.value, headers)?;
    let origin = match sent.raw {
        Some(raw) => origin.with_raw(raw),
        None => origin,
    };
    req.origin = Some(Arc::new(origin));
    Ok(req)
}

/// A Gemini client's body as it arrived: the model and whether to stream
/// are the URL's (`models/{model}:{action}`), so they are given, not read.
/// Kept as [`parse_request_sent`] keeps the other dialects' bodies.
pub fn parse_gemini_sent(
    sent: Sent,
    headers: &http::HeaderMap,
    model: &str,
    stream: bool,
) -> Result<ChatRequest, ProtoError> {
    let (mut req, trace) = gemini::parse_request_traced(&sent.value, model, stream)?;
    let mut origin = Origin::new(
        Dialect::Gemini,
        sent.value,
        fidelity::feature_headers(headers),
        &req,
        trace,
    );
    if let Some(raw) = sent.raw {
        origin = origin.with_raw(raw);
    }
    req.origin = Some(Arc::new(origin));
    Ok(req)
}

/// A request hale rewrote before parsing it (a `previous_response_id`
/// expanded into the whole conversation): `body` parsed in `dialect`, with
/// the provider-feature headers of `like` (the client's request), and
/// `note` named in every attempt's `changes`. It has no bytes of its own.
pub fn parse_rewritten(
    dialect: Dialect,
    body: Value,
    like: &Origin,
    note: String,
) -> Result<ChatRequest, ProtoError> {
    let (mut req, trace) = match dialect {
        Dialect::OpenAi => openai::parse_request_traced(&body)?,
        Dialect::Anthropic => anthropic::parse_request_traced(&body)?,
        Dialect::Responses => responses::parse_request_traced(&body)?,
        Dialect::Gemini | Dialect::Bedrock => return Err(not_a_client_dialect()),
    };
    let mut origin = Origin::new(dialect, body, like.headers.clone(), &req, trace);
    origin.notes.push(note);
    req.origin = Some(Arc::new(origin));
    Ok(req)
}

/// A client's JSON body: its value, and its bytes when they say nothing
/// else than the value (no object repeats a key).
#[derive(Debug)]
pub struct Sent {
    pub value: Value,
    pub raw: Option<bytes::Bytes>,
}

/// Parses a client's JSON body as `serde_json::from_slice::<Value>` does
/// (the last of a repeated key wins), noting whether any object repeats a
/// key: only a body that repeats none keeps its bytes ([`Sent::raw`]).
pub fn parse_sent(raw: bytes::Bytes) -> Result<Sent, serde_json::Error> {
    let mut repeated = false;
    let mut de = serde_json::Deserializer::from_slice(&raw);
    let value = serde::de::DeserializeSeed::deserialize(
        NoticeRepeats {
            repeated: &mut repeated,
        },
        &mut de,
    )?;
    de.end()?;
    Ok(Sent {
        value,
        raw: (!repeated).then_some(raw),
    })
}

/// Builds a [`Value`] as serde_json's own visitor does, setting `repeated`
/// when an object holds a key twice.
struct NoticeRepeats<'r> {
    repeated: &'r mut bool,
}

impl<'de> serde::de::DeserializeSeed<'de> for NoticeRepeats<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for NoticeRepeats<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any valid JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        while let Some(v) = seq.next_element_seed(NoticeRepeats {
            repeated: &mut *self.repeated,
        })? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = serde_json::Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let v = map.next_value_seed(NoticeRepeats {
                repeated: &mut *self.repeated,
            })?;
            if out.insert(key, v).is_some() {
                *self.repeated = true;
            }
        }
        Ok(Value::Object(out))
    }
}

fn parse_with_origin(
    dialect: Dialect,
    body: Value,
    headers: &http::HeaderMap,
) -> Result<(ChatRequest, Origin), ProtoError> {
    let (req, trace) = match dialect {
        Dialect::OpenAi => openai::parse_request_traced(&body)?,
        Dialect::Anthropic => anthropic::parse_request_traced(&body)?,
        Dialect::Responses => responses::parse_request_traced(&body)?,
        Dialect::Gemini | Dialect::Bedrock => return Err(not_a_client_dialect()),
    };
    let origin = Origin::new(
        dialect,
        body,
        fidelity::feature_headers(headers),
        &req,
        trace,
    );
    Ok((req, origin))
}

/// A Gemini body names neither its model nor whether to stream (the URL
/// does): it is read by [`parse_gemini_sent`], never here; Bedrock's
/// Converse is a provider dialect, in which no client request is parsed.
fn not_a_client_dialect() -> ProtoError {
    ProtoError::new(
        "body",
        "a Gemini request is read with its URL's model and action; Converse requests are not accepted",
    )
}

#[cfg(test)]
mod sent_tests {
    use super::*;
    use proptest::prelude::*;

    /// A JSON document as written, with its keys as they decode.
    #[derive(Debug, Clone)]
    enum J {
        Null,
        Bool(bool),
        Int(i64),
        Float(f64),
        Str(String),
        Arr(Vec<J>),
        /// (key, the key written with a `\u` escape, value)
        Obj(Vec<(String, bool, J)>),
    }

    impl J {
        fn write(&self, out: &mut String) {
            match self {
                J::Null => out.push_str("null"),
                J::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
                J::Int(i) => out.push_str(&i.to_string()),
                J::Float(f) => out.push_str(&serde_json::to_string(f).unwrap()),
                J::Str(s) => out.push_str(&serde_json::to_string(s).unwrap()),
                J::Arr(a) => {
                    out.push_str("[ ");
                    for (i, v) in a.iter().enumerate() {
                        if i > 0 {
                            out.push_str(" ,");
                        }
                        v.write(out);
                    }
                    out.push(']');
                }
                J::Obj(o) => {
                    out.push('{');
                    for (i, (k, escaped, v)) in o.iter().enumerate() {
                        if i > 0 {
                            out.push(',');
                        }
                        if *escaped {
                            // The same key, spelled with escapes.
                            out.push('"');
                            for c in k.chars() {
                                out.push_str(&format!("\\u{:04x}", c as u32));
                            }
                            out.push('"');
                        } else {
                            out.push_str(&serde_json::to_string(k).unwrap());
                        }
                        out.push_str(" :\n");
                        v.write(out);
                    }
                    out.push('}');
                }
            }
        }

        fn repeats(&self) -> bool {
            match self {
                J::Null | J::Bool(_) | J::Int(_) | J::Float(_) | J::Str(_) => false,
                J::Arr(a) => a.iter().any(J::repeats),
                J::Obj(o) => {
                    let mut keys: Vec<&str> = o.iter().map(|(k, _, _)| k.as_str()).collect();
                    keys.sort_unstable();
                    let n = keys.len();
                    keys.dedup();
                    keys.len() != n || o.iter().any(|(_, _, v)| v.repeats())
                }
            }
        }
    }

    fn doc() -> impl Strategy<Value = J> {
        let leaf = prop_oneof![
            Just(J::Null),
            any::<bool>().prop_map(J::Bool),
            any::<i64>().prop_map(J::Int),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(J::Float),
            "[a-c\u{e9}\u{1F600}\"\\\\\n]{0,4}".prop_map(J::Str),
        ];
        leaf.prop_recursive(4, 40, 5, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..5).prop_map(J::Arr),
                proptest::collection::vec(("[a-c]{1,2}", any::<bool>(), inner), 0..5)
                    .prop_map(J::Obj),
            ]
        })
    }

    proptest! {
        /// The value is serde_json's, whatever the document; the bytes are
        /// kept exactly when no object repeats a key (spelled alike or not).
        #[test]
        fn a_sent_body_reads_as_serde_json_reads_it_and_keeps_its_bytes_only_without_repeats(
            j in doc()
        ) {
            let mut text = String::new();
            j.write(&mut text);
            let raw = bytes::Bytes::from(text.clone());
            let sent = parse_sent(raw.clone()).expect("valid JSON");
            let want: Value = serde_json::from_str(&text).unwrap();
            prop_assert_eq!(&sent.value, &want);
            prop_assert_eq!(sent.raw.is_some(), !j.repeats(), "{}", text);
            if let Some(r) = sent.raw {
                prop_assert_eq!(r, raw);
            }
        }
    }

    #[test]
    fn a_repeated_key_anywhere_drops_the_bytes_and_bad_json_is_an_error() {
        let cases = [
            (r#"{"model":"a","model":"b"}"#, false),
            (r#"{"messages":[{"role":"user","role":"system"}]}"#, false),
            (r#"{"m":"a","\u006d":"b"}"#, false),
            (r#"{"a":{"b":1},"c":{"b":2}}"#, true),
        ];
        for (text, kept) in cases {
            let sent = parse_sent(bytes::Bytes::from(text)).unwrap();
            assert_eq!(sent.raw.is_some(), kept, "{text}");
            assert_eq!(sent.value, serde_json::from_str::<Value>(text).unwrap());
        }
        for bad in [
            "",
            "{",
            r#"{"a":1} x"#,
            r#"{"a":1}{}"#,
            "[1,]",
            r#""\ud800""#,
        ] {
            assert_eq!(
                parse_sent(bytes::Bytes::from(bad)).is_err(),
                serde_json::from_str::<Value>(bad).is_err(),
                "{bad:?}"
            );
        }
    }
}
