/* SPDX-License-Identifier: MIT */
/* Concurrency on the Metal device (softmetal on Linux): threads share one
 * device, make their own streams, run ops on them over a tensor they all
 * read and one they all write (each its own slice), move bytes through
 * private buffers, signal fences and wait on each other's, synchronize the
 * whole device while streams come and go, and release everything in random
 * order. Plain program; ctest runs it, tools/ci/stage-35-tsan.sh runs it
 * under ThreadSanitizer. */
#include <cmetal/cmetal.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define THREADS 4
#define ROUNDS 40

#define REQUIRE(cond)                                                                              \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #cond, cm_last_error()); \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static cm_device *device;
static cm_tensor *shared_in;  /* every thread reads it */
static cm_tensor *shared_out; /* every thread writes its own slice */
#define SLICE 64
static cm_fence *_Atomic published[THREADS]; /* each thread's latest fence */
static atomic_int released;

static void on_release(void *ctx) {
    (void)ctx;
    atomic_fetch_add(&released, 1);
}

static void *worker(void *p) {
    int me = (int)(intptr_t)p;
    unsigned seed = (unsigned)me * 2654435761u;
    cm_stream *stream = NULL;
    REQUIRE(cm_stream_create(device, &stream) == CM_OK);
    for (int r = 0; r < ROUNDS; ++r) {
        cm_buffer *b = NULL;
        REQUIRE(cm_buffer_create(device,
                                 &(cm_buffer_desc){.size = 256, .storage = CM_STORAGE_PRIVATE},
                                 &b) == CM_OK);
        unsigned char in[256], out[256];
        for (int i = 0; i < 256; ++i)
            in[i] = (unsigned char)(i ^ r ^ me);
        REQUIRE(cm_buffer_write(b, 0, in, sizeof in) == CM_OK);
        REQUIRE(cm_buffer_read(b, 0, out, sizeof out) == CM_OK);
        REQUIRE(memcmp(in, out, sizeof in) == 0);

        /* A wrapped host buffer whose release callback must run once. */
        static _Thread_local int32_t host[64];
        cm_buffer *w = NULL;
        REQUIRE(cm_buffer_wrap_host(device,
                                    &(cm_host_memory_desc){
                                        .data = host, .size = sizeof host, .release = on_release},
                                    &w) == CM_OK);

        cm_fence *f = NULL;
        REQUIRE(cm_stream_signal(stream, &f) == CM_OK);
        cm_fence *old = atomic_exchange(&published[me], f);
        cm_fence_release(old);
        /* Wait, on the device, for another thread's latest fence. */
        int other = (int)(rand_r(&seed) % THREADS);
        cm_fence *theirs = atomic_exchange(&published[other], NULL);
        if (theirs != NULL) {
            REQUIRE(cm_stream_wait(stream, theirs) == CM_OK);
            REQUIRE(cm_fence_wait(theirs, UINT64_MAX) == CM_OK);
            cm_fence_release(theirs);
        }
        cm_buffer_release(w);
        cm_buffer_release(b);

        /* Ops on this thread's stream: read the shared input, write this
         * thread's slice of the shared output, read it back on the host. */
        cm_tensor *mine = NULL;
        REQUIRE(cm_tensor_slice(shared_out, 0, me * SLICE, (me + 1) * SLICE, 1, &mine) == CM_OK);
        REQUIRE(cm_copy(shared_in, mine, stream) == CM_OK);
        REQUIRE(cm_unary(CM_UNARY_NEG, mine, mine, stream) == CM_OK);
        float v = 0;
        REQUIRE(cm_tensor_get_element(mine, (int64_t[]){r % SLICE}, CM_FLOAT32, &v) == CM_OK);
        REQUIRE(v == -7.0f);
        if (r % 8 == me) {
            /* A short-lived stream, while other threads synchronize. */
            cm_stream *brief = NULL;
            REQUIRE(cm_stream_create(device, &brief) == CM_OK);
            const double two = 2.0;
            REQUIRE(cm_fill(mine, CM_FLOAT64, &two, brief) == CM_OK);
            REQUIRE(cm_stream_release(brief) == CM_OK); /* waits for the fill */
        } else if (r % 8 == (me + 4) % 8) {
            REQUIRE(cm_device_synchronize(device) == CM_OK);
        }
        cm_tensor_release(mine);
    }
    REQUIRE(cm_stream_synchronize(stream) == CM_OK);
    cm_stream_release(stream);
    return NULL;
}

int main(void) {
    /* Any Metal: Apple's on a Mac, softmetal (CMETAL_METAL_FRAMEWORK)
     * elsewhere; skipped only where none opens. */
    if (cm_device_open(CM_DEVICE_METAL, 0, &device) != CM_OK) {
        printf("stress_metal: 0 passed, 0 failed, 1 skipped (no Metal device: %s)\n",
               cm_last_error());
        return 0;
    }
    REQUIRE(cm_tensor_create(
                device,
                &(cm_tensor_desc){.dtype = CM_FLOAT32, .ndim = 1, .shape = (int64_t[]){SLICE}},
                &shared_in) == CM_OK);
    REQUIRE(cm_tensor_create(device,
                             &(cm_tensor_desc){.dtype = CM_FLOAT32,
                                               .ndim = 1,
                                               .shape = (int64_t[]){THREADS * SLICE}},
                             &shared_out) == CM_OK);
    const double seven = 7.0;
    REQUIRE(cm_fill(shared_in, CM_FLOAT64, &seven, NULL) == CM_OK);
    REQUIRE(cm_device_synchronize(device) == CM_OK);
    pthread_t th[THREADS];
    for (int t = 0; t < THREADS; ++t)
        REQUIRE(pthread_create(&th[t], NULL, worker, (void *)(intptr_t)t) == 0);
    for (int t = 0; t < THREADS; ++t)
        pthread_join(th[t], NULL);
    for (int t = 0; t < THREADS; ++t)
        cm_fence_release(atomic_exchange(&published[t], NULL));
    for (int64_t i = 0; i < THREADS * SLICE; ++i) { /* the last round's values */
        float v = 0;
        REQUIRE(cm_tensor_get_element(shared_out, (int64_t[]){i}, CM_FLOAT32, &v) == CM_OK);
        REQUIRE(v == ((ROUNDS - 1) % 8 == i / SLICE ? 2.0f : -7.0f));
    }
    cm_tensor_release(shared_in);
    cm_tensor_release(shared_out);
    int failed = atomic_load(&released) != THREADS * ROUNDS;
    if (failed)
        fprintf(stderr, "release callbacks ran %d times, expected %d\n", atomic_load(&released),
                THREADS * ROUNDS);
    cm_device_release(device);
    printf("stress_metal: %d passed, %d failed\n", 1 - failed, failed);
    return failed;
}
