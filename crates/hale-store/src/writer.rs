//! The group-commit writer: one task per store applies every write.
//!
//! Callers never open a write transaction themselves. They queue encoded
//! writes on an unbounded channel; the writer takes the first message, then
//! everything else already queued, up to `batch_max` writes, and — when only
//! fire-and-forget writes are in the batch — also what arrives within
//! `batch_linger` of the first one's arrival. It applies the lot in ONE
//! transaction, and only after that transaction committed does it answer the
//! callers waiting in `commit()`. So the cost of a commit (and of an fsync
//! when `fsync_always`) is shared by everything in the batch, and a caller is
//! told "committed" only when it is.
//!
//! A caller waiting in `commit()` is never held back for the linger: while
//! one transaction runs, the next batch forms by itself, which is where group
//! commit gets its throughput under load; the linger only exists to gather
//! fire-and-forget events when the store is otherwise idle.
//!
//! If a batch's transaction fails because the store is out of reach
//! (refused, reset, restarting) before anything of it was applied, the
//! batch is tried again with a growing wait
//! (`hale_core::memory::store_retry_after`), so a PostgreSQL restart delays
//! the journal instead of losing what was answered meanwhile. If it fails
//! otherwise, each message of it is retried in its own transaction, so one
//! bad write fails only its own caller. Failures of
//! `submit()`ted writes have nobody waiting: they are logged, counted, and
//! returned by the next `flush()`.
//!
//! The channel is FIFO, so `flush()` (a marker message) is answered once
//! everything queued before it has been committed, and `close()` drains the
//! queue before the task ends.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

use crate::backend::{self, Pool, WriterConn};
use crate::error::StoreError;
use crate::rows::Encoded;

pub(crate) type Reply = oneshot::Sender<Result<(), StoreError>>;

/// A message to the writer.
pub(crate) enum Msg {
    Writes {
        rows: Vec<Encoded>,
        done: Option<Reply>,
        at: Instant,
    },
    Flush(Reply),
    Close(oneshot::Sender<()>),
}

/// Failures of submitted writes since the last flush.
#[derive(Default)]
pub(crate) struct SubmitFailures {
    pub count: u64,
    pub last: String,
}

/// What the writer shares with the store.
pub(crate) struct Shared {
    pub commits: AtomicU64,
    pub queued: AtomicU64,
    pub seq: watch::Sender<i64>,
    pub submit_failures: Mutex<SubmitFailures>,
    /// Where the totals after committed counts go, once someone follows
    /// them ([`crate::Store::counted`]); dropped until then.
    pub counted: Mutex<Option<mpsc::UnboundedSender<crate::model::Counted>>>,
    /// Released idempotency claims heard from any instance (key hashes; an
    /// empty one after the listener reconnected: anything may be released).
    pub released: tokio::sync::broadcast::Sender<String>,
    /// Woken after every batch: the backlog shrank ([`crate::Store::room`]).
    pub room: tokio::sync::Notify,
    /// When the writer last finished a batch, in ms since `born`.
    pub last_batch_ms: AtomicU64,
    pub born: std::time::Instant,
    /// Quiet spells after which the writer gave its caches back
    /// ([`crate::Store::memory_releases`]).
    pub releases: AtomicU64,
}

impl Shared {
    /// How long ago the writer last finished a batch (since the store
    /// opened, when it never has).
    pub(crate) fn since_last_batch(&self) -> Duration {
        let now = u64::try_from(self.born.elapsed().as_millis()).unwrap_or(u64::MAX);
        Duration::from_millis(now.saturating_sub(self.last_batch_ms.load(Ordering::Relaxed)))
    }
}

impl Shared {
    pub(crate) fn record_submit_failure(&self, err: &StoreError) {
        tracing::error!(error = %err, "submitted store write failed");
        let mut f = self
            .submit_failures
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        f.count += 1;
        f.last = err.to_string();
    }

    /// Outbox events up to `m` are committed: wakes `watch_seq` when that
    /// is news.
    pub(crate) fn seen_seq(&self, m: i64) {
        self.seq.send_if_modified(|v| {
            if m > *v {
                *v = m;
                true
            } else {
                false
            }
        });
    }

    fn take_submit_failures(&self) -> Result<(), StoreError> {
        let mut f = self
            .submit_failures
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if f.count == 0 {
            return Ok(());
        }
        let taken = std::mem::take(&mut *f);
        Err(StoreError::SubmitFailed {
            count: taken.count,
            last: taken.last,
        })
    }
}

struct Job {
    rows: Vec<Encoded>,
    done: Option<Reply>,
}

#[derive(Default)]
struct Batch {
    jobs: Vec<Job>,
    rows: usize,
    waiter: bool,
    flushes: Vec<Reply>,
    close: Option<oneshot::Sender<()>>,
}

impl Batch {
    /// Adds a message; `true` when it ends the batch (flush or close).
    fn push(&mut self, m: Msg, shared: &Shared) -> bool {
        match m {
            Msg::Writes { rows, done, .. } => {
                shared
                    .queued
                    .fetch_sub(rows.len() as u64, Ordering::Relaxed);
                self.rows += rows.len();
                self.waiter |= done.is_some();
                self.jobs.push(Job { rows, done });
                false
            }
            Msg::Flush(reply) => {
                self.flushes.push(reply);
                true
            }
            Msg::Close(reply) => {
                self.close = Some(reply);
                true
            }
        }
    }
}

/// Runs the writer until `close()` or until every store handle is dropped.
pub(crate) async fn run(
    pool: Pool,
    shared: Arc<Shared>,
    mut rx: mpsc::UnboundedReceiver<Msg>,
    batch_max: usize,
    linger: Duration,
    release_after: Duration,
) {
    let batch_max = batch_max.max(1);
    let mut conn = WriterConn::new(&pool);
    drop(pool);
    let mut released = false;
    loop {
        let next = match hale_core::memory::release_wait(released, release_after) {
            Some(wait) => tokio::time::timeout(wait, rx.recv()).await,
            None => Ok(rx.recv().await),
        };
        let Ok(next) = next else {
            // A quiet spell: give the caches a burst filled back, once.
            conn.release_memory().await;
            shared.releases.fetch_add(1, Ordering::Relaxed);
            released = true;
            continue;
        };
        let Some(first) = next else {
            conn.close().await;
            return;
        };
        released = false;
        let deadline = match &first {
            Msg::Writes { at, .. } => *at + linger,
            Msg::Flush(_) | Msg::Close(_) => Instant::now(),
        };
        let mut batch = Batch::default();
        let mut ended = batch.push(first, &shared);
        while !ended && batch.rows < batch_max {
            let next = match rx.try_recv() {
                Ok(m) => Some(m),
                Err(mpsc::error::TryRecvError::Disconnected) => None,
                Err(mpsc::error::TryRecvError::Empty) => {
                    if batch.waiter || linger.is_zero() {
                        None
                    } else {
                        tokio::time::timeout_at(deadline, rx.recv())
                            .await
                            .ok()
                            .flatten()
                    }
                }
            };
            match next {
                Some(m) => ended = batch.push(m, &shared),
                None => break,
            }
        }
        let close = batch.close.take();
        commit_batch(&mut conn, &shared, batch).await;
        let at = u64::try_from(shared.born.elapsed().as_millis()).unwrap_or(u64::MAX);
        shared.last_batch_ms.store(at, Ordering::Relaxed);
        shared.room.notify_waiters();
        if let Some(reply) = close {
            refuse_after_close(&shared, &mut rx);
            conn.close().await;
            let _ = reply.send(());
            return;
        }
    }
}

/// Answers what was queued behind a `close()`: nothing is dropped silently.
fn refuse_after_close(shared: &Shared, rx: &mut mpsc::UnboundedReceiver<Msg>) {
    rx.close();
    while let Ok(m) = rx.try_recv() {
        match m {
            Msg::Writes { rows, done, .. } => {
                shared
                    .queued
                    .fetch_sub(rows.len() as u64, Ordering::Relaxed);
                match done {
                    Some(reply) => {
                        let _ = reply.send(Err(StoreError::Closed));
                    }
                    None => shared.record_submit_failure(&StoreError::Closed),
                }
            }
            Msg::Flush(reply) => {
                let _ = reply.send(Err(StoreError::Closed));
            }
            Msg::Close(reply) => {
                let _ = reply.send(());
            }
        }
    }
}

fn describe(rows: &[Encoded]) -> String {
    let first = match rows.first() {
        None => return "nothing".into(),
        Some(Encoded::Event(e)) => format!("event {}", e.id),
        Some(Encoded::Turn(t)) => format!("turn {}", t.id),
        Some(Encoded::Agent(a)) => format!("agent {}", a.id),
        Some(Encoded::Idempotency(i)) => format!("idempotency key {}", i.key),
        Some(Encoded::Checkpoint(c)) => format!("checkpoint {}", c.id),
        Some(Encoded::Job(j)) => format!("job {}", j.job_id),
        Some(Encoded::Audit(a)) => format!("audit of job {}", a.job_id),
        Some(Encoded::Announce(p)) => format!("announcement {p}"),
        Some(Encoded::Minutes(m)) => format!("{} history minute(s)", m.len()),
        Some(Encoded::Count(c)) => format!("counts of agent {}", c.agent),
        Some(Encoded::ForgetTask(a, t)) => format!("spend of task {t} of agent {a}"),
        Some(Encoded::Response(r)) => format!("response {}", r.id),
    };
    match rows.len() {
        1 => first,
        n => format!("{first} and {} more write(s)", n - 1),
    }
}

fn answer(shared: &Shared, job: Job, result: Result<(), StoreError>) {
    match job.done {
        Some(reply) => {
            let _ = reply.send(result);
        }
        None => {
            if let Err(e) = result {
                shared.record_submit_failure(&e);
            }
        }
    }
}

pub(crate) fn committed(shared: &Shared, applied: backend::Applied) {
    shared.commits.fetch_add(1, Ordering::Relaxed);
    if let Some(m) = applied.max_seq {
        shared.seen_seq(m);
    }
    if applied.counted.is_empty() {
        return;
    }
    let mut follower = shared
        .counted
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(tx) = follower.as_ref() {
        for c in applied.counted {
            if tx.send(c).is_err() {
                *follower = None; // the follower is gone
                break;
            }
        }
    }
}

async fn commit_batch(conn: &mut WriterConn, shared: &Shared, batch: Batch) {
    let jobs: Vec<Job> = batch
        .jobs
        .into_iter()
        .filter(|j| !j.rows.is_empty())
        .collect();
    if !jobs.is_empty() {
        let all: Vec<&[Encoded]> = jobs.iter().map(|j| j.rows.as_slice()).collect();
        match apply_while_reachable(conn, &all).await {
            Ok(applied) => {
                committed(shared, applied);
                for job in jobs {
                    answer(shared, job, Ok(()));
                }
            }
            Err(e) if jobs.len() == 1 => {
                if let Some(job) = jobs.into_iter().next() {
                    let err = StoreError::Commit {
                        what: describe(&job.rows),
                        source: Arc::new(e.source),
                    };
                    answer(shared, job, Err(err));
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, jobs = jobs.len(), "group commit failed; retrying its writes one caller at a time");
                for job in jobs {
                    let result = match apply_while_reachable(conn, &[job.rows.as_slice()]).await {
                        Ok(applied) => {
                            committed(shared, applied);
                            Ok(())
                        }
                        Err(e) => Err(StoreError::Commit {
                            what: describe(&job.rows),
                            source: Arc::new(e.source),
                        }),
                    };
                    answer(shared, job, result);
                }
            }
        }
    }
    for reply in batch.flushes {
        let _ = reply.send(shared.take_submit_failures());
    }
}

/// Applies a batch, trying it again while the store is out of reach and
/// nothing of it was applied (`hale_core::memory::store_retry_after`): a
/// PostgreSQL restart or failover delays the journal, it does not lose the
/// turns answered meanwhile. Answers waiting for this commit are released
/// all the same by `hale_core::memory::durable_release` (the writer
/// finishes no batch meanwhile), and what arrives queues behind it.
async fn apply_while_reachable(
    conn: &mut WriterConn,
    jobs: &[&[Encoded]],
) -> Result<backend::Applied, backend::ApplyError> {
    let t0 = Instant::now();
    let mut tries = 0u32;
    loop {
        let e = match backend::apply(conn, jobs).await {
            Ok(applied) => {
                if tries > 0 {
                    tracing::info!(tries, "group commit applied once the store was back");
                }
                return Ok(applied);
            }
            Err(e) => e,
        };
        let Some(wait) =
            hale_core::memory::store_retry_after(e.stage, e.connection_lost(), tries, t0.elapsed())
        else {
            return Err(e);
        };
        tracing::warn!(error = %e, stage = ?e.stage, tries, "the store is out of reach; trying the group commit again");
        tokio::time::sleep(wait).await;
        tries += 1;
    }
}
