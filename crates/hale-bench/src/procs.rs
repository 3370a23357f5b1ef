//! The processes under test: `hale chaos` (the provider) and `hale serve`.
//!
//! Both run as separate processes of the release `hale` binary, as a user
//! would run them, on free loopback ports. hale gets a generated YAML config
//! with one OpenAI-kind provider pointing at the chaos server and its default
//! storage (SQLite in `data_dir`), so the journal is on, as in production.
//! Their stderr goes to files in the work directory, so a failing start can
//! be shown. Children are killed when their handle drops.

use anyhow::{Context, bail};
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a child may take to start answering.
pub const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// A child process killed on drop.
pub struct Proc {
    pub name: &'static str,
    pub child: Child,
    pub addr: SocketAddr,
    pub log: PathBuf,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A loopback port free right now (the OS may hand it out again later; the
/// window is short and a clash shows as a failed start).
pub fn free_port() -> anyhow::Result<SocketAddr> {
    let l = TcpListener::bind("127.0.0.1:0").context("cannot bind a loopback port")?;
    Ok(l.local_addr()?)
}

/// hale's config for the benchmark: one OpenAI-kind provider at `chaos_base`
/// (`http://…/v1`) serving `model`, the journal in `data_dir`.
pub fn hale_config(listen: SocketAddr, chaos_base: &str, model: &str, data_dir: &Path) -> String {
    // YAML double-quoted strings take JSON escapes, so serde_json quotes them safely.
    let q = |s: &str| serde_json::to_string(s).unwrap_or_default();
    format!(
        "listen: {listen}\n\
         data_dir: {data_dir}\n\
         providers:\n  \
           - name: chaos\n    \
             kind: openai\n    \
             base_url: {base}\n    \
             default_model: {model}\n",
        data_dir = q(&data_dir.display().to_string()),
        base = q(chaos_base),
        model = q(model),
    )
}

/// Finds the release `hale` binary next to this one, or in `target/release`.
pub fn find_hale(explicit: Option<&Path>) -> anyhow::Result<PathBuf> {
    if let Some(p) = explicit {
        return Ok(p.to_path_buf());
    }
    let mut candidates = Vec::new();
    if let Ok(me) = std::env::current_exe()
        && let Some(dir) = me.parent()
    {
        candidates.push(dir.join("hale"));
    }
    candidates.push(PathBuf::from("target/release/hale"));
    for c in &candidates {
        if c.is_file() {
            return Ok(c.clone());
        }
    }
    bail!(
        "the release hale binary was not found (looked at {candidates:?}); run `cargo build --release -p hale` first or pass --hale-bin"
    )
}

fn spawn(
    name: &'static str,
    bin: &Path,
    args: &[String],
    addr: SocketAddr,
    work: &Path,
) -> anyhow::Result<Proc> {
    spawn_env(name, bin, args, addr, work, &[])
}

fn spawn_env(
    name: &'static str,
    bin: &Path,
    args: &[String],
    addr: SocketAddr,
    work: &Path,
    envs: &[(&str, &str)],
) -> anyhow::Result<Proc> {
    let log = work.join(format!("{name}-{}.log", addr.port()));
    // Appended: a process restarted on its port keeps one log.
    let err = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)?;
    let child = Command::new(bin)
        .args(args)
        .envs(envs.iter().copied())
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(err)
        .spawn()
        .with_context(|| format!("cannot start {}", bin.display()))?;
    Ok(Proc {
        name,
        child,
        addr,
        log,
    })
}

/// Starts `hale chaos` on a free port and waits until it answers.
pub async fn start_chaos(bin: &Path, work: &Path) -> anyhow::Result<Proc> {
    start_chaos_at(bin, work, free_port()?).await
}

/// Starts `hale chaos` on `addr` (a port it had before: a restart) and
/// waits until it answers.
pub async fn start_chaos_at(bin: &Path, work: &Path, addr: SocketAddr) -> anyhow::Result<Proc> {
    start_chaos_with(bin, work, addr, &[]).await
}

/// [`start_chaos_at`] with more arguments (e.g. `--vertex-key FILE`).
pub async fn start_chaos_with(
    bin: &Path,
    work: &Path,
    addr: SocketAddr,
    extra: &[String],
) -> anyhow::Result<Proc> {
    let mut args = vec!["chaos".into(), "--listen".into(), addr.to_string()];
    args.extend(extra.iter().cloned());
    let mut p = spawn("chaos", bin, &args, addr, work)?;
    wait_ready(&mut p, "/v1/models").await?;
    Ok(p)
}

/// Starts `hale serve` on `addr` with the config `yaml` and environment
/// variables `envs` (the providers' `api_key_env`).
pub async fn start_hale_env(
    bin: &Path,
    work: &Path,
    addr: SocketAddr,
    yaml: &str,
    envs: &[(&str, &str)],
) -> anyhow::Result<Proc> {
    let cfg_path = work.join("hale.yaml");
    std::fs::write(&cfg_path, yaml)?;
    start_hale_at(bin, work, addr, &cfg_path, envs).await
}

/// Starts `hale serve` on `addr` with the config file `cfg` (written
/// already: a restarted instance reads it again) and waits until it is ready.
pub async fn start_hale_at(
    bin: &Path,
    work: &Path,
    addr: SocketAddr,
    cfg: &Path,
    envs: &[(&str, &str)],
) -> anyhow::Result<Proc> {
    let args = [
        "serve".to_owned(),
        "--config".to_owned(),
        cfg.display().to_string(),
    ];
    let mut p = spawn_env("hale", bin, &args, addr, work, envs)?;
    wait_ready(&mut p, "/ready").await?;
    Ok(p)
}

/// Starts another program (`bin args`) that serves HTTP on `addr`, e.g.
/// the chaos hour's load balancer, and waits until `path` answers 200.
pub async fn start_other(
    name: &'static str,
    bin: &Path,
    args: &[String],
    addr: SocketAddr,
    work: &Path,
    path: &str,
) -> anyhow::Result<Proc> {
    let mut p = spawn(name, bin, args, addr, work)?;
    wait_ready(&mut p, path).await?;
    Ok(p)
}

/// Open file descriptors of a process (`/proc/PID/fd`); `None` off Linux or
/// once it has exited.
pub fn open_fds(pid: u32) -> Option<usize> {
    Some(std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count())
}

/// Starts this binary's `bare-proxy` (bare.rs) in front of `chaos` and waits until it answers.
/// `hyper`: the bare proxy's hyper-util client instead of reqwest (`--bare-client`).
pub async fn start_bare(work: &Path, chaos: SocketAddr, hyper: bool) -> anyhow::Result<Proc> {
    let me = std::env::current_exe().context("cannot find the hale-bench binary")?;
    let addr = free_port()?;
    let mut p = spawn(
        "bare",
        &me,
        &[
            "bare-proxy".into(),
            "--listen".into(),
            addr.to_string(),
            "--upstream".into(),
            format!("http://{chaos}"),
        ]
        .into_iter()
        .chain(hyper.then(|| "--hyper".into()))
        .collect::<Vec<_>>(),
        addr,
        work,
    )?;
    wait_ready(&mut p, "/ready").await?;
    Ok(p)
}

/// How long a peer gateway (peers.rs, chaos_peer.rs) may take to start answering: a Python
/// proxy imports for a while before it listens.
pub const PEER_READY_TIMEOUT: Duration = Duration::from_secs(180);

/// A peer gateway to measure beside hale: `command` runs under `sh -c`
/// with `{port}` replaced by a free loopback port (where it must listen)
/// and `{upstream}` by chaos's base URL (`http://ADDR`). Ready when
/// `GET ready_path` answers 200.
pub async fn start_peer(
    name: &str,
    command: &str,
    ready_path: &str,
    chaos: SocketAddr,
    work: &Path,
) -> anyhow::Result<Proc> {
    let addr = free_port()?;
    let cmd = command
        .replace("{port}", &addr.port().to_string())
        .replace("{upstream}", &format!("http://{chaos}"));
    let log = work.join(format!("peer-{name}-{}.log", addr.port()));
    let err = std::fs::File::create(&log)?;
    let child = Command::new("sh")
        .args(["-c", &format!("exec {cmd}")])
        .stdin(Stdio::null())
        .stdout(err.try_clone()?)
        .stderr(err)
        .spawn()
        .with_context(|| format!("cannot start peer {name}: {cmd}"))?;
    let mut p = Proc {
        name: "peer",
        child,
        addr,
        log,
    };
    wait_ready_for(&mut p, ready_path, PEER_READY_TIMEOUT).await?;
    Ok(p)
}

/// `pid` and its descendants (first `pid`), from each process's parent in
/// `/proc/*/stat`; only `pid` off Linux.
pub fn tree(pid: u32) -> Vec<u32> {
    let mut parent = Vec::new();
    if let Ok(rd) = std::fs::read_dir("/proc") {
        for e in rd.flatten() {
            let Some(p) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
                continue;
            };
            // `pid (comm) state ppid …`: comm may hold spaces and parentheses.
            let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap_or_default();
            let ppid = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1))
                .and_then(|v| v.parse::<u32>().ok());
            if let Some(pp) = ppid {
                parent.push((p, pp));
            }
        }
    }
    let mut out = vec![pid];
    let mut i = 0;
    while i < out.len() {
        let p = out[i];
        out.extend(parent.iter().filter(|&&(_, pp)| pp == p).map(|&(c, _)| c));
        i += 1;
    }
    out
}

/// Resident memory of a process from `/proc/PID/status`: (VmRSS, VmHWM =
/// its peak so far), in KiB; `None` off Linux or once it has exited.
pub fn rss_kib(pid: u32) -> Option<(u64, u64)> {
    status_kib(pid, "VmRSS:", "VmHWM:")
}

/// The parts of a process's VmRSS from `/proc/PID/status`: (RssAnon, RssFile)
/// in KiB — heap and stacks vs the binary's and libraries' mapped pages
/// (clean, shared, reclaimable).
pub fn rss_parts_kib(pid: u32) -> Option<(u64, u64)> {
    status_kib(pid, "RssAnon:", "RssFile:")
}

/// Two `kB` fields of `/proc/PID/status`, in KiB.
fn status_kib(pid: u32, a: &str, b: &str) -> Option<(u64, u64)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        s.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
    };
    Some((field(a)?, field(b)?))
}

/// Clock ticks per second of `/proc/PID/stat`'s utime and stime (Linux's
/// `USER_HZ`, 100 on every architecture it ships for).
pub const TICKS_PER_S: u64 = 100;

/// The groups hale's threads are split into by name (`comm`, at most 15
/// bytes): the journal writer's SQLite thread (`hale-store` names it), the
/// other SQLite connections' threads (readers), tokio's threads (the
/// pipeline and the writer task; the blocking pool too), everything else.
pub const THREAD_GROUPS: [&str; 4] = ["journal-sqlite", "sqlx-sqlite-worker", "tokio", "other"];

fn thread_group(comm: &str) -> usize {
    if comm.starts_with("hale-journal") {
        0
    } else if comm.starts_with("sqlx-sqlite") {
        1
    } else if comm.starts_with("tokio-rt") || comm.starts_with("tokio-runtime") {
        2
    } else {
        3
    }
}

/// CPU time (utime + stime, clock ticks) of a process so far: in all, and
/// per [`THREAD_GROUPS`] over its live threads.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CpuTicks {
    /// `/proc/PID/stat`: the whole process, threads that exited included.
    pub all: u64,
    /// `/proc/PID/task/*/stat`, summed per group.
    pub groups: [u64; THREAD_GROUPS.len()],
}

/// (comm, utime + stime) of one `stat` line.
fn stat_ticks(stat: &str) -> Option<(&str, u64)> {
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let comm = stat.get(open + 1..close)?;
    // After the comm: state is field 3, utime 14, stime 15.
    let mut f = stat.get(close + 1..)?.split_whitespace();
    let utime: u64 = f.nth(11)?.parse().ok()?;
    let stime: u64 = f.next()?.parse().ok()?;
    Some((comm, utime + stime))
}

/// `pid`'s CPU time so far; `None` off Linux or once it has exited.
pub fn cpu_ticks(pid: u32) -> Option<CpuTicks> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let mut out = CpuTicks {
        all: stat_ticks(&stat)?.1,
        groups: [0; THREAD_GROUPS.len()],
    };
    for t in std::fs::read_dir(format!("/proc/{pid}/task")).ok()? {
        let Ok(t) = t else { continue };
        // A thread may exit between the listing and the read.
        let Ok(s) = std::fs::read_to_string(t.path().join("stat")) else {
            continue;
        };
        if let Some((comm, ticks)) = stat_ticks(&s) {
            out.groups[thread_group(comm)] += ticks;
        }
    }
    Some(out)
}

/// Starts `hale serve` with a generated config and waits until `/ready`;
/// `instance` (0, 1, …) names its config and log files, so several
/// instances can share one storage.
pub async fn start_hale(
    bin: &Path,
    work: &Path,
    chaos: SocketAddr,
    model: &str,
    data_dir: &Path,
    extra_yaml: &str,
    instance: usize,
) -> anyhow::Result<Proc> {
    let addr = free_port()?;
    let cfg = hale_config(addr, &format!("http://{chaos}/v1"), model, data_dir) + extra_yaml;
    start_instance(bin, work, addr, &cfg, instance).await
}

/// Starts `hale serve` listening on `addr` with the config `yaml`.
pub async fn start_hale_with(
    bin: &Path,
    work: &Path,
    addr: SocketAddr,
    yaml: &str,
) -> anyhow::Result<Proc> {
    start_instance(bin, work, addr, yaml, 0).await
}

async fn start_instance(
    bin: &Path,
    work: &Path,
    addr: SocketAddr,
    yaml: &str,
    instance: usize,
) -> anyhow::Result<Proc> {
    let (name, file) = match instance {
        0 => ("hale", "hale.yaml".to_owned()),
        i => ("hale-n", format!("hale{i}.yaml")),
    };
    let cfg_path = work.join(file);
    std::fs::write(&cfg_path, yaml)?;
    let mut p = spawn(
        name,
        bin,
        &[
            "serve".into(),
            "--config".into(),
            cfg_path.display().to_string(),
        ],
        addr,
        work,
    )?;
    wait_ready(&mut p, "/ready").await?;
    Ok(p)
}

/// Polls `GET path` until a 200, the child exits, or [`READY_TIMEOUT`].
async fn wait_ready(p: &mut Proc, path: &str) -> anyhow::Result<()> {
    wait_ready_for(p, path, READY_TIMEOUT).await
}

async fn wait_ready_for(p: &mut Proc, path: &str, timeout: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = p.child.try_wait()? {
            let log = std::fs::read_to_string(&p.log).unwrap_or_default();
            bail!(
                "{} exited with {status} before it was ready:\n{log}",
                p.name
            );
        }
        if get_ok(p.addr, path).await {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("{} did not get ready in {timeout:?}", p.name);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The values of `names` (whole metric names, e.g. `hale_turns_started_total`)
/// in `GET /metrics` of `addr`, in the order asked; `None` when the scrape
/// fails or a name is missing.
pub async fn metric_values(addr: SocketAddr, names: &[&str]) -> Option<Vec<f64>> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
    let req = format!("GET /metrics HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).await.ok()?;
    read_metrics(&text, names)
}

/// [`metric_values`] of an exposition's text.
fn read_metrics(text: &str, names: &[&str]) -> Option<Vec<f64>> {
    names
        .iter()
        .map(|name| {
            text.lines().find_map(|l| {
                let v = l.strip_prefix(name)?.strip_prefix(' ')?;
                v.trim().parse().ok()
            })
        })
        .collect()
}

/// Whether `GET path` answers 200.
async fn get_ok(addr: SocketAddr, path: &str) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Ok(mut s) = tokio::net::TcpStream::connect(addr).await else {
        return false;
    };
    let req = format!("GET {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n\r\n");
    if s.write_all(req.as_bytes()).await.is_err() {
        return false;
    }
    let mut buf = [0u8; 16];
    matches!(s.read(&mut buf).await, Ok(n) if n >= 12 && &buf[9..12] == b"200")
}

/// The machine a benchmark ran on: its cores and CPU model.
#[derive(Debug, serde::Serialize)]
pub struct Machine {
    pub nproc: usize,
    pub cpu: String,
}

pub fn machine() -> Machine {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown".into());
    Machine {
        nproc: std::thread::available_parallelism()
            .map(usize::from)
            .unwrap_or(1),
        cpu,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_give_comm_and_cpu_ticks_and_threads_their_group() {
        let line = "4242 (tokio-runtime-w) S 1 4242 4242 0 -1 4194560 900 0 0 0 1234 567 0 0 20 0 4 0 100 0 0";
        assert_eq!(stat_ticks(line), Some(("tokio-runtime-w", 1801)));
        // A comm with a space and a parenthesis: the comm ends at the last ')'.
        let odd = "7 (a b) c) R 1 7 7 0 -1 0 0 0 0 0 10 5 0 0";
        assert_eq!(stat_ticks(odd), Some(("a b) c", 15)));
        assert_eq!(stat_ticks("7 (x) R 1"), None);
        assert_eq!(
            [
                "hale-journal",
                "sqlx-sqlite-wor",
                "tokio-runtime-w",
                "tokio-rt-worker",
                "hale"
            ]
            .map(thread_group),
            [0, 1, 2, 2, 3]
        );
    }

    #[test]
    fn metrics_are_read_in_the_order_asked_and_a_missing_one_is_none() {
        let text = "# TYPE hale_turns_started counter\nhale_turns_started_total 120\n\
                    hale_store_commits_total_x 9\nhale_store_commits_total 6\n# EOF\n";
        assert_eq!(
            read_metrics(
                text,
                &["hale_store_commits_total", "hale_turns_started_total"]
            ),
            Some(vec![6.0, 120.0])
        );
        assert_eq!(read_metrics(text, &["hale_missing_total"]), None);
    }

    #[test]
    fn hale_config_is_valid_with_one_openai_provider_and_the_journal_on() {
        let yaml = hale_config(
            "127.0.0.1:3999".parse().expect("addr"),
            "http://127.0.0.1:4001/v1",
            "ok:tokens=16",
            Path::new("/tmp/hale bench \"dir\""),
        );
        let cfg = hale_config::load(&yaml, &|_| None).expect("the generated config validates");
        assert_eq!(cfg.listen.to_string(), "127.0.0.1:3999");
        assert_eq!(cfg.providers.len(), 1);
        let p = &cfg.providers[0];
        assert_eq!(p.kind, hale_core::config::ProviderKind::OpenAi);
        assert_eq!(p.base_url, "http://127.0.0.1:4001/v1");
        assert_eq!(p.default_model, "ok:tokens=16");
        // Journal on: SQLite (no external storage URL) in the given data dir.
        assert_eq!(cfg.storage, None);
        assert_eq!(cfg.data_dir, Path::new("/tmp/hale bench \"dir\""));
    }
}
