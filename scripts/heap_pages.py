#!/usr/bin/env python3
"""What a running hale's mimalloc pages hold: live bytes against resident
memory, by block size and by owning thread (issue 45).

Usage: sudo scripts/heap_pages.py PID [--top N]

Reads /proc/PID/smaps (the 1 GiB anonymous mapping is mimalloc's arena),
/proc/PID/pagemap (which of its 4 KiB pages are resident) and /proc/PID/mem
(mimalloc's page meta-data), so it needs ptrace rights over PID (root, or
the same user with ptrace_scope 0). It reads mimalloc v3's layout as
libmimalloc-sys 0.1.49 builds it (MI_PAGE_META_IS_SEPARATED: an array of
120-byte `mi_page_t` in the arena's first slices, one per 64 KiB slice):
`used` (u16 at 16), `capacity` (u16 at 18), `reserved` (u16 at 20),
`block_size` (u64 at 40), `page_start` (u64 at 48), the owner thread in
`xthread_id` (u64 at 0, low 3 bits flags). The array is found as the
pointer in the arena's header whose entries describe the resident slices
(`page_start` inside their slice); the score printed says how many
resident slices it explained — a low one means the layout moved (another
mimalloc): do not read the rest. Threads are named by their pthread
address as gdb's `info threads` prints it.

A page is resident as far as its blocks were ever handed out; it goes back
to the OS only when all its blocks are free. "live" is what its `used`
blocks hold, so resident − live is what blocks freed among live ones keep.
"""

import collections
import re
import struct
import sys

SLICE = 64 * 1024
PAGE_T = 120


def arena(pid):
    for line in open(f"/proc/{pid}/smaps"):
        m = re.match(r"^([0-9a-f]+)-([0-9a-f]+) rw-p ", line)
        if m:
            lo, hi = int(m.group(1), 16), int(m.group(2), 16)
            if hi - lo == 1 << 30:
                return lo, hi
    sys.exit("no 1 GiB anonymous mapping: not a mimalloc v3 process?")


def resident_slices(pid, lo, hi):
    with open(f"/proc/{pid}/pagemap", "rb") as pm:
        pm.seek((lo // 4096) * 8)
        data = pm.read(((hi - lo) // 4096) * 8)
    res = collections.Counter()
    for i in range(0, len(data), 8):
        (e,) = struct.unpack_from("<Q", data, i)
        if e >> 63 & 1:
            res[(i // 8) // 16] += 1
    return res


def main():
    pid = int(sys.argv[1])
    top = int(sys.argv[sys.argv.index("--top") + 1]) if "--top" in sys.argv else 20
    lo, hi = arena(pid)
    res = resident_slices(pid, lo, hi)
    mem = open(f"/proc/{pid}/mem", "rb")

    def rd(addr, n):
        mem.seek(addr)
        return mem.read(n)

    def page(meta, u):
        e = rd(meta + u * PAGE_T, PAGE_T)
        used, cap, reserved = struct.unpack_from("<HHH", e, 16)
        bs, start = struct.unpack_from("<QQ", e, 40)
        tid = struct.unpack_from("<Q", e, 0)[0] & ~0x7
        return used, cap, reserved, bs, start, tid

    def first_slice(u, bs, start):
        """Whether slice `u`'s entry describes a page starting in it."""
        return bs != 0 and lo + u * SLICE <= start < lo + (u + 1) * SLICE

    def explained(meta):
        return sum(first_slice(u, *page(meta, u)[3:5]) for u in res)

    head = rd(lo, 1024)
    cands = [p for (p,) in struct.iter_unpack("<Q", head) if lo < p < lo + (8 << 20)]
    if not cands:
        sys.exit("no page meta-data pointer in the arena's header")
    meta = max(cands, key=explained)
    score = explained(meta)
    print(f"arena {lo:#x}, {sum(res.values()) * 4} KiB resident in {len(res)} slices; "
          f"page meta at {meta:#x} explains {score} of them")
    by_size = collections.defaultdict(lambda: [0, 0, 0])
    by_thread = collections.defaultdict(lambda: [0, 0, 0])
    for u in res:
        used, _, reserved, bs, start, tid = page(meta, u)
        if not first_slice(u, bs, start):
            continue
        slices = max(1, -(-(start - (lo + u * SLICE) + reserved * bs) // SLICE))
        kib = sum(res.get(u + k, 0) for k in range(slices)) * 4
        for row in (by_size[bs], by_thread[tid]):
            row[0] += 1
            row[1] += used * bs
            row[2] += kib
    live = sum(r[1] for r in by_size.values()) // 1024
    resident = sum(r[2] for r in by_size.values())
    print(f"pages {sum(r[0] for r in by_size.values())}: live {live} KiB, resident {resident} KiB")
    for title, rows, key in (("block size", by_size, "{:>10d}"), ("owner thread", by_thread, "{:>#14x}")):
        print(f"\n{title:>14}  pages  live KiB  resident KiB")
        for k, (n, lb, kib) in sorted(rows.items(), key=lambda kv: -kv[1][2])[:top]:
            print(f"{key.format(k):>14} {n:6d} {lb // 1024:9d} {kib:13d}")


if __name__ == "__main__":
    main()
