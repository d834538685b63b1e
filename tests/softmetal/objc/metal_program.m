/* SPDX-License-Identifier: MIT */
/* A Metal host program as a Mac developer writes it, built only with
 * softmetal's shipped headers (<Foundation/Foundation.h>, <Metal/Metal.h>)
 * and the flags of softmetal.pc: clang -fobjc-runtime=gcc -fblocks
 * -I<include>/softmetal. A device, a queue, buffers (one on memory from
 * vm_allocate, without a copy), a library from source with a function
 * constant, a pipeline, a dispatch with threadgroup memory and a barrier;
 * the results are checked. Exits 0 when every check holds. */
#import <Foundation/Foundation.h>
#import <Metal/Metal.h>

static int failures;
#define CHECK(cond, ...)                                                       \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                            \
      fputc('\n', stderr);                                                     \
      failures++;                                                              \
    }                                                                          \
  } while (0)

/* Each threadgroup sums its 64 inputs through threadgroup memory, scaled
 * by a function constant; every thread also writes its input plus one. */
static NSString *const source =
    @"#include <metal_stdlib>\n"
     "using namespace metal;\n"
     "constant float scale [[function_constant(0)]];\n"
     "kernel void group_sum(device const float *in [[buffer(0)]],\n"
     "                      device float *sums [[buffer(1)]],\n"
     "                      device float *plus [[buffer(2)]],\n"
     "                      threadgroup float *scratch [[threadgroup(0)]],\n"
     "                      uint gid [[thread_position_in_grid]],\n"
     "                      uint lid [[thread_position_in_threadgroup]],\n"
     "                      uint tg [[threadgroup_position_in_grid]],\n"
     "                      uint n [[threads_per_threadgroup]]) {\n"
     "  scratch[lid] = in[gid];\n"
     "  plus[gid] = in[gid] + 1.0f;\n"
     "  for (uint s = n / 2; s > 0; s /= 2) {\n"
     "    threadgroup_barrier(mem_flags::mem_threadgroup);\n"
     "    if (lid < s) scratch[lid] += scratch[lid + s];\n"
     "  }\n"
     "  if (lid == 0) sums[tg] = scratch[0] * scale;\n"
     "}\n";

int main(void) {
  @autoreleasepool {
    id<MTLDevice> device = MTLCreateSystemDefaultDevice();
    CHECK(device != nil, "no device");
    if (!device) return 1;
    CHECK(device.name.length > 0, "device name");
    CHECK([device supportsFamily:MTLGPUFamilyApple1] || [device supportsFamily:MTLGPUFamilyMac2],
          "a device of no family");
    id<MTLCommandQueue> queue = [device newCommandQueue];

    enum { GROUPS = 8, WIDTH = 64, N = GROUPS * WIDTH };
    /* Page-aligned memory from Mach, wrapped without a copy. */
    vm_address_t address = 0;
    vm_size_t page = (vm_size_t)sysconf(_SC_PAGESIZE);
    kern_return_t kr = vm_allocate(mach_task_self(), &address, page, VM_FLAGS_ANYWHERE);
    CHECK(kr == KERN_SUCCESS && address % page == 0, "vm_allocate: %d", kr);
    float *host = (float *)address;
    CHECK(host[0] == 0.0f && host[N - 1] == 0.0f, "vm_allocate's memory is zero-filled");
    for (int i = 0; i < N; i++) host[i] = (float)(i % 7);
    id<MTLBuffer> in = [device newBufferWithBytesNoCopy:host
                                                 length:page
                                                options:MTLResourceStorageModeShared
                                            deallocator:nil];
    CHECK(in != nil && [in contents] == host, "no-copy buffer");
    id<MTLBuffer> sums = [device newBufferWithLength:GROUPS * sizeof(float)
                                             options:MTLResourceStorageModeShared];
    id<MTLBuffer> plus = [device newBufferWithLength:N * sizeof(float)
                                             options:MTLResourceStorageModeShared];

    NSError *error = nil;
    MTLCompileOptions *options = [[MTLCompileOptions alloc] init];
    id<MTLLibrary> library = [device newLibraryWithSource:source options:options error:&error];
    [options release];
    CHECK(library != nil, "%s", error ? error.localizedDescription.UTF8String : "");
    MTLFunctionConstantValues *constants = [[MTLFunctionConstantValues alloc] init];
    float scale = 0.5f;
    [constants setConstantValue:&scale type:MTLDataTypeFloat atIndex:0];
    id<MTLFunction> function = [library newFunctionWithName:@"group_sum"
                                             constantValues:constants
                                                      error:&error];
    [constants release];
    CHECK(function != nil, "%s", error ? error.localizedDescription.UTF8String : "");
    id<MTLComputePipelineState> pipeline = [device newComputePipelineStateWithFunction:function
                                                                                 error:&error];
    CHECK(pipeline != nil, "%s", error ? error.localizedDescription.UTF8String : "");
    if (!pipeline) return 1;
    CHECK(pipeline.maxTotalThreadsPerThreadgroup >= WIDTH, "%lu",
          (unsigned long)pipeline.maxTotalThreadsPerThreadgroup);

    id<MTLCommandBuffer> cb = [queue commandBuffer];
    __block MTLCommandBufferStatus seen = MTLCommandBufferStatusNotEnqueued;
    dispatch_semaphore_t done = dispatch_semaphore_create(0);
    [cb addCompletedHandler:^(id<MTLCommandBuffer> b) {
      seen = b.status;
      dispatch_semaphore_signal(done);
    }];
    id<MTLComputeCommandEncoder> enc = [cb computeCommandEncoder];
    [enc setComputePipelineState:pipeline];
    [enc setBuffer:in offset:0 atIndex:0];
    [enc setBuffer:sums offset:0 atIndex:1];
    [enc setBuffer:plus offset:0 atIndex:2];
    [enc setThreadgroupMemoryLength:WIDTH * sizeof(float) atIndex:0];
    [enc dispatchThreadgroups:MTLSizeMake(GROUPS, 1, 1)
        threadsPerThreadgroup:MTLSizeMake(WIDTH, 1, 1)];
    [enc endEncoding];
    [cb commit];
    [cb waitUntilCompleted];
    CHECK(cb.status == MTLCommandBufferStatusCompleted, "%s",
          cb.error ? cb.error.localizedDescription.UTF8String : "");
    CHECK(dispatch_semaphore_wait(done, dispatch_time(DISPATCH_TIME_NOW, 10 * NSEC_PER_SEC)) == 0,
          "the completed handler never ran");
    CHECK(seen == MTLCommandBufferStatusCompleted, "handler saw status %lu", (unsigned long)seen);
    dispatch_release(done);

    const float *s = (const float *)[sums contents];
    const float *p = (const float *)[plus contents];
    for (int g = 0; g < GROUPS; g++) {
      float want = 0;
      for (int i = 0; i < WIDTH; i++) want += (float)((g * WIDTH + i) % 7);
      CHECK(s[g] == want * 0.5f, "group %d: %g, want %g", g, s[g], want * 0.5f);
    }
    int wrong = 0;
    for (int i = 0; i < N; i++) wrong += p[i] != (float)(i % 7) + 1.0f;
    CHECK(wrong == 0, "%d of %d wrong", wrong, N);

    [pipeline release];
    [function release];
    [library release];
    [in release];
    [sums release];
    [plus release];
    [queue release];
    [device release];
    CHECK(vm_deallocate(mach_task_self(), address, page) == KERN_SUCCESS, "vm_deallocate");
  }
  if (failures) return 1;
  printf("metal_program: all checks passed\n");
  return 0;
}
