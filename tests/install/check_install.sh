#!/bin/sh
# Installs the build into a temporary prefix, then builds a consumer against
# it with pkg-config (shared and static) and with find_package, and runs each.
# Usage: check_install.sh <build-dir> <source-dir>
set -eu
build=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
libdir=$(ls -d "$tmp"/prefix/lib*/pkgconfig | head -n 1 | xargs dirname)
export PKG_CONFIG_PATH="$libdir/pkgconfig"
cc=${CC:-cc}

# Shared, through pkg-config.
$cc -std=c11 -o "$tmp/shared" "$src/consumer.c" $(pkg-config --cflags --libs cmetal)
LD_LIBRARY_PATH="$libdir" "$tmp/shared"
if ldd "$tmp/shared" | grep -q 'libcmetal\.so'; then echo "shared: links libcmetal.so"; else
  echo "shared consumer does not link libcmetal.so" >&2; exit 1; fi

# Static, through pkg-config --static: libcmetal.a and its private deps only.
$cc -std=c11 -o "$tmp/static" "$src/consumer.c" $(pkg-config --cflags cmetal) \
  "$libdir/libcmetal.a" $(pkg-config --static --libs-only-l cmetal | sed 's/-lcmetal//')
"$tmp/static"
if ldd "$tmp/static" | grep -q libcmetal; then
  echo "static consumer still needs libcmetal.so" >&2; exit 1; fi
echo "static: no libcmetal.so needed"

# find_package(cmetal).
cmake -S "$src" -B "$tmp/cm" -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
cmake --build "$tmp/cm" >/dev/null
LD_LIBRARY_PATH="$libdir" "$tmp/cm/consumer_shared"
"$tmp/cm/consumer_static"
"$tmp/cm/embed_check"
echo "install check passed: pkg-config shared + static, find_package shared + static, cmetal_embed_library"
