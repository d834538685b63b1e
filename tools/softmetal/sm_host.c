/* SPDX-License-Identifier: MIT */
/* The host API around softmetal's command path that Metal programs send:
 * debug groups, command buffer times and scheduled handlers, command buffer
 * descriptors, residency sets on queues and command buffers, encoder
 * conveniences (setBuffers:offsets:withRange:, setBufferOffset:atIndex:,
 * indirect dispatch, useResource:usage:), device properties and
 * architecture, MTLEvent, libraries from files, shared event listeners,
 * capture (refused), function descriptors, linked functions (refused) and
 * the compile options' remaining settings. State these need is kept in an
 * object's host record (struct sm_host), made on first use. */
#include "sm_internal.h"

#include <errno.h>
#include <objc/thr.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

enum { CB_COMMITTED = 2, CB_SCHEDULED = 3 };

/* ------------------------------------------------------------- host records */
typedef struct {
  const void *block; /* copied */
  id listener;       /* retained */
  uint64_t value;
} notify_rec;

struct sm_host {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  /* debug groups (command buffers and encoders) */
  char **groups;
  size_t ngroups, gcap;
  /* command buffers */
  double kernel_start, gpu_start, gpu_end, kernel_end;
  bool scheduled, finished;
  void **sched; /* copied blocks */
  size_t nsched;
  NSUInteger error_options;
  /* residency sets (queues, command buffers), retained */
  id *rsets;
  size_t nrsets, rscap;
  /* shared events */
  notify_rec *notes;
  size_t nnotes, ncap;
  /* devices */
  id architecture;
  /* compile options */
  id macros; /* NSDictionary */
  NSInteger opt_level;
  bool logging;
  /* heap buffers */
  id heap; /* retained */
  NSUInteger heap_off, heap_size;
  bool aliasable;
  NSUInteger purgeable;
};

static struct sm_host *host_of(id o) {
  sm_obj *s = (sm_obj *)o;
  struct sm_host *h = atomic_load(&s->host);
  if (h) return h;
  h = calloc(1, sizeof *h);
  if (!h) sm__fatal("-[%s]: out of memory", s->cls->name);
  pthread_mutex_init(&h->mu, NULL);
  pthread_cond_init(&h->cv, NULL);
  h->purgeable = 2; /* NonVolatile */
  struct sm_host *expected = NULL;
  if (!atomic_compare_exchange_strong(&s->host, &expected, h)) {
    pthread_mutex_destroy(&h->mu);
    pthread_cond_destroy(&h->cv);
    free(h);
    return expected;
  }
  return h;
}
static struct sm_host *host_if(id o) { return o ? atomic_load(&((sm_obj *)o)->host) : NULL; }

/* Frees the host record of o (the root dealloc's sm__host_free_hook). */
static void host_free(sm_obj *o) {
  struct sm_host *h = atomic_exchange(&o->host, NULL);
  if (!h) return;
  for (size_t i = 0; i < h->ngroups; i++) free(h->groups[i]);
  free(h->groups);
  for (size_t i = 0; i < h->nsched; i++) sm__block_release(h->sched[i]);
  free(h->sched);
  for (size_t i = 0; i < h->nrsets; i++) sm__release(h->rsets[i]);
  free(h->rsets);
  for (size_t i = 0; i < h->nnotes; i++) { /* never reached: never run */
    sm__block_release(h->notes[i].block);
    sm__release(h->notes[i].listener);
  }
  free(h->notes);
  sm__release(h->architecture);
  sm__release(h->macros);
  if (h->heap) {
    sm__heap_buffer_gone(h->heap, (id)o);
    sm__heap_give_back(h->heap, h->heap_off, h->heap_size, false);
    sm__release(h->heap);
  }
  pthread_mutex_destroy(&h->mu);
  pthread_cond_destroy(&h->cv);
  free(h);
}

/* Heap buffers (sm_heap.c). */
void sm__host_set_heap_slot(id buffer, id heap, NSUInteger off, NSUInteger size) {
  struct sm_host *h = host_of(buffer);
  h->heap = heap;
  h->heap_off = off;
  h->heap_size = size;
}
bool sm__host_heap_slot(id buffer, id *heap, NSUInteger *off, NSUInteger *size) {
  struct sm_host *h = host_if(buffer);
  if (!h || !h->heap) return false;
  *heap = h->heap;
  *off = h->heap_off;
  *size = h->heap_size;
  return true;
}
void sm__host_set_aliasable(id buffer) { host_of(buffer)->aliasable = true; }
bool sm__host_aliasable(id buffer) {
  struct sm_host *h = host_if(buffer);
  return h && h->aliasable;
}
NSUInteger *sm__host_purgeable(id buffer) { return &host_of(buffer)->purgeable; }

/* ------------------------------------------------------------- messages */
static id send_id(id o, const char *sel) {
  return ((id(*)(id, SEL))(void (*)(void))sm__lookup(o, sel))(o, sel_registerName(sel));
}
static NSUInteger send_u(id o, const char *sel) {
  return ((NSUInteger(*)(id, SEL))(void (*)(void))sm__lookup(o, sel))(o, sel_registerName(sel));
}
static const char *cls_name(id o) { return o ? object_getClassName(o) : "nil"; }

static double now_seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* ------------------------------------------------------------- debug groups */
static void group_push(id self, SEL cmd, id name) {
  if (!sm__is_string(name))
    sm__fatal("-[%s %s]: string is %s, not an NSString", cls_name(self), sel_getName(cmd),
              cls_name(name));
  struct sm_host *h = host_of(self);
  char *copy = strdup(sm__string_utf8(name));
  pthread_mutex_lock(&h->mu);
  if (h->ngroups == h->gcap) {
    if (!sm__grow(&h->groups, &h->gcap, sizeof *h->groups, 4) || !copy)
      sm__fatal("-[%s %s]: out of memory", cls_name(self), sel_getName(cmd));
  }
  h->groups[h->ngroups++] = copy;
  pthread_mutex_unlock(&h->mu);
}
static void group_pop(id self, SEL cmd) {
  struct sm_host *h = host_if(self);
  if (!h || !h->ngroups)
    sm__fatal("-[%s %s]: no debug group is open (pushDebugGroup:)", cls_name(self),
              sel_getName(cmd));
  pthread_mutex_lock(&h->mu);
  free(h->groups[--h->ngroups]);
  pthread_mutex_unlock(&h->mu);
}
static void signpost(id self, SEL cmd, id name) {
  if (!sm__is_string(name))
    sm__fatal("-[%s %s]: string is %s, not an NSString", cls_name(self), sel_getName(cmd),
              cls_name(name));
}
static void append_groups(struct sm_host *h, char *out, size_t len, size_t *at, bool *any) {
  if (!h) return;
  pthread_mutex_lock(&h->mu);
  for (size_t i = 0; i < h->ngroups && *at < len; i++) {
    int n =
        snprintf(out + *at, len - *at, "%s'%s'", *any ? " > " : " (debug groups: ", h->groups[i]);
    if (n > 0) *at += (size_t)n;
    *any = true;
  }
  pthread_mutex_unlock(&h->mu);
}
static void host_debug_groups(id cmdbuf, id encoder, char *out, size_t len) {
  size_t at = strlen(out);
  bool any = false;
  append_groups(host_if(cmdbuf), out, len, &at, &any);
  append_groups(host_if(encoder), out, len, &at, &any);
  if (any && at + 1 < len) {
    out[at] = ')';
    out[at + 1] = 0;
  }
}

static void cb_require_open(id cb, SEL cmd) {
  NSUInteger st = send_u(cb, "status");
  if (st >= CB_COMMITTED)
    sm__fatal("-[SMCommandBuffer %s]: command buffer already committed (status %lu)",
              sel_getName(cmd), st);
}
static void cb_push_group(id self, SEL cmd, id name) {
  cb_require_open(self, cmd);
  group_push(self, cmd, name);
}
static void cb_pop_group(id self, SEL cmd) {
  cb_require_open(self, cmd);
  group_pop(self, cmd);
}

/* ------------------------------------------------------------- command buffer times */
/* Host times (seconds of CLOCK_MONOTONIC, as CFTimeInterval) of the command
 * buffer's execution on its queue thread; 0 until it has completed. */
static void host_cb_scheduled(id cb) {
  struct sm_host *h = host_of(cb);
  pthread_mutex_lock(&h->mu);
  h->kernel_start = now_seconds();
  size_t n = h->nsched;
  void **sched = h->sched;
  h->sched = NULL;
  h->nsched = 0;
  pthread_mutex_unlock(&h->mu);
  if (n) {
    void *pool = sm__pool_push();
    for (size_t i = 0; i < n; i++) {
      sm__block_invoke_handler(sched[i], cb);
      sm__block_release(sched[i]);
    }
    sm__pool_pop(pool);
  }
  free(sched);
  pthread_mutex_lock(&h->mu);
  h->scheduled = true;
  pthread_cond_broadcast(&h->cv);
  h->gpu_start = now_seconds();
  pthread_mutex_unlock(&h->mu);
}
static void host_cb_finished(id cb) {
  struct sm_host *h = host_of(cb);
  pthread_mutex_lock(&h->mu);
  h->gpu_end = now_seconds();
  h->kernel_end = now_seconds();
  h->finished = true;
  pthread_mutex_unlock(&h->mu);
}
static bool host_cb_has_scheduled(id cb) {
  struct sm_host *h = host_if(cb);
  if (!h) return false;
  pthread_mutex_lock(&h->mu);
  bool any = h->nsched > 0;
  pthread_mutex_unlock(&h->mu);
  return any;
}
static double cb_time(id self, int which) {
  struct sm_host *h = host_if(self);
  if (!h) return 0;
  pthread_mutex_lock(&h->mu);
  double t = !h->finished ? 0
             : which == 0 ? h->gpu_start
             : which == 1 ? h->gpu_end
             : which == 2 ? h->kernel_start
                          : h->kernel_end;
  pthread_mutex_unlock(&h->mu);
  return t;
}
static double cb_gpu_start(id self, SEL cmd) {
  (void)cmd;
  return cb_time(self, 0);
}
static double cb_gpu_end(id self, SEL cmd) {
  (void)cmd;
  return cb_time(self, 1);
}
static double cb_kernel_start(id self, SEL cmd) {
  (void)cmd;
  return cb_time(self, 2);
}
static double cb_kernel_end(id self, SEL cmd) {
  (void)cmd;
  return cb_time(self, 3);
}

static void cb_add_scheduled(id self, SEL cmd, const void *block) {
  if (!block) sm__fatal("-[SMCommandBuffer %s]: block = nil", sel_getName(cmd));
  cb_require_open(self, cmd);
  struct sm_host *h = host_of(self);
  pthread_mutex_lock(&h->mu);
  void **g = realloc(h->sched, (h->nsched + 1) * sizeof *g);
  if (!g) sm__fatal("-[SMCommandBuffer %s]: out of memory", sel_getName(cmd));
  h->sched = g;
  h->sched[h->nsched++] = sm__block_copy(block);
  pthread_mutex_unlock(&h->mu);
}
static void cb_wait_scheduled(id self, SEL cmd) {
  NSUInteger st = send_u(self, "status");
  if (st < CB_COMMITTED)
    sm__fatal("-[SMCommandBuffer %s]: command buffer not committed (status %lu): this would "
              "wait forever",
              sel_getName(cmd), st);
  struct sm_host *h = host_of(self);
  pthread_mutex_lock(&h->mu);
  while (!h->scheduled) pthread_cond_wait(&h->cv, &h->mu);
  pthread_mutex_unlock(&h->mu);
}
static NSUInteger cb_error_options(id self, SEL cmd) {
  (void)cmd;
  struct sm_host *h = host_if(self);
  return h ? h->error_options : 0;
}

/* ------------------------------------------------------------- residency on queues */
static void rsets_add(id self, SEL cmd, const id *sets, NSUInteger count) {
  if (count && !sets) sm__fatal("-[%s %s]: residencySets = NULL", cls_name(self), sel_getName(cmd));
  id dev = send_id(self, "device");
  for (NSUInteger i = 0; i < count; i++) {
    if (!sm__is_residency_set(sets[i]))
      sm__fatal("-[%s %s]: residency set %lu is %s, not an MTLResidencySet", cls_name(self),
                sel_getName(cmd), i, cls_name(sets[i]));
    if (sm__residency_set_device(sets[i]) != dev)
      sm__fatal("-[%s %s]: residency set %lu belongs to another device", cls_name(self),
                sel_getName(cmd), i);
  }
  struct sm_host *h = host_of(self);
  pthread_mutex_lock(&h->mu);
  for (NSUInteger i = 0; i < count; i++) {
    bool have = false;
    for (size_t k = 0; k < h->nrsets; k++) have |= h->rsets[k] == sets[i];
    if (have) continue;
    if (h->nrsets == h->rscap) {
      if (!sm__grow(&h->rsets, &h->rscap, sizeof *h->rsets, 4))
        sm__fatal("-[%s %s]: out of memory", cls_name(self), sel_getName(cmd));
    }
    h->rsets[h->nrsets++] = sm__retain(sets[i]);
  }
  pthread_mutex_unlock(&h->mu);
}
static void rsets_remove(id self, SEL cmd, const id *sets, NSUInteger count) {
  if (count && !sets) sm__fatal("-[%s %s]: residencySets = NULL", cls_name(self), sel_getName(cmd));
  struct sm_host *h = host_if(self);
  if (!h) return;
  pthread_mutex_lock(&h->mu);
  for (NSUInteger i = 0; i < count; i++)
    for (size_t k = 0; k < h->nrsets; k++)
      if (h->rsets[k] == sets[i]) {
        sm__release(h->rsets[k]);
        h->rsets[k] = h->rsets[--h->nrsets];
        break;
      }
  pthread_mutex_unlock(&h->mu);
}
static void rset_add_one(id self, SEL cmd, id set) { rsets_add(self, cmd, &set, 1); }
static void rset_remove_one(id self, SEL cmd, id set) { rsets_remove(self, cmd, &set, 1); }
static void cb_use_rsets(id self, SEL cmd, const id *sets, NSUInteger count) {
  cb_require_open(self, cmd);
  rsets_add(self, cmd, sets, count);
}
static void cb_use_rset(id self, SEL cmd, id set) { cb_use_rsets(self, cmd, &set, 1); }

/* ------------------------------------------------------------- command buffer descriptors */
typedef struct {
  sm_obj hdr;
  bool retained;
  NSUInteger error_options;
} sm_cb_desc;
static sm_class cb_desc_class = {"MTLCommandBufferDescriptor", sizeof(sm_cb_desc), NULL, Nil, 0};
static id cbd_init(id self, SEL cmd) {
  (void)cmd;
  ((sm_cb_desc *)self)->retained = true;
  return self;
}
static BOOL cbd_retained(id self, SEL cmd) {
  (void)cmd;
  return ((sm_cb_desc *)self)->retained;
}
static void cbd_set_retained(id self, SEL cmd, BOOL v) {
  (void)cmd;
  ((sm_cb_desc *)self)->retained = v;
}
static NSUInteger cbd_error_options(id self, SEL cmd) {
  (void)cmd;
  return ((sm_cb_desc *)self)->error_options;
}
static void cbd_set_error_options(id self, SEL cmd, NSUInteger v) {
  if (v > 1)
    sm__fatal("-[MTLCommandBufferDescriptor %s]: errorOptions = %lu is not an "
              "MTLCommandBufferErrorOption (None 0, EncoderExecutionStatus 1)",
              sel_getName(cmd), v);
  ((sm_cb_desc *)self)->error_options = v;
}
static id queue_cb_with_desc(id self, SEL cmd, id desc) {
  if (!sm__is(desc, &cb_desc_class))
    sm__fatal("-[SMCommandQueue %s]: descriptor is %s, not an MTLCommandBufferDescriptor",
              sel_getName(cmd), cls_name(desc));
  sm_cb_desc *d = (sm_cb_desc *)desc;
  id cb = send_id(self, d->retained ? "commandBuffer" : "commandBufferWithUnretainedReferences");
  if (cb) host_of(cb)->error_options = d->error_options;
  return cb;
}

/* ------------------------------------------------------------- encoders */
static void enc_set_buffers(id self, SEL cmd, const id *buffers, const NSUInteger *offsets,
                            NSRange range) {
  (void)cmd;
  void (*set)(id, SEL, id, NSUInteger, NSUInteger) =
      (void (*)(id, SEL, id, NSUInteger, NSUInteger))(void (*)(void))sm__lookup(
          self, "setBuffer:offset:atIndex:");
  SEL s = sel_registerName("setBuffer:offset:atIndex:");
  if (range.length && (!buffers || !offsets))
    sm__fatal("-[SMComputeCommandEncoder %s]: buffers or offsets = NULL", sel_getName(cmd));
  if (range.length && range.location > (NSUInteger)-1 - (range.length - 1))
    sm__fatal("-[SMComputeCommandEncoder %s]: range {%lu, %lu} overflows", sel_getName(cmd),
              range.location, range.length);
  for (NSUInteger i = 0; i < range.length; i++)
    set(self, s, buffers[i], offsets[i], range.location + i);
}
static void enc_set_buffer_offset(id self, SEL cmd, NSUInteger offset, NSUInteger index) {
  NSUInteger old;
  id b = sm__encoder_buffer(self, index, &old);
  if (!b) {
    char msg[256];
    snprintf(msg, sizeof msg, "%s: no buffer is bound at index %lu (setBuffer:offset:atIndex:)",
             sel_getName(cmd), index);
    sm__cmdbuf_fail(sm__encoder_cmdbuf(self), msg);
    return;
  }
  ((void (*)(id, SEL, id, NSUInteger, NSUInteger))(void (*)(void))sm__lookup(
      self, "setBuffer:offset:atIndex:"))(self, sel_registerName("setBuffer:offset:atIndex:"), b,
                                          offset, index);
}
static void enc_dispatch_indirect(id self, SEL cmd, id buffer, NSUInteger offset, MTLSize tg) {
  sm__encoder_dispatch_indirect(self, cmd, buffer, offset, tg);
}
static void check_resource(id self, SEL cmd, id r, NSUInteger usage, bool heap_only) {
  bool buffer = sm__is_named(r, "SMBuffer"), heap = sm__is_named(r, "SMHeap");
  if (heap_only ? !heap : !(buffer || heap))
    sm__fatal("-[SMComputeCommandEncoder %s]: %s is %s, not an %s", sel_getName(cmd),
              heap_only ? "heap" : "resource", cls_name(r), heap_only ? "MTLHeap" : "MTLResource");
  if (usage == 0 || usage > 7)
    sm__fatal("-[SMComputeCommandEncoder %s]: usage = %lu is not an MTLResourceUsage "
              "(Read 1 | Write 2 | Sample 4)",
              sel_getName(cmd), usage);
  id dev = send_id(r, "device");
  id mine = send_id(sm__encoder_cmdbuf(self), "device");
  if (dev != mine) {
    char msg[256];
    snprintf(msg, sizeof msg,
             "%s: the resource belongs to another device than the command "
             "queue's",
             sel_getName(cmd));
    sm__cmdbuf_fail(sm__encoder_cmdbuf(self), msg);
  }
}
/* Every allocation is resident on the CPU: the calls are checked, and an
 * untracked buffer becomes a use of later dispatches for the hazard checks
 * (what an argument buffer reaches). */
static void enc_use_resource(id self, SEL cmd, id r, NSUInteger usage) {
  check_resource(self, cmd, r, usage, false);
  sm__encoder_use(self, r, usage & 2);
}
static void enc_use_resources(id self, SEL cmd, const id *rs, NSUInteger count, NSUInteger usage) {
  if (count && !rs) sm__fatal("-[SMComputeCommandEncoder %s]: resources = NULL", sel_getName(cmd));
  for (NSUInteger i = 0; i < count; i++) {
    check_resource(self, cmd, rs[i], usage, false);
    sm__encoder_use(self, rs[i], usage & 2);
  }
}
/* A heap's buffers may be read (Metal's useHeap: is read-only): its untracked
 * ones become reads of later dispatches. */
static void enc_use_heap(id self, SEL cmd, id heap) {
  check_resource(self, cmd, heap, 1, true);
  sm__heap_use(heap, self);
}
static void enc_use_heaps(id self, SEL cmd, const id *hs, NSUInteger count) {
  if (count && !hs) sm__fatal("-[SMComputeCommandEncoder %s]: heaps = NULL", sel_getName(cmd));
  for (NSUInteger i = 0; i < count; i++) {
    check_resource(self, cmd, hs[i], 1, true);
    sm__heap_use(hs[i], self);
  }
}
static id enc_device(id self, SEL cmd) {
  (void)cmd;
  return send_id(sm__encoder_cmdbuf(self), "device");
}
static id enc_cmdbuf(id self, SEL cmd) {
  (void)cmd;
  return sm__encoder_cmdbuf(self);
}

/* ------------------------------------------------------------- device */
typedef struct {
  sm_obj hdr;
  id name;
} sm_arch;
static void arch_destroy(sm_obj *o) { sm__release(((sm_arch *)o)->name); }
static sm_class arch_class = {"MTLArchitecture", sizeof(sm_arch), arch_destroy, Nil, 0};
static id arch_name(id self, SEL cmd) {
  (void)cmd;
  return ((sm_arch *)self)->name;
}

/* The architecture softmetal stands for: an Apple GPU of family Apple9 (as
 * supportsFamily: answers), generation 15, base ('g') configuration. */
#define SM_ARCHITECTURE "applegpu_g15g"
static id device_architecture(id self, SEL cmd) {
  (void)cmd;
  struct sm_host *h = host_of(self);
  pthread_mutex_lock(&h->mu);
  if (!h->architecture) {
    sm_arch *a = sm__new(&arch_class);
    if (!a) sm__fatal("-[SMDevice architecture]: out of memory");
    a->name = sm__string(SM_ARCHITECTURE);
    h->architecture = (id)a;
  }
  id a = h->architecture;
  pthread_mutex_unlock(&h->mu);
  return a;
}
static NSUInteger device_max_tg_memory(id s, SEL c) {
  (void)s;
  (void)c;
  return sm__persona()->max_tg_memory;
}
static BOOL device_no(id s, SEL c) {
  (void)s;
  (void)c;
  return 0;
}
static NSUInteger device_zero(id s, SEL c) {
  (void)s;
  (void)c;
  return 0;
}
static NSUInteger device_arg_tier(id s, SEL c) {
  (void)s;
  (void)c;
  return 1;
} /* Tier2 */

/* MTLEvent: an event only command buffers signal and wait for. softmetal's
 * is a shared event whose host-side selectors are refused as unknown. */
static Class g_event_class;
static void not_an_mtlevent(id self, SEL cmd) {
  sm__fatal("-[SMEvent %s]: unrecognized selector sent to %p (an MTLEvent from newEvent is "
            "not an MTLSharedEvent: use newSharedEvent)",
            sel_getName(cmd), (void *)self);
}
static id device_new_mtl_event(id self, SEL cmd) {
  (void)cmd;
  id e = send_id(self, "newSharedEvent");
  if (e) object_setClass(e, g_event_class);
  return e;
}

/* Libraries from files: softmetal's container (softmetal-metallib), through
 * newLibraryWithData:error:. */
enum { LIB_ERROR_FILE_NOT_FOUND = 6 };
static void set_error(id *error, id e) {
  if (error)
    *error = sm__autorelease(e);
  else
    sm__release(e);
}
static id library_from_path(id self, SEL cmd, const char *path, id *error) {
  FILE *f = path ? fopen(path, "rb") : NULL;
  if (!f) {
    set_error(error, sm__error("MTLLibraryErrorDomain", LIB_ERROR_FILE_NOT_FOUND,
                               "%s: cannot open '%s': %s", sel_getName(cmd), path ? path : "(nil)",
                               path ? strerror(errno) : "no path"));
    return nil;
  }
  size_t cap = 1 << 16, n = 0, got;
  unsigned char *buf = malloc(cap);
  while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
    n += got;
    if (n == cap) {
      unsigned char *g = realloc(buf, cap * 2);
      if (!g) {
        free(buf);
        buf = NULL;
        break;
      }
      buf = g;
      cap *= 2;
    }
  }
  bool bad = ferror(f);
  fclose(f);
  if (!buf || bad) {
    free(buf);
    set_error(error, sm__error("MTLLibraryErrorDomain", LIB_ERROR_FILE_NOT_FOUND,
                               "%s: cannot read '%s'", sel_getName(cmd), path));
    return nil;
  }
  id data = dispatch_data_create(buf, n, NULL, NULL);
  free(buf);
  id lib =
      ((id(*)(id, SEL, id, id *))(void (*)(void))sm__lookup(self, "newLibraryWithData:error:"))(
          self, sel_registerName("newLibraryWithData:error:"), data, error);
  sm__release(data);
  return lib;
}
static id device_library_file(id self, SEL cmd, id path, id *error) {
  if (path && !sm__is_string(path))
    sm__fatal("-[SMDevice %s]: filepath is %s, not an NSString", sel_getName(cmd), cls_name(path));
  return library_from_path(self, cmd, sm__string_utf8(path), error);
}
static id device_library_url(id self, SEL cmd, id url, id *error) {
  if (!sm__is_named(url, "NSURL"))
    sm__fatal("-[SMDevice %s]: url is %s, not a file NSURL", sel_getName(cmd), cls_name(url));
  return library_from_path(self, cmd, sm__string_utf8(send_id(url, "path")), error);
}

/* ------------------------------------------------------------- shared event listeners */
typedef struct {
  const void *block;
  id event;
  uint64_t value;
} listener_item;

/* The listener's queue lives apart from the object: a block that drops the
 * last reference to its own listener leaves the thread to free it. */
typedef struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  listener_item *items;
  size_t head, n, cap;
  bool stop, detached;
} listener_core;

typedef struct {
  sm_obj hdr;
  listener_core *core;
  bool started;
  pthread_t thread;
} sm_listener;

static void core_free(listener_core *c) {
  pthread_mutex_destroy(&c->mu);
  pthread_cond_destroy(&c->cv);
  free(c->items);
  free(c);
}

static void *listener_main(void *arg) {
  objc_thread_add();
  listener_core *l = arg;
  pthread_mutex_lock(&l->mu);
  for (;;) {
    while (l->head == l->n && !l->stop) pthread_cond_wait(&l->cv, &l->mu);
    if (l->head == l->n) break;
    listener_item it = l->items[l->head++];
    if (l->head == l->n) l->head = l->n = 0;
    pthread_mutex_unlock(&l->mu);
    void *pool = sm__pool_push();
    typedef struct {
      void *isa;
      int flags, reserved;
      void (*invoke)(const void *, id, uint64_t);
    } blk;
    ((const blk *)it.block)->invoke(it.block, it.event, it.value);
    sm__pool_pop(pool);
    sm__block_release(it.block);
    sm__release(it.event);
    pthread_mutex_lock(&l->mu);
  }
  bool detached = l->detached;
  pthread_mutex_unlock(&l->mu);
  if (detached) core_free(l);
  objc_thread_remove();
  return NULL;
}

/* Pending notifications run before the thread stops (they hold no
 * reference to the listener, as Metal's). */
static void listener_destroy(sm_obj *o) {
  sm_listener *l = (sm_listener *)o;
  listener_core *c = l->core;
  if (!c) return;
  if (!l->started) {
    core_free(c);
    return;
  }
  bool self = pthread_equal(pthread_self(), l->thread);
  pthread_mutex_lock(&c->mu);
  c->stop = true;
  c->detached = self;
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
  if (self) {
    pthread_detach(l->thread);
  } else {
    pthread_join(l->thread, NULL);
    core_free(c);
  }
}
static sm_class listener_class = {"MTLSharedEventListener", sizeof(sm_listener), listener_destroy,
                                  Nil, 0};
static id listener_init(id self, SEL cmd) {
  sm_listener *l = (sm_listener *)self;
  if (l->core) sm__fatal("-[MTLSharedEventListener %s]: already initialised", sel_getName(cmd));
  l->core = calloc(1, sizeof *l->core);
  if (!l->core) sm__fatal("-[MTLSharedEventListener %s]: out of memory", sel_getName(cmd));
  pthread_mutex_init(&l->core->mu, NULL);
  pthread_cond_init(&l->core->cv, NULL);
  return self;
}
static id listener_init_queue(id self, SEL cmd, void *queue) {
  if (queue)
    sm__fatal("-[MTLSharedEventListener %s]: softmetal has no dispatch queues: pass nil (or use "
              "init) and notification blocks run, in order, on the listener's own thread",
              sel_getName(cmd));
  return listener_init(self, cmd);
}
static void listener_post(sm_listener *l, const void *block, id event, uint64_t value) {
  listener_core *c = l->core;
  pthread_mutex_lock(&c->mu);
  if (!l->started) {
    if (pthread_create(&l->thread, NULL, listener_main, c) != 0)
      sm__fatal("MTLSharedEventListener: cannot start its thread");
    l->started = true;
  }
  if (c->n == c->cap) {
    if (!sm__grow(&c->items, &c->cap, sizeof *c->items, 8))
      sm__fatal("MTLSharedEventListener: out of memory");
  }
  c->items[c->n++] = (listener_item){block, sm__retain(event), value};
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
}

/* Hands the notifications the event's value reached to their listeners. */
static void event_fire(id event, uint64_t value) {
  struct sm_host *h = host_if(event);
  if (!h) return;
  pthread_mutex_lock(&h->mu);
  pthread_cond_broadcast(&h->cv);
  size_t keep = 0, nfire = 0;
  notify_rec fire[16];
  for (size_t i = 0; i < h->nnotes; i++) {
    if (h->notes[i].value <= value && nfire < 16)
      fire[nfire++] = h->notes[i];
    else
      h->notes[keep++] = h->notes[i];
  }
  h->nnotes = keep;
  bool more = false;
  for (size_t i = 0; i < keep; i++) more |= h->notes[i].value <= value;
  pthread_mutex_unlock(&h->mu);
  for (size_t i = 0; i < nfire; i++) {
    listener_post((sm_listener *)fire[i].listener, fire[i].block, event, fire[i].value);
    sm__release(fire[i].listener);
  }
  if (more) event_fire(event, value);
}
static void host_event_signaled(id event, uint64_t value) { event_fire(event, value); }

static uint64_t event_value(id e) {
  return ((uint64_t (*)(id, SEL))(void (*)(void))sm__lookup(e, "signaledValue"))(
      e, sel_registerName("signaledValue"));
}
static void event_notify(id self, SEL cmd, id listener, uint64_t value, const void *block) {
  if (!sm__is(listener, &listener_class) || !((sm_listener *)listener)->core)
    sm__fatal("-[SMSharedEvent %s]: listener is %s, not an initialised MTLSharedEventListener",
              sel_getName(cmd), cls_name(listener));
  if (!block) sm__fatal("-[SMSharedEvent %s]: block = nil", sel_getName(cmd));
  struct sm_host *h = host_of(self);
  pthread_mutex_lock(&h->mu);
  if (h->nnotes == h->ncap) {
    if (!sm__grow(&h->notes, &h->ncap, sizeof *h->notes, 4))
      sm__fatal("-[SMSharedEvent %s]: out of memory", sel_getName(cmd));
  }
  h->notes[h->nnotes++] = (notify_rec){sm__block_copy(block), sm__retain(listener), value};
  pthread_mutex_unlock(&h->mu);
  event_fire(self, event_value(self)); /* at once when the value is already reached */
}
static BOOL event_wait_timeout(id self, SEL cmd, uint64_t value, uint64_t ms) {
  (void)cmd;
  struct sm_host *h = host_of(self);
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += (time_t)(ms / 1000);
  until.tv_nsec += (long)(ms % 1000) * 1000000L;
  if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
  pthread_mutex_lock(&h->mu);
  BOOL ok;
  while (!(ok = event_value(self) >= value))
    if (pthread_cond_timedwait(&h->cv, &h->mu, &until) == ETIMEDOUT) {
      ok = event_value(self) >= value;
      break;
    }
  pthread_mutex_unlock(&h->mu);
  return ok;
}

/* ------------------------------------------------------------- capture */
/* GPU capture has no meaning on the CPU: starting one fails with an NSError
 * (MTLCaptureErrorDomain, NotSupported 1); scopes and descriptors keep
 * their state. */
typedef struct {
  sm_obj hdr;
  id object; /* retained: a device, queue or scope */
  NSUInteger destination;
  id url;
} sm_capture_desc;
static void cdesc_destroy(sm_obj *o) {
  sm__release(((sm_capture_desc *)o)->object);
  sm__release(((sm_capture_desc *)o)->url);
}
static sm_class cdesc_class = {"MTLCaptureDescriptor", sizeof(sm_capture_desc), cdesc_destroy, Nil,
                               0};
static id cdesc_init(id self, SEL cmd) {
  (void)cmd;
  ((sm_capture_desc *)self)->destination = 1; /* DeveloperTools */
  return self;
}
static id cdesc_object(id self, SEL cmd) {
  (void)cmd;
  return ((sm_capture_desc *)self)->object;
}
static void cdesc_set_object(id self, SEL cmd, id o) {
  (void)cmd;
  sm_capture_desc *d = (sm_capture_desc *)self;
  sm__retain(o);
  sm__release(d->object);
  d->object = o;
}
static NSUInteger cdesc_destination(id self, SEL cmd) {
  (void)cmd;
  return ((sm_capture_desc *)self)->destination;
}
static void cdesc_set_destination(id self, SEL cmd, NSUInteger v) {
  if (v != 1 && v != 2)
    sm__fatal("-[MTLCaptureDescriptor %s]: destination = %lu is not an MTLCaptureDestination "
              "(DeveloperTools 1, GPUTraceDocument 2)",
              sel_getName(cmd), v);
  ((sm_capture_desc *)self)->destination = v;
}
static id cdesc_url(id self, SEL cmd) {
  (void)cmd;
  return ((sm_capture_desc *)self)->url;
}
static void cdesc_set_url(id self, SEL cmd, id u) {
  (void)cmd;
  sm_capture_desc *d = (sm_capture_desc *)self;
  sm__retain(u);
  sm__release(d->url);
  d->url = u;
}

typedef struct {
  sm_obj hdr;
  id target; /* device or queue, retained */
  int open;
} sm_scope;
static void scope_destroy(sm_obj *o) { sm__release(((sm_scope *)o)->target); }
static sm_class scope_class = {"MTLCaptureScope", sizeof(sm_scope), scope_destroy, Nil, 0};
static void scope_begin(id self, SEL cmd) {
  (void)cmd;
  ((sm_scope *)self)->open++;
}
static void scope_end(id self, SEL cmd) {
  sm_scope *s = (sm_scope *)self;
  if (!s->open) sm__fatal("-[MTLCaptureScope %s]: the scope was not begun", sel_getName(cmd));
  s->open--;
}
static id scope_device(id self, SEL cmd) {
  (void)cmd;
  id t = ((sm_scope *)self)->target;
  return sm__is_named(t, "SMDevice") ? t : send_id(t, "device");
}
static id scope_queue(id self, SEL cmd) {
  (void)cmd;
  id t = ((sm_scope *)self)->target;
  return sm__is_named(t, "SMCommandQueue") ? t : nil;
}

typedef struct {
  sm_obj hdr;
  pthread_mutex_t mu;
  id default_scope; /* retained */
} sm_capture;
static sm_class capture_class = {"MTLCaptureManager", sizeof(sm_capture), NULL, Nil, 0};
static id g_capture;
static pthread_once_t g_capture_once = PTHREAD_ONCE_INIT;
static void capture_make(void) {
  sm_capture *c = sm__new(&capture_class);
  if (!c) sm__fatal("+[MTLCaptureManager sharedCaptureManager]: out of memory");
  pthread_mutex_init(&c->mu, NULL);
  g_capture = sm__immortal((id)c);
}
static id capture_shared(id cls, SEL cmd) {
  (void)cls;
  (void)cmd;
  pthread_once(&g_capture_once, capture_make);
  return g_capture;
}
static BOOL capture_supports(id self, SEL cmd, NSUInteger dest) {
  (void)self;
  (void)cmd;
  (void)dest;
  return 0;
}
static BOOL capture_start(id self, SEL cmd, id desc, id *error) {
  (void)self;
  if (!sm__is(desc, &cdesc_class))
    sm__fatal("-[MTLCaptureManager %s]: descriptor is %s, not an MTLCaptureDescriptor",
              sel_getName(cmd), cls_name(desc));
  set_error(error, sm__error("MTLCaptureErrorDomain", 1,
                             "%s: GPU capture is not supported by softmetal (software Metal on "
                             "the CPU): there is no GPU trace to record",
                             sel_getName(cmd)));
  return 0;
}
static void capture_start_legacy(id self, SEL cmd, id target) {
  (void)self;
  (void)target;
  fprintf(stderr,
          "softmetal: -[MTLCaptureManager %s]: GPU capture is not supported; "
          "nothing is captured\n",
          sel_getName(cmd));
}
static void capture_noop(id self, SEL cmd) {
  (void)self;
  (void)cmd;
}
static BOOL capture_is_capturing(id self, SEL cmd) {
  (void)self;
  (void)cmd;
  return 0;
}
static id capture_new_scope(id self, SEL cmd, id target) {
  (void)self;
  if (!sm__is_named(target, "SMDevice") && !sm__is_named(target, "SMCommandQueue"))
    sm__fatal("-[MTLCaptureManager %s]: %s is not an MTLDevice or MTLCommandQueue",
              sel_getName(cmd), cls_name(target));
  sm_scope *s = sm__new(&scope_class);
  if (!s) return nil;
  s->target = sm__retain(target);
  return (id)s;
}
static id capture_default_scope(id self, SEL cmd) {
  (void)cmd;
  sm_capture *c = (sm_capture *)self;
  pthread_mutex_lock(&c->mu);
  id s = c->default_scope;
  pthread_mutex_unlock(&c->mu);
  return s;
}
static void capture_set_default_scope(id self, SEL cmd, id scope) {
  if (scope && !sm__is(scope, &scope_class))
    sm__fatal("-[MTLCaptureManager %s]: %s is not an MTLCaptureScope", sel_getName(cmd),
              cls_name(scope));
  sm_capture *c = (sm_capture *)self;
  sm__retain(scope);
  pthread_mutex_lock(&c->mu);
  id old = c->default_scope;
  c->default_scope = scope;
  pthread_mutex_unlock(&c->mu);
  sm__release(old);
}

/* ------------------------------------------------------------- functions */
typedef struct {
  sm_obj hdr;
  id name, specialized, values;
  NSUInteger options;
} sm_fdesc;
static void fdesc_destroy(sm_obj *o) {
  sm_fdesc *d = (sm_fdesc *)o;
  sm__release(d->name);
  sm__release(d->specialized);
  sm__release(d->values);
}
static sm_class fdesc_class = {"MTLFunctionDescriptor", sizeof(sm_fdesc), fdesc_destroy, Nil, 0};
static id fdesc_make(id cls, SEL cmd) {
  (void)cls;
  (void)cmd;
  return sm__autorelease(sm__new(&fdesc_class));
}
static void swap_string(id *slot, id v, SEL cmd) {
  if (v && !sm__is_string(v))
    sm__fatal("-[MTLFunctionDescriptor %s]: %s is not an NSString", sel_getName(cmd), cls_name(v));
  id c = sm__string_copy(v);
  sm__release(*slot);
  *slot = c;
}
static id fdesc_name(id self, SEL cmd) {
  (void)cmd;
  return ((sm_fdesc *)self)->name;
}
static void fdesc_set_name(id self, SEL cmd, id v) {
  swap_string(&((sm_fdesc *)self)->name, v, cmd);
}
static id fdesc_specialized(id self, SEL cmd) {
  (void)cmd;
  return ((sm_fdesc *)self)->specialized;
}
static void fdesc_set_specialized(id self, SEL cmd, id v) {
  swap_string(&((sm_fdesc *)self)->specialized, v, cmd);
}
static id fdesc_values(id self, SEL cmd) {
  (void)cmd;
  return ((sm_fdesc *)self)->values;
}
static void fdesc_set_values(id self, SEL cmd, id v) {
  if (v && !sm__is_named(v, "MTLFunctionConstantValues"))
    sm__fatal("-[MTLFunctionDescriptor %s]: %s is not an MTLFunctionConstantValues",
              sel_getName(cmd), cls_name(v));
  sm_fdesc *d = (sm_fdesc *)self;
  sm__retain(v);
  sm__release(d->values);
  d->values = v; /* Metal copies; softmetal's values are read when the function is made */
}
static NSUInteger fdesc_options(id self, SEL cmd) {
  (void)cmd;
  return ((sm_fdesc *)self)->options;
}
static void fdesc_set_options(id self, SEL cmd, NSUInteger v) {
  if (v & ~(NSUInteger)1)
    sm__fatal("-[MTLFunctionDescriptor %s]: options = 0x%lx: softmetal has MTLFunctionOptionNone "
              "(0) and CompileToBinary (1) only",
              sel_getName(cmd), v);
  ((sm_fdesc *)self)->options = v;
}
static id library_function_desc(id self, SEL cmd, id desc, id *error) {
  if (!sm__is(desc, &fdesc_class))
    sm__fatal("-[SMLibrary %s]: descriptor is %s, not an MTLFunctionDescriptor", sel_getName(cmd),
              cls_name(desc));
  sm_fdesc *d = (sm_fdesc *)desc;
  if (d->values)
    return ((id(*)(id, SEL, id, id, id *))(void (*)(void))sm__lookup(
        self, "newFunctionWithName:constantValues:error:"))(
        self, sel_registerName("newFunctionWithName:constantValues:error:"), d->name, d->values,
        error);
  id f = ((id(*)(id, SEL, id))(void (*)(void))sm__lookup(self, "newFunctionWithName:"))(
      self, sel_registerName("newFunctionWithName:"), d->name);
  if (!f)
    set_error(error, sm__error("MTLLibraryErrorDomain", 5,
                               "%s: function '%s' was not found in "
                               "the library",
                               sel_getName(cmd), d->name ? sm__string_utf8(d->name) : "(nil)"));
  return f;
}

/* MTLLinkedFunctions: visible and intersection functions need function
 * pointers, which softmetal's kernels lack (supportsFunctionPointers NO). */
static sm_class linked_class = {"MTLLinkedFunctions", sizeof(sm_obj), NULL, Nil, 0};
static id linked_make(id cls, SEL cmd) {
  (void)cls;
  (void)cmd;
  return sm__autorelease(sm__new(&linked_class));
}
static void linked_set(id self, SEL cmd, id list) {
  (void)self;
  if (list && send_u(list, "count"))
    sm__fatal("-[MTLLinkedFunctions %s]: softmetal does not support linked functions (function "
              "pointers, visible or intersection functions): supportsFunctionPointers is NO",
              sel_getName(cmd));
}
static id linked_get(id self, SEL cmd) {
  (void)self;
  (void)cmd;
  return nil;
}

/* ------------------------------------------------------------- compile options */
static void opts_set_macros(id self, SEL cmd, id dict) {
  if (dict && !sm__is_named(dict, "NSDictionary"))
    sm__fatal("-[MTLCompileOptions %s]: %s is not an NSDictionary", sel_getName(cmd),
              cls_name(dict));
  id copy = dict ? send_id(dict, "copy") : nil;
  struct sm_host *h = host_of(self);
  sm__release(h->macros);
  h->macros = copy;
}
static id opts_macros(id self, SEL cmd) {
  (void)cmd;
  struct sm_host *h = host_if(self);
  return h ? h->macros : nil;
}
static NSInteger opts_opt_level(id self, SEL cmd) {
  (void)cmd;
  struct sm_host *h = host_if(self);
  return h ? h->opt_level : 0;
}
static void opts_set_opt_level(id self, SEL cmd, NSInteger v) {
  if (v != 0 && v != 1)
    sm__fatal("-[MTLCompileOptions %s]: optimizationLevel = %ld is not an "
              "MTLLibraryOptimizationLevel (Default 0, Size 1)",
              sel_getName(cmd), (long)v);
  host_of(self)->opt_level = v;
}
static BOOL opts_logging(id self, SEL cmd) {
  (void)cmd;
  struct sm_host *h = host_if(self);
  return h && h->logging;
}
static void opts_set_logging(id self, SEL cmd, BOOL v) {
  (void)cmd;
  host_of(self)->logging = v;
}
/* preprocessorMacros: defined before the source, #line 1 after them, as
 * softmetal-metallib's -D. */
struct macro_buf {
  char *text;
  size_t n, cap;
  const char *sel;
};
static void macro_add(id key, id value, void *ctx) {
  struct macro_buf *m = ctx;
  if (!sm__is_string(key))
    sm__fatal("-[SMDevice %s]: preprocessorMacros key is %s, not an NSString", m->sel,
              cls_name(key));
  if (!sm__is_string(value) && !sm__is_named(value, "NSNumber"))
    sm__fatal("-[SMDevice %s]: preprocessorMacros['%s'] is %s, not an NSString or NSNumber", m->sel,
              sm__string_utf8(key), cls_name(value));
  const char *k = sm__string_utf8(key), *v = sm__string_utf8(send_id(value, "description"));
  size_t need = strlen(k) + strlen(v) + 16;
  if (m->n + need >= m->cap) {
    m->cap = (m->n + need) * 2;
    char *g = realloc(m->text, m->cap);
    if (!g) sm__fatal("-[SMDevice %s]: out of memory", m->sel);
    m->text = g;
  }
  m->n += (size_t)snprintf(m->text + m->n, m->cap - m->n, "#define %s %s\n", k, v);
}
static id device_new_library_macros(id self, SEL cmd, id source, id options, id *error) {
  struct sm_host *h = host_if(options);
  if (!h || !h->macros || !send_u(h->macros, "count") || !sm__is_string(source))
    return sm__device_new_library(self, cmd, source, options, error);
  struct macro_buf m = {NULL, 0, 0, sel_getName(cmd)};
  sm__dictionary_each(h->macros, macro_add, &m);
  const char *src = sm__string_utf8(source);
  size_t len = m.n + strlen(src) + 16;
  char *text = malloc(len);
  if (!text) sm__fatal("-[SMDevice %s]: out of memory", m.sel);
  snprintf(text, len, "%s#line 1\n%s", m.text, src);
  free(m.text);
  id full = sm__string(text);
  free(text);
  id lib = sm__device_new_library(self, cmd, full, options, error);
  sm__release(full);
  return lib;
}

/* ------------------------------------------------------------- registration */
const sm_method_def sm__cmdbuf_host_methods[] = {
    SM_METHOD("pushDebugGroup:", cb_push_group, "v@:@"),
    SM_METHOD("popDebugGroup", cb_pop_group, "v@:"),
    SM_METHOD("GPUStartTime", cb_gpu_start, "d@:"),
    SM_METHOD("GPUEndTime", cb_gpu_end, "d@:"),
    SM_METHOD("kernelStartTime", cb_kernel_start, "d@:"),
    SM_METHOD("kernelEndTime", cb_kernel_end, "d@:"),
    SM_METHOD("addScheduledHandler:", cb_add_scheduled, "v@:@?"),
    SM_METHOD("waitUntilScheduled", cb_wait_scheduled, "v@:"),
    SM_METHOD("errorOptions", cb_error_options, "Q@:"),
    SM_METHOD("useResidencySet:", cb_use_rset, "v@:@"),
    SM_METHOD("useResidencySets:count:", cb_use_rsets, "v@:^@Q"), /* queues */
    {NULL, NULL, NULL},
};

const sm_method_def sm__queue_host_methods[] = {
    SM_METHOD("addResidencySet:", rset_add_one, "v@:@"),
    SM_METHOD("addResidencySets:count:", rsets_add, "v@:^@Q"),
    SM_METHOD("removeResidencySet:", rset_remove_one, "v@:@"),
    SM_METHOD("removeResidencySets:count:", rsets_remove, "v@:^@Q"),
    SM_METHOD("commandBufferWithDescriptor:", queue_cb_with_desc, "@@:@"),
    {NULL, NULL, NULL},
};

const sm_method_def sm__encoder_host_methods[] = {
    SM_METHOD("pushDebugGroup:", group_push, "v@:@"),
    SM_METHOD("popDebugGroup", group_pop, "v@:"),
    SM_METHOD("insertDebugSignpost:", signpost, "v@:@"),
    SM_METHOD("device", enc_device, "@@:"),
    SM_METHOD("commandBuffer", enc_cmdbuf, "@@:"),
    {NULL, NULL, NULL},
};

const sm_method_def sm__compute_host_methods[] = {
    SM_METHOD("setBuffers:offsets:withRange:", enc_set_buffers, "v@:^@^Q{_NSRange=QQ}"),
    SM_METHOD("setBufferOffset:atIndex:", enc_set_buffer_offset, "v@:QQ"),
    SM_METHOD("dispatchThreadgroupsWithIndirectBuffer:indirectBufferOffset:threadsPerThreadgroup:",
              enc_dispatch_indirect, "v@:@Q{MTLSize=QQQ}"),
    SM_METHOD("useResource:usage:", enc_use_resource, "v@:@Q"),
    SM_METHOD("useResources:count:usage:", enc_use_resources, "v@:^@QQ"),
    SM_METHOD("useHeap:", enc_use_heap, "v@:@"),
    SM_METHOD("useHeaps:count:", enc_use_heaps, "v@:^@Q"), /* devices */
    {NULL, NULL, NULL},
};

const sm_method_def sm__device_host_methods[] = {
    /* the one newLibraryWithSource:options:error: (sm_msl.c compiles) */
    SM_METHOD("newLibraryWithSource:options:error:", device_new_library_macros, "@@:@@^@"),
    SM_METHOD("architecture", device_architecture, "@@:"),
    SM_METHOD("maxThreadgroupMemoryLength", device_max_tg_memory, "Q@:"),
    SM_METHOD("isLowPower", device_no, "C@:"),
    SM_METHOD("isHeadless", device_no, "C@:"),
    SM_METHOD("isRemovable", device_no, "C@:"),
    SM_METHOD("location", device_zero, "Q@:"), /* MTLDeviceLocationBuiltIn */
    SM_METHOD("locationNumber", device_zero, "Q@:"),
    SM_METHOD("supportsFunctionPointers", device_no, "C@:"),
    SM_METHOD("supportsDynamicLibraries", device_no, "C@:"),
    SM_METHOD("supportsRaytracing", device_no, "C@:"),
    SM_METHOD("argumentBuffersSupport", device_arg_tier, "Q@:"),
    SM_METHOD("newEvent", device_new_mtl_event, "@@:"),
    SM_METHOD("newLibraryWithFile:error:", device_library_file, "@@:@^@"),
    SM_METHOD(
        "newLibraryWithURL:error:", device_library_url,
        "@@:@^@"), /* Only SMDevice has this selector (see register_literals in sm_foundation.c). */
    {NULL, NULL, NULL},
};

const sm_method_def sm__library_host_methods[] = {
    SM_METHOD("newFunctionWithDescriptor:error:", library_function_desc, "@@:@^@"),
    {NULL, NULL, NULL},
};

const sm_method_def sm__options_host_methods[] = {
    SM_METHOD("preprocessorMacros", opts_macros, "@@:"),
    SM_METHOD("setPreprocessorMacros:", opts_set_macros, "v@:@"),
    SM_METHOD("optimizationLevel", opts_opt_level, "q@:"),
    SM_METHOD("setOptimizationLevel:", opts_set_opt_level, "v@:q"),
    SM_METHOD("enableLogging", opts_logging, "C@:"),
    SM_METHOD("setEnableLogging:", opts_set_logging,
              "v@:C"), /* mathFloatingPointFunctions: sm_msl.c (it changes the compile) */
    {NULL, NULL, NULL},
};

const sm_method_def sm__shared_event_host_methods[] = {
    SM_METHOD("notifyListener:atValue:block:", event_notify, "v@:@Q@?"),
    SM_METHOD("waitUntilSignaledValue:timeoutMS:", event_wait_timeout, "C@:QQ"),
    {NULL, NULL, NULL},
};

static const sm_method_def cb_desc_methods[] = {
    SM_METHOD("init", cbd_init, "@@:"),
    SM_METHOD("retainedReferences", cbd_retained, "C@:"),
    SM_METHOD("setRetainedReferences:", cbd_set_retained, "v@:C"),
    SM_METHOD("errorOptions", cbd_error_options, "Q@:"),
    SM_METHOD("setErrorOptions:", cbd_set_error_options, "v@:Q"),
    {NULL, NULL, NULL},
};

static const sm_method_def arch_methods[] = {
    SM_METHOD("name", arch_name, "@@:"),
    {NULL, NULL, NULL},
};

static const sm_method_def listener_methods[] = {
    SM_METHOD("init", listener_init, "@@:"),
    SM_METHOD("initWithDispatchQueue:", listener_init_queue, "@@:@"),
    {NULL, NULL, NULL},
};

static const sm_method_def cdesc_methods[] = {
    SM_METHOD("init", cdesc_init, "@@:"),
    SM_METHOD("captureObject", cdesc_object, "@@:"),
    SM_METHOD("setCaptureObject:", cdesc_set_object, "v@:@"),
    SM_METHOD("destination", cdesc_destination, "q@:"),
    SM_METHOD("setDestination:", cdesc_set_destination, "v@:q"),
    SM_METHOD("outputURL", cdesc_url, "@@:"),
    SM_METHOD("setOutputURL:", cdesc_set_url, "v@:@"),
    {NULL, NULL, NULL},
};

static const sm_method_def scope_methods[] = {
    SM_METHOD("beginScope", scope_begin, "v@:"),
    SM_METHOD("endScope", scope_end, "v@:"),
    SM_METHOD("device", scope_device, "@@:"),
    SM_METHOD("commandQueue", scope_queue, "@@:"),
    {NULL, NULL, NULL},
};

static const sm_method_def capture_methods[] = {
    SM_METHOD("+sharedCaptureManager", capture_shared, "@@:"),
    SM_METHOD("supportsDestination:", capture_supports, "C@:q"),
    SM_METHOD("startCaptureWithDescriptor:error:", capture_start, "C@:@^@"),
    SM_METHOD("startCaptureWithDevice:", capture_start_legacy, "v@:@"),
    SM_METHOD("startCaptureWithCommandQueue:", capture_start_legacy, "v@:@"),
    SM_METHOD("startCaptureWithScope:", capture_start_legacy, "v@:@"),
    SM_METHOD("stopCapture", capture_noop, "v@:"),
    SM_METHOD("isCapturing", capture_is_capturing, "C@:"),
    SM_METHOD("newCaptureScopeWithDevice:", capture_new_scope, "@@:@"),
    SM_METHOD("newCaptureScopeWithCommandQueue:", capture_new_scope, "@@:@"),
    SM_METHOD("defaultCaptureScope", capture_default_scope, "@@:"),
    SM_METHOD("setDefaultCaptureScope:", capture_set_default_scope, "v@:@"),
    {NULL, NULL, NULL},
};

static const sm_method_def fdesc_methods[] = {
    SM_METHOD("+functionDescriptor", fdesc_make, "@@:"),
    SM_METHOD("name", fdesc_name, "@@:"),
    SM_METHOD("setName:", fdesc_set_name, "v@:@"),
    SM_METHOD("specializedName", fdesc_specialized, "@@:"),
    SM_METHOD("setSpecializedName:", fdesc_set_specialized, "v@:@"),
    SM_METHOD("constantValues", fdesc_values, "@@:"),
    SM_METHOD("setConstantValues:", fdesc_set_values, "v@:@"),
    SM_METHOD("options", fdesc_options, "Q@:"),
    SM_METHOD("setOptions:", fdesc_set_options, "v@:Q"),
    {NULL, NULL, NULL},
};

void sm__register_host(void) {
  sm__host_free_hook = host_free;
  sm__host_hooks = (sm_host_hooks){host_cb_scheduled, host_cb_finished, host_cb_has_scheduled,
                                   host_event_signaled, host_debug_groups};
  SM_CLASS_DEFINE(&cb_desc_class, Nil, cb_desc_methods);
  SM_CLASS_DEFINE(&arch_class, Nil, arch_methods);
  /* events: SMEvent, an MTLEvent, is SMSharedEvent without its shared-only methods */
  Class shared = sm__shared_event_k->objc;
  g_event_class = objc_allocateClassPair(shared, "SMEvent", 0);
  if (!g_event_class) sm__fatal("class SMEvent already exists in this process");
  static const char *const shared_only[] = {
      "signaledValue",
      "setSignaledValue:", "notifyListener:atValue:block:", "waitUntilSignaledValue:timeoutMS:"};
  for (int i = 0; i < 4; i++)
    sm__method(g_event_class, shared_only[i], SM_IMP(not_an_mtlevent), "v@:");
  objc_registerClassPair(g_event_class);
  SM_CLASS_DEFINE(&listener_class, Nil, listener_methods);
  SM_CLASS_DEFINE(&cdesc_class, Nil, cdesc_methods);
  SM_CLASS_DEFINE(&scope_class, Nil, scope_methods);
  SM_CLASS_DEFINE(&capture_class, Nil, capture_methods);
  SM_CLASS_DEFINE(&fdesc_class, Nil, fdesc_methods);
  Class c = sm__class_begin(&linked_class);
  sm__class_method(c, "linkedFunctions", SM_IMP(linked_make), "@@:");
  static const char *const lists[] = {"Functions", "BinaryFunctions", "PrivateFunctions"};
  for (int i = 0; i < 3; i++) {
    char get[32], set[40];
    snprintf(get, sizeof get, "%c%s", lists[i][0] + 32, lists[i] + 1);
    snprintf(set, sizeof set, "set%s:", lists[i]);
    sm__method(c, get, SM_IMP(linked_get), "@@:");
    sm__method(c, set, SM_IMP(linked_set), "v@:@");
  }
  sm__method(c, "groups", SM_IMP(linked_get), "@@:");
  sm__method(c, "setGroups:", SM_IMP(linked_set), "v@:@");
  sm__class_end(&linked_class);
}
