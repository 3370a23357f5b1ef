//! hale-tools: the same self-healing for tool calls that hale gives model
//! calls (docs/operations.md, "Tool jobs") — tool nodes (MCP over Streamable
//! HTTP, or plain HTTP), jobs routed over them with retries, failover,
//! store-and-forward queueing, idempotent `job_id`s and evidence, an audit log,
//! and the HTTP API.
//!
//! Shape: the rules (classification, retry/failover decisions, selection,
//! queue expiry, leases) are in `hale_core::tools`; this crate holds the live
//! state and does the I/O:
//! - [`Tools`] (`tools.rs`) — the runtime every part shares: store, node
//!   registry, HTTP client, metrics; the clock ([`wall_ms`]) and events;
//! - [`nodes`] — the registry, each node's breaker, capabilities and MCP
//!   session, the HTTP client of plain nodes; [`failure`] — how one call
//!   failed, in the classifier's terms;
//! - [`mcp_client`] — MCP nodes through the official SDK, `rmcp`;
//! - `node_calls.rs` — one call or listing on a node by its kind, and the
//!   capability refresh ([`Tools::refresh_all`], the node health check);
//! - `jobs.rs` — submission ([`Tools::submit`]), storing a run's outcome,
//!   reading and cancelling a job; `row.rs` — a job's stored row;
//! - [`runner`] — a job's steps, top to bottom;
//! - `queue.rs` — the store-and-forward queue ([`Tools::queue_tick`]) and the
//!   recovery of jobs a dead process left running;
//! - [`mcp_front`] — hale as an MCP server at `/mcp`;
//! - [`api`] — the axum handlers (`/jobs…`, `/nodes`), returned by
//!   [`Tools::admin_router`] for the gateway to merge behind its admin
//!   check; `/mcp` comes from [`Tools::mcp_router`], behind any valid key;
//! - `audit_file.rs` — the audit log's JSON-lines file
//!   (`tool_jobs.audit_log`), rotated; `step_breakers.rs` — the breakers of
//!   steps that set `breaker`/`circuit_breaker`;
//! - `background.rs` — [`Tools::spawn_background`]: the capability refresh
//!   (every 10 s) and the store-and-forward queue.
//!
//! A job's state lives in the store (`jobs` table) from submission on, so a
//! `job_id` submitted twice runs once and a queued job survives a restart;
//! a queued job is delivered by whoever wins the store's compare-and-set on
//! its status, so it runs exactly once.

pub mod api;
mod audit_file;
mod background;
pub mod failure;
mod jobs;
pub mod mcp_client;
pub mod mcp_front;
pub mod metrics;
pub mod model;
mod node_calls;
pub mod nodes;
mod queue;
mod row;
pub mod runner;
mod step_breakers;
mod tools;

pub use jobs::{SubmitError, Submitted};
pub use node_calls::CHECK_TIMEOUT;
pub use queue::{INTERRUPTED_REASON, QUEUE_BATCH, QUEUE_TICK, RUNNING_BATCH};
pub use tools::{Tools, Workflow, wall_ms};
