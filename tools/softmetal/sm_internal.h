/* SPDX-License-Identifier: MIT */
/* softmetal internals shared between its source files (hidden symbols). */
#ifndef SM_INTERNAL_H
#define SM_INTERNAL_H

#include <objc/runtime.h>
#include <objc/message.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "softmetal.h"

#define SM_EXPORT __attribute__((visibility("default")))

typedef unsigned long NSUInteger;
typedef long NSInteger;
typedef struct {
  NSUInteger width, height, depth;
} MTLSize;
typedef struct {
  NSUInteger location, length;
} NSRange;

/* Exported with Apple's names. */
SM_EXPORT id MTLCreateSystemDefaultDevice(void);
SM_EXPORT id MTLCopyAllDevices(void);
SM_EXPORT void *objc_autoreleasePoolPush(void);
SM_EXPORT void objc_autoreleasePoolPop(void *token);

/* Every softmetal object starts with this header. */
typedef struct sm_class sm_class;
struct sm_host;
typedef struct sm_obj {
  Class isa;
  const sm_class *cls;
  atomic_long rc;
  id label;                       /* NSString or nil; every Metal object may carry one */
  _Atomic(struct sm_host *) host; /* host-API state (sm_host.c), made on first use */
} sm_obj;

struct sm_class {
  const char *name;
  size_t size;
  void (*destroy)(sm_obj *self); /* frees what the object owns, or NULL */
  Class objc;
  atomic_long live;
};

/* Cast any method function to IMP without -Wcast-function-type noise. */
#define SM_IMP(fn) ((IMP)(void (*)(void))(fn))

/* Class definition: begin, add methods, end. */
Class sm__class_begin(sm_class *k);
Class sm__class_begin_super(sm_class *k, Class super); /* a subclass of super */
void sm__class_end(sm_class *k);
void sm__method(Class c, const char *sel, IMP imp, const char *types);
void sm__class_method(Class c, const char *sel, IMP imp, const char *types);
/* A method table: entries {selector, implementation, type encoding}, a
 * class method's selector written with a leading '+', ended by {NULL}. */
typedef struct {
  const char *sel;
  IMP imp;
  const char *types;
} sm_method_def;
#define SM_METHOD(sel, fn, types) {sel, SM_IMP(fn), types}
void sm__methods(Class c, const sm_method_def *table);
/* Defines class k, a subclass of super (NSObject when Nil), with the methods
 * of each table of the NULL-ended list tables, and registers it. A selector
 * given twice is fatal: no method replaces another. */
Class sm__class_define(sm_class *k, Class super, const sm_method_def *const *tables);
#define SM_CLASS_DEFINE(k, super, ...)                                                             \
  sm__class_define(k, super, (const sm_method_def *const[]){__VA_ARGS__, NULL})

/* Grows the array *items_ptr points to (an array of elements elem bytes
 * each, *cap of them) to twice *cap, or to first when *cap is 0. True when
 * it grew; false, nothing changed, when memory is short or the size would
 * overflow. items_ptr is the address of the array's pointer (any type). */
static inline bool sm__grow(void *items_ptr, size_t *cap, size_t elem, size_t first) {
  size_t n = *cap ? *cap : first;
  if (*cap && n > SIZE_MAX / 2 / elem) return false;
  if (*cap)
    n *= 2;
  else if (n > SIZE_MAX / elem)
    return false;
  void *items;
  memcpy(&items, items_ptr, sizeof items);
  void *grown = realloc(items, n * elem);
  if (!grown) return false;
  memcpy(items_ptr, &grown, sizeof grown);
  *cap = n;
  return true;
}

/* A new instance with rc 1 (+1), zeroed beyond the header. */
void *sm__new(sm_class *k);
id sm__retain(id o);
void sm__release(id o);
id sm__autorelease(id o);
/* Makes o live as long as the process, counted neither as live nor as allocated. */
id sm__immortal(id o);
bool sm__is(id o, const sm_class *k);
/* Whether o's softmetal class is the one named name (e.g. "SMBuffer"). */
bool sm__is_named(id o, const char *name);
Class sm__root_class(void); /* NSObject */

/* API misuse that Metal's validation would stop: print and abort. */
_Noreturn void sm__fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Foundation. */
extern sm_class sm__string_class, sm__error_class, sm__array_class;
id sm__string(const char *utf8); /* +1 */
/* Any string object: ours, or a literal clang compiled (NXConstantString). */
bool sm__is_string(id s);
bool sm__equal(id a, id b);        /* isEqual:, with strings (literals too) by content */
const char *sm__string_utf8(id s); /* borrowed, NULL for nil */
id sm__string_copy(id s);          /* +1: an NSString of ours equal to the string s, nil for nil */
id sm__error(const char *domain, NSInteger code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));             /* +1 */
id sm__array(id *items, size_t n);                     /* +1, retains items */
id sm__dictionary_new(id *keys, id *values, size_t n); /* +1 NSDictionary, copies keys */
id sm__dictionary_get(id dict, const char *key);       /* borrowed; nil when absent */
id sm__number_u64(uint64_t v);                         /* +1 NSNumber */
/* Calls fn(key, value, ctx) for each entry of an NSDictionary, in insertion order. */
void sm__dictionary_each(id dict, void (*fn)(id key, id value, void *ctx), void *ctx);
void *sm__pool_push(void);
void sm__pool_pop(void *token);

/* Blocks (clang Block ABI). */
/* sm_dispatch.c: its classes; waits until no dispatched work is queued or
 * running (softmetal_quiesce). */
void sm__register_dispatch(void);
void sm__dispatch_quiesce(void);
void *sm__block_copy(const void *block);
void sm__block_release(const void *block);
void sm__block_invoke_dealloc(const void *block, void *ptr, NSUInteger len);
void sm__block_invoke_handler(const void *block, id arg);

/* Counters. */
extern atomic_long sm__buffer_bytes, sm__compiles, sm__cache_hits, sm__unsafe_math_libraries;
extern atomic_long sm__blocked_cmdbuf; /* threads blocked in commandBuffer */

/* MTLResourceOptions (Apple's layout): CPU cache mode in bits 0-3, storage
 * mode in 4-7, hazard tracking mode in 8-11. Buffers of the device and of
 * heaps (sm_metal.c, sm_heap.c) decode them alike. */
enum { SM_PAGE = 16384 }; /* buffers' alignment and size granule */
enum { ST_SHARED = 0, ST_MANAGED = 1, ST_PRIVATE = 2, ST_MEMORYLESS = 3 };
enum { HAZARD_DEFAULT = 0, HAZARD_UNTRACKED = 1, HAZARD_TRACKED = 2 };
static inline NSUInteger sm__options_cache(NSUInteger o) { return o & 0xF; }
static inline NSUInteger sm__options_storage(NSUInteger o) { return (o >> 4) & 0xF; }
static inline NSUInteger sm__options_hazard(NSUInteger o) { return (o >> 8) & 0xF; }
static inline NSUInteger sm__options(NSUInteger cache, NSUInteger storage, NSUInteger hazard) {
  return cache | storage << 4 | hazard << 8;
}
/* Prints "softmetal: sel: <message>; returning nil" (a creation that gives nil). */
void sm__refuse(const char *sel, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Per-file registration, run once from the library constructor (sm_load.c). */
void sm__register_foundation(void); /* sm_foundation.c: first */
/* Registers an error domain: *slot becomes its NSString, which every NSError
 * of that domain carries (sm__error). */
void sm__error_domain(id *slot, const char *name);
/* The object counts of softmetal_stats (sm_foundation.c). */
void sm__object_stats(struct softmetal_stats *out);
void sm__register_metal(void);
void sm__register_msl(void);
void sm__register_archive(void); /* sm_archive.c: after the device class registers */
void sm__register_host(void);    /* sm_host.c, sm_heap.c: after every other class */
void sm__register_heap(void);
void sm__register_ns(void); /* sm_ns.c: after the Foundation core */
/* Calls up from the object model (sm_hooks.c), set by the file above that
 * owns them when it registers: the root dealloc frees an object's host
 * record through sm__host_free_hook (sm_host.c), NSError's userInfo is made
 * by sm__dictionary_hook (sm_ns.c). */
extern void (*sm__host_free_hook)(sm_obj *o);
extern id (*sm__dictionary_hook)(id *keys, id *values, size_t n);
void sm__register_reflect(void); /* sm_reflect.c: from sm__register_archive */
/* Pipeline reflection (sm_reflect.c): checks options (MTLPipelineOption) and,
 * when reflection is not NULL, stores an autoreleased
 * MTLComputePipelineReflection of pipeline (nil for a nil pipeline). False
 * when out of memory. */
bool sm__reflect_into(id pipeline, NSUInteger options, id *reflection, const char *sel);
/* Classes whose methods come from several files (the device is the factory
 * of every object): each file that implements some of a class's methods
 * exports them as a table, and sm_classes.c (above them all) defines the
 * class once from every table, before any other file's classes register.
 * No file adds a method to a class after its definition. */
void sm__register_classes(void);
extern sm_class *const sm__device_k,
    *const sm__buffer_k, *const sm__shared_event_k,
                             *const sm__queue_k, *const sm__cmdbuf_k,
                                                     *const sm__blit_k,
                                                         *const sm__compute_k;     /* sm_metal.c */
extern sm_class *const sm__options_k, *const sm__library_k, *const sm__function_k; /* sm_msl.c */
extern const sm_method_def sm__device_metal_methods[], sm__device_msl_methods[],
    sm__device_archive_methods[], sm__device_reflect_methods[], sm__device_heap_methods[],
    sm__device_argenc_methods[], sm__device_host_methods[];
extern const sm_method_def sm__buffer_metal_methods[], sm__buffer_heap_methods[];
extern const sm_method_def sm__shared_event_metal_methods[], sm__shared_event_host_methods[];
extern const sm_method_def sm__queue_metal_methods[], sm__queue_host_methods[];
extern const sm_method_def sm__cmdbuf_metal_methods[], sm__cmdbuf_host_methods[];
/* sm__encoder_host_methods: both encoders; sm__compute_host_methods: compute only. */
extern const sm_method_def sm__blit_metal_methods[], sm__compute_metal_methods[],
    sm__encoder_host_methods[], sm__compute_host_methods[];
extern const sm_method_def sm__options_msl_methods[], sm__options_host_methods[];
const sm_method_def *sm__options_math_methods(void); /* NULL under SOFTMETAL_NO_MATH_MODE=1 */
extern const sm_method_def sm__library_msl_methods[], sm__library_host_methods[];
extern const sm_method_def sm__function_msl_methods[], sm__function_argenc_methods[];
/* -[MTLDevice newLibraryWithSource:options:error:] without the compile
 * options' preprocessor macros (sm_msl.c); the method itself is sm_host.c's. */
id sm__device_new_library(id self, SEL cmd, id source, id options, id *error);

/* The kernel cache's files of a function (sm_compile.c), each under the
 * SHA-256 of its key material: its generated code, its library's checked
 * source, and the --version output of the compiler (part of both keys).
 * Strings borrowed from the function's library. */
typedef struct {
  unsigned char key[32]; /* f-<...>.so */
  const char *path;
  unsigned char library_key[32]; /* l-<...>.ii */
  const char *library_path;
  unsigned char compiler_key[32]; /* cc-<...>.txt */
  const char *compiler_path;
} sm_code;
/* The files of a function, its code generated first if it was not; NULL
 * with *diag (malloc'd) on failure. */
const sm_code *sm__function_code(id function, char **diag);
/* The key of a function's code, without generating it; false when function
 * is not a softmetal function. */
bool sm__function_code_key(id function, unsigned char key[32]);

/* Binary archives (sm_archive.c): when an archive alive in the process
 * holds the file of kind and key, and `path` does not exist, writes it
 * there (as the kernel cache's file) and returns true. */
enum { SM_ARCHIVE_CODE = 0, SM_ARCHIVE_COMPILER = 1, SM_ARCHIVE_LIBRARY = 2 };
/* The compiler (below the archives) calls it through a hook (sm_hooks.c)
 * that sm__register_archive sets. */
extern bool (*sm__archive_restore_hook)(uint32_t kind, const unsigned char key[32],
                                        const char *path);
static inline bool sm__archive_restore(uint32_t kind, const unsigned char key[32],
                                       const char *path) {
  return sm__archive_restore_hook && sm__archive_restore_hook(kind, key, path);
}
extern atomic_long sm__archive_restores;

/* sm_metal.c's services to the host API (sm_host.c, sm_heap.c). */
void sm__device_account(id device, long bytes); /* adds bytes to currentAllocatedSize */
NSUInteger sm__buffer_reserved(id buffer);      /* bytes a device buffer counts (page-rounded) */
/* What kernels dereference for buffer (its GPU-side copy; never gpuAddress)
 * and its length; NULL when buffer is not a softmetal buffer. */
void *sm__buffer_gpu(id buffer, NSUInteger *length);
/* Heaps and residency sets (sm_heap.c), for the host API (sm_host.c). */
/* A heap buffer went away (mark_aliasable false) or became aliasable: its
 * bytes are free again. */
void sm__heap_give_back(id heap, NSUInteger off, NSUInteger size, bool mark_aliasable);
void sm__heap_buffer_gone(id heap, id buffer); /* a buffer of the heap is going */
void sm__heap_use(id heap, id encoder);        /* useHeap: */
bool sm__is_residency_set(id o);
id sm__residency_set_device(id o);
/* A heap buffer's state in its host record (sm_host.c), for sm_heap.c:
 * its heap (retained), offset and size; aliasable; its purgeable state cell. */
void sm__host_set_heap_slot(id buffer, id heap, NSUInteger off, NSUInteger size);
bool sm__host_heap_slot(id buffer, id *heap, NSUInteger *off, NSUInteger *size);
void sm__host_set_aliasable(id buffer);
bool sm__host_aliasable(id buffer);
NSUInteger *sm__host_purgeable(id buffer);
/* NSURL (sm_ns.c): file URLs only, what fileURLWithPath: makes. */
typedef struct {
  sm_obj hdr;
  id path; /* NSString */
} sm_url;
extern sm_class sm__url_class;
/* dispatch_data_t (sm_data.c): its bytes, copied or the caller's. */
typedef struct {
  sm_obj hdr;
  void *bytes;
  size_t size;
  int owner;   /* 0 copy, 1 free, 2 munmap, 3 block */
  void *block; /* copied destructor block */
} sm_dispatch_data;
extern sm_class sm__dispatch_data_class;
SM_EXPORT id dispatch_data_create(const void *buffer, size_t size, void *queue, void *destructor);
void sm__register_data(void); /* after the Foundation core */
/* Argument buffers (sm_argenc.c, sm_msl.c). The layout of the struct that
 * buffer index of function points to, its code generated first; NULL with
 * *diag (malloc'd) on failure, NULL with *diag NULL when it is no such struct. */
const struct sm_argbuf_layout *sm__function_argbuf(id function, unsigned index, id *device,
                                                   char **diag);
void sm__register_argenc(void); /* after sm__register_host */
/* A buffer over mem (a heap's, page-aligned; neither owned nor counted against
 * the device), +1; nil with a message when options or length are invalid. */
id sm__buffer_new_placed(id device, const char *sel, void *mem, NSUInteger length,
                         NSUInteger options);
/* The buffer bound at index of a compute encoder (and its offset), or nil. */
id sm__encoder_buffer(id encoder, NSUInteger index, NSUInteger *offset);
id sm__encoder_cmdbuf(id encoder);
/* useResource:usage: of an untracked buffer: later dispatches of the encoder
 * use it (write: MTLResourceUsageWrite) in the hazard checks. */
void sm__encoder_use(id encoder, id buffer, bool write);
/* Fails a command buffer being encoded (the first message is the one reported). */
void sm__cmdbuf_fail(id cmdbuf, const char *msg);
/* Indirect dispatch: threadgroups per grid read from buffer at execution. */
void sm__encoder_dispatch_indirect(id encoder, SEL cmd, id buffer, NSUInteger offset,
                                   MTLSize threads_per_group);

/* sm_host.c's callbacks, called by sm_metal.c (below it) through
 * sm__host_hooks (sm_hooks.c), which sm__register_host fills; a NULL one is
 * skipped. */
typedef struct {
  void (*cb_scheduled)(id cmdbuf);     /* queue thread: before its first command runs */
  void (*cb_finished)(id cmdbuf);      /* queue thread: after its last, before its status */
  bool (*cb_has_scheduled)(id cmdbuf); /* it has scheduled handlers (committed: fixed) */
  void (*event_signaled)(id event, uint64_t value); /* after the value is set */
  /* Appends " (debug groups: ...)" naming the open debug groups, if any. */
  void (*debug_groups)(id cmdbuf, id encoder, char *out, size_t len);
} sm_host_hooks;
extern sm_host_hooks sm__host_hooks;
static inline void sm__host_cb_scheduled(id cmdbuf) {
  if (sm__host_hooks.cb_scheduled) sm__host_hooks.cb_scheduled(cmdbuf);
}
static inline void sm__host_cb_finished(id cmdbuf) {
  if (sm__host_hooks.cb_finished) sm__host_hooks.cb_finished(cmdbuf);
}
static inline bool sm__host_cb_has_scheduled(id cmdbuf) {
  return sm__host_hooks.cb_has_scheduled && sm__host_hooks.cb_has_scheduled(cmdbuf);
}
static inline void sm__host_event_signaled(id event, uint64_t value) {
  if (sm__host_hooks.event_signaled) sm__host_hooks.event_signaled(event, value);
}
static inline void sm__host_debug_groups(id cmdbuf, id encoder, char *out, size_t len) {
  if (sm__host_hooks.debug_groups) sm__host_hooks.debug_groups(cmdbuf, encoder, out, len);
}

/* Messages to our own objects, through the runtime (exact prototypes). */
static inline IMP sm__lookup(id o, const char *sel) {
  return objc_msg_lookup(o, sel_registerName(sel));
}

/* Personas and validation modes (sm_persona.c), read when the library loads
 * (sm__modes_init, first thing of the constructor). */
typedef enum {
  SM_PERSONA_APPLE_SILICON,
  SM_PERSONA_PARAVIRTUAL,
  SM_PERSONA_AMD_DISCRETE
} sm_persona_kind;
/* Kernel features a device may lack (sm_kernel_desc.features). */
enum {
  SM_FEATURE_SIMD_PERMUTE = 1u,
  SM_FEATURE_SIMD_REDUCTION = 2u,
  SM_FEATURE_SIMDGROUP_MATRIX = 4u,
  SM_FEATURE_ALL = 7u,
};
typedef struct {
  sm_persona_kind kind;
  const char *env_name;    /* SOFTMETAL_PERSONA's value */
  const char *device_name; /* NULL: softmetal's own names */
  bool one_device;     /* MTLCopyAllDevices gives one device whatever SOFTMETAL_DEVICE_COUNT says */
  bool unified;        /* hasUnifiedMemory */
  uint32_t simd_width; /* threadExecutionWidth, lanes of a SIMD group */
  NSUInteger max_threads;   /* maxThreadsPerThreadgroup, maxTotalThreadsPerThreadgroup */
  NSUInteger max_tg_memory; /* maxThreadgroupMemoryLength */
  NSUInteger max_buffer;    /* maxBufferLength */
  uint64_t working_set;     /* recommendedMaxWorkingSetSize */
  uint32_t features;        /* SM_FEATURE_* it has */
} sm_persona;
void sm__modes_init(void);
const sm_persona *sm__persona(void);
bool sm__persona_supports_family(NSInteger family);
/* Words naming the first feature of features that the persona lacks, or NULL. */
const char *sm__feature_missing(uint32_t features);
/* MTL_DEBUG_LAYER=1: Metal's API validation is on. */
bool sm__debug_layer(void);
/* Under MTL_DEBUG_LAYER=1 aborts naming the class and the broken rule, as
 * Metal's validation layer does at encode; otherwise returns. */
void sm__api_misuse_abort(const char *cls, const char *msg);
/* Misuse that a Mac without the validation layer tolerates, tolerated:
 * counted, and a warning to stderr once per rule (0..31). */
enum { SM_LENIENT_TG_LENGTH = 0, SM_LENIENT_FC_VALUE = 1 };
void sm__lenient(unsigned rule, const char *what);
long sm__lenient_uses(void);

#endif

/* ------------------------------------------------------------- kernels */
#include "sm_abi.h"

/* NSFastEnumerationState, as clang's for-in passes it to
 * countByEnumeratingWithState:objects:count: (NSArray, NSDictionary). */
typedef struct {
  unsigned long state;
  id *items;
  unsigned long *mutations;
  unsigned long extra[5];
} sm_fast_enum_state;

typedef struct {
  sm_obj hdr;
  id function;                       /* SMFunction, retained */
  const struct sm_kernel_desc *desc; /* &desc_copy */
  struct sm_kernel_desc desc_copy;   /* masks without absent function-constant parameters */
  const unsigned char *fc_values, *fc_defined; /* owned by the function */
  NSUInteger max_threads;
  NSUInteger static_tg; /* staticThreadgroupMemoryLength: threadgroup variables of bodies */
  bool logging;         /* its library's MTLCompileOptions.enableLogging: os_log prints */
  /* Its tracked code (sm__pipeline_tracked), set once before tracked_ready. */
  sm_kernel_fn tracked_fn, tracked_group_fn;
  atomic_bool tracked_ready;
} sm_pipeline;
extern sm_class sm__pipeline_class;
/* Makes p's tracked code (every memory access reported to sm__touch) on
 * first need; false with *diag (malloc'd) when it cannot be generated. */
bool sm__pipeline_tracked(sm_pipeline *p, char **diag);
/* The tracked code's hook: a kernel accessed bytes [address, address + n). */
void sm__touch(unsigned long address, unsigned long n, int write);
/* Where the calling thread's tracking state (sm_exec.c's t_track: the span
 * of the bindings it tracks, empty when none, then its ranges) lies, in
 * bytes from the thread pointer; the same in every thread. */
long sm__touch_window(void);

/* A recorded compute dispatch; bindings resolved at execution. */
typedef struct {
  sm_pipeline *pipeline;                  /* retained */
  void *buffers[SM_MAX_BINDINGS];         /* resolved pointers (contents + offset) */
  void *bytes[SM_MAX_BINDINGS];           /* owned copies from setBytes */
  NSUInteger buffer_len[SM_MAX_BINDINGS]; /* bytes of buffers[i] from its offset; 0 unknown */
  NSUInteger tg_len[SM_MAX_BINDINGS];
  MTLSize grid;   /* threads per grid */
  MTLSize tg;     /* threads per threadgroup */
  MTLSize groups; /* threadgroups per grid */
  /* Runs the pipeline's tracked code and records, per range (touched[],
   * by descending start), the lowest and highest addresses read and
   * written: NULL when not tracked. */
  struct sm_touched *touched;
  unsigned ntouched;
} sm_dispatch;
/* A range of a buffer from a binding's address up to the next binding's
 * address in the same buffer (or the buffer's end), and the bytes a
 * dispatch touched in it: [lo, hi) as addresses, lo > hi when none. */
struct sm_touched {
  uintptr_t start, end;
  const void *owner; /* the buffer */
  uintptr_t rlo, rhi, wlo, whi;
};

/* Threadgroup variables declared in function bodies (sm_thread.tg_var): an
 * arena per running threadgroup; begin() at each threadgroup start. */
typedef struct sm_tg_arena sm_tg_arena;
sm_tg_arena *sm__tg_arena_new(void);
void sm__tg_arena_begin(sm_tg_arena *a);
void sm__tg_arena_free(sm_tg_arena *a);
void *sm__tg_var(struct sm_thread *t, uint32_t decl, uint32_t size, uint32_t align);

/* Runs d, its threadgroups on the calling thread and the workers of the
 * pool (sm_exec.c). On failure writes a message and returns false. */
bool sm__run_dispatch(const sm_dispatch *d, char *err, size_t errlen);
/* Frees what this thread keeps between dispatches (as when it ends): for
 * the thread that exits the process, which ran kernels while waiting. */
void sm__exec_thread_done(void);
/* Joins the pool's workers (when the last device is released). */
void sm__exec_shutdown(void);

/* Kernel faults (sm_fault.c). While a thread runs kernel code, sm__t_fault
 * points at its record; a fault then fills it and, after the signal handler
 * returns, land(f) runs on the faulting stack (it must not return). */
typedef struct sm_fault {
  void (*land)(struct sm_fault *f);
  void *arg;         /* for land() */
  uintptr_t safe_sp; /* where land() runs after a stack overflow; 0: not caught */
  int fired;
  int sig, code;
  int write;     /* SIGSEGV: 1 write, 0 read, -1 unknown */
  int trap_kind; /* clang's -fsanitize-trap check kind, or -1 */
  bool stack_overflow;
  void *addr, *pc;
  /* integer division by zero faults (MTL_SHADER_VALIDATION=1); else it
   * gives a value and the kernel goes on, as on a GPU */
  bool divide_faults;
} sm_fault;
extern __thread sm_fault *sm__t_fault __attribute__((tls_model("initial-exec")));
void sm__fault_init(void); /* installs the handlers once */
typedef struct {
  void *mem;
} sm_altstack;
/* A thread made to run kernels: fault signals unblocked, a signal stack. */
void sm__altstack_push(sm_altstack *a);
void sm__altstack_pop(sm_altstack *a);
/* Whether this thread, not made to run kernels, may run them now: faults
 * would be caught as on softmetal's own threads (it gets a signal stack,
 * kept until it ends, if it has none). */
bool sm__fault_thread_ready(void);
/* The rule a fault broke, in words (buf: scratch). */
const char *sm__fault_rule(const sm_fault *f, char *buf, size_t len);
/* MTL_SHADER_VALIDATION=1: buffers softmetal allocates end at an inaccessible
 * guard (sm__guard_bytes() of it, and as much before the start). */
bool sm__shader_validation(void);
void *sm__guarded_alloc(size_t length); /* zeroed, 16-byte aligned, or NULL */
void sm__guarded_free(void *p, size_t length);
size_t sm__guard_bytes(void);
