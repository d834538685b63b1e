/* SPDX-License-Identifier: MIT */
/* Pipeline reflection: MTLComputePipelineReflection with `bindings` (objects
 * answering MTLBinding, MTLBufferBinding or MTLThreadgroupBinding, macOS 13 /
 * iOS 16) and the older `arguments` (MTLArgument), made from the front end's
 * description of the kernel (sm_kernel_desc: the buffer, written and
 * threadgroup masks, without parameters a false function constant removes).
 *
 * What softmetal knows: every [[buffer(n)]] and [[threadgroup(n)]]
 * parameter, and whether a buffer is written (a non-const device pointer or
 * reference: access ReadWrite; const device and constant: ReadOnly). What it
 * does not know, and reports as 0: parameter names (name is ""), buffer
 * element types and sizes (bufferDataType None, bufferDataSize 0) and
 * threadgroupMemoryDataSize; bufferAlignment and threadgroupMemoryAlignment
 * are 16. Every binding is `used` (Metal reports a parameter the body never
 * touches as unused; softmetal cannot tell, so it asks for more, never less). */
#include "sm_internal.h"

#include <stdio.h>
#include <stdlib.h>

/* MTLPipelineOption, MTLBindingType / MTLArgumentType, MTLBindingAccess
 * (Apple's MTLDevice.h, MTLArgument.h). */
enum {
  OPTION_ARGUMENT_INFO = 1, /* = MTLPipelineOptionBindingInfo */
  OPTION_BUFFER_TYPE_INFO = 2,
  OPTION_FAIL_ON_BINARY_ARCHIVE_MISS = 4,
  BINDING_BUFFER = 0,
  BINDING_THREADGROUP = 1,
  ACCESS_READ_ONLY = 0,
  ACCESS_READ_WRITE = 1,
};

typedef struct {
  sm_obj hdr;
  id name; /* NSString */
  NSInteger type;
  NSUInteger access, index;
} sm_binding;

typedef struct {
  sm_obj hdr;
  id bindings, arguments; /* NSArray */
} sm_reflection;

static void binding_destroy(sm_obj *o) { sm__release(((sm_binding *)o)->name); }
static void reflection_destroy(sm_obj *o) {
  sm__release(((sm_reflection *)o)->bindings);
  sm__release(((sm_reflection *)o)->arguments);
}

static sm_class buffer_binding_class = {"SMBufferBinding", sizeof(sm_binding), binding_destroy, Nil,
                                        0};
static sm_class threadgroup_binding_class = {"SMThreadgroupBinding", sizeof(sm_binding),
                                             binding_destroy, Nil, 0};
static sm_class argument_class = {"MTLArgument", sizeof(sm_binding), binding_destroy, Nil, 0};
static sm_class reflection_class = {"MTLComputePipelineReflection", sizeof(sm_reflection),
                                    reflection_destroy, Nil, 0};

static id binding_new(sm_class *k, NSInteger type, NSUInteger index, NSUInteger access) {
  sm_binding *b = sm__new(k);
  if (!b) return nil;
  b->name = sm__string("");
  b->type = type;
  b->index = index;
  b->access = access;
  return (id)b;
}

/* The reflection (+1) of a softmetal pipeline; empty arrays without
 * MTLPipelineOptionArgumentInfo, as Metal. */
static id reflection_new(id pipeline, NSUInteger options) {
  const struct sm_kernel_desc *k = ((sm_pipeline *)pipeline)->desc;
  id items[2 * SM_MAX_BINDINGS], args[2 * SM_MAX_BINDINGS];
  size_t n = 0;
  for (unsigned i = 0; (options & OPTION_ARGUMENT_INFO) && i < SM_MAX_BINDINGS; i++) {
    if (k->buffer_mask >> i & 1u) {
      const NSUInteger access = (k->written_mask >> i & 1u) ? ACCESS_READ_WRITE : ACCESS_READ_ONLY;
      items[n] = binding_new(&buffer_binding_class, BINDING_BUFFER, i, access);
      args[n] = binding_new(&argument_class, BINDING_BUFFER, i, access);
      n++;
    }
    if (k->threadgroup_mask >> i & 1u) {
      items[n] = binding_new(&threadgroup_binding_class, BINDING_THREADGROUP, i, ACCESS_READ_WRITE);
      args[n] = binding_new(&argument_class, BINDING_THREADGROUP, i, ACCESS_READ_WRITE);
      n++;
    }
  }
  sm_reflection *r = sm__new(&reflection_class);
  bool ok = r != NULL;
  for (size_t i = 0; i < n; i++) ok = ok && items[i] && args[i];
  if (ok) {
    r->bindings = sm__array(items, n);
    r->arguments = sm__array(args, n);
    ok = r->bindings && r->arguments;
  }
  for (size_t i = 0; i < n; i++) {
    sm__release(items[i]);
    sm__release(args[i]);
  }
  if (!ok) {
    sm__release((id)r);
    return nil;
  }
  return (id)r;
}

bool sm__reflect_into(id pipeline, NSUInteger options, id *reflection, const char *sel) {
  if (options & ~(NSUInteger)(OPTION_ARGUMENT_INFO | OPTION_BUFFER_TYPE_INFO |
                              OPTION_FAIL_ON_BINARY_ARCHIVE_MISS))
    sm__fatal("-[SMDevice %s]: options = %lu is not a set of MTLPipelineOption "
              "(ArgumentInfo 1, BufferTypeInfo 2, FailOnBinaryArchiveMiss 4)",
              sel, (unsigned long)options);
  if (!reflection) return true;
  *reflection = nil;
  if (!pipeline) return true;
  id r = reflection_new(pipeline, options);
  if (!r) return false;
  *reflection = sm__autorelease(r);
  return true;
}

static id device_new_pipeline_reflect(id self, SEL cmd, id function, NSUInteger options,
                                      id *reflection, id *error) {
  const char *sel = sel_getName(cmd);
  if (options & OPTION_FAIL_ON_BINARY_ARCHIVE_MISS)
    sm__fatal("-[SMDevice %s]: MTLPipelineOptionFailOnBinaryArchiveMiss needs a descriptor with "
              "binaryArchives (newComputePipelineStateWithDescriptor:options:reflection:error:)",
              sel);
  id p = ((id(*)(id, SEL, id, id *))(void (*)(void))sm__lookup(
      self, "newComputePipelineStateWithFunction:error:"))(
      self, sel_registerName("newComputePipelineStateWithFunction:error:"), function, error);
  if (!sm__reflect_into(p, options, reflection, sel)) {
    sm__release(p);
    return nil;
  }
  return p;
}

/* MTLBinding, MTLBufferBinding, MTLThreadgroupBinding; MTLArgument. */
static id b_name(id self, SEL cmd) {
  (void)cmd;
  return ((sm_binding *)self)->name;
}
static NSInteger b_type(id self, SEL cmd) {
  (void)cmd;
  return ((sm_binding *)self)->type;
}
static NSUInteger a_type(id self, SEL cmd) {
  (void)cmd;
  return (NSUInteger)((sm_binding *)self)->type;
}
static NSUInteger b_access(id self, SEL cmd) {
  (void)cmd;
  return ((sm_binding *)self)->access;
}
static NSUInteger b_index(id self, SEL cmd) {
  (void)cmd;
  return ((sm_binding *)self)->index;
}
static BOOL b_yes(id self, SEL cmd) {
  (void)self;
  (void)cmd;
  return YES;
}
static BOOL b_no(id self, SEL cmd) {
  (void)self;
  (void)cmd;
  return NO;
}
static NSUInteger b_zero(id self, SEL cmd) {
  (void)self;
  (void)cmd;
  return 0;
}
static NSUInteger b_align(id self, SEL cmd) {
  (void)self;
  (void)cmd;
  return 16;
}
static id b_nil(id self, SEL cmd) {
  (void)self;
  (void)cmd;
  return nil;
}
static id r_bindings(id self, SEL cmd) {
  (void)cmd;
  return ((sm_reflection *)self)->bindings;
}
static id r_arguments(id self, SEL cmd) {
  (void)cmd;
  return ((sm_reflection *)self)->arguments;
}

static void common_methods(Class c, bool argument) {
  sm__method(c, "name", SM_IMP(b_name), "@@:");
  if (argument) {
    sm__method(c, "type", SM_IMP(a_type), "Q@:");
    sm__method(c, "isActive", SM_IMP(b_yes), "C@:");
  } else {
    sm__method(c, "type", SM_IMP(b_type), "q@:");
    sm__method(c, "isUsed", SM_IMP(b_yes), "C@:");
    sm__method(c, "isArgument", SM_IMP(b_no), "C@:");
  }
  sm__method(c, "access", SM_IMP(b_access), "Q@:");
  sm__method(c, "index", SM_IMP(b_index), "Q@:");
}
static void buffer_methods(Class c) {
  sm__method(c, "bufferAlignment", SM_IMP(b_align), "Q@:");
  sm__method(c, "bufferDataSize", SM_IMP(b_zero), "Q@:");
  sm__method(c, "bufferDataType", SM_IMP(b_zero), "Q@:");
  sm__method(c, "bufferStructType", SM_IMP(b_nil), "@@:");
  sm__method(c, "bufferPointerType", SM_IMP(b_nil), "@@:");
}
static void threadgroup_methods(Class c) {
  sm__method(c, "threadgroupMemoryAlignment", SM_IMP(b_align), "Q@:");
  sm__method(c, "threadgroupMemoryDataSize", SM_IMP(b_zero), "Q@:");
}

const sm_method_def sm__device_reflect_methods[] = {
    SM_METHOD("newComputePipelineStateWithFunction:options:reflection:error:",
              device_new_pipeline_reflect, "@@:@Q^@^@"),
    {NULL, NULL, NULL},
};

void sm__register_reflect(void) {
  Class c = sm__class_begin(&buffer_binding_class);
  common_methods(c, false);
  buffer_methods(c);
  sm__class_end(&buffer_binding_class);
  c = sm__class_begin(&threadgroup_binding_class);
  common_methods(c, false);
  threadgroup_methods(c);
  sm__class_end(&threadgroup_binding_class);
  c = sm__class_begin(&argument_class);
  common_methods(c, true);
  buffer_methods(c);
  threadgroup_methods(c);
  sm__class_end(&argument_class);
  c = sm__class_begin(&reflection_class);
  sm__method(c, "bindings", SM_IMP(r_bindings), "@@:");
  sm__method(c, "arguments", SM_IMP(r_arguments), "@@:");
  sm__class_end(&reflection_class);
}
