#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Sizes of programs linked with the static library, per build configuration.
#
#   tools/size/size-report.sh [--max-min BYTES] BUILD_DIR...
#   tools/size/size-report.sh --configure [--max-min BYTES] [NAME...]
#
# For each CMake build directory (its libcmetal.a built), links
# tools/size/probe.c twice against libcmetal.a (libc, libm, pthread and libdl
# shared) with -Wl,--gc-sections and strips it: "minimal" makes a CPU tensor
# and moves it through DLPack; "full" also runs ops and asks for custom
# kernels and Metal. Each program runs and checks that the parts the build
# left out fail with the option's name (exit 1 otherwise). Prints the text
# size (size(1)) and the stripped file size of both.
# --configure builds the named configurations first, library only, under
# build/size/NAME (all of them when none is named): full, no-cpu-ops,
# no-metal, no-kernels, no-dlpack, tensors-dlpack (all but DLPack left out),
# minimal (all four left out).
# --max-min fails (exit 1) when a minimal program of a configuration that
# leaves out the CPU ops is larger than BYTES stripped.
# Uses the compiler of $CC (default cc); the size figures are for x86-64.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cc=${CC:-cc}
max_min=
configure=0
while [ $# -gt 0 ]; do
  case $1 in
    --max-min) max_min=$2; shift 2 ;;
    --configure) configure=1; shift ;;
    *) break ;;
  esac
done

options_of() { # NAME -> CMake options
  case $1 in
    full) echo "" ;;
    no-cpu-ops) echo "-DCMETAL_CPU_OPS=OFF" ;;
    no-metal) echo "-DCMETAL_METAL=OFF" ;;
    no-kernels) echo "-DCMETAL_KERNELS=OFF" ;;
    no-dlpack) echo "-DCMETAL_DLPACK=OFF" ;;
    tensors-dlpack) echo "-DCMETAL_CPU_OPS=OFF -DCMETAL_METAL=OFF -DCMETAL_KERNELS=OFF" ;;
    minimal) echo "-DCMETAL_CPU_OPS=OFF -DCMETAL_METAL=OFF -DCMETAL_KERNELS=OFF -DCMETAL_DLPACK=OFF" ;;
    *) echo "size-report.sh: unknown configuration $1" >&2; return 1 ;;
  esac
}

dirs=()
if [ "$configure" -eq 1 ]; then
  [ $# -gt 0 ] || set -- full no-cpu-ops no-metal no-kernels no-dlpack tensors-dlpack minimal
  for name in "$@"; do
    opts=$(options_of "$name")
    # shellcheck disable=SC2086 # the options are words
    cmake -S "$root" -B "$root/build/size/$name" -DCMETAL_BUILD_TESTS=OFF \
      -DCMETAL_BUILD_TOOLS=OFF -DCMETAL_WERROR=ON $opts >/dev/null
    cmake --build "$root/build/size/$name" --target cmetal_static \
      -j"$(nproc 2>/dev/null || echo 2)" >/dev/null
    dirs+=("$root/build/size/$name")
  done
else
  [ $# -gt 0 ] || { echo "usage: size-report.sh [--max-min BYTES] BUILD_DIR... | --configure [NAME...]" >&2; exit 2; }
  dirs=("$@")
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
status=0
printf '%-32s %-8s %10s %10s\n' "configuration" "program" "text" "stripped"
for dir in "${dirs[@]}"; do
  cache=$dir/CMakeCache.txt
  if [ ! -f "$dir/libcmetal.a" ] || [ ! -f "$cache" ]; then
    echo "size-report.sh: $dir has no libcmetal.a or CMakeCache.txt" >&2; exit 2
  fi
  # The parts the build left out, as the probe's macros.
  macros=()
  left=()
  for part in CPU_OPS METAL KERNELS DLPACK; do
    if grep -q "^CMETAL_$part:BOOL=OFF$" "$cache"; then
      macros+=("-DCMETAL_NO_$part"); left+=("$part")
    fi
  done
  label="all parts"
  [ ${#left[@]} -eq 0 ] || label="no $(IFS=,; echo "${left[*]}" | tr 'A-Z_' 'a-z-')"
  inc=$(sed -n 's/^CMETAL_DLPACK_INCLUDE_DIR:PATH=\(..*\)$/-I\1/p' "$cache")
  for prog in minimal full; do
    def=PROBE_MIN
    [ "$prog" = minimal ] || def=PROBE_FULL
    # shellcheck disable=SC2086 # $inc is empty or one word
    "$cc" -std=c11 -O2 -D"$def" "${macros[@]}" -I"$root/include" $inc "$root/tools/size/probe.c" \
      "$dir/libcmetal.a" -Wl,--gc-sections -s -lm -lpthread -ldl -o "$tmp/probe"
    if ! "$tmp/probe"; then
      echo "size-report.sh: the $prog probe failed against $dir" >&2; status=1
    fi
    text=$(size "$tmp/probe" | awk 'NR == 2 {print $1}')
    bytes=$(wc -c <"$tmp/probe" | tr -d ' ')
    printf '%-32s %-8s %10s %10s\n' "$label" "$prog" "$text" "$bytes"
    case " ${left[*]:-} " in
      *" CPU_OPS "*)
        if [ -n "$max_min" ] && [ "$prog" = minimal ] && [ "$bytes" -gt "$max_min" ]; then
          echo "size-report.sh: the minimal program without CPU ops is $bytes bytes, over $max_min" >&2
          status=1
        fi ;;
    esac
  done
done
exit $status
