/* SPDX-License-Identifier: MIT */
/* Concurrency: threads share tensors and buffers, take views and release
 * them in random order. Each wrapped buffer's release callback must run
 * exactly once, after the last reference anywhere is gone. A plain program
 * (Criterion's process arena does not start under ThreadSanitizer); ctest
 * runs it, and tools/ci/stage-35-tsan.sh runs it under ThreadSanitizer. */
#include <cmetal/cmetal.h>

#include <stdio.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#define THREADS 8
#define ROUNDS 200
#define SHARED 4

static atomic_int releases[SHARED];
static int32_t memory[SHARED][64];

static void on_release(void *ctx) {
    atomic_fetch_add((atomic_int *)ctx, 1);
}

typedef struct worker_arg {
    cm_tensor **shared; /* each worker owns one reference to every entry */
    unsigned seed;
} worker_arg;

static void *worker(void *p) {
    worker_arg *arg = p;
    unsigned seed = arg->seed;
    for (int r = 0; r < ROUNDS; ++r) {
        cm_tensor *src = arg->shared[rand_r(&seed) % SHARED];
        cm_tensor *v = NULL, *w = NULL;
        if (cm_tensor_transpose(src, 0, 1, &v) != CM_OK ||
            cm_tensor_slice(v, 0, 1, CM_SLICE_DEFAULT, 2, &w) != CM_OK)
            abort();
        int32_t x;
        if (cm_tensor_get_element(w, (int64_t[]){0, 0}, CM_INT32, &x) != CM_OK)
            abort();
        cm_tensor_retain(w);
        cm_tensor_release(v);
        cm_tensor_release(w);
        cm_tensor_release(w);
    }
    for (int i = 0; i < SHARED; ++i)
        cm_tensor_release(arg->shared[i]);
    return NULL;
}

#define REQUIRE(cond)                                                                              \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #cond, cm_last_error()); \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static int views_and_releases_run_each_release_callback_once(void) {
    cm_device *d = NULL;
    REQUIRE(cm_device_open(CM_DEVICE_CPU, 0, &d) == CM_OK);
    cm_tensor *shared[SHARED];
    for (int i = 0; i < SHARED; ++i) {
        atomic_store(&releases[i], 0);
        cm_buffer *b = NULL;
        REQUIRE(cm_buffer_wrap_host(d,
                                    &(cm_host_memory_desc){.data = memory[i],
                                                           .size = sizeof memory[i],
                                                           .release = on_release,
                                                           .release_context = &releases[i]},
                                    &b) == CM_OK);
        REQUIRE(cm_tensor_from_buffer(
                    b, &(cm_tensor_desc){.dtype = CM_INT32, .ndim = 2, .shape = (int64_t[]){8, 8}},
                    &shared[i]) == CM_OK);
        cm_buffer_release(b);
    }
    /* One reference per worker; the main thread's own goes first. */
    pthread_t th[THREADS];
    worker_arg args[THREADS];
    for (int t = 0; t < THREADS; ++t) {
        for (int i = 0; i < SHARED; ++i)
            cm_tensor_retain(shared[i]);
        args[t] = (worker_arg){shared, (unsigned)t * 7919u + 1};
    }
    for (int i = 0; i < SHARED; ++i)
        cm_tensor_release(shared[i]);
    for (int t = 0; t < THREADS; ++t)
        REQUIRE(pthread_create(&th[t], NULL, worker, &args[t]) == 0);
    for (int t = 0; t < THREADS; ++t)
        pthread_join(th[t], NULL);
    int bad = 0;
    for (int i = 0; i < SHARED; ++i)
        if (atomic_load(&releases[i]) != 1) {
            fprintf(stderr, "buffer %d released %d times\n", i, atomic_load(&releases[i]));
            bad = 1;
        }
    cm_device_release(d);
    return bad;
}

int main(void) {
    int failed = views_and_releases_run_each_release_callback_once();
    printf("stress: %d passed, %d failed\n", 1 - failed, failed);
    return failed;
}
