//! The official MCP Python SDK (`mcp` on PyPI) as a client of hale's `/mcp`:
//! it lists the tools and calls one through a failover (issue 10).
//!
//! Python comes from `HALE_PYTHON`, else `.venv/bin/python` at the workspace
//! root (scripts/test.sh installs `mcp` there). Without it the test says so
//! and passes, except under `CI=true`, where it fails loudly.

mod common;

use common::*;
use serde_json::{Value, json};
use std::path::PathBuf;
use std::process::Command;

fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// A Python that can import `mcp`, or why there is none.
fn python() -> Result<PathBuf, String> {
    let candidate = match std::env::var_os("HALE_PYTHON") {
        Some(p) => PathBuf::from(p),
        None => workspace_root().join(".venv/bin/python"),
    };
    let ok = Command::new(&candidate)
        .args(["-c", "from mcp import Client"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if ok {
        Ok(candidate)
    } else {
        Err(format!(
            "no Python with the `mcp` SDK at {} (set HALE_PYTHON, or run scripts/test.sh, or \
             `python3 -m venv .venv && .venv/bin/pip install mcp`)",
            candidate.display()
        ))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_mcp_sdk_lists_and_calls_tools_through_a_failover() {
    let py = match python() {
        Ok(p) => p,
        Err(why) if std::env::var("CI").as_deref() == Ok("true") => panic!("CI=true and {why}"),
        Err(why) => {
            eprintln!("skipped: {why}");
            return;
        }
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
