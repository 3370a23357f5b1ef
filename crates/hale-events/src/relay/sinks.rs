//! The configured sinks as the relays hold them: each sink's counters and
//! its deliverer — a webhook, an alert channel, or NATS through a connection
//! made on first use and remade after it broke — which delivers one event.

use std::sync::Arc;
use std::time::Duration;

use hale_core::config::NatsConfig;
use hale_core::delivery::{Verdict, verdict};
use hale_store::StoredEvent;

use super::status::Counters;
use crate::DeliveryError;
use crate::alert::AlertSink;
use crate::nats::JetStreamSink;
use crate::webhook::WebhookSink;

/// A NATS connection made on first use and remade after it broke.
pub(super) struct NatsConn {
    pub(super) cfg: NatsConfig,
    pub(super) ack_timeout: Duration,
    pub(super) sink: tokio::sync::Mutex<Option<JetStreamSink>>,
}

impl NatsConn {
    async fn get(&self) -> Result<JetStreamSink, DeliveryError> {
        self.get_fresh().await.map(|(s, _)| s)
    }

    /// The connection, and whether it was just made.
    pub(super) async fn get_fresh(&self) -> Result<(JetStreamSink, bool), DeliveryError> {
        let mut guard = self.sink.lock().await;
        if let Some(s) = guard.as_ref()
            && s.is_connected()
        {
            return Ok((s.clone(), false));
        }
        *guard = None;
        let s = JetStreamSink::connect(&self.cfg, self.ack_timeout).await?;
        *guard = Some(s.clone());
        Ok((s, true))
    }

    pub(super) async fn reset(&self) {
        *self.sink.lock().await = None;
    }
}

#[derive(Clone)]
pub(super) enum Deliverer {
    Webhook(Arc<WebhookSink>),
    /// An `alerting:` channel: an HTTP sink like a webhook.
    Alert(Arc<AlertSink>),
    Nats(Arc<NatsConn>),
}

impl Deliverer {
    pub(super) async fn deliver_one(&self, se: &StoredEvent) -> Result<(), DeliveryError> {
        match self {
            Deliverer::Webhook(w) => w.deliver(&se.event).await,
            Deliverer::Alert(a) => a.deliver(&se.event).await,
            Deliverer::Nats(conn) => {
                let sink = conn.get().await?;
                let r = sink.publish_one(se).await;
                if let Err(e) = &r
                    && verdict(e.failure) == Verdict::SinkDown
                {
                    conn.reset().await;
                }
                r
            }
        }
    }
}

pub(super) struct SinkHandle {
    pub(super) counters: Arc<Counters>,
    pub(super) deliverer: Deliverer,
}
