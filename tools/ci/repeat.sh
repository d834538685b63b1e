#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Hunts flakes before they land: runs a command N times, two copies at once
# (-j COPIES for more), and reports how many runs failed, keeping the output
# of each failing run. Exits 1 if any run failed, 2 on bad usage.
#
#   tools/ci/repeat.sh [-j COPIES] N CMD [ARG...]
#
# Every run's stdout and stderr go to a log; a passing run's log is deleted,
# a failing run's is kept as run-I.log in REPEAT_LOG_DIR (default: a new
# directory under $TMPDIR), and its last lines are shown. CMD runs in the
# current directory with the current environment: give sanitizer options
# with env, e.g.
#   tools/ci/repeat.sh 50 env ASAN_OPTIONS=detect_leaks=1 build-asan/tests/metal/test_kernel
# Use it on every suite that starts threads (README.md: Tests).
set -uo pipefail

usage() {
  echo "usage: $0 [-j COPIES] N CMD [ARG...]" >&2
  exit 2
}

copies=2
if [ "${1:-}" = -j ]; then
  [ $# -ge 2 ] || usage
  copies=$2
  shift 2
fi
[ $# -ge 2 ] || usage
n=$1
shift
case "$n$copies" in
  *[!0-9]*) usage ;;
esac
if [ "$n" -lt 1 ] || [ "$copies" -lt 1 ]; then usage; fi

dir=${REPEAT_LOG_DIR:-}
if [ -z "$dir" ]; then
  dir=$(mktemp -d "${TMPDIR:-/tmp}/repeat.XXXXXX") || exit 2
else
  mkdir -p "$dir" || exit 2
fi
failed="$dir/failed"
: >"$failed"

# One run: its log is kept only when it fails. Lines of $failed are short
# appends, so concurrent runs do not mix them.
run() {
  local i=$1 rc
  shift
  "$@" >"$dir/run-$i.log" 2>&1 </dev/null
  rc=$?
  if [ "$rc" -eq 0 ]; then
    rm -f "$dir/run-$i.log"
  else
    echo "$i $rc" >>"$failed"
  fi
}

start=$(date +%s)
for ((i = 1; i <= n; i++)); do
  while [ "$(jobs -rp | wc -l)" -ge "$copies" ]; do
    wait -n
  done
  run "$i" "$@" &
done
wait

count=$(wc -l <"$failed")
secs=$(($(date +%s) - start))
echo "repeat: $n runs of '$*', $copies at once, in ${secs}s: $count failed"
if [ "$count" -eq 0 ]; then
  [ -n "${REPEAT_LOG_DIR:-}" ] || rm -rf "$dir"
  exit 0
fi
sort -n "$failed" | while read -r i rc; do
  echo "---- run $i: exit status $rc (output: $dir/run-$i.log), last lines:"
  tail -n 15 "$dir/run-$i.log"
done
exit 1
