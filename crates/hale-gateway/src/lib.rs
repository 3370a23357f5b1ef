//! hale-gateway: the HTTP adapter around hale-core.
//!
//! It owns the OpenAI/Anthropic-compatible proxy, the provider clients, the
//! turn pipeline that asks hale-core what to do at every step and does it, and
//! the admin API. Decisions live in hale-core; this crate carries them out.
//!
//! - [`pipeline`]: the whole turn, top to bottom.
//! - [`turn`]: the attempt loop (retry, breaker, cooldown, failover).
//! - [`relay`]: streaming relay and mid-stream recovery.
//! - [`upstream`]: one attempt against one provider.
//! - [`proto`]: the canonical chat model and the two wire dialects.
//! - [`http`]: routes, auth, admin API. [`metrics`]: Prometheus.

pub mod agents;
pub mod api;
pub mod compact;
pub mod deployments;
pub mod error;
pub mod guardrails;
pub mod health;
pub mod history;
pub mod http;
pub mod memory;
pub mod metrics;
pub mod pipeline;
pub mod proto;
pub mod relay;
pub mod state;
pub mod sync;
pub mod turn;
pub mod upstream;

pub use state::Gateway;
