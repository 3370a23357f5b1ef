//! [`Store`]: opening a backend, the write path and the state reads.
//!
//! Writes go through the group-commit writer (see [`crate::writer`]); reads
//! go straight to the pool. With SQLite in WAL mode readers never block the
//! writer nor each other; a read after `commit()` returned sees that commit.

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hale_core::config::{EventsConfig, StoragePoolConfig};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;

use crate::backend::{Pool, SCHEMA_LOCK, on_pool};
use crate::error::{Result, StoreError};
use crate::model::{AgentRecord, CheckpointRecord, IdempotentResponse, TurnRecord, Write};
use crate::rows::{
    self, AGENT_COLS, CHECKPOINT_COLS, IDEMPOTENCY_COLS, TURN_COLS, decode_agent,
    decode_checkpoint, decode_idempotency, decode_turn,
};
use crate::schema::{self, SCHEMA_VERSION};
use crate::writer::{self, Msg, Shared};

/// The SQLite file inside the data directory.
pub const SQLITE_FILE: &str = "hale.db";
/// Connections of the SQLite pool (readers; the writer borrows one per commit).
pub const SQLITE_POOL_SIZE: u32 = 4;
/// Each SQLite connection's page cache, in KiB (`PRAGMA cache_size = -N`).
/// SQLite's default is 2,000 KiB per connection, and the writer borrows any
/// of the pool's connections, so each came to cache the same hot pages of
/// the journal's indexes: under a busy journal the four caches filled for
/// more than ten minutes, the last of a gateway's memory still growing
/// after warm-up (BENCHMARKS.md, "Memory over time", stop 23). 512 KiB is
/// 128 pages of 4 KiB; a same-run A/B at c=64 showed no throughput change.
pub const SQLITE_CACHE_KIB: u32 = 512;
/// Released idempotency claims buffered per waiter before it counts as
/// lagged (and re-reads the store).
const RELEASED_BUFFER: usize = 1024;

/// How long a SQLite statement waits for the write lock held by another
/// connection before failing.
pub const SQLITE_BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// Knobs of the write path; see [`EventsConfig`] for their defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreOptions {
    /// SQLite `synchronous=FULL` (fsync every commit: survives power loss)
    /// instead of `NORMAL` (survives kill -9 of the process).
    pub fsync_always: bool,
    /// Most writes in one group commit.
    pub batch_max: usize,
    /// How long fire-and-forget writes may wait for company.
    pub batch_linger: Duration,
    /// The PostgreSQL pool's limits (`storage_pool:`).
    pub pool: StoragePoolConfig,
}

impl StoreOptions {
    /// The options of a whole config: `events:` for the write path,
    /// `storage_pool:` for the PostgreSQL pool.
    pub fn of(cfg: &hale_core::config::Config) -> Self {
        StoreOptions {
            pool: cfg.storage_pool,
            ..StoreOptions::from(&cfg.events)
        }
    }
}

impl From<&EventsConfig> for StoreOptions {
    fn from(c: &EventsConfig) -> Self {
        StoreOptions {
            fsync_always: c.fsync_always,
            batch_max: c.batch_max,
            batch_linger: c.batch_linger,
            pool: StoragePoolConfig::default(),
        }
    }
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions::from(&EventsConfig::default())
    }
}

/// Which backend a store runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// What [`Store::room`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Room {
    /// The backlog was under the limit.
    Free,
    /// It was over, and came under it within the wait.
    Waited,
    /// Still over it after the whole wait (the caller goes on).
    TimedOut,
    /// Over it, and the writer has finished no batch for the longest wait:
    /// stuck (the store down or locked), so the caller did not wait at all.
    Stuck,
}

/// hale's durable state. Cheap to clone; all clones share one writer.
#[derive(Clone)]
pub struct Store {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) pool: Pool,
    tx: mpsc::UnboundedSender<Msg>,
    pub(crate) shared: Arc<Shared>,
    writer: Mutex<Option<JoinHandle<()>>>,
    location: String,
    /// The holder name of this instance's idempotency claims (src/idem.rs).
    pub(crate) instance: Mutex<String>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("location", &self.inner.location)
            .finish_non_exhaustive()
    }
}

/// Milliseconds since the Unix epoch.
pub(crate) fn now_ms() -> u64 {
    use hale_core::clock::Clock;
    hale_core::clock::SystemClock.wall_ms()
}

/// `postgres://user:secret@host/db` → `postgres://user:***@host/db`.
fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    match rest.split_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{scheme}://{user}:***@{host}"),
            None => url.to_string(),
        },
        None => url.to_string(),
    }
}

impl Store {
    /// Opens (creating when needed) `data_dir/hale.db` in WAL mode.
    pub async fn open_sqlite(data_dir: &Path, opts: StoreOptions) -> Result<Store> {
        tokio::fs::create_dir_all(data_dir)
            .await
            .map_err(|source| StoreError::DataDir {
                path: data_dir.to_path_buf(),
                source,
            })?;
        let path: PathBuf = data_dir.join(SQLITE_FILE);
        let location = path.display().to_string();
        let open_err = |source| StoreError::Open {
            backend: "sqlite",
            location: location.clone(),
            source,
        };
        let connect = SqliteConnectOptions::new()
            .filename(&path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(if opts.fsync_always {
                SqliteSynchronous::Full
            } else {
                SqliteSynchronous::Normal
            })
            .busy_timeout(SQLITE_BUSY_TIMEOUT)
            .pragma("cache_size", format!("-{SQLITE_CACHE_KIB}"));
        let pool = SqlitePoolOptions::new()
            .max_connections(SQLITE_POOL_SIZE)
            .connect_with(connect)
            .await
            .map_err(open_err)?;
        let mut tx = pool.begin_with("BEGIN IMMEDIATE").await.map_err(open_err)?;
        for stmt in schema::SQLITE {
            sqlx::query(*stmt)
                .execute(&mut *tx)
                .await
                .map_err(open_err)?;
        }
        for (table, column, ty) in schema::SQLITE_ADDED_COLUMNS {
            let present: i64 =
                sqlx::query_scalar("SELECT COUNT(*) FROM pragma_table_info($1) WHERE name = $2")
                    .bind(*table)
                    .bind(*column)
                    .fetch_one(&mut *tx)
                    .await
                    .map_err(open_err)?;
            if present == 0 {
                let sql = format!("ALTER TABLE {table} ADD COLUMN {column} {ty}");
                sqlx::query(sqlx::AssertSqlSafe(sql))
                    .execute(&mut *tx)
                    .await
                    .map_err(open_err)?;
            }
        }
        tx.commit().await.map_err(open_err)?;
        let pool = Pool::Sqlite(pool);
        check_version(&pool, "sqlite", &location).await?;
        Self::start(pool, opts, location).await
    }

    /// Connects to PostgreSQL and creates the schema (in the connection's
    /// `search_path`; a URL may set it with `?options[search_path]=NAME`).
    ///
    /// Known limit: sqlx 0.9.0 does not set `TCP_NODELAY` (sqlx issue #4335,
    /// fixed after 0.9.0), so over TCP each round trip can stall ~40 ms on
    /// Nagle + delayed ACK; group commit amortises it, and a local server is
    /// best reached through its Unix socket
    /// (`postgres:///DB?host=/var/run/postgresql`), ~10x faster here.
    pub async fn open_postgres(url: &str, opts: StoreOptions) -> Result<Store> {
        let location = redact(url);
        let open_err = |source| StoreError::Open {
            backend: "postgres",
            location: location.clone(),
            source,
        };
        let connect = PgConnectOptions::from_str(url).map_err(open_err)?;
        let pool = PgPoolOptions::new()
            .max_connections(opts.pool.max_connections)
            .acquire_timeout(opts.pool.acquire_timeout)
            .connect_with(connect)
            .await
            .map_err(open_err)?;
        let mut tx = pool.begin().await.map_err(open_err)?;
        sqlx::query("SELECT pg_advisory_xact_lock($1)")
            .bind(SCHEMA_LOCK)
            .execute(&mut *tx)
            .await
            .map_err(open_err)?;
        for stmt in schema::POSTGRES {
            sqlx::query(*stmt)
                .execute(&mut *tx)
                .await
                .map_err(open_err)?;
        }
        tx.commit().await.map_err(open_err)?;
        let pool = Pool::Pg(pool);
        check_version(&pool, "postgres", &location).await?;
        Self::start(pool, opts, location).await
    }

    /// The store a config names (`storage:`, `data_dir:`, `events:`,
    /// `storage_pool:`).
    pub async fn open_config(cfg: &hale_core::config::Config) -> Result<Store> {
        Self::open(cfg.storage.as_deref(), &cfg.data_dir, StoreOptions::of(cfg)).await
    }

    /// Opens the store named by config `storage:`: none or `sqlite` is SQLite
    /// in `data_dir`, a `postgres://` (or `postgresql://`) URL is PostgreSQL.
    pub async fn open(storage: Option<&str>, data_dir: &Path, opts: StoreOptions) -> Result<Store> {
        match storage.map(str::trim) {
            None | Some("") | Some("sqlite") => Self::open_sqlite(data_dir, opts).await,
            Some(url) if url.starts_with("postgres://") || url.starts_with("postgresql://") => {
                Self::open_postgres(url, opts).await
            }
            Some(other) => Err(StoreError::UnsupportedStorage(redact(other))),
        }
    }

    async fn start(pool: Pool, opts: StoreOptions, location: String) -> Result<Store> {
        let last = last_seq(&pool).await?;
        let (seq, _) = watch::channel(last);
        let shared = Arc::new(Shared {
            commits: AtomicU64::new(0),
            queued: AtomicU64::new(0),
            seq,
            submit_failures: Mutex::new(writer::SubmitFailures::default()),
            counted: Mutex::new(None),
            released: tokio::sync::broadcast::channel(RELEASED_BUFFER).0,
            room: tokio::sync::Notify::new(),
            last_batch_ms: AtomicU64::new(0),
            born: std::time::Instant::now(),
        });
        if let Pool::Pg(p) = &pool {
            // Ends when the pool is closed (`close`).
            tokio::spawn(crate::listen::follow_events(p.clone(), shared.clone()));
        }
        let (tx, rx) = mpsc::unbounded_channel();
        let handle = tokio::spawn(writer::run(
            pool.clone(),
            shared.clone(),
            rx,
            opts.batch_max,
            opts.batch_linger,
        ));
        Ok(Store {
            inner: Arc::new(Inner {
                pool,
                tx,
                shared,
                writer: Mutex::new(Some(handle)),
                location,
                instance: Mutex::new(format!(
                    "store-{}-{}",
                    std::process::id(),
                    std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map(|d| d.as_nanos())
                        .unwrap_or_default()
                )),
            }),
        })
    }

    /// The backend in use.
    pub fn backend(&self) -> Backend {
        match self.inner.pool {
            Pool::Sqlite(_) => Backend::Sqlite,
            Pool::Pg(_) => Backend::Postgres,
        }
    }

    /// Where the store lives (file path, or URL without its password).
    pub fn location(&self) -> &str {
        &self.inner.location
    }

    fn encode(writes: Vec<Write>) -> Result<Vec<rows::Encoded>> {
        let now = now_ms();
        writes.into_iter().map(|w| rows::encode(w, now)).collect()
    }

    /// Queues writes into the next group commit and waits until that commit
    /// is durable. Everything in one call lands in the same transaction (e.g.
    /// an agent's state change and the event reporting it).
    pub async fn commit(&self, writes: Vec<Write>) -> Result<()> {
        if writes.is_empty() {
            return Ok(());
        }
        let rows = Self::encode(writes)?;
        let n = rows.len() as u64;
        let (done, rx) = oneshot::channel();
        self.inner.shared.queued.fetch_add(n, Ordering::Relaxed);
        let msg = Msg::Writes {
            rows,
            done: Some(done),
            at: tokio::time::Instant::now(),
        };
        if self.inner.tx.send(msg).is_err() {
            self.inner.shared.queued.fetch_sub(n, Ordering::Relaxed);
            return Err(StoreError::Closed);
        }
        rx.await.map_err(|_| StoreError::Closed)?
    }

    /// The totals after each committed [`Write::Count`], in commit order,
    /// from now on (a second call replaces the first follower). Counts
    /// committed while nobody follows are not kept.
    pub fn counted(&self) -> tokio::sync::mpsc::UnboundedReceiver<crate::model::Counted> {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        *self
            .inner
            .shared
            .counted
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(tx);
        rx
    }

    /// A task's spend as the store holds it (none before its first count).
    pub async fn task_spend(
        &self,
        agent: &str,
        task: &str,
    ) -> Result<Option<hale_core::budget::Spend>> {
        on_pool!(&self.inner.pool, |p, _Db| {
            let row = sqlx::query(
                "SELECT tokens, cost_usd FROM task_spend WHERE agent = $1 AND task = $2",
            )
            .bind(agent)
            .bind(task)
            .fetch_optional(p)
            .await
            .map_err(StoreError::db("reading a task's spend"))?;
            row.as_ref()
                .map(|r| crate::rows::decode_spend(agent, task, r))
                .transpose()
        })
    }

    /// Queues writes into the next group commit without waiting (journal
    /// rows, events not tied to a state change). A failure is logged and
    /// reported by the next [`Store::flush`].
    pub fn submit(&self, writes: Vec<Write>) {
        if writes.is_empty() {
            return;
        }
        let rows = match Self::encode(writes) {
            Ok(rows) => rows,
            Err(e) => return self.inner.shared.record_submit_failure(&e),
        };
        let n = rows.len() as u64;
        self.inner.shared.queued.fetch_add(n, Ordering::Relaxed);
        let msg = Msg::Writes {
            rows,
            done: None,
            at: tokio::time::Instant::now(),
        };
        if self.inner.tx.send(msg).is_err() {
            self.inner.shared.queued.fetch_sub(n, Ordering::Relaxed);
            self.inner.shared.record_submit_failure(&StoreError::Closed);
        }
    }

    /// Waits until everything submitted so far is committed. Returns
    /// [`StoreError::SubmitFailed`] when submitted writes failed since the
    /// previous flush.
    pub async fn flush(&self) -> Result<()> {
        let (done, rx) = oneshot::channel();
        self.inner
            .tx
            .send(Msg::Flush(done))
            .map_err(|_| StoreError::Closed)?;
        rx.await.map_err(|_| StoreError::Closed)?
    }

    /// Commits everything queued, stops the writer and closes the pool.
    /// Later writes fail with [`StoreError::Closed`].
    pub async fn close(&self) {
        let (done, rx) = oneshot::channel();
        if self.inner.tx.send(Msg::Close(done)).is_ok() {
            let _ = rx.await;
        }
        let handle = self
            .inner
            .writer
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take();
        if let Some(handle) = handle
            && let Err(e) = handle.await
        {
            tracing::error!(error = %e, "store writer task ended abnormally");
        }
        on_pool!(&self.inner.pool, |p, _Db| p.close().await);
    }

    /// Group commits (transactions) made so far by this handle's writer.
    pub fn commits(&self) -> u64 {
        self.inner.shared.commits.load(Ordering::Relaxed)
    }

    /// Writes queued and not yet taken by the writer.
    pub fn queued(&self) -> u64 {
        self.inner.shared.queued.load(Ordering::Relaxed)
    }

    /// Waits, at most `max_wait`, until at most `limit` writes are queued
    /// (`hale_core::memory::journal_backlog_max`): a caller about to submit
    /// more keeps the journal's backlog — held in memory — bounded by
    /// slowing to the writer's pace, and goes on after `max_wait` all the
    /// same. A writer that finished no batch for `max_wait` is stuck (a
    /// store down): then nobody waits at all — fail open, the backlog grows
    /// as it did before, and the store's errors say why.
    pub async fn room(&self, limit: u64, max_wait: std::time::Duration) -> Room {
        let wait = |s: &Self| {
            hale_core::memory::journal_wait(
                s.queued(),
                limit,
                s.inner.shared.since_last_batch(),
                max_wait,
            )
        };
        if self.queued() <= limit {
            return Room::Free;
        }
        if !wait(self) {
            return Room::Stuck;
        }
        let deadline = tokio::time::Instant::now() + max_wait;
        loop {
            let woken = self.inner.shared.room.notified();
            tokio::pin!(woken);
            // Registered before the check, so a batch between the two wakes it.
            woken.as_mut().enable();
            if self.queued() <= limit {
                return Room::Waited;
            }
            if tokio::time::timeout_at(deadline, woken).await.is_err() {
                return if self.queued() <= limit {
                    Room::Waited
                } else {
                    Room::TimedOut
                };
            }
        }
    }

    // ---- reads -------------------------------------------------------------

    /// One turn of the journal.
    pub async fn turn(&self, id: &str) -> Result<Option<TurnRecord>> {
        on_pool!(&self.inner.pool, |p, _Db| {
            let sql = format!("SELECT {TURN_COLS} FROM turns WHERE id = $1");
            let row = sqlx::query(sqlx::AssertSqlSafe(sql))
                .bind(id)
                .fetch_optional(p)
                .await
                .map_err(StoreError::db("reading a turn"))?;
            row.as_ref().map(decode_turn).transpose()
        })
    }

    /// The response stored for an idempotency key, with its request's hash.
    pub async fn idempotent(&self, key: &str) -> Result<Option<IdempotentResponse>> {
        on_pool!(&self.inner.pool, |p, _Db| {
            let sql = format!("SELECT {IDEMPOTENCY_COLS} FROM idempotency WHERE key = $1");
            let row = sqlx::query(sqlx::AssertSqlSafe(sql))
                .bind(key)
                .fetch_optional(p)
                .await
                .map_err(StoreError::db("reading an idempotency key"))?;
            row.as_ref().map(decode_idempotency).transpose()
        })
    }

    /// Deletes idempotency records stored before `before_ms`; returns how many.
    pub async fn prune_idempotency(&self, before_ms: u64) -> Result<u64> {
        let before = i64::try_from(before_ms).unwrap_or(i64::MAX);
        let keys = on_pool!(&self.inner.pool, |p, _Db| {
            let r = sqlx::query("DELETE FROM idempotency WHERE created_ms < $1")
                .bind(before)
                .execute(p)
                .await
                .map_err(StoreError::db("pruning idempotency keys"))?;
            r.rows_affected()
        });
        Ok(keys + self.prune_claims(before).await?)
    }

    /// Deletes journalled turns that started before `before_ms` (retention);
    /// returns how many.
    pub async fn prune_turns(&self, before_ms: u64) -> Result<u64> {
        let before = i64::try_from(before_ms).unwrap_or(i64::MAX);
        on_pool!(&self.inner.pool, |p, _Db| {
            let r = sqlx::query("DELETE FROM turns WHERE started_ms < $1")
                .bind(before)
                .execute(p)
                .await
                .map_err(StoreError::db("pruning turns"))?;
            Ok(r.rows_affected())
        })
    }

    /// The most recent succeeded turn of (agent, task) with this request
    /// hash, with its stored response (replay instead of re-billing).
    pub async fn completed_turn(
        &self,
        agent: &str,
        task: &str,
        request_hash: &str,
    ) -> Result<Option<TurnRecord>> {
        on_pool!(&self.inner.pool, |p, _Db| {
            let sql = format!(
                "SELECT {TURN_COLS} FROM turns WHERE agent = $1 AND task = $2 \
                 AND request_hash = $3 AND status = 'succeeded' \
                 ORDER BY started_ms DESC, id DESC LIMIT 1"
            );
            let row = sqlx::query(sqlx::AssertSqlSafe(sql))
                .bind(agent)
                .bind(task)
                .bind(request_hash)
                .fetch_optional(p)
                .await
                .map_err(StoreError::db("looking up a completed turn"))?;
            row.as_ref().map(decode_turn).transpose()
        })
    }

    /// One agent's durable state.
    pub async fn agent(&self, id: &str) -> Result<Option<AgentRecord>> {
        on_pool!(&self.inner.pool, |p, _Db| {
            let sql = format!("SELECT {AGENT_COLS} FROM agents WHERE id = $1");
            let row = sqlx::query(sqlx::AssertSqlSafe(sql))
                .bind(id)
                .fetch_optional(p)
                .await
                .map_err(StoreError::db("reading an agent"))?;
            row.as_ref().map(decode_agent).transpose()
        })
    }

    /// At most `limit` agents with an id after `after` (all when `None`), in
    /// the byte order of their ids (Rust's `str` order, whatever the
    /// database's collation), only the paused or only the unpaused ones when
    /// `paused` says so: one page of a walk over every agent, which after
    /// hours of traffic may be millions of rows, never read at once.
    pub async fn agents_page(
        &self,
        after: Option<&str>,
        paused: Option<bool>,
        limit: usize,
    ) -> Result<Vec<AgentRecord>> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        // PostgreSQL compares text by the database's collation unless told
        // otherwise; `COLLATE "C"` is byte order, served by its own index
        // (schema: `agents_by_bytes`). SQLite's default is byte order.
        let id = match self.backend() {
            Backend::Sqlite => "id",
            Backend::Postgres => "id COLLATE \"C\"",
        };
        // Placeholders numbered in the order they are bound: $1 the limit,
        // then the cursor and the state when given.
        let mut filter = Vec::new();
        if after.is_some() {
            filter.push(format!("{id} > ${}", filter.len() + 2));
        }
        if paused.is_some() {
            filter.push(format!("paused = ${}", filter.len() + 2));
        }
        let filter = if filter.is_empty() {
            String::new()
        } else {
            format!("WHERE {}", filter.join(" AND "))
        };
        let sql = format!("SELECT {AGENT_COLS} FROM agents {filter} ORDER BY {id} LIMIT $1");
        on_pool!(&self.inner.pool, |p, _Db| {
            let mut q = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(limit);
            if let Some(after) = after {
                q = q.bind(after);
            }
            if let Some(paused) = paused {
                q = q.bind(paused);
            }
            let rows = q
                .fetch_all(p)
                .await
                .map_err(StoreError::db("listing agents"))?;
            rows.iter().map(decode_agent).collect()
        })
    }

    /// The agents a starting instance holds in memory: every paused one
    /// (its automatic resume is timed in memory), every one never seen
    /// (named by the config or an operator), and the `recent` most recently
    /// seen; the rest are read back when they return
    /// (`hale_core::memory`).
    pub async fn agents_to_hold(&self, recent: usize) -> Result<Vec<AgentRecord>> {
        let recent = i64::try_from(recent).unwrap_or(i64::MAX);
        on_pool!(&self.inner.pool, |p, _Db| {
            let sql = format!(
                "SELECT {AGENT_COLS} FROM agents WHERE paused OR last_seen_ms IS NULL \
                 UNION ALL SELECT {AGENT_COLS} FROM (SELECT {AGENT_COLS} FROM agents \
                 WHERE NOT paused AND last_seen_ms IS NOT NULL \
                 ORDER BY last_seen_ms DESC, id LIMIT $1) AS recent"
            );
            let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
                .bind(recent)
                .fetch_all(p)
                .await
                .map_err(StoreError::db("listing the agents to hold"))?;
            rows.iter().map(decode_agent).collect()
        })
    }

    /// Agents last seen after `after` (a `(last_seen_ms, id)` position) and
    /// at or before `until_ms`, in that order, at most `limit`: the health
    /// monitor's check for agents gone silent while out of memory.
    pub async fn agents_seen_between(
        &self,
        after: &hale_core::memory::SilenceCursor,
        until_ms: u64,
        limit: usize,
    ) -> Result<Vec<AgentRecord>> {
        let from = i64::try_from(after.last_seen_ms).unwrap_or(i64::MAX);
        let until = i64::try_from(until_ms).unwrap_or(i64::MAX);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        on_pool!(&self.inner.pool, |p, _Db| {
            let sql = format!(
                "SELECT {AGENT_COLS} FROM agents WHERE \
                 (last_seen_ms > $1 OR (last_seen_ms = $1 AND id > $2)) AND last_seen_ms <= $3 \
                 ORDER BY last_seen_ms, id LIMIT $4"
            );
            let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
                .bind(from)
                .bind(after.id.as_str())
                .bind(until)
                .bind(limit)
                .fetch_all(p)
                .await
                .map_err(StoreError::db("listing silent agents"))?;
            rows.iter().map(decode_agent).collect()
        })
    }

    /// An agent's checkpoints, of one task or of all, newest first.
    pub async fn checkpoints(
        &self,
        agent: &str,
        task: Option<&str>,
    ) -> Result<Vec<CheckpointRecord>> {
        on_pool!(&self.inner.pool, |p, _Db| {
            let sql = format!(
                "SELECT {CHECKPOINT_COLS} FROM checkpoints WHERE agent = $1 \
                 AND ($2 IS NULL OR task = $2) ORDER BY created_ms DESC, id DESC"
            );
            let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
                .bind(agent)
                .bind(task)
                .fetch_all(p)
                .await
                .map_err(StoreError::db("listing checkpoints"))?;
            rows.iter().map(decode_checkpoint).collect()
        })
    }

    /// One checkpoint.
    pub async fn checkpoint(&self, agent: &str, id: &str) -> Result<Option<CheckpointRecord>> {
        on_pool!(&self.inner.pool, |p, _Db| {
            let sql =
                format!("SELECT {CHECKPOINT_COLS} FROM checkpoints WHERE agent = $1 AND id = $2");
            let row = sqlx::query(sqlx::AssertSqlSafe(sql))
                .bind(agent)
                .bind(id)
                .fetch_optional(p)
                .await
                .map_err(StoreError::db("reading a checkpoint"))?;
            row.as_ref().map(decode_checkpoint).transpose()
        })
    }
}

async fn check_version(pool: &Pool, backend: &'static str, location: &str) -> Result<()> {
    let found: String = on_pool!(pool, |p, _Db| {
        sqlx::query("INSERT INTO meta (key, value) VALUES ('schema_version', $1) ON CONFLICT (key) DO NOTHING")
            .bind(SCHEMA_VERSION.to_string())
            .execute(p)
            .await
            .map_err(StoreError::db("recording the schema version"))?;
        sqlx::query_scalar("SELECT value FROM meta WHERE key = 'schema_version'")
            .fetch_one(p)
            .await
            .map_err(StoreError::db("reading the schema version"))?
    });
    match found.parse::<i64>() {
        Ok(v) if v <= SCHEMA_VERSION => Ok(()),
        Ok(_) | Err(_) => Err(StoreError::Corrupt {
            table: "meta",
            id: "schema_version".into(),
            detail: format!(
                "the {backend} store at {location} has schema version {found:?}; this hale knows up to {SCHEMA_VERSION}"
            ),
        }),
    }
}

pub(crate) async fn last_seq(pool: &Pool) -> Result<i64> {
    on_pool!(pool, |p, _Db| {
        let v: Option<i64> = sqlx::query_scalar("SELECT MAX(seq) FROM events")
            .fetch_one(p)
            .await
            .map_err(StoreError::db("reading the last outbox seq"))?;
        Ok(v.unwrap_or(0))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every connection of the SQLite pool, whichever the writer borrows,
    /// has the bounded page cache (SQLite's default is 2,000 KiB each).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_sqlite_connection_has_the_bounded_page_cache() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open_sqlite(dir.path(), StoreOptions::default())
            .await
            .expect("open");
        let Pool::Sqlite(pool) = &store.inner.pool else {
            panic!("a SQLite store has a SQLite pool");
        };
        let mut held = Vec::new();
        for _ in 0..SQLITE_POOL_SIZE {
            let mut conn = pool.acquire().await.expect("connection");
            let kib: i64 = sqlx::query_scalar("PRAGMA cache_size")
                .fetch_one(&mut *conn)
                .await
                .expect("pragma");
            assert_eq!(kib, -i64::from(SQLITE_CACHE_KIB));
            held.push(conn);
        }
        drop(held);
        store.close().await;
    }
}
