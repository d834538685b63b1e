/* SPDX-License-Identifier: MIT */
/* Buffers: creation, wrapping of foreign host memory, reference counting. */
#include "backend.h"

#include <cmetal/buffer.h>

#include <string.h>

const char *cm__storage_mode_name(cm_storage_mode storage) {
    switch (storage) {
    case CM_STORAGE_DEFAULT: return "default";
    case CM_STORAGE_SHARED: return "shared";
    case CM_STORAGE_MANAGED: return "managed";
    case CM_STORAGE_PRIVATE: return "private";
    }
    return "unknown";
}

/* A new buffer struct followed by `extra` zeroed bytes in the same block
 * (a tensor that lives and dies with the buffer). */
static cm_status cm__buffer_new(cm_device *device, size_t size, cm_storage_mode storage,
                                size_t extra, cm_buffer **out) {
    cm_buffer *buffer = cm__alloc(sizeof(cm_buffer) + extra, _Alignof(max_align_t));
    if (buffer == NULL)
        return cm__fail_as("cm_buffer_create", CM_ERR_OUT_OF_MEMORY, "no memory for a buffer");
    cm__ref_init(&buffer->ref);
    buffer->device = device;
    buffer->size = size;
    buffer->storage = storage;
    *out = buffer;
    return CM_OK;
}

cm_status cm_buffer_create(cm_device *device, const cm_buffer_desc *desc, cm_buffer **out) {
    CM__REQUIRE_NONNULL(out);
    *out = NULL;
    CM__REQUIRE_NONNULL(device);
    cm_buffer_desc d = desc != NULL ? *desc : (cm_buffer_desc){0};
    if (d.storage == CM_STORAGE_DEFAULT)
        d.storage = CM_STORAGE_SHARED;
    CM__REQUIRE_ARG(d.storage >= CM_STORAGE_SHARED && d.storage <= CM_STORAGE_PRIVATE,
                    "desc->storage = %d is not a cm_storage_mode", (int)d.storage);
    cm_buffer *buffer = NULL;
    CM__TRY(cm__buffer_new(device, d.size, d.storage, 0, &buffer));
    cm_status status = device->backend->buffer_alloc(device, buffer);
    if (status != CM_OK) {
        cm__free(buffer);
        return status;
    }
    cm_device_retain(device);
    *out = buffer;
    return CM_OK;
}

cm_status cm_buffer_wrap_host(cm_device *device, const cm_host_memory_desc *desc,
                              cm_buffer **out) {
    CM__REQUIRE_NONNULL(out);
    *out = NULL;
    CM__REQUIRE_NONNULL(device);
    CM__REQUIRE_NONNULL(desc);
    CM__REQUIRE_ARG(desc->data != NULL || desc->size == 0,
                    "desc->data = NULL with desc->size = %zu: only an empty buffer may be NULL",
                    desc->size);
    CM__REQUIRE_ARG((desc->flags & ~(uint32_t)CM_BUFFER_READ_ONLY) == 0,
                    "desc->flags = 0x%x: only CM_BUFFER_READ_ONLY may be set", desc->flags);
    CM__REQUIRE_ARG(desc->copy >= CM_COPY_IF_NEEDED && desc->copy <= CM_COPY_ALWAYS,
                    "desc->copy = %d is not a cm_copy_policy", (int)desc->copy);
    return cm__buffer_wrap_host(device, desc, 0, out);
}

cm_status cm__buffer_wrap_host(cm_device *device, const cm_host_memory_desc *desc, size_t extra,
                               cm_buffer **out) {
    cm_buffer *buffer = NULL;
    CM__TRY(cm__buffer_new(device, desc->size, CM_STORAGE_SHARED, extra, &buffer));
    buffer->flags = desc->flags | CM_BUFFER_FOREIGN;
    /* The backend may take the callback over (clearing these) to call it
     * itself, e.g. from Metal's deallocator. */
    buffer->release = desc->release;
    buffer->release_context = desc->release_context;
    cm_status status = device->backend->buffer_wrap_host(device, buffer, desc);
    if (status != CM_OK) {
        cm__free(buffer); /* the callback is never called on failure */
        return status;
    }
    cm_device_retain(device);
    if (buffer->flags & CM_BUFFER_COPIED) {
        /* Nothing of the caller's memory is used any more. */
        buffer->flags &= ~(uint32_t)CM_BUFFER_FOREIGN;
        buffer->release = NULL;
        buffer->release_context = NULL;
        if (desc->release != NULL)
            desc->release(desc->release_context);
    }
    *out = buffer;
    return CM_OK;
}

cm_status cm_buffer_retain(cm_buffer *buffer) {
    CM__REQUIRE_NONNULL(buffer);
    cm__ref_retain(&buffer->ref);
    return CM_OK;
}

cm_status cm_buffer_release(cm_buffer *buffer) {
    if (buffer == NULL || !cm__ref_release(&buffer->ref))
        return CM_OK;
    cm_device *device = buffer->device;
    device->backend->buffer_free(buffer);
    if (buffer->release != NULL)
        buffer->release(buffer->release_context);
    cm__free(buffer);
    cm_device_release(device);
    return CM_OK;
}

cm_status cm_buffer_get_info(const cm_buffer *buffer, cm_buffer_info *out) {
    CM__REQUIRE_NONNULL(buffer);
    CM__REQUIRE_NONNULL(out);
    if (buffer->native != NULL) /* the program may keep it: never reuse it */
        atomic_store(&((cm_buffer *)(uintptr_t)buffer)->native_shared, true);
    *out = (cm_buffer_info){
        .device_type = buffer->device->backend->type,
        .size = buffer->size,
        .storage = buffer->storage,
        .flags = buffer->flags,
        .host = buffer->host,
        .native = buffer->native,
    };
    return CM_OK;
}

cm_status cm_buffer_get_device(const cm_buffer *buffer, cm_device **out) {
    CM__REQUIRE_NONNULL(buffer);
    CM__REQUIRE_NONNULL(out);
    *out = buffer->device;
    return CM_OK;
}


static cm_status cm__transfer(const char *func, cm_buffer *buffer, size_t offset, void *data,
                              size_t size, bool to_device) {
    size_t end;
    if (cm__add_overflow_size(offset, size, &end) || end > buffer->size)
        return cm__fail_as(func, CM_ERR_OUT_OF_BOUNDS,
                           "offset = %zu with size = %zu reaches past the %zu-byte buffer", offset,
                           size, buffer->size);
    if (size == 0)
        return CM_OK;
    if (data == NULL)
        return cm__fail_as(func, CM_ERR_INVALID_ARGUMENT,
                           "data = NULL must not be NULL for %zu bytes", size);
    if (to_device && (buffer->flags & CM_BUFFER_READ_ONLY))
        return cm__fail_as(func, CM_ERR_READ_ONLY, "the buffer is read-only");
    const cm__backend *backend = buffer->device->backend;
    if (buffer->host == NULL) {
        if (backend->buffer_transfer == NULL)
            return cm__fail_as(func, CM_ERR_NOT_HOST_VISIBLE,
                               "the buffer is not visible to the host");
        return backend->buffer_transfer(buffer, offset, data, size, to_device);
    }
    if (backend->buffer_prepare_host != NULL)
        CM__TRY(backend->buffer_prepare_host(buffer, to_device));
    uint8_t *host = (uint8_t *)buffer->host + offset;
    if (to_device) {
        memcpy(host, data, size);
        if (backend->buffer_host_modified != NULL)
            backend->buffer_host_modified(buffer, offset, size);
    } else {
        memcpy(data, host, size);
    }
    return CM_OK;
}

cm_status cm_buffer_write(cm_buffer *buffer, size_t offset, const void *data, size_t size) {
    CM__REQUIRE_NONNULL(buffer);
    return cm__transfer(__func__, buffer, offset, (void *)(uintptr_t)data, size, true);
}

cm_status cm_buffer_read(const cm_buffer *buffer, size_t offset, void *data, size_t size) {
    CM__REQUIRE_NONNULL(buffer);
    return cm__transfer(__func__, (cm_buffer *)(uintptr_t)buffer, offset, data, size, false);
}
