//! The runtime's side of the nodes: one call or one listing on one node,
//! by the node's kind (plain HTTP or MCP), and the capability refresh that is
//! the node health check.

use crate::failure::CallFailure;
use crate::mcp_client;
use crate::nodes::{self, Node};
use crate::tools::Tools;
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;

/// Timeout of one health check (capability listing).
pub const CHECK_TIMEOUT: Duration = Duration::from_secs(3);

impl Tools {
    /// Calls one tool on one node (no retry; the runner decides).
    pub async fn call_node(
        &self,
        node: &Arc<Node>,
        tool: &str,
        args: &Value,
        timeout: Duration,
        idempotency_key: Option<&str>,
        job_id: &str,
    ) -> Result<Value, CallFailure> {
        match node.cfg.kind {
            hale_core::config::ToolNodeKind::Http => {
                nodes::http::call(
                    &self.http,
                    &node.cfg.url,
                    tool,
                    args,
                    timeout,
                    idempotency_key,
                    job_id,
                )
                .await
            }
            hale_core::config::ToolNodeKind::Mcp => {
                mcp_client::call(&self.http, node, tool, args, timeout, idempotency_key).await
            }
        }
    }

    /// Lists one node's tools (its health check).
    pub async fn list_node(&self, node: &Node) -> Result<Vec<nodes::ToolInfo>, CallFailure> {
        match node.cfg.kind {
            hale_core::config::ToolNodeKind::Http => {
                nodes::http::list(&self.http, &node.cfg.url, CHECK_TIMEOUT).await
            }
            hale_core::config::ToolNodeKind::Mcp => {
                mcp_client::list(&self.http, node, CHECK_TIMEOUT).await
            }
        }
    }

    /// Refreshes one node's capabilities; marks it offline when unreachable.
    pub async fn refresh(&self, node: &Node) {
        match self.list_node(node).await {
            Ok(list) => node.set_checked(Some(list)),
            Err(f) => {
                tracing::debug!(node = node.name(), error = %f.message, "tool node health check failed");
                node.set_checked(None);
            }
        }
    }

    /// Refreshes every node at once.
    pub async fn refresh_all(&self) {
        let nodes = self.registry.snapshot();
        futures::future::join_all(nodes.iter().map(|n| self.refresh(n))).await;
    }
}
