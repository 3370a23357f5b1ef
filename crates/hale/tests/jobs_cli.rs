//! Tool jobs through the real binaries: two `hale chaos` tool nodes (one
//! HTTP, one MCP), `hale serve` with `tool_nodes:`, and the CLI —
//! `hale jobs submit -`, `show`, `list --status`, `audit --degraded`,
//! `hale nodes list`.

mod common;

use common::*;
use serde_json::{Value, json};
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

fn cli(args: &[&str], stdin: Option<&str>) -> (bool, String, String) {
    let mut child = Command::new(hale_bin())
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("hale runs");
    if let Some(s) = stdin {
        child.stdin.take().unwrap().write_all(s.as_bytes()).unwrap();
    }
    drop(child.stdin.take());
    let out = child.wait_with_output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_cli_submits_through_serve_and_a_down_http_node_fails_over_to_an_mcp_node() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = tempfile::tempdir().unwrap();
    let http = reqwest::Client::new();
    let mut nodes = Vec::new();
    let mut urls = Vec::new();
    for name in ["a", "b"] {
        let listen = format!("127.0.0.1:{}", free_port());
        let mut p = Proc::spawn(&["chaos", "--listen", &listen], dir.path(), name);
        let url = format!("http://{listen}");
        wait_ready(
            &http,
            &format!("{url}/tools"),
            &mut p,
            Duration::from_secs(20),
        )
        .await;
        nodes.push(p);
        urls.push(url);
    }
    let r = http
        .post(format!("{}/chaos/tools/fault", urls[0]))
        .json(&json!({"spec": "down:secs=120"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    let port = free_port();
    let yaml = format!(
        "\
listen: 127.0.0.1:{port}
data_dir: {data}
providers:
  - {{name: p, kind: openai, base_url: {a}/v1, default_model: m}}
tool_nodes:
  - {{name: \"local:node_a\", kind: http, url: \"{a}\"}}
  - {{name: \"local:node_b\", kind: mcp, url: \"{b}/mcp\"}}
",
        data = dir.path().join("data").display(),
        a = urls[0],
        b = urls[1],
    );
    let cfg = dir.path().join("hale.yaml");
    std::fs::write(&cfg, yaml).unwrap();
    let cfg_arg = cfg.to_string_lossy().into_owned();
    let mut serve = Proc::spawn(&["serve", "--config", &cfg_arg], dir.path(), "serve");
    let base = format!("http://127.0.0.1:{port}");
    wait_ready(
        &http,
        &format!("{base}/ready"),
        &mut serve,
        Duration::from_secs(30),
    )
    .await;
    // Capabilities are listed at start; wait until both nodes show tools.
    for i in 0.. {
        let v: Value = hale_testkit::get_json(&http, &format!("{base}/nodes")).await;
        let ready = v["nodes"].as_array().is_some_and(|n| {
            n.len() == 2 && n.iter().all(|n| !n["tools"].as_array().unwrap().is_empty())
        });
        if ready {
            break;
        }
        assert!(
            i < 200,
            "nodes never listed their tools: {v}\n{}",
            serve.stderr()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let job = json!({"job_id": "cli-1", "steps": [{
        "step_id": "convert", "tool_name": "unit_convert",
        "arguments": {"value": 3, "from": "ft", "to": "in"},
        "target": {"kind": "local", "failover": true}, "timeout_ms": 5000
    }]})
    .to_string();
    let url_arg = ["--url", base.as_str()];
    let (ok, out, err) = cli(
        &[&["jobs", "submit", "-"][..], &url_arg].concat(),
        Some(&job),
    );
    assert!(ok, "{out}\n{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["ok"], true, "{v}");
    assert_eq!(v["result"], json!({"value": 36.0, "unit": "in"}));
    assert_eq!(v["degraded"], true);
    assert_eq!(
        v["execution_path"],
        json!(["local:node_a (capacity_exceeded)", "local:node_b (success)"])
    );

    // The same figures as Prometheus gauges, labelled by node and by tool.
    let text = hale_testkit::get_text(&http, &format!("{base}/metrics")).await;
    let gauge = |prefix: &str| -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(prefix))
            .unwrap_or_else(|| panic!("no {prefix} in /metrics:\n{text}"))
            .trim()
            .parse()
            .unwrap()
    };
    assert_eq!(
        gauge(r#"hale_failover_rate{node="local:node_a",tool=""}"#),
        1.0
    );
    assert_eq!(
        gauge(r#"hale_failover_rate{node="local:node_b",tool=""}"#),
        0.0
    );
    assert_eq!(
        gauge(r#"hale_node_availability{node="local:node_b",tool=""}"#),
        1.0
    );
    assert!(gauge(r#"hale_node_availability{node="local:node_a",tool=""}"#) < 1.0);
    assert_eq!(
        gauge(r#"hale_failover_rate{node="",tool="unit_convert"}"#),
        1.0
    );
    assert_eq!(
        gauge(r#"hale_degraded_percentage{node="",tool="unit_convert"}"#),
        100.0
    );

    let (ok, out, _) = cli(&[&["jobs", "show", "cli-1"][..], &url_arg].concat(), None);
    assert!(ok);
    assert_eq!(
        serde_json::from_str::<Value>(&out).unwrap()["status"],
        "completed"
    );

    let (ok, out, _) = cli(
        &[&["jobs", "list", "--status", "completed"][..], &url_arg].concat(),
        None,
    );
    assert!(ok);
    assert!(out.starts_with("cli-1 completed (degraded)"), "{out}");

    let (ok, out, _) = cli(
        &[&["jobs", "audit", "--degraded"][..], &url_arg].concat(),
        None,
    );
    assert!(ok);
    let first: Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    assert_eq!(first["job_id"], "cli-1");

    let (ok, out, _) = cli(&[&["nodes", "list"][..], &url_arg].concat(), None);
    assert!(ok);
    assert!(out.contains("local:node_a http"), "{out}");
    assert!(out.contains("local:node_b mcp healthy"), "{out}");

    // A bad job is refused with the API's message and a failing exit code.
    let (ok, _, err) = cli(
        &[&["jobs", "submit", "-"][..], &url_arg].concat(),
        Some(r#"{"job_id": "x", "steps": []}"#),
    );
    assert!(!ok);
    assert!(err.contains("steps must hold"), "{err}");
    drop(serve);
    drop(nodes);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_key_lists_tools_over_mcp_but_not_the_jobs_api_and_no_key_is_401() {
    use rmcp::ServiceExt;
    use rmcp::transport::StreamableHttpClientTransport;
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = tempfile::tempdir().unwrap();
    let http = reqwest::Client::new();
    let listen = format!("127.0.0.1:{}", free_port());
    let node_url = format!("http://{listen}");
    let mut node = Proc::spawn(&["chaos", "--listen", &listen], dir.path(), "node");
    wait_ready(
        &http,
        &format!("{node_url}/tools"),
        &mut node,
        Duration::from_secs(20),
    )
    .await;
    let port = free_port();
    let yaml = format!(
        "\
listen: 127.0.0.1:{port}
data_dir: {data}
providers:
  - {{name: p, kind: openai, base_url: {node_url}/v1, default_model: m}}
agents:
  coder: {{}}
auth:
  keys:
    - {{name: ops, token_env: HALE_T_ADMIN, scope: admin}}
    - {{name: coder, token_env: HALE_T_CODER, agents: [coder]}}
tool_nodes:
  - {{name: n1, kind: http, url: \"{node_url}\"}}
",
        data = dir.path().join("data").display(),
    );
    let cfg = dir.path().join("hale.yaml");
    std::fs::write(&cfg, yaml).unwrap();
    let cfg_arg = cfg.to_string_lossy().into_owned();
    let mut serve = Proc::spawn_env(
        &["serve", "--config", &cfg_arg],
        dir.path(),
        "serve",
        &[
            ("HALE_T_ADMIN", "admin-secret"),
            ("HALE_T_CODER", "coder-secret"),
        ],
    );
    let base = format!("http://127.0.0.1:{port}");
    wait_ready(
        &http,
        &format!("{base}/live"),
        &mut serve,
        Duration::from_secs(30),
    )
    .await;
    // No key: 401 before any MCP handling.
    let r = http
        .post(format!("{base}/mcp"))
        .header("accept", "application/json, text/event-stream")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    // The agent key may not use the admin jobs API.
    let r = http
        .get(format!("{base}/jobs"))
        .bearer_auth("coder-secret")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    // The agent key lists the node's tools over /mcp.
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert("authorization", "Bearer coder-secret".parse().unwrap());
    let client = reqwest::Client::builder()
        .default_headers(headers)
        .build()
        .unwrap();
    let transport = StreamableHttpClientTransport::with_client(
        client,
        StreamableHttpClientTransportConfig::with_uri(format!("{base}/mcp")),
    );
    let session = ().serve(transport).await.expect("MCP session with an agent key");
    let mut names = Vec::new();
    for _ in 0..200 {
        names = session
            .list_all_tools()
            .await
            .unwrap()
            .iter()
            .map(|t| t.name.to_string())
            .collect();
        if !names.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        names.contains(&"echo".to_owned()),
        "{names:?}\n{}",
        serve.stderr()
    );
    let _ = session.cancel().await;
    drop(serve);
    drop(node);
}
