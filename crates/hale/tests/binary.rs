//! The real `hale` binary end to end: `hale chaos` and `hale serve` as
//! separate processes answering a streaming and a non-streaming call with a
//! 503 primary and a healthy fallback; `hale config check` on a bad file;
//! `hale serve` without a config; `hale demo`.

mod common;

use common::*;
use futures::StreamExt;
use serde_json::{Value, json};
use std::process::Command;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_and_chaos_processes_fail_over_streaming_and_not() {
    let s = Stack::start().await;
    let body = |stream: bool| {
        json!({
            "model": "r",
            "messages": [{"role": "user", "content": "hello"}],
            "stream": stream,
        })
    };

    // Non-streaming.
    let r = s
        .http
        .post(format!("{}/v1/chat/completions", s.base))
        .json(&body(false))
        .send()
        .await
        .expect("call");
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-hale-provider"], "backup");
    assert_eq!(r.headers()["x-hale-attempts"], "4");
    let v: Value = r.json().await.expect("json");
    assert_eq!(
        v["choices"][0]["message"]["content"],
        words(60).as_str(),
        "{v}"
    );
    assert_eq!(v["model"], BACKUP_MODEL);

    // Streaming.
    let r = s
        .http
        .post(format!("{}/v1/chat/completions", s.base))
        .json(&body(true))
        .send()
        .await
        .expect("call");
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-hale-provider"], "backup");
    let mut raw = Vec::new();
    let mut st = r.bytes_stream();
    while let Some(c) = st.next().await {
        raw.extend_from_slice(&c.expect("chunk"));
    }
    let raw = String::from_utf8_lossy(&raw);
    let mut text = String::new();
    let mut done = false;
    for line in raw.lines() {
        let Some(d) = line.strip_prefix("data: ") else {
            continue;
        };
        if d == "[DONE]" {
            done = true;
        } else if let Ok(v) = serde_json::from_str::<Value>(d) {
            assert!(v.get("error").is_none(), "{raw}");
            if let Some(t) = v
                .pointer("/choices/0/delta/content")
                .and_then(Value::as_str)
            {
                text.push_str(t);
            }
        }
    }
    assert_eq!(text, words(60), "{raw}");
    assert!(done, "{raw}");

    // The primary was tried (3 attempts in the first turn); the second turn
    // found it cooling down and went straight on (or probed it once).
    let primary = s.chaos_requests(PRIMARY_MODEL).await;
    assert!((3..=4).contains(&primary), "{primary}");
    assert_eq!(s.chaos_requests(BACKUP_MODEL).await, 2);
}

#[test]
fn config_check_on_a_bad_file_exits_2_and_names_the_problem_with_its_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("bad.yaml");
    std::fs::write(
        &path,
        "\
providers:
  - name: p
    kind: openai
    base_url: http://127.0.0.1:1/v1
    default_model: m
    timeout_msec: 5000
",
    )
    .expect("write");
    let out = Command::new(hale_bin())
        .args(["config", "check"])
        .arg(&path)
        .output()
        .expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr: {stderr}");
    assert!(stderr.contains("timeout_msec"), "names the key: {stderr}");
    assert!(stderr.contains("line 6"), "names the line: {stderr}");

    // A good file passes.
    let good = dir.path().join("good.yaml");
    std::fs::write(&good, "providers:\n  - {name: p, kind: openai, base_url: \"http://127.0.0.1:1/v1\", default_model: m}\n")
        .expect("write");
    let out = Command::new(hale_bin())
        .args(["config", "check"])
        .arg(&good)
        .output()
        .expect("runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn serve_without_a_config_refuses_and_prints_a_minimal_config() {
    let out = Command::new(hale_bin())
        .arg("serve")
        .output()
        .expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "it must refuse: {stderr}");
    assert!(stderr.contains("--config"), "{stderr}");
    assert!(stderr.contains("providers:"), "a minimal config: {stderr}");
    assert!(stderr.contains("default_model:"), "{stderr}");
}

#[test]
fn demo_exits_0() {
    let dir = tempfile::tempdir().expect("tempdir");
    let t0 = std::time::Instant::now();
    let out = Command::new(hale_bin())
        .args(["demo", "--data-dir"])
        .arg(dir.path())
        .output()
        .expect("runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "demo failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("every scenario healed as expected"),
        "{stdout}"
    );
    // The Responses client's scenario (issue 27): cut on the Responses
    // primary, resumed on the backup, one completed response of 40 words.
    let row = stdout
        .lines()
        .find(|l| l.contains("Responses stream resumed"))
        .unwrap_or_else(|| panic!("no Responses row:\n{stdout}"));
    assert!(
        row.starts_with('✓') && row.contains("completed, 40 words"),
        "{row}"
    );
    let timeline = stdout
        .split("▶ Responses stream cut and resumed")
        .nth(1)
        .and_then(|rest| rest.split("▶ ").next())
        .unwrap_or_default();
    assert!(
        timeline.contains("responses-cut-primary/cut:after=15:tokens=40")
            && timeline.contains("stream_broken [broke mid-stream]")
            && timeline.contains("responses-cut-backup/ok:tokens=40")
            && timeline.contains("[resumed]"),
        "the timeline shows the cut on the Responses primary and the resume:\n{stdout}"
    );
    assert!(
        t0.elapsed() < Duration::from_secs(60),
        "the demo is done in under a minute"
    );
}
