//! The data-directory lock across real processes: this test executable is
//! re-run as a child (`child_holder`, active only with HALE_LOCK_CHILD set)
//! that takes the lock and holds it.

use std::io::{BufRead, BufReader};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use hale_events::lock::{DataDirLock, LOCK_FILE, LockError};

const CHILD_ENV: &str = "HALE_LOCK_CHILD";

/// Child mode: take the lock (takeover per HALE_LOCK_TAKEOVER, grace per
/// HALE_LOCK_GRACE_MS), print `LOCKED <pid>` or `REFUSED <error>`, hold it.
#[test]
fn child_holder() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    let takeover = std::env::var("HALE_LOCK_TAKEOVER").is_ok();
    let grace = std::env::var("HALE_LOCK_GRACE_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .map(Duration::from_millis)
        .unwrap_or(hale_events::lock::TAKEOVER_GRACE);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // Optionally ignore SIGTERM (a stuck owner), so takeover must SIGKILL.
    let _term = std::env::var("HALE_LOCK_IGNORE_TERM").ok().map(|_| {
        rt.block_on(async {
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).unwrap()
        })
    });
    match DataDirLock::acquire_with(Path::new(&dir), takeover, grace) {
        Ok(lock) => {
            println!("LOCKED {}", std::process::id());
            std::thread::sleep(Duration::from_secs(30));
            drop(lock);
        }
        Err(e) => {
            println!("REFUSED {e}");
            panic!("refused: {e}");
        }
    }
}

struct Kid {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Kid {
    fn spawn(dir: &Path, envs: &[(&str, &str)]) -> Kid {
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        cmd.args([
            "--exact",
            "child_holder",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(CHILD_ENV, dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
        for (k, v) in envs {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().unwrap();
        let out = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        Kid { child, lines }
    }

    /// The first LOCKED/REFUSED line.
    fn verdict(&self) -> String {
        loop {
            let line = self
                .lines
                .recv_timeout(Duration::from_secs(20))
                .expect("child said nothing");
            // libtest prefixes the first output line with "test NAME ... ".
            if let Some(at) = line.find("LOCKED").or_else(|| line.find("REFUSED")) {
                return line[at..].to_string();
            }
        }
    }

    fn wait_exit(&mut self) -> std::process::ExitStatus {
        for _ in 0..400 {
            if let Some(st) = self.child.try_wait().unwrap() {
                return st;
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        panic!("child did not exit");
    }
}

impl Drop for Kid {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn recorded_pid(dir: &Path) -> Option<u32> {
    std::fs::read_to_string(dir.join(LOCK_FILE))
        .ok()?
        .trim()
        .parse()
        .ok()
}

#[test]
fn second_process_refuses_naming_the_owner() {
    let dir = tempfile::tempdir().unwrap();
    let mut owner = Kid::spawn(dir.path(), &[]);
    assert_eq!(owner.verdict(), format!("LOCKED {}", owner.child.id()));
    assert_eq!(recorded_pid(dir.path()), Some(owner.child.id()));

    // A second process is refused and names the owner's PID.
    let mut second = Kid::spawn(dir.path(), &[]);
    let v = second.verdict();
    assert!(v.starts_with("REFUSED"), "{v}");
    assert!(v.contains(&format!("pid {}", owner.child.id())), "{v}");
    assert!(!second.wait_exit().success());

    // So is this process, with a typed error.
    match DataDirLock::acquire(dir.path(), false) {
        Err(LockError::Held { pid, .. }) => assert_eq!(pid, Some(owner.child.id())),
        other => panic!("expected Held, got {other:?}"),
    }
    // The refused ones did not remove or rewrite the owner's lockfile.
    assert_eq!(recorded_pid(dir.path()), Some(owner.child.id()));
    let _ = owner.child.kill();
    owner.wait_exit();
    // The OS released the killed owner's lock: it can be taken again.
    let lock = DataDirLock::acquire(dir.path(), false).unwrap();
    assert_eq!(recorded_pid(dir.path()), Some(std::process::id()));
    drop(lock);
    assert!(
        !dir.path().join(LOCK_FILE).exists(),
        "the holder removes the file"
    );
}

#[test]
fn takeover_stops_the_owner_with_sigterm_and_wins() {
    let dir = tempfile::tempdir().unwrap();
    let mut owner = Kid::spawn(dir.path(), &[]);
    assert!(owner.verdict().starts_with("LOCKED"));
    let taker = Kid::spawn(dir.path(), &[("HALE_LOCK_TAKEOVER", "1")]);
    assert_eq!(taker.verdict(), format!("LOCKED {}", taker.child.id()));
    let st = owner.wait_exit();
    assert_eq!(st.signal(), Some(15), "owner stopped by SIGTERM: {st:?}");
    assert_eq!(recorded_pid(dir.path()), Some(taker.child.id()));
}

#[test]
fn takeover_escalates_to_sigkill_when_the_owner_ignores_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let mut owner = Kid::spawn(dir.path(), &[("HALE_LOCK_IGNORE_TERM", "1")]);
    assert!(owner.verdict().starts_with("LOCKED"));
    let taker = Kid::spawn(
        dir.path(),
        &[("HALE_LOCK_TAKEOVER", "1"), ("HALE_LOCK_GRACE_MS", "300")],
    );
    assert_eq!(taker.verdict(), format!("LOCKED {}", taker.child.id()));
    let st = owner.wait_exit();
    assert_eq!(st.signal(), Some(9), "owner killed by SIGKILL: {st:?}");
}

#[test]
fn reacquire_in_process_after_drop() {
    let dir = tempfile::tempdir().unwrap();
    let a = DataDirLock::acquire(dir.path(), false).unwrap();
    // Same process, second open file description: flock conflicts too.
    assert!(matches!(
        DataDirLock::acquire(dir.path(), false),
        Err(LockError::Held { .. })
    ));
    // Takeover never signals its own process.
    assert!(matches!(
        DataDirLock::acquire(dir.path(), true),
        Err(LockError::Held { .. })
    ));
    drop(a);
    let b = DataDirLock::acquire(dir.path(), false).unwrap();
    assert_eq!(DataDirLock::owner(dir.path()), Some(std::process::id()));
    drop(b);
}
