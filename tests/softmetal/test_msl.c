/* SPDX-License-Identifier: MIT */
/* softmetal MSL execution: kernels compiled with clang++ against the compat
 * metal_stdlib, run through compute encoders. */
#include <criterion/criterion.h>
#include <fenv.h>
#include <float.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "softmetal/sm_test.h"

enum { NotEnqueued, Enqueued, Committed, Scheduled, Completed, Error };

/* The kernels, in parts: ISO C limits one string literal to 4095 characters. */
static const char *const KERNEL_PARTS[] = {
    "#include <metal_stdlib>\n"
    "using namespace metal;\n"
    "struct Params { uint n; float scale; };\n"
    "\n"
    "kernel void add(device const float *a [[buffer(0)]],\n"
    "                device const float *b [[buffer(1)]],\n"
    "                device float *const out [[buffer(2)]],\n"
    "                constant Params &p [[buffer(3)]],\n"
    "                uint i [[thread_position_in_grid]]) {\n"
    "  if (i < p.n) out[i] = (a[i] + b[i]) * p.scale;\n"
    "}\n"
    "\n"
    "kernel void ids(device uint *out [[buffer(0)]],\n"
    "                uint2 pos [[thread_position_in_grid]],\n"
    "                uint2 grid [[threads_per_grid]],\n"
    "                uint2 local [[thread_position_in_threadgroup]],\n"
    "                uint2 group [[threadgroup_position_in_grid]],\n"
    "                uint2 tsize [[threads_per_threadgroup]],\n"
    "                uint flat [[thread_index_in_threadgroup]],\n"
    "                ushort lane [[thread_index_in_simdgroup]],\n"
    "                uint sg [[simdgroup_index_in_threadgroup]]) {\n"
    "  device uint *o = out + 9 * (pos.y * grid.x + pos.x);\n"
    "  o[0] = pos.x; o[1] = pos.y; o[2] = local.x; o[3] = local.y;\n"
    "  o[4] = group.x; o[5] = group.y; o[6] = tsize.x * 100 + tsize.y;\n"
    "  o[7] = flat; o[8] = lane + 1000 * sg;\n"
    "}\n"
    "\n",
    "// Sum: grid-stride loop, simd_sum, threadgroup partials, barrier.\n"
    "kernel void sum(device const float *in [[buffer(0)]],\n"
    "                device float *partial [[buffer(1)]],\n"
    "                constant uint &n [[buffer(2)]],\n"
    "                threadgroup float *scratch [[threadgroup(0)]],\n"
    "                uint gid [[thread_position_in_grid]],\n"
    "                uint grid [[threads_per_grid]],\n"
    "                uint tid [[thread_index_in_threadgroup]],\n"
    "                uint lane [[thread_index_in_simdgroup]],\n"
    "                uint sg [[simdgroup_index_in_threadgroup]],\n"
    "                uint tg [[threadgroup_position_in_grid]],\n"
    "                uint size [[threads_per_threadgroup]]) {\n"
    "  float acc = 0.0f;\n"
    "  for (uint i = gid; i < n; i += grid) acc += in[i];\n"
    "  acc = simd_sum(acc);\n"
    "  if (lane == 0) scratch[sg] = acc;\n"
    "  threadgroup_barrier(mem_flags::mem_threadgroup);\n"
    "  if (sg == 0) {\n"
    "    float v = lane < (size + 31) / 32 ? scratch[lane] : 0.0f;\n"
    "    v = simd_sum(v);\n"
    "    if (tid == 0) partial[tg] = v;\n"
    "  }\n"
    "}\n"
    "\n"
    "// Tree reduction in a threadgroup array declared in the body.\n"
    "kernel void tree(device const uint *in [[buffer(0)]],\n"
    "                 device uint *out [[buffer(1)]],\n"
    "                 uint gid [[thread_position_in_grid]],\n"
    "                 uint tid [[thread_index_in_threadgroup]],\n"
    "                 uint tg [[threadgroup_position_in_grid]]) {\n"
    "  threadgroup uint shared[256];\n"
    "  shared[tid] = in[gid];\n"
    "  threadgroup_barrier(mem_flags::mem_threadgroup);\n"
    "  for (uint s = 128; s > 0; s >>= 1) {\n"
    "    if (tid < s) shared[tid] += shared[tid + s];\n"
    "    threadgroup_barrier(mem_flags::mem_threadgroup);\n"
    "  }\n"
    "  if (tid == 0) out[tg] = shared[0];\n"
    "}\n"
    "\n"
    "kernel void simd_ops(device int *out [[buffer(0)]],\n"
    "                     uint tid [[thread_index_in_threadgroup]],\n"
    "                     uint lane [[thread_index_in_simdgroup]]) {\n"
    "  int v = int(tid) * 3 + 1;\n"
    "  device int *o = out + 8 * tid;\n"
    "  o[0] = simd_sum(v);\n"
    "  o[1] = simd_max(v);\n"
    "  o[2] = simd_min(v);\n"
    "  o[3] = simd_shuffle(v, 5);\n"
    "  o[4] = simd_shuffle_down(v, 1);\n"
    "  o[5] = simd_broadcast(v, 31);\n"
    "  o[6] = simd_prefix_exclusive_sum(v);\n"
    "  o[7] = simd_shuffle_xor(v, 1);\n"
    "}\n"
    "\n"
    "kernel void half_simd(device int *out [[buffer(0)]],\n"
    "                      uint tid [[thread_index_in_threadgroup]],\n"
    "                      uint lane [[thread_index_in_simdgroup]]) {\n"
    "  int s = -1;\n"
    "  if (lane < 16) s = simd_sum(int(tid));\n"
    "  threadgroup_barrier(mem_flags::mem_threadgroup);\n"
    "  out[tid] = s;\n"
    "}\n"
    "\n"
    "kernel void divergent(device uint *out [[buffer(0)]],\n"
    "                      uint tid [[thread_index_in_threadgroup]]) {\n"
    "  if (tid < 5) return;\n"
    "  threadgroup_barrier(mem_flags::mem_threadgroup);\n"
    "  out[tid] = 1;\n"
    "}\n"
    "\n",
    "kernel void count(device atomic_uint *counter [[buffer(0)]],\n"
    "                  device atomic_float *fsum [[buffer(1)]],\n"
    "                  uint i [[thread_position_in_grid]]) {\n"
    "  atomic_fetch_add_explicit(counter, 1u, memory_order_relaxed);\n"
    "  atomic_fetch_max_explicit(counter + 1, i, memory_order_relaxed);\n"
    "  atomic_fetch_add_explicit(fsum, 0.5f, memory_order_relaxed);\n"
    "}\n"
    "\n"
    "kernel void half_from_bits(device const ushort *in [[buffer(0)]],\n"
    "                           device float *f [[buffer(1)]],\n"
    "                           device ushort *back [[buffer(2)]],\n"
    "                           uint i [[thread_position_in_grid]]) {\n"
    "  half h = as_type<half>(in[i]);\n"
    "  f[i] = float(h);\n"
    "  back[i] = as_type<ushort>(half(float(h)));\n"
    "}\n"
    "kernel void half_from_float(device const float *in [[buffer(0)]],\n"
    "                            device ushort *out [[buffer(1)]],\n"
    "                            uint i [[thread_position_in_grid]]) {\n"
    "  out[i] = as_type<ushort>(half(in[i]));\n"
    "}\n"
    "kernel void half_math(device const ushort *in [[buffer(0)]],\n"
    "                      device ushort *out [[buffer(1)]],\n"
    "                      uint i [[thread_position_in_grid]]) {\n"
    "  half a = as_type<half>(in[3 * i]), b = as_type<half>(in[3 * i + 1]);\n"
    "  half c = as_type<half>(in[3 * i + 2]);\n"
    "  out[i] = as_type<ushort>(a * b + c);\n"
    "}\n"
    "kernel void bf_from_bits(device const ushort *in [[buffer(0)]],\n"
    "                         device float *f [[buffer(1)]],\n"
    "                         device ushort *back [[buffer(2)]],\n"
    "                         uint i [[thread_position_in_grid]]) {\n"
    "  bfloat h = as_type<bfloat>(in[i]);\n"
    "  f[i] = float(h);\n"
    "  back[i] = as_type<ushort>(bfloat(float(h)));\n"
    "}\n"
    "kernel void bf_from_float(device const float *in [[buffer(0)]],\n"
    "                          device ushort *out [[buffer(1)]],\n"
    "                          uint i [[thread_position_in_grid]]) {\n"
    "  out[i] = as_type<ushort>(bfloat(in[i]));\n"
    "}\n"
    "\n",
    "kernel void tg_count(device uint *out [[buffer(0)]],\n"
    "                     uint tid [[thread_index_in_threadgroup]],\n"
    "                     uint tg [[threadgroup_position_in_grid]]) {\n"
    "  threadgroup atomic_uint counter;\n"
    "  if (tid == 0) atomic_store_explicit(&counter, 0, memory_order_relaxed);\n"
    "  threadgroup_barrier(mem_flags::mem_threadgroup);\n"
    "  atomic_fetch_add_explicit(&counter, tid, memory_order_relaxed);\n"
    "  threadgroup_barrier(mem_flags::mem_threadgroup);\n"
    "  if (tid == 0) out[tg] = atomic_load_explicit(&counter, memory_order_relaxed);\n"
    "}\n"
    "\n"
    "kernel void vectors(device float4 *out [[buffer(0)]],\n"
    "                    device const packed_float3 *p [[buffer(1)]],\n"
    "                    uint i [[thread_position_in_grid]]) {\n"
    "  float4 v = float4(float2(1.0f, 2.0f), 3.0f, float(i));\n"
    "  float3 q = p[i];\n"
    "  out[3 * i] = float4(v.wzyx);\n"
    "  out[3 * i + 1] = float4(v.xy + q.yz, max(q.x, 2.0f), dot(v.xyz, float3(1.0f)));\n"
    "  uint2 u = uint2(7, 9) << 1;\n"
    "  int4 n = int4(-1, 2, -3, 4);\n"
    "  out[3 * i + 2] = float4(float(u.y), float(abs(n).z), float(clamp(-2.0h, -1.0h, 1.0h)),\n"
    "                          select(0.0f, 1.0f, all(v.xy < float2(5.0f))));\n"
    "}\n"};

static char KERNELS[8192];
static id dev, queue, lib;
static void *pool;

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
TestSuite(msl, .init = setup, .fini = teardown, .timeout = 120);

static id pipeline(const char *name) {
  id fn = SEND(id, (id, SEL, id), lib, "newFunctionWithName:", sm_str(name));
  cr_assert_not_null(fn, "kernel %s", name);
  id error = 0;
  id p =
      SEND(id, (id, SEL, id, id *), dev, "newComputePipelineStateWithFunction:error:", fn, &error);
  cr_assert_not_null(p, "%s", sm_error_text(error));
  sm_release(fn);
  return p;
}

static id buffer(NSUInteger len) {
  return SEND(id, (id, SEL, NSUInteger, NSUInteger), dev, "newBufferWithLength:options:", len, 0ul);
}
static void *contents(id b) { return SEND0(void *, b, "contents"); }
static void set_buffer(id enc, id b, NSUInteger off, NSUInteger i) {
  SEND(void, (id, SEL, id, NSUInteger, NSUInteger), enc, "setBuffer:offset:atIndex:", b, off, i);
}
static void set_bytes(id enc, const void *p, NSUInteger len, NSUInteger i) {
  SEND(void, (id, SEL, const void *, NSUInteger, NSUInteger), enc, "setBytes:length:atIndex:", p,
       len, i);
}
static void dispatch_threads(id enc, MTLSize grid, MTLSize tg) {
  SEND(void, (id, SEL, MTLSize, MTLSize), enc, "dispatchThreads:threadsPerThreadgroup:", grid, tg);
}
static void dispatch_groups(id enc, MTLSize groups, MTLSize tg) {
  SEND(void, (id, SEL, MTLSize, MTLSize), enc,
       "dispatchThreadgroups:threadsPerThreadgroup:", groups, tg);
}
#define SZ(w, h, d) ((MTLSize){(w), (h), (d)})

/* One compute encoder with pipeline p; bind() adds the arguments and dispatch. */
static id begin(id *enc, id p) {
  id cb = SEND0(id, queue, "commandBuffer");
  *enc = SEND0(id, cb, "computeCommandEncoder");
  SEND(void, (id, SEL, id), *enc, "setComputePipelineState:", p);
  return cb;
}
static void finish(id cb, id enc) {
  SEND0(void, enc, "endEncoding");
  SEND0(void, cb, "commit");
  SEND0(void, cb, "waitUntilCompleted");
}
static void expect_ok(id cb) {
  cr_assert_eq(sm_u(cb, "status"), Completed, "%s", sm_error_text(SEND0(id, cb, "error")));
}

Test(msl, library_lists_its_kernels) {
  id names = SEND0(id, lib, "functionNames");
  cr_assert_eq(sm_u(names, "count"), 15);
  cr_assert_str_eq(sm_utf8(SEND(id, (id, SEL, NSUInteger), names, "objectAtIndex:", 0)), "add");
  cr_assert_null(SEND(id, (id, SEL, id), lib, "newFunctionWithName:", sm_str("nope")));
  id p = pipeline("add");
  cr_assert_eq(sm_u(p, "maxTotalThreadsPerThreadgroup"), 1024);
  cr_assert_eq(sm_u(p, "threadExecutionWidth"), 32);
  sm_release(p);
}

Test(msl, add_with_constant_struct_and_partial_threadgroups) {
  enum { N = 1000 };
  id a = buffer(N * 4), b = buffer(N * 4), out = buffer(N * 4 + 64);
  float *pa = contents(a), *pb = contents(b), *po = contents(out);
  for (int i = 0; i < N; i++) {
    pa[i] = (float)i;
    pb[i] = 0.5f;
  }
  po[N] = -7;
  struct {
    unsigned n;
    float scale;
  } params = {N, 2.0f};
  id p = pipeline("add"), enc;
  id cb = begin(&enc, p);
  set_buffer(enc, a, 0, 0);
  cr_assert_eq(sm_u(a, "retainCount"), 2, "bound buffers are retained");
  set_buffer(enc, b, 0, 1);
  set_buffer(enc, out, 0, 2);
  set_bytes(enc, &params, sizeof params, 3);
  params.scale = 100; /* setBytes copied */
  dispatch_threads(enc, SZ(N, 1, 1), SZ(64, 1, 1));
  finish(cb, enc);
  expect_ok(cb);
  for (int i = 0; i < N; i++)
    cr_assert_eq(po[i], ((float)i + 0.5f) * 2.0f, "out[%d] = %g", i, po[i]);
  cr_assert_eq(po[N], -7, "nothing written past the grid");
  sm_release(p);
  sm_release(a);
  sm_release(b);
  sm_release(out);
}

Test(msl, builtin_positions_in_2d) {
  enum { W = 10, H = 6 };
  id out = buffer(W * H * 9 * 4);
  id p = pipeline("ids"), enc;
  id cb = begin(&enc, p);
  set_buffer(enc, out, 0, 0);
  dispatch_threads(enc, SZ(W, H, 1), SZ(8, 4, 1));
  finish(cb, enc);
  expect_ok(cb);
  unsigned *o = contents(out);
  for (unsigned y = 0; y < H; y++)
    for (unsigned x = 0; x < W; x++) {
      unsigned *r = o + 9 * (y * W + x);
      unsigned lx = x % 8, ly = y % 4;
      unsigned tw = x / 8 == 1 ? W - 8 : 8, th = y / 4 == 1 ? H - 4 : 4; /* edge groups */
      unsigned flat = ly * tw + lx;
      cr_assert_eq(r[0], x);
      cr_assert_eq(r[1], y);
      cr_assert_eq(r[2], lx);
      cr_assert_eq(r[3], ly);
      cr_assert_eq(r[4], x / 8);
      cr_assert_eq(r[5], y / 4);
      cr_assert_eq(r[6], tw * 100 + th);
      cr_assert_eq(r[7], flat);
      cr_assert_eq(r[8], flat % 32 + 1000 * (flat / 32));
    }
  sm_release(p);
  sm_release(out);
}

Test(msl, parallel_sum_of_a_million_floats_matches_double_reference) {
  enum { N = 1000000, GROUPS = 64, TG = 256 };
  id in = buffer(N * 4), partial = buffer(GROUPS * 4);
  float *pin = contents(in);
  double ref = 0;
  unsigned s = 12345;
  for (int i = 0; i < N; i++) {
    s = s * 1664525u + 1013904223u;
    pin[i] = (float)(s >> 8) / (float)(1 << 24) - 0.25f;
    ref += pin[i];
  }
  unsigned n = N;
  id p = pipeline("sum"), enc;
  id cb = begin(&enc, p);
  set_buffer(enc, in, 0, 0);
  set_buffer(enc, partial, 0, 1);
  set_bytes(enc, &n, sizeof n, 2);
  SEND(void, (id, SEL, NSUInteger, NSUInteger), enc,
       "setThreadgroupMemoryLength:atIndex:", (NSUInteger)(TG / 32 * 4 + 15) / 16 * 16, 0);
  dispatch_groups(enc, SZ(GROUPS, 1, 1), SZ(TG, 1, 1));
  finish(cb, enc);
  expect_ok(cb);
  double got = 0;
  for (int g = 0; g < GROUPS; g++) got += ((float *)contents(partial))[g];
  double sum_abs = 0;
  for (int i = 0; i < N; i++) sum_abs += fabs(pin[i]);
  /* float accumulation over ~N/16384 terms per thread, then 256 and 64 terms */
  cr_assert_leq(fabs(got - ref), sum_abs * 1e-5, "got %.6f, reference %.6f", got, ref);
  sm_release(p);
  sm_release(in);
  sm_release(partial);
}

Test(msl, tree_reduction_in_threadgroup_array) {
  enum { N = 256 * 8 };
  id in = buffer(N * 4), out = buffer(8 * 4);
  unsigned *pin = contents(in);
  for (unsigned i = 0; i < N; i++) pin[i] = i;
  id p = pipeline("tree"), enc;
  id cb = begin(&enc, p);
  set_buffer(enc, in, 0, 0);
  set_buffer(enc, out, 0, 1);
  dispatch_threads(enc, SZ(N, 1, 1), SZ(256, 1, 1));
  finish(cb, enc);
  expect_ok(cb);
  unsigned *o = contents(out);
  for (unsigned g = 0; g < 8; g++) {
    unsigned want = 0;
    for (unsigned i = 0; i < 256; i++) want += g * 256 + i;
    cr_assert_eq(o[g], want, "group %u", g);
  }
  sm_release(p);
  sm_release(in);
  sm_release(out);
}

Test(msl, threadgroup_atomic_declared_in_the_body) {
  id out = buffer(5 * 4);
  id p = pipeline("tg_count"), enc;
  id cb = begin(&enc, p);
  set_buffer(enc, out, 0, 0);
  dispatch_groups(enc, SZ(5, 1, 1), SZ(100, 1, 1));
  finish(cb, enc);
  expect_ok(cb);
  for (int g = 0; g < 5; g++) cr_assert_eq(((unsigned *)contents(out))[g], 99 * 100 / 2);
  sm_release(p);
  sm_release(out);
}

struct tree_job {
  id queue, pipeline, in, out;
  id cb;
};
static void tree_encode(struct tree_job *j) {
  j->cb = SEND0(id, j->queue, "commandBuffer");
  id enc = SEND0(id, j->cb, "computeCommandEncoder");
  SEND(void, (id, SEL, id), enc, "setComputePipelineState:", j->pipeline);
  set_buffer(enc, j->in, 0, 0);
  set_buffer(enc, j->out, 0, 1);
  dispatch_threads(enc, SZ(256 * 64, 1, 1), SZ(256, 1, 1));
  SEND0(void, enc, "endEncoding");
}

Test(msl, two_queues_run_fiber_kernels_at_the_same_time) {
  id p = pipeline("tree");
  struct tree_job jobs[2];
  for (int q = 0; q < 2; q++) {
    jobs[q].queue = q ? SEND0(id, dev, "newCommandQueue") : queue;
    jobs[q].pipeline = p;
    jobs[q].in = buffer(256 * 64 * 4);
    jobs[q].out = buffer(64 * 4);
    unsigned *pin = contents(jobs[q].in);
    for (unsigned i = 0; i < 256 * 64; i++) pin[i] = i * (unsigned)(q + 1);
    tree_encode(&jobs[q]);
  }
  SEND0(void, jobs[0].cb, "commit");
  SEND0(void, jobs[1].cb, "commit");
  for (int q = 0; q < 2; q++) {
    SEND0(void, jobs[q].cb, "waitUntilCompleted");
    expect_ok(jobs[q].cb);
    unsigned *o = contents(jobs[q].out);
    for (unsigned g = 0; g < 64; g++) {
      unsigned want = 0;
      for (unsigned i = 0; i < 256; i++) want += (g * 256 + i) * (unsigned)(q + 1);
      cr_assert_eq(o[g], want, "queue %d group %u", q, g);
    }
    sm_release(jobs[q].in);
    sm_release(jobs[q].out);
  }
  sm_release(jobs[1].queue);
  sm_release(p);
}

Test(msl, standard_header_aliases_compile) {
  id error = 0;
  id l = compile("#include <metal_math>\n#include <metal_atomic>\n#include <metal_simdgroup>\n"
                 "kernel void k(device float *a [[buffer(0)]], uint i [[thread_position_in_grid]])"
                 " { a[i] = metal::sqrt(a[i]); }\n",
                 &error);
  cr_assert_not_null(l, "%s", sm_error_text(error));
  sm_release(l);
}

Test(msl, simdgroup_functions) {
  enum { T = 64 }; /* two full simdgroups (a partial one reads inactive lanes: test_simd.c) */
  id out = buffer(T * 8 * 4);
  id p = pipeline("simd_ops"), enc;
  id cb = begin(&enc, p);
  set_buffer(enc, out, 0, 0);
  dispatch_threads(enc, SZ(T, 1, 1), SZ(T, 1, 1));
  finish(cb, enc);
  expect_ok(cb);
  int *o = contents(out);
  for (int t = 0; t < T; t++) {
    int base = t / 32 * 32, lanes = t < 32 ? 32 : T - 32, lane = t % 32;
    int sum = 0, prefix = 0;
    for (int l = 0; l < lanes; l++) sum += (base + l) * 3 + 1;
    for (int l = 0; l < lane; l++) prefix += (base + l) * 3 + 1;
    int v = t * 3 + 1;
    int *r = o + 8 * t;
    cr_assert_eq(r[0], sum, "thread %d simd_sum", t);
    cr_assert_eq(r[1], (base + lanes - 1) * 3 + 1);
    cr_assert_eq(r[2], base * 3 + 1);
    cr_assert_eq(r[3], (base + 5) * 3 + 1);
    cr_assert_eq(r[4], lane + 1 < lanes ? v + 3 : v, "thread %d shuffle_down", t);
    cr_assert_eq(r[5], lanes == 32 ? (base + 31) * 3 + 1 : v, "thread %d broadcast", t);
    cr_assert_eq(r[6], prefix);
    cr_assert_eq(r[7], (base + (lane ^ 1)) * 3 + 1);
  }
  sm_release(p);
  sm_release(out);
}

Test(msl, simdgroup_function_in_a_branch_uses_the_active_lanes) {
  id out = buffer(64 * 4);
  id p = pipeline("half_simd"), enc;
  id cb = begin(&enc, p);
  set_buffer(enc, out, 0, 0);
  dispatch_threads(enc, SZ(64, 1, 1), SZ(64, 1, 1));
  finish(cb, enc);
  expect_ok(cb);
  int *o = contents(out);
  for (int t = 0; t < 64; t++) {
    int base = t / 32 * 32, want = 0;
    for (int l = 0; l < 16; l++) want += base + l;
    cr_assert_eq(o[t], t % 32 < 16 ? want : -1, "thread %d", t);
  }
  sm_release(p);
  sm_release(out);
}

/* MSL 6.9.1: a barrier must be reached by the threads executing the kernel;
 * on Apple silicon those that have returned no longer are, and the others
 * meet at it (conformance_exec.c has the case with threadgroup memory). */
Test(msl, a_barrier_waits_only_for_threads_that_have_not_returned) {
  id out = buffer(64 * 4);
  memset(contents(out), 0, 64 * 4);
  id p = pipeline("divergent"), enc;
  id cb = begin(&enc, p);
  set_buffer(enc, out, 0, 0);
  dispatch_threads(enc, SZ(64, 1, 1), SZ(64, 1, 1));
  finish(cb, enc);
  cr_assert_eq(sm_u(cb, "status"), Completed, "%s", sm_error_text(SEND0(id, cb, "error")));
  const uint32_t *o = contents(out);
  for (uint32_t t = 0; t < 64; t++) cr_expect_eq(o[t], t < 5 ? 0u : 1u, "thread %u", t);
  sm_release(p);
  sm_release(out);
}

Test(msl, atomics_count_every_thread) {
  enum { N = 5000 };
  id counter = buffer(8), fsum = buffer(4);
  id p = pipeline("count"), enc;
  id cb = begin(&enc, p);
  set_buffer(enc, counter, 0, 0);
  set_buffer(enc, fsum, 0, 1);
  dispatch_threads(enc, SZ(N, 1, 1), SZ(100, 1, 1));
  finish(cb, enc);
  expect_ok(cb);
  cr_assert_eq(((unsigned *)contents(counter))[0], N);
  cr_assert_eq(((unsigned *)contents(counter))[1], N - 1);
  cr_assert_eq(((float *)contents(fsum))[0], N * 0.5f);
  sm_release(p);
  sm_release(counter);
  sm_release(fsum);
}

/* ---- half and bfloat: independent references ---- */
static float ref_half_to_float(unsigned h) {
  int sign = h >> 15, exp = (h >> 10) & 31, man = h & 1023;
  float v;
  if (exp == 0)
    v = ldexpf((float)man, -24);
  else if (exp == 31)
    v = man ? NAN : INFINITY;
  else
    v = ldexpf((float)(man + 1024), exp - 25);
  return sign ? -v : v;
}

/* Round to nearest even with `mant` fraction bits, exponent range [emin, emax]. */
static unsigned ref_round(float f, int mant, int emin, int emax, int ebias) {
  unsigned sign = signbit(f) ? 1u : 0u;
  unsigned top = sign << (mant + (ebias == 15 ? 5 : 8));
  unsigned inf = ((1u << (ebias == 15 ? 5 : 8)) - 1) << mant;
  if (isnan(f)) return 0xFFFFu; /* checked separately */
  if (isinf(f)) return top | inf;
  double a = fabs((double)f);
  if (a == 0) return top;
  int e;
  frexp(a, &e);
  e -= 1; /* a = m * 2^e with m in [1, 2) */
  if (e < emin) e = emin;
  double q = a / ldexp(1.0, e - mant); /* exact: float has 24 bits */
  fesetround(FE_TONEAREST);
  double r = nearbyint(q);
  if (r >= ldexp(1.0, mant + 1)) {
    r /= 2;
    e += 1;
  }
  if (e > emax) return top | inf;
  unsigned bits;
  if (r < ldexp(1.0, mant))
    bits = (unsigned)r; /* subnormal */
  else
    bits = ((unsigned)(e + ebias) << mant) | ((unsigned)r - (1u << mant));
  return top | bits;
}
static unsigned ref_float_to_half(float f) { return ref_round(f, 10, -14, 15, 15); }
static unsigned ref_float_to_bf16(float f) { return ref_round(f, 7, -126, 127, 127); }

static void run_1d(const char *kernel, id *bufs, int nbufs, NSUInteger n) {
  id p = pipeline(kernel), enc;
  id cb = begin(&enc, p);
  for (int i = 0; i < nbufs; i++) set_buffer(enc, bufs[i], 0, (NSUInteger)i);
  dispatch_threads(enc, SZ(n, 1, 1), SZ(256, 1, 1));
  finish(cb, enc);
  expect_ok(cb);
  sm_release(p);
}

Test(msl, half_all_65536_bit_patterns_round_trip_bit_exactly) {
  id in = buffer(65536 * 2), f = buffer(65536 * 4), back = buffer(65536 * 2);
  uint16_t *pin = contents(in), *pb = contents(back);
  float *pf = contents(f);
  for (unsigned i = 0; i < 65536; i++) pin[i] = (uint16_t)i;
  id bufs[] = {in, f, back};
  run_1d("half_from_bits", bufs, 3, 65536);
  for (unsigned i = 0; i < 65536; i++) {
    float want = ref_half_to_float(i);
    if (isnan(want)) {
      cr_assert(isnan(pf[i]), "half 0x%04x -> %g", i, pf[i]);
      /* a NaN of the same sign: quieted, or the same bits where the
       * compiler folds half(float(h)) to h (as LLVM does for _Float16) */
      cr_assert((pb[i] & 0xFE00u) == ((i & 0x8000u) | 0x7E00u) || pb[i] == i,
                "NaN 0x%04x came back as 0x%04x", i, pb[i]);
    } else {
      uint32_t a, b;
      memcpy(&a, &want, 4);
      memcpy(&b, &pf[i], 4);
      cr_assert_eq(a, b, "half 0x%04x -> %a, want %a", i, pf[i], want);
      cr_assert_eq(pb[i], i, "half 0x%04x round trip gave 0x%04x", i, pb[i]);
    }
  }
  sm_release(in);
  sm_release(f);
  sm_release(back);
}

/* Every half, the midpoints between neighbours (ties), and one float ulp either side. */
static float *rounding_inputs(unsigned *count) {
  float *v = malloc(sizeof(float) * 65536 * 4 + 64);
  unsigned n = 0;
  for (unsigned i = 0; i < 0x7C00; i++) {
    for (int s = 0; s < 2; s++) {
      float a = ref_half_to_float(i), b = ref_half_to_float(i + 1);
      float mid = (float)(((double)a + (double)b) / 2);
      float sg = s ? -1.0f : 1.0f;
      if (s == 0) v[n++] = sg * a;
      v[n++] = sg * mid;
      if (s == 0) {
        v[n++] = nextafterf(mid, 0);
        v[n++] = nextafterf(mid, INFINITY);
      }
    }
  }
  const float extra[] = {0.0f,           -0.0f,          INFINITY,        -INFINITY, 65504.0f,
                         65519.99f,      65520.0f,       1e10f,           -1e10f,    1e-10f,
                         5.9604645e-08f, 2.9802322e-08f, 2.98023259e-08f, FLT_MIN,   3.0e38f};
  for (unsigned i = 0; i < sizeof extra / sizeof extra[0]; i++) v[n++] = extra[i];
  *count = n;
  return v;
}

Test(msl, float_to_half_rounds_to_nearest_even) {
  unsigned n;
  float *vals = rounding_inputs(&n);
  id in = SEND(id, (id, SEL, const void *, NSUInteger, NSUInteger), dev,
               "newBufferWithBytes:length:options:", vals, (NSUInteger)n * 4, 0ul);
  id out = buffer((NSUInteger)n * 2);
  id bufs[] = {in, out};
  run_1d("half_from_float", bufs, 2, n);
  uint16_t *po = contents(out);
  for (unsigned i = 0; i < n; i++)
    cr_assert_eq(po[i], ref_float_to_half(vals[i]), "float %a -> 0x%04x, want 0x%04x", vals[i],
                 po[i], ref_float_to_half(vals[i]));
  free(vals);
  sm_release(in);
  sm_release(out);
}

Test(msl, half_arithmetic_rounds_each_operation) {
  enum { N = 4096 };
  id in = buffer(N * 3 * 2), out = buffer(N * 2);
  uint16_t *pin = contents(in);
  unsigned s = 99;
  for (unsigned i = 0; i < N * 3; i++) {
    s = s * 1103515245u + 12345u;
    pin[i] = (uint16_t)((s >> 9) & 0x7FFF) % 0x7800u | (uint16_t)(s & 0x8000u);
  }
  id bufs[] = {in, out};
  run_1d("half_math", bufs, 2, N);
  uint16_t *po = contents(out);
  for (unsigned i = 0; i < N; i++) {
    float a = ref_half_to_float(pin[3 * i]), b = ref_half_to_float(pin[3 * i + 1]);
    float c = ref_half_to_float(pin[3 * i + 2]);
    float ab = ref_half_to_float(ref_float_to_half(a * b)); /* a*b is exact in float */
    unsigned want = ref_float_to_half((float)((double)ab + (double)c));
    cr_assert_eq(po[i], want, "%a * %a + %a -> 0x%04x, want 0x%04x", a, b, c, po[i], want);
  }
  sm_release(in);
  sm_release(out);
}

Test(msl, bfloat_all_65536_bit_patterns_and_rounding) {
  id in = buffer(65536 * 2), f = buffer(65536 * 4), back = buffer(65536 * 2);
  uint16_t *pin = contents(in), *pb = contents(back);
  float *pf = contents(f);
  for (unsigned i = 0; i < 65536; i++) pin[i] = (uint16_t)i;
  id bufs[] = {in, f, back};
  run_1d("bf_from_bits", bufs, 3, 65536);
  for (unsigned i = 0; i < 65536; i++) {
    uint32_t want = i << 16, got;
    memcpy(&got, &pf[i], 4);
    cr_assert_eq(got, want, "bfloat 0x%04x", i);
    bool nan = (i & 0x7F80u) == 0x7F80u && (i & 0x7Fu);
    if (nan)
      cr_assert_eq(pb[i], i | 0x40u, "NaN 0x%04x quieted", i);
    else
      cr_assert_eq(pb[i], i, "bfloat 0x%04x round trip gave 0x%04x", i, pb[i]);
  }
  /* float -> bfloat on values around every bfloat (ties and neighbours) */
  enum { M = 3 * 32768 + 8 };
  float *vals = malloc(M * sizeof(float));
  unsigned n = 0;
  for (unsigned i = 0; i < 0x7F80u; i += 1) {
    uint32_t mid_bits = (i << 16) | 0x8000u;
    float mid;
    memcpy(&mid, &mid_bits, 4);
    vals[n++] = (i & 1) ? -mid : mid;
    vals[n++] = nextafterf(mid, 0);
    vals[n++] = nextafterf(mid, INFINITY);
  }
  vals[n++] = INFINITY;
  vals[n++] = -0.0f;
  vals[n++] = 3.4028235e38f;
  id fin = SEND(id, (id, SEL, const void *, NSUInteger, NSUInteger), dev,
                "newBufferWithBytes:length:options:", vals, (NSUInteger)n * 4, 0ul);
  id fout = buffer((NSUInteger)n * 2);
  id bufs2[] = {fin, fout};
  run_1d("bf_from_float", bufs2, 2, n);
  uint16_t *po = contents(fout);
  for (unsigned i = 0; i < n; i++)
    cr_assert_eq(po[i], ref_float_to_bf16(vals[i]), "float %a -> 0x%04x, want 0x%04x", vals[i],
                 po[i], ref_float_to_bf16(vals[i]));
  free(vals);
  sm_release(fin);
  sm_release(fout);
  sm_release(in);
  sm_release(f);
  sm_release(back);
}

Test(msl, vectors_swizzles_and_packed_types) {
  id out = buffer(2 * 3 * 16), in = buffer(2 * 12);
  float *pin = contents(in);
  for (int i = 0; i < 6; i++) pin[i] = (float)(i + 1);
  id bufs[] = {out, in};
  id p = pipeline("vectors"), enc;
  id cb = begin(&enc, p);
  set_buffer(enc, bufs[0], 0, 0);
  set_buffer(enc, bufs[1], 0, 1);
  dispatch_threads(enc, SZ(2, 1, 1), SZ(2, 1, 1));
  finish(cb, enc);
  expect_ok(cb);
  float *o = contents(out);
  const float want[2][12] = {
      {0, 3, 2, 1, 1 + 2, 2 + 3, 2, 6, 18, 3, -1, 1},
      {1, 3, 2, 1, 1 + 5, 2 + 6, 4, 6, 18, 3, -1, 1},
  };
  for (int i = 0; i < 2; i++)
    for (int k = 0; k < 12; k++) cr_assert_eq(o[12 * i + k], want[i][k], "thread %d [%d]", i, k);
  sm_release(p);
  sm_release(out);
  sm_release(in);
}

/* MSL's char is a signed 8-bit integer on every Metal; C++'s plain char is
 * unsigned on aarch64 Linux, so softmetal must say -fsigned-char there. */
Test(msl, char_is_signed) {
  const char *src = "#include <metal_stdlib>\n"
                    "using namespace metal;\n"
                    "kernel void widen(device const uchar *in [[buffer(0)]],\n"
                    "                  device int *out [[buffer(1)]],\n"
                    "                  uint i [[thread_position_in_grid]]) {\n"
                    "  out[i] = int(char(in[i]));\n"
                    "}\n";
  id error = 0;
  id widen_lib = compile(src, &error);
  cr_assert_not_null(widen_lib, "%s", sm_error_text(error));
  id fn = SEND(id, (id, SEL, id), widen_lib, "newFunctionWithName:", sm_str("widen"));
  id p =
      SEND(id, (id, SEL, id, id *), dev, "newComputePipelineStateWithFunction:error:", fn, &error);
  cr_assert_not_null(p, "%s", sm_error_text(error));
  id in = buffer(4), out = buffer(16);
  memcpy(contents(in), (const unsigned char[]){0xff, 0x80, 0x7f, 0x01}, 4);
  id enc;
  id cb = begin(&enc, p);
  set_buffer(enc, in, 0, 0);
  set_buffer(enc, out, 0, 1);
  dispatch_threads(enc, SZ(4, 1, 1), SZ(4, 1, 1));
  finish(cb, enc);
  expect_ok(cb);
  const int want[4] = {-1, -128, 127, 1};
  const int *got = contents(out);
  for (int i = 0; i < 4; i++) cr_assert_eq(got[i], want[i], "char of byte %d: %d", i, got[i]);
  sm_release(p);
  sm_release(fn);
  sm_release(widen_lib);
  sm_release(in);
  sm_release(out);
}

Test(msl, compile_error_names_the_source_line) {
  const char *bad = "#include <metal_stdlib>\n"
                    "using namespace metal;\n"
                    "kernel void broken(device float *a [[buffer(0)]],\n"
                    "                   uint i [[thread_position_in_grid]]) {\n"
                    "  a[i] = 1.0f\n"
                    "  a[i] += undefined_name;\n"
                    "}\n";
  id error = 0;
  cr_assert_null(compile(bad, &error));
  cr_assert_not_null(error);
  cr_assert_str_eq(sm_utf8(SEND0(id, error, "domain")), "MTLLibraryErrorDomain");
  cr_assert_eq(SEND0(NSInteger, error, "code"), 3);
  const char *msg = sm_error_text(error);
  cr_assert(strstr(msg, "program_source:5:"), "%s", msg);
  cr_assert(strstr(msg, "program_source:6:"), "%s", msg);
  cr_assert(strstr(msg, "undefined_name"), "%s", msg);
}

Test(msl, kernel_signature_errors_name_the_line) {
  const char *bad = "#include <metal_stdlib>\n"
                    "using namespace metal;\n"
                    "kernel void k(device float *a [[buffer(0)]],\n"
                    "              uint i [[vertex_id]]) {}\n";
  id error = 0;
  cr_assert_null(compile(bad, &error));
  const char *msg = sm_error_text(error);
  cr_assert(strstr(msg, "program_source:4:"), "%s", msg);
  cr_assert(strstr(msg, "[[vertex_id]]"), "%s", msg);
  error = 0;
  cr_assert_null(compile("kernel int k(device float *a [[buffer(0)]]) {}\n", &error));
  cr_assert(strstr(sm_error_text(error), "must return void"), "%s", sm_error_text(error));
  error = 0;
  cr_assert_null(compile("kernel void k(device float *a [[buffer(40)]]) {}\n", &error));
  cr_assert(strstr(sm_error_text(error), "index must be < 31"), "%s", sm_error_text(error));
}

Test(msl, pipeline_from_a_non_function_is_an_error) {
  id error = 0;
  id p =
      SEND(id, (id, SEL, id, id *), dev, "newComputePipelineStateWithFunction:error:", lib, &error);
  cr_assert_null(p);
  cr_assert(strstr(sm_error_text(error), "is not a kernel function"), "%s", sm_error_text(error));
  id fn = SEND(id, (id, SEL, id), lib, "newFunctionWithName:", sm_str("sum"));
  cr_assert_str_eq(sm_utf8(SEND0(id, fn, "name")), "sum");
  sm_release(fn);
}

Test(msl, library_urls_of_missing_files_are_refused_with_an_error) {
  id error = 0;
  id url = SEND(id, (id, SEL, id), sm_class_named("NSURL"),
                "fileURLWithPath:", sm_str("/nonexistent/softmetal/default.metallib"));
  cr_assert_null(SEND(id, (id, SEL, id, id *), dev, "newLibraryWithURL:error:", url, &error));
  cr_assert(strstr(sm_error_text(error), "cannot open"), "%s", sm_error_text(error));
  cr_assert_eq(SEND0(NSInteger, error, "code"), 6); /* MTLLibraryErrorFileNotFound */
}

Test(msl, second_compile_of_a_source_hits_the_cache) {
  struct softmetal_stats a, b;
  softmetal_stats(&a);
  id error = 0;
  id again = compile(KERNELS, &error);
  cr_assert_not_null(again);
  softmetal_stats(&b);
  cr_assert_eq(b.kernel_compiles, a.kernel_compiles);
  cr_assert_eq(b.kernel_cache_hits, a.kernel_cache_hits + 1);
  sm_release(again);
}

/* MTLBinaryArchive: FailOnBinaryArchiveMiss fails until the pipeline's
 * functions are added; a serialized archive loads again; anything else in
 * the file is InvalidFile. */
Test(msl, binary_archives_hold_pipelines_and_refuse_other_files) {
  /* SEND0 evaluates its receiver twice: alloc first, then init. */
  id adesc = SEND0(id, (id)objc_getClass("MTLBinaryArchiveDescriptor"), "alloc");
  adesc = SEND0(id, adesc, "init");
  id error = 0;
  id archive =
      SEND(id, (id, SEL, id, id *), dev, "newBinaryArchiveWithDescriptor:error:", adesc, &error);
  cr_assert_not_null(archive, "%s", sm_error_text(error));
  id fn = SEND(id, (id, SEL, id), lib, "newFunctionWithName:", sm_str("add"));
  id pdesc = SEND0(id, (id)objc_getClass("MTLComputePipelineDescriptor"), "alloc");
  pdesc = SEND0(id, pdesc, "init");
  SEND(void, (id, SEL, id), pdesc, "setComputeFunction:", fn);
  id archives = SEND(id, (id, SEL, const id *, NSUInteger), (id)objc_getClass("NSArray"),
                     "arrayWithObjects:count:", &archive, 1ul);
  SEND(void, (id, SEL, id), pdesc, "setBinaryArchives:", archives);
  const char *make = "newComputePipelineStateWithDescriptor:options:reflection:error:";
  error = 0;
  cr_assert_null(
      SEND(id, (id, SEL, id, NSUInteger, id *, id *), dev, make, pdesc, 4ul, NULL, &error),
      "FailOnBinaryArchiveMiss before the functions are added");
  cr_assert(strstr(sm_error_text(error), "no binary archive"), "%s", sm_error_text(error));
  id p = SEND(id, (id, SEL, id, NSUInteger, id *, id *), dev, make, pdesc, 0ul, NULL, &error);
  cr_assert_not_null(p, "without the option the pipeline is compiled");
  sm_release(p);
  cr_assert(SEND(BOOL, (id, SEL, id, id *), archive,
                 "addComputePipelineFunctionsWithDescriptor:error:", pdesc, &error),
            "%s", sm_error_text(error));
  p = SEND(id, (id, SEL, id, NSUInteger, id *, id *), dev, make, pdesc, 4ul, NULL, &error);
  cr_assert_not_null(p, "%s", sm_error_text(error));
  cr_assert_eq(sm_u(p, "threadExecutionWidth"), 32);
  sm_release(p);

  char path[] = "/tmp/sm-archive-XXXXXX";
  int fd = mkstemp(path);
  cr_assert_geq(fd, 0);
  close(fd);
  id url = SEND(id, (id, SEL, id), (id)objc_getClass("NSURL"), "fileURLWithPath:", sm_str(path));
  cr_assert(SEND(BOOL, (id, SEL, id, id *), archive, "serializeToURL:error:", url, &error), "%s",
            sm_error_text(error));
  SEND(void, (id, SEL, id), adesc, "setUrl:", url);
  id loaded =
      SEND(id, (id, SEL, id, id *), dev, "newBinaryArchiveWithDescriptor:error:", adesc, &error);
  cr_assert_not_null(loaded, "%s", sm_error_text(error));
  sm_release(loaded);
  FILE *f = fopen(path, "r+b");
  cr_assert_not_null(f);
  fputs("SMBINARX", f);
  fclose(f);
  error = 0;
  cr_assert_null(
      SEND(id, (id, SEL, id, id *), dev, "newBinaryArchiveWithDescriptor:error:", adesc, &error));
  cr_assert_eq(SEND0(NSInteger, error, "code"), 1, "MTLBinaryArchiveErrorInvalidFile");
  cr_assert_str_eq(sm_utf8(SEND0(id, error, "domain")), "MTLBinaryArchiveDomain");
  unlink(path);
  sm_release(pdesc);
  sm_release(fn);
  sm_release(archive);
  sm_release(adesc);
}

Test(msl, encoding_errors_fail_the_command_buffer) {
  id buf = buffer(64);
  id p = pipeline("add");
  struct {
    const char *what;
    int which;
  } cases[] = {
      {"setBuffer:offset:atIndex:: index = 31 must be < 31", 0},
      {"offset = 65 exceeds buffer length 64", 1},
      {"setBytes:length:atIndex:: length = 4097", 2},
      {"threadsPerThreadgroup = {1025, 1, 1}", 3},
      {"kernel add uses [[buffer(3)]] but nothing is bound at index 3", 4},
      {"threadsPerThreadgroup = {0, 1, 1}", 5},
      {"no compute pipeline state set", 6},
      {"setThreadgroupMemoryLength:atIndex:: length = 32784 must be <= 32768", 7},
  };
  static char big[4097];
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    id cb = SEND0(id, queue, "commandBuffer");
    id enc = SEND0(id, cb, "computeCommandEncoder");
    if (cases[i].which != 6) SEND(void, (id, SEL, id), enc, "setComputePipelineState:", p);
    for (NSUInteger k = 0; k < 4; k++) set_buffer(enc, buf, 0, k);
    switch (cases[i].which) {
    case 0: set_buffer(enc, buf, 0, 31); break;
    case 1: set_buffer(enc, buf, 65, 0); break;
    case 2: set_bytes(enc, big, sizeof big, 3); break;
    case 3: break;
    case 4: set_buffer(enc, (id)0, 0, 3); break;
    case 7:
      SEND(void, (id, SEL, NSUInteger, NSUInteger), enc,
           "setThreadgroupMemoryLength:atIndex:", 32784, 0);
      break;
    default: break;
    }
    MTLSize tg = cases[i].which == 3   ? SZ(1025, 1, 1)
                 : cases[i].which == 5 ? SZ(0, 1, 1)
                                       : SZ(64, 1, 1);
    dispatch_threads(enc, SZ(64, 1, 1), tg);
    finish(cb, enc);
    cr_assert_eq(sm_u(cb, "status"), Error, "case %zu", i);
    const char *msg = sm_error_text(SEND0(id, cb, "error"));
    cr_assert(strstr(msg, cases[i].what), "case %zu: %s", i, msg);
  }
  sm_release(p);
  sm_release(buf);
}

Test(msl, full_dispatch_cycle_balances_retains_and_releases) {
  struct softmetal_stats before, after;
  softmetal_stats(&before);
  void *inner = objc_autoreleasePoolPush();
  id out = buffer(64 * 4), a = buffer(64 * 4);
  id p = pipeline("add");
  struct {
    unsigned n;
    float scale;
  } params = {64, 1.0f};
  id enc;
  id cb = begin(&enc, p);
  set_buffer(enc, a, 0, 0);
  set_buffer(enc, a, 0, 1);
  set_buffer(enc, out, 0, 2);
  set_bytes(enc, &params, sizeof params, 3);
  dispatch_threads(enc, SZ(64, 1, 1), SZ(32, 1, 1));
  struct sm_test_ctx ctx = {0};
  struct sm_test_block blk = SM_HANDLER_BLOCK(&ctx);
  SEND(void, (id, SEL, void *), cb, "addCompletedHandler:", &blk);
  finish(cb, enc);
  expect_ok(cb);
  sm_release(p);
  sm_release(a);
  sm_release(out);
  objc_autoreleasePoolPop(inner);
  softmetal_quiesce(); /* handlers may run after waitUntilCompleted returns */
  softmetal_stats(&after);
  cr_assert_eq(after.live_objects, before.live_objects, "live objects back where they were");
  cr_assert_eq(after.allocs - before.allocs, after.deallocs - before.deallocs);
  cr_assert_eq(after.retains - before.retains + (after.allocs - before.allocs),
               after.releases - before.releases, "every +1 matched by a release");
  cr_assert_gt(after.retains - before.retains, 0);
  cr_assert_eq(atomic_load(&ctx.calls), 1);
  cr_assert_eq(atomic_load(&ctx.disposes), 1);
}

/* ------------------------------------------------------------- MTLCompileOptions */
/* Math modes: Safe 0, Relaxed 1, Fast 2 (MTLMathMode). */
enum { MathSafe = 0, MathRelaxed = 1, MathFast = 2 };

/* A kernel that relies on IEEE NaN and infinity rules. */
static const char NAN_RULES[] = "#include <metal_stdlib>\n"
                                "using namespace metal;\n"
                                "kernel void nan_rules(device const float *in [[buffer(0)]],\n"
                                "                      device float *out [[buffer(1)]],\n"
                                "                      uint i [[thread_position_in_grid]]) {\n"
                                "  float x = in[i];\n"
                                "  out[4 * i + 0] = isnan(x) ? 1.0f : 0.0f;\n"
                                "  out[4 * i + 1] = isinf(x) ? 1.0f : 0.0f;\n"
                                "  out[4 * i + 2] = x * 2.0f + 1.0f;\n"
                                "  out[4 * i + 3] = x != x ? 1.0f : 0.0f;\n"
                                "}\n";

static id new_options(void) {
  id o = SEND0(id, sm_class_named("MTLCompileOptions"), "alloc");
  return SEND0(id, o, "init");
}
static void set_math_mode(id o, NSInteger mode) {
  SEND(void, (id, SEL, NSInteger), o, "setMathMode:", mode);
}
static NSInteger math_mode(id o) { return SEND0(NSInteger, o, "mathMode"); }
static BOOL fast_math(id o) { return SEND0(BOOL, o, "fastMathEnabled"); }

static id compile_with(const char *src, id options) {
  id error = 0;
  id l = SEND(id, (id, SEL, id, id, id *), dev, "newLibraryWithSource:options:error:", sm_str(src),
              options, &error);
  cr_assert_not_null(l, "%s", sm_error_text(error));
  return l;
}

/* Runs nan_rules of library l on in[0..3] into out[16]. */
static void run_nan_rules(id l, const float in[4], float out[16]) {
  id saved = lib;
  lib = l;
  id a = SEND(id, (id, SEL, const void *, NSUInteger, NSUInteger), dev,
              "newBufferWithBytes:length:options:", in, (NSUInteger)16, 0ul);
  id b = buffer(64);
  id bufs[] = {a, b};
  run_1d("nan_rules", bufs, 2, 4);
  memcpy(out, contents(b), 64);
  sm_release(a);
  sm_release(b);
  lib = saved;
}

static void setup_options(void) {
  dev = MTLCreateSystemDefaultDevice();
  queue = SEND0(id, dev, "newCommandQueue");
  pool = objc_autoreleasePoolPush();
  lib = 0;
}
TestSuite(compile_options, .init = setup_options, .fini = teardown, .timeout = 120);

Test(compile_options, default_to_fast_math_and_keep_both_views) {
  id o = new_options();
  cr_assert(SEND(BOOL, (id, SEL, SEL), o, "respondsToSelector:", sel_registerName("setMathMode:")));
  cr_assert_eq(math_mode(o), MathFast, "Metal's default");
  cr_assert(fast_math(o));
  SEND(void, (id, SEL, BOOL), o, "setFastMathEnabled:", 0);
  cr_assert_eq(math_mode(o), MathSafe);
  cr_assert_not(fast_math(o));
  set_math_mode(o, MathRelaxed);
  cr_assert(fast_math(o), "relaxed still allows unsafe optimisations");
  SEND(void, (id, SEL, BOOL), o, "setFastMathEnabled:", 1);
  cr_assert_eq(math_mode(o), MathFast);
  cr_assert_eq(softmetal_live_count("MTLCompileOptions"), 1);
  sm_release(o);
  cr_assert_eq(softmetal_live_count("MTLCompileOptions"), 0);
}

Test(compile_options, safe_math_keeps_ieee_nan_and_infinity_rules) {
  const float in[4] = {NAN, INFINITY, -INFINITY, 1.5f};
  id by_mode = new_options(), by_flag = new_options();
  set_math_mode(by_mode, MathSafe);
  SEND(void, (id, SEL, BOOL), by_flag, "setFastMathEnabled:", 0);
  id libs[] = {compile_with(NAN_RULES, by_mode), compile_with(NAN_RULES, by_flag)};
  sm_release(by_mode);
  sm_release(by_flag);
  for (int k = 0; k < 2; k++) {
    float out[16];
    run_nan_rules(libs[k], in, out);
    cr_assert_eq(out[0], 1.0f, "isnan(NaN)");
    cr_assert_eq(out[1], 0.0f, "isinf(NaN)");
    cr_assert(isnan(out[2]), "NaN * 2 + 1 is NaN");
    cr_assert_eq(out[3], 1.0f, "NaN != NaN");
    cr_assert_eq(out[4], 0.0f);
    cr_assert_eq(out[5], 1.0f, "isinf(+inf)");
    cr_assert(isinf(out[6]) && out[6] > 0);
    cr_assert_eq(out[9], 1.0f, "isinf(-inf)");
    cr_assert(isinf(out[10]) && out[10] < 0);
    cr_assert_eq(out[11], 0.0f, "-inf == -inf");
    cr_assert_eq(out[12], 0.0f);
    cr_assert_eq(out[13], 0.0f);
    cr_assert_eq(out[14], 4.0f);
    sm_release(libs[k]);
  }
}

/* Pipeline reflection (sm_reflect.c): bindings and arguments from the
 * kernel's parameters, as newComputePipelineStateWithFunction:options:
 * reflection:error: gives them on Metal. */
static const char REFLECTED[] = "#include <metal_stdlib>\nusing namespace metal;\n"
                                "kernel void reflected(device const float *x [[buffer(0)]],\n"
                                "                      device float *y [[buffer(2)]],\n"
                                "                      constant uint &n [[buffer(5)]],\n"
                                "                      threadgroup float *t [[threadgroup(1)]],\n"
                                "                      uint i [[thread_position_in_grid]]) {\n"
                                "  t[0] = 0; if (i < n) y[i] = x[i];\n"
                                "}\n";

Test(compile_options, pipelines_reflect_their_bindings_and_arguments) {
  id l = compile_with(REFLECTED, (id)0);
  id fn = SEND(id, (id, SEL, id), l, "newFunctionWithName:", sm_str("reflected"));
  id error = 0, reflection = 0;
  id p = SEND(id, (id, SEL, id, NSUInteger, id *, id *), dev,
              "newComputePipelineStateWithFunction:options:reflection:error:", fn,
              (NSUInteger)1 /* MTLPipelineOptionArgumentInfo */, &reflection, &error);
  cr_assert_not_null(p, "%s", sm_error_text(error));
  cr_assert_not_null(reflection);
  id bindings = SEND0(id, reflection, "bindings");
  cr_assert_eq(SEND0(NSUInteger, bindings, "count"), 4);
  /* {type, index, access}: Buffer 0, ThreadgroupMemory 1; ReadOnly 0, ReadWrite 1 */
  const long want[4][3] = {{0, 0, 0}, {1, 1, 1}, {0, 2, 1}, {0, 5, 0}};
  for (NSUInteger i = 0; i < 4; i++) {
    id b = SEND(id, (id, SEL, NSUInteger), bindings, "objectAtIndex:", i);
    cr_assert_eq(SEND0(NSInteger, b, "type"), want[i][0], "bindings[%lu].type", i);
    cr_assert_eq(SEND0(NSUInteger, b, "index"), (NSUInteger)want[i][1], "bindings[%lu].index", i);
    cr_assert_eq(SEND0(NSUInteger, b, "access"), (NSUInteger)want[i][2], "bindings[%lu].access", i);
    cr_assert(SEND0(BOOL, b, "isUsed"));
    cr_assert_not_null(SEND0(id, b, "name"));
  }
  id arguments = SEND0(id, reflection, "arguments");
  cr_assert_eq(SEND0(NSUInteger, arguments, "count"), 4);
  id a = SEND(id, (id, SEL, NSUInteger), arguments, "objectAtIndex:", (NSUInteger)2);
  cr_assert_eq(SEND0(NSUInteger, a, "type"), 0);
  cr_assert_eq(SEND0(NSUInteger, a, "index"), 2);
  cr_assert(SEND0(BOOL, a, "isActive"));
  /* Without MTLPipelineOptionArgumentInfo the reflection is empty. */
  id p2 = SEND(id, (id, SEL, id, NSUInteger, id *, id *), dev,
               "newComputePipelineStateWithFunction:options:reflection:error:", fn, (NSUInteger)0,
               &reflection, &error);
  cr_assert_eq(SEND0(NSUInteger, SEND0(id, reflection, "bindings"), "count"), 0);
  sm_release(p2);
  sm_release(p);
  sm_release(fn);
  sm_release(l);
}

/* mathFloatingPointFunctions (macOS 15): Fast by default, whatever the math
 * mode, so safe math alone gives the fast exp and log; Precise gives libm's.
 * fast:: is fast and precise:: precise in every setting. */
static const char FP_FUNCTIONS[] =
    "#include <metal_stdlib>\nusing namespace metal;\n"
    "kernel void fp_functions(device const float *in [[buffer(0)]],\n"
    "                         device float *out [[buffer(1)]],\n"
    "                         uint i [[thread_position_in_grid]]) {\n"
    "  out[4 * i + 0] = exp(in[i]);\n"
    "  out[4 * i + 1] = log(in[i]);\n"
    "  out[4 * i + 2] = fast::exp(in[i]);\n"
    "  out[4 * i + 3] = precise::exp(in[i]);\n"
    "}\n";

static void run_fp_functions(id l, const float in[4], float out[16]) {
  id saved = lib;
  lib = l;
  id a = SEND(id, (id, SEL, const void *, NSUInteger, NSUInteger), dev,
              "newBufferWithBytes:length:options:", in, (NSUInteger)16, 0ul);
  id b = buffer(64);
  id bufs[] = {a, b};
  run_1d("fp_functions", bufs, 2, 4);
  memcpy(out, contents(b), 64);
  sm_release(a);
  sm_release(b);
  lib = saved;
}

Test(compile_options, math_functions_are_fast_by_default_and_precise_when_asked) {
  id o = new_options();
  cr_assert_eq(SEND0(NSInteger, o, "mathFloatingPointFunctions"), 0, "Fast is the default");
  set_math_mode(o, MathSafe);
  cr_assert_eq(SEND0(NSInteger, o, "mathFloatingPointFunctions"), 0,
               "mathMode leaves the functions alone");
  const float in[4] = {80.5f, 60.25f, 30.125f, 85.0f};
  float fast[16], precise[16];
  id l = compile_with(FP_FUNCTIONS, o);
  run_fp_functions(l, in, fast);
  sm_release(l);
  SEND(void, (id, SEL, NSInteger), o, "setMathFloatingPointFunctions:", (NSInteger)1);
  l = compile_with(FP_FUNCTIONS, o);
  run_fp_functions(l, in, precise);
  sm_release(l);
  sm_release(o);
  bool differ = false;
  for (int i = 0; i < 4; i++) {
    cr_assert_eq(precise[4 * i], expf(in[i]), "precise exp(%g) = %a", in[i], precise[4 * i]);
    cr_assert_eq(precise[4 * i + 1], logf(in[i]), "precise log(%g)", in[i]);
    cr_assert_eq(precise[4 * i + 3], expf(in[i]), "precise::exp");
    cr_assert_eq(fast[4 * i + 3], expf(in[i]), "precise::exp under fast functions");
    cr_assert_eq(fast[4 * i + 2], fast[4 * i], "fast::exp is the fast exp");
    cr_assert_eq(precise[4 * i + 2], fast[4 * i], "fast::exp under precise functions");
    /* the fast exp is close, not exact: within 2^-12 relative here */
    cr_assert(fabsf(fast[4 * i] - expf(in[i])) <= expf(in[i]) * 0x1p-12f, "fast exp(%g)", in[i]);
    differ = differ || fast[4 * i] != expf(in[i]);
  }
  cr_assert(differ, "the fast exp differs from the precise one for large |x|");
}

/* Fast math may fold isnan() and NaN checks away; only finite inputs have
 * a result both modes guarantee. The cache keeps one library per mode. */
Test(compile_options, math_modes_compile_to_separate_cached_libraries) {
  char src[sizeof NAN_RULES + 64];
  snprintf(src, sizeof src, "// %d %ld\n%s", (int)getpid(), (long)time(NULL), NAN_RULES);
  struct softmetal_stats s0, s1;
  id safe = new_options(), fast = new_options(), relaxed = new_options();
  set_math_mode(safe, MathSafe);
  set_math_mode(fast, MathFast);
  set_math_mode(relaxed, MathRelaxed);
  id opts[] = {safe, safe, 0, fast, relaxed};
  const long want_compiles[] = {1, 0, 1, 0, 1}; /* nil means fast */
  const long want_unsafe[] = {0, 0, 1, 1, 1};
  for (int k = 0; k < 5; k++) {
    softmetal_stats(&s0);
    id l = compile_with(src, opts[k]);
    softmetal_stats(&s1);
    cr_assert_eq(s1.kernel_compiles - s0.kernel_compiles, want_compiles[k], "library %d", k);
    cr_assert_eq(s1.kernel_cache_hits - s0.kernel_cache_hits, 1 - want_compiles[k]);
    cr_assert_eq(s1.unsafe_math_libraries - s0.unsafe_math_libraries, want_unsafe[k]);
    const float in[4] = {1.5f, -2.0f, 0.0f, 100.0f};
    float out[16];
    run_nan_rules(l, in, out);
    for (int i = 0; i < 4; i++) {
      cr_assert_eq(out[4 * i + 0], 0.0f, "library %d: isnan(%g)", k, in[i]);
      cr_assert_eq(out[4 * i + 1], 0.0f);
      cr_assert_eq(out[4 * i + 2], in[i] * 2.0f + 1.0f);
      cr_assert_eq(out[4 * i + 3], 0.0f);
    }
    sm_release(l);
  }
  sm_release(safe);
  sm_release(fast);
  sm_release(relaxed);
}

static id volatile keep; /* reachable when a test aborts on purpose */

Test(compile_options, an_invalid_math_mode_aborts, .signal = SIGABRT) {
  keep = new_options();
  set_math_mode(keep, 3);
}

Test(compile_options, options_of_another_class_abort, .signal = SIGABRT) {
  keep = compile_with(NAN_RULES, sm_str("not options"));
}

Test(compile_options, options_without_init_abort, .signal = SIGABRT) {
  keep = SEND0(id, sm_class_named("MTLCompileOptions"), "alloc");
  compile_with(NAN_RULES, keep);
}
