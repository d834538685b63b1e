#!/bin/bash
# SPDX-License-Identifier: MIT
# Builds this tree (and optionally another, BASE) on a bare Linux x86-64
# host (cmake and gcc; Metal and tests off) and runs, in one session:
# BASE's `cmetal-bench --threads 16` (1 and 16 threads), this tree's
# `cmetal-bench --threads 1,2,4,8,16` (ceiling columns, scaling curve) and
# tools/bench/peers.py at 1 and 16 threads beside NumPy and PyTorch. Used
# for the GPU machine's Xeon host (tools/bench/README.md).
#
#   tools/bench/xeon_threads.sh DLPACK_INC [BASE_SRC]
#
# MIB (256), REPS (4), COUNTS (1,2,4,8,16), PEER_THREADS (1,16), PYTHON
# (python3) change the runs; AGAIN=1 runs both benches a second time;
# logs go to $OUT (or /tmp/xeon-out).
set -u
inc=$(cd "$1" && pwd)
base=${2:-}
out=${OUT:-/tmp/xeon-out}
mkdir -p "$out"
mib=${MIB:-256}
reps=${REPS:-4}
{
    echo "host: $(grep -m1 'model name' /proc/cpuinfo) x $(nproc)"
    echo "thp: $(cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null)"
    echo "gcc: $(gcc --version | head -1); cmake: $(cmake --version | head -1)"
    echo "python: $(${PYTHON:-python3} -c 'import sys, numpy, torch; print(sys.version.split()[0], "numpy", numpy.__version__, "torch", torch.__version__)' 2>&1)"
} | tee "$out/host.txt"
build() { # name src
    cmake -S "$2" -B "/tmp/b_$1" -DCMAKE_BUILD_TYPE=Release -DCMETAL_METAL=OFF \
        -DCMETAL_BUILD_TESTS=OFF -DCMETAL_DLPACK_INCLUDE_DIR="$inc" > "/tmp/cfg_$1.log" 2>&1 &&
        cmake --build "/tmp/b_$1" -j 8 --target cmetal-bench cmetal_shared > "/tmp/build_$1.log" 2>&1 ||
        { echo "build $1 failed"; tail -20 "/tmp/cfg_$1.log" "/tmp/build_$1.log"; }
}
build cur . &
[ -n "$base" ] && build base "$base" &
wait
t0=$(date +%s)
if [ -n "$base" ]; then
    /tmp/b_base/bin/cmetal-bench --mib "$mib" --reps "$reps" --threads 16 > "$out/bench_base.txt" 2>&1
    echo "base bench: $(( $(date +%s) - t0 )) s"
fi
/tmp/b_cur/bin/cmetal-bench --mib "$mib" --reps "$reps" --threads "${COUNTS:-1,2,4,8,16}" \
    > "$out/bench_cur.txt" 2>&1
echo "bench: $(( $(date +%s) - t0 )) s"
PYTHONUNBUFFERED=1 ${PYTHON:-python3} tools/bench/peers.py /tmp/b_cur --mib "$mib" --reps 3 \
    --threads "${PEER_THREADS:-1,16}" > "$out/peers.txt" 2>&1
echo "peers: $(( $(date +%s) - t0 )) s"
if [ -n "$base" ] && [ "${AGAIN:-0}" = 1 ]; then # a second round of both, for ranges
    /tmp/b_base/bin/cmetal-bench --mib "$mib" --reps "$reps" --threads 16 > "$out/bench_base2.txt" 2>&1
    /tmp/b_cur/bin/cmetal-bench --mib "$mib" --reps "$reps" --threads 1,16 > "$out/bench_cur2.txt" 2>&1
    echo "second round: $(( $(date +%s) - t0 )) s"
fi
