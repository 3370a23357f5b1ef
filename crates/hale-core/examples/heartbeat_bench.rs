//! Registers 100k agents, sends 1M heartbeats timing each one, and prints
//! p50/p99 in ns, the cost of `evaluate_all`, and memory per agent.
//!
//! `cargo run --release -p hale-core --example heartbeat_bench`

use std::time::{Duration, Instant};

use hale_core::config::HealthConfig;
use hale_core::health::{HealthRegistry, Heartbeat};

const AGENTS: usize = 100_000;
const HEARTBEATS: usize = 1_000_000;

fn pct(sorted: &[u64], p: f64) -> u64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn main() {
    let cfg = HealthConfig::default();
    let t0 = Instant::now();
    let names: Vec<String> = (0..AGENTS).map(|i| format!("agent-{i:06}")).collect();
    let mut r = HealthRegistry::new();
    for name in &names {
        r.register(name, t0);
    }
    let mut out = Vec::new();
    let e0 = Instant::now();
    r.evaluate_all(&cfg, t0, &mut out);
    let first_eval = e0.elapsed();

    // Timer overhead, to read the figures below honestly.
    let mut overhead: Vec<u64> = (0..100_000)
        .map(|_| {
            let s = Instant::now();
            s.elapsed().as_nanos() as u64
        })
        .collect();
    overhead.sort_unstable();

    // xorshift: a cheap, deterministic spread over the agents.
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let progress = ["reading", "planning", "writing", "testing"];
    let mut lat = Vec::with_capacity(HEARTBEATS);
    let mut evals = Vec::new();
    for k in 0..HEARTBEATS {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let a = (x % AGENTS as u64) as usize;
        // 1M heartbeats over ~100 s of simulated time.
        let now = t0 + Duration::from_micros(100 * k as u64);
        let hb = if k % 4 == 0 {
            Heartbeat {
                progress: Some(progress[(x >> 32) as usize % progress.len()]),
                ..Heartbeat::default()
            }
        } else {
            Heartbeat {
                tokens: Some(800 + x % 400),
                fingerprint: Some(x),
                failed: Some(x.is_multiple_of(23)),
                ..Heartbeat::default()
            }
        };
        let s = Instant::now();
        r.heartbeat(&names[a], &hb, now);
        lat.push(s.elapsed().as_nanos() as u64);
        // evaluate every 5 s of simulated time, as the monitor would.
        if k % 50_000 == 49_999 {
            out.clear();
            let s = Instant::now();
            r.evaluate_all(&cfg, now, &mut out);
            evals.push(s.elapsed());
        }
    }
    lat.sort_unstable();
    let mean = lat.iter().sum::<u64>() as f64 / lat.len() as f64;
    println!("agents: {AGENTS}, heartbeats: {HEARTBEATS}");
    println!(
        "heartbeat latency (ns, timer included): p50 {} p90 {} p99 {} p99.9 {} max {} mean {:.1}",
        pct(&lat, 0.50),
        pct(&lat, 0.90),
        pct(&lat, 0.99),
        pct(&lat, 0.999),
        lat[lat.len() - 1],
        mean
    );
    println!(
        "timer overhead (ns): p50 {} p99 {}",
        pct(&overhead, 0.50),
        pct(&overhead, 0.99)
    );
    println!("evaluate_all, all 100k agents dirty: {first_eval:?}");
    evals.sort_unstable();
    println!(
        "evaluate_all after 50k heartbeats (20 rounds): median {:?} max {:?}",
        evals[evals.len() / 2],
        evals[evals.len() - 1]
    );
    // Everyone goes quiet: the stale deadlines fire for all agents at once.
    out.clear();
    let s = Instant::now();
    r.evaluate_all(&cfg, t0 + Duration::from_secs(3600), &mut out);
    println!(
        "evaluate_all when every agent's deadline passed: {:?} ({} outputs)",
        s.elapsed(),
        out.len()
    );
    out.clear();
    let s = Instant::now();
    r.evaluate_all(&cfg, t0 + Duration::from_secs(3601), &mut out);
    println!("evaluate_all with nothing due: {:?}", s.elapsed());
    println!("memory per agent (estimate): {} bytes", r.mem_per_agent());
}
