#!/bin/sh
# SPDX-License-Identifier: MIT
# Every source file of the repository carries the project's SPDX line in its
# first three lines (LICENSE: MIT). Run from anywhere: check_spdx.sh SRC_DIR.
set -eu
cd "$1"
if ! git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  echo "check_spdx: not a git checkout; nothing to check"
  exit 0
fi
missing=$(git ls-files -- '*.c' '*.h' '*.m' '*.S' '*.metal' '*.sh' '*.py' '*.cmake' '*.in' \
            'CMakeLists.txt' '*.yml' '*.supp' 'tools/softmetal/metal_stdlib' '.ci/run' |
          while read -r f; do
            [ -f "$f" ] || continue
            head -n 3 "$f" | grep -q 'SPDX-License-Identifier: MIT' || echo "$f"
          done)
if [ -n "$missing" ]; then
  echo "check_spdx: these files lack 'SPDX-License-Identifier: MIT' in their first lines:"
  echo "$missing"
  exit 1
fi
echo "check_spdx: every source file carries the SPDX line"
