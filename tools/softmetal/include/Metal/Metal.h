/* SPDX-License-Identifier: MIT */
/* softmetal's <Metal/Metal.h>: Metal's compute API as softmetal answers it,
 * declared from Apple's public API (selector names, enum values and struct
 * layouts as Apple's headers give them) for clang's GNU runtime
 * (-fobjc-runtime=gcc, manual reference counting). Render, texture and
 * sampler API are not declared: softmetal runs compute work only. */
#ifndef SOFTMETAL_METAL_H
#define SOFTMETAL_METAL_H
#include <Foundation/Foundation.h>
#include <dispatch/dispatch.h>

/* ---- types */
typedef struct {
  NSUInteger width, height, depth;
} MTLSize;
static inline MTLSize MTLSizeMake(NSUInteger width, NSUInteger height, NSUInteger depth) {
  MTLSize s = {width, height, depth};
  return s;
}
typedef struct {
  NSUInteger x, y, z;
} MTLOrigin;
static inline MTLOrigin MTLOriginMake(NSUInteger x, NSUInteger y, NSUInteger z) {
  MTLOrigin o = {x, y, z};
  return o;
}
typedef struct {
  NSUInteger size, align;
} MTLSizeAndAlign;
typedef double CFTimeInterval;
typedef uint64_t MTLGPUAddress;

/* ---- enums (values as Apple's headers) */
typedef NS_ENUM(NSUInteger, MTLCPUCacheMode) {
  MTLCPUCacheModeDefaultCache = 0,
  MTLCPUCacheModeWriteCombined = 1
};
typedef NS_ENUM(NSUInteger, MTLStorageMode) {
  MTLStorageModeShared = 0,
  MTLStorageModeManaged = 1,
  MTLStorageModePrivate = 2,
  MTLStorageModeMemoryless = 3
};
typedef NS_ENUM(NSUInteger, MTLHazardTrackingMode) {
  MTLHazardTrackingModeDefault = 0,
  MTLHazardTrackingModeUntracked = 1,
  MTLHazardTrackingModeTracked = 2
};
#define MTLResourceCPUCacheModeShift 0
#define MTLResourceStorageModeShift 4
#define MTLResourceHazardTrackingModeShift 8
typedef NS_OPTIONS(NSUInteger, MTLResourceOptions) {
  MTLResourceCPUCacheModeDefaultCache = MTLCPUCacheModeDefaultCache << MTLResourceCPUCacheModeShift,
  MTLResourceCPUCacheModeWriteCombined = MTLCPUCacheModeWriteCombined
                                         << MTLResourceCPUCacheModeShift,
  MTLResourceStorageModeShared = MTLStorageModeShared << MTLResourceStorageModeShift,
  MTLResourceStorageModeManaged = MTLStorageModeManaged << MTLResourceStorageModeShift,
  MTLResourceStorageModePrivate = MTLStorageModePrivate << MTLResourceStorageModeShift,
  MTLResourceStorageModeMemoryless = MTLStorageModeMemoryless << MTLResourceStorageModeShift,
  MTLResourceHazardTrackingModeDefault = MTLHazardTrackingModeDefault
                                         << MTLResourceHazardTrackingModeShift,
  MTLResourceHazardTrackingModeUntracked = MTLHazardTrackingModeUntracked
                                           << MTLResourceHazardTrackingModeShift,
  MTLResourceHazardTrackingModeTracked = MTLHazardTrackingModeTracked
                                         << MTLResourceHazardTrackingModeShift
};
typedef NS_ENUM(NSUInteger, MTLPurgeableState) {
  MTLPurgeableStateKeepCurrent = 1,
  MTLPurgeableStateNonVolatile = 2,
  MTLPurgeableStateVolatile = 3,
  MTLPurgeableStateEmpty = 4
};
typedef NS_ENUM(NSInteger, MTLGPUFamily) {
  MTLGPUFamilyApple1 = 1001,
  MTLGPUFamilyApple2 = 1002,
  MTLGPUFamilyApple3 = 1003,
  MTLGPUFamilyApple4 = 1004,
  MTLGPUFamilyApple5 = 1005,
  MTLGPUFamilyApple6 = 1006,
  MTLGPUFamilyApple7 = 1007,
  MTLGPUFamilyApple8 = 1008,
  MTLGPUFamilyApple9 = 1009,
  MTLGPUFamilyMac2 = 2002,
  MTLGPUFamilyCommon1 = 3001,
  MTLGPUFamilyCommon2 = 3002,
  MTLGPUFamilyCommon3 = 3003,
  MTLGPUFamilyMetal3 = 5001
};
typedef NS_ENUM(NSUInteger, MTLDeviceLocation) {
  MTLDeviceLocationBuiltIn = 0,
  MTLDeviceLocationSlot = 1,
  MTLDeviceLocationExternal = 2,
  MTLDeviceLocationUnspecified = NSUIntegerMax
};
typedef NS_ENUM(NSUInteger, MTLArgumentBuffersTier) {
  MTLArgumentBuffersTier1 = 0,
  MTLArgumentBuffersTier2 = 1
};
typedef NS_ENUM(NSUInteger, MTLCommandBufferStatus) {
  MTLCommandBufferStatusNotEnqueued = 0,
  MTLCommandBufferStatusEnqueued = 1,
  MTLCommandBufferStatusCommitted = 2,
  MTLCommandBufferStatusScheduled = 3,
  MTLCommandBufferStatusCompleted = 4,
  MTLCommandBufferStatusError = 5
};
typedef NS_OPTIONS(NSUInteger, MTLCommandBufferErrorOption) {
  MTLCommandBufferErrorOptionNone = 0,
  MTLCommandBufferErrorOptionEncoderExecutionStatus = 1
};
typedef NS_ENUM(NSUInteger, MTLDispatchType) {
  MTLDispatchTypeSerial = 0,
  MTLDispatchTypeConcurrent = 1
};
typedef NS_OPTIONS(NSUInteger, MTLBarrierScope) {
  MTLBarrierScopeBuffers = 1,
  MTLBarrierScopeTextures = 2,
  MTLBarrierScopeRenderTargets = 4
};
typedef NS_OPTIONS(NSUInteger, MTLResourceUsage) {
  MTLResourceUsageRead = 1,
  MTLResourceUsageWrite = 2,
  MTLResourceUsageSample = 4
};
typedef NS_ENUM(NSInteger, MTLHeapType) {
  MTLHeapTypeAutomatic = 0,
  MTLHeapTypePlacement = 1,
  MTLHeapTypeSparse = 2
};
typedef NS_ENUM(NSUInteger, MTLLanguageVersion) {
  MTLLanguageVersion1_1 = (1 << 16) + 1,
  MTLLanguageVersion1_2 = (1 << 16) + 2,
  MTLLanguageVersion2_0 = (2 << 16),
  MTLLanguageVersion2_1 = (2 << 16) + 1,
  MTLLanguageVersion2_2 = (2 << 16) + 2,
  MTLLanguageVersion2_3 = (2 << 16) + 3,
  MTLLanguageVersion2_4 = (2 << 16) + 4,
  MTLLanguageVersion3_0 = (3 << 16),
  MTLLanguageVersion3_1 = (3 << 16) + 1,
  MTLLanguageVersion3_2 = (3 << 16) + 2
};
typedef NS_ENUM(NSInteger, MTLMathMode) {
  MTLMathModeSafe = 0,
  MTLMathModeRelaxed = 1,
  MTLMathModeFast = 2
};
typedef NS_ENUM(NSInteger, MTLMathFloatingPointFunctions) {
  MTLMathFloatingPointFunctionsFast = 0,
  MTLMathFloatingPointFunctionsPrecise = 1
};
typedef NS_ENUM(NSInteger, MTLLibraryOptimizationLevel) {
  MTLLibraryOptimizationLevelDefault = 0,
  MTLLibraryOptimizationLevelSize = 1
};
typedef NS_OPTIONS(NSUInteger, MTLPipelineOption) {
  MTLPipelineOptionNone = 0,
  MTLPipelineOptionArgumentInfo = 1,
  MTLPipelineOptionBufferTypeInfo = 2
};
typedef NS_ENUM(NSInteger, MTLCaptureDestination) {
  MTLCaptureDestinationDeveloperTools = 1,
  MTLCaptureDestinationGPUTraceDocument = 2
};
typedef NS_ENUM(NSUInteger, MTLArgumentAccess) {
  MTLArgumentAccessReadOnly = 0,
  MTLArgumentAccessReadWrite = 1,
  MTLArgumentAccessWriteOnly = 2
};
typedef NS_ENUM(NSUInteger, MTLDataType) {
  MTLDataTypeNone = 0,
  MTLDataTypeStruct = 1,
  MTLDataTypeArray = 2,
  MTLDataTypeFloat = 3,
  MTLDataTypeFloat2 = 4,
  MTLDataTypeFloat3 = 5,
  MTLDataTypeFloat4 = 6,
  MTLDataTypeHalf = 16,
  MTLDataTypeHalf2 = 17,
  MTLDataTypeHalf3 = 18,
  MTLDataTypeHalf4 = 19,
  MTLDataTypeInt = 29,
  MTLDataTypeInt2 = 30,
  MTLDataTypeInt3 = 31,
  MTLDataTypeInt4 = 32,
  MTLDataTypeUInt = 33,
  MTLDataTypeUInt2 = 34,
  MTLDataTypeUInt3 = 35,
  MTLDataTypeUInt4 = 36,
  MTLDataTypeShort = 37,
  MTLDataTypeShort2 = 38,
  MTLDataTypeShort3 = 39,
  MTLDataTypeShort4 = 40,
  MTLDataTypeUShort = 41,
  MTLDataTypeUShort2 = 42,
  MTLDataTypeUShort3 = 43,
  MTLDataTypeUShort4 = 44,
  MTLDataTypeChar = 45,
  MTLDataTypeChar2 = 46,
  MTLDataTypeChar3 = 47,
  MTLDataTypeChar4 = 48,
  MTLDataTypeUChar = 49,
  MTLDataTypeUChar2 = 50,
  MTLDataTypeUChar3 = 51,
  MTLDataTypeUChar4 = 52,
  MTLDataTypeBool = 53,
  MTLDataTypeBool2 = 54,
  MTLDataTypeBool3 = 55,
  MTLDataTypeBool4 = 56,
  MTLDataTypePointer = 60,
  MTLDataTypeLong = 81,
  MTLDataTypeULong = 85
};

extern NSErrorDomain MTLLibraryErrorDomain;
extern NSErrorDomain MTLCommandBufferErrorDomain;
extern NSErrorDomain MTLCaptureErrorDomain;
extern NSErrorDomain MTLBinaryArchiveDomain;
extern NSErrorDomain MTLCounterErrorDomain;

@protocol MTLDevice
, MTLBuffer, MTLHeap, MTLCommandQueue, MTLCommandBuffer, MTLFunction, MTLLibrary,
    MTLComputePipelineState, MTLSharedEvent, MTLEvent, MTLFence, MTLResidencySet;

/* ---- resources */
@protocol MTLResource <NSObject>
@property(copy) NSString *label;
@property(readonly) id<MTLDevice> device;
@property(readonly) MTLCPUCacheMode cpuCacheMode;
@property(readonly) MTLStorageMode storageMode;
@property(readonly) MTLHazardTrackingMode hazardTrackingMode;
@property(readonly) MTLResourceOptions resourceOptions;
@property(readonly) id<MTLHeap> heap;
@property(readonly) NSUInteger heapOffset;
@property(readonly) NSUInteger allocatedSize;
- (MTLPurgeableState)setPurgeableState:(MTLPurgeableState)state;
- (void)makeAliasable;
- (BOOL)isAliasable;
@end

@protocol MTLBuffer <MTLResource>
@property(readonly) NSUInteger length;
@property(readonly) MTLGPUAddress gpuAddress;
- (void *)contents;
- (void)didModifyRange:(NSRange)range;
@end

@interface MTLHeapDescriptor : NSObject <NSCopying>
@property NSUInteger size;
@property MTLStorageMode storageMode;
@property MTLCPUCacheMode cpuCacheMode;
@property MTLHazardTrackingMode hazardTrackingMode;
@property MTLResourceOptions resourceOptions;
@property MTLHeapType type;
@end

@protocol MTLHeap <NSObject>
@property(copy) NSString *label;
@property(readonly) id<MTLDevice> device;
@property(readonly) MTLStorageMode storageMode;
@property(readonly) MTLCPUCacheMode cpuCacheMode;
@property(readonly) MTLHazardTrackingMode hazardTrackingMode;
@property(readonly) MTLResourceOptions resourceOptions;
@property(readonly) MTLHeapType type;
@property(readonly) NSUInteger size;
@property(readonly) NSUInteger usedSize;
@property(readonly) NSUInteger currentAllocatedSize;
- (NSUInteger)maxAvailableSizeWithAlignment:(NSUInteger)alignment;
- (id<MTLBuffer>)newBufferWithLength:(NSUInteger)length options:(MTLResourceOptions)options;
- (id<MTLBuffer>)newBufferWithLength:(NSUInteger)length
                             options:(MTLResourceOptions)options
                              offset:(NSUInteger)offset;
- (MTLPurgeableState)setPurgeableState:(MTLPurgeableState)state;
@end

/* ---- residency sets */
@interface MTLResidencySetDescriptor : NSObject <NSCopying>
@property(copy) NSString *label;
@property NSUInteger initialCapacity;
@end
@protocol MTLAllocation <NSObject>
@property(readonly) NSUInteger allocatedSize;
@end
@protocol MTLResidencySet <NSObject>
@property(readonly) id<MTLDevice> device;
@property(readonly) NSString *label;
@property(readonly) uint64_t allocatedSize;
@property(readonly) NSUInteger allocationCount;
@property(readonly) NSArray *allAllocations;
- (void)requestResidency;
- (void)endResidency;
- (void)addAllocation:(id)allocation;
- (void)addAllocations:(const id[])allocations count:(NSUInteger)count;
- (void)removeAllocation:(id)allocation;
- (void)removeAllocations:(const id[])allocations count:(NSUInteger)count;
- (void)removeAllAllocations;
- (BOOL)containsAllocation:(id)allocation;
- (void)commit;
@end

/* ---- functions and libraries */
@interface MTLFunctionConstantValues : NSObject <NSCopying>
- (void)setConstantValue:(const void *)value type:(MTLDataType)type atIndex:(NSUInteger)index;
- (void)setConstantValues:(const void *)values type:(MTLDataType)type withRange:(NSRange)range;
- (void)setConstantValue:(const void *)value type:(MTLDataType)type withName:(NSString *)name;
- (void)reset;
@end
@interface MTLFunctionConstant : NSObject
@property(readonly) NSString *name;
@property(readonly) MTLDataType type;
@property(readonly) NSUInteger index;
@property(readonly) BOOL required;
@end
@interface MTLFunctionDescriptor : NSObject <NSCopying>
+ (MTLFunctionDescriptor *)functionDescriptor;
@property(copy) NSString *name;
@property(copy) NSString *specializedName;
@property(copy) MTLFunctionConstantValues *constantValues;
@property NSUInteger options;
@end
@protocol MTLFunction <NSObject>
@property(copy) NSString *label;
@property(readonly) id<MTLDevice> device;
@property(readonly) NSString *name;
@property(readonly) NSDictionary<NSString *, MTLFunctionConstant *> *functionConstantsDictionary;
@end

@interface MTLCompileOptions : NSObject <NSCopying>
@property(copy) NSDictionary<NSString *, NSObject *> *preprocessorMacros;
@property BOOL fastMathEnabled;
@property MTLMathMode mathMode;
@property MTLMathFloatingPointFunctions mathFloatingPointFunctions;
@property MTLLanguageVersion languageVersion;
@property MTLLibraryOptimizationLevel optimizationLevel;
@property BOOL enableLogging;
@end

@protocol MTLLibrary <NSObject>
@property(copy) NSString *label;
@property(readonly) id<MTLDevice> device;
@property(readonly) NSArray<NSString *> *functionNames;
- (id<MTLFunction>)newFunctionWithName:(NSString *)name;
- (id<MTLFunction>)newFunctionWithName:(NSString *)name
                        constantValues:(MTLFunctionConstantValues *)values
                                 error:(NSError **)error;
- (id<MTLFunction>)newFunctionWithDescriptor:(MTLFunctionDescriptor *)descriptor
                                       error:(NSError **)error;
@end

/* ---- pipelines */
@interface MTLComputePipelineDescriptor : NSObject <NSCopying>
@property(copy) NSString *label;
@property(retain) id<MTLFunction> computeFunction;
@property(copy) NSArray *binaryArchives;
- (void)reset;
@end
@interface MTLComputePipelineReflection : NSObject
@property(readonly) NSArray *bindings;
@property(readonly) NSArray *arguments;
@end
@protocol MTLComputePipelineState <NSObject>
@property(readonly) NSString *label;
@property(readonly) id<MTLDevice> device;
@property(readonly) NSUInteger maxTotalThreadsPerThreadgroup;
@property(readonly) NSUInteger threadExecutionWidth;
@property(readonly) NSUInteger staticThreadgroupMemoryLength;
@end

/* ---- synchronisation */
@protocol MTLFence <NSObject>
@property(readonly) id<MTLDevice> device;
@property(copy) NSString *label;
@end
@protocol MTLEvent <NSObject>
@property(readonly) id<MTLDevice> device;
@property(copy) NSString *label;
@end
@interface MTLSharedEventListener : NSObject
- (instancetype)init;
- (instancetype)initWithDispatchQueue:(dispatch_queue_t)dispatchQueue;
@end
typedef void (^MTLSharedEventNotificationBlock)(id<MTLSharedEvent>, uint64_t value);
@protocol MTLSharedEvent <MTLEvent>
@property uint64_t signaledValue;
- (void)notifyListener:(MTLSharedEventListener *)listener
               atValue:(uint64_t)value
                 block:(MTLSharedEventNotificationBlock)block;
- (BOOL)waitUntilSignaledValue:(uint64_t)value timeoutMS:(uint64_t)milliseconds;
@end

/* ---- encoders */
@protocol MTLCommandEncoder <NSObject>
@property(readonly) id<MTLDevice> device;
@property(copy) NSString *label;
- (void)endEncoding;
- (void)pushDebugGroup:(NSString *)string;
- (void)popDebugGroup;
@end

@protocol MTLComputeCommandEncoder <MTLCommandEncoder>
@property(readonly) MTLDispatchType dispatchType;
- (void)setComputePipelineState:(id<MTLComputePipelineState>)state;
- (void)setBytes:(const void *)bytes length:(NSUInteger)length atIndex:(NSUInteger)index;
- (void)setBuffer:(id<MTLBuffer>)buffer offset:(NSUInteger)offset atIndex:(NSUInteger)index;
- (void)setBufferOffset:(NSUInteger)offset atIndex:(NSUInteger)index;
- (void)setBuffers:(const id<MTLBuffer>[])buffers
           offsets:(const NSUInteger[])offsets
         withRange:(NSRange)range;
- (void)setThreadgroupMemoryLength:(NSUInteger)length atIndex:(NSUInteger)index;
- (void)dispatchThreadgroups:(MTLSize)threadgroupsPerGrid
       threadsPerThreadgroup:(MTLSize)threadsPerThreadgroup;
- (void)dispatchThreads:(MTLSize)threadsPerGrid
    threadsPerThreadgroup:(MTLSize)threadsPerThreadgroup;
- (void)dispatchThreadgroupsWithIndirectBuffer:(id<MTLBuffer>)indirectBuffer
                          indirectBufferOffset:(NSUInteger)indirectBufferOffset
                         threadsPerThreadgroup:(MTLSize)threadsPerThreadgroup;
- (void)updateFence:(id<MTLFence>)fence;
- (void)waitForFence:(id<MTLFence>)fence;
- (void)useResource:(id<MTLResource>)resource usage:(MTLResourceUsage)usage;
- (void)useResources:(const id<MTLResource>[])resources
               count:(NSUInteger)count
               usage:(MTLResourceUsage)usage;
- (void)useHeap:(id<MTLHeap>)heap;
- (void)useHeaps:(const id<MTLHeap>[])heaps count:(NSUInteger)count;
- (void)memoryBarrierWithScope:(MTLBarrierScope)scope;
- (void)memoryBarrierWithResources:(const id<MTLResource>[])resources count:(NSUInteger)count;
@end

@protocol MTLBlitCommandEncoder <MTLCommandEncoder>
- (void)copyFromBuffer:(id<MTLBuffer>)sourceBuffer
          sourceOffset:(NSUInteger)sourceOffset
              toBuffer:(id<MTLBuffer>)destinationBuffer
     destinationOffset:(NSUInteger)destinationOffset
                  size:(NSUInteger)size;
- (void)fillBuffer:(id<MTLBuffer>)buffer range:(NSRange)range value:(uint8_t)value;
- (void)synchronizeResource:(id<MTLResource>)resource;
- (void)updateFence:(id<MTLFence>)fence;
- (void)waitForFence:(id<MTLFence>)fence;
@end

/* ---- command buffers and queues */
@interface MTLCommandBufferDescriptor : NSObject <NSCopying>
@property BOOL retainedReferences;
@property MTLCommandBufferErrorOption errorOptions;
@end
typedef void (^MTLCommandBufferHandler)(id<MTLCommandBuffer>);
@protocol MTLCommandBuffer <NSObject>
@property(readonly) id<MTLDevice> device;
@property(readonly) id<MTLCommandQueue> commandQueue;
@property(readonly) BOOL retainedReferences;
@property(readonly) MTLCommandBufferErrorOption errorOptions;
@property(copy) NSString *label;
@property(readonly) CFTimeInterval kernelStartTime;
@property(readonly) CFTimeInterval kernelEndTime;
@property(readonly) CFTimeInterval GPUStartTime;
@property(readonly) CFTimeInterval GPUEndTime;
@property(readonly) MTLCommandBufferStatus status;
@property(readonly) NSError *error;
- (void)enqueue;
- (void)commit;
- (void)addScheduledHandler:(MTLCommandBufferHandler)block;
- (void)addCompletedHandler:(MTLCommandBufferHandler)block;
- (void)waitUntilScheduled;
- (void)waitUntilCompleted;
- (id<MTLBlitCommandEncoder>)blitCommandEncoder;
- (id<MTLComputeCommandEncoder>)computeCommandEncoder;
- (id<MTLComputeCommandEncoder>)computeCommandEncoderWithDispatchType:(MTLDispatchType)type;
- (void)encodeWaitForEvent:(id<MTLEvent>)event value:(uint64_t)value;
- (void)encodeSignalEvent:(id<MTLEvent>)event value:(uint64_t)value;
- (void)useResidencySet:(id<MTLResidencySet>)residencySet;
- (void)useResidencySets:(const id<MTLResidencySet>[])residencySets count:(NSUInteger)count;
- (void)pushDebugGroup:(NSString *)string;
- (void)popDebugGroup;
@end

@protocol MTLCommandQueue <NSObject>
@property(copy) NSString *label;
@property(readonly) id<MTLDevice> device;
- (id<MTLCommandBuffer>)commandBuffer;
- (id<MTLCommandBuffer>)commandBufferWithUnretainedReferences;
- (id<MTLCommandBuffer>)commandBufferWithDescriptor:(MTLCommandBufferDescriptor *)descriptor;
- (void)addResidencySet:(id<MTLResidencySet>)residencySet;
- (void)addResidencySets:(const id<MTLResidencySet>[])residencySets count:(NSUInteger)count;
- (void)removeResidencySet:(id<MTLResidencySet>)residencySet;
- (void)removeResidencySets:(const id<MTLResidencySet>[])residencySets count:(NSUInteger)count;
@end

/* ---- devices */
@protocol MTLArchitecture <NSObject>
@property(readonly) NSString *name;
@end
typedef void (^MTLNewLibraryCompletionHandler)(id<MTLLibrary> library, NSError *error);
@protocol MTLDevice <NSObject>
@property(readonly) NSString *name;
@property(readonly) uint64_t registryID;
@property(readonly) id<MTLArchitecture> architecture;
@property(readonly) MTLSize maxThreadsPerThreadgroup;
@property(readonly, getter=isLowPower) BOOL lowPower;
@property(readonly, getter=isHeadless) BOOL headless;
@property(readonly, getter=isRemovable) BOOL removable;
@property(readonly) BOOL hasUnifiedMemory;
@property(readonly) MTLDeviceLocation location;
@property(readonly) NSUInteger locationNumber;
@property(readonly) uint64_t recommendedMaxWorkingSetSize;
@property(readonly) NSUInteger currentAllocatedSize;
@property(readonly) NSUInteger maxThreadgroupMemoryLength;
@property(readonly) NSUInteger maxBufferLength;
@property(readonly) MTLArgumentBuffersTier argumentBuffersSupport;
@property(readonly) BOOL supportsFunctionPointers;
@property(readonly) BOOL supportsDynamicLibraries;
@property(readonly) BOOL supportsRaytracing;
- (BOOL)supportsFamily:(MTLGPUFamily)gpuFamily;
- (id<MTLCommandQueue>)newCommandQueue;
- (id<MTLCommandQueue>)newCommandQueueWithMaxCommandBufferCount:(NSUInteger)maxCommandBufferCount;
- (MTLSizeAndAlign)heapBufferSizeAndAlignWithLength:(NSUInteger)length
                                            options:(MTLResourceOptions)options;
- (id<MTLHeap>)newHeapWithDescriptor:(MTLHeapDescriptor *)descriptor;
- (id<MTLBuffer>)newBufferWithLength:(NSUInteger)length options:(MTLResourceOptions)options;
- (id<MTLBuffer>)newBufferWithBytes:(const void *)pointer
                             length:(NSUInteger)length
                            options:(MTLResourceOptions)options;
- (id<MTLBuffer>)newBufferWithBytesNoCopy:(void *)pointer
                                   length:(NSUInteger)length
                                  options:(MTLResourceOptions)options
                              deallocator:(void (^)(void *pointer, NSUInteger length))deallocator;
- (id<MTLLibrary>)newLibraryWithFile:(NSString *)filepath error:(NSError **)error;
- (id<MTLLibrary>)newLibraryWithURL:(NSURL *)url error:(NSError **)error;
- (id<MTLLibrary>)newLibraryWithData:(id)data error:(NSError **)error;
- (id<MTLLibrary>)newLibraryWithSource:(NSString *)source
                               options:(MTLCompileOptions *)options
                                 error:(NSError **)error;
- (id<MTLComputePipelineState>)newComputePipelineStateWithFunction:(id<MTLFunction>)function
                                                             error:(NSError **)error;
- (id<MTLComputePipelineState>)
    newComputePipelineStateWithFunction:(id<MTLFunction>)function
                                options:(MTLPipelineOption)options
                             reflection:(MTLComputePipelineReflection **)reflection
                                  error:(NSError **)error;
- (id<MTLComputePipelineState>)
    newComputePipelineStateWithDescriptor:(MTLComputePipelineDescriptor *)descriptor
                                  options:(MTLPipelineOption)options
                               reflection:(MTLComputePipelineReflection **)reflection
                                    error:(NSError **)error;
- (id<MTLFence>)newFence;
- (id<MTLEvent>)newEvent;
- (id<MTLSharedEvent>)newSharedEvent;
- (id<MTLResidencySet>)newResidencySetWithDescriptor:(MTLResidencySetDescriptor *)descriptor
                                               error:(NSError **)error;
@end

/* ---- captures */
@protocol MTLCaptureScope <NSObject>
@property(readonly) id<MTLDevice> device;
@property(copy) NSString *label;
@property(readonly) id<MTLCommandQueue> commandQueue;
- (void)beginScope;
- (void)endScope;
@end
@interface MTLCaptureDescriptor : NSObject <NSCopying>
@property(retain) id captureObject;
@property MTLCaptureDestination destination;
@property(copy) NSURL *outputURL;
@end
@interface MTLCaptureManager : NSObject
+ (MTLCaptureManager *)sharedCaptureManager;
- (id<MTLCaptureScope>)newCaptureScopeWithDevice:(id<MTLDevice>)device;
- (id<MTLCaptureScope>)newCaptureScopeWithCommandQueue:(id<MTLCommandQueue>)commandQueue;
- (BOOL)supportsDestination:(MTLCaptureDestination)destination;
- (BOOL)startCaptureWithDescriptor:(MTLCaptureDescriptor *)descriptor error:(NSError **)error;
- (void)startCaptureWithDevice:(id<MTLDevice>)device;
- (void)startCaptureWithCommandQueue:(id<MTLCommandQueue>)commandQueue;
- (void)startCaptureWithScope:(id<MTLCaptureScope>)captureScope;
- (void)stopCapture;
@property(retain) id<MTLCaptureScope> defaultCaptureScope;
@property(readonly) BOOL isCapturing;
@end

#ifdef __cplusplus
extern "C" {
#endif
id<MTLDevice> MTLCreateSystemDefaultDevice(void) NS_RETURNS_RETAINED;
NSArray<id<MTLDevice>> *MTLCopyAllDevices(void) NS_RETURNS_RETAINED;
#ifdef __cplusplus
}
#endif
#endif
