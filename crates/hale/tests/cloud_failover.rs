//! The same Claude model bought from three vendors, as one route (issue 29,
//! "Must show"): Anthropic's API, AWS Bedrock and Google Vertex AI, each
//! played by its own `hale chaos` process through the real `hale serve`.
//!
//! - `[anthropic/claude-x, bedrock/claude-x, vertex/claude-x]` where
//!   Anthropic's API answers 529 (overloaded) and Bedrock throttles
//!   (`ThrottlingException`) on every request: every turn of every client
//!   dialect (Chat Completions, Messages, the Responses API; streamed and
//!   not) is served by Vertex, whole.
//! - A stream cut on Bedrock is resumed on Vertex: the client reads one
//!   answer, every word once.
//!
//! Bedrock's chaos checks each request's SigV4 signature (AWS's documented
//! example keys in hale's environment); Vertex's chaos takes only tokens it
//! minted at its loopback token endpoint for a throwaway service-account
//! key ([`throwaway_key`], `openssl`).

mod common;

use common::*;
use hale_testkit::words;
use serde_json::{Value, json};
use std::time::Duration;

const AKID: &str = "AKIDEXAMPLE";
const SECRET: &str = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";

/// Each vendor's chaos: `claude-x` as that vendor plays it today.
const ANTHROPIC_SCRIPT: &str = "claude-x:\n  - {fault: error-529}\n";
const BEDROCK_SCRIPT: &str =
    "claude-x:\n  - {fault: rate-limit}\nclaude-cut:\n  - {fault: \"cut:after=20\"}\n";

struct Rig {
    _dir: tempfile::TempDir,
    _chaos: [Proc; 3],
    /// The chaos base URLs: Anthropic's API, Bedrock, Vertex.
    anthropic: String,
    bedrock: String,
    vertex: String,
    hale: Proc,
    base: String,
    http: reqwest::Client,
    turns: std::sync::atomic::AtomicU64,
}

impl Rig {
    async fn start() -> Rig {
        hale_testkit::install_crypto();
        let dir = tempfile::tempdir().expect("tempdir");
        let http = hale_testkit::client(Duration::from_secs(60));
        let sub = |name: &str| {
            let d = dir.path().join(name);
            std::fs::create_dir_all(&d).expect("dir");
            d
        };
        let (a_dir, b_dir, v_dir) = (sub("anthropic"), sub("bedrock"), sub("vertex"));
        std::fs::write(a_dir.join("script.yaml"), ANTHROPIC_SCRIPT).expect("script");
        std::fs::write(b_dir.join("script.yaml"), BEDROCK_SCRIPT).expect("script");
        let pem = throwaway_key();
        let chaos_key = v_dir.join("chaos-key.json");
        std::fs::write(&chaos_key, vertex_key_json(&pem, "unused")).expect("key");
        let script = |d: &std::path::Path| d.join("script.yaml").to_string_lossy().into_owned();
        let (ca, anthropic) = start_chaos_with(&http, &a_dir, &["--script", &script(&a_dir)]).await;
        let (cb, bedrock) = start_chaos_with(&http, &b_dir, &["--script", &script(&b_dir)]).await;
        let (cv, vertex) = start_chaos_with(
            &http,
            &v_dir,
            &["--vertex-key", &chaos_key.to_string_lossy()],
        )
        .await;
        let key = dir.path().join("service-account.json");
        std::fs::write(&key, vertex_key_json(&pem, &format!("{vertex}/token"))).expect("key");
        let config = format!(
            "routes:
  claude: [an/claude-x, br/claude-x, vx/claude-x]
  cut: [br/claude-cut, vx/claude-cut]
providers:
  - name: an
    kind: anthropic
    base_url: {anthropic}
    default_model: claude-x
  - name: br
    kind: bedrock
    region: us-east-1
    base_url: {bedrock}
    api: invoke
    default_model: claude-x
    models: [claude-x, claude-cut]
  - name: vx
    kind: vertex
    project: chaos-proj
    location: us-east5
    base_url: {vertex}
    credentials_file: {key}
    default_model: claude-x
    models: [claude-x, claude-cut]
retry:
  server_error: {{max_attempts: 2, initial_ms: 20, max_ms: 50}}
",
            key = key.display()
        );
        let mut env = aws_env_isolated(dir.path());
        env.retain(|(k, _)| k != "AWS_ACCESS_KEY_ID" && k != "AWS_SECRET_ACCESS_KEY");
        env.push(("AWS_ACCESS_KEY_ID".into(), AKID.into()));
        env.push(("AWS_SECRET_ACCESS_KEY".into(), SECRET.into()));
        let env_ref: Vec<(&str, &str)> =
            env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let (hale, base) = start_serve(&http, dir.path(), &config, &env_ref).await;
        Rig {
            _dir: dir,
            _chaos: [ca, cb, cv],
            anthropic,
            bedrock,
            vertex,
            hale,
            base,
            http,
            turns: Default::default(),
        }
    }

    /// How many requests for `model` one vendor's chaos received.
    async fn requests(&self, chaos: &str, model: &str) -> u64 {
        let v = hale_testkit::get_json(&self.http, &format!("{chaos}/chaos/stats")).await;
        v["requests_per_model"][model].as_u64().unwrap_or(0)
    }

    /// One turn in `dialect` (`chat`, `messages`, `responses`) on `route`:
    /// (status, the `x-hale-provider` header, the answer's text). Each turn
    /// says something new, as an agent's conversation moves on (the same
    /// request again and again would be a loop, which hale's guard nudges).
    async fn turn(&self, dialect: &str, route: &str, stream: bool) -> (u16, String, String) {
        let n = self
            .turns
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let prompt = format!("say the words, step {n}");
        let (path, body) = match dialect {
            "chat" => (
                "/v1/chat/completions",
                json!({"model": route, "stream": stream,
                       "messages": [{"role": "user", "content": prompt}]}),
            ),
            "messages" => (
                "/v1/messages",
                json!({"model": route, "stream": stream, "max_tokens": 256,
                       "messages": [{"role": "user", "content": prompt}]}),
            ),
            "responses" => (
                "/v1/responses",
                json!({"model": route, "stream": stream, "input": prompt, "store": false}),
            ),
            other => panic!("no dialect {other}"),
        };
        let r = self
            .http
            .post(format!("{}{path}", self.base))
            .header("anthropic-version", "2023-06-01")
            .json(&body)
            .send()
            .await
            .expect("hale answers");
        let status = r.status().as_u16();
        let provider = r
            .headers()
            .get("x-hale-provider")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        let text = r.text().await.expect("a body");
        let answer = if stream {
            streamed_text(dialect, &text)
        } else {
            let v: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
            match dialect {
                "chat" => v["choices"][0]["message"]["content"]
                    .as_str()
                    .unwrap_or("")
                    .to_owned(),
                "messages" => v["content"][0]["text"].as_str().unwrap_or("").to_owned(),
                _ => v["output"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|i| i["type"] == "message")
                    .flat_map(|i| i["content"].as_array().cloned().unwrap_or_default())
                    .filter_map(|p| p["text"].as_str().map(str::to_owned))
                    .collect(),
            }
        };
        if status != 200 || answer.is_empty() {
            eprintln!("{dialect} stream={stream}: {status} {text}");
        }
        (status, provider, answer)
    }
}

/// The text of an SSE answer in `dialect`: its text deltas joined; an
/// in-band error makes it `ERROR: …`.
fn streamed_text(dialect: &str, sse: &str) -> String {
    let mut out = String::new();
    for data in sse.lines().filter_map(|l| l.strip_prefix("data: ")) {
        if data == "[DONE]" {
            continue;
        }
        let Ok(v) = serde_json::from_str::<Value>(data) else {
            continue;
        };
        if v.get("error").is_some() || v["type"] == "error" || v["type"] == "response.failed" {
            return format!("ERROR: {data}");
        }
        let piece = match dialect {
            "chat" => v["choices"][0]["delta"]["content"].as_str(),
            "messages" => v["delta"]["text"].as_str(),
            _ if v["type"] == "response.output_text.delta" => v["delta"].as_str(),
            _ => None,
        };
        out.push_str(piece.unwrap_or(""));
    }
    out
}

/// Anthropic's API overloaded (529) and Bedrock throttling on every
/// request: each of 12 turns — three dialects, streamed and not, twice — is
/// served by Vertex with the whole answer, and both vendors ahead of it
/// were tried.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_route_of_anthropic_bedrock_and_vertex_serves_every_turn_through_a_529_and_a_throttle() {
    let rig = Rig::start().await;
    let mut turns = 0;
    for round in 0..2 {
        for dialect in ["chat", "messages", "responses"] {
            for stream in [false, true] {
                let (status, provider, text) = rig.turn(dialect, "claude", stream).await;
                assert_eq!(
                    status,
                    200,
                    "round {round} {dialect} stream={stream}\nhale:\n{}",
                    rig.hale.stderr()
                );
                assert_eq!(text, words(60), "round {round} {dialect} stream={stream}");
                assert_eq!(provider, "vx", "round {round} {dialect} stream={stream}");
                turns += 1;
            }
        }
    }
    assert_eq!(turns, 12);
    assert_eq!(
        rig.requests(&rig.vertex, "claude-x").await,
        12,
        "Vertex served every turn, once each"
    );
    assert!(
        rig.requests(&rig.anthropic, "claude-x").await >= 1,
        "Anthropic's API was tried"
    );
    assert!(
        rig.requests(&rig.bedrock, "claude-x").await >= 1,
        "Bedrock was tried"
    );
}

/// A stream cut on Bedrock after 20 words is resumed on Vertex: a Chat
/// Completions client and a Messages client each read the whole answer,
/// every word once, and no error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_cut_on_bedrock_is_resumed_on_vertex() {
    let rig = Rig::start().await;
    for (n, dialect) in ["chat", "messages"].into_iter().enumerate() {
        let (status, _, text) = rig.turn(dialect, "cut", true).await;
        assert_eq!(status, 200, "{dialect}\nhale:\n{}", rig.hale.stderr());
        assert_eq!(text, words(60), "{dialect}: the whole answer, once");
        let n = n as u64 + 1;
        assert_eq!(
            rig.requests(&rig.bedrock, "claude-cut").await,
            n,
            "cut on Bedrock"
        );
        assert_eq!(
            rig.requests(&rig.vertex, "claude-cut").await,
            n,
            "resumed on Vertex"
        );
    }
}
