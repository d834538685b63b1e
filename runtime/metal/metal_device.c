/* SPDX-License-Identifier: MIT */
/* The top of the Metal device: the backend table, opening devices, and
 * the public functions of cmetal/metal.h. The only sends are through
 * objc/bridge.h. */
#include "metal_internal.h"

#include <cmetal/metal.h>

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------ devices */

static cm_status cm__metal_get_info(const cm_device *device, cm_device_info *out) {
    *out = cm__mtl_dev(device)->info;
    return CM_OK;
}

static void cm__metal_destroy_unpooled(cm_device *device) {
    cm__metal_device *d = cm__mtl_dev(device);
    cm__metal_kernels_destroy(d);
    cm__metal_alloc_destroy(&d->alloc);
    for (int k = 0; k < 2; ++k)
        cm__objc_release(d->staging[k]);
    pthread_mutex_destroy(&d->staging_lock);
    cm__objc_release(d->device);
    cm__free(d);
}

/* Every entry point that sends messages runs inside its own autorelease
 * pool, so loops on threads without one never grow memory. */

static CM__OBJC_POOLED(cm_status, cm__metal_stream_init, (cm_stream *stream),
                       cm__metal_stream_init_unpooled(stream))

static CM__OBJC_POOLED_VOID(cm__metal_stream_destroy, (cm_stream *stream),
                            cm__metal_stream_destroy_unpooled(stream))

static CM__OBJC_POOLED(cm_status, cm__metal_stream_signal, (cm_stream *stream, cm_fence *fence),
                       cm__metal_stream_signal_unpooled(stream, fence))

static CM__OBJC_POOLED(bool, cm__metal_fence_signaled, (const cm_fence *fence),
                       cm__metal_fence_signaled_unpooled(fence))

static CM__OBJC_POOLED(cm_status, cm__metal_fence_wait,
                       (const cm_fence *fence, uint64_t timeout_ns),
                       cm__metal_fence_wait_unpooled(fence, timeout_ns))

static CM__OBJC_POOLED_VOID(cm__metal_fence_destroy, (cm_fence *fence),
                            cm__metal_fence_destroy_unpooled(fence))

static CM__OBJC_POOLED(cm_status, cm__metal_buffer_alloc, (cm_device *device, cm_buffer *buffer),
                       cm__metal_buffer_alloc_unpooled(device, buffer))

static CM__OBJC_POOLED(cm_status, cm__metal_buffer_wrap_host,
                       (cm_device *device, cm_buffer *buffer, const cm_host_memory_desc *desc),
                       cm__metal_buffer_wrap_host_unpooled(device, buffer, desc))

static CM__OBJC_POOLED_VOID(cm__metal_buffer_free, (cm_buffer *buffer),
                            cm__metal_buffer_free_unpooled(buffer))

static CM__OBJC_POOLED(cm_status, cm__metal_buffer_prepare_host, (cm_buffer *buffer, bool write),
                       cm__metal_buffer_prepare_host_unpooled(buffer, write))

static CM__OBJC_POOLED(cm_status, cm__metal_buffer_transfer,
                       (cm_buffer *buffer, size_t offset, void *host, size_t size, bool to_device),
                       cm__metal_buffer_transfer_unpooled(buffer, offset, host, size, to_device))

static CM__OBJC_POOLED_VOID(cm__metal_destroy, (cm_device *device),
                            cm__metal_destroy_unpooled(device))

static const cm__backend cm__metal_backend = {
    .type = CM_DEVICE_METAL,
    .destroy = cm__metal_destroy,
    .get_info = cm__metal_get_info,
    .buffer_alloc = cm__metal_buffer_alloc,
    .buffer_wrap_host = cm__metal_buffer_wrap_host,
    .buffer_free = cm__metal_buffer_free,
    .buffer_prepare_host = cm__metal_buffer_prepare_host,
    .buffer_host_modified = cm__metal_buffer_host_modified,
    .buffer_publish = cm__metal_buffer_publish,
    .buffer_transfer = cm__metal_buffer_transfer,
    .memory = &cm__metal_memory_backend,
    .stream_init = cm__metal_stream_init,
    .stream_destroy = cm__metal_stream_destroy,
    .stream_flush = cm__metal_flush,
    .stream_submissions = cm__metal_stream_submissions,
    .stream_signal = cm__metal_stream_signal,
    .stream_wait = cm__metal_stream_wait,
    .fence_wait = cm__metal_fence_wait,
    .fence_signaled = cm__metal_fence_signaled,
    .fence_destroy = cm__metal_fence_destroy,
    .run_op = cm__metal_run_op,
    .kernels = &cm__metal_kernel_backend,
};

static void cm__read_info(cm__id dev, cm_device_info *info) {
    info->type = CM_DEVICE_METAL;
    void *pool = cm__objc_pool_push();
    cm__ns_string_copy_utf8(cm__msg_name(dev), info->name, sizeof info->name);
    cm__objc_pool_pop(pool);
    info->unified_memory = cm__msg_hasUnifiedMemory(dev);
    info->registry_id = cm__msg_registryID(dev);
    info->max_buffer_length = cm__msg_maxBufferLength(dev);
    info->recommended_working_set = cm__msg_recommendedMaxWorkingSetSize(dev);
    static const struct {
        cm__int family;
        uint32_t flag;
    } families[] = {{1007, CM_GPU_FAMILY_APPLE7}, {1008, CM_GPU_FAMILY_APPLE8},
                    {1009, CM_GPU_FAMILY_APPLE9}, {2002, CM_GPU_FAMILY_MAC2},
                    {5001, CM_GPU_FAMILY_METAL3}};
    for (size_t i = 0; i < sizeof families / sizeof families[0]; ++i)
        if (cm__msg_supportsFamily(dev, families[i].family))
            info->gpu_families |= families[i].flag;
    cm__mtl_size t = cm__msg_maxThreadsPerThreadgroup(dev);
    info->max_threads_per_threadgroup[0] = t.width;
    info->max_threads_per_threadgroup[1] = t.height;
    info->max_threads_per_threadgroup[2] = t.depth;
    /* Anything but Apple's own framework is a software implementation. */
    const char *path = cm__metal_framework_path();
    info->software = path != NULL && strstr(path, "Metal.framework") == NULL;
}

/* Devices numbered at most (a Mac has a few GPUs). */
#define CM__METAL_MAX_DEVICES 64

/* The Metal devices in cmetal's numbering, +1 each in out[0..*n): the
 * system default first, then the others, each once (told apart by
 * registryID), by increasing registryID. */
static cm_status cm__metal_enumerate(const char *func, cm__id out[CM__METAL_MAX_DEVICES],
                                     size_t *n) {
    *n = 0;
    CM__TRY(cm__objc_init_as(func));
    CM__TRY(cm__metal_load_as(func));
    cm__id first = cm__metal_create_system_default_device(); /* +1 or NULL */
    if (first != NULL)
        out[(*n)++] = first;
    const uint64_t first_id = first != NULL ? cm__msg_registryID(first) : 0;
    cm__id all = cm__metal_copy_all_devices(); /* +1 NSArray or NULL */
    const cm__uint count = all != NULL ? cm__msg_count(all) : 0;
    for (cm__uint i = 0; i < count && *n < CM__METAL_MAX_DEVICES; ++i) {
        cm__id dev = cm__msg_objectAtIndex(all, i); /* +0 */
        const uint64_t id = cm__msg_registryID(dev);
        bool seen = first != NULL && id == first_id;
        for (size_t j = first != NULL; !seen && j < *n; ++j)
            seen = cm__msg_registryID(out[j]) == id;
        if (seen)
            continue;
        /* Insert after the default, sorted by registryID. */
        size_t at = *n;
        while (at > (first != NULL ? 1u : 0u) && cm__msg_registryID(out[at - 1]) > id) {
            out[at] = out[at - 1];
            --at;
        }
        out[at] = cm__objc_retain(dev);
        ++*n;
    }
    cm__objc_release(all);
    return CM_OK;
}

static cm_status cm__metal_device_count_unpooled(uint32_t *count) {
    *count = 0;
    cm__id devices[CM__METAL_MAX_DEVICES];
    size_t n = 0;
    CM__TRY(cm__metal_enumerate("cm_device_count", devices, &n));
    for (size_t i = 0; i < n; ++i)
        cm__objc_release(devices[i]);
    *count = (uint32_t)n;
    return CM_OK;
}

CM__OBJC_POOLED(cm_status, cm__metal_device_count, (uint32_t *count),
                cm__metal_device_count_unpooled(count))

static cm_status cm__metal_device_open_unpooled(uint32_t index, cm_device **out) {
    static const char func[] = "cm_device_open";
    *out = NULL;
    cm__id devices[CM__METAL_MAX_DEVICES];
    size_t n = 0;
    CM__TRY(cm__metal_enumerate(func, devices, &n));
    cm__id dev = index < n ? devices[index] : NULL;
    for (size_t i = 0; i < n; ++i)
        if (devices[i] != dev)
            cm__objc_release(devices[i]);
    if (dev == NULL)
        return cm__fail_as(func, CM_ERR_NO_DEVICE, "index = %u: there are %zu Metal devices",
                           index, n);
    cm__metal_device *d = CM__NEW(cm__metal_device);
    if (d == NULL) {
        cm__objc_release(dev);
        return cm__fail_as(func, CM_ERR_OUT_OF_MEMORY, "no memory for a Metal device");
    }
    d->device = dev;
    pthread_mutex_init(&d->staging_lock, NULL);
    cm__metal_kernels_init(d);
    cm__read_info(dev, &d->info);
    cm__metal_alloc_init(&d->alloc, d->info.recommended_working_set);
    cm_status status = cm__device_new(&cm__metal_backend, d, out);
    if (status != CM_OK)
        cm__metal_destroy_unpooled(&(cm_device){.impl = d});
    else
        (*out)->index = index;
    return status;
}

CM__OBJC_POOLED(cm_status, cm__metal_device_open, (uint32_t index, cm_device **out),
                cm__metal_device_open_unpooled(index, out))

/* ------------------------------------------------------------ public */

static cm_status cm__require_metal(const char *func, const cm_device *device) {
    if (device->backend != &cm__metal_backend)
        return cm__fail_as(func, CM_ERR_UNSUPPORTED, "device is a %s device, not Metal",
                           cm_device_type_name(device->backend->type));
    return CM_OK;
}

/* The name of an MTLDevice, for messages. Inside a pool. */
static void cm__device_name(cm__id dev, char *buf, size_t cap) {
    cm__id name = dev != NULL ? cm__msg_name(dev) : NULL;
    if (name == NULL || cm__ns_string_copy_utf8(name, buf, cap) == 0)
        snprintf(buf, cap, "(unnamed)");
}

/* cm_buffer_wrap_metal after its argument checks. Inside a pool. */
static cm_status cm__wrap_metal(const char *func, cm_device *device,
                                const cm_metal_buffer_desc *desc, cm_buffer **out) {
    const cm__id own = cm__mtl_dev(device)->device;
    const cm__id owner = cm__msg_device(desc->buffer);
    if (owner != own &&
        (owner == NULL || cm__msg_registryID(owner) != cm__msg_registryID(own))) {
        char theirs[128], ours[128];
        cm__device_name(owner, theirs, sizeof theirs);
        cm__device_name(own, ours, sizeof ours);
        return cm__fail_as(func, CM_ERR_INVALID_ARGUMENT,
                           "desc->buffer belongs to the MTLDevice \"%s\" (registryID %" PRIu64
                           "), not to this device, \"%s\" (registryID %" PRIu64 ")",
                           theirs, owner != NULL ? cm__msg_registryID(owner) : 0, ours,
                           cm__msg_registryID(own));
    }
    cm_buffer *buffer = CM__NEW(cm_buffer);
    if (buffer == NULL)
        return cm__fail_as(func, CM_ERR_OUT_OF_MEMORY, "no memory for a buffer");
    cm__ref_init(&buffer->ref);
    buffer->device = device;
    cm__uint mode = cm__msg_storageMode(desc->buffer);
    switch (mode) {
    case CM__MTL_STORAGE_MODE_SHARED: buffer->storage = CM_STORAGE_SHARED; break;
    case CM__MTL_STORAGE_MODE_MANAGED: buffer->storage = CM_STORAGE_MANAGED; break;
    case CM__MTL_STORAGE_MODE_PRIVATE: buffer->storage = CM_STORAGE_PRIVATE; break;
    default:
        cm__free(buffer);
        return cm__fail_as(func, CM_ERR_UNSUPPORTED,
                           "desc->buffer has storageMode %lu (memoryless)", mode);
    }
    cm_status status = cm__buffer_impl(func, buffer);
    if (status != CM_OK) {
        cm__free(buffer);
        return status;
    }
    /* Untracked (MLX's buffers are): cmetal orders the passes itself. */
    cm__mtl_buf(buffer)->hazard_untracked =
        cm__msg_hazardTrackingMode(desc->buffer) == CM__MTL_HAZARD_UNTRACKED;
    buffer->size = cm__msg_length(desc->buffer);
    buffer->flags = desc->flags | CM_BUFFER_FOREIGN;
    buffer->release = desc->release;
    buffer->release_context = desc->release_context;
    cm__buffer_adopt(buffer, cm__objc_retain(desc->buffer));
    cm_device_retain(device);
    *out = buffer;
    return CM_OK;
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
    CM__TRY(cm__require_metal(__func__, device));
    void *pool = cm__objc_pool_push();
    const cm_status status = cm__wrap_metal(__func__, device, desc, out);
    cm__objc_pool_pop(pool);
    return status;
}

cm_status cm_device_get_metal_device(const cm_device *device, void **out) {
    CM__REQUIRE_NONNULL(out);
    *out = NULL;
    CM__REQUIRE_NONNULL(device);
    CM__TRY(cm__require_metal(__func__, device));
    *out = cm__mtl_dev(device)->device;
    return CM_OK;
}

cm_status cm_stream_get_metal_queue(const cm_stream *stream, void **out) {
    CM__REQUIRE_NONNULL(out);
    *out = NULL;
    CM__REQUIRE_NONNULL(stream);
    CM__TRY(cm__require_metal(__func__, stream->device));
    *out = cm__mtl_stream(stream)->queue;
    return CM_OK;
}
