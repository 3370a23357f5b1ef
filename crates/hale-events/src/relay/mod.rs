//! The relays: one task per sink moving events out of the outbox, in order,
//! at least once (docs/operations.md, "Events and sinks").
//!
//! Each relay keeps the sink's cursor in the store (`sink_cursor` /
//! `ack_sink`): it reads `events_after(cursor)`, delivers, and moves the
//! cursor only past events the sink acknowledged (or that it gave up on and
//! dead-lettered). A crash or restart therefore redelivers from the last
//! acknowledged event — receivers deduplicate by event id (webhooks get it in
//! a header, NATS in `Nats-Msg-Id`, which the stream itself deduplicates).
//! When caught up, a relay sleeps on the store's `watch_seq()` and also polls
//! every [`POLL_INTERVAL`] (events committed by another instance sharing a
//! PostgreSQL store are not signalled locally).
//!
//! Failures: dead letters are for bad events, not bad infrastructure. Each
//! failed attempt is judged by
//! `hale_core::delivery::verdict`.
//! - The sink is *down* (refused, timeout, 5xx, 408, 429, NATS disconnected,
//!   JetStream unavailable, a stream-wide JetStream error): the relay's
//!   [`SinkBreaker`](hale_core::delivery::SinkBreaker) opens and the relay
//!   waits — capped, jittered backoff ([`RelayTuning::down_backoff`]) — then
//!   tries the *same* event again. It attempts nothing else, counts no
//!   attempt against the event and dead-letters nothing, however long the
//!   outage; when the sink returns the backlog drains in order.
//! - The sink is up but *rejected this event* (a webhook's other 4xx, a
//!   JetStream error about the message): the event is tried up to
//!   `max_delivery_attempts` times ([`RelayTuning::retry_initial`] doubling
//!   up to [`RelayTuning::retry_max`] between tries), then copied to the dead
//!   letters (`hale dlq`), a `sink.dead_lettered` event is emitted (except for
//!   a `sink.dead_lettered` event itself, which would otherwise chain), and
//!   the relay moves on.
//!
//! Each relay publishes its [`SinkStatus`](hale_core::delivery::SinkStatus)
//! — state (up, down, half-open), backlog, age of the oldest undelivered
//! event, dead letters, last error — through [`Relays::stats`], for
//! `/ready`, `/metrics` and `hale doctor`.
//!
//! NATS is pipelined: a window of publishes, then their acks in order. After
//! a failed window the relay reconnects and restarts from the first
//! unacknowledged event with a window of one ("slow start"), so a stream that
//! is still recovering cannot store a later event before an earlier one.
//!
//! The outbox's hard cap is enforced every [`RelayTuning::shed_interval`]:
//! `shed_over_cap` drops the oldest undelivered events (down to the cap less
//! [`SHED_HEADROOM`], leaving room for the report); each shed is counted in
//! [`RelayStats::shed`] and reported by an `outbox.shed` event.
//!
//! The files: [`Relays`] and its constructors here; the knobs in `tuning`;
//! each sink's counters and status in `status`; the sinks and their
//! deliverers (with the NATS connection cache) in `sinks`; what the relay
//! tasks share in `shared`; the breaker-and-retry rule in `gate`; the two
//! relays in `http` and `nats`; the cap enforcer in `cap`; dead-letter replay
//! in `replay`.

mod cap;
mod gate;
mod http;
mod nats;
mod replay;
mod shared;
mod sinks;
mod status;
mod tuning;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use hale_core::config::{AlertingConfig, EventsConfig};
use hale_core::delivery::SinkKind;
use hale_core::event::EventKind;
use hale_store::Store;

use self::cap::run_cap;
use self::gate::Gate;
use self::http::HttpRelay;
use self::nats::NatsRelay;
use self::shared::Shared;
use self::sinks::{Deliverer, NatsConn, SinkHandle};
use self::status::Counters;
use crate::alert::AlertSink;
use crate::cluster::Cluster;
use crate::tasks::TaskSet;
use crate::webhook::{self, WebhookSink};

pub use self::cap::SHED_HEADROOM;
pub use self::replay::{ReplayItem, ReplayReport};
pub use self::shared::POLL_INTERVAL;
pub use self::status::RelayStats;
pub use self::tuning::{
    DEFAULT_BATCH, DEFAULT_RETRY_INITIAL, DEFAULT_RETRY_MAX, DEFAULT_SHED_INTERVAL, RelayTuning,
};

/// The running relays. Cheap to clone.
#[derive(Clone)]
pub struct Relays {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Relays {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Relays")
            .field("stats", &self.stats())
            .finish()
    }
}

/// Public names of the webhooks: `webhook:<host[:port]>`, with `#2`, `#3`…
/// for further hooks on the same host (names are metric labels: unique).
fn public_webhook_names(urls: &[&str]) -> Vec<String> {
    let mut seen: HashMap<String, u32> = HashMap::new();
    urls.iter()
        .map(|u| {
            let base = format!("webhook:{}", webhook::public_host(u));
            let n = seen.entry(base.clone()).or_insert(0);
            *n += 1;
            if *n == 1 { base } else { format!("{base}#{n}") }
        })
        .collect()
}

impl Relays {
    /// Registers every configured sink and starts its relay task (named
    /// `relay:<sink>`) plus the cap enforcer (`outbox-cap`) in `tasks`.
    /// Cursors of webhook/NATS sinks no longer in the config are forgotten,
    /// so they stop holding back pruning.
    pub async fn start(
        store: Store,
        cfg: &EventsConfig,
        tasks: &TaskSet,
    ) -> anyhow::Result<Relays> {
        Self::start_with(store, cfg, tasks, RelayTuning::default()).await
    }

    /// [`Relays::start`] with other timings.
    pub fn start_with<'a>(
        store: Store,
        cfg: &'a EventsConfig,
        tasks: &'a TaskSet,
        tuning: RelayTuning,
    ) -> futures::future::BoxFuture<'a, anyhow::Result<Relays>> {
        Box::pin(Self::start_with_inner(store, cfg, tasks, tuning))
    }

    async fn start_with_inner(
        store: Store,
        cfg: &EventsConfig,
        tasks: &TaskSet,
        tuning: RelayTuning,
    ) -> anyhow::Result<Relays> {
        Self::start_inner(store, cfg, &AlertingConfig::default(), tasks, tuning, None).await
    }

    /// [`Relays::start_with`] plus one relay per `alerting:` channel
    /// (`relay:slack:<name>`, `relay:pagerduty:<name>`), relayed like a
    /// webhook ([`crate::alert`]).
    pub fn start_with_alerting<'a>(
        store: Store,
        cfg: &'a EventsConfig,
        alerting: &'a AlertingConfig,
        tasks: &'a TaskSet,
        tuning: RelayTuning,
    ) -> futures::future::BoxFuture<'a, anyhow::Result<Relays>> {
        Box::pin(Self::start_with_alerting_inner(
            store, cfg, alerting, tasks, tuning,
        ))
    }

    async fn start_with_alerting_inner(
        store: Store,
        cfg: &EventsConfig,
        alerting: &AlertingConfig,
        tasks: &TaskSet,
        tuning: RelayTuning,
    ) -> anyhow::Result<Relays> {
        Self::start_inner(store, cfg, alerting, tasks, tuning, None).await
    }

    /// [`Relays::start_with_alerting`] for an instance among others on one
    /// database: each sink's relay (alert channels included) runs only while
    /// this instance holds the sink's lease (`relay:<sink>`,
    /// `hale_core::lease::relay_lease`), and starts from the sink's stored
    /// cursor each time the lease is taken.
    pub fn start_leased<'a>(
        store: Store,
        cfg: &'a EventsConfig,
        alerting: &'a AlertingConfig,
        tasks: &'a TaskSet,
        cluster: &'a Cluster,
    ) -> futures::future::BoxFuture<'a, anyhow::Result<Relays>> {
        Box::pin(Self::start_leased_inner(
            store, cfg, alerting, tasks, cluster,
        ))
    }

    async fn start_leased_inner(
        store: Store,
        cfg: &EventsConfig,
        alerting: &AlertingConfig,
        tasks: &TaskSet,
        cluster: &Cluster,
    ) -> anyhow::Result<Relays> {
        Self::start_inner(
            store,
            cfg,
            alerting,
            tasks,
            RelayTuning::default(),
            Some(cluster),
        )
        .await
    }

    async fn start_inner(
        store: Store,
        cfg: &EventsConfig,
        alerting: &AlertingConfig,
        tasks: &TaskSet,
        tuning: RelayTuning,
        cluster: Option<&Cluster>,
    ) -> anyhow::Result<Relays> {
        let max_attempts = cfg.max_delivery_attempts.max(1);
        let mut sinks = Vec::new();
        let mut webhook_tasks = Vec::new();
        let urls: Vec<&str> = cfg.webhooks.iter().map(|h| h.url.as_str()).collect();
        for (hook, public) in cfg.webhooks.iter().zip(public_webhook_names(&urls)) {
            let name = WebhookSink::sink_name(&hook.url);
            let kinds = parse_kinds(&hook.kinds)?;
            let sink = Arc::new(WebhookSink::new(hook, tuning.webhook_timeout)?);
            store.register_sink(&name).await?;
            let counters = Counters::new(name, public, SinkKind::Webhook);
            let deliverer = Deliverer::Webhook(sink);
            webhook_tasks.push((deliverer.clone(), kinds, counters.clone()));
            sinks.push(SinkHandle {
                counters,
                deliverer,
            });
        }
        for ch in &alerting.channels {
            let sink = Arc::new(AlertSink::new(ch, alerting, tuning.webhook_timeout)?);
            let name = sink.name().to_owned();
            store.register_sink(&name).await?;
            let counters = Counters::new(name.clone(), name, AlertSink::kind_of(ch));
            let deliverer = Deliverer::Alert(sink.clone());
            webhook_tasks.push((deliverer.clone(), Some(sink.kinds()), counters.clone()));
            sinks.push(SinkHandle {
                counters,
                deliverer,
            });
        }
        let mut nats_task = None;
        if let Some(n) = &cfg.nats {
            store.register_sink(crate::nats::SINK_NAME).await?;
            let conn = Arc::new(NatsConn {
                cfg: n.clone(),
                ack_timeout: tuning.nats_ack_timeout,
                sink: tokio::sync::Mutex::new(None),
            });
            let counters = Counters::new(
                crate::nats::SINK_NAME.to_string(),
                crate::nats::SINK_NAME.to_string(),
                SinkKind::Nats,
            );
            nats_task = Some((conn.clone(), counters.clone()));
            sinks.push(SinkHandle {
                counters,
                deliverer: Deliverer::Nats(conn),
            });
        }
        // A sink dropped from the config would hold back pruning forever.
        for old in store.sinks().await? {
            let owned = old.sink.starts_with("webhook:")
                || old.sink == crate::nats::SINK_NAME
                || AlertSink::owns(&old.sink);
            if owned && !sinks.iter().any(|s| s.counters.name == old.sink) {
                tracing::warn!(sink = %old.sink, acked_seq = old.acked_seq, "sink no longer configured; forgetting its cursor (its dead letters stay)");
                store.remove_sink(&old.sink).await?;
            }
        }
        for s in &sinks {
            let c = store.sink_cursor(&s.counters.name).await?;
            s.counters.cursor.store(c, Ordering::Relaxed);
            let letters = store.dlq_list(Some(&s.counters.name)).await?.len();
            s.counters
                .dead_letters
                .store(letters as u64, Ordering::Relaxed);
        }
        let shared = Arc::new(Shared {
            store,
            tuning,
            max_attempts,
            sinks,
            shed: AtomicU64::new(0),
        });
        for (sink, kinds, counters) in webhook_tasks {
            let task_name = format!("relay:{}", counters.public);
            let lease = hale_core::lease::relay_lease(&counters.public);
            let shared = shared.clone();
            let make = move |token| {
                HttpRelay {
                    sink: sink.clone(),
                    kinds: kinds.clone(),
                    gate: Gate::new(shared.clone(), counters.clone(), token),
                }
                .run()
            };
            match cluster {
                Some(c) => {
                    tasks.spawn(task_name, c.clone().while_held(lease, tasks.token(), make));
                }
                None => tasks.spawn(task_name, make(tasks.token())),
            }
        }
        if let Some((conn, counters)) = nats_task {
            let task_name = format!("relay:{}", crate::nats::SINK_NAME);
            let shared = shared.clone();
            let make = move |token| {
                NatsRelay {
                    conn: conn.clone(),
                    gate: Gate::new(shared.clone(), counters.clone(), token),
                }
                .run()
            };
            match cluster {
                Some(c) => {
                    let lease = hale_core::lease::relay_lease(crate::nats::SINK_NAME);
                    tasks.spawn(task_name, c.clone().while_held(lease, tasks.token(), make));
                }
                None => tasks.spawn(task_name, make(tasks.token())),
            }
        }
        tasks.spawn(
            "outbox-cap",
            run_cap(shared.clone(), cfg.outbox_cap, tasks.token()),
        );
        Ok(Relays { shared })
    }

    /// Every sink's status and the shed count.
    pub fn stats(&self) -> RelayStats {
        let latest = *self.shared.store.watch_seq().borrow();
        let now = crate::now_ms();
        RelayStats {
            sinks: self
                .shared
                .sinks
                .iter()
                .map(|s| s.counters.status(latest, now))
                .collect(),
            shed: self.shared.shed.load(Ordering::Relaxed),
        }
    }

    /// The store the relays read.
    pub fn store(&self) -> &Store {
        &self.shared.store
    }
}

fn parse_kinds(kinds: &[String]) -> anyhow::Result<Option<Vec<EventKind>>> {
    if kinds.is_empty() {
        return Ok(None);
    }
    kinds
        .iter()
        .map(|k| {
            EventKind::parse(k)
                .ok_or_else(|| anyhow::anyhow!("unknown event kind {k:?} in a webhook's kinds"))
        })
        .collect::<anyhow::Result<Vec<_>>>()
        .map(Some)
}
