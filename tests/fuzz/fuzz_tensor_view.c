/* SPDX-License-Identifier: MIT */
/* Fuzz target: tensor layouts and view chains built from arbitrary bytes.
 * Oracle: every view the library accepts lies inside its buffer, which is
 * allocated to the exact size, so reading every element through the public
 * API must stay in bounds (ASan checks), and refused views report an error
 * message. */
#include <cmetal/cmetal.h>

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "fuzz_input.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void touch_all(const cm_tensor *t) {
    cm_tensor_info info;
    if (cm_tensor_get_info(t, &info) != CM_OK || info.numel > 4096)
        return;
    int64_t idx[CM_MAX_NDIM] = {0};
    uint8_t value[8];
    for (int64_t n = 0; n < info.numel; ++n) {
        if (cm_tensor_get_element(t, idx, info.dtype, value) != CM_OK)
            __builtin_trap(); /* an accepted view must be readable */
        for (int32_t k = info.ndim - 1; k >= 0; --k) {
            if (++idx[k] < info.shape[k])
                break;
            idx[k] = 0;
        }
    }
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
        cm_tensor *next = NULL;
        int32_t axis = (int32_t)fuzz_u8(&in) - 128;
        int32_t axes[CM_MAX_NDIM];
        for (int k = 0; k < CM_MAX_NDIM; ++k)
            axes[k] = (int32_t)(fuzz_u8(&in) % 20) - 2;
        switch (fuzz_u8(&in) % 9) {
        case 0: s = cm_tensor_slice(t, axis, fuzz_i64(&in), fuzz_i64(&in), fuzz_i64(&in), &next); break;
        case 1: s = cm_tensor_select(t, axis, fuzz_small_i64(&in), &next); break;
        case 2: s = cm_tensor_permute(t, axes, &next); break;
        case 3: s = cm_tensor_transpose(t, axis, (int32_t)fuzz_u8(&in) - 128, &next); break;
        case 4: s = cm_tensor_reshape(t, (int32_t)(fuzz_u8(&in) % 18) - 1, shape, &next); break;
        case 5: s = cm_tensor_broadcast_to(t, (int32_t)(fuzz_u8(&in) % 18) - 1, shape, &next); break;
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
    if (t != NULL)
        touch_all(t);
    cm_tensor_release(t);
    cm_buffer_release(buffer);
    cm_device_release(device);
    return 0;
}
