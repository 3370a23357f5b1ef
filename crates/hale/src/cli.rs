//! Subcommands (README.md, "Commands").

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};
use hale_core::config::Config;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

#[derive(Parser, Debug)]
#[command(
    name = "hale",
    version,
    about = "A self-healing runtime for LLM agents"
)]
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
        /// If another hale holds the data directory, stop it (SIGTERM, then SIGKILL after 5 s) and take over.
        #[arg(long)]
        takeover: bool,
        /// With no auth.keys, serve every client (not only loopback ones) without authentication; needed to listen on a non-loopback address without keys.
        #[arg(long)]
        insecure_no_auth: bool,
    },
    /// Follow or list the event stream of a running gateway.
    Events {
        #[command(subcommand)]
        cmd: EventsCmd,
    },
    /// The dead-letter queue of a running gateway.
    Dlq {
        #[command(subcommand)]
        cmd: DlqCmd,
    },
    /// A fault-injecting OpenAI/Anthropic/Azure OpenAI/Bedrock/Gemini/Vertex AI-compatible provider.
    Chaos {
        #[arg(long, default_value = "127.0.0.1:4000")]
        listen: SocketAddr,
        /// A YAML script: model name -> list of faults.
        #[arg(long)]
        script: Option<PathBuf>,
        /// The key Azure requests (/openai/...) must carry as `api-key` or
        /// bearer token; without it any non-empty one is accepted.
        #[arg(long)]
        azure_api_key: Option<String>,
        /// A Google service-account key file: the Vertex token endpoint
        /// (POST /token) then takes only assertions of its client_email,
        /// signed by its key.
        #[arg(long)]
        vertex_key: Option<PathBuf>,
        /// The Bedrock API key a bearer on Bedrock requests (/model/...) must
        /// equal; without it any non-empty one. Requests without a bearer must
        /// be SigV4-signed with AKIDEXAMPLE's documented secret or the
        /// loopback STS's credentials (POST /).
        #[arg(long)]
        bedrock_api_key: Option<String>,
    },
    /// Supervise an agent process: restart it from its last valid checkpoint after a crash or termination.
    Run(crate::run::RunArgs),
    /// Inspect and control the agents of a running gateway.
    Agent {
        #[command(subcommand)]
        cmd: crate::agents_cmd::AgentCmd,
        #[command(flatten)]
        remote: crate::remote::Remote,
    },
    /// The deployments (provider/model) of a running gateway: health, and manual trip/reset.
    Deployment {
        #[command(subcommand)]
        cmd: crate::agents_cmd::DeploymentCmd,
        #[command(flatten)]
        remote: crate::remote::Remote,
    },
    /// A health report of a running gateway: event sinks, deployments, paused, stuck and failing agents.
    Doctor {
        #[command(flatten)]
        remote: crate::remote::Remote,
    },
    /// Agents' checkpoints.
    Checkpoints {
        #[command(subcommand)]
        cmd: crate::agents_cmd::CheckpointsCmd,
        #[command(flatten)]
        remote: crate::remote::Remote,
    },
    /// Configuration tools.
    Config {
        #[command(subcommand)]
        cmd: ConfigCmd,
    },
    /// Tool jobs of a running gateway: submit, show, list, audit.
    Jobs {
        #[command(subcommand)]
        cmd: crate::jobs_cmd::JobsCmd,
        #[command(flatten)]
        remote: crate::remote::Remote,
    },
    /// Tool nodes of a running gateway.
    Nodes {
        #[command(subcommand)]
        cmd: crate::jobs_cmd::NodesCmd,
        #[command(flatten)]
        remote: crate::remote::Remote,
    },
}

/// Where a running gateway is.
#[derive(clap::Args, Debug)]
pub struct Remote {
    /// The gateway's URL.
    #[arg(long, default_value = crate::remote::DEFAULT_URL)]
    pub url: String,
    /// An admin token (default: $HALE_TOKEN).
    #[arg(long, env = "HALE_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
}

#[derive(Subcommand, Debug)]
pub enum EventsCmd {
    /// Print events (the last 100, or from --after), then with --follow keep printing new ones.
    Tail {
        #[command(flatten)]
        remote: Remote,
        #[arg(long)]
        follow: bool,
        /// Only these kinds, comma-separated (e.g. agent.paused,breaker.state_changed).
        #[arg(long)]
        kind: Option<String>,
        /// Start after this event id.
        #[arg(long)]
        after: Option<String>,
    },
}

#[derive(Subcommand, Debug)]
pub enum DlqCmd {
    /// List dead-lettered events.
    List {
        #[command(flatten)]
        remote: Remote,
    },
    /// Re-deliver dead-lettered events, in their original order and with their ids.
    Replay {
        #[command(flatten)]
        remote: Remote,
        /// Event ids to replay.
        ids: Vec<String>,
        /// Replay every dead letter.
        #[arg(long)]
        all: bool,
    },
}

#[derive(Subcommand, Debug)]
pub enum ConfigCmd {
    /// Validate a config file; print every problem with its path and line.
    Check { file: PathBuf },
}

pub async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.cmd {
        Cmd::Demo { data_dir } => crate::demo::run(data_dir).await,
        Cmd::Serve {
            config,
            listen,
            data_dir,
            takeover,
            insecure_no_auth,
        } => {
            let Some(path) = config else {
                bail!(
                    "no config given. Run `hale serve --config hale.yaml` with at least a provider, e.g.:\n\n{}",
                    hale_config::MINIMAL_EXAMPLE
                );
            };
            let mut cfg = crate::setup::load_config(&path)?;
            if let Some(l) = listen {
                cfg.listen = l;
            }
            if let Some(d) = data_dir {
                cfg.data_dir = d;
            }
            cfg.auth.insecure_no_auth = insecure_no_auth;
            if let Some(refusal) = hale_core::access::exposure_refusal(&cfg.auth, cfg.listen) {
                bail!("{refusal}");
            }
            serve(cfg, takeover).await?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Events {
            cmd:
                EventsCmd::Tail {
                    remote,
                    follow,
                    kind,
                    after,
                },
        } => {
            hale_events::cli::events_tail(
                &remote.url,
                remote.token.as_deref(),
                follow,
                kind.as_deref(),
                after.as_deref(),
            )
            .await?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Dlq {
            cmd: DlqCmd::List { remote },
        } => {
            hale_events::cli::dlq_list(&remote.url, remote.token.as_deref()).await?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Dlq {
            cmd: DlqCmd::Replay { remote, ids, all },
        } => {
            if ids.is_empty() && !all {
                bail!("name the event ids to replay, or pass --all");
            }
            hale_events::cli::dlq_replay(&remote.url, remote.token.as_deref(), ids, all).await?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Chaos {
            listen,
            script,
            azure_api_key,
            vertex_key,
            bedrock_api_key,
        } => {
            let vertex_key = match vertex_key {
                Some(p) => Some(
                    std::fs::read_to_string(&p)
                        .with_context(|| format!("cannot read the vertex key {}", p.display()))?,
                ),
                None => None,
            };
            let script = match script {
                Some(p) => {
                    let text = std::fs::read_to_string(&p)
                        .with_context(|| format!("cannot read script {}", p.display()))?;
                    Some(
                        hale_chaos::parse_script(&text)
                            .with_context(|| format!("invalid script {}", p.display()))?,
                    )
                }
                None => None,
            };
            let listener = tokio::net::TcpListener::bind(listen)
                .await
                .with_context(|| format!("cannot listen on {listen}"))?;
            eprintln!(
                "hale chaos listening on http://{} (OpenAI: /v1, Anthropic: /, Azure: /, Bedrock: / with its STS at POST /, Gemini: /v1beta, Vertex: / with its token endpoint at /token, tools: /tools and /mcp)",
                listener.local_addr()?
            );
            hale_chaos::serve(
                listener,
                hale_chaos::ChaosConfig {
                    script,
                    azure_api_key,
                    vertex_key,
                    bedrock_api_key,
                },
                shutdown_signal(),
            )
            .await?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Run(args) => crate::run::run(args).await,
        Cmd::Agent { cmd, remote } => crate::agents_cmd::agent(cmd, remote).await,
        Cmd::Deployment { cmd, remote } => crate::agents_cmd::deployment(cmd, remote).await,
        Cmd::Doctor { remote } => crate::agents_cmd::doctor(remote).await,
        Cmd::Checkpoints { cmd, remote } => crate::agents_cmd::checkpoints(cmd, remote).await,
        Cmd::Jobs { cmd, remote } => crate::jobs_cmd::jobs(cmd, remote).await,
        Cmd::Nodes { cmd, remote } => crate::jobs_cmd::nodes(cmd, remote).await,
        Cmd::Config {
            cmd: ConfigCmd::Check { file },
        } => match crate::setup::load_config(&file) {
            Ok(cfg) => {
                use std::io::Write as _;
                writeln!(
                    std::io::stdout().lock(),
                    "{}: ok ({} providers, {} routes, {} agents)",
                    file.display(),
                    cfg.providers.len(),
                    cfg.routes.len(),
                    cfg.agents.len()
                )?;
                Ok(ExitCode::SUCCESS)
            }
            Err(e) => {
                eprintln!("{e:#}");
                Ok(ExitCode::from(2))
            }
        },
    }
}

/// Runs the gateway until SIGTERM/SIGINT (or until a background task dies),
/// then shuts down in order: stop accepting and drain in-flight turns
/// (bounded), stop the background tasks (bounded), flush the outbox, release
/// the data-directory lock. Undelivered events stay in the outbox for the next boot.
pub async fn serve(cfg: Config, takeover: bool) -> anyhow::Result<()> {
    use hale_core::config::{SHUTDOWN_DRAIN, SHUTDOWN_TASKS};
    use hale_core::lease::{LEASE_HEALTH_MONITOR, LEASE_JOURNAL_RETENTION, LEASE_TOOL_JOB_QUEUE};
    let cfg = Arc::new(cfg);
    // One process per data directory (the embedded SQLite store lives there).
    let lock = if cfg.storage.is_none() {
        std::fs::create_dir_all(&cfg.data_dir).with_context(|| {
            format!(
                "cannot create the data directory {}",
                cfg.data_dir.display()
            )
        })?;
        Some(hale_events::lock::DataDirLock::acquire(
            &cfg.data_dir,
            takeover,
        )?)
    } else {
        None
    };
    let store = hale_store::Store::open_config(&cfg)
        .await
        .with_context(|| format!("cannot open the store in {}", cfg.data_dir.display()))?;
    if let Some(endpoint) = &cfg.telemetry.otlp_endpoint {
        crate::telemetry::export(endpoint, &cfg.telemetry.service_name)
            .context("cannot start the OTLP span exporter")?;
    }
    let gw = hale_gateway::Gateway::new(cfg.clone(), store.clone()).await?;
    let tasks = hale_events::tasks::TaskSet::new();
    // Singleton work runs only while this instance holds its lease
    // (docs/operations.md, "Scale-out on PostgreSQL";
    // with SQLite this is the only instance and it takes every lease).
    if lock.is_some() {
        // The data-directory lock makes this the only instance: leases left
        // by a crashed predecessor must not hold the work back for a TTL.
        store.clear_leases().await?;
    }
    let cluster = hale_events::cluster::Cluster::new(store.clone(), cfg.listen.to_string());
    tasks.spawn("cluster-leases", cluster.clone().keep(tasks.token()));
    let relays = hale_events::relay::Relays::start_leased(
        store.clone(),
        &cfg.events,
        &cfg.alerting,
        &tasks,
        &cluster,
    )
    .await?;
    let stats_relays = relays.clone();
    gw.metrics.set_sink_source(Box::new(move || {
        let st = stats_relays.stats();
        (st.sinks, st.shed)
    }));
    // Retention of the turn journal, idempotency keys and kept Responses answers.
    let (retention_store, retention) = (store.clone(), cfg.journal.retention);
    let retention_task = move |prune_token: tokio_util::sync::CancellationToken| {
        let retention_store = retention_store.clone();
        async move {
            let mut every = tokio::time::interval(hale_core::config::JOURNAL_PRUNE_EVERY);
            loop {
                tokio::select! {
                    _ = prune_token.cancelled() => return Ok(()),
                    _ = every.tick() => {}
                }
                let before =
                    hale_gateway::state::wall_ms().saturating_sub(retention.as_millis() as u64);
                let turns = retention_store.prune_turns(before).await?;
                let keys = retention_store.prune_idempotency(before).await?;
                let responses = retention_store.prune_responses(before).await?;
                if turns + keys + responses > 0 {
                    tracing::info!(turns, keys, responses, "journal retention: pruned");
                }
            }
        }
    };
    tasks.spawn(
        "journal-retention",
        cluster.clone().while_held(
            LEASE_JOURNAL_RETENTION.into(),
            tasks.token(),
            retention_task,
        ),
    );
    // Other instances' pause/resume/terminate/reset reach this one's cache.
    tasks.spawn(
        "agent-sync",
        hale_gateway::sync::follow_agents(gw.clone(), tasks.token()),
    );
    // Health history: per-deployment minutes flushed once a minute, pruning.
    let (history_gw, history_store, history_token) = (gw.clone(), store.clone(), tasks.token());
    tasks.spawn("health-history", async move {
        hale_gateway::history::run(&history_gw.history, history_store, history_token).await
    });
    let monitor_gw = gw.clone();
    tasks.spawn(
        "health-monitor",
        cluster
            .clone()
            .while_held(LEASE_HEALTH_MONITOR.into(), tasks.token(), move |token| {
                let gw = monitor_gw.clone();
                async move {
                    hale_gateway::health::monitor(gw, token).await;
                    Ok(())
                }
            }),
    );
    let listener = tokio::net::TcpListener::bind(cfg.listen)
        .await
        .with_context(|| format!("cannot listen on {}", cfg.listen))?;
    if cfg.auth.keys.is_empty() && cfg.auth.insecure_no_auth {
        eprintln!("warning: --insecure-no-auth: every client is served without authentication");
    } else if cfg.auth.keys.is_empty() {
        eprintln!("warning: no API keys configured: only loopback clients are served");
    }
    eprintln!("hale listening on http://{}", listener.local_addr()?);
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let events = hale_events::sse::router_with_relays(store.clone(), &relays);
    // Tool jobs across nodes: admin routes; refresh and queue as named tasks.
    let tools = hale_tools::Tools::new(&cfg, store.clone())?;
    let (t1, t2, token) = (tools.clone(), tools.clone(), tasks.token());
    tasks.spawn("tool-node-refresh", async move {
        t1.refresh_loop(token).await;
        Ok(())
    });
    tasks.spawn(
        "tool-job-queue",
        cluster
            .clone()
            .while_held(LEASE_TOOL_JOB_QUEUE.into(), tasks.token(), move |token| {
                let t2 = t2.clone();
                async move {
                    t2.queue_loop(token).await;
                    Ok(())
                }
            }),
    );
    let events = events
        .merge(tools.admin_router())
        .merge(hale_events::cluster::router(cluster.clone()));
    // `/mcp` takes any valid key (an agent key acts as its agents only).
    let keyed = tools.mcp_router();
    let metric_tools = tools.clone();
    gw.metrics
        .set_tool_source(Box::new(move || tool_samples(&metric_tools)));
    let gw_at_exit = gw.clone();
    let mut server = tokio::spawn(hale_gateway::http::serve_keyed(
        gw,
        events,
        keyed,
        listener,
        async {
            let _ = stop_rx.await;
        },
    ));
    let mut failure = None;
    tokio::select! {
        _ = shutdown_signal() => eprintln!("hale: shutting down"),
        (name, err) = tasks.first_failure() => {
            eprintln!("hale: background task {name} stopped unexpectedly: {err:#}; shutting down");
            failure = Some(anyhow::anyhow!("background task {name} failed: {err:#}"));
        }
        r = &mut server => {
            let r = r.context("the HTTP server task")?;
            r.context("the HTTP server")?;
        }
    }
    let _ = stop_tx.send(());
    if !server.is_finished()
        && tokio::time::timeout(SHUTDOWN_DRAIN, &mut server)
            .await
            .is_err()
    {
        eprintln!(
            "hale: in-flight requests still running after {SHUTDOWN_DRAIN:?}; stopping anyway"
        );
        server.abort();
    }
    let stragglers = tasks.shutdown(SHUTDOWN_TASKS).await;
    if !stragglers.is_empty() {
        eprintln!(
            "hale: background tasks aborted at shutdown: {}",
            stragglers.join(", ")
        );
    }
    cluster.release_all().await;
    gw_at_exit.persist_agents();
    store
        .flush()
        .await
        .context("flushing the store at shutdown")?;
    store.close().await;
    crate::telemetry::shutdown();
    drop(lock);
    match failure {
        Some(e) => Err(e),
        None => Ok(()),
    }
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

/// The tool jobs' figures for `/metrics`, from the runtime's JSON snapshot
/// (the one `GET /jobs/metrics` serves): node names come from the config or
/// registrations, tool names are capped by the runtime.
fn tool_samples(
    tools: &hale_tools::Tools,
) -> (
    Vec<hale_gateway::metrics::ToolNodeSample>,
    Vec<hale_gateway::metrics::ToolSample>,
) {
    use hale_gateway::metrics::{ToolNodeSample, ToolSample};
    let nodes = tools.registry.snapshot();
    let snap = tools
        .metrics
        .snapshot(&nodes, std::time::Instant::now(), hale_tools::wall_ms());
    let f = |v: &serde_json::Value, k: &str| v[k].as_f64().unwrap_or(0.0);
    let node_samples = snap["nodes"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(name, v)| ToolNodeSample {
            node: name.clone(),
            availability: f(v, "node_availability"),
            failover_rate: f(v, "failover_rate"),
        })
        .collect();
    let tool_samples = snap["tools"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(name, v)| ToolSample {
            tool: name.clone(),
            failover_rate: f(v, "failover_rate"),
            degraded_percentage: f(v, "degraded_percentage"),
        })
        .collect();
    (node_samples, tool_samples)
}
