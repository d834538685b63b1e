/* SPDX-License-Identifier: MIT */
/* softmetal Foundation subset: object model, pools, NSString, NSError, NSArray. */
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <signal.h>

#include "softmetal/sm_test.h"

/* Objects alive when a test aborts on purpose stay reachable from here, so
 * leak checkers see them as still in use rather than lost. */
static id volatile keep[4];

static id new_string(const void *bytes, NSUInteger len, NSUInteger enc) {
  id s = SEND0(id, sm_class_named("NSString"), "alloc");
  return SEND(id, (id, SEL, const void *, NSUInteger, NSUInteger), s,
              "initWithBytes:length:encoding:", bytes, len, enc);
}

Test(foundation, string_round_trips_utf8_and_counts_utf16_units) {
  const char text[] = "h\xc3\xa9llo \xf0\x9f\x98\x80"; /* é (2 bytes), emoji (4 bytes) */
  id s = new_string(text, sizeof text - 1, 4);
  cr_assert_not_null(s);
  cr_assert_str_eq(sm_utf8(s), text);
  cr_assert_eq(sm_u(s, "length"), 8); /* h é l l o space + surrogate pair */
  cr_assert_eq(sm_u(s, "retainCount"), 1);
  sm_release(s);
  cr_assert_eq(sm_live(), 0);
}

Test(foundation, string_rejects_invalid_utf8_and_unknown_encodings) {
  cr_assert_null(new_string("\xc3", 1, 4));         /* truncated sequence */
  cr_assert_null(new_string("\xc0\xaf", 2, 4));     /* overlong */
  cr_assert_null(new_string("\xed\xa0\x80", 3, 4)); /* surrogate */
  cr_assert_null(new_string("a\0b", 3, 4));         /* embedded NUL */
  cr_assert_null(new_string("abc", 3, 10));         /* UTF-16: not supported */
  cr_assert_null(new_string("\xe9", 1, 1));         /* not ASCII */
  id ok = new_string("abc", 3, 1);
  cr_assert_str_eq(sm_utf8(ok), "abc");
  sm_release(ok);
  cr_assert_eq(sm_live(), 0, "rejected strings must be freed");
}

Test(foundation, string_with_cstring_is_autoreleased) {
  void *pool = objc_autoreleasePoolPush();
  id s = sm_str("metal");
  cr_assert_str_eq(sm_utf8(s), "metal");
  cr_assert_eq(sm_u(s, "length"), 5);
  cr_assert_eq(sm_live(), 1);
  objc_autoreleasePoolPop(pool);
  cr_assert_eq(sm_live(), 0);
}

Test(foundation, nested_pools_release_in_order_and_outer_pop_drains_inner) {
  void *outer = objc_autoreleasePoolPush();
  sm_str("a");
  void *inner = objc_autoreleasePoolPush();
  sm_str("b");
  sm_str("c");
  cr_assert_eq(sm_live(), 3);
  objc_autoreleasePoolPop(inner);
  cr_assert_eq(sm_live(), 1);
  objc_autoreleasePoolPush(); /* left open: the outer pop drains it too */
  sm_str("d");
  objc_autoreleasePoolPop(outer);
  cr_assert_eq(sm_live(), 0);
}

Test(foundation, retain_release_are_counted) {
  struct softmetal_stats a, b;
  id s = new_string("x", 1, 4);
  softmetal_stats(&a);
  cr_assert_eq(sm_retain(s), s);
  cr_assert_eq(sm_u(s, "retainCount"), 2);
  sm_release(s);
  softmetal_stats(&b);
  cr_assert_eq(b.retains - a.retains, 1);
  cr_assert_eq(b.releases - a.releases, 1);
  cr_assert_eq(softmetal_live_count("NSString"), 1);
  sm_release(s);
  softmetal_stats(&b);
  cr_assert_eq(b.live_objects, 0);
  cr_assert_eq(b.allocs, b.deallocs);
  cr_assert_eq(softmetal_live_count("NoSuchClass"), -1);
}

Test(foundation, all_devices_is_an_array_of_the_default_device) {
  id dev = MTLCreateSystemDefaultDevice();
  id all = MTLCopyAllDevices();
  cr_assert_eq(sm_u(all, "count"), 1);
  id first = SEND(id, (id, SEL, NSUInteger), all, "objectAtIndex:", 0);
  cr_assert_eq(first, dev, "one device object while it is alive");
  sm_release(all);
  sm_release(dev);
  cr_assert_eq(sm_live(), 0);
}

Test(foundation, array_index_beyond_count_aborts, .signal = SIGABRT) {
  id all = keep[0] = MTLCopyAllDevices();
  SEND(id, (id, SEL, NSUInteger), all, "objectAtIndex:", 1);
}

Test(foundation, unknown_selector_aborts, .signal = SIGABRT) {
  id dev = keep[0] = MTLCreateSystemDefaultDevice();
  SEND0(void, dev, "noSuchSelector");
}

Test(foundation, over_release_aborts, .signal = SIGABRT) {
  id s = new_string("x", 1, 4);
  sm_release(s);
  /* The second release reads freed memory; run it on a retained copy instead. */
  id t = new_string("y", 1, 4);
  SEND0(void, t, "release");
  SEND0(void, sm_class_named("NSString"), "release"); /* class objects: no-op */
  id u = keep[0] = new_string("z", 1, 4);
  void *rc_field = (char *)u + 16; /* isa, class info, then the count */
  atomic_long *rc = rc_field;
  atomic_store(rc, 0); /* as if already released */
  sm_release(u);
}

Test(foundation, autorelease_without_pool_aborts, .signal = SIGABRT) {
  id s = keep[0] = new_string("x", 1, 4);
  SEND0(id, s, "autorelease");
}

Test(foundation, popping_a_foreign_token_aborts, .signal = SIGABRT) {
  objc_autoreleasePoolPop((void *)(uintptr_t)4096);
}

Test(foundation, objects_answer_class_and_responds_to_selector) {
  id s = new_string("x", 1, 4);
  cr_assert_eq((Class)SEND0(id, s, "class"), objc_getClass("NSString"));
  BOOL yes = SEND(BOOL, (id, SEL, SEL), s, "respondsToSelector:", sel_registerName("UTF8String"));
  BOOL no = SEND(BOOL, (id, SEL, SEL), s, "respondsToSelector:", sel_registerName("count"));
  cr_assert(yes != 0);
  cr_assert(no == 0);
  sm_release(s);
}

Test(foundation, exports_only_apple_names_and_test_hooks) {
  void *lib = dlopen(SOFTMETAL_PATH, RTLD_NOW | RTLD_NOLOAD);
  cr_assert_not_null(lib, "%s", dlerror());
  const char *exported[] = {
      "MTLCreateSystemDefaultDevice", "MTLCopyAllDevices", "objc_autoreleasePoolPush",
      "objc_autoreleasePoolPop",      "softmetal_stats",   "softmetal_live_count"};
  for (size_t i = 0; i < sizeof exported / sizeof exported[0]; i++)
    cr_assert_not_null(dlsym(lib, exported[i]), "%s", exported[i]);
  const char *hidden[] = {"sm__new", "sm__fatal", "sm__run_dispatch", "sm__metal_stdlib_text"};
  for (size_t i = 0; i < sizeof hidden / sizeof hidden[0]; i++)
    cr_assert_null(dlsym(lib, hidden[i]), "%s is exported", hidden[i]);
  id (*create)(void);
  void *sym = dlsym(lib, "MTLCreateSystemDefaultDevice");
  memcpy(&create, &sym, sizeof create);
  id dev = create();
  cr_assert_not_null(dev);
  sm_release(dev);
  dlclose(lib);
}
