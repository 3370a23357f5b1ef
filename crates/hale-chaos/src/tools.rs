//! The chaos tool node: four tools (`echo`, `slow`, deterministic
//! `unit_convert`, `flaky`) served over plain HTTP (`GET /tools`,
//! `POST /tools/{name}`), with the provider's fault selection.
//!
//! A fault is set for the whole node (or one tool) with
//! `POST /chaos/tools/fault {"spec": "...", "tool": "echo"}` — so two chaos
//! nodes behind hale can play a healthy replica and a broken one with the
//! same job — or per request with the `x-chaos-fault` header. Specs are the
//! provider's grammar (`error-503`, `error-500`, `error-529`,
//! `rate-limit:retry_after=N`, `reset`, `hang`, `down:secs=T`,
//! `down-until-reset`, each with `:times=N`) plus `schema-invalid` (a 200 whose
//! output breaks the tool's output schema) and `ok` (clears the fault).
//! `down:secs=T` answers 503 for T seconds from when it was set.
//!
//! The same tools are served over MCP (Streamable HTTP, the `rmcp` server)
//! at `/mcp`, with the same faults: an error status becomes a JSON-RPC error
//! whose `data` is `{"status": N, "retry_after": S}` (how hale maps it back
//! onto its classifier), `hang` never answers, `schema-invalid` answers a
//! result that breaks the output schema. `reset` is HTTP-only (an MCP
//! handler cannot drop its connection); over MCP it is refused as a bad spec.
//!
//! `GET /chaos/tools/stats` counts executions per tool — a call counts when
//! the tool starts running, so a caller that timed out on `slow` still sees
//! it counted (the call *did* execute) — and applied faults.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::fault::{self, Fault};
use crate::request::{ConnKill, FAULT_HEADER};

/// Longest sleep `slow` accepts.
pub const MAX_SLOW_MS: u64 = 60_000;
/// `slow`'s sleep when no `ms` is given.
pub const DEFAULT_SLOW_MS: u64 = 1000;

/// A tool fault: the provider's faults, or an output that breaks the schema.
#[derive(Debug, Clone, PartialEq, Eq)]
enum ToolFault {
    Provider(Fault),
    SchemaInvalid,
}

#[derive(Debug, Clone)]
struct Active {
    fault: ToolFault,
    /// Only this tool, or every tool.
    tool: Option<String>,
    times: Option<u64>,
    applied: u64,
    set_at: Instant,
}

/// The node's memory.
#[derive(Debug, Default)]
pub struct ToolNode {
    fault: Mutex<Option<Active>>,
    calls: Mutex<BTreeMap<String, u64>>,
    faults: Mutex<BTreeMap<String, u64>>,
    flaky: Mutex<u64>,
}

fn parse(spec: &str) -> Result<(ToolFault, Option<u64>), String> {
    let spec = spec.trim();
    if let Some(rest) = spec.strip_prefix("schema-invalid") {
        let times = match rest.strip_prefix(":times=") {
            Some(n) => Some(
                n.parse::<u64>()
                    .map_err(|_| format!("bad times in `{spec}`"))?,
            ),
            None if rest.is_empty() => None,
            None => return Err(format!("bad fault spec `{spec}`")),
        };
        return Ok((ToolFault::SchemaInvalid, times));
    }
    let s = fault::parse_strict(spec).map_err(|e| e.to_string())?;
    Ok((ToolFault::Provider(s.fault), s.times))
}

impl ToolNode {
    /// Sets (or with `ok`, clears) the node's fault.
    pub fn set_fault(&self, spec: &str, tool: Option<String>) -> Result<(), String> {
        let (fault, times) = parse(spec)?;
        let mut f = self.fault.lock().unwrap_or_else(|e| e.into_inner());
        *f = match fault {
            ToolFault::Provider(Fault::Ok) => None,
            fault => Some(Active {
                fault,
                tool,
                times,
                applied: 0,
                set_at: Instant::now(),
            }),
        };
        Ok(())
    }

    /// Executions per tool.
    pub fn calls(&self) -> BTreeMap<String, u64> {
        self.calls.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn count(&self, tool: &str) {
        *self
            .calls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(tool.to_owned())
            .or_default() += 1;
    }

    fn count_fault(&self, name: &str) {
        *self
            .faults
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(name.to_owned())
            .or_default() += 1;
    }

    /// The fault that applies to a call of `tool` now, if any.
    fn take_fault(&self, tool: &str) -> Option<ToolFault> {
        let mut guard = self.fault.lock().unwrap_or_else(|e| e.into_inner());
        let a = guard.as_mut()?;
        if a.tool.as_deref().is_some_and(|t| t != tool) {
            return None;
        }
        if a.times.is_some_and(|n| a.applied >= n) {
            return None;
        }
        if let ToolFault::Provider(Fault::Down { secs }) = a.fault
            && a.set_at.elapsed() >= Duration::from_secs(secs)
        {
            return None;
        }
        a.applied += 1;
        Some(a.fault.clone())
    }
}

/// The tool list, with schemas.
pub fn listing() -> Value {
    json!({"tools": [
        {"name": "echo", "description": "Returns its arguments.",
         "input_schema": {"type": "object"},
         "output_schema": {"type": "object", "required": ["echo"]},
         "deterministic": false},
        {"name": "slow", "description": "Sleeps `ms` milliseconds, then answers.",
         "input_schema": {"type": "object", "properties": {"ms": {"type": "integer"}}},
         "output_schema": {"type": "object", "required": ["slept_ms"]},
         "deterministic": false},
        {"name": "unit_convert", "description": "Converts a length, mass or temperature.",
         "input_schema": {"type": "object", "required": ["value", "from", "to"],
            "properties": {"value": {"type": "number"}, "from": {"type": "string"}, "to": {"type": "string"}}},
         "output_schema": {"type": "object", "required": ["value", "unit"],
            "properties": {"value": {"type": "number"}, "unit": {"type": "string"}}},
         "deterministic": true},
        {"name": "flaky", "description": "Fails with 503 on every other call (the 1st, 3rd, ...).",
         "input_schema": {"type": "object"},
         "output_schema": {"type": "object", "required": ["call"]},
         "deterministic": false},
    ]})
}

/// What a tool call produced: a status and a JSON body.
pub struct ToolAnswer {
    pub status: u16,
    pub body: Value,
    pub retry_after: Option<u64>,
}

impl ToolAnswer {
    fn ok(body: Value) -> Self {
        ToolAnswer {
            status: 200,
            body,
            retry_after: None,
        }
    }
    fn err(status: u16, message: impl Into<String>) -> Self {
        ToolAnswer {
            status,
            body: json!({"error": {"message": message.into()}}),
            retry_after: None,
        }
    }
}

fn factor(unit: &str) -> Option<(&'static str, f64)> {
    Some(match unit {
        "m" => ("length", 1.0),
        "cm" => ("length", 0.01),
        "mm" => ("length", 0.001),
        "km" => ("length", 1000.0),
        "in" => ("length", 0.0254),
        "ft" => ("length", 0.3048),
        "kg" => ("mass", 1.0),
        "g" => ("mass", 0.001),
        "lb" => ("mass", 0.453_592_37),
        _ => return None,
    })
}

fn convert(args: &Value) -> ToolAnswer {
    let (Some(v), Some(from), Some(to)) = (
        args.get("value").and_then(Value::as_f64),
        args.get("from").and_then(Value::as_str),
        args.get("to").and_then(Value::as_str),
    ) else {
        return ToolAnswer::err(
            400,
            "unit_convert needs a number `value` and units `from`, `to`",
        );
    };
    let out = match (from, to) {
        ("c", "f") => v * 9.0 / 5.0 + 32.0,
        ("f", "c") => (v - 32.0) * 5.0 / 9.0,
        (a, b) if a == b && factor(a).is_some() => v,
        _ => match (factor(from), factor(to)) {
            (Some((da, fa)), Some((db, fb))) if da == db => v * fa / fb,
            (Some(_), Some(_)) => {
                return ToolAnswer::err(400, format!("cannot convert {from} to {to}"));
            }
            _ => return ToolAnswer::err(400, format!("unknown unit in {from} → {to}")),
        },
    };
    ToolAnswer::ok(json!({"value": (out * 1e9).round() / 1e9, "unit": to}))
}

/// Runs a tool after faults were applied (shared by HTTP and MCP).
pub async fn execute(node: &ToolNode, tool: &str, args: &Value) -> ToolAnswer {
    match tool {
        "echo" => {
            node.count(tool);
            ToolAnswer::ok(json!({"echo": args}))
        }
        "slow" => {
            let ms = args
                .get("ms")
                .and_then(Value::as_u64)
                .unwrap_or(DEFAULT_SLOW_MS)
                .min(MAX_SLOW_MS);
            node.count(tool);
            tokio::time::sleep(Duration::from_millis(ms)).await;
            ToolAnswer::ok(json!({"slept_ms": ms}))
        }
        "unit_convert" => {
            node.count(tool);
            convert(args)
        }
        "flaky" => {
            node.count(tool);
            let n = {
                let mut c = node.flaky.lock().unwrap_or_else(|e| e.into_inner());
                *c += 1;
                *c
            };
            if n % 2 == 1 {
                ToolAnswer::err(503, format!("flaky: call {n} fails"))
            } else {
                ToolAnswer::ok(json!({"call": n}))
            }
        }
        other => ToolAnswer::err(404, format!("no tool `{other}`")),
    }
}

/// What a fault does to a call, before the tool runs. `None`: run the tool.
pub enum Applied {
    Answer(ToolAnswer),
    SchemaInvalid,
    Reset,
    Hang,
}

/// Applies the node's (or the header's) fault to a call of `tool`.
pub fn apply(node: &ToolNode, tool: &str, header: Option<&str>) -> Result<Option<Applied>, String> {
    let f = match header {
        Some(h) => match parse(h)? {
            (ToolFault::Provider(Fault::Ok), _) => None,
            (f, _) => Some(f),
        },
        None => node.take_fault(tool),
    };
    let Some(f) = f else { return Ok(None) };
    let name = match &f {
        ToolFault::SchemaInvalid => "schema-invalid",
        ToolFault::Provider(p) => p.name(),
    };
    node.count_fault(name);
    Ok(Some(match f {
        ToolFault::SchemaInvalid => Applied::SchemaInvalid,
        ToolFault::Provider(p) => match p {
            Fault::RateLimit { retry_after } => Applied::Answer(ToolAnswer {
                retry_after,
                ..ToolAnswer::err(429, "rate limited")
            }),
            Fault::Error500 => Applied::Answer(ToolAnswer::err(500, "internal error")),
            Fault::Error503 | Fault::Down { .. } | Fault::DownUntilReset => {
                Applied::Answer(ToolAnswer::err(503, "unavailable"))
            }
            Fault::Error529 => Applied::Answer(ToolAnswer::err(529, "overloaded")),
            Fault::Auth => Applied::Answer(ToolAnswer::err(403, "missing capability")),
            Fault::Reset => Applied::Reset,
            Fault::Hang => Applied::Hang,
            Fault::Ok
            | Fault::SlowFirstToken { .. }
            | Fault::Cut { .. }
            | Fault::Stall { .. }
            | Fault::SlowStream { .. }
            | Fault::Malformed { .. }
            | Fault::NoDone
            | Fault::StreamError { .. }
            | Fault::ContextOverflow { .. }
            | Fault::ContentFilter
            | Fault::NoPrefill
            | Fault::Tool { .. }
            | Fault::Summarize
            // Provider-only: a tool call carries no credential to echo.
            | Fault::AuthEcho
            // Provider-only: tool nodes have the `flaky` tool for that.
            | Fault::Flaky { .. } => return Ok(None),
        },
    }))
}

/// The routes of the tool node: plain HTTP and MCP at `/mcp`.
pub(crate) fn router(node: Arc<ToolNode>) -> Router {
    Router::new()
        .nest_service("/mcp", mcp::service(node.clone()))
        .route("/tools", get(list))
        .route("/tools/{name}", post(call))
        .route("/chaos/tools/fault", post(set_fault))
        .route("/chaos/tools/stats", get(stats))
        .with_state(node)
}

async fn list() -> Json<Value> {
    Json(listing())
}

fn render(a: ToolAnswer) -> Response {
    let mut r = (
        StatusCode::from_u16(a.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        Json(a.body),
    )
        .into_response();
    if let Some(s) = a.retry_after {
        r.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(s));
    }
    r
}

async fn call(
    State(node): State<Arc<ToolNode>>,
    kill: Option<Extension<ConnKill>>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let args: Value = if body.is_empty() {
        json!({})
    } else {
        match serde_json::from_slice(&body) {
            Ok(v) => v,
            Err(e) => return render(ToolAnswer::err(400, format!("arguments are not JSON: {e}"))),
        }
    };
    let header = headers.get(FAULT_HEADER).and_then(|v| v.to_str().ok());
    match apply(&node, &name, header) {
        Err(e) => render(ToolAnswer::err(400, format!("hale-chaos: {e}"))),
        Ok(Some(Applied::Answer(a))) => render(a),
        Ok(Some(Applied::SchemaInvalid)) => {
            node.count(&name);
            render(ToolAnswer::ok(json!({"unexpected": true})))
        }
        Ok(Some(Applied::Reset)) => {
            if let Some(Extension(k)) = kill {
                k.0.notify_one();
            }
            std::future::pending().await
        }
        Ok(Some(Applied::Hang)) => std::future::pending().await,
        Ok(None) => render(execute(&node, &name, &args).await),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SetFault {
    spec: String,
    #[serde(default)]
    tool: Option<String>,
}

async fn set_fault(State(node): State<Arc<ToolNode>>, Json(f): Json<SetFault>) -> Response {
    match node.set_fault(&f.spec, f.tool) {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => render(ToolAnswer::err(400, e)),
    }
}

async fn stats(State(node): State<Arc<ToolNode>>) -> Json<Value> {
    let faults = node
        .faults
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    Json(json!({"calls": node.calls(), "faults": faults}))
}

/// The tool node over MCP.
pub mod mcp {
    use super::{Applied, ToolNode, apply, execute, listing};
    use rmcp::model::{
        CallToolRequestParams, CallToolResponse, CallToolResult, ErrorCode, ListToolsResult,
        PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool, ToolAnnotations,
    };
    use rmcp::service::RequestContext;
    use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
    use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
    use rmcp::{ErrorData, RoleServer, ServerHandler};
    use serde_json::{Value, json};
    use std::sync::Arc;

    /// One MCP session's handler; every session shares the node.
    #[derive(Clone)]
    pub struct ChaosMcp {
        node: Arc<ToolNode>,
    }

    fn object(v: &Value) -> Arc<serde_json::Map<String, Value>> {
        Arc::new(v.as_object().cloned().unwrap_or_default())
    }

    /// The tools as MCP tools (deterministic ones carry `idempotentHint`).
    pub fn tools() -> Vec<Tool> {
        listing()["tools"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .map(|t| {
                let name = t["name"].as_str().unwrap_or_default().to_owned();
                let desc = t["description"].as_str().unwrap_or_default().to_owned();
                Tool::new(name, desc, object(&t["input_schema"]))
                    .with_raw_output_schema(object(&t["output_schema"]))
                    .with_annotations(ToolAnnotations::new().idempotent(t["deterministic"] == true))
            })
            .collect()
    }

    fn status_error(status: u16, body: &Value, retry_after: Option<u64>) -> ErrorData {
        let code = match status {
            400 | 422 => ErrorCode::INVALID_PARAMS,
            404 => ErrorCode::METHOD_NOT_FOUND,
            _ => ErrorCode::INTERNAL_ERROR,
        };
        let msg = body
            .pointer("/error/message")
            .and_then(Value::as_str)
            .unwrap_or("tool failed")
            .to_owned();
        ErrorData::new(
            code,
            msg,
            Some(json!({"status": status, "retry_after": retry_after})),
        )
    }

    impl ServerHandler for ChaosMcp {
        fn get_info(&self) -> ServerConfig {
            ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
        }

        async fn list_tools(
            &self,
            _request: Option<PaginatedRequestParams>,
            _context: RequestContext<RoleServer>,
        ) -> Result<ListToolsResult, ErrorData> {
            Ok(ListToolsResult::with_all_items(tools()))
        }

        async fn call_tool(
            &self,
            request: CallToolRequestParams,
            _context: RequestContext<RoleServer>,
        ) -> Result<CallToolResponse, ErrorData> {
            let name = request.name.to_string();
            let args = Value::Object(request.arguments.unwrap_or_default());
            let answer = match apply(&self.node, &name, None) {
                Err(e) => return Err(ErrorData::new(ErrorCode::INVALID_PARAMS, e, None)),
                Ok(Some(Applied::Answer(a))) => a,
                Ok(Some(Applied::SchemaInvalid)) => {
                    return Ok(CallToolResult::structured(json!({"unexpected": true})).into());
                }
                Ok(Some(Applied::Reset)) => {
                    return Err(ErrorData::new(
                        ErrorCode::INVALID_PARAMS,
                        "hale-chaos: `reset` is HTTP-only",
                        None,
                    ));
                }
                Ok(Some(Applied::Hang)) => std::future::pending().await,
                Ok(None) => execute(&self.node, &name, &args).await,
            };
            if (200..300).contains(&answer.status) {
                Ok(CallToolResult::structured(answer.body).into())
            } else {
                Err(status_error(
                    answer.status,
                    &answer.body,
                    answer.retry_after,
                ))
            }
        }
    }

    /// The Streamable HTTP service for `nest_service("/mcp", …)`. Any Host
    /// header is accepted: a chaos node is a test fixture, reached by
    /// whatever name a test or demo uses.
    pub fn service(node: Arc<ToolNode>) -> StreamableHttpService<ChaosMcp, LocalSessionManager> {
        StreamableHttpService::new(
            move || Ok(ChaosMcp { node: node.clone() }),
            Default::default(),
            StreamableHttpServerConfig::default()
                .with_sse_keep_alive(None)
                .disable_allowed_hosts(),
        )
    }
}
