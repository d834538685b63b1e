// SPDX-License-Identifier: MIT
// A precompiled library for test_kernel: built into softmetal's container
// by softmetal-metallib (-D BIAS=...) and embedded with cmetal_embed_library.
#include <metal_stdlib>
using namespace metal;

kernel void axpb(device const float *x [[buffer(0)]],
                 device float *y [[buffer(1)]],
                 constant float &a [[buffer(2)]],
                 uint i [[thread_position_in_grid]]) {
    y[i] = a * x[i] + BIAS;
}
