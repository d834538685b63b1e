/* SPDX-License-Identifier: MIT */
/* Fuzz target: cm_copy between two views built from arbitrary bytes, on the
 * CPU device (every copy path: coalesced memcpy, tiled transposes of every
 * element size, the strided loop). Oracle: the destination buffer equals a
 * byte-by-byte reference (elements written where the view says, every
 * other byte unchanged), and ASan checks every access. Refused views and
 * copies must say why. */
#include <cmetal/cmetal.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_input.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_BYTES 65536
#define MAX_ELEMENTS 65536

static const cm_dtype dtypes[4] = {CM_UINT8, CM_INT16, CM_FLOAT32, CM_FLOAT64};

/* Mostly small extents, sometimes one past a transpose tile's edge. */
static int64_t extent(fuzz_input *in) {
    uint8_t b = fuzz_u8(in);
    return b < 200 ? b % 12 : (int64_t)(fuzz_u16(in) % 600);
}

static cm_tensor *view(fuzz_input *in, cm_buffer *buffer, cm_dtype dtype, int32_t ndim,
                       const int64_t *shape) {
    int64_t strides[4];
    const bool compact = fuzz_u8(in) % 4 == 0;
    for (int32_t k = 0; k < ndim; ++k)
        strides[k] = (int64_t)(fuzz_u8(in) % 17) - 8;
    if (!compact && ndim >= 2 && fuzz_u8(in) % 2) { /* a transpose of a compact layout */
        strides[ndim - 2] = 1;
        strides[ndim - 1] = shape[ndim - 2];
    }
    cm_tensor_desc desc = {.dtype = dtype,
                           .ndim = ndim,
                           .shape = shape,
                           .strides = compact ? NULL : strides,
                           .byte_offset = fuzz_u16(in) % MAX_BYTES};
    cm_tensor *t = NULL;
    cm_status s = cm_tensor_from_buffer(buffer, &desc, &t);
    if (s != CM_OK && (t != NULL || cm_last_error()[0] == '\0'))
        __builtin_trap();
    return t;
}

/* Byte offset of element `i` (row-major order) of a view. */
static int64_t offset_of(const cm_tensor_info *v, int64_t item, int64_t i) {
    int64_t off = 0;
    for (int32_t k = v->ndim - 1; k >= 0; --k) {
        off += (i % v->shape[k]) * v->strides[k];
        i /= v->shape[k];
    }
    return (int64_t)v->byte_offset + off * item;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_input in = {data, size};
    cm_device *device = NULL;
    if (cm_device_open(CM_DEVICE_CPU, 0, &device) != CM_OK)
        __builtin_trap();
    const size_t bytes = fuzz_u16(&in) % MAX_BYTES + 1;
    const bool same_buffer = fuzz_u8(&in) % 4 == 0;
    cm_buffer *sbuf = NULL, *dbuf = NULL;
    if (cm_buffer_create(device, &(cm_buffer_desc){.size = bytes}, &sbuf) != CM_OK)
        __builtin_trap();
    if (same_buffer)
        cm_buffer_retain(dbuf = sbuf);
    else if (cm_buffer_create(device, &(cm_buffer_desc){.size = bytes}, &dbuf) != CM_OK)
        __builtin_trap();
    cm_buffer_info si, di;
    cm_buffer_get_info(sbuf, &si);
    cm_buffer_get_info(dbuf, &di);
    for (size_t i = 0; i < bytes; ++i) { /* no short period: elements differ */
        uint32_t x = (uint32_t)i * 0x9e3779b1u;
        ((uint8_t *)si.host)[i] = (uint8_t)((x ^ (x >> 15)) >> 8);
    }
    if (!same_buffer)
        memset(di.host, 0xee, bytes);

    const cm_dtype dtype = dtypes[fuzz_u8(&in) % 4];
    const int32_t ndim = fuzz_u8(&in) % 5;
    int64_t shape[4];
    int64_t numel = 1;
    for (int32_t k = 0; k < ndim; ++k) {
        shape[k] = extent(&in);
        numel *= shape[k];
        if (numel > MAX_ELEMENTS)
            shape[k] = numel = 0;
    }
    cm_tensor *src = view(&in, sbuf, dtype, ndim, shape);
    cm_tensor *dst = view(&in, dbuf, dtype, ndim, shape);
    if (src != NULL && dst != NULL) {
        cm_tensor_info sv, dv;
        cm_tensor_get_info(src, &sv);
        cm_tensor_get_info(dst, &dv);
        uint8_t *before = malloc(2 * bytes);
        if (before == NULL)
            __builtin_trap();
        uint8_t *want = before + bytes;
        memcpy(before, si.host, bytes);
        memcpy(want, di.host, bytes);
        /* A destination that writes one address twice has no single
         * expected result: then only ASan judges. */
        bool unique = true;
        uint8_t *hit = calloc(bytes, 1);
        cm_dtype_info info;
        cm_dtype_get_info(dtype, &info);
        const int64_t item = (int64_t)info.size;
        for (int64_t i = 0; hit != NULL && i < numel; ++i) {
            const int64_t d = offset_of(&dv, item, i), s = offset_of(&sv, item, i);
            unique = unique && !hit[d];
            hit[d] = 1;
            memcpy(want + d, before + s, (size_t)item);
        }
        free(hit);
        cm_status st = cm_copy(src, dst, NULL);
        if (st != CM_OK && cm_last_error()[0] == '\0')
            __builtin_trap();
        if (st == CM_OK && unique && memcmp(di.host, want, bytes) != 0)
            __builtin_trap(); /* a wrong or stray byte */
        free(before);
    }
    cm_tensor_release(src);
    cm_tensor_release(dst);
    cm_buffer_release(sbuf);
    cm_buffer_release(dbuf);
    cm_device_release(device);
    return 0;
}
