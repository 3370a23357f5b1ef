//! hale-store: hale's durable state — the turn journal, agents, idempotency
//! keys, checkpoints and the event outbox (docs/architecture.md, "Storage").
//!
//! One API over two backends: SQLite in WAL mode in `data_dir/hale.db` (the
//! embedded default) and PostgreSQL (scale-out). All writes go through one
//! background writer per store that batches them into group commits (the
//! rules are in `src/writer.rs`): a request never waits on an
//! fsync of its own, and nothing a caller was told is committed is lost on
//! kill -9 (SQLite `synchronous=NORMAL` in WAL mode: a commit has reached the
//! OS before `commit()` returns; `fsync_always` makes it `FULL`, surviving
//! power loss too).
//!
//! The files form layers, each importing only those below it:
//! `error`, `schema` and `model` (plain records and [`Write`]) at the bottom;
//! `rows` (records ⇄ rows), `backend` (the pools, applying a batch),
//! `writer` (group commit) and `listen` (PostgreSQL notifications); `store`
//! (the [`Store`] handle and opening it); then one file per concern, each
//! adding an `impl Store` block: `commit` (the write path), `journal`,
//! `agents`, `outbox`, `idem`, `jobs`, `history`, `cluster`, `responses`.
//!
//! ```no_run
//! # async fn demo() -> Result<(), hale_store::StoreError> {
//! use hale_store::{Store, StoreOptions, Write};
//! let store = Store::open(None, std::path::Path::new("./hale-data"), StoreOptions::default()).await?;
//! store.commit(vec![/* Write::Agent(..), Write::Event(..) */]).await?;
//! let events = store.events_after(0, 100, None).await?;
//! # let _ = events; store.close().await; Ok(()) }
//! ```

mod agents;
mod backend;
mod cluster;
mod commit;
mod error;
mod history;
mod idem;
mod jobs;
mod journal;
mod listen;
mod model;
mod outbox;
mod responses;
mod rows;
mod schema;
mod store;
mod writer;

pub use cluster::{InstanceRecord, LeaseRecord};
pub use commit::{Committing, Room};
pub use error::{Result, StoreError};

/// What the store's public async functions return: a boxed future, built
/// where the function is defined. An `async fn`'s body is compiled in every
/// crate that polls it (like a generic function), so an unboxed API had the
/// gateway, the tools, the events crate and the binary each compile the
/// store's whole sqlx code for both backends again; a boxed one compiles it
/// once, here (BENCHMARKS.md, "First build").
pub type BoxFut<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;
pub use history::{History, HistoryQuery, MAX_TRANSITIONS, TransitionRecord};
pub use idem::{Claim, ClaimWaiter};
pub use jobs::AuditRecord;
pub use listen::{AgentListener, Heard};
pub use model::{
    AgentChange, AgentControl, AgentRecord, AgentTotals, AuditEntry, CheckpointRecord, CountWrite,
    Counted, DeadLetter, IdempotentResponse, JobRecord, ResponseRecord, SinkCursor, StoredEvent,
    StoredResponse, TaskCount, TaskCounted, TurnRecord, TurnStatus, Write,
};
pub use schema::SCHEMA_VERSION;
pub use store::{Backend, SQLITE_BUSY_TIMEOUT, SQLITE_FILE, SQLITE_POOL_SIZE, Store, StoreOptions};
