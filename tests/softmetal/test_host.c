/* SPDX-License-Identifier: MIT */
/* softmetal's host API as Metal programs send it: start-up with pools, +new,
 * heaps and residency sets, a library from a file, debug groups, command
 * buffer times and handlers, events with listeners, capture, and the
 * Foundation classes around them. Messages go through objc_msg_lookup, as
 * C and C++ host code sends them. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "softmetal/sm_test.h"

#if __has_include(<valgrind/memcheck.h>)
#include <valgrind/memcheck.h>
#else
#define RUNNING_ON_VALGRIND 0
#define VALGRIND_DISABLE_ADDR_ERROR_REPORTING_IN_RANGE(a, n) ((void)(a), (void)(n))
#define VALGRIND_ENABLE_ADDR_ERROR_REPORTING_IN_RANGE(a, n) ((void)(a), (void)(n))
#endif

typedef struct {
  NSUInteger size, align;
} MTLSizeAndAlign;
typedef struct {
  NSInteger major, minor, patch;
} NSOperatingSystemVersion;
extern id MTLLibraryErrorDomain;
void NSLog(id fmt, ...);
id dispatch_data_create(const void *buffer, size_t size, void *queue, void *destructor);
void dispatch_release(id object);

enum { PAGE = 16384 };
#define OPT_SHARED 0ul
#define OPT_PRIVATE 32ul
#define OPT_UNTRACKED 256ul

static const char KERNEL[] =
    "#include <metal_stdlib>\n"
    "using namespace metal;\n"
    "kernel void scale(device float *out [[buffer(0)]], device const float *in [[buffer(1)]],\n"
    "                  uint i [[thread_position_in_grid]]) { out[i] = in[i] * FACTOR; }\n";

static id dev, queue;
static void *pool;
static id volatile keep[4]; /* reachable when a test aborts on purpose */

static id cls_new(const char *name) { return SEND0(id, sm_class_named(name), "new"); }
static id alloc_init(const char *name) {
  id o = SEND0(id, sm_class_named(name), "alloc");
  return SEND0(id, o, "init");
}

static void setup(void) {
  pool = objc_autoreleasePoolPush();
  dev = MTLCreateSystemDefaultDevice();
  queue = SEND0(id, dev, "newCommandQueue");
}
static void teardown(void) {
  sm_release(queue);
  sm_release(dev);
  objc_autoreleasePoolPop(pool);
  sm_check_all_released(__FILE__);
}
TestSuite(host, .init = setup, .fini = teardown, .timeout = 120);

/* The library of KERNEL with FACTOR defined through preprocessorMacros. */
static id scale_library(const char *factor, id *error) {
  id options = cls_new("MTLCompileOptions");
  id macros = SEND(id, (id, SEL, id, id), sm_class_named("NSDictionary"),
                   "dictionaryWithObject:forKey:", sm_str(factor), sm_str("FACTOR"));
  SEND(void, (id, SEL, id), options, "setPreprocessorMacros:", macros);
  SEND(void, (id, SEL, NSInteger), options, "setOptimizationLevel:", 0);
  SEND(void, (id, SEL, BOOL), options, "setEnableLogging:", 1);
  SEND(void, (id, SEL, NSInteger), options, "setMathFloatingPointFunctions:", 1);
  cr_assert_eq(SEND0(NSInteger, options, "mathFloatingPointFunctions"), 1);
  cr_assert_eq(SEND0(BOOL, options, "enableLogging"), 1);
  id lib = SEND(id, (id, SEL, id, id, id *), dev,
                "newLibraryWithSource:options:error:", sm_str(KERNEL), options, error);
  sm_release(options);
  return lib;
}

static id scale_pipeline(id lib) {
  id desc = cls_new("MTLFunctionDescriptor");
  SEND(void, (id, SEL, id), desc, "setName:", sm_str("scale"));
  id error = 0;
  id fn = SEND(id, (id, SEL, id, id *), lib, "newFunctionWithDescriptor:error:", desc, &error);
  cr_assert_not_null(fn, "%s", sm_error_text(error));
  sm_release(desc);
  id p =
      SEND(id, (id, SEL, id, id *), dev, "newComputePipelineStateWithFunction:error:", fn, &error);
  cr_assert_not_null(p, "%s", sm_error_text(error));
  sm_release(fn);
  return p;
}

/* A listener's block: (id<MTLSharedEvent>, uint64_t value). */
struct note_block {
  void *isa;
  int flags, reserved;
  void (*invoke)(struct note_block *, id, uint64_t);
  const struct sm_block_desc *desc;
  struct sm_test_ctx *ctx;
  uint64_t *seen;
};
static const struct sm_block_desc note_descriptor = {0, sizeof(struct note_block), NULL, NULL};
static void note_invoke(struct note_block *b, id event, uint64_t value) {
  b->ctx->arg = event;
  *b->seen = value;
  atomic_fetch_add(&b->ctx->calls, 1);
}
static void scheduled_invoke(struct sm_test_block *b, id cb) {
  /* A scheduled handler runs before the command buffer's work, times unset. */
  b->ctx->status_seen = SEND0(NSUInteger, cb, "status");
  b->ctx->len = SEND0(double, cb, "GPUEndTime") == 0.0;
  atomic_fetch_add(&b->ctx->calls, 1);
}

static bool wait_calls(struct sm_test_ctx *c, int n) {
  struct timespec ms = {0, 1000000};
  for (int i = 0; i < 5000 && atomic_load(&c->calls) < n; i++) nanosleep(&ms, NULL);
  return atomic_load(&c->calls) >= n;
}

Test(host, start_up_and_a_frame_as_real_programs_write_them) {
  void *frame = objc_autoreleasePoolPush();
  /* Start-up: the OS and GPU checks programs make before taking a path. */
  id info = SEND0(id, sm_class_named("NSProcessInfo"), "processInfo");
  NSOperatingSystemVersion v15 = {15, 0, 0}, v16 = {16, 0, 0};
  cr_assert(SEND(BOOL, (id, SEL, NSOperatingSystemVersion), info,
                 "isOperatingSystemAtLeastVersion:", v15));
  cr_assert(!SEND(BOOL, (id, SEL, NSOperatingSystemVersion), info,
                  "isOperatingSystemAtLeastVersion:", v16));
  cr_assert(SEND(BOOL, (id, SEL, NSInteger), dev, "supportsFamily:", 5001)); /* Metal3 */
  const char *arch = sm_utf8(SEND0(id, SEND0(id, dev, "architecture"), "name"));
  cr_assert_str_eq(arch, "applegpu_g15g");
  cr_assert_eq(sm_u(dev, "maxThreadgroupMemoryLength"), 32768);
  cr_assert_eq(SEND0(BOOL, dev, "isLowPower"), 0);
  cr_assert_eq(sm_u(dev, "location"), 0);

  /* A heap for the frame's buffers, kept resident by a residency set. */
  id hd = cls_new("MTLHeapDescriptor");
  SEND(void, (id, SEL, NSUInteger), hd, "setSize:", 4 * PAGE);
  SEND(void, (id, SEL, NSUInteger), hd, "setStorageMode:", 0);
  id heap = SEND(id, (id, SEL, id), dev, "newHeapWithDescriptor:", hd);
  cr_assert_not_null(heap);
  sm_release(hd);
  enum { N = 64 };
  id in = SEND(id, (id, SEL, NSUInteger, NSUInteger), heap,
               "newBufferWithLength:options:", N * sizeof(float), OPT_SHARED);
  id out = SEND(id, (id, SEL, NSUInteger, NSUInteger), heap,
                "newBufferWithLength:options:", 2 * N * sizeof(float), OPT_SHARED);
  id args = SEND(id, (id, SEL, NSUInteger, NSUInteger, NSUInteger), dev,
                 "newBufferWithLength:options:", 16, OPT_SHARED, 0);
  cr_assert(in && out && args);
  cr_assert_eq(SEND0(id, in, "heap"), heap);
  cr_assert_eq(sm_u(in, "hazardTrackingMode"), 1, "a heap's resources are untracked");
  id rd = cls_new("MTLResidencySetDescriptor");
  SEND(void, (id, SEL, NSUInteger), rd, "setInitialCapacity:", 8);
  id error = 0;
  id rset = SEND(id, (id, SEL, id, id *), dev, "newResidencySetWithDescriptor:error:", rd, &error);
  cr_assert_not_null(rset);
  sm_release(rd);
  SEND(void, (id, SEL, id), rset, "addAllocation:", heap);
  id list[2] = {args, args};
  SEND(void, (id, SEL, const id *, NSUInteger), rset, "addAllocations:count:", list, 2);
  cr_assert_eq(sm_u(rset, "allocationCount"), 2);
  cr_assert_eq(sm_u(rset, "allocatedSize"), 0, "sizes count from the first commit");
  SEND0(void, rset, "commit");
  cr_assert_eq(sm_u(rset, "allocatedSize"), 4 * PAGE + PAGE);
  SEND0(void, rset, "requestResidency");
  SEND(void, (id, SEL, id), queue, "addResidencySet:", rset);

  /* The library comes from a file in softmetal's container, next to the program. */
  id lib = scale_library("3.0f", &error);
  cr_assert_not_null(lib, "%s", sm_error_text(error));
  id pipeline = scale_pipeline(lib);
  sm_release(lib);

  float *src = SEND0(float *, in, "contents");
  for (int i = 0; i < N; i++) src[i] = (float)i;
  uint32_t groups[4] = {0, 4, 1, 1}; /* threadgroups {4, 1, 1} at offset 4 */
  memcpy(SEND0(void *, args, "contents"), groups, sizeof groups);

  id cbd = cls_new("MTLCommandBufferDescriptor");
  SEND(void, (id, SEL, NSUInteger), cbd, "setErrorOptions:", 1);
  id cb = SEND(id, (id, SEL, id), queue, "commandBufferWithDescriptor:", cbd);
  sm_release(cbd);
  cr_assert_eq(sm_u(cb, "errorOptions"), 1);
  SEND(void, (id, SEL, id), cb, "useResidencySet:", rset);
  SEND(void, (id, SEL, id), cb, "pushDebugGroup:", sm_str("frame"));
  struct sm_test_ctx sched = {0}, done = {0};
  struct sm_test_block sb = sm_block((void (*)(void))scheduled_invoke, &sched);
  struct sm_test_block db = SM_HANDLER_BLOCK(&done);
  SEND(void, (id, SEL, void *), cb, "addScheduledHandler:", &sb);
  SEND(void, (id, SEL, void *), cb, "addCompletedHandler:", &db);
  id enc = SEND0(id, cb, "computeCommandEncoder");
  SEND(void, (id, SEL, id), enc, "pushDebugGroup:", sm_str("scale"));
  SEND(void, (id, SEL, id), enc, "setComputePipelineState:", pipeline);
  id bufs[2] = {out, in};
  NSUInteger offs[2] = {0, 0};
  NSRange r = {0, 2};
  SEND(void, (id, SEL, const id *, const NSUInteger *, NSRange), enc,
       "setBuffers:offsets:withRange:", bufs, offs, r);
  SEND(void, (id, SEL, NSUInteger, NSUInteger), enc, "setBufferOffset:atIndex:", N * sizeof(float),
       0); /* the second half of out */
  SEND(void, (id, SEL, id, NSUInteger), enc, "useResource:usage:", args, 1);
  SEND(void, (id, SEL, id), enc, "useHeap:", heap);
  MTLSize tg = {16, 1, 1};
  SEND(void, (id, SEL, id, NSUInteger, MTLSize), enc,
       "dispatchThreadgroupsWithIndirectBuffer:indirectBufferOffset:threadsPerThreadgroup:", args,
       4, tg);
  SEND0(void, enc, "popDebugGroup");
  SEND0(void, enc, "endEncoding");
  SEND0(void, cb, "popDebugGroup");
  SEND0(void, cb, "commit");
  SEND0(void, cb, "waitUntilScheduled");
  SEND0(void, cb, "waitUntilCompleted");
  cr_assert_eq(sm_u(cb, "status"), 4, "%s", sm_error_text(SEND0(id, cb, "error")));
  cr_assert_eq(atomic_load(&sched.calls), 1);
  cr_assert_eq(sched.status_seen, 3, "scheduled handlers see Scheduled");
  cr_assert_eq(sched.len, 1);
  float *dst = SEND0(float *, out, "contents");
  for (int i = 0; i < N; i++) {
    cr_assert_eq(dst[i], 0.0f);
    cr_assert_eq(dst[N + i], 3.0f * (float)i);
  }
  double ks = SEND0(double, cb, "kernelStartTime"), gs = SEND0(double, cb, "GPUStartTime");
  double ge = SEND0(double, cb, "GPUEndTime"), ke = SEND0(double, cb, "kernelEndTime");
  cr_assert(ks > 0 && ks <= gs && gs <= ge && ge <= ke, "%f %f %f %f", ks, gs, ge, ke);
  cr_assert(wait_calls(&done, 1));

  /* An event the host listens to, signalled by the GPU. */
  id event = SEND0(id, dev, "newSharedEvent");
  id listener = alloc_init("MTLSharedEventListener");
  struct sm_test_ctx heard = {0};
  uint64_t seen = 0;
  struct note_block nb = {_NSConcreteStackBlock, 0,      0,    note_invoke,
                          &note_descriptor,      &heard, &seen};
  SEND(void, (id, SEL, id, uint64_t, void *), event, "notifyListener:atValue:block:", listener, 2,
       &nb);
  id cb2 = SEND0(id, queue, "commandBuffer");
  SEND(void, (id, SEL, id, uint64_t), cb2, "encodeSignalEvent:value:", event, 1);
  SEND0(void, cb2, "commit");
  cr_assert(SEND(BOOL, (id, SEL, uint64_t, uint64_t), event, "waitUntilSignaledValue:timeoutMS:", 1,
                 10000));
  cr_assert_eq(atomic_load(&heard.calls), 0, "value 1 does not reach 2");
  cr_assert(
      !SEND(BOOL, (id, SEL, uint64_t, uint64_t), event, "waitUntilSignaledValue:timeoutMS:", 2, 1));
  id cb3 = SEND0(id, queue, "commandBuffer");
  SEND(void, (id, SEL, id, uint64_t), cb3, "encodeSignalEvent:value:", event, 2);
  SEND0(void, cb3, "commit");
  SEND0(void, cb3, "waitUntilCompleted");
  cr_assert(wait_calls(&heard, 1));
  cr_assert_eq(seen, 2);
  cr_assert_eq(heard.arg, event);

  SEND0(void, rset, "endResidency");
  SEND(void, (id, SEL, id), queue, "removeResidencySet:", rset);
  sm_release(listener);
  sm_release(event);
  sm_release(pipeline);
  sm_release(rset);
  sm_release(in);
  sm_release(out);
  sm_release(args);
  sm_release(heap);
  objc_autoreleasePoolPop(frame); /* the command buffers, and what they retain */
  softmetal_quiesce();
  cr_assert_eq(sm_u(dev, "currentAllocatedSize"), 0);
}

Test(host, a_library_from_a_file_next_to_the_program) {
  char dir[] = "/tmp/sm-host-XXXXXX";
  cr_assert_not_null(mkdtemp(dir));
  char path[256];
  snprintf(path, sizeof path, "%s/default.metallib", dir);
  const char *src = "#define FACTOR 2.0f\n";
  size_t n1 = strlen(src), n2 = strlen(KERNEL);
  unsigned char head[32] = {'S', 'M', 'M', 'T', 'L', 'L', 'I', 'B', 1};
  uint64_t len = n1 + n2;
  memcpy(head + 24, &len, 8);
  FILE *f = fopen(path, "wb");
  cr_assert_not_null(f);
  fwrite(head, 1, 32, f);
  fwrite(src, 1, n1, f);
  fwrite(KERNEL, 1, n2, f);
  fclose(f);
  id error = 0;
  id lib = SEND(id, (id, SEL, id, id *), dev, "newLibraryWithFile:error:", sm_str(path), &error);
  cr_assert_not_null(lib, "%s", sm_error_text(error));
  id url = SEND(id, (id, SEL, id), sm_class_named("NSURL"), "fileURLWithPath:", sm_str(path));
  id lib2 = SEND(id, (id, SEL, id, id *), dev, "newLibraryWithURL:error:", url, &error);
  cr_assert_not_null(lib2, "%s", sm_error_text(error));
  id pipeline = scale_pipeline(lib2);
  sm_release(pipeline);
  sm_release(lib2);
  sm_release(lib);
  unlink(path);
  rmdir(dir);
  id none = SEND(id, (id, SEL, id, id *), dev, "newLibraryWithFile:error:", sm_str(path), &error);
  cr_assert_null(none);
  cr_assert_eq(SEND0(id, error, "domain"), MTLLibraryErrorDomain, "domains compare by pointer");
  cr_assert_eq(SEND0(NSInteger, error, "code"), 6);
}

Test(host, heaps_sub_allocate_and_return_nil_when_full) {
  MTLSizeAndAlign sa = SEND(MTLSizeAndAlign, (id, SEL, NSUInteger, NSUInteger), dev,
                            "heapBufferSizeAndAlignWithLength:options:", 100, OPT_PRIVATE);
  cr_assert_eq(sa.size, PAGE);
  cr_assert_eq(sa.align, PAGE);
  id hd = cls_new("MTLHeapDescriptor");
  cr_assert_eq(sm_u(hd, "storageMode"), 2, "Private by default, as Metal");
  SEND(void, (id, SEL, NSUInteger), hd, "setSize:", 3 * PAGE);
  id heap = SEND(id, (id, SEL, id), dev, "newHeapWithDescriptor:", hd);
  sm_release(hd);
  cr_assert_eq(sm_u(heap, "size"), 3 * PAGE);
  cr_assert_eq(sm_u(dev, "currentAllocatedSize"), 3 * PAGE, "the heap counts, not its buffers");
  id a = SEND(id, (id, SEL, NSUInteger, NSUInteger), heap, "newBufferWithLength:options:", 2 * PAGE,
              OPT_PRIVATE);
  cr_assert_not_null(a);
  cr_assert_eq(sm_u(a, "allocatedSize"), 2 * PAGE);
  cr_assert_eq(sm_u(heap, "usedSize"), 2 * PAGE);
  cr_assert_eq(SEND(NSUInteger, (id, SEL, NSUInteger), heap, "maxAvailableSizeWithAlignment:", 256),
               PAGE);
  cr_assert_null(SEND(id, (id, SEL, NSUInteger, NSUInteger), heap,
                      "newBufferWithLength:options:", PAGE + 1, OPT_PRIVATE),
                 "full: nil");
  cr_assert_null(SEND(id, (id, SEL, NSUInteger, NSUInteger), heap,
                      "newBufferWithLength:options:", 16, OPT_SHARED),
                 "storage must be the heap's");
  id b = SEND(id, (id, SEL, NSUInteger, NSUInteger), heap, "newBufferWithLength:options:", 16,
              OPT_PRIVATE);
  cr_assert_not_null(b);
  cr_assert_eq(sm_u(dev, "currentAllocatedSize"), 3 * PAGE);
  sm_release(a);
  cr_assert_eq(sm_u(heap, "usedSize"), PAGE);
  id c = SEND(id, (id, SEL, NSUInteger, NSUInteger), heap, "newBufferWithLength:options:", 2 * PAGE,
              OPT_PRIVATE);
  cr_assert_not_null(c, "a released buffer's space is reused");
  cr_assert_eq(SEND(NSUInteger, (id, SEL, NSUInteger), heap, "setPurgeableState:", 3), 2);
  cr_assert_eq(SEND(NSUInteger, (id, SEL, NSUInteger), heap, "setPurgeableState:", 1), 3);
  sm_release(b);
  sm_release(c);
  sm_release(heap);
  cr_assert_eq(sm_u(dev, "currentAllocatedSize"), 0);
}

Test(host, emptied_heaps_discard_their_contents) {
  id hd = cls_new("MTLHeapDescriptor");
  SEND(void, (id, SEL, NSUInteger), hd, "setSize:", PAGE);
  SEND(void, (id, SEL, NSUInteger), hd, "setStorageMode:", 0);
  id heap = SEND(id, (id, SEL, id), dev, "newHeapWithDescriptor:", hd);
  sm_release(hd);
  id b = SEND(id, (id, SEL, NSUInteger, NSUInteger), heap, "newBufferWithLength:options:", 64,
              OPT_SHARED);
  float *p = SEND0(float *, b, "contents");
  p[0] = 1.0f;
  SEND(NSUInteger, (id, SEL, NSUInteger), heap, "setPurgeableState:", 4);
  cr_assert(p[0] != p[0], "Empty: the contents are gone (NaN), not silently kept");
  sm_release(b);
  sm_release(heap);
}

Test(host, residency_sets_keep_membership_and_sizes) {
  id rd = cls_new("MTLResidencySetDescriptor");
  id rset = SEND(id, (id, SEL, id, id *), dev, "newResidencySetWithDescriptor:error:", rd, NULL);
  sm_release(rd);
  id b = SEND(id, (id, SEL, NSUInteger, NSUInteger), dev, "newBufferWithLength:options:", 100, 0ul);
  SEND(void, (id, SEL, id), rset, "addAllocation:", b);
  SEND(void, (id, SEL, id), rset, "addAllocation:", b);
  cr_assert_eq(sm_u(rset, "allocationCount"), 1);
  cr_assert(SEND(BOOL, (id, SEL, id), rset, "containsAllocation:", b));
  SEND0(void, rset, "commit");
  cr_assert_eq(sm_u(rset, "allocatedSize"), PAGE);
  SEND(void, (id, SEL, id), rset, "removeAllocation:", b);
  cr_assert(!SEND(BOOL, (id, SEL, id), rset, "containsAllocation:", b));
  cr_assert_eq(sm_u(rset, "allocatedSize"), PAGE, "until the next commit");
  SEND0(void, rset, "commit");
  cr_assert_eq(sm_u(rset, "allocatedSize"), 0);
  SEND(void, (id, SEL, id), rset, "addAllocation:", b);
  SEND0(void, rset, "removeAllAllocations");
  cr_assert_eq(sm_u(rset, "allocationCount"), 0);
  id sets[1] = {rset};
  SEND(void, (id, SEL, const id *, NSUInteger), queue, "addResidencySets:count:", sets, 1);
  SEND(void, (id, SEL, const id *, NSUInteger), queue, "removeResidencySets:count:", sets, 1);
  sm_release(b);
  sm_release(rset);
}

Test(host, encoding_errors_quote_the_open_debug_groups) {
  id cb = SEND0(id, queue, "commandBuffer");
  SEND(void, (id, SEL, id), cb, "pushDebugGroup:", sm_str("frame 7"));
  id enc = SEND0(id, cb, "computeCommandEncoder");
  SEND(void, (id, SEL, id), enc, "pushDebugGroup:", sm_str("blur"));
  SEND(void, (id, SEL, NSUInteger, NSUInteger), enc, "setBufferOffset:atIndex:", 16, 3);
  SEND0(void, enc, "popDebugGroup");
  SEND0(void, enc, "endEncoding");
  SEND0(void, cb, "popDebugGroup");
  SEND0(void, cb, "commit");
  SEND0(void, cb, "waitUntilCompleted");
  cr_assert_eq(sm_u(cb, "status"), 5);
  const char *text = sm_error_text(SEND0(id, cb, "error"));
  cr_assert(strstr(text, "no buffer is bound at index 3"), "%s", text);
  cr_assert(strstr(text, "(debug groups: 'frame 7' > 'blur')"), "%s", text);
}

Test(host, pop_without_push_aborts, .signal = SIGABRT) {
  id cb = SEND0(id, queue, "commandBuffer");
  keep[0] = cb;
  SEND0(void, cb, "popDebugGroup");
}

Test(host, capture_is_refused_with_an_error_and_scopes_keep_state) {
  id mgr = SEND0(id, sm_class_named("MTLCaptureManager"), "sharedCaptureManager");
  cr_assert_eq(mgr, SEND0(id, sm_class_named("MTLCaptureManager"), "sharedCaptureManager"));
  cr_assert(!SEND(BOOL, (id, SEL, NSInteger), mgr, "supportsDestination:", 2));
  id desc = cls_new("MTLCaptureDescriptor");
  SEND(void, (id, SEL, id), desc, "setCaptureObject:", dev);
  SEND(void, (id, SEL, NSInteger), desc, "setDestination:", 2);
  id error = 0;
  cr_assert(
      !SEND(BOOL, (id, SEL, id, id *), mgr, "startCaptureWithDescriptor:error:", desc, &error));
  cr_assert(strstr(sm_error_text(error), "not supported"), "%s", sm_error_text(error));
  cr_assert_str_eq(sm_utf8(SEND0(id, error, "domain")), "MTLCaptureErrorDomain");
  cr_assert(!SEND0(BOOL, mgr, "isCapturing"));
  SEND0(void, mgr, "stopCapture");
  id scope = SEND(id, (id, SEL, id), mgr, "newCaptureScopeWithCommandQueue:", queue);
  SEND(void, (id, SEL, id), mgr, "setDefaultCaptureScope:", scope);
  cr_assert_eq(SEND0(id, mgr, "defaultCaptureScope"), scope);
  SEND0(void, scope, "beginScope");
  SEND0(void, scope, "endScope");
  cr_assert_eq(SEND0(id, scope, "commandQueue"), queue);
  SEND(void, (id, SEL, id), mgr, "setDefaultCaptureScope:", (id)0);
  sm_release(scope);
  sm_release(desc);
}

Test(host, an_mtlevent_has_no_host_side_value, .signal = SIGABRT) {
  id e = SEND0(id, dev, "newEvent");
  keep[0] = e;
  SEND0(uint64_t, e, "signaledValue");
}

Test(host, linked_functions_are_refused, .signal = SIGABRT) {
  id lf = SEND0(id, sm_class_named("MTLLinkedFunctions"), "linkedFunctions");
  id one = SEND(id, (id, SEL, id), sm_class_named("NSArray"), "arrayWithObject:", sm_str("f"));
  SEND(void, (id, SEL, id), lf, "setFunctions:", one);
}

Test(host, foundation_as_metal_programs_use_it) {
  id s = SEND(id, (id, SEL, const char *), sm_class_named("NSString"),
              "stringWithUTF8String:", "/opt/models");
  id p = SEND(id, (id, SEL, id), s, "stringByAppendingPathComponent:", sm_str("w.bin"));
  cr_assert_str_eq(sm_utf8(p), "/opt/models/w.bin");
  cr_assert(SEND(BOOL, (id, SEL, id), p, "containsString:", sm_str("models/")));
  cr_assert_eq(SEND0(id, p, "description"), p);
  char *heap_text = strdup("owned");
  id blank = SEND0(id, sm_class_named("NSString"), "alloc");
  id owned = SEND(id, (id, SEL, void *, NSUInteger, NSUInteger, BOOL), blank,
                  "initWithBytesNoCopy:length:encoding:freeWhenDone:", heap_text, 5, 4, 1);
  cr_assert_str_eq(sm_utf8(owned), "owned");
  sm_release(owned);
  id f = SEND(id, (id, SEL, id, ...), sm_class_named("NSString"),
              "stringWithFormat:", sm_str("%@ has %d kernels, %.1f ms, %s, %lu"), sm_str("lib"), 3,
              1.25, "ok", 7ul);
  cr_assert_str_eq(sm_utf8(f), "lib has 3 kernels, 1.2 ms, ok, 7");

  id m = SEND0(id, sm_class_named("NSMutableDictionary"), "dictionary");
  SEND(void, (id, SEL, id, id), m, "setObject:forKey:",
       SEND(id, (id, SEL, int), sm_class_named("NSNumber"), "numberWithInt:", 42), sm_str("n"));
  id n = SEND(id, (id, SEL, id), m, "objectForKey:", sm_str("n"));
  cr_assert_eq(SEND0(int, n, "intValue"), 42);
  cr_assert_eq(sm_u(m, "count"), 1);
  id arr = SEND0(id, sm_class_named("NSMutableArray"), "array");
  SEND(void, (id, SEL, id), arr, "addObject:", s);
  SEND(void, (id, SEL, id), arr, "addObject:", p);
  cr_assert_eq(SEND0(id, arr, "firstObject"), s);
  cr_assert_eq(SEND(id, (id, SEL, NSUInteger), arr, "objectAtIndexedSubscript:", 1), p);
  cr_assert(SEND(BOOL, (id, SEL, Class), arr, "isKindOfClass:", objc_getClass("NSArray")));

  id err = 0;
  SEND(id, (id, SEL, id, id, id *), dev,
       "newLibraryWithSource:options:error:", sm_str("kernel void k( {"), (id)0, &err);
  cr_assert_eq(SEND0(id, err, "domain"), MTLLibraryErrorDomain);
  id ui = SEND0(id, err, "userInfo");
  id desc = SEND(id, (id, SEL, id), ui, "objectForKey:", sm_str("NSLocalizedDescription"));
  cr_assert_eq(desc, SEND0(id, err, "localizedDescription"));
  cr_assert(strncmp(sm_utf8(SEND0(id, err, "description")),
                    "Error Domain=MTLLibraryErrorDomain Code=3", 41) == 0,
            "%s", sm_utf8(SEND0(id, err, "description")));

  id lock = cls_new("NSLock");
  SEND0(void, lock, "lock");
  cr_assert(!SEND0(BOOL, lock, "tryLock"));
  SEND0(void, lock, "unlock");
  sm_release(lock);

  id inner = alloc_init("NSAutoreleasePool");
  sm_str("temporary");
  long before = softmetal_live_count("NSString");
  SEND0(void, inner, "drain");
  cr_assert_eq(softmetal_live_count("NSString"), before - 1);

  id bundle = SEND0(id, sm_class_named("NSBundle"), "mainBundle");
  char exe[512];
  ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
  exe[k] = 0;
  const char *base = strrchr(exe, '/') + 1;
  id found = SEND(id, (id, SEL, id, id), bundle, "pathForResource:ofType:", sm_str(base), (id)0);
  cr_assert_str_eq(sm_utf8(found), exe);
  cr_assert_null(SEND(id, (id, SEL, id, id), bundle,
                      "pathForResource:ofType:", sm_str("no-such-resource"), sm_str("metallib")));
  NSLog(sm_str("softmetal host test: %@ %d"), sm_str("NSLog"), 1);
}

static void destructor_invoke(struct sm_test_block *b) { atomic_fetch_add(&b->ctx->calls, 1); }

Test(host, dispatch_data_runs_its_destructor_block_once) {
  static char bytes[] = "not copied";
  struct sm_test_ctx ctx = {0};
  struct sm_test_block blk = sm_block((void (*)(void))destructor_invoke, &ctx);
  id data = dispatch_data_create(bytes, sizeof bytes, NULL, &blk);
  cr_assert_not_null(data);
  cr_assert_eq(atomic_load(&ctx.calls), 0);
  dispatch_release(data);
  cr_assert_eq(atomic_load(&ctx.calls), 1);
  cr_assert_eq(atomic_load(&ctx.disposes), 1);
}

/* Objective-C classes of the program's own derive from NSObject and take +new. */
static int g_inits;
static id counted_init(id self, SEL cmd) {
  (void)cmd;
  g_inits++;
  struct objc_super sup = {self, class_getSuperclass(object_getClass(self))};
  return ((id(*)(id, SEL))(void (*)(void))objc_msg_lookup_super(&sup, sel_registerName("init")))(
      self, sel_registerName("init"));
}
Test(host, program_classes_subclass_nsobject) {
  Class c = objc_allocateClassPair(objc_getClass("NSObject"), "HostTestAllocator", 0);
  class_addIvar(c, "count", sizeof(long), 3, "q");
  class_addMethod(c, sel_registerName("init"), (IMP)(void (*)(void))counted_init, "@@:");
  objc_registerClassPair(c);
  id o = SEND0(id, (id)c, "new");
  cr_assert_not_null(o);
  cr_assert_eq(g_inits, 1);
  cr_assert(SEND(BOOL, (id, SEL, Class), o, "isKindOfClass:", objc_getClass("NSObject")));
  cr_assert_eq(softmetal_live_count("NSObject"), 1);
  sm_release(o);
}

extern id NSFileType, NSFileTypeRegular, NSFileTypeSymbolicLink;

/* How programs look for their library next to the executable. */
Test(host, finding_files_next_to_the_program) {
  id args = SEND0(id, SEND0(id, sm_class_named("NSProcessInfo"), "processInfo"), "arguments");
  id exe = SEND(id, (id, SEL, NSUInteger), args, "objectAtIndexedSubscript:", 0);
  id dir = SEND0(id, exe, "stringByDeletingLastPathComponent");
  cr_assert(strstr(sm_utf8(exe), sm_utf8(dir)) == sm_utf8(exe) || sm_utf8(dir)[0] == 0);
  char tmp[] = "/tmp/sm-files-XXXXXX";
  cr_assert_not_null(mkdtemp(tmp));
  id parts[2] = {sm_str(tmp), sm_str("kernels.metal")};
  id list = SEND(id, (id, SEL, const id *, NSUInteger), sm_class_named("NSArray"),
                 "arrayWithObjects:count:", parts, 2);
  id path = SEND(id, (id, SEL, id), sm_class_named("NSString"), "pathWithComponents:", list);
  char expect[128];
  snprintf(expect, sizeof expect, "%s/kernels.metal", tmp);
  cr_assert_str_eq(sm_utf8(path), expect);
  cr_assert_str_eq(sm_utf8(SEND0(id, path, "lastPathComponent")), "kernels.metal");
  cr_assert_str_eq(sm_utf8(SEND(id, (id, SEL, NSUInteger), path, "substringToIndex:", 1)), "/");
  id fm = SEND0(id, sm_class_named("NSFileManager"), "defaultManager");
  cr_assert(!SEND(BOOL, (id, SEL, id), fm, "isReadableFileAtPath:", path));
  id error = 0;
  cr_assert_null(SEND(id, (id, SEL, id, NSUInteger, id *), sm_class_named("NSString"),
                      "stringWithContentsOfFile:encoding:error:", path, 4, &error));
  cr_assert_eq(SEND0(NSInteger, error, "code"), 260);
  FILE *f = fopen(expect, "w");
  fputs("kernel void k() {}\n", f);
  fclose(f);
  char link[160];
  snprintf(link, sizeof link, "%s/default.metal", tmp);
  cr_assert_eq(symlink("kernels.metal", link), 0);
  cr_assert(SEND(BOOL, (id, SEL, id), fm, "isReadableFileAtPath:", path));
  id text = SEND(id, (id, SEL, id, NSUInteger, id *), sm_class_named("NSString"),
                 "stringWithContentsOfFile:encoding:error:", path, 4, &error);
  cr_assert_str_eq(sm_utf8(text), "kernel void k() {}\n");
  id atts =
      SEND(id, (id, SEL, id, id *), fm, "attributesOfItemAtPath:error:", sm_str(link), &error);
  cr_assert_eq(SEND(id, (id, SEL, id), atts, "objectForKey:", NSFileType), NSFileTypeSymbolicLink);
  id dest = SEND(id, (id, SEL, id, id *), fm,
                 "destinationOfSymbolicLinkAtPath:error:", sm_str(link), &error);
  cr_assert_str_eq(sm_utf8(dest), "kernels.metal");
  atts = SEND(id, (id, SEL, id, id *), fm, "attributesOfItemAtPath:error:", path, &error);
  cr_assert_eq(SEND(id, (id, SEL, id), atts, "objectForKey:", NSFileType), NSFileTypeRegular);
  unlink(link);
  unlink(expect);
  rmdir(tmp);
}

Test(host, placement_heaps_place_buffers_and_aliasable_slots_are_reused) {
  id hd = cls_new("MTLHeapDescriptor");
  SEND(void, (id, SEL, NSUInteger), hd, "setSize:", 2 * PAGE);
  SEND(void, (id, SEL, NSInteger), hd, "setType:", 1); /* Placement */
  id heap = SEND(id, (id, SEL, id), dev, "newHeapWithDescriptor:", hd);
  cr_assert_not_null(heap);
  cr_assert_null(SEND(id, (id, SEL, NSUInteger, NSUInteger), heap,
                      "newBufferWithLength:options:", 64, OPT_PRIVATE),
                 "placement heaps place buffers at an offset");
  cr_assert_null(SEND(id, (id, SEL, NSUInteger, NSUInteger, NSUInteger), heap,
                      "newBufferWithLength:options:offset:", 64, OPT_PRIVATE, 100),
                 "offsets are aligned");
  id a = SEND(id, (id, SEL, NSUInteger, NSUInteger, NSUInteger), heap,
              "newBufferWithLength:options:offset:", 64, OPT_PRIVATE, PAGE);
  cr_assert_not_null(a);
  cr_assert_eq(sm_u(a, "heapOffset"), PAGE);
  sm_release(a);
  sm_release(heap);

  SEND(void, (id, SEL, NSInteger), hd, "setType:", 0); /* Automatic */
  heap = SEND(id, (id, SEL, id), dev, "newHeapWithDescriptor:", hd);
  sm_release(hd);
  id b = SEND(id, (id, SEL, NSUInteger, NSUInteger), heap, "newBufferWithLength:options:", 2 * PAGE,
              OPT_PRIVATE);
  cr_assert_not_null(b);
  cr_assert_eq(SEND(NSUInteger, (id, SEL, NSUInteger), heap, "maxAvailableSizeWithAlignment:", 1),
               0);
  cr_assert(!SEND0(BOOL, b, "isAliasable"));
  SEND0(void, b, "makeAliasable");
  cr_assert(SEND0(BOOL, b, "isAliasable"));
  cr_assert_eq(sm_u(heap, "usedSize"), 0);
  id c = SEND(id, (id, SEL, NSUInteger, NSUInteger), heap, "newBufferWithLength:options:", PAGE,
              OPT_PRIVATE);
  cr_assert_not_null(c, "an aliasable buffer's memory is free for new ones");
  sm_release(b);
  cr_assert_eq(sm_u(heap, "usedSize"), PAGE);
  sm_release(c);
  sm_release(heap);
}

/* How mlx looks for its metallib: bundles and their URLs. */
Test(host, bundles_as_libraries_are_searched) {
  id main = SEND0(id, sm_class_named("NSBundle"), "mainBundle");
  const char *dir = SEND0(const char *, SEND0(id, main, "bundleURL"), "fileSystemRepresentation");
  cr_assert_str_eq(dir, sm_utf8(SEND0(id, main, "bundlePath")));
  id all = SEND0(id, sm_class_named("NSBundle"), "allBundles");
  cr_assert_eq(sm_u(all, "count"), 1);
  cr_assert_eq(SEND(id, (id, SEL, NSUInteger), all, "objectAtIndex:", 0), main);
  cr_assert_eq(sm_u(SEND0(id, sm_class_named("NSBundle"), "allFrameworks"), "count"), 0);
  char tmp[] = "/tmp/sm-bundle-XXXXXX";
  cr_assert_not_null(mkdtemp(tmp));
  char file[96];
  snprintf(file, sizeof file, "%s/mlx.metallib", tmp);
  FILE *f = fopen(file, "w");
  fclose(f);
  id blank = SEND0(id, sm_class_named("NSBundle"), "alloc");
  id bundle = SEND(id, (id, SEL, id), blank, "initWithPath:", sm_str(tmp));
  cr_assert_not_null(bundle);
  id found = SEND(id, (id, SEL, id, id), bundle, "pathForResource:ofType:", sm_str("mlx"),
                  sm_str("metallib"));
  cr_assert_str_eq(sm_utf8(found), file);
  cr_assert_str_eq(
      SEND0(const char *, SEND0(id, bundle, "resourceURL"), "fileSystemRepresentation"), tmp);
  sm_release(bundle);
  unlink(file);
  rmdir(tmp);
  blank = SEND0(id, sm_class_named("NSBundle"), "alloc");
  cr_assert_null(SEND(id, (id, SEL, id), blank, "initWithPath:", sm_str(tmp)), "no such directory");
}

/* ------------------------------------------------------------- argument buffers */
/* Tier 2 argument buffers: a struct of two device pointers and a scalar,
 * with explicit [[id]]s, and one with implicit ids and an array. */
static const char ARGBUF_KERNEL[] =
    "#include <metal_stdlib>\n"
    "using namespace metal;\n"
    "struct Args {\n"
    "  device const float *in [[id(0)]];\n"
    "  device float *out [[id(1)]];\n"
    "  float scale [[id(2)]];\n"
    "};\n"
    "struct Many { device float *p[2]; uint n; device const float *q; };\n"
    "kernel void axpb(constant Args &args [[buffer(0)]], uint i [[thread_position_in_grid]]) {\n"
    "  args.out[i] = args.in[i] * args.scale + 1.0f;\n"
    "}\n"
    "kernel void many(device const Many *m [[buffer(1)]], device float *plain [[buffer(0)]],\n"
    "                 uint i [[thread_position_in_grid]]) {\n"
    "  m->p[i % 2][i / 2] = m->q[i] + float(m->n);\n"
    "}\n";

static id argbuf_function(const char *name) {
  id error = 0;
  id lib = SEND(id, (id, SEL, id, id, id *), dev,
                "newLibraryWithSource:options:error:", sm_str(ARGBUF_KERNEL), (id)0, &error);
  cr_assert_not_null(lib, "%s", sm_error_text(error));
  id fn = SEND(id, (id, SEL, id), lib, "newFunctionWithName:", sm_str(name));
  cr_assert_not_null(fn);
  sm_release(lib);
  return fn;
}

static void run_argbuf(id fn, NSUInteger index, id argbuf, id *uses, size_t nuses, NSUInteger n) {
  id error = 0;
  id p =
      SEND(id, (id, SEL, id, id *), dev, "newComputePipelineStateWithFunction:error:", fn, &error);
  cr_assert_not_null(p, "%s", sm_error_text(error));
  id cb = SEND0(id, queue, "commandBuffer");
  cr_assert_eq(SEND0(unsigned char, cb, "retainedReferences"), 1);
  id enc = SEND0(id, cb, "computeCommandEncoder");
  SEND(void, (id, SEL, id), enc, "setComputePipelineState:", p);
  SEND(void, (id, SEL, id, NSUInteger, NSUInteger), enc, "setBuffer:offset:atIndex:", argbuf, 0,
       index);
  if (index != 0)
    SEND(void, (id, SEL, id, NSUInteger, NSUInteger), enc, "setBuffer:offset:atIndex:", argbuf, 0,
         0);
  for (size_t u = 0; u < nuses; u++)
    SEND(void, (id, SEL, id, NSUInteger), enc, "useResource:usage:", uses[u], 3);
  MTLSize grid = {n, 1, 1}, tg = {4, 1, 1};
  SEND(void, (id, SEL, MTLSize, MTLSize), enc, "dispatchThreads:threadsPerThreadgroup:", grid, tg);
  SEND0(void, enc, "endEncoding");
  SEND0(void, cb, "commit");
  SEND0(void, cb, "waitUntilCompleted");
  cr_assert_eq(sm_u(cb, "status"), 4, "%s", sm_error_text(SEND0(id, cb, "error")));
  sm_release(p);
}

Test(host, argument_encoder_encodes_pointers_and_data) {
  enum { N = 16 };
  id fn = argbuf_function("axpb");
  id ae = SEND(id, (id, SEL, NSUInteger), fn, "newArgumentEncoderWithBufferIndex:", 0);
  cr_assert_not_null(ae);
  cr_assert_eq(sm_u(ae, "encodedLength"), 24, "two pointers and a float, clang's layout");
  cr_assert_eq(sm_u(ae, "alignment"), 8);
  cr_assert_eq(SEND0(id, ae, "device"), dev);
  SEND(void, (id, SEL, id), ae, "setLabel:", sm_str("args"));
  cr_assert_str_eq(sm_utf8(SEND0(id, ae, "label")), "args");
  id in = SEND(id, (id, SEL, NSUInteger, NSUInteger), dev,
               "newBufferWithLength:options:", (N + 4) * sizeof(float), OPT_SHARED);
  id out = SEND(id, (id, SEL, NSUInteger, NSUInteger), dev,
                "newBufferWithLength:options:", N * sizeof(float), OPT_SHARED);
  /* the argument buffer's second element: encoded at 24 */
  id argbuf = SEND(id, (id, SEL, NSUInteger, NSUInteger), dev,
                   "newBufferWithLength:options:", 2 * 24, OPT_SHARED);
  float *src = SEND0(float *, in, "contents");
  for (int i = 0; i < N + 4; i++) src[i] = (float)i * 0.5f - 3.0f;
  SEND(void, (id, SEL, id, NSUInteger, NSUInteger), ae,
       "setArgumentBuffer:startOffset:arrayElement:", argbuf, 0, 1);
  id bufs[2] = {in, out};
  NSUInteger offs[2] = {4 * sizeof(float), 0};
  NSRange r = {0, 2};
  SEND(void, (id, SEL, const id *, const NSUInteger *, NSRange), ae,
       "setBuffers:offsets:withRange:", bufs, offs, r);
  float *scale = SEND(float *, (id, SEL, NSUInteger), ae, "constantDataAtIndex:", 2);
  unsigned char *ab = SEND0(unsigned char *, argbuf, "contents");
  cr_assert_eq((unsigned char *)scale, ab + 24 + 16, "the float follows the two pointers");
  *scale = 2.5f;
  /* the kernel reads the element at offset 24: point the binding there */
  id error = 0;
  id p =
      SEND(id, (id, SEL, id, id *), dev, "newComputePipelineStateWithFunction:error:", fn, &error);
  cr_assert_not_null(p, "%s", sm_error_text(error));
  id cb = SEND0(id, queue, "commandBuffer");
  cr_assert_eq(SEND0(unsigned char, cb, "retainedReferences"), 1);
  id enc = SEND0(id, cb, "computeCommandEncoder");
  SEND(void, (id, SEL, id), enc, "setComputePipelineState:", p);
  SEND(void, (id, SEL, id, NSUInteger, NSUInteger), enc, "setBuffer:offset:atIndex:", argbuf, 24,
       0);
  SEND(void, (id, SEL, id, NSUInteger), enc, "useResource:usage:", in, 1);
  SEND(void, (id, SEL, id, NSUInteger), enc, "useResource:usage:", out, 2);
  MTLSize grid = {N, 1, 1}, tg = {4, 1, 1};
  SEND(void, (id, SEL, MTLSize, MTLSize), enc, "dispatchThreads:threadsPerThreadgroup:", grid, tg);
  SEND0(void, enc, "endEncoding");
  SEND0(void, cb, "commit");
  SEND0(void, cb, "waitUntilCompleted");
  cr_assert_eq(sm_u(cb, "status"), 4, "%s", sm_error_text(SEND0(id, cb, "error")));
  const float *dst = SEND0(float *, out, "contents");
  for (int i = 0; i < N; i++) cr_assert_eq(dst[i], src[i + 4] * 2.5f + 1.0f, "out[%d]", i);
  sm_release(p);
  sm_release(ae);
  sm_release(argbuf);
  sm_release(in);
  sm_release(out);
  sm_release(fn);
}

Test(host, argument_encoder_implicit_ids_and_arrays) {
  enum { N = 8 };
  id fn = argbuf_function("many");
  id ae = SEND(id, (id, SEL, NSUInteger), fn, "newArgumentEncoderWithBufferIndex:", 1);
  cr_assert_not_null(ae);
  cr_assert_eq(sm_u(ae, "encodedLength"), 32, "p[2], n and q");
  id a = SEND(id, (id, SEL, NSUInteger, NSUInteger), dev,
              "newBufferWithLength:options:", N / 2 * sizeof(float), OPT_SHARED);
  id b = SEND(id, (id, SEL, NSUInteger, NSUInteger), dev,
              "newBufferWithLength:options:", N / 2 * sizeof(float), OPT_SHARED);
  id q = SEND(id, (id, SEL, NSUInteger, NSUInteger), dev,
              "newBufferWithLength:options:", N * sizeof(float), OPT_SHARED);
  id argbuf = SEND(id, (id, SEL, NSUInteger, NSUInteger), dev, "newBufferWithLength:options:", 32,
                   OPT_SHARED);
  float *qs = SEND0(float *, q, "contents");
  for (int i = 0; i < N; i++) qs[i] = (float)(i * i);
  SEND(void, (id, SEL, id, NSUInteger), ae, "setArgumentBuffer:offset:", argbuf, 0);
  /* ids: p[0] 0, p[1] 1, n 2, q 3 */
  SEND(void, (id, SEL, id, NSUInteger, NSUInteger), ae, "setBuffer:offset:atIndex:", a, 0, 0);
  SEND(void, (id, SEL, id, NSUInteger, NSUInteger), ae, "setBuffer:offset:atIndex:", b, 0, 1);
  *SEND(uint32_t *, (id, SEL, NSUInteger), ae, "constantDataAtIndex:", 2) = 7;
  SEND(void, (id, SEL, id, NSUInteger, NSUInteger), ae, "setBuffer:offset:atIndex:", q, 0, 3);
  id uses[3] = {a, b, q};
  run_argbuf(fn, 1, argbuf, uses, 3, N);
  id unretained = SEND0(id, queue, "commandBufferWithUnretainedReferences");
  cr_assert_eq(SEND0(unsigned char, unretained, "retainedReferences"), 0);
  const float *pa = SEND0(float *, a, "contents"), *pb = SEND0(float *, b, "contents");
  for (int i = 0; i < N; i++)
    cr_assert_eq((i % 2 ? pb : pa)[i / 2], (float)(i * i) + 7.0f, "element %d", i);
  sm_release(ae);
  sm_release(argbuf);
  sm_release(a);
  sm_release(b);
  sm_release(q);
  sm_release(fn);
}

/* Runs fn(objs) in a child process and checks that it aborts with a
 * message containing want. */
struct host_abort {
  void (*fn)(id *);
  id *objs;
};
static void host_abort_run(void *arg) {
  struct host_abort *h = arg;
  h->fn(h->objs);
}
static void expect_abort(void (*fn)(id *), id *objs, const char *want) {
  struct host_abort h = {fn, objs};
  char text[4096];
  sm_expect_abort(host_abort_run, &h, text, sizeof text);
  cr_assert(strstr(text, want), "'%s' not in: %s", want, text);
}

static void set_buffer_3(id *o) {
  SEND(void, (id, SEL, id, NSUInteger, NSUInteger), o[0], "setBuffer:offset:atIndex:", o[1], 0, 3);
}
static void set_buffer_0(id *o) {
  SEND(void, (id, SEL, id, NSUInteger, NSUInteger), o[0], "setBuffer:offset:atIndex:", o[1], 0, 0);
}
static void set_buffer_2(id *o) {
  SEND(void, (id, SEL, id, NSUInteger, NSUInteger), o[0], "setBuffer:offset:atIndex:", o[1], 0, 2);
}
static void constant_data_0(id *o) {
  SEND(void *, (id, SEL, NSUInteger), o[0], "constantDataAtIndex:", 0);
}
static void set_arg_buffer(id *o) {
  SEND(void, (id, SEL, id, NSUInteger), o[0], "setArgumentBuffer:offset:", o[1], 0);
}
static void set_arg_buffer_at_4(id *o) {
  SEND(void, (id, SEL, id, NSUInteger), o[0], "setArgumentBuffer:offset:", o[1], 4);
}
static void encoder_of_0(id *o) {
  SEND(id, (id, SEL, NSUInteger), o[0], "newArgumentEncoderWithBufferIndex:", 0);
}
static void encoder_of_31(id *o) {
  SEND(id, (id, SEL, NSUInteger), o[0], "newArgumentEncoderWithBufferIndex:", 31);
}
static void device_encoder(id *o) {
  SEND(id, (id, SEL, id), o[0], "newArgumentEncoderWithArguments:", (id)0);
}

Test(host, argument_encoder_misuse_aborts_with_a_message) {
  id fn = argbuf_function("axpb");
  id ae = SEND(id, (id, SEL, NSUInteger), fn, "newArgumentEncoderWithBufferIndex:", 0);
  cr_assert_not_null(ae);
  id argbuf = SEND(id, (id, SEL, NSUInteger, NSUInteger), dev, "newBufferWithLength:options:", 48,
                   OPT_SHARED);
  id small = SEND(id, (id, SEL, NSUInteger, NSUInteger), dev, "newBufferWithLength:options:", 16,
                  OPT_SHARED);
  id o[2] = {ae, argbuf};
  expect_abort(set_buffer_0, o, "setBuffer:offset:atIndex:]: no argument buffer");
  SEND(void, (id, SEL, id, NSUInteger), ae, "setArgumentBuffer:offset:", argbuf, 0);
  expect_abort(set_buffer_3, o, "index = 3 is no member of the argument buffer");
  expect_abort(set_buffer_2, o, "index 2 is a data member, not a buffer pointer");
  expect_abort(constant_data_0, o, "index 0 is a buffer pointer, not data");
  expect_abort(set_arg_buffer_at_4, o, "offset 4 is not a multiple of alignment 8");
  id s[2] = {ae, small};
  expect_abort(set_arg_buffer, s, "offset 0 + encodedLength 24 exceeds the buffer's length 16");
  id f[1] = {fn};
  expect_abort(encoder_of_31, f, "bufferIndex = 31 must be < 31");
  id d[1] = {dev};
  expect_abort(device_encoder, d, "newArgumentEncoderWithArguments:]: not supported");
  sm_release(small);
  sm_release(argbuf);
  sm_release(ae);
  sm_release(fn);
}

Test(host, argument_encoder_of_a_plain_pointer_aborts_with_a_message) {
  id fn = argbuf_function("many");
  id ae = SEND(id, (id, SEL, NSUInteger), fn, "newArgumentEncoderWithBufferIndex:", 1);
  cr_assert_not_null(ae); /* the function's code is made here, not in the child */
  id f[1] = {fn};
  expect_abort(encoder_of_0, f, "buffer 0 of the function is not an argument buffer");
  sm_release(ae);
  sm_release(fn);
}

Test(host, argument_buffer_holding_gpu_address_faults) {
  /* gpuAddress is no host pointer in softmetal: a kernel dereferencing one
   * fails the command buffer */
  id fn = argbuf_function("axpb");
  id out = SEND(id, (id, SEL, NSUInteger, NSUInteger), dev, "newBufferWithLength:options:", 64,
                OPT_SHARED);
  id argbuf = SEND(id, (id, SEL, NSUInteger, NSUInteger), dev, "newBufferWithLength:options:", 24,
                   OPT_SHARED);
  uint64_t *slots = SEND0(uint64_t *, argbuf, "contents");
  slots[0] = SEND0(uint64_t, out, "gpuAddress");
  slots[1] = SEND0(uint64_t, out, "gpuAddress");
  id error = 0;
  id p =
      SEND(id, (id, SEL, id, id *), dev, "newComputePipelineStateWithFunction:error:", fn, &error);
  cr_assert_not_null(p, "%s", sm_error_text(error));
  id cb = SEND0(id, queue, "commandBuffer");
  id enc = SEND0(id, cb, "computeCommandEncoder");
  SEND(void, (id, SEL, id), enc, "setComputePipelineState:", p);
  SEND(void, (id, SEL, id, NSUInteger, NSUInteger), enc, "setBuffer:offset:atIndex:", argbuf, 0, 0);
  MTLSize grid = {4, 1, 1}, tg = {4, 1, 1};
  SEND(void, (id, SEL, MTLSize, MTLSize), enc, "dispatchThreads:threadsPerThreadgroup:", grid, tg);
  SEND0(void, enc, "endEncoding");
  /* memcheck would report the reads this test makes on purpose */
  if (RUNNING_ON_VALGRIND) VALGRIND_DISABLE_ADDR_ERROR_REPORTING_IN_RANGE(slots[0], 64);
  SEND0(void, cb, "commit");
  SEND0(void, cb, "waitUntilCompleted");
  if (RUNNING_ON_VALGRIND) VALGRIND_ENABLE_ADDR_ERROR_REPORTING_IN_RANGE(slots[0], 64);
  cr_assert_eq(sm_u(cb, "status"), 5, "a fault fails the command buffer");
  const char *text = sm_error_text(SEND0(id, cb, "error"));
  cr_assert(strstr(text, "kernel axpb") && strstr(text, "invalid memory"), "%s", text);
  sm_release(p);
  sm_release(argbuf);
  sm_release(out);
  sm_release(fn);
}

/* Two passes of one command buffer: the first writes untracked x through an
 * argument buffer, the second reads it through another; use_resource says
 * whether each pass names x with useResource:usage:, fence whether a fence
 * orders them. heap: x is a buffer of an (untracked) heap, and the second
 * pass names the heap instead, with useHeap: (1) or useHeaps:count: (2). */
static NSUInteger argbuf_two_passes_heap(bool use_resource, bool fence, int heap_use) {
  enum { N = 8 };
  id fn = argbuf_function("axpb");
  id ae = SEND(id, (id, SEL, NSUInteger), fn, "newArgumentEncoderWithBufferIndex:", 0);
  id a = SEND(id, (id, SEL, NSUInteger, NSUInteger), dev,
              "newBufferWithLength:options:", N * sizeof(float), OPT_SHARED);
  id heap = 0, x;
  if (heap_use) {
    id hd = cls_new("MTLHeapDescriptor");
    SEND(void, (id, SEL, NSUInteger), hd, "setSize:", PAGE);
    SEND(void, (id, SEL, NSUInteger), hd, "setStorageMode:", 0);
    heap = SEND(id, (id, SEL, id), dev, "newHeapWithDescriptor:", hd);
    sm_release(hd);
    x = SEND(id, (id, SEL, NSUInteger, NSUInteger), heap,
             "newBufferWithLength:options:", N * sizeof(float), OPT_SHARED);
    cr_assert_eq(sm_u(x, "hazardTrackingMode"), 1, "a heap's buffers are untracked");
  } else {
    x = SEND(id, (id, SEL, NSUInteger, NSUInteger), dev,
             "newBufferWithLength:options:", N * sizeof(float), OPT_SHARED | OPT_UNTRACKED);
  }
  id b = SEND(id, (id, SEL, NSUInteger, NSUInteger), dev,
              "newBufferWithLength:options:", N * sizeof(float), OPT_SHARED);
  id argbuf = SEND(id, (id, SEL, NSUInteger, NSUInteger), dev, "newBufferWithLength:options:", 48,
                   OPT_SHARED);
  float *src = SEND0(float *, a, "contents");
  for (int i = 0; i < N; i++) src[i] = (float)i;
  id ins[2] = {a, x}, outs[2] = {x, b};
  for (NSUInteger k = 0; k < 2; k++) {
    SEND(void, (id, SEL, id, NSUInteger, NSUInteger), ae,
         "setArgumentBuffer:startOffset:arrayElement:", argbuf, 0, k);
    SEND(void, (id, SEL, id, NSUInteger, NSUInteger), ae, "setBuffer:offset:atIndex:", ins[k], 0,
         0);
    SEND(void, (id, SEL, id, NSUInteger, NSUInteger), ae, "setBuffer:offset:atIndex:", outs[k], 0,
         1);
    *SEND(float *, (id, SEL, NSUInteger), ae, "constantDataAtIndex:", 2) = 2.0f;
  }
  id error = 0;
  id p =
      SEND(id, (id, SEL, id, id *), dev, "newComputePipelineStateWithFunction:error:", fn, &error);
  cr_assert_not_null(p, "%s", sm_error_text(error));
  id f = SEND0(id, dev, "newFence");
  id cb = SEND0(id, queue, "commandBuffer");
  for (NSUInteger k = 0; k < 2; k++) {
    id enc = SEND0(id, cb, "computeCommandEncoder");
    if (fence && k == 1) SEND(void, (id, SEL, id), enc, "waitForFence:", f);
    SEND(void, (id, SEL, id), enc, "setComputePipelineState:", p);
    SEND(void, (id, SEL, id, NSUInteger, NSUInteger), enc, "setBuffer:offset:atIndex:", argbuf,
         24 * k, 0);
    if (use_resource && heap_use && k == 1) {
      if (heap_use == 1)
        SEND(void, (id, SEL, id), enc, "useHeap:", heap);
      else
        SEND(void, (id, SEL, const id *, NSUInteger), enc, "useHeaps:count:", &heap, 1);
      SEND(void, (id, SEL, const id *, NSUInteger, NSUInteger), enc,
           "useResources:count:usage:", &outs[k], 1, 2);
    } else if (use_resource) {
      id rs[2] = {ins[k], outs[k]};
      SEND(void, (id, SEL, id, NSUInteger), enc, "useResource:usage:", rs[0], 1);
      SEND(void, (id, SEL, const id *, NSUInteger, NSUInteger), enc,
           "useResources:count:usage:", rs + 1, 1, 2);
    }
    MTLSize grid = {N, 1, 1}, tg = {4, 1, 1};
    SEND(void, (id, SEL, MTLSize, MTLSize), enc, "dispatchThreads:threadsPerThreadgroup:", grid,
         tg);
    if (fence && k == 0) SEND(void, (id, SEL, id), enc, "updateFence:", f);
    SEND0(void, enc, "endEncoding");
  }
  SEND0(void, cb, "commit");
  SEND0(void, cb, "waitUntilCompleted");
  NSUInteger status = sm_u(cb, "status");
  if (status == 5) {
    const char *text = sm_error_text(SEND0(id, cb, "error"));
    cr_assert(
        strstr(text, "untracked buffer hazard") &&
            strstr(text, "(dispatchThreads:threadsPerThreadgroup:, kernel axpb) reads buffer"),
        "%s", text);
  } else {
    const float *dst = SEND0(float *, b, "contents");
    for (int i = 0; i < N; i++)
      cr_assert_eq(dst[i], ((float)i * 2.0f + 1.0f) * 2.0f + 1.0f, "b[%d]", i);
  }
  sm_release(f);
  sm_release(p);
  sm_release(argbuf);
  sm_release(a);
  sm_release(x);
  sm_release(heap);
  sm_release(b);
  sm_release(ae);
  sm_release(fn);
  return status;
}
static NSUInteger argbuf_two_passes(bool use_resource, bool fence) {
  return argbuf_two_passes_heap(use_resource, fence, 0);
}

Test(host, use_resource_makes_argument_buffer_buffers_hazard_checked) {
  cr_assert_eq(argbuf_two_passes(true, false), 5, "no fence between the passes");
  cr_assert_eq(argbuf_two_passes(true, true), 4, "the fence orders them");
  /* as in Metal, a buffer reached only through an argument buffer is not
   * tracked: without useResource: the hazard goes unseen */
  cr_assert_eq(argbuf_two_passes(false, false), 4);
}

/* useHeap: declares the heap's buffers read by the pass (Metal: read-only),
 * so an untracked heap buffer another pass wrote is hazard checked. */
Test(host, use_heap_makes_heap_buffers_hazard_checked) {
  cr_assert_eq(argbuf_two_passes_heap(true, false, 1), 5, "useHeap:, no fence");
  cr_assert_eq(argbuf_two_passes_heap(true, false, 2), 5, "useHeaps:count:, no fence");
  cr_assert_eq(argbuf_two_passes_heap(true, true, 1), 4, "the fence orders them");
  cr_assert_eq(argbuf_two_passes_heap(false, false, 1), 4, "nothing names the heap");
}
