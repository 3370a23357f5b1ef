//! AWS Bedrock (`kind: bedrock`, issue 29) through the real `hale serve`,
//! with `hale chaos` playing Bedrock (`/model/{id}/converse`,
//! `/converse-stream`, `/invoke`, `/invoke-with-response-stream`, the
//! binary event stream, and a SigV4 check that recomputes every signature
//! from the access key's secret): a Chat Completions client and a
//! Responses client (the official `openai` Python SDK) and a Messages
//! client (plain HTTP), streamed and not, with tool round trips, through
//! Converse and through InvokeModel; credentials from the environment, a
//! shared profile file and a web identity exchanged at chaos's loopback STS;
//! a wrong secret refused by chaos's signature check; a throttled Bedrock
//! primary failing over; a `ValidationException` about the input length
//! classified as a context overflow; a stream cut on Bedrock resumed.
//!
//! Python comes from `HALE_PYTHON`, else `.venv/bin/python` at the workspace
//! root. Without a Python that can `import openai` each SDK test prints why
//! and returns — except under `CI=true`, where that is a failure.

mod common;

use common::*;
use hale_testkit::python_or_skip;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The access key chaos knows (AWS's documented example pair).
const AKID: &str = "AKIDEXAMPLE";
const SECRET: &str = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";
/// A model id that defaults to Converse, and one to InvokeModel.
const LLAMA: &str = "meta.llama3-70b-instruct-v1:0";
const CLAUDE: &str = "us.anthropic.claude-sonnet-4-20250514-v1:0";

/// `hale chaos` and `hale serve` with `config` (`{chaos}` in it and in the
/// environment values is chaos's base URL), the environment given.
struct Rig {
    dir: tempfile::TempDir,
    _chaos: Proc,
    chaos_base: String,
    hale: Proc,
    base: String,
    http: reqwest::Client,
}

/// The environment of hale with the example keys.
fn env_keys() -> Vec<(String, String)> {
    vec![
        ("AWS_ACCESS_KEY_ID".into(), AKID.into()),
        ("AWS_SECRET_ACCESS_KEY".into(), SECRET.into()),
    ]
}

impl Rig {
    async fn start(config: &str, env: Vec<(String, String)>) -> Rig {
        let dir = tempfile::tempdir().expect("tempdir");
        Rig::start_in(dir, config, env).await
    }

    async fn start_in(dir: tempfile::TempDir, config: &str, env: Vec<(String, String)>) -> Rig {
        hale_testkit::install_crypto();
        let http = hale_testkit::client(Duration::from_secs(60));
        let (chaos, chaos_base) = start_chaos_with(&http, dir.path(), &[]).await;
        let config = config.replace("{chaos}", &chaos_base);
        // No AWS settings of the machine running the tests leak in.
        let mut all = aws_env_isolated(dir.path());
        for (k, v) in env {
            all.retain(|(kk, _)| *kk != k);
            all.push((k, v.replace("{chaos}", &chaos_base)));
        }
        let env_ref: Vec<(&str, &str)> =
            all.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let (hale, base) = start_serve(&http, dir.path(), &config, &env_ref).await;
        Rig {
            dir,
            _chaos: chaos,
            chaos_base,
            hale,
            base,
            http,
        }
    }

    async fn sdk(&self, py: &Path, script: &str, mode: &str, model: &str) -> Value {
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/sdk")
            .join(script);
        let base_url = format!("{}/v1", self.base);
        let out = tokio::process::Command::new(py)
            .arg(&script)
            .args([mode, base_url.as_str(), model])
            .output()
            .await
            .expect("python runs");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "the SDK script failed:\n{stdout}\n{stderr}\nhale:\n{}",
            self.hale.stderr()
        );
        serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"))
    }

    async fn stats(&self) -> Value {
        hale_testkit::get_json(&self.http, &format!("{}/chaos/stats", self.chaos_base)).await
    }

    async fn requests_for(&self, model: &str) -> u64 {
        self.stats().await["requests_per_model"][model]
            .as_u64()
            .unwrap_or(0)
    }

    async fn faults(&self, fault: &str) -> u64 {
        self.stats().await["requests_per_fault"][fault]
            .as_u64()
            .unwrap_or(0)
    }

    async fn bodies(&self) -> Vec<Value> {
        let v = hale_testkit::get_json(&self.http, &format!("{}/chaos/requests", self.chaos_base))
            .await;
        v.as_array().cloned().unwrap_or_default()
    }

    /// One Messages call: (status, JSON body or the SSE text as a string).
    async fn messages(&self, body: Value, beta: Option<&str>) -> (u16, Value) {
        let mut rb = self
            .http
            .post(format!("{}/v1/messages", self.base))
            .header("anthropic-version", "2023-06-01");
        if let Some(b) = beta {
            rb = rb.header("anthropic-beta", b);
        }
        let r = rb.json(&body).send().await.expect("hale answers");
        let status = r.status().as_u16();
        let text = r.text().await.expect("a body");
        let v = serde_json::from_str(&text).unwrap_or(Value::String(text));
        (status, v)
    }

    /// One Chat Completions call: (status, JSON body).
    async fn chat(&self, model: &str) -> (u16, Value) {
        let r = self
            .http
            .post(format!("{}/v1/chat/completions", self.base))
            .json(&json!({"model": model, "messages": [{"role": "user", "content": "Tell me something useful."}]}))
            .send()
            .await
            .expect("hale answers");
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }
}

fn py() -> Option<PathBuf> {
    python_or_skip("import openai", "openai")
}

/// A bedrock provider `name` at chaos, with `extra` YAML lines (indented
/// four spaces) under it.
fn provider(name: &str, default_model: &str, extra: &str) -> String {
    format!(
        "
  - name: {name}
    kind: bedrock
    region: us-east-1
    base_url: {{chaos}}
    default_model: \"{default_model}\"
{extra}"
    )
}

/// The `data:` objects of an SSE text.
fn sse_data(text: &str) -> Vec<Value> {
    text.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str(d).ok())
        .collect()
}

/// A Chat Completions client (the openai SDK) served through Converse,
/// streamed and not, signed with keys from the environment: the model id
/// is in the URL (chaos counts by it), the body is Converse's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_completions_sdk_through_bedrock_converse() {
    let Some(py) = py() else { return };
    let rig = Rig::start(
        &format!("providers:{}", provider("br", LLAMA, "")),
        env_keys(),
    )
    .await;
    let v = rig.sdk(&py, "responses_client.py", "chat", LLAMA).await;
    let expected = words(60);
    assert_eq!(v["nonstream"]["text"], expected.as_str(), "{v}");
    assert_eq!(v["nonstream"]["finish_reason"], "stop");
    assert_eq!(v["nonstream"]["provider"], "br");
    assert_eq!(v["stream"]["text"], expected.as_str(), "{v}");
    assert_eq!(v["stream"]["finish_reason"], "stop");
    assert_eq!(rig.requests_for(LLAMA).await, 2);
    for b in rig.bodies().await {
        assert!(b.get("model").is_none(), "Converse names no model: {b}");
        assert_eq!(
            b["messages"][0],
            json!({"role": "user", "content": [{"text": "Tell me something useful."}]})
        );
    }
}

/// A Chat Completions tool round trip through Converse (streamed call,
/// toolResult sent back) and through InvokeModel (`api: invoke`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_completions_sdk_tool_round_trips_through_converse_and_invoke() {
    let Some(py) = py() else { return };
    const TOOL: &str = "tool:name=get_weather:times=1:args=city=Paris";
    for (api, name) in [("converse", "conv"), ("invoke", "inv")] {
        let rig = Rig::start(
            &format!(
                "providers:{}",
                provider(name, TOOL, &format!("    api: {api}\n"))
            ),
            env_keys(),
        )
        .await;
        let v = rig.sdk(&py, "azure_client.py", "chat_tool", TOOL).await;
        assert_eq!(v["first_finish"], "tool_calls", "{api}: {v}");
        assert_eq!(v["call"]["name"], "get_weather");
        assert_eq!(v["call"]["arguments"], json!({"city": "Paris"}));
        assert_eq!(v["second_text"], words(60).as_str(), "{api}: {v}");
        let bodies = rig.bodies().await;
        assert_eq!(bodies.len(), 2, "{bodies:?}");
        let sent = bodies[1]["messages"].to_string();
        match api {
            "converse" => {
                assert!(sent.contains("\"toolResult\""), "{sent}");
                assert!(sent.contains("\"toolUse\""), "{sent}");
                assert_eq!(
                    bodies[1]["toolConfig"]["tools"][0]["toolSpec"]["name"],
                    "get_weather"
                );
            }
            _ => {
                assert!(sent.contains("\"tool_result\""), "{sent}");
                assert_eq!(bodies[1]["anthropic_version"], "bedrock-2023-05-31");
            }
        }
    }
}

/// A Responses client (the openai SDK) served by Claude through
/// InvokeModel (the default for an Anthropic model id), streamed, not and
/// structured; then a function tool round trip through Converse.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_sdk_through_invoke_and_a_tool_round_trip_through_converse() {
    let Some(py) = py() else { return };
    const TOOL: &str = "tool:name=get_weather:times=1:args=city=Paris";
    let rig = Rig::start(
        &format!(
            "routes:\n  r: [\"br/{CLAUDE}\"]\nproviders:{}",
            provider("br", CLAUDE, "")
        ),
        env_keys(),
    )
    .await;
    let v = rig.sdk(&py, "responses_client.py", "basic", "r").await;
    let expected = words(60);
    assert_eq!(v["nonstream"]["text"], expected.as_str(), "{v}");
    assert_eq!(v["nonstream"]["status"], "completed");
    assert_eq!(v["nonstream"]["provider"], "br");
    assert_eq!(v["stream"]["text"], expected.as_str(), "{v}");
    assert_eq!(v["stream"]["last"], "response.completed");
    assert_eq!(v["stream"]["seqs_continuous"], true);
    assert_eq!(v["structured"]["text"], expected.as_str());
    assert_eq!(rig.requests_for(CLAUDE).await, 3);
    for b in rig.bodies().await {
        assert_eq!(b["anthropic_version"], "bedrock-2023-05-31", "{b}");
        assert!(b.get("model").is_none() && b.get("stream").is_none(), "{b}");
    }
    // A fresh hale: a fourth identical turn would draw its stuck nudge.
    drop(rig);
    let rig = Rig::start(
        &format!("providers:{}", provider("br", TOOL, "")),
        env_keys(),
    )
    .await;
    let v = rig.sdk(&py, "responses_client.py", "tool", TOOL).await;
    assert_eq!(v["call"]["name"], "get_weather", "{v}");
    assert_eq!(v["call"]["arguments"], json!({"city": "Paris"}));
    assert_eq!(v["second_text"], words(60).as_str());
    let bodies = rig.bodies().await;
    let last = bodies.last().expect("a body");
    assert!(
        last["messages"].to_string().contains("toolResult"),
        "{last}"
    );
}

/// A Messages client on InvokeModel keeps its bytes: chaos gets the
/// client's fields (an Anthropic-only `metadata` and `thinking` too) without
/// `model` and `stream`, with `anthropic_version`, and the client's
/// `anthropic-beta` header as `anthropic_beta`; streamed and not, a tool
/// round trip; then the same client through Converse.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_client_through_invoke_keeps_its_fields_and_through_converse() {
    const TOOL: &str = "tool:name=get_weather:times=1:args=city=Rome";
    let rig = Rig::start(
        &format!(
            "routes:\n  c: [\"br/{CLAUDE}\"]\n  ct: [\"br/{TOOL}\"]\n  l: [\"br/{LLAMA}\"]\nproviders:{}",
            provider(
                "br",
                CLAUDE,
                &format!("    models: [\"{CLAUDE}\", \"{TOOL}\", \"{LLAMA}\"]\n")
            )
        ),
        env_keys(),
    )
    .await;
    let ask = |model: &str, stream: bool| {
        json!({"model": model, "max_tokens": 2048, "stream": stream,
               "system": "Be useful.",
               "metadata": {"user_id": "u-1"},
               "thinking": {"type": "enabled", "budget_tokens": 1024},
               "messages": [{"role": "user", "content": "Tell me something useful."}]})
    };
    let expected = words(60);
    let (status, v) = rig
        .messages(ask("c", false), Some("interleaved-thinking-2025-05-14"))
        .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["content"][0]["text"], expected.as_str(), "{v}");
    assert_eq!(v["stop_reason"], "end_turn");
    let (status, v) = rig.messages(ask("c", true), None).await;
    assert_eq!(status, 200);
    let events = sse_data(v.as_str().expect("an event stream"));
    let text: String = events
        .iter()
        .filter_map(|e| e["delta"]["text"].as_str())
        .collect();
    assert_eq!(text, expected);
    assert!(events.iter().any(|e| e["type"] == "message_stop"));
    let bodies = rig.bodies().await;
    let mut want = ask("c", false);
    {
        let w = want.as_object_mut().unwrap();
        w.remove("model");
        w.remove("stream");
        w.insert("anthropic_version".into(), json!("bedrock-2023-05-31"));
        w.insert(
            "anthropic_beta".into(),
            json!(["interleaved-thinking-2025-05-14"]),
        );
    }
    assert_eq!(
        bodies[0], want,
        "the client's fields, as InvokeModel takes them"
    );
    want.as_object_mut().unwrap().remove("anthropic_beta");
    assert_eq!(bodies[1], want);

    // A tool round trip on InvokeModel, streamed.
    let tools = json!([{"name": "get_weather", "description": "The weather in a city.",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]);
    let mut first = ask("ct", true);
    first.as_object_mut().unwrap().remove("thinking");
    first["tools"] = tools;
    let (status, v) = rig.messages(first.clone(), None).await;
    assert_eq!(status, 200, "{v}");
    let events = sse_data(v.as_str().expect("an event stream"));
    let start = events
        .iter()
        .find(|e| e["content_block"]["type"] == "tool_use")
        .unwrap_or_else(|| panic!("a tool_use block: {events:?}"));
    let id = start["content_block"]["id"].as_str().unwrap().to_owned();
    let args: String = events
        .iter()
        .filter_map(|e| e["delta"]["partial_json"].as_str())
        .collect();
    assert_eq!(
        serde_json::from_str::<Value>(&args).unwrap(),
        json!({"city": "Rome"})
    );
    let mut second = first;
    second["stream"] = json!(false);
    let msgs = second["messages"].as_array_mut().unwrap();
    msgs.push(json!({"role": "assistant", "content": [{"type": "tool_use", "id": id, "name": "get_weather", "input": {"city": "Rome"}}]}));
    msgs.push(json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": id, "content": "sunny, 21 C"}]}));
    let (status, v) = rig.messages(second, None).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["content"][0]["text"], expected.as_str(), "{v}");

    // The same client through Converse: translated, streamed and not.
    for stream in [false, true] {
        let mut body = ask("l", stream);
        body.as_object_mut().unwrap().remove("thinking");
        let (status, v) = rig.messages(body, None).await;
        assert_eq!(status, 200, "{v}");
        let text = if stream {
            sse_data(v.as_str().expect("an event stream"))
                .iter()
                .filter_map(|e| e["delta"]["text"].as_str().map(str::to_owned))
                .collect::<String>()
        } else {
            v["content"][0]["text"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        };
        assert_eq!(text, expected, "stream={stream}: {v}");
    }
    let bodies = rig.bodies().await;
    let conv = bodies.last().expect("a Converse body");
    assert_eq!(conv["system"], json!([{"text": "Be useful."}]), "{conv}");
    assert_eq!(conv["inferenceConfig"]["maxTokens"], 2048);
    assert_eq!(rig.requests_for(LLAMA).await, 2);
}

/// Credentials from a shared profile file (`profile:` in config) and from
/// a web identity exchanged at chaos's loopback STS (temporary credentials
/// with a session token, which chaos's signature check requires); a wrong
/// secret is refused by chaos's signature check and reaches the client as
/// an auth failure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_from_a_profile_file_and_a_web_identity_and_a_wrong_secret_refused() {
    // A profile file.
    let dir = tempfile::tempdir().expect("tempdir");
    let creds = dir.path().join("credentials");
    std::fs::write(
        &creds,
        format!("[default]\naws_access_key_id = AKIDWRONG\naws_secret_access_key = x\n\n[work]\naws_access_key_id = {AKID}\naws_secret_access_key = {SECRET}\n"),
    )
    .unwrap();
    let rig = Rig::start_in(
        dir,
        &format!("providers:{}", provider("br", LLAMA, "    profile: work\n")),
        vec![(
            "AWS_SHARED_CREDENTIALS_FILE".into(),
            creds.display().to_string(),
        )],
    )
    .await;
    let (status, v) = rig.chat(LLAMA).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["choices"][0]["message"]["content"], words(60).as_str());
    assert_eq!(rig.faults("bedrock-refused").await, 0);
    drop(rig);

    // A web identity: the token file and role from the environment, STS at chaos.
    let dir = tempfile::tempdir().expect("tempdir");
    let token = dir.path().join("token");
    std::fs::write(&token, "chaos-web-identity-token\n").unwrap();
    let rig = Rig::start_in(
        dir,
        &format!("providers:{}", provider("br", LLAMA, "")),
        vec![
            (
                "AWS_WEB_IDENTITY_TOKEN_FILE".into(),
                token.display().to_string(),
            ),
            (
                "AWS_ROLE_ARN".into(),
                "arn:aws:iam::123456789012:role/hale".into(),
            ),
            ("AWS_ENDPOINT_URL_STS".into(), "{chaos}".into()),
        ],
    )
    .await;
    for _ in 0..2 {
        let (status, v) = rig.chat(LLAMA).await;
        assert_eq!(status, 200, "{v}\n{}", rig.hale.stderr());
        assert_eq!(v["choices"][0]["message"]["content"], words(60).as_str());
    }
    assert_eq!(rig.faults("bedrock-refused").await, 0);
    assert!(
        !rig.hale.stderr().contains("chaos-sts-secret"),
        "no secret in hale's logs"
    );
    drop(rig);

    // A wrong secret: chaos's recomputed signature differs.
    let rig = Rig::start(
        &format!("providers:{}", provider("br", LLAMA, "")),
        vec![
            ("AWS_ACCESS_KEY_ID".into(), AKID.into()),
            ("AWS_SECRET_ACCESS_KEY".into(), "not-the-secret".into()),
        ],
    )
    .await;
    let (status, v) = rig.chat(LLAMA).await;
    assert_eq!(status, 503, "{v}");
    assert_eq!(v["error"]["hale"]["class"], "auth", "{v}");
    let tl = &v["error"]["hale"]["timeline"][0];
    assert_eq!(tl["status"], 403, "{v}");
    assert!(
        tl["message"].as_str().unwrap_or("").contains("signature"),
        "{v}"
    );
    assert!(rig.faults("bedrock-refused").await >= 1);
    assert!(!v.to_string().contains("not-the-secret"), "{v}");
}

/// A Bedrock API key (`auth: api_key`) goes as a bearer that chaos checks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bedrock_api_key_is_sent_as_a_bearer() {
    let dir = tempfile::tempdir().expect("tempdir");
    hale_testkit::install_crypto();
    let http = hale_testkit::client(Duration::from_secs(60));
    let (_chaos, chaos_base) =
        start_chaos_with(&http, dir.path(), &["--bedrock-api-key", "br-key-1"]).await;
    let config = format!("providers:{}", provider("br", LLAMA, "    auth: api_key\n"))
        .replace("{chaos}", &chaos_base);
    let (hale, base) = start_serve(
        &http,
        dir.path(),
        &config,
        &[("AWS_BEARER_TOKEN_BEDROCK", "br-key-1")],
    )
    .await;
    let r = http
        .post(format!("{base}/v1/chat/completions"))
        .json(&json!({"model": LLAMA, "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .expect("hale answers");
    assert_eq!(r.status(), 200, "{}", hale.stderr());
}

/// Route [bedrock throttled (ThrottlingException), openai]: both turns are
/// served by the fallback; a `ModelNotReadyException` (chaos's error-529 on
/// Bedrock) on the primary of another route likewise.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_throttled_bedrock_primary_fails_over() {
    let Some(py) = py() else { return };
    let rig = Rig::start(
        &format!(
            "routes:\n  r: [\"br/rate-limit\", oa/chaos]\nproviders:{}  - name: oa\n    kind: openai\n    base_url: {{chaos}}/v1\n    default_model: chaos\n",
            provider("br", "rate-limit", "")
        ),
        env_keys(),
    )
    .await;
    let v = rig.sdk(&py, "responses_client.py", "chat", "r").await;
    assert_eq!(v["nonstream"]["text"], words(60).as_str(), "{v}");
    assert_eq!(v["nonstream"]["provider"], "oa", "{v}");
    assert_eq!(v["stream"]["text"], words(60).as_str(), "{v}");
    assert!(
        rig.requests_for("rate-limit").await >= 1,
        "the primary was tried"
    );
    assert_eq!(rig.requests_for("chaos").await, 2);
    assert!(
        rig.hale.stderr().contains("rate_limit") || rig.faults("rate-limit").await >= 1,
        "throttled"
    );
}

/// Bedrock's `ValidationException` "Input is too long for requested model."
/// is a context overflow: alone on its route the client gets hale's
/// `context_length_exceeded` after one call (never re-sent unchanged);
/// with a backup, the backup serves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_validation_exception_about_length_is_a_context_overflow() {
    let rig = Rig::start(
        &format!(
            "routes:\n  alone: [\"br/context-overflow\"]\n  r: [\"br/context-overflow\", \"br/{LLAMA}\"]\nproviders:{}",
            provider(
                "br",
                "context-overflow",
                &format!("    models: [context-overflow, \"{LLAMA}\"]\n")
            )
        ),
        env_keys(),
    )
    .await;
    let (status, v) = rig.chat("alone").await;
    assert_eq!(status, 400, "{v}");
    assert_eq!(v["error"]["type"], "context_length_exceeded", "{v}");
    assert_eq!(rig.requests_for("context-overflow").await, 1);
    let (status, v) = rig.chat("r").await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["choices"][0]["message"]["content"], words(60).as_str());
}

/// A Converse stream cut after 20 words is resumed on an InvokeModel
/// deployment: the client gets the whole answer once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_cut_on_bedrock_is_resumed() {
    let Some(py) = py() else { return };
    let rig = Rig::start(
        &format!(
            "routes:\n  r: [\"br/cut:after=20\", \"br2/{CLAUDE}\"]\nproviders:{}{}",
            provider("br", "cut:after=20", ""),
            provider("br2", CLAUDE, "")
        ),
        env_keys(),
    )
    .await;
    let v = rig.sdk(&py, "responses_client.py", "stream", "r").await;
    let s = &v["stream"];
    assert_eq!(s["text"], words(60).as_str(), "{v}");
    assert_eq!(s["seqs_continuous"], true, "{s}");
    assert_eq!(s["last"], "response.completed", "{s}");
    assert_eq!(s["errors"], json!([]), "{s}");
    assert_eq!(rig.requests_for("cut:after=20").await, 1, "cut once");
    assert_eq!(rig.requests_for(CLAUDE).await, 1, "resumed on br2");
    let _ = rig.dir.path();
}
