/* SPDX-License-Identifier: MIT */
/* The selectors and classes the runtime sends to, each with its C signature.
 * Internal, included by bridge.h only.
 *
 * CM__OBJC_SELECTORS(X): X(ident, "selector:name:", sig)
 *   ident  the C name: colons become underscores, the last one is dropped;
 *          CM__SEL(ident) is the registered SEL, cm__msg_<ident>() the typed
 *          send;
 *   sig    names its C prototype, the CM__SIG_<sig> macro below, and the
 *          send function cm__send_<sig> of bridge.h.
 *
 * To add a selector: add one X line here (and a row to
 * tests/objc/apple_selectors.tsv, which a test compares with this table). If
 * its signature is new, add a CM__SIG_<sig> line below and write
 * cm__send_<sig> in bridge.h.
 *
 * Ownership follows Cocoa's rule: alloc/new/copy/mutableCopy return +1, as do
 * MTLCreateSystemDefaultDevice and MTLCopyAllDevices; commandBuffer*,
 * the encoder getters, stringWith..., localizedDescription and NSError
 * out-parameters are autoreleased (run them inside a pool). */
#ifndef CMETAL_OBJC_SELECTORS_H
#define CMETAL_OBJC_SELECTORS_H

#define CM__OBJC_SELECTORS(X)                                                                      \
    /* MTLDevice */                                                                                \
    X(name, "name", id)                                                                            \
    X(label, "label", id)                                                                          \
    X(setLabel, "setLabel:", void_id)                                                              \
    X(registryID, "registryID", u64)                                                               \
    X(recommendedMaxWorkingSetSize, "recommendedMaxWorkingSetSize", u64)                           \
    X(hasUnifiedMemory, "hasUnifiedMemory", boolean)                                               \
    X(maxBufferLength, "maxBufferLength", uint)                                                    \
    X(currentAllocatedSize, "currentAllocatedSize", uint)                                          \
    X(maxThreadsPerThreadgroup, "maxThreadsPerThreadgroup", size)                                  \
    X(newBufferWithLength_options, "newBufferWithLength:options:", id_uint_uint)                   \
    X(newBufferWithBytes_length_options, "newBufferWithBytes:length:options:", id_cptr_uint_uint)  \
    X(newBufferWithBytesNoCopy_length_options_deallocator,                                         \
      "newBufferWithBytesNoCopy:length:options:deallocator:", id_ptr_uint_uint_block)              \
    X(newCommandQueue, "newCommandQueue", id)                                                      \
    X(newSharedEvent, "newSharedEvent", id)                                                        \
    X(newFence, "newFence", id)                                                                    \
    X(newLibraryWithSource_options_error, "newLibraryWithSource:options:error:", id_id_id_idp)     \
    X(newLibraryWithURL_error, "newLibraryWithURL:error:", id_id_idp)                              \
    X(newLibraryWithData_error, "newLibraryWithData:error:", id_id_idp)                            \
    X(newComputePipelineStateWithFunction_error,                                                   \
      "newComputePipelineStateWithFunction:error:", id_id_idp)                                     \
    X(newComputePipelineStateWithFunction_options_reflection_error,                                \
      "newComputePipelineStateWithFunction:options:reflection:error:", id_id_uint_idp_idp)         \
    X(newComputePipelineStateWithDescriptor_options_reflection_error,                              \
      "newComputePipelineStateWithDescriptor:options:reflection:error:", id_id_uint_idp_idp)       \
    X(newBinaryArchiveWithDescriptor_error, "newBinaryArchiveWithDescriptor:error:", id_id_idp)    \
    X(newResidencySetWithDescriptor_error,                                                         \
      "newResidencySetWithDescriptor:error:", id_id_idp) /* macOS 15 */                            \
    X(newHeapWithDescriptor, "newHeapWithDescriptor:", id_id)                                      \
    /* MTLHeapDescriptor (alloc, init); MTLHeap (newBufferWithLength:options: as \
     * MTLDevice's) */                 \
    X(setSize, "setSize:", void_uint)                                                              \
    X(setResourceOptions, "setResourceOptions:", void_uint)                                        \
    X(size, "size", uint)                                                                          \
    /* MTLResidencySet (commit as MTLCommandBuffer's) */                                           \
    X(addAllocation, "addAllocation:", void_id)                                                    \
    X(removeAllocation, "removeAllocation:", void_id)                                              \
    X(containsAllocation, "containsAllocation:", boolean_id)                                       \
    X(allAllocations, "allAllocations", id)                                                        \
    X(requestResidency, "requestResidency", void)                                                  \
    /* MTLComputePipelineDescriptor, MTLBinaryArchiveDescriptor */                                 \
    X(setComputeFunction, "setComputeFunction:", void_id)                                          \
    X(setBinaryArchives, "setBinaryArchives:", void_id)                                            \
    X(setUrl, "setUrl:", void_id)                                                                  \
    /* MTLBinaryArchive */                                                                         \
    X(addComputePipelineFunctionsWithDescriptor_error,                                             \
      "addComputePipelineFunctionsWithDescriptor:error:", boolean_id_idp)                          \
    X(serializeToURL_error, "serializeToURL:error:", boolean_id_idp)                               \
    X(supportsFamily, "supportsFamily:", boolean_int)                                              \
    /* MTLCompileOptions (alloc, init below) */                                                    \
    X(setFastMathEnabled, "setFastMathEnabled:", void_boolean)                                     \
    X(setMathMode, "setMathMode:", void_int)                                                       \
    X(setMathFloatingPointFunctions, "setMathFloatingPointFunctions:", void_int)                   \
    X(setLanguageVersion, "setLanguageVersion:", void_uint)                                        \
    /* MTLFunctionConstantValues (alloc, init below) */                                            \
    X(setConstantValue_type_atIndex, "setConstantValue:type:atIndex:", void_cptr_uint_uint)        \
    /* MTLLibrary */                                                                               \
    X(newFunctionWithName, "newFunctionWithName:", id_id)                                          \
    X(newFunctionWithName_constantValues_error,                                                    \
      "newFunctionWithName:constantValues:error:", id_id_id_idp)                                   \
    /* MTLFunction */                                                                              \
    X(functionConstantsDictionary, "functionConstantsDictionary", id)                              \
    /* MTLBuffer */                                                                                \
    X(contents, "contents", ptr)                                                                   \
    X(length, "length", uint)                                                                      \
    X(storageMode, "storageMode", uint)                                                            \
    X(hazardTrackingMode, "hazardTrackingMode", uint)                                              \
    X(device, "device", id)                                                                        \
    X(didModifyRange, "didModifyRange:", void_range)                                               \
    X(gpuAddress, "gpuAddress", u64)                                                               \
    /* MTLCommandQueue */                                                                          \
    X(commandBuffer, "commandBuffer", id)                                                          \
    X(commandBufferWithUnretainedReferences, "commandBufferWithUnretainedReferences", id)          \
    X(addResidencySet, "addResidencySet:", void_id) /* macOS 15 */                                 \
    /* MTLCommandBuffer */                                                                         \
    X(computeCommandEncoder, "computeCommandEncoder", id)                                          \
    X(blitCommandEncoder, "blitCommandEncoder", id)                                                \
    X(commit, "commit", void)                                                                      \
    X(waitUntilCompleted, "waitUntilCompleted", void)                                              \
    X(status, "status", uint)                                                                      \
    X(error, "error", id)                                                                          \
    X(addCompletedHandler, "addCompletedHandler:", void_block)                                     \
    X(useResidencySet, "useResidencySet:", void_id) /* macOS 15 */                                 \
    X(encodeSignalEvent_value, "encodeSignalEvent:value:", void_id_u64)                            \
    X(encodeWaitForEvent_value, "encodeWaitForEvent:value:", void_id_u64)                          \
    X(GPUStartTime, "GPUStartTime", double) /* CFTimeInterval */                                   \
    X(GPUEndTime, "GPUEndTime", double)     /* CFTimeInterval */                                   \
    /* MTLCommandEncoder, MTLComputeCommandEncoder */                                              \
    X(endEncoding, "endEncoding", void)                                                            \
    X(updateFence, "updateFence:", void_id)                                                        \
    X(waitForFence, "waitForFence:", void_id)                                                      \
    X(setComputePipelineState, "setComputePipelineState:", void_id)                                \
    X(setBuffer_offset_atIndex, "setBuffer:offset:atIndex:", void_id_uint_uint)                    \
    X(setBytes_length_atIndex, "setBytes:length:atIndex:", void_cptr_uint_uint)                    \
    X(setThreadgroupMemoryLength_atIndex, "setThreadgroupMemoryLength:atIndex:", void_uint_uint)   \
    X(dispatchThreads_threadsPerThreadgroup,                                                       \
      "dispatchThreads:threadsPerThreadgroup:", void_size_size)                                    \
    X(dispatchThreadgroups_threadsPerThreadgroup,                                                  \
      "dispatchThreadgroups:threadsPerThreadgroup:", void_size_size)                               \
    /* MTLBlitCommandEncoder */                                                                    \
    X(copyFromBuffer_sourceOffset_toBuffer_destinationOffset_size,                                 \
      "copyFromBuffer:sourceOffset:toBuffer:destinationOffset:size:", void_id_uint_id_uint_uint)   \
    X(fillBuffer_range_value, "fillBuffer:range:value:", void_id_range_u8)                         \
    X(synchronizeResource, "synchronizeResource:", void_id)                                        \
    /* MTLComputePipelineState */                                                                  \
    X(maxTotalThreadsPerThreadgroup, "maxTotalThreadsPerThreadgroup", uint)                        \
    X(threadExecutionWidth, "threadExecutionWidth", uint)                                          \
    X(staticThreadgroupMemoryLength, "staticThreadgroupMemoryLength", uint)                        \
    /* MTLComputePipelineReflection; MTLBinding (macOS 13 / iOS 16) and    \
     * MTLArgument before it (type, access, index, name as MTLBinding) */                       \
    X(bindings, "bindings", id)                                                                    \
    X(arguments, "arguments", id)                                                                  \
    X(type, "type", int)                                                                           \
    X(access, "access", uint)                                                                      \
    X(index, "index", uint)                                                                        \
    X(isUsed, "isUsed", boolean)                                                                   \
    X(isActive, "isActive", boolean)                                                               \
    /* MTLSharedEvent */                                                                           \
    X(signaledValue, "signaledValue", u64)                                                         \
    X(setSignaledValue, "setSignaledValue:", void_u64)                                             \
    /* MTLCaptureManager (sharedCaptureManager is a class method),             \
     * MTLCaptureDescriptor (alloc, init); MTLCaptureDestination is NSInteger */                   \
    X(sharedCaptureManager, "sharedCaptureManager", id)                                            \
    X(startCaptureWithDescriptor_error, "startCaptureWithDescriptor:error:", boolean_id_idp)       \
    X(stopCapture, "stopCapture", void)                                                            \
    X(setCaptureObject, "setCaptureObject:", void_id)                                              \
    X(setDestination, "setDestination:", void_int)                                                 \
    X(setOutputURL, "setOutputURL:", void_id)                                                      \
    /* NSString (stringWithCString:encoding: is a class method) */                                 \
    X(UTF8String, "UTF8String", cstr)                                                              \
    X(initWithBytes_length_encoding, "initWithBytes:length:encoding:", id_cptr_uint_uint)          \
    X(stringWithCString_encoding, "stringWithCString:encoding:", id_cstr_uint)                     \
    /* NSURL (class method), for newLibraryWithURL:error: */                                       \
    X(fileURLWithPath, "fileURLWithPath:", id_id)                                                  \
    /* NSError */                                                                                  \
    X(localizedDescription, "localizedDescription", id)                                            \
    X(domain, "domain", id)                                                                        \
    X(code, "code", int)                                                                           \
    /* NSArray */                                                                                  \
    X(count, "count", uint)                                                                        \
    X(objectAtIndex, "objectAtIndex:", id_uint)                                                    \
    X(arrayWithObjects_count, "arrayWithObjects:count:", id_cptr_uint)                             \
    /* NSObject (alloc is a class method) */                                                       \
    X(alloc, "alloc", id)                                                                          \
    X(init, "init", id)                                                                            \
    X(respondsToSelector, "respondsToSelector:", boolean_sel)                                      \
    X(retain, "retain", id)                                                                        \
    X(autorelease, "autorelease", id)                                                              \
    X(release, "release", void)                                                                    \
    X(retainCount, "retainCount", uint)

/* CM__OBJC_CLASSES(X): X(ident, "ClassName"); CM__CLASS(ident) looks it up. */
#define CM__OBJC_CLASSES(X)                                                                        \
    X(NSString, "NSString")                                                                        \
    X(NSURL, "NSURL")                                                                              \
    X(MTLCompileOptions, "MTLCompileOptions")                                                      \
    X(MTLFunctionConstantValues, "MTLFunctionConstantValues")                                      \
    X(MTLComputePipelineDescriptor, "MTLComputePipelineDescriptor")                                \
    X(MTLResidencySetDescriptor, "MTLResidencySetDescriptor")                                      \
    X(MTLHeapDescriptor, "MTLHeapDescriptor")                                                      \
    X(MTLBinaryArchiveDescriptor, "MTLBinaryArchiveDescriptor")                                    \
    X(MTLCaptureManager, "MTLCaptureManager")                                                      \
    X(MTLCaptureDescriptor, "MTLCaptureDescriptor")                                                \
    X(NSArray, "NSArray")

/* One macro per signature: CM__SIG_<sig>(M, ident) expands to
 * M(ident, sig, return type, return keyword, (, params), (, args), "text").
 * The text is the C signature after (id self, SEL _cmd), in the notation of
 * tests/objc/apple_selectors.tsv. */
#define CM__SIG_id(M, i) M(i, id, cm__id, return, (), (), "() -> id")
#define CM__SIG_u64(M, i) M(i, u64, uint64_t, return, (), (), "() -> uint64_t")
#define CM__SIG_boolean(M, i) M(i, boolean, bool, return, (), (), "() -> BOOL")
#define CM__SIG_uint(M, i) M(i, uint, cm__uint, return, (), (), "() -> NSUInteger")
#define CM__SIG_int(M, i) M(i, int, cm__int, return, (), (), "() -> NSInteger")
#define CM__SIG_double(M, i) M(i, double, double, return, (), (), "() -> double")
#define CM__SIG_ptr(M, i) M(i, ptr, void *, return, (), (), "() -> void *")
#define CM__SIG_cstr(M, i) M(i, cstr, const char *, return, (), (), "() -> const char *")
#define CM__SIG_size(M, i) M(i, size, cm__mtl_size, return, (), (), "() -> MTLSize")
#define CM__SIG_id_uint_uint(M, i)                                                                 \
    M(i, id_uint_uint, cm__id, return, (, cm__uint a, cm__uint b), (, a, b),                       \
      "(NSUInteger, NSUInteger) -> id")
#define CM__SIG_id_cptr_uint_uint(M, i)                                                            \
    M(i, id_cptr_uint_uint, cm__id, return, (, const void *a, cm__uint b, cm__uint c),             \
      (, a, b, c), "(const void *, NSUInteger, NSUInteger) -> id")
#define CM__SIG_id_ptr_uint_uint_block(M, i)                                                       \
    M(i, id_ptr_uint_uint_block, cm__id, return,                                                   \
      (, void *a, cm__uint b, cm__uint c, cm__block *d), (, a, b, c, d),                           \
      "(void *, NSUInteger, NSUInteger, void (^)(void *, NSUInteger)) -> id")
#define CM__SIG_id_id_id_idp(M, i)                                                                 \
    M(i, id_id_id_idp, cm__id, return, (, cm__id a, cm__id b, cm__id * c), (, a, b, c),            \
      "(id, id, id *) -> id")
#define CM__SIG_id_id_idp(M, i)                                                                    \
    M(i, id_id_idp, cm__id, return, (, cm__id a, cm__id * b), (, a, b), "(id, id *) -> id")
#define CM__SIG_id_id_uint_idp_idp(M, i)                                                           \
    M(i, id_id_uint_idp_idp, cm__id, return, (, cm__id a, cm__uint b, cm__id * c, cm__id * d),     \
      (, a, b, c, d), "(id, NSUInteger, id *, id *) -> id")
#define CM__SIG_id_cptr_uint(M, i)                                                                 \
    M(i, id_cptr_uint, cm__id, return, (, const void *a, cm__uint b), (, a, b),                    \
      "(const id *, NSUInteger) -> id")
#define CM__SIG_boolean_id_idp(M, i)                                                               \
    M(i, boolean_id_idp, bool, return, (, cm__id a, cm__id * b), (, a, b), "(id, id *) -> BOOL")
#define CM__SIG_id_id(M, i) M(i, id_id, cm__id, return, (, cm__id a), (, a), "(id) -> id")
#define CM__SIG_id_uint(M, i)                                                                      \
    M(i, id_uint, cm__id, return, (, cm__uint a), (, a), "(NSUInteger) -> id")
#define CM__SIG_id_cstr_uint(M, i)                                                                 \
    M(i, id_cstr_uint, cm__id, return, (, const char *a, cm__uint b), (, a, b),                    \
      "(const char *, NSUInteger) -> id")
#define CM__SIG_boolean_int(M, i)                                                                  \
    M(i, boolean_int, bool, return, (, cm__int a), (, a), "(NSInteger) -> BOOL")
#define CM__SIG_boolean_id(M, i) M(i, boolean_id, bool, return, (, cm__id a), (, a), "(id) -> BOOL")
#define CM__SIG_boolean_sel(M, i)                                                                  \
    M(i, boolean_sel, bool, return, (, cm__sel a), (, a), "(SEL) -> BOOL")
#define CM__SIG_void_boolean(M, i) M(i, void_boolean, void, , (, bool a), (, a), "(BOOL) -> void")
#define CM__SIG_void_int(M, i) M(i, void_int, void, , (, cm__int a), (, a), "(NSInteger) -> void")
#define CM__SIG_void_uint(M, i)                                                                    \
    M(i, void_uint, void, , (, cm__uint a), (, a), "(NSUInteger) -> void")
#define CM__SIG_void_range(M, i)                                                                   \
    M(i, void_range, void, , (, cm__ns_range a), (, a), "(NSRange) -> void")
#define CM__SIG_void(M, i) M(i, void, void, , (), (), "() -> void")
#define CM__SIG_void_id(M, i) M(i, void_id, void, , (, cm__id a), (, a), "(id) -> void")
#define CM__SIG_void_block(M, i)                                                                   \
    M(i, void_block, void, , (, cm__block * a), (, a), "(void (^)(id)) -> void")
#define CM__SIG_void_id_u64(M, i)                                                                  \
    M(i, void_id_u64, void, , (, cm__id a, uint64_t b), (, a, b), "(id, uint64_t) -> void")
#define CM__SIG_void_u64(M, i) M(i, void_u64, void, , (, uint64_t a), (, a), "(uint64_t) -> void")
#define CM__SIG_void_id_uint_uint(M, i)                                                            \
    M(i, void_id_uint_uint, void, , (, cm__id a, cm__uint b, cm__uint c), (, a, b, c),             \
      "(id, NSUInteger, NSUInteger) -> void")
#define CM__SIG_void_cptr_uint_uint(M, i)                                                          \
    M(i, void_cptr_uint_uint, void, , (, const void *a, cm__uint b, cm__uint c), (, a, b, c),      \
      "(const void *, NSUInteger, NSUInteger) -> void")
#define CM__SIG_void_uint_uint(M, i)                                                               \
    M(i, void_uint_uint, void, , (, cm__uint a, cm__uint b), (, a, b),                             \
      "(NSUInteger, NSUInteger) -> void")
#define CM__SIG_void_size_size(M, i)                                                               \
    M(i, void_size_size, void, , (, cm__mtl_size a, cm__mtl_size b), (, a, b),                     \
      "(MTLSize, MTLSize) -> void")
#define CM__SIG_void_id_uint_id_uint_uint(M, i)                                                    \
    M(i, void_id_uint_id_uint_uint, void, ,                                                        \
      (, cm__id a, cm__uint b, cm__id c, cm__uint d, cm__uint e), (, a, b, c, d, e),               \
      "(id, NSUInteger, id, NSUInteger, NSUInteger) -> void")
#define CM__SIG_void_id_range_u8(M, i)                                                             \
    M(i, void_id_range_u8, void, , (, cm__id a, cm__ns_range b, uint8_t c), (, a, b, c),           \
      "(id, NSRange, uint8_t) -> void")

#endif /* CMETAL_OBJC_SELECTORS_H */
