//! [`Store`]: the one handle over every concern, and opening it.
//!
//! This file owns the handle's shared state ([`Inner`]: the pool, the
//! writer's queue and task, the instance name) and how a backend is opened:
//! schema, version check, starting the group-commit writer
//! ([`crate::writer`]) and, on PostgreSQL, the outbox listener
//! ([`crate::listen`]). Everything a caller does with a store is added by
//! one file per concern, each with its own `impl Store` block above this
//! one: the write path (`commit.rs`), the journal (`journal.rs`), agents and
//! their counts (`agents.rs`), the outbox and dead letters (`outbox.rs`),
//! idempotency (`idem.rs`), jobs (`jobs.rs`), the health history
//! (`history.rs`) and the cluster's instances and leases (`cluster.rs`).
//! This file imports none of them.
//!
//! Writes go through the group-commit writer; reads go straight to the
//! pool. With SQLite in WAL mode readers never block the writer nor each
//! other; a read after `commit()` returned sees that commit.

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hale_core::config::{EventsConfig, StoragePoolConfig};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;

use crate::backend::{Pool, SCHEMA_LOCK, last_seq, on_pool};
use crate::error::{Result, StoreError};
use crate::schema::{self, SCHEMA_VERSION};
use crate::writer::{self, Msg, Shared};

/// The SQLite file inside the data directory.
pub const SQLITE_FILE: &str = "hale.db";
/// Connections of the SQLite pool (readers; the group-commit writer has one
/// more of its own, `backend::WriterConn`).
pub const SQLITE_POOL_SIZE: u32 = 4;
/// Each SQLite connection's page cache, in KiB (`PRAGMA cache_size = -N`).
/// SQLite's default is 2,000 KiB per connection, and the writer used to
/// borrow any of the pool's connections, so each came to cache the same hot
/// pages of the journal's indexes: under a busy journal the four caches filled for
/// more than ten minutes, the last of a gateway's memory still growing
/// after warm-up (measured at stop 23; the run is in the git history of BENCHMARKS.md). 512 KiB is
/// 128 pages of 4 KiB; a same-run A/B at c=64 showed no throughput change.
/// The writer's own connection has a larger one,
/// `backend::SQLITE_WRITER_CACHE_KIB`.
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
    /// After this long without a write, SQLite's page caches are emptied
    /// and the C heap trimmed, once per quiet spell
    /// (`hale_core::memory::RELEASE_AFTER_IDLE`).
    pub release_after_idle: Duration,
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
            release_after_idle: hale_core::memory::RELEASE_AFTER_IDLE,
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

/// hale's durable state. Cheap to clone; all clones share one writer.
#[derive(Clone)]
pub struct Store {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) pool: Pool,
    /// The writer's queue (the write path, src/commit.rs).
    pub(crate) tx: mpsc::UnboundedSender<Msg>,
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
    pub fn open_sqlite<'a>(
        data_dir: &'a Path,
        opts: StoreOptions,
    ) -> crate::BoxFut<'a, Result<Store>> {
        Box::pin(Self::open_sqlite_inner(data_dir, opts))
    }

    async fn open_sqlite_inner(data_dir: &Path, opts: StoreOptions) -> Result<Store> {
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
    pub fn open_postgres<'a>(url: &'a str, opts: StoreOptions) -> crate::BoxFut<'a, Result<Store>> {
        Box::pin(Self::open_postgres_inner(url, opts))
    }

    async fn open_postgres_inner(url: &str, opts: StoreOptions) -> Result<Store> {
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
    pub fn open_config<'a>(cfg: &'a hale_core::config::Config) -> crate::BoxFut<'a, Result<Store>> {
        Box::pin(Self::open_config_inner(cfg))
    }

    async fn open_config_inner(cfg: &hale_core::config::Config) -> Result<Store> {
        Self::open(cfg.storage.as_deref(), &cfg.data_dir, StoreOptions::of(cfg)).await
    }

    /// Opens the store named by config `storage:`: none or `sqlite` is SQLite
    /// in `data_dir`, a `postgres://` (or `postgresql://`) URL is PostgreSQL.
    pub fn open<'a>(
        storage: Option<&'a str>,
        data_dir: &'a Path,
        opts: StoreOptions,
    ) -> crate::BoxFut<'a, Result<Store>> {
        Box::pin(Self::open_inner(storage, data_dir, opts))
    }

    async fn open_inner(
        storage: Option<&str>,
        data_dir: &Path,
        opts: StoreOptions,
    ) -> Result<Store> {
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
            releases: AtomicU64::new(0),
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
            opts.release_after_idle,
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

    /// How many quiet spells the writer gave its caches back after
    /// ([`StoreOptions::release_after_idle`]).
    pub fn memory_releases(&self) -> u64 {
        self.inner
            .shared
            .releases
            .load(std::sync::atomic::Ordering::Relaxed)
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

    /// Commits everything queued, stops the writer and closes the pool.
    /// Later writes fail with [`StoreError::Closed`].
    pub fn close<'a>(&'a self) -> crate::BoxFut<'a, ()> {
        Box::pin(self.close_inner())
    }

    async fn close_inner(&self) {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Every connection of the SQLite pool (and the writer's own, opened
    /// with the pool's options) has the bounded page cache (SQLite's default is 2,000 KiB each).
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
