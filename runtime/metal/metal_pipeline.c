/* SPDX-License-Identifier: MIT */
/* Libraries and pipelines of the Metal device: one way to compile a
 * library and make a pipeline, for cmetal/kernel.h and for cmetal's own
 * ops. Libraries and pipelines are cached per device under cache_lock, by
 * key (source and options; library, function name and constant values)
 * and live as long as the device; pipelines are recorded into the binary
 * archive when the device has one. Sees the bridge only. */
#include "metal_internal.h"

#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

/* One cached library or pipeline. */
struct cm__metal_cached {
    uint64_t hash;
    char *key;
    size_t key_len;
    cm__id object;   /* +1: id<MTLLibrary> or id<MTLComputePipelineState> */
    uint64_t serial; /* libraries: names this library in pipeline keys */
    cm_kernel_info info;
    cm__kernel_signature sig; /* pipelines: bindings */
    struct cm__metal_cached *next;
};

void cm__metal_cache_init(cm__metal_device *d) {
    pthread_mutex_init(&d->cache_lock, NULL);
    d->cache = NULL;
    d->cache_serial = 0;
    d->archive = NULL;
    d->archive_path = NULL;
}

void cm__metal_cache_destroy(cm__metal_device *d) {
    for (cm__metal_cached *c = d->cache, *next; c != NULL; c = next) {
        next = c->next;
        cm__objc_release(c->object);
        cm__free(c->key);
        cm__free(c);
    }
    d->cache = NULL;
    cm__objc_release(d->archive);
    d->archive = NULL;
    cm__free(d->archive_path);
    d->archive_path = NULL;
    pthread_mutex_destroy(&d->cache_lock);
}

static uint64_t cm__fnv1a(const void *data, size_t n) {
    const unsigned char *p = data;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; ++i) {
        h ^= p[i];
        h *= 1099511628211ull;
    }
    return h;
}

/* The entry of `key`, or NULL. cache_lock held. */
static cm__metal_cached *cm__cache_find(cm__metal_device *d, uint64_t hash, const char *key,
                                        size_t n) {
    for (cm__metal_cached *c = d->cache; c != NULL; c = c->next)
        if (c->hash == hash && c->key_len == n && memcmp(c->key, key, n) == 0)
            return c;
    return NULL;
}

/* Adds `object` (+1, taken) under key. cache_lock held. On failure the
 * object is left to the caller. */
static cm__metal_cached *cm__cache_add(cm__metal_device *d, uint64_t hash, const char *key,
                                       size_t n, cm__id object) {
    cm__metal_cached *c = CM__NEW(cm__metal_cached);
    char *copy = c != NULL ? cm__alloc(n, 1) : NULL;
    if (copy == NULL) {
        cm__free(c);
        return NULL;
    }
    memcpy(copy, key, n);
    c->hash = hash;
    c->key = copy;
    c->key_len = n;
    c->object = object;
    c->serial = ++d->cache_serial;
    c->next = d->cache;
    d->cache = c;
    return c;
}

/* Makes the object of a missing entry (+1 in made->object; made->info and
 * made->sig for pipelines) from ctx; on failure releases what it made.
 * cache_lock held. */
typedef cm_status (*cm__cache_make_fn)(const char *func, cm__metal_device *d, const void *ctx,
                                       cm__metal_cached *made);

/* The one find-or-make of libraries and pipelines: the entry of `key`,
 * made by make(ctx) on a miss, under cache_lock so that concurrent callers
 * make it once. On success *out has its object (+1), serial and info, and
 * *sig (when not NULL) its bindings. */
static cm_status cm__cache_get(const char *func, cm__metal_device *d, const char *key, size_t n,
                               cm__cache_make_fn make, const void *ctx, cm__metal_cached *out,
                               cm__kernel_signature *sig) {
    const uint64_t hash = cm__fnv1a(key, n);
    cm_status status = CM_OK;
    pthread_mutex_lock(&d->cache_lock);
    cm__metal_cached *c = cm__cache_find(d, hash, key, n);
    if (c == NULL) {
        cm__metal_cached made = {.object = NULL};
        status = make(func, d, ctx, &made);
        if (status == CM_OK) {
            c = cm__cache_add(d, hash, key, n, made.object);
            if (c == NULL) {
                cm__objc_release(made.object);
                status = cm__fail_as(func, CM_ERR_OUT_OF_MEMORY, "no memory for the cache");
            } else {
                c->info = made.info;
                c->sig = made.sig;
            }
        }
    }
    if (status == CM_OK) {
        out->object = cm__objc_retain(c->object);
        out->serial = c->serial;
        out->info = c->info;
        if (sig != NULL)
            *sig = c->sig;
    }
    pthread_mutex_unlock(&d->cache_lock);
    return status;
}

/* ------------------------------------------------------------ compile */

/* New MTLCompileOptions (+1) for `o`. The language version is set first,
 * then the math: where the options have mathMode (macOS 15 / iOS 18) it is
 * set, with mathFloatingPointFunctions Precise for safe math (its default
 * is Fast, which would give safe kernels the fast exp, log, sin, pow...)
 * and Fast otherwise; before macOS 15, fastMathEnabled = NO selects safe
 * math and the precise functions together, and relaxed falls back to fast
 * math. */
static cm_status cm__compile_options_new(const char *func, const cm__compile_options *o,
                                         cm__id *out) {
    *out = NULL;
    cm__class cls = CM__CLASS(MTLCompileOptions);
    if (cls == NULL)
        return cm__fail_as(func, CM_ERR_DEVICE, "the Metal framework has no MTLCompileOptions");
    cm__id options = cm__objc_new(cls);
    if (options == NULL)
        return cm__fail_as(func, CM_ERR_DEVICE, "MTLCompileOptions alloc/init returned nil");
    if (o->language_version != 0) {
        if (!cm__msg_respondsToSelector(options, CM__SEL(setLanguageVersion))) {
            cm__objc_release(options);
            return cm__fail_as(func, CM_ERR_UNSUPPORTED,
                               "language_version = %" PRIu32 ".%" PRIu32
                               ": this Metal framework's MTLCompileOptions has no "
                               "setLanguageVersion: (leave it 0 for the default)",
                               o->language_version >> 16, o->language_version & 0xffff);
        }
        cm__msg_setLanguageVersion(options, o->language_version);
    }
    if (cm__msg_respondsToSelector(options, CM__SEL(setMathMode))) {
        cm__msg_setMathMode(options, o->math_mode == CM_MATH_MODE_SAFE ? CM__MTL_MATH_MODE_SAFE
                                     : o->math_mode == CM_MATH_MODE_RELAXED
                                         ? CM__MTL_MATH_MODE_RELAXED
                                         : CM__MTL_MATH_MODE_FAST);
        if (cm__msg_respondsToSelector(options, CM__SEL(setMathFloatingPointFunctions)))
            cm__msg_setMathFloatingPointFunctions(options, o->math_mode == CM_MATH_MODE_SAFE
                                                               ? CM__MTL_MATH_FUNCTIONS_PRECISE
                                                               : CM__MTL_MATH_FUNCTIONS_FAST);
    } else {
        cm__msg_setFastMathEnabled(options, o->math_mode != CM_MATH_MODE_SAFE);
    }
    *out = options;
    return CM_OK;
}

cm_status cm__metal_compile(const char *func, cm__id device, const char *source,
                            const cm__compile_options *o, cm__id *out) {
    *out = NULL;
    cm__id options = NULL;
    CM__TRY(cm__compile_options_new(func, o, &options));
    cm__id text = NULL;
    cm_status status = cm__ns_string_from_utf8(func, source, &text);
    if (status != CM_OK) {
        cm__objc_release(options);
        return status;
    }
    void *pool = cm__objc_pool_push();
    cm__id error = NULL; /* autoreleased */
    cm__id library = cm__msg_newLibraryWithSource_options_error(device, text, options, &error);
    if (library == NULL)
        status =
            cm__fail_ns_error(func, CM_ERR_COMPILE, error, "the Metal library did not compile");
    cm__objc_pool_pop(pool);
    cm__objc_release(text);
    cm__objc_release(options);
    *out = library;
    return status;
}

/* What a library of the cache is made from, on a miss: MSL source with
 * options, or precompiled bytes. */
typedef struct cm__library_origin {
    const char *source; /* or NULL: bytes */
    const cm__compile_options *options;
    const void *data;
    size_t size;
} cm__library_origin;

static cm_status cm__metal_load_bytes(const char *func, cm__id device, const void *data,
                                      size_t size, cm__id *out);

/* Makes a library from a cm__library_origin. */
static cm_status cm__library_make(const char *func, cm__metal_device *d, const void *ctx,
                                  cm__metal_cached *made) {
    const cm__library_origin *from = ctx;
    return from->source != NULL
               ? cm__metal_compile(func, d->device, from->source, from->options, &made->object)
               : cm__metal_load_bytes(func, d->device, from->data, from->size, &made->object);
}

/* The device's library for `key` (+1 in *out), made from `from` on first
 * use. Takes the cache lock. */
static cm_status cm__cached_library(const char *func, cm__metal_device *d, const char *key,
                                    size_t n, const cm__library_origin *from, cm__id *out,
                                    uint64_t *serial) {
    cm__metal_cached got;
    CM__TRY(cm__cache_get(func, d, key, n, cm__library_make, from, &got, NULL));
    *out = got.object;
    *serial = got.serial;
    return CM_OK;
}

cm_status cm__metal_library(const char *func, cm__metal_device *d, const char *source,
                            const cm__compile_options *o, cm__id *out, uint64_t *serial) {
    *out = NULL;
    char head[32];
    const int hn =
        snprintf(head, sizeof head, "L%d:%" PRIu32 ":", (int)o->math_mode, o->language_version);
    const size_t sn = strlen(source);
    size_t n;
    if (cm__add_overflow_size((size_t)hn, sn, &n))
        return cm__fail_as(func, CM_ERR_OVERFLOW, "the source is too long");
    char *key = cm__alloc(n, 1);
    if (key == NULL)
        return cm__fail_as(func, CM_ERR_OUT_OF_MEMORY, "no memory for a cache key");
    memcpy(key, head, (size_t)hn);
    memcpy(key + hn, source, sn);
    const cm_status status = cm__cached_library(
        func, d, key, n, &(cm__library_origin){.source = source, .options = o}, out, serial);
    cm__free(key);
    return status;
}

/* A library from precompiled bytes (newLibraryWithData:error:), +1 in *out. */
static cm_status cm__metal_load_bytes(const char *func, cm__id device, const void *data,
                                      size_t size, cm__id *out) {
    *out = NULL;
    if (!cm__dispatch_data_available())
        return cm__fail_as(func, CM_ERR_UNSUPPORTED,
                           "libdispatch's dispatch_data_create was not found (the Metal "
                           "framework in use provides none), so libraries cannot be loaded "
                           "from bytes");
    cm__id dd = cm__dispatch_data_create(data, size);
    if (dd == NULL)
        return cm__fail_as(func, CM_ERR_OUT_OF_MEMORY, "dispatch_data_create of %zu bytes failed",
                           size);
    void *pool = cm__objc_pool_push();
    cm__id error = NULL;
    cm__id library = cm__msg_newLibraryWithData_error(device, dd, &error);
    cm_status status = CM_OK;
    if (library == NULL)
        status = cm__fail_ns_error(func, CM_ERR_INVALID_ARGUMENT, error,
                                   "the data is not a Metal library");
    cm__objc_pool_pop(pool);
    cm__dispatch_release(dd);
    *out = library;
    return status;
}

/* The device's library of the bytes (+1 in *out), loaded on first use. */
cm_status cm__metal_library_data(const char *func, cm__metal_device *d, const void *data,
                                 size_t size, cm__id *out, uint64_t *serial) {
    *out = NULL;
    size_t n;
    if (cm__add_overflow_size(size, 1, &n))
        return cm__fail_as(func, CM_ERR_OVERFLOW, "size = %zu is too large", size);
    char *key = cm__alloc(n, 1);
    if (key == NULL)
        return cm__fail_as(func, CM_ERR_OUT_OF_MEMORY, "no memory for a cache key");
    key[0] = 'D';
    memcpy(key + 1, data, size);
    const cm_status status = cm__cached_library(
        func, d, key, n, &(cm__library_origin){.data = data, .size = size}, out, serial);
    cm__free(key);
    return status;
}

/* ------------------------------------------------------------ pipelines */

/* Whether fn declares function constants (functionConstantsDictionary,
 * macOS 10.12; a framework without it is taken to have none). */
static bool cm__has_function_constants(cm__id fn) {
    if (!cm__msg_respondsToSelector(fn, CM__SEL(functionConstantsDictionary)))
        return false;
    void *pool = cm__objc_pool_push();
    cm__id dict = cm__msg_functionConstantsDictionary(fn); /* +0 */
    const bool any = dict != NULL && cm__msg_count(dict) > 0;
    cm__objc_pool_pop(pool);
    return any;
}

/* The function `name` of the library (+1), specialised with the constants
 * (none given: every constant of the function takes its default or stays
 * undefined, and a required one fails with Metal's message). */
static cm_status cm__function(const char *func, cm__id library, const char *name,
                              const cm_function_constant *constants, uint32_t nconst, cm__id *out) {
    *out = NULL;
    cm__id ns_name = NULL;
    CM__TRY(cm__ns_string_from_utf8(func, name, &ns_name));
    if (nconst == 0) {
        cm__id fn = cm__msg_newFunctionWithName(library, ns_name);
        if (fn == NULL) {
            cm__objc_release(ns_name);
            return cm__fail_as(func, CM_ERR_INVALID_ARGUMENT,
                               "desc->name = \"%s\": the library has no function of that name",
                               name);
        }
        /* A function that declares function constants makes no pipeline
         * as newFunctionWithName: returns it (Metal's documentation): it is
         * specialised, with no values given, below. */
        if (!cm__has_function_constants(fn)) {
            cm__objc_release(ns_name);
            *out = fn;
            return CM_OK;
        }
        cm__objc_release(fn);
    }
    cm__id values = cm__objc_new(CM__CLASS(MTLFunctionConstantValues));
    if (values == NULL) {
        cm__objc_release(ns_name);
        return cm__fail_as(func, CM_ERR_UNSUPPORTED,
                           "desc->constants: this Metal framework has no "
                           "MTLFunctionConstantValues, so function constants cannot be set");
    }
    for (uint32_t i = 0; i < nconst; ++i)
        cm__msg_setConstantValue_type_atIndex(
            values, constants[i].value, cm__mtl_data_type(constants[i].dtype), constants[i].index);
    void *pool = cm__objc_pool_push();
    cm__id error = NULL;
    cm__id fn = cm__msg_newFunctionWithName_constantValues_error(library, ns_name, values, &error);
    cm_status status = CM_OK;
    if (fn == NULL && nconst == 0)
        status = cm__fail_ns_error(func, CM_ERR_COMPILE, error,
                                   "desc->constants is empty, but the function has function "
                                   "constants: each one it requires needs a value in "
                                   "desc->constants (cm_function_constant index, dtype, value)");
    else if (fn == NULL)
        status = cm__fail_ns_error(func, CM_ERR_COMPILE, error,
                                   "desc->constants do not specialise the function (each "
                                   "constant it requires needs a value of its type)");
    cm__objc_pool_pop(pool);
    cm__objc_release(values);
    cm__objc_release(ns_name);
    *out = fn;
    return status;
}

/* Reads the bindings of a pipeline's reflection (autoreleased, may be nil)
 * into *sig: MTLBinding where the reflection has `bindings` (macOS 13 /
 * iOS 16), else MTLArgument. Bindings the function does not use are left
 * out. */
static void cm__read_reflection(cm__id reflection, cm__kernel_signature *sig) {
    memset(sig, 0, sizeof *sig);
    if (reflection == NULL)
        return;
    const bool bindings = cm__msg_respondsToSelector(reflection, CM__SEL(bindings));
    if (!bindings && !cm__msg_respondsToSelector(reflection, CM__SEL(arguments)))
        return;
    cm__id list = bindings ? cm__msg_bindings(reflection) : cm__msg_arguments(reflection);
    if (list == NULL)
        return;
    const cm__uint n = cm__msg_count(list);
    for (cm__uint i = 0; i < n; ++i) {
        cm__id b = cm__msg_objectAtIndex(list, i);
        if (b == NULL || !(bindings ? cm__msg_isUsed(b) : cm__msg_isActive(b)))
            continue;
        /* MTLBindingType is an NSInteger, MTLArgumentType an NSUInteger
         * of the same values. */
        const cm__int type = cm__msg_type(b);
        const cm__uint index = cm__msg_index(b);
        if (index >= CM_KERNEL_MAX_BUFFERS ||
            (type != CM__MTL_BINDING_BUFFER && type != CM__MTL_BINDING_THREADGROUP))
            continue;
        const uint32_t bit = 1u << index;
        char *name;
        if (type == CM__MTL_BINDING_BUFFER) {
            sig->buffers |= bit;
            if (cm__msg_access(b) != CM__MTL_ACCESS_READ_ONLY)
                sig->written |= bit;
            name = sig->buffer_names[index];
        } else {
            sig->threadgroups |= bit;
            name = sig->threadgroup_names[index];
        }
        cm__id ns = cm__msg_name(b);
        const char *utf8 = ns != NULL ? cm__msg_UTF8String(ns) : NULL;
        snprintf(name, CM__BINDING_NAME_MAX, "%s", utf8 != NULL ? utf8 : "");
    }
    sig->known = true;
}

/* CM_ERR_COMPILE for a pipeline Metal did not make, with its message; a
 * kernel made without constants is told where they go (a kernel with
 * function constants needs their values to become a pipeline). */
static cm_status cm__pipeline_error(const char *func, cm__id error, const char *name,
                                    uint32_t nconst) {
    char what[512];
    snprintf(what, sizeof what, "desc->name = \"%s\": no pipeline was made%s", name,
             nconst == 0 ? " (a kernel with function constants needs their values in "
                           "desc->constants: cm_function_constant index, dtype, value)"
                         : "");
    return cm__fail_ns_error(func, CM_ERR_COMPILE, error, what);
}

/* The pipeline of fn made through a descriptor: labelled `label` (when not
 * NULL: a pipeline state's label is read-only) and with the device's
 * binary archive when it has one (taken from it when it holds fn's code),
 * which then records it for the next save; NULL when that fails, and the
 * caller compiles without the descriptor: a stale or refused archive never
 * fails the user's work. cache_lock held. */
static cm__id cm__pipeline_from_archive(cm__metal_device *d, cm__id fn, const char *label,
                                        cm__kernel_signature *sig) {
    cm__class cls = CM__CLASS(MTLComputePipelineDescriptor);
    cm__class array_cls = CM__CLASS(NSArray);
    if (cls == NULL || array_cls == NULL)
        return NULL;
    cm__id desc = cm__objc_new(cls);
    if (desc == NULL)
        return NULL;
    void *pool = cm__objc_pool_push();
    cm__id pipeline = NULL;
    cm__id archives = d->archive != NULL
                          ? cm__msg_arrayWithObjects_count((cm__id)array_cls, &d->archive, 1)
                          : NULL;
    if ((archives != NULL || d->archive == NULL) &&
        (label == NULL || cm__metal_set_label(__func__, "label", desc, label) == CM_OK)) {
        cm__msg_setComputeFunction(desc, fn);
        if (archives != NULL)
            cm__msg_setBinaryArchives(desc, archives);
        cm__id error = NULL, reflection = NULL; /* autoreleased */
        pipeline = cm__msg_newComputePipelineStateWithDescriptor_options_reflection_error(
            d->device, desc, CM__MTL_PIPELINE_OPTION_ARGUMENT_INFO, &reflection, &error);
        if (pipeline != NULL)
            cm__read_reflection(reflection, sig);
        /* Recording may fail (Metal archives take no specialised
         * functions): the pipeline is made all the same. */
        if (pipeline != NULL && archives != NULL)
            (void)cm__msg_addComputePipelineFunctionsWithDescriptor_error(d->archive, desc, &error);
    }
    cm__objc_pool_pop(pool);
    cm__objc_release(desc);
    return pipeline;
}

/* What a pipeline of the cache is made from, on a miss. */
typedef struct cm__pipeline_origin {
    cm__id library;
    const char *name;
    const cm_function_constant *constants;
    uint32_t nconst;
    const char *label; /* NULL: none */
} cm__pipeline_origin;

/* Makes a pipeline (through the binary archive when the device has one),
 * its limits and its bindings from a cm__pipeline_origin. */
static cm_status cm__pipeline_make(const char *func, cm__metal_device *d, const void *ctx,
                                   cm__metal_cached *made) {
    const cm__pipeline_origin *from = ctx;
    const char *name = from->name;
    cm__id fn = NULL;
    cm_status status = cm__function(func, from->library, name, from->constants, from->nconst, &fn);
    cm__id pipeline = NULL;
    cm__kernel_signature bindings;
    if (status == CM_OK && (d->archive != NULL || from->label != NULL))
        pipeline = cm__pipeline_from_archive(d, fn, from->label, &bindings);
    if (status == CM_OK && pipeline == NULL) {
        void *pool = cm__objc_pool_push();
        cm__id error = NULL, reflection = NULL; /* autoreleased */
        pipeline = cm__msg_newComputePipelineStateWithFunction_options_reflection_error(
            d->device, fn, CM__MTL_PIPELINE_OPTION_ARGUMENT_INFO, &reflection, &error);
        if (pipeline == NULL)
            status = cm__pipeline_error(func, error, name, from->nconst);
        else
            cm__read_reflection(reflection, &bindings);
        cm__objc_pool_pop(pool);
    }
    cm__objc_release(fn);
    cm_kernel_info ki = {0};
    if (status == CM_OK) {
        ki.max_threads_per_threadgroup = (uint32_t)cm__msg_maxTotalThreadsPerThreadgroup(pipeline);
        ki.thread_execution_width = (uint32_t)cm__msg_threadExecutionWidth(pipeline);
        if (cm__msg_respondsToSelector(pipeline, CM__SEL(staticThreadgroupMemoryLength)))
            ki.static_threadgroup_memory =
                (uint32_t)cm__msg_staticThreadgroupMemoryLength(pipeline);
        if (ki.max_threads_per_threadgroup == 0 || ki.thread_execution_width == 0)
            status = cm__fail_as(func, CM_ERR_DEVICE, "pipeline %s reports no threads", name);
    }
    if (status != CM_OK) {
        cm__objc_release(pipeline);
        return status;
    }
    made->object = pipeline;
    made->info = ki;
    made->sig = bindings;
    return CM_OK;
}

cm_status cm__metal_pipeline(const char *func, cm__metal_device *d, cm__id library,
                             uint64_t library_serial, const char *name,
                             const cm_function_constant *constants, uint32_t nconst,
                             const char *label, cm__id *out, cm_kernel_info *info,
                             cm__kernel_signature *sig) {
    *out = NULL;
    /* Key: library serial, name, label, then (index, dtype, value bytes)
     * per constant. */
    char key[2048];
    int n = snprintf(key, sizeof key, "P%" PRIu64 ":%s%c%s", library_serial, name,
                     label != NULL ? '\x01' : '\0', label != NULL ? label : "");
    if (n < 0 || (size_t)n >= sizeof key)
        return cm__fail_as(func, CM_ERR_INVALID_ARGUMENT,
                           "desc->name with desc->label is too long");
    size_t len = (size_t)n + 1;
    for (uint32_t i = 0; i < nconst; ++i) {
        const size_t size = cm__dtype(constants[i].dtype)->size;
        if (len + 8 + size > sizeof key)
            return cm__fail_as(func, CM_ERR_INVALID_ARGUMENT,
                               "desc->constant_count = %" PRIu32 " is too many", nconst);
        const uint32_t head[2] = {constants[i].index, (uint32_t)constants[i].dtype};
        memcpy(key + len, head, 8);
        memcpy(key + len + 8, constants[i].value, size);
        len += 8 + size;
    }
    const cm__pipeline_origin from = {library, name, constants, nconst, label};
    cm__metal_cached got;
    CM__TRY(cm__cache_get(func, d, key, len, cm__pipeline_make, &from, &got, sig));
    *out = got.object;
    *info = got.info;
    return CM_OK;
}
