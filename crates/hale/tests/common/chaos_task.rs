//! The six-step task of `hale chaos`'s task model (issue 41) through the
//! real `hale serve`: the chaos script of its faults, the route that fails
//! over across provider kinds, and what a finished run must show. Shared by
//! the agent CLIs' tests and the SDK loops'.

use super::ChaosRig;
use std::path::Path;

/// The task the agents run: six shell steps, then the checked answer
/// (`hale chaos`'s task model, `task-41-6`).
pub fn six_step_task() -> hale_chaos::task::Task {
    hale_chaos::task::Task::new(41, 6).expect("a task")
}

/// The faults: the primary cuts its first stream inside the tool call's
/// arguments (resumed on the next kind), answers two requests, then 503s
/// four times; the first backup serves the resume, then 503s twice, which
/// sends a step on to the second backup. Every deployment plays the same
/// task (`task-41-6`, `task-41-6:ok`, `task-41-6:chaos` are three names for
/// it), so each continues what another began.
pub const TASK_SCRIPT: &str = r#"
"task-41-6":
  - {fault: "cut:after=2", times: 1}
  - {fault: ok, times: 2}
  - {fault: error-503, times: 4}
  - {fault: ok}
"task-41-6:ok":
  - {fault: ok, times: 1}
  - {fault: error-503, times: 2}
  - {fault: ok}
"#;

/// The providers of the task's route: `primary` of `kind` (with `api` for
/// OpenAI's Responses), then the two backups of other kinds.
pub fn task_config(route: &str, primary: &str, backups: [&str; 2]) -> String {
    let provider = |name: &str, kind: &str, model: &str| match kind {
        "responses" => format!(
            "  - {{name: {name}, kind: openai, api: responses, base_url: '{{chaos}}/v1', default_model: '{model}', models: ['{model}']}}\n"
        ),
        "openai" => format!(
            "  - {{name: {name}, kind: openai, base_url: '{{chaos}}/v1', default_model: '{model}', models: ['{model}']}}\n"
        ),
        "anthropic" => format!(
            "  - {{name: {name}, kind: anthropic, base_url: '{{chaos}}', default_model: '{model}', models: ['{model}']}}\n"
        ),
        "gemini" => format!(
            "  - {{name: {name}, kind: gemini, base_url: '{{chaos}}/v1beta', api_key_env: HALE_TEST_GEMINI_KEY, default_model: '{model}', models: ['{model}']}}\n"
        ),
        other => panic!("no provider kind {other}"),
    };
    format!(
        "routes:\n  {route}: [primary/task-41-6, 'fb/task-41-6:ok', 'fb2/task-41-6:chaos']\n\
         agents:\n  default: {{provider: primary, fallback: [fb, fb2]}}\n\
         retry:\n  server_error: {{max_attempts: 2, initial_ms: 20, max_ms: 50}}\n\
         providers:\n{}{}{}",
        provider("primary", primary, "task-41-6"),
        provider("fb", backups[0], "task-41-6:ok"),
        provider("fb2", backups[1], "task-41-6:chaos"),
    )
}

/// What every task run must show: the agent printed the task's right
/// answer, the files of its shell steps (`shell_steps`) are in its working
/// directory, and every fault of [`TASK_SCRIPT`] was played (the cut inside
/// step 1's call), the second backup serving too.
pub async fn assert_task_finished(rig: &ChaosRig, out: &str, work: &Path, shell_steps: &[u32]) {
    let task = six_step_task();
    if let Err(why) = hale_chaos::task::check(&task, out) {
        panic!(
            "the task did not finish correctly: {why}\noutput:\n{out}\nhale:\n{}",
            rig.hale.stderr()
        );
    }
    for &k in shell_steps {
        let file = work.join(task.file(k));
        let text =
            std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        assert_eq!(text, format!("{}\n", task.token(k)));
    }
    assert_eq!(rig.chaos_faults("cut").await, 1, "the cut inside a call");
    // The cut request is the primary's first: it offered the agent's tools,
    // so its answer — cut after two fragments of arguments — was a call.
    let bodies = rig.chaos_bodies().await;
    assert!(
        bodies.len() < hale_chaos::MAX_KEPT_BODIES,
        "every body is kept"
    );
    let cut = bodies
        .iter()
        .find(|b| b["model"] == "task-41-6")
        .expect("the primary's first request");
    assert!(
        cut["tools"].as_array().is_some_and(|t| !t.is_empty()),
        "the cut request offered tools: {cut}"
    );
    assert!(
        rig.chaos_faults("error-503").await >= 3,
        "the 503 bursts were played"
    );
    assert!(
        rig.chaos_requests("task-41-6:chaos").await >= 1,
        "the second backup served a step"
    );
}
