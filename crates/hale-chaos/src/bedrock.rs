//! AWS Bedrock's wire, as chaos plays it: the four routes
//! (`/model/{modelId}/converse`, `/converse-stream`, `/invoke`,
//! `/invoke-with-response-stream`), the SigV4 signature (recomputed with
//! `aws-sigv4` from the secret of the access key named, and compared) or a
//! Bedrock API key as a bearer, Bedrock's errors (`{"message"}` with the
//! exception in `x-amzn-ErrorType`), Converse's JSON, and the binary
//! event stream (`aws-smithy-eventstream`): Converse's events, or InvokeModel's
//! `chunk` events each carrying one Anthropic SSE event's JSON in base64
//! `bytes`, and exceptions in the stream.
//!
//! A loopback STS is here too: `POST /` with
//! `Action=AssumeRoleWithWebIdentity` answers temporary credentials (whose
//! secret this server knows), so a test can point `AWS_ENDPOINT_URL_STS`
//! at chaos.
//!
//! The answers themselves are the other dialects' (`answer`, `wire`): an
//! invoke request is an Anthropic one, a Converse request is read into the
//! same [`ChatRequest`]; this file frames them as Bedrock does.

use std::time::{Duration, SystemTime};

use aws_smithy_types::event_stream::{Header, HeaderValue, Message as EsMessage};
use axum::http::HeaderMap;
use bytes::Bytes;
use serde_json::{Map, Value, json};

use crate::answer::{Answer, ChatRequest, Content, Finish, Message, json_text};
use crate::frame::Ctx;
use crate::wire::ErrorKind;

/// The access key id chaos knows by default and its secret (AWS's
/// documented example pair).
pub const DEFAULT_ACCESS_KEY_ID: &str = "AKIDEXAMPLE";
/// The secret of [`DEFAULT_ACCESS_KEY_ID`].
pub const DEFAULT_SECRET_ACCESS_KEY: &str = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";
/// The access key id chaos's STS hands out, and its secret.
pub const STS_ACCESS_KEY_ID: &str = "ASIACHAOSSTS";
/// The secret of [`STS_ACCESS_KEY_ID`].
pub const STS_SECRET_ACCESS_KEY: &str = "chaos-sts-secret";
/// The session token chaos's STS hands out (required with its key).
pub const STS_SESSION_TOKEN: &str = "chaos-sts-session-token";
/// The web identity token chaos's STS accepts.
pub const STS_WEB_IDENTITY_TOKEN: &str = "chaos-web-identity-token";

/// Which API a Bedrock route is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    Converse,
    Invoke,
}

/// The API and streaming a route's last segment names.
pub fn split_op(op: &str) -> Option<(Api, bool)> {
    match op {
        "converse" => Some((Api::Converse, false)),
        "converse-stream" => Some((Api::Converse, true)),
        "invoke" => Some((Api::Invoke, false)),
        "invoke-with-response-stream" => Some((Api::Invoke, true)),
        _ => None,
    }
}

/// Bedrock's error of a fault: status, exception name, body.
pub fn error(kind: ErrorKind) -> (u16, &'static str, String) {
    let (status, exception, message) = match kind {
        ErrorKind::RateLimit => (
            429,
            "ThrottlingException",
            "Too many requests, please wait before trying again.",
        ),
        ErrorKind::Server500 => (
            500,
            "InternalServerException",
            "The server encountered an internal error while processing the request.",
        ),
        ErrorKind::Unavailable503 => (
            503,
            "ServiceUnavailableException",
            "Bedrock is unable to process your request.",
        ),
        // Bedrock has no 529: a model that is not ready answers 429.
        ErrorKind::Overloaded529 => (
            429,
            "ModelNotReadyException",
            "Model is not ready for inference. Wait and try your request again. Refer to https://docs.aws.amazon.com/bedrock/latest/userguide/invoke-model.html#invoke-model-errors",
        ),
        ErrorKind::ContextOverflow => (
            400,
            "ValidationException",
            "Input is too long for requested model.",
        ),
        ErrorKind::ContentFilter => (
            400,
            "ValidationException",
            "The request was blocked by the content filter of a guardrail.",
        ),
        ErrorKind::Auth => (
            403,
            "UnrecognizedClientException",
            "The security token included in the request is invalid.",
        ),
        ErrorKind::NoPrefill => (
            400,
            "ValidationException",
            "This model does not support assistant message prefill. The conversation must end with a user message.",
        ),
    };
    (status, exception, json!({ "message": message }).to_string())
}

/// The `x-amzn-ErrorType` value of an exception, as Bedrock writes it.
pub fn error_type_header(exception: &str) -> String {
    format!("{exception}:http://internal.amazon.com/coral/com.amazon.bedrock/")
}

/// What authenticates a Bedrock request, as chaos checks it.
pub struct Signed<'a> {
    pub method: &'a str,
    /// `http://host/path?query` as the client addressed it.
    pub url: String,
    pub headers: &'a HeaderMap,
    pub body: &'a [u8],
}

fn secret_of(akid: &str, token: Option<&str>) -> Option<&'static str> {
    match akid {
        DEFAULT_ACCESS_KEY_ID => Some(DEFAULT_SECRET_ACCESS_KEY),
        // Temporary credentials are good only with their session token.
        STS_ACCESS_KEY_ID if token == Some(STS_SESSION_TOKEN) => Some(STS_SECRET_ACCESS_KEY),
        _ => None,
    }
}

/// Whether a Bedrock request may go on: a bearer (a Bedrock API key) equal
/// to `api_key` when the server has one, else any non-empty one; or a SigV4 signature that chaos, recomputing it
/// from the named access key's secret, gets the same. `Err`: the exception
/// and its message.
pub fn admit(req: &Signed<'_>, api_key: Option<&str>) -> Result<(), (&'static str, String)> {
    let auth = req
        .headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if let Some(bearer) = auth.strip_prefix("Bearer ") {
        let ok = match api_key {
            Some(k) => bearer == k,
            None => !bearer.trim().is_empty(),
        };
        return match ok {
            true => Ok(()),
            false => Err((
                "UnrecognizedClientException",
                "The security token included in the request is invalid.".into(),
            )),
        };
    }
    let Some(rest) = auth.strip_prefix("AWS4-HMAC-SHA256 ") else {
        return Err((
            "MissingAuthenticationTokenException",
            "Missing Authentication Token".into(),
        ));
    };
    let field = |name: &str| {
        rest.split(',')
            .map(str::trim)
            .find_map(|p| p.strip_prefix(name))
            .map(str::to_owned)
    };
    let (Some(cred), Some(signed), Some(sig)) = (
        field("Credential="),
        field("SignedHeaders="),
        field("Signature="),
    ) else {
        return Err((
            "IncompleteSignatureException",
            "The Authorization header is incomplete.".into(),
        ));
    };
    let scope: Vec<&str> = cred.split('/').collect();
    let [akid, _date, region, service, "aws4_request"] = scope[..] else {
        return Err((
            "IncompleteSignatureException",
            "The credential scope is malformed.".into(),
        ));
    };
    if service != "bedrock" {
        return Err((
            "InvalidSignatureException",
            "Credential should be scoped to correct service: 'bedrock'.".into(),
        ));
    }
    let token = req
        .headers
        .get("x-amz-security-token")
        .and_then(|v| v.to_str().ok());
    let Some(secret) = secret_of(akid, token) else {
        return Err((
            "UnrecognizedClientException",
            "The security token included in the request is invalid.".into(),
        ));
    };
    let Some(time) = req
        .headers
        .get("x-amz-date")
        .and_then(|v| v.to_str().ok())
        .and_then(parse_amz_date)
    else {
        return Err((
            "IncompleteSignatureException",
            "The request has no valid X-Amz-Date.".into(),
        ));
    };
    let expected = match recompute(req, &signed, akid, secret, token, region, service, time) {
        Some(s) => s,
        None => {
            return Err((
                "InvalidSignatureException",
                "The request signature could not be computed.".into(),
            ));
        }
    };
    if expected != sig {
        return Err((
            "InvalidSignatureException",
            "The request signature we calculated does not match the signature you provided. Check your AWS Secret Access Key and signing method.".into(),
        ));
    }
    Ok(())
}

/// `20261126T150000Z` as a time.
fn parse_amz_date(s: &str) -> Option<SystemTime> {
    let t = aws_smithy_types::DateTime::from_str(
        &format!(
            "{}-{}-{}T{}:{}:{}Z",
            s.get(0..4)?,
            s.get(4..6)?,
            s.get(6..8)?,
            s.get(9..11)?,
            s.get(11..13)?,
            s.get(13..15)?
        ),
        aws_smithy_types::date_time::Format::DateTime,
    )
    .ok()?;
    SystemTime::try_from(t).ok()
}

/// The signature of `req` over the headers it says it signed.
#[allow(clippy::too_many_arguments)]
fn recompute(
    req: &Signed<'_>,
    signed: &str,
    akid: &str,
    secret: &str,
    token: Option<&str>,
    region: &str,
    service: &str,
    time: SystemTime,
) -> Option<String> {
    use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings};
    let creds = aws_credential_types::Credentials::new(
        akid,
        secret,
        token.map(str::to_owned),
        None,
        "chaos",
    );
    let identity = creds.into();
    let params = aws_sigv4::sign::v4::SigningParams::builder()
        .identity(&identity)
        .region(region)
        .name(service)
        .time(time)
        .settings(SigningSettings::default())
        .build()
        .ok()?
        .into();
    // The signer adds x-amz-date and the session token itself.
    let names: Vec<&str> = signed
        .split(';')
        .filter(|n| !matches!(*n, "x-amz-date" | "x-amz-security-token"))
        .collect();
    let mut headers: Vec<(String, String)> = Vec::new();
    for n in names {
        let v = req.headers.get(n)?.to_str().ok()?;
        headers.push((n.to_owned(), v.to_owned()));
    }
    let signable = SignableRequest::new(
        req.method,
        &req.url,
        headers.iter().map(|(k, v)| (k.as_str(), v.as_str())),
        SignableBody::Bytes(req.body),
    )
    .ok()?;
    let (_, sig) = aws_sigv4::http_request::sign(signable, &params)
        .ok()?
        .into_parts();
    Some(sig)
}

/// STS's AssumeRoleWithWebIdentity, played: the form body's token must be
/// [`STS_WEB_IDENTITY_TOKEN`]. `Err`: status and STS's XML error.
pub fn assume_role(form: &str, now: SystemTime) -> Result<String, (u16, String)> {
    let get = |k: &str| {
        form.split('&').find_map(|kv| {
            let (key, v) = kv.split_once('=')?;
            (key == k).then(|| percent_decode(v))
        })
    };
    if get("Action").as_deref() != Some("AssumeRoleWithWebIdentity") {
        return Err((400, sts_error("InvalidAction", "Could not find operation")));
    }
    if get("WebIdentityToken").as_deref() != Some(STS_WEB_IDENTITY_TOKEN)
        || get("RoleArn").is_none()
    {
        return Err((
            400,
            sts_error(
                "InvalidIdentityToken",
                "Couldn't retrieve verification key from your identity provider",
            ),
        ));
    }
    let exp = aws_smithy_types::DateTime::from(now + Duration::from_secs(3600))
        .fmt(aws_smithy_types::date_time::Format::DateTime)
        .unwrap_or_default();
    Ok(format!(
        "<AssumeRoleWithWebIdentityResponse xmlns=\"https://sts.amazonaws.com/doc/2011-06-15/\"><AssumeRoleWithWebIdentityResult><Credentials><AccessKeyId>{STS_ACCESS_KEY_ID}</AccessKeyId><SecretAccessKey>{STS_SECRET_ACCESS_KEY}</SecretAccessKey><SessionToken>{STS_SESSION_TOKEN}</SessionToken><Expiration>{exp}</Expiration></Credentials></AssumeRoleWithWebIdentityResult></AssumeRoleWithWebIdentityResponse>"
    ))
}

fn sts_error(code: &str, message: &str) -> String {
    format!(
        "<ErrorResponse xmlns=\"https://sts.amazonaws.com/doc/2011-06-15/\"><Error><Type>Sender</Type><Code>{code}</Code><Message>{message}</Message></Error></ErrorResponse>"
    )
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' if i + 2 < b.len() => {
                match u8::from_str_radix(std::str::from_utf8(&b[i + 1..i + 3]).unwrap_or("zz"), 16)
                {
                    Ok(v) => {
                        out.push(v);
                        i += 3;
                    }
                    Err(_) => {
                        out.push(b'%');
                        i += 1;
                    }
                }
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Reads a Converse body for `model`, streamed or not.
pub fn read_converse(body: &[u8], model: &str, stream: bool) -> Result<ChatRequest, String> {
    let m: Map<String, Value> = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    if m.contains_key("model") {
        return Err("a Converse body names no `model` (the URL does)".into());
    }
    let msgs = match m.get("messages") {
        Some(Value::Array(a)) => a.clone(),
        None | Some(Value::Null) => Vec::new(),
        Some(other) => return Err(format!("`messages` must be an array, not {other}")),
    };
    let mut messages = Vec::with_capacity(msgs.len());
    for msg in msgs {
        let blocks = msg
            .get("content")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let results = !blocks.is_empty() && blocks.iter().all(|b| b.get("toolResult").is_some());
        let role = match msg.get("role").and_then(Value::as_str) {
            Some("assistant") => "assistant",
            Some("user") if results => "tool",
            Some("user") => "user",
            other => return Err(format!("unknown role {other:?}")),
        };
        let texts: Vec<Value> = blocks
            .iter()
            .filter_map(|b| {
                if let Some(t) = b.get("text").and_then(Value::as_str) {
                    Some(json!({"text": t}))
                } else {
                    b.get("toolResult")
                        .and_then(|r| r.get("content"))
                        .map(|c| json!({"text": json_text(c)}))
                }
            })
            .collect();
        messages.push(Message {
            role: role.to_owned(),
            content: Value::Array(texts),
        });
    }
    let system = m.get("system").cloned();
    let max_tokens = m
        .get("inferenceConfig")
        .and_then(|g| g.get("maxTokens"))
        .and_then(Value::as_u64);
    Ok(ChatRequest {
        model: Some(model.to_owned()),
        messages,
        system,
        stream: Some(stream),
        stream_options: None,
        max_tokens,
        max_completion_tokens: None,
        tools: m.get("toolConfig").and_then(|t| t.get("tools")).cloned(),
    })
}

fn converse_stop(f: Finish) -> &'static str {
    match f {
        Finish::Stop => "end_turn",
        Finish::Length => "max_tokens",
        Finish::ToolUse => "tool_use",
    }
}

fn converse_usage(ctx: &Ctx, a: &Answer) -> Value {
    json!({
        "inputTokens": ctx.input_tokens,
        "outputTokens": a.output_tokens,
        "totalTokens": ctx.input_tokens + a.output_tokens,
    })
}

/// A Converse answer.
pub fn converse_body(ctx: &Ctx, a: &Answer) -> String {
    let block = match &a.content {
        Content::Text(_) => json!({"text": a.full_text()}),
        Content::Tool {
            id,
            name,
            arguments,
            ..
        } => {
            let input: Value = serde_json::from_str(arguments).unwrap_or_else(|_| json!({}));
            json!({"toolUse": {"toolUseId": id, "name": name, "input": input}})
        }
    };
    json!({
        "output": {"message": {"role": "assistant", "content": [block]}},
        "stopReason": converse_stop(a.finish),
        "usage": converse_usage(ctx, a),
        "metrics": {"latencyMs": 1},
    })
    .to_string()
}

/// One event-stream message.
fn message(headers: &[(&str, &str)], payload: Vec<u8>) -> Bytes {
    let mut m = EsMessage::new(payload);
    for (k, v) in headers {
        m = m.add_header(Header::new(
            (*k).to_owned(),
            HeaderValue::String((*v).to_owned().into()),
        ));
    }
    let mut out = Vec::new();
    // Writing a message built here (small headers) cannot fail.
    let _ = aws_smithy_eventstream::frame::write_message_to(&m, &mut out);
    Bytes::from(out)
}

/// An event message of type `event` with a JSON payload.
pub fn event(event: &str, payload: &Value) -> Bytes {
    message(
        &[
            (":message-type", "event"),
            (":event-type", event),
            (":content-type", "application/json"),
        ],
        payload.to_string().into_bytes(),
    )
}

/// An exception message, as Bedrock sends one mid-stream.
pub fn exception(kind: &str, message_text: &str) -> Bytes {
    message(
        &[
            (":message-type", "exception"),
            (":exception-type", kind),
            (":content-type", "application/json"),
        ],
        json!({ "message": message_text }).to_string().into_bytes(),
    )
}

/// A Converse event whose payload is not JSON (`malformed`).
pub fn malformed_event() -> Bytes {
    message(
        &[
            (":message-type", "event"),
            (":event-type", "contentBlockDelta"),
            (":content-type", "application/json"),
        ],
        b"{not json".to_vec(),
    )
}

/// InvokeModel's stream of an Anthropic model: each SSE event of `sse`
/// (an Anthropic frame, one or more events) as a `chunk` event carrying its
/// data in base64 `bytes`.
pub fn chunks(sse: &[u8]) -> Bytes {
    let text = String::from_utf8_lossy(sse);
    let mut out = Vec::new();
    for ev in text.split("\n\n") {
        let data: Vec<&str> = ev
            .lines()
            .filter_map(|l| l.strip_prefix("data: ").or_else(|| l.strip_prefix("data:")))
            .collect();
        if data.is_empty() {
            continue;
        }
        let b64 = aws_smithy_types::base64::encode(data.join("\n"));
        out.extend_from_slice(&event("chunk", &json!({ "bytes": b64 })));
    }
    Bytes::from(out)
}

/// The Converse stream's opening events.
pub fn converse_head(a: &Answer) -> Vec<Bytes> {
    let mut out = vec![event("messageStart", &json!({"role": "assistant"}))];
    if let Content::Tool { id, name, .. } = &a.content {
        out.push(event(
            "contentBlockStart",
            &json!({"contentBlockIndex": 0, "start": {"toolUse": {"toolUseId": id, "name": name}}}),
        ));
    }
    out
}

/// One piece (a text chunk or a fragment of a tool call's arguments).
pub fn converse_piece(a: &Answer, piece: &str) -> Bytes {
    let delta = match &a.content {
        Content::Text(_) => json!({"text": piece}),
        Content::Tool { .. } => json!({"toolUse": {"input": piece}}),
    };
    event(
        "contentBlockDelta",
        &json!({"contentBlockIndex": 0, "delta": delta}),
    )
}

/// The closing events; `no_done` leaves out `metadata` (the last event,
/// with the usage), as other dialects' `no-done` leave out their end.
pub fn converse_finish(ctx: &Ctx, a: &Answer, no_done: bool) -> Vec<Bytes> {
    let mut out = vec![
        event("contentBlockStop", &json!({"contentBlockIndex": 0})),
        event(
            "messageStop",
            &json!({"stopReason": converse_stop(a.finish)}),
        ),
    ];
    if !no_done {
        out.push(event(
            "metadata",
            &json!({"usage": converse_usage(ctx, a), "metrics": {"latencyMs": 1}}),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Codex's shell output, its marker after a newline: read as the text
    /// the model sees (the serialized content's `\n` hid the marker, and
    /// Codex through a Bedrock deployment repeated its first step).
    #[test]
    fn a_tool_result_is_read_as_its_text() {
        let task = crate::task::Task::new(1234, 4).unwrap();
        let out = format!("Process exited with code 0\nOutput:\n{}\n", task.marker(1));
        let body = json!({"messages": [
            {"role": "user", "content": [{"text": "Run task-1234-4, then report."}]},
            {"role": "assistant", "content": [{"toolUse": {"toolUseId": "c1", "name": "exec_command", "input": {}}}]},
            {"role": "user", "content": [{"toolResult": {"toolUseId": "c1", "content": [{"text": out}]}}]}
        ]})
        .to_string();
        let r = read_converse(body.as_bytes(), "task", false).unwrap();
        let seen = task.markers_in(r.observed_texts().iter().map(String::as_str));
        assert!(seen.contains_key(&1), "{:?}", r.observed_texts());
    }

    /// A request signed as hale signs it passes; the same with another
    /// secret, a changed body or another key id does not.
    #[test]
    fn signatures_are_verified() {
        fn signed(secret: &str, akid: &str, body: &[u8]) -> HeaderMap {
            use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings};
            let creds = aws_credential_types::Credentials::new(akid, secret, None, None, "t");
            let identity = creds.into();
            let params = aws_sigv4::sign::v4::SigningParams::builder()
                .identity(&identity)
                .region("us-east-1")
                .name("bedrock")
                .time(SystemTime::now())
                .settings(SigningSettings::default())
                .build()
                .unwrap()
                .into();
            let req = SignableRequest::new(
                "POST",
                "http://127.0.0.1:1/model/m%3A0/converse",
                [
                    ("content-type", "application/json"),
                    ("host", "127.0.0.1:1"),
                ]
                .into_iter(),
                SignableBody::Bytes(body),
            )
            .unwrap();
            let (ins, _) = aws_sigv4::http_request::sign(req, &params)
                .unwrap()
                .into_parts();
            let mut h = HeaderMap::new();
            h.insert("content-type", "application/json".parse().unwrap());
            h.insert("host", "127.0.0.1:1".parse().unwrap());
            for (k, v) in ins.headers() {
                h.insert(
                    axum::http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                    v.parse().unwrap(),
                );
            }
            h
        }
        let check = |h: &HeaderMap, body: &[u8]| {
            admit(
                &Signed {
                    method: "POST",
                    url: "http://127.0.0.1:1/model/m%3A0/converse".into(),
                    headers: h,
                    body,
                },
                None,
            )
        };
        let good = signed(DEFAULT_SECRET_ACCESS_KEY, DEFAULT_ACCESS_KEY_ID, b"{}");
        assert!(check(&good, b"{}").is_ok());
        assert_eq!(
            check(&good, b"{ }").unwrap_err().0,
            "InvalidSignatureException"
        );
        let wrong = signed("not-the-secret", DEFAULT_ACCESS_KEY_ID, b"{}");
        assert_eq!(
            check(&wrong, b"{}").unwrap_err().0,
            "InvalidSignatureException"
        );
        let other = signed(DEFAULT_SECRET_ACCESS_KEY, "AKIDOTHER", b"{}");
        assert_eq!(
            check(&other, b"{}").unwrap_err().0,
            "UnrecognizedClientException"
        );
        assert!(check(&HeaderMap::new(), b"{}").is_err());
        let mut bearer = HeaderMap::new();
        bearer.insert("authorization", "Bearer k".parse().unwrap());
        let req = Signed {
            method: "POST",
            url: "http://x/".into(),
            headers: &bearer,
            body: b"",
        };
        assert!(admit(&req, Some("k")).is_ok());
        assert!(admit(&req, Some("other")).is_err());
        assert!(admit(&req, None).is_ok());
    }

    #[test]
    fn sts_hands_out_temporary_credentials_for_the_known_token() {
        let form = format!(
            "Action=AssumeRoleWithWebIdentity&Version=2011-06-15&RoleArn=arn%3Aaws%3Aiam%3A%3A1%3Arole%2Fr&RoleSessionName=hale&WebIdentityToken={STS_WEB_IDENTITY_TOKEN}"
        );
        let xml = assume_role(&form, SystemTime::now()).unwrap();
        assert!(xml.contains(STS_ACCESS_KEY_ID));
        assert!(xml.contains("<Expiration>"));
        let bad = form.replace(STS_WEB_IDENTITY_TOKEN, "nope");
        assert!(
            assume_role(&bad, SystemTime::now())
                .unwrap_err()
                .1
                .contains("InvalidIdentityToken")
        );
    }
}
