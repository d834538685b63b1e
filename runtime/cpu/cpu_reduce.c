/* CPU reductions: sum and mean accumulate floats in double and integers in
 * 64 bits (wrapping); max and min compare exactly and propagate NaN. A
 * contiguous run is split over eight interleaved partial results, combined
 * at the end (a fixed order: results are deterministic). The
 * kept axes are walked outside, the reduced ones inside; when the reduced
 * axis is strided but a kept axis is contiguous (reducing the rows of a
 * row-major matrix), whole rows are accumulated into a vector instead. */
#include "cpu_ops.h"

#include "core/convert.h"

#include <math.h>
#include <string.h>

typedef union cm__acc {
    double d;
    int64_t i;
    uint64_t u;
} cm__acc;

enum { CM__RSUM, CM__RMAX, CM__RMIN, CM__RKINDS };

#define CM__VBLOCK 1024

/* The vector form's accumulators, one typed array per domain (typed
 * arrays, not unions, so that the loops vectorise). */
typedef struct cm__vacc {
    double d[CM__VBLOCK];
    int64_t i[CM__VBLOCK];
    uint64_t u[CM__VBLOCK];
} cm__vacc;

/* Accumulates n elements at p (byte stride s) into acc (a cm__acc), or,
 * for the vector form, contiguous element k into the cm__vacc's [k]. */
typedef void (*cm__acc_fn)(int64_t n, const char *p, int64_t s, void *acc);

/* Float max/min: once NaN, stays NaN. */
#define CM__FMAX(m, x) (((m) == (m) && ((x) != (x) || (x) > (m))) ? (x) : (m))
#define CM__FMIN(m, x) (((m) == (m) && ((x) != (x) || (x) < (m))) ? (x) : (m))
#define CM__IMAX(m, x) ((x) > (m) ? (x) : (m))
#define CM__IMIN(m, x) ((x) < (m) ? (x) : (m))

/* Scalar and vector accumulators over elements of T, loaded as AT into
 * acc field FIELD. */
#define CM__ACC(name, T, AT, FIELD, LOAD, STEP)                                           \
    static void name(int64_t n, const char *p, int64_t s, void *acc_) {                   \
        cm__acc *acc = acc_;                                                              \
        AT m = acc->FIELD;                                                                \
        if (s == (int64_t)sizeof(T)) {                                                    \
            const T *q = (const T *)(const void *)p;                                      \
            int64_t i = 0;                                                                \
            if (n >= 8) { /* eight independent chains: no add-latency bound */           \
                AT k[8];                                                                  \
                for (int j = 0; j < 8; ++j)                                               \
                    k[j] = (AT)LOAD(q[j]);                                                \
                for (i = 8; i + 8 <= n; i += 8)                                           \
                    for (int j = 0; j < 8; ++j) {                                         \
                        const AT x = (AT)LOAD(q[i + j]);                                  \
                        k[j] = STEP(k[j], x);                                             \
                    }                                                                     \
                for (int j = 0; j < 8; ++j)                                               \
                    m = STEP(m, k[j]);                                                    \
            }                                                                             \
            for (; i < n; ++i) {                                                          \
                const AT x = (AT)LOAD(q[i]);                                              \
                m = STEP(m, x);                                                           \
            }                                                                             \
        } else {                                                                          \
            for (int64_t i = 0; i < n; ++i) {                                             \
                const AT x = (AT)LOAD(*(const T *)(const void *)(p + i * s));             \
                m = STEP(m, x);                                                           \
            }                                                                             \
        }                                                                                 \
        acc->FIELD = m;                                                                   \
    }                                                                                     \
    static void name##_vec(int64_t n, const char *p, int64_t s, void *acc_) {             \
        (void)s; /* contiguous */                                                         \
        AT *a = ((cm__vacc *)acc_)->FIELD;                                                \
        const T *q = (const T *)(const void *)p;                                          \
        for (int64_t i = 0; i < n; ++i) {                                                 \
            const AT x = (AT)LOAD(q[i]);                                                  \
            a[i] = STEP(a[i], x);                                                         \
        }                                                                                 \
    }

#define CM__ADD(m, x) ((m) + (x))
/* Integers sum as uint64 (wrapping); signed ones sign-extend first. */
#define CM__SEXT(v) ((uint64_t)(int64_t)(v))

#define CM__FLOAT_ACCS(E, T, LD)                               \
    CM__ACC(cm__sum_##E, T, double, d, LD, CM__ADD)            \
    CM__ACC(cm__max_##E, T, double, d, LD, CM__FMAX)           \
    CM__ACC(cm__min_##E, T, double, d, LD, CM__FMIN)
#define CM__SIGNED_ACCS(E, T)                                         \
    CM__ACC(cm__sum_##E, T, uint64_t, u, CM__SEXT, CM__ADD)           \
    CM__ACC(cm__max_##E, T, int64_t, i, CM__LD_INT, CM__IMAX)         \
    CM__ACC(cm__min_##E, T, int64_t, i, CM__LD_INT, CM__IMIN)
#define CM__UNSIGNED_ACCS(E, T)                                       \
    CM__ACC(cm__sum_##E, T, uint64_t, u, CM__LD_UINT, CM__ADD)        \
    CM__ACC(cm__max_##E, T, uint64_t, u, CM__LD_UINT, CM__IMAX)       \
    CM__ACC(cm__min_##E, T, uint64_t, u, CM__LD_UINT, CM__IMIN)

CM__SIGNED_ACCS(CM_BOOL, uint8_t)
CM__SIGNED_ACCS(CM_INT8, int8_t)
CM__SIGNED_ACCS(CM_INT16, int16_t)
CM__SIGNED_ACCS(CM_INT32, int32_t)
CM__SIGNED_ACCS(CM_INT64, int64_t)
CM__UNSIGNED_ACCS(CM_UINT8, uint8_t)
CM__UNSIGNED_ACCS(CM_UINT16, uint16_t)
CM__UNSIGNED_ACCS(CM_UINT32, uint32_t)
CM__UNSIGNED_ACCS(CM_UINT64, uint64_t)
CM__FLOAT_ACCS(CM_FLOAT16, uint16_t, CM__LD_F16)
CM__FLOAT_ACCS(CM_BFLOAT16, uint16_t, CM__LD_BF16)
CM__FLOAT_ACCS(CM_FLOAT32, float, CM__LD_SAME)
CM__FLOAT_ACCS(CM_FLOAT64, double, CM__LD_SAME)

#define CM__ACC_ROW(E, T, DOM, LD, KIND, SAT)                                            \
    [E] = {{cm__sum_##E, cm__max_##E, cm__min_##E},                                      \
           {cm__sum_##E##_vec, cm__max_##E##_vec, cm__min_##E##_vec}},
/* [dtype][scalar, vector][kind] */
static const cm__acc_fn cm__acc_table[CM_DTYPE_COUNT][2][CM__RKINDS] = {
    CM__DTYPE_LIST(CM__ACC_ROW)};

/* How one reduction starts and ends for the input dtype. */
typedef struct cm__red {
    int kind;        /* CM__RSUM, CM__RMAX, CM__RMIN */
    bool mean;
    int64_t count;   /* elements per output, for mean */
    cm_dtype acc_dtype; /* CM_FLOAT64, CM_INT64 or CM_UINT64 */
    char field;      /* the cm__acc member used: 'd', 'i' or 'u' */
    cm__acc init;
    cm_dtype out_dtype;
    cm__acc_fn scalar, vector;
} cm__red;

static void cm__red_setup(cm__red *r, const cm__op *op, int64_t count) {
    const cm_dtype in = op->in[0].dtype;
    const cm_dtype_kind k = cm__dtype(in)->kind;
    const bool is_float = k == CM_KIND_FLOAT;
    const bool is_signed = k == CM_KIND_SIGNED || k == CM_KIND_BOOL;
    memset(r, 0, sizeof *r);
    r->mean = op->code == CM_REDUCE_MEAN;
    r->count = count;
    r->kind = op->code == CM_REDUCE_MAX ? CM__RMAX
              : op->code == CM_REDUCE_MIN ? CM__RMIN
                                          : CM__RSUM;
    r->acc_dtype = is_float ? CM_FLOAT64 : is_signed ? CM_INT64 : CM_UINT64;
    r->field = is_float ? 'd' : (is_signed && r->kind != CM__RSUM) ? 'i' : 'u';
    r->out_dtype = op->out.dtype;
    if (r->kind == CM__RSUM) {
        if (is_float)
            r->init.d = 0.0;
        else
            r->init.u = 0;
    } else if (is_float) {
        r->init.d = r->kind == CM__RMAX ? -INFINITY : INFINITY;
    } else if (is_signed) {
        r->init.i = r->kind == CM__RMAX ? INT64_MIN : INT64_MAX;
    } else {
        r->init.u = r->kind == CM__RMAX ? 0 : UINT64_MAX;
    }
    r->scalar = cm__acc_table[in][0][r->kind];
    r->vector = cm__acc_table[in][1][r->kind];
}

static void cm__red_store(const cm__red *r, char *dst, cm__acc acc) {
    const cm_dtype_kind out_kind = cm__dtype(r->out_dtype)->kind;
    if (r->mean && r->acc_dtype != CM_FLOAT64 && r->count > 0 &&
        (out_kind == CM_KIND_SIGNED || out_kind == CM_KIND_UNSIGNED)) {
        /* Integers into integers: the exact quotient, truncated toward 0. */
        cm__acc q;
        q.u = r->acc_dtype == CM_INT64 ? (uint64_t)((int64_t)acc.u / r->count)
                                       : acc.u / (uint64_t)r->count;
        cm__convert_element(r->out_dtype, dst, r->acc_dtype, &q);
        return;
    }
    if (r->mean) {
        double sum = r->acc_dtype == CM_FLOAT64 ? acc.d
                     : r->acc_dtype == CM_INT64 ? (double)(int64_t)acc.u
                                                : (double)acc.u;
        const double mean = sum / (double)r->count;
        cm__convert_element(r->out_dtype, dst, CM_FLOAT64, &mean);
        return;
    }
    cm__convert_element(r->out_dtype, dst, r->acc_dtype, &acc);
}

/* ------------------------------------------------------------ walking */

typedef struct cm__red_ctx {
    const cm__red *r;
    cm__cpu_nd inner;   /* reduced axes, operand 0 = input */
    cm__acc acc;
} cm__red_ctx;

static void cm__red_inner_run(int64_t n, char *const *p, const int64_t *s, void *ctx) {
    cm__red_ctx *c = ctx;
    c->r->scalar(n, p[0], s[0], &c->acc);
}

/* One run of kept axes: each output reduces the inner axes at its input. */
static void cm__red_outer_run(int64_t n, char *const *p, const int64_t *s, void *ctx) {
    cm__red_ctx *c = ctx;
    for (int64_t i = 0; i < n; ++i) {
        c->acc = c->r->init;
        c->inner.base[0] = p[1] + i * s[1];
        cm__cpu_nd_foreach(&c->inner, cm__red_inner_run, c);
        cm__red_store(c->r, p[0] + i * s[0], c->acc);
    }
}

/* Vector form: kept nd's innermost axis is contiguous in the input and the
 * one reduced axis (stride rs, length rn) is walked row by row. */
typedef struct cm__vec_ctx {
    const cm__red *r;
    int64_t rn, rs;
    cm__vacc *acc;
} cm__vec_ctx;

static void cm__red_vec_run(int64_t n, char *const *p, const int64_t *s, void *ctx) {
    const cm__vec_ctx *c = ctx;
    cm__vacc *v = c->acc;
    const cm__red *r = c->r;
    for (int64_t j0 = 0; j0 < n; j0 += CM__VBLOCK) {
        const int64_t m = n - j0 < CM__VBLOCK ? n - j0 : CM__VBLOCK;
        for (int64_t j = 0; j < m; ++j) {
            v->d[j] = r->init.d;
            v->i[j] = r->init.i;
            v->u[j] = r->init.u;
        }
        const char *row = p[1] + j0 * s[1];
        for (int64_t i = 0; i < c->rn; ++i)
            r->vector(m, row + i * c->rs, s[1], v);
        for (int64_t j = 0; j < m; ++j) {
            cm__acc a;
            if (r->field == 'd')
                a.d = v->d[j];
            else if (r->field == 'i')
                a.i = v->i[j];
            else
                a.u = v->u[j];
            cm__red_store(r, p[0] + (j0 + j) * s[0], a);
        }
    }
}

cm_status cm__cpu_reduce(const cm__op *op, cm__cpu_nd *nd) {
    /* Split the axes into kept (out, in) and reduced (in). */
    cm__cpu_nd kept, red;
    memset(&kept, 0, sizeof kept);
    memset(&red, 0, sizeof red);
    kept.nops = 2;
    kept.base[0] = nd->base[0];
    kept.base[1] = nd->base[1];
    red.nops = 1;
    red.base[0] = nd->base[1];
    int64_t count = 1;
    for (int32_t k = 0; k < nd->ndim; ++k) {
        if (op->axis < 0 || k == op->axis) {
            red.shape[red.ndim] = nd->shape[k];
            red.strides[0][red.ndim++] = nd->strides[1][k];
            count *= nd->shape[k];
        } else {
            kept.shape[kept.ndim] = nd->shape[k];
            kept.strides[0][kept.ndim] = nd->strides[0][k];
            kept.strides[1][kept.ndim++] = nd->strides[1][k];
        }
    }
    cm__red r;
    cm__red_setup(&r, op, count);
    cm__cpu_nd_simplify(&red, 0);
    /* Flipping negative reduced axes moved the start of every reduction by
     * the same amount; kept axes address the reductions from there. */
    kept.base[1] += red.base[0] - nd->base[1];
    cm__cpu_nd_simplify(&kept, 1);
    const int64_t isz = (int64_t)cm__dtype(op->in[0].dtype)->size;
    if (red.ndim == 1 && kept.ndim >= 1 && red.strides[0][0] != isz &&
        kept.strides[1][kept.ndim - 1] == isz) {
        cm__vacc *buf = cm__alloc_raw(sizeof *buf, 64);
        if (buf != NULL) {
            cm__vec_ctx c = {.r = &r, .rn = red.shape[0], .rs = red.strides[0][0], .acc = buf};
            cm__cpu_nd_foreach(&kept, cm__red_vec_run, &c);
            cm__free(buf);
            return CM_OK;
        } /* else the per-output walk below needs no memory */
    }
    cm__red_ctx c = {.r = &r, .inner = red};
    cm__cpu_nd_foreach(&kept, cm__red_outer_run, &c);
    return CM_OK;
}
