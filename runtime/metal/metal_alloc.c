/* SPDX-License-Identifier: MIT */
/* The bottom of the Metal device: the caching allocator of the MTLBuffers
 * of cm_buffer_create (cmetal/memory.h). Released MTLBuffers wait in a
 * cache by storage mode and size class; the least recently cached go
 * first when the cache passes its limit. Where the device has residency
 * sets (macOS 15, GPU family Apple6 and later), every MTLBuffer made here
 * is in the device's one MTLResidencySet, within the wired limit, from
 * when it is made until it is released (cached ones stay in). Small
 * buffers (size classes up to CM__HEAP_SMALL) come from MTLHeaps of
 * CM__HEAP_SIZE bytes where the device has them for the storage mode and
 * the cache is on; then the heap, not its buffers, is in the residency
 * set. Sends newBufferWithLength:options: (to the device and to heaps),
 * newHeapWithDescriptor:, setLabel:, the residency set's messages and
 * release. */
#include "metal_internal.h"

#include <inttypes.h>

/* A cached MTLBuffer: in its class's list and in the age list. */
struct cm__metal_pooled {
    cm__id mtl; /* +1 */
    size_t length;
    unsigned storage, index;
    cm__metal_heap *heap; /* its heap, or NULL */
    cm__metal_pooled *class_prev, *class_next;
    cm__metal_pooled *newer, *older;
};

/* The size class of n bytes (n >= 1): its index and length. Up to 16 bytes
 * each size is a class; above, for 2^k < n <= 2^(k+1), the classes step by
 * 2^(k-3), so a class is less than n / 8 larger than n. False when the
 * class would pass SIZE_MAX. */
static bool cm__size_class(size_t n, unsigned *index, size_t *length) {
    if (n <= 16) {
        *index = (unsigned)n;
        *length = n;
        return true;
    }
    const unsigned k = 63u - (unsigned)__builtin_clzll((unsigned long long)(n - 1));
    const size_t base = (size_t)1 << k, step = (size_t)1 << (k - 3);
    const size_t j = (n - base + step - 1) / step; /* 1 to 8 */
    if (k == 8 * sizeof(size_t) - 1 && j == 8)
        return false;
    *index = 16 + (k - 4) * 8 + (unsigned)j;
    *length = base + j * step;
    return true;
}

static unsigned cm__storage_slot(cm_storage_mode storage) {
    return storage == CM_STORAGE_MANAGED ? 1u : storage == CM_STORAGE_PRIVATE ? 2u : 0u;
}

cm_status cm__metal_set_label(const char *func, const char *arg, cm__id obj, const char *label) {
    cm__id text = NULL;
    if (label != NULL && cm__ns_string_from_utf8(func, label, &text) != CM_OK)
        return cm__fail_as(func, CM_ERR_INVALID_ARGUMENT, "%s = \"%.64s\" is not UTF-8", arg,
                           label);
    cm__msg_setLabel(obj, text);
    cm__objc_release(text);
    return CM_OK;
}

/* MTLGPUFamilyApple1 (Apple's MTLDevice.h): an Apple GPU, the only kind of
 * Mac GPU whose heaps take shared storage. */
#define CM__MTL_GPU_FAMILY_APPLE1 1001
/* MTLGPUFamilyApple6 (Apple's MTLDevice.h): Metal's validation layer
 * refuses residency sets on devices without it. */
#define CM__MTL_GPU_FAMILY_APPLE6 1006

/* The device's new residency set (+1), or NULL where it has none. */
static cm__id cm__residency_new(cm__id device) {
    cm__class cls = CM__CLASS(MTLResidencySetDescriptor);
    if (cls == NULL ||
        !cm__msg_respondsToSelector(device, CM__SEL(newResidencySetWithDescriptor_error)) ||
        !cm__msg_supportsFamily(device, CM__MTL_GPU_FAMILY_APPLE6))
        return NULL;
    void *pool = cm__objc_pool_push();
    cm__id set = NULL;
    cm__id desc = cm__msg_alloc((cm__id)cls);
    if (desc != NULL)
        desc = cm__msg_init(desc);
    if (desc != NULL) {
        (void)cm__metal_set_label(__func__, "label", desc, "cmetal allocations");
        cm__id error = NULL; /* autoreleased */
        set = cm__msg_newResidencySetWithDescriptor_error(device, desc, &error);
        cm__objc_release(desc);
    }
    cm__objc_pool_pop(pool);
    return set;
}

void cm__metal_alloc_init(cm__metal_alloc *a, cm__id device, uint64_t recommended_working_set) {
    pthread_mutex_init(&a->lock, NULL);
    const uint64_t cap = (uint64_t)1 << 30;
    const uint64_t eighth = recommended_working_set / 8;
    a->cache_limit = recommended_working_set == 0 ? (uint64_t)256 << 20
                     : eighth < cap               ? eighth
                                                  : cap;
    a->residency = cm__residency_new(device);
    /* Heaps: private storage on every Mac, shared on Apple GPUs only (a Mac
     * without Apple silicon makes private heaps only); managed never. */
    if (CM__CLASS(MTLHeapDescriptor) != NULL &&
        cm__msg_respondsToSelector(device, CM__SEL(newHeapWithDescriptor))) {
        a->heap_storage[2] = true;
        a->heap_storage[0] = cm__msg_supportsFamily(device, CM__MTL_GPU_FAMILY_APPLE1);
    }
    if (a->residency != NULL) /* the device's advice of what fits resident */
        a->wired_limit = recommended_working_set;
}

/* Small buffers: size classes up to CM__HEAP_SMALL bytes (one 16 KiB page
 * of Apple silicon) come from heaps. A buffer of its own takes at least a
 * page of memory and its own mapping, however small; a heap's buffers share
 * its pages. Above a page a buffer of its own wastes little and a heap
 * would only add fragmentation. */
#define CM__HEAP_SMALL ((size_t)16 << 10)
/* The size of each heap: 64 of the largest small buffers. */
#define CM__HEAP_SIZE ((size_t)1 << 20)
/* MTLResourceHazardTrackingModeTracked (2 << MTLResourceHazardTrackingModeShift):
 * a heap's buffers are untracked by default, cmetal's buffers tracked. */
#define CM__MTL_RESOURCE_HAZARD_TRACKED 0x200

/* A heap of small buffers, in the allocator's list (under its lock). */
struct cm__metal_heap {
    cm__id heap;               /* id<MTLHeap>, +1 */
    unsigned storage, buffers; /* buffers: of it, live or cached here */
    bool full;                 /* refused a buffer since one last left */
    cm__metal_heap *prev, *next;
};

/* Puts a new MTLBuffer in the residency set when it fits the wired
 * limit. Lock held. */
static void cm__resident_add(cm__metal_alloc *a, cm__id mtl, size_t length) {
    if (a->residency == NULL || a->resident > a->wired_limit ||
        length > a->wired_limit - a->resident)
        return;
    cm__msg_addAllocation(a->residency, mtl);
    cm__msg_commit(a->residency);
    cm__msg_requestResidency(a->residency);
    a->resident += length;
}

/* Takes an MTLBuffer about to be released out of the residency set (its
 * change is committed by the caller). Lock held; true when it was in. */
static bool cm__resident_remove(cm__metal_alloc *a, cm__id mtl, size_t length) {
    if (a->residency == NULL || !cm__msg_containsAllocation(a->residency, mtl))
        return false;
    cm__msg_removeAllocation(a->residency, mtl);
    a->resident -= length;
    return true;
}

/* A new heap of `slot` with `options` at the head of the list, or NULL
 * (Metal refused it, or it would pass the memory limit: a heap counts
 * whole). Lock held. */
static cm__metal_heap *cm__heap_new(cm__metal_alloc *a, cm__id device, unsigned slot,
                                    cm__uint options) {
    const uint64_t held = a->active + a->cached + (a->heap_bytes - a->heap_used);
    if (a->memory_limit != 0 && (held > a->memory_limit || CM__HEAP_SIZE > a->memory_limit - held))
        return NULL;
    cm__metal_heap *h = CM__NEW(cm__metal_heap);
    cm__id desc = h != NULL ? cm__objc_new(CM__CLASS(MTLHeapDescriptor)) : NULL;
    if (desc != NULL) {
        cm__msg_setSize(desc, CM__HEAP_SIZE); /* a multiple of every page size: kept */
        cm__msg_setResourceOptions(desc, options | CM__MTL_RESOURCE_HAZARD_TRACKED);
        h->heap = cm__msg_newHeapWithDescriptor(device, desc);
        cm__objc_release(desc);
    }
    if (desc == NULL || h->heap == NULL) {
        cm__free(h);
        return NULL;
    }
    (void)cm__metal_set_label(__func__, "label", h->heap, "cmetal small buffers");
    h->storage = slot;
    h->next = a->heaps;
    if (h->next != NULL)
        h->next->prev = h;
    a->heaps = h;
    a->heap_bytes += CM__HEAP_SIZE;
    ++a->heap_count;
    ++a->allocations;
    cm__resident_add(a, h->heap, CM__HEAP_SIZE);
    return h;
}

/* A buffer of `len` bytes from a heap of `slot` with room (a new heap when
 * none has), +1, or NULL; its heap goes to *heap. Lock held. */
static cm__id cm__heap_take(cm__metal_alloc *a, cm__id device, unsigned slot, size_t len,
                            cm__uint options, cm__metal_heap **heap) {
    cm__metal_heap *h = a->heaps;
    for (;; h = h->next) {
        const bool fresh = h == NULL;
        if (fresh && (h = cm__heap_new(a, device, slot, options)) == NULL)
            return NULL;
        if (h->storage != slot || (h->full && !fresh))
            continue;
        cm__id mtl = cm__msg_newBufferWithLength_options(h->heap, len, options);
        if (mtl != NULL) {
            ++h->buffers;
            a->heap_used += len;
            *heap = h;
            return mtl;
        }
        h->full = true; /* tried again once a buffer leaves it */
        if (fresh)      /* an empty heap that refused: kept (unused) until the device goes */
            return NULL;
    }
}

/* A buffer of heap h (len bytes) is about to be released: h has room
 * again. Returns h, taken out of the list and the residency set, when it
 * held no other buffer: release it after the buffer. Lock held. */
static cm__metal_heap *cm__heap_leave(cm__metal_alloc *a, cm__metal_heap *h, size_t len) {
    a->heap_used -= len;
    h->full = false;
    if (--h->buffers != 0)
        return NULL;
    if (h->prev != NULL)
        h->prev->next = h->next;
    else
        a->heaps = h->next;
    if (h->next != NULL)
        h->next->prev = h->prev;
    a->heap_bytes -= CM__HEAP_SIZE;
    --a->heap_count;
    if (cm__resident_remove(a, h->heap, CM__HEAP_SIZE))
        cm__msg_commit(a->residency);
    return h;
}

/* Releases a heap cm__heap_leave returned (or NULL) without the lock. */
static void cm__heap_free(cm__metal_heap *h) {
    if (h != NULL)
        cm__objc_release(h->heap);
    cm__free(h);
}

/* Takes e out of both lists. Lock held. */
static void cm__pooled_unlink(cm__metal_alloc *a, cm__metal_pooled *e) {
    if (e->class_prev != NULL)
        e->class_prev->class_next = e->class_next;
    else
        a->classes[e->storage][e->index] = e->class_next;
    if (e->class_next != NULL)
        e->class_next->class_prev = e->class_prev;
    if (e->newer != NULL)
        e->newer->older = e->older;
    else
        a->newest = e->older;
    if (e->older != NULL)
        e->older->newer = e->newer;
    else
        a->oldest = e->newer;
    a->cached -= e->length;
}

/* Moves the oldest cached buffers to *out (linked by `older`) until the
 * cache holds at most `keep` bytes. Lock held; release them after. */
static void cm__evict_to(cm__metal_alloc *a, uint64_t keep, cm__metal_pooled **out) {
    while (a->cached > keep && a->oldest != NULL) {
        cm__metal_pooled *e = a->oldest;
        cm__pooled_unlink(a, e);
        e->older = *out;
        *out = e;
    }
}

/* Releases what cm__evict_to took (out of the residency set under the
 * lock, then released without it). */
static void cm__release_evicted(cm__metal_alloc *a, cm__metal_pooled *e) {
    if (e == NULL)
        return;
    bool removed = false;
    pthread_mutex_lock(&a->lock);
    for (cm__metal_pooled *p = e; p != NULL; p = p->older) {
        if (p->heap != NULL) /* kept in `heap`: the heap to release, or NULL */
            p->heap = cm__heap_leave(a, p->heap, p->length);
        else
            removed |= cm__resident_remove(a, p->mtl, p->length);
    }
    if (removed)
        cm__msg_commit(a->residency);
    pthread_mutex_unlock(&a->lock);
    while (e != NULL) {
        cm__metal_pooled *next = e->older;
        cm__objc_release(e->mtl);
        cm__heap_free(e->heap);
        cm__free(e);
        e = next;
    }
}

void cm__metal_alloc_destroy(cm__metal_alloc *a) {
    cm__metal_pooled *evicted = NULL;
    cm__evict_to(a, 0, &evicted);
    cm__release_evicted(a, evicted);
    /* Heaps still held have a buffer that was handed out (the program may
     * hold it; Metal keeps a heap alive while a buffer of it lives). */
    while (a->heaps != NULL) {
        cm__metal_heap *h = a->heaps;
        a->heaps = h->next;
        cm__heap_free(h);
    }
    cm__objc_release(a->residency);
    pthread_mutex_destroy(&a->lock);
}

/* cm__metal_alloc_take without the label; *hit when from the cache. */
static cm_status cm__alloc_take(const char *func, cm__metal_alloc *a, cm__id device, size_t size,
                                cm_storage_mode storage, uint64_t max_length, cm__id *out,
                                size_t *length, cm__metal_heap **heap, bool *hit_out) {
    const size_t n = size > 0 ? size : 1;
    unsigned index = 0;
    size_t len = n;
    /* A class past the device's largest buffer: the exact size, uncached. */
    if (!cm__size_class(n, &index, &len) || len > max_length) {
        index = 0;
        len = n;
    }
    const unsigned slot = cm__storage_slot(storage);
    cm__metal_pooled *evicted = NULL, *hit = NULL;
    pthread_mutex_lock(&a->lock);
    if (a->memory_limit != 0) {
        if (a->active > a->memory_limit || len > a->memory_limit - a->active) {
            const uint64_t active = a->active, limit = a->memory_limit;
            pthread_mutex_unlock(&a->lock);
            return cm__fail_as(func, CM_ERR_OUT_OF_MEMORY,
                               "desc->size = %zu (%zu bytes in its size class) with %" PRIu64
                               " bytes active passes the device's memory limit of %" PRIu64
                               " bytes (cm_device_set_memory_limit)",
                               size, len, active, limit);
        }
        /* The cache gives way so that everything held fits the limit. */
        const uint64_t room = a->memory_limit - a->active - len;
        const uint64_t in_heaps = a->heap_bytes - a->heap_used; /* room in heaps */
        cm__evict_to(a, room > in_heaps ? room - in_heaps : 0, &evicted);
    }
    if (index != 0)
        hit = a->classes[slot][index];
    cm__id mtl = NULL;
    if (hit != NULL) {
        cm__pooled_unlink(a, hit);
        ++a->hits;
        mtl = hit->mtl;
        *heap = hit->heap;
        *hit_out = true;
    } else {
        ++a->misses;
    }
    a->active += len;
    if (a->active > a->peak)
        a->peak = a->active;
    const cm__uint options = cm__storage_options(storage);
    /* A small miss: from a heap where the storage mode has them, while the
     * cache can hold a heap's worth (below that, released buffers would
     * leave heaps empty, made and released again and again). */
    if (mtl == NULL && index != 0 && len <= CM__HEAP_SMALL && a->heap_storage[slot] &&
        a->cache_limit >= CM__HEAP_SIZE)
        mtl = cm__heap_take(a, device, slot, len, options, heap);
    pthread_mutex_unlock(&a->lock);
    cm__free(hit);
    cm__release_evicted(a, evicted);
    *length = len;
    if (mtl != NULL) {
        *out = mtl;
        return CM_OK;
    }
    /* Tried again once when Metal refuses: the cache may be what fills the
     * device. */
    while ((mtl = cm__msg_newBufferWithLength_options(device, len, options)) == NULL) {
        pthread_mutex_lock(&a->lock);
        evicted = NULL;
        cm__evict_to(a, 0, &evicted);
        pthread_mutex_unlock(&a->lock);
        if (evicted == NULL)
            break;
        cm__release_evicted(a, evicted);
    }
    pthread_mutex_lock(&a->lock);
    if (mtl != NULL) {
        ++a->allocations;
        cm__resident_add(a, mtl, len);
    } else {
        a->active -= len;
    }
    pthread_mutex_unlock(&a->lock);
    if (mtl == NULL)
        return cm__fail_as(func, CM_ERR_OUT_OF_MEMORY,
                           "newBufferWithLength:%zu options:%lu returned nil (desc->size = %zu)",
                           len, options, size);
    *out = mtl;
    return CM_OK;
}

cm_status cm__metal_alloc_take(const char *func, cm__metal_alloc *a, cm__id device, size_t size,
                               cm_storage_mode storage, uint64_t max_length, const char *label,
                               cm__id *out, size_t *length, cm__metal_heap **heap) {
    *out = NULL;
    *heap = NULL;
    cm__id text = NULL; /* the label, checked before anything is taken */
    if (label != NULL && cm__ns_string_from_utf8(func, label, &text) != CM_OK)
        return cm__fail_as(func, CM_ERR_INVALID_ARGUMENT, "desc->label = \"%.64s\" is not UTF-8",
                           label);
    bool hit = false;
    const cm_status status =
        cm__alloc_take(func, a, device, size, storage, max_length, out, length, heap, &hit);
    /* A cached buffer's old label goes (setLabel:nil); a new one is
     * labelled only when asked. */
    if (status == CM_OK && (text != NULL || hit))
        cm__msg_setLabel(*out, text);
    cm__objc_release(text);
    return status;
}

void cm__metal_alloc_give(cm__metal_alloc *a, cm__id mtl, size_t length, cm__metal_heap *heap,
                          cm_storage_mode storage, bool reusable) {
    unsigned index = 0;
    size_t class_length = 0;
    /* Only a class's own length is cached (not an exact-size one). */
    reusable = reusable && cm__size_class(length, &index, &class_length) && class_length == length;
    cm__metal_pooled *e = reusable ? CM__NEW(cm__metal_pooled) : NULL;
    cm__metal_pooled *evicted = NULL;
    pthread_mutex_lock(&a->lock);
    a->active -= length;
    if (e != NULL) {
        e->mtl = mtl;
        e->length = length;
        e->heap = heap;
        mtl = NULL;
    }
    if (e != NULL && length <= a->cache_limit) {
        e->storage = cm__storage_slot(storage);
        e->index = index;
        e->class_next = a->classes[e->storage][index];
        if (e->class_next != NULL)
            e->class_next->class_prev = e;
        a->classes[e->storage][index] = e;
        e->older = a->newest;
        if (a->newest != NULL)
            a->newest->newer = e;
        else
            a->oldest = e;
        a->newest = e;
        a->cached += length;
        cm__evict_to(a, a->cache_limit, &evicted);
    } else if (e != NULL) {
        evicted = e; /* released at once, as an evicted one */
    } else if (heap == NULL && cm__resident_remove(a, mtl, length)) {
        cm__msg_commit(a->residency);
    }
    /* A heap buffer that may still be in use (handed out, or its work
     * failed) is released without leaving its heap: the heap stays held
     * until the device goes. */
    pthread_mutex_unlock(&a->lock);
    cm__objc_release(mtl);
    cm__release_evicted(a, evicted);
}

/* ------------------------------------------------------------ memory.h */

static cm__metal_alloc *cm__alloc_of(const cm_device *device) {
    return &((cm__metal_device *)device->impl)->alloc;
}

static void cm__memory_info(const cm_device *device, cm_memory_info *out) {
    cm__metal_alloc *a = cm__alloc_of(device);
    pthread_mutex_lock(&a->lock);
    *out = (cm_memory_info){
        .active_bytes = a->active,
        .peak_bytes = a->peak,
        .cached_bytes = a->cached,
        .cache_limit = a->cache_limit,
        .memory_limit = a->memory_limit,
        .allocations = a->allocations,
        .cache_hits = a->hits,
        .cache_misses = a->misses,
        .resident_bytes = a->resident,
        .wired_limit = a->wired_limit,
        .residency_set = a->residency != NULL,
        .heaps = a->heap_count,
        .heap_bytes = a->heap_bytes,
    };
    pthread_mutex_unlock(&a->lock);
}

static void cm__memory_reset_peak(cm_device *device) {
    cm__metal_alloc *a = cm__alloc_of(device);
    pthread_mutex_lock(&a->lock);
    a->peak = a->active;
    pthread_mutex_unlock(&a->lock);
}

static uint64_t cm__memory_set_limit(cm_device *device, bool cache, uint64_t bytes) {
    cm__metal_alloc *a = cm__alloc_of(device);
    cm__metal_pooled *evicted = NULL;
    void *pool = cm__objc_pool_push();
    pthread_mutex_lock(&a->lock);
    uint64_t *limit = cache ? &a->cache_limit : &a->memory_limit;
    const uint64_t old = *limit;
    *limit = bytes;
    if (cache)
        cm__evict_to(a, bytes, &evicted);
    else if (bytes != 0)
        cm__evict_to(a, bytes > a->active ? bytes - a->active : 0, &evicted);
    pthread_mutex_unlock(&a->lock);
    cm__release_evicted(a, evicted);
    cm__objc_pool_pop(pool);
    return old;
}

static bool cm__memory_set_wired_limit(cm_device *device, uint64_t bytes, uint64_t *old) {
    cm__metal_alloc *a = cm__alloc_of(device);
    if (a->residency == NULL)
        return false;
    void *pool = cm__objc_pool_push();
    pthread_mutex_lock(&a->lock);
    *old = a->wired_limit;
    a->wired_limit = bytes;
    if (a->resident > bytes) {                             /* take allocations out until it fits */
        cm__id all = cm__msg_allAllocations(a->residency); /* autoreleased */
        const cm__uint n = all != NULL ? cm__msg_count(all) : 0;
        for (cm__uint i = 0; i < n && a->resident > bytes; ++i) {
            cm__id obj = cm__msg_objectAtIndex(all, i); /* an MTLBuffer or one of our heaps */
            const cm__metal_heap *h = a->heaps;
            while (h != NULL && h->heap != obj)
                h = h->next;
            (void)cm__resident_remove(a, obj, h != NULL ? CM__HEAP_SIZE : cm__msg_length(obj));
        }
        cm__msg_commit(a->residency);
    }
    pthread_mutex_unlock(&a->lock);
    cm__objc_pool_pop(pool);
    return true;
}

static void cm__memory_clear(cm_device *device) {
    cm__metal_alloc *a = cm__alloc_of(device);
    cm__metal_pooled *evicted = NULL;
    void *pool = cm__objc_pool_push();
    pthread_mutex_lock(&a->lock);
    cm__evict_to(a, 0, &evicted);
    pthread_mutex_unlock(&a->lock);
    cm__release_evicted(a, evicted);
    cm__objc_pool_pop(pool);
}

const cm__memory_backend cm__metal_memory_backend = {
    .info = cm__memory_info,
    .reset_peak = cm__memory_reset_peak,
    .set_limit = cm__memory_set_limit,
    .clear = cm__memory_clear,
    .set_wired_limit = cm__memory_set_wired_limit,
};
