/* cm_reduce on the CPU device: sum, mean, max and min over every axis or
 * all of them, with and without kept axes, every dtype and layout, against
 * references accumulated in the test (long double for floats, wrapping
 * uint64 for integers). Float sums are compared within one rounding of the
 * output dtype plus 1e-12 of the sum of magnitudes (float64 accumulation);
 * integer sums, max and min bit for bit. */
#include "ops/ops_util.h"

static long double round_tol(cm_dtype d) {
    switch (d) {
    case CM_FLOAT16: return 0x1p-10L;
    case CM_BFLOAT16: return 0x1p-7L;
    case CM_FLOAT32: return 0x1p-23L;
    default: return 0x1p-50L;
    }
}

static uint64_t sext(cm_dtype d, elem e) {
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

/* Reduces x (ndim, shape) over `axis` (-1: all) with keepdims into a
 * fresh output of dtype od, and checks every output element. */
static void check_reduce(cm_device *dev, cm_reduce_op op, cm_dtype d, cm_dtype od,
                         int32_t ndim, const int64_t *shape, int32_t axis, bool keep,
                         enum layout lx) {
    const bool sum = op == CM_REDUCE_SUM || op == CM_REDUCE_MEAN;
    cm_tensor *x = make_view(dev, d, ndim, shape, lx, 50 + (uint64_t)op, sum && dfloat(d), NULL);
    int64_t oshape[CM_MAX_NDIM];
    int32_t ond = 0;
    for (int32_t k = 0; k < ndim; ++k) {
        const bool reduced = axis < 0 || k == axis;
        if (!reduced)
            oshape[ond++] = shape[k];
        else if (keep)
            oshape[ond++] = 1;
    }
    cm_tensor *out = make_view(dev, od, ond, oshape, L_STEP, 51, false, NULL);
    const cm_status st = cm_reduce(op, x, axis < 0 ? CM_AXIS_ALL : axis - ndim, out);
    int64_t count = 1;
    for (int32_t k = 0; k < ndim; ++k)
        if (axis < 0 || k == axis)
            count *= shape[k];
    if (count == 0 && numel_of(ond, oshape) > 0 &&
        (op == CM_REDUCE_MAX || op == CM_REDUCE_MIN)) {
        cr_assert_eq(st, CM_ERR_INVALID_ARGUMENT);
        cr_assert(strstr(cm_last_error(), "no identity") != NULL, "%s", cm_last_error());
        goto done;
    }
    cr_assert_eq(st, CM_OK, "%s", cm_last_error());
    if (numel_of(ond, oshape) == 0)
        goto done;
    int64_t oi[CM_MAX_NDIM] = {0};
    do {
        /* The x indices that map onto oi. */
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
                const elem e = get_at(x, xi);
                const long double v = elem_value(d, e);
                nan = nan || elem_isnan(d, e);
                fsum += v;
                fabs_sum += fabsl(v);
                isum += sext(d, e);
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
        elem want;
        if (op == CM_REDUCE_MAX || op == CM_REDUCE_MIN) {
            if (nan) {
                cr_assert(elem_isnan(od, got), "%s: want NaN", what);
                continue;
            }
            want = ref_convert(od, d, best_e);
            if (dfloat(od) && elem_value(od, want) == 0)
                cr_assert(elem_value(od, got) == 0, "%s", what);
            else
                cr_assert(elem_bits_equal(od, got, want), "%s: got %Lg want %Lg", what,
                          elem_value(od, got), elem_value(od, want));
            continue;
        }
        if (!dfloat(d)) {
            if (op == CM_REDUCE_SUM) {
                elem s;
                s.u64 = isum;
                want = ref_convert(od, dsigned(d) || d == CM_BOOL ? CM_INT64 : CM_UINT64, s);
                cr_assert(elem_bits_equal(od, got, want), "%s: got %Lg want %Lg", what,
                          elem_value(od, got), elem_value(od, want));
                continue;
            }
            const long double total =
                dsigned(d) || d == CM_BOOL ? (long double)(int64_t)isum : (long double)isum;
            fsum = total;
            fabs_sum = fabsl(total);
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
        if (!dfloat(od)) { /* exact means of integers, truncated */
            want = ref_from_value(od, w);
            const long double diff = fabsl(elem_value(od, got) - elem_value(od, want));
            cr_assert(diff <= (fabs_sum * 1e-12L >= 1 ? fabs_sum * 1e-12L : 1), "%s: got %Lg want %Lg",
                      what, elem_value(od, got), elem_value(od, want));
            continue;
        }
        const long double g = elem_value(od, got);
        const long double tol = round_tol(od) * fabsl(w) + 1e-12L * fabs_sum;
        cr_assert(fabsl(g - w) <= tol, "%s: got %.20Lg want %.20Lg", what, g, w);
    } while (next_index(ond, oshape, oi));
done:
    cm_tensor_release(x);
    cm_tensor_release(out);
}

Test(ops_reduce, every_op_dtype_axis_and_layout_matches_reference) {
    cm_device *dev = cpu();
    int cases = 0;
    for (int op = 1; op < CM_REDUCE_COUNT; ++op) {
        for (int di = 0; di < N_DTYPES; ++di) {
            const cm_dtype d = all_dtypes[di];
            for (size_t s = 0; s < N_TEST_SHAPES; ++s) {
                const test_shape *ts = &test_shapes[s];
                for (int32_t axis = -1; axis < ts->ndim; ++axis) {
                    for (int l = 0; l < L_COUNT; ++l) {
                        check_reduce(dev, (cm_reduce_op)op, d, d, ts->ndim, ts->shape, axis,
                                     (l + axis) % 2 == 0, (enum layout)l);
                        cases++;
                    }
                }
            }
        }
    }
    cr_assert_gt(cases, 1000);
    cm_device_release(dev);
}

Test(ops_reduce, results_convert_to_a_wider_output_dtype) {
    cm_device *dev = cpu();
    const int64_t shape[2] = {17, 33};
    const cm_dtype in[] = {CM_INT8, CM_UINT16, CM_BOOL, CM_FLOAT16, CM_BFLOAT16, CM_FLOAT32};
    const cm_dtype out[] = {CM_INT64, CM_UINT64, CM_INT32, CM_FLOAT32, CM_FLOAT64, CM_FLOAT64};
    for (size_t k = 0; k < sizeof in / sizeof in[0]; ++k)
        for (int op = 1; op < CM_REDUCE_COUNT; ++op)
            for (int32_t axis = -1; axis < 2; ++axis)
                check_reduce(dev, (cm_reduce_op)op, in[k], out[k], 2, shape, axis, false,
                             axis == 0 ? L_TRANSPOSED : L_CONTIG);
    cm_device_release(dev);
}

Test(ops_reduce, integer_sums_wrap_in_64_bits_and_are_exact) {
    cm_device *dev = cpu();
    const int64_t n[1] = {3};
    cm_tensor *x = new_tensor(dev, CM_INT64, 1, n);
    int64_t *p = NULL;
    CHECK(cm_tensor_host_write(x, CM_INT64, (void **)&p));
    p[0] = INT64_MAX;
    p[1] = 2;
    p[2] = -(INT64_MAX - 5);
    cm_tensor *s = new_tensor(dev, CM_INT64, 0, NULL);
    CHECK(cm_reduce(CM_REDUCE_SUM, x, CM_AXIS_ALL, s));
    cr_assert_eq(get_at(s, NULL).i64, 7);
    cm_tensor *u = new_tensor(dev, CM_UINT8, 0, NULL);
    CHECK(cm_reduce(CM_REDUCE_SUM, x, 0, u)); /* 7 fits */
    cr_assert_eq(get_at(u, NULL).u8, 7);
    cm_tensor_release(x);
    cm_tensor_release(s);
    cm_tensor_release(u);
    cm_device_release(dev);
}
