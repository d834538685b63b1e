/* SPDX-License-Identifier: MIT */
/* softmetal threads and simdgroups: SIMD-group functions over the lanes
 * active at each call, quad functions, simdgroup matrices, and the seeded
 * random schedule. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "softmetal/sm_test.h"

enum { Completed = 4, Error = 5 };

static const char *const KERNEL_PARTS[] = {
    "#include <metal_stdlib>\n"
    "#include <metal_simdgroup_matrix>\n"
    "using namespace metal;\n"
    "\n"
    "kernel void branch_sum(device int *out [[buffer(0)]],\n"
    "                       uint tid [[thread_index_in_threadgroup]],\n"
    "                       uint lane [[thread_index_in_simdgroup]]) {\n"
    "  int r;\n"
    "  if (lane < 16) r = simd_sum(1); else r = simd_sum(100);\n"
    "  out[tid] = r;\n"
    "}\n"
    "\n"
    "// Every SIMD-group function, called from a helper in both branches.\n"
    "enum { NOPS = 20 };\n"
    "template <class T> T ops(device uint *o, uint lane, T k) {\n"
    "  T v = T(lane) * k;\n"
    "  o[0] = uint(simd_sum(v));\n"
    "  o[1] = uint(simd_max(v));\n"
    "  o[2] = uint(simd_min(v));\n"
    "  o[3] = uint(simd_product(T(2)));\n"
    "  o[4] = uint(simd_prefix_exclusive_sum(T(1)));\n"
    "  o[5] = uint(simd_prefix_inclusive_sum(v));\n"
    "  o[6] = uint(simd_broadcast_first(v));\n"
    "  o[7] = simd_is_first() ? 1u : 0u;\n"
    "  o[8] = uint(ulong(simd_ballot(lane % 2 == 0)));\n"
    "  o[9] = uint(ulong(simd_active_threads_mask()));\n"
    "  o[10] = simd_all(lane % 16 < 8) ? 1u : 0u;\n"
    "  o[11] = simd_any(lane % 16 == 3) ? 1u : 0u;\n"
    "  o[12] = uint(simd_shuffle(v, ushort(lane & ~15u) + 3));\n"
    "  o[13] = uint(simd_shuffle_xor(v, 1));\n"
    "  o[14] = simd_or(1u << lane);\n"
    "  o[15] = simd_xor(lane) ^ simd_and(~0u);\n"
    "  o[16] = uint(simd_prefix_inclusive_product(T(2)));\n"
    "  o[17] = simd_ballot(true).all() ? 1u : 0u;\n"
    "  o[18] = simd_ballot(lane == 40).any() ? 1u : 0u;\n"
    "  o[19] = uint(simd_broadcast(v, ushort(lane | 15u)));\n"
    "  return v;\n"
    "}\n"
    "kernel void branch_ops(device uint *out [[buffer(0)]],\n"
    "                       uint tid [[thread_index_in_threadgroup]],\n"
    "                       uint lane [[thread_index_in_simdgroup]]) {\n"
    "  device uint *o = out + tid * NOPS;\n"
    "  if (lane < 16) ops(o, lane, 1u); else ops(o, lane, 3u);\n"
    "}\n"
    "__attribute__((noinline)) int sum_of(int x) { return simd_sum(x); }\n"
    "kernel void branch_noinline(device int *out [[buffer(0)]],\n"
    "                            uint tid [[thread_index_in_threadgroup]],\n"
    "                            uint lane [[thread_index_in_simdgroup]]) {\n"
    "  int r;\n"
    "  if (lane % 3 == 0) r = sum_of(1); else r = sum_of(100);\n"
    "  out[tid] = r + simd_sum(1) * 100000;\n"
    "}\n",
    "// Lanes leave a loop at different iterations; the sum after it has all.\n"
    "kernel void loop_then_sum(device int *out [[buffer(0)]],\n"
    "                          uint tid [[thread_index_in_threadgroup]],\n"
    "                          uint lane [[thread_index_in_simdgroup]]) {\n"
    "  int acc = 0;\n"
    "  for (uint i = 0; i < lane % 4 + 1; i++) acc += simd_sum(1);\n"
    "  out[tid] = acc * 1000 + simd_sum(1);\n"
    "}\n"
    "// Lanes read their scratch slot in every iteration of a loop that\n"
    "// synchronises; after the loop, lane 0 reuses the first slots, with no\n"
    "// barrier between (ggml's flash-attention vector kernels do this). A GPU\n"
    "// reconverges the lanes where the loop ends, so none reads lane 0's values.\n"
    "float scratch_loop(threadgroup float *ss, uint lane, int n, uint kind) {\n"
    "  float acc = 0;\n"
    "  int i = 0;\n"
    "  if (kind == 0) {\n"
    "    for (; i < n; i++) { acc += simd_sum(1.0f); acc += ss[lane]; }\n"
    "  } else if (kind == 1) {\n"
    "    while (true) { acc += simd_max(32.0f); acc += ss[lane]; if (++i == n) break; }\n"
    "  } else {\n"
    "    do { acc += simd_sum(1.0f); acc += ss[lane]; } while (++i < n);\n"
    "  }\n"
    "  return acc;\n"
    "}\n"
    "kernel void scratch_after_loop(device float *out [[buffer(0)]],\n"
    "                               uint tid [[thread_position_in_grid]],\n"
    "                               uint kind [[threadgroup_position_in_grid]],\n"
    "                               uint lane [[thread_index_in_simdgroup]]) {\n"
    "  threadgroup float ss[32];\n"
    "  ss[lane] = float(lane);\n"
    "  simdgroup_barrier(mem_flags::mem_threadgroup);\n"
    "  float acc = scratch_loop(ss, lane, int(out[96]), kind);\n"
    "  if (lane == 0) { ss[0] = -1000.0f; ss[1] = -2000.0f; }\n"
    "  simdgroup_barrier(mem_flags::mem_threadgroup);\n"
    "  out[tid] = acc + ss[1];\n"
    "}\n"
    "// A lane-varying but loop-invariant condition inside a loop.\n"
    "kernel void loop_invariant_branch(device int *out [[buffer(0)]],\n"
    "                                  uint tid [[thread_index_in_threadgroup]],\n"
    "                                  uint lane [[thread_index_in_simdgroup]]) {\n"
    "  int a = 0, n = out[32];\n"
    "  bool low = lane < 16;\n"
    "  for (int i = 0; i < n; i++) {\n"
    "    if (low) a += 1; else a += 2;\n"
    "    a = simd_sum(a) % 1000;\n"
    "  }\n"
    "  out[tid] = a;\n"
    "}\n",
    "// Lanes of a simdgroup share threadgroup memory with no simdgroup_barrier,\n"
    "// as they may on a Mac, whose GPUs run a simdgroup's lanes together (any\n"
    "// width from 8 to 64): all read a value before one lane replaces it in a\n"
    "// branch; all read what one lane wrote in a branch, or some lanes in a\n"
    "// loop, before them.\n"
    "kernel void lanes_share_threadgroup(device int *out [[buffer(0)]],\n"
    "                                    uint tid [[thread_index_in_threadgroup]],\n"
    "                                    uint sg [[simdgroup_index_in_threadgroup]],\n"
    "                                    uint lane [[thread_index_in_simdgroup]],\n"
    "                                    uint width [[threads_per_simdgroup]]) {\n"
    "  threadgroup int cells[8][2];\n"
    "  threadgroup int rows[8][8];\n"
    "  threadgroup int *mine = cells[sg];\n"
    "  if (lane == 0) { mine[0] = 10; mine[1] = 0; }\n"
    "  threadgroup_barrier(mem_flags::mem_threadgroup);\n"
    "  int before = mine[0];\n"
    "  if (lane == 0) mine[0] = before + 1;\n"
    "  if (lane == width - 1) mine[1] = before + 7;\n"
    "  int from_last = mine[1];\n"
    "#pragma clang loop unroll(disable)\n"
    "  for (uint i = lane; i < 8; i += width) rows[sg][i] = int(i) * 3;\n"
    "  int row = rows[sg][(lane + 1) % 8];\n"
    "  out[tid] = before * 10000 + from_last * 100 + row;\n"
    "}\n",
    "kernel void shuffle_inactive(device uint *out [[buffer(0)]],\n"
    "                             uint lane [[thread_index_in_simdgroup]]) {\n"
    "  uint r = 0;\n"
    "  if (lane < 16) r = simd_shuffle(lane, 20);\n"
    "  out[lane] = r;\n"
    "}\n"
    "kernel void shuffle_down_tail(device uint *out [[buffer(0)]],\n"
    "                              uint tid [[thread_position_in_grid]]) {\n"
    "  out[tid] = simd_shuffle_down(tid, 4);\n"
    "}\n"
    "kernel void quad_ops(device uint *out [[buffer(0)]],\n"
    "                     uint tid [[thread_index_in_threadgroup]],\n"
    "                     uint lane [[thread_index_in_simdgroup]]) {\n"
    "  device uint *o = out + tid * 12;\n"
    "  uint v = lane * 7 + 1;\n"
    "  if (lane != 6) {\n"
    "    o[0] = quad_sum(v);\n"
    "    o[1] = quad_max(v);\n"
    "    o[2] = quad_min(v);\n"
    "    o[3] = quad_prefix_exclusive_sum(v);\n"
    "    o[4] = quad_prefix_inclusive_sum(v);\n"
    "    o[5] = quad_shuffle_xor(v, lane == 7 ? 0 : 1);\n"
    "    o[8] = quad_all(v > 20) ? 1u : 0u;\n"
    "    o[9] = quad_any(v == 8) ? 1u : 0u;\n"
    "    o[10] = uint(ushort(quad_ballot(lane % 2 == 0)));\n"
    "    o[11] = quad_broadcast(v, (lane & 4) ? 0 : 3);\n"
    "  }\n"
    "  o[6] = quad_shuffle_down(v, 1);\n"
    "  o[7] = quad_shuffle_up(v, 1);\n"
    "}\n",
    "kernel void quad_inactive(device uint *out [[buffer(0)]],\n"
    "                          uint lane [[thread_index_in_simdgroup]]) {\n"
    "  if (lane != 2) out[lane] = quad_shuffle(lane, 2);\n"
    "}\n"
    "// C = A * B + C for 8x8 tiles, row major; three element types.\n"
    "template <class T>\n"
    "void mma(device const T *a, device const T *b, device T *c, bool ta) {\n"
    "  simdgroup_matrix<T, 8, 8> A, B, C;\n"
    "  simdgroup_load(A, a, 8, ulong2(0, 0), ta);\n"
    "  simdgroup_load(B, b, 16, ulong2(8, 1));\n"
    "  simdgroup_load(C, c);\n"
    "  simdgroup_multiply_accumulate(C, A, B, C);\n"
    "  simdgroup_store(C, c);\n"
    "}\n"
    "kernel void mma_float(device const float *a [[buffer(0)]], device const float *b "
    "[[buffer(1)]],\n"
    "                      device float *c [[buffer(2)]]) { mma(a, b, c, false); }\n"
    "kernel void mma_float_t(device const float *a [[buffer(0)]], device const float *b "
    "[[buffer(1)]],\n"
    "                        device float *c [[buffer(2)]]) { mma(a, b, c, true); }\n"
    "kernel void mma_half(device const half *a [[buffer(0)]], device const half *b [[buffer(1)]],\n"
    "                     device half *c [[buffer(2)]]) { mma(a, b, c, false); }\n"
    "kernel void mma_bfloat(device const bfloat *a [[buffer(0)]], device const bfloat *b "
    "[[buffer(1)]],\n"
    "                       device bfloat *c [[buffer(2)]]) { mma(a, b, c, false); }\n"
    "// thread_elements(): lane l holds (row, col) and (row, col + 1).\n"
    "kernel void mma_elements(device float *out [[buffer(0)]],\n"
    "                         uint lane [[thread_index_in_simdgroup]]) {\n"
    "  simdgroup_float8x8 m = make_filled_simdgroup_matrix<float, 8, 8>(0.f);\n"
    "  m.thread_elements()[0] = float(lane * 2);\n"
    "  m.thread_elements()[1] = float(lane * 2 + 1);\n"
    "  simdgroup_float8x8 id2 = simdgroup_float8x8(2.f), r;\n"
    "  simdgroup_multiply(r, m, id2);\n"
    "  simdgroup_store(r, out);\n"
    "}\n"
    "// Rows defaults to Cols, as in Metal (ggml writes <float, 8>).\n"
    "kernel void mma_filled(device float *out [[buffer(0)]]) {\n"
    "  simdgroup_float8x8 m = make_filled_simdgroup_matrix<float, 8>(3.f);\n"
    "  simdgroup_store(m, out);\n"
    "}\n"
    "kernel void mma_partial(device float *out [[buffer(0)]],\n"
    "                        uint lane [[thread_index_in_simdgroup]]) {\n"
    "  simdgroup_float8x8 m(1.f);\n"
    "  if (lane < 31) simdgroup_store(m, out);\n"
    "}\n",
    "// Each thread reads its neighbour's threadgroup slot.\n"
    "kernel void neighbour(device const uint *in [[buffer(0)]], device uint *out [[buffer(1)]],\n"
    "                      threadgroup uint *s [[threadgroup(0)]],\n"
    "                      uint tid [[thread_index_in_threadgroup]],\n"
    "                      uint n [[threads_per_threadgroup]]) {\n"
    "  s[tid] = in[tid];\n"
    "#ifdef WITH_BARRIER\n"
    "  threadgroup_barrier(mem_flags::mem_threadgroup);\n"
    "#endif\n"
    "  out[tid] = s[tid > 0 ? tid - 1 : 0];\n"
    "}\n"};

static char KERNELS[16384];
static id dev, queue, lib, pool;

static id compile(const char *src, id *error) {
  return SEND(id, (id, SEL, id, id, id *), dev, "newLibraryWithSource:options:error:", sm_str(src),
              (id)0, error);
}
static void setup(void) {
  KERNELS[0] = 0;
  for (size_t i = 0; i < sizeof KERNEL_PARTS / sizeof KERNEL_PARTS[0]; i++)
    strcat(KERNELS, KERNEL_PARTS[i]);
  dev = MTLCreateSystemDefaultDevice();
  queue = SEND0(id, dev, "newCommandQueue");
  pool = objc_autoreleasePoolPush();
  id error = 0;
  lib = compile(KERNELS, &error);
  cr_assert_not_null(lib, "%s", sm_error_text(error));
}
static void teardown(void) {
  sm_release(lib);
  objc_autoreleasePoolPop(pool);
  sm_release(queue);
  sm_release(dev);
  sm_check_all_released(__FILE__);
}
TestSuite(simd, .init = setup, .fini = teardown, .timeout = 120);

static id pipeline_in(id l, const char *name) {
  id fn = SEND(id, (id, SEL, id), l, "newFunctionWithName:", sm_str(name));
  cr_assert_not_null(fn, "kernel %s", name);
  id error = 0;
  id p =
      SEND(id, (id, SEL, id, id *), dev, "newComputePipelineStateWithFunction:error:", fn, &error);
  cr_assert_not_null(p, "%s", sm_error_text(error));
  sm_release(fn);
  return p;
}
static id buffer(NSUInteger len) {
  id b = SEND(id, (id, SEL, NSUInteger, NSUInteger), dev, "newBufferWithLength:options:", len, 0ul);
  memset(SEND0(void *, b, "contents"), 0, len);
  return b;
}
static void *contents(id b) { return SEND0(void *, b, "contents"); }

/* Runs kernel `name` of library l over a grid of `threads` threads in
 * threadgroups of `tg`, with buffers bufs[0..nbufs) and `tg_bytes` of
 * threadgroup memory at index 0; returns the command buffer (autoreleased). */
static id run_in(id l, const char *name, NSUInteger threads, NSUInteger tg, id *bufs, int nbufs,
                 NSUInteger tg_bytes) {
  id p = pipeline_in(l, name);
  id cb = SEND0(id, queue, "commandBuffer");
  id enc = SEND0(id, cb, "computeCommandEncoder");
  SEND(void, (id, SEL, id), enc, "setComputePipelineState:", p);
  for (int i = 0; i < nbufs; i++)
    SEND(void, (id, SEL, id, NSUInteger, NSUInteger), enc, "setBuffer:offset:atIndex:", bufs[i],
         0ul, (NSUInteger)i);
  if (tg_bytes)
    SEND(void, (id, SEL, NSUInteger, NSUInteger), enc,
         "setThreadgroupMemoryLength:atIndex:", tg_bytes, 0ul);
  SEND(void, (id, SEL, MTLSize, MTLSize), enc,
       "dispatchThreads:threadsPerThreadgroup:", ((MTLSize){threads, 1, 1}), ((MTLSize){tg, 1, 1}));
  SEND0(void, enc, "endEncoding");
  SEND0(void, cb, "commit");
  SEND0(void, cb, "waitUntilCompleted");
  sm_release(p);
  return cb;
}
static id run(const char *name, NSUInteger threads, NSUInteger tg, id *bufs, int nbufs) {
  return run_in(lib, name, threads, tg, bufs, nbufs, 0);
}
static void expect_ok(id cb) {
  cr_assert_eq(sm_u(cb, "status"), Completed, "%s", sm_error_text(SEND0(id, cb, "error")));
}
static const char *expect_error(id cb) {
  cr_assert_eq(sm_u(cb, "status"), Error);
  return sm_error_text(SEND0(id, cb, "error"));
}

/* ------------------------------------------------------------- divergence */
Test(simd, sum_in_divergent_branches_uses_the_lanes_of_each_branch) {
  id out = buffer(64 * 4);
  expect_ok(run("branch_sum", 64, 64, &out, 1));
  int *o = contents(out);
  for (int t = 0; t < 64; t++)
    cr_assert_eq(o[t], t % 32 < 16 ? 16 : 1600, "thread %d: %d", t, o[t]);
  sm_release(out);
}

Test(simd, every_function_in_a_helper_called_from_both_branches) {
  enum { NOPS = 20 };
  id out = buffer(64 * NOPS * 4);
  expect_ok(run("branch_ops", 64, 64, &out, 1));
  unsigned *o = contents(out);
  for (unsigned t = 0; t < 64; t++) {
    unsigned lane = t % 32, lo = lane & 16, k = lo ? 3 : 1, sum = 0, incl = 0, x = 0;
    unsigned mask = 0xFFFFu << lo, even = 0x5555u << lo;
    for (unsigned l = lo; l < lo + 16; l++) sum += l * k, x ^= l;
    for (unsigned l = lo; l <= lane; l++) incl += l * k;
    unsigned want[NOPS] = {sum,
                           (lo + 15) * k,
                           lo * k,
                           65536,
                           lane - lo,
                           incl,
                           lo * k,
                           lane == lo,
                           even,
                           mask,
                           0,
                           1,
                           (lo + 3) * k,
                           (lane ^ 1) * k,
                           mask,
                           x ^ ~0u,
                           1u << (lane - lo + 1),
                           0,
                           0,
                           (lo + 15) * k};
    for (int i = 0; i < NOPS; i++)
      cr_assert_eq(o[t * NOPS + i], want[i], "thread %u o[%d] = %u, want %u", t, i, o[t * NOPS + i],
                   want[i]);
  }
  sm_release(out);
}

Test(simd, noinline_helper_from_two_branches_and_reconvergence) {
  id out = buffer(64 * 4);
  expect_ok(run("branch_noinline", 64, 64, &out, 1));
  int *o = contents(out);
  for (int t = 0; t < 64; t++)
    cr_assert_eq(o[t], (t % 32 % 3 == 0 ? 11 : 2100) + 3200000, "thread %d: %d", t, o[t]);
  sm_release(out);
}

Test(simd, lanes_leaving_a_loop_early_wait_for_the_others) {
  id out = buffer(32 * 4);
  expect_ok(run("loop_then_sum", 32, 32, &out, 1));
  int *o = contents(out);
  const int per_iter[4] = {32, 24, 16, 8};
  for (int t = 0; t < 32; t++) {
    int acc = 0;
    for (int i = 0; i <= t % 4; i++) acc += per_iter[i];
    cr_assert_eq(o[t], acc * 1000 + 32, "thread %d: %d", t, o[t]);
  }
  sm_release(out);
}

Test(simd, loop_invariant_lane_condition_keeps_lanes_together) {
  id out = buffer(33 * 4);
  int *o = contents(out);
  o[32] = 3; /* iterations, unknown to the compiler */
  expect_ok(run("loop_invariant_branch", 32, 32, &out, 1));
  for (int t = 0; t < 32; t++) cr_assert_eq(o[t], 736, "thread %d: %d", t, o[t]);
  sm_release(out);
}

Test(simd, lanes_leave_a_synchronising_loop_together) {
  id out = buffer(97 * 4);
  float *o = contents(out);
  o[96] = 3; /* iterations, unknown to the compiler */
  expect_ok(run("scratch_after_loop", 96, 32, &out, 1));
  for (int t = 0; t < 96; t++) /* for, while with break, do-while */
    cr_assert_eq(o[t], 3 * 32 + 3 * (t % 32) - 2000, "thread %d (loop %d): %g", t, t / 32, o[t]);
  sm_release(out);
}

Test(simd, lanes_share_threadgroup_memory_across_branches_and_loops_as_in_lockstep) {
  static const char *const schedules[] = {NULL, "random:1", "random:2", "random:3"};
  for (size_t s = 0; s < sizeof schedules / sizeof schedules[0]; s++) {
    if (schedules[s])
      setenv("SOFTMETAL_SCHEDULE", schedules[s], 1);
    else
      unsetenv("SOFTMETAL_SCHEDULE");
    id out = buffer(64 * 4);
    expect_ok(run("lanes_share_threadgroup", 64, 64, &out, 1));
    int *o = contents(out);
    for (int t = 0; t < 64; t++)
      cr_assert_eq(o[t], 10 * 10000 + 17 * 100 + (t + 1) % 8 * 3, "schedule %s, thread %d: %d",
                   schedules[s] ? schedules[s] : "in-order", t, o[t]);
    sm_release(out);
  }
  unsetenv("SOFTMETAL_SCHEDULE");
}

Test(simd, shuffle_from_an_inactive_lane_fails_the_command_buffer) {
  id out = buffer(32 * 4);
  const char *msg = expect_error(run("shuffle_inactive", 32, 32, &out, 1));
  cr_assert(strstr(msg, "shuffle_inactive") && strstr(msg, "simd_shuffle reads lane 20") &&
                strstr(msg, "0x0000ffff"),
            "%s", msg);
  sm_release(out);
}

Test(simd, shuffle_beyond_a_partial_simdgroup_fails) {
  id out = buffer(40 * 4);
  const char *msg = expect_error(run("shuffle_down_tail", 40, 40, &out, 1));
  cr_assert(strstr(msg, "simdgroup 1") && strstr(msg, "simd_shuffle_down reads lane 8"), "%s", msg);
  sm_release(out);
}

/* ------------------------------------------------------------- quads */
Test(simd, quad_functions_over_the_active_lanes_of_each_quad) {
  id out = buffer(32 * 12 * 4);
  expect_ok(run("quad_ops", 32, 32, &out, 1));
  unsigned *o = contents(out);
  for (unsigned t = 0; t < 32; t++) {
    unsigned lo = t & ~3u, v = t * 7 + 1, sum = 0, mx = 0, mn = ~0u, ex = 0, ballot = 0;
    bool all = true, any = false;
    for (unsigned l = lo; l < lo + 4; l++) {
      if (l == 6) continue;
      unsigned w = l * 7 + 1;
      sum += w;
      mx = w > mx ? w : mx;
      mn = w < mn ? w : mn;
      if (l < t) ex += w;
      all = all && w > 20;
      any = any || w == 8;
      if (l % 2 == 0) ballot |= 1u << (l - lo);
    }
    unsigned *r = o + 12 * t;
    cr_assert_eq(r[6], t % 4 == 3 ? v : v + 7, "thread %u quad_shuffle_down", t);
    cr_assert_eq(r[7], t % 4 == 0 ? v : v - 7, "thread %u quad_shuffle_up", t);
    if (t == 6) continue;
    cr_assert_eq(r[0], sum, "thread %u quad_sum %u", t, r[0]);
    cr_assert_eq(r[1], mx);
    cr_assert_eq(r[2], mn);
    cr_assert_eq(r[3], ex, "thread %u quad_prefix_exclusive_sum %u", t, r[3]);
    cr_assert_eq(r[4], ex + v);
    cr_assert_eq(r[5], t == 7 ? v : (t ^ 1) * 7 + 1);
    cr_assert_eq(r[8], all);
    cr_assert_eq(r[9], any);
    cr_assert_eq(r[10], ballot, "thread %u quad_ballot %#x", t, r[10]);
    cr_assert_eq(r[11], (t & 4 ? lo : lo + 3) * 7 + 1);
  }
  sm_release(out);
}

Test(simd, quad_shuffle_from_an_inactive_lane_fails) {
  id out = buffer(32 * 4);
  const char *msg = expect_error(run("quad_inactive", 32, 32, &out, 1));
  cr_assert(strstr(msg, "quad_shuffle reads lane 2"), "%s", msg);
  sm_release(out);
}

/* ------------------------------------------------------------- matrices */
static unsigned round_int(unsigned n, int mbits) { /* to mbits of mantissa, ties to even */
  int e = 31 - __builtin_clz(n);
  unsigned q = e > mbits ? 1u << (e - mbits) : 1u, r = n % q, down = n - r;
  if (2 * r < q) return down;
  if (2 * r > q) return down + q;
  return (down / q) % 2 == 0 ? down : down + q;
}
static uint16_t int_to_half(unsigned n) { /* n exact in half */
  if (!n) return 0;
  int e = 31 - __builtin_clz(n);
  unsigned mant = e <= 10 ? (n << (10 - e)) & 0x3FFu : (n >> (e - 10)) & 0x3FFu;
  return (uint16_t)((unsigned)(e + 15) << 10 | mant);
}
static float half_to_float(uint16_t h) {
  return ldexpf(1.0f + (float)(h & 0x3FFu) / 1024.0f, (int)(h >> 10 & 0x1Fu) - 15);
}
static uint16_t int_to_bfloat(unsigned n) {
  float f = (float)n;
  uint32_t u;
  memcpy(&u, &f, 4);
  return (uint16_t)(u >> 16);
}
static float bfloat_to_float(uint16_t b) {
  uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* a: 8x8; b: 9 rows of 16, the tile at row 1, column 8; c: 8x8, C += A B. */
static unsigned A_at(int r, int c) { return (unsigned)(r * 3 + c * 5) % 7; }
static unsigned B_at(int r, int c) { return (unsigned)(r + 2 * c) % 6; }
static unsigned mma_want(int r, int c, unsigned c0, bool ta) {
  unsigned s = c0;
  for (int k = 0; k < 8; k++) s += (ta ? A_at(k, r) : A_at(r, k)) * B_at(k, c);
  return s;
}

static void mma_case(const char *kernel, int type, unsigned c0, bool ta) {
  size_t es = type == 0 ? 4 : 2;
  id bufs[3] = {buffer(64 * es), buffer(144 * es), buffer(64 * es)};
  for (int i = 0; i < 144; i++) {
    unsigned av = i < 64 ? A_at(i / 8, i % 8) : 0, bv = i >= 16 ? B_at(i / 16 - 1, i % 16 - 8) : 0;
    if (i % 16 < 8) bv = 99; /* outside the tile */
    unsigned vals[3] = {av, bv, c0};
    for (int j = 0; j < 3; j++) {
      if (j != 1 && i >= 64) continue;
      if (type == 0)
        ((float *)contents(bufs[j]))[i] = (float)vals[j];
      else
        ((uint16_t *)contents(bufs[j]))[i] =
            type == 1 ? int_to_half(vals[j]) : int_to_bfloat(vals[j]);
    }
  }
  expect_ok(run(kernel, 32, 32, bufs, 3));
  for (int i = 0; i < 64; i++) {
    unsigned exact = mma_want(i / 8, i % 8, c0, ta);
    float got, want;
    if (type == 0)
      got = ((float *)contents(bufs[2]))[i], want = (float)exact;
    else if (type == 1)
      got = half_to_float(((uint16_t *)contents(bufs[2]))[i]), want = (float)round_int(exact, 10);
    else
      got = bfloat_to_float(((uint16_t *)contents(bufs[2]))[i]), want = (float)round_int(exact, 7);
    cr_assert_eq(got, want, "%s element (%d, %d): %g, want %g (exact %u)", kernel, i / 8, i % 8,
                 got, want, exact);
  }
  for (int j = 0; j < 3; j++) sm_release(bufs[j]);
}

Test(simd, simdgroup_multiply_accumulate_float) {
  mma_case("mma_float", 0, 1000, false);
  mma_case("mma_float_t", 0, 1000, true);
}
Test(simd, simdgroup_multiply_accumulate_half_rounds_to_half) {
  mma_case("mma_half", 1, 2048, false);
}
Test(simd, simdgroup_multiply_accumulate_bfloat_rounds_to_bfloat) {
  mma_case("mma_bfloat", 2, 256, false);
}

Test(simd, thread_elements_follow_the_apple_lane_layout) {
  id out = buffer(64 * 4);
  expect_ok(run("mma_elements", 32, 32, &out, 1));
  float *o = contents(out);
  for (unsigned l = 0; l < 32; l++) {
    unsigned q = l / 4, row = (q & 4) + (l / 2) % 4, col = (q & 2) * 2 + (l % 2) * 2;
    cr_assert_eq(o[row * 8 + col], (float)(4 * l), "lane %u element 0 at (%u, %u)", l, row, col);
    cr_assert_eq(o[row * 8 + col + 1], (float)(4 * l + 2), "lane %u element 1", l);
  }
  sm_release(out);
}

Test(simd, make_filled_simdgroup_matrix_rows_default_to_cols) {
  id out = buffer(64 * 4);
  expect_ok(run("mma_filled", 32, 32, &out, 1));
  for (int i = 0; i < 64; i++) cr_assert_eq(((float *)contents(out))[i], 3.f, "element %d", i);
  sm_release(out);
}

Test(simd, simdgroup_matrix_needs_every_lane) {
  id out = buffer(64 * 4);
  const char *msg = expect_error(run("mma_partial", 32, 32, &out, 1));
  cr_assert(strstr(msg, "simdgroup_store needs all 32 lanes") && strstr(msg, "0x7fffffff"), "%s",
            msg);
  sm_release(out);
}

/* ------------------------------------------------------------- scheduling */
enum { TG = 64 };
static bool neighbour_ok(id l, const char *schedule, unsigned *snapshot) {
  if (schedule)
    setenv("SOFTMETAL_SCHEDULE", schedule, 1);
  else
    unsetenv("SOFTMETAL_SCHEDULE");
  id bufs[2] = {buffer(TG * 4), buffer(TG * 4)};
  unsigned *in = contents(bufs[0]), *out = contents(bufs[1]);
  for (unsigned i = 0; i < TG; i++) in[i] = i + 1;
  expect_ok(run_in(l, "neighbour", TG, TG, bufs, 2, TG * 4));
  bool ok = true;
  for (unsigned i = 0; i < TG; i++) ok = ok && out[i] == in[i > 0 ? i - 1 : 0];
  if (snapshot) memcpy(snapshot, out, TG * 4);
  sm_release(bufs[0]);
  sm_release(bufs[1]);
  return ok;
}

Test(simd, default_schedule_is_in_order) {
  cr_assert(neighbour_ok(lib, NULL, NULL), "in order, the missing barrier goes unnoticed");
  cr_assert(neighbour_ok(lib, "in-order", NULL));
}

Test(simd, random_schedule_exposes_a_missing_barrier) {
  int wrong = 0;
  for (int seed = 1; seed <= 8; seed++) {
    char v[32];
    snprintf(v, sizeof v, "random:%d", seed);
    wrong += !neighbour_ok(lib, v, NULL);
  }
  cr_assert_gt(wrong, 0, "no seed of 8 changed the result of a kernel without its barrier");
  unsigned a[TG], b[TG];
  neighbour_ok(lib, "random:5", a);
  neighbour_ok(lib, "random:5", b);
  cr_assert_arr_eq(a, b, sizeof a, "the same seed gives the same order");
}

Test(simd, random_schedule_keeps_a_correct_kernel_correct) {
  static char src[sizeof KERNELS + 32];
  snprintf(src, sizeof src, "#define WITH_BARRIER 1\n%s", KERNELS);
  id error = 0;
  id l = compile(src, &error);
  cr_assert_not_null(l, "%s", sm_error_text(error));
  for (int seed = 0; seed < 16; seed++) {
    char v[32];
    snprintf(v, sizeof v, "random:%d", seed);
    cr_assert(neighbour_ok(l, v, NULL), "seed %d", seed);
  }
  sm_release(l);
}
