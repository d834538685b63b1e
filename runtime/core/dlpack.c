/* SPDX-License-Identifier: MIT */
/* DLPack export and import (legacy and versioned managed tensors). */
#include "backend.h"

#include <cmetal/dlpack.h>
#include <cmetal/ops.h>

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ shared */

/* The DLDeviceType's name, or NULL for a value DLPack does not define. */
static const char *cm__dl_device_name(int32_t type) {
    switch (type) {
    case 1: return "kDLCPU";
    case 2: return "kDLCUDA";
    case 3: return "kDLCUDAHost";
    case 4: return "kDLOpenCL";
    case 7: return "kDLVulkan";
    case 8: return "kDLMetal";
    case 9: return "kDLVPI";
    case 10: return "kDLROCM";
    case 11: return "kDLROCMHost";
    case 12: return "kDLExtDev";
    case 13: return "kDLCUDAManaged";
    case 14: return "kDLOneAPI";
    case 15: return "kDLWebGPU";
    case 16: return "kDLHexagon";
    case 17: return "kDLMAIA";
    case 18: return "kDLTrn";
    default: return NULL;
    }
}

/* Highest DLDataTypeCode the spec defines (kDLFloat4_e2m1fn). */
#define CM__DL_MAX_DTYPE_CODE 17

/* Copies the elements of a strided host view (element 0 at `src`) into
 * compact row-major memory at `dst`. The layout was validated, so every
 * offset stays inside the view's extent. */
static void cm__copy_to_compact(uint8_t *dst, const uint8_t *src, size_t itemsize, int32_t ndim,
                                const int64_t *shape, const int64_t *strides, int64_t numel) {
    if (numel == 0)
        return;
    if (ndim == 0) {
        memcpy(dst, src, itemsize);
        return;
    }
    const int64_t isz = (int64_t)itemsize;
    const int32_t last = ndim - 1;
    const int64_t inner = shape[last];
    int64_t index[CM_MAX_NDIM] = {0};
    int64_t row = 0; /* byte offset of the current row's first element */
    for (;;) {
        if (strides[last] == 1) {
            memcpy(dst, src + row, (size_t)(inner * isz));
            dst += inner * isz;
        } else {
            for (int64_t i = 0; i < inner; ++i) {
                memcpy(dst, src + row + i * strides[last] * isz, itemsize);
                dst += itemsize;
            }
        }
        int32_t k = last - 1;
        for (; k >= 0; --k) {
            if (++index[k] < shape[k]) {
                row += strides[k] * isz;
                break;
            }
            row -= (shape[k] - 1) * strides[k] * isz;
            index[k] = 0;
        }
        if (k < 0)
            return;
    }
}

/* A new compact row-major tensor on `device` holding a copy of the strided
 * host view at `src`; its buffer is flagged CM_BUFFER_COPIED. */
static cm_status cm__copy_new(const char *func, cm_device *device, const uint8_t *src,
                              cm_dtype dtype, int32_t ndim, const int64_t *shape,
                              const int64_t *strides, uint32_t flags, cm_tensor **out) {
    const size_t itemsize = cm__dtype(dtype)->size;
    int64_t numel;
    CM__TRY(cm__shape_compact(func, ndim, shape, itemsize, NULL, &numel));
    cm_buffer_desc bd = {.size = (size_t)numel * itemsize, .storage = CM_STORAGE_SHARED};
    cm_buffer *buffer = NULL;
    cm_status status = cm_buffer_create(device, &bd, &buffer);
    if (status == CM_ERR_OUT_OF_MEMORY)
        return cm__fail_as(func, status, "no memory for a %zu-byte copy", bd.size);
    if (status != CM_OK)
        return status;
    cm__copy_to_compact(buffer->host, src, itemsize, ndim, shape, strides, numel);
    buffer->flags |= CM_BUFFER_COPIED;
    status = cm__tensor_make(func, buffer, dtype, ndim, shape, NULL, 0, flags, out);
    cm_buffer_release(buffer);
    return status;
}

/* The CPU device for a new host copy: `preferred` when it is one, else a
 * newly opened one. Returns +1. */
static cm_status cm__dlpack_cpu_device(const char *func, cm_device *preferred, cm_device **out) {
    if (preferred != NULL && preferred->backend->type == CM_DEVICE_CPU) {
        cm_device_retain(preferred);
        *out = preferred;
        return CM_OK;
    }
    cm_status status = cm_device_open(CM_DEVICE_CPU, 0, out);
    if (status == CM_ERR_OUT_OF_MEMORY)
        return cm__fail_as(func, status, "no memory to open the CPU device");
    return status;
}

/* ------------------------------------------------------------ export */

/* One allocation per export: the managed tensor (first, so `self` is the
 * block), the tensor it keeps alive, and the arrays its DLTensor points to. */
typedef struct cm__dlpack_export {
    union {
        DLManagedTensor legacy;
        DLManagedTensorVersioned versioned;
    } managed;
    cm_tensor *tensor; /* retained */
    DLDataType dtype;  /* as exported, for cm__dl_own_export */
    int64_t shape[CM_MAX_NDIM];
    int64_t strides[CM_MAX_NDIM];
} cm__dlpack_export;

/* One spare export block per thread, under the default allocator only: a
 * block that an export's deleter or an import of cmetal's own export frees
 * is kept for the thread's next export, so that a round trip on one thread
 * allocates nothing after the first. A thread's spare is freed when the
 * thread exits (a pthread key's destructor); the main thread's stays
 * reachable until the process ends, and is freed if the library is
 * unloaded (dlclose). Under a cm_set_allocator allocator every export
 * allocates its block and every deleter frees it. */
#define CM__TLS_IE __attribute__((tls_model("initial-exec"))) /* no __tls_get_addr call */
static _Thread_local cm__dlpack_export *cm__dl_spare CM__TLS_IE;
static _Thread_local bool cm__dl_spare_keyed CM__TLS_IE; /* the key's destructor runs here */
static pthread_once_t cm__dl_key_once = PTHREAD_ONCE_INIT;
static pthread_key_t cm__dl_key;
static bool cm__dl_key_made;

static void cm__dl_spare_free(void *marker) {
    (void)marker;
    cm__dlpack_export *e = cm__dl_spare;
    cm__dl_spare = NULL;
    cm__dl_spare_keyed = false; /* a later destructor's round trip keys it again */
    free(e);                    /* made by the default allocator: malloc */
}

static void cm__dl_key_make(void) {
    cm__dl_key_made = pthread_key_create(&cm__dl_key, cm__dl_spare_free) == 0;
}

__attribute__((destructor)) static void cm__dl_unload(void) {
    if (cm__dl_key_made)
        pthread_key_delete(cm__dl_key);
    cm__dl_spare_free(NULL);
}

static cm__dlpack_export *cm__dl_block_take(void) {
    cm__dlpack_export *e = cm__dl_spare;
    if (e != NULL && cm__allocator_is_default()) {
        cm__dl_spare = NULL;
        return e;
    }
    return cm__alloc_raw(sizeof *e, _Alignof(cm__dlpack_export));
}

static void cm__dl_block_give(cm__dlpack_export *e) {
    if (cm__dl_spare == NULL && cm__allocator_is_default()) {
        if (!cm__dl_spare_keyed) { /* once per thread: free the spare at its exit */
            pthread_once(&cm__dl_key_once, cm__dl_key_make);
            cm__dl_spare_keyed =
                cm__dl_key_made && pthread_setspecific(cm__dl_key, &cm__dl_key_made) == 0;
        }
        if (cm__dl_spare_keyed) {
            cm__dl_spare = e;
            return;
        }
    }
    cm__free(e);
}

static void cm__dlpack_export_free(cm__dlpack_export *e) {
    cm_tensor *tensor = e->tensor;
    cm__dl_block_give(e);
    cm_tensor_release(tensor);
}

static void cm__dlpack_delete_legacy(DLManagedTensor *self) {
    if (self != NULL)
        cm__dlpack_export_free(self->manager_ctx);
}

static void cm__dlpack_delete_versioned(DLManagedTensorVersioned *self) {
    if (self != NULL)
        cm__dlpack_export_free(self->manager_ctx);
}

/* Resolves and checks the target device of an export: kDLCPU for tensors
 * the host can reach (directly or through a copy), kDLMetal for tensors on
 * a Metal device. */
static cm_status cm__export_target(const cm_tensor *tensor, const cm_dlpack_export_desc *d,
                                   int32_t *out) {
    static const char func[] = "cm_dlpack_export";
    const cm_device_type own = tensor->buffer->device->backend->type;
    int32_t target = d->device_type;
    if (target == 0)
        target = own == CM_DEVICE_METAL ? (int32_t)kDLMetal : (int32_t)kDLCPU;
    if (target == kDLCPU && d->device_id == 0) { /* the common case, checked first */
        *out = target;
        return CM_OK;
    }
    const char *name = cm__dl_device_name(target);
    if (name == NULL)
        return cm__fail_as(func, CM_ERR_INVALID_ARGUMENT,
                           "desc->device_type = %d is not a DLDeviceType", target);
    if (target == kDLMetal && own != CM_DEVICE_METAL)
        return cm__fail_as(func, CM_ERR_UNSUPPORTED,
                           "desc->device_type = %d (kDLMetal) but the tensor is on the %s "
                           "device; copy it to a Metal device first",
                           target, cm_device_type_name(own));
    if (target != kDLCPU && target != kDLMetal)
        return cm__fail_as(func, CM_ERR_UNSUPPORTED,
                           "desc->device_type = %d (%s): cmetal exports only for kDLCPU and "
                           "kDLMetal",
                           target, name);
    if (target == kDLCPU && d->device_id != 0)
        return cm__fail_as(func, CM_ERR_INVALID_ARGUMENT, "desc->device_id = %d must be 0 for %s",
                           d->device_id, name);
    const uint32_t index = tensor->buffer->device->index;
    if (target == kDLMetal && d->device_id != 0 && (uint32_t)d->device_id != index)
        return cm__fail_as(func, CM_ERR_INVALID_ARGUMENT,
                           "desc->device_id = %d: the tensor is on %s device %u; cmetal does "
                           "not move tensors between devices",
                           d->device_id, name, index);
    *out = target;
    return CM_OK;
}

/* A compact copy of `tensor` on its own device, made by the device and
 * finished before returning (for kDLMetal exports that must copy). */
static cm_status cm__copy_on_device(const char *func, const cm_tensor *tensor, uint32_t flags,
                                    cm_tensor **out) {
    cm_device *device = tensor->buffer->device;
    cm_tensor_desc td = {.dtype = tensor->dtype,
                         .ndim = tensor->ndim,
                         .shape = tensor->shape,
                         .storage = tensor->buffer->storage};
    cm_tensor *copy = NULL;
    CM__TRY(cm_tensor_create(device, &td, &copy));
    cm_status status = cm_copy(tensor, copy, NULL);
    if (status == CM_OK)
        status = cm_device_synchronize(device);
    if (status != CM_OK) {
        cm_tensor_release(copy);
        return cm__fail_as(func, status, "the device copy failed: %s", cm_last_error());
    }
    copy->buffer->flags |= CM_BUFFER_COPIED;
    copy->flags |= flags;
    *out = copy;
    return CM_OK;
}

/* A compact host copy of a tensor whose storage the host cannot see
 * (private Metal storage): the bytes it reaches come through a staging
 * read, then are compacted. */
static cm_status cm__copy_to_host(const char *func, const cm_tensor *tensor, cm_tensor **out) {
    cm_tensor_info info;
    CM__TRY(cm_tensor_get_info(tensor, &info));
    const size_t size = (size_t)(info.extent_end - info.extent_begin);
    uint8_t *staging = cm__alloc_raw(size, 64);
    if (staging == NULL)
        return cm__fail_as(func, CM_ERR_OUT_OF_MEMORY, "no memory for a %zu-byte staging copy",
                           size);
    cm_status status = cm_buffer_read(tensor->buffer, (size_t)info.extent_begin, staging, size);
    cm_device *cpu = NULL;
    if (status == CM_OK)
        status = cm__dlpack_cpu_device(func, NULL, &cpu);
    if (status == CM_OK)
        status = cm__copy_new(func, cpu, staging + (tensor->byte_offset - info.extent_begin),
                              tensor->dtype, tensor->ndim, tensor->shape, tensor->strides, 0, out);
    cm_device_release(cpu);
    cm__free(staging);
    return status;
}

cm_status cm_dlpack_export(const cm_tensor *tensor, const cm_dlpack_export_desc *desc,
                           cm_dlpack_managed *out) {
    CM__REQUIRE_NONNULL(out);
    memset(out, 0, sizeof *out);
    CM__REQUIRE_NONNULL(tensor);
    const cm_dlpack_export_desc d = desc != NULL ? *desc : (cm_dlpack_export_desc){0};
    CM__REQUIRE_ARG(d.copy >= CM_COPY_IF_NEEDED && d.copy <= CM_COPY_ALWAYS,
                    "desc->copy = %d is not a cm_copy_policy", (int)d.copy);
    int32_t target = kDLCPU;
    CM__TRY(cm__export_target(tensor, &d, &target));

    const bool versioned = d.max_version.major >= 1;
    const bool read_only = (tensor->flags & CM_TENSOR_READ_ONLY) || d.read_only;
    bool copy = d.copy == CM_COPY_ALWAYS;
    if (read_only && !versioned && !copy) {
        if (d.copy == CM_COPY_NEVER)
            return cm__fail(CM_ERR_READ_ONLY,
                            "the %s is read-only and a legacy DLManagedTensor (max_version "
                            "%u.%u) cannot say so; ask for max_version 1.x or allow a copy",
                            d.read_only ? "export request" : "tensor", d.max_version.major,
                            d.max_version.minor);
        copy = true;
    }

    cm_buffer *b = tensor->buffer;
    const cm__backend *backend = b->device->backend;
    if (target == kDLCPU && b->host == NULL) {
        if (d.copy == CM_COPY_NEVER)
            return cm__fail(CM_ERR_COPY_REQUIRED,
                            "the tensor's %s storage on the %s device has no host address, so "
                            "a kDLCPU export needs a copy, and desc->copy is CM_COPY_NEVER",
                            cm__storage_mode_name(b->storage), cm_device_type_name(backend->type));
        copy = true;
    }
    /* Pending device work finishes first (unless the caller waits on a
     * fence itself). A copy only reads; a writable export may be written
     * by the consumer, so pending reads finish too. */
    if (backend->buffer_prepare_host != NULL && !(d.no_wait && target == kDLMetal && !copy))
        CM__TRY(backend->buffer_prepare_host(b, !copy && !read_only));
    if (target == kDLMetal && !copy && backend->buffer_publish != NULL)
        backend->buffer_publish(b);

    cm_tensor *source = (cm_tensor *)tensor; /* retained below: a refcount, not a write */
    cm_tensor *copied = NULL;
    if (copy) {
        const uint32_t ro = d.read_only ? CM_TENSOR_READ_ONLY : 0u;
        if (target == kDLMetal) {
            CM__TRY(cm__copy_on_device(__func__, tensor, ro, &copied));
        } else if (b->host == NULL) {
            CM__TRY(cm__copy_to_host(__func__, tensor, &copied));
        } else {
            cm_device *cpu = NULL;
            CM__TRY(cm__dlpack_cpu_device(__func__, b->device, &cpu));
            cm_status status = cm__copy_new(
                __func__, cpu, (const uint8_t *)b->host + tensor->byte_offset, tensor->dtype,
                tensor->ndim, tensor->shape, tensor->strides, 0, &copied);
            cm_device_release(cpu);
            CM__TRY(status);
        }
        source = copied;
    }

    /* Not zeroed: every field a consumer may read is set below. */
    cm__dlpack_export *e = cm__dl_block_take();
    if (e == NULL) {
        cm_tensor_release(copied);
        return cm__fail(CM_ERR_OUT_OF_MEMORY, "no memory for the managed tensor");
    }
    if (copied == NULL)
        cm__ref_retain(&source->ref);
    e->tensor = source;
    const int32_t ndim = source->ndim;
    for (int32_t k = 0; k < ndim; ++k) { /* a loop: ndim is small, memcpy a call */
        e->shape[k] = source->shape[k];
        e->strides[k] = source->strides[k];
    }
    const cm_dtype_info *info = cm__dtype(source->dtype);
    /* Every field is stored once, in place, at the width it is read back
     * with (no struct built aside and copied: loads wider than the stores
     * they follow stall store forwarding, as a round trip reads them at
     * once). */
    DLTensor *dl;
    if (versioned) {
        DLManagedTensorVersioned *m = &e->managed.versioned;
        const uint32_t minor =
            d.max_version.major == 1 && d.max_version.minor < CM_DLPACK_MINOR_VERSION
                ? d.max_version.minor
                : CM_DLPACK_MINOR_VERSION;
        m->version.major = CM_DLPACK_MAJOR_VERSION;
        m->version.minor = minor;
        m->manager_ctx = e;
        m->deleter = cm__dlpack_delete_versioned;
        m->flags = ((copy ? d.read_only : read_only) ? DLPACK_FLAG_BITMASK_READ_ONLY : 0) |
                   (copy ? DLPACK_FLAG_BITMASK_IS_COPIED : 0);
        dl = &m->dl_tensor;
        out->version.major = CM_DLPACK_MAJOR_VERSION;
        out->version.minor = minor;
        out->versioned = m;
    } else {
        DLManagedTensor *m = &e->managed.legacy;
        m->manager_ctx = e;
        m->deleter = cm__dlpack_delete_legacy;
        dl = &m->dl_tensor;
        out->legacy = m;
    }
    /* kDLCPU: data is element 0's host address (NumPy's and PyTorch's CPU
     * convention). kDLMetal: data is the id<MTLBuffer> and byte_offset
     * locates element 0 in it (PyTorch MPS's and MLX's convention). */
    const bool metal = target == kDLMetal;
    if (metal) /* the consumer may keep the MTLBuffer: never reuse it */
        atomic_store(&source->buffer->native_shared, true);
    dl->data =
        metal ? source->buffer->native : (uint8_t *)source->buffer->host + source->byte_offset;
    dl->device.device_type = metal ? kDLMetal : kDLCPU;
    dl->device.device_id = metal ? (int32_t)source->buffer->device->index : 0;
    dl->ndim = ndim;
    dl->dtype.code = info->dl_code;
    dl->dtype.bits = info->dl_bits;
    dl->dtype.lanes = info->dl_lanes;
    dl->shape = e->shape;
    dl->strides = e->strides;
    dl->byte_offset = metal ? source->byte_offset : 0;
    e->dtype.code = info->dl_code;
    e->dtype.bits = info->dl_bits;
    e->dtype.lanes = info->dl_lanes;
    out->copied = copy;
    return CM_OK;
}

/* ------------------------------------------------------------ import */

/* A validated DLTensor, resolved into what a cmetal view needs. */
typedef struct cm__dl_view {
    cm_dtype dtype;
    size_t itemsize;
    int64_t numel;
    int64_t strides[CM_MAX_NDIM]; /* compact ones when dl_tensor.strides is NULL */
    void *base;                   /* lowest byte the view touches */
    size_t size;                  /* bytes from base to one past the highest */
    uint64_t offset;              /* element 0's offset from base */
} cm__dl_view;

/* Where a zero-size tensor with data = NULL points: never dereferenced. */
static max_align_t cm__dl_empty;

static cm_status cm__dl_check_device(const char *func, DLDevice device) {
    const int32_t type = (int32_t)device.device_type;
    if (type == kDLCPU && device.device_id == 0) /* the common case, checked first */
        return CM_OK;
    const char *name = cm__dl_device_name(type);
    if (name == NULL)
        return cm__fail_as(func, CM_ERR_INVALID_ARGUMENT,
                           "dl_tensor.device.device_type = %d is not a DLDeviceType", type);
    if (type != kDLCPU && type != kDLCUDAHost && type != kDLROCMHost && type != kDLMetal)
        return cm__fail_as(func, CM_ERR_UNSUPPORTED,
                           "dl_tensor.device.device_type = %d (%s): cmetal imports host memory "
                           "(kDLCPU, kDLCUDAHost, kDLROCMHost) and Metal buffers (kDLMetal) only",
                           type, name);
    if (type == kDLCPU && device.device_id != 0)
        return cm__fail_as(func, CM_ERR_INVALID_ARGUMENT,
                           "dl_tensor.device.device_id = %d must be 0 for kDLCPU",
                           device.device_id);
    if (device.device_id < 0)
        return cm__fail_as(func, CM_ERR_INVALID_ARGUMENT,
                           "dl_tensor.device.device_id = %d must be >= 0", device.device_id);
    return CM_OK;
}

/* The cmetal dtype of a one-lane DLPack type (the dtype table's encoding,
 * without its search), or CM_DTYPE_INVALID. */
static cm_dtype cm__dl_dtype(uint8_t code, uint8_t bits) {
    enum { DL_INT = 0, DL_UINT = 1, DL_FLOAT = 2, DL_BFLOAT = 4, DL_BOOL = 6 };
    switch (code) {
    case DL_INT:
        return bits == 8    ? CM_INT8
               : bits == 16 ? CM_INT16
               : bits == 32 ? CM_INT32
               : bits == 64 ? CM_INT64
                            : CM_DTYPE_INVALID;
    case DL_UINT:
        return bits == 8    ? CM_UINT8
               : bits == 16 ? CM_UINT16
               : bits == 32 ? CM_UINT32
               : bits == 64 ? CM_UINT64
                            : CM_DTYPE_INVALID;
    case DL_FLOAT:
        return bits == 16   ? CM_FLOAT16
               : bits == 32 ? CM_FLOAT32
               : bits == 64 ? CM_FLOAT64
                            : CM_DTYPE_INVALID;
    case DL_BFLOAT: return bits == 16 ? CM_BFLOAT16 : CM_DTYPE_INVALID;
    case DL_BOOL: return bits == 8 ? CM_BOOL : CM_DTYPE_INVALID;
    default: return CM_DTYPE_INVALID;
    }
}

static cm_status cm__dl_check_dtype(const char *func, DLDataType dt, cm_dtype *out) {
    if (dt.lanes == 1) { /* the common case first: a cmetal dtype */
        *out = cm__dl_dtype(dt.code, dt.bits);
        if (*out != CM_DTYPE_INVALID)
            return CM_OK;
    }
    if (dt.code > CM__DL_MAX_DTYPE_CODE)
        return cm__fail_as(func, CM_ERR_INVALID_ARGUMENT,
                           "dl_tensor.dtype.code = %u is not a DLDataTypeCode", (unsigned)dt.code);
    if (dt.bits == 0)
        return cm__fail_as(func, CM_ERR_INVALID_ARGUMENT, "dl_tensor.dtype.bits = 0 must be > 0");
    if (dt.lanes == 0)
        return cm__fail_as(func, CM_ERR_INVALID_ARGUMENT, "dl_tensor.dtype.lanes = 0 must be > 0");
    if (dt.lanes != 1)
        return cm__fail_as(func, CM_ERR_UNSUPPORTED,
                           "dl_tensor.dtype.lanes = %u: cmetal has no vector element types",
                           (unsigned)dt.lanes);
    *out = cm__dl_dtype(dt.code, dt.bits);
    if (*out == CM_DTYPE_INVALID)
        return cm__fail_as(func, CM_ERR_UNSUPPORTED,
                           "dl_tensor.dtype = (code %u, bits %u, lanes %u) has no cmetal "
                           "element type",
                           (unsigned)dt.code, (unsigned)dt.bits, (unsigned)dt.lanes);
    return CM_OK;
}

/* Validates every field of `t` and computes the byte extent of the view. */
static cm_status cm__dl_check(const char *func, const DLTensor *t, cm__dl_view *v) {
    const int32_t ndim = (int32_t)t->ndim;
    if (ndim < 0)
        return cm__fail_as(func, CM_ERR_INVALID_ARGUMENT, "dl_tensor.ndim = %d must be >= 0", ndim);
    if (ndim > CM_MAX_NDIM)
        return cm__fail_as(func, CM_ERR_UNSUPPORTED,
                           "dl_tensor.ndim = %d exceeds cmetal's maximum of %d dimensions", ndim,
                           CM_MAX_NDIM);
    if (ndim > 0 && t->shape == NULL)
        return cm__fail_as(func, CM_ERR_INVALID_ARGUMENT,
                           "dl_tensor.shape = NULL with dl_tensor.ndim = %d must not be NULL",
                           ndim);
    for (int32_t k = 0; k < ndim; ++k)
        if (t->shape[k] < 0)
            return cm__fail_as(func, CM_ERR_INVALID_ARGUMENT,
                               "dl_tensor.shape[%d] = %" PRId64 " must be >= 0", k, t->shape[k]);
    CM__TRY(cm__dl_check_device(func, t->device));
    CM__TRY(cm__dl_check_dtype(func, t->dtype, &v->dtype));
    v->itemsize = t->dtype.bits / 8u; /* every cmetal dtype: a power of two bytes */
    if ((t->byte_offset & (v->itemsize - 1u)) != 0)
        return cm__fail_as(func, CM_ERR_INVALID_ARGUMENT,
                           "dl_tensor.byte_offset = %" PRIu64
                           " must be a multiple of the %s size %zu",
                           t->byte_offset, cm__dtype(v->dtype)->name, v->itemsize);
    if (t->byte_offset > (uint64_t)INT64_MAX)
        return cm__fail_as(func, CM_ERR_OVERFLOW,
                           "dl_tensor.byte_offset = %" PRIu64 " exceeds INT64_MAX", t->byte_offset);
    if (t->strides == NULL) {
        CM__TRY(cm__shape_compact(func, ndim, t->shape, v->itemsize, v->strides, &v->numel));
    } else {
        /* The count as cm__shape_compact makes it (shapes are >= 0 here),
         * in the loop that copies the strides. */
        int64_t numel = 1;
        bool overflow = false, zero = false;
        for (int32_t k = 0; k < ndim; ++k) {
            v->strides[k] = t->strides[k];
            zero |= t->shape[k] == 0;
            overflow |= cm__mul_overflow_i64(numel, t->shape[k], &numel);
        }
        int64_t bytes;
        if (zero)
            numel = 0;
        else if (overflow || cm__mul_overflow_i64(numel, (int64_t)v->itemsize, &bytes))
            return cm__fail_as(func, CM_ERR_OVERFLOW,
                               "shape has more elements than fit in %zu-byte addressing",
                               sizeof(int64_t));
        v->numel = numel;
    }
    if (t->data == NULL && v->numel > 0)
        return cm__fail_as(func, CM_ERR_INVALID_ARGUMENT,
                           "dl_tensor.data = NULL with %" PRId64
                           " elements: only a zero-size tensor may be NULL",
                           v->numel);
    const uintptr_t data = (uintptr_t)t->data;
    if (v->numel == 0) {
        v->base = t->data != NULL ? (void *)(data + (uintptr_t)t->byte_offset) : &cm__dl_empty;
        v->size = 0;
        v->offset = 0;
        return CM_OK;
    }
    /* Lowest and highest element reached, relative to element 0. */
    const int64_t isz = (int64_t)v->itemsize;
    int64_t lo = 0, hi = 0;
    for (int32_t k = 0; k < ndim; ++k) {
        int64_t reach;
        if (cm__mul_overflow_i64(v->strides[k], t->shape[k] - 1, &reach) ||
            cm__add_overflow_i64(reach < 0 ? lo : hi, reach, reach < 0 ? &lo : &hi))
            return cm__fail_as(func, CM_ERR_OVERFLOW,
                               "dl_tensor.strides[%d] = %" PRId64
                               " with dl_tensor.shape[%d] = %" PRId64
                               " overflows the address range",
                               k, v->strides[k], k, t->shape[k]);
    }
    int64_t lo_bytes, hi_bytes, first, last;
    if (cm__mul_overflow_i64(lo, isz, &lo_bytes) || cm__mul_overflow_i64(hi, isz, &hi_bytes) ||
        cm__add_overflow_i64(hi_bytes, isz, &hi_bytes) ||
        cm__add_overflow_i64((int64_t)t->byte_offset, lo_bytes, &first) ||
        cm__add_overflow_i64((int64_t)t->byte_offset, hi_bytes, &last))
        return cm__fail_as(func, CM_ERR_OVERFLOW,
                           "dl_tensor.strides reach beyond the int64 byte range");
    /* The extent [data + first, data + last) must not wrap the address space;
     * first is negative when negative strides reach before data. */
    if (first < 0 && data < (uint64_t)0 - (uint64_t)first)
        return cm__fail_as(func, CM_ERR_OVERFLOW,
                           "dl_tensor.strides reach %" PRIu64
                           " bytes before dl_tensor.data = %p, below address 0",
                           (uint64_t)0 - (uint64_t)first, t->data);
    if (last > 0 && UINTPTR_MAX - data < (uint64_t)last)
        return cm__fail_as(func, CM_ERR_OVERFLOW,
                           "dl_tensor.data = %p plus %" PRId64 " bytes wraps the address space",
                           t->data, last);
    /* last - first and -lo_bytes may not fit int64: unsigned, exact. */
    const uint64_t span = (uint64_t)last - (uint64_t)first;
    if (span > (uint64_t)PTRDIFF_MAX)
        return cm__fail_as(func, CM_ERR_OVERFLOW,
                           "dl_tensor.strides span %" PRIu64 " bytes, more than one object can",
                           span);
    v->base = (void *)(data + (uintptr_t)first); /* modular: first may be negative */
    v->size = (size_t)span;
    v->offset = (uint64_t)0 - (uint64_t)lo_bytes;
    return CM_OK;
}

static void cm__dl_release_legacy(void *context) {
    DLManagedTensor *m = context;
    m->deleter(m);
}

static void cm__dl_release_versioned(void *context) {
    DLManagedTensorVersioned *m = context;
    m->deleter(m);
}

/* The producer's deleter behind a switch. A buffer, or a backend that takes
 * the buffer's release callback over (Metal's no-copy deallocator), calls
 * cm__dl_owner_release exactly once; an import that fails after wrapping
 * disarms the owner first, so that the caller keeps the managed tensor. */
typedef struct cm__dl_owner {
    cm_release_fn release; /* calls the producer's deleter on `managed` */
    void *managed;
    atomic_bool armed;
} cm__dl_owner;

static void cm__dl_owner_release(void *context) {
    cm__dl_owner *owner = context;
    if (atomic_load_explicit(&owner->armed, memory_order_acquire))
        owner->release(owner->managed);
    cm__free(owner);
}

/* A new armed owner, or NULL in *out when there is no deleter to call. */
static cm_status cm__dl_owner_new(const char *func, cm_release_fn release, void *managed,
                                  cm__dl_owner **out) {
    *out = NULL;
    if (release == NULL)
        return CM_OK;
    cm__dl_owner *owner = CM__NEW(cm__dl_owner);
    if (owner == NULL)
        return cm__fail_as(func, CM_ERR_OUT_OF_MEMORY,
                           "no memory to track the producer's managed tensor");
    owner->release = release;
    owner->managed = managed;
    atomic_init(&owner->armed, true);
    *out = owner;
    return CM_OK;
}

static void cm__dl_owner_disarm(cm__dl_owner *owner) {
    if (owner != NULL)
        atomic_store_explicit(&owner->armed, false, memory_order_release);
}

/* The import shared by both structs. `release` calls the producer's deleter
 * on `managed` (NULL when there is none). Nothing of `managed` is called on
 * failure. */
/* A kDLMetal import: data is an id<MTLBuffer>, wrapped with a retain; the
 * producer's managed tensor lives until the wrap dies. */
static cm_status cm__dl_import_metal(const char *func, void *managed, const DLTensor *t,
                                     const cm__dl_view *v, cm_release_fn release, bool read_only,
                                     const cm_dlpack_import_desc *d, cm_tensor **out) {
    cm_device *device = d->device;
    if (device != NULL && device->backend->type != CM_DEVICE_METAL)
        return cm__fail_as(func, CM_ERR_UNSUPPORTED,
                           "desc->device is a %s device but dl_tensor.device is kDLMetal; "
                           "import onto a Metal device (or desc->device = NULL)",
                           cm_device_type_name(device->backend->type));
    if (device != NULL) {
        cm_device_retain(device);
    } else {
        cm_status status = cm_device_open(CM_DEVICE_METAL, (uint32_t)t->device.device_id, &device);
        if (status != CM_OK) {
            char why[400];
            snprintf(why, sizeof why, "%.*s", (int)sizeof why - 1, cm_last_error());
            return cm__fail_as(func, status,
                               "dl_tensor.device = (kDLMetal, %d) needs a Metal "
                               "device: %s",
                               t->device.device_id, why);
        }
    }
    const uint32_t flags = read_only ? CM_TENSOR_READ_ONLY : 0u;
    /* Nothing of the producer's struct is read once its deleter may run. */
    const bool empty = t->data == NULL;
    cm_buffer *buffer = NULL;
    cm__dl_owner *owner = NULL;
    cm_status status = CM_OK;
    if (empty) { /* zero-size: nothing to keep alive */
        status = cm_buffer_create(device, NULL, &buffer);
    } else {
        status = cm__dl_owner_new(func, release, managed, &owner);
        if (status == CM_OK) {
            /* Through the device's table, as cm_buffer_wrap_metal does. */
            const cm__buffer_source src = {.kind = CM__BUFFER_NATIVE,
                                           .native = t->data,
                                           .native_arg = "dl_tensor.data",
                                           .flags = read_only ? CM_BUFFER_READ_ONLY : 0u,
                                           .release = owner != NULL ? cm__dl_owner_release : NULL,
                                           .release_context = owner};
            status = cm__buffer_make(func, device, &src, 0, &buffer);
            if (status != CM_OK)
                cm__free(owner); /* never called on failure */
        }
    }
    cm_device_release(device); /* the buffer holds its own reference */
    if (status != CM_OK)
        return status;
    cm_tensor *view = NULL;
    status = cm__tensor_make(func, buffer, v->dtype, (int32_t)t->ndim, t->shape, v->strides,
                             t->byte_offset, flags, &view);
    if (status != CM_OK) {
        cm__dl_owner_disarm(owner); /* failure: the caller keeps the managed tensor */
        cm_buffer_release(buffer);
        return status;
    }
    cm_buffer_release(buffer); /* the view holds it */
    if (d->copy == CM_COPY_ALWAYS) {
        /* Once the copy is made and finished, releasing the view lets the
         * producer's deleter run. */
        cm_tensor *copy = NULL;
        status = cm__copy_on_device(func, view, flags, &copy);
        if (status != CM_OK)
            cm__dl_owner_disarm(owner);
        cm_tensor_release(view);
        if (status != CM_OK)
            return status;
        view = copy;
    }
    if (empty && release != NULL)
        release(managed);
    *out = view;
    return CM_OK;
}

/* The import shared by both structs. `release` calls the producer's deleter
 * on `managed` (NULL when there is none). Nothing of `managed` is called on
 * failure. */
static cm_status cm__dl_import(const char *func, void *managed, const DLTensor *t,
                               cm_release_fn release, bool read_only,
                               const cm_dlpack_import_desc *d, cm_tensor **out) {
    cm__dl_view v;
    CM__TRY(cm__dl_check(func, t, &v));
    /* The producer's arrays, copied: nothing below reads its struct once
     * its deleter may have run. */
    const int32_t ndim = (int32_t)t->ndim;
    int64_t shape[CM_MAX_NDIM];
    for (int32_t k = 0; k < ndim; ++k)
        shape[k] = t->shape[k];
    if (t->device.device_type == kDLMetal)
        return cm__dl_import_metal(func, managed, t, &v, release, read_only, d, out);
    /* Host memory: onto the CPU device, or onto desc->device (a Metal
     * device maps it without a copy where its pages allow). */
    cm_device *device = NULL;
    if (d->device != NULL) {
        device = d->device;
        cm_device_retain(device);
    } else {
        CM__TRY(cm__dlpack_cpu_device(func, NULL, &device));
    }
    const uint32_t flags = read_only ? CM_TENSOR_READ_ONLY : 0u;
    cm_status status = CM_OK;
    if (d->copy != CM_COPY_ALWAYS) {
        /* In place: the CPU device always can; a Metal device only where
         * the pages allow (else CM_ERR_COPY_REQUIRED, and the copy below
         * when desc->copy allows one). The wrap itself never copies, so the
         * producer's deleter never runs before the tensor exists. The view
         * was validated above, so the buffer and its tensor are made in
         * one allocation and nothing can fail once the buffer owns the
         * deleter. */
        cm_host_memory_desc hd = {
            .data = v.base,
            .size = v.size,
            .flags = read_only ? CM_BUFFER_READ_ONLY : 0u,
            .copy = CM_COPY_NEVER,
            .release = release,
            .release_context = managed,
        };
        status = cm__tensor_wrap_host(device, &hd, v.dtype, ndim, shape, v.strides, v.offset, flags,
                                      out);
        if (status == CM_ERR_OUT_OF_MEMORY)
            status =
                cm__fail_as(func, status, "no memory for the buffer over the producer's memory");
        if (status == CM_ERR_COPY_REQUIRED && d->copy == CM_COPY_NEVER) {
            /* The device's reason, said of the import's own arguments. */
            char why[512];
            snprintf(why, sizeof why, "%.*s", (int)sizeof why - 1, cm_last_error());
            static const char wrap[] = "wrapping without a copy ";
            const char *rule = strstr(why, wrap);
            rule = rule != NULL ? rule + sizeof wrap - 1 : why;
            status = cm__fail_as(func, status,
                                 "dl_tensor.data = %p (%zu bytes spanned by the view) on the %s "
                                 "device: importing without a copy (desc->copy = "
                                 "CM_COPY_NEVER) %s",
                                 t->data, v.size, cm_device_type_name(device->backend->type), rule);
        }
        if (status != CM_ERR_COPY_REQUIRED || d->copy == CM_COPY_NEVER) {
            cm_device_release(device); /* the buffer holds its own reference */
            return status;
        }
    }

    /* A compact copy; the producer is done with once it exists. */
    status = cm__copy_new(func, device, (const uint8_t *)v.base + v.offset, v.dtype, ndim, shape,
                          v.strides, flags, out);
    cm_device_release(device);
    if (status != CM_OK)
        return status;
    if (read_only)
        (*out)->buffer->flags |= CM_BUFFER_READ_ONLY;
    if (release != NULL)
        release(managed);
    return CM_OK;
}

/* A managed tensor that cmetal exported, imported back onto the CPU device
 * as it went out: the tensor the export holds, with the export's reference
 * (no allocation; the export's block is freed, as its deleter would),
 * once the DLTensor is checked to be still the one exported. NULL when
 * the import asks for anything else (a copy, another device, read-only
 * access to a writable tensor), which then takes the general path. */
static cm_tensor *cm__dl_own_export(cm__dlpack_export *e, const DLTensor *t, bool read_only,
                                    const cm_dlpack_import_desc *d) {
    cm_tensor *src = e->tensor;
    const cm_buffer *b = src->buffer;
    if (d->copy == CM_COPY_ALWAYS || b->device->backend->type != CM_DEVICE_CPU ||
        (d->device != NULL && d->device != b->device) ||
        ((src->flags & CM_TENSOR_READ_ONLY) != 0) != read_only)
        return NULL;
    const int32_t ndim = src->ndim;
    if (t->data != (uint8_t *)b->host + src->byte_offset || t->byte_offset != 0 ||
        t->device.device_type != kDLCPU || t->device.device_id != 0 || t->ndim != ndim ||
        t->shape != e->shape || t->strides != e->strides || t->dtype.code != e->dtype.code ||
        t->dtype.bits != e->dtype.bits || t->dtype.lanes != e->dtype.lanes)
        return NULL;
    for (int32_t k = 0; k < ndim; ++k)
        if (e->shape[k] != src->shape[k] || e->strides[k] != src->strides[k])
            return NULL;
    cm__dl_block_give(e); /* the deleter, keeping its reference for the caller */
    return src;
}

static cm_status cm__dl_check_desc(const char *func, const cm_dlpack_import_desc *d) {
    if (d->copy < CM_COPY_IF_NEEDED || d->copy > CM_COPY_ALWAYS)
        return cm__fail_as(func, CM_ERR_INVALID_ARGUMENT, "desc->copy = %d is not a cm_copy_policy",
                           (int)d->copy);
    return CM_OK;
}

cm_status cm_dlpack_import(DLManagedTensor *managed, const cm_dlpack_import_desc *desc,
                           cm_tensor **out) {
    CM__REQUIRE_NONNULL(out);
    *out = NULL;
    CM__REQUIRE_NONNULL(managed);
    const cm_dlpack_import_desc d = desc != NULL ? *desc : (cm_dlpack_import_desc){0};
    CM__TRY(cm__dl_check_desc(__func__, &d));
    if (managed->deleter == cm__dlpack_delete_legacy) {
        cm_tensor *own =
            cm__dl_own_export(managed->manager_ctx, &managed->dl_tensor, d.read_only, &d);
        if (own != NULL) {
            *out = own;
            return CM_OK;
        }
    }
    return cm__dl_import(__func__, managed, &managed->dl_tensor,
                         managed->deleter != NULL ? cm__dl_release_legacy : NULL, d.read_only, &d,
                         out);
}

cm_status cm_dlpack_import_versioned(DLManagedTensorVersioned *managed,
                                     const cm_dlpack_import_desc *desc, cm_tensor **out) {
    CM__REQUIRE_NONNULL(out);
    *out = NULL;
    CM__REQUIRE_NONNULL(managed);
    const cm_dlpack_import_desc d = desc != NULL ? *desc : (cm_dlpack_import_desc){0};
    CM__TRY(cm__dl_check_desc(__func__, &d));
    /* The spec: on a major mismatch, call the deleter and read nothing else.
     * The major alone first (4 bytes, as stored: no wider load). */
    if (managed->version.major != CM_DLPACK_MAJOR_VERSION) {
        const DLPackVersion version = managed->version;
        if (managed->deleter != NULL)
            managed->deleter(managed);
        return cm__fail(CM_ERR_VERSION,
                        "version = %u.%u: cmetal reads DLPack major version %d only; the "
                        "producer's deleter was called",
                        version.major, version.minor, CM_DLPACK_MAJOR_VERSION);
    }
    const uint64_t known = DLPACK_FLAG_BITMASK_READ_ONLY | DLPACK_FLAG_BITMASK_IS_COPIED |
                           DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED;
    if ((managed->flags & ~known) != 0)
        return cm__fail(CM_ERR_UNSUPPORTED, "flags = 0x%" PRIx64 " has bits cmetal does not know",
                        managed->flags);
    const bool read_only = d.read_only || (managed->flags & DLPACK_FLAG_BITMASK_READ_ONLY);
    if (managed->deleter == cm__dlpack_delete_versioned) {
        cm_tensor *own =
            cm__dl_own_export(managed->manager_ctx, &managed->dl_tensor, read_only, &d);
        if (own != NULL) {
            *out = own;
            return CM_OK;
        }
    }
    return cm__dl_import(__func__, managed, &managed->dl_tensor,
                         managed->deleter != NULL ? cm__dl_release_versioned : NULL, read_only, &d,
                         out);
}
