#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The amalgamation: every runtime source, its private headers and the
# embedded MSL kernels in one C file, for projects that vendor cmetal
# without CMake.
#
#   tools/amalgamate.sh OUTDIR      writes OUTDIR/cmetal.c and a copy of the
#                                   public headers, OUTDIR/include/cmetal/
#   tools/amalgamate.sh --list [MACRO...]
#                                   prints the runtime sources a build with
#                                   those macros compiles (CMETAL_NO_CPU_OPS,
#                                   CMETAL_NO_METAL, CMETAL_NO_KERNELS,
#                                   CMETAL_NO_DLPACK), one a line
#
# Then: cc -std=c11 -c OUTDIR/cmetal.c -IOUTDIR/include (the dlpack header
# on the include path, as for the CMake build), and link -lm -lpthread -ldl.
# The macros above leave out the parts CMake's CMETAL_CPU_OPS, CMETAL_METAL,
# CMETAL_KERNELS and CMETAL_DLPACK options do.
#
# The sources are every runtime/<layer>/*.c found now, each put under the
# option that owns it (the table in part_of below, which mirrors the
# runtime's CMakeLists.txt files). A file in a layer the table does not know
# stops the script, and tools/ci/stage-25-firmware.sh checks the lists
# against the static libraries CMake builds. Needs bash, awk and od.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

layers="core cpu objc metal"

# The preprocessor condition under which a runtime source is compiled
# ("" for always); stops on a file of an unknown layer.
part_of() {
  case $1 in
    runtime/core/kernel_unavailable.c) echo 'defined(CMETAL_NO_KERNELS)' ;;
    runtime/core/kernel.c | runtime/core/body_kernel.c | runtime/core/msl_text.c)
      echo '!defined(CMETAL_NO_KERNELS)' ;;
    runtime/core/dlpack_unavailable.c) echo 'defined(CMETAL_NO_DLPACK)' ;;
    runtime/core/dlpack.c) echo '!defined(CMETAL_NO_DLPACK)' ;;
    runtime/core/*.c) echo '' ;;
    runtime/cpu/cpu_ops_unavailable.c) echo 'defined(CMETAL_NO_CPU_OPS)' ;;
    runtime/cpu/cpu_device.c | runtime/cpu/cpu_pool.c) echo '' ;;
    # Everything else of the CPU layer is op kernels.
    runtime/cpu/*.c) echo '!defined(CMETAL_NO_CPU_OPS)' ;;
    runtime/objc/*.c) echo '!defined(CMETAL_NO_METAL)' ;;
    runtime/metal/metal_unavailable.c) echo 'defined(CMETAL_NO_METAL)' ;;
    runtime/metal/metal_kernel.c) echo '!defined(CMETAL_NO_METAL) && !defined(CMETAL_NO_KERNELS)' ;;
    runtime/metal/*.c) echo '!defined(CMETAL_NO_METAL)' ;;
    *) echo "amalgamate.sh: $1: no rule says which build option owns it" >&2; return 1 ;;
  esac
}

sources() {
  local layer f
  for f in runtime/*/*.c; do
    layer=${f#runtime/}; layer=${layer%%/*}
    case " $layers " in
      *" $layer "*) ;;
      *) echo "amalgamate.sh: $f: runtime/$layer is a layer this script does not know" >&2
         return 1 ;;
    esac
  done
  for layer in $layers; do
    for f in runtime/"$layer"/*.c; do echo "$f"; done
  done
}

# The MSL inputs of one embedded source, in msl/CMakeLists.txt's order:
# $1 names the list (CMETAL_MSL_INPUTS, CMETAL_MSL_SIMD_INPUTS).
msl_inputs() {
  awk -v list="$1" '$0 ~ "set\\(" list "$" {on = 1; next}
       on { n = split($0, w, /[ \t)]+/)
            for (i = 1; i <= n; i++)
              if (w[i] ~ /^\$\{CMAKE_CURRENT_SOURCE_DIR\}\//) {
                sub(/^\$\{CMAKE_CURRENT_SOURCE_DIR\}\//, "msl/", w[i]); print w[i] }
            if ($0 ~ /\)/) exit }' msl/CMakeLists.txt
}

if [ "${1:-}" = "--list" ]; then
  shift
  defined=" $* "
  sources | while read -r f; do
    cond=$(part_of "$f")
    # Evaluate the condition for the given macros.
    expr=$cond
    for m in CMETAL_NO_CPU_OPS CMETAL_NO_METAL CMETAL_NO_KERNELS CMETAL_NO_DLPACK; do
      case $defined in *" $m "*) v=1 ;; *) v=0 ;; esac
      expr=${expr//"defined($m)"/$v}
    done
    expr=${expr//"!1"/0}; expr=${expr//"!0"/1}
    if [ -z "$expr" ] || [ $((expr)) -ne 0 ]; then echo "$f"; fi
  done
  exit 0
fi

[ $# -eq 1 ] || { echo "usage: tools/amalgamate.sh OUTDIR | --list [MACRO...]" >&2; exit 2; }
out=$1
mkdir -p "$out/include"
srcs=$(sources)
for f in $srcs; do part_of "$f" >/dev/null; done

# Private headers in the order a depth-first walk of the sources' quoted
# includes meets them, dependencies first. Resolved beside the including
# file, then from runtime/, as the CMake build's include path does.
resolve() { # FILE INCLUDE
  local d; d=$(dirname "$1")
  if [ -f "$d/$2" ]; then echo "$d/$2"; elif [ -f "runtime/$2" ]; then echo "runtime/$2"
  else echo "amalgamate.sh: $1 includes \"$2\", which is not found" >&2; return 1; fi
}
seen=" "
headers=()
visit() { # FILE
  local inc h
  # shellcheck disable=SC2013 # include names have no spaces
  for inc in $(sed -n 's/^#include "\([^"]*\)".*/\1/p' "$1"); do
    h=$(resolve "$1" "$inc")
    case $seen in *" $h "*) continue ;; esac
    seen="$seen$h "
    visit "$h"
    headers+=("$h")
  done
}
for f in $srcs; do visit "$f"; done

# A file as it goes in: its quoted includes become empty lines (the
# headers are already above), so that #line keeps its line numbers.
emit() { # FILE
  printf '#line 1 "%s"\n' "$1"
  awk '/^#include "/ { print ""; next } { print }' "$1"
}

version=$(awk '/^#define CM_VERSION_(MAJOR|MINOR|PATCH) / {v = v (v == "" ? "" : ".") $3} END {print v}' \
  include/cmetal/status.h)
tmp="$out/cmetal.c.tmp"
{
  cat <<EOF
/* SPDX-License-Identifier: MIT */
/* cmetal $version, amalgamated: every runtime source, its private headers
 * and the embedded MSL kernels in one translation unit. Generated by
 * tools/amalgamate.sh; do not edit (edit the sources it names).
 *
 * Build: cc -std=c11 -O2 -c cmetal.c -Iinclude   (include/ holds the public
 * headers, include/cmetal; dlpack/dlpack.h must be on the include path too) and
 * link with -lm -lpthread -ldl. Add -ffunction-sections -fdata-sections and
 * link with -Wl,--gc-sections (-Wl,-dead_strip on macOS) to keep only what
 * a program uses.
 *
 * Define any of these to leave a part out (its public functions then fail
 * with CM_ERR_UNSUPPORTED naming the part):
 *   CMETAL_NO_CPU_OPS   the CPU device's op kernels (CMake: CMETAL_CPU_OPS=OFF)
 *   CMETAL_NO_METAL     the Metal backend and the Objective-C bridge
 *                       (CMake: CMETAL_METAL=OFF)
 *   CMETAL_NO_KERNELS   custom kernels, cmetal/kernel.h (CMETAL_KERNELS=OFF)
 *   CMETAL_NO_DLPACK    DLPack import and export (CMETAL_DLPACK=OFF)
 * The Objective-C dispatch is Apple's on Apple platforms and GNU libobjc's
 * elsewhere; define CMETAL_OBJC_RUNTIME_APPLE or CMETAL_OBJC_RUNTIME_GNU to
 * choose. With GCC, -fvect-cost-model=dynamic -fno-trapping-math give the
 * CPU op kernels the speed of the CMake build. */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif
#if !defined(CMETAL_OBJC_RUNTIME_APPLE) && !defined(CMETAL_OBJC_RUNTIME_GNU)
#if defined(__APPLE__)
#define CMETAL_OBJC_RUNTIME_APPLE 1
#else
#define CMETAL_OBJC_RUNTIME_GNU 1
#endif
#endif
#if !defined(CMETAL_NO_METAL)
#define CMETAL_HAS_METAL 1
#if !defined(CMETAL_OBJC_RUNTIME_NAME) && defined(CMETAL_OBJC_RUNTIME_APPLE)
#define CMETAL_OBJC_RUNTIME_NAME "apple"
#elif !defined(CMETAL_OBJC_RUNTIME_NAME)
#define CMETAL_OBJC_RUNTIME_NAME "gnu"
#endif
#endif

EOF
  # Their static inline functions are meant to go unused in some sources;
  # clang would warn about them in the main file, as it does not in headers.
  printf '#if defined(__clang__)\n#pragma clang diagnostic push\n'
  printf '#pragma clang diagnostic ignored "-Wunused-function"\n#endif\n'
  for h in "${headers[@]}"; do
    printf '/* ======== %s */\n' "$h"
    emit "$h"
  done
  printf '#if defined(__clang__)\n#pragma clang diagnostic pop\n#endif\n'
  for f in $srcs; do
    cond=$(part_of "$f")
    printf '/* ======== %s */\n' "$f"
    [ -z "$cond" ] || printf '#if %s\n' "$cond"
    emit "$f"
    # A source's own macros end with it, as they would in its own unit.
    sed -n 's/^#[ \t]*define[ \t]\{1,\}\([A-Za-z_][A-Za-z0-9_]*\).*/#undef \1/p' "$f" | sort -u
    [ -z "$cond" ] || printf '#endif /* %s */\n' "$cond"
  done
  # The MSL kernels, as msl/CMakeLists.txt embeds them (cmake/embed_text.cmake):
  # the inputs joined, each followed by a newline, NUL-terminated; the
  # SIMD-group kernels are a second source.
  printf '#if !defined(CMETAL_NO_METAL)\n#line 1 "msl_source.c"\n'
  for pair in cm__msl_source:CMETAL_MSL_INPUTS cm__msl_simd_source:CMETAL_MSL_SIMD_INPUTS; do
    symbol=${pair%%:*} list=${pair#*:}
    printf '/* ======== msl/: %s */\n' "$(msl_inputs "$list" | tr '\n' ' ')"
    printf '__attribute__((visibility("hidden"))) extern const char %s[];\n' "$symbol"
    printf 'const char %s[] = {\n' "$symbol"
    for m in $(msl_inputs "$list"); do
      { cat "$m"; printf '\n'; } | od -An -v -tx1
    done | awk '{ for (i = 1; i <= NF; i++) { line = line "0x" $i ","; if (++n == 16) { print line; line = ""; n = 0 } } }
                END { if (line != "") print line }'
    printf '0x00};\n'
  done
  printf '#endif\n'
} >"$tmp"
mv "$tmp" "$out/cmetal.c"
rm -rf "$out/include/cmetal"
cp -R include/cmetal "$out/include/cmetal"
