//! Calling MCP tool nodes: the official Rust SDK (`rmcp`) as a client over
//! Streamable HTTP, on hale's own reqwest client (ring TLS, one connection
//! pool).
//!
//! One MCP session per node, opened on first use and kept; a transport
//! failure or a timeout drops it, so the next call (or health check) opens a
//! fresh one — a frozen or restarted node never wedges later calls.
//! Failures are described in the classifier's terms: a session that cannot
//! be opened is unreachable and the call was never sent; a JSON-RPC error
//! carries its HTTP-like status in `data.status` when the node gives one
//! (hale-chaos does), else `-32602` invalid params → 400, `-32601` method
//! not found → 404, anything else → 500; a result with `isError` is a
//! tool-reported failure (Unknown: retried, not a node fault of a known
//! kind). The idempotency key travels in the request's `_meta` as
//! `hale/idempotencyKey`.

use crate::failure::{CallFailure, truncate};
use crate::nodes::{Node, ToolInfo};
use hale_core::classify::Transport;
use hale_core::tools::ToolObservation;
use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, ErrorCode, MetaObject, RequestMetaObject};
use rmcp::service::ServiceError;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;

pub use crate::nodes::Session;

/// The `_meta` key carrying a call's idempotency key.
pub const IDEMPOTENCY_META_KEY: &str = "hale/idempotencyKey";

async fn session(
    http: &reqwest::Client,
    node: &Node,
    timeout: Duration,
) -> Result<Arc<Session>, CallFailure> {
    let mut slot = node.mcp.lock().await;
    if let Some(s) = slot.as_ref() {
        return Ok(s.clone());
    }
    let transport = StreamableHttpClientTransport::with_client(
        http.clone(),
        StreamableHttpClientTransportConfig::with_uri(node.cfg.url.as_str()),
    );
    let s = match tokio::time::timeout(timeout, ().serve(transport)).await {
        Err(_) => {
            return Err(CallFailure::transport(
                Transport::HeadersTimeout,
                false,
                format!("MCP session not opened within {} ms", timeout.as_millis()),
            ));
        }
        Ok(Err(e)) => return Err(CallFailure::from_error(&e, false, true)),
        Ok(Ok(s)) => Arc::new(s),
    };
    *slot = Some(s.clone());
    Ok(s)
}

async fn drop_session(node: &Node) {
    node.mcp.lock().await.take();
}

fn of_service_error(e: &ServiceError) -> CallFailure {
    match e {
        ServiceError::McpError(d) => {
            let data = d.data.as_ref();
            let status = data
                .and_then(|v| v.get("status"))
                .and_then(Value::as_u64)
                .and_then(|s| u16::try_from(s).ok())
                .unwrap_or(match d.code {
                    ErrorCode::INVALID_PARAMS | ErrorCode::INVALID_REQUEST => 400,
                    ErrorCode::METHOD_NOT_FOUND => 404,
                    _ => 500,
                });
            let retry_after = data
                .and_then(|v| v.get("retry_after"))
                .and_then(Value::as_u64)
                .map(Duration::from_secs);
            CallFailure::status(status, truncate(&d.message), retry_after)
        }
        other => CallFailure::from_error(other, false, false),
    }
}

/// `tools/call` on an MCP node.
pub async fn call(
    http: &reqwest::Client,
    node: &Node,
    tool: &str,
    args: &Value,
    timeout: Duration,
    idempotency_key: Option<&str>,
) -> Result<Value, CallFailure> {
    let started = tokio::time::Instant::now();
    let s = session(http, node, timeout).await?;
    let mut params = CallToolRequestParams::new(tool.to_owned());
    params.arguments = match args {
        Value::Object(m) => Some(m.clone()),
        Value::Null => None,
        _ => {
            return Err(CallFailure::status(
                400,
                "MCP tool arguments must be a JSON object".into(),
                None,
            ));
        }
    };
    if let Some(k) = idempotency_key {
        let mut meta = serde_json::Map::new();
        meta.insert(IDEMPOTENCY_META_KEY.into(), Value::String(k.to_owned()));
        params.meta = Some(RequestMetaObject(MetaObject(meta)));
    }
    let left = timeout.saturating_sub(started.elapsed());
    let res = match tokio::time::timeout(left, s.call_tool(params)).await {
        Err(_) => {
            drop_session(node).await;
            return Err(CallFailure::timeout(timeout));
        }
        Ok(Err(e)) => {
            let f = of_service_error(&e);
            if !matches!(e, ServiceError::McpError(_)) {
                drop_session(node).await;
            }
            return Err(f);
        }
        Ok(Ok(r)) => r,
    };
    let text: String = res
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join("\n");
    if res.is_error == Some(true) {
        return Err(CallFailure {
            obs: ToolObservation {
                status: None,
                transport: Some(Transport::Other),
                output_invalid: false,
            },
            sent: true,
            retry_after: None,
            message: truncate(&format!("the tool reported an error: {text}")),
        });
    }
    Ok(match res.structured_content {
        Some(v) => v,
        None => serde_json::from_str(&text).unwrap_or(Value::String(text)),
    })
}

/// `tools/list` on an MCP node (its health check).
pub async fn list(
    http: &reqwest::Client,
    node: &Node,
    timeout: Duration,
) -> Result<Vec<ToolInfo>, CallFailure> {
    let started = tokio::time::Instant::now();
    let s = session(http, node, timeout).await?;
    let left = timeout.saturating_sub(started.elapsed());
    let tools = match tokio::time::timeout(left, s.list_all_tools()).await {
        Err(_) => {
            drop_session(node).await;
            return Err(CallFailure::timeout(timeout));
        }
        Ok(Err(e)) => {
            drop_session(node).await;
            return Err(of_service_error(&e));
        }
        Ok(Ok(t)) => t,
    };
    Ok(tools
        .into_iter()
        .map(|t| ToolInfo {
            name: t.name.to_string(),
            description: t.description.map(|d| d.to_string()),
            input_schema: Value::Object((*t.input_schema).clone()),
            output_schema: t.output_schema.map(|o| Value::Object((*o).clone())),
            deterministic: t
                .annotations
                .and_then(|a| a.idempotent_hint)
                .unwrap_or(false),
        })
        .collect())
}
