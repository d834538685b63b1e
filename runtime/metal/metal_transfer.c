/* SPDX-License-Identifier: MIT */
/* Host access and private-storage transfers of Metal buffers: a managed
 * buffer's synchronizeResource, the staging pool and the staged copies.
 * Sees the stream layer, the encode layer and the ops (metal_ops.c). */
#include "metal_internal.h"

#include <string.h>

cm_status cm__metal_buffer_prepare_host_unpooled(cm_buffer *buffer, bool write) {
    static const char func[] = "cm__metal_buffer_prepare_host";
    cm__metal_buffer *b = cm__mtl_buf(buffer);
    CM__TRY(cm__wait_buffer(func, buffer, !write));
    pthread_mutex_lock(&b->lock);
    bool sync = b->gpu_wrote;
    b->gpu_wrote = false;
    pthread_mutex_unlock(&b->lock);
    if (sync) { /* managed: bring the device's writes to the host copy */
        CM__TRY(cm__metal_blit(func, buffer->device, (cm__metal_span){buffer, buffer->native, 0},
                         (cm__metal_span){0}, 0));
        CM__TRY(cm__wait_buffer(func, buffer, false));
    }
    return CM_OK;
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
cm_status cm__metal_buffer_transfer_unpooled(cm_buffer *buffer, size_t offset,
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
        status = cm__metal_blit(func, buffer->device, dst, src, middle);
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

