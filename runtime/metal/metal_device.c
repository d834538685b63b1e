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

static CM__OBJC_POOLED(cm_status, cm__metal_stream_init,
                       (cm_stream * stream, void *native, const char *label),
                       cm__metal_stream_init_unpooled(stream, native, label))

    static CM__OBJC_POOLED_VOID(cm__metal_stream_destroy, (cm_stream * stream),
                                cm__metal_stream_destroy_unpooled(stream))

        static CM__OBJC_POOLED(cm_status, cm__metal_stream_signal,
                               (cm_stream * stream, cm_fence *fence),
                               cm__metal_stream_signal_unpooled(stream, fence))

            static CM__OBJC_POOLED(bool, cm__metal_fence_signaled, (const cm_fence *fence),
                                   cm__metal_fence_signaled_unpooled(fence))

                static CM__OBJC_POOLED(cm_status, cm__metal_fence_wait,
                                       (const cm_fence *fence, uint64_t timeout_ns),
                                       cm__metal_fence_wait_unpooled(fence, timeout_ns))

                    static CM__OBJC_POOLED_VOID(cm__metal_fence_destroy, (cm_fence * fence),
                                                cm__metal_fence_destroy_unpooled(fence))

                        static CM__OBJC_POOLED(cm_status, cm__metal_buffer_alloc,
                                               (cm_device * device, cm_buffer *buffer,
                                                const char *label),
                                               cm__metal_buffer_alloc_unpooled(device, buffer,
                                                                               label))

                            static CM__OBJC_POOLED(cm_status, cm__metal_buffer_wrap_host,
                                                   (cm_device * device, cm_buffer *buffer,
                                                    const cm_host_memory_desc *desc),
                                                   cm__metal_buffer_wrap_host_unpooled(device,
                                                                                       buffer,
                                                                                       desc))

                                static cm_status
    cm__metal_buffer_wrap_native_unpooled(const char *func, const char *arg, cm_device *device,
                                          cm_buffer *buffer, cm__id mtl);

static CM__OBJC_POOLED(cm_status, cm__metal_buffer_wrap_native,
                       (const char *func, const char *arg, cm_device *device, cm_buffer *buffer,
                        void *native),
                       cm__metal_buffer_wrap_native_unpooled(func, arg, device, buffer, native))

    static CM__OBJC_POOLED_VOID(cm__metal_buffer_free, (cm_buffer * buffer),
                                cm__metal_buffer_free_unpooled(buffer))

        static CM__OBJC_POOLED(cm_status, cm__metal_buffer_prepare_host,
                               (cm_buffer * buffer, bool write),
                               cm__metal_buffer_prepare_host_unpooled(buffer, write))

            static CM__OBJC_POOLED(cm_status, cm__metal_buffer_transfer,
                                   (cm_buffer * buffer, size_t offset, void *host, size_t size,
                                    bool to_device),
                                   cm__metal_buffer_transfer_unpooled(buffer, offset, host, size,
                                                                      to_device))

                static CM__OBJC_POOLED_VOID(cm__metal_destroy, (cm_device * device),
                                            cm__metal_destroy_unpooled(device))

                    static const cm__backend cm__metal_backend = {
                        .type = CM_DEVICE_METAL,
                        .destroy = cm__metal_destroy,
                        .get_info = cm__metal_get_info,
                        .buffer_alloc = cm__metal_buffer_alloc,
                        .buffer_wrap_host = cm__metal_buffer_wrap_host,
                        .buffer_wrap_native = cm__metal_buffer_wrap_native,
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
                        .stream_gpu_time = cm__metal_stream_gpu_time,
                        .stream_signal = cm__metal_stream_signal,
                        .stream_wait = cm__metal_stream_wait,
                        .fence_wait = cm__metal_fence_wait,
                        .fence_signaled = cm__metal_fence_signaled,
                        .fence_destroy = cm__metal_fence_destroy,
                        .run_op = cm__metal_run_op,
#ifndef CMETAL_NO_KERNELS /* -DCMETAL_KERNELS=OFF leaves out metal_kernel.c */
                        .kernels = &cm__metal_kernel_backend,
#endif
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
    } families[] = {{1007, CM_GPU_FAMILY_APPLE7},
                    {1008, CM_GPU_FAMILY_APPLE8},
                    {1009, CM_GPU_FAMILY_APPLE9},
                    {2002, CM_GPU_FAMILY_MAC2},
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

/* Whether id is among the registryIDs of out[0..n). */
static bool cm__seen(cm__id const *out, size_t n, uint64_t id) {
    for (size_t j = 0; j < n; ++j)
        if (cm__msg_registryID(out[j]) == id)
            return true;
    return false;
}

/* Every Metal device once (told apart by registryID), +1 each in
 * out[0..*n), by increasing registryID, from MTLCopyAllDevices alone:
 * MTLCreateSystemDefaultDevice is not called, as on a Mac with two GPUs it
 * selects the discrete one for the rest of the process. Where
 * MTLCopyAllDevices gives nothing, the default device stands alone. */
static cm_status cm__metal_all(const char *func, cm__id out[CM__METAL_MAX_DEVICES], size_t *n) {
    *n = 0;
    CM__TRY(cm__objc_init_as(func));
    CM__TRY(cm__metal_load_as(func));
    cm__id all = cm__metal_copy_all_devices(); /* +1 NSArray or NULL */
    const cm__uint count = all != NULL ? cm__msg_count(all) : 0;
    for (cm__uint i = 0; i < count && *n < CM__METAL_MAX_DEVICES; ++i) {
        cm__id dev = cm__msg_objectAtIndex(all, i); /* +0 */
        const uint64_t id = cm__msg_registryID(dev);
        if (cm__seen(out, *n, id))
            continue;
        size_t at = *n;
        while (at > 0 && cm__msg_registryID(out[at - 1]) > id) {
            out[at] = out[at - 1];
            --at;
        }
        out[at] = cm__objc_retain(dev);
        ++*n;
    }
    cm__objc_release(all);
    if (*n == 0) {
        cm__id first = cm__metal_create_system_default_device(); /* +1 or NULL */
        if (first != NULL)
            out[(*n)++] = first;
    }
    return CM_OK;
}

/* The Metal devices in cmetal's numbering, +1 each in out[0..*n): the
 * system default first, then the others by increasing registryID. The
 * default device is asked for only when the numbering needs it: to open
 * index 0, or another index when there are several devices. */
static cm_status cm__metal_enumerate(const char *func, uint32_t index,
                                     cm__id out[CM__METAL_MAX_DEVICES], size_t *n) {
    CM__TRY(cm__metal_all(func, out, n));
    if (*n < 2 && index > 0)
        return CM_OK; /* no such index, whatever the default */
    cm__id first = cm__metal_create_system_default_device(); /* +1 or NULL */
    if (first == NULL)
        return CM_OK; /* no default: by registryID alone */
    const uint64_t first_id = cm__msg_registryID(first);
    size_t at = 0;
    while (at < *n && cm__msg_registryID(out[at]) != first_id)
        ++at;
    if (at == *n) { /* not listed: put in front */
        if (*n == CM__METAL_MAX_DEVICES)
            cm__objc_release(out[--*n]);
        at = (*n)++;
    } else {
        cm__objc_release(out[at]);
    }
    for (; at > 0; --at)
        out[at] = out[at - 1];
    out[0] = first;
    return CM_OK;
}

static cm_status cm__metal_device_count_unpooled(uint32_t *count) {
    *count = 0;
    cm__id devices[CM__METAL_MAX_DEVICES];
    size_t n = 0;
    CM__TRY(cm__metal_all("cm_device_count", devices, &n));
    for (size_t i = 0; i < n; ++i)
        cm__objc_release(devices[i]);
    *count = (uint32_t)n;
    return CM_OK;
}

CM__OBJC_POOLED(cm_status, cm__metal_device_count, (uint32_t *count),
                cm__metal_device_count_unpooled(count))

static cm_status cm__metal_device_make(const char *func, cm__id dev, uint32_t index,
                                       cm_device **out);

static cm_status cm__metal_device_open_unpooled(uint32_t index, cm_device **out) {
    static const char func[] = "cm_device_open";
    *out = NULL;
    cm__id devices[CM__METAL_MAX_DEVICES];
    size_t n = 0;
    CM__TRY(cm__metal_enumerate(func, index, devices, &n));
    cm__id dev = index < n ? devices[index] : NULL;
    for (size_t i = 0; i < n; ++i)
        if (devices[i] != dev)
            cm__objc_release(devices[i]);
    if (dev == NULL)
        return cm__fail_as(func, CM_ERR_NO_DEVICE, "index = %u: there are %zu Metal devices", index,
                           n);
    return cm__metal_device_make(func, dev, index, out);
}

/* A cm_device over dev (+1, taken, released on failure too). */
static cm_status cm__metal_device_make(const char *func, cm__id dev, uint32_t index,
                                       cm_device **out) {
    cm__metal_device *d = CM__NEW(cm__metal_device);
    if (d == NULL) {
        cm__objc_release(dev);
        return cm__fail_as(func, CM_ERR_OUT_OF_MEMORY, "no memory for a Metal device");
    }
    d->device = dev;
    pthread_mutex_init(&d->staging_lock, NULL);
    cm__metal_kernels_init(d);
    cm__read_info(dev, &d->info);
    cm__metal_alloc_init(&d->alloc, dev, d->info.recommended_working_set);
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

/* The backend's buffer_wrap_native: a foreign id<MTLBuffer> of the same
 * device, retained. */
static cm_status cm__metal_buffer_wrap_native_unpooled(const char *func, const char *arg,
                                                       cm_device *device, cm_buffer *buffer,
                                                       cm__id mtl) {
    const cm__id own = cm__mtl_dev(device)->device;
    const cm__id owner = cm__msg_device(mtl);
    if (owner != own && (owner == NULL || cm__msg_registryID(owner) != cm__msg_registryID(own))) {
        char theirs[128], ours[128];
        cm__device_name(owner, theirs, sizeof theirs);
        cm__device_name(own, ours, sizeof ours);
        return cm__fail_as(func, CM_ERR_INVALID_ARGUMENT,
                           "%s belongs to the MTLDevice \"%s\" (registryID %" PRIu64
                           "), not to this device, \"%s\" (registryID %" PRIu64 ")",
                           arg, theirs, owner != NULL ? cm__msg_registryID(owner) : 0, ours,
                           cm__msg_registryID(own));
    }
    cm__uint mode = cm__msg_storageMode(mtl);
    switch (mode) {
    case CM__MTL_STORAGE_MODE_SHARED: buffer->storage = CM_STORAGE_SHARED; break;
    case CM__MTL_STORAGE_MODE_MANAGED: buffer->storage = CM_STORAGE_MANAGED; break;
    case CM__MTL_STORAGE_MODE_PRIVATE: buffer->storage = CM_STORAGE_PRIVATE; break;
    default:
        return cm__fail_as(func, CM_ERR_UNSUPPORTED, "%s has storageMode %lu (memoryless)", arg,
                           mode);
    }
    CM__TRY(cm__buffer_impl(func, buffer));
    /* Untracked (MLX's buffers are): cmetal orders the passes itself. */
    cm__mtl_buf(buffer)->hazard_untracked =
        cm__msg_hazardTrackingMode(mtl) == CM__MTL_HAZARD_UNTRACKED;
    buffer->size = cm__msg_length(mtl);
    cm__buffer_adopt(buffer, cm__objc_retain(mtl));
    return CM_OK;
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

cm_status cm_kernel_get_metal_pipeline(const cm_kernel *kernel, void **out) {
    CM__REQUIRE_NONNULL(out);
    *out = NULL;
    CM__REQUIRE_NONNULL(kernel);
    CM__TRY(cm__require_metal(__func__, kernel->library->device));
    *out = kernel->impl;
    return CM_OK;
}

cm_status cm_device_get_metal_residency_set(const cm_device *device, void **out) {
    CM__REQUIRE_NONNULL(out);
    *out = NULL;
    CM__REQUIRE_NONNULL(device);
    CM__TRY(cm__require_metal(__func__, device));
    *out = cm__mtl_dev(device)->alloc.residency;
    if (*out == NULL)
        return cm__fail(CM_ERR_UNSUPPORTED,
                        "the device has no residency sets (newResidencySetWithDescriptor:error:, "
                        "macOS 15 and GPU family Apple6 or later)");
    return CM_OK;
}

/* ------------------------------------------------------------ adoption */

/* Whether obj answers every selector of sels (n of them); else fails as
 * `func` naming the argument, the object's address, the first missing
 * selector and what the object should have been. Checked with
 * respondsToSelector:, which proxies (the debug layer's) forward. */
static cm_status cm__require_selectors(const char *func, const char *arg, cm__id obj,
                                       const char *type, const cm__sel *sels,
                                       const char *const *names, size_t n) {
    for (size_t i = 0; i < n; ++i)
        if (!cm__msg_respondsToSelector(obj, sels[i]))
            return cm__fail_as(func, CM_ERR_INVALID_ARGUMENT,
                               "%s = %p does not respond to %s: not an %s", arg, (void *)obj,
                               names[i], type);
    return CM_OK;
}

/* Whether obj's device (it answers `device`) is the cm_device's. */
static cm_status cm__require_same_device(const char *func, const char *arg, cm__id obj,
                                         const cm_device *device) {
    const cm__id own = cm__mtl_dev(device)->device;
    const cm__id owner = cm__msg_device(obj);
    if (owner == own || (owner != NULL && cm__msg_registryID(owner) == cm__msg_registryID(own)))
        return CM_OK;
    char theirs[128], ours[128];
    cm__device_name(owner, theirs, sizeof theirs);
    cm__device_name(own, ours, sizeof ours);
    return cm__fail_as(func, CM_ERR_INVALID_ARGUMENT,
                       "%s belongs to the MTLDevice \"%s\", not to this device, \"%s\"", arg,
                       theirs, ours);
}

static cm_status cm__device_wrap_metal(cm__id mtl, cm_device **out) {
    static const char func[] = "cm_device_wrap_metal";
    CM__TRY(cm__objc_init_as(func));
    CM__TRY(cm__metal_load_as(func));
    const cm__sel sels[] = {CM__SEL(newCommandQueue), CM__SEL(newBufferWithLength_options),
                            CM__SEL(newSharedEvent), CM__SEL(registryID)};
    const char *const names[] = {"newCommandQueue",
                                 "newBufferWithLength:options:", "newSharedEvent", "registryID"};
    CM__TRY(cm__require_selectors(func, "mtl_device", mtl, "id<MTLDevice>", sels, names, 4));
    /* Numbered as cm_device_open numbers it (DLPack's device_id), when the
     * device is one of the system's. */
    cm__id devices[CM__METAL_MAX_DEVICES];
    size_t n = 0;
    uint32_t index = 0;
    if (cm__metal_enumerate(func, 1, devices, &n) == CM_OK) { /* every index */
        const uint64_t id = cm__msg_registryID(mtl);
        for (size_t i = 0; i < n; ++i) {
            if (cm__msg_registryID(devices[i]) == id && index == 0)
                index = (uint32_t)i;
            cm__objc_release(devices[i]);
        }
    }
    return cm__metal_device_make(func, cm__objc_retain(mtl), index, out);
}

cm_status cm_device_wrap_metal(void *mtl_device, cm_device **out) {
    CM__REQUIRE_NONNULL(out);
    *out = NULL;
    CM__REQUIRE_ARG(mtl_device != NULL, "mtl_device = NULL must be an id<MTLDevice>");
    void *pool = cm__objc_pool_push();
    const cm_status status = cm__device_wrap_metal(mtl_device, out);
    cm__objc_pool_pop(pool);
    return status;
}

static cm_status cm__stream_wrap_metal(cm_device *device, cm__id queue, cm_stream **out) {
    static const char func[] = "cm_stream_wrap_metal";
    const cm__sel sels[] = {CM__SEL(commandBuffer), CM__SEL(device)};
    const char *const names[] = {"commandBuffer", "device"};
    CM__TRY(cm__require_selectors(func, "queue", queue, "id<MTLCommandQueue>", sels, names, 2));
    CM__TRY(cm__require_same_device(func, "queue", queue, device));
    CM__TRY(cm__stream_new(device, false, queue, NULL, out));
    cm_device_retain(device);
    return CM_OK;
}

cm_status cm_stream_wrap_metal(cm_device *device, void *queue, cm_stream **out) {
    CM__REQUIRE_NONNULL(out);
    *out = NULL;
    CM__REQUIRE_NONNULL(device);
    CM__REQUIRE_ARG(queue != NULL, "queue = NULL must be an id<MTLCommandQueue>");
    CM__TRY(cm__require_metal(__func__, device));
    void *pool = cm__objc_pool_push();
    const cm_status status = cm__stream_wrap_metal(device, queue, out);
    cm__objc_pool_pop(pool);
    return status;
}

static cm_status cm__fence_wrap_metal(cm_device *device, cm__id event, uint64_t value,
                                      cm_fence **out) {
    static const char func[] = "cm_fence_wrap_metal";
    const cm__sel sels[] = {CM__SEL(signaledValue), CM__SEL(setSignaledValue), CM__SEL(device)};
    const char *const names[] = {"signaledValue", "setSignaledValue:", "device"};
    CM__TRY(
        cm__require_selectors(func, "shared_event", event, "id<MTLSharedEvent>", sels, names, 3));
    CM__TRY(cm__require_same_device(func, "shared_event", event, device));
    cm__id retained = cm__objc_retain(event);
    const cm_status status = cm__fence_make(func, device, retained, value, out);
    if (status != CM_OK)
        cm__objc_release(retained);
    return status;
}

cm_status cm_fence_wrap_metal(cm_device *device, void *shared_event, uint64_t value,
                              cm_fence **out) {
    CM__REQUIRE_NONNULL(out);
    *out = NULL;
    CM__REQUIRE_NONNULL(device);
    CM__REQUIRE_ARG(shared_event != NULL, "shared_event = NULL must be an id<MTLSharedEvent>");
    CM__TRY(cm__require_metal(__func__, device));
    void *pool = cm__objc_pool_push();
    const cm_status status = cm__fence_wrap_metal(device, shared_event, value, out);
    cm__objc_pool_pop(pool);
    return status;
}

/* ------------------------------------------------------------ capture */

enum { CM__MTL_CAPTURE_GPU_TRACE_DOCUMENT = 2 };  /* MTLCaptureDestination */
enum { CM__MTL_CAPTURE_ERROR_NOT_SUPPORTED = 1 }; /* MTLCaptureError */

/* Whether cmetal began the capture now running (Metal's manager is one per
 * process). */
static pthread_mutex_t cm__capture_lock = PTHREAD_MUTEX_INITIALIZER;
static bool cm__capturing;

/* Starts the capture of `object` to path. Inside a pool. */
static cm_status cm__capture_start(const char *func, cm__id object, const char *path) {
    cm__class manager_class = CM__CLASS(MTLCaptureManager);
    cm__class desc_class = CM__CLASS(MTLCaptureDescriptor);
    if (manager_class == NULL || desc_class == NULL)
        return cm__fail_as(func, CM_ERR_UNSUPPORTED,
                           "this Metal has no MTLCaptureManager or MTLCaptureDescriptor");
    cm__id manager = cm__msg_sharedCaptureManager((cm__id)manager_class);
    cm__id text = NULL;
    CM__TRY(cm__ns_string_from_utf8(func, path, &text));
    cm__id url = cm__msg_fileURLWithPath((cm__id)CM__CLASS(NSURL), text); /* autoreleased */
    cm__objc_release(text);
    cm__id desc = cm__objc_new(desc_class);
    if (manager == NULL || url == NULL || desc == NULL) {
        cm__objc_release(desc);
        return cm__fail_as(func, CM_ERR_DEVICE,
                           "Metal gave no capture manager, descriptor or URL for path = \"%s\"",
                           path);
    }
    cm__msg_setCaptureObject(desc, object);
    cm__msg_setDestination(desc, CM__MTL_CAPTURE_GPU_TRACE_DOCUMENT);
    cm__msg_setOutputURL(desc, url);
    cm__id error = NULL; /* autoreleased */
    const bool started = cm__msg_startCaptureWithDescriptor_error(manager, desc, &error);
    cm__objc_release(desc);
    if (started)
        return CM_OK;
    char why[256] = "no NSError";
    const cm__int code = error != NULL ? cm__msg_code(error) : 0;
    if (error != NULL)
        cm__ns_string_copy_utf8(cm__msg_localizedDescription(error), why, sizeof why);
    if (code == CM__MTL_CAPTURE_ERROR_NOT_SUPPORTED || error == NULL)
        return cm__fail_as(func, CM_ERR_UNSUPPORTED,
                           "Metal refused to capture to path = \"%s\" (%s); a GPU trace "
                           "document needs MTL_CAPTURE_ENABLED=1 in the environment (or "
                           "MetalCaptureEnabled in the app's Info.plist) when the process "
                           "starts",
                           path, why);
    return cm__fail_as(func, CM_ERR_DEVICE,
                       "Metal refused to capture to path = \"%s\" (MTLCaptureError %ld: %s)", path,
                       (long)code, why);
}

cm_status cm_capture_begin(const cm_capture_desc *desc) {
    CM__REQUIRE_NONNULL(desc);
    CM__REQUIRE_ARG((desc->device != NULL) != (desc->stream != NULL),
                    "desc->device = %p and desc->stream = %p: give exactly one",
                    (void *)desc->device, (void *)desc->stream);
    CM__REQUIRE_ARG(desc->path != NULL && desc->path[0] != '\0',
                    "desc->path = %s must name the .gputrace document to write",
                    desc->path == NULL ? "NULL" : "\"\"");
    static const char ext[] = ".gputrace";
    const size_t len = strlen(desc->path);
    CM__REQUIRE_ARG(len >= sizeof ext - 1 && strcmp(desc->path + len - (sizeof ext - 1), ext) == 0,
                    "desc->path = \"%s\" must end in \".gputrace\"", desc->path);
    const cm_device *device = desc->device != NULL ? desc->device : desc->stream->device;
    CM__TRY(cm__require_metal(__func__, device));
    cm__id object =
        desc->device != NULL ? cm__mtl_dev(device)->device : cm__mtl_stream(desc->stream)->queue;
    pthread_mutex_lock(&cm__capture_lock);
    cm_status status;
    if (cm__capturing) {
        status = cm__fail_as(__func__, CM_ERR_INVALID_ARGUMENT,
                             "a capture begun by cm_capture_begin is running; end it first");
    } else {
        void *pool = cm__objc_pool_push();
        status = cm__capture_start(__func__, object, desc->path);
        cm__objc_pool_pop(pool);
        cm__capturing = status == CM_OK;
    }
    pthread_mutex_unlock(&cm__capture_lock);
    return status;
}

cm_status cm_capture_end(void) {
    pthread_mutex_lock(&cm__capture_lock);
    const bool was = cm__capturing;
    if (was) {
        void *pool = cm__objc_pool_push();
        cm__msg_stopCapture(cm__msg_sharedCaptureManager((cm__id)CM__CLASS(MTLCaptureManager)));
        cm__objc_pool_pop(pool);
        cm__capturing = false;
    }
    pthread_mutex_unlock(&cm__capture_lock);
    if (!was)
        return cm__fail_as(__func__, CM_ERR_INVALID_ARGUMENT,
                           "no capture is running (cm_capture_begin did not succeed)");
    return CM_OK;
}
