# SPDX-License-Identifier: MIT
"""DLPack round trips, cmetal beside NumPy and PyTorch, in one run.

Usage: /usr/bin/python3 tools/dlpack_bench.py BUILD_DIR [max_bytes]
  BUILD_DIR holds bin/cmetal-dlpack-bench and libcmetal.so.

For float32 tensors from 1 KiB to max_bytes (default 1 GiB), prints the
nanoseconds per round trip of:
  cmetal C      export + import + release, in C (cmetal-dlpack-bench)
  cmetal ctypes the same three calls from Python through ctypes
  numpy         np.from_dlpack(array)      (array.__dlpack__ + import)
  torch         from_dlpack(tensor)        (tensor.__dlpack__ + import)
and the ratios of each peer to cmetal through ctypes (same interpreter
overhead). None of them copies, so no column should grow with the size.
Numbers are medians of 5 batches; a benchmark, never a test.
"""

import ctypes
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "interop"))
import dlpack_interop as dl  # noqa: E402  (the ctypes ABI and helpers)


def median_ns(fn, min_batch_s=0.02):
    n = 100
    while True:
        t0 = time.perf_counter_ns()
        for _ in range(n):
            fn()
        if time.perf_counter_ns() - t0 > min_batch_s * 1e9 or n > 1 << 22:
            break
        n *= 2
    batches = []
    for _ in range(5):
        t0 = time.perf_counter_ns()
        for _ in range(n):
            fn()
        batches.append((time.perf_counter_ns() - t0) / n)
    return sorted(batches)[2]


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    build = sys.argv[1]
    max_bytes = int(sys.argv[2], 0) if len(sys.argv) > 2 else 1 << 30
    c_lines = subprocess.run([os.path.join(build, "bin", "cmetal-dlpack-bench"), str(max_bytes)],
                             check=True, capture_output=True, text=True).stdout.splitlines()
    c_ns = {int(l.split()[0]): float(l.split()[1]) for l in c_lines if not l.startswith("#")}

    cm = dl.Cmetal(os.path.join(build, "libcmetal.so"))
    try:
        import numpy as np
    except ImportError:
        np = None
    try:
        import torch
        from torch.utils import dlpack as tdl
    except ImportError:
        torch = None

    lib = cm.lib
    desc = dl.ExportDesc()
    managed = dl.Managed()
    out = ctypes.c_void_p()

    def cmetal_round_trip(t):
        lib.cm_dlpack_export(t, ctypes.byref(desc), ctypes.byref(managed))
        lib.cm_dlpack_import(managed.legacy, None, ctypes.byref(out))
        lib.cm_tensor_release(out)

    print("peers: %s" % ", ".join(
        x for x in [np and "numpy " + np.__version__, torch and "torch " + torch.__version__] if x))
    print("%12s %10s %13s %10s %10s %9s %9s" % ("bytes", "cmetal C", "cmetal ctypes", "numpy",
                                               "torch", "np/cm", "torch/cm"))
    bytes_ = 1024
    while bytes_ <= max_bytes:
        n = bytes_ // 4
        t = cm.create("float32", [n])
        ct = median_ns(lambda: cmetal_round_trip(t))
        cm.release(t)
        npn = tn = float("nan")
        if np is not None:
            a = np.empty(n, dtype=np.float32)
            npn = median_ns(lambda: np.from_dlpack(a))
            del a
        if torch is not None:
            x = torch.empty(n, dtype=torch.float32)
            tn = median_ns(lambda: tdl.from_dlpack(x))
            del x
        print("%12d %10.0f %13.0f %10.0f %10.0f %9.2f %9.2f" % (
            bytes_, c_ns.get(bytes_, float("nan")), ct, npn, tn, npn / ct, tn / ct))
        sys.stdout.flush()
        bytes_ *= 4
    lib.cm_device_release(cm.cpu)
    return 0


if __name__ == "__main__":
    sys.exit(main())
