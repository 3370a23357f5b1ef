//! [`DataDirLock`]: one process per data directory
//! (docs/operations.md, "Running").
//!
//! Two hale processes writing one SQLite file and relaying one outbox would
//! deliver every event twice and fight over cursors. The data directory is
//! held with an OS advisory lock (`flock`, through `File::try_lock`) on
//! `hale.lock`, which also records the holder's PID so a refused process can
//! name its owner. The OS drops the lock when the holder dies, even on
//! `kill -9`, so a stale file never blocks a restart.
//!
//! Only the holder ever removes the file (on drop, while still holding the
//! lock). Removing a lockfile opens a classic race — a waiter may have locked
//! the old, now unlinked inode — so after locking, the acquirer checks that
//! the file it locked is still the one at the path, and retries otherwise.
//!
//! `--takeover` sends SIGTERM to the recorded PID, waits up to
//! [`TAKEOVER_GRACE`] for the lock to be released, then sends SIGKILL and
//! waits up to [`KILL_WAIT`] more.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The lockfile inside the data directory.
pub const LOCK_FILE: &str = "hale.lock";
/// How long a takeover waits after SIGTERM before SIGKILL.
pub const TAKEOVER_GRACE: Duration = Duration::from_secs(5);
/// How long a takeover waits for the lock after SIGKILL.
pub const KILL_WAIT: Duration = Duration::from_secs(5);
/// How often a takeover polls the lock.
const POLL: Duration = Duration::from_millis(50);

/// Why the lock could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Another process holds the data directory.
    #[error(
        "the data directory {} is in use by another hale process (pid {}); stop it or start with --takeover",
        dir.display(),
        pid.map(|p| p.to_string()).unwrap_or_else(|| "unknown".into())
    )]
    Held { dir: PathBuf, pid: Option<u32> },
    /// Takeover: the owner did not release the lock even after SIGKILL.
    #[error("takeover of {} failed: pid {pid} still holds the lock after SIGTERM and SIGKILL", dir.display())]
    TakeoverFailed { dir: PathBuf, pid: u32 },
    /// The lockfile could not be created, read or written.
    #[error("lockfile {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// The held lock on a data directory. Dropping it removes the lockfile and
/// releases the lock.
#[derive(Debug)]
pub struct DataDirLock {
    file: File,
    path: PathBuf,
}

enum Attempt {
    Locked(File),
    Busy(Option<u32>),
}

impl DataDirLock {
    /// Takes the lock on `dir` (created when missing). With `takeover`, a
    /// running owner is stopped first (SIGTERM, [`TAKEOVER_GRACE`], SIGKILL).
    pub fn acquire(dir: &Path, takeover: bool) -> Result<DataDirLock, LockError> {
        Self::acquire_with(dir, takeover, TAKEOVER_GRACE)
    }

    /// [`DataDirLock::acquire`] with another grace period between SIGTERM
    /// and SIGKILL.
    pub fn acquire_with(
        dir: &Path,
        takeover: bool,
        grace: Duration,
    ) -> Result<DataDirLock, LockError> {
        let path = dir.join(LOCK_FILE);
        let io = |source| LockError::Io {
            path: path.clone(),
            source,
        };
        std::fs::create_dir_all(dir).map_err(io)?;
        let pid = match try_once(&path)? {
            Attempt::Locked(file) => return Self::hold(file, path),
            Attempt::Busy(pid) => pid,
        };
        let held = || LockError::Held {
            dir: dir.to_path_buf(),
            pid,
        };
        if !takeover {
            return Err(held());
        }
        // Never signal ourselves or a PID we could not read.
        let Some(owner) = pid.filter(|p| *p != std::process::id() && *p != 0) else {
            return Err(held());
        };
        tracing::warn!(pid = owner, dir = %dir.display(), "takeover: sending SIGTERM to the lock owner");
        signal(owner, "TERM");
        if let Some(file) = wait_for(&path, grace)? {
            return Self::hold(file, path);
        }
        tracing::warn!(
            pid = owner,
            "takeover: owner still running after the grace period; sending SIGKILL"
        );
        signal(owner, "KILL");
        match wait_for(&path, KILL_WAIT)? {
            Some(file) => Self::hold(file, path),
            None => Err(LockError::TakeoverFailed {
                dir: dir.to_path_buf(),
                pid: owner,
            }),
        }
    }

    fn hold(mut file: File, path: PathBuf) -> Result<DataDirLock, LockError> {
        let io = |source| LockError::Io {
            path: path.clone(),
            source,
        };
        file.set_len(0).map_err(io)?;
        file.seek(SeekFrom::Start(0)).map_err(io)?;
        writeln!(file, "{}", std::process::id()).map_err(io)?;
        file.sync_all().map_err(io)?;
        Ok(DataDirLock { file, path })
    }

    /// The lockfile's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The PID recorded in `dir`'s lockfile, if any (for messages and tools).
    pub fn owner(dir: &Path) -> Option<u32> {
        read_pid(&dir.join(LOCK_FILE))
    }
}

impl Drop for DataDirLock {
    fn drop(&mut self) {
        // Still holding the lock: nobody else can have locked this inode, and
        // a waiter that locks it after us re-checks the path and retries.
        if let Err(e) = std::fs::remove_file(&self.path) {
            tracing::warn!(path = %self.path.display(), error = %e, "cannot remove the lockfile");
        }
        let _ = self.file.unlock();
    }
}

/// One try: open (creating), lock, and check the locked file is still the
/// one at `path` (the previous holder may have removed it meanwhile).
fn try_once(path: &Path) -> Result<Attempt, LockError> {
    let io = |source| LockError::Io {
        path: path.to_path_buf(),
        source,
    };
    for _ in 0..16 {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(io)?;
        match file.try_lock() {
            Ok(()) => {
                let locked = file.metadata().map_err(io)?;
                match std::fs::metadata(path) {
                    Ok(now) if now.dev() == locked.dev() && now.ino() == locked.ino() => {
                        return Ok(Attempt::Locked(file));
                    }
                    // Unlinked or replaced under us: try the new file.
                    Ok(_) => continue,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                    Err(e) => return Err(io(e)),
                }
            }
            Err(TryLockError::WouldBlock) => return Ok(Attempt::Busy(read_pid(path))),
            Err(TryLockError::Error(e)) => return Err(io(e)),
        }
    }
    Ok(Attempt::Busy(read_pid(path)))
}

fn wait_for(path: &Path, within: Duration) -> Result<Option<File>, LockError> {
    let deadline = Instant::now() + within;
    loop {
        if let Attempt::Locked(file) = try_once(path)? {
            return Ok(Some(file));
        }
        if Instant::now() >= deadline {
            return Ok(None);
        }
        std::thread::sleep(POLL);
    }
}

fn read_pid(path: &Path) -> Option<u32> {
    let mut s = String::new();
    File::open(path).ok()?.read_to_string(&mut s).ok()?;
    s.trim().parse().ok()
}

/// Sends a signal with the system's `kill` (the crate forbids `unsafe`, so
/// no direct libc call).
fn signal(pid: u32, sig: &str) {
    match std::process::Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
    {
        Ok(status) if status.success() => {}
        Ok(status) => {
            tracing::warn!(pid, sig, %status, "kill reported a failure (owner already gone?)")
        }
        Err(e) => tracing::warn!(pid, sig, error = %e, "cannot run kill"),
    }
}
