/* cm_unary and cm_binary on the CPU device: every op, dtype and layout,
 * with NumPy broadcasting, against references computed in the test.
 * Exact ops are compared bit for bit; transcendental ones within the
 * tolerances below. */
#include "ops/ops_util.h"

/* Relative tolerance of transcendental ops, by dtype: a few ulp of the
 * computing precision plus one rounding to the dtype. */
static long double tolerance(cm_dtype d) {
    switch (d) {
    case CM_FLOAT16: return 2e-3L;
    case CM_BFLOAT16: return 1.6e-2L;
    case CM_FLOAT32: return 2e-6L;
    default: return 1e-14L;
    }
}

static bool op_is_exact(cm_unary_op op) {
    return op <= CM_UNARY_SQRT || op == CM_UNARY_FLOOR || op == CM_UNARY_CEIL;
}

static uint64_t int_bits(cm_dtype d, elem e) {
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

static elem from_bits(cm_dtype d, uint64_t bits) {
    elem r;
    memset(&r, 0, sizeof r);
    memcpy(r.b, &bits, dsize(d));
    return r;
}

/* Reference for a float result computed exactly enough: long double for
 * the narrow dtypes (one rounding after an exact-enough long double),
 * double for float64. */
static elem float_result(cm_dtype d, long double v) {
    return ref_from_value(d, v);
}

static elem ref_unary(cm_unary_op op, cm_dtype d, elem a) {
    if (!dfloat(d)) {
        const uint64_t x = int_bits(d, a);
        const bool neg = dsigned(d) && (int64_t)x < 0;
        switch (op) {
        case CM_UNARY_NEG: return from_bits(d, 0 - x);
        case CM_UNARY_ABS: return from_bits(d, neg ? 0 - x : x);
        case CM_UNARY_SQUARE: return from_bits(d, x * x);
        case CM_UNARY_RELU: return from_bits(d, neg ? 0 : x);
        case CM_UNARY_SIGN: return from_bits(d, neg ? ~0ull : x != 0);
        default: break;
        }
        cr_assert_fail("integer op %d", op);
    }
    if (d == CM_FLOAT64) {
        const double x = a.f64;
        double r = 0;
        switch (op) {
        case CM_UNARY_NEG: r = -x; break;
        case CM_UNARY_ABS: r = fabs(x); break;
        case CM_UNARY_SQUARE: r = x * x; break;
        case CM_UNARY_RELU: r = isnan(x) ? x : x > 0 ? x : 0.0; break;
        case CM_UNARY_SIGN: r = isnan(x) ? x : x > 0 ? 1.0 : x < 0 ? -1.0 : 0.0; break;
        case CM_UNARY_SQRT: r = sqrt(x); break;
        case CM_UNARY_FLOOR: r = floor(x); break;
        case CM_UNARY_CEIL: r = ceil(x); break;
        default: r = (double)(long double)0; break;
        }
        if (op_is_exact(op)) {
            elem e;
            e.f64 = r;
            return e;
        }
    }
    const long double x = elem_value(d, a);
    long double r;
    switch (op) {
    case CM_UNARY_NEG: r = -x; break;
    case CM_UNARY_ABS: r = fabsl(x); break;
    case CM_UNARY_SQUARE: r = x * x; break;
    case CM_UNARY_RELU: r = isnan(x) ? x : x > 0 ? x : 0.0L; break;
    case CM_UNARY_SIGN: r = isnan(x) ? x : x > 0 ? 1.0L : x < 0 ? -1.0L : 0.0L; break;
    case CM_UNARY_SQRT: r = sqrtl(x); break;
    case CM_UNARY_RSQRT: r = 1.0L / sqrtl(x); break;
    case CM_UNARY_EXP: r = expl(x); break;
    case CM_UNARY_LOG: r = logl(x); break;
    case CM_UNARY_SIN: r = sinl(x); break;
    case CM_UNARY_COS: r = cosl(x); break;
    case CM_UNARY_TANH: r = tanhl(x); break;
    case CM_UNARY_SIGMOID: r = 1.0L / (1.0L + expl(-x)); break;
    case CM_UNARY_FLOOR: r = floorl(x); break;
    default: r = ceill(x); break;
    }
    return float_result(d, r);
}

static void assert_close(cm_dtype d, elem got, elem want, bool exact, const char *what) {
    if (elem_isnan(d, want)) {
        cr_assert(elem_isnan(d, got), "%s: want NaN, got %Lg", what, elem_value(d, got));
        return;
    }
    if (exact) {
        cr_assert(elem_bits_equal(d, got, want), "%s: got %.20Lg want %.20Lg", what,
                  elem_value(d, got), elem_value(d, want));
        return;
    }
    const long double g = elem_value(d, got), w = elem_value(d, want);
    if (isinf(w)) {
        cr_assert(g == w, "%s: got %Lg want %Lg", what, g, w);
        return;
    }
    const long double tol = tolerance(d) * (fabsl(w) > 1 ? fabsl(w) : 1);
    cr_assert(fabsl(g - w) <= tol, "%s: got %.20Lg want %.20Lg", what, g, w);
}

static const test_shape math_shapes[] = {
    {0, {0}}, {1, {0}}, {1, {13}}, {2, {3, 0}}, {2, {4, 7}}, {3, {2, 3, 5}}, {2, {1, 300}},
};
#define N_MATH_SHAPES (sizeof math_shapes / sizeof math_shapes[0])

Test(ops_unary, every_op_dtype_and_layout_matches_reference) {
    REQUIRE_EXACT_REFERENCE();
    cm_device *dev = cpu();
    int cases = 0;
    for (int op = 1; op < CM_UNARY_COUNT; ++op) {
        for (int di = 1; di < N_DTYPES; ++di) { /* bool has no unary ops */
            const cm_dtype d = all_dtypes[di];
            if (op >= CM_UNARY_SQRT && !dfloat(d))
                continue;
            const bool exact = op_is_exact((cm_unary_op)op) || !dfloat(d);
            /* Transcendental ops get tame inputs; exact ones edge values. */
            const bool tame = !exact;
            for (size_t s = 0; s < N_MATH_SHAPES; ++s) {
                const test_shape *ts = &math_shapes[s];
                for (int l = 0; l < L_COUNT; ++l) {
                    cm_tensor *x = make_view(dev, d, ts->ndim, ts->shape, (enum layout)l,
                                             (uint64_t)(op * 100 + l), tame, NULL);
                    const enum layout lo = l == L_BROADCAST ? L_NEGATIVE : (enum layout)((l + 1) % L_BROADCAST);
                    cm_tensor *out = make_view(dev, d, ts->ndim, ts->shape, lo, 9, false, NULL);
                    CHECK(cm_unary((cm_unary_op)op, x, out));
                    int64_t idx[CM_MAX_NDIM] = {0};
                    if (numel_of(ts->ndim, ts->shape) > 0) {
                        do {
                            char what[96];
                            snprintf(what, sizeof what, "%s %s %s", cm_unary_op_name(op),
                                     dname(d), layout_names[l]);
                            assert_close(d, get_at(out, idx), ref_unary(op, d, get_at(x, idx)),
                                         exact, what);
                        } while (next_index(ts->ndim, ts->shape, idx));
                    }
                    cm_tensor_release(x);
                    cm_tensor_release(out);
                    cases++;
                }
            }
        }
    }
    cr_assert_gt(cases, 2000);
    cm_device_release(dev);
}

static elem ref_binary(cm_binary_op op, cm_dtype d, elem a, elem b) {
    if (op >= CM_BINARY_EQ) {
        const long double x = elem_value(d, a), y = elem_value(d, b);
        elem r;
        memset(&r, 0, sizeof r);
        switch (op) {
        case CM_BINARY_EQ: r.u8 = x == y; break;
        case CM_BINARY_NE: r.u8 = x != y; break;
        case CM_BINARY_LT: r.u8 = x < y; break;
        case CM_BINARY_LE: r.u8 = x <= y; break;
        case CM_BINARY_GT: r.u8 = x > y; break;
        default: r.u8 = x >= y; break;
        }
        return r;
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
        const uint64_t x = int_bits(d, a), y = int_bits(d, b);
        switch (op) {
        case CM_BINARY_ADD: return from_bits(d, x + y);
        case CM_BINARY_SUB: return from_bits(d, x - y);
        case CM_BINARY_MUL: return from_bits(d, x * y);
        default: break;
        }
        if (y == 0)
            return from_bits(d, 0);
        if (dsigned(d)) {
            const int64_t sx = (int64_t)x, sy = (int64_t)y;
            if (sy == -1)
                return from_bits(d, 0 - x);
            return from_bits(d, (uint64_t)(sx / sy));
        }
        return from_bits(d, x / y);
    }
    if (d == CM_FLOAT64) {
        elem r;
        const double x = a.f64, y = b.f64;
        r.f64 = op == CM_BINARY_ADD ? x + y : op == CM_BINARY_SUB ? x - y
                : op == CM_BINARY_MUL ? x * y : x / y;
        return r;
    }
    const long double x = elem_value(d, a), y = elem_value(d, b);
    const long double r = op == CM_BINARY_ADD ? x + y : op == CM_BINARY_SUB ? x - y
                          : op == CM_BINARY_MUL ? x * y : x / y;
    return float_result(d, r);
}

static void check_binary(cm_device *dev, cm_binary_op op, cm_dtype d, int32_t ndim,
                         const int64_t *shape, int32_t and_, const int64_t *ash, int32_t bnd,
                         const int64_t *bsh, enum layout la, enum layout lb, enum layout lo) {
    cm_tensor *a = make_view(dev, d, and_, ash, la, 41 + (uint64_t)op, false, NULL);
    cm_tensor *b = make_view(dev, d, bnd, bsh, lb, 42 + (uint64_t)op, false, NULL);
    const cm_dtype od = op >= CM_BINARY_EQ ? CM_BOOL : d;
    cm_tensor *out = make_view(dev, od, ndim, shape, lo, 43, false, NULL);
    CHECK(cm_binary(op, a, b, out));
    int64_t idx[CM_MAX_NDIM] = {0}, ia[CM_MAX_NDIM], ib[CM_MAX_NDIM];
    if (numel_of(ndim, shape) > 0) {
        do {
            bcast_index(ndim, idx, and_, ash, ia);
            bcast_index(ndim, idx, bnd, bsh, ib);
            const elem x = get_at(a, ia), y = get_at(b, ib);
            const elem want = ref_binary(op, d, x, y), got = get_at(out, idx);
            char what[128];
            snprintf(what, sizeof what, "%s %s (%s, %s -> %s) %.17Lg, %.17Lg",
                     cm_binary_op_name(op), dname(d), layout_names[la], layout_names[lb],
                     layout_names[lo], elem_value(d, x), elem_value(d, y));
            if ((op == CM_BINARY_MIN || op == CM_BINARY_MAX) && dfloat(d) &&
                elem_value(d, want) == 0 && elem_value(d, got) == 0)
                continue; /* either zero of equal values */
            assert_close(od, got, want, true, what);
        } while (next_index(ndim, shape, idx));
    }
    cm_tensor_release(a);
    cm_tensor_release(b);
    cm_tensor_release(out);
}

Test(ops_binary, every_op_dtype_and_layout_matches_reference) {
    cm_device *dev = cpu();
    for (int op = 1; op < CM_BINARY_COUNT; ++op) {
        for (int di = 0; di < N_DTYPES; ++di) {
            const cm_dtype d = all_dtypes[di];
            if (d == CM_BOOL && op < CM_BINARY_MIN)
                continue;
            for (size_t s = 0; s < N_MATH_SHAPES; ++s) {
                const test_shape *ts = &math_shapes[s];
                for (int l = 0; l < L_COUNT; ++l) {
                    const enum layout lb = (enum layout)((l + 2) % L_COUNT);
                    const enum layout lo = (enum layout)(l % L_BROADCAST);
                    check_binary(dev, (cm_binary_op)op, d, ts->ndim, ts->shape, ts->ndim,
                                 ts->shape, ts->ndim, ts->shape, (enum layout)l, lb, lo);
                }
            }
        }
    }
    cm_device_release(dev);
}

Test(ops_binary, numpy_broadcasting_of_both_inputs) {
    cm_device *dev = cpu();
    const int64_t out[3] = {3, 4, 5}, a1[3] = {3, 1, 5}, b1[2] = {4, 1}, c1[1] = {5},
                  d1[3] = {1, 4, 1};
    const cm_dtype dts[] = {CM_INT32, CM_FLOAT32, CM_FLOAT16, CM_UINT8, CM_FLOAT64};
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

Test(ops_binary, output_may_be_an_input_itself) {
    cm_device *dev = cpu();
    const int64_t shape[2] = {6, 5};
    cm_tensor *a = make_view(dev, CM_FLOAT32, 2, shape, L_NEGATIVE, 1, true, NULL);
    cm_tensor *b = make_view(dev, CM_FLOAT32, 2, shape, L_TRANSPOSED, 2, true, NULL);
    cm_tensor *copy = new_tensor(dev, CM_FLOAT32, 2, shape);
    CHECK(cm_copy(a, copy));
    CHECK(cm_binary(CM_BINARY_MUL, a, b, a));
    int64_t idx[2] = {0};
    do {
        cr_assert_eq(get_at(a, idx).f32, get_at(copy, idx).f32 * get_at(b, idx).f32);
    } while (next_index(2, shape, idx));
    CHECK(cm_unary(CM_UNARY_NEG, b, b));
    cm_tensor *h = make_view(dev, CM_BFLOAT16, 2, shape, L_STEP, 3, true, NULL);
    cm_tensor *hc = new_tensor(dev, CM_BFLOAT16, 2, shape);
    CHECK(cm_copy(h, hc));
    CHECK(cm_binary(CM_BINARY_ADD, h, h, h));
    memset(idx, 0, sizeof idx);
    do {
        const long double w = 2 * elem_value(CM_BFLOAT16, get_at(hc, idx));
        cr_assert_eq(elem_value(CM_BFLOAT16, get_at(h, idx)), w);
    } while (next_index(2, shape, idx));
    cm_tensor_release(a);
    cm_tensor_release(b);
    cm_tensor_release(copy);
    cm_tensor_release(h);
    cm_tensor_release(hc);
    cm_device_release(dev);
}
