//! The Python the SDK tests drive hale with: `HALE_PYTHON`, else
//! `.venv/bin/python` at the workspace root (scripts/test.sh creates it), if
//! it can import what the test needs.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The workspace root (two levels above this crate, like every crate's).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A Python that runs `import` (e.g. `import openai`), or why there is none,
/// naming the pip `package` that provides it.
pub fn python(import: &str, package: &str) -> Result<PathBuf, String> {
    let candidate = match std::env::var_os("HALE_PYTHON") {
        Some(p) => PathBuf::from(p),
        None => workspace_root().join(".venv/bin/python"),
    };
    let ok = Command::new(&candidate)
        .args(["-c", import])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if ok {
        Ok(candidate)
    } else {
        Err(format!(
            "no Python with the `{package}` SDK at {} (set HALE_PYTHON, or run scripts/test.sh, or \
             `python3 -m venv .venv && .venv/bin/pip install {package}`)",
            candidate.display()
        ))
    }
}

/// [`python`], or None after printing why the test is skipped (a failure
/// instead under `CI=true`).
pub fn python_or_skip(import: &str, package: &str) -> Option<PathBuf> {
    match python(import, package) {
        Ok(p) => Some(p),
        Err(why) if crate::under_ci() => panic!("CI=true and {why}"),
        Err(why) => {
            eprintln!("skipped: {why}");
            None
        }
    }
}
