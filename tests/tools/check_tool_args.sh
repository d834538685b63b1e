#!/bin/sh
# SPDX-License-Identifier: MIT
# Every tool names a bad argument and its value, exits 2 and prints its usage;
# and cmetal-info's CPU buffer limit reads as one.
# Usage: check_tool_args.sh <bin-dir>
set -u
bin=$1
fails=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# expect TOOL "MESSAGE" ARGS...: exit status 2, MESSAGE in stderr.
expect() {
  tool=$1 want=$2
  shift 2
  [ -x "$bin/$tool" ] || { echo "skip: no $bin/$tool"; return; }
  "$bin/$tool" "$@" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  if [ "$rc" != 2 ] || ! grep -qF -- "$want" "$tmp/err"; then
    echo "FAIL: $tool $*: exit $rc, stderr:" >&2
    cat "$tmp/err" >&2
    echo "  wanted exit 2 and: $want" >&2
    fails=$((fails + 1))
  else
    echo "ok: $tool $* -> $want"
  fi
}

expect cmetal-bench "cmetal-bench: --device 'bogus': expected cpu or metal" --device bogus
expect cmetal-bench "cmetal-bench: --mib 'x12': expected a whole number from 1 to" --mib x12
expect cmetal-bench "cmetal-bench: --reps '0': expected a whole number" --reps 0
expect cmetal-bench "cmetal-bench: --reps needs a value" --reps
expect cmetal-bench "cmetal-bench: unknown argument '--fast'" --fast
expect cmetal-info "cmetal-info: unknown argument '--jsn'" --jsn
expect cmetal-demo "cmetal-demo: unexpected argument 'metal'" metal
expect cmetal-dlpack-bench "cmetal-dlpack-bench: MAX_BYTES 'lots': expected a whole number >= 1" lots
expect cmetal-dlpack-bench "cmetal-dlpack-bench: --calls '-3': expected a whole number >= 1" --calls -3
expect cmetal-dlpack-bench "cmetal-dlpack-bench: --calls needs a value" --calls
expect cmetal-dlpack-bench "cmetal-dlpack-bench: unknown argument '--bytes'" --bytes
expect cmetal-dlpack-bench "cmetal-dlpack-bench: unexpected argument 'more'" 1024 more
expect cmetal-dlpack-bench "cmetal-dlpack-bench: MAX_BYTES 'lots': expected a whole number >= 1" --clock lots
expect cmetal-dlpack-bench "cmetal-dlpack-bench: unknown argument '--clock'" --clock --clock
expect cmetal-dlpack-bench "usage: cmetal-dlpack-bench [--clock] [MAX_BYTES]" --bytes
expect softmetal-metallib "softmetal-metallib: --math 'quick': expected safe, relaxed or fast" --math quick -o x in.metal
expect softmetal-metallib "softmetal-metallib: --std '3': expected MAJOR.MINOR" --std 3 -o x in.metal
expect softmetal-metallib "softmetal-metallib: --std '3.1x': expected MAJOR.MINOR" --std 3.1x -o x in.metal
expect softmetal-metallib "softmetal-metallib: -o needs a value" in.metal -o
expect softmetal-metallib "softmetal-metallib: unknown argument '--out'" --out x in.metal
expect softmetal-metallib "softmetal-metallib: no -o OUT given" in.metal
# cmetal-info gives the CPU's buffer limit as what it is, not PTRDIFF_MAX.
if [ -x "$bin/cmetal-info" ]; then
  if "$bin/cmetal-info" | grep -A20 '^cpu device:' | grep -q 'max buffer length: *no limit of its own (host memory: [0-9]* bytes)'; then
    echo "ok: cmetal-info: the CPU has no buffer limit of its own"
  else
    echo "FAIL: cmetal-info's CPU max buffer length:" >&2
    "$bin/cmetal-info" | grep 'max buffer' >&2
    fails=$((fails + 1))
  fi
fi
[ "$fails" = 0 ] || { echo "$fails tool message(s) wrong" >&2; exit 1; }
echo "every tool names its bad argument"
