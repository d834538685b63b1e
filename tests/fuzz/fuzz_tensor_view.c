/* SPDX-License-Identifier: MIT */
/* Fuzz target: tensor layouts and view chains built from arbitrary bytes.
 * Oracle: every view the library accepts lies inside its buffer, which is
 * allocated to the exact size, so reading every element through the public
 * API must stay in bounds (ASan checks), and refused views report an error
 * message. Element access at arbitrary indices, and ops on the last view
 * (a copy read back element by element, a fill), take any stride a view
 * may hold: UBSan checks their arithmetic. */
#include <cmetal/cmetal.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "fuzz_input.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The next row-major index of a view's shape (wraps to all zeros). */
static void next_index(const cm_tensor_info *info, int64_t *idx) {
    for (int32_t k = info->ndim - 1; k >= 0 && ++idx[k] >= info->shape[k]; --k)
        idx[k] = 0;
}

static void touch_all(const cm_tensor *t) {
    cm_tensor_info info;
    if (cm_tensor_get_info(t, &info) != CM_OK || info.numel > 4096)
        return;
    int64_t idx[CM_MAX_NDIM] = {0};
    uint8_t value[8];
    for (int64_t n = 0; n < info.numel; ++n) {
        if (cm_tensor_get_element(t, idx, info.dtype, value) != CM_OK)
            __builtin_trap(); /* an accepted view must be readable */
        next_index(&info, idx);
    }
}

/* get_element at an arbitrary index: a value or a reason, never a crash. */
static void probe(fuzz_input *in, const cm_tensor *t) {
    cm_tensor_info info;
    if (cm_tensor_get_info(t, &info) != CM_OK)
        __builtin_trap();
    int64_t idx[CM_MAX_NDIM];
    for (int32_t k = 0; k < CM_MAX_NDIM; ++k)
        idx[k] = fuzz_small_i64(in);
    uint8_t value[8];
    if (cm_tensor_get_element(t, idx, info.dtype, value) != CM_OK && cm_last_error()[0] == '\0')
        __builtin_trap();
}

/* Two elements' bytes through the public API. */
static bool same_element(const cm_tensor *a, const cm_tensor *b, const int64_t *idx, cm_dtype dtype,
                         size_t size) {
    uint8_t va[8], vb[8];
    if (cm_tensor_get_element(a, idx, dtype, va) != CM_OK ||
        cm_tensor_get_element(b, idx, dtype, vb) != CM_OK)
        __builtin_trap();
    return memcmp(va, vb, size) == 0;
}

/* Ops on the last view: a copy into a compact tensor equals the view
 * element for element; a fill that succeeds leaves every element zero. */
static void run_ops(cm_device *device, cm_tensor *t) {
    cm_tensor_info info;
    cm_dtype_info dinfo;
    if (cm_tensor_get_info(t, &info) != CM_OK || cm_dtype_get_info(info.dtype, &dinfo) != CM_OK)
        __builtin_trap();
    if (info.numel > 4096)
        return;
    cm_tensor *c = NULL;
    if (cm_tensor_create(
            device, &(cm_tensor_desc){.dtype = info.dtype, .ndim = info.ndim, .shape = info.shape},
            &c) != CM_OK)
        return; /* float64 where the device lacks it, or no memory */
    int64_t idx[CM_MAX_NDIM] = {0};
    cm_status s = cm_copy(t, c, NULL);
    if (s != CM_OK && cm_last_error()[0] == '\0')
        __builtin_trap();
    for (int64_t n = 0; s == CM_OK && n < info.numel; ++n) {
        if (!same_element(t, c, idx, info.dtype, dinfo.size))
            __builtin_trap(); /* the copy differs from the view */
        next_index(&info, idx);
    }
    const double zero = 0.0;
    s = cm_fill(t, CM_FLOAT64, &zero, NULL);
    if (s != CM_OK && cm_last_error()[0] == '\0')
        __builtin_trap();
    memset(idx, 0, sizeof idx);
    for (int64_t n = 0; s == CM_OK && n < info.numel; ++n) {
        uint8_t v[8];
        if (cm_tensor_get_element(t, idx, info.dtype, v) != CM_OK)
            __builtin_trap();
        for (size_t i = 0; i < dinfo.size; ++i)
            if (v[i] != 0)
                __builtin_trap(); /* zero is all-zero bits in every dtype */
        next_index(&info, idx);
    }
    cm_tensor_release(c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_input in = {data, size};
    cm_device *device = NULL;
    if (cm_device_open(CM_DEVICE_CPU, 0, &device) != CM_OK)
        __builtin_trap();
    cm_buffer *buffer = NULL;
    size_t bytes = fuzz_u16(&in) % 4097;
    if (cm_buffer_create(device, &(cm_buffer_desc){.size = bytes}, &buffer) != CM_OK)
        __builtin_trap();
    cm_buffer_info binfo;
    cm_buffer_get_info(buffer, &binfo);
    memset(binfo.host, 0x5a, bytes);

    cm_tensor_desc desc = {.dtype = (cm_dtype)(fuzz_u8(&in) % (CM_DTYPE_COUNT + 1)),
                           .ndim = (int32_t)(fuzz_u8(&in) % (CM_MAX_NDIM + 3)) - 1};
    int64_t shape[CM_MAX_NDIM + 2], strides[CM_MAX_NDIM + 2];
    for (int k = 0; k < CM_MAX_NDIM + 2; ++k) {
        shape[k] = fuzz_small_i64(&in);
        strides[k] = fuzz_small_i64(&in);
    }
    desc.shape = fuzz_u8(&in) % 8 ? shape : NULL;
    desc.strides = fuzz_u8(&in) % 4 ? strides : NULL;
    desc.byte_offset = fuzz_u8(&in) % 8 ? fuzz_u16(&in) : fuzz_u64(&in);
    desc.flags = fuzz_u8(&in) % 16 ? 0 : fuzz_u8(&in);

    cm_tensor *t = NULL;
    cm_status s = cm_tensor_from_buffer(buffer, &desc, &t);
    if (s != CM_OK && (t != NULL || cm_last_error()[0] == '\0'))
        __builtin_trap(); /* failures leave *out NULL and say why */
    while (t != NULL && in.size > 0) {
        touch_all(t);
        probe(&in, t);
        cm_tensor *next = NULL;
        int32_t axis = (int32_t)fuzz_u8(&in) - 128;
        int32_t axes[CM_MAX_NDIM];
        for (int k = 0; k < CM_MAX_NDIM; ++k)
            axes[k] = (int32_t)(fuzz_u8(&in) % 20) - 2;
        switch (fuzz_u8(&in) % 9) {
        case 0:
            s = cm_tensor_slice(t, axis, fuzz_i64(&in), fuzz_i64(&in), fuzz_i64(&in), &next);
            break;
        case 1: s = cm_tensor_select(t, axis, fuzz_small_i64(&in), &next); break;
        case 2: s = cm_tensor_permute(t, axes, &next); break;
        case 3: s = cm_tensor_transpose(t, axis, (int32_t)fuzz_u8(&in) - 128, &next); break;
        case 4: s = cm_tensor_reshape(t, (int32_t)(fuzz_u8(&in) % 18) - 1, shape, &next); break;
        case 5:
            s = cm_tensor_broadcast_to(t, (int32_t)(fuzz_u8(&in) % 18) - 1, shape, &next);
            break;
        case 6: s = cm_tensor_squeeze(t, axis, &next); break;
        case 7: s = cm_tensor_unsqueeze(t, axis, &next); break;
        default: s = cm_tensor_read_only(t, &next); break;
        }
        if ((s == CM_OK) != (next != NULL))
            __builtin_trap();
        if (next == NULL)
            continue;
        cm_tensor_release(t);
        t = next;
    }
    if (t != NULL) {
        touch_all(t);
        run_ops(device, t);
    }
    cm_tensor_release(t);
    cm_buffer_release(buffer);
    cm_device_release(device);
    return 0;
}
