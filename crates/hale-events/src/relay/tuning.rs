//! The relays' timing knobs ([`RelayTuning`]) and their defaults: what
//! `hale serve` uses, and what tests shorten.

use std::time::Duration;

use hale_core::delivery::DownBackoff;

use crate::{nats, webhook};

/// First pause after a sink rejected an event; doubles per attempt.
pub const DEFAULT_RETRY_INITIAL: Duration = Duration::from_millis(500);
/// Longest pause between two attempts of a rejected event.
pub const DEFAULT_RETRY_MAX: Duration = Duration::from_secs(5);
/// Events read from the outbox per query.
pub const DEFAULT_BATCH: usize = 1024;
/// How often the outbox cap is enforced.
pub const DEFAULT_SHED_INTERVAL: Duration = Duration::from_secs(1);

/// The timing knobs of the relays. [`Default`] is what `hale serve` uses;
/// tests shorten them.
#[derive(Debug, Clone)]
pub struct RelayTuning {
    /// Pause after a rejection of an event, doubling per attempt…
    pub retry_initial: Duration,
    /// …up to this.
    pub retry_max: Duration,
    /// The waits of a down sink between trials (default:
    /// `hale_core::delivery::DEFAULT_DOWN_BACKOFF_*`).
    pub down_backoff: DownBackoff,
    pub batch: usize,
    pub nats_window: usize,
    pub nats_ack_timeout: Duration,
    pub webhook_timeout: Duration,
    pub shed_interval: Duration,
}

impl Default for RelayTuning {
    fn default() -> Self {
        RelayTuning {
            retry_initial: DEFAULT_RETRY_INITIAL,
            retry_max: DEFAULT_RETRY_MAX,
            down_backoff: DownBackoff::default(),
            batch: DEFAULT_BATCH,
            nats_window: nats::DEFAULT_WINDOW,
            nats_ack_timeout: nats::DEFAULT_ACK_TIMEOUT,
            webhook_timeout: webhook::DEFAULT_TIMEOUT,
            shed_interval: DEFAULT_SHED_INTERVAL,
        }
    }
}
