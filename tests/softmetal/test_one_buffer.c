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
    "}\n"
    /* the same with a writable source it only reads, as many kernels declare */
    "kernel void add(device const float *a [[buffer(0)]], device const float *b [[buffer(3)]],\n"
    "                device float *dst [[buffer(1)]], uint i [[thread_position_in_grid]]) {\n"
    "  dst[i] = a[i] + b[i];\n"
    "}\n"
    "kernel void scale_below(device const float *src [[buffer(0)]],\n"
    "                        device float *dst [[buffer(1)]], constant float &k [[buffer(2)]],\n"
    "                        uint i [[thread_position_in_grid]]) {\n"
    "  dst[i] = src[int(i) - 64] * k;\n"
    "}\n"
    "kernel void scale_rw(device float *src [[buffer(0)]], device float *dst [[buffer(1)]],\n"
    "                     constant float &k [[buffer(2)]],\n"
    "                     uint i [[thread_position_in_grid]]) {\n"
    "  dst[i] = src[i] * k;\n"
    "}\n";

static id dev, queue, lib, pso, pso_rw, pso_add, pso_neg, buf;
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
  fn = SEND(id, (id, SEL, id), lib, "newFunctionWithName:", sm_str("scale_rw"));
  pso_rw =
      SEND(id, (id, SEL, id, id *), dev, "newComputePipelineStateWithFunction:error:", fn, &error);
  cr_assert_not_null(pso_rw, "%s", sm_error_text(error));
  sm_release(fn);
  fn = SEND(id, (id, SEL, id), lib, "newFunctionWithName:", sm_str("scale_below"));
  pso_neg =
      SEND(id, (id, SEL, id, id *), dev, "newComputePipelineStateWithFunction:error:", fn, &error);
  cr_assert_not_null(pso_neg, "%s", sm_error_text(error));
  sm_release(fn);
  fn = SEND(id, (id, SEL, id), lib, "newFunctionWithName:", sm_str("add"));
  pso_add =
      SEND(id, (id, SEL, id, id *), dev, "newComputePipelineStateWithFunction:error:", fn, &error);
  cr_assert_not_null(pso_add, "%s", sm_error_text(error));
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
  sm_release(pso_rw);
  sm_release(pso_add);
  sm_release(pso_neg);
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
/* count floats from byte src to byte dst, times k: a view, as ggml binds
 * one (buffer, offset of its first byte). */
static void view_op(id enc, id p, NSUInteger src, NSUInteger dst, NSUInteger count, float k) {
  SEND(void, (id, SEL, id), enc, "setComputePipelineState:", p);
  SEND(void, (id, SEL, id, NSUInteger, NSUInteger), enc, "setBuffer:offset:atIndex:", buf, src,
       0ul);
  SEND(void, (id, SEL, id, NSUInteger, NSUInteger), enc, "setBuffer:offset:atIndex:", buf, dst,
       1ul);
  SEND(void, (id, SEL, const void *, NSUInteger, NSUInteger), enc, "setBytes:length:atIndex:", &k,
       (NSUInteger)sizeof k, 2ul);
  SEND(void, (id, SEL, NSUInteger, NSUInteger), enc, "setThreadgroupMemoryLength:atIndex:", 0ul,
       0ul);
  SEND(void, (id, SEL, MTLSize, MTLSize), enc,
       "dispatchThreads:threadsPerThreadgroup:", ((MTLSize){count, 1, 1}), ((MTLSize){64, 1, 1}));
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
/* t0[i] = i again: a failed command buffer ran its commands up to the race. */
static void reset(void) {
  for (int i = 0; i < N; i++) mem[i] = (float)i;
}

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
  cr_assert(strstr(msg, "concurrent dispatch hazard"), "%s", msg);
  cr_assert(strstr(msg, "dispatch 3 (kernel scale) reads buffer"), "%s", msg);
  cr_assert(strstr(msg, "at bytes [1024, 2048), which dispatch 1 (kernel scale) writes at bytes "
                        "[1024, 2048)"),
            "%s", msg);

  cb = SEND0(id, queue, "commandBuffer"); /* writing what an earlier one reads */
  enc = concurrent(cb);
  op(enc, 0, 1, 2.0f);
  op(enc, 2, 0, 2.0f);
  cr_assert_eq(run(cb, enc), Error);
  cr_assert(strstr(error_of(cb), "dispatch 2 (kernel scale) writes buffer"), "%s", error_of(cb));

  reset();
  cb = SEND0(id, queue, "commandBuffer"); /* a barrier naming the buffer orders them */
  enc = concurrent(cb);
  op(enc, 0, 1, 2.0f);
  SEND(void, (id, SEL, const id *, NSUInteger), enc, "memoryBarrierWithResources:count:", &buf,
       1ul);
  op(enc, 1, 4, 5.0f);
  cr_assert_eq(run(cb, enc), Completed, "%s", error_of(cb));
  cr_assert_eq(at(4, N - 1), 10.0f * (N - 1));
}

/* Ranges that overlap without starting at the same offset: a view into the
 * middle of a tensor that a concurrent dispatch writes. */
Test(one_buffer, overlapping_ranges_at_different_offsets_need_a_barrier) {
  id cb = SEND0(id, queue, "commandBuffer");
  id enc = concurrent(cb);
  view_op(enc, pso, 0, 2 * TENSOR, 2 * N, 2.0f);      /* writes bytes [2048, 4096) */
  view_op(enc, pso, 3 * TENSOR, 5 * TENSOR, N, 1.0f); /* reads [3072, 4096), bound at 3072 */
  cr_assert_eq(run(cb, enc), Error);
  const char *msg = error_of(cb);
  cr_assert(strstr(msg, "concurrent dispatch hazard"), "%s", msg);
  cr_assert(strstr(msg, "dispatch 2 (kernel scale) reads buffer"), "%s", msg);
  cr_assert(strstr(msg, "[3072, 4096), which dispatch 1 (kernel scale) writes at bytes "
                        "[2048, 4096): they overlap at [3072, 4096)"),
            "%s", msg);

  cb = SEND0(id, queue, "commandBuffer"); /* a write over part of another's write */
  enc = concurrent(cb);
  view_op(enc, pso, 0, 2 * TENSOR, 2 * N, 2.0f);
  view_op(enc, pso, 0, 2 * TENSOR + 512, N, 3.0f); /* writes [2560, 3584) */
  cr_assert_eq(run(cb, enc), Error);
  cr_assert(strstr(error_of(cb), "dispatch 2 (kernel scale) writes buffer"), "%s", error_of(cb));
  cr_assert(strstr(error_of(cb), "they overlap at [2560, 3584)"), "%s", error_of(cb));

  reset();
  cb = SEND0(id, queue, "commandBuffer"); /* with a barrier between them: ordered */
  enc = concurrent(cb);
  view_op(enc, pso, 0, 2 * TENSOR, 2 * N, 2.0f);
  barrier(enc);
  view_op(enc, pso, 2 * TENSOR + 4, 5 * TENSOR, N, 1.0f); /* reads [2052, 3076) */
  cr_assert_eq(run(cb, enc), Completed, "%s", error_of(cb));
  for (int i = 0; i < N - 1; i++) cr_assert_eq(at(5, i), 2.0f * (float)(i + 1));
}

/* A kernel may index below its binding's offset (src[-64]) within the buffer. */
Test(one_buffer, bytes_below_a_binding_offset_count) {
  id cb = SEND0(id, queue, "commandBuffer");
  id enc = concurrent(cb);
  view_op(enc, pso, 0, 0, N / 4, 2.0f);                   /* writes [0, 256) */
  view_op(enc, pso_neg, TENSOR, 2 * TENSOR, N, 1.0f);     /* reads [768, 1792) */
  view_op(enc, pso_neg, TENSOR / 2, 3 * TENSOR, N, 1.0f); /* reads [256, 1280) */
  cr_assert_eq(run(cb, enc), Completed, "%s", error_of(cb));
  cb = SEND0(id, queue, "commandBuffer");
  enc = concurrent(cb);
  view_op(enc, pso, 0, 0, N / 4, 2.0f);                   /* writes [0, 256) */
  view_op(enc, pso_neg, TENSOR / 4, 2 * TENSOR, N, 1.0f); /* reads [0, 1024) */
  cr_assert_eq(run(cb, enc), Error);
  cr_assert(strstr(error_of(cb), "they overlap at [0, 256)"), "%s", error_of(cb));
}

Test(one_buffer, reads_that_overlap_need_no_barrier) {
  id cb = SEND0(id, queue, "commandBuffer");
  id enc = concurrent(cb);
  view_op(enc, pso, 0, 2 * TENSOR, N, 2.0f);
  view_op(enc, pso, TENSOR / 2, 3 * TENSOR, N, 3.0f); /* reads [512, 1536): overlaps [0, 1024) */
  /* a writable source that the kernel only reads is read */
  view_op(enc, pso_rw, TENSOR / 4, 4 * TENSOR, N, 4.0f);
  view_op(enc, pso_rw, 0, 5 * TENSOR, N, 5.0f); /* at the offset the first reads */
  cr_assert_eq(run(cb, enc), Completed, "%s", error_of(cb));
  cr_assert_eq(at(5, N - 1), 5.0f * (N - 1));
  for (int i = 0; i < N / 2; i++) {
    cr_assert_eq(at(2, i), 2.0f * (float)i);
    cr_assert_eq(at(3, i), 3.0f * (float)(i + N / 2));
    cr_assert_eq(at(4, i), 4.0f * (float)(i + N / 4));
  }
}

/* One dispatch reads two tensors with a third between them that another
 * dispatch writes at once: each binding's range is its own. */
Test(one_buffer, a_tensor_between_two_read_ones_is_not_touched) {
  for (int i = 0; i < N; i++) mem[2 * N + i] = 100.0f;
  id cb = SEND0(id, queue, "commandBuffer");
  id enc = concurrent(cb);
  op(enc, 5, 1, 1.0f);                                                 /* t1 = t5 */
  SEND(void, (id, SEL, id), enc, "setComputePipelineState:", pso_add); /* t3 = t0 + t2 */
  SEND(void, (id, SEL, id, NSUInteger, NSUInteger), enc, "setBuffer:offset:atIndex:", buf, 0ul,
       0ul);
  SEND(void, (id, SEL, id, NSUInteger, NSUInteger), enc, "setBuffer:offset:atIndex:", buf,
       (NSUInteger)2 * TENSOR, 3ul);
  SEND(void, (id, SEL, id, NSUInteger, NSUInteger), enc, "setBuffer:offset:atIndex:", buf,
       (NSUInteger)3 * TENSOR, 1ul);
  SEND(void, (id, SEL, MTLSize, MTLSize), enc,
       "dispatchThreads:threadsPerThreadgroup:", ((MTLSize){N, 1, 1}), ((MTLSize){64, 1, 1}));
  cr_assert_eq(run(cb, enc), Completed, "%s", error_of(cb));
  cr_assert_eq(at(3, N - 1), 100.0f + (N - 1));
}
