#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The minimal build: -DCMETAL_METAL=OFF (no Objective-C bridge, no Metal
# backend; the library needs libc, libdl and pthread only). Builds with
# -Werror and runs every suite that applies, which also checks that each
# Metal entry point fails clearly.
set -euo pipefail
cd "$(dirname "$0")/../.."
cmake -S . -B build/no-metal -DCMETAL_METAL=OFF -DCMETAL_WERROR=ON >/dev/null
cmake --build build/no-metal -j"$(nproc 2>/dev/null || echo 2)" >/dev/null
(cd build/no-metal && ctest --output-on-failure -j"$(nproc 2>/dev/null || echo 2)" | tail -n 3)
if nm -D --defined-only build/no-metal/libcmetal.so | grep -q objc; then
  echo "stage-no-metal: libcmetal.so exports objc symbols" >&2; exit 1
fi
if nm -u build/no-metal/libcmetal.so | grep -qi objc; then
  echo "stage-no-metal: libcmetal.so refers to objc symbols" >&2; exit 1
fi
echo "stage-no-metal: the minimal build passes, with no Objective-C in it"
