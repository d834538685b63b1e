/* SPDX-License-Identifier: MIT */
/* Threadgroups on a pool of workers: in a seeded random order under
 * SOFTMETAL_SCHEDULE=random:SEED, concurrently with SOFTMETAL_THREADS > 1,
 * with device atomics exact across workers. */
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "softmetal/sm_run.h"

static const char SRC[] =
    "#include <metal_stdlib>\n"
    "using namespace metal;\n"
    /* Threadgroup g reads what threadgroup g - 1 wrote, with nothing ordering
     * them: the result depends on the order threadgroups run in. */
    "kernel void chain(device uint *cell [[buffer(0)]],\n"
    "                  uint g [[threadgroup_position_in_grid]],\n"
    "                  uint l [[thread_position_in_threadgroup]]) {\n"
    "  if (l == 0) cell[g + 1] = cell[g] * 31u + g + 1u;\n"
    "}\n"
    "kernel void count(device atomic_uint *n [[buffer(0)]], device atomic_int *per [[buffer(1)]],\n"
    "                  uint g [[threadgroup_position_in_grid]]) {\n"
    "  atomic_fetch_add_explicit(n, 1u, memory_order_relaxed);\n"
    "  atomic_fetch_add_explicit(&per[g % 8], 1, memory_order_relaxed);\n"
    "}\n"
    /* The same through a barrier (fibers). */
    "kernel void count_fibers(device atomic_uint *n [[buffer(0)]],\n"
    "                         uint l [[thread_position_in_threadgroup]]) {\n"
    "  threadgroup uint local[1];\n"
    "  if (l == 0) local[0] = 0;\n"
    "  threadgroup_barrier(mem_flags::mem_threadgroup);\n"
    "  atomic_fetch_add_explicit(n, 1u, memory_order_relaxed);\n"
    "}\n"
    /* Barriers and a SIMD-group function: a fiber switch per thread at each. */
    "kernel void rounds(device uint *out [[buffer(0)]], uint i [[thread_position_in_grid]],\n"
    "                   uint l [[thread_position_in_threadgroup]]) {\n"
    "  threadgroup uint t[64];\n"
    "  uint v = i * 7u + 1u;\n"
    "  for (int r = 0; r < 4; r++) {\n"
    "    t[l] = v;\n"
    "    threadgroup_barrier(mem_flags::mem_threadgroup);\n"
    "    v = v * 3u + t[63u - l] + simd_sum(v);\n"
    "    threadgroup_barrier(mem_flags::mem_threadgroup);\n"
    "  }\n"
    "  out[i] = v;\n"
    "}\n"
    /* A stack frame per thread that lives across a barrier. */
    "kernel void frames(device uint *out [[buffer(0)]], uint i [[thread_position_in_grid]],\n"
    "                   uint l [[thread_position_in_threadgroup]]) {\n"
    "  uint tmp[37];\n"
    "  for (uint k = 0; k < 37u; k++) tmp[k] = i * k + l;\n"
    "  threadgroup_barrier(mem_flags::mem_none);\n"
    "  out[i] = tmp[(i * 5u) % 37u] + tmp[l % 37u];\n"
    "}\n"
    "kernel void saxpy(device const float *x [[buffer(0)]], device float *y [[buffer(1)]],\n"
    "                  uint i [[thread_position_in_grid]]) {\n"
    "  y[i] = 2.0f * x[i] + 1.0f;\n"
    "}\n";

static void setup(void) { sm_run_open_library(SRC); }
TestSuite(exec, .init = setup, .fini = sm_run_close, .timeout = 120);

enum { GROUPS = 64 };

/* The cells after chain over GROUPS threadgroups of 4 threads, cell[0] = 1. */
static void run_chain(const char *schedule, uint32_t out[GROUPS + 1]) {
  setenv("SOFTMETAL_SCHEDULE", schedule, 1);
  uint32_t init[GROUPS + 1] = {1};
  id cells = sm_buffer(init, sizeof init);
  sm_dispatch(sm_lib, "chain", &cells, 1, SM_SIZE(GROUPS * 4, 1, 1), SM_SIZE(4, 1, 1), false, 0);
  memcpy(out, sm_contents(cells), sizeof init);
  sm_release(cells);
  unsetenv("SOFTMETAL_SCHEDULE");
}

Test(exec, threadgroups_run_in_an_order_that_depends_on_the_seed) {
  setenv("SOFTMETAL_THREADS", "1", 1); /* one participant: the order is the schedule's */
  uint32_t in_order[GROUPS + 1], a[GROUPS + 1], a2[GROUPS + 1], b[GROUPS + 1];
  run_chain("in-order", in_order);
  uint32_t want = 1;
  for (uint32_t g = 0; g < GROUPS; g++) {
    want = want * 31u + g + 1u;
    cr_assert_eq(in_order[g + 1], want, "in order, cell %u", g + 1);
  }
  run_chain("random:1", a);
  run_chain("random:2", b);
  run_chain("random:1", a2);
  cr_assert(memcmp(a, b, sizeof a) != 0, "seeds 1 and 2 ran the threadgroups in one order");
  cr_assert(memcmp(a, in_order, sizeof a) != 0, "seed 1 ran the threadgroups in grid order");
  cr_assert(memcmp(a, a2, sizeof a) == 0, "seed 1 twice: two orders with one worker");
}

Test(exec, threadgroups_on_several_workers_also_run_out_of_grid_order) {
  setenv("SOFTMETAL_THREADS", "4", 1);
  uint32_t a[GROUPS + 1], b[GROUPS + 1];
  run_chain("random:1", a);
  run_chain("random:2", b);
  cr_assert(memcmp(a, b, sizeof a) != 0, "seeds 1 and 2 gave one answer");
}

static void check_count(const char *kernel, const char *threads, const char *schedule) {
  setenv("SOFTMETAL_THREADS", threads, 1);
  if (schedule) setenv("SOFTMETAL_SCHEDULE", schedule, 1);
  enum { NG = 512, TG = 64 };
  id bufs[2] = {sm_buffer(NULL, 4), sm_buffer(NULL, 8 * 4)};
  for (int rep = 0; rep < 4; rep++)
    sm_dispatch(sm_lib, kernel, bufs, 2, SM_SIZE(NG * TG, 1, 1), SM_SIZE(TG, 1, 1), false, 0);
  cr_assert_eq(*(uint32_t *)sm_contents(bufs[0]), 4u * NG * TG, "%s", kernel);
  if (strcmp(kernel, "count") == 0)
    for (int i = 0; i < 8; i++)
      cr_assert_eq(((int32_t *)sm_contents(bufs[1]))[i], 4 * NG / 8 * TG, "per[%d]", i);
  sm_release(bufs[0]);
  sm_release(bufs[1]);
  unsetenv("SOFTMETAL_SCHEDULE");
}

Test(exec, device_atomic_fetch_add_from_every_threadgroup_is_exact_with_several_workers) {
  check_count("count", "4", NULL);
}
Test(exec, device_atomics_exact_with_several_workers_in_random_order) {
  check_count("count", "3", "random:7");
}
Test(exec, device_atomics_exact_from_fibers_on_several_workers) {
  check_count("count_fibers", "4", NULL);
}

Test(exec, the_kernels_own_threadgroup_loop_covers_partial_threadgroups) {
  setenv("SOFTMETAL_THREADS", "2", 1);
  enum { N = 100000 };
  float *x = malloc(N * sizeof *x);
  for (int i = 0; i < N; i++) x[i] = (float)i * 0.5f;
  id bufs[2] = {sm_buffer(x, N * sizeof *x), sm_buffer(NULL, (N + 64) * sizeof *x)};
  sm_dispatch(sm_lib, "saxpy", bufs, 2, SM_SIZE(N, 1, 1), SM_SIZE(192, 1, 1), false, 0);
  const float *y = sm_contents(bufs[1]);
  for (int i = 0; i < N; i++) cr_assert_eq(y[i], 2.0f * x[i] + 1.0f, "y[%d]", i);
  for (int i = N; i < N + 64; i++) cr_assert_eq(y[i], 0.0f, "y[%d] written", i);
  free(x);
  sm_release(bufs[0]);
  sm_release(bufs[1]);
}

/* SOFTMETAL_FIBER_SWITCH: softmetal's own switch (the default) and glibc's
 * swapcontext run fibers to the same results, which the host computes. */
static void run_rounds(const char *fiber_switch, uint32_t *out, size_t n) {
  setenv("SOFTMETAL_FIBER_SWITCH", fiber_switch, 1);
  id buf = sm_buffer(NULL, n * 4);
  sm_dispatch(sm_lib, "rounds", &buf, 1, SM_SIZE(n, 1, 1), SM_SIZE(64, 1, 1), false, 0);
  memcpy(out, sm_contents(buf), n * 4);
  sm_release(buf);
  unsetenv("SOFTMETAL_FIBER_SWITCH");
}

Test(exec, both_fiber_switches_run_barriers_and_simd_functions_alike) {
  setenv("SOFTMETAL_THREADS", "2", 1);
  setenv("SOFTMETAL_SCHEDULE", "random:3", 1);
  enum { N = 64 * 32 };
  static uint32_t own[N], ucontext[N], want[N];
  for (uint32_t g = 0; g < N / 64; g++) { /* the host's answer */
    uint32_t v[64], t[64];
    for (uint32_t l = 0; l < 64; l++) v[l] = (g * 64 + l) * 7u + 1u;
    for (int r = 0; r < 4; r++) {
      uint32_t sum[2] = {0, 0};
      for (uint32_t l = 0; l < 64; l++) t[l] = v[l], sum[l / 32] += v[l];
      for (uint32_t l = 0; l < 64; l++) v[l] = v[l] * 3u + t[63 - l] + sum[l / 32];
    }
    memcpy(want + g * 64, v, sizeof v);
  }
  run_rounds("own", own, N);
  run_rounds("ucontext", ucontext, N);
  unsetenv("SOFTMETAL_SCHEDULE");
  for (int i = 0; i < N; i++) {
    cr_assert_eq(own[i], want[i], "own switch, out[%d]", i);
    cr_assert_eq(ucontext[i], want[i], "swapcontext, out[%d]", i);
  }
}

/* Many short fibers on two workers: memcheck once took the first frame of
 * a fiber for a stack switch when the other worker had switched last, and
 * reported its writes (tools/ci/stage-10-valgrind.sh runs this suite). */
Test(exec, many_short_fibers_on_two_workers_keep_their_frames) {
  setenv("SOFTMETAL_THREADS", "2", 1);
  enum { TG = 256, N = TG * 64 };
  id buf = sm_buffer(NULL, N * 4);
  for (int rep = 0; rep < 2; rep++)
    sm_dispatch(sm_lib, "frames", &buf, 1, SM_SIZE(N, 1, 1), SM_SIZE(TG, 1, 1), false, 0);
  const uint32_t *out = sm_contents(buf);
  for (uint32_t i = 0; i < N; i++) {
    uint32_t l = i % TG, want = i * ((i * 5u) % 37u) + l + i * (l % 37u) + l;
    cr_assert_eq(out[i], want, "out[%u]", i);
  }
  sm_release(buf);
}

Test(exec, an_unknown_fiber_switch_aborts, .signal = SIGABRT) {
  setenv("SOFTMETAL_FIBER_SWITCH", "fast", 1);
  id buf = sm_buffer(NULL, 64 * 4);
  sm_dispatch(sm_lib, "rounds", &buf, 1, SM_SIZE(64, 1, 1), SM_SIZE(64, 1, 1), false, 0);
}
