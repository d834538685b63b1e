/* SPDX-License-Identifier: MIT */
/* Streams and fences: lifetimes and validation; the work is the backend's. */
#include "backend.h"

#include <cmetal/stream.h>

#include <stdio.h>

static void cm__stream_link(cm_stream *stream) {
    cm_device *device = stream->device;
    pthread_mutex_lock(&device->streams_lock);
    stream->next = device->streams;
    if (device->streams != NULL)
        device->streams->prev = stream;
    device->streams = stream;
    pthread_mutex_unlock(&device->streams_lock);
}

static void cm__stream_unlink(cm_stream *stream) {
    cm_device *device = stream->device;
    pthread_mutex_lock(&device->streams_lock);
    if (stream->prev != NULL)
        stream->prev->next = stream->next;
    else
        device->streams = stream->next;
    if (stream->next != NULL)
        stream->next->prev = stream->prev;
    pthread_mutex_unlock(&device->streams_lock);
}

cm_status cm__device_sync_streams(const char *func, cm_device *device) {
    const cm__backend *backend = device->backend;
    if (backend->stream_flush == NULL)
        return CM_OK;
    /* The lock keeps every listed stream alive: a dying stream unlinks
     * itself (under the lock) before it is freed. */
    cm_status status = CM_OK;
    char first[512] = "";
    pthread_mutex_lock(&device->streams_lock);
    for (cm_stream *s = device->streams; s != NULL; s = s->next) {
        cm_status st = backend->stream_flush(func, s, true);
        if (status == CM_OK && st != CM_OK) {
            status = st;
            snprintf(first, sizeof first, "%s", cm_last_error());
        }
    }
    pthread_mutex_unlock(&device->streams_lock);
    if (status != CM_OK) /* the first failure's message, not a later one's */
        cm__set_last_error(first);
    return status;
}

cm_status cm__device_visit_stream(cm_device *device, const cm_stream *stream,
                                  cm_status (*visit)(cm_stream *stream, void *context),
                                  void *context) {
    cm_status status = CM_OK;
    pthread_mutex_lock(&device->streams_lock);
    for (cm_stream *s = device->streams; s != NULL; s = s->next)
        if (s == stream) {
            status = visit(s, context);
            break;
        }
    pthread_mutex_unlock(&device->streams_lock);
    return status;
}

cm_status cm__stream_init(cm_stream *stream, cm_device *device, bool is_default, void *native,
                          const char *label) {
    cm__ref_init(&stream->ref);
    stream->device = device;
    stream->is_default = is_default;
    if (device->backend->stream_init != NULL)
        CM__TRY(device->backend->stream_init(stream, native, label));
    cm__stream_link(stream);
    return CM_OK;
}

cm_status cm__stream_new(cm_device *device, bool is_default, void *native, const char *label,
                         cm_stream **out) {
    cm_stream *stream = CM__NEW(cm_stream);
    if (stream == NULL)
        return cm__fail_as("cm_stream_create", CM_ERR_OUT_OF_MEMORY, "no memory for a stream");
    const cm_status status = cm__stream_init(stream, device, is_default, native, label);
    if (status != CM_OK) {
        cm__free(stream);
        return status;
    }
    *out = stream;
    return CM_OK;
}

void cm__stream_destroy(cm_stream *stream) {
    const cm__backend *backend = stream->device->backend;
    if (backend->stream_flush != NULL)
        (void)backend->stream_flush("cm_stream_release", stream, true);
    cm__stream_unlink(stream);
    if (backend->stream_destroy != NULL)
        backend->stream_destroy(stream);
    cm__free(stream);
}

cm_status cm_stream_create(cm_device *device, cm_stream **out) {
    return cm_stream_create_with_desc(device, NULL, out);
}

cm_status cm_stream_create_with_desc(cm_device *device, const cm_stream_desc *desc,
                                     cm_stream **out) {
    CM__REQUIRE_NONNULL(out);
    *out = NULL;
    CM__REQUIRE_NONNULL(device);
    CM__TRY(cm__stream_new(device, false, NULL, desc != NULL ? desc->label : NULL, out));
    cm_device_retain(device);
    return CM_OK;
}

cm_status cm_device_get_stream(cm_device *device, cm_stream **out) {
    CM__REQUIRE_NONNULL(out);
    *out = NULL;
    CM__REQUIRE_NONNULL(device);
    *out = device->default_stream;
    return CM_OK;
}

cm_status cm_stream_retain(cm_stream *stream) {
    CM__REQUIRE_NONNULL(stream);
    cm__ref_retain(&stream->ref);
    return CM_OK;
}

cm_status cm_stream_release(cm_stream *stream) {
    if (stream == NULL || !cm__ref_release(&stream->ref))
        return CM_OK;
    if (stream->is_default) {
        /* The default stream lives as long as its device; a user's extra
         * retain/release pair must not free it. */
        cm__ref_init(&stream->ref);
        return CM_OK;
    }
    cm_device *device = stream->device;
    cm__stream_destroy(stream);
    cm_device_release(device);
    return CM_OK;
}

static cm_status cm__stream_flush(const char *func, cm_stream *stream, bool wait) {
    if (stream == NULL)
        return cm__fail_as(func, CM_ERR_INVALID_ARGUMENT, "stream = NULL must not be NULL");
    const cm__backend *backend = stream->device->backend;
    return backend->stream_flush != NULL ? backend->stream_flush(func, stream, wait) : CM_OK;
}

cm_status cm_stream_flush(cm_stream *stream) {
    return cm__stream_flush(__func__, stream, false);
}

cm_status cm_stream_synchronize(cm_stream *stream) {
    return cm__stream_flush(__func__, stream, true);
}

cm_status cm_stream_get_submissions(const cm_stream *stream, uint64_t *out) {
    CM__REQUIRE_NONNULL(stream);
    CM__REQUIRE_NONNULL(out);
    const cm__backend *backend = stream->device->backend;
    *out = backend->stream_submissions != NULL ? backend->stream_submissions(stream) : 0;
    return CM_OK;
}

cm_status cm_stream_get_gpu_time(const cm_stream *stream, cm_stream_gpu_time *out) {
    CM__REQUIRE_NONNULL(out);
    *out = (cm_stream_gpu_time){0};
    CM__REQUIRE_NONNULL(stream);
    const cm__backend *backend = stream->device->backend;
    if (backend->stream_gpu_time != NULL)
        backend->stream_gpu_time(stream, out);
    return CM_OK;
}

cm_status cm_stream_signal(cm_stream *stream, cm_fence **out) {
    CM__REQUIRE_NONNULL(out);
    *out = NULL;
    CM__REQUIRE_NONNULL(stream);
    cm_fence *fence = CM__NEW(cm_fence);
    if (fence == NULL)
        return cm__fail(CM_ERR_OUT_OF_MEMORY, "no memory for a fence");
    cm__ref_init(&fence->ref);
    fence->device = stream->device;
    const cm__backend *backend = stream->device->backend;
    if (backend->stream_signal != NULL) {
        cm_status status = backend->stream_signal(stream, fence);
        if (status != CM_OK) {
            cm__free(fence);
            return status;
        }
    }
    cm_device_retain(fence->device);
    *out = fence;
    return CM_OK;
}

cm_status cm__fence_make(const char *func, cm_device *device, void *event, uint64_t value,
                         cm_fence **out) {
    cm_fence *fence = CM__NEW(cm_fence);
    if (fence == NULL)
        return cm__fail_as(func, CM_ERR_OUT_OF_MEMORY, "no memory for a fence");
    cm__ref_init(&fence->ref);
    fence->device = device;
    fence->event = event;
    fence->value = value;
    cm_device_retain(device);
    *out = fence;
    return CM_OK;
}

cm_status cm_stream_wait(cm_stream *stream, const cm_fence *fence) {
    CM__REQUIRE_NONNULL(stream);
    CM__REQUIRE_NONNULL(fence);
    CM__REQUIRE_ARG(fence->device == stream->device ||
                        fence->device->backend->type != stream->device->backend->type,
                    "fence belongs to another %s device than the stream",
                    cm_device_type_name(stream->device->backend->type));
    if (fence->device->backend != stream->device->backend) {
        /* A fence of another kind of device: wait on the host. */
        return cm_fence_wait(fence, UINT64_MAX);
    }
    const cm__backend *backend = stream->device->backend;
    return backend->stream_wait != NULL ? backend->stream_wait(stream, fence) : CM_OK;
}

cm_status cm_fence_wait(const cm_fence *fence, uint64_t timeout_ns) {
    CM__REQUIRE_NONNULL(fence);
    const cm__backend *backend = fence->device->backend;
    return backend->fence_wait != NULL ? backend->fence_wait(fence, timeout_ns) : CM_OK;
}

cm_status cm_fence_get_info(const cm_fence *fence, cm_fence_info *out) {
    CM__REQUIRE_NONNULL(fence);
    CM__REQUIRE_NONNULL(out);
    const cm__backend *backend = fence->device->backend;
    *out = (cm_fence_info){
        .device_type = backend->type,
        .shared_event = fence->event,
        .value = fence->value,
        .signaled = backend->fence_signaled == NULL || backend->fence_signaled(fence),
    };
    return CM_OK;
}

cm_status cm_fence_retain(cm_fence *fence) {
    CM__REQUIRE_NONNULL(fence);
    cm__ref_retain(&fence->ref);
    return CM_OK;
}

cm_status cm_fence_release(cm_fence *fence) {
    if (fence == NULL || !cm__ref_release(&fence->ref))
        return CM_OK;
    cm_device *device = fence->device;
    if (device->backend->fence_destroy != NULL)
        device->backend->fence_destroy(fence);
    cm__free(fence);
    cm_device_release(device);
    return CM_OK;
}
