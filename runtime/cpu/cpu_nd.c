/* SPDX-License-Identifier: MIT */
/* The CPU backend's N-d iteration: dimension coalescing, the walk over
 * runs of the innermost axis, and the split of an iteration into parts for
 * the device's threads. Used by cpu_ops.c and cpu_reduce.c; sees only
 * cpu_pool.c below it. */
#include "cpu_nd.h"

#include "core/internal.h"

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
    const int64_t end = part.shape[c->axis] - begin < c->chunk ? part.shape[c->axis]
                                                               : begin + c->chunk;
    cm__cpu_nd_slice(&part, c->axis, begin, end);
    c->body(&part, c->ctx);
}

void cm__cpu_nd_split(cm__cpu_pool *pool, const cm__cpu_nd *nd, int64_t bytes,
                      cm__cpu_nd_body body, void *ctx) {
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
    cm__split c = {.nd = nd, .axis = axis, .chunk = cm__div_up_i64(n, parts), .body = body,
                   .ctx = ctx};
    cm__cpu_pool_run(pool, cm__div_up_i64(n, c.chunk), cm__split_task, &c);
}
