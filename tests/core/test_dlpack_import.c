/* SPDX-License-Identifier: MIT */
/* Importing hand-built DLPack producers: validation of every field,
 * ownership on failure, version handling and the layouts peers get wrong. */
#include <cmetal/cmetal.h>

#include "dlpack_producer.h"

#include <criterion/criterion.h>
#include <stdint.h>
#include <string.h>

#define ASSERT_ERR(expr, status, piece)                                                            \
    do {                                                                                           \
        cm_status s_ = (expr);                                                                     \
        cr_assert_eq(s_, (status), "%s: got %s, want %s (%s)", #expr, cm_status_name(s_),          \
                     cm_status_name(status), cm_last_error());                                     \
        cr_assert(strstr(cm_last_error(), (piece)) != NULL, "message \"%s\" lacks \"%s\"",         \
                  cm_last_error(), (piece));                                                       \
    } while (0)

static float g_data[24];

static void fill_data(void) {
    for (int i = 0; i < 24; ++i)
        g_data[i] = (float)i;
}

static float elem_f32(const cm_tensor *t, const int64_t *index) {
    float v = -1.0f;
    cr_assert_eq(cm_tensor_get_element(t, index, CM_FLOAT32, &v), CM_OK, "%s", cm_last_error());
    return v;
}

/* ------------------------------------------------------------ success */

Test(dlpack_import, legacy_compact_wraps_in_place_and_deletes_once) {
    fill_data();
    producer p;
    const int64_t shape[2] = {2, 3};
    producer_init(&p, g_data, DL_F32, 2, shape, NULL);
    cm_tensor *t = NULL;
    cr_assert_eq(cm_dlpack_import(&p.legacy, NULL, &t), CM_OK, "%s", cm_last_error());
    cm_tensor_info info;
    cr_assert_eq(cm_tensor_get_info(t, &info), CM_OK);
    cr_assert_eq(info.dtype, CM_FLOAT32);
    cr_assert_eq(info.ndim, 2);
    cr_assert_eq(info.shape[1], 3);
    cr_assert_eq(info.strides[0], 3);
    cr_assert_eq(info.strides[1], 1);
    cr_assert_eq(info.device_type, CM_DEVICE_CPU);
    cr_assert_eq(info.flags & CM_TENSOR_READ_ONLY, 0u);
    cm_buffer_info bi;
    cr_assert_eq(cm_buffer_get_info(info.buffer, &bi), CM_OK);
    cr_assert(bi.flags & CM_BUFFER_FOREIGN);
    cr_assert_eq(bi.host, (void *)g_data, "zero-copy: the buffer is the producer's memory");
    cr_assert_eq(bi.size, 6 * sizeof(float));

    const int64_t at[2] = {1, 2};
    cr_assert_eq(elem_f32(t, at), 5.0f);
    float v = 42.0f;
    cr_assert_eq(cm_tensor_set_element(t, at, CM_FLOAT32, &v), CM_OK);
    cr_assert_eq(g_data[5], 42.0f, "a write through cmetal lands in the producer's memory");
    g_data[0] = -7.0f;
    const int64_t z[2] = {0, 0};
    cr_assert_eq(elem_f32(t, z), -7.0f);

    cm_tensor *view = NULL;
    cr_assert_eq(cm_tensor_slice(t, 1, 1, CM_SLICE_DEFAULT, 1, &view), CM_OK);
    cm_tensor_release(t);
    cr_assert_eq(atomic_load(&p.deleted), 0, "a view still uses the memory");
    cm_tensor_release(view);
    cr_assert_eq(atomic_load(&p.deleted), 1);
}

Test(dlpack_import, versioned_minor_versions_are_accepted) {
    fill_data();
    const uint32_t minors[] = {0, 1, 3, 99};
    for (size_t i = 0; i < sizeof minors / sizeof minors[0]; ++i) {
        producer p;
        const int64_t shape[1] = {4};
        producer_init(&p, g_data, DL_F32, 1, shape, NULL);
        p.versioned.version.minor = minors[i];
        cm_tensor *t = NULL;
        cr_assert_eq(cm_dlpack_import_versioned(&p.versioned, NULL, &t), CM_OK, "minor %u: %s",
                     minors[i], cm_last_error());
        cm_tensor_release(t);
        cr_assert_eq(atomic_load(&p.deleted), 1);
    }
}

Test(dlpack_import, null_deleter_is_allowed) {
    fill_data();
    producer p;
    const int64_t shape[1] = {3};
    producer_init(&p, g_data, DL_F32, 1, shape, NULL);
    p.legacy.deleter = NULL;
    p.versioned.deleter = NULL;
    cm_tensor *a = NULL, *b = NULL;
    cr_assert_eq(cm_dlpack_import(&p.legacy, NULL, &a), CM_OK, "%s", cm_last_error());
    cr_assert_eq(cm_dlpack_import_versioned(&p.versioned, NULL, &b), CM_OK, "%s", cm_last_error());
    const int64_t i2[1] = {2};
    cr_assert_eq(elem_f32(a, i2), 2.0f);
    cr_assert_eq(elem_f32(b, i2), 2.0f);
    cm_tensor_release(a);
    cm_tensor_release(b);
    cr_assert_eq(atomic_load(&p.deleted), 0);
}

Test(dlpack_import, zero_size_with_null_data) {
    producer p;
    const int64_t shape[2] = {0, 3};
    const int64_t strides[2] = {INT64_MAX, -5}; /* nothing is addressed */
    producer_init(&p, NULL, DL_F32, 2, shape, strides);
    for (int versioned = 0; versioned < 2; ++versioned) {
        cm_tensor *t = NULL;
        cm_status s = versioned ? cm_dlpack_import_versioned(&p.versioned, NULL, &t)
                                : cm_dlpack_import(&p.legacy, NULL, &t);
        cr_assert_eq(s, CM_OK, "%s", cm_last_error());
        cm_tensor_info info;
        cr_assert_eq(cm_tensor_get_info(t, &info), CM_OK);
        cr_assert_eq(info.numel, 0);
        cr_assert_eq(info.shape[0], 0);
        const void *host = NULL;
        cr_assert_eq(cm_tensor_host_read(t, CM_FLOAT32, &host), CM_OK, "%s", cm_last_error());
        cm_tensor_release(t);
    }
    cr_assert_eq(atomic_load(&p.deleted), 2);
}

Test(dlpack_import, zero_d_tensor_with_null_shape) {
    double x = 2.5;
    producer p;
    producer_init(&p, &x, dl_dtype(kDLFloat, 64, 1), 0, NULL, NULL);
    cm_tensor *t = NULL;
    cr_assert_eq(cm_dlpack_import_versioned(&p.versioned, NULL, &t), CM_OK, "%s", cm_last_error());
    cm_tensor_info info;
    cr_assert_eq(cm_tensor_get_info(t, &info), CM_OK);
    cr_assert_eq(info.ndim, 0);
    cr_assert_eq(info.numel, 1);
    double v = 0;
    cr_assert_eq(cm_tensor_get_element(t, NULL, CM_FLOAT64, &v), CM_OK);
    cr_assert_eq(v, 2.5);
    cm_tensor_release(t);
    cr_assert_eq(atomic_load(&p.deleted), 1);
}

Test(dlpack_import, size_one_and_zero_strides) {
    fill_data();
    producer p;
    const int64_t shape[3] = {3, 1, 4};
    const int64_t strides[3] = {0, 999, 1}; /* broadcast rows; size-1 stride unused */
    producer_init(&p, g_data, DL_F32, 3, shape, strides);
    cm_tensor *t = NULL;
    cr_assert_eq(cm_dlpack_import(&p.legacy, NULL, &t), CM_OK, "%s", cm_last_error());
    cm_tensor_info info;
    cr_assert_eq(cm_tensor_get_info(t, &info), CM_OK);
    cm_buffer_info bi;
    cr_assert_eq(cm_buffer_get_info(info.buffer, &bi), CM_OK);
    cr_assert_eq(bi.size, 4 * sizeof(float), "the wrap covers exactly the bytes touched");
    for (int64_t i = 0; i < 3; ++i)
        for (int64_t j = 0; j < 4; ++j) {
            const int64_t at[3] = {i, 0, j};
            cr_assert_eq(elem_f32(t, at), (float)j);
        }
    cm_tensor_release(t);
    cr_assert_eq(atomic_load(&p.deleted), 1);
}

/* Strides over memory the producer declares and cmetal never touches:
 * reshaping them multiplies strides past INT64_MAX, which must neither wrap
 * (UBSan checks) nor be taken for a mergeable layout. */
Test(dlpack_import, reshapes_of_huge_strides_do_not_overflow) {
    fill_data();
    producer p;
    const DLDataType u8 = dl_dtype(kDLUInt, 8, 1);
    const int64_t stride = INT64_C(4000000000000000000); /* 3 * stride wraps */
    producer_init(&p, g_data, u8, 1, (int64_t[]){3}, (int64_t[]){stride});
    cm_tensor *t = NULL, *v = NULL;
    cr_assert_eq(cm_dlpack_import(&p.legacy, NULL, &t), CM_OK, "%s", cm_last_error());
    cr_assert_eq(cm_tensor_reshape(t, 2, (int64_t[]){1, 3}, &v), CM_OK, "%s", cm_last_error());
    cm_tensor_info info;
    cr_assert_eq(cm_tensor_get_info(v, &info), CM_OK);
    cr_assert_eq(info.shape[0], 1);
    cr_assert_eq(info.shape[1], 3);
    cr_assert_eq(info.strides[1], stride);
    cm_tensor_release(v);
    cm_tensor_release(t);
    cr_assert_eq(atomic_load(&p.deleted), 1);

    producer q; /* {2, 2} with strides {1, 2^62}: not nested, and 2 * 2^62 wraps */
    producer_init(&q, g_data, u8, 2, (int64_t[]){2, 2}, (int64_t[]){1, INT64_C(1) << 62});
    cr_assert_eq(cm_dlpack_import(&q.legacy, NULL, &t), CM_OK, "%s", cm_last_error());
    ASSERT_ERR(cm_tensor_reshape(t, 1, (int64_t[]){4}, &v), CM_ERR_COPY_REQUIRED,
               "cannot express the new shape without a copy");
    cm_tensor_release(t);
    cr_assert_eq(atomic_load(&q.deleted), 1);
}

Test(dlpack_import, negative_strides_reach_before_data) {
    fill_data();
    producer p;
    /* A 2x3 view of rows 1 then 0, columns reversed: element 0 is g_data[5]. */
    const int64_t shape[2] = {2, 3};
    const int64_t strides[2] = {-3, -1};
    producer_init(&p, &g_data[5], DL_F32, 2, shape, strides);
    cm_tensor *t = NULL;
    cr_assert_eq(cm_dlpack_import_versioned(&p.versioned, NULL, &t), CM_OK, "%s", cm_last_error());
    cm_tensor_info info;
    cr_assert_eq(cm_tensor_get_info(t, &info), CM_OK);
    cm_buffer_info bi;
    cr_assert_eq(cm_buffer_get_info(info.buffer, &bi), CM_OK);
    cr_assert_eq(bi.host, (void *)g_data, "the extent starts before data");
    cr_assert_eq(bi.size, 6 * sizeof(float));
    cr_assert_eq(info.byte_offset, 5 * sizeof(float));
    for (int64_t i = 0; i < 2; ++i)
        for (int64_t j = 0; j < 3; ++j) {
            const int64_t at[2] = {i, j};
            cr_assert_eq(elem_f32(t, at), (float)(5 - 3 * i - j));
        }
    cm_tensor_release(t);
}

Test(dlpack_import, byte_offset_moves_element_zero) {
    fill_data();
    producer p;
    const int64_t shape[1] = {3};
    const int64_t strides[1] = {2};
    producer_init(&p, g_data, DL_F32, 1, shape, strides);
    PRODUCER_SET(&p, byte_offset, 4 * sizeof(float));
    cm_tensor *t = NULL;
    cr_assert_eq(cm_dlpack_import(&p.legacy, NULL, &t), CM_OK, "%s", cm_last_error());
    for (int64_t i = 0; i < 3; ++i)
        cr_assert_eq(elem_f32(t, &i), (float)(4 + 2 * i));
    cm_tensor_release(t);
}

Test(dlpack_import, bool_f16_bf16_and_integers_map_to_dtypes) {
    uint8_t bytes[16] = {1, 0, 1};
    struct {
        DLDataType dl;
        cm_dtype want;
    } cases[] = {
        {{kDLBool, 8, 1}, CM_BOOL},        {{kDLFloat, 16, 1}, CM_FLOAT16},
        {{kDLBfloat, 16, 1}, CM_BFLOAT16}, {{kDLInt, 8, 1}, CM_INT8},
        {{kDLUInt, 64, 1}, CM_UINT64},     {{kDLInt, 32, 1}, CM_INT32},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
        producer p;
        const int64_t shape[1] = {2};
        producer_init(&p, bytes, cases[i].dl, 1, shape, NULL);
        cm_tensor *t = NULL;
        cr_assert_eq(cm_dlpack_import(&p.legacy, NULL, &t), CM_OK, "%s", cm_last_error());
        cm_tensor_info info;
        cr_assert_eq(cm_tensor_get_info(t, &info), CM_OK);
        cr_assert_eq(info.dtype, cases[i].want, "case %zu", i);
        cm_tensor_release(t);
    }
    producer p;
    const int64_t shape[1] = {3};
    producer_init(&p, bytes, dl_dtype(kDLBool, 8, 1), 1, shape, NULL);
    cm_tensor *t = NULL;
    cr_assert_eq(cm_dlpack_import(&p.legacy, NULL, &t), CM_OK);
    bool b = false;
    const int64_t i2[1] = {2};
    cr_assert_eq(cm_tensor_get_element(t, i2, CM_BOOL, &b), CM_OK);
    cr_assert(b);
    cm_tensor_release(t);
}

/* The import's dtype lookup agrees with cm_dtype_from_dlpack (the dtype
 * table) on every one-lane (code, bits) pair: mapped alike or refused. */
Test(dlpack_import, dtype_lookup_matches_the_dtype_table) {
    static uint8_t bytes[16];
    const uint8_t bits[] = {1, 4, 6, 8, 16, 32, 64, 128};
    for (uint8_t code = 0; code <= 17; ++code) {
        for (size_t b = 0; b < sizeof bits; ++b) {
            cm_dtype want = CM_DTYPE_INVALID;
            const bool known = cm_dtype_from_dlpack(code, bits[b], 1, &want) == CM_OK;
            producer p;
            const int64_t shape[1] = {1};
            producer_init(&p, bytes, dl_dtype(code, bits[b], 1), 1, shape, NULL);
            cm_tensor *t = NULL;
            const cm_status s = cm_dlpack_import(&p.legacy, NULL, &t);
            if (!known) {
                cr_assert_eq(s, CM_ERR_UNSUPPORTED, "code %u bits %u: %s", code, bits[b],
                             cm_last_error());
                continue;
            }
            cr_assert_eq(s, CM_OK, "code %u bits %u: %s", code, bits[b], cm_last_error());
            cm_tensor_info info;
            cr_assert_eq(cm_tensor_get_info(t, &info), CM_OK);
            cr_assert_eq(info.dtype, want, "code %u bits %u", code, bits[b]);
            cm_tensor_release(t);
        }
    }
}

Test(dlpack_import, pinned_host_memory_types_are_host_memory) {
    fill_data();
    const int32_t types[] = {kDLCUDAHost, kDLROCMHost};
    for (size_t i = 0; i < 2; ++i) {
        producer p;
        const int64_t shape[1] = {2};
        producer_init(&p, g_data, DL_F32, 1, shape, NULL);
        PRODUCER_SET(&p, device.device_type, (DLDeviceType)types[i]);
        PRODUCER_SET(&p, device.device_id, 1);
        cm_tensor *t = NULL;
        cr_assert_eq(cm_dlpack_import(&p.legacy, NULL, &t), CM_OK, "%s", cm_last_error());
        cm_tensor_release(t);
    }
}

Test(dlpack_import, read_only_flag_refuses_writes) {
    fill_data();
    producer p;
    const int64_t shape[1] = {4};
    producer_init(&p, g_data, DL_F32, 1, shape, NULL);
    p.versioned.flags = DLPACK_FLAG_BITMASK_READ_ONLY;
    cm_tensor *t = NULL;
    cr_assert_eq(cm_dlpack_import_versioned(&p.versioned, NULL, &t), CM_OK, "%s", cm_last_error());
    cm_tensor_info info;
    cr_assert_eq(cm_tensor_get_info(t, &info), CM_OK);
    cr_assert(info.flags & CM_TENSOR_READ_ONLY);
    cm_buffer_info bi;
    cr_assert_eq(cm_buffer_get_info(info.buffer, &bi), CM_OK);
    cr_assert(bi.flags & CM_BUFFER_READ_ONLY, "views made from the buffer are read-only too");
    const int64_t i1[1] = {1};
    float v = 9.0f;
    ASSERT_ERR(cm_tensor_set_element(t, i1, CM_FLOAT32, &v), CM_ERR_READ_ONLY, "read-only");
    void *w = NULL;
    ASSERT_ERR(cm_tensor_host_write(t, CM_FLOAT32, &w), CM_ERR_READ_ONLY, "read-only");
    cr_assert_eq(g_data[1], 1.0f);
    cm_tensor_release(t);

    /* A request can make any import read-only, the legacy one too. */
    cm_dlpack_import_desc desc = {.read_only = true};
    cr_assert_eq(cm_dlpack_import(&p.legacy, &desc, &t), CM_OK);
    ASSERT_ERR(cm_tensor_set_element(t, i1, CM_FLOAT32, &v), CM_ERR_READ_ONLY, "read-only");
    cm_tensor_release(t);
    cr_assert_eq(atomic_load(&p.deleted), 2);
}

Test(dlpack_import, copy_always_makes_a_compact_copy_and_deletes_at_once) {
    fill_data();
    producer p;
    const int64_t shape[2] = {3, 2};
    const int64_t strides[2] = {1, 3}; /* a transposed 2x3 */
    producer_init(&p, g_data, DL_F32, 2, shape, strides);
    p.versioned.flags = DLPACK_FLAG_BITMASK_READ_ONLY;
    cm_dlpack_import_desc desc = {.copy = CM_COPY_ALWAYS};
    cm_tensor *t = NULL;
    cr_assert_eq(cm_dlpack_import_versioned(&p.versioned, &desc, &t), CM_OK, "%s", cm_last_error());
    cr_assert_eq(atomic_load(&p.deleted), 1, "the producer is done with right away");
    cm_tensor_info info;
    cr_assert_eq(cm_tensor_get_info(t, &info), CM_OK);
    cr_assert(info.contiguous);
    cr_assert(info.flags & CM_TENSOR_READ_ONLY, "the producer's read-only flag is kept");
    cm_buffer_info bi;
    cr_assert_eq(cm_buffer_get_info(info.buffer, &bi), CM_OK);
    cr_assert(bi.flags & CM_BUFFER_COPIED);
    cr_assert_eq(bi.flags & CM_BUFFER_FOREIGN, 0u);
    cr_assert_neq(bi.host, (void *)g_data);
    for (int64_t i = 0; i < 3; ++i)
        for (int64_t j = 0; j < 2; ++j) {
            const int64_t at[2] = {i, j};
            cr_assert_eq(elem_f32(t, at), (float)(i + 3 * j));
        }
    cm_tensor_release(t);
    cr_assert_eq(atomic_load(&p.deleted), 1);
}

Test(dlpack_import, explicit_cpu_device_and_copy_never) {
    fill_data();
    cm_device *cpu = NULL;
    cr_assert_eq(cm_device_open(CM_DEVICE_CPU, 0, &cpu), CM_OK);
    producer p;
    const int64_t shape[1] = {4};
    producer_init(&p, g_data, DL_F32, 1, shape, NULL);
    cm_dlpack_import_desc desc = {.device = cpu, .copy = CM_COPY_NEVER};
    cm_tensor *t = NULL;
    cr_assert_eq(cm_dlpack_import(&p.legacy, &desc, &t), CM_OK, "%s", cm_last_error());
    cm_device_release(cpu);
    const void *host = NULL;
    cr_assert_eq(cm_tensor_host_read(t, CM_FLOAT32, &host), CM_OK);
    cr_assert_eq(host, (const void *)g_data);
    cm_tensor_release(t);
    cr_assert_eq(atomic_load(&p.deleted), 1);
}

/* ------------------------------------------------------------ failures */

typedef struct bad_case {
    const char *name;
    void (*edit)(producer *p);
    cm_status status;
    const char *piece;
} bad_case;

static void ndim_negative(producer *p) {
    PRODUCER_SET(p, ndim, -1);
}
static void ndim_too_big(producer *p) {
    PRODUCER_SET(p, ndim, CM_MAX_NDIM + 1);
}
static void shape_null(producer *p) {
    PRODUCER_SET(p, shape, NULL);
}
static void shape_negative(producer *p) {
    p->shape[1] = -3;
}
static void shape_overflow(producer *p) {
    p->shape[0] = INT64_MAX;
    p->shape[1] = 4;
}
static void device_cuda(producer *p) {
    PRODUCER_SET(p, device.device_type, kDLCUDA);
}
static void device_metal(producer *p) {
    PRODUCER_SET(p, device.device_type, kDLMetal);
}
static void device_rocm(producer *p) {
    PRODUCER_SET(p, device.device_type, kDLROCM);
}
static void device_managed(producer *p) {
    PRODUCER_SET(p, device.device_type, kDLCUDAManaged);
}
static void device_unknown(producer *p) {
    PRODUCER_SET(p, device.device_type, (DLDeviceType)5);
}
static void device_huge(producer *p) {
    PRODUCER_SET(p, device.device_type, (DLDeviceType)99);
}
static void device_id_cpu(producer *p) {
    PRODUCER_SET(p, device.device_id, 1);
}
static void device_id_negative(producer *p) {
    PRODUCER_SET(p, device.device_type, kDLCUDAHost);
    PRODUCER_SET(p, device.device_id, -1);
}
static void dtype_complex(producer *p) {
    PRODUCER_SET(p, dtype, dl_dtype(kDLComplex, 64, 1));
}
static void dtype_code_unknown(producer *p) {
    PRODUCER_SET(p, dtype, dl_dtype(42, 32, 1));
}
static void dtype_float8(producer *p) {
    PRODUCER_SET(p, dtype, dl_dtype(10, 8, 1));
}
static void dtype_bits_zero(producer *p) {
    PRODUCER_SET(p, dtype, dl_dtype(kDLFloat, 0, 1));
}
static void dtype_bits_odd(producer *p) {
    PRODUCER_SET(p, dtype, dl_dtype(kDLFloat, 24, 1));
}
static void dtype_lanes_zero(producer *p) {
    PRODUCER_SET(p, dtype, dl_dtype(kDLFloat, 32, 0));
}
static void dtype_lanes_four(producer *p) {
    PRODUCER_SET(p, dtype, dl_dtype(kDLFloat, 32, 4));
}
static void dtype_opaque(producer *p) {
    PRODUCER_SET(p, dtype, dl_dtype(kDLOpaqueHandle, 64, 1));
}
static void offset_misaligned(producer *p) {
    PRODUCER_SET(p, byte_offset, 2);
}
static void offset_huge(producer *p) {
    PRODUCER_SET(p, byte_offset, UINT64_MAX - 3);
}
static void data_null(producer *p) {
    PRODUCER_SET(p, data, NULL);
}
static void strides_overflow(producer *p) {
    PRODUCER_SET(p, strides, p->strides);
    p->shape[0] = 3;
    p->strides[0] = INT64_MAX;
    p->strides[1] = 1;
}
static void strides_bytes_overflow(producer *p) {
    PRODUCER_SET(p, strides, p->strides);
    p->strides[0] = INT64_MAX / 2;
    p->strides[1] = 1;
}
static void strides_below_zero(producer *p) {
    PRODUCER_SET(p, data, (void *)(uintptr_t)64);
    PRODUCER_SET(p, strides, p->strides);
    p->strides[0] = -1000;
    p->strides[1] = 1;
}
static void strides_wrap(producer *p) {
    PRODUCER_SET(p, data, (void *)(UINTPTR_MAX - 64));
    PRODUCER_SET(p, strides, p->strides);
    p->strides[0] = 1000;
    p->strides[1] = 1;
}

static void strides_span(producer *p) {
    /* Each end fits, but the span between them is larger than any object. */
    PRODUCER_SET(p, data, (void *)((uintptr_t)1 << 63));
    PRODUCER_SET(p, strides, p->strides);
    p->strides[0] = -(INT64_MAX / 4);
    p->strides[1] = INT64_MAX / 16;
}

static const bad_case bad_cases[] = {
    {"ndim < 0", ndim_negative, CM_ERR_INVALID_ARGUMENT, "dl_tensor.ndim = -1 must be >= 0"},
    {"ndim > max", ndim_too_big, CM_ERR_UNSUPPORTED, "dl_tensor.ndim = 17 exceeds"},
    {"shape NULL", shape_null, CM_ERR_INVALID_ARGUMENT, "dl_tensor.shape = NULL"},
    {"shape < 0", shape_negative, CM_ERR_INVALID_ARGUMENT, "dl_tensor.shape[1] = -3"},
    {"shape overflow", shape_overflow, CM_ERR_OVERFLOW, "shape has more elements"},
    {"CUDA", device_cuda, CM_ERR_UNSUPPORTED, "dl_tensor.device.device_type = 2 (kDLCUDA)"},
    /* This suite runs without a Metal framework: kDLMetal needs a device. */
    {"Metal", device_metal, CM_ERR_NO_DEVICE, "CMETAL_METAL_FRAMEWORK"},
    {"ROCm", device_rocm, CM_ERR_UNSUPPORTED, "device_type = 10 (kDLROCM)"},
    {"CUDA managed", device_managed, CM_ERR_UNSUPPORTED, "13 (kDLCUDAManaged)"},
    {"device 5", device_unknown, CM_ERR_INVALID_ARGUMENT, "device_type = 5 is not a DLDeviceType"},
    {"device 99", device_huge, CM_ERR_INVALID_ARGUMENT, "device_type = 99 is not"},
    {"CPU id 1", device_id_cpu, CM_ERR_INVALID_ARGUMENT, "dl_tensor.device.device_id = 1"},
    {"id -1", device_id_negative, CM_ERR_INVALID_ARGUMENT, "device_id = -1 must be >= 0"},
    {"complex", dtype_complex, CM_ERR_UNSUPPORTED, "dl_tensor.dtype = (code 5, bits 64, lanes 1)"},
    {"code 42", dtype_code_unknown, CM_ERR_INVALID_ARGUMENT, "dl_tensor.dtype.code = 42"},
    {"float8", dtype_float8, CM_ERR_UNSUPPORTED, "(code 10, bits 8"},
    {"opaque", dtype_opaque, CM_ERR_UNSUPPORTED, "(code 3, bits 64"},
    {"bits 0", dtype_bits_zero, CM_ERR_INVALID_ARGUMENT, "dl_tensor.dtype.bits = 0"},
    {"bits 24", dtype_bits_odd, CM_ERR_UNSUPPORTED, "bits 24"},
    {"lanes 0", dtype_lanes_zero, CM_ERR_INVALID_ARGUMENT, "dl_tensor.dtype.lanes = 0"},
    {"lanes 4", dtype_lanes_four, CM_ERR_UNSUPPORTED, "dl_tensor.dtype.lanes = 4"},
    {"offset 2", offset_misaligned, CM_ERR_INVALID_ARGUMENT,
     "dl_tensor.byte_offset = 2 must be a multiple of the float32 size 4"},
    {"offset huge", offset_huge, CM_ERR_OVERFLOW, "exceeds INT64_MAX"},
    {"data NULL", data_null, CM_ERR_INVALID_ARGUMENT, "dl_tensor.data = NULL with 6 elements"},
    {"stride overflow", strides_overflow, CM_ERR_OVERFLOW,
     "dl_tensor.strides[0] = 9223372036854775807"},
    {"stride bytes", strides_bytes_overflow, CM_ERR_OVERFLOW, "dl_tensor.strides reach beyond"},
    {"below 0", strides_below_zero, CM_ERR_OVERFLOW, "below address 0"},
    {"wrap", strides_wrap, CM_ERR_OVERFLOW, "wraps the address space"},
    {"span", strides_span, CM_ERR_OVERFLOW, "more than one object can"},
};

Test(dlpack_import, every_bad_field_fails_naming_it_and_calls_nothing) {
    for (size_t i = 0; i < sizeof bad_cases / sizeof bad_cases[0]; ++i) {
        for (int versioned = 0; versioned < 2; ++versioned) {
            fill_data();
            producer p;
            const int64_t shape[2] = {2, 3};
            producer_init(&p, g_data, DL_F32, 2, shape, NULL);
            bad_cases[i].edit(&p);
            cm_tensor *t = (cm_tensor *)&p; /* must come back NULL */
            cm_status s = versioned ? cm_dlpack_import_versioned(&p.versioned, NULL, &t)
                                    : cm_dlpack_import(&p.legacy, NULL, &t);
            const char *want = versioned ? "cm_dlpack_import_versioned: " : "cm_dlpack_import: ";
            cr_assert_eq(s, bad_cases[i].status, "%s (%s): got %s: %s", bad_cases[i].name, want,
                         cm_status_name(s), cm_last_error());
            cr_assert(strncmp(cm_last_error(), want, strlen(want)) == 0, "%s", cm_last_error());
            cr_assert(strstr(cm_last_error(), bad_cases[i].piece) != NULL,
                      "%s: message \"%s\" lacks \"%s\"", bad_cases[i].name, cm_last_error(),
                      bad_cases[i].piece);
            cr_assert_null(t, "%s", bad_cases[i].name);
            cr_assert_eq(atomic_load(&p.deleted), 0, "%s: ownership stays with the caller",
                         bad_cases[i].name);
        }
    }
}

Test(dlpack_import, bad_arguments_call_nothing) {
    producer p;
    const int64_t shape[1] = {2};
    producer_init(&p, g_data, DL_F32, 1, shape, NULL);
    cm_tensor *t = NULL;
    ASSERT_ERR(cm_dlpack_import(NULL, NULL, &t), CM_ERR_INVALID_ARGUMENT, "managed = NULL");
    ASSERT_ERR(cm_dlpack_import(&p.legacy, NULL, NULL), CM_ERR_INVALID_ARGUMENT, "out = NULL");
    ASSERT_ERR(cm_dlpack_import_versioned(NULL, NULL, &t), CM_ERR_INVALID_ARGUMENT,
               "managed = NULL");
    cm_dlpack_import_desc desc = {.copy = (cm_copy_policy)7};
    ASSERT_ERR(cm_dlpack_import(&p.legacy, &desc, &t), CM_ERR_INVALID_ARGUMENT,
               "desc->copy = 7 is not a cm_copy_policy");
    /* An invalid request fails before the version check: nothing is called. */
    p.versioned.version.major = 2;
    ASSERT_ERR(cm_dlpack_import_versioned(&p.versioned, &desc, &t), CM_ERR_INVALID_ARGUMENT,
               "desc->copy = 7");
    cr_assert_eq(atomic_load(&p.deleted), 0);
}

Test(dlpack_import, major_version_mismatch_calls_the_deleter_and_reads_nothing_else) {
    const uint32_t majors[] = {0, 2, 7, UINT32_MAX};
    for (size_t i = 0; i < sizeof majors / sizeof majors[0]; ++i) {
        producer p;
        const int64_t shape[1] = {2};
        producer_init(&p, g_data, DL_F32, 1, shape, NULL);
        /* Poison everything past the deleter: a reader would crash or fail
         * with a different status. */
        p.versioned.version.major = majors[i];
        p.versioned.version.minor = 5;
        p.versioned.flags = UINT64_MAX;
        memset(&p.versioned.dl_tensor, 0xA5, sizeof p.versioned.dl_tensor);
        cm_tensor *t = NULL;
        ASSERT_ERR(cm_dlpack_import_versioned(&p.versioned, NULL, &t), CM_ERR_VERSION,
                   "cm_dlpack_import_versioned: version = ");
        cr_assert(strstr(cm_last_error(), "deleter was called") != NULL);
        cr_assert_null(t);
        cr_assert_eq(atomic_load(&p.deleted), 1, "major %u", majors[i]);
    }
    /* And with no deleter there is nothing to call. */
    producer p;
    producer_init(&p, g_data, DL_F32, 0, NULL, NULL);
    p.versioned.version.major = 3;
    p.versioned.deleter = NULL;
    cm_tensor *t = NULL;
    ASSERT_ERR(cm_dlpack_import_versioned(&p.versioned, NULL, &t), CM_ERR_VERSION, "version = 3.0");
    cr_assert_eq(atomic_load(&p.deleted), 0);
}

Test(dlpack_import, unknown_flag_bits_are_refused_without_calling) {
    producer p;
    const int64_t shape[1] = {2};
    producer_init(&p, g_data, DL_F32, 1, shape, NULL);
    p.versioned.flags = UINT64_C(1) << 9;
    cm_tensor *t = NULL;
    ASSERT_ERR(cm_dlpack_import_versioned(&p.versioned, NULL, &t), CM_ERR_UNSUPPORTED,
               "flags = 0x200");
    cr_assert_eq(atomic_load(&p.deleted), 0);
    p.versioned.flags = DLPACK_FLAG_BITMASK_IS_COPIED | DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED;
    cr_assert_eq(cm_dlpack_import_versioned(&p.versioned, NULL, &t), CM_OK, "%s", cm_last_error());
    cm_tensor_release(t);
    cr_assert_eq(atomic_load(&p.deleted), 1);
}
