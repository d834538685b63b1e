/* CPU ops: iteration with dimension coalescing, fill, copy (memcpy runs and
 * tiled transposes), and dispatch of cast, elementwise and reduce kernels. */
#include "cpu_ops.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ iteration */

static void cm__nd_remove_axis(cm__cpu_nd *nd, int32_t k) {
    for (int32_t j = k; j + 1 < nd->ndim; ++j) {
        nd->shape[j] = nd->shape[j + 1];
        for (int32_t o = 0; o < nd->nops; ++o)
            nd->strides[o][j] = nd->strides[o][j + 1];
    }
    nd->ndim--;
}

static int64_t cm__abs64(int64_t v) {
    return v < 0 ? -v : v;
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
        for (int32_t o = 0; merge && o < nd->nops; ++o)
            merge = nd->strides[o][k] == nd->strides[o][k + 1] * nd->shape[k + 1];
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
        for (; k >= 0; --k) {
            for (int32_t o = 0; o < nd->nops; ++o)
                p[o] += nd->strides[o][k];
            if (++idx[k] < nd->shape[k])
                break;
            for (int32_t o = 0; o < nd->nops; ++o)
                p[o] -= nd->strides[o][k] * nd->shape[k];
            idx[k] = 0;
        }
        if (k < 0)
            return;
    }
}

/* ------------------------------------------------------------ fill */

#define CM__TYPED_LOOP(T, n, dst, ds, STMT_VALUE)                        \
    do {                                                                \
        if ((ds) == (int64_t)sizeof(T)) {                               \
            T *d_ = (T *)(void *)(dst);                                 \
            for (int64_t i_ = 0; i_ < (n); ++i_)                        \
                d_[i_] = STMT_VALUE;                                    \
        } else {                                                        \
            for (int64_t i_ = 0; i_ < (n); ++i_)                        \
                *(T *)(void *)((dst) + i_ * (ds)) = STMT_VALUE;         \
        }                                                               \
    } while (0)

typedef struct cm__fill_ctx {
    size_t size;
    const uint8_t *value;
    bool bytes_equal; /* every byte of the value is value[0] */
} cm__fill_ctx;

static void cm__fill_run(int64_t n, char *const *p, const int64_t *s, void *ctx) {
    const cm__fill_ctx *c = ctx;
    if (c->bytes_equal && s[0] == (int64_t)c->size) {
        memset(p[0], c->value[0], (size_t)n * c->size);
        return;
    }
    switch (c->size) {
    case 1: {
        const uint8_t v = c->value[0];
        CM__TYPED_LOOP(uint8_t, n, p[0], s[0], v);
        break;
    }
    case 2: {
        uint16_t v;
        memcpy(&v, c->value, sizeof v);
        CM__TYPED_LOOP(uint16_t, n, p[0], s[0], v);
        break;
    }
    case 4: {
        uint32_t v;
        memcpy(&v, c->value, sizeof v);
        CM__TYPED_LOOP(uint32_t, n, p[0], s[0], v);
        break;
    }
    default: {
        uint64_t v;
        memcpy(&v, c->value, sizeof v);
        CM__TYPED_LOOP(uint64_t, n, p[0], s[0], v);
        break;
    }
    }
}

/* ------------------------------------------------------------ copy */

static void cm__copy_run(int64_t n, char *const *p, const int64_t *s, void *ctx) {
    const size_t size = *(const size_t *)ctx;
    const int64_t isz = (int64_t)size;
    if (s[0] == isz && s[1] == isz) {
        memcpy(p[0], p[1], (size_t)n * size);
        return;
    }
    const char *src = p[1];
    const int64_t ss = s[1];
#define CM__COPY_CASE(T)                                                            \
    if (ss == 0) {                                                                  \
        const T v_ = *(const T *)(const void *)src;                                 \
        CM__TYPED_LOOP(T, n, p[0], s[0], v_);                                       \
    } else if (ss == isz) {                                                         \
        const T *s_ = (const T *)(const void *)src;                                 \
        CM__TYPED_LOOP(T, n, p[0], s[0], s_[i_]);                                   \
    } else {                                                                        \
        CM__TYPED_LOOP(T, n, p[0], s[0], *(const T *)(const void *)(src + i_ * ss)); \
    }
    switch (size) {
    case 1: CM__COPY_CASE(uint8_t) break;
    case 2: CM__COPY_CASE(uint16_t) break;
    case 4: CM__COPY_CASE(uint32_t) break;
    default: CM__COPY_CASE(uint64_t) break;
    }
#undef CM__COPY_CASE
}

/* Transposing copy of the last two axes: dst is contiguous along the last
 * axis (j) and src along the one before (i).
 *
 * Memory, not arithmetic, sets the speed. src is read as square panels of
 * CM__PANEL_BYTES-long row pieces into a small buffer (in L1 for 4-byte
 * elements), each piece with one wide copy; each dst row piece is then
 * gathered from the buffer and stored with one wide copy, since scalar
 * stores that miss fill the store buffer. 256-byte pieces measured best
 * on the (shared, loaded) development machine; 1 KiB ones were as good
 * only when it was quiet. */
typedef struct cm__tile_ctx {
    size_t size;
    int64_t rows, cols;  /* i: axis ndim-2, j: axis ndim-1 */
    int64_t drow, scol;  /* byte strides: dst along i, src along j */
    int64_t panel;       /* elements per panel side */
    char *buf;
} cm__tile_ctx;

#define CM__PANEL_MIN 32
#define CM__PANEL_BYTES 256
#define CM__PANEL_MAX 256

/* buf rows are padded by one cache line so that the column walk of the
 * write phase spreads over the cache sets. */
#define CM__PANEL_CASE(T)                                                                \
    {                                                                                    \
        const int64_t P = c->panel, S = P + 64 / (int64_t)sizeof(T);                     \
        T *buf = (T *)(void *)c->buf; /* buf[j * S + i] */                               \
        for (int64_t bj = 0; bj < c->cols; bj += P) {                                    \
            const int64_t nj = c->cols - bj < P ? c->cols - bj : P;                      \
            for (int64_t bi = 0; bi < c->rows; bi += P) {                                \
                const int64_t ni = c->rows - bi < P ? c->rows - bi : P;                  \
                for (int64_t j = 0; j < nj; ++j)                                         \
                    memcpy(buf + j * S, src + (bj + j) * c->scol + bi * (int64_t)sizeof(T), \
                           (size_t)ni * sizeof(T));                                      \
                for (int64_t i = 0; i < ni; ++i) {                                       \
                    /* Gather the dst row in L1, then store it with wide moves:       \
                     * scalar stores that miss would fill the store buffer. */        \
                    T row[CM__PANEL_BYTES / sizeof(T)];                                  \
                    const T *b_ = buf + i;                                               \
                    for (int64_t j = 0; j < nj; ++j)                                     \
                        row[j] = b_[j * S];                                              \
                    memcpy(dst + (bi + i) * c->drow + bj * (int64_t)sizeof(T), row,      \
                           (size_t)nj * sizeof(T));                                      \
                }                                                                        \
            }                                                                            \
        }                                                                                \
    }

static void cm__tile_run(int64_t n, char *const *p, const int64_t *s, void *ctx) {
    const cm__tile_ctx *c = ctx;
    /* One call per outer index: the two transposed axes are not in nd. */
    (void)n;
    (void)s;
    char *dst = p[0];
    const char *src = p[1];
    switch (c->size) {
    case 1: CM__PANEL_CASE(uint8_t) break;
    case 2: CM__PANEL_CASE(uint16_t) break;
    case 4: CM__PANEL_CASE(uint32_t) break;
    default: CM__PANEL_CASE(uint64_t) break;
    }
}
#undef CM__PANEL_CASE

/* If the copy is a transpose of its two fastest axes, runs it tiled and
 * returns true. */
static bool cm__copy_tiled(cm__cpu_nd *nd, size_t size) {
    const int64_t isz = (int64_t)size;
    const int32_t last = nd->ndim - 1;
    if (nd->ndim < 2 || nd->strides[0][last] != isz || nd->strides[1][last] == isz)
        return false;
    int32_t j = -1;
    for (int32_t k = last - 1; k >= 0; --k)
        if (nd->strides[1][k] == isz) {
            j = k;
            break;
        }
    if (j < 0 || nd->shape[j] < 8 || nd->shape[last] < 8)
        return false;
    /* The panel: CM__PANEL_BYTES per row, no larger than the matrix. */
    int64_t panel = CM__PANEL_BYTES / isz;
    if (panel > CM__PANEL_MAX)
        panel = CM__PANEL_MAX;
    const int64_t big = nd->shape[j] > nd->shape[last] ? nd->shape[j] : nd->shape[last];
    while (panel > CM__PANEL_MIN && panel / 2 >= big)
        panel /= 2;
    char *buf = cm__alloc_raw((size_t)(panel * (panel + 64 / isz)) * size, 64);
    if (buf == NULL)
        return false; /* the element loop needs no memory */
    /* Move axis j next to the last; other axes keep their order. */
    const int64_t shp = nd->shape[j], d = nd->strides[0][j];
    for (int32_t k = j; k + 1 < last; ++k) {
        nd->shape[k] = nd->shape[k + 1];
        nd->strides[0][k] = nd->strides[0][k + 1];
        nd->strides[1][k] = nd->strides[1][k + 1];
    }
    cm__tile_ctx c = {.size = size, .rows = shp, .cols = nd->shape[last], .drow = d,
                      .scol = nd->strides[1][last], .panel = panel, .buf = buf};
    cm__cpu_nd outer = *nd;
    outer.ndim = last - 1;
    /* One call per index of the outer axes, through a size-1 inner axis. */
    outer.shape[outer.ndim] = 1;
    outer.strides[0][outer.ndim] = 0;
    outer.strides[1][outer.ndim] = 0;
    outer.ndim++;
    cm__cpu_nd_foreach(&outer, cm__tile_run, &c);
    cm__free(buf);
    return true;
}

/* ------------------------------------------------------------ elementwise */

typedef struct cm__map_ctx {
    cm__cpu_map1_fn f1;
    cm__cpu_map2_fn f2;
} cm__map_ctx;

static void cm__map1_run(int64_t n, char *const *p, const int64_t *s, void *ctx) {
    ((const cm__map_ctx *)ctx)->f1(n, p[0], s[0], p[1], s[1]);
}

static void cm__map2_run(int64_t n, char *const *p, const int64_t *s, void *ctx) {
    ((const cm__map_ctx *)ctx)->f2(n, p[0], s[0], p[1], s[1], p[2], s[2]);
}

/* ------------------------------------------------------------ entry */

static cm_status cm__cpu_operand(const cm__op *op, const char *name, const cm__operand *o,
                                 cm__cpu_nd *nd, int32_t index) {
    const cm_buffer *b = o->buffer;
    const int64_t size = (int64_t)cm__dtype(o->dtype)->size;
    if (b->host == NULL)
        return cm__fail_as(op->func, CM_ERR_NOT_HOST_VISIBLE,
                           "%s has no host memory, which the CPU device needs", name);
    char *base = (char *)b->host + o->byte_offset;
    if ((uintptr_t)base % (uintptr_t)size != 0)
        return cm__fail_as(op->func, CM_ERR_INVALID_ARGUMENT,
                           "%s data at %p is not aligned to its %" PRId64
                           "-byte elements, which the CPU device needs",
                           name, (void *)base, size);
    nd->base[index] = base;
    for (int32_t k = 0; k < op->ndim; ++k)
        nd->strides[index][k] = o->strides[k] * size;
    return CM_OK;
}

cm_status cm__cpu_run_op(cm_device *device, const cm__op *op) {
    (void)device;
    cm__cpu_nd nd;
    memset(&nd, 0, sizeof nd);
    nd.ndim = op->ndim;
    nd.nops = 1 + op->nin;
    memcpy(nd.shape, op->shape, sizeof nd.shape);
    CM__TRY(cm__cpu_operand(op, "the output", &op->out, &nd, 0));
    for (int32_t i = 0; i < op->nin; ++i)
        CM__TRY(cm__cpu_operand(op, i == 0 ? "the first input" : "the second input", &op->in[i],
                                &nd, i + 1));
    const size_t size = cm__dtype(op->out.dtype)->size;
    switch (op->kind) {
    case CM__OP_FILL: {
        cm__fill_ctx c = {.size = size, .value = op->value.bytes, .bytes_equal = true};
        for (size_t i = 1; i < size; ++i)
            c.bytes_equal = c.bytes_equal && c.value[i] == c.value[0];
        cm__cpu_nd_simplify(&nd, 0);
        cm__cpu_nd_foreach(&nd, cm__fill_run, &c);
        return CM_OK;
    }
    case CM__OP_COPY: {
        cm__cpu_nd_simplify(&nd, 0);
        bool same = nd.base[0] == nd.base[1];
        for (int32_t k = 0; same && k < nd.ndim; ++k)
            same = nd.strides[0][k] == nd.strides[1][k];
        if (same) /* the identical view: nothing to do */
            return CM_OK;
        if (!cm__copy_tiled(&nd, size))
            cm__cpu_nd_foreach(&nd, cm__copy_run, (void *)&size);
        return CM_OK;
    }
    case CM__OP_CAST: {
        cm__map_ctx c = {.f1 = cm__cpu_cast_kernel(op->in[0].dtype, op->out.dtype)};
        cm__cpu_nd_simplify(&nd, 0);
        cm__cpu_nd_foreach(&nd, cm__map1_run, &c);
        return CM_OK;
    }
    case CM__OP_UNARY: {
        cm__map_ctx c = {.f1 = cm__cpu_unary_kernel((cm_unary_op)op->code, op->out.dtype)};
        if (c.f1 == NULL)
            break;
        cm__cpu_nd_simplify(&nd, 0);
        cm__cpu_nd_foreach(&nd, cm__map1_run, &c);
        return CM_OK;
    }
    case CM__OP_BINARY: {
        cm__map_ctx c = {.f2 = cm__cpu_binary_kernel((cm_binary_op)op->code, op->in[0].dtype)};
        if (c.f2 == NULL)
            break;
        cm__cpu_nd_simplify(&nd, 0);
        cm__cpu_nd_foreach(&nd, cm__map2_run, &c);
        return CM_OK;
    }
    case CM__OP_REDUCE:
        return cm__cpu_reduce(op, &nd);
    }
    return cm__fail_as(op->func, CM_ERR_INTERNAL, "the CPU device has no kernel for op %d/%d",
                       (int)op->kind, (int)op->code);
}
