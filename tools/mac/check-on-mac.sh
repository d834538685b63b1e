#!/usr/bin/env bash
# For whoever has a Mac with Apple silicon (or any Mac with Metal): builds
# cmetal natively, runs the whole test suite against Apple's own Metal
# framework (no softmetal), and writes cmetal-mac-report.txt to send back.
#
#   brew install cmake criterion pkg-config     # once
#   tools/mac/check-on-mac.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
report=$PWD/cmetal-mac-report.txt
unset CMETAL_METAL_FRAMEWORK CMETAL_DEVICE
{
  echo "# cmetal on Apple Metal, $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD 2>/dev/null)"
  sw_vers 2>/dev/null; uname -mv
  system_profiler SPDisplaysDataType 2>/dev/null | grep -E 'Chipset Model|Metal' || true
  for tool in cmake pkg-config; do command -v "$tool" >/dev/null || echo "missing: $tool (brew install $tool)"; done
  pkg-config --exists criterion || echo "missing: criterion (brew install criterion)"
  echo; echo "## build"
  cmake -S . -B build/mac -DCMETAL_WERROR=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo &&
    cmake --build build/mac -j"$(sysctl -n hw.ncpu 2>/dev/null || echo 4)"
  echo "build exit: $?"
  echo; echo "## cmetal-info"; build/mac/bin/cmetal-info
  echo; echo "## demo on Metal"; CMETAL_DEVICE=metal build/mac/bin/cmetal-demo
  echo; echo "## tests"; (cd build/mac && ctest --output-on-failure)
  echo "ctest exit: $?"
} 2>&1 | tee "$report"
echo; echo "Report written to $report: please send it back."
