#!/bin/bash
# SPDX-License-Identifier: MIT
# Builds trees side by side on a bare Linux x86-64 host (cmake and gcc, no
# test dependencies: Metal and tests off) and runs their benchmarks
# alternately, so that every figure compared comes from one session of one
# host. Used for the GPU machine's Xeon host (tools/bench/README.md).
#
#   tools/bench/xeon_compare.sh DLPACK_INC ROUNDS NAME=SRC[:CFLAGS] ...
#
# DLPACK_INC holds dlpack/dlpack.h; each NAME is built from the tree SRC
# with extra C flags CFLAGS (e.g. base=.xeon/base cur=. s8=.:-DCM__STREAMS=8);
# ROUNDS rounds of `cmetal-bench --mib 256 --reps 4` and cmetal-dlpack-bench,
# the trees in turn. The log goes to $OUT/compare.log (or /tmp/xeon-out)
# and xeon_summary.py prints the ratios last; ROOFLINE=1 also
# runs tools/bench/read_roofline.c first. BENCH_ARGS and DLPACK_ARGS replace
# the benchmarks' arguments; PIN prefixes dlpack-bench (e.g. 'taskset -c 3').
set -u
inc=$(cd "$1" && pwd)
rounds=$2
shift 2
out=${OUT:-/tmp/xeon-out}
mkdir -p "$out"
echo "host: $(grep -m1 'model name' /proc/cpuinfo) x $(nproc)"
echo "thp: $(cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null)"
echo "gcc: $(gcc --version | head -1); cmake: $(cmake --version | head -1)"
if [ "${ROOFLINE:-0}" = 1 ]; then
    gcc -O2 -std=c11 -mavx2 -o /tmp/read-roofline tools/bench/read_roofline.c &&
        /tmp/read-roofline 256 3 > "$out/roofline.txt" 2>&1
fi
names=()
for spec in "$@"; do
    name=${spec%%=*}
    rest=${spec#*=}
    src=${rest%%:*}
    flags=""
    [ "$rest" != "$src" ] && flags=${rest#*:}
    names+=("$name")
    (cmake -S "$src" -B "/tmp/b_$name" -DCMAKE_BUILD_TYPE=Release -DCMETAL_METAL=OFF \
        -DCMETAL_BUILD_TESTS=OFF -DCMETAL_DLPACK_INCLUDE_DIR="$inc" \
        -DCMAKE_C_FLAGS="$flags" > "/tmp/cfg_$name.log" 2>&1 &&
        cmake --build "/tmp/b_$name" -j 4 --target cmetal-bench cmetal-dlpack-bench \
            > "/tmp/build_$name.log" 2>&1 || { echo "build $name failed"; tail -20 "/tmp/build_$name.log"; }) &
done
wait
log=$out/compare.log
for r in $(seq 1 "$rounds"); do
    for name in "${names[@]}"; do
        { echo "=== bench $name $r"; "/tmp/b_$name/bin/cmetal-bench" --json ${BENCH_ARGS:---mib 256 --reps 4} 2>&1
          echo "=== end"; } >> "$log"
        { echo "=== dlpack $name $r"; ${PIN:-} "/tmp/b_$name/bin/cmetal-dlpack-bench" ${DLPACK_ARGS:-} 2>&1
          echo "=== end"; } >> "$log"
    done
done
[ -f "$out/roofline.txt" ] && cat "$out/roofline.txt"
python3 "$(dirname "$0")/xeon_summary.py" "$log"
