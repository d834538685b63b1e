#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Runs an aarch64 Linux program under qemu-aarch64 (user mode):
#   tools/ci/qemu/run.sh PROGRAM ARGS...
# The cross build (cmake/toolchain-aarch64-linux-gnu.cmake) makes ctest
# run every test through it. The guest's / is the cross root
# (/usr/aarch64-linux-gnu), its libraries also come from the unpacked arm64
# .debs (CMETAL_ARM64_SYSROOT, default .deps/arm64/sysroot), and
# exec_shim.so lets it execve aarch64 programs (Criterion's workers).
# softmetal compiles its kernels for aarch64 with the host's clang++-19
# (SOFTMETAL_TARGET=aarch64-linux-gnu; CMETAL_ARM64_SOFTMETAL_CXX names
# another compiler; an inherited SOFTMETAL_CXX is replaced). The compiler
# is a host program, so softmetal's compiler server runs it natively.
# Never hangs: the run is killed after CMETAL_QEMU_TIMEOUT seconds (600).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../../.." && pwd)
sysroot=${CMETAL_ARM64_SYSROOT:-$root/.deps/arm64/sysroot}
[ -d "$sysroot/usr/lib/aarch64-linux-gnu" ] || {
  echo "qemu/run.sh: no arm64 libraries in $sysroot (tools/install-deps.sh --test)" >&2; exit 1; }
qemu=$(command -v qemu-aarch64 || true)
[ -n "$qemu" ] || { echo "qemu/run.sh: qemu-aarch64 is missing (tools/install-deps.sh --test)" >&2; exit 1; }

# Built beside the unpacked libraries, again whenever its source changes.
shim=$sysroot/../exec_shim.so
if [ ! -f "$shim" ] || [ "$here/exec_shim.c" -nt "$shim" ]; then
  tmp=$shim.tmp.$$
  aarch64-linux-gnu-gcc -std=c11 -O2 -Wall -Wextra -Werror -fPIC -shared \
    -o "$tmp" "$here/exec_shim.c"
  mv -f "$tmp" "$shim"
fi

export QEMU_LD_PREFIX=/usr/aarch64-linux-gnu CMETAL_QEMU=$qemu
export SOFTMETAL_CXX=${CMETAL_ARM64_SOFTMETAL_CXX:-clang++-19} SOFTMETAL_TARGET=aarch64-linux-gnu
exec timeout -s KILL "${CMETAL_QEMU_TIMEOUT:-600}" "$qemu" \
  -E LD_LIBRARY_PATH="$sysroot/usr/lib/aarch64-linux-gnu:$sysroot/lib/aarch64-linux-gnu" \
  -E LD_PRELOAD="$shim" "$@"
