/* SPDX-License-Identifier: MIT */
/* softmetal kernel execution: a plain loop for kernels without barriers or
 * simdgroup functions, fibers (one per thread of a threadgroup) otherwise.
 * Fiber switches are announced to ASan and TSan; valgrind recognises them by
 * their size (see setup_fibers). They are sm_fiber.c's switches on x86-64 and aarch64 (no system call), swapcontext
 * elsewhere or under SOFTMETAL_FIBER_SWITCH=ucontext. */
#define _GNU_SOURCE /* MAP_ANONYMOUS, ucontext */
#include "sm_fiber.h"
#include "sm_internal.h"

#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

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
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif
/* Per fiber. ASan's swapcontext clears the shadow of the whole target stack
 * on every switch (sm_fiber.c's switch: when a fiber is prepared), so bigger
 * stacks cost time there. */
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

enum { F_READY, F_BARRIER, F_SIMD, F_DONE, F_FAULT };
/* The lowest page of each fiber stack is inaccessible: an overflow faults. */
enum { STACK_GUARD = 4096 };
enum { MAX_FRAMES = 16 };

/* Where a lane waits at a SIMD-group function: the return addresses of the
 * frames from the call up to the kernel entry (innermost first), and the
 * source location the kernel passed. Lanes exchange only with lanes whose
 * site is equal. */
typedef struct {
  const void *frames[MAX_FRAMES];
  uint32_t depth;
  const char *file;
  uint64_t line_col;
} call_site;

typedef struct {
  ucontext_t ctx;
  void *sp; /* sm_fiber.c's switch: where it continues */
  struct sm_thread t;
  int state;
  unsigned char *stack;
  void *fake_stack;
  void *tsan_fiber;
  void *entry_frame; /* fiber_entry's frame: where the site walk stops */
  call_site site;
} fiber;

typedef struct {
  ucontext_t main;
  void *main_sp;
  bool ucontext; /* switch with swapcontext */
  fiber *fibers;
  uint32_t n;
  fiber *cur;
  const struct sm_kernel_desc *k;
  void *main_fake_stack;
  const void *main_bottom;
  size_t main_size;
  void *main_tsan_fiber;
  uint64_t rng;    /* SOFTMETAL_SCHEDULE=random: state, 0 when in order */
  uint32_t *order; /* [n] the order of one round */
  char *fail;      /* first strict-mode failure, "" if none */
  size_t fail_len;
  const uint32_t *group; /* threadgroup position, for messages */
  sm_fault fault;        /* kernel faults of its fibers */
  const struct run_state *r;
} sched;

static _Thread_local sched *t_sched;

/* ------------------------------------------------------------- switching */
static void to_fiber(sched *s, fiber *f) {
  s->cur = f;
  s->fault.safe_sp = (uintptr_t)(f->stack + STACK_SIZE - 4096);
  sm__t_fault = &s->fault;
#if SM_ASAN
  __sanitizer_start_switch_fiber(&s->main_fake_stack, f->stack, STACK_SIZE);
#endif
#if SM_TSAN
  __tsan_switch_to_fiber(f->tsan_fiber, 0);
#endif
#if SM_FIBER_ASM
  if (!s->ucontext)
    sm__fiber_switch(&s->main_sp, f->sp);
  else
#endif
    swapcontext(&s->main, &f->ctx);
  sm__t_fault = NULL;
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
#if SM_FIBER_ASM
  if (!s->ucontext)
    sm__fiber_switch(&f->sp, s->main_sp);
  else
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
  f->entry_frame = __builtin_frame_address(0);
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

/* Kernels are compiled with frame pointers: each frame starts with the saved
 * frame pointer of its caller, then the return address (x86-64 and AArch64).
 * The walk stays inside this fiber's stack and stops at fiber_entry. */
__attribute__((noinline)) static void fiber_simd_sync(struct sm_thread *t) {
  sched *s = t->sched;
  fiber *f = s->cur;
  call_site *c = &f->site;
  uintptr_t lo = (uintptr_t)f->stack, hi = (uintptr_t)f->entry_frame;
  void *const *fp = __builtin_frame_address(0);
  c->depth = 0;
  c->file = t->simd_file;
  c->line_col = t->simd_site;
  while (c->depth < MAX_FRAMES) {
    c->frames[c->depth++] = fp[1];
    uintptr_t next = (uintptr_t)fp[0];
    if (next <= (uintptr_t)fp || next < lo || next >= hi || next % sizeof(void *)) break;
    fp = (void *const *)next;
  }
  f->state = F_SIMD;
  to_main(s, f, false);
}

static bool same_site(const call_site *a, const call_site *b) {
  return a->depth == b->depth && a->line_col == b->line_col && a->file == b->file &&
         memcmp(a->frames, b->frames, a->depth * sizeof a->frames[0]) == 0;
}

/* Which waiting group runs first: program order as far as it can be told,
 * so that lanes still in a loop or a helper run before lanes that wait after
 * it, as lanes reconverge on a GPU. The chains are compared from the kernel
 * entry inwards; at the first frame that differs, two calls in the same
 * function compare by source location, others by code address. */
static bool site_before(const call_site *a, const call_site *b) {
  uint32_t i = a->depth, j = b->depth;
  while (i > 0 && j > 0) {
    i--, j--;
    if (a->frames[i] == b->frames[j]) continue;
    if (i == 0 && j == 0 && a->line_col != b->line_col) return a->line_col < b->line_col;
    return (uintptr_t)a->frames[i] < (uintptr_t)b->frames[j];
  }
  if (i != j) return i > j; /* deeper: still inside a call */
  return a->line_col < b->line_col;
}

static void fiber_simd_fail(struct sm_thread *t, const char *function, int32_t other_lane) {
  sched *s = t->sched;
  if (s->fail[0]) return;
  uint32_t w = t->simd_width, base = t->simdgroup * w;
  uint64_t live = 0;
  for (uint32_t l = 0; l < w && base + l < t->tg_threads; l++) live |= 1ull << l;
  int digits = (int)w / 4;
  unsigned long long active = t->simd_active;
  int len = snprintf(s->fail, s->fail_len,
                     "dispatch of kernel %s: threadgroup (%u, %u, %u), simdgroup %u, lane %u: ",
                     s->k->name, s->group[0], s->group[1], s->group[2], t->simdgroup, t->lane);
  if (len < 0 || (size_t)len >= s->fail_len) return;
  if (other_lane < 0)
    snprintf(s->fail + len, s->fail_len - (size_t)len,
             "%s needs all %u lanes of the simdgroup active at the call, but the active lanes "
             "are 0x%0*llx (lanes that exist: 0x%0*llx)",
             function, w, digits, active, digits, (unsigned long long)live);
  else
    snprintf(s->fail + len, s->fail_len - (size_t)len,
             "%s reads lane %d, which is not active at this call (active lanes 0x%0*llx); "
             "Metal leaves the result undefined",
             function, other_lane, digits, active);
}

/* The front end's analysis runs every kernel that can reach a barrier or a
 * SIMD-group function on fibers; should one still get here, the thread goes
 * on (t->sched points at the group's flag) and the command buffer fails. */
static void loop_barrier(struct sm_thread *t) { *(bool *)t->sched = true; }

/* ------------------------------------------------------------- dispatch */
typedef struct run_state {
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
  uint32_t *order; /* [max_threads] */
  bool seeded;     /* SOFTMETAL_SCHEDULE=random:SEED */
  uint64_t seed;
  bool ucontext; /* SOFTMETAL_FIBER_SWITCH=ucontext */
} run_state;

/* The message of a kernel fault: the kernel, the thread (or only its
 * threadgroup when !thread_known), the rule, and for
 * an address at most a guard away from a bound buffer, which buffer. */
static void fault_message(const run_state *r, const struct sm_thread *t, bool thread_known,
                          const sm_fault *f, char *err, size_t errlen) {
  char scratch[256];
  const char *rule = sm__fault_rule(f, scratch, sizeof scratch);
  int len = thread_known
                ? snprintf(err, errlen,
                           "dispatch of kernel %s: thread_position_in_grid (%u, %u, %u), "
                           "threadgroup_position_in_grid (%u, %u, %u), "
                           "thread_position_in_threadgroup (%u, %u, %u): kernel fault: %s",
                           r->k->name, t->tpig[0], t->tpig[1], t->tpig[2], t->tgpig[0], t->tgpig[1],
                           t->tgpig[2], t->tpitg[0], t->tpitg[1], t->tpitg[2], rule)
                : snprintf(err, errlen,
                           "dispatch of kernel %s: a thread of threadgroup_position_in_grid "
                           "(%u, %u, %u): kernel fault: %s",
                           r->k->name, t->tgpig[0], t->tgpig[1], t->tgpig[2], rule);
  if (len < 0 || (size_t)len >= errlen || (f->sig != SIGSEGV && f->sig != SIGBUS)) return;
  uintptr_t a = (uintptr_t)f->addr, guard = sm__guard_bytes();
  for (unsigned i = 0; i < SM_MAX_BINDINGS; i++) {
    uintptr_t base = (uintptr_t)r->d->buffers[i], n = r->d->buffer_len[i];
    if (!base || !n) continue;
    if (a >= base + n && a - (base + n) < guard) {
      snprintf(err + len, errlen - (size_t)len,
               "; out of bounds: byte %lu of the buffer at [[buffer(%u)]], which has %lu bytes "
               "from its binding offset",
               (unsigned long)(a - base), i, (unsigned long)n);
      return;
    }
    if (a < base && base - a <= guard) {
      snprintf(err + len, errlen - (size_t)len,
               "; out of bounds: %lu bytes before the buffer at [[buffer(%u)]]",
               (unsigned long)(base - a), i);
      return;
    }
  }
  /* the threadgroup block's end meets a guard (tg_room) */
  uintptr_t tg = (uintptr_t)r->tg_block, tg_end = tg + (r->tg_bytes + 15) / 16 * 16;
  if (r->tg_bytes && a >= tg_end && a - tg_end < guard) {
    unsigned last = 0;
    for (unsigned i = 0; i < SM_MAX_BINDINGS; i++)
      if (r->d->tg_len[i]) last = i;
    snprintf(err + len, errlen - (size_t)len,
             "; out of bounds: byte %lu past the end of threadgroup memory, whose last "
             "argument [[threadgroup(%u)]] has %lu bytes (setThreadgroupMemoryLength:atIndex:)",
             (unsigned long)(a - tg_end), last, (unsigned long)r->d->tg_len[last]);
  }
}

/* The fields that differ between the threads of a threadgroup. */
static inline void thread_place(struct sm_thread *t, const run_state *r, uint32_t lx, uint32_t ly,
                                uint32_t lz) {
  const sm_dispatch *d = r->d;
  t->tpitg[0] = lx;
  t->tpitg[1] = ly;
  t->tpitg[2] = lz;
  t->tpig[0] = t->tgpig[0] * (uint32_t)d->tg.width + lx;
  t->tpig[1] = t->tgpig[1] * (uint32_t)d->tg.height + ly;
  t->tpig[2] = t->tgpig[2] * (uint32_t)d->tg.depth + lz;
  t->tiitg = (lz * t->tptg[1] + ly) * t->tptg[0] + lx;
  t->lane = t->tiitg % t->simd_width;
  t->simdgroup = t->tiitg / t->simd_width;
}

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
  t->tg_threads = sz[0] * sz[1] * sz[2];
  t->dtptg[0] = (uint32_t)d->tg.width;
  t->dtptg[1] = (uint32_t)d->tg.height;
  t->dtptg[2] = (uint32_t)d->tg.depth;
  t->simd_slots = r->simd_slots;
  t->barrier = loop_barrier;
  t->simd_sync = loop_barrier;
  t->fc_values = d->pipeline->fc_values;
  t->fc_defined = d->pipeline->fc_defined;
  t->logging = d->pipeline->logging;
  t->tg_var = sm__tg_var;
  t->tg_arena = r->tg_arena;
  t->simd_width = sm__persona()->simd_width;
  thread_place(t, r, lx, ly, lz);
}

__attribute__((noinline)) static void fiber_prepare(fiber *f, bool ucontext) {
  f->fake_stack = NULL;
#if SM_FIBER_ASM
  if (!ucontext) {
#if SM_ASAN /* frames a fiber left behind (it ended inside them) stay poisoned */
    __asan_unpoison_memory_region(f->stack + STACK_GUARD, STACK_SIZE - STACK_GUARD);
#endif
    f->sp = sm__fiber_stack_init(f->stack, STACK_SIZE, fiber_entry);
    return;
  }
#else
  (void)ucontext;
#endif
  getcontext(&f->ctx);
  f->ctx.uc_stack.ss_sp = f->stack;
  f->ctx.uc_stack.ss_size = STACK_SIZE;
  f->ctx.uc_link = NULL;
  makecontext(&f->ctx, fiber_entry, 0);
}

/* SOFTMETAL_SCHEDULE=random:SEED: xorshift64*, seeded per threadgroup. */
static uint64_t rng_next(uint64_t *x) {
  *x ^= *x >> 12;
  *x ^= *x << 25;
  *x ^= *x >> 27;
  return *x * 0x2545F4914F6CDD1Dull;
}

static uint64_t rng_seed(uint64_t seed, const uint32_t g[3]) {
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (int k = 0; k < 3; k++) {
    x ^= g[k] + 0x632BE59BD9B4E019ull + (x << 6) + (x >> 2);
    rng_next(&x);
  }
  return x ? x : 1;
}

/* order[0..n) := 0..n-1, shuffled when rng is non-zero. */
static void make_order(uint32_t *order, uint32_t n, uint64_t *rng) {
  for (uint32_t i = 0; i < n; i++) order[i] = i;
  if (!*rng) return;
  for (uint32_t i = n; i > 1; i--) {
    uint32_t j = (uint32_t)(rng_next(rng) % i);
    uint32_t tmp = order[i - 1];
    order[i - 1] = order[j];
    order[j] = tmp;
  }
}

/* Releases one group of lanes of simdgroup [base, end) that wait at the same
 * SIMD-group function, once every live lane of it waits (at a SIMD-group
 * function or a barrier). Their values move from bank 0 to bank 1. */
static bool release_simd_group(run_state *r, uint32_t base, uint32_t end) {
  fiber *fs = r->fibers, *first = NULL;
  for (uint32_t i = base; i < end; i++) {
    if (fs[i].state == F_READY) return false;
    if (fs[i].state == F_SIMD && (!first || site_before(&fs[i].site, &first->site))) first = &fs[i];
  }
  if (!first) return false;
  uint32_t tg_threads = first->t.tg_threads;
  uint64_t mask = 0;
  for (uint32_t i = base; i < end; i++)
    if (fs[i].state == F_SIMD && same_site(&fs[i].site, &first->site)) mask |= 1ull << (i - base);
  for (uint32_t i = base; i < end; i++) {
    if (!(mask >> (i - base) & 1u)) continue;
    memcpy(r->simd_slots + ((size_t)tg_threads + i) * SM_SIMD_SLOT,
           r->simd_slots + (size_t)i * SM_SIMD_SLOT, SM_SIMD_SLOT);
    fs[i].t.simd_active = mask;
    fs[i].state = F_READY;
  }
  return true;
}

/* A fiber faulted: it ends here, and so does its threadgroup. */
static void fiber_land(sm_fault *fault) {
  sched *s = fault->arg;
  fiber *f = s->cur;
  fault_message(s->r, &f->t, true, fault, s->fail, s->fail_len);
  f->state = F_FAULT;
  to_main(s, f, true);
}

static bool run_group_fibers(run_state *r, const uint32_t g[3], const uint32_t sz[3], char *err,
                             size_t errlen) {
  uint32_t n = sz[0] * sz[1] * sz[2];
  sched s;
  memset(&s, 0, sizeof s);
  s.fibers = r->fibers;
  s.n = n;
  s.k = r->k;
  s.rng = r->seeded ? rng_seed(r->seed, g) : 0;
  s.order = r->order;
  s.fail = err;
  s.fail_len = errlen;
  s.group = g;
  s.r = r;
  s.fault.land = fiber_land;
  s.fault.arg = &s;
  s.fault.divide_faults = sm__shader_validation();
  s.ucontext = r->ucontext;
  err[0] = 0;
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
        f->t.simd_fail = fiber_simd_fail;
        f->t.sched = &s;
        f->state = F_READY;
        fiber_prepare(f, s.ucontext);
      }
  bool ok = true;
  for (;;) {
    make_order(s.order, n, &s.rng);
    for (i = 0; i < n; i++) {
      fiber *f = &r->fibers[s.order[i]];
      if (f->state == F_READY) to_fiber(&s, f);
      if (f->state == F_FAULT) break;
    }
    if (i < n) { /* a kernel fault: the other fibers are abandoned */
      ok = false;
      break;
    }
    uint32_t done = 0, at_barrier = 0;
    for (i = 0; i < n; i++) {
      done += r->fibers[i].state == F_DONE;
      at_barrier += r->fibers[i].state == F_BARRIER;
    }
    if (done == n) break;
    /* Lanes elsewhere (at a barrier, at another call, exited) are inactive
     * lanes for the group released. */
    bool released = false;
    const uint32_t w = sm__persona()->simd_width;
    for (uint32_t base = 0; base < n; base += w)
      released |= release_simd_group(r, base, base + w < n ? base + w : n);
    if (released) continue;
    /* Apple GPUs: threads that have returned no longer execute the kernel,
     * so a barrier waits only for the threads still running. Elsewhere
     * (the amd-discrete persona) that is undefined: it fails below. */
    const bool apple_gpu = sm__persona()->kind != SM_PERSONA_AMD_DISCRETE;
    if (at_barrier && at_barrier + done == n && (done == 0 || apple_gpu)) {
      for (i = 0; i < n; i++)
        if (r->fibers[i].state == F_BARRIER) r->fibers[i].state = F_READY;
      continue;
    }
    ok = false;
    uint32_t at_simd = n - done - at_barrier;
    snprintf(err, errlen,
             "dispatch of kernel %s: threadgroup (%u, %u, %u) of %u threads: divergent "
             "synchronization: %u threads wait at threadgroup_barrier, %u at a simdgroup "
             "function, %u have exited; every thread must reach each barrier%s",
             r->k->name, g[0], g[1], g[2], n, at_barrier, at_simd, done,
             apple_gpu ? "" : " (threads that have returned release a barrier only on Apple GPUs)");
    break;
  }
  if (ok && err[0]) ok = false; /* a SIMD-group function failed */
  t_sched = saved;
  return ok;
}

/* Kernel faults of the plain loop: land() jumps back to run_group_guarded
 * or run_chunk. */
typedef struct {
  sm_fault fault;
  sigjmp_buf jb;
  const run_state *r;
  const struct sm_thread *t;
  char *err;
  size_t errlen;
  bool whole_group; /* in the kernel's own loop (run_chunk): no thread is known */
} loop_fault;

static void loop_land(sm_fault *fault) {
  loop_fault *lf = (loop_fault *)fault;
  if (!lf->whole_group) fault_message(lf->r, lf->t, true, fault, lf->err, lf->errlen);
  siglongjmp(lf->jb, 1);
}

/* One sm_thread for the whole threadgroup: the kernel only reads it. */
__attribute__((noinline)) static bool run_group_loop(run_state *r, const uint32_t g[3],
                                                     const uint32_t sz[3], char *err, size_t errlen,
                                                     loop_fault *lf) {
  struct sm_thread t;
  bool synced = false;
  uint32_t n = sz[0] * sz[1] * sz[2];
  thread_init(&t, r, g, sz, 0, 0, 0);
  lf->t = &t;
  t.sched = &synced;
  if (r->seeded) {
    uint64_t rng = rng_seed(r->seed, g);
    make_order(r->order, n, &rng);
    for (uint32_t i = 0; i < n; i++) {
      uint32_t j = r->order[i];
      thread_place(&t, r, j % sz[0], j / sz[0] % sz[1], j / sz[0] / sz[1]);
      r->k->fn(&t);
    }
  }
  for (uint32_t z = 0; !r->seeded && z < sz[2]; z++)
    for (uint32_t y = 0; y < sz[1]; y++)
      for (uint32_t x = 0; x < sz[0]; x++) {
        thread_place(&t, r, x, y, z);
        r->k->fn(&t);
      }
  if (synced)
    snprintf(err, errlen,
             "dispatch of kernel %s: a thread reached threadgroup_barrier or a SIMD-group "
             "function that softmetal's analysis of the kernel did not find (a softmetal bug: "
             "please report the kernel)",
             r->k->name);
  return !synced;
}

/* One threadgroup of a kernel without barriers, thread by thread. False
 * with a message when it failed (a fault included). */
static bool run_group_guarded(run_state *r, const uint32_t g[3], const uint32_t sz[3], char *err,
                              size_t errlen) {
  loop_fault lf;
  memset(&lf.fault, 0, sizeof lf.fault);
  lf.fault.land = loop_land;
  lf.fault.divide_faults = sm__shader_validation();
  lf.r = r;
  lf.t = NULL;
  lf.err = err;
  lf.errlen = errlen;
  lf.whole_group = false;
  if (sigsetjmp(lf.jb, 0)) return false; /* a kernel fault; the message is written */
  sm__t_fault = &lf.fault;
  bool ok = run_group_loop(r, g, sz, err, errlen, &lf);
  sm__t_fault = NULL;
  return ok;
}

/* SOFTMETAL_SCHEDULE: unset or "in-order" (the default), or "random:SEED"
 * with SEED a decimal number. Anything else is a usage error. */
static void read_schedule(bool *seeded, uint64_t *seed_out) {
  const char *v = getenv("SOFTMETAL_SCHEDULE");
  if (!v || !*v || strcmp(v, "in-order") == 0) return;
  if (strncmp(v, "random:", 7) == 0 && v[7] >= '0' && v[7] <= '9') {
    char *end;
    unsigned long long seed = strtoull(v + 7, &end, 10);
    if (!*end) {
      *seeded = true;
      *seed_out = seed;
      return;
    }
  }
  sm__fatal("SOFTMETAL_SCHEDULE=%s: expected in-order or random:SEED (SEED a decimal number)", v);
}

/* SOFTMETAL_FIBER_SWITCH: unset or "own" (the default: sm_fiber.c's switch
 * where there is one), or "ucontext" (glibc's swapcontext, a system call per
 * switch; for comparisons). Anything else is a usage error. */
static bool read_fiber_switch(void) {
  const char *v = getenv("SOFTMETAL_FIBER_SWITCH");
  if (!v || !*v || strcmp(v, "own") == 0) return !SM_FIBER_ASM;
  if (strcmp(v, "ucontext") == 0) return true;
  sm__fatal("SOFTMETAL_FIBER_SWITCH=%s: expected own or ucontext", v);
}

/* What a participant keeps from one dispatch to the next (per thread, freed
 * when the thread ends): the buffers, fibers and fiber stacks job_work would
 * otherwise allocate and free every time. */
typedef struct {
  unsigned char *tg_block;
  size_t tg_cap;
  unsigned char *simd_slots;
  size_t simd_cap;
  bool simd_dirty; /* written since zeroed (a kernel reached a SIMD-group function) */
  sm_tg_arena *tg_arena;
  uint32_t *order;
  uint32_t order_cap;
  fiber *fibers; /* [nfibers], each known to TSan */
  unsigned char *stacks;
  size_t stacks_len;
  uint32_t nfibers;
} exec_cache;

static void drop_fibers(exec_cache *c) {
  if (c->stacks) {
    for (uint32_t i = 0; i < c->nfibers; i++) {
#if SM_TSAN
      __tsan_destroy_fiber(c->fibers[i].tsan_fiber);
#endif
    }
    munmap(c->stacks, c->stacks_len);
  }
  free(c->fibers);
  c->fibers = NULL;
  c->stacks = NULL;
  c->stacks_len = 0;
  c->nfibers = 0;
}

static void cache_free(void *arg) {
  exec_cache *c = arg;
  drop_fibers(c);
  sm__guarded_free(c->tg_block, c->tg_cap);
  free(c->simd_slots);
  sm__tg_arena_free(c->tg_arena);
  free(c->order);
  free(c);
}

static pthread_key_t g_cache_key;
static void cache_key_make(void) {
  if (pthread_key_create(&g_cache_key, cache_free) != 0)
    sm__fatal("softmetal: pthread_key_create failed");
}

static pthread_once_t g_cache_once = PTHREAD_ONCE_INIT;

void sm__exec_thread_done(void) {
  pthread_once(&g_cache_once, cache_key_make);
  exec_cache *c = pthread_getspecific(g_cache_key);
  if (!c) return;
  pthread_setspecific(g_cache_key, NULL);
  cache_free(c);
}

/* This thread's cache, or NULL when out of memory. */
static exec_cache *cache_get(void) {
  pthread_once(&g_cache_once, cache_key_make);
  exec_cache *c = pthread_getspecific(g_cache_key);
  if (c) return c;
  c = calloc(1, sizeof *c);
  if (c && pthread_setspecific(g_cache_key, c) != 0) {
    free(c);
    c = NULL;
  }
  return c;
}

/* Where a dispatch's n bytes of threadgroup memory start: the cache's
 * block, grown where too small, has a guard page after it, and the bytes
 * (rounded to 16, the unit of threadgroup lengths) end at it, so that an
 * access past the end faults; NULL when out of memory. */
static unsigned char *tg_room(exec_cache *c, size_t n) {
  size_t need = (n + 15) / 16 * 16;
  if (c->tg_cap < need || !c->tg_block) {
    sm__guarded_free(c->tg_block, c->tg_cap);
    c->tg_block = sm__guarded_alloc(need ? need : 16);
    c->tg_cap = c->tg_block ? (need ? need : 16) : 0;
    if (!c->tg_block) return NULL;
  }
  return c->tg_block + (c->tg_cap - need);
}

/* Under valgrind the fiber stacks are not registered with
 * VALGRIND_STACK_REGISTER: memcheck keeps one "current stack" for the whole
 * process, so once another thread has switched stacks, a fiber's next
 * stack-pointer change of an unusual size (a frame of 0xa8 bytes) is taken
 * for a switch into a registered stack and the new frame stays inaccessible:
 * false "Invalid write" reports that depend on scheduling. Instead each stack
 * sits at the top of its own VG_SLOT of inaccessible address space, with a
 * slot below and above the lot, so every switch moves the stack pointer by
 * more than memcheck's --max-stackframe (2 MiB unless raised) and is
 * recognised as one, while moves within a stack never are. */
enum { VG_SLOT = 4 * 1024 * 1024 };

static bool setup_fibers(run_state *r, exec_cache *c, uint32_t max_threads, char *err,
                         size_t errlen) {
  if (c->nfibers >= max_threads) { /* the stacks of an earlier dispatch */
    r->fibers = c->fibers;
    r->stacks = c->stacks;
    r->stacks_len = c->stacks_len;
    return true;
  }
  drop_fibers(c);
  size_t slot = STACK_SIZE, pad = 0;
  int prot = PROT_READ | PROT_WRITE;
#if SM_VALGRIND
  if (RUNNING_ON_VALGRIND) {
    slot = VG_SLOT;
    pad = VG_SLOT;
    prot = PROT_NONE;
  }
#endif
  /* max_threads <= 1024 (the pipeline's limit): no overflow. */
  r->stacks_len = 2 * pad + (size_t)max_threads * slot;
  void *m = mmap(NULL, r->stacks_len, prot, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  r->fibers = calloc(max_threads, sizeof *r->fibers);
  if (m == MAP_FAILED || !r->fibers) {
    if (m != MAP_FAILED) munmap(m, r->stacks_len);
    free(r->fibers);
    r->fibers = NULL;
    r->stacks = NULL;
    snprintf(err, errlen, "dispatch of kernel %s: cannot allocate %u fiber stacks", r->k->name,
             max_threads);
    return false;
  }
  r->stacks = m;
  for (uint32_t i = 0; i < max_threads; i++) {
    unsigned char *stack = r->stacks + pad + (size_t)i * slot + (slot - STACK_SIZE);
    r->fibers[i].stack = stack;
    if (prot == PROT_NONE)
      mprotect(stack + STACK_GUARD, STACK_SIZE - STACK_GUARD, PROT_READ | PROT_WRITE);
    else
      mprotect(stack, STACK_GUARD, PROT_NONE);
#if SM_TSAN
    r->fibers[i].tsan_fiber = __tsan_create_fiber(0);
#endif
  }
  c->fibers = r->fibers;
  c->stacks = r->stacks;
  c->stacks_len = r->stacks_len;
  c->nfibers = max_threads;
  return true;
}

/* The size of threadgroup g (partial at the grid's far edges). */
static void group_size(const sm_dispatch *d, const uint32_t g[3], uint32_t sz[3]) {
  const NSUInteger grid[3] = {d->grid.width, d->grid.height, d->grid.depth};
  const NSUInteger tg[3] = {d->tg.width, d->tg.height, d->tg.depth};
  for (int k = 0; k < 3; k++) {
    NSUInteger start = g[k] * tg[k], left = grid[k] - start;
    sz[k] = (uint32_t)(left < tg[k] ? left : tg[k]);
  }
}

static void group_at(const sm_dispatch *d, uint64_t i, uint32_t g[3]) {
  const uint64_t gw = d->groups.width, gh = d->groups.height;
  g[0] = (uint32_t)(i % gw);
  g[1] = (uint32_t)(i / gw % gh);
  g[2] = (uint32_t)(i / gw / gh);
}

/* Threadgroups [first, end) in grid order through the kernel's own loop,
 * with one fault record for them all: per threadgroup only the fields of
 * the thread that change. A fault there does not tell which thread
 * faulted: the threadgroup runs again thread by thread (its command buffer
 * fails anyway) to name it. */
typedef struct {
  loop_fault lf;
  uint64_t at; /* the threadgroup running */
} chunk_fault;

static bool run_chunk(run_state *r, uint64_t first, uint64_t end, char *err, size_t errlen) {
  chunk_fault cf;
  memset(&cf.lf.fault, 0, sizeof cf.lf.fault);
  cf.lf.fault.land = loop_land;
  cf.lf.fault.divide_faults = sm__shader_validation();
  cf.lf.r = r;
  cf.lf.t = NULL;
  cf.lf.err = err;
  cf.lf.errlen = errlen;
  cf.lf.whole_group = true;
  cf.at = first;
  if (sigsetjmp(cf.lf.jb, 0)) { /* a kernel fault in threadgroup cf.at */
    uint32_t g[3], sz[3];
    group_at(r->d, cf.at, g);
    group_size(r->d, g, sz);
    if (r->tg_bytes) memset(r->tg_block, 0xFF, r->tg_bytes);
    sm__tg_arena_begin(r->tg_arena);
    sm_fault fault = cf.lf.fault;
    if (run_group_guarded(r, g, sz, err, errlen)) { /* it ran: the first fault, no thread */
      struct sm_thread t;
      thread_init(&t, r, g, sz, 0, 0, 0);
      fault_message(r, &t, false, &fault, err, errlen);
      size_t len = strlen(err);
      snprintf(err + len, errlen - len,
               " (run again thread by thread, the threadgroup did "
               "not fault, so the thread is not known)");
    }
    return false;
  }
  struct sm_thread t;
  bool synced = false;
  uint32_t g[3], sz[3];
  group_at(r->d, first, g);
  group_size(r->d, g, sz);
  thread_init(&t, r, g, sz, 0, 0, 0);
  t.sched = &synced;
  const uint32_t tgw = (uint32_t)r->d->tg.width, tgh = (uint32_t)r->d->tg.height,
                 tgd = (uint32_t)r->d->tg.depth;
  sm__t_fault = &cf.lf.fault;
  for (uint64_t i = first; i < end && !synced; i++) {
    cf.at = i;
    group_at(r->d, i, g);
    group_size(r->d, g, sz);
    memcpy(t.tgpig, g, sizeof t.tgpig);
    memcpy(t.tptg, sz, sizeof t.tptg);
    t.tg_threads = sz[0] * sz[1] * sz[2];
    t.tpig[0] = g[0] * tgw, t.tpig[1] = g[1] * tgh, t.tpig[2] = g[2] * tgd;
    if (r->tg_bytes) memset(r->tg_block, 0xFF, r->tg_bytes);
    sm__tg_arena_begin(r->tg_arena);
    r->k->group_fn(&t);
  }
  sm__t_fault = NULL;
  if (synced)
    snprintf(err, errlen,
             "dispatch of kernel %s: a thread reached threadgroup_barrier or a SIMD-group "
             "function that softmetal's analysis of the kernel did not find (a softmetal bug: "
             "please report the kernel)",
             r->k->name);
  return !synced;
}

/* ------------------------------------------------------------- workers */
/* The threadgroups of a dispatch, numbered in grid order, are taken in
 * chunks by the participants: the queue's thread and the pool's workers.
 * Under SOFTMETAL_SCHEDULE=random:SEED the numbers go through a seeded
 * permutation, so the order in which threadgroups are handed out depends
 * only on the seed. */
typedef struct {
  uint64_t n, mask, k[4];
  unsigned shift;
} group_perm;

static void perm_init(group_perm *p, uint64_t n, uint64_t seed) {
  unsigned bits = 0;
  while (bits < 64 && ((uint64_t)1 << bits) < n) bits++;
  p->n = n;
  p->mask = bits >= 64 ? ~(uint64_t)0 : ((uint64_t)1 << bits) - 1;
  p->shift = bits / 2 + 1;
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull;
  for (int i = 0; i < 4; i++) p->k[i] = rng_next(&x) | 1;
}

/* A bijection of [0, n): rounds of odd multiply, xor-shift and add modulo
 * the next power of two, walking the cycle until the value is below n. */
static uint64_t perm_at(const group_perm *p, uint64_t i) {
  do {
    for (int r = 0; r < 4; r++) {
      i = (i * p->k[r]) & p->mask;
      i ^= i >> p->shift;
      i = (i + (p->k[r] >> 17)) & p->mask;
    }
  } while (i >= p->n);
  return i;
}

typedef struct {
  const sm_dispatch *d;
  uint64_t ngroups, chunk;
  bool seeded;
  uint64_t seed;
  bool ucontext; /* SOFTMETAL_FIBER_SWITCH=ucontext */
  group_perm perm;
  atomic_uint_fast64_t next; /* first number not yet handed out */
  atomic_bool stop;          /* a threadgroup failed */
  pthread_mutex_t mu;        /* guards err and failed */
  bool failed;
  char *err;
  size_t errlen;
} job;

static void job_fail(job *j, const char *msg) {
  pthread_mutex_lock(&j->mu);
  if (!j->failed) {
    j->failed = true;
    snprintf(j->err, j->errlen, "%s", msg);
  }
  pthread_mutex_unlock(&j->mu);
  atomic_store(&j->stop, true);
}

/* Tracked code (sm_dispatch.touched): this thread's record of the current
 * dispatch, its ranges by descending start; [lo, hi) spans them all (empty
 * when nothing is tracked), and `last` is the range hit last. Most accesses
 * fall in the range of the one before, and accesses outside every binding
 * (threadgroup memory, the stack, constants) are common: both are decided
 * without a search. */
struct track_state {
  uintptr_t lo, hi;
  struct sm_touched *all;
  unsigned n, last;
};
static __attribute__((tls_model("initial-exec"))) _Thread_local struct track_state t_track = {
    UINTPTR_MAX, 0, NULL, 0, 0};
/* The tracked code (sm_compile.c's TOUCH_CALLBACKS) reads and updates these
 * in place, with their layouts written out again there. */
_Static_assert(offsetof(struct track_state, all) == 16 && offsetof(struct track_state, n) == 24 &&
                   offsetof(struct track_state, last) == 28,
               "TOUCH_CALLBACKS' sm_touch_state");
_Static_assert(sizeof(struct sm_touched) == 56 && offsetof(struct sm_touched, owner) == 16 &&
                   offsetof(struct sm_touched, rlo) == 24 && offsetof(struct sm_touched, whi) == 48,
               "TOUCH_CALLBACKS' sm_touch_range");

/* Initial-exec TLS sits at the same offset from the thread pointer in every
 * thread, so the tracked code finds t_track there with no call. */
long sm__touch_window(void) {
  char *tp;
#if defined(__x86_64__)
  __asm__("movq %%fs:0, %0" : "=r"(tp)); /* the TCB's pointer to itself */
#elif defined(__aarch64__)
  __asm__("mrs %0, tpidr_el0" : "=r"(tp));
#else
#error "softmetal's tracked code reads the thread pointer of x86-64 or aarch64"
#endif
  return (long)((char *)&t_track - tp);
}

/* Starts tracking the n ranges at all for this thread; (NULL, 0) stops. */
static void track_begin(struct sm_touched *all, unsigned n) {
  t_track.all = all;
  t_track.n = n;
  t_track.last = 0;
  t_track.lo = UINTPTR_MAX;
  t_track.hi = 0;
  for (unsigned i = 0; i < n; i++) {
    if (all[i].start < t_track.lo) t_track.lo = all[i].start;
    if (all[i].end > t_track.hi) t_track.hi = all[i].end;
  }
}

void sm__touch(unsigned long address, unsigned long n, int write) {
  uintptr_t a = address, z;
  if (a < t_track.lo || a >= t_track.hi) return;
  struct sm_touched *t = &t_track.all[t_track.last];
  if (a < t->start || a >= t->end) {
    unsigned i = 0;
    while (i < t_track.n && (a < t_track.all[i].start || a >= t_track.all[i].end)) i++;
    if (i == t_track.n) return; /* between bindings */
    t_track.last = i;
    t = &t_track.all[i];
  }
  if (__builtin_add_overflow(a, n, &z)) z = UINTPTR_MAX;
  if (write) {
    if (a < t->wlo) t->wlo = a;
    if (z > t->whi) t->whi = z;
  } else {
    if (a < t->rlo) t->rlo = a;
    if (z > t->rhi) t->rhi = z;
  }
}

/* One participant's share: its own threadgroup memory, SIMD slots, fibers
 * and fault record; threadgroups until none is left or one failed. */
static void job_work(job *j) {
  const sm_dispatch *d = j->d;
  char err[2048] = "";
  run_state r;
  memset(&r, 0, sizeof r);
  r.d = d;
  r.k = d->pipeline->desc;
  struct sm_kernel_desc tracked_desc;
  struct sm_touched mine[SM_MAX_BINDINGS];
  if (d->touched) {
    tracked_desc = *r.k;
    tracked_desc.fn = d->pipeline->tracked_fn;
    tracked_desc.group_fn = d->pipeline->tracked_group_fn;
    r.k = &tracked_desc;
    memcpy(mine, d->touched, d->ntouched * sizeof *mine);
    track_begin(mine, d->ntouched);
  }
  r.seeded = j->seeded;
  r.ucontext = j->ucontext;
  r.seed = j->seed;
  uint32_t max_threads = (uint32_t)(d->tg.width * d->tg.height * d->tg.depth);
  for (unsigned i = 0; i < SM_MAX_BINDINGS; i++) r.tg_bytes += d->tg_len[i];
  bool fibers = r.k->needs_fibers != 0;
  /* This thread's buffers from earlier dispatches, grown where too small;
   * the SIMD-group slots start zeroed, as calloc's. */
  exec_cache *c = cache_get();
  const size_t simd_bytes = 2 * (size_t)max_threads * SM_SIMD_SLOT;
  unsigned char *tg_block = c ? tg_room(c, r.tg_bytes) : NULL;
  bool ok = tg_block != NULL;
  if (ok && (c->simd_cap < simd_bytes || !c->simd_slots)) {
    free(c->simd_slots);
    c->simd_slots = calloc(1, simd_bytes);
    c->simd_cap = c->simd_slots ? simd_bytes : 0;
    c->simd_dirty = false;
    ok = c->simd_slots != NULL;
  } else if (ok && c->simd_dirty) {
    memset(c->simd_slots, 0, c->simd_cap);
    c->simd_dirty = false;
  }
  if (ok && !c->tg_arena) ok = (c->tg_arena = sm__tg_arena_new()) != NULL;
  if (ok && (fibers || r.seeded) && c->order_cap < max_threads) {
    free(c->order);
    c->order = malloc(max_threads * sizeof *c->order);
    c->order_cap = c->order ? max_threads : 0;
    ok = c->order != NULL;
  }
  if (ok) {
    r.tg_block = tg_block;
    r.simd_slots = c->simd_slots;
    r.tg_arena = c->tg_arena;
    r.order = c->order;
  }
  if (!ok) snprintf(err, sizeof err, "dispatch of kernel %s: out of memory", r.k->name);
  size_t at = 0;
  for (unsigned i = 0; ok && i < SM_MAX_BINDINGS; i++) {
    r.tgmem[i] = d->tg_len[i] ? r.tg_block + at : NULL;
    at += d->tg_len[i];
  }
  if (ok && fibers) ok = setup_fibers(&r, c, max_threads, err, sizeof err);
  bool whole = !fibers && !r.seeded && r.k->group_fn;
  while (ok && !atomic_load_explicit(&j->stop, memory_order_relaxed)) {
    uint64_t first = atomic_fetch_add(&j->next, j->chunk);
    if (first >= j->ngroups) break;
    uint64_t end = j->ngroups - first < j->chunk ? j->ngroups : first + j->chunk;
    if (whole) {
      ok = run_chunk(&r, first, end, err, sizeof err);
      continue;
    }
    for (uint64_t i = first; ok && i < end; i++) {
      uint32_t g[3], sz[3];
      group_at(d, j->seeded ? perm_at(&j->perm, i) : i, g);
      group_size(d, g, sz);
      /* Threadgroup memory starts as garbage on a GPU: make reliance on zero visible. */
      if (r.tg_bytes) memset(r.tg_block, 0xFF, r.tg_bytes);
      sm__tg_arena_begin(r.tg_arena);
      if (fibers)
        ok = run_group_fibers(&r, g, sz, err, sizeof err);
      else
        ok = run_group_guarded(&r, g, sz, err, sizeof err);
    }
  }
  if (d->touched) {
    track_begin(NULL, 0);
    pthread_mutex_lock(&j->mu);
    for (unsigned i = 0; i < d->ntouched; i++) {
      struct sm_touched *all = &d->touched[i];
      if (mine[i].rlo < all->rlo) all->rlo = mine[i].rlo;
      if (mine[i].rhi > all->rhi) all->rhi = mine[i].rhi;
      if (mine[i].wlo < all->wlo) all->wlo = mine[i].wlo;
      if (mine[i].whi > all->whi) all->whi = mine[i].whi;
    }
    pthread_mutex_unlock(&j->mu);
  }
  if (!ok) job_fail(j, err);
  /* A kernel that reached a SIMD-group function wrote its slot. */
  if (c && (fibers || !ok)) c->simd_dirty = true;
}

/* The pool: SOFTMETAL_THREADS participants (default: the online cores),
 * that is the queue's thread and that many workers less one, started at the
 * first dispatch and joined when the last device is released. A pool runs
 * one dispatch at a time; a queue that finds it busy runs its dispatch on
 * its own thread. */
static struct {
  pthread_mutex_t mu;
  pthread_cond_t work_cv, done_cv;
  pthread_t *threads;
  unsigned nthreads; /* workers */
  bool started, stop;
  job *cur;
  uint64_t gen;     /* bumped for each job handed to the workers */
  unsigned running; /* workers inside the current job */
} g_pool = {PTHREAD_MUTEX_INITIALIZER,
            PTHREAD_COND_INITIALIZER,
            PTHREAD_COND_INITIALIZER,
            NULL,
            0,
            false,
            false,
            NULL,
            0,
            0};

static void *worker_main(void *arg) {
  (void)arg;
  sm_altstack alt;
  sm__altstack_push(&alt);
  uint64_t seen = 0;
  pthread_mutex_lock(&g_pool.mu);
  for (;;) {
    while (!g_pool.stop && (!g_pool.cur || g_pool.gen == seen))
      pthread_cond_wait(&g_pool.work_cv, &g_pool.mu);
    if (g_pool.stop) break;
    seen = g_pool.gen;
    job *j = g_pool.cur;
    g_pool.running++;
    pthread_mutex_unlock(&g_pool.mu);
    job_work(j);
    pthread_mutex_lock(&g_pool.mu);
    if (--g_pool.running == 0) pthread_cond_broadcast(&g_pool.done_cv);
  }
  pthread_mutex_unlock(&g_pool.mu);
  sm__altstack_pop(&alt);
  return NULL;
}

static unsigned read_threads(void) {
  const char *v = getenv("SOFTMETAL_THREADS");
  if (v && *v) {
    char *end;
    unsigned long n = strtoul(v, &end, 10);
    if (*end || n < 1 || n > 1024)
      sm__fatal("SOFTMETAL_THREADS=%s: expected a number of threads in 1..1024", v);
    return (unsigned)n;
  }
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n < 1 ? 1 : n > 1024 ? 1024 : (unsigned)n;
}

/* A child of fork() has none of the parent's workers: it starts its own. */
static pthread_t *g_parent_threads;
static void pool_forget(void) {
  pthread_mutex_init(&g_pool.mu, NULL);
  pthread_cond_init(&g_pool.work_cv, NULL);
  pthread_cond_init(&g_pool.done_cv, NULL);
  if (g_pool.threads) g_parent_threads = g_pool.threads; /* reachable, never freed here */
  g_pool.threads = NULL;
  g_pool.nthreads = 0;
  g_pool.started = g_pool.stop = false;
  g_pool.cur = NULL;
  g_pool.running = 0;
}
static void pool_atfork(void) { pthread_atfork(NULL, NULL, pool_forget); }

/* Under g_pool.mu. */
static void pool_start(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, pool_atfork);
  if (g_pool.started) return;
  g_pool.started = true;
  g_pool.stop = false;
  unsigned want = read_threads() - 1;
  g_pool.threads = want ? calloc(want, sizeof *g_pool.threads) : NULL;
  g_pool.nthreads = 0;
  for (unsigned i = 0; g_pool.threads && i < want; i++) {
    if (pthread_create(&g_pool.threads[i], NULL, worker_main, NULL) != 0) break;
    g_pool.nthreads++;
  }
}

void sm__exec_shutdown(void) {
  pthread_mutex_lock(&g_pool.mu);
  if (!g_pool.started) {
    pthread_mutex_unlock(&g_pool.mu);
    return;
  }
  g_pool.stop = true;
  pthread_cond_broadcast(&g_pool.work_cv);
  pthread_t *threads = g_pool.threads;
  unsigned n = g_pool.nthreads;
  pthread_mutex_unlock(&g_pool.mu);
  for (unsigned i = 0; i < n; i++) pthread_join(threads[i], NULL);
  free(threads);
  pthread_mutex_lock(&g_pool.mu);
  g_pool.threads = NULL;
  g_pool.nthreads = 0;
  g_pool.started = false;
  pthread_mutex_unlock(&g_pool.mu);
}

bool sm__run_dispatch(const sm_dispatch *d, char *err, size_t errlen) {
  if (d->grid.width == 0 || d->grid.height == 0 || d->grid.depth == 0) return true;
  job j;
  memset(&j, 0, sizeof j);
  j.d = d;
  j.err = err;
  j.errlen = errlen;
  err[0] = 0;
  if (__builtin_mul_overflow((uint64_t)d->groups.width, d->groups.height, &j.ngroups) ||
      __builtin_mul_overflow(j.ngroups, d->groups.depth, &j.ngroups)) {
    snprintf(err, errlen,
             "dispatch of kernel %s: {%lu, %lu, %lu} threadgroups are over 2^64 in "
             "all, more than softmetal can count",
             d->pipeline->desc->name, d->groups.width, d->groups.height, d->groups.depth);
    return false; /* a wrapped count would run part of the grid, or none of it */
  }
  read_schedule(&j.seeded, &j.seed);
  j.ucontext = read_fiber_switch();
  if (j.seeded) perm_init(&j.perm, j.ngroups, j.seed);
  atomic_init(&j.next, 0);
  atomic_init(&j.stop, false);
  pthread_mutex_init(&j.mu, NULL);
  sm__fault_init(); /* the signal stack: the queue's thread has one */
  bool pooled = false;
  pthread_mutex_lock(&g_pool.mu);
  pool_start();
  uint64_t parts = g_pool.nthreads + 1;
  if (g_pool.nthreads && !g_pool.cur && j.ngroups > 1) {
    g_pool.cur = &j;
    g_pool.gen++;
    pooled = true;
  }
  /* Chunks small enough to share the work, large enough to keep the
   * counter cold. */
  j.chunk = pooled ? j.ngroups / (parts * 16) : j.ngroups;
  if (j.chunk < 1) j.chunk = 1;
  if (pooled) pthread_cond_broadcast(&g_pool.work_cv);
  pthread_mutex_unlock(&g_pool.mu);
  job_work(&j);
  if (pooled) {
    pthread_mutex_lock(&g_pool.mu);
    g_pool.cur = NULL; /* workers that have not joined it yet never will */
    while (g_pool.running) pthread_cond_wait(&g_pool.done_cv, &g_pool.mu);
    pthread_mutex_unlock(&g_pool.mu);
  }
  pthread_mutex_destroy(&j.mu);
  return !j.failed;
}
