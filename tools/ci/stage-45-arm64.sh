#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# aarch64 Linux under qemu-aarch64 (user mode): cmetal, its tests, the tools
# and softmetal cross-built with Debian's aarch64-linux-gnu GCC and -Werror
# (cmake/toolchain-aarch64-linux-gnu.cmake), then every suite that runs an
# aarch64 program goes through ctest, which starts each one through
# tools/ci/qemu/run.sh (killed after CMETAL_QEMU_TIMEOUT seconds). That is:
#   core, DLPack (both headers), CPU, the op matrix on the CPU with double
#   references (long double is double on a Mac), the bridge in GNU and in Apple dispatch (objc_msgSend from
#   tests/objc/msgsend_shim_aarch64.S: no _stret, struct results through
#   x8), softmetal's own suites, and the Metal suites, the op matrix and the
#   demo on softmetal, whose kernels the host's clang++ compiles for aarch64
#   (SOFTMETAL_TARGET, tools/ci/qemu/run.sh); the fuzz regression replays and the
#   stress programs.
# Left out (they run host programs on the build, not aarch64 code):
# install_consumer, cmetal_info_json (run here by hand instead), tool_arguments
# (it runs the tools as host programs; x86-64 checks their messages), readme_tour,
# readme_kernels, headers_compile_alone, dlpack_interop and bench_peers_smoke (x86-64 Python); and,
# for CI time, test_ops_matrix_cpu (long double references: binary128 on
# aarch64 Linux, double on a Mac, which the double-reference build runs) and
# the third-party kernel corpus (outside the repository; skipped without it). test_kernel's tests that
# fork skip themselves: qemu-user cannot fork a process that has threads.
# qemu runs aarch64 code on x86-64's memory ordering: it checks the calling
# convention, char signedness and long double, not weak-memory races.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
jobs=$(nproc 2>/dev/null || echo 2)
for tool in qemu-aarch64 aarch64-linux-gnu-gcc clang++-19; do
  command -v "$tool" >/dev/null || {
    echo "stage-45-arm64: $tool is missing (tools/install-deps.sh --test)" >&2; exit 1; }
done
[ -f .deps/arm64/sysroot/.packages ] || {
  echo "stage-45-arm64: no arm64 libraries in .deps/arm64 (tools/install-deps.sh --test)" >&2
  exit 1; }

start=$SECONDS
cmake -S . -B build/arm64 -DCMAKE_TOOLCHAIN_FILE="$root/cmake/toolchain-aarch64-linux-gnu.cmake" \
  -DCMETAL_WERROR=ON -DCMETAL_SOFTMETAL=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build/arm64 -j"$jobs" >/dev/null
file -L build/arm64/bin/cmetal-demo build/arm64/tools/softmetal/libsoftmetal.so |
  tee build/arm64/file.txt
if grep -v 'ARM aarch64' build/arm64/file.txt | grep -q .; then
  echo "stage-45-arm64: the build is not aarch64" >&2; exit 1
fi
echo "stage-45-arm64: built in $((SECONDS - start)) s"

export CMETAL_QEMU_TIMEOUT=400
# The op matrix runs half its cases here (CMETAL_TEST_SAMPLE, picked by a
# hash, so every op, dtype, shape and layout still comes up on aarch64): it
# was the stage's longest suite by far. x86-64's builds run every case.
export CMETAL_TEST_SAMPLE=2
rm -rf build/arm64/softmetal-cache build/arm64/tests/softmetal/kernel-cache
(cd build/arm64 && ctest --output-on-failure -j"$jobs" --timeout 450 \
   -E '^(install_consumer|cmetal_info_json|tool_arguments|readme_tour|readme_kernels|headers_compile_alone|dlpack_interop|bench_peers_smoke|test_ops_matrix_cpu|test_softmetal_corpus|test_softmetal_corpus_slow)$')

# cmetal-info on softmetal, as aarch64: reports the Metal device, as JSON.
CMETAL_METAL_FRAMEWORK=$root/build/arm64/tools/softmetal/libsoftmetal.so \
SOFTMETAL_CACHE_DIR=$root/build/arm64/softmetal-cache \
  tools/ci/qemu/run.sh build/arm64/bin/cmetal-info --json > build/arm64/info.json
python3 -c '
import json, sys
devices = json.load(open(sys.argv[1]))["devices"]
metal = [d for d in devices if d["type"] == "metal" and d["present"]]
assert metal, "cmetal-info --json: no Metal device"
assert metal[0]["max_threads_per_threadgroup"] == [1024, 1024, 1024], metal[0]
' build/arm64/info.json
echo "stage-45-arm64: every aarch64 suite passed under qemu-aarch64 in $((SECONDS - start)) s"
