/* SPDX-License-Identifier: MIT */
/* The CPU backend's ops: the kernel tables of each op family. Internal to
 * runtime/cpu. */
#ifndef CMETAL_CPU_OPS_H
#define CMETAL_CPU_OPS_H

#include "core/backend.h"
#include "cpu_nd.h"
#include "cpu_pool.h"

#include <cmetal/ops.h>

/* Inner kernels: n elements, byte strides, out first. */
typedef void (*cm__cpu_map1_fn)(int64_t n, char *o, int64_t os, const char *a, int64_t as);
typedef void (*cm__cpu_map2_fn)(int64_t n, char *o, int64_t os, const char *a, int64_t as,
                                const char *b, int64_t bs);

/* Test and benchmark hook for the destination stores of the tiled
 * transpose, fills and the streaming elementwise kernels (below): 0 chooses by size
 * (streaming, non-temporal stores for destinations larger than four L2
 * caches, on x86-64), 1 always streams, -1 never does. Process-wide. */
void cm__cpu_copy_force_streaming(int mode);

/* Conversion kernel from one dtype to another (cast). */
cm__cpu_map1_fn cm__cpu_cast_kernel(cm_dtype from, cm_dtype to);

/* The cast kernel with non-temporal stores for runs of contiguous
 * elements (both operands), or NULL where there is none (float32 <->
 * float16 with F16C, float32 <-> bfloat16, on x86-64). The caller fences
 * the stores. */
cm__cpu_map1_fn cm__cpu_cast_stream_kernel(cm_dtype from, cm_dtype to);

/* Test hook: with `scalar_only`, float16 casts use the portable scalar
 * path even where the CPU has conversion instructions. Process-wide. */
void cm__cpu_cast_force_scalar(bool scalar_only);

/* Test hook: with `portable`, reductions use their portable loops even
 * where the CPU has AVX2 and F16C (the bits must not change). Process-wide. */
void cm__cpu_reduce_force_portable(bool portable);

/* The float16 conversion instructions casts use now ("f16c", "neon"), or
 * NULL where the CPU has none or the scalar path is forced. */
const char *cm__cpu_cast_f16_hardware(void);

/* Elementwise kernels; NULL for pairs the core refuses. */
cm__cpu_map1_fn cm__cpu_unary_kernel(cm_unary_op op, cm_dtype dtype);
cm__cpu_map2_fn cm__cpu_binary_kernel(cm_binary_op op, cm_dtype dtype);

/* The kernels with non-temporal stores for runs of contiguous elements
 * (every operand), or NULL where there is none (float32 and float64 add,
 * sub, mul, div, min, max, neg, abs, square, relu, sqrt and rsqrt on
 * x86-64). The caller fences the stores. */
cm__cpu_map2_fn cm__cpu_binary_stream_kernel(cm_binary_op op, cm_dtype dtype);
cm__cpu_map1_fn cm__cpu_unary_stream_kernel(cm_unary_op op, cm_dtype dtype);

/* Reduction of an op the core validated, over host memory, with the
 * device's pool (NULL: the calling thread alone). */
cm_status cm__cpu_reduce(const cm__op *op, cm__cpu_nd *nd, cm__cpu_pool *pool);

/* The backend entry (cm__backend.run_op). */
cm_status cm__cpu_run_op(cm_device *device, const cm__op *op);

#endif /* CMETAL_CPU_OPS_H */
