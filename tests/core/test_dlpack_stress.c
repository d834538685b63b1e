/* SPDX-License-Identifier: MIT */
/* DLPack lifetimes under concurrent releases, and allocation failures at
 * every allocation of import and export. */
#include <cmetal/cmetal.h>

#include "dlpack_producer.h"
#include "test_barrier.h"

#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ threads */

#define THREADS 8
#define VIEWS_PER_THREAD 16

/* All threads and the test start releasing together. */
static test_barrier g_start;

typedef struct release_job {
    cm_tensor *views[VIEWS_PER_THREAD];
} release_job;

static void *release_all(void *arg) {
    release_job *job = arg;
    test_barrier_wait(&g_start);
    for (int i = 0; i < VIEWS_PER_THREAD; ++i)
        cm_tensor_release(job->views[i]);
    return NULL;
}

Test(dlpack_threads, deleter_runs_exactly_once_under_concurrent_releases) {
    static float data[64];
    for (int round = 0; round < 20; ++round) {
        producer p;
        const int64_t shape[2] = {8, 8};
        producer_init(&p, data, DL_F32, 2, shape, NULL);
        cm_tensor *t = NULL;
        cm_status s = round % 2 ? cm_dlpack_import_versioned(&p.versioned, NULL, &t)
                                : cm_dlpack_import(&p.legacy, NULL, &t);
        cr_assert_eq(s, CM_OK, "%s", cm_last_error());
        cr_assert_eq(test_barrier_init(&g_start, THREADS + 1), 0);
        release_job jobs[THREADS];
        pthread_t threads[THREADS];
        for (int k = 0; k < THREADS; ++k) {
            for (int i = 0; i < VIEWS_PER_THREAD; ++i) {
                /* A mix of retained references and new views. */
                if (i % 2 == 0) {
                    cr_assert_eq(cm_tensor_retain(t), CM_OK);
                    jobs[k].views[i] = t;
                } else {
                    cr_assert_eq(cm_tensor_select(t, 0, (k + i) % 8, &jobs[k].views[i]), CM_OK);
                }
            }
            cr_assert_eq(pthread_create(&threads[k], NULL, release_all, &jobs[k]), 0);
        }
        cm_tensor_release(t);
        test_barrier_wait(&g_start);
        for (int k = 0; k < THREADS; ++k)
            pthread_join(threads[k], NULL);
        test_barrier_destroy(&g_start);
        cr_assert_eq(atomic_load(&p.deleted), 1, "round %d", round);
    }
}

typedef struct delete_job {
    cm_dlpack_managed managed[VIEWS_PER_THREAD];
} delete_job;

static void *delete_all(void *arg) {
    delete_job *job = arg;
    test_barrier_wait(&g_start);
    for (int i = 0; i < VIEWS_PER_THREAD; ++i) {
        if (job->managed[i].legacy != NULL)
            job->managed[i].legacy->deleter(job->managed[i].legacy);
        else
            job->managed[i].versioned->deleter(job->managed[i].versioned);
    }
    return NULL;
}

static int g_wrap_released;

static void count_release(void *context) {
    (void)context;
    __atomic_fetch_add(&g_wrap_released, 1, __ATOMIC_SEQ_CST);
}

Test(dlpack_threads, export_deleters_run_from_any_thread) {
    static float data[16];
    cm_device *cpu = NULL;
    cr_assert_eq(cm_device_open(CM_DEVICE_CPU, 0, &cpu), CM_OK);
    for (int round = 0; round < 10; ++round) {
        /* Wrapped memory, so the test sees when the last reference goes. */
        cm_host_memory_desc hd = {.data = data, .size = sizeof data, .release = count_release};
        cm_buffer *buffer = NULL;
        cr_assert_eq(cm_buffer_wrap_host(cpu, &hd, &buffer), CM_OK);
        const int64_t shape[1] = {16};
        cm_tensor_desc td = {.dtype = CM_FLOAT32, .ndim = 1, .shape = shape};
        cm_tensor *t = NULL;
        cr_assert_eq(cm_tensor_from_buffer(buffer, &td, &t), CM_OK);
        cm_buffer_release(buffer);
        cr_assert_eq(test_barrier_init(&g_start, THREADS + 1), 0);
        delete_job jobs[THREADS];
        pthread_t threads[THREADS];
        for (int k = 0; k < THREADS; ++k) {
            for (int i = 0; i < VIEWS_PER_THREAD; ++i) {
                cm_dlpack_export_desc desc = {.max_version = {(uint32_t)(i % 2), 0}};
                cr_assert_eq(cm_dlpack_export(t, &desc, &jobs[k].managed[i]), CM_OK);
            }
            cr_assert_eq(pthread_create(&threads[k], NULL, delete_all, &jobs[k]), 0);
        }
        cm_tensor_release(t);
        test_barrier_wait(&g_start);
        for (int k = 0; k < THREADS; ++k)
            pthread_join(threads[k], NULL);
        test_barrier_destroy(&g_start);
        cr_assert_eq(__atomic_load_n(&g_wrap_released, __ATOMIC_SEQ_CST), round + 1);
    }
    cm_device_release(cpu);
}

/* Round trips under the default allocator on threads that come and go:
 * each thread keeps a spare export block, which it frees when it exits
 * (ASan and valgrind check that nothing leaks), and blocks that other
 * threads' deleters free go to those threads' spares. Every trip gives back
 * the tensor itself; the last release frees the wrapped memory once. */
typedef struct trip_job {
    cm_tensor *tensor;
    bool ok;
} trip_job;

static void *round_trips(void *arg) {
    trip_job *job = arg;
    job->ok = true;
    for (int i = 0; i < 200 && job->ok; ++i) {
        cm_dlpack_export_desc desc = {.max_version = {(uint32_t)(i % 2), 0}};
        cm_dlpack_managed m;
        cm_tensor *back = NULL;
        job->ok = cm_dlpack_export(job->tensor, &desc, &m) == CM_OK &&
                  (m.versioned != NULL ? cm_dlpack_import_versioned(m.versioned, NULL, &back)
                                       : cm_dlpack_import(m.legacy, NULL, &back)) == CM_OK &&
                  back == job->tensor;
        cm_tensor_release(back);
    }
    return NULL;
}

Test(dlpack_threads, round_trips_on_threads_that_exit_leak_nothing) {
    static float data[16];
    cm_device *cpu = NULL;
    cr_assert_eq(cm_device_open(CM_DEVICE_CPU, 0, &cpu), CM_OK);
    cm_host_memory_desc hd = {.data = data, .size = sizeof data, .release = count_release};
    cm_buffer *buffer = NULL;
    cr_assert_eq(cm_buffer_wrap_host(cpu, &hd, &buffer), CM_OK);
    const int64_t shape[1] = {16};
    cm_tensor_desc td = {.dtype = CM_FLOAT32, .ndim = 1, .shape = shape};
    cm_tensor *t = NULL;
    cr_assert_eq(cm_tensor_from_buffer(buffer, &td, &t), CM_OK);
    cm_buffer_release(buffer);
    cm_dlpack_managed carried = {0}; /* exported on one thread, deleted on the next */
    for (int round = 0; round < 16; ++round) {
        trip_job job = {.tensor = t};
        pthread_t thread;
        cr_assert_eq(pthread_create(&thread, NULL, round_trips, &job), 0);
        pthread_join(thread, NULL);
        cr_assert(job.ok, "round %d: every trip gave back the tensor: %s", round, cm_last_error());
        if (carried.legacy != NULL)
            carried.legacy->deleter(carried.legacy);
        cr_assert_eq(cm_dlpack_export(t, NULL, &carried), CM_OK);
    }
    carried.legacy->deleter(carried.legacy);
    cr_assert_eq(__atomic_load_n(&g_wrap_released, __ATOMIC_SEQ_CST), 0, "the tensor lives on");
    cm_tensor_release(t);
    cr_assert_eq(__atomic_load_n(&g_wrap_released, __ATOMIC_SEQ_CST), 1, "released once");
    cm_device_release(cpu);
}

/* ------------------------------------------------------------ allocation failures */

static atomic_long g_live;  /* allocations not yet freed */
static atomic_long g_count; /* allocations attempted */
static long g_fail_at;      /* 1-based attempt that fails; 0 = none */

static void *failing_alloc(size_t size, size_t align, void *user) {
    (void)user;
    long n = atomic_fetch_add(&g_count, 1) + 1;
    if (g_fail_at != 0 && n == g_fail_at)
        return NULL;
    size_t rounded = (size + align - 1) & ~(align - 1);
    void *p = aligned_alloc(align, rounded ? rounded : align);
    if (p != NULL)
        atomic_fetch_add(&g_live, 1);
    return p;
}

static void counting_free(void *ptr, void *user) {
    (void)user;
    if (ptr != NULL)
        atomic_fetch_sub(&g_live, 1);
    free(ptr);
}

static void install_allocator(void) {
    cm_allocator a = {failing_alloc, counting_free, NULL};
    cr_assert_eq(cm_set_allocator(&a), CM_OK);
    atomic_store(&g_live, 0);
}

static void arm(long fail_at) {
    atomic_store(&g_count, 0);
    g_fail_at = fail_at;
}

TestSuite(dlpack_alloc, .init = install_allocator);

/* Runs import with the Nth allocation failing, for every N until it succeeds. */
static void import_under_failures(bool versioned, const cm_dlpack_import_desc *desc) {
    static float data[12];
    int failures = 0;
    for (long n = 1;; ++n) {
        producer p;
        const int64_t shape[2] = {3, 4};
        const int64_t strides[2] = {1, 3};
        producer_init(&p, data, DL_F32, 2, shape, strides);
        arm(n);
        cm_tensor *t = (cm_tensor *)&p;
        cm_status s = versioned ? cm_dlpack_import_versioned(&p.versioned, desc, &t)
                                : cm_dlpack_import(&p.legacy, desc, &t);
        arm(0);
        if (s == CM_OK) {
            cr_assert_gt(failures, 0, "import allocates");
            cm_tensor_release(t);
            cr_assert_eq(atomic_load(&p.deleted), 1);
            break;
        }
        failures++;
        cr_assert_eq(s, CM_ERR_OUT_OF_MEMORY, "allocation %ld: %s: %s", n, cm_status_name(s),
                     cm_last_error());
        const char *want = versioned ? "cm_dlpack_import_versioned: " : "cm_dlpack_import: ";
        cr_assert(strncmp(cm_last_error(), want, strlen(want)) == 0, "allocation %ld: %s", n,
                  cm_last_error());
        cr_assert_null(t);
        cr_assert_eq(atomic_load(&p.deleted), 0, "allocation %ld: ownership unchanged", n);
        cr_assert_eq(atomic_load(&g_live), 0, "allocation %ld: nothing leaked", n);
        cr_assert_lt(n, 100);
    }
    cr_assert_eq(atomic_load(&g_live), 0);
}

Test(dlpack_alloc, import_fails_cleanly_at_every_allocation) {
    import_under_failures(false, NULL);
    import_under_failures(true, NULL);
    cm_dlpack_import_desc copy = {.copy = CM_COPY_ALWAYS};
    import_under_failures(false, &copy);
    import_under_failures(true, &copy);
}

static void export_under_failures(const cm_dlpack_export_desc *desc) {
    cm_device *cpu = NULL;
    cr_assert_eq(cm_device_open(CM_DEVICE_CPU, 0, &cpu), CM_OK);
    const int64_t shape[2] = {3, 4};
    cm_tensor_desc td = {.dtype = CM_FLOAT32, .ndim = 2, .shape = shape};
    cm_tensor *t = NULL, *tr = NULL;
    cr_assert_eq(cm_tensor_create(cpu, &td, &t), CM_OK);
    cr_assert_eq(cm_tensor_transpose(t, 0, 1, &tr), CM_OK);
    cm_tensor_release(t);
    cm_device_release(cpu);
    const long live = atomic_load(&g_live);
    int failures = 0;
    for (long n = 1;; ++n) {
        cm_dlpack_managed m;
        arm(n);
        cm_status s = cm_dlpack_export(tr, desc, &m);
        arm(0);
        if (s == CM_OK) {
            cr_assert_gt(failures, 0, "export allocates");
            if (m.legacy != NULL)
                m.legacy->deleter(m.legacy);
            else
                m.versioned->deleter(m.versioned);
            break;
        }
        failures++;
        cr_assert_eq(s, CM_ERR_OUT_OF_MEMORY, "allocation %ld: %s", n, cm_last_error());
        cr_assert(strncmp(cm_last_error(), "cm_dlpack_export: ", 18) == 0, "%s", cm_last_error());
        cr_assert_null(m.legacy);
        cr_assert_null(m.versioned);
        cr_assert_eq(atomic_load(&g_live), live, "allocation %ld: nothing leaked", n);
        cr_assert_lt(n, 100);
    }
    cr_assert_eq(atomic_load(&g_live), live);
    cm_tensor_release(tr);
    cr_assert_eq(atomic_load(&g_live), 0, "the tensor's reference count is unchanged");
}

Test(dlpack_alloc, export_fails_cleanly_at_every_allocation) {
    cm_dlpack_export_desc legacy = {0};
    export_under_failures(&legacy);
    cm_dlpack_export_desc versioned = {.max_version = {1, 0}};
    export_under_failures(&versioned);
    cm_dlpack_export_desc copy = {.max_version = {1, 0}, .copy = CM_COPY_ALWAYS};
    export_under_failures(&copy);
    cm_dlpack_export_desc legacy_copy = {.copy = CM_COPY_ALWAYS};
    export_under_failures(&legacy_copy);
}
