//! Process harness for the tests that drive the real `hale` binary: free
//! ports, child processes that are killed when dropped (each by its own
//! handle, never by name), a config file in a temporary directory, and
//! waiting for a server to answer.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The binary under test.
pub fn hale_bin() -> &'static str {
    env!("CARGO_BIN_EXE_hale")
}

/// The workspace root (two levels above this crate).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A port that was free a moment ago (bound to 0, then released).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// A child process, killed and reaped when dropped. Its stderr goes to a file
/// so a failing test can show it.
pub struct Proc {
    pub child: Child,
    pub stderr_path: PathBuf,
}

impl Proc {
    pub fn spawn(args: &[&str], dir: &Path, name: &str) -> Proc {
        Self::spawn_env(args, dir, name, &[])
    }

    /// [`Proc::spawn`] with extra environment variables.
    pub fn spawn_env(args: &[&str], dir: &Path, name: &str, envs: &[(&str, &str)]) -> Proc {
        let stderr_path = dir.join(format!("{name}.stderr"));
        let stderr = std::fs::File::create(&stderr_path).expect("stderr file");
        let child = Command::new(hale_bin())
            .args(args)
            .envs(envs.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("hale starts");
        Proc { child, stderr_path }
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Polls `url` until it answers 200, or panics after `limit` with `proc`'s stderr.
pub async fn wait_ready(http: &reqwest::Client, url: &str, proc: &mut Proc, limit: Duration) {
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

/// A running `hale chaos` and a running `hale serve` in front of it, with
/// route `r` = a primary that always answers 503 (OpenAI kind) then a
/// healthy Anthropic-kind backup serving `backup-model`.
pub struct Stack {
    pub dir: tempfile::TempDir,
    pub chaos: Proc,
    pub chaos_base: String,
    pub hale: Proc,
    pub base: String,
    pub http: reqwest::Client,
}

pub const BACKUP_MODEL: &str = "backup-model";
pub const PRIMARY_MODEL: &str = "error-503";

impl Stack {
    pub async fn start() -> Stack {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let dir = tempfile::tempdir().expect("tempdir");
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(60))
            .build()
            .expect("client");
        let cport = free_port();
        let chaos_listen = format!("127.0.0.1:{cport}");
        let mut chaos = Proc::spawn(&["chaos", "--listen", &chaos_listen], dir.path(), "chaos");
        let chaos_base = format!("http://{chaos_listen}");
        wait_ready(
            &http,
            &format!("{chaos_base}/chaos/stats"),
            &mut chaos,
            Duration::from_secs(20),
        )
        .await;

        let port = free_port();
        let data = dir.path().join("data");
        let yaml = format!(
            "\
listen: 127.0.0.1:{port}
data_dir: {data}
routes:
  r: [primary/{PRIMARY_MODEL}, backup/{BACKUP_MODEL}]
providers:
  - name: primary
    kind: openai
    base_url: {chaos_base}/v1
    default_model: {PRIMARY_MODEL}
  - name: backup
    kind: anthropic
    base_url: {chaos_base}
    default_model: {BACKUP_MODEL}
retry:
  server_error: {{max_attempts: 3, initial_ms: 50, max_ms: 200}}
",
            data = data.display()
        );
        let cfg_path = dir.path().join("hale.yaml");
        std::fs::write(&cfg_path, yaml).expect("config written");
        let cfg_arg = cfg_path.to_string_lossy().into_owned();
        let mut hale = Proc::spawn(&["serve", "--config", &cfg_arg], dir.path(), "serve");
        let base = format!("http://127.0.0.1:{port}");
        wait_ready(
            &http,
            &format!("{base}/ready"),
            &mut hale,
            Duration::from_secs(30),
        )
        .await;
        Stack {
            dir,
            chaos,
            chaos_base,
            hale,
            base,
            http,
        }
    }

    /// Chat requests chaos received for `model`.
    pub async fn chaos_requests(&self, model: &str) -> u64 {
        let v: serde_json::Value = self
            .http
            .get(format!("{}/chaos/stats", self.chaos_base))
            .send()
            .await
            .expect("stats")
            .json()
            .await
            .expect("stats json");
        v["requests_per_model"][model].as_u64().unwrap_or(0)
    }
}

/// The chaos deterministic answer of `n` words.
pub fn words(n: usize) -> String {
    (0..n)
        .map(|i| format!("w{i}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Starts `hale chaos` on a free loopback port (stderr in `dir`) and waits
/// until it answers; returns it and its base URL.
pub async fn start_chaos(http: &reqwest::Client, dir: &Path) -> (Proc, String) {
    let listen = format!("127.0.0.1:{}", free_port());
    let mut chaos = Proc::spawn(&["chaos", "--listen", &listen], dir, "chaos");
    let base = format!("http://{listen}");
    wait_ready(
        http,
        &format!("{base}/chaos/stats"),
        &mut chaos,
        Duration::from_secs(20),
    )
    .await;
    (chaos, base)
}

/// Starts `hale serve` on a free loopback port with `config` (everything but
/// `listen` and `data_dir`, which are added: the data directory is
/// `dir/data`) and `envs`, and waits until `/ready` answers; returns it and
/// its base URL.
pub async fn start_serve(
    http: &reqwest::Client,
    dir: &Path,
    config: &str,
    envs: &[(&str, &str)],
) -> (Proc, String) {
    let port = free_port();
    let yaml = format!(
        "listen: 127.0.0.1:{port}\ndata_dir: {}\n{config}",
        dir.join("data").display()
    );
    let cfg = dir.join("hale.yaml");
    std::fs::write(&cfg, yaml).expect("config written");
    let mut hale = Proc::spawn_env(
        &["serve", "--config", &cfg.to_string_lossy()],
        dir,
        "serve",
        envs,
    );
    let base = format!("http://127.0.0.1:{port}");
    wait_ready(
        http,
        &format!("{base}/ready"),
        &mut hale,
        Duration::from_secs(30),
    )
    .await;
    (hale, base)
}
