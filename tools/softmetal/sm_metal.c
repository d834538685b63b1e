/* SPDX-License-Identifier: MIT */
/* softmetal Metal objects: device, buffers, shared events, command queues,
 * command buffers, blit and compute encoders. */
#include "sm_metal.h"

#include <errno.h>
#include <objc/thr.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

enum { MAX_SET_BYTES = 4096 };
/* The limits of the persona's devices (sm_persona.c). */
#define MAX_TG_MEMORY (sm__persona()->max_tg_memory)
#define MAX_THREADS_PER_GROUP (sm__persona()->max_threads)
#define MAX_BUFFER_LENGTH (sm__persona()->max_buffer)
#define WORKING_SET (sm__persona()->working_set)

enum { DISPATCH_SERIAL = 0, DISPATCH_CONCURRENT = 1 };
enum { BARRIER_SCOPE_BUFFERS = 1 };
enum {
  CB_NOT_ENQUEUED = 0,
  CB_ENQUEUED = 1,
  CB_COMMITTED = 2,
  CB_SCHEDULED = 3,
  CB_COMPLETED = 4,
  CB_ERROR = 5
};
#define CB_ERROR_DOMAIN "MTLCommandBufferErrorDomain"
enum { CB_ERROR_INTERNAL = 1, CB_ERROR_INVALID_RESOURCE = 9 };

static const char *status_name(NSUInteger s) {
  static const char *names[] = {"NotEnqueued", "Enqueued",  "Committed",
                                "Scheduled",   "Completed", "Error"};
  return s <= 5 ? names[s] : "?";
}

/* ------------------------------------------------------------- device */

enum { MAX_DEVICES = 8 };
static void device_destroy(sm_obj *o);
static sm_class device_class = {"SMDevice", sizeof(sm_device), device_destroy, Nil, 0};
static pthread_mutex_t g_device_lock = PTHREAD_MUTEX_INITIALIZER;
static sm_device *g_devices[MAX_DEVICES];

static void device_destroy(sm_obj *o) {
  sm_device *d = (sm_device *)o;
  pthread_mutex_lock(&g_device_lock);
  if (g_devices[d->index] == d) g_devices[d->index] = NULL;
  bool last = true;
  for (unsigned i = 0; i < MAX_DEVICES; i++) last &= g_devices[i] == NULL;
  pthread_mutex_unlock(&g_device_lock);
  if (last) sm__exec_shutdown(); /* nothing runs kernels once no device is alive */
  sm__release(d->name);
}

/* An unsigned environment variable in [lo, hi], or dflt when unset. */
static unsigned env_index(const char *name, unsigned dflt, unsigned lo, unsigned hi) {
  const char *v = getenv(name);
  if (!v || !*v) return dflt;
  char *end;
  errno = 0;
  unsigned long n = strtoul(v, &end, 10);
  if (errno || *end || n < lo || n > hi)
    sm__fatal("%s = '%s' must be an integer in %u..%u", name, v, lo, hi);
  return (unsigned)n;
}
/* A persona of one device (paravirtual) ignores SOFTMETAL_DEVICE_COUNT and
 * SOFTMETAL_DEFAULT_DEVICE: such a Mac has one GPU. */
static unsigned device_count(void) {
  if (sm__persona()->one_device) return 1;
  return env_index("SOFTMETAL_DEVICE_COUNT", 1, 1, MAX_DEVICES);
}

/* Retains device k if it is alive, else creates it. +1. Each device lives
 * while referenced; a new one (same name and registryID) after the last release. */
static id device_get(unsigned k) {
  pthread_mutex_lock(&g_device_lock);
  sm_device *d = g_devices[k];
  if (d) {
    long rc = atomic_load(&d->hdr.rc);
    while (rc > 0 && !atomic_compare_exchange_weak(&d->hdr.rc, &rc, rc + 1)) {
    }
    if (rc <= 0) d = NULL; /* dying on another thread */
  }
  if (!d) {
    d = sm__new(&device_class);
    if (d) {
      char name[96];
      const char *persona_name = sm__persona()->device_name;
      if (persona_name && k == 0)
        snprintf(name, sizeof name, "%s", persona_name);
      else if (persona_name)
        snprintf(name, sizeof name, "%s (%u)", persona_name, k);
      else if (k == 0)
        snprintf(name, sizeof name, "softmetal (software Metal on the CPU)");
      else
        snprintf(name, sizeof name, "softmetal %u (software Metal on the CPU)", k);
      d->name = sm__string(name);
      d->index = k;
      g_devices[k] = d;
    }
  }
  pthread_mutex_unlock(&g_device_lock);
  return (id)d;
}

/* SOFTMETAL_DEFAULT_DEVICE picks which of the SOFTMETAL_DEVICE_COUNT devices is
 * the system default, as a Mac whose default GPU is not the first listed. */
SM_EXPORT id MTLCreateSystemDefaultDevice(void) {
  unsigned n = device_count();
  if (sm__persona()->one_device) return device_get(0);
  return device_get(env_index("SOFTMETAL_DEFAULT_DEVICE", 0, 0, n - 1));
}

SM_EXPORT id MTLCopyAllDevices(void) {
  unsigned n = device_count();
  id devs[MAX_DEVICES];
  unsigned got = 0;
  for (unsigned k = 0; k < n; k++)
    if ((devs[got] = device_get(k))) got++;
  id arr = sm__array(devs, got);
  for (unsigned k = 0; k < got; k++) sm__release(devs[k]);
  return arr;
}

static id device_name(id self, SEL cmd) {
  (void)cmd;
  return ((sm_device *)self)->name;
}
static uint64_t device_registry_id(id self, SEL cmd) {
  (void)cmd;
  return 0x50f7e7a1u + ((sm_device *)self)->index;
}
static BOOL device_unified(id self, SEL cmd) {
  (void)self;
  (void)cmd;
  return sm__persona()->unified;
}
static NSUInteger device_max_buffer(id self, SEL cmd) {
  (void)self;
  (void)cmd;
  return MAX_BUFFER_LENGTH;
}
static uint64_t device_working_set(id self, SEL cmd) {
  (void)self;
  (void)cmd;
  return WORKING_SET;
}
static NSUInteger device_allocated(id self, SEL cmd) {
  (void)cmd;
  return atomic_load(&((sm_device *)self)->allocated);
}
static MTLSize device_max_threads(id self, SEL cmd) {
  (void)self;
  (void)cmd;
  MTLSize s = {MAX_THREADS_PER_GROUP, MAX_THREADS_PER_GROUP, MAX_THREADS_PER_GROUP};
  return s;
}
static BOOL device_supports_family(id self, SEL cmd, NSInteger family) {
  (void)self;
  (void)cmd;
  return sm__persona_supports_family(family);
}

/* ------------------------------------------------------------- buffers */

static void buffer_destroy(sm_obj *o);
static sm_class buffer_class = {"SMBuffer", sizeof(sm_buffer), buffer_destroy, Nil, 0};

static void buffer_destroy(sm_obj *o) {
  sm_buffer *b = (sm_buffer *)o;
  sm__hazard_buffer_gone(b);
  if (b->placed) {
    sm__release((id)b->device);
    return;
  }
  if (b->guarded) { /* our memory, never nocopy */
    if (b->gpu != b->mem) sm__guarded_free(b->gpu, b->length);
    sm__guarded_free(b->mem, b->length);
    b->gpu = b->mem = NULL;
  }
  if (!b->reserved) { /* never finished: nothing counted, mem is the caller's or ours */
    if (!b->nocopy) free(b->mem);
    sm__block_release(b->deallocator);
    sm__release((id)b->device);
    return;
  }
  if (b->nocopy) {
    if (b->deallocator) {
      sm__block_invoke_dealloc(b->deallocator, b->mem, b->length);
      sm__block_release(b->deallocator);
    }
  } else {
    free(b->mem);
  }
  if (b->gpu != b->mem) free(b->gpu);
  atomic_fetch_sub(&b->device->allocated, b->reserved);
  atomic_fetch_sub(&sm__buffer_bytes, (long)b->reserved);
  sm__release((id)b->device);
}

void sm__refuse(const char *sel, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "softmetal: %s: ", sel);
  vfprintf(stderr, fmt, ap);
  fputs("; returning nil\n", stderr);
  va_end(ap);
}

/* Storage mode from options, or -1 (message printed) when the options are invalid. */
static long options_storage(const char *sel, NSUInteger options) {
  NSUInteger cache = sm__options_cache(options), storage = sm__options_storage(options),
             hazard = sm__options_hazard(options);
  if (options >> 12 || cache > 1 || hazard > 2 || storage > ST_PRIVATE) {
    sm__refuse(sel,
               "options = 0x%lx is not a valid MTLResourceOptions for a buffer "
               "(cache %lu, storage %lu, hazard %lu)",
               options, cache, storage, hazard);
    return -1;
  }
  return (long)storage;
}

static sm_buffer *buffer_make(sm_device *dev, const char *sel, NSUInteger length,
                              NSUInteger options) {
  long storage = options_storage(sel, options);
  if (storage < 0) return NULL;
  if (length == 0 || length > MAX_BUFFER_LENGTH) {
    sm__refuse(sel, "length = %lu must be in 1..%lu", length, MAX_BUFFER_LENGTH);
    return NULL;
  }
  sm_buffer *b = sm__new(&buffer_class);
  if (!b) return NULL;
  b->device = (sm_device *)sm__retain((id)dev);
  b->length = length;
  b->options = options;
  b->storage = (NSUInteger)storage;
  b->untracked = sm__options_hazard(options) == HAZARD_UNTRACKED;
  return b;
}

/* GPU addresses are handed out above what Linux maps by default (47 bits on
 * x86-64, 48 or 52 on arm64) and below the top byte, each buffer page-aligned
 * and never reused, so a gpuAddress is stable, unique, and faults if written. */
#define GPU_ADDRESS_BASE ((uint64_t)0x00F0 << 48)
static atomic_uint_fast64_t g_next_gpu_address = GPU_ADDRESS_BASE;

/* Counts the buffer against its device, gives it a GPU address, and makes the
 * GPU copy of Managed storage (initialised from the host copy). False when out
 * of memory. */
static bool buffer_finish(sm_buffer *b) {
  NSUInteger reserved = (b->length + SM_PAGE - 1) / SM_PAGE * SM_PAGE;
  b->gpu = b->mem;
  if (b->storage == ST_MANAGED) {
    b->gpu = b->guarded ? sm__guarded_alloc(b->length) : aligned_alloc(SM_PAGE, reserved);
    if (!b->gpu) return false;
    memcpy(b->gpu, b->mem, b->length);
    if (!b->guarded) memset(b->gpu + b->length, 0, reserved - b->length);
  }
  b->reserved = reserved;
  b->gpu_address = atomic_fetch_add(&g_next_gpu_address, b->reserved);
  if (b->placed) return true;
  atomic_fetch_add(&b->device->allocated, b->reserved);
  atomic_fetch_add(&sm__buffer_bytes, (long)b->reserved);
  return true;
}

static id buffer_ready(sm_buffer *b, const char *sel) {
  if (buffer_finish(b)) return (id)b;
  NSUInteger length = b->length;
  sm__release((id)b); /* unfinished: the deallocator is not called */
  sm__refuse(sel, "length = %lu: out of memory", length);
  return nil;
}

static id device_new_buffer(id self, SEL cmd, NSUInteger length, NSUInteger options) {
  sm_buffer *b = buffer_make((sm_device *)self, sel_getName(cmd), length, options);
  if (!b) return nil;
  NSUInteger size = (length + SM_PAGE - 1) / SM_PAGE * SM_PAGE;
  b->guarded = sm__shader_validation(); /* accesses past the end fault */
  b->mem = b->guarded ? sm__guarded_alloc(length) : aligned_alloc(SM_PAGE, size);
  if (!b->mem) {
    sm__release((id)b);
    sm__refuse(sel_getName(cmd), "length = %lu: out of memory", length);
    return nil;
  }
  if (!b->guarded) memset(b->mem, 0, size);
  return buffer_ready(b, sel_getName(cmd));
}

static id device_new_buffer_bytes(id self, SEL cmd, const void *bytes, NSUInteger length,
                                  NSUInteger options) {
  if (!bytes) {
    sm__refuse(sel_getName(cmd), "bytes = NULL");
    return nil;
  }
  id b = device_new_buffer(self, cmd, length, options);
  if (b) {
    memcpy(((sm_buffer *)b)->mem, bytes, length);
    memcpy(((sm_buffer *)b)->gpu, bytes, length); /* both copies start equal */
  }
  return b;
}

static id device_new_buffer_nocopy(id self, SEL cmd, void *ptr, NSUInteger length,
                                   NSUInteger options, const void *deallocator) {
  const char *sel = sel_getName(cmd);
  /* Metal checks against the page size of the machine it runs on (16 KiB on
   * Apple silicon, 4 KiB on Intel Macs), which programs read with sysconf. */
  long page = sysconf(_SC_PAGESIZE);
  if (page <= 0) page = SM_PAGE;
  if (!ptr || (uintptr_t)ptr % (unsigned long)page) {
    sm__refuse(sel, "pointer = %p must be aligned to the %ld-byte page (sysconf(_SC_PAGESIZE))",
               ptr, page);
    return nil;
  }
  if (length % (unsigned long)page) {
    sm__refuse(sel,
               "length = %lu must be a multiple of the %ld-byte page "
               "(sysconf(_SC_PAGESIZE))",
               length, page);
    return nil;
  }
  if (sm__options_storage(options) == ST_PRIVATE) {
    sm__refuse(sel, "options = 0x%lx: Private storage cannot wrap CPU memory", options);
    return nil;
  }
  sm_buffer *b = buffer_make((sm_device *)self, sel, length, options);
  if (!b) return nil;
  b->mem = ptr;
  b->nocopy = true;
  b->deallocator = sm__block_copy(deallocator);
  return buffer_ready(b, sel);
}

id sm__buffer_new_placed(id device, const char *sel, void *mem, NSUInteger length,
                         NSUInteger options) {
  if (sm__options_storage(options) == ST_MANAGED) {
    sm__refuse(sel, "options = 0x%lx: heaps have no Managed storage", options);
    return nil;
  }
  sm_buffer *b = buffer_make((sm_device *)device, sel, length, options);
  if (!b) return nil;
  b->mem = mem;
  b->nocopy = b->placed = true;
  return buffer_ready(b, sel);
}
void sm__device_account(id device, long bytes) {
  atomic_fetch_add(&((sm_device *)device)->allocated, (unsigned long)bytes);
}
NSUInteger sm__buffer_reserved(id buffer) { return ((sm_buffer *)buffer)->reserved; }
void *sm__buffer_gpu(id buffer, NSUInteger *length) {
  if (!buffer || !sm__is(buffer, &buffer_class)) return NULL;
  *length = ((sm_buffer *)buffer)->length;
  return ((sm_buffer *)buffer)->gpu;
}

static void *buffer_contents(id self, SEL cmd) {
  (void)cmd;
  sm_buffer *b = (sm_buffer *)self;
  return b->storage == ST_PRIVATE ? NULL : b->mem;
}
static NSUInteger buffer_length(id self, SEL cmd) {
  (void)cmd;
  return ((sm_buffer *)self)->length;
}
static NSUInteger buffer_storage(id self, SEL cmd) {
  (void)cmd;
  return ((sm_buffer *)self)->storage;
}
static uint64_t buffer_gpu_address(id self, SEL cmd) {
  (void)cmd;
  return ((sm_buffer *)self)->gpu_address;
}
static NSUInteger buffer_hazard_mode(id self, SEL cmd) {
  (void)cmd;
  return ((sm_buffer *)self)->untracked ? HAZARD_UNTRACKED : HAZARD_TRACKED;
}
static NSUInteger buffer_resource_options(id self, SEL cmd) {
  (void)cmd;
  return ((sm_buffer *)self)->options;
}

static void buffer_did_modify(id self, SEL cmd, NSRange r) {
  sm_buffer *b = (sm_buffer *)self;
  if (b->storage != ST_MANAGED)
    sm__fatal("-[SMBuffer %s]: buffer storageMode = %lu, only Managed (1) buffers "
              "take didModifyRange:",
              sel_getName(cmd), b->storage);
  NSUInteger end;
  if (__builtin_add_overflow(r.location, r.length, &end) || end > b->length)
    sm__fatal("-[SMBuffer %s]: range = {%lu, %lu} exceeds length %lu", sel_getName(cmd), r.location,
              r.length, b->length);
  /* The GPU copy takes the host's bytes of this range, and only those. */
  memcpy(b->gpu + r.location, b->mem + r.location, r.length);
}

static id buffer_device(id self, SEL cmd) {
  (void)cmd;
  return (id)((sm_buffer *)self)->device;
}

/* ------------------------------------------------------------- shared events */

static void event_destroy(sm_obj *o) {
  sm_event *e = (sm_event *)o;
  pthread_mutex_destroy(&e->mu);
  pthread_cond_destroy(&e->cv);
  sm__release((id)e->device);
}
static sm_class event_class = {"SMSharedEvent", sizeof(sm_event), event_destroy, Nil, 0};

static id device_new_event(id self, SEL cmd) {
  (void)cmd;
  sm_event *e = sm__new(&event_class);
  if (!e) return nil;
  e->device = (sm_device *)sm__retain(self);
  pthread_mutex_init(&e->mu, NULL);
  pthread_cond_init(&e->cv, NULL);
  return (id)e;
}

static id event_device(id self, SEL cmd) {
  (void)cmd;
  return (id)((sm_event *)self)->device;
}

static uint64_t event_value(id self, SEL cmd) {
  (void)cmd;
  sm_event *e = (sm_event *)self;
  pthread_mutex_lock(&e->mu);
  uint64_t v = e->value;
  pthread_mutex_unlock(&e->mu);
  return v;
}

static void event_set(sm_event *e, uint64_t v) {
  pthread_mutex_lock(&e->mu);
  e->value = v;
  pthread_cond_broadcast(&e->cv);
  pthread_mutex_unlock(&e->mu);
  sm__host_event_signaled((id)e, v);
}

static void event_set_value(id self, SEL cmd, uint64_t v) {
  (void)cmd;
  event_set((sm_event *)self, v);
}

static void event_wait(sm_event *e, uint64_t v) {
  pthread_mutex_lock(&e->mu);
  while (e->value < v) pthread_cond_wait(&e->cv, &e->mu);
  pthread_mutex_unlock(&e->mu);
}

/* ------------------------------------------------------------- fences */

static void fence_destroy(sm_obj *o) {
  sm_fence *f = (sm_fence *)o;
  sm__hazard_fence_gone(f);
  sm__release((id)f->device);
}
static sm_class fence_class = {"SMFence", sizeof(sm_fence), fence_destroy, Nil, 0};

static id device_new_fence(id self, SEL cmd) {
  (void)cmd;
  sm_fence *f = sm__new(&fence_class);
  if (!f) return nil;
  f->device = (sm_device *)sm__retain(self);
  return (id)f;
}

static id fence_device(id self, SEL cmd) {
  (void)cmd;
  return (id)((sm_fence *)self)->device;
}

/* ------------------------------------------------------------- commands */

static void release_ref(sm_cmdbuf *cb, sm_buffer *b) {
  if (cb->retains_refs) sm__release((id)b);
}

static void command_free(sm_cmdbuf *cb, command *c) {
  release_ref(cb, c->src);
  release_ref(cb, c->dst);
  sm__release((id)c->event);
  sm__release((id)c->fence);
  free(c->barrier);
  if (c->dispatch) {
    dispatch_rec *d = c->dispatch;
    sm__release((id)d->pipeline);
    for (unsigned i = 0; i < SM_MAX_BINDINGS; i++) {
      release_ref(cb, d->buffers[i]);
      free(d->bytes[i]);
    }
    release_ref(cb, d->indirect);
    for (unsigned i = 0; i < d->nused; i++) release_ref(cb, d->used[i]);
    free(d);
  }
}

static void slot_release(sm_cmdbuf *cb);

static void cmdbuf_destroy(sm_obj *o) {
  sm_cmdbuf *cb = (sm_cmdbuf *)o;
  slot_release(cb);
  sm__hazard_cmdbuf_gone(cb);
  for (size_t i = 0; i < cb->ncmds; i++) command_free(cb, &cb->cmds[i]);
  free(cb->cmds);
  /* Handlers of a buffer never committed are released without running. */
  for (size_t i = 0; i < cb->nhandlers; i++) sm__block_release(cb->handlers[i]);
  free(cb->handlers);
  free(cb->encode_error);
  free(cb->enc_labels.p);
  sm__release(cb->error);
  sm__release((id)cb->queue);
}
static sm_class cmdbuf_class = {"SMCommandBuffer", sizeof(sm_cmdbuf), cmdbuf_destroy, Nil, 0};

static void encode_fail(sm_cmdbuf *cb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void encode_fail(sm_cmdbuf *cb, const char *fmt, ...) {
  if (cb->encode_error) return; /* the first error is the one reported */
  va_list ap;
  va_start(ap, fmt);
  char tmp[1024];
  vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  sm__host_debug_groups((id)cb, cb->active_encoder, tmp, sizeof tmp);
  cb->encode_error = strdup(tmp);
}
void sm__cmdbuf_fail(id cmdbuf, const char *msg) { encode_fail((sm_cmdbuf *)cmdbuf, "%s", msg); }

/* API misuse that Metal's validation layer reports at encode: under
 * MTL_DEBUG_LAYER=1 an abort naming the rule, as Metal's assertion; without
 * it the command buffer fails (what a Mac does then is undefined). */
static void misuse(sm_cmdbuf *cb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void misuse(sm_cmdbuf *cb, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char tmp[1024];
  vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  id enc = cb->active_encoder;
  sm__api_misuse_abort(enc ? object_getClassName(enc) : "SMCommandBuffer", tmp);
  encode_fail(cb, "%s", tmp);
}

static command *cmd_push(sm_cmdbuf *cb, int kind) {
  if (cb->ncmds == cb->cap) {
    if (!sm__grow(&cb->cmds, &cb->cap, sizeof *cb->cmds, 8))
      sm__fatal("command buffer: out of memory");
  }
  command *c = &cb->cmds[cb->ncmds++];
  memset(c, 0, sizeof *c);
  c->kind = kind;
  return c;
}

static sm_buffer *keep_ref(sm_cmdbuf *cb, sm_buffer *b) {
  if (cb->retains_refs) sm__retain((id)b);
  return b;
}

/* ------------------------------------------------------------- execution */
static bool range_ok(NSUInteger off, NSUInteger size, NSUInteger length) {
  NSUInteger end;
  return !__builtin_add_overflow(off, size, &end) && end <= length;
}

static bool size_mul(MTLSize a, MTLSize b, MTLSize *out);
static bool run_dispatch(sm_hz_run *hz, const command *c, char *err, size_t errlen) {
  dispatch_rec *r = c->dispatch;
  sm_dispatch d;
  memset(&d, 0, sizeof d);
  d.pipeline = r->pipeline;
  for (unsigned i = 0; i < SM_MAX_BINDINGS; i++) {
    if (r->buffers[i]) {
      d.buffers[i] = r->buffers[i]->gpu + r->offsets[i];
      d.buffer_len[i] = r->buffers[i]->length - r->offsets[i];
    } else if (r->bytes[i])
      d.buffers[i] = r->bytes[i];
    d.tg_len[i] = r->tg_len[i];
  }
  d.grid = r->grid;
  d.tg = r->tg;
  d.groups = r->groups;
  struct sm_touched touched[SM_MAX_BINDINGS];
  const bool tracked = r->concurrent && r->shares_segment;
  if (tracked) {
    char *diag = NULL;
    if (!sm__pipeline_tracked(r->pipeline, &diag)) {
      snprintf(err, errlen, "%s: cannot generate the tracked code of kernel %s: %s", c->op_sel,
               r->pipeline->desc->name, diag ? diag : "out of memory");
      free(diag);
      return false;
    }
  }
  if (tracked) { /* the bindings' ranges by descending start */
    const struct sm_kernel_desc *k = r->pipeline->desc;
    for (unsigned i = 0; i < SM_MAX_BINDINGS; i++) {
      if (!r->buffers[i] || !(k->buffer_mask >> i & 1u)) continue;
      uintptr_t start = (uintptr_t)d.buffers[i];
      unsigned at = 0;
      while (at < d.ntouched && touched[at].start > start) at++;
      if (at < d.ntouched && touched[at].start == start) continue;
      memmove(&touched[at + 1], &touched[at], (d.ntouched - at) * sizeof *touched);
      touched[at] = (struct sm_touched){start,
                                        (uintptr_t)(r->buffers[i]->gpu + r->buffers[i]->length),
                                        r->buffers[i],
                                        UINTPTR_MAX,
                                        0,
                                        UINTPTR_MAX,
                                        0};
      d.ntouched++;
    }
    /* a range ends where the next binding of its buffer starts, so that
     * ranges of one buffer are disjoint */
    for (unsigned i = 0; i < d.ntouched; i++)
      for (unsigned o = i; o-- > 0;)
        if (touched[o].owner == touched[i].owner) {
          touched[i].end = touched[o].start;
          break;
        }
    /* a buffer's lowest range starts at its first byte: bytes a kernel
     * reaches below its offset count too */
    for (unsigned i = 0; i < d.ntouched; i++) {
      bool lowest = true;
      for (unsigned o = i + 1; o < d.ntouched && lowest; o++)
        lowest = touched[o].owner != touched[i].owner;
      if (lowest) touched[i].start = (uintptr_t)((const sm_buffer *)touched[i].owner)->gpu;
    }
    d.touched = touched;
  }
  if (r->indirect) { /* MTLDispatchThreadgroupsIndirectArguments: uint32_t[3] */
    uint32_t g[3];
    memcpy(g, r->indirect->gpu + r->indirect_off, sizeof g);
    d.groups = (MTLSize){g[0], g[1], g[2]};
    if (!g[0] || !g[1] || !g[2]) return true; /* an empty grid runs nothing */
    if (!size_mul(d.groups, r->tg, &d.grid) || d.grid.width > UINT32_MAX ||
        d.grid.height > UINT32_MAX || d.grid.depth > UINT32_MAX) {
      snprintf(err, errlen,
               "dispatchThreadgroupsWithIndirectBuffer:indirectBufferOffset:"
               "threadsPerThreadgroup:: indirect buffer holds {%u, %u, %u} threadgroups of "
               "{%lu, %lu, %lu}: the grid exceeds 2^32-1 threads per dimension",
               g[0], g[1], g[2], r->tg.width, r->tg.height, r->tg.depth);
      return false;
    }
  }
  if (!sm__run_dispatch(&d, err, errlen)) return false;
  return !tracked || sm__hazard_dispatched(hz, c, touched, d.ntouched, err, errlen);
}

/* Marks the dispatches of concurrent passes that share their segment (the
 * commands of a pass between barriers for all buffers) with another. */
static void mark_segments(sm_cmdbuf *cb) {
  size_t start = 0;
  unsigned n = 0;
  for (size_t i = 0; i <= cb->ncmds; i++) {
    const command *c = i < cb->ncmds ? &cb->cmds[i] : NULL;
    bool full_barrier = c && c->kind == CMD_BARRIER && !c->barrier;
    if (!c || c->pass != cb->cmds[start].pass || full_barrier) {
      for (size_t k = start; k < i; k++)
        if (cb->cmds[k].kind == CMD_DISPATCH) cb->cmds[k].dispatch->shares_segment = n > 1;
      start = full_barrier ? i + 1 : i;
      n = 0;
    }
    if (c && c->kind == CMD_DISPATCH && c->dispatch->concurrent) n++;
  }
}

static bool run_command(sm_hz_run *hz, command *c, char *err, size_t errlen) {
  switch (c->kind) {
  case CMD_COPY: memmove(c->dst->gpu + c->dst_off, c->src->gpu + c->src_off, c->size); return true;
  case CMD_FILL: memset(c->dst->gpu + c->dst_off, c->fill, c->size); return true;
  case CMD_SYNC: /* Managed: the host copy takes the GPU's */
    memcpy(c->dst->mem, c->dst->gpu, c->dst->length);
    return true;
  case CMD_DISPATCH: return run_dispatch(hz, c, err, errlen);
  case CMD_BARRIER: sm__hazard_barrier(hz, c); return true;
  case CMD_SIGNAL: event_set(c->event, c->value); return true;
  case CMD_WAIT: event_wait(c->event, c->value); return true;
  case CMD_UPDATE_FENCE:
  case CMD_WAIT_FENCE: /* ordering is checked at commit; one queue thread runs in order */
    return true;
  }
  return false;
}

static void cmdbuf_execute(sm_cmdbuf *cb) {
  atomic_store(&cb->status, CB_SCHEDULED);
  sm__host_cb_scheduled((id)cb);
  char err[2048] = "";
  bool ok = true;
  if (cb->encode_error) {
    snprintf(err, sizeof err, "%s", cb->encode_error);
    ok = false;
  }
  sm_hz_run hz = {-1, NULL, 0, 0};
  mark_segments(cb);
  for (size_t i = 0; ok && i < cb->ncmds; i++) ok = run_command(&hz, &cb->cmds[i], err, sizeof err);
  sm__hazard_run_free(&hz);
  if (!ok) {
    /* Signals after a failure still happen, so waiters on other queues go on. */
    for (size_t i = 0; i < cb->ncmds; i++)
      if (cb->cmds[i].kind == CMD_SIGNAL) event_set(cb->cmds[i].event, cb->cmds[i].value);
    cb->error = sm__error(CB_ERROR_DOMAIN, CB_ERROR_INTERNAL, "%s", err);
  }
  sm__host_cb_finished((id)cb);
  atomic_store(&cb->status, ok ? CB_COMPLETED : CB_ERROR);
}

static void run_handlers(sm_cmdbuf *cb) {
  void *pool = sm__pool_push();
  for (size_t i = 0; i < cb->nhandlers; i++) {
    sm__block_invoke_handler(cb->handlers[i], (id)cb);
    sm__block_release(cb->handlers[i]);
  }
  cb->nhandlers = 0;
  sm__pool_pop(pool);
}

/* A completed (or destroyed) command buffer no longer counts against its
 * queue's maximum. */
static void slot_release(sm_cmdbuf *cb) {
  if (!cb->queue) return;
  queue_core *core = cb->queue->core;
  pthread_mutex_lock(&core->mu);
  if (cb->holds_slot) {
    cb->holds_slot = false;
    core->uncompleted--;
    pthread_cond_broadcast(&core->slot_cv);
  }
  pthread_mutex_unlock(&core->mu);
}

static uint64_t splitmix64(uint64_t *state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15u);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9u;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBu;
  return z ^ (z >> 31);
}

/* Completes cb: its handlers run on this thread, either before
 * waitUntilCompleted returns or after (a seeded coin per command buffer), as
 * Metal promises neither. */
static void cmdbuf_complete(queue_core *core, sm_cmdbuf *cb) {
  slot_release(cb);
  bool late = false; /* without handlers, no coin to toss */
  if (cb->nhandlers) {
    pthread_mutex_lock(&core->mu);
    late = splitmix64(&core->rng) & 1;
    pthread_mutex_unlock(&core->mu);
    if (!late) run_handlers(cb);
  }
  /* Each broadcast here and below comes after the unlock, so that a thread
   * it wakes does not at once sleep again on the mutex. */
  pthread_mutex_lock(&core->mu);
  cb->waitable = true;
  pthread_mutex_unlock(&core->mu);
  pthread_cond_broadcast(&core->done_cv);
  if (late) {
    pthread_mutex_lock(&core->mu);
    /* Let a waiter return first; if none is waiting, give one 0.2 ms to come. */
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += 200000;
    if (until.tv_nsec >= 1000000000) until.tv_sec++, until.tv_nsec -= 1000000000;
    while (cb->returned == 0 &&
           (cb->waiting > 0 || pthread_cond_timedwait(&core->done_cv, &core->mu, &until) == 0)) {
      if (cb->waiting > 0) pthread_cond_wait(&core->done_cv, &core->mu);
    }
    pthread_mutex_unlock(&core->mu);
    run_handlers(cb);
  }
}

static void core_free(queue_core *c) {
  pthread_cond_destroy(&c->slot_cv);
  pthread_mutex_destroy(&c->mu);
  pthread_cond_destroy(&c->cv);
  pthread_cond_destroy(&c->done_cv);
  free(c);
}

/* Threads are never detached: a thread still running (exiting included)
 * when the process exits is one LeakSanitizer's tracer must walk, and
 * libasan up to GCC 13 / LLVM 16 can misread a thread's dynamic TLS block
 * (here softmetal's _Thread_local state) as a glibc 2.19 header, giving the
 * tracer a bogus range ("Tracer caught signal 11"). So every thread is
 * joined by whoever destroys its owner; one whose owner dies on the thread
 * itself (a queue whose last reference was its own command buffer's) is
 * left here and joined by the next thread that makes or destroys a queue,
 * by softmetal_quiesce, or at the latest by an exit handler, which runs
 * before LeakSanitizer's check (registered later, so it runs earlier).
 * The exit handler first waits for the command buffers that have finished
 * executing but are still held by their queue thread (completed handlers,
 * the last release, which may destroy the queue): a program may exit as
 * soon as waitUntilCompleted returns. */
typedef struct reap_entry {
  pthread_t thread;
  void (*done)(void *); /* after the join, or NULL */
  void *arg;
  struct reap_entry *next;
} reap_entry;
static pthread_mutex_t g_reap_mu = PTHREAD_MUTEX_INITIALIZER;
static reap_entry *g_reap;

/* Joins every thread left to reap but the calling one. Call it holding no
 * lock that an exiting softmetal thread takes. */
static void reap_threads(void) {
  pthread_mutex_lock(&g_reap_mu);
  reap_entry *list = g_reap;
  g_reap = NULL;
  pthread_mutex_unlock(&g_reap_mu);
  while (list) {
    reap_entry *e = list;
    list = e->next;
    if (pthread_equal(e->thread, pthread_self())) {
      pthread_mutex_lock(&g_reap_mu); /* not ourselves: later */
      e->next = g_reap;
      g_reap = e;
      pthread_mutex_unlock(&g_reap_mu);
      continue;
    }
    pthread_join(e->thread, NULL);
    if (e->done) e->done(e->arg);
    free(e);
  }
}

/* Command buffers executed and not yet let go by their queue thread, and
 * whether this thread is a queue's. */
static long g_completing;
static pthread_cond_t g_completing_cv = PTHREAD_COND_INITIALIZER;
static _Thread_local bool t_queue_thread;

static void completing_add(long n) {
  pthread_mutex_lock(&g_reap_mu);
  g_completing += n;
  if (!g_completing) pthread_cond_broadcast(&g_completing_cv);
  pthread_mutex_unlock(&g_reap_mu);
}

static void reap_at_exit(void) {
  pthread_mutex_lock(&g_reap_mu);
  while (g_completing && !t_queue_thread) pthread_cond_wait(&g_completing_cv, &g_reap_mu);
  pthread_mutex_unlock(&g_reap_mu);
  reap_threads();
  sm__exec_thread_done();
}
static void reap_register(void) { atexit(reap_at_exit); }

/* The thread (the caller) ends soon: someone else joins it, then calls
 * done(arg). */
static void reap_later(void (*done)(void *), void *arg) {
  reap_entry *e = malloc(sizeof *e);
  if (!e) sm__fatal("softmetal: no memory to track an exiting thread");
  *e = (reap_entry){pthread_self(), done, arg, NULL};
  pthread_mutex_lock(&g_reap_mu);
  e->next = g_reap;
  g_reap = e;
  pthread_mutex_unlock(&g_reap_mu);
}

static void core_free_cb(void *core) { core_free(core); }

/* Command buffers committed and not yet let go by their queue thread. */
static pthread_mutex_t g_inflight_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_inflight_cv = PTHREAD_COND_INITIALIZER;
static long g_inflight;

static void inflight_add(long n) {
  pthread_mutex_lock(&g_inflight_mu);
  g_inflight += n;
  if (!g_inflight) pthread_cond_broadcast(&g_inflight_cv);
  pthread_mutex_unlock(&g_inflight_mu);
}

SM_EXPORT void softmetal_quiesce(void) {
  sm__dispatch_quiesce();
  pthread_mutex_lock(&g_inflight_mu);
  while (g_inflight) pthread_cond_wait(&g_inflight_cv, &g_inflight_mu);
  pthread_mutex_unlock(&g_inflight_mu);
  reap_threads();
}

/* Takes the queue's next command buffer to run on this thread. Under
 * core->mu, with core->head set and core->busy clear. */
static sm_cmdbuf *queue_take(queue_core *core) {
  sm_cmdbuf *cb = core->head;
  core->head = cb->next;
  if (!core->head) core->tail = NULL;
  core->busy = true;
  return cb;
}

/* Runs and completes a command buffer queue_take gave this thread, and drops
 * the queue's reference to it. Called and returns under core->mu, which it
 * releases meanwhile. */
static void queue_run(queue_core *core, sm_cmdbuf *cb) {
  pthread_mutex_unlock(&core->mu);
  cmdbuf_execute(cb);
  completing_add(1); /* before any waiter may return */
  cmdbuf_complete(core, cb);
  uint64_t seq = cb->seq;
  sm__release((id)cb); /* may destroy the queue, which sets stop */
  completing_add(-1);
  pthread_mutex_lock(&core->mu);
  core->busy = false;
  core->finished = seq;
  inflight_add(-1);
}

static void *queue_main(void *arg) {
  objc_thread_add();
  t_queue_thread = true;
  /* Kernels run on this thread: its signal stack for their faults, made
   * once rather than per dispatch. */
  sm_altstack alt;
  sm__altstack_push(&alt);
  queue_core *core = arg;
  pthread_mutex_lock(&core->mu);
  for (;;) {
    while ((!core->head || core->busy) && !core->stop) pthread_cond_wait(&core->cv, &core->mu);
    if (!core->head) break;
    queue_run(core, queue_take(core));
  }
  pthread_mutex_unlock(&core->mu);
  sm__altstack_pop(&alt);
  objc_thread_remove();
  return NULL;
}

/* ------------------------------------------------------------- queues */
static void queue_destroy(sm_obj *o) {
  sm_queue *q = (sm_queue *)o;
  queue_core *core = q->core;
  if (core) {
    if (!q->started) {
      core_free(core);
    } else {
      bool self = pthread_equal(pthread_self(), q->thread);
      pthread_mutex_lock(&core->mu);
      core->stop = true;
      pthread_cond_broadcast(&core->cv);
      pthread_mutex_unlock(&core->mu);
      if (self) { /* its own command buffer's release: joined later */
        reap_later(core_free_cb, core);
      } else {
        pthread_join(q->thread, NULL);
        core_free(core);
        reap_threads();
      }
    }
  }
  sm__hazard_queue_gone(q);
  sm__release((id)q->device);
}
static sm_class queue_class = {"SMCommandQueue", sizeof(sm_queue), queue_destroy, Nil, 0};

/* The seed of the completion-order coins: SOFTMETAL_SEED, else a fresh one. */
static uint64_t rng_seed(void) {
  const char *env = getenv("SOFTMETAL_SEED");
  if (env && *env) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(env, &end, 0);
    if (errno || *end) sm__fatal("SOFTMETAL_SEED = '%s' is not an unsigned integer", env);
    return v;
  }
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_nsec ^ ((uint64_t)t.tv_sec << 32) ^ ((uint64_t)getpid() << 16);
}

static id device_new_queue_max(id self, SEL cmd, NSUInteger max) {
  static atomic_uint_fast64_t next_id;
  reap_threads();
  if (max == 0)
    sm__fatal("-[SMDevice %s]: maxCommandBufferCount = 0: commandBuffer would block forever",
              sel_getName(cmd));
  sm_queue *q = sm__new(&queue_class);
  if (!q) return nil;
  q->device = (sm_device *)sm__retain(self);
  q->id = atomic_fetch_add(&next_id, 1) + 1;
  q->core = calloc(1, sizeof *q->core);
  if (!q->core) {
    sm__release((id)q);
    return nil;
  }
  pthread_mutex_init(&q->core->mu, NULL);
  pthread_cond_init(&q->core->cv, NULL);
  pthread_cond_init(&q->core->done_cv, NULL);
  pthread_cond_init(&q->core->slot_cv, NULL);
  q->core->max_uncompleted = max;
  uint64_t seed = rng_seed() + q->id * 0x9E3779B97F4A7C15u; /* per queue, reproducible */
  q->core->rng = splitmix64(&seed);
  return (id)q;
}

static id device_new_queue(id self, SEL cmd) { return device_new_queue_max(self, cmd, 64); }

static id queue_make_cmdbuf(id self, bool retains) {
  queue_core *core = ((sm_queue *)self)->core;
  pthread_mutex_lock(&core->mu);
  if (core->uncompleted >= core->max_uncompleted) {
    atomic_fetch_add(&sm__blocked_cmdbuf, 1);
    while (core->uncompleted >= core->max_uncompleted) pthread_cond_wait(&core->slot_cv, &core->mu);
    atomic_fetch_sub(&sm__blocked_cmdbuf, 1);
  }
  core->uncompleted++;
  pthread_mutex_unlock(&core->mu);
  sm_cmdbuf *cb = sm__new(&cmdbuf_class);
  if (!cb) {
    pthread_mutex_lock(&core->mu);
    core->uncompleted--;
    pthread_cond_broadcast(&core->slot_cv);
    pthread_mutex_unlock(&core->mu);
    return nil;
  }
  cb->holds_slot = true;
  static atomic_uint_fast64_t next_serial;
  cb->queue = (sm_queue *)sm__retain(self);
  cb->retains_refs = retains;
  cb->serial = atomic_fetch_add(&next_serial, 1) + 1;
  return sm__autorelease((id)cb);
}

static id queue_device(id self, SEL cmd) {
  (void)cmd;
  return (id)((sm_queue *)self)->device;
}
static id cb_queue(id self, SEL cmd) {
  (void)cmd;
  return (id)((sm_cmdbuf *)self)->queue;
}
static id cb_device(id self, SEL cmd) {
  (void)cmd;
  return (id)((sm_cmdbuf *)self)->queue->device;
}

static id queue_cmdbuf(id self, SEL cmd) {
  (void)cmd;
  return queue_make_cmdbuf(self, true);
}
static id queue_cmdbuf_unretained(id self, SEL cmd) {
  (void)cmd;
  return queue_make_cmdbuf(self, false);
}

/* ------------------------------------------------------------- command buffers */

static unsigned char cb_retained_refs(id self, SEL cmd) {
  (void)cmd;
  return ((sm_cmdbuf *)self)->retains_refs;
}
static NSUInteger cb_status(id self, SEL cmd) {
  (void)cmd;
  NSUInteger st = atomic_load(&((sm_cmdbuf *)self)->status);
  if (st >= CB_COMPLETED) sm__hazard_observed((sm_cmdbuf *)self);
  return st;
}

/* sel_getName takes the runtime's lock on GNU libobjc; the encoding calls
 * name their selector on every call (for messages and the hazard checks),
 * so this thread keeps the names it has seen (a SEL's name never changes). */
static const char *sel_name(SEL s) {
  static _Thread_local struct {
    SEL sel;
    const char *name;
  } seen[64];
  if (!s) return sel_getName(s);
  size_t h = ((uintptr_t)s >> 4) % 64;
  if (seen[h].sel != s) {
    seen[h].name = sel_getName(s);
    seen[h].sel = s;
  }
  return seen[h].name;
}

static void cb_require_open(sm_cmdbuf *cb, const char *sel) {
  NSUInteger st = atomic_load(&cb->status);
  if (st >= CB_COMMITTED)
    sm__fatal("-[SMCommandBuffer %s]: command buffer already committed (status %lu %s)", sel, st,
              status_name(st));
}

static void cb_require_no_encoder(sm_cmdbuf *cb, const char *sel) {
  if (cb->active_encoder)
    sm__fatal("-[SMCommandBuffer %s]: the %s created before has not called endEncoding", sel,
              object_getClassName(cb->active_encoder));
}

static void cb_enqueue(id self, SEL cmd) {
  sm_cmdbuf *cb = (sm_cmdbuf *)self;
  cb_require_open(cb, sel_getName(cmd));
  atomic_store(&cb->status, CB_ENQUEUED);
}

/* The labels of the command buffer committed last (softmetal.h). */
static pthread_mutex_t g_last_commit_mu = PTHREAD_MUTEX_INITIALIZER;
static char *g_last_commit;

static void note_commit(const sm_cmdbuf *cb) {
  sm_text text = {0};
  sm__text_printf(&text, "%s\n%s", cb->hdr.label ? sm__string_utf8(cb->hdr.label) : "",
                  cb->enc_labels.p ? cb->enc_labels.p : "");
  if (text.oom) sm__fatal("-[SMCommandBuffer commit]: out of memory");
  pthread_mutex_lock(&g_last_commit_mu);
  char *old = g_last_commit;
  g_last_commit = text.p;
  pthread_mutex_unlock(&g_last_commit_mu);
  free(old);
}

SM_EXPORT size_t softmetal_last_commit_labels(char *out, size_t cap) {
  pthread_mutex_lock(&g_last_commit_mu);
  const char *text = g_last_commit ? g_last_commit : "";
  size_t n = strlen(text);
  if (out && cap) snprintf(out, cap, "%s", text);
  pthread_mutex_unlock(&g_last_commit_mu);
  return n;
}

static void cb_commit(id self, SEL cmd) {
  sm_cmdbuf *cb = (sm_cmdbuf *)self;
  cb_require_open(cb, sel_name(cmd));
  cb_require_no_encoder(cb, sel_name(cmd));
  note_commit(cb);
  char err[1024];
  if (!cb->encode_error && !sm__hazard_commit(cb, err, sizeof err)) encode_fail(cb, "%s", err);
  sm_queue *q = cb->queue;
  queue_core *core = q->core;
  sm__retain(self); /* the queue's reference, dropped after completion */
  inflight_add(1);
  pthread_mutex_lock(&core->mu);
  atomic_store(&cb->status, CB_COMMITTED);
  if (!q->started) {
    static pthread_once_t reap_once = PTHREAD_ONCE_INIT;
    pthread_once(&reap_once, reap_register);
    if (pthread_create(&q->thread, NULL, queue_main, core) != 0)
      sm__fatal("-[SMCommandBuffer commit]: cannot start the queue thread");
    q->started = true;
  }
  cb->next = NULL;
  cb->seq = ++core->committed;
  if (core->tail)
    core->tail->next = cb;
  else
    core->head = cb;
  core->tail = cb;
  pthread_mutex_unlock(&core->mu);
  pthread_cond_broadcast(&core->cv); /* the caller's reference keeps cb and its queue */
}

static void cb_wait(id self, SEL cmd) {
  sm_cmdbuf *cb = (sm_cmdbuf *)self;
  NSUInteger st = atomic_load(&cb->status);
  if (st < CB_COMMITTED)
    sm__fatal("-[SMCommandBuffer %s]: command buffer not committed (status %lu %s): "
              "this would wait forever",
              sel_name(cmd), st, status_name(st));
  queue_core *core = cb->queue->core;
  /* A command buffer its queue has not started, with no handlers to run on
   * a thread of their own, is run by the thread that waits for it: a Mac
   * runs it meanwhile, and this saves two thread wake-ups. */
  bool ready = st == CB_COMMITTED && sm__fault_thread_ready();
  pthread_mutex_lock(&core->mu);
  if (ready && core->head == cb && !core->busy && !cb->nhandlers &&
      !sm__host_cb_has_scheduled(self)) {
    queue_run(core, queue_take(core));
    if (core->head) pthread_cond_signal(&core->cv);
  }
  cb->waiting++;
  while (!cb->waitable) pthread_cond_wait(&core->done_cv, &core->mu);
  cb->waiting--;
  cb->returned++;
  pthread_mutex_unlock(&core->mu);
  pthread_cond_broadcast(&core->done_cv);
  sm__hazard_observed(cb);
}

static id cb_error(id self, SEL cmd) {
  (void)cmd;
  return ((sm_cmdbuf *)self)->error;
}

static void cb_add_completed(id self, SEL cmd, const void *block) {
  sm_cmdbuf *cb = (sm_cmdbuf *)self;
  if (!block) sm__fatal("-[SMCommandBuffer %s]: block = nil", sel_getName(cmd));
  cb_require_open(cb, sel_getName(cmd));
  void **h = realloc(cb->handlers, (cb->nhandlers + 1) * sizeof *h);
  if (!h) sm__fatal("-[SMCommandBuffer %s]: out of memory", sel_getName(cmd));
  cb->handlers = h;
  h[cb->nhandlers++] = sm__block_copy(block);
}

static void cb_event_cmd(id self, SEL cmd, id event, uint64_t value, int kind) {
  sm_cmdbuf *cb = (sm_cmdbuf *)self;
  cb_require_open(cb, sel_getName(cmd));
  cb_require_no_encoder(cb, sel_getName(cmd));
  if (!sm__is(event, &event_class))
    sm__fatal("-[SMCommandBuffer %s]: event = %s is not an SMSharedEvent", sel_getName(cmd),
              event ? object_getClassName(event) : "nil");
  command *c = cmd_push(cb, kind);
  c->pass = -1;
  c->op_sel = sel_getName(cmd);
  c->event = (sm_event *)sm__retain(event);
  c->value = value;
}

static void cb_signal(id self, SEL cmd, id event, uint64_t value) {
  cb_event_cmd(self, cmd, event, value, CMD_SIGNAL);
}
static void cb_wait_event(id self, SEL cmd, id event, uint64_t value) {
  cb_event_cmd(self, cmd, event, value, CMD_WAIT);
}

/* ------------------------------------------------------------- encoders */

static void encoder_destroy(sm_obj *o) {
  sm_encoder *e = (sm_encoder *)o;
  if (!e->ended) sm__fatal("-[%s dealloc]: encoder released without endEncoding", o->cls->name);
  for (unsigned i = 0; i < SM_MAX_BINDINGS; i++) {
    free(e->bytes[i]);
    release_ref(e->cb, e->buffers[i]);
  }
  for (unsigned i = 0; i < e->nused; i++) release_ref(e->cb, e->used[i]);
  sm__release((id)e->pipeline);
  sm__release((id)e->cb);
}
static sm_class blit_class = {"SMBlitCommandEncoder", sizeof(sm_encoder), encoder_destroy, Nil, 0};
static sm_class compute_class = {"SMComputeCommandEncoder", sizeof(sm_encoder), encoder_destroy,
                                 Nil, 0};

static id cb_make_encoder(id self, SEL cmd, sm_class *k, bool concurrent) {
  sm_cmdbuf *cb = (sm_cmdbuf *)self;
  cb_require_open(cb, sel_name(cmd));
  cb_require_no_encoder(cb, sel_name(cmd));
  sm_encoder *e = sm__new(k);
  if (!e) return nil;
  e->cb = (sm_cmdbuf *)sm__retain(self);
  e->pass = cb->npasses++;
  e->sel = sel_name(cmd);
  e->concurrent = concurrent;
  cb->active_encoder = (id)e;
  return sm__autorelease((id)e);
}
static id cb_blit_encoder(id self, SEL cmd) {
  return cb_make_encoder(self, cmd, &blit_class, false);
}
static id cb_compute_encoder(id self, SEL cmd) {
  return cb_make_encoder(self, cmd, &compute_class, false);
}
static id cb_compute_encoder_type(id self, SEL cmd, NSUInteger type) {
  if (type != DISPATCH_SERIAL && type != DISPATCH_CONCURRENT)
    sm__fatal("-[SMCommandBuffer %s]: dispatchType = %lu is not Serial (0) or Concurrent (1)",
              sel_getName(cmd), type);
  return cb_make_encoder(self, cmd, &compute_class, type == DISPATCH_CONCURRENT);
}

/* A command of this encoder's pass. */
static command *enc_cmd(id self, SEL cmd, int kind) {
  sm_encoder *e = (sm_encoder *)self;
  command *c = cmd_push(e->cb, kind);
  c->pass = e->pass;
  c->enc_sel = e->sel;
  c->op_sel = sel_name(cmd);
  return c;
}

/* The command buffer an encoding call may still add to. */
static sm_cmdbuf *enc_open(id self, SEL cmd) {
  sm_encoder *e = (sm_encoder *)self;
  if (e->ended)
    sm__fatal("-[%s %s]: encoder already ended (endEncoding was called)", e->hdr.cls->name,
              sel_name(cmd));
  cb_require_open(e->cb, sel_name(cmd));
  return e->cb;
}

static void enc_end(id self, SEL cmd) {
  sm_encoder *e = (sm_encoder *)self;
  enc_open(self, cmd);
  sm__text_printf(&e->cb->enc_labels, "%s\n", e->hdr.label ? sm__string_utf8(e->hdr.label) : "");
  e->ended = true;
  if (e->cb->active_encoder == self) e->cb->active_encoder = nil;
}

static const char *device_label(const sm_device *d) { return sm__string_utf8(d->name); }

static sm_buffer *as_buffer(sm_cmdbuf *cb, const char *sel, const char *arg, id b) {
  if (!b) {
    misuse(cb, "%s: %s = nil", sel, arg);
    return NULL;
  }
  if (!sm__is(b, &buffer_class)) {
    misuse(cb, "%s: %s is a %s, not an SMBuffer", sel, arg, object_getClassName(b));
    return NULL;
  }
  sm_device *mine = cb->queue->device, *its = ((sm_buffer *)b)->device;
  if (its != mine) {
    misuse(cb,
           "%s: %s belongs to device '%s' (registryID 0x%lx), not to the command "
           "queue's device '%s' (registryID 0x%lx)",
           sel, arg, device_label(its), 0x50f7e7a1ul + its->index, device_label(mine),
           0x50f7e7a1ul + mine->index);
    return NULL;
  }
  return (sm_buffer *)b;
}

static void blit_copy(id self, SEL cmd, id src, NSUInteger src_off, id dst, NSUInteger dst_off,
                      NSUInteger size) {
  sm_cmdbuf *cb = enc_open(self, cmd);
  const char *sel = sel_getName(cmd);
  sm_buffer *s = as_buffer(cb, sel, "sourceBuffer", src);
  sm_buffer *d = as_buffer(cb, sel, "destinationBuffer", dst);
  if (!s || !d) return;
  if (src_off % 4 || dst_off % 4 || size % 4) {
    misuse(cb,
           "%s: sourceOffset = %lu, destinationOffset = %lu and size = %lu must be "
           "multiples of 4 (macOS rule)",
           sel, src_off, dst_off, size);
    return;
  }
  if (!range_ok(src_off, size, s->length)) {
    misuse(cb, "%s: sourceOffset = %lu + size = %lu exceeds source length %lu", sel, src_off, size,
           s->length);
    return;
  }
  if (!range_ok(dst_off, size, d->length)) {
    misuse(cb, "%s: destinationOffset = %lu + size = %lu exceeds destination length %lu", sel,
           dst_off, size, d->length);
    return;
  }
  if (s == d && src_off < dst_off + size && dst_off < src_off + size && size) {
    misuse(cb,
           "%s: source range {%lu, %lu} overlaps destination range {%lu, %lu} in "
           "the same buffer",
           sel, src_off, size, dst_off, size);
    return;
  }
  command *c = enc_cmd(self, cmd, CMD_COPY);
  c->src = keep_ref(cb, s);
  c->dst = keep_ref(cb, d);
  c->src_off = src_off;
  c->dst_off = dst_off;
  c->size = size;
}

static void blit_fill(id self, SEL cmd, id buf, NSRange range, uint8_t value) {
  sm_cmdbuf *cb = enc_open(self, cmd);
  const char *sel = sel_getName(cmd);
  sm_buffer *b = as_buffer(cb, sel, "buffer", buf);
  if (!b) return;
  if (range.length == 0 || range.location % 4 || range.length % 4) {
    misuse(cb,
           "%s: range = {%lu, %lu}: location and length must be multiples of 4 and "
           "length > 0 (macOS rule)",
           sel, range.location, range.length);
    return;
  }
  if (!range_ok(range.location, range.length, b->length)) {
    misuse(cb, "%s: range = {%lu, %lu} exceeds buffer length %lu", sel, range.location,
           range.length, b->length);
    return;
  }
  command *c = enc_cmd(self, cmd, CMD_FILL);
  c->dst = keep_ref(cb, b);
  c->dst_off = range.location;
  c->size = range.length;
  c->fill = value;
}

static void blit_sync(id self, SEL cmd, id res) {
  sm_cmdbuf *cb = enc_open(self, cmd);
  const char *sel = sel_getName(cmd);
  sm_buffer *b = as_buffer(cb, sel, "resource", res);
  if (!b) return;
  if (b->storage != ST_MANAGED) {
    misuse(cb, "%s: resource storageMode = %lu, only Managed (1) resources synchronize", sel,
           b->storage);
    return;
  }
  command *c = enc_cmd(self, cmd, CMD_SYNC);
  c->dst = keep_ref(cb, b);
}

static void comp_set_pipeline(id self, SEL cmd, id pipeline) {
  sm_cmdbuf *cb = enc_open(self, cmd);
  if (!sm__is(pipeline, &sm__pipeline_class)) {
    misuse(cb, "%s: pipelineState = %s is not a compute pipeline state", sel_getName(cmd),
           pipeline ? object_getClassName(pipeline) : "nil");
    return;
  }
  static SEL device_sel; /* registered once: sel_registerName takes the runtime's lock */
  SEL dsel = __atomic_load_n(&device_sel, __ATOMIC_ACQUIRE);
  if (!dsel) __atomic_store_n(&device_sel, dsel = sel_registerName("device"), __ATOMIC_RELEASE);
  id (*device_of)(id, SEL) = (id(*)(id, SEL))(void (*)(void))objc_msg_lookup(pipeline, dsel);
  sm_device *its = (sm_device *)device_of(pipeline, dsel);
  if (its != cb->queue->device) {
    misuse(cb,
           "%s: pipelineState belongs to device '%s', not to the command queue's "
           "device '%s'",
           sel_getName(cmd), its ? device_label(its) : "nil", device_label(cb->queue->device));
    return;
  }
  sm_encoder *e = (sm_encoder *)self;
  sm__retain(pipeline);
  sm__release((id)e->pipeline);
  e->pipeline = (sm_pipeline *)pipeline;
}

id sm__encoder_buffer(id encoder, NSUInteger index, NSUInteger *offset) {
  sm_encoder *e = (sm_encoder *)encoder;
  if (index >= SM_MAX_BINDINGS || !e->buffers[index]) return nil;
  *offset = e->offsets[index];
  return (id)e->buffers[index];
}
id sm__encoder_cmdbuf(id encoder) { return (id)((sm_encoder *)encoder)->cb; }
void sm__encoder_use(id encoder, id buffer, bool write) {
  sm_encoder *e = (sm_encoder *)encoder;
  if (!sm__is(buffer, &buffer_class) || !((sm_buffer *)buffer)->untracked) return;
  for (unsigned i = 0; i < e->nused; i++)
    if (e->used[i] == (sm_buffer *)buffer) {
      e->used_write[i] |= write;
      return;
    }
  if (e->nused == SM_MAX_USED)
    sm__fatal(
        "-[SMComputeCommandEncoder useResource:usage:/useHeap:]: more than %u untracked buffers "
        "in one encoder: softmetal's hazard checks keep at most that many",
        SM_MAX_USED);
  e->used[e->nused] = keep_ref(e->cb, (sm_buffer *)buffer);
  e->used_write[e->nused++] = write;
}

static bool index_ok(sm_cmdbuf *cb, const char *sel, NSUInteger index) {
  if (index < SM_MAX_BINDINGS) return true;
  misuse(cb, "%s: index = %lu must be < %u", sel, index, SM_MAX_BINDINGS);
  return false;
}

static void comp_set_buffer(id self, SEL cmd, id buf, NSUInteger offset, NSUInteger index) {
  sm_cmdbuf *cb = enc_open(self, cmd);
  sm_encoder *e = (sm_encoder *)self;
  const char *sel = sel_name(cmd);
  if (!index_ok(cb, sel, index)) return;
  sm_buffer *b = NULL;
  if (buf) {
    b = as_buffer(cb, sel, "buffer", buf);
    if (!b) return;
    if (offset > b->length) {
      misuse(cb, "%s: offset = %lu exceeds buffer length %lu (index %lu)", sel, offset, b->length,
             index);
      return;
    }
  }
  keep_ref(cb, b);
  release_ref(cb, e->buffers[index]);
  e->buffers[index] = b;
  e->offsets[index] = offset;
  free(e->bytes[index]);
  e->bytes[index] = NULL;
}

static void comp_set_bytes(id self, SEL cmd, const void *bytes, NSUInteger length,
                           NSUInteger index) {
  sm_cmdbuf *cb = enc_open(self, cmd);
  sm_encoder *e = (sm_encoder *)self;
  const char *sel = sel_name(cmd);
  if (!index_ok(cb, sel, index)) return;
  if (length == 0 || length > MAX_SET_BYTES || !bytes) {
    misuse(cb, "%s: length = %lu must be in 1..%d with non-NULL bytes (index %lu)", sel, length,
           MAX_SET_BYTES, index);
    return;
  }
  void *copy = malloc(length);
  if (!copy) sm__fatal("%s: out of memory", sel);
  memcpy(copy, bytes, length);
  free(e->bytes[index]);
  e->bytes[index] = copy;
  e->bytes_len[index] = length;
  release_ref(cb, e->buffers[index]);
  e->buffers[index] = NULL;
}

static void comp_set_tg_memory(id self, SEL cmd, NSUInteger length, NSUInteger index) {
  sm_cmdbuf *cb = enc_open(self, cmd);
  const char *sel = sel_getName(cmd);
  if (!index_ok(cb, sel, index)) return;
  if (length > MAX_TG_MEMORY) {
    misuse(cb,
           "%s: length = %lu must be <= %lu, the device's maxThreadgroupMemoryLength "
           "(index %lu)",
           sel, length, MAX_TG_MEMORY, index);
    return;
  }
  if (length % 16) {
    /* Apple asks for a multiple of 16; a Mac without the validation layer
     * rounds up (programs rely on it: ggml's SUM sets 76 bytes). */
    char what[200];
    snprintf(what, sizeof what,
             "%s: length = %lu is not a multiple of 16 (index %lu); rounded "
             "up to %lu",
             sel, length, index, (length + 15) / 16 * 16);
    sm__api_misuse_abort(object_getClassName(self), what);
    sm__lenient(SM_LENIENT_TG_LENGTH, what);
    length = (length + 15) / 16 * 16; /* the limit is a multiple of 16 */
  }
  ((sm_encoder *)self)->tg_len[index] = length;
  ((sm_encoder *)self)->tg_set |= 1u << index; /* 0 is a length too */
}

static bool size_mul(MTLSize a, MTLSize b, MTLSize *out) {
  return !__builtin_mul_overflow(a.width, b.width, &out->width) &&
         !__builtin_mul_overflow(a.height, b.height, &out->height) &&
         !__builtin_mul_overflow(a.depth, b.depth, &out->depth);
}

static void comp_dispatch(id self, SEL cmd, MTLSize grid_or_groups, MTLSize tg, bool threads) {
  sm_cmdbuf *cb = enc_open(self, cmd);
  sm_encoder *e = (sm_encoder *)self;
  const char *sel = sel_name(cmd);
  sm_pipeline *p = e->pipeline;
  if (!p) {
    misuse(cb, "%s: no compute pipeline state set (setComputePipelineState:)", sel);
    return;
  }
  const struct sm_kernel_desc *k = p->desc;
  NSUInteger total_tg;
  if (tg.width == 0 || tg.height == 0 || tg.depth == 0 ||
      __builtin_mul_overflow(tg.width, tg.height, &total_tg) ||
      __builtin_mul_overflow(total_tg, tg.depth, &total_tg) || total_tg > p->max_threads) {
    misuse(cb,
           "%s: threadsPerThreadgroup = {%lu, %lu, %lu} must be non-zero with at most "
           "%lu threads (maxTotalThreadsPerThreadgroup of kernel %s)",
           sel, tg.width, tg.height, tg.depth, p->max_threads, k->name);
    return;
  }
  MTLSize grid, groups;
  if (threads) {
    grid = grid_or_groups;
    groups.width = (grid.width + tg.width - 1) / tg.width;
    groups.height = (grid.height + tg.height - 1) / tg.height;
    groups.depth = (grid.depth + tg.depth - 1) / tg.depth;
  } else {
    groups = grid_or_groups;
    if (!size_mul(groups, tg, &grid)) grid.width = (NSUInteger)-1;
  }
  if (grid.width > UINT32_MAX || grid.height > UINT32_MAX || grid.depth > UINT32_MAX) {
    misuse(cb, "%s: grid of {%lu, %lu, %lu} threads exceeds 2^32-1 per dimension", sel, grid.width,
           grid.height, grid.depth);
    return;
  }
  NSUInteger ngroups;
  if (__builtin_mul_overflow(groups.width, groups.height, &ngroups) ||
      __builtin_mul_overflow(ngroups, groups.depth, &ngroups)) {
    encode_fail(cb,
                "%s: {%lu, %lu, %lu} threadgroups are over 2^64 in all, more than "
                "softmetal can count",
                sel, groups.width, groups.height, groups.depth);
    return;
  }
  NSUInteger tg_total = 0;
  for (unsigned i = 0; i < SM_MAX_BINDINGS; i++) {
    if ((k->buffer_mask >> i & 1u) && !e->buffers[i] && !e->bytes[i]) {
      misuse(cb, "%s: kernel %s uses [[buffer(%u)]] but nothing is bound at index %u", sel, k->name,
             i, i);
      return;
    }
    if ((k->threadgroup_mask >> i & 1u) && !(e->tg_set >> i & 1u)) {
      misuse(cb,
             "%s: kernel %s uses [[threadgroup(%u)]] but its length was not set "
             "(setThreadgroupMemoryLength:atIndex:)",
             sel, k->name, i);
      return;
    }
    tg_total += e->tg_len[i];
  }
  if (tg_total + p->static_tg > MAX_TG_MEMORY) {
    misuse(cb,
           "%s: threadgroup memory of kernel %s: %lu bytes set with "
           "setThreadgroupMemoryLength:atIndex: plus %lu bytes of threadgroup variables "
           "(staticThreadgroupMemoryLength) exceeds %lu",
           sel, k->name, tg_total, p->static_tg, MAX_TG_MEMORY);
    return;
  }
  dispatch_rec *r = calloc(1, sizeof *r);
  if (!r) sm__fatal("%s: out of memory", sel);
  r->pipeline = (sm_pipeline *)sm__retain((id)p);
  for (unsigned i = 0; i < SM_MAX_BINDINGS; i++) {
    if (e->buffers[i]) {
      r->buffers[i] = keep_ref(cb, e->buffers[i]);
      r->offsets[i] = e->offsets[i];
    } else if (e->bytes[i]) {
      r->bytes[i] = malloc(e->bytes_len[i]);
      if (!r->bytes[i]) sm__fatal("%s: out of memory", sel);
      memcpy(r->bytes[i], e->bytes[i], e->bytes_len[i]);
    }
    r->tg_len[i] = e->tg_len[i];
  }
  for (unsigned i = 0; i < e->nused; i++) {
    r->used[i] = keep_ref(cb, e->used[i]);
    r->used_write[i] = e->used_write[i];
  }
  r->nused = e->nused;
  r->grid = grid;
  r->tg = tg;
  r->groups = groups;
  command *c = enc_cmd(self, cmd, CMD_DISPATCH);
  c->dispatch = r;
  if (e->concurrent) { /* its accesses are recorded as it runs (run_dispatch) */
    r->concurrent = true;
    r->number = ++e->ndispatch;
  }
}

void sm__encoder_dispatch_indirect(id self, SEL cmd, id buffer, NSUInteger offset, MTLSize tg) {
  sm_cmdbuf *cb = enc_open(self, cmd);
  const char *sel = sel_getName(cmd);
  sm_buffer *b = as_buffer(cb, sel, "indirectBuffer", buffer);
  if (!b) return;
  if (offset % 4 || !range_ok(offset, 12, b->length)) {
    misuse(cb,
           "%s: indirectBufferOffset = %lu must be a multiple of 4 with 12 bytes "
           "(MTLDispatchThreadgroupsIndirectArguments) within the buffer's length %lu",
           sel, offset, b->length);
    return;
  }
  size_t before = cb->ncmds;
  comp_dispatch(self, cmd, (MTLSize){1, 1, 1}, tg, false);
  if (cb->ncmds == before + 1 && cb->cmds[before].kind == CMD_DISPATCH) {
    cb->cmds[before].dispatch->indirect = keep_ref(cb, b);
    cb->cmds[before].dispatch->indirect_off = offset;
  }
}

static void comp_dispatch_threads(id self, SEL cmd, MTLSize grid, MTLSize tg) {
  comp_dispatch(self, cmd, grid, tg, true);
}
static void comp_dispatch_groups(id self, SEL cmd, MTLSize groups, MTLSize tg) {
  comp_dispatch(self, cmd, groups, tg, false);
}

static void enc_fence(id self, SEL cmd, id fence, int kind) {
  sm_cmdbuf *cb = enc_open(self, cmd);
  if (!sm__is(fence, &fence_class))
    sm__fatal("-[%s %s]: fence = %s is not an MTLFence", ((sm_obj *)self)->cls->name,
              sel_getName(cmd), fence ? object_getClassName(fence) : "nil");
  sm_device *its = ((sm_fence *)fence)->device;
  if (its != cb->queue->device) {
    misuse(cb, "%s: fence belongs to device '%s', not to the command queue's device '%s'",
           sel_getName(cmd), device_label(its), device_label(cb->queue->device));
    return;
  }
  enc_cmd(self, cmd, kind)->fence = (sm_fence *)sm__retain(fence);
}
static void enc_update_fence(id self, SEL cmd, id fence) {
  enc_fence(self, cmd, fence, CMD_UPDATE_FENCE);
}
static void enc_wait_fence(id self, SEL cmd, id fence) {
  enc_fence(self, cmd, fence, CMD_WAIT_FENCE);
}

static NSUInteger comp_dispatch_type(id self, SEL cmd) {
  (void)cmd;
  return ((sm_encoder *)self)->concurrent ? DISPATCH_CONCURRENT : DISPATCH_SERIAL;
}

static void comp_barrier_scope(id self, SEL cmd, NSUInteger scope) {
  enc_open(self, cmd);
  if ((scope & BARRIER_SCOPE_BUFFERS) && ((sm_encoder *)self)->concurrent)
    enc_cmd(self, cmd, CMD_BARRIER);
}

static void comp_barrier_resources(id self, SEL cmd, const id *resources, NSUInteger count) {
  sm_cmdbuf *cb = enc_open(self, cmd);
  sm_encoder *e = (sm_encoder *)self;
  if (count && !resources)
    sm__fatal("-[SMComputeCommandEncoder %s]: resources = NULL with count = %lu", sel_getName(cmd),
              count);
  sm_buffer **named = count ? calloc(count, sizeof *named) : NULL;
  if (count && !named) sm__fatal("-[SMComputeCommandEncoder %s]: out of memory", sel_getName(cmd));
  for (NSUInteger i = 0; i < count; i++) {
    named[i] = as_buffer(cb, sel_getName(cmd), "resources[i]", resources[i]);
    if (!named[i]) {
      free(named);
      return;
    }
  }
  if (!e->concurrent || !count) {
    free(named);
    return;
  }
  command *c = enc_cmd(self, cmd, CMD_BARRIER);
  c->barrier = named;
  c->nbarrier = count;
}

/* ------------------------------------------------------------- registration */
const sm_method_def sm__device_metal_methods[] = {
    SM_METHOD("name", device_name, "@@:"),
    SM_METHOD("registryID", device_registry_id, "Q@:"),
    SM_METHOD("hasUnifiedMemory", device_unified, "C@:"),
    SM_METHOD("maxBufferLength", device_max_buffer, "Q@:"),
    SM_METHOD("recommendedMaxWorkingSetSize", device_working_set, "Q@:"),
    SM_METHOD("currentAllocatedSize", device_allocated, "Q@:"),
    SM_METHOD("maxThreadsPerThreadgroup", device_max_threads, "{MTLSize=QQQ}@:"),
    SM_METHOD("supportsFamily:", device_supports_family, "C@:q"),
    SM_METHOD("newBufferWithLength:options:", device_new_buffer, "@@:QQ"),
    SM_METHOD("newBufferWithBytes:length:options:", device_new_buffer_bytes, "@@:r^vQQ"),
    SM_METHOD("newBufferWithBytesNoCopy:length:options:deallocator:", device_new_buffer_nocopy,
              "@@:^vQQ@?"),
    SM_METHOD("newCommandQueue", device_new_queue, "@@:"),
    SM_METHOD("newCommandQueueWithMaxCommandBufferCount:", device_new_queue_max, "@@:Q"),
    SM_METHOD("newSharedEvent", device_new_event, "@@:"),
    SM_METHOD("newFence", device_new_fence, "@@:"),
    {NULL, NULL, NULL},
};

const sm_method_def sm__buffer_metal_methods[] = {
    SM_METHOD("contents", buffer_contents, "^v@:"),
    SM_METHOD("length", buffer_length, "Q@:"),
    SM_METHOD("storageMode", buffer_storage, "Q@:"),
    SM_METHOD("resourceOptions", buffer_resource_options, "Q@:"),
    SM_METHOD("hazardTrackingMode", buffer_hazard_mode, "Q@:"),
    SM_METHOD("gpuAddress", buffer_gpu_address, "Q@:"),
    SM_METHOD("didModifyRange:", buffer_did_modify, "v@:{_NSRange=QQ}"),
    SM_METHOD("device", buffer_device, "@@:"),
    {NULL, NULL, NULL},
};

const sm_method_def sm__shared_event_metal_methods[] = {
    SM_METHOD("signaledValue", event_value, "Q@:"),
    SM_METHOD("setSignaledValue:", event_set_value, "v@:Q"),
    SM_METHOD("device", event_device, "@@:"),
    {NULL, NULL, NULL},
};

const sm_method_def sm__queue_metal_methods[] = {
    SM_METHOD("commandBuffer", queue_cmdbuf, "@@:"),
    SM_METHOD("commandBufferWithUnretainedReferences", queue_cmdbuf_unretained, "@@:"),
    SM_METHOD("device", queue_device, "@@:"),
    {NULL, NULL, NULL},
};

const sm_method_def sm__cmdbuf_metal_methods[] = {
    SM_METHOD("status", cb_status, "Q@:"),
    SM_METHOD("retainedReferences", cb_retained_refs, "C@:"),
    SM_METHOD("commandQueue", cb_queue, "@@:"),
    SM_METHOD("device", cb_device, "@@:"),
    SM_METHOD("enqueue", cb_enqueue, "v@:"),
    SM_METHOD("commit", cb_commit, "v@:"),
    SM_METHOD("waitUntilCompleted", cb_wait, "v@:"),
    SM_METHOD("error", cb_error, "@@:"),
    SM_METHOD("addCompletedHandler:", cb_add_completed, "v@:@?"),
    SM_METHOD("encodeSignalEvent:value:", cb_signal, "v@:@Q"),
    SM_METHOD("encodeWaitForEvent:value:", cb_wait_event, "v@:@Q"),
    SM_METHOD("blitCommandEncoder", cb_blit_encoder, "@@:"),
    SM_METHOD("computeCommandEncoder", cb_compute_encoder, "@@:"),
    SM_METHOD("computeCommandEncoderWithDispatchType:", cb_compute_encoder_type, "@@:Q"),
    {NULL, NULL, NULL},
};

static const sm_method_def fence_methods[] = {
    SM_METHOD("device", fence_device, "@@:"),
    {NULL, NULL, NULL},
};

const sm_method_def sm__blit_metal_methods[] = {
    SM_METHOD("copyFromBuffer:sourceOffset:toBuffer:destinationOffset:size:", blit_copy,
              "v@:@Q@QQ"),
    SM_METHOD("fillBuffer:range:value:", blit_fill, "v@:@{_NSRange=QQ}C"),
    SM_METHOD("synchronizeResource:", blit_sync, "v@:@"),
    SM_METHOD("updateFence:", enc_update_fence, "v@:@"),
    SM_METHOD("waitForFence:", enc_wait_fence, "v@:@"),
    SM_METHOD("endEncoding", enc_end, "v@:"),
    {NULL, NULL, NULL},
};

const sm_method_def sm__compute_metal_methods[] = {
    SM_METHOD("setComputePipelineState:", comp_set_pipeline, "v@:@"),
    SM_METHOD("setBuffer:offset:atIndex:", comp_set_buffer, "v@:@QQ"),
    SM_METHOD("setBytes:length:atIndex:", comp_set_bytes, "v@:r^vQQ"),
    SM_METHOD("setThreadgroupMemoryLength:atIndex:", comp_set_tg_memory, "v@:QQ"),
    SM_METHOD("dispatchThreads:threadsPerThreadgroup:", comp_dispatch_threads,
              "v@:{MTLSize=QQQ}{MTLSize=QQQ}"),
    SM_METHOD("dispatchThreadgroups:threadsPerThreadgroup:", comp_dispatch_groups,
              "v@:{MTLSize=QQQ}{MTLSize=QQQ}"),
    SM_METHOD("updateFence:", enc_update_fence, "v@:@"),
    SM_METHOD("waitForFence:", enc_wait_fence, "v@:@"),
    SM_METHOD("memoryBarrierWithScope:", comp_barrier_scope, "v@:Q"),
    SM_METHOD("memoryBarrierWithResources:count:", comp_barrier_resources, "v@:^@Q"),
    SM_METHOD("dispatchType", comp_dispatch_type, "Q@:"),
    SM_METHOD("endEncoding", enc_end, "v@:"),
    {NULL, NULL, NULL},
};

/* Composite classes: sm_classes.c defines them from every file's table. */
sm_class *const sm__device_k = &device_class;
sm_class *const sm__buffer_k = &buffer_class;
sm_class *const sm__shared_event_k = &event_class;
sm_class *const sm__queue_k = &queue_class;
sm_class *const sm__cmdbuf_k = &cmdbuf_class;
sm_class *const sm__blit_k = &blit_class;
sm_class *const sm__compute_k = &compute_class;

void sm__register_metal(void) { SM_CLASS_DEFINE(&fence_class, Nil, fence_methods); }
