//! Relay throughput to NATS JetStream: events/s from the outbox to acked
//! JetStream messages, with a real `nats-server` started on a free port.
//!
//! ```text
//! cargo run -p hale-events --release --example nats_bench -- [EVENTS] [WINDOW]
//! ```
//! Defaults: 200 000 events, window 256 (`nats::DEFAULT_WINDOW`).

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use hale_core::config::{EventsConfig, NatsConfig};
use hale_core::event::{Event, EventKind};
use hale_events::nats;
use hale_events::relay::{RelayTuning, Relays};
use hale_events::tasks::TaskSet;
use hale_store::{Store, StoreOptions, Write};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let n: usize = args
        .next()
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(200_000);
    let window: usize = args
        .next()
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(nats::DEFAULT_WINDOW);

    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let nats_dir = tempfile::tempdir()?;
    let mut server = Command::new("nats-server")
        .args(["-js", "-a", "127.0.0.1", "-p", &port.to_string(), "-sd"])
        .arg(nats_dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| anyhow::anyhow!("starting nats-server (is it on PATH?): {e}"))?;
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let dir = tempfile::tempdir()?;
    let store = Store::open_sqlite(dir.path(), StoreOptions::default()).await?;
    let mut rng = rand::rng();
    let t0 = Instant::now();
    let evs: Vec<Event> = (0..n)
        .map(|i| {
            Event::new(EventKind::TurnCompleted, 1_700_000_000_000 + i as u64, &mut rng)
                .agent("bench")
                .turn(format!("t{i}"))
                .payload(serde_json::json!({"tokens_in": 1200, "tokens_out": 350, "provider": "openai", "latency_ms": 812}))
        })
        .collect();
    for chunk in evs.chunks(4096) {
        store
            .commit(chunk.iter().cloned().map(Write::Event).collect())
            .await?;
    }
    let last = store.last_seq().await?;
    println!("outbox: {n} events committed in {:.2?}", t0.elapsed());

    let cfg = EventsConfig {
        nats: Some(NatsConfig {
            url: format!("nats://127.0.0.1:{port}"),
            subject_prefix: NatsConfig::DEFAULT_SUBJECT_PREFIX.into(),
            stream: NatsConfig::DEFAULT_STREAM.into(),
        }),
        ..EventsConfig::default()
    };
    let tasks = TaskSet::new();
    let tuning = RelayTuning {
        nats_window: window,
        ..RelayTuning::default()
    };
    let t1 = Instant::now();
    let relays = Relays::start_with(store.clone(), &cfg, &tasks, tuning).await?;
    loop {
        if store.sink_cursor(nats::SINK_NAME).await? >= last {
            break;
        }
        if t1.elapsed() > Duration::from_secs(300) {
            anyhow::bail!("relay did not finish within 300 s: {:?}", relays.stats());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let secs = t1.elapsed().as_secs_f64();
    println!(
        "relay to JetStream: {n} events in {secs:.2} s = {:.0} events/s (window {window}); stats {:?}",
        n as f64 / secs,
        relays.stats().sinks
    );
    tasks.shutdown(Duration::from_secs(5)).await;
    store.close().await;
    let _ = server.kill();
    let _ = server.wait();
    Ok(())
}
