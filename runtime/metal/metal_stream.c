/* SPDX-License-Identifier: MIT */
/* The bottom of the Metal device: streams and their numbered command
 * buffers, fences, buffers and their tracking (which stream's command
 * buffers use and write each buffer). Sees only the core and the bridge. */
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

/* Counts a command buffer that completed without error into the stream's
 * GPU time. Metal gives 0 for a command buffer that has not run; a span
 * that is not ordered is not counted. Stream lock held. */
static void cm__note_gpu_time(cm__metal_stream *s, cm__id cb) {
    if (cm__msg_status(cb) != CM__MTL_CB_COMPLETED)
        return;
    const double start = cm__msg_GPUStartTime(cb), end = cm__msg_GPUEndTime(cb);
    if (!(start > 0 && end >= start))
        return;
    s->gpu_time.command_buffers++;
    s->gpu_time.seconds += end - start;
    s->gpu_time.last_start = start;
    s->gpu_time.last_end = end;
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

/* Drops the committed command buffers numbered at most `through` that
 * have completed, noting a failed one. Stream lock held. */
static void cm__prune_committed_through(cm__metal_stream *s, uint64_t through) {
    size_t kept = 0;
    for (size_t i = 0; i < s->ncommitted; ++i) {
        cm__id cb = s->committed[i].cb;
        if (s->committed[i].seq <= through && cm__msg_status(cb) >= CM__MTL_CB_COMPLETED) {
            cm__note_if_failed(s, cb);
            cm__note_gpu_time(s, cb);
            cm__objc_release(cb);
        } else {
            s->committed[kept++] = s->committed[i];
        }
    }
    s->ncommitted = kept;
    cm__clock_update(s);
}

/* Drops every committed command buffer that has completed. */
static void cm__prune_committed(cm__metal_stream *s) {
    cm__prune_committed_through(s, UINT64_MAX);
}

/* Room for one more committed command buffer. Stream lock held. */
static cm_status cm__committed_reserve(const char *func, cm__metal_stream *s) {
    if (s->ncommitted < s->committed_cap)
        return CM_OK;
    const size_t cap = s->committed_cap > 0 ? 2 * s->committed_cap : 8;
    cm__metal_committed *grown = cap <= SIZE_MAX / sizeof *grown
                                     ? cm__alloc(cap * sizeof *grown, _Alignof(cm__metal_committed))
                                     : NULL;
    if (grown == NULL)
        return cm__fail_as(func, CM_ERR_OUT_OF_MEMORY, "no memory to track %zu command buffers",
                           cap);
    if (s->ncommitted > 0)
        memcpy(grown, s->committed, s->ncommitted * sizeof *grown);
    cm__free(s->committed);
    s->committed = grown;
    s->committed_cap = cap;
    return CM_OK;
}

/* Sets obj's label to prefix + name; best effort (nothing on failure). */
static void cm__label(cm__id obj, const char *prefix, const char *name) {
    char text[128];
    snprintf(text, sizeof text, "%s%s", prefix, name);
    cm__id label = NULL;
    if (cm__ns_string_from_utf8("cm__label", text, &label) == CM_OK) {
        cm__msg_setLabel(obj, label);
        cm__objc_release(label);
    }
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
    if (cb != NULL) /* what opened it, for captures and traces */
        cm__label(cb, "cmetal: ", func);
    if (cb != NULL && s->residency != NULL)
        cm__msg_useResidencySet(cb, s->residency);
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

/* Commits the open command buffer, if any. Stream lock held; its place in
 * `committed` was reserved when it was opened (cm__metal_stream_open). */
static void cm__commit_open(cm__metal_stream *s) {
    if (s->open == NULL)
        return;
    cm__msg_commit(s->open);
    s->committed[s->ncommitted++] = (cm__metal_committed){s->open, s->open_seq};
    s->open = NULL;
    s->submissions++;
}

/* Waits for the committed command buffers numbered at most `through`,
 * oldest first, drops the completed ones numbered at most `prune`, then
 * reports a failure noted on the stream (once). Inside a pool; takes the
 * stream's lock, never holding it while waiting. */
static cm_status cm__wait_through(const char *func, cm__metal_stream *s, uint64_t through,
                                  uint64_t prune) {
    pthread_mutex_lock(&s->lock);
    /* Without the lock (others may commit and prune meanwhile): retain
     * what we wait for. `committed` is in number order. */
    size_t n = 0;
    while (n < s->ncommitted && s->committed[n].seq <= through)
        ++n;
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

    /* Every waited one has completed: its status is noted as it leaves.
     * Later ones stay, so that a failure of one of them goes to whoever
     * waits for it (a failure noted by another thread's prune goes to the
     * next to wait, whichever command buffer it was). */
    pthread_mutex_lock(&s->lock);
    cm__prune_committed_through(s, prune);
    bool failed = s->failed;
    char text[sizeof s->error];
    if (failed) {
        memcpy(text, s->error, sizeof text);
        s->failed = false; /* reported once */
    }
    pthread_mutex_unlock(&s->lock);
    if (failed)
        return cm__fail_as(func, CM_ERR_DEVICE, "a command buffer of this stream failed: %s", text);
    return CM_OK;
}

cm_status cm__metal_flush(const char *func, cm_stream *stream, bool wait) {
    cm__metal_stream *s = cm__mtl_stream(stream);
    void *pool = cm__objc_pool_push();
    pthread_mutex_lock(&s->lock);
    cm__commit_open(s);
    pthread_mutex_unlock(&s->lock);
    /* Numbers start at 1: without waiting, this prunes the completed ones
     * and reports a failure noted so far. */
    cm_status status = cm__wait_through(func, s, wait ? UINT64_MAX : 0, UINT64_MAX);
    cm__objc_pool_pop(pool);
    return status;
}

uint64_t cm__metal_commit(cm_stream *stream) {
    cm__metal_stream *s = cm__mtl_stream(stream);
    void *pool = cm__objc_pool_push();
    pthread_mutex_lock(&s->lock);
    cm__commit_open(s);
    const uint64_t last = s->next_seq - 1; /* every one opened so far */
    pthread_mutex_unlock(&s->lock);
    cm__objc_pool_pop(pool);
    return last;
}

cm_status cm__metal_wait_through(const char *func, cm_stream *stream, uint64_t through) {
    void *pool = cm__objc_pool_push();
    cm_status status = cm__wait_through(func, cm__mtl_stream(stream), through, through);
    cm__objc_pool_pop(pool);
    return status;
}

cm_status cm__metal_stream_init_unpooled(cm_stream *stream, cm__id queue, const char *label) {
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
    s->queue = queue != NULL ? cm__objc_retain(queue)
                             : cm__msg_newCommandQueue(cm__mtl_dev(stream->device)->device);
    if (s->queue == NULL) {
        cm__clock_release(s->clock);
        cm__free(s);
        return cm__fail_as("cm_stream_create", CM_ERR_DEVICE, "newCommandQueue returned nil");
    }
    cm_status status = CM_OK;
    if (queue == NULL && label != NULL)
        status = cm__metal_set_label("cm_stream_create", "desc->label", s->queue, label);
    else if (queue == NULL) /* the program's own queue keeps its label */
        cm__label(s->queue, "cmetal ", stream->is_default ? "default stream" : "stream");
    if (status != CM_OK) {
        cm__objc_release(s->queue);
        cm__clock_release(s->clock);
        cm__free(s);
        return status;
    }
    /* The device's residency set: on its own queues for good; on the
     * program's queue only through cmetal's command buffers. */
    cm__id residency = cm__mtl_dev(stream->device)->alloc.residency;
    if (residency != NULL && queue == NULL)
        cm__msg_addResidencySet(s->queue, residency);
    else if (residency != NULL)
        s->residency = residency;
    cm__mutex_init(&s->lock);
    stream->impl = s;
    return CM_OK;
}

void cm__metal_stream_destroy_unpooled(cm_stream *stream) {
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

uint64_t cm__metal_stream_submissions(const cm_stream *stream) {
    cm__metal_stream *s = cm__mtl_stream(stream);
    pthread_mutex_lock(&s->lock);
    uint64_t n = s->submissions;
    pthread_mutex_unlock(&s->lock);
    return n;
}

void cm__metal_stream_gpu_time(const cm_stream *stream, cm_stream_gpu_time *out) {
    cm__metal_stream *s = cm__mtl_stream(stream);
    pthread_mutex_lock(&s->lock);
    *out = s->gpu_time;
    pthread_mutex_unlock(&s->lock);
}

/* Each fence gets a new shared event signalled to 1: simple, and fences of
 * different streams never share state. */
cm_status cm__metal_stream_signal_unpooled(cm_stream *stream, cm_fence *fence) {
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

cm_status cm__metal_stream_wait(cm_stream *stream, const cm_fence *fence) {
    cm__id cb;
    void *pool;
    cm_status status = cm__metal_encode_begin("cm_stream_wait", stream, &cb, &pool);
    if (status == CM_OK)
        cm__msg_encodeWaitForEvent_value(cb, fence->event, fence->value);
    cm__metal_encode_end(stream, pool);
    return status;
}

bool cm__metal_fence_signaled_unpooled(const cm_fence *fence) {
    return cm__msg_signaledValue(fence->event) >= fence->value;
}

cm_status cm__metal_fence_wait_unpooled(const cm_fence *fence, uint64_t timeout_ns) {
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

void cm__metal_fence_destroy_unpooled(cm_fence *fence) {
    cm__objc_release(fence->event);
}

/* ------------------------------------------------------------ buffers */

cm_status cm__buffer_impl(const char *func, cm_buffer *buffer) {
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
void cm__buffer_adopt(cm_buffer *buffer, cm__id mtl) {
    buffer->native = mtl;
    buffer->host = buffer->storage == CM_STORAGE_PRIVATE ? NULL : cm__msg_contents(mtl);
}

cm_status cm__metal_buffer_alloc_unpooled(cm_device *device, cm_buffer *buffer, const char *label) {
    cm__metal_device *d = cm__mtl_dev(device);
    if (buffer->size > d->info.max_buffer_length)
        return cm__fail_as("cm_buffer_create", CM_ERR_OUT_OF_MEMORY,
                           "desc->size = %zu exceeds the device's maxBufferLength %" PRIu64,
                           buffer->size, d->info.max_buffer_length);
    CM__TRY(cm__buffer_impl("cm_buffer_create", buffer));
    /* Metal has no empty buffers: an empty cm_buffer holds one byte. */
    cm__id mtl = NULL;
    size_t length = 0;
    cm__metal_heap *heap = NULL;
    const cm_status status = cm__metal_alloc_take(
        "cm_buffer_create", &d->alloc, d->device, buffer->size, buffer->storage,
        d->info.max_buffer_length, label, &mtl, &length, &heap);
    if (status != CM_OK) {
        cm__buffer_impl_free(buffer);
        return status;
    }
    cm__mtl_buf(buffer)->pooled_length = length;
    cm__mtl_buf(buffer)->heap = heap;
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

cm_status cm__metal_buffer_wrap_host_unpooled(cm_device *device, cm_buffer *buffer,
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
        mtl = desc->size > 0
                  ? cm__msg_newBufferWithBytes_length_options(d->device, desc->data, desc->size,
                                                              CM__MTL_RESOURCE_STORAGE_SHARED)
                  : cm__msg_newBufferWithLength_options(d->device, 1,
                                                        CM__MTL_RESOURCE_STORAGE_SHARED);
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
cm_status cm__wait_buffer(const char *func, cm_buffer *buffer, bool writes_only) {
    cm__wait_list w;
    cm__wait_list_take(buffer, writes_only, &w);
    cm_status status = w.untracked ? cm__device_sync_streams(func, buffer->device) : CM_OK;
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

void cm__metal_buffer_free_unpooled(cm_buffer *buffer) {
    cm__metal_buffer *b = cm__mtl_buf(buffer);
    /* Waits for the work using it and lets its streams drop the command
     * buffers seen complete, so the MTLBuffer (and a wrap's release
     * callback) goes as soon as nothing unfinished uses it. */
    const cm_status status = cm__wait_buffer("cm_buffer_release", buffer, false);
    for (int i = 0; i < CM__METAL_USE_SLOTS; ++i)
        cm__use_clear(&b->uses[i]);
    const size_t pooled = b->pooled_length;
    cm__metal_heap *heap = b->heap;
    cm__buffer_impl_free(buffer);
    if (pooled == 0) {
        cm__objc_release(buffer->native);
        return;
    }
    /* The device is done with it (unless the wait failed): it may serve
     * a later buffer, unless the program may still hold it. */
    const bool reusable = status == CM_OK && !atomic_load(&buffer->native_shared);
    cm__metal_alloc_give(&cm__mtl_dev(buffer->device)->alloc, buffer->native, pooled, heap,
                         buffer->storage, reusable);
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

void cm__metal_buffer_publish(cm_buffer *buffer) {
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

void cm__metal_buffer_host_modified(cm_buffer *buffer, size_t offset, size_t size) {
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
