/* SPDX-License-Identifier: MIT */
/* The Metal backend: devices, buffers of every storage mode, wrapping,
 * streams and fences. On Linux it runs on softmetal (CMETAL_METAL_FRAMEWORK
 * points at libsoftmetal.so), whose counters also check that no Metal
 * object leaks; on a Mac the same tests run on Apple's Metal, without the
 * softmetal-only checks. */
#include <cmetal/cmetal.h>

#include <criterion/criterion.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "softmetal_hooks.h"

#include <cmetal/metal.h>

#include "objc/bridge.h" /* the device's own answer, through the runtime's bridge */

static bool on_softmetal(void) {
    return getenv("CMETAL_METAL_FRAMEWORK") != NULL;
}

static cm_device *metal(void) {
    cm_device *d = NULL;
    cr_assert_eq(cm_device_open(CM_DEVICE_METAL, 0, &d), CM_OK, "%s", cm_last_error());
    return d;
}

Test(metal, device_opens_and_reports_softmetal) {
    cm_device *d = metal();
    cm_device_info info;
    cr_assert_eq(cm_device_get_info(d, &info), CM_OK);
    cr_assert_eq(info.type, CM_DEVICE_METAL);
    cr_assert(strlen(info.name) > 0);
    cr_assert_eq(info.software, on_softmetal(),
                 "software only when loaded from CMETAL_METAL_FRAMEWORK");
    /* What the MTLDevice itself reports (Intel Macs with a discrete GPU
     * have no unified memory; softmetal and Apple silicon have). */
    void *mtl = NULL;
    cr_assert_eq(cm_device_get_metal_device(d, &mtl), CM_OK, "%s", cm_last_error());
    cr_assert_eq(info.unified_memory, cm__msg_hasUnifiedMemory((cm__id)mtl),
                 "unified_memory is the device's hasUnifiedMemory");
    /* A 24-byte struct return (MTLSize): three sane dimensions, whatever
     * the GPU's limits (1024 on Apple silicon; others and validation may
     * give less). */
    const uint64_t *tg = info.max_threads_per_threadgroup;
    cr_assert(tg[0] >= 1 && tg[0] <= 4096 && tg[1] >= 1 && tg[1] <= tg[0] && tg[2] >= 1 &&
                  tg[2] <= tg[0],
              "maxThreadsPerThreadgroup = {%llu, %llu, %llu}", (unsigned long long)tg[0],
              (unsigned long long)tg[1], (unsigned long long)tg[2]);
    /* Each family bit is the device's own supportsFamily: answer. */
    static const struct {
        uint32_t bit;
        long family;
    } families[] = {{CM_GPU_FAMILY_APPLE7, 1007},
                    {CM_GPU_FAMILY_APPLE8, 1008},
                    {CM_GPU_FAMILY_APPLE9, 1009},
                    {CM_GPU_FAMILY_MAC2, 2002},
                    {CM_GPU_FAMILY_METAL3, 5001}};
    for (size_t i = 0; i < sizeof families / sizeof families[0]; ++i)
        cr_assert_eq((info.gpu_families & families[i].bit) != 0,
                     cm__msg_supportsFamily((cm__id)mtl, families[i].family) != 0,
                     "families 0x%x: bit of MTLGPUFamily %ld", info.gpu_families,
                     families[i].family);
    cr_assert_gt(info.max_buffer_length, 0);
    void *native = NULL;
    cr_assert_eq(cm_device_get_metal_device(d, &native), CM_OK);
    cr_assert_not_null(native);
    uint32_t n = 0;
    cr_assert_eq(cm_device_count(CM_DEVICE_METAL, &n), CM_OK);
    cr_assert_geq(n, 1);
    EXPECT_FAIL(cm_device_open(CM_DEVICE_METAL, n, &(cm_device *){NULL}), CM_ERR_NO_DEVICE,
                "Metal devices");
    cm_device_release(d);
}

Test(metal, default_device_is_metal_when_present) {
    unsetenv("CMETAL_DEVICE");
    cm_device *d = NULL;
    cr_assert_eq(cm_device_open(CM_DEVICE_DEFAULT, 0, &d), CM_OK);
    cm_device_info info;
    cm_device_get_info(d, &info);
    cr_assert_eq(info.type, CM_DEVICE_METAL);
    cm_device_release(d);
}

Test(metal, every_storage_mode_round_trips_bytes) {
    cm_device *d = metal();
    const cm_storage_mode modes[] = {CM_STORAGE_SHARED, CM_STORAGE_MANAGED, CM_STORAGE_PRIVATE};
    for (int m = 0; m < 3; ++m) {
        cm_buffer *b = NULL;
        cr_assert_eq(cm_buffer_create(d, &(cm_buffer_desc){.size = 4096, .storage = modes[m]}, &b),
                     CM_OK, "%s", cm_last_error());
        cm_buffer_info info;
        cm_buffer_get_info(b, &info);
        cr_assert_eq(info.storage, modes[m]);
        cr_assert_not_null(info.native);
        cr_assert_eq(info.host == NULL, modes[m] == CM_STORAGE_PRIVATE);
        unsigned char in[1000], out[1000];
        for (int i = 0; i < 1000; ++i)
            in[i] = (unsigned char)(i * 7 + m);
        cr_assert_eq(cm_buffer_write(b, 96, in, sizeof in), CM_OK, "%s", cm_last_error());
        memset(out, 0, sizeof out);
        cr_assert_eq(cm_buffer_read(b, 96, out, sizeof out), CM_OK, "%s", cm_last_error());
        cr_assert_eq(memcmp(in, out, sizeof in), 0, "storage mode %d", modes[m]);
        cm_buffer_release(b);
    }
    cm_device_release(d);
}

/* Blits need offsets and sizes in multiples of 4 on macOS (strict
 * softmetal fails the command buffer otherwise): private transfers at any
 * offset and size, in buffers of any size, keep every other byte. */
Test(metal, private_transfers_work_at_any_offset_and_size) {
    cm_device *d = metal();
    for (size_t buffer_size = 13; buffer_size <= 16; ++buffer_size) {
        cm_buffer *b = NULL;
        CHECK(cm_buffer_create(
            d, &(cm_buffer_desc){.size = buffer_size, .storage = CM_STORAGE_PRIVATE}, &b));
        unsigned char model[16];
        for (size_t i = 0; i < buffer_size && i < sizeof model; ++i) /* GCC -O3 */
            model[i] = (unsigned char)(200 + i);
        CHECK(cm_buffer_write(b, 0, model, buffer_size));
        for (size_t offset = 0; offset < buffer_size; ++offset)
            for (size_t size = 1; offset + size <= buffer_size; size += 2) {
                unsigned char in[16], out[16];
                for (size_t i = 0; i < size; ++i)
                    in[i] = (unsigned char)(offset * 16 + size + i);
                CHECK(cm_buffer_write(b, offset, in, size));
                memcpy(model + offset, in, size);
                CHECK(cm_buffer_read(b, offset, out, size));
                cr_assert_eq(memcmp(out, in, size), 0, "read back [%zu, +%zu)", offset, size);
                CHECK(cm_buffer_read(b, 0, out, buffer_size));
                cr_assert_eq(memcmp(out, model, buffer_size), 0,
                             "write [%zu, +%zu) of a %zu-byte buffer kept the other bytes", offset,
                             size, buffer_size);
            }
        cm_buffer_release(b);
    }
    cm_device_release(d);
}

/* The transfers' internals (runtime/metal/metal_internal.h): the staging
 * chunk, the staging buffers a device made, and a fault on one chunk. */
#define STAGING_CHUNK ((size_t)4 << 20)
uint64_t cm__metal_staging_made(cm_device *device);
void cm__metal_set_transfer_fault(uint64_t chunk);

static void fill_pattern(unsigned char *p, size_t n, unsigned seed) {
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; ++i) {
        x = x * 1664525u + 1013904223u;
        p[i] = (unsigned char)(x >> 24);
    }
}

/* Large transfers go in chunks of 4 MiB through two staging buffers in
 * turn: every byte lands where it belongs at sizes and offsets around the
 * chunk boundaries (cut at multiples of 4 MiB from the offset rounded
 * down to 4), and the bytes around the range stay. */
Test(metal, private_transfers_split_in_chunks_keep_every_byte) {
    cm_device *d = metal();
    const size_t C = STAGING_CHUNK, buffer_size = 3 * C + 64;
    cm_buffer *b = NULL;
    CHECK(cm_buffer_create(d, &(cm_buffer_desc){.size = buffer_size, .storage = CM_STORAGE_PRIVATE},
                           &b));
    unsigned char *model = malloc(buffer_size), *in = malloc(buffer_size),
                  *out = malloc(buffer_size + 1);
    cr_assert(model != NULL && in != NULL && out != NULL);
    fill_pattern(model, buffer_size, 1);
    CHECK(cm_buffer_write(b, 0, model, buffer_size));
    const struct {
        size_t offset, size;
    } cases[] = {
        {0, C - 1},     {0, C},         {0, C + 1},      {1, C - 1},         {1, C},
        {3, C - 3},     {3, C - 2},     {2, 2 * C + 5},  {C - 2, 4},         {C - 1, 3},
        {C + 3, C + 1}, {5, 3 * C + 7}, {0, 3 * C + 64}, {2 * C - 4, C + 9}, {6, 2 * C - 13},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
        const size_t offset = cases[i].offset, size = cases[i].size;
        fill_pattern(in, size, (unsigned)i + 2);
        CHECK(cm_buffer_write(b, offset, in, size));
        memcpy(model + offset, in, size);
        memset(out, 0xa5, buffer_size + 1);
        CHECK(cm_buffer_read(b, offset, out, size));
        cr_assert_eq(memcmp(out, in, size), 0, "read back [%zu, +%zu)", offset, size);
        cr_assert_eq(out[size], 0xa5, "the read wrote past its %zu bytes", size);
        CHECK(cm_buffer_read(b, 0, out, buffer_size));
        cr_assert_eq(memcmp(out, model, buffer_size), 0,
                     "write [%zu, +%zu) of the %zu-byte buffer kept the other bytes", offset, size,
                     buffer_size);
    }
    free(model);
    free(in);
    free(out);
    cm_buffer_release(b);
    cm_device_release(d);
}

/* A device keeps two staging buffers of one chunk: once warm, transfers
 * of any size (more than the 64 MiB that a per-call staging buffer used
 * to be made for, too) make none, on any Metal. On softmetal the staging
 * memory held between calls is counted too: at most two chunks. */
Test(metal, warm_private_transfers_make_no_staging_buffer) {
    cm_device *d = metal();
    const size_t big = (size_t)80 << 20;
    cm_buffer *b = NULL;
    CHECK(cm_buffer_create(d, &(cm_buffer_desc){.size = big, .storage = CM_STORAGE_PRIVATE}, &b));
    unsigned char *host = malloc(big), *back = malloc(big);
    cr_assert(host != NULL && back != NULL);
    fill_pattern(host, big, 7);
    CHECK(cm_buffer_write(b, 0, host, 3 * STAGING_CHUNK)); /* warm: fills the pool */
    const uint64_t made = cm__metal_staging_made(d);
    cr_assert_eq(made, 2, "two staging buffers for a transfer of three chunks, %" PRIu64, made);
    const size_t sizes[] = {1,      4, 1000, STAGING_CHUNK - 1, STAGING_CHUNK + 1, (size_t)48 << 20,
                            big - 1};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; ++i) {
        const size_t offset = sizes[i] < big ? (big - sizes[i]) / 3 : 0;
        CHECK(cm_buffer_write(b, offset, host, sizes[i]));
        CHECK(cm_buffer_read(b, offset, back, sizes[i]));
        cr_assert_eq(memcmp(host, back, sizes[i]), 0, "%zu bytes at %zu", sizes[i], offset);
        cr_assert_eq(cm__metal_staging_made(d), made,
                     "a transfer of %zu bytes made a staging "
                     "buffer",
                     sizes[i]);
    }
    cm_buffer_release(b);
    CHECK(cm_device_clear_cache(d)); /* the buffer cache keeps b's MTLBuffer */
    free(host);
    free(back);
    if (on_softmetal()) {
        struct softmetal_stats st;
        sm_stats(&st);
        cr_assert_leq(st.live_buffer_bytes, (long)(2 * STAGING_CHUNK),
                      "%ld bytes of buffers live with no buffer of ours left: at most the two "
                      "pooled staging buffers",
                      st.live_buffer_bytes);
    }
    cm_device_release(d);
}

/* A chunk whose command buffer fails fails the call, naming the chunk and
 * Metal's error, once: the staging buffers of the failed call are dropped
 * (nothing leaks), and the next transfer works. */
Test(metal, a_failed_chunk_fails_the_transfer_once_and_leaks_nothing) {
    skip_under_debug_layer();
    cm_device *d = metal();
    const size_t size = 2 * STAGING_CHUNK + 100;
    cm_buffer *b = NULL;
    CHECK(cm_buffer_create(d, &(cm_buffer_desc){.size = size + 1, .storage = CM_STORAGE_PRIVATE},
                           &b));
    unsigned char *host = malloc(size), *back = malloc(size);
    cr_assert(host != NULL && back != NULL);
    fill_pattern(host, size, 3);
    CHECK(cm_buffer_write(b, 1, host, size)); /* warm: the pool holds two */
    const long buffers = sm_live("SMBuffer");
    for (int to_device = 0; to_device < 2; ++to_device)
        for (uint64_t chunk = 0; chunk < 3; ++chunk) {
            cm__metal_set_transfer_fault(chunk);
            char needle[64];
            snprintf(needle, sizeof needle, "(chunk %" PRIu64 " of 3): ", chunk + 1);
            if (to_device)
                EXPECT_FAIL(cm_buffer_write(b, 1, host, size), CM_ERR_DEVICE, needle);
            else
                EXPECT_FAIL(cm_buffer_read(b, 1, back, size), CM_ERR_DEVICE, needle);
            cr_assert(strstr(cm_last_error(), "multiples of 4") != NULL,
                      "Metal's error is in the message: %s", cm_last_error());
            cr_assert(strstr(cm_last_error(), to_device ? "cm_buffer_write: "
                                                        : "cm_buffer_read: ") == cm_last_error(),
                      "%s", cm_last_error());
            CHECK(cm_device_synchronize(d)); /* reported once, by the transfer */
            cr_assert_eq(sm_live("SMBuffer"), buffers - 2,
                         "the failed call's two staging buffers are released, not pooled");
            memset(back, 0, size);
            CHECK(cm_buffer_write(b, 1, host, size));
            CHECK(cm_buffer_read(b, 1, back, size));
            cr_assert_eq(memcmp(host, back, size), 0, "a transfer after the failure works");
            cr_assert_eq(sm_live("SMBuffer"), buffers, "the pool is full again");
        }
    free(host);
    free(back);
    cm_buffer_release(b);
    cm_device_release(d);
}

/* Threads transferring at once on one device share its default stream
 * and the pool of two (the others make their own staging buffers). */
typedef struct transfer_job {
    cm_device *device;
    unsigned seed;
    bool ok;
} transfer_job;

static void *transfer_thread(void *p) {
    transfer_job *job = p;
    const size_t size = 2 * STAGING_CHUNK + 13;
    cm_buffer *b = NULL;
    unsigned char *in = malloc(size), *out = malloc(size);
    job->ok = in != NULL && out != NULL &&
              cm_buffer_create(job->device,
                               &(cm_buffer_desc){.size = size + 3, .storage = CM_STORAGE_PRIVATE},
                               &b) == CM_OK;
    for (int r = 0; r < 6 && job->ok; ++r) {
        fill_pattern(in, size, job->seed * 100 + (unsigned)r);
        job->ok = cm_buffer_write(b, 3, in, size) == CM_OK &&
                  cm_buffer_read(b, 3, out, size) == CM_OK && memcmp(in, out, size) == 0;
    }
    cm_buffer_release(b);
    free(in);
    free(out);
    return NULL;
}

Test(metal, private_transfers_on_several_threads_at_once) {
    cm_device *d = metal();
    transfer_job jobs[3];
    pthread_t threads[3];
    for (unsigned i = 0; i < 3; ++i) {
        jobs[i] = (transfer_job){d, i + 1, false};
        cr_assert_eq(pthread_create(&threads[i], NULL, transfer_thread, &jobs[i]), 0);
    }
    for (unsigned i = 0; i < 3; ++i) {
        pthread_join(threads[i], NULL);
        cr_assert(jobs[i].ok, "thread %u's transfers round-tripped", i);
    }
    cm_device_release(d);
}

/* DLPack copies of a private tensor read its extent, which a view may
 * start and end anywhere. */
Test(metal, private_views_export_to_the_cpu_at_any_offset) {
    cm_device *d = metal();
    cm_tensor *t = NULL;
    CHECK(cm_tensor_create(
        d,
        &(cm_tensor_desc){
            .dtype = CM_UINT8, .ndim = 1, .shape = (int64_t[]){11}, .storage = CM_STORAGE_PRIVATE},
        &t));
    unsigned char bytes[11];
    for (int i = 0; i < 11; ++i)
        bytes[i] = (unsigned char)(i + 1);
    cm_tensor_info info;
    CHECK(cm_tensor_get_info(t, &info));
    CHECK(cm_buffer_write(info.buffer, 0, bytes, sizeof bytes));
    cm_tensor *view = NULL;
    CHECK(cm_tensor_slice(t, 0, 3, 10, 2, &view)); /* elements 3, 5, 7, 9 */
    cm_dlpack_managed m;
    CHECK(cm_dlpack_export(view, &(cm_dlpack_export_desc){.device_type = kDLCPU}, &m));
    const DLTensor *dl = &m.legacy->dl_tensor;
    const unsigned char *data = (const unsigned char *)dl->data + dl->byte_offset;
    for (int i = 0; i < 4; ++i)
        cr_assert_eq(data[i * (dl->strides != NULL ? dl->strides[0] : 1)], bytes[3 + 2 * i]);
    m.legacy->deleter(m.legacy);
    cm_tensor_release(view);
    cm_tensor_release(t);
    cm_device_release(d);
}

Test(metal, private_storage_refuses_host_access_clearly) {
    cm_device *d = metal();
    cm_tensor *t = NULL;
    cr_assert_eq(cm_tensor_create(d,
                                  &(cm_tensor_desc){.dtype = CM_FLOAT32,
                                                    .ndim = 1,
                                                    .shape = (int64_t[]){8},
                                                    .storage = CM_STORAGE_PRIVATE},
                                  &t),
                 CM_OK);
    const void *p = NULL;
    EXPECT_FAIL(cm_tensor_host_read(t, CM_FLOAT32, &p), CM_ERR_NOT_HOST_VISIBLE,
                "private storage on the metal device is not visible to the host");
    float v = 1;
    EXPECT_FAIL(cm_tensor_set_element(t, (int64_t[]){0}, CM_FLOAT32, &v), CM_ERR_NOT_HOST_VISIBLE,
                "not visible");
    cm_tensor_release(t);
    cm_device_release(d);
}

Test(metal, zero_size_buffers_exist) {
    cm_device *d = metal();
    cm_buffer *b = NULL;
    cr_assert_eq(cm_buffer_create(d, &(cm_buffer_desc){0}, &b), CM_OK);
    cm_buffer_info info;
    cm_buffer_get_info(b, &info);
    cr_assert_eq(info.size, 0);
    cr_assert_not_null(info.native);
    cm_buffer_release(b);
    EXPECT_FAIL(cm_buffer_create(d, &(cm_buffer_desc){.size = SIZE_MAX}, &b), CM_ERR_OUT_OF_MEMORY,
                "exceeds the device's maxBufferLength");
    cr_assert_null(b);
    cm_device_release(d);
}

static atomic_int released;
static void count_release(void *ctx) {
    (void)ctx;
    atomic_fetch_add(&released, 1);
}

Test(metal, aligned_host_memory_wraps_without_a_copy) {
    cm_device *d = metal();
    void *mem = aligned_alloc(CM_METAL_PAGE_SIZE, 2 * CM_METAL_PAGE_SIZE);
    memset(mem, 0x3c, 2 * CM_METAL_PAGE_SIZE);
    atomic_store(&released, 0);
    cm_buffer *b = NULL;
    cr_assert_eq(cm_buffer_wrap_host(d,
                                     &(cm_host_memory_desc){.data = mem,
                                                            .size = 2 * CM_METAL_PAGE_SIZE,
                                                            .copy = CM_COPY_NEVER,
                                                            .release = count_release},
                                     &b),
                 CM_OK, "%s", cm_last_error());
    cm_buffer_info info;
    cm_buffer_get_info(b, &info);
    cr_assert_eq(info.host, mem, "the MTLBuffer's contents are the caller's memory");
    cr_assert_eq(info.flags & CM_BUFFER_COPIED, 0);
    cr_assert_eq(atomic_load(&released), 0);
    cm_buffer_release(b);
    /* when Metal deallocates the buffer: at the release or a little later */
    cr_assert_eq(sm_await_count(&released, 1), 1, "deallocator ran the release callback once");
    free(mem);
    cm_device_release(d);
}

Test(metal, unaligned_host_memory_is_refused_or_copied_as_asked) {
    cm_device *d = metal();
    char *mem = malloc(5000);
    memset(mem, 9, 5000);
    atomic_store(&released, 0);
    cm_buffer *b = NULL;
    EXPECT_FAIL(cm_buffer_wrap_host(d,
                                    &(cm_host_memory_desc){.data = mem + 1,
                                                           .size = 4000,
                                                           .copy = CM_COPY_NEVER,
                                                           .release = count_release},
                                    &b),
                CM_ERR_COPY_REQUIRED, "aligned to the host's page size");
    cr_assert_null(b);
    cr_assert_eq(atomic_load(&released), 0, "never called on failure");
    cr_assert_eq(
        cm_buffer_wrap_host(
            d, &(cm_host_memory_desc){.data = mem + 1, .size = 4000, .release = count_release}, &b),
        CM_OK);
    cr_assert_eq(atomic_load(&released), 1, "copied: the caller's memory is released at once");
    cm_buffer_info info;
    cm_buffer_get_info(b, &info);
    cr_assert(info.flags & CM_BUFFER_COPIED);
    cr_assert_neq(info.host, mem + 1);
    cr_assert_eq(((char *)info.host)[3999], 9);
    cm_buffer_release(b);
    cr_assert_eq(atomic_load(&released), 1);
    free(mem);
    cm_device_release(d);
}

Test(metal, foreign_mtlbuffers_are_retained_and_released_once) {
    cm_device *d = metal();
    cm_buffer *own = NULL, *wrapped = NULL;
    cr_assert_eq(cm_buffer_create(d, &(cm_buffer_desc){.size = 256}, &own), CM_OK);
    cm_buffer_info info;
    cm_buffer_get_info(own, &info);
    long buffers = on_softmetal() ? sm_live("SMBuffer") : 0;
    atomic_store(&released, 0);
    cr_assert_eq(
        cm_buffer_wrap_metal(
            d, &(cm_metal_buffer_desc){.buffer = info.native, .release = count_release}, &wrapped),
        CM_OK, "%s", cm_last_error());
    cm_buffer_release(own); /* the wrap keeps the MTLBuffer alive */
    if (on_softmetal())
        cr_assert_eq(sm_live("SMBuffer"), buffers);
    cm_buffer_info winfo;
    cm_buffer_get_info(wrapped, &winfo);
    cr_assert_eq(winfo.native, info.native);
    cr_assert_eq(winfo.size, 256);
    cr_assert(winfo.flags & CM_BUFFER_FOREIGN);
    cm_buffer_release(wrapped);
    cr_assert_eq(atomic_load(&released), 1);
    if (on_softmetal())
        cr_assert_eq(sm_live("SMBuffer"), buffers - 1, "the MTLBuffer died with its last owner");
    EXPECT_FAIL(cm_buffer_wrap_metal(d, &(cm_metal_buffer_desc){0}, &wrapped),
                CM_ERR_INVALID_ARGUMENT, "desc->buffer = NULL");
    cm_device *cpu = NULL;
    cm_device_open(CM_DEVICE_CPU, 0, &cpu);
    EXPECT_FAIL(cm_buffer_wrap_metal(cpu, &(cm_metal_buffer_desc){.buffer = info.native}, &wrapped),
                CM_ERR_UNSUPPORTED, "not Metal");
    cm_device_release(cpu);
    cm_device_release(d);
}

Test(metal, a_full_session_leaks_no_metal_object) {
    if (!on_softmetal())
        cr_skip_test("object counts need softmetal");
    struct softmetal_stats before, after;
    {
        cm_device *d = metal(); /* loads the framework */
        cm_device_release(d);
    }
    sm_stats(&before);
    cm_device *d = metal();
    cm_stream *s = NULL;
    cm_stream_create(d, &s);
    cm_buffer *b = NULL;
    cm_buffer_create(d, &(cm_buffer_desc){.size = 1024, .storage = CM_STORAGE_PRIVATE}, &b);
    char bytes[1024] = {1};
    cr_assert_eq(cm_buffer_write(b, 0, bytes, sizeof bytes), CM_OK);
    cr_assert_eq(cm_buffer_read(b, 0, bytes, sizeof bytes), CM_OK);
    cm_fence *f = NULL;
    cm_stream_signal(s, &f);
    cm_fence_wait(f, UINT64_MAX);
    cm_fence_release(f);
    cm_buffer_release(b);
    cm_stream_release(s);
    cm_device_release(d);
    sm_stats(&after);
    cr_assert_eq(after.live_objects, before.live_objects, "%ld Metal objects outlived the session",
                 after.live_objects - before.live_objects);
    cr_assert_gt(after.allocs, before.allocs, "the session did make objects");
}

/* ------------------------------------------------------------ ops on streams */

static cm_tensor *floats(cm_device *d, int64_t n) {
    cm_tensor *t = NULL;
    cr_assert_eq(
        cm_tensor_create(
            d, &(cm_tensor_desc){.dtype = CM_FLOAT32, .ndim = 1, .shape = (int64_t[]){n}}, &t),
        CM_OK, "%s", cm_last_error());
    return t;
}

static void expect_all(const cm_tensor *t, int64_t begin, int64_t end, float want) {
    const void *base = NULL;
    cr_assert_eq(cm_tensor_host_read(t, CM_FLOAT32, &base), CM_OK, "%s", cm_last_error());
    const float *host = base; /* compact: made by floats() */
    for (int64_t i = begin; i < end; ++i)
        if (host[i] != want)
            cr_assert_fail("element %ld is %g, want %g", (long)i, (double)host[i], (double)want);
}

Test(metal, ops_run_on_the_stream_they_name) {
    cm_device *d = metal();
    cm_stream *s = NULL, *dflt = NULL;
    cr_assert_eq(cm_stream_create(d, &s), CM_OK);
    cm_device_get_stream(d, &dflt);
    uint64_t s0 = 0, d0 = 0, s1 = 0, d1 = 0;
    cm_stream_get_submissions(s, &s0);
    cm_stream_get_submissions(dflt, &d0);
    cm_tensor *x = floats(d, 1000), *y = floats(d, 1000);
    const double two = 2.0;
    cr_assert_eq(cm_fill(x, CM_FLOAT64, &two, s), CM_OK, "%s", cm_last_error());
    cr_assert_eq(cm_unary(CM_UNARY_SQUARE, x, y, s), CM_OK, "%s", cm_last_error());
    cr_assert_eq(cm_binary(CM_BINARY_ADD, x, y, y, s), CM_OK, "%s", cm_last_error());
    cr_assert_eq(cm_stream_synchronize(s), CM_OK, "%s", cm_last_error());
    cm_stream_get_submissions(s, &s1);
    cm_stream_get_submissions(dflt, &d1);
    cr_assert_eq(s1 - s0, 1, "three ops on the stream, one command buffer");
    cr_assert_eq(d1, d0, "nothing went to the default stream");
    expect_all(y, 0, 1000, 6.0f);
    cm_tensor_release(x);
    cm_tensor_release(y);
    cm_stream_release(s);
    cm_device_release(d);
}

Test(metal, a_stream_of_another_device_is_refused) {
    cm_device *d = metal(), *cpu = NULL;
    cr_assert_eq(cm_device_open(CM_DEVICE_CPU, 0, &cpu), CM_OK);
    cm_stream *cpu_stream = NULL;
    cr_assert_eq(cm_stream_create(cpu, &cpu_stream), CM_OK);
    cm_tensor *x = floats(d, 4), *y = floats(d, 4);
    const double one = 1.0;
    EXPECT_FAIL(cm_fill(x, CM_FLOAT64, &one, cpu_stream), CM_ERR_INVALID_ARGUMENT, "stream = ");
    EXPECT_FAIL(cm_copy(x, y, cpu_stream), CM_ERR_INVALID_ARGUMENT, "different (cpu) device");
    cm_tensor_release(x);
    cm_tensor_release(y);
    cm_stream_release(cpu_stream);
    cm_device_release(cpu);
    cm_device_release(d);
}

/* Stream a makes x slowly; stream b copies it after waiting for a's fence.
 * Without the wait the copy would overtake the work (softmetal runs each
 * queue on its own thread). */
Test(metal, a_fence_orders_ops_on_two_streams) {
    cm_device *d = metal();
    cm_stream *a = NULL, *b = NULL;
    cr_assert_eq(cm_stream_create(d, &a), CM_OK);
    cr_assert_eq(cm_stream_create(d, &b), CM_OK);
    void *queue_a = NULL, *queue_b = NULL;
    cm_stream_get_metal_queue(a, &queue_a);
    cm_stream_get_metal_queue(b, &queue_b);
    cr_assert_neq(queue_a, queue_b, "one command queue per stream");
    const int64_t n = 1 << 20;
    cm_tensor *x = floats(d, n), *y = floats(d, n);
    const double zero = 0.0, one = 1.0;
    cr_assert_eq(cm_fill(y, CM_FLOAT64, &zero, NULL), CM_OK);
    cr_assert_eq(cm_device_synchronize(d), CM_OK);
    cr_assert_eq(cm_fill(x, CM_FLOAT64, &zero, a), CM_OK);
    for (int i = 0; i < 4; ++i) /* cos(0) = 1, then cos(1), ... a chain of work */
        cr_assert_eq(cm_unary(CM_UNARY_COS, x, x, a), CM_OK, "%s", cm_last_error());
    cr_assert_eq(cm_unary(CM_UNARY_SIGN, x, x, a), CM_OK); /* every element 1 */
    cm_fence *f = NULL;
    cr_assert_eq(cm_stream_signal(a, &f), CM_OK, "%s", cm_last_error());
    cr_assert_eq(cm_stream_wait(b, f), CM_OK, "%s", cm_last_error());
    cr_assert_eq(cm_copy(x, y, b), CM_OK, "%s", cm_last_error());
    cr_assert_eq(cm_stream_synchronize(b), CM_OK, "%s", cm_last_error());
    cm_fence_info info;
    cm_fence_get_info(f, &info);
    cr_assert(info.signaled, "b's copy finished, so a's fence had signaled");
    cr_assert_not_null(info.shared_event);
    cr_assert_eq(info.value, 1, "the stream's first signal");
    uint64_t submitted = 0;
    cm_stream_get_submissions(a, &submitted);
    cr_assert_eq(submitted, 1, "six ops and the signal in one command buffer");
    /* Read y's buffer without waiting for a: y was written only by b. */
    expect_all(y, 0, n, (float)one);
    cm_fence_release(f);
    cm_tensor_release(x);
    cm_tensor_release(y);
    cm_stream_release(a);
    cm_stream_release(b);
    cm_device_release(d);
}

/* Host reads wait for the writers on every stream, however many streams
 * share the buffer (past the per-buffer table, the whole device). Stream
 * `slow` does much more work than the others, so that a missing wait for
 * it shows; each stream in turn is the slow one. */
static void host_read_waits_for_writers_on(int nstreams, int slow) {
    cm_device *d = metal();
    const int64_t n = 1 << 18, piece = n / nstreams;
    cm_tensor *x = floats(d, n);
    const double zero = 0.0;
    cr_assert_eq(cm_fill(x, CM_FLOAT64, &zero, NULL), CM_OK);
    cr_assert_eq(cm_device_synchronize(d), CM_OK); /* before other streams write */
    cm_stream *streams[8] = {0};
    for (int i = 0; i < nstreams; ++i) {
        cr_assert_eq(cm_stream_create(d, &streams[i]), CM_OK);
        cm_tensor *part = NULL;
        cr_assert_eq(cm_tensor_slice(x, 0, i * piece, (i + 1) * piece, 1, &part), CM_OK);
        for (int k = 0; i == slow && k < 8; ++k)
            cr_assert_eq(cm_unary(CM_UNARY_COS, part, part, streams[i]), CM_OK);
        const double v = i + 1;
        cr_assert_eq(cm_fill(part, CM_FLOAT64, &v, streams[i]), CM_OK, "%s", cm_last_error());
        cm_tensor_release(part);
    }
    for (int i = 0; i < nstreams; ++i)
        cr_assert_eq(cm_stream_flush(streams[i]), CM_OK);
    for (int i = 0; i < nstreams; ++i)
        expect_all(x, i * piece, (i + 1) * piece, (float)(i + 1));
    for (int i = 0; i < nstreams; ++i)
        cm_stream_release(streams[i]);
    cm_tensor_release(x);
    cm_device_release(d);
}

Test(metal, host_reads_wait_for_writers_on_every_stream) {
    for (int slow = 0; slow < 3; ++slow)
        host_read_waits_for_writers_on(3, slow);
}

Test(metal, host_reads_wait_for_writers_on_more_streams_than_tracked) {
    for (int slow = 0; slow < 8; ++slow)
        host_read_waits_for_writers_on(8, slow);
}

Test(metal, device_synchronize_waits_for_every_stream) {
    cm_device *d = metal();
    cm_stream *s = NULL;
    cr_assert_eq(cm_stream_create(d, &s), CM_OK);
    cm_tensor *x = floats(d, 1 << 16);
    const double three = 3.0;
    cr_assert_eq(cm_fill(x, CM_FLOAT64, &three, s), CM_OK);
    cm_fence *f = NULL;
    cr_assert_eq(cm_stream_signal(s, &f), CM_OK); /* signals after the fill */
    cr_assert_eq(cm_device_synchronize(d), CM_OK, "%s", cm_last_error());
    cm_fence_info info;
    cm_fence_get_info(f, &info);
    cr_assert(info.signaled, "the stream's work finished within cm_device_synchronize");
    cm_fence_release(f);
    cm_tensor_release(x);
    cm_stream_release(s);
    cm_device_release(d);
}
