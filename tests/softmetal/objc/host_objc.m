/* SPDX-License-Identifier: MIT */
/* softmetal's host API from Objective-C, built by clang for GNU libobjc
 * (-fobjc-runtime=gcc, manual reference counting): the start-up and frame
 * of test_host.c as Objective-C programs write them. Exits 0 when every
 * check holds. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#import "SMFoundationMetal.h"
#include "softmetal.h"

static int failures;
#define CHECK(cond, ...)                                                        \
  do {                                                                          \
    if (!(cond)) {                                                              \
      fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond);  \
      fprintf(stderr, __VA_ARGS__);                                             \
      fputc('\n', stderr);                                                      \
      failures++;                                                               \
    }                                                                           \
  } while (0)

/* A class of the program's own, as allocators and caches are. */
@interface BufferCache : NSObject {
  NSMutableArray *buffers;
  int hits;
}
- (void)keep:(id<MTLBuffer>)b;
- (NSUInteger)count;
@end
@implementation BufferCache
- (id)init {
  self = [super init];
  if (self) buffers = [[NSMutableArray alloc] init];
  return self;
}
- (void)keep:(id<MTLBuffer>)b {
  [buffers addObject:b];
  hits++;
}
- (NSUInteger)count { return [buffers count]; }
- (void)dealloc {
  [buffers release];
  [super dealloc];
}
@end

static const char *kernel_source =
    "#include <metal_stdlib>\n"
    "using namespace metal;\n"
    "kernel void scale(device float *out [[buffer(0)]], device const float *in [[buffer(1)]],\n"
    "                  uint i [[thread_position_in_grid]]) { out[i] = in[i] * FACTOR; }\n";

static void run(void) {
  id<MTLDevice> device = MTLCreateSystemDefaultDevice();
  NSOperatingSystemVersion v15 = {15, 0, 0};
  CHECK([[NSProcessInfo processInfo] isOperatingSystemAtLeastVersion:v15], "macOS 15");
  CHECK([device supportsFamily:MTLGPUFamilyMetal3], "Metal3");
  CHECK([device.architecture.name isEqualToString:@"applegpu_g15g"], "%s",
        device.architecture.name.UTF8String);
  CHECK([device.name containsString:@"softmetal"], "%s", device.name.UTF8String);

  MTLHeapDescriptor *hd = [MTLHeapDescriptor new];
  hd.size = 1 << 16;
  hd.storageMode = MTLStorageModeShared;
  id<MTLHeap> heap = [device newHeapWithDescriptor:hd];
  [hd release];
  CHECK(heap != nil && heap.size == 1 << 16, "heap");
  MTLResidencySetDescriptor *rd = [[MTLResidencySetDescriptor alloc] init];
  NSError *error = nil;
  id<MTLResidencySet> set = [device newResidencySetWithDescriptor:rd error:&error];
  [rd release];
  [set addAllocation:heap];
  [set commit];
  [set requestResidency];
  CHECK(set.allocatedSize == 1 << 16, "%lu", set.allocatedSize);
  id<MTLCommandQueue> queue = [device newCommandQueue];
  [queue addResidencySet:set];

  MTLCompileOptions *options = [MTLCompileOptions new];
  options.preprocessorMacros = @{@"FACTOR" : @"2.5f"};
  id<MTLLibrary> lib = [device newLibraryWithSource:[NSString stringWithUTF8String:kernel_source]
                                            options:options
                                              error:&error];
  [options release];
  CHECK(lib != nil, "%s", error ? error.localizedDescription.UTF8String : "");
  id<MTLFunction> fn = [lib newFunctionWithName:@"scale"];
  id<MTLComputePipelineState> pipeline = [device newComputePipelineStateWithFunction:fn error:&error];
  CHECK(pipeline != nil, "pipeline");

  enum { N = 256 };
  BufferCache *cache = [BufferCache new];
  id<MTLBuffer> in = [heap newBufferWithLength:N * sizeof(float) options:MTLResourceStorageModeShared];
  id<MTLBuffer> out = [heap newBufferWithLength:N * sizeof(float) options:MTLResourceStorageModeShared];
  in.label = @"input";
  CHECK([in.label isEqualToString:@"input"], "label");
  CHECK(in.heap == heap, "heap of a heap buffer");
  [cache keep:in];
  [cache keep:out];
  CHECK([cache count] == 2, "cache");
  float *src = (float *)[in contents];
  for (int i = 0; i < N; i++) src[i] = (float)i;

  id<MTLCommandBuffer> cb = [queue commandBuffer];
  cb.label = @"frame";
  [cb pushDebugGroup:@"scale pass"];
  __block int completed = 0; /* read after waitUntilCompleted */
  [cb addCompletedHandler:^(id<MTLCommandBuffer> done) {
    completed = done.status == MTLCommandBufferStatusCompleted ? 1 : -1;
  }];
  id<MTLComputeCommandEncoder> enc = [cb computeCommandEncoder];
  [enc pushDebugGroup:@"scale"];
  [enc setComputePipelineState:pipeline];
  [enc setBuffer:out offset:0 atIndex:0];
  [enc setBuffer:in offset:0 atIndex:1];
  [enc useResource:in usage:MTLResourceUsageRead];
  MTLSize grid = {N, 1, 1}, tg = {64, 1, 1};
  [enc dispatchThreads:grid threadsPerThreadgroup:tg];
  [enc popDebugGroup];
  [enc endEncoding];
  [cb popDebugGroup];
  [cb commit];
  [cb waitUntilCompleted];
  CHECK(cb.status == MTLCommandBufferStatusCompleted, "%s",
        cb.error ? cb.error.localizedDescription.UTF8String : "");
  for (int i = 0; i < 5000 && completed == 0; i++) usleep(1000); /* handlers may run later */
  CHECK(completed == 1, "completed handler saw %d", completed);
  CHECK(cb.GPUStartTime > 0 && cb.GPUEndTime >= cb.GPUStartTime, "times %f %f",
        cb.GPUStartTime, cb.GPUEndTime);
  const float *dst = (const float *)[out contents];
  int wrong = 0;
  for (int i = 0; i < N; i++) wrong += dst[i] != 2.5f * (float)i;
  CHECK(wrong == 0, "%d wrong results", wrong);

  /* A listener hears the GPU's signal. */
  id<MTLSharedEvent> event = [device newSharedEvent];
  MTLSharedEventListener *listener = [[MTLSharedEventListener alloc] initWithDispatchQueue:NULL];
  __block uint64_t heard = 0;
  [event notifyListener:listener atValue:1 block:^(id<MTLSharedEvent> e, uint64_t value) {
    (void)e;
    heard = value;
  }];
  id<MTLCommandBuffer> cb2 = [queue commandBuffer];
  [cb2 encodeSignalEvent:event value:1];
  [cb2 commit];
  CHECK([event waitUntilSignaledValue:1 timeoutMS:10000], "signal");
  for (int i = 0; i < 5000 && heard == 0; i++) usleep(1000);
  CHECK(heard == 1, "listener heard %llu", (unsigned long long)heard);

  /* Capture is refused with an error. */
  MTLCaptureDescriptor *cd = [MTLCaptureDescriptor new];
  cd.captureObject = device;
  cd.destination = MTLCaptureDestinationGPUTraceDocument;
  NSError *cap = nil;
  CHECK(![[MTLCaptureManager sharedCaptureManager] startCaptureWithDescriptor:cd error:&cap] &&
            cap != nil, "capture refused");
  [cd release];

  /* Foundation: collections, literals, fast enumeration, formats. */
  NSArray *names = @[ @"a", @"b", @"c" ];
  NSMutableArray *seen = [NSMutableArray array];
  for (NSString *s in names) [seen addObject:s];
  /* Object subscripting (a[i], d[k]) needs the non-fragile ABI, which
   * clang's GCC runtime lacks: messages instead. */
  CHECK([seen count] == 3 && [[seen objectAtIndexedSubscript:2] isEqualToString:@"c"],
        "enumeration");
  NSDictionary *d = @{@"n" : @42, @"x" : @1.5};
  CHECK([[d objectForKey:@"n"] intValue] == 42 && [[d objectForKey:@"x"] doubleValue] == 1.5,
        "dictionary");
  NSString *f = [NSString stringWithFormat:@"%@=%d", @"n", [[d objectForKey:@"n"] intValue]];
  CHECK([f isEqualToString:@"n=42"], "%s", f.UTF8String);
  NSLog(@"softmetal Objective-C host test: %@ on %@", f, device.name);
  NSError *missing = nil;
  CHECK([device newLibraryWithFile:@"/nonexistent.metallib" error:&missing] == nil &&
            missing.domain == MTLLibraryErrorDomain, "library error domain");
  NSLock *lock = [NSLock new];
  [lock lock];
  [lock unlock];
  [lock release];

  [set endResidency];
  [listener release];
  [event release];
  [cache release];
  [in release];
  [out release];
  [pipeline release];
  [fn release];
  [lib release];
  [queue release];
  [set release];
  [heap release];
  [device release];
}

int main(void) {
  @autoreleasepool {
    run();
  }
  softmetal_quiesce();
  struct softmetal_stats st;
  softmetal_stats(&st);
  CHECK(st.live_objects == 0, "%ld objects alive", st.live_objects);
  if (failures) return 1;
  printf("ok\n");
  return 0;
}
