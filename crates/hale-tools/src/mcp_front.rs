//! hale as an MCP server at `/mcp` (Streamable HTTP, the `rmcp` server):
//! an agent's MCP client sees the union of the nodes' tools, and every
//! `tools/call` runs as a one-step job — target `local` with failover, the
//! default step retry — so an agent that speaks MCP gets the healing
//! without changing its code.
//!
//! The prefix rule for name clashes ([`hale_core::tools::front_name`]): a
//! tool keeps its plain name while every node listing it agrees on its
//! input schema (they are replicas); when nodes list one name with
//! different input schemas, each variant is listed as `{node}__{tool}` and
//! a call to that name runs on that node only (a one-node failover chain).
//!
//! Only nodes in rotation (healthy or degraded) contribute to `tools/list`.
//! A call's evidence (job id, degraded, execution path) is in the result's
//! `_meta` under `hale/…`; a failed job is a tool error result (`isError`)
//! whose text names the failure, so the agent's model can read it.
//!
//! Agent and task: `X-Hale-Agent` and `X-Hale-Task` work as on the chat
//! routes (checked with `hale_core::ids::valid_label`; a bad one is an
//! invalid-params error). The agent defaults to the key's first agent; an
//! agent-scoped key (its scope is the `KeyScope` the gateway's auth layer
//! puts in the request's extensions) may act only as its agents. The task
//! defaults to the MCP session. Both are recorded on the job. A call of a
//! tool with a cap in `guard.tool_caps` counts against it per (agent,
//! task, tool); a call past the cap is refused with an error naming
//! `safety_limit` before any node is called. The count is hale-tools' own:
//! the chat guard counts the tool calls a model asks for, this one the
//! calls made through `/mcp`.

use crate::Tools;
use crate::model::{JobRequest, StepRequest, Target};
use hale_core::config::{DEFAULT_AGENT, KeyScope};
use hale_core::tools::{front_name, split_front_name};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorCode,
    ListToolsResult, MetaObject, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
    ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

/// One MCP session's handler; every session shares the runtime.
#[derive(Clone)]
pub struct Front {
    tools: Arc<Tools>,
}

/// Header naming the agent (as on the chat routes).
pub const AGENT_HEADER: &str = "x-hale-agent";
/// Header naming the task (as on the chat routes).
pub const TASK_HEADER: &str = "x-hale-task";

/// An agent or task header: absent or blank is `None`; a bad one is an
/// invalid-params error naming the header.
fn label_header(
    parts: Option<&axum::http::request::Parts>,
    name: &str,
) -> Result<Option<String>, ErrorData> {
    let Some(v) = parts.and_then(|p| p.headers.get(name)) else {
        return Ok(None);
    };
    let bad = |why: &str| {
        ErrorData::new(
            ErrorCode::INVALID_PARAMS,
            format!("header {name} {why}"),
            None,
        )
    };
    let s = std::str::from_utf8(v.as_bytes()).map_err(|_| bad("is not UTF-8"))?;
    hale_core::ids::valid_label(s).map_err(|e| bad(&e.to_string()))?;
    let s = s.trim_matches(' ');
    Ok((!s.is_empty()).then(|| s.to_owned()))
}

/// The agent and task of a call (see the module doc).
fn identity(parts: Option<&axum::http::request::Parts>) -> Result<(String, String), ErrorData> {
    let agent = label_header(parts, AGENT_HEADER)?;
    let task = label_header(parts, TASK_HEADER)?;
    let scope = parts.and_then(|p| p.extensions.get::<KeyScope>());
    let allowed = match scope {
        Some(KeyScope::Agents(list)) => Some(list.as_slice()),
        Some(KeyScope::Admin) | None => None,
    };
    let agent = agent
        .or_else(|| allowed.and_then(|l| l.first().cloned()))
        .unwrap_or_else(|| DEFAULT_AGENT.to_owned());
    if let Some(list) = allowed
        && !list.iter().any(|a| a == &agent)
    {
        return Err(ErrorData::new(
            ErrorCode::INVALID_REQUEST,
            format!("forbidden: this key may not act as agent {agent}"),
            Some(json!({"type": "forbidden"})),
        ));
    }
    let task = task
        .or_else(|| {
            parts
                .and_then(|p| p.headers.get("mcp-session-id"))
                .and_then(|v| v.to_str().ok())
                .map(|s| format!("mcp-session:{s}"))
        })
        .unwrap_or_default();
    Ok((agent, task))
}

fn object(v: &Value) -> Arc<serde_json::Map<String, Value>> {
    Arc::new(v.as_object().cloned().unwrap_or_default())
}

impl Front {
    /// The union of the tools of nodes in rotation, under the prefix rule.
    fn listing(&self) -> Vec<Tool> {
        let now = Instant::now();
        let now_ms = crate::wall_ms();
        // name → (node, info) for every node offering it
        let mut by_name: BTreeMap<String, Vec<(String, crate::nodes::ToolInfo)>> = BTreeMap::new();
        for n in self.tools.registry.snapshot() {
            if !n.health(now, now_ms).in_rotation() {
                continue;
            }
            for t in n.tools() {
                by_name
                    .entry(t.name.clone())
                    .or_default()
                    .push((n.name().to_owned(), t));
            }
        }
        let mut out = Vec::new();
        for (name, offers) in by_name {
            let clash = offers
                .iter()
                .any(|(_, t)| t.input_schema != offers[0].1.input_schema);
            let variants: Vec<&(String, crate::nodes::ToolInfo)> = if clash {
                offers.iter().collect()
            } else {
                offers.iter().take(1).collect()
            };
            for (node, info) in variants {
                let listed = front_name(node, &name, clash);
                let mut tool = Tool::new_with_raw(
                    listed,
                    info.description.clone().map(Into::into),
                    object(&info.input_schema),
                )
                .with_annotations(
                    ToolAnnotations::new().idempotent(offers.iter().all(|(_, t)| t.deterministic)),
                );
                if let Some(o) = &info.output_schema {
                    tool = tool.with_raw_output_schema(object(o));
                }
                out.push(tool);
            }
        }
        out
    }
}

impl ServerHandler for Front {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build()).with_instructions(
            "hale: tools of several nodes behind one server, with retries and failover",
        )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.listing()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let parts = context.extensions.get::<axum::http::request::Parts>();
        let (agent, task) = identity(parts)?;
        let name = request.name.to_string();
        let nodes: Vec<String> = self
            .tools
            .registry
            .snapshot()
            .iter()
            .map(|n| n.name().to_owned())
            .collect();
        let node_refs: Vec<&str> = nodes.iter().map(String::as_str).collect();
        let (pinned, tool) = split_front_name(&name, &node_refs);
        let target = match pinned {
            Some(n) => Target::FailoverChain {
                nodes: vec![n.to_owned()],
            },
            None => Target::Local { failover: true },
        };
        if let Err(cap) = self.tools.take_tool_call(&agent, &task, tool) {
            return Err(ErrorData::new(
                ErrorCode::INVALID_REQUEST,
                format!(
                    "safety_limit: tool {tool} reached its cap of {cap} calls for this task (guard.tool_caps)"
                ),
                Some(json!({"type": "safety_limit", "tool": tool, "cap": cap})),
            ));
        }
        let idempotency_key = request
            .meta
            .as_ref()
            .and_then(|m| m.0.0.get(crate::mcp_client::IDEMPOTENCY_META_KEY))
            .and_then(Value::as_str)
            .map(str::to_owned);
        let job_id = format!("mcp-{}", ulid_now());
        let req = JobRequest {
            job_id: job_id.clone(),
            workflow_id: None,
            input: Value::Null,
            tools: Vec::new(),
            steps: vec![StepRequest {
                step_id: "call".into(),
                tool_name: tool.to_owned(),
                arguments: Value::Object(request.arguments.unwrap_or_default()),
                target,
                retry: Default::default(),
                offline_behavior: Default::default(),
                timeout_ms: hale_core::tools::DEFAULT_STEP_TIMEOUT_MS,
                retry_unsafe: false,
                idempotency_key,
                breaker: None,
            }],
        };
        let task = (!task.is_empty()).then_some(task);
        let job = match self.tools.submit_as(req, Some(agent), task).await {
            Ok(s) => s.job,
            Err(crate::SubmitError::Invalid(p)) => {
                return Err(ErrorData::new(
                    ErrorCode::INVALID_PARAMS,
                    p.join("; "),
                    None,
                ));
            }
            Err(crate::SubmitError::Reused(_)) | Err(crate::SubmitError::Store(_)) => {
                return Err(ErrorData::new(
                    ErrorCode::INTERNAL_ERROR,
                    "hale could not record the call",
                    None,
                ));
            }
        };
        let mut meta = serde_json::Map::new();
        meta.insert("hale/job_id".into(), json!(job.job_id));
        meta.insert("hale/degraded".into(), json!(job.degraded));
        meta.insert("hale/execution_path".into(), json!(job.execution_path));
        let mut result = if job.ok {
            match &job.result {
                Value::Object(_) => CallToolResult::structured(job.result.clone()),
                other => CallToolResult::success(vec![ContentBlock::text(other.to_string())]),
            }
        } else {
            CallToolResult::error(vec![ContentBlock::text(format!(
                "hale: the call failed on every node it could use: {}",
                job.error.clone().unwrap_or_default()
            ))])
        };
        result.meta = Some(MetaObject(meta));
        Ok(result.into())
    }
}

fn ulid_now() -> String {
    use rand::RngExt;
    let random: u128 = rand::rng().random::<u128>() & ((1u128 << 80) - 1);
    ulid::Ulid::from_parts(crate::wall_ms(), random).to_string()
}

impl Tools {
    /// The MCP front, for `nest_service("/mcp", …)`. Host headers are
    /// checked against `allowed_hosts` (DNS-rebinding protection: a browser
    /// page must not reach a loopback hale through a hostile name). A body
    /// over `limits.max_request_bytes` is a 413 ([`Tools::mcp_body_limit`];
    /// the gateway's edge gives it hale's `request_too_large` shape).
    pub fn mcp_service(
        self: &Arc<Self>,
        allowed_hosts: Vec<String>,
    ) -> StreamableHttpService<Front, LocalSessionManager> {
        let tools = self.clone();
        StreamableHttpService::new(
            move || {
                Ok(Front {
                    tools: tools.clone(),
                })
            },
            Default::default(),
            StreamableHttpServerConfig::default()
                .with_sse_keep_alive(None)
                .with_allowed_hosts(allowed_hosts)
                .with_max_request_body_bytes(self.mcp_body_limit),
        )
    }
}
