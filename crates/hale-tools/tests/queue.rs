//! Store-and-forward: queued jobs survive a restart, are delivered once when a
//! node comes back, expire after their TTL, and can be cancelled.

mod common;

use common::*;
use hale_core::event::EventKind;
use serde_json::json;

fn queued_job(id: &str, ttl: u64) -> serde_json::Value {
    json!({"job_id": id, "steps": [{
        "step_id": "s1", "tool_name": "echo", "arguments": {"n": 1},
        "target": {"kind": "local"}, "timeout_ms": 2000,
        "retry": {"max_attempts": 1},
        "offline_behavior": {"mode": "queue", "ttl_seconds": ttl, "retry_interval_seconds": 1}
    }]})
}

#[tokio::test]
async fn queue_mode_all_nodes_offline_job_survives_a_restart_and_completes_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let addr = free_addr();
    let url = format!("http://{addr}");
    // No node is up: the job is queued.
    let h = hale(dir.path(), vec![http_node("n", &url)], false).await;
    let (status, job) = h.submit(queued_job("j-q", 120)).await;
    assert_eq!(status, 202, "{job}");
    assert_eq!(job["status"], "queued");
    let (_, listed) = h.get("/jobs?status=queued").await;
    assert_eq!(listed["jobs"][0]["job_id"], "j-q");
    assert!(h.event_kinds().await.contains(&EventKind::JobQueued));
    h.stop().await;

    // hale restarts (same store); the node comes up on its address.
    let node = node_at(addr).await;
    let a = hale(dir.path(), vec![http_node("n", &url)], false).await;
    let b = hale(dir.path(), vec![http_node("n", &url)], false).await;
    // Two deliverers race for the job (two queue loops, or two instances).
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let (ra, rb) = tokio::join!(a.tools.queue_tick(), b.tools.queue_tick());
    assert_eq!(ra.unwrap() + rb.unwrap(), 1, "exactly one delivered it");
    let job = a.wait_status("j-q", "completed").await;
    assert_eq!(job["ok"], true, "{job}");
    assert_eq!(job["result"], json!({"echo": {"n": 1}}));
    assert_eq!(job["degraded"], true);
    assert_eq!(node.calls("echo").await, 1);
    // Nothing is left to deliver.
    assert_eq!(a.tools.queue_tick().await.unwrap(), 0);
    assert_eq!(node.calls("echo").await, 1);
    assert!(a.event_kinds().await.contains(&EventKind::JobCompleted));
    b.stop().await;
    a.stop().await;
}

#[tokio::test]
async fn the_background_queue_delivers_when_a_node_comes_back() {
    let dir = tempfile::tempdir().unwrap();
    let addr = free_addr();
    let url = format!("http://{addr}");
    let h = hale(dir.path(), vec![http_node("n", &url)], true).await;
    let (_, job) = h.submit(queued_job("j-bg", 120)).await;
    assert_eq!(job["status"], "queued");
    let node = node_at(addr).await;
    let job = h.wait_status("j-bg", "completed").await;
    assert_eq!(job["ok"], true);
    assert_eq!(node.calls("echo").await, 1);
    h.stop().await;
}

#[tokio::test]
async fn a_queued_job_expires_after_its_ttl_and_emits_job_expired() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("http://{}", free_addr());
    let h = hale(dir.path(), vec![http_node("n", &url)], true).await;
    let (_, job) = h.submit(queued_job("j-ttl", 1)).await;
    assert_eq!(job["status"], "queued");
    let job = h.wait_status("j-ttl", "expired").await;
    assert_eq!(job["ok"], false);
    assert!(job["error"].as_str().unwrap().contains("ttl"), "{job}");
    assert!(h.event_kinds().await.contains(&EventKind::JobExpired));
    let (_, audit) = h.get("/jobs/audit").await;
    assert_eq!(audit["audit"][0]["status"], "expired");
    h.stop().await;
}

#[tokio::test]
async fn a_queued_job_can_be_cancelled_and_a_finished_one_cannot() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("http://{}", free_addr());
    let h = hale(dir.path(), vec![http_node("n", &url)], false).await;
    let (_, job) = h.submit(queued_job("j-cancel", 120)).await;
    assert_eq!(job["status"], "queued");
    let c = reqwest::Client::new();
    let r = c
        .delete(format!("{}/jobs/j-cancel", h.url))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let (_, job) = h.get("/jobs/j-cancel").await;
    assert_eq!(job["status"], "cancelled");
    let r = c
        .delete(format!("{}/jobs/j-cancel", h.url))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 409);
    assert!(h.event_kinds().await.contains(&EventKind::JobCancelled));
    h.stop().await;
}

#[tokio::test]
async fn fail_fast_with_every_node_offline_fails_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("http://{}", free_addr());
    let h = hale(dir.path(), vec![http_node("n", &url)], false).await;
    let mut job = queued_job("j-ff", 60);
    job["steps"][0]["offline_behavior"] = json!({"mode": "fail_fast"});
    let (status, job) = h.submit(job).await;
    assert_eq!(status, 200);
    assert_eq!(job["status"], "failed");
    h.stop().await;
}

#[tokio::test]
async fn a_registered_node_serves_jobs_until_its_lease_lapses() {
    let dir = tempfile::tempdir().unwrap();
    let n = node().await;
    let h = hale(dir.path(), vec![], false).await;
    let c = reqwest::Client::new();
    let r = c
        .post(format!("{}/nodes", h.url))
        .json(&json!({"name": "reg", "kind": "http", "url": n.url, "lease_seconds": 1}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let view: serde_json::Value = r.json().await.unwrap();
    assert_eq!(view["health"], "healthy");
    assert!(
        view["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["name"] == "unit_convert" && t["deterministic"] == true)
    );
    let (_, job) = h
        .submit(one_step(
            "j-reg",
            "echo",
            json!({}),
            json!({"kind": "local"}),
        ))
        .await;
    assert_eq!(job["ok"], true, "{job}");
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let (_, nodes) = h.get("/nodes").await;
    assert_eq!(nodes["nodes"][0]["health"], "offline");
    let (_, job) = h
        .submit(one_step(
            "j-reg2",
            "echo",
            json!({}),
            json!({"kind": "local"}),
        ))
        .await;
    assert_eq!(job["ok"], false);
    assert_eq!(job["steps"][0]["error"], "NoNodeAvailable");
    // A bad registration is a clear 400.
    let r = c
        .post(format!("{}/nodes", h.url))
        .json(&json!({"name": "x", "kind": "ftp", "url": "nope"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    h.stop().await;
}

/// Runs `job` until the node holds its call (the node hangs), then drops the
/// run and closes the store: what a process dying mid-job leaves behind.
async fn crash_mid_job(dir: &std::path::Path, node: &Node, job: serde_json::Value) {
    // Only `echo` hangs: the first step finishes, the second is in flight.
    let r = reqwest::Client::new()
        .post(format!("{}/chaos/tools/fault", node.url))
        .json(&json!({"spec": "hang", "tool": "echo"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    let h = hale(dir, vec![http_node("n", &node.url)], false).await;
    let req: hale_tools::model::JobRequest = serde_json::from_value(job).unwrap();
    let tools = h.tools.clone();
    let run = tokio::spawn(async move { tools.submit(req).await.map(|_| ()) });
    let mut held = false;
    for _ in 0..200 {
        let stats: serde_json::Value = reqwest::get(format!("{}/chaos/tools/stats", node.url))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if stats["faults"]["hang"].as_u64().unwrap_or(0) > 0 {
            held = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(held, "the node never received the call");
    run.abort();
    assert!(run.await.unwrap_err().is_cancelled());
    h.stop().await;
    let r = reqwest::Client::new()
        .post(format!("{}/chaos/tools/fault", node.url))
        .json(&json!({"spec": "ok", "tool": "echo"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
}

/// Restarts hale on `dir` and runs queue passes until `id` leaves `running`.
async fn restart_until_recovered(dir: &std::path::Path, node: &Node, id: &str) -> Hale {
    let h = hale(dir, vec![http_node("n", &node.url)], false).await;
    let (_, before) = h.get(&format!("/jobs/{id}")).await;
    assert_eq!(before["status"], "running", "the crash left it running");
    // The job's step timeouts must pass before it counts as interrupted
    // (a live peer sharing the store could still be running it).
    h.tools.set_interrupted_grace(std::time::Duration::ZERO);
    for _ in 0..200 {
        h.tools.queue_tick().await.unwrap();
        let (_, j) = h.get(&format!("/jobs/{id}")).await;
        if j["status"] != "running" {
            return h;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("job {id} was never recovered");
}

fn two_steps(id: &str, second: serde_json::Value) -> serde_json::Value {
    let mut s2 = json!({"step_id": "s2", "tool_name": "echo",
        "arguments": {"prev": "${steps.s1.result.value}"},
        "target": {"kind": "local"}, "timeout_ms": 1500, "retry": {"max_attempts": 1}});
    for (k, v) in second.as_object().unwrap() {
        s2[k] = v.clone();
    }
    json!({"job_id": id, "steps": [
        {"step_id": "s1", "tool_name": "unit_convert", "arguments": {"value": 1, "from": "km", "to": "m"},
         "target": {"kind": "local"}, "timeout_ms": 2000},
        s2
    ]})
}

#[tokio::test]
async fn a_job_left_running_by_a_crash_in_an_unsafe_step_fails_with_maybe_executed_and_is_not_rerun()
 {
    let dir = tempfile::tempdir().unwrap();
    let node = node().await;
    crash_mid_job(dir.path(), &node, two_steps("j-crash", json!({}))).await;
    let h = restart_until_recovered(dir.path(), &node, "j-crash").await;
    let (_, j) = h.get("/jobs/j-crash").await;
    assert_eq!(j["status"], "failed", "{j}");
    assert_eq!(j["ok"], false);
    assert_eq!(j["degraded"], true);
    assert_eq!(j["degraded_reason"], "interrupted by a restart");
    assert_eq!(j["maybe_executed"], true);
    assert_eq!(j["steps"][0]["step_id"], "s1");
    assert_eq!(
        j["steps"][0]["ok"], true,
        "the finished step keeps its result"
    );
    assert_eq!(j["steps"][1]["step_id"], "s2");
    assert_eq!(j["steps"][1]["maybe_executed"], true, "{j}");
    // Never re-run: more passes run nothing.
    for _ in 0..3 {
        h.tools.queue_tick().await.unwrap();
    }
    assert_eq!(h.get("/jobs/j-crash").await.1["status"], "failed");
    assert_eq!(node.calls("unit_convert").await, 1);
    assert_eq!(node.calls("echo").await, 0);
    let kinds = h.event_kinds().await;
    for k in [EventKind::JobStepFailed, EventKind::JobFailed] {
        assert!(kinds.contains(&k), "{k} missing from {kinds:?}");
    }
    let (_, audit) = h.get("/jobs/audit?degraded=true").await;
    assert_eq!(audit["audit"][0]["job_id"], "j-crash");
    h.stop().await;
}

#[tokio::test]
async fn a_job_left_running_by_a_crash_in_a_safe_step_is_requeued_and_resumes_at_that_step() {
    let dir = tempfile::tempdir().unwrap();
    let node = node().await;
    let job = two_steps("j-crash-safe", json!({"idempotency_key": "k-1"}));
    crash_mid_job(dir.path(), &node, job).await;
    let h = restart_until_recovered(dir.path(), &node, "j-crash-safe").await;
    let j = h.wait_status("j-crash-safe", "completed").await;
    assert_eq!(j["ok"], true, "{j}");
    assert_eq!(j["result"]["echo"]["prev"].as_f64(), Some(1000.0), "{j}");
    assert_eq!(j["degraded"], true);
    assert!(
        j["degraded_reason"]
            .as_str()
            .unwrap()
            .starts_with("interrupted by a restart"),
        "{j}"
    );
    // The finished step was not run again; the interrupted one ran once more.
    assert_eq!(node.calls("unit_convert").await, 1);
    assert_eq!(node.calls("echo").await, 1);
    let kinds = h.event_kinds().await;
    for k in [EventKind::JobQueued, EventKind::JobCompleted] {
        assert!(kinds.contains(&k), "{k} missing from {kinds:?}");
    }
    h.stop().await;
}
