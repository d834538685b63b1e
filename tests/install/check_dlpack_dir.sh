#!/bin/sh
# SPDX-License-Identifier: MIT
# A dlpack/dlpack.h that the compiler does not find by itself (Homebrew's
# /opt/homebrew/include on a Mac) reaches consumers of the installed
# package: cmetal.pc's Cflags and the exported CMake targets carry its
# folder. Configures only, with a copy of the header in a folder of its own.
#
# Usage: check_dlpack_dir.sh <source-dir> <dlpack.h>
set -eu
src=$1
header=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/inc/dlpack"
cp "$header" "$tmp/inc/dlpack/dlpack.h"
inc=$(cd "$tmp/inc" && pwd -P)
cmake -S "$src" -B "$tmp/b" -DCMETAL_DLPACK_INCLUDE_DIR="$inc" -DCMETAL_METAL=OFF \
  -DCMETAL_BUILD_TESTS=OFF -DCMETAL_BUILD_TOOLS=OFF >/dev/null
grep -q "^Cflags: .* -I$inc\$" "$tmp/b/cmetal.pc" || {
  echo "cmetal.pc lacks -I$inc:" >&2; cat "$tmp/b/cmetal.pc" >&2; exit 1; }
echo "cmetal.pc: $(grep '^Cflags:' "$tmp/b/cmetal.pc")"
targets=$(find "$tmp/b/CMakeFiles/Export" -name cmetalTargets.cmake | head -n 1)
[ -n "$targets" ] || { echo "no exported cmetalTargets.cmake" >&2; exit 1; }
n=$(grep -c "INTERFACE_INCLUDE_DIRECTORIES.*$inc" "$targets" || true)
[ "$n" -ge 2 ] || {
  echo "the exported targets do not both carry $inc:" >&2; grep -n INCLUDE "$targets" >&2; exit 1; }
echo "exported targets: both carry $inc"
