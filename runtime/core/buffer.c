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

static cm_status cm__buffer_new(cm_device *device, size_t size, cm_storage_mode storage,
                                cm_buffer **out) {
    cm_buffer *buffer = CM__NEW(cm_buffer);
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
    CM__TRY(cm__buffer_new(device, d.size, d.storage, &buffer));
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
    cm_buffer *buffer = NULL;
    CM__TRY(cm__buffer_new(device, desc->size, CM_STORAGE_SHARED, &buffer));
    buffer->flags = desc->flags | CM_BUFFER_FOREIGN;
    cm_status status = device->backend->buffer_wrap_host(device, buffer, desc);
    if (status != CM_OK) {
        cm__free(buffer);
        return status;
    }
    cm_device_retain(device);
    if (buffer->flags & CM_BUFFER_COPIED) {
        /* Nothing of the caller's memory is used any more. */
        buffer->flags &= ~(uint32_t)CM_BUFFER_FOREIGN;
        if (desc->release != NULL)
            desc->release(desc->release_context);
    } else {
        buffer->release = desc->release;
        buffer->release_context = desc->release_context;
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

