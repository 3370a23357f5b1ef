//! Test helpers: a chaos server per test, a plain HTTP client, and an SSE
//! frame parser so the tests check event order rather than raw bytes.
#![allow(dead_code)]

use std::time::Duration;

use hale_chaos::{ChaosConfig, ChaosHandle};
use serde_json::{Value, json};

pub async fn server() -> ChaosHandle {
    server_with(ChaosConfig::default()).await
}

pub async fn server_with(cfg: ChaosConfig) -> ChaosHandle {
    hale_chaos::spawn("127.0.0.1:0".parse().unwrap(), cfg)
        .await
        .unwrap()
}

pub fn install_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

pub fn client() -> reqwest::Client {
    install_provider();
    hale_testkit::client(Duration::from_secs(20))
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum D {
    OpenAi,
    Anthropic,
}

pub const BOTH: [D; 2] = [D::OpenAi, D::Anthropic];

/// A request body with one user message; `extra` is merged in.
pub fn body(model: &str, stream: bool, extra: Value) -> Value {
    let mut b = json!({
        "model": model,
        "max_tokens": 1024,
        "stream": stream,
        "messages": [{"role": "user", "content": "hello"}],
    });
    if let (Some(o), Value::Object(e)) = (b.as_object_mut(), extra) {
        o.extend(e);
    }
    b
}

pub fn url(h: &ChaosHandle, d: D) -> String {
    match d {
        D::OpenAi => format!("{}/chat/completions", h.base_url_openai),
        D::Anthropic => format!("{}/v1/messages", h.base_url_anthropic),
    }
}

pub async fn send(h: &ChaosHandle, d: D, body: &Value) -> reqwest::Result<reqwest::Response> {
    send_with(&client(), h, d, body, None).await
}

pub async fn send_with(
    c: &reqwest::Client,
    h: &ChaosHandle,
    d: D,
    body: &Value,
    fault_header: Option<&str>,
) -> reqwest::Result<reqwest::Response> {
    let mut rb = c.post(url(h, d)).json(body);
    if d == D::Anthropic {
        rb = rb
            .header("anthropic-version", "2023-06-01")
            .header("x-api-key", "k");
    } else {
        rb = rb.bearer_auth("k");
    }
    if let Some(f) = fault_header {
        rb = rb.header("x-chaos-fault", f);
    }
    rb.send().await
}

pub async fn post(h: &ChaosHandle, d: D, model: &str, stream: bool) -> reqwest::Response {
    send(h, d, &body(model, stream, json!({}))).await.unwrap()
}

/// Reads a body to its end; returns what arrived and whether it ended in an error.
pub async fn read_all(mut r: reqwest::Response) -> (String, bool) {
    let mut buf = Vec::new();
    loop {
        match r.chunk().await {
            Ok(Some(c)) => buf.extend_from_slice(&c),
            Ok(None) => return (String::from_utf8(buf).unwrap(), false),
            Err(_) => return (String::from_utf8(buf).unwrap(), true),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Frame {
    pub event: Option<String>,
    pub data: String,
}

impl Frame {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.data).unwrap_or(Value::Null)
    }
}

pub fn parse_sse(text: &str) -> Vec<Frame> {
    let mut out = Vec::new();
    for block in text.split("\n\n") {
        if block.trim().is_empty() {
            continue;
        }
        let mut event = None;
        let mut data = Vec::new();
        for line in block.lines() {
            if let Some(e) = line.strip_prefix("event: ") {
                event = Some(e.to_owned());
            } else if let Some(d) = line.strip_prefix("data: ") {
                data.push(d);
            }
        }
        out.push(Frame {
            event,
            data: data.join("\n"),
        });
    }
    out
}

/// The text of an OpenAI stream's content deltas, one entry per chunk.
pub fn openai_pieces(frames: &[Frame]) -> Vec<String> {
    frames
        .iter()
        .filter_map(|f| {
            f.json()["choices"][0]["delta"]["content"]
                .as_str()
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
        })
        .collect()
}

/// The text of an Anthropic stream's text deltas, one entry per event.
pub fn anthropic_pieces(frames: &[Frame]) -> Vec<String> {
    frames
        .iter()
        .filter_map(|f| {
            let v = f.json();
            (v["type"] == "content_block_delta" && v["delta"]["type"] == "text_delta")
                .then(|| v["delta"]["text"].as_str().unwrap_or("").to_owned())
        })
        .collect()
}

pub fn pieces(d: D, frames: &[Frame]) -> Vec<String> {
    match d {
        D::OpenAi => openai_pieces(frames),
        D::Anthropic => anthropic_pieces(frames),
    }
}

/// The Anthropic event names in order.
pub fn events(frames: &[Frame]) -> Vec<String> {
    frames
        .iter()
        .map(|f| f.event.clone().unwrap_or_default())
        .collect()
}

/// The text of a non-streamed answer.
pub fn full_text(d: D, v: &Value) -> String {
    match d {
        D::OpenAi => v["choices"][0]["message"]["content"]
            .as_str()
            .unwrap_or("")
            .to_owned(),
        D::Anthropic => v["content"][0]["text"].as_str().unwrap_or("").to_owned(),
    }
}

/// The chaos deterministic answer of `n` words: `w0 w1 … w{n-1}`.
#[allow(unused_imports)]
pub use hale_testkit::words;

/// The error type of an error body in either dialect.
pub fn error_type(d: D, v: &Value) -> String {
    match d {
        D::OpenAi => v["error"]["type"].as_str().unwrap_or("").to_owned(),
        D::Anthropic => {
            assert_eq!(v["type"], "error", "{v}");
            v["error"]["type"].as_str().unwrap_or("").to_owned()
        }
    }
}
