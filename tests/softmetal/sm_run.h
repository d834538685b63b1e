/* Compile-and-run helpers for softmetal kernel tests: one device and queue,
 * buffers bound at indices 0..n-1, one dispatch per call. Tests that include
 * it call sm_run_open() in their suite init and sm_run_close() in fini. */
#ifndef SM_RUN_H
#define SM_RUN_H

#include <criterion/criterion.h>
#include <stdbool.h>
#include <stddef.h>

#include "softmetal/sm_test.h"

static id sm_dev, sm_queue;
static void *sm_pool;

static void sm_run_open(void) {
  sm_dev = MTLCreateSystemDefaultDevice();
  sm_queue = SEND0(id, sm_dev, "newCommandQueue");
  sm_pool = objc_autoreleasePoolPush();
}
static void sm_run_close(void) {
  objc_autoreleasePoolPop(sm_pool);
  sm_release(sm_queue);
  sm_release(sm_dev);
  cr_assert_eq(sm_live(), 0, "every object released");
}

/* The library, or NULL with the compiler's diagnostics in *error. */
static id sm_compile(const char *src, id *error) {
  return SEND(id, (id, SEL, id, id, id *), sm_dev, "newLibraryWithSource:options:error:",
              sm_str(src), (id)0, error);
}
static id sm_pipeline(id lib, const char *name) {
  id fn = SEND(id, (id, SEL, id), lib, "newFunctionWithName:", sm_str(name));
  cr_assert_not_null(fn, "kernel %s", name);
  id error = 0;
  id p = SEND(id, (id, SEL, id, id *), sm_dev, "newComputePipelineStateWithFunction:error:", fn,
              &error);
  cr_assert_not_null(p, "%s: %s", name, sm_error_text(error));
  sm_release(fn);
  return p;
}
/* A shared buffer of len bytes holding a copy of data (zeros when data is NULL). */
static id sm_buffer(const void *data, size_t len) {
  id b = SEND(id, (id, SEL, NSUInteger, NSUInteger), sm_dev, "newBufferWithLength:options:",
              (NSUInteger)len, 0ul);
  cr_assert_not_null(b);
  void *p = SEND0(void *, b, "contents");
  if (data) memcpy(p, data, len);
  else memset(p, 0, len);
  return b;
}
static void *sm_contents(id b) { return SEND0(void *, b, "contents"); }

/* Binds bufs[i] at index i and dispatches; groups=false: grid counts threads. */
static void sm_dispatch(id lib, const char *kernel, id *bufs, int n, MTLSize grid, MTLSize tg,
                        bool groups, NSUInteger tg_mem) {
  id p = sm_pipeline(lib, kernel);
  id cb = SEND0(id, sm_queue, "commandBuffer");
  id enc = SEND0(id, cb, "computeCommandEncoder");
  SEND(void, (id, SEL, id), enc, "setComputePipelineState:", p);
  for (int i = 0; i < n; i++)
    SEND(void, (id, SEL, id, NSUInteger, NSUInteger), enc, "setBuffer:offset:atIndex:", bufs[i],
         0ul, (NSUInteger)i);
  if (tg_mem)
    SEND(void, (id, SEL, NSUInteger, NSUInteger), enc, "setThreadgroupMemoryLength:atIndex:",
         tg_mem, 0ul);
  SEND(void, (id, SEL, MTLSize, MTLSize), enc,
       groups ? "dispatchThreadgroups:threadsPerThreadgroup:"
              : "dispatchThreads:threadsPerThreadgroup:",
       grid, tg);
  SEND0(void, enc, "endEncoding");
  SEND0(void, cb, "commit");
  SEND0(void, cb, "waitUntilCompleted");
  cr_assert_eq(sm_u(cb, "status"), 4 /* Completed */, "%s: %s", kernel,
               sm_error_text(SEND0(id, cb, "error")));
  sm_release(p);
}
#define SM_SIZE(w, h, d) ((MTLSize){(w), (h), (d)})

#endif
