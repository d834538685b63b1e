/* SPDX-License-Identifier: MIT */
/* Host access and private-storage transfers of Metal buffers: a managed
 * buffer's synchronizeResource, the staging pool and the staged copies.
 * Sees the stream layer, the encode layer and the ops (metal_ops.c). */
#include "metal_internal.h"

#include <inttypes.h>
#include <stdio.h>
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

/* The fault of the test hook: the chunk number, or UINT64_MAX for none. */
static _Atomic uint64_t cm__transfer_fault = UINT64_MAX;

void cm__metal_set_transfer_fault(uint64_t chunk) {
    atomic_store(&cm__transfer_fault, chunk);
}

uint64_t cm__metal_staging_made(cm_device *device) {
    return atomic_load(&cm__mtl_dev(device)->staging_made);
}

/* A shared staging buffer of CM__STAGING_CHUNK bytes: a pooled one, or a
 * new one. +1, or NULL when out of memory. */
static cm__id cm__staging_take(cm_device *device) {
    cm__metal_device *d = cm__mtl_dev(device);
    cm__id got = NULL;
    pthread_mutex_lock(&d->staging_lock);
    for (int k = 0; k < 2 && got == NULL; ++k) {
        got = d->staging[k];
        d->staging[k] = NULL;
    }
    pthread_mutex_unlock(&d->staging_lock);
    if (got != NULL)
        return got;
    got = cm__msg_newBufferWithLength_options(d->device, CM__STAGING_CHUNK,
                                              CM__MTL_RESOURCE_STORAGE_SHARED);
    if (got != NULL)
        atomic_fetch_add(&d->staging_made, 1);
    return got;
}

/* Gives a staging buffer (or NULL) back once no command buffer uses it:
 * into a free slot of the pool, else released. */
static void cm__staging_give(cm_device *device, cm__id staging) {
    cm__metal_device *d = cm__mtl_dev(device);
    pthread_mutex_lock(&d->staging_lock);
    for (int k = 0; k < 2 && staging != NULL; ++k)
        if (d->staging[k] == NULL) {
            d->staging[k] = staging;
            staging = NULL;
        }
    pthread_mutex_unlock(&d->staging_lock);
    if (staging != NULL)
        cm__objc_release(staging);
}

/* Chunk k of a transfer: `n` bytes from byte `first` of the host's side,
 * at `at` in a staging buffer. Chunks cut the device's bytes at multiples
 * of CM__STAGING_CHUNK from `offset` rounded down to 4 (`pad` below), so
 * that each chunk's staging copy sits at its device offset modulo 4. */
typedef struct cm__chunk {
    size_t first, n, at;
} cm__chunk;

static cm__chunk cm__chunk_at(uint64_t k, size_t pad, size_t size) {
    const size_t lo = (size_t)k * CM__STAGING_CHUNK, hi = lo + CM__STAGING_CHUNK;
    const size_t begin = lo > pad ? lo : pad, end = hi < pad + size ? hi : pad + size;
    return (cm__chunk){begin - pad, end - begin, begin - lo};
}

/* Encodes the device's side of one chunk on the default stream. Blits need
 * offsets and sizes in multiples of 4 (macOS): the aligned middle is
 * blitted, and the edges (under 4 bytes each, only at the ends of the
 * transfer) are copied by a compute kernel. */
static cm_status cm__chunk_encode(const char *func, cm_buffer *buffer, size_t device_offset,
                                  cm__id staging, size_t at, size_t n, bool to_device) {
    const size_t pad = at % 4; /* == device_offset % 4 */
    const size_t head = n < (4 - pad) % 4 ? n : (4 - pad) % 4;
    const size_t middle = (n - head) / 4 * 4;
    const size_t tail = n - head - middle;
    cm__metal_span device_side = {buffer, buffer->native, device_offset};
    cm__metal_span host_side = {NULL, staging, at};
    cm__metal_span dst = to_device ? device_side : host_side;
    cm__metal_span src = to_device ? host_side : device_side;
    cm_stream *stream = buffer->device->default_stream;
    cm_status status = CM_OK;
    if (head > 0)
        status = cm__metal_copy_bytes(func, stream, dst, src, head);
    dst.offset += head;
    src.offset += head;
    if (status == CM_OK && middle > 0)
        status = cm__metal_blit(func, buffer->device, dst, src, middle);
    dst.offset += middle;
    src.offset += middle;
    if (status == CM_OK && tail > 0)
        status = cm__metal_copy_bytes(func, stream, dst, src, tail);
    return status;
}

/* Names the chunk in the message of a failure that `status` reports. */
static cm_status cm__chunk_failed(const char *func, cm_status status, cm__chunk c, size_t size,
                                  uint64_t k, uint64_t nchunks) {
    char text[512];
    const char *last = cm_last_error();
    const size_t skip = strlen(func) + 2; /* "func: " */
    snprintf(text, sizeof text, "%s", strlen(last) >= skip ? last + skip : last);
    return cm__fail_as(func, status,
                       "bytes [%zu, %zu) of %zu (chunk %" PRIu64 " of %" PRIu64 "): %s", c.first,
                       c.first + c.n, size, k + 1, nchunks, text);
}

/* Private storage: through shared staging buffers, in chunks of at most
 * CM__STAGING_CHUNK bytes, each in its own command buffer, with two
 * staging buffers in turn. A write copies chunk k + 1 into one while the
 * device copies chunk k out of the other; a read has the device copy
 * chunk k + 1 while the host copies chunk k out. In order: chunk k + 2
 * reuses chunk k's staging buffer once chunk k's command buffer completed.
 * On a failure nothing more is encoded, the chunks in flight are waited
 * for (so that every chunk before the one named was copied), and the
 * staging buffers are released, not pooled. */
cm_status cm__metal_buffer_transfer_unpooled(cm_buffer *buffer, size_t offset, void *host,
                                             size_t size, bool to_device) {
    const char *func = to_device ? "cm_buffer_write" : "cm_buffer_read";
    uint8_t *bytes = host;
    const size_t pad = offset % 4;
    /* pad + size <= offset + size <= buffer->size: no overflow; size > 0. */
    const uint64_t nchunks = (pad + size - 1) / CM__STAGING_CHUNK + 1;
    const uint64_t fault = atomic_exchange(&cm__transfer_fault, UINT64_MAX);
    cm_device *device = buffer->device;
    cm_stream *stream = device->default_stream;
    cm__id staging[2] = {NULL, NULL};
    uint8_t *staged[2] = {NULL, NULL};
    uint64_t committed[2] = {0, 0}; /* chunk k's command buffer is numbered at most this */
    /* The copies run on the default stream: first let other streams' work
     * on the buffer finish (their writes, or for an upload every use). */
    cm_status status = cm__wait_buffer(func, buffer, !to_device);
    uint64_t k = 0, waited = 0; /* chunks encoded, chunks seen complete */
    while (status == CM_OK && waited < nchunks) {
        if (k < nchunks && k < waited + 2) { /* a staging buffer is free: next chunk */
            const unsigned slot = (unsigned)(k % 2);
            const cm__chunk c = cm__chunk_at(k, pad, size);
            if (staging[slot] == NULL) {
                staging[slot] = cm__staging_take(device);
                if (staging[slot] == NULL) {
                    status = cm__fail_as(func, CM_ERR_OUT_OF_MEMORY,
                                         "no staging buffer of %zu bytes", CM__STAGING_CHUNK);
                    break;
                }
                staged[slot] = cm__msg_contents(staging[slot]);
            }
            if (to_device)
                memcpy(staged[slot] + c.at, bytes + c.first, c.n);
            status = cm__chunk_encode(func, buffer, offset + c.first, staging[slot], c.at, c.n,
                                      to_device);
            if (status == CM_OK && k == fault) /* test hook: a blit Metal refuses */
                status = cm__metal_blit(func, device, (cm__metal_span){NULL, staging[slot], 8},
                                        (cm__metal_span){NULL, staging[slot], 0}, 2);
            /* Committed even after a failed encode: what it encoded goes
             * with it, and the chunk before it is waited for below. */
            committed[slot] = cm__metal_commit(stream);
            ++k;
            if (status == CM_OK)
                continue;
        }
        /* Both staging buffers in use, every chunk encoded, or an encode
         * failed: wait for the oldest chunk in flight. */
        const cm__chunk c = cm__chunk_at(waited, pad, size);
        const cm_status encoded = status;
        status = cm__metal_wait_through(func, stream, committed[waited % 2]);
        if (status == CM_OK && encoded != CM_OK) {
            status = encoded; /* the last chunk, k - 1, failed to encode */
            waited = k - 1;
        }
        if (status != CM_OK) {
            status = cm__chunk_failed(func, status, cm__chunk_at(waited, pad, size), size, waited,
                                      nchunks);
            /* Let the chunks committed after it finish; keep this message. */
            char text[512];
            snprintf(text, sizeof text, "%s", cm_last_error() + strlen(func) + 2);
            (void)cm__metal_wait_through(func, stream, committed[(k - 1) % 2]);
            status = cm__fail_as(func, status, "%s", text);
            break;
        }
        if (!to_device)
            memcpy(bytes + c.first, staged[waited % 2] + c.at, c.n);
        ++waited;
    }
    for (int i = 0; i < 2; ++i) {
        if (status == CM_OK) /* finished: no command buffer uses them */
            cm__staging_give(device, staging[i]);
        else
            cm__objc_release(staging[i]);
    }
    return status;
}
