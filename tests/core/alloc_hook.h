/* SPDX-License-Identifier: MIT */
/* A counting allocator for tests: makes the Nth allocation fail and tracks
 * live blocks, through cm_set_allocator. Header-only: each test binary gets
 * its own. */
#ifndef CMETAL_TESTS_ALLOC_HOOK_H
#define CMETAL_TESTS_ALLOC_HOOK_H

#include <cmetal/status.h>

#include <stdatomic.h>
#include <stdlib.h>

static atomic_long alloc_hook_count; /* allocations seen */
static atomic_long alloc_hook_outstanding;
static long alloc_hook_fail_at; /* 1-based; 0 = never */

static void *alloc_hook_alloc(size_t size, size_t align, void *user) {
    (void)user;
    long n = atomic_fetch_add(&alloc_hook_count, 1) + 1;
    if (alloc_hook_fail_at != 0 && n == alloc_hook_fail_at)
        return NULL;
    size_t rounded = (size + align - 1) / align * align;
    void *p = aligned_alloc(align, rounded ? rounded : align);
    if (p != NULL)
        atomic_fetch_add(&alloc_hook_outstanding, 1);
    return p;
}

static void alloc_hook_free(void *ptr, void *user) {
    (void)user;
    if (ptr != NULL)
        atomic_fetch_sub(&alloc_hook_outstanding, 1);
    free(ptr);
}

/* Fails allocation number fail_at (1-based) from now on; 0 never fails. */
static inline void alloc_hook_install(long fail_at) {
    atomic_store(&alloc_hook_count, 0);
    atomic_store(&alloc_hook_outstanding, 0);
    alloc_hook_fail_at = fail_at;
    cm_allocator a = {alloc_hook_alloc, alloc_hook_free, NULL};
    cm_set_allocator(&a);
}

static inline long alloc_hook_live(void) {
    return atomic_load(&alloc_hook_outstanding);
}

static inline long alloc_hook_calls(void) {
    return atomic_load(&alloc_hook_count);
}

static inline void alloc_hook_remove(void) {
    cm_set_allocator(NULL);
}

#endif
