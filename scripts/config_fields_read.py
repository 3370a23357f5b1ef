#!/usr/bin/env python3
"""Fails when a field of the validated config is read by no code.

A config key that nothing reads must not exist (docs/configuration.md, "How
the file is read"): an operator who sets it believes something changed. Every
`pub` field of every struct in crates/hale-core/src/config.rs must be read,
as `.field` that is not assigned to, somewhere in the code that acts on the
config: the crates below, outside hale-config (which only fills the fields),
outside tests (`tests/`, `#[cfg(test)]` modules) and outside the `Default`
impls of config.rs (which only set them).

A name shared with another struct's field can hide an unread one; the check
is a floor, not a proof.

Usage: scripts/config_fields_read.py
"""

import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
CONFIG = os.path.join(ROOT, "crates/hale-core/src/config.rs")
# The crates that act on the config (hale-config fills it; benches, chaos,
# the test kit and the fuzz targets do not count).
READERS = ["hale-core", "hale-gateway", "hale-store", "hale-events", "hale-tools", "hale-tokens", "hale"]

STRUCT = re.compile(r"^pub struct (\w+)\s*\{(.*?)^\}", re.M | re.S)
FIELD = re.compile(r"^\s*pub (\w+)\s*:", re.M)


def without_tests(src):
    """The code before the first `#[cfg(test)]` (hale's test modules close a file)."""
    i = src.find("#[cfg(test)]")
    return src if i < 0 else src[:i]


def without_comments(src):
    return re.sub(r"//[^\n]*", "", src)


def without_defaults(src):
    """config.rs without its `impl Default for …` blocks (they set fields, not read them)."""
    out, i = [], 0
    for m in re.finditer(r"^impl Default for \w+ \{", src, re.M):
        out.append(src[i:m.start()])
        depth, j = 0, m.end() - 1
        while j < len(src):
            depth += {"{": 1, "}": -1}.get(src[j], 0)
            j += 1
            if depth == 0:
                break
        i = j
    out.append(src[i:])
    return "".join(out)


def code():
    parts = []
    for crate in READERS:
        src_dir = os.path.join(ROOT, "crates", crate, "src")
        for d, _, files in os.walk(src_dir):
            for f in files:
                if not f.endswith(".rs") or f == "tests.rs":
                    continue
                p = os.path.join(d, f)
                src = without_comments(without_tests(open(p, encoding="utf-8").read()))
                if os.path.abspath(p) == os.path.abspath(CONFIG):
                    src = without_defaults(src)
                parts.append(src)
    return "\n".join(parts)


def main():
    config = without_comments(without_tests(open(CONFIG, encoding="utf-8").read()))
    fields = [(s.group(1), f) for s in STRUCT.finditer(config) for f in FIELD.findall(s.group(2))]
    text = code()
    unread = []
    for ty, f in fields:
        # `.f` not followed by `(` (a method) or by `=` that is no `==` or `=>` (an assignment).
        if not re.search(r"\." + f + r"\b(?!\s*\()(?!\s*=[^=>])", text):
            unread.append(f"{ty}::{f}")
    if unread:
        print("config fields that no code reads (remove the key, refusing it with"
              " \"removed: use …\" in hale-config, or make it do what docs/configuration.md says):",
              file=sys.stderr)
        for u in unread:
            print(f"  hale_core::config::{u}", file=sys.stderr)
        sys.exit(1)
    print(f"every one of the {len(fields)} config fields is read")


if __name__ == "__main__":
    main()
