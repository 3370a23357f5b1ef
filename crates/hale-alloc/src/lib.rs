//! The allocator of hale's processes, and its one setting.
//!
//! mimalloc: a turn allocates many small, short-lived buffers (JSON,
//! headers, journal rows); glibc malloc was a fifth of the gateway's CPU
//! under load. [`Alloc`] is what a binary names as its
//! `#[global_allocator]`.
//!
//! mimalloc (v3) returns memory that became free to the OS only after a
//! purge delay of one second, and only when the thread that freed it next
//! allocates. A gateway's load comes in waves over many threads, so freed
//! pages piled up in resident memory: the 10-minute many-agents benchmark
//! grew 97 → 134 MiB with the default and stayed within 105–119 MiB with
//! the delay at 0 (BENCHMARKS.md, "Memory over time"), at no throughput
//! cost that a run could tell from noise. [`purge_at_once`] sets the delay
//! to 0 unless the operator chose one (`MIMALLOC_PURGE_DELAY`).
//!
//! This is the one crate of the workspace that holds `unsafe` code: the
//! option API is C with no safe binding. Each call is sound as used: the
//! option index is a constant of mimalloc's header, and `mi_option_set` is
//! called once, before the binary starts any thread.

/// The global allocator of hale's binaries.
#[cfg(not(feature = "system"))]
pub type Alloc = mimalloc::MiMalloc;

/// The allocator value for `#[global_allocator] static GLOBAL: Alloc = ALLOC;`.
#[cfg(not(feature = "system"))]
pub const ALLOC: Alloc = mimalloc::MiMalloc;

/// With feature `system` (a heap profiler's build, never for serving): the
/// C library's malloc, which heaptrack and valgrind's tools hook; they do
/// not see mimalloc's heap.
#[cfg(feature = "system")]
pub type Alloc = std::alloc::System;

/// See the other [`ALLOC`].
#[cfg(feature = "system")]
pub const ALLOC: Alloc = std::alloc::System;

/// The environment variable with which an operator chooses the delay
/// (milliseconds; read by mimalloc itself). When it is set, hale leaves the
/// delay alone.
pub const PURGE_DELAY_ENV: &str = "MIMALLOC_PURGE_DELAY";

/// `mi_option_purge_delay`: its index in `mi_option_t`, the same in
/// mimalloc v2 and v3 (libmimalloc-sys names no constant for it).
/// [`tests::the_index_is_the_purge_delay`] reads mimalloc's default through
/// it, so a header that moved it fails the tests.
const PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Sets mimalloc to return freed memory to the OS when it is freed (purge
/// delay 0), unless [`PURGE_DELAY_ENV`] is set. Call it first in `main`,
/// before any thread starts (mimalloc's option setter is not thread safe).
/// Returns the delay in force afterwards, in milliseconds.
pub fn purge_at_once() -> i64 {
    if std::env::var_os(PURGE_DELAY_ENV).is_none() {
        #[allow(unsafe_code)]
        // SAFETY: PURGE_DELAY is a valid option index; called before any
        // other thread exists, as the function's contract says.
        unsafe {
            libmimalloc_sys::mi_option_set(PURGE_DELAY, 0);
        }
    }
    purge_delay_ms()
}

/// The purge delay in force, in milliseconds.
pub fn purge_delay_ms() -> i64 {
    #[allow(unsafe_code)]
    // SAFETY: a read of a valid option index.
    let ms: core::ffi::c_long = unsafe { libmimalloc_sys::mi_option_get(PURGE_DELAY) };
    #[allow(clippy::useless_conversion)] // c_long is i64 here, i32 on some targets
    i64::from(ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One test, as the option is process-wide: mimalloc's own default
    /// (v3: 1000 ms) read through our index, then 0 after `purge_at_once`.
    #[test]
    fn the_index_is_the_purge_delay() {
        if let Some(chosen) = std::env::var(PURGE_DELAY_ENV)
            .ok()
            .and_then(|v| v.trim().parse::<i64>().ok())
        {
            // The operator's value wins over ours.
            assert_eq!(purge_at_once(), chosen);
            return;
        }
        assert_eq!(
            purge_delay_ms(),
            1000,
            "index {PURGE_DELAY} is not mimalloc's purge delay (default 1000 ms in v3)"
        );
        assert_eq!(purge_at_once(), 0);
        assert_eq!(purge_delay_ms(), 0);
    }
}
