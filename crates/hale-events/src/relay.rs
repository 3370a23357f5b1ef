//! The relays: one task per sink moving events out of the outbox, in order,
//! at least once (DESIGN §6).
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
//! Failures (DESIGN §6 "Dead letters are for bad events, not bad
//! infrastructure"): each failed attempt is judged by
//! `hale_core::delivery::verdict`.
//! - The sink is *down* (refused, timeout, 5xx, 408, 429, NATS disconnected,
//!   JetStream unavailable, a stream-wide JetStream error): the relay's
//!   [`SinkBreaker`] opens and the relay waits — capped, jittered backoff
//!   ([`RelayTuning::down_backoff`]) — then tries the *same* event again. It
//!   attempts nothing else, counts no attempt against the event and
//!   dead-letters nothing, however long the outage; when the sink returns the
//!   backlog drains in order.
//! - The sink is up but *rejected this event* (a webhook's other 4xx, a
//!   JetStream error about the message): the event is tried up to
//!   `max_delivery_attempts` times ([`RelayTuning::retry_initial`] doubling
//!   up to [`RelayTuning::retry_max`] between tries), then copied to the dead
//!   letters (`hale dlq`), a `sink.dead_lettered` event is emitted (except for
//!   a `sink.dead_lettered` event itself, which would otherwise chain), and
//!   the relay moves on.
//!
//! Each relay publishes its [`SinkStatus`] — state (up, down, half-open),
//! backlog, age of the oldest undelivered event, dead letters, last error —
//! through [`Relays::stats`], for `/ready`, `/metrics` and `hale doctor`.
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

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hale_core::config::{AlertingConfig, EventsConfig, NatsConfig};
use hale_core::delivery::{
    DownBackoff, RejectionStep, SinkBreaker, SinkKind, SinkState, SinkStatus, Verdict,
    after_rejection, verdict,
};
use hale_core::event::{Event, EventKind};
use hale_store::{Store, StoreError, StoredEvent, Write};
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::DeliveryError;
use crate::alert::AlertSink;
use crate::cluster::Cluster;
use crate::nats::{self, JetStreamSink};
use crate::tasks::TaskSet;
use crate::webhook::{self, WebhookSink};

/// First pause after a sink rejected an event; doubles per attempt.
pub const DEFAULT_RETRY_INITIAL: Duration = Duration::from_millis(500);
/// Longest pause between two attempts of a rejected event.
pub const DEFAULT_RETRY_MAX: Duration = Duration::from_secs(5);
/// Events read from the outbox per query.
pub const DEFAULT_BATCH: usize = 1024;
/// How often the outbox cap is enforced.
pub const DEFAULT_SHED_INTERVAL: Duration = Duration::from_secs(1);
/// A caught-up relay re-reads the outbox at least this often.
pub const POLL_INTERVAL: Duration = Duration::from_secs(1);
/// Room kept under the outbox cap after a shed, for the `outbox.shed` report.
pub const SHED_HEADROOM: u64 = 1;

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

/// The status of every relay.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RelayStats {
    pub sinks: Vec<SinkStatus>,
    /// Undelivered events shed at the outbox cap since start.
    pub shed: u64,
}

/// What one relay shares with [`Relays::stats`].
#[derive(Debug)]
struct Counters {
    /// The store's name of the sink (cursor, dead letters); may hold a URL.
    name: String,
    /// The name shown publicly.
    public: String,
    kind: SinkKind,
    delivered: AtomicU64,
    failed: AtomicU64,
    dead_lettered: AtomicU64,
    /// Dead letters of this sink in the store now.
    dead_letters: AtomicU64,
    cursor: AtomicI64,
    /// A [`SinkState`] as `state_code`.
    state: AtomicU8,
    /// `time_ms` of the event being delivered; 0 = none.
    head_time_ms: AtomicU64,
    last_error: Mutex<Option<String>>,
}

fn state_code(s: SinkState) -> u8 {
    match s {
        SinkState::Up => 0,
        SinkState::Down => 1,
        SinkState::HalfOpen => 2,
    }
}

fn state_of(code: u8) -> SinkState {
    match code {
        1 => SinkState::Down,
        2 => SinkState::HalfOpen,
        // 0 is the only other value ever stored.
        _up => SinkState::Up,
    }
}

impl Counters {
    fn new(name: String, public: String, kind: SinkKind) -> Arc<Self> {
        Arc::new(Counters {
            name,
            public,
            kind,
            delivered: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            dead_lettered: AtomicU64::new(0),
            dead_letters: AtomicU64::new(0),
            cursor: AtomicI64::new(0),
            state: AtomicU8::new(state_code(SinkState::Up)),
            head_time_ms: AtomicU64::new(0),
            last_error: Mutex::new(None),
        })
    }

    fn state(&self) -> SinkState {
        state_of(self.state.load(Ordering::Relaxed))
    }

    /// Records the state; logs the transitions an operator cares about.
    fn set_state(&self, new: SinkState) {
        let old = state_of(self.state.swap(state_code(new), Ordering::Relaxed));
        match (old, new) {
            (SinkState::Up, SinkState::Down) => tracing::warn!(
                sink = %self.public,
                error = self.last_error().unwrap_or_default(),
                "sink down: holding its events (nothing is dead-lettered) until it answers"
            ),
            (SinkState::Down | SinkState::HalfOpen, SinkState::Up) => tracing::info!(
                sink = %self.public,
                "sink back: draining its backlog in order"
            ),
            (SinkState::Up, SinkState::Up | SinkState::HalfOpen)
            | (SinkState::Down, SinkState::Down | SinkState::HalfOpen)
            | (SinkState::HalfOpen, SinkState::Down | SinkState::HalfOpen) => {}
        }
    }

    fn last_error(&self) -> Option<String> {
        self.last_error
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    fn set_error(&self, e: Option<&str>) {
        *self
            .last_error
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = e.map(str::to_string);
    }

    /// The relay is working on `se` (the oldest event it has not delivered).
    fn note_head(&self, se: &StoredEvent) {
        self.head_time_ms
            .store(se.event.time_ms.max(1), Ordering::Relaxed);
    }

    fn clear_head(&self) {
        self.head_time_ms.store(0, Ordering::Relaxed);
    }

    fn status(&self, latest_seq: i64, now_ms: u64) -> SinkStatus {
        let cursor = self.cursor.load(Ordering::Relaxed);
        let backlog = u64::try_from(latest_seq.saturating_sub(cursor)).unwrap_or(0);
        let head = self.head_time_ms.load(Ordering::Relaxed);
        SinkStatus {
            name: self.public.clone(),
            kind: self.kind,
            state: self.state(),
            backlog,
            oldest_undelivered_age_ms: (backlog > 0 && head > 0)
                .then(|| now_ms.saturating_sub(head)),
            dead_letters: self.dead_letters.load(Ordering::Relaxed),
            last_error: self.last_error(),
            delivered: self.delivered.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
            dead_lettered: self.dead_lettered.load(Ordering::Relaxed),
            cursor,
        }
    }
}

/// A NATS connection made on first use and remade after it broke.
struct NatsConn {
    cfg: NatsConfig,
    ack_timeout: Duration,
    sink: tokio::sync::Mutex<Option<JetStreamSink>>,
}

impl NatsConn {
    async fn get(&self) -> Result<JetStreamSink, DeliveryError> {
        self.get_fresh().await.map(|(s, _)| s)
    }

    /// The connection, and whether it was just made.
    async fn get_fresh(&self) -> Result<(JetStreamSink, bool), DeliveryError> {
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

    async fn reset(&self) {
        *self.sink.lock().await = None;
    }
}

#[derive(Clone)]
enum Deliverer {
    Webhook(Arc<WebhookSink>),
    /// An `alerting:` channel: an HTTP sink like a webhook.
    Alert(Arc<AlertSink>),
    Nats(Arc<NatsConn>),
}

impl Deliverer {
    async fn deliver_one(&self, se: &StoredEvent) -> Result<(), DeliveryError> {
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

struct SinkHandle {
    counters: Arc<Counters>,
    deliverer: Deliverer,
}

struct Shared {
    store: Store,
    tuning: RelayTuning,
    max_attempts: u32,
    sinks: Vec<SinkHandle>,
    shed: AtomicU64,
}

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

/// What a replay did, per event, in seq order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct ReplayReport {
    pub delivered: Vec<ReplayItem>,
    /// Failed, or not attempted because an earlier event of the same sink
    /// failed (kept in the dead letters, so order is preserved).
    pub failed: Vec<ReplayItem>,
}

/// One replayed dead letter.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct ReplayItem {
    pub id: String,
    pub seq: i64,
    pub sink: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
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
    pub async fn start_with(
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
    pub async fn start_with_alerting(
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
    pub async fn start_leased(
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
            store.register_sink(nats::SINK_NAME).await?;
            let conn = Arc::new(NatsConn {
                cfg: n.clone(),
                ack_timeout: tuning.nats_ack_timeout,
                sink: tokio::sync::Mutex::new(None),
            });
            let counters = Counters::new(
                nats::SINK_NAME.to_string(),
                nats::SINK_NAME.to_string(),
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
                || old.sink == nats::SINK_NAME
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
            let task_name = format!("relay:{}", nats::SINK_NAME);
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
                    let lease = hale_core::lease::relay_lease(nats::SINK_NAME);
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

    /// Re-delivers dead letters — of `sink` or of every sink, all or only
    /// `ids` — in their original seq order with their original ids. An event
    /// leaves the dead letters only once its sink acknowledged it. A
    /// rejection is retried up to `max_delivery_attempts` times; a sink that
    /// is down stops that sink's replay at once. After a failure the rest of
    /// that sink's letters stay put, so order holds.
    pub async fn replay(
        &self,
        sink: Option<&str>,
        ids: Option<&[String]>,
    ) -> anyhow::Result<ReplayReport> {
        let store = &self.shared.store;
        let mut letters = store.dlq_list(sink).await?;
        if let Some(ids) = ids {
            letters.retain(|d| ids.contains(&d.id));
        }
        let mut sinks: Vec<String> = letters.iter().map(|d| d.sink.clone()).collect();
        sinks.sort();
        sinks.dedup();
        let mut report = ReplayReport::default();
        for name in sinks {
            let handle = self.shared.sinks.iter().find(|s| s.counters.name == name);
            let mut stopped: Option<String> = None;
            for d in letters.iter().filter(|d| d.sink == name) {
                let item = |error: Option<String>| ReplayItem {
                    id: d.id.clone(),
                    seq: d.seq,
                    sink: name.clone(),
                    error,
                };
                let Some(handle) = handle else {
                    report.failed.push(item(Some(format!(
                        "no relay for sink {name} runs in this process"
                    ))));
                    continue;
                };
                if let Some(first) = &stopped {
                    report.failed.push(item(Some(format!(
                        "not attempted: earlier event {first} of this sink failed (kept in order)"
                    ))));
                    continue;
                }
                let se = StoredEvent {
                    seq: d.seq,
                    event: d.event.clone(),
                };
                let mut last_err = String::new();
                let mut rejections = 0u32;
                let ok = loop {
                    let e = match handle.deliverer.deliver_one(&se).await {
                        Ok(()) => break true,
                        Err(e) => e,
                    };
                    handle.counters.failed.fetch_add(1, Ordering::Relaxed);
                    match verdict(e.failure) {
                        Verdict::SinkDown => {
                            last_err = format!("sink down: {}", e.message);
                            break false;
                        }
                        Verdict::EventRejected => {
                            last_err = e.message;
                            rejections += 1;
                            match after_rejection(
                                rejections,
                                self.shared.max_attempts,
                                self.shared.tuning.retry_initial,
                                self.shared.tuning.retry_max,
                            ) {
                                RejectionStep::DeadLetter => break false,
                                RejectionStep::RetryAfter(pause) => {
                                    tokio::time::sleep(pause).await;
                                }
                            }
                        }
                    }
                };
                if ok {
                    handle.counters.delivered.fetch_add(1, Ordering::Relaxed);
                    let taken = store
                        .dlq_take(&name, Some(std::slice::from_ref(&d.id)))
                        .await?;
                    let _ = handle.counters.dead_letters.fetch_update(
                        Ordering::Relaxed,
                        Ordering::Relaxed,
                        |n| Some(n.saturating_sub(taken.len() as u64)),
                    );
                    report.delivered.push(item(None));
                } else {
                    let attempts = d.attempts.saturating_add(rejections);
                    match store.dead_letter(&name, d.seq, attempts, &last_err).await {
                        // The event left the outbox since: the old letter stays as it was.
                        Ok(()) | Err(StoreError::NoSuchEvent(_)) => {}
                        Err(e) => {
                            tracing::warn!(sink = %name, id = %d.id, error = %e, "cannot update a dead letter")
                        }
                    }
                    stopped = Some(d.id.clone());
                    report.failed.push(item(Some(last_err)));
                }
            }
        }
        Ok(report)
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

/// Sleeps `d` unless cancelled first; false when cancelled.
async fn pause(token: &CancellationToken, d: Duration) -> bool {
    tokio::select! {
        _ = token.cancelled() => false,
        _ = tokio::time::sleep(d) => true,
    }
}

/// Waits for a new commit, the poll interval, or cancellation (false).
async fn wait_for_more(
    token: &CancellationToken,
    watch: &mut tokio::sync::watch::Receiver<i64>,
) -> anyhow::Result<bool> {
    tokio::select! {
        _ = token.cancelled() => Ok(false),
        r = watch.changed() => r.map(|_| true).map_err(|_| anyhow::anyhow!("the store was closed")),
        _ = tokio::time::sleep(POLL_INTERVAL) => Ok(true),
    }
}

/// Store errors while relaying: a closed store ends the relay; anything else
/// is logged and retried after a pause.
fn store_trouble(sink: &str, e: StoreError) -> anyhow::Result<()> {
    match e {
        StoreError::Closed => Err(anyhow::anyhow!("the store was closed under relay {sink}")),
        other => {
            tracing::warn!(sink, error = %other, "outbox read/ack failed; retrying");
            Ok(())
        }
    }
}

impl Shared {
    async fn ack(&self, counters: &Counters, seq: i64) -> anyhow::Result<()> {
        if let Err(e) = self.store.ack_sink(&counters.name, seq).await {
            store_trouble(&counters.name, e)?;
        }
        counters.cursor.store(seq, Ordering::Relaxed);
        Ok(())
    }

    async fn dead_letter(&self, counters: &Counters, se: &StoredEvent, attempts: u32, error: &str) {
        tracing::warn!(sink = %counters.public, id = %se.event.id, seq = se.seq, attempts, error, "event rejected by the sink; dead-lettered");
        match self
            .store
            .dead_letter(&counters.name, se.seq, attempts, error)
            .await
        {
            Ok(()) => {
                counters.dead_letters.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                tracing::error!(sink = %counters.public, id = %se.event.id, error = %e, "cannot dead-letter an event")
            }
        }
        counters.dead_lettered.fetch_add(1, Ordering::Relaxed);
        if se.event.kind != EventKind::SinkDeadLettered {
            let ev = Event::new(
                EventKind::SinkDeadLettered,
                crate::now_ms(),
                &mut rand::rng(),
            )
            .payload(serde_json::json!({
                "sink": counters.public,
                "event_id": se.event.id,
                "event_kind": se.event.kind.as_str(),
                "seq": se.seq,
                "attempts": attempts,
                "error": error,
            }));
            self.store.submit(vec![Write::Event(ev)]);
        }
    }
}

/// What a relay does with the first undelivered event after it failed.
enum HeadStep {
    /// Try it again (the breaker says when).
    Retry,
    /// It was dead-lettered: move the cursor past it.
    DeadLettered,
    Cancelled,
}

/// The part every relay shares: the sink's breaker, its counters and the
/// rule of the module docs.
struct Gate {
    shared: Arc<Shared>,
    counters: Arc<Counters>,
    breaker: SinkBreaker,
    token: CancellationToken,
}

impl Gate {
    fn new(shared: Arc<Shared>, counters: Arc<Counters>, token: CancellationToken) -> Self {
        let breaker = SinkBreaker::new(shared.tuning.down_backoff);
        Gate {
            shared,
            counters,
            breaker,
            token,
        }
    }

    /// Waits while the sink is down; false when cancelled meanwhile.
    async fn wait_turn(&self) -> bool {
        loop {
            match self.breaker.wait(Instant::now()) {
                Some(wait) => {
                    self.counters.set_state(SinkState::Down);
                    if !pause(&self.token, wait).await {
                        return false;
                    }
                }
                None => {
                    self.counters.set_state(self.breaker.state(Instant::now()));
                    return true;
                }
            }
        }
    }

    /// The sink acknowledged `n` events.
    fn delivered(&mut self, n: u64) {
        self.breaker.on_success();
        self.counters.delivered.fetch_add(n, Ordering::Relaxed);
        self.counters.set_error(None);
        self.counters.set_state(SinkState::Up);
    }

    /// `se`, the first undelivered event, failed with `e` (its
    /// `attempts`-th rejection so far is counted here).
    async fn head_failed(
        &mut self,
        se: &StoredEvent,
        e: &DeliveryError,
        attempts: &mut u32,
    ) -> HeadStep {
        self.counters.failed.fetch_add(1, Ordering::Relaxed);
        self.counters.set_error(Some(&e.message));
        let v = verdict(e.failure);
        self.breaker.on_failure(v, Instant::now(), &mut rand::rng());
        match v {
            Verdict::SinkDown => {
                tracing::debug!(sink = %self.counters.public, id = %se.event.id, failures = self.breaker.failures(), error = %e, "sink down");
                self.counters.set_state(SinkState::Down);
                HeadStep::Retry
            }
            Verdict::EventRejected => {
                self.counters.set_state(SinkState::Up);
                *attempts += 1;
                tracing::debug!(sink = %self.counters.public, id = %se.event.id, attempts = *attempts, error = %e, "event rejected");
                let sh = &self.shared;
                match after_rejection(
                    *attempts,
                    sh.max_attempts,
                    sh.tuning.retry_initial,
                    sh.tuning.retry_max,
                ) {
                    RejectionStep::DeadLetter => {
                        sh.dead_letter(&self.counters, se, *attempts, &e.message)
                            .await;
                        HeadStep::DeadLettered
                    }
                    RejectionStep::RetryAfter(d) => {
                        if pause(&self.token, d).await {
                            HeadStep::Retry
                        } else {
                            HeadStep::Cancelled
                        }
                    }
                }
            }
        }
    }

    /// The sink's cursor from the store, retried while the store has trouble.
    async fn initial_cursor(&self) -> anyhow::Result<Option<i64>> {
        let sh = &self.shared;
        loop {
            match sh.store.sink_cursor(&self.counters.name).await {
                Ok(c) => return Ok(Some(c)),
                Err(e) => {
                    store_trouble(&self.counters.name, e)?;
                    if !pause(&self.token, sh.tuning.retry_max).await {
                        return Ok(None);
                    }
                }
            }
        }
    }

    async fn ack(&self, seq: i64) -> anyhow::Result<()> {
        self.shared.ack(&self.counters, seq).await
    }
}

/// The relay of one HTTP sink: a webhook or an alert channel.
struct HttpRelay {
    sink: Deliverer,
    kinds: Option<Vec<EventKind>>,
    gate: Gate,
}

enum Outcome {
    Done,
    Cancelled,
}

impl HttpRelay {
    async fn run(mut self) -> anyhow::Result<()> {
        let sh = self.gate.shared.clone();
        let name = self.gate.counters.name.clone();
        let token = self.gate.token.clone();
        let mut watch = sh.store.watch_seq();
        let Some(mut cursor) = self.gate.initial_cursor().await? else {
            return Ok(());
        };
        loop {
            if token.is_cancelled() {
                return Ok(());
            }
            let target = *watch.borrow_and_update();
            let batch = match sh
                .store
                .events_after(cursor, sh.tuning.batch, self.kinds.as_deref())
                .await
            {
                Ok(b) => b,
                Err(e) => {
                    store_trouble(&name, e)?;
                    if !pause(&token, sh.tuning.retry_max).await {
                        return Ok(());
                    }
                    continue;
                }
            };
            let full = batch.len() >= sh.tuning.batch;
            for se in &batch {
                match self.deliver(se).await {
                    Outcome::Done => {}
                    Outcome::Cancelled => return Ok(()),
                }
                cursor = se.seq;
                self.gate.ack(cursor).await?;
            }
            // A short read covered everything committed up to `target`;
            // events of other kinds up to there are done for this sink.
            if !full && target > cursor {
                cursor = target;
                self.gate.ack(cursor).await?;
            }
            if batch.is_empty() {
                self.gate.counters.clear_head();
                if !wait_for_more(&token, &mut watch).await? {
                    return Ok(());
                }
            }
        }
    }

    /// Delivers one event: waits out a down sink, retries a rejection, and
    /// dead-letters it after the last rejected attempt.
    async fn deliver(&mut self, se: &StoredEvent) -> Outcome {
        self.gate.counters.note_head(se);
        let mut attempts = 0u32;
        loop {
            if !self.gate.wait_turn().await {
                return Outcome::Cancelled;
            }
            let result = tokio::select! {
                _ = self.gate.token.cancelled() => return Outcome::Cancelled,
                r = self.sink.deliver_one(se) => r,
            };
            let e = match result {
                Ok(()) => {
                    self.gate.delivered(1);
                    return Outcome::Done;
                }
                Err(e) => e,
            };
            match self.gate.head_failed(se, &e, &mut attempts).await {
                HeadStep::Retry => {}
                HeadStep::DeadLettered => return Outcome::Done,
                HeadStep::Cancelled => return Outcome::Cancelled,
            }
        }
    }
}

struct NatsRelay {
    conn: Arc<NatsConn>,
    gate: Gate,
}

impl NatsRelay {
    async fn run(mut self) -> anyhow::Result<()> {
        let sh = self.gate.shared.clone();
        let name = self.gate.counters.name.clone();
        let token = self.gate.token.clone();
        let mut watch = sh.store.watch_seq();
        let Some(mut cursor) = self.gate.initial_cursor().await? else {
            return Ok(());
        };
        // Rejections of the first undelivered event (by seq).
        let mut attempts: HashMap<i64, u32> = HashMap::new();
        let mut slow_start = false;
        loop {
            if token.is_cancelled() {
                return Ok(());
            }
            watch.borrow_and_update();
            let batch = match sh.store.events_after(cursor, sh.tuning.batch, None).await {
                Ok(b) => b,
                Err(e) => {
                    store_trouble(&name, e)?;
                    if !pause(&token, sh.tuning.retry_max).await {
                        return Ok(());
                    }
                    continue;
                }
            };
            if batch.is_empty() {
                self.gate.counters.clear_head();
                if !wait_for_more(&token, &mut watch).await? {
                    return Ok(());
                }
                continue;
            }
            let mut i = 0;
            while i < batch.len() {
                self.gate.counters.note_head(&batch[i]);
                if !self.gate.wait_turn().await {
                    return Ok(());
                }
                let sink = tokio::select! {
                    _ = token.cancelled() => return Ok(()),
                    r = self.conn.get_fresh() => r,
                };
                let sink = match sink {
                    Ok((s, fresh)) => {
                        // A new connection (start, or after an outage): skip
                        // what the stream stored before the acks were lost.
                        let pending =
                            &batch[i..(i + sh.tuning.nats_window.max(1)).min(batch.len())];
                        let stored = if fresh {
                            let ids: Vec<&str> =
                                pending.iter().map(|se| se.event.id.as_str()).collect();
                            tokio::select! {
                                _ = token.cancelled() => return Ok(()),
                                n = s.stored_prefix(&ids) => n,
                            }
                        } else {
                            0
                        };
                        if stored > 0 {
                            tracing::info!(
                                stored,
                                "NATS: the stream already holds the next events; skipping them"
                            );
                            for se in &pending[..stored] {
                                attempts.remove(&se.seq);
                            }
                            self.gate.delivered(stored as u64);
                            cursor = pending[stored - 1].seq;
                            self.gate.ack(cursor).await?;
                            i += stored;
                            continue;
                        }
                        s
                    }
                    Err(e) => {
                        // No connection: the first pending event's attempt failed.
                        match self.head_failed(&batch[i], &e, &mut attempts).await {
                            HeadStep::Retry => slow_start = true,
                            HeadStep::DeadLettered => {
                                cursor = batch[i].seq;
                                self.gate.ack(cursor).await?;
                                i += 1;
                            }
                            HeadStep::Cancelled => return Ok(()),
                        }
                        continue;
                    }
                };
                let window = if slow_start {
                    1
                } else {
                    sh.tuning.nats_window.max(1)
                };
                let chunk = &batch[i..(i + window).min(batch.len())];
                let results = tokio::select! {
                    _ = token.cancelled() => return Ok(()),
                    r = sink.publish_window(chunk) => r,
                };
                // The acknowledged prefix of the window, and the first failure.
                let mut acked = 0usize;
                let mut head: Option<DeliveryError> = None;
                for r in results {
                    match r {
                        Ok(()) if head.is_none() => acked += 1,
                        // Published after the failed one: republished from
                        // the head (the stream deduplicates by id).
                        Ok(()) => {}
                        Err(e) if head.is_none() => head = Some(e),
                        Err(_) => {
                            self.gate.counters.failed.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
                if acked > 0 {
                    for se in &chunk[..acked] {
                        attempts.remove(&se.seq);
                    }
                    self.gate.delivered(acked as u64);
                    cursor = chunk[acked - 1].seq;
                    self.gate.ack(cursor).await?;
                    i += acked;
                }
                match head {
                    None => slow_start = false,
                    Some(e) => {
                        let se = &chunk[acked];
                        self.gate.counters.note_head(se);
                        match self.head_failed(se, &e, &mut attempts).await {
                            HeadStep::Retry => slow_start = true,
                            HeadStep::DeadLettered => {
                                cursor = se.seq;
                                self.gate.ack(cursor).await?;
                                i += 1;
                            }
                            HeadStep::Cancelled => return Ok(()),
                        }
                    }
                }
            }
            // Forget attempt counts of events now behind the cursor.
            attempts.retain(|seq, _| *seq > cursor);
        }
    }

    /// [`Gate::head_failed`] with the rejection count kept per seq; a down
    /// sink also drops the connection (the next try reconnects).
    async fn head_failed(
        &mut self,
        se: &StoredEvent,
        e: &DeliveryError,
        attempts: &mut HashMap<i64, u32>,
    ) -> HeadStep {
        if verdict(e.failure) == Verdict::SinkDown {
            self.conn.reset().await;
        }
        let n = attempts.entry(se.seq).or_insert(0);
        let step = self.gate.head_failed(se, e, n).await;
        if matches!(step, HeadStep::DeadLettered) {
            attempts.remove(&se.seq);
        }
        step
    }
}

async fn run_cap(shared: Arc<Shared>, cap: u64, token: CancellationToken) -> anyhow::Result<()> {
    loop {
        if !pause(&token, shared.tuning.shed_interval).await {
            return Ok(());
        }
        let shed = match shared.store.shed_over_cap(cap).await {
            // Over the cap: shed SHED_HEADROOM more, so the report below
            // does not itself push the outbox over the cap (which would
            // shed one event and report it again, every interval).
            Ok(n) if n > 0 => match shared
                .store
                .shed_over_cap(cap.saturating_sub(SHED_HEADROOM))
                .await
            {
                Ok(m) => Ok(n + m),
                Err(e) => {
                    tracing::warn!(error = %e, "shedding the report headroom failed");
                    Ok(n)
                }
            },
            other => other,
        };
        match shed {
            Ok(0) => {}
            Ok(n) => {
                let total = shared.shed.fetch_add(n, Ordering::Relaxed) + n;
                let ev = Event::new(EventKind::OutboxShed, crate::now_ms(), &mut rand::rng())
                    .payload(serde_json::json!({ "shed": n, "cap": cap, "total_shed": total }));
                shared.store.submit(vec![Write::Event(ev)]);
            }
            Err(StoreError::Closed) => {
                return Err(anyhow::anyhow!(
                    "the store was closed under the outbox cap task"
                ));
            }
            Err(e) => tracing::warn!(error = %e, "enforcing the outbox cap failed; retrying"),
        }
    }
}
