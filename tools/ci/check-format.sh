#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Every C source and header in the repository is as clang-format-19 (the
# pinned formatter, tools/install-deps.sh --test) leaves it, under the
# .clang-format nearest to it. `tools/ci/check-format.sh --fix` formats them.
set -euo pipefail
cd "$(dirname "$0")/../.."
fmt=${CLANG_FORMAT:-clang-format-19}
command -v "$fmt" >/dev/null || {
  echo "check-format: $fmt is missing; run tools/install-deps.sh --test" >&2; exit 1; }
# msl/'s headers are Metal Shading Language sources, formatted by hand.
mapfile -t files < <(git ls-files '*.c' '*.h' ':!msl/')
if [ "${1:-}" = --fix ]; then
  "$fmt" -i "${files[@]}"
  exit 0
fi
bad=()
for f in "${files[@]}"; do
  "$fmt" "$f" | cmp -s - "$f" || bad+=("$f")
done
if [ ${#bad[@]} -gt 0 ]; then
  echo "check-format: ${#bad[@]} of ${#files[@]} files differ from $fmt's formatting:" >&2
  printf '  %s\n' "${bad[@]}" >&2
  echo "run tools/ci/check-format.sh --fix" >&2
  exit 1
fi
echo "check-format: ${#files[@]} files as $fmt formats them"
