/* SPDX-License-Identifier: MIT */
/* cmetal/buffer.h: reference-counted device memory.
 *
 * A buffer is a span of memory owned by a device: host memory on the CPU, an
 * MTLBuffer on Metal. Tensors are views over buffers and retain them. */
#ifndef CMETAL_BUFFER_H
#define CMETAL_BUFFER_H

#include <cmetal/device.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cm_buffer cm_buffer;

/* Where the memory lives (Metal's MTLStorageMode). The CPU device has only
 * shared memory; asking it for managed or private fails. */
typedef enum cm_storage_mode {
    CM_STORAGE_DEFAULT = 0, /* shared */
    CM_STORAGE_SHARED = 1,  /* host and device see the same memory */
    CM_STORAGE_MANAGED = 2, /* host and device copies, synchronised explicitly */
    CM_STORAGE_PRIVATE = 3  /* device only: no host pointer */
} cm_storage_mode;

/* What may be done when zero-copy is impossible (the __dlpack__ copy=). */
typedef enum cm_copy_policy {
    CM_COPY_IF_NEEDED = 0, /* copy only when sharing is impossible */
    CM_COPY_NEVER = 1,     /* fail with CM_ERR_COPY_REQUIRED instead of copying */
    CM_COPY_ALWAYS = 2     /* always copy */
} cm_copy_policy;

/* Buffer flags (cm_buffer_info.flags, cm_host_memory_desc.flags). */
enum {
    CM_BUFFER_READ_ONLY = 1u << 0, /* no write may go through cmetal */
    CM_BUFFER_FOREIGN = 1u << 1,   /* memory owned by someone else (wrapped) */
    CM_BUFFER_COPIED = 1u << 2     /* a wrap had to copy the caller's memory */
};

typedef struct cm_buffer_desc {
    size_t size;             /* bytes; 0 is allowed */
    cm_storage_mode storage; /* default shared */
    const char *label;       /* UTF-8, for debuggers and captures (Metal: the
                                MTLBuffer's label); NULL: none */
} cm_buffer_desc;

/* Called exactly once when memory wrapped by cmetal is no longer used by
 * cmetal or the device: after the last reference is released and pending
 * device work on it has finished. It may run on any thread that releases a
 * reference, or on a Metal completion thread. */
typedef void (*cm_release_fn)(void *context);

typedef struct cm_host_memory_desc {
    void *data;            /* host memory; may be NULL only when size is 0 */
    size_t size;           /* bytes */
    uint32_t flags;        /* CM_BUFFER_READ_ONLY */
    cm_copy_policy copy;   /* Metal devices: if the memory cannot be mapped
                                without a copy (16 KiB page alignment), copy it
                                or fail; the CPU device never copies unless
                                CM_COPY_ALWAYS */
    cm_release_fn release; /* may be NULL */
    void *release_context;
} cm_host_memory_desc;

typedef struct cm_buffer_info {
    cm_device_type device_type;
    size_t size;
    cm_storage_mode storage; /* never CM_STORAGE_DEFAULT */
    uint32_t flags;          /* CM_BUFFER_* */
    void *host;              /* host address of byte 0, NULL when not visible */
    void *native;            /* id<MTLBuffer> on Metal, NULL on the CPU (borrowed) */
} cm_buffer_info;

/* Allocates `desc->size` bytes (CPU: aligned to at least 256 bytes, the
 * DLPack recommendation). Contents are unspecified. A NULL desc means size
 * 0 and shared storage.
 * Label: on Metal desc->label becomes the MTLBuffer's `label`; a buffer
 * served from the cache (cmetal/memory.h) takes the new label, or none when
 * desc->label is NULL (never a previous user's). The CPU keeps no label.
 * Ownership: returns +1 in *out; the buffer retains `device`; desc->label
 * is copied (Metal copies the string).
 * Errors: CM_ERR_INVALID_ARGUMENT (NULL device/out, bad storage, a label
 * that is not UTF-8),
 * CM_ERR_UNSUPPORTED (storage mode the device lacks), CM_ERR_OUT_OF_MEMORY
 * (including sizes the device can never hold). On failure *out is NULL. */
CM_API cm_status cm_buffer_create(cm_device *device, const cm_buffer_desc *desc, cm_buffer **out);

/* Wraps caller-owned host memory without copying where the device can
 * (see desc->copy). On success, cmetal owns one use of the memory and calls
 * desc->release(desc->release_context) exactly once when done, even if it
 * copied (then right away, before returning). On failure the release
 * callback is never called and the caller keeps the memory.
 * Ownership: returns +1 in *out. */
CM_API cm_status cm_buffer_wrap_host(cm_device *device, const cm_host_memory_desc *desc,
                                     cm_buffer **out);

/* Reference counting: release(NULL) is a no-op. The last release waits for
 * pending device work on the buffer, then frees the memory or calls the
 * wrap's release callback, whatever other buffers or tensors still live:
 * cmetal keeps nothing of it past that (on Metal the framework may let go
 * of the finished command buffer, and with it the memory, a moment later
 * on its completion thread). Thread-safety: atomic; any thread. */
CM_API cm_status cm_buffer_retain(cm_buffer *buffer);
CM_API cm_status cm_buffer_release(cm_buffer *buffer);

/* Fills *out; pointers in it are borrowed from the buffer. */
CM_API cm_status cm_buffer_get_info(const cm_buffer *buffer, cm_buffer_info *out);

/* Copies `size` bytes between host memory and [offset, offset + size) of
 * the buffer, for every storage mode: directly when the host sees the
 * memory (after waiting for pending device writes), through a device-side
 * staging copy otherwise (private storage). Both wait until done.
 * Private storage (Metal) goes through shared staging buffers of 4 MiB, in
 * order, in chunks of at most 4 MiB (cut at multiples of 4 MiB from
 * `offset` rounded down to a multiple of 4), one command buffer each on the
 * device's default stream, two staging buffers in turn: the host's copy of
 * one chunk overlaps the device's copy of the next. A device keeps two
 * staging buffers (8 MiB) from its first private transfer until it is
 * released, so that transfers after the first make none; a transfer
 * running while another holds them makes its own, released after it.
 * Errors: CM_ERR_OUT_OF_BOUNDS for a range outside the buffer,
 * CM_ERR_READ_ONLY (write to a read-only buffer), CM_ERR_DEVICE (a
 * command buffer failed: the message names the chunk, "bytes [a, b) of
 * size (chunk k of n)", and Metal's error), CM_ERR_OUT_OF_MEMORY (no
 * staging buffer). A failed private transfer returns once the command
 * buffers it committed have finished: the chunks before the one named were
 * copied (a read's were copied out to `data`), the rest of the range holds
 * unspecified bytes (a write's next chunk may have landed too), nothing
 * outside the range is touched, and the call's staging buffers are
 * released rather than pooled.
 * Thread-safety: concurrent transfers to overlapping ranges race, as memcpy
 * would. */
CM_API cm_status cm_buffer_write(cm_buffer *buffer, size_t offset, const void *data, size_t size);
CM_API cm_status cm_buffer_read(const cm_buffer *buffer, size_t offset, void *data, size_t size);

/* The buffer's device, borrowed (valid while the buffer lives). */
CM_API cm_status cm_buffer_get_device(const cm_buffer *buffer, cm_device **out);

#ifdef __cplusplus
}
#endif
#endif /* CMETAL_BUFFER_H */
