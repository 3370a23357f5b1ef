//! Process harness for the tests that drive the real `hale` binary: free
//! ports, child processes that are killed when dropped (each by its own
//! handle, never by name), a config file in a temporary directory, and
//! waiting for a server to answer.
#![allow(dead_code)]

pub mod chaos_task;
pub mod proxy;

use std::path::Path;
use std::time::Duration;

/// The binary under test, as the test kit's [`hale_testkit::Program`].
pub struct HaleBin;

impl hale_testkit::Program for HaleBin {
    const PATH: &'static str = env!("CARGO_BIN_EXE_hale");
}

/// A `hale` child process, killed and reaped when dropped; its stderr in a
/// file so a failing test can show it.
pub type Proc = hale_testkit::Proc<HaleBin>;

// Free ports, waiting for a server to answer, the workspace root: the
// workspace's shared test kit.
#[allow(unused_imports)]
pub use hale_testkit::{free_port, wait_ready, workspace_root};

/// The binary under test.
pub fn hale_bin() -> &'static str {
    <HaleBin as hale_testkit::Program>::PATH
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
        let http = hale_testkit::client(Duration::from_secs(60));
        let (chaos, chaos_base) = start_chaos(&http, dir.path()).await;

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
        let v =
            hale_testkit::get_json(&self.http, &format!("{}/chaos/stats", self.chaos_base)).await;
        v["requests_per_model"][model].as_u64().unwrap_or(0)
    }
}

/// The chaos deterministic answer of `n` words: `w0 w1 … w{n-1}`.
#[allow(unused_imports)]
pub use hale_testkit::words;

/// Starts `hale chaos` on a free loopback port (stderr in `dir`) and waits
/// (up to 30 s) until it answers; returns it and its base URL.
pub async fn start_chaos(http: &reqwest::Client, dir: &Path) -> (Proc, String) {
    start_chaos_with(http, dir, &[]).await
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

/// [`start_chaos`] with extra arguments (e.g. `--script FILE`).
pub async fn start_chaos_with(
    http: &reqwest::Client,
    dir: &Path,
    extra: &[&str],
) -> (Proc, String) {
    let listen = format!("127.0.0.1:{}", free_port());
    let mut args = vec!["chaos", "--listen", listen.as_str()];
    args.extend_from_slice(extra);
    let mut chaos = Proc::spawn(&args, dir, "chaos");
    let base = format!("http://{listen}");
    wait_ready(
        http,
        &format!("{base}/chaos/stats"),
        &mut chaos,
        Duration::from_secs(30),
    )
    .await;
    (chaos, base)
}

/// `hale chaos` (with a `--script`, when given) and `hale serve` in front of
/// it, in one temporary directory: the rig of the agent-client tests.
/// `config` is everything of `hale serve`'s config but `listen` and
/// `data_dir`; `{chaos}` in it is the chaos base URL.
pub struct ChaosRig {
    pub dir: tempfile::TempDir,
    pub chaos: Proc,
    pub chaos_base: String,
    pub hale: Proc,
    pub base: String,
    pub http: reqwest::Client,
}

impl ChaosRig {
    pub async fn start(config: &str, script: Option<&str>) -> ChaosRig {
        let dir = tempfile::tempdir().expect("tempdir");
        let script_path = dir.path().join("chaos-script.yaml");
        let script_arg = script_path.to_string_lossy().into_owned();
        let extra: Vec<&str> = match script {
            Some(s) => {
                std::fs::write(&script_path, s).expect("script written");
                vec!["--script", script_arg.as_str()]
            }
            None => Vec::new(),
        };
        ChaosRig::start_in(dir, config, &extra, &[]).await
    }

    /// [`ChaosRig::start`] with chaos's extra arguments (e.g. `--azure-api-key
    /// K`) and environment variables for `hale serve` (e.g. a provider key).
    pub async fn start_with(config: &str, chaos_args: &[&str], env: &[(&str, &str)]) -> ChaosRig {
        let dir = tempfile::tempdir().expect("tempdir");
        ChaosRig::start_in(dir, config, chaos_args, env).await
    }

    /// [`ChaosRig::start`] with a chaos script and environment variables
    /// for `hale serve`.
    pub async fn start_scripted(config: &str, script: &str, env: &[(&str, &str)]) -> ChaosRig {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("chaos-script.yaml");
        std::fs::write(&path, script).expect("script written");
        let arg = path.to_string_lossy().into_owned();
        ChaosRig::start_in(dir, config, &["--script", &arg], env).await
    }

    async fn start_in(
        dir: tempfile::TempDir,
        config: &str,
        chaos_args: &[&str],
        env: &[(&str, &str)],
    ) -> ChaosRig {
        hale_testkit::install_crypto();
        let http = hale_testkit::client(Duration::from_secs(60));
        let (chaos, chaos_base) = start_chaos_with(&http, dir.path(), chaos_args).await;
        let config = config.replace("{chaos}", &chaos_base);
        let (hale, base) = start_serve(&http, dir.path(), &config, env).await;
        ChaosRig {
            dir,
            chaos,
            chaos_base,
            hale,
            base,
            http,
        }
    }

    /// Runs the Python script `script` (under tests/sdk) with `py` as
    /// `script ARGS[0] BASE_URL ARGS[1..]`, where BASE_URL is hale's `/v1`;
    /// its stdout parsed as JSON (a failing script fails the test, with
    /// hale's stderr).
    pub async fn sdk(&self, py: &Path, script: &str, args: &[&str]) -> serde_json::Value {
        let script = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/sdk")
            .join(script);
        let base_url = format!("{}/v1", self.base);
        let mut argv = args.first().into_iter().copied().collect::<Vec<_>>();
        argv.push(base_url.as_str());
        argv.extend(args.iter().skip(1).copied());
        let out = tokio::process::Command::new(py)
            .arg(&script)
            .args(&argv)
            .output()
            .await
            .expect("python runs");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "the SDK script failed:\n{stdout}\n{stderr}\nhale:\n{}",
            self.hale.stderr()
        );
        serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"))
    }

    /// How many requests chaos received for `model`.
    pub async fn chaos_requests(&self, model: &str) -> u64 {
        let v =
            hale_testkit::get_json(&self.http, &format!("{}/chaos/stats", self.chaos_base)).await;
        v["requests_per_model"][model].as_u64().unwrap_or(0)
    }

    /// The request bodies chaos received (the last 32), oldest first.
    pub async fn chaos_bodies(&self) -> Vec<serde_json::Value> {
        let v = hale_testkit::get_json(&self.http, &format!("{}/chaos/requests", self.chaos_base))
            .await;
        v.as_array().cloned().unwrap_or_default()
    }

    /// How often chaos applied `fault` (`ok`, `cut`, `error-503`, `tool`, …).
    pub async fn chaos_faults(&self, fault: &str) -> u64 {
        let v =
            hale_testkit::get_json(&self.http, &format!("{}/chaos/stats", self.chaos_base)).await;
        v["requests_per_fault"][fault].as_u64().unwrap_or(0)
    }
}

/// The service account of the throwaway Vertex keys ([`vertex_key_json`]).
pub const VERTEX_CLIENT_EMAIL: &str = "hale-test@chaos-proj.iam.gserviceaccount.com";

/// A throwaway 2048-bit RSA key (PKCS#8 PEM), from `openssl` (a test
/// dependency, like Python): a Vertex service-account key for one test.
pub fn throwaway_key() -> String {
    let out = std::process::Command::new("openssl")
        .args([
            "genpkey",
            "-algorithm",
            "RSA",
            "-pkeyopt",
            "rsa_keygen_bits:2048",
        ])
        .output()
        .expect("openssl runs (a test dependency: it makes the throwaway service-account key)");
    assert!(out.status.success(), "openssl genpkey failed");
    String::from_utf8(out.stdout).expect("PEM is text")
}

/// A service-account key file's JSON for `pem`, its token endpoint
/// `token_uri` (chaos's `/token` in the tests).
pub fn vertex_key_json(pem: &str, token_uri: &str) -> String {
    serde_json::json!({
        "type": "service_account",
        "project_id": "chaos-proj",
        "private_key_id": "throwaway-test-key",
        "private_key": pem,
        "client_email": VERTEX_CLIENT_EMAIL,
        "client_id": "1",
        "token_uri": token_uri,
    })
    .to_string()
}

/// The AWS settings of the machine running the tests, blanked, with the
/// shared files pointed at nothing in `dir`: a Bedrock test's hale sees
/// only the credentials the test gives it.
pub fn aws_env_isolated(dir: &Path) -> Vec<(String, String)> {
    let mut all: Vec<(String, String)> = [
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_PROFILE",
        "AWS_ROLE_ARN",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
        "AWS_ENDPOINT_URL_STS",
    ]
    .iter()
    .map(|k| (k.to_string(), String::new()))
    .collect();
    all.push((
        "AWS_SHARED_CREDENTIALS_FILE".into(),
        dir.join("no-credentials").display().to_string(),
    ));
    all.push((
        "AWS_CONFIG_FILE".into(),
        dir.join("no-config").display().to_string(),
    ));
    all
}
