/* SPDX-License-Identifier: MIT */
/* Custom kernels (cmetal/kernel.h): argument checks, the source of macros
 * and body-only kernels, checks against the reflected bindings. Platform-free: the
 * backend's cm__kernel_backend compiles and dispatches. */
#include "backend.h"

#include <cmetal/ops.h>

#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------ helpers */

static const cm__kernel_backend *cm__kernels_of(const char *func, const cm_device *device) {
    const cm__kernel_backend *k = device->backend->kernels;
    if (k == NULL)
        (void)cm__fail_as(func, CM_ERR_UNSUPPORTED,
                          "the %s device runs no custom kernels: open a Metal device "
                          "(cm_device_open(CM_DEVICE_METAL, ...)) for them",
                          cm_device_type_name(device->backend->type));
    return k;
}

static bool cm__is_ident_start(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
static bool cm__is_ident_char(char c) {
    return cm__is_ident_start(c) || (c >= '0' && c <= '9');
}
static bool cm__is_identifier(const char *s) {
    if (s == NULL || !cm__is_ident_start(s[0]))
        return false;
    for (const char *p = s + 1; *p != '\0'; ++p)
        if (!cm__is_ident_char(*p))
            return false;
    return strlen(s) <= 255;
}

static char *cm__strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *p = cm__alloc(n, 1);
    if (p != NULL)
        memcpy(p, s, n);
    return p;
}

/* A growing string; on allocation failure `failed` is set and appends stop. */
typedef struct cm__text {
    char *data;
    size_t len, cap;
    bool failed;
} cm__text;

static void cm__text_put(cm__text *t, const char *s, size_t n) {
    if (t->failed)
        return;
    size_t need;
    if (cm__add_overflow_size(t->len, n + 1, &need)) {
        t->failed = true;
        return;
    }
    if (need > t->cap) {
        size_t cap = t->cap ? t->cap : 256;
        while (cap < need)
            cap = cap > SIZE_MAX / 2 ? need : cap * 2;
        char *p = cm__alloc(cap, 1);
        if (p == NULL) {
            t->failed = true;
            return;
        }
        if (t->len > 0)
            memcpy(p, t->data, t->len);
        cm__free(t->data);
        t->data = p;
        t->cap = cap;
    }
    memcpy(t->data + t->len, s, n);
    t->len += n;
    t->data[t->len] = '\0';
}

static void cm__text_str(cm__text *t, const char *s) {
    cm__text_put(t, s, strlen(s));
}

CM__PRINTF(2, 3) static void cm__text_fmt(cm__text *t, const char *fmt, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof buf)
        t->failed = true;
    else
        cm__text_put(t, buf, (size_t)n);
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

static cm_status cm__resolve_options(const char *func, cm_math_mode mode, uint32_t version,
                                     cm__compile_options *out) {
    switch (mode) {
    case CM_MATH_MODE_DEFAULT:
    case CM_MATH_MODE_SAFE: out->math_mode = CM_MATH_MODE_SAFE; break;
    case CM_MATH_MODE_RELAXED:
    case CM_MATH_MODE_FAST: out->math_mode = mode; break;
    default:
        return cm__fail_as(func, CM_ERR_INVALID_ARGUMENT,
                           "math_mode = %d is not a cm_math_mode", (int)mode);
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
static cm_status cm__library_new(const char *func, cm_device *device, const char *source,
                                 const cm__compile_options *options, const void *data,
                                 size_t size, cm_library **out) {
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
            return cm__fail(CM_ERR_INVALID_ARGUMENT, "desc->macros[%" PRIu32 "].name = \"%s\" "
                            "is not an identifier", i, m->name ? m->name : "(null)");
        }
        if (m->value != NULL && strpbrk(m->value, "\r\n") != NULL) {
            cm__free(src.data);
            return cm__fail(CM_ERR_INVALID_ARGUMENT,
                            "desc->macros[%" PRIu32 "].value of %s has a line break", i,
                            m->name);
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
    cm_status status =
        cm__library_new(__func__, device, src.data, &options, NULL, 0, out);
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
                    "desc->constants = NULL with constant_count = %" PRIu32,
                    desc->constant_count);
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
    cm_status status = k->kernel_create(__func__, library, desc, &kernel->impl, &kernel->info,
                                        &kernel->signature);
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

static bool cm__same_device(const cm_device *x, const cm_device *y) {
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
    const uint64_t threads = (uint64_t)d->group[0] * d->group[1] * d->group[2];
    if (threads > max)
        return cm__fail_as(func, CM_ERR_INVALID_ARGUMENT,
                           "desc->threadgroup = {%" PRIu32 ", %" PRIu32 ", %" PRIu32
                           "} is %" PRIu64 " threads, over the kernel's "
                           "max_threads_per_threadgroup = %" PRIu32,
                           d->group[0], d->group[1], d->group[2], threads, max);
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
                return cm__fail_as(func, CM_ERR_INVALID_ARGUMENT,
                                   "args[%" PRIu32 "].index = %" PRIu32 ": threadgroup index %s",
                                   i, a->index,
                                   a->index >= CM_KERNEL_MAX_BUFFERS ? "must be < 31"
                                                                     : "is bound twice");
            if (a->size == 0 || a->size % 16 != 0)
                return cm__fail_as(func, CM_ERR_INVALID_ARGUMENT,
                                   "args[%" PRIu32 "].size = %zu: threadgroup memory is a "
                                   "nonzero multiple of 16 bytes",
                                   i, a->size);
            groups |= 1u << a->index;
            tg_total += a->size;
            b->size = a->size;
            continue;
        }
        if (a->index >= CM_KERNEL_MAX_BUFFERS || (buffers >> a->index & 1u))
            return cm__fail_as(func, CM_ERR_INVALID_ARGUMENT,
                               "args[%" PRIu32 "].index = %" PRIu32 ": buffer index %s", i,
                               a->index,
                               a->index >= CM_KERNEL_MAX_BUFFERS ? "must be < 31"
                                                                 : "is bound twice");
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
                return cm__fail_as(func, CM_ERR_INVALID_ARGUMENT,
                                   "args[%" PRIu32 "].tensor = NULL", i);
            if (!cm__same_device(t->buffer->device, device))
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
                               "args[%" PRIu32 "].type = %d is not a cm_arg_type", i,
                               (int)a->type);
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
                                   kernel->name, k, cm__binding_name(sig->threadgroup_names[k]),
                                   k);
        }
    }
    *nbinds = n;
    return CM_OK;
}

/* Checks a dispatch into *d (binds: its argument storage) without
 * encoding anything. */
static cm_status cm__launch_prepare(const char *func, cm_kernel *kernel, cm_stream *stream,
                                    const cm_kernel_arg *args, uint32_t nargs, cm_grid_unit unit,
                                    const uint64_t grid[3], const uint32_t group[3],
                                    cm__kernel_launch *d, cm__kernel_bind *binds) {
    cm_device *device = kernel->library->device;
    if (stream == NULL)
        stream = device->default_stream;
    else if (!cm__same_device(stream->device, device))
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

static cm_status cm__launch(cm_kernel *kernel, const cm__kernel_launch *d) {
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

/* ------------------------------------------------------------ body kernels */

/* Generated kernels of a body kernel, by source. */
typedef struct cm__body_variant {
    char *source;
    cm_kernel *kernel;
    struct cm__body_variant *next;
} cm__body_variant;

struct cm_body_kernel {
    cm__refcount ref;
    cm_device *device; /* retained */
    char *name, *body, *header;
    char **inputs, **outputs;
    uint32_t ninputs, noutputs;
    cm__compile_options options;
    bool atomic_outputs;
    pthread_mutex_t lock; /* guards variants */
    cm__body_variant *variants;
};

static void cm__body_free(cm_body_kernel *k) {
    for (cm__body_variant *v = k->variants, *next; v != NULL; v = next) {
        next = v->next;
        cm_kernel_release(v->kernel);
        cm__free(v->source);
        cm__free(v);
    }
    for (uint32_t i = 0; k->inputs != NULL && i < k->ninputs; ++i)
        cm__free(k->inputs[i]);
    for (uint32_t i = 0; k->outputs != NULL && i < k->noutputs; ++i)
        cm__free(k->outputs[i]);
    cm__free(k->inputs);
    cm__free(k->outputs);
    cm__free(k->name);
    cm__free(k->body);
    cm__free(k->header);
    cm__free(k);
}

static cm_status cm__copy_names(const char *func, const char *what, const char *const *names,
                                uint32_t n, char ***out) {
    if (n == 0)
        return CM_OK;
    if (names == NULL)
        return cm__fail_as(func, CM_ERR_INVALID_ARGUMENT, "desc->%s = NULL with %u names",
                           what, n);
    *out = cm__alloc(sizeof(char *) * n, _Alignof(char *));
    if (*out == NULL)
        return cm__fail_as(func, CM_ERR_OUT_OF_MEMORY, "no memory for names");
    for (uint32_t i = 0; i < n; ++i) {
        if (!cm__is_identifier(names[i]))
            return cm__fail_as(func, CM_ERR_INVALID_ARGUMENT,
                               "desc->%s[%u] = \"%s\" is not an identifier", what, i,
                               names[i] != NULL ? names[i] : "(null)");
        (*out)[i] = cm__strdup(names[i]);
        if ((*out)[i] == NULL)
            return cm__fail_as(func, CM_ERR_OUT_OF_MEMORY, "no memory for names");
    }
    return CM_OK;
}

cm_status cm_body_kernel_create(cm_device *device, const cm_body_kernel_desc *desc,
                                cm_body_kernel **out) {
    CM__REQUIRE_NONNULL(out);
    *out = NULL;
    CM__REQUIRE_NONNULL(device);
    CM__REQUIRE_NONNULL(desc);
    if (cm__kernels_of(__func__, device) == NULL)
        return CM_ERR_UNSUPPORTED;
    CM__REQUIRE_ARG(cm__is_identifier(desc->name), "desc->name = \"%s\" is not an identifier",
                    desc->name != NULL ? desc->name : "(null)");
    CM__REQUIRE_ARG(desc->body != NULL, "desc->body = NULL: give the kernel's statements");
    CM__REQUIRE_ARG(desc->output_count >= 1, "desc->output_count = 0: a kernel writes at "
                    "least one output");
    CM__REQUIRE_ARG(desc->input_count + (uint64_t)desc->output_count <= CM_KERNEL_MAX_BUFFERS,
                    "desc->input_count + output_count = %" PRIu64 " is over %d buffers",
                    desc->input_count + (uint64_t)desc->output_count, CM_KERNEL_MAX_BUFFERS);
    cm_body_kernel *k = CM__NEW(cm_body_kernel);
    if (k == NULL)
        return cm__fail(CM_ERR_OUT_OF_MEMORY, "no memory for a body kernel");
    cm_status status = cm__resolve_options(__func__, desc->math_mode, 0, &k->options);
    if (status == CM_OK)
        status = cm__copy_names(__func__, "input_names", desc->input_names, desc->input_count,
                                &k->inputs);
    k->ninputs = desc->input_count;
    if (status == CM_OK)
        status = cm__copy_names(__func__, "output_names", desc->output_names,
                                desc->output_count, &k->outputs);
    k->noutputs = desc->output_count;
    const uint32_t total = k->ninputs + k->noutputs;
    for (uint32_t i = 0; status == CM_OK && i < total; ++i)
        for (uint32_t j = 0; status == CM_OK && j < i; ++j) {
            const char *a = i < k->ninputs ? k->inputs[i] : k->outputs[i - k->ninputs];
            const char *b = j < k->ninputs ? k->inputs[j] : k->outputs[j - k->ninputs];
            if (strcmp(a, b) == 0)
                status = cm__fail(CM_ERR_INVALID_ARGUMENT, "the name \"%s\" is used twice "
                                  "among the inputs and outputs", a);
        }
    if (status == CM_OK) {
        k->name = cm__strdup(desc->name);
        k->body = cm__strdup(desc->body);
        k->header = cm__strdup(desc->header != NULL ? desc->header : "");
        if (k->name == NULL || k->body == NULL || k->header == NULL)
            status = cm__fail(CM_ERR_OUT_OF_MEMORY, "no memory for a body kernel");
    }
    if (status != CM_OK) {
        cm__body_free(k);
        return status;
    }
    cm__ref_init(&k->ref);
    pthread_mutex_init(&k->lock, NULL);
    k->atomic_outputs = desc->atomic_outputs;
    k->device = device;
    cm_device_retain(device);
    *out = k;
    return CM_OK;
}

cm_status cm_body_kernel_retain(cm_body_kernel *kernel) {
    CM__REQUIRE_NONNULL(kernel);
    cm__ref_retain(&kernel->ref);
    return CM_OK;
}

cm_status cm_body_kernel_release(cm_body_kernel *kernel) {
    if (kernel == NULL || !cm__ref_release(&kernel->ref))
        return CM_OK;
    cm_device *device = kernel->device;
    pthread_mutex_destroy(&kernel->lock);
    cm__body_free(kernel);
    return cm_device_release(device);
}

/* Whether `name` occurs in `text` as a whole identifier. */
static bool cm__uses_identifier(const char *text, const char *name) {
    const size_t n = strlen(name);
    for (const char *p = strstr(text, name); p != NULL; p = strstr(p + 1, name)) {
        if (p > text && cm__is_ident_char(p[-1]))
            continue;
        if (cm__is_ident_char(p[n]))
            continue;
        return true;
    }
    return false;
}

static const char *cm__msl_type(cm_dtype dt) {
    switch (dt) {
    case CM_BOOL: return "bool";
    case CM_INT8: return "char";
    case CM_INT16: return "short";
    case CM_INT32: return "int";
    case CM_INT64: return "long";
    case CM_UINT8: return "uchar";
    case CM_UINT16: return "ushort";
    case CM_UINT32: return "uint";
    case CM_UINT64: return "ulong";
    case CM_FLOAT16: return "half";
    case CM_BFLOAT16: return "bfloat";
    case CM_FLOAT32: return "float";
    default: return NULL;
    }
}

/* The MSL atomic type of an atomic output's dtype, or NULL. */
static const char *cm__msl_atomic_type(cm_dtype dt) {
    switch (dt) {
    case CM_INT32: return "atomic_int";
    case CM_UINT32: return "atomic_uint";
    case CM_FLOAT32: return "atomic_float";
    default: return NULL;
    }
}

/* An MSL literal of one element of dt at p. */
static void cm__msl_literal(cm__text *t, cm_dtype dt, const void *p) {
    double f = 0;
    switch (dt) {
    case CM_BOOL: cm__text_str(t, *(const uint8_t *)p ? "true" : "false"); return;
    case CM_INT8:
    case CM_INT16:
    case CM_INT32:
    case CM_INT64: {
        int64_t v = 0;
        cm__convert_element(CM_INT64, &v, dt, p);
        if (v == INT64_MIN)
            cm__text_str(t, "(-9223372036854775807L - 1)");
        else
            cm__text_fmt(t, "%" PRId64 "%s", v, dt == CM_INT64 ? "L" : "");
        return;
    }
    case CM_UINT8:
    case CM_UINT16:
    case CM_UINT32:
    case CM_UINT64: {
        uint64_t v = 0;
        cm__convert_element(CM_UINT64, &v, dt, p);
        cm__text_fmt(t, "%" PRIu64 "u%s", v, dt == CM_UINT64 ? "L" : "");
        return;
    }
    default:
        cm__convert_element(CM_FLOAT64, &f, dt, p);
        if (isnan(f))
            cm__text_fmt(t, "%s(NAN)", cm__msl_type(dt));
        else if (isinf(f))
            cm__text_fmt(t, "%s(%sINFINITY)", cm__msl_type(dt), f < 0 ? "-" : "");
        else /* 17 digits: exact for every float16, bfloat16 and float32 */
            cm__text_fmt(t, "%s(%.17ef)", cm__msl_type(dt), f);
        return;
    }
}

static const struct {
    const char *name, *type;
} cm__body_attributes[] = {
    {"thread_position_in_grid", "uint3"},
    {"threads_per_grid", "uint3"},
    {"thread_position_in_threadgroup", "uint3"},
    {"threadgroup_position_in_grid", "uint3"},
    {"threads_per_threadgroup", "uint3"},
    {"threadgroups_per_grid", "uint3"},
    {"thread_index_in_threadgroup", "uint"},
    {"thread_index_in_simdgroup", "uint"},
    {"simdgroup_index_in_threadgroup", "uint"},
    {"threads_per_simdgroup", "uint"},
    {"simdgroups_per_threadgroup", "uint"},
};

/* Per tensor of a body dispatch: which layout parameters the body uses. */
typedef struct cm__body_layout {
    bool shape, strides, ndim;
} cm__body_layout;

/* Checks a body dispatch's tensors and template arguments and writes the
 * kernel source into *src; layouts[i] for tensor i (inputs, then outputs). */
static cm_status cm__body_source(const char *func, const cm_body_kernel *k,
                                 const cm_body_dispatch_desc *desc, cm__text *src,
                                 cm__body_layout *layouts) {
    if (k->ninputs > 0 && desc->inputs == NULL)
        return cm__fail_as(func, CM_ERR_INVALID_ARGUMENT,
                           "desc->inputs = NULL but the kernel has %u inputs", k->ninputs);
    if (desc->outputs == NULL)
        return cm__fail_as(func, CM_ERR_INVALID_ARGUMENT,
                           "desc->outputs = NULL but the kernel has %u outputs", k->noutputs);
    if (desc->template_arg_count > 0 && desc->template_args == NULL)
        return cm__fail_as(func, CM_ERR_INVALID_ARGUMENT,
                           "desc->template_args = NULL with template_arg_count = %u",
                           desc->template_arg_count);
    const uint32_t total = k->ninputs + k->noutputs;
    for (uint32_t i = 0; i < total; ++i) {
        const bool in = i < k->ninputs;
        const uint32_t j = in ? i : i - k->ninputs;
        const cm_tensor *t = in ? desc->inputs[j] : desc->outputs[j];
        const char *what = in ? "inputs" : "outputs";
        if (t == NULL)
            return cm__fail_as(func, CM_ERR_INVALID_ARGUMENT, "desc->%s[%u] = NULL (%s)", what,
                               j, in ? k->inputs[j] : k->outputs[j]);
        if (cm__msl_type(t->dtype) == NULL)
            return cm__fail_as(func, CM_ERR_UNSUPPORTED,
                               "desc->%s[%u] (%s) has dtype %s, which Metal kernels do not "
                               "have",
                               what, j, in ? k->inputs[j] : k->outputs[j],
                               cm__dtype(t->dtype)->name);
        if (!in && k->atomic_outputs && cm__msl_atomic_type(t->dtype) == NULL)
            return cm__fail_as(func, CM_ERR_UNSUPPORTED,
                               "desc->outputs[%u] (%s) has dtype %s: atomic outputs are int32, "
                               "uint32 or float32 (atomic_int, atomic_uint, atomic_float)",
                               j, k->outputs[j], cm__dtype(t->dtype)->name);
    }
    cm__text_str(src, "#include <metal_stdlib>\nusing namespace metal;\n");
    for (uint32_t i = 0; i < desc->template_arg_count; ++i) {
        const cm_template_arg *a = &desc->template_args[i];
        if (!cm__is_identifier(a->name))
            return cm__fail_as(func, CM_ERR_INVALID_ARGUMENT,
                               "desc->template_args[%u].name = \"%s\" is not an identifier", i,
                               a->name != NULL ? a->name : "(null)");
        const char *type = cm__msl_type(a->dtype);
        if (type == NULL)
            return cm__fail_as(func, CM_ERR_INVALID_ARGUMENT,
                               "desc->template_args[%u].dtype = %d (%s) has no MSL type", i,
                               (int)a->dtype, a->name);
        if (a->value == NULL) {
            cm__text_fmt(src, "typedef %s %s;\n", type, a->name);
        } else {
            cm__text_fmt(src, "constant constexpr %s %s = ", type, a->name);
            cm__msl_literal(src, a->dtype, a->value);
            cm__text_str(src, ";\n");
        }
    }
    cm__text_str(src, k->header);
    cm__text_fmt(src, "\nkernel void %s(\n", k->name);
    uint32_t index = 0;
    for (uint32_t i = 0; i < total; ++i) {
        const bool in = i < k->ninputs;
        const uint32_t j = in ? i : i - k->ninputs;
        const cm_tensor *t = in ? desc->inputs[j] : desc->outputs[j];
        cm__text_fmt(src, "    %sdevice %s *%s [[buffer(%u)]],\n", in ? "const " : "",
                     !in && k->atomic_outputs ? cm__msl_atomic_type(t->dtype)
                                              : cm__msl_type(t->dtype),
                     in ? k->inputs[j] : k->outputs[j], index++);
    }
    char name[300];
    for (uint32_t i = 0; i < total; ++i) {
        const char *tn = i < k->ninputs ? k->inputs[i] : k->outputs[i - k->ninputs];
        snprintf(name, sizeof name, "%s_shape", tn);
        layouts[i].shape = cm__uses_identifier(k->body, name);
        if (layouts[i].shape)
            cm__text_fmt(src, "    constant long *%s [[buffer(%u)]],\n", name, index++);
        snprintf(name, sizeof name, "%s_strides", tn);
        layouts[i].strides = cm__uses_identifier(k->body, name);
        if (layouts[i].strides)
            cm__text_fmt(src, "    constant long *%s [[buffer(%u)]],\n", name, index++);
        snprintf(name, sizeof name, "%s_ndim", tn);
        layouts[i].ndim = cm__uses_identifier(k->body, name);
        if (layouts[i].ndim)
            cm__text_fmt(src, "    constant int &%s [[buffer(%u)]],\n", name, index++);
    }
    if (index > CM_KERNEL_MAX_BUFFERS)
        return cm__fail_as(func, CM_ERR_INVALID_ARGUMENT,
                           "the kernel needs %u buffers (tensors and the layouts the body "
                           "uses), over %d",
                           index, CM_KERNEL_MAX_BUFFERS);
    for (size_t a = 0; a < sizeof cm__body_attributes / sizeof cm__body_attributes[0]; ++a)
        if (cm__uses_identifier(k->body, cm__body_attributes[a].name))
            cm__text_fmt(src, "    %s %s [[%s]],\n", cm__body_attributes[a].type,
                         cm__body_attributes[a].name, cm__body_attributes[a].name);
    /* drop the last ",\n" */
    if (!src->failed && src->len >= 2 && src->data[src->len - 2] == ',') {
        src->len -= 2;
        src->data[src->len] = '\0';
    }
    cm__text_str(src, ") {\n#line 1\n");
    cm__text_str(src, k->body);
    cm__text_str(src, "\n}\n");
    if (src->failed)
        return cm__fail_as(func, CM_ERR_OUT_OF_MEMORY, "no memory for the kernel source");
    return CM_OK;
}

/* The kernel of `source`: a variant made before, or a new one. +0 in *out
 * (the body kernel owns it). */
static cm_status cm__body_variant_get(const char *func, cm_body_kernel *k, const char *source,
                                  cm_kernel **out) {
    pthread_mutex_lock(&k->lock);
    for (cm__body_variant *v = k->variants; v != NULL; v = v->next)
        if (strcmp(v->source, source) == 0) {
            *out = v->kernel;
            pthread_mutex_unlock(&k->lock);
            return CM_OK;
        }
    cm_library *lib = NULL;
    cm_kernel *kernel = NULL;
    cm_status status =
        cm__library_new(func, k->device, source, &k->options, NULL, 0, &lib);
    if (status == CM_OK) {
        status = cm_kernel_create(lib, &(cm_kernel_desc){.name = k->name}, &kernel);
        if (status != CM_OK) {
            char msg[1024];
            snprintf(msg, sizeof msg, "%s", cm_last_error());
            const char *colon = strchr(msg, ':');
            (void)cm__fail_as(func, status, "%s", colon != NULL ? colon + 2 : msg);
        }
    }
    cm_library_release(lib);
    cm__body_variant *v = NULL;
    if (status == CM_OK) {
        v = CM__NEW(cm__body_variant);
        char *copy = v != NULL ? cm__strdup(source) : NULL;
        if (copy == NULL) {
            cm__free(v);
            cm_kernel_release(kernel);
            status = cm__fail_as(func, CM_ERR_OUT_OF_MEMORY, "no memory for a kernel variant");
        } else {
            v->source = copy;
            v->kernel = kernel;
            v->next = k->variants;
            k->variants = v;
            *out = kernel;
        }
    }
    pthread_mutex_unlock(&k->lock);
    return status;
}

cm_status cm_body_kernel_get_source(cm_body_kernel *kernel, const cm_body_dispatch_desc *desc,
                                    char *buf, size_t cap, size_t *length) {
    CM__REQUIRE_NONNULL(kernel);
    CM__REQUIRE_NONNULL(desc);
    CM__REQUIRE_NONNULL(length);
    CM__REQUIRE_ARG(cap == 0 || buf != NULL, "buf = NULL with cap = %zu", cap);
    cm__text src = {0};
    cm__body_layout layouts[CM_KERNEL_MAX_BUFFERS];
    cm_status status = cm__body_source(__func__, kernel, desc, &src, layouts);
    if (status == CM_OK) {
        *length = src.len;
        if (cap > 0) {
            size_t n = src.len < cap - 1 ? src.len : cap - 1;
            memcpy(buf, src.data, n);
            buf[n] = '\0';
        }
    }
    cm__free(src.data);
    return status;
}

cm_status cm_body_kernel_dispatch(cm_body_kernel *kernel, cm_stream *stream,
                                  const cm_body_dispatch_desc *desc) {
    static const char func[] = "cm_body_kernel_dispatch";
    CM__REQUIRE_NONNULL(kernel);
    CM__REQUIRE_NONNULL(desc);
    cm__text src = {0};
    cm__body_layout layouts[CM_KERNEL_MAX_BUFFERS];
    cm_status status = cm__body_source(func, kernel, desc, &src, layouts);
    for (uint32_t i = 0; status == CM_OK && i < kernel->noutputs; ++i)
        if (desc->outputs[i]->flags & CM_TENSOR_READ_ONLY)
            status = cm__fail_as(func, CM_ERR_READ_ONLY,
                                 "desc->outputs[%u] (%s) is read-only and cannot be written", i,
                                 kernel->outputs[i]);
    cm_kernel *k = NULL;
    if (status == CM_OK)
        status = cm__body_variant_get(func, kernel, src.data, &k);
    cm__free(src.data);
    if (status != CM_OK)
        return status;

    /* Arguments: tensors, then the layouts the body uses. */
    const uint32_t total = kernel->ninputs + kernel->noutputs;
    cm_kernel_arg args[CM_KERNEL_MAX_BUFFERS];
    int32_t ndims[CM_KERNEL_MAX_BUFFERS];
    uint32_t n = 0, index = 0;
    for (uint32_t i = 0; i < total; ++i) {
        const bool in = i < kernel->ninputs;
        const cm_tensor *t = in ? desc->inputs[i] : desc->outputs[i - kernel->ninputs];
        args[n++] = (cm_kernel_arg){.type = in ? CM_ARG_INPUT : CM_ARG_OUTPUT,
                                    .index = index++, .tensor = t};
    }
    for (uint32_t i = 0; i < total; ++i) {
        const bool in = i < kernel->ninputs;
        const cm_tensor *t = in ? desc->inputs[i] : desc->outputs[i - kernel->ninputs];
        /* setBytes needs at least one element: a 0-d tensor binds {1}. */
        static const int64_t one = 1;
        if (layouts[i].shape) {
            args[n++] = (cm_kernel_arg){.type = CM_ARG_BYTES, .index = index++,
                                        .data = t->ndim > 0 ? (const void *)t->shape : &one,
                                        .size = sizeof(int64_t) * (t->ndim > 0 ? (size_t)t->ndim : 1)};
        }
        if (layouts[i].strides)
            args[n++] = (cm_kernel_arg){.type = CM_ARG_BYTES, .index = index++,
                                        .data = t->ndim > 0 ? (const void *)t->strides : &one,
                                        .size = sizeof(int64_t) * (t->ndim > 0 ? (size_t)t->ndim : 1)};
        if (layouts[i].ndim) {
            ndims[i] = t->ndim;
            args[n++] = (cm_kernel_arg){.type = CM_ARG_BYTES, .index = index++, .data = &ndims[i],
                                        .size = sizeof(int32_t)};
        }
    }
    cm__kernel_launch d;
    cm__kernel_bind binds[2 * CM_KERNEL_MAX_BUFFERS];
    CM__TRY(cm__launch_prepare(func, k, stream, args, n, desc->grid_unit, desc->grid,
                               desc->threadgroup, &d, binds));
    if (desc->init_value != NULL)
        for (uint32_t i = 0; i < kernel->noutputs; ++i) {
            status = cm_fill(desc->outputs[i], CM_FLOAT64, desc->init_value, stream);
            if (status != CM_OK) {
                char msg[1024];
                snprintf(msg, sizeof msg, "%s", cm_last_error());
                return cm__fail_as(func, status, "init_value into outputs[%u]: %s", i, msg);
            }
        }
    return cm__launch(k, &d);
}
