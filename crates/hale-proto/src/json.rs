//! Small JSON readers shared by every dialect's codec.
//!
//! Each reads one field of a `serde_json` object and, when it is missing or
//! of the wrong type, returns a [`ProtoError`] naming the field's JSON path
//! (`messages[2].content`) and what is wrong; `null` reads as absent.
//! Token counts ([`count`]) and a provider's error message
//! ([`error_message`]) are read leniently: they never fail a response.

use serde_json::{Map, Value, json};

use super::canonical::ProtoError;

pub(crate) fn err(path: impl Into<String>, message: impl Into<String>) -> ProtoError {
    ProtoError::new(path, message)
}

// The parsers build a path for every message and part they read, error or
// not, so these two are written without `format!` (~800 instructions a
// call under callgrind, against ~100 pushed by hand).

/// `parent.key`, or `key` at the root.
pub(crate) fn join(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        return key.to_string();
    }
    let mut s = String::with_capacity(parent.len() + 1 + key.len());
    s.push_str(parent);
    s.push('.');
    s.push_str(key);
    s
}

/// `parent[i]`.
pub(crate) fn at(parent: &str, i: usize) -> String {
    let mut digits = [0u8; 20];
    let mut n = i;
    let mut k = digits.len();
    loop {
        k -= 1;
        digits[k] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    let mut s = String::with_capacity(parent.len() + 2 + digits.len() - k);
    s.push_str(parent);
    s.push('[');
    for &d in &digits[k..] {
        s.push(char::from(d));
    }
    s.push(']');
    s
}

/// Appends `s` as a JSON string, quoted and escaped exactly as
/// `serde_json` writes it (`"`, `\\` and the control characters; `\b \t
/// \n \f \r` short, the others `\u00xx`; nothing else), without a
/// serializer: a stream writes one per token (test
/// `push_str_escapes_as_serde_json_does`).
pub(crate) fn push_str(out: &mut String, s: &str) {
    out.push('"');
    let mut start = 0;
    for (i, b) in s.bytes().enumerate() {
        let short = match b {
            b'"' => '"',
            b'\\' => '\\',
            0x08 => 'b',
            b'\t' => 't',
            b'\n' => 'n',
            0x0c => 'f',
            b'\r' => 'r',
            0x00..=0x1f => 'u',
            0x20..=0xff => continue,
        };
        // `b` is ASCII, so `i` and `i + 1` are char boundaries.
        out.push_str(&s[start..i]);
        out.push('\\');
        out.push(short);
        if short == 'u' {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            out.push_str("00");
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 0xf)]));
        }
        start = i + 1;
    }
    out.push_str(&s[start..]);
    out.push('"');
}

/// What kind of JSON value this is, for error messages.
pub(crate) fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The value as an object, or an error at `path` (`body` for the root).
pub(crate) fn as_object<'a>(
    v: &'a Value,
    path: &str,
) -> Result<&'a Map<String, Value>, ProtoError> {
    v.as_object().ok_or_else(|| {
        let p = if path.is_empty() { "body" } else { path };
        err(p, format!("must be an object, got {}", kind_of(v)))
    })
}

/// A field that is absent or `null` reads as `None`.
pub(crate) fn field<'a>(obj: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    obj.get(key).filter(|v| !v.is_null())
}

pub(crate) fn req_str<'a>(
    obj: &'a Map<String, Value>,
    key: &str,
    parent: &str,
) -> Result<&'a str, ProtoError> {
    match field(obj, key) {
        None => Err(err(join(parent, key), format!("missing `{key}`"))),
        Some(Value::String(s)) => Ok(s),
        Some(v) => Err(err(
            join(parent, key),
            format!("must be a string, got {}", kind_of(v)),
        )),
    }
}

pub(crate) fn opt_str<'a>(
    obj: &'a Map<String, Value>,
    key: &str,
    parent: &str,
) -> Result<Option<&'a str>, ProtoError> {
    match field(obj, key) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(v) => Err(err(
            join(parent, key),
            format!("must be a string, got {}", kind_of(v)),
        )),
    }
}

pub(crate) fn req_array<'a>(
    obj: &'a Map<String, Value>,
    key: &str,
    parent: &str,
) -> Result<&'a Vec<Value>, ProtoError> {
    match field(obj, key) {
        None => Err(err(join(parent, key), format!("missing `{key}`"))),
        Some(Value::Array(a)) => Ok(a),
        Some(v) => Err(err(
            join(parent, key),
            format!("must be an array, got {}", kind_of(v)),
        )),
    }
}

pub(crate) fn opt_array<'a>(
    obj: &'a Map<String, Value>,
    key: &str,
    parent: &str,
) -> Result<Option<&'a Vec<Value>>, ProtoError> {
    match field(obj, key) {
        None => Ok(None),
        Some(Value::Array(a)) => Ok(Some(a)),
        Some(v) => Err(err(
            join(parent, key),
            format!("must be an array, got {}", kind_of(v)),
        )),
    }
}

pub(crate) fn opt_bool(
    obj: &Map<String, Value>,
    key: &str,
    parent: &str,
) -> Result<Option<bool>, ProtoError> {
    match field(obj, key) {
        None => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(v) => Err(err(
            join(parent, key),
            format!("must be a boolean, got {}", kind_of(v)),
        )),
    }
}

pub(crate) fn opt_f64(
    obj: &Map<String, Value>,
    key: &str,
    parent: &str,
) -> Result<Option<f64>, ProtoError> {
    match field(obj, key) {
        None => Ok(None),
        Some(Value::Number(n)) => n
            .as_f64()
            .map(Some)
            .ok_or_else(|| err(join(parent, key), "must be a finite number")),
        Some(v) => Err(err(
            join(parent, key),
            format!("must be a number, got {}", kind_of(v)),
        )),
    }
}

pub(crate) fn opt_u32(
    obj: &Map<String, Value>,
    key: &str,
    parent: &str,
) -> Result<Option<u32>, ProtoError> {
    match field(obj, key) {
        None => Ok(None),
        Some(v) => v
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .map(Some)
            .ok_or_else(|| {
                err(
                    join(parent, key),
                    format!(
                        "must be a non-negative integer below 2^32, got {}",
                        kind_of(v)
                    ),
                )
            }),
    }
}

/// A token count; tolerant of absence and of junk (usage never fails a response).
pub(crate) fn count(obj: Option<&Map<String, Value>>, key: &str) -> u64 {
    obj.and_then(|o| o.get(key))
        .and_then(Value::as_u64)
        .unwrap_or(0)
}

/// The human-readable message of a provider's `error` value (object or string).
pub(crate) fn error_message(e: &Value) -> String {
    match e {
        Value::String(s) => s.clone(),
        Value::Object(o) => {
            let msg = o.get("message").and_then(Value::as_str).unwrap_or("");
            let kind = o
                .get("type")
                .or_else(|| o.get("code"))
                .and_then(Value::as_str)
                .unwrap_or("");
            match (kind.is_empty(), msg.is_empty()) {
                (true, true) => e.to_string(),
                (true, false) => msg.to_string(),
                (false, true) => kind.to_string(),
                (false, false) => format!("{kind}: {msg}"),
            }
        }
        Value::Null | Value::Bool(_) | Value::Number(_) | Value::Array(_) => e.to_string(),
    }
}

/// The default JSON schema of a tool that declares no parameters.
pub(crate) fn empty_schema() -> Value {
    json!({"type": "object", "properties": {}})
}

/// For the decoders' property tests: `pairs` written as a JSON object (a
/// key may repeat), or with `as_array` as an array of the values — the
/// shape serde's derived structs also accept and the `Value` paths refuse.
#[cfg(test)]
pub(crate) fn json_object(pairs: Vec<(&str, String)>, as_array: bool) -> String {
    if as_array {
        let vals: Vec<String> = pairs.into_iter().map(|(_, v)| v).collect();
        format!("[{}]", vals.join(","))
    } else {
        let kv: Vec<String> = pairs
            .into_iter()
            .map(|(k, v)| format!("\"{k}\":{v}"))
            .collect();
        format!("{{{}}}", kv.join(","))
    }
}

/// Appends `items` as a turn `{"role": role, key: items}`, merged into the
/// previous turn when it has the same role: the dialects whose turns must
/// alternate (Gemini's `contents[].parts`, Converse's `messages[].content`).
pub(crate) fn push_turn(turns: &mut Vec<Value>, role: &str, key: &str, items: Vec<Value>) {
    if items.is_empty() {
        return;
    }
    if let Some(last) = turns.last_mut()
        && last.get("role").and_then(Value::as_str) == Some(role)
        && let Some(Value::Array(existing)) = last.get_mut(key)
    {
        existing.extend(items);
        return;
    }
    turns.push(json!({"role": role, key: items}));
}

#[cfg(test)]
mod path_tests {
    use proptest::prelude::*;

    proptest! {
        /// `at` and `join` write what `format!` wrote.
        #[test]
        fn paths_read_as_format_wrote_them(parent in "[a-z.\\[\\]0-9]{0,12}", key in "[a-z_]{0,8}", i in any::<usize>()) {
            prop_assert_eq!(super::at(&parent, i), format!("{parent}[{i}]"));
            let joined = if parent.is_empty() { key.clone() } else { format!("{parent}.{key}") };
            prop_assert_eq!(super::join(&parent, &key), joined);
        }
    }
}

/// Strategies for the property tests of the typed answer reads
/// (`parse_response_bytes` of each dialect against its `Value` path).
#[cfg(test)]
pub(crate) mod strategies {
    use proptest::prelude::*;

    /// Written where a generated document should hold a byte that is not
    /// UTF-8 ([`bytes`] puts `0xff` in its place).
    pub(crate) const NOT_UTF8: &str = "@not-utf8@";

    /// A generated document as bytes, with [`NOT_UTF8`] made a bad byte.
    pub(crate) fn bytes(doc: &str) -> Vec<u8> {
        let mut out = Vec::with_capacity(doc.len());
        for (i, piece) in doc.split(NOT_UTF8).enumerate() {
            if i > 0 {
                out.push(0xff);
            }
            out.extend_from_slice(piece.as_bytes());
        }
        out
    }

    /// A value the `Value` parse refuses and serde's `IgnoredAny` would
    /// skip: out of `f64`'s range, a lone surrogate, a byte that is not
    /// UTF-8, nesting past serde_json's limit of 128.
    pub(crate) fn refused() -> BoxedStrategy<String> {
        prop_oneof![
            Just("1e400".to_string()),
            Just("-1e400".to_string()),
            Just("\"\\ud800\"".to_string()),
            Just(format!("\"a{NOT_UTF8}b\"")),
            Just(format!("{}{}", "[".repeat(130), "]".repeat(130))),
            Just(format!("{}1{}", "{\"a\":".repeat(130), "}".repeat(130))),
        ]
        .boxed()
    }

    /// Any JSON value hale does not read, of every type, sometimes one the
    /// `Value` parse refuses.
    pub(crate) fn ignored() -> BoxedStrategy<String> {
        prop_oneof![
            150 => prop_oneof![
                Just("null"),
                Just("true"),
                Just("0"),
                Just("-1"),
                Just("1.5"),
                Just("\"x\""),
                Just("\"a\\\"b\\n\\u00e9\\ud83d\\ude00\""),
                Just("[]"),
                Just("[1,{\"a\":null}]"),
                Just("{}"),
                Just("{\"a\":[1],\"a\":2}"),
            ]
            .prop_map(str::to_string),
            1 => refused(),
        ]
        .boxed()
    }

    /// Where hale reads a string: mostly one (or `null`), sometimes any
    /// value ([`read`]).
    pub(crate) fn text() -> BoxedStrategy<String> {
        prop_oneof![
            30 => prop_oneof![
                3 => Just("\"hi\""),
                2 => Just("\"\""),
                2 => Just("\"q\\\" \\\\ \\n \\u00e9 \\ud83d\\ude00\""),
                2 => Just("\"stop\""),
                1 => Just("\"tool_calls\""),
                1 => Just("\"length\""),
                2 => Just("null"),
            ]
            .prop_map(str::to_string),
            1 => read(),
        ]
        .boxed()
    }

    /// Where hale reads a token count: mostly one (or `null`), sometimes
    /// any value ([`read`]).
    pub(crate) fn count() -> BoxedStrategy<String> {
        prop_oneof![
            30 => prop_oneof![Just("0"), Just("1"), Just("7"), Just("null")].prop_map(str::to_string),
            1 => read(),
        ]
        .boxed()
    }

    /// A value where hale reads a string or a count: right and wrong
    /// types, escapes, empty, `null`.
    pub(crate) fn read() -> BoxedStrategy<String> {
        prop_oneof![
            3 => Just("\"hi\""),
            2 => Just("\"\""),
            2 => Just("\"q\\\" \\\\ \\n \\u00e9 \\ud83d\\ude00\""),
            2 => Just("\"stop\""),
            1 => Just("\"tool_calls\""),
            1 => Just("\"length\""),
            2 => Just("0"),
            2 => Just("1"),
            1 => Just("7"),
            1 => Just("-1"),
            1 => Just("-0"),
            1 => Just("2.0"),
            1 => Just("18446744073709551616"),
            3 => Just("null"),
        ]
        .prop_map(str::to_string)
        .boxed()
        .prop_union(ignored())
        .boxed()
    }

    /// An object of `fields`: either each field once in order (most often,
    /// so the common answer is generated), or up to 7 drawn at random (a
    /// key may repeat); one time in forty written as an array of the
    /// values instead.
    pub(crate) fn object(
        fields: Vec<(&'static str, BoxedStrategy<String>)>,
    ) -> BoxedStrategy<String> {
        let n = fields.len();
        let all: Vec<BoxedStrategy<(&'static str, String)>> = fields
            .iter()
            .map(|(k, s)| {
                let k = *k;
                s.clone().prop_map(move |v| (k, v)).boxed()
            })
            .collect();
        let pair = (0..n).prop_flat_map(move |i| (Just(fields[i].0), fields[i].1.clone()));
        let pairs = prop_oneof![
            8 => all,
            1 => proptest::collection::vec(pair, 0..7),
        ];
        (pairs, 0..40u8)
            .prop_map(|(pairs, shape)| super::json_object(pairs, shape == 0))
            .boxed()
    }

    /// A JSON array of `len` values of `item`.
    pub(crate) fn array(
        item: BoxedStrategy<String>,
        len: std::ops::Range<usize>,
    ) -> BoxedStrategy<String> {
        proptest::collection::vec(item, len)
            .prop_map(|v| format!("[{}]", v.join(",")))
            .boxed()
    }

    /// A whole body: mostly `answer`, sometimes with a value after it, cut
    /// short, or not an object at all.
    pub(crate) fn body(answer: BoxedStrategy<String>) -> BoxedStrategy<String> {
        prop_oneof![
            40 => answer.clone(),
            1 => answer.clone().prop_map(|a| format!(" \n{a} ")),
            1 => answer.clone().prop_map(|a| format!("{a} x")),
            1 => answer.clone().prop_map(|a| format!("{a}{{}}")),
            1 => answer.prop_map(|a| a[..a.len() / 2].to_string()),
            1 => read(),
        ]
        .boxed()
    }
}
