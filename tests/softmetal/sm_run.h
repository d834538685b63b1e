/* SPDX-License-Identifier: MIT */
/* Compile-and-run helpers for softmetal kernel tests: one device and queue,
 * buffers bound at indices 0..n-1, one dispatch per call. Tests that include
 * it call sm_run_open() (or sm_run_open_library()) in their suite init and
 * sm_run_close() in fini. */
#ifndef SM_RUN_H
#define SM_RUN_H

#include <criterion/criterion.h>
#include <stdbool.h>
#include <stddef.h>

#include "softmetal/sm_test.h"

static id sm_dev, sm_queue, sm_lib;
static void *sm_pool;

static inline void sm_run_open(void) {
  sm_dev = MTLCreateSystemDefaultDevice();
  sm_queue = SEND0(id, sm_dev, "newCommandQueue");
  sm_pool = objc_autoreleasePoolPush();
}
static inline void sm_run_close(void) {
  if (sm_lib) sm_release(sm_lib);
  sm_lib = 0;
  objc_autoreleasePoolPop(sm_pool);
  sm_release(sm_queue);
  sm_release(sm_dev);
  sm_check_all_released(__FILE__);
}

/* The library, or NULL with the compiler's diagnostics in *error; math_mode
 * < 0: no options (Metal's default, fast math), else MTLMathMode (0 Safe). */
static inline id sm_compile_mode(const char *src, long math_mode, id *error) {
  id options = 0;
  if (math_mode >= 0) {
    id fresh = SEND0(id, sm_class_named("MTLCompileOptions"), "alloc"); /* SEND0 evaluates */
    options = SEND0(id, fresh, "init");                                 /* its receiver twice */
    SEND(void, (id, SEL, NSInteger), options, "setMathMode:", (NSInteger)math_mode);
  }
  id lib = SEND(id, (id, SEL, id, id, id *), sm_dev,
                "newLibraryWithSource:options:error:", sm_str(src), options, error);
  if (options) sm_release(options);
  return lib;
}
static inline id sm_compile(const char *src, id *error) { return sm_compile_mode(src, -1, error); }
/* sm_run_open(), then sm_lib = the library of src (released by sm_run_close). */
static inline void sm_run_open_library(const char *src) {
  sm_run_open();
  id error = 0;
  sm_lib = sm_compile(src, &error);
  cr_assert_not_null(sm_lib, "%s", sm_error_text(error));
}
static inline id sm_pipeline(id lib, const char *name) {
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
static inline id sm_buffer(const void *data, size_t len) {
  id b = SEND(id, (id, SEL, NSUInteger, NSUInteger), sm_dev,
              "newBufferWithLength:options:", (NSUInteger)len, 0ul);
  cr_assert_not_null(b);
  void *p = SEND0(void *, b, "contents");
  if (data)
    memcpy(p, data, len);
  else
    memset(p, 0, len);
  return b;
}
static inline void *sm_contents(id b) { return SEND0(void *, b, "contents"); }

/* The pipeline of kernel specialized with bool function constants
 * values[i] at indices[i] (MTLDataTypeBool = 53). */
static inline id sm_pipeline_bools(id lib, const char *kernel, const NSUInteger *indices,
                                   const bool *values, int n) {
  id fresh = SEND0(id, sm_class_named("MTLFunctionConstantValues"), "alloc");
  id cv = SEND0(id, fresh, "init");
  for (int i = 0; i < n; i++)
    SEND(void, (id, SEL, const void *, NSUInteger, NSUInteger), cv,
         "setConstantValue:type:atIndex:", &values[i], 53ul, indices[i]);
  id error = 0;
  id fn = SEND(id, (id, SEL, id, id, id *), lib,
               "newFunctionWithName:constantValues:error:", sm_str(kernel), cv, &error);
  sm_release(cv);
  cr_assert_not_null(fn, "%s: %s", kernel, sm_error_text(error));
  id p = SEND(id, (id, SEL, id, id *), sm_dev, "newComputePipelineStateWithFunction:error:", fn,
              &error);
  cr_assert_not_null(p, "%s: %s", kernel, sm_error_text(error));
  sm_release(fn);
  return p;
}

/* Binds bufs[i] at index i (none where NULL), dispatches pipeline p,
 * commits, releases p and returns the command buffer (autoreleased);
 * groups=false: grid counts threads. sm_dispatch_cb also waits for it and
 * returns it finished, whatever its status. */
static inline id sm_commit_cb(id p, id *bufs, int n, MTLSize grid, MTLSize tg, bool groups,
                              NSUInteger tg_mem) {
  id cb = SEND0(id, sm_queue, "commandBuffer");
  id enc = SEND0(id, cb, "computeCommandEncoder");
  SEND(void, (id, SEL, id), enc, "setComputePipelineState:", p);
  for (int i = 0; i < n; i++)
    if (bufs[i])
      SEND(void, (id, SEL, id, NSUInteger, NSUInteger), enc, "setBuffer:offset:atIndex:", bufs[i],
           0ul, (NSUInteger)i);
  if (tg_mem)
    SEND(void, (id, SEL, NSUInteger, NSUInteger), enc,
         "setThreadgroupMemoryLength:atIndex:", tg_mem, 0ul);
  SEND(void, (id, SEL, MTLSize, MTLSize), enc,
       groups ? "dispatchThreadgroups:threadsPerThreadgroup:"
              : "dispatchThreads:threadsPerThreadgroup:",
       grid, tg);
  SEND0(void, enc, "endEncoding");
  SEND0(void, cb, "commit");
  sm_release(p);
  return cb;
}
static inline id sm_dispatch_cb(id p, id *bufs, int n, MTLSize grid, MTLSize tg, bool groups,
                                NSUInteger tg_mem) {
  id cb = sm_commit_cb(p, bufs, n, grid, tg, groups, tg_mem);
  SEND0(void, cb, "waitUntilCompleted");
  return cb;
}
/* The same, asserting that the command buffer completed. */
static inline void sm_dispatch_pipeline(id p, const char *kernel, id *bufs, int n, MTLSize grid,
                                        MTLSize tg, bool groups, NSUInteger tg_mem) {
  id cb = sm_dispatch_cb(p, bufs, n, grid, tg, groups, tg_mem);
  cr_assert_eq(sm_u(cb, "status"), 4 /* Completed */, "%s: %s", kernel,
               sm_error_text(SEND0(id, cb, "error")));
}
static inline void sm_dispatch(id lib, const char *kernel, id *bufs, int n, MTLSize grid,
                               MTLSize tg, bool groups, NSUInteger tg_mem) {
  sm_dispatch_pipeline(sm_pipeline(lib, kernel), kernel, bufs, n, grid, tg, groups, tg_mem);
}
#define SM_SIZE(w, h, d) ((MTLSize){(w), (h), (d)})

/* Compiles src (math_mode as sm_compile_mode), runs its kernel `k` on one
 * thread with buffer 0 = in (n_in floats) and buffer 1 = out (n floats),
 * and copies out into got. */
static inline void sm_run_k(const char *src, long math_mode, const float *in, size_t n_in,
                            float *got, size_t n) {
  id error = 0;
  id lib = sm_compile_mode(src, math_mode, &error);
  cr_assert_not_null(lib, "%s", sm_error_text(error));
  id bufs[2] = {sm_buffer(NULL, (n_in ? n_in : 1) * sizeof(float)),
                sm_buffer(NULL, n * sizeof(float))};
  if (n_in) memcpy(sm_contents(bufs[0]), in, n_in * sizeof(float));
  sm_dispatch(lib, "k", bufs, 2, SM_SIZE(1, 1, 1), SM_SIZE(1, 1, 1), false, 0);
  memcpy(got, sm_contents(bufs[1]), n * sizeof(float));
  for (int i = 0; i < 2; i++) sm_release(bufs[i]);
  sm_release(lib);
}

#endif
