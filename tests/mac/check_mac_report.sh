#!/bin/sh
# SPDX-License-Identifier: MIT
# tools/mac/check-on-mac.sh runs the suite twice, the second time with
# Metal's validation on, and its report says which run failed. Checked here
# with stand-ins for cmake, ctest and the tools, in a scratch copy of the
# script's tree. Usage: check_mac_report.sh <source-dir>
set -eu
src=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/tree/tools/mac" "$tmp/bin"
cp "$src/tools/mac/check-on-mac.sh" "$tmp/tree/tools/mac/"
for tool in cmake pkg-config sysctl; do printf '#!/bin/sh\nexit 0\n' > "$tmp/bin/$tool"; done
# ctest fails only when the run named in FAIL_WHEN has validation as asked.
cat > "$tmp/bin/ctest" <<'STUB'
#!/bin/sh
echo "ctest MTL_DEBUG_LAYER=${MTL_DEBUG_LAYER:-unset} MTL_SHADER_VALIDATION=${MTL_SHADER_VALIDATION:-unset}"
[ "${MTL_DEBUG_LAYER:-0}" = "$FAIL_WHEN" ] && exit 8
exit 0
STUB
# xcrun as on Xcode 26: -f finds the metal stub whether or not the Metal
# toolchain was downloaded; running it fails without (XCRUN_METAL=missing).
cat > "$tmp/bin/xcrun" <<'STUB'
#!/bin/sh
case " $* " in
  *" -f "*) echo /usr/bin/metal; exit 0 ;;
  *" metal -v "*) [ "${XCRUN_METAL:-ok}" = ok ] && exit 0; echo "error: cannot execute tool 'metal' due to missing Metal Toolchain" >&2; exit 1 ;;
esac
exit 0
STUB
chmod +x "$tmp/bin/"*
mkdir -p "$tmp/tree/build/mac/bin"
for tool in cmetal-info cmetal-demo; do printf '#!/bin/sh\nexit 0\n' > "$tmp/tree/build/mac/bin/$tool"; done
chmod +x "$tmp/tree/build/mac/bin/"*

check() { # FAIL_WHEN, expected exit, expected summary lines...
  fail_when=$1 want_exit=$2
  shift 2
  set +e
  FAIL_WHEN=$fail_when PATH="$tmp/bin:$PATH" sh -c "bash '$tmp/tree/tools/mac/check-on-mac.sh'" >/dev/null 2>&1
  got_exit=$?
  set -e
  report="$tmp/tree/cmetal-mac-report.txt"
  [ "$got_exit" = "$want_exit" ] || { echo "FAIL_WHEN=$fail_when: exit $got_exit, want $want_exit" >&2; cat "$report" >&2; exit 1; }
  for line in "$@"; do
    grep -qxF "$line" "$report" || { echo "FAIL_WHEN=$fail_when: no line '$line' in the report" >&2; cat "$report" >&2; exit 1; }
  done
  grep -qxF "ctest MTL_DEBUG_LAYER=1 MTL_SHADER_VALIDATION=1" "$report" ||
    { echo "the second run has no validation" >&2; exit 1; }
}
check none 0 "run 1, plain: passed" "run 2, MTL_DEBUG_LAYER=1 MTL_SHADER_VALIDATION=1: passed"
check 1 1 "run 1, plain: passed" "run 2, MTL_DEBUG_LAYER=1 MTL_SHADER_VALIDATION=1: FAILED (exit 8)"
check 0 1 "run 1, plain: FAILED (exit 8)" "run 2, MTL_DEBUG_LAYER=1 MTL_SHADER_VALIDATION=1: passed"
# The Metal toolchain is probed by running the compiler, not by xcrun -f.
grep -qxF "metal compiler: runs" "$tmp/tree/cmetal-mac-report.txt" ||
  { echo "the report does not say the metal compiler runs" >&2; exit 1; }
export XCRUN_METAL=missing
check none 0 "run 1, plain: passed"
grep -q "^missing: the Metal toolchain" "$tmp/tree/cmetal-mac-report.txt" ||
  { echo "a metal stub that does not run is not reported missing" >&2; exit 1; }
echo "check-on-mac.sh: two runs, the second validated; the report names the failing run and a missing Metal toolchain"
