/* SPDX-License-Identifier: MIT */
/* Body kernels (cmetal/kernel.h): the generator of a kernel's MSL source
 * from its body, names and a dispatch's tensors, and the cache of the
 * kernels generated. Launches through kernel.c's checks. Platform-free. */
#include "kernel_internal.h"
#include "msl_text.h"

#include <cmetal/ops.h>

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

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
        return cm__fail_as(func, CM_ERR_INVALID_ARGUMENT, "desc->%s = NULL with %u names", what, n);
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
        status = cm__copy_names(__func__, "output_names", desc->output_names, desc->output_count,
                                &k->outputs);
    k->noutputs = desc->output_count;
    const uint32_t total = k->ninputs + k->noutputs;
    for (uint32_t i = 0; status == CM_OK && i < total; ++i)
        for (uint32_t j = 0; status == CM_OK && j < i; ++j) {
            const char *a = i < k->ninputs ? k->inputs[i] : k->outputs[i - k->ninputs];
            const char *b = j < k->ninputs ? k->inputs[j] : k->outputs[j - k->ninputs];
            if (strcmp(a, b) == 0)
                status = cm__fail(CM_ERR_INVALID_ARGUMENT,
                                  "the name \"%s\" is used twice "
                                  "among the inputs and outputs",
                                  a);
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

static const struct {
    const char *name, *type;
} cm__body_attributes[] = {
    {"thread_position_in_grid", "uint3"},        {"threads_per_grid", "uint3"},
    {"thread_position_in_threadgroup", "uint3"}, {"threadgroup_position_in_grid", "uint3"},
    {"threads_per_threadgroup", "uint3"},        {"threadgroups_per_grid", "uint3"},
    {"thread_index_in_threadgroup", "uint"},     {"thread_index_in_simdgroup", "uint"},
    {"simdgroup_index_in_threadgroup", "uint"},  {"threads_per_simdgroup", "uint"},
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
            return cm__fail_as(func, CM_ERR_INVALID_ARGUMENT, "desc->%s[%u] = NULL (%s)", what, j,
                               in ? k->inputs[j] : k->outputs[j]);
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
    cm_status status = cm__library_new(func, k->device, source, &k->options, NULL, 0, &lib);
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
        args[n++] = (cm_kernel_arg){
            .type = in ? CM_ARG_INPUT : CM_ARG_OUTPUT, .index = index++, .tensor = t};
    }
    for (uint32_t i = 0; i < total; ++i) {
        const bool in = i < kernel->ninputs;
        const cm_tensor *t = in ? desc->inputs[i] : desc->outputs[i - kernel->ninputs];
        /* setBytes needs at least one element: a 0-d tensor binds {1}. */
        static const int64_t one = 1;
        if (layouts[i].shape) {
            args[n++] =
                (cm_kernel_arg){.type = CM_ARG_BYTES,
                                .index = index++,
                                .data = t->ndim > 0 ? (const void *)t->shape : &one,
                                .size = sizeof(int64_t) * (t->ndim > 0 ? (size_t)t->ndim : 1)};
        }
        if (layouts[i].strides)
            args[n++] =
                (cm_kernel_arg){.type = CM_ARG_BYTES,
                                .index = index++,
                                .data = t->ndim > 0 ? (const void *)t->strides : &one,
                                .size = sizeof(int64_t) * (t->ndim > 0 ? (size_t)t->ndim : 1)};
        if (layouts[i].ndim) {
            ndims[i] = t->ndim;
            args[n++] = (cm_kernel_arg){
                .type = CM_ARG_BYTES, .index = index++, .data = &ndims[i], .size = sizeof(int32_t)};
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
