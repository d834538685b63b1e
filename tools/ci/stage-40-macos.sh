#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Cross-builds the library (everything under runtime/) and the tools
# for aarch64-macos and x86_64-macos with Zig, warnings as errors, through
# CMake and cmake/zig-macos.cmake. No macOS SDK: Metal and libobjc are
# reached through dlopen and our own declarations.
set -euo pipefail
cd "$(dirname "$0")/../.."
zig="${CMETAL_ZIG:-$PWD/.deps/zig/zig}"
if [ ! -x "$zig" ]; then
  echo "stage-40-macos: no zig at $zig (tools/install-deps.sh --test installs it)" >&2
  exit 1
fi
zig="$(cd "$(dirname "$zig")" && pwd)/$(basename "$zig")"

for target in aarch64-macos x86_64-macos; do
  case "$target" in
    aarch64-*) arch=arm64 ;;
    x86_64-*) arch=x86_64 ;;
  esac
  dir="build/$target"
  echo "-- $target"
  cmake -S . -B "$dir" -Wno-dev \
    -DCMAKE_TOOLCHAIN_FILE="$PWD/cmake/zig-macos.cmake" \
    -DCMETAL_ZIG="$zig" -DCMETAL_ZIG_TARGET="$target" \
    -DCMETAL_WERROR=ON -DCMETAL_BUILD_TESTS=OFF -DCMETAL_BUILD_TOOLS=ON \
    -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$dir" -j2

  dylib="$(readlink -f "$dir/libcmetal.dylib")"
  file "$dylib" | tee "$dir/file.txt"
  grep -q "Mach-O 64-bit.* $arch dynamically linked shared library" "$dir/file.txt" || {
    echo "stage-40-macos: $dylib is not an $arch Mach-O dylib" >&2; exit 1; }

  # The archive's members are Mach-O objects of the target.
  members="$dir/archive-members"
  rm -rf "$members" && mkdir -p "$members"
  (cd "$members" && "$zig" ar x ../libcmetal.a)
  file "$dir/libcmetal.a" "$members"/*.o | tee "$dir/file-archive.txt"
  if grep "\.o:" "$dir/file-archive.txt" | grep -vq "Mach-O 64-bit $arch object"; then
    echo "stage-40-macos: libcmetal.a holds a member that is not an $arch Mach-O object" >&2
    exit 1
  fi
  # The tools link as executables of the target.
  for tool in cmetal-demo cmetal-info cmetal-bench cmetal-dlpack-bench; do
    file "$dir/bin/$tool" | tee -a "$dir/file.txt" | grep -q "Mach-O 64-bit.*$arch" || {
      echo "stage-40-macos: $tool is not an $arch Mach-O executable" >&2; exit 1; }
  done

  # The install check (tests/install/check_install.sh, install_consumer on a
  # Mac) on the Mac layout: the dylib's @rpath install name, consumers built
  # through pkg-config and linked by rpath, inspected; nothing runs.
  CC="$PWD/$dir/zig-$target/cc -isystem $PWD/$dir/zig-$target/host-include" \
    sh tests/install/check_install.sh "$dir" tests/install --no-run
done
echo "stage-40-macos: aarch64-macos and x86_64-macos built (library and tools)"
