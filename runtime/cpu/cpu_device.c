/* SPDX-License-Identifier: MIT */
/* The CPU device: one device, host memory aligned to 256 bytes. Opened
 * with one thread it is one static object (made once by the device
 * constructor); opened with more, each open
 * makes a new device over the same memory whose state is its pool of
 * worker threads (cpu_pool.c). */
#include "cpu_ops.h"

#include <cmetal/device.h>

#include <stdio.h>
#include <string.h>

/* DLPack recommends 256-byte aligned data. */
#define CM__CPU_ALIGN 256

static void cm__cpu_destroy(cm_device *device) {
    cm__cpu_pool_destroy(device->impl);
}

static cm_status cm__cpu_get_info(const cm_device *device, cm_device_info *out) {
    out->cpu_threads = cm__cpu_pool_threads(device->impl);
    out->type = CM_DEVICE_CPU;
    snprintf(out->name, sizeof out->name, "cpu");
    out->unified_memory = true;
    out->software = true;
    out->max_buffer_length = (uint64_t)PTRDIFF_MAX;
    out->max_threads_per_threadgroup[0] = 1;
    out->max_threads_per_threadgroup[1] = 1;
    out->max_threads_per_threadgroup[2] = 1;
    return CM_OK;
}

static cm_status cm__cpu_alloc(const char *func, size_t size, void **out) {
    if (size > (size_t)PTRDIFF_MAX)
        return cm__fail_as(func, CM_ERR_OUT_OF_MEMORY,
                           "size = %zu exceeds the CPU device's maximum of %td bytes", size,
                           PTRDIFF_MAX);
    *out = cm__alloc_raw(size, CM__CPU_ALIGN);
    if (*out == NULL)
        return cm__fail_as(func, CM_ERR_OUT_OF_MEMORY, "could not allocate %zu bytes", size);
    return CM_OK;
}

static cm_status cm__cpu_buffer_alloc(cm_device *device, cm_buffer *buffer, const char *label) {
    (void)device;
    (void)label; /* host memory has no object to name */
    if (buffer->storage != CM_STORAGE_SHARED)
        return cm__fail_as("cm_buffer_create", CM_ERR_UNSUPPORTED,
                           "desc->storage = %s: the CPU device has only shared storage",
                           cm__storage_mode_name(buffer->storage));
    return cm__cpu_alloc("cm_buffer_create", buffer->size, &buffer->host);
}

static cm_status cm__cpu_buffer_wrap_host(cm_device *device, cm_buffer *buffer,
                                          const cm_host_memory_desc *desc) {
    (void)device;
    if (desc->copy != CM_COPY_ALWAYS) {
        buffer->host = desc->data;
        return CM_OK;
    }
    CM__TRY(cm__cpu_alloc("cm_buffer_wrap_host", desc->size, &buffer->host));
    if (desc->size > 0)
        memcpy(buffer->host, desc->data, desc->size);
    buffer->flags |= CM_BUFFER_COPIED;
    return CM_OK;
}

static void cm__cpu_buffer_free(cm_buffer *buffer) {
    if (!(buffer->flags & CM_BUFFER_FOREIGN))
        cm__free(buffer->host);
}

static const cm__backend cm__cpu_backend = {
    .type = CM_DEVICE_CPU,
    .destroy = cm__cpu_destroy,
    .get_info = cm__cpu_get_info,
    .buffer_alloc = cm__cpu_buffer_alloc,
    .buffer_wrap_host = cm__cpu_buffer_wrap_host,
    .buffer_free = cm__cpu_buffer_free,
    .buffer_prepare_host = NULL,
    .run_op = cm__cpu_run_op,
};

cm_status cm__cpu_device_count(uint32_t *count) {
    *count = 1;
    return CM_OK;
}

/* The CPU device is one static object, made on the first open by the
 * device constructor (cm__device_init, in place) and never freed: every
 * open returns it, and opening it allocates nothing (DLPack imports open
 * it). */
static cm_device cm__cpu_device;
static cm_stream cm__cpu_default_stream;
static pthread_once_t cm__cpu_device_once = PTHREAD_ONCE_INIT;
static cm_status cm__cpu_device_status;

static void cm__cpu_device_make(void) {
    cm__cpu_device_status =
        cm__device_init(&cm__cpu_device, &cm__cpu_backend, NULL, &cm__cpu_default_stream);
    cm__cpu_device.immortal = true;
}

cm_status cm__cpu_device_open(uint32_t index, cm_device **out) {
    if (index != 0)
        return cm__fail_as("cm_device_open", CM_ERR_NO_DEVICE,
                           "index = %u: there is one CPU device, index 0", index);
    pthread_once(&cm__cpu_device_once, cm__cpu_device_make);
    if (cm__cpu_device_status != CM_OK)
        return cm__fail_as("cm_device_open", cm__cpu_device_status,
                           "the CPU device could not be made");
    *out = &cm__cpu_device;
    return CM_OK;
}

cm_status cm__cpu_device_open_threads(uint32_t index, uint32_t threads, cm_device **out) {
    if (threads <= 1)
        return cm__cpu_device_open(index, out);
    if (index != 0)
        return cm__fail_as("cm_device_open_desc", CM_ERR_NO_DEVICE,
                           "desc->index = %u: there is one CPU device, index 0", index);
    cm__cpu_pool *pool = NULL;
    CM__TRY(cm__cpu_pool_create(threads, &pool));
    const cm_status status = cm__device_new(&cm__cpu_backend, pool, out);
    if (status != CM_OK)
        cm__cpu_pool_destroy(pool);
    return status;
}
