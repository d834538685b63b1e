/* SPDX-License-Identifier: MIT */
/* cmetal/memory.h: the buffer cache of a Metal device, its limits and
 * counts.
 *
 * Every Metal device keeps the MTLBuffers of released buffers in a cache
 * and hands them to later cm_buffer_create calls (and so cm_tensor_create)
 * of the same storage mode, instead of making a new MTLBuffer each time:
 * - Sizes are rounded up to size classes, 8 per power of two (sizes up to
 *   16 bytes are classes of their own), so a buffer is at most 1/8 larger
 *   than asked for, and a request reuses a cached buffer of its own class
 *   only. A size that grows a little at each step (an append) keeps
 *   falling in the class of the buffer released before it.
 * - A buffer enters the cache only once the device is done with it: its
 *   last release waits for the device work that uses it (cmetal/buffer.h),
 *   then caches it. A buffer that failed device work, a wrapped buffer
 *   (cm_buffer_wrap_host, cm_buffer_wrap_metal) and a buffer whose MTLBuffer
 *   was handed out (cm_buffer_get_info's native, a kDLMetal export: the
 *   program may still hold it) are never cached: their MTLBuffer is
 *   released with them.
 * - Small buffers: while the cache is on (with a cache limit of at least
 *   1 MiB: a smaller cache would keep emptying heaps), a new buffer whose
 *   size class is
 *   at most 16 KiB (one page of Apple silicon: a buffer of its own takes at
 *   least a page) comes from an MTLHeap of 1 MiB shared with other small
 *   buffers, where the device has heaps of its storage mode: private
 *   storage on every Mac, shared storage on Apple GPUs only (Metal makes
 *   no shared heap on a Mac without Apple silicon), managed storage never.
 *   Elsewhere, and with the cache off, each buffer has an MTLBuffer of its
 *   own. A heap's buffer is an MTLBuffer like any other (its own offset 0,
 *   cm_buffer_get_metal_buffer, DLPack export and custom kernels see no
 *   difference) with Metal's hazard tracking, as every buffer of
 *   cm_buffer_create. A released one goes to the cache as others do; a
 *   heap is released as soon as none of its buffers is live or cached
 *   (cm_device_clear_cache gives back the heaps it empties), except that a
 *   heap buffer whose MTLBuffer was handed out keeps its heap until the
 *   device goes.
 * - Contents: cm_buffer_create and cm_tensor_create promise nothing about
 *   contents: a buffer from the cache holds whatever its last user left
 *   there, and a new buffer from a heap whatever an earlier buffer of the
 *   heap left (bytes of an earlier buffer of the same process: Metal does
 *   not promise to clear heap memory it hands out again). Fill it
 *   (cm_fill) before reading it.
 * - The cache holds at most the cache limit; the least recently cached
 *   buffers are released first to stay under it. The default limit is 1/8
 *   of the device's recommendedMaxWorkingSetSize, at most 1 GiB (256 MiB
 *   when the device reports none), so that a full cache cannot push the
 *   machine into swap. A cache limit of 0 turns the cache off: every
 *   released buffer's MTLBuffer is released at once.
 * - A memory limit (none by default) bounds the active bytes: a
 *   cm_buffer_create that would take them past it fails with
 *   CM_ERR_OUT_OF_MEMORY naming the limit and the request, after releasing
 *   cached buffers to make room: the active and cached bytes and the room
 *   left in heaps together stay within the limit. A new heap counts whole:
 *   where it would pass the limit, a small buffer has its own MTLBuffer.
 * - When Metal refuses a new MTLBuffer, the cache is released and the
 *   allocation tried once more.
 * - Residency: where the device has residency sets (it answers
 *   newResidencySetWithDescriptor:error:, macOS 15, and supports GPU family
 *   Apple6, which Metal's validation layer requires), the device keeps one
 *   MTLResidencySet labelled "cmetal allocations". Each MTLBuffer made for
 *   cm_buffer_create is added to it (committed, requestResidency) while
 *   the resident bytes stay within the wired limit, and taken out when it
 *   is released (cached buffers stay in; an evicted or uncached one goes).
 *   Of small buffers in heaps, the heap (labelled "cmetal small buffers")
 *   is in the set instead, for its whole size, while it is held.
 *   The set is attached to the queues cmetal makes (addResidencySet:) and
 *   used by each command buffer cmetal makes on an adopted queue
 *   (useResidencySet:, so the program's queue is left as it was). Wrapped
 *   buffers are not added. Where the device has no residency sets nothing
 *   of this happens: residency_set is false and the wired limit is 0.
 * Counted sizes are the size classes (what the MTLBuffers hold); a heap's
 * buffers count in active_bytes and cached_bytes as others do, and the
 * heaps themselves in heaps and heap_bytes, so that the memory held is
 * active_bytes + cached_bytes + (heap_bytes - the heap buffers' share) and
 * after cm_device_clear_cache with no buffer live all of them are 0 (but
 * the heaps kept by handed-out buffers). The CPU
 * device has no cache: these functions fail there with
 * CM_ERR_UNSUPPORTED. */
#ifndef CMETAL_MEMORY_H
#define CMETAL_MEMORY_H

#include <cmetal/device.h>

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cm_memory_info {
    uint64_t active_bytes;   /* held by live buffers made by cm_buffer_create */
    uint64_t peak_bytes;     /* the most active_bytes since the device was
                              opened or cm_device_reset_peak_memory */
    uint64_t cached_bytes;   /* held by the cache */
    uint64_t cache_limit;    /* bytes; 0: the cache is off */
    uint64_t memory_limit;   /* bytes; 0: none */
    uint64_t allocations;    /* Metal allocations made for buffers: MTLBuffers
                              of their own and MTLHeaps (a miss served by a
                              heap with room makes none) */
    uint64_t cache_hits;     /* buffers served from the cache */
    uint64_t cache_misses;   /* buffers that needed a new MTLBuffer */
    uint64_t resident_bytes; /* MTLBuffers and heaps in the residency set */
    uint64_t wired_limit;    /* bytes the residency set may hold; 0: nothing is
                              added (always 0 without residency sets) */
    bool residency_set;      /* the device has a residency set (macOS 15) */
    uint64_t heaps;          /* MTLHeaps held for small buffers */
    uint64_t heap_bytes;     /* their sizes (their live and cached buffers'
                              size classes are in active_bytes and
                              cached_bytes too) */
} cm_memory_info;

/* Ownership (every function below): borrows the device for the call;
 * nothing is retained or handed out. */

/* Fills *out with the device's counts and limits, all read at one moment.
 * Errors: CM_ERR_INVALID_ARGUMENT (NULL device or out), CM_ERR_UNSUPPORTED
 * (not a Metal device). Thread-safety: safe from any thread. */
CM_API cm_status cm_device_get_memory_info(const cm_device *device, cm_memory_info *out);

/* Sets peak_bytes to the current active_bytes.
 * Errors: as cm_device_get_memory_info. Thread-safety: any thread. */
CM_API cm_status cm_device_reset_peak_memory(cm_device *device);

/* Sets the cache limit in bytes (0 turns the cache off) and releases the
 * least recently cached buffers past it at once; the previous limit goes
 * to *previous unless previous is NULL.
 * Errors: as cm_device_get_memory_info. Thread-safety: any thread. */
CM_API cm_status cm_device_set_cache_limit(cm_device *device, uint64_t bytes, uint64_t *previous);

/* Sets the memory limit in bytes (0: none). Buffers already live stay;
 * later allocations past it fail. The previous limit goes to *previous
 * unless previous is NULL.
 * Errors: as cm_device_get_memory_info. Thread-safety: any thread. */
CM_API cm_status cm_device_set_memory_limit(cm_device *device, uint64_t bytes, uint64_t *previous);

/* Sets the wired limit: the most bytes of MTLBuffers and heaps the
 * residency set holds (0: none). The default is the device's
 * recommendedMaxWorkingSetSize. A new MTLBuffer that would pass it stays
 * out of the set (it works all the same; Metal makes it resident when a
 * command buffer uses it); a limit below what is resident takes buffers
 * out of the set until it fits. The previous limit goes to *previous
 * unless previous is NULL.
 * Errors: as cm_device_get_memory_info, and CM_ERR_UNSUPPORTED where the
 * device has no residency sets. Thread-safety: any thread. */
CM_API cm_status cm_device_set_wired_limit(cm_device *device, uint64_t bytes, uint64_t *previous);

/* Releases every cached MTLBuffer now; the cache keeps its limit.
 * Errors: as cm_device_get_memory_info. Thread-safety: any thread. */
CM_API cm_status cm_device_clear_cache(cm_device *device);

#ifdef __cplusplus
}
#endif
#endif /* CMETAL_MEMORY_H */
