/* SPDX-License-Identifier: MIT */
/* The CPU backend's N-d iteration (cpu_nd.c). Internal to runtime/cpu. */
#ifndef CMETAL_CPU_ND_H
#define CMETAL_CPU_ND_H

#include "cpu_pool.h"

#include <cmetal/tensor.h>

#include <stdint.h>

#define CM__CPU_MAXOPS 3

/* |v| of a stride (strides fit in a byte extent, never INT64_MIN). */
static inline int64_t cm__abs64(int64_t v) {
    return v < 0 ? -v : v;
}

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

/* Slices axis `axis` of nd to [begin, end): shape and every operand's base
 * move, strides stay. */
void cm__cpu_nd_slice(cm__cpu_nd *nd, int32_t axis, int64_t begin, int64_t end);

/* Work over a part of an nd (a copy the callee may change). */
typedef void (*cm__cpu_nd_body)(cm__cpu_nd *part, void *ctx);

/* Runs body over all of nd: once on the calling thread when the pool has
 * one thread or `bytes` (the memory the op touches) is below
 * CM__CPU_PARALLEL_MIN_BYTES; else cut along one axis (the outermost one
 * at least as long as the thread count, or else the longest) into one
 * part per thread, run by the pool. The body must give each element of
 * the output the same value whatever part it is in. */
void cm__cpu_nd_split(cm__cpu_pool *pool, const cm__cpu_nd *nd, int64_t bytes, cm__cpu_nd_body body,
                      void *ctx);

/* Bytes ahead that contiguous kernels ask for lines on this CPU (4096 on
 * Intel x86-64: into L1 there, and 4x as far into L2), 0 for none
 * (cpu_nd.c; cm__cpu_reduce_force_prefetch sets it for tests). */
uintptr_t cm__cpu_prefetch_distance(void);

/* Asks for the line at p + pf into L1 and the one at p + 4 pf into L2
 * (pf: cm__cpu_prefetch_distance(); 0 asks for nothing). */
static inline void cm__cpu_prefetch_ahead(const void *p, uintptr_t pf) {
#if defined(__GNUC__) || defined(__clang__)
    if (pf != 0) {
        __builtin_prefetch((const void *)((uintptr_t)p + pf), 0, 3);
        __builtin_prefetch((const void *)((uintptr_t)p + 4 * pf), 0, 1);
    }
#else
    (void)p, (void)pf;
#endif
}

/* Elements of esize bytes from o to the first address aligned to `align`
 * bytes, at most n: the head a kernel with aligned stores runs apart. */
static inline int64_t cm__cpu_unaligned_head(const void *o, size_t esize, size_t align, int64_t n) {
    const int64_t head = (int64_t)(((align - (uintptr_t)o % align) % align) / esize);
    return head < n ? head : n;
}

/* Test hook: the contiguous and column kernels ask for lines `distance`
 * bytes ahead (and 4 x distance) on x86-64 whatever the CPU's vendor; 0
 * none; negative: back to the CPU's choice (4096 on Intel, none elsewhere).
 * The bits must not change. Process-wide; a no-op elsewhere. */
void cm__cpu_reduce_force_prefetch(int distance);

#endif /* CMETAL_CPU_ND_H */
