# SPDX-License-Identifier: MIT
"""cmetal's CPU ops beside NumPy's and PyTorch's, on the same arrays, in one run.

Usage: python3 tools/bench/peers.py BUILD_DIR [--mib N] [--reps N]
                                    [--threads 1,16] [--only TEXT] [--no-check]
  BUILD_DIR holds libcmetal.so (or pass the library itself).

Every array lives in cmetal's memory: inputs are made on the shared CPU
device and outputs on a CPU device opened with `cpu_threads` = N; NumPy
(np.from_dlpack) and PyTorch (torch.utils.dlpack.from_dlpack) see them
through DLPack, so the three read the same bytes and write the same output
(cmetal's ops run on the threads of the output's device; PyTorch runs with
torch.set_num_threads(N); NumPy has one thread whatever N is). Each op is
timed as the best of --reps runs after a warm-up, alternating with
np.copyto between two uint8 arrays of the working size (memcpy, one thread)
so that every figure has its reference from the same moment:

  ratio  = (bytes the op reads + writes) / time, over memcpy's 2 x size / time
  cm/np, cm/torch = the peer's time over cmetal's (above 1: cmetal is faster)

Before timing, cmetal's result is compared with the peers' (exact where the
op is exact, within the float rounding of the dtype for sums and means), so
that the ops compared compute the same thing. A benchmark, never a test:
no figure is asserted. Exit status 1 if a result differs, 77 when neither
NumPy nor PyTorch is installed.
"""

import argparse
import ctypes
import math
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests",
                                "interop"))
import dlpack_interop as dl  # noqa: E402  (the ctypes ABI and helpers)

try:
    import numpy as np
except ImportError:
    np = None
try:
    import torch
    from torch.utils import dlpack as tdl
except ImportError:
    torch = None

CM_AXIS_ALL = -(1 << 31)
CM_BINARY = {"add": 1, "mul": 3}
CM_REDUCE = {"sum": 1, "mean": 2, "max": 3, "min": 4}


class DeviceDesc(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("index", ctypes.c_uint32), ("cpu_threads", ctypes.c_uint32)]


class Lib:
    """cmetal's ops through ctypes, on top of the interop harness."""

    def __init__(self, path):
        self.cm = dl.Cmetal(path)
        lib = self.cm.lib
        P, V = ctypes.POINTER, ctypes.c_void_p
        for name, args in {
            "cm_device_open_desc": [P(DeviceDesc), P(V)],
            "cm_tensor_create": [V, P(dl.TensorDesc), P(V)],
            "cm_tensor_reshape": [V, ctypes.c_int32, P(ctypes.c_int64), P(V)],
            "cm_fill": [V, ctypes.c_int, V, V],
            "cm_copy": [V, V, V],
            "cm_cast": [V, V, V],
            "cm_binary": [ctypes.c_int, V, V, V, V],
            "cm_reduce": [ctypes.c_int, V, ctypes.c_int32, V, V],
        }.items():
            getattr(lib, name).argtypes = args
            getattr(lib, name).restype = ctypes.c_int
        self.lib = lib
        self.check = self.cm.check

    def device(self, threads):
        if threads <= 1:
            return self.cm.cpu
        d = ctypes.c_void_p()
        self.check(self.lib.cm_device_open_desc(
            ctypes.byref(DeviceDesc(type=dl.CM_DEVICE_CPU, cpu_threads=threads)), ctypes.byref(d)))
        return d

    def create(self, dev, dtype, shape):
        arr = (ctypes.c_int64 * max(len(shape), 1))(*shape)
        desc = dl.TensorDesc(dtype=dl.CM_DTYPES[dtype], ndim=len(shape), shape=arr)
        t = ctypes.c_void_p()
        self.check(self.lib.cm_tensor_create(dev, ctypes.byref(desc), ctypes.byref(t)))
        return t

    def transpose(self, t):
        out = ctypes.c_void_p()
        self.check(self.lib.cm_tensor_transpose(t, 0, 1, ctypes.byref(out)))
        return out

    def reshape(self, t, shape):
        arr = (ctypes.c_int64 * max(len(shape), 1))(*shape)
        out = ctypes.c_void_p()
        self.check(self.lib.cm_tensor_reshape(t, len(shape), arr, ctypes.byref(out)))
        return out


def writable(a):
    """NumPy before 2.0 imports DLPack arrays read-only: the same memory,
    writable (the tensor outlives the view; Array.release drops it first)."""
    if a.flags.writeable:
        return a
    ptr = a.__array_interface__["data"][0]
    raw = (ctypes.c_char * max(a.nbytes, 1)).from_address(ptr)
    return np.frombuffer(raw, dtype=a.dtype, count=a.size).reshape(a.shape)


class Array:
    """A cmetal tensor with its NumPy and PyTorch views (None where the peer
    lacks the dtype or is not installed)."""

    def __init__(self, lib, tensor, dtype):
        self.lib, self.t, self.dtype = lib, tensor, dtype
        self.np = self.torch = None
        if np is not None and dtype != "bfloat16":
            self.np = writable(np.from_dlpack(dl.CmArray(lib.cm, tensor, owned=False)))
        if torch is not None:
            self.torch = tdl.from_dlpack(dl.CmArray(lib.cm, tensor, owned=False))

    def release(self):
        self.np = self.torch = None
        self.lib.cm.release(self.t)
        self.t = None


def best_times(fns, reps):
    """Best time of each callable (None: skipped), run in turn after a
    warm-up round."""
    for f in fns:
        if f is not None:
            f()
    best = [math.inf] * len(fns)
    for _ in range(reps):
        for k, f in enumerate(fns):
            if f is None:
                continue
            t0 = time.perf_counter()
            f()
            best[k] = min(best[k], time.perf_counter() - t0)
    return best


ITEMSIZE = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "int32": 4, "int8": 1,
            "int64": 8}
NP_DTYPE = {"float16": "float16", "float32": "float32", "float64": "float64", "int32": "int32",
            "int8": "int8", "int64": "int64"}
TORCH_DTYPE = {}
if torch is not None:
    TORCH_DTYPE = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32,
                   "float64": torch.float64, "int32": torch.int32, "int8": torch.int8,
                   "int64": torch.int64}


class Bench:
    def __init__(self, lib, size, reps, only):
        self.lib, self.size, self.reps, self.only = lib, size, reps, only
        self.inputs = {}
        self.failures = []
        self.rows = []
        src = lib.create(lib.cm.cpu, "uint8", [size])
        dst = lib.create(lib.cm.cpu, "uint8", [size])
        self.m_arrays = [Array(lib, src, "uint8"), Array(lib, dst, "uint8")]
        self.m_src, self.m_dst = (a.np if a.np is not None else a.torch for a in self.m_arrays)
        if np is not None:
            np.copyto(self.m_src, 7)
            np.copyto(self.m_dst, 0)
        else:
            self.m_src.fill_(7)
            self.m_dst.fill_(0)
        # Square sides for the 2-d ops: the largest power of two whose square
        # fits the working size in float32.
        n4 = size // 4
        self.side = 1
        while (self.side * 2) ** 2 <= n4:
            self.side *= 2

    def memcpy(self):
        if np is not None:
            np.copyto(self.m_dst, self.m_src)
        else:
            self.m_dst.copy_(self.m_src)

    def input(self, dtype, key=0):
        """The working size of dtype, random, made once (shared CPU device)."""
        if (dtype, key) in self.inputs:
            return self.inputs[(dtype, key)]
        n = self.size // ITEMSIZE[dtype]
        a = Array(self.lib, self.lib.create(self.lib.cm.cpu, dtype, [n]), dtype)
        if np is not None:
            rng = np.random.default_rng(1234 + key)
            if dtype in ("int32", "int8"):
                info = np.iinfo(dtype)
                a.np[...] = rng.integers(info.min, info.max, size=n, dtype=dtype, endpoint=True)
            elif dtype == "bfloat16":
                a.torch.copy_(torch.from_numpy(rng.standard_normal(n, dtype=np.float32)))
            else:
                a.np[...] = rng.standard_normal(n, dtype=np.float32)
        else:
            g = torch.Generator().manual_seed(1234 + key)
            if dtype in ("int32", "int8"):
                info = torch.iinfo(TORCH_DTYPE[dtype])
                a.torch.copy_(torch.randint(info.min, info.max, (n,), generator=g,
                                            dtype=torch.int64).to(TORCH_DTYPE[dtype]))
            else:
                a.torch.copy_(torch.randn(n, generator=g))
        self.inputs[(dtype, key)] = a
        return a

    def view2(self, a, rows):
        """a's memory as rows x (numel / rows): the cmetal view and the peers'."""
        cols = (self.size // ITEMSIZE[a.dtype]) // rows
        v = Array.__new__(Array)
        v.lib, v.dtype = self.lib, a.dtype
        v.t = self.lib.reshape(a.t, [rows, cols])
        v.np = a.np.reshape(rows, cols) if a.np is not None else None
        v.torch = a.torch.reshape(rows, cols) if a.torch is not None else None
        return v

    def output(self, dev, dtype, shape):
        return Array(self.lib, self.lib.create(dev, dtype, shape), dtype)

    # ------------------------------------------------------------ rows

    def row(self, name, nbytes, cm_fn, np_fn, torch_fn, out, check):
        if self.only and self.only not in name:
            return
        got = None
        if check is not None:
            cm_fn()
            got = snapshot(out)
            for peer, fn in (("numpy", np_fn), ("torch", torch_fn)):
                if fn is None:
                    continue
                fill_poison(out)
                ret = fn()
                # 0-d outputs: the peers return their result (they write no out)
                want = to_f64(ret) if out_is_0d(out) else snapshot(out)
                bad = compare(got, want, check)
                if bad:
                    self.failures.append("%s: cmetal and %s differ: %s" % (name, peer, bad))
        t_m, t_cm, t_np, t_torch = best_times([self.memcpy, cm_fn, np_fn, torch_fn], self.reps)
        memcpy_bw = 2.0 * self.size / t_m
        ratio = lambda t: nbytes / t / memcpy_bw if t != math.inf else None
        r = {"name": name, "memcpy_gbs": memcpy_bw * 1e-9, "cm": ratio(t_cm), "np": ratio(t_np),
             "torch": ratio(t_torch),
             "cm_np": t_np / t_cm if t_np != math.inf else None,
             "cm_torch": t_torch / t_cm if t_torch != math.inf else None}
        self.rows.append(r)
        print_row(r)

    def run(self, threads):
        lib, L = self.lib, self.lib.lib
        dev = lib.device(threads)
        if torch is not None:
            torch.set_num_threads(threads)
        S = self.size
        side = self.side
        ok = lambda s: lib.check(s)
        n4 = S // 4

        # copies, transpose, casts, fill
        a = self.input("float32")
        o = self.output(dev, "float32", [n4])
        self.row("copy f32", 2 * S, lambda: ok(L.cm_copy(a.t, o.t, None)),
                 np and (lambda: np.copyto(o.np, a.np)), torch and (lambda: o.torch.copy_(a.torch)),
                 o, "exact")
        o.release()
        sq = self.view2(a, side)
        if side * side * 4 == S:
            sq_t = lib.transpose(sq.t)
            o = self.output(dev, "float32", [side, side])
            self.row("transpose f32 (%d x %d)" % (side, side), 2 * S,
                     lambda: ok(L.cm_copy(sq_t, o.t, None)),
                     np and (lambda: np.copyto(o.np, sq.np.T)),
                     torch and (lambda: o.torch.copy_(sq.torch.t())), o, "exact")
            o.release()
            lib.cm.release(sq_t)
        lib.cm.release(sq.t)
        for src, dst in (("float32", "float16"), ("float16", "float32"), ("float32", "bfloat16"),
                         ("bfloat16", "float32")):
            x = self.input(src)
            n = S // ITEMSIZE[src]
            o = self.output(dev, dst, [n])
            nb = n * (ITEMSIZE[src] + ITEMSIZE[dst])
            np_fn = None
            if np is not None and x.np is not None and o.np is not None:
                np_fn = (lambda x=x, o=o: np.copyto(o.np, x.np, casting="unsafe"))
            self.row("cast %s -> %s" % (short(src), short(dst)), nb,
                     lambda x=x, o=o: ok(L.cm_cast(x.t, o.t, None)), np_fn,
                     torch and (lambda x=x, o=o: o.torch.copy_(x.torch)), o, "exact")
            o.release()
        o = self.output(dev, "float32", [n4])
        v = ctypes.c_double(1.25)
        self.row("fill f32", S, lambda: ok(L.cm_fill(o.t, dl.CM_DTYPES["float64"], ctypes.byref(v),
                                                     None)),
                 np and (lambda: o.np.fill(1.25)), torch and (lambda: o.torch.fill_(1.25)), o,
                 "exact")
        o.release()

        # elementwise
        b = self.input("float32", key=1)
        o = self.output(dev, "float32", [n4])
        for op in ("add", "mul"):
            npf = getattr(np, {"add": "add", "mul": "multiply"}[op]) if np else None
            tf = getattr(torch, op) if torch else None
            self.row("%s f32" % op, 3 * S,
                     lambda op=op: ok(L.cm_binary(CM_BINARY[op], a.t, b.t, o.t, None)),
                     npf and (lambda npf=npf: npf(a.np, b.np, out=o.np)),
                     tf and (lambda tf=tf: tf(a.torch, b.torch, out=o.torch)), o, "exact")
        o.release()

        # reductions: every kind and axis of float32, then the other dtypes
        cases = [("float32", k) for k in ("sum", "mean", "max", "min")]
        cases += [("float16", "sum"), ("bfloat16", "sum"), ("float64", "sum")]
        cases += [("int32", k) for k in ("sum", "max", "min")]
        cases += [("int8", k) for k in ("sum", "max")]
        for dtype, kind in cases:
            x = self.input(dtype)
            isz = ITEMSIZE[dtype]
            out_dtype = "int64" if kind == "sum" and dtype.startswith("int") else dtype
            m = self.view2(x, side)
            for axis in (None, 0, 1):
                name = "%s %s (%s)" % (kind, short(dtype), "all" if axis is None else
                                       "axis %d" % axis)
                src = x if axis is None else m
                shape = [] if axis is None else [m_shape(self, m)[1 - axis]]
                o = self.output(dev, out_dtype, shape)
                cm_axis = CM_AXIS_ALL if axis is None else axis
                self.row(name, S,
                         lambda src=src, o=o, cm_axis=cm_axis, kind=kind:
                             ok(L.cm_reduce(CM_REDUCE[kind], src.t, cm_axis, o.t, None)),
                         np_reduce(kind, src, o, axis), torch_reduce(kind, src, o, axis), o,
                         tolerance(kind, dtype, S // isz if axis is None else
                                   m_shape(self, m)[axis]))
                o.release()
            lib.cm.release(m.t)
        if threads > 1:
            lib.cm.lib.cm_device_release(dev)


def m_shape(bench, m):
    return (bench.side, (bench.size // ITEMSIZE[m.dtype]) // bench.side)


def short(dtype):
    return {"float16": "f16", "bfloat16": "bf16", "float32": "f32", "float64": "f64",
            "int32": "i32", "int8": "i8"}[dtype]


def np_reduce(kind, src, o, axis):
    if np is None or src.np is None or o.np is None:
        return None
    f = {"sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min}[kind]
    if axis is None:
        return lambda: f(src.np)  # a scalar: compared as returned
    return lambda: f(src.np, axis=axis, out=o.np)


def torch_reduce(kind, src, o, axis):
    if torch is None or src.torch is None or o.torch is None:
        return None
    f = {"sum": torch.sum, "mean": torch.mean, "max": torch.amax, "min": torch.amin}[kind]
    if axis is None:
        return lambda: f(src.torch)
    return lambda: f(src.torch, axis, out=o.torch)


def tolerance(kind, dtype, n):
    """How far a peer's result may be from cmetal's: exact for max, min and
    integer sums; for float sums and means the peers' own rounding (they
    accumulate in the dtype or in float32 and round to it)."""
    if kind in ("max", "min") or dtype.startswith("int"):
        return "exact"
    eps = {"float16": 2.0 ** -10, "bfloat16": 2.0 ** -7, "float32": 2.0 ** -23,
           "float64": 2.0 ** -52}[dtype]
    return ("close", 4 * eps, 64 * eps * math.log2(max(n, 2)) * (math.sqrt(n) if kind == "sum"
                                                               else 1 / math.sqrt(n)))


def to_f64(v):
    if torch is not None and isinstance(v, torch.Tensor):
        return [float(x) for x in v.double().reshape(-1).tolist()]
    if np is not None:
        return [float(x) for x in np.asarray(v, dtype=np.float64).reshape(-1)]
    return [float(v)]


def snapshot(out):
    """The output's values, as floats (a copy)."""
    if out.torch is not None:
        t = out.torch.reshape(-1)
        if t.numel() > (1 << 16):  # large outputs: compare bits through a digest
            return ("digest", bytes(t.view(torch.uint8)[::4099].tolist()),
                    t.view(torch.uint8).sum().item())
        return [float(x) for x in t.double().tolist()]
    a = out.np.reshape(-1)
    if a.size > (1 << 16):
        u = a.view(np.uint8)
        return ("digest", bytes(u[::4099]), int(u.sum(dtype=np.uint64)))
    return [float(x) for x in a.astype(np.float64)]


def out_is_0d(out):
    return (out.torch if out.torch is not None else out.np).ndim == 0


def fill_poison(out):
    if out.torch is not None:
        out.torch.reshape(-1).view(torch.uint8).fill_(0xA5)
    else:
        out.np.reshape(-1).view(np.uint8).fill(0xA5)


def compare(got, want, check):
    """'' when equal under check, else what differs."""
    if isinstance(got, tuple) or isinstance(want, tuple):
        return "" if got == want else "output bytes differ"
    if len(got) != len(want):
        return "%d values against %d" % (len(got), len(want))
    for k, (g, w) in enumerate(zip(got, want)):
        if check == "exact":
            same = g == w or (g != g and w != w)
        else:
            _, rtol, atol = check
            same = abs(g - w) <= atol + rtol * abs(w)
        if not same:
            return "element %d: %r against %r" % (k, g, w)
    return ""


def fmt(v, width, prec=2):
    return ("%*.*f" % (width, prec, v)) if v is not None else "%*s" % (width, "-")


def print_header():
    print("%-28s %7s %7s %7s %7s %7s %8s" % ("op", "memcpy", "cmetal", "numpy", "torch", "cm/np",
                                             "cm/torch"))


def print_row(r):
    print("%-28s %7.1f %s %s %s %s %s" % (r["name"], r["memcpy_gbs"], fmt(r["cm"], 7),
                                           fmt(r["np"], 7), fmt(r["torch"], 7), fmt(r["cm_np"], 7),
                                           fmt(r["cm_torch"], 8)), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("build", help="build folder holding libcmetal.so, or the library")
    ap.add_argument("--mib", type=int, default=256, help="working size in MiB (default 256)")
    ap.add_argument("--reps", type=int, default=3, help="timed runs per op (best taken)")
    ap.add_argument("--threads", default="1", help="thread counts, e.g. 1,16 (default 1)")
    ap.add_argument("--only", default="", help="only ops whose name contains this")
    ap.add_argument("--no-check", action="store_true", help="skip comparing results")
    args = ap.parse_args()
    if np is None and torch is None:
        print("peers.py: neither NumPy nor PyTorch is installed")
        return 77
    path = args.build
    if os.path.isdir(path):
        path = os.path.join(path, "libcmetal.so")
    threads = [int(x) for x in args.threads.split(",") if x]
    if args.mib < 1 or args.reps < 1 or not threads or min(threads) < 1:
        ap.error("--mib, --reps and every thread count must be at least 1")
    bench = Bench(Lib(path), args.mib << 20, args.reps, args.only)
    cpu = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    print("peers.py: %s x %d; %d MiB, best of %d; numpy %s, torch %s" % (
        cpu, os.cpu_count() or 0, args.mib, args.reps, np.__version__ if np else "-",
        torch.__version__ if torch else "-"))
    print("ratios: GB/s (read + written) over memcpy's (np.copyto, one thread, GB/s column) "
          "in the same run;\ncm/np, cm/torch: the peer's time over cmetal's")
    summary = []
    for n in threads:
        print("\n-- %d thread%s (cmetal cpu_threads, torch.set_num_threads; numpy one)" % (
            n, "s" if n > 1 else ""))
        print_header()
        bench.rows = []
        bench.run(n)
        low_t = [r for r in bench.rows if r["cm_torch"] is not None and r["cm_torch"] < 1.0]
        low_n = [r for r in bench.rows if r["cm_np"] is not None and r["cm_np"] < 1.0]
        summary.append("%d thread%s: cm/torch < 1.0 in %d of %d rows%s; cm/np < 1.0 in %d" % (
            n, "s" if n > 1 else "", len(low_t), len(bench.rows),
            (" (" + ", ".join("%s %.2f" % (r["name"], r["cm_torch"]) for r in low_t) + ")")
            if low_t else "", len(low_n)))
    print()
    for s in summary:
        print(s)
    for f in bench.failures:
        print("MISMATCH " + f)
    for a in list(bench.inputs.values()) + bench.m_arrays:
        a.release()
    return 1 if bench.failures else 0


if __name__ == "__main__":
    sys.exit(main())
