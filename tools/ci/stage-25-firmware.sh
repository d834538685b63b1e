#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Builds for firmware-like tools: the amalgamation (tools/amalgamate.sh)
# and the options that leave parts out, with their sizes.
#  1. Generates build/amalgamation; checks that its file lists match the
#     static libraries CMake builds and its MSL bytes match CMake's.
#  2. Copies it into a folder outside the tree and builds it there with
#     plain compiler calls, -Werror and the library's warnings: gcc and
#     clang with every part, gcc with each part left out alone and with all
#     of them left out, zig for aarch64-macos when .deps/zig is there. Each
#     Linux build runs tools/size/probe.c, which checks that what remains
#     works and that left-out calls fail naming their option.
#  3. tools/size/size-report.sh over a CMake build without the CPU ops
#     (built here) and build/ci (the full one, when test.sh built it): a
#     program of tensors and DLPack without CPU ops stays within 150 KB.
# Optimised builds only where they are cheap (the CPU op kernels take most
# of the compile time): gcc -O2 without the CPU ops, -O0 elsewhere.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
t0=$SECONDS

tools/amalgamate.sh build/amalgamation
am=build/amalgamation/cmetal.c

# ---- 1. the amalgamation's parts against CMake's
# MSL: the same bytes as cmake/embed_text.cmake writes, for each source.
bytes_of() { grep -o '0x[0-9a-f][0-9a-f]' "$1" | tr -d '\n'; }
for pair in cm__msl_source:CMETAL_MSL_INPUTS cm__msl_simd_source:CMETAL_MSL_SIMD_INPUTS; do
  symbol=${pair%%:*} list=${pair#*:}
  # shellcheck disable=SC2016 # a literal ${...} of CMake
  inputs=$(awk -v list="$list" '$0 ~ "set\\(" list "$" {on = 1; next}
    on { n = split($0, w, /[ \t)]+/)
         for (i = 1; i <= n; i++) if (w[i] ~ /^\$\{CMAKE_CURRENT_SOURCE_DIR\}\//) {
           sub(/^\$\{CMAKE_CURRENT_SOURCE_DIR\}\//, "", w[i]); printf "%s/msl/%s;", root, w[i] }
         if ($0 ~ /\)/) exit }' root="$root" msl/CMakeLists.txt)
  [ -n "$inputs" ] || { echo "stage-25-firmware: no $list in msl/CMakeLists.txt" >&2; exit 1; }
  cmake -DOUT="$root/build/amalgamation/$symbol.c" -DSYMBOL="$symbol" \
    "-DINPUTS=${inputs%;}" -P cmake/embed_text.cmake
  if [ "$(bytes_of "build/amalgamation/$symbol.c")" != \
       "$(sed -n "/^const char $symbol\[\] = {\$/,/^0x00};\$/p" "$am" | bytes_of /dev/stdin)" ]; then
    echo "stage-25-firmware: the amalgamation's $symbol differs from cmake/embed_text.cmake's" >&2
    exit 1
  fi
done

# ---- 2. plain builds of a vendored copy
vendor=$(mktemp -d)
trap 'rm -rf "$vendor"' EXIT
cp -R build/amalgamation/cmetal.c build/amalgamation/include "$vendor/"
cp tools/size/probe.c "$vendor/"
warn="-Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wno-sign-conversion -Wstrict-prototypes
  -Wmissing-prototypes -Wundef -Wcast-align -Wformat=2 -Wvla -Werror"
# NAME CC OPT MACROS...: builds cmetal.c and the full probe, runs it.
# shellcheck disable=SC2086 # warning flags are words
vendored() {
  local name=$1 cc=$2 opt=$3
  shift 3
  (cd "$vendor" &&
    "$cc" -std=c11 $warn "$opt" "$@" -ffunction-sections -fdata-sections -c cmetal.c \
      -Iinclude -o "$name.o" &&
    "$cc" -std=c11 $warn -O1 -DPROBE_FULL "$@" -Iinclude probe.c "$name.o" \
      -lm -lpthread -ldl -o "probe-$name" &&
    "./probe-$name") >"$vendor/$name.log" 2>&1 || {
    cat "$vendor/$name.log" >&2; echo "stage-25-firmware: the $name build failed" >&2; return 1; }
}
# Two at a time (CI has two cores).
pids=()
run() { vendored "$@" & pids+=($!); }
join() { local p; for p in "${pids[@]}"; do wait "$p"; done; pids=(); }
run gcc-no-cpu-ops gcc -O2 -DCMETAL_NO_CPU_OPS
run clang-all clang -O0
join
run gcc-all gcc -O0
run gcc-minimal gcc -O0 -DCMETAL_NO_CPU_OPS -DCMETAL_NO_METAL -DCMETAL_NO_KERNELS -DCMETAL_NO_DLPACK
join
run gcc-no-metal gcc -O0 -DCMETAL_NO_METAL
run gcc-no-kernels gcc -O0 -DCMETAL_NO_KERNELS
join
run gcc-no-dlpack gcc -O0 -DCMETAL_NO_DLPACK
zig=${CMETAL_ZIG:-$root/.deps/zig/zig}
if [ -x "$zig" ]; then
  mkdir -p "$vendor/zig-include"
  ln -s "$(dirname "$(printf '#include <dlpack/dlpack.h>\n' | cpp -H -o /dev/null 2>&1 |
    sed -n 's/^\. //p' | head -n 1)")" "$vendor/zig-include/dlpack"
  # shellcheck disable=SC2086 # warning flags are words
  (cd "$vendor" && "$zig" cc -target aarch64-macos -std=c11 $warn -O0 -c cmetal.c -Iinclude \
     -isystem zig-include -o macos.o && file macos.o | grep -q "Mach-O 64-bit arm64 object") || {
    echo "stage-25-firmware: the amalgamation does not build for aarch64-macos" >&2; exit 1; }
  echo "stage-25-firmware: the amalgamation builds for aarch64-macos (zig cc)"
else
  echo "stage-25-firmware: no zig at $zig; the macOS build is skipped"
fi
join
echo "stage-25-firmware: the amalgamation builds with -Werror (gcc, clang) in 7 configurations" \
  "and passes the probe"

# ---- 3. CMake's static library: file lists and sizes
tools/size/size-report.sh --configure no-cpu-ops >/dev/null
libs=(build/size/no-cpu-ops)
[ -f build/ci/libcmetal.a ] && libs+=(build/ci)
for dir in "${libs[@]}"; do
  macros=()
  for part in CPU_OPS METAL KERNELS DLPACK; do
    grep -q "^CMETAL_$part:BOOL=OFF$" "$dir/CMakeCache.txt" && macros+=("CMETAL_NO_$part")
  done
  want=$(tools/amalgamate.sh --list "${macros[@]}" | sed 's|.*/||')
  case " ${macros[*]:-} " in *" CMETAL_NO_METAL "*) ;; *) want="$want"$'\n'msl_source.c$'\n'msl_simd_source.c ;; esac
  have=$(ar t "$dir/libcmetal.a" | sed 's/\.o$//')
  if [ "$(sort <<<"$want")" != "$(sort <<<"$have")" ]; then
    echo "stage-25-firmware: $dir/libcmetal.a and tools/amalgamate.sh --list ${macros[*]:-}" \
      "disagree (add the file to the table in tools/amalgamate.sh):" >&2
    diff <(sort <<<"$want") <(sort <<<"$have") >&2 || true
    exit 1
  fi
done
tools/size/size-report.sh --max-min 155000 "${libs[@]}"
echo "stage-25-firmware: passed in $((SECONDS - t0)) s"
