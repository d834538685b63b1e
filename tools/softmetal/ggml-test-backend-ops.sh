#!/bin/bash
# SPDX-License-Identifier: MIT
# Runs ggml's test-backend-ops on ggml's Metal backend built against
# softmetal, op by op, and prints a row per op: cases run, passed, failed,
# not supported, seconds.
#
# Usage: ggml-test-backend-ops.sh GGML_SRC [test-backend-ops args...]
#
#   GGML_SRC   a ggml checkout (never modified: it is copied first).
#   softmetal is found through pkg-config (PKG_CONFIG_PATH=<prefix>/lib/pkgconfig).
#
# Environment:
#   GGML_OPS="ADD RMS_NORM ..."  the ops to run (default: every op of --list-ops)
#   GGML_SAMPLE=N                sampled mode: at most N cases of each op, spread
#                                evenly over the cases the Metal backend supports
#                                (0, the default: every case)
#   GGML_OP_TIMEOUT=S            seconds per op before it is killed (default 600)
#   GGML_WORK=DIR                build folder (default: a new temporary folder;
#                                reused when it holds a finished build)
#   JOBS=N                       build jobs (default 2)
#
# The build: the copy gets one mechanical rewrite, object subscripts into
# messages (array[i] -> [array objectAtIndex:i], dict[key] -> [dict
# objectForKey:key]; clang refuses subscripts for the GNU runtime), and no
# other edit. ggml's own CMake builds its base library, the CPU backend
# and test-backend-ops as dynamically loaded backends; the Metal backend's
# sources are compiled here with clang -fobjc-runtime=gcc and softmetal.pc's
# flags into libggml-metal.so beside them, with ggml-metal.metal embedded as
# ggml's CMake embeds it (ggml-common.h and ggml-metal-impl.h pasted in).
# Each op runs in a fresh process: ggml's backend stays in an error state
# after a failed command buffer.
set -euo pipefail

die() { echo "ggml-test-backend-ops.sh: $*" >&2; exit 2; }
[ $# -ge 1 ] || die "usage: ggml-test-backend-ops.sh GGML_SRC [test-backend-ops args...]"
src_in=$1
shift
[ -f "$src_in/src/ggml-metal/ggml-metal-device.m" ] ||
  die "GGML_SRC '$src_in' is not a ggml checkout (no src/ggml-metal/ggml-metal-device.m)"
pkg-config --exists softmetal ||
  die "softmetal.pc not found: set PKG_CONFIG_PATH to <softmetal prefix>/lib/pkgconfig"
sample=${GGML_SAMPLE:-0}
op_timeout=${GGML_OP_TIMEOUT:-600}
jobs=${JOBS:-2}
case "$sample" in *[!0-9]* | '') die "GGML_SAMPLE '$sample' is not a count" ;; esac
case "$op_timeout" in *[!0-9]* | '') die "GGML_OP_TIMEOUT '$op_timeout' is not seconds" ;; esac
cc=${CC:-clang}
cxx=${CXX:-clang++}
command -v "$cc" >/dev/null || die "no C/Objective-C compiler '$cc' (set CC to a clang)"
command -v "$cxx" >/dev/null || die "no C++ compiler '$cxx' (set CXX)"

work=${GGML_WORK:-$(mktemp -d)}
mkdir -p "$work"
src=$work/src
build=$work/build
bin=$build/bin
log=$work/build.log

if [ ! -x "$bin/test-backend-ops" ] || [ ! -f "$bin/libggml-metal.so" ]; then
  echo "building ggml from $src_in in $work (log: $log)" >&2
  rm -rf "$src"
  mkdir -p "$src"
  (cd "$src_in" && tar --exclude=.git -cf - .) | (cd "$src" && tar -xf -)
  # The one rewrite: object subscripts into messages.
  sed -i -E \
    -e 's/(ctx->cmd_bufs_ext)\[([A-Za-z_][A-Za-z0-9_]*)\]/[\1 objectAtIndex:\2]/g' \
    -e 's/(\[\[NSProcessInfo processInfo\] arguments\])\[([0-9]+)\]/[\1 objectAtIndex:\2]/g' \
    -e 's/(\[NSProcessInfo processInfo\]\.environment)\[(@"[A-Za-z0-9_]+")\]/[\1 objectForKey:\2]/g' \
    "$src"/src/ggml-metal/*.m
  cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_C_COMPILER="$cc" -DCMAKE_CXX_COMPILER="$cxx" \
    -DBUILD_SHARED_LIBS=ON -DGGML_BACKEND_DL=ON -DGGML_NATIVE=OFF \
    -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
    -DGGML_METAL=OFF -DGGML_CPU=ON -DGGML_OPENMP=OFF -DGGML_CCACHE=OFF \
    -DGGML_BUILD_TESTS=ON -DGGML_BUILD_EXAMPLES=OFF >"$log" 2>&1 || die "cmake failed: $log"
  ninja -C "$build" -j "$jobs" test-backend-ops ggml-cpu >>"$log" 2>&1 || die "ggml build failed: $log"

  # The Metal backend, against softmetal's headers and library only.
  m=$work/metal
  mkdir -p "$m"
  ms=$src/src/ggml-metal
  sed -e "/__embed_ggml-common.h__/r $src/src/ggml-common.h" -e "/__embed_ggml-common.h__/d" \
    <"$ms/ggml-metal.metal" >"$m/embed.tmp"
  sed -e "/#include \"ggml-metal-impl.h\"/r $ms/ggml-metal-impl.h" \
    -e "/#include \"ggml-metal-impl.h\"/d" <"$m/embed.tmp" >"$m/ggml-metal-embed.metal"
  {
    echo '.section .rodata'
    echo '.globl ggml_metallib_start'
    echo 'ggml_metallib_start:'
    echo ".incbin \"$m/ggml-metal-embed.metal\""
    echo '.globl ggml_metallib_end'
    echo 'ggml_metallib_end:'
    echo '.section .note.GNU-stack,"",@progbits'
  } >"$m/embed.S"
  defs="-DGGML_METAL_EMBED_LIBRARY -DGGML_BACKEND_DL -DGGML_BACKEND_BUILD -DGGML_BACKEND_SHARED -DGGML_SHARED -DNDEBUG"
  incs="-I$src/include -I$src/src -I$ms"
  objs=()
  for f in "$ms"/*.m; do
    o=$m/$(basename "$f").o
    # shellcheck disable=SC2046,SC2086
    "$cc" -fobjc-runtime=gcc $(pkg-config --cflags softmetal) -O2 -fPIC $defs $incs \
      -c "$f" -o "$o" >>"$log" 2>&1 || die "compiling $(basename "$f") failed: $log"
    objs+=("$o")
  done
  for f in "$ms"/*.cpp; do
    o=$m/$(basename "$f").o
    # (<memory> comes through other headers with Apple's libc++, not libstdc++)
    # shellcheck disable=SC2086
    "$cxx" -std=c++17 -include memory -O2 -fPIC $defs $incs -c "$f" -o "$o" >>"$log" 2>&1 ||
      die "compiling $(basename "$f") failed: $log"
    objs+=("$o")
  done
  "$cc" -c "$m/embed.S" -o "$m/embed.o" >>"$log" 2>&1 || die "embedding ggml-metal.metal failed: $log"
  objs+=("$m/embed.o")
  libdir=$(pkg-config --variable=libdir softmetal)
  base=$(find "$build" -name 'libggml-base.so' | head -n 1)
  # shellcheck disable=SC2046
  "$cxx" -shared -o "$bin/libggml-metal.so" "${objs[@]}" "$base" $(pkg-config --libs softmetal) \
    -Wl,-rpath,"$libdir" -Wl,-rpath,"$(dirname "$base")" >>"$log" 2>&1 ||
    die "linking libggml-metal.so failed: $log"
fi

tbo=$bin/test-backend-ops
strip_ansi() { sed -E 's/\x1b\[[0-9;]*m//g'; }
if [ -n "${GGML_OPS:-}" ]; then
  ops=$GGML_OPS
else
  ops=$("$tbo" --list-ops 2>/dev/null | strip_ansi | awk '/^ *[A-Z][A-Z0-9_]*$/ {print $1}')
  [ -n "$ops" ] || ops=$("$tbo" --list-ops 2>/dev/null | strip_ansi | grep -oE '^[ ]*[A-Z][A-Z0-9_]+' | tr -d ' ')
fi

printf '%-22s %6s %6s %6s %9s %8s\n' op cases passed failed unsupp seconds
tot_cases=0 tot_pass=0 tot_fail=0
for op in $ops; do
  filter=$op
  if [ "$sample" -gt 0 ]; then
    # The cases the Metal backend supports, as full test names; N of them,
    # evenly spread.
    cases=$(timeout -s KILL "$op_timeout" "$tbo" support -b MTL0 -o "$op" 2>/dev/null | strip_ansi |
      awk -v op="$op" '$0 ~ "^  " op "\\(" && / SUPPORTED$/ {sub(/^  /, ""); sub(/: SUPPORTED$/, ""); print}' || true)
    n=$(printf '%s\n' "$cases" | grep -c . || true)
    if [ "$n" -eq 0 ]; then
      printf '%-22s %6d %6d %6d %9s %8s\n' "$op" 0 0 0 all 0
      continue
    fi
    filter=$(printf '%s\n' "$cases" | awk -v n="$n" -v k="$sample" \
      'BEGIN {step = n > k ? n / k : 1; next_i = 0} NR - 1 >= next_i {print; next_i += step}' | paste -sd, -)
  fi
  t0=$(date +%s.%N)
  set +e
  out=$(timeout -s KILL "$op_timeout" "$tbo" test -b MTL0 -o "$filter" "$@" 2>&1)
  rc=$?
  set -e
  t1=$(date +%s.%N)
  out=$(printf '%s\n' "$out" | strip_ansi)
  # test-backend-ops ends with "  N/M tests passed" (M: the cases run, not
  # the unsupported ones); a process that dies before it is counted from the
  # case lines, and the case it died in as failed. (The backend's log lines
  # can come between a case's name and its verdict.)
  unsup=$(printf '%s\n' "$out" | grep -cE '^  [A-Z].*\): not supported' || true)
  summary=$(printf '%s\n' "$out" | grep -E '^  [0-9]+/[0-9]+ tests passed$' | tail -n 1 || true)
  note=""
  if [ -n "$summary" ] && [ $rc -ne 137 ]; then
    pass=$(echo "$summary" | sed -E 's|^ *([0-9]+)/.*|\1|')
    cases=$(echo "$summary" | sed -E 's|^ *[0-9]+/([0-9]+) .*|\1|')
    fail=$((cases - pass))
  else
    pass=$(printf '%s\n' "$out" | grep -vE 'Backend|backends' | grep -cE '(^|: )OK$' || true)
    fail=$(printf '%s\n' "$out" | grep -cE '(^|: )FAIL$' || true)
    fail=$((fail + 1))
    cases=$((pass + fail))
    note=" (died: exit $rc)"
    [ $rc -eq 137 ] && note=" (killed after ${op_timeout} s)"
  fi
  printf '%-22s %6d %6d %6d %9d %8.1f%s\n' "$op" "$cases" "$pass" "$fail" "$unsup" \
    "$(awk -v a="$t0" -v b="$t1" 'BEGIN {print b - a}')" "$note"
  if [ -n "${GGML_LOG_DIR:-}" ]; then mkdir -p "$GGML_LOG_DIR"; printf '%s\n' "$out" >"$GGML_LOG_DIR/$op.log"; fi
  tot_cases=$((tot_cases + cases)) tot_pass=$((tot_pass + pass)) tot_fail=$((tot_fail + fail))
done
printf '%-22s %6d %6d %6d\n' total "$tot_cases" "$tot_pass" "$tot_fail"
[ "$tot_fail" -eq 0 ]
