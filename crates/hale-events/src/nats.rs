//! NATS JetStream sink (DESIGN §6).
//!
//! A publish counts as delivered only when the stream acknowledged it
//! (a JetStream publish, not a core NATS fire-and-forget). Every message
//! carries `Nats-Msg-Id` = the event id, and the stream is created (when
//! missing) with a duplicate window of [`DUPLICATE_WINDOW`], so a redelivery
//! after a lost ack is dropped by the server: at least once from the relay
//! becomes exactly once in the stream. Subjects are `{prefix}.{kind}`.
//!
//! Throughput comes from pipelining: [`JetStreamSink::publish_window`] sends
//! a window of messages, then awaits their acks in order.
//!
//! Order across a broken connection: the client is built with
//! [`MAX_RECONNECTS`] = 1, so when the server goes away the client gives up
//! instead of reconnecting later and flushing messages it had buffered —
//! those would land in the stream *after* an earlier message lost with the
//! connection, out of order. The relay instead opens a fresh connection and
//! republishes from the first unacknowledged event (see [`crate::relay`]).

use std::time::Duration;

use async_nats::jetstream::{self, context::PublishErrorKind, stream};
use bytes::Bytes;
use hale_core::config::NatsConfig;
use hale_core::event::Event;
use hale_store::StoredEvent;

/// The stream's deduplication window (≥ 2 min: longer than any retry cycle).
pub const DUPLICATE_WINDOW: Duration = Duration::from_secs(120);
/// How long one publish waits for the stream's ack.
pub const DEFAULT_ACK_TIMEOUT: Duration = Duration::from_secs(5);
/// Messages published before their acks are awaited.
pub const DEFAULT_WINDOW: usize = 256;
/// Reconnect attempts of one client after its connection broke (see the
/// module docs for why it is one).
pub const MAX_RECONNECTS: usize = 1;
/// How long connecting may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// The sink name used for the cursor and dead letters.
pub const SINK_NAME: &str = "nats";

/// A connected JetStream publisher bound to one stream.
#[derive(Clone)]
pub struct JetStreamSink {
    client: async_nats::Client,
    js: jetstream::Context,
    prefix: String,
}

impl std::fmt::Debug for JetStreamSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JetStreamSink")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

impl JetStreamSink {
    /// Connects and gets or creates the stream `cfg.stream` over
    /// `{prefix}.>`.
    pub async fn connect(cfg: &NatsConfig, ack_timeout: Duration) -> anyhow::Result<Self> {
        let client = async_nats::ConnectOptions::new()
            .max_reconnects(MAX_RECONNECTS)
            .connection_timeout(CONNECT_TIMEOUT)
            .connect(cfg.url.as_str())
            .await
            .map_err(|e| anyhow::anyhow!("connecting to NATS at {}: {e}", cfg.url))?;
        let js = jetstream::ContextBuilder::new()
            .timeout(ack_timeout)
            .max_ack_inflight(DEFAULT_WINDOW * 8)
            .backpressure_on_inflight(true)
            .build(client.clone());
        js.get_or_create_stream(stream::Config {
            name: cfg.stream.clone(),
            subjects: vec![format!("{}.>", cfg.subject_prefix)],
            duplicate_window: DUPLICATE_WINDOW,
            ..Default::default()
        })
        .await
        .map_err(|e| anyhow::anyhow!("getting or creating stream {}: {e}", cfg.stream))?;
        Ok(JetStreamSink {
            client,
            js,
            prefix: cfg.subject_prefix.clone(),
        })
    }

    /// Whether the connection is still usable (not given up).
    pub fn is_connected(&self) -> bool {
        matches!(
            self.client.connection_state(),
            async_nats::connection::State::Connected
        )
    }

    /// The subject of an event: `{prefix}.{kind}`.
    pub fn subject(&self, event: &Event) -> String {
        format!("{}.{}", self.prefix, event.kind.as_str())
    }

    /// Publishes every event, then awaits the acks in order. One result per
    /// event, in order.
    pub async fn publish_window(&self, events: &[StoredEvent]) -> Vec<Result<(), String>> {
        let mut pending = Vec::with_capacity(events.len());
        for se in events {
            let ev = &se.event;
            let payload = match serde_json::to_vec(ev) {
                Ok(b) => Bytes::from(b),
                Err(e) => {
                    pending.push(Err(format!("encoding event {}: {e}", ev.id)));
                    continue;
                }
            };
            let msg = jetstream::message::PublishMessage::build()
                .payload(payload)
                .message_id(&ev.id);
            match self.js.send_publish(self.subject(ev), msg).await {
                Ok(fut) => pending.push(Ok(fut)),
                Err(e) => pending.push(Err(publish_error(&e.kind(), &e.to_string()))),
            }
        }
        let mut out = Vec::with_capacity(events.len());
        for p in pending {
            out.push(match p {
                Ok(fut) => fut
                    .await
                    .map(|_ack| ())
                    .map_err(|e| publish_error(&e.kind(), &e.to_string())),
                Err(e) => Err(e),
            });
        }
        out
    }

    /// Publishes one event and awaits its ack.
    pub async fn publish_one(&self, event: &StoredEvent) -> Result<(), String> {
        self.publish_window(std::slice::from_ref(event))
            .await
            .into_iter()
            .next()
            .unwrap_or_else(|| Err("no publish result".into()))
    }
}

fn publish_error(kind: &PublishErrorKind, msg: &str) -> String {
    format!("JetStream publish failed ({kind:?}): {msg}")
}
