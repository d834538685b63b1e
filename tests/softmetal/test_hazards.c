/* SPDX-License-Identifier: MIT */
/* softmetal hazard tracking: untracked buffers between passes (fences, events,
 * completion), concurrent compute passes (memory barriers), fences. */
#include <criterion/criterion.h>
#include <string.h>

#include "softmetal/sm_test.h"

enum { NotEnqueued, Enqueued, Committed, Scheduled, Completed, Error };
#define OPT_UNTRACKED 0x100ul
#define OPT_TRACKED 0x200ul
enum { N = 64 };

static const char *const KERNELS =
    "#include <metal_stdlib>\n"
    "using namespace metal;\n"
    "kernel void ids(device uint *out [[buffer(0)]], uint i [[thread_position_in_grid]]) {\n"
    "  out[i] = i + 1;\n"
    "}\n"
    "kernel void twice(const device uint *in [[buffer(0)]], device uint *out [[buffer(1)]],\n"
    "                  uint i [[thread_position_in_grid]]) {\n"
    "  out[i] = 2 * in[i];\n"
    "}\n"
    "kernel void twice_too(device const uint *in [[buffer(0)]],\n"
    "                      device uint *const out [[buffer(1)]],\n"
    "                      uint i [[thread_position_in_grid]]) {\n"
    "  out[i] = 2 * in[i];\n"
    "}\n"
    "kernel void plus_one(constant uint *in [[buffer(0)]], device uint &sum [[buffer(1)]],\n"
    "                     uint i [[thread_position_in_grid]]) {\n"
    "  if (i == 0) sum = in[0] + 1;\n"
    "}\n";

static id dev, queue, lib;
static void *pool;
static void setup(void) {
  dev = MTLCreateSystemDefaultDevice();
  queue = SEND0(id, dev, "newCommandQueue");
  pool = objc_autoreleasePoolPush();
  id error = 0;
  lib = SEND(id, (id, SEL, id, id, id *), dev,
             "newLibraryWithSource:options:error:", sm_str(KERNELS), (id)0, &error);
  cr_assert_not_null(lib, "%s", sm_error_text(error));
}
static void teardown(void) {
  sm_release(lib);
  objc_autoreleasePoolPop(pool);
  sm_release(queue);
  sm_release(dev);
  softmetal_quiesce();
  sm_check_all_released(__FILE__);
}
TestSuite(hazards, .init = setup, .fini = teardown);

static id buffer(NSUInteger options, const char *label) {
  id b = SEND(id, (id, SEL, NSUInteger, NSUInteger), dev,
              "newBufferWithLength:options:", (NSUInteger)N * 4, options);
  if (label) SEND(void, (id, SEL, id), b, "setLabel:", sm_str(label));
  return b;
}
static id pipeline(const char *name) {
  id fn = SEND(id, (id, SEL, id), lib, "newFunctionWithName:", sm_str(name));
  id error = 0;
  id p =
      SEND(id, (id, SEL, id, id *), dev, "newComputePipelineStateWithFunction:error:", fn, &error);
  cr_assert_not_null(p, "%s", sm_error_text(error));
  sm_release(fn);
  return p;
}
static id cmdbuf(void) { return SEND0(id, queue, "commandBuffer"); }
static id blit(id cb) { return SEND0(id, cb, "blitCommandEncoder"); }
static id compute(id cb) { return SEND0(id, cb, "computeCommandEncoder"); }
static id concurrent(id cb) {
  return SEND(id, (id, SEL, NSUInteger), cb, "computeCommandEncoderWithDispatchType:", 1ul);
}
static void end(id enc) { SEND0(void, enc, "endEncoding"); }
static void fill(id enc, id buf, uint8_t v) {
  SEND(void, (id, SEL, id, NSRange, uint8_t), enc, "fillBuffer:range:value:", buf,
       ((NSRange){0, (NSUInteger)N * 4}), v);
}
static void copy(id enc, id src, id dst) {
  SEND(void, (id, SEL, id, NSUInteger, id, NSUInteger, NSUInteger), enc,
       "copyFromBuffer:sourceOffset:toBuffer:destinationOffset:size:", src, 0ul, dst, 0ul,
       (NSUInteger)N * 4);
}
static void update(id enc, id fence) { SEND(void, (id, SEL, id), enc, "updateFence:", fence); }
static void wait_for(id enc, id fence) { SEND(void, (id, SEL, id), enc, "waitForFence:", fence); }
/* Runs kernel `name` over N threads with buffers a (index 0) and b (index 1, optional). */
static void dispatch(id enc, id pso, id a, id b) {
  SEND(void, (id, SEL, id), enc, "setComputePipelineState:", pso);
  SEND(void, (id, SEL, id, NSUInteger, NSUInteger), enc, "setBuffer:offset:atIndex:", a, 0ul, 0ul);
  if (b)
    SEND(void, (id, SEL, id, NSUInteger, NSUInteger), enc, "setBuffer:offset:atIndex:", b, 0ul,
         1ul);
  SEND(void, (id, SEL, MTLSize, MTLSize), enc,
       "dispatchThreads:threadsPerThreadgroup:", ((MTLSize){N, 1, 1}), ((MTLSize){32, 1, 1}));
}
static NSUInteger run(id cb) {
  SEND0(void, cb, "commit");
  SEND0(void, cb, "waitUntilCompleted");
  return SEND0(NSUInteger, cb, "status");
}
static const char *error_of(id cb) { return sm_error_text(SEND0(id, cb, "error")); }
static uint32_t *words(id b) { return SEND0(void *, b, "contents"); }

#define EXPECT_IN(msg, part) cr_assert(strstr((msg), (part)), "'%s' not in: %s", (part), (msg))

Test(hazards, tracking_mode_follows_the_resource_options) {
  id d = buffer(0, NULL), u = buffer(OPT_UNTRACKED, NULL), t = buffer(OPT_TRACKED | 16, NULL);
  cr_assert_eq(sm_u(d, "hazardTrackingMode"), 2, "Default is Tracked for a buffer");
  cr_assert_eq(sm_u(u, "hazardTrackingMode"), 1);
  cr_assert_eq(sm_u(t, "hazardTrackingMode"), 2);
  cr_assert_eq(sm_u(u, "resourceOptions"), OPT_UNTRACKED);
  cr_assert_null(SEND(id, (id, SEL, NSUInteger, NSUInteger), dev,
                      "newBufferWithLength:options:", 16ul, 0x300ul),
                 "hazard tracking mode 3 does not exist");
  sm_release(d);
  sm_release(u);
  sm_release(t);
}

Test(hazards, fences_know_their_device_and_label) {
  id f = SEND0(id, dev, "newFence");
  cr_assert_not_null(f);
  cr_assert_eq(SEND0(id, f, "device"), dev);
  SEND(void, (id, SEL, id), f, "setLabel:", sm_str("step"));
  cr_assert_str_eq(sm_utf8(SEND0(id, f, "label")), "step");
  sm_release(f);
}

Test(hazards, untracked_passes_in_one_command_buffer_need_a_fence) {
  id u = buffer(OPT_UNTRACKED, "activations"), out = buffer(0, NULL), twice = pipeline("twice");
  id cb = cmdbuf();
  id e = blit(cb);
  fill(e, u, 1);
  end(e);
  e = compute(cb);
  dispatch(e, twice, u, out);
  end(e);
  cr_assert_eq(run(cb), Error);
  const char *msg = error_of(cb);
  EXPECT_IN(msg, "untracked buffer hazard");
  EXPECT_IN(msg, "computeCommandEncoder pass 2 of command buffer");
  EXPECT_IN(msg,
            "dispatchThreads:threadsPerThreadgroup:, kernel twice) reads buffer 'activations'");
  EXPECT_IN(msg, "blitCommandEncoder pass 1 of command buffer");
  EXPECT_IN(msg, "(fillBuffer:range:value:) wrote");
  EXPECT_IN(msg, "MTLFence");
  cr_assert_eq(words(out)[0], 0, "nothing of a failed command buffer runs");

  id fence = SEND0(id, dev, "newFence");
  cb = cmdbuf();
  e = blit(cb);
  fill(e, u, 1);
  update(e, fence);
  end(e);
  e = compute(cb);
  wait_for(e, fence);
  dispatch(e, twice, u, out);
  end(e);
  cr_assert_eq(run(cb), Completed, "%s", error_of(cb));
  cr_assert_eq(words(out)[N - 1], 2 * 0x01010101u);
  sm_release(fence);
  sm_release(twice);
  sm_release(u);
  sm_release(out);
}

Test(hazards, tracked_buffers_are_ordered_without_fences) {
  id t = buffer(0, NULL), out = buffer(OPT_UNTRACKED, NULL), twice = pipeline("twice");
  id cb = cmdbuf();
  id e = blit(cb);
  fill(e, t, 1);
  end(e);
  e = compute(cb);
  dispatch(e, twice, t, out); /* out is untracked but only this pass uses it */
  end(e);
  cr_assert_eq(run(cb), Completed, "%s", error_of(cb));
  cr_assert_eq(words(out)[0], 2 * 0x01010101u);
  sm_release(twice);
  sm_release(t);
  sm_release(out);
}

Test(hazards, writing_what_an_earlier_pass_read_needs_a_fence) {
  id u = buffer(OPT_UNTRACKED, "u"), out = buffer(0, NULL);
  id cb = cmdbuf();
  id e = blit(cb);
  copy(e, u, out);
  end(e);
  e = blit(cb);
  fill(e, u, 7);
  end(e);
  cr_assert_eq(run(cb), Error);
  const char *msg = error_of(cb);
  EXPECT_IN(msg, "(fillBuffer:range:value:) writes buffer 'u'");
  EXPECT_IN(msg, "(copyFromBuffer:sourceOffset:toBuffer:destinationOffset:size:) read");

  cb = cmdbuf(); /* reads after reads race with nothing */
  e = blit(cb);
  copy(e, u, out);
  end(e);
  e = blit(cb);
  copy(e, u, out);
  end(e);
  cr_assert_eq(run(cb), Completed, "%s", error_of(cb));
  sm_release(u);
  sm_release(out);
}

Test(hazards, untracked_command_buffers_of_a_queue_are_not_ordered) {
  id u = buffer(OPT_UNTRACKED, "u"), out = buffer(0, NULL);
  id first = cmdbuf();
  id e = blit(first);
  fill(e, u, 1);
  end(e);
  SEND(void, (id, SEL, id), first, "setLabel:", sm_str("producer"));
  SEND0(void, first, "commit");
  id second = cmdbuf();
  e = blit(second);
  copy(e, u, out);
  end(e);
  cr_assert_eq(run(second), Error, "the host never saw the first complete");
  EXPECT_IN(error_of(second), "blitCommandEncoder pass 1 of command buffer 'producer'");
  SEND0(void, first, "waitUntilCompleted");

  second = cmdbuf(); /* now it has: ordered */
  e = blit(second);
  copy(e, u, out);
  end(e);
  cr_assert_eq(run(second), Completed, "%s", error_of(second));
  cr_assert_eq(words(out)[0], 0x01010101u);

  id fence = SEND0(id, dev, "newFence"); /* a fence orders across command buffers too */
  first = cmdbuf();
  e = blit(first);
  fill(e, u, 2);
  update(e, fence);
  end(e);
  SEND0(void, first, "commit");
  second = cmdbuf();
  e = blit(second);
  wait_for(e, fence);
  copy(e, u, out);
  end(e);
  cr_assert_eq(run(second), Completed, "%s", error_of(second));
  cr_assert_eq(words(out)[0], 0x02020202u);

  id event = SEND0(id, dev, "newSharedEvent"); /* so does an event on the same queue */
  first = cmdbuf();
  e = blit(first);
  fill(e, u, 3);
  end(e);
  SEND(void, (id, SEL, id, uint64_t), first, "encodeSignalEvent:value:", event, 1);
  SEND0(void, first, "commit");
  second = cmdbuf();
  SEND(void, (id, SEL, id, uint64_t), second, "encodeWaitForEvent:value:", event, 1);
  e = blit(second);
  copy(e, u, out);
  end(e);
  cr_assert_eq(run(second), Completed, "%s", error_of(second));
  cr_assert_eq(words(out)[0], 0x03030303u);
  sm_release(event);
  sm_release(fence);
  sm_release(u);
  sm_release(out);
}

Test(hazards, fences_order_passes_transitively) {
  id u = buffer(OPT_UNTRACKED, "u"), v = buffer(OPT_UNTRACKED, "v"), out = buffer(0, NULL);
  id f1 = SEND0(id, dev, "newFence"), f2 = SEND0(id, dev, "newFence");
  id cb = cmdbuf();
  id e = blit(cb);
  fill(e, u, 5);
  update(e, f1);
  end(e);
  e = blit(cb);
  wait_for(e, f1);
  fill(e, v, 6);
  update(e, f2);
  end(e);
  e = blit(cb);
  wait_for(e, f2);
  copy(e, u, out);
  end(e);
  cr_assert_eq(run(cb), Completed, "%s", error_of(cb));
  cr_assert_eq(words(out)[0], 0x05050505u);

  cb = cmdbuf(); /* a wait for a fence updated after it orders nothing */
  e = blit(cb);
  wait_for(e, f1);
  fill(e, v, 7);
  end(e);
  e = blit(cb);
  update(e, f1);
  fill(e, v, 8);
  end(e);
  cr_assert_eq(run(cb), Error);
  EXPECT_IN(error_of(cb), "writes buffer 'v'");
  sm_release(f1);
  sm_release(f2);
  sm_release(u);
  sm_release(v);
  sm_release(out);
}

Test(hazards, concurrent_dispatches_that_depend_need_a_barrier) {
  id a = buffer(0, "a"), b = buffer(0, "b"), c = buffer(0, "c");
  id ids = pipeline("ids"), twice = pipeline("twice");
  id cb = cmdbuf();
  id e = concurrent(cb);
  cr_assert_eq(sm_u(e, "dispatchType"), 1);
  dispatch(e, ids, a, NULL);
  dispatch(e, twice, a, b); /* reads what the first writes: tracked or not, a race */
  end(e);
  cr_assert_eq(run(cb), Error);
  const char *msg = error_of(cb);
  EXPECT_IN(msg, "dispatch 2 (kernel twice) reads buffer 'a'");
  EXPECT_IN(msg, "dispatch 1 (kernel ids) writes");
  EXPECT_IN(msg, "memoryBarrierWithScope:");

  cb = cmdbuf();
  e = concurrent(cb);
  dispatch(e, ids, a, NULL);
  SEND(void, (id, SEL, NSUInteger), e, "memoryBarrierWithScope:", 1ul);
  dispatch(e, twice, a, b);
  id only[] = {c};
  SEND(void, (id, SEL, id *, NSUInteger), e, "memoryBarrierWithResources:count:", only, 1ul);
  dispatch(e, twice, a, c); /* a is only read since the barrier: fine */
  end(e);
  cr_assert_eq(run(cb), Completed, "%s", error_of(cb));
  cr_assert_eq(words(b)[N - 1], 2 * N);
  cr_assert_eq(words(c)[N - 1], 2 * N);

  cb = cmdbuf();
  e = concurrent(cb);
  dispatch(e, twice, a, b);
  SEND(void, (id, SEL, id *, NSUInteger), e, "memoryBarrierWithResources:count:", only, 1ul);
  dispatch(e, ids, b, NULL); /* writes b, which the first writes: the barrier was for c */
  end(e);
  cr_assert_eq(run(cb), Error);
  EXPECT_IN(error_of(cb), "dispatch 2 (kernel ids) writes buffer 'b'");

  cb = cmdbuf(); /* a serial pass orders its dispatches */
  e = compute(cb);
  cr_assert_eq(sm_u(e, "dispatchType"), 0);
  dispatch(e, ids, a, NULL);
  dispatch(e, twice, a, b);
  end(e);
  cr_assert_eq(run(cb), Completed, "%s", error_of(cb));
  sm_release(ids);
  sm_release(twice);
  sm_release(a);
  sm_release(b);
  sm_release(c);
}

static long code_loads(void) {
  struct softmetal_stats st;
  softmetal_stats(&st);
  return st.function_compiles + st.function_cache_hits;
}

/* Only dispatches of a concurrent pass that share a segment (no barrier for
 * all buffers between them) can race, so only they run tracked code, made
 * when one first needs it: a pass whose dispatches barriers keep apart
 * makes none, and runs in order; two dispatches side by side make it once. */
Test(hazards, only_dispatches_that_share_a_segment_run_tracked_code) {
  id a = buffer(0, "a"), b = buffer(0, "b"), c = buffer(0, "c");
  id ids = pipeline("ids"), twice = pipeline("twice");
  long before = code_loads();
  id cb = cmdbuf();
  id e = concurrent(cb);
  dispatch(e, ids, a, NULL);
  SEND(void, (id, SEL, NSUInteger), e, "memoryBarrierWithScope:", 1ul);
  dispatch(e, twice, a, b);
  SEND(void, (id, SEL, NSUInteger), e, "memoryBarrierWithScope:", 1ul);
  end(e);
  cr_assert_eq(run(cb), Completed, "%s", error_of(cb));
  cr_assert_eq(words(b)[N - 1], 2 * N);
  cr_assert_eq(code_loads(), before, "a dispatch alone in its segment made tracked code");

  cb = cmdbuf();
  e = concurrent(cb);
  dispatch(e, twice, a, b);
  dispatch(e, twice, a, c); /* both read a: no race, but tracked */
  end(e);
  cr_assert_eq(run(cb), Completed, "%s", error_of(cb));
  cr_assert_eq(words(c)[N - 1], 2 * N);
  cr_assert_eq(code_loads(), before + 1);
  sm_release(ids);
  sm_release(twice);
  sm_release(a);
  sm_release(b);
  sm_release(c);
}

Test(hazards, const_device_and_constant_parameters_are_read_only) {
  id a = buffer(0, "a"), b = buffer(0, "b"), c = buffer(0, "c"), d = buffer(0, "d");
  id twice = pipeline("twice"), twice_too = pipeline("twice_too"), plus = pipeline("plus_one");
  id cb = cmdbuf();
  id e = concurrent(cb);
  dispatch(e, twice, a, b);     /* const device: a is read */
  dispatch(e, twice_too, a, c); /* device const: read; device *const: written */
  dispatch(e, plus, a, d);      /* constant: read */
  end(e);
  cr_assert_eq(run(cb), Completed, "%s", error_of(cb));
  cb = cmdbuf();
  e = concurrent(cb);
  dispatch(e, twice_too, a, c);
  dispatch(e, plus, b, c); /* device uint &: written */
  end(e);
  cr_assert_eq(run(cb), Error);
  EXPECT_IN(error_of(cb), "dispatch 2 (kernel plus_one) writes buffer 'c'");
  sm_release(twice);
  sm_release(twice_too);
  sm_release(plus);
  sm_release(a);
  sm_release(b);
  sm_release(c);
  sm_release(d);
}

Test(hazards, kernels_use_the_gpu_copy_of_managed_storage) {
  id m = buffer(16ul /* Managed */, "m"), out = buffer(0, NULL), twice = pipeline("twice");
  for (int i = 0; i < N; i++) words(m)[i] = 5;
  id cb = cmdbuf();
  id e = compute(cb);
  dispatch(e, twice, m, out);
  end(e);
  cr_assert_eq(run(cb), Completed, "%s", error_of(cb));
  cr_assert_eq(words(out)[0], 0, "the host's writes have not reached the GPU copy");
  SEND(void, (id, SEL, NSRange), m, "didModifyRange:", ((NSRange){0, (NSUInteger)N * 4}));
  cb = cmdbuf();
  e = compute(cb);
  dispatch(e, twice, m, out);
  end(e);
  cr_assert_eq(run(cb), Completed, "%s", error_of(cb));
  cr_assert_eq(words(out)[N - 1], 10);
  sm_release(twice);
  sm_release(m);
  sm_release(out);
}

Test(hazards, a_pipeline_of_another_device_fails_the_command_buffer) {
  setenv("SOFTMETAL_DEVICE_COUNT", "2", 1);
  id all = MTLCopyAllDevices();
  id other = SEND(id, (id, SEL, NSUInteger), all, "objectAtIndex:", 1ul);
  id error = 0;
  id l = SEND(id, (id, SEL, id, id, id *), other,
              "newLibraryWithSource:options:error:", sm_str(KERNELS), (id)0, &error);
  cr_assert_not_null(l, "%s", sm_error_text(error));
  id fn = SEND(id, (id, SEL, id), l, "newFunctionWithName:", sm_str("ids"));
  id p = SEND(id, (id, SEL, id, id *), other, "newComputePipelineStateWithFunction:error:", fn,
              &error);
  cr_assert_not_null(p, "%s", sm_error_text(error));
  id out = buffer(0, NULL);
  id cb = cmdbuf();
  id e = compute(cb);
  dispatch(e, p, out, NULL);
  end(e);
  cr_assert_eq(run(cb), Error);
  EXPECT_IN(error_of(cb), "setComputePipelineState:: pipelineState belongs to device "
                          "'softmetal 1 (software Metal on the CPU)'");
  sm_release(out);
  sm_release(p);
  sm_release(fn);
  sm_release(l);
  sm_release(all);
  unsetenv("SOFTMETAL_DEVICE_COUNT");
}
