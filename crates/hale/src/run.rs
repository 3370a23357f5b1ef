//! `hale run --agent NAME [--task T] -- CMD…`: supervise an agent process
//! (docs/operations.md, "Agent health and supervision").
//!
//! The child gets `OPENAI_BASE_URL` (`URL/v1`), `ANTHROPIC_BASE_URL` (`URL`),
//! `HALE_URL`, `HALE_AGENT`, `HALE_TASK`, `HALE_RESTART` (0 on the first
//! start) and, when it resumes, `HALE_CHECKPOINT`: the path of a file
//! holding the checkpoint body to resume from (absent on a first start or a
//! restart from scratch). Its stdout and stderr are passed through and kept,
//! appended to `LOG_DIR/AGENT.TASK.log` with a header line per start.
//!
//! When the child exits non-zero, or the gateway terminated its task (polled
//! every [`TERMINATE_POLL`]; the child is then killed), the supervisor asks
//! the gateway for a recovery plan (`POST /agents/{a}/tasks/{t}/recover`)
//! and does what it says: wait out the backoff, restart from the checkpoint
//! it names (corrupt ones already skipped), restart from scratch, or stop
//! for good (human review; exit code [`EXIT_GAVE_UP`]). The plan, the limits
//! (`recovery:` of the gateway's config) and the `recovery.*` events live in
//! the gateway, so a supervisor needs no config of its own and several
//! supervisors of one agent share one budget of recoveries.
//!
//! With `--url` it talks to a running `hale serve`, and checks first that the
//! gateway answers (`GET /live`) and accepts the token: an agent started
//! against no gateway would only fail, so the child is never started then.
//! Without `--url` it starts an embedded gateway from `--config` on a
//! loopback port (with its monitor). A clean exit (status 0) ends the
//! supervision with success.
//!
//! A gateway that blips (restarting, briefly unreachable, answering 5xx)
//! while the child is down does not end the supervision: the supervisor asks
//! for the recovery plan again with capped backoff
//! ([`RECOVER_BACKOFF_INITIAL`] doubling to [`RECOVER_BACKOFF_MAX`]) for up
//! to [`RECOVER_PATIENCE`] before it gives up. A refusal (4xx: bad token,
//! bad request) is final at once.

use crate::remote::enc;
use anyhow::{Context, bail};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{ExitCode, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};

/// How often the supervisor asks whether the child's task was terminated.
pub const TERMINATE_POLL: Duration = Duration::from_millis(500);
/// Exit code when the recovery limits were reached (human review).
pub const EXIT_GAVE_UP: u8 = 3;
/// How long the supervisor keeps asking an unreachable (or 5xx) gateway for a recovery plan.
pub const RECOVER_PATIENCE: Duration = Duration::from_secs(60);
/// The first wait between two such attempts; it doubles up to [`RECOVER_BACKOFF_MAX`].
pub const RECOVER_BACKOFF_INITIAL: Duration = Duration::from_millis(250);
/// The longest wait between two attempts to reach the gateway.
pub const RECOVER_BACKOFF_MAX: Duration = Duration::from_secs(5);
/// Default directory for the kept output and resume files.
pub const DEFAULT_LOG_DIR: &str = "hale-runs";

#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// The agent's name (HALE_AGENT, and the x-hale-agent it should send).
    #[arg(long)]
    pub agent: String,
    /// The task (HALE_TASK).
    #[arg(long, default_value = hale_gateway::guardrails::DEFAULT_TASK)]
    pub task: String,
    /// A running gateway; without it an embedded one is started from --config.
    #[arg(long)]
    pub url: Option<String>,
    /// Admin token for the gateway (default $HALE_TOKEN).
    #[arg(long, env = "HALE_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Config of the embedded gateway (ignored with --url).
    #[arg(long, short)]
    pub config: Option<PathBuf>,
    /// Where the child's output and resume files are kept.
    #[arg(long, default_value = DEFAULT_LOG_DIR)]
    pub log_dir: PathBuf,
    /// The agent command and its arguments.
    #[arg(last = true, required = true)]
    pub cmd: Vec<String>,
}

/// A gateway the supervisor talks to over HTTP.
struct Api {
    http: reqwest::Client,
    url: String,
    token: Option<String>,
}

impl Api {
    fn req(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let rb = self.http.request(method, format!("{}{path}", self.url));
        match &self.token {
            Some(t) => rb.bearer_auth(t),
            None => rb,
        }
    }

    async fn terminated(&self, agent: &str, task: &str) -> bool {
        let path = format!("/agents/{}/tasks/{}", enc(agent), enc(task));
        match self.req(reqwest::Method::GET, &path).send().await {
            Ok(r) if r.status().is_success() => r
                .json::<Value>()
                .await
                .is_ok_and(|v| v["terminated"] == true),
            Ok(_) | Err(_) => false,
        }
    }

    /// Before the child starts: the gateway answers and accepts the token.
    async fn preflight(&self, agent: &str, task: &str) -> anyhow::Result<()> {
        let live = self
            .req(reqwest::Method::GET, "/live")
            .send()
            .await
            .map_err(|e| hale_events::cli::unreachable(&self.url, &e))
            .context("the agent was not started")?;
        if !live.status().is_success() {
            bail!(
                "the gateway at {} is not live ({}); the agent was not started",
                self.url,
                live.status()
            );
        }
        // An admin call the supervisor will need: a refused token fails now,
        // not after the first crash.
        let path = format!("/agents/{}/tasks/{}", enc(agent), enc(task));
        let r = self
            .req(reqwest::Method::GET, &path)
            .send()
            .await
            .map_err(|e| hale_events::cli::unreachable(&self.url, &e))
            .context("the agent was not started")?;
        let status = r.status();
        if matches!(status.as_u16(), 401 | 403) {
            let body = r.text().await.unwrap_or_default();
            return Err(hale_events::cli::refused(
                &format!("GET {path}"),
                status,
                &body,
            ))
            .context("the agent was not started");
        }
        Ok(())
    }

    /// One request for a recovery plan. `Err(Retry)` when the gateway did
    /// not answer or answered 5xx (it may be restarting): worth asking again.
    async fn recover_once(
        &self,
        agent: &str,
        task: &str,
        cause: &str,
    ) -> Result<Value, RecoverError> {
        let path = format!("/agents/{}/tasks/{}/recover", enc(agent), enc(task));
        let r = self
            .req(reqwest::Method::POST, &path)
            .json(&serde_json::json!({ "cause": cause }))
            .send()
            .await
            .map_err(|e| RecoverError::Retry(hale_events::cli::unreachable(&self.url, &e)))?;
        let status = r.status();
        let text = r.text().await.unwrap_or_default();
        if status.is_server_error() {
            return Err(RecoverError::Retry(hale_events::cli::refused(
                &format!("POST {path}"),
                status,
                &text,
            )));
        }
        if !status.is_success() {
            return Err(RecoverError::Final(
                hale_events::cli::refused(&format!("POST {path}"), status, &text)
                    .context("the gateway refused the recovery plan"),
            ));
        }
        serde_json::from_str(&text).map_err(|e| {
            RecoverError::Final(anyhow::anyhow!(
                "the gateway's recovery plan could not be read: {e}"
            ))
        })
    }

    /// A recovery plan, asking again with capped backoff while the gateway
    /// blips, for up to [`RECOVER_PATIENCE`].
    async fn recover(&self, agent: &str, task: &str, cause: &str) -> anyhow::Result<Value> {
        let t0 = tokio::time::Instant::now();
        let mut wait = RECOVER_BACKOFF_INITIAL;
        loop {
            match self.recover_once(agent, task, cause).await {
                Ok(v) => return Ok(v),
                Err(RecoverError::Final(e)) => return Err(e),
                Err(RecoverError::Retry(e)) => {
                    if t0.elapsed() + wait > RECOVER_PATIENCE {
                        return Err(e.context(format!(
                            "no recovery plan after {}s of trying; the agent stays down",
                            RECOVER_PATIENCE.as_secs()
                        )));
                    }
                    eprintln!("hale run: {e:#}; asking again in {} ms", wait.as_millis());
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(RECOVER_BACKOFF_MAX);
                }
            }
        }
    }
}

/// Why a request for a recovery plan failed.
enum RecoverError {
    /// No answer, or a 5xx: the gateway may be restarting; ask again.
    Retry(anyhow::Error),
    /// A refusal or an unreadable plan: asking again would not help.
    Final(anyhow::Error),
}

fn file_safe(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Copies a child's stream line by line to our own stream and the log.
fn keep<R: AsyncRead + Unpin + Send + 'static>(
    from: R,
    log: Arc<Mutex<std::fs::File>>,
    to_stderr: bool,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut lines = BufReader::new(from).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            use std::io::Write;
            // Our own stdout/stderr may be closed: the child's output is
            // still kept in the log, and nothing panics.
            let _ = if to_stderr {
                writeln!(std::io::stderr().lock(), "{line}")
            } else {
                writeln!(std::io::stdout().lock(), "{line}")
            };
            if let Ok(mut f) = log.lock() {
                let _ = writeln!(f, "{line}");
            }
        }
    })
}

enum Ended {
    Clean,
    Crashed(String),
    Terminated,
    Interrupted,
}

pub async fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    let mut embedded = None;
    let url = match &args.url {
        Some(u) => u.trim_end_matches('/').to_owned(),
        None => {
            let Some(path) = &args.config else {
                bail!(
                    "`hale run` needs --url of a running gateway, or --config to start an embedded one"
                );
            };
            let cfg = crate::setup::load_config(path)?;
            let e = Embedded::start(cfg).await?;
            let u = e.url.clone();
            embedded = Some(e);
            u
        }
    };
    let api = Api {
        http: hale_events::cli::http_client(false)?,
        url: url.clone(),
        token: args.token.clone(),
    };
    if embedded.is_none() {
        api.preflight(&args.agent, &args.task).await?;
    }
    std::fs::create_dir_all(&args.log_dir)
        .with_context(|| format!("cannot create the log directory {}", args.log_dir.display()))?;
    let stem = format!("{}.{}", file_safe(&args.agent), file_safe(&args.task));
    let log_path = args.log_dir.join(format!("{stem}.log"));
    let resume_path = args.log_dir.join(format!("{stem}.checkpoint.json"));
    let log = Arc::new(Mutex::new(
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .with_context(|| format!("cannot open {}", log_path.display()))?,
    ));
    eprintln!(
        "hale run: supervising {:?} as agent {} task {} through {url}",
        args.cmd, args.agent, args.task
    );
    eprintln!("hale run: output kept in {}", log_path.display());

    let mut checkpoint: Option<(String, PathBuf)> = None;
    let mut restart = 0u32;
    let code = loop {
        {
            use std::io::Write;
            let from = checkpoint.as_ref().map_or(
                "none (first start or from scratch)".to_owned(),
                |(id, _)| id.clone(),
            );
            if let Ok(mut f) = log.lock() {
                let _ = writeln!(f, "--- hale run: start {restart}, checkpoint: {from} ---");
            }
        }
        let ended = run_once(
            &args,
            &api,
            &url,
            restart,
            checkpoint.as_ref().map(|(_, p)| p.as_path()),
            &log,
        )
        .await?;
        let cause = match ended {
            Ended::Clean => {
                eprintln!("hale run: agent {} exited cleanly", args.agent);
                break ExitCode::SUCCESS;
            }
            Ended::Interrupted => {
                eprintln!("hale run: interrupted; the agent was stopped");
                break ExitCode::from(130);
            }
            Ended::Crashed(c) => c,
            Ended::Terminated => "terminated".to_owned(),
        };
        eprintln!(
            "hale run: agent {} stopped ({cause}); asking the gateway for a recovery plan",
            args.agent
        );
        let next = loop {
            let plan = api.recover(&args.agent, &args.task, &cause).await?;
            match plan["action"].as_str() {
                Some("wait") => {
                    let ms = plan["retry_after_ms"].as_u64().unwrap_or(0).max(10);
                    eprintln!("hale run: backing off {ms} ms before the restart");
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                }
                Some("restart") => break Some(plan),
                Some("stop") => {
                    eprintln!(
                        "hale run: recovery limits reached, stopping for good (human review): {}",
                        plan["reason"].as_str().unwrap_or("")
                    );
                    break None;
                }
                _ => bail!("unexpected recovery plan from the gateway: {plan}"),
            }
        };
        let Some(plan) = next else {
            break ExitCode::from(EXIT_GAVE_UP);
        };
        restart = plan["attempt"]
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .unwrap_or(restart + 1);
        checkpoint = match plan["from"].as_str() {
            Some("checkpoint") => {
                let id = plan["checkpoint"]["id"].as_str().unwrap_or("").to_owned();
                let body = serde_json::to_vec(&plan["checkpoint"]["body"])?;
                std::fs::write(&resume_path, body)
                    .with_context(|| format!("cannot write {}", resume_path.display()))?;
                if let Some(skipped) = plan["skipped"].as_array().filter(|s| !s.is_empty()) {
                    eprintln!("hale run: skipped corrupt checkpoint(s) {skipped:?}");
                }
                eprintln!("hale run: restart {restart} from checkpoint {id}");
                Some((id, resume_path.clone()))
            }
            _ => {
                eprintln!("hale run: restart {restart} from scratch");
                None
            }
        };
    };
    if let Some(e) = embedded {
        e.stop().await;
    }
    Ok(code)
}

async fn run_once(
    args: &RunArgs,
    api: &Api,
    url: &str,
    restart: u32,
    checkpoint: Option<&Path>,
    log: &Arc<Mutex<std::fs::File>>,
) -> anyhow::Result<Ended> {
    let Some((prog, rest)) = args.cmd.split_first() else {
        bail!("no command to run");
    };
    let mut cmd = tokio::process::Command::new(prog);
    hale_alloc::child_keeps_huge_pages(cmd.as_std_mut());
    cmd.args(rest)
        .env("OPENAI_BASE_URL", format!("{url}/v1"))
        .env("ANTHROPIC_BASE_URL", url)
        .env("HALE_URL", url)
        .env("HALE_AGENT", &args.agent)
        .env("HALE_TASK", &args.task)
        .env("HALE_RESTART", restart.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    match checkpoint {
        Some(p) => cmd.env("HALE_CHECKPOINT", p),
        None => cmd.env_remove("HALE_CHECKPOINT"),
    };
    let mut child = cmd
        .spawn()
        .with_context(|| format!("cannot start {prog}"))?;
    let out = child.stdout.take().map(|s| keep(s, log.clone(), false));
    let err = child.stderr.take().map(|s| keep(s, log.clone(), true));
    let ended = loop {
        tokio::select! {
            status = child.wait() => {
                let status = status.context("waiting for the agent")?;
                break if status.success() {
                    Ended::Clean
                } else {
                    Ended::Crashed(match status.code() {
                        Some(c) => format!("crash (exit {c})"),
                        None => "crash (killed by a signal)".to_owned(),
                    })
                };
            }
            _ = tokio::time::sleep(TERMINATE_POLL) => {
                if api.terminated(&args.agent, &args.task).await {
                    let _ = child.kill().await;
                    break Ended::Terminated;
                }
            }
            _ = tokio::signal::ctrl_c() => {
                let _ = child.kill().await;
                break Ended::Interrupted;
            }
        }
    };
    for h in [out, err].into_iter().flatten() {
        let _ = h.await;
    }
    Ok(ended)
}

/// An in-process gateway for `hale run` without `--url`.
struct Embedded {
    url: String,
    store: hale_store::Store,
    cancel: tokio_util::sync::CancellationToken,
    server: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Embedded {
    async fn start(cfg: hale_core::config::Config) -> anyhow::Result<Self> {
        let cfg = Arc::new(cfg);
        let store = hale_store::Store::open_config(&cfg)
            .await
            .with_context(|| format!("cannot open the store in {}", cfg.data_dir.display()))?;
        let gw = hale_gateway::Gateway::new(cfg.clone(), store.clone()).await?;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}", listener.local_addr()?);
        let cancel = tokio_util::sync::CancellationToken::new();
        tokio::spawn(hale_gateway::health::monitor(gw.clone(), cancel.clone()));
        let stop = cancel.clone();
        let server = tokio::spawn(hale_gateway::http::serve(gw, listener, async move {
            stop.cancelled().await
        }));
        eprintln!("hale run: embedded gateway on {url}");
        Ok(Self {
            url,
            store,
            cancel,
            server,
        })
    }

    async fn stop(self) {
        self.cancel.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(10), self.server).await;
        let _ = self.store.flush().await;
        self.store.close().await;
    }
}
