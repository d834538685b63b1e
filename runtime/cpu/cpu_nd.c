/* SPDX-License-Identifier: MIT */
/* The CPU backend's N-d iteration: dimension coalescing, the walk over
 * runs of the innermost axis, and the split of an iteration into parts for
 * the device's threads. Used by cpu_ops.c and cpu_reduce.c; sees only
 * cpu_pool.c below it. */
#include "cpu_nd.h"

#include "core/internal.h"

#include <stdatomic.h>
#include <stdbool.h>

static void cm__nd_remove_axis(cm__cpu_nd *nd, int32_t k) {
    for (int32_t j = k; j + 1 < nd->ndim; ++j) {
        nd->shape[j] = nd->shape[j + 1];
        for (int32_t o = 0; o < nd->nops; ++o)
            nd->strides[o][j] = nd->strides[o][j + 1];
    }
    nd->ndim--;
}

void cm__cpu_nd_simplify(cm__cpu_nd *nd, int32_t key) {
    for (int32_t k = nd->ndim - 1; k >= 0; --k)
        if (nd->shape[k] == 1)
            cm__nd_remove_axis(nd, k);
    if (key >= 0) {
        /* Walk key's negative axes forwards (every operand flips with it,
         * which only reorders the element visits). */
        for (int32_t k = 0; k < nd->ndim; ++k) {
            const int64_t ks = nd->strides[key][k];
            const int64_t other = nd->nops > 1 ? nd->strides[key == 0 ? 1 : 0][k] : 0;
            if (ks < 0 || (ks == 0 && other < 0)) {
                for (int32_t o = 0; o < nd->nops; ++o) {
                    nd->base[o] += (nd->shape[k] - 1) * nd->strides[o][k];
                    nd->strides[o][k] = -nd->strides[o][k];
                }
            }
        }
        /* Stable insertion sort: largest |stride| of key outermost; ties
         * ordered by the other operands. */
        for (int32_t i = 1; i < nd->ndim; ++i) {
            for (int32_t j = i; j > 0; --j) {
                bool swap = false;
                for (int32_t o = 0; o < nd->nops; ++o) {
                    const int32_t op = (o + key) % nd->nops;
                    const int64_t a = cm__abs64(nd->strides[op][j - 1]);
                    const int64_t b = cm__abs64(nd->strides[op][j]);
                    if (a != b) {
                        swap = a < b;
                        break;
                    }
                }
                if (!swap)
                    break;
                int64_t t = nd->shape[j];
                nd->shape[j] = nd->shape[j - 1];
                nd->shape[j - 1] = t;
                for (int32_t o = 0; o < nd->nops; ++o) {
                    t = nd->strides[o][j];
                    nd->strides[o][j] = nd->strides[o][j - 1];
                    nd->strides[o][j - 1] = t;
                }
            }
        }
    }
    /* Merge axis k into k + 1 when k steps exactly over all of k + 1. */
    for (int32_t k = nd->ndim - 2; k >= 0; --k) {
        bool merge = true;
        for (int32_t o = 0; merge && o < nd->nops; ++o) {
            int64_t step; /* wraps only for views over 2^62 bytes: then no merge */
            merge = !__builtin_mul_overflow(nd->strides[o][k + 1], nd->shape[k + 1], &step) &&
                    nd->strides[o][k] == step;
        }
        if (merge) {
            nd->shape[k + 1] *= nd->shape[k];
            cm__nd_remove_axis(nd, k);
        }
    }
}

void cm__cpu_nd_foreach(const cm__cpu_nd *nd, cm__cpu_run_fn fn, void *ctx) {
    char *p[CM__CPU_MAXOPS] = {NULL};
    int64_t s[CM__CPU_MAXOPS] = {0};
    for (int32_t o = 0; o < nd->nops; ++o)
        p[o] = nd->base[o];
    if (nd->ndim == 0) {
        fn(1, p, s, ctx);
        return;
    }
    const int32_t last = nd->ndim - 1;
    for (int32_t o = 0; o < nd->nops; ++o)
        s[o] = nd->strides[o][last];
    int64_t idx[CM_MAX_NDIM] = {0};
    for (;;) {
        fn(nd->shape[last], p, s, ctx);
        int32_t k = last - 1;
        /* Never a pointer past the view: step, or rewind an axis by
         * (shape - 1) strides, which lies inside the validated extent. */
        for (; k >= 0; --k) {
            if (++idx[k] < nd->shape[k]) {
                for (int32_t o = 0; o < nd->nops; ++o)
                    p[o] += nd->strides[o][k];
                break;
            }
            for (int32_t o = 0; o < nd->nops; ++o)
                p[o] -= nd->strides[o][k] * (nd->shape[k] - 1);
            idx[k] = 0;
        }
        if (k < 0)
            return;
    }
}

void cm__cpu_nd_slice(cm__cpu_nd *nd, int32_t axis, int64_t begin, int64_t end) {
    for (int32_t o = 0; o < nd->nops; ++o)
        nd->base[o] += begin * nd->strides[o][axis];
    nd->shape[axis] = end - begin;
}

typedef struct cm__split {
    const cm__cpu_nd *nd;
    int32_t axis;
    int64_t chunk;
    cm__cpu_nd_body body;
    void *ctx;
} cm__split;

static void cm__split_task(void *ctx, int64_t t) {
    const cm__split *c = ctx;
    cm__cpu_nd part = *c->nd;
    const int64_t begin = t * c->chunk;
    const int64_t end =
        part.shape[c->axis] - begin < c->chunk ? part.shape[c->axis] : begin + c->chunk;
    cm__cpu_nd_slice(&part, c->axis, begin, end);
    c->body(&part, c->ctx);
}

void cm__cpu_nd_split(cm__cpu_pool *pool, const cm__cpu_nd *nd, int64_t bytes, cm__cpu_nd_body body,
                      void *ctx) {
    const int64_t threads = (int64_t)cm__cpu_pool_threads(pool);
    int32_t axis = -1;
    if (threads > 1 && bytes >= CM__CPU_PARALLEL_MIN_BYTES) {
        for (int32_t k = 0; k < nd->ndim && axis < 0; ++k)
            if (nd->shape[k] >= threads)
                axis = k;
        for (int32_t k = 0; k < nd->ndim && axis < 0; ++k)
            if (nd->shape[k] > 1 && (axis < 0 || nd->shape[k] > nd->shape[axis]))
                axis = k;
    }
    if (axis < 0) {
        cm__cpu_nd whole = *nd;
        body(&whole, ctx);
        return;
    }
    const int64_t n = nd->shape[axis];
    const int64_t parts = n < threads ? n : threads;
    cm__split c = {
        .nd = nd, .axis = axis, .chunk = cm__div_up_i64(n, parts), .body = body, .ctx = ctx};
    cm__cpu_pool_run(pool, cm__div_up_i64(n, c.chunk), cm__split_task, &c);
}

/* The prefetch distance of the copy, cast and reduce kernels, below them
 * all. Contiguous kernels ask for the line cm__cpu_prefetch_distance()
 * bytes ahead into L1 (prefetcht0) and the line four times as far ahead
 * into L2 (prefetcht2): on Intel server cores one stream of loads is otherwise
 * bound by memory latency (a Xeon host read float32 sums at 0.36 of
 * memcpy without, 0.66 with 4 KiB; adding the far request, 16 KiB ahead,
 * 0.66-0.69 -> 0.71-0.74 in one session; tools/bench/read_roofline.c's
 * plain reads there: t0 alone 0.69-0.71, with a t2 8-16 KiB ahead
 * 0.73-0.76), while AMD's own prefetchers did better alone. 0: none. */
#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
#include <cpuid.h>
static atomic_int cm__pf_state; /* distance + 1; 0 not asked yet */
void cm__cpu_reduce_force_prefetch(int distance) {
    atomic_store_explicit(&cm__pf_state, distance < 0 ? 0 : distance + 1, memory_order_relaxed);
}
uintptr_t cm__cpu_prefetch_distance(void) {
    atomic_int *const state = &cm__pf_state;
    int v = atomic_load_explicit(state, memory_order_relaxed);
    if (v == 0) {
        /* cpuid's vendor (leaf 0): libgcc's __builtin_cpu_is is not
         * everywhere (macOS targets lack its __cpu_model) */
        unsigned a = 0, b = 0, c = 0, d = 0;
        const bool intel = __get_cpuid(0, &a, &b, &c, &d) && b == 0x756e6547u /* Genu */ &&
                           d == 0x49656e69u /* ineI */ && c == 0x6c65746eu /* ntel */;
        v = (intel ? 4096 : 0) + 1;
        atomic_store_explicit(state, v, memory_order_relaxed);
    }
    return (uintptr_t)(v - 1);
}
#else
void cm__cpu_reduce_force_prefetch(int distance) {
    (void)distance; /* no prefetching here */
}
uintptr_t cm__cpu_prefetch_distance(void) {
    return 0;
}
#endif
