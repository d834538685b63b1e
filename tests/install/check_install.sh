#!/bin/sh
# SPDX-License-Identifier: MIT
# Installs the build into a temporary prefix, then builds a consumer against
# it with pkg-config (shared and static) and with find_package, and runs each.
# Portable: on Linux the shared library is libcmetal.so and `ldd` lists what
# a binary links; on macOS it is libcmetal.N.dylib, whose install name is
# @rpath/libcmetal.N.dylib, and `otool -L` lists it. Consumers find the
# library through an rpath (-Wl,-rpath,<libdir>; CMake's build rpath), never
# LD_LIBRARY_PATH or DYLD_LIBRARY_PATH.
#
# Usage: check_install.sh <build-dir> <source-dir> [--no-run]
#   --no-run: for a cross-build (the macOS one of tools/ci/stage-40-macos.sh):
#   everything is installed, built and inspected, nothing is run. CC names
#   the compiler; the find_package consumer is left out there.
set -eu
build=$1
src=$2
run=yes
[ "${3:-}" = --no-run ] && run=no
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
libdir=$(ls -d "$tmp"/prefix/lib*/pkgconfig | head -n 1 | xargs dirname)
export PKG_CONFIG_PATH="$libdir/pkgconfig"
# The amalgamation for vendoring: cmetal.c beside the public headers.
for f in cmetal.c include/cmetal/cmetal.h; do
  [ -f "$tmp/prefix/share/cmetal/amalgamation/$f" ] || {
    echo "check_install.sh: share/cmetal/amalgamation/$f was not installed" >&2; exit 1; }
done
unset LD_LIBRARY_PATH DYLD_LIBRARY_PATH 2>/dev/null || true
cc=${CC:-cc}

# What kind of shared library was installed decides how to look at binaries.
if ls "$libdir"/libcmetal*.dylib >/dev/null 2>&1; then
  shared_re='libcmetal(\.[0-9]+)*\.dylib'
  # (their first line names the file itself: left out)
  if command -v otool >/dev/null 2>&1; then deps() { otool -L "$1" | tail -n +2; }
  elif command -v llvm-otool >/dev/null 2>&1; then deps() { llvm-otool -L "$1" | tail -n +2; }
  else deps() { llvm-objdump --macho --dylibs-used "$1" | tail -n +2; }
  fi
  # The dylib names itself through the rpath, so that consumers find it
  # wherever the prefix is.
  id=$(deps "$libdir/libcmetal.dylib" | grep -E "$shared_re" | head -n 1 | awk '{print $1}')
  case "$id" in
    @rpath/libcmetal*.dylib) echo "dylib install name: $id" ;;
    *) echo "libcmetal.dylib's install name is '$id', not @rpath/libcmetal.N.dylib" >&2; exit 1 ;;
  esac
else
  shared_re='libcmetal\.so'
  deps() { ldd "$1"; }
fi
runs() { if [ "$run" = yes ]; then "$@"; else echo "not run (--no-run): $1"; fi; }

# Shared, through pkg-config, found through its rpath.
$cc -std=c11 -o "$tmp/shared" "$src/consumer.c" $(pkg-config --cflags --libs cmetal) \
  "-Wl,-rpath,$libdir"
runs "$tmp/shared"
if deps "$tmp/shared" | grep -Eq "$shared_re"; then echo "shared: links $shared_re"; else
  echo "shared consumer does not link $shared_re" >&2; deps "$tmp/shared" >&2; exit 1; fi

# Static, through pkg-config --static: libcmetal.a and its private deps only.
$cc -std=c11 -o "$tmp/static" "$src/consumer.c" $(pkg-config --cflags cmetal) \
  "$libdir/libcmetal.a" $(pkg-config --static --libs-only-l cmetal | sed 's/-lcmetal//')
runs "$tmp/static"
if deps "$tmp/static" | grep -Eq "$shared_re"; then
  echo "static consumer still needs the shared libcmetal" >&2; exit 1; fi
echo "static: no shared libcmetal needed"

# softmetal's headers and library through softmetal.pc, as a host program
# built by clang with blocks uses them (when softmetal is built and installed).
if [ "$run" = yes ] && [ -f "$libdir/pkgconfig/softmetal.pc" ] && command -v clang >/dev/null; then
  clang -o "$tmp/softmetal_consumer" "$src/softmetal_consumer.c" \
    $(pkg-config --cflags --libs softmetal) -Wl,-rpath,"$libdir"
  "$tmp/softmetal_consumer"
  # An Objective-C Metal program: softmetal's Foundation and Metal headers
  # and softmetal.pc's flags, nothing else.
  clang -fobjc-runtime=gcc -o "$tmp/metal_program" "$src/../softmetal/objc/metal_program.m" \
    $(pkg-config --cflags --libs softmetal) -Wl,-rpath,"$libdir"
  "$tmp/metal_program"
fi

# find_package(cmetal). Not in a cross-build (--no-run): CMake's Darwin
# platform, cross-configured from Linux, refuses an imported @rpath library
# ("Attempting to use @rpath without CMAKE_SHARED_LIBRARY_RUNTIME_C_FLAG").
if [ "$run" = no ]; then
  echo "install check passed (--no-run): the dylib's @rpath name, pkg-config shared + static built and inspected; find_package left to a native run"
  exit 0
fi
cmake -S "$src" -B "$tmp/cm" -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
cmake --build "$tmp/cm" >/dev/null
if ! deps "$tmp/cm/consumer_shared" | grep -Eq "$shared_re"; then
  echo "find_package's shared consumer does not link $shared_re" >&2; exit 1; fi
runs "$tmp/cm/consumer_shared"
runs "$tmp/cm/consumer_static"
runs "$tmp/cm/embed_check"
echo "install check passed: pkg-config shared + static, find_package shared + static, cmetal_embed_library"
