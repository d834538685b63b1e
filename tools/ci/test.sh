#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The whole test suite, as README.md's test command runs it:
#   0. every C file as clang-format-19 formats it (tools/ci/check-format.sh)
#   1. release build with -Werror; through ctest, every test that the
#      valgrind stage does not run on these binaries
#   2. every suite built with ASan + UBSan (not the checks of the source tree)
#   3. further stages (tools/ci/stage-*.sh, in name order): valgrind, the
#      minimal build (-DCMETAL_METAL=OFF), the firmware builds (amalgamation,
#      options, sizes),
#      fuzzing, TSan stress, macOS cross-builds, interop, ...
# Any failure stops the run with a non-zero exit.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
jobs=$(nproc 2>/dev/null || echo 2)

pkg-config --exists criterion || {
  echo "test.sh: Criterion is missing; run tools/install-deps.sh --test first" >&2; exit 1; }

passed=0
step_start=$SECONDS
# Each step's heading, after the time the one before took (CI's budget).
step() {
  [ "$passed" -eq 0 ] || printf '(took %d s)\n' $((SECONDS - step_start))
  step_start=$SECONDS
  step_name=$*
  printf '\n==== %s\n' "$*"
  passed=$((passed + 1))
}
# Runs a step's command under tools/ci/guard.sh: past LIMIT seconds (several
# times what it takes on a 2-core machine) it fails with every process's
# stacks printed, instead of hanging CI.
guarded() {
  local limit=$1
  shift
  "$root/tools/ci/guard.sh" "$limit" "$step_name" "$@"
}

step "format (clang-format-19)"
guarded 300 tools/ci/check-format.sh

step "build (RelWithDebInfo, -Werror)"
# Both builds share softmetal's kernel cache: the kernels compiled for the
# first serve the second.
kernels="-DCMETAL_TEST_KERNEL_CACHE=$root/build/kernel-cache"
cmake -S . -B build/ci -DCMETAL_WERROR=ON -DCMETAL_SOFTMETAL=ON "$kernels" >/dev/null
guarded 1200 cmake --build build/ci -j"$jobs"
step "tests"
# The Criterion suites that stage-10-valgrind runs on this build's binaries
# run there only (the same assertions; a failure fails that stage); every
# other test runs here. The ASan build below runs them all.
under_valgrind=$(tools/ci/valgrind-suites.sh | sed 's#.*/##' | paste -sd'|')
(cd build/ci && guarded 900 ctest --output-on-failure -j"$jobs" -LE slow -E "^($under_valgrind)\$")

step "build (ASan + UBSan, -Werror)"
cmake -S . -B build/asan -DCMETAL_WERROR=ON -DCMETAL_SOFTMETAL=ON -DCMETAL_SANITIZE=ON \
  -DCMAKE_BUILD_TYPE=Debug "$kernels" >/dev/null
guarded 1200 cmake --build build/asan -j"$jobs"
step "tests under ASan + UBSan"
# Checks of the source tree and the build system (label `source`: SPDX
# lines, the layers, headers alone, configure without dlpack) ran above;
# they do not depend on the sanitizers.
(cd build/asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:allocator_may_return_null=1 \
   LSAN_OPTIONS=suppressions="$root/tests/lsan.supp" \
   UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
   guarded 1500 ctest --output-on-failure -j"$jobs" -LE 'slow|source')

for stage in tools/ci/stage-*.sh; do
  [ -e "$stage" ] || continue
  step "$(basename "$stage" .sh)"
  case $stage in
    *valgrind*) limit=2400 ;; # about 600 s
    *arm64*) limit=1500 ;;    # about 300 s under qemu
    *) limit=900 ;;           # each under 100 s
  esac
  guarded "$limit" bash "$stage"
done
printf '(took %d s)\n' $((SECONDS - step_start))
printf '\n==== all checks passed in %d s\nchecks: %d passed, 0 failed\n' "$SECONDS" "$passed"
