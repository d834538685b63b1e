/* SPDX-License-Identifier: MIT */
/* The encode path of the Metal device: one pass (a compute dispatch or a
 * blit) encoded into a stream's open command buffer, for cmetal/kernel.h,
 * cmetal's ops and private-storage transfers. Sees the stream layer
 * (metal_stream.c) only. */
#include "metal_internal.h"

#include <stdio.h>

/* The cm_buffers a pass touches (a buffer may stand more than once), and
 * whether it writes each. */
#define CM__PASS_MAX_BUFFERS (2 * CM_KERNEL_MAX_BUFFERS)

/* One pass being encoded into a stream's open command buffer. */
typedef struct cm__metal_pass {
    cm_stream *stream;
    void *pool;
    cm__id cb;    /* the open command buffer, +0 */
    cm__id enc;   /* the pass's encoder, +0, or NULL */
    cm__id fence; /* the stream's fence for untracked buffers, +0, or NULL */
    cm_buffer *touched[CM__PASS_MAX_BUFFERS];
    bool writes[CM__PASS_MAX_BUFFERS];
    int ntouched;
} cm__metal_pass;

/* Starts a compute pass (or a blit pass) on the stream over p->touched:
 * takes the stream's lock, makes the encoder and, when a touched buffer
 * is untracked, waits for the stream's fence (Metal orders nothing for
 * untracked buffers: MLX's, wrapped ones). Always pair with
 * cm__pass_end, whatever the status. */
static cm_status cm__pass_begin(const char *func, cm_stream *stream, bool blit, cm__metal_pass *p) {
    p->stream = stream;
    p->enc = NULL;
    p->fence = NULL;
    cm_status status = cm__metal_encode_begin(func, stream, &p->cb, &p->pool);
    if (status == CM_OK)
        status = cm__metal_pass_fence(func, stream, p->touched, p->ntouched, &p->fence);
    if (status == CM_OK) {
        p->enc = blit ? cm__msg_blitCommandEncoder(p->cb) : cm__msg_computeCommandEncoder(p->cb);
        if (p->enc == NULL)
            status = cm__fail_as(func, CM_ERR_DEVICE, "%s returned nil",
                                 blit ? "blitCommandEncoder" : "computeCommandEncoder");
    }
    if (p->enc != NULL) { /* what it runs, for captures and traces */
        char text[96];
        snprintf(text, sizeof text, "cmetal: %s", func);
        (void)cm__metal_set_label(func, "label", p->enc, text);
    }
    if (p->enc != NULL && p->fence != NULL)
        cm__msg_waitForFence(p->enc, p->fence);
    return status;
}

/* Ends the pass: updates the fence, ends the encoder and tracks the
 * touched buffers on the stream (when the encoder was made), then gives
 * back the stream's lock. */
static void cm__pass_end(cm__metal_pass *p) {
    if (p->enc != NULL) {
        if (p->fence != NULL)
            cm__msg_updateFence(p->enc, p->fence);
        cm__msg_endEncoding(p->enc);
        for (int i = 0; i < p->ntouched; ++i)
            cm__metal_track(p->stream, p->touched[i], p->writes[i]);
    }
    cm__metal_encode_end(p->stream, p->pool);
}

static void cm__pass_touch(cm__metal_pass *p, cm_buffer *buffer, bool write) {
    if (buffer != NULL && p->ntouched < CM__PASS_MAX_BUFFERS) {
        p->touched[p->ntouched] = buffer;
        p->writes[p->ntouched++] = write;
    }
}

cm_status cm__metal_dispatch(cm__id pipeline, const cm__kernel_launch *launch) {
    const cm__kernel_bind *binds = launch->args;
    const uint32_t nbinds = launch->nargs;
    const uint64_t *grid = launch->grid;
    const uint32_t *group = launch->group;
    cm__metal_pass p = {.ntouched = 0};
    for (uint32_t i = 0; i < nbinds; ++i)
        cm__pass_touch(&p, binds[i].buffer, binds[i].type == CM_ARG_OUTPUT);
    cm_status status = cm__pass_begin(launch->func, launch->stream, false, &p);
    if (status == CM_OK) {
        cm__msg_setComputePipelineState(p.enc, pipeline);
        for (uint32_t i = 0; i < nbinds; ++i) {
            const cm__kernel_bind *b = &binds[i];
            switch (b->type) {
            case CM_ARG_INPUT:
            case CM_ARG_OUTPUT:
                cm__msg_setBuffer_offset_atIndex(
                    p.enc, b->buffer != NULL ? b->buffer->native : b->native, b->offset, b->index);
                break;
            case CM_ARG_BYTES:
                cm__msg_setBytes_length_atIndex(p.enc, b->data, b->size, b->index);
                break;
            case CM_ARG_THREADGROUP:
                cm__msg_setThreadgroupMemoryLength_atIndex(p.enc, b->size, b->index);
                break;
            default: break;
            }
        }
        const cm__mtl_size g = {grid[0], grid[1], grid[2]};
        const cm__mtl_size tg = {group[0], group[1], group[2]};
        if (launch->unit == CM_GRID_THREADGROUPS)
            cm__msg_dispatchThreadgroups_threadsPerThreadgroup(p.enc, g, tg);
        else
            cm__msg_dispatchThreads_threadsPerThreadgroup(p.enc, g, tg);
    }
    cm__pass_end(&p);
    return status;
}

cm_status cm__metal_blit(const char *func, cm_device *device, cm__metal_span dst,
                         cm__metal_span src, size_t size) {
    cm__metal_pass p = {.ntouched = 0};
    cm__pass_touch(&p, src.buffer, false);
    cm__pass_touch(&p, dst.buffer, src.native != NULL);
    cm_status status = cm__pass_begin(func, device->default_stream, true, &p);
    if (status == CM_OK && src.native != NULL)
        cm__msg_copyFromBuffer_sourceOffset_toBuffer_destinationOffset_size(
            p.enc, src.native, src.offset, dst.native, dst.offset, size);
    else if (status == CM_OK)
        cm__msg_synchronizeResource(p.enc, dst.native);
    cm__pass_end(&p);
    return status;
}
