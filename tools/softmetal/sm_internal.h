/* softmetal internals shared between its source files (hidden symbols). */
#ifndef SM_INTERNAL_H
#define SM_INTERNAL_H

#include <objc/runtime.h>
#include <objc/message.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>
#include <string.h>

#include "softmetal.h"

#define SM_EXPORT __attribute__((visibility("default")))

typedef unsigned long NSUInteger;
typedef long NSInteger;
typedef struct { NSUInteger width, height, depth; } MTLSize;
typedef struct { NSUInteger location, length; } NSRange;

/* Exported with Apple's names. */
SM_EXPORT id MTLCreateSystemDefaultDevice(void);
SM_EXPORT id MTLCopyAllDevices(void);
SM_EXPORT void *objc_autoreleasePoolPush(void);
SM_EXPORT void objc_autoreleasePoolPop(void *token);

/* Every softmetal object starts with this header. */
typedef struct sm_class sm_class;
typedef struct sm_obj {
  Class isa;
  const sm_class *cls;
  atomic_long rc;
  id label; /* NSString or nil; every Metal object may carry one */
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
void sm__class_end(sm_class *k);
void sm__method(Class c, const char *sel, IMP imp, const char *types);
void sm__class_method(Class c, const char *sel, IMP imp, const char *types);

/* A new instance with rc 1 (+1), zeroed beyond the header. */
void *sm__new(sm_class *k);
id sm__retain(id o);
void sm__release(id o);
id sm__autorelease(id o);
bool sm__is(id o, const sm_class *k);

/* API misuse that Metal's validation would stop: print and abort. */
_Noreturn void sm__fatal(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));

/* Foundation. */
extern sm_class sm__string_class, sm__error_class, sm__array_class;
id sm__string(const char *utf8);                 /* +1 */
const char *sm__string_utf8(id s);               /* borrowed, NULL for nil */
id sm__error(const char *domain, NSInteger code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));       /* +1 */
id sm__array(id *items, size_t n);               /* +1, retains items */
void *sm__pool_push(void);
void sm__pool_pop(void *token);

/* Blocks (clang Block ABI). */
void *sm__block_copy(const void *block);
void sm__block_release(const void *block);
void sm__block_invoke_dealloc(const void *block, void *ptr, NSUInteger len);
void sm__block_invoke_handler(const void *block, id arg);

/* Counters. */
extern atomic_long sm__buffer_bytes, sm__compiles, sm__cache_hits, sm__unsafe_math_libraries;
extern atomic_long sm__blocked_cmdbuf; /* threads blocked in commandBuffer */

/* Per-file registration, run once from the library constructor. */
void sm__register_metal(void);
void sm__register_msl(void);
void sm__register_archive(void); /* sm_archive.c: after the device class registers */
void sm__add_device_msl_methods(Class device); /* before the device class registers */

/* The kernel cache's files of a library (sm_msl.c): its compiled code,
 * and the --version output of the compiler that made it (part of the
 * code's key). Strings owned. */
typedef struct {
  uint64_t key;         /* k-<key>.so */
  char *path;
  uint64_t compiler_key; /* cc-<compiler_key>.txt */
  char *compiler_path;
} sm_code;
void sm__code_free(sm_code *c);
/* The code of a function's library, or NULL (not a softmetal function). */
const sm_code *sm__function_code(id function);

/* Binary archives (sm_archive.c): when an archive alive in the process
 * holds the file of kind and key, and `path` does not exist, writes it
 * there (as the kernel cache's file) and returns true. */
enum { SM_ARCHIVE_CODE = 0, SM_ARCHIVE_COMPILER = 1 };
bool sm__archive_restore(uint32_t kind, uint64_t key, const char *path);
extern atomic_long sm__archive_restores;

/* Messages to our own objects, through the runtime (exact prototypes). */
static inline IMP sm__lookup(id o, const char *sel) {
  return objc_msg_lookup(o, sel_registerName(sel));
}

#endif

/* ------------------------------------------------------------- kernels */
#include "sm_abi.h"

typedef struct {
  sm_obj hdr;
  id function; /* SMFunction, retained */
  const struct sm_kernel_desc *desc; /* &desc_copy */
  struct sm_kernel_desc desc_copy;    /* masks without absent function-constant parameters */
  const unsigned char *fc_values, *fc_defined; /* owned by the function */
  NSUInteger max_threads;
  NSUInteger static_tg; /* staticThreadgroupMemoryLength: threadgroup variables of bodies */
} sm_pipeline;
extern sm_class sm__pipeline_class;

/* A recorded compute dispatch; bindings resolved at execution. */
typedef struct {
  sm_pipeline *pipeline;       /* retained */
  void *buffers[SM_MAX_BINDINGS];   /* resolved pointers (contents + offset) */
  void *bytes[SM_MAX_BINDINGS];     /* owned copies from setBytes */
  NSUInteger buffer_len[SM_MAX_BINDINGS]; /* bytes of buffers[i] from its offset; 0 unknown */
  NSUInteger tg_len[SM_MAX_BINDINGS];
  MTLSize grid;   /* threads per grid */
  MTLSize tg;     /* threads per threadgroup */
  MTLSize groups; /* threadgroups per grid */
} sm_dispatch;

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
/* Joins the pool's workers (when the last device is released). */
void sm__exec_shutdown(void);

/* Kernel faults (sm_fault.c). While a thread runs kernel code, sm__t_fault
 * points at its record; a fault then fills it and, after the signal handler
 * returns, land(f) runs on the faulting stack (it must not return). */
typedef struct sm_fault {
  void (*land)(struct sm_fault *f);
  void *arg;      /* for land() */
  uintptr_t safe_sp; /* where land() runs after a stack overflow; 0: not caught */
  int fired;
  int sig, code;
  int write;      /* SIGSEGV: 1 write, 0 read, -1 unknown */
  int trap_kind;  /* clang's -fsanitize-trap check kind, or -1 */
  bool stack_overflow;
  void *addr, *pc;
} sm_fault;
extern __thread sm_fault *sm__t_fault __attribute__((tls_model("initial-exec")));
void sm__fault_init(void); /* installs the handlers once */
typedef struct { void *mem; } sm_altstack;
void sm__altstack_push(sm_altstack *a); /* this thread's signal stack while it runs kernels */
void sm__altstack_pop(sm_altstack *a);
/* The rule a fault broke, in words (buf: scratch). */
const char *sm__fault_rule(const sm_fault *f, char *buf, size_t len);
/* MTL_SHADER_VALIDATION=1: buffers softmetal allocates end at an inaccessible
 * guard (sm__guard_bytes() of it, and as much before the start). */
bool sm__shader_validation(void);
void *sm__guarded_alloc(size_t length); /* zeroed, 16-byte aligned, or NULL */
void sm__guarded_free(void *p, size_t length);
size_t sm__guard_bytes(void);
