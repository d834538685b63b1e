#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The Metal suites again on the release build (build/ci, made by
# tools/ci/test.sh) under softmetal's other personas (SOFTMETAL_PERSONA):
# the Apple Paravirtual device of hosted macOS runners (one device, Apple5:
# no SIMD-group permutes or reductions) and a discrete AMD GPU of an Intel Mac
# (64-lane SIMD groups, no unified memory, Mac2). The test step ran them as
# an Apple-silicon Mac. MTL_DEBUG_LAYER=1 comes from the tests' environment.
# The op matrix runs a third of its cases here (CMETAL_TEST_SAMPLE).
# test_memory checks that small buffers come from heaps of the storage mode
# each kind of Mac has (private only on the AMD one; about 2 s each).
set -euo pipefail
cd "$(dirname "$0")/../.."
jobs=$(nproc 2>/dev/null || echo 2)
[ -d build/ci ] || { echo "stage-personas: build/ci is missing; tools/ci/test.sh makes it" >&2; exit 1; }
# softmetal's own suites describe an Apple-silicon softmetal (its names,
# several devices, 32 lanes); test_softmetal_persona_* cover the personas.
suites='^(test_metal|test_labels|test_memory|test_tensor_metal|test_dlpack_metal|test_metal_ops|test_kernel|test_ops_matrix_metal|test_metal(_ops)?_without_debug_layer|readme_kernels|demo_metal|test_softmetal_validation)$'
export CMETAL_TEST_SAMPLE=3
failed=""
for persona in paravirtual amd-discrete; do
  start=$SECONDS
  if (cd build/ci && SOFTMETAL_PERSONA=$persona ctest --output-on-failure -j"$jobs" -R "$suites" \
        > "persona-$persona.txt" 2>&1); then
    echo "stage-personas: $persona passed in $((SECONDS - start)) s"
  else
    grep -E '^\[FAIL\]|tests passed|\(Failed\)' "build/ci/persona-$persona.txt" || true
    echo "stage-personas: $persona FAILED in $((SECONDS - start)) s (build/ci/persona-$persona.txt)"
    failed="$failed $persona"
  fi
done
[ -z "$failed" ] || { echo "stage-personas: failed under:$failed" >&2; exit 1; }
