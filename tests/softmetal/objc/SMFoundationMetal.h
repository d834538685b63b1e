/* SPDX-License-Identifier: MIT */
/* The Foundation and Metal declarations the Objective-C host test uses, for
 * clang's GNU runtime (-fobjc-runtime=gcc) against libsoftmetal. softmetal
 * ships no <Foundation/Foundation.h> or <Metal/Metal.h>: these are written
 * from Apple's public API (selector names and enum values as its headers),
 * for the classes softmetal answers. NSObject's instance variables must be
 * softmetal's (a subclass lays its own after them). */
#ifndef SM_FOUNDATION_METAL_H
#define SM_FOUNDATION_METAL_H
#include <objc/objc.h>
#include <stdint.h>

typedef unsigned long NSUInteger;
typedef long NSInteger;
typedef double CFTimeInterval;
typedef struct {
  NSUInteger location, length;
} NSRange;
typedef struct {
  NSUInteger width, height, depth;
} MTLSize;
typedef struct {
  NSUInteger size, align;
} MTLSizeAndAlign;
typedef struct {
  NSInteger majorVersion, minorVersion, patchVersion;
} NSOperatingSystemVersion;

@class NSString, NSArray, NSDictionary, NSError, NSURL;

@protocol NSObject
- (id)retain;
- (oneway void)release;
- (id)autorelease;
- (BOOL)isKindOfClass:(Class)c;
@end

@interface NSObject <NSObject> {
  Class isa;
  void *_sm_cls;
  long _sm_rc;
  id _sm_label;
  void *_sm_host;
}
+ (id)alloc;
+ (id)new;
+ (Class)class;
- (id)init;
- (id)retain;
- (oneway void)release;
- (id)autorelease;
- (NSUInteger)retainCount;
- (void)dealloc;
- (BOOL)isKindOfClass:(Class)c;
- (BOOL)respondsToSelector:(SEL)s;
- (BOOL)isEqual:(id)o;
- (NSString *)description;
- (id)copy;
@end

typedef struct {
  unsigned long state;
  id *itemsPtr;
  unsigned long *mutationsPtr;
  unsigned long extra[5];
} NSFastEnumerationState;
@protocol NSFastEnumeration
- (NSUInteger)countByEnumeratingWithState:(NSFastEnumerationState *)state
                                  objects:(id *)buffer
                                    count:(NSUInteger)len;
@end

@interface NSString : NSObject
+ (instancetype)stringWithUTF8String:(const char *)s;
+ (instancetype)stringWithFormat:(NSString *)format, ...;
- (const char *)UTF8String;
- (NSUInteger)length;
- (BOOL)isEqualToString:(NSString *)s;
- (BOOL)containsString:(NSString *)s;
- (NSString *)stringByAppendingPathComponent:(NSString *)s;
@end

@interface NSArray : NSObject <NSFastEnumeration>
+ (instancetype)arrayWithObjects:(const id *)objects count:(NSUInteger)n;
- (NSUInteger)count;
- (id)objectAtIndexedSubscript:(NSUInteger)i;
- (id)firstObject;
@end
@interface NSMutableArray : NSArray
+ (instancetype)array;
- (void)addObject:(id)o;
@end
@interface NSDictionary : NSObject <NSFastEnumeration>
+ (instancetype)dictionaryWithObjects:(const id *)objects
                              forKeys:(const id *)keys
                                count:(NSUInteger)n;
- (NSUInteger)count;
- (id)objectForKey:(id)k;
- (id)objectForKeyedSubscript:(id)k;
@end
@interface NSMutableDictionary : NSDictionary
+ (instancetype)dictionary;
- (void)setObject:(id)o forKeyedSubscript:(id)k;
@end
@interface NSNumber : NSObject
+ (NSNumber *)numberWithInt:(int)v;
+ (NSNumber *)numberWithDouble:(double)v;
- (int)intValue;
- (double)doubleValue;
@end
@interface NSError : NSObject
- (NSString *)domain;
- (NSInteger)code;
- (NSString *)localizedDescription;
- (NSDictionary *)userInfo;
@end
@interface NSURL : NSObject
+ (NSURL *)fileURLWithPath:(NSString *)path;
- (NSString *)path;
@end
@interface NSLock : NSObject
- (void)lock;
- (void)unlock;
@end
@interface NSProcessInfo : NSObject
+ (NSProcessInfo *)processInfo;
- (NSDictionary *)environment;
- (NSArray *)arguments;
- (BOOL)isOperatingSystemAtLeastVersion:(NSOperatingSystemVersion)v;
@end
@interface NSBundle : NSObject
+ (NSBundle *)mainBundle;
- (NSString *)pathForResource:(NSString *)name ofType:(NSString *)type;
@end
@interface NSAutoreleasePool : NSObject
- (void)drain;
@end
extern void NSLog(NSString *format, ...);

/* ---- Metal ---- */
typedef NSUInteger MTLResourceOptions;
enum { MTLResourceStorageModeShared = 0, MTLResourceStorageModePrivate = 2 << 4 };
enum { MTLStorageModeShared = 0, MTLStorageModePrivate = 2 };
enum { MTLCommandBufferStatusCompleted = 4, MTLCommandBufferStatusError = 5 };
enum { MTLGPUFamilyMetal3 = 5001 };
enum { MTLCaptureDestinationGPUTraceDocument = 2 };
enum { MTLResourceUsageRead = 1 };
extern NSString *MTLLibraryErrorDomain;

@protocol MTLDevice
, MTLCommandBuffer, MTLSharedEvent;
@protocol MTLResource <NSObject>
@property(readonly) id<MTLDevice> device;
@property(copy) NSString *label;
@end
@protocol MTLBuffer <MTLResource>
- (void *)contents;
@property(readonly) NSUInteger length;
@property(readonly) NSUInteger allocatedSize;
@property(readonly) id heap;
@end
@protocol MTLHeap <NSObject>
@property(readonly) NSUInteger size;
@property(readonly) NSUInteger usedSize;
- (id<MTLBuffer>)newBufferWithLength:(NSUInteger)length options:(MTLResourceOptions)options;
- (NSUInteger)maxAvailableSizeWithAlignment:(NSUInteger)alignment;
@end
@protocol MTLResidencySet <NSObject>
- (void)addAllocation:(id)allocation;
- (void)removeAllocation:(id)allocation;
- (void)commit;
- (void)requestResidency;
- (void)endResidency;
@property(readonly) NSUInteger allocatedSize;
@property(readonly) NSUInteger allocationCount;
@end
@protocol MTLFunction <NSObject>
@property(readonly) NSString *name;
@end
@protocol MTLLibrary <NSObject>
- (id<MTLFunction>)newFunctionWithName:(NSString *)name;
@end
@protocol MTLComputePipelineState <NSObject>
@property(readonly) NSUInteger maxTotalThreadsPerThreadgroup;
@end
@protocol MTLComputeCommandEncoder <NSObject>
- (void)setComputePipelineState:(id<MTLComputePipelineState>)p;
- (void)setBuffer:(id<MTLBuffer>)b offset:(NSUInteger)o atIndex:(NSUInteger)i;
- (void)setBytes:(const void *)bytes length:(NSUInteger)n atIndex:(NSUInteger)i;
- (void)dispatchThreads:(MTLSize)grid threadsPerThreadgroup:(MTLSize)tg;
- (void)useResource:(id)r usage:(NSUInteger)usage;
- (void)pushDebugGroup:(NSString *)s;
- (void)popDebugGroup;
- (void)endEncoding;
@end
@protocol MTLCommandBuffer <NSObject>
@property(copy) NSString *label;
@property(readonly) NSUInteger status;
@property(readonly) NSError *error;
@property(readonly) CFTimeInterval GPUStartTime;
@property(readonly) CFTimeInterval GPUEndTime;
- (id<MTLComputeCommandEncoder>)computeCommandEncoder;
- (void)pushDebugGroup:(NSString *)s;
- (void)popDebugGroup;
- (void)addCompletedHandler:(void (^)(id<MTLCommandBuffer>))block;
- (void)encodeSignalEvent:(id<MTLSharedEvent>)e value:(uint64_t)v;
- (void)commit;
- (void)waitUntilCompleted;
@end
@protocol MTLCommandQueue <NSObject>
- (id<MTLCommandBuffer>)commandBuffer;
- (void)addResidencySet:(id<MTLResidencySet>)set;
@end
@interface MTLSharedEventListener : NSObject
- (instancetype)initWithDispatchQueue:(void *)queue;
@end
@protocol MTLSharedEvent <NSObject>
@property uint64_t signaledValue;
- (void)notifyListener:(MTLSharedEventListener *)l
               atValue:(uint64_t)v
                 block:(void (^)(id<MTLSharedEvent>, uint64_t))block;
- (BOOL)waitUntilSignaledValue:(uint64_t)v timeoutMS:(uint64_t)ms;
@end
@protocol MTLArchitecture <NSObject>
@property(readonly) NSString *name;
@end
@interface MTLCompileOptions : NSObject
@property(copy) NSDictionary *preprocessorMacros;
@end
@interface MTLHeapDescriptor : NSObject
@property NSUInteger size;
@property NSUInteger storageMode;
@end
@interface MTLResidencySetDescriptor : NSObject
@end
@interface MTLCaptureDescriptor : NSObject
@property(retain) id captureObject;
@property NSInteger destination;
@end
@interface MTLCaptureManager : NSObject
+ (MTLCaptureManager *)sharedCaptureManager;
- (BOOL)startCaptureWithDescriptor:(MTLCaptureDescriptor *)d error:(NSError **)error;
@end
@protocol MTLDevice <NSObject>
@property(readonly) NSString *name;
@property(readonly) id<MTLArchitecture> architecture;
@property(readonly) NSUInteger maxThreadgroupMemoryLength;
- (BOOL)supportsFamily:(NSInteger)family;
- (id<MTLBuffer>)newBufferWithLength:(NSUInteger)length options:(MTLResourceOptions)options;
- (id<MTLCommandQueue>)newCommandQueue;
- (id<MTLHeap>)newHeapWithDescriptor:(MTLHeapDescriptor *)d;
- (id<MTLResidencySet>)newResidencySetWithDescriptor:(MTLResidencySetDescriptor *)d
                                               error:(NSError **)error;
- (id<MTLLibrary>)newLibraryWithSource:(NSString *)s
                               options:(MTLCompileOptions *)o
                                 error:(NSError **)error;
- (id<MTLLibrary>)newLibraryWithFile:(NSString *)path error:(NSError **)error;
- (id<MTLComputePipelineState>)newComputePipelineStateWithFunction:(id<MTLFunction>)f
                                                             error:(NSError **)error;
- (id<MTLSharedEvent>)newSharedEvent;
@end
extern id<MTLDevice> MTLCreateSystemDefaultDevice(void);
#endif
