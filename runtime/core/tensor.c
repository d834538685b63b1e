/* SPDX-License-Identifier: MIT */
/* Tensors: layout validation, views and host access. */
#include "backend.h"

#include <cmetal/tensor.h>

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------ layouts */

cm_status cm__shape_compact(const char *func, int32_t ndim, const int64_t *shape, size_t itemsize,
                            int64_t *strides_out, int64_t *numel_out) {
    int64_t numel = 1;
    bool overflow = false;
    for (int32_t k = ndim - 1; k >= 0; --k) {
        if (shape[k] < 0)
            return cm__fail_as(func, CM_ERR_INVALID_ARGUMENT,
                               "shape[%d] = %" PRId64 " must be >= 0", k, shape[k]);
        if (strides_out != NULL)
            strides_out[k] = overflow ? 0 : numel;
        int64_t next;
        if (cm__mul_overflow_i64(numel, shape[k], &next))
            overflow = true;
        else
            numel = next;
    }
    /* A zero anywhere makes the count 0 even if a prefix overflowed. */
    for (int32_t k = 0; k < ndim; ++k)
        if (shape[k] == 0) {
            if (numel_out != NULL)
                *numel_out = 0;
            if (strides_out != NULL && overflow)
                for (int32_t j = 0; j < ndim; ++j)
                    strides_out[j] = 1;
            return CM_OK;
        }
    int64_t bytes;
    if (overflow || cm__mul_overflow_i64(numel, (int64_t)itemsize, &bytes))
        return cm__fail_as(func, CM_ERR_OVERFLOW,
                           "shape has more elements than fit in %zu-byte addressing",
                           sizeof(int64_t));
    if (numel_out != NULL)
        *numel_out = numel;
    return CM_OK;
}

/* Checks every field of a layout against a buffer of `size` bytes, and
 * computes the element count and the byte extent [begin, end). */
static cm_status cm__layout_check(const char *func, size_t size, cm_dtype dtype, int32_t ndim,
                                  const int64_t *shape, const int64_t *strides,
                                  uint64_t byte_offset, int64_t *numel_out, uint64_t *begin_out,
                                  uint64_t *end_out) {
    const cm_dtype_info *info = cm__dtype(dtype);
    if (info == NULL)
        return cm__fail_as(func, CM_ERR_INVALID_ARGUMENT, "dtype = %d is not a cm_dtype",
                           (int)dtype);
    if (ndim < 0 || ndim > CM_MAX_NDIM)
        return cm__fail_as(func, CM_ERR_INVALID_ARGUMENT, "ndim = %d must be between 0 and %d",
                           ndim, CM_MAX_NDIM);
    if (ndim > 0 && shape == NULL)
        return cm__fail_as(func, CM_ERR_INVALID_ARGUMENT,
                           "shape = NULL with ndim = %d must not be NULL", ndim);
    int64_t numel;
    CM__TRY(cm__shape_compact(func, ndim, shape, info->size, NULL, &numel));
    const int64_t itemsize = (int64_t)info->size;
    if (byte_offset > (uint64_t)INT64_MAX)
        return cm__fail_as(func, CM_ERR_OVERFLOW, "byte_offset = %" PRIu64 " exceeds INT64_MAX",
                           byte_offset);
    if (byte_offset % (uint64_t)itemsize != 0)
        return cm__fail_as(func, CM_ERR_INVALID_ARGUMENT,
                           "byte_offset = %" PRIu64 " must be a multiple of the %s size %" PRId64,
                           byte_offset, info->name, itemsize);
    uint64_t begin = byte_offset, end = byte_offset;
    if (numel > 0) {
        /* Lowest and highest element index reached, relative to element 0. */
        int64_t lo = 0, hi = 0;
        for (int32_t k = 0; k < ndim; ++k) {
            int64_t reach;
            if (cm__mul_overflow_i64(strides[k], shape[k] - 1, &reach) ||
                cm__add_overflow_i64(reach < 0 ? lo : hi, reach, reach < 0 ? &lo : &hi))
                return cm__fail_as(func, CM_ERR_OVERFLOW,
                                   "strides[%d] = %" PRId64 " with shape[%d] = %" PRId64
                                   " overflows the address range",
                                   k, strides[k], k, shape[k]);
        }
        int64_t lo_bytes, hi_bytes, first, last;
        if (cm__mul_overflow_i64(lo, itemsize, &lo_bytes) ||
            cm__mul_overflow_i64(hi, itemsize, &hi_bytes) ||
            cm__add_overflow_i64(hi_bytes, itemsize, &hi_bytes) ||
            cm__add_overflow_i64((int64_t)byte_offset, lo_bytes, &first) ||
            cm__add_overflow_i64((int64_t)byte_offset, hi_bytes, &last))
            return cm__fail_as(func, CM_ERR_OVERFLOW, "the layout's byte extent overflows int64");
        if (first < 0)
            return cm__fail_as(func, CM_ERR_OUT_OF_BOUNDS,
                               "negative strides reach %" PRIu64
                               " bytes before the buffer (byte_offset = %" PRIu64 ")",
                               0u - (uint64_t)first, byte_offset); /* |INT64_MIN| fits */
        begin = (uint64_t)first;
        end = (uint64_t)last;
    }
    if (end > size)
        return cm__fail_as(func, CM_ERR_OUT_OF_BOUNDS,
                           "the view reaches byte %" PRIu64 " of a %zu-byte buffer "
                           "(byte_offset = %" PRIu64 ", %" PRId64 " elements)",
                           end, size, byte_offset, numel);
    if (numel_out)
        *numel_out = numel;
    if (begin_out)
        *begin_out = begin;
    if (end_out)
        *end_out = end;
    return CM_OK;
}

cm_status cm__tensor_make(const char *func, cm_buffer *buffer, cm_dtype dtype, int32_t ndim,
                          const int64_t *shape, const int64_t *strides, uint64_t byte_offset,
                          uint32_t flags, cm_tensor **out) {
    if ((flags & ~(uint32_t)CM_TENSOR_READ_ONLY) != 0)
        return cm__fail_as(func, CM_ERR_INVALID_ARGUMENT,
                           "flags = 0x%x: only CM_TENSOR_READ_ONLY may be set", flags);
    int64_t compact[CM_MAX_NDIM];
    if (strides == NULL && ndim >= 0 && ndim <= CM_MAX_NDIM && (shape != NULL || ndim == 0)) {
        const cm_dtype_info *info = cm__dtype(dtype);
        CM__TRY(cm__shape_compact(func, ndim, shape, info ? info->size : 1, compact, NULL));
        strides = compact;
    }
    CM__TRY(cm__layout_check(func, buffer->size, dtype, ndim, shape, strides, byte_offset, NULL,
                             NULL, NULL));
    cm_tensor *t = CM__NEW(cm_tensor);
    if (t == NULL)
        return cm__fail_as(func, CM_ERR_OUT_OF_MEMORY, "no memory for a tensor");
    cm__ref_init(&t->ref);
    t->buffer = buffer;
    t->dtype = dtype;
    t->ndim = ndim;
    t->flags = flags | ((buffer->flags & CM_BUFFER_READ_ONLY) ? CM_TENSOR_READ_ONLY : 0u);
    t->byte_offset = byte_offset;
    if (ndim > 0) {
        memcpy(t->shape, shape, (size_t)ndim * sizeof *shape);
        memcpy(t->strides, strides, (size_t)ndim * sizeof *strides);
    }
    cm_buffer_retain(buffer);
    *out = t;
    return CM_OK;
}

/* The block cm__tensor_wrap_host allocates. */
typedef struct cm__buffer_with_tensor {
    cm_buffer buffer;
    cm_tensor tensor;
} cm__buffer_with_tensor;

cm_status cm__tensor_wrap_host(cm_device *device, const cm_host_memory_desc *desc, cm_dtype dtype,
                               int32_t ndim, const int64_t *shape, const int64_t *strides,
                               uint64_t byte_offset, uint32_t flags, cm_tensor **out) {
    cm_buffer *buffer = NULL;
    const cm__buffer_source src = {.kind = CM__BUFFER_HOST, .host = desc};
    CM__TRY(cm__buffer_make("cm_buffer_wrap_host", device, &src,
                            sizeof(cm__buffer_with_tensor) - sizeof(cm_buffer), &buffer));
    cm_tensor *t = &((cm__buffer_with_tensor *)buffer)->tensor;
    cm__ref_init(&t->ref);
    t->buffer = buffer; /* takes the buffer's reference */
    t->in_buffer = true;
    t->dtype = dtype;
    t->ndim = ndim;
    t->flags = flags | ((buffer->flags & CM_BUFFER_READ_ONLY) ? CM_TENSOR_READ_ONLY : 0u);
    t->byte_offset = byte_offset;
    for (int32_t k = 0; k < ndim; ++k) { /* a loop: ndim is small, memcpy a call */
        t->shape[k] = shape[k];
        t->strides[k] = strides[k];
    }
    *out = t;
    return CM_OK;
}

/* ------------------------------------------------------------ lifecycle */

cm_status cm_tensor_create(cm_device *device, const cm_tensor_desc *desc, cm_tensor **out) {
    CM__REQUIRE_NONNULL(out);
    *out = NULL;
    CM__REQUIRE_NONNULL(device);
    CM__REQUIRE_NONNULL(desc);
    CM__REQUIRE_ARG(desc->strides == NULL,
                    "desc->strides must be NULL: a new tensor is compact row-major");
    CM__REQUIRE_ARG(desc->byte_offset == 0,
                    "desc->byte_offset = %" PRIu64 " must be 0 for a new tensor",
                    desc->byte_offset);
    const cm_dtype_info *info = cm__dtype(desc->dtype);
    CM__REQUIRE_ARG(info != NULL, "desc->dtype = %d is not a cm_dtype", (int)desc->dtype);
    CM__REQUIRE_ARG(desc->ndim >= 0 && desc->ndim <= CM_MAX_NDIM,
                    "desc->ndim = %d must be between 0 and %d", desc->ndim, CM_MAX_NDIM);
    CM__REQUIRE_ARG(desc->shape != NULL || desc->ndim == 0,
                    "desc->shape = NULL with desc->ndim = %d must not be NULL", desc->ndim);
    int64_t numel;
    CM__TRY(cm__shape_compact(__func__, desc->ndim, desc->shape, info->size, NULL, &numel));
    cm_buffer_desc bd = {
        .size = (size_t)numel * info->size, .storage = desc->storage, .label = desc->label};
    cm_buffer *buffer = NULL;
    CM__TRY(cm_buffer_create(device, &bd, &buffer));
    cm_status status = cm__tensor_make(__func__, buffer, desc->dtype, desc->ndim, desc->shape, NULL,
                                       0, desc->flags, out);
    cm_buffer_release(buffer);
    return status;
}

cm_status cm_tensor_from_buffer(cm_buffer *buffer, const cm_tensor_desc *desc, cm_tensor **out) {
    CM__REQUIRE_NONNULL(out);
    *out = NULL;
    CM__REQUIRE_NONNULL(buffer);
    CM__REQUIRE_NONNULL(desc);
    return cm__tensor_make(__func__, buffer, desc->dtype, desc->ndim, desc->shape, desc->strides,
                           desc->byte_offset, desc->flags, out);
}

cm_status cm_tensor_retain(cm_tensor *tensor) {
    CM__REQUIRE_NONNULL(tensor);
    cm__ref_retain(&tensor->ref);
    return CM_OK;
}

cm_status cm_tensor_release(cm_tensor *tensor) {
    if (tensor != NULL && cm__ref_release(&tensor->ref)) {
        cm_buffer *buffer = tensor->buffer;
        if (!tensor->in_buffer)
            cm__free(tensor);
        cm_buffer_release(buffer);
    }
    return CM_OK;
}

static bool cm__is_contiguous(const cm_tensor *t, int64_t numel) {
    if (numel == 0)
        return true;
    int64_t expected = 1;
    for (int32_t k = t->ndim - 1; k >= 0; --k) {
        if (t->shape[k] == 1)
            continue;
        if (t->strides[k] != expected)
            return false;
        expected *= t->shape[k];
    }
    return true;
}

cm_status cm_tensor_get_info(const cm_tensor *tensor, cm_tensor_info *out) {
    CM__REQUIRE_NONNULL(tensor);
    CM__REQUIRE_NONNULL(out);
    memset(out, 0, sizeof *out);
    const cm_tensor *t = tensor;
    /* The layout was validated when the tensor was made; this recomputes
     * the derived numbers and cannot fail. */
    CM__TRY(cm__layout_check(__func__, t->buffer->size, t->dtype, t->ndim, t->shape, t->strides,
                             t->byte_offset, &out->numel, &out->extent_begin, &out->extent_end));
    out->dtype = t->dtype;
    out->ndim = t->ndim;
    memcpy(out->shape, t->shape, sizeof out->shape);
    memcpy(out->strides, t->strides, sizeof out->strides);
    out->byte_offset = t->byte_offset;
    out->flags = t->flags;
    out->contiguous = cm__is_contiguous(t, out->numel);
    out->buffer = t->buffer;
    out->device_type = t->buffer->device->backend->type;
    return CM_OK;
}

/* ------------------------------------------------------------ views */

/* Resolves a possibly negative axis of an ndim-dimensional tensor. */
static cm_status cm__axis(const char *func, const char *name, int32_t axis, int32_t ndim,
                          int32_t *out) {
    if (axis < -ndim || axis >= ndim)
        return cm__fail_as(func, CM_ERR_OUT_OF_BOUNDS, "%s = %d is out of range for a %d-d tensor",
                           name, axis, ndim);
    *out = axis < 0 ? axis + ndim : axis;
    return CM_OK;
}

/* A copy of src's layout, for views to edit. */
typedef struct cm__layout {
    int32_t ndim;
    uint32_t flags;
    uint64_t byte_offset;
    int64_t shape[CM_MAX_NDIM];
    int64_t strides[CM_MAX_NDIM];
} cm__layout;

static cm__layout cm__layout_of(const cm_tensor *t) {
    cm__layout l = {.ndim = t->ndim, .flags = t->flags, .byte_offset = t->byte_offset};
    memcpy(l.shape, t->shape, sizeof l.shape);
    memcpy(l.strides, t->strides, sizeof l.strides);
    return l;
}

static cm_status cm__view(const char *func, const cm_tensor *src, const cm__layout *l,
                          cm_tensor **out) {
    return cm__tensor_make(func, src->buffer, src->dtype, l->ndim, l->shape, l->strides,
                           l->byte_offset, l->flags, out);
}

#define CM__VIEW_PROLOGUE()                                                                        \
    CM__REQUIRE_NONNULL(out);                                                                      \
    *out = NULL;                                                                                   \
    CM__REQUIRE_NONNULL(src)

static bool cm__layout_empty(const cm__layout *l) {
    for (int32_t k = 0; k < l->ndim; ++k)
        if (l->shape[k] == 0)
            return true;
    return false;
}

/* Moves the byte offset to element `index` along a stride. An empty view
 * keeps its offset: its strides are arbitrary (any stride is valid beside
 * a zero-size axis), so the element need not exist. For a non-empty view
 * the caller has checked that the element exists, so the layout check has
 * already bounded this product; it is computed checked all the same. */
static cm_status cm__advance(const char *func, cm__layout *l, const cm_tensor *src, int64_t index,
                             int64_t stride) {
    if (cm__layout_empty(l))
        return CM_OK;
    int64_t itemsize = (int64_t)cm__dtype(src->dtype)->size, step = 0, moved = 0;
    if (cm__mul_overflow_i64(index, stride, &step) || cm__mul_overflow_i64(step, itemsize, &step) ||
        cm__add_overflow_i64((int64_t)l->byte_offset, step, &moved) || moved < 0)
        return cm__fail_as(func, CM_ERR_OVERFLOW,
                           "element %" PRId64 " at stride %" PRId64 " lies outside the view", index,
                           stride);
    l->byte_offset = (uint64_t)moved;
    return CM_OK;
}

cm_status cm_tensor_slice(const cm_tensor *src, int32_t axis, int64_t start, int64_t stop,
                          int64_t step, cm_tensor **out) {
    CM__VIEW_PROLOGUE();
    int32_t a = 0;
    CM__TRY(cm__axis(__func__, "axis", axis, src->ndim, &a));
    CM__REQUIRE_ARG(step != 0, "step = 0 must be non-zero");
    const int64_t len = src->shape[a];
    const bool back = step < 0;
    /* Python's slice.indices(); -1 stands for "before the first element"
     * once start/stop are resolved with a negative step. */
    if (start == CM_SLICE_DEFAULT) {
        start = back ? len - 1 : 0;
    } else if (start < 0) {
        start += len;
        if (start < 0)
            start = back ? -1 : 0;
    } else if (start >= len) {
        start = back ? len - 1 : len;
    }
    if (stop == CM_SLICE_DEFAULT) {
        stop = back ? -1 : len;
    } else if (stop < 0) {
        stop += len;
        if (stop < 0)
            stop = back ? -1 : 0;
    } else if (stop >= len) {
        stop = back ? len - 1 : len;
    }
    uint64_t ustep = back ? (uint64_t)(-(step + 1)) + 1u : (uint64_t)step;
    int64_t count = 0;
    if (back && stop < start)
        count = (int64_t)((uint64_t)(start - stop - 1) / ustep + 1u);
    else if (!back && start < stop)
        count = (int64_t)((uint64_t)(stop - start - 1) / ustep + 1u);

    cm__layout l = cm__layout_of(src);
    l.shape[a] = count;
    CM__TRY(cm__advance(__func__, &l, src, start, src->strides[a]));
    /* An empty view may keep a stride that would overflow: it is never used. */
    int64_t stride = 0;
    if (count > 1 && !cm__mul_overflow_i64(src->strides[a], step, &stride))
        l.strides[a] = stride;
    else if (count > 1 && !cm__layout_empty(&l))
        return cm__fail(CM_ERR_OVERFLOW,
                        "step = %" PRId64 " times strides[%d] = %" PRId64 " overflows", step, a,
                        src->strides[a]);
    return cm__view(__func__, src, &l, out);
}

cm_status cm_tensor_select(const cm_tensor *src, int32_t axis, int64_t index, cm_tensor **out) {
    CM__VIEW_PROLOGUE();
    int32_t a = 0;
    CM__TRY(cm__axis(__func__, "axis", axis, src->ndim, &a));
    const int64_t len = src->shape[a];
    if (index < -len || index >= len)
        return cm__fail(CM_ERR_OUT_OF_BOUNDS,
                        "index = %" PRId64 " is out of range for axis %d of size %" PRId64, index,
                        a, len);
    if (index < 0)
        index += len;
    cm__layout l = cm__layout_of(src);
    CM__TRY(cm__advance(__func__, &l, src, index, src->strides[a]));
    for (int32_t k = a; k + 1 < l.ndim; ++k) {
        l.shape[k] = l.shape[k + 1];
        l.strides[k] = l.strides[k + 1];
    }
    l.ndim--;
    return cm__view(__func__, src, &l, out);
}

cm_status cm_tensor_permute(const cm_tensor *src, const int32_t *axes, cm_tensor **out) {
    CM__VIEW_PROLOGUE();
    CM__REQUIRE_ARG(axes != NULL || src->ndim == 0, "axes = NULL must not be NULL");
    bool seen[CM_MAX_NDIM] = {false};
    cm__layout l = cm__layout_of(src);
    for (int32_t k = 0; k < src->ndim; ++k) {
        int32_t a = 0;
        char name[24];
        snprintf(name, sizeof name, "axes[%d]", k);
        CM__TRY(cm__axis(__func__, name, axes[k], src->ndim, &a));
        CM__REQUIRE_ARG(!seen[a], "axes[%d] = %d repeats an axis", k, axes[k]);
        seen[a] = true;
        l.shape[k] = src->shape[a];
        l.strides[k] = src->strides[a];
    }
    return cm__view(__func__, src, &l, out);
}

cm_status cm_tensor_transpose(const cm_tensor *src, int32_t axis0, int32_t axis1, cm_tensor **out) {
    CM__VIEW_PROLOGUE();
    int32_t a = 0, b = 0;
    CM__TRY(cm__axis(__func__, "axis0", axis0, src->ndim, &a));
    CM__TRY(cm__axis(__func__, "axis1", axis1, src->ndim, &b));
    cm__layout l = cm__layout_of(src);
    l.shape[a] = src->shape[b];
    l.strides[a] = src->strides[b];
    l.shape[b] = src->shape[a];
    l.strides[b] = src->strides[a];
    return cm__view(__func__, src, &l, out);
}

/* Resolves a -1 in a requested shape against numel. */
static cm_status cm__infer_shape(const char *func, int32_t ndim, const int64_t *shape,
                                 int64_t numel, int64_t *resolved) {
    int32_t infer = -1;
    int64_t known = 1;
    for (int32_t k = 0; k < ndim; ++k) {
        resolved[k] = shape[k];
        if (shape[k] == -1) {
            if (infer >= 0)
                return cm__fail_as(func, CM_ERR_INVALID_ARGUMENT,
                                   "shape[%d] = -1: only one dimension may be inferred", k);
            infer = k;
            continue;
        }
        if (shape[k] < 0)
            return cm__fail_as(func, CM_ERR_INVALID_ARGUMENT,
                               "shape[%d] = %" PRId64 " must be >= 0 or -1", k, shape[k]);
        if (cm__mul_overflow_i64(known, shape[k], &known))
            return cm__fail_as(func, CM_ERR_INVALID_ARGUMENT,
                               "shape overflows: it cannot hold %" PRId64 " elements", numel);
    }
    if (infer >= 0) {
        if (known == 0 || numel % known != 0)
            return cm__fail_as(func, CM_ERR_INVALID_ARGUMENT,
                               "shape[%d] = -1 cannot be inferred for %" PRId64
                               " elements over %" PRId64 " elements per index",
                               infer, numel, known);
        resolved[infer] = numel / known;
        known = numel;
    }
    if (known != numel)
        return cm__fail_as(func, CM_ERR_INVALID_ARGUMENT,
                           "shape has %" PRId64 " elements but the tensor has %" PRId64, known,
                           numel);
    return CM_OK;
}

cm_status cm_tensor_reshape(const cm_tensor *src, int32_t ndim, const int64_t *shape,
                            cm_tensor **out) {
    CM__VIEW_PROLOGUE();
    CM__REQUIRE_ARG(ndim >= 0 && ndim <= CM_MAX_NDIM, "ndim = %d must be between 0 and %d", ndim,
                    CM_MAX_NDIM);
    CM__REQUIRE_ARG(shape != NULL || ndim == 0, "shape = NULL with ndim = %d must not be NULL",
                    ndim);
    int64_t numel;
    CM__TRY(cm__shape_compact(__func__, src->ndim, src->shape, 1, NULL, &numel));
    cm__layout l = {.ndim = ndim, .flags = src->flags, .byte_offset = src->byte_offset};
    CM__TRY(cm__infer_shape(__func__, ndim, shape, numel, l.shape));
    if (numel == 0) /* any strides do; use compact ones */
        return cm__tensor_make(__func__, src->buffer, src->dtype, ndim, l.shape, NULL,
                               src->byte_offset, src->flags, out);

    /* Old axes without the size-1 ones, which carry no layout. */
    int64_t os[CM_MAX_NDIM], ost[CM_MAX_NDIM];
    int32_t no = 0;
    for (int32_t k = 0; k < src->ndim; ++k)
        if (src->shape[k] != 1) {
            os[no] = src->shape[k];
            ost[no] = src->strides[k];
            no++;
        }
    /* Match groups of old axes to groups of new axes with equal products;
     * a group is expressible only if its old axes nest contiguously. */
    int32_t oi = 0, ni = 0;
    while (ni < ndim && oi < no) {
        int32_t oj = oi + 1, nj = ni + 1;
        int64_t op = os[oi], np = l.shape[ni];
        while (np != op) {
            if (np < op)
                np *= l.shape[nj++];
            else
                op *= os[oj++];
        }
        for (int32_t k = oi; k + 1 < oj; ++k) {
            int64_t step;
            if (cm__mul_overflow_i64(os[k + 1], ost[k + 1], &step) || ost[k] != step)
                return cm__fail(CM_ERR_COPY_REQUIRED,
                                "the strides of this view cannot express the new shape without "
                                "a copy; copy it to a contiguous tensor first");
        }
        l.strides[nj - 1] = ost[oj - 1];
        /* An outer stride can wrap only above axes of size 1 or in an
         * empty view (else it lies inside the source's extent), and such
         * strides are never stepped. */
        for (int32_t k = nj - 1; k > ni; --k)
            if (cm__mul_overflow_i64(l.strides[k], l.shape[k], &l.strides[k - 1]))
                l.strides[k - 1] = l.strides[k];
        ni = nj;
        oi = oj;
    }
    for (; ni < ndim; ++ni)
        l.strides[ni] = 1; /* trailing size-1 axes */
    return cm__view(__func__, src, &l, out);
}

cm_status cm_tensor_broadcast_to(const cm_tensor *src, int32_t ndim, const int64_t *shape,
                                 cm_tensor **out) {
    CM__VIEW_PROLOGUE();
    CM__REQUIRE_ARG(ndim >= src->ndim && ndim <= CM_MAX_NDIM,
                    "ndim = %d must be between the tensor's ndim %d and %d", ndim, src->ndim,
                    CM_MAX_NDIM);
    CM__REQUIRE_ARG(shape != NULL || ndim == 0, "shape = NULL with ndim = %d must not be NULL",
                    ndim);
    cm__layout l = {
        .ndim = ndim, .flags = src->flags | CM_TENSOR_READ_ONLY, .byte_offset = src->byte_offset};
    const int32_t lead = ndim - src->ndim;
    for (int32_t k = 0; k < ndim; ++k) {
        CM__REQUIRE_ARG(shape[k] >= 0, "shape[%d] = %" PRId64 " must be >= 0", k, shape[k]);
        l.shape[k] = shape[k];
        if (k < lead) {
            l.strides[k] = 0;
            continue;
        }
        const int64_t have = src->shape[k - lead];
        if (have == shape[k])
            l.strides[k] = src->strides[k - lead];
        else if (have == 1)
            l.strides[k] = 0;
        else
            return cm__fail(CM_ERR_INVALID_ARGUMENT,
                            "shape[%d] = %" PRId64 " cannot broadcast from size %" PRId64
                            " (axis %d of the tensor)",
                            k, shape[k], have, k - lead);
    }
    return cm__view(__func__, src, &l, out);
}

cm_status cm_tensor_squeeze(const cm_tensor *src, int32_t axis, cm_tensor **out) {
    CM__VIEW_PROLOGUE();
    int32_t a = 0;
    CM__TRY(cm__axis(__func__, "axis", axis, src->ndim, &a));
    CM__REQUIRE_ARG(src->shape[a] == 1, "axis = %d has size %" PRId64 "; only size 1 squeezes",
                    axis, src->shape[a]);
    return cm_tensor_select(src, a, 0, out);
}

cm_status cm_tensor_unsqueeze(const cm_tensor *src, int32_t axis, cm_tensor **out) {
    CM__VIEW_PROLOGUE();
    CM__REQUIRE_ARG(src->ndim < CM_MAX_NDIM, "the tensor already has the maximum %d axes",
                    CM_MAX_NDIM);
    int32_t a = 0;
    CM__TRY(cm__axis(__func__, "axis", axis, src->ndim + 1, &a));
    cm__layout l = cm__layout_of(src);
    for (int32_t k = l.ndim; k > a; --k) {
        l.shape[k] = l.shape[k - 1];
        l.strides[k] = l.strides[k - 1];
    }
    int64_t stride = 1;
    if (a < src->ndim && cm__mul_overflow_i64(src->strides[a], src->shape[a], &stride))
        stride = 1;
    l.shape[a] = 1;
    l.strides[a] = stride;
    l.ndim++;
    return cm__view(__func__, src, &l, out);
}

cm_status cm_tensor_read_only(const cm_tensor *src, cm_tensor **out) {
    CM__VIEW_PROLOGUE();
    cm__layout l = cm__layout_of(src);
    l.flags |= CM_TENSOR_READ_ONLY;
    return cm__view(__func__, src, &l, out);
}

/* ------------------------------------------------------------ host access */

static cm_status cm__host_access(const char *func, const cm_tensor *t, cm_dtype dtype, bool write,
                                 uint8_t **base) {
    if (dtype != t->dtype) {
        const cm_dtype_info *want = cm__dtype(dtype);
        return cm__fail_as(func, CM_ERR_DTYPE_MISMATCH, "dtype = %s but the tensor is %s",
                           want ? want->name : "invalid", cm__dtype(t->dtype)->name);
    }
    if (write && (t->flags & CM_TENSOR_READ_ONLY))
        return cm__fail_as(func, CM_ERR_READ_ONLY, "the tensor is read-only");
    cm_buffer *b = t->buffer;
    if (b->host == NULL)
        return cm__fail_as(func, CM_ERR_NOT_HOST_VISIBLE,
                           "the tensor's %s storage on the %s device is not visible to the host",
                           cm__storage_mode_name(b->storage),
                           cm_device_type_name(b->device->backend->type));
    if (b->device->backend->buffer_prepare_host != NULL)
        CM__TRY(b->device->backend->buffer_prepare_host(b, write));
    *base = (uint8_t *)b->host + t->byte_offset;
    return CM_OK;
}

/* Tells the backend that the host wrote (or is about to write) the
 * tensor's elements, so managed storage is synchronised before device use. */
static void cm__host_modified(const cm_tensor *t) {
    const cm__backend *backend = t->buffer->device->backend;
    if (backend->buffer_host_modified == NULL)
        return;
    uint64_t begin = 0, end = 0;
    if (cm__layout_check(__func__, t->buffer->size, t->dtype, t->ndim, t->shape, t->strides,
                         t->byte_offset, NULL, &begin, &end) == CM_OK &&
        end > begin)
        backend->buffer_host_modified(t->buffer, (size_t)begin, (size_t)(end - begin));
}

cm_status cm_tensor_host_read(const cm_tensor *tensor, cm_dtype dtype, const void **out) {
    CM__REQUIRE_NONNULL(out);
    *out = NULL;
    CM__REQUIRE_NONNULL(tensor);
    uint8_t *base = NULL;
    CM__TRY(cm__host_access(__func__, tensor, dtype, false, &base));
    *out = base;
    return CM_OK;
}

cm_status cm_tensor_host_write(cm_tensor *tensor, cm_dtype dtype, void **out) {
    CM__REQUIRE_NONNULL(out);
    *out = NULL;
    CM__REQUIRE_NONNULL(tensor);
    uint8_t *base = NULL;
    CM__TRY(cm__host_access(__func__, tensor, dtype, true, &base));
    cm__host_modified(tensor);
    *out = base;
    return CM_OK;
}

/* Byte offset of a multi-index from element 0, with bounds checks. */
static cm_status cm__element_offset(const char *func, const cm_tensor *t, const int64_t *index,
                                    int64_t *out) {
    if (index == NULL && t->ndim > 0)
        return cm__fail_as(func, CM_ERR_INVALID_ARGUMENT,
                           "index = NULL must not be NULL for a %d-d tensor", t->ndim);
    for (int32_t k = 0; k < t->ndim; ++k)
        if (index[k] < 0 || index[k] >= t->shape[k])
            return cm__fail_as(func, CM_ERR_OUT_OF_BOUNDS,
                               "index[%d] = %" PRId64 " is out of range for size %" PRId64, k,
                               index[k], t->shape[k]);
    /* Every index is in range, so the tensor is not empty and the sum lies
     * inside its validated extent (an empty view's strides are unchecked). */
    int64_t off = 0;
    for (int32_t k = 0; k < t->ndim; ++k)
        off += index[k] * t->strides[k];
    *out = off * (int64_t)cm__dtype(t->dtype)->size;
    return CM_OK;
}

cm_status cm_tensor_get_element(const cm_tensor *tensor, const int64_t *index, cm_dtype dtype,
                                void *value) {
    CM__REQUIRE_NONNULL(tensor);
    CM__REQUIRE_NONNULL(value);
    int64_t off;
    CM__TRY(cm__element_offset(__func__, tensor, index, &off));
    uint8_t *base = NULL;
    CM__TRY(cm__host_access(__func__, tensor, dtype, false, &base));
    memcpy(value, base + off, cm__dtype(dtype)->size);
    return CM_OK;
}

cm_status cm_tensor_set_element(cm_tensor *tensor, const int64_t *index, cm_dtype dtype,
                                const void *value) {
    CM__REQUIRE_NONNULL(tensor);
    CM__REQUIRE_NONNULL(value);
    int64_t off;
    CM__TRY(cm__element_offset(__func__, tensor, index, &off));
    uint8_t *base = NULL;
    CM__TRY(cm__host_access(__func__, tensor, dtype, true, &base));
    memcpy(base + off, value, cm__dtype(dtype)->size);
    cm__host_modified(tensor);
    return CM_OK;
}
