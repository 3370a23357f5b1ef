//! The chaos hour's scale-out mode (`--mode scale-out`, issue 41): hale's
//! own parts for two instances and the faults that strike them.
//!
//! It owns what the embedded mode does not have: a private PostgreSQL
//! cluster for the run ([`Pg`]: `initdb` and `pg_ctl` from
//! `/usr/lib/postgresql/*/bin` as the `postgres` user, a free port, a fresh
//! database `hale_hour_<pid>`, so restarting it never touches the machine's
//! shared PostgreSQL; without those binaries the shared one on
//! 127.0.0.1:5432 is used and the restart is skipped, as the table says), a
//! `nats-server -js` of the run's own on a free port (so it can be killed),
//! a webhook receiver counting the events it is sent by id, two `hale
//! serve` instances on the one database with both sinks, and HAProxy in
//! front (round robin, health checks on `/ready`, a connection refused
//! re-dispatched to the other instance). The fleet calls HAProxy.
//!
//! [`faults`] is the pure schedule of the scale-out faults (an instance
//! SIGKILLed and restarted on its port and config, NATS killed and
//! restarted on its port and store, PostgreSQL restarted), merged into the
//! embedded schedule by chaos_hour.rs; [`ScaleOut::strike`] and
//! [`ScaleOut::heal`] play them. After the run [`ScaleOut::events`] counts the events the outbox
//! holds (PostgreSQL's `events`) against those at NATS (hale's JetStream
//! stream, by `Nats-Msg-Id`) and at the webhook receiver, and the dead
//! letters.

use crate::procs::{self, Proc};
use anyhow::{Context, bail};
use serde::Serialize;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How long a killed instance or NATS stays down before it is restarted.
pub const DOWN: Duration = Duration::from_secs(10);

/// The scale-out faults come round once per this much of the run (at
/// least once).
pub const CYCLE: Duration = Duration::from_secs(600);

/// hale's JetStream stream (`NatsConfig::DEFAULT_STREAM`, the default the
/// config here keeps).
const STREAM: &str = "HALE_EVENTS";

/// The hale instances behind the load balancer.
pub const INSTANCES: usize = 2;

/// A part of hale's a scale-out fault strikes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// A hale instance (its index): SIGKILLed, restarted on its port and config.
    Instance(usize),
    /// The run's nats-server: SIGKILLed, restarted on its port and store.
    Nats,
    /// The run's private PostgreSQL cluster: restarted at once.
    Postgres,
}

/// One scale-out fault of the schedule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Strike {
    /// From the start of the faulted run.
    pub at: Duration,
    /// How long the part stays down (0: restarted at once).
    pub lasts: Duration,
    pub part: Part,
}

/// The scale-out faults of a run of length `total`: per [`CYCLE`] (at least
/// one), an instance SIGKILLed at a quarter of it (which one from `seed`,
/// alternating), NATS killed at two fifths, PostgreSQL restarted at three
/// fifths. Pure.
pub fn faults(seed: u64, total: Duration) -> Vec<Strike> {
    let cycles = (total.as_secs_f64() / CYCLE.as_secs_f64()).floor().max(1.0) as u32;
    let period = total / cycles;
    let mut out = Vec::new();
    for c in 0..cycles {
        let base = period * c;
        let instance = ((seed + u64::from(c)) % INSTANCES as u64) as usize;
        let parts = [
            (period / 4, Part::Instance(instance), DOWN),
            (period * 2 / 5, Part::Nats, DOWN),
            (period * 3 / 5, Part::Postgres, Duration::ZERO),
        ];
        for (at, part, lasts) in parts {
            out.push(Strike {
                at: base + at,
                lasts,
                part,
            });
        }
    }
    out
}

/// The run's PostgreSQL: a private cluster (restartable) or the shared one.
pub struct Pg {
    /// `None`: the machine's shared PostgreSQL (never restarted).
    private: Option<PrivatePg>,
    port: u16,
    pub db: String,
    /// Why the restart fault is skipped, when it is.
    pub skip_restart: Option<String>,
}

struct PrivatePg {
    bin: PathBuf,
    data: PathBuf,
    _dir: tempfile::TempDir,
}

fn pg_bin_dir() -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
        .filter(|d| d.join("initdb").is_file() && d.join("pg_ctl").is_file())
        .collect();
    dirs.sort();
    dirs.pop()
}

/// Runs `cmd` as the `postgres` user (`runuser`), its output in the error.
fn as_postgres(args: &[&str]) -> anyhow::Result<()> {
    let out = Command::new("runuser")
        .args(["-u", "postgres", "--"])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .context("runuser runs")?;
    if !out.status.success() {
        bail!(
            "{args:?} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

fn private_pg() -> anyhow::Result<(PrivatePg, u16)> {
    let bin = pg_bin_dir().context("no /usr/lib/postgresql/*/bin with initdb and pg_ctl")?;
    let dir = tempfile::Builder::new().prefix("hale-hour-pg-").tempdir()?;
    let chown = Command::new("chown")
        .arg("postgres:")
        .arg(dir.path())
        .status()?;
    if !chown.success() {
        bail!("cannot give {} to postgres", dir.path().display());
    }
    let data = dir.path().join("data");
    let initdb = bin.join("initdb").display().to_string();
    let data_s = data.display().to_string();
    as_postgres(&[
        &initdb,
        "-D",
        &data_s,
        "-A",
        "trust",
        "-U",
        "postgres",
        "--no-sync",
    ])?;
    let port = procs::free_port()?.port();
    let pg = PrivatePg {
        bin,
        data,
        _dir: dir,
    };
    let opts = format!(
        "-p {port} -k {} -c listen_addresses=127.0.0.1 -c max_connections=100",
        pg._dir.path().display()
    );
    pg.ctl(&["-o", &opts, "start"])?;
    Ok((pg, port))
}

impl PrivatePg {
    fn ctl(&self, args: &[&str]) -> anyhow::Result<()> {
        let ctl = self.bin.join("pg_ctl").display().to_string();
        let data = self.data.display().to_string();
        let log = self.data.with_file_name("pg.log").display().to_string();
        let mut all = vec![ctl.as_str(), "-D", &data, "-l", &log, "-w", "-m", "fast"];
        all.extend_from_slice(args);
        as_postgres(&all)
    }
}

impl Pg {
    /// A private cluster when it can be made, else the shared one; a fresh
    /// database on it either way.
    pub fn start() -> anyhow::Result<Pg> {
        let db = format!("hale_hour_{}", std::process::id());
        let (private, port, skip_restart) = match private_pg() {
            Ok((p, port)) => (Some(p), port, None),
            Err(e) => (
                None,
                5432,
                Some(format!(
                    "no private PostgreSQL cluster ({e:#}): the shared one is never restarted"
                )),
            ),
        };
        let pg = Pg {
            private,
            port,
            db,
            skip_restart,
        };
        pg.psql("postgres", &format!("CREATE DATABASE {}", pg.db))?;
        Ok(pg)
    }

    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{}", self.port, self.db)
    }

    /// `psql -Atc sql` on `db`; its output.
    fn psql(&self, db: &str, sql: &str) -> anyhow::Result<String> {
        let out = Command::new("psql")
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(["-U", "postgres", "-d", db, "-Atc", sql])
            .stdin(Stdio::null())
            .output()
            .context("psql runs")?;
        if !out.status.success() {
            bail!("psql {sql}: {}", String::from_utf8_lossy(&out.stderr));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Restarts the private cluster (`pg_ctl restart -m fast`); false when
    /// it is the shared one (skipped).
    fn restart(&self) -> anyhow::Result<bool> {
        match &self.private {
            Some(p) => p.ctl(&["restart"]).map(|()| true),
            None => Ok(false),
        }
    }
}

impl Drop for Pg {
    fn drop(&mut self) {
        let _ = self.psql(
            "postgres",
            &format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.db),
        );
        if let Some(p) = &self.private {
            let _ = p.ctl(&["-m", "immediate", "stop"]);
        }
    }
}

/// The webhook receiver: every POST's `x-hale-event-id`, counted.
type Received = Arc<Mutex<BTreeMap<String, u64>>>;

async fn start_webhook() -> anyhow::Result<(SocketAddr, Received, tokio::task::JoinHandle<()>)> {
    use axum::http::HeaderMap;
    let got: Received = Arc::default();
    let g = got.clone();
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |h: HeaderMap| {
            let g = g.clone();
            async move {
                let id = h
                    .get("x-hale-event-id")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("")
                    .to_owned();
                *g.lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .entry(id)
                    .or_default() += 1;
                "ok"
            }
        }),
    );
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = l.local_addr()?;
    let task = tokio::spawn(async move {
        let _ = axum::serve(l, app).await;
    });
    Ok((addr, got, task))
}

fn haproxy_bin() -> Option<PathBuf> {
    [
        "/usr/sbin/haproxy",
        "/usr/bin/haproxy",
        "/usr/local/sbin/haproxy",
    ]
    .iter()
    .map(PathBuf::from)
    .find(|p| p.is_file())
}

/// HAProxy's config: round robin over the instances, each checked on
/// `/ready` every second (down after 2 failures, up after 1 success), a
/// refused connection re-dispatched to the other.
pub fn haproxy_cfg(listen: SocketAddr, instances: &[SocketAddr]) -> String {
    let mut c = format!(
        "global\n  maxconn 4096\ndefaults\n  mode http\n  timeout connect 2s\n  timeout client 600s\n  timeout server 600s\n  retries 3\n  option redispatch\nfrontend hour\n  bind {listen}\n  default_backend hale\nbackend hale\n  balance roundrobin\n  option httpchk GET /ready\n  http-check expect status 200\n  default-server inter 1s fall 2 rise 1\n"
    );
    for (i, a) in instances.iter().enumerate() {
        c.push_str(&format!("  server hale-{i} {a} check\n"));
    }
    c
}

/// One hale instance: its address, config file, process (`None` while killed).
struct Instance {
    addr: SocketAddr,
    cfg: PathBuf,
    proc: Option<Proc>,
}

/// The scale-out mode's running parts.
pub struct ScaleOut {
    nats_bin: PathBuf,
    nats_dir: PathBuf,
    nats_port: u16,
    nats: Option<hale_testkit::nats::NatsServer>,
    hook: Received,
    _hook_task: tokio::task::JoinHandle<()>,
    instances: Vec<Instance>,
    _lb: Proc,
    /// The load balancer's root URL: what the fleet calls.
    pub base: String,
    bin: PathBuf,
    work: PathBuf,
    envs: Vec<(&'static str, &'static str)>,
    /// Scale-out faults skipped, with why.
    pub skipped: Vec<String>,
    /// Last: dropped (its database dropped) after the instances are gone.
    pub pg: Pg,
}

/// What the parts need of the chaos hour.
pub struct Parts<'a> {
    pub bin: &'a Path,
    pub work: &'a Path,
    /// hale's config for an instance listening on the address, its data
    /// dir the path (the embedded mode's `hale_yaml`).
    pub yaml: &'a dyn Fn(SocketAddr, &Path) -> String,
    pub envs: &'a [(&'static str, &'static str)],
}

impl ScaleOut {
    /// PostgreSQL, NATS, the webhook receiver, the instances, HAProxy.
    pub async fn start(p: &Parts<'_>) -> anyhow::Result<ScaleOut> {
        let lb_bin = haproxy_bin().context(
            "haproxy is not installed (scripts/test.sh installs it: apt-get install haproxy)",
        )?;
        let nats_bin =
            hale_testkit::nats::nats_server_bin().context("nats-server is not installed")?;
        let pg = tokio::task::spawn_blocking(Pg::start).await??;
        let nats_dir = p.work.join("nats");
        std::fs::create_dir_all(&nats_dir)?;
        let nats_port = procs::free_port()?.port();
        let nats = {
            let (b, d) = (nats_bin.clone(), nats_dir.clone());
            tokio::task::spawn_blocking(move || {
                hale_testkit::nats::NatsServer::start(&b, nats_port, &d)
            })
            .await?
        };
        let (hook_addr, hook, hook_task) = start_webhook().await?;
        let storage = serde_json::to_string(&pg.url())?;
        let mut instances = Vec::new();
        for i in 0..INSTANCES {
            let addr = procs::free_port()?;
            let mut y = (p.yaml)(addr, &p.work.join(format!("data-{i}")));
            y.push_str(&format!(
                "storage: {storage}\nevents:\n  webhooks:\n    - {{url: 'http://{hook_addr}/hook'}}\n  nats: {{url: 'nats://127.0.0.1:{nats_port}'}}\n"
            ));
            let cfg = p.work.join(format!("hale-{i}.yaml"));
            std::fs::write(&cfg, y)?;
            let proc = procs::start_hale_at(p.bin, p.work, addr, &cfg, p.envs).await?;
            instances.push(Instance {
                addr,
                cfg,
                proc: Some(proc),
            });
        }
        let listen = procs::free_port()?;
        let addrs: Vec<SocketAddr> = instances.iter().map(|i| i.addr).collect();
        let lb_cfg = p.work.join("haproxy.cfg");
        std::fs::write(&lb_cfg, haproxy_cfg(listen, &addrs))?;
        let args = [
            "-db".to_owned(),
            "-f".to_owned(),
            lb_cfg.display().to_string(),
        ];
        let lb = procs::start_other("haproxy", &lb_bin, &args, listen, p.work, "/ready").await?;
        Ok(ScaleOut {
            nats_bin,
            nats_dir,
            nats_port,
            nats: Some(nats),
            hook,
            _hook_task: hook_task,
            instances,
            _lb: lb,
            base: format!("http://{listen}"),
            bin: p.bin.to_path_buf(),
            work: p.work.to_path_buf(),
            envs: p.envs.to_vec(),
            skipped: Vec::new(),
            pg,
        })
    }

    /// The instances' names and pids now (a killed one: `None`).
    pub fn pids(&self) -> Vec<(String, Option<u32>)> {
        self.instances
            .iter()
            .enumerate()
            .map(|(i, x)| (format!("hale-{i}"), x.proc.as_ref().map(|p| p.child.id())))
            .collect()
    }

    /// The instances' log files.
    pub fn logs(&self) -> String {
        let logs: Vec<String> = self
            .instances
            .iter()
            .map(|i| i.cfg.display().to_string())
            .collect();
        format!(
            "logs in {} (configs {})",
            self.work.display(),
            logs.join(", ")
        )
    }

    /// Starts a scale-out fault on `part` (`at`: its time in the run, for
    /// the record of a skipped one): an instance SIGKILLed, NATS SIGKILLed,
    /// or PostgreSQL restarted (at once: its fault has no length).
    pub async fn strike(&mut self, part: Part, at: Duration) -> anyhow::Result<()> {
        match part {
            // `Proc`'s drop is SIGKILL and a wait.
            Part::Instance(i) => self.instances[i].proc = None,
            Part::Nats => self.nats = None,
            Part::Postgres => {
                if !self.pg.restart()? {
                    self.skipped.push(format!(
                        "PostgreSQL restart at +{:.0}s: {}",
                        at.as_secs_f64(),
                        self.pg.skip_restart.clone().unwrap_or_default()
                    ));
                }
            }
        }
        Ok(())
    }

    /// Ends a scale-out fault: the killed instance or NATS started again
    /// on its port with its config or store.
    pub async fn heal(&mut self, part: Part) -> anyhow::Result<()> {
        match part {
            Part::Instance(i) => {
                let x = &mut self.instances[i];
                if x.proc.is_none() {
                    x.proc = Some(
                        procs::start_hale_at(&self.bin, &self.work, x.addr, &x.cfg, &self.envs)
                            .await?,
                    );
                }
            }
            Part::Nats if self.nats.is_none() => {
                let (b, d, port) = (self.nats_bin.clone(), self.nats_dir.clone(), self.nats_port);
                self.nats = Some(
                    tokio::task::spawn_blocking(move || {
                        hale_testkit::nats::NatsServer::start(&b, port, &d)
                    })
                    .await?,
                );
            }
            Part::Nats | Part::Postgres => {}
        }
        Ok(())
    }

    /// Waits (at most `limit`) until both sinks acknowledged every event
    /// of the outbox (PostgreSQL's `sinks.acked_seq` against the last
    /// `events.seq`).
    async fn drained(&self, limit: Duration) -> bool {
        let until = std::time::Instant::now() + limit;
        let sql = "SELECT count(*) FROM sinks WHERE acked_seq >= (SELECT coalesce(max(seq), 0) FROM events)";
        loop {
            let acked: usize = self
                .pg
                .psql(&self.pg.db, sql)
                .ok()
                .and_then(|n| n.trim().parse().ok())
                .unwrap_or(0);
            if acked >= 2 {
                return true;
            }
            if std::time::Instant::now() > until {
                eprintln!(
                    "sinks not drained: {:?}",
                    self.pg
                        .psql(&self.pg.db, "SELECT name, acked_seq FROM sinks")
                );
                return false;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// The events of the run: the outbox's against NATS's and the
    /// webhook's, and the dead letters.
    pub async fn events(&self) -> anyhow::Result<Events> {
        let drained = self.drained(Duration::from_secs(120)).await;
        let ids = self.pg.psql(&self.pg.db, "SELECT id FROM events")?;
        let outbox: std::collections::BTreeSet<String> = ids
            .lines()
            .filter(|l| !l.is_empty())
            .map(str::to_owned)
            .collect();
        let dead = self
            .pg
            .psql(&self.pg.db, "SELECT count(*) FROM dead_letters")?
            .trim()
            .parse()
            .unwrap_or(u64::MAX);
        let url = format!("nats://127.0.0.1:{}", self.nats_port);
        let at_nats = stream_ids(&url).await?;
        let at_hook = self.hook.lock().unwrap_or_else(|p| p.into_inner()).clone();
        Ok(Events {
            drained,
            outbox: outbox.len(),
            nats: SinkCount::of(&outbox, &at_nats),
            webhook: SinkCount::of(&outbox, &at_hook),
            dead_letters: dead,
        })
    }
}

/// The `Nats-Msg-Id` of every message of hale's stream at `url`, counted
/// (no stream: none).
async fn stream_ids(url: &str) -> anyhow::Result<BTreeMap<String, u64>> {
    use async_nats::jetstream::consumer;
    use futures::StreamExt;
    let js = async_nats::jetstream::new(async_nats::connect(url).await?);
    let mut out: BTreeMap<String, u64> = BTreeMap::new();
    let Ok(mut s) = js.get_stream(STREAM).await else {
        return Ok(out);
    };
    let n = s.info().await?.state.messages;
    let c = s
        .create_consumer(consumer::pull::Config {
            ack_policy: consumer::AckPolicy::None,
            deliver_policy: consumer::DeliverPolicy::All,
            ..Default::default()
        })
        .await?;
    let mut msgs = c.messages().await?;
    let mut seen = 0;
    while seen < n {
        let Ok(Some(m)) = tokio::time::timeout(Duration::from_secs(5), msgs.next()).await else {
            break;
        };
        let m = m.map_err(|e| anyhow::anyhow!("{e}"))?;
        let id = m
            .headers
            .as_ref()
            .and_then(|h| h.get("Nats-Msg-Id"))
            .map(|v| v.as_str().to_owned())
            .unwrap_or_default();
        *out.entry(id).or_default() += 1;
        seen += 1;
    }
    Ok(out)
}

/// What one sink received of the outbox's events.
#[derive(Debug, Clone, Serialize)]
pub struct SinkCount {
    pub received: u64,
    pub distinct: usize,
    /// Outbox events it never received.
    pub lost: usize,
    /// Deliveries beyond the first of an event.
    pub duplicated: u64,
    /// Ids it received that the outbox does not hold.
    pub unknown: usize,
}

impl SinkCount {
    pub fn of(outbox: &std::collections::BTreeSet<String>, got: &BTreeMap<String, u64>) -> Self {
        SinkCount {
            received: got.values().sum(),
            distinct: got.len(),
            lost: outbox.iter().filter(|id| !got.contains_key(*id)).count(),
            duplicated: got.values().map(|n| n.saturating_sub(1)).sum(),
            unknown: got.keys().filter(|id| !outbox.contains(*id)).count(),
        }
    }
}

/// The events of a scale-out run.
#[derive(Debug, Clone, Serialize)]
pub struct Events {
    /// Every instance's sinks had no backlog when counted.
    pub drained: bool,
    /// Events in the outbox (PostgreSQL's `events`).
    pub outbox: usize,
    pub nats: SinkCount,
    pub webhook: SinkCount,
    pub dead_letters: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_cycle_kills_an_instance_and_nats_and_restarts_postgres() {
        let one = faults(3, Duration::from_secs(50));
        let parts: Vec<Part> = one.iter().map(|f| f.part).collect();
        assert_eq!(parts, [Part::Instance(1), Part::Nats, Part::Postgres]);
        assert!(one.iter().all(|f| f.at < Duration::from_secs(50)));
        assert_eq!(one, faults(3, Duration::from_secs(50)), "pure");
        assert_ne!(one[0].part, faults(4, Duration::from_secs(50))[0].part);
        let hour = faults(1, Duration::from_secs(3600));
        assert_eq!(hour.len(), 18);
        let killed: std::collections::BTreeSet<usize> = hour
            .iter()
            .filter_map(|f| match f.part {
                Part::Instance(i) => Some(i),
                Part::Nats | Part::Postgres => None,
            })
            .collect();
        assert_eq!(killed.len(), INSTANCES, "both instances are killed in turn");
    }

    #[test]
    fn a_sink_count_names_lost_duplicated_and_unknown_events() {
        let outbox = ["a", "b", "c"].map(str::to_owned).into_iter().collect();
        let got = [("a", 1), ("b", 3), ("z", 1)]
            .map(|(k, n)| (k.to_owned(), n))
            .into_iter()
            .collect();
        let c = SinkCount::of(&outbox, &got);
        assert_eq!(
            (c.received, c.distinct, c.lost, c.duplicated, c.unknown),
            (5, 3, 1, 2, 1)
        );
    }

    #[test]
    fn the_load_balancer_checks_ready_round_robin() {
        let a: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let c = haproxy_cfg(a, &[a, a]);
        assert!(c.contains("balance roundrobin"));
        assert!(c.contains("option httpchk GET /ready"));
        assert_eq!(c.matches(" check\n").count(), 2);
    }
}
