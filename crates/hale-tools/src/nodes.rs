//! Tool nodes: the registry (config nodes and `POST /nodes` registrations
//! with leases), each node's live state (capabilities, breaker, in-flight
//! calls and its MCP session), and calling plain HTTP nodes ([`http`]; MCP
//! nodes are called by [`crate::mcp_client`]).
//!
//! A node's health is computed from three facts with
//! [`hale_core::tools::node_health`]: whether it is online (its lease holds
//! and the last health check or call reached it), whether its breaker is
//! open (ejected), and whether it failed within the last minute (degraded).
//! The rules live in hale-core; this module holds the state behind short
//! `std` locks that are never held across an `.await`.

use hale_core::breaker::{Admission, BreakerState, CallOutcome, SharedBreaker};
use hale_core::config::{ToolNodeConfig, ToolNodeKind};
use hale_core::tools::{MAX_TOOLS_PER_NODE, NodeHealth, ToolError};
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

pub use crate::failure::{CallFailure, MAX_MESSAGE_CHARS, truncate};

/// A node with a failure this recent is `degraded`.
pub const DEGRADED_WINDOW_MS: u64 = 60_000;

/// One tool a node lists.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolInfo {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    pub input_schema: Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
    /// Safe to re-run anywhere (node metadata or config).
    pub deterministic: bool,
}

/// Where a node came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    Config,
    Registered,
}

/// An open MCP session of an `mcp` node (opened by [`crate::mcp_client`]).
pub type Session = rmcp::service::RunningService<rmcp::service::RoleClient, ()>;

/// One node's live state.
pub struct Node {
    pub cfg: ToolNodeConfig,
    pub source: Source,
    /// Milliseconds since the epoch when a registration lapses; 0 = never.
    lease_expires_ms: AtomicU64,
    tools: RwLock<Vec<ToolInfo>>,
    online: AtomicBool,
    pub breaker: SharedBreaker,
    last_failure_ms: AtomicU64,
    in_flight: AtomicU32,
    pub calls: AtomicU64,
    pub node_faults: AtomicU64,
    pub checks: AtomicU64,
    pub checks_failed: AtomicU64,
    /// The MCP session of an `mcp` node, opened on first use.
    pub(crate) mcp: tokio::sync::Mutex<Option<Arc<Session>>>,
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("name", &self.cfg.name)
            .finish_non_exhaustive()
    }
}

/// What `GET /nodes` shows of a node.
#[derive(Debug, Clone, Serialize)]
pub struct NodeView {
    pub name: String,
    pub kind: ToolNodeKind,
    pub url: String,
    pub source: Source,
    pub health: NodeHealth,
    pub breaker: BreakerState,
    pub in_flight: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lease_expires_ms: Option<u64>,
    pub tools: Vec<ToolInfo>,
    pub metadata: BTreeMap<String, String>,
}

/// Decrements a node's in-flight count when dropped.
pub struct InFlight(Arc<Node>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Node {
    pub fn new(cfg: ToolNodeConfig, source: Source, lease_expires_ms: Option<u64>) -> Self {
        let breaker = SharedBreaker::new(hale_core::tools::node_breaker_config_for(&cfg.breaker));
        Node {
            cfg,
            source,
            lease_expires_ms: AtomicU64::new(lease_expires_ms.unwrap_or(0)),
            tools: RwLock::new(Vec::new()),
            online: AtomicBool::new(true),
            breaker,
            last_failure_ms: AtomicU64::new(0),
            in_flight: AtomicU32::new(0),
            calls: AtomicU64::new(0),
            node_faults: AtomicU64::new(0),
            checks: AtomicU64::new(0),
            checks_failed: AtomicU64::new(0),
            mcp: tokio::sync::Mutex::new(None),
        }
    }

    pub fn name(&self) -> &str {
        &self.cfg.name
    }

    fn lease(&self) -> Option<u64> {
        match self.lease_expires_ms.load(Ordering::Relaxed) {
            0 => None,
            v => Some(v),
        }
    }

    pub fn renew(&self, expires_ms: u64) {
        self.lease_expires_ms.store(expires_ms, Ordering::Relaxed);
    }

    /// The node's health at `now`.
    pub fn health(&self, now: Instant, now_ms: u64) -> NodeHealth {
        let online = self.online.load(Ordering::Relaxed)
            && !hale_core::tools::lease_expired(self.lease(), now_ms);
        // An open breaker whose open time has passed admits a trial: the
        // node is back in rotation for that call (its probe).
        let b = self.breaker.snapshot(now);
        let ejected = match b.state {
            BreakerState::Open => b.open_remaining_ms > 0,
            BreakerState::ForcedOpen => true,
            BreakerState::HalfOpen => b.trials_in_flight > 0,
            BreakerState::Closed | BreakerState::Disabled => false,
        };
        let last = self.last_failure_ms.load(Ordering::Relaxed);
        let recent = last != 0 && now_ms.saturating_sub(last) < DEGRADED_WINDOW_MS;
        hale_core::tools::node_health(online, ejected, recent)
    }

    pub fn in_flight(&self) -> u32 {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// Counts a call in flight until the guard drops.
    pub fn start_call(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        self.calls.fetch_add(1, Ordering::Relaxed);
        InFlight(self.clone())
    }

    pub fn tools(&self) -> Vec<ToolInfo> {
        self.tools.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub fn tool(&self, name: &str) -> Option<ToolInfo> {
        self.tools
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .find(|t| t.name == name)
            .cloned()
    }

    pub fn offers(&self, tool: &str) -> bool {
        self.tools
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .any(|t| t.name == tool)
    }

    /// Whether `tool` is safe to re-run anywhere: marked so in config or by
    /// the node's own listing.
    pub fn deterministic(&self, tool: &str) -> bool {
        self.cfg.deterministic.iter().any(|t| t == tool)
            || self.tool(tool).is_some_and(|t| t.deterministic)
    }

    /// A health check's outcome: capabilities on success, offline on failure.
    pub fn set_checked(&self, tools: Option<Vec<ToolInfo>>) {
        self.checks.fetch_add(1, Ordering::Relaxed);
        match tools {
            Some(mut list) => {
                list.truncate(MAX_TOOLS_PER_NODE);
                for t in &mut list {
                    t.deterministic |= self.cfg.deterministic.iter().any(|d| d == &t.name);
                }
                *self.tools.write().unwrap_or_else(|e| e.into_inner()) = list;
                self.online.store(true, Ordering::Relaxed);
            }
            None => {
                self.checks_failed.fetch_add(1, Ordering::Relaxed);
                self.online.store(false, Ordering::Relaxed);
            }
        }
    }

    /// Asks the breaker whether a call may go now (a trial when half-open).
    pub fn admit(&self, now: Instant) -> Admission {
        self.breaker.allow(now)
    }

    /// Records a call's outcome on the breaker and the health facts.
    pub fn record(
        &self,
        now: Instant,
        now_ms: u64,
        latency: Duration,
        err: Option<(ToolError, Option<Duration>)>,
    ) {
        let mut rng = rand::rng();
        match err {
            None => {
                self.online.store(true, Ordering::Relaxed);
                self.breaker
                    .record(now, CallOutcome::Success { latency }, &mut rng);
            }
            Some((e, retry_after)) if e.node_fault() => {
                self.node_faults.fetch_add(1, Ordering::Relaxed);
                self.last_failure_ms.store(now_ms.max(1), Ordering::Relaxed);
                self.breaker.record(
                    now,
                    CallOutcome::Failure {
                        class: e.class(),
                        latency,
                        retry_after,
                    },
                    &mut rng,
                );
            }
            // The caller's or the capability's fault says nothing about the node.
            Some(_) => {}
        }
    }

    pub fn view(&self, now: Instant, now_ms: u64) -> NodeView {
        NodeView {
            name: self.cfg.name.clone(),
            kind: self.cfg.kind,
            url: self.cfg.url.clone(),
            source: self.source,
            health: self.health(now, now_ms),
            breaker: self.breaker.state(now),
            in_flight: self.in_flight(),
            lease_expires_ms: self.lease(),
            tools: self.tools(),
            metadata: self.cfg.metadata.clone(),
        }
    }
}

/// Every node, config ones first, then registrations in arrival order.
#[derive(Default)]
pub struct Registry {
    nodes: RwLock<Vec<Arc<Node>>>,
}

/// Why a registration was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RegisterError {
    /// The name belongs to a node from the config.
    ConfigNode,
}

impl Registry {
    pub fn new(cfg: &[ToolNodeConfig]) -> Self {
        Registry {
            nodes: RwLock::new(
                cfg.iter()
                    .map(|c| Arc::new(Node::new(c.clone(), Source::Config, None)))
                    .collect(),
            ),
        }
    }

    pub fn snapshot(&self) -> Vec<Arc<Node>> {
        self.nodes.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub fn get(&self, name: &str) -> Option<Arc<Node>> {
        self.nodes
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .find(|n| n.cfg.name == name)
            .cloned()
    }

    /// Registers a node or renews its lease (a changed URL or kind replaces
    /// the registration). Returns the node and whether it is new.
    pub fn register(
        &self,
        cfg: ToolNodeConfig,
        expires_ms: u64,
    ) -> Result<(Arc<Node>, bool), RegisterError> {
        let mut nodes = self.nodes.write().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = nodes.iter().position(|n| n.cfg.name == cfg.name) {
            let n = &nodes[i];
            if n.source == Source::Config {
                return Err(RegisterError::ConfigNode);
            }
            if n.cfg == cfg {
                n.renew(expires_ms);
                return Ok((n.clone(), false));
            }
            let fresh = Arc::new(Node::new(cfg, Source::Registered, Some(expires_ms)));
            nodes[i] = fresh.clone();
            return Ok((fresh, true));
        }
        let fresh = Arc::new(Node::new(cfg, Source::Registered, Some(expires_ms)));
        nodes.push(fresh.clone());
        Ok((fresh, true))
    }
}

/// Parses a tool listing: `{"tools": [...]}` or a bare array; each tool with
/// `name`, optional `description`, `input_schema`/`inputSchema`,
/// `output_schema`/`outputSchema`, `deterministic` (or
/// `annotations.idempotentHint`).
pub fn parse_listing(v: &Value) -> Option<Vec<ToolInfo>> {
    let list = v.get("tools").unwrap_or(v).as_array()?;
    Some(
        list.iter()
            .take(MAX_TOOLS_PER_NODE)
            .filter_map(|t| {
                let name = t.get("name")?.as_str()?;
                if name.is_empty() || name.len() > hale_core::tools::MAX_ID_LEN {
                    return None;
                }
                Some(ToolInfo {
                    name: name.to_owned(),
                    description: t
                        .get("description")
                        .and_then(Value::as_str)
                        .map(str::to_owned),
                    input_schema: t
                        .get("input_schema")
                        .or_else(|| t.get("inputSchema"))
                        .cloned()
                        .unwrap_or_else(|| serde_json::json!({"type": "object"})),
                    output_schema: t
                        .get("output_schema")
                        .or_else(|| t.get("outputSchema"))
                        .filter(|s| !s.is_null())
                        .cloned(),
                    deterministic: t
                        .get("deterministic")
                        .and_then(Value::as_bool)
                        .or_else(|| {
                            t.pointer("/annotations/idempotentHint")
                                .and_then(Value::as_bool)
                        })
                        .unwrap_or(false),
                })
            })
            .collect(),
    )
}

/// Calls and lists tools on plain HTTP nodes.
pub mod http {
    use super::*;

    /// `GET {url}/tools`.
    pub async fn list(
        client: &reqwest::Client,
        url: &str,
        timeout: Duration,
    ) -> Result<Vec<ToolInfo>, CallFailure> {
        let resp = client
            .get(format!("{url}/tools"))
            .timeout(timeout)
            .send()
            .await
            .map_err(|e| CallFailure::from_error(&e, e.is_timeout(), e.is_connect()))?;
        let status = resp.status().as_u16();
        if !(200..300).contains(&status) {
            return Err(CallFailure::status(
                status,
                format!("tool listing answered HTTP {status}"),
                None,
            ));
        }
        let v: Value = resp
            .json()
            .await
            .map_err(|e| CallFailure::invalid_output(format!("tool listing is not JSON: {e}")))?;
        parse_listing(&v)
            .ok_or_else(|| CallFailure::invalid_output("tool listing has no tools array".into()))
    }

    /// `POST {url}/tools/{name}` with the arguments as the JSON body. The
    /// name is one path segment (the `url` crate encodes `/`, `?`, `#` and
    /// `%`); a name with a `.` or `..` part, which it would drop or climb,
    /// is refused unsent (`hale_core::segment`; jobs refuse it at submit).
    pub async fn call(
        client: &reqwest::Client,
        url: &str,
        tool: &str,
        args: &Value,
        timeout: Duration,
        idempotency_key: Option<&str>,
        job_id: &str,
    ) -> Result<Value, CallFailure> {
        if let Some(r) = hale_core::segment::problem(tool) {
            return Err(CallFailure::refused(format!(
                "tool name {tool:?} {r}: it becomes a path segment of the node's URL"
            )));
        }
        let mut target = reqwest::Url::parse(url)
            .map_err(|e| CallFailure::invalid_output(format!("node url does not parse: {e}")))?;
        target
            .path_segments_mut()
            .map_err(|()| CallFailure::invalid_output("node url cannot take a path".into()))?
            .pop_if_empty()
            .push("tools")
            .push(tool);
        let mut req = client
            .post(target)
            .timeout(timeout)
            .header("x-hale-job", job_id)
            .json(args);
        if let Some(k) = idempotency_key {
            req = req.header("idempotency-key", k);
        }
        let resp = req
            .send()
            .await
            .map_err(|e| CallFailure::from_error(&e, e.is_timeout(), e.is_connect()))?;
        let status = resp.status().as_u16();
        let retry_after = resp
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        let body = match resp.bytes().await {
            Ok(b) => b,
            Err(e) => return Err(CallFailure::from_error(&e, e.is_timeout(), false)),
        };
        if !(200..300).contains(&status) {
            let text = String::from_utf8_lossy(&body);
            let msg = serde_json::from_slice::<Value>(&body)
                .ok()
                .and_then(|v| {
                    v.pointer("/error/message")
                        .or_else(|| v.get("error"))
                        .or_else(|| v.get("message"))
                        .and_then(Value::as_str)
                        .map(str::to_owned)
                })
                .unwrap_or_else(|| text.into_owned());
            return Err(CallFailure::status(status, truncate(&msg), retry_after));
        }
        serde_json::from_slice(&body)
            .map_err(|e| CallFailure::invalid_output(format!("tool output is not JSON: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::http;
    use std::time::Duration;

    /// A tool name with a `.` or `..` part is refused unsent (the `url`
    /// crate would drop it, calling `{url}/tools`): a final 400 that names
    /// the rule, not a failure of the node (docs/operations.md, "Threat model").
    #[tokio::test]
    async fn a_tool_name_with_a_dot_part_is_refused_unsent() {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = reqwest::Client::new();
        // Nothing listens at port 9: a request made would fail to connect.
        for tool in ["..", ".", "a/../b", "%2e%2e"] {
            let f = http::call(
                &client,
                "http://127.0.0.1:9",
                tool,
                &serde_json::json!({}),
                Duration::from_secs(1),
                None,
                "job",
            )
            .await
            .expect_err("refused");
            assert!(!f.sent, "{tool}");
            assert_eq!(f.obs.status, Some(400), "{tool}");
            assert!(f.message.contains("`..`"), "{tool}: {}", f.message);
        }
    }
}
