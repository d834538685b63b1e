#!/usr/bin/env bash
# libFuzzer with ASan + UBSan over each fuzz target, for CMETAL_FUZZ_SECONDS
# (default 60) each, starting from the seed corpus in tests/fuzz/corpus/.
# A crash fails the stage; copy its input into tests/fuzz/regressions/<t>/
# so that every build replays it from then on.
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds=${CMETAL_FUZZ_SECONDS:-60}
cov="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
CC=clang cmake -S . -B build/fuzz -DCMETAL_FUZZ=ON -DCMETAL_WERROR=ON -DCMETAL_BUILD_TOOLS=OFF \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_FLAGS="$cov" >/dev/null
targets=$(sed -n 's/^set(CMETAL_FUZZ_TARGETS \(.*\))$/\1/p' tests/fuzz/CMakeLists.txt)
[ -f tests/fuzz/fuzz_dlpack_import.c ] && targets="$targets dlpack_import"
status=0
for t in $targets; do
  cmake --build build/fuzz -j2 --target "fuzz_$t" >/dev/null
  work=build/fuzz/run-$t
  rm -rf "$work" && mkdir -p "$work/corpus" "$work/crashes"
  cp tests/fuzz/corpus/"$t"/* "$work/corpus/" 2>/dev/null || true
  if ASAN_OPTIONS=allocator_may_return_null=1:detect_leaks=1 \
     build/fuzz/tests/fuzz/fuzz_"$t" "$work/corpus" -max_total_time="$seconds" -max_len=4096 \
       -artifact_prefix="$work/crashes/" -print_final_stats=1 > "$work/log.txt" 2>&1; then
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/log.txt")
    cov_line=$(grep -E '^#[0-9]+.*(DONE|cov:)' "$work/log.txt" | tail -n 1)
    echo "fuzz $t: $runs executions in ${seconds}s, no crash ($cov_line)"
  else
    echo "fuzz $t: CRASH"; tail -n 60 "$work/log.txt"; ls -l "$work/crashes"; status=1
  fi
done
exit $status
