/* SPDX-License-Identifier: MIT */
#include <cmetal/cmetal.h>

#include "alloc_hook.h"
#include "check.h"

#include <criterion/criterion.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The device under test: CMETAL_TEST_DEVICE=metal runs this suite on the
 * Metal device (tests/metal registers it so, on softmetal); else the CPU. */
static cm_device *test_device(void) {
    const char *want = getenv("CMETAL_TEST_DEVICE");
    cm_device_type type =
        want != NULL && strcmp(want, "metal") == 0 ? CM_DEVICE_METAL : CM_DEVICE_CPU;
    cm_device *d = NULL;
    cr_assert_eq(cm_device_open(type, 0, &d), CM_OK, "%s", cm_last_error());
    return d;
}

/* A compact int32 tensor whose element i holds i. */
static cm_tensor *iota(cm_device *d, int32_t ndim, const int64_t *shape) {
    cm_tensor *t = NULL;
    cr_assert_eq(
        cm_tensor_create(d, &(cm_tensor_desc){.dtype = CM_INT32, .ndim = ndim, .shape = shape}, &t),
        CM_OK, "%s", cm_last_error());
    cm_tensor_info info;
    cm_tensor_get_info(t, &info);
    int32_t *p = NULL;
    cr_assert_eq(cm_tensor_host_write(t, CM_INT32, (void **)&p), CM_OK);
    for (int64_t i = 0; i < info.numel; ++i)
        p[i] = (int32_t)i;
    return t;
}

static int32_t at(const cm_tensor *t, const int64_t *index) {
    int32_t v = -1;
    cr_assert_eq(cm_tensor_get_element(t, index, CM_INT32, &v), CM_OK, "%s", cm_last_error());
    return v;
}

Test(tensor, create_gives_a_compact_row_major_layout) {
    cm_device *d = test_device();
    cm_tensor *t = iota(d, 3, (int64_t[]){2, 3, 4});
    cm_tensor_info info;
    cr_assert_eq(cm_tensor_get_info(t, &info), CM_OK);
    cr_assert_eq(info.ndim, 3);
    cr_assert_eq(info.strides[0], 12);
    cr_assert_eq(info.strides[1], 4);
    cr_assert_eq(info.strides[2], 1);
    cr_assert_eq(info.numel, 24);
    cr_assert(info.contiguous);
    cr_assert_eq(info.extent_begin, 0);
    cr_assert_eq(info.extent_end, 96);
    cm_device_info dinfo;
    cm_device_get_info(d, &dinfo);
    cr_assert_eq(info.device_type, dinfo.type);
    cr_assert_eq(at(t, (int64_t[]){1, 2, 3}), 23);
    cm_tensor_release(t);
    cm_device_release(d);
}

Test(tensor, zero_d_and_zero_size_tensors_work) {
    cm_device *d = test_device();
    cm_tensor *s = iota(d, 0, NULL);
    cm_tensor_info info;
    cm_tensor_get_info(s, &info);
    cr_assert_eq(info.numel, 1);
    cr_assert_eq(info.extent_end, 4);
    int32_t v = 42;
    cr_assert_eq(cm_tensor_set_element(s, NULL, CM_INT32, &v), CM_OK);
    cr_assert_eq(at(s, NULL), 42);

    cm_tensor *z = iota(d, 2, (int64_t[]){0, 5});
    cm_tensor_get_info(z, &info);
    cr_assert_eq(info.numel, 0);
    cr_assert(info.contiguous);
    cr_assert_eq(info.extent_begin, info.extent_end);
    EXPECT_FAIL(cm_tensor_get_element(z, (int64_t[]){0, 0}, CM_INT32, &v), CM_ERR_OUT_OF_BOUNDS,
                "index[0] = 0 is out of range for size 0");
    cm_tensor *r = NULL;
    cr_assert_eq(cm_tensor_reshape(z, 3, (int64_t[]){5, 0, 7}, &r), CM_OK, "%s", cm_last_error());
    cm_tensor_release(r);
    EXPECT_FAIL(cm_tensor_reshape(z, 2, (int64_t[]){-1, 0}, &r), CM_ERR_INVALID_ARGUMENT,
                "shape[0] = -1 cannot be inferred");
    cm_tensor_release(z);
    cm_tensor_release(s);
    cm_device_release(d);
}

/* Beside a zero-size axis any stride is valid, so slicing or selecting the
 * other axes must not move the offset by a product that can overflow
 * (found by fuzzing: 284232362491905 * 2^62). */
Test(tensor, views_of_empty_tensors_with_huge_strides) {
    cm_device *d = test_device();
    cm_buffer *b = NULL;
    cr_assert_eq(cm_buffer_create(d, &(cm_buffer_desc){.size = 0}, &b), CM_OK);
    const int64_t big = INT64_C(1) << 48, huge = INT64_C(1) << 62;
    cm_tensor *t = NULL, *v = NULL;
    cr_assert_eq(cm_tensor_from_buffer(b,
                                       &(cm_tensor_desc){.dtype = CM_FLOAT32,
                                                         .ndim = 2,
                                                         .shape = (int64_t[]){0, big},
                                                         .strides = (int64_t[]){1, huge}},
                                       &t),
                 CM_OK, "%s", cm_last_error());
    cm_tensor_info info;
    cr_assert_eq(cm_tensor_slice(t, 1, big - 3, big, 1, &v), CM_OK, "%s", cm_last_error());
    cm_tensor_get_info(v, &info);
    cr_assert_eq(info.shape[1], 3);
    cr_assert_eq(info.numel, 0);
    cr_assert_eq(info.byte_offset, 0);
    cm_tensor_release(v);
    cr_assert_eq(cm_tensor_slice(t, 1, 0, big, 4, &v), CM_OK, "%s", cm_last_error());
    cm_tensor_get_info(v, &info);
    cr_assert_eq(info.shape[1], big / 4);
    cr_assert_eq(info.strides[1], huge, "the stride times the step overflows and is kept");
    cm_tensor_release(v);
    cr_assert_eq(cm_tensor_select(t, 1, big - 1, &v), CM_OK, "%s", cm_last_error());
    cm_tensor_get_info(v, &info);
    cr_assert_eq(info.ndim, 1);
    cr_assert_eq(info.numel, 0);
    cr_assert_eq(info.byte_offset, 0);
    cm_tensor_release(v);
    cm_tensor_release(t);
    /* Element access checks every index before any stride is scaled: index
     * 2 of axis 0 is in range, and 2 * INT64_MAX must not be formed. */
    cr_assert_eq(cm_tensor_from_buffer(b,
                                       &(cm_tensor_desc){.dtype = CM_UINT8,
                                                         .ndim = 2,
                                                         .shape = (int64_t[]){3, 0},
                                                         .strides = (int64_t[]){INT64_MAX, 1}},
                                       &t),
                 CM_OK, "%s", cm_last_error());
    uint8_t byte = 0;
    EXPECT_FAIL(cm_tensor_get_element(t, (int64_t[]){2, 0}, CM_UINT8, &byte), CM_ERR_OUT_OF_BOUNDS,
                "index[1] = 0 is out of range for size 0");
    EXPECT_FAIL(cm_tensor_set_element(t, (int64_t[]){2, 0}, CM_UINT8, &byte), CM_ERR_OUT_OF_BOUNDS,
                "index[1] = 0 is out of range for size 0");
    cm_tensor_release(t);
    cm_buffer_release(b);
    cm_device_release(d);
}

Test(tensor, layouts_outside_the_buffer_are_refused) {
    cm_device *d = test_device();
    cm_buffer *b = NULL;
    cr_assert_eq(cm_buffer_create(d, &(cm_buffer_desc){.size = 64}, &b), CM_OK);
    cm_tensor *t = NULL;
    /* 16 floats fit exactly; 17 do not. */
    cr_assert_eq(
        cm_tensor_from_buffer(
            b, &(cm_tensor_desc){.dtype = CM_FLOAT32, .ndim = 1, .shape = (int64_t[]){16}}, &t),
        CM_OK);
    cm_tensor_release(t);
    EXPECT_FAIL(
        cm_tensor_from_buffer(
            b, &(cm_tensor_desc){.dtype = CM_FLOAT32, .ndim = 1, .shape = (int64_t[]){17}}, &t),
        CM_ERR_OUT_OF_BOUNDS, "reaches byte 68 of a 64-byte buffer");
    cr_assert_null(t);
    EXPECT_FAIL(cm_tensor_from_buffer(b,
                                      &(cm_tensor_desc){.dtype = CM_FLOAT32,
                                                        .ndim = 1,
                                                        .shape = (int64_t[]){2},
                                                        .strides = (int64_t[]){-1}},
                                      &t),
                CM_ERR_OUT_OF_BOUNDS, "reach 4 bytes before the buffer");
    /* The farthest reach, exactly 2^63 bytes back, is reported without overflow. */
    EXPECT_FAIL(cm_tensor_from_buffer(b,
                                      &(cm_tensor_desc){.dtype = CM_INT8,
                                                        .ndim = 1,
                                                        .shape = (int64_t[]){2},
                                                        .strides = (int64_t[]){INT64_MIN}},
                                      &t),
                CM_ERR_OUT_OF_BOUNDS, "reach 9223372036854775808 bytes before the buffer");
    /* A negative stride is fine when the offset leaves room. */
    cr_assert_eq(cm_tensor_from_buffer(b,
                                       &(cm_tensor_desc){.dtype = CM_FLOAT32,
                                                         .ndim = 1,
                                                         .shape = (int64_t[]){16},
                                                         .strides = (int64_t[]){-1},
                                                         .byte_offset = 60},
                                       &t),
                 CM_OK, "%s", cm_last_error());
    cm_tensor_release(t);
    EXPECT_FAIL(cm_tensor_from_buffer(
                    b,
                    &(cm_tensor_desc){
                        .dtype = CM_FLOAT32, .ndim = 1, .shape = (int64_t[]){1}, .byte_offset = 2},
                    &t),
                CM_ERR_INVALID_ARGUMENT,
                "byte_offset = 2 must be a multiple of the float32 size 4");
    EXPECT_FAIL(cm_tensor_from_buffer(
                    b, &(cm_tensor_desc){.dtype = CM_FLOAT32, .ndim = 0, .byte_offset = 64}, &t),
                CM_ERR_OUT_OF_BOUNDS, "reaches byte 68");
    /* Empty views may sit at the very end. */
    cr_assert_eq(cm_tensor_from_buffer(b,
                                       &(cm_tensor_desc){.dtype = CM_FLOAT32,
                                                         .ndim = 1,
                                                         .shape = (int64_t[]){0},
                                                         .byte_offset = 64},
                                       &t),
                 CM_OK);
    cm_tensor_release(t);
    cm_buffer_release(b);
    cm_device_release(d);
}

Test(tensor, bad_descs_name_the_field_and_value) {
    cm_device *d = test_device();
    cm_tensor *t = NULL;
    EXPECT_FAIL(
        cm_tensor_create(
            d, &(cm_tensor_desc){.dtype = CM_INT8, .ndim = 2, .shape = (int64_t[]){3, -1}}, &t),
        CM_ERR_INVALID_ARGUMENT, "shape[1] = -1 must be >= 0");
    EXPECT_FAIL(cm_tensor_create(d, &(cm_tensor_desc){.ndim = 1, .shape = (int64_t[]){3}}, &t),
                CM_ERR_INVALID_ARGUMENT, "desc->dtype = 0 is not a cm_dtype");
    EXPECT_FAIL(cm_tensor_create(d, &(cm_tensor_desc){.dtype = CM_INT8, .ndim = 17}, &t),
                CM_ERR_INVALID_ARGUMENT, "desc->ndim = 17 must be between 0 and 16");
    EXPECT_FAIL(cm_tensor_create(d, &(cm_tensor_desc){.dtype = CM_INT8, .ndim = -1}, &t),
                CM_ERR_INVALID_ARGUMENT, "desc->ndim = -1");
    EXPECT_FAIL(cm_tensor_create(d, &(cm_tensor_desc){.dtype = CM_INT8, .ndim = 1}, &t),
                CM_ERR_INVALID_ARGUMENT, "desc->shape = NULL with desc->ndim = 1");
    EXPECT_FAIL(cm_tensor_create(d,
                                 &(cm_tensor_desc){.dtype = CM_INT8,
                                                   .ndim = 1,
                                                   .shape = (int64_t[]){3},
                                                   .strides = (int64_t[]){1}},
                                 &t),
                CM_ERR_INVALID_ARGUMENT, "desc->strides must be NULL");
    EXPECT_FAIL(cm_tensor_create(d, &(cm_tensor_desc){.dtype = CM_INT8, .ndim = 0, .flags = 4}, &t),
                CM_ERR_INVALID_ARGUMENT, "flags = 0x4");
    EXPECT_FAIL(cm_tensor_create(NULL, &(cm_tensor_desc){.dtype = CM_INT8}, &t),
                CM_ERR_INVALID_ARGUMENT, "device = NULL");
    EXPECT_FAIL(cm_tensor_create(d, NULL, &t), CM_ERR_INVALID_ARGUMENT, "desc = NULL");
    cr_assert_null(t);
    cr_assert_eq(cm_tensor_retain(NULL), CM_ERR_INVALID_ARGUMENT);
    cr_assert_eq(cm_tensor_release(NULL), CM_OK);
    cm_device_release(d);
}

Test(tensor, sizes_that_overflow_are_refused) {
    cm_device *d = test_device();
    cm_tensor *t = NULL;
    EXPECT_FAIL(
        cm_tensor_create(
            d, &(cm_tensor_desc){.dtype = CM_INT64, .ndim = 2, .shape = (int64_t[]){INT64_MAX, 2}},
            &t),
        CM_ERR_OVERFLOW, "more elements than fit");
    EXPECT_FAIL(
        cm_tensor_create(
            d, &(cm_tensor_desc){.dtype = CM_INT64, .ndim = 1, .shape = (int64_t[]){INT64_MAX / 4}},
            &t),
        CM_ERR_OVERFLOW, "more elements than fit");
    /* A zero makes the product zero even after a huge prefix. */
    cr_assert_eq(
        cm_tensor_create(
            d,
            &(cm_tensor_desc){.dtype = CM_INT64, .ndim = 3, .shape = (int64_t[]){INT64_MAX, 4, 0}},
            &t),
        CM_OK, "%s", cm_last_error());
    cm_tensor_release(t);
    cm_buffer *b = NULL;
    cm_buffer_create(d, &(cm_buffer_desc){.size = 16}, &b);
    EXPECT_FAIL(cm_tensor_from_buffer(b,
                                      &(cm_tensor_desc){.dtype = CM_INT8,
                                                        .ndim = 2,
                                                        .shape = (int64_t[]){2, 3},
                                                        .strides = (int64_t[]){INT64_MAX, 1}},
                                      &t),
                CM_ERR_OVERFLOW, "");
    EXPECT_FAIL(cm_tensor_from_buffer(b,
                                      &(cm_tensor_desc){.dtype = CM_INT8,
                                                        .ndim = 1,
                                                        .shape = (int64_t[]){1},
                                                        .byte_offset = UINT64_MAX},
                                      &t),
                CM_ERR_OVERFLOW, "byte_offset = 18446744073709551615");
    cm_buffer_release(b);
    cm_device_release(d);
}

Test(tensor, slice_with_negative_step_reverses) {
    cm_device *d = test_device();
    cm_tensor *t = iota(d, 1, (int64_t[]){10});
    cm_tensor *r = NULL;
    cr_assert_eq(cm_tensor_slice(t, 0, CM_SLICE_DEFAULT, CM_SLICE_DEFAULT, -1, &r), CM_OK);
    cm_tensor_info info;
    cm_tensor_get_info(r, &info);
    cr_assert_eq(info.shape[0], 10);
    cr_assert_eq(info.strides[0], -1);
    cr_assert_not(info.contiguous);
    for (int64_t i = 0; i < 10; ++i)
        cr_assert_eq(at(r, &i), 9 - i);
    cm_tensor_release(r);
    /* Python: list(range(10))[7:2:-2] == [7, 5, 3] */
    cr_assert_eq(cm_tensor_slice(t, -1, 7, 2, -2, &r), CM_OK);
    cm_tensor_get_info(r, &info);
    cr_assert_eq(info.shape[0], 3);
    cr_assert_eq(at(r, (int64_t[]){2}), 3);
    cm_tensor_release(r);
    EXPECT_FAIL(cm_tensor_slice(t, 0, 0, 5, 0, &r), CM_ERR_INVALID_ARGUMENT, "step = 0");
    EXPECT_FAIL(cm_tensor_slice(t, 1, 0, 5, 1, &r), CM_ERR_OUT_OF_BOUNDS,
                "axis = 1 is out of range for a 1-d tensor");
    cm_tensor_release(t);
    cm_device_release(d);
}

Test(tensor, broadcast_views_alias_and_are_read_only) {
    cm_device *d = test_device();
    cm_tensor *t = iota(d, 2, (int64_t[]){3, 1});
    cm_tensor *b = NULL;
    cr_assert_eq(cm_tensor_broadcast_to(t, 3, (int64_t[]){2, 3, 4}, &b), CM_OK);
    cm_tensor_info info;
    cm_tensor_get_info(b, &info);
    cr_assert_eq(info.strides[0], 0);
    cr_assert_eq(info.strides[2], 0);
    cr_assert(info.flags & CM_TENSOR_READ_ONLY);
    cr_assert_eq(at(b, (int64_t[]){1, 2, 3}), 2);
    int32_t v = 1;
    EXPECT_FAIL(cm_tensor_set_element(b, (int64_t[]){0, 0, 0}, CM_INT32, &v), CM_ERR_READ_ONLY,
                "cm_tensor_set_element: the tensor is read-only");
    void *p = NULL;
    EXPECT_FAIL(cm_tensor_host_write(b, CM_INT32, &p), CM_ERR_READ_ONLY, "read-only");
    cm_tensor_release(b);
    EXPECT_FAIL(cm_tensor_broadcast_to(t, 2, (int64_t[]){2, 5}, &b), CM_ERR_INVALID_ARGUMENT,
                "shape[0] = 2 cannot broadcast from size 3");
    EXPECT_FAIL(cm_tensor_broadcast_to(t, 1, (int64_t[]){3}, &b), CM_ERR_INVALID_ARGUMENT,
                "ndim = 1 must be between the tensor's ndim 2");
    cm_tensor_release(t);
    cm_device_release(d);
}

Test(tensor, typed_access_checks_dtype_bounds_and_read_only) {
    cm_device *d = test_device();
    cm_tensor *t = iota(d, 2, (int64_t[]){2, 2});
    float f;
    EXPECT_FAIL(cm_tensor_get_element(t, (int64_t[]){0, 0}, CM_FLOAT32, &f), CM_ERR_DTYPE_MISMATCH,
                "dtype = float32 but the tensor is int32");
    const void *p = NULL;
    EXPECT_FAIL(cm_tensor_host_read(t, CM_INT64, &p), CM_ERR_DTYPE_MISMATCH, "int64");
    cr_assert_null(p);
    int32_t v;
    EXPECT_FAIL(cm_tensor_get_element(t, (int64_t[]){0, 2}, CM_INT32, &v), CM_ERR_OUT_OF_BOUNDS,
                "index[1] = 2 is out of range for size 2");
    EXPECT_FAIL(cm_tensor_get_element(t, (int64_t[]){-1, 0}, CM_INT32, &v), CM_ERR_OUT_OF_BOUNDS,
                "index[0] = -1");
    EXPECT_FAIL(cm_tensor_get_element(t, NULL, CM_INT32, &v), CM_ERR_INVALID_ARGUMENT,
                "index = NULL must not be NULL for a 2-d tensor");
    cm_tensor *ro = NULL;
    cr_assert_eq(cm_tensor_read_only(t, &ro), CM_OK);
    v = 5;
    EXPECT_FAIL(cm_tensor_set_element(ro, (int64_t[]){0, 0}, CM_INT32, &v), CM_ERR_READ_ONLY,
                "read-only");
    cr_assert_eq(cm_tensor_host_read(ro, CM_INT32, &p), CM_OK);
    cr_assert_eq(cm_tensor_set_element(t, (int64_t[]){1, 1}, CM_INT32, &v), CM_OK);
    cr_assert_eq(at(ro, (int64_t[]){1, 1}), 5, "views share memory");
    cm_tensor_release(ro);
    cm_tensor_release(t);
    cm_device_release(d);
}

Test(tensor, read_only_buffers_make_read_only_tensors) {
    cm_device *d = test_device();
    static int32_t mem[4] = {1, 2, 3, 4};
    cm_buffer *b = NULL;
    cr_assert_eq(
        cm_buffer_wrap_host(
            d,
            &(cm_host_memory_desc){.data = mem, .size = sizeof mem, .flags = CM_BUFFER_READ_ONLY},
            &b),
        CM_OK);
    cm_tensor *t = NULL;
    cr_assert_eq(
        cm_tensor_from_buffer(
            b, &(cm_tensor_desc){.dtype = CM_INT32, .ndim = 1, .shape = (int64_t[]){4}}, &t),
        CM_OK);
    cm_buffer_release(b);
    cm_tensor_info info;
    cm_tensor_get_info(t, &info);
    cr_assert(info.flags & CM_TENSOR_READ_ONLY);
    int32_t v = 0;
    EXPECT_FAIL(cm_tensor_set_element(t, (int64_t[]){0}, CM_INT32, &v), CM_ERR_READ_ONLY, "");
    cr_assert_eq(at(t, (int64_t[]){3}), 4);
    cm_tensor_release(t);
    cm_device_release(d);
}

Test(tensor, reshape_follows_strides_or_asks_for_a_copy) {
    cm_device *d = test_device();
    cm_tensor *t = iota(d, 2, (int64_t[]){4, 6});
    cm_tensor *r = NULL, *tt = NULL;
    cr_assert_eq(cm_tensor_reshape(t, 3, (int64_t[]){2, -1, 3}, &r), CM_OK);
    cm_tensor_info info;
    cm_tensor_get_info(r, &info);
    cr_assert_eq(info.shape[1], 4);
    cr_assert_eq(at(r, (int64_t[]){1, 2, 1}), 12 + 6 + 1);
    cm_tensor_release(r);
    cr_assert_eq(cm_tensor_transpose(t, 0, 1, &tt), CM_OK);
    EXPECT_FAIL(cm_tensor_reshape(tt, 1, (int64_t[]){24}, &r), CM_ERR_COPY_REQUIRED,
                "without a copy");
    /* Splitting an axis of a transposed view needs no copy. */
    cr_assert_eq(cm_tensor_reshape(tt, 3, (int64_t[]){3, 2, 4}, &r), CM_OK, "%s", cm_last_error());
    cr_assert_eq(at(r, (int64_t[]){2, 1, 3}), 3 * 6 + 5);
    cm_tensor_release(r);
    EXPECT_FAIL(cm_tensor_reshape(t, 2, (int64_t[]){5, 5}, &r), CM_ERR_INVALID_ARGUMENT,
                "shape has 25 elements but the tensor has 24");
    EXPECT_FAIL(cm_tensor_reshape(t, 2, (int64_t[]){-1, -1}, &r), CM_ERR_INVALID_ARGUMENT,
                "only one dimension may be inferred");
    cm_tensor_release(tt);
    cm_tensor_release(t);
    cm_device_release(d);
}

Test(tensor, permute_squeeze_unsqueeze_select_errors) {
    cm_device *d = test_device();
    cm_tensor *t = iota(d, 3, (int64_t[]){2, 1, 3});
    cm_tensor *r = NULL;
    EXPECT_FAIL(cm_tensor_permute(t, (int32_t[]){0, 0, 1}, &r), CM_ERR_INVALID_ARGUMENT,
                "axes[1] = 0 repeats an axis");
    EXPECT_FAIL(cm_tensor_permute(t, (int32_t[]){0, 3, 1}, &r), CM_ERR_OUT_OF_BOUNDS,
                "axes[1] = 3 is out of range");
    EXPECT_FAIL(cm_tensor_squeeze(t, 0, &r), CM_ERR_INVALID_ARGUMENT,
                "axis = 0 has size 2; only size 1 squeezes");
    EXPECT_FAIL(cm_tensor_unsqueeze(t, 4, &r), CM_ERR_OUT_OF_BOUNDS, "axis = 4");
    EXPECT_FAIL(cm_tensor_select(t, 2, 3, &r), CM_ERR_OUT_OF_BOUNDS,
                "index = 3 is out of range for axis 2 of size 3");
    cr_assert_eq(cm_tensor_squeeze(t, -2, &r), CM_OK);
    cm_tensor_info info;
    cm_tensor_get_info(r, &info);
    cr_assert_eq(info.ndim, 2);
    cr_assert_eq(at(r, (int64_t[]){1, 2}), 5);
    cm_tensor_release(r);
    cr_assert_eq(cm_tensor_unsqueeze(t, -1, &r), CM_OK);
    cm_tensor_get_info(r, &info);
    cr_assert_eq(info.ndim, 4);
    cr_assert_eq(info.shape[3], 1);
    cr_assert(info.contiguous);
    cm_tensor_release(r);
    cm_tensor_release(t);
    cm_device_release(d);
}

/* ---------------------------------------------------------------------------
 * View algebra against a brute-force reference. The reference of a view is
 * the explicit list, in row-major order of its shape, of the buffer elements
 * it shows; each op is applied to that list directly. */

#define REF_MAX 4096

typedef struct ref_view {
    int32_t ndim;
    int64_t shape[CM_MAX_NDIM];
    int64_t numel;
    int32_t elem[REF_MAX];
} ref_view;

static uint64_t rng_state = 0x9e3779b97f4a7c15u;
static uint64_t rnd(uint64_t n) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return n ? rng_state % n : 0;
}

static void unravel(const ref_view *v, int64_t flat, int64_t *idx) {
    for (int32_t k = v->ndim - 1; k >= 0; --k) {
        idx[k] = v->shape[k] ? flat % v->shape[k] : 0;
        flat = v->shape[k] ? flat / v->shape[k] : 0;
    }
}

static int64_t ravel(const int64_t *shape, int32_t ndim, const int64_t *idx) {
    int64_t flat = 0;
    for (int32_t k = 0; k < ndim; ++k)
        flat = flat * shape[k] + idx[k];
    return flat;
}

static void check_matches(const cm_tensor *t, const ref_view *v, const char *what) {
    cm_tensor_info info;
    cr_assert_eq(cm_tensor_get_info(t, &info), CM_OK);
    cr_assert_eq(info.ndim, v->ndim, "%s: ndim", what);
    for (int32_t k = 0; k < v->ndim; ++k)
        cr_assert_eq(info.shape[k], v->shape[k], "%s: shape[%d]", what, k);
    cr_assert_eq(info.numel, v->numel, "%s: numel", what);
    int64_t idx[CM_MAX_NDIM];
    for (int64_t i = 0; i < v->numel; ++i) {
        unravel(v, i, idx);
        cr_assert_eq(at(t, idx), v->elem[i], "%s: element %ld", what, (long)i);
    }
}

/* Python slicing by simulation, for start/stop in [-len, len] or default. */
static int64_t py_slice(int64_t len, int64_t start, int64_t stop, int64_t step, int64_t *picks) {
    int64_t s, e, count = 0;
    if (step > 0) {
        s = start == CM_SLICE_DEFAULT ? 0 : start < 0 ? start + len : start;
        e = stop == CM_SLICE_DEFAULT ? len : stop < 0 ? stop + len : stop;
        for (int64_t p = s; p < e && p < len; p += step)
            picks[count++] = p;
    } else {
        s = start == CM_SLICE_DEFAULT ? len - 1 : start < 0 ? start + len : start;
        if (s >= len)
            s = len - 1;
        e = stop == CM_SLICE_DEFAULT ? -1 : stop < 0 ? stop + len : stop;
        for (int64_t p = s; p > e && p >= 0; p += step)
            picks[count++] = p;
    }
    return count;
}

/* The new reference: element i of `n` shows element map(i) of `v`. */
typedef void (*index_map)(const int64_t *new_idx, int64_t *old_idx, const void *arg);

static void remap(const ref_view *v, ref_view *n, index_map map, const void *arg) {
    n->numel = 1;
    for (int32_t k = 0; k < n->ndim; ++k)
        n->numel *= n->shape[k];
    cr_assert_leq(n->numel, REF_MAX);
    int64_t ni[CM_MAX_NDIM], oi[CM_MAX_NDIM];
    for (int64_t i = 0; i < n->numel; ++i) {
        unravel(n, i, ni);
        map(ni, oi, arg);
        n->elem[i] = v->elem[ravel(v->shape, v->ndim, oi)];
    }
}

typedef struct op_arg {
    int32_t axis, old_ndim, new_ndim;
    int64_t picks[64];
    int32_t perm[CM_MAX_NDIM];
    int64_t old_shape[CM_MAX_NDIM];
} op_arg;

static void map_slice(const int64_t *ni, int64_t *oi, const void *p) {
    const op_arg *a = p;
    memcpy(oi, ni, sizeof(int64_t) * (size_t)a->old_ndim);
    oi[a->axis] = a->picks[ni[a->axis]];
}
static void map_permute(const int64_t *ni, int64_t *oi, const void *p) {
    const op_arg *a = p;
    for (int32_t k = 0; k < a->old_ndim; ++k)
        oi[a->perm[k]] = ni[k];
}
static void map_broadcast(const int64_t *ni, int64_t *oi, const void *p) {
    const op_arg *a = p;
    int32_t lead = a->new_ndim - a->old_ndim;
    for (int32_t k = 0; k < a->old_ndim; ++k)
        oi[k] = a->old_shape[k] == 1 ? 0 : ni[k + lead];
}
static void map_unsqueeze(const int64_t *ni, int64_t *oi, const void *p) {
    const op_arg *a = p;
    for (int32_t k = 0, j = 0; k < a->new_ndim; ++k)
        if (k != a->axis)
            oi[j++] = ni[k];
}
static void map_select(const int64_t *ni, int64_t *oi, const void *p) {
    const op_arg *a = p;
    for (int32_t k = 0, j = 0; k < a->old_ndim; ++k)
        oi[k] = k == a->axis ? a->picks[0] : ni[j++];
}

/* Applies one random view op to the tensor and the reference. */
static cm_tensor *random_op(const cm_tensor *t, const ref_view *v, ref_view *n, char *what,
                            size_t cap) {
    cm_tensor *out = NULL;
    op_arg a = {.old_ndim = v->ndim};
    memcpy(a.old_shape, v->shape, sizeof a.old_shape);
    n->ndim = v->ndim;
    memcpy(n->shape, v->shape, sizeof n->shape);
    int op = v->ndim == 0 ? 4 : (int)rnd(6);
    cm_status st = CM_OK;
    switch (op) {
    case 0: { /* slice */
        a.axis = (int32_t)rnd((uint64_t)v->ndim);
        int64_t len = v->shape[a.axis];
        int64_t step = ((int64_t)rnd(3) + 1) * (rnd(2) ? -1 : 1);
        int64_t start = (int64_t)rnd((uint64_t)(2 * len + 1)) - len;
        int64_t stop = (int64_t)rnd((uint64_t)(2 * len + 1)) - len;
        if (rnd(4) == 0)
            start = CM_SLICE_DEFAULT;
        if (rnd(4) == 0)
            stop = CM_SLICE_DEFAULT;
        snprintf(what, cap, "slice(%d, %lld, %lld, %lld)", a.axis, (long long)start,
                 (long long)stop, (long long)step);
        st = cm_tensor_slice(t, a.axis, start, stop, step, &out);
        n->shape[a.axis] = py_slice(len, start, stop, step, a.picks);
        remap(v, n, map_slice, &a);
        break;
    }
    case 1: { /* permute */
        for (int32_t k = 0; k < v->ndim; ++k)
            a.perm[k] = k;
        for (int32_t k = v->ndim - 1; k > 0; --k) {
            int32_t j = (int32_t)rnd((uint64_t)k + 1), tmp = a.perm[k];
            a.perm[k] = a.perm[j];
            a.perm[j] = tmp;
        }
        for (int32_t k = 0; k < v->ndim; ++k)
            n->shape[k] = v->shape[a.perm[k]];
        snprintf(what, cap, "permute");
        st = cm_tensor_permute(t, a.perm, &out);
        remap(v, n, map_permute, &a);
        break;
    }
    case 2: { /* reshape to a random factorisation of the same row-major list */
        int64_t rest = v->numel;
        n->ndim = 0;
        while (rest > 1 && n->ndim < 4) {
            int64_t f = 1;
            for (int64_t c = 2; c <= rest; ++c)
                if (rest % c == 0 && rnd(2)) {
                    f = c;
                    break;
                }
            if (f == 1 || n->ndim == 3)
                f = rest;
            n->shape[n->ndim++] = f;
            rest /= f;
        }
        if (v->numel == 0) {
            n->ndim = 2;
            n->shape[0] = 0;
            n->shape[1] = 3;
        }
        snprintf(what, cap, "reshape to %d-d", n->ndim);
        st = cm_tensor_reshape(t, n->ndim, n->shape, &out);
        if (st == CM_ERR_COPY_REQUIRED)
            return NULL; /* allowed: the strides can't express it */
        n->numel = v->numel;
        memcpy(n->elem, v->elem, sizeof(int32_t) * (size_t)v->numel);
        break;
    }
    case 3: { /* broadcast: one new leading axis, size-1 axes grow */
        a.new_ndim = v->ndim + (v->ndim < 4 ? 1 : 0);
        n->ndim = a.new_ndim;
        int32_t lead = a.new_ndim - v->ndim;
        if (lead)
            n->shape[0] = 2;
        for (int32_t k = 0; k < v->ndim; ++k)
            n->shape[k + lead] = v->shape[k] == 1 ? (int64_t)rnd(3) + 1 : v->shape[k];
        snprintf(what, cap, "broadcast_to");
        st = cm_tensor_broadcast_to(t, n->ndim, n->shape, &out);
        remap(v, n, map_broadcast, &a);
        break;
    }
    case 4: { /* unsqueeze */
        a.axis = (int32_t)rnd((uint64_t)v->ndim + 1);
        a.new_ndim = v->ndim + 1;
        n->ndim = a.new_ndim;
        for (int32_t k = 0, j = 0; k < n->ndim; ++k)
            n->shape[k] = k == a.axis ? 1 : v->shape[j++];
        snprintf(what, cap, "unsqueeze(%d)", a.axis);
        st = cm_tensor_unsqueeze(t, a.axis, &out);
        remap(v, n, map_unsqueeze, &a);
        break;
    }
    default: { /* select */
        a.axis = (int32_t)rnd((uint64_t)v->ndim);
        if (v->shape[a.axis] == 0)
            return NULL;
        a.picks[0] = (int64_t)rnd((uint64_t)v->shape[a.axis]);
        n->ndim = v->ndim - 1;
        for (int32_t k = 0, j = 0; k < v->ndim; ++k)
            if (k != a.axis)
                n->shape[j++] = v->shape[k];
        snprintf(what, cap, "select(%d, %lld)", a.axis, (long long)a.picks[0]);
        st = cm_tensor_select(t, a.axis, a.picks[0], &out);
        remap(v, n, map_select, &a);
        break;
    }
    }
    cr_assert_eq(st, CM_OK, "%s: %s", what, cm_last_error());
    return out;
}

Test(tensor, view_algebra_matches_a_brute_force_reference) {
    cm_device *d = test_device();
    for (int trial = 0; trial < 300; ++trial) {
        ref_view *v = calloc(1, sizeof *v), *n = calloc(1, sizeof *n);
        v->ndim = (int32_t)rnd(4) + 1;
        v->numel = 1;
        for (int32_t k = 0; k < v->ndim; ++k) {
            v->shape[k] = (int64_t)rnd(5) + (trial % 7 == 0 ? 0 : 1);
            v->numel *= v->shape[k];
        }
        for (int64_t i = 0; i < v->numel; ++i)
            v->elem[i] = (int32_t)i;
        cm_tensor *t = iota(d, v->ndim, v->shape);
        char trail[512] = "";
        for (int step = 0; step < 6; ++step) {
            char what[96];
            cm_tensor *next = random_op(t, v, n, what, sizeof what);
            if (next == NULL)
                continue;
            strncat(trail, what, sizeof trail - strlen(trail) - 2);
            strncat(trail, " ", sizeof trail - strlen(trail) - 1);
            check_matches(next, n, trail);
            cm_tensor_release(t);
            t = next;
            ref_view *tmp = v;
            v = n;
            n = tmp;
        }
        cm_tensor_release(t);
        free(v);
        free(n);
    }
    cm_device_release(d);
}

/* ---------------------------------------------------------------------------
 * Allocation failures: every allocation of a create-view-wrap sequence is
 * made to fail in turn; each failure is reported and nothing leaks. */

static atomic_int wrapped_releases;
static void on_release(void *ctx) {
    (void)ctx;
    atomic_fetch_add(&wrapped_releases, 1);
}

static cm_status scenario(void) {
    static int32_t mem[8];
    cm_device *d = NULL;
    cm_buffer *w = NULL;
    cm_tensor *t = NULL, *v = NULL, *u = NULL;
    cm_status s = cm_device_open(CM_DEVICE_CPU, 0, &d);
    if (s == CM_OK)
        s = cm_tensor_create(
            d, &(cm_tensor_desc){.dtype = CM_FLOAT32, .ndim = 2, .shape = (int64_t[]){4, 4}}, &t);
    if (s == CM_OK)
        s = cm_tensor_transpose(t, 0, 1, &v);
    if (s == CM_OK)
        s = cm_buffer_wrap_host(
            d, &(cm_host_memory_desc){.data = mem, .size = sizeof mem, .release = on_release}, &w);
    if (s == CM_OK)
        s = cm_tensor_from_buffer(
            w, &(cm_tensor_desc){.dtype = CM_INT32, .ndim = 1, .shape = (int64_t[]){8}}, &u);
    if (s != CM_OK) {
        cr_assert_eq(s, CM_ERR_OUT_OF_MEMORY, "%s", cm_last_error());
        cr_assert(strstr(cm_last_error(), "memory") || strstr(cm_last_error(), "allocate"), "%s",
                  cm_last_error());
    }
    cm_tensor_release(u);
    cm_buffer_release(w);
    cm_tensor_release(v);
    cm_tensor_release(t);
    cm_device_release(d);
    return s;
}

Test(tensor, every_allocation_failure_is_reported_and_nothing_leaks) {
    long fail_at = 1;
    for (;; ++fail_at) {
        atomic_store(&wrapped_releases, 0);
        alloc_hook_install(fail_at);
        cm_status s = scenario();
        long live = alloc_hook_live();
        alloc_hook_remove();
        cr_assert_eq(live, 0, "allocation %ld failed and %ld blocks leaked", fail_at, live);
        /* The wrapped memory is released exactly once if the wrap succeeded. */
        cr_assert_leq(atomic_load(&wrapped_releases), 1);
        if (s == CM_OK)
            break;
    }
    cr_assert_geq(fail_at, 6, "the scenario makes at least 6 allocations");
}
