//! The allocator of hale's processes, and how it gives memory back.
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
//! the delay at 0 (the many-agents memory run; the run is in BENCHMARKS.md's
//! git history), at no throughput cost that a run could tell from noise.
//! [`purge_at_once`] sets the delay to 0 unless the operator chose one
//! (`MIMALLOC_PURGE_DELAY`).
//!
//! Transparent huge pages made each 2 MiB of heap resident whole and kept
//! it so: mimalloc is built without asking for them (`no_thp`), and
//! [`no_huge_pages`] turns them off for the process; a program hale starts
//! gets them back ([`child_keeps_huge_pages`]).
//!
//! A thread's heap gives back what was freed on it when that thread next
//! allocates; memory freed by another thread (a buffer made on one tokio
//! worker, dropped on another) waits in the heap's queue until then. A
//! worker that goes idle after a burst so holds it. [`on_idle`], called
//! when a runtime thread parks, collects the thread's heap at most every
//! [`COLLECT_EVERY`]: 70 s after a burst of new conversations at c=64,
//! `hale serve` held 14.4–14.7 MiB of anonymous memory with it and
//! 16.8–18.1 MiB without (hale-bench peers, issue 45).
//!
//! SQLite allocates with the C library's `malloc`: [`trim_c_heap`] gives
//! what it freed back (glibc keeps it in its per-thread arenas otherwise).
//!
//! This is the one crate of the workspace that holds `unsafe` code: the
//! option API, `mi_collect`, `malloc_trim` and `prctl` are C with no safe
//! binding. Each call is sound as used: the option index is a constant of mimalloc's
//! header, and `mi_option_set` is called once, before the binary starts any
//! thread; `mi_collect` works on the calling thread's own heap; `prctl`
//! takes and returns plain integers.

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

/// How often at most [`on_idle`] collects a thread's heap: a busy worker
/// parks thousands of times a second, and a collection walks its heap.
pub const COLLECT_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// For a runtime's `on_thread_park`: gives what the calling thread's heap
/// holds free (and what other threads freed into it) back to the OS, at
/// most every [`COLLECT_EVERY`] per thread. Does nothing with feature
/// `system`.
pub fn on_idle() {
    #[cfg(not(feature = "system"))]
    {
        use std::cell::Cell;
        use std::time::Instant;
        thread_local! {
            static LAST: Cell<Option<Instant>> = const { Cell::new(None) };
        }
        let now = Instant::now();
        let due = LAST.with(|last| match last.get() {
            Some(t) if now.saturating_duration_since(t) < COLLECT_EVERY => false,
            Some(_) | None => {
                last.set(Some(now));
                true
            }
        });
        if due {
            #[allow(unsafe_code)]
            // SAFETY: mi_collect takes a plain bool and works on the calling
            // thread's own heap; mimalloc allows it at any time.
            unsafe {
                libmimalloc_sys::mi_collect(false);
            }
        }
    }
}

/// Gives the C library's heap back to the OS: what SQLite (C, which
/// allocates with the C library's `malloc`, not mimalloc) freed sits in
/// glibc's per-thread arenas until trimmed; glibc trims only an arena's
/// top on its own. Call it after emptying SQLite's caches (hale-store does,
/// once per quiet spell). A no-op off glibc. Returns whether memory was
/// given back.
pub fn trim_c_heap() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        #[allow(unsafe_code)]
        // SAFETY: malloc_trim takes a plain size (the padding to keep at
        // each arena's top) and is thread safe; it locks each arena itself.
        let trimmed = unsafe { libc::malloc_trim(0) };
        trimmed == 1
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}

/// The environment variable with which an operator chooses transparent
/// huge pages (read by mimalloc itself). When it is set, hale leaves the
/// kernel's per-process switch alone.
pub const ALLOW_THP_ENV: &str = "MIMALLOC_ALLOW_THP";

/// Keeps the process off transparent huge pages, unless [`ALLOW_THP_ENV`]
/// is set. Call it first in `main`. Returns whether huge pages are off for
/// the process afterwards (the kernel's `THP_enabled: 0`).
///
/// On a kernel whose THP setting is `madvise` (Debian's default), mimalloc
/// asked for huge pages on its arena, so every 2 MiB the heap touched
/// became resident whole and was given back only whole: `hale serve` held
/// 17,660 kB of anonymous memory right after start for a heap of 1.4 MB
/// (heaptrack), and 3,960 kB without huge pages (the run is in BENCHMARKS.md's
/// git history). The crate is built with mimalloc's `no_thp`, so it never asks
/// (that covers the arena mapped by Rust's start-up before `main`); this
/// switch covers a kernel set to `always`, which gives huge pages unasked.
pub fn no_huge_pages() -> bool {
    #[cfg(target_os = "linux")]
    {
        if std::env::var_os(ALLOW_THP_ENV).is_none() && !thp_disabled() {
            #[allow(unsafe_code)]
            // SAFETY: prctl with PR_SET_THP_DISABLE takes plain integers and
            // touches no memory of ours; a failure (an old kernel) leaves
            // huge pages as the kernel's setting says.
            let done = unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) } == 0;
            SWITCHED_OFF.store(done, std::sync::atomic::Ordering::Relaxed);
        }
        thp_disabled()
    }
    #[cfg(not(target_os = "linux"))]
    {
        false
    }
}

/// [`no_huge_pages`] turned huge pages off (they were not off already).
#[cfg(target_os = "linux")]
static SWITCHED_OFF: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The kernel's per-process flag: huge pages are off for this process.
#[cfg(target_os = "linux")]
fn thp_disabled() -> bool {
    #[allow(unsafe_code)]
    // SAFETY: the call takes plain integers and only reads the flag.
    let off = unsafe { libc::prctl(libc::PR_GET_THP_DISABLE, 0, 0, 0, 0) };
    off == 1
}

/// Gives a program hale starts (the agent of `hale run`) huge pages as
/// hale found them: the kernel's switch is inherited across fork and
/// exec, and how another program uses memory is not hale's to choose.
/// Does nothing unless [`no_huge_pages`] turned them off.
pub fn child_keeps_huge_pages(cmd: &mut std::process::Command) {
    #[cfg(target_os = "linux")]
    if SWITCHED_OFF.load(std::sync::atomic::Ordering::Relaxed) {
        use std::os::unix::process::CommandExt;
        #[allow(unsafe_code)]
        // SAFETY: the closure runs in the child between fork and exec,
        // where only async-signal-safe calls are allowed: it makes one
        // system call with plain integers, allocates nothing and takes no
        // lock.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_THP_DISABLE, 0, 0, 0, 0);
                Ok(())
            });
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = cmd;
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

    /// After `no_huge_pages`, the kernel reports huge pages off for the
    /// process, unless the operator chose with the environment variable;
    /// a program started with `child_keeps_huge_pages` has them as the
    /// process had them before. One test: the flag is process-wide.
    #[cfg(target_os = "linux")]
    #[test]
    fn huge_pages_are_off_unless_the_operator_chose_and_children_keep_theirs() {
        let thp = |status: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix("THP_enabled:"))
                .map(|v| v.trim().to_owned())
        };
        let child = |keep: bool| {
            let mut cmd = std::process::Command::new("cat");
            cmd.arg("/proc/self/status");
            if keep {
                child_keeps_huge_pages(&mut cmd);
            }
            let out = cmd.output().expect("cat runs");
            thp(&String::from_utf8_lossy(&out.stdout))
        };
        let before = child(false);
        let off = no_huge_pages();
        if std::env::var_os(ALLOW_THP_ENV).is_some() || before.as_deref() != Some("1") {
            // The operator's or the parent's choice, left alone: nothing
            // to check, so loud under CI, where the test must run.
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "CI=true and huge pages are the operator's or already off ({before:?})"
            );
            return;
        }
        assert!(off, "PR_GET_THP_DISABLE reads 0");
        let status = std::fs::read_to_string("/proc/self/status").expect("status");
        assert_eq!(thp(&status).as_deref(), Some("0"), "{status}");
        assert_eq!(child(false).as_deref(), Some("0"), "inherited by a child");
        assert_eq!(child(true), before, "a program hale runs has them back");
    }
}
