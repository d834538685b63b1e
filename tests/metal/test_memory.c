/* SPDX-License-Identifier: MIT */
/* The buffer cache of a Metal device (cmetal/memory.h): reuse, size
 * classes, the cache and memory limits, eviction, counts, clearing, and
 * concurrent use. MTLBuffer counts are softmetal's (skipped elsewhere). */
#include <cmetal/cmetal.h>

#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "softmetal_hooks.h"

static cm_device *metal(void) {
    cm_device *d = NULL;
    CHECK(cm_device_open(CM_DEVICE_METAL, 0, &d));
    return d;
}

static cm_memory_info meminfo(cm_device *d) {
    cm_memory_info m;
    CHECK(cm_device_get_memory_info(d, &m));
    return m;
}

/* A 1-D float32 tensor of n elements, filled on the device. */
static cm_tensor *used_tensor(cm_device *d, int64_t n) {
    cm_tensor *t = NULL;
    CHECK(cm_tensor_create(d, &(cm_tensor_desc){.dtype = CM_FLOAT32, .ndim = 1, .shape = &n}, &t));
    const float one = 1;
    CHECK(cm_fill(t, CM_FLOAT32, &one, NULL));
    return t;
}

static cm_buffer *buffer(cm_device *d, size_t size, cm_storage_mode storage) {
    cm_buffer *b = NULL;
    CHECK(cm_buffer_create(d, &(cm_buffer_desc){.size = size, .storage = storage}, &b));
    return b;
}

Test(memory, cpu_device_has_no_cache) {
    cm_device *cpu = NULL;
    CHECK(cm_device_open(CM_DEVICE_CPU, 0, &cpu));
    cm_memory_info m;
    EXPECT_FAIL(cm_device_get_memory_info(cpu, &m), CM_ERR_UNSUPPORTED, "cpu device");
    EXPECT_FAIL(cm_device_clear_cache(cpu), CM_ERR_UNSUPPORTED, "buffer cache");
    EXPECT_FAIL(cm_device_set_cache_limit(cpu, 0, NULL), CM_ERR_UNSUPPORTED, "cpu");
    EXPECT_FAIL(cm_device_get_memory_info(NULL, &m), CM_ERR_INVALID_ARGUMENT, "device = NULL");
    cm_device *d = metal();
    EXPECT_FAIL(cm_device_get_memory_info(d, NULL), CM_ERR_INVALID_ARGUMENT, "out = NULL");
    cm_device_release(d);
}

Test(memory, default_cache_limit_is_an_eighth_of_the_working_set_at_most_1_gib) {
    cm_device *d = metal();
    cm_device_info info;
    CHECK(cm_device_get_info(d, &info));
    const uint64_t ws = info.recommended_working_set;
    const uint64_t want = ws == 0                        ? (uint64_t)256 << 20
                          : ws / 8 < ((uint64_t)1 << 30) ? ws / 8
                                                         : (uint64_t)1 << 30;
    cm_memory_info m = meminfo(d);
    cr_assert_eq(m.cache_limit, want, "cache_limit %llu for a working set of %llu",
                 (unsigned long long)m.cache_limit, (unsigned long long)ws);
    cr_assert_eq(m.memory_limit, 0, "no memory limit by default");
    cr_assert_eq(m.active_bytes + m.cached_bytes + m.allocations, 0, "a new device holds none");
    cm_device_release(d);
}

Test(memory, a_loop_of_a_few_sizes_makes_no_mtlbuffer_after_its_first_iteration) {
    cm_device *d = metal();
    static const int64_t sizes[] = {100, 1000, 4096, 70000};
    enum { NS = sizeof sizes / sizeof sizes[0], ROUNDS = 12 };
    long live_after_first = 0;
    uint64_t made_after_first = 0;
    for (int r = 0; r < ROUNDS; ++r) {
        cm_tensor *t[NS];
        for (int i = 0; i < NS; ++i)
            t[i] = used_tensor(d, sizes[i]);
        cm_tensor *sum = used_tensor(d, 1);
        const float two = 2;
        CHECK(cm_binary(CM_BINARY_ADD, t[NS - 1], sum, t[NS - 1], NULL));
        CHECK(cm_fill(sum, CM_FLOAT32, &two, NULL));
        float got = 0;
        CHECK(cm_tensor_get_element(t[NS - 1], &(int64_t){69999}, CM_FLOAT32, &got));
        cr_assert_eq(got, 2.0f, "round %d: a reused buffer computes as a new one", r);
        cm_tensor_release(sum);
        for (int i = 0; i < NS; ++i)
            cm_tensor_release(t[i]);
        if (r == 0) {
            made_after_first = meminfo(d).allocations;
            if (sm_present())
                live_after_first = sm_live("SMBuffer");
        }
    }
    cm_memory_info m = meminfo(d);
    cr_assert_eq(m.allocations, made_after_first, "%llu MTLBuffers made after the first round",
                 (unsigned long long)(m.allocations - made_after_first));
    cr_assert_eq(m.cache_hits, (uint64_t)(ROUNDS - 1) * (NS + 1));
    cr_assert_eq(m.cache_misses, NS + 1);
    cr_assert_eq(m.active_bytes, 0);
    cr_assert_gt(m.cached_bytes, 70000 * 4);
    if (sm_present())
        cr_assert_eq(sm_live("SMBuffer"), live_after_first, "softmetal made no MTLBuffer either");
    cm_device_release(d);
}

Test(memory, size_classes_waste_at_most_an_eighth) {
    cm_device *d = metal();
    for (size_t n = 0; n < 5000000; n = n < 64 ? n + 1 : n + n / 7 + 3) {
        cm_buffer *b = buffer(d, n, CM_STORAGE_SHARED);
        const uint64_t held = meminfo(d).active_bytes;
        const size_t want = n > 0 ? n : 1;
        cr_assert(held >= want && held - want <= want / 8, "%zu bytes held for %zu asked",
                  (size_t)held, n);
        cm_buffer_info info;
        CHECK(cm_buffer_get_info(b, &info));
        cr_assert_eq(info.size, n, "the buffer keeps the size asked for");
        cm_buffer_release(b);
    }
    cm_device_release(d);
}

Test(memory, storage_modes_are_cached_apart) {
    cm_device *d = metal();
    cm_buffer_release(buffer(d, 4096, CM_STORAGE_SHARED));
    cm_buffer *p = buffer(d, 4096, CM_STORAGE_PRIVATE);
    cm_memory_info m = meminfo(d);
    cr_assert_eq(m.cache_hits, 0, "a private request takes no shared buffer");
    cr_assert_eq(m.allocations, 2);
    cm_buffer_info info;
    CHECK(cm_buffer_get_info(p, &info));
    cr_assert_null(info.host, "private storage has no host address");
    cm_buffer_release(p);
    cm_buffer *s = buffer(d, 4000, CM_STORAGE_SHARED);
    cr_assert_eq(meminfo(d).cache_hits, 1, "4000 bytes fall in 4096's class");
    cm_buffer_release(s);
    cm_device_release(d);
}

Test(memory, a_growing_append_reuses_the_cache_within_its_limit) {
    cm_device *d = metal();
    const uint64_t limit = 8 << 20;
    CHECK(cm_device_set_cache_limit(d, limit, NULL));
    /* A KV cache appended to: each step makes the longer tensor while the
     * old one lives, copies, then releases the old one. */
    int64_t n = 1 << 18; /* 1 MiB of float32 */
    cm_tensor *cur = used_tensor(d, n);
    enum { STEPS = 200, GROW = 1024 };
    for (int s = 0; s < STEPS; ++s) {
        cm_tensor *next = used_tensor(d, n + GROW);
        cm_tensor *head = NULL;
        CHECK(cm_tensor_slice(next, 0, 0, n, 1, &head));
        CHECK(cm_copy(cur, head, NULL));
        cm_tensor_release(head);
        cm_tensor_release(cur);
        cur = next;
        n += GROW;
        const cm_memory_info m = meminfo(d);
        cr_assert_leq(m.cached_bytes, limit, "step %d: %llu cached", s,
                      (unsigned long long)m.cached_bytes);
    }
    const cm_memory_info m = meminfo(d);
    /* Each class spans 1/8 of its power of two: 32 to 64 steps of 4 KiB
     * each at these sizes, so nearly all the steps are hits. */
    cr_assert_geq(m.cache_hits, STEPS * 8 / 10, "%llu hits, %llu misses in %d steps",
                  (unsigned long long)m.cache_hits, (unsigned long long)m.cache_misses, STEPS);
    cm_tensor_release(cur);
    cm_device_release(d);
}

Test(memory, the_least_recently_cached_go_first) {
    cm_device *d = metal();
    CHECK(cm_device_set_cache_limit(d, 100000, NULL));
    cm_buffer *a = buffer(d, 40000, CM_STORAGE_SHARED);
    cm_buffer *b = buffer(d, 50000, CM_STORAGE_SHARED);
    cm_buffer *c = buffer(d, 30000, CM_STORAGE_SHARED);
    cm_buffer_release(a); /* oldest */
    cm_buffer_release(b);
    cm_buffer_release(c); /* pushes the cache past 100000: a goes */
    cm_memory_info m = meminfo(d);
    cr_assert_leq(m.cached_bytes, 100000);
    cr_assert_gt(m.cached_bytes, 80000, "b and c stay");
    cm_buffer_release(buffer(d, 50000, CM_STORAGE_SHARED));
    cr_assert_eq(meminfo(d).cache_hits, 1, "b's class is served");
    cm_buffer_release(buffer(d, 40000, CM_STORAGE_SHARED));
    cr_assert_eq(meminfo(d).cache_hits, 1, "a was evicted");
    cm_device_release(d);
}

Test(memory, clear_cache_returns_memory_to_the_baseline) {
    cm_device *d = metal();
    /* Kernels and their buffers first, so the baseline is warm. */
    cm_tensor_release(used_tensor(d, 16));
    CHECK(cm_device_clear_cache(d));
    long live0 = 0, bytes0 = 0;
    struct softmetal_stats s;
    if (sm_present()) {
        live0 = sm_live("SMBuffer");
        sm_stats(&s);
        bytes0 = s.live_buffer_bytes;
    }
    for (int r = 0; r < 4; ++r)
        for (int64_t n = 1000; n < 400000; n *= 3)
            cm_tensor_release(used_tensor(d, n + r));
    cm_memory_info m = meminfo(d);
    cr_assert_gt(m.cached_bytes, 0);
    if (sm_present())
        cr_assert_gt(sm_live("SMBuffer"), live0, "the cache holds MTLBuffers");
    CHECK(cm_device_clear_cache(d));
    m = meminfo(d);
    cr_assert_eq(m.cached_bytes, 0);
    cr_assert_eq(m.active_bytes, 0);
    if (sm_present()) {
        cr_assert_eq(sm_live("SMBuffer"), live0, "every cached MTLBuffer released");
        sm_stats(&s);
        cr_assert_eq(s.live_buffer_bytes, bytes0);
    }
    cm_device_release(d);
}

Test(memory, cache_limit_0_releases_every_buffer_at_once) {
    cm_device *d = metal();
    cm_tensor_release(used_tensor(d, 16));
    cm_buffer_release(buffer(d, 5000, CM_STORAGE_SHARED));
    uint64_t previous = 0;
    CHECK(cm_device_set_cache_limit(d, 0, &previous));
    cr_assert_gt(previous, 0);
    cm_memory_info m = meminfo(d);
    cr_assert_eq(m.cached_bytes, 0, "lowering the limit evicts at once");
    cr_assert_eq(m.cache_limit, 0);
    const long live0 = sm_present() ? sm_live("SMBuffer") : 0;
    for (int i = 0; i < 5; ++i)
        cm_tensor_release(used_tensor(d, 3000));
    m = meminfo(d);
    cr_assert_eq(m.cached_bytes, 0);
    cr_assert_eq(m.cache_hits, 0);
    if (sm_present())
        cr_assert_eq(sm_live("SMBuffer"), live0, "nothing kept");
    CHECK(cm_device_set_cache_limit(d, 1 << 20, &previous));
    cr_assert_eq(previous, 0);
    cm_device_release(d);
}

Test(memory, the_memory_limit_fails_allocations_past_it) {
    cm_device *d = metal();
    uint64_t previous = 1;
    CHECK(cm_device_set_memory_limit(d, 1 << 20, &previous));
    cr_assert_eq(previous, 0);
    cm_buffer *a = buffer(d, 512 << 10, CM_STORAGE_SHARED);
    cm_buffer *b = NULL;
    EXPECT_FAIL(
        cm_buffer_create(d, &(cm_buffer_desc){.size = 600 << 10, .storage = CM_STORAGE_SHARED}, &b),
        CM_ERR_OUT_OF_MEMORY, "memory limit of 1048576 bytes");
    cr_assert_null(b);
    cr_assert(strstr(cm_last_error(), "desc->size = 614400") != NULL, "%s", cm_last_error());
    cm_tensor *t = NULL;
    const int64_t mib_of_floats = 1 << 18;
    EXPECT_FAIL(
        cm_tensor_create(
            d, &(cm_tensor_desc){.dtype = CM_FLOAT32, .ndim = 1, .shape = &mib_of_floats}, &t),
        CM_ERR_OUT_OF_MEMORY, "memory limit");
    cr_assert_null(t);
    cm_buffer_release(a); /* cached: the cache gives way to the next one */
    b = buffer(d, 600 << 10, CM_STORAGE_SHARED);
    cm_memory_info m = meminfo(d);
    cr_assert_leq(m.active_bytes + m.cached_bytes, 1 << 20, "cache and active within the limit");
    cm_buffer_release(b);
    CHECK(cm_device_set_memory_limit(d, 0, &previous));
    cr_assert_eq(previous, 1 << 20);
    cm_buffer_release(buffer(d, 2 << 20, CM_STORAGE_SHARED));
    cm_device_release(d);
}

Test(memory, peak_counts_and_resets) {
    cm_device *d = metal();
    cm_buffer *a = buffer(d, 64 << 10, CM_STORAGE_SHARED);
    cm_buffer *b = buffer(d, 128 << 10, CM_STORAGE_SHARED);
    cm_buffer_release(b);
    cm_memory_info m = meminfo(d);
    cr_assert_eq(m.active_bytes, 64 << 10);
    cr_assert_eq(m.peak_bytes, 192 << 10);
    CHECK(cm_device_reset_peak_memory(d));
    cr_assert_eq(meminfo(d).peak_bytes, 64 << 10, "the peak restarts at the active bytes");
    cm_buffer_release(a);
    cr_assert_eq(meminfo(d).peak_bytes, 64 << 10);
    cm_device_release(d);
}

Test(memory, a_buffer_whose_mtlbuffer_was_handed_out_is_not_reused) {
    cm_device *d = metal();
    cm_buffer *a = buffer(d, 8192, CM_STORAGE_SHARED);
    cm_buffer_info info;
    CHECK(cm_buffer_get_info(a, &info));
    void *native = info.native;
    cm_buffer_release(a);
    cr_assert_eq(meminfo(d).cached_bytes, 0, "the program may hold the MTLBuffer");
    cm_buffer *b = buffer(d, 8192, CM_STORAGE_SHARED);
    cr_assert_eq(meminfo(d).cache_hits, 0);
    cm_buffer_release(b);
    (void)native;
    cm_device_release(d);
}

/* Threads allocating, using and releasing at once on one device. */
enum { THREADS = 4, ROUNDS = 30 };
static cm_device *shared_device;

static void *churn(void *arg) {
    const int me = (int)(intptr_t)arg;
    for (int r = 0; r < ROUNDS; ++r) {
        cm_tensor *t = NULL;
        const int64_t n = 1000 + 700 * ((r + me) % 5);
        if (cm_tensor_create(shared_device,
                             &(cm_tensor_desc){.dtype = CM_FLOAT32, .ndim = 1, .shape = &n},
                             &t) != CM_OK)
            return (void *)1;
        const float v = (float)me;
        float back = -1;
        if (cm_fill(t, CM_FLOAT32, &v, NULL) != CM_OK ||
            cm_tensor_get_element(t, &(int64_t){n - 1}, CM_FLOAT32, &back) != CM_OK || back != v)
            return (void *)2;
        cm_tensor_release(t);
        if (r % 10 == 9 && me == 0)
            (void)cm_device_clear_cache(shared_device);
    }
    return NULL;
}

Test(memory, threads_share_the_cache) {
    shared_device = metal();
    pthread_t th[THREADS];
    for (int i = 0; i < THREADS; ++i)
        cr_assert_eq(pthread_create(&th[i], NULL, churn, (void *)(intptr_t)i), 0);
    for (int i = 0; i < THREADS; ++i) {
        void *ret = NULL;
        pthread_join(th[i], &ret);
        cr_assert_null(ret, "thread %d failed (%p): %s", i, ret, cm_last_error());
    }
    const cm_memory_info m = meminfo(shared_device);
    cr_assert_eq(m.cache_hits + m.cache_misses, THREADS * ROUNDS);
    cr_assert_eq(m.active_bytes, 0);
    cr_assert_leq(m.allocations, m.cache_misses);
    cm_device_release(shared_device);
}

/* ---- small buffers from heaps */

/* The storage mode whose small buffers come from heaps on this device:
 * shared on Apple GPUs, else private (which every Mac has heaps of). A
 * fresh device answers; test_labels.c checks which modes a device has. */
static cm_storage_mode small_storage = CM_STORAGE_SHARED;
static cm_device *heap_device(void) {
    cm_device *d = metal();
    cm_buffer_release(buffer(d, 16, CM_STORAGE_SHARED));
    small_storage = meminfo(d).heaps > 0 ? CM_STORAGE_SHARED : CM_STORAGE_PRIVATE;
    cm_device_release(d);
    return metal();
}

/* A 1-D int32 tensor of n elements of small_storage filled with v, or
 * NULL (errors are the caller's). */
static cm_tensor *try_int_tensor(cm_device *d, int64_t n, int32_t v) {
    cm_tensor *t = NULL;
    if (cm_tensor_create(
            d,
            &(cm_tensor_desc){.dtype = CM_INT32, .ndim = 1, .shape = &n, .storage = small_storage},
            &t) != CM_OK)
        return NULL;
    if (cm_fill(t, CM_INT32, &v, NULL) != CM_OK) {
        cm_tensor_release(t);
        return NULL;
    }
    return t;
}

static cm_tensor *int_tensor(cm_device *d, int64_t n, int32_t v) {
    cm_tensor *t = try_int_tensor(d, n, v);
    cr_assert_not_null(t, "%s", cm_last_error());
    return t;
}

/* Element i of t, read through its buffer (private storage included);
 * false on an error. */
static bool try_element(cm_tensor *t, int64_t i, int32_t *v) {
    cm_tensor_info ti;
    return cm_tensor_get_info(t, &ti) == CM_OK &&
           cm_buffer_read(ti.buffer, (size_t)ti.byte_offset + (size_t)i * 4, v, 4) == CM_OK;
}

static int32_t element(cm_tensor *t, int64_t i) {
    int32_t v = -1;
    cr_assert(try_element(t, i, &v), "%s", cm_last_error());
    return v;
}

Test(memory, many_small_tensors_share_a_few_heaps) {
    cm_device *d = heap_device();
    enum { N = 300 };
    static const int64_t sizes[] = {1, 25, 100, 1000, 4096}; /* 4 bytes to 16 KiB */
    const long heaps0 = sm_present() ? sm_live("SMHeap") : 0;
    cm_tensor *t[N];
    for (int i = 0; i < N; ++i)
        t[i] = int_tensor(d, sizes[i % 5], i);
    cm_memory_info m = meminfo(d);
    cr_assert_eq(m.cache_misses, N);
    cr_assert_gt(m.heaps, 0, "small buffers come from heaps");
    cr_assert_leq(m.allocations, N / 10, "%llu Metal allocations for %d tensors",
                  (unsigned long long)m.allocations, N);
    cr_assert_eq(m.allocations, m.heaps, "no buffer of its own");
    cr_assert_geq(m.heap_bytes, m.active_bytes);
    if (sm_present())
        cr_assert_eq(sm_live("SMHeap") - heaps0, (long)m.heaps, "softmetal holds as many heaps");
    /* Each tensor keeps its own bytes: no two share memory. */
    for (int i = 0; i < N; ++i) {
        const int64_t n = sizes[i % 5];
        cr_assert_eq(element(t[i], 0), i, "tensor %d, first element", i);
        cr_assert_eq(element(t[i], n - 1), i, "tensor %d, last element", i);
    }
    for (int i = 0; i < N; ++i)
        cm_tensor_release(t[i]);
    m = meminfo(d);
    cr_assert_eq(m.active_bytes, 0);
    cr_assert_gt(m.heaps, 0, "cached buffers keep their heaps");
    /* The cache serves them again: no new heap. */
    const uint64_t made = m.allocations;
    for (int i = 0; i < N; ++i)
        cm_tensor_release(int_tensor(d, sizes[i % 5], i));
    cr_assert_eq(meminfo(d).allocations, made);
    CHECK(cm_device_clear_cache(d));
    m = meminfo(d);
    cr_assert_eq(m.heaps, 0, "clearing the cache gives back the emptied heaps");
    cr_assert_eq(m.heap_bytes, 0);
    if (sm_present())
        cr_assert_eq(sm_live("SMHeap"), heaps0);
    cm_device_release(d);
}

Test(memory, with_the_cache_off_small_buffers_have_their_own) {
    cm_device *d = heap_device();
    /* Off, and a cache smaller than one heap (1 MiB). */
    static const uint64_t limits[] = {0, (1 << 20) - 1};
    enum { N = 40 };
    for (int k = 0; k < 2; ++k) {
        CHECK(cm_device_set_cache_limit(d, limits[k], NULL));
        const uint64_t made = meminfo(d).allocations;
        cm_tensor *t[N];
        for (int i = 0; i < N; ++i)
            t[i] = int_tensor(d, 100, i);
        cm_memory_info m = meminfo(d);
        cr_assert_eq(m.heaps, 0, "cache limit %llu: no heap", (unsigned long long)limits[k]);
        cr_assert_eq(m.allocations - made, N);
        if (sm_present())
            cr_assert_eq(sm_live("SMHeap"), 0);
        for (int i = 0; i < N; ++i) {
            cr_assert_eq(element(t[i], 99), i);
            cm_tensor_release(t[i]);
        }
    }
    CHECK(cm_device_set_cache_limit(d, 0, NULL));
    cr_assert_eq(meminfo(d).cached_bytes, 0, "every byte goes back at release");
    cm_device_release(d);
}

Test(memory, heaps_made_before_the_cache_goes_off_leave_with_their_buffers) {
    cm_device *d = heap_device();
    cm_tensor *a = int_tensor(d, 100, 1), *b = int_tensor(d, 100, 2);
    cr_assert_eq(meminfo(d).heaps, 1);
    CHECK(cm_device_set_cache_limit(d, 0, NULL));
    cm_tensor *c = int_tensor(d, 100, 3);
    cr_assert_eq(meminfo(d).heaps, 1, "c has a buffer of its own");
    cm_tensor_release(a);
    cr_assert_eq(meminfo(d).heaps, 1, "b still lives in the heap");
    cm_tensor_release(b);
    cm_memory_info m = meminfo(d);
    cr_assert_eq(m.heaps, 0, "the last buffer takes its heap with it");
    cr_assert_eq(m.cached_bytes, 0);
    cr_assert_eq(element(c, 99), 3);
    cm_tensor_release(c);
    cm_device_release(d);
}

Test(memory, a_new_heap_counts_whole_against_the_memory_limit) {
    cm_device *d = heap_device();
    /* Below one heap: small buffers have their own MTLBuffers. */
    CHECK(cm_device_set_memory_limit(d, 512 << 10, NULL));
    cm_tensor *a = int_tensor(d, 100, 1);
    cm_memory_info m = meminfo(d);
    cr_assert_eq(m.heaps, 0, "a heap would pass the limit");
    cr_assert_eq(m.allocations, 1);
    /* Room for a heap: small buffers share it. */
    CHECK(cm_device_set_memory_limit(d, 4 << 20, NULL));
    cm_tensor *b = int_tensor(d, 100, 2), *c = int_tensor(d, 100, 3);
    m = meminfo(d);
    cr_assert_eq(m.heaps, 1);
    cr_assert_eq(m.allocations, 2);
    cr_assert_eq(element(a, 99) + element(b, 99) + element(c, 99), 6);
    cm_tensor_release(a);
    cm_tensor_release(b);
    cm_tensor_release(c);
    cm_device_release(d);
}

Test(memory, a_handed_out_heap_buffer_keeps_its_heap_until_the_device_goes) {
    cm_device *d = heap_device();
    cm_buffer *b = buffer(d, 256, small_storage);
    cr_assert_eq(meminfo(d).heaps, 1);
    cm_buffer_info info;
    CHECK(cm_buffer_get_info(b, &info));
    cr_assert_not_null(info.native, "a heap buffer is an MTLBuffer like any other");
    if (info.host != NULL)
        memset(info.host, 0x5a, 256);
    cm_buffer_release(b);
    CHECK(cm_device_clear_cache(d));
    cm_memory_info m = meminfo(d);
    cr_assert_eq(m.heaps, 1, "the program may still use the buffer");
    cr_assert_eq(m.active_bytes + m.cached_bytes, 0);
    cm_device_release(d);
}

/* Threads making, checking and releasing small tensors, many alive at once. */
enum { SMALL_THREADS = 4, SMALL_ROUNDS = 20, SMALL_ALIVE = 24 };

static void *small_churn(void *arg) {
    const int me = (int)(intptr_t)arg;
    for (int r = 0; r < SMALL_ROUNDS; ++r) {
        cm_tensor *t[SMALL_ALIVE];
        for (int i = 0; i < SMALL_ALIVE; ++i) {
            const int64_t n = 1 + (me * 37 + r * 11 + i * 53) % 3000;
            const int32_t v = me * 100000 + r * 100 + i;
            if ((t[i] = try_int_tensor(shared_device, n, v)) == NULL)
                return (void *)1;
        }
        for (int i = 0; i < SMALL_ALIVE; ++i) {
            const int32_t v = me * 100000 + r * 100 + i;
            cm_tensor_info ti;
            int32_t first = -1, last = -1;
            if (cm_tensor_get_info(t[i], &ti) != CM_OK || !try_element(t[i], 0, &first) ||
                !try_element(t[i], ti.shape[0] - 1, &last) || first != v || last != v)
                return (void *)2;
            cm_tensor_release(t[i]);
        }
        if (me == 0 && r % 5 == 4)
            (void)cm_device_clear_cache(shared_device);
    }
    return NULL;
}

Test(memory, threads_share_heaps) {
    shared_device = heap_device();
    pthread_t th[SMALL_THREADS];
    for (int i = 0; i < SMALL_THREADS; ++i)
        cr_assert_eq(pthread_create(&th[i], NULL, small_churn, (void *)(intptr_t)i), 0);
    for (int i = 0; i < SMALL_THREADS; ++i) {
        void *ret = NULL;
        pthread_join(th[i], &ret);
        cr_assert_null(ret, "thread %d failed (%p): %s", i, ret, cm_last_error());
    }
    cm_memory_info m = meminfo(shared_device);
    cr_assert_eq(m.active_bytes, 0);
    cr_assert_lt(m.allocations, SMALL_THREADS * SMALL_ROUNDS * SMALL_ALIVE / 10);
    CHECK(cm_device_clear_cache(shared_device));
    m = meminfo(shared_device);
    cr_assert_eq(m.heaps + m.heap_bytes + m.cached_bytes, 0);
    cm_device_release(shared_device);
}
