/* Every op x dtype x layout against references computed in the test, on
 * the device CMETAL_TEST_DEVICE names (metal: softmetal running the msl/
 * kernels; cpu: the C kernels), so both implementations pass the same
 * checks. float64 is left out (Metal has none; see test_metal_ops.c).
 *
 * Bit-exact: fill, copy, cast, integer ops, comparisons, min/max, neg, abs,
 * square, relu, sign, sqrt, floor, ceil, and add/sub/mul/div of float32,
 * float16 and bfloat16 (computed in float32, rounded once). Within a
 * tolerance: rsqrt, exp, log, sin, cos, tanh, sigmoid (a few ulp of
 * float32 plus one rounding to the dtype), float sums and means (Metal
 * accumulates in float32: count * 2^-23 of the sum of magnitudes, plus one
 * rounding to the output dtype). */
#include "ops/ops_util.h"

#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#else
#define RUNNING_ON_VALGRIND 0
#endif

/* The references compute in long double, which valgrind runs at double
 * precision with infinities it cannot compare (pseudo-infinities): tests
 * whose references meet int64 extremes or infinities skip under valgrind
 * (the runtime paths they use are covered there by the other tests). */
static void skip_under_valgrind(void) {
    if (RUNNING_ON_VALGRIND)
        cr_skip_test("long double references are not exact under valgrind");
}

static cm_device *dev_open(void) {
    const char *want = getenv("CMETAL_TEST_DEVICE");
    const cm_device_type type =
        want != NULL && strcmp(want, "cpu") == 0 ? CM_DEVICE_CPU : CM_DEVICE_METAL;
    cm_device *d = NULL;
    cr_assert_eq(cm_device_open(type, 0, &d), CM_OK, "%s", cm_last_error());
    return d;
}

/* Every dtype but float64. */
static const cm_dtype dtypes[] = {CM_BOOL,   CM_INT8,   CM_INT16,    CM_INT32,
                                  CM_INT64,  CM_UINT8,  CM_UINT16,   CM_UINT32,
                                  CM_UINT64, CM_FLOAT16, CM_BFLOAT16, CM_FLOAT32};
#define N_DT (sizeof dtypes / sizeof dtypes[0])

static const test_shape shapes[] = {
    {0, {0}}, {1, {1}}, {1, {13}}, {2, {3, 0}}, {2, {4, 7}}, {3, {2, 3, 5}}, {2, {1, 9}},
    {4, {2, 1, 3, 4}},
};
#define N_SHAPES (sizeof shapes / sizeof shapes[0])

static uint64_t bits64(cm_dtype d, elem e) {
    switch (d) {
    case CM_INT8: return (uint64_t)(int64_t)e.i8;
    case CM_INT16: return (uint64_t)(int64_t)e.i16;
    case CM_INT32: return (uint64_t)(int64_t)e.i32;
    case CM_INT64: return (uint64_t)e.i64;
    case CM_UINT16: return e.u16;
    case CM_UINT32: return e.u32;
    case CM_UINT64: return e.u64;
    default: return e.u8;
    }
}

static elem of_bits(cm_dtype d, uint64_t bits) {
    elem r;
    memset(&r, 0, sizeof r);
    memcpy(r.b, &bits, dsize(d));
    return r;
}

/* A float16/bfloat16/float32 element as a float (exact). */
static float as_f32(cm_dtype d, elem e) {
    return d == CM_FLOAT32 ? e.f32 : (float)elem_value(d, e);
}

/* A float result rounded once to d (float32 is already rounded). */
static elem from_f32(cm_dtype d, float f) {
    if (d == CM_FLOAT32) {
        elem r;
        memset(&r, 0, sizeof r);
        r.f32 = f;
        return r;
    }
    return ref_from_value(d, (long double)f);
}

/* Reads elements of a host-visible view straight from its memory: many
 * times faster than cm_tensor_get_element, which checks for pending device
 * work on every call. For inputs that no op writes. */
typedef struct view_reader {
    const char *base;
    int32_t ndim;
    int64_t strides[CM_MAX_NDIM];
    size_t size;
} view_reader;

static view_reader reader_of(const cm_tensor *t) {
    cm_tensor_info info;
    CHECK(cm_tensor_get_info(t, &info));
    view_reader r = {.ndim = info.ndim, .size = dsize(info.dtype)};
    memcpy(r.strides, info.strides, sizeof r.strides);
    const void *p = NULL;
    CHECK(cm_tensor_host_read(t, info.dtype, &p));
    r.base = p;
    return r;
}

static elem read_at(const view_reader *r, const int64_t *idx) {
    int64_t off = 0;
    for (int32_t k = 0; k < r->ndim; ++k)
        off += idx[k] * r->strides[k];
    elem e;
    memset(&e, 0, sizeof e);
    memcpy(e.b, r->base + off * (int64_t)r->size, r->size);
    return e;
}

static void expect_equal(cm_dtype d, elem got, elem want, const char *what) {
    if (elem_isnan(d, want)) {
        cr_assert(elem_isnan(d, got), "%s: want NaN, got %Lg", what, elem_value(d, got));
        return;
    }
    cr_assert(elem_bits_equal(d, got, want), "%s: got %.20Lg want %.20Lg", what,
              elem_value(d, got), elem_value(d, want));
}

/* ------------------------------------------------------------ copy, fill */

Test(ops_matrix, copy_every_dtype_layout_and_shape_bit_for_bit) {
    cm_device *dev = dev_open();
    int cases = 0;
    for (size_t di = 0; di < N_DT; ++di) {
        for (size_t s = 0; s < N_SHAPES; ++s) {
            const test_shape *ts = &shapes[s];
            for (int l = 0; l < L_COUNT; ++l) {
                const cm_dtype d = dtypes[di];
                cm_tensor *src = make_view(dev, d, ts->ndim, ts->shape, (enum layout)l, 7,
                                           false, NULL);
                const enum layout lo = (enum layout)((l + 1) % L_BROADCAST);
                cm_tensor *dst = make_view(dev, d, ts->ndim, ts->shape, lo, 8, false, NULL);
                CHECK(cm_copy(src, dst));
                int64_t idx[CM_MAX_NDIM] = {0};
                if (numel_of(ts->ndim, ts->shape) > 0) {
                    do {
                        const elem want = get_at(src, idx), got = get_at(dst, idx);
                        cr_assert(elem_bits_equal(d, got, want), "copy %s %s -> %s", dname(d),
                                  layout_names[l], layout_names[lo]);
                    } while (next_index(ts->ndim, ts->shape, idx));
                }
                cm_tensor_release(src);
                cm_tensor_release(dst);
                cases++;
            }
        }
    }
    cr_assert_eq(cases, (int)(N_DT * N_SHAPES * L_COUNT));
    cm_device_release(dev);
}

Test(ops_matrix, copy_of_a_large_transpose_makes_it_contiguous) {
    cm_device *dev = dev_open();
    const int64_t shape[3] = {37, 64, 29};
    const cm_dtype ds[] = {CM_UINT8, CM_FLOAT16, CM_FLOAT32, CM_INT64};
    for (size_t k = 0; k < sizeof ds / sizeof ds[0]; ++k) {
        cm_tensor *src = make_view(dev, ds[k], 3, shape, L_TRANSPOSED, 3, false, NULL);
        cm_tensor *dst = new_tensor(dev, ds[k], 3, shape);
        CHECK(cm_copy(src, dst));
        int64_t idx[3] = {0};
        do {
            cr_assert(elem_bits_equal(ds[k], get_at(dst, idx), get_at(src, idx)), "%s",
                      dname(ds[k]));
        } while (next_index(3, shape, idx));
        cm_tensor_release(src);
        cm_tensor_release(dst);
    }
    cm_device_release(dev);
}

Test(ops_matrix, fill_every_dtype_and_layout_with_converted_values) {
    skip_under_valgrind();
    cm_device *dev = dev_open();
    const double values[] = {0.0, -0.0, 1.0, -2.5, 300.75, -1e10, 65520.0, NAN, INFINITY};
    for (size_t di = 0; di < N_DT; ++di) {
        const cm_dtype d = dtypes[di];
        for (int l = 0; l < L_BROADCAST; ++l) {
            for (size_t v = 0; v < sizeof values / sizeof values[0]; ++v) {
                const int64_t shape[3] = {3, 4, 5};
                cm_tensor *t = make_view(dev, d, 3, shape, (enum layout)l, 9, false, NULL);
                CHECK(cm_fill(t, CM_FLOAT64, &values[v]));
                elem in;
                in.f64 = values[v];
                const elem want = ref_convert(d, CM_FLOAT64, in);
                int64_t idx[3] = {0};
                do {
                    char what[96];
                    snprintf(what, sizeof what, "fill %s %s with %g", dname(d),
                             layout_names[l], values[v]);
                    expect_equal(d, get_at(t, idx), want, what);
                } while (next_index(3, shape, idx));
                cm_tensor_release(t);
            }
        }
    }
    /* 64-bit integers are exact, 0-d tensors work. */
    cm_tensor *s = new_tensor(dev, CM_INT64, 0, NULL);
    const int64_t big = INT64_MIN + 3;
    CHECK(cm_fill(s, CM_INT64, &big));
    cr_assert_eq(get_at(s, NULL).i64, big);
    cm_tensor *u = new_tensor(dev, CM_UINT64, 0, NULL);
    const uint64_t ubig = UINT64_MAX - 1;
    CHECK(cm_fill(u, CM_UINT64, &ubig));
    cr_assert_eq(get_at(u, NULL).u64, ubig);
    cm_tensor_release(s);
    cm_tensor_release(u);
    cm_device_release(dev);
}

/* ------------------------------------------------------------ cast */

static void check_cast(cm_device *dev, cm_dtype from, cm_dtype to, const test_shape *ts,
                       enum layout l) {
    cm_tensor *src = make_view(dev, from, ts->ndim, ts->shape, l, 11 + (uint64_t)from, false,
                               NULL);
    cm_tensor *dst = make_view(dev, to, ts->ndim, ts->shape, (enum layout)((l + 3) % L_BROADCAST),
                               12, false, NULL);
    CHECK(cm_cast(src, dst));
    int64_t idx[CM_MAX_NDIM] = {0};
    if (numel_of(ts->ndim, ts->shape) > 0) {
        do {
            const elem x = get_at(src, idx);
            char what[128];
            snprintf(what, sizeof what, "cast %s -> %s (%s) of %.20Lg", dname(from), dname(to),
                     layout_names[l], elem_value(from, x));
            expect_equal(to, get_at(dst, idx), ref_convert(to, from, x), what);
        } while (next_index(ts->ndim, ts->shape, idx));
    }
    cm_tensor_release(src);
    cm_tensor_release(dst);
}

Test(ops_matrix, cast_every_dtype_pair_and_layout_matches_reference_conversion) {
    skip_under_valgrind();
    cm_device *dev = dev_open();
    const test_shape big = {2, {17, 33}};
    for (size_t i = 0; i < N_DT; ++i) {
        for (size_t j = 0; j < N_DT; ++j) {
            check_cast(dev, dtypes[i], dtypes[j], &big, L_CONTIG);
            for (int l = 0; l < L_COUNT; ++l)
                check_cast(dev, dtypes[i], dtypes[j], &shapes[5 + l % 3], (enum layout)l);
        }
    }
    cm_device_release(dev);
}

/* Every float16 / bfloat16 pattern through float32 and back, bit for bit
 * (NaN payloads included). */
static void roundtrip_all(cm_dtype half) {
    cm_device *dev = dev_open();
    const int64_t n[1] = {65536};
    cm_tensor *h = new_tensor(dev, half, 1, n), *f = new_tensor(dev, CM_FLOAT32, 1, n),
              *back = new_tensor(dev, half, 1, n);
    uint16_t *p = NULL;
    CHECK(cm_tensor_host_write(h, half, (void **)&p));
    for (uint32_t i = 0; i < 65536; ++i)
        p[i] = (uint16_t)i;
    CHECK(cm_cast(h, f));
    CHECK(cm_cast(f, back));
    const uint16_t *q = NULL;
    const float *fp = NULL;
    CHECK(cm_tensor_host_read(back, half, (const void **)&q));
    CHECK(cm_tensor_host_read(f, CM_FLOAT32, (const void **)&fp));
    for (uint32_t i = 0; i < 65536; ++i) {
        cr_assert_eq(q[i], i, "%s 0x%04x came back as 0x%04x", dname(half), i, q[i]);
        elem e;
        e.u16 = (uint16_t)i;
        if (!elem_isnan(half, e))
            cr_assert(fp[i] == (float)elem_value(half, e) || (fp[i] != fp[i]), "0x%04x", i);
    }
    cm_tensor_release(h);
    cm_tensor_release(f);
    cm_tensor_release(back);
    cm_device_release(dev);
}

Test(ops_matrix, float16_patterns_roundtrip_through_float32) {
    roundtrip_all(CM_FLOAT16);
}

Test(ops_matrix, bfloat16_patterns_roundtrip_through_float32) {
    roundtrip_all(CM_BFLOAT16);
}

/* float32 NaNs keep their sign and top payload bits in float16/bfloat16;
 * a payload that would vanish is quieted; ties round to even. */
Test(ops_matrix, float32_to_half_keeps_nan_payloads_and_rounds_ties_to_even) {
    cm_device *dev = dev_open();
    const uint32_t in[] = {0x7fc00000u, 0xffc00001u, 0x7f800001u, 0x7fa12345u, 0xff812345u,
                           0x3f801000u, 0x3f803000u, 0x33000000u, 0x33000001u, 0x477ff000u,
                           0x477fefffu, 0x38800000u, 0x387fe000u, 0x3f808000u, 0x3f818000u,
                           0x00000001u, 0x80000000u, 0x7f7fffffu};
    const int64_t n[1] = {sizeof in / sizeof in[0]};
    cm_tensor *f = new_tensor(dev, CM_FLOAT32, 1, n), *h = new_tensor(dev, CM_FLOAT16, 1, n),
              *b = new_tensor(dev, CM_BFLOAT16, 1, n);
    uint32_t *p = NULL;
    CHECK(cm_tensor_host_write(f, CM_FLOAT32, (void **)&p));
    memcpy(p, in, sizeof in);
    CHECK(cm_cast(f, h));
    CHECK(cm_cast(f, b));
    for (int64_t i = 0; i < n[0]; ++i) {
        const uint32_t u = in[i];
        elem x;
        memcpy(&x.f32, &u, 4);
        elem gh = get_at(h, &i), gb = get_at(b, &i);
        if (isnan(x.f32)) {
            uint16_t ph = (uint16_t)((u >> 13) & 0x3ffu), pb = (uint16_t)((u >> 16) & 0x7fu);
            const uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
            cr_assert_eq(gh.u16, sign | 0x7c00u | (ph ? ph : 0x200u), "0x%08x -> 0x%04x", u,
                         gh.u16);
            cr_assert_eq(gb.u16, sign | 0x7f80u | (pb ? pb : 0x40u), "0x%08x -> 0x%04x", u,
                         gb.u16);
            continue;
        }
        cr_assert_eq(gh.u16, ref_small_encode(x.f32, false), "0x%08x -> 0x%04x", u, gh.u16);
        cr_assert_eq(gb.u16, ref_small_encode(x.f32, true), "0x%08x -> 0x%04x", u, gb.u16);
    }
    cm_tensor_release(f);
    cm_tensor_release(h);
    cm_tensor_release(b);
    cm_device_release(dev);
}

/* 64-bit integers round once to float32/float16/bfloat16 (no double
 * rounding through an intermediate), and floats saturate into integers. */
Test(ops_matrix, wide_integers_round_once_and_floats_saturate) {
    skip_under_valgrind();
    cm_device *dev = dev_open();
    const int64_t iv[] = {INT64_MAX, INT64_MIN, (1ll << 53) + 1, (1ll << 24) + 1,
                          (1ll << 24) + 3, 65519, 65520, -65536, 0x7fffff7fffffffffll,
                          0x0100000180000000ll, 0x0100000080000001ll, -0x0100000080000000ll};
    const int64_t n[1] = {sizeof iv / sizeof iv[0]};
    const cm_dtype to[] = {CM_FLOAT32, CM_FLOAT16, CM_BFLOAT16};
    cm_tensor *x = new_tensor(dev, CM_INT64, 1, n);
    int64_t *p = NULL;
    CHECK(cm_tensor_host_write(x, CM_INT64, (void **)&p));
    memcpy(p, iv, sizeof iv);
    for (size_t k = 0; k < 3; ++k) {
        cm_tensor *y = new_tensor(dev, to[k], 1, n);
        CHECK(cm_cast(x, y));
        for (int64_t i = 0; i < n[0]; ++i) {
            elem e;
            e.i64 = iv[i];
            char what[96];
            snprintf(what, sizeof what, "int64 %lld -> %s", (long long)iv[i], dname(to[k]));
            expect_equal(to[k], get_at(y, &i), ref_convert(to[k], CM_INT64, e), what);
        }
        cm_tensor_release(y);
    }
    const float fv[] = {NAN, INFINITY, -INFINITY, 3e9f, -3e9f, 2147483520.0f, -2147483648.0f,
                        255.9f, -0.9f, -1.0f, 1e20f, -1e20f, 9.2233720e18f, 1.8446743e19f};
    const int64_t m[1] = {sizeof fv / sizeof fv[0]};
    cm_tensor *f = new_tensor(dev, CM_FLOAT32, 1, m);
    float *fp = NULL;
    CHECK(cm_tensor_host_write(f, CM_FLOAT32, (void **)&fp));
    memcpy(fp, fv, sizeof fv);
    for (size_t k = 0; k < N_DT; ++k) {
        if (dfloat(dtypes[k]))
            continue;
        cm_tensor *y = new_tensor(dev, dtypes[k], 1, m);
        CHECK(cm_cast(f, y));
        for (int64_t i = 0; i < m[0]; ++i) {
            elem e;
            e.f32 = fv[i];
            char what[96];
            snprintf(what, sizeof what, "float32 %g -> %s", (double)fv[i], dname(dtypes[k]));
            expect_equal(dtypes[k], get_at(y, &i), ref_convert(dtypes[k], CM_FLOAT32, e), what);
        }
        cm_tensor_release(y);
    }
    cm_tensor_release(x);
    cm_tensor_release(f);
    cm_device_release(dev);
}

/* ------------------------------------------------------------ unary */

static bool unary_exact(cm_unary_op op) {
    return op <= CM_UNARY_SQRT || op == CM_UNARY_FLOOR || op == CM_UNARY_CEIL;
}

static long double unary_tolerance(cm_dtype d) {
    switch (d) {
    case CM_FLOAT16: return 2e-3L;
    case CM_BFLOAT16: return 1.6e-2L;
    default: return 2e-6L;
    }
}

static elem ref_unary(cm_unary_op op, cm_dtype d, elem a) {
    if (!dfloat(d)) {
        const uint64_t x = bits64(d, a);
        const bool neg = dsigned(d) && (int64_t)x < 0;
        switch (op) {
        case CM_UNARY_NEG: return of_bits(d, 0 - x);
        case CM_UNARY_ABS: return of_bits(d, neg ? 0 - x : x);
        case CM_UNARY_SQUARE: return of_bits(d, x * x);
        case CM_UNARY_RELU: return of_bits(d, neg ? 0 : x);
        default: return of_bits(d, neg ? ~0ull : x != 0);
        }
    }
    const float x = as_f32(d, a);
    if (unary_exact(op)) {
        float r;
        switch (op) {
        case CM_UNARY_NEG: r = -x; break;
        case CM_UNARY_ABS: r = fabsf(x); break;
        case CM_UNARY_SQUARE: r = x * x; break;
        case CM_UNARY_RELU: r = isnan(x) ? x : x > 0 ? x : 0.0f; break;
        case CM_UNARY_SIGN: r = isnan(x) ? x : x > 0 ? 1.0f : x < 0 ? -1.0f : 0.0f; break;
        case CM_UNARY_SQRT: r = sqrtf(x); break;
        case CM_UNARY_FLOOR: r = floorf(x); break;
        default: r = ceilf(x); break;
        }
        return from_f32(d, r);
    }
    const long double lx = x;
    long double r;
    switch (op) {
    case CM_UNARY_RSQRT: r = 1.0L / sqrtl(lx); break;
    case CM_UNARY_EXP: r = expl(lx); break;
    case CM_UNARY_LOG: r = logl(lx); break;
    case CM_UNARY_SIN: r = sinl(lx); break;
    case CM_UNARY_COS: r = cosl(lx); break;
    case CM_UNARY_TANH: r = tanhl(lx); break;
    default: r = 1.0L / (1.0L + expl(-lx)); break;
    }
    return ref_from_value(d, r);
}

static void expect_close(cm_dtype d, elem got, elem want, const char *what) {
    if (elem_isnan(d, want)) {
        cr_assert(elem_isnan(d, got), "%s: want NaN, got %Lg", what, elem_value(d, got));
        return;
    }
    const long double g = elem_value(d, got), w = elem_value(d, want);
    if (isinf(w) || elem_value(d, want) == 0) {
        const long double tiny = d == CM_FLOAT32 ? 1e-37L : 1e-6L;
        cr_assert(g == w || (!isinf(w) && fabsl(g) <= tiny), "%s: got %Lg want %Lg", what, g, w);
        return;
    }
    const long double tol = unary_tolerance(d) * (fabsl(w) > 1 ? fabsl(w) : 1);
    cr_assert(fabsl(g - w) <= tol, "%s: got %.20Lg want %.20Lg", what, g, w);
}

static void check_unary(cm_device *dev, cm_unary_op op, cm_dtype d, const test_shape *ts,
                        enum layout l, bool in_place) {
    const bool tame = !unary_exact(op) && op != CM_UNARY_LOG && op != CM_UNARY_RSQRT;
    cm_tensor *x = make_view(dev, d, ts->ndim, ts->shape, l, 21 + (uint64_t)op, tame, NULL);
    cm_tensor *ref_in = new_tensor(dev, d, ts->ndim, ts->shape);
    CHECK(cm_copy(x, ref_in));
    cm_tensor *out = in_place ? x
                              : make_view(dev, d, ts->ndim, ts->shape,
                                          (enum layout)((l + 2) % L_BROADCAST), 22, false, NULL);
    if (in_place)
        CHECK(cm_tensor_retain(x));
    CHECK(cm_unary(op, x, out));
    int64_t idx[CM_MAX_NDIM] = {0};
    if (numel_of(ts->ndim, ts->shape) > 0) {
        do {
            const elem a = get_at(ref_in, idx);
            char what[128];
            snprintf(what, sizeof what, "%s %s (%s%s) of %.17Lg", cm_unary_op_name(op),
                     dname(d), layout_names[l], in_place ? ", in place" : "",
                     elem_value(d, a));
            const elem want = ref_unary(op, d, a), got = get_at(out, idx);
            if (unary_exact(op))
                expect_equal(d, got, want, what);
            else
                expect_close(d, got, want, what);
        } while (next_index(ts->ndim, ts->shape, idx));
    }
    cm_tensor_release(x);
    cm_tensor_release(ref_in);
    cm_tensor_release(out);
}

Test(ops_matrix, unary_every_op_dtype_and_layout_matches_reference) {
    skip_under_valgrind();
    cm_device *dev = dev_open();
    int cases = 0;
    for (int op = 1; op < CM_UNARY_COUNT; ++op) {
        for (size_t di = 0; di < N_DT; ++di) {
            const cm_dtype d = dtypes[di];
            if (d == CM_BOOL || (op >= CM_UNARY_SQRT && !dfloat(d)))
                continue;
            for (int l = 0; l < L_COUNT; ++l) {
                check_unary(dev, (cm_unary_op)op, d, &shapes[4 + (size_t)l % 4], (enum layout)l,
                            false);
                cases++;
            }
            check_unary(dev, (cm_unary_op)op, d, &shapes[0], L_CONTIG, false);
            check_unary(dev, (cm_unary_op)op, d, &shapes[4], L_NEGATIVE, true);
        }
    }
    cr_assert_gt(cases, 300);
    cm_device_release(dev);
}

/* ------------------------------------------------------------ binary */

static elem ref_binary(cm_binary_op op, cm_dtype d, elem a, elem b) {
    if (op >= CM_BINARY_EQ) {
        const long double x = elem_value(d, a), y = elem_value(d, b);
        uint64_t r;
        switch (op) {
        case CM_BINARY_EQ: r = x == y; break;
        case CM_BINARY_NE: r = x != y; break;
        case CM_BINARY_LT: r = x < y; break;
        case CM_BINARY_LE: r = x <= y; break;
        case CM_BINARY_GT: r = x > y; break;
        default: r = x >= y; break;
        }
        return of_bits(CM_BOOL, r);
    }
    if (op == CM_BINARY_MIN || op == CM_BINARY_MAX) {
        if (elem_isnan(d, a))
            return a;
        if (elem_isnan(d, b))
            return b;
        const long double x = elem_value(d, a), y = elem_value(d, b);
        return (op == CM_BINARY_MIN ? x < y : x > y) ? a : b;
    }
    if (!dfloat(d)) {
        const uint64_t x = bits64(d, a), y = bits64(d, b);
        switch (op) {
        case CM_BINARY_ADD: return of_bits(d, x + y);
        case CM_BINARY_SUB: return of_bits(d, x - y);
        case CM_BINARY_MUL: return of_bits(d, x * y);
        default: break;
        }
        if (y == 0)
            return of_bits(d, 0);
        if (dsigned(d))
            return of_bits(d, (int64_t)y == -1 ? 0 - x : (uint64_t)((int64_t)x / (int64_t)y));
        return of_bits(d, x / y);
    }
    const float x = as_f32(d, a), y = as_f32(d, b);
    const float r = op == CM_BINARY_ADD   ? x + y
                    : op == CM_BINARY_SUB ? x - y
                    : op == CM_BINARY_MUL ? x * y
                                          : x / y;
    return from_f32(d, r);
}

static void check_binary(cm_device *dev, cm_binary_op op, cm_dtype d, int32_t ndim,
                         const int64_t *shape, int32_t nda, const int64_t *sha, int32_t ndb,
                         const int64_t *shb, enum layout la, enum layout lb, enum layout lo) {
    cm_tensor *a = make_view(dev, d, nda, sha, la, 31 + (uint64_t)op, false, NULL);
    cm_tensor *b = make_view(dev, d, ndb, shb, lb, 32 + (uint64_t)op, false, NULL);
    const cm_dtype od = op >= CM_BINARY_EQ ? CM_BOOL : d;
    cm_tensor *out = make_view(dev, od, ndim, shape, lo, 33, false, NULL);
    CHECK(cm_binary(op, a, b, out));
    int64_t idx[CM_MAX_NDIM] = {0}, ia[CM_MAX_NDIM], ib[CM_MAX_NDIM];
    if (numel_of(ndim, shape) > 0) {
        do {
            bcast_index(ndim, idx, nda, sha, ia);
            bcast_index(ndim, idx, ndb, shb, ib);
            const elem x = get_at(a, ia), y = get_at(b, ib);
            const elem want = ref_binary(op, d, x, y), got = get_at(out, idx);
            char what[160];
            snprintf(what, sizeof what, "%s %s (%s, %s -> %s) of %.17Lg, %.17Lg",
                     cm_binary_op_name(op), dname(d), layout_names[la], layout_names[lb],
                     layout_names[lo], elem_value(d, x), elem_value(d, y));
            if ((op == CM_BINARY_MIN || op == CM_BINARY_MAX) && dfloat(d) &&
                elem_value(d, want) == 0 && elem_value(d, got) == 0)
                continue; /* either zero of two equal zeros */
            expect_equal(od, got, want, what);
        } while (next_index(ndim, shape, idx));
    }
    cm_tensor_release(a);
    cm_tensor_release(b);
    cm_tensor_release(out);
}

Test(ops_matrix, binary_every_op_dtype_and_layout_matches_reference) {
    cm_device *dev = dev_open();
    int cases = 0;
    for (int op = 1; op < CM_BINARY_COUNT; ++op) {
        for (size_t di = 0; di < N_DT; ++di) {
            const cm_dtype d = dtypes[di];
            if (d == CM_BOOL && op < CM_BINARY_MIN)
                continue;
            for (int l = 0; l < L_COUNT; ++l) {
                const test_shape *ts = &shapes[(size_t)l % 2 ? 4 : 5];
                const enum layout lb = (enum layout)((l + 2) % L_COUNT);
                const enum layout lo = (enum layout)(l % L_BROADCAST);
                check_binary(dev, (cm_binary_op)op, d, ts->ndim, ts->shape, ts->ndim,
                             ts->shape, ts->ndim, ts->shape, (enum layout)l, lb, lo);
                cases++;
            }
            check_binary(dev, (cm_binary_op)op, d, 0, NULL, 0, NULL, 0, NULL, L_CONTIG,
                         L_CONTIG, L_CONTIG);
        }
    }
    cr_assert_gt(cases, 500);
    cm_device_release(dev);
}

Test(ops_matrix, binary_broadcasts_both_inputs_numpy_style) {
    cm_device *dev = dev_open();
    const int64_t out[3] = {3, 4, 5}, a1[3] = {3, 1, 5}, b1[2] = {4, 1}, c1[1] = {5},
                  d1[3] = {1, 4, 1};
    const cm_dtype dts[] = {CM_INT32, CM_FLOAT32, CM_FLOAT16, CM_UINT8, CM_BFLOAT16, CM_INT64};
    for (size_t k = 0; k < sizeof dts / sizeof dts[0]; ++k) {
        for (int op = 1; op < CM_BINARY_COUNT; ++op) {
            check_binary(dev, (cm_binary_op)op, dts[k], 3, out, 3, a1, 2, b1, L_CONTIG,
                         L_TRANSPOSED, L_CONTIG);
            check_binary(dev, (cm_binary_op)op, dts[k], 3, out, 0, NULL, 1, c1, L_CONTIG,
                         L_NEGATIVE, L_STEP);
            check_binary(dev, (cm_binary_op)op, dts[k], 3, out, 1, c1, 3, d1, L_STEP,
                         L_CONTIG, L_TRANSPOSED);
        }
    }
    cm_device_release(dev);
}

Test(ops_matrix, binary_output_may_be_an_input_itself) {
    cm_device *dev = dev_open();
    const int64_t shape[2] = {6, 5};
    cm_tensor *a = make_view(dev, CM_FLOAT32, 2, shape, L_NEGATIVE, 1, true, NULL);
    cm_tensor *b = make_view(dev, CM_FLOAT32, 2, shape, L_TRANSPOSED, 2, true, NULL);
    cm_tensor *before = new_tensor(dev, CM_FLOAT32, 2, shape);
    CHECK(cm_copy(a, before));
    CHECK(cm_binary(CM_BINARY_MUL, a, b, a));
    int64_t idx[2] = {0};
    do {
        cr_assert_eq(get_at(a, idx).f32, get_at(before, idx).f32 * get_at(b, idx).f32);
    } while (next_index(2, shape, idx));
    cm_tensor_release(a);
    cm_tensor_release(b);
    cm_tensor_release(before);
    cm_device_release(dev);
}

/* ------------------------------------------------------------ reduce */

static long double round_tol(cm_dtype d) {
    switch (d) {
    case CM_FLOAT16: return 0x1p-10L;
    case CM_BFLOAT16: return 0x1p-7L;
    default: return 0x1p-23L;
    }
}

/* Reduces x (ndim, shape; layout lx) over `axis` (-1: all) into a fresh
 * output of dtype od (kept axes when keep), checking every element. */
static void check_reduce(cm_device *dev, cm_reduce_op op, cm_dtype d, cm_dtype od, int32_t ndim,
                         const int64_t *shape, int32_t axis, bool keep, enum layout lx) {
    const bool sum = op == CM_REDUCE_SUM || op == CM_REDUCE_MEAN;
    cm_tensor *x = make_view(dev, d, ndim, shape, lx, 50 + (uint64_t)op, sum && dfloat(d), NULL);
    int64_t oshape[CM_MAX_NDIM];
    int32_t ond = 0;
    int64_t count = 1;
    for (int32_t k = 0; k < ndim; ++k) {
        const bool reduced = axis < 0 || k == axis;
        count *= reduced ? shape[k] : 1;
        if (!reduced)
            oshape[ond++] = shape[k];
        else if (keep)
            oshape[ond++] = 1;
    }
    cm_tensor *out = make_view(dev, od, ond, oshape, L_STEP, 51, false, NULL);
    const cm_status st = cm_reduce(op, x, axis < 0 ? CM_AXIS_ALL : axis - ndim, out);
    if (count == 0 && numel_of(ond, oshape) > 0 && !sum) {
        cr_assert_eq(st, CM_ERR_INVALID_ARGUMENT, "%s", cm_last_error());
        goto done;
    }
    cr_assert_eq(st, CM_OK, "%s", cm_last_error());
    if (numel_of(ond, oshape) == 0)
        goto done;
    const view_reader rx = reader_of(x);
    int64_t oi[CM_MAX_NDIM] = {0};
    do {
        int64_t base[CM_MAX_NDIM], rshape[CM_MAX_NDIM], ri[CM_MAX_NDIM] = {0};
        for (int32_t k = 0, j = 0; k < ndim; ++k) {
            const bool reduced = axis < 0 || k == axis;
            base[k] = reduced ? 0 : oi[j];
            rshape[k] = reduced ? shape[k] : 1;
            if (!reduced || keep)
                ++j;
        }
        long double fsum = 0, fabs_sum = 0, best = 0;
        uint64_t isum = 0;
        bool nan = false, first = true;
        elem best_e;
        memset(&best_e, 0, sizeof best_e);
        if (count > 0) {
            do {
                int64_t xi[CM_MAX_NDIM];
                for (int32_t k = 0; k < ndim; ++k)
                    xi[k] = base[k] + ri[k];
                const elem e = read_at(&rx, xi);
                const long double v = elem_value(d, e);
                nan = nan || elem_isnan(d, e);
                fsum += v;
                fabs_sum += fabsl(v);
                isum += bits64(d, e);
                if (first || (op == CM_REDUCE_MAX ? v > best : v < best)) {
                    best = v;
                    best_e = e;
                }
                first = false;
            } while (next_index(ndim, rshape, ri));
        }
        const elem got = get_at(out, oi);
        char what[160];
        snprintf(what, sizeof what, "%s %s -> %s axis %d keep %d %s count %lld",
                 cm_reduce_op_name(op), dname(d), dname(od), axis, keep, layout_names[lx],
                 (long long)count);
        if (!sum) {
            if (nan) {
                cr_assert(elem_isnan(od, got), "%s: want NaN", what);
                continue;
            }
            const elem want = ref_convert(od, d, best_e);
            if (dfloat(od) && elem_value(od, want) == 0)
                cr_assert(elem_value(od, got) == 0, "%s", what);
            else
                cr_assert(elem_bits_equal(od, got, want), "%s: got %Lg want %Lg", what,
                          elem_value(od, got), elem_value(od, want));
            continue;
        }
        const bool signed_sum = dsigned(d) || d == CM_BOOL;
        if (!dfloat(d)) {
            if (op == CM_REDUCE_SUM) {
                elem s;
                s.u64 = isum;
                const elem want = ref_convert(od, signed_sum ? CM_INT64 : CM_UINT64, s);
                cr_assert(elem_bits_equal(od, got, want), "%s: got %Lg want %Lg", what,
                          elem_value(od, got), elem_value(od, want));
                continue;
            }
            fsum = signed_sum ? (long double)(int64_t)isum : (long double)isum;
            fabs_sum = fabsl(fsum);
        }
        long double w = fsum;
        if (op == CM_REDUCE_MEAN) {
            w = count ? fsum / (long double)count : (long double)NAN;
            fabs_sum = count ? fabs_sum / (long double)count : 0;
        }
        if (isnan(w) && dfloat(od)) {
            cr_assert(elem_isnan(od, got), "%s: want NaN", what);
            continue;
        }
        if (!dfloat(od)) { /* means of integers truncate exactly */
            /* The CPU divides a float64 sum: allow its rounding. */
            const elem want = ref_from_value(od, w);
            const long double slack = fabsl(w) * 0x1p-50L > 1 ? fabsl(w) * 0x1p-50L : 1;
            cr_assert(elem_bits_equal(od, got, want) ||
                          fabsl(elem_value(od, got) - elem_value(od, want)) <= slack,
                      "%s: got %Lg want %Lg", what, elem_value(od, got), elem_value(od, want));
            continue;
        }
        const long double g = elem_value(od, got);
        if (isinf(elem_value(od, ref_from_value(od, w)))) { /* overflows the dtype */
            cr_assert(g == elem_value(od, ref_from_value(od, w)), "%s: got %Lg want %Lg", what,
                      g, w);
            continue;
        }
        const long double tol =
            round_tol(od) * fabsl(w) + (long double)count * 0x1p-23L * fabs_sum;
        cr_assert(fabsl(g - w) <= tol, "%s: got %.20Lg want %.20Lg", what, g, w);
    } while (next_index(ond, oshape, oi));
done:
    cm_tensor_release(x);
    cm_tensor_release(out);
}

Test(ops_matrix, reduce_every_op_dtype_axis_and_layout_matches_reference) {
    cm_device *dev = dev_open();
    int cases = 0;
    for (int op = 1; op < CM_REDUCE_COUNT; ++op) {
        for (size_t di = 0; di < N_DT; ++di) {
            for (size_t s = 0; s < N_SHAPES; ++s) {
                const test_shape *ts = &shapes[s];
                for (int32_t axis = -1; axis < ts->ndim; ++axis) {
                    const enum layout l = (enum layout)((s + (size_t)axis + 1) % L_COUNT);
                    check_reduce(dev, (cm_reduce_op)op, dtypes[di], dtypes[di], ts->ndim,
                                 ts->shape, axis, (s + (size_t)axis) % 2 == 0, l);
                    cases++;
                }
            }
        }
    }
    cr_assert_gt(cases, 500);
    cm_device_release(dev);
}

/* Long reductions (a threadgroup per output on Metal), every layout. */
Test(ops_matrix, reduce_long_rows_and_everything) {
    cm_device *dev = dev_open();
    const int64_t rows[2] = {3, 700}, cols[2] = {600, 5};
    const cm_dtype ds[] = {CM_FLOAT32, CM_INT32, CM_UINT8, CM_FLOAT16, CM_INT64, CM_BFLOAT16};
    for (size_t k = 0; k < sizeof ds / sizeof ds[0]; ++k) {
        for (int op = 1; op < CM_REDUCE_COUNT; ++op) {
            const enum layout l = (enum layout)(((size_t)op + k) % L_COUNT);
            check_reduce(dev, (cm_reduce_op)op, ds[k], ds[k], 2, rows, 1, false, l);
            check_reduce(dev, (cm_reduce_op)op, ds[k], ds[k], 2, cols, 0, true, l);
            check_reduce(dev, (cm_reduce_op)op, ds[k], ds[k], 2, rows, -1, false, l);
        }
    }
    cm_device_release(dev);
}

/* Long reductions of few outputs (split into chunks, then combined, on
 * Metal). */
Test(ops_matrix, reduce_few_very_long_rows) {
    skip_under_valgrind();
    cm_device *dev = dev_open();
    const int64_t rows[2] = {2, 9000}, cols[2] = {9000, 3}, all[3] = {3, 50, 100};
    const cm_dtype ds[] = {CM_FLOAT32, CM_INT64, CM_UINT16, CM_FLOAT16, CM_BOOL, CM_INT8};
    for (size_t k = 0; k < sizeof ds / sizeof ds[0]; ++k) {
        for (int op = 1; op < CM_REDUCE_COUNT; ++op) {
            const enum layout l = (enum layout)(((size_t)op + k) % L_COUNT);
            check_reduce(dev, (cm_reduce_op)op, ds[k], ds[k], 2, rows, 1, true, l);
            check_reduce(dev, (cm_reduce_op)op, ds[k], ds[k], 2, cols, 0, false, l);
            check_reduce(dev, (cm_reduce_op)op, ds[k], ds[k], 3, all, -1, false, l);
        }
    }
    cm_device_release(dev);
}

Test(ops_matrix, reduce_results_convert_to_other_output_dtypes) {
    skip_under_valgrind();
    cm_device *dev = dev_open();
    const int64_t shape[2] = {17, 33};
    const cm_dtype in[] = {CM_INT8, CM_UINT16, CM_BOOL, CM_FLOAT16, CM_BFLOAT16, CM_FLOAT32,
                           CM_INT32};
    const cm_dtype out[] = {CM_INT64, CM_UINT64, CM_INT32, CM_FLOAT32, CM_FLOAT32, CM_INT16,
                            CM_FLOAT16};
    for (size_t k = 0; k < sizeof in / sizeof in[0]; ++k)
        for (int op = 1; op < CM_REDUCE_COUNT; ++op)
            for (int32_t axis = -1; axis < 2; ++axis)
                check_reduce(dev, (cm_reduce_op)op, in[k], out[k], 2, shape, axis, false,
                             axis == 0 ? L_TRANSPOSED : L_CONTIG);
    cm_device_release(dev);
}

Test(ops_matrix, integer_sums_wrap_in_64_bits_and_are_exact) {
    cm_device *dev = dev_open();
    const int64_t n[1] = {300};
    cm_tensor *x = new_tensor(dev, CM_INT64, 1, n);
    int64_t *p = NULL;
    CHECK(cm_tensor_host_write(x, CM_INT64, (void **)&p));
    for (int i = 0; i < 300; ++i)
        p[i] = i % 3 == 0 ? INT64_MAX : i % 3 == 1 ? 2 : -(INT64_MAX - 5);
    cm_tensor *s = new_tensor(dev, CM_INT64, 0, NULL);
    CHECK(cm_reduce(CM_REDUCE_SUM, x, CM_AXIS_ALL, s));
    cr_assert_eq(get_at(s, NULL).i64, 700);
    cm_tensor *u = new_tensor(dev, CM_UINT8, 0, NULL);
    CHECK(cm_reduce(CM_REDUCE_SUM, x, 0, u));
    cr_assert_eq(get_at(u, NULL).u8, 700 % 256);
    cm_tensor_release(x);
    cm_tensor_release(s);
    cm_tensor_release(u);
    cm_device_release(dev);
}
