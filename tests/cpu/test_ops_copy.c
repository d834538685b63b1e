/* cm_fill and cm_copy on the CPU device: every dtype and layout against
 * element-by-element references, plus the untouched gaps of strided
 * outputs. */
#include "ops/ops_util.h"

/* Every byte of `parent` outside the elements of `view` still holds the
 * sentinel pattern that was written before the op. */
static void check_gaps(const cm_tensor *parent, const cm_tensor *view, uint64_t seed) {
    cm_tensor_info pi, vi;
    CHECK(cm_tensor_get_info(parent, &pi));
    CHECK(cm_tensor_get_info(view, &vi));
    if (pi.numel == 0)
        return;
    const size_t sz = dsize(pi.dtype);
    const void *p = NULL;
    CHECK(cm_tensor_host_read(parent, pi.dtype, &p));
    /* Mark the view's element offsets. */
    bool *in_view = calloc((size_t)pi.numel, 1);
    int64_t idx[CM_MAX_NDIM] = {0};
    if (vi.numel > 0) {
        do {
            int64_t off = (int64_t)vi.byte_offset / (int64_t)sz;
            for (int32_t k = 0; k < vi.ndim; ++k)
                off += idx[k] * vi.strides[k];
            in_view[off] = true;
        } while (next_index(vi.ndim, vi.shape, idx));
    }
    for (int64_t i = 0; i < pi.numel; ++i) {
        if (in_view[i])
            continue;
        elem want = gen_elem(pi.dtype, (uint64_t)i, seed, false);
        cr_assert(memcmp((const char *)p + (size_t)i * sz, want.b, sz) == 0,
                  "element %lld outside the view was written", (long long)i);
    }
    free(in_view);
}

Test(ops_copy, every_dtype_layout_and_shape_matches_elementwise_reference) {
    cm_device *dev = cpu();
    int cases = 0;
    for (size_t s = 0; s < N_TEST_SHAPES; ++s) {
        const test_shape *ts = &test_shapes[s];
        for (int di = 0; di < N_DTYPES; ++di) {
            const cm_dtype d = all_dtypes[di];
            for (int ls = 0; ls < L_COUNT; ++ls) {
                for (int ld = 0; ld < L_BROADCAST; ++ld) {
                    cm_tensor *src = make_view(dev, d, ts->ndim, ts->shape, (enum layout)ls,
                                               11, false, NULL);
                    cm_tensor *dparent = NULL;
                    cm_tensor *dst = make_view(dev, d, ts->ndim, ts->shape, (enum layout)ld,
                                               22, false, &dparent);
                    CHECK(cm_copy(src, dst));
                    int64_t idx[CM_MAX_NDIM] = {0};
                    if (numel_of(ts->ndim, ts->shape) > 0) {
                        do {
                            elem a = get_at(src, idx), b = get_at(dst, idx);
                            cr_assert(elem_bits_equal(d, a, b), "%s src %s dst %s shape #%zu",
                                      dname(d), layout_names[ls], layout_names[ld], s);
                        } while (next_index(ts->ndim, ts->shape, idx));
                    }
                    check_gaps(dparent, dst, 22);
                    cm_tensor_release(src);
                    cm_tensor_release(dst);
                    cm_tensor_release(dparent);
                    cases++;
                }
            }
        }
    }
    cr_assert_gt(cases, 1000);
    cm_device_release(dev);
}

Test(ops_copy, make_contiguous_of_large_transposes_and_permutes) {
    cm_device *dev = cpu();
    /* Big enough for the tiled path, with ragged tile edges. */
    const int64_t shapes[][3] = {{1, 70, 45}, {3, 40, 37}, {2, 9, 130}};
    const cm_dtype dts[] = {CM_UINT8, CM_FLOAT16, CM_FLOAT32, CM_INT64};
    const int32_t perms[][3] = {{0, 2, 1}, {2, 1, 0}, {1, 2, 0}, {2, 0, 1}};
    for (size_t s = 0; s < 3; ++s) {
        for (size_t di = 0; di < 4; ++di) {
            for (size_t p = 0; p < 4; ++p) {
                cm_tensor *base = make_view(dev, dts[di], 3, shapes[s], L_CONTIG, 5, false, NULL);
                cm_tensor *v = NULL;
                CHECK(cm_tensor_permute(base, perms[p], &v));
                cm_tensor_info vi;
                CHECK(cm_tensor_get_info(v, &vi));
                cm_tensor *out = new_tensor(dev, dts[di], 3, vi.shape);
                CHECK(cm_copy(v, out));
                int64_t idx[3] = {0};
                do {
                    cr_assert(elem_bits_equal(dts[di], get_at(v, idx), get_at(out, idx)));
                } while (next_index(3, vi.shape, idx));
                /* And back: scatter into a transposed destination. */
                cm_tensor *back = new_tensor(dev, dts[di], 3, shapes[s]);
                cm_tensor *bv = NULL;
                CHECK(cm_tensor_permute(back, perms[p], &bv));
                CHECK(cm_copy(out, bv));
                cm_tensor_info bi;
                CHECK(cm_tensor_get_info(base, &bi));
                const void *x = NULL, *y = NULL;
                CHECK(cm_tensor_host_read(base, dts[di], &x));
                CHECK(cm_tensor_host_read(back, dts[di], &y));
                cr_assert(memcmp(x, y, (size_t)bi.numel * dsize(dts[di])) == 0);
                cm_tensor_release(bv);
                cm_tensor_release(back);
                cm_tensor_release(out);
                cm_tensor_release(v);
                cm_tensor_release(base);
            }
        }
    }
    cm_device_release(dev);
}

Test(ops_copy, identical_view_is_a_no_op) {
    cm_device *dev = cpu();
    const int64_t shape[2] = {5, 6};
    cm_tensor *t = make_view(dev, CM_INT32, 2, shape, L_STEP, 3, false, NULL);
    int64_t idx[2] = {4, 5};
    elem before = get_at(t, idx);
    CHECK(cm_copy(t, t));
    cr_assert_eq(get_at(t, idx).i32, before.i32);
    cm_tensor_release(t);
    cm_device_release(dev);
}

Test(ops_fill, every_dtype_and_layout_gets_the_converted_value) {
    REQUIRE_EXACT_REFERENCE();
    cm_device *dev = cpu();
    const double values[] = {0.0, -1.5, 300.25, -0.0, NAN, INFINITY, 1e-30};
    for (size_t s = 0; s < N_TEST_SHAPES; ++s) {
        const test_shape *ts = &test_shapes[s];
        for (int di = 0; di < N_DTYPES; ++di) {
            const cm_dtype d = all_dtypes[di];
            for (int l = 0; l < L_BROADCAST; ++l) {
                for (size_t v = 0; v < sizeof values / sizeof values[0]; ++v) {
                    cm_tensor *parent = NULL;
                    cm_tensor *t = make_view(dev, d, ts->ndim, ts->shape, (enum layout)l, 7,
                                             false, &parent);
                    CHECK(cm_fill(t, CM_FLOAT64, &values[v]));
                    elem in;
                    in.f64 = values[v];
                    const elem want = ref_convert(d, CM_FLOAT64, in);
                    int64_t idx[CM_MAX_NDIM] = {0};
                    if (numel_of(ts->ndim, ts->shape) > 0) {
                        do {
                            elem got = get_at(t, idx);
                            if (isnan(values[v]) && dfloat(d))
                                cr_assert(elem_isnan(d, got));
                            else
                                cr_assert(elem_bits_equal(d, got, want), "%s value %g",
                                          dname(d), values[v]);
                        } while (next_index(ts->ndim, ts->shape, idx));
                    }
                    check_gaps(parent, t, 7);
                    cm_tensor_release(t);
                    cm_tensor_release(parent);
                }
            }
        }
    }
    cm_device_release(dev);
}

Test(ops_fill, int64_and_uint64_values_are_exact) {
    cm_device *dev = cpu();
    const int64_t shape[1] = {37};
    cm_tensor *a = new_tensor(dev, CM_INT64, 1, shape);
    cm_tensor *b = new_tensor(dev, CM_UINT64, 1, shape);
    const int64_t big = INT64_MAX - 2; /* not representable as a double */
    const uint64_t ubig = UINT64_MAX - 6;
    CHECK(cm_fill(a, CM_INT64, &big));
    CHECK(cm_fill(b, CM_UINT64, &ubig));
    int64_t idx[1] = {36};
    cr_assert_eq(get_at(a, idx).i64, big);
    cr_assert_eq(get_at(b, idx).u64, ubig);
    /* An int64 into int8 wraps, a float64 saturates. */
    cm_tensor *c = new_tensor(dev, CM_INT8, 1, shape);
    const int64_t wrap = 300;
    CHECK(cm_fill(c, CM_INT64, &wrap));
    cr_assert_eq(get_at(c, idx).i8, 44);
    const double sat = 300.0;
    CHECK(cm_fill(c, CM_FLOAT64, &sat));
    cr_assert_eq(get_at(c, idx).i8, 127);
    cm_tensor_release(a);
    cm_tensor_release(b);
    cm_tensor_release(c);
    cm_device_release(dev);
}
