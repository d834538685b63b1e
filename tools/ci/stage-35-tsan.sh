#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The concurrency stress programs (tests/stress/stress_*) built with ThreadSanitizer:
# any data race fails the run.
set -euo pipefail
cd "$(dirname "$0")/../.."
CC=clang cmake -S . -B build/tsan -DCMETAL_WERROR=ON -DCMETAL_BUILD_TOOLS=ON -DCMETAL_SOFTMETAL=ON \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_FLAGS="-fsanitize=thread -fno-omit-frame-pointer" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=thread" -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=thread" >/dev/null
targets=$(sed -n 's/^foreach(t \(.*\))$/\1/p' tests/stress/CMakeLists.txt)
cmake --build build/tsan -j2 --target softmetal >/dev/null
for t in $targets; do
  cmake --build build/tsan -j2 --target "$t" >/dev/null
  bin=$(find build/tsan/tests -name "$t" -type f -perm -u+x | head -n 1)
  CMETAL_METAL_FRAMEWORK=$PWD/build/tsan/tools/softmetal/libsoftmetal.so \
  SOFTMETAL_CACHE_DIR=$PWD/build/tsan/softmetal-cache TSAN_OPTIONS="halt_on_error=1 exitcode=66 suppressions=$PWD/tests/tsan.supp" "$bin"
  echo "tsan: $t clean"
done
