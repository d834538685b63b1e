/* SPDX-License-Identifier: MIT */
/* Error paths of the ops: each asserts the status and a piece of the
 * message, and that the output was left unchanged. */
#include "ops/ops_util.h"

typedef struct fixture {
    cm_device *dev;
    cm_tensor *f23, *f32_, *i23, *b23, *f3, *f4;
} fixture;

static fixture make(void) {
    fixture f;
    f.dev = cpu();
    const int64_t s23[2] = {2, 3}, s32[2] = {3, 2}, s3[1] = {3}, s4[1] = {4};
    f.f23 = make_view(f.dev, CM_FLOAT32, 2, s23, L_CONTIG, 1, true, NULL);
    f.f32_ = make_view(f.dev, CM_FLOAT32, 2, s32, L_CONTIG, 2, true, NULL);
    f.i23 = make_view(f.dev, CM_INT32, 2, s23, L_CONTIG, 3, true, NULL);
    f.b23 = make_view(f.dev, CM_BOOL, 2, s23, L_CONTIG, 4, true, NULL);
    f.f3 = make_view(f.dev, CM_FLOAT32, 1, s3, L_CONTIG, 5, true, NULL);
    f.f4 = make_view(f.dev, CM_FLOAT32, 1, s4, L_CONTIG, 6, true, NULL);
    return f;
}

static void drop(fixture *f) {
    cm_tensor_release(f->f23);
    cm_tensor_release(f->f32_);
    cm_tensor_release(f->i23);
    cm_tensor_release(f->b23);
    cm_tensor_release(f->f3);
    cm_tensor_release(f->f4);
    cm_device_release(f->dev);
}

static void assert_unchanged(const cm_tensor *t, uint64_t seed) {
    cm_tensor_info info;
    CHECK(cm_tensor_get_info(t, &info));
    const void *p = NULL;
    CHECK(cm_tensor_host_read(t, info.dtype, &p));
    const size_t sz = dsize(info.dtype);
    for (int64_t i = 0; i < info.numel; ++i) {
        const elem e = gen_elem(info.dtype, (uint64_t)i, seed, true);
        cr_assert(memcmp((const char *)p + (size_t)i * sz, e.b, sz) == 0, "element %lld changed",
                  (long long)i);
    }
}

Test(ops_errors, null_arguments_and_bad_enums) {
    fixture f = make();
    EXPECT_FAIL(cm_copy(NULL, f.f23, NULL), CM_ERR_INVALID_ARGUMENT, "cm_copy: src = NULL");
    EXPECT_FAIL(cm_cast(f.f23, NULL, NULL), CM_ERR_INVALID_ARGUMENT, "cm_cast: dst = NULL");
    EXPECT_FAIL(cm_fill(f.f23, CM_FLOAT64, NULL, NULL), CM_ERR_INVALID_ARGUMENT, "value = NULL");
    const double one = 1.0;
    EXPECT_FAIL(cm_fill(f.f23, (cm_dtype)77, &one, NULL), CM_ERR_INVALID_ARGUMENT,
                "dtype = 77 is not a cm_dtype");
    EXPECT_FAIL(cm_unary((cm_unary_op)99, f.f23, f.f23, NULL), CM_ERR_INVALID_ARGUMENT,
                "op = 99 is not a cm_unary_op");
    EXPECT_FAIL(cm_binary(CM_BINARY_INVALID, f.f23, f.f23, f.f23, NULL), CM_ERR_INVALID_ARGUMENT,
                "op = 0 is not a cm_binary_op");
    EXPECT_FAIL(cm_reduce((cm_reduce_op)5, f.f23, 0, f.f3, NULL), CM_ERR_INVALID_ARGUMENT,
                "op = 5 is not a cm_reduce_op");
    cr_assert_str_eq(cm_binary_op_name(CM_BINARY_GE), "ge");
    cr_assert_str_eq(cm_unary_op_name((cm_unary_op)-3), "invalid");
    cr_assert_str_eq(cm_reduce_op_name(CM_REDUCE_MEAN), "mean");
    drop(&f);
}

Test(ops_errors, shape_mismatch_names_both_shapes) {
    fixture f = make();
    EXPECT_FAIL(cm_copy(f.f23, f.f32_, NULL), CM_ERR_INVALID_ARGUMENT,
                "cm_copy: src shape [2, 3] differs from dst shape [3, 2]");
    EXPECT_FAIL(cm_cast(f.i23, f.f32_, NULL), CM_ERR_INVALID_ARGUMENT, "differs from dst shape");
    EXPECT_FAIL(cm_unary(CM_UNARY_NEG, f.f23, f.f32_, NULL), CM_ERR_INVALID_ARGUMENT,
                "x shape [2, 3] differs from out shape [3, 2]");
    EXPECT_FAIL(cm_binary(CM_BINARY_ADD, f.f3, f.f4, f.f3, NULL), CM_ERR_INVALID_ARGUMENT,
                "cm_binary: b shape [4] does not broadcast to out shape [3]");
    EXPECT_FAIL(cm_binary(CM_BINARY_ADD, f.f23, f.f3, f.f3, NULL), CM_ERR_INVALID_ARGUMENT,
                "a shape [2, 3] does not broadcast to out shape [3]");
    assert_unchanged(f.f32_, 2);
    assert_unchanged(f.f3, 5);
    drop(&f);
}

Test(ops_errors, dtype_mismatch_and_unsupported_dtypes) {
    fixture f = make();
    EXPECT_FAIL(cm_copy(f.i23, f.f23, NULL), CM_ERR_DTYPE_MISMATCH,
                "src dtype int32 differs from dst dtype float32");
    EXPECT_FAIL(cm_binary(CM_BINARY_ADD, f.f23, f.i23, f.f23, NULL), CM_ERR_DTYPE_MISMATCH,
                "a dtype float32 differs from b dtype int32");
    EXPECT_FAIL(cm_binary(CM_BINARY_LT, f.f23, f.f23, f.f23, NULL), CM_ERR_DTYPE_MISMATCH,
                "out dtype float32 must be bool for op = lt");
    EXPECT_FAIL(cm_binary(CM_BINARY_ADD, f.f23, f.f23, f.b23, NULL), CM_ERR_DTYPE_MISMATCH,
                "out dtype bool must be float32");
    EXPECT_FAIL(cm_unary(CM_UNARY_NEG, f.f23, f.i23, NULL), CM_ERR_DTYPE_MISMATCH,
                "x dtype float32 differs from out dtype int32");
    EXPECT_FAIL(cm_unary(CM_UNARY_SQRT, f.i23, f.i23, NULL), CM_ERR_UNSUPPORTED,
                "op = sqrt is not defined for x dtype int32");
    EXPECT_FAIL(cm_unary(CM_UNARY_ABS, f.b23, f.b23, NULL), CM_ERR_UNSUPPORTED,
                "op = abs is not defined for x dtype bool");
    EXPECT_FAIL(cm_binary(CM_BINARY_MUL, f.b23, f.b23, f.b23, NULL), CM_ERR_UNSUPPORTED,
                "op = mul is not defined for dtype bool");
    assert_unchanged(f.f23, 1);
    assert_unchanged(f.i23, 3);
    drop(&f);
}

Test(ops_errors, read_only_and_broadcast_outputs_are_refused) {
    fixture f = make();
    cm_tensor *ro = NULL, *bc = NULL;
    CHECK(cm_tensor_read_only(f.f23, &ro));
    const int64_t s23[2] = {2, 3};
    CHECK(cm_tensor_broadcast_to(f.f3, 2, s23, &bc));
    const double v = 2.0;
    EXPECT_FAIL(cm_fill(ro, CM_FLOAT64, &v, NULL), CM_ERR_READ_ONLY,
                "cm_fill: tensor is read-only");
    EXPECT_FAIL(cm_copy(f.f23, bc, NULL), CM_ERR_READ_ONLY, "cm_copy: dst is read-only");
    EXPECT_FAIL(cm_unary(CM_UNARY_EXP, f.f23, ro, NULL), CM_ERR_READ_ONLY, "out is read-only");
    EXPECT_FAIL(cm_binary(CM_BINARY_ADD, f.f23, f.f23, ro, NULL), CM_ERR_READ_ONLY,
                "out is read-only");
    EXPECT_FAIL(cm_reduce(CM_REDUCE_SUM, f.f23, 0, bc, NULL), CM_ERR_READ_ONLY, "out is read-only");
    /* A read-only buffer wrapped from the host. */
    float mem[6] = {0};
    cm_host_memory_desc hd = {.data = mem, .size = sizeof mem, .flags = CM_BUFFER_READ_ONLY};
    cm_buffer *buf = NULL;
    CHECK(cm_buffer_wrap_host(f.dev, &hd, &buf));
    cm_tensor_desc td = {.dtype = CM_FLOAT32, .ndim = 2, .shape = s23};
    cm_tensor *w = NULL;
    CHECK(cm_tensor_from_buffer(buf, &td, &w));
    EXPECT_FAIL(cm_copy(f.f23, w, NULL), CM_ERR_READ_ONLY, "dst is read-only");
    cr_assert_eq(mem[0], 0.0f);
    /* Read-only inputs are fine. */
    CHECK(cm_copy(w, f.f23, NULL));
    cm_tensor_release(w);
    cm_buffer_release(buf);
    cm_tensor_release(ro);
    cm_tensor_release(bc);
    drop(&f);
}

/* Views that interleave without sharing a byte are not an overlap. */
Test(ops_errors, interleaved_views_that_share_no_byte_are_allowed) {
    fixture f = make();
    cm_tensor *x = NULL;
    CHECK(cm_tensor_create(
        f.dev, &(cm_tensor_desc){.dtype = CM_FLOAT32, .ndim = 1, .shape = (int64_t[]){12}}, &x));
    float *p = NULL;
    CHECK(cm_tensor_host_write(x, CM_FLOAT32, (void **)&p));
    for (int i = 0; i < 12; ++i)
        p[i] = (float)i;
    cm_tensor *even = NULL, *odd = NULL;
    CHECK(cm_tensor_slice(x, 0, 0, 12, 2, &even));
    CHECK(cm_tensor_slice(x, 0, 1, 12, 2, &odd));
    CHECK(cm_binary(CM_BINARY_ADD, even, even, odd, NULL)); /* odd = 2 * even */
    for (int i = 0; i < 12; ++i)
        cr_assert_eq(p[i], i % 2 ? 2.0f * (float)(i - 1) : (float)i, "x[%d] = %g", i, (double)p[i]);
    /* Columns of a [6, 2] view: the same interleaving in 2-D. */
    cm_tensor *m = NULL, *c0 = NULL, *c1 = NULL;
    CHECK(cm_tensor_reshape(x, 2, (int64_t[]){6, 2}, &m));
    CHECK(cm_tensor_select(m, 1, 0, &c0));
    CHECK(cm_tensor_select(m, 1, 1, &c1));
    CHECK(cm_copy(c0, c1, NULL));
    for (int i = 0; i < 12; i += 2)
        cr_assert_eq(p[i + 1], p[i]);
    /* int16 elements between the float32 ones (bytes 4-5 of each 8) are
     * disjoint from even; at bytes 2-3 they share bytes and are refused. */
    cm_tensor_info info;
    CHECK(cm_tensor_get_info(x, &info));
    cm_tensor *between = NULL, *inside = NULL;
    CHECK(cm_tensor_from_buffer(info.buffer,
                                &(cm_tensor_desc){.dtype = CM_INT16,
                                                  .ndim = 1,
                                                  .shape = (int64_t[]){6},
                                                  .strides = (int64_t[]){4},
                                                  .byte_offset = info.byte_offset + 4},
                                &between));
    CHECK(cm_cast(even, between, NULL));
    CHECK(cm_tensor_from_buffer(info.buffer,
                                &(cm_tensor_desc){.dtype = CM_INT16,
                                                  .ndim = 1,
                                                  .shape = (int64_t[]){6},
                                                  .strides = (int64_t[]){4},
                                                  .byte_offset = info.byte_offset + 2},
                                &inside));
    EXPECT_FAIL(cm_cast(even, inside, NULL), CM_ERR_INVALID_ARGUMENT, "dst overlaps src");
    int16_t v = 0;
    CHECK(cm_tensor_get_element(between, (int64_t[]){5}, CM_INT16, &v));
    cr_assert_eq(v, 10, "even[5] = 10 cast to int16");
    cm_tensor_release(inside);
    cm_tensor_release(between);
    cm_tensor_release(c1);
    cm_tensor_release(c0);
    cm_tensor_release(m);
    cm_tensor_release(odd);
    cm_tensor_release(even);
    cm_tensor_release(x);
    drop(&f);
}

/* The overlap check against brute force: whenever an op accepts two views
 * of one buffer that are not the identical view, they share no byte. */
static uint64_t next_random(uint64_t *seed) {
    return mix((*seed)++);
}

static cm_tensor *random_view(cm_buffer *buf, uint64_t *seed) {
    static const cm_dtype dtypes[3] = {CM_INT8, CM_INT16, CM_INT32};
    const cm_dtype d = dtypes[next_random(seed) % 3];
    const int32_t ndim = 1 + (int32_t)(next_random(seed) % 2);
    int64_t shape[2], strides[2];
    for (int32_t k = 0; k < ndim; ++k) {
        shape[k] = 1 + (int64_t)(next_random(seed) % 4);
        strides[k] = (int64_t)(next_random(seed) % 9) - 4;
    }
    const size_t size = dsize(d);
    cm_tensor *t = NULL;
    cm_tensor_desc desc = {.dtype = d,
                           .ndim = ndim,
                           .shape = shape,
                           .strides = strides,
                           .byte_offset = size * (next_random(seed) % (64 / size))};
    return cm_tensor_from_buffer(buf, &desc, &t) == CM_OK ? t : NULL;
}

static void view_bytes(const cm_tensor *t, bool *used) {
    cm_tensor_info info;
    cm_tensor_get_info(t, &info);
    const size_t size = dsize(info.dtype);
    for (int64_t i = 0; i < info.numel; ++i) {
        int64_t rest = i, off = 0;
        for (int32_t k = info.ndim - 1; k >= 0; --k) {
            off += (rest % info.shape[k]) * info.strides[k];
            rest /= info.shape[k];
        }
        for (size_t b = 0; b < size; ++b)
            used[(int64_t)info.byte_offset + off * (int64_t)size + (int64_t)b] = true;
    }
}

Test(ops_errors, accepted_views_never_share_a_byte) {
    fixture f = make();
    cm_buffer *buf = NULL;
    CHECK(cm_buffer_create(f.dev, &(cm_buffer_desc){.size = 64}, &buf));
    uint64_t seed = 99;
    int accepted = 0, refused = 0;
    for (int trial = 0; trial < 60000; ++trial) {
        cm_tensor *a = random_view(buf, &seed), *b = random_view(buf, &seed);
        cm_tensor_info ia, ib;
        if (a != NULL && b != NULL && cm_tensor_get_info(a, &ia) == CM_OK &&
            cm_tensor_get_info(b, &ib) == CM_OK && ia.ndim == ib.ndim &&
            memcmp(ia.shape, ib.shape, sizeof(int64_t) * (size_t)ia.ndim) == 0) {
            bool identical = ia.byte_offset == ib.byte_offset && dsize(ia.dtype) == dsize(ib.dtype);
            for (int32_t k = 0; k < ia.ndim; ++k) /* a size-1 axis's stride is unused */
                identical = identical && (ia.shape[k] == 1 || ia.strides[k] == ib.strides[k]);
            if (cm_cast(b, a, NULL) == CM_OK) {
                accepted++;
                bool used_a[64] = {0}, used_b[64] = {0};
                view_bytes(a, used_a);
                view_bytes(b, used_b);
                for (int i = 0; i < 64 && !identical; ++i)
                    cr_assert(!(used_a[i] && used_b[i]),
                              "trial %d: accepted views share byte %d: a %s off %d shape "
                              "[%d %d] strides [%d %d]; b %s off %d shape [%d %d] strides "
                              "[%d %d]",
                              trial, i, dname(ia.dtype), (int)ia.byte_offset, (int)ia.shape[0],
                              ia.ndim > 1 ? (int)ia.shape[1] : -1, (int)ia.strides[0],
                              ia.ndim > 1 ? (int)ia.strides[1] : -1, dname(ib.dtype),
                              (int)ib.byte_offset, (int)ib.shape[0],
                              ib.ndim > 1 ? (int)ib.shape[1] : -1, (int)ib.strides[0],
                              ib.ndim > 1 ? (int)ib.strides[1] : -1);
            } else {
                refused++;
                cr_assert(strstr(cm_last_error(), "overlaps") != NULL, "%s", cm_last_error());
                cr_assert(!identical, "the identical view is allowed");
            }
        }
        cm_tensor_release(a);
        cm_tensor_release(b);
    }
    cr_assert_gt(accepted, 1000, "accepted %d", accepted);
    cr_assert_gt(refused, 500, "refused %d", refused);
    cm_buffer_release(buf);
    drop(&f);
}

Test(ops_errors, partial_overlap_is_refused_identical_view_allowed) {
    fixture f = make();
    const int64_t n[1] = {10};
    cm_tensor *x = make_view(f.dev, CM_FLOAT32, 1, n, L_CONTIG, 8, true, NULL);
    cm_tensor *lo = NULL, *hi = NULL, *rev = NULL;
    CHECK(cm_tensor_slice(x, 0, 0, 6, 1, &lo));
    CHECK(cm_tensor_slice(x, 0, 4, 10, 1, &hi));
    CHECK(cm_tensor_slice(x, 0, CM_SLICE_DEFAULT, CM_SLICE_DEFAULT, -1, &rev));
    EXPECT_FAIL(cm_copy(lo, hi, NULL), CM_ERR_INVALID_ARGUMENT,
                "cm_copy: dst overlaps src in memory without being the identical view");
    EXPECT_FAIL(cm_unary(CM_UNARY_NEG, x, rev, NULL), CM_ERR_INVALID_ARGUMENT, "out overlaps x");
    EXPECT_FAIL(cm_binary(CM_BINARY_ADD, hi, lo, hi, NULL), CM_ERR_INVALID_ARGUMENT,
                "out overlaps b");
    EXPECT_FAIL(cm_cast(x, rev, NULL), CM_ERR_INVALID_ARGUMENT, "dst overlaps src");
    assert_unchanged(x, 8);
    /* Reductions never write over their input. */
    cm_tensor *first = NULL;
    CHECK(cm_tensor_select(x, 0, 0, &first));
    EXPECT_FAIL(cm_reduce(CM_REDUCE_SUM, x, CM_AXIS_ALL, first, NULL), CM_ERR_INVALID_ARGUMENT,
                "out overlaps x");
    /* A cast onto itself between same-size dtypes is the identical view
     * only when the dtype sizes match: int32 over float32 bytes is fine. */
    cm_tensor_info info;
    CHECK(cm_tensor_get_info(x, &info));
    cm_tensor_desc td = {.dtype = CM_INT32, .ndim = 1, .shape = n};
    cm_tensor *xi = NULL;
    CHECK(cm_tensor_from_buffer(info.buffer, &td, &xi));
    CHECK(cm_cast(x, xi, NULL));
    cm_tensor_desc th = {.dtype = CM_FLOAT16, .ndim = 1, .shape = n};
    cm_tensor *xh = NULL;
    CHECK(cm_tensor_from_buffer(info.buffer, &th, &xh));
    EXPECT_FAIL(cm_cast(xi, xh, NULL), CM_ERR_INVALID_ARGUMENT, "dst overlaps src");
    cm_tensor_release(xh);
    cm_tensor_release(xi);
    cm_tensor_release(first);
    cm_tensor_release(lo);
    cm_tensor_release(hi);
    cm_tensor_release(rev);
    cm_tensor_release(x);
    drop(&f);
}

Test(ops_errors, reduce_axis_and_output_shape_are_checked) {
    fixture f = make();
    EXPECT_FAIL(cm_reduce(CM_REDUCE_SUM, f.f23, 2, f.f3, NULL), CM_ERR_INVALID_ARGUMENT,
                "axis = 2 is out of range for a 2-d x");
    EXPECT_FAIL(cm_reduce(CM_REDUCE_SUM, f.f23, 0, f.f4, NULL), CM_ERR_INVALID_ARGUMENT,
                "out shape [4] does not match x shape [2, 3] reduced over axis 0");
    EXPECT_FAIL(cm_reduce(CM_REDUCE_MAX, f.f23, CM_AXIS_ALL, f.f3, NULL), CM_ERR_INVALID_ARGUMENT,
                "reduced over every axis");
    const int64_t z[2] = {0, 3};
    cm_tensor *empty = new_tensor(f.dev, CM_FLOAT32, 2, z);
    EXPECT_FAIL(cm_reduce(CM_REDUCE_MIN, empty, 0, f.f3, NULL), CM_ERR_INVALID_ARGUMENT,
                "op = min over zero elements of x");
    assert_unchanged(f.f3, 5);
    CHECK(cm_reduce(CM_REDUCE_SUM, empty, 0, f.f3, NULL));
    int64_t i0[1] = {2};
    cr_assert_eq(get_at(f.f3, i0).f32, 0.0f);
    CHECK(cm_reduce(CM_REDUCE_MEAN, empty, -2, f.f3, NULL));
    cr_assert(isnan(get_at(f.f3, i0).f32));
    cm_tensor_release(empty);
    drop(&f);
}

Test(ops_errors, misaligned_host_memory_is_refused_by_the_cpu_device) {
    fixture f = make();
    _Alignas(8) unsigned char mem[64] = {0};
    cm_host_memory_desc hd = {.data = mem + 1, .size = 32};
    cm_buffer *buf = NULL;
    CHECK(cm_buffer_wrap_host(f.dev, &hd, &buf));
    const int64_t s3[1] = {3};
    cm_tensor_desc td = {.dtype = CM_FLOAT32, .ndim = 1, .shape = s3};
    cm_tensor *t = NULL;
    CHECK(cm_tensor_from_buffer(buf, &td, &t));
    EXPECT_FAIL(cm_copy(f.f3, t, NULL), CM_ERR_INVALID_ARGUMENT, "is not aligned to its 4-byte");
    cm_tensor_release(t);
    cm_buffer_release(buf);
    drop(&f);
}
