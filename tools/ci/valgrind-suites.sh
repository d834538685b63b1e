#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The Criterion suites stage-10-valgrind runs, one "env VAR=value... binary"
# line each, from a build's criterion-tests.txt (default: build/ci's).
# test_ops_matrix_cpu skips its exact-reference tests under valgrind (its
# long double references); test_ops_matrix_cpu_double_ref runs every test
# of the same source there, so only the latter runs. For the same reason
# test_dlpack_v1_header (test_dlpack's sources against the DLPack 1.x
# header) is left to ASan, and so are the softmetal conformance suites
# (test_softmetal_conformance_*): they check MSL answers through the same
# library, pipeline and dispatch paths the other softmetal suites run under
# valgrind, and would add about 190 s (valgrind-clean when added). So are
# the MSL-language suites of softmetal (test_softmetal_{msl,msl_front,
# types,stdlib,vectors,patterns}, about 170 s here): they differ from the
# others only in the kernels' source, and kernel code's memory is watched by
# softmetal itself (guard pages, bounds checks) in every build. test_tables
# only reads msl/'s text against the op and dtype tables (no library call;
# valgrind-clean when added, 12 s).
set -euo pipefail
list=${1:-build/ci/criterion-tests.txt}
[ -f "$list" ] || { echo "valgrind-suites: $list missing; run the build first" >&2; exit 1; }
grep -v -e '^$' -e '/test_ops_matrix_cpu$' -e '/test_dlpack_v1_header$' \
  -e '/test_softmetal_conformance_' -e '/test_tables$' \
  -e '/test_softmetal_\(msl\|msl_front\|types\|stdlib\|vectors\|patterns\)$' "$list" || true
