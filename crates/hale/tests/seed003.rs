//! Seed 003 ("Failover & Retry"), example by example, through the real
//! binary: `hale serve` with a config file (tool nodes, workflows, the audit
//! log, node breakers), chaos tool nodes on loopback, each seed document
//! posted with `POST /jobs` as the seed writes it — comments included — and
//! read back with `GET /jobs/{id}`; the seed's `curl … | jq` lines and its
//! Python alert script run as written (only the port and nothing else
//! adapted). Where the seed shows a fragment (a step's `retry`, a `target`),
//! the fragment is put whole into a one-step job whose tool is one the
//! chaos node serves (`echo`: the seed's `external_api_call` is any tool).
//! Each test is named for the behaviour the seed states and runs its body
//! on SQLite and on PostgreSQL at once (`sqlite_and_postgres::name`; a
//! failure says which; PostgreSQL missing: that half is skipped, or fails
//! under `CI=true`). Also here: the evidence of a skipped primary (issue 28
//! part 2).
//!
//! The seed's waits are real (1 s and 2 s backoffs, 500..4000 ms, a health
//! check every 10 s): the tests wait on sockets, not on CPU, so they may run
//! with more test threads than cores (`-- --test-threads 20`).

mod common;
#[path = "../../hale-store/tests/common/mod.rs"]
#[allow(unused_macros, unused_imports)]
mod store_common;
#[macro_use]
#[path = "common/tool_jobs.rs"]
mod tool_jobs;

use serde_json::{Value, json};
use tool_jobs::*;

/// A one-step job around a seed fragment (the inside of its outer braces,
/// verbatim), calling `tool`.
fn step_doc(job_id: &str, tool: &str, fragment: &str) -> String {
    let inner = fragment
        .trim()
        .strip_prefix('{')
        .and_then(|f| f.strip_suffix('}'))
        .expect("a fragment is an object");
    format!(
        "{{\"job_id\": \"{job_id}\", \"steps\": [{{\"step_id\": \"s1\", \"tool_name\": \"{tool}\",\n{inner}}}]}}"
    )
}

/// The gaps between attempts: each attempt's start minus the end of the one before.
fn gaps(job: &Value) -> Vec<u64> {
    let tl = job["timeline"].as_array().expect("a timeline");
    tl.windows(2)
        .map(|w| {
            let end = w[0]["timestamp"].as_u64().unwrap() + w[0]["duration_ms"].as_u64().unwrap();
            w[1]["timestamp"].as_u64().unwrap().saturating_sub(end)
        })
        .collect()
}

/// Each wait is the seed's (timestamps are whole ms, and a retry never
/// comes early), give or take what a loaded machine adds: a wait of twice
/// the next one would be another rule, not noise.
#[track_caller]
fn assert_gaps_near(got: &[u64], want: &[u64]) {
    assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
    for (g, w) in got.iter().zip(want) {
        assert!(
            *g + 2 >= *w && *g < *w + 400,
            "waits {got:?}, the seed says {want:?}"
        );
    }
}

// --- Retry Configuration ---------------------------------------------------

const BASIC_RETRY: &str = r#"{
  "step_id": "risky_operation",
  "tool_name": "external_api_call",
  "retry": {
    "max_attempts": 3,
    "backoff_ms": 1000
  }
}"#;

async fn basic_retry_waits_1_s_then_2_s_and_returns_the_error_after_3_attempts(b: Backend) {
    let n = node().await;
    n.fault("error-503").await;
    let Some(h) = Hale::start(b, &[http_node("node_a", &n.url)], "").await else {
        return;
    };
    // The seed's step, with the chaos node's tool for `external_api_call`.
    let step = BASIC_RETRY.replace("external_api_call", "echo");
    let doc = format!("{{\"job_id\": \"basic-retry\", \"steps\": [{step}]}}");
    let (status, job, _) = h.submit_text(&doc).await;
    assert_eq!(status, 200, "{job}");
    assert_eq!(job["ok"], false, "{job}");
    assert_eq!(job["steps"][0]["attempts"], 3);
    assert_eq!(job["steps"][0]["error"], "CapacityExceeded");
    assert_gaps_near(&gaps(&job), &[1000, 2000]);
    assert_eq!(n.faults("error-503").await, 3);
    // The error is what `GET /jobs/{id}` keeps.
    let (_, stored) = h.get("/jobs/basic-retry").await;
    assert_eq!(stored["status"], "failed");
    assert_eq!(stored["steps"][0]["attempts"], 3);
    h.stop().await;
}

const EXPONENTIAL_BACKOFF: &str = r#"{
  "retry": {
    "max_attempts": 5,
    "backoff_ms": 500,
    "backoff_multiplier": 2.0,
    "max_backoff_ms": 10000
  }
}"#;

async fn exponential_backoff_waits_500_1000_2000_4000_ms_before_attempts_2_to_5(b: Backend) {
    let n = node().await;
    n.fault("error-503:times=4").await;
    let Some(h) = Hale::start(b, &[http_node("node_a", &n.url)], "").await else {
        return;
    };
    let (status, job, _) = h
        .submit_text(&step_doc("exp-backoff", "echo", EXPONENTIAL_BACKOFF))
        .await;
    assert_eq!(status, 200, "{job}");
    assert_eq!(job["ok"], true, "the 5th attempt succeeds: {job}");
    assert_eq!(job["steps"][0]["attempts"], 5);
    assert_gaps_near(&gaps(&job), &[500, 1000, 2000, 4000]);
    h.stop().await;
}

// --- Failover Strategies ----------------------------------------------------

const AUTOMATIC_FAILOVER: &str = r#"{
  "target": { "kind": "local" },
  "retry": {
    "max_attempts": 3,
    "failover": true
  }
}"#;

async fn automatic_failover_passes_offline_node_a_and_failing_node_b_and_node_c_succeeds(
    b: Backend,
) {
    let (a, nb, c) = (node().await, node().await, node().await);
    nb.fault("error-503").await;
    let Some(h) = Hale::start(
        b,
        &[
            http_node("node_a", &a.url),
            http_node("node_b", &nb.url),
            http_node("node_c", &c.url),
        ],
        "",
    )
    .await
    else {
        return;
    };
    // Node A goes offline; hale's next health check sees it.
    let _a = a.die().await;
    h.wait_offline("node_a").await;
    let (status, job, _) = h
        .submit_text(&step_doc("auto-failover", "echo", AUTOMATIC_FAILOVER))
        .await;
    assert_eq!(status, 200, "{job}");
    assert_eq!(job["ok"], true, "{job}");
    assert_eq!(
        job["execution_path"],
        json!([
            "node_a (skipped: offline)",
            "node_b (capacity_exceeded)",
            "node_c (success)"
        ])
    );
    assert_eq!(job["degraded"], true);
    assert_eq!(nb.faults("error-503").await, 1);
    assert_eq!(c.calls("echo").await, 1);
    h.stop().await;
}

async fn retry_failover_false_keeps_the_retries_on_the_chosen_node(b: Backend) {
    let (nb, c) = (node().await, node().await);
    nb.fault("error-503:times=2").await;
    let Some(h) = Hale::start(
        b,
        &[http_node("node_b", &nb.url), http_node("node_c", &c.url)],
        "",
    )
    .await
    else {
        return;
    };
    let doc = step_doc(
        "no-failover",
        "echo",
        r#"{"target": {"kind": "local"}, "retry": {"max_attempts": 3, "backoff_ms": 50, "failover": false}}"#,
    );
    let (_, job, _) = h.submit_text(&doc).await;
    assert_eq!(job["ok"], true, "{job}");
    assert_eq!(
        job["execution_path"],
        json!([
            "node_b (capacity_exceeded)",
            "node_b (capacity_exceeded)",
            "node_b (success)"
        ])
    );
    assert_eq!(c.calls("echo").await, 0, "never moved to node_c");
    h.stop().await;
}

const EXPLICIT_CHAIN: &str = r#"{
  "target": {
    "kind": "failover_chain",
    "nodes": [
      "production:primary",
      "production:secondary",
      "development:backup"
    ]
  }
}"#;

async fn explicit_failover_chain_tries_the_named_nodes_in_order_until_one_succeeds(b: Backend) {
    let primary = offline();
    let (secondary, backup) = (node().await, node().await);
    secondary.fault("error-503").await;
    let Some(h) = Hale::start(
        b,
        &[
            http_node("development:backup", &backup.url),
            http_node("production:secondary", &secondary.url),
            http_node("production:primary", &primary.url),
        ],
        "",
    )
    .await
    else {
        return;
    };
    let (status, job, _) = h
        .submit_text(&step_doc("chain", "echo", EXPLICIT_CHAIN))
        .await;
    assert_eq!(status, 200, "{job}");
    assert_eq!(job["ok"], true, "{job}");
    assert_eq!(
        job["execution_path"],
        json!([
            "production:primary (skipped: offline)",
            "production:secondary (capacity_exceeded)",
            "development:backup (success)"
        ]),
        "the chain's order, not the config's"
    );
    assert_eq!(job["degraded"], true);
    h.stop().await;
}

const LOAD_BALANCED: &str = r#"{
  "target": {
    "kind": "load_balanced",
    "min_nodes": 2,
    "failover": true
  }
}"#;

async fn load_balanced_failover_redistributes_work_from_a_failing_node_to_the_remaining_ones(
    b: Backend,
) {
    let (a, nb, c) = (node().await, node().await, node().await);
    c.fault("error-503").await;
    // A fourth node that is down from the start: never in the spread.
    let d = offline();
    let Some(h) = Hale::start(
        b,
        &[
            http_node("a", &a.url),
            http_node("b", &nb.url),
            http_node("c", &c.url),
            http_node("d", &d.url),
        ],
        "",
    )
    .await
    else {
        return;
    };
    let mut moved = 0;
    for i in 0..6 {
        let (_, job, _) = h
            .submit_text(&step_doc(&format!("lb-{i}"), "echo", LOAD_BALANCED))
            .await;
        assert_eq!(job["ok"], true, "every job is served: {job}");
        let path = job["execution_path"].as_array().unwrap();
        if path[0] == "c (capacity_exceeded)" {
            moved += 1;
            assert!(
                path[1] == "a (success)" || path[1] == "b (success)",
                "{job}"
            );
        }
    }
    assert!(moved >= 1, "some work reached c and moved on");
    assert_eq!(
        a.calls("echo").await + nb.calls("echo").await,
        6,
        "the remaining nodes did all the work"
    );
    // `failover: false`: a call that lands on c stays there and fails.
    let no_fo = LOAD_BALANCED.replace("\"failover\": true", "\"failover\": false");
    let c_before = c.calls("echo").await + c.faults("error-503").await;
    let mut failed = 0;
    for i in 0..3 {
        let (_, job, _) = h
            .submit_text(&step_doc(&format!("lb-nofo-{i}"), "echo", &no_fo))
            .await;
        if job["ok"] == false {
            failed += 1;
            let path = job["execution_path"].as_array().unwrap();
            assert!(
                path.iter().all(|p| p.as_str().unwrap().starts_with("c ")),
                "{job}"
            );
        }
    }
    // c may be ejected by now (then it gets no work at all).
    if c.calls("echo").await + c.faults("error-503").await > c_before {
        assert!(failed >= 1, "a call on c was not moved");
    }
    // `min_nodes`: fewer healthy nodes than asked (d is offline) is an
    // error, not a spread over fewer.
    let (_, job) = h
        .submit(
            json!({"job_id": "lb-min", "steps": [{"step_id": "s1", "tool_name": "echo",
            "target": {"kind": "load_balanced", "min_nodes": 4, "failover": true}}]}),
        )
        .await;
    assert_eq!(job["ok"], false, "{job}");
    assert!(
        job["error"]
            .as_str()
            .unwrap()
            .contains("needs 4 healthy node"),
        "{job}"
    );
    h.stop().await;
}

// --- Offline Operation -----------------------------------------------------

const STORE_AND_FORWARD: &str = r#"{
  "target": { "kind": "local" },
  "offline_behavior": {
    "mode": "queue",
    "ttl_seconds": 86400,  // 24 hours
    "retry_interval_seconds": 300  // 5 minutes
  }
}"#;

async fn store_and_forward_queues_for_24_hours_retrying_every_5_minutes_when_all_nodes_are_offline(
    b: Backend,
) {
    let down = offline();
    let Some(h) = Hale::start(b, &[http_node("node_a", &down.url)], "").await else {
        return;
    };
    let (status, job, _) = h
        .submit_text(&step_doc("saf", "echo", STORE_AND_FORWARD))
        .await;
    assert_eq!(status, 202, "{job}");
    assert_eq!(job["status"], "queued");
    assert_eq!(job["queue"]["ttl_seconds"], 86400);
    assert_eq!(job["queue"]["retry_interval_seconds"], 300);
    // A witness retried every second: once the queue has tried it, a pass
    // ran after `saf` was queued — and left `saf` alone (not due for 5 minutes).
    let witness = STORE_AND_FORWARD.replace(
        "\"retry_interval_seconds\": 300",
        "\"retry_interval_seconds\": 1",
    );
    let (status, _, _) = h.submit_text(&step_doc("witness", "echo", &witness)).await;
    assert_eq!(status, 202);
    for i in 0.. {
        let (_, w) = h.get("/jobs/witness").await;
        if w["queue"]["deliveries"].as_u64() >= Some(1) {
            break;
        }
        assert!(i < 300, "the queue never retried the witness: {w}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let (_, again) = h.get("/jobs/saf").await;
    assert_eq!(again["status"], "queued", "{again}");
    assert_eq!(
        again["queue"]["deliveries"], 0,
        "not retried before 5 minutes"
    );
    assert!(h.event_kinds().await.contains(&"job.queued".to_owned()));
    h.stop().await;
}

const SHORT_TTL: &str = r#"{
  "offline_behavior": {
    "ttl_seconds": 3600  // 1 hour, not 1 week
  }
}"#;

async fn a_queued_request_delivers_automatically_when_the_node_comes_online(b: Backend) {
    let down = offline();
    let Some(h) = Hale::start(b, &[http_node("node_a", &down.url)], "").await else {
        return;
    };
    // No `mode`: a TTL means the job is queued.
    let (status, job, _) = h.submit_text(&step_doc("ttl", "echo", SHORT_TTL)).await;
    assert_eq!(status, 202, "{job}");
    assert_eq!(job["queue"]["ttl_seconds"], 3600);
    let n = down.come_online();
    let job = h.wait_status("ttl", "completed").await;
    assert_eq!(job["ok"], true, "{job}");
    assert_eq!(n.calls("echo").await, 1);
    h.stop().await;
}

const FAIL_FAST: &str = r#"{
  "offline_behavior": {
    "mode": "fail_fast"
  }
}"#;

async fn fail_fast_fails_at_once_instead_of_queuing(b: Backend) {
    let down = offline();
    let Some(h) = Hale::start(b, &[http_node("node_a", &down.url)], "").await else {
        return;
    };
    let (status, job, _) = h.submit_text(&step_doc("ff", "echo", FAIL_FAST)).await;
    assert_eq!(status, 200, "the answer is final: {job}");
    assert_eq!(job["status"], "failed");
    assert_eq!(job["queue"], Value::Null, "never queued");
    assert_eq!(job["steps"][0]["error"], "NoNodeAvailable");
    h.stop().await;
}

// --- Execution Evidence ----------------------------------------------------

async fn degraded_execution_shows_local_node_a_timeout_then_local_node_b_success(b: Backend) {
    let (a, nb) = (node().await, node().await);
    a.fault("hang").await;
    let Some(h) = Hale::start(
        b,
        &[
            http_node("local:node_a", &a.url),
            http_node("local:node_b", &nb.url),
        ],
        "",
    )
    .await
    else {
        return;
    };
    // `echo` is not deterministic on its nodes; the job declares it so
    // (seed 003's `tool_id` declaration), which makes re-running it after a
    // timeout safe.
    let doc = r#"{"job_id": "demo", "tools": [{"tool_id": "tool:echo", "deterministic": true}],
      "steps": [{"step_id": "summarize", "tool_name": "echo", "arguments": {"t": 1}, "timeout_ms": 2000}]}"#;
    let (_, job, _) = h.submit_text(doc).await;
    assert_eq!(job["ok"], true, "{job}");
    assert_eq!(job["verified"], true);
    assert_eq!(
        job["execution_path"],
        json!(["local:node_a (timeout)", "local:node_b (success)"])
    );
    assert_eq!(job["degraded"], true);
    assert!(
        job["degraded_reason"]
            .as_str()
            .unwrap()
            .contains("local:node_a")
    );
    let tl = job["timeline"].as_array().unwrap();
    assert_eq!(tl[0]["node"], "local:node_a");
    assert_eq!(tl[0]["error"], "NetworkTimeout");
    assert_eq!(tl[1]["node"], "local:node_b");
    assert_eq!(tl[1]["status"], "success");
    // The same evidence from `GET /jobs/{id}`.
    let (_, stored) = h.get("/jobs/demo").await;
    assert_eq!(stored["execution_path"], job["execution_path"]);
    assert_eq!(stored["timeline"], job["timeline"]);
    h.stop().await;
}

async fn a_tool_declared_deterministic_is_safe_to_retry_and_an_undeclared_one_is_not_rerun(
    b: Backend,
) {
    let (a, nb) = (node().await, node().await);
    a.fault("hang").await;
    let Some(h) = Hale::start(
        b,
        &[http_node("node_a", &a.url), http_node("node_b", &nb.url)],
        "",
    )
    .await
    else {
        return;
    };
    let job = |id: &str, decl: &str| {
        format!(
            r#"{{"job_id": "{id}", "tools": [{decl}],
              "steps": [{{"step_id": "s1", "tool_name": "echo", "timeout_ms": 1000,
                          "target": {{"kind": "failover_chain", "nodes": ["node_a", "node_b"]}}}}]}}"#
        )
    };
    // Without the declaration: the call may have run, so it is not re-run.
    let (_, j, _) = h.submit_text(&job("undeclared", "")).await;
    assert_eq!(j["ok"], false, "{j}");
    assert_eq!(j["maybe_executed"], true);
    assert_eq!(nb.calls("echo").await, 0);
    // The seed's declaration, verbatim, is accepted (for its own tool).
    let seed_decl = r#"{
  "tool_id": "tool:unit_convert",
  "deterministic": true
}"#;
    let (status, j, _) = h.submit_text(&job("unit-decl", seed_decl)).await;
    assert_eq!(status, 200, "{j}");
    assert_eq!(j["request"]["tools"][0]["tool_id"], "tool:unit_convert");
    assert_eq!(j["maybe_executed"], true, "echo is still not declared");
    // Declared deterministic: failed over to node_b.
    let (_, j, _) = h
        .submit_text(&job("declared", &seed_decl.replace("unit_convert", "echo")))
        .await;
    assert_eq!(j["ok"], true, "{j}");
    assert_eq!(j["maybe_executed"], false);
    assert_eq!(nb.calls("echo").await, 1);
    h.stop().await;
}

// --- Error Handling --------------------------------------------------------

const CUSTOM_ERRORS: &str = r#"{
  "retry": {
    "retryable_errors": [
      "NetworkTimeout",
      "CapacityExceeded"
    ],
    "non_retryable_errors": [
      "InvalidInput",
      "SchemaValidationFailed"
    ]
  }
}"#;

async fn custom_error_lists_retry_capacity_exceeded_and_fail_schema_validation_immediately(
    b: Backend,
) {
    let a = node().await;
    let Some(h) = Hale::start(b, &[http_node("node_a", &a.url)], "").await else {
        return;
    };
    a.fault("error-503:times=1").await;
    let (_, j, _) = h
        .submit_text(&step_doc("retryable", "echo", CUSTOM_ERRORS))
        .await;
    assert_eq!(j["ok"], true, "CapacityExceeded is retried: {j}");
    assert_eq!(j["steps"][0]["attempts"], 2);
    a.fault("schema-invalid").await;
    let (_, j, _) = h
        .submit_text(&step_doc("non-retryable", "echo", CUSTOM_ERRORS))
        .await;
    assert_eq!(j["ok"], false, "{j}");
    assert_eq!(j["steps"][0]["attempts"], 1, "not retried: {j}");
    assert_eq!(j["steps"][0]["error"], "SchemaValidationFailed");
    // InvalidInput: a 400 from the tool is final.
    a.fault("ok").await;
    let (_, j, _) = h
        .submit_text(&step_doc(
            "invalid",
            "unit_convert",
            &CUSTOM_ERRORS.replacen('{', r#"{"arguments": {"value": "x"},"#, 1),
        ))
        .await;
    assert_eq!(j["ok"], false, "{j}");
    assert_eq!(j["steps"][0]["error"], "InvalidInput");
    assert_eq!(j["steps"][0]["attempts"], 1);
    h.stop().await;
}

// --- Idempotency and workflows ---------------------------------------------

/// The seed's workflow, in the config file: two steps on `echo`, the first
/// reading the job's `input`, the second the first's result.
const SUMMARY_WORKFLOW: &str = r#"workflows:
  feedback_safe_summary:
    tools: [{tool_id: "tool:echo", deterministic: true}]
    steps:
      - {step_id: redact, tool_name: echo, arguments: {input: "${input}"}}
      - step_id: summarize
        tool_name: echo
        arguments: {redacted: "${steps.redact.result.echo.input}"}
"#;

const JOB_IDS: &str = r#"{
  "job_id": "job-2024-01-27-xyz",
  "workflow_id": "feedback_safe_summary",
  "input": { /* ... */ }
}"#;

async fn a_job_id_submitted_twice_runs_its_workflow_once_and_returns_the_cached_result(b: Backend) {
    let n = node().await;
    let Some(h) = Hale::start(b, &[http_node("node_a", &n.url)], SUMMARY_WORKFLOW).await else {
        return;
    };
    let (status, first, replayed) = h.submit_text(JOB_IDS).await;
    assert_eq!(status, 200, "{first}");
    assert!(!replayed);
    assert_eq!(first["ok"], true, "{first}");
    assert_eq!(first["workflow_id"], "feedback_safe_summary");
    assert_eq!(first["result"], json!({"echo": {"redacted": {}}}));
    let (status, second, replayed) = h.submit_text(JOB_IDS).await;
    assert_eq!(status, 200);
    assert!(replayed, "the second is the cached result");
    assert_eq!(second["result"], first["result"]);
    assert_eq!(second["finished_ms"], first["finished_ms"]);
    assert_eq!(n.calls("echo").await, 2, "two steps, run once");
    h.stop().await;
}

async fn a_workflow_reads_its_input_and_its_audit_record_carries_the_workflow_id(b: Backend) {
    let n = node().await;
    let Some(h) = Hale::start(b, &[http_node("node_a", &n.url)], SUMMARY_WORKFLOW).await else {
        return;
    };
    let (_, j) = h
        .submit(
            json!({"job_id": "wf-1", "workflow_id": "feedback_safe_summary",
                       "input": {"text": "my email is a@b.c"}}),
        )
        .await;
    assert_eq!(j["ok"], true, "{j}");
    assert_eq!(
        j["result"],
        json!({"echo": {"redacted": {"text": "my email is a@b.c"}}})
    );
    let (_, audit) = h.get("/jobs/audit").await;
    assert_eq!(
        audit["audit"][0]["body"]["workflow_id"],
        "feedback_safe_summary"
    );
    // An unknown workflow without steps is a 400 naming it.
    let (status, e) = h
        .submit(json!({"job_id": "wf-2", "workflow_id": "nope", "input": {}}))
        .await;
    assert_eq!(status, 400);
    assert!(e.to_string().contains("nope"), "{e}");
    h.stop().await;
}

// --- Circuit Breaker -------------------------------------------------------

const CIRCUIT_BREAKER: &str = r#"{
  "circuit_breaker": {
    "failure_threshold": 5,
    "timeout_seconds": 60,
    "half_open_requests": 1
  }
}"#;

const CIRCUIT_BREAKER_FLAKY: &str = r#"{
  "circuit_breaker": {
    "failure_threshold": 3,
    "timeout_seconds": 30
  }
}"#;

async fn a_circuit_breaker_opens_after_failure_threshold_failures_and_fails_fast_past_the_node(
    b: Backend,
) {
    let (a, nb) = (node().await, node().await);
    a.fault("error-503").await;
    // The node's own breaker (config) is lenient, so only the step's decides.
    let Some(h) = Hale::start(
        b,
        &[
            http_node_with("node_a", &a.url, "breaker: {failure_threshold: 100}"),
            http_node("node_b", &nb.url),
        ],
        "",
    )
    .await
    else {
        return;
    };
    let chained = |id: &str, fragment: &str, nodes: &str| {
        step_doc(id, "echo", fragment).replace(
            "\"tool_name\": \"echo\",",
            &format!("\"tool_name\": \"echo\", \"target\": {{\"kind\": \"failover_chain\", \"nodes\": {nodes}}},"),
        )
    };
    let both = r#"["node_a", "node_b"]"#;
    for i in 0..3 {
        let (_, j, _) = h
            .submit_text(&chained(&format!("cb-{i}"), CIRCUIT_BREAKER_FLAKY, both))
            .await;
        assert_eq!(j["ok"], true, "{j}");
        assert_eq!(
            j["execution_path"],
            json!(["node_a (capacity_exceeded)", "node_b (success)"]),
            "failure {i} still reaches node_a"
        );
    }
    let (_, j, _) = h
        .submit_text(&chained("cb-open", CIRCUIT_BREAKER_FLAKY, both))
        .await;
    assert_eq!(
        j["execution_path"],
        json!(["node_a (skipped: open)", "node_b (success)"]),
        "open after 3 failures: {j}"
    );
    assert_eq!(j["degraded"], true);
    assert_eq!(a.faults("error-503").await, 3);
    // The node itself is not ejected: a step without the breaker still calls it.
    let (_, j, _) = h
        .submit_text(&chained("no-cb", r#"{"timeout_ms": 5000}"#, both))
        .await;
    assert_eq!(j["execution_path"][0], "node_a (capacity_exceeded)", "{j}");
    // The seed's first breaker, verbatim, is accepted as the step's `breaker`.
    let (status, j, _) = h
        .submit_text(&chained("cb-seed", CIRCUIT_BREAKER, r#"["node_b"]"#))
        .await;
    assert_eq!(status, 200, "{j}");
    assert_eq!(
        j["request"]["steps"][0]["breaker"],
        json!({"failure_threshold": 5, "timeout_seconds": 60, "half_open_requests": 1})
    );
    // A registration accepts `circuit_breaker` for `breaker` too.
    let r = h
        .http
        .post(format!("{}/nodes", h.url))
        .json(&json!({"name": "reg", "kind": "http", "url": nb.url,
                      "circuit_breaker": {"failure_threshold": 3, "timeout_seconds": 30}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    h.stop().await;
}

async fn a_primary_ejected_by_its_breaker_is_named_skipped_ejected_for_chain_and_local(b: Backend) {
    let (a, nb) = (node().await, node().await);
    a.fault("error-503").await;
    // The config's `circuit_breaker` (seed 003's name) for the node's breaker.
    let Some(h) = Hale::start(
        b,
        &[
            http_node_with("node_a", &a.url, "circuit_breaker: {failure_threshold: 1}"),
            http_node("node_b", &nb.url),
        ],
        "",
    )
    .await
    else {
        return;
    };
    let chain = json!({"kind": "failover_chain", "nodes": ["node_a", "node_b"]});
    let (_, j) = h
        .submit(one_step("trip", "echo", json!({}), chain.clone()))
        .await;
    assert_eq!(
        j["execution_path"],
        json!(["node_a (capacity_exceeded)", "node_b (success)"])
    );
    for (id, target) in [("chain", chain), ("local", json!({"kind": "local"}))] {
        let (_, j) = h.submit(one_step(id, "echo", json!({}), target)).await;
        assert_eq!(j["ok"], true, "{j}");
        assert_eq!(
            j["execution_path"],
            json!(["node_a (skipped: ejected)", "node_b (success)"]),
            "{id}"
        );
        assert_eq!(j["degraded"], true, "{id}");
        assert!(
            j["degraded_reason"]
                .as_str()
                .unwrap()
                .contains("node_a unavailable (ejected)")
        );
    }
    // A chain whose first node is well: nothing skipped, not degraded.
    let (_, j) = h
        .submit(one_step(
            "healthy",
            "echo",
            json!({}),
            json!({"kind": "failover_chain", "nodes": ["node_b", "node_a"]}),
        ))
        .await;
    assert_eq!(j["execution_path"], json!(["node_b (success)"]));
    assert_eq!(j["degraded"], false);
    h.stop().await;
}

// --- Monitoring & Alerts ---------------------------------------------------

/// The seed's three lines, with hale's port for 8787.
const METRICS_LINES: &str = r#"
# Node availability
curl http://127.0.0.1:8787/v1/metrics | jq '.node_availability'

# Failover rate
curl http://127.0.0.1:8787/v1/metrics | jq '.failover_rate'

# Degraded execution percentage
curl http://127.0.0.1:8787/v1/metrics | jq '.degraded_percentage'
"#;

/// Whether `jq` (and `curl`) are on the PATH.
fn have_jq_and_curl() -> bool {
    std::process::Command::new("bash")
        .args(["-c", "command -v jq && command -v curl"])
        .output()
        .is_ok_and(|o| o.status.success())
}

async fn v1_metrics_gives_jq_node_availability_failover_rate_and_degraded_percentage(b: Backend) {
    let (a, nb) = (node().await, node().await);
    a.fault("error-503").await;
    let Some(h) = Hale::start(
        b,
        &[http_node("node_a", &a.url), http_node("node_b", &nb.url)],
        "",
    )
    .await
    else {
        return;
    };
    for i in 0..2 {
        let (_, j) = h
            .submit(one_step(
                &format!("m-{i}"),
                "echo",
                json!({}),
                json!({"kind": "failover_chain", "nodes": ["node_a", "node_b"]}),
            ))
            .await;
        assert_eq!(j["ok"], true, "{j}");
    }
    let (avail, failover, degraded) = if have_jq_and_curl() {
        let port = h.url.rsplit(':').next().unwrap().to_owned();
        let script = METRICS_LINES.replace("8787", &port);
        let out = tokio::process::Command::new("bash")
            .arg("-c")
            .arg(format!("set -eo pipefail\n{script}"))
            .output()
            .await
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(
            out.status.success(),
            "{text} {}",
            String::from_utf8_lossy(&out.stderr)
        );
        // jq prints the object, then two numbers.
        let mut de = serde_json::Deserializer::from_str(&text).into_iter::<Value>();
        let mut next = || de.next().expect("three values").expect("JSON");
        (next(), next(), next())
    } else {
        eprintln!("jq or curl missing: the seed's three jq paths are read in Rust");
        let m = h.metrics().await;
        (
            m["node_availability"].clone(),
            m["failover_rate"].clone(),
            m["degraded_percentage"].clone(),
        )
    };
    assert!(avail["node_a"].as_f64().unwrap() < 1.0, "{avail}");
    assert_eq!(avail["node_b"], 1.0, "{avail}");
    assert_eq!(failover, 1.0, "both steps moved");
    assert_eq!(degraded, 100.0, "both jobs degraded");
    h.stop().await;
}

/// The seed's alert script, line for line (its path is hale's audit log
/// file, relative to hale's working directory, as configured below).
const ALERT_SCRIPT: &str = r#"# Monitor audit log for degraded workflows
import json

with open('audit/audit.log') as f:
    for line in f:
        record = json.loads(line)
        if record.get('degraded'):
            print(f"ALERT: Degraded execution in {record['workflow_id']}")
            print(f"Reason: {record['degraded_reason']}")
"#;

fn python() -> String {
    std::env::var("HALE_PYTHON").unwrap_or_else(|_| "python3".into())
}

async fn the_seeds_alert_script_prints_the_degraded_workflow_from_the_audit_log_file(b: Backend) {
    let (a, nb) = (node().await, node().await);
    let extra = format!("{SUMMARY_WORKFLOW}tool_jobs:\n  audit_log: {{path: audit/audit.log}}\n");
    let Some(h) = Hale::start(
        b,
        &[http_node("node_a", &a.url), http_node("node_b", &nb.url)],
        &extra,
    )
    .await
    else {
        return;
    };
    // One clean job (no workflow), then node_a fails and a workflow job is
    // served by node_b, degraded.
    let (_, j) = h
        .submit(one_step(
            "clean",
            "echo",
            json!({}),
            json!({"kind": "failover_chain", "nodes": ["node_a"]}),
        ))
        .await;
    assert_eq!(j["degraded"], false, "{j}");
    a.fault("error-503").await;
    let (_, j) = h
        .submit(
            json!({"job_id": "wf-degraded", "workflow_id": "feedback_safe_summary",
                       "input": {"text": "x"}}),
        )
        .await;
    assert_eq!(j["degraded"], true, "node_a fails: {j}");
    let out = tokio::process::Command::new(python())
        .arg("-c")
        .arg(ALERT_SCRIPT)
        .current_dir(h.dir())
        .output()
        .await
        .expect("python runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        stdout,
        format!(
            "ALERT: Degraded execution in feedback_safe_summary\nReason: {}\n",
            j["degraded_reason"].as_str().unwrap()
        )
    );
    assert!(
        stdout.contains("step redact: node_a (capacity_exceeded) failed; served by node_b"),
        "the reason names the failed node and the one that served: {stdout}"
    );
    h.stop().await;
}

async fn the_audit_log_file_rotates_at_max_bytes_and_keeps_keep_old_files(b: Backend) {
    let n = node().await;
    let extra = "tool_jobs:\n  audit_log: {path: audit/audit.log, max_bytes: 4096, keep: 2}\n";
    let Some(h) = Hale::start(b, &[http_node("node_a", &n.url)], extra).await else {
        return;
    };
    for i in 0..30 {
        let (_, j) = h
            .submit(one_step(
                &format!("rot-{i}"),
                "echo",
                json!({"i": i}),
                json!({"kind": "local"}),
            ))
            .await;
        assert_eq!(j["ok"], true);
    }
    let base = h.dir().join("audit");
    let mut names: Vec<String> = std::fs::read_dir(&base)
        .expect("hale created audit/ in its working directory")
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["audit.log", "audit.log.1", "audit.log.2"],
        "keep: 2"
    );
    let mut lines = 0;
    for name in &names {
        let text = std::fs::read_to_string(base.join(name)).unwrap();
        assert!(text.len() <= 4096, "{name} is {} bytes", text.len());
        for l in text.lines() {
            let v: Value = serde_json::from_str(l).unwrap();
            assert!(v["job_id"].as_str().unwrap().starts_with("rot-"));
            lines += 1;
        }
    }
    assert!(lines < 30, "older lines were dropped with the oldest file");
    let newest = std::fs::read_to_string(base.join("audit.log")).unwrap();
    assert!(
        newest.contains("\"rot-29\""),
        "the last job is in the current file"
    );
    h.stop().await;
}

// --- Issue 28, part 2: a skipped primary is evidence -------------------------

async fn a_chain_whose_primary_just_died_is_served_by_the_backup_degraded_with_the_skip_in_the_path(
    b: Backend,
) {
    let (a, nb) = (node().await, node().await);
    let Some(h) = Hale::start(
        b,
        &[http_node("node_a", &a.url), http_node("node_b", &nb.url)],
        "",
    )
    .await
    else {
        return;
    };
    // node_a dies; hale's next health check sees it.
    let _a = a.die().await;
    h.wait_offline("node_a").await;
    let chain = json!({"kind": "failover_chain", "nodes": ["node_a", "node_b"]});
    let (_, j) = h
        .submit(one_step("after-death", "echo", json!({}), chain))
        .await;
    assert_eq!(j["ok"], true, "{j}");
    assert_eq!(
        j["execution_path"],
        json!(["node_a (skipped: offline)", "node_b (success)"])
    );
    assert_eq!(j["degraded"], true);
    assert_eq!(
        j["degraded_reason"],
        "Primary node node_a unavailable (offline), failed over to node_b (step s1)"
    );
    assert_eq!(j["timeline"][0]["status"], "skipped");
    assert_eq!(j["timeline"][0]["node"], "node_a");
    h.stop().await;
}

on_both_backends!(
    basic_retry_waits_1_s_then_2_s_and_returns_the_error_after_3_attempts,
    exponential_backoff_waits_500_1000_2000_4000_ms_before_attempts_2_to_5,
    automatic_failover_passes_offline_node_a_and_failing_node_b_and_node_c_succeeds,
    retry_failover_false_keeps_the_retries_on_the_chosen_node,
    explicit_failover_chain_tries_the_named_nodes_in_order_until_one_succeeds,
    load_balanced_failover_redistributes_work_from_a_failing_node_to_the_remaining_ones,
    store_and_forward_queues_for_24_hours_retrying_every_5_minutes_when_all_nodes_are_offline,
    a_queued_request_delivers_automatically_when_the_node_comes_online,
    fail_fast_fails_at_once_instead_of_queuing,
    degraded_execution_shows_local_node_a_timeout_then_local_node_b_success,
    a_tool_declared_deterministic_is_safe_to_retry_and_an_undeclared_one_is_not_rerun,
    custom_error_lists_retry_capacity_exceeded_and_fail_schema_validation_immediately,
    a_job_id_submitted_twice_runs_its_workflow_once_and_returns_the_cached_result,
    a_workflow_reads_its_input_and_its_audit_record_carries_the_workflow_id,
    a_circuit_breaker_opens_after_failure_threshold_failures_and_fails_fast_past_the_node,
    a_primary_ejected_by_its_breaker_is_named_skipped_ejected_for_chain_and_local,
    v1_metrics_gives_jq_node_availability_failover_rate_and_degraded_percentage,
    the_seeds_alert_script_prints_the_degraded_workflow_from_the_audit_log_file,
    the_audit_log_file_rotates_at_max_bytes_and_keeps_keep_old_files,
    a_chain_whose_primary_just_died_is_served_by_the_backup_degraded_with_the_skip_in_the_path,
);
