#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# libFuzzer with ASan + UBSan over each fuzz target, from the seed corpus in
# tests/fuzz/corpus/.
#
# CI mode (the default) uses a fixed seed and a fixed number of executions
# per target. That is nearly, not wholly, reproducible: libFuzzer also
# mutates with values it saw in comparisons, pointers among them, and those
# move with ASLR. So a crash prints its input (base64) for replay.
# Exploration mode (CMETAL_FUZZ_SECONDS=N) runs each target for N seconds
# from a random seed, to look for new bugs before CI does.
# CMETAL_FUZZ_TARGETS="a b" limits either mode to those targets.
#
# A crash fails the stage; copy its input into tests/fuzz/regressions/<t>/
# so that every build replays it from then on, and fix the bug.
set -euo pipefail
cd "$(dirname "$0")/../.."
seed=${CMETAL_FUZZ_SEED:-20261122}
cov="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
CC=clang cmake -S . -B build/fuzz -DCMETAL_FUZZ=ON -DCMETAL_WERROR=ON -DCMETAL_BUILD_TOOLS=OFF \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_FLAGS="$cov" >/dev/null
targets=$(sed -n 's/^set(CMETAL_FUZZ_TARGETS \(.*\))$/\1/p' tests/fuzz/CMakeLists.txt)
[ -f tests/fuzz/fuzz_dlpack_import.c ] && targets="$targets dlpack_import"
targets=${CMETAL_FUZZ_TARGETS:-$targets} # e.g. CMETAL_FUZZ_TARGETS=ops_copy

# Executions per target in CI mode: about a minute each on a 2-core CI machine.
runs_for() {
  case $1 in
    tensor_view) echo 150000 ;; # ops on each last view: about 3000 a second
    ops_copy) echo 40000 ;;
    dlpack_import) echo 2000000 ;;
    *) echo 200000 ;;
  esac
}

# Each target runs on one core: two at a time, each printing its lines when
# it is done.
fuzz_target() {
  local t=$1 work start runs cov_line what f
  local -a budget
  work=build/fuzz/run-$t
  rm -rf "$work" && mkdir -p "$work/corpus" "$work/crashes"
  cp tests/fuzz/corpus/"$t"/* "$work/corpus/" 2>/dev/null || true
  if [ -n "${CMETAL_FUZZ_SECONDS:-}" ]; then
    budget=(-max_total_time="$CMETAL_FUZZ_SECONDS")
    what="${CMETAL_FUZZ_SECONDS}s from a random seed"
  else
    # The time cap only guards a CI machine far slower than ours.
    budget=(-seed="$seed" -runs="$(runs_for "$t")" -max_total_time=300)
    what="seed $seed"
  fi
  start=$(date +%s)
  if ASAN_OPTIONS=allocator_may_return_null=1:detect_leaks=1 \
     build/fuzz/tests/fuzz/fuzz_"$t" "$work/corpus" "${budget[@]}" -max_len=4096 \
       -artifact_prefix="$work/crashes/" -print_final_stats=1 > "$work/log.txt" 2>&1; then
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/log.txt")
    cov_line=$(grep -E '^#[0-9]+.*(DONE|cov:)' "$work/log.txt" | tail -n 1)
    echo "fuzz $t: $runs executions ($what) in $(( $(date +%s) - start ))s, no crash ($cov_line)"
  else
    echo "fuzz $t: CRASH ($what)"
    grep -v -E '^#[0-9]+ +(NEW|REDUCE|pulse)' "$work/log.txt" | tail -n 60
    for f in "$work"/crashes/*; do
      [ -f "$f" ] || continue
      echo "input $f (base64): $(base64 -w0 "$f")"
    done
    return 1
  fi
}

# shellcheck disable=SC2046 # one word per target
cmake --build build/fuzz -j2 --target $(printf 'fuzz_%s ' $targets) >/dev/null
export seed
export -f fuzz_target runs_for
status=0
# xargs fails when any target failed; each report is printed whole.
printf '%s\n' $targets |
  xargs -P 2 -I{} bash -c 'fuzz_target "$1" > "build/fuzz/report-$1.txt" 2>&1' _ {} || status=1
for t in $targets; do cat "build/fuzz/report-$t.txt"; done
exit $status
