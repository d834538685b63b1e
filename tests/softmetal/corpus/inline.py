#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Inline a Metal source's quoted #includes, read from a git repository at a
commit, so that newLibraryWithSource (which has no include path) can compile it.

    inline.py GIT_DIR COMMIT PATH [INCLUDE_DIR...] > out.metal

A quoted include is looked up next to the including file, then in each
INCLUDE_DIR (paths inside the repository; the root is always searched last).
Angle-bracket includes stay as they are. A header with `#pragma once` is
inlined once. Nothing else changes: each inlined file is framed by
`// inline.py: begin/end <path>` comments.
"""
import posixpath
import re
import subprocess
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"\s*$')
ONCE = re.compile(r'^\s*#\s*pragma\s+once\s*$')


def main():
    git_dir, commit, path = sys.argv[1:4]
    dirs = sys.argv[4:] + [""]
    cache = {}

    def read(p):
        if p not in cache:
            r = subprocess.run(["git", "--git-dir", git_dir, "show", f"{commit}:{p}"],
                               capture_output=True, text=True)
            cache[p] = r.stdout if r.returncode == 0 else None
        return cache[p]

    once = set()
    out = []

    def emit(p, stack):
        text = read(p)
        if text is None:
            sys.exit(f"inline.py: cannot read {p}")
        for line in text.splitlines():
            if ONCE.match(line):
                once.add(p)
                continue
            m = INCLUDE.match(line)
            if not m:
                out.append(line)
                continue
            name = m.group(1)
            cands = [posixpath.normpath(posixpath.join(posixpath.dirname(p), name))]
            cands += [posixpath.normpath(posixpath.join(d, name)) for d in dirs]
            found = next((c for c in cands if read(c) is not None), None)
            if found is None:
                sys.exit(f"inline.py: {p}: include \"{name}\" not found")
            if found in once or found in stack:
                out.append(f"// inline.py: already included {found}")
                continue
            out.append(f"// inline.py: begin {found}")
            emit(found, stack + [found])
            out.append(f"// inline.py: end {found}")

    emit(path, [path])
    sys.stdout.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
