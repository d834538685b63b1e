/* SPDX-License-Identifier: MIT */
/* Fuzz target: DLPack imports of arbitrary managed tensors, legacy and
 * versioned. Oracle:
 *   - a failure leaves *out NULL, says why, and calls the deleter only for
 *     a versioned major-version mismatch;
 *   - a success calls the deleter exactly once, at the last release (right
 *     away for a copy), and the wrapped buffer is exactly the byte range a
 *     brute-force walk over every element reaches;
 *   - when that range lies in the producer's allocation, reading every
 *     element through cmetal stays inside it (ASan checks);
 *   - kDLMetal tensors (where a Metal framework is loaded: softmetal via
 *     CMETAL_METAL_FRAMEWORK) are over real MTLBuffers of every storage
 *     mode: an import succeeds only when the view lies inside the
 *     MTLBuffer, and wraps that MTLBuffer itself unless it copies. */
#include <cmetal/cmetal.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_input.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define ARENA 4096

static int g_deleted;
static void count_legacy(DLManagedTensor *self) {
    (void)self;
    g_deleted++;
}
static void count_versioned(DLManagedTensorVersioned *self) {
    (void)self;
    g_deleted++;
}

/* The lowest and one-past-highest byte (relative to data) reached, by
 * walking every element; false when the layout is not small and valid. */
static bool reference_extent(const DLTensor *t, size_t itemsize, int64_t *lo, int64_t *hi,
                             int64_t *numel) {
    if (t->ndim < 0 || t->ndim > CM_MAX_NDIM || (t->ndim > 0 && t->shape == NULL))
        return false;
    int64_t n = 1;
    for (int k = 0; k < t->ndim; ++k) {
        if (t->shape[k] < 0 || t->shape[k] > 4096)
            return false;
        n *= t->shape[k];
        if (n > 4096)
            return false;
    }
    int64_t strides[CM_MAX_NDIM];
    int64_t s = 1;
    for (int k = t->ndim - 1; k >= 0; --k) {
        strides[k] = t->strides != NULL ? t->strides[k] : s;
        if (strides[k] > (1 << 20) || strides[k] < -(1 << 20))
            return false;
        if (__builtin_mul_overflow(s, t->shape[k] > 0 ? t->shape[k] : 1, &s))
            return false;
    }
    if (t->byte_offset > (1u << 20))
        return false;
    *numel = n;
    *lo = INT64_MAX;
    *hi = INT64_MIN;
    int64_t idx[CM_MAX_NDIM] = {0};
    for (int64_t e = 0; e < n; ++e) {
        int64_t off = (int64_t)t->byte_offset;
        for (int k = 0; k < t->ndim; ++k)
            off += idx[k] * strides[k] * (int64_t)itemsize;
        if (off < *lo)
            *lo = off;
        if (off + (int64_t)itemsize > *hi)
            *hi = off + (int64_t)itemsize;
        for (int k = t->ndim - 1; k >= 0; --k) {
            if (++idx[k] < t->shape[k])
                break;
            idx[k] = 0;
        }
    }
    return true;
}

/* The Metal device the kDLMetal inputs live on, opened once; NULL when
 * there is no Metal framework to load. */
static cm_device *metal_device(void) {
    static cm_device *device;
    static bool tried;
    if (!tried) {
        tried = true;
        if (getenv("CMETAL_METAL_FRAMEWORK") != NULL &&
            cm_device_open(CM_DEVICE_METAL, 0, &device) != CM_OK)
            device = NULL;
    }
    return device;
}

static void touch_all(const cm_tensor *t) {
    cm_tensor_info info;
    if (cm_tensor_get_info(t, &info) != CM_OK)
        __builtin_trap();
    int64_t idx[CM_MAX_NDIM] = {0};
    uint8_t value[8];
    for (int64_t n = 0; n < info.numel; ++n) {
        if (cm_tensor_get_element(t, idx, info.dtype, value) != CM_OK)
            __builtin_trap();
        for (int32_t k = info.ndim - 1; k >= 0; --k) {
            if (++idx[k] < info.shape[k])
                break;
            idx[k] = 0;
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_input in = {data, size};
    uint8_t *arena = malloc(ARENA);
    if (arena == NULL)
        return 0;
    memset(arena, 0x3c, ARENA);

    const bool versioned = fuzz_u8(&in) & 1;
    int64_t shape[CM_MAX_NDIM + 2], strides[CM_MAX_NDIM + 2];
    DLTensor t;
    memset(&t, 0, sizeof t);
    t.ndim = (int)(fuzz_u8(&in) % (CM_MAX_NDIM + 3)) - 1;
    for (int k = 0; k < CM_MAX_NDIM + 2; ++k) {
        shape[k] = fuzz_small_i64(&in);
        strides[k] = fuzz_small_i64(&in);
    }
    t.shape = fuzz_u8(&in) % 16 ? shape : NULL;
    t.strides = fuzz_u8(&in) % 3 ? strides : NULL;
    static const uint8_t bits[] = {8, 16, 32, 64, 0, 1, 4, 128};
    const uint8_t pick = fuzz_u8(&in);
    t.dtype.code = pick < 200 ? (uint8_t)(pick % 7) : pick;
    t.dtype.bits = bits[fuzz_u8(&in) % 8];
    t.dtype.lanes = fuzz_u8(&in) % 16 ? 1 : fuzz_u16(&in);
    const uint8_t dev = fuzz_u8(&in);
    t.device.device_type = (DLDeviceType)(dev < 200 ? 1 : dev % 24);
    /* kDLMetal data must be a real id<MTLBuffer>: one of mtl_length bytes. */
    cm_buffer *mtl = NULL;
    size_t mtl_length = 0;
    if (t.device.device_type == kDLMetal && metal_device() != NULL) {
        static const cm_storage_mode modes[] = {CM_STORAGE_SHARED, CM_STORAGE_MANAGED,
                                                CM_STORAGE_PRIVATE};
        const cm_storage_mode mode = modes[fuzz_u8(&in) % 3];
        mtl_length = fuzz_u16(&in) % 1024 + 1;
        if (cm_buffer_create(metal_device(), &(cm_buffer_desc){.size = mtl_length, .storage = mode},
                             &mtl) != CM_OK)
            __builtin_trap();
    } else if (t.device.device_type == kDLMetal) {
        t.device.device_type = kDLCUDA;
    }
    t.device.device_id = fuzz_u8(&in) % 16 ? 0 : (int32_t)fuzz_u16(&in) - 2;
    const uint8_t where = fuzz_u8(&in);
    const bool in_arena = where < 224 && mtl == NULL;
    cm_buffer_info mtl_info = {0};
    if (mtl != NULL && cm_buffer_get_info(mtl, &mtl_info) != CM_OK)
        __builtin_trap();
    t.data = mtl != NULL   ? (where < 240 || where >= 248 ? mtl_info.native : NULL)
             : in_arena    ? arena + fuzz_u16(&in) % ARENA
             : where < 240 ? NULL
                           : (void *)(uintptr_t)fuzz_u64(&in);
    t.byte_offset = fuzz_u8(&in) % 8 ? fuzz_u16(&in) % 512 : fuzz_u64(&in);
    const uint8_t policy = fuzz_u8(&in);

    DLManagedTensor legacy = {.dl_tensor = t, .deleter = count_legacy};
    DLManagedTensorVersioned ver = {.version = {fuzz_u8(&in) % 16 ? 1u : fuzz_u8(&in), 0},
                                    .deleter = count_versioned,
                                    .flags = fuzz_u8(&in) % 4 ? 0 : fuzz_u8(&in),
                                    .dl_tensor = t};

    /* Where the producer's memory is known, a copy may read it. */
    cm_dtype dtype;
    cm_dtype_info dinfo;
    int64_t lo = 0, hi = 0, numel = 0;
    bool known = t.dtype.lanes == 1 &&
                 cm_dtype_from_dlpack(t.dtype.code, t.dtype.bits, 1, &dtype) == CM_OK &&
                 cm_dtype_get_info(dtype, &dinfo) == CM_OK &&
                 reference_extent(&t, dinfo.size, &lo, &hi, &numel);
    const uintptr_t base = (uintptr_t)t.data;
    const bool readable = known && in_arena && t.data != NULL &&
                          (numel == 0 || ((intptr_t)(base - (uintptr_t)arena) + lo >= 0 &&
                                          (intptr_t)(base - (uintptr_t)arena) + hi <= ARENA));
    /* A kDLMetal view is readable when it lies inside the MTLBuffer. */
    const bool metal_inside = mtl != NULL && known && t.data != NULL &&
                              (numel == 0 || (lo >= 0 && hi <= (int64_t)mtl_length));
    cm_dlpack_import_desc desc = {
        .copy = (readable || metal_inside) && policy % 4 == 0 ? CM_COPY_ALWAYS : CM_COPY_IF_NEEDED,
        .read_only = policy & 4,
        .device = mtl != NULL && policy & 8 ? metal_device() : NULL};

    g_deleted = 0;
    cm_tensor *out = NULL;
    cm_status s = versioned ? cm_dlpack_import_versioned(&ver, &desc, &out)
                            : cm_dlpack_import(&legacy, &desc, &out);
    if (s != CM_OK) {
        const int expect = versioned && ver.version.major != 1 ? 1 : 0;
        if (out != NULL || cm_last_error()[0] == '\0' || g_deleted != expect)
            __builtin_trap();
        if (mtl != NULL)
            cm_buffer_release(mtl);
        free(arena);
        return 0;
    }
    if (out == NULL || g_deleted != (desc.copy == CM_COPY_ALWAYS ? 1 : 0))
        __builtin_trap();
    cm_tensor_info info;
    cm_buffer_info binfo;
    if (cm_tensor_get_info(out, &info) != CM_OK || cm_buffer_get_info(info.buffer, &binfo) != CM_OK)
        __builtin_trap();
    if (mtl == NULL && known && numel > 0 && desc.copy != CM_COPY_ALWAYS &&
        ((uintptr_t)binfo.host != base + (uintptr_t)lo || binfo.size != (size_t)(hi - lo)))
        __builtin_trap(); /* the wrap is exactly the bytes the view reaches */
    if (readable)
        touch_all(out);
    if (mtl != NULL) {
        /* Only a view inside the MTLBuffer imports; in place, it is that
         * MTLBuffer. */
        if (known && !metal_inside)
            __builtin_trap();
        if (numel > 0 && desc.copy != CM_COPY_ALWAYS && binfo.native != mtl_info.native)
            __builtin_trap();
        if (metal_inside && binfo.storage != CM_STORAGE_PRIVATE)
            touch_all(out);
    }
    cm_tensor_release(out);
    if (g_deleted != 1)
        __builtin_trap();
    if (mtl != NULL)
        cm_buffer_release(mtl);
    free(arena);
    return 0;
}
