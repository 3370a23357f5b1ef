//! The official `openai` Python SDK against the real `hale serve`, with a
//! failing primary and a healthy fallback: streaming and not, the SDK sees
//! the complete answer. The Python side (`tests/sdk/openai_client.py`)
//! asserts the text and prints JSON that this test checks. And an SDK
//! agent loop (`tests/sdk/task_loop.py`) finishing `hale chaos`'s six-step
//! task through faults across provider kinds (issue 41).
//!
//! Python comes from `HALE_PYTHON`, else `.venv/bin/python` at the workspace
//! root (`scripts/test.sh` creates it with `pip install openai`). Without a
//! Python that can `import openai` the test prints why and returns — except
//! under `CI=true`, where that is a failure.

mod common;

use common::*;
use hale_testkit::python_or_skip;
use serde_json::Value;
use std::path::PathBuf;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_python_sdk_gets_complete_answers_through_failover() {
    let Some(py) = python_or_skip("import openai", "openai") else {
        return;
    };
    let s = Stack::start().await;
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/sdk/openai_client.py");
    let base_url = format!("{}/v1", s.base);
    let out = tokio::process::Command::new(&py)
        .arg(&script)
        .args([base_url.as_str(), "r", "60"])
        .output()
        .await
        .expect("python runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the SDK script failed:\n{stdout}\n{stderr}\nhale:\n{}",
        s.hale.stderr()
    );
    let v: Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    let expected = words(60);
    assert_eq!(v["nonstream"]["text"], expected.as_str());
    assert_eq!(v["nonstream"]["model"], BACKUP_MODEL);
    assert_eq!(v["nonstream"]["finish_reason"], "stop");
    assert_eq!(v["nonstream"]["provider"], "backup");
    assert_eq!(v["nonstream"]["usage"]["completion_tokens"], 60);
    assert_eq!(v["stream"]["text"], expected.as_str());
    assert_eq!(v["stream"]["chunks"], 60, "relayed chunk by chunk");
    assert_eq!(v["stream"]["finish_reason"], "stop");
    assert_eq!(v["stream"]["models"], serde_json::json!([BACKUP_MODEL]));
    assert_eq!(v["stream"]["usage"]["completion_tokens"], 60);
    assert!(
        s.chaos_requests(PRIMARY_MODEL).await >= 3,
        "the primary was tried"
    );
}

/// An `openai` SDK agent loop (Chat Completions, streamed, the SDK's
/// retries off; `tests/sdk/task_loop.py`) runs `hale chaos`'s six-step task
/// (issue 41) through hale: an OpenAI chat primary that cuts a stream
/// inside a tool call's arguments and answers 503 in a burst, an Anthropic
/// backup that 503s too, a Gemini backup. The loop's final text is the
/// task's checked answer, its shell calls wrote every file, and every third
/// step went to its `echo` tool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sdk_loop_finishes_a_six_step_task_through_faults_across_kinds() {
    use common::chaos_task::{TASK_SCRIPT, assert_task_finished, task_config};
    let Some(py) = python_or_skip("import openai", "openai") else {
        return;
    };
    let config = task_config("r", "openai", ["anthropic", "gemini"]);
    let rig = ChaosRig::start_scripted(
        &config,
        TASK_SCRIPT,
        &[("HALE_TEST_GEMINI_KEY", "k-gemini-test")],
    )
    .await;
    let work = rig.dir.path().join("work");
    std::fs::create_dir_all(&work).expect("workdir");
    let work_arg = work.to_string_lossy().into_owned();
    let v = rig
        .sdk(
            &py,
            "task_loop.py",
            &["r", &work_arg, "Run task-41-6, then report."],
        )
        .await;
    let final_text = v["final"].as_str().expect("a final text");
    assert_task_finished(&rig, final_text, &work, &[1, 2, 4, 5]).await;
    assert_eq!(
        v["calls"],
        serde_json::json!(["shell", "shell", "echo", "shell", "shell", "echo"]),
        "{v}"
    );
}
