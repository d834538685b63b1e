/* SPDX-License-Identifier: MIT */
/* cmetal/metal.h: Metal-specific access.
 *
 * Objective-C objects cross this API as void pointers; the real type is in
 * the comment. Nothing here needs Objective-C or Metal headers. */
#ifndef CMETAL_METAL_H
#define CMETAL_METAL_H

#include <cmetal/buffer.h>
#include <cmetal/kernel.h>
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

/* The program's own Metal objects (as Halide's and sokol's embedding
 * programs supply theirs): a device, a queue, a shared event. Each is
 * checked with respondsToSelector: for the selectors cmetal sends it (so
 * the debug layer's proxies pass), and a queue or event for belonging to
 * the device; another object fails with CM_ERR_INVALID_ARGUMENT naming the
 * argument and the first selector it lacks. */

/* A cm_device over `mtl_device` (id<MTLDevice>), with its own default
 * stream (a new queue), buffer cache and kernel cache, as cm_device_open
 * makes. cm_device_info and DLPack number it as cm_device_open does when
 * it is one of the system's devices (else index 0).
 * Ownership: retains mtl_device and releases it once, when the device is
 * freed (the last cm_device_release, after every buffer and stream made on
 * it); returns +1 in *out. Errors: CM_ERR_INVALID_ARGUMENT (NULL, not an
 * MTLDevice), CM_ERR_NO_DEVICE (no Metal framework), CM_ERR_OUT_OF_MEMORY.
 * Thread-safety: any thread. */
CM_API cm_status cm_device_wrap_metal(void *mtl_device, cm_device **out);

/* A cm_stream whose command buffers go to the program's `queue`
 * (id<MTLCommandQueue> of the device's MTLDevice), in order with what the
 * program commits to it itself. Ownership: retains queue and releases it
 * exactly once, when the stream is freed (after its work); returns +1;
 * the stream retains the device. Errors: CM_ERR_INVALID_ARGUMENT (NULL,
 * not a queue, a queue of another device), CM_ERR_UNSUPPORTED (not a Metal
 * device). Thread-safety: any thread; the stream as cm_stream_create's. */
CM_API cm_status cm_stream_wrap_metal(cm_device *device, void *queue, cm_stream **out);

/* A cm_fence that signals when the program's `shared_event`
 * (id<MTLSharedEvent> of the device's MTLDevice) reaches `value`:
 * cm_stream_wait makes a stream's later work wait for it on the device,
 * cm_fence_wait waits on the host. Ownership: retains the event and
 * releases it once, when the fence is freed; returns +1; the fence retains
 * the device. Errors: CM_ERR_INVALID_ARGUMENT (NULL, not a shared event,
 * one of another device), CM_ERR_UNSUPPORTED (not a Metal device).
 * Thread-safety: any thread. */
CM_API cm_status cm_fence_wrap_metal(cm_device *device, void *shared_event, uint64_t value,
                                     cm_fence **out);

/* The device's id<MTLDevice>. Ownership: borrowed, valid while the device
 * lives. Errors: CM_ERR_UNSUPPORTED on a non-Metal device. */
CM_API cm_status cm_device_get_metal_device(const cm_device *device, void **out);

/* The stream's id<MTLCommandQueue>. Ownership: borrowed. */
CM_API cm_status cm_stream_get_metal_queue(const cm_stream *stream, void **out);

/* The kernel's id<MTLComputePipelineState> (labelled with
 * cm_kernel_desc.label). Ownership: borrowed, valid while the kernel
 * lives. Errors: CM_ERR_UNSUPPORTED on a non-Metal device.
 * Thread-safety: any thread. */
CM_API cm_status cm_kernel_get_metal_pipeline(const cm_kernel *kernel, void **out);

/* The device's id<MTLResidencySet> holding the MTLBuffers of
 * cm_buffer_create (cmetal/memory.h, "Residency"): a program may attach it
 * to its own queues (addResidencySet:). Do not add or remove allocations:
 * cmetal commits the set as its buffers come and go.
 * Ownership: borrowed, valid while the device lives.
 * Errors: CM_ERR_UNSUPPORTED on a non-Metal device and where the device
 * has no residency sets (before macOS 15, GPU families below Apple6).
 * Thread-safety: any thread. */
CM_API cm_status cm_device_get_metal_residency_set(const cm_device *device, void **out);

/* A GPU capture (MTLCaptureManager) of a device's or one stream's work to
 * a GPU trace document, for Xcode's Metal debugger. */
typedef struct cm_capture_desc {
    cm_device *device; /* capture all of this Metal device's work; or */
    cm_stream *stream; /* only this stream's (its MTLCommandQueue); exactly one */
    const char *path;  /* the document to write, ending in ".gputrace"; required */
} cm_capture_desc;

/* Begins a capture to desc->path (MTLCaptureDescriptor, destination
 * GPUTraceDocument). Metal refuses to write a trace document unless the
 * process runs with MTL_CAPTURE_ENABLED=1 in its environment (or
 * MetalCaptureEnabled in the app's Info.plist) from its start; the error
 * then names MTL_CAPTURE_ENABLED and quotes Metal's NSError. One capture at
 * a time per process (Metal's capture manager is shared).
 * Ownership: borrows desc and what it names for the call; Metal keeps the
 * captured object until cm_capture_end. Thread-safety: any thread.
 * Errors: CM_ERR_INVALID_ARGUMENT (NULL desc, neither or both of device
 * and stream, a NULL or empty path, one not ending in ".gputrace", a
 * capture already begun by cmetal), CM_ERR_UNSUPPORTED (not a Metal
 * device; Metal refuses the capture: MTLCaptureErrorNotSupported),
 * CM_ERR_DEVICE (another refusal, Metal's message quoted). */
CM_API cm_status cm_capture_begin(const cm_capture_desc *desc);

/* Ends the capture begun by cm_capture_begin (stopCapture); Metal writes
 * the document. Submit the work to capture first (cm_stream_flush): work
 * committed after this call is not in it.
 * Errors: CM_ERR_INVALID_ARGUMENT when no capture was begun.
 * Thread-safety: any thread. */
CM_API cm_status cm_capture_end(void);

#ifdef __cplusplus
}
#endif
#endif /* CMETAL_METAL_H */
