/* SPDX-License-Identifier: MIT */
/* cmetal/dlpack.h: zero-copy exchange of tensors through DLPack.
 *
 * The DLPack ABI comes from <dlpack/dlpack.h>. When the installed header
 * predates DLPack 1.0 (Debian bookworm ships 0.6: DLPACK_VERSION 60 and no
 * DLPACK_MAJOR_VERSION), this header declares the 1.x additions itself:
 * DLPackVersion, DLManagedTensorVersioned, the DLPACK_FLAG_BITMASK_* flags,
 * kDLBool and the device types after kDLCUDAManaged. With a 1.x header it
 * adds nothing but what that header's minor version lacks.
 *
 * Export (cm_dlpack_export) follows Python's __dlpack__(max_version, dl_device,
 * copy): the request picks the legacy DLManagedTensor or the versioned
 * DLManagedTensorVersioned, the target device, the copy policy and whether to
 * mark the data read-only. Import (cm_dlpack_import, cm_dlpack_import_versioned)
 * validates every field, then wraps the producer's memory in place and keeps
 * the producer's managed tensor alive until the last view of it dies.
 *
 * Devices: host memory (kDLCPU; on import also kDLCUDAHost and kDLROCMHost,
 * which are plain pinned host memory) and Metal buffers (kDLMetal, on a
 * library built with the Metal backend and a Metal device; elsewhere kDLMetal
 * fails with CM_ERR_UNSUPPORTED or CM_ERR_NO_DEVICE and leaves ownership
 * untouched). */
#ifndef CMETAL_DLPACK_H
#define CMETAL_DLPACK_H

#include <cmetal/tensor.h>

#include <dlpack/dlpack.h>

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- The DLPack 1.x ABI, when the installed header predates it. ---- */
#ifndef DLPACK_MAJOR_VERSION

typedef struct DLPackVersion {
    uint32_t major; /* a consumer refuses a major version it does not know */
    uint32_t minor; /* newer minors only add values; their fields are compatible */
} DLPackVersion;

/* Everything up to and including `flags` is stable across 1.x. */
typedef struct DLManagedTensorVersioned {
    DLPackVersion version;
    void *manager_ctx;
    void (*deleter)(struct DLManagedTensorVersioned *self); /* may be NULL */
    uint64_t flags;                                         /* DLPACK_FLAG_BITMASK_* */
    DLTensor dl_tensor;
} DLManagedTensorVersioned;

#define DLPACK_FLAG_BITMASK_READ_ONLY (UINT64_C(1) << 0)
#define DLPACK_FLAG_BITMASK_IS_COPIED (UINT64_C(1) << 1)

/* Values a pre-1.0 header may lack (0.8 added some of them). Macros, so
 * that they never collide with an enumerator the header already has. */
#define kDLBool 6
#define kDLOneAPI 14
#define kDLWebGPU 15
#define kDLHexagon 16
#define kDLMAIA 17
#define kDLTrn 18

#endif /* DLPACK_MAJOR_VERSION */

/* Added by DLPack 1.1. */
#ifndef DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED
#define DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED (UINT64_C(1) << 2)
#endif

/* The versioned struct cmetal exports: major 1, and the highest minor
 * (at most this one) that the request's max_version allows. Every exported
 * tensor is valid under all of 1.0 to 1.3 (strides are always set). */
#define CM_DLPACK_MAJOR_VERSION 1
#define CM_DLPACK_MINOR_VERSION 3

/* ---- Export ---- */

/* A request, modelled on __dlpack__. All zero means: the legacy struct, the
 * tensor's own device, copy only if needed, writable unless the tensor is
 * read-only. */
typedef struct cm_dlpack_export_desc {
    /* {0, x} (default): a legacy DLManagedTensor, as __dlpack__() without
     * max_version. {1, m}: a DLManagedTensorVersioned of version
     * {1, min(m, CM_DLPACK_MINOR_VERSION)}. A higher major gets the newest
     * versioned struct cmetal knows (major 1), as the Python protocol asks;
     * the consumer then checks the major itself. */
    DLPackVersion max_version;
    /* DLDeviceType to export for, as __dlpack__(dl_device=): 0 (default)
     * means the tensor's own device (kDLCPU for CPU tensors). */
    int32_t device_type;
    /* With device_type: 0 for kDLCPU; for kDLMetal 0 (default) or the
     * tensor's own device index (cm_device_open's numbering). */
    int32_t device_id;
    /* CM_COPY_IF_NEEDED (default), CM_COPY_NEVER (CM_ERR_COPY_REQUIRED
     * instead of a copy), CM_COPY_ALWAYS (a fresh compact row-major copy,
     * flagged DLPACK_FLAG_BITMASK_IS_COPIED in the versioned struct). */
    cm_copy_policy copy;
    /* Mark the export DLPACK_FLAG_BITMASK_READ_ONLY (versioned only). */
    bool read_only;
    /* kDLMetal only: do not wait for pending device writes. The consumer
     * then orders its work after a fence it waits on itself: take one with
     * cm_stream_signal on the device's stream (cm_fence_get_info gives the
     * id<MTLSharedEvent> and value). Default false: the export waits. */
    bool no_wait;
} cm_dlpack_export_desc;

/* What an export produced: exactly one of the two pointers is non-NULL. */
typedef struct cm_dlpack_managed {
    DLPackVersion version;               /* {0, 0} for the legacy struct */
    DLManagedTensor *legacy;             /* when the request's max_version.major is 0 */
    DLManagedTensorVersioned *versioned; /* when it is 1 or more */
    bool copied;                         /* the data is a fresh copy, not the tensor's */
} cm_dlpack_managed;

/* Exports `tensor` as a DLPack managed tensor.
 *
 * Layout: CPU data goes out as kDLCPU (device_id 0) with `data` = the host
 * address of element 0 (buffer contents + the view's byte offset) and
 * byte_offset = 0, as NumPy and PyTorch do for the CPU. shape and strides
 * (in elements) are always set for ndim > 0, also for compact tensors; for
 * ndim 0 they point to empty arrays. Size-1, zero and negative strides go
 * out as they are.
 * Metal tensors go out, by default, as kDLMetal (device_id = the device's
 * index, as cm_device_open numbers Metal devices: 0 is the system default
 * device, MTLCreateSystemDefaultDevice) with `data` =
 * the id<MTLBuffer> (never a host address: do no arithmetic on it) and
 * byte_offset = the view's offset of element 0, as PyTorch MPS and MLX do.
 * Asked for kDLCPU, host-visible Metal storage (shared, managed) goes out
 * as above, zero-copy on unified memory; private storage is copied to the
 * host when desc->copy allows (CM_ERR_COPY_REQUIRED otherwise).
 * kDLMetal device_id is a number, not a device: DLPack leaves its meaning
 * to each framework. cmetal's 0 is the system default device; PyTorch's MPS
 * device is the first non-low-power device supporting the Mac2 family, and
 * MLX uses the default device. They agree on Apple silicon (one GPU) and may
 * differ on Intel Macs with several GPUs (an integrated and a discrete one,
 * or eGPUs), where a consumer could read device_id 0 as another GPU. cmetal
 * cannot see the consumer's numbering, so it refuses nothing on this
 * ground: with several Metal devices, match the MTLDevice itself (the
 * MTLBuffer in `data` knows its `device`; cm_device_get_metal_device gives
 * cmetal's) rather than the number.
 * Synchronisation: the export first waits for pending device writes to the
 * tensor's buffer (and, for a writable export, pending reads), so the
 * consumer sees finished data; see desc->no_wait.
 *
 * Read-only: the versioned struct gets DLPACK_FLAG_BITMASK_READ_ONLY when the
 * tensor is read-only (broadcast views included) or desc->read_only is set.
 * The legacy struct cannot say read-only, so a read-only request or tensor
 * is exported as a copy under CM_COPY_IF_NEEDED or CM_COPY_ALWAYS and fails
 * with CM_ERR_READ_ONLY under CM_COPY_NEVER. A copy belongs to the consumer
 * and is writable unless desc->read_only is set.
 *
 * Ownership: the tensor is borrowed; on success the managed tensor holds its
 * own reference to it (or to the copy), and the consumer owns the managed
 * tensor and must call its deleter exactly once. The deleter frees
 * everything the export allocated and drops that reference; it may run on
 * any thread, with or without other cmetal calls in flight. On failure
 * nothing is allocated and *out is zeroed.
 * Allocation: one block per export (the managed tensor, its shape and
 * strides). Under the default allocator each thread keeps one freed block
 * for its next export (freed when the thread exits), so that repeated
 * round trips on a thread allocate nothing; under a cm_set_allocator
 * allocator every export allocates its block and the deleter frees it.
 * Errors: CM_ERR_INVALID_ARGUMENT naming the field (NULL tensor or out,
 * device_id, copy); CM_ERR_UNSUPPORTED for a device type cmetal cannot
 * export to (kDLMetal for a CPU tensor, CUDA...);
 * CM_ERR_COPY_REQUIRED when only a copy works and desc->copy is
 * CM_COPY_NEVER; CM_ERR_READ_ONLY (see above); CM_ERR_NOT_HOST_VISIBLE for
 * private storage asked for on the CPU; CM_ERR_OUT_OF_MEMORY.
 * Thread-safety: safe from any thread; tensors are immutable. */
CM_API cm_status cm_dlpack_export(const cm_tensor *tensor, const cm_dlpack_export_desc *desc,
                                  cm_dlpack_managed *out);

/* ---- Import ---- */

/* All zero means: import onto the device that holds the data, in place,
 * writable unless the producer says read-only. */
typedef struct cm_dlpack_import_desc {
    /* The device the tensor should live on; NULL (default) means where the
     * data is: the CPU device for host memory, Metal device
     * dl_tensor.device.device_id for kDLMetal. Borrowed for the call. Host
     * memory may go onto a Metal device: it is mapped without a copy when
     * its extent is aligned to the host's page size (CM_METAL_PAGE_SIZE
     * always is), else copied as
     * desc->copy allows. kDLMetal data cannot go onto the CPU device. */
    cm_device *device;
    /* CM_COPY_IF_NEEDED (default): in place where possible, else a copy
     * (host memory onto a Metal device). CM_COPY_NEVER: in place or
     * CM_ERR_COPY_REQUIRED. CM_COPY_ALWAYS: a compact row-major copy in a new
     * buffer; the producer's deleter runs before returning. A copied import's
     * buffer has CM_BUFFER_COPIED in cm_buffer_info.flags. */
    cm_copy_policy copy;
    /* Import as a read-only tensor even if the producer allows writes. */
    bool read_only;
} cm_dlpack_import_desc;

/* Imports a legacy DLManagedTensor as a tensor (+1 in *out).
 *
 * Every field is validated before anything is done: dl_tensor.ndim
 * (0..CM_MAX_NDIM), shape (non-NULL for ndim > 0, entries >= 0), strides
 * (NULL means compact row-major; zero and negative strides are accepted),
 * dtype (code/bits/lanes of a cmetal dtype, see cm_dtype_from_dlpack),
 * byte_offset (a multiple of the element size), device (kDLCPU with id 0,
 * kDLCUDAHost or kDLROCMHost with id >= 0), data (NULL only for zero-size
 * tensors), and the extent the view reaches from data + byte_offset in
 * either direction (overflow-checked). In-place imports wrap exactly the
 * bytes the view touches (which may start before data + byte_offset when
 * strides are negative) as a foreign, host-visible buffer. kDLMetal imports
 * wrap the id<MTLBuffer> in `data` (retained) and check the view against
 * its length; the producer must have finished writing it (for PyTorch MPS:
 * torch.mps.synchronize(); for MLX: mx.eval()).
 *
 * Ownership: consumes `managed` on success: cmetal calls managed->deleter
 * (when not NULL) exactly once, when the last tensor or buffer that uses the
 * memory is released, on whichever thread releases it last (right away,
 * before returning, after a CM_COPY_ALWAYS copy). On any failure the caller
 * keeps ownership and no function of `managed` is called.
 * A managed tensor that cm_dlpack_export made from a CPU-device tensor,
 * imported onto the CPU device unchanged, without CM_COPY_ALWAYS and with
 * the read-only state it went out with, gives back the exported tensor
 * itself (the same cm_tensor *, +1) and frees the export's block before
 * returning: no allocation.
 * Errors: CM_ERR_INVALID_ARGUMENT naming the field and value
 * ("cm_dlpack_import: dl_tensor.strides[1] = ..."); CM_ERR_UNSUPPORTED for
 * valid DLPack that cmetal cannot hold (ndim > CM_MAX_NDIM, complex, float8,
 * lanes != 1, CUDA, ROCm and other devices, kDLMetal onto the CPU device),
 * CM_ERR_NO_DEVICE (kDLMetal without Metal), CM_ERR_COPY_REQUIRED; CM_ERR_OVERFLOW for an extent beyond the
 * address space; CM_ERR_OUT_OF_MEMORY. On failure *out is NULL.
 * Thread-safety: safe from any thread. */
CM_API cm_status cm_dlpack_import(DLManagedTensor *managed, const cm_dlpack_import_desc *desc,
                                  cm_tensor **out);

/* Imports a DLManagedTensorVersioned, as cm_dlpack_import, and also honours
 * its flags: DLPACK_FLAG_BITMASK_READ_ONLY gives a read-only tensor and
 * buffer (writes through cmetal fail with CM_ERR_READ_ONLY); IS_COPIED needs
 * nothing; unknown flag bits fail with CM_ERR_UNSUPPORTED.
 *
 * The major version is checked first, before any other field of `managed`
 * is read: if it is not CM_DLPACK_MAJOR_VERSION, cmetal calls
 * managed->deleter (when not NULL) exactly once, as the DLPack spec asks,
 * and fails with CM_ERR_VERSION. That is the one failure that consumes
 * `managed`. Any minor version is accepted.
 * Ownership: as cm_dlpack_import, except for a major version mismatch
 * (consumed, deleter called before returning). NULL out, managed or an
 * invalid desc fail with CM_ERR_INVALID_ARGUMENT before the version check
 * and call nothing.
 * Thread-safety: safe from any thread. */
CM_API cm_status cm_dlpack_import_versioned(DLManagedTensorVersioned *managed,
                                            const cm_dlpack_import_desc *desc, cm_tensor **out);

#ifdef __cplusplus
}
#endif
#endif /* CMETAL_DLPACK_H */
