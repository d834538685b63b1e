/* SPDX-License-Identifier: MIT */
/* The Objective-C bridge against GNU libobjc, with classes made from C
 * (objc_support.c). Built twice: GNU dispatch (objc_msg_lookup) and Apple
 * dispatch (objc_msgSend, and objc_msgSend_stret on x86-64, through the
 * msgsend_shim_<arch>.S of x86-64 or aarch64; aarch64 runs under qemu). */
#define _POSIX_C_SOURCE 200809L
#include "objc/bridge.h"
#include "objc/objc_support.h"

#include <criterion/criterion.h>

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* GNU libobjc keeps what class_addMethod and class registration allocate
 * where LeakSanitizer cannot see it; our own objects are counted instead
 * (cmtest_live_objects). The executable exports this hook (ENABLE_EXPORTS)
 * so the sanitizer runtime finds it. */
__attribute__((visibility("default"))) const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void) {
    return "leak:libobjc.so\n";
}

static long live_at_start;

static void setup(void) {
    setenv("CMETAL_METAL_FRAMEWORK", CMTEST_SUPPORT_LIB, 1);
    cmtest_objc_setup();
    cr_assert_eq(cm__objc_init(), CM_OK, "%s", cm_last_error());
    live_at_start = cmtest_live_objects();
}

static void setup_metal(void) {
    setup();
    cr_assert_eq(cm__metal_load(), CM_OK, "%s", cm_last_error());
}

static cm__id new_object(void) {
    return cmtest_new_object();
}

static struct cmtest_object *fields(cm__id obj) {
    return (struct cmtest_object *)obj;
}

/* ------------------------------------------------------------ init, table */
TestSuite(objc_init);

Test(objc_init, registers_every_selector_once) {
    cmtest_objc_setup();
    cr_assert_eq(cm__objc_init(), CM_OK, "%s", cm_last_error());
    cm__sel first[CM__SEL_COUNT];
    for (size_t i = 0; i < CM__SEL_COUNT; i++) {
        first[i] = cm__objc_sel_table[i];
        cr_assert_not_null(first[i], "%s", cm__objc_selector_name(i));
        cr_assert_str_eq(cm__objc_rt.sel_get_name(first[i]), cm__objc_selector_name(i));
    }
    cr_assert_eq(cm__objc_init(), CM_OK);
    for (size_t i = 0; i < CM__SEL_COUNT; i++)
        cr_assert_eq(cm__objc_sel_table[i], first[i]);
    cr_assert_eq(CM__SEL(newBufferWithLength_options),
                 cm__objc_sel_register("newBufferWithLength:options:"));
    cr_assert_null(cm__objc_selector_name(CM__SEL_COUNT));
}

static void *init_from_thread(void *arg) {
    *(cm_status *)arg = cm__objc_init();
    return NULL;
}

Test(objc_init, concurrent_first_calls_all_succeed) {
    cmtest_objc_setup();
    enum { N = 8 };
    pthread_t threads[N];
    cm_status results[N];
    for (int i = 0; i < N; i++)
        cr_assert_eq(pthread_create(&threads[i], NULL, init_from_thread, &results[i]), 0);
    for (int i = 0; i < N; i++) {
        pthread_join(threads[i], NULL);
        cr_assert_eq(results[i], CM_OK);
    }
    cr_assert_not_null(CM__SEL(commit));
}

struct load_result {
    cm_status status;
    cm__class string_class;
};

static void *load_from_thread(void *arg) {
    struct load_result *r = arg;
    r->status = cm__metal_load();
    r->string_class = CM__CLASS(NSString);
    return NULL;
}

Test(objc_init, concurrent_framework_loads_agree) {
    setenv("CMETAL_METAL_FRAMEWORK", CMTEST_SUPPORT_LIB, 1);
    cmtest_objc_setup();
    enum { N = 8 };
    pthread_t threads[N];
    struct load_result results[N];
    for (int i = 0; i < N; i++)
        cr_assert_eq(pthread_create(&threads[i], NULL, load_from_thread, &results[i]), 0);
    for (int i = 0; i < N; i++)
        pthread_join(threads[i], NULL);
    for (int i = 0; i < N; i++) {
        cr_assert_eq(results[i].status, CM_OK);
        cr_assert_not_null(results[i].string_class);
        cr_assert_eq(results[i].string_class, results[0].string_class);
    }
    cr_assert_str_eq(cm__metal_framework_path(), CMTEST_SUPPORT_LIB);
}

Test(objc_init, classes_are_found_and_missing_ones_are_null, .init = setup) {
    cm__class string = CM__CLASS(NSString);
    cr_assert_not_null(string);
    cr_assert_eq(CM__CLASS(NSString), string);
    cr_assert_null(CM__CLASS(NSURL), "the test runtime has no NSURL");
    cr_assert_null(cm__objc_class(CM__CLASS_COUNT));
}

/* Each row: selector (or class name), signature, kind, declared in,
 * confirmed. Rows of kind "objc-class" are classes, the others selectors. */
#define MAX_ROWS 128
struct row {
    char selector[512];
    char signature[512];
};

static size_t read_tsv(struct row *rows, bool classes) {
    FILE *f = fopen(CMTEST_SELECTORS_TSV, "r");
    cr_assert_not_null(f, "cannot open %s", CMTEST_SELECTORS_TSV);
    char line[512];
    size_t n = 0;
    while (fgets(line, sizeof line, f) != NULL) {
        if (line[0] == '#' || line[0] == '\n')
            continue;
        char *tab1 = strchr(line, '\t');
        char *tab2 = tab1 != NULL ? strchr(tab1 + 1, '\t') : NULL;
        char *tab3 = tab2 != NULL ? strchr(tab2 + 1, '\t') : NULL;
        cr_assert(tab1 != NULL && tab2 != NULL && tab3 != NULL, "bad row: %s", line);
        *tab1 = *tab2 = *tab3 = '\0';
        if (strcmp(line, "selector") == 0)
            continue; /* header */
        if ((strcmp(tab2 + 1, "objc-class") == 0) != classes)
            continue;
        cr_assert_lt(n, MAX_ROWS);
        snprintf(rows[n].selector, sizeof rows[n].selector, "%s", line);
        snprintf(rows[n].signature, sizeof rows[n].signature, "%s", tab1 + 1);
        n++;
    }
    fclose(f);
    return n;
}

Test(objc_init, selector_table_matches_apple_selectors_tsv) {
    static struct row rows[MAX_ROWS];
    size_t n = read_tsv(rows, false);
    cr_assert_eq(n, (size_t)CM__SEL_COUNT, "tsv has %zu rows, table %d", n, CM__SEL_COUNT);
    for (size_t i = 0; i < CM__SEL_COUNT; i++) {
        const char *name = cm__objc_selector_name(i);
        size_t j = 0;
        while (j < n && strcmp(rows[j].selector, name) != 0)
            j++;
        cr_assert_lt(j, n, "%s is in the table but not in the tsv", name);
        cr_assert_str_eq(rows[j].signature, cm__objc_selector_signature(i), "signature of %s",
                         name);
    }
    for (size_t j = 0; j < n; j++) {
        size_t i = 0;
        while (i < CM__SEL_COUNT && strcmp(cm__objc_selector_name(i), rows[j].selector) != 0)
            i++;
        cr_assert_lt(i, (size_t)CM__SEL_COUNT, "%s is in the tsv but not in the table",
                     rows[j].selector);
    }
}

Test(objc_init, class_table_matches_apple_selectors_tsv) {
    static struct row rows[MAX_ROWS];
    size_t n = read_tsv(rows, true);
    cr_assert_eq(n, (size_t)CM__CLASS_COUNT, "tsv has %zu classes, table %d", n, CM__CLASS_COUNT);
    for (size_t i = 0; i < CM__CLASS_COUNT; i++) {
        size_t j = 0;
        while (j < n && strcmp(rows[j].selector, cm__objc_class_name(i)) != 0)
            j++;
        cr_assert_lt(j, n, "class %s is in the table but not in the tsv", cm__objc_class_name(i));
        cr_assert_str_eq(rows[j].signature, "-");
    }
    cr_assert_null(cm__objc_class_name(CM__CLASS_COUNT));
}

/* ------------------------------------------------------------------ sends */
TestSuite(objc_send, .init = setup);

Test(objc_send, returns_id) {
    cm__id obj = new_object();
    cr_assert_eq(cm__send_id(obj, cm__objc_sel_register("identity")), obj);
    cm__objc_release(obj);
}

Test(objc_send, compile_option_sends_pass_their_arguments) {
    cm__id obj = new_object();
    cr_assert_eq(cm__msg_init(obj), obj);
    cr_assert(cm__msg_respondsToSelector(obj, CM__SEL(setMathMode)));
    cr_assert_not(cm__msg_respondsToSelector(obj, cm__objc_sel_register("noSuchSelector:")));
    cm__msg_setMathMode(obj, -2);
    cr_assert_eq(fields(obj)->code, -2, "NSInteger keeps its sign");
    cm__msg_setMathMode(obj, 0);
    cr_assert_eq(fields(obj)->code, 0);
    cm__msg_setFastMathEnabled(obj, true);
    cr_assert_eq(fields(obj)->byte_value, 1);
    cm__msg_setFastMathEnabled(obj, false);
    cr_assert_eq(fields(obj)->byte_value, 0);
    cm__objc_release(obj);
    cr_assert_eq(cmtest_live_objects(), live_at_start);
}

Test(objc_send, returns_uint64_and_nsuinteger) {
    cm__id obj = new_object();
    cr_assert_eq(cm__msg_registryID(obj), UINT64_C(0x1122334455667788));
    cr_assert_eq(cm__msg_maxBufferLength(obj), UINT64_C(1) << 40);
    cm__objc_release(obj);
}

Test(objc_send, reads_bool_as_one_byte) {
    cm__id obj = new_object();
    cr_assert(cm__msg_hasUnifiedMemory(obj));
    /* The method leaves 0x100 in eax: only the low byte is the BOOL. */
    cr_assert_not(cm__send_boolean(obj, cm__objc_sel_register("noWithHighBits")));
    cm__objc_release(obj);
}

Test(objc_send, passes_nsinteger_and_returns_bool) {
    cm__id obj = new_object();
    cr_assert(cm__msg_supportsFamily(obj, 1007));
    cr_assert_not(cm__msg_supportsFamily(obj, -5));
    cr_assert_eq(cm__msg_code(obj), -5);
    cm__objc_release(obj);
}

Test(objc_send, returns_double) {
    cm__id obj = new_object();
    cr_assert_eq(cm__send_double(obj, cm__objc_sel_register("doubleValue")), 2.5);
    cm__objc_release(obj);
}

Test(objc_send, returns_24_byte_struct) {
    cm__id obj = new_object();
    long stret_before = cmtest_stret_calls;
    cm__mtl_size s = cm__msg_maxThreadsPerThreadgroup(obj);
    cr_assert_eq(s.width, 1024);
    cr_assert_eq(s.height, 512);
    cr_assert_eq(s.depth, 64);
#if CM__OBJC_HAS_STRET
    cr_assert_eq(cmtest_stret_calls, stret_before + 1, "went through _stret");
#else
    cr_assert_eq(cmtest_stret_calls, stret_before);
#endif
    cm__objc_release(obj);
}

/* Return classes that no send of bridge.h uses yet, cast the same way:
 * a 16-byte struct (NSRange) in two registers everywhere, and four doubles
 * (MTLClearColor's layout), an aggregate that arm64 returns in v0-v3 and
 * x86-64 through memory (objc_msgSend_stret on Apple). */
typedef struct test_color {
    double red, green, blue, alpha;
} test_color;

static cm__ns_range send_range(cm__id self, cm__sel sel) {
    CM__SEND_BODY(cm__ns_range, self, sel, (cm__id, cm__sel), self, sel);
}

static test_color send_color_double_uint(cm__id self, cm__sel sel, double a, cm__uint b) {
    typedef test_color (*imp_t)(cm__id, cm__sel, double, cm__uint);
#if CM__OBJC_HAS_STRET
    return ((imp_t)cm__objc_rt.msg_send_stret)(self, sel, a, b);
#else
    return ((imp_t)CM__OBJC_IMP(self, sel))(self, sel, a, b);
#endif
}

Test(objc_send, returns_16_byte_struct_in_registers) {
    cm__id obj = new_object();
    fields(obj)->range_location = 0x1234;
    fields(obj)->range_length = UINT64_C(0xfedcba9876543210);
    long stret_before = cmtest_stret_calls;
    cm__ns_range r = send_range(obj, cm__objc_sel_register("rangeValue"));
    cr_assert_eq(r.location, 0x1234);
    cr_assert_eq(r.length, UINT64_C(0xfedcba9876543210));
    cr_assert_eq(cmtest_stret_calls, stret_before, "16 bytes never need _stret");
    cm__objc_release(obj);
}

Test(objc_send, returns_four_doubles_and_takes_a_double) {
    cm__id obj = new_object();
    long stret_before = cmtest_stret_calls;
    test_color c =
        send_color_double_uint(obj, cm__objc_sel_register("colorScaledBy:plus:"), 0.5, 3);
    cr_assert(c.red == 3.5 && c.green == 4.0 && c.blue == 4.5 && c.alpha == 5.0, "got %g %g %g %g",
              c.red, c.green, c.blue, c.alpha);
#if CM__OBJC_HAS_STRET
    cr_assert_eq(cmtest_stret_calls, stret_before + 1, "went through _stret");
#else
    cr_assert_eq(cmtest_stret_calls, stret_before);
#endif
    cm__objc_release(obj);
}

Test(objc_send, dispatch_path_matches_the_build) {
    cm__id obj = new_object();
    long before = cmtest_msgsend_calls;
    (void)cm__msg_registryID(obj);
#if CM__OBJC_APPLE
    cr_assert_eq(cmtest_msgsend_calls, before + 1, "went through objc_msgSend");
#else
    cr_assert_eq(cmtest_msgsend_calls, before, "GNU dispatch looks up the IMP");
#endif
    cm__objc_release(obj);
}

Test(objc_send, passes_two_structs_by_value) {
    cm__id obj = new_object();
    cm__msg_dispatchThreads_threadsPerThreadgroup(obj, (cm__mtl_size){7, 8, 9},
                                                  (cm__mtl_size){10, 11, 12});
    struct cmtest_object *o = fields(obj);
    cr_assert(o->size_a.width == 7 && o->size_a.height == 8 && o->size_a.depth == 9);
    cr_assert(o->size_b.width == 10 && o->size_b.height == 11 && o->size_b.depth == 12);
    cm__objc_release(obj);
}

Test(objc_send, passes_id_range_and_byte) {
    cm__id enc = new_object();
    cm__id buf = new_object();
    cm__msg_fillBuffer_range_value(enc, buf, (cm__ns_range){16, 4096}, 0xab);
    struct cmtest_object *o = fields(enc);
    cr_assert_eq(o->object, buf);
    cr_assert_eq(o->range_location, 16);
    cr_assert_eq(o->range_length, 4096);
    cr_assert_eq(o->byte_value, 0xab);
    cm__objc_release(enc);
    cm__objc_release(buf);
    cr_assert_eq(cmtest_live_objects(), live_at_start);
}

Test(objc_send, passes_five_arguments) {
    cm__id enc = new_object();
    cm__id src = new_object();
    cm__id dst = new_object();
    cm__msg_copyFromBuffer_sourceOffset_toBuffer_destinationOffset_size(enc, src, 3, dst, 5, 77);
    struct cmtest_object *o = fields(enc);
    cr_assert_eq(o->object, dst);
    cr_assert_eq(o->range_location, 3);
    cr_assert_eq(o->range_length, 5);
    cr_assert_eq(o->length, 77);
    cr_assert_eq(o->code, 0);
    cm__objc_release(enc);
    cm__objc_release(src);
    cm__objc_release(dst);
}

Test(objc_send, passes_uint64) {
    cm__id event = new_object();
    cm__msg_setSignaledValue(event, UINT64_C(0xfedcba9876543210));
    cr_assert_eq(cm__msg_signaledValue(event), UINT64_C(0xfedcba9876543210));
    cm__objc_release(event);
}

Test(objc_send, class_methods) {
    cr_assert_eq(cm__metal_load(), CM_OK, "%s", cm_last_error()); /* pools */
    cm__class cls = CM__CLASS(NSString);
    void *pool = cm__objc_pool_push();
    cm__id s =
        cm__msg_stringWithCString_encoding(cls, "from a class method", CM__NS_UTF8_STRING_ENCODING);
    cr_assert_not_null(s);
    char text[64];
    cm__ns_string_copy_utf8(s, text, sizeof text);
    cr_assert_str_eq(text, "from a class method");
    cm__id fresh = cm__msg_alloc(cls);
    cr_assert_not_null(fresh);
    cm__objc_release(fresh);
    cm__objc_pool_pop(pool);
    cr_assert_eq(cmtest_live_objects(), live_at_start);
}

Test(objc_send, nil_receivers_return_zero) {
    cr_assert_null(cm__msg_name(NULL));
    cr_assert_eq(cm__msg_length(NULL), 0);
    cr_assert_eq(cm__msg_registryID(NULL), 0);
    cr_assert_not(cm__msg_hasUnifiedMemory(NULL));
    cr_assert_null(cm__msg_contents(NULL));
    cm__mtl_size s = cm__msg_maxThreadsPerThreadgroup(NULL);
    cr_assert(s.width == 0 && s.height == 0 && s.depth == 0);
    cr_assert_eq(cm__send_double(NULL, cm__objc_sel_register("doubleValue")), 0.0);
    cm__msg_commit(NULL);
    cm__objc_release(NULL);
    cr_assert_null(cm__objc_retain(NULL));
}

Test(objc_send, unknown_selector_is_reported_by_name) {
    cm__id obj = new_object();
    cr_assert_eq(cm__send_uint(obj, cm__objc_sel_register("noSuchSelector:")), 0);
    cr_assert_str_eq(cmtest_last_forwarded(), "noSuchSelector:");
    /* A table selector the test class lacks goes the same way. */
    cm__msg_synchronizeResource(obj, obj);
    cr_assert_str_eq(cmtest_last_forwarded(), "synchronizeResource:");
    cm__objc_release(obj);
}

/* ----------------------------------------------------------------- memory */
TestSuite(objc_memory, .init = setup);

Test(objc_memory, retain_and_release_balance) {
    cm__id obj = new_object();
    cr_assert_eq(cmtest_live_objects(), live_at_start + 1);
    cr_assert_eq(cm__objc_retain(obj), obj);
    cr_assert_eq(cm__msg_retainCount(obj), 2);
    cm__objc_release(obj);
    cr_assert_eq(cm__msg_retainCount(obj), 1);
    cm__objc_release(obj);
    cr_assert_eq(cmtest_live_objects(), live_at_start);
}

Test(objc_memory, pools_release_autoreleased_objects_at_pop) {
    cr_assert_eq(cm__metal_load(), CM_OK, "%s", cm_last_error());
    long pushes = cmtest_pool_pushes();
    void *outer = cm__objc_pool_push();
    cr_assert_not_null(outer);
    cm__objc_autorelease(new_object());
    void *inner = cm__objc_pool_push();
    cm__id kept = cm__objc_retain(cm__objc_autorelease(new_object()));
    cr_assert_eq(cmtest_pool_depth(), 2);
    cm__objc_pool_pop(inner);
    cr_assert_eq(cmtest_live_objects(), live_at_start + 2);
    cm__objc_pool_pop(outer);
    cr_assert_eq(cmtest_live_objects(), live_at_start + 1);
    cm__objc_release(kept);
    cr_assert_eq(cmtest_live_objects(), live_at_start);
    cr_assert_eq(cmtest_pool_pushes(), pushes + 2);
    cr_assert_eq(cmtest_pool_depth(), 0);
}

#if !CM__OBJC_APPLE
Test(objc_memory, gnu_pools_come_from_the_framework) {
    /* GNU libobjc has no pools: none until the framework brings them. */
    cr_assert_null(cm__objc_pool_push());
    cm__objc_pool_pop(NULL);
    cr_assert_eq(cmtest_pool_pushes(), 0);
    cr_assert_eq(cm__metal_load(), CM_OK, "%s", cm_last_error());
    void *pool = cm__objc_pool_push();
    cr_assert_not_null(pool);
    cm__objc_pool_pop(pool);
    cr_assert_eq(cmtest_pool_pops(), 1);
}
#else
Test(objc_memory, apple_pools_come_from_the_runtime) {
    void *pool = cm__objc_pool_push();
    cr_assert_not_null(pool, "pools work before the framework is loaded");
    cm__objc_pool_pop(pool);
    cr_assert_eq(cmtest_pool_pops(), 1);
}
#endif

/* ---------------------------------------------------------------- strings */
TestSuite(objc_string, .init = setup_metal);

Test(objc_string, round_trips_utf8) {
    const char *text = "h\xc3\xa9llo w\xc3\xb6rld \xe2\x9c\x93";
    cm__id s = NULL;
    cr_assert_eq(cm__ns_string_from_utf8("cm_test", text, &s), CM_OK, "%s", cm_last_error());
    cr_assert_eq(cm__msg_retainCount(s), 1, "+1, not autoreleased");
    char buf[64];
    cr_assert_eq(cm__ns_string_copy_utf8(s, buf, sizeof buf), strlen(text));
    cr_assert_str_eq(buf, text);
    char *copy = NULL;
    cr_assert_eq(cm__ns_string_to_utf8("cm_test", s, &copy), CM_OK);
    cr_assert_str_eq(copy, text);
    cm__free(copy);
    cm__objc_release(s);
    cr_assert_eq(cmtest_live_objects(), live_at_start, "UTF8String buffers freed");
    cr_assert_eq(cmtest_pool_depth(), 0);
}

Test(objc_string, copy_truncates_like_snprintf) {
    cm__id s = NULL;
    cr_assert_eq(cm__ns_string_from_utf8("cm_test", "hello", &s), CM_OK);
    char buf[3] = {'x', 'x', 'x'};
    cr_assert_eq(cm__ns_string_copy_utf8(s, buf, sizeof buf), 5);
    cr_assert_str_eq(buf, "he");
    cr_assert_eq(cm__ns_string_copy_utf8(NULL, buf, sizeof buf), 0);
    cr_assert_str_eq(buf, "");
    cm__objc_release(s);
}

Test(objc_string, empty_and_nil) {
    cm__id s = NULL;
    cr_assert_eq(cm__ns_string_from_utf8("cm_test", "", &s), CM_OK);
    char *copy = NULL;
    cr_assert_eq(cm__ns_string_to_utf8("cm_test", s, &copy), CM_OK);
    cr_assert_str_eq(copy, "");
    cm__free(copy);
    cr_assert_eq(cm__ns_string_to_utf8("cm_test", NULL, &copy), CM_OK);
    cr_assert_str_eq(copy, "");
    cm__free(copy);
    cm__objc_release(s);
}

Test(objc_string, rejected_bytes_are_an_error) {
    cm__id s = (cm__id)1;
    cr_assert_eq(cm__ns_string_from_utf8("cm_test", "bad \xff byte", &s), CM_ERR_DEVICE);
    cr_assert_null(s);
    cr_assert(strstr(cm_last_error(), "cm_test: NSString initWithBytes") != NULL, "%s",
              cm_last_error());
    cr_assert_eq(cmtest_live_objects(), live_at_start, "the alloc was released");
    cr_assert_eq(cm__ns_string_from_utf8("cm_test", NULL, &s), CM_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(cm_last_error(), "utf8 = NULL") != NULL, "%s", cm_last_error());
}

/* ----------------------------------------------------------------- errors */
TestSuite(objc_error, .init = setup_metal);

Test(objc_error, ns_error_goes_to_last_error) {
    cm__id device = new_object();
    cm__id source = NULL;
    cr_assert_eq(cm__ns_string_from_utf8("cm_test", "kernel void k()", &source), CM_OK);
    void *pool = cm__objc_pool_push();
    cm__id error = NULL;
    cm__id library = cm__msg_newLibraryWithSource_options_error(device, source, NULL, &error);
    cr_assert_null(library);
    cr_assert_not_null(error);
    cr_assert_eq(
        cm__fail_ns_error("cm_library_create", CM_ERR_COMPILE, error, "newLibraryWithSource"),
        CM_ERR_COMPILE);
    cm__objc_pool_pop(pool);
    cr_assert_str_eq(cm_last_error(), "cm_library_create: newLibraryWithSource: cannot compile "
                                      "'kernel void k()' (MTLLibraryErrorDomain, code 3)");
    cm__objc_release(source);
    cm__objc_release(device);
    cr_assert_eq(cmtest_live_objects(), live_at_start);
}

Test(objc_error, nil_error_still_gives_a_message) {
    cr_assert_eq(
        cm__fail_ns_error("cm_queue_create", CM_ERR_DEVICE, NULL, "newCommandQueue returned nil"),
        CM_ERR_DEVICE);
    cr_assert_str_eq(cm_last_error(), "cm_queue_create: newCommandQueue returned nil: no NSError "
                                      "given");
}

Test(objc_error, error_made_by_the_caller) {
    cm__id error = cmtest_new_error("out of memory", "MTLCommandBufferErrorDomain", -8);
    cr_assert_eq(cm__fail_ns_error("cm_stream_sync", CM_ERR_DEVICE, error, "command buffer failed"),
                 CM_ERR_DEVICE);
    cr_assert_str_eq(cm_last_error(), "cm_stream_sync: command buffer failed: out of memory "
                                      "(MTLCommandBufferErrorDomain, code -8)");
    cm__objc_release(error);
    cr_assert_eq(cmtest_live_objects(), live_at_start);
}

/* ----------------------------------------------------------------- blocks */
struct calls {
    int invoked;
    int disposed;
    cm__id last_buffer;
    void *last_pointer;
    cm__uint last_length;
    long pool_depth_inside;
};

static void on_completed(void *context, cm__id command_buffer) {
    struct calls *c = context;
    c->invoked++;
    c->last_buffer = command_buffer;
    c->pool_depth_inside = cmtest_pool_depth();
}

static void on_dealloc(void *context, void *pointer, cm__uint length) {
    struct calls *c = context;
    c->invoked++;
    c->last_pointer = pointer;
    c->last_length = length;
}

static void on_dispose(void *context) {
    struct calls *c = context;
    c->disposed++;
}

TestSuite(objc_block, .init = setup_metal);

/* The literal as the Block ABI lays it out, read back field by field. */
struct abi_descriptor {
    unsigned long reserved, size;
    void (*copy)(void *, const void *);
    void (*dispose)(const void *);
    const char *signature;
};

Test(objc_block, literal_follows_the_block_abi) {
    struct calls calls = {0};
    cm__block blk;
    cr_assert_eq(cm__block_init_deallocator(&blk, on_dealloc, &calls, on_dispose), CM_OK);
    cr_assert_eq(blk.isa, dlsym(RTLD_DEFAULT, "_NSConcreteStackBlock"));
    cr_assert_eq(blk.flags, (1 << 25) | (1 << 30), "HAS_COPY_DISPOSE | HAS_SIGNATURE");
    cr_assert_eq((char *)&blk.descriptor - (char *)&blk, 24);
    cr_assert_eq((char *)&blk.fn - (char *)&blk, 32, "captures after 32 bytes");
    const struct abi_descriptor *d = blk.descriptor;
    cr_assert_eq(d->size, sizeof blk);
    cr_assert_not_null(d->copy);
    cr_assert_not_null(d->dispose);
    cr_assert_str_eq(d->signature, "v24@?0^v8Q16");
    cm__block_release(&blk);

    static cm__block global;
    cr_assert_eq(cm__block_init_global_completed(&global, on_completed, &calls), CM_OK);
    cr_assert_eq(global.isa, dlsym(RTLD_DEFAULT, "_NSConcreteGlobalBlock"));
    cr_assert_eq(global.flags, 0x50000000, "as clang emits global blocks");
    const struct {
        unsigned long reserved, size;
        const char *signature;
    } *g = global.descriptor;
    cr_assert_str_eq(g->signature, "v16@?0@8");
}

Test(objc_block, completed_handler_runs_once_and_disposes_once) {
    struct calls calls = {0};
    cm__id cb = new_object();
    {
        cm__block blk; /* stack literal: gone after this scope */
        cr_assert_eq(cm__block_init_completed(&blk, on_completed, &calls, on_dispose), CM_OK);
        cm__msg_addCompletedHandler(cb, &blk);
        cm__block_release(&blk);
    }
    cr_assert_eq(calls.disposed, 0, "the callee still holds its copy");
    cm__msg_commit(cb);
    cr_assert_eq(calls.invoked, 1);
    cr_assert_eq(calls.last_buffer, cb);
    cr_assert_eq(calls.pool_depth_inside, 1, "invoked inside a pool");
    cr_assert_eq(calls.disposed, 1);
    cm__objc_release(cb);
    cr_assert_eq(calls.disposed, 1);
    cr_assert_eq(cmtest_live_objects(), live_at_start);
}

Test(objc_block, two_copies_dispose_once_after_both) {
    struct calls calls = {0};
    cm__id cb = new_object();
    cm__block blk;
    cr_assert_eq(cm__block_init_completed(&blk, on_completed, &calls, on_dispose), CM_OK);
    cm__msg_addCompletedHandler(cb, &blk);
    cm__msg_addCompletedHandler(cb, &blk);
    cm__block_release(&blk);
    cm__block_release(&blk); /* second release of ours is a no-op */
    cm__msg_commit(cb);
    cr_assert_eq(calls.invoked, 2);
    cr_assert_eq(calls.disposed, 1);
    cm__objc_release(cb);
}

Test(objc_block, never_copied_disposes_at_our_release) {
    struct calls calls = {0};
    cm__block blk;
    cr_assert_eq(cm__block_init_completed(&blk, on_completed, &calls, on_dispose), CM_OK);
    cm__block_release(&blk);
    cr_assert_eq(calls.invoked, 0);
    cr_assert_eq(calls.disposed, 1);
}

Test(objc_block, deallocator_runs_when_the_buffer_dies) {
    struct calls calls = {0};
    static char storage[4096];
    cm__id device = new_object();
    cm__block blk;
    cr_assert_eq(cm__block_init_deallocator(&blk, on_dealloc, &calls, on_dispose), CM_OK);
    cm__id buffer = cm__msg_newBufferWithBytesNoCopy_length_options_deallocator(
        device, storage, sizeof storage, 0, &blk);
    cm__block_release(&blk);
    cr_assert_not_null(buffer);
    cr_assert_eq(cm__msg_contents(buffer), storage);
    cr_assert_eq(cm__msg_length(buffer), sizeof storage);
    cr_assert_eq(calls.invoked + calls.disposed, 0);
    cm__objc_release(buffer);
    cr_assert_eq(calls.invoked, 1);
    cr_assert_eq(calls.last_pointer, storage);
    cr_assert_eq(calls.last_length, sizeof storage);
    cr_assert_eq(calls.disposed, 1);
    cm__objc_release(device);
    cr_assert_eq(cmtest_live_objects(), live_at_start);
}

Test(objc_block, failed_send_disposes_without_invoking) {
    struct calls calls = {0};
    cm__id device = new_object();
    cm__block blk;
    cr_assert_eq(cm__block_init_deallocator(&blk, on_dealloc, &calls, on_dispose), CM_OK);
    cm__id buffer =
        cm__msg_newBufferWithBytesNoCopy_length_options_deallocator(device, &calls, 0, 0, &blk);
    cm__block_release(&blk);
    cr_assert_null(buffer);
    cr_assert_eq(calls.invoked, 0);
    cr_assert_eq(calls.disposed, 1);
    cm__objc_release(device);
}

Test(objc_block, global_block_is_never_copied) {
    static cm__block blk;
    static struct calls calls;
    cr_assert_eq(cm__block_init_global_completed(&blk, on_completed, &calls), CM_OK);
    cr_assert_eq(blk.flags & (1 << 28), 1 << 28, "IS_GLOBAL");
    cm__id cb = new_object();
    cm__msg_addCompletedHandler(cb, &blk);
    cr_assert_eq(fields(cb)->handlers[0], &blk, "_Block_copy returned it as is");
    cm__msg_commit(cb);
    cr_assert_eq(calls.invoked, 1);
    cr_assert_eq(calls.disposed, 0);
    cm__block_release(&blk); /* no-op for global blocks */
    cm__objc_release(cb);
}

Test(objc_block, null_arguments_are_rejected) {
    struct calls calls = {0};
    cr_assert_eq(cm__block_init_completed(NULL, on_completed, &calls, on_dispose),
                 CM_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(cm_last_error(), "cm__block_init_completed: block = NULL") != NULL, "%s",
              cm_last_error());
    cm__block blk;
    cr_assert_eq(cm__block_init_deallocator(&blk, NULL, &calls, on_dispose),
                 CM_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(cm_last_error(), "fn = NULL") != NULL, "%s", cm_last_error());
    cr_assert_eq(calls.disposed, 0);
}

/* ------------------------------------------------------ framework loading */
TestSuite(objc_metal, .init = setup);

Test(objc_metal, loads_the_framework_named_by_the_environment) {
    cr_assert_eq(cm__metal_load(), CM_OK, "%s", cm_last_error());
    cr_assert_str_eq(cm__metal_framework_path(), CMTEST_SUPPORT_LIB);
    cm__id device = NULL;
    cr_assert_eq(cm__metal_default_device("cm_test", &device), CM_OK);
    cr_assert_not_null(device);
    cr_assert_eq(cm__msg_retainCount(device), 1);
    cm__objc_release(device);
    cr_assert_eq(cmtest_live_objects(), live_at_start);
}

Test(objc_metal, default_device_falls_back_to_copy_all_devices) {
    cmtest_set_device_mode(1);
    cm__id device = NULL;
    cr_assert_eq(cm__metal_default_device("cm_test", &device), CM_OK, "%s", cm_last_error());
    cr_assert_not_null(device);
    cr_assert_eq(cmtest_live_objects(), live_at_start + 1, "array released");
    cm__objc_release(device);
    cr_assert_eq(cmtest_live_objects(), live_at_start);
}

Test(objc_metal, framework_without_devices_is_no_device) {
    cmtest_set_device_mode(2);
    cm__id device = (cm__id)1;
    cr_assert_eq(cm__metal_default_device("cm_device_create", &device), CM_ERR_NO_DEVICE);
    cr_assert_null(device);
    cr_assert(strstr(cm_last_error(), "cm_device_create: no Metal device") != NULL, "%s",
              cm_last_error());
}

Test(objc_metal, missing_framework_is_no_device) {
    setenv("CMETAL_METAL_FRAMEWORK", "/nonexistent/libnometal.so", 1);
    cr_assert_eq(cm__metal_load(), CM_ERR_NO_DEVICE);
    const char *msg = cm_last_error();
    cr_assert(strstr(msg, "missing_framework_is_no_device") != NULL, "names the caller: %s", msg);
    cr_assert(strstr(msg, "\"/nonexistent/libnometal.so\"") != NULL, "%s", msg);
    cr_assert(strstr(msg, "set CMETAL_METAL_FRAMEWORK") != NULL, "%s", msg);
    /* The result is kept: later calls report it again. */
    cr_assert_eq(cm__metal_default_device("cm_again", &(cm__id){NULL}), CM_ERR_NO_DEVICE);
    cr_assert(strstr(cm_last_error(), "cm_again: no Metal") != NULL, "%s", cm_last_error());
    cr_assert_null(cm__metal_framework_path());
}

Test(objc_metal, framework_without_entry_point_is_no_device) {
    setenv("CMETAL_METAL_FRAMEWORK", "libBlocksRuntime.so.0", 1);
    cr_assert_eq(cm__metal_load(), CM_ERR_NO_DEVICE);
    cr_assert(strstr(cm_last_error(), "does not export MTLCreateSystemDefaultDevice") != NULL, "%s",
              cm_last_error());
}

#if !defined(__APPLE__)
Test(objc_metal, no_default_framework_off_apple) {
    unsetenv("CMETAL_METAL_FRAMEWORK");
    cr_assert_eq(cm__metal_load(), CM_ERR_NO_DEVICE);
    cr_assert(strstr(cm_last_error(), "no Metal framework on this platform; set "
                                      "CMETAL_METAL_FRAMEWORK") != NULL,
              "%s", cm_last_error());
}
#endif
