#!/usr/bin/env python3
"""Fails on an import circle between the files of a crate.

For every crate under crates/ it builds the module tree from `mod` lines
(a `mod x;` in a/b.rs is a/b/x.rs or a/b/x/mod.rs), then reads every path that
names another module of the crate: `use crate::…`, `use super::…`,
`use self::…`, a child module's name, and the same paths written inline in the
code (`crate::state::Gateway::new()`). Each becomes an edge from the file that
writes it to the file that defines the module it names (the longest prefix
that is a module). Two rules keep the graph honest about dependencies rather
than about layout:

- `mod` declarations are the tree, not imports: a parent declaring a child
  does not depend on it.
- `pub use` re-exports in a module file are aliases: a path through one is
  followed to the file that defines the item, and the re-export itself is no
  edge (a facade that re-exports `a::X` and `b::Y` would otherwise tie every
  user of `X` to `b`).

A circle (a strongly connected component of more than one file) fails the
check, listed with the paths that tie it. An allowed circle is listed in
ALLOWED below with its reason.

Usage: scripts/import_circles.py [CRATE_DIR…]   (default: every crates/*)
"""

import os
import re
import sys

# (crate dir, frozenset of files relative to the crate's src/) -> reason.
ALLOWED = {}

MOD_DECL = re.compile(r"^\s*(?:#\[[^\]]*\]\s*)*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*(;|\{)", re.M)
PATH_ATTR = re.compile(r'#\[path\s*=\s*"([^"]+)"\]\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;')
USE_STMT = re.compile(r"\b(pub(?:\([^)]*\))?\s+)?use\s+([^;]+);", re.S)
INLINE_PATH = re.compile(r"(?<![\w:])((?:crate|super|self)(?:\s*::\s*\w+)+)")


def strip(src):
    """Code without comments and with every string and char literal emptied (one pass, as rustc lexes)."""
    out, i, n = [], 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            i = n if j < 0 else j
        elif src.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if src.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif src.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    i += 1
            out.append(" ")
        elif (c in "rb" and (i == 0 or not (src[i - 1].isalnum() or src[i - 1] == "_"))
              and re.match(r'(?:br|r)#*"', src[i:i + 260])):
            m = re.match(r'(?:br|r)(#*)"', src[i:])
            close = '"' + m.group(1)
            j = src.find(close, i + m.end())
            i = n if j < 0 else j + len(close)
            out.append('""')
        elif c == '"' or (c == "b" and src.startswith('b"', i) and (i == 0 or not (src[i - 1].isalnum() or src[i - 1] == "_"))):
            i += 2 if c == "b" else 1
            while i < n and src[i] != '"':
                i += 2 if src[i] == "\\" else 1
            i += 1
            out.append('""')
        elif c == "'":
            m = re.match(r"'(?:\\.[^']*|[^'\\])'", src[i:i + 12])
            if m:
                out.append("' '")
                i += m.end()
            else:  # a lifetime or label
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def expand_use(tree):
    """`a::{b, c::{d as e}}` -> [['a','b'], ['a','c','d']]; `self` in braces is the prefix."""
    tree = re.sub(r"\s+", "", tree)
    out = []

    def walk(prefix, s):
        # split s on top-level commas
        parts, depth, cur = [], 0, ""
        for ch in s:
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            if ch == "," and depth == 0:
                parts.append(cur)
                cur = ""
            else:
                cur += ch
        if cur:
            parts.append(cur)
        for p in parts:
            if not p:
                continue
            if "{" in p:
                head, rest = p.split("{", 1)
                rest = rest[: rest.rfind("}")]
                head = [x for x in head.split("::") if x]
                walk(prefix + head, rest)
            else:
                segs = [x for x in p.split("::") if x]
                if segs == ["self"]:
                    out.append(prefix)
                else:
                    out.append(prefix + segs)

    walk([], tree)
    return out


USE_RENAME = re.compile(r"\s+as\s+\w+")


class Crate:
    def __init__(self, root):
        self.root = root
        self.src = os.path.join(root, "src")
        self.files = {}  # module path tuple -> file (relative to src)
        self.texts = {}  # file -> stripped text
        self.inline = {}  # module path tuple -> file, for inline `mod x {}` blocks
        entry = None
        for name in ("lib.rs", "main.rs"):
            if os.path.exists(os.path.join(self.src, name)):
                entry = name
                break
        self.entry = entry
        if entry:
            self._load((), entry)
        # binaries beside the library (src/bin/*.rs, src/main.rs with lib.rs) are separate crates
        self.reexports = {}  # (module path, name) -> full path
        for mp, f in self.files.items():
            for m in USE_STMT.finditer(self.texts[f]):
                if not m.group(1):
                    continue
                for p in expand_use(USE_RENAME.sub("", m.group(2))):
                    full = self._absolute(mp, p)
                    if full and p and p[-1] != "*":
                        self.reexports[(mp, p[-1])] = full

    def _load(self, mp, rel):
        self.files[mp] = rel
        text = strip(open(os.path.join(self.src, rel), encoding="utf-8").read())
        self.texts[rel] = text
        base = os.path.dirname(rel)
        if os.path.basename(rel) not in ("lib.rs", "main.rs", "mod.rs"):
            base = os.path.join(base, os.path.splitext(os.path.basename(rel))[0])
        paths = {m.group(2): m.group(1) for m in PATH_ATTR.finditer(text)}
        # inline modules: only one level is resolved (tests and small helpers)
        for m in MOD_DECL.finditer(text):
            name, kind = m.group(1), m.group(2)
            if kind == "{":
                self.inline[mp + (name,)] = rel
                continue
            if name in paths:
                cand = [os.path.normpath(os.path.join(os.path.dirname(rel), paths[name]))]
            else:
                cand = [os.path.join(base, name + ".rs"), os.path.join(base, name, "mod.rs")]
            for c in cand:
                if os.path.exists(os.path.join(self.src, c)):
                    self._load(mp + (name,), c)
                    break

    def _absolute(self, mp, segs):
        """A path as written in module `mp` -> an absolute module path (or None when external)."""
        if not segs:
            return None
        head = segs[0]
        if head == "crate":
            return tuple(segs[1:])
        if head == "self":
            return mp + tuple(segs[1:])
        if head == "super":
            cur = list(mp)
            i = 0
            while i < len(segs) and segs[i] == "super":
                if cur:
                    cur.pop()
                i += 1
            return tuple(cur) + tuple(segs[i:])
        if mp + (head,) in self.files or mp + (head,) in self.inline:
            return mp + tuple(segs)
        return None

    def resolve(self, full, depth=0):
        """An absolute path -> the file defining the longest module prefix, following re-exports."""
        full = tuple(full)
        for n in range(len(full), -1, -1):
            pre = full[:n]
            if pre in self.files:
                rest = full[n:]
                if rest and depth < 8 and (pre, rest[0]) in self.reexports:
                    return self.resolve(self.reexports[(pre, rest[0])] + rest[1:], depth + 1)
                return self.files[pre]
            if pre in self.inline:
                return self.inline[pre]
        return None

    def spans(self, text):
        """Inline `mod x { … }` blocks of a file: [(start, end, (x,)…)], nested ones with their full path."""
        out = []

        def scan(start, end, prefix):
            for m in MOD_DECL.finditer(text, start, end):
                if m.group(2) != "{" or any(s <= m.start() < e for s, e, _ in out if len(_) > len(prefix) and _[: len(prefix)] == prefix and s >= start):
                    continue
                depth, i = 1, m.end()
                while i < len(text) and depth:
                    depth += {"{": 1, "}": -1}.get(text[i], 0)
                    i += 1
                out.append((m.end(), i, prefix + (m.group(1),)))
                scan(m.end(), i, prefix + (m.group(1),))

        scan(0, len(text), ())
        return out

    def module_at(self, mp, spans, pos):
        best = ()
        for s, e, path in spans:
            if s <= pos < e and len(path) > len(best):
                best = path
        return mp + best

    def edges(self):
        """file -> {file: set of paths written}"""
        out = {f: {} for f in self.texts}
        for mp, f in self.files.items():
            text = self.texts[f]
            imported = {}  # local name -> absolute module path (for inline `name::x`)
            written = []
            spans = self.spans(text)
            for m in USE_STMT.finditer(text):
                if m.group(1):
                    continue  # re-exports are aliases (see module doc)
                here = self.module_at(mp, spans, m.start())
                for p in expand_use(USE_RENAME.sub("", m.group(2))):
                    full = self._absolute(here, [s for s in p if s != "*"])
                    if full is None:
                        continue
                    written.append(("::".join(p), full))
                    if full in self.files and p and p[-1] != "*":
                        imported[p[-1]] = full
            body = USE_STMT.sub(lambda m: " " * len(m.group(0)), text)
            for m in INLINE_PATH.finditer(body):
                segs = [s for s in re.split(r"\s*::\s*", m.group(1)) if s]
                full = self._absolute(self.module_at(mp, spans, m.start()), segs)
                if full is not None:
                    written.append(("::".join(segs), full))
            names = "|".join(sorted(set(imported) | {k[-1] for k in self.files if k[:-1] == mp and k}))
            if names:
                for m in re.finditer(r"(?<![\w:])((?:%s)(?:\s*::\s*\w+)+)" % names, body):
                    segs = [s for s in re.split(r"\s*::\s*", m.group(1)) if s]
                    if segs[0] in imported:
                        full = imported[segs[0]] + tuple(segs[1:])
                    else:
                        full = mp + tuple(segs)
                    written.append(("::".join(segs), full))
            for shown, full in written:
                target = self.resolve(full)
                if target and target != f:
                    out[f].setdefault(target, set()).add(shown)
        return out


def sccs(graph):
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def main(argv):
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(here)
    dirs = argv or sorted(
        os.path.join(root, "crates", d)
        for d in os.listdir(os.path.join(root, "crates"))
        if os.path.isdir(os.path.join(root, "crates", d, "src"))
    )
    failed = 0
    for d in dirs:
        crate = Crate(d)
        if not crate.entry:
            continue
        graph = crate.edges()
        name = os.path.basename(os.path.normpath(d))
        for comp in sccs(graph):
            reason = ALLOWED.get((name, frozenset(comp)))
            if reason:
                print(f"{name}: allowed circle {comp}: {reason}")
                continue
            failed += 1
            print(f"{name}: import circle between {len(comp)} files:")
            for f in comp:
                for t in sorted(graph[f]):
                    if t in comp:
                        print(f"  {f} -> {t}: {', '.join(sorted(graph[f][t]))}")
    if failed:
        print(f"{failed} import circle(s); a module must not import, directly or through others, a module that imports it")
        return 1
    print("no import circles between files")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
