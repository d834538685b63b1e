#!/bin/sh
# SPDX-License-Identifier: MIT
# The README's examples are real programs: extract its Nth ```c block (the
# first by default: the tour), build it against the library and run it.
# Usage: check_readme.sh <README.md> <include-dir> <libcmetal.a> [N]
set -eu
readme=$1 inc=$2 lib=$3 n=${4:-1}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
awk -v want="$n" '/^```c$/ {k++; on = (k == want); next} /^```$/ && on {exit} on {print}' \
  "$readme" > "$tmp/tour.c"
[ -s "$tmp/tour.c" ] || { echo "no \`\`\`c block number $n in $readme" >&2; exit 1; }
${CC:-cc} -std=c11 -Wall -Wextra -Werror -I"$inc" -o "$tmp/tour" "$tmp/tour.c" "$lib" -lm -ldl -lpthread
"$tmp/tour"
echo "README example $n: builds and runs"
