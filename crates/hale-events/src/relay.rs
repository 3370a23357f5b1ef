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
//! Failures: an event is tried up to `max_delivery_attempts` times with
//! exponential backoff ([`RelayTuning::retry_initial`] doubling up to
//! [`RelayTuning::retry_max`]); a short outage is ridden out and the queue
//! drains in order when the sink returns. After the last attempt the event is
//! copied to the dead letters (`hale dlq`), a `sink.dead_lettered` event is
//! emitted (except for a `sink.dead_lettered` event itself, which would
//! otherwise chain forever on a dead sink), and the relay moves on.
//!
//! Each webhook also has a breaker (hale-core's, tripping after
//! [`WEBHOOK_BREAKER_FAILURES`] consecutive failures): while it is open the
//! relay waits — the event is neither attempted nor dead-lettered — so a dead
//! receiver gets one trial per open period instead of a stream of requests.
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
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hale_core::breaker::{Admission, CallOutcome, SharedBreaker};
use hale_core::config::{BreakerConfig, EventsConfig, NatsConfig};
use hale_core::event::{Event, EventKind};
use hale_store::{Store, StoreError, StoredEvent, Write};
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::nats::{self, JetStreamSink};
use crate::tasks::TaskSet;
use crate::webhook::{self, WebhookSink};

/// First pause after a failed delivery; doubles per attempt.
pub const DEFAULT_RETRY_INITIAL: Duration = Duration::from_millis(500);
/// Longest pause between two attempts.
pub const DEFAULT_RETRY_MAX: Duration = Duration::from_secs(5);
/// Events read from the outbox per query.
pub const DEFAULT_BATCH: usize = 1024;
/// How often the outbox cap is enforced.
pub const DEFAULT_SHED_INTERVAL: Duration = Duration::from_secs(1);
/// A caught-up relay re-reads the outbox at least this often.
pub const POLL_INTERVAL: Duration = Duration::from_secs(1);
/// Room kept under the outbox cap after a shed, for the `outbox.shed` report.
pub const SHED_HEADROOM: u64 = 1;
/// Consecutive failures that open a webhook's breaker.
pub const WEBHOOK_BREAKER_FAILURES: u32 = 3;
/// How long a webhook's breaker stays open first (doubling per failed trial).
pub const WEBHOOK_BREAKER_OPEN: Duration = Duration::from_secs(5);
/// Longest a webhook's breaker stays open.
pub const WEBHOOK_BREAKER_MAX_OPEN: Duration = Duration::from_secs(60);

/// The timing knobs of the relays. [`Default`] is what `hale serve` uses;
/// tests shorten them.
#[derive(Debug, Clone)]
pub struct RelayTuning {
    pub retry_initial: Duration,
    pub retry_max: Duration,
    pub batch: usize,
    pub nats_window: usize,
    pub nats_ack_timeout: Duration,
    pub webhook_timeout: Duration,
    pub webhook_breaker: BreakerConfig,
    pub shed_interval: Duration,
}

impl Default for RelayTuning {
    fn default() -> Self {
        RelayTuning {
            retry_initial: DEFAULT_RETRY_INITIAL,
            retry_max: DEFAULT_RETRY_MAX,
            batch: DEFAULT_BATCH,
            nats_window: nats::DEFAULT_WINDOW,
            nats_ack_timeout: nats::DEFAULT_ACK_TIMEOUT,
            webhook_timeout: webhook::DEFAULT_TIMEOUT,
            webhook_breaker: webhook_breaker(WEBHOOK_BREAKER_OPEN, WEBHOOK_BREAKER_MAX_OPEN),
            shed_interval: DEFAULT_SHED_INTERVAL,
        }
    }
}

/// The breaker rules of a webhook: open after [`WEBHOOK_BREAKER_FAILURES`]
/// consecutive failures, for `open` doubling up to `max_open`.
pub fn webhook_breaker(open: Duration, max_open: Duration) -> BreakerConfig {
    BreakerConfig {
        enabled: true,
        consecutive_failures: Some(WEBHOOK_BREAKER_FAILURES),
        failure_threshold: None,
        failure_rate: None,
        half_open_after: open,
        max_open,
        half_open_requests: 1,
        success_threshold: 1,
        ..BreakerConfig::default()
    }
}

impl RelayTuning {
    fn backoff(&self, attempt: u32) -> Duration {
        let factor = 1u32 << attempt.saturating_sub(1).min(16);
        self.retry_initial
            .saturating_mul(factor)
            .min(self.retry_max)
    }
}

/// Counters of one sink.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SinkStats {
    pub sink: String,
    /// Events the sink acknowledged (replays included).
    pub delivered: u64,
    /// Failed delivery attempts.
    pub failed: u64,
    pub dead_lettered: u64,
    /// The last seq acknowledged.
    pub cursor: i64,
    /// The last attempt succeeded (and the breaker is not open).
    pub healthy: bool,
}

/// Counters of every relay.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RelayStats {
    pub sinks: Vec<SinkStats>,
    /// Undelivered events shed at the outbox cap since start.
    pub shed: u64,
}

#[derive(Debug)]
struct Counters {
    name: String,
    delivered: AtomicU64,
    failed: AtomicU64,
    dead_lettered: AtomicU64,
    cursor: AtomicI64,
    healthy: AtomicBool,
}

impl Counters {
    fn new(name: String) -> Arc<Self> {
        Arc::new(Counters {
            name,
            delivered: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            dead_lettered: AtomicU64::new(0),
            cursor: AtomicI64::new(0),
            healthy: AtomicBool::new(true),
        })
    }
}

/// A NATS connection made on first use and remade after it broke.
struct NatsConn {
    cfg: NatsConfig,
    ack_timeout: Duration,
    sink: tokio::sync::Mutex<Option<JetStreamSink>>,
}

impl NatsConn {
    async fn get(&self) -> anyhow::Result<JetStreamSink> {
        let mut guard = self.sink.lock().await;
        if let Some(s) = guard.as_ref()
            && s.is_connected()
        {
            return Ok(s.clone());
        }
        *guard = None;
        let s = JetStreamSink::connect(&self.cfg, self.ack_timeout).await?;
        *guard = Some(s.clone());
        Ok(s)
    }

    async fn reset(&self) {
        *self.sink.lock().await = None;
    }
}

#[derive(Clone)]
enum Deliverer {
    Webhook(Arc<WebhookSink>),
    Nats(Arc<NatsConn>),
}

impl Deliverer {
    async fn deliver_one(&self, se: &StoredEvent) -> Result<(), String> {
        match self {
            Deliverer::Webhook(w) => w.deliver(&se.event).await.map_err(|e| e.message),
            Deliverer::Nats(conn) => {
                let sink = conn.get().await.map_err(|e| format!("{e:#}"))?;
                let r = sink.publish_one(se).await;
                if r.is_err() {
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
        let max_attempts = cfg.max_delivery_attempts.max(1);
        let mut sinks = Vec::new();
        let mut webhook_tasks = Vec::new();
        for hook in &cfg.webhooks {
            let name = WebhookSink::sink_name(&hook.url);
            let kinds = parse_kinds(&hook.kinds)?;
            let sink = Arc::new(WebhookSink::new(hook, tuning.webhook_timeout)?);
            store.register_sink(&name).await?;
            let counters = Counters::new(name);
            webhook_tasks.push((sink.clone(), kinds, counters.clone()));
            sinks.push(SinkHandle {
                counters,
                deliverer: Deliverer::Webhook(sink),
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
            let counters = Counters::new(nats::SINK_NAME.to_string());
            nats_task = Some((conn.clone(), counters.clone()));
            sinks.push(SinkHandle {
                counters,
                deliverer: Deliverer::Nats(conn),
            });
        }
        // A sink dropped from the config would hold back pruning forever.
        for old in store.sinks().await? {
            let owned = old.sink.starts_with("webhook:") || old.sink == nats::SINK_NAME;
            if owned && !sinks.iter().any(|s| s.counters.name == old.sink) {
                tracing::warn!(sink = %old.sink, acked_seq = old.acked_seq, "sink no longer configured; forgetting its cursor (its dead letters stay)");
                store.remove_sink(&old.sink).await?;
            }
        }
        for s in &sinks {
            let c = store.sink_cursor(&s.counters.name).await?;
            s.counters.cursor.store(c, Ordering::Relaxed);
        }
        let shared = Arc::new(Shared {
            store,
            tuning,
            max_attempts,
            sinks,
            shed: AtomicU64::new(0),
        });
        for (sink, kinds, counters) in webhook_tasks {
            let breaker = SharedBreaker::new(shared.tuning.webhook_breaker.clone());
            let task = WebhookRelay {
                shared: shared.clone(),
                sink,
                kinds,
                counters: counters.clone(),
                breaker,
                token: tasks.token(),
            };
            tasks.spawn(format!("relay:{}", counters.name), task.run());
        }
        if let Some((conn, counters)) = nats_task {
            let task = NatsRelay {
                shared: shared.clone(),
                conn,
                counters,
                token: tasks.token(),
            };
            tasks.spawn(format!("relay:{}", nats::SINK_NAME), task.run());
        }
        tasks.spawn(
            "outbox-cap",
            run_cap(shared.clone(), cfg.outbox_cap, tasks.token()),
        );
        Ok(Relays { shared })
    }

    /// Per-sink counters and the shed count.
    pub fn stats(&self) -> RelayStats {
        RelayStats {
            sinks: self
                .shared
                .sinks
                .iter()
                .map(|s| {
                    let c = &s.counters;
                    SinkStats {
                        sink: c.name.clone(),
                        delivered: c.delivered.load(Ordering::Relaxed),
                        failed: c.failed.load(Ordering::Relaxed),
                        dead_lettered: c.dead_lettered.load(Ordering::Relaxed),
                        cursor: c.cursor.load(Ordering::Relaxed),
                        healthy: c.healthy.load(Ordering::Relaxed),
                    }
                })
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
    /// leaves the dead letters only once its sink acknowledged it; after a
    /// failure the rest of that sink's letters stay put, so order holds.
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
                let mut ok = false;
                for attempt in 1..=self.shared.max_attempts {
                    match handle.deliverer.deliver_one(&se).await {
                        Ok(()) => {
                            ok = true;
                            break;
                        }
                        Err(e) => {
                            handle.counters.failed.fetch_add(1, Ordering::Relaxed);
                            last_err = e;
                            if attempt < self.shared.max_attempts {
                                tokio::time::sleep(self.shared.tuning.backoff(attempt)).await;
                            }
                        }
                    }
                }
                if ok {
                    handle.counters.delivered.fetch_add(1, Ordering::Relaxed);
                    store
                        .dlq_take(&name, Some(std::slice::from_ref(&d.id)))
                        .await?;
                    report.delivered.push(item(None));
                } else {
                    let attempts = d.attempts.saturating_add(self.shared.max_attempts);
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
        tracing::warn!(sink = %counters.name, id = %se.event.id, seq = se.seq, attempts, error, "event dead-lettered");
        match self
            .store
            .dead_letter(&counters.name, se.seq, attempts, error)
            .await
        {
            Ok(()) => {}
            Err(e) => {
                tracing::error!(sink = %counters.name, id = %se.event.id, error = %e, "cannot dead-letter an event")
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
                "sink": counters.name,
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

struct WebhookRelay {
    shared: Arc<Shared>,
    sink: Arc<WebhookSink>,
    kinds: Option<Vec<EventKind>>,
    counters: Arc<Counters>,
    breaker: SharedBreaker,
    token: CancellationToken,
}

enum Outcome {
    Done,
    Cancelled,
}

impl WebhookRelay {
    async fn run(self) -> anyhow::Result<()> {
        let sh = self.shared.clone();
        let name = self.counters.name.clone();
        let mut watch = sh.store.watch_seq();
        let mut cursor = loop {
            match sh.store.sink_cursor(&name).await {
                Ok(c) => break c,
                Err(e) => {
                    store_trouble(&name, e)?;
                    if !pause(&self.token, sh.tuning.retry_max).await {
                        return Ok(());
                    }
                }
            }
        };
        loop {
            if self.token.is_cancelled() {
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
                    if !pause(&self.token, sh.tuning.retry_max).await {
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
                sh.ack(&self.counters, cursor).await?;
            }
            // A short read covered everything committed up to `target`;
            // events of other kinds up to there are done for this sink.
            if !full && target > cursor {
                cursor = target;
                sh.ack(&self.counters, cursor).await?;
            }
            if batch.is_empty() && !wait_for_more(&self.token, &mut watch).await? {
                return Ok(());
            }
        }
    }

    async fn deliver(&self, se: &StoredEvent) -> Outcome {
        let sh = &self.shared;
        let mut attempts = 0u32;
        loop {
            if let Admission::Rejected { retry_in } = self.breaker.allow(Instant::now()) {
                self.counters.healthy.store(false, Ordering::Relaxed);
                if !pause(&self.token, retry_in.max(Duration::from_millis(10))).await {
                    return Outcome::Cancelled;
                }
                continue;
            }
            let started = Instant::now();
            let result = tokio::select! {
                _ = self.token.cancelled() => return Outcome::Cancelled,
                r = self.sink.deliver(&se.event) => r,
            };
            let latency = started.elapsed();
            match result {
                Ok(()) => {
                    self.breaker.record(
                        Instant::now(),
                        CallOutcome::Success { latency },
                        &mut rand::rng(),
                    );
                    self.counters.delivered.fetch_add(1, Ordering::Relaxed);
                    self.counters.healthy.store(true, Ordering::Relaxed);
                    return Outcome::Done;
                }
                Err(e) => {
                    self.breaker.record(
                        Instant::now(),
                        CallOutcome::Failure {
                            class: e.class,
                            latency,
                            retry_after: None,
                        },
                        &mut rand::rng(),
                    );
                    attempts += 1;
                    self.counters.failed.fetch_add(1, Ordering::Relaxed);
                    self.counters.healthy.store(false, Ordering::Relaxed);
                    tracing::debug!(sink = %self.counters.name, id = %se.event.id, attempts, error = %e, "webhook delivery failed");
                    if attempts >= sh.max_attempts {
                        sh.dead_letter(&self.counters, se, attempts, &e.message)
                            .await;
                        return Outcome::Done;
                    }
                    if !pause(&self.token, sh.tuning.backoff(attempts)).await {
                        return Outcome::Cancelled;
                    }
                }
            }
        }
    }
}

struct NatsRelay {
    shared: Arc<Shared>,
    conn: Arc<NatsConn>,
    counters: Arc<Counters>,
    token: CancellationToken,
}

impl NatsRelay {
    async fn run(self) -> anyhow::Result<()> {
        let sh = self.shared.clone();
        let name = self.counters.name.clone();
        let mut watch = sh.store.watch_seq();
        let mut cursor = loop {
            match sh.store.sink_cursor(&name).await {
                Ok(c) => break c,
                Err(e) => {
                    store_trouble(&name, e)?;
                    if !pause(&self.token, sh.tuning.retry_max).await {
                        return Ok(());
                    }
                }
            }
        };
        // Failed attempts per seq, across windows.
        let mut attempts: HashMap<i64, u32> = HashMap::new();
        let mut slow_start = false;
        loop {
            if self.token.is_cancelled() {
                return Ok(());
            }
            watch.borrow_and_update();
            let batch = match sh.store.events_after(cursor, sh.tuning.batch, None).await {
                Ok(b) => b,
                Err(e) => {
                    store_trouble(&name, e)?;
                    if !pause(&self.token, sh.tuning.retry_max).await {
                        return Ok(());
                    }
                    continue;
                }
            };
            if batch.is_empty() {
                if !wait_for_more(&self.token, &mut watch).await? {
                    return Ok(());
                }
                continue;
            }
            let mut i = 0;
            while i < batch.len() {
                if self.token.is_cancelled() {
                    return Ok(());
                }
                let sink = tokio::select! {
                    _ = self.token.cancelled() => return Ok(()),
                    r = self.conn.get() => r,
                };
                let sink = match sink {
                    Ok(s) => s,
                    Err(e) => {
                        // No connection: the first pending event's attempt failed.
                        let se = &batch[i];
                        let n = attempts.entry(se.seq).or_insert(0);
                        *n += 1;
                        let n = *n;
                        self.counters.failed.fetch_add(1, Ordering::Relaxed);
                        self.counters.healthy.store(false, Ordering::Relaxed);
                        tracing::debug!(error = %format!("{e:#}"), attempts = n, "NATS unreachable");
                        if n >= sh.max_attempts {
                            attempts.remove(&se.seq);
                            sh.dead_letter(&self.counters, se, n, &format!("{e:#}"))
                                .await;
                            cursor = se.seq;
                            sh.ack(&self.counters, cursor).await?;
                            i += 1;
                        } else if !pause(&self.token, sh.tuning.backoff(n)).await {
                            return Ok(());
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
                    _ = self.token.cancelled() => return Ok(()),
                    r = sink.publish_window(chunk) => r,
                };
                let mut head: Option<(i64, String)> = None;
                let mut new_cursor = cursor;
                let mut advanced = 0;
                for (k, (se, r)) in chunk.iter().zip(results).enumerate() {
                    match r {
                        Ok(()) => {
                            if head.is_none() {
                                attempts.remove(&se.seq);
                                self.counters.delivered.fetch_add(1, Ordering::Relaxed);
                                new_cursor = se.seq;
                                advanced = k + 1;
                            }
                        }
                        Err(e) => {
                            self.counters.failed.fetch_add(1, Ordering::Relaxed);
                            let n = attempts.entry(se.seq).or_insert(0);
                            *n += 1;
                            let n = *n;
                            if head.is_none() {
                                if n >= sh.max_attempts {
                                    attempts.remove(&se.seq);
                                    sh.dead_letter(&self.counters, se, n, &e).await;
                                    new_cursor = se.seq;
                                    advanced = k + 1;
                                } else {
                                    head = Some((se.seq, e));
                                }
                            }
                        }
                    }
                }
                if new_cursor > cursor {
                    cursor = new_cursor;
                    sh.ack(&self.counters, cursor).await?;
                }
                i += advanced;
                match head {
                    None => {
                        slow_start = false;
                        self.counters.healthy.store(true, Ordering::Relaxed);
                    }
                    Some((seq, e)) => {
                        slow_start = true;
                        self.counters.healthy.store(false, Ordering::Relaxed);
                        let n = attempts.get(&seq).copied().unwrap_or(1);
                        tracing::warn!(seq, attempts = n, error = %e, "NATS publish failed; retrying from the first unacknowledged event");
                        self.conn.reset().await;
                        if !pause(&self.token, sh.tuning.backoff(n)).await {
                            return Ok(());
                        }
                    }
                }
            }
            // Forget attempt counts of events now behind the cursor.
            attempts.retain(|seq, _| *seq > cursor);
        }
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
