#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Summarises tools/bench/xeon_compare.sh's log: per op, each tree's ratio
to memcpy in every round (rounds in order), then the DLPack round trips.

    python3 tools/bench/xeon_summary.py LOG
"""
import json
import re
import sys


def main(path):
    text = open(path).read()
    runs = {}  # name -> list of cases dicts (one per round)
    dl = {}  # name -> list of {bytes: (legacy, versioned)}
    for m in re.finditer(r"=== bench (\S+) (\d+)\n(.*?)\n=== end\n", text, re.S):
        try:
            runs.setdefault(m.group(1), []).append(json.loads(m.group(3)))
        except ValueError:
            print("unparsed bench", m.group(1), m.group(2))
    for m in re.finditer(r"=== dlpack (\S+) (\d+)\n(.*?)\n=== end\n", text, re.S):
        sizes = {}
        for line in m.group(3).splitlines():
            if not line[:1].isdigit():
                continue
            f = line.split()
            sizes[int(f[0])] = tuple(float(x) for x in f[1:])  # legacy, versioned[, chain]
        dl.setdefault(m.group(1), []).append(sizes)
    names = list(runs)
    if not names:
        return
    ops = [c["name"] for c in runs[names[0]][0]["cases"]]
    print("%-34s %s" % ("op (ratio to memcpy, rounds)", "  ".join("%-16s" % n for n in names)))
    for op in ops:
        cols = []
        for n in names:
            vals = [c["ratio_to_memcpy"] for r in runs[n] for c in r["cases"] if c["name"] == op]
            cols.append("%-16s" % " ".join("%.2f" % v for v in vals))
        print("%-34s %s" % (op[:34], "  ".join(cols)))
    print("memcpy best GB/s: " + "  ".join(
        "%s %s" % (n, " ".join("%.1f" % r["memcpy_best_gb_per_s"] for r in runs[n])) for n in names))
    print("bench dlpack ns (1 KiB / big, legacy-versioned): " + "  ".join(
        "%s %s" % (n, " ".join("%.0f-%.0f/%.0f-%.0f" % (r["dlpack_round_trip"][0]["ns_legacy"],
                                                        r["dlpack_round_trip"][0]["ns_versioned"],
                                                        r["dlpack_round_trip"][1]["ns_legacy"],
                                                        r["dlpack_round_trip"][1]["ns_versioned"])
                              for r in runs[n])) for n in names))
    for n, lst in dl.items():
        for i, sizes in enumerate(lst):
            if not sizes:
                print("dlpack-bench %s round %d: no figures" % (n, i + 1))
                continue
            worst = max(max(v[:2]) for v in sizes.values())
            over = [b for b, v in sizes.items() if max(v[:2]) > 50]
            chain = [v[2] for v in sizes.values() if len(v) > 2]
            wide = [v[3] for v in sizes.values() if len(v) > 3]
            print("dlpack-bench %s round %d: %.0f-%.0f ns, over 50 at %s%s" % (
                n, i + 1, min(min(v[:2]) for v in sizes.values()), worst,
                ",".join(str(b >> 10) + "K" for b in over) or "none",
                "; chain step %.3f-%.3f ns" % (min(chain), max(chain)) if chain else ""))
            if chain:
                print("   per size (legacy/versioned/chain1[/chain8]): " + " ".join(
                    "/".join(("%.0f" if k < 2 else "%.2f") % x for k, x in enumerate(v))
                    for _, v in sorted(sizes.items())))


if __name__ == "__main__":
    main(sys.argv[1])
