//! `data_dir:`, `storage:`, `storage_pool:` and `journal:` — where state is
//! kept, the PostgreSQL pool's limits, and how long the journal keeps what.

use super::ctx::Ctx;
use crate::{RawJournal, RawStoragePool};
use hale_core::config::{JournalConfig, StoragePoolConfig};
use serde_saphyr::Spanned;
use std::path::PathBuf;
use std::time::Duration;

impl Ctx<'_> {
    pub(super) fn data_dir(&mut self, d: &Spanned<String>, data_dir: &mut PathBuf) {
        if d.value.trim().is_empty() {
            self.at("data_dir", d, "must not be empty");
        } else {
            *data_dir = PathBuf::from(&d.value);
        }
    }

    pub(super) fn storage(&mut self, s: &Spanned<String>, storage: &mut Option<String>) {
        let v = s.value.trim();
        if v.starts_with("postgres://") || v.starts_with("postgresql://") {
            *storage = Some(v.to_owned());
        } else {
            // The URL is not echoed: it may hold a password.
            self.at(
                "storage",
                s,
                "must be a postgres:// or postgresql:// URL (omit it for SQLite in data_dir)",
            );
        }
    }

    pub(super) fn storage_pool(&mut self, r: &RawStoragePool, pool: &mut StoragePoolConfig) {
        if let Some(n) = &r.max_connections {
            if n.value == 0 {
                self.at("storage_pool.max_connections", n, "must be at least 1");
            } else {
                pool.max_connections = n.value;
            }
        }
        if let Some(ms) = &r.acquire_timeout_ms {
            if ms.value == 0 {
                self.at("storage_pool.acquire_timeout_ms", ms, "must be at least 1");
            } else {
                pool.acquire_timeout = Duration::from_millis(ms.value);
            }
        }
    }

    pub(super) fn journal(&mut self, r: &RawJournal, journal: &mut JournalConfig) {
        if let Some(h) = &r.retention_hours {
            if h.value == 0 {
                self.at("journal.retention_hours", h, "must be at least 1");
            } else {
                journal.retention = Duration::from_secs(h.value.saturating_mul(3600));
            }
        }
        if let Some(b) = &r.bodies {
            journal.bodies = b.value;
        }
        if let Some(d) = &r.durability {
            journal.durability = d.value;
        }
    }
}
