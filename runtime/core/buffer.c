/* SPDX-License-Identifier: MIT */
/* Buffers: creation, wrapping of foreign host memory, reference counting. */
#include "backend.h"

#include <cmetal/buffer.h>
#include <cmetal/metal.h>

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

/* The buffer's device cannot wrap native objects: not a Metal device. */
static cm_status cm__no_native(const char *func, const cm_device *device) {
    return cm__fail_as(func, CM_ERR_UNSUPPORTED, "device is a %s device, not Metal",
                       cm_device_type_name(device->backend->type));
}

cm_status cm__buffer_make(const char *func, cm_device *device, const cm__buffer_source *src,
                          size_t extra, cm_buffer **out) {
    if (src->kind == CM__BUFFER_NATIVE && device->backend->buffer_wrap_native == NULL)
        return cm__no_native(func, device);
    cm_buffer *buffer = cm__alloc(sizeof(cm_buffer) + extra, _Alignof(max_align_t));
    if (buffer == NULL)
        return cm__fail_as(func, CM_ERR_OUT_OF_MEMORY, "no memory for a buffer");
    cm__ref_init(&buffer->ref);
    buffer->device = device;
    cm_status status = CM_OK;
    switch (src->kind) {
    case CM__BUFFER_ALLOC:
        buffer->size = src->size;
        buffer->storage = src->storage;
        status = device->backend->buffer_alloc(device, buffer, src->label);
        break;
    case CM__BUFFER_HOST:
        buffer->size = src->host->size;
        buffer->storage = CM_STORAGE_SHARED;
        buffer->flags = src->host->flags | CM_BUFFER_FOREIGN;
        /* The backend may take the callback over (clearing these) to call
         * it itself, e.g. from Metal's deallocator. */
        buffer->release = src->host->release;
        buffer->release_context = src->host->release_context;
        status = device->backend->buffer_wrap_host(device, buffer, src->host);
        break;
    case CM__BUFFER_NATIVE:
        buffer->flags = src->flags | CM_BUFFER_FOREIGN;
        buffer->release = src->release;
        buffer->release_context = src->release_context;
        status =
            device->backend->buffer_wrap_native(func, src->native_arg, device, buffer, src->native);
        break;
    }
    if (status != CM_OK) {
        cm__free(buffer); /* a wrap's callback is never called on failure */
        return status;
    }
    cm_device_retain(device);
    if (src->kind == CM__BUFFER_HOST && (buffer->flags & CM_BUFFER_COPIED)) {
        /* Nothing of the caller's memory is used any more. */
        buffer->flags &= ~(uint32_t)CM_BUFFER_FOREIGN;
        buffer->release = NULL;
        buffer->release_context = NULL;
        if (src->host->release != NULL)
            src->host->release(src->host->release_context);
    }
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
    const cm__buffer_source src = {
        .kind = CM__BUFFER_ALLOC, .size = d.size, .storage = d.storage, .label = d.label};
    return cm__buffer_make(__func__, device, &src, 0, out);
}

cm_status cm_buffer_wrap_host(cm_device *device, const cm_host_memory_desc *desc, cm_buffer **out) {
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
    const cm__buffer_source src = {.kind = CM__BUFFER_HOST, .host = desc};
    return cm__buffer_make(__func__, device, &src, 0, out);
}

cm_status cm_buffer_wrap_metal(cm_device *device, const cm_metal_buffer_desc *desc,
                               cm_buffer **out) {
    CM__REQUIRE_NONNULL(out);
    *out = NULL;
    CM__REQUIRE_NONNULL(device);
    CM__REQUIRE_NONNULL(desc);
    CM__REQUIRE_ARG(desc->buffer != NULL, "desc->buffer = NULL must be an id<MTLBuffer>");
    CM__REQUIRE_ARG((desc->flags & ~(uint32_t)CM_BUFFER_READ_ONLY) == 0,
                    "desc->flags = 0x%x: only CM_BUFFER_READ_ONLY may be set", desc->flags);
    const cm__buffer_source src = {.kind = CM__BUFFER_NATIVE,
                                   .native = desc->buffer,
                                   .native_arg = "desc->buffer",
                                   .flags = desc->flags,
                                   .release = desc->release,
                                   .release_context = desc->release_context};
    return cm__buffer_make(__func__, device, &src, 0, out);
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
