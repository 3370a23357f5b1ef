//! Issue 41: hale marks its own compaction requests (the summariser calls)
//! with `x-hale-compaction: 1` on every provider kind, and a provider — here
//! `hale chaos`, which answers a summary to that mark alone — can tell them
//! from an agent's turn without reading the prompt. An agent's turn whose
//! prompt asks for a summary carries no mark.

mod common;

use common::*;
use hale_core::config::{ProviderConfig, Target, VertexConfig, VertexCredentials};
use serde_json::{Value, json};

/// A conversation long enough to cross a 2,000-token window.
fn conversation() -> Vec<Value> {
    let mut msgs = Vec::new();
    for i in 0..12 {
        let text: String = (0..20).map(|w| format!("topic{i} detail{w} ")).collect();
        msgs.push(json!({"role": "user", "content": format!("question {i}: {text}")}));
        msgs.push(json!({"role": "assistant", "content": format!("answer {i}: {text}")}));
    }
    msgs.push(json!({"role": "user", "content": "And now the final question?"}));
    msgs
}

/// A throwaway service-account key (openssl, a test dependency) whose token
/// endpoint is chaos's, in `dir`; its path.
fn vertex_key(dir: &std::path::Path, c: &hale_chaos::ChaosHandle) -> String {
    let out = std::process::Command::new("openssl")
        .args([
            "genpkey",
            "-algorithm",
            "RSA",
            "-pkeyopt",
            "rsa_keygen_bits:2048",
        ])
        .output()
        .expect("openssl runs (a test dependency)");
    assert!(out.status.success(), "openssl genpkey failed");
    let key = json!({
        "type": "service_account", "project_id": "chaos-proj",
        "private_key_id": "throwaway", "private_key": String::from_utf8(out.stdout).expect("PEM"),
        "client_email": "hale-test@chaos-proj.iam.gserviceaccount.com", "client_id": "1",
        "token_uri": format!("{}/token", c.base_url_anthropic),
    });
    let path = dir.join("vertex-key.json");
    std::fs::write(&path, key.to_string()).expect("key written");
    path.to_string_lossy().into_owned()
}

fn vertex(name: &str, c: &hale_chaos::ChaosHandle, model: &str, key: &str) -> ProviderConfig {
    let mut p = with_test_timeouts(ProviderConfig::new(
        name,
        hale_core::config::ProviderKind::Vertex,
        &c.base_url_anthropic,
        model,
    ));
    p.vertex = Some(VertexConfig {
        project: "chaos-proj".into(),
        location: "us-east5".into(),
        publisher: None,
        credentials: VertexCredentials::KeyFile(key.to_owned()),
    });
    p
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hales_summariser_calls_carry_the_compaction_mark_on_every_provider_kind() {
    let keys = tempfile::tempdir().expect("tempdir");
    let c = chaos().await;
    let key = vertex_key(keys.path(), &c);
    let mut responses = openai("s", &c, "summ");
    responses.api = hale_core::config::ProviderApi::Responses;
    // The summariser's provider of each kind; the model is no fault name,
    // so chaos answers a summary only to the mark.
    let kinds: Vec<(&str, ProviderConfig)> = vec![
        ("openai chat", openai("s", &c, "summ")),
        ("openai responses", responses),
        ("anthropic", anthropic("s", &c, "summ")),
        ("gemini", gemini("s", &c, "summ")),
        ("azure", azure("s", &c, "summ")),
        ("bedrock converse", bedrock("s", &c, "summ")),
        ("bedrock invoke", bedrock("s", &c, "anthropic.summ")),
        ("vertex gemini", vertex("s", &c, "gemini-summ", &key)),
        ("vertex claude", vertex("s", &c, "claude-summ", &key)),
    ];
    for (kind, summariser) in kinds {
        let model = summariser.default_model.clone();
        let mut main = openai("main", &c, "ok");
        main.context_windows.insert("ok".into(), 2_000);
        let mut cfg = config(vec![main, summariser]);
        cfg.routes.insert(
            "summarizer".into(),
            vec![Target {
                provider: "s".into(),
                model: model.clone(),
            }],
        );
        cfg.compaction.summarizer_model = Some("summarizer".into());
        let h = Hale::start(cfg).await;
        let before = c.requests_for(&model);
        let mut call = h.openai(ROUTE);
        call.body_mut()["messages"] = json!(conversation());
        let r = call.send().await;
        r.assert_complete(&full());
        assert!(
            c.requests_for(&model) > before,
            "{kind}: no summariser call"
        );
        // What the agent's provider got: chaos's summary, which only the
        // mark asks for ("Summarize these messages" alone gets `w0 w1 …`).
        let sent = c
            .last_requests()
            .into_iter()
            .rev()
            .find(|b| b["model"] == "ok")
            .expect("the agent's request");
        let sent = sent.to_string();
        assert!(sent.contains("Summary by hale"), "{kind}: {sent}");
        assert!(sent.contains("Summary of 1 messages"), "{kind}: {sent}");
        assert!(!sent.contains("w0 w1 w2"), "{kind}: {sent}");
        h.stop().await;
    }
}

#[tokio::test]
async fn an_agents_turn_that_asks_for_a_summary_carries_no_mark() {
    let c = chaos().await;
    let h = Hale::start(config(vec![anthropic("a", &c, "claude-ok")])).await;
    let r = h
        .openai(ROUTE)
        .user("Please summarize what we did so far.")
        .send()
        .await;
    // chaos summarises marked requests only: the plain answer.
    r.assert_complete(&full());
}
