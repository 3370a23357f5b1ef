//! Cost of a heartbeat: one agent's state update, a registry heartbeat among
//! 100k agents, and `evaluate_all` after a batch of heartbeats.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use hale_core::config::HealthConfig;
use hale_core::health::{AgentHealth, HealthRegistry, Heartbeat};

const AGENTS: usize = 100_000;

fn turn(fp: u64) -> Heartbeat<'static> {
    Heartbeat {
        tokens: Some(1000 + fp % 500),
        fingerprint: Some(fp),
        failed: Some(fp.is_multiple_of(17)),
        ..Heartbeat::default()
    }
}

fn benches(c: &mut Criterion) {
    let t0 = Instant::now();
    let cfg = HealthConfig::default();

    let mut h = AgentHealth::new(t0);
    let mut n = 0u64;
    c.bench_function("agent_health_heartbeat", |b| {
        b.iter(|| {
            n += 1;
            h.heartbeat(black_box(&turn(n)), t0 + Duration::from_micros(n));
        })
    });

    let names: Vec<String> = (0..AGENTS).map(|i| format!("agent-{i}")).collect();
    let mut r = HealthRegistry::new();
    for name in &names {
        r.register(name, t0);
    }
    let mut out = Vec::new();
    r.evaluate_all(&cfg, t0, &mut out);
    let mut i = 0usize;
    c.bench_function("registry_heartbeat_100k_agents", |b| {
        b.iter(|| {
            i = (i + 7919) % AGENTS;
            r.heartbeat(
                black_box(&names[i]),
                &turn(i as u64),
                t0 + Duration::from_micros(i as u64),
            );
        })
    });

    let mut step = 0u64;
    c.bench_function("registry_evaluate_all_after_1k_heartbeats", |b| {
        b.iter(|| {
            step += 1;
            let now = t0 + Duration::from_millis(step);
            for k in 0..1000 {
                let a = (step as usize * 1000 + k) % AGENTS;
                r.heartbeat(&names[a], &turn(a as u64), now);
            }
            out.clear();
            r.evaluate_all(&cfg, now, &mut out);
            black_box(out.len())
        })
    });
}

criterion_group!(heartbeats, benches);
criterion_main!(heartbeats);
