/* SPDX-License-Identifier: MIT */
/* Internal state of the Metal backend, shared by its files. */
#ifndef CMETAL_METAL_INTERNAL_H
#define CMETAL_METAL_INTERNAL_H

#include "core/backend.h"
#include "core/convert.h"
#include "objc/bridge.h"

#include <pthread.h>

/* MTLResourceOptions storage bits (shift 4) and MTLStorageMode values. */
enum {
    CM__MTL_RESOURCE_STORAGE_SHARED = 0,
    CM__MTL_RESOURCE_STORAGE_MANAGED = 16,
    CM__MTL_RESOURCE_STORAGE_PRIVATE = 32,
    CM__MTL_STORAGE_MODE_SHARED = 0,
    CM__MTL_STORAGE_MODE_MANAGED = 1,
    CM__MTL_STORAGE_MODE_PRIVATE = 2,
    CM__MTL_STORAGE_MODE_MEMORYLESS = 3,
};

/* MTLDataType values (Metal/MTLDataType.h) of the dtypes; NONE (0,
 * MTLDataTypeNone) where Metal has no such type. */
enum {
    CM__MTL_DATA_NONE = 0,
    CM__MTL_DATA_FLOAT = 3,
    CM__MTL_DATA_HALF = 16,
    CM__MTL_DATA_INT = 29,
    CM__MTL_DATA_UINT = 33,
    CM__MTL_DATA_SHORT = 37,
    CM__MTL_DATA_USHORT = 41,
    CM__MTL_DATA_CHAR = 45,
    CM__MTL_DATA_UCHAR = 49,
    CM__MTL_DATA_BOOL = 53,
    CM__MTL_DATA_LONG = 81,
    CM__MTL_DATA_ULONG = 85,
    CM__MTL_DATA_BFLOAT = 121,
};

/* The MTLDataType of a dtype, from the dtype table (core/convert.h):
 * CM__MTL_DATA_NONE for a dtype Metal has not (the MSL kernels take the
 * others). */
static inline cm__uint cm__mtl_data_type(cm_dtype dt) {
    switch (dt) {
#define CM__MTL_CASE(E, T, DOM, LD, KIND, SAT, MTL)                                                \
    case E: return CM__MTL_DATA_##MTL;
        CM__DTYPE_LIST(CM__MTL_CASE)
#undef CM__MTL_CASE
    default: return CM__MTL_DATA_NONE;
    }
}

/* MTLHazardTrackingMode. */
enum { CM__MTL_HAZARD_UNTRACKED = 1 };

/* MTLCommandBufferStatus. */
enum {
    CM__MTL_CB_NOT_ENQUEUED = 0,
    CM__MTL_CB_ENQUEUED = 1,
    CM__MTL_CB_COMMITTED = 2,
    CM__MTL_CB_SCHEDULED = 3,
    CM__MTL_CB_COMPLETED = 4,
    CM__MTL_CB_ERROR = 5,
};

/* MTLMathMode (NSInteger; MTLCompileOptions.mathMode, macOS 15 / iOS 18). */
enum {
    CM__MTL_MATH_MODE_SAFE = 0,
    CM__MTL_MATH_MODE_RELAXED = 1,
    CM__MTL_MATH_MODE_FAST = 2,
};

/* MTLMathFloatingPointFunctions (NSInteger; macOS 15 / iOS 18): which exp,
 * log, sin, pow... unqualified calls get. Fast is the default. */
enum {
    CM__MTL_MATH_FUNCTIONS_FAST = 0,
    CM__MTL_MATH_FUNCTIONS_PRECISE = 1,
};

/* MTLPipelineOptionArgumentInfo = MTLPipelineOptionBindingInfo
 * (MTLDevice.h); MTLBindingType / MTLArgumentType, MTLBindingAccess
 * (MTLArgument.h). */
enum {
    CM__MTL_PIPELINE_OPTION_ARGUMENT_INFO = 1,
    CM__MTL_BINDING_BUFFER = 0,
    CM__MTL_BINDING_THREADGROUP = 1,
    CM__MTL_ACCESS_READ_ONLY = 0,
    CM__MTL_ACCESS_READ_WRITE = 1,
    CM__MTL_ACCESS_WRITE_ONLY = 2,
};

/* The kernels of msl/, by name (metal_ops.c). */
enum {
    CM__KERNEL_FILL,
    CM__KERNEL_COPY,
    CM__KERNEL_CAST,
    CM__KERNEL_UNARY,
    CM__KERNEL_BINARY,
    CM__KERNEL_REDUCE_SERIAL,
    CM__KERNEL_REDUCE_BARRIER,     /* threadgroup memory and barriers only */
    CM__KERNEL_REDUCE_THREADGROUP, /* SIMD-group shuffles: its own library */
    CM__KERNEL_COUNT
};

typedef struct cm__metal_cached cm__metal_cached;

/* The buffer cache's size classes: sizes up to 16 are their own class,
 * then 8 classes per power of two up to 2^64 (metal_alloc.c). */
#define CM__SIZE_CLASSES 512

typedef struct cm__metal_pooled cm__metal_pooled;
typedef struct cm__metal_heap cm__metal_heap;

/* A device's caching allocator of MTLBuffers (cmetal/memory.h). Under
 * `lock`: released MTLBuffers by storage mode and size class (most recent
 * first), all of them in one list from most to least recently cached, the
 * limits and the counts. */
typedef struct cm__metal_alloc {
    pthread_mutex_t lock;
    cm__metal_pooled *classes[3][CM__SIZE_CLASSES];
    cm__metal_pooled *newest, *oldest;
    uint64_t cache_limit, memory_limit; /* 0: cache off; no memory limit */
    uint64_t active, peak, cached;      /* bytes, in size classes */
    uint64_t allocations, hits, misses;
    /* The MTLHeaps that small buffers come from (metal_alloc.c), newest
     * first; heap_storage[slot]: the storage modes that use them. */
    cm__metal_heap *heaps;
    bool heap_storage[3];
    uint64_t heap_bytes, heap_count; /* the heaps' sizes; how many */
    uint64_t heap_used;              /* size classes of the buffers in them */
    /* The residency set of the MTLBuffers made here (macOS 15, GPU family
     * Apple6 and later), +1, or NULL where the device has none: then
     * nothing is ever added. Its sends happen under `lock`. */
    cm__id residency;
    uint64_t wired_limit, resident; /* bytes; 0: none added; in the set */
} cm__metal_alloc;

typedef struct cm__metal_device {
    cm__id device; /* id<MTLDevice>, +1 */
    cm_device_info info;
    /* The ops' kernels (metal_ops.c), taken from the cache at first use
     * under kernels_lock. */
    pthread_mutex_t kernels_lock;
    cm__id library; /* id<MTLLibrary>, +1, or NULL */
    uint64_t library_serial;
    cm__id simd_library; /* the SIMD-group kernels', or NULL */
    uint64_t simd_library_serial;
    cm__id pipelines[CM__KERNEL_COUNT]; /* id<MTLComputePipelineState>, +1 */
    cm__uint max_threads[CM__KERNEL_COUNT];
    cm__uint simd_width[CM__KERNEL_COUNT];
    /* Every library and pipeline made on the device (metal_pipeline.c). */
    pthread_mutex_t cache_lock;
    cm__metal_cached *cache;
    uint64_t cache_serial;
    /* The opt-in pipeline cache on disk (cm_device_set_pipeline_cache):
     * id<MTLBinaryArchive> +1 and its path, or NULL; under cache_lock. */
    cm__id archive;
    char *archive_path;
    /* Shared staging buffers of private-storage transfers, all of
     * CM__STAGING_CHUNK bytes, kept for reuse (metal_transfer.c):
     * id<MTLBuffer> +1 or NULL, under staging_lock; staging_made counts
     * those made (tests check that warm transfers make none). */
    pthread_mutex_t staging_lock;
    cm__id staging[2];
    _Atomic uint64_t staging_made;
    cm__metal_alloc alloc; /* the buffers of cm_buffer_create */
} cm__metal_device;

/* A stream's progress, shared with the buffers that track its work, so that
 * a buffer keeps neither a stream nor a command buffer alive. The stream
 * numbers its command buffers from 1 as it opens them; every number below
 * done_below belongs to one seen complete (and let go). Reference counted:
 * the stream holds one reference, each buffer slot naming it another. A
 * stream sets it to UINT64_MAX when it dies (it has waited for its work). */
typedef struct cm__metal_clock {
    cm__refcount ref;
    _Atomic uint64_t done_below;
} cm__metal_clock;

/* A committed command buffer (+1) and its number on its stream. */
typedef struct cm__metal_committed {
    cm__id cb;
    uint64_t seq;
} cm__metal_committed;

typedef struct cm__metal_stream {
    cm__id queue; /* id<MTLCommandQueue>, +1 */
    /* The device's residency set (+0) that each command buffer uses: only
     * on an adopted queue (cmetal's own queues have it added). */
    cm__id residency;
    cm__metal_clock *clock; /* +1; the stream's own, for its buffers */
    pthread_mutex_t lock;   /* guards everything below */
    cm__id open;            /* the command buffer being filled, +1, or NULL */
    uint64_t open_seq;      /* its number */
    uint64_t next_seq;      /* the number of the next one opened */
    /* Committed command buffers not yet seen complete, in commit (and
     * number) order, +1 each. Metal orders their start, not their
     * completion, so a sync waits for all of them; each one's status is
     * read once, when it leaves, and nothing else retains it: once seen
     * complete, what it used can go. */
    cm__metal_committed *committed;
    size_t ncommitted, committed_cap;
    /* Orders the passes that touch untracked buffers (Metal orders nothing
     * between them): each waits for it first and updates it last. +1, made
     * at first need. */
    cm__id untracked_fence;
    uint64_t submissions; /* command buffers committed */
    /* GPUStartTime..GPUEndTime of the completed command buffers seen
     * (cm_stream_get_gpu_time). */
    cm_stream_gpu_time gpu_time;
    bool failed; /* a command buffer failed; error not yet reported */
    char error[384];
} cm__metal_stream;

/* One stream's work on a buffer: the numbers of its last command buffers
 * that used and wrote it (on one queue, waiting for the last one suffices).
 * Numbers, not the command buffers: a command buffer retains every
 * resource it uses, so a buffer holding one would keep others alive. */
typedef struct cm__metal_use {
    /* Not retained (a buffer must not keep a stream alive, nor destroy one
     * while locks are held): look it up with cm__device_visit_stream, and
     * tell it from a later stream at the same address by its clock. NULL
     * for a free slot. */
    const cm_stream *stream;
    cm__metal_clock *clock; /* the stream's, +1, or NULL for a free slot */
    uint64_t use;           /* number of the last command buffer using it */
    uint64_t write;         /* of the last one writing it, or 0 */
} cm__metal_use;

/* Streams tracked per buffer. A buffer used by more streams at once
 * forgets the work of one (`untracked`), and host access then waits for
 * every stream of the device instead. */
#define CM__METAL_USE_SLOTS 4

/* Per-buffer tracking: which streams' command buffers use and write it. */
typedef struct cm__metal_buffer {
    pthread_mutex_t lock;
    cm__metal_use uses[CM__METAL_USE_SLOTS];
    bool untracked;        /* work was forgotten: wait for the whole device */
    bool hazard_untracked; /* the MTLBuffer is MTLHazardTrackingModeUntracked */
    bool gpu_wrote;        /* managed: device copy newer than host's */
    bool host_dirty;       /* managed: host copy newer than device's */
    size_t pooled_length;  /* the MTLBuffer's size class when it came
                               * from the device's allocator, else 0 */
    cm__metal_heap *heap;  /* the allocator's heap it lives in, or NULL */
    size_t dirty_begin, dirty_end;
} cm__metal_buffer;

static inline cm__metal_device *cm__mtl_dev(const cm_device *d) {
    return (cm__metal_device *)d->impl;
}
static inline cm__metal_stream *cm__mtl_stream(const cm_stream *s) {
    return (cm__metal_stream *)s->impl;
}
static inline cm__metal_buffer *cm__mtl_buf(const cm_buffer *b) {
    return (cm__metal_buffer *)b->impl;
}

/* The layers of the Metal device, bottom to top; each file calls only the
 * files below it (ARCHITECTURE.md; tools/ci/check-layers.sh checks):
 *   0. metal_alloc.c    the caching allocator of MTLBuffers
 *   1. metal_stream.c   streams, numbered command buffers, fences, buffers
 *                       and their tracking
 *   2. metal_pipeline.c libraries, pipelines and their cache
 *   3. metal_encode.c   the encode path of compute dispatches and blits
 *   4. metal_ops.c      cmetal's ops over the kernels of msl/
 *   5. metal_transfer.c host access and private-storage transfers
 *   6. metal_kernel.c   the kernel backend table (cmetal/kernel.h)
 *   7. metal_device.c   the backend table, devices, cmetal/metal.h */

/* ==== 0. the caching allocator (metal_alloc.c) ==== */

/* The MTLResourceOptions of a storage mode (tracked hazards, default CPU
 * cache mode). */
static inline cm__uint cm__storage_options(cm_storage_mode mode) {
    switch (mode) {
    case CM_STORAGE_MANAGED: return CM__MTL_RESOURCE_STORAGE_MANAGED;
    case CM_STORAGE_PRIVATE: return CM__MTL_RESOURCE_STORAGE_PRIVATE;
    default: return CM__MTL_RESOURCE_STORAGE_SHARED;
    }
}

/* Init with the device (the default cache limit from its recommended
 * working set, 0 when unknown; its residency set where it has one);
 * destroy when it goes (releases the cache and the set). */
void cm__metal_alloc_init(cm__metal_alloc *a, cm__id device, uint64_t recommended_working_set);
void cm__metal_alloc_destroy(cm__metal_alloc *a);

/* Sets obj's label to `label` (NULL: none). Errors as `func`, naming the
 * label as `arg`: CM_ERR_INVALID_ARGUMENT when it is not UTF-8. */
cm_status cm__metal_set_label(const char *func, const char *arg, cm__id obj, const char *label);

/* An MTLBuffer (+1 in *out) of at least `size` bytes (0 counts as 1) of the
 * storage mode for a new cm_buffer: a cached one of the size class, else a
 * new one from one of the allocator's heaps (a small one, cache on) or of
 * `device` (added to the residency set within the wired limit); *length
 * is what it holds and *heap its heap (or NULL), to give back. It is labelled `label`
 * (NULL: none, also clearing a cached one's). Errors as `func`:
 * CM_ERR_OUT_OF_MEMORY past the memory limit or when Metal refuses (after
 * releasing the cache and trying again); CM_ERR_INVALID_ARGUMENT for a
 * label that is not UTF-8 (nothing taken). */
cm_status cm__metal_alloc_take(const char *func, cm__metal_alloc *a, cm__id device, size_t size,
                               cm_storage_mode storage, uint64_t max_length, const char *label,
                               cm__id *out, size_t *length, cm__metal_heap **heap);

/* Gives back what take handed out, once the device is done with it: into
 * the cache when `reusable` and the cache has room (staying in the
 * residency set), else released (and taken out of the set). */
void cm__metal_alloc_give(cm__metal_alloc *a, cm__id mtl, size_t length, cm__metal_heap *heap,
                          cm_storage_mode storage, bool reusable);

/* The backend's cmetal/memory.h entries. */
extern const cm__memory_backend cm__metal_memory_backend;

/* ==== 1. streams, command buffers, fences, buffers (metal_stream.c) ==== */

/* Starts encoding on the stream: pushes a pool, takes the stream's lock
 * and gives its open command buffer. Always pair with
 * cm__metal_encode_end, whatever the status. */
cm_status cm__metal_encode_begin(const char *func, cm_stream *stream, cm__id *cb, void **pool);
void cm__metal_encode_end(cm_stream *stream, void *pool);

/* Records that the stream's open command buffer uses the buffer (and
 * writes it when `write`), and pushes host writes of managed storage to
 * the device first. Stream lock held. */
void cm__metal_track(cm_stream *stream, cm_buffer *buffer, bool write);

/* The fence that orders the passes of the stream's open command buffer
 * touching any of the n buffers (NULL entries skipped), when one of them is
 * untracked; else NULL (+0). The pass sends waitForFence: before its
 * commands and updateFence: before endEncoding. Stream lock held. */
cm_status cm__metal_pass_fence(const char *func, cm_stream *stream, cm_buffer *const *buffers,
                               int n, cm__id *out);

/* Releases the stream's committed command buffers that have completed
 * (so the resources they retain go), noting a failed one for the next
 * flush. Takes the stream's lock. Every path that sees completion (a
 * flush that waits, a wait for a buffer, a buffer's release) does this, so
 * no command buffer is retained past its observed completion. */
void cm__metal_drop_completed(cm_stream *stream);

/* Commits the open command buffer (if any) and, when `wait`, waits for
 * every command buffer committed so far; reports a failed command buffer
 * once (read from its own status and error). Takes the stream's lock, but
 * never holds it while waiting. */
cm_status cm__metal_flush(const char *func, cm_stream *stream, bool wait);

/* Commits the open command buffer (if any) without waiting and returns the
 * number of the last command buffer opened on the stream: whatever was
 * encoded on it before the call is in command buffers numbered at most
 * that. Takes the stream's lock. */
uint64_t cm__metal_commit(cm_stream *stream);

/* Waits for the committed command buffers numbered at most `through` (not
 * for those committed after them), lets those go (noting a failed one),
 * then reports a failure noted on the stream once, as cm__metal_flush
 * does. Later ones stay, so that their failure goes to whoever waits for
 * them (or to a prune on another thread, which the next wait reports).
 * Takes the stream's lock, but never holds it while waiting. */
cm_status cm__metal_wait_through(const char *func, cm_stream *stream, uint64_t through);

/* Waits for the work of every stream on the buffer (its writes only when
 * `writes_only`), committing what is still open. */
cm_status cm__wait_buffer(const char *func, cm_buffer *buffer, bool writes_only);

/* A buffer's tracking state (+ its MTLBuffer, consumed, by adopt). */
cm_status cm__buffer_impl(const char *func, cm_buffer *buffer);
void cm__buffer_adopt(cm_buffer *buffer, cm__id mtl);

/* The backend entries of this layer, without their autorelease pool
 * (metal_device.c gives each one). */
cm_status cm__metal_stream_init_unpooled(cm_stream *stream, cm__id queue, const char *label);
void cm__metal_stream_destroy_unpooled(cm_stream *stream);
uint64_t cm__metal_stream_submissions(const cm_stream *stream);
void cm__metal_stream_gpu_time(const cm_stream *stream, cm_stream_gpu_time *out);
cm_status cm__metal_stream_signal_unpooled(cm_stream *stream, cm_fence *fence);
cm_status cm__metal_stream_wait(cm_stream *stream, const cm_fence *fence);
bool cm__metal_fence_signaled_unpooled(const cm_fence *fence);
cm_status cm__metal_fence_wait_unpooled(const cm_fence *fence, uint64_t timeout_ns);
void cm__metal_fence_destroy_unpooled(cm_fence *fence);
cm_status cm__metal_buffer_alloc_unpooled(cm_device *device, cm_buffer *buffer, const char *label);
cm_status cm__metal_buffer_wrap_host_unpooled(cm_device *device, cm_buffer *buffer,
                                              const cm_host_memory_desc *desc);
void cm__metal_buffer_free_unpooled(cm_buffer *buffer);
void cm__metal_buffer_publish(cm_buffer *buffer);
void cm__metal_buffer_host_modified(cm_buffer *buffer, size_t offset, size_t size);

/* ==== 2. pipelines (metal_pipeline.c), 3. the encode path (metal_encode.c) ==== */

/* The device's cache of libraries and pipelines: init with the device,
 * destroy when it goes (releases them). Libraries and pipelines are cached
 * under cache_lock and live as long as the device. */
void cm__metal_cache_init(cm__metal_device *d);
void cm__metal_cache_destroy(cm__metal_device *d);

/* Compiles `source` into a new library (+1 in *out), uncached. Errors as
 * `func`: CM_ERR_COMPILE with the NSError's text. */
cm_status cm__metal_compile(const char *func, cm__id device, const char *source,
                            const cm__compile_options *options, cm__id *out);

/* The device's library of `source` and options (+1 in *out), compiled on
 * first use; *serial names it in cm__metal_pipeline keys. */
cm_status cm__metal_library(const char *func, cm__metal_device *d, const char *source,
                            const cm__compile_options *options, cm__id *out, uint64_t *serial);

/* The same for a metallib's bytes. */
cm_status cm__metal_library_data(const char *func, cm__metal_device *d, const void *data,
                                 size_t size, cm__id *out, uint64_t *serial);

/* The pipeline of function `name` of a cached library with the constants
 * (+1 in *out), labelled `label` (NULL: none; part of the cache key), made
 * on first use, its limits and (sig not NULL) its bindings from Metal's
 * reflection. */
cm_status cm__metal_pipeline(const char *func, cm__metal_device *d, cm__id library,
                             uint64_t library_serial, const char *name,
                             const cm_function_constant *constants, uint32_t nconst,
                             const char *label, cm__id *out, cm_kernel_info *info,
                             cm__kernel_signature *sig);

/* Encodes the launch (checked arguments only, nargs <= 2 *
 * CM_KERNEL_MAX_BUFFERS; a binding's native is an id<MTLBuffer>) of the
 * pipeline into the stream's open command buffer and tracks its
 * cm_buffers. Takes the stream's lock. Compute and blit passes go through
 * one encode path (cm__pass_begin, cm__pass_end). */
cm_status cm__metal_dispatch(cm__id pipeline, const cm__kernel_launch *launch);

/* One side of a byte copy: an MTLBuffer and the cm_buffer that holds it
 * (tracked) or NULL (then native is a scratch or staging MTLBuffer). */
typedef struct cm__metal_span {
    cm_buffer *buffer;
    cm__id native;
    size_t offset;
} cm__metal_span;

/* Encodes a blit on the device's default stream: a copy of `size` bytes
 * from src to dst, or (src.native == NULL) synchronizeResource of dst;
 * tracked on the spans' cm_buffers. Not committed. */
cm_status cm__metal_blit(const char *func, cm_device *device, cm__metal_span dst,
                         cm__metal_span src, size_t size);

/* ==== 4. ops (metal_ops.c), 5. transfers (metal_transfer.c) ==== */

/* Kernel state of a device (metal_ops.c): init right after the device is
 * allocated, destroy when it goes (releases the library and pipelines). */
void cm__metal_kernels_init(cm__metal_device *d);
void cm__metal_kernels_destroy(cm__metal_device *d);

/* Whether the ops may use the kernels with SIMD-group functions on a
 * device of these families (metal_ops.c). */
bool cm__metal_has_simd_reductions(const cm_device_info *info);

/* Encodes a compute copy of `size` bytes on the stream, at any offsets (a
 * blit needs multiples of 4 on macOS). Not committed. metal_ops.c. */
cm_status cm__metal_copy_bytes(const char *func, cm_stream *stream, cm__metal_span dst,
                               cm__metal_span src, size_t size);

/* The backend's run_op: encodes one op on the device's default stream
 * without committing it. */
cm_status cm__metal_run_op(cm_device *device, const cm__op *op);

/* Test hooks, internal. Compiles `source` as a Metal library and drops it:
 * CM_ERR_COMPILE with the NSError text when it does not compile. */
cm_status cm__metal_compile_source(cm_device *device, const char *source);
/* Forces the threads per threadgroup of every dispatch (0: automatic). */
void cm__metal_set_threadgroup_override(unsigned long threads);

/* Host access (a managed buffer's device writes brought back) and copies
 * to and from private storage through the staging pool (metal_transfer.c),
 * without their autorelease pool. */
cm_status cm__metal_buffer_prepare_host_unpooled(cm_buffer *buffer, bool write);
cm_status cm__metal_buffer_transfer_unpooled(cm_buffer *buffer, size_t offset, void *host,
                                             size_t size, bool to_device);

/* Staging buffers of the transfers: CM__STAGING_CHUNK bytes each. A
 * transfer moves at most that much per command buffer, with two staging
 * buffers in turn, so that the host's copy of one chunk overlaps the
 * device's copy of the next. */
#define CM__STAGING_CHUNK ((size_t)4 << 20)

/* Test hooks, internal: how many staging buffers the device has made, and
 * a fault: the next transfer's chunk number `chunk` (from 0) gets an
 * invalid blit that fails its command buffer (UINT64_MAX: none). */
uint64_t cm__metal_staging_made(cm_device *device);
void cm__metal_set_transfer_fault(uint64_t chunk);

/* ==== 6., 7. the backend tables (metal_kernel.c, metal_device.c) ==== */

/* The backend's table for cmetal/kernel.h (metal_kernel.c). */
extern const cm__kernel_backend cm__metal_kernel_backend;

#endif /* CMETAL_METAL_INTERNAL_H */
