//! Errors of the store.
//!
//! Every variant says what failed in words a reader of the log can act on: the
//! operation, the table and row for corrupt data, the path or URL for an open.
//! A group commit's failure reaches every caller that waited on it, so the
//! database error is shared behind an `Arc`.

use std::path::PathBuf;
use std::sync::Arc;

/// Result alias of this crate.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// What went wrong in the store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The data directory could not be created.
    #[error("cannot create data directory {path}: {source}")]
    DataDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The database could not be opened or its schema not created.
    #[error("cannot open the {backend} store at {location}: {source}")]
    Open {
        backend: &'static str,
        location: String,
        #[source]
        source: sqlx::Error,
    },
    /// `storage:` is neither empty, `sqlite` nor a `postgres://` URL.
    #[error("unsupported storage {0:?}: expected `sqlite` or a postgres:// URL")]
    UnsupportedStorage(String),
    /// A query failed.
    #[error("{op} failed: {source}")]
    Db {
        op: &'static str,
        #[source]
        source: sqlx::Error,
    },
    /// A group commit failed; every write of the failed transaction is lost
    /// and every caller waiting on it gets this error.
    #[error("commit of {what} failed: {source}")]
    Commit {
        what: String,
        #[source]
        source: Arc<sqlx::Error>,
    },
    /// A value cannot be stored (e.g. a number past the column's range).
    #[error("cannot store {what}: {detail}")]
    Invalid { what: String, detail: String },
    /// A stored row does not decode.
    #[error("corrupt row in table {table} (id {id}): {detail}")]
    Corrupt {
        table: &'static str,
        id: String,
        detail: String,
    },
    /// `dead_letter` named a seq that is not (or no longer) in the outbox.
    #[error("no event with seq {0} in the outbox")]
    NoSuchEvent(i64),
    /// Writes submitted with [`crate::Store::submit`] failed since the last flush.
    #[error("{count} submitted write batch(es) failed since the last flush; last error: {last}")]
    SubmitFailed { count: u64, last: String },
    /// The store was closed.
    #[error("the store is closed")]
    Closed,
}

impl StoreError {
    pub(crate) fn db(op: &'static str) -> impl FnOnce(sqlx::Error) -> StoreError {
        move |source| StoreError::Db { op, source }
    }
}
