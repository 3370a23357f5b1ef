mod common;
use common::*;
use serde_json::json;
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn perf() {
    let h = server().await;
    let c = client();
    for stream in [true, false] {
    let b = body("ok", stream, json!({}));
    let t0 = std::time::Instant::now();
    let n = 4000;
    let mut js = tokio::task::JoinSet::new();
    for w in 0..32 {
        let c = c.clone(); let b = b.clone(); let u = url(&h, D::OpenAi);
        js.spawn(async move { for _ in 0..n/32 { let r = c.post(&u).json(&b).send().await.unwrap(); let _ = r.bytes().await.unwrap(); } w });
    }
    while js.join_next().await.is_some() {}
    eprintln!("{} req/s (stream={stream}, 60 words)", n as f64 / t0.elapsed().as_secs_f64());
    }
}
