/* SPDX-License-Identifier: MIT */
/* Custom kernels (cmetal/kernel.h): libraries, kernels and dispatches;
 * the argument checks, the source of macros, checks against the reflected
 * bindings. Platform-free: the backend's cm__kernel_backend compiles and
 * dispatches. Body kernels are body_kernel.c. */
#include "kernel_internal.h"
#include "msl_text.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------ helpers */

const cm__kernel_backend *cm__kernels_of(const char *func, const cm_device *device) {
    const cm__kernel_backend *k = device->backend->kernels;
    if (k == NULL)
        (void)cm__fail_as(func, CM_ERR_UNSUPPORTED,
                          "the %s device runs no custom kernels: open a Metal device "
                          "(cm_device_open(CM_DEVICE_METAL, ...)) for them",
                          cm_device_type_name(device->backend->type));
    return k;
}

/* ------------------------------------------------------------ options */

/* Exactly the MTLLanguageVersion values of Apple's headers (MTLLibrary.h)
 * that macOS takes: 1.0 is iOS only. */
static bool cm__is_msl_version(uint32_t v) {
    static const uint32_t known[] = {
        CM_MSL_VERSION(1, 1), CM_MSL_VERSION(1, 2), CM_MSL_VERSION(2, 0), CM_MSL_VERSION(2, 1),
        CM_MSL_VERSION(2, 2), CM_MSL_VERSION(2, 3), CM_MSL_VERSION(2, 4), CM_MSL_VERSION(3, 0),
        CM_MSL_VERSION(3, 1), CM_MSL_VERSION(3, 2), CM_MSL_VERSION(4, 0)};
    for (size_t i = 0; i < sizeof known / sizeof known[0]; ++i)
        if (v == known[i])
            return true;
    return false;
}

cm_status cm__resolve_options(const char *func, cm_math_mode mode, uint32_t version,
                              cm__compile_options *out) {
    switch (mode) {
    case CM_MATH_MODE_DEFAULT:
    case CM_MATH_MODE_SAFE: out->math_mode = CM_MATH_MODE_SAFE; break;
    case CM_MATH_MODE_RELAXED:
    case CM_MATH_MODE_FAST: out->math_mode = mode; break;
    default:
        return cm__fail_as(func, CM_ERR_INVALID_ARGUMENT, "math_mode = %d is not a cm_math_mode",
                           (int)mode);
    }
    if (version != 0 && !cm__is_msl_version(version))
        return cm__fail_as(func, CM_ERR_UNSUPPORTED,
                           "language_version = %" PRIu32 ".%" PRIu32 " (0x%" PRIx32 ") is not "
                           "an MTLLanguageVersion: use CM_MSL_VERSION(major, minor) with 1.1, "
                           "1.2, 2.0 to 2.4, 3.0 to 3.2 or 4.0 (1.0 is not available on macOS), "
                           "or 0 for the newest",
                           version >> 16, version & 0xffff, version);
    out->language_version = version;
    return CM_OK;
}

/* ------------------------------------------------------------ libraries */

/* A library compiled from `source` or, when source is NULL, from `size`
 * bytes at `data`. */
cm_status cm__library_new(const char *func, cm_device *device, const char *source,
                          const cm__compile_options *options, const void *data, size_t size,
                          cm_library **out) {
    const cm__kernel_backend *k = cm__kernels_of(func, device);
    if (k == NULL)
        return CM_ERR_UNSUPPORTED;
    cm_library *lib = CM__NEW(cm_library);
    if (lib == NULL)
        return cm__fail_as(func, CM_ERR_OUT_OF_MEMORY, "no memory for a library");
    cm_status status = source != NULL ? k->library_create(func, device, source, options, &lib->impl)
                                      : k->library_load(func, device, data, size, &lib->impl);
    if (status != CM_OK) {
        cm__free(lib);
        return status;
    }
    cm__ref_init(&lib->ref);
    lib->device = device;
    cm_device_retain(device);
    *out = lib;
    return CM_OK;
}

cm_status cm_library_create(cm_device *device, const cm_library_desc *desc, cm_library **out) {
    CM__REQUIRE_NONNULL(out);
    *out = NULL;
    CM__REQUIRE_NONNULL(device);
    CM__REQUIRE_NONNULL(desc);
    CM__REQUIRE_ARG(desc->source != NULL, "desc->source = NULL: give the MSL source");
    CM__REQUIRE_ARG(desc->macro_count == 0 || desc->macros != NULL,
                    "desc->macros = NULL with macro_count = %" PRIu32, desc->macro_count);
    if (cm__kernels_of(__func__, device) == NULL)
        return CM_ERR_UNSUPPORTED;
    cm__compile_options options;
    CM__TRY(cm__resolve_options(__func__, desc->math_mode, desc->language_version, &options));
    cm__text src = {0};
    for (uint32_t i = 0; i < desc->macro_count; ++i) {
        const cm_macro *m = &desc->macros[i];
        if (!cm__is_identifier(m->name)) {
            cm__free(src.data);
            return cm__fail(CM_ERR_INVALID_ARGUMENT,
                            "desc->macros[%" PRIu32 "].name = \"%s\" "
                            "is not an identifier",
                            i, m->name ? m->name : "(null)");
        }
        if (m->value != NULL && strpbrk(m->value, "\r\n") != NULL) {
            cm__free(src.data);
            return cm__fail(CM_ERR_INVALID_ARGUMENT,
                            "desc->macros[%" PRIu32 "].value of %s has a line break", i, m->name);
        }
        cm__text_fmt(&src, "#define %s ", m->name);
        cm__text_str(&src, m->value != NULL ? m->value : "1");
        cm__text_str(&src, "\n");
    }
    if (desc->macro_count > 0)
        cm__text_str(&src, "#line 1\n");
    cm__text_str(&src, desc->source);
    if (src.failed) {
        cm__free(src.data);
        return cm__fail(CM_ERR_OUT_OF_MEMORY, "no memory for the source");
    }
    cm_status status = cm__library_new(__func__, device, src.data, &options, NULL, 0, out);
    cm__free(src.data);
    return status;
}

cm_status cm_library_load(cm_device *device, const void *data, size_t size, cm_library **out) {
    CM__REQUIRE_NONNULL(out);
    *out = NULL;
    CM__REQUIRE_NONNULL(device);
    CM__REQUIRE_NONNULL(data);
    CM__REQUIRE_ARG(size > 0, "size = 0: a library has bytes");
    return cm__library_new(__func__, device, NULL, NULL, data, size, out);
}

cm_status cm_library_load_file(cm_device *device, const char *path, cm_library **out) {
    CM__REQUIRE_NONNULL(out);
    *out = NULL;
    CM__REQUIRE_NONNULL(device);
    CM__REQUIRE_NONNULL(path);
    if (cm__kernels_of(__func__, device) == NULL)
        return CM_ERR_UNSUPPORTED;
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return cm__fail(CM_ERR_INVALID_ARGUMENT, "path = \"%s\" cannot be opened", path);
    cm__text bytes = {0};
    char chunk[16384];
    for (size_t n; (n = fread(chunk, 1, sizeof chunk, f)) > 0;)
        cm__text_put(&bytes, chunk, n);
    const bool read_error = ferror(f) != 0;
    fclose(f);
    cm_status status;
    if (read_error)
        status = cm__fail(CM_ERR_INVALID_ARGUMENT, "path = \"%s\" cannot be read", path);
    else if (bytes.failed)
        status = cm__fail(CM_ERR_OUT_OF_MEMORY, "no memory for the file \"%s\"", path);
    else if (bytes.len == 0)
        status = cm__fail(CM_ERR_INVALID_ARGUMENT, "path = \"%s\" is empty", path);
    else
        status = cm__library_new(__func__, device, NULL, NULL, bytes.data, bytes.len, out);
    cm__free(bytes.data);
    return status;
}

cm_status cm_device_set_pipeline_cache(cm_device *device, const char *path) {
    CM__REQUIRE_NONNULL(device);
    CM__REQUIRE_NONNULL(path);
    CM__REQUIRE_ARG(path[0] != '\0', "path = \"\": give a file name");
    const cm__kernel_backend *k = cm__kernels_of(__func__, device);
    if (k == NULL)
        return CM_ERR_UNSUPPORTED;
    return k->pipeline_cache_set(__func__, device, path);
}

cm_status cm_device_save_pipeline_cache(cm_device *device) {
    CM__REQUIRE_NONNULL(device);
    const cm__kernel_backend *k = cm__kernels_of(__func__, device);
    if (k == NULL)
        return CM_ERR_UNSUPPORTED;
    return k->pipeline_cache_save(__func__, device);
}

cm_status cm_library_retain(cm_library *library) {
    CM__REQUIRE_NONNULL(library);
    cm__ref_retain(&library->ref);
    return CM_OK;
}

cm_status cm_library_release(cm_library *library) {
    if (library == NULL || !cm__ref_release(&library->ref))
        return CM_OK;
    library->device->backend->kernels->library_release(library->impl);
    cm_device *device = library->device;
    cm__free(library);
    return cm_device_release(device);
}

/* ------------------------------------------------------------ kernels */

static bool cm__constant_dtype_ok(cm_dtype dt) {
    return dt >= CM_BOOL && dt <= CM_FLOAT32;
}

cm_status cm_kernel_create(cm_library *library, const cm_kernel_desc *desc, cm_kernel **out) {
    CM__REQUIRE_NONNULL(out);
    *out = NULL;
    CM__REQUIRE_NONNULL(library);
    CM__REQUIRE_NONNULL(desc);
    CM__REQUIRE_ARG(cm__is_identifier(desc->name), "desc->name = \"%s\" is not a function name",
                    desc->name != NULL ? desc->name : "(null)");
    CM__REQUIRE_ARG(desc->constant_count == 0 || desc->constants != NULL,
                    "desc->constants = NULL with constant_count = %" PRIu32, desc->constant_count);
    for (uint32_t i = 0; i < desc->constant_count; ++i) {
        const cm_function_constant *c = &desc->constants[i];
        CM__REQUIRE_ARG(cm__constant_dtype_ok(c->dtype),
                        "desc->constants[%" PRIu32 "].dtype = %d: a function constant is "
                        "bool, an integer, float16, bfloat16 or float32",
                        i, (int)c->dtype);
        CM__REQUIRE_ARG(c->value != NULL, "desc->constants[%" PRIu32 "].value = NULL", i);
        for (uint32_t j = 0; j < i; ++j)
            CM__REQUIRE_ARG(desc->constants[j].index != c->index,
                            "desc->constants[%" PRIu32 "].index = %" PRIu32
                            " repeats desc->constants[%" PRIu32 "]",
                            i, c->index, j);
    }
    const cm__kernel_backend *k = library->device->backend->kernels;
    cm_kernel *kernel = CM__NEW(cm_kernel);
    if (kernel == NULL)
        return cm__fail(CM_ERR_OUT_OF_MEMORY, "no memory for a kernel");
    cm_status status =
        k->kernel_create(__func__, library, desc, &kernel->impl, &kernel->info, &kernel->signature);
    if (status != CM_OK) {
        cm__free(kernel);
        return status;
    }
    cm__ref_init(&kernel->ref);
    kernel->library = library;
    snprintf(kernel->name, sizeof kernel->name, "%s", desc->name);
    cm_library_retain(library);
    *out = kernel;
    return CM_OK;
}

cm_status cm_kernel_retain(cm_kernel *kernel) {
    CM__REQUIRE_NONNULL(kernel);
    cm__ref_retain(&kernel->ref);
    return CM_OK;
}

cm_status cm_kernel_release(cm_kernel *kernel) {
    if (kernel == NULL || !cm__ref_release(&kernel->ref))
        return CM_OK;
    cm_library *library = kernel->library;
    library->device->backend->kernels->kernel_release(kernel->impl);
    cm__free(kernel);
    return cm_library_release(library);
}

cm_status cm_kernel_get_info(const cm_kernel *kernel, cm_kernel_info *out) {
    CM__REQUIRE_NONNULL(kernel);
    CM__REQUIRE_NONNULL(out);
    *out = kernel->info;
    return CM_OK;
}

/* ------------------------------------------------------------ dispatch */

static bool cm__kernel_same_device(const cm_device *x, const cm_device *y) {
    return x == y || (x->backend == y->backend && x->impl == y->impl);
}

/* Resolves the grid and threadgroup of a dispatch (0 -> defaults) and checks
 * them against the kernel. `names` prefixes argument names ("desc->"). */
static cm_status cm__resolve_grid(const char *func, const cm_kernel *kernel, cm_grid_unit unit,
                                  const uint64_t grid_in[3], const uint32_t group_in[3],
                                  cm__kernel_launch *d) {
    if (unit != CM_GRID_THREADS && unit != CM_GRID_THREADGROUPS)
        return cm__fail_as(func, CM_ERR_INVALID_ARGUMENT,
                           "desc->grid_unit = %d is not a cm_grid_unit", (int)unit);
    d->unit = unit;
    for (int k = 0; k < 3; ++k) {
        d->grid[k] = grid_in[k] == 0 && k > 0 ? 1 : grid_in[k];
        if (d->grid[k] > UINT32_MAX)
            return cm__fail_as(func, CM_ERR_INVALID_ARGUMENT,
                               "desc->grid[%d] = %" PRIu64 " is over 2^32 - 1", k, d->grid[k]);
    }
    const uint32_t max = kernel->info.max_threads_per_threadgroup;
    for (int k = 1; k < 3; ++k)
        d->group[k] = group_in[k] == 0 ? 1 : group_in[k];
    if (group_in[0] != 0) {
        d->group[0] = group_in[0];
    } else {
        /* As many as allowed, a multiple of the execution width. */
        uint64_t n = max / ((uint64_t)d->group[1] * d->group[2]);
        const uint32_t w = kernel->info.thread_execution_width;
        if (n > w && w > 0)
            n -= n % w;
        if (unit == CM_GRID_THREADS && d->grid[0] > 0 && n > d->grid[0])
            n = d->grid[0];
        d->group[0] = n == 0 ? 1 : (uint32_t)n;
    }
    uint64_t threads; /* three uint32 factors can pass 2^64 */
    const bool wrapped =
        __builtin_mul_overflow((uint64_t)d->group[0] * d->group[1], d->group[2], &threads);
    if (wrapped || threads > max) {
        char count[24] = "over 2^64";
        if (!wrapped)
            snprintf(count, sizeof count, "%" PRIu64, threads);
        return cm__fail_as(func, CM_ERR_INVALID_ARGUMENT,
                           "desc->threadgroup = {%" PRIu32 ", %" PRIu32 ", %" PRIu32
                           "} is %s threads, over the kernel's "
                           "max_threads_per_threadgroup = %" PRIu32,
                           d->group[0], d->group[1], d->group[2], count, max);
    }
    return CM_OK;
}

/* " (name)" for messages: three %s arguments, empty when the name is not
 * known. */
#define cm__binding_name(name) (name)[0] != '\0' ? " (" : "", (name), (name)[0] != '\0' ? ")" : ""

/* Checks the arguments into binds (nargs entries) against the kernel's
 * bindings where the framework reflected them. */
static cm_status cm__check_args(const char *func, const cm_kernel *kernel, cm_device *device,
                                const cm_kernel_arg *args, uint32_t nargs, cm__kernel_bind *binds,
                                uint32_t *nbinds) {
    uint32_t buffers = 0, groups = 0, n = 0;
    uint64_t tg_total = kernel->info.static_threadgroup_memory;
    for (uint32_t i = 0; i < nargs; ++i) {
        const cm_kernel_arg *a = &args[i];
        if (a->type == CM_ARG_NONE)
            continue;
        cm__kernel_bind *b = &binds[n++];
        memset(b, 0, sizeof *b);
        b->type = a->type;
        b->index = a->index;
        if (a->type == CM_ARG_THREADGROUP) {
            if (a->index >= CM_KERNEL_MAX_BUFFERS || (groups >> a->index & 1u))
                return cm__fail_as(
                    func, CM_ERR_INVALID_ARGUMENT,
                    "args[%" PRIu32 "].index = %" PRIu32 ": threadgroup index %s", i, a->index,
                    a->index >= CM_KERNEL_MAX_BUFFERS ? "must be < 31" : "is bound twice");
            if (a->size == 0 || a->size % 16 != 0)
                return cm__fail_as(func, CM_ERR_INVALID_ARGUMENT,
                                   "args[%" PRIu32 "].size = %zu: threadgroup memory is a "
                                   "nonzero multiple of 16 bytes",
                                   i, a->size);
            groups |= 1u << a->index;
            if (a->size > CM_KERNEL_MAX_THREADGROUP_MEMORY) /* and the sum cannot wrap */
                return cm__fail_as(func, CM_ERR_INVALID_ARGUMENT,
                                   "args[%" PRIu32 "].size = %zu: threadgroup memory is over "
                                   "the limit of %d bytes",
                                   i, a->size, CM_KERNEL_MAX_THREADGROUP_MEMORY);
            tg_total += a->size;
            b->size = a->size;
            continue;
        }
        if (a->index >= CM_KERNEL_MAX_BUFFERS || (buffers >> a->index & 1u))
            return cm__fail_as(
                func, CM_ERR_INVALID_ARGUMENT,
                "args[%" PRIu32 "].index = %" PRIu32 ": buffer index %s", i, a->index,
                a->index >= CM_KERNEL_MAX_BUFFERS ? "must be < 31" : "is bound twice");
        buffers |= 1u << a->index;
        switch (a->type) {
        case CM_ARG_BYTES:
            if (a->data == NULL || a->size == 0)
                return cm__fail_as(func, CM_ERR_INVALID_ARGUMENT,
                                   "args[%" PRIu32 "]: bytes need data and a size > 0", i);
            if (a->size > CM_KERNEL_MAX_BYTES)
                return cm__fail_as(func, CM_ERR_INVALID_ARGUMENT,
                                   "args[%" PRIu32 "].size = %zu bytes is over setBytes' "
                                   "limit of %d: put larger data in a tensor",
                                   i, a->size, CM_KERNEL_MAX_BYTES);
            if (kernel->signature.known && (kernel->signature.written >> a->index & 1u))
                return cm__fail_as(func, CM_ERR_INVALID_ARGUMENT,
                                   "args[%" PRIu32 "] is CM_ARG_BYTES, but kernel \"%s\" writes "
                                   "[[buffer(%" PRIu32 ")]]%s%s%s: bind a tensor as CM_ARG_OUTPUT",
                                   i, kernel->name, a->index,
                                   cm__binding_name(kernel->signature.buffer_names[a->index]));
            b->data = a->data;
            b->size = a->size;
            break;
        case CM_ARG_INPUT:
        case CM_ARG_OUTPUT: {
            const cm_tensor *t = a->tensor;
            if (t == NULL)
                return cm__fail_as(func, CM_ERR_INVALID_ARGUMENT, "args[%" PRIu32 "].tensor = NULL",
                                   i);
            if (!cm__kernel_same_device(t->buffer->device, device))
                return cm__fail_as(func, CM_ERR_INVALID_ARGUMENT,
                                   "args[%" PRIu32 "].tensor is on a %s device, not the "
                                   "kernel's (%s) device",
                                   i, cm_device_type_name(t->buffer->device->backend->type),
                                   cm_device_type_name(device->backend->type));
            if (t->dtype == CM_FLOAT64)
                return cm__fail_as(func, CM_ERR_UNSUPPORTED,
                                   "args[%" PRIu32 "].tensor has dtype float64, which Metal "
                                   "kernels do not have (a float64 tensor on a Metal device is "
                                   "storage only: cast it on the CPU device)",
                                   i);
            if (a->type == CM_ARG_OUTPUT && (t->flags & CM_TENSOR_READ_ONLY))
                return cm__fail_as(func, CM_ERR_READ_ONLY,
                                   "args[%" PRIu32 "].tensor is read-only and cannot be "
                                   "bound as CM_ARG_OUTPUT",
                                   i);
            if (kernel->signature.known && (kernel->signature.written >> a->index & 1u)) {
                /* The kernel may write it whatever the argument says: a
                 * read-only tensor is refused, another is tracked as
                 * written. */
                if (t->flags & CM_TENSOR_READ_ONLY)
                    return cm__fail_as(func, CM_ERR_READ_ONLY,
                                       "args[%" PRIu32 "].tensor is read-only, but kernel \"%s\" "
                                       "writes [[buffer(%" PRIu32 ")]]%s%s%s (a device pointer, "
                                       "not const)",
                                       i, kernel->name, a->index,
                                       cm__binding_name(kernel->signature.buffer_names[a->index]));
                b->type = CM_ARG_OUTPUT;
            }
            b->buffer = t->buffer;
            b->offset = t->byte_offset;
            break;
        }
        default:
            return cm__fail_as(func, CM_ERR_INVALID_ARGUMENT,
                               "args[%" PRIu32 "].type = %d is not a cm_arg_type", i, (int)a->type);
        }
    }
    if (tg_total > CM_KERNEL_MAX_THREADGROUP_MEMORY)
        return cm__fail_as(func, CM_ERR_INVALID_ARGUMENT,
                           "threadgroup memory of %" PRIu64 " bytes (%" PRIu32
                           " static in the kernel) is over the limit of %d",
                           tg_total, kernel->info.static_threadgroup_memory,
                           CM_KERNEL_MAX_THREADGROUP_MEMORY);
    const cm__kernel_signature *sig = &kernel->signature;
    if (sig->known) {
        for (uint32_t k = 0; k < CM_KERNEL_MAX_BUFFERS; ++k) {
            if ((groups >> k & 1u) && !(sig->threadgroups >> k & 1u) && (sig->buffers >> k & 1u))
                return cm__fail_as(func, CM_ERR_INVALID_ARGUMENT,
                                   "a CM_ARG_THREADGROUP argument binds index %" PRIu32
                                   ", but kernel \"%s\" has [[buffer(%" PRIu32 ")]]%s%s%s there "
                                   "and no [[threadgroup(%" PRIu32 ")]]",
                                   k, kernel->name, k, cm__binding_name(sig->buffer_names[k]), k);
            if ((sig->buffers >> k & 1u) && !(buffers >> k & 1u))
                return cm__fail_as(func, CM_ERR_INVALID_ARGUMENT,
                                   "kernel \"%s\" uses [[buffer(%" PRIu32 ")]]%s%s%s but no "
                                   "argument binds index %" PRIu32 " (CM_ARG_INPUT, "
                                   "CM_ARG_OUTPUT or CM_ARG_BYTES)",
                                   kernel->name, k, cm__binding_name(sig->buffer_names[k]), k);
            if ((sig->threadgroups >> k & 1u) && !(groups >> k & 1u))
                return cm__fail_as(func, CM_ERR_INVALID_ARGUMENT,
                                   "kernel \"%s\" uses [[threadgroup(%" PRIu32 ")]]%s%s%s but no "
                                   "CM_ARG_THREADGROUP argument binds index %" PRIu32,
                                   kernel->name, k, cm__binding_name(sig->threadgroup_names[k]), k);
        }
    }
    *nbinds = n;
    return CM_OK;
}

/* Checks a dispatch into *d (binds: its argument storage) without
 * encoding anything. */
cm_status cm__launch_prepare(const char *func, cm_kernel *kernel, cm_stream *stream,
                             const cm_kernel_arg *args, uint32_t nargs, cm_grid_unit unit,
                             const uint64_t grid[3], const uint32_t group[3], cm__kernel_launch *d,
                             cm__kernel_bind *binds) {
    cm_device *device = kernel->library->device;
    if (stream == NULL)
        stream = device->default_stream;
    else if (!cm__kernel_same_device(stream->device, device))
        return cm__fail_as(func, CM_ERR_INVALID_ARGUMENT,
                           "stream = %p belongs to another device than the kernel; pass a "
                           "stream of its device, or NULL for its default",
                           (void *)stream);
    if (nargs > 2 * CM_KERNEL_MAX_BUFFERS)
        return cm__fail_as(func, CM_ERR_INVALID_ARGUMENT,
                           "desc->arg_count = %" PRIu32 " is over %d", nargs,
                           2 * CM_KERNEL_MAX_BUFFERS);
    if (nargs > 0 && args == NULL)
        return cm__fail_as(func, CM_ERR_INVALID_ARGUMENT,
                           "desc->args = NULL with arg_count = %" PRIu32, nargs);
    *d = (cm__kernel_launch){.func = func, .stream = stream, .args = binds};
    CM__TRY(cm__resolve_grid(func, kernel, unit, grid, group, d));
    return cm__check_args(func, kernel, device, args, nargs, binds, &d->nargs);
}

cm_status cm__launch(cm_kernel *kernel, const cm__kernel_launch *d) {
    if (d->grid[0] == 0)
        return CM_OK; /* an empty grid: nothing to run */
    return kernel->library->device->backend->kernels->dispatch(kernel, d);
}

cm_status cm_kernel_dispatch(cm_kernel *kernel, cm_stream *stream, const cm_dispatch_desc *desc) {
    CM__REQUIRE_NONNULL(kernel);
    CM__REQUIRE_NONNULL(desc);
    cm__kernel_launch d;
    cm__kernel_bind binds[2 * CM_KERNEL_MAX_BUFFERS];
    CM__TRY(cm__launch_prepare(__func__, kernel, stream, desc->args, desc->arg_count,
                               desc->grid_unit, desc->grid, desc->threadgroup, &d, binds));
    return cm__launch(kernel, &d);
}
