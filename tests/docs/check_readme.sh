#!/bin/sh
# The README's tour is a real program: extract its first ```c block, build it
# against the library and run it. Usage: check_readme.sh <README.md> <include-dir> <libcmetal.a>
set -eu
readme=$1 inc=$2 lib=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
awk '/^```c$/ {on = 1; next} /^```$/ && on {exit} on {print}' "$readme" > "$tmp/tour.c"
[ -s "$tmp/tour.c" ] || { echo "no \`\`\`c block in $readme" >&2; exit 1; }
${CC:-cc} -std=c11 -Wall -Wextra -Werror -I"$inc" -o "$tmp/tour" "$tmp/tour.c" "$lib" -lm -ldl -lpthread
"$tmp/tour"
echo "README tour: builds and runs"
