//! Outbox write throughput.
//!
//! `cargo run --release -p hale-store --example outbox_bench [-- postgres://…]`
//!
//! Prints events/s for: 200k fire-and-forget `submit()`s then one `flush()`;
//! `commit()` of batches of 100 events from one caller; and single-event
//! `commit()`s from 64 concurrent callers (the request path). SQLite in a
//! temp dir by default; PostgreSQL when a URL is given (tables are created in
//! the URL's search_path and left there).

use std::time::Instant;

use hale_core::event::{Event, EventKind};
use hale_store::{Store, StoreOptions, Write};

const N: u64 = 200_000;

fn event(run: &str, i: u64) -> Event {
    Event {
        id: format!("{run}-{i:012}"),
        time_ms: 1_700_000_000_000 + i,
        kind: EventKind::TurnCompleted,
        agent: Some(format!("agent-{}", i % 100)),
        task: Some("bench".into()),
        turn: Some(format!("turn-{i}")),
        payload: serde_json::json!({"provider": "openai", "model": "gpt-4o", "tokens": i % 1000}),
    }
}

fn rate(n: u64, start: Instant) -> String {
    let s = start.elapsed().as_secs_f64();
    format!("{n} events in {s:.2} s = {:.0} events/s", n as f64 / s)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let url = std::env::args().nth(1);
    let store = Store::open(url.as_deref(), dir.path(), StoreOptions::default()).await?;
    let tag = format!("{}", std::process::id());
    println!("backend: {:?} at {}", store.backend(), store.location());

    let c0 = store.commits();
    let start = Instant::now();
    for i in 0..N {
        store.submit(vec![Write::Event(event(&format!("s{tag}"), i))]);
    }
    store.flush().await?;
    println!(
        "submit()  x {N}, then flush():          {} ({} transactions)",
        rate(N, start),
        store.commits() - c0
    );

    let c0 = store.commits();
    let start = Instant::now();
    for b in 0..N / 100 {
        let writes = (0..100)
            .map(|i| Write::Event(event(&format!("b{tag}"), b * 100 + i)))
            .collect();
        store.commit(writes).await?;
    }
    println!(
        "commit() of 100-event batches, 1 caller: {} ({} transactions)",
        rate(N, start),
        store.commits() - c0
    );

    let callers = 64u64;
    let per = 50_000 / callers;
    let c0 = store.commits();
    let start = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..callers {
        let store = store.clone();
        let tag = tag.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..per {
                store
                    .commit(vec![Write::Event(event(&format!("c{tag}-{c}"), i))])
                    .await?;
            }
            Ok::<_, hale_store::StoreError>(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    println!(
        "commit() of 1 event, {callers} callers:        {} ({} transactions)",
        rate(callers * per, start),
        store.commits() - c0
    );
    store.close().await;
    Ok(())
}
