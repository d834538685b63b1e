#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Cross-builds the library (everything under runtime/) and the tools
# for aarch64-macos and x86_64-macos with Zig, warnings as errors, through
# CMake and cmake/zig-macos.cmake, and compiles (without linking) every test
# program and helper that CMake builds on APPLE. No macOS SDK: Metal and
# libobjc are reached through dlopen and our own declarations.
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

  # Every test program and helper that CMake builds on APPLE, compiled (not
  # linked: no Criterion for macOS here) with the flags and definitions
  # CMake gives it there, against zig's Darwin headers (Criterion's and
  # dlpack's borrowed from the host, cmake/zig-macos.cmake), so that a
  # Linux-only API (pthread_barrier_t, RTLD_NOLOAD under _POSIX_C_SOURCE)
  # fails here. Each directory's object targets ("make help": NAME.o), with
  # -fsyntax-only: every check of the compiler's front end (declarations,
  # warnings as errors) without code generation, which would cost minutes.
  start=$(date +%s)
  tdir="build/$target-tests"
  cmake -S . -B "$tdir" -Wno-dev \
    -DCMAKE_TOOLCHAIN_FILE="$PWD/cmake/zig-macos.cmake" \
    -DCMETAL_ZIG="$zig" -DCMETAL_ZIG_TARGET="$target" \
    -DCMETAL_WERROR=ON -DCMETAL_BUILD_TESTS=ON -DCMETAL_BUILD_TOOLS=OFF \
    -DCMAKE_BUILD_TYPE= >/dev/null
  # Once the compiler checks have run (they link): every compile syntax-only
  # (zig cc takes -fsyntax-only with a depfile, -MD, as CMake gives).
  printf '#!/bin/sh\nexec "$@" -fsyntax-only\n' > "$tdir/syntax-only"
  chmod +x "$tdir/syntax-only"
  cmake -DCMAKE_C_COMPILER_LAUNCHER="$PWD/$tdir/syntax-only" "$tdir" >/dev/null
  compiled=""
  for d in $(cd "$tdir" && find tests -name Makefile -exec dirname {} \; | sort); do
    objects=$(make -s -C "$tdir/$d" help | sed -n 's/^\.\.\. \(.*\.o\)$/\1/p')
    [ -n "$objects" ] || continue
    make -s -B -C "$tdir/$d" -j2 $objects >/dev/null
    compiled="$compiled $(echo $objects)"
  done
  # None left out: each test and helper source (but the Linux-only bridge
  # and softmetal suites, which CMake never builds on APPLE) was compiled.
  missing=0
  for src in $(find tests -name '*.c' ! -path 'tests/objc/*' ! -path 'tests/softmetal/*' \
                 ! -path 'tests/install/*' | sort); do
    case " $compiled " in
      *" $(basename "$src" .c).o "* | *"/$(basename "$src" .c).o "*) ;;
      *) echo "stage-40-macos: $src was not compiled for $target" >&2; missing=1 ;;
    esac
  done
  [ "$missing" = 0 ] || exit 1
  # The install check's other consumer and the README's C examples (each
  # with a depfile: see above).
  cc="$PWD/$dir/zig-$target/cc -std=c11 -Wall -Wextra -Werror -Iinclude -fsyntax-only"
  cc="$cc -isystem $PWD/$dir/zig-$target/host-include"
  $cc -MD -MF "$tdir/embed_check.d" -c -o "$tdir/embed_check.o" tests/install/embed_check.c
  blocks=$(grep -c '^```c$' README.md)
  for n in $(seq 1 "$blocks"); do
    awk -v want="$n" '/^```c$/ {k++; on = (k == want); next} /^```$/ && on {exit} on {print}' \
      README.md > "$tdir/readme-$n.c"
    $cc -MD -MF "$tdir/readme-$n.d" -c -o "$tdir/readme-$n.o" "$tdir/readme-$n.c"
  done
  echo "-- $target: $(echo "$compiled" | wc -w) test sources, embed_check and $blocks README" \
       "examples compiled in $(($(date +%s) - start)) s"
done
echo "stage-40-macos: aarch64-macos and x86_64-macos built (library and tools; tests compiled)"
