/* softmetal kernel execution: a plain loop for kernels without barriers or
 * simdgroup functions, fibers (one per thread of a threadgroup) otherwise.
 * Fiber switches are announced to ASan, TSan and valgrind. */
#define _GNU_SOURCE /* MAP_ANONYMOUS, ucontext */
#include "sm_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <ucontext.h>

#if defined(__SANITIZE_ADDRESS__)
#define SM_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SM_ASAN 1
#endif
#endif
#ifndef SM_ASAN
#define SM_ASAN 0
#endif

#if SM_ASAN
#include <sanitizer/common_interface_defs.h>
#endif
/* Per fiber. ASan's swapcontext clears the shadow of the whole target stack
 * on every switch, so bigger stacks cost time there. */
enum { STACK_SIZE = 128 * 1024 };

#if defined(__SANITIZE_THREAD__)
#define SM_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SM_TSAN 1
#endif
#endif
#ifndef SM_TSAN
#define SM_TSAN 0
#endif
#if SM_TSAN
#include <sanitizer/tsan_interface.h>
#endif

#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#define SM_VALGRIND 1
#else
#define SM_VALGRIND 0
#endif

enum { F_READY, F_BARRIER, F_SIMD, F_DONE };

typedef struct {
  ucontext_t ctx;
  struct sm_thread t;
  int state;
  unsigned char *stack;
  void *fake_stack;
  void *tsan_fiber;
  unsigned valgrind_id;
} fiber;

typedef struct {
  ucontext_t main;
  fiber *fibers;
  uint32_t n;
  fiber *cur;
  const struct sm_kernel_desc *k;
  void *main_fake_stack;
  const void *main_bottom;
  size_t main_size;
  void *main_tsan_fiber;
} sched;

static _Thread_local sched *t_sched;

/* ------------------------------------------------------------- switching */
static void to_fiber(sched *s, fiber *f) {
  s->cur = f;
#if SM_ASAN
  __sanitizer_start_switch_fiber(&s->main_fake_stack, f->stack, STACK_SIZE);
#endif
#if SM_TSAN
  __tsan_switch_to_fiber(f->tsan_fiber, 0);
#endif
  swapcontext(&s->main, &f->ctx);
#if SM_ASAN
  __sanitizer_finish_switch_fiber(s->main_fake_stack, NULL, NULL);
#endif
}

static void to_main(sched *s, fiber *f, bool exiting) {
#if SM_ASAN
  __sanitizer_start_switch_fiber(exiting ? NULL : &f->fake_stack, s->main_bottom, s->main_size);
#else
  (void)exiting;
#endif
#if SM_TSAN
  __tsan_switch_to_fiber(s->main_tsan_fiber, 0);
#endif
  swapcontext(&f->ctx, &s->main);
#if SM_ASAN
  __sanitizer_finish_switch_fiber(f->fake_stack, &s->main_bottom, &s->main_size);
#endif
}

static void fiber_entry(void) {
  sched *s = t_sched;
  fiber *f = s->cur;
#if SM_ASAN
  __sanitizer_finish_switch_fiber(NULL, &s->main_bottom, &s->main_size);
#endif
  s->k->fn(&f->t);
  f->state = F_DONE;
  to_main(s, f, true);
}

static void fiber_barrier(struct sm_thread *t) {
  sched *s = t->sched;
  fiber *f = s->cur;
  f->state = F_BARRIER;
  to_main(s, f, false);
}

static void fiber_simd_sync(struct sm_thread *t) {
  sched *s = t->sched;
  fiber *f = s->cur;
  f->state = F_SIMD;
  to_main(s, f, false);
}

static void loop_barrier(struct sm_thread *t) {
  (void)t;
  sm__fatal("kernel reached threadgroup_barrier on the loop path (scanner missed it)");
}

/* ------------------------------------------------------------- dispatch */
typedef struct {
  const sm_dispatch *d;
  const struct sm_kernel_desc *k;
  void *tgmem[SM_MAX_BINDINGS];
  unsigned char *tg_block;
  size_t tg_bytes;
  sm_tg_arena *tg_arena; /* threadgroup variables of function bodies */
  unsigned char *simd_slots;
  unsigned char *stacks;
  size_t stacks_len;
  fiber *fibers;
} run_state;

static void thread_init(struct sm_thread *t, const run_state *r, const uint32_t g[3],
                        const uint32_t sz[3], uint32_t lx, uint32_t ly, uint32_t lz) {
  const sm_dispatch *d = r->d;
  memset(t, 0, sizeof *t);
  t->buffers = d->buffers;
  t->tgmem = r->tgmem;
  t->tpg[0] = (uint32_t)d->grid.width;
  t->tpg[1] = (uint32_t)d->grid.height;
  t->tpg[2] = (uint32_t)d->grid.depth;
  t->tgpg[0] = (uint32_t)d->groups.width;
  t->tgpg[1] = (uint32_t)d->groups.height;
  t->tgpg[2] = (uint32_t)d->groups.depth;
  memcpy(t->tgpig, g, sizeof t->tgpig);
  memcpy(t->tptg, sz, sizeof t->tptg);
  t->tpitg[0] = lx;
  t->tpitg[1] = ly;
  t->tpitg[2] = lz;
  t->tpig[0] = g[0] * (uint32_t)d->tg.width + lx;
  t->tpig[1] = g[1] * (uint32_t)d->tg.height + ly;
  t->tpig[2] = g[2] * (uint32_t)d->tg.depth + lz;
  t->tiitg = (lz * sz[1] + ly) * sz[0] + lx;
  t->lane = t->tiitg % SM_SIMD_WIDTH;
  t->simdgroup = t->tiitg / SM_SIMD_WIDTH;
  t->tg_threads = sz[0] * sz[1] * sz[2];
  t->simd_slots = r->simd_slots;
  t->barrier = loop_barrier;
  t->simd_sync = loop_barrier;
  t->fc_values = d->pipeline->fc_values;
  t->fc_defined = d->pipeline->fc_defined;
  t->tg_var = sm__tg_var;
  t->tg_arena = r->tg_arena;
}

__attribute__((noinline)) static void fiber_prepare(fiber *f) {
  f->fake_stack = NULL;
  getcontext(&f->ctx);
  f->ctx.uc_stack.ss_sp = f->stack;
  f->ctx.uc_stack.ss_size = STACK_SIZE;
  f->ctx.uc_link = NULL;
  makecontext(&f->ctx, fiber_entry, 0);
}

static bool run_group_fibers(run_state *r, const uint32_t g[3], const uint32_t sz[3], char *err,
                             size_t errlen) {
  uint32_t n = sz[0] * sz[1] * sz[2];
  sched s;
  memset(&s, 0, sizeof s);
  s.fibers = r->fibers;
  s.n = n;
  s.k = r->k;
#if SM_TSAN
  s.main_tsan_fiber = __tsan_get_current_fiber();
#endif
  sched *saved = t_sched;
  t_sched = &s;
  uint32_t i = 0;
  for (uint32_t z = 0; z < sz[2]; z++)
    for (uint32_t y = 0; y < sz[1]; y++)
      for (uint32_t x = 0; x < sz[0]; x++, i++) {
        fiber *f = &r->fibers[i];
        thread_init(&f->t, r, g, sz, x, y, z);
        f->t.barrier = fiber_barrier;
        f->t.simd_sync = fiber_simd_sync;
        f->t.sched = &s;
        f->state = F_READY;
        fiber_prepare(f);
      }
  bool ok = true;
  for (;;) {
    for (i = 0; i < n; i++)
      if (r->fibers[i].state == F_READY) to_fiber(&s, &r->fibers[i]);
    uint32_t done = 0, at_barrier = 0;
    for (i = 0; i < n; i++) {
      done += r->fibers[i].state == F_DONE;
      at_barrier += r->fibers[i].state == F_BARRIER;
    }
    if (done == n) break;
    bool released = false;
    for (uint32_t base = 0; base < n; base += SM_SIMD_WIDTH) {
      uint32_t end = base + SM_SIMD_WIDTH < n ? base + SM_SIMD_WIDTH : n, simd = 0, live = 0,
               waiting = 0;
      for (i = base; i < end; i++) {
        live += r->fibers[i].state != F_DONE;
        simd += r->fibers[i].state == F_SIMD;
        waiting += r->fibers[i].state == F_BARRIER;
      }
      /* Lanes that went on to a barrier skipped this simdgroup function: as on
       * a GPU, they are inactive lanes for it. */
      if (simd && simd + waiting == live) {
        for (i = base; i < end; i++)
          if (r->fibers[i].state == F_SIMD) r->fibers[i].state = F_READY;
        released = true;
      }
    }
    if (released) continue;
    if (at_barrier == n) {
      for (i = 0; i < n; i++) r->fibers[i].state = F_READY;
      continue;
    }
    ok = false;
    uint32_t at_simd = n - done - at_barrier;
    snprintf(err, errlen,
             "dispatch of kernel %s: threadgroup (%u, %u, %u) of %u threads: divergent "
             "synchronization: %u threads wait at threadgroup_barrier, %u at a simdgroup "
             "function, %u have exited; every thread must reach each barrier",
             r->k->name, g[0], g[1], g[2], n, at_barrier, at_simd, done);
    break;
  }
  t_sched = saved;
  return ok;
}

static void run_group_loop(run_state *r, const uint32_t g[3], const uint32_t sz[3]) {
  struct sm_thread t;
  for (uint32_t z = 0; z < sz[2]; z++)
    for (uint32_t y = 0; y < sz[1]; y++)
      for (uint32_t x = 0; x < sz[0]; x++) {
        thread_init(&t, r, g, sz, x, y, z);
        r->k->fn(&t);
      }
}

static bool setup_fibers(run_state *r, uint32_t max_threads, char *err, size_t errlen) {
  r->stacks_len = (size_t)max_threads * STACK_SIZE;
  void *m = mmap(NULL, r->stacks_len, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  r->fibers = calloc(max_threads, sizeof *r->fibers);
  if (m == MAP_FAILED || !r->fibers) {
    if (m != MAP_FAILED) munmap(m, r->stacks_len);
    r->stacks = NULL;
    snprintf(err, errlen, "dispatch of kernel %s: cannot allocate %u fiber stacks",
             r->k->name, max_threads);
    return false;
  }
  r->stacks = m;
  for (uint32_t i = 0; i < max_threads; i++) {
    r->fibers[i].stack = r->stacks + (size_t)i * STACK_SIZE;
#if SM_VALGRIND
    r->fibers[i].valgrind_id =
        VALGRIND_STACK_REGISTER(r->fibers[i].stack, r->fibers[i].stack + STACK_SIZE);
#endif
#if SM_TSAN
    r->fibers[i].tsan_fiber = __tsan_create_fiber(0);
#endif
  }
  return true;
}

static void teardown(run_state *r, uint32_t max_threads) {
  if (r->stacks) {
    for (uint32_t i = 0; i < max_threads; i++) {
#if SM_VALGRIND
      VALGRIND_STACK_DEREGISTER(r->fibers[i].valgrind_id);
#endif
#if SM_TSAN
      __tsan_destroy_fiber(r->fibers[i].tsan_fiber);
#endif
    }
    (void)max_threads;
    munmap(r->stacks, r->stacks_len);
  }
  free(r->fibers);
  free(r->tg_block);
  free(r->simd_slots);
  sm__tg_arena_free(r->tg_arena);
}

bool sm__run_dispatch(const sm_dispatch *d, char *err, size_t errlen) {
  run_state r;
  memset(&r, 0, sizeof r);
  r.d = d;
  r.k = d->pipeline->desc;
  if (d->grid.width == 0 || d->grid.height == 0 || d->grid.depth == 0) return true;
  uint32_t max_threads = (uint32_t)(d->tg.width * d->tg.height * d->tg.depth);
  for (unsigned i = 0; i < SM_MAX_BINDINGS; i++) r.tg_bytes += d->tg_len[i];
  r.tg_block = malloc(r.tg_bytes ? r.tg_bytes : 1);
  r.simd_slots = calloc(2 * (size_t)max_threads, SM_SIMD_SLOT);
  r.tg_arena = sm__tg_arena_new();
  bool ok = r.tg_block && r.simd_slots && r.tg_arena;
  if (!ok) snprintf(err, errlen, "dispatch of kernel %s: out of memory", r.k->name);
  size_t at = 0;
  for (unsigned i = 0; ok && i < SM_MAX_BINDINGS; i++) {
    r.tgmem[i] = d->tg_len[i] ? r.tg_block + at : NULL;
    at += d->tg_len[i];
  }
  bool fibers = r.k->needs_fibers != 0;
  if (ok && fibers) ok = setup_fibers(&r, max_threads, err, errlen);
  for (uint32_t gz = 0; ok && gz < d->groups.depth; gz++)
    for (uint32_t gy = 0; ok && gy < d->groups.height; gy++)
      for (uint32_t gx = 0; ok && gx < d->groups.width; gx++) {
        uint32_t g[3] = {gx, gy, gz}, sz[3];
        const NSUInteger grid[3] = {d->grid.width, d->grid.height, d->grid.depth};
        const NSUInteger tg[3] = {d->tg.width, d->tg.height, d->tg.depth};
        for (int k = 0; k < 3; k++) {
          NSUInteger start = g[k] * tg[k], left = grid[k] - start;
          sz[k] = (uint32_t)(left < tg[k] ? left : tg[k]);
        }
        /* Threadgroup memory starts as garbage on a GPU: make reliance on zero visible. */
        if (r.tg_bytes) memset(r.tg_block, 0xFF, r.tg_bytes);
        sm__tg_arena_begin(r.tg_arena);
        if (fibers) ok = run_group_fibers(&r, g, sz, err, errlen);
        else run_group_loop(&r, g, sz);
      }
  teardown(&r, max_threads);
  return ok;
}
