/* SPDX-License-Identifier: MIT */
/* cmetal/stream.h: streams (ordered device work) and fences.
 *
 * A stream is an ordered queue of work on one device. On Metal it owns an
 * MTLCommandQueue and batches work into one command buffer until it is
 * flushed; on the CPU work runs immediately and a stream is always idle.
 * Every device has a default stream, used by ops given a NULL stream (see
 * cmetal/ops.h) and by buffer transfers.
 *
 * Synchronisation rules:
 *  - Work on one stream runs in submission order; work on different
 *    streams may run at the same time.
 *  - cmetal tracks, per buffer, the work of each stream that uses it: host
 *    access (cm_tensor_host_read/write, cm_buffer_read/write, DLPack export
 *    by default) first waits for the device writes to the buffer on every
 *    stream, and a host write also for the device reads; nothing else.
 *    (A buffer busy on more than four streams at once may wait for the
 *    whole device instead.)
 *  - Between streams, device work is not ordered for you: when one
 *    stream's work reads or writes what another's writes, order them with a
 *    fence: cm_stream_signal on the producer, then cm_stream_wait (device
 *    side) on the consumer, or cm_fence_wait (host side).
 *  - cm_device_synchronize waits for every stream of the device.
 *  - Releasing the last reference to a buffer waits for device work that
 *    uses it.
 *  - cmetal keeps no finished work alive: a stream lets go of each command
 *    buffer as soon as it sees it complete (a synchronize, a host access or
 *    release that waits for it), so a released buffer's memory never waits
 *    for other buffers that the same command buffer used. */
#ifndef CMETAL_STREAM_H
#define CMETAL_STREAM_H

#include <cmetal/device.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cm_stream cm_stream;
typedef struct cm_fence cm_fence;

/* A new stream on `device` (Metal: with its own MTLCommandQueue, labelled
 * "cmetal stream"). cm_stream_create_with_desc with a NULL desc.
 * Ownership: returns +1; the stream retains the device.
 * Errors: CM_ERR_INVALID_ARGUMENT, CM_ERR_OUT_OF_MEMORY, CM_ERR_DEVICE. */
CM_API cm_status cm_stream_create(cm_device *device, cm_stream **out);

typedef struct cm_stream_desc {
    const char *label; /* UTF-8: the MTLCommandQueue's label; NULL: "cmetal stream" */
} cm_stream_desc;

/* cm_stream_create with a desc (NULL: the defaults). desc->label becomes
 * the queue's `label`; the stream's command buffers are labelled by what
 * opened them ("cmetal: cm_add"), whatever the queue's label.
 * Ownership: as cm_stream_create; desc->label is copied.
 * Errors: as cm_stream_create, and CM_ERR_INVALID_ARGUMENT for a label
 * that is not UTF-8. Thread-safety: any thread. */
CM_API cm_status cm_stream_create_with_desc(cm_device *device, const cm_stream_desc *desc,
                                            cm_stream **out);

/* The device's default stream. Ownership: borrowed; valid while the device
 * lives (retain it to keep it longer). */
CM_API cm_status cm_device_get_stream(cm_device *device, cm_stream **out);

/* Reference counting; release(NULL) is a no-op. The last release flushes
 * the stream and waits for its work. Thread-safety: atomic; any thread. */
CM_API cm_status cm_stream_retain(cm_stream *stream);
CM_API cm_status cm_stream_release(cm_stream *stream);

/* Submits batched work without waiting. Errors: CM_ERR_DEVICE with the
 * driver's message if earlier work on the stream failed (reported once). */
CM_API cm_status cm_stream_flush(cm_stream *stream);

/* Submits batched work and waits for all of it. Errors: as flush. */
CM_API cm_status cm_stream_synchronize(cm_stream *stream);

/* Number of command buffers the stream has committed: a measure of
 * batching (N ops between two flushes commit once). 0 on the CPU. */
CM_API cm_status cm_stream_get_submissions(const cm_stream *stream, uint64_t *out);

/* The GPU time of a stream's completed command buffers. */
typedef struct cm_stream_gpu_time {
    uint64_t command_buffers; /* completed command buffers counted */
    double seconds;           /* sum of their GPUEndTime - GPUStartTime */
    /* GPUStartTime and GPUEndTime of the last one counted: host seconds
     * (Metal's CFTimeInterval, on the host's monotonic clock); 0 before. */
    double last_start, last_end;
} cm_stream_gpu_time;

/* The GPU time of the stream's command buffers (Metal's GPUStartTime and
 * GPUEndTime), summed over those that completed without error. A command
 * buffer is counted once the stream sees it complete: every one committed
 * before a cm_stream_synchronize (or cm_device_synchronize) has been
 * counted when it returns; one that failed is not counted. The time is
 * the GPU's span for the whole command buffer (its kernels and the gaps
 * between them), not the wall time of the host's wait. On the CPU device
 * (synchronous work, no command buffers) everything is 0.
 * Ownership: fills *out. Thread-safety: any thread; a consistent snapshot.
 * Errors: CM_ERR_INVALID_ARGUMENT for a NULL stream or out. */
CM_API cm_status cm_stream_get_gpu_time(const cm_stream *stream, cm_stream_gpu_time *out);

/* A fence that signals when all work submitted to `stream` so far has
 * finished; submits batched work. On Metal it is an MTLSharedEvent and a
 * value. Ownership: returns +1. */
CM_API cm_status cm_stream_signal(cm_stream *stream, cm_fence **out);

/* Makes work submitted to `stream` after this call wait, on the device,
 * for `fence`. The fence may come from another stream of the same device.
 * Errors: CM_ERR_INVALID_ARGUMENT for a fence of another device. */
CM_API cm_status cm_stream_wait(cm_stream *stream, const cm_fence *fence);

/* Waits on the host until the fence signals, or for at most timeout_ns
 * nanoseconds (UINT64_MAX: forever). Errors: CM_ERR_DEVICE on timeout
 * (message says so) or failed work. */
CM_API cm_status cm_fence_wait(const cm_fence *fence, uint64_t timeout_ns);

typedef struct cm_fence_info {
    cm_device_type device_type;
    void *shared_event; /* id<MTLSharedEvent> on Metal (borrowed), NULL on the CPU */
    uint64_t value;     /* signaled when shared_event.signaledValue >= value */
    bool signaled;      /* at the time of the call */
} cm_fence_info;

/* Describes the fence, for handing to code outside cmetal (for example
 * MLX or PyTorch MPS code that waits on the event itself). */
CM_API cm_status cm_fence_get_info(const cm_fence *fence, cm_fence_info *out);

CM_API cm_status cm_fence_retain(cm_fence *fence);
CM_API cm_status cm_fence_release(cm_fence *fence);

#ifdef __cplusplus
}
#endif
#endif /* CMETAL_STREAM_H */
