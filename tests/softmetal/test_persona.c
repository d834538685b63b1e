/* SPDX-License-Identifier: MIT */
/* softmetal's personas (SOFTMETAL_PERSONA). ctest runs this suite three
 * times, with the variable unset, paravirtual and amd-discrete; each test
 * takes what to expect from the variable itself, never from softmetal. */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "softmetal/sm_run.h"

enum { APPLE, PARAVIRTUAL, AMD };
static int persona(void) {
  const char *v = getenv("SOFTMETAL_PERSONA");
  if (v && strcmp(v, "paravirtual") == 0) return PARAVIRTUAL;
  if (v && strcmp(v, "amd-discrete") == 0) return AMD;
  return APPLE;
}
static unsigned width(void) { return persona() == AMD ? 64u : 32u; }

static void init(void) { sm_run_open(); }
static void fini(void) { sm_run_close(); }
TestSuite(persona, .init = init, .fini = fini);

static BOOL family(NSInteger f) {
  return SEND(BOOL, (id, SEL, NSInteger), sm_dev, "supportsFamily:", f);
}

Test(persona, the_device_answers_as_that_kind_of_mac) {
  static const char *const names[] = {"apple-silicon", "paravirtual", "amd-discrete"};
  cr_assert_str_eq(softmetal_persona(), names[persona()]);
  const char *name = sm_utf8(SEND0(id, sm_dev, "name"));
  NSUInteger tg_mem = sm_u(sm_dev, "maxThreadgroupMemoryLength");
  BOOL unified = SEND0(BOOL, sm_dev, "hasUnifiedMemory");
  MTLSize max = SEND0(MTLSize, sm_dev, "maxThreadsPerThreadgroup");
  cr_assert_eq(max.width, 1024);
  cr_assert_eq(SEND0(BOOL, sm_dev, "isLowPower"), 0);
  cr_assert_eq(SEND0(BOOL, sm_dev, "isRemovable"), 0);
  /* MTLGPUFamily: Apple1 1001 .. Apple9 1009, Mac1 2001, Mac2 2002,
   * Common1..3 3001..3003, Metal3 5001 */
  switch (persona()) {
  case APPLE:
    cr_assert(strstr(name, "softmetal"), "%s", name);
    cr_assert(unified);
    cr_assert_eq(tg_mem, 32768);
    cr_assert(family(1007) && family(1009) && family(2002) && family(5001) && family(3003));
    break;
  case PARAVIRTUAL:
    cr_assert_str_eq(name, "Apple Paravirtual device");
    cr_assert(unified);
    cr_assert_eq(tg_mem, 32768);
    cr_assert(family(1001) && family(1005) && family(3001) && family(3003));
    cr_assert(!family(1006) && !family(1007) && !family(2002) && !family(5001));
    break;
  default:
    cr_assert_str_eq(name, "AMD Radeon Pro 5500M");
    cr_assert(!unified, "a discrete GPU has its own memory");
    cr_assert_eq(tg_mem, 65536);
    cr_assert(family(2002) && family(5001) && family(3003));
    cr_assert(!family(1001) && !family(1007));
    break;
  }
}

/* Paravirtual: one GPU, whatever SOFTMETAL_DEVICE_COUNT asks for. */
Test(persona, paravirtual_has_one_device) {
  setenv("SOFTMETAL_DEVICE_COUNT", "3", 1);
  id all = MTLCopyAllDevices();
  NSUInteger n = sm_u(all, "count");
  sm_release(all);
  unsetenv("SOFTMETAL_DEVICE_COUNT");
  cr_assert_eq(n, persona() == PARAVIRTUAL ? 1u : 3u);
}

/* Managed storage is what a discrete GPU needs: the GPU copy only takes the
 * host's bytes after didModifyRange:. */
Test(persona, managed_buffers_work_on_every_persona) {
  id b = SEND(id, (id, SEL, NSUInteger, NSUInteger), sm_dev, "newBufferWithLength:options:", 64ul,
              0x10ul /* StorageModeManaged */);
  cr_assert_not_null(b);
  cr_assert_eq(sm_u(b, "storageMode"), 1);
  SEND(void, (id, SEL, NSRange), b, "didModifyRange:", ((NSRange){0, 64}));
  sm_release(b);
}

/* Heaps: private on every Mac; shared only on Apple GPUs (Apple's
 * MTLHeapDescriptor.storageMode), nil elsewhere. */
static id heap_of(NSUInteger storage) {
  id fresh = SEND0(id, sm_class_named("MTLHeapDescriptor"), "alloc"); /* SEND0 evaluates */
  id hd = SEND0(id, fresh, "init");                                   /* its receiver twice */
  SEND(void, (id, SEL, NSUInteger), hd, "setSize:", 1ul << 16);
  SEND(void, (id, SEL, NSUInteger), hd, "setStorageMode:", storage);
  id heap = SEND(id, (id, SEL, id), sm_dev, "newHeapWithDescriptor:", hd);
  sm_release(hd);
  return heap;
}
Test(persona, shared_heaps_only_on_apple_gpus) {
  id priv = heap_of(2);
  cr_assert_not_null(priv, "private heaps on every persona");
  sm_release(priv);
  id shared = heap_of(0);
  if (persona() == AMD) {
    cr_assert_null(shared, "a Mac without Apple silicon makes no shared heap");
  } else {
    cr_assert_not_null(shared);
    sm_release(shared);
  }
}

/* SIMD-group indices and widths without SIMD-group functions: every persona
 * has them. */
static const char ATTRS[] =
    "#include <metal_stdlib>\n"
    "using namespace metal;\n"
    "kernel void attrs(device uint *o [[buffer(0)]], uint i [[thread_index_in_threadgroup]],\n"
    "                  uint w [[threads_per_simdgroup]], uint l [[thread_index_in_simdgroup]],\n"
    "                  uint s [[simdgroup_index_in_threadgroup]],\n"
    "                  uint n [[simdgroups_per_threadgroup]],\n"
    "                  uint e [[thread_execution_width]]) {\n"
    "  o[4 * i] = w; o[4 * i + 1] = l; o[4 * i + 2] = s; o[4 * i + 3] = n + 1000 * e;\n"
    "}\n"
    "kernel void quads(device uint *o [[buffer(0)]], uint i [[thread_position_in_grid]]) {\n"
    "  o[i] = quad_sum(i);\n"
    "}\n"
    "kernel void sums(device uint *o [[buffer(0)]], uint i [[thread_index_in_threadgroup]]) {\n"
    "  o[4 * i] = simd_sum(1u);\n"
    "  o[4 * i + 1] = simd_prefix_exclusive_sum(1u);\n"
    "  o[4 * i + 2] = uint(ulong(simd_ballot(true)) >> 32);\n"
    "  o[4 * i + 3] = simd_vote(simd_ballot(true)).all() ? 1u : 0u;\n"
    "}\n"
    "kernel void shuffles(device uint *o [[buffer(0)]], uint i [[thread_index_in_threadgroup]]) {\n"
    "  o[i] = simd_shuffle_xor(i, 32u);\n"
    "}\n"
    "kernel void all_meet(device uint *o [[buffer(0)]], uint i [[thread_position_in_grid]]) {\n"
    "  threadgroup_barrier(mem_flags::mem_device);\n"
    "  o[i] = i + 1;\n"
    "}\n"
    "kernel void early_return(device uint *o [[buffer(0)]], uint i [[thread_position_in_grid]]) {\n"
    "  if (i >= 16) return;\n"
    "  threadgroup_barrier(mem_flags::mem_device);\n"
    "  o[i] = i + 1;\n"
    "}\n"
    "kernel void matrices(device float *o [[buffer(0)]]) {\n"
    "  simdgroup_float8x8 m = make_filled_simdgroup_matrix<float, 8>(2.0f);\n"
    "  simdgroup_store(m, o);\n"
    "}\n";

static id library(void) {
  id error = 0;
  id lib = sm_compile(ATTRS, &error);
  cr_assert_not_null(lib, "%s", sm_error_text(error));
  return lib;
}

/* The pipeline of kernel, or NULL with its error's text in *why. */
static id try_pipeline(id lib, const char *kernel, char *why, size_t len) {
  id fn = SEND(id, (id, SEL, id), lib, "newFunctionWithName:", sm_str(kernel));
  cr_assert_not_null(fn);
  id error = 0;
  id p = SEND(id, (id, SEL, id, id *), sm_dev, "newComputePipelineStateWithFunction:error:", fn,
              &error);
  snprintf(why, len, "%s", p ? "" : sm_error_text(error));
  sm_release(fn);
  return p;
}

Test(persona, simdgroups_are_as_wide_as_the_device_says) {
  id lib = library();
  id p = sm_pipeline(lib, "attrs");
  cr_assert_eq(sm_u(p, "threadExecutionWidth"), width());
  enum { N = 192 };
  id out = sm_buffer(NULL, 4 * N * 4);
  id bufs[] = {out};
  sm_dispatch_pipeline(p, "attrs", bufs, 1, SM_SIZE(N, 1, 1), SM_SIZE(N, 1, 1), false, 0);
  const unsigned *o = sm_contents(out), w = width();
  for (unsigned i = 0; i < N; i++) {
    cr_assert_eq(o[4 * i], w, "threads_per_simdgroup [%u]", i);
    cr_assert_eq(o[4 * i + 1], i % w, "thread_index_in_simdgroup [%u]", i);
    cr_assert_eq(o[4 * i + 2], i / w, "simdgroup_index_in_threadgroup [%u]", i);
    cr_assert_eq(o[4 * i + 3], (N + w - 1) / w + 1000 * w, "simdgroups, width [%u]", i);
  }
  sm_release(out);
  sm_release(lib);
}

/* A barrier that returned threads skip: Apple GPUs release it once the
 * threads still running arrive (MSL, threadgroup_barrier on Apple silicon);
 * elsewhere it is undefined, and softmetal fails the command buffer. */
Test(persona, returned_threads_release_a_barrier_only_on_apple_gpus) {
  id lib = library();
  { /* every persona: a barrier that every thread reaches */
    id all = sm_buffer(NULL, 64 * 4);
    id bufs[] = {all};
    sm_dispatch(lib, "all_meet", bufs, 1, SM_SIZE(64, 1, 1), SM_SIZE(64, 1, 1), false, 0);
    for (unsigned i = 0; i < 64; i++) cr_assert_eq(((unsigned *)sm_contents(all))[i], i + 1);
    sm_release(all);
  }
  id p = sm_pipeline(lib, "early_return");
  id out = sm_buffer(NULL, 64 * 4);
  memset(sm_contents(out), 0, 64 * 4);
  id cb = SEND0(id, sm_queue, "commandBuffer");
  id enc = SEND0(id, cb, "computeCommandEncoder");
  SEND(void, (id, SEL, id), enc, "setComputePipelineState:", p);
  SEND(void, (id, SEL, id, NSUInteger, NSUInteger), enc, "setBuffer:offset:atIndex:", out, 0ul,
       0ul);
  SEND(void, (id, SEL, MTLSize, MTLSize), enc,
       "dispatchThreads:threadsPerThreadgroup:", SM_SIZE(64, 1, 1), SM_SIZE(64, 1, 1));
  SEND0(void, enc, "endEncoding");
  SEND0(void, cb, "commit");
  SEND0(void, cb, "waitUntilCompleted");
  const char *why = sm_error_text(SEND0(id, cb, "error"));
  if (persona() == AMD) {
    cr_assert_eq(sm_u(cb, "status"), 5 /* Error */);
    cr_assert(strstr(why, "divergent") && strstr(why, "only on Apple GPUs"), "%s", why);
  } else {
    cr_assert_eq(sm_u(cb, "status"), 4 /* Completed */, "%s", why);
    for (unsigned i = 0; i < 16; i++) cr_assert_eq(((unsigned *)sm_contents(out))[i], i + 1);
  }
  sm_release(out);
  sm_release(p);
  sm_release(lib);
}

/* Quad functions are Apple4 and later, Mac2: every persona runs them. */
Test(persona, quad_functions_run_everywhere) {
  id lib = library();
  id out = sm_buffer(NULL, 64 * 4);
  id bufs[] = {out};
  sm_dispatch(lib, "quads", bufs, 1, SM_SIZE(64, 1, 1), SM_SIZE(64, 1, 1), false, 0);
  const unsigned *o = sm_contents(out);
  for (unsigned i = 0; i < 64; i++) {
    unsigned q = i & ~3u;
    cr_assert_eq(o[i], 4 * q + 6, "[%u]", i);
  }
  sm_release(out);
  sm_release(lib);
}

/* SIMD-group reductions, prefix sums and votes over real 32- or 64-lane
 * groups; on the paravirtual device (Apple5) the pipeline fails naming the
 * feature, and a kernel of the same library without it still builds. */
Test(persona, simd_reductions_follow_the_width_or_are_refused) {
  id lib = library();
  char why[1024];
  id p = try_pipeline(lib, "sums", why, sizeof why);
  if (persona() == PARAVIRTUAL) {
    cr_assert_null(p);
    cr_assert(strstr(why, "SIMD-group reduction") && strstr(why, "'sums'") &&
                  strstr(why, "Apple Paravirtual device"),
              "%s", why);
    sm_release(lib);
    return;
  }
  cr_assert_not_null(p, "%s", why);
  enum { N = 128 };
  id out = sm_buffer(NULL, 4 * N * 4);
  id bufs[] = {out};
  sm_dispatch_pipeline(p, "sums", bufs, 1, SM_SIZE(N, 1, 1), SM_SIZE(N, 1, 1), false, 0);
  const unsigned *o = sm_contents(out), w = width();
  for (unsigned i = 0; i < N; i++) {
    cr_assert_eq(o[4 * i], w, "simd_sum(1) [%u]", i);
    cr_assert_eq(o[4 * i + 1], i % w, "simd_prefix_exclusive_sum(1) [%u]", i);
    cr_assert_eq(o[4 * i + 2], w == 64 ? 0xFFFFFFFFu : 0u, "ballot's upper lanes [%u]", i);
    cr_assert_eq(o[4 * i + 3], 1u, "all() [%u]", i);
  }
  sm_release(out);
  sm_release(lib);
}

Test(persona, simd_shuffles_reach_lanes_of_the_width_or_are_refused) {
  id lib = library();
  char why[1024];
  id p = try_pipeline(lib, "shuffles", why, sizeof why);
  if (persona() == PARAVIRTUAL) {
    cr_assert_null(p);
    cr_assert(strstr(why, "SIMD-group permute") && strstr(why, "'shuffles'"), "%s", why);
    sm_release(lib);
    return;
  }
  cr_assert_not_null(p, "%s", why);
  enum { N = 128 };
  id out = sm_buffer(NULL, N * 4);
  id bufs[] = {out};
  if (persona() == AMD) { /* lane ^ 32 is in the same 64-lane group */
    sm_dispatch_pipeline(p, "shuffles", bufs, 1, SM_SIZE(N, 1, 1), SM_SIZE(N, 1, 1), false, 0);
    const unsigned *o = sm_contents(out);
    for (unsigned i = 0; i < N; i++) cr_assert_eq(o[i], i ^ 32u, "[%u]", i);
  } else { /* a mask beyond 32 lanes reads no lane: the command buffer fails */
    id cb = SEND0(id, sm_queue, "commandBuffer");
    id enc = SEND0(id, cb, "computeCommandEncoder");
    SEND(void, (id, SEL, id), enc, "setComputePipelineState:", p);
    SEND(void, (id, SEL, id, NSUInteger, NSUInteger), enc, "setBuffer:offset:atIndex:", out, 0ul,
         0ul);
    SEND(void, (id, SEL, MTLSize, MTLSize), enc,
         "dispatchThreads:threadsPerThreadgroup:", SM_SIZE(N, 1, 1), SM_SIZE(N, 1, 1));
    SEND0(void, enc, "endEncoding");
    SEND0(void, cb, "commit");
    SEND0(void, cb, "waitUntilCompleted");
    cr_assert_eq(sm_u(cb, "status"), 5 /* Error */);
    sm_release(p);
  }
  sm_release(out);
  sm_release(lib);
}

/* SIMD-group matrices are Apple7 and later only. */
Test(persona, simdgroup_matrices_need_apple7) {
  id lib = library();
  char why[1024];
  id p = try_pipeline(lib, "matrices", why, sizeof why);
  if (persona() == APPLE) {
    cr_assert_not_null(p, "%s", why);
    sm_release(p);
  } else {
    cr_assert_null(p);
    cr_assert(strstr(why, "SIMD-group matrices") && strstr(why, "'matrices'"), "%s", why);
  }
  sm_release(lib);
}

static void exec_with_unknown_persona(void *unused) {
  (void)unused;
  setenv("SOFTMETAL_PERSONA", "intel-igpu", 1);
  execl(SOFTMETAL_METALLIB, SOFTMETAL_METALLIB, "--help", (char *)NULL);
  _exit(127);
}

/* An unknown persona stops the program when softmetal loads, naming the
 * variable and the value (softmetal-metallib loads libsoftmetal). */
Test(persona, an_unknown_persona_aborts_naming_it) {
  /* tools/ci/qemu/run.sh sets CMETAL_QEMU: an aarch64 program cannot exec another */
  if (getenv("CMETAL_QEMU") != NULL) cr_skip_test("the tool would run as a host program");
  char text[4096];
  sm_expect_abort(exec_with_unknown_persona, NULL, text, sizeof text);
  cr_assert(strstr(text, "SOFTMETAL_PERSONA = 'intel-igpu'"), "%s", text);
}
