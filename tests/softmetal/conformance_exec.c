/* SPDX-License-Identifier: MIT */
/* MSL specification chapters 4 (address spaces), 5 (function and variable
 * attributes: thread and threadgroup positions and sizes on a non-uniform
 * grid, function constants) and 6's atomic, SIMD-group, quad-group and
 * barrier functions. Each kernel's results are checked thread by thread
 * against a reference computed here. Where the value depends on the GPU
 * family (threads_per_simdgroup, barriers after returned threads), the case
 * follows Apple silicon, softmetal's default device. */
#include "conformance.h"

static void setup(void) { sm_run_open(); }
static void teardown(void) { sm_run_close(); }
TestSuite(conformance_exec, .init = setup, .fini = teardown, .timeout = 240);

static id conf_lib(const char *src) {
  id error = 0;
  id lib = sm_compile(src, &error);
  cr_assert_not_null(lib, "%s", sm_error_text(error));
  return lib;
}

/* 5.2, attributes for kernel function input arguments: on dispatchThreads
 * with a grid that is not a multiple of the threadgroup size, the edge
 * threadgroups are smaller: threads_per_threadgroup is the size of the
 * threadgroup that runs, dispatch_threads_per_threadgroup the size given at
 * dispatch, and the simdgroup and quadgroup counts follow them. */
enum { AT_N = 26 };
Test(conformance_exec, attributes_on_a_non_uniform_grid) {
  id lib = conf_lib(
      "#include <metal_stdlib>\n"
      "using namespace metal;\n"
      "kernel void attrs(device uint *o [[buffer(0)]],\n"
      "  uint3 tpig [[thread_position_in_grid]], uint3 tpg [[threads_per_grid]],\n"
      "  uint3 tpitg [[thread_position_in_threadgroup]],\n"
      "  uint3 tgpig [[threadgroup_position_in_grid]],\n"
      "  uint3 tptg [[threads_per_threadgroup]],\n"
      "  uint3 dtptg [[dispatch_threads_per_threadgroup]],\n"
      "  uint3 tgpg [[threadgroups_per_grid]], uint tiitg [[thread_index_in_threadgroup]],\n"
      "  uint lane [[thread_index_in_simdgroup]], uint sg [[simdgroup_index_in_threadgroup]],\n"
      "  uint tpsg [[threads_per_simdgroup]], uint sgptg [[simdgroups_per_threadgroup]],\n"
      "  uint dsgptg [[dispatch_simdgroups_per_threadgroup]],\n"
      "  uint qi [[thread_index_in_quadgroup]], uint qg [[quadgroup_index_in_threadgroup]],\n"
      "  uint qptg [[quadgroups_per_threadgroup]], uint tew [[thread_execution_width]]) {\n"
      "  device uint *r = o + (tpig.y * tpg.x + tpig.x) * 26;\n"
      "  r[0] = tpig.x; r[1] = tpig.y; r[2] = tpg.x; r[3] = tpg.y;\n"
      "  r[4] = tpitg.x; r[5] = tpitg.y; r[6] = tgpig.x; r[7] = tgpig.y;\n"
      "  r[8] = tptg.x; r[9] = tptg.y; r[10] = tptg.z; r[11] = dtptg.x; r[12] = dtptg.y;\n"
      "  r[13] = tgpg.x; r[14] = tgpg.y; r[15] = tiitg; r[16] = lane; r[17] = sg;\n"
      "  r[18] = tpsg; r[19] = sgptg; r[20] = dsgptg; r[21] = qi; r[22] = qg; r[23] = qptg;\n"
      "  r[24] = tew; r[25] = 1;\n"
      "}\n");
  const unsigned gw = 70, gh = 3, tw = 32, th = 2;
  id out = sm_buffer(NULL, (size_t)gw * gh * AT_N * 4);
  sm_dispatch(lib, "attrs", &out, 1, SM_SIZE(gw, gh, 1), SM_SIZE(tw, th, 1), false, 0);
  const uint32_t *o = sm_contents(out);
  static const char *const names[AT_N] = {"thread_position_in_grid.x",
                                          "thread_position_in_grid.y",
                                          "threads_per_grid.x",
                                          "threads_per_grid.y",
                                          "thread_position_in_threadgroup.x",
                                          "thread_position_in_threadgroup.y",
                                          "threadgroup_position_in_grid.x",
                                          "threadgroup_position_in_grid.y",
                                          "threads_per_threadgroup.x",
                                          "threads_per_threadgroup.y",
                                          "threads_per_threadgroup.z",
                                          "dispatch_threads_per_threadgroup.x",
                                          "dispatch_threads_per_threadgroup.y",
                                          "threadgroups_per_grid.x",
                                          "threadgroups_per_grid.y",
                                          "thread_index_in_threadgroup",
                                          "thread_index_in_simdgroup",
                                          "simdgroup_index_in_threadgroup",
                                          "threads_per_simdgroup",
                                          "simdgroups_per_threadgroup",
                                          "dispatch_simdgroups_per_threadgroup",
                                          "thread_index_in_quadgroup",
                                          "quadgroup_index_in_threadgroup",
                                          "quadgroups_per_threadgroup",
                                          "thread_execution_width",
                                          "(ran)"};
  bool reported[AT_N] = {false};
  for (unsigned y = 0; y < gh; y++)
    for (unsigned x = 0; x < gw; x++) {
      unsigned gx = x / tw, gy = y / th, lx = x % tw, ly = y % th;
      unsigned aw = gw - gx * tw < tw ? gw - gx * tw : tw; /* the edge groups are smaller */
      unsigned ah = gh - gy * th < th ? gh - gy * th : th;
      unsigned n = aw * ah, idx = ly * aw + lx;
      const uint32_t want[AT_N] = {x,
                                   y,
                                   gw,
                                   gh,
                                   lx,
                                   ly,
                                   gx,
                                   gy,
                                   aw,
                                   ah,
                                   1,
                                   tw,
                                   th,
                                   (gw + tw - 1) / tw,
                                   (gh + th - 1) / th,
                                   idx,
                                   idx % 32,
                                   idx / 32,
                                   32,
                                   (n + 31) / 32,
                                   (tw * th + 31) / 32,
                                   idx % 4,
                                   idx / 4,
                                   (n + 3) / 4,
                                   32,
                                   1};
      const uint32_t *r = o + ((size_t)y * gw + x) * AT_N;
      for (int k = 0; k < AT_N; k++)
        if (r[k] != want[k] && !reported[k]) {
          reported[k] = true;
          cr_expect_fail("MSL 5.2 (attributes for kernel function input arguments): %s of thread "
                         "(%u, %u) = %u, "
                         "expected %u (grid %ux%u, threadgroup %ux%u, dispatchThreads)",
                         names[k], x, y, r[k], want[k], gw, gh, tw, th);
        }
    }
  sm_release(out);
  sm_release(lib);
}

/* 5.2: on dispatchThreadgroups every threadgroup has the size given, the
 * grid is groups x size; built-ins may be declared ushort or of fewer
 * components than the grid has. */
Test(conformance_exec, attributes_on_a_uniform_grid_and_their_types) {
  id lib = conf_lib(
      "#include <metal_stdlib>\n"
      "using namespace metal;\n"
      "kernel void attrs(device uint *o [[buffer(0)]],\n"
      "  ushort2 tpig [[thread_position_in_grid]], uint2 tpg [[threads_per_grid]],\n"
      "  uint tx [[thread_position_in_grid]], ushort tiitg [[thread_index_in_threadgroup]],\n"
      "  uint3 tptg [[threads_per_threadgroup]], uint2 dtptg "
      "[[dispatch_threads_per_threadgroup]],\n"
      "  ushort2 tgpg [[threadgroups_per_grid]], ushort sgptg [[simdgroups_per_threadgroup]]) {\n"
      "  device uint *r = o + (uint(tpig.y) * tpg.x + tpig.x) * 10;\n"
      "  r[0] = tpig.x; r[1] = tpig.y; r[2] = tpg.x; r[3] = tpg.y; r[4] = tx;\n"
      "  r[5] = tiitg; r[6] = tptg.x * tptg.y * tptg.z; r[7] = dtptg.x * dtptg.y;\n"
      "  r[8] = tgpg.x * 100 + tgpg.y; r[9] = sgptg;\n"
      "}\n");
  id out = sm_buffer(NULL, 12 * 4 * 10 * 4);
  sm_dispatch(lib, "attrs", &out, 1, SM_SIZE(3, 2, 1), SM_SIZE(4, 2, 1), true, 0);
  const uint32_t *o = sm_contents(out);
  for (unsigned y = 0; y < 4; y++)
    for (unsigned x = 0; x < 12; x++) {
      const uint32_t want[10] = {x, y, 12, 4, x, (y % 2) * 4 + x % 4, 8, 8, 302, 1};
      const uint32_t *r = o + ((size_t)y * 12 + x) * 10;
      for (int k = 0; k < 10; k++)
        cr_expect_eq(
            r[k], want[k],
            "MSL 5.2 (kernel input attributes on dispatchThreadgroups, ushort and narrower "
            "built-ins): thread (%u, %u) value %d = %u, expected %u",
            x, y, k, r[k], want[k]);
    }
  sm_release(out);
  sm_release(lib);
}

/* 6.9.1 Threadgroup and SIMD-group synchronization functions: on Apple
 * silicon, threads that have returned do not take part in later barriers;
 * the threads left meet at them. */
Test(conformance_exec, barrier_after_some_threads_returned) {
  id lib = conf_lib("#include <metal_stdlib>\n"
                    "using namespace metal;\n"
                    "kernel void k(device uint *o [[buffer(0)]],\n"
                    "              uint t [[thread_index_in_threadgroup]]) {\n"
                    "  threadgroup uint s[64];\n"
                    "  if (t >= 40) return;\n"
                    "  s[t] = t * 3;\n"
                    "  threadgroup_barrier(mem_flags::mem_threadgroup);\n"
                    "  o[t] = s[39 - t];\n"
                    "}\n");
  id out = sm_buffer(NULL, 64 * 4);
  sm_dispatch(lib, "k", &out, 1, SM_SIZE(64, 1, 1), SM_SIZE(64, 1, 1), false, 0);
  const uint32_t *o = sm_contents(out);
  for (unsigned t = 0; t < 64; t++)
    cr_expect_eq(o[t], t < 40 ? (39 - t) * 3 : 0, "MSL 6.9.1: thread %u read %u", t, o[t]);
  sm_release(out);
  sm_release(lib);
}

/* 6, atomic functions: every type and operation of the text that Apple
 * silicon has (atomic_float: fetch_add, fetch_sub, exchange, compare-exchange;
 * 64-bit atomic min/max only on some families: not here). 64 threads race on
 * each; the results do not depend on the order. */
Test(conformance_exec, atomics) {
  id lib = conf_lib(
      "#include <metal_stdlib>\n"
      "using namespace metal;\n"
      "#define R memory_order_relaxed\n"
      "kernel void k(device atomic_int *ai [[buffer(0)]], device atomic_uint *au [[buffer(1)]],\n"
      "              device atomic_float *af [[buffer(2)]], device uint *olds [[buffer(3)]],\n"
      "              uint tid [[thread_position_in_grid]], uint t [[thread_index_in_threadgroup]]) "
      "{\n"
      "  threadgroup atomic_int tg;\n"
      "  if (t == 0) atomic_store_explicit(&tg, 100, R);\n"
      "  threadgroup_barrier(mem_flags::mem_threadgroup);\n"
      "  olds[tid] = atomic_fetch_add_explicit(&au[0], 1u, R);\n"
      "  atomic_fetch_sub_explicit(&ai[0], 3, R);\n"
      "  atomic_fetch_min_explicit(&ai[1], int(tid) - 10, R);\n"
      "  atomic_fetch_max_explicit(&ai[2], int(tid) - 10, R);\n"
      "  atomic_fetch_min_explicit(&au[2], tid + 5, R);\n"
      "  atomic_fetch_max_explicit(&au[3], tid, R);\n"
      "  atomic_fetch_or_explicit(&au[4], 1u << (tid % 32), R);\n"
      "  atomic_fetch_and_explicit(&au[5], ~(1u << (tid % 32)), R);\n"
      "  atomic_fetch_xor_explicit(&au[6], 1u << (tid % 32), R);\n"
      "  atomic_fetch_add_explicit(&af[0], 0.5f, R);\n"
      "  atomic_fetch_sub_explicit(&af[1], 0.25f, R);\n"
      "  atomic_fetch_add_explicit(&tg, -1, R);\n"
      "  atomic_fetch_min_explicit(&ai[3], -int(tid), R);\n"
      "  if (tid == 0) olds[64] = atomic_exchange_explicit(&au[7], 42u, R);\n"
      "  if (tid == 1) {\n"
      "    uint e = 5;\n"
      "    while (!atomic_compare_exchange_weak_explicit(&au[8], &e, 9u, R, R) && e == 5) {}\n"
      "    olds[65] = e;\n"
      "    uint e2 = 100;\n"
      "    olds[66] = atomic_compare_exchange_weak_explicit(&au[8], &e2, 11u, R, R);\n"
      "    olds[67] = e2;\n"
      "    float fe = 0.0f;\n"
      "    while (!atomic_compare_exchange_weak_explicit(&af[2], &fe, 2.5f, R, R) && fe == 0.0f) "
      "{}\n"
      "    olds[68] = as_type<uint>(atomic_exchange_explicit(&af[3], 1.5f, R));\n"
      "    threadgroup atomic_bool flag;\n"
      "    atomic_store_explicit(&flag, true, R);\n"
      "    olds[69] = atomic_exchange_explicit(&flag, false, R);\n"
      "    olds[70] = atomic_load_explicit(&flag, R);\n"
      "  }\n"
      "  threadgroup_barrier(mem_flags::mem_threadgroup);\n"
      "  if (t == 0) atomic_fetch_add_explicit(&au[9], uint(atomic_load_explicit(&tg, R)), R);\n"
      "}\n");
  int32_t ai[4] = {0, 0, 0, 0};
  uint32_t au[10] = {0, 0, 0xffffffffu, 0, 0, 0xffffffffu, 0, 7, 5, 0};
  float af[4] = {0, 0, 0, 0.75f};
  id bufs[4] = {sm_buffer(ai, sizeof ai), sm_buffer(au, sizeof au), sm_buffer(af, sizeof af),
                sm_buffer(NULL, 71 * 4)};
  /* two threadgroups of 32: the threadgroup atomic counts each group's own */
  sm_dispatch(lib, "k", bufs, 4, SM_SIZE(64, 1, 1), SM_SIZE(32, 1, 1), false, 0);
  const int32_t *gi = sm_contents(bufs[0]);
  const uint32_t *gu = sm_contents(bufs[1]);
  const float *gf = sm_contents(bufs[2]);
  const uint32_t *olds = sm_contents(bufs[3]);
  cr_expect_eq(gu[0], 64, "MSL 6 (atomic functions) atomic_fetch_add (uint): %u", gu[0]);
  uint64_t seen = 0;
  for (int t = 0; t < 64; t++) seen |= olds[t] < 64 ? 1ull << olds[t] : 0;
  cr_expect_eq(seen, ~0ull,
               "MSL 6 (atomic functions) atomic_fetch_add returns each old value once");
  cr_expect_eq(gi[0], -192, "MSL 6 (atomic functions) atomic_fetch_sub (int): %d", gi[0]);
  cr_expect_eq(gi[1], -10, "MSL 6 (atomic functions) atomic_fetch_min (int, signed): %d", gi[1]);
  cr_expect_eq(gi[2], 53, "MSL 6 (atomic functions) atomic_fetch_max (int): %d", gi[2]);
  cr_expect_eq(gi[3], -63, "MSL 6 (atomic functions) atomic_fetch_min (int, negative): %d", gi[3]);
  cr_expect_eq(gu[2], 5, "MSL 6 (atomic functions) atomic_fetch_min (uint): %u", gu[2]);
  cr_expect_eq(gu[3], 63, "MSL 6 (atomic functions) atomic_fetch_max (uint): %u", gu[3]);
  cr_expect_eq(gu[4], 0xffffffffu, "MSL 6 (atomic functions) atomic_fetch_or: 0x%x", gu[4]);
  cr_expect_eq(gu[5], 0, "MSL 6 (atomic functions) atomic_fetch_and: 0x%x", gu[5]);
  cr_expect_eq(gu[6], 0, "MSL 6 (atomic functions) atomic_fetch_xor: 0x%x", gu[6]);
  cr_expect_eq(gu[7], 42, "MSL 6 (atomic functions) atomic_exchange stores: %u", gu[7]);
  cr_expect_eq(olds[64], 7, "MSL 6 (atomic functions) atomic_exchange returns the old value: %u",
               olds[64]);
  cr_expect_eq(olds[65], 5,
               "MSL 6 (atomic functions) compare_exchange_weak keeps expected on success");
  cr_expect_eq(olds[66], 0,
               "MSL 6 (atomic functions) compare_exchange_weak fails when the value differs");
  cr_expect_eq(olds[67], 9,
               "MSL 6 (atomic functions) compare_exchange_weak writes the value to expected: %u",
               olds[67]);
  cr_expect_eq(gu[8], 9, "MSL 6 (atomic functions) compare_exchange_weak stored desired: %u",
               gu[8]);
  cr_expect_eq(gf[0], 32.0f, "MSL 6 (atomic functions) atomic_float fetch_add: %g", gf[0]);
  cr_expect_eq(gf[1], -16.0f, "MSL 6 (atomic functions) atomic_float fetch_sub: %g", gf[1]);
  cr_expect_eq(gf[2], 2.5f, "MSL 6 (atomic functions) atomic_float compare_exchange_weak: %g",
               gf[2]);
  cr_expect_eq(gf[3], 1.5f, "MSL 6 (atomic functions) atomic_float exchange: %g", gf[3]);
  cr_expect_eq(olds[68], conf_fbits(0.75f),
               "MSL 6 (atomic functions) atomic_float exchange returns the old");
  cr_expect_eq(olds[69], 1,
               "MSL 6 (atomic functions) atomic_bool exchange returns the stored true");
  cr_expect_eq(olds[70], 0, "MSL 6 (atomic functions) atomic_bool load after the exchange");
  cr_expect_eq(gu[9], 2 * 68,
               "MSL 6 (atomic functions) threadgroup atomic_int, per threadgroup: %u", gu[9]);
  for (int i = 0; i < 4; i++) sm_release(bufs[i]);
  sm_release(lib);
}

/* 6.9.2 SIMD-group functions and 6.9.3 quad-group functions, all lanes
 * active (two full simdgroups of 32 on Apple silicon). */
enum { SG_N = 32 };
Test(conformance_exec, simdgroup_and_quadgroup_functions) {
  id lib =
      conf_lib("#include <metal_stdlib>\n"
               "using namespace metal;\n"
               "kernel void k(device uint *o [[buffer(0)]], uint tid [[thread_position_in_grid]],\n"
               "              uint l [[thread_index_in_simdgroup]]) {\n"
               "  device uint *r = o + tid * 32;\n"
               "  r[0] = simd_sum(l);\n"
               "  r[1] = simd_prefix_exclusive_sum(1u);\n"
               "  r[2] = simd_prefix_inclusive_sum(l);\n"
               "  r[3] = simd_max(l);\n"
               "  r[4] = simd_min(l + 3);\n"
               "  r[5] = simd_or(1u << l);\n"
               "  r[6] = simd_and(~(1u << l));\n"
               "  r[7] = simd_xor(l);\n"
               "  r[8] = simd_broadcast(l * 2, 5);\n"
               "  r[9] = simd_shuffle(l, 31 - l);\n"
               "  r[10] = simd_shuffle_xor(l, 1);\n"
               "  r[11] = simd_shuffle_down(l, 1);\n"
               "  r[12] = simd_shuffle_up(l, 2);\n"
               "  r[13] = simd_shuffle_rotate_down(l, 1);\n"
               "  r[14] = uint(ulong(simd_ballot(l < 4)));\n"
               "  r[15] = simd_all(l < 32) + 2 * simd_any(l == 5);\n"
               "  r[16] = simd_is_first();\n"
               "  r[17] = simd_broadcast_first(l + 7);\n"
               "  r[18] = quad_sum(l);\n"
               "  r[19] = quad_broadcast(l, 3);\n"
               "  r[20] = quad_shuffle_xor(l, 2);\n"
               "  r[21] = simd_prefix_exclusive_product(2u);\n"
               "  r[22] = simd_shuffle_and_fill_down(l, l + 100, 4u);\n"
               "  r[23] = simd_shuffle_and_fill_up(l, l + 100, 4u);\n"
               "  r[24] = quad_shuffle_up(l, 1u);\n"
               "  r[25] = quad_shuffle_down(l, 1u);\n"
               "  r[26] = quad_prefix_exclusive_sum(1u);\n"
               "  r[27] = simd_shuffle_rotate_up(l, 1u);\n"
               "  r[28] = simd_broadcast(uint2(l, l + 1), 3).y;\n"
               "  r[29] = uint(simd_min(-int(l)));\n"
               "  r[30] = uint(simd_sum(float(l)));\n"
               "  r[31] = simd_product(l == 3 ? 2u : 1u);\n"
               "}\n");
  id out = sm_buffer(NULL, 64 * SG_N * 4);
  sm_dispatch(lib, "k", &out, 1, SM_SIZE(64, 1, 1), SM_SIZE(64, 1, 1), false, 0);
  const uint32_t *o = sm_contents(out);
  static const char *const names[SG_N] = {
      "simd_sum",
      "simd_prefix_exclusive_sum",
      "simd_prefix_inclusive_sum",
      "simd_max",
      "simd_min",
      "simd_or",
      "simd_and",
      "simd_xor",
      "simd_broadcast",
      "simd_shuffle",
      "simd_shuffle_xor",
      "simd_shuffle_down (the last lane keeps its value)",
      "simd_shuffle_up (the first lanes keep their values)",
      "simd_shuffle_rotate_down",
      "simd_ballot",
      "simd_all + 2 simd_any",
      "simd_is_first",
      "simd_broadcast_first",
      "quad_sum",
      "quad_broadcast",
      "quad_shuffle_xor",
      "simd_prefix_exclusive_product",
      "simd_shuffle_and_fill_down",
      "simd_shuffle_and_fill_up",
      "quad_shuffle_up (the first lane of a quad keeps its value)",
      "quad_shuffle_down (the last lane of a quad keeps its value)",
      "quad_prefix_exclusive_sum",
      "simd_shuffle_rotate_up",
      "simd_broadcast of a uint2",
      "simd_min of int",
      "simd_sum of float",
      "simd_product"};
  bool reported[SG_N] = {false};
  for (unsigned t = 0; t < 64; t++) {
    unsigned l = t % 32, q = l & ~3u;
    const uint32_t want[SG_N] = {496,
                                 l,
                                 l * (l + 1) / 2,
                                 31,
                                 3,
                                 0xffffffffu,
                                 0,
                                 0 /* xor of 0..31 */,
                                 10,
                                 31 - l,
                                 l ^ 1,
                                 l < 31 ? l + 1 : l,
                                 l < 2 ? l : l - 2,
                                 (l + 1) % 32,
                                 0xf,
                                 3,
                                 l == 0,
                                 7,
                                 4 * q + 6,
                                 q + 3,
                                 l ^ 2,
                                 1u << l,
                                 l + 4 < 32 ? l + 4 : l + 4 - 32 + 100,
                                 l >= 4 ? l - 4 : 28 + l + 100,
                                 l % 4 ? l - 1 : l,
                                 l % 4 < 3 ? l + 1 : l,
                                 l % 4,
                                 (l + 31) % 32,
                                 4,
                                 (uint32_t)-31,
                                 496,
                                 2};
    for (int k = 0; k < SG_N; k++)
      if (o[t * SG_N + k] != want[k] && !reported[k]) {
        reported[k] = true;
        cr_expect_fail("MSL 6.9.2/6.9.3 %s: lane %u of thread %u gave %u, expected %u", names[k], l,
                       t, o[t * SG_N + k], want[k]);
      }
  }
  sm_release(out);
  sm_release(lib);
}

/* 4 Address spaces: device, constant (program scope and arguments),
 * threadgroup and thread, through pointers and references. */
Test(conformance_exec, address_spaces) {
  id lib = conf_lib("#include <metal_stdlib>\n"
                    "using namespace metal;\n"
                    "constant float table[4] = {1.0f, 2.0f, 3.0f, 4.0f};\n"
                    "constant int scale = 3;\n"
                    "static float twice(thread const float &r) { return 2 * r; }\n"
                    "static float first(threadgroup const float *p) { return p[0]; }\n"
                    "static void put(device float &d, float v) { d = v; }\n"
                    "kernel void k(device float *o [[buffer(0)]],\n"
                    "              constant float4 &c [[buffer(1)]],\n"
                    "              device const float *in [[buffer(2)]],\n"
                    "              uint t [[thread_index_in_threadgroup]]) {\n"
                    "  threadgroup float s[8];\n"
                    "  s[t] = in[t] * 10;\n"
                    "  threadgroup_barrier(mem_flags::mem_threadgroup);\n"
                    "  device float *p = o + t * 6;\n"
                    "  p[0] = table[t % 4] * scale;\n"
                    "  p[1] = c[t % 4];\n"
                    "  float x = in[t];\n"
                    "  p[2] = twice(x);\n"
                    "  p[3] = first(&s[(t + 1) % 8]);\n"
                    "  put(p[4], *(in + 7 - t));\n"
                    "  thread float *tp = &x;\n"
                    "  *tp += 1;\n"
                    "  p[5] = x;\n"
                    "}\n");
  const float c4[4] = {5, 6, 7, 8};
  float in[8];
  for (int i = 0; i < 8; i++) in[i] = (float)i + 0.5f;
  id bufs[3] = {sm_buffer(NULL, 8 * 6 * 4), sm_buffer(c4, sizeof c4), sm_buffer(in, sizeof in)};
  sm_dispatch(lib, "k", bufs, 3, SM_SIZE(8, 1, 1), SM_SIZE(8, 1, 1), false, 0);
  const float *o = sm_contents(bufs[0]);
  for (int t = 0; t < 8; t++) {
    const float want[6] = {(float)(t % 4 + 1) * 3, c4[t % 4], 2 * in[t],
                           in[(t + 1) % 8] * 10,   in[7 - t], in[t] + 1};
    for (int k = 0; k < 6; k++)
      cr_expect_eq(o[t * 6 + k], want[k],
                   "MSL 4 (address spaces): thread %d value %d: %g, "
                   "expected %g",
                   t, k, o[t * 6 + k], want[k]);
  }
  for (int i = 0; i < 3; i++) sm_release(bufs[i]);
  sm_release(lib);
}

/* 4 Address spaces: member functions and constructors qualified by address
 * space. A class may declare the same constructor or member function for
 * objects in several address spaces. */
Test(conformance_exec, member_functions_qualified_by_address_space) {
  id lib = conf_lib("#include <metal_stdlib>\n"
                    "using namespace metal;\n"
                    "struct acc {\n"
                    "  float v;\n"
                    "  acc() thread : v(1.0f) {}\n"
                    "  acc() threadgroup : v(1.0f) {}\n"
                    "  acc(float x) thread : v(x) {}\n"
                    "  acc(float x) threadgroup : v(x) {}\n"
                    "  void add(float x) thread { v += x; }\n"
                    "  void add(float x) threadgroup { v += x; }\n"
                    "  float get() const thread { return v; }\n"
                    "  float get() const device { return v; }\n"
                    "  float get() const threadgroup { return v; }\n"
                    "};\n"
                    "kernel void k(device float *o [[buffer(0)]], device acc *d [[buffer(1)]],\n"
                    "              uint t [[thread_index_in_threadgroup]]) {\n"
                    "  acc a;\n"
                    "  acc b(2.5f);\n"
                    "  a.add(b.get());\n"
                    "  threadgroup acc s[2];\n"
                    "  if (t == 0) { s[0] = acc(4.0f); s[0].add(1.0f); }\n"
                    "  threadgroup_barrier(mem_flags::mem_threadgroup);\n"
                    "  o[t * 3] = a.get();\n"
                    "  o[t * 3 + 1] = s[0].get();\n"
                    "  o[t * 3 + 2] = d[0].get();\n"
                    "}\n");
  const float d = 7.0f;
  id bufs[2] = {sm_buffer(NULL, 2 * 3 * 4), sm_buffer(&d, sizeof d)};
  sm_dispatch(lib, "k", bufs, 2, SM_SIZE(2, 1, 1), SM_SIZE(2, 1, 1), false, 0);
  const float *o = sm_contents(bufs[0]);
  for (int t = 0; t < 2; t++) {
    cr_expect_eq(o[t * 3], 3.5f, "MSL 4: thread-qualified constructor and members: %g", o[t * 3]);
    cr_expect_eq(o[t * 3 + 1], 5.0f, "MSL 4: threadgroup-qualified members: %g", o[t * 3 + 1]);
    cr_expect_eq(o[t * 3 + 2], 7.0f, "MSL 4: device-qualified member: %g", o[t * 3 + 2]);
  }
  for (int i = 0; i < 2; i++) sm_release(bufs[i]);
  sm_release(lib);
}

/* The same, declared in the class and defined outside it, in a template,
 * defaulted, with the qualifier before or after const, overloaded on the
 * address space of a parameter, and a device-qualified member that writes. */
Test(conformance_exec, member_functions_qualified_by_address_space_out_of_line) {
  id lib = conf_lib("#include <metal_stdlib>\n"
                    "using namespace metal;\n"
                    "struct B {\n"
                    "  float v;\n"
                    "  B() thread;\n"
                    "  B() threadgroup;\n"
                    "  B(const thread B &o) thread;\n"
                    "  B(const threadgroup B &o) thread;\n"
                    "  float get() thread const;\n"
                    "  float get() threadgroup const;\n"
                    "  void set(float x) device { v = x; }\n"
                    "  void set(float x) thread { v = x; }\n"
                    "};\n"
                    "B::B() thread : v(2.0f) {}\n"
                    "B::B() threadgroup : v(2.0f) {}\n"
                    "B::B(const thread B &o) thread : v(o.v + 1.0f) {}\n"
                    "B::B(const threadgroup B &o) thread : v(o.v + 1.0f) {}\n"
                    "float B::get() thread const { return v; }\n"
                    "float B::get() threadgroup const { return v; }\n"
                    "template <typename T> struct C {\n"
                    "  T v;\n"
                    "  C() thread = default;\n"
                    "  C() threadgroup = default;\n"
                    "  constexpr C(T x) thread : v(x) {}\n"
                    "  constexpr C(T x) threadgroup : v(x) {}\n"
                    "  T twice() const thread { return v * 2; }\n"
                    "  T twice() const threadgroup { return v * 2; }\n"
                    "};\n"
                    "kernel void k(device float *o [[buffer(0)]], device B *d [[buffer(1)]],\n"
                    "              uint t [[thread_index_in_threadgroup]]) {\n"
                    "  B a;\n"
                    "  threadgroup B s;\n"
                    "  threadgroup C<float> cs;\n"
                    "  if (t == 0) { s.v = 5.0f; cs.v = 4.0f; d->set(9.0f); }\n"
                    "  threadgroup_barrier(mem_flags::mem_threadgroup | mem_flags::mem_device);\n"
                    "  B b(a);\n"
                    "  B c(s);\n"
                    "  C<float> x(1.5f);\n"
                    "  o[t * 5] = a.get();\n"
                    "  o[t * 5 + 1] = b.get();\n"
                    "  o[t * 5 + 2] = c.get() + s.get();\n"
                    "  o[t * 5 + 3] = x.twice() + cs.twice();\n"
                    "  o[t * 5 + 4] = d->v;\n"
                    "}\n");
  const float d = 7.0f;
  id bufs[2] = {sm_buffer(NULL, 2 * 5 * 4), sm_buffer(&d, sizeof d)};
  sm_dispatch(lib, "k", bufs, 2, SM_SIZE(2, 1, 1), SM_SIZE(2, 1, 1), false, 0);
  const float *o = sm_contents(bufs[0]);
  const float want[5] = {2.0f, 3.0f, 6.0f + 5.0f, 3.0f + 8.0f, 9.0f};
  for (int t = 0; t < 2; t++)
    for (int k = 0; k < 5; k++)
      cr_expect_eq(o[t * 5 + k], want[k],
                   "MSL 4 (address-space qualified members, out of line): "
                   "thread %d value %d = %g, expected %g",
                   t, k, o[t * 5 + k], want[k]);
  for (int i = 0; i < 2; i++) sm_release(bufs[i]);
  sm_release(lib);
}

/* 5.8 Function constants: is_function_constant_defined, derived constants,
 * a constant as an argument's [[function_constant]] condition and in
 * control flow. */
Test(conformance_exec, function_constants) {
  id lib =
      conf_lib("#include <metal_stdlib>\n"
               "using namespace metal;\n"
               "constant bool a [[function_constant(0)]];\n"
               "constant bool b [[function_constant(1)]];\n"
               "constant int n [[function_constant(2)]];\n"
               "constant bool a_defined = is_function_constant_defined(a);\n"
               "constant bool n_defined = is_function_constant_defined(n);\n"
               "constant bool both = a && b;\n"
               "kernel void k(device uint *o [[buffer(0)]],\n"
               "              device const uint *extra [[buffer(1), function_constant(b)]]) {\n"
               "  o[0] = a_defined;\n"
               "  o[1] = n_defined;\n"
               "  o[2] = both;\n"
               "  o[3] = b ? extra[0] : 99u;\n"
               "  if (a) o[4] = 1; else o[4] = 2;\n"
               "}\n");
  const NSUInteger idx[2] = {0, 1};
  const bool vals[2] = {true, true};
  const uint32_t extra = 42;
  id bufs[2] = {sm_buffer(NULL, 5 * 4), sm_buffer(&extra, 4)};
  sm_dispatch_pipeline(sm_pipeline_bools(lib, "k", idx, vals, 2), "k", bufs, 2, SM_SIZE(1, 1, 1),
                       SM_SIZE(1, 1, 1), false, 0);
  const uint32_t *o = sm_contents(bufs[0]);
  const uint32_t want[5] = {1, 0, 1, 42, 1};
  static const char *const what[5] = {
      "is_function_constant_defined (given)", "is_function_constant_defined (not given)",
      "a derived constant", "an argument present when its constant is true",
      "a constant in control flow"};
  for (int i = 0; i < 5; i++)
    cr_expect_eq(o[i], want[i], "MSL 5.8.1 %s: %u, expected %u", what[i], o[i], want[i]);
  /* b false: the argument is absent and need not be bound */
  const bool vals2[2] = {false, false};
  id bufs2[2] = {sm_buffer(NULL, 5 * 4), NULL};
  sm_dispatch_pipeline(sm_pipeline_bools(lib, "k", idx, vals2, 2), "k", bufs2, 2, SM_SIZE(1, 1, 1),
                       SM_SIZE(1, 1, 1), false, 0);
  o = sm_contents(bufs2[0]);
  const uint32_t want2[5] = {1, 0, 0, 99, 2};
  for (int i = 0; i < 5; i++)
    cr_expect_eq(o[i], want2[i], "MSL 5.8.1 %s (constants false): %u, expected %u", what[i], o[i],
                 want2[i]);
  sm_release(bufs[0]);
  sm_release(bufs[1]);
  sm_release(bufs2[0]);
  sm_release(lib);
}
