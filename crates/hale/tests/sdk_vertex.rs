//! `kind: vertex` (Google Vertex AI, issue 29) through the real `hale
//! serve`, with `hale chaos --vertex-key` playing Vertex: its publisher
//! routes (Claude through `rawPredict`/`streamRawPredict`, Gemini through
//! `generateContent`/`streamGenerateContent`), which refuse a request
//! without a token chaos minted, and its loopback OAuth2 token endpoint,
//! which takes only a JWT-bearer assertion issued by the test key's
//! `client_email` and signed by that key.
//!
//! Each rig generates a throwaway RSA key with `openssl` (a test
//! dependency, like Python) and writes a service-account key file whose
//! `token_uri` is chaos's `/token`: `gcp_auth` signs its assertion with it,
//! exactly as against Google. (The metadata-server flow is not tested:
//! `gcp_auth` 0.12 always asks `metadata.google.internal`, with no
//! `GCE_METADATA_HOST` override.)
//!
//! Clients: the official `openai` Python SDK for Chat Completions and the
//! Responses API, plain HTTP for Messages (the `anthropic` SDK is not in
//! the test venv). Python comes from `HALE_PYTHON`, else `.venv/bin/python`
//! at the workspace root; without one that can `import openai` the SDK
//! tests print why and return — except under `CI=true`, where that fails.

mod common;

use common::*;
use hale_testkit::python_or_skip;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Two vertex providers over chaos (Claude and Gemini, both publishers
/// named since chaos's fault names are neither claude-* nor gemini-*), a
/// second Gemini one, and an Anthropic-kind one; `{key}` is the key file.
const PROVIDERS: &str = "
providers:
  - name: vc
    kind: vertex
    project: chaos-proj
    location: us-east5
    base_url: {chaos}
    publisher: anthropic
    credentials_file: {key}
    default_model: claude-sonnet-4
  - name: vg
    kind: vertex
    project: chaos-proj
    location: global
    base_url: {chaos}
    publisher: google
    credentials_file: {key}
    default_model: gemini-2.5-flash
  - name: an
    kind: anthropic
    base_url: {chaos}
    default_model: claude-sonnet-4
retry:
  server_error: {max_attempts: 2, initial_ms: 20, max_ms: 50}
";

/// chaos (`--vertex-key`: the test key) and hale with `config` (`{chaos}`:
/// chaos's base URL, `{key}`: the key file, whose `token_uri` is chaos's).
struct Rig(ChaosRig);

impl std::ops::Deref for Rig {
    type Target = ChaosRig;
    fn deref(&self) -> &ChaosRig {
        &self.0
    }
}

impl Rig {
    async fn start(routes: &str) -> Rig {
        Rig::start_config(&format!("routes:\n{routes}{PROVIDERS}")).await
    }

    async fn start_config(config: &str) -> Rig {
        let pem = throwaway_key();
        Rig::start_keys(config, &pem, &pem, false).await
    }

    /// chaos checks assertions against `chaos_pem`; hale signs with
    /// `hale_pem`, from the key file `GOOGLE_APPLICATION_CREDENTIALS` names
    /// when `by_env`.
    async fn start_keys(config: &str, chaos_pem: &str, hale_pem: &str, by_env: bool) -> Rig {
        hale_testkit::install_crypto();
        let dir = tempfile::tempdir().expect("tempdir");
        let http = hale_testkit::client(Duration::from_secs(60));
        let chaos_key = dir.path().join("chaos-key.json");
        std::fs::write(&chaos_key, vertex_key_json(chaos_pem, "unused")).expect("key written");
        let chaos_key_arg = chaos_key.to_string_lossy().into_owned();
        let (chaos, chaos_base) =
            start_chaos_with(&http, dir.path(), &["--vertex-key", &chaos_key_arg]).await;
        let key = dir.path().join("service-account.json");
        std::fs::write(
            &key,
            vertex_key_json(hale_pem, &format!("{chaos_base}/token")),
        )
        .expect("key written");
        let config = config
            .replace("{chaos}", &chaos_base)
            .replace("{key}", &key.to_string_lossy());
        let key_path = key.to_string_lossy().into_owned();
        let env: &[(&str, &str)] = if by_env {
            &[("GOOGLE_APPLICATION_CREDENTIALS", key_path.as_str())]
        } else {
            &[]
        };
        let (hale, base) = start_serve(&http, dir.path(), &config, env).await;
        Rig(ChaosRig {
            dir,
            chaos,
            chaos_base,
            hale,
            base,
            http,
        })
    }

    async fn py(&self, py: &Path, script: &str, args: &[&str]) -> Value {
        self.sdk(py, script, args).await
    }

    /// One Messages call: (status, JSON body or the SSE text as a string).
    async fn messages(&self, body: &Value) -> (u16, Value) {
        let r = self
            .http
            .post(format!("{}/v1/messages", self.base))
            .header("anthropic-version", "2023-06-01")
            .json(body)
            .send()
            .await
            .expect("hale answers");
        let status = r.status().as_u16();
        let text = r.text().await.expect("a body");
        let v = serde_json::from_str(&text).unwrap_or(Value::String(text));
        (status, v)
    }

    /// `GET /chaos/vertex/tokens`: minted, valid, refused, grants.
    async fn tokens(&self) -> Value {
        hale_testkit::get_json(
            &self.http,
            &format!("{}/chaos/vertex/tokens", self.chaos_base),
        )
        .await
    }
}

fn py() -> Option<PathBuf> {
    python_or_skip("import openai", "openai")
}

/// The `data:` objects of an SSE text.
fn sse_data(text: &str) -> Vec<Value> {
    text.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str(d).ok())
        .collect()
}

/// The text of a Messages event stream.
fn messages_text(v: &Value) -> String {
    sse_data(v.as_str().expect("an event stream"))
        .iter()
        .filter_map(|e| e["delta"]["text"].as_str().map(str::to_owned))
        .collect()
}

/// A Claude body as Vertex takes it: no `model`, Vertex's `anthropic_version`.
fn assert_vertex_claude_body(b: &Value) {
    assert!(b.get("model").is_none(), "the URL names the model: {b}");
    assert_eq!(b["anthropic_version"], "vertex-2023-10-16", "{b}");
    assert!(
        b.get("messages").is_some(),
        "Anthropic's Messages body: {b}"
    );
}

/// A Chat Completions client (the `openai` SDK) served by a Claude and by a
/// Gemini deployment on Vertex, streamed and not, each with a tool round
/// trip (the call non-streamed on one model, streamed on another).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_completions_client_served_by_vertex_claude_and_gemini_with_tool_round_trips() {
    let Some(py) = py() else { return };
    for (provider, model) in [("vc", "claude-sonnet-4"), ("vg", "gemini-2.5-flash")] {
        let rig = Rig::start(&format!(
            "  r: [{provider}/{model}]
  rt: [\"{provider}/tool:name=get_weather:times=1:args=city=Paris\"]
  rts: [\"{provider}/tool:name=get_weather:times=1:tokens=61:args=city=Rome\"]
"
        ))
        .await;
        let v = rig.py(&py, "gemini_client.py", &["chat", "r"]).await;
        let expected = words(60);
        assert_eq!(v["nonstream"]["text"], expected.as_str(), "{provider}: {v}");
        assert_eq!(v["nonstream"]["finish_reason"], "stop");
        assert_eq!(v["nonstream"]["provider"], provider);
        assert_eq!(v["nonstream"]["usage"]["completion_tokens"], 60);
        assert_eq!(v["stream"]["text"], expected.as_str(), "{provider}: {v}");
        assert_eq!(v["stream"]["finish_reason"], "stop");
        assert_eq!(rig.chaos_requests(model).await, 2, "{provider}");
        let bodies = rig.chaos_bodies().await;
        assert_eq!(bodies.len(), 2, "{bodies:?}");
        for b in &bodies {
            match provider {
                "vc" => {
                    assert_vertex_claude_body(b);
                    assert_eq!(
                        b["messages"][0]["content"][0]["text"],
                        "Tell me something useful."
                    );
                }
                _ => {
                    assert_eq!(b["contents"][0]["role"], "user", "{b}");
                    assert_eq!(
                        b["contents"][0]["parts"][0]["text"],
                        "Tell me something useful."
                    );
                }
            }
        }
        let v = rig
            .py(&py, "gemini_client.py", &["tool", "rt", "rts"])
            .await;
        for (mode, city, n) in [("nonstream", "Paris", 60), ("stream", "Rome", 61)] {
            let t = &v[mode];
            assert_eq!(t["finish_reason"], "tool_calls", "{provider} {mode}: {v}");
            assert_eq!(t["call"]["name"], "get_weather", "{mode}");
            assert_eq!(t["call"]["arguments"], json!({"city": city}), "{mode}");
            assert_eq!(t["second_text"], words(n).as_str(), "{mode}");
        }
        // The tool result went back in the publisher's dialect.
        let bodies = rig.chaos_bodies().await;
        let last = bodies.last().expect("bodies");
        let text = last.to_string();
        match provider {
            "vc" => {
                assert_vertex_claude_body(last);
                assert!(text.contains("\"tool_result\""), "{text}");
            }
            _ => assert!(text.contains("\"functionResponse\""), "{text}"),
        }
        assert!(text.contains("sunny, 21 C"), "{text}");
    }
}

/// A Responses client (the `openai` SDK) served by a Claude and by a Gemini
/// deployment on Vertex: streamed, not, structured output, and a tool
/// round trip.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_client_served_by_vertex_claude_and_gemini_with_a_tool_round_trip() {
    let Some(py) = py() else { return };
    let expected = words(60);
    for (provider, model) in [("vc", "claude-sonnet-4"), ("vg", "gemini-2.5-flash")] {
        let rig = Rig::start(&format!("  r: [{provider}/{model}]\n")).await;
        let v = rig.py(&py, "responses_client.py", &["basic", "r"]).await;
        assert_eq!(v["nonstream"]["text"], expected.as_str(), "{provider}: {v}");
        assert_eq!(v["nonstream"]["status"], "completed");
        assert_eq!(v["nonstream"]["provider"], provider);
        let s = &v["stream"];
        assert_eq!(s["text"], expected.as_str(), "{provider}: {s}");
        assert_eq!(s["last"], "response.completed", "{s}");
        assert_eq!(v["structured"]["text"], expected.as_str());
        assert_eq!(rig.chaos_requests(model).await, 3, "{provider}");

        // A rig of its own (a fourth identical question draws hale's nudge).
        let rig = Rig::start(&format!(
            "  rt: [\"{provider}/tool:name=get_weather:times=1:args=city=Paris\"]\n"
        ))
        .await;
        let v = rig.py(&py, "responses_client.py", &["tool", "rt"]).await;
        assert_eq!(v["call"]["name"], "get_weather", "{provider}: {v}");
        assert_eq!(v["call"]["arguments"], json!({"city": "Paris"}));
        assert_eq!(v["second_status"], "completed");
        assert_eq!(v["second_text"], expected.as_str());
        let bodies = rig.chaos_bodies().await;
        let text = bodies.last().expect("bodies").to_string();
        assert!(text.contains("sunny, 21 C"), "{provider}: {text}");
    }
}

/// A Messages client served by a Claude deployment on Vertex keeps its
/// request: chaos gets the client's body minus `model`, plus Vertex's
/// `anthropic_version`, streamed and not, and a tool round trip; the same
/// client served by Gemini on Vertex is translated to `contents`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_client_served_by_vertex_claude_keeps_its_body_and_by_gemini_is_translated() {
    let rig = Rig::start(
        "  r: [vc/claude-sonnet-4]
  g: [vg/gemini-2.5-flash]
  rt: [\"vc/tool:name=get_weather:times=1:args=city=Paris\"]
",
    )
    .await;
    let expected = words(60);
    let ask = |model: &str, stream: bool| {
        json!({"model": model, "max_tokens": 1024, "stream": stream,
               "system": "Be useful.", "metadata": {"user_id": "u-1"},
               "messages": [{"role": "user", "content": "Tell me something useful."}]})
    };
    let (status, v) = rig.messages(&ask("r", false)).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["content"][0]["text"], expected.as_str(), "{v}");
    assert_eq!(v["stop_reason"], "end_turn");
    let (status, v) = rig.messages(&ask("r", true)).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(messages_text(&v), expected);
    let bodies = rig.chaos_bodies().await;
    for (b, stream) in bodies.iter().zip([false, true]) {
        let mut want = ask("r", stream);
        want.as_object_mut().expect("object").remove("model");
        want["anthropic_version"] = json!("vertex-2023-10-16");
        assert_eq!(b, &want, "the client's body, minus model, plus the version");
    }

    // A tool round trip on Claude.
    let tools = json!([{"name": "get_weather", "description": "The weather in a city.",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]);
    let mut first = ask("rt", false);
    first["tools"] = tools;
    let (status, v) = rig.messages(&first).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["stop_reason"], "tool_use", "{v}");
    let block = &v["content"][0];
    assert_eq!(block["input"], json!({"city": "Paris"}), "{v}");
    let mut second = first.clone();
    let msgs = second["messages"].as_array_mut().expect("messages");
    msgs.push(json!({"role": "assistant", "content": [block.clone()]}));
    msgs.push(json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": block["id"], "content": "sunny, 21 C"}]}));
    let (status, v) = rig.messages(&second).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["content"][0]["text"], expected.as_str(), "{v}");
    let bodies = rig.chaos_bodies().await;
    let last = bodies.last().expect("bodies");
    assert_vertex_claude_body(last);
    assert_eq!(last["tools"][0]["name"], "get_weather");
    assert_eq!(last["messages"][2]["content"][0]["type"], "tool_result");

    // Gemini on Vertex: translated, a role on every content.
    let (status, v) = rig.messages(&ask("g", true)).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(messages_text(&v), expected);
    let bodies = rig.chaos_bodies().await;
    let g = bodies.last().expect("bodies");
    assert_eq!(
        g["systemInstruction"],
        json!({"parts": [{"text": "Be useful."}]})
    );
    assert_eq!(g["contents"][0]["role"], "user", "{g}");
    assert_eq!(g["generationConfig"]["maxOutputTokens"], 1024);
}

/// Config with the Claude provider only: the token flow's counts are its own.
const ONE_PROVIDER: &str = "
routes:
  r: [vc/claude-sonnet-4]
providers:
  - name: vc
    kind: vertex
    project: chaos-proj
    location: us-east5
    base_url: {chaos}
    credentials_file: {key}
    default_model: claude-sonnet-4
";

fn hello() -> Value {
    json!({"model": "r", "max_tokens": 64, "messages": [{"role": "user", "content": "hello"}]})
}

/// hale's token comes from the loopback token endpoint through the key
/// file's JWT-bearer grant: one assertion, issued by the key's
/// `client_email` for the cloud-platform scope and signed by the key (chaos
/// verifies it), and the token is kept across turns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_token_comes_from_the_key_files_token_endpoint_and_is_kept() {
    let rig = Rig::start_config(ONE_PROVIDER).await;
    for _ in 0..3 {
        let (status, v) = rig.messages(&hello()).await;
        assert_eq!(status, 200, "{v}");
    }
    let t = rig.tokens().await;
    assert_eq!(t["minted"], 1, "one token for three turns: {t}");
    assert_eq!(t["refused"], 0, "{t}");
    let grant = &t["grants"][0];
    assert_eq!(grant["iss"], VERTEX_CLIENT_EMAIL, "{t}");
    assert_eq!(
        grant["scope"],
        "https://www.googleapis.com/auth/cloud-platform"
    );
    assert_eq!(
        grant["aud"],
        format!("{}/token", rig.chaos_base),
        "the key's token_uri"
    );
    // The token is in no log line of hale's.
    assert!(
        !rig.hale.stderr().contains("ya29."),
        "{}",
        rig.hale.stderr()
    );
}

/// An assertion signed by another key is refused by the token endpoint:
/// hale gets no token and answers the client with an auth error naming no
/// token; chaos's chat routes saw nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_assertion_signed_by_another_key_gets_no_token() {
    let rig = Rig::start_keys(ONE_PROVIDER, &throwaway_key(), &throwaway_key(), false).await;
    let (status, v) = rig.messages(&hello()).await;
    assert!(status >= 400, "{status}: {v}");
    assert!(v.to_string().contains("Vertex token"), "{v}");
    let t = rig.tokens().await;
    assert_eq!(t["minted"], 0, "{t}");
    assert_eq!(rig.chaos_requests("claude-sonnet-4").await, 0);
}

/// Without `credentials_file`, the key `GOOGLE_APPLICATION_CREDENTIALS`
/// names is used: its token comes from its token endpoint.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn google_application_credentials_names_the_key_when_no_file_is_configured() {
    let pem = throwaway_key();
    let config = ONE_PROVIDER.replace("    credentials_file: {key}\n", "");
    assert!(!config.contains("credentials_file"), "{config}");
    let rig = Rig::start_keys(&config, &pem, &pem, true).await;
    let (status, v) = rig.messages(&hello()).await;
    assert_eq!(status, 200, "{v}");
    let t = rig.tokens().await;
    assert_eq!(t["minted"], 1, "{t}");
    assert_eq!(t["grants"][0]["iss"], VERTEX_CLIENT_EMAIL, "{t}");
}

/// A token Vertex stops accepting (401) is fetched again and the request
/// sent once more: the turn is served, with a second assertion granted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_token_is_fetched_again_and_the_turn_served() {
    let rig = Rig::start_config(ONE_PROVIDER).await;
    let (status, v) = rig.messages(&hello()).await;
    assert_eq!(status, 200, "{v}");
    let r = rig
        .http
        .post(format!("{}/chaos/vertex/revoke", rig.chaos_base))
        .send()
        .await
        .expect("chaos answers");
    assert_eq!(r.status(), 204);
    let (status, v) = rig.messages(&hello()).await;
    assert_eq!(status, 200, "served after the refusal: {v}");
    assert_eq!(v["content"][0]["text"], words(60).as_str(), "{v}");
    let t = rig.tokens().await;
    assert_eq!(t["minted"], 2, "fetched again after the 401: {t}");
    assert_eq!(t["refused"], 1, "one 401: {t}");
    let (status, _) = rig.messages(&hello()).await;
    assert_eq!(status, 200);
    assert_eq!(rig.tokens().await["minted"], 2, "the new token is kept");
}

/// Route [Claude on Vertex answering 429 `RESOURCE_EXHAUSTED` with a
/// `RetryInfo` wait, Anthropic]: both turns are served by the fallback, and
/// the wait keeps the Vertex deployment out for the second (one 429).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resource_exhausted_on_the_vertex_primary_fails_over() {
    let Some(py) = py() else { return };
    let rig = Rig::start("  r: [\"vc/rate-limit:retry_after=30\", an/claude-sonnet-4]\n").await;
    let v = rig.py(&py, "gemini_client.py", &["chat", "r"]).await;
    assert_eq!(v["nonstream"]["text"], words(60).as_str(), "{v}");
    assert_eq!(v["nonstream"]["provider"], "an", "{v}");
    assert_eq!(v["stream"]["text"], words(60).as_str(), "{v}");
    assert_eq!(rig.chaos_requests("rate-limit:retry_after=30").await, 1);
    assert_eq!(rig.chaos_faults("rate-limit").await, 1);
    assert_eq!(rig.chaos_requests("claude-sonnet-4").await, 2);
}

/// A stream cut on Claude on Vertex after 20 words is resumed on Gemini on
/// Vertex: the Messages client gets the whole answer once, in one stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_cut_on_vertex_is_resumed() {
    let rig = Rig::start("  r: [\"vc/cut:after=20\", vg/gemini-2.5-flash]\n").await;
    let body = json!({"model": "r", "max_tokens": 1024, "stream": true,
        "messages": [{"role": "user", "content": "Tell me something useful."}]});
    let (status, v) = rig.messages(&body).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(messages_text(&v), words(60), "{v}");
    let events = sse_data(v.as_str().expect("a stream"));
    assert_eq!(
        events
            .iter()
            .filter(|e| e["type"] == "message_start")
            .count(),
        1
    );
    assert!(events.iter().any(|e| e["type"] == "message_stop"));
    assert_eq!(rig.chaos_requests("cut:after=20").await, 1, "cut once");
    assert_eq!(
        rig.chaos_requests("gemini-2.5-flash").await,
        1,
        "resumed on Gemini"
    );
}

/// A Gemini safety block on Vertex (a 200 whose `promptFeedback.blockReason`
/// says `SAFETY`) is the content-policy class: final for the caller, in its
/// own shape, with no failover to the next target.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gemini_safety_block_on_vertex_is_a_content_policy_error() {
    let rig = Rig::start("  r: [vg/content-filter, an/claude-sonnet-4]\n").await;
    let (status, b) = rig
        .messages(&json!({"model": "r", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}))
        .await;
    assert_eq!(status, 400, "{b}");
    assert_eq!(b["error"]["type"], "content_policy", "{b}");
    assert!(
        b.to_string().contains("blockReason SAFETY"),
        "the reason is named: {b}"
    );
    assert_eq!(rig.chaos_requests("content-filter").await, 1);
    assert_eq!(
        rig.chaos_requests("claude-sonnet-4").await,
        0,
        "no failover"
    );
}
