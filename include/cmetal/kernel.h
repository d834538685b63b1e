/* SPDX-License-Identifier: MIT */
/* cmetal/kernel.h: your own Metal kernels on cmetal tensors.
 *
 * Two ways in:
 *  - A full MSL source: cm_library_create compiles it, cm_kernel_create
 *    picks a `kernel` function by name (with function constant values),
 *    cm_kernel_dispatch binds arguments by index and dispatches it on a
 *    stream.
 *  - Only the body, as MLX's metal_kernel: cm_body_kernel_create takes
 *    named inputs and outputs and the statements of the kernel;
 *    cm_body_kernel_dispatch writes the signature for the tensors given
 *    (typed device pointers, `<name>_shape`, `<name>_strides`, `<name>_ndim`
 *    where the body uses them), substitutes template types and constants,
 *    compiles once per distinct source and dispatches.
 *
 * Tensors bound to a kernel take part in cmetal's tracking exactly as the
 * tensors of cmetal's own ops do (cmetal/stream.h): host access waits for
 * the kernel's writes (and, for host writes, its reads); work on other
 * streams is ordered only by fences. cmetal's own ops are compiled and
 * dispatched through the same path.
 *
 * Compilation: safe math with the precise math functions unless asked
 * otherwise (cmetal's own kernels use it too; Metal's default math mode is
 * relaxed on Apple silicon and fast on Intel and AMD GPUs, and its default
 * functions are the fast ones). Libraries and pipelines are cached
 * per device by source, options, function name and constant values, so
 * creating the same library or kernel again costs a lookup. Compile errors
 * fail with CM_ERR_COMPILE and the compiler's diagnostics in
 * cm_last_error(), whose `program_source:LINE:COL` lines count lines of
 * your source (macros are defined before it without shifting them).
 * cm_device_set_pipeline_cache opts into a pipeline cache on disk, so that
 * the next start of the program skips compilation.
 *
 * On a device that is not Metal (the CPU) every function here fails with
 * CM_ERR_UNSUPPORTED and says to open a Metal device. */
#ifndef CMETAL_KERNEL_H
#define CMETAL_KERNEL_H

#include <cmetal/stream.h>
#include <cmetal/tensor.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cm_library cm_library;
typedef struct cm_kernel cm_kernel;
typedef struct cm_body_kernel cm_body_kernel;

/* MTLCompileOptions.mathMode. 0 means safe: IEEE results, NaN and infinity
 * kept, and the precise exp, log, sin, pow... (mathFloatingPointFunctions
 * Precise on macOS 15). Metal's own default is relaxed (Apple silicon) or
 * fast (Intel, AMD). */
typedef enum cm_math_mode {
    CM_MATH_MODE_DEFAULT = 0, /* safe */
    CM_MATH_MODE_SAFE = 1,
    CM_MATH_MODE_RELAXED = 2, /* fast, but keeping infinities and NaN */
    CM_MATH_MODE_FAST = 3
} cm_math_mode;

/* MTLLanguageVersion of MSL major.minor: CM_MSL_VERSION(3, 1). */
#define CM_MSL_VERSION(major, minor) (((uint32_t)(major) << 16) + (uint32_t)(minor))

/* A preprocessor macro, as `#define name value`. */
typedef struct cm_macro {
    const char *name;  /* an identifier; required */
    const char *value; /* the replacement text on one line; NULL means "1" */
} cm_macro;

typedef struct cm_library_desc {
    const char *source;        /* MSL, NUL-terminated UTF-8; required */
    cm_math_mode math_mode;    /* default safe */
    uint32_t language_version; /* CM_MSL_VERSION(...); 0: the OS's newest */
    const cm_macro *macros;    /* macro_count macros; may be NULL when 0 */
    uint32_t macro_count;
} cm_library_desc;

/* Compiles `desc->source` for `device` (or takes the device's cached
 * library of the same source and options). Macros are defined by lines
 * put before the source, followed by `#line 1`, so diagnostics keep the
 * source's line numbers (the same on a Mac and on softmetal).
 * Ownership: returns +1 in *out; the library retains the device; desc and
 * its strings are borrowed for the call.
 * Options: the language version is set first (when not 0), then the math:
 * safe math is mathMode Safe with mathFloatingPointFunctions Precise where
 * the framework has them (macOS 15 / iOS 18; Precise is not the default
 * there), fastMathEnabled = NO before; relaxed and fast take the fast
 * functions (relaxed is fast math before macOS 15).
 * Errors: CM_ERR_INVALID_ARGUMENT (NULL source, a bad macro name or a
 * value with a line break, an unknown math mode), CM_ERR_UNSUPPORTED (not
 * a Metal device; a language_version that is not one of Apple's
 * MTLLanguageVersion values available on macOS: 1.1, 1.2, 2.0 to 2.4, 3.0
 * to 3.2, 4.0 (1.0 is iOS only), named as major.minor; a framework without
 * setLanguageVersion:), CM_ERR_COMPILE with the compiler's diagnostics (a
 * version the OS's compiler does not know yet fails there).
 * Thread-safety: any thread; concurrent calls compile a source once. */
CM_API cm_status cm_library_create(cm_device *device, const cm_library_desc *desc,
                                   cm_library **out);

/* Loads a precompiled library from `size` bytes at `data`: a .metallib on
 * a Mac (newLibraryWithData:error: over dispatch_data_create), softmetal's
 * library container on Linux (made by softmetal-metallib; it holds source
 * that softmetal compiles when loaded: see tools/softmetal/README.md).
 * Nothing is compiled by cmetal; the bytes are copied, and the same bytes
 * loaded again give the device's cached library. CMake's
 * cmetal_embed_library(target file symbol) embeds such a file into a
 * binary. Its kernels are checked at dispatch as compiled ones are (from
 * the pipeline's reflection, see cm_kernel_dispatch).
 * Ownership: returns +1; data is borrowed for the call.
 * Errors: CM_ERR_INVALID_ARGUMENT (NULL data, size 0, or bytes the
 * framework does not take as a library, with its message),
 * CM_ERR_UNSUPPORTED (not a Metal device; no libdispatch).
 * Thread-safety: any thread. */
CM_API cm_status cm_library_load(cm_device *device, const void *data, size_t size,
                                 cm_library **out);

/* cm_library_load of a whole file. Errors: also CM_ERR_INVALID_ARGUMENT
 * naming the path when it cannot be read. */
CM_API cm_status cm_library_load_file(cm_device *device, const char *path, cm_library **out);

/* ------------------------------------------------- pipeline cache on disk */

/* Opts the device into a pipeline cache in the file `path`, so that a
 * later start of the program skips compilation: an MTLBinaryArchive on a
 * Mac (Metal then takes the GPU code of a pipeline from it instead of
 * compiling it; the MSL front-end compile of cm_library_create still
 * runs), softmetal's archive on Linux (it holds each library's compiled
 * code, so that neither the library nor its pipelines run the C++
 * compiler: see tools/softmetal/README.md). Call it right after opening
 * the device, before creating libraries and kernels: every pipeline made
 * afterwards (cm_kernel_create, body kernels, cmetal's own ops) comes from
 * the file when it is there and is recorded for cm_device_save_pipeline_cache.
 * A missing file is an empty cache. A file the framework does not take
 * (corrupt, truncated, of another device, OS or softmetal build) is
 * ignored: everything is compiled as without a cache, no error, and the
 * next save replaces the file. A pipeline the archive cannot record (Metal
 * records no function-constant specialisations) is made all the same.
 * The directory of `path` must exist (cmetal creates none).
 * Ownership: path is copied; the device holds the archive until it is
 * freed. Nothing is written until cm_device_save_pipeline_cache: releasing
 * the device does not save.
 * Errors: CM_ERR_INVALID_ARGUMENT (NULL or empty path, a path that is a
 * directory, a directory that does not exist, naming it; a device that
 * already has a pipeline cache), CM_ERR_UNSUPPORTED (not a Metal device;
 * a framework without MTLBinaryArchive, before macOS 11 / iOS 14),
 * CM_ERR_DEVICE (the framework made no archive at all).
 * Thread-safety: any thread; pipelines created concurrently see the cache
 * or not, and are correct either way. */
CM_API cm_status cm_device_set_pipeline_cache(cm_device *device, const char *path);

/* Writes the device's pipeline cache (what it loaded and every pipeline
 * recorded since) to its path: serializeToURL:error: into a new file
 * beside it (`<path>.tmp-<pid>-<n>`), renamed over the old one, so that a
 * reader never sees half a file.
 * Call it once the program's kernels are made (for example before
 * exit); calling it again writes again.
 * Errors: CM_ERR_INVALID_ARGUMENT (no cm_device_set_pipeline_cache on this
 * device), CM_ERR_UNSUPPORTED (not a Metal device), CM_ERR_DEVICE with the
 * framework's message when the file cannot be written (I/O errors, a
 * directory removed since, a full disk).
 * Thread-safety: any thread. */
CM_API cm_status cm_device_save_pipeline_cache(cm_device *device);

/* Reference counting; release(NULL) is a no-op. Thread-safety: atomic. */
CM_API cm_status cm_library_retain(cm_library *library);
CM_API cm_status cm_library_release(cm_library *library);

/* A function constant value, for [[function_constant(index)]]. */
typedef struct cm_function_constant {
    uint32_t index;
    cm_dtype dtype;    /* CM_BOOL, CM_INT8..CM_UINT64, CM_FLOAT16, CM_BFLOAT16, CM_FLOAT32 */
    const void *value; /* one element of dtype; required */
} cm_function_constant;

typedef struct cm_kernel_desc {
    const char *name;                      /* the kernel function; required */
    const cm_function_constant *constants; /* may be NULL when constant_count is 0 */
    uint32_t constant_count;
    const char *label; /* UTF-8, the pipeline's label (set
                                               through its
                                               MTLComputePipelineDescriptor);
                                               NULL: none */
} cm_kernel_desc;

/* The compute pipeline of `desc->name` in `library`, specialised with the
 * constants (cached per device; the label is part of the key, so kernels
 * of one function with different labels have their own pipelines).
 * Ownership: returns +1; the kernel retains the library.
 * The pipeline is made with its reflection (MTLPipelineOptionArgumentInfo):
 * the buffer and threadgroup bindings it uses, and which buffers it may
 * write, for cm_kernel_dispatch's checks.
 * Errors: CM_ERR_INVALID_ARGUMENT (no such function, naming it; a constant
 * of an unsupported dtype or a repeated index), CM_ERR_UNSUPPORTED
 * (function constants on a framework without them), CM_ERR_COMPILE
 * (specialisation or pipeline creation failed, with Metal's message: a
 * kernel with function constants created without them says to set
 * desc->constants, and softmetal names each missing constant with its
 * index and type).
 * Thread-safety: any thread. */
CM_API cm_status cm_kernel_create(cm_library *library, const cm_kernel_desc *desc, cm_kernel **out);

CM_API cm_status cm_kernel_retain(cm_kernel *kernel);
CM_API cm_status cm_kernel_release(cm_kernel *kernel);

typedef struct cm_kernel_info {
    uint32_t thread_execution_width;      /* SIMD-group width */
    uint32_t max_threads_per_threadgroup; /* of this pipeline */
    uint32_t static_threadgroup_memory;   /* bytes of threadgroup variables
                                             declared in the kernel (0 where
                                             the framework cannot tell) */
} cm_kernel_info;

/* The pipeline's limits. Thread-safety: any thread. */
CM_API cm_status cm_kernel_get_info(const cm_kernel *kernel, cm_kernel_info *out);

/* One argument of a dispatch. */
typedef enum cm_arg_type {
    CM_ARG_NONE = 0,       /* ignored entry */
    CM_ARG_INPUT = 1,      /* tensor the kernel only reads: [[buffer(index)]] */
    CM_ARG_OUTPUT = 2,     /* tensor the kernel writes (and may read) */
    CM_ARG_BYTES = 3,      /* `size` bytes at `data` (setBytes): scalars, small structs */
    CM_ARG_THREADGROUP = 4 /* `size` bytes of [[threadgroup(index)]] memory */
} cm_arg_type;

/* The most bytes one CM_ARG_BYTES argument may have (Metal's setBytes). */
#define CM_KERNEL_MAX_BYTES 4096
/* Buffer indices are 0 .. CM_KERNEL_MAX_BUFFERS - 1. */
#define CM_KERNEL_MAX_BUFFERS 31
/* Threadgroup memory of one dispatch, static and dynamic together. */
#define CM_KERNEL_MAX_THREADGROUP_MEMORY 32768

/* Alignment of tensors bound to a kernel. A tensor is bound as its
 * MTLBuffer at its byte offset, which cmetal keeps a multiple of its
 * element size (cm_tensor_desc.byte_offset; a whole tensor made by
 * cm_tensor_create has offset 0). What the kernel may assume:
 *  - a `device` pointer is aligned to the tensor's element size. Metal
 *    requires a device buffer's offset to be aligned to the type the kernel
 *    reads through it (at most 16 bytes; setBuffer:offset:atIndex:), so a
 *    kernel that reads a wider type than the element (float4 over a float32
 *    tensor, a struct) needs views whose byte offset is a multiple of that
 *    type's size: cmetal cannot see the kernel's types and does not check;
 *  - a `constant` pointer needs the GPU's minimum constant-buffer offset
 *    alignment (Apple's Metal feature set tables, per GPU family; Apple's
 *    documentation gave 256 bytes on macOS for Intel and AMD GPUs): bind
 *    views at offsets that are multiples of 256, whole tensors, or pass
 *    small constant data as CM_ARG_BYTES, which has no offset.
 * softmetal does not model misaligned offsets (a CPU reads them). */
typedef struct cm_kernel_arg {
    cm_arg_type type;
    uint32_t index;          /* [[buffer(index)]], or [[threadgroup(index)]] */
    const cm_tensor *tensor; /* INPUT, OUTPUT: bound as its buffer at its byte
                                offset, so the kernel's pointer is element 0
                                (alignment: above) */
    const void *data;        /* BYTES: copied when the call returns */
    size_t size;             /* BYTES: 1..4096; THREADGROUP: a multiple of 16 */
} cm_kernel_arg;

/* Arguments in one line each (C99 compound literals; C only):
 *   cm_kernel_dispatch(k, NULL, &(cm_dispatch_desc){
 *       CM_ARGS(CM_ARG_IN(0, x), CM_ARG_OUT(1, y), CM_ARG_BYTES_OF(2, scale),
 *               CM_ARG_TG(0, 256 * sizeof(float))),
 *       .grid = {n}});
 * CM_ARG_BYTES_OF takes an lvalue (its address and sizeof are used);
 * CM_ARGS sets .args and .arg_count; CM_ARG_COUNT counts its arguments. */
#define CM_ARG_IN(i, t)                                                                            \
    ((cm_kernel_arg){.type = CM_ARG_INPUT, .index = (uint32_t)(i), .tensor = (t)})
#define CM_ARG_OUT(i, t)                                                                           \
    ((cm_kernel_arg){.type = CM_ARG_OUTPUT, .index = (uint32_t)(i), .tensor = (t)})
#define CM_ARG_BYTES_OF(i, v)                                                                      \
    ((cm_kernel_arg){.type = CM_ARG_BYTES, .index = (uint32_t)(i), .data = &(v), .size = sizeof(v)})
#define CM_ARG_TG(i, n)                                                                            \
    ((cm_kernel_arg){.type = CM_ARG_THREADGROUP, .index = (uint32_t)(i), .size = (size_t)(n)})
#define CM_ARG_COUNT(...)                                                                          \
    ((uint32_t)(sizeof((const cm_kernel_arg[]){__VA_ARGS__}) / sizeof(cm_kernel_arg)))
#define CM_ARGS(...)                                                                               \
    .args = (const cm_kernel_arg[]){__VA_ARGS__}, .arg_count = CM_ARG_COUNT(__VA_ARGS__)

typedef enum cm_grid_unit {
    CM_GRID_THREADS = 0,     /* grid counts threads (dispatchThreads; the last
                                threadgroups may be partial) */
    CM_GRID_THREADGROUPS = 1 /* grid counts threadgroups (dispatchThreadgroups) */
} cm_grid_unit;

typedef struct cm_dispatch_desc {
    const cm_kernel_arg *args; /* may be NULL when arg_count is 0 */
    uint32_t arg_count;
    cm_grid_unit grid_unit;  /* default threads */
    uint64_t grid[3];        /* 0 in y or z means 1; grid[0] = 0: nothing runs */
    uint32_t threadgroup[3]; /* threads per threadgroup; 0 in y or z means 1;
                                   threadgroup[0] = 0: max_threads_per_threadgroup
                                   / (y * z) rounded down to a multiple of the
                                   execution width (when over it); then, with
                                   CM_GRID_THREADS, grid[0] if that is fewer:
                                   a 1000-wide grid gets one threadgroup of
                                   1000, not a multiple of the width */
} cm_dispatch_desc;

/* Encodes one dispatch of `kernel` on `stream` (NULL: the device's default
 * stream), batched like cmetal's ops: it runs after the stream's earlier
 * work and before host access to the tensors it writes returns.
 * Checks everything before encoding anything, naming the argument, and,
 * for every kernel (compiled or loaded) whose framework gave the
 * pipeline's reflection, the bindings it uses, naming the kernel and the
 * index (and the parameter where the framework names it):
 *  - a [[buffer(i)]] or [[threadgroup(i)]] it uses that no argument binds
 *    (CM_ERR_INVALID_ARGUMENT); a CM_ARG_THREADGROUP at an index where the
 *    kernel has a buffer and no threadgroup parameter;
 *  - a buffer the kernel may write (`device T *`, not const): a read-only
 *    tensor there fails with CM_ERR_READ_ONLY whether bound as input or
 *    output, CM_ARG_BYTES there fails, and a tensor bound there as
 *    CM_ARG_INPUT is tracked as written (host access waits for the
 *    kernel); a `const device` or `constant` buffer may take a tensor
 *    bound as CM_ARG_OUTPUT (tracked as written, as asked);
 *  - arguments at indices the kernel does not use are allowed (Metal
 *    ignores them).
 * And: an index bound twice or out of range, a tensor of another device,
 * a read-only tensor bound as an output, CM_ARG_BYTES over 4096 bytes,
 * threadgroup memory not a multiple of 16 or over the limit with the
 * kernel's static memory, a threadgroup over the kernel's
 * max_threads_per_threadgroup.
 * Ownership: borrows everything for the call; the device keeps the
 * buffers alive until the kernel has run.
 * Errors: CM_ERR_INVALID_ARGUMENT, CM_ERR_READ_ONLY (an output that is
 * read-only), CM_ERR_DEVICE.
 * Thread-safety: any thread; dispatches on one stream from several threads
 * are ordered as they take the stream's lock. */
CM_API cm_status cm_kernel_dispatch(cm_kernel *kernel, cm_stream *stream,
                                    const cm_dispatch_desc *desc);

/* ---------------------------------------------------------- body only */

/* A template argument of a body kernel: `name` becomes an MSL type (a
 * dtype, value NULL: `typedef float T;`) or a constant (value one element of
 * dtype: `constant int N = 4;`). */
typedef struct cm_template_arg {
    const char *name;  /* an identifier; required */
    cm_dtype dtype;    /* required */
    const void *value; /* NULL for a type argument */
} cm_template_arg;

typedef struct cm_body_kernel_desc {
    const char *name;               /* kernel name, an identifier; required */
    const char *const *input_names; /* input_count identifiers */
    uint32_t input_count;
    const char *const *output_names; /* output_count identifiers; >= 1 */
    uint32_t output_count;
    const char *body;       /* the statements of the kernel; required */
    const char *header;     /* code put before the kernel; may be NULL */
    cm_math_mode math_mode; /* default safe */
    bool atomic_outputs;    /* outputs as `device atomic_T *` (MLX's
                                        atomic_outputs): T int, uint or float
                                        for int32, uint32, float32 outputs */
} cm_body_kernel_desc;

/* A body-only kernel for `device`: nothing is compiled until a dispatch.
 * The generated kernel has the parameters, in this order of buffer index:
 *   const device T_in *<input> for each input, device T_out *<output> for
 *   each output (T from each tensor's dtype: float, half, bfloat, int,
 *   uint, short, ushort, char, uchar, long, ulong, bool; with
 *   atomic_outputs, device atomic_int / atomic_uint / atomic_float *<output>,
 *   for atomic_fetch_add_explicit(&hist[i], 1, memory_order_relaxed) and
 *   the other atomic functions), then for each
 *   tensor whose name the body uses with the suffix:
 *   constant long *<name>_shape, constant long *<name>_strides (elements),
 *   constant int &<name>_ndim;
 * and as uint3 or uint, when the body names them: thread_position_in_grid,
 * threads_per_grid, thread_position_in_threadgroup,
 * threadgroup_position_in_grid, threads_per_threadgroup,
 * threadgroups_per_grid, thread_index_in_threadgroup,
 * thread_index_in_simdgroup, simdgroup_index_in_threadgroup,
 * threads_per_simdgroup, simdgroups_per_threadgroup.
 * Pointers point at element 0 of each view: index strided views with
 * `<name>_strides`.
 * Ownership: returns +1; strings are copied; retains the device.
 * Errors: CM_ERR_INVALID_ARGUMENT (a missing or non-identifier name, two
 * equal names), CM_ERR_UNSUPPORTED (not a Metal device).
 * Thread-safety: any thread. */
CM_API cm_status cm_body_kernel_create(cm_device *device, const cm_body_kernel_desc *desc,
                                       cm_body_kernel **out);

CM_API cm_status cm_body_kernel_retain(cm_body_kernel *kernel);
CM_API cm_status cm_body_kernel_release(cm_body_kernel *kernel);

typedef struct cm_body_dispatch_desc {
    const cm_tensor *const *inputs;       /* input_count tensors */
    cm_tensor *const *outputs;            /* output_count tensors, not read-only */
    const cm_template_arg *template_args; /* may be NULL when the count is 0 */
    uint32_t template_arg_count;
    const double *init_value; /* non-NULL: every output is first filled
                                         with *init_value (as cm_fill) */
    cm_grid_unit grid_unit;   /* as cm_dispatch_desc */
    uint64_t grid[3];
    uint32_t threadgroup[3];
} cm_body_dispatch_desc;

/* Generates the kernel for these tensors' dtypes and the template
 * arguments, compiles it on first use (cached), and dispatches it as
 * cm_kernel_dispatch does.
 * Ownership: borrows everything for the call.
 * Errors: as cm_kernel_dispatch and cm_library_create (CM_ERR_COMPILE with
 * diagnostics whose line numbers count lines of the body; the whole
 * generated source is what cm_body_kernel_get_source returns),
 * CM_ERR_INVALID_ARGUMENT naming inputs[i] or outputs[i] (NULL, another
 * device), CM_ERR_READ_ONLY for a read-only output, CM_ERR_UNSUPPORTED for
 * a dtype Metal kernels do not have (float64) or, with atomic_outputs, an
 * output that is not int32, uint32 or float32. Everything is checked
 * before anything (the initial fill included) is encoded.
 * Thread-safety: any thread. */
CM_API cm_status cm_body_kernel_dispatch(cm_body_kernel *kernel, cm_stream *stream,
                                         const cm_body_dispatch_desc *desc);

/* The source cm_body_kernel_dispatch generates for `desc` (its tensors'
 * dtypes and template arguments; grid and init_value are ignored), to read
 * diagnostics against: writes at most `cap` bytes, NUL-terminated, to buf
 * (buf may be NULL when cap is 0) and the length without the NUL to
 * *length. Errors: CM_ERR_INVALID_ARGUMENT as cm_body_kernel_dispatch.
 * Thread-safety: any thread. */
CM_API cm_status cm_body_kernel_get_source(cm_body_kernel *kernel,
                                           const cm_body_dispatch_desc *desc, char *buf, size_t cap,
                                           size_t *length);

#ifdef __cplusplus
}
#endif
#endif /* CMETAL_KERNEL_H */
