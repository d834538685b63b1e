/* SPDX-License-Identifier: MIT */
/* softmetal heaps (MTLHeap, MTLHeapDescriptor) and residency sets
 * (MTLResidencySet, MTLResidencySetDescriptor). On the CPU every allocation
 * is always resident, so residency sets keep their state (membership,
 * commits, sizes, residency requests) without changing what runs. Heaps
 * sub-allocate buffers from one block of memory counted against the device. */
#include "sm_internal.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#define MAX_HEAP_SIZE ((NSUInteger)1 << 34)
enum { HEAP_AUTOMATIC = 0, HEAP_PLACEMENT = 1, HEAP_SPARSE = 2 };
enum { PURGE_KEEP = 1, PURGE_NONVOLATILE = 2, PURGE_VOLATILE = 3, PURGE_EMPTY = 4 };

typedef struct {
  NSUInteger size, align;
} MTLSizeAndAlign;

static id send_id(id o, const char *sel) {
  return ((id(*)(id, SEL))(void (*)(void))sm__lookup(o, sel))(o, sel_registerName(sel));
}
static NSUInteger send_u(id o, const char *sel) {
  return ((NSUInteger(*)(id, SEL))(void (*)(void))sm__lookup(o, sel))(o, sel_registerName(sel));
}

/* ------------------------------------------------------------- heap descriptor */
typedef struct {
  sm_obj hdr;
  NSUInteger size, storage, cache, hazard, type;
} sm_heap_desc;
static sm_class heap_desc_class = {"MTLHeapDescriptor", sizeof(sm_heap_desc), NULL, Nil, 0};

static id hdesc_init(id self, SEL cmd) {
  (void)cmd;
  ((sm_heap_desc *)self)->storage = ST_PRIVATE; /* Metal's default for heaps */
  return self;
}
#define HDESC_FIELD(get, set, field)                                                               \
  static NSUInteger get(id self, SEL cmd) {                                                        \
    (void)cmd;                                                                                     \
    return ((sm_heap_desc *)self)->field;                                                          \
  }                                                                                                \
  static void set(id self, SEL cmd, NSUInteger v) {                                                \
    (void)cmd;                                                                                     \
    ((sm_heap_desc *)self)->field = v;                                                             \
  }
HDESC_FIELD(hdesc_size, hdesc_set_size, size)
HDESC_FIELD(hdesc_storage, hdesc_set_storage, storage)
HDESC_FIELD(hdesc_cache, hdesc_set_cache, cache)
HDESC_FIELD(hdesc_hazard, hdesc_set_hazard, hazard)
HDESC_FIELD(hdesc_type, hdesc_set_type, type)
static NSUInteger hdesc_options(id self, SEL cmd) {
  (void)cmd;
  sm_heap_desc *d = (sm_heap_desc *)self;
  return sm__options(d->cache, d->storage, d->hazard);
}
static void hdesc_set_options(id self, SEL cmd, NSUInteger o) {
  (void)cmd;
  sm_heap_desc *d = (sm_heap_desc *)self;
  d->cache = sm__options_cache(o);
  d->storage = sm__options_storage(o);
  d->hazard = sm__options_hazard(o);
}
static id hdesc_copy(id self, SEL cmd) {
  (void)cmd;
  sm_heap_desc *c = sm__new(&heap_desc_class);
  if (!c) return nil;
  sm_heap_desc *d = (sm_heap_desc *)self;
  c->size = d->size;
  c->storage = d->storage;
  c->cache = d->cache;
  c->hazard = d->hazard;
  c->type = d->type;
  return (id)c;
}

/* ------------------------------------------------------------- heaps */
typedef struct {
  NSUInteger off, size;
  bool aliasable; /* freed for reuse while its buffer lives (makeAliasable) */
} heap_range;

typedef struct {
  sm_obj hdr;
  id device; /* retained */
  unsigned char *mem;
  NSUInteger size, storage, cache, hazard, type;
  pthread_mutex_t mu; /* guards what follows */
  heap_range *ranges; /* sorted by offset; automatic heaps only */
  size_t n, cap;
  NSUInteger used; /* bytes of live, non-aliasable allocations */
  NSUInteger purgeable;
  id *live; /* its buffers (not retained: each leaves at its dealloc) */
  size_t nlive, live_cap;
} sm_heap;

static void heap_destroy(sm_obj *o) {
  sm_heap *h = (sm_heap *)o;
  if (h->mem) {
    free(h->mem);
    sm__device_account(h->device, -(long)h->size);
    atomic_fetch_sub(&sm__buffer_bytes, (long)h->size);
  }
  free(h->ranges);
  free(h->live);
  pthread_mutex_destroy(&h->mu);
  sm__release(h->device);
}
static sm_class heap_class = {"SMHeap", sizeof(sm_heap), heap_destroy, Nil, 0};

static MTLSizeAndAlign size_and_align(NSUInteger length) {
  MTLSizeAndAlign r = {0, SM_PAGE};
  if (length <= (NSUInteger)-1 - SM_PAGE) r.size = (length + SM_PAGE - 1) / SM_PAGE * SM_PAGE;
  return r;
}

/* -[MTLDevice heapBufferSizeAndAlignWithLength:options:]: softmetal places
 * heap buffers on its 16 KB pages, as it does every buffer. */
static MTLSizeAndAlign device_heap_size_align(id self, SEL cmd, NSUInteger length,
                                              NSUInteger options) {
  (void)self;
  (void)options;
  (void)cmd;
  return size_and_align(length);
}

static id device_new_heap(id self, SEL cmd, id desc) {
  const char *sel = sel_getName(cmd);
  if (!sm__is(desc, &heap_desc_class))
    sm__fatal("-[SMDevice %s]: descriptor is %s, not an MTLHeapDescriptor", sel,
              desc ? object_getClassName(desc) : "nil");
  sm_heap_desc *d = (sm_heap_desc *)desc;
  if (d->size == 0 || d->size > MAX_HEAP_SIZE) {
    sm__refuse(sel, "descriptor.size = %lu must be in 1..%lu", d->size, MAX_HEAP_SIZE);
    return nil;
  }
  if (d->storage != ST_SHARED && d->storage != ST_PRIVATE) {
    sm__refuse(sel, "descriptor.storageMode = %lu: heaps take Shared (0) or Private (2)",
               d->storage);
    return nil;
  }
  /* Apple's MTLHeapDescriptor.storageMode: shared heaps on Apple silicon
   * only; a Mac without it (the amd-discrete persona) makes private ones. */
  if (d->storage == ST_SHARED && !sm__persona_supports_family(1001 /* Apple1 */)) {
    sm__refuse(sel, "descriptor.storageMode = Shared (0): heaps of a Mac GPU without Apple silicon "
                    "take Private (2) only");
    return nil;
  }
  if (d->cache > 1 || d->hazard > HAZARD_TRACKED) {
    sm__refuse(sel, "descriptor.cpuCacheMode = %lu or hazardTrackingMode = %lu is not valid",
               d->cache, d->hazard);
    return nil;
  }
  if (d->type == HEAP_SPARSE || d->type > HEAP_SPARSE) {
    sm__refuse(sel,
               "descriptor.type = %lu: softmetal has Automatic (0) and Placement (1) heaps, "
               "not sparse ones (sparse heaps hold sparse textures, which softmetal lacks)",
               d->type);
    return nil;
  }
  sm_heap *h = sm__new(&heap_class);
  if (!h) return nil;
  pthread_mutex_init(&h->mu, NULL);
  h->device = sm__retain(self);
  h->size = size_and_align(d->size).size;
  h->storage = d->storage;
  h->cache = d->cache;
  /* A heap's resources are untracked unless it asks for tracking. */
  h->hazard = d->hazard == HAZARD_TRACKED ? HAZARD_TRACKED : HAZARD_UNTRACKED;
  h->type = d->type;
  h->purgeable = PURGE_NONVOLATILE;
  h->mem = aligned_alloc(SM_PAGE, h->size);
  if (!h->mem) {
    sm__release((id)h);
    sm__refuse(sel, "size = %lu: out of memory", d->size);
    return nil;
  }
  memset(h->mem, 0, h->size);
  sm__device_account(self, (long)h->size);
  atomic_fetch_add(&sm__buffer_bytes, (long)h->size);
  return (id)h;
}

/* Offset of a free, aligned block of size bytes, or -1 (under h->mu). */
static long heap_fit(sm_heap *h, NSUInteger size, NSUInteger align) {
  NSUInteger at = 0; /* aliasable ranges are free */
  for (size_t i = 0; i <= h->n; i++) {
    if (i < h->n && h->ranges[i].aliasable) continue;
    NSUInteger start = (at + align - 1) / align * align;
    NSUInteger end = i < h->n ? h->ranges[i].off : h->size;
    if (start <= end && end - start >= size) return (long)start;
    if (i < h->n && h->ranges[i].off + h->ranges[i].size > at)
      at = h->ranges[i].off + h->ranges[i].size;
  }
  return -1;
}

static void heap_take(sm_heap *h, NSUInteger off, NSUInteger size) {
  if (h->n == h->cap) {
    if (!sm__grow(&h->ranges, &h->cap, sizeof *h->ranges, 8))
      sm__fatal("-[SMHeap newBufferWithLength:options:]: out of memory");
  }
  size_t i = 0;
  while (i < h->n && h->ranges[i].off < off) i++;
  memmove(h->ranges + i + 1, h->ranges + i, (h->n - i) * sizeof *h->ranges);
  h->ranges[i] = (heap_range){off, size, false};
  h->n++;
  h->used += size;
}

/* A heap buffer went away (or became aliasable): its bytes are free again. */
void sm__heap_give_back(id heap, NSUInteger off, NSUInteger size, bool mark_aliasable) {
  sm_heap *h = (sm_heap *)heap;
  pthread_mutex_lock(&h->mu);
  if (h->type == HEAP_AUTOMATIC) {
    for (size_t i = 0; i < h->n; i++) {
      if (h->ranges[i].off != off || h->ranges[i].size != size) continue;
      if (!h->ranges[i].aliasable) h->used -= size;
      if (mark_aliasable) {
        h->ranges[i].aliasable = true;
      } else {
        memmove(h->ranges + i, h->ranges + i + 1, (h->n - i - 1) * sizeof *h->ranges);
        h->n--;
      }
      break;
    }
  } else if (!mark_aliasable) {
    h->used -= size;
  }
  pthread_mutex_unlock(&h->mu);
}

/* A buffer of the heap is going (its dealloc, sm_host.c). */
void sm__heap_buffer_gone(id heap, id buffer) {
  sm_heap *h = (sm_heap *)heap;
  pthread_mutex_lock(&h->mu);
  for (size_t i = 0; i < h->nlive; i++)
    if (h->live[i] == buffer) {
      h->live[i] = h->live[--h->nlive];
      break;
    }
  pthread_mutex_unlock(&h->mu);
}

/* useHeap: (sm_host.c): the heap's buffers may be read by the encoder's
 * later dispatches (Apple: "accessed as readonly ... through an argument
 * buffer"), so its untracked ones become reads in the hazard checks. */
void sm__heap_use(id heap, id encoder) {
  sm_heap *h = (sm_heap *)heap;
  pthread_mutex_lock(&h->mu);
  for (size_t i = 0; i < h->nlive; i++) sm__encoder_use(encoder, h->live[i], false);
  pthread_mutex_unlock(&h->mu);
}

static id heap_buffer(id self, SEL cmd, NSUInteger length, NSUInteger options, bool placed,
                      NSUInteger offset) {
  sm_heap *h = (sm_heap *)self;
  const char *sel = sel_getName(cmd);
  NSUInteger cache = sm__options_cache(options), storage = sm__options_storage(options);
  if (storage != h->storage || cache != h->cache) {
    sm__refuse(sel,
               "options = 0x%lx: storage mode %lu and CPU cache mode %lu must be the heap's "
               "(%lu, %lu)",
               options, storage, cache, h->storage, h->cache);
    return nil;
  }
  if (placed != (h->type == HEAP_PLACEMENT)) {
    sm__refuse(sel, placed
                        ? "the heap is not a placement heap (MTLHeapTypePlacement): use "
                          "newBufferWithLength:options:"
                        : "the heap is a placement heap: use newBufferWithLength:options:offset:");
    return nil;
  }
  if (length == 0) {
    sm__refuse(sel, "length = 0");
    return nil;
  }
  MTLSizeAndAlign sa = size_and_align(length);
  long off;
  pthread_mutex_lock(&h->mu);
  if (placed) {
    off = offset % sa.align == 0 && offset <= h->size && h->size - offset >= sa.size ? (long)offset
                                                                                     : -2;
    if (off >= 0) h->used += sa.size;
  } else {
    off = heap_fit(h, sa.size, sa.align);
    if (off >= 0) heap_take(h, (NSUInteger)off, sa.size);
  }
  pthread_mutex_unlock(&h->mu);
  if (off == -2) {
    sm__refuse(sel, "offset = %lu must be a multiple of %lu with %lu bytes within the heap's %lu",
               offset, sa.align, sa.size, h->size);
    return nil;
  }
  if (off < 0) return nil; /* full: Metal returns nil */
  NSUInteger buf_options = sm__options(cache, storage, h->hazard);
  id b = sm__buffer_new_placed(h->device, sel, h->mem + off, length, buf_options);
  if (!b) {
    sm__heap_give_back(self, (NSUInteger)off, sa.size, false);
    return nil;
  }
  sm__host_set_heap_slot(b, sm__retain(self), (NSUInteger)off, sa.size);
  pthread_mutex_lock(&h->mu);
  if (h->nlive == h->live_cap) {
    if (!sm__grow(&h->live, &h->live_cap, sizeof *h->live, 8))
      sm__fatal("-[SMHeap %s]: out of memory", sel);
  }
  h->live[h->nlive++] = b;
  pthread_mutex_unlock(&h->mu);
  return b;
}
static id heap_new_buffer(id self, SEL cmd, NSUInteger length, NSUInteger options) {
  return heap_buffer(self, cmd, length, options, false, 0);
}
static id heap_new_buffer_at(id self, SEL cmd, NSUInteger length, NSUInteger options,
                             NSUInteger offset) {
  return heap_buffer(self, cmd, length, options, true, offset);
}

static NSUInteger heap_max_available(id self, SEL cmd, NSUInteger align) {
  sm_heap *h = (sm_heap *)self;
  if (align == 0 || (align & (align - 1)))
    sm__fatal("-[SMHeap %s]: alignment = %lu must be a power of two", sel_getName(cmd), align);
  if (align < SM_PAGE) align = SM_PAGE;
  NSUInteger best = 0;
  pthread_mutex_lock(&h->mu);
  if (h->type == HEAP_PLACEMENT) {
    best = h->size;
  } else {
    NSUInteger at = 0;
    for (size_t i = 0; i <= h->n; i++) {
      if (i < h->n && h->ranges[i].aliasable) continue;
      NSUInteger start = (at + align - 1) / align * align;
      NSUInteger end = i < h->n ? h->ranges[i].off : h->size;
      if (end > start && end - start > best) best = end - start;
      if (i < h->n && h->ranges[i].off + h->ranges[i].size > at)
        at = h->ranges[i].off + h->ranges[i].size;
    }
  }
  pthread_mutex_unlock(&h->mu);
  return best / SM_PAGE * SM_PAGE;
}
static NSUInteger heap_size(id self, SEL cmd) {
  (void)cmd;
  return ((sm_heap *)self)->size;
}
static NSUInteger heap_used(id self, SEL cmd) {
  (void)cmd;
  sm_heap *h = (sm_heap *)self;
  pthread_mutex_lock(&h->mu);
  NSUInteger u = h->used;
  pthread_mutex_unlock(&h->mu);
  return u;
}
static NSUInteger heap_storage(id self, SEL cmd) {
  (void)cmd;
  return ((sm_heap *)self)->storage;
}
static NSUInteger heap_cache(id self, SEL cmd) {
  (void)cmd;
  return ((sm_heap *)self)->cache;
}
static NSUInteger heap_hazard(id self, SEL cmd) {
  (void)cmd;
  return ((sm_heap *)self)->hazard;
}
static NSUInteger heap_type(id self, SEL cmd) {
  (void)cmd;
  return ((sm_heap *)self)->type;
}
static NSUInteger heap_options(id self, SEL cmd) {
  (void)cmd;
  sm_heap *h = (sm_heap *)self;
  return sm__options(h->cache, h->storage, h->hazard);
}
static id heap_device(id self, SEL cmd) {
  (void)cmd;
  return ((sm_heap *)self)->device;
}

/* Purgeable state: no memory is given back on the CPU, but Empty discards
 * the contents as Metal may: they become 0xFF bytes (NaN as floats). */
static NSUInteger purge_set(NSUInteger *state, unsigned char *mem, NSUInteger len, SEL cmd,
                            NSUInteger v) {
  if (v < PURGE_KEEP || v > PURGE_EMPTY)
    sm__fatal("%s: state = %lu is not an MTLPurgeableState (KeepCurrent 1, NonVolatile 2, "
              "Volatile 3, Empty 4)",
              sel_getName(cmd), v);
  NSUInteger old = *state;
  if (v == PURGE_KEEP) return old;
  if (v == PURGE_EMPTY && mem) memset(mem, 0xFF, len);
  *state = v == PURGE_EMPTY ? PURGE_VOLATILE : v; /* emptied memory stays volatile */
  return old == PURGE_EMPTY ? PURGE_VOLATILE : old;
}
static NSUInteger heap_set_purgeable(id self, SEL cmd, NSUInteger v) {
  sm_heap *h = (sm_heap *)self;
  pthread_mutex_lock(&h->mu);
  NSUInteger old = purge_set(&h->purgeable, h->mem, h->size, cmd, v);
  pthread_mutex_unlock(&h->mu);
  return old;
}

/* Buffers: heap, heapOffset, allocatedSize, makeAliasable, isAliasable,
 * setPurgeableState:. */
static id buffer_heap(id self, SEL cmd) {
  (void)cmd;
  id heap;
  NSUInteger off, size;
  return sm__host_heap_slot(self, &heap, &off, &size) ? heap : nil;
}
static NSUInteger buffer_heap_offset(id self, SEL cmd) {
  (void)cmd;
  id heap;
  NSUInteger off = 0, size;
  return sm__host_heap_slot(self, &heap, &off, &size) ? off : 0;
}
static NSUInteger buffer_allocated(id self, SEL cmd) {
  (void)cmd;
  id heap;
  NSUInteger off, size;
  return sm__host_heap_slot(self, &heap, &off, &size) ? size : sm__buffer_reserved(self);
}
static void buffer_make_aliasable(id self, SEL cmd) {
  id heap;
  NSUInteger off, size;
  if (!sm__host_heap_slot(self, &heap, &off, &size))
    sm__fatal("-[SMBuffer %s]: only buffers from a heap can be made aliasable", sel_getName(cmd));
  if (((sm_heap *)heap)->type != HEAP_AUTOMATIC)
    sm__fatal("-[SMBuffer %s]: buffers of a placement heap cannot be made aliasable",
              sel_getName(cmd));
  if (sm__host_aliasable(self)) return;
  sm__host_set_aliasable(self);
  sm__heap_give_back(heap, off, size, true);
}
static BOOL buffer_is_aliasable(id self, SEL cmd) {
  (void)cmd;
  return sm__host_aliasable(self);
}
static pthread_mutex_t g_purge_mu = PTHREAD_MUTEX_INITIALIZER;
static NSUInteger buffer_set_purgeable(id self, SEL cmd, NSUInteger v) {
  id heap;
  NSUInteger off, size;
  if (sm__host_heap_slot(self, &heap, &off, &size)) /* a heap's resources follow the heap */
    return heap_set_purgeable(heap, cmd, PURGE_KEEP);
  NSUInteger len = send_u(self, "length");
  unsigned char *mem = ((void *(*)(id, SEL))(void (*)(void))sm__lookup(self, "contents"))(
      self, sel_registerName("contents"));
  pthread_mutex_lock(&g_purge_mu);
  NSUInteger old = purge_set(sm__host_purgeable(self), mem, len, cmd, v);
  pthread_mutex_unlock(&g_purge_mu);
  return old;
}

/* ------------------------------------------------------------- residency sets */
typedef struct {
  sm_obj hdr;
  NSUInteger capacity;
} sm_rs_desc;
static sm_class rs_desc_class = {"MTLResidencySetDescriptor", sizeof(sm_rs_desc), NULL, Nil, 0};
static NSUInteger rsd_capacity(id self, SEL cmd) {
  (void)cmd;
  return ((sm_rs_desc *)self)->capacity;
}
static void rsd_set_capacity(id self, SEL cmd, NSUInteger v) {
  (void)cmd;
  ((sm_rs_desc *)self)->capacity = v;
}

typedef struct {
  sm_obj hdr;
  id device; /* retained */
  pthread_mutex_t mu;
  id *all; /* retained: committed and uncommitted members */
  size_t n, cap;
  NSUInteger committed_size; /* allocatedSize at the last commit */
  NSUInteger commits;
  long residency; /* requestResidency minus endResidency */
} sm_rset;

static void rset_destroy(sm_obj *o) {
  sm_rset *r = (sm_rset *)o;
  for (size_t i = 0; i < r->n; i++) sm__release(r->all[i]);
  free(r->all);
  pthread_mutex_destroy(&r->mu);
  sm__release(r->device);
}
static sm_class rset_class = {"SMResidencySet", sizeof(sm_rset), rset_destroy, Nil, 0};

bool sm__is_residency_set(id o) { return sm__is(o, &rset_class); }
id sm__residency_set_device(id o) { return ((sm_rset *)o)->device; }

static id device_new_rset(id self, SEL cmd, id desc, id *error) {
  (void)error;
  if (!sm__is(desc, &rs_desc_class))
    sm__fatal("-[SMDevice %s]: descriptor is %s, not an MTLResidencySetDescriptor",
              sel_getName(cmd), desc ? object_getClassName(desc) : "nil");
  sm_rset *r = sm__new(&rset_class);
  if (!r) return nil;
  pthread_mutex_init(&r->mu, NULL);
  r->device = sm__retain(self);
  if (((sm_obj *)desc)->label) r->hdr.label = sm__string_copy(((sm_obj *)desc)->label);
  return (id)r;
}

/* An allocation of this set's device: a buffer or a heap. */
static void rset_check(sm_rset *r, SEL cmd, id a, NSUInteger i) {
  id dev = nil;
  if (sm__is_named(a, "SMBuffer"))
    dev = send_id(a, "device");
  else if (sm__is(a, &heap_class))
    dev = ((sm_heap *)a)->device;
  else
    sm__fatal("-[SMResidencySet %s]: allocation %lu is %s, not an MTLBuffer or MTLHeap",
              sel_getName(cmd), i, a ? object_getClassName(a) : "nil");
  if (dev != r->device)
    sm__fatal("-[SMResidencySet %s]: allocation %lu belongs to another device than the "
              "residency set's",
              sel_getName(cmd), i);
}
static size_t rset_find(sm_rset *r, id a) {
  for (size_t i = 0; i < r->n; i++)
    if (r->all[i] == a) return i;
  return (size_t)-1;
}
static void rset_add_many(id self, SEL cmd, const id *allocs, NSUInteger count) {
  sm_rset *r = (sm_rset *)self;
  if (count && !allocs) sm__fatal("-[SMResidencySet %s]: allocations = NULL", sel_getName(cmd));
  for (NSUInteger i = 0; i < count; i++) rset_check(r, cmd, allocs[i], i);
  pthread_mutex_lock(&r->mu);
  for (NSUInteger i = 0; i < count; i++) {
    if (rset_find(r, allocs[i]) != (size_t)-1) continue;
    if (r->n == r->cap) {
      if (!sm__grow(&r->all, &r->cap, sizeof *r->all, 16))
        sm__fatal("-[SMResidencySet %s]: out of memory", sel_getName(cmd));
    }
    r->all[r->n++] = sm__retain(allocs[i]);
  }
  pthread_mutex_unlock(&r->mu);
}
static void rset_add(id self, SEL cmd, id a) { rset_add_many(self, cmd, &a, 1); }
static void rset_remove_many(id self, SEL cmd, const id *allocs, NSUInteger count) {
  sm_rset *r = (sm_rset *)self;
  if (count && !allocs) sm__fatal("-[SMResidencySet %s]: allocations = NULL", sel_getName(cmd));
  pthread_mutex_lock(&r->mu);
  for (NSUInteger i = 0; i < count; i++) {
    size_t k = rset_find(r, allocs[i]);
    if (k == (size_t)-1) continue;
    id gone = r->all[k];
    memmove(r->all + k, r->all + k + 1, (r->n - k - 1) * sizeof(id));
    r->n--;
    sm__release(gone);
  }
  pthread_mutex_unlock(&r->mu);
}
static void rset_remove(id self, SEL cmd, id a) { rset_remove_many(self, cmd, &a, 1); }
static void rset_remove_all(id self, SEL cmd) {
  (void)cmd;
  sm_rset *r = (sm_rset *)self;
  pthread_mutex_lock(&r->mu);
  while (r->n) sm__release(r->all[--r->n]);
  pthread_mutex_unlock(&r->mu);
}
static BOOL rset_contains(id self, SEL cmd, id a) {
  (void)cmd;
  sm_rset *r = (sm_rset *)self;
  pthread_mutex_lock(&r->mu);
  BOOL yes = rset_find(r, a) != (size_t)-1;
  pthread_mutex_unlock(&r->mu);
  return yes;
}
static NSUInteger rset_count(id self, SEL cmd) {
  (void)cmd;
  sm_rset *r = (sm_rset *)self;
  pthread_mutex_lock(&r->mu);
  NSUInteger n = r->n;
  pthread_mutex_unlock(&r->mu);
  return n;
}
static id rset_all(id self, SEL cmd) {
  (void)cmd;
  sm_rset *r = (sm_rset *)self;
  pthread_mutex_lock(&r->mu);
  id a = sm__array(r->all, r->n);
  pthread_mutex_unlock(&r->mu);
  return sm__autorelease(a);
}
static void rset_commit(id self, SEL cmd) {
  (void)cmd;
  sm_rset *r = (sm_rset *)self;
  pthread_mutex_lock(&r->mu);
  NSUInteger total = 0;
  for (size_t i = 0; i < r->n; i++)
    total += sm__is(r->all[i], &heap_class) ? ((sm_heap *)r->all[i])->size
                                            : send_u(r->all[i], "allocatedSize");
  r->committed_size = total;
  r->commits++;
  pthread_mutex_unlock(&r->mu);
}
static NSUInteger rset_allocated(id self, SEL cmd) {
  (void)cmd;
  sm_rset *r = (sm_rset *)self;
  pthread_mutex_lock(&r->mu);
  NSUInteger n = r->committed_size;
  pthread_mutex_unlock(&r->mu);
  return n;
}
static void rset_request(id self, SEL cmd) {
  (void)cmd;
  sm_rset *r = (sm_rset *)self;
  pthread_mutex_lock(&r->mu);
  r->residency++;
  pthread_mutex_unlock(&r->mu);
}
static void rset_end(id self, SEL cmd) {
  (void)cmd;
  sm_rset *r = (sm_rset *)self;
  pthread_mutex_lock(&r->mu);
  if (r->residency > 0) r->residency--;
  pthread_mutex_unlock(&r->mu);
}
static id rset_device(id self, SEL cmd) {
  (void)cmd;
  return ((sm_rset *)self)->device;
}

/* ------------------------------------------------------------- registration */
const sm_method_def sm__device_heap_methods[] = {
    SM_METHOD("newHeapWithDescriptor:", device_new_heap, "@@:@"),
    SM_METHOD("heapBufferSizeAndAlignWithLength:options:", device_heap_size_align, "{?=QQ}@:QQ"),
    SM_METHOD("newResidencySetWithDescriptor:error:", device_new_rset, "@@:@^@"),
    {NULL, NULL, NULL},
};

const sm_method_def sm__buffer_heap_methods[] = {
    SM_METHOD("heap", buffer_heap, "@@:"),
    SM_METHOD("heapOffset", buffer_heap_offset, "Q@:"),
    SM_METHOD("allocatedSize", buffer_allocated, "Q@:"),
    SM_METHOD("makeAliasable", buffer_make_aliasable, "v@:"),
    SM_METHOD("isAliasable", buffer_is_aliasable, "C@:"),
    SM_METHOD("setPurgeableState:", buffer_set_purgeable, "Q@:Q"),
    {NULL, NULL, NULL},
};

static const sm_method_def heap_desc_methods[] = {
    SM_METHOD("init", hdesc_init, "@@:"),
    SM_METHOD("size", hdesc_size, "Q@:"),
    SM_METHOD("setSize:", hdesc_set_size, "v@:Q"),
    SM_METHOD("storageMode", hdesc_storage, "Q@:"),
    SM_METHOD("setStorageMode:", hdesc_set_storage, "v@:Q"),
    SM_METHOD("cpuCacheMode", hdesc_cache, "Q@:"),
    SM_METHOD("setCpuCacheMode:", hdesc_set_cache, "v@:Q"),
    SM_METHOD("hazardTrackingMode", hdesc_hazard, "Q@:"),
    SM_METHOD("setHazardTrackingMode:", hdesc_set_hazard, "v@:Q"),
    SM_METHOD("type", hdesc_type, "q@:"),
    SM_METHOD("setType:", hdesc_set_type, "v@:q"),
    SM_METHOD("resourceOptions", hdesc_options, "Q@:"),
    SM_METHOD("setResourceOptions:", hdesc_set_options, "v@:Q"),
    SM_METHOD("copy", hdesc_copy, "@@:"),
    {NULL, NULL, NULL},
};

static const sm_method_def heap_methods[] = {
    SM_METHOD("newBufferWithLength:options:", heap_new_buffer, "@@:QQ"),
    SM_METHOD("newBufferWithLength:options:offset:", heap_new_buffer_at, "@@:QQQ"),
    SM_METHOD("maxAvailableSizeWithAlignment:", heap_max_available, "Q@:Q"),
    SM_METHOD("size", heap_size, "Q@:"),
    SM_METHOD("usedSize", heap_used, "Q@:"),
    SM_METHOD("currentAllocatedSize", heap_size, "Q@:"),
    SM_METHOD("allocatedSize", heap_size, "Q@:"),
    SM_METHOD("storageMode", heap_storage, "Q@:"),
    SM_METHOD("cpuCacheMode", heap_cache, "Q@:"),
    SM_METHOD("hazardTrackingMode", heap_hazard, "Q@:"),
    SM_METHOD("resourceOptions", heap_options, "Q@:"),
    SM_METHOD("type", heap_type, "q@:"),
    SM_METHOD("setPurgeableState:", heap_set_purgeable, "Q@:Q"),
    SM_METHOD("device", heap_device, "@@:"),
    {NULL, NULL, NULL},
};

static const sm_method_def rs_desc_methods[] = {
    SM_METHOD("initialCapacity", rsd_capacity, "Q@:"),
    SM_METHOD("setInitialCapacity:", rsd_set_capacity, "v@:Q"),
    {NULL, NULL, NULL},
};

static const sm_method_def rset_methods[] = {
    SM_METHOD("addAllocation:", rset_add, "v@:@"),
    SM_METHOD("addAllocations:count:", rset_add_many, "v@:^@Q"),
    SM_METHOD("removeAllocation:", rset_remove, "v@:@"),
    SM_METHOD("removeAllocations:count:", rset_remove_many, "v@:^@Q"),
    SM_METHOD("removeAllAllocations", rset_remove_all, "v@:"),
    SM_METHOD("containsAllocation:", rset_contains, "C@:@"),
    SM_METHOD("allocationCount", rset_count, "Q@:"),
    SM_METHOD("allAllocations", rset_all, "@@:"),
    SM_METHOD("commit", rset_commit, "v@:"),
    SM_METHOD("allocatedSize", rset_allocated, "Q@:"),
    SM_METHOD("requestResidency", rset_request, "v@:"),
    SM_METHOD("endResidency", rset_end, "v@:"),
    SM_METHOD("device", rset_device, "@@:"),
    {NULL, NULL, NULL},
};

void sm__register_heap(void) {
  SM_CLASS_DEFINE(&heap_desc_class, Nil, heap_desc_methods);
  SM_CLASS_DEFINE(&heap_class, Nil, heap_methods);
  SM_CLASS_DEFINE(&rs_desc_class, Nil, rs_desc_methods);
  SM_CLASS_DEFINE(&rset_class, Nil, rset_methods);
}
