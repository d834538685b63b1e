/* SPDX-License-Identifier: MIT */
/* A host program in the style of ggml's Metal backend: every tensor in one
 * NoCopy MTLBuffer aligned to the page size the process sees, concurrent
 * dispatches (MTLDispatchTypeConcurrent) with barriers placed by byte range,
 * and a kernel that declares [[threadgroup(0)]], does not use it and gets
 * setThreadgroupMemoryLength:0. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "softmetal/sm_test.h"

enum { Completed = 4, Error = 5 };
enum { N = 256 };                    /* floats per tensor */
enum { TENSOR = N * sizeof(float) }; /* bytes per tensor, their offsets' step */

static const char *const KERNELS =
    "#include <metal_stdlib>\n"
    "using namespace metal;\n"
    "kernel void scale(device const float *src [[buffer(0)]],\n"
    "                  device float *dst [[buffer(1)]],\n"
    "                  constant float &k [[buffer(2)]],\n"
    "                  threadgroup float *unused [[threadgroup(0)]],\n"
    "                  uint i [[thread_position_in_grid]]) {\n"
    "  dst[i] = src[i] * k;\n"
    "}\n";

static id dev, queue, lib, pso, buf;
static float *mem;
static void *pool;

static void setup(void) {
  dev = MTLCreateSystemDefaultDevice();
  queue = SEND0(id, dev, "newCommandQueue");
  pool = objc_autoreleasePoolPush();
  id error = 0;
  lib = SEND(id, (id, SEL, id, id, id *), dev,
             "newLibraryWithSource:options:error:", sm_str(KERNELS), (id)0, &error);
  cr_assert_not_null(lib, "%s", sm_error_text(error));
  id fn = SEND(id, (id, SEL, id), lib, "newFunctionWithName:", sm_str("scale"));
  pso =
      SEND(id, (id, SEL, id, id *), dev, "newComputePipelineStateWithFunction:error:", fn, &error);
  cr_assert_not_null(pso, "%s", sm_error_text(error));
  sm_release(fn);
  /* ggml: posix_memalign(sysconf(_SC_PAGESIZE)), the size rounded up to it */
  size_t page = (size_t)sysconf(_SC_PAGESIZE), want = 6 * TENSOR;
  size_t len = (want + page - 1) / page * page;
  cr_assert_eq(posix_memalign((void **)&mem, page, len), 0);
  memset(mem, 0, len);
  for (int i = 0; i < N; i++) mem[i] = (float)i;
  buf = SEND(id, (id, SEL, void *, NSUInteger, NSUInteger, void *), dev,
             "newBufferWithBytesNoCopy:length:options:deallocator:", mem, (NSUInteger)len, 0ul,
             (void *)0);
  cr_assert_not_null(buf, "NoCopy refused %zu bytes at a %zu-byte page (see stderr)", len, page);
}
static void teardown(void) {
  sm_release(buf);
  free(mem);
  sm_release(pso);
  sm_release(lib);
  objc_autoreleasePoolPop(pool);
  sm_release(queue);
  sm_release(dev);
  softmetal_quiesce();
  sm_check_all_released(__FILE__);
}
TestSuite(one_buffer, .init = setup, .fini = teardown);

static id concurrent(id cb) {
  return SEND(id, (id, SEL, NSUInteger), cb, "computeCommandEncoderWithDispatchType:", 1ul);
}
/* tensor[dst] = tensor[src] * k, as ggml encodes an op: buffer, offset per tensor. */
static void op(id enc, unsigned src, unsigned dst, float k) {
  SEND(void, (id, SEL, id), enc, "setComputePipelineState:", pso);
  SEND(void, (id, SEL, id, NSUInteger, NSUInteger), enc, "setBuffer:offset:atIndex:", buf,
       (NSUInteger)src *TENSOR, 0ul);
  SEND(void, (id, SEL, id, NSUInteger, NSUInteger), enc, "setBuffer:offset:atIndex:", buf,
       (NSUInteger)dst *TENSOR, 1ul);
  SEND(void, (id, SEL, const void *, NSUInteger, NSUInteger), enc, "setBytes:length:atIndex:", &k,
       (NSUInteger)sizeof k, 2ul);
  SEND(void, (id, SEL, NSUInteger, NSUInteger), enc, "setThreadgroupMemoryLength:atIndex:", 0ul,
       0ul);
  SEND(void, (id, SEL, MTLSize, MTLSize), enc,
       "dispatchThreads:threadsPerThreadgroup:", ((MTLSize){N, 1, 1}), ((MTLSize){64, 1, 1}));
}
static void barrier(id enc) {
  SEND(void, (id, SEL, NSUInteger), enc, "memoryBarrierWithScope:", 1ul /* Buffers */);
}
static NSUInteger run(id cb, id enc) {
  SEND0(void, enc, "endEncoding");
  SEND0(void, cb, "commit");
  SEND0(void, cb, "waitUntilCompleted");
  return SEND0(NSUInteger, cb, "status");
}
static const char *error_of(id cb) { return sm_error_text(SEND0(id, cb, "error")); }
static float at(unsigned tensor, int i) { return mem[tensor * N + i]; }

Test(one_buffer, an_unused_threadgroup_argument_takes_length_zero) {
  id cb = SEND0(id, queue, "commandBuffer");
  id enc = SEND0(id, cb, "computeCommandEncoder");
  op(enc, 0, 1, 3.0f);
  cr_assert_eq(run(cb, enc), Completed, "%s", error_of(cb));
  cr_assert_eq(at(1, N - 1), 3.0f * (N - 1));

  cb = SEND0(id, queue, "commandBuffer"); /* never set at all: still refused */
  enc = SEND0(id, cb, "computeCommandEncoder");
  SEND(void, (id, SEL, id), enc, "setComputePipelineState:", pso);
  for (NSUInteger k = 0; k < 3; k++)
    SEND(void, (id, SEL, id, NSUInteger, NSUInteger), enc, "setBuffer:offset:atIndex:", buf, 0ul,
         k);
  SEND(void, (id, SEL, MTLSize, MTLSize), enc,
       "dispatchThreads:threadsPerThreadgroup:", ((MTLSize){N, 1, 1}), ((MTLSize){64, 1, 1}));
  cr_assert_eq(run(cb, enc), Error);
  cr_assert(strstr(error_of(cb), "[[threadgroup(0)]] but its length was not set"), "%s",
            error_of(cb));
}

Test(one_buffer, concurrent_dispatches_on_disjoint_tensors_need_no_barrier) {
  id cb = SEND0(id, queue, "commandBuffer");
  id enc = concurrent(cb);
  op(enc, 0, 1, 2.0f); /* t1 = 2 t0 */
  op(enc, 0, 2, 3.0f); /* t2 = 3 t0: reads t0 too, writes elsewhere */
  op(enc, 5, 3, 1.0f); /* t3 = t5: an unrelated tensor above them all */
  barrier(enc);        /* t4 reads t1 and t2's results: a barrier, as ggml places it */
  op(enc, 1, 4, 5.0f);
  op(enc, 2, 5, 7.0f); /* t5 was read before the barrier */
  cr_assert_eq(run(cb, enc), Completed, "%s", error_of(cb));
  for (int i = 0; i < N; i++) {
    cr_assert_eq(at(4, i), 10.0f * (float)i);
    cr_assert_eq(at(5, i), 21.0f * (float)i);
  }
}

Test(one_buffer, a_missing_barrier_between_tensors_of_one_buffer_is_reported) {
  id cb = SEND0(id, queue, "commandBuffer");
  id enc = concurrent(cb);
  op(enc, 0, 1, 2.0f);
  op(enc, 0, 2, 3.0f);
  op(enc, 1, 4, 5.0f); /* reads t1, which dispatch 1 writes: no barrier between */
  cr_assert_eq(run(cb, enc), Error);
  const char *msg = error_of(cb);
  cr_assert(strstr(msg, "dispatch 3 (kernel scale) reads buffer"), "%s", msg);
  cr_assert(strstr(msg, "(offset 1024) at [[buffer(0)]], which dispatch 1 (kernel scale) writes"),
            "%s", msg);

  cb = SEND0(id, queue, "commandBuffer"); /* writing what an earlier one reads */
  enc = concurrent(cb);
  op(enc, 0, 1, 2.0f);
  op(enc, 2, 0, 2.0f);
  cr_assert_eq(run(cb, enc), Error);
  cr_assert(strstr(error_of(cb), "dispatch 2 (kernel scale) writes buffer"), "%s", error_of(cb));

  cb = SEND0(id, queue, "commandBuffer"); /* a barrier naming the buffer orders them */
  enc = concurrent(cb);
  op(enc, 0, 1, 2.0f);
  SEND(void, (id, SEL, const id *, NSUInteger), enc, "memoryBarrierWithResources:count:", &buf,
       1ul);
  op(enc, 1, 4, 5.0f);
  cr_assert_eq(run(cb, enc), Completed, "%s", error_of(cb));
  cr_assert_eq(at(4, N - 1), 10.0f * (N - 1));
}
