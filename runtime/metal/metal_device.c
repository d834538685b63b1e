/* SPDX-License-Identifier: MIT */
/* The Metal device: devices, buffers, streams and fences over the
 * Objective-C bridge. The only sends are through objc/bridge.h. */
#include "metal_internal.h"

#include <cmetal/metal.h>

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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

/* Notes a failed command buffer (its own status and error) for the next
 * flush to report; the first failure wins. Stream lock held. */
static void cm__note_if_failed(cm__metal_stream *s, cm__id cb) {
    if (s->failed || cm__msg_status(cb) != CM__MTL_CB_ERROR)
        return;
    s->failed = true;
    cm__cb_error_text(cb, s->error, sizeof s->error);
}

/* Publishes the lowest number of a command buffer not seen complete.
 * Stream lock held. */
static void cm__clock_update(cm__metal_stream *s) {
    const uint64_t below = s->ncommitted > 0 ? s->committed[0].seq
                           : s->open != NULL ? s->open_seq
                                             : s->next_seq;
    atomic_store_explicit(&s->clock->done_below, below, memory_order_release);
}

static bool cm__clock_done(cm__metal_clock *clock, uint64_t seq) {
    return seq < atomic_load_explicit(&clock->done_below, memory_order_acquire);
}

static cm__metal_clock *cm__clock_retain(cm__metal_clock *clock) {
    cm__ref_retain(&clock->ref);
    return clock;
}

static void cm__clock_release(cm__metal_clock *clock) {
    if (clock != NULL && cm__ref_release(&clock->ref))
        cm__free(clock);
}

/* Drops the committed command buffers that have completed, noting a
 * failed one. Stream lock held. */
static void cm__prune_committed(cm__metal_stream *s) {
    size_t kept = 0;
    for (size_t i = 0; i < s->ncommitted; ++i) {
        cm__id cb = s->committed[i].cb;
        if (cm__msg_status(cb) >= CM__MTL_CB_COMPLETED) {
            cm__note_if_failed(s, cb);
            cm__objc_release(cb);
        } else {
            s->committed[kept++] = s->committed[i];
        }
    }
    s->ncommitted = kept;
    cm__clock_update(s);
}

/* Room for one more committed command buffer. Stream lock held. */
static cm_status cm__committed_reserve(const char *func, cm__metal_stream *s) {
    if (s->ncommitted < s->committed_cap)
        return CM_OK;
    const size_t cap = s->committed_cap > 0 ? 2 * s->committed_cap : 8;
    cm__metal_committed *grown =
        cap <= SIZE_MAX / sizeof *grown
            ? cm__alloc(cap * sizeof *grown, _Alignof(cm__metal_committed))
            : NULL;
    if (grown == NULL)
        return cm__fail_as(func, CM_ERR_OUT_OF_MEMORY,
                           "no memory to track %zu command buffers", cap);
    if (s->ncommitted > 0)
        memcpy(grown, s->committed, s->ncommitted * sizeof *grown);
    cm__free(s->committed);
    s->committed = grown;
    s->committed_cap = cap;
    return CM_OK;
}

/* Makes the stream's open command buffer if there is none. `commandBuffer`
 * may block while the queue holds its maximum of uncompleted command
 * buffers, so it is sent without the stream's lock. Inside a pool; takes
 * the lock and returns with it held, whatever the status. */
static cm_status cm__metal_stream_open(const char *func, cm_stream *stream) {
    cm__metal_stream *s = cm__mtl_stream(stream);
    pthread_mutex_lock(&s->lock);
    cm_status status = cm__committed_reserve(func, s);
    if (status != CM_OK || s->open != NULL)
        return status;
    pthread_mutex_unlock(&s->lock);
    cm__id cb = cm__objc_retain(cm__msg_commandBuffer(s->queue)); /* autoreleased */
    pthread_mutex_lock(&s->lock);
    if (cb == NULL)
        return cm__fail_as(func, CM_ERR_DEVICE, "the command queue gave no command buffer");
    if (s->open == NULL) {
        s->open = cb;
        s->open_seq = s->next_seq++;
    } else
        cm__objc_release(cb); /* another thread opened one meanwhile */
    return CM_OK;
}

cm_status cm__metal_encode_begin(const char *func, cm_stream *stream, cm__id *cb, void **pool) {
    *pool = cm__objc_pool_push();
    cm_status status = cm__metal_stream_open(func, stream);
    *cb = status == CM_OK ? cm__mtl_stream(stream)->open : NULL;
    return status;
}

void cm__metal_encode_end(cm_stream *stream, void *pool) {
    pthread_mutex_unlock(&cm__mtl_stream(stream)->lock);
    cm__objc_pool_pop(pool);
}

cm_status cm__metal_pass_fence(const char *func, cm_stream *stream, cm_buffer *const *buffers,
                               int n, cm__id *out) {
    *out = NULL;
    bool untracked = false;
    for (int i = 0; i < n && !untracked; ++i)
        untracked = buffers[i] != NULL && cm__mtl_buf(buffers[i])->hazard_untracked;
    if (!untracked)
        return CM_OK;
    cm__metal_stream *s = cm__mtl_stream(stream);
    if (s->untracked_fence == NULL)
        s->untracked_fence = cm__msg_newFence(cm__mtl_dev(stream->device)->device);
    if (s->untracked_fence == NULL)
        return cm__fail_as(func, CM_ERR_DEVICE, "newFence returned nil");
    *out = s->untracked_fence;
    return CM_OK;
}

void cm__metal_drop_completed(cm_stream *stream) {
    cm__metal_stream *s = cm__mtl_stream(stream);
    void *pool = cm__objc_pool_push();
    pthread_mutex_lock(&s->lock);
    cm__prune_committed(s);
    pthread_mutex_unlock(&s->lock);
    cm__objc_pool_pop(pool);
}

cm_status cm__metal_flush(const char *func, cm_stream *stream, bool wait) {
    cm__metal_stream *s = cm__mtl_stream(stream);
    void *pool = cm__objc_pool_push();
    pthread_mutex_lock(&s->lock);
    if (s->open != NULL) { /* encode_begin reserved its place */
        cm__msg_commit(s->open);
        s->committed[s->ncommitted++] = (cm__metal_committed){s->open, s->open_seq};
        s->open = NULL;
        s->submissions++;
    }
    /* Wait for every one committed so far, oldest first, without the lock
     * (others may commit and prune meanwhile: retain what we wait for). */
    const size_t n = wait ? s->ncommitted : 0;
    cm__id stack[16];
    cm__id *waits = n <= 16 ? stack : cm__alloc(n * sizeof *waits, _Alignof(cm__id));
    if (waits == NULL) /* no memory: wait for them under the lock instead */
        for (size_t i = 0; i < n; ++i)
            cm__msg_waitUntilCompleted(s->committed[i].cb);
    else
        for (size_t i = 0; i < n; ++i)
            waits[i] = cm__objc_retain(s->committed[i].cb);
    pthread_mutex_unlock(&s->lock);
    for (size_t i = 0; waits != NULL && i < n; ++i) {
        cm__msg_waitUntilCompleted(waits[i]);
        cm__objc_release(waits[i]);
    }
    if (waits != stack)
        cm__free(waits);

    /* Every waited one has completed: its status is noted as it leaves. */
    pthread_mutex_lock(&s->lock);
    cm__prune_committed(s);
    bool failed = s->failed;
    char text[sizeof s->error];
    if (failed) {
        memcpy(text, s->error, sizeof text);
        s->failed = false; /* reported once */
    }
    pthread_mutex_unlock(&s->lock);
    cm__objc_pool_pop(pool);
    if (failed)
        return cm__fail_as(func, CM_ERR_DEVICE, "a command buffer of this stream failed: %s",
                           text);
    return CM_OK;
}

static cm_status cm__metal_stream_init_unpooled(cm_stream *stream) {
    cm__metal_stream *s = CM__NEW(cm__metal_stream);
    if (s == NULL)
        return cm__fail_as("cm_stream_create", CM_ERR_OUT_OF_MEMORY, "no memory for a stream");
    s->clock = CM__NEW(cm__metal_clock);
    if (s->clock == NULL) {
        cm__free(s);
        return cm__fail_as("cm_stream_create", CM_ERR_OUT_OF_MEMORY, "no memory for a stream");
    }
    cm__ref_init(&s->clock->ref);
    s->next_seq = 1;
    atomic_init(&s->clock->done_below, s->next_seq);
    s->queue = cm__msg_newCommandQueue(cm__mtl_dev(stream->device)->device);
    if (s->queue == NULL) {
        cm__clock_release(s->clock);
        cm__free(s);
        return cm__fail_as("cm_stream_create", CM_ERR_DEVICE,
                           "newCommandQueue returned nil");
    }
    cm__mutex_init(&s->lock);
    stream->impl = s;
    return CM_OK;
}

static void cm__metal_stream_destroy_unpooled(cm_stream *stream) {
    cm__metal_stream *s = cm__mtl_stream(stream);
    cm__objc_release(s->open);
    for (size_t i = 0; i < s->ncommitted; ++i)
        cm__objc_release(s->committed[i].cb);
    cm__free(s->committed);
    /* Its work was waited for: whatever buffers still name it is done. */
    atomic_store_explicit(&s->clock->done_below, UINT64_MAX, memory_order_release);
    cm__clock_release(s->clock);
    cm__objc_release(s->untracked_fence);
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
static cm_status cm__metal_stream_signal_unpooled(cm_stream *stream, cm_fence *fence) {
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

static bool cm__metal_fence_signaled_unpooled(const cm_fence *fence) {
    return cm__msg_signaledValue(fence->event) >= fence->value;
}

static cm_status cm__metal_fence_wait_unpooled(const cm_fence *fence, uint64_t timeout_ns) {
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    long nap_ns = 1000;
    while (!cm__metal_fence_signaled_unpooled(fence)) {
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

static void cm__metal_fence_destroy_unpooled(cm_fence *fence) {
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

static cm_status cm__metal_buffer_alloc_unpooled(cm_device *device, cm_buffer *buffer) {
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

/* The host's page size, which newBufferWithBytesNoCopy needs. */
static size_t cm__host_page_size(void) {
    const long page = sysconf(_SC_PAGESIZE);
    return page > 0 ? (size_t)page : CM_METAL_PAGE_SIZE;
}

static cm_status cm__metal_buffer_wrap_host_unpooled(cm_device *device, cm_buffer *buffer,
                                            const cm_host_memory_desc *desc) {
    static const char func[] = "cm_buffer_wrap_host";
    const cm__metal_device *d = cm__mtl_dev(device);
    const uintptr_t address = (uintptr_t)desc->data;
    const size_t page = cm__host_page_size();
    const bool aligned = desc->size > 0 && address % page == 0 && desc->size % page == 0;
    if (desc->copy == CM_COPY_NEVER && !aligned)
        return cm__fail_as(func, CM_ERR_COPY_REQUIRED,
                           "desc->data = %p with desc->size = %zu: wrapping without a copy "
                           "needs both aligned to the host's page size, %zu bytes",
                           desc->data, desc->size, page);
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
        if (mtl == NULL && desc->copy == CM_COPY_NEVER) {
            cm__buffer_impl_free(buffer);
            return cm__fail_as(func, CM_ERR_DEVICE,
                               "newBufferWithBytesNoCopy:%p length:%zu returned nil", desc->data,
                               desc->size);
        }
        if (mtl != NULL) {
            buffer->release = NULL;
            buffer->release_context = NULL;
        }
    }
    if (mtl == NULL) { /* copied (also when Metal refused the pages) */
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

/* One stream's command buffer to wait for, by number. */
typedef struct cm__seq_wait {
    const char *func;
    cm__metal_clock *clock;
    uint64_t seq;
    cm__id cb; /* out: the command buffer, +1, or NULL when seen complete */
} cm__seq_wait;

/* Finds the command buffer numbered t->seq on the stream, committing it
 * first if the stream is still filling it. */
static cm_status cm__seq_find(cm_stream *stream, void *context) {
    cm__seq_wait *t = context;
    cm__metal_stream *s = cm__mtl_stream(stream);
    if (s->clock != t->clock) /* a later stream at a dead one's address */
        return CM_OK;
    pthread_mutex_lock(&s->lock);
    bool is_open = s->open != NULL && s->open_seq == t->seq;
    pthread_mutex_unlock(&s->lock);
    if (is_open)
        CM__TRY(cm__metal_flush(t->func, stream, false));
    void *pool = cm__objc_pool_push();
    pthread_mutex_lock(&s->lock);
    cm__prune_committed(s);
    for (size_t i = 0; i < s->ncommitted && t->cb == NULL; ++i)
        if (s->committed[i].seq == t->seq)
            t->cb = cm__objc_retain(s->committed[i].cb);
    pthread_mutex_unlock(&s->lock);
    cm__objc_pool_pop(pool);
    return CM_OK;
}

static cm_status cm__drop_completed_visit(cm_stream *stream, void *context) {
    (void)context;
    cm__metal_drop_completed(stream);
    return CM_OK;
}

/* Waits for a stream's command buffer numbered seq (not yet seen complete
 * when the buffer was looked at), then lets the stream drop it. */
static cm_status cm__wait_tracked(const char *func, cm_device *device, const cm_stream *stream,
                                  cm__metal_clock *clock, uint64_t seq) {
    cm__seq_wait t = {func, clock, seq, NULL};
    CM__TRY(cm__device_visit_stream(device, stream, cm__seq_find, &t));
    if (t.cb == NULL) /* seen complete meanwhile, or the stream has died */
        return CM_OK;
    cm__msg_waitUntilCompleted(t.cb);
    cm_status status = CM_OK;
    if (cm__msg_status(t.cb) == CM__MTL_CB_ERROR) {
        char text[384];
        cm__cb_error_text(t.cb, text, sizeof text);
        status = cm__fail_as(func, CM_ERR_DEVICE, "device work on this buffer failed: %s", text);
    }
    cm__objc_release(t.cb);
    (void)cm__device_visit_stream(device, stream, cm__drop_completed_visit, NULL);
    return status;
}

/* What host access waits for: every tracked stream's last command buffer
 * that wrote the buffer (writes_only) or used it, by number (the clock
 * retained); and whether forgotten work means waiting for the whole device. */
typedef struct cm__wait_list {
    int n;
    bool untracked;
    const cm_stream *stream[CM__METAL_USE_SLOTS];
    cm__metal_clock *clock[CM__METAL_USE_SLOTS];
    uint64_t seq[CM__METAL_USE_SLOTS];
} cm__wait_list;

static void cm__use_clear(cm__metal_use *u) {
    cm__clock_release(u->clock);
    *u = (cm__metal_use){0};
}

/* Whether the slot's work has all been seen complete. */
static bool cm__use_done(const cm__metal_use *u) {
    return u->clock == NULL || cm__clock_done(u->clock, u->use);
}

static void cm__wait_list_take(cm_buffer *buffer, bool writes_only, cm__wait_list *w) {
    cm__metal_buffer *b = cm__mtl_buf(buffer);
    w->n = 0;
    pthread_mutex_lock(&b->lock);
    w->untracked = b->untracked;
    b->untracked = false; /* the device-wide wait below covers it */
    for (int i = 0; i < CM__METAL_USE_SLOTS; ++i) {
        cm__metal_use *u = &b->uses[i];
        if (u->clock != NULL && cm__use_done(u)) {
            cm__use_clear(u);
            continue;
        }
        const uint64_t seq = writes_only ? u->write : u->use;
        if (u->clock != NULL && seq != 0 && !cm__clock_done(u->clock, seq)) {
            w->stream[w->n] = u->stream;
            w->clock[w->n] = cm__clock_retain(u->clock);
            w->seq[w->n++] = seq;
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
            status = cm__wait_tracked(func, buffer->device, w.stream[i], w.clock[i], w.seq[i]);
        cm__clock_release(w.clock[i]);
    }
    return status;
}

/* The stream's slot in the buffer's table: its own, a free one, one whose
 * work has been seen finished, or, when more streams are busy with the
 * buffer, the first, whose work is forgotten (host access then waits for
 * the device). Buffer lock held. */
static cm__metal_use *cm__use_slot(cm__metal_buffer *b, const cm_stream *stream) {
    cm__metal_clock *clock = cm__mtl_stream(stream)->clock;
    cm__metal_use *slot = NULL;
    for (int i = 0; i < CM__METAL_USE_SLOTS; ++i) {
        if (b->uses[i].clock == clock)
            return &b->uses[i];
        if (slot == NULL && b->uses[i].clock == NULL)
            slot = &b->uses[i];
    }
    for (int i = 0; slot == NULL && i < CM__METAL_USE_SLOTS; ++i)
        if (cm__use_done(&b->uses[i]))
            slot = &b->uses[i];
    if (slot == NULL) {
        slot = &b->uses[0];
        b->untracked = true;
    }
    cm__use_clear(slot);
    slot->stream = stream;
    slot->clock = cm__clock_retain(clock);
    return slot;
}

static void cm__metal_buffer_free_unpooled(cm_buffer *buffer) {
    cm__metal_buffer *b = cm__mtl_buf(buffer);
    /* Waits for the work using it and lets its streams drop the command
     * buffers seen complete, so the MTLBuffer (and a wrap's release
     * callback) goes as soon as nothing unfinished uses it. */
    (void)cm__wait_buffer("cm_buffer_release", buffer, false);
    for (int i = 0; i < CM__METAL_USE_SLOTS; ++i)
        cm__use_clear(&b->uses[i]);
    cm__buffer_impl_free(buffer);
    cm__objc_release(buffer->native);
}

/* Managed: tells Metal what the host wrote since. Buffer lock held. */
static void cm__push_host_writes(cm_buffer *buffer) {
    cm__metal_buffer *b = cm__mtl_buf(buffer);
    if (b->host_dirty) {
        cm__msg_didModifyRange(buffer->native,
                               (cm__ns_range){b->dirty_begin, b->dirty_end - b->dirty_begin});
        b->host_dirty = false;
    }
}

static void cm__metal_buffer_publish(cm_buffer *buffer) {
    cm__metal_buffer *b = cm__mtl_buf(buffer);
    void *pool = cm__objc_pool_push();
    pthread_mutex_lock(&b->lock);
    cm__push_host_writes(buffer);
    pthread_mutex_unlock(&b->lock);
    cm__objc_pool_pop(pool);
}

void cm__metal_track(cm_stream *stream, cm_buffer *buffer, bool write) {
    cm__metal_stream *s = cm__mtl_stream(stream);
    cm__metal_buffer *b = cm__mtl_buf(buffer);
    pthread_mutex_lock(&b->lock);
    cm__push_host_writes(buffer);
    cm__metal_use *u = cm__use_slot(b, stream);
    u->use = s->open_seq;
    if (write)
        u->write = s->open_seq;
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
    cm__id fence = NULL;
    if (blit != NULL)
        status = cm__metal_pass_fence(func, stream, (cm_buffer *const[]){src.buffer, dst.buffer},
                                      2, &fence);
    if (blit != NULL && fence != NULL)
        cm__msg_waitForFence(blit, fence);
    if (blit != NULL) {
        if (src.native != NULL)
            cm__msg_copyFromBuffer_sourceOffset_toBuffer_destinationOffset_size(
                blit, src.native, src.offset, dst.native, dst.offset, size);
        else
            cm__msg_synchronizeResource(blit, dst.native);
        if (fence != NULL)
            cm__msg_updateFence(blit, fence);
        cm__msg_endEncoding(blit);
        if (src.buffer != NULL)
            cm__metal_track(stream, src.buffer, false);
        if (dst.buffer != NULL)
            cm__metal_track(stream, dst.buffer, src.native != NULL);
    }
    cm__metal_encode_end(stream, pool);
    return status;
}

static cm_status cm__metal_buffer_prepare_host_unpooled(cm_buffer *buffer, bool write) {
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

/* Staging buffers up to this size go back to the device's pool of two
 * after a transfer; larger ones are released. */
#define CM__STAGING_POOL_MAX ((size_t)64 << 20)

/* A shared staging buffer of at least `length` bytes: a pooled one, or a
 * new one (*length_out: its length). +1, or NULL when out of memory. */
static cm__id cm__staging_take(cm_device *device, size_t length, size_t *length_out) {
    cm__metal_device *d = cm__mtl_dev(device);
    cm__id got = NULL;
    pthread_mutex_lock(&d->staging_lock);
    int best = -1;
    for (int k = 0; k < 2; ++k)
        if (d->staging[k] != NULL && d->staging_length[k] >= length &&
            (best < 0 || d->staging_length[k] < d->staging_length[best]))
            best = k;
    if (best >= 0) {
        got = d->staging[best];
        *length_out = d->staging_length[best];
        d->staging[best] = NULL;
    }
    pthread_mutex_unlock(&d->staging_lock);
    if (got != NULL)
        return got;
    /* Pooled sizes round up to 1 MiB, so that nearby sizes share them. */
    size_t want = length > 0 ? length : 1;
    if (want <= CM__STAGING_POOL_MAX)
        want = (want + ((size_t)1 << 20) - 1) & ~(((size_t)1 << 20) - 1);
    *length_out = want;
    return cm__msg_newBufferWithLength_options(d->device, want, CM__MTL_RESOURCE_STORAGE_SHARED);
}

/* Gives a staging buffer back after its transfer finished: into a free
 * slot, or in place of a smaller pooled one, else released. */
static void cm__staging_give(cm_device *device, cm__id staging, size_t length) {
    cm__metal_device *d = cm__mtl_dev(device);
    cm__id drop = staging;
    if (length <= CM__STAGING_POOL_MAX) {
        pthread_mutex_lock(&d->staging_lock);
        int slot = d->staging[0] == NULL ? 0 : d->staging[1] == NULL ? 1 : -1;
        if (slot < 0)
            slot = d->staging_length[0] <= d->staging_length[1] ? 0 : 1;
        if (d->staging[slot] == NULL || d->staging_length[slot] < length) {
            drop = d->staging[slot];
            d->staging[slot] = staging;
            d->staging_length[slot] = length;
        }
        pthread_mutex_unlock(&d->staging_lock);
    }
    if (drop != NULL)
        cm__objc_release(drop);
}

/* Private storage: through a shared staging buffer. Blits need offsets and
 * sizes in multiples of 4 (macOS), so the staging copy sits at the same
 * offset modulo 4: the aligned middle is blitted, and the edges (under 4
 * bytes each) are copied by a compute kernel. */
static cm_status cm__metal_buffer_transfer_unpooled(cm_buffer *buffer, size_t offset,
                                                    void *host, size_t size, bool to_device) {
    const char *func = to_device ? "cm_buffer_write" : "cm_buffer_read";
    const size_t pad = offset % 4;
    const size_t length = pad + size; /* size <= buffer->size - offset */
    size_t staging_length = 0;
    cm__id staging = cm__staging_take(buffer->device, length, &staging_length);
    if (staging == NULL)
        return cm__fail_as(func, CM_ERR_OUT_OF_MEMORY, "no staging buffer of %zu bytes", length);
    uint8_t *staged = (uint8_t *)cm__msg_contents(staging) + pad;
    if (to_device && size > 0)
        memcpy(staged, host, size);
    const size_t head = size < (4 - pad) % 4 ? size : (4 - pad) % 4;
    const size_t middle = (size - head) / 4 * 4;
    const size_t tail = size - head - middle;
    cm__metal_span device_side = {buffer, buffer->native, offset};
    cm__metal_span host_side = {NULL, staging, pad};
    cm__metal_span dst = to_device ? device_side : host_side;
    cm__metal_span src = to_device ? host_side : device_side;
    cm_stream *stream = buffer->device->default_stream;
    /* The copies run on the default stream: first let other streams' work
     * on the buffer finish (their writes, or for an upload every use). */
    cm_status status = cm__wait_buffer(func, buffer, !to_device);
    if (status == CM_OK && head > 0)
        status = cm__metal_copy_bytes(func, stream, dst, src, head);
    dst.offset += head;
    src.offset += head;
    if (status == CM_OK && middle > 0)
        status = cm__blit(func, buffer->device, (cm__blit_end){dst.native, dst.buffer, dst.offset},
                          (cm__blit_end){src.native, src.buffer, src.offset}, middle);
    dst.offset += middle;
    src.offset += middle;
    if (status == CM_OK && tail > 0)
        status = cm__metal_copy_bytes(func, stream, dst, src, tail);
    if (status == CM_OK)
        status = cm__metal_flush(func, stream, true);
    if (status == CM_OK && !to_device && size > 0)
        memcpy(host, staged, size);
    if (status == CM_OK) /* finished: the blit is done with it */
        cm__staging_give(buffer->device, staging, staging_length);
    else
        cm__objc_release(staging);
    return status;
}

/* ------------------------------------------------------------ devices */

static cm_status cm__metal_get_info(const cm_device *device, cm_device_info *out) {
    *out = cm__mtl_dev(device)->info;
    return CM_OK;
}

static void cm__metal_destroy_unpooled(cm_device *device) {
    cm__metal_device *d = cm__mtl_dev(device);
    cm__metal_kernels_destroy(d);
    for (int k = 0; k < 2; ++k)
        cm__objc_release(d->staging[k]);
    pthread_mutex_destroy(&d->staging_lock);
    cm__objc_release(d->device);
    cm__free(d);
}

/* Every entry point that sends messages runs inside its own autorelease
 * pool, so loops on threads without one never grow memory. */

static cm_status cm__metal_stream_init(cm_stream *stream) {
    void *pool = cm__objc_pool_push();
    const cm_status result = cm__metal_stream_init_unpooled(stream);
    cm__objc_pool_pop(pool);
    return result;
}

static void cm__metal_stream_destroy(cm_stream *stream) {
    void *pool = cm__objc_pool_push();
    cm__metal_stream_destroy_unpooled(stream);
    cm__objc_pool_pop(pool);
}

static cm_status cm__metal_stream_signal(cm_stream *stream, cm_fence *fence) {
    void *pool = cm__objc_pool_push();
    const cm_status result = cm__metal_stream_signal_unpooled(stream, fence);
    cm__objc_pool_pop(pool);
    return result;
}

static bool cm__metal_fence_signaled(const cm_fence *fence) {
    void *pool = cm__objc_pool_push();
    const bool result = cm__metal_fence_signaled_unpooled(fence);
    cm__objc_pool_pop(pool);
    return result;
}

static cm_status cm__metal_fence_wait(const cm_fence *fence, uint64_t timeout_ns) {
    void *pool = cm__objc_pool_push();
    const cm_status result = cm__metal_fence_wait_unpooled(fence, timeout_ns);
    cm__objc_pool_pop(pool);
    return result;
}

static void cm__metal_fence_destroy(cm_fence *fence) {
    void *pool = cm__objc_pool_push();
    cm__metal_fence_destroy_unpooled(fence);
    cm__objc_pool_pop(pool);
}

static cm_status cm__metal_buffer_alloc(cm_device *device, cm_buffer *buffer) {
    void *pool = cm__objc_pool_push();
    const cm_status result = cm__metal_buffer_alloc_unpooled(device, buffer);
    cm__objc_pool_pop(pool);
    return result;
}

static cm_status cm__metal_buffer_wrap_host(cm_device *device, cm_buffer *buffer, const cm_host_memory_desc *desc) {
    void *pool = cm__objc_pool_push();
    const cm_status result = cm__metal_buffer_wrap_host_unpooled(device, buffer, desc);
    cm__objc_pool_pop(pool);
    return result;
}

static void cm__metal_buffer_free(cm_buffer *buffer) {
    void *pool = cm__objc_pool_push();
    cm__metal_buffer_free_unpooled(buffer);
    cm__objc_pool_pop(pool);
}

static cm_status cm__metal_buffer_prepare_host(cm_buffer *buffer, bool write) {
    void *pool = cm__objc_pool_push();
    const cm_status result = cm__metal_buffer_prepare_host_unpooled(buffer, write);
    cm__objc_pool_pop(pool);
    return result;
}

static cm_status cm__metal_buffer_transfer(cm_buffer *buffer, size_t offset, void *host, size_t size, bool to_device) {
    void *pool = cm__objc_pool_push();
    const cm_status result = cm__metal_buffer_transfer_unpooled(buffer, offset, host, size, to_device);
    cm__objc_pool_pop(pool);
    return result;
}

static void cm__metal_destroy(cm_device *device) {
    void *pool = cm__objc_pool_push();
    cm__metal_destroy_unpooled(device);
    cm__objc_pool_pop(pool);
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
    .buffer_publish = cm__metal_buffer_publish,
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

cm_status cm__metal_device_count(uint32_t *count) {
    void *pool = cm__objc_pool_push();
    const cm_status status = cm__metal_device_count_unpooled(count);
    cm__objc_pool_pop(pool);
    return status;
}

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
    cm_status status = cm__device_new(&cm__metal_backend, d, out);
    if (status != CM_OK)
        cm__metal_destroy_unpooled(&(cm_device){.impl = d});
    else
        (*out)->index = index;
    return status;
}

cm_status cm__metal_device_open(uint32_t index, cm_device **out) {
    void *pool = cm__objc_pool_push();
    const cm_status status = cm__metal_device_open_unpooled(index, out);
    cm__objc_pool_pop(pool);
    return status;
}

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
