//! Links the functions hale runs next to each other in the binary.
//!
//! The kernel maps a binary's code 64 KiB at a time around each page a
//! process first runs ("fault-around"), so what `hale serve` holds of its
//! binary is every 64-KiB window with any function it ran — with fat LTO
//! they are spread over the whole text, among code a gateway never runs
//! (the PostgreSQL driver under SQLite, the MCP SDK, the chaos server).
//! `symbol-order.txt` lists the functions a profile saw run (start-up,
//! turns of both dialects, streaming or not, tool calls, the admin API;
//! `scripts/symbol_order.sh` writes it from a callgrind run of the
//! release build); LLD places them first, together. A name the file holds
//! that the build does not (a dependency or the compiler changed) is
//! skipped: the order only decides where code goes, never what it does.
//!
//! Only in release builds and where the linker is known to be LLD: Rust's
//! own for `x86_64-unknown-linux-gnu` from 1.90, with no linker chosen in
//! the config or flags. `HALE_NO_SYMBOL_ORDER=1` turns it off.

use std::env;
use std::path::Path;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=symbol-order.txt");
    println!("cargo:rerun-if-env-changed=HALE_NO_SYMBOL_ORDER");
    // Release builds only: the file names the release build's functions,
    // and only a served binary's memory matters.
    let release = env::var("PROFILE").as_deref() == Ok("release");
    if !release || env::var_os("HALE_NO_SYMBOL_ORDER").is_some() || !linker_is_rust_lld() {
        return;
    }
    let Some(dir) = env::var_os("CARGO_MANIFEST_DIR") else {
        return;
    };
    let order = Path::new(&dir).join("symbol-order.txt");
    if !order.is_file() {
        return;
    }
    println!(
        "cargo:rustc-link-arg-bins=-Wl,--symbol-ordering-file={}",
        order.display()
    );
    println!("cargo:rustc-link-arg-bins=-Wl,--no-warn-symbol-ordering");
}

/// Rust links `x86_64-unknown-linux-gnu` with its own LLD by default since
/// 1.90, unless a linker or linker flavour was chosen.
fn linker_is_rust_lld() -> bool {
    if env::var("TARGET").as_deref() != Ok("x86_64-unknown-linux-gnu") {
        return false;
    }
    if env::var_os("RUSTC_LINKER").is_some() {
        return false;
    }
    let flags = env::var("CARGO_ENCODED_RUSTFLAGS").unwrap_or_default();
    if flags.contains("linker") || flags.contains("link-self-contained") {
        return false;
    }
    let rustc = env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let Ok(out) = Command::new(rustc).arg("--version").output() else {
        return false;
    };
    let version = String::from_utf8_lossy(&out.stdout);
    // "rustc 1.95.0 (…)"
    let minor = version
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.split('.').nth(1))
        .and_then(|m| m.parse::<u32>().ok());
    minor.is_some_and(|m| m >= 90)
}
