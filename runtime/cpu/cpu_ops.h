/* SPDX-License-Identifier: MIT */
/* The CPU backend's ops: N-d iteration with dimension coalescing, and the
 * kernel tables of each op family. Internal to runtime/cpu. */
#ifndef CMETAL_CPU_OPS_H
#define CMETAL_CPU_OPS_H

#include "core/backend.h"

#include <cmetal/ops.h>

#define CM__CPU_MAXOPS 3

/* Operands over one iteration shape, with byte strides and host bases.
 * Operand 0 is the output, then the inputs. */
typedef struct cm__cpu_nd {
    int32_t ndim;
    int32_t nops;
    int64_t shape[CM_MAX_NDIM];
    int64_t strides[CM__CPU_MAXOPS][CM_MAX_NDIM];
    char *base[CM__CPU_MAXOPS];
} cm__cpu_nd;

/* Loop body over the innermost axis: n elements from pointers p with byte
 * strides s (one per operand). */
typedef void (*cm__cpu_run_fn)(int64_t n, char *const *p, const int64_t *s, void *ctx);

/* Drops size-1 axes, makes operand `key`'s strides non-negative where that
 * is a pure reordering, sorts axes by decreasing |stride| of `key`, then
 * merges neighbouring axes that are contiguous relative to each other in
 * every operand. `key` < 0 keeps the axis order (only drops and merges). */
void cm__cpu_nd_simplify(cm__cpu_nd *nd, int32_t key);

/* Calls fn once per run of the innermost axis (once with n = 1 for 0-d). */
void cm__cpu_nd_foreach(const cm__cpu_nd *nd, cm__cpu_run_fn fn, void *ctx);

/* Inner kernels: n elements, byte strides, out first. */
typedef void (*cm__cpu_map1_fn)(int64_t n, char *o, int64_t os, const char *a, int64_t as);
typedef void (*cm__cpu_map2_fn)(int64_t n, char *o, int64_t os, const char *a, int64_t as,
                                const char *b, int64_t bs);

/* Test and benchmark hook for the tiled transpose's destination stores:
 * 0 chooses by size (streaming, non-temporal stores for destinations
 * larger than four L2 caches, on x86-64), 1 always streams, -1 never does.
 * Process-wide. */
void cm__cpu_copy_force_streaming(int mode);

/* Conversion kernel from one dtype to another (cast). */
cm__cpu_map1_fn cm__cpu_cast_kernel(cm_dtype from, cm_dtype to);

/* Test hook: with `scalar_only`, float16 casts use the portable scalar
 * path even where the CPU has conversion instructions. Process-wide. */
void cm__cpu_cast_force_scalar(bool scalar_only);

/* The float16 conversion instructions casts use now ("f16c", "neon"), or
 * NULL where the CPU has none or the scalar path is forced. */
const char *cm__cpu_cast_f16_hardware(void);

/* Elementwise kernels; NULL for pairs the core refuses. */
cm__cpu_map1_fn cm__cpu_unary_kernel(cm_unary_op op, cm_dtype dtype);
cm__cpu_map2_fn cm__cpu_binary_kernel(cm_binary_op op, cm_dtype dtype);

/* Reduction of an op the core validated, over host memory. */
cm_status cm__cpu_reduce(const cm__op *op, cm__cpu_nd *nd);

/* The backend entry (cm__backend.run_op). */
cm_status cm__cpu_run_op(cm_device *device, const cm__op *op);

#endif /* CMETAL_CPU_OPS_H */
