/* SPDX-License-Identifier: MIT */
/* Validation in two modes, as Metal has them. ctest runs this suite twice:
 * without MTL_DEBUG_LAYER (a Mac without the validation layer: misuse it
 * tolerates is tolerated and counted, undefined misuse fails the command
 * buffer) and with MTL_DEBUG_LAYER=1 (API misuse aborts at encode, naming
 * the rule). Kernel-side failures fail the command buffer in both. */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "softmetal/sm_run.h"

static bool debug_layer(void) {
  const char *v = getenv("MTL_DEBUG_LAYER");
  return v && strcmp(v, "1") == 0;
}

static void init(void) { sm_run_open(); }
static void fini(void) { sm_run_close(); }
TestSuite(validation, .init = init, .fini = fini);

static const char SRC[] =
    "#include <metal_stdlib>\n"
    "using namespace metal;\n"
    "kernel void tgsum(device uint *o [[buffer(0)]], threadgroup uint *t [[threadgroup(0)]],\n"
    "                  uint i [[thread_index_in_threadgroup]], uint n [[threads_per_threadgroup]]) "
    "{\n"
    "  t[i] = i + 1;\n"
    "  threadgroup_barrier(mem_flags::mem_threadgroup);\n"
    "  if (i == 0) { uint s = 0; for (uint k = 0; k < n; k++) s += t[k]; o[0] = s; }\n"
    "}\n"
    "kernel void two(device uint *o [[buffer(0)]], device const uint *a [[buffer(1)]],\n"
    "                uint i [[thread_position_in_grid]]) {\n"
    "  o[i] = a[i] * 2;\n"
    "}\n"
    "kernel void past_end(device uint *o [[buffer(0)]], uint i [[thread_position_in_grid]]) {\n"
    "  o[i + 1] = i;\n"
    "}\n"
    "constant uint scale [[function_constant(0)]];\n"
    "kernel void scaled(device uint *o [[buffer(0)]], uint i [[thread_position_in_grid]]) {\n"
    "  o[i] = i * scale;\n"
    "}\n";

static id library(void) {
  id error = 0;
  id lib = sm_compile(SRC, &error);
  cr_assert_not_null(lib, "%s", sm_error_text(error));
  return lib;
}

/* ggml's SUM sets 76 bytes: a Mac without the validation layer rounds it up
 * to 80; with it, the assertion stops the program. */
static id g_lib, g_pipe, g_buf;
static void tg_length_76(void) {
  id cb = SEND0(id, sm_queue, "commandBuffer");
  id enc = SEND0(id, cb, "computeCommandEncoder");
  SEND(void, (id, SEL, id), enc, "setComputePipelineState:", g_pipe);
  SEND(void, (id, SEL, id, NSUInteger, NSUInteger), enc, "setBuffer:offset:atIndex:", g_buf, 0ul,
       0ul);
  SEND(void, (id, SEL, NSUInteger, NSUInteger), enc, "setThreadgroupMemoryLength:atIndex:", 76ul,
       0ul);
  SEND(void, (id, SEL, MTLSize, MTLSize), enc,
       "dispatchThreadgroups:threadsPerThreadgroup:", SM_SIZE(1, 1, 1), SM_SIZE(19, 1, 1));
  SEND0(void, enc, "endEncoding");
  SEND0(void, cb, "commit");
  SEND0(void, cb, "waitUntilCompleted");
  cr_assert_eq(sm_u(cb, "status"), 4, "%s", sm_error_text(SEND0(id, cb, "error")));
}

/* Runs fn in a child process; it must abort with a message containing
 * want. */
struct void_fn {
  void (*fn)(void);
};
static void run_void(void *arg) { ((struct void_fn *)arg)->fn(); }
static void expect_abort(void (*fn)(void), const char *want) {
  struct void_fn f = {fn};
  char text[4096];
  sm_expect_abort(run_void, &f, text, sizeof text);
  cr_assert(strstr(text, want), "'%s' not in: %s", want, text);
  cr_assert(strstr(text, "MTL_DEBUG_LAYER=1"), "%s", text);
}

Test(validation, a_threadgroup_length_not_a_multiple_of_16_is_rounded_up_or_asserted) {
  g_lib = library();
  g_pipe = sm_pipeline(g_lib, "tgsum");
  g_buf = sm_buffer(NULL, 16);
  if (debug_layer()) {
    expect_abort(tg_length_76, "setThreadgroupMemoryLength:atIndex:: length = 76 is not a "
                               "multiple of 16");
  } else {
    struct softmetal_stats s0, s1, s2;
    softmetal_stats(&s0);
    tg_length_76();
    cr_assert_eq(((unsigned *)sm_contents(g_buf))[0], 19u * 20u / 2u, "the kernel ran");
    softmetal_stats(&s1);
    cr_assert_eq(s1.lenient_api_uses - s0.lenient_api_uses, 1, "counted");
    tg_length_76();
    softmetal_stats(&s2);
    cr_assert_eq(s2.lenient_api_uses - s1.lenient_api_uses, 1, "counted each time");
  }
  sm_release(g_pipe);
  sm_release(g_buf);
  sm_release(g_lib);
}

/* Misuse whose outcome a Mac leaves undefined without the validation layer:
 * the command buffer fails naming the rule; under MTL_DEBUG_LAYER=1 the
 * encode aborts with it. */
static int g_case;
static void misuse(void) {
  id cb = SEND0(id, sm_queue, "commandBuffer");
  if (g_case == 3) {
    id enc = SEND0(id, cb, "blitCommandEncoder");
    SEND(void, (id, SEL, id, NSUInteger, id, NSUInteger, NSUInteger), enc,
         "copyFromBuffer:sourceOffset:toBuffer:destinationOffset:size:", g_buf, 2ul, g_buf, 8ul,
         4ul);
    SEND0(void, enc, "endEncoding");
  } else {
    id enc = SEND0(id, cb, "computeCommandEncoder");
    SEND(void, (id, SEL, id), enc, "setComputePipelineState:", g_pipe);
    SEND(void, (id, SEL, id, NSUInteger, NSUInteger), enc, "setBuffer:offset:atIndex:", g_buf, 0ul,
         0ul);
    static char big[4097];
    if (g_case != 1)
      SEND(void, (id, SEL, id, NSUInteger, NSUInteger), enc, "setBuffer:offset:atIndex:", g_buf,
           0ul, 1ul);
    if (g_case == 2)
      SEND(void, (id, SEL, const void *, NSUInteger, NSUInteger), enc,
           "setBytes:length:atIndex:", big, sizeof big, 2ul);
    if (g_case == 4)
      SEND(void, (id, SEL, NSUInteger, NSUInteger), enc, "setThreadgroupMemoryLength:atIndex:",
           SEND0(NSUInteger, sm_dev, "maxThreadgroupMemoryLength") + 16, 0ul);
    SEND(void, (id, SEL, MTLSize, MTLSize), enc,
         "dispatchThreads:threadsPerThreadgroup:", SM_SIZE(4096, 1, 1),
         SM_SIZE(g_case == 0 ? 2048 : 64, 1, 1));
    SEND0(void, enc, "endEncoding");
  }
  SEND0(void, cb, "commit");
  SEND0(void, cb, "waitUntilCompleted");
  cr_assert_eq(sm_u(cb, "status"), 5 /* Error */, "case %d", g_case);
  const char *text = sm_error_text(SEND0(id, cb, "error"));
  static const char *const want[] = {
      "threadsPerThreadgroup = {2048, 1, 1}", "uses [[buffer(1)]] but nothing is bound",
      "setBytes:length:atIndex:: length = 4097", "must be multiples of 4",
      "the device's maxThreadgroupMemoryLength"};
  cr_assert(strstr(text, want[g_case]), "case %d: %s", g_case, text);
}

Test(validation, undefined_misuse_fails_the_command_buffer_or_asserts) {
  g_lib = library();
  g_pipe = sm_pipeline(g_lib, "two");
  g_buf = sm_buffer(NULL, 4096 * 4);
  static const char *const rule[] = {"threadsPerThreadgroup = {2048, 1, 1}",
                                     "uses [[buffer(1)]] but nothing is bound at index 1",
                                     "setBytes:length:atIndex:: length = 4097",
                                     "copyFromBuffer:sourceOffset:toBuffer:destinationOffset:size:",
                                     "setThreadgroupMemoryLength:atIndex:: length = "};
  for (g_case = 0; g_case < 5; g_case++) {
    if (debug_layer())
      expect_abort(misuse, rule[g_case]);
    else
      misuse();
  }
  sm_release(g_pipe);
  sm_release(g_buf);
  sm_release(g_lib);
}

/* A function with function constants fetched without values makes no
 * pipeline (an NSError naming the rule; the validation layer asserts). */
static void unspecialized(void) {
  id fn = SEND(id, (id, SEL, id), g_lib, "newFunctionWithName:", sm_str("scaled"));
  cr_assert_not_null(fn);
  id dict = SEND0(id, fn, "functionConstantsDictionary");
  cr_assert_eq(sm_u(dict, "count"), 1, "the function has one constant");
  id error = 0;
  id p = SEND(id, (id, SEL, id, id *), sm_dev, "newComputePipelineStateWithFunction:error:", fn,
              &error);
  cr_assert_null(p);
  cr_assert(strstr(sm_error_text(error), "newFunctionWithName:constantValues:error:"), "%s",
            sm_error_text(error));
  sm_release(fn);
}

Test(validation, a_function_with_constants_needs_constant_values) {
  g_lib = library();
  if (debug_layer())
    expect_abort(unspecialized, "newFunctionWithName:constantValues:error:");
  else
    unspecialized();
  /* fetched with values (empty ones too, when every constant is optional)
   * it builds */
  id fresh = SEND0(id, sm_class_named("MTLFunctionConstantValues"), "alloc");
  id cv = SEND0(id, fresh, "init"); /* SEND0 evaluates its receiver twice */
  unsigned three = 3;
  SEND(void, (id, SEL, const void *, NSUInteger, NSUInteger), cv,
       "setConstantValue:type:atIndex:", &three, 33ul /* UInt */, 0ul);
  id error = 0;
  id fn = SEND(id, (id, SEL, id, id, id *), g_lib,
               "newFunctionWithName:constantValues:error:", sm_str("scaled"), cv, &error);
  cr_assert_not_null(fn, "%s", sm_error_text(error));
  id p = SEND(id, (id, SEL, id, id *), sm_dev, "newComputePipelineStateWithFunction:error:", fn,
              &error);
  cr_assert_not_null(p, "%s", sm_error_text(error));
  id out = sm_buffer(NULL, 64 * 4);
  id bufs[] = {out};
  sm_dispatch_pipeline(p, "scaled", bufs, 1, SM_SIZE(64, 1, 1), SM_SIZE(64, 1, 1), false, 0);
  for (unsigned i = 0; i < 64; i++) cr_assert_eq(((unsigned *)sm_contents(out))[i], 3 * i);
  /* a function without constants has an empty dictionary */
  id plain = SEND(id, (id, SEL, id), g_lib, "newFunctionWithName:", sm_str("two"));
  cr_assert_eq(sm_u(SEND0(id, plain, "functionConstantsDictionary"), "count"), 0);
  sm_release(plain);
  sm_release(out);
  sm_release(fn);
  sm_release(cv);
  sm_release(g_lib);
}

/* A required function constant the kernel still reads, given no value
 * (ggml's one-op binary kernel reads its column-broadcast flag, which the
 * host never sets): Apple documents that it needs one, and a Mac without
 * the validation layer specializes anyway. Without MTL_DEBUG_LAYER it reads
 * as 0 (false), counted; with it, newFunctionWithName:constantValues:error:
 * fails naming the constant. */
Test(validation, a_required_constant_without_a_value_reads_as_zero_or_is_an_error) {
  static const char src[] =
      "#include <metal_stdlib>\n"
      "using namespace metal;\n"
      "constant short k_op [[function_constant(10)]];\n"
      "constant bool  k_cb [[function_constant(11)]];\n"
      "kernel void bin1(device const float *a [[buffer(0)]], device float *y [[buffer(1)]],\n"
      "                 uint i [[thread_position_in_grid]]) {\n"
      "  const uint j = k_cb ? i % 4 : i;\n"
      "  y[i] = k_op == 0 ? a[i] + a[j] : a[i] * a[j];\n"
      "}\n";
  id error = 0;
  id lib = sm_compile(src, &error);
  cr_assert_not_null(lib, "%s", sm_error_text(error));
  id fresh = SEND0(id, sm_class_named("MTLFunctionConstantValues"), "alloc");
  id cv = SEND0(id, fresh, "init"); /* SEND0 evaluates its receiver twice */
  short op = 0;
  SEND(void, (id, SEL, const void *, NSUInteger, NSUInteger), cv,
       "setConstantValue:type:atIndex:", &op, 37ul /* Short */, 10ul);
  struct softmetal_stats s0, s1;
  softmetal_stats(&s0);
  error = 0;
  id fn = SEND(id, (id, SEL, id, id, id *), lib,
               "newFunctionWithName:constantValues:error:", sm_str("bin1"), cv, &error);
  softmetal_stats(&s1);
  if (debug_layer()) {
    cr_assert_null(fn);
    cr_assert(strstr(sm_error_text(error), "'k_cb' (index 11) is required"), "%s",
              sm_error_text(error));
  } else {
    cr_assert_not_null(fn, "%s", sm_error_text(error));
    cr_assert_eq(s1.lenient_api_uses - s0.lenient_api_uses, 1, "counted");
    id p = SEND(id, (id, SEL, id, id *), sm_dev, "newComputePipelineStateWithFunction:error:", fn,
                &error);
    cr_assert_not_null(p, "%s", sm_error_text(error));
    id bufs[] = {sm_buffer(NULL, 64 * 4), sm_buffer(NULL, 64 * 4)};
    for (unsigned i = 0; i < 64; i++) ((float *)sm_contents(bufs[0]))[i] = (float)i;
    sm_dispatch_pipeline(p, "bin1", bufs, 2, SM_SIZE(64, 1, 1), SM_SIZE(32, 1, 1), false, 0);
    for (unsigned i = 0; i < 64; i++)
      cr_assert_eq(((float *)sm_contents(bufs[1]))[i], 2.0f * (float)i, "k_cb read as false");
    sm_release(bufs[0]);
    sm_release(bufs[1]);
    sm_release(fn);
  }
  sm_release(cv);
  sm_release(lib);
}

/* Kernel-side failures stay loud in both modes: the command buffer fails
 * (here a write past the end of a buffer, under shader validation). */
Test(validation, kernel_side_failures_fail_the_command_buffer_in_both_modes) {
  g_lib = library();
  id p = sm_pipeline(g_lib, "past_end");
  setenv("MTL_SHADER_VALIDATION", "1", 1); /* read when buffers are made */
  id out = sm_buffer(NULL, 64 * 4);
  unsetenv("MTL_SHADER_VALIDATION");
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
  cr_assert_eq(sm_u(cb, "status"), 5 /* Error */);
  cr_assert(strstr(sm_error_text(SEND0(id, cb, "error")), "out of bounds"), "%s",
            sm_error_text(SEND0(id, cb, "error")));
  sm_release(out);
  sm_release(p);
  sm_release(g_lib);
}
