//! NATS JetStream sink (docs/operations.md, "Events and sinks").
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
//! On every new connection the relay first asks [`JetStreamSink::stored_prefix`]
//! which of its pending events the stream already stored (their acks lost),
//! and skips them: the server's deduplication only remembers ids for
//! [`DUPLICATE_WINDOW`], an outage can last longer.

use std::time::Duration;

use async_nats::ConnectErrorKind;
use async_nats::jetstream::{
    self,
    context::{CreateStreamErrorKind, PublishError, PublishErrorKind},
    stream,
};
use bytes::Bytes;
use hale_core::config::NatsConfig;
use hale_core::delivery::DeliveryFailure;
use hale_core::event::Event;
use hale_store::StoredEvent;

use crate::DeliveryError;

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
    stream: stream::Stream,
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
    /// `{prefix}.>`. Every failure here is the sink's (unreachable, no
    /// JetStream, a stream that cannot be created as configured).
    pub async fn connect(cfg: &NatsConfig, ack_timeout: Duration) -> Result<Self, DeliveryError> {
        let client = async_nats::ConnectOptions::new()
            .max_reconnects(MAX_RECONNECTS)
            .connection_timeout(CONNECT_TIMEOUT)
            .connect(cfg.url.as_str())
            .await
            .map_err(|e| {
                let failure = match e.kind() {
                    ConnectErrorKind::TimedOut => DeliveryFailure::Timeout,
                    ConnectErrorKind::ServerParse
                    | ConnectErrorKind::Authentication
                    | ConnectErrorKind::AuthorizationViolation
                    | ConnectErrorKind::Tls => DeliveryFailure::Misconfigured,
                    ConnectErrorKind::Dns
                    | ConnectErrorKind::Io
                    | ConnectErrorKind::MaxReconnects => DeliveryFailure::Unreachable,
                };
                DeliveryError::new(failure, format!("connecting to NATS at {}: {e}", cfg.url))
            })?;
        let js = jetstream::ContextBuilder::new()
            .timeout(ack_timeout)
            .max_ack_inflight(DEFAULT_WINDOW * 8)
            .backpressure_on_inflight(true)
            .build(client.clone());
        let stream = js
            .get_or_create_stream(stream::Config {
                name: cfg.stream.clone(),
                subjects: vec![format!("{}.>", cfg.subject_prefix)],
                duplicate_window: DUPLICATE_WINDOW,
                ..Default::default()
            })
            .await
            .map_err(|e| {
                let failure = match e.kind() {
                    CreateStreamErrorKind::JetStreamUnavailable => DeliveryFailure::NoResponders,
                    CreateStreamErrorKind::TimedOut => DeliveryFailure::Timeout,
                    CreateStreamErrorKind::Response | CreateStreamErrorKind::ResponseParse => {
                        DeliveryFailure::BadAnswer
                    }
                    CreateStreamErrorKind::EmptyStreamName
                    | CreateStreamErrorKind::InvalidStreamName
                    | CreateStreamErrorKind::DomainAndExternalSet
                    | CreateStreamErrorKind::NotFound
                    | CreateStreamErrorKind::JetStream(_) => DeliveryFailure::Misconfigured,
                };
                DeliveryError::new(
                    failure,
                    format!("getting or creating stream {}: {e}", cfg.stream),
                )
            })?;
        Ok(JetStreamSink {
            client,
            js,
            stream,
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

    /// How many of `ids` — the relay's next events, in order, from its first
    /// unacknowledged one — the stream already holds as its last messages:
    /// stored before their acks were lost (a killed server, a crashed
    /// relay). The stream's tail must be exactly `ids[..n]`, message after
    /// message. Anything else (a gap, another publisher's message, an empty
    /// or purged stream, an error) answers 0 and the relay republishes,
    /// leaving duplicates to the stream's duplicate window. This is what
    /// keeps an outage longer than [`DUPLICATE_WINDOW`] free of duplicates.
    pub async fn stored_prefix(&self, ids: &[&str]) -> usize {
        let mut stream = self.stream.clone();
        let Ok(info) = stream.info().await else {
            return 0;
        };
        let (first, last) = (info.state.first_sequence, info.state.last_sequence);
        if last == 0 || ids.is_empty() {
            return 0;
        }
        let Some(last_id) = msg_id(&stream, last).await else {
            return 0;
        };
        let Some(j) = ids.iter().position(|i| *i == last_id) else {
            return 0;
        };
        for k in (0..j).rev() {
            let seq = last - (j - k) as u64;
            if seq < first.max(1) || msg_id(&stream, seq).await.as_deref() != Some(ids[k]) {
                return 0;
            }
        }
        j + 1
    }

    /// Publishes every event, then awaits the acks in order. One result per
    /// event, in order.
    pub async fn publish_window(&self, events: &[StoredEvent]) -> Vec<Result<(), DeliveryError>> {
        let mut pending = Vec::with_capacity(events.len());
        for se in events {
            let ev = &se.event;
            let payload = match serde_json::to_vec(ev) {
                Ok(b) => Bytes::from(b),
                Err(e) => {
                    pending.push(Err(DeliveryError::new(
                        DeliveryFailure::Unencodable,
                        format!("encoding event {}: {e}", ev.id),
                    )));
                    continue;
                }
            };
            let msg = jetstream::message::PublishMessage::build()
                .payload(payload)
                .message_id(&ev.id);
            match self.js.send_publish(self.subject(ev), msg).await {
                Ok(fut) => pending.push(Ok(fut)),
                Err(e) => pending.push(Err(publish_error(&e))),
            }
        }
        let mut out = Vec::with_capacity(events.len());
        for p in pending {
            out.push(match p {
                Ok(fut) => fut.await.map(|_ack| ()).map_err(|e| publish_error(&e)),
                Err(e) => Err(e),
            });
        }
        out
    }

    /// Publishes one event and awaits its ack.
    pub async fn publish_one(&self, event: &StoredEvent) -> Result<(), DeliveryError> {
        self.publish_window(std::slice::from_ref(event))
            .await
            .into_iter()
            .next()
            .unwrap_or_else(|| {
                Err(DeliveryError::new(
                    DeliveryFailure::BadAnswer,
                    "no publish result",
                ))
            })
    }
}

/// The `Nats-Msg-Id` of the stream's message `seq`, if it is there.
async fn msg_id(stream: &stream::Stream, seq: u64) -> Option<String> {
    let m = stream.get_raw_message(seq).await.ok()?;
    m.headers
        .get(async_nats::header::NATS_MESSAGE_ID)
        .map(|v| v.as_str().to_string())
}

/// A publish error as a [`DeliveryFailure`]: JetStream's own answers by
/// their `err_code`, the client's by kind.
fn publish_error(e: &PublishError) -> DeliveryError {
    let api = || {
        std::error::Error::source(e)
            .and_then(|s| s.downcast_ref::<jetstream::Error>())
            .map(|j| j.error_code().0)
    };
    let failure = match e.kind() {
        PublishErrorKind::StreamNotFound => DeliveryFailure::NoResponders,
        PublishErrorKind::WrongLastMessageId => DeliveryFailure::JetStreamError(
            api().unwrap_or(hale_core::delivery::jetstream_codes::WRONG_LAST_MESSAGE_ID),
        ),
        PublishErrorKind::WrongLastSequence => DeliveryFailure::JetStreamError(
            api().unwrap_or(hale_core::delivery::jetstream_codes::WRONG_LAST_SEQUENCE),
        ),
        PublishErrorKind::TimedOut => DeliveryFailure::Timeout,
        PublishErrorKind::BrokenPipe => DeliveryFailure::Unreachable,
        PublishErrorKind::MaxAckPending => DeliveryFailure::Backpressure,
        PublishErrorKind::MaxPayloadExceeded => DeliveryFailure::PayloadTooLarge,
        // A JetStream API error, or the client's own trouble (the
        // connection's command channel closed, an unparsable ack).
        PublishErrorKind::Other => match api() {
            Some(code) => DeliveryFailure::JetStreamError(code),
            None => DeliveryFailure::Unreachable,
        },
    };
    DeliveryError::new(
        failure,
        format!("JetStream publish failed ({:?}): {e}", e.kind()),
    )
}
