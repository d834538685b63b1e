/* SPDX-License-Identifier: MIT */
/* A tiny Foundation and Metal made from C on GNU libobjc, for the bridge's
 * tests. See objc_support.h. */
#include "objc_support.h"

#include <objc/message.h>
#include <objc/runtime.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* class_addMethod takes an IMP; go through void (*)(void) so the cast
 * between function types is explicit. */
#define IMPL(fn) ((IMP)(void (*)(void))(fn))

typedef struct cmtest_object obj_t;

/* Calls through the shim (msgsend_shim_<arch>.S counts them; aarch64 has no
 * _stret). */
long cmtest_msgsend_calls, cmtest_stret_calls;

static Class cls_object, cls_string, cls_error, cls_array;
static long live_objects;
static char last_forwarded[128];

/* ----------------------------------------------------------------- pools */
#define POOL_CAPACITY 1024
static id pool_objects[POOL_CAPACITY];
static size_t pool_top;
static long pool_depth, pool_pushes, pool_pops;

static void obj_release(id self, SEL op);

void *objc_autoreleasePoolPush(void);
void objc_autoreleasePoolPop(void *pool);

void *objc_autoreleasePoolPush(void) {
    pool_depth++;
    pool_pushes++;
    return (void *)(uintptr_t)(pool_top + 1);
}

void objc_autoreleasePoolPop(void *pool) {
    size_t mark = (size_t)(uintptr_t)pool - 1;
    if (pool == NULL || mark > pool_top) {
        fprintf(stderr, "objc_autoreleasePoolPop: bad pool %p\n", pool);
        abort();
    }
    while (pool_top > mark)
        obj_release(pool_objects[--pool_top], NULL);
    pool_depth--;
    pool_pops++;
}

/* --------------------------------------------------------------- blocks */
struct block_head {
    void *isa;
    int flags;
    int reserved;
    void (*invoke)(void);
};

static void block_invoke_completed(void *block, id command_buffer) {
    void (*fn)(void *, id) = (void (*)(void *, id))((struct block_head *)block)->invoke;
    fn(block, command_buffer);
}

static void block_invoke_deallocator(void *block, void *pointer, unsigned long length) {
    void (*fn)(void *, void *, unsigned long) =
        (void (*)(void *, void *, unsigned long))((struct block_head *)block)->invoke;
    fn(block, pointer, length);
}

/* --------------------------------------------------------------- memory */
static id obj_alloc(Class self, SEL op) {
    (void)op;
    id obj = class_createInstance(self, 0);
    live_objects++;
    return obj;
}

static id obj_retain(id self, SEL op) {
    (void)op;
    ((obj_t *)self)->extra_refs++;
    return self;
}

static void obj_dealloc(id self) {
    obj_t *o = (obj_t *)self;
    if (o->deallocator != NULL) {
        block_invoke_deallocator(o->deallocator, o->pointer, o->length);
        _Block_release(o->deallocator);
    }
    for (long i = 0; i < o->handler_count; i++)
        _Block_release(o->handlers[i]);
    if (o->object != NULL)
        obj_release(o->object, NULL);
    if (o->owns_pointer)
        free(o->pointer);
    object_dispose(self);
    live_objects--;
}

static void obj_release(id self, SEL op) {
    (void)op;
    obj_t *o = (obj_t *)self;
    if (o->extra_refs == 0)
        obj_dealloc(self);
    else
        o->extra_refs--;
}

static unsigned long obj_retain_count(id self, SEL op) {
    (void)op;
    return (unsigned long)((obj_t *)self)->extra_refs + 1;
}

static id obj_autorelease(id self, SEL op) {
    (void)op;
    if (pool_top == POOL_CAPACITY) {
        fprintf(stderr, "autorelease: test pool full\n");
        abort();
    }
    pool_objects[pool_top++] = self;
    return self;
}

static id new_instance(Class cls) {
    return obj_alloc(cls, NULL);
}

/* ---------------------------------------------------------- test values */
static id obj_identity(id self, SEL op) {
    (void)op;
    return self;
}
static uint64_t obj_registry_id(id self, SEL op) {
    (void)self, (void)op;
    return UINT64_C(0x1122334455667788);
}
static BOOL obj_yes(id self, SEL op) {
    (void)self, (void)op;
    return 1;
}
/* Returns 0x100 in eax: a BOOL read as one byte is NO. */
static uint32_t obj_no_with_high_bits(id self, SEL op) {
    (void)self, (void)op;
    return 0x100;
}
static BOOL obj_supports_family(id self, SEL op, long family) {
    (void)op;
    ((obj_t *)self)->code = family;
    return family == 1007;
}
static unsigned long obj_max_buffer_length(id self, SEL op) {
    (void)self, (void)op;
    return UINT64_C(1) << 40;
}
static long obj_code(id self, SEL op) {
    (void)op;
    return ((obj_t *)self)->code;
}
static double obj_double_value(id self, SEL op) {
    (void)self, (void)op;
    return 2.5;
}
static struct cmtest_size obj_max_threads(id self, SEL op) {
    (void)self, (void)op;
    return (struct cmtest_size){1024, 512, 64};
}
static void obj_dispatch(id self, SEL op, struct cmtest_size a, struct cmtest_size b) {
    (void)op;
    ((obj_t *)self)->size_a = a;
    ((obj_t *)self)->size_b = b;
}
struct test_range {
    unsigned long location, length;
};
static void obj_fill(id self, SEL op, id buffer, struct test_range range, uint8_t value) {
    (void)op;
    obj_t *o = (obj_t *)self;
    o->object = obj_retain(buffer, NULL);
    o->range_location = range.location;
    o->range_length = range.length;
    o->byte_value = value;
}
/* NSRange (16 bytes) comes back in x0/x1 on arm64, rax/rdx on x86-64. */
static struct test_range obj_range_value(id self, SEL op) {
    (void)op;
    obj_t *o = (obj_t *)self;
    return (struct test_range){o->range_location, o->range_length};
}
/* Four doubles (MTLClearColor's layout): a homogeneous aggregate, returned
 * in v0-v3 on arm64 and through memory (_stret) on x86-64; the double
 * argument comes in v0 / xmm0. */
struct test_color {
    double red, green, blue, alpha;
};
static struct test_color obj_color_scaled(id self, SEL op, double scale, unsigned long plus) {
    (void)self, (void)op;
    double p = (double)plus;
    return (struct test_color){scale + p, 2 * scale + p, 3 * scale + p, 4 * scale + p};
}
static void obj_copy_buffers(id self, SEL op, id src, unsigned long src_offset, id dst,
                             unsigned long dst_offset, unsigned long size) {
    (void)op;
    obj_t *o = (obj_t *)self;
    o->object = obj_retain(dst, NULL);
    o->range_location = src_offset;
    o->range_length = dst_offset;
    o->length = size;
    o->code = src == dst ? 1 : 0;
}
/* MTLCompileOptions-like setters: setMathMode: keeps its NSInteger in
 * `code`, setFastMathEnabled: its BOOL in `byte_value`. */
static BOOL obj_responds(id self, SEL op, SEL sel) {
    (void)op;
    return class_respondsToSelector(object_getClass(self), sel) ? 1 : 0;
}
static void obj_set_math_mode(id self, SEL op, long mode) {
    (void)op;
    ((obj_t *)self)->code = mode;
}
static void obj_set_fast_math(id self, SEL op, BOOL enabled) {
    (void)op;
    ((obj_t *)self)->byte_value = enabled;
}
static uint64_t obj_signaled_value(id self, SEL op) {
    (void)op;
    return ((obj_t *)self)->u64;
}
static void obj_set_signaled_value(id self, SEL op, uint64_t value) {
    (void)op;
    ((obj_t *)self)->u64 = value;
}
static void *obj_contents(id self, SEL op) {
    (void)op;
    return ((obj_t *)self)->pointer;
}
static unsigned long obj_length(id self, SEL op) {
    (void)op;
    return ((obj_t *)self)->length;
}
static id obj_new_buffer(id self, SEL op, unsigned long length, unsigned long options) {
    (void)self, (void)op;
    id buffer = new_instance(cls_object);
    obj_t *b = (obj_t *)buffer;
    b->pointer = calloc(1, length ? length : 1);
    b->owns_pointer = 1;
    b->length = length;
    b->code = (long)options;
    return buffer;
}
static id obj_new_buffer_no_copy(id self, SEL op, void *pointer, unsigned long length,
                                 unsigned long options, void *deallocator) {
    (void)self, (void)op;
    if (length == 0)
        return nil; /* as Metal: the deallocator is not called */
    id buffer = new_instance(cls_object);
    obj_t *b = (obj_t *)buffer;
    b->pointer = pointer;
    b->length = length;
    b->code = (long)options;
    b->deallocator = _Block_copy(deallocator);
    return buffer;
}
static void obj_add_completed_handler(id self, SEL op, void *block) {
    (void)op;
    obj_t *o = (obj_t *)self;
    if (o->handler_count == CMTEST_MAX_HANDLERS)
        abort();
    o->handlers[o->handler_count++] = _Block_copy(block);
}
/* Runs and drops the completion handlers, as a command buffer does. */
static void obj_commit(id self, SEL op) {
    (void)op;
    obj_t *o = (obj_t *)self;
    for (long i = 0; i < o->handler_count; i++) {
        block_invoke_completed(o->handlers[i], self);
        _Block_release(o->handlers[i]);
    }
    o->handler_count = 0;
}

/* --------------------------------------------------------------- strings */
static id string_init(id self, SEL op, const void *bytes, unsigned long length,
                      unsigned long encoding) {
    (void)op;
    obj_t *o = (obj_t *)self;
    if (encoding != 4 || memchr(bytes, 0xff, length) != NULL) {
        obj_release(self, NULL); /* init failing releases self */
        return nil;
    }
    char *text = malloc(length + 1);
    memcpy(text, bytes, length);
    text[length] = '\0';
    o->pointer = text;
    o->owns_pointer = 1;
    o->length = length;
    return self;
}
static id string_with_c_string(id self, SEL op, const char *text, unsigned long encoding) {
    (void)op;
    id s = string_init(new_instance((Class)self), NULL, text, strlen(text), encoding);
    return s != nil ? obj_autorelease(s, NULL) : nil;
}
/* As Foundation may: the bytes live in an autoreleased buffer, freed at the
 * pool's pop, so a reader that keeps the pointer past it is caught. */
static const char *string_utf8(id self, SEL op) {
    (void)op;
    obj_t *o = (obj_t *)self;
    id holder = new_instance(cls_object);
    obj_t *h = (obj_t *)holder;
    h->pointer = malloc(o->length + 1);
    memcpy(h->pointer, o->pointer, o->length + 1);
    h->owns_pointer = 1;
    obj_autorelease(holder, NULL);
    return h->pointer;
}
static id make_string(const char *text) {
    return string_init(new_instance(cls_string), NULL, text, strlen(text), 4);
}

/* ---------------------------------------------------------------- errors */
/* NSError keeps its description in `object` and its domain in `pointer`. */
static id error_description(id self, SEL op) {
    (void)op;
    obj_t *o = (obj_t *)self;
    return obj_autorelease(obj_retain(o->object, NULL), NULL);
}
static id error_domain(id self, SEL op) {
    (void)op;
    return obj_autorelease(make_string(((obj_t *)self)->pointer), NULL);
}

void *cmtest_new_error(const char *description, const char *domain, long code) {
    id e = new_instance(cls_error);
    obj_t *o = (obj_t *)e;
    o->object = make_string(description);
    o->pointer = strdup(domain);
    o->owns_pointer = 1;
    o->code = code;
    return e;
}

/* A library that fails to compile, as newLibraryWithSource:options:error:
 * does: nil, and an autoreleased NSError in *error. */
static id obj_new_library(id self, SEL op, id source, id options, id *error) {
    (void)self, (void)op, (void)options;
    if (error != NULL) {
        char text[160];
        snprintf(text, sizeof text, "cannot compile '%s'",
                 (const char *)((obj_t *)source)->pointer);
        *error = obj_autorelease(cmtest_new_error(text, "MTLLibraryErrorDomain", 3), NULL);
    }
    return nil;
}

/* ---------------------------------------------------------------- arrays */
static unsigned long array_count(id self, SEL op) {
    (void)op;
    return ((obj_t *)self)->object != NULL ? 1 : 0;
}
static id array_object_at_index(id self, SEL op, unsigned long index) {
    (void)op;
    return index == 0 ? ((obj_t *)self)->object : nil;
}

/* ------------------------------------------------------- Metal entries */
static int device_mode;

void cmtest_set_device_mode(int mode) {
    device_mode = mode;
}

id MTLCreateSystemDefaultDevice(void);
id MTLCopyAllDevices(void);

id MTLCreateSystemDefaultDevice(void) {
    return device_mode == 0 ? new_instance(cls_object) : nil;
}

id MTLCopyAllDevices(void) {
    if (device_mode == 2)
        return nil;
    id array = new_instance(cls_array);
    ((obj_t *)array)->object = new_instance(cls_object);
    return array;
}

/* ------------------------------------------------------ unknown selectors */
static long return_zero(void) {
    return 0;
}

static IMP forward(id receiver, SEL op) {
    (void)receiver;
    snprintf(last_forwarded, sizeof last_forwarded, "%s", sel_getName(op));
    return IMPL(return_zero);
}

/* ----------------------------------------------------------------- setup */
static void add(Class cls, const char *name, IMP imp, const char *types) {
    if (!class_addMethod(cls, sel_registerName(name), imp, types)) {
        fprintf(stderr, "class_addMethod %s failed\n", name);
        abort();
    }
}

static void add_ivar(Class cls, const char *name, size_t size, const char *type) {
    if (!class_addIvar(cls, name, size, 3, type)) {
        fprintf(stderr, "class_addIvar %s failed\n", name);
        abort();
    }
}

static void build_classes(void) {
    __objc_msg_forward2 = forward;

    cls_object = objc_allocateClassPair(Nil, "CMTestObject", 0);
    /* A GNU root class needs its isa ivar first. */
    add_ivar(cls_object, "isa", sizeof(void *), "#");
    char fields_type[16];
    snprintf(fields_type, sizeof fields_type, "[%zuq]", sizeof(obj_t) / sizeof(long) - 1);
    add_ivar(cls_object, "fields", sizeof(obj_t) - sizeof(void *), fields_type);
    Class meta = object_getClass((id)cls_object);
    add(meta, "alloc", IMPL(obj_alloc), "@@:");
    add(cls_object, "retain", IMPL(obj_retain), "@@:");
    add(cls_object, "release", IMPL(obj_release), "v@:");
    add(cls_object, "retainCount", IMPL(obj_retain_count), "Q@:");
    add(cls_object, "autorelease", IMPL(obj_autorelease), "@@:");
    add(cls_object, "identity", IMPL(obj_identity), "@@:");
    add(cls_object, "init", IMPL(obj_identity), "@@:");
    add(cls_object, "respondsToSelector:", IMPL(obj_responds), "C@::");
    add(cls_object, "setMathMode:", IMPL(obj_set_math_mode), "v@:q");
    add(cls_object, "setFastMathEnabled:", IMPL(obj_set_fast_math), "v@:C");
    add(cls_object, "registryID", IMPL(obj_registry_id), "Q@:");
    add(cls_object, "hasUnifiedMemory", IMPL(obj_yes), "C@:");
    add(cls_object, "noWithHighBits", IMPL(obj_no_with_high_bits), "C@:");
    add(cls_object, "supportsFamily:", IMPL(obj_supports_family), "C@:q");
    add(cls_object, "maxBufferLength", IMPL(obj_max_buffer_length), "Q@:");
    add(cls_object, "code", IMPL(obj_code), "q@:");
    add(cls_object, "doubleValue", IMPL(obj_double_value), "d@:");
    add(cls_object, "maxThreadsPerThreadgroup", IMPL(obj_max_threads), "{MTLSize=QQQ}@:");
    add(cls_object, "rangeValue", IMPL(obj_range_value), "{_NSRange=QQ}@:");
    add(cls_object, "colorScaledBy:plus:", IMPL(obj_color_scaled), "{MTLClearColor=dddd}@:dQ");
    add(cls_object, "dispatchThreads:threadsPerThreadgroup:", IMPL(obj_dispatch),
        "v@:{MTLSize=QQQ}{MTLSize=QQQ}");
    add(cls_object, "fillBuffer:range:value:", IMPL(obj_fill), "v@:@{_NSRange=QQ}C");
    add(cls_object,
        "copyFromBuffer:sourceOffset:toBuffer:destinationOffset:size:", IMPL(obj_copy_buffers),
        "v@:@Q@QQ");
    add(cls_object, "signaledValue", IMPL(obj_signaled_value), "Q@:");
    add(cls_object, "setSignaledValue:", IMPL(obj_set_signaled_value), "v@:Q");
    add(cls_object, "contents", IMPL(obj_contents), "^v@:");
    add(cls_object, "length", IMPL(obj_length), "Q@:");
    add(cls_object, "newBufferWithLength:options:", IMPL(obj_new_buffer), "@@:QQ");
    add(cls_object,
        "newBufferWithBytesNoCopy:length:options:deallocator:", IMPL(obj_new_buffer_no_copy),
        "@@:^vQQ@?");
    add(cls_object, "addCompletedHandler:", IMPL(obj_add_completed_handler), "v@:@?");
    add(cls_object, "commit", IMPL(obj_commit), "v@:");
    add(cls_object, "newLibraryWithSource:options:error:", IMPL(obj_new_library), "@@:@@^@");
    objc_registerClassPair(cls_object);

    cls_string = objc_allocateClassPair(cls_object, "NSString", 0);
    add(cls_string, "initWithBytes:length:encoding:", IMPL(string_init), "@@:r^vQQ");
    add(cls_string, "UTF8String", IMPL(string_utf8), "r*@:");
    add(object_getClass((id)cls_string), "stringWithCString:encoding:", IMPL(string_with_c_string),
        "@@:r*Q");
    objc_registerClassPair(cls_string);

    cls_error = objc_allocateClassPair(cls_object, "NSError", 0);
    add(cls_error, "localizedDescription", IMPL(error_description), "@@:");
    add(cls_error, "domain", IMPL(error_domain), "@@:");
    objc_registerClassPair(cls_error);

    cls_array = objc_allocateClassPair(cls_object, "NSArray", 0);
    add(cls_array, "count", IMPL(array_count), "Q@:");
    add(cls_array, "objectAtIndex:", IMPL(array_object_at_index), "@@:Q");
    objc_registerClassPair(cls_array);
}

static pthread_once_t setup_once = PTHREAD_ONCE_INIT;

void cmtest_objc_setup(void) {
    pthread_once(&setup_once, build_classes);
}

long cmtest_live_objects(void) {
    return live_objects;
}
long cmtest_pool_depth(void) {
    return pool_depth;
}
long cmtest_pool_pushes(void) {
    return pool_pushes;
}
long cmtest_pool_pops(void) {
    return pool_pops;
}
const char *cmtest_last_forwarded(void) {
    return last_forwarded;
}
void *cmtest_new_object(void) {
    return new_instance(cls_object);
}
