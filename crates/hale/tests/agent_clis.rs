//! The real agent CLIs through the real `hale serve` → `hale chaos`
//! (issues 27, 29): the Codex CLI (`codex exec`, the Responses API), Claude
//! Code (`claude -p`, the Anthropic Messages API) and Gemini CLI
//! (`gemini -p`, Google's Generative Language API), each at the version
//! pinned in `scripts/clis/package.json`, each finishing a turn while the
//! primary deployment answers 503 and the fallback's stream is cut once;
//! and Codex and Claude Code each finishing `hale chaos`'s six-step task
//! (issue 41: shell steps, a checked final answer) while the primary cuts a
//! stream inside a tool call's arguments and answers 503 in bursts, and the
//! route fails over across provider kinds.
//!
//! Each CLI runs non-interactively in a temporary home (`CODEX_HOME`,
//! `HOME`) with a cleared environment, so nothing of the machine's
//! configuration or keys leaks in; its base URL is hale on loopback, its
//! own retries are off (the healing is hale's), and its non-essential
//! traffic (telemetry, update checks) is switched off.
//!
//! The CLIs come from `HALE_CODEX` / `HALE_CLAUDE` / `HALE_GEMINI`, else `.clis/` at the
//! workspace root (scripts/test.sh installs them). Without one at the pinned
//! version a test prints why and returns — except under `CI=true`, where
//! that is a failure.

mod common;

use common::chaos_task::{TASK_SCRIPT, assert_task_finished, task_config};
use common::*;
use hale_testkit::{CLAUDE, CODEX, GEMINI, cli_or_skip};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

/// How long one CLI run may take.
const RUN_LIMIT: Duration = Duration::from_secs(240);

/// Runs `program` with `args` in `cwd`, with only `envs` (and `PATH`) in
/// its environment and no stdin; its output, or a panic after [`RUN_LIMIT`].
async fn run_cli(
    program: &Path,
    args: &[&str],
    cwd: &Path,
    envs: &[(&str, String)],
    rig: &ChaosRig,
) -> Output {
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args)
        .current_dir(cwd)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .envs(envs.iter().map(|(k, v)| (k, v)))
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    let out = tokio::time::timeout(RUN_LIMIT, cmd.output())
        .await
        .unwrap_or_else(|_| {
            panic!(
                "{} did not finish within {RUN_LIMIT:?}\nhale:\n{}",
                program.display(),
                rig.hale.stderr()
            )
        })
        .expect("the CLI runs");
    assert!(
        out.status.success(),
        "{} failed ({}):\nstdout:\n{}\nstderr:\n{}\nhale:\n{}",
        program.display(),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        rig.hale.stderr()
    );
    out
}

// ---------------------------------------------------------------------------
// Codex
// ---------------------------------------------------------------------------

/// The fallback's model for Codex: a shell call (`exec_command`), then the
/// answer after its output cut once, then whole.
const CODEX_SCRIPT: &str = r#"
codex-fb:
  - {fault: 'tool:name=exec_command:args={"cmd":"echo hale-tool-ok"}', times: 1}
  - {fault: "cut:after=20", times: 1}
  - {fault: ok}
"#;

/// Route `gpt-5-codex`: a Responses primary answering 503 for ever, then two
/// Responses deployments of the scripted model.
const CODEX_CONFIG: &str = "
routes:
  gpt-5-codex: [primary/error-503, fb/codex-fb, fb2/codex-fb]
retry:
  server_error: {max_attempts: 2, initial_ms: 20, max_ms: 50}
providers:
  - {name: primary, kind: openai, api: responses, base_url: '{chaos}/v1', default_model: error-503}
  - {name: fb, kind: openai, api: responses, base_url: '{chaos}/v1', default_model: codex-fb}
  - {name: fb2, kind: openai, api: responses, base_url: '{chaos}/v1', default_model: codex-fb}
";

/// `codex exec PROMPT` with a custom model provider whose base URL is hale
/// (its own retries off: the healing is hale's), in a fresh home and work
/// directory; its output and the work directory.
async fn run_codex(codex: &Path, rig: &ChaosRig, prompt: &str) -> (Output, PathBuf) {
    let home = rig.dir.path().join("codex-home");
    let work = rig.dir.path().join("work");
    std::fs::create_dir_all(&home).expect("CODEX_HOME");
    std::fs::create_dir_all(&work).expect("workdir");
    let base_url = format!("model_providers.hale.base_url=\"{}/v1\"", rig.base);
    let args = [
        "exec",
        "--skip-git-repo-check",
        "--dangerously-bypass-approvals-and-sandbox",
        "-m",
        "gpt-5-codex",
        "-c",
        "model_provider=\"hale\"",
        "-c",
        "model_providers.hale.name=\"hale\"",
        "-c",
        base_url.as_str(),
        "-c",
        "model_providers.hale.wire_api=\"responses\"",
        "-c",
        "model_providers.hale.env_key=\"HALE_TEST_KEY\"",
        // Codex's own retries off: the healing is hale's.
        "-c",
        "model_providers.hale.request_max_retries=0",
        "-c",
        "model_providers.hale.stream_max_retries=0",
        "-c",
        "check_for_update_on_startup=false",
        "-c",
        "analytics.enabled=false",
        prompt,
    ];
    let envs = [
        ("CODEX_HOME", home.to_string_lossy().into_owned()),
        ("HOME", home.to_string_lossy().into_owned()),
        ("HALE_TEST_KEY", "sk-hale-test".to_string()),
    ];
    (run_cli(codex, &args, &work, &envs, rig).await, work)
}

/// `claude ARGS` with `ANTHROPIC_BASE_URL` = hale (its own retries off: the
/// healing is hale's), in a fresh home and work directory; its output and
/// the work directory.
async fn run_claude(claude: &Path, rig: &ChaosRig, args: &[&str]) -> (Output, PathBuf) {
    let home = rig.dir.path().join("claude-home");
    let work = rig.dir.path().join("work");
    std::fs::create_dir_all(&home).expect("HOME");
    std::fs::create_dir_all(&work).expect("workdir");
    let envs = [
        ("HOME", home.to_string_lossy().into_owned()),
        ("ANTHROPIC_BASE_URL", rig.base.clone()),
        ("ANTHROPIC_API_KEY", "sk-ant-hale-test".to_string()),
        ("CLAUDE_CODE_MAX_RETRIES", "0".to_string()),
        ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1".to_string()),
        ("DISABLE_TELEMETRY", "1".to_string()),
        ("DISABLE_ERROR_REPORTING", "1".to_string()),
        ("DISABLE_AUTOUPDATER", "1".to_string()),
    ];
    (run_cli(claude, args, &work, &envs, rig).await, work)
}

/// `codex exec` with a custom model provider whose base URL is hale: the
/// model's shell call runs, its output goes back through hale, and the
/// answer — after 503s on the primary and a stream cut on the fallback —
/// is printed whole. Codex's `store: false` and
/// `include: ["reasoning.encrypted_content"]` reach the provider as sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_exec_completes_a_tool_turn_through_a_503_and_a_cut_stream() {
    let Some(codex) = cli_or_skip(CODEX) else {
        return;
    };
    let rig = ChaosRig::start(CODEX_CONFIG, Some(CODEX_SCRIPT)).await;
    let (out, _) = run_codex(&codex, &rig, "Run echo hale-tool-ok, then answer.").await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // `codex exec` prints the last agent message on stdout.
    assert_eq!(stdout.trim(), words(60), "stderr:\n{stderr}");

    assert!(
        rig.chaos_faults("error-503").await >= 1,
        "the primary was tried"
    );
    assert_eq!(rig.chaos_faults("tool").await, 1, "one shell call");
    assert_eq!(rig.chaos_faults("cut").await, 1, "the stream was cut once");
    assert_eq!(rig.chaos_faults("ok").await, 1, "and resumed once");
    let bodies = rig.chaos_bodies().await;
    let last = bodies.last().expect("chaos got requests");
    assert_eq!(last["model"], "codex-fb", "{last}");
    for b in &bodies {
        assert_eq!(b["store"], false, "Codex's store:false as sent");
        assert_eq!(
            b["include"],
            json!(["reasoning.encrypted_content"]),
            "Codex's include as sent"
        );
        assert_eq!(b["stream"], true);
    }
    // The shell ran and its output went back through hale.
    let input = last["input"].as_array().expect("input items");
    let call = input
        .iter()
        .find(|i| i["type"] == "function_call")
        .expect("the function_call reached the provider");
    assert_eq!(call["name"], "exec_command");
    let output = input
        .iter()
        .find(|i| i["type"] == "function_call_output")
        .expect("the function_call_output reached the provider");
    assert_eq!(output["call_id"], call["call_id"]);
    assert!(
        output["output"].to_string().contains("hale-tool-ok"),
        "the command's output: {output}"
    );
}

// ---------------------------------------------------------------------------
// Claude Code
// ---------------------------------------------------------------------------

/// The default agent: an Anthropic primary answering 503 for ever, then a
/// fallback whose stream is cut after five chunks (once), then a healthy
/// one. Each offers one model, so whatever model Claude Code asks for, each
/// serves its own.
const CLAUDE_CONFIG: &str = "
agents:
  default: {provider: primary, fallback: [fb, fb2]}
retry:
  server_error: {max_attempts: 2, initial_ms: 20, max_ms: 50}
providers:
  - {name: primary, kind: anthropic, base_url: '{chaos}', default_model: error-503, models: [error-503]}
  - {name: fb, kind: anthropic, base_url: '{chaos}', default_model: 'cut:after=5', models: ['cut:after=5']}
  - {name: fb2, kind: anthropic, base_url: '{chaos}', default_model: claude-ok, models: [claude-ok]}
";

/// `claude -p` with `ANTHROPIC_BASE_URL` = hale: the turn completes and
/// prints the provider's whole answer although the primary answers 503 and
/// the fallback's stream is cut (resumed on the next fallback with the
/// delivered text as a prefill). Claude Code's `system` message inside
/// `messages` reaches the provider as sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_completes_a_turn_through_a_503_and_a_cut_stream() {
    let Some(claude) = cli_or_skip(CLAUDE) else {
        return;
    };
    let rig = ChaosRig::start(CLAUDE_CONFIG, None).await;
    let (out, _) = run_claude(&claude, &rig, &["-p", "Say hi."]).await;
    let stdout = String::from_utf8_lossy(&out.stdout);

    assert!(
        rig.chaos_faults("error-503").await >= 1,
        "the primary was tried"
    );
    assert_eq!(rig.chaos_faults("cut").await, 1, "the stream was cut once");
    let bodies = rig.chaos_bodies().await;
    let cut = bodies
        .iter()
        .find(|b| b["model"] == "cut:after=5")
        .expect("the fallback was called");
    let resumed = bodies.last().expect("chaos got requests");
    assert_eq!(resumed["model"], "claude-ok", "{resumed}");
    assert_eq!(
        resumed["messages"]
            .as_array()
            .and_then(|m| m.last())
            .map(|m| &m["role"]),
        Some(&json!("assistant")),
        "resumed with the delivered text as a prefill"
    );
    // Claude Code's system message inside `messages`, as it sent it.
    let system_msg = cut["messages"]
        .as_array()
        .and_then(|m| m.iter().find(|m| m["role"] == "system"))
        .expect("Claude Code sent a system message inside messages");
    assert!(system_msg["content"].to_string().contains("cache_control"));

    // The whole answer is what the provider says to the request uncut.
    let mut whole = cut.clone();
    whole["model"] = json!("claude-ok");
    whole["stream"] = json!(false);
    let answer: Value = rig
        .http
        .post(format!("{}/v1/messages", rig.chaos_base))
        .json(&whole)
        .send()
        .await
        .expect("chaos answers")
        .json()
        .await
        .expect("JSON");
    let text = answer["content"][0]["text"].as_str().expect("text");
    assert!(text.len() > 20, "{answer}");
    assert_eq!(stdout.trim(), text.trim());
}

// ---------------------------------------------------------------------------
// Gemini CLI
// ---------------------------------------------------------------------------

/// The default agent: a Gemini primary answering 503 for ever, then an
/// OpenAI fallback whose stream is cut after five chunks (once), then an
/// Anthropic one. Each offers one model, so whatever model Gemini CLI asks
/// for, each serves its own.
const GEMINI_CONFIG: &str = "
agents:
  default: {provider: primary, fallback: [fb, fb2]}
retry:
  server_error: {max_attempts: 2, initial_ms: 20, max_ms: 50}
providers:
  - {name: primary, kind: gemini, base_url: '{chaos}/v1beta', api_key_env: HALE_TEST_GEMINI_KEY, default_model: error-503, models: [error-503]}
  - {name: fb, kind: openai, base_url: '{chaos}/v1', default_model: 'cut:after=5', models: ['cut:after=5']}
  - {name: fb2, kind: anthropic, base_url: '{chaos}', default_model: claude-ok, models: [claude-ok]}
";

/// Gemini CLI's settings: the API-key auth (the only one that takes a
/// base URL), no telemetry, no update checks.
const GEMINI_SETTINGS: &str = r#"{
  "security": {"auth": {"selectedType": "gemini-api-key"}},
  "privacy": {"usageStatisticsEnabled": false},
  "general": {"disableAutoUpdate": true, "disableUpdateNag": true},
  "telemetry": {"enabled": false}
}"#;

/// `gemini -p` with `GOOGLE_GEMINI_BASE_URL` = hale: the turn completes and
/// prints the provider's whole answer although the Gemini primary answers
/// 503 and the OpenAI fallback's stream is cut (resumed on the Anthropic
/// one with the delivered text as a prefill). Gemini CLI's
/// `streamGenerateContent?alt=sse` with its system instruction and tools
/// reaches the providers translated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_cli_completes_a_turn_through_a_503_and_a_cut_stream() {
    let Some(gemini) = cli_or_skip(GEMINI) else {
        return;
    };
    let rig = ChaosRig::start_with(
        GEMINI_CONFIG,
        &[],
        &[("HALE_TEST_GEMINI_KEY", "k-gemini-test")],
    )
    .await;
    let home = rig.dir.path().join("gemini-home");
    let work = rig.dir.path().join("work");
    std::fs::create_dir_all(home.join(".gemini")).expect("HOME");
    std::fs::create_dir_all(&work).expect("workdir");
    std::fs::write(home.join(".gemini/settings.json"), GEMINI_SETTINGS).expect("settings");
    let envs = [
        ("HOME", home.to_string_lossy().into_owned()),
        ("GOOGLE_GEMINI_BASE_URL", rig.base.clone()),
        ("GEMINI_API_KEY", "hale-gemini-cli-key".to_string()),
        // Headless in a fresh directory: trust it without asking.
        ("GEMINI_CLI_TRUST_WORKSPACE", "true".to_string()),
    ];
    let args = ["-m", "gemini-2.5-flash", "-p", "Say hi."];
    let out = run_cli(&gemini, &args, &work, &envs, &rig).await;
    let stdout = String::from_utf8_lossy(&out.stdout);

    assert!(
        rig.chaos_faults("error-503").await >= 1,
        "the primary was tried"
    );
    assert_eq!(rig.chaos_faults("cut").await, 1, "the stream was cut once");
    let bodies = rig.chaos_bodies().await;
    let cut = bodies
        .iter()
        .find(|b| b["model"] == "cut:after=5")
        .expect("the OpenAI fallback was called");
    // Gemini CLI's systemInstruction and function declarations, translated.
    assert_eq!(cut["messages"][0]["role"], "system", "{cut}");
    assert!(
        cut["messages"][0]["content"]
            .as_str()
            .is_some_and(|s| s.contains("Gemini CLI")),
        "{cut}"
    );
    assert!(
        cut["tools"].as_array().is_some_and(|t| !t.is_empty()),
        "the CLI's tools reached the provider: {cut}"
    );
    assert_eq!(cut["stream"], true);
    let resumed = bodies.last().expect("chaos got requests");
    assert_eq!(resumed["model"], "claude-ok", "{resumed}");
    assert_eq!(
        resumed["messages"]
            .as_array()
            .and_then(|m| m.last())
            .map(|m| &m["role"]),
        Some(&json!("assistant")),
        "resumed with the delivered text as a prefill"
    );
    // The whole answer is what the provider says to the request uncut.
    assert_eq!(stdout.trim(), words(60), "{stdout}");
}

// ---------------------------------------------------------------------------
// A six-step task through faults on every provider kind (issue 41)
// ---------------------------------------------------------------------------

/// `codex exec` runs the six-step task through hale: a Responses primary
/// that cuts a stream inside a tool call's arguments and answers 503 in a
/// burst, an Anthropic backup that 503s as well, a Gemini backup; Codex's
/// own retries off. Its last message is the task's checked answer and the
/// files are written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_exec_finishes_a_six_step_task_through_faults_across_kinds() {
    let Some(codex) = cli_or_skip(CODEX) else {
        return;
    };
    let config = task_config("gpt-5-codex", "responses", ["anthropic", "gemini"]);
    let rig = ChaosRig::start_scripted(
        &config,
        TASK_SCRIPT,
        &[("HALE_TEST_GEMINI_KEY", "k-gemini-test")],
    )
    .await;
    let (out, work) = run_codex(
        &codex,
        &rig,
        "Run task-41-6 with your shell tool, then report.",
    )
    .await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_task_finished(&rig, &stdout, &work, &[1, 2, 3, 4, 5, 6]).await;
}

/// `claude -p` runs the same task: an Anthropic primary with the same
/// faults, a Responses backup, a Gemini one. Claude Code's system prompt
/// mentions summarising; the task model answers what the task says (only
/// hale's compaction mark gets a summary). Bash is allowed by
/// `--allowedTools` (the bypass mode refuses to run as root).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_finishes_a_six_step_task_through_faults_across_kinds() {
    let Some(claude) = cli_or_skip(CLAUDE) else {
        return;
    };
    let config = task_config("claude-task", "anthropic", ["responses", "gemini"]);
    let rig = ChaosRig::start_scripted(
        &config,
        TASK_SCRIPT,
        &[("HALE_TEST_GEMINI_KEY", "k-gemini-test")],
    )
    .await;
    let (out, work) = run_claude(
        &claude,
        &rig,
        &[
            "-p",
            "Run task-41-6 with the Bash tool, then report.",
            "--allowedTools",
            "Bash",
        ],
    )
    .await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_task_finished(&rig, &stdout, &work, &[1, 2, 3, 4, 5, 6]).await;
}
