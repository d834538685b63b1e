#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Every Criterion suite of the release build under valgrind memcheck: any
# invalid access, uninitialised read or definite leak fails the run.
# Criterion runs each test in a child process, so children are traced and
# each process logs to its own file; -q leaves a log empty when clean.
# Suites run two at a time (one per core). The compiler and the linker
# softmetal starts are not traced (a linker named by its triple too,
# x86_64-linux-gnu-ld.bfd, as SOFTMETAL_TARGET makes clang choose).
# Criterion starts every test as a new process, so valgrind's start-up is
# a large part of this stage; not reading inlined frames' debug info cuts
# a softmetal test's start by about a fifth (a report then names the
# function an inlined one was inlined into).
set -euo pipefail
cd "$(dirname "$0")/../.."
list=build/ci/criterion-tests.txt
[ -f "$list" ] || { echo "stage-valgrind: $list missing; run the build first" >&2; exit 1; }
# GNU libobjc's own tables: see the valgrind.supp files beside their users.
supp=$(find tests tools -name valgrind.supp -printf ' --suppressions=%p')
export supp

check_suite() {
  local line=$1 binary name logs status=0
  binary=${line##* }
  name=$(basename "$binary")
  logs=build/ci/valgrind/$name
  rm -rf "$logs" && mkdir -p "$logs"
  local start=$SECONDS
  eval "${line% *} valgrind -q --read-inline-info=no --trace-children=yes \
        --trace-children-skip='*/clang*,*/c++*,*/ld*,*/*-ld,*/*-ld.*,*/as,*/sh,*/bash' \
        --log-file=$logs/%p.log --leak-check=full $supp \
        --errors-for-leak-kinds=definite,indirect --show-leak-kinds=definite,indirect \
        $binary --jobs 1" > "$logs/output.txt" 2>&1 || status=1
  # A test that checks an abort (Criterion's .signal = SIGABRT) ends with
  # its objects alive: its leaks are expected, its memory errors are not.
  local dirty="" aborted=0 f
  for f in $(find "$logs" -name '*.log' -size +0); do
    if grep -q 'Process terminating with default action of signal' "$f" &&
       ! grep -qE 'Invalid (read|write|free)|uninitialised|Conditional jump|Mismatched|overlap' "$f"; then
      aborted=$((aborted + 1))
    else
      dirty="$dirty $f"
    fi
  done
  local processes
  processes=$(find "$logs" -name '*.log' | wc -l)
  if [ -n "$dirty" ] || [ "$status" != 0 ]; then
    echo "valgrind: $name: FAILED"
    tail -n 5 "$logs/output.txt"
    for f in $(echo $dirty | tr ' ' '\n' | head -n 3); do head -n 40 "$f"; done
    return 1
  fi
  echo "valgrind: $name clean in $processes processes ($aborted intended aborts," \
       "$((SECONDS - start)) s): $(tail -n 1 "$logs/output.txt")"
}
export -f check_suite

# The suites: tools/ci/valgrind-suites.sh says which and why. They run
# only here in the release build (tools/ci/test.sh leaves them out of its
# ctest run): a failing test fails this stage as it would fail ctest.
# The op matrix runs a quarter of its cases here (CMETAL_TEST_SAMPLE, picked
# by a hash so every op, dtype, shape and layout still comes up): its
# instrumented kernels made it a quarter of this stage. Every other build runs
# them all. The longest suites start first, so that neither core waits
# alone at the end.
export CMETAL_TEST_SAMPLE=4
first='/test_ops_matrix_(metal|cpu_double_ref)$|/test_objc_(apple|gnu)$|/test_dlpack$'
suites=$(tools/ci/valgrind-suites.sh "$list")
{ grep -E "$first" <<<"$suites" || true; grep -vE "$first" <<<"$suites" || true; } |
  xargs -d '\n' -P 2 -I{} bash -c 'check_suite "$1"' _ {}
