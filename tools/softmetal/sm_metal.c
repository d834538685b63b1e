/* softmetal Metal objects: device, buffers, shared events, command queues,
 * command buffers, blit and compute encoders. */
#include "sm_internal.h"

#include <errno.h>
#include <objc/thr.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

enum {
  PAGE = 16384,
  MAX_SET_BYTES = 4096,
  MAX_TG_MEMORY = 32768,
  MAX_THREADS_PER_GROUP = 1024,
};
#define MAX_BUFFER_LENGTH ((NSUInteger)1 << 34)
#define WORKING_SET ((uint64_t)8 << 30)

enum { ST_SHARED = 0, ST_MANAGED = 1, ST_PRIVATE = 2, ST_MEMORYLESS = 3 };
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
  static const char *names[] = {"NotEnqueued", "Enqueued", "Committed",
                                "Scheduled",   "Completed", "Error"};
  return s <= 5 ? names[s] : "?";
}

/* ------------------------------------------------------------- device */
typedef struct {
  sm_obj hdr;
  id name;
  atomic_ulong allocated;
} sm_device;

static void device_destroy(sm_obj *o);
static sm_class device_class = {"SMDevice", sizeof(sm_device), device_destroy, Nil, 0};
static pthread_mutex_t g_device_lock = PTHREAD_MUTEX_INITIALIZER;
static sm_device *g_device;

static void device_destroy(sm_obj *o) {
  sm_device *d = (sm_device *)o;
  pthread_mutex_lock(&g_device_lock);
  if (g_device == d) g_device = NULL;
  pthread_mutex_unlock(&g_device_lock);
  sm__release(d->name);
}

/* Retains the shared device if it is alive, else creates it. +1. */
static id device_get(void) {
  pthread_mutex_lock(&g_device_lock);
  sm_device *d = g_device;
  if (d) {
    long rc = atomic_load(&d->hdr.rc);
    while (rc > 0 && !atomic_compare_exchange_weak(&d->hdr.rc, &rc, rc + 1)) {
    }
    if (rc <= 0) d = NULL; /* dying on another thread */
  }
  if (!d) {
    d = sm__new(&device_class);
    if (d) {
      d->name = sm__string("softmetal (software Metal on the CPU)");
      g_device = d;
    }
  }
  pthread_mutex_unlock(&g_device_lock);
  return (id)d;
}

SM_EXPORT id MTLCreateSystemDefaultDevice(void) { return device_get(); }

SM_EXPORT id MTLCopyAllDevices(void) {
  id dev = device_get();
  id arr = sm__array(&dev, dev ? 1 : 0);
  sm__release(dev);
  return arr;
}

static id device_name(id self, SEL cmd) { (void)cmd; return ((sm_device *)self)->name; }
static uint64_t device_registry_id(id self, SEL cmd) { (void)self; (void)cmd; return 0x50f7e7a1u; }
static BOOL device_unified(id self, SEL cmd) { (void)self; (void)cmd; return 1; }
static NSUInteger device_max_buffer(id self, SEL cmd) { (void)self; (void)cmd; return MAX_BUFFER_LENGTH; }
static uint64_t device_working_set(id self, SEL cmd) { (void)self; (void)cmd; return WORKING_SET; }
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
  /* Apple1..9, Mac2, Common1..3, Metal3: what our kernels may assume. */
  return (family >= 1001 && family <= 1009) || family == 2002 ||
         (family >= 3001 && family <= 3003) || family == 5001;
}

/* ------------------------------------------------------------- buffers */
typedef struct {
  sm_obj hdr;
  sm_device *device; /* retained */
  unsigned char *mem;
  NSUInteger length, reserved; /* reserved: bytes counted against the device */
  NSUInteger options, storage;
  bool nocopy;
  void *deallocator; /* copied block, or NULL */
} sm_buffer;

static void buffer_destroy(sm_obj *o);
static sm_class buffer_class = {"SMBuffer", sizeof(sm_buffer), buffer_destroy, Nil, 0};

static void buffer_destroy(sm_obj *o) {
  sm_buffer *b = (sm_buffer *)o;
  if (b->nocopy) {
    if (b->deallocator) {
      sm__block_invoke_dealloc(b->deallocator, b->mem, b->length);
      sm__block_release(b->deallocator);
    }
  } else {
    free(b->mem);
  }
  atomic_fetch_sub(&b->device->allocated, b->reserved);
  atomic_fetch_sub(&sm__buffer_bytes, (long)b->reserved);
  sm__release((id)b->device);
}

static void refuse(const char *sel, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void refuse(const char *sel, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "softmetal: %s: ", sel);
  vfprintf(stderr, fmt, ap);
  fputs("; returning nil\n", stderr);
  va_end(ap);
}

/* Storage mode from options, or -1 (message printed) when the options are invalid. */
static long options_storage(const char *sel, NSUInteger options) {
  NSUInteger cache = options & 0xF, storage = (options >> 4) & 0xF, hazard = (options >> 8) & 0xF;
  if (options >> 12 || cache > 1 || hazard > 2 || storage > ST_PRIVATE) {
    refuse(sel, "options = 0x%lx is not a valid MTLResourceOptions for a buffer "
                "(cache %lu, storage %lu, hazard %lu)", options, cache, storage, hazard);
    return -1;
  }
  return (long)storage;
}

static sm_buffer *buffer_make(sm_device *dev, const char *sel, NSUInteger length,
                              NSUInteger options) {
  long storage = options_storage(sel, options);
  if (storage < 0) return NULL;
  if (length == 0 || length > MAX_BUFFER_LENGTH) {
    refuse(sel, "length = %lu must be in 1..%lu", length, MAX_BUFFER_LENGTH);
    return NULL;
  }
  sm_buffer *b = sm__new(&buffer_class);
  if (!b) return NULL;
  b->device = (sm_device *)sm__retain((id)dev);
  b->length = length;
  b->options = options;
  b->storage = (NSUInteger)storage;
  return b;
}

static void buffer_account(sm_buffer *b) {
  b->reserved = (b->length + PAGE - 1) / PAGE * PAGE;
  atomic_fetch_add(&b->device->allocated, b->reserved);
  atomic_fetch_add(&sm__buffer_bytes, (long)b->reserved);
}

static id device_new_buffer(id self, SEL cmd, NSUInteger length, NSUInteger options) {
  sm_buffer *b = buffer_make((sm_device *)self, sel_getName(cmd), length, options);
  if (!b) return nil;
  NSUInteger size = (length + PAGE - 1) / PAGE * PAGE;
  b->mem = aligned_alloc(PAGE, size);
  if (!b->mem) {
    sm__release((id)b);
    refuse(sel_getName(cmd), "length = %lu: out of memory", length);
    return nil;
  }
  memset(b->mem, 0, size);
  buffer_account(b);
  return (id)b;
}

static id device_new_buffer_bytes(id self, SEL cmd, const void *bytes, NSUInteger length,
                                  NSUInteger options) {
  if (!bytes) {
    refuse(sel_getName(cmd), "bytes = NULL");
    return nil;
  }
  id b = device_new_buffer(self, cmd, length, options);
  if (b) memcpy(((sm_buffer *)b)->mem, bytes, length);
  return b;
}

static id device_new_buffer_nocopy(id self, SEL cmd, void *ptr, NSUInteger length,
                                   NSUInteger options, const void *deallocator) {
  const char *sel = sel_getName(cmd);
  if (!ptr || (uintptr_t)ptr % PAGE) {
    refuse(sel, "pointer = %p must be aligned to the %d-byte page", ptr, PAGE);
    return nil;
  }
  if (length % PAGE) {
    refuse(sel, "length = %lu must be a multiple of the %d-byte page", length, PAGE);
    return nil;
  }
  if (((options >> 4) & 0xF) == ST_PRIVATE) {
    refuse(sel, "options = 0x%lx: Private storage cannot wrap CPU memory", options);
    return nil;
  }
  sm_buffer *b = buffer_make((sm_device *)self, sel, length, options);
  if (!b) return nil;
  b->mem = ptr;
  b->nocopy = true;
  b->deallocator = sm__block_copy(deallocator);
  buffer_account(b);
  return (id)b;
}

static void *buffer_contents(id self, SEL cmd) {
  (void)cmd;
  sm_buffer *b = (sm_buffer *)self;
  return b->storage == ST_PRIVATE ? NULL : b->mem;
}
static NSUInteger buffer_length(id self, SEL cmd) { (void)cmd; return ((sm_buffer *)self)->length; }
static NSUInteger buffer_storage(id self, SEL cmd) { (void)cmd; return ((sm_buffer *)self)->storage; }
static uint64_t buffer_gpu_address(id self, SEL cmd) {
  (void)cmd;
  return (uint64_t)(uintptr_t)((sm_buffer *)self)->mem;
}
static NSUInteger buffer_resource_options(id self, SEL cmd) {
  (void)cmd;
  return ((sm_buffer *)self)->options;
}

static void buffer_did_modify(id self, SEL cmd, NSRange r) {
  sm_buffer *b = (sm_buffer *)self;
  if (b->storage != ST_MANAGED)
    sm__fatal("-[SMBuffer %s]: buffer storageMode = %lu, only Managed (1) buffers "
              "take didModifyRange:", sel_getName(cmd), b->storage);
  NSUInteger end;
  if (__builtin_add_overflow(r.location, r.length, &end) || end > b->length)
    sm__fatal("-[SMBuffer %s]: range = {%lu, %lu} exceeds length %lu", sel_getName(cmd),
              r.location, r.length, b->length);
}

static id buffer_device(id self, SEL cmd) { (void)cmd; return (id)((sm_buffer *)self)->device; }

/* ------------------------------------------------------------- shared events */
typedef struct {
  sm_obj hdr;
  sm_device *device;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  uint64_t value;
} sm_event;

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

static id event_device(id self, SEL cmd) { (void)cmd; return (id)((sm_event *)self)->device; }

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

/* ------------------------------------------------------------- commands */
enum { CMD_COPY, CMD_FILL, CMD_SYNC, CMD_DISPATCH, CMD_SIGNAL, CMD_WAIT };

typedef struct {
  sm_pipeline *pipeline;
  sm_buffer *buffers[SM_MAX_BINDINGS];
  NSUInteger offsets[SM_MAX_BINDINGS];
  void *bytes[SM_MAX_BINDINGS];
  NSUInteger tg_len[SM_MAX_BINDINGS];
  MTLSize grid, tg, groups;
} dispatch_rec;

typedef struct {
  int kind;
  sm_buffer *src, *dst; /* retained when the command buffer retains references */
  NSUInteger src_off, dst_off, size;
  uint8_t fill;
  sm_event *event; /* retained */
  uint64_t value;
  dispatch_rec *dispatch;
} command;

typedef struct sm_queue sm_queue;
typedef struct sm_cmdbuf sm_cmdbuf;

struct sm_cmdbuf {
  sm_obj hdr;
  sm_queue *queue; /* retained */
  atomic_ulong status;
  bool retains_refs;
  command *cmds;
  size_t ncmds, cap;
  void **handlers;
  size_t nhandlers;
  id error;
  char *encode_error; /* first encoding error, reported at execution */
  id active_encoder;  /* weak */
  uint64_t seq;     /* commit number on its queue */
  sm_cmdbuf *next; /* queue list */
};

typedef struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;      /* work arrived */
  pthread_cond_t done_cv; /* a command buffer finished */
  sm_cmdbuf *head, *tail;
  uint64_t committed, finished; /* sequence numbers, in commit order */
  bool stop, detached;
} queue_core;

struct sm_queue {
  sm_obj hdr;
  sm_device *device;
  queue_core *core;
  bool started;
  pthread_t thread;
};

static void release_ref(sm_cmdbuf *cb, sm_buffer *b) {
  if (cb->retains_refs) sm__release((id)b);
}

static void command_free(sm_cmdbuf *cb, command *c) {
  release_ref(cb, c->src);
  release_ref(cb, c->dst);
  sm__release((id)c->event);
  if (c->dispatch) {
    dispatch_rec *d = c->dispatch;
    sm__release((id)d->pipeline);
    for (unsigned i = 0; i < SM_MAX_BINDINGS; i++) {
      release_ref(cb, d->buffers[i]);
      free(d->bytes[i]);
    }
    free(d);
  }
}

static void cmdbuf_destroy(sm_obj *o) {
  sm_cmdbuf *cb = (sm_cmdbuf *)o;
  for (size_t i = 0; i < cb->ncmds; i++) command_free(cb, &cb->cmds[i]);
  free(cb->cmds);
  /* Handlers of a buffer never committed are released without running. */
  for (size_t i = 0; i < cb->nhandlers; i++) sm__block_release(cb->handlers[i]);
  free(cb->handlers);
  free(cb->encode_error);
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
  cb->encode_error = strdup(tmp);
}

static command *cmd_push(sm_cmdbuf *cb, int kind) {
  if (cb->ncmds == cb->cap) {
    size_t cap = cb->cap ? cb->cap * 2 : 8;
    command *c = realloc(cb->cmds, cap * sizeof *c);
    if (!c) sm__fatal("command buffer: out of memory");
    cb->cmds = c;
    cb->cap = cap;
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

static bool run_dispatch(dispatch_rec *r, char *err, size_t errlen) {
  sm_dispatch d;
  memset(&d, 0, sizeof d);
  d.pipeline = r->pipeline;
  for (unsigned i = 0; i < SM_MAX_BINDINGS; i++) {
    if (r->buffers[i]) d.buffers[i] = r->buffers[i]->mem + r->offsets[i];
    else if (r->bytes[i]) d.buffers[i] = r->bytes[i];
    d.tg_len[i] = r->tg_len[i];
  }
  d.grid = r->grid;
  d.tg = r->tg;
  d.groups = r->groups;
  return sm__run_dispatch(&d, err, errlen);
}

static bool run_command(command *c, char *err, size_t errlen) {
  switch (c->kind) {
  case CMD_COPY:
    memmove(c->dst->mem + c->dst_off, c->src->mem + c->src_off, c->size);
    return true;
  case CMD_FILL:
    memset(c->dst->mem + c->dst_off, c->fill, c->size);
    return true;
  case CMD_SYNC:
    return true;
  case CMD_DISPATCH:
    return run_dispatch(c->dispatch, err, errlen);
  case CMD_SIGNAL:
    event_set(c->event, c->value);
    return true;
  case CMD_WAIT:
    event_wait(c->event, c->value);
    return true;
  }
  return false;
}

static void cmdbuf_execute(sm_cmdbuf *cb) {
  atomic_store(&cb->status, CB_SCHEDULED);
  char err[2048] = "";
  bool ok = true;
  if (cb->encode_error) {
    snprintf(err, sizeof err, "%s", cb->encode_error);
    ok = false;
  }
  for (size_t i = 0; ok && i < cb->ncmds; i++) ok = run_command(&cb->cmds[i], err, sizeof err);
  if (!ok) {
    /* Signals after a failure still happen, so waiters on other queues go on. */
    for (size_t i = 0; i < cb->ncmds; i++)
      if (cb->cmds[i].kind == CMD_SIGNAL) event_set(cb->cmds[i].event, cb->cmds[i].value);
    cb->error = sm__error(CB_ERROR_DOMAIN, CB_ERROR_INTERNAL, "%s", err);
  }
  atomic_store(&cb->status, ok ? CB_COMPLETED : CB_ERROR);
  void *pool = sm__pool_push();
  for (size_t i = 0; i < cb->nhandlers; i++) {
    sm__block_invoke_handler(cb->handlers[i], (id)cb);
    sm__block_release(cb->handlers[i]);
  }
  cb->nhandlers = 0;
  sm__pool_pop(pool);
}

static void core_free(queue_core *c) {
  pthread_mutex_destroy(&c->mu);
  pthread_cond_destroy(&c->cv);
  pthread_cond_destroy(&c->done_cv);
  free(c);
}

static void *queue_main(void *arg) {
  objc_thread_add();
  queue_core *core = arg;
  pthread_mutex_lock(&core->mu);
  for (;;) {
    while (!core->head && !core->stop) pthread_cond_wait(&core->cv, &core->mu);
    sm_cmdbuf *cb = core->head;
    if (!cb) break;
    core->head = cb->next;
    if (!core->head) core->tail = NULL;
    pthread_mutex_unlock(&core->mu);
    cmdbuf_execute(cb);
    uint64_t seq = cb->seq;
    /* Drop the queue's reference before waking waiters, so that a waiter
     * that then releases its own sees the object go. May destroy the queue,
     * which sets stop. */
    sm__release((id)cb);
    pthread_mutex_lock(&core->mu);
    core->finished = seq;
    pthread_cond_broadcast(&core->done_cv);
  }
  bool detached = core->detached;
  pthread_mutex_unlock(&core->mu);
  if (detached) core_free(core);
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
      core->detached = self;
      pthread_cond_broadcast(&core->cv);
      pthread_mutex_unlock(&core->mu);
      if (self) {
        pthread_detach(q->thread);
      } else {
        pthread_join(q->thread, NULL);
        core_free(core);
      }
    }
  }
  sm__release((id)q->device);
}
static sm_class queue_class = {"SMCommandQueue", sizeof(sm_queue), queue_destroy, Nil, 0};

static id device_new_queue(id self, SEL cmd) {
  (void)cmd;
  sm_queue *q = sm__new(&queue_class);
  if (!q) return nil;
  q->device = (sm_device *)sm__retain(self);
  q->core = calloc(1, sizeof *q->core);
  if (!q->core) {
    sm__release((id)q);
    return nil;
  }
  pthread_mutex_init(&q->core->mu, NULL);
  pthread_cond_init(&q->core->cv, NULL);
  pthread_cond_init(&q->core->done_cv, NULL);
  return (id)q;
}

static id queue_make_cmdbuf(id self, bool retains) {
  sm_cmdbuf *cb = sm__new(&cmdbuf_class);
  if (!cb) return nil;
  cb->queue = (sm_queue *)sm__retain(self);
  cb->retains_refs = retains;
  return sm__autorelease((id)cb);
}

static id queue_device(id self, SEL cmd) { (void)cmd; return (id)((sm_queue *)self)->device; }
static id cb_queue(id self, SEL cmd) { (void)cmd; return (id)((sm_cmdbuf *)self)->queue; }
static id cb_device(id self, SEL cmd) { (void)cmd; return (id)((sm_cmdbuf *)self)->queue->device; }

static id queue_cmdbuf(id self, SEL cmd) { (void)cmd; return queue_make_cmdbuf(self, true); }
static id queue_cmdbuf_unretained(id self, SEL cmd) {
  (void)cmd;
  return queue_make_cmdbuf(self, false);
}

/* ------------------------------------------------------------- command buffers */
static NSUInteger cb_status(id self, SEL cmd) {
  (void)cmd;
  return atomic_load(&((sm_cmdbuf *)self)->status);
}

static void cb_require_open(sm_cmdbuf *cb, const char *sel) {
  NSUInteger st = atomic_load(&cb->status);
  if (st >= CB_COMMITTED)
    sm__fatal("-[SMCommandBuffer %s]: command buffer already committed (status %lu %s)",
              sel, st, status_name(st));
}

static void cb_require_no_encoder(sm_cmdbuf *cb, const char *sel) {
  if (cb->active_encoder)
    sm__fatal("-[SMCommandBuffer %s]: the %s created before has not called endEncoding",
              sel, object_getClassName(cb->active_encoder));
}

static void cb_enqueue(id self, SEL cmd) {
  sm_cmdbuf *cb = (sm_cmdbuf *)self;
  cb_require_open(cb, sel_getName(cmd));
  atomic_store(&cb->status, CB_ENQUEUED);
}

static void cb_commit(id self, SEL cmd) {
  sm_cmdbuf *cb = (sm_cmdbuf *)self;
  cb_require_open(cb, sel_getName(cmd));
  cb_require_no_encoder(cb, sel_getName(cmd));
  sm_queue *q = cb->queue;
  queue_core *core = q->core;
  sm__retain(self); /* the queue's reference, dropped after completion */
  pthread_mutex_lock(&core->mu);
  atomic_store(&cb->status, CB_COMMITTED);
  if (!q->started) {
    if (pthread_create(&q->thread, NULL, queue_main, core) != 0)
      sm__fatal("-[SMCommandBuffer commit]: cannot start the queue thread");
    q->started = true;
  }
  cb->next = NULL;
  cb->seq = ++core->committed;
  if (core->tail) core->tail->next = cb;
  else core->head = cb;
  core->tail = cb;
  pthread_cond_broadcast(&core->cv);
  pthread_mutex_unlock(&core->mu);
}

static void cb_wait(id self, SEL cmd) {
  sm_cmdbuf *cb = (sm_cmdbuf *)self;
  NSUInteger st = atomic_load(&cb->status);
  if (st < CB_COMMITTED)
    sm__fatal("-[SMCommandBuffer %s]: command buffer not committed (status %lu %s): "
              "this would wait forever", sel_getName(cmd), st, status_name(st));
  queue_core *core = cb->queue->core;
  pthread_mutex_lock(&core->mu);
  while (core->finished < cb->seq) pthread_cond_wait(&core->done_cv, &core->mu);
  pthread_mutex_unlock(&core->mu);
}

static id cb_error(id self, SEL cmd) { (void)cmd; return ((sm_cmdbuf *)self)->error; }

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
typedef struct {
  sm_obj hdr;
  sm_cmdbuf *cb; /* retained */
  bool ended;
  sm_pipeline *pipeline; /* retained */
  /* Bound buffers: retained when the command buffer retains references. */
  sm_buffer *buffers[SM_MAX_BINDINGS];
  NSUInteger offsets[SM_MAX_BINDINGS];
  void *bytes[SM_MAX_BINDINGS];
  NSUInteger bytes_len[SM_MAX_BINDINGS];
  NSUInteger tg_len[SM_MAX_BINDINGS];
} sm_encoder;

static void encoder_destroy(sm_obj *o) {
  sm_encoder *e = (sm_encoder *)o;
  if (!e->ended)
    sm__fatal("-[%s dealloc]: encoder released without endEncoding", o->cls->name);
  for (unsigned i = 0; i < SM_MAX_BINDINGS; i++) {
    free(e->bytes[i]);
    release_ref(e->cb, e->buffers[i]);
  }
  sm__release((id)e->pipeline);
  sm__release((id)e->cb);
}
static sm_class blit_class = {"SMBlitCommandEncoder", sizeof(sm_encoder), encoder_destroy, Nil, 0};
static sm_class compute_class = {"SMComputeCommandEncoder", sizeof(sm_encoder), encoder_destroy,
                                 Nil, 0};

static id cb_make_encoder(id self, SEL cmd, sm_class *k) {
  sm_cmdbuf *cb = (sm_cmdbuf *)self;
  cb_require_open(cb, sel_getName(cmd));
  cb_require_no_encoder(cb, sel_getName(cmd));
  sm_encoder *e = sm__new(k);
  if (!e) return nil;
  e->cb = (sm_cmdbuf *)sm__retain(self);
  cb->active_encoder = (id)e;
  return sm__autorelease((id)e);
}
static id cb_blit_encoder(id self, SEL cmd) { return cb_make_encoder(self, cmd, &blit_class); }
static id cb_compute_encoder(id self, SEL cmd) { return cb_make_encoder(self, cmd, &compute_class); }

/* The command buffer an encoding call may still add to. */
static sm_cmdbuf *enc_open(id self, SEL cmd) {
  sm_encoder *e = (sm_encoder *)self;
  if (e->ended)
    sm__fatal("-[%s %s]: encoder already ended (endEncoding was called)",
              e->hdr.cls->name, sel_getName(cmd));
  cb_require_open(e->cb, sel_getName(cmd));
  return e->cb;
}

static void enc_end(id self, SEL cmd) {
  sm_encoder *e = (sm_encoder *)self;
  enc_open(self, cmd);
  e->ended = true;
  if (e->cb->active_encoder == self) e->cb->active_encoder = nil;
}

static sm_buffer *as_buffer(sm_cmdbuf *cb, const char *sel, const char *arg, id b) {
  if (!b) {
    encode_fail(cb, "%s: %s = nil", sel, arg);
    return NULL;
  }
  if (!sm__is(b, &buffer_class)) {
    encode_fail(cb, "%s: %s is a %s, not an SMBuffer", sel, arg, object_getClassName(b));
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
  if (!range_ok(src_off, size, s->length)) {
    encode_fail(cb, "%s: sourceOffset = %lu + size = %lu exceeds source length %lu", sel,
                src_off, size, s->length);
    return;
  }
  if (!range_ok(dst_off, size, d->length)) {
    encode_fail(cb, "%s: destinationOffset = %lu + size = %lu exceeds destination length %lu",
                sel, dst_off, size, d->length);
    return;
  }
  if (s == d && src_off < dst_off + size && dst_off < src_off + size && size) {
    encode_fail(cb, "%s: source range {%lu, %lu} overlaps destination range {%lu, %lu} in "
                "the same buffer", sel, src_off, size, dst_off, size);
    return;
  }
  command *c = cmd_push(cb, CMD_COPY);
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
  if (!range_ok(range.location, range.length, b->length)) {
    encode_fail(cb, "%s: range = {%lu, %lu} exceeds buffer length %lu", sel, range.location,
                range.length, b->length);
    return;
  }
  command *c = cmd_push(cb, CMD_FILL);
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
    encode_fail(cb, "%s: resource storageMode = %lu, only Managed (1) resources synchronize",
                sel, b->storage);
    return;
  }
  command *c = cmd_push(cb, CMD_SYNC);
  c->dst = keep_ref(cb, b);
}

static void comp_set_pipeline(id self, SEL cmd, id pipeline) {
  sm_cmdbuf *cb = enc_open(self, cmd);
  if (!sm__is(pipeline, &sm__pipeline_class)) {
    encode_fail(cb, "%s: pipelineState = %s is not a compute pipeline state", sel_getName(cmd),
                pipeline ? object_getClassName(pipeline) : "nil");
    return;
  }
  sm_encoder *e = (sm_encoder *)self;
  sm__retain(pipeline);
  sm__release((id)e->pipeline);
  e->pipeline = (sm_pipeline *)pipeline;
}

static bool index_ok(sm_cmdbuf *cb, const char *sel, NSUInteger index) {
  if (index < SM_MAX_BINDINGS) return true;
  encode_fail(cb, "%s: index = %lu must be < %u", sel, index, SM_MAX_BINDINGS);
  return false;
}

static void comp_set_buffer(id self, SEL cmd, id buf, NSUInteger offset, NSUInteger index) {
  sm_cmdbuf *cb = enc_open(self, cmd);
  sm_encoder *e = (sm_encoder *)self;
  const char *sel = sel_getName(cmd);
  if (!index_ok(cb, sel, index)) return;
  sm_buffer *b = NULL;
  if (buf) {
    b = as_buffer(cb, sel, "buffer", buf);
    if (!b) return;
    if (offset > b->length) {
      encode_fail(cb, "%s: offset = %lu exceeds buffer length %lu (index %lu)", sel, offset,
                  b->length, index);
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
  const char *sel = sel_getName(cmd);
  if (!index_ok(cb, sel, index)) return;
  if (length == 0 || length > MAX_SET_BYTES || !bytes) {
    encode_fail(cb, "%s: length = %lu must be in 1..%d with non-NULL bytes (index %lu)", sel,
                length, MAX_SET_BYTES, index);
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
  if (length % 16 || length > MAX_TG_MEMORY) {
    encode_fail(cb, "%s: length = %lu must be a multiple of 16 and <= %d (index %lu)", sel,
                length, MAX_TG_MEMORY, index);
    return;
  }
  ((sm_encoder *)self)->tg_len[index] = length;
}

static bool size_mul(MTLSize a, MTLSize b, MTLSize *out) {
  return !__builtin_mul_overflow(a.width, b.width, &out->width) &&
         !__builtin_mul_overflow(a.height, b.height, &out->height) &&
         !__builtin_mul_overflow(a.depth, b.depth, &out->depth);
}

static void comp_dispatch(id self, SEL cmd, MTLSize grid_or_groups, MTLSize tg, bool threads) {
  sm_cmdbuf *cb = enc_open(self, cmd);
  sm_encoder *e = (sm_encoder *)self;
  const char *sel = sel_getName(cmd);
  sm_pipeline *p = e->pipeline;
  if (!p) {
    encode_fail(cb, "%s: no compute pipeline state set (setComputePipelineState:)", sel);
    return;
  }
  const struct sm_kernel_desc *k = p->desc;
  NSUInteger total_tg;
  if (tg.width == 0 || tg.height == 0 || tg.depth == 0 ||
      __builtin_mul_overflow(tg.width, tg.height, &total_tg) ||
      __builtin_mul_overflow(total_tg, tg.depth, &total_tg) || total_tg > p->max_threads) {
    encode_fail(cb, "%s: threadsPerThreadgroup = {%lu, %lu, %lu} must be non-zero with at most "
                "%lu threads (maxTotalThreadsPerThreadgroup of kernel %s)", sel, tg.width,
                tg.height, tg.depth, p->max_threads, k->name);
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
    encode_fail(cb, "%s: grid of {%lu, %lu, %lu} threads exceeds 2^32-1 per dimension", sel,
                grid.width, grid.height, grid.depth);
    return;
  }
  NSUInteger tg_total = 0;
  for (unsigned i = 0; i < SM_MAX_BINDINGS; i++) {
    if ((k->buffer_mask >> i & 1u) && !e->buffers[i] && !e->bytes[i]) {
      encode_fail(cb, "%s: kernel %s uses [[buffer(%u)]] but nothing is bound at index %u", sel,
                  k->name, i, i);
      return;
    }
    if ((k->threadgroup_mask >> i & 1u) && !e->tg_len[i]) {
      encode_fail(cb, "%s: kernel %s uses [[threadgroup(%u)]] but its length was not set "
                  "(setThreadgroupMemoryLength:atIndex:)", sel, k->name, i);
      return;
    }
    tg_total += e->tg_len[i];
  }
  if (tg_total + p->static_tg > MAX_TG_MEMORY) {
    encode_fail(cb, "%s: threadgroup memory of kernel %s: %lu bytes set with "
                "setThreadgroupMemoryLength:atIndex: plus %lu bytes of threadgroup variables "
                "(staticThreadgroupMemoryLength) exceeds %d", sel, k->name, tg_total,
                p->static_tg, MAX_TG_MEMORY);
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
  r->grid = grid;
  r->tg = tg;
  r->groups = groups;
  command *c = cmd_push(cb, CMD_DISPATCH);
  c->dispatch = r;
}

static void comp_dispatch_threads(id self, SEL cmd, MTLSize grid, MTLSize tg) {
  comp_dispatch(self, cmd, grid, tg, true);
}
static void comp_dispatch_groups(id self, SEL cmd, MTLSize groups, MTLSize tg) {
  comp_dispatch(self, cmd, groups, tg, false);
}

/* ------------------------------------------------------------- registration */
void sm__register_metal(void) {
  Class c = sm__class_begin(&device_class);
  sm__method(c, "name", SM_IMP(device_name), "@@:");
  sm__method(c, "registryID", SM_IMP(device_registry_id), "Q@:");
  sm__method(c, "hasUnifiedMemory", SM_IMP(device_unified), "C@:");
  sm__method(c, "maxBufferLength", SM_IMP(device_max_buffer), "Q@:");
  sm__method(c, "recommendedMaxWorkingSetSize", SM_IMP(device_working_set), "Q@:");
  sm__method(c, "currentAllocatedSize", SM_IMP(device_allocated), "Q@:");
  sm__method(c, "maxThreadsPerThreadgroup", SM_IMP(device_max_threads), "{MTLSize=QQQ}@:");
  sm__method(c, "supportsFamily:", SM_IMP(device_supports_family), "C@:q");
  sm__method(c, "newBufferWithLength:options:", SM_IMP(device_new_buffer), "@@:QQ");
  sm__method(c, "newBufferWithBytes:length:options:", SM_IMP(device_new_buffer_bytes),
             "@@:r^vQQ");
  sm__method(c, "newBufferWithBytesNoCopy:length:options:deallocator:",
             SM_IMP(device_new_buffer_nocopy), "@@:^vQQ@?");
  sm__method(c, "newCommandQueue", SM_IMP(device_new_queue), "@@:");
  sm__method(c, "newSharedEvent", SM_IMP(device_new_event), "@@:");
  sm__add_device_msl_methods(c);
  sm__class_end(&device_class);

  c = sm__class_begin(&buffer_class);
  sm__method(c, "contents", SM_IMP(buffer_contents), "^v@:");
  sm__method(c, "length", SM_IMP(buffer_length), "Q@:");
  sm__method(c, "storageMode", SM_IMP(buffer_storage), "Q@:");
  sm__method(c, "resourceOptions", SM_IMP(buffer_resource_options), "Q@:");
  sm__method(c, "gpuAddress", SM_IMP(buffer_gpu_address), "Q@:");
  sm__method(c, "didModifyRange:", SM_IMP(buffer_did_modify), "v@:{_NSRange=QQ}");
  sm__method(c, "device", SM_IMP(buffer_device), "@@:");
  sm__class_end(&buffer_class);

  c = sm__class_begin(&event_class);
  sm__method(c, "signaledValue", SM_IMP(event_value), "Q@:");
  sm__method(c, "setSignaledValue:", SM_IMP(event_set_value), "v@:Q");
  sm__method(c, "device", SM_IMP(event_device), "@@:");
  sm__class_end(&event_class);

  c = sm__class_begin(&queue_class);
  sm__method(c, "commandBuffer", SM_IMP(queue_cmdbuf), "@@:");
  sm__method(c, "commandBufferWithUnretainedReferences", SM_IMP(queue_cmdbuf_unretained), "@@:");
  sm__method(c, "device", SM_IMP(queue_device), "@@:");
  sm__class_end(&queue_class);

  c = sm__class_begin(&cmdbuf_class);
  sm__method(c, "status", SM_IMP(cb_status), "Q@:");
  sm__method(c, "commandQueue", SM_IMP(cb_queue), "@@:");
  sm__method(c, "device", SM_IMP(cb_device), "@@:");
  sm__method(c, "enqueue", SM_IMP(cb_enqueue), "v@:");
  sm__method(c, "commit", SM_IMP(cb_commit), "v@:");
  sm__method(c, "waitUntilCompleted", SM_IMP(cb_wait), "v@:");
  sm__method(c, "error", SM_IMP(cb_error), "@@:");
  sm__method(c, "addCompletedHandler:", SM_IMP(cb_add_completed), "v@:@?");
  sm__method(c, "encodeSignalEvent:value:", SM_IMP(cb_signal), "v@:@Q");
  sm__method(c, "encodeWaitForEvent:value:", SM_IMP(cb_wait_event), "v@:@Q");
  sm__method(c, "blitCommandEncoder", SM_IMP(cb_blit_encoder), "@@:");
  sm__method(c, "computeCommandEncoder", SM_IMP(cb_compute_encoder), "@@:");
  sm__class_end(&cmdbuf_class);

  c = sm__class_begin(&blit_class);
  sm__method(c, "copyFromBuffer:sourceOffset:toBuffer:destinationOffset:size:",
             SM_IMP(blit_copy), "v@:@Q@QQ");
  sm__method(c, "fillBuffer:range:value:", SM_IMP(blit_fill), "v@:@{_NSRange=QQ}C");
  sm__method(c, "synchronizeResource:", SM_IMP(blit_sync), "v@:@");
  sm__method(c, "endEncoding", SM_IMP(enc_end), "v@:");
  sm__class_end(&blit_class);

  c = sm__class_begin(&compute_class);
  sm__method(c, "setComputePipelineState:", SM_IMP(comp_set_pipeline), "v@:@");
  sm__method(c, "setBuffer:offset:atIndex:", SM_IMP(comp_set_buffer), "v@:@QQ");
  sm__method(c, "setBytes:length:atIndex:", SM_IMP(comp_set_bytes), "v@:r^vQQ");
  sm__method(c, "setThreadgroupMemoryLength:atIndex:", SM_IMP(comp_set_tg_memory), "v@:QQ");
  sm__method(c, "dispatchThreads:threadsPerThreadgroup:", SM_IMP(comp_dispatch_threads),
             "v@:{MTLSize=QQQ}{MTLSize=QQQ}");
  sm__method(c, "dispatchThreadgroups:threadsPerThreadgroup:", SM_IMP(comp_dispatch_groups),
             "v@:{MTLSize=QQQ}{MTLSize=QQQ}");
  sm__method(c, "endEncoding", SM_IMP(enc_end), "v@:");
  sm__class_end(&compute_class);
}
