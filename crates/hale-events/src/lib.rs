//! hale-events: the delivery side of hale's event spine (docs/operations.md,
//! "Events and sinks") and the process guard rails (the data-directory lock,
//! named background tasks, the cluster's leases).
//!
//! The durable outbox lives in `hale-store`; this crate moves events out of
//! it. Each sink (a webhook, NATS JetStream) has one relay task that reads the
//! outbox from the sink's cursor, delivers in order and acknowledges the
//! cursor only after the sink acknowledged the event — at least once, in
//! order, nothing dropped silently ([`relay`], [`webhook`], [`nats`]). The live
//! stream `GET /events` and the dead-letter endpoints are in [`sse`]; the CLI
//! clients of those endpoints in [`cli`].
//!
//! The guard rails: [`lock`] holds the data directory for one process, and
//! [`tasks`] registers background tasks by name so that one dying brings the
//! process down cleanly, and shutdown is bounded.

pub mod alert;
pub mod cli;
pub mod cluster;
pub mod lock;
pub mod nats;
pub mod relay;
pub mod sse;
pub mod tasks;
pub mod webhook;

/// Why one delivery attempt failed: what the relay's rule
/// (`hale_core::delivery::verdict`) judges, and a message fit for `/ready`
/// (no credentials, webhook paths or query strings).
#[derive(Debug, Clone)]
pub struct DeliveryError {
    pub failure: hale_core::delivery::DeliveryFailure,
    pub message: String,
}

impl DeliveryError {
    pub fn new(failure: hale_core::delivery::DeliveryFailure, message: impl Into<String>) -> Self {
        DeliveryError {
            failure,
            message: message.into(),
        }
    }
}

impl std::fmt::Display for DeliveryError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// Milliseconds since the Unix epoch (wall time, for event stamps).
pub(crate) fn now_ms() -> u64 {
    use hale_core::clock::Clock;
    hale_core::clock::SystemClock.wall_ms()
}
