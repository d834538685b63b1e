/* SPDX-License-Identifier: MIT */
/* Ops on Metal: the msl/ kernels, compiled from the embedded source at
 * first use per device, one pipeline per kernel cached with the device,
 * all through the path of custom kernels: its library and pipeline cache
 * (metal_pipeline.c), and its dispatch encoder (metal_encode.c).
 * run_op encodes a dispatch into the default stream's open command buffer
 * and never commits: ops between two syncs share one command buffer.
 *
 * These kernels have run only on softmetal (tools/softmetal), never on
 * real Metal hardware. */
#include "metal_internal.h"

#include <inttypes.h>
#include <stdatomic.h>
#include <string.h>

/* The joined text of msl/common.h and msl/ *.metal (msl/CMakeLists.txt),
 * and of the kernels that need SIMD-group functions. */
extern const char cm__msl_source[];
extern const char cm__msl_simd_source[];

static const char *const cm__kernel_names[CM__KERNEL_COUNT] = {
    [CM__KERNEL_FILL] = "cm_fill",
    [CM__KERNEL_COPY] = "cm_copy",
    [CM__KERNEL_CAST] = "cm_cast",
    [CM__KERNEL_UNARY] = "cm_unary",
    [CM__KERNEL_BINARY] = "cm_binary",
    [CM__KERNEL_REDUCE_SERIAL] = "cm_reduce_serial",
    [CM__KERNEL_REDUCE_BARRIER] = "cm_reduce_threadgroup_tg",
    [CM__KERNEL_REDUCE_THREADGROUP] = "cm_reduce_threadgroup",
};

/* The argument structs of msl/common.h, field for field. */
typedef struct cm__ew_args {
    uint32_t ndim, code, out_dtype, in0_dtype, in1_dtype, pad_;
    int64_t numel;
    int64_t out_offset, in0_offset, in1_offset;
    uint64_t value;
    int64_t shape[CM_MAX_NDIM];
    int64_t out_strides[CM_MAX_NDIM];
    int64_t in0_strides[CM_MAX_NDIM];
    int64_t in1_strides[CM_MAX_NDIM];
} cm__ew_args;

typedef struct cm__reduce_args {
    uint32_t outer_ndim, inner_ndim, code, out_dtype, in_dtype, stage;
    int64_t nout, count, split, chunk;
    int64_t out_offset, in_offset;
    int64_t outer_shape[CM_MAX_NDIM];
    int64_t outer_out_strides[CM_MAX_NDIM];
    int64_t outer_in_strides[CM_MAX_NDIM];
    int64_t inner_shape[CM_MAX_NDIM];
    int64_t inner_in_strides[CM_MAX_NDIM];
} cm__reduce_args;

_Static_assert(sizeof(cm__ew_args) == 576, "matches cm_ew_args of msl/common.h");
_Static_assert(sizeof(cm__reduce_args) == 712, "matches cm_reduce_args of msl/common.h");
_Static_assert(sizeof(cm__reduce_args) <= 4096, "setBytes takes at most 4 KiB");

/* Grid limits: threads loop over the elements (grid-stride), so a grid
 * never needs more threads than this. */
enum { CM__MAX_GRID_THREADS = 1 << 16, CM__MAX_GROUPS = 1 << 16, CM__GROUP_THREADS = 256 };

/* Reductions of at least this many elements per output use one
 * threadgroup per output; shorter ones one thread per output. At most
 * CM__REDUCE_SPLIT_MAX_OUT outputs of at least CM__REDUCE_SPLIT_MIN
 * elements are split into chunks of about CM__REDUCE_CHUNK elements (at
 * most CM__REDUCE_SPLIT_MAX per output), reduced by one threadgroup each
 * and then combined. */
enum {
    CM__REDUCE_THREADGROUP_MIN = 256,
    CM__REDUCE_SPLIT_MIN = 8192,
    CM__REDUCE_SPLIT_MAX_OUT = 64,
    CM__REDUCE_CHUNK = 4096,
    CM__REDUCE_SPLIT_MAX = 1024
};
enum { CM__STAGE_WHOLE = 0, CM__STAGE_PARTIAL = 1, CM__STAGE_FINISH = 2 };

static atomic_ulong cm__tg_override;

void cm__metal_set_threadgroup_override(unsigned long threads) {
    atomic_store(&cm__tg_override, threads);
}

/* ------------------------------------------------------------ kernels */

bool cm__metal_has_simd_reductions(const cm_device_info *info) {
    /* Metal's feature set tables: SIMD-group functions (permutes such as
     * simd_shuffle_down, and reductions) from Apple7 on Apple GPUs and in
     * Mac2; a GPU in neither family (Apple's paravirtual device) may
     * refuse kernels that use them. */
    return (info->gpu_families & (CM_GPU_FAMILY_APPLE7 | CM_GPU_FAMILY_MAC2)) != 0;
}

void cm__metal_kernels_init(cm__metal_device *d) {
    pthread_mutex_init(&d->kernels_lock, NULL);
    cm__metal_cache_init(d);
}

void cm__metal_kernels_destroy(cm__metal_device *d) {
    for (int k = 0; k < CM__KERNEL_COUNT; ++k)
        cm__objc_release(d->pipelines[k]);
    cm__objc_release(d->library);
    cm__objc_release(d->simd_library);
    pthread_mutex_destroy(&d->kernels_lock);
    cm__metal_cache_destroy(d);
}

/* Safe math with the precise functions: Metal's default mathMode is not
 * safe (Apple documents relaxed on Apple silicon, fast on Intel and AMD
 * GPUs), and its mathFloatingPointFunctions default is Fast; under either
 * NaN and infinity handling or the accuracy of exp, log... is not
 * guaranteed, and our ops promise NaN rules (include/cmetal/ops.h). The
 * language version is the OS's newest. */
static const cm__compile_options cm__ops_options = {.math_mode = CM_MATH_MODE_SAFE};

cm_status cm__metal_compile_source(cm_device *device, const char *source) {
    void *pool = cm__objc_pool_push();
    cm__id library = NULL;
    const cm_status status =
        cm__metal_compile("cm__metal_compile_source", cm__mtl_dev(device)->device, source,
                          &cm__ops_options, &library);
    cm__objc_release(library);
    cm__objc_pool_pop(pool);
    return status;
}

/* Makes the pipeline of kernel k through the device's cache; kernels_lock
 * held. */
static cm_status cm__make_pipeline(const char *func, cm__metal_device *d, int k) {
    const bool simd = k == CM__KERNEL_REDUCE_THREADGROUP;
    cm__id *library = simd ? &d->simd_library : &d->library;
    uint64_t *serial = simd ? &d->simd_library_serial : &d->library_serial;
    if (*library == NULL && !simd)
        CM__TRY(cm__metal_library(func, d, cm__msl_source, &cm__ops_options, library, serial));
    if (*library == NULL && simd) {
        /* The SIMD-group kernels follow the kernels they build on: the
         * library's source is both, joined here so the library embeds
         * common.h and reduce.metal once. */
        const size_t n0 = strlen(cm__msl_source), n1 = strlen(cm__msl_simd_source);
        size_t n;
        if (cm__add_overflow_size(n0, n1, &n) || cm__add_overflow_size(n, 1, &n))
            return cm__fail_as(func, CM_ERR_OVERFLOW, "the SIMD kernels' source is too long");
        char *source = cm__alloc(n, 1);
        if (source == NULL)
            return cm__fail_as(func, CM_ERR_OUT_OF_MEMORY,
                               "no memory for the SIMD kernels' source");
        memcpy(source, cm__msl_source, n0);
        memcpy(source + n0, cm__msl_simd_source, n1 + 1);
        const cm_status status =
            cm__metal_library(func, d, source, &cm__ops_options, library, serial);
        cm__free(source);
        CM__TRY(status);
    }
    cm_kernel_info info;
    cm_status status = cm__metal_pipeline(func, d, *library, *serial, cm__kernel_names[k], NULL, 0,
                                          NULL, &d->pipelines[k], &info, NULL);
    if (status != CM_OK)
        return status;
    d->max_threads[k] = info.max_threads_per_threadgroup;
    d->simd_width[k] = info.thread_execution_width;
    return CM_OK;
}

typedef struct cm__kernel {
    cm__id pipeline; /* +0: owned by the device */
    cm__uint max_threads, simd_width;
} cm__kernel;

static cm_status cm__get_kernel(const char *func, cm_device *device, int k, cm__kernel *out) {
    cm__metal_device *d = cm__mtl_dev(device);
    pthread_mutex_lock(&d->kernels_lock);
    cm_status status = d->pipelines[k] != NULL ? CM_OK : cm__make_pipeline(func, d, k);
    if (status == CM_OK) {
        out->pipeline = d->pipelines[k];
        out->max_threads = d->max_threads[k];
        out->simd_width = d->simd_width[k];
    }
    pthread_mutex_unlock(&d->kernels_lock);
    return status;
}

/* ------------------------------------------------------------ encoding */

/* A buffer argument of an op's kernel: a tracked cm_buffer, or (buffer
 * NULL) a scratch id<MTLBuffer>. */
static cm__kernel_bind cm__bind(cm_buffer *buffer, cm__id native, bool write) {
    return (cm__kernel_bind){
        .type = write ? CM_ARG_OUTPUT : CM_ARG_INPUT, .buffer = buffer, .native = native};
}

/* Encodes one dispatch on the stream: binds[0..nbind) are the buffers, at
 * indices 0.. in that order, and binds[nbind] is filled in with the
 * argument bytes. Threadgroups of `group` threads; `groups` threadgroups
 * when nonzero, else `threads` threads in all. */
static cm_status cm__encode(const char *func, cm_stream *stream, const cm__kernel *kernel,
                            cm__kernel_bind *binds, int nbind, const void *args, size_t args_size,
                            cm__uint threads, cm__uint groups, cm__uint group) {
    const unsigned long forced = atomic_load(&cm__tg_override);
    if (forced != 0)
        group = forced;
    for (int i = 0; i < nbind; ++i)
        binds[i].index = (uint32_t)i;
    binds[nbind] = (cm__kernel_bind){
        .type = CM_ARG_BYTES, .index = (uint32_t)nbind, .data = args, .size = args_size};
    const cm__kernel_launch launch = {
        .func = func,
        .stream = stream,
        .args = binds,
        .nargs = (uint32_t)nbind + 1,
        .unit = groups != 0 ? CM_GRID_THREADGROUPS : CM_GRID_THREADS,
        .grid = {groups != 0 ? groups : threads, 1, 1},
        .group = {(uint32_t)group, 1, 1},
    };
    return cm__metal_dispatch(kernel->pipeline, &launch);
}

/* ------------------------------------------------------------ layout */

/* Merges axes of a shape that every operand walks as one: drops size-1
 * axes, and joins axis k with k + 1 when each operand's stride[k] equals
 * stride[k + 1] * shape[k + 1]. strides[j] are the nops operands'. */
static int32_t cm__coalesce(int32_t ndim, int64_t *shape, int nops,
                            int64_t (*strides)[CM_MAX_NDIM]) {
    int32_t n = 0;
    for (int32_t k = 0; k < ndim; ++k) {
        if (shape[k] == 1)
            continue;
        bool join = n > 0;
        for (int j = 0; join && j < nops; ++j) {
            int64_t step; /* wraps only for views over 2^62 bytes: then no join */
            join = !__builtin_mul_overflow(strides[j][k], shape[k], &step) &&
                   strides[j][n - 1] == step;
        }
        if (join) {
            shape[n - 1] *= shape[k];
            for (int j = 0; j < nops; ++j)
                strides[j][n - 1] = strides[j][k];
        } else {
            shape[n] = shape[k];
            for (int j = 0; j < nops; ++j)
                strides[j][n] = strides[j][k];
            ++n;
        }
    }
    return n;
}

static cm__uint cm__min_u(cm__uint a, cm__uint b) {
    return a < b ? a : b;
}

/* Threads per threadgroup for a kernel: at most CM__GROUP_THREADS, a
 * multiple of the SIMD width. */
_Static_assert(CM__GROUP_THREADS <= 256, "cm_reduce_threadgroup_tg's partial[256]");
static cm__uint cm__group_size(const cm__kernel *k) {
    cm__uint n = cm__min_u(k->max_threads, CM__GROUP_THREADS);
    if (n >= k->simd_width)
        n -= n % k->simd_width;
    return n;
}

cm_status cm__metal_copy_bytes(const char *func, cm_stream *stream, cm__metal_span dst,
                               cm__metal_span src, size_t size) {
    if (size == 0)
        return CM_OK;
    if (size > (size_t)INT64_MAX || dst.offset > (size_t)INT64_MAX ||
        src.offset > (size_t)INT64_MAX)
        return cm__fail_as(func, CM_ERR_INVALID_ARGUMENT, "size = %zu is too large", size);
    cm__ew_args a;
    memset(&a, 0, sizeof a);
    a.ndim = 1;
    a.out_dtype = a.in0_dtype = (uint32_t)CM_UINT8;
    a.numel = (int64_t)size;
    a.shape[0] = (int64_t)size;
    a.out_strides[0] = a.in0_strides[0] = 1;
    a.out_offset = (int64_t)dst.offset;
    a.in0_offset = (int64_t)src.offset;
    cm__kernel kernel;
    CM__TRY(cm__get_kernel(func, stream->device, CM__KERNEL_COPY, &kernel));
    cm__kernel_bind bind[3] = {cm__bind(dst.buffer, dst.native, true),
                               cm__bind(src.buffer, src.native, false)};
    const cm__uint threads = (cm__uint)(size < CM__MAX_GRID_THREADS ? size : CM__MAX_GRID_THREADS);
    return cm__encode(func, stream, &kernel, bind, 2, &a, sizeof a, threads, 0,
                      cm__min_u(cm__group_size(&kernel), threads));
}

/* ------------------------------------------------------------ ops */

static const char *cm__operand_name(const cm__op *op, int which) {
    switch (op->kind) {
    case CM__OP_FILL: return "tensor";
    case CM__OP_COPY:
    case CM__OP_CAST: return which < 0 ? "dst" : "src";
    case CM__OP_BINARY: return which < 0 ? "out" : which == 0 ? "a" : "b";
    default: return which < 0 ? "out" : "x";
    }
}

static cm_status cm__refuse_float64(const cm__op *op) {
    for (int which = -1; which < op->nin; ++which) {
        const cm_dtype dt = which < 0 ? op->out.dtype : op->in[which].dtype;
        if (cm__mtl_data_type(dt) == CM__MTL_DATA_NONE)
            return cm__fail_as(op->func, CM_ERR_UNSUPPORTED,
                               "%s dtype %s: Metal has no %s (cast to float32 on the CPU "
                               "device first)",
                               cm__operand_name(op, which), cm__dtype(dt)->name,
                               cm__dtype(dt)->name);
    }
    return CM_OK;
}

static cm_status cm__run_elementwise(cm_device *device, const cm__op *op) {
    int kernel_index;
    switch (op->kind) {
    case CM__OP_FILL: kernel_index = CM__KERNEL_FILL; break;
    case CM__OP_COPY: kernel_index = CM__KERNEL_COPY; break;
    case CM__OP_CAST: kernel_index = CM__KERNEL_CAST; break;
    case CM__OP_UNARY: kernel_index = CM__KERNEL_UNARY; break;
    default: kernel_index = CM__KERNEL_BINARY; break;
    }
    cm__ew_args a;
    memset(&a, 0, sizeof a);
    a.code = (uint32_t)op->code;
    a.out_dtype = (uint32_t)op->out.dtype;
    a.in0_dtype = op->nin > 0 ? (uint32_t)op->in[0].dtype : 0;
    a.in1_dtype = op->nin > 1 ? (uint32_t)op->in[1].dtype : 0;
    a.numel = op->numel;
    a.out_offset = (int64_t)op->out.byte_offset;
    a.in0_offset = op->nin > 0 ? (int64_t)op->in[0].byte_offset : 0;
    a.in1_offset = op->nin > 1 ? (int64_t)op->in[1].byte_offset : 0;
    memcpy(&a.value, op->value.bytes, sizeof a.value);
    int64_t strides[3][CM_MAX_NDIM];
    memcpy(a.shape, op->shape, sizeof a.shape);
    memcpy(strides[0], op->out.strides, sizeof strides[0]);
    for (int j = 0; j < op->nin; ++j)
        memcpy(strides[1 + j], op->in[j].strides, sizeof strides[0]);
    a.ndim = (uint32_t)cm__coalesce(op->ndim, a.shape, 1 + op->nin, strides);
    memcpy(a.out_strides, strides[0], sizeof a.out_strides);
    if (op->nin > 0)
        memcpy(a.in0_strides, strides[1], sizeof a.in0_strides);
    if (op->nin > 1)
        memcpy(a.in1_strides, strides[2], sizeof a.in1_strides);

    cm__kernel kernel;
    CM__TRY(cm__get_kernel(op->func, device, kernel_index, &kernel));
    cm__kernel_bind bind[4] = {cm__bind(op->out.buffer, NULL, true)};
    for (int j = 0; j < op->nin; ++j)
        bind[1 + j] = cm__bind(op->in[j].buffer, NULL, false);
    const cm__uint group = cm__group_size(&kernel);
    const cm__uint threads =
        (cm__uint)(op->numel < CM__MAX_GRID_THREADS ? op->numel : CM__MAX_GRID_THREADS);
    return cm__encode(op->func, op->stream, &kernel, bind, 1 + op->nin, &a, sizeof a, threads, 0,
                      cm__min_u(group, threads));
}

static cm_status cm__run_reduce(cm_device *device, const cm__op *op) {
    cm__reduce_args a;
    memset(&a, 0, sizeof a);
    a.code = (uint32_t)op->code;
    a.out_dtype = (uint32_t)op->out.dtype;
    a.in_dtype = (uint32_t)op->in[0].dtype;
    a.out_offset = (int64_t)op->out.byte_offset;
    a.in_offset = (int64_t)op->in[0].byte_offset;
    /* Split the axes: reduced ones (inner) and the others (outer). */
    int64_t outer[2][CM_MAX_NDIM] = {{0}}, inner[1][CM_MAX_NDIM] = {{0}};
    int32_t no = 0, ni = 0;
    int64_t count = 1;
    for (int32_t k = 0; k < op->ndim; ++k) {
        if (op->axis < 0 || k == op->axis) {
            a.inner_shape[ni] = op->shape[k];
            inner[0][ni++] = op->in[0].strides[k];
            count *= op->shape[k];
        } else {
            a.outer_shape[no] = op->shape[k];
            outer[0][no] = op->out.strides[k];
            outer[1][no++] = op->in[0].strides[k];
        }
    }
    a.count = count;
    a.nout = op->numel / count;
    a.outer_ndim = (uint32_t)cm__coalesce(no, a.outer_shape, 2, outer);
    a.inner_ndim = (uint32_t)cm__coalesce(ni, a.inner_shape, 1, inner);
    memcpy(a.outer_out_strides, outer[0], sizeof a.outer_out_strides);
    memcpy(a.outer_in_strides, outer[1], sizeof a.outer_in_strides);
    memcpy(a.inner_in_strides, inner[0], sizeof a.inner_in_strides);

    a.split = 1;
    a.chunk = count;
    /* One threadgroup per output (or chunk): by SIMD-group shuffles where
     * the device has SIMD-group functions and 32- or 64-lane SIMD groups,
     * else by threadgroup memory and barriers. */
    const bool use_group = count >= CM__REDUCE_THREADGROUP_MIN;
    cm__kernel kernel = {0}, serial = {0};
    if (use_group) {
        bool simd = cm__metal_has_simd_reductions(&cm__mtl_dev(device)->info);
        if (simd) {
            CM__TRY(cm__get_kernel(op->func, device, CM__KERNEL_REDUCE_THREADGROUP, &kernel));
            simd = kernel.simd_width == 32 || kernel.simd_width == 64;
        }
        if (!simd)
            CM__TRY(cm__get_kernel(op->func, device, CM__KERNEL_REDUCE_BARRIER, &kernel));
    }
    CM__TRY(cm__get_kernel(op->func, device, CM__KERNEL_REDUCE_SERIAL, &serial));
    cm__kernel_bind bind[3] = {cm__bind(op->out.buffer, NULL, true),
                               cm__bind(op->in[0].buffer, NULL, false)};
    if (!use_group) {
        const cm__uint threads =
            (cm__uint)(a.nout < CM__MAX_GRID_THREADS ? a.nout : CM__MAX_GRID_THREADS);
        return cm__encode(op->func, op->stream, &serial, bind, 2, &a, sizeof a, threads, 0,
                          cm__min_u(cm__group_size(&serial), threads));
    }
    /* Up to 256 threads (several simdgroups; the barrier kernel's
     * threadgroup array holds 256), on softmetal as on a GPU with the same
     * limits, so tests run the paths GPUs run. */
    const cm__uint group = cm__group_size(&kernel);
    if (count < CM__REDUCE_SPLIT_MIN || a.nout > CM__REDUCE_SPLIT_MAX_OUT) {
        const cm__uint groups = (cm__uint)(a.nout < CM__MAX_GROUPS ? a.nout : CM__MAX_GROUPS);
        return cm__encode(op->func, op->stream, &kernel, bind, 2, &a, sizeof a, 0, groups, group);
    }
    /* Split: partial accumulators in a scratch buffer that the command
     * buffer keeps alive, then one thread per output combines them. */
    int64_t split = (count + CM__REDUCE_CHUNK - 1) / CM__REDUCE_CHUNK;
    split = split < CM__REDUCE_SPLIT_MAX ? split : CM__REDUCE_SPLIT_MAX;
    a.chunk = (count + split - 1) / split;
    a.split = (count + a.chunk - 1) / a.chunk;
    const size_t scratch_size = (size_t)(a.nout * a.split) * 8u;
    cm__id scratch = cm__msg_newBufferWithLength_options(cm__mtl_dev(device)->device, scratch_size,
                                                         CM__MTL_RESOURCE_STORAGE_PRIVATE);
    if (scratch == NULL)
        return cm__fail_as(op->func, CM_ERR_OUT_OF_MEMORY,
                           "no scratch buffer of %zu bytes for a split reduction", scratch_size);
    cm__kernel_bind pass1[3] = {cm__bind(NULL, scratch, true),
                                cm__bind(op->in[0].buffer, NULL, false)};
    cm__kernel_bind pass2[3] = {cm__bind(op->out.buffer, NULL, true),
                                cm__bind(NULL, scratch, false)};
    a.stage = CM__STAGE_PARTIAL;
    const cm__uint tasks = (cm__uint)(a.nout * a.split);
    cm_status status =
        cm__encode(op->func, op->stream, &kernel, pass1, 2, &a, sizeof a, 0, tasks, group);
    if (status == CM_OK) {
        a.stage = CM__STAGE_FINISH;
        const cm__uint threads = (cm__uint)a.nout;
        status = cm__encode(op->func, op->stream, &serial, pass2, 2, &a, sizeof a, threads, 0,
                            cm__min_u(cm__group_size(&serial), threads));
    }
    cm__objc_release(scratch);
    return status;
}

static cm_status cm__run_op_unpooled(cm_device *device, const cm__op *op) {
    CM__TRY(cm__refuse_float64(op));
    switch (op->kind) {
    case CM__OP_FILL:
    case CM__OP_COPY:
    case CM__OP_CAST:
    case CM__OP_UNARY:
    case CM__OP_BINARY: return cm__run_elementwise(device, op);
    case CM__OP_REDUCE: return cm__run_reduce(device, op);
    default: return cm__fail_as(op->func, CM_ERR_INTERNAL, "op kind %d is unknown", (int)op->kind);
    }
}

CM__OBJC_POOLED(cm_status, cm__metal_run_op, (cm_device * device, const cm__op *op),
                cm__run_op_unpooled(device, op))
