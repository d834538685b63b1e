/* SPDX-License-Identifier: MIT */
/* cmetal/metal.h: Metal-specific access.
 *
 * Objective-C objects cross this API as void pointers; the real type is in
 * the comment. Nothing here needs Objective-C or Metal headers. */
#ifndef CMETAL_METAL_H
#define CMETAL_METAL_H

#include <cmetal/buffer.h>
#include <cmetal/stream.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Host memory wrapped without a copy (newBufferWithBytesNoCopy) must start
 * and end on the host's page size: 16 KiB on arm64 Macs, 4 KiB on x86_64
 * (sysconf(_SC_PAGESIZE)). This is the largest, so memory aligned to it
 * can always be wrapped without a copy. */
#define CM_METAL_PAGE_SIZE 16384

typedef struct cm_metal_buffer_desc {
    void *buffer;          /* id<MTLBuffer> of the same MTLDevice; required */
    uint32_t flags;        /* CM_BUFFER_READ_ONLY */
    cm_release_fn release; /* may be NULL; see below */
    void *release_context;
} cm_metal_buffer_desc;

/* Wraps a foreign id<MTLBuffer> without copying (as MLX's from_raw does).
 * Ownership: cmetal retains the MTLBuffer; on success it also calls
 * desc->release(desc->release_context) exactly once, after the last cmetal
 * reference is gone and cmetal's device work on the buffer has finished
 * (this is how a DLPack import keeps the producer's tensor alive). On
 * failure nothing is retained and the callback is never called.
 * Errors: CM_ERR_INVALID_ARGUMENT (NULL buffer, not a Metal device),
 * CM_ERR_NO_DEVICE. Returns +1 in *out. */
CM_API cm_status cm_buffer_wrap_metal(cm_device *device, const cm_metal_buffer_desc *desc,
                                      cm_buffer **out);

/* The device's id<MTLDevice>. Ownership: borrowed, valid while the device
 * lives. Errors: CM_ERR_UNSUPPORTED on a non-Metal device. */
CM_API cm_status cm_device_get_metal_device(const cm_device *device, void **out);

/* The stream's id<MTLCommandQueue>. Ownership: borrowed. */
CM_API cm_status cm_stream_get_metal_queue(const cm_stream *stream, void **out);

#ifdef __cplusplus
}
#endif
#endif /* CMETAL_METAL_H */
