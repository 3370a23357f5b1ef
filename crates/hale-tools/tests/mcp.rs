//! MCP tool nodes (hale as an rmcp client over Streamable HTTP) and hale's
//! own MCP front at `/mcp`, against real chaos nodes on loopback.

mod common;

use common::*;
use hale_core::config::{ToolNodeConfig, ToolNodeKind};
use serde_json::json;

fn mcp_node(name: &str, n: &Node) -> ToolNodeConfig {
    ToolNodeConfig {
        name: name.to_owned(),
        kind: ToolNodeKind::Mcp,
        url: format!("{}/mcp", n.url),
        deterministic: Vec::new(),
        metadata: Default::default(),
        breaker: Default::default(),
    }
}

#[tokio::test]
async fn mcp_nodes_list_their_tools_and_a_down_primary_fails_over_to_the_secondary() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (node().await, node().await);
    let h = hale(
        dir.path(),
        vec![mcp_node("mcp_a", &a), mcp_node("mcp_b", &b)],
        false,
    )
    .await;
    let (_, nodes) = h.get("/nodes").await;
    let tools: Vec<&str> = nodes["nodes"][0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        tools,
        vec!["echo", "slow", "unit_convert", "flaky"],
        "{nodes}"
    );
    assert_eq!(nodes["nodes"][0]["tools"][2]["deterministic"], true);
    a.fault("down:secs=60").await;
    let (_, job) = h
        .submit(one_step(
            "m-chain",
            "unit_convert",
            json!({"value": 1, "from": "in", "to": "cm"}),
            json!({"kind": "failover_chain", "nodes": ["mcp_a", "mcp_b"]}),
        ))
        .await;
    assert_eq!(job["ok"], true, "{job}");
    assert_eq!(job["result"], json!({"value": 2.54, "unit": "cm"}));
    assert_eq!(job["degraded"], true);
    assert_eq!(
        job["execution_path"],
        json!(["mcp_a (capacity_exceeded)", "mcp_b (success)"])
    );
    assert_eq!(job["verified"], true);
    h.stop().await;
}

#[tokio::test]
async fn an_mcp_invalid_params_error_is_not_retried_or_failed_over() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (node().await, node().await);
    let h = hale(
        dir.path(),
        vec![mcp_node("mcp_a", &a), mcp_node("mcp_b", &b)],
        false,
    )
    .await;
    let (_, job) = h
        .submit(one_step(
            "m-400",
            "unit_convert",
            json!({"value": 1, "from": "cm", "to": "parsec"}),
            json!({"kind": "local"}),
        ))
        .await;
    assert_eq!(job["ok"], false);
    assert_eq!(job["steps"][0]["error"], "InvalidInput", "{job}");
    assert_eq!(
        a.calls("unit_convert").await + b.calls("unit_convert").await,
        1
    );
    h.stop().await;
}

#[tokio::test]
async fn an_unreachable_mcp_node_is_offline_and_a_call_moves_to_an_http_node() {
    let dir = tempfile::tempdir().unwrap();
    let b = node().await;
    let dead = ToolNodeConfig {
        name: "dead".into(),
        kind: ToolNodeKind::Mcp,
        url: format!("http://{}/mcp", free_addr()),
        deterministic: Vec::new(),
        metadata: Default::default(),
        breaker: Default::default(),
    };
    let h = hale(dir.path(), vec![dead, http_node("http_b", &b.url)], false).await;
    let (_, nodes) = h.get("/nodes").await;
    assert_eq!(nodes["nodes"][0]["health"], "offline");
    let (_, job) = h
        .submit(one_step(
            "m-dead",
            "echo",
            json!({"a": 1}),
            json!({"kind": "failover_chain", "nodes": ["dead", "http_b"]}),
        ))
        .await;
    assert_eq!(job["ok"], true, "{job}");
    // Issue 28: the skipped primary is evidence, and the job degraded.
    assert_eq!(
        job["execution_path"],
        json!(["dead (skipped: offline)", "http_b (success)"])
    );
    assert_eq!(job["degraded"], true);
    h.stop().await;
}

#[tokio::test]
async fn the_mcp_front_lists_the_union_and_calls_fail_over_with_evidence_in_meta() {
    use rmcp::ServiceExt;
    use rmcp::model::CallToolRequestParams;
    use rmcp::transport::StreamableHttpClientTransport;
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (node().await, node().await);
    let h = hale(
        dir.path(),
        vec![http_node("node_a", &a.url), mcp_node("node_b", &b)],
        false,
    )
    .await;
    a.fault("error-503").await;
    let transport = StreamableHttpClientTransport::with_client(
        reqwest::Client::new(),
        StreamableHttpClientTransportConfig::with_uri(format!("{}/mcp", h.url)),
    );
    let client = ().serve(transport).await.expect("MCP session with hale");
    let tools = client.list_all_tools().await.unwrap();
    let names: Vec<String> = tools.iter().map(|t| t.name.to_string()).collect();
    assert_eq!(
        names,
        vec!["echo", "flaky", "slow", "unit_convert"],
        "one entry per replicated tool"
    );
    let mut params = CallToolRequestParams::new("unit_convert");
    params.arguments = json!({"value": 12, "from": "in", "to": "ft"})
        .as_object()
        .cloned();
    let res = client.call_tool(params).await.unwrap();
    assert_eq!(res.is_error, Some(false));
    assert_eq!(
        res.structured_content,
        Some(json!({"value": 1.0, "unit": "ft"}))
    );
    let meta = res.meta.expect("hale evidence in _meta").0;
    assert_eq!(meta["hale/degraded"], true);
    assert_eq!(
        meta["hale/execution_path"],
        json!(["node_a (capacity_exceeded)", "node_b (success)"])
    );
    // A failed call is a tool error the agent can read, not a protocol error.
    let mut bad = CallToolRequestParams::new("unit_convert");
    bad.arguments = json!({"value": 1, "from": "in", "to": "parsec"})
        .as_object()
        .cloned();
    let res = client.call_tool(bad).await.unwrap();
    assert_eq!(res.is_error, Some(true));
    // The job is in hale's audit log like any other.
    let (_, audit) = h.get("/jobs/audit?degraded=true").await;
    assert!(
        audit["audit"][0]["job_id"]
            .as_str()
            .unwrap()
            .starts_with("mcp-"),
        "{audit}"
    );
    let _ = client.cancel().await;
    h.stop().await;
}

#[tokio::test]
async fn tools_with_clashing_schemas_are_listed_per_node_and_called_on_that_node() {
    use rmcp::ServiceExt;
    use rmcp::model::CallToolRequestParams;
    use rmcp::transport::StreamableHttpClientTransport;
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
    // A plain HTTP node whose `echo` takes a different input schema.
    let app = axum::Router::new()
        .route(
            "/tools",
            axum::routing::get(|| async {
                axum::Json(json!({"tools": [{"name": "echo", "input_schema":
                    {"type": "object", "required": ["text"]}}]}))
            }),
        )
        .route(
            "/tools/echo",
            axum::routing::post(|| async { axum::Json(json!({"from": "other"})) }),
        );
    let other_url = hale_testkit::serve(app).await;
    let dir = tempfile::tempdir().unwrap();
    let a = node().await;
    let h = hale(
        dir.path(),
        vec![http_node("chaos", &a.url), http_node("other", &other_url)],
        false,
    )
    .await;
    let transport = StreamableHttpClientTransport::with_client(
        reqwest::Client::new(),
        StreamableHttpClientTransportConfig::with_uri(format!("{}/mcp", h.url)),
    );
    let client = ().serve(transport).await.unwrap();
    let names: Vec<String> = client
        .list_all_tools()
        .await
        .unwrap()
        .iter()
        .map(|t| t.name.to_string())
        .collect();
    assert!(names.contains(&"chaos__echo".to_owned()), "{names:?}");
    assert!(names.contains(&"other__echo".to_owned()), "{names:?}");
    assert!(!names.contains(&"echo".to_owned()), "{names:?}");
    let res = client
        .call_tool(CallToolRequestParams::new("other__echo"))
        .await
        .unwrap();
    assert_eq!(res.structured_content, Some(json!({"from": "other"})));
    let _ = client.cancel().await;
    h.stop().await;
}

/// An rmcp client of hale's `/mcp` sending `headers` on every request.
async fn mcp_client(
    url: &str,
    headers: &[(&str, &str)],
) -> rmcp::service::RunningService<rmcp::RoleClient, ()> {
    use rmcp::ServiceExt;
    use rmcp::transport::StreamableHttpClientTransport;
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
    let mut map = reqwest::header::HeaderMap::new();
    for (k, v) in headers {
        map.insert(
            reqwest::header::HeaderName::from_bytes(k.as_bytes()).unwrap(),
            v.parse().unwrap(),
        );
    }
    let http = reqwest::Client::builder()
        .default_headers(map)
        .build()
        .unwrap();
    let transport = StreamableHttpClientTransport::with_client(
        http,
        StreamableHttpClientTransportConfig::with_uri(format!("{url}/mcp")),
    );
    ().serve(transport).await.expect("MCP session with hale")
}

#[tokio::test]
async fn mcp_calls_past_a_tool_cap_are_refused_as_safety_limit_without_calling_a_node() {
    use rmcp::model::CallToolRequestParams;
    let dir = tempfile::tempdir().unwrap();
    let a = node().await;
    let h = hale_with(dir.path(), vec![http_node("node_a", &a.url)], false, |c| {
        c.guard.tool_caps.insert("echo".into(), 2);
    })
    .await;
    let headers = [("x-hale-agent", "coder"), ("x-hale-task", "fix-bug-7")];
    let client = mcp_client(&h.url, &headers).await;
    for _ in 0..2 {
        let res = client
            .call_tool(CallToolRequestParams::new("echo"))
            .await
            .unwrap();
        assert_eq!(res.is_error, Some(false));
    }
    let err = client
        .call_tool(CallToolRequestParams::new("echo"))
        .await
        .expect_err("the third call is past the cap");
    assert!(err.to_string().contains("safety_limit"), "{err}");
    assert_eq!(a.calls("echo").await, 2, "the refused call reached no node");
    // Another task of the same agent has its own count; uncapped tools are free.
    let other = mcp_client(&h.url, &[("x-hale-agent", "coder"), ("x-hale-task", "t2")]).await;
    let res = other
        .call_tool(CallToolRequestParams::new("echo"))
        .await
        .unwrap();
    assert_eq!(res.is_error, Some(false));
    // The agent and task are on the job, in the audit log.
    let (_, audit) = h.get("/jobs/audit").await;
    let rows = audit["audit"].as_array().unwrap();
    assert_eq!(rows.len(), 3, "{audit}");
    assert!(
        rows.iter()
            .any(|r| r.to_string().contains(r#""agent":"coder""#)
                && r.to_string().contains(r#""task":"fix-bug-7""#)),
        "{audit}"
    );
    let _ = client.cancel().await;
    let _ = other.cancel().await;
    h.stop().await;
}

#[tokio::test]
async fn a_bad_agent_header_on_mcp_is_an_error_naming_the_header() {
    use rmcp::model::CallToolRequestParams;
    let dir = tempfile::tempdir().unwrap();
    let a = node().await;
    let h = hale(dir.path(), vec![http_node("node_a", &a.url)], false).await;
    let long = "a".repeat(hale_core::ids::MAX_LABEL_BYTES + 1);
    let client = mcp_client(&h.url, &[("x-hale-agent", long.as_str())]).await;
    let err = client
        .call_tool(CallToolRequestParams::new("echo"))
        .await
        .expect_err("a bad agent header is refused");
    assert!(err.to_string().contains("x-hale-agent"), "{err}");
    assert_eq!(a.calls("echo").await, 0);
    let _ = client.cancel().await;
    h.stop().await;
}
