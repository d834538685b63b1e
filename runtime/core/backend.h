/* SPDX-License-Identifier: MIT */
/* The device backend interface, and the internal layout of devices and
 * buffers. A backend (runtime/cpu, runtime/metal) fills a cm__backend table;
 * the core never asks which backend it holds. */
#ifndef CMETAL_CORE_BACKEND_H
#define CMETAL_CORE_BACKEND_H

#include "internal.h"

#include <pthread.h>

#include <cmetal/buffer.h>
#include <cmetal/dtype.h>
#include <cmetal/kernel.h>
#include <cmetal/memory.h>
#include <cmetal/stream.h>
#include <cmetal/tensor.h>

typedef struct cm__op cm__op;
typedef struct cm__kernel_backend cm__kernel_backend;

/* A device's buffer cache (cmetal/memory.h), behind runtime/core/memory.c's
 * checks. Every entry takes the cache's lock; none fails. */
typedef struct cm__memory_backend {
    void (*info)(const cm_device *device, cm_memory_info *out);
    void (*reset_peak)(cm_device *device);
    /* Sets the cache limit (cache) or the memory limit; returns the old. */
    uint64_t (*set_limit)(cm_device *device, bool cache, uint64_t bytes);
    void (*clear)(cm_device *device);
    /* Sets the wired limit, the old one in *old; false (nothing done)
     * where the device has no residency set. */
    bool (*set_wired_limit)(cm_device *device, uint64_t bytes, uint64_t *old);
} cm__memory_backend;

typedef struct cm__backend {
    cm_device_type type;
    /* Frees backend state; called once when the last device reference goes. */
    void (*destroy)(cm_device *device);
    cm_status (*get_info)(const cm_device *device, cm_device_info *out);
    /* Allocates buffer->size bytes of buffer->storage (already resolved and
     * checked against the device) and sets host and native; `label` (may
     * be NULL: none) names the native object where the backend has one. */
    cm_status (*buffer_alloc)(cm_device *device, cm_buffer *buffer, const char *label);
    /* Makes the buffer use desc's memory, or a copy of it (then sets
     * CM_BUFFER_COPIED). Must not call desc->release. */
    cm_status (*buffer_wrap_host)(cm_device *device, cm_buffer *buffer,
                                  const cm_host_memory_desc *desc);
    /* Makes the buffer use a foreign native buffer object (Metal: an
     * id<MTLBuffer>, non-NULL, which it checks against the device and
     * retains): sets size, storage, host, native and impl. Errors as
     * `func`, naming the object as `arg`. NULL when the device has none
     * (the CPU). */
    cm_status (*buffer_wrap_native)(const char *func, const char *arg, cm_device *device,
                                    cm_buffer *buffer, void *native);
    /* Releases what buffer_alloc or a wrap made, after pending
     * device work on the buffer has finished. */
    void (*buffer_free)(cm_buffer *buffer);
    /* Before host access: waits for pending device writes (and, for writes,
     * reads). NULL when nothing is ever pending. */
    cm_status (*buffer_prepare_host)(cm_buffer *buffer, bool write);
    /* After the host wrote [offset, offset + size) through buffer->host
     * (managed storage must be told). NULL when nothing is needed. */
    void (*buffer_host_modified)(cm_buffer *buffer, size_t offset, size_t size);
    /* Before another device's user reads the buffer directly (a kDLMetal
     * export): pushes host writes to the device copy. NULL when nothing is
     * needed. */
    void (*buffer_publish)(cm_buffer *buffer);
    /* Copies between host memory and a buffer the host cannot see, through
     * the device (staging), and waits. NULL when every buffer is visible. */
    cm_status (*buffer_transfer)(cm_buffer *buffer, size_t offset, void *host, size_t size,
                                 bool to_device);
    /* The buffer cache; NULL when the device has none (the CPU): the
     * public functions then fail with CM_ERR_UNSUPPORTED. */
    const cm__memory_backend *memory;

    /* Streams and fences; every entry may be NULL on a device whose work
     * is synchronous (the CPU): streams are then always idle and fences
     * signaled. */
    /* `native`: the program's own queue to adopt and retain (Metal: an
     * id<MTLCommandQueue> of the device, already checked), or NULL for a
     * new one, labelled `label` (NULL: the backend's own label). */
    cm_status (*stream_init)(cm_stream *stream, void *native, const char *label);
    void (*stream_destroy)(cm_stream *stream); /* after waiting for its work */
    /* Submits batched work, and waits for it when `wait`; errors as `func`. */
    cm_status (*stream_flush)(const char *func, cm_stream *stream, bool wait);
    uint64_t (*stream_submissions)(const cm_stream *stream);
    void (*stream_gpu_time)(const cm_stream *stream, cm_stream_gpu_time *out);
    cm_status (*stream_signal)(cm_stream *stream, cm_fence *fence);
    cm_status (*stream_wait)(cm_stream *stream, const cm_fence *fence);
    cm_status (*fence_wait)(const cm_fence *fence, uint64_t timeout_ns);
    bool (*fence_signaled)(const cm_fence *fence);
    void (*fence_destroy)(cm_fence *fence);

    /* Runs one op (see cm__op below), validated by runtime/core/ops.c.
     * NULL when the device runs no ops. May refuse what it cannot do with
     * CM_ERR_UNSUPPORTED (Metal: float64). */
    cm_status (*run_op)(cm_device *device, const cm__op *op);

    /* Custom kernels (cmetal/kernel.h); NULL when the device has none (the
     * CPU): the public functions then fail with CM_ERR_UNSUPPORTED. */
    const cm__kernel_backend *kernels;
} cm__backend;

struct cm_stream {
    cm__refcount ref;
    cm_device *device; /* retained, except by the device's default stream */
    bool is_default;
    void *impl;
    cm_stream *prev, *next; /* the device's list of live streams */
};

struct cm_fence {
    cm__refcount ref;
    cm_device *device; /* retained */
    uint64_t value;
    void *event; /* id<MTLSharedEvent> on Metal, NULL otherwise */
    void *impl;
};

struct cm_device {
    cm__refcount ref;
    bool immortal; /* static, never freed: retain/release do nothing (the CPU) */
    const cm__backend *backend;
    uint32_t index;               /* as cm_device_open numbers devices of its type */
    void *impl;                   /* backend state */
    cm_stream *default_stream;    /* owned; does not retain the device */
    pthread_mutex_t streams_lock; /* guards `streams` */
    cm_stream *streams;           /* every live stream, the default one included */
};

struct cm_buffer {
    cm__refcount ref;
    cm_device *device; /* retained */
    size_t size;
    cm_storage_mode storage;
    uint32_t flags; /* CM_BUFFER_* */
    void *host;     /* NULL when the host cannot see the memory */
    void *native;   /* backend object (id<MTLBuffer>) or NULL */
    void *impl;     /* backend bookkeeping */
    /* Set once `native` has been handed to the program (cm_buffer_get_info,
     * a kDLMetal export): it may hold the object, so it is never reused. */
    atomic_bool native_shared;
    cm_release_fn release;
    void *release_context;
};

struct cm_tensor {
    cm__refcount ref;
    cm_buffer *buffer; /* retained */
    cm_dtype dtype;
    int32_t ndim;
    uint32_t flags; /* CM_TENSOR_*, includes the buffer's read-only flag */
    bool in_buffer; /* allocated in its buffer's block, freed with the buffer */
    uint64_t byte_offset;
    int64_t shape[CM_MAX_NDIM];
    int64_t strides[CM_MAX_NDIM];
};

/* ---------------------------------------------------------------- ops
 * The core (runtime/core/ops.c) checks every op once: shapes, dtypes,
 * broadcasting, aliasing, read-only outputs and devices. It hands the
 * backend one cm__op in which every operand is already laid out over the
 * same iteration shape, so a backend only iterates:
 * - fill/copy/cast/unary/binary: `shape` is out's shape; inputs carry stride
 *   0 on broadcast axes.
 * - reduce: `shape` is the input's shape; out carries stride 0 on the
 *   reduced axes (`axis`, or every axis when axis is -1), i.e. out[i] is
 *   the reduction of every in[0][j] that maps onto it.
 * numel > 0 always (the core handles empty ops). Strides are in elements of
 * each operand's dtype and may be negative or 0. Out never partially
 * overlaps an input; it may be the identical view of an elementwise input.
 * The cm__op lives only for the call: a backend that runs the op later (a
 * Metal command buffer) copies what it needs and retains the buffers until
 * the work has finished, since the caller may release its tensors as soon
 * as the call returns. Errors are reported with cm__fail_as(op->func, ...). */
typedef enum cm__op_kind {
    CM__OP_FILL = 1,   /* out = value (already converted to out.dtype) */
    CM__OP_COPY = 2,   /* out = in[0], same dtype */
    CM__OP_CAST = 3,   /* out = convert(in[0]) (ops.h conversion rules) */
    CM__OP_UNARY = 4,  /* out = code(in[0]), code a cm_unary_op */
    CM__OP_BINARY = 5, /* out = code(in[0], in[1]), code a cm_binary_op */
    CM__OP_REDUCE = 6  /* out = code over in[0], code a cm_reduce_op */
} cm__op_kind;

typedef struct cm__operand {
    cm_buffer *buffer; /* borrowed; same device as the op */
    cm_dtype dtype;
    uint64_t byte_offset;         /* of the element at index 0 */
    int64_t strides[CM_MAX_NDIM]; /* elements, over cm__op.shape */
} cm__operand;

struct cm__op {
    const char *func;  /* the public function, for error messages */
    cm_stream *stream; /* borrowed; of the op's device */
    cm__op_kind kind;
    int32_t code;
    int32_t ndim;
    int64_t shape[CM_MAX_NDIM];
    int64_t numel; /* product of shape, > 0 */
    int32_t axis;  /* reduce: the reduced axis of shape, or -1 for all */
    int32_t nin;   /* inputs used: 0 (fill), 1 or 2 */
    cm__operand out;
    cm__operand in[2];
    union {
        uint8_t bytes[8];
        uint64_t align_;
    } value; /* fill: one element of out.dtype */
};

/* ---------------------------------------------------------------- kernels
 * runtime/core/kernel.c checks every argument of cmetal/kernel.h and hands
 * the backend resolved values only. */

/* Compile options with the defaults resolved. */
typedef struct cm__compile_options {
    cm_math_mode math_mode;    /* SAFE, RELAXED or FAST, never DEFAULT */
    uint32_t language_version; /* 0: the framework's default */
} cm__compile_options;

/* One checked dispatch argument, as the core's kernel launch gives it and
 * as a backend's encoder reads it (the backend's own ops fill it too). */
typedef struct cm__kernel_bind {
    cm_arg_type type; /* INPUT, OUTPUT, BYTES or THREADGROUP */
    uint32_t index;
    cm_buffer *buffer; /* INPUT, OUTPUT: borrowed, of the kernel's device;
                         * tracked (written for OUTPUT) */
    void *native;      /* INPUT, OUTPUT when buffer is NULL: a backend's own
                         * untracked buffer object (Metal: a scratch
                         * id<MTLBuffer>); never set by the core */
    uint64_t offset;   /* INPUT, OUTPUT: bytes */
    const void *data;  /* BYTES */
    size_t size;       /* BYTES, THREADGROUP */
} cm__kernel_bind;

/* One checked kernel launch: grid and threadgroup sizes are >= 1 and fit. */
typedef struct cm__kernel_launch {
    const char *func;
    cm_stream *stream; /* borrowed, of the kernel's device */
    const cm__kernel_bind *args;
    uint32_t nargs;
    cm_grid_unit unit;
    uint64_t grid[3];
    uint32_t group[3];
} cm__kernel_launch;

/* The argument bindings of a kernel's pipeline, from the framework's
 * reflection (MTLComputePipelineReflection: bindings, or arguments before
 * macOS 13); known is false where the framework gave none. Bit i: index i. */
#define CM__BINDING_NAME_MAX 48
typedef struct cm__kernel_signature {
    bool known;
    uint32_t buffers;      /* [[buffer(i)]] parameters the kernel uses */
    uint32_t written;      /* of those, the ones it may write (device, not const) */
    uint32_t threadgroups; /* [[threadgroup(i)]] parameters it uses */
    char buffer_names[CM_KERNEL_MAX_BUFFERS][CM__BINDING_NAME_MAX]; /* "" if unknown */
    char threadgroup_names[CM_KERNEL_MAX_BUFFERS][CM__BINDING_NAME_MAX];
} cm__kernel_signature;

struct cm__kernel_backend {
    /* A library of `source` (+1 in *out), compiled or from the device's
     * cache. Errors as `func`: CM_ERR_COMPILE with the diagnostics. */
    cm_status (*library_create)(const char *func, cm_device *device, const char *source,
                                const cm__compile_options *options, void **out);
    /* A library from precompiled bytes (+1 in *out), or from the cache.
     * Errors as `func`: CM_ERR_INVALID_ARGUMENT when the framework refuses
     * the bytes. */
    cm_status (*library_load)(const char *func, cm_device *device, const void *data, size_t size,
                              void **out);
    void (*library_release)(void *library);
    /* The pipeline of a function of the library (+1 in *out) with the
     * constants (checked: supported dtypes, distinct indices), its limits
     * and its bindings. */
    cm_status (*kernel_create)(const char *func, cm_library *library, const cm_kernel_desc *desc,
                               void **out, cm_kernel_info *info, cm__kernel_signature *sig);
    void (*kernel_release)(void *kernel);
    /* Encodes the dispatch on d->stream without committing; tracks the
     * tensors' buffers as read or written. */
    cm_status (*dispatch)(cm_kernel *kernel, const cm__kernel_launch *d);
    /* cm_device_set_pipeline_cache / cm_device_save_pipeline_cache. */
    cm_status (*pipeline_cache_set)(const char *func, cm_device *device, const char *path);
    cm_status (*pipeline_cache_save)(const char *func, cm_device *device);
};

struct cm_library {
    cm__refcount ref;
    cm_device *device; /* retained */
    void *impl;        /* backend library, +1 */
};

struct cm_kernel {
    cm__refcount ref;
    cm_library *library; /* retained */
    void *impl;          /* backend pipeline, +1 */
    cm_kernel_info info;
    cm__kernel_signature signature;
    char name[256]; /* the kernel function, for messages */
};

/* Converts one element between any two dtypes by the ops.h rules. */
void cm__convert_element(cm_dtype to, void *dst, cm_dtype from, const void *src);

/* The one constructor of tensors: validates the layout against the buffer
 * (reporting errors as `func`), retains the buffer and returns +1 in *out.
 * NULL strides mean compact row-major. */
cm_status cm__tensor_make(const char *func, cm_buffer *buffer, cm_dtype dtype, int32_t ndim,
                          const int64_t *shape, const int64_t *strides, uint64_t byte_offset,
                          uint32_t flags, cm_tensor **out);

/* What a new buffer is made of (cm__buffer_make). */
typedef enum cm__buffer_kind {
    CM__BUFFER_ALLOC = 1,  /* new memory: size, storage */
    CM__BUFFER_HOST = 2,   /* host memory: host */
    CM__BUFFER_NATIVE = 3, /* a backend's buffer object: native, flags, release */
} cm__buffer_kind;

typedef struct cm__buffer_source {
    cm__buffer_kind kind;
    size_t size;                     /* ALLOC */
    cm_storage_mode storage;         /* ALLOC: resolved, never DEFAULT */
    const char *label;               /* ALLOC: may be NULL */
    const cm_host_memory_desc *host; /* HOST: checked by the caller */
    void *native;                    /* NATIVE: non-NULL */
    const char *native_arg;          /* NATIVE: its name, for messages */
    uint32_t flags;                  /* NATIVE: CM_BUFFER_READ_ONLY or 0 */
    cm_release_fn release;           /* NATIVE: may be NULL */
    void *release_context;
} cm__buffer_source;

/* The one constructor of buffers: a cm_buffer over src, made by the
 * device's backend table (buffer_alloc, buffer_wrap_host,
 * buffer_wrap_native), with `extra` zeroed bytes after the struct in the
 * same allocation, aligned for any type. Retains the device; +1 in *out.
 * Errors as `func` (the backend's own as the public function it serves);
 * a wrap's release callback is never called on failure. */
cm_status cm__buffer_make(const char *func, cm_device *device, const cm__buffer_source *src,
                          size_t extra, cm_buffer **out);

/* A tensor over a new buffer that wraps desc's memory, both in one
 * allocation: the tensor owns the buffer's one reference, and its struct
 * lives until the buffer dies. The layout must already be valid for
 * desc->size bytes (checked by the caller). Errors are reported as
 * cm_buffer_wrap_host; desc->release is never called on failure. */
cm_status cm__tensor_wrap_host(cm_device *device, const cm_host_memory_desc *desc, cm_dtype dtype,
                               int32_t ndim, const int64_t *shape, const int64_t *strides,
                               uint64_t byte_offset, uint32_t flags, cm_tensor **out);

/* Element count and compact row-major strides for a shape, overflow-checked
 * (also against the byte size numel * itemsize fitting in int64). */
cm_status cm__shape_compact(const char *func, int32_t ndim, const int64_t *shape, size_t itemsize,
                            int64_t *strides_out, int64_t *numel_out);

/* The constructor every backend's device goes through: `device` with
 * refcount 1 over `impl`, with its default stream (made in
 * `default_stream` when not NULL: a backend's static device, the CPU's;
 * else allocated). On failure the backend still owns impl. */
cm_status cm__device_init(cm_device *device, const cm__backend *backend, void *impl,
                          cm_stream *default_stream);

/* cm__device_init of a newly allocated device. */
cm_status cm__device_new(const cm__backend *backend, void *impl, cm_device **out);

/* Destroys a device whose last reference went: its default stream (after
 * waiting for its work), then the backend state. */
void cm__device_destroy(cm_device *device);

/* A new stream of the device (the default one when is_default; over the
 * program's own queue `native` unless NULL; labelled `label` unless NULL),
 * its backend state made and linked into the device's list (stream.c):
 * cm__stream_init in place, cm__stream_new allocated; and its end: flushed
 * and waited for, unlinked, backend state destroyed. */
cm_status cm__stream_init(cm_stream *stream, cm_device *device, bool is_default, void *native,
                          const char *label);
cm_status cm__stream_new(cm_device *device, bool is_default, void *native, const char *label,
                         cm_stream **out);

/* A new fence of the device over a backend's event object (+1, taken on
 * success) signaled at `value`; +1 in *out, retains the device. Errors
 * as `func`. */
cm_status cm__fence_make(const char *func, cm_device *device, void *event, uint64_t value,
                         cm_fence **out);
void cm__stream_destroy(cm_stream *stream);

/* Submits and waits for the work of every live stream of the device;
 * reports the first failure as `func`. */
cm_status cm__device_sync_streams(const char *func, cm_device *device);

/* Calls visit(stream, context) with the device's stream list locked, if
 * `stream` (known only by address; it may have died) is one of the
 * device's live streams; returns CM_OK otherwise. A stream flushes its
 * work before it leaves the list. */
cm_status cm__device_visit_stream(cm_device *device, const cm_stream *stream,
                                  cm_status (*visit)(cm_stream *stream, void *context),
                                  void *context);

/* Backend entry points, provided by runtime/cpu and runtime/metal (or its
 * stub when the Metal backend is not built). */
cm_status cm__cpu_device_count(uint32_t *count);
cm_status cm__cpu_device_open(uint32_t index, cm_device **out);
/* A CPU device whose large ops use `threads` threads (checked: 1 to
 * CM_CPU_MAX_THREADS); 1 gives the shared device. Errors as
 * cm_device_open_desc. */
cm_status cm__cpu_device_open_threads(uint32_t index, uint32_t threads, cm_device **out);
cm_status cm__metal_device_count(uint32_t *count);
cm_status cm__metal_device_open(uint32_t index, cm_device **out);

/* The dtype table entry, or NULL for an invalid dtype. */
const cm_dtype_info *cm__dtype(cm_dtype dtype);

/* "shared", "managed", "private", "default". */
const char *cm__storage_mode_name(cm_storage_mode storage);

/* Host allocation that is not zeroed, for buffer contents. */
void *cm__alloc_raw(size_t size, size_t align);

#endif /* CMETAL_CORE_BACKEND_H */
