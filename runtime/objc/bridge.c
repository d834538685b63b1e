/* SPDX-License-Identifier: MIT */
/* Loading the Objective-C runtime and the Metal framework, selector and
 * class caches, pools, NSString and NSError. */
#if defined(__APPLE__)
#define _DARWIN_C_SOURCE 1 /* RTLD_DEFAULT, which _POSIX_C_SOURCE hides in <dlfcn.h> */
#endif
#include "objc/bridge.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The runtime library. Tests of the Apple dispatch path on Linux point it
 * at a library that adds objc_msgSend to GNU libobjc. */
#if defined(CMETAL_OBJC_TEST_RUNTIME_LIB)
#define CM__OBJC_RUNTIME_LIB CMETAL_OBJC_TEST_RUNTIME_LIB
#elif CM__OBJC_APPLE
#define CM__OBJC_RUNTIME_LIB "/usr/lib/libobjc.A.dylib"
#else
#define CM__OBJC_RUNTIME_LIB "libobjc.so.4"
#endif

/* The blocks runtime goes with the platform, not the dispatch. */
#if defined(__APPLE__)
#define CM__BLOCKS_RUNTIME_LIB "/usr/lib/libSystem.B.dylib"
#define CM__METAL_DEFAULT_PATH "/System/Library/Frameworks/Metal.framework/Metal"
#define CM__COREGRAPHICS_PATH "/System/Library/Frameworks/CoreGraphics.framework/CoreGraphics"
#else
#define CM__BLOCKS_RUNTIME_LIB "libBlocksRuntime.so.0"
#endif

#define CM__METAL_ENV "CMETAL_METAL_FRAMEWORK"

cm__objc_runtime cm__objc_rt;
cm__sel cm__objc_sel_table[CM__SEL_COUNT];

static const char *const cm__sel_names[CM__SEL_COUNT] = {
#define CM__SEL_NAME(ident, name, sig) name,
    CM__OBJC_SELECTORS(CM__SEL_NAME)
#undef CM__SEL_NAME
};

#define CM__SIG_TEXT(ident, sig, ret, retkw, params, args, text) text,
static const char *const cm__sel_signatures[CM__SEL_COUNT] = {
#define CM__SEL_SIG(ident, name, sig) CM__SIG_##sig(CM__SIG_TEXT, ident)
    CM__OBJC_SELECTORS(CM__SEL_SIG)
#undef CM__SEL_SIG
};
#undef CM__SIG_TEXT

static const char *const cm__class_names[CM__CLASS_COUNT] = {
#define CM__CLASS_NAME(ident, name) name,
    CM__OBJC_CLASSES(CM__CLASS_NAME)
#undef CM__CLASS_NAME
};
static _Atomic(cm__class) cm__class_cache[CM__CLASS_COUNT];

typedef void *(*cm__pool_push_fn)(void);
typedef void (*cm__pool_pop_fn)(void *pool);
static _Atomic(cm__pool_push_fn) cm__pool_push_ptr;
static _Atomic(cm__pool_pop_fn) cm__pool_pop_ptr;

/* dlsym gives an object pointer; ISO C has no cast to a function pointer,
 * so copy the bits (POSIX guarantees they mean the function). */
static cm__fnptr cm__dlsym_fn(void *handle, const char *name) {
    void *sym = dlsym(handle, name);
    cm__fnptr fn = NULL;
    _Static_assert(sizeof fn == sizeof sym, "function and object pointers differ");
    memcpy(&fn, &sym, sizeof fn);
    return fn;
}

static const char *cm__dlerror_text(void) {
    const char *e = dlerror();
    return e != NULL ? e : "unknown dlopen error";
}

/* Looks the pool functions up in `handle` if we have none yet. */
static void cm__pools_from(void *handle) {
    if (atomic_load(&cm__pool_push_ptr) != NULL)
        return;
    cm__pool_push_fn push = (cm__pool_push_fn)cm__dlsym_fn(handle, "objc_autoreleasePoolPush");
    cm__pool_pop_fn pop = (cm__pool_pop_fn)cm__dlsym_fn(handle, "objc_autoreleasePoolPop");
    if (push == NULL || pop == NULL)
        return;
    atomic_store(&cm__pool_pop_ptr, pop);
    atomic_store(&cm__pool_push_ptr, push);
}

/* ------------------------------------------------------- runtime loading */
static pthread_once_t cm__objc_once = PTHREAD_ONCE_INIT;
static cm_status cm__objc_status;
static char cm__objc_message[512];

static void cm__objc_load_once(void) {
    const char *lib = CM__OBJC_RUNTIME_LIB;
    void *rt = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (rt == NULL) {
        cm__objc_status = CM_ERR_NO_DEVICE;
        snprintf(cm__objc_message, sizeof cm__objc_message,
                 "cannot load the Objective-C runtime \"%s\": %s", lib, cm__dlerror_text());
        return;
    }
    struct {
        const char *name;
        cm__fnptr *slot;
    } need[] = {
        {"sel_registerName", (cm__fnptr *)&cm__objc_rt.sel_register_name},
        {"sel_getName", (cm__fnptr *)&cm__objc_rt.sel_get_name},
        {"objc_getClass", (cm__fnptr *)&cm__objc_rt.get_class},
#if CM__OBJC_APPLE
        {"objc_msgSend", &cm__objc_rt.msg_send},
#if CM__OBJC_HAS_STRET
        {"objc_msgSend_stret", &cm__objc_rt.msg_send_stret},
#endif
#else
        {"objc_msg_lookup", (cm__fnptr *)&cm__objc_rt.msg_lookup},
#endif
    };
    for (size_t i = 0; i < sizeof need / sizeof need[0]; i++) {
        cm__fnptr fn = cm__dlsym_fn(rt, need[i].name);
        if (fn == NULL) {
            cm__objc_status = CM_ERR_NO_DEVICE;
            snprintf(cm__objc_message, sizeof cm__objc_message,
                     "the Objective-C runtime \"%s\" does not export %s", lib, need[i].name);
            return;
        }
        memcpy(need[i].slot, &fn, sizeof fn);
    }
    cm__pools_from(rt);

    /* Without a blocks runtime everything but blocks still works. */
    void *blocks = dlopen(CM__BLOCKS_RUNTIME_LIB, RTLD_NOW | RTLD_LOCAL);
    if (blocks != NULL) {
        cm__objc_rt.stack_block_isa = dlsym(blocks, "_NSConcreteStackBlock");
        cm__objc_rt.global_block_isa = dlsym(blocks, "_NSConcreteGlobalBlock");
        if (cm__objc_rt.stack_block_isa == NULL || cm__objc_rt.global_block_isa == NULL)
            cm__objc_rt.stack_block_isa = cm__objc_rt.global_block_isa = NULL;
    }

    for (size_t i = 0; i < CM__SEL_COUNT; i++) {
        cm__objc_sel_table[i] = cm__objc_rt.sel_register_name(cm__sel_names[i]);
        if (cm__objc_sel_table[i] == NULL) {
            cm__objc_status = CM_ERR_INTERNAL;
            snprintf(cm__objc_message, sizeof cm__objc_message,
                     "sel_registerName(\"%s\") returned NULL", cm__sel_names[i]);
            return;
        }
    }
    cm__objc_status = CM_OK;
}

cm_status cm__objc_init_as(const char *func) {
    pthread_once(&cm__objc_once, cm__objc_load_once);
    if (cm__objc_status != CM_OK)
        return cm__fail_as(func, cm__objc_status, "%s", cm__objc_message);
    return CM_OK;
}

cm__sel cm__objc_sel_register(const char *name) {
    return cm__objc_rt.sel_register_name(name);
}

const char *cm__objc_selector_name(size_t i) {
    return i < CM__SEL_COUNT ? cm__sel_names[i] : NULL;
}

const char *cm__objc_selector_signature(size_t i) {
    return i < CM__SEL_COUNT ? cm__sel_signatures[i] : NULL;
}

const char *cm__objc_class_name(size_t i) {
    return i < CM__CLASS_COUNT ? cm__class_names[i] : NULL;
}

cm__class cm__objc_class(int index) {
    if (index < 0 || index >= CM__CLASS_COUNT || cm__objc_rt.get_class == NULL)
        return NULL;
    cm__class cls = atomic_load_explicit(&cm__class_cache[index], memory_order_acquire);
    if (cls == NULL) {
        /* Not found yet: classes appear when frameworks load, so look again
         * next time. Racing lookups store the same pointer. */
        cls = cm__objc_rt.get_class(cm__class_names[index]);
        if (cls != NULL)
            atomic_store_explicit(&cm__class_cache[index], cls, memory_order_release);
    }
    return cls;
}

/* ----------------------------------------------------- framework loading */
typedef cm__id (*cm__device_fn)(void);

static pthread_once_t cm__metal_once = PTHREAD_ONCE_INIT;
static cm_status cm__metal_status;
static char cm__metal_message[768];
static char cm__metal_path[512];
static cm__device_fn cm__metal_create_fn;
static cm__device_fn cm__metal_copy_all_fn;
/* libdispatch: dispatch_data_create and dispatch_release (libSystem on
 * Apple; the framework's own on a software Metal). */
typedef cm__id (*cm__dispatch_data_create_fn)(const void *buffer, size_t size, void *queue,
                                              void *destructor);
typedef void (*cm__dispatch_release_fn)(cm__id object);
static cm__dispatch_data_create_fn cm__dispatch_data_create_ptr;
static cm__dispatch_release_fn cm__dispatch_release_ptr;

static void cm__metal_load_once(void) {
    const char *path = getenv(CM__METAL_ENV);
    const char *origin = "from " CM__METAL_ENV;
    if (path == NULL || path[0] == '\0') {
#if defined(__APPLE__)
        path = CM__METAL_DEFAULT_PATH;
        origin = "the system framework";
#else
        cm__metal_status = CM_ERR_NO_DEVICE;
        snprintf(cm__metal_message, sizeof cm__metal_message,
                 "no Metal framework on this platform; set " CM__METAL_ENV
                 " to the path of one (for example libsoftmetal.so)");
        return;
#endif
    }
#if defined(__APPLE__)
    /* MTLCreateSystemDefaultDevice needs CoreGraphics in command-line
     * tools, loaded globally so Metal finds its symbols; without it we
     * still fall back to MTLCopyAllDevices. */
    (void)dlopen(CM__COREGRAPHICS_PATH, RTLD_LAZY | RTLD_GLOBAL);
#endif
    void *fw = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (fw == NULL) {
        cm__metal_status = CM_ERR_NO_DEVICE;
        snprintf(cm__metal_message, sizeof cm__metal_message,
                 "no Metal: cannot load the Metal framework \"%s\" (%s): %s; "
                 "set " CM__METAL_ENV " to the path of a Metal framework",
                 path, origin, cm__dlerror_text());
        return;
    }
    cm__metal_create_fn = (cm__device_fn)cm__dlsym_fn(fw, "MTLCreateSystemDefaultDevice");
    cm__metal_copy_all_fn = (cm__device_fn)cm__dlsym_fn(fw, "MTLCopyAllDevices");
    if (cm__metal_create_fn == NULL) {
        cm__metal_status = CM_ERR_NO_DEVICE;
        snprintf(cm__metal_message, sizeof cm__metal_message,
                 "no Metal: the Metal framework \"%s\" (%s) does not export "
                 "MTLCreateSystemDefaultDevice; set " CM__METAL_ENV
                 " to the path of a Metal framework",
                 path, origin);
        return;
    }
    cm__pools_from(fw);
#if defined(__APPLE__)
    void *dispatch_lib = RTLD_DEFAULT;
#else
    void *dispatch_lib = fw;
#endif
    cm__dispatch_data_create_ptr =
        (cm__dispatch_data_create_fn)cm__dlsym_fn(dispatch_lib, "dispatch_data_create");
    cm__dispatch_release_ptr =
        (cm__dispatch_release_fn)cm__dlsym_fn(dispatch_lib, "dispatch_release");
    if (cm__dispatch_release_ptr == NULL)
        cm__dispatch_data_create_ptr = NULL;
    snprintf(cm__metal_path, sizeof cm__metal_path, "%s", path);
    cm__metal_status = CM_OK;
}

cm_status cm__metal_load_as(const char *func) {
    CM__TRY(cm__objc_init_as(func));
    pthread_once(&cm__metal_once, cm__metal_load_once);
    if (cm__metal_status != CM_OK)
        return cm__fail_as(func, cm__metal_status, "%s", cm__metal_message);
    return CM_OK;
}

const char *cm__metal_framework_path(void) {
    return cm__metal_path[0] != '\0' ? cm__metal_path : NULL;
}

cm__id cm__dispatch_data_create(const void *bytes, size_t size) {
    /* DISPATCH_DATA_DESTRUCTOR_DEFAULT (NULL): the bytes are copied. */
    return cm__dispatch_data_create_ptr != NULL
               ? cm__dispatch_data_create_ptr(bytes, size, NULL, NULL)
               : NULL;
}

bool cm__dispatch_data_available(void) {
    return cm__dispatch_data_create_ptr != NULL;
}

void cm__dispatch_release(cm__id object) {
    if (object != NULL && cm__dispatch_release_ptr != NULL)
        cm__dispatch_release_ptr(object);
}

/* Both return +1 (Create/Copy rule). */
cm__id cm__metal_create_system_default_device(void) {
    return cm__metal_create_fn != NULL ? cm__metal_create_fn() : NULL;
}

cm__id cm__metal_copy_all_devices(void) {
    return cm__metal_copy_all_fn != NULL ? cm__metal_copy_all_fn() : NULL;
}

cm_status cm__metal_default_device(const char *func, cm__id *out) {
    CM__REQUIRE_NONNULL(out);
    *out = NULL;
    CM__TRY(cm__metal_load_as(func));
    cm__id device = cm__metal_create_system_default_device();
    if (device == NULL) {
        cm__id all = cm__metal_copy_all_devices(); /* +1 NSArray */
        if (all != NULL) {
            /* objectAtIndex: is not +1: retain before the array goes. */
            if (cm__msg_count(all) > 0)
                device = cm__objc_retain(cm__msg_objectAtIndex(all, 0));
            cm__objc_release(all);
        }
    }
    if (device == NULL)
        return cm__fail_as(func, CM_ERR_NO_DEVICE,
                           "no Metal device: the Metal framework \"%s\" reports "
                           "none (MTLCreateSystemDefaultDevice and "
                           "MTLCopyAllDevices)",
                           cm__metal_path);
    *out = device;
    return CM_OK;
}

/* ----------------------------------------------------------------- pools */
void *cm__objc_pool_push(void) {
    cm__pool_push_fn push = atomic_load(&cm__pool_push_ptr);
    return push != NULL ? push() : NULL;
}

void cm__objc_pool_pop(void *pool) {
    cm__pool_pop_fn pop = atomic_load(&cm__pool_pop_ptr);
    /* NULL: pushed while there were no pools. */
    if (pool != NULL && pop != NULL)
        pop(pool);
}

/* --------------------------------------------------------------- strings */
cm_status cm__ns_string_from_utf8(const char *func, const char *utf8, cm__id *out) {
    if (out != NULL)
        *out = NULL;
    if (out == NULL || utf8 == NULL)
        return cm__fail_as(func, CM_ERR_INVALID_ARGUMENT, "%s = NULL must not be NULL",
                           out == NULL ? "out" : "utf8");
    cm__class cls = CM__CLASS(NSString);
    if (cls == NULL)
        return cm__fail_as(func, CM_ERR_UNSUPPORTED,
                           "the Objective-C runtime has no NSString class "
                           "(is the Metal framework loaded?)");
    /* alloc is +1; init consumes it and returns +1, or nil after
     * releasing it. */
    cm__id str = cm__msg_alloc(cls);
    str =
        cm__msg_initWithBytes_length_encoding(str, utf8, strlen(utf8), CM__NS_UTF8_STRING_ENCODING);
    if (str == NULL)
        return cm__fail_as(func, CM_ERR_DEVICE,
                           "NSString initWithBytes:length:encoding: returned nil "
                           "for \"%.64s\" (invalid UTF-8?)",
                           utf8);
    *out = str;
    return CM_OK;
}

size_t cm__ns_string_copy_utf8(cm__id string, char *buf, size_t cap) {
    size_t len = 0;
    void *pool = cm__objc_pool_push();
    /* UTF8String points into an autoreleased buffer: copy before the pop. */
    const char *text = string != NULL ? cm__msg_UTF8String(string) : NULL;
    if (text != NULL)
        len = strlen(text);
    if (cap > 0) {
        size_t n = len < cap - 1 ? len : cap - 1;
        if (n > 0)
            memcpy(buf, text, n);
        buf[n] = '\0';
    }
    cm__objc_pool_pop(pool);
    return len;
}

cm_status cm__ns_string_to_utf8(const char *func, cm__id string, char **out) {
    if (out == NULL)
        return cm__fail_as(func, CM_ERR_INVALID_ARGUMENT, "out = NULL must not be NULL");
    *out = NULL;
    cm_status status = CM_OK;
    void *pool = cm__objc_pool_push();
    const char *text = string != NULL ? cm__msg_UTF8String(string) : NULL;
    if (text == NULL)
        text = "";
    size_t len = strlen(text);
    char *copy = cm__alloc(len + 1, 1);
    if (copy == NULL) {
        status = cm__fail_as(func, CM_ERR_OUT_OF_MEMORY, "cannot allocate %zu bytes for a string",
                             len + 1);
    } else {
        memcpy(copy, text, len + 1);
        *out = copy;
    }
    cm__objc_pool_pop(pool);
    return status;
}

/* The whole description, however long (a compiler's diagnostics), up to
 * this bound. */
#define CM__NS_ERROR_MAX ((size_t)60 * 1024)

cm_status cm__fail_ns_error(const char *func, cm_status status, cm__id error, const char *what) {
    if (what == NULL)
        what = "failed";
    if (error == NULL)
        return cm__fail_as(func, status, "%s: no NSError given", what);
    char *description = NULL;
    char domain[96];
    void *pool = cm__objc_pool_push();
    /* localizedDescription is autoreleased: copied out inside our pool. */
    if (cm__ns_string_to_utf8(func, cm__msg_localizedDescription(error), &description) != CM_OK)
        description = NULL; /* no memory: said below without it */
    cm__ns_string_copy_utf8(cm__msg_domain(error), domain, sizeof domain);
    cm__int code = cm__msg_code(error);
    cm__objc_pool_pop(pool);
    const char *text = "no memory to copy its description";
    if (description != NULL)
        text = description[0] != '\0' ? description : "no description";
    size_t len = strlen(text);
    const char *cut = "";
    if (len > CM__NS_ERROR_MAX) {
        len = CM__NS_ERROR_MAX;
        cut = " [cut]";
    }
    cm_status result = cm__fail_as(func, status, "%s: %.*s%s (%s, code %ld)", what, (int)len, text,
                                   cut, domain[0] != '\0' ? domain : "no domain", code);
    cm__free(description);
    return result;
}
