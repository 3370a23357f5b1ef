//! The audit log as a file (`tool_jobs.audit_log`): one JSON line per
//! finished job, appended after the store committed it — the store's
//! `job_audit` table stays the record; this file is the copy that scripts
//! read (seed 003's alert script scans it for `degraded` records).
//!
//! Never unbounded: when the next line would take the file past
//! `max_bytes`, it is renamed `path.1` (`path.1` → `path.2`, …) and at most
//! `keep` rotated files are kept. A write that fails is logged and counted;
//! it never fails the job (the store has it).

use hale_core::config::AuditLogConfig;
use serde_json::Value;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// The audit log file, written by one writer at a time.
pub(crate) struct AuditFile {
    cfg: AuditLogConfig,
    lock: Mutex<()>,
    /// Lines that could not be written.
    pub failures: AtomicU64,
}

fn rotated(path: &Path, n: u32) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(format!(".{n}"));
    PathBuf::from(s)
}

impl AuditFile {
    pub(crate) fn new(cfg: AuditLogConfig) -> Self {
        AuditFile {
            cfg,
            lock: Mutex::new(()),
            failures: AtomicU64::new(0),
        }
    }

    /// Appends one record as a line, rotating first when it would not fit.
    pub(crate) fn append(&self, record: &Value) {
        if let Err(e) = self.try_append(record) {
            self.failures.fetch_add(1, Ordering::Relaxed);
            tracing::error!(path = %self.cfg.path.display(), error = %e, "writing the audit log file failed");
        }
    }

    fn try_append(&self, record: &Value) -> std::io::Result<()> {
        let mut line = serde_json::to_vec(record).map_err(std::io::Error::other)?;
        line.push(b'\n');
        let _guard = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        let path = &self.cfg.path;
        if let Some(dir) = path.parent()
            && !dir.as_os_str().is_empty()
        {
            std::fs::create_dir_all(dir)?;
        }
        let size = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
        if size > 0 && size + line.len() as u64 > self.cfg.max_bytes {
            self.rotate()?;
        }
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        f.write_all(&line)
    }

    /// `path` → `path.1`, `path.1` → `path.2`, …; the oldest past `keep` goes.
    fn rotate(&self) -> std::io::Result<()> {
        let path = &self.cfg.path;
        let keep = self.cfg.keep.max(1);
        let _ = std::fs::remove_file(rotated(path, keep));
        for n in (1..keep).rev() {
            let from = rotated(path, n);
            if from.exists() {
                std::fs::rename(&from, rotated(path, n + 1))?;
            }
        }
        std::fs::rename(path, rotated(path, 1))
    }
}
