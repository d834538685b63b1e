/* SPDX-License-Identifier: MIT */
/* Grand Central Dispatch, the part Metal host programs use, as libdispatch's
 * C functions (<dispatch/dispatch.h>): serial and concurrent queues, the
 * global queues, async, sync and apply (blocks and _f functions), groups,
 * semaphores, dispatch_time, and dispatch_retain/dispatch_release for every
 * dispatch object (dispatch_data_t is sm_archive.c's). Work runs on a pool
 * of pthreads that grows while every worker is busy (a block that waits
 * holds its worker, as in libdispatch); each block runs inside an
 * autorelease pool, as on Apple's platforms. Not provided: the main queue,
 * target queues, barrier blocks, sources, I/O. */
#include "sm_internal.h"

#include <objc/thr.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* libdispatch's API (object types as id, dispatch_time_t as uint64_t). */
struct sm_queue_attr {
  void *isa;
};
SM_EXPORT extern const struct sm_queue_attr _dispatch_queue_attr_concurrent;
SM_EXPORT id dispatch_queue_create(const char *label, const void *attr);
SM_EXPORT const char *dispatch_queue_get_label(id queue);
SM_EXPORT id dispatch_get_global_queue(intptr_t identifier, uintptr_t flags);
SM_EXPORT void dispatch_async(id queue, const void *block);
SM_EXPORT void dispatch_async_f(id queue, void *ctx, void (*work)(void *));
SM_EXPORT void dispatch_sync(id queue, const void *block);
SM_EXPORT void dispatch_sync_f(id queue, void *ctx, void (*work)(void *));
SM_EXPORT void dispatch_apply(size_t iterations, id queue, const void *block);
SM_EXPORT void dispatch_apply_f(size_t iterations, id queue, void *ctx,
                                void (*work)(void *, size_t));
SM_EXPORT uint64_t dispatch_time(uint64_t when, int64_t delta);
SM_EXPORT id dispatch_group_create(void);
SM_EXPORT void dispatch_group_enter(id group);
SM_EXPORT void dispatch_group_leave(id group);
SM_EXPORT intptr_t dispatch_group_wait(id group, uint64_t timeout);
SM_EXPORT void dispatch_group_notify(id group, id queue, const void *block);
SM_EXPORT void dispatch_group_notify_f(id group, id queue, void *ctx, void (*work)(void *));
SM_EXPORT void dispatch_group_async(id group, id queue, const void *block);
SM_EXPORT void dispatch_group_async_f(id group, id queue, void *ctx, void (*work)(void *));
SM_EXPORT id dispatch_semaphore_create(intptr_t value);
SM_EXPORT intptr_t dispatch_semaphore_wait(id dsema, uint64_t timeout);
SM_EXPORT intptr_t dispatch_semaphore_signal(id dsema);
SM_EXPORT void dispatch_retain(id object);
SM_EXPORT void dispatch_release(id object);

typedef struct {
  void *isa;
  int flags, reserved;
  void (*invoke)(void);
  const void *descriptor;
} block_layout;

/* One unit of work: a block (copied) or a function and its context. */
typedef struct item {
  struct item *next;
  void *block;
  void (*fn)(void *);
  void *ctx;
  struct sm_dgroup *group; /* retained; left after the work */
} item;

typedef struct sm_dqueue {
  sm_obj hdr;
  char label[128];
  bool concurrent;
  /* Serial queues: items waiting, and whether a worker drains them. */
  pthread_mutex_t mu;
  item *head, *tail;
  bool draining;
} sm_dqueue;

typedef struct sm_dgroup {
  sm_obj hdr;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  long count;
  /* dispatch_group_notify: submitted when the count returns to 0 */
  struct notify {
    struct notify *next;
    sm_dqueue *queue; /* retained */
    item *work;
  } *notify;
} sm_dgroup;

typedef struct {
  sm_obj hdr;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  long value;
  long waiters;
} sm_dsema;

static void queue_destroy(sm_obj *o) { pthread_mutex_destroy(&((sm_dqueue *)o)->mu); }
static void group_destroy(sm_obj *o) {
  sm_dgroup *g = (sm_dgroup *)o;
  pthread_mutex_destroy(&g->mu);
  pthread_cond_destroy(&g->cv);
}
static void sema_destroy(sm_obj *o) {
  sm_dsema *s = (sm_dsema *)o;
  pthread_mutex_destroy(&s->mu);
  pthread_cond_destroy(&s->cv);
}
static sm_class queue_class = {"OS_dispatch_queue", sizeof(sm_dqueue), queue_destroy, Nil, 0};
static sm_class group_class = {"OS_dispatch_group", sizeof(sm_dgroup), group_destroy, Nil, 0};
static sm_class sema_class = {"OS_dispatch_semaphore", sizeof(sm_dsema), sema_destroy, Nil, 0};

/* ------------------------------------------------------------- the pool */
/* A task is an item of a concurrent queue, or a serial queue to drain. */
typedef struct task {
  struct task *next;
  item *work;       /* or NULL: */
  sm_dqueue *drain; /* retained */
} task;

static struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;      /* work arrived, or stop */
  pthread_cond_t idle_cv; /* nothing queued or running */
  task *head, *tail;
  unsigned busy, idle; /* workers running tasks; waiting for them */
  unsigned queued;     /* tasks in the list, taken by no worker yet */
  unsigned pending;    /* tasks queued or running, serial items included */
  pthread_t *threads;
  unsigned nthreads, cap;
  bool stop, exit_registered;
} g_pool = {.mu = PTHREAD_MUTEX_INITIALIZER,
            .cv = PTHREAD_COND_INITIALIZER,
            .idle_cv = PTHREAD_COND_INITIALIZER};

enum { MAX_WORKERS = 255 };

static void run_item(item *it) {
  void *pool = sm__pool_push();
  if (it->block)
    ((void (*)(void *))((block_layout *)it->block)->invoke)(it->block);
  else
    it->fn(it->ctx);
  sm__pool_pop(pool);
  sm__block_release(it->block);
  struct sm_dgroup *g = it->group;
  free(it);
  if (g) {
    dispatch_group_leave((id)g);
    sm__release((id)g);
  }
}

static void pool_done(unsigned n) {
  pthread_mutex_lock(&g_pool.mu);
  g_pool.pending -= n;
  if (!g_pool.pending) pthread_cond_broadcast(&g_pool.idle_cv);
  pthread_mutex_unlock(&g_pool.mu);
}

/* Runs a serial queue's items in order until it is empty (it has one when
 * the drain starts); lets the queue go before the last item counts as done,
 * so that softmetal_quiesce sees a released queue gone. */
static void drain(sm_dqueue *q) {
  for (bool more = true; more;) {
    pthread_mutex_lock(&q->mu);
    item *it = q->head;
    q->head = it->next;
    if (!q->head) q->tail = NULL;
    pthread_mutex_unlock(&q->mu);
    run_item(it);
    pthread_mutex_lock(&q->mu);
    more = q->head != NULL;
    if (!more) q->draining = false;
    pthread_mutex_unlock(&q->mu);
    if (!more) sm__release((id)q);
    pool_done(1);
  }
}

static void *worker_main(void *arg) {
  (void)arg;
  objc_thread_add();
  pthread_mutex_lock(&g_pool.mu);
  for (;;) {
    while (!g_pool.head && !g_pool.stop) {
      g_pool.idle++;
      pthread_cond_wait(&g_pool.cv, &g_pool.mu);
      g_pool.idle--;
    }
    if (g_pool.stop) break;
    task *t = g_pool.head;
    g_pool.queued--;
    g_pool.head = t->next;
    if (!g_pool.head) g_pool.tail = NULL;
    g_pool.busy++;
    pthread_mutex_unlock(&g_pool.mu);
    if (t->work) {
      run_item(t->work);
      pool_done(1);
    } else {
      drain(t->drain);
    }
    free(t);
    pthread_mutex_lock(&g_pool.mu);
    g_pool.busy--;
  }
  pthread_mutex_unlock(&g_pool.mu);
  objc_thread_remove();
  return NULL;
}

/* At exit, as with libdispatch, work not yet started is dropped and work
 * that runs is not waited for. When none runs, the workers are joined
 * (before LeakSanitizer's check, as sm_metal.c's threads); otherwise they
 * are left to the process's end. */
static void pool_exit(void) {
  pthread_mutex_lock(&g_pool.mu);
  g_pool.stop = true;
  pthread_cond_broadcast(&g_pool.cv);
  unsigned n = g_pool.busy ? 0 : g_pool.nthreads;
  pthread_mutex_unlock(&g_pool.mu);
  if (!n) return;
  for (unsigned i = 0; i < n; i++) pthread_join(g_pool.threads[i], NULL);
  free(g_pool.threads);
  g_pool.threads = NULL;
  g_pool.nthreads = 0;
}

/* Queues t (pending already counted); a worker is started when none is idle. */
static void pool_submit(task *t) {
  pthread_mutex_lock(&g_pool.mu);
  if (!g_pool.exit_registered) {
    g_pool.exit_registered = true;
    atexit(pool_exit);
  }
  t->next = NULL;
  if (g_pool.tail)
    g_pool.tail->next = t;
  else
    g_pool.head = t;
  g_pool.tail = t;
  g_pool.queued++;
  /* A woken worker counts as idle until it takes a task: start one more
   * while the queued tasks outnumber the idle workers. */
  if (g_pool.idle) pthread_cond_signal(&g_pool.cv);
  if (g_pool.queued > g_pool.idle && g_pool.nthreads < MAX_WORKERS && !g_pool.stop) {
    if (g_pool.nthreads == g_pool.cap) {
      unsigned cap = g_pool.cap ? g_pool.cap * 2 : 8;
      pthread_t *th = realloc(g_pool.threads, cap * sizeof *th);
      if (!th) sm__fatal("dispatch: out of memory");
      g_pool.threads = th;
      g_pool.cap = cap;
    }
    if (pthread_create(&g_pool.threads[g_pool.nthreads], NULL, worker_main, NULL) == 0)
      g_pool.nthreads++;
    else if (!g_pool.nthreads)
      sm__fatal("dispatch: cannot start a worker thread");
  }
  pthread_mutex_unlock(&g_pool.mu);
}

void sm__dispatch_quiesce(void) {
  pthread_mutex_lock(&g_pool.mu);
  while (g_pool.pending) pthread_cond_wait(&g_pool.idle_cv, &g_pool.mu);
  pthread_mutex_unlock(&g_pool.mu);
}

/* ------------------------------------------------------------- queues */
const struct sm_queue_attr _dispatch_queue_attr_concurrent; /* DISPATCH_QUEUE_CONCURRENT */

static sm_dqueue *as_queue(const char *fn, id q) {
  if (!q || !sm__is(q, &queue_class))
    sm__fatal("%s: queue = %p is not a dispatch queue", fn, (void *)q);
  return (sm_dqueue *)q;
}
static sm_dgroup *as_group(const char *fn, id g) {
  if (!g || !sm__is(g, &group_class))
    sm__fatal("%s: group = %p is not a dispatch group", fn, (void *)g);
  return (sm_dgroup *)g;
}
static sm_dsema *as_sema(const char *fn, id s) {
  if (!s || !sm__is(s, &sema_class))
    sm__fatal("%s: dsema = %p is not a dispatch semaphore", fn, (void *)s);
  return (sm_dsema *)s;
}

static sm_dqueue *queue_new(const char *label, bool concurrent) {
  sm_dqueue *q = sm__new(&queue_class);
  if (!q) sm__fatal("dispatch_queue_create: out of memory");
  snprintf(q->label, sizeof q->label, "%s", label ? label : "");
  q->concurrent = concurrent;
  pthread_mutex_init(&q->mu, NULL);
  return q;
}

id dispatch_queue_create(const char *label, const void *attr) {
  if (attr && attr != &_dispatch_queue_attr_concurrent)
    sm__fatal("dispatch_queue_create: attr = %p is neither DISPATCH_QUEUE_SERIAL (NULL) nor "
              "DISPATCH_QUEUE_CONCURRENT",
              attr);
  return (id)queue_new(label, attr != NULL);
}

const char *dispatch_queue_get_label(id queue) {
  return queue ? as_queue("dispatch_queue_get_label", queue)->label : "";
}

/* The global queues: concurrent, one per quality of service (identifier:
 * DISPATCH_QUEUE_PRIORITY_* or QOS_CLASS_*), never freed. */
id dispatch_get_global_queue(intptr_t identifier, uintptr_t flags) {
  static const struct {
    intptr_t id;
    const char *label;
  } known[] = {
      {2, "com.apple.root.user-interactive-qos"},    /* DISPATCH_QUEUE_PRIORITY_HIGH */
      {0, "com.apple.root.default-qos"},             /* ..._DEFAULT */
      {-2, "com.apple.root.utility-qos"},            /* ..._LOW */
      {INT16_MIN, "com.apple.root.background-qos"},  /* ..._BACKGROUND */
      {0x21, "com.apple.root.user-interactive-qos"}, /* QOS_CLASS_USER_INTERACTIVE */
      {0x19, "com.apple.root.user-initiated-qos"},   /* QOS_CLASS_USER_INITIATED */
      {0x15, "com.apple.root.default-qos"},          /* QOS_CLASS_DEFAULT */
      {0x11, "com.apple.root.utility-qos"},          /* QOS_CLASS_UTILITY */
      {0x09, "com.apple.root.background-qos"},       /* QOS_CLASS_BACKGROUND */
      {0x00, "com.apple.root.default-qos"},          /* QOS_CLASS_UNSPECIFIED */
  };
  static _Atomic(sm_dqueue *) made[sizeof known / sizeof known[0]];
  if (flags) sm__fatal("dispatch_get_global_queue: flags = %lu must be 0", (unsigned long)flags);
  size_t k = 0;
  while (k < sizeof known / sizeof known[0] && known[k].id != identifier) k++;
  if (k == sizeof known / sizeof known[0]) return nil; /* as libdispatch */
  sm_dqueue *q = atomic_load(&made[k]);
  if (q) return (id)q;
  sm_dqueue *fresh = (sm_dqueue *)sm__immortal((id)queue_new(known[k].label, true));
  if (atomic_compare_exchange_strong(&made[k], &q, fresh)) return (id)fresh;
  return (id)q; /* another thread made it first; this one stays unused */
}

static item *item_new(const char *fn, const void *block, void (*f)(void *), void *ctx) {
  if (!block && !f) sm__fatal("%s: the block or function is NULL", fn);
  item *it = calloc(1, sizeof *it);
  if (!it) sm__fatal("%s: out of memory", fn);
  it->block = sm__block_copy(block);
  it->fn = f;
  it->ctx = ctx;
  return it;
}

static void submit(sm_dqueue *q, item *it) {
  pthread_mutex_lock(&g_pool.mu);
  g_pool.pending++;
  pthread_mutex_unlock(&g_pool.mu);
  task *t = calloc(1, sizeof *t);
  if (!t) sm__fatal("dispatch_async: out of memory");
  if (q->concurrent) {
    t->work = it;
    pool_submit(t);
    return;
  }
  pthread_mutex_lock(&q->mu);
  it->next = NULL;
  if (q->tail)
    q->tail->next = it;
  else
    q->head = it;
  q->tail = it;
  bool start = !q->draining;
  q->draining = true;
  pthread_mutex_unlock(&q->mu);
  if (!start) {
    free(t);
    return;
  }
  t->drain = (sm_dqueue *)sm__retain((id)q);
  pool_submit(t);
}

void dispatch_async(id queue, const void *block) {
  submit(as_queue("dispatch_async", queue), item_new("dispatch_async", block, NULL, NULL));
}
void dispatch_async_f(id queue, void *ctx, void (*work)(void *)) {
  submit(as_queue("dispatch_async_f", queue), item_new("dispatch_async_f", NULL, work, ctx));
}

/* dispatch_sync: a concurrent queue runs the work on the calling thread at
 * once; a serial one after the items before it, then the caller returns. */
typedef struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool done;
  item *inner;
} sync_wait;

static void sync_run(void *arg) {
  sync_wait *w = arg;
  run_item(w->inner);
  pthread_mutex_lock(&w->mu);
  w->done = true;
  pthread_cond_signal(&w->cv);
  pthread_mutex_unlock(&w->mu);
}

static void sync_on(const char *fn, id queue, const void *block, void (*f)(void *), void *ctx) {
  sm_dqueue *q = as_queue(fn, queue);
  item *inner = item_new(fn, block, f, ctx);
  if (q->concurrent) {
    run_item(inner);
    return;
  }
  sync_wait w = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false, inner};
  submit(q, item_new(fn, NULL, sync_run, &w));
  pthread_mutex_lock(&w.mu);
  while (!w.done) pthread_cond_wait(&w.cv, &w.mu);
  pthread_mutex_unlock(&w.mu);
  pthread_mutex_destroy(&w.mu);
  pthread_cond_destroy(&w.cv);
}
void dispatch_sync(id queue, const void *block) {
  sync_on("dispatch_sync", queue, block, NULL, NULL);
}
void dispatch_sync_f(id queue, void *ctx, void (*work)(void *)) {
  sync_on("dispatch_sync_f", queue, NULL, work, ctx);
}

/* dispatch_apply: iterations 0..n-1; on a concurrent queue (or
 * DISPATCH_APPLY_AUTO, NULL) in parallel on the pool and the calling thread,
 * on a serial one in order on the calling thread. Returns when all ran. */
typedef struct {
  const void *block;
  void (*f)(void *, size_t);
  void *ctx;
  size_t n;
  atomic_size_t next, finished;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  unsigned helpers; /* helper tasks not yet returned */
} apply_job;

static void apply_iterations(apply_job *j) {
  for (size_t i; (i = atomic_fetch_add(&j->next, 1)) < j->n;) {
    void *pool = sm__pool_push();
    if (j->block)
      ((void (*)(const void *, size_t))((const block_layout *)j->block)->invoke)(j->block, i);
    else
      j->f(j->ctx, i);
    sm__pool_pop(pool);
    atomic_fetch_add(&j->finished, 1);
  }
}
static void apply_helper(void *arg) {
  apply_job *j = arg;
  apply_iterations(j);
  pthread_mutex_lock(&j->mu);
  j->helpers--;
  pthread_cond_signal(&j->cv);
  pthread_mutex_unlock(&j->mu);
}

static void apply(const char *fn, size_t n, id queue, const void *block, void (*f)(void *, size_t),
                  void *ctx) {
  if (!block && !f) sm__fatal("%s: the block or function is NULL", fn);
  bool serial = queue && !as_queue(fn, queue)->concurrent;
  apply_job j = {block, f, ctx, n, 0, 0, PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};
  if (serial || n < 2) {
    apply_iterations(&j);
    return;
  }
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  unsigned helpers = (unsigned)(cores < 2 ? 1 : cores - 1);
  if (helpers > n - 1) helpers = (unsigned)(n - 1);
  j.helpers = helpers;
  sm_dqueue *global = (sm_dqueue *)dispatch_get_global_queue(0, 0);
  for (unsigned h = 0; h < helpers; h++) submit(global, item_new(fn, NULL, apply_helper, &j));
  apply_iterations(&j);
  pthread_mutex_lock(&j.mu);
  while (j.helpers) pthread_cond_wait(&j.cv, &j.mu);
  pthread_mutex_unlock(&j.mu);
  pthread_mutex_destroy(&j.mu);
  pthread_cond_destroy(&j.cv);
}
void dispatch_apply(size_t iterations, id queue, const void *block) {
  apply("dispatch_apply", iterations, queue, block, NULL, NULL);
}
void dispatch_apply_f(size_t iterations, id queue, void *ctx, void (*work)(void *, size_t)) {
  apply("dispatch_apply_f", iterations, queue, NULL, work, ctx);
}

/* ------------------------------------------------------------- time */
/* dispatch_time_t: nanoseconds of CLOCK_MONOTONIC; DISPATCH_TIME_NOW is 0
 * and DISPATCH_TIME_FOREVER ~0. */
static uint64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}
uint64_t dispatch_time(uint64_t when, int64_t delta) {
  if (when == UINT64_MAX) return UINT64_MAX;
  uint64_t base = when ? when : now_ns();
  if (delta < 0) return (uint64_t)-delta >= base ? 1 : base - (uint64_t)-delta;
  uint64_t r;
  if (__builtin_add_overflow(base, (uint64_t)delta, &r) || r == UINT64_MAX) return UINT64_MAX - 1;
  return r;
}

/* Waits on cv until *ready or timeout; false on timeout. Under mu. */
static bool wait_until(pthread_cond_t *cv, pthread_mutex_t *mu, uint64_t timeout,
                       bool (*ready)(void *), void *arg) {
  if (timeout == UINT64_MAX) {
    while (!ready(arg)) pthread_cond_wait(cv, mu);
    return true;
  }
  uint64_t deadline = timeout ? timeout : now_ns();
  /* pthread_cond_timedwait takes CLOCK_REALTIME: convert the remaining time */
  while (!ready(arg)) {
    uint64_t n = now_ns();
    if (n >= deadline) return false;
    struct timespec rt;
    clock_gettime(CLOCK_REALTIME, &rt);
    uint64_t left = deadline - n, ns = (uint64_t)rt.tv_nsec + left % 1000000000u;
    rt.tv_sec += (time_t)(left / 1000000000u + ns / 1000000000u);
    rt.tv_nsec = (long)(ns % 1000000000u);
    pthread_cond_timedwait(cv, mu, &rt);
  }
  return true;
}

/* ------------------------------------------------------------- groups */
id dispatch_group_create(void) {
  sm_dgroup *g = sm__new(&group_class);
  if (!g) sm__fatal("dispatch_group_create: out of memory");
  pthread_mutex_init(&g->mu, NULL);
  pthread_cond_init(&g->cv, NULL);
  return (id)g;
}

void dispatch_group_enter(id group) {
  sm_dgroup *g = as_group("dispatch_group_enter", group);
  pthread_mutex_lock(&g->mu);
  g->count++;
  pthread_mutex_unlock(&g->mu);
}

void dispatch_group_leave(id group) {
  sm_dgroup *g = as_group("dispatch_group_leave", group);
  pthread_mutex_lock(&g->mu);
  if (g->count == 0) sm__fatal("dispatch_group_leave: unbalanced call (the group was not entered)");
  struct notify *run = NULL;
  if (--g->count == 0) {
    run = g->notify;
    g->notify = NULL;
    pthread_cond_broadcast(&g->cv);
  }
  sm__retain(group); /* the notify submissions and a waiter's release may end it */
  pthread_mutex_unlock(&g->mu);
  while (run) {
    struct notify *next = run->next;
    submit(run->queue, run->work);
    sm__release((id)run->queue);
    free(run);
    run = next;
  }
  sm__release(group);
}

static bool group_empty(void *arg) { return ((sm_dgroup *)arg)->count == 0; }

intptr_t dispatch_group_wait(id group, uint64_t timeout) {
  sm_dgroup *g = as_group("dispatch_group_wait", group);
  pthread_mutex_lock(&g->mu);
  bool ok = wait_until(&g->cv, &g->mu, timeout, group_empty, g);
  pthread_mutex_unlock(&g->mu);
  return ok ? 0 : 1;
}

static void group_notify(const char *fn, id group, id queue, item *work) {
  sm_dgroup *g = as_group(fn, group);
  sm_dqueue *q = as_queue(fn, queue);
  pthread_mutex_lock(&g->mu);
  if (g->count) {
    struct notify *n = malloc(sizeof *n);
    if (!n) sm__fatal("%s: out of memory", fn);
    *n = (struct notify){g->notify, (sm_dqueue *)sm__retain(queue), work};
    g->notify = n;
    pthread_mutex_unlock(&g->mu);
    return;
  }
  pthread_mutex_unlock(&g->mu);
  submit(q, work);
}
void dispatch_group_notify(id group, id queue, const void *block) {
  group_notify("dispatch_group_notify", group, queue,
               item_new("dispatch_group_notify", block, NULL, NULL));
}
void dispatch_group_notify_f(id group, id queue, void *ctx, void (*work)(void *)) {
  group_notify("dispatch_group_notify_f", group, queue,
               item_new("dispatch_group_notify_f", NULL, work, ctx));
}

static void group_async(const char *fn, id group, id queue, item *work) {
  sm_dqueue *q = as_queue(fn, queue);
  dispatch_group_enter(group);
  work->group = (sm_dgroup *)sm__retain(group);
  submit(q, work);
}
void dispatch_group_async(id group, id queue, const void *block) {
  group_async("dispatch_group_async", group, queue,
              item_new("dispatch_group_async", block, NULL, NULL));
}
void dispatch_group_async_f(id group, id queue, void *ctx, void (*work)(void *)) {
  group_async("dispatch_group_async_f", group, queue,
              item_new("dispatch_group_async_f", NULL, work, ctx));
}

/* ------------------------------------------------------------- semaphores */
id dispatch_semaphore_create(intptr_t value) {
  if (value < 0) return nil; /* as libdispatch */
  sm_dsema *s = sm__new(&sema_class);
  if (!s) sm__fatal("dispatch_semaphore_create: out of memory");
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->cv, NULL);
  s->value = value;
  return (id)s;
}

static bool sema_positive(void *arg) { return ((sm_dsema *)arg)->value > 0; }

intptr_t dispatch_semaphore_wait(id dsema, uint64_t timeout) {
  sm_dsema *s = as_sema("dispatch_semaphore_wait", dsema);
  pthread_mutex_lock(&s->mu);
  s->waiters++;
  bool ok = wait_until(&s->cv, &s->mu, timeout, sema_positive, s);
  s->waiters--;
  if (ok) s->value--;
  pthread_mutex_unlock(&s->mu);
  return ok ? 0 : 1;
}

/* Returns non-zero when a thread was woken (one may have been waiting). */
intptr_t dispatch_semaphore_signal(id dsema) {
  sm_dsema *s = as_sema("dispatch_semaphore_signal", dsema);
  pthread_mutex_lock(&s->mu);
  s->value++;
  bool woke = s->waiters > 0;
  if (woke) pthread_cond_signal(&s->cv);
  pthread_mutex_unlock(&s->mu);
  return woke ? 1 : 0;
}

/* ------------------------------------------------------------- objects */
static void check_object(const char *fn, id o) {
  if (!o) sm__fatal("%s: object = NULL", fn);
  if (!sm__is(o, &queue_class) && !sm__is(o, &group_class) && !sm__is(o, &sema_class) &&
      !sm__is_named(o, "OS_dispatch_data"))
    sm__fatal("%s: object = %p (%s) is not a dispatch object", fn, (void *)o,
              object_getClassName(o));
}
void dispatch_retain(id object) {
  check_object("dispatch_retain", object);
  sm__retain(object);
}
void dispatch_release(id object) {
  check_object("dispatch_release", object);
  sm__release(object);
}

void sm__register_dispatch(void) {
  sm__class_end((sm__class_begin(&queue_class), &queue_class));
  sm__class_end((sm__class_begin(&group_class), &group_class));
  sm__class_end((sm__class_begin(&sema_class), &sema_class));
}
