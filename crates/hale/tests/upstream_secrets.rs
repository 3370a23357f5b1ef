//! Issue 42, through the real `hale serve` with `hale chaos` playing the
//! providers:
//!
//! - **item 3**: an upstream that answers 401 with the credential it
//!   received (chaos's `auth-echo` fault) — a Gemini key, an Azure
//!   `api-key`, an Azure Entra token from `token_command` (a live token,
//!   in no config), a Bedrock API key, Vertex OAuth tokens (live, fetched
//!   again after the 401) — reaches neither the caller's error, nor
//!   `GET /turns/{id}`, nor the events, nor the store's files, nor hale's
//!   log: each shows `[redacted]` where the echo was;
//! - **item 2**: a client's model placed in a provider's URL is one path
//!   segment there (an Azure deployment URL keeps its endpoint and API
//!   version), and a model with a `.` or `..` part is refused with a 400
//!   in the caller's dialect before any provider is called.

mod common;

use common::*;
use serde_json::{Value, json};
use std::path::Path;

/// A Gemini API key as Google issues them.
const GEMINI_KEY: &str = "AIzaSyChaos-gemini-key_0123456789";
/// An Azure `api-key`.
const AZURE_KEY: &str = "3f2a9c0d8e7b4a1f9c6d5e4b3a2f1e0d";
/// What an Entra `token_command` prints.
const ENTRA_TOKEN: &str = "eyJ0eXAiOiJKV1Qi.entra-live-token.sig-0123";
/// A Bedrock API key.
const BEDROCK_KEY: &str = "ABSKQmVkcm9ja0FQSUtleS1jaGFvcw==";

/// A chat call of `model` to hale's OpenAI route: status, body, turn id.
async fn chat(rig: &ChaosRig, model: &str) -> (u16, String, Option<String>) {
    let r = rig
        .http
        .post(format!("{}/v1/chat/completions", rig.base))
        .json(&json!({"model": model, "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .expect("hale answers");
    let status = r.status().as_u16();
    let turn = r
        .headers()
        .get("x-hale-turn-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    (status, r.text().await.expect("body"), turn)
}

/// Every file under `dir` (the store: `hale.db` and its WAL), as bytes.
fn files_under(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(files_under(&p));
        } else if let Ok(bytes) = std::fs::read(&p) {
            out.push((p.display().to_string(), bytes));
        }
    }
    out
}

/// What a caller and an operator can read after a turn: the caller's
/// answer, the journalled turn, the events, the store's files, hale's log.
struct Seen {
    body: String,
    journalled: String,
    events: String,
    store: Vec<(String, Vec<u8>)>,
    log: String,
}

/// One turn against a provider whose upstream echoes the credential it
/// received in a 401: the caller gets hale's 503, the echo in it masked
/// (so the checks below would see a leak), as in the journal and events.
async fn echoed_turn(rig: &ChaosRig) -> Seen {
    let (status, body, turn) = chat(rig, "auth-echo").await;
    assert_eq!(status, 503, "{body}");
    assert!(
        rig.chaos_faults("auth-echo").await >= 1,
        "the upstream echoed"
    );
    assert!(
        body.contains("the request carried") && body.contains("[redacted]"),
        "{body}"
    );
    let turn = turn.expect("the turn's id");
    let journalled = hale_testkit::get_text(&rig.http, &format!("{}/turns/{turn}", rig.base)).await;
    let row: Value = serde_json::from_str(&journalled).expect("the turn as JSON");
    assert_eq!(row["status"], "failed", "{row}");
    assert!(journalled.contains("[redacted]"), "{journalled}");
    let events = hale_testkit::get_text(
        &rig.http,
        &format!("{}/events?follow=false&tail=1000", rig.base),
    )
    .await;
    assert!(events.contains("agent.failed"), "{events}");
    assert!(events.contains("[redacted]"), "{events}");
    let store = files_under(&rig.dir.path().join("data"));
    assert!(!store.is_empty(), "the store's files");
    Seen {
        body,
        journalled,
        events,
        store,
        log: rig.hale.stderr(),
    }
}

/// No secret is anywhere in what was seen.
fn assert_nowhere(seen: &Seen, secrets: &[String]) {
    assert!(!secrets.is_empty());
    for s in secrets {
        assert!(
            !seen.body.contains(s.as_str()),
            "the caller's error: {}",
            seen.body
        );
        assert!(
            !seen.journalled.contains(s.as_str()),
            "GET /turns: {}",
            seen.journalled
        );
        assert!(
            !seen.events.contains(s.as_str()),
            "the events: {}",
            seen.events
        );
        for (path, bytes) in &seen.store {
            let found = bytes.windows(s.len()).any(|w| w == s.as_bytes());
            assert!(!found, "{path} holds a secret");
        }
        assert!(!seen.log.contains(s.as_str()), "hale's log: {}", seen.log);
    }
}

/// [`echoed_turn`], then [`assert_nowhere`] for `secret`.
async fn assert_echo_masked(rig: &ChaosRig, secret: &str) {
    let seen = echoed_turn(rig).await;
    assert_nowhere(&seen, &[secret.to_owned()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gemini_key_echoed_by_the_upstream_is_masked_everywhere() {
    let config = "
providers:
  - name: g
    kind: gemini
    base_url: {chaos}/v1beta
    api_key_env: GEMINI_KEY
    default_model: gemini-2.5-flash
";
    let rig = ChaosRig::start_with(config, &[], &[("GEMINI_KEY", GEMINI_KEY)]).await;
    assert_echo_masked(&rig, GEMINI_KEY).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_azure_api_key_echoed_by_the_upstream_is_masked_everywhere() {
    let config = "
providers:
  - name: az
    kind: azure
    base_url: {chaos}
    api_version: 2024-10-21
    api_key_env: AZ_KEY
    default_model: gpt-4o
";
    let rig = ChaosRig::start_with(
        config,
        &["--azure-api-key", AZURE_KEY],
        &[("AZ_KEY", AZURE_KEY)],
    )
    .await;
    assert_echo_masked(&rig, AZURE_KEY).await;
}

/// A token hale fetched itself (no config holds it) is masked too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entra_token_from_token_command_echoed_by_the_upstream_is_masked_everywhere() {
    let config = format!(
        "
providers:
  - name: az
    kind: azure
    base_url: {{chaos}}
    api_version: 2024-10-21
    auth: entra
    token_command: echo {ENTRA_TOKEN}
    default_model: gpt-4o
"
    );
    let rig = ChaosRig::start_with(&config, &["--azure-api-key", ENTRA_TOKEN], &[]).await;
    assert_echo_masked(&rig, ENTRA_TOKEN).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bedrock_api_key_echoed_by_the_upstream_is_masked_everywhere() {
    let config = "
providers:
  - name: br
    kind: bedrock
    region: us-east-1
    base_url: {chaos}
    auth: api_key
    api_key_env: BR_KEY
    default_model: amazon.nova-pro-v1:0
";
    let rig = ChaosRig::start_with(
        config,
        &["--bedrock-api-key", BEDROCK_KEY],
        &[("BR_KEY", BEDROCK_KEY)],
    )
    .await;
    assert_echo_masked(&rig, BEDROCK_KEY).await;
}

/// Vertex's OAuth tokens are live: the first is refused (echoed), hale
/// fetches another and sends again (echoed too); neither is shown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vertex_oauth_tokens_echoed_by_the_upstream_are_masked_everywhere() {
    hale_testkit::install_crypto();
    let dir = tempfile::tempdir().expect("tempdir");
    let http = hale_testkit::client(std::time::Duration::from_secs(60));
    let pem = throwaway_key();
    let chaos_key = dir.path().join("chaos-key.json");
    std::fs::write(&chaos_key, vertex_key_json(&pem, "unused")).expect("key written");
    let chaos_key_arg = chaos_key.to_string_lossy().into_owned();
    let (chaos, chaos_base) =
        start_chaos_with(&http, dir.path(), &["--vertex-key", &chaos_key_arg]).await;
    let key = dir.path().join("service-account.json");
    std::fs::write(&key, vertex_key_json(&pem, &format!("{chaos_base}/token")))
        .expect("key written");
    let config = format!(
        "
providers:
  - name: vg
    kind: vertex
    project: chaos-proj
    location: us-east5
    base_url: {chaos_base}
    publisher: google
    credentials_file: {}
    default_model: gemini-2.5-flash
",
        key.display()
    );
    let (hale, base) = start_serve(&http, dir.path(), &config, &[]).await;
    let rig = ChaosRig {
        dir,
        chaos,
        chaos_base,
        hale,
        base,
        http,
    };
    let seen = echoed_turn(&rig).await;
    let minted = hale_testkit::get_json(
        &rig.http,
        &format!("{}/chaos/vertex/tokens", rig.chaos_base),
    )
    .await;
    let tokens: Vec<String> = minted["tokens"]
        .as_array()
        .expect("the tokens chaos minted")
        .iter()
        .filter_map(|t| t.as_str().map(str::to_owned))
        .collect();
    assert!(tokens.len() >= 2, "fetched again after the 401: {minted}");
    assert_nowhere(&seen, &tokens);
}

/// Item 2: an Azure deployment URL (`api_version`, no `models` list) takes
/// a client's model as one path segment — the request goes to the chat
/// endpoint of the deployment so named, with hale's API version, not to
/// `embeddings` — and a model with a dot part is refused with a 400 in the
/// caller's dialect, before any provider is called; as on Bedrock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clients_model_is_one_segment_of_the_providers_url_or_refused() {
    let config = "
providers:
  - name: az
    kind: azure
    base_url: {chaos}
    api_version: 2024-10-21
    api_key_env: AZ_KEY
    default_model: gpt-4o
  - name: br
    kind: bedrock
    region: us-east-1
    base_url: {chaos}
    auth: api_key
    api_key_env: BR_KEY
    default_model: amazon.nova-pro-v1:0
";
    let rig = ChaosRig::start_with(
        config,
        &[
            "--azure-api-key",
            AZURE_KEY,
            "--bedrock-api-key",
            BEDROCK_KEY,
        ],
        &[("AZ_KEY", AZURE_KEY), ("BR_KEY", BEDROCK_KEY)],
    )
    .await;
    let sneaky = "gpt-4o/embeddings?api-version=2023-05-15#";
    let (status, body, _) = chat(&rig, sneaky).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        rig.chaos_requests(sneaky).await,
        1,
        "chaos's chat route got the whole name as its deployment"
    );
    for model in ["../../x", "..", "az/..", "%2e%2e", "x/./y"] {
        let (status, body, _) = chat(&rig, model).await;
        assert_eq!(status, 400, "{model}: {body}");
        let v: Value = serde_json::from_str(&body).expect("JSON");
        assert_eq!(v["error"]["type"], "invalid_request_error", "{v}");
        let msg = v["error"]["message"].as_str().unwrap_or_default();
        assert!(
            msg.contains("provider `az`") && msg.contains("`..`"),
            "{model}: {msg}"
        );
    }
    // A Messages caller pinned to Bedrock gets Anthropic's shape.
    let r = rig
        .http
        .post(format!("{}/v1/messages", rig.base))
        .header("anthropic-version", "2023-06-01")
        .json(&json!({"model": "br/..", "max_tokens": 5,
                      "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .expect("hale answers");
    assert_eq!(r.status().as_u16(), 400);
    let v: Value = r.json().await.expect("JSON");
    assert_eq!(v["type"], "error", "{v}");
    assert_eq!(v["error"]["type"], "invalid_request_error", "{v}");
    let msg = v["error"]["message"].as_str().unwrap_or_default();
    assert!(msg.contains("provider `br`"), "{msg}");
    let stats = hale_testkit::get_json(&rig.http, &format!("{}/chaos/stats", rig.chaos_base)).await;
    assert_eq!(
        stats["requests_total"], 1,
        "only the first call went out: {stats}"
    );
}
