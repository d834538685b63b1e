#!/usr/bin/env bash
# Every Criterion suite of the release build under valgrind memcheck: any
# invalid access, uninitialised read or definite leak fails the run.
# Criterion runs each test in a child process, so children are traced and
# each process logs to its own file; -q leaves a log empty when clean.
set -euo pipefail
cd "$(dirname "$0")/../.."
list=build/ci/criterion-tests.txt
[ -f "$list" ] || { echo "stage-valgrind: $list missing; run the build first" >&2; exit 1; }
# GNU libobjc's own tables: see the valgrind.supp files beside their users.
supp=$(find tests tools -name valgrind.supp -printf ' --suppressions=%p')
status=0
while read -r line; do
  [ -n "$line" ] || continue
  binary=${line##* }
  name=$(basename "$binary")
  logs=build/ci/valgrind/$name
  rm -rf "$logs" && mkdir -p "$logs"
  eval "${line% *} valgrind -q --trace-children=yes \
        --trace-children-skip='*/clang*,*/c++*,*/ld*,*/as,*/sh,*/bash' \
        --log-file=$logs/%p.log --leak-check=full $supp \
        --errors-for-leak-kinds=definite,indirect --show-leak-kinds=definite,indirect \
        $binary --jobs 1" > "$logs/output.txt" 2>&1 || status=1
  # A test that checks an abort (Criterion's .signal = SIGABRT) ends with
  # its objects alive: its leaks are expected, its memory errors are not.
  dirty=""
  aborted=0
  for f in $(find "$logs" -name '*.log' -size +0); do
    if grep -q 'Process terminating with default action of signal' "$f" &&
       ! grep -qE 'Invalid (read|write|free)|uninitialised|Conditional jump|Mismatched|overlap' "$f"; then
      aborted=$((aborted + 1))
    else
      dirty="$dirty $f"
    fi
  done
  processes=$(find "$logs" -name '*.log' | wc -l)
  if [ -n "$dirty" ]; then
    echo "valgrind: $name: errors reported"
    for f in $(echo $dirty | tr ' ' '\n' | head -n 3); do head -n 40 "$f"; done
    status=1
  else
    echo "valgrind: $name clean in $processes processes ($aborted intended aborts):" \
         "$(tail -n 1 "$logs/output.txt")"
  fi
done < "$list"
exit $status
