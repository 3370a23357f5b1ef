//! Child processes of a test: started with their stderr in a file (shown
//! when the test fails), killed and reaped when dropped (each by its own
//! handle, never by name), waited for until a URL answers or they exit.

use std::marker::PhantomData;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// The program a [`Proc`] runs by default: a crate's tests name their binary
/// (`env!("CARGO_BIN_EXE_…")`, only known inside that crate) with a marker
/// type, and `Proc<Marker>::spawn` runs it.
pub trait Program {
    const PATH: &'static str;
}

/// A child process, killed and reaped when dropped. Its stderr goes to a
/// file so a failing test can show it.
pub struct Proc<P> {
    pub child: Child,
    pub stderr_path: PathBuf,
    program: PhantomData<fn() -> P>,
}

impl<P: Program> Proc<P> {
    /// Runs the program with `args`; stderr in `dir/{name}.stderr`.
    pub fn spawn(args: &[&str], dir: &Path, name: &str) -> Self {
        Self::spawn_env(args, dir, name, &[])
    }

    /// [`Proc::spawn`] with extra environment variables.
    pub fn spawn_env(args: &[&str], dir: &Path, name: &str, envs: &[(&str, &str)]) -> Self {
        let mut cmd = Command::new(P::PATH);
        cmd.args(args).envs(envs.iter().copied());
        Self::start(cmd, dir, name)
    }
}

impl<P> Proc<P> {
    /// Starts `cmd` with no stdin or stdout and its stderr in `dir/{name}.stderr`.
    pub fn start(mut cmd: Command, dir: &Path, name: &str) -> Self {
        let stderr_path = dir.join(format!("{name}.stderr"));
        let stderr = std::fs::File::create(&stderr_path).expect("stderr file");
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .unwrap_or_else(|e| panic!("{name} starts: {e}"));
        Proc {
            child,
            stderr_path,
            program: PhantomData,
        }
    }

    /// What it wrote on stderr so far.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }
}

impl<P> Drop for Proc<P> {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Polls `url` until it answers 2xx, or panics after `limit` (or when `proc`
/// exits first) with `proc`'s stderr.
pub async fn wait_ready<P>(http: &reqwest::Client, url: &str, proc: &mut Proc<P>, limit: Duration) {
    let t0 = Instant::now();
    loop {
        if let Ok(r) = http.get(url).send().await
            && r.status().is_success()
        {
            return;
        }
        if let Ok(Some(status)) = proc.child.try_wait() {
            panic!(
                "{url}: the process exited with {status} before it was ready:\n{}",
                proc.stderr()
            );
        }
        if t0.elapsed() > limit {
            panic!("{url} not ready after {limit:?}:\n{}", proc.stderr());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until `p` exits; panics with its stderr when it still runs after `limit`.
pub async fn wait_exit<P>(p: &mut Proc<P>, limit: Duration) -> ExitStatus {
    let t0 = Instant::now();
    loop {
        if let Some(s) = p.child.try_wait().unwrap() {
            return s;
        }
        assert!(
            t0.elapsed() < limit,
            "process still running after {limit:?}:\n{}",
            p.stderr()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
