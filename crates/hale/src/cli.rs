//! Subcommands (DESIGN §10).

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};
use hale_core::config::{Config, raw};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

#[derive(Parser, Debug)]
#[command(name = "hale", version, about = "A self-healing runtime for LLM agents")]
pub struct Cli {
    #[command(subcommand)]
    pub cmd: Cmd,
}

#[derive(Subcommand, Debug)]
pub enum Cmd {
    /// The showcase: built-in flaky providers, a scripted agent, a live timeline.
    Demo {
        /// Keep the demo's data directory here instead of a temporary one.
        #[arg(long)]
        data_dir: Option<PathBuf>,
    },
    /// Run the gateway.
    Serve {
        /// The YAML config file.
        #[arg(long, short)]
        config: Option<PathBuf>,
        /// Override `listen` from the config.
        #[arg(long)]
        listen: Option<SocketAddr>,
        /// Override `data_dir` from the config.
        #[arg(long)]
        data_dir: Option<PathBuf>,
    },
    /// A fault-injecting OpenAI/Anthropic-compatible provider.
    Chaos {
        #[arg(long, default_value = "127.0.0.1:4000")]
        listen: SocketAddr,
        /// A YAML script: model name -> list of faults.
        #[arg(long)]
        script: Option<PathBuf>,
    },
    /// Supervise an agent process: restart it from its last valid checkpoint after a crash or termination.
    Run(crate::run::RunArgs),
    /// Inspect and control the agents of a running gateway.
    Agent {
        #[command(subcommand)]
        cmd: crate::agents_cmd::AgentCmd,
        #[command(flatten)]
        remote: crate::agents_cmd::Remote,
    },
    /// A health report of a running gateway: paused, stuck and failing agents.
    Doctor {
        #[command(flatten)]
        remote: crate::agents_cmd::Remote,
    },
    /// Agents' checkpoints.
    Checkpoints {
        #[command(subcommand)]
        cmd: crate::agents_cmd::CheckpointsCmd,
        #[command(flatten)]
        remote: crate::agents_cmd::Remote,
    },
    /// Configuration tools.
    Config {
        #[command(subcommand)]
        cmd: ConfigCmd,
    },
}

#[derive(Subcommand, Debug)]
pub enum ConfigCmd {
    /// Validate a config file; print every problem with its path and line.
    Check { file: PathBuf },
}

/// Loads and validates a config file, with env lookups from the process.
pub fn load_config(path: &Path) -> anyhow::Result<Config> {
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read config file {}", path.display()))?;
    raw::load(&text, &|k| std::env::var(k).ok()).map_err(|e| anyhow::anyhow!("invalid config {}:\n{e}", path.display()))
}

/// Installs the one TLS crypto provider (ring) before any client is built.
pub fn install_crypto() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

pub async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.cmd {
        Cmd::Demo { data_dir } => crate::demo::run(data_dir).await,
        Cmd::Serve { config, listen, data_dir } => {
            let Some(path) = config else {
                bail!(
                    "no config given. Run `hale serve --config hale.yaml` with at least a provider, e.g.:\n\n{}",
                    raw::MINIMAL_EXAMPLE
                );
            };
            let mut cfg = load_config(&path)?;
            if let Some(l) = listen {
                cfg.listen = l;
            }
            if let Some(d) = data_dir {
                cfg.data_dir = d;
            }
            serve(cfg).await?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Chaos { listen, script } => {
            let script = match script {
                Some(p) => {
                    let text = std::fs::read_to_string(&p).with_context(|| format!("cannot read script {}", p.display()))?;
                    Some(hale_chaos::parse_script(&text).with_context(|| format!("invalid script {}", p.display()))?)
                }
                None => None,
            };
            let listener = tokio::net::TcpListener::bind(listen)
                .await
                .with_context(|| format!("cannot listen on {listen}"))?;
            eprintln!("hale chaos listening on http://{} (OpenAI: /v1, Anthropic: /)", listener.local_addr()?);
            hale_chaos::serve(listener, hale_chaos::ChaosConfig { script }, shutdown_signal()).await?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Run(args) => crate::run::run(args).await,
        Cmd::Agent { cmd, remote } => crate::agents_cmd::agent(cmd, remote).await,
        Cmd::Doctor { remote } => crate::agents_cmd::doctor(remote).await,
        Cmd::Checkpoints { cmd, remote } => crate::agents_cmd::checkpoints(cmd, remote).await,
        Cmd::Config { cmd: ConfigCmd::Check { file } } => match load_config(&file) {
            Ok(cfg) => {
                println!(
                    "{}: ok ({} providers, {} routes, {} agents)",
                    file.display(),
                    cfg.providers.len(),
                    cfg.routes.len(),
                    cfg.agents.len()
                );
                Ok(ExitCode::SUCCESS)
            }
            Err(e) => {
                eprintln!("{e:#}");
                Ok(ExitCode::from(2))
            }
        },
    }
}

/// Runs the gateway until SIGTERM/SIGINT, then drains and flushes.
pub async fn serve(cfg: Config) -> anyhow::Result<()> {
    install_crypto();
    let cfg = Arc::new(cfg);
    let store = hale_store::Store::open(cfg.storage.as_deref(), &cfg.data_dir, (&cfg.events).into())
        .await
        .with_context(|| format!("cannot open the store in {}", cfg.data_dir.display()))?;
    let gw = hale_gateway::Gateway::new(cfg.clone(), store.clone()).await?;
    let listener = tokio::net::TcpListener::bind(cfg.listen)
        .await
        .with_context(|| format!("cannot listen on {}", cfg.listen))?;
    if cfg.auth.keys.is_empty() {
        tracing::warn!("no API keys configured: only loopback clients are served");
    }
    eprintln!("hale listening on http://{}", listener.local_addr()?);
    let cancel = tokio_util::sync::CancellationToken::new();
    let monitor = tokio::spawn(hale_gateway::health::monitor(gw.clone(), cancel.clone()));
    hale_gateway::http::serve(gw, listener, shutdown_signal()).await?;
    cancel.cancel();
    let _ = monitor.await;
    store.flush().await.context("flushing the store at shutdown")?;
    store.close().await;
    Ok(())
}

/// Resolves on SIGINT or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
}
