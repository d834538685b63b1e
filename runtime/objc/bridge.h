/* SPDX-License-Identifier: MIT */
/* The Objective-C bridge: the only code of cmetal that touches the
 * Objective-C runtime. Internal; the Metal backend builds on it.
 *
 * Nothing here includes objc or Metal headers: the runtime, the blocks
 * runtime and the Metal framework are reached with dlopen/dlsym, and the few
 * types we need are declared below with their LP64 layout.
 *
 * Dispatch is chosen at build time (CMake CMETAL_OBJC_RUNTIME):
 *   CMETAL_OBJC_RUNTIME_APPLE  objc_msgSend, objc_msgSend_stret on x86_64 for
 *                              struct returns over 16 bytes (MTLSize);
 *   CMETAL_OBJC_RUNTIME_GNU    objc_msg_lookup, then a call through the IMP.
 *
 * Typical use (the backend):
 *     CM__TRY(cm__metal_load());               // once per call site is fine
 *     void *pool = cm__objc_pool_push();
 *     cm__id buf = cm__msg_newBufferWithLength_options(dev, n, 0); // +1
 *     cm__objc_pool_pop(pool);
 *     ...
 *     cm__objc_release(buf);
 *
 * Sends: cm__msg_<selector>(receiver, args...) for every selector of
 * selectors.h, each calling cm__send_<signature>(receiver, CM__SEL(...), ...)
 * with the exact prototype. Never call a send before cm__objc_init() (or
 * cm__metal_load()) has returned CM_OK: selectors are registered there.
 *
 * Thread-safety: init and load run once per process, from any thread; sends,
 * retain/release and pools are as thread-safe as the runtime itself; the
 * GNU runtime wants threads it did not start to be registered
 * (objc_thread_add) before they send messages. */
#ifndef CMETAL_OBJC_BRIDGE_H
#define CMETAL_OBJC_BRIDGE_H

#include "core/internal.h"
#include "objc/selectors.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#if defined(CMETAL_OBJC_RUNTIME_APPLE) && defined(CMETAL_OBJC_RUNTIME_GNU)
#error "define only one of CMETAL_OBJC_RUNTIME_APPLE and CMETAL_OBJC_RUNTIME_GNU"
#elif defined(CMETAL_OBJC_RUNTIME_APPLE)
#define CM__OBJC_APPLE 1
#elif defined(CMETAL_OBJC_RUNTIME_GNU)
#define CM__OBJC_APPLE 0
#else
#error "the build defines CMETAL_OBJC_RUNTIME_APPLE or CMETAL_OBJC_RUNTIME_GNU"
#endif

/* objc_msgSend_stret exists (and is needed) only on x86_64. */
#if CM__OBJC_APPLE && defined(__x86_64__)
#define CM__OBJC_HAS_STRET 1
#else
#define CM__OBJC_HAS_STRET 0
#endif

/* ------------------------------------------------------------------ types */
typedef void *cm__id;                            /* id; nil is NULL */
typedef const struct cm__objc_selector *cm__sel; /* SEL */
typedef struct cm__objc_class *cm__class;        /* Class; converts to cm__id */
typedef void (*cm__fnptr)(void);                 /* IMP before the cast */
typedef unsigned long cm__uint;                  /* NSUInteger (LP64) */
typedef long cm__int;                            /* NSInteger (LP64) */
/* BOOL as returned: one byte (signed char on x86_64 macOS, bool on arm64,
 * unsigned char on GNU); read as unsigned char and tested != 0. */
typedef unsigned char cm__objc_bool;

typedef struct cm__mtl_size { /* MTLSize, MTLOrigin: 24 bytes */
    cm__uint width, height, depth;
} cm__mtl_size;
typedef struct cm__ns_range { /* NSRange: 16 bytes */
    cm__uint location, length;
} cm__ns_range;

_Static_assert(sizeof(cm__uint) == 8 && sizeof(cm__int) == 8,
               "NSUInteger and NSInteger are 8 bytes (LP64 only)");
_Static_assert(sizeof(cm__mtl_size) == 24, "MTLSize is 24 bytes");
_Static_assert(sizeof(cm__ns_range) == 16, "NSRange is 16 bytes");

enum {
    CM__NS_UTF8_STRING_ENCODING = 4, /* NSUTF8StringEncoding */
};

/* A block literal built in C (clang Block ABI), with our captures. Build one
 * with cm__block_init_* below; pass its address where a block is expected. */
struct cm__block_state;
typedef struct cm__block {
    void *isa;
    int flags;
    int reserved;
    cm__fnptr invoke;
    const void *descriptor;
    /* captures */
    cm__fnptr fn;
    void *context;
    struct cm__block_state *state; /* NULL for global blocks */
} cm__block;

/* --------------------------------------------------------------- runtime */
/* Filled by cm__objc_init; read-only afterwards. */
typedef struct cm__objc_runtime {
    cm__sel (*sel_register_name)(const char *name);
    const char *(*sel_get_name)(cm__sel sel);
    cm__class (*get_class)(const char *name);
#if CM__OBJC_APPLE
    cm__fnptr msg_send;
#if CM__OBJC_HAS_STRET
    cm__fnptr msg_send_stret;
#endif
#else
    cm__fnptr (*msg_lookup)(cm__id receiver, cm__sel sel);
#endif
    void *stack_block_isa;  /* _NSConcreteStackBlock, NULL without blocks */
    void *global_block_isa; /* _NSConcreteGlobalBlock */
} cm__objc_runtime;

extern cm__objc_runtime cm__objc_rt;

/* Loads the Objective-C runtime (Apple: /usr/lib/libobjc.A.dylib; GNU:
 * libobjc.so.4) and the blocks runtime, and registers every selector of
 * selectors.h. Runs once per process; later calls return the first result.
 * Errors: CM_ERR_NO_DEVICE when the runtime or one of its functions is
 * missing, reported under the caller's name.
 * Thread-safety: any thread, any number of times. */
cm_status cm__objc_init_as(const char *func);
#define cm__objc_init() cm__objc_init_as(__func__)

/* Runs cm__objc_init, then loads the Metal framework: $CMETAL_METAL_FRAMEWORK
 * if set, else on macOS /System/Library/Frameworks/Metal.framework/Metal; no
 * default elsewhere. On macOS CoreGraphics is loaded first, so that
 * MTLCreateSystemDefaultDevice works in command-line tools. Resolves
 * MTLCreateSystemDefaultDevice (required) and MTLCopyAllDevices (optional),
 * and the pool functions when the runtime had none (GNU) and the framework
 * exports them. Runs once per process; later calls report the first result.
 * Errors: CM_ERR_NO_DEVICE, naming what was tried and CMETAL_METAL_FRAMEWORK.
 * Thread-safety: any thread, any number of times. */
cm_status cm__metal_load_as(const char *func);
#define cm__metal_load() cm__metal_load_as(__func__)

/* The path that cm__metal_load loaded, or NULL before a successful load. */
const char *cm__metal_framework_path(void);

/* MTLCreateSystemDefaultDevice() / MTLCopyAllDevices() (NSArray), or NULL
 * (nil, or no such function). Ownership: returns +1 (release it).
 * Requires a successful cm__metal_load. */
cm__id cm__metal_create_system_default_device(void);
cm__id cm__metal_copy_all_devices(void);

/* libdispatch, for newLibraryWithData:error:. dispatch_data_create(bytes,
 * size, NULL, DISPATCH_DATA_DESTRUCTOR_DEFAULT): a dispatch_data_t holding
 * a copy of the bytes (+1; release with cm__dispatch_release), or NULL when
 * libdispatch was not found (Apple: libSystem; elsewhere: the Metal
 * framework, which softmetal provides). Requires a successful
 * cm__metal_load. */
cm__id cm__dispatch_data_create(const void *bytes, size_t size);
bool cm__dispatch_data_available(void);
void cm__dispatch_release(cm__id object);

/* The default device: MTLCreateSystemDefaultDevice, else the first of
 * MTLCopyAllDevices (retained; the array is released). Loads the framework.
 * Ownership: *out is +1. Errors: CM_ERR_NO_DEVICE (no framework, or it
 * reports no device), under `func`'s name. */
cm_status cm__metal_default_device(const char *func, cm__id *out);

/* ------------------------------------------------------- selector caches */
enum {
#define CM__SEL_ENUM(ident, name, sig) CM__SEL_INDEX_##ident,
    CM__OBJC_SELECTORS(CM__SEL_ENUM)
#undef CM__SEL_ENUM
        CM__SEL_COUNT
};
enum {
#define CM__CLASS_ENUM(ident, name) CM__CLASS_INDEX_##ident,
    CM__OBJC_CLASSES(CM__CLASS_ENUM)
#undef CM__CLASS_ENUM
        CM__CLASS_COUNT
};

/* Registered once by cm__objc_init, read-only afterwards. */
extern cm__sel cm__objc_sel_table[CM__SEL_COUNT];

/* The SEL of a selector of selectors.h: CM__SEL(newBufferWithLength_options). */
#define CM__SEL(ident) (cm__objc_sel_table[CM__SEL_INDEX_##ident])

/* A class of selectors.h (CM__CLASS(NSString)), or NULL when the runtime
 * does not know it (yet): it is looked up until found, then cached. */
cm__class cm__objc_class(int index);
#define CM__CLASS(ident) cm__objc_class(CM__CLASS_INDEX_##ident)

/* The table as data, for tests and diagnostics: name ("newBufferWithLength:
 * options:") and C signature ("(NSUInteger, NSUInteger) -> id") of entry i,
 * NULL past the end. */
const char *cm__objc_selector_name(size_t i);
const char *cm__objc_selector_signature(size_t i);
/* Name of class entry i ("MTLCompileOptions"), NULL past the end. */
const char *cm__objc_class_name(size_t i);

/* Registers a selector not in the table (tests, diagnostics). Not cached:
 * keep the result. Requires cm__objc_init. */
cm__sel cm__objc_sel_register(const char *name);

/* ----------------------------------------------------------------- sends */
/* One function per signature, each casting to the exact prototype: the
 * runtime reads arguments from the registers of that prototype, so never a
 * variadic call. Struct and floating returns check nil first (nil gives
 * zero); other returns from nil are nil/0/NO, as the runtime gives them. */
#if CM__OBJC_APPLE
#define CM__OBJC_IMP(self, sel) ((void)(self), (void)(sel), cm__objc_rt.msg_send)
#else
#define CM__OBJC_IMP(self, sel) (cm__objc_rt.msg_lookup((self), (sel)))
#endif

#define CM__SEND_BODY(ret, self, sel, params, ...)                                                 \
    typedef ret(*cm__imp_) params;                                                                 \
    return ((cm__imp_)CM__OBJC_IMP(self, sel))(__VA_ARGS__)
#define CM__SEND_VOID_BODY(self, sel, params, ...)                                                 \
    typedef void(*cm__imp_) params;                                                                \
    ((cm__imp_)CM__OBJC_IMP(self, sel))(__VA_ARGS__)

static inline cm__id cm__send_id(cm__id self, cm__sel sel) {
    CM__SEND_BODY(cm__id, self, sel, (cm__id, cm__sel), self, sel);
}
static inline uint64_t cm__send_u64(cm__id self, cm__sel sel) {
    CM__SEND_BODY(uint64_t, self, sel, (cm__id, cm__sel), self, sel);
}
static inline bool cm__send_boolean(cm__id self, cm__sel sel) {
    typedef cm__objc_bool (*cm__imp_)(cm__id, cm__sel);
    return ((cm__imp_)CM__OBJC_IMP(self, sel))(self, sel) != 0;
}
static inline cm__uint cm__send_uint(cm__id self, cm__sel sel) {
    CM__SEND_BODY(cm__uint, self, sel, (cm__id, cm__sel), self, sel);
}
static inline cm__int cm__send_int(cm__id self, cm__sel sel) {
    CM__SEND_BODY(cm__int, self, sel, (cm__id, cm__sel), self, sel);
}
static inline void *cm__send_ptr(cm__id self, cm__sel sel) {
    CM__SEND_BODY(void *, self, sel, (cm__id, cm__sel), self, sel);
}
static inline const char *cm__send_cstr(cm__id self, cm__sel sel) {
    CM__SEND_BODY(const char *, self, sel, (cm__id, cm__sel), self, sel);
}
/* 24-byte struct return: objc_msgSend_stret on Apple x86_64 (hidden result
 * pointer first), objc_msgSend on arm64 (x8), the IMP on GNU. */
static inline cm__mtl_size cm__send_size(cm__id self, cm__sel sel) {
    if (self == NULL)
        return (cm__mtl_size){0, 0, 0};
    typedef cm__mtl_size (*cm__imp_)(cm__id, cm__sel);
#if CM__OBJC_HAS_STRET
    return ((cm__imp_)cm__objc_rt.msg_send_stret)(self, sel);
#else
    return ((cm__imp_)CM__OBJC_IMP(self, sel))(self, sel);
#endif
}
/* CFTimeInterval; x86_64 needs objc_msgSend_fpret only for long double. */
static inline double cm__send_double(cm__id self, cm__sel sel) {
    if (self == NULL)
        return 0.0;
    CM__SEND_BODY(double, self, sel, (cm__id, cm__sel), self, sel);
}
static inline cm__id cm__send_id_uint_uint(cm__id self, cm__sel sel, cm__uint a, cm__uint b) {
    CM__SEND_BODY(cm__id, self, sel, (cm__id, cm__sel, cm__uint, cm__uint), self, sel, a, b);
}
static inline cm__id cm__send_id_cptr_uint_uint(cm__id self, cm__sel sel, const void *a, cm__uint b,
                                                cm__uint c) {
    CM__SEND_BODY(cm__id, self, sel, (cm__id, cm__sel, const void *, cm__uint, cm__uint), self, sel,
                  a, b, c);
}
static inline cm__id cm__send_id_ptr_uint_uint_block(cm__id self, cm__sel sel, void *a, cm__uint b,
                                                     cm__uint c, cm__block *d) {
    CM__SEND_BODY(cm__id, self, sel, (cm__id, cm__sel, void *, cm__uint, cm__uint, cm__block *),
                  self, sel, a, b, c, d);
}
static inline cm__id cm__send_id_id_id_idp(cm__id self, cm__sel sel, cm__id a, cm__id b,
                                           cm__id *c) {
    CM__SEND_BODY(cm__id, self, sel, (cm__id, cm__sel, cm__id, cm__id, cm__id *), self, sel, a, b,
                  c);
}
static inline cm__id cm__send_id_id_idp(cm__id self, cm__sel sel, cm__id a, cm__id *b) {
    CM__SEND_BODY(cm__id, self, sel, (cm__id, cm__sel, cm__id, cm__id *), self, sel, a, b);
}
static inline cm__id cm__send_id_id_uint_idp_idp(cm__id self, cm__sel sel, cm__id a, cm__uint b,
                                                 cm__id *c, cm__id *d) {
    CM__SEND_BODY(cm__id, self, sel, (cm__id, cm__sel, cm__id, cm__uint, cm__id *, cm__id *), self,
                  sel, a, b, c, d);
}
static inline cm__id cm__send_id_cptr_uint(cm__id self, cm__sel sel, const void *a, cm__uint b) {
    CM__SEND_BODY(cm__id, self, sel, (cm__id, cm__sel, const void *, cm__uint), self, sel, a, b);
}
static inline bool cm__send_boolean_id_idp(cm__id self, cm__sel sel, cm__id a, cm__id *b) {
    typedef cm__objc_bool (*cm__imp_)(cm__id, cm__sel, cm__id, cm__id *);
    return ((cm__imp_)CM__OBJC_IMP(self, sel))(self, sel, a, b) != 0;
}
static inline cm__id cm__send_id_id(cm__id self, cm__sel sel, cm__id a) {
    CM__SEND_BODY(cm__id, self, sel, (cm__id, cm__sel, cm__id), self, sel, a);
}
static inline cm__id cm__send_id_uint(cm__id self, cm__sel sel, cm__uint a) {
    CM__SEND_BODY(cm__id, self, sel, (cm__id, cm__sel, cm__uint), self, sel, a);
}
static inline cm__id cm__send_id_cstr_uint(cm__id self, cm__sel sel, const char *a, cm__uint b) {
    CM__SEND_BODY(cm__id, self, sel, (cm__id, cm__sel, const char *, cm__uint), self, sel, a, b);
}
static inline bool cm__send_boolean_int(cm__id self, cm__sel sel, cm__int a) {
    typedef cm__objc_bool (*cm__imp_)(cm__id, cm__sel, cm__int);
    return ((cm__imp_)CM__OBJC_IMP(self, sel))(self, sel, a) != 0;
}
static inline bool cm__send_boolean_id(cm__id self, cm__sel sel, cm__id a) {
    typedef cm__objc_bool (*cm__imp_)(cm__id, cm__sel, cm__id);
    return ((cm__imp_)CM__OBJC_IMP(self, sel))(self, sel, a) != 0;
}
static inline bool cm__send_boolean_sel(cm__id self, cm__sel sel, cm__sel a) {
    typedef cm__objc_bool (*cm__imp_)(cm__id, cm__sel, cm__sel);
    return ((cm__imp_)CM__OBJC_IMP(self, sel))(self, sel, a) != 0;
}
/* A BOOL argument goes as one byte, 0 or 1 (bool on arm64, signed char on
 * x86_64, unsigned char on GNU: the same bits for NO and YES). */
static inline void cm__send_void_boolean(cm__id self, cm__sel sel, bool a) {
    CM__SEND_VOID_BODY(self, sel, (cm__id, cm__sel, cm__objc_bool), self, sel,
                       (cm__objc_bool)(a ? 1 : 0));
}
static inline void cm__send_void_int(cm__id self, cm__sel sel, cm__int a) {
    CM__SEND_VOID_BODY(self, sel, (cm__id, cm__sel, cm__int), self, sel, a);
}
static inline void cm__send_void_uint(cm__id self, cm__sel sel, cm__uint a) {
    CM__SEND_VOID_BODY(self, sel, (cm__id, cm__sel, cm__uint), self, sel, a);
}
static inline void cm__send_void_range(cm__id self, cm__sel sel, cm__ns_range a) {
    CM__SEND_VOID_BODY(self, sel, (cm__id, cm__sel, cm__ns_range), self, sel, a);
}
static inline void cm__send_void(cm__id self, cm__sel sel) {
    CM__SEND_VOID_BODY(self, sel, (cm__id, cm__sel), self, sel);
}
static inline void cm__send_void_id(cm__id self, cm__sel sel, cm__id a) {
    CM__SEND_VOID_BODY(self, sel, (cm__id, cm__sel, cm__id), self, sel, a);
}
static inline void cm__send_void_block(cm__id self, cm__sel sel, cm__block *a) {
    CM__SEND_VOID_BODY(self, sel, (cm__id, cm__sel, cm__block *), self, sel, a);
}
static inline void cm__send_void_id_u64(cm__id self, cm__sel sel, cm__id a, uint64_t b) {
    CM__SEND_VOID_BODY(self, sel, (cm__id, cm__sel, cm__id, uint64_t), self, sel, a, b);
}
static inline void cm__send_void_u64(cm__id self, cm__sel sel, uint64_t a) {
    CM__SEND_VOID_BODY(self, sel, (cm__id, cm__sel, uint64_t), self, sel, a);
}
static inline void cm__send_void_id_uint_uint(cm__id self, cm__sel sel, cm__id a, cm__uint b,
                                              cm__uint c) {
    CM__SEND_VOID_BODY(self, sel, (cm__id, cm__sel, cm__id, cm__uint, cm__uint), self, sel, a, b,
                       c);
}
static inline void cm__send_void_cptr_uint_uint(cm__id self, cm__sel sel, const void *a, cm__uint b,
                                                cm__uint c) {
    CM__SEND_VOID_BODY(self, sel, (cm__id, cm__sel, const void *, cm__uint, cm__uint), self, sel, a,
                       b, c);
}
static inline void cm__send_void_uint_uint(cm__id self, cm__sel sel, cm__uint a, cm__uint b) {
    CM__SEND_VOID_BODY(self, sel, (cm__id, cm__sel, cm__uint, cm__uint), self, sel, a, b);
}
static inline void cm__send_void_size_size(cm__id self, cm__sel sel, cm__mtl_size a,
                                           cm__mtl_size b) {
    CM__SEND_VOID_BODY(self, sel, (cm__id, cm__sel, cm__mtl_size, cm__mtl_size), self, sel, a, b);
}
static inline void cm__send_void_id_uint_id_uint_uint(cm__id self, cm__sel sel, cm__id a,
                                                      cm__uint b, cm__id c, cm__uint d,
                                                      cm__uint e) {
    CM__SEND_VOID_BODY(self, sel, (cm__id, cm__sel, cm__id, cm__uint, cm__id, cm__uint, cm__uint),
                       self, sel, a, b, c, d, e);
}
static inline void cm__send_void_id_range_u8(cm__id self, cm__sel sel, cm__id a, cm__ns_range b,
                                             uint8_t c) {
    CM__SEND_VOID_BODY(self, sel, (cm__id, cm__sel, cm__id, cm__ns_range, uint8_t), self, sel, a, b,
                       c);
}

/* cm__msg_<ident>(receiver, args...): the send of selectors.h's signature
 * for that selector, e.g. cm__msg_setBuffer_offset_atIndex(enc, buf, 0, 1). */
#define CM__STRIP(...) __VA_ARGS__
#define CM__MSG_DEFINE_(ident, sig, ret, retkw, params, args, text)                                \
    static inline ret cm__msg_##ident(cm__id self CM__STRIP params) {                              \
        retkw cm__send_##sig(self, CM__SEL(ident) CM__STRIP args);                                 \
    }
#define CM__MSG_DEFINE(ident, name, sig) CM__SIG_##sig(CM__MSG_DEFINE_, ident)
CM__OBJC_SELECTORS(CM__MSG_DEFINE)
#undef CM__MSG_DEFINE
#undef CM__MSG_DEFINE_

/* [[cls alloc] init] (+1); NULL when cls is NULL or either returns nil. */
static inline cm__id cm__objc_new(cm__class cls) {
    cm__id obj = cls != NULL ? cm__msg_alloc((cm__id)cls) : NULL;
    return obj != NULL ? cm__msg_init(obj) : NULL;
}

/* ---------------------------------------------------------------- memory */
/* retain: +1 on obj, returns obj. release: -1. autorelease: hands our +1 to
 * the innermost pool, which releases it at pop. All take nil. */
static inline cm__id cm__objc_retain(cm__id obj) {
    return obj != NULL ? cm__msg_retain(obj) : NULL;
}
static inline void cm__objc_release(cm__id obj) {
    if (obj != NULL)
        cm__msg_release(obj);
}
static inline cm__id cm__objc_autorelease(cm__id obj) {
    return obj != NULL ? cm__msg_autorelease(obj) : NULL;
}

/* Autorelease pools (objc_autoreleasePoolPush/Pop). Wrap every send that
 * returns an autoreleased object (commandBuffer*, encoder getters,
 * stringWith..., localizedDescription, NSError out-parameters), and copy what
 * you need out of those objects before the pop. Apple: from libobjc. GNU:
 * from the Metal framework once cm__metal_load succeeded, if it exports
 * them; otherwise push returns NULL and pop does nothing (no pools).
 * Pops nest: pop the most recent push first. */
void *cm__objc_pool_push(void);
void cm__objc_pool_pop(void *pool);

/* Defines `type name params`, which runs `call` (usually the same function
 * named name_unpooled) inside its own autorelease pool and returns what it
 * returns; the entry points that send messages are written this way, so
 * loops on threads without a pool never grow memory. Put `static` before
 * it for a file-local one:
 *     static CM__OBJC_POOLED(cm_status, cm__x, (cm_device *d), cm__x_unpooled(d))
 * CM__OBJC_POOLED_VOID is the same for a function that returns nothing. */
#define CM__OBJC_POOLED(type, name, params, call)                                                  \
    type name params {                                                                             \
        void *cm__pool_ = cm__objc_pool_push();                                                    \
        const type cm__result_ = call;                                                             \
        cm__objc_pool_pop(cm__pool_);                                                              \
        return cm__result_;                                                                        \
    }
#define CM__OBJC_POOLED_VOID(name, params, call)                                                   \
    void name params {                                                                             \
        void *cm__pool_ = cm__objc_pool_push();                                                    \
        call;                                                                                      \
        cm__objc_pool_pop(cm__pool_);                                                              \
    }

/* --------------------------------------------------------------- strings */
/* A new NSString holding the UTF-8 bytes of `utf8` ([[NSString alloc]
 * initWithBytes:length:encoding:NSUTF8StringEncoding]).
 * Ownership: *out is +1 (release it); *out is NULL on error.
 * Errors: CM_ERR_INVALID_ARGUMENT (utf8 NULL), CM_ERR_UNSUPPORTED (no
 * NSString class), CM_ERR_DEVICE (the runtime returned nil, e.g. invalid
 * UTF-8); reported as `func`. */
cm_status cm__ns_string_from_utf8(const char *func, const char *utf8, cm__id *out);

/* Copies the UTF-8 text of `string` into buf (cap bytes, NUL-terminated
 * when cap > 0, truncated if needed) and returns its full length in bytes,
 * as snprintf does. nil gives "". Runs inside its own pool: UTF8String's
 * buffer is copied before the pop. Ownership: borrows string. */
size_t cm__ns_string_copy_utf8(cm__id string, char *buf, size_t cap);

/* Same, into a new cm__alloc'ed string (free with cm__free). nil gives "".
 * Errors: CM_ERR_OUT_OF_MEMORY, reported as `func`. */
cm_status cm__ns_string_to_utf8(const char *func, cm__id string, char **out);

/* Records "func: what: <localizedDescription> (<domain>, code <code>)" as
 * the last error and returns `status`; a nil error gives "func: what: no
 * NSError given". Ownership: borrows error (often autoreleased: call this
 * before popping the pool that holds it). */
cm_status cm__fail_ns_error(const char *func, cm_status status, cm__id error, const char *what);

/* ---------------------------------------------------------------- blocks */
/* Blocks built in C for Metal's callbacks. The callee _Block_copy's what we
 * pass and releases its copies when done.
 *
 * Blocks with context (stack-style literal, copy/dispose helpers):
 *   cm__block blk;                      // may live on our stack
 *   CM__TRY(cm__block_init_deallocator(&blk, fn, ctx, dispose));
 *   buf = cm__msg_newBufferWithBytesNoCopy_length_options_deallocator(
 *       dev, p, n, opts, &blk);
 *   cm__block_release(&blk);            // always, whatever the send did
 * fn(ctx, ...) runs each time the block is invoked. dispose(ctx) runs
 * exactly once, when our reference (dropped by cm__block_release) and every
 * copy made by the callee are gone: on our thread, or on whichever thread
 * releases the last copy. So ctx stays valid until dispose runs. The
 * invocation runs inside an autorelease pool.
 *
 * Global blocks (no copy/dispose, IS_GLOBAL): never copied or freed;
 * the block and its context must live as long as the process (static
 * storage). */
typedef void (*cm__deallocator_fn)(void *context, void *pointer, cm__uint length);
typedef void (*cm__completed_fn)(void *context, cm__id command_buffer);
typedef void (*cm__dispose_fn)(void *context);

/* void (^)(void *pointer, NSUInteger length), for
 * newBufferWithBytesNoCopy:length:options:deallocator:. dispose may be NULL.
 * Errors: CM_ERR_OUT_OF_MEMORY, CM_ERR_UNSUPPORTED (no blocks runtime);
 * on error nothing is allocated and dispose is not called. */
cm_status cm__block_init_deallocator(cm__block *block, cm__deallocator_fn fn, void *context,
                                     cm__dispose_fn dispose);
/* void (^)(id commandBuffer), for addCompletedHandler:. Same rules. */
cm_status cm__block_init_completed(cm__block *block, cm__completed_fn fn, void *context,
                                   cm__dispose_fn dispose);
/* Drops our reference to a block made by cm__block_init_deallocator or
 * _completed; afterwards `block` itself may go out of scope. Global blocks
 * are left alone. */
void cm__block_release(cm__block *block);

/* Global blocks; `block` must have static storage duration.
 * Errors: CM_ERR_UNSUPPORTED (no blocks runtime). */
cm_status cm__block_init_global_deallocator(cm__block *block, cm__deallocator_fn fn, void *context);
cm_status cm__block_init_global_completed(cm__block *block, cm__completed_fn fn, void *context);

#endif /* CMETAL_OBJC_BRIDGE_H */
