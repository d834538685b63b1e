#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# For whoever has a Mac with Apple silicon (or any Mac with Metal), and for
# the macOS workflow (.github/workflows/macos.yml): builds cmetal natively,
# runs the whole test suite against Apple's own Metal framework (no
# softmetal) twice, first as is, then with Metal's API and shader
# validation on (MTL_DEBUG_LAYER=1, MTL_SHADER_VALIDATION=1), and writes
# cmetal-mac-report.txt to send back. The report ends with one line per
# run saying whether it passed; the exit status is non-zero when the build
# or either run failed.
#
#   brew install cmake criterion pkg-config dlpack     # once
#   tools/mac/check-on-mac.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
report=$PWD/cmetal-mac-report.txt
unset CMETAL_METAL_FRAMEWORK CMETAL_DEVICE MTL_DEBUG_LAYER MTL_SHADER_VALIDATION
jobs=$(sysctl -n hw.ncpu 2>/dev/null || echo 4)

# One run of the suite; prints its ctest output and sets run_status.
run_suite() {
  (cd build/mac && ctest --output-on-failure -j"$jobs")
  run_status=$?
}

build_status=1 plain_status=1 validated_status=1
mkdir -p build
{
  echo "# cmetal on Apple Metal, $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD 2>/dev/null)"
  sw_vers 2>/dev/null; uname -mv
  system_profiler SPDisplaysDataType 2>/dev/null | grep -E 'Chipset Model|Metal' || true
  for tool in cmake pkg-config; do command -v "$tool" >/dev/null || echo "missing: $tool (brew install $tool)"; done
  pkg-config --exists criterion || echo "missing: criterion (brew install criterion)"
  [ -e "$(brew --prefix 2>/dev/null)/include/dlpack/dlpack.h" ] || [ -e /usr/local/include/dlpack/dlpack.h ] ||
    echo "missing: dlpack/dlpack.h (brew install dlpack)"
  # Run the compiler, not `xcrun -f metal`: on Xcode 26 that finds a stub
  # even without the separately downloaded Metal toolchain.
  if xcrun -sdk macosx metal -v >/dev/null 2>&1; then echo "metal compiler: runs"; else
    echo "missing: the Metal toolchain (xcodebuild -downloadComponent MetalToolchain on Xcode 26):" \
         "the precompiled-metallib tests skip"; fi
  echo; echo "## build"
  cmake -S . -B build/mac -DCMETAL_WERROR=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo &&
    cmake --build build/mac -j"$jobs"
  build_status=$?
  echo "build exit: $build_status"
  echo; echo "## device"
  # A hosted runner's paravirtual GPU reports few families: say which.
  build/mac/bin/cmetal-info | awk '/^metal device/ {on = 1} on && /name:|GPU families:|unified memory:|not available/'
  echo; echo "## cmetal-info"; build/mac/bin/cmetal-info
  echo; echo "## demo on Metal"; CMETAL_DEVICE=metal build/mac/bin/cmetal-demo
  echo; echo "## run 1: tests"
  run_suite
  plain_status=$run_status
  echo "run 1 (plain) ctest exit: $plain_status"
  echo; echo "## run 2: tests with MTL_DEBUG_LAYER=1 MTL_SHADER_VALIDATION=1"
  export MTL_DEBUG_LAYER=1 MTL_SHADER_VALIDATION=1
  run_suite
  validated_status=$run_status
  unset MTL_DEBUG_LAYER MTL_SHADER_VALIDATION
  echo "run 2 (validation) ctest exit: $validated_status"
  echo; echo "## summary"
  verdict() { [ "$1" = 0 ] && echo passed || echo "FAILED (exit $1)"; }
  echo "build: $(verdict "$build_status")"
  echo "run 1, plain: $(verdict "$plain_status")"
  echo "run 2, MTL_DEBUG_LAYER=1 MTL_SHADER_VALIDATION=1: $(verdict "$validated_status")"
  # For a caller (the workflow) that only sees the exit status.
  [ "$build_status" = 0 ] && [ "$plain_status" = 0 ] && [ "$validated_status" = 0 ]
  echo "$?" > build/mac-check-status 2>/dev/null || true
} 2>&1 | tee "$report"
echo; echo "Report written to $report: please send it back."
status=$(cat build/mac-check-status 2>/dev/null || echo 1)
rm -f build/mac-check-status
exit "$status"
