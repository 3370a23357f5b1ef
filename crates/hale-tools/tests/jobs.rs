//! Tool jobs through the real HTTP path: hale-tools' router on loopback,
//! real chaos tool nodes, a real SQLite store (issue 10's "Must show").

mod common;

use common::*;
use hale_core::event::EventKind;
use serde_json::json;

#[tokio::test]
async fn failover_chain_primary_down_is_served_by_secondary_degraded_with_both_in_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (node().await, node().await);
    a.fault("down:secs=60").await;
    let h = hale(
        dir.path(),
        vec![http_node("node_a", &a.url), http_node("node_b", &b.url)],
        false,
    )
    .await;
    let (status, job) = h
        .submit(one_step(
            "j-chain",
            "echo",
            json!({"msg": "hi"}),
            json!({"kind": "failover_chain", "nodes": ["node_a", "node_b"]}),
        ))
        .await;
    assert_eq!(status, 200, "{job}");
    assert_eq!(job["ok"], true, "{job}");
    assert_eq!(job["status"], "completed");
    assert_eq!(job["result"], json!({"echo": {"msg": "hi"}}));
    assert_eq!(job["degraded"], true);
    assert!(
        job["degraded_reason"].as_str().unwrap().contains("node_a"),
        "{job}"
    );
    assert_eq!(
        job["execution_path"],
        json!(["node_a (capacity_exceeded)", "node_b (success)"])
    );
    let tl = job["timeline"].as_array().unwrap();
    assert_eq!(tl.len(), 2);
    assert_eq!(tl[0]["node"], "node_a");
    assert_eq!(tl[0]["status"], "error");
    assert_eq!(tl[0]["error"], "CapacityExceeded");
    assert_eq!(tl[1]["node"], "node_b");
    assert_eq!(tl[1]["status"], "success");
    assert_eq!(job["verified"], true, "echo has an output schema");
    assert_eq!(b.calls("echo").await, 1);
    let kinds = h.event_kinds().await;
    for k in [
        EventKind::JobSubmitted,
        EventKind::JobFailedOver,
        EventKind::JobCompleted,
    ] {
        assert!(kinds.contains(&k), "{k} missing from {kinds:?}");
    }
    // The audit log has it, as a degraded job.
    let (_, audit) = h.get("/jobs/audit?degraded=true").await;
    assert_eq!(audit["audit"][0]["job_id"], "j-chain");
    let (_, clean) = h.get("/jobs/audit?degraded=false").await;
    assert_eq!(clean["audit"].as_array().unwrap().len(), 0);
    h.stop().await;
}

#[tokio::test]
async fn local_with_a_hanging_node_times_out_and_another_node_serves_within_the_step_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (node().await, node().await);
    a.fault("hang").await;
    let mut na = http_node("node_a", &a.url);
    na.deterministic = vec!["echo".into()];
    let mut nb = http_node("node_b", &b.url);
    nb.deterministic = vec!["echo".into()];
    // node_a first in config order: local picks it first.
    let h = hale(dir.path(), vec![na, nb], false).await;
    let mut job = one_step(
        "j-hang",
        "echo",
        json!({"x": 1}),
        json!({"kind": "local", "failover": true}),
    );
    job["steps"][0]["timeout_ms"] = json!(2000);
    let (status, job) = h.submit(job).await;
    assert_eq!(status, 200, "{job}");
    assert_eq!(job["ok"], true, "{job}");
    assert_eq!(
        job["execution_path"],
        json!(["node_a (timeout)", "node_b (success)"])
    );
    let tl = job["timeline"].as_array().unwrap();
    let total: u64 = tl.iter().map(|a| a["duration_ms"].as_u64().unwrap()).sum();
    assert!(total < 2000, "served within the step's timeout: {job}");
    assert_eq!(job["maybe_executed"], false);
    h.stop().await;
}

#[tokio::test]
async fn a_non_deterministic_tool_timing_out_after_sending_is_not_rerun_and_says_maybe_executed() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (node().await, node().await);
    let h = hale(
        dir.path(),
        vec![http_node("node_a", &a.url), http_node("node_b", &b.url)],
        false,
    )
    .await;
    let mut job = one_step(
        "j-maybe",
        "slow",
        json!({"ms": 3000}),
        json!({"kind": "local"}),
    );
    job["steps"][0]["timeout_ms"] = json!(600);
    let (status, job) = h.submit(job).await;
    assert_eq!(status, 200, "{job}");
    assert_eq!(job["ok"], false);
    assert_eq!(job["status"], "failed");
    assert_eq!(job["maybe_executed"], true, "{job}");
    assert_eq!(job["steps"][0]["maybe_executed"], true);
    assert_eq!(job["steps"][0]["error"], "NetworkTimeout");
    assert_eq!(job["timeline"].as_array().unwrap().len(), 1);
    assert_eq!(a.calls("slow").await + b.calls("slow").await, 1);
    assert!(h.event_kinds().await.contains(&EventKind::JobStepFailed));
    h.stop().await;
}

#[tokio::test]
async fn the_same_timeout_is_rerun_elsewhere_when_the_step_carries_an_idempotency_key() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (node().await, node().await);
    a.fault("hang").await;
    let h = hale(
        dir.path(),
        vec![http_node("node_a", &a.url), http_node("node_b", &b.url)],
        false,
    )
    .await;
    let mut job = one_step("j-key", "echo", json!({}), json!({"kind": "local"}));
    job["steps"][0]["timeout_ms"] = json!(1000);
    job["steps"][0]["idempotency_key"] = json!("k-1");
    let (_, job) = h.submit(job).await;
    assert_eq!(job["ok"], true, "{job}");
    assert_eq!(job["maybe_executed"], false);
    assert_eq!(b.calls("echo").await, 1);
    h.stop().await;
}

#[tokio::test]
async fn load_balanced_spreads_calls_over_min_nodes_and_drops_an_ejected_node() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b, c) = (node().await, node().await, node().await);
    let h = hale(
        dir.path(),
        vec![
            http_node("a", &a.url),
            http_node("b", &b.url),
            http_node("c", &c.url),
        ],
        false,
    )
    .await;
    let lb = json!({"kind": "load_balanced", "min_nodes": 2, "failover": true});
    for i in 0..6 {
        let (_, j) = h
            .submit(one_step(&format!("lb-{i}"), "echo", json!({}), lb.clone()))
            .await;
        assert_eq!(j["ok"], true, "{j}");
    }
    assert_eq!(
        (
            a.calls("echo").await,
            b.calls("echo").await,
            c.calls("echo").await
        ),
        (2, 2, 2),
        "spread evenly"
    );
    // c goes down: three failures in a row open its breaker (ejected).
    c.fault("error-503").await;
    let mut i = 0;
    while h.get("/nodes").await.1["nodes"][2]["health"] != "ejected" {
        let (_, j) = h
            .submit(one_step(
                &format!("lb-down-{i}"),
                "echo",
                json!({}),
                lb.clone(),
            ))
            .await;
        assert_eq!(j["ok"], true, "failover keeps jobs whole: {j}");
        i += 1;
        assert!(i < 20, "c never ejected");
    }
    let c_before = c.calls("echo").await;
    let faults_before = reqwest::get(format!("{}/chaos/tools/stats", c.url))
        .await
        .unwrap()
        .json::<serde_json::Value>()
        .await
        .unwrap()["faults"]["error-503"]
        .as_u64()
        .unwrap();
    for k in 0..4 {
        let (_, j) = h
            .submit(one_step(
                &format!("lb-after-{k}"),
                "echo",
                json!({}),
                lb.clone(),
            ))
            .await;
        assert_eq!(j["ok"], true);
        assert_eq!(j["degraded"], false, "an ejected node is not tried: {j}");
    }
    let faults_after = reqwest::get(format!("{}/chaos/tools/stats", c.url))
        .await
        .unwrap()
        .json::<serde_json::Value>()
        .await
        .unwrap()["faults"]["error-503"]
        .as_u64()
        .unwrap();
    assert_eq!(
        faults_after, faults_before,
        "no call reached the ejected node"
    );
    assert_eq!(c.calls("echo").await, c_before);
    // Fewer than min_nodes healthy: a clear error (fail_fast).
    b.fault("error-503").await;
    let (_, _) = h.get("/nodes").await;
    let need3 = json!({"kind": "load_balanced", "min_nodes": 3});
    let (_, j) = h.submit(one_step("lb-min", "echo", json!({}), need3)).await;
    assert_eq!(j["ok"], false);
    assert!(
        j["error"]
            .as_str()
            .unwrap()
            .contains("needs 3 healthy node"),
        "{j}"
    );
    let (_, m) = h.get("/jobs/metrics").await;
    assert!(m["nodes"]["c"]["node_availability"].as_f64().unwrap() < 1.0);
    assert!(m["tools"]["echo"]["failover_rate"].as_f64().unwrap() > 0.0);
    assert!(m["tools"]["echo"]["degraded_percentage"].as_f64().unwrap() > 0.0);
    h.stop().await;
}

#[tokio::test]
async fn retry_with_backoff_500_times_2_waits_500_then_1000_ms_between_attempts() {
    let dir = tempfile::tempdir().unwrap();
    let a = node().await;
    a.fault("error-503:times=2").await;
    let h = hale(dir.path(), vec![http_node("only", &a.url)], false).await;
    let mut job = one_step("j-backoff", "echo", json!({}), json!({"kind": "local"}));
    job["steps"][0]["retry"] =
        json!({"max_attempts": 3, "backoff_ms": 500, "backoff_multiplier": 2});
    let (_, job) = h.submit(job).await;
    assert_eq!(job["ok"], true, "{job}");
    let tl = job["timeline"].as_array().unwrap();
    assert_eq!(tl.len(), 3);
    let t: Vec<u64> = tl
        .iter()
        .map(|a| a["timestamp"].as_u64().unwrap())
        .collect();
    let end0 = t[0] + tl[0]["duration_ms"].as_u64().unwrap();
    let end1 = t[1] + tl[1]["duration_ms"].as_u64().unwrap();
    assert!(t[1] - end0 >= 500, "first wait ≥ 500 ms: {tl:?}");
    assert!(t[2] - end1 >= 1000, "second wait ≥ 1000 ms: {tl:?}");
    assert_eq!(
        job["execution_path"],
        json!([
            "only (capacity_exceeded)",
            "only (capacity_exceeded)",
            "only (success)"
        ])
    );
    h.stop().await;
}

#[tokio::test]
async fn non_retryable_errors_stop_the_step_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (node().await, node().await);
    a.fault("error-503").await;
    let h = hale(
        dir.path(),
        vec![http_node("node_a", &a.url), http_node("node_b", &b.url)],
        false,
    )
    .await;
    let mut job = one_step("j-nr", "echo", json!({}), json!({"kind": "local"}));
    job["steps"][0]["retry"] = json!({"non_retryable_errors": ["CapacityExceeded"]});
    let (_, job) = h.submit(job).await;
    assert_eq!(job["ok"], false);
    assert_eq!(job["timeline"].as_array().unwrap().len(), 1, "{job}");
    assert_eq!(b.calls("echo").await, 0);
    h.stop().await;
}

#[tokio::test]
async fn a_400_from_the_tool_is_not_retried_or_failed_over() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (node().await, node().await);
    let h = hale(
        dir.path(),
        vec![http_node("node_a", &a.url), http_node("node_b", &b.url)],
        false,
    )
    .await;
    let (_, job) = h
        .submit(one_step(
            "j-400",
            "unit_convert",
            json!({"value": 1, "from": "cm", "to": "parsec"}),
            json!({"kind": "local"}),
        ))
        .await;
    assert_eq!(job["ok"], false);
    assert_eq!(job["steps"][0]["error"], "InvalidInput");
    assert_eq!(job["timeline"].as_array().unwrap().len(), 1);
    assert_eq!(
        a.calls("unit_convert").await + b.calls("unit_convert").await,
        1
    );
    // The node's health is untouched by the caller's mistake.
    let (_, nodes) = h.get("/nodes").await;
    assert_eq!(nodes["nodes"][0]["health"], "healthy");
    h.stop().await;
}

#[tokio::test]
async fn the_same_job_id_twice_runs_once_and_returns_the_first_result() {
    let dir = tempfile::tempdir().unwrap();
    let a = node().await;
    let h = hale(dir.path(), vec![http_node("n", &a.url)], false).await;
    let job = one_step(
        "j-once",
        "unit_convert",
        json!({"value": 1, "from": "in", "to": "cm"}),
        json!({"kind": "local"}),
    );
    let (s1, first) = h.submit(job.clone()).await;
    let (s2, second) = h.submit(job.clone()).await;
    assert_eq!((s1, s2), (200, 200));
    assert_eq!(first["result"], json!({"value": 2.54, "unit": "cm"}));
    assert_eq!(first, second);
    assert_eq!(a.calls("unit_convert").await, 1);
    // A different request under the same id is refused.
    let mut other = job.clone();
    other["steps"][0]["arguments"]["value"] = json!(2);
    let (s3, err) = h.submit(other).await;
    assert_eq!(s3, 409);
    assert_eq!(err["error"]["type"], "job_id_reused");
    // And across a restart.
    h.stop().await;
    let h = hale(dir.path(), vec![http_node("n", &a.url)], false).await;
    let (_, third) = h.submit(job).await;
    assert_eq!(third["result"], first["result"]);
    assert_eq!(a.calls("unit_convert").await, 1);
    h.stop().await;
}

#[tokio::test]
async fn steps_chain_results_and_bad_jobs_get_a_clear_400() {
    let dir = tempfile::tempdir().unwrap();
    let a = node().await;
    let h = hale(dir.path(), vec![http_node("n", &a.url)], false).await;
    let (_, job) = h
        .submit(json!({"job_id": "j-chain2", "workflow_id": "wf", "steps": [
            {"step_id": "in_cm", "tool_name": "unit_convert", "arguments": {"value": 10, "from": "in", "to": "cm"}},
            {"step_id": "in_m", "tool_name": "unit_convert",
             "arguments": {"value": "${steps.in_cm.result.value}", "from": "cm", "to": "m"}}
        ]}))
        .await;
    assert_eq!(job["ok"], true, "{job}");
    assert_eq!(job["result"], json!({"value": 0.254, "unit": "m"}));
    assert_eq!(job["verified"], true);
    let (s, err) = h
        .submit(json!({"job_id": "", "steps": [], "surprise": 1}))
        .await;
    assert_eq!(s, 400);
    assert!(
        err["error"]["message"]
            .as_str()
            .unwrap()
            .contains("surprise"),
        "{err}"
    );
    let (s, err) = h
        .submit(json!({"job_id": "x", "steps": [{"step_id": "a", "tool_name": "echo", "retry": {"max_attempts": 0}}]}))
        .await;
    assert_eq!(s, 400);
    assert!(
        err["error"]["message"]
            .as_str()
            .unwrap()
            .contains("max_attempts"),
        "{err}"
    );
    // A tool name becomes a path segment of an HTTP node's URL: one with a
    // `.` or `..` part is refused, the rule named (issue 42).
    let (s, err) = h
        .submit(json!({"job_id": "y", "steps": [{"step_id": "a", "tool_name": "../admin"}]}))
        .await;
    assert_eq!(s, 400);
    let msg = err["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("steps[0].tool_name") && msg.contains("`..`"),
        "{err}"
    );
    let (s, _) = h.get("/jobs/nope").await;
    assert_eq!(s, 404);
    h.stop().await;
}

#[tokio::test]
async fn schema_invalid_output_fails_over_to_a_node_with_valid_output() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (node().await, node().await);
    a.fault("schema-invalid").await;
    let h = hale(
        dir.path(),
        vec![http_node("node_a", &a.url), http_node("node_b", &b.url)],
        false,
    )
    .await;
    let (_, job) = h
        .submit(one_step(
            "j-schema",
            "echo",
            json!({}),
            json!({"kind": "local"}),
        ))
        .await;
    assert_eq!(job["ok"], true, "{job}");
    assert_eq!(
        job["execution_path"],
        json!(["node_a (schema_validation_failed)", "node_b (success)"])
    );
    h.stop().await;
}

/// How many calls of `node` answered with the `error-503` fault.
async fn faults_503(node: &Node) -> u64 {
    reqwest::get(format!("{}/chaos/tools/stats", node.url))
        .await
        .unwrap()
        .json::<serde_json::Value>()
        .await
        .unwrap()["faults"]["error-503"]
        .as_u64()
        .unwrap_or(0)
}

#[tokio::test]
async fn a_node_with_failure_threshold_1_is_skipped_after_one_failure_while_the_default_needs_more()
{
    let dir = tempfile::tempdir().unwrap();
    let (strict, lenient, reg, backup) = (node().await, node().await, node().await, node().await);
    for n in [&strict, &lenient, &reg] {
        n.fault("error-503").await;
    }
    let mut strict_cfg = http_node("strict", &strict.url);
    strict_cfg.breaker.failure_threshold = Some(1);
    let h = hale(
        dir.path(),
        vec![
            strict_cfg,
            http_node("lenient", &lenient.url),
            http_node("backup", &backup.url),
        ],
        false,
    )
    .await;
    // A registration may carry the same `breaker` object; zero is refused.
    let client = reqwest::Client::new();
    let bad = client
        .post(format!("{}/nodes", h.url))
        .json(&json!({"name": "reg", "kind": "http", "url": reg.url,
                      "breaker": {"failure_threshold": 0}}))
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
    let body: serde_json::Value = bad.json().await.unwrap();
    assert!(
        body.to_string()
            .contains("breaker.failure_threshold must be at least 1"),
        "{body}"
    );
    let ok = client
        .post(format!("{}/nodes", h.url))
        .json(&json!({"name": "reg", "kind": "http", "url": reg.url,
                      "breaker": {"failure_threshold": 1, "timeout_seconds": 60}}))
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), 201);

    for (name, n) in [("strict", &strict), ("lenient", &lenient), ("reg", &reg)] {
        for i in 0..2 {
            let (_, j) = h
                .submit(one_step(
                    &format!("{name}-{i}"),
                    "echo",
                    json!({}),
                    json!({"kind": "failover_chain", "nodes": [name, "backup"]}),
                ))
                .await;
            assert_eq!(j["ok"], true, "the backup serves: {j}");
        }
        let (_, nodes) = h.get("/nodes").await;
        let view = nodes["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == name)
            .unwrap()
            .clone();
        if name == "lenient" {
            assert_eq!(faults_503(n).await, 2, "the default breaker tries again");
            assert_ne!(view["health"], "ejected", "{view}");
        } else {
            assert_eq!(
                faults_503(n).await,
                1,
                "{name}: one failure opened its breaker; the second job skipped it"
            );
            assert_eq!(view["health"], "ejected", "{view}");
        }
    }
    h.stop().await;
}
