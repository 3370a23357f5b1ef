//! `hale-bench hash`: what hashing a request body costs natively.
//!
//! hale keys every turn by the SHA-256 of its request body (replay after a
//! crash, idempotency keys). Under callgrind that hash is the largest self
//! cost of a turn, but valgrind hides the CPU's SHA extensions, so the
//! software path is what it counts; this measures the path a real run takes
//! — the same steps as `hale_gateway::pipeline::request_hash` (ring's
//! SHA-256, then `hex::encode_to_slice` and a `String`) — on this machine,
//! in ns per body; `--sha2` measures the sha2 crate hale used before.

use clap::Parser;
use sha2::{Digest, Sha256};
use std::time::Instant;

#[derive(Parser, Debug)]
#[command(name = "hale-bench hash")]
pub struct HashArgs {
    /// Body sizes in bytes, comma-separated.
    #[arg(long, default_value = "1000,10000,100000", value_delimiter = ',')]
    bytes: Vec<usize>,
    /// Hashes per size.
    #[arg(long, default_value_t = 200_000)]
    rounds: u32,
    /// Hash with the sha2 crate (what hale used before) instead of ring.
    #[arg(long)]
    sha2: bool,
}

/// The request hash as hale computes it, by `ring` or by `sha2`.
fn request_hash(body: &[u8], sha2: bool) -> String {
    let mut hex = [0u8; 64];
    let _ = if sha2 {
        hex::encode_to_slice(Sha256::digest(body), &mut hex)
    } else {
        hex::encode_to_slice(ring::digest::digest(&ring::digest::SHA256, body), &mut hex)
    };
    String::from_utf8_lossy(&hex).into_owned()
}

pub fn run(args: HashArgs) -> anyhow::Result<()> {
    #[cfg(target_arch = "x86_64")]
    let sha_ni = std::arch::is_x86_feature_detected!("sha");
    #[cfg(not(target_arch = "x86_64"))]
    let sha_ni = false;
    println!("CPU SHA extensions: {}", if sha_ni { "yes" } else { "no" });
    println!("hash: {}", if args.sha2 { "sha2" } else { "ring" });
    println!("| body bytes | ns per hash (hex included) | MB/s |\n|--:|--:|--:|");
    for &n in &args.bytes {
        let body: Vec<u8> = (0..n).map(|i| b"lorem ipsum "[i % 12]).collect();
        let mut sink = 0u8;
        let t0 = Instant::now();
        for r in 0..args.rounds {
            let mut b = body.clone();
            if let Some(x) = b.first_mut() {
                *x = r as u8;
            }
            let h = request_hash(std::hint::black_box(&b), args.sha2);
            sink ^= h.as_bytes()[0];
        }
        let hashing = t0.elapsed();
        // The body's copy is in the loop so each hash sees new bytes; take it out.
        let copy = {
            let t = Instant::now();
            for r in 0..args.rounds {
                let mut b = body.clone();
                if let Some(x) = b.first_mut() {
                    *x = r as u8;
                }
                sink ^= std::hint::black_box(&b)[0];
            }
            t.elapsed()
        };
        let ns = (hashing.saturating_sub(copy)).as_nanos() as f64 / f64::from(args.rounds);
        println!("| {n} | {ns:.0} | {:.0} |", n as f64 / ns * 1e3);
        std::hint::black_box(sink);
    }
    Ok(())
}
