//! A tool node frozen with SIGSTOP in the middle of a call: the attempt times
//! out and another node serves the step within the step's timeout.
//!
//! The frozen node must be its own process, so this test binary starts
//! itself again running only the ignored helper `chaos_node_process`, which
//! serves a chaos tool node and prints its address.

mod common;

use common::*;
use serde_json::json;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

const NODE_ENV: &str = "HALE_TEST_CHAOS_NODE";

/// Not a test: the child process of the SIGSTOP test (run with `--ignored`).
#[test]
#[ignore = "helper process of a_node_frozen_by_sigstop_mid_call_times_out_and_another_node_serves"]
fn chaos_node_process() {
    if std::env::var_os(NODE_ENV).is_none() {
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let n = node().await;
        println!("{}", n.url);
        std::future::pending::<()>().await;
    });
}

struct Frozen(Child);

impl Drop for Frozen {
    fn drop(&mut self) {
        let pid = self.0.id().to_string();
        let _ = Command::new("kill").args(["-CONT", &pid]).status();
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn signal(child: &Child, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, &child.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill {sig}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_frozen_by_sigstop_mid_call_times_out_and_another_node_serves() {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "chaos_node_process",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(NODE_ENV, "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let url = tokio::task::spawn_blocking(move || {
        BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            // The harness prints `test chaos_node_process ... ` before it.
            .find_map(|l| l.find("http://").map(|i| l[i..].trim().to_owned()))
            .expect("the node prints its address")
    })
    .await
    .unwrap();
    let frozen = Frozen(child);
    let b = node().await;
    let dir = tempfile::tempdir().unwrap();
    let h = hale(
        dir.path(),
        vec![http_node("node_a", &url), http_node("node_b", &b.url)],
        false,
    )
    .await;
    // `slow` is not deterministic: the step carries an idempotency key, so
    // re-running it elsewhere after a timeout is safe.
    let job = json!({"job_id": "j-frozen", "steps": [{
        "step_id": "s1", "tool_name": "slow", "arguments": {"ms": 1000},
        "target": {"kind": "local", "failover": true}, "timeout_ms": 6000,
        "idempotency_key": "frozen-1"
    }]});
    let url_job = h.url.clone();
    let submitted = tokio::spawn(async move {
        reqwest::Client::new()
            .post(format!("{url_job}/jobs"))
            .json(&job)
            .send()
            .await
            .unwrap()
            .json::<serde_json::Value>()
            .await
            .unwrap()
    });
    // Freeze node_a once the call is running on it.
    let stats = format!("{url}/chaos/tools/stats");
    for i in 0.. {
        let v: serde_json::Value = reqwest::get(&stats).await.unwrap().json().await.unwrap();
        if v["calls"]["slow"] == 1 {
            break;
        }
        assert!(i < 500, "the call never reached node_a");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    signal(&frozen.0, "-STOP");
    let job = submitted.await.unwrap();
    assert_eq!(job["ok"], true, "{job}");
    assert_eq!(
        job["execution_path"],
        json!(["node_a (timeout)", "node_b (success)"])
    );
    assert_eq!(job["degraded"], true);
    let total: u64 = job["timeline"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["duration_ms"].as_u64().unwrap())
        .sum();
    assert!(total < 6000, "within the step's timeout: {job}");
    assert_eq!(b.calls("slow").await, 1);
    drop(frozen);
    h.stop().await;
}
