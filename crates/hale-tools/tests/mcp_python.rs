//! The official MCP Python SDK (`mcp` on PyPI) as a client of hale's `/mcp`:
//! it lists the tools and calls one through a failover (issue 10).
//!
//! Python comes from `HALE_PYTHON`, else `.venv/bin/python` at the workspace
//! root (scripts/test.sh installs `mcp` there). Without it the test says so
//! and passes, except under `CI=true`, where it fails loudly.

mod common;

use common::*;
use hale_testkit::python_or_skip;
use serde_json::{Value, json};
use std::path::PathBuf;
use std::process::Command;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_mcp_sdk_lists_and_calls_tools_through_a_failover() {
    let Some(py) = python_or_skip("from mcp import Client", "mcp") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (node().await, node().await);
    let h = hale(
        dir.path(),
        vec![http_node("node_a", &a.url), http_node("node_b", &b.url)],
        false,
    )
    .await;
    a.fault("down:secs=60").await;
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/py/mcp_front.py");
    let url = format!("{}/mcp", h.url);
    let out = tokio::task::spawn_blocking(move || {
        Command::new(py).arg(script).arg(url).output().unwrap()
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "python failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)));
    assert_eq!(v["tools"], json!(["echo", "flaky", "slow", "unit_convert"]));
    assert_eq!(v["ok"]["is_error"], false, "{v}");
    assert_eq!(v["ok"]["structured"], json!({"value": 1.0, "unit": "m"}));
    assert_eq!(v["ok"]["meta"]["hale/degraded"], true);
    assert_eq!(
        v["ok"]["meta"]["hale/execution_path"],
        json!(["node_a (capacity_exceeded)", "node_b (success)"])
    );
    assert_eq!(v["bad"]["is_error"], true, "{v}");
    assert_eq!(b.calls("unit_convert").await, 2);
    h.stop().await;
}
