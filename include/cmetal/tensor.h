/* SPDX-License-Identifier: MIT */
/* cmetal/tensor.h: tensors as views over buffers.
 *
 * A tensor is a buffer reference plus a layout: dtype, ndim, shape, strides
 * in elements (zero and negative allowed) and the byte offset of element 0.
 * Element i (a multi-index) lives at
 *     byte_offset + sum(i[k] * strides[k]) * itemsize
 * and every element of a tensor lies inside its buffer: a layout that would
 * reach outside is refused when the view is made.
 *
 * Views never copy. Each view function returns a new tensor (+1) that
 * retains the same buffer; the source is unchanged. A tensor is immutable
 * after creation, so one tensor may be shared by any number of threads. */
#ifndef CMETAL_TENSOR_H
#define CMETAL_TENSOR_H

#include <cmetal/buffer.h>
#include <cmetal/dtype.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cm_tensor cm_tensor;

#define CM_MAX_NDIM 16

/* Tensor flags. */
enum {
    CM_TENSOR_READ_ONLY = 1u << 0 /* writes through cmetal are refused */
};

/* For cm_tensor_slice: Python's None for start or stop. */
#define CM_SLICE_DEFAULT INT64_MIN

typedef struct cm_tensor_desc {
    cm_dtype dtype;          /* required */
    int32_t ndim;            /* 0 .. CM_MAX_NDIM */
    const int64_t *shape;    /* ndim sizes >= 0; may be NULL when ndim is 0 */
    const int64_t *strides;  /* ndim strides in elements; NULL = compact row-major */
    uint64_t byte_offset;    /* of element 0, a multiple of the element size */
    uint32_t flags;          /* CM_TENSOR_READ_ONLY */
    cm_storage_mode storage; /* cm_tensor_create only: the new buffer's storage */
    const char *label;       /* cm_tensor_create only: the new buffer's label
                                 (cm_buffer_desc.label); NULL: none */
} cm_tensor_desc;

typedef struct cm_tensor_info {
    cm_dtype dtype;
    int32_t ndim;
    int64_t shape[CM_MAX_NDIM];
    int64_t strides[CM_MAX_NDIM]; /* elements */
    uint64_t byte_offset;
    uint32_t flags;        /* CM_TENSOR_READ_ONLY, also set when the buffer is read-only */
    int64_t numel;         /* product of shape; 1 for 0-d */
    bool contiguous;       /* compact row-major (size-1 axes' strides ignored) */
    uint64_t extent_begin; /* bytes [begin, end) of the buffer the elements */
    uint64_t extent_end;   /*   touch; begin == end when numel is 0 */
    cm_buffer *buffer;     /* borrowed */
    cm_device_type device_type;
} cm_tensor_info;

/* A new compact row-major tensor in a new buffer of the right size on
 * `device`. desc->strides must be NULL and desc->byte_offset 0. Contents are
 * unspecified (cm_fill sets them).
 * Ownership: returns +1 in *out. Errors: CM_ERR_INVALID_ARGUMENT naming the
 * field, CM_ERR_OVERFLOW when the size does not fit, CM_ERR_OUT_OF_MEMORY,
 * CM_ERR_UNSUPPORTED (storage the device lacks). float64 is created on a
 * Metal device as storage only (cmetal/dtype.h). */
CM_API cm_status cm_tensor_create(cm_device *device, const cm_tensor_desc *desc, cm_tensor **out);

/* A view with layout `desc` over `buffer` (desc->storage is ignored).
 * Ownership: returns +1 in *out; the tensor retains `buffer`.
 * Errors: CM_ERR_INVALID_ARGUMENT, CM_ERR_OVERFLOW, CM_ERR_OUT_OF_BOUNDS
 * when an element would lie outside the buffer. */
CM_API cm_status cm_tensor_from_buffer(cm_buffer *buffer, const cm_tensor_desc *desc,
                                       cm_tensor **out);

/* Reference counting: release(NULL) is a no-op. The last release drops the
 * tensor's buffer reference. Thread-safety: atomic; any thread. */
CM_API cm_status cm_tensor_retain(cm_tensor *tensor);
CM_API cm_status cm_tensor_release(cm_tensor *tensor);

CM_API cm_status cm_tensor_get_info(const cm_tensor *tensor, cm_tensor_info *out);

/* --- Views. Axes may be negative (counted from the end). --- */

/* Python slicing of one axis: start:stop:step, with negative start/stop
 * counted from the end, out-of-range values clamped, CM_SLICE_DEFAULT for
 * None. step != 0; a negative step reverses. */
CM_API cm_status cm_tensor_slice(const cm_tensor *src, int32_t axis, int64_t start, int64_t stop,
                                 int64_t step, cm_tensor **out);

/* Indexes one axis and drops it (ndim - 1). index may be negative. */
CM_API cm_status cm_tensor_select(const cm_tensor *src, int32_t axis, int64_t index,
                                  cm_tensor **out);

/* Reorders axes: out axis k is src axis axes[k]; axes has ndim entries and
 * is a permutation. */
CM_API cm_status cm_tensor_permute(const cm_tensor *src, const int32_t *axes, cm_tensor **out);

/* Swaps two axes. */
CM_API cm_status cm_tensor_transpose(const cm_tensor *src, int32_t axis0, int32_t axis1,
                                     cm_tensor **out);

/* A view with a new shape and the same elements in row-major order. One
 * entry may be -1 (inferred). Fails with CM_ERR_COPY_REQUIRED when the
 * strides cannot express it without a copy (use cm_copy to a contiguous
 * tensor first). */
CM_API cm_status cm_tensor_reshape(const cm_tensor *src, int32_t ndim, const int64_t *shape,
                                   cm_tensor **out);

/* NumPy broadcasting to `shape` (ndim >= src ndim): new leading axes and
 * size-1 axes get stride 0. The result is read-only, as in NumPy, because
 * its elements alias each other. */
CM_API cm_status cm_tensor_broadcast_to(const cm_tensor *src, int32_t ndim, const int64_t *shape,
                                        cm_tensor **out);

/* Removes size-1 axis `axis`. */
CM_API cm_status cm_tensor_squeeze(const cm_tensor *src, int32_t axis, cm_tensor **out);

/* Inserts a size-1 axis so that it becomes axis `axis` of the result
 * (-ndim-1 <= axis <= ndim). */
CM_API cm_status cm_tensor_unsqueeze(const cm_tensor *src, int32_t axis, cm_tensor **out);

/* The same view, marked read-only. */
CM_API cm_status cm_tensor_read_only(const cm_tensor *src, cm_tensor **out);

/* --- Host access. These wait for pending device writes to the buffer
 * first, and refuse storage the host cannot see (CM_ERR_NOT_HOST_VISIBLE). */

/* Host address of element 0 for reading. `dtype` must be the tensor's dtype
 * (CM_ERR_DTYPE_MISMATCH otherwise). Borrowed: valid while the tensor lives.
 * For a zero-size tensor the address may not be dereferenced. */
CM_API cm_status cm_tensor_host_read(const cm_tensor *tensor, cm_dtype dtype, const void **out);

/* Same, for writing: also CM_ERR_READ_ONLY for read-only tensors and
 * broadcast views. */
CM_API cm_status cm_tensor_host_write(cm_tensor *tensor, cm_dtype dtype, void **out);

/* Reads or writes one element at multi-index `index` (ndim entries, each
 * 0 <= index[k] < shape[k]; NULL for 0-d). `value` points to one element of
 * `dtype`, which must equal the tensor's dtype. */
CM_API cm_status cm_tensor_get_element(const cm_tensor *tensor, const int64_t *index,
                                       cm_dtype dtype, void *value);
CM_API cm_status cm_tensor_set_element(cm_tensor *tensor, const int64_t *index, cm_dtype dtype,
                                       const void *value);

#ifdef __cplusplus
}
#endif
#endif /* CMETAL_TENSOR_H */
