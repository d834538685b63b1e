/* SPDX-License-Identifier: MIT */
/* softmetal's test hooks (tools/softmetal/softmetal.h), looked up in the
 * framework the runtime loaded (CMETAL_METAL_FRAMEWORK), for the Metal
 * suites' leak and object-count checks. Only meaningful on softmetal. */
#ifndef CMETAL_TESTS_SOFTMETAL_HOOKS_H
#define CMETAL_TESTS_SOFTMETAL_HOOKS_H

#include <cmetal/device.h>

#include <criterion/criterion.h>
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "softmetal.h"

/* The framework the runtime loaded from CMETAL_METAL_FRAMEWORK, or NULL
 * (no variable, or not loadable); +1, dlclose it. The runtime is made to
 * load it first (cm_device_count), so this takes another reference to the
 * same library rather than loading it; RTLD_NOLOAD is not used, as
 * Apple's <dlfcn.h> hides it under _POSIX_C_SOURCE. */
static inline void *sm_framework(void) {
    const char *path = getenv("CMETAL_METAL_FRAMEWORK");
    if (path == NULL || path[0] == '\0')
        return NULL;
    uint32_t n = 0;
    if (cm_device_count(CM_DEVICE_METAL, &n) != CM_OK)
        return NULL;
    return dlopen(path, RTLD_NOW | RTLD_LOCAL);
}

/* Whether the Metal in use is softmetal (loaded from CMETAL_METAL_FRAMEWORK):
 * the object counts, counters and softmetal's own numbers are asserted only
 * there, so that the suites also run on a Mac. */
static inline bool sm_present(void) {
    void *lib = sm_framework();
    const bool yes = lib != NULL && dlsym(lib, "softmetal_live_count") != NULL;
    if (lib != NULL)
        dlclose(lib);
    return yes;
}

/* A hook of softmetal. On Apple's Metal there is none: the test is
 * skipped from here on (what it asserted before stands), so the suites run
 * on a Mac with softmetal's own assertions left out. */
static inline void *softmetal_hook(const char *name) {
    if (!sm_present())
        cr_skip_test("%s is softmetal's: the rest of this test needs softmetal", name);
    void *lib = sm_framework();
    cr_assert_not_null(lib, "softmetal is loaded");
    void *sym = dlsym(lib, name);
    cr_assert_not_null(sym, "softmetal exports %s", name);
    dlclose(lib); /* the runtime's own handle keeps it loaded */
    return sym;
}

/* A test that provokes API misuse to make a command buffer fail needs Metal
 * without its validation layer, which stops the program at encode under
 * MTL_DEBUG_LAYER=1 (the tests' environment): skipped there, it runs in the
 * suite's ctest entry *_without_debug_layer (tests/metal/CMakeLists.txt). */
static inline void skip_under_debug_layer(void) {
    const char *v = getenv("MTL_DEBUG_LAYER");
    if (v != NULL && strcmp(v, "1") == 0)
        cr_skip_test("provokes API misuse, which Metal's validation layer (MTL_DEBUG_LAYER=1) "
                     "stops at encode: run without it");
}

/* Waits until every committed command buffer has completed and been let go
 * by its queue: as on Metal, that may happen after waitUntilCompleted
 * returns, and until then it holds what it used. Object counts need it. */
static inline void sm_quiesce(void) {
    void (*fn)(void);
    void *sym = softmetal_hook("softmetal_quiesce");
    memcpy(&fn, &sym, sizeof fn);
    fn();
}

/* softmetal's counters, once the queues are quiet. */
static inline void sm_stats(struct softmetal_stats *out) {
    sm_quiesce();
    void (*fn)(struct softmetal_stats *);
    void *sym = softmetal_hook("softmetal_stats");
    memcpy(&fn, &sym, sizeof fn);
    fn(out);
}

static inline long sm_live(const char *class_name) {
    sm_quiesce();
    long (*fn)(const char *);
    void *sym = softmetal_hook("softmetal_live_count");
    memcpy(&fn, &sym, sizeof fn);
    return fn(class_name);
}

/* Waits (at most 10 s) until *count reaches want, and returns it. A
 * no-copy MTLBuffer's deallocator runs when Metal deallocates the buffer,
 * which Apple does not tie to the release cmetal sends (a command buffer
 * may hold it a while): on softmetal once its queues are quiet, elsewhere
 * by polling. */
static inline int sm_await_count(atomic_int *count, int want) {
    if (sm_present())
        sm_quiesce();
    for (int i = 0; i < 10000 && atomic_load(count) < want; ++i)
        nanosleep(&(struct timespec){0, 1000000}, NULL);
    return atomic_load(count);
}

#endif
