/* The Metal device: devices, buffers, streams and fences over the
 * Objective-C bridge. The only sends are through objc/bridge.h. */
#include "metal_internal.h"

#include <cmetal/metal.h>

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

/* ------------------------------------------------------------ helpers */

static void cm__mutex_init(pthread_mutex_t *m) {
    pthread_mutex_init(m, NULL);
}

/* The text of a failed command buffer's NSError, into buf. */
static void cm__cb_error_text(cm__id cb, char *buf, size_t cap) {
    void *pool = cm__objc_pool_push();
    cm__id error = cm__msg_error(cb);
    cm__id text = error != NULL ? cm__msg_localizedDescription(error) : NULL;
    if (text != NULL)
        cm__ns_string_copy_utf8(text, buf, cap);
    else
        snprintf(buf, cap, "command buffer failed without an NSError");
    cm__objc_pool_pop(pool);
}

/* ------------------------------------------------------------ streams */

static void cm__on_completed(void *context, cm__id cb) {
    cm__metal_stream *s = context;
    if (cm__msg_status(cb) != CM__MTL_CB_ERROR)
        return;
    char text[sizeof s->error];
    cm__cb_error_text(cb, text, sizeof text);
    pthread_mutex_lock(&s->lock);
    if (!s->failed) {
        s->failed = true;
        memcpy(s->error, text, sizeof text);
    }
    pthread_mutex_unlock(&s->lock);
}

/* The stream's open command buffer, created on first use (+0: owned by
 * the stream). Stream lock held, inside a pool. */
static cm_status cm__metal_stream_open(const char *func, cm_stream *stream, cm__id *out) {
    cm__metal_stream *s = cm__mtl_stream(stream);
    if (s->open == NULL) {
        cm__id cb = cm__msg_commandBuffer(s->queue); /* autoreleased */
        if (cb == NULL)
            return cm__fail_as(func, CM_ERR_DEVICE, "the command queue gave no command buffer");
        cm__block handler;
        CM__TRY(cm__block_init_completed(&handler, cm__on_completed, s, NULL));
        cm__msg_addCompletedHandler(cb, &handler);
        cm__block_release(&handler);
        s->open = cm__objc_retain(cb);
    }
    *out = s->open;
    return CM_OK;
}

cm_status cm__metal_encode_begin(const char *func, cm_stream *stream, cm__id *cb, void **pool) {
    *pool = cm__objc_pool_push();
    pthread_mutex_lock(&cm__mtl_stream(stream)->lock);
    *cb = NULL;
    return cm__metal_stream_open(func, stream, cb);
}

void cm__metal_encode_end(cm_stream *stream, void *pool) {
    pthread_mutex_unlock(&cm__mtl_stream(stream)->lock);
    cm__objc_pool_pop(pool);
}

void cm__metal_drop_completed(cm_stream *stream) {
    cm__metal_stream *s = cm__mtl_stream(stream);
    pthread_mutex_lock(&s->lock);
    cm__id done = NULL;
    if (s->last != NULL && cm__msg_status(s->last) >= CM__MTL_CB_COMPLETED) {
        done = s->last;
        s->last = NULL;
    }
    pthread_mutex_unlock(&s->lock);
    cm__objc_release(done);
}

cm_status cm__metal_flush(const char *func, cm_stream *stream, bool wait) {
    cm__metal_stream *s = cm__mtl_stream(stream);
    pthread_mutex_lock(&s->lock);
    if (s->open != NULL) {
        cm__msg_commit(s->open);
        cm__objc_release(s->last);
        s->last = s->open;
        s->open = NULL;
        s->submissions++;
    }
    cm__id last = cm__objc_retain(s->last);
    pthread_mutex_unlock(&s->lock);
    if (wait && last != NULL) {
        cm__msg_waitUntilCompleted(last);
        cm__metal_drop_completed(stream);
    }
    cm__objc_release(last);

    pthread_mutex_lock(&s->lock);
    bool failed = s->failed;
    char text[sizeof s->error];
    if (failed) {
        memcpy(text, s->error, sizeof text);
        s->failed = false; /* reported once */
    }
    pthread_mutex_unlock(&s->lock);
    if (failed)
        return cm__fail_as(func, CM_ERR_DEVICE, "a command buffer of this stream failed: %s",
                           text);
    return CM_OK;
}

static cm_status cm__metal_stream_init(cm_stream *stream) {
    cm__metal_stream *s = CM__NEW(cm__metal_stream);
    if (s == NULL)
        return cm__fail_as("cm_stream_create", CM_ERR_OUT_OF_MEMORY, "no memory for a stream");
    s->queue = cm__msg_newCommandQueue(cm__mtl_dev(stream->device)->device);
    if (s->queue == NULL) {
        cm__free(s);
        return cm__fail_as("cm_stream_create", CM_ERR_DEVICE,
                           "newCommandQueue returned nil");
    }
    cm__mutex_init(&s->lock);
    stream->impl = s;
    return CM_OK;
}

static void cm__metal_stream_destroy(cm_stream *stream) {
    cm__metal_stream *s = cm__mtl_stream(stream);
    cm__objc_release(s->open);
    cm__objc_release(s->last);
    cm__objc_release(s->queue);
    pthread_mutex_destroy(&s->lock);
    cm__free(s);
}

static uint64_t cm__metal_stream_submissions(const cm_stream *stream) {
    cm__metal_stream *s = cm__mtl_stream(stream);
    pthread_mutex_lock(&s->lock);
    uint64_t n = s->submissions;
    pthread_mutex_unlock(&s->lock);
    return n;
}

/* Each fence gets a new shared event signalled to 1: simple, and fences of
 * different streams never share state. */
static cm_status cm__metal_stream_signal(cm_stream *stream, cm_fence *fence) {
    cm__id event = cm__msg_newSharedEvent(cm__mtl_dev(stream->device)->device);
    if (event == NULL)
        return cm__fail_as("cm_stream_signal", CM_ERR_DEVICE, "newSharedEvent returned nil");
    cm__id cb;
    void *pool;
    cm_status status = cm__metal_encode_begin("cm_stream_signal", stream, &cb, &pool);
    if (status == CM_OK)
        cm__msg_encodeSignalEvent_value(cb, event, 1);
    cm__metal_encode_end(stream, pool);
    if (status == CM_OK)
        status = cm__metal_flush("cm_stream_signal", stream, false);
    if (status != CM_OK) {
        cm__objc_release(event);
        return status;
    }
    fence->event = event;
    fence->value = 1;
    return CM_OK;
}

static cm_status cm__metal_stream_wait(cm_stream *stream, const cm_fence *fence) {
    cm__id cb;
    void *pool;
    cm_status status = cm__metal_encode_begin("cm_stream_wait", stream, &cb, &pool);
    if (status == CM_OK)
        cm__msg_encodeWaitForEvent_value(cb, fence->event, fence->value);
    cm__metal_encode_end(stream, pool);
    return status;
}

static bool cm__metal_fence_signaled(const cm_fence *fence) {
    return cm__msg_signaledValue(fence->event) >= fence->value;
}

static cm_status cm__metal_fence_wait(const cm_fence *fence, uint64_t timeout_ns) {
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    long nap_ns = 1000;
    while (!cm__metal_fence_signaled(fence)) {
        clock_gettime(CLOCK_MONOTONIC, &now);
        uint64_t elapsed = (uint64_t)(now.tv_sec - start.tv_sec) * 1000000000u +
                           (uint64_t)(now.tv_nsec - start.tv_nsec);
        if (elapsed >= timeout_ns)
            return cm__fail_as("cm_fence_wait", CM_ERR_DEVICE,
                               "timeout_ns = %" PRIu64 " passed before the fence signaled",
                               timeout_ns);
        nanosleep(&(struct timespec){0, nap_ns}, NULL);
        if (nap_ns < 1000000)
            nap_ns *= 2;
    }
    return CM_OK;
}

static void cm__metal_fence_destroy(cm_fence *fence) {
    cm__objc_release(fence->event);
}

/* ------------------------------------------------------------ buffers */

static cm__uint cm__storage_options(cm_storage_mode mode) {
    switch (mode) {
    case CM_STORAGE_MANAGED: return CM__MTL_RESOURCE_STORAGE_MANAGED;
    case CM_STORAGE_PRIVATE: return CM__MTL_RESOURCE_STORAGE_PRIVATE;
    default: return CM__MTL_RESOURCE_STORAGE_SHARED;
    }
}

static cm_status cm__buffer_impl(const char *func, cm_buffer *buffer) {
    cm__metal_buffer *b = CM__NEW(cm__metal_buffer);
    if (b == NULL)
        return cm__fail_as(func, CM_ERR_OUT_OF_MEMORY, "no memory for buffer tracking");
    cm__mutex_init(&b->lock);
    buffer->impl = b;
    return CM_OK;
}

static void cm__buffer_impl_free(cm_buffer *buffer) {
    cm__metal_buffer *b = cm__mtl_buf(buffer);
    if (b == NULL)
        return;
    pthread_mutex_destroy(&b->lock);
    cm__free(b);
    buffer->impl = NULL;
}

/* Takes the new MTLBuffer (+1) into `buffer`. */
static void cm__buffer_adopt(cm_buffer *buffer, cm__id mtl) {
    buffer->native = mtl;
    buffer->host = buffer->storage == CM_STORAGE_PRIVATE ? NULL : cm__msg_contents(mtl);
}

static cm_status cm__metal_buffer_alloc(cm_device *device, cm_buffer *buffer) {
    const cm__metal_device *d = cm__mtl_dev(device);
    if (buffer->size > d->info.max_buffer_length)
        return cm__fail_as("cm_buffer_create", CM_ERR_OUT_OF_MEMORY,
                           "desc->size = %zu exceeds the device's maxBufferLength %" PRIu64,
                           buffer->size, d->info.max_buffer_length);
    CM__TRY(cm__buffer_impl("cm_buffer_create", buffer));
    /* Metal has no empty buffers: an empty cm_buffer holds one byte. */
    cm__id mtl = cm__msg_newBufferWithLength_options(
        d->device, buffer->size > 0 ? buffer->size : 1, cm__storage_options(buffer->storage));
    if (mtl == NULL) {
        cm__buffer_impl_free(buffer);
        return cm__fail_as("cm_buffer_create", CM_ERR_OUT_OF_MEMORY,
                           "newBufferWithLength:%zu options:%lu returned nil", buffer->size,
                           cm__storage_options(buffer->storage));
    }
    cm__buffer_adopt(buffer, mtl);
    return CM_OK;
}

typedef struct cm__nocopy_owner {
    cm_release_fn release;
    void *context;
} cm__nocopy_owner;

static void cm__nocopy_deallocate(void *context, void *pointer, cm__uint length) {
    (void)pointer;
    (void)length;
    cm__nocopy_owner *owner = context;
    if (owner->release != NULL)
        owner->release(owner->context);
    owner->release = NULL; /* exactly once, even if invoked again */
}

static void cm__nocopy_dispose(void *context) {
    cm__free(context);
}

static cm_status cm__metal_buffer_wrap_host(cm_device *device, cm_buffer *buffer,
                                            const cm_host_memory_desc *desc) {
    static const char func[] = "cm_buffer_wrap_host";
    const cm__metal_device *d = cm__mtl_dev(device);
    const uintptr_t address = (uintptr_t)desc->data;
    const bool aligned = desc->size > 0 && address % CM_METAL_PAGE_SIZE == 0 &&
                         desc->size % CM_METAL_PAGE_SIZE == 0;
    if (desc->copy == CM_COPY_NEVER && !aligned)
        return cm__fail_as(func, CM_ERR_COPY_REQUIRED,
                           "desc->data = %p with desc->size = %zu: wrapping without a copy "
                           "needs both aligned to %d bytes",
                           desc->data, desc->size, CM_METAL_PAGE_SIZE);
    if (desc->size > d->info.max_buffer_length)
        return cm__fail_as(func, CM_ERR_OUT_OF_MEMORY,
                           "desc->size = %zu exceeds the device's maxBufferLength %" PRIu64,
                           desc->size, d->info.max_buffer_length);
    CM__TRY(cm__buffer_impl(func, buffer));
    cm__id mtl = NULL;
    if (aligned && desc->copy != CM_COPY_ALWAYS) {
        cm__nocopy_owner *owner = CM__NEW(cm__nocopy_owner);
        cm__block block;
        cm_status status = owner == NULL ? cm__fail_as(func, CM_ERR_OUT_OF_MEMORY, "no memory")
                                         : cm__block_init_deallocator(&block, cm__nocopy_deallocate,
                                                                      owner, cm__nocopy_dispose);
        if (status != CM_OK) {
            cm__free(owner);
            cm__buffer_impl_free(buffer);
            return status;
        }
        /* The deallocator takes over the release callback: it runs when
         * the MTLBuffer dies, after every command buffer using it. */
        owner->release = buffer->release;
        owner->context = buffer->release_context;
        mtl = cm__msg_newBufferWithBytesNoCopy_length_options_deallocator(
            d->device, desc->data, desc->size, CM__MTL_RESOURCE_STORAGE_SHARED, &block);
        if (mtl == NULL)
            owner->release = NULL; /* failure: never call it */
        cm__block_release(&block);
        if (mtl == NULL) {
            cm__buffer_impl_free(buffer);
            return cm__fail_as(func, CM_ERR_DEVICE,
                               "newBufferWithBytesNoCopy:%p length:%zu returned nil", desc->data,
                               desc->size);
        }
        buffer->release = NULL;
        buffer->release_context = NULL;
    } else {
        mtl = desc->size > 0 ? cm__msg_newBufferWithBytes_length_options(
                                   d->device, desc->data, desc->size,
                                   CM__MTL_RESOURCE_STORAGE_SHARED)
                             : cm__msg_newBufferWithLength_options(
                                   d->device, 1, CM__MTL_RESOURCE_STORAGE_SHARED);
        if (mtl == NULL) {
            cm__buffer_impl_free(buffer);
            return cm__fail_as(func, CM_ERR_OUT_OF_MEMORY,
                               "newBufferWithBytes:length:%zu returned nil", desc->size);
        }
        buffer->flags |= CM_BUFFER_COPIED;
    }
    cm__buffer_adopt(buffer, mtl);
    return CM_OK;
}

/* ------------------------------------------------------------ tracking */

typedef struct cm__wait_target {
    const char *func;
    cm__id cb;
} cm__wait_target;

/* Commits the stream's open command buffer if it is the target. */
static cm_status cm__commit_if_open(cm_stream *stream, void *context) {
    const cm__wait_target *t = context;
    cm__metal_stream *s = cm__mtl_stream(stream);
    pthread_mutex_lock(&s->lock);
    bool is_open = t->cb == s->open;
    pthread_mutex_unlock(&s->lock);
    return is_open ? cm__metal_flush(t->func, stream, false) : CM_OK;
}

static cm_status cm__drop_completed_visit(cm_stream *stream, void *context) {
    (void)context;
    cm__metal_drop_completed(stream);
    return CM_OK;
}

/* Waits for a tracked command buffer of `stream`, committing it first if
 * the stream is still filling it. */
static cm_status cm__wait_tracked(const char *func, cm_device *device, const cm_stream *stream,
                                  cm__id cb) {
    if (cm__msg_status(cb) == CM__MTL_CB_NOT_ENQUEUED) {
        cm__wait_target t = {func, cb};
        CM__TRY(cm__device_visit_stream(device, stream, cm__commit_if_open, &t));
    }
    cm__msg_waitUntilCompleted(cb);
    if (cm__msg_status(cb) == CM__MTL_CB_ERROR) {
        char text[384];
        cm__cb_error_text(cb, text, sizeof text);
        return cm__fail_as(func, CM_ERR_DEVICE, "device work on this buffer failed: %s", text);
    }
    return CM_OK;
}

/* What host access waits for: every tracked stream's last command buffer
 * that wrote the buffer (writes_only) or used it, retained; and whether
 * forgotten work means waiting for the whole device. */
typedef struct cm__wait_list {
    int n;
    bool untracked;
    const cm_stream *stream[CM__METAL_USE_SLOTS];
    cm__id cb[CM__METAL_USE_SLOTS];
} cm__wait_list;

static void cm__wait_list_take(cm_buffer *buffer, bool writes_only, cm__wait_list *w) {
    cm__metal_buffer *b = cm__mtl_buf(buffer);
    w->n = 0;
    pthread_mutex_lock(&b->lock);
    w->untracked = b->untracked;
    b->untracked = false; /* the device-wide wait below covers it */
    for (int i = 0; i < CM__METAL_USE_SLOTS; ++i) {
        const cm__metal_use *u = &b->uses[i];
        cm__id cb = writes_only ? u->write : u->use;
        if (u->stream != NULL && cb != NULL) {
            w->stream[w->n] = u->stream;
            w->cb[w->n++] = cm__objc_retain(cb);
        }
    }
    pthread_mutex_unlock(&b->lock);
}

/* Waits for pending device work that wrote (writes_only) or used the
 * buffer, on every stream. */
static cm_status cm__wait_buffer(const char *func, cm_buffer *buffer, bool writes_only) {
    cm__wait_list w;
    cm__wait_list_take(buffer, writes_only, &w);
    cm_status status =
        w.untracked ? cm__device_sync_streams(func, buffer->device) : CM_OK;
    for (int i = 0; i < w.n; ++i) {
        if (status == CM_OK)
            status = cm__wait_tracked(func, buffer->device, w.stream[i], w.cb[i]);
        cm__objc_release(w.cb[i]);
    }
    return status;
}

static void cm__use_clear(cm__metal_use *u) {
    cm__objc_release(u->use);
    cm__objc_release(u->write);
    *u = (cm__metal_use){0};
}

static bool cm__cb_done(cm__id cb) {
    return cb == NULL || cm__msg_status(cb) >= CM__MTL_CB_COMPLETED;
}

/* The stream's slot in the buffer's table: its own, a free one, one whose
 * work has finished, or, when more streams are busy with the buffer, the
 * first, whose work is forgotten (host access then waits for the device). */
static cm__metal_use *cm__use_slot(cm__metal_buffer *b, const cm_stream *stream) {
    cm__metal_use *slot = NULL;
    for (int i = 0; i < CM__METAL_USE_SLOTS; ++i) {
        if (b->uses[i].stream == stream)
            return &b->uses[i];
        if (slot == NULL && b->uses[i].stream == NULL)
            slot = &b->uses[i];
    }
    for (int i = 0; slot == NULL && i < CM__METAL_USE_SLOTS; ++i)
        if (cm__cb_done(b->uses[i].use) && cm__cb_done(b->uses[i].write)) {
            slot = &b->uses[i];
            cm__use_clear(slot);
        }
    if (slot == NULL) {
        slot = &b->uses[0];
        cm__use_clear(slot);
        b->untracked = true;
    }
    slot->stream = stream;
    return slot;
}

static void cm__metal_buffer_free(cm_buffer *buffer) {
    cm__metal_buffer *b = cm__mtl_buf(buffer);
    (void)cm__wait_buffer("cm_buffer_release", buffer, false);
    for (int i = 0; i < CM__METAL_USE_SLOTS; ++i) {
        /* The stream's last command buffer may be the one that used this
         * buffer: drop it once done, so the MTLBuffer (and a wrap's release
         * callback) goes now rather than at the stream's next flush. */
        if (b->uses[i].stream != NULL)
            (void)cm__device_visit_stream(buffer->device, b->uses[i].stream,
                                          cm__drop_completed_visit, NULL);
        cm__use_clear(&b->uses[i]);
    }
    cm__buffer_impl_free(buffer);
    cm__objc_release(buffer->native);
}

void cm__metal_track(cm_stream *stream, cm_buffer *buffer, bool write) {
    cm__metal_stream *s = cm__mtl_stream(stream);
    cm__metal_buffer *b = cm__mtl_buf(buffer);
    pthread_mutex_lock(&b->lock);
    if (b->host_dirty) {
        cm__msg_didModifyRange(buffer->native,
                               (cm__ns_range){b->dirty_begin, b->dirty_end - b->dirty_begin});
        b->host_dirty = false;
    }
    cm__metal_use *u = cm__use_slot(b, stream);
    if (u->use != s->open) {
        cm__objc_release(u->use);
        u->use = cm__objc_retain(s->open);
    }
    if (write && u->write != s->open) {
        cm__objc_release(u->write);
        u->write = cm__objc_retain(s->open);
    }
    if (write && buffer->storage == CM_STORAGE_MANAGED)
        b->gpu_wrote = true;
    pthread_mutex_unlock(&b->lock);
}

/* One side of a blit: an MTLBuffer, and the cm_buffer that holds it when
 * there is one (then the blit is tracked on it). */
typedef struct cm__blit_end {
    cm__id native;
    cm_buffer *buffer;
    size_t offset;
} cm__blit_end;

/* Encodes a blit on the device's default stream: a copy of `size` bytes
 * from src to dst, or (src.native == NULL) synchronizeResource of dst. */
static cm_status cm__blit(const char *func, cm_device *device, cm__blit_end dst,
                          cm__blit_end src, size_t size) {
    cm_stream *stream = device->default_stream;
    cm__id cb;
    void *pool;
    cm_status status = cm__metal_encode_begin(func, stream, &cb, &pool);
    cm__id blit = status == CM_OK ? cm__msg_blitCommandEncoder(cb) : NULL;
    if (status == CM_OK && blit == NULL)
        status = cm__fail_as(func, CM_ERR_DEVICE, "blitCommandEncoder returned nil");
    if (blit != NULL) {
        if (src.native != NULL)
            cm__msg_copyFromBuffer_sourceOffset_toBuffer_destinationOffset_size(
                blit, src.native, src.offset, dst.native, dst.offset, size);
        else
            cm__msg_synchronizeResource(blit, dst.native);
        cm__msg_endEncoding(blit);
        if (src.buffer != NULL)
            cm__metal_track(stream, src.buffer, false);
        if (dst.buffer != NULL)
            cm__metal_track(stream, dst.buffer, src.native != NULL);
    }
    cm__metal_encode_end(stream, pool);
    return status;
}

static cm_status cm__metal_buffer_prepare_host(cm_buffer *buffer, bool write) {
    static const char func[] = "cm__metal_buffer_prepare_host";
    cm__metal_buffer *b = cm__mtl_buf(buffer);
    CM__TRY(cm__wait_buffer(func, buffer, !write));
    pthread_mutex_lock(&b->lock);
    bool sync = b->gpu_wrote;
    b->gpu_wrote = false;
    pthread_mutex_unlock(&b->lock);
    if (sync) { /* managed: bring the device's writes to the host copy */
        CM__TRY(cm__blit(func, buffer->device, (cm__blit_end){buffer->native, buffer, 0},
                         (cm__blit_end){0}, 0));
        CM__TRY(cm__wait_buffer(func, buffer, false));
    }
    return CM_OK;
}

static void cm__metal_buffer_host_modified(cm_buffer *buffer, size_t offset, size_t size) {
    if (buffer->storage != CM_STORAGE_MANAGED)
        return;
    cm__metal_buffer *b = cm__mtl_buf(buffer);
    pthread_mutex_lock(&b->lock);
    size_t end = offset + size;
    if (!b->host_dirty) {
        b->dirty_begin = offset;
        b->dirty_end = end;
    } else {
        b->dirty_begin = offset < b->dirty_begin ? offset : b->dirty_begin;
        b->dirty_end = end > b->dirty_end ? end : b->dirty_end;
    }
    b->host_dirty = true;
    pthread_mutex_unlock(&b->lock);
}

/* Private storage: through a shared staging buffer and a blit. */
static cm_status cm__metal_buffer_transfer(cm_buffer *buffer, size_t offset, void *host,
                                           size_t size, bool to_device) {
    const char *func = to_device ? "cm_buffer_write" : "cm_buffer_read";
    cm__id dev = cm__mtl_dev(buffer->device)->device;
    cm__id staging = to_device
                         ? cm__msg_newBufferWithBytes_length_options(
                               dev, host, size, CM__MTL_RESOURCE_STORAGE_SHARED)
                         : cm__msg_newBufferWithLength_options(dev, size,
                                                               CM__MTL_RESOURCE_STORAGE_SHARED);
    if (staging == NULL)
        return cm__fail_as(func, CM_ERR_OUT_OF_MEMORY, "no staging buffer of %zu bytes", size);
    const cm__blit_end device_side = {buffer->native, buffer, offset};
    const cm__blit_end host_side = {staging, NULL, 0};
    /* The blit runs on the default stream: first let other streams' work
     * on the buffer finish (their writes, or for an upload every use). */
    cm_status status = cm__wait_buffer(func, buffer, !to_device);
    if (status == CM_OK)
        status = to_device ? cm__blit(func, buffer->device, device_side, host_side, size)
                           : cm__blit(func, buffer->device, host_side, device_side, size);
    if (status == CM_OK)
        status = cm__metal_flush(func, buffer->device->default_stream, true);
    if (status == CM_OK && !to_device)
        memcpy(host, cm__msg_contents(staging), size);
    cm__objc_release(staging);
    return status;
}

/* ------------------------------------------------------------ devices */

static cm_status cm__metal_get_info(const cm_device *device, cm_device_info *out) {
    *out = cm__mtl_dev(device)->info;
    return CM_OK;
}

static void cm__metal_destroy(cm_device *device) {
    cm__metal_device *d = cm__mtl_dev(device);
    cm__metal_kernels_destroy(d);
    cm__objc_release(d->device);
    cm__free(d);
}

static const cm__backend cm__metal_backend = {
    .type = CM_DEVICE_METAL,
    .destroy = cm__metal_destroy,
    .get_info = cm__metal_get_info,
    .buffer_alloc = cm__metal_buffer_alloc,
    .buffer_wrap_host = cm__metal_buffer_wrap_host,
    .buffer_free = cm__metal_buffer_free,
    .buffer_prepare_host = cm__metal_buffer_prepare_host,
    .buffer_host_modified = cm__metal_buffer_host_modified,
    .buffer_transfer = cm__metal_buffer_transfer,
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

cm_status cm__metal_device_count(uint32_t *count) {
    *count = 0;
    CM__TRY(cm__objc_init_as("cm_device_count"));
    CM__TRY(cm__metal_load_as("cm_device_count"));
    cm__id all = cm__metal_copy_all_devices();
    if (all != NULL) {
        cm__uint n = cm__msg_count(all);
        cm__objc_release(all);
        *count = n > UINT32_MAX ? UINT32_MAX : (uint32_t)n;
    }
    if (*count == 0) {
        cm__id dev = cm__metal_create_system_default_device();
        *count = dev != NULL;
        cm__objc_release(dev);
    }
    return CM_OK;
}

cm_status cm__metal_device_open(uint32_t index, cm_device **out) {
    static const char func[] = "cm_device_open";
    *out = NULL;
    CM__TRY(cm__objc_init_as(func));
    cm__id dev = NULL;
    if (index == 0) {
        CM__TRY(cm__metal_default_device(func, &dev));
    } else {
        CM__TRY(cm__metal_load_as(func));
        cm__id all = cm__metal_copy_all_devices();
        cm__uint n = all != NULL ? cm__msg_count(all) : 0;
        if (index < n)
            dev = cm__objc_retain(cm__msg_objectAtIndex(all, index));
        cm__objc_release(all);
        if (dev == NULL)
            return cm__fail_as(func, CM_ERR_NO_DEVICE,
                               "index = %u: there are %lu Metal devices", index, n);
    }
    cm__metal_device *d = CM__NEW(cm__metal_device);
    if (d == NULL) {
        cm__objc_release(dev);
        return cm__fail_as(func, CM_ERR_OUT_OF_MEMORY, "no memory for a Metal device");
    }
    d->device = dev;
    cm__metal_kernels_init(d);
    cm__read_info(dev, &d->info);
    cm_status status = cm__device_new(&cm__metal_backend, d, out);
    if (status != CM_OK)
        cm__metal_destroy(&(cm_device){.impl = d});
    return status;
}

/* ------------------------------------------------------------ public */

static cm_status cm__require_metal(const char *func, const cm_device *device) {
    if (device->backend != &cm__metal_backend)
        return cm__fail_as(func, CM_ERR_UNSUPPORTED, "device is a %s device, not Metal",
                           cm_device_type_name(device->backend->type));
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
    cm_buffer *buffer = CM__NEW(cm_buffer);
    if (buffer == NULL)
        return cm__fail(CM_ERR_OUT_OF_MEMORY, "no memory for a buffer");
    cm__ref_init(&buffer->ref);
    buffer->device = device;
    cm__uint mode = cm__msg_storageMode(desc->buffer);
    switch (mode) {
    case CM__MTL_STORAGE_MODE_SHARED: buffer->storage = CM_STORAGE_SHARED; break;
    case CM__MTL_STORAGE_MODE_MANAGED: buffer->storage = CM_STORAGE_MANAGED; break;
    case CM__MTL_STORAGE_MODE_PRIVATE: buffer->storage = CM_STORAGE_PRIVATE; break;
    default:
        cm__free(buffer);
        return cm__fail(CM_ERR_UNSUPPORTED, "desc->buffer has storageMode %lu (memoryless)",
                        mode);
    }
    cm_status status = cm__buffer_impl(__func__, buffer);
    if (status != CM_OK) {
        cm__free(buffer);
        return status;
    }
    buffer->size = cm__msg_length(desc->buffer);
    buffer->flags = desc->flags | CM_BUFFER_FOREIGN;
    buffer->release = desc->release;
    buffer->release_context = desc->release_context;
    cm__buffer_adopt(buffer, cm__objc_retain(desc->buffer));
    cm_device_retain(device);
    *out = buffer;
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
