#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Share of the Objective-C selectors a Metal host codebase sends that softmetal answers.

Reads a codebase's sources (never part of this repository), extracts the
selectors they send, and asks libsoftmetal (through GNU libobjc) whether any
of its classes or instances responds to each. Source kinds:

  objc       Objective-C (.m, .mm): message sends [receiver sel:arg ...] and
             property dot syntax on names that are Metal/Foundation properties
  metal-cpp  C++ through metal-cpp: obj->method(args) and NS::/MTL:: X::alloc(),
             mapped to selectors by metal-cpp's headers (--metal-cpp DIR)
  metal-rs   Rust through the metal crate: .method(args), mapped to selectors
             by the crate's msg_send! bodies (--metal-rs DIR)
  selstr     C/C++ through objc_msgSend: sel_getUid("...") / sel_registerName("...")

The "Metal+Foundation" figure counts only selectors metal-cpp declares (its
_MTL_PRIVATE_DEF_SEL / _NS_PRIVATE_DEF_SEL lists), which drops parse noise
and frameworks softmetal does not stand for (MPSGraph, AppKit, ...).

usage: host-api-coverage.py --lib libsoftmetal.so --metal-cpp DIR [--metal-rs DIR]
           [--list] NAME=KIND:PATH[,PATH...] ...
"""
import argparse
import ctypes
import glob
import os
import re
import sys


def read(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


def strip_comments(text):
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            i = n if j < 0 else j + 2
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(text[i:j + 1])
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def files(paths, exts):
    for p in paths:
        if os.path.isdir(p):
            for root, _, names in os.walk(p):
                for name in sorted(names):
                    if name.endswith(exts):
                        yield os.path.join(root, name)
        else:
            yield from glob.glob(p)


def matching(text, i, open_c, close_c):
    """Index of the bracket closing the one at i (strings skipped), or -1."""
    depth, n = 0, len(text)
    while i < n:
        c = text[i]
        if c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            i = j
        elif c == open_c:
            depth += 1
        elif c == close_c:
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return -1


def top_level(text):
    """text with every nested (), [], {} and string replaced by spaces."""
    out, depth, i, n = [], 0, 0, len(text)
    pairs = {"(": ")", "[": "]", "{": "}"}
    while i < n:
        c = text[i]
        if c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(" " * (j + 1 - i) if depth else '""')
            i = j + 1
            continue
        if c in pairs:
            depth += 1
        elif c in ")]}":
            depth -= 1
            i += 1
            out.append(" ")
            continue
        out.append(c if depth == 0 else " ")
        i += 1
    return "".join(out)


def count_args(inner):
    inner = top_level(inner).strip()
    if not inner:
        return 0
    return inner.count(",") + 1


# ----------------------------------------------------------------- universes
def metal_cpp_maps(root):
    """(selector universe, {(method, nargs): selectors}) from metal-cpp's headers."""
    defs = {}
    for path in files([root], (".hpp",)):
        for m in re.finditer(r"_(?:MTL|NS|CA|MTLFX)_PRIVATE_DEF_SEL\(\s*(\w+)\s*,\s*\"([^\"]+)\"",
                             read(path)):
            defs[m.group(1)] = m.group(2)
    methods = {}
    for path in files([root], (".hpp",)):
        text = read(path)
        for m in re.finditer(r"_(?:MTL|NS)_INLINE\b[^;{]*?::(\w+)\s*\(", text):
            start = m.end() - 1
            end = matching(text, start, "(", ")")
            body_start = text.find("{", end)
            body_end = matching(text, body_start, "{", "}")
            if end < 0 or body_start < 0 or body_end < 0:
                continue
            body = text[body_start:body_end]
            nargs = count_args(text[start + 1:end])
            for s in re.finditer(r"_(?:MTL|NS)_PRIVATE_SEL\(\s*(\w+)\s*\)", body):
                if s.group(1) in defs:
                    methods.setdefault((m.group(1), nargs), set()).add(defs[s.group(1)])
    for name in ("alloc", "init", "retain", "release", "autorelease", "copy", "new"):
        methods.setdefault((name, 0), set()).add(name)
    return set(defs.values()), methods


def metal_rs_map(root):
    out = {}
    for path in files([root], (".rs",)):
        text = read(path)
        for m in re.finditer(r"\bfn\s+(\w+)\s*(?:<[^>{]*>)?\s*\(", text):
            end = matching(text, m.end() - 1, "(", ")")
            body_start = text.find("{", end)
            body_end = matching(text, body_start, "{", "}") if body_start >= 0 else -1
            if body_end < 0:
                continue
            body = text[body_start:body_end]
            s = re.search(r"msg_send!\s*\[", body)
            if not s:
                continue
            close = matching(body, s.end() - 1, "[", "]")
            inner = top_level(body[s.end():close])
            parts = inner.split(",", 1)
            if len(parts) < 2:
                continue
            sel = selector_of(parts[1])
            if sel:
                out.setdefault(m.group(1), set()).add(sel)
    return out


def selector_of(expr):
    keys = re.findall(r"(\w+)\s*:(?!:)", expr)
    if keys:
        return "".join(k + ":" for k in keys)
    m = re.fullmatch(r"\s*(\w+)\s*", expr)
    return m.group(1) if m else None


# ----------------------------------------------------------------- extractors
def objc_selectors(text, properties):
    text = strip_comments(text)
    found = set()
    i = 0
    while True:
        i = text.find("[", i)
        if i < 0:
            break
        end = matching(text, i, "[", "]")
        if end < 0:
            break
        inner = top_level(text[i + 1:end])
        # receiver: a first token (identifier, or what a nested send left blank)
        m = re.match(r"\s*(?:[\w.>\-]+|\s)\s+([A-Za-z_]\w*(?:\s*:.*)?)\s*$", inner, re.S)
        if m and not re.match(r"\s*\d", inner):
            sel = selector_of(m.group(1)) if ":" in m.group(1) else m.group(1).strip()
            if sel and re.fullmatch(r"[A-Za-z_][\w:]*", sel):
                found.add(sel)
        i += 1
    for m in re.finditer(r"[\w\]\)]\.([a-zA-Z]\w*)\b(\s*=(?!=))?", text):
        name = m.group(1)
        if name in properties:
            found.add("set" + name[0].upper() + name[1:] + ":" if m.group(2) else name)
    return found


def cpp_selectors(text, methods):
    text = strip_comments(text)
    found = set()
    for m in re.finditer(r"(?:->|::)\s*(\w+)\s*\(", text):
        end = matching(text, m.end() - 1, "(", ")")
        if end < 0:
            continue
        nargs = count_args(text[m.end():end])
        found |= methods.get((m.group(1), nargs), set())
    return found


def rust_selectors(text, mapping):
    text = strip_comments(text)
    found = set()
    for m in re.finditer(r"\.(\w+)\s*(?:::<[^>]*>)?\s*\(", text):
        found |= mapping.get(m.group(1), set())
    return found


def string_selectors(text):
    return set(re.findall(r"(?:sel_getUid|sel_registerName|@selector)\s*\(\s*\"?([\w:]+)\"?\s*\)",
                          text))


# ----------------------------------------------------------------- softmetal
def answered(lib_path, selectors):
    objc = ctypes.CDLL("libobjc.so.4", mode=ctypes.RTLD_GLOBAL)
    ctypes.CDLL(lib_path, mode=ctypes.RTLD_GLOBAL)
    objc.objc_getClassList.restype = ctypes.c_int
    objc.objc_getClassList.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int]
    objc.class_getName.restype = ctypes.c_char_p
    objc.class_getName.argtypes = [ctypes.c_void_p]
    objc.objc_getMetaClass.restype = ctypes.c_void_p
    objc.objc_getMetaClass.argtypes = [ctypes.c_char_p]
    objc.sel_registerName.restype = ctypes.c_void_p
    objc.sel_registerName.argtypes = [ctypes.c_char_p]
    objc.class_respondsToSelector.restype = ctypes.c_bool
    objc.class_respondsToSelector.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    n = objc.objc_getClassList(None, 0)
    buf = (ctypes.c_void_p * n)()
    objc.objc_getClassList(buf, n)
    ours = []
    for c in buf:
        name = objc.class_getName(c).decode()
        if name.startswith(("SM", "NS", "MTL", "OS_")) or name == "NXConstantString":
            ours += [c, objc.objc_getMetaClass(name.encode())]
    yes = set()
    for s in selectors:
        sel = objc.sel_registerName(s.encode())
        if any(objc.class_respondsToSelector(c, sel) for c in ours):
            yes.add(s)
    return yes


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lib", required=True)
    ap.add_argument("--metal-cpp", required=True)
    ap.add_argument("--metal-rs")
    ap.add_argument("--list", action="store_true", help="print the selectors softmetal lacks")
    ap.add_argument("codebases", nargs="+")
    a = ap.parse_args()
    universe, methods = metal_cpp_maps(a.metal_cpp)
    properties = {s for s in universe if ":" not in s}
    rs = metal_rs_map(a.metal_rs) if a.metal_rs else {}
    results = []
    for spec in a.codebases:
        name, rest = spec.split("=", 1)
        kind, paths = rest.split(":", 1)
        paths = paths.split(",")
        sels = set()
        if kind == "objc":
            for f in files(paths, (".m", ".mm", ".h")):
                sels |= objc_selectors(read(f), properties)
        elif kind == "metal-cpp":
            for f in files(paths, (".cpp", ".h", ".hpp", ".mm")):
                sels |= cpp_selectors(read(f), methods)
        elif kind == "metal-rs":
            for f in files(paths, (".rs",)):
                sels |= rust_selectors(read(f), rs)
        elif kind == "selstr":
            for f in files(paths, (".cpp", ".c", ".h", ".m", ".mm")):
                sels |= string_selectors(read(f))
        else:
            sys.exit(f"unknown kind {kind}")
        results.append((name, sels))
    every = set().union(*(s for _, s in results))
    yes = answered(a.lib, every)
    print(f"{'codebase':<10} {'all sent':>16} {'Metal+Foundation':>18}")
    for name, sels in results:
        known = sels & universe
        print(f"{name:<10} {len(sels & yes):>5}/{len(sels):<5} {100 * len(sels & yes) / max(1, len(sels)):3.0f}%"
              f" {len(known & yes):>6}/{len(known):<5} {100 * len(known & yes) / max(1, len(known)):3.0f}%")
        if a.list:
            print("  lacks:", " ".join(sorted(known - yes)))


if __name__ == "__main__":
    main()
