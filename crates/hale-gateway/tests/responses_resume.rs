//! Issue 27: a function call cut inside its arguments on a Responses stream
//! is resumed on another deployment, and the Responses client sees one
//! well-formed response whose call's arguments arrive once, whole: the
//! `response.function_call_arguments.delta`s join to the final arguments,
//! the `.done` event carries them once, the output holds one
//! `function_call`. Through the real HTTP path against `hale chaos`
//! (`tool:…:cut_after=N` drops the stream inside the arguments).

mod common;

use common::*;
use hale_core::config::{ProviderApi, ProviderConfig};
use serde_json::{Value, json};

/// The call both deployments answer; chaos streams its arguments in 8-byte
/// fragments, and the primary's stream is dropped after two of them.
const ARGS: &str = r#"{"path":"src/main.rs","line":42,"text":"fn main() {}"}"#;

fn cut_model() -> String {
    format!("tool:name=edit_file:cut_after=2:args={ARGS}")
}

fn whole_model() -> String {
    format!("tool:name=edit_file:args={ARGS}")
}

/// A streamed `POST /v1/responses` with a function tool: the events (type, data).
async fn stream(h: &Hale) -> Vec<Value> {
    let body = json!({
        "model": ROUTE,
        "stream": true,
        "input": "Fix the bug.",
        "tools": [{"type": "function", "name": "edit_file", "parameters": {"type": "object"}}],
    });
    let r = h
        .http
        .post(format!("{}/v1/responses", h.base))
        .json(&body)
        .send()
        .await
        .expect("the gateway answers");
    assert_eq!(r.status(), 200);
    let raw = r.text().await.expect("the whole stream");
    let mut events = Vec::new();
    for block in raw.split("\n\n").filter(|b| !b.trim().is_empty()) {
        let name = block.lines().find_map(|l| l.strip_prefix("event: "));
        let data: String = block
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .collect();
        let v: Value = serde_json::from_str(&data).unwrap_or_else(|e| panic!("{e}: {raw}"));
        assert_eq!(name, v["type"].as_str(), "{raw}");
        events.push(v);
    }
    events
}

/// The checks: one well-formed response with one function call whose
/// arguments are `want`, delivered once.
#[track_caller]
fn assert_one_call(events: &[Value], want: &str) {
    let all = serde_json::to_string_pretty(events).unwrap_or_default();
    let types: Vec<&str> = events.iter().filter_map(|e| e["type"].as_str()).collect();
    let seqs: Vec<u64> = events
        .iter()
        .filter_map(|e| e["sequence_number"].as_u64())
        .collect();
    assert_eq!(seqs, (0..events.len() as u64).collect::<Vec<_>>(), "{all}");
    assert_eq!(types.first(), Some(&"response.created"), "{all}");
    assert_eq!(types.last(), Some(&"response.completed"), "{all}");
    assert!(!types.contains(&"error"), "{all}");
    let count = |t: &str| types.iter().filter(|x| **x == t).count();
    assert_eq!(count("response.output_item.added"), 1, "{all}");
    assert_eq!(count("response.output_item.done"), 1, "{all}");
    assert_eq!(count("response.function_call_arguments.done"), 1, "{all}");
    let added = &events[types
        .iter()
        .position(|t| *t == "response.output_item.added")
        .unwrap_or(0)];
    assert_eq!(added["item"]["type"], "function_call", "{all}");
    assert_eq!(added["item"]["name"], "edit_file", "{all}");
    let joined: String = events
        .iter()
        .filter(|e| e["type"] == "response.function_call_arguments.delta")
        .filter_map(|e| e["delta"].as_str())
        .collect();
    assert_eq!(
        joined, want,
        "the deltas join to the arguments, once: {all}"
    );
    let done = events
        .iter()
        .find(|e| e["type"] == "response.function_call_arguments.done")
        .expect("a .done event");
    assert_eq!(done["arguments"], want, "{all}");
    let last = &events[events.len() - 1]["response"];
    assert_eq!(last["status"], "completed", "{all}");
    let output = last["output"].as_array().expect("output");
    assert_eq!(output.len(), 1, "one output item: {all}");
    assert_eq!(output[0]["type"], "function_call", "{all}");
    assert_eq!(output[0]["arguments"], want, "{all}");
    assert_eq!(output[0]["call_id"], added["item"]["call_id"], "{all}");
}

/// The arguments as chaos sends them (its JSON, keys in its order).
async fn chaos_args(c: &hale_chaos::ChaosHandle) -> String {
    let r = hale_testkit::client(std::time::Duration::from_secs(10))
        .post(format!("{}/responses", c.base_url_openai))
        .json(&json!({"model": whole_model(), "input": "x"}))
        .send()
        .await
        .expect("chaos answers");
    let v: Value = r.json().await.expect("json");
    v["output"][0]["arguments"]
        .as_str()
        .expect("a function call")
        .to_owned()
}

fn responses(name: &str, c: &hale_chaos::ChaosHandle, model: &str) -> ProviderConfig {
    let mut p = openai(name, c, model);
    p.api = ProviderApi::Responses;
    p
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_function_call_cut_mid_arguments_is_resumed_without_duplicated_arguments() {
    let c = chaos().await;
    let want = chaos_args(&c).await;
    assert!(
        want.len() > 16,
        "longer than the two fragments sent: {want}"
    );
    // The backup a Responses provider, then an Anthropic one (another
    // dialect upstream, another call id): the call is the primary's, whole.
    let backups = [
        responses("backup", &c, &whole_model()),
        anthropic("backup", &c, &whole_model()),
    ];
    for backup in backups {
        let kind = backup.kind;
        let h = Hale::start(config(vec![responses("primary", &c, &cut_model()), backup])).await;
        let before = (c.requests_for(&cut_model()), c.requests_for(&whole_model()));
        let events = stream(&h).await;
        assert_one_call(&events, &want);
        assert_eq!(
            c.requests_for(&cut_model()) - before.0,
            1,
            "cut on the primary ({kind:?})"
        );
        assert_eq!(
            c.requests_for(&whole_model()) - before.1,
            1,
            "resumed on the backup ({kind:?})"
        );
        let id = events[0]["response"]["id"]
            .as_str()
            .unwrap_or("")
            .to_owned();
        let turn = id.strip_prefix("resp_").unwrap_or(&id);
        let tl = h.timeline(turn).await;
        assert_eq!(tl.len(), 2, "{tl:?}");
        assert_eq!(tl[0]["resume"], "broke mid-stream", "{tl:?}");
        h.stop().await;
    }
}
