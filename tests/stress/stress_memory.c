/* SPDX-License-Identifier: MIT */
/* The Metal device's buffer cache under threads (softmetal on Linux):
 * threads create, use and release buffers and tensors of a few sizes and
 * storage modes on one device while others change the cache and memory
 * limits, clear the cache, reset the peak and read the counts. At the end
 * every count must add up. Plain program; ctest runs it,
 * tools/ci/stage-35-tsan.sh runs it under ThreadSanitizer. */
#include <cmetal/cmetal.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#define THREADS 4
#define ROUNDS 60

#define REQUIRE(cond)                                                                              \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #cond, cm_last_error()); \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static cm_device *device;
static atomic_long requests;

static void *worker(void *p) {
    const int me = (int)(intptr_t)p;
    unsigned seed = (unsigned)me * 2654435761u + 1;
    for (int r = 0; r < ROUNDS; ++r) {
        const int64_t n = 256 + 64 * (int64_t)(rand_r(&seed) % 40);
        cm_tensor *t = NULL;
        REQUIRE(cm_tensor_create(device,
                                 &(cm_tensor_desc){.dtype = CM_INT32, .ndim = 1, .shape = &n},
                                 &t) == CM_OK);
        const int32_t v = me * 1000 + r;
        REQUIRE(cm_fill(t, CM_INT32, &v, NULL) == CM_OK);
        int32_t back = -1;
        REQUIRE(cm_tensor_get_element(t, &(int64_t){n - 1}, CM_INT32, &back) == CM_OK);
        REQUIRE(back == v);
        cm_buffer *b = NULL;
        const cm_storage_mode mode = (cm_storage_mode)(1 + rand_r(&seed) % 3);
        REQUIRE(cm_buffer_create(device, &(cm_buffer_desc){.size = (size_t)n * 4, .storage = mode},
                                 &b) == CM_OK);
        REQUIRE(cm_buffer_write(b, 0, &v, sizeof v) == CM_OK);
        atomic_fetch_add(&requests, 2);
        cm_memory_info m;
        REQUIRE(cm_device_get_memory_info(device, &m) == CM_OK);
        REQUIRE(m.peak_bytes >= m.active_bytes || me != 0);
        switch (rand_r(&seed) % 8) {
        case 0: REQUIRE(cm_device_clear_cache(device) == CM_OK); break;
        case 1:
            REQUIRE(cm_device_set_cache_limit(device, (uint64_t)(rand_r(&seed) % 3) << 16, NULL) ==
                    CM_OK);
            break;
        case 2: REQUIRE(cm_device_reset_peak_memory(device) == CM_OK); break;
        default: break;
        }
        cm_buffer_release(b);
        cm_tensor_release(t);
    }
    return NULL;
}

int main(void) {
    if (cm_device_open(CM_DEVICE_METAL, 0, &device) != CM_OK) {
        printf("stress_memory: no Metal device (%s), nothing to do\n", cm_last_error());
        return 0;
    }
    pthread_t th[THREADS];
    for (int i = 0; i < THREADS; ++i)
        REQUIRE(pthread_create(&th[i], NULL, worker, (void *)(intptr_t)i) == 0);
    for (int i = 0; i < THREADS; ++i)
        pthread_join(th[i], NULL);
    cm_memory_info m;
    REQUIRE(cm_device_get_memory_info(device, &m) == CM_OK);
    REQUIRE(m.active_bytes == 0);
    REQUIRE(m.cache_hits + m.cache_misses == (uint64_t)atomic_load(&requests));
    REQUIRE(m.allocations <= m.cache_misses); /* a heap serves many */
    REQUIRE(m.cached_bytes <= m.cache_limit);
    REQUIRE(cm_device_clear_cache(device) == CM_OK);
    REQUIRE(cm_device_get_memory_info(device, &m) == CM_OK);
    REQUIRE(m.cached_bytes == 0);
    REQUIRE(m.heaps == 0 && m.heap_bytes == 0); /* emptied heaps went with the cache */
    cm_device_release(device);
    printf("stress_memory: %d threads x %d rounds, %llu hits, %llu misses\n", THREADS, ROUNDS,
           (unsigned long long)m.cache_hits, (unsigned long long)m.cache_misses);
    return 0;
}
