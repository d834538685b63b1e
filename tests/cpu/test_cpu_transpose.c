/* SPDX-License-Identifier: MIT */
/* The CPU device's tiled transpose (cm_copy of a view whose last two axes
 * are swapped) against an element-by-element reference computed from the
 * views' strides over raw memory: ragged tile edges, every element size,
 * negative strides, sliced sources, batches and strided destinations.
 * Every byte of the destination's buffer is checked, so a tile that writes
 * outside its piece fails too. Fills and float arithmetic, whose large
 * destinations are stored with streaming (non-temporal) stores too, are
 * checked here with the streaming forced on and off. */
#include "cpu/cpu_ops.h"
#include "ops/ops_util.h"

/* A compact tensor whose bytes are a pattern of their position (seed). */
static cm_tensor *patterned(cm_device *dev, cm_dtype d, int32_t ndim, const int64_t *shape,
                            unsigned seed) {
    cm_tensor *t = new_tensor(dev, d, ndim, shape);
    void *p = NULL;
    CHECK(cm_tensor_host_write(t, d, &p));
    const size_t bytes = (size_t)numel_of(ndim, shape) * dsize(d);
    for (size_t i = 0; i < bytes; ++i)
        ((uint8_t *)p)[i] = (uint8_t)(mix(i * 31u + seed) >> 24);
    return t;
}

/* Byte offset in its buffer of view element idx, from the view's strides. */
static size_t offset_of(const cm_tensor_info *v, const int64_t *idx) {
    int64_t off = (int64_t)v->byte_offset;
    for (int32_t k = 0; k < v->ndim; ++k)
        off += idx[k] * v->strides[k] * (int64_t)dsize(v->dtype);
    return (size_t)off;
}

/* cm_copy(src, dst, NULL) where src is a view into src_parent's buffer and dst a
 * view into dst_parent's; both parents are compact. */
static void check_copy(cm_tensor *src, cm_tensor *src_parent, cm_tensor *dst, cm_tensor *dst_parent,
                       const char *what) {
    cm_tensor_info si, di, dpi;
    CHECK(cm_tensor_get_info(src, &si));
    CHECK(cm_tensor_get_info(dst, &di));
    CHECK(cm_tensor_get_info(dst_parent, &dpi));
    const size_t size = dsize(si.dtype);
    const size_t dst_bytes = (size_t)dpi.numel * size;
    const void *sp = NULL;
    void *dp = NULL;
    CHECK(cm_tensor_host_read(src_parent, si.dtype, &sp));
    CHECK(cm_tensor_host_write(dst_parent, di.dtype, &dp));
    memset(dp, 0xa5, dst_bytes); /* bytes outside dst must keep this */
    const uint8_t *source = sp;
    uint8_t *expect = malloc(dst_bytes > 0 ? dst_bytes : 1);
    cr_assert_not_null(expect);
    memcpy(expect, dp, dst_bytes);
    int64_t idx[CM_MAX_NDIM] = {0};
    if (di.numel > 0) {
        do {
            memcpy(expect + offset_of(&di, idx), source + offset_of(&si, idx), size);
        } while (next_index(di.ndim, di.shape, idx));
    }

    CHECK(cm_copy(src, dst, NULL));

    const void *rp = NULL;
    CHECK(cm_tensor_host_read(dst_parent, di.dtype, &rp));
    const uint8_t *result = rp;
    for (size_t b = 0; b < dst_bytes; ++b) {
        if (result[b] == expect[b])
            continue;
        /* Name the element: its index in dst when it is one of dst's. */
        char where[128] = "outside dst";
        memset(idx, 0, sizeof idx);
        do {
            const size_t off = offset_of(&di, idx);
            if (b >= off && b < off + size) {
                int n = snprintf(where, sizeof where, "dst index");
                for (int32_t k = 0; k < di.ndim && n > 0 && (size_t)n < sizeof where; ++k)
                    n += snprintf(where + n, sizeof where - (size_t)n, " %lld", (long long)idx[k]);
                break;
            }
        } while (next_index(di.ndim, di.shape, idx));
        cr_assert_fail("%s, %s: byte %zu of dst's buffer (%s) is 0x%02x, expected 0x%02x", what,
                       dname(si.dtype), b, where, result[b], expect[b]);
    }
    free(expect);
}

static const cm_dtype sized[] = {CM_UINT8, CM_FLOAT16, CM_FLOAT32, CM_FLOAT64}; /* 1, 2, 4, 8 */

/* dst [rows, cols]: shapes off the tile sizes (128, 64, 64, 32 elements a
 * side for 1, 2, 4, 8 bytes), single rows and columns, and exact tiles. */
static const int64_t shapes2[]
                            [2] =
                                {
                                    {1, 1},     {1, 37},    {37, 1},    {7, 13},  {65, 129},
                                    {1000, 3},  {3, 1000},  {2, 300},   {33, 31}, {64, 64},
                                    {128, 128}, {129, 257}, {300, 130}, {17, 16}, {129, 256},
                                    {70, 320}, /* rows of whole cache lines: streaming stores where forced */
};
#define N_SHAPES2 (sizeof shapes2 / sizeof shapes2[0])

static void every_element_size_and_ragged_shape(void) {
    cm_device *dev = cpu();
    for (size_t d = 0; d < 4; ++d) {
        for (size_t s = 0; s < N_SHAPES2; ++s) {
            const int64_t rows = shapes2[s][0], cols = shapes2[s][1];
            const int64_t pshape[2] = {cols, rows};
            cm_tensor *parent = patterned(dev, sized[d], 2, pshape, (unsigned)s);
            cm_tensor *src = NULL;
            CHECK(cm_tensor_transpose(parent, 0, 1, &src));
            cm_tensor *dst = new_tensor(dev, sized[d], 2, shapes2[s]);
            char what[64];
            snprintf(what, sizeof what, "%lld x %lld", (long long)rows, (long long)cols);
            check_copy(src, parent, dst, dst, what);
            cm_tensor_release(dst);
            cm_tensor_release(src);
            cm_tensor_release(parent);
        }
    }
    cm_device_release(dev);
}

static void negative_strides(void) {
    cm_device *dev = cpu();
    const int64_t shapes[][2] = {{7, 13}, {65, 129}, {130, 67}, {1000, 3}};
    for (size_t d = 0; d < 4; ++d) {
        for (size_t s = 0; s < 4; ++s) {
            /* Reverse the parent's rows, columns, or both (bit 0, bit 1). */
            for (int flip = 1; flip < 4; ++flip) {
                const int64_t pshape[2] = {shapes[s][1], shapes[s][0]};
                cm_tensor *parent = patterned(dev, sized[d], 2, pshape, (unsigned)(s + 7));
                cm_tensor *v = NULL, *tmp = NULL;
                CHECK(cm_tensor_retain(parent));
                v = parent;
                for (int32_t axis = 0; axis < 2; ++axis) {
                    if (!(flip & (1 << axis)))
                        continue;
                    CHECK(cm_tensor_slice(v, axis, CM_SLICE_DEFAULT, CM_SLICE_DEFAULT, -1, &tmp));
                    cm_tensor_release(v);
                    v = tmp;
                }
                cm_tensor *src = NULL;
                CHECK(cm_tensor_transpose(v, 0, 1, &src));
                cm_tensor *dst = new_tensor(dev, sized[d], 2, shapes[s]);
                char what[64];
                snprintf(what, sizeof what, "%lld x %lld, flip %d", (long long)shapes[s][0],
                         (long long)shapes[s][1], flip);
                check_copy(src, parent, dst, dst, what);
                cm_tensor_release(dst);
                cm_tensor_release(src);
                cm_tensor_release(v);
                cm_tensor_release(parent);
            }
        }
    }
    cm_device_release(dev);
}

static void sliced_sources(void) {
    cm_device *dev = cpu();
    const int64_t shapes[][2] = {{7, 13}, {65, 129}, {129, 70}};
    for (size_t d = 0; d < 4; ++d) {
        for (size_t s = 0; s < 3; ++s) {
            const int64_t rows = shapes[s][0], cols = shapes[s][1];
            /* src = parent[1::2, 3:3+rows] (rows stay contiguous: the tiled
             * path) and parent[1::2, 3:3+3*rows:3] (not: the element loop). */
            for (int64_t step = 1; step <= 3; step += 2) {
                const int64_t pshape[2] = {2 * cols + 1, 3 + rows * step + 2};
                cm_tensor *parent = patterned(dev, sized[d], 2, pshape, (unsigned)(s + 11));
                cm_tensor *a = NULL, *b = NULL, *src = NULL;
                CHECK(cm_tensor_slice(parent, 0, 1, CM_SLICE_DEFAULT, 2, &a));
                CHECK(cm_tensor_slice(a, 1, 3, 3 + rows * step, step, &b));
                CHECK(cm_tensor_transpose(b, 0, 1, &src));
                cm_tensor *dst = new_tensor(dev, sized[d], 2, shapes[s]);
                char what[64];
                snprintf(what, sizeof what, "%lld x %lld, column step %lld", (long long)rows,
                         (long long)cols, (long long)step);
                check_copy(src, parent, dst, dst, what);
                cm_tensor_release(dst);
                cm_tensor_release(src);
                cm_tensor_release(b);
                cm_tensor_release(a);
                cm_tensor_release(parent);
            }
        }
    }
    cm_device_release(dev);
}

static void batches_of_transposes(void) {
    cm_device *dev = cpu();
    /* parent [B, C, R] -> [B, R, C]; then 4-d [2, 3, C, R] -> [2, 3, R, C],
     * and a batch walked backwards. */
    const int64_t shapes3[][3] = {{3, 13, 7}, {2, 129, 65}, {5, 3, 1000}, {4, 1, 40}};
    for (size_t d = 0; d < 4; ++d) {
        for (size_t s = 0; s < 4; ++s) {
            for (int reversed = 0; reversed < 2; ++reversed) {
                cm_tensor *parent = patterned(dev, sized[d], 3, shapes3[s], (unsigned)(s + 3));
                cm_tensor *v = NULL, *src = NULL;
                if (reversed) {
                    CHECK(cm_tensor_slice(parent, 0, CM_SLICE_DEFAULT, CM_SLICE_DEFAULT, -1, &v));
                } else {
                    CHECK(cm_tensor_retain(parent));
                    v = parent;
                }
                CHECK(cm_tensor_transpose(v, 1, 2, &src));
                cm_tensor_info si;
                CHECK(cm_tensor_get_info(src, &si));
                cm_tensor *dst = new_tensor(dev, sized[d], 3, si.shape);
                char what[64];
                snprintf(what, sizeof what, "batch %lld of %lld x %lld%s", (long long)si.shape[0],
                         (long long)si.shape[1], (long long)si.shape[2],
                         reversed ? ", reversed" : "");
                check_copy(src, parent, dst, dst, what);
                cm_tensor_release(dst);
                cm_tensor_release(src);
                cm_tensor_release(v);
                cm_tensor_release(parent);
            }
        }
        const int64_t shape4[4] = {2, 3, 70, 33};
        const int32_t perm[4] = {0, 1, 3, 2};
        cm_tensor *parent = patterned(dev, sized[d], 4, shape4, 99u);
        cm_tensor *src = NULL;
        CHECK(cm_tensor_permute(parent, perm, &src));
        cm_tensor_info si;
        CHECK(cm_tensor_get_info(src, &si));
        cm_tensor *dst = new_tensor(dev, sized[d], 4, si.shape);
        check_copy(src, parent, dst, dst, "4-d batch");
        cm_tensor_release(dst);
        cm_tensor_release(src);
        cm_tensor_release(parent);
    }
    cm_device_release(dev);
}

static void into_strided_destinations(void) {
    cm_device *dev = cpu();
    const int64_t shapes[][2] = {{7, 13}, {65, 129}, {130, 67}, {3, 1000}};
    for (size_t d = 0; d < 4; ++d) {
        for (size_t s = 0; s < 4; ++s) {
            const int64_t rows = shapes[s][0], cols = shapes[s][1];
            const int64_t pshape[2] = {cols, rows};
            cm_tensor *parent = patterned(dev, sized[d], 2, pshape, (unsigned)(s + 5));
            cm_tensor *src = NULL;
            CHECK(cm_tensor_transpose(parent, 0, 1, &src));
            /* dst = big[1::2, 2:2+cols] (rows apart, a contiguous last axis),
             * big[2*rows-1::-2, 2:2+cols] (rows backwards) and
             * big[1::2, 2:2+2*cols:2] (a strided last axis: the element loop). */
            for (int kind = 0; kind < 3; ++kind) {
                const int64_t bshape[2] = {2 * rows + 1, 2 * cols + 5};
                cm_tensor *big = new_tensor(dev, sized[d], 2, bshape);
                cm_tensor *a = NULL, *dst = NULL;
                if (kind == 1) {
                    CHECK(cm_tensor_slice(big, 0, 2 * rows - 1, CM_SLICE_DEFAULT, -2, &a));
                } else {
                    CHECK(cm_tensor_slice(big, 0, 1, CM_SLICE_DEFAULT, 2, &a));
                }
                if (kind == 2) {
                    CHECK(cm_tensor_slice(a, 1, 2, 2 + 2 * cols, 2, &dst));
                } else {
                    CHECK(cm_tensor_slice(a, 1, 2, 2 + cols, 1, &dst));
                }
                char what[64];
                snprintf(what, sizeof what, "%lld x %lld into strided dst %d", (long long)rows,
                         (long long)cols, kind);
                check_copy(src, parent, dst, big, what);
                cm_tensor_release(dst);
                cm_tensor_release(a);
                cm_tensor_release(big);
            }
            cm_tensor_release(src);
            cm_tensor_release(parent);
        }
    }
    cm_device_release(dev);
}

Test(cpu_transpose, every_element_size_and_ragged_shape) {
    every_element_size_and_ragged_shape();
}

Test(cpu_transpose, negative_strides) {
    negative_strides();
}

Test(cpu_transpose, sliced_sources) {
    sliced_sources();
}

Test(cpu_transpose, batches_of_transposes) {
    batches_of_transposes();
}

Test(cpu_transpose, into_strided_destinations) {
    into_strided_destinations();
}

/* The same cases with the destination stored by streaming (non-temporal)
 * stores, which by size only matrices larger than the last-level cache
 * would get (x86-64; elsewhere ordinary stores either way). */
Test(cpu_transpose, streaming_stores) {
    cm__cpu_copy_force_streaming(1);
    every_element_size_and_ragged_shape();
    negative_strides();
    sliced_sources();
    batches_of_transposes();
    into_strided_destinations();
}

/* cm_fill with streaming stores (forced; by size only destinations above
 * four L2 caches get them): every element size, lengths around the 16- and
 * 64-byte steps, starts at every element offset of a 16-byte line, and 2-d
 * views with a row of gap. Every byte of the buffer is checked: the view's
 * elements hold the value, the rest their pattern. */
static void check_fills(void) {
    static const cm_dtype dtypes[4] = {CM_UINT8, CM_UINT16, CM_UINT32, CM_UINT64};
    static const int64_t lengths[] = {0, 1, 3, 7, 15, 16, 17, 31, 63, 64, 65, 127, 200, 1029};
    for (int di = 0; di < 4; ++di) {
        const cm_dtype d = dtypes[di];
        const size_t size = dsize(d);
        /* little-endian bytes 11 22 33 ...: they differ, so order shows */
        const uint64_t value = 0x8877665544332211u;
        for (size_t li = 0; li < sizeof lengths / sizeof lengths[0]; ++li) {
            for (int64_t start = 0; start < (int64_t)(16 / size) + 1; ++start) {
                const int64_t n = lengths[li], total[1] = {n + start + 20};
                cm_tensor *base = patterned(cpu(), d, 1, total, (unsigned)(li * 17 + start));
                const void *p = NULL;
                CHECK(cm_tensor_host_read(base, d, &p));
                uint8_t *before = malloc((size_t)total[0] * size);
                cr_assert_not_null(before);
                memcpy(before, p, (size_t)total[0] * size);
                cm_tensor *view = NULL;
                CHECK(cm_tensor_slice(base, 0, start, start + n, 1, &view));
                CHECK(cm_fill(view, d, &value, NULL)); /* the value's first `size` bytes */
                CHECK(cm_tensor_host_read(base, d, &p));
                const uint8_t *got = p;
                for (int64_t i = 0; i < total[0]; ++i) {
                    const bool inside = i >= start && i < start + n;
                    const uint8_t *want = inside ? (const uint8_t *)&value : before + i * size;
                    cr_assert(memcmp(got + i * size, want, size) == 0,
                              "%zu-byte elements, length %ld from %ld: element %ld", size, (long)n,
                              (long)start, (long)i);
                }
                cm_tensor_release(view);
                cm_tensor_release(base);
                free(before);
            }
        }
        /* every 2nd, 3rd and 9th element of 1000, forward from 1 up to 900
         * and backward from 898 down to 100 */
        static const int64_t steps[] = {2, 3, 9, -1, -2, -9};
        for (size_t si = 0; si < sizeof steps / sizeof steps[0]; ++si) {
            const int64_t step = steps[si], total[1] = {1000};
            cm_tensor *whole = patterned(cpu(), d, 1, total, (unsigned)(si + 5));
            const void *p = NULL;
            CHECK(cm_tensor_host_read(whole, d, &p));
            uint8_t *before = malloc(1000 * size);
            cr_assert_not_null(before);
            memcpy(before, p, 1000 * size);
            cm_tensor *view = NULL;
            CHECK(step > 0 ? cm_tensor_slice(whole, 0, 1, 900, step, &view)
                           : cm_tensor_slice(whole, 0, 898, 100, step, &view));
            CHECK(cm_fill(view, d, &value, NULL));
            CHECK(cm_tensor_host_read(whole, d, &p));
            for (int64_t i = 0; i < 1000; ++i) {
                const bool inside = step > 0 ? i >= 1 && i < 900 && (i - 1) % step == 0
                                             : i <= 898 && i > 100 && (898 - i) % -step == 0;
                const uint8_t *want = inside ? (const uint8_t *)&value : before + i * size;
                cr_assert(memcmp((const uint8_t *)p + i * size, want, size) == 0,
                          "%zu-byte elements, step %ld: element %ld", size, (long)step, (long)i);
            }
            cm_tensor_release(view);
            cm_tensor_release(whole);
            free(before);
        }
        /* 2-d: 37 rows of 70 elements, every other row (runs of 70 apart) */
        const int64_t shape[2] = {74, 70};
        cm_tensor *base = patterned(cpu(), d, 2, shape, 99);
        const void *p = NULL;
        CHECK(cm_tensor_host_read(base, d, &p));
        uint8_t *before = malloc(74 * 70 * size);
        cr_assert_not_null(before);
        memcpy(before, p, 74 * 70 * size);
        cm_tensor *view = NULL;
        CHECK(cm_tensor_slice(base, 0, 1, CM_SLICE_DEFAULT, 2, &view));
        CHECK(cm_fill(view, d, &value, NULL)); /* the value's first `size` bytes */
        CHECK(cm_tensor_host_read(base, d, &p));
        for (int64_t i = 0; i < 74 * 70; ++i) {
            const uint8_t *want = (i / 70) % 2 == 1 ? (const uint8_t *)&value : before + i * size;
            cr_assert(memcmp((const uint8_t *)p + i * size, want, size) == 0,
                      "%zu-byte elements, 2-d: element %ld", size, (long)i);
        }
        cm_tensor_release(view);
        cm_tensor_release(base);
        free(before);
    }
}

Test(cpu_transpose, streaming_fills) {
    cm__cpu_copy_force_streaming(1);
    check_fills();
    cm__cpu_copy_force_streaming(0);
    check_fills(); /* the same with ordinary stores */
}

/* The float ops whose output streams (non-temporal stores over contiguous
 * runs of float32/float64 add, sub, mul, div, min, max, neg, abs, square,
 * relu, sqrt and rsqrt; by size only outputs larger than four L2 caches)
 * against the scalar operation in C, written here from ops.h: every bit,
 * NaN payloads, infinities, signed zeros, subnormals and negatives under
 * sqrt included (where both inputs of arithmetic are NaN, either payload,
 * quieted: ops.h leaves it open); outputs on a 16-byte boundary and off it,
 * runs shorter than the ragged head, a run split across threads, in place,
 * and a strided output (ordinary stores); the elements around the output
 * view keep their bytes. Unary ops take the first input (ops < 0 below). */
static const int float_ops[] = {CM_BINARY_ADD,    CM_BINARY_SUB,  CM_BINARY_MUL,  CM_BINARY_DIV,
                                CM_BINARY_MIN,    CM_BINARY_MAX,  -CM_UNARY_NEG,  -CM_UNARY_ABS,
                                -CM_UNARY_SQUARE, -CM_UNARY_RELU, -CM_UNARY_SQRT, -CM_UNARY_RSQRT};

#define FLOAT_REF(T, SQRT, FABS)                                                                   \
    switch (op) {                                                                                  \
    case CM_BINARY_ADD: return x + y;                                                              \
    case CM_BINARY_SUB: return x - y;                                                              \
    case CM_BINARY_MUL: return x * y;                                                              \
    case CM_BINARY_DIV: return x / y;                                                              \
    case CM_BINARY_MIN: return isnan(x) || x < y ? x : y; /* NaN propagates */                     \
    case CM_BINARY_MAX: return isnan(x) || x > y ? x : y;                                          \
    case -CM_UNARY_NEG: return -x;                                                                 \
    case -CM_UNARY_ABS: return FABS(x);                                                            \
    case -CM_UNARY_SQUARE: return x * x;                                                           \
    case -CM_UNARY_RELU: return isnan(x) || x > 0 ? x : (T)0; /* NaN stays NaN */                  \
    case -CM_UNARY_SQRT: return SQRT(x);                                                           \
    default: return (T)1 / SQRT(x);                                                                \
    }
static float ref_f32(int op, float x, float y) {
    FLOAT_REF(float, sqrtf, fabsf)
}
static double ref_f64(int op, double x, double y) {
    FLOAT_REF(double, sqrt, fabs)
}

/* Whether got (element bytes) is op's result for inputs x and y. */
static bool float_ok(cm_dtype d, int op, const uint8_t *x, const uint8_t *y, const uint8_t *got) {
    const bool arith = op >= CM_BINARY_ADD && op <= CM_BINARY_DIV;
    const size_t z = d == CM_FLOAT32 ? 4 : 8;
    const uint64_t quiet = z == 4 ? 0x00400000u : 0x0008000000000000u;
    uint64_t g = 0, want = 0, qx = 0, qy = 0;
    bool nans;
    if (d == CM_FLOAT32) {
        float u, v;
        memcpy(&u, x, sizeof u);
        memcpy(&v, y, sizeof v);
        const float r = ref_f32(op, u, v);
        memcpy(&want, &r, sizeof r);
        nans = isnan(u) && isnan(v);
    } else {
        double u, v;
        memcpy(&u, x, sizeof u);
        memcpy(&v, y, sizeof v);
        const double r = ref_f64(op, u, v);
        memcpy(&want, &r, sizeof r);
        nans = isnan(u) && isnan(v);
    }
    memcpy(&g, got, z); /* little-endian: the low z bytes */
    memcpy(&qx, x, z);
    memcpy(&qy, y, z);
    if (arith && nans) /* either payload, quieted */
        return g == (qx | quiet) || g == (qy | quiet);
    return g == want;
}

static void run_float_op(int op, cm_tensor *x, cm_tensor *y, cm_tensor *out) {
    if (op > 0)
        CHECK(cm_binary((cm_binary_op)op, x, y, out, NULL));
    else
        CHECK(cm_unary((cm_unary_op)-op, x, out, NULL));
}

/* Inputs of `total` elements with every kind of special value. */
static void float_inputs(cm_dtype d, int64_t total, uint8_t *ha, uint8_t *hb) {
    const size_t size = dsize(d);
    const int shift = d == CM_FLOAT32 ? 32 : 0; /* specials in the high bits of a double */
    const uint64_t nan = d == CM_FLOAT32 ? 0x7fc00000u : 0x7ff8000000000000u;
    for (int64_t i = 0; i < total; ++i) {
        uint64_t x = mix((uint64_t)i * 3u + 1u), y = mix((uint64_t)i * 5u + 2u);
        if (i % 97 == 3)
            x = nan | (uint64_t)i; /* a NaN with a payload */
        if (i % 61 == 17) {
            x = nan | (uint64_t)i; /* two NaNs */
            y = nan | ((uint64_t)1 << (63 - shift)) | (uint64_t)(i + 1);
        }
        if (i % 89 == 5)
            y = (uint64_t)1 << (63 - shift); /* -0.0 */
        if (i % 83 == 7)
            x = 5; /* a subnormal */
        if (i % 79 == 9)
            x = nan - ((uint64_t)1 << (d == CM_FLOAT32 ? 22 : 51)); /* +inf */
        if (i % 73 == 11)
            x = y; /* equal operands */
        if (i % 71 == 13) {
            x = (uint64_t)1 << (63 - shift); /* -0.0 and +0.0: min and max take y */
            y = 0;
        }
        if (i % 67 == 15) {
            x = 0;
            y = (uint64_t)1 << (63 - shift);
        }
        memcpy(ha + (size_t)i * size, &x, size); /* the low bytes (little-endian) */
        memcpy(hb + (size_t)i * size, &y, size);
    }
}

/* Every op of float_ops (or the first `nops`) over elements [off, off + n)
 * of tensors with 4 more elements after the view, on a device with
 * `threads`; then mul into every other element of the output. */
static void check_float_ops(cm_dtype d, uint32_t threads, int64_t off, int64_t n, size_t nops) {
    const int64_t total = off + n + 4, full[1] = {total};
    const size_t size = dsize(d), bytes = (size_t)total * size;
    cm_device_desc desc = {.type = CM_DEVICE_CPU, .cpu_threads = threads};
    cm_device *dev = NULL;
    CHECK(cm_device_open_desc(&desc, &dev));
    cm_tensor *a = new_tensor(dev, d, 1, full), *b = new_tensor(dev, d, 1, full);
    cm_tensor *o = new_tensor(dev, d, 1, full);
    uint8_t *ha = malloc(bytes), *hb = malloc(bytes), *guard = malloc(bytes);
    cr_assert(ha != NULL && hb != NULL && guard != NULL);
    float_inputs(d, total, ha, hb);
    memset(guard, 0xa5, bytes);
    for (size_t k = 0; k < nops; ++k)
        for (int in_place = 0; in_place < 2; ++in_place) {
            const int op = float_ops[k];
            void *p = NULL;
            CHECK(cm_tensor_host_write(a, d, &p));
            memcpy(p, ha, bytes);
            CHECK(cm_tensor_host_write(b, d, &p));
            memcpy(p, hb, bytes);
            CHECK(cm_tensor_host_write(o, d, &p));
            memset(p, 0xa5, bytes);
            cm_tensor *va = NULL, *vb = NULL, *vo = NULL;
            CHECK(cm_tensor_slice(a, 0, off, off + n, 1, &va));
            CHECK(cm_tensor_slice(b, 0, off, off + n, 1, &vb));
            CHECK(cm_tensor_slice(in_place ? a : o, 0, off, off + n, 1, &vo));
            run_float_op(op, va, vb, vo);
            const uint8_t *q = NULL;
            CHECK(cm_tensor_host_read(in_place ? a : o, d, (const void **)&q));
            for (int64_t i = 0; i < total; ++i) {
                const size_t at = (size_t)i * size;
                if (i < off || i >= off + n) /* around the view */
                    cr_assert(memcmp(q + at, (in_place ? ha : guard) + at, size) == 0,
                              "%zu-byte floats, op %d%s: element %ld outside the view changed",
                              size, op, in_place ? " in place" : "", (long)i);
                else
                    cr_assert(float_ok(d, op, ha + at, hb + at, q + at),
                              "%zu-byte floats, op %d%s, %u threads, elements [%ld, %ld): "
                              "element %ld",
                              size, op, in_place ? " in place" : "", threads, (long)off,
                              (long)(off + n), (long)i);
            }
            cm_tensor_release(va);
            cm_tensor_release(vb);
            cm_tensor_release(vo);
        }
    /* A strided output: every other element of o (ordinary stores). */
    const int64_t half = (total + 1) / 2;
    cm_tensor *va = NULL, *vb = NULL, *vo = NULL;
    CHECK(cm_tensor_slice(a, 0, 0, half, 1, &va));
    CHECK(cm_tensor_slice(b, 0, 0, half, 1, &vb));
    CHECK(cm_tensor_slice(o, 0, 0, CM_SLICE_DEFAULT, 2, &vo));
    void *p = NULL;
    CHECK(cm_tensor_host_write(a, d, &p));
    memcpy(p, ha, bytes);
    CHECK(cm_binary(CM_BINARY_MUL, va, vb, vo, NULL));
    const uint8_t *q = NULL;
    CHECK(cm_tensor_host_read(o, d, (const void **)&q));
    for (int64_t i = 0; i < half; ++i)
        cr_assert(float_ok(d, CM_BINARY_MUL, ha + (size_t)i * size, hb + (size_t)i * size,
                           q + (size_t)(2 * i) * size),
                  "%zu-byte floats, strided output: element %ld", size, (long)i);
    cm_tensor_release(va);
    cm_tensor_release(vb);
    cm_tensor_release(vo);
    cm_tensor_release(a);
    cm_tensor_release(b);
    cm_tensor_release(o);
    cm_device_release(dev);
    free(ha);
    free(hb);
    free(guard);
}

static void check_every_float_case(void) {
    const size_t all = sizeof float_ops / sizeof float_ops[0];
    const cm_dtype dtypes[2] = {CM_FLOAT32, CM_FLOAT64};
    for (int k = 0; k < 2; ++k) {
        const cm_dtype d = dtypes[k];
        check_float_ops(d, 1, 1, 1029, all); /* a ragged head and tail */
        check_float_ops(d, 1, 0, 1032, all); /* none (the buffer is aligned) */
        check_float_ops(d, 1, 3, 3, all);    /* a run shorter than the head */
        check_float_ops(d, 1, 1, 1, all);
        /* Above the threads' 1 MiB: three threads, each its own run. */
        check_float_ops(d, 3, 1, 100003, 2);
    }
}

Test(cpu_transpose, streaming_float_ops) {
    cm__cpu_copy_force_streaming(1);
    check_every_float_case();
    cm__cpu_copy_force_streaming(0);
    check_every_float_case(); /* the same with ordinary stores */
}
