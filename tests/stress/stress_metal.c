/* Concurrency on the Metal device (softmetal on Linux): threads share one
 * device, make their own streams, move bytes through private buffers,
 * signal fences and wait on each other's, and release everything in random
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

#define REQUIRE(cond)                                                                 \
    do {                                                                              \
        if (!(cond)) {                                                                \
            fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #cond,      \
                    cm_last_error());                                                 \
            exit(1);                                                                  \
        }                                                                             \
    } while (0)

static cm_device *device;
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
        REQUIRE(cm_buffer_create(device, &(cm_buffer_desc){256, CM_STORAGE_PRIVATE}, &b) == CM_OK);
        unsigned char in[256], out[256];
        for (int i = 0; i < 256; ++i)
            in[i] = (unsigned char)(i ^ r ^ me);
        REQUIRE(cm_buffer_write(b, 0, in, sizeof in) == CM_OK);
        REQUIRE(cm_buffer_read(b, 0, out, sizeof out) == CM_OK);
        REQUIRE(memcmp(in, out, sizeof in) == 0);

        /* A wrapped host buffer whose release callback must run once. */
        static _Thread_local int32_t host[64];
        cm_buffer *w = NULL;
        REQUIRE(cm_buffer_wrap_host(device, &(cm_host_memory_desc){.data = host,
                                                                   .size = sizeof host,
                                                                   .release = on_release},
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
    }
    REQUIRE(cm_stream_synchronize(stream) == CM_OK);
    cm_stream_release(stream);
    return NULL;
}

int main(void) {
    if (getenv("CMETAL_METAL_FRAMEWORK") == NULL) {
        printf("stress_metal: 0 passed, 0 failed, 1 skipped (no CMETAL_METAL_FRAMEWORK)\n");
        return 0;
    }
    REQUIRE(cm_device_open(CM_DEVICE_METAL, 0, &device) == CM_OK);
    pthread_t th[THREADS];
    for (int t = 0; t < THREADS; ++t)
        REQUIRE(pthread_create(&th[t], NULL, worker, (void *)(intptr_t)t) == 0);
    for (int t = 0; t < THREADS; ++t)
        pthread_join(th[t], NULL);
    for (int t = 0; t < THREADS; ++t)
        cm_fence_release(atomic_exchange(&published[t], NULL));
    int failed = atomic_load(&released) != THREADS * ROUNDS;
    if (failed)
        fprintf(stderr, "release callbacks ran %d times, expected %d\n", atomic_load(&released),
                THREADS * ROUNDS);
    cm_device_release(device);
    printf("stress_metal: %d passed, %d failed\n", 1 - failed, failed);
    return failed;
}
