/* SPDX-License-Identifier: MIT */
/* Exporting tensors as DLPack managed tensors, and export-import round
 * trips in both struct versions. */
#include <cmetal/cmetal.h>

#include "alloc_hook.h"

#include <criterion/criterion.h>
#include <string.h>

#define ASSERT_ERR(expr, status, piece)                                                            \
    do {                                                                                           \
        cm_status s_ = (expr);                                                                     \
        cr_assert_eq(s_, (status), "%s: got %s, want %s (%s)", #expr, cm_status_name(s_),          \
                     cm_status_name(status), cm_last_error());                                     \
        cr_assert(strstr(cm_last_error(), (piece)) != NULL, "message \"%s\" lacks \"%s\"",         \
                  cm_last_error(), (piece));                                                       \
    } while (0)

static cm_device *g_cpu;

static void setup(void) {
    cr_assert_eq(cm_device_open(CM_DEVICE_CPU, 0, &g_cpu), CM_OK);
}

static void teardown(void) {
    cm_device_release(g_cpu);
}

/* A compact float32 tensor holding 0, 1, 2, ... */
static cm_tensor *iota_f32(int32_t ndim, const int64_t *shape) {
    cm_tensor_desc desc = {.dtype = CM_FLOAT32, .ndim = ndim, .shape = shape};
    cm_tensor *t = NULL;
    cr_assert_eq(cm_tensor_create(g_cpu, &desc, &t), CM_OK, "%s", cm_last_error());
    cm_tensor_info info;
    cr_assert_eq(cm_tensor_get_info(t, &info), CM_OK);
    void *w = NULL;
    cr_assert_eq(cm_tensor_host_write(t, CM_FLOAT32, &w), CM_OK);
    for (int64_t i = 0; i < info.numel; ++i)
        ((float *)w)[i] = (float)i;
    return t;
}

static float elem_f32(const cm_tensor *t, const int64_t *index) {
    float v = -1.0f;
    cr_assert_eq(cm_tensor_get_element(t, index, CM_FLOAT32, &v), CM_OK, "%s", cm_last_error());
    return v;
}

static const float *dl_f32(const DLTensor *t) {
    /* through void *: clang's -Wcast-align (on for arm64) refuses a char *
     * cast to float *; the export aligns data and byte_offset itself */
    return (const float *)(const void *)((const char *)t->data + t->byte_offset);
}

TestSuite(dlpack_export, .init = setup, .fini = teardown);

Test(dlpack_export, legacy_cpu_export_puts_the_view_offset_into_data) {
    const int64_t shape[2] = {3, 4};
    cm_tensor *t = iota_f32(2, shape);
    cm_tensor *row = NULL;
    cr_assert_eq(cm_tensor_select(t, 0, 1, &row), CM_OK); /* elements 4..7 */
    cm_dlpack_managed m;
    cr_assert_eq(cm_dlpack_export(row, NULL, &m), CM_OK, "%s", cm_last_error());
    cr_assert_not_null(m.legacy);
    cr_assert_null(m.versioned);
    cr_assert_eq(m.version.major, 0);
    cr_assert(!m.copied);
    const DLTensor *dl = &m.legacy->dl_tensor;
    const void *host = NULL;
    cr_assert_eq(cm_tensor_host_read(row, CM_FLOAT32, &host), CM_OK);
    cr_assert_eq(dl->data, host, "data = contents + the view's byte offset");
    cr_assert_eq(dl->byte_offset, 0);
    cr_assert_eq(dl->device.device_type, kDLCPU);
    cr_assert_eq(dl->device.device_id, 0);
    cr_assert_eq(dl->ndim, 1);
    cr_assert_eq(dl->dtype.code, kDLFloat);
    cr_assert_eq(dl->dtype.bits, 32);
    cr_assert_eq(dl->dtype.lanes, 1);
    cr_assert_eq(dl->shape[0], 4);
    cr_assert_not_null(dl->strides, "strides are always emitted");
    cr_assert_eq(dl->strides[0], 1);
    cr_assert_eq(dl_f32(dl)[2], 6.0f);
    /* The managed tensor keeps the data alive on its own. */
    cm_tensor_release(row);
    cm_tensor_release(t);
    cr_assert_eq(dl_f32(dl)[3], 7.0f);
    m.legacy->deleter(m.legacy);
}

Test(dlpack_export, strides_shape_and_dtypes_go_out_as_they_are) {
    const int64_t shape[2] = {2, 3};
    cm_tensor *t = iota_f32(2, shape);
    cm_tensor *tr = NULL, *rev = NULL;
    cr_assert_eq(cm_tensor_transpose(t, 0, 1, &tr), CM_OK);
    cr_assert_eq(cm_tensor_slice(tr, 0, CM_SLICE_DEFAULT, CM_SLICE_DEFAULT, -1, &rev), CM_OK);
    cm_dlpack_export_desc desc = {.max_version = {1, 0}};
    cm_dlpack_managed m;
    cr_assert_eq(cm_dlpack_export(rev, &desc, &m), CM_OK, "%s", cm_last_error());
    const DLTensor *dl = &m.versioned->dl_tensor;
    cr_assert_eq(dl->shape[0], 3);
    cr_assert_eq(dl->shape[1], 2);
    cr_assert_eq(dl->strides[0], -1);
    cr_assert_eq(dl->strides[1], 3);
    /* rev[i][j] = t[j][2 - i] */
    const float *e0 = dl_f32(dl);
    for (int64_t i = 0; i < 3; ++i)
        for (int64_t j = 0; j < 2; ++j)
            cr_assert_eq(e0[i * dl->strides[0] + j * dl->strides[1]], (float)(j * 3 + 2 - i));
    m.versioned->deleter(m.versioned);
    cm_tensor_release(rev);
    cm_tensor_release(tr);
    cm_tensor_release(t);

    const cm_dtype dtypes[] = {CM_BOOL, CM_FLOAT16, CM_BFLOAT16, CM_UINT16, CM_INT64};
    const uint8_t codes[] = {kDLBool, kDLFloat, kDLBfloat, kDLUInt, kDLInt};
    const uint8_t bits[] = {8, 16, 16, 16, 64};
    for (size_t i = 0; i < 5; ++i) {
        const int64_t one[1] = {5};
        cm_tensor_desc td = {.dtype = dtypes[i], .ndim = 1, .shape = one};
        cm_tensor *x = NULL;
        cr_assert_eq(cm_tensor_create(g_cpu, &td, &x), CM_OK);
        cr_assert_eq(cm_dlpack_export(x, NULL, &m), CM_OK);
        cr_assert_eq(m.legacy->dl_tensor.dtype.code, codes[i]);
        cr_assert_eq(m.legacy->dl_tensor.dtype.bits, bits[i]);
        cr_assert_eq(m.legacy->dl_tensor.dtype.lanes, 1);
        cm_tensor_release(x);
        m.legacy->deleter(m.legacy);
    }
}

Test(dlpack_export, zero_d_and_zero_size) {
    cm_tensor *s = iota_f32(0, NULL);
    cm_dlpack_managed m;
    cr_assert_eq(cm_dlpack_export(s, NULL, &m), CM_OK);
    cr_assert_eq(m.legacy->dl_tensor.ndim, 0);
    cr_assert_eq(dl_f32(&m.legacy->dl_tensor)[0], 0.0f);
    m.legacy->deleter(m.legacy);
    cm_tensor_release(s);

    const int64_t shape[2] = {0, 4};
    cm_tensor *z = iota_f32(2, shape);
    cm_dlpack_export_desc desc = {.max_version = {1, 1}, .copy = CM_COPY_ALWAYS};
    cr_assert_eq(cm_dlpack_export(z, &desc, &m), CM_OK, "%s", cm_last_error());
    cr_assert_eq(m.versioned->dl_tensor.shape[0], 0);
    cr_assert_eq(m.versioned->dl_tensor.shape[1], 4);
    cr_assert_not_null(m.versioned->dl_tensor.strides);
    cr_assert_eq(m.versioned->flags, DLPACK_FLAG_BITMASK_IS_COPIED);
    m.versioned->deleter(m.versioned);
    cm_tensor_release(z);
}

Test(dlpack_export, versioned_version_follows_max_version) {
    const int64_t shape[1] = {2};
    cm_tensor *t = iota_f32(1, shape);
    const struct {
        DLPackVersion max;
        uint32_t minor;
    } cases[] = {{{1, 0}, 0},
                 {{1, 2}, 2},
                 {{1, 3}, 3},
                 {{1, 77}, CM_DLPACK_MINOR_VERSION},
                 {{2, 0}, CM_DLPACK_MINOR_VERSION}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
        cm_dlpack_export_desc desc = {.max_version = cases[i].max};
        cm_dlpack_managed m;
        cr_assert_eq(cm_dlpack_export(t, &desc, &m), CM_OK);
        cr_assert_null(m.legacy);
        cr_assert_not_null(m.versioned);
        cr_assert_eq(m.versioned->version.major, 1);
        cr_assert_eq(m.versioned->version.minor, cases[i].minor, "case %zu", i);
        cr_assert_eq(m.version.minor, cases[i].minor);
        cr_assert_eq(m.versioned->flags, 0u);
        m.versioned->deleter(m.versioned);
    }
    cm_tensor_release(t);
}

Test(dlpack_export, read_only_tensors_and_requests_set_the_flag) {
    const int64_t shape[1] = {3};
    const int64_t wide[2] = {2, 3};
    cm_tensor *t = iota_f32(1, shape);
    cm_tensor *b = NULL;
    cr_assert_eq(cm_tensor_broadcast_to(t, 2, wide, &b), CM_OK); /* read-only */
    cm_dlpack_export_desc desc = {.max_version = {1, 0}};
    cm_dlpack_managed m;
    cr_assert_eq(cm_dlpack_export(b, &desc, &m), CM_OK);
    cr_assert_eq(m.versioned->flags, DLPACK_FLAG_BITMASK_READ_ONLY);
    cr_assert_eq(m.versioned->dl_tensor.strides[0], 0);
    m.versioned->deleter(m.versioned);

    desc.read_only = true;
    cr_assert_eq(cm_dlpack_export(t, &desc, &m), CM_OK);
    cr_assert_eq(m.versioned->flags, DLPACK_FLAG_BITMASK_READ_ONLY);
    m.versioned->deleter(m.versioned);

    /* The legacy struct cannot say read-only: refused without a copy... */
    cm_dlpack_export_desc legacy = {.copy = CM_COPY_NEVER};
    ASSERT_ERR(cm_dlpack_export(b, &legacy, &m), CM_ERR_READ_ONLY,
               "cm_dlpack_export: the tensor is read-only and a legacy DLManagedTensor");
    cr_assert_null(m.legacy);
    legacy.read_only = true;
    ASSERT_ERR(cm_dlpack_export(t, &legacy, &m), CM_ERR_READ_ONLY, "export request is read-only");
    /* ...and copied when a copy is allowed: the consumer owns the copy. */
    legacy = (cm_dlpack_export_desc){.copy = CM_COPY_IF_NEEDED};
    cr_assert_eq(cm_dlpack_export(b, &legacy, &m), CM_OK, "%s", cm_last_error());
    cr_assert(m.copied);
    const DLTensor *dl = &m.legacy->dl_tensor;
    cr_assert_eq(dl->strides[0], 3, "a copy is compact");
    cr_assert_eq(dl->strides[1], 1);
    cr_assert_eq(dl_f32(dl)[4], 1.0f);
    const void *host = NULL;
    cr_assert_eq(cm_tensor_host_read(t, CM_FLOAT32, &host), CM_OK);
    cr_assert_neq(dl->data, host);
    m.legacy->deleter(m.legacy);
    cm_tensor_release(b);
    cm_tensor_release(t);
}

Test(dlpack_export, copy_always_is_compact_and_flagged) {
    const int64_t shape[2] = {2, 3};
    cm_tensor *t = iota_f32(2, shape);
    cm_tensor *tr = NULL;
    cr_assert_eq(cm_tensor_transpose(t, 0, 1, &tr), CM_OK);
    cm_dlpack_export_desc desc = {.max_version = {1, 0}, .copy = CM_COPY_ALWAYS};
    cm_dlpack_managed m;
    cr_assert_eq(cm_dlpack_export(tr, &desc, &m), CM_OK, "%s", cm_last_error());
    cr_assert(m.copied);
    cr_assert_eq(m.versioned->flags, DLPACK_FLAG_BITMASK_IS_COPIED);
    const DLTensor *dl = &m.versioned->dl_tensor;
    cr_assert_eq(dl->strides[0], 2);
    cr_assert_eq(dl->strides[1], 1);
    const float *e = dl_f32(dl);
    for (int64_t i = 0; i < 3; ++i)
        for (int64_t j = 0; j < 2; ++j)
            cr_assert_eq(e[i * 2 + j], (float)(j * 3 + i));
    /* The copy is independent of the tensor. */
    ((float *)m.versioned->dl_tensor.data)[0] = 100.0f;
    const int64_t z[2] = {0, 0};
    cr_assert_eq(elem_f32(t, z), 0.0f);
    m.versioned->deleter(m.versioned);
    cm_tensor_release(tr);
    cm_tensor_release(t);
}

Test(dlpack_export, bad_requests_fail_and_allocate_nothing) {
    const int64_t shape[1] = {2};
    cm_tensor *t = iota_f32(1, shape);
    cm_dlpack_managed m;
    cm_dlpack_export_desc desc = {.device_type = kDLMetal};
    ASSERT_ERR(cm_dlpack_export(t, &desc, &m), CM_ERR_UNSUPPORTED, "(kDLMetal)");
    cr_assert_null(m.legacy);
    cr_assert_null(m.versioned);
    desc.device_type = kDLCUDA;
    ASSERT_ERR(cm_dlpack_export(t, &desc, &m), CM_ERR_UNSUPPORTED,
               "desc->device_type = 2 (kDLCUDA)");
    desc.device_type = 42;
    ASSERT_ERR(cm_dlpack_export(t, &desc, &m), CM_ERR_INVALID_ARGUMENT,
               "desc->device_type = 42 is not a DLDeviceType");
    desc = (cm_dlpack_export_desc){.device_type = kDLCPU, .device_id = 1};
    ASSERT_ERR(cm_dlpack_export(t, &desc, &m), CM_ERR_INVALID_ARGUMENT,
               "desc->device_id = 1 must be 0 for kDLCPU");
    desc = (cm_dlpack_export_desc){.copy = (cm_copy_policy)9};
    ASSERT_ERR(cm_dlpack_export(t, &desc, &m), CM_ERR_INVALID_ARGUMENT, "desc->copy = 9");
    ASSERT_ERR(cm_dlpack_export(NULL, NULL, &m), CM_ERR_INVALID_ARGUMENT, "tensor = NULL");
    ASSERT_ERR(cm_dlpack_export(t, NULL, NULL), CM_ERR_INVALID_ARGUMENT, "out = NULL");
    desc = (cm_dlpack_export_desc){.device_type = kDLCPU};
    cr_assert_eq(cm_dlpack_export(t, &desc, &m), CM_OK);
    m.legacy->deleter(m.legacy);
    cm_tensor_release(t);
}

/* ------------------------------------------------------------ round trips */

static void round_trip(bool versioned) {
    const int64_t shape[2] = {4, 5};
    cm_tensor *t = iota_f32(2, shape);
    cm_tensor *view = NULL;
    cr_assert_eq(cm_tensor_slice(t, 1, 4, 0, -2, &view), CM_OK); /* columns 4, 2 */
    cm_dlpack_export_desc desc = {.max_version = {versioned ? 1u : 0u, 0}};
    cm_dlpack_managed m;
    cr_assert_eq(cm_dlpack_export(view, &desc, &m), CM_OK, "%s", cm_last_error());
    cm_tensor *back = NULL;
    cm_status s = versioned ? cm_dlpack_import_versioned(m.versioned, NULL, &back)
                            : cm_dlpack_import(m.legacy, NULL, &back);
    cr_assert_eq(s, CM_OK, "%s", cm_last_error());
    cm_tensor_info a, b;
    cr_assert_eq(cm_tensor_get_info(view, &a), CM_OK);
    cr_assert_eq(cm_tensor_get_info(back, &b), CM_OK);
    cr_assert_eq(b.ndim, 2);
    cr_assert_eq(b.shape[0], 4);
    cr_assert_eq(b.shape[1], 2);
    cr_assert_eq(b.strides[0], a.strides[0]);
    cr_assert_eq(b.strides[1], a.strides[1]);
    const void *pa = NULL, *pb = NULL;
    cr_assert_eq(cm_tensor_host_read(view, CM_FLOAT32, &pa), CM_OK);
    cr_assert_eq(cm_tensor_host_read(back, CM_FLOAT32, &pb), CM_OK);
    cr_assert_eq(pa, pb, "zero-copy: element 0 at the same address");

    /* Written through one, read through the other, both ways. */
    const int64_t at[2] = {2, 1};
    float v = 123.0f;
    cr_assert_eq(cm_tensor_set_element(back, at, CM_FLOAT32, &v), CM_OK);
    const int64_t orig[2] = {2, 2};
    cr_assert_eq(elem_f32(t, orig), 123.0f);
    v = -4.0f;
    const int64_t orig2[2] = {3, 4};
    cr_assert_eq(cm_tensor_set_element(t, orig2, CM_FLOAT32, &v), CM_OK);
    const int64_t at2[2] = {3, 0};
    cr_assert_eq(elem_f32(back, at2), -4.0f);

    /* Drop the originals first: the import keeps everything alive. */
    cm_tensor_release(view);
    cm_tensor_release(t);
    cr_assert_eq(elem_f32(back, at), 123.0f);
    cm_tensor_release(back); /* runs our export deleter */
}

Test(dlpack_export, legacy_round_trip_shares_memory) {
    round_trip(false);
}

Test(dlpack_export, versioned_round_trip_shares_memory) {
    round_trip(true);
}

Test(dlpack_export, read_only_survives_a_versioned_round_trip) {
    const int64_t shape[1] = {3};
    cm_tensor *t = iota_f32(1, shape);
    cm_dlpack_export_desc desc = {.max_version = {1, 0}, .read_only = true};
    cm_dlpack_managed m;
    cr_assert_eq(cm_dlpack_export(t, &desc, &m), CM_OK);
    cm_tensor *back = NULL;
    cr_assert_eq(cm_dlpack_import_versioned(m.versioned, NULL, &back), CM_OK);
    const int64_t i0[1] = {0};
    float v = 1.0f;
    ASSERT_ERR(cm_tensor_set_element(back, i0, CM_FLOAT32, &v), CM_ERR_READ_ONLY, "read-only");
    cr_assert_eq(cm_tensor_set_element(t, i0, CM_FLOAT32, &v), CM_OK,
                 "the original stays writable");
    cm_tensor_release(back);
    cm_tensor_release(t);
}

/* An export of cmetal's own comes back as the tensor it holds: the import
 * allocates nothing (the export's one allocation is freed), for both
 * structs; a read-only request on a writable tensor still gets a
 * read-only view of its own. */

static void own_round_trip(bool versioned) {
    const int64_t shape[2] = {3, 5};
    cm_tensor *t = iota_f32(2, shape);
    cm_tensor *view = NULL;
    cr_assert_eq(cm_tensor_slice(t, 1, 4, 0, -2, &view), CM_OK);
    cm_dlpack_export_desc desc = {.max_version = {versioned ? 1u : 0u, 0}};
    alloc_hook_install(0);
    cm_dlpack_managed m;
    cr_assert_eq(cm_dlpack_export(view, &desc, &m), CM_OK, "%s", cm_last_error());
    cr_assert_eq(alloc_hook_calls(), 1, "an export allocates once");
    cm_tensor *back = NULL;
    cm_status s = versioned ? cm_dlpack_import_versioned(m.versioned, NULL, &back)
                            : cm_dlpack_import(m.legacy, NULL, &back);
    cr_assert_eq(s, CM_OK, "%s", cm_last_error());
    cr_assert_eq(alloc_hook_calls(), 1, "the import allocates nothing");
    cr_assert_eq(alloc_hook_live(), 0, "the export's block is freed at import");
    alloc_hook_remove();
    cr_assert_eq(back, view, "the exported tensor itself, retained");
    cm_tensor_release(back);
    const int64_t at[2] = {1, 1};
    cr_assert_eq(elem_f32(view, at), 7.0f, "the original lives on");
    cm_tensor_release(view);
    cm_tensor_release(t);
}

Test(dlpack_export, own_legacy_export_imports_without_allocating) {
    own_round_trip(false);
}

Test(dlpack_export, own_versioned_export_imports_without_allocating) {
    own_round_trip(true);
}

Test(dlpack_export, own_export_imported_read_only_gets_its_own_view) {
    const int64_t shape[1] = {3};
    cm_tensor *t = iota_f32(1, shape);
    cm_dlpack_export_desc desc = {.max_version = {1, 0}};
    cm_dlpack_managed m;
    cr_assert_eq(cm_dlpack_export(t, &desc, &m), CM_OK);
    cm_dlpack_import_desc id = {.read_only = true};
    cm_tensor *back = NULL;
    cr_assert_eq(cm_dlpack_import_versioned(m.versioned, &id, &back), CM_OK);
    cr_assert_neq(back, t);
    const int64_t i0[1] = {0};
    float v = 1.0f;
    ASSERT_ERR(cm_tensor_set_element(back, i0, CM_FLOAT32, &v), CM_ERR_READ_ONLY, "read-only");
    cm_tensor_release(back);
    cm_tensor_release(t);
}
