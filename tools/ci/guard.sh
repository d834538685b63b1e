#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# guard.sh SECONDS NAME COMMAND...: runs COMMAND in a session of its own and
# fails it when it runs past SECONDS. A step that hangs (a deadlock in a
# test, a child that never exits) then costs CI its limit, not the whole
# run, and says where it hung: before the session is killed, every process
# in it is listed with its threads' stacks (gdb, else eu-stack, else the
# kernel's view in /proc). Exit status: COMMAND's, or 124 past the limit.
set -uo pipefail
[ $# -ge 3 ] || { echo "usage: guard.sh SECONDS NAME COMMAND..." >&2; exit 2; }
limit=$1 name=$2
shift 2
case $limit in '' | *[!0-9]*) echo "guard.sh: SECONDS = '$limit' is not a whole number" >&2; exit 2 ;; esac

# setsid from a background job execs in place: $! is COMMAND, the leader
# of a new session that its children (ctest, the tests, valgrind) join.
setsid "$@" &
pid=$!

# The processes of COMMAND's session, from /proc (a fresh Debian machine may
# have no ps): the session is the fourth field after the command's ")".
session_pids() {
  local f rest
  for f in /proc/[0-9]*/stat; do
    rest=$(cat "$f" 2>/dev/null) || continue
    rest=${rest##*) }
    set -- $rest
    [ "${4:-}" = "$pid" ] && { f=${f#/proc/}; echo "${f%/stat}"; }
  done
}

stacks_of() {
  local p=$1
  if command -v gdb >/dev/null 2>&1; then
    timeout -s KILL 60 gdb -p "$p" -batch -nx -ex 'set pagination off' \
      -ex 'thread apply all bt 30' 2>&1 | grep -E '^(Thread|#)' | head -n 400
  elif command -v eu-stack >/dev/null 2>&1; then
    timeout -s KILL 60 eu-stack -p "$p" 2>&1 | head -n 400
  else
    local t
    for t in /proc/"$p"/task/*; do
      echo "thread ${t##*/} $(cat "$t/comm" 2>/dev/null) wchan=$(cat "$t/wchan" 2>/dev/null)"
      cat "$t/stack" 2>/dev/null | head -n 20
    done
  fi
}

report() {
  echo "guard: $name ran past its limit of $limit s; its processes and their stacks:" >&2
  local p
  for p in $(session_pids); do
    echo "  $p: $(tr '\0' ' ' < /proc/"$p"/cmdline 2>/dev/null | cut -c1-200)" >&2
  done
  for p in $(session_pids); do
    echo "---- stacks of $p: $(tr '\0' ' ' < /proc/"$p"/cmdline 2>/dev/null | cut -c1-200)" >&2
    stacks_of "$p" >&2
  done
}

# The watcher: this shell waits for COMMAND (and so reaps it at once);
# the watcher polls it and, past the limit, reports and kills the session.
marker=$(mktemp)
(
  start=$SECONDS
  while kill -0 "$pid" 2>/dev/null; do
    if [ $((SECONDS - start)) -ge "$limit" ]; then
      report
      echo timeout > "$marker"
      for p in $(session_pids); do kill -KILL "$p" 2>/dev/null; done
      exit 0
    fi
    sleep 1
  done
) &
watcher=$!
wait "$pid"
rc=$?
kill "$watcher" 2>/dev/null
wait "$watcher" 2>/dev/null
if [ -s "$marker" ]; then
  rm -f "$marker"
  echo "guard: $name FAILED: killed after $limit s" >&2
  exit 124
fi
rm -f "$marker"
exit "$rc"
