/* SPDX-License-Identifier: MIT */
/* Kernel faults: a wild pointer and (under MTL_SHADER_VALIDATION=1) an
 * integer division by zero or a read past the end of a buffer fail their
 * command buffer with a message naming the kernel, the thread and the rule;
 * the process, the queue and later command buffers go on. Without shader
 * validation a division by zero gives a value, as on a GPU (x86-64). */
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "softmetal/sm_run.h"

#if __has_include(<valgrind/memcheck.h>)
#include <valgrind/memcheck.h>
#else
#define RUNNING_ON_VALGRIND 0
#define VALGRIND_DISABLE_ADDR_ERROR_REPORTING_IN_RANGE(a, n) ((void)(a), (void)(n))
#define VALGRIND_ENABLE_ADDR_ERROR_REPORTING_IN_RANGE(a, n) ((void)(a), (void)(n))
#endif

static const char SRC[] =
    "#include <metal_stdlib>\n"
    "using namespace metal;\n"
    "kernel void int_mod(device const int *a [[buffer(0)]], device const int *b [[buffer(1)]],\n"
    "                    device int *out [[buffer(2)]], uint id [[thread_position_in_grid]]) {\n"
    "  out[id] = a[id] % b[id];\n"
    "}\n"
    "kernel void int_div_barrier(device const int *a [[buffer(0)]],\n"
    "                            device const int *b [[buffer(1)]],\n"
    "                            device int *out [[buffer(2)]],\n"
    "                            uint id [[thread_position_in_grid]],\n"
    "                            uint lid [[thread_position_in_threadgroup]]) {\n"
    "  threadgroup int t[32];\n"
    "  t[lid] = b[id];\n"
    "  threadgroup_barrier(mem_flags::mem_threadgroup);\n"
    "  out[id] = a[id] / t[31 - lid];\n"
    "  threadgroup_barrier(mem_flags::mem_threadgroup);\n"
    "}\n"
    "struct attn_args { int ne_mask; ulong nb_mask; int has_mask; };\n"
    "kernel void masked_rows(constant attn_args &args [[buffer(0)]],\n"
    "                        device const float *mask [[buffer(1)]],\n"
    "                        device float *out [[buffer(2)]],\n"
    "                        uint tg [[threadgroup_position_in_grid]],\n"
    "                        uint lid [[thread_position_in_threadgroup]]) {\n"
    "  /* the mask row of head tg, computed whether or not there is a mask */\n"
    "  const uint row = tg % uint(args.ne_mask);\n"
    "  device const float *m = (device const float *)((device const char *)mask +\n"
    "                            row * args.nb_mask);\n"
    "  const uint i = tg * 32 + lid;\n"
    "  out[i] = float(i) + (args.has_mask ? m[lid] : 0.0f);\n"
    "  out[256 + i] = float(row); /* kept: the remainder is computed */\n"
    "}\n"
    "kernel void wild_write(device const ulong *where [[buffer(0)]],\n"
    "                       device int *out [[buffer(1)]], uint id [[thread_position_in_grid]]) {\n"
    "  out[id] = 1;\n"
    "  if (id == 5) *(device int *)where[0] = 7;\n"
    "}\n"
    "kernel void sum_next(device const float *in [[buffer(0)]], device float *out [[buffer(1)]],\n"
    "                     uint id [[thread_position_in_grid]]) {\n"
    "  out[id] = in[id] + in[id + 1];\n"
    "}\n"
    "kernel void big_private(device const uint *in [[buffer(0)]], device float *out "
    "[[buffer(1)]],\n"
    "                        uint id [[thread_position_in_grid]]) {\n"
    "  float a[65536]; /* 256 KiB on the stack of the thread that runs it */\n"
    "  for (uint i = 0; i < 65536; i++) a[i] = float(i ^ id);\n"
    "  out[id] = a[in[id] & 65535u];\n"
    "}\n"
    "kernel void fill_strided(device float *out [[buffer(0)]],\n"
    "                         threadgroup float4 *so [[threadgroup(0)]],\n"
    "                         ushort lane [[thread_index_in_simdgroup]]) {\n"
    "  /* each lane fills 3 entries 32 apart from its own: up to so[95] */\n"
    "  so += lane;\n"
    "  for (short i = 0; i < 3; ++i) so[i * 32] = float4(lane + i);\n"
    "  threadgroup_barrier(mem_flags::mem_threadgroup);\n"
    "  out[lane] = so[0].x + so[64].x;\n"
    "}\n";

static void setup(void) { sm_run_open_library(SRC); }
TestSuite(faults, .init = setup, .fini = sm_run_close, .timeout = 120);

/* Runs kernel over `threads` threads in threadgroups of `tg` on queue q with
 * bufs at 0..n-1; returns the finished command buffer (autoreleased). */
static id run_on(id q, const char *kernel, id *bufs, int n, NSUInteger threads, NSUInteger tg) {
  id p = sm_pipeline(sm_lib, kernel);
  id cb = SEND0(id, q, "commandBuffer");
  id enc = SEND0(id, cb, "computeCommandEncoder");
  SEND(void, (id, SEL, id), enc, "setComputePipelineState:", p);
  for (int i = 0; i < n; i++)
    SEND(void, (id, SEL, id, NSUInteger, NSUInteger), enc, "setBuffer:offset:atIndex:", bufs[i],
         0ul, (NSUInteger)i);
  SEND(void, (id, SEL, MTLSize, MTLSize), enc,
       "dispatchThreads:threadsPerThreadgroup:", SM_SIZE(threads, 1, 1), SM_SIZE(tg, 1, 1));
  SEND0(void, enc, "endEncoding");
  SEND0(void, cb, "commit");
  SEND0(void, cb, "waitUntilCompleted");
  sm_release(p);
  return cb;
}

/* The command buffer failed (status Error, MTLCommandBufferErrorDomain) with
 * a message holding every one of the strings in want (NULL-terminated). */
static void expect_fault(id cb, const char *const *want) {
  id error = SEND0(id, cb, "error");
  cr_assert_eq(sm_u(cb, "status"), 5 /* Error */, "%s", sm_error_text(error));
  cr_assert_not_null(error);
  cr_assert_str_eq(sm_utf8(SEND0(id, error, "domain")), "MTLCommandBufferErrorDomain");
  const char *msg = sm_error_text(error);
  for (int i = 0; want[i]; i++) cr_assert(strstr(msg, want[i]), "no '%s' in: %s", want[i], msg);
}

static void mod_inputs(id a, id b, int zero_at) {
  int *pa = sm_contents(a), *pb = sm_contents(b);
  for (int i = 0; i < 64; i++) {
    pa[i] = 1000 + i;
    pb[i] = i == zero_at ? 0 : 7 + i % 5;
  }
}

/* MSL leaves x / 0 and x % 0 undefined, and GPUs give a value without
 * trapping: a kernel may compute one it never uses (ggml's flash attention
 * computes the mask row of a head modulo the mask's extent, 0 without a
 * mask, and reads it only with one). Without shader validation that runs. */
Test(faults, a_remainder_by_zero_gives_a_value_without_shader_validation) {
#if !defined(__x86_64__)
  cr_skip("aarch64: softmetal's divide check still faults in both modes");
#endif
  unsetenv("MTL_SHADER_VALIDATION");
  struct {
    int32_t ne_mask;
    uint32_t pad;
    uint64_t nb_mask;
    int32_t has_mask;
    uint32_t pad2;
  } args = {0, 0, 0, 0, 0};
  id bufs[3] = {sm_buffer(&args, sizeof args), sm_buffer(NULL, 256),
                sm_buffer(NULL, 2 * 8 * 32 * 4)};
  id cb = run_on(sm_queue, "masked_rows", bufs, 3, 8 * 32, 32);
  if (RUNNING_ON_VALGRIND) { /* there it stays a fault (sm_fault.c) */
    static const char *const want[] = {"integer division or remainder by zero", NULL};
    expect_fault(cb, want);
    for (int i = 0; i < 3; i++) sm_release(bufs[i]);
    return;
  }
  cr_assert_eq(sm_u(cb, "status"), 4, "%s", sm_error_text(SEND0(id, cb, "error")));
  const float *out = sm_contents(bufs[2]);
  for (int i = 0; i < 8 * 32; i++)
    cr_assert_eq(out[i], (float)i, "out[%d] = %g, row %g", i, (double)out[i], (double)out[256 + i]);
  for (int i = 0; i < 3; i++) sm_release(bufs[i]);
}

Test(faults, integer_remainder_by_zero_fails_the_command_buffer_and_the_queue_goes_on) {
  setenv("MTL_SHADER_VALIDATION", "1", 1);
  id bufs[3] = {sm_buffer(NULL, 256), sm_buffer(NULL, 256), sm_buffer(NULL, 256)};
  mod_inputs(bufs[0], bufs[1], 37);
  static const char *const want[] = {"kernel int_mod",
                                     "thread_position_in_grid (37, 0, 0)",
                                     "threadgroup_position_in_grid (1, 0, 0)",
                                     "thread_position_in_threadgroup (5, 0, 0)",
                                     "integer division or remainder by zero",
                                     NULL};
  expect_fault(run_on(sm_queue, "int_mod", bufs, 3, 64, 32), want);
  /* The next command buffer on the same queue runs. */
  mod_inputs(bufs[0], bufs[1], -1);
  id cb = run_on(sm_queue, "int_mod", bufs, 3, 64, 32);
  cr_assert_eq(sm_u(cb, "status"), 4, "%s", sm_error_text(SEND0(id, cb, "error")));
  const int *out = sm_contents(bufs[2]);
  for (int i = 0; i < 64; i++) cr_assert_eq(out[i], (1000 + i) % (7 + i % 5), "out[%d]", i);
  /* And so does another queue. */
  id q2 = SEND0(id, sm_dev, "newCommandQueue");
  cb = run_on(q2, "int_mod", bufs, 3, 64, 32);
  cr_assert_eq(sm_u(cb, "status"), 4, "%s", sm_error_text(SEND0(id, cb, "error")));
  sm_release(q2);
  for (int i = 0; i < 3; i++) sm_release(bufs[i]);
}

Test(faults, division_by_zero_in_a_kernel_with_barriers_fails_and_the_queue_goes_on) {
  setenv("MTL_SHADER_VALIDATION", "1", 1);
  id bufs[3] = {sm_buffer(NULL, 256), sm_buffer(NULL, 256), sm_buffer(NULL, 256)};
  mod_inputs(bufs[0], bufs[1], 40); /* read by thread 32 + (31 - 8) = 55 */
  static const char *const want[] = {"kernel int_div_barrier",
                                     "thread_position_in_grid (55, 0, 0)",
                                     "threadgroup_position_in_grid (1, 0, 0)",
                                     "thread_position_in_threadgroup (23, 0, 0)",
                                     "integer division or remainder by zero",
                                     NULL};
  expect_fault(run_on(sm_queue, "int_div_barrier", bufs, 3, 64, 32), want);
  mod_inputs(bufs[0], bufs[1], -1);
  id cb = run_on(sm_queue, "int_div_barrier", bufs, 3, 64, 32);
  cr_assert_eq(sm_u(cb, "status"), 4, "%s", sm_error_text(SEND0(id, cb, "error")));
  const int *out = sm_contents(bufs[2]);
  for (int i = 0; i < 64; i++) {
    int j = i / 32 * 32 + 31 - i % 32;
    cr_assert_eq(out[i], (1000 + i) / (7 + j % 5), "out[%d]", i);
  }
  for (int i = 0; i < 3; i++) sm_release(bufs[i]);
}

Test(faults, a_wild_pointer_write_fails_the_command_buffer) {
  id bufs[2] = {sm_buffer(NULL, 8), sm_buffer(NULL, 64 * 4)};
  *(uint64_t *)sm_contents(bufs[0]) = 0x10; /* in the page at 0, never mapped */
  /* memcheck would report the write this test makes on purpose. */
  if (RUNNING_ON_VALGRIND) VALGRIND_DISABLE_ADDR_ERROR_REPORTING_IN_RANGE(0, 4096);
  static const char *const want[] = {"kernel wild_write", "thread_position_in_grid (5, 0, 0)",
                                     "invalid memory", "at address 0x10", NULL};
  expect_fault(run_on(sm_queue, "wild_write", bufs, 2, 64, 16), want);
  if (RUNNING_ON_VALGRIND) VALGRIND_ENABLE_ADDR_ERROR_REPORTING_IN_RANGE(0, 4096);
  *(uint64_t *)sm_contents(bufs[0]) = (uint64_t)(uintptr_t)sm_contents(bufs[1]);
  id cb = run_on(sm_queue, "wild_write", bufs, 2, 64, 16);
  cr_assert_eq(sm_u(cb, "status"), 4, "%s", sm_error_text(SEND0(id, cb, "error")));
  cr_assert_eq(((int *)sm_contents(bufs[1]))[0], 7);
  for (int i = 0; i < 2; i++) sm_release(bufs[i]);
}

Test(faults, shader_validation_reports_a_read_past_the_end_of_a_buffer) {
  setenv("MTL_SHADER_VALIDATION", "1", 1); /* read when buffers are made */
  id bufs[2] = {sm_buffer(NULL, 64 * 4), sm_buffer(NULL, 64 * 4)};
  float *in = sm_contents(bufs[0]);
  for (int i = 0; i < 64; i++) in[i] = (float)i;
  static const char *const want[] = {
      "kernel sum_next",
      "thread_position_in_grid (63, 0, 0)",
      "threadgroup_position_in_grid (3, 0, 0)",
      "thread_position_in_threadgroup (15, 0, 0)",
      "out of bounds: byte 256 of the buffer at [[buffer(0)]], which has 256 bytes",
      NULL};
  expect_fault(run_on(sm_queue, "sum_next", bufs, 2, 64, 16), want);
  /* Within bounds, the same kernel runs. */
  id cb = run_on(sm_queue, "sum_next", bufs, 2, 63, 16);
  cr_assert_eq(sm_u(cb, "status"), 4, "%s", sm_error_text(SEND0(id, cb, "error")));
  cr_assert_eq(((float *)sm_contents(bufs[1]))[62], 62.0f + 63.0f);
  for (int i = 0; i < 2; i++) sm_release(bufs[i]);
  unsetenv("MTL_SHADER_VALIDATION");
}

/* Runs fill_strided as one threadgroup of 32 with `tg_len` bytes of
 * threadgroup memory. */
static id run_fill_strided(id out, NSUInteger tg_len) {
  return sm_dispatch_cb(sm_pipeline(sm_lib, "fill_strided"), &out, 1, SM_SIZE(32, 1, 1),
                        SM_SIZE(32, 1, 1), false, tg_len);
}

/* Threadgroup memory past the length set is undefined in MSL. A kernel
 * that fills 96 float4 (1536 bytes) in 1024 fails its command buffer,
 * naming threadgroup memory, with or without shader validation, and
 * softmetal's own memory stays intact; given 1536 bytes it runs. */
Test(faults, a_write_past_the_end_of_threadgroup_memory_fails_the_command_buffer) {
  id out = sm_buffer(NULL, 32 * 4);
  /* "invalid memory": aarch64's handler cannot tell a write from a read */
  static const char *const want[] = {"kernel fill_strided", "invalid memory",
                                     "past the end of threadgroup memory",
                                     "[[threadgroup(0)]] has 1024 bytes", NULL};
  expect_fault(run_fill_strided(out, 1024), want);
  id cb = run_fill_strided(out, 1536);
  cr_assert_eq(sm_u(cb, "status"), 4, "%s", sm_error_text(SEND0(id, cb, "error")));
  const float *o = sm_contents(out);
  for (int l = 0; l < 32; l++) cr_assert_eq(o[l], (float)(2 * l + 2));
  sm_release(out);
}

/* Dispatches kernel int_mod as `groups` threadgroups of one thread, directly
 * or through an indirect buffer; returns the finished command buffer. */
static id dispatch_groups(MTLSize groups, bool indirect) {
  id bufs[3] = {sm_buffer(NULL, 256), sm_buffer(NULL, 256), sm_buffer(NULL, 256)};
  id args = sm_buffer(NULL, 16);
  uint32_t g[3] = {(uint32_t)groups.width, (uint32_t)groups.height, (uint32_t)groups.depth};
  memcpy(sm_contents(args), g, sizeof g);
  id p = sm_pipeline(sm_lib, "int_mod");
  id cb = SEND0(id, sm_queue, "commandBuffer");
  id enc = SEND0(id, cb, "computeCommandEncoder");
  SEND(void, (id, SEL, id), enc, "setComputePipelineState:", p);
  for (int i = 0; i < 3; i++)
    SEND(void, (id, SEL, id, NSUInteger, NSUInteger), enc, "setBuffer:offset:atIndex:", bufs[i],
         0ul, (NSUInteger)i);
  if (indirect)
    SEND(void, (id, SEL, id, NSUInteger, MTLSize), enc,
         "dispatchThreadgroupsWithIndirectBuffer:indirectBufferOffset:threadsPerThreadgroup:", args,
         0ul, SM_SIZE(1, 1, 1));
  else
    SEND(void, (id, SEL, MTLSize, MTLSize), enc,
         "dispatchThreadgroups:threadsPerThreadgroup:", groups, SM_SIZE(1, 1, 1));
  SEND0(void, enc, "endEncoding");
  SEND0(void, cb, "commit");
  SEND0(void, cb, "waitUntilCompleted");
  sm_release(p);
  sm_release(args);
  for (int i = 0; i < 3; i++) sm_release(bufs[i]);
  return cb;
}

/* Every dimension within 2^32 - 1, but 2^64 threadgroups or more in all: a
 * count that wrapped would complete having run none of the grid, or part
 * of it. The command buffer fails instead, direct or indirect. */
Test(faults, more_threadgroups_than_2_64_fail_instead_of_wrapping) {
  id cb = dispatch_groups(SM_SIZE(1ul << 31, 1ul << 31, 4), false);
  static const char *const direct[] = {"dispatchThreadgroups:threadsPerThreadgroup:",
                                       "{2147483648, 2147483648, 4} threadgroups are over 2^64",
                                       NULL};
  expect_fault(cb, direct);
  cb = dispatch_groups(SM_SIZE(UINT32_MAX, UINT32_MAX, UINT32_MAX), true);
  static const char *const indirect[] = {
      "kernel int_mod", "{4294967295, 4294967295, 4294967295} threadgroups are over 2^64", NULL};
  expect_fault(cb, indirect);
}

/* A program may block the fault signals (a thread that leaves signals to
 * another): softmetal's threads inherit its mask, yet a kernel fault still
 * fails only its command buffer, as a GPU fault would. */
Test(faults, a_kernel_fault_fails_its_command_buffer_where_the_program_blocks_fault_signals) {
  sigset_t faults;
  sigemptyset(&faults);
  sigaddset(&faults, SIGSEGV);
  sigaddset(&faults, SIGBUS);
  sigaddset(&faults, SIGFPE);
  sigaddset(&faults, SIGILL);
  cr_assert_eq(pthread_sigmask(SIG_BLOCK, &faults, NULL), 0);
  id bufs[2] = {sm_buffer(NULL, 8), sm_buffer(NULL, 64 * 4)};
  *(uint64_t *)sm_contents(bufs[0]) = 0x10;
  if (RUNNING_ON_VALGRIND) VALGRIND_DISABLE_ADDR_ERROR_REPORTING_IN_RANGE(0, 4096);
  static const char *const want[] = {"kernel wild_write", "at address 0x10", NULL};
  for (int i = 0; i < 4; i++) expect_fault(run_on(sm_queue, "wild_write", bufs, 2, 64, 16), want);
  if (RUNNING_ON_VALGRIND) VALGRIND_ENABLE_ADDR_ERROR_REPORTING_IN_RANGE(0, 4096);
  for (int i = 0; i < 2; i++) sm_release(bufs[i]);
}

/* The thread that waits for a command buffer may have a small stack (a
 * worker thread of the program's own pool); the kernels run as on a queue
 * thread whatever stack the waiter has. */
typedef struct {
  id cb;
} wait_arg;
static void *wait_for(void *arg) {
  SEND0(void, ((wait_arg *)arg)->cb, "waitUntilCompleted");
  return NULL;
}

Test(faults, a_thread_with_a_small_stack_may_wait_for_a_kernel_with_a_large_one) {
  enum { N = 16 };
  id in = sm_buffer(NULL, N * 4), out = sm_buffer(NULL, N * 4);
  uint32_t *pin = sm_contents(in);
  for (uint32_t i = 0; i < N; i++) pin[i] = i * 1021u;
  id p = sm_pipeline(sm_lib, "big_private");
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  cr_assert_eq(pthread_attr_setstacksize(&attr, 128 * 1024), 0);
  for (int round = 0; round < 32; round++) {
    memset(sm_contents(out), 0, N * 4);
    id bufs[2] = {in, out};
    id cb =
        sm_commit_cb(SEND0(id, p, "retain"), bufs, 2, SM_SIZE(N, 1, 1), SM_SIZE(N, 1, 1), false, 0);
    wait_arg a = {cb};
    pthread_t t;
    cr_assert_eq(pthread_create(&t, &attr, wait_for, &a), 0);
    cr_assert_eq(pthread_join(t, NULL), 0);
    cr_assert_eq(sm_u(cb, "status"), 4, "%s", sm_error_text(SEND0(id, cb, "error")));
    const float *o = sm_contents(out);
    for (uint32_t i = 0; i < N; i++)
      cr_assert_eq(o[i], (float)(((i * 1021u) & 65535u) ^ i), "out[%u] = %g", i, o[i]);
  }
  pthread_attr_destroy(&attr);
  sm_release(p);
  sm_release(in);
  sm_release(out);
}
